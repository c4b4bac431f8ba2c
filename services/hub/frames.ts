/**
 * The byte frames of the node's links (link.ts): a writer that grows its buffer and a reader that
 * throws on reading past the end. Strings are a u32 byte length and their UTF-8 bytes.
 */
import { deserialize, serialize } from 'node:v8';
import { INTERN_MAX_BYTES, internedString } from './interned.js';

const MIN_FRAME = 16 * 1024;

/** A DataView over a buffer's bytes: its getters and setters compile to loads and stores (Buffer's readDoubleLE and writeDoubleLE copy byte by byte). */
const viewOf = (b: Buffer): DataView => new DataView(b.buffer, b.byteOffset, b.byteLength);

export class FrameWriter {
  buf = Buffer.allocUnsafe(MIN_FRAME);
  private view = viewOf(this.buf);
  n = 0;

  get empty(): boolean {
    return this.n === 0;
  }

  private reserve(k: number): void {
    if (this.n + k <= this.buf.length) return;
    const next = Buffer.allocUnsafe(Math.max(this.buf.length * 2, this.n + k));
    this.buf.copy(next, 0, 0, this.n);
    this.buf = next;
    this.view = viewOf(next);
  }

  u8(v: number): void {
    this.reserve(1);
    this.buf[this.n++] = v;
  }

  u32(v: number): void {
    this.reserve(4);
    this.view.setUint32(this.n, v, true);
    this.n += 4;
  }

  f64(v: number): void {
    this.reserve(8);
    this.view.setFloat64(this.n, v, true);
    this.n += 8;
  }

  str(s: string): void {
    const chars = s.length;
    this.reserve(4 + 3 * chars);
    const buf = this.buf;
    const at = this.n;
    // Ids are short and mostly ASCII: a byte loop beats the native UTF-8 call there.
    if (chars <= 64) {
      let o = at + 4;
      let k = 0;
      for (; k < chars; k++) {
        const c = s.charCodeAt(k);
        if (c >= 0x80) break;
        buf[o++] = c;
      }
      if (k === chars) {
        buf[at] = chars;
        buf[at + 1] = 0;
        buf[at + 2] = 0;
        buf[at + 3] = 0;
        this.n = o;
        return;
      }
    }
    const len = buf.write(s, at + 4, 'utf8');
    buf.writeUInt32LE(len, at);
    this.n = at + 4 + len;
  }

  /** Bytes as they are (no length): a record encoded before. */
  raw(b: Uint8Array): void {
    this.reserve(b.length);
    this.buf.set(b, this.n);
    this.n += b.length;
  }

  bytes(b: Uint8Array): void {
    this.reserve(4 + b.length);
    this.buf.writeUInt32LE(b.length, this.n);
    this.buf.set(b, this.n + 4);
    this.n += 4 + b.length;
  }

  value(v: unknown): void {
    this.bytes(serialize(v));
  }

  /** A copy of what was written; the writer starts over in the same memory. */
  copy(): Buffer {
    const out = Buffer.allocUnsafe(this.n);
    this.buf.copy(out, 0, 0, this.n);
    this.n = 0;
    return out;
  }

  /** The frame so far; the writer starts a new one. */
  take(): Buffer {
    const out = this.buf.subarray(0, this.n);
    this.buf = Buffer.allocUnsafe(Math.max(MIN_FRAME, Math.min(this.n, 1 << 20)));
    this.view = viewOf(this.buf);
    this.n = 0;
    return out;
  }
}

export class FrameReader {
  o = 0;
  private readonly view: DataView;

  constructor(readonly b: Buffer) {
    this.view = viewOf(b);
  }

  get more(): boolean {
    return this.o < this.b.length;
  }

  u8(): number {
    return this.b[this.o++];
  }

  /** Reading past the end throws a RangeError (the frame is unreadable). */
  u32(): number {
    const v = this.view.getUint32(this.o, true);
    this.o += 4;
    return v;
  }

  f64(): number {
    const v = this.view.getFloat64(this.o, true);
    this.o += 8;
    return v;
  }

  str(): string {
    const len = this.u32();
    const s = this.b.toString('utf8', this.o, this.o + len);
    this.o += len;
    return s;
  }

  /** str(), for strings that recur (names, tags, short values): short ASCII ones through internedString. */
  name(): string {
    const len = this.u32();
    if (this.o + len > this.b.length) throw new RangeError(`a string of ${len} bytes past the frame's end`);
    const s = len <= INTERN_MAX_BYTES ? internedString(this.b, this.o, len) : this.b.toString('utf8', this.o, this.o + len);
    this.o += len;
    return s;
  }

  /** The byte length of the string (str, name) or bytes that come next, without reading them. */
  nextLength(): number {
    return this.view.getUint32(this.o, true);
  }

  bytes(): Buffer {
    const len = this.u32();
    const b = this.b.subarray(this.o, this.o + len);
    this.o += len;
    return b;
  }

  value<T>(): T {
    return deserialize(this.bytes()) as T;
  }
}

