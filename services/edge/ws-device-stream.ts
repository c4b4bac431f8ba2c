/**
 * Device streams over WebSocket (`AMBIT_WEB_PORT`), for clients that cannot speak gRPC:
 * browsers, and apps whose platform has a WebSocket but no HTTP/2 trailers. The stream is the
 * same `DeviceService.Connect` a gRPC client opens, with the same session behind it
 * (device-session.ts: hello/welcome, ordered replies, acks, resume); only the framing differs.
 *
 * The protocol (subprotocol `ambit.v1`, path `/ambit.v1.DeviceService/Connect`), docs/service.md:
 * - Every WebSocket message is binary: one flags byte, then the payload.
 *   - flags 0: a message: a `ConnectRequest` from the client, a `ConnectResponse` from the server.
 *   - flags 2: the end of the stream. From the client: it half-closes (sends nothing more). From
 *     the server: its status, as JSON in the shape of the Connect protocol's end-of-stream message:
 *     `{}` for OK, else `{"error": {"code": "invalid_argument", "message": "...", "details":
 *     [{"type": "google.rpc.Status", "value": base64}]}, "metadata": {"ambit-field": ["..."]}}`
 *     (the google.rpc.Status holds a google.rpc.BadRequest, as the gRPC trailer does);
 *     the server then closes the socket (1000).
 * - A socket that closes without the server's end of stream lost its connection: the client
 *   reconnects and resumes, as after a broken gRPC stream.
 * - Flow control: the server stops taking a device's notifications while more than
 *   `HIGH_WATER` bytes of it wait to be written to the socket, and stops reading the socket while
 *   the session is paused, so a client that never reads holds a bounded amount of memory.
 */
import * as grpc from '@grpc/grpc-js';
import { toBinary } from '@bufbuild/protobuf';
import type { WebSocket } from 'ws';
import { type ConnectRequest, type ConnectResponse, ConnectResponseSchema } from '../../api/gen/ambit/v1/device_pb.js';
import { type StatusInfo, statusDetails } from './convert.js';
import { CODE_NAMES, FLAG_END, FLAG_MESSAGE, type WsEndOfStream } from '../../api/websocket.js';
import type { DeviceStream, StreamListener } from './device-stream.js';
import type { Delivery } from '../hub/port.js';
import { notificationFrame } from './notification-frame.js';

export { FLAG_END, FLAG_MESSAGE, WS_BEARER_PREFIX, WS_PATH, WS_SUBPROTOCOL } from '../../api/websocket.js';
/** Bytes of a device's frames waiting for the socket past which `send` says to wait for drain. */
export const HIGH_WATER = 64 * 1024;

/** The end-of-stream payload for a status (flags byte included). */
export function endOfStream(code: number, message: string, field: string): Buffer {
  const body: WsEndOfStream = {};
  if (code !== grpc.status.OK) {
    body.error = { code: CODE_NAMES[code] ?? 'unknown', message };
    const details = statusDetails(code, message, field);
    // The google.rpc.Status's BadRequest detail, as Connect sends an error's details: its type and bytes.
    if (details !== null) body.error.details = [{ type: 'google.rpc.Status', value: details.toString('base64') }];
    if (field !== '') body.metadata = { 'ambit-field': [field] };
  }
  const json = Buffer.from(JSON.stringify(body), 'utf8');
  const out = Buffer.allocUnsafe(1 + json.length);
  out[0] = FLAG_END;
  json.copy(out, 1);
  return out;
}

/** A message frame: the flags byte, then the bytes. */
function frame(bytes: Uint8Array): Buffer {
  const out = Buffer.allocUnsafe(1 + bytes.length);
  out[0] = FLAG_MESSAGE;
  out.set(bytes, 1);
  return out;
}

export interface WsStreamOptions {
  /** The largest request message accepted, in bytes. */
  readonly maxReceiveBytes: number;
  /** Decodes one request message (a decode failure comes back as `Malformed`, api/rpc.ts). */
  readonly decode: (bytes: Buffer) => unknown;
}

type Incoming = { kind: 'message'; bytes: Buffer } | { kind: 'half-close' };

export class WsDeviceStream implements DeviceStream {
  private listener: StreamListener | null = null;
  /** The status went out, or the socket is gone: nothing more is read or written. */
  private done = false;
  private goneTold = false;
  private paused = false;
  /** The client ended its side: anything after it is a protocol error. */
  private clientEnded = false;
  /** What arrived while reads were paused (the socket may still emit what it had parsed). */
  private backlog: Incoming[] = [];
  /** Bytes handed to the socket and not yet written out. */
  private pending = 0;
  private drainWaiters: (() => void)[] = [];
  private readonly written = (n: number) => () => this.wrote(n);

  constructor(
    private readonly ws: WebSocket,
    private readonly opts: WsStreamOptions,
  ) {
    ws.on('close', () => this.gone());
    ws.on('error', () => {
      // A protocol error or a failed write: 'close' follows and ends the session.
    });
  }

