/**
 * Device streams served on the HTTP/2 stream itself: the gateway reads and writes the gRPC
 * framing of `DeviceService.Connect` (a 1-byte flag and a 4-byte length before each message, the
 * status in trailers) where grpc-js would take each message through its decoder, interceptor
 * chain, object-mode Readable and Writable. That machinery was two thirds of a gateway's CPU per
 * location update and a third to two fifths of the memory of an idle stream (measured:
 * docs/service.md). grpc-js keeps the server, its sessions (keepalive, shutdown) and every other
 * method: `takeOverStreams` routes the streams of the taken paths here before grpc-js sees them.
 *
 * What a client sees is what grpc-js would show it: response headers on the first message,
 * `grpc-status`/`grpc-message` trailers (a trailers-only response when nothing was sent), a
 * `grpc-timeout` deadline, gzip and deflate request messages, RESOURCE_EXHAUSTED past the size
 * limit, 415 for a content type that is not gRPC; test/service/device-transport.test.ts holds the
 * two transports side by side. Two protocol errors grpc-js lets pass end the stream INTERNAL
 * here: a message flagged compressed on a stream without a grpc-encoding, and a half-close in the
 * middle of a message. As with grpc-js, the stream's session ends with the status the transport
 * sends (a deadline, the size limit), not when the client gets round to closing its side.
 */
import { type IncomingHttpHeaders, type OutgoingHttpHeaders, type ServerHttp2Stream, constants as http2constants } from 'node:http2';
import { EventEmitter } from 'node:events';
import { gunzipSync, inflateSync } from 'node:zlib';
import * as grpc from '@grpc/grpc-js';
import { toBinary } from '@bufbuild/protobuf';
import { type ConnectRequest, type ConnectResponse, ConnectResponseSchema } from '../../api/gen/ambit/v1/device_pb.js';
import { type StatusInfo, asciiField, statusDetails } from './convert.js';
import type { DeviceStream, StreamListener } from './device-stream.js';
import type { Delivery } from '../hub/port.js';
import { grpcNotifications } from './notification-frame.js';
import { grpcMessages } from './raw-stream.js';

/** What the gateway gives every stream it serves. */
export interface H2StreamOptions {
  /** The largest request message accepted, in bytes (decompressed). */
  readonly maxReceiveBytes: number;
  /** Decodes one request message (a decode failure comes back as `Malformed`, api/rpc.ts). */
  readonly decode: (bytes: Buffer) => unknown;
  /**
   * Reads the message in b[from, to) when it is a plain `location` request (true, its lat and lon
   * in `location`), so the stream hands the listener the two numbers instead of a decoded request.
   */
  readonly readLocation?: (b: Uint8Array, from: number, to: number) => boolean;
  /** Where `readLocation` puts lat and lon (api/fast-decode.ts `LOCATION`); given with it. */
  readonly location?: Float64Array;
}

const RESPONSE_HEADERS: OutgoingHttpHeaders = Object.freeze({
  ':status': 200,
  'content-type': 'application/grpc+proto',
  'grpc-accept-encoding': 'identity,deflate,gzip',
  'grpc-encoding': 'identity',
});
const RESPOND_OPTIONS = Object.freeze({ waitForTrailers: true });
const DEADLINE = /^(\d{1,8})([HMSmun])$/;
const MAX_TIMER_MS = 2 ** 31 - 1;
const UNIT_MS: Record<string, number> = { H: 3_600_000, M: 60_000, S: 1000, m: 1, u: 0.001, n: 0.000_001 };

/** Where a stream's shared listeners find their transport (an idle stream holds no closures). */
const OWNER = Symbol('ambit.h2DeviceStream');
type OwnedStream = ServerHttp2Stream & { [OWNER]?: H2DeviceStream };

export class H2DeviceStream implements DeviceStream {
  private listener: StreamListener | null = null;
  /** The status went out, or the stream is gone: nothing more is read or written. */
  private done = false;
  private paused = false;
  /** The client half-closed while reads were paused: told on resume. */
  private halfClosed = false;
  /** Bytes that arrived while reads were paused. */
  private backlog: Buffer | null = null;
  /**
   * The start of a message that spans chunks, as they came (nothing is allocated for a message
   * before its bytes arrive), and how many bytes they hold.
   */
  private partial: Buffer[] | null = null;
  private partialBytes = 0;
  private deadline: NodeJS.Timeout | null = null;
  /** The request messages' compression (grpc-encoding). */
  private readonly encoding: string;

