/**
 * A load generator's HTTP/2 client connection, written on a plain TCP socket: it opens gRPC
 * streams and writes DATA frames that are prepared bytes, many frames to one socket write, so
 * that a load process can offer millions of messages a second. A server sees the frames a
 * phone's HTTP/2 stack sends (RFC 9113): the preface, SETTINGS, HEADERS (HPACK literals), then
 * one DATA frame per message. The client keeps the server's flow-control windows (connection and
 * stream, from SETTINGS and WINDOW_UPDATE), answers SETTINGS and PING, and opens its own windows
 * wide at the start (2^31 - 1 bytes) so that the server never waits for it; what the server sends
 * on the streams is counted and dropped, and those windows are never given back (a location load
 * gets a welcome a stream). It ignores SETTINGS_MAX_CONCURRENT_STREAMS (the node sets none).
 * Enough HTTP/2 for a benchmark's load, not a general client.
 */
import net from 'node:net';

const FRAME_DATA = 0x0;
const FRAME_HEADERS = 0x1;
const FRAME_RST_STREAM = 0x3;
const FRAME_SETTINGS = 0x4;
const FRAME_PING = 0x6;
const FRAME_GOAWAY = 0x7;
const FRAME_WINDOW_UPDATE = 0x8;
const FLAG_ACK = 0x1;
const FLAG_END_STREAM = 0x1;
const FLAG_END_HEADERS = 0x4;
const SETTINGS_INITIAL_WINDOW_SIZE = 0x4;
const SETTINGS_MAX_FRAME_SIZE = 0x5;
const SETTINGS_ENABLE_PUSH = 0x2;
const MAX_WINDOW = 0x7fffffff;
const DEFAULT_WINDOW = 65_535;
const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1');

function frameHeader(out: Buffer, at: number, length: number, type: number, flags: number, stream: number): void {
  out[at] = (length >>> 16) & 0xff;
  out[at + 1] = (length >>> 8) & 0xff;
  out[at + 2] = length & 0xff;
  out[at + 3] = type;
  out[at + 4] = flags;
  out.writeUInt32BE(stream & MAX_WINDOW, at + 5);
}

function frame(type: number, flags: number, stream: number, payload: Buffer = Buffer.alloc(0)): Buffer {
  const out = Buffer.allocUnsafe(9 + payload.length);
  frameHeader(out, 0, payload.length, type, flags, stream);
  payload.copy(out, 9);
  return out;
}

/** An HPACK integer with an n-bit prefix whose high bits are `first` (RFC 7541 §5.1). */
function hpackInt(value: number, bits: number, first: number): number[] {
  const max = (1 << bits) - 1;
  if (value < max) return [first | value];
  const out = [first | max];
  let v = value - max;
  while (v >= 128) {
    out.push((v & 0x7f) | 0x80);
    v >>>= 7;
  }
  out.push(v);
  return out;
}

function hpackString(s: string): number[] {
  const b = Buffer.from(s, 'latin1');
  return [...hpackInt(b.length, 7, 0), ...b];
}

/** A header block of literals without indexing, new names (RFC 7541 §6.2.2): no dynamic table on either side. */
export function headerBlock(headers: [string, string][]): Buffer {
  const bytes: number[] = [];
  for (const [name, value] of headers) bytes.push(0x00, ...hpackString(name), ...hpackString(value));
  return Buffer.from(bytes);
}

interface StreamState {
  id: number;
  /** The server's window for this stream: bytes of DATA it will take. */
  window: number;
  /** Bytes of DATA the server sent on it. */
  received: number;
  ended: boolean;
}

export class RawH2Connection {
  private readonly socket: net.Socket;
  private readonly streams = new Map<number, StreamState>();
  private nextId = 1;
  /** The server's connection window. */
  private connWindow = DEFAULT_WINDOW;
  private initialWindow = DEFAULT_WINDOW;
  private maxFrame = 16_384;
  private pending = Buffer.alloc(0);
  private failure: Error | null = null;
  private readonly waiters = new Set<() => void>();
  /** Called whenever a window grows or data arrives (the sender's loop waits on it). */
  onProgress: () => void = () => {};

  private constructor(socket: net.Socket) {
    this.socket = socket;
    socket.setNoDelay(true);
    socket.on('data', (chunk: Buffer) => this.read(chunk));
    socket.on('error', (err) => this.fail(err));
    socket.on('close', () => this.fail(new Error('connection closed')));
  }

