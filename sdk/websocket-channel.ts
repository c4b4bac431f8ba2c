/**
 * A device's transport over WebSocket (docs/service.md "The web port"): what
 * browsers and React Native have, and Node too (its global WebSocket from Node 22, or any
 * implementation of the same API passed as `webSocket`, such as the `ws` package's). Uses only the
 * standard WebSocket API (binaryType, send, close, bufferedAmount, the on* handlers), protobuf-es
 * and the framing in api/websocket.ts: no Node module, so it bundles for a browser as it is.
 *
 * The token goes as the subprotocol entry `ambit.bearer.<token>` (a browser cannot set headers on
 * a WebSocket). The server's end of stream carries the status; a socket that closes without one
 * is a lost connection, which the device retries and resumes.
 *
 * The device's unary call (`listSubscriptions`) goes to the same port over the Connect protocol
 * (an HTTP POST of the binary message, with fetch), which serves it beside the WebSocket.
 */
import { create, fromBinary, toBinary } from '@bufbuild/protobuf';
import { ConnectRequestSchema, ConnectResponseSchema, DeviceService, ListSubscriptionsRequestSchema, type ListSubscriptionsResponse, ListSubscriptionsResponseSchema } from '../api/gen/ambit/v1/device_pb.js';
import { CODE_NAMES, FLAG_END, FLAG_MESSAGE, WS_BEARER_PREFIX, WS_PATH, WS_SUBPROTOCOL, type WsEndOfStream } from '../api/websocket.js';
import { type ChannelStream, type ConnectRequestInit, type DeviceChannel, type StreamHandlers, encodeLocation } from './channel.js';
import { AmbitError, StatusCode } from './errors.js';

/** The parts of the standard WebSocket this transport uses. */
export interface WebSocketLike {
  binaryType: string;
  readonly readyState: number;
  readonly bufferedAmount: number;
  onopen: ((ev: unknown) => void) | null;
  onmessage: ((ev: { data: unknown }) => void) | null;
  onclose: ((ev: { code: number; reason: string }) => void) | null;
  onerror: ((ev: unknown) => void) | null;
  send(data: Uint8Array): void;
  close(code?: number, reason?: string): void;
}

export type WebSocketConstructor = new (url: string, protocols: string[]) => WebSocketLike;

/** Bytes waiting in the socket past which a write's `sent` waits (the next location with it). */
const SENT_BELOW = 64 * 1024;

/** UTF-8 bytes as a string: TextDecoder where the platform has one (browsers, Node), a plain decoder elsewhere. */
export function utf8(b: Uint8Array): string {
  if (typeof TextDecoder === 'function') return new TextDecoder().decode(b);
  let out = '';
  for (let i = 0; i < b.length; ) {
    const c = b[i++];
    let cp = c;
    if (c >= 0xf0) cp = ((c & 0x07) << 18) | ((b[i++] & 0x3f) << 12) | ((b[i++] & 0x3f) << 6) | (b[i++] & 0x3f);
    else if (c >= 0xe0) cp = ((c & 0x0f) << 12) | ((b[i++] & 0x3f) << 6) | (b[i++] & 0x3f);
    else if (c >= 0xc0) cp = ((c & 0x1f) << 6) | (b[i++] & 0x3f);
    out += String.fromCodePoint(cp);
  }
  return out;
}

/** The URL of the device stream: the address's own path, or the default one. */
export function streamUrl(address: string): string {
  const u = new URL(address);
  if (u.pathname === '' || u.pathname === '/') u.pathname = WS_PATH;
  return u.toString();
}

function endError(end: WsEndOfStream): AmbitError {
  if (end.error === undefined) return new AmbitError(StatusCode.UNAVAILABLE, 'sdk: the server ended the stream');
  const code = CODE_NAMES.indexOf(end.error.code);
  const field = end.metadata?.['ambit-field']?.[0] ?? '';
  return new AmbitError(code < 0 ? StatusCode.UNKNOWN : code, String(end.error.message ?? ''), typeof field === 'string' ? field : '');
}

export class WebSocketDeviceChannel implements DeviceChannel {
  readonly kind = 'WebSocket';
  private readonly url: string;
  private readonly Socket: WebSocketConstructor;

  constructor(address: string, webSocket?: WebSocketConstructor) {
    this.url = streamUrl(address);
    const global = (globalThis as { WebSocket?: WebSocketConstructor }).WebSocket;
    const Socket = webSocket ?? global;
    if (Socket === undefined) throw new AmbitError(StatusCode.FAILED_PRECONDITION, 'sdk: no WebSocket here (Node before 22): pass options.webSocket, e.g. the ws package\'s WebSocket', 'webSocket');
    this.Socket = Socket;
  }