  constructor(
    private readonly stream: ServerHttp2Stream,
    headers: IncomingHttpHeaders,
    private readonly opts: H2StreamOptions,
  ) {
    const s = stream as OwnedStream;
    s[OWNER] = this;
    s.on('error', H2DeviceStream.onError);
    s.on('close', H2DeviceStream.onClose);
    const enc = headers['grpc-encoding'];
    this.encoding = typeof enc === 'string' ? enc : 'identity';
    const timeout = headers['grpc-timeout'];
    if (timeout !== undefined) this.armDeadline(String(timeout));
  }

  /** True once the stream answered (e.g. a malformed grpc-timeout) or went away. */
  get ended(): boolean {
    return this.done;
  }

  private armDeadline(value: string): void {
    const m = DEADLINE.exec(value.trim());
    if (m === null) return this.status(grpc.status.INTERNAL, `Invalid grpc-timeout value "${value}"`, '');
    const ms = Math.ceil(Number(m[1]) * UNIT_MS[m[2]]);
    // Past what a timer can hold (about 24.8 days) the deadline is as good as none.
    if (ms > MAX_TIMER_MS) return;
    this.deadline = setTimeout(() => this.status(grpc.status.DEADLINE_EXCEEDED, 'Deadline exceeded', ''), ms);
  }

  attach(listener: StreamListener): void {
    if (this.done) return;
    this.listener = listener;
    const s = this.stream;
    s.on('data', H2DeviceStream.onData);
    s.on('end', H2DeviceStream.onEnd);
  }

  private static onData(this: OwnedStream, chunk: Buffer): void {
    this[OWNER]?.received(chunk);
  }

  private static onEnd(this: OwnedStream): void {
    this[OWNER]?.halfClose();
  }

  private static onError(this: OwnedStream): void {
    // A reset or a failed write: 'close' follows and ends the session.
  }

  private static onClose(this: OwnedStream): void {
    this[OWNER]?.gone();
  }

  // ---- reading ----

  private received(chunk: Buffer): void {
    if (this.done) return;
    if (this.paused) {
      this.backlog = this.backlog === null ? chunk : Buffer.concat([this.backlog, chunk]);
      return;
    }
    this.process(chunk);
  }

  /** Received bytes, reads not paused: after the message begun before them, if one was. */
  private process(chunk: Buffer): void {
    if (this.partial !== null) {
      const whole = this.completePartial(chunk);
      if (whole === null) return;
      chunk = whole;
    }
    this.consume(chunk, 0);
  }

  /** Frames and delivers the messages in chunk[at..]; keeps an incomplete last one, or the rest when reads pause. */
  private consume(chunk: Buffer, at: number): void {
    const n = chunk.length;
    const max = this.opts.maxReceiveBytes;
    while (at < n) {
      if (this.done) return;
      if (this.paused) {
        this.backlog = chunk.subarray(at);
        return;
      }
      if (n - at < 5) return this.keepPartial(chunk.subarray(at));
      const len = chunk.readUInt32BE(at + 1);
      if (len > max) return this.tooLarge(len);
      const end = at + 5 + len;
      if (end > n) return this.keepPartial(chunk.subarray(at));
      const read = this.opts.readLocation;
      if (chunk[at] === 0 && read !== undefined && read(chunk, at + 5, end)) {
        const where = this.opts.location!;
        (this.listener as StreamListener).onLocation(where[0], where[1]);
      } else this.deliver(chunk[at], chunk.subarray(at + 5, end));
      at = end;
    }
  }

  private keepPartial(start: Buffer): void {
    this.partial = [start];
    this.partialBytes = start.length;
  }

  /**
   * Adds a chunk to the message begun before it: null while the message is still incomplete (or
   * was refused), else the bytes from the message's start to the chunk's end, in one buffer.
   */
  private completePartial(chunk: Buffer): Buffer | null {
    const parts = this.partial as Buffer[];
    parts.push(chunk);
    const have = (this.partialBytes += chunk.length);
    if (have < 5) return null;
    const head = parts[0].length >= 5 ? parts[0] : Buffer.concat(parts, 5);
    const len = head.readUInt32BE(1);
    if (len > this.opts.maxReceiveBytes) {
      this.tooLarge(len);
      return null;
    }
    if (have < 5 + len) return null;
    this.partial = null;
    this.partialBytes = 0;
    return Buffer.concat(parts, have);
  }

  private tooLarge(len: number): void {
    this.partial = null;
    this.partialBytes = 0;
    this.status(grpc.status.RESOURCE_EXHAUSTED, `Received message larger than max (${len} vs ${this.opts.maxReceiveBytes})`, '');
  }