  static async connect(host: string, port: number): Promise<RawH2Connection> {
    const socket = net.connect({ host, port });
    await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject));
    const c = new RawH2Connection(socket);
    const settings = Buffer.alloc(12);
    settings.writeUInt16BE(SETTINGS_ENABLE_PUSH, 0);
    settings.writeUInt32BE(0, 2);
    settings.writeUInt16BE(SETTINGS_INITIAL_WINDOW_SIZE, 6);
    settings.writeUInt32BE(MAX_WINDOW, 8);
    const grow = Buffer.alloc(4);
    grow.writeUInt32BE(MAX_WINDOW - DEFAULT_WINDOW, 0);
    socket.write(Buffer.concat([PREFACE, frame(FRAME_SETTINGS, 0, 0, settings), frame(FRAME_WINDOW_UPDATE, 0, 0, grow)]));
    return c;
  }

  get error(): Error | null {
    return this.failure;
  }

  /** Opens a stream with these headers (pseudo-headers first) and returns its id. */
  open(headers: [string, string][]): number {
    const id = this.nextId;
    this.nextId += 2;
    const block = headerBlock(headers);
    // One HEADERS frame, no CONTINUATION: a block past the frame size is refused here, not by the server.
    if (block.length > this.maxFrame) throw new Error(`a header block of ${block.length} bytes, more than a frame's ${this.maxFrame}`);
    this.streams.set(id, { id, window: this.initialWindow, received: 0, ended: false });
    this.socket.write(frame(FRAME_HEADERS, FLAG_END_HEADERS, id, block));
    return id;
  }

  /** Bytes of DATA the server sent on stream `id`. */
  received(id: number): number {
    return this.streams.get(id)?.received ?? 0;
  }

  /** Resolves once `test()` holds (checked as frames arrive); rejects when the connection fails. */
  until(test: () => boolean): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const check = () => {
        if (this.failure !== null) {
          this.waiters.delete(check);
          reject(this.failure);
        } else if (test()) {
          this.waiters.delete(check);
          resolve();
        }
      };
      this.waiters.add(check);
      check();
    });
  }

  /**
   * Writes DATA frames, one per message: `payloads[(first + k) % payloads.length]` for the k-th, on
   * streams taken round-robin from `ids` from `start`, as many as the windows allow, up to `most`,
   * in one socket write. Returns how many went (fewer than `most`: a window is shut until the
   * server opens it) and whether the socket asks the writer to wait for 'drain'.
   */
  writeData(ids: readonly number[], start: number, most: number, payloads: readonly Buffer[], first: number): { sent: number; full: boolean } {
    if (this.failure !== null) throw this.failure;
    let longest = 0;
    for (const p of payloads) longest = Math.max(longest, p.length);
    const out = Buffer.allocUnsafe(most * (9 + longest));
    let size = 0;
    let sent = 0;
    for (let k = 0; k < most; k++) {
      const s = this.streams.get(ids[(start + k) % ids.length])!;
      const p = payloads[(first + k) % payloads.length];
      if (p.length > this.connWindow || p.length > s.window || p.length > this.maxFrame) break;
      frameHeader(out, size, p.length, FRAME_DATA, 0, s.id);
      p.copy(out, size + 9);
      size += 9 + p.length;
      this.connWindow -= p.length;
      s.window -= p.length;
      sent++;
    }
    if (sent === 0) return { sent, full: false };
    const full = !this.socket.write(out.subarray(0, size));
    return { sent, full };
  }

  /** Resolves when the socket's buffer has drained. */
  drained(): Promise<void> {
    return new Promise((resolve) => this.socket.once('drain', resolve));
  }

  close(): void {
    this.failure ??= new Error('closed');
    this.socket.destroy();
  }

  private fail(err: Error): void {
    if (this.failure !== null) return;
    this.failure = err;
    this.notify();
  }

  private notify(): void {
    for (const w of [...this.waiters]) w();
    this.onProgress();
  }

  private read(chunk: Buffer): void {
    let buf = this.pending.length === 0 ? chunk : Buffer.concat([this.pending, chunk]);
    let at = 0;
    while (buf.length - at >= 9) {
      const length = (buf[at] << 16) | (buf[at + 1] << 8) | buf[at + 2];
      if (buf.length - at < 9 + length) break;
      const type = buf[at + 3];
      const flags = buf[at + 4];
      const stream = buf.readUInt32BE(at + 5) & MAX_WINDOW;
      this.onFrame(type, flags, stream, buf.subarray(at + 9, at + 9 + length));
      at += 9 + length;
    }
    buf = buf.subarray(at);
    this.pending = buf.length === 0 ? Buffer.alloc(0) : Buffer.from(buf);
    this.notify();
  }

  private onFrame(type: number, flags: number, stream: number, payload: Buffer): void {
    switch (type) {
      case FRAME_SETTINGS:
        if ((flags & FLAG_ACK) !== 0) return;
        for (let i = 0; i + 6 <= payload.length; i += 6) {
          const id = payload.readUInt16BE(i);
          const value = payload.readUInt32BE(i + 2);
          if (id === SETTINGS_INITIAL_WINDOW_SIZE) {
            // Applies to every open stream as a change (RFC 9113 §6.9.2).
            for (const s of this.streams.values()) s.window += value - this.initialWindow;
            this.initialWindow = value;
          } else if (id === SETTINGS_MAX_FRAME_SIZE) this.maxFrame = value;
        }
        this.socket.write(frame(FRAME_SETTINGS, FLAG_ACK, 0));
        return;
      case FRAME_WINDOW_UPDATE: {
        const inc = payload.readUInt32BE(0) & MAX_WINDOW;
        if (stream === 0) this.connWindow += inc;
        else {
          const s = this.streams.get(stream);
          if (s !== undefined) s.window += inc;
        }
        return;
      }
      case FRAME_PING:
        if ((flags & FLAG_ACK) === 0) this.socket.write(frame(FRAME_PING, FLAG_ACK, 0, Buffer.from(payload)));
        return;
      case FRAME_DATA: {
        const s = this.streams.get(stream);
        if (s !== undefined) {
          s.received += payload.length;
          if ((flags & FLAG_END_STREAM) !== 0) s.ended = true;
        }
        return;
      }
      case FRAME_HEADERS: {
        const s = this.streams.get(stream);
        // Response headers, or trailers that end the stream: a device stream that ends is an error here.
        if (s !== undefined && (flags & FLAG_END_STREAM) !== 0) {
          s.ended = true;
          this.fail(new Error(`stream ${stream} ended by the server`));
        }
        return;
      }
      case FRAME_RST_STREAM:
        this.fail(new Error(`stream ${stream} reset by the server (code ${payload.readUInt32BE(0)})`));
        return;
      case FRAME_GOAWAY:
        this.fail(new Error(`GOAWAY from the server (code ${payload.readUInt32BE(4)})`));
        return;
      default:
        return; // PRIORITY, CONTINUATION of response headers (never split here), unknown types
    }
  }
}