  attach(listener: StreamListener): void {
    if (this.done) return;
    this.listener = listener;
    this.ws.on('message', (data: Buffer | ArrayBuffer | Buffer[], isBinary: boolean) => this.received(data, isBinary));
  }

  // ---- reading ----

  private received(data: Buffer | ArrayBuffer | Buffer[], isBinary: boolean): void {
    if (this.done) return;
    const bytes = Buffer.isBuffer(data) ? data : Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data);
    if (!isBinary) return this.status(grpc.status.INVALID_ARGUMENT, 'websocket: text messages are not part of the protocol; send binary messages (a flags byte, then the message)', '');
    if (bytes.length === 0) return this.status(grpc.status.INVALID_ARGUMENT, 'websocket: an empty message (it needs a flags byte)', '');
    const flags = bytes[0];
    if (this.clientEnded) return this.status(grpc.status.INVALID_ARGUMENT, "websocket: a message after the client's end of stream", '');
    let item: Incoming;
    if (flags === FLAG_MESSAGE) {
      const len = bytes.length - 1;
      if (len > this.opts.maxReceiveBytes) return this.status(grpc.status.RESOURCE_EXHAUSTED, `Received message larger than max (${len} vs ${this.opts.maxReceiveBytes})`, '');
      item = { kind: 'message', bytes: bytes.subarray(1) };
    } else if (flags === FLAG_END) {
      if (bytes.length !== 1) return this.status(grpc.status.INVALID_ARGUMENT, 'websocket: a client end of stream carries nothing after its flags byte', '');
      item = { kind: 'half-close' };
      this.clientEnded = true;
    } else {
      return this.status(grpc.status.INVALID_ARGUMENT, `websocket: unknown flags ${flags} (0: a message, 2: the end of the stream)`, '');
    }
    if (this.paused || this.backlog.length > 0) {
      this.backlog.push(item);
      return;
    }
    this.deliver(item);
  }

  private deliver(item: Incoming): void {
    const l = this.listener as StreamListener;
    if (item.kind === 'message') l.onMessage(this.opts.decode(item.bytes) as ConnectRequest);
    else l.onHalfClose();
  }

  pause(): void {
    if (this.paused || this.done) return;
    this.paused = true;
    this.ws.pause();
  }

  resume(): void {
    if (!this.paused) return;
    this.paused = false;
    if (this.done) return;
    while (this.backlog.length > 0) {
      const item = this.backlog.shift() as Incoming;
      this.deliver(item);
      if (this.paused || this.done) return;
    }
    this.ws.resume();
  }

  // ---- writing ----

  private writable(): boolean {
    return !this.done && this.ws.readyState === this.ws.OPEN;
  }

  private put(bytes: Buffer): void {
    this.pending += bytes.length;
    this.ws.send(bytes, { binary: true }, this.written(bytes.length));
  }

  private wrote(n: number): void {
    this.pending -= n;
    if (this.pending < HIGH_WATER) this.tellDrain();
  }

  private tellDrain(): void {
    if (this.drainWaiters.length === 0) return;
    const ws = this.drainWaiters;
    this.drainWaiters = [];
    for (const fn of ws) fn();
  }

  send(m: ConnectResponse | Uint8Array): boolean {
    if (!this.writable()) return true;
    this.put(frame(m instanceof Uint8Array ? m : toBinary(ConnectResponseSchema, m)));
    return this.pending < HIGH_WATER;
  }

  sendNotifications(batch: readonly Delivery[]): boolean {
    if (!this.writable()) return true;
    for (let i = 0; i < batch.length; i++) this.put(frame(notificationFrame(batch[i])));
    return this.pending < HIGH_WATER;
  }

  onceDrain(fn: () => void): void {
    if (this.done || this.pending < HIGH_WATER) {
      queueMicrotask(fn);
      return;
    }
    this.drainWaiters.push(fn);
  }

  offDrain(fn: () => void): void {
    const i = this.drainWaiters.indexOf(fn);
    if (i >= 0) this.drainWaiters.splice(i, 1);
  }

  end(): void {
    this.status(grpc.status.OK, '', '');
  }

  fail(s: StatusInfo): void {
    this.status(s.code, s.message, s.field);
  }

  /** The end of stream after what was written, then the close. */
  private status(code: number, message: string, field: string): void {
    if (this.done) return;
    this.done = true;
    this.backlog = [];
    const ws = this.ws;
    if (ws.readyState !== ws.OPEN) return this.tellGone();
    // Reads go on (what comes is ignored), so the client's close frame completes the handshake;
    // the socket's 'close' then ends the session.
    if (this.paused) ws.resume();
    ws.send(endOfStream(code, message, field), { binary: true }, () => {
      if (ws.readyState === ws.OPEN) ws.close(1000);
    });
  }

  /** The socket closed, whoever ended it: so does its session. */
  private gone(): void {
    this.done = true;
    this.backlog = [];
    this.tellGone();
  }

  private tellGone(): void {
    this.tellDrain();
    if (this.goneTold) return;
    this.goneTold = true;
    this.listener?.onGone();
  }
}