  private deliver(flag: number, body: Buffer): void {
    let bytes = body;
    if (flag !== 0) {
      const plain = this.inflate(flag, body);
      if (plain === null) return;
      bytes = plain;
    }
    (this.listener as StreamListener).onMessage(this.opts.decode(bytes) as ConnectRequest);
  }

  private inflate(flag: number, body: Buffer): Buffer | null {
    if (flag !== 1) {
      this.status(grpc.status.INTERNAL, `Received a message with compression flag ${flag}`, '');
      return null;
    }
    const enc = this.encoding;
    if (enc !== 'gzip' && enc !== 'deflate') {
      const why = enc === 'identity' ? 'Received a compressed message without a grpc-encoding' : `Received message compressed with unsupported encoding "${enc}"`;
      this.status(enc === 'identity' ? grpc.status.INTERNAL : grpc.status.UNIMPLEMENTED, why, '');
      return null;
    }
    const max = this.opts.maxReceiveBytes;
    try {
      return enc === 'gzip' ? gunzipSync(body, { maxOutputLength: Math.max(1, max) }) : inflateSync(body, { maxOutputLength: Math.max(1, max) });
    } catch (err) {
      const big = (err as { code?: string }).code === 'ERR_BUFFER_TOO_LARGE';
      this.status(big ? grpc.status.RESOURCE_EXHAUSTED : grpc.status.INTERNAL, big ? `Received message that decompresses to a size larger than ${max}` : 'Failed to decompress message', '');
      return null;
    }
  }

  private halfClose(): void {
    if (this.done) return;
    if (this.paused || this.backlog !== null) {
      this.halfClosed = true;
      return;
    }
    if (this.partial !== null) return this.status(grpc.status.INTERNAL, 'the stream ended inside a message', '');
    (this.listener as StreamListener).onHalfClose();
  }

  /** The stream closed, whoever ended it: so does its session. */
  private gone(): void {
    this.done = true;
    this.clearDeadline();
    this.backlog = null;
    this.partial = null;
    this.tellGone();
  }

  pause(): void {
    if (this.paused || this.done) return;
    this.paused = true;
    this.stream.pause();
  }

  resume(): void {
    if (!this.paused) return;
    this.paused = false;
    if (this.done) return;
    const b = this.backlog;
    if (b !== null) {
      this.backlog = null;
      this.process(b);
      if (this.paused || this.done) return;
    }
    if (this.halfClosed) {
      this.halfClosed = false;
      this.halfClose();
      return;
    }
    this.stream.resume();
  }

  // ---- writing ----

  private writable(): boolean {
    const s = this.stream;
    return !this.done && !s.destroyed && !s.closed && !s.writableEnded;
  }

  private write(bytes: Buffer): boolean {
    const s = this.stream;
    if (!s.headersSent) s.respond(RESPONSE_HEADERS, RESPOND_OPTIONS);
    return s.write(bytes);
  }

  send(m: ConnectResponse | Uint8Array): boolean {
    if (!this.writable()) return true;
    return this.write(grpcMessages([m instanceof Uint8Array ? m : toBinary(ConnectResponseSchema, m)]));
  }

  sendNotifications(batch: readonly Delivery[]): boolean {
    if (!this.writable()) return true;
    return this.write(grpcNotifications(batch));
  }

  onceDrain(fn: () => void): void {
    this.stream.once('drain', fn);
  }

  offDrain(fn: () => void): void {
    this.stream.off('drain', fn);
  }

  end(): void {
    this.status(grpc.status.OK, '', '');
  }

  fail(s: StatusInfo): void {
    this.status(s.code, s.message, s.field);
  }

  private clearDeadline(): void {
    if (this.deadline !== null) {
      clearTimeout(this.deadline);
      this.deadline = null;
    }
  }

  /** Sends the status: as trailers after what was written, or alone (trailers-only) when nothing was. */
  private status(code: number, message: string, field: string): void {
    if (this.done) return;
    this.done = true;
    this.clearDeadline();
    this.backlog = null;
    this.partial = null;
    this.partialBytes = 0;
    const s = this.stream;
    if (s.destroyed || s.closed) return this.tellGone();
    const trailers: OutgoingHttpHeaders = { 'grpc-status': String(code), 'grpc-message': encodeURI(message) };
    if (field !== '') trailers['ambit-field'] = asciiField(field);
    const details = statusDetails(code, message, field);
    if (details !== null) trailers['grpc-status-details-bin'] = details.toString('base64');
    try {
      if (s.headersSent) {
        s.once('wantTrailers', () => {
          try {
            s.sendTrailers(trailers);
          } catch {
            s.close(); // reset meanwhile; nothing left to tell
          }
        });
        s.end();
      } else {
        s.respond({ ...RESPONSE_HEADERS, ...trailers }, { endStream: true });
      }
    } catch {
      s.close();
    }
    // Whatever the client still sends is read and dropped, so flow control does not hold the
    // connection and the stream can close (also when reads were paused, or a resume is replaying).
    s.on('data', DROP);
    s.resume();
    // The session ends with its status, as with grpc-js, not when the client gets round to closing.
    this.tellGone();
  }

