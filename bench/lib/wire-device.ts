/**
 * A lean device client for load generation: one Connect stream per device over node:http2
 * itself (gRPC framing written and read here, no gRPC library in the way), requests encoded with
 * the generated code, but notifications read straight from their bytes (only the delivery id and
 * the numeric attributes asked for) and acks written as bytes, coalesced across all devices of
 * the process once per `ackDelayMs` (0: once per turn). It costs a fraction of the SDK per
 * notification, so a benchmark's load processes are not what limits the server. It does not
 * reconnect: a stream that fails is counted and stays down (the benchmark reports it).
 */
import * as http2 from 'node:http2';
import { ConnectRequestSchema } from '../../api/gen/ambit/v1/device_pb.js';
import { DeviceService } from '../../api/gen/ambit/v1/device_pb.js';
import type { Subscription } from '../../sdk/types.js';
import { toWireSubscription } from '../../sdk/types.js';
import { create, toBinary } from '@bufbuild/protobuf';

/** What a notification carries for the benchmark: its numeric attributes by name. */
export type OnNotification = (attrs: ReadonlyMap<string, number>) => void;

// ---- protobuf wire reading (only what a notification needs) ----

function varint(b: Buffer, at: number): [value: number, next: number] {
  let v = 0;
  let mul = 1;
  for (;;) {
    const c = b[at++];
    v += (c & 0x7f) * mul;
    if (c < 0x80) return [v, at];
    mul *= 128;
  }
}

/** The end of the field whose value starts at `at` (wire type `wt`). */
function skip(b: Buffer, at: number, wt: number): number {
  switch (wt) {
    case 0:
      return varint(b, at)[1];
    case 1:
      return at + 8;
    case 2: {
      const [n, p] = varint(b, at);
      return p + n;
    }
    case 5:
      return at + 4;
    default:
      throw new Error(`wire-device: unexpected wire type ${wt}`);
  }
}

/** Calls `f(field, wireType, valueStart, valueEnd)` for each field of the message in [at, end). */
function fields(b: Buffer, at: number, end: number, f: (field: number, wt: number, start: number, stop: number) => void): void {
  while (at < end) {
    const [key, p] = varint(b, at);
    const wt = key & 7;
    let start = p;
    let stop: number;
    if (wt === 2) {
      const [n, q] = varint(b, p);
      start = q;
      stop = q + n;
    } else stop = skip(b, p, wt);
    f(Math.floor(key / 8), wt, start, stop);
    at = stop;
  }
}

/** Walks the fields of a message in [at, end): after next(), the field, its wire type and where its value lies (a length-delimited value without its length). */
class FieldCursor {
  field = 0;
  wt = 0;
  start = 0;
  stop = 0;

  constructor(
    private readonly b: Buffer,
    private at: number,
    private readonly end: number,
  ) {}

  next(): boolean {
    if (this.at >= this.end) return false;
    const [key, p] = varint(this.b, this.at);
    this.field = key >>> 3;
    this.wt = key & 7;
    if (this.wt === 2) {
      const [n, q] = varint(this.b, p);
      this.start = q;
      this.stop = q + n;
    } else {
      this.start = p;
      this.stop = skip(this.b, p, this.wt);
    }
    this.at = this.stop;
    return true;
  }
}

// ---- protobuf wire writing (acks) ----

function lenPrefix(n: number): number[] {
  const out: number[] = [];
  while (n >= 0x80) {
    out.push((n & 0x7f) | 0x80);
    n = Math.floor(n / 128);
  }
  out.push(n);
  return out;
}

/** ConnectRequest{ack: Ack{delivery_id: id}} (field 6, then field 1). */
function ackBytes(id: string): Buffer {
  const s = Buffer.from(id, 'utf8');
  const inner = [0x0a, ...lenPrefix(s.length)];
  const len = inner.length + s.length;
  return Buffer.concat([Buffer.from([0x32, ...lenPrefix(len), ...inner]), s]);
}

// ---- the devices ----

const CONNECT = `/${DeviceService.typeName}/${DeviceService.method.connect.name}`;

/** `msg` as one gRPC message (flag, length, bytes). */
function framed(msg: Uint8Array): Buffer {
  const out = Buffer.allocUnsafe(5 + msg.length);
  out[0] = 0;
  out.writeUInt32BE(msg.length, 1);
  out.set(msg, 5);
  return out;
}

export class WireDevices {
  private readonly sessions: http2.ClientHttp2Session[];
  private readonly streams: WireDevice[] = [];
  private readonly byDevice = new Map<number, WireDevice>();
  private dirty: WireDevice[] = [];
  private flushScheduled = false;
  private flushTimer: NodeJS.Timeout | null = null;
  /** One map for every notification's attributes (read synchronously by the callback). */
  readonly attrs = new Map<string, number>();
  failures = 0;

  constructor(
    address: string,
    connections: number,
    private readonly ackDelayMs: number,
    readonly wanted: readonly string[],
  ) {
    this.sessions = Array.from({ length: connections }, () => {
      const s = http2.connect(`http://${address}`);
      s.on('error', () => this.failures++);
      return s;
    });
  }

  /** Opens device `i`'s stream, subscribes, and resolves once every subscription is answered. */
  connect(i: number, token: string, subs: readonly Subscription[], onNotification: OnNotification): Promise<void> {
    const req = this.sessions[i % this.sessions.length].request({
      ':method': 'POST',
      ':path': CONNECT,
      'content-type': 'application/grpc',
      te: 'trailers',
      authorization: `Bearer ${token}`,
    });
    return new Promise<void>((resolve, reject) => {
      const d = new WireDevice(this, req, subs.length, onNotification, resolve, reject);
      this.streams.push(d);
      this.byDevice.set(i, d);
      const w = (m: unknown) => req.write(framed(toBinary(ConnectRequestSchema, create(ConnectRequestSchema, m as never))));
      w({ message: { case: 'hello', value: { resumeToken: '' } } });
      subs.forEach((sub, k) => w({ message: { case: 'subscribe', value: { requestId: String(k), subscription: toWireSubscription('subscription', sub) } } }));
      if (subs.length === 0) resolve();
    });
  }

