/**
 * A device stream over WebSocket as a test sees it (services/edge/ws-device-stream.ts): a real
 * `ws` client on a socket, frames with the flags byte, decoded responses, the server's end of
 * stream (Connect's JSON shape) and the close. Waits are on what arrives, with hang guards only.
 */
import assert from 'node:assert/strict';
import { create, fromBinary, toBinary } from '@bufbuild/protobuf';
import { WebSocket } from 'ws';
import { type ConnectResponse, ConnectRequestSchema, ConnectResponseSchema } from '../../api/gen/ambit/v1/device_pb.js';
import { FLAG_END, FLAG_MESSAGE, WS_BEARER_PREFIX, WS_PATH, WS_SUBPROTOCOL } from '../../services/edge/ws-device-stream.js';

export type RequestInit = Parameters<typeof create<typeof ConnectRequestSchema>>[1];

/** The server's end of stream. */
export interface WsEnd {
  error?: { code: string; message: string; details?: { type: string; value: string }[] };
  metadata?: Record<string, string[]>;
}

export interface WsOpen {
  /** The token: 'protocol' (default) sends it as a subprotocol entry, 'header' as `authorization`. */
  token?: string;
  via?: 'protocol' | 'header';
  /** Extra subprotocols and headers, as given (repeated credentials, missing ambit.v1). */
  protocols?: string[];
  headers?: Record<string, string>;
  path?: string;
}

export class WsDevice {
  readonly messages: ConnectResponse[] = [];
  end: WsEnd | null = null;
  closeCode: number | null = null;
  private waiters: (() => void)[] = [];

  private constructor(readonly ws: WebSocket) {
    ws.on('message', (data: Buffer, isBinary: boolean) => {
      assert.ok(isBinary, 'the server sends binary messages only');
      assert.ok(data.length >= 1, 'every message has its flags byte');
      assert.equal(this.end, null, 'nothing after the end of stream');
      if (data[0] === FLAG_MESSAGE) this.messages.push(fromBinary(ConnectResponseSchema, data.subarray(1)));
      else if (data[0] === FLAG_END) this.end = JSON.parse(data.subarray(1).toString('utf8')) as WsEnd;
      else assert.fail(`unknown flags ${data[0]} from the server`);
      this.wake();
    });
    ws.on('close', (code: number) => {
      this.closeCode = code;
      this.wake();
    });
    ws.on('error', () => this.wake());
  }

  private wake(): void {
    const ws = this.waiters;
    this.waiters = [];
    for (const w of ws) w();
  }

  /** Opens the socket; rejects with the HTTP status when the upgrade is refused. */
  static open(port: number, o: WsOpen = {}): Promise<WsDevice> {
    const protocols = o.protocols ?? [WS_SUBPROTOCOL];
    const headers = { ...o.headers };
    if (o.token !== undefined) {
      if (o.via === 'header') headers.authorization = `Bearer ${o.token}`;
      else protocols.push(`${WS_BEARER_PREFIX}${o.token}`);
    }
    const ws = new WebSocket(`ws://127.0.0.1:${port}${o.path ?? WS_PATH}`, protocols, { headers });
    const device = new WsDevice(ws);
    return new Promise((resolve, reject) => {
      ws.once('open', () => resolve(device));
      ws.once('unexpected-response', (_req, res) => {
        let body = '';
        res.on('data', (c: Buffer) => (body += c.toString('utf8')));
        res.on('end', () => reject(Object.assign(new Error(`upgrade refused: ${res.statusCode} ${body.trim()}`), { status: res.statusCode, body })));
      });
      ws.once('error', (err) => reject(err));
    });
  }

  send(m: RequestInit): void {
    const b = toBinary(ConnectRequestSchema, create(ConnectRequestSchema, m));
    const out = Buffer.alloc(1 + b.length);
    out[0] = FLAG_MESSAGE;
    out.set(b, 1);
    this.ws.send(out);
  }

  sendRaw(data: Buffer | string, binary = true): void {
    this.ws.send(data, { binary });
  }

  halfClose(): void {
    this.ws.send(Buffer.from([FLAG_END]));
  }

  /** Resolves once `check` holds (after each arrival); fails when the socket closes first or after `timeoutMs` (a hang guard). */
  async until(check: () => boolean, what: string, timeoutMs = 5000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!check()) {
      if (this.closeCode !== null) assert.fail(`the socket closed (${this.closeCode}) before ${what}; end: ${JSON.stringify(this.end)}`);
      const left = deadline - Date.now();
      if (left <= 0) assert.fail(`timed out waiting for ${what}`);
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, left);
        this.waiters.push(() => {
          clearTimeout(t);
          resolve();
        });
      });
    }
  }

  /** The first response of `kind` at or after index `from`. */
  async next(kind: ConnectResponse['message']['case'], from = 0): Promise<ConnectResponse> {
    let found: ConnectResponse | undefined;
    await this.until(() => (found = this.messages.slice(from).find((m) => m.message.case === kind)) !== undefined, `a ${kind}`);
    return found!;
  }

  /** Waits for the server's end of stream and the close; returns the end. */
  async ended(timeoutMs = 5000): Promise<WsEnd> {
    await this.closed(timeoutMs);
    assert.notEqual(this.end, null, `the server closed (${this.closeCode}) without its end of stream`);
    return this.end!;
  }

  /** Waits for the socket to close; returns the close code. */
  async closed(timeoutMs = 5000): Promise<number> {
    const deadline = Date.now() + timeoutMs;
    while (this.closeCode === null) {
      const left = deadline - Date.now();
      if (left <= 0) assert.fail(`timed out waiting for the close; end: ${JSON.stringify(this.end)}`);
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, left);
        this.waiters.push(() => {
          clearTimeout(t);
          resolve();
        });
      });
    }
    return this.closeCode;
  }

  notifications(): ConnectResponse[] {
    return this.messages.filter((m) => m.message.case === 'notification');
  }

  /** Drops the connection without a close handshake (a lost network). */
  drop(): void {
    this.ws.terminate();
  }
}