  /** Tells the session once that its stream is over. */
  private tellGone(): void {
    const l = this.listener;
    this.listener = null;
    l?.onGone();
  }
}

function DROP(): void {}

/** Answers a stream whose content type is not gRPC as grpc-js does: HTTP 415, no gRPC status. */
export function refuseContentType(stream: ServerHttp2Stream, headers: IncomingHttpHeaders): boolean {
  const type = headers['content-type'];
  if (typeof type === 'string' && type.startsWith('application/grpc')) return false;
  stream.once('error', DROP);
  stream.respond({ ':status': 415 }, { endStream: true });
  return true;
}

type StreamHandler = (stream: ServerHttp2Stream, headers: IncomingHttpHeaders, flags: number, rawHeaders: string[]) => void;

/** Headers that carry credentials: a request may name each once. */
const CREDENTIAL_HEADERS = new Set(['authorization']);

/**
 * Refuses a request that repeats a credential header, UNAUTHENTICATED as a trailers-only gRPC
 * response. Node's HTTP/2 layer keeps only the first value of such a header (grpc-js sees one
 * value and the rest would be ignored silently); its raw list has them all.
 */
export function refuseRepeatedCredentials(stream: ServerHttp2Stream, rawHeaders: readonly string[] | undefined): boolean {
  if (!Array.isArray(rawHeaders)) return false;
  let seen: Set<string> | null = null;
  for (let i = 0; i < rawHeaders.length; i += 2) {
    const name = String(rawHeaders[i]).toLowerCase();
    if (!CREDENTIAL_HEADERS.has(name)) continue;
    seen ??= new Set();
    if (!seen.has(name)) {
      seen.add(name);
      continue;
    }
    stream.once('error', DROP);
    const message = `more than one ${name} header: a request carries one credential`;
    stream.respond({ ':status': 200, 'content-type': 'application/grpc+proto', 'grpc-status': String(grpc.status.UNAUTHENTICATED), 'grpc-message': encodeURIComponent(message) }, { endStream: true });
    // A complete answer before the request is read: the client is told to stop sending without
    // error (RST_STREAM NO_ERROR, RFC 9113 §8.1).
    stream.close(http2constants.NGHTTP2_NO_ERROR);
    return true;
  }
  return false;
}

/**
 * Routes the streams of `routes`' paths on every HTTP/2 server of a bound grpc-js server to their
 * handler, and every other stream to grpc-js as before; first, on every path, a request that
 * repeats its credentials is refused (refuseRepeatedCredentials). grpc-js keeps its one 'stream' listener
 * per HTTP/2 server in a private map (the pinned version's shape); when that is not found, nothing
 * changes, this returns false and those paths stay with grpc-js (the test suite checks it returns
 * true, so an upgrade that changes the shape is seen). grpc-js does not count the streams routed
 * away: with `grpc.max_connection_idle_ms` set (the server leaves it unset) a connection carrying
 * only device streams would be closed as idle.
 */
export function takeOverStreams(server: grpc.Server, routes: ReadonlyMap<string, (stream: ServerHttp2Stream, headers: IncomingHttpHeaders) => void>): boolean {
  const servers = (server as unknown as { http2Servers?: unknown }).http2Servers;
  if (!(servers instanceof Map) || servers.size === 0) return false;
  const found: [EventEmitter, StreamHandler][] = [];
  for (const h2 of servers.keys()) {
    if (!(h2 instanceof EventEmitter)) return false;
    const listeners = h2.listeners('stream');
    if (listeners.length !== 1) return false;
    found.push([h2, listeners[0] as StreamHandler]);
  }
  for (const [h2, grpcJs] of found) {
    h2.removeListener('stream', grpcJs);
    h2.on('stream', function route(this: unknown, stream: ServerHttp2Stream, headers: IncomingHttpHeaders, flags: number, rawHeaders: string[]) {
      if (refuseRepeatedCredentials(stream, rawHeaders)) return;
      const path = headers[':path'];
      const handler = typeof path === 'string' ? routes.get(path) : undefined;
      if (handler === undefined) return grpcJs.call(this, stream, headers, flags, rawHeaders);
      if (refuseContentType(stream, headers)) return;
      handler(stream, headers);
    });
  }
  return true;
}