  connect(token: string, h: StreamHandlers): ChannelStream {
    const ws = new this.Socket(this.url, [WS_SUBPROTOCOL, `${WS_BEARER_PREFIX}${token}`]);
    ws.binaryType = 'arraybuffer';
    /** Frames written before the socket opened, sent when it does. */
    let early: { bytes: Uint8Array; sent?: () => void }[] | null = [];
    let done = false;
    let end: WsEndOfStream | null = null;
    const finish = (err: AmbitError): void => {
      if (done) return;
      done = true;
      early = null;
      h.ended(err);
    };
    const sentWhenDrained = (sent: () => void): void => {
      if (done || ws.bufferedAmount < SENT_BELOW) {
        queueMicrotask(sent);
        return;
      }
      setTimeout(() => sentWhenDrained(sent), 5);
    };
    const put = (bytes: Uint8Array, sent?: () => void): void => {
      if (done) return;
      if (early !== null) {
        early.push({ bytes, sent });
        return;
      }
      ws.send(bytes);
      if (sent !== undefined) sentWhenDrained(sent);
    };
    ws.onopen = () => {
      const queued = early ?? [];
      early = null;
      for (const f of queued) put(f.bytes, f.sent);
    };
    ws.onmessage = (ev) => {
      if (done) return;
      const data = ev.data;
      if (!(data instanceof ArrayBuffer)) {
        ws.close(1002, 'binary messages only');
        return finish(new AmbitError(StatusCode.INTERNAL, 'sdk: the server sent a text message on the WebSocket'));
      }
      const b = new Uint8Array(data);
      if (b.length === 0) return;
      if (b[0] === FLAG_MESSAGE) {
        let m;
        try {
          m = fromBinary(ConnectResponseSchema, b.subarray(1));
        } catch (err) {
          ws.close(1002, 'malformed message');
          return finish(new AmbitError(StatusCode.INTERNAL, `sdk: a malformed message from the server (${err instanceof Error ? err.message : String(err)})`));
        }
        h.message(m);
      } else if (b[0] === FLAG_END) {
        try {
          end = JSON.parse(utf8(b.subarray(1))) as WsEndOfStream;
        } catch {
          end = { error: { code: 'internal', message: 'sdk: an unreadable end of stream from the server' } };
        }
      }
    };
    ws.onerror = () => {
      // 'close' follows and decides.
    };
    ws.onclose = (ev) => {
      if (end !== null) return finish(endError(end));
      finish(new AmbitError(StatusCode.UNAVAILABLE, `sdk: the WebSocket closed (${ev.code}${ev.reason === '' ? '' : ` ${ev.reason}`}) before the server's end of stream`));
    };
    const frame = (payload: Uint8Array): Uint8Array => {
      const out = new Uint8Array(1 + payload.length);
      out[0] = FLAG_MESSAGE;
      out.set(payload, 1);
      return out;
    };
    return {
      write: (m: ConnectRequestInit, sent?: () => void) => put(frame(toBinary(ConnectRequestSchema, create(ConnectRequestSchema, m as never))), sent),
      writeLocation: (lat: number, lon: number, sent?: () => void) => {
        const out = new Uint8Array(21);
        out[0] = FLAG_MESSAGE;
        encodeLocation(lat, lon, out, 1);
        put(out, sent);
      },
      end: () => put(Uint8Array.of(FLAG_END)),
      cancel: () => {
        if (done) return;
        try {
          ws.close(1000, 'cancelled');
        } catch {
          // Not open yet: closing a connecting socket is allowed; anything else leaves it to be collected.
        }
        finish(new AmbitError(StatusCode.CANCELLED, 'sdk: the stream was cancelled'));
      },
      // The standard WebSocket cannot stop reading: the device buffers what arrives.
      pause: () => {},
      resume: () => {},
    };
  }

  /** A Connect unary call on the same port (http:// for ws://, https:// for wss://). */
  async listSubscriptions(token: string, deadlineMs: number): Promise<ListSubscriptionsResponse> {
    const u = new URL(this.url);
    u.protocol = u.protocol === 'wss:' ? 'https:' : 'http:';
    u.pathname = `/${DeviceService.typeName}/${DeviceService.method.listSubscriptions.name}`;
    let res: Response;
    // AbortSignal.timeout where the platform has it; an AbortController and a timer elsewhere.
    const abort = typeof AbortController === 'function' ? new AbortController() : null;
    const timer = abort === null ? null : setTimeout(() => abort.abort(Object.assign(new Error('the deadline passed'), { name: 'TimeoutError' })), deadlineMs);
    try {
      res = await fetch(u.toString(), {
        method: 'POST',
        headers: { 'content-type': 'application/proto', 'connect-protocol-version': '1', 'connect-timeout-ms': String(deadlineMs), authorization: `Bearer ${token}` },
        body: toBinary(ListSubscriptionsRequestSchema, create(ListSubscriptionsRequestSchema, {})),
        ...(abort === null ? {} : { signal: abort.signal }),
      });
    } catch (err) {
      if (timer !== null) clearTimeout(timer);
      const timedOut = (err as { name?: string }).name === 'TimeoutError';
      throw new AmbitError(timedOut ? StatusCode.DEADLINE_EXCEEDED : StatusCode.UNAVAILABLE, `sdk: listSubscriptions: ${err instanceof Error ? err.message : String(err)}`);
    }
    if (timer !== null) clearTimeout(timer);
    if (res.ok) return fromBinary(ListSubscriptionsResponseSchema, new Uint8Array(await res.arrayBuffer()));
    // A Connect error: JSON {code, message}.
    const body = (await res.json().catch(() => null)) as { code?: string; message?: string } | null;
    const code = CODE_NAMES.indexOf(body?.code ?? '');
    throw new AmbitError(code > 0 ? code : StatusCode.UNKNOWN, body?.message ?? `sdk: listSubscriptions: HTTP ${res.status}`);
  }

  close(): void {}
}