  /**
   * Writes pre-encoded ConnectRequest bytes on device `i`'s stream; false when HTTP/2 flow control
   * asks to wait, then `ready` is called once the stream drains.
   */
  send(i: number, bytes: Buffer, ready: () => void): boolean {
    const d = this.byDevice.get(i);
    if (d === undefined) throw new Error(`wire-device: device ${i} is not connected`);
    if (d.req.write(framed(bytes))) return true;
    d.req.once('drain', ready);
    return false;
  }

  /** @internal A device has an ack to send. */
  mark(d: WireDevice): void {
    this.dirty.push(d);
    if (this.flushScheduled) return;
    this.flushScheduled = true;
    if (this.ackDelayMs === 0) setImmediate(this.flush);
    else this.flushTimer = setTimeout(this.flush, this.ackDelayMs);
  }

  private readonly flush = (): void => {
    this.flushScheduled = false;
    this.flushTimer = null;
    const ds = this.dirty;
    this.dirty = [];
    for (const x of ds) x.sendAck();
  };

  /** Sends the acks still waiting, then ends every stream. */
  close(): void {
    if (this.flushTimer !== null) clearTimeout(this.flushTimer);
    if (this.flushScheduled) this.flush();
    for (const d of this.streams) if (!d.req.closed) d.req.end();
    for (const s of this.sessions) s.close();
  }
}

class WireDevice {
  private last = '';
  private marked = false;
  private replies = 0;
  /** Bytes of a response message not complete yet. */
  private rest: Buffer | null = null;

  constructor(
    private readonly owner: WireDevices,
    readonly req: http2.ClientHttp2Stream,
    private readonly subscriptions: number,
    private readonly on: OnNotification,
    private readonly subscribed: () => void,
    private readonly failed: (err: Error) => void,
  ) {
    req.on('data', (chunk: Buffer) => this.received(chunk));
    const end = (h: http2.IncomingHttpHeaders) => {
      const code = h['grpc-status'];
      if (code !== undefined && code !== '0') {
        owner.failures++;
        failed(new Error(`wire-device: stream ended with status ${String(code)} ${decodeURI(String(h['grpc-message'] ?? ''))}`));
      }
    };
    req.on('response', end);
    req.on('trailers', end);
    req.on('error', (err: Error) => {
      owner.failures++;
      failed(err);
    });
  }

  private received(chunk: Buffer): void {
    let b = chunk;
    if (this.rest !== null) {
      b = Buffer.concat([this.rest, chunk]);
      this.rest = null;
    }
    let at = 0;
    while (b.length - at >= 5) {
      const len = b.readUInt32BE(at + 1);
      if (b.length - at - 5 < len) break;
      this.message(b, at + 5, at + 5 + len);
      at += 5 + len;
    }
    if (at < b.length) this.rest = b.subarray(at);
  }

  /** One ConnectResponse in b[at..end): a reply (2) or a notification (3). */
  private message(b: Buffer, at: number, end: number): void {
    const f = new FieldCursor(b, at, end);
    while (f.next()) {
      if (f.wt !== 2) continue;
      if (f.field === 3) this.notification(b, f.start, f.stop);
      else if (f.field === 2) this.reply(b, f.start, f.stop);
    }
  }

  /** Reply{request_id = 1, status = 2 {code = 1}}: a code other than 0 fails the setup. */
  private reply(b: Buffer, at: number, end: number): void {
    let code = 0;
    fields(b, at, end, (f, _wt, s0, s1) => {
      if (f === 2) fields(b, s0, s1, (g, wt2, t0) => (g === 1 && wt2 === 0 ? (code = varint(b, t0)[0]) : undefined));
    });
    if (code !== 0) this.failed(new Error(`wire-device: subscribe failed with code ${code}`));
    else if (++this.replies === this.subscriptions) this.subscribed();
  }

  /** Notification{delivery_id = 1, event = 2 {attributes = 4: entry {key = 1, value = 2: Value{number = 1}}}}. */
  private notification(b: Buffer, at: number, end: number): void {
    const attrs = this.owner.attrs;
    const wanted = this.owner.wanted;
    attrs.clear();
    const f = new FieldCursor(b, at, end);
    while (f.next()) {
      if (f.wt !== 2) continue;
      if (f.field === 1) this.last = b.toString('latin1', f.start, f.stop);
      else if (f.field === 2) {
        const ev = new FieldCursor(b, f.start, f.stop);
        while (ev.next()) {
          if (ev.field !== 4 || ev.wt !== 2) continue;
          // A map entry: key = 1 (string), value = 2 (Value{number = 1 (double)}).
          let name = '';
          let num = NaN;
          const entry = new FieldCursor(b, ev.start, ev.stop);
          while (entry.next()) {
            if (entry.field === 1 && entry.wt === 2) name = b.toString('latin1', entry.start, entry.stop);
            else if (entry.field === 2 && entry.wt === 2 && b[entry.start] === ((1 << 3) | 1)) num = b.readDoubleLE(entry.start + 1);
          }
          if (wanted.includes(name)) attrs.set(name, num);
        }
      }
    }
    this.on(attrs);
    if (!this.marked) {
      this.marked = true;
      this.owner.mark(this);
    }
  }

  sendAck(): void {
    this.marked = false;
    if (this.last !== '' && !this.req.closed) this.req.write(framed(ackBytes(this.last)));
  }
}
