/**
 * A lean device client for load generation: one Connect stream per device over grpc-js, requests
 * encoded with the generated code, but notifications read straight from their bytes (only the
 * delivery id and the numeric attributes asked for) and acks written as bytes, coalesced across
 * all devices of the process once per `ackDelayMs` (0: once per turn). It costs a fraction of the
 * SDK per notification, so a benchmark's load processes are not what limits the server. It does
 * not reconnect: a stream that fails is counted and stays down (the benchmark reports it).
 */
import * as grpc from '@grpc/grpc-js';
import { ConnectRequestSchema } from '../../api/gen/ambit/v1/device_pb.js';
import { grpcDefinition } from '../../api/rpc.js';
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

const definition = (() => {
  const def = grpcDefinition(DeviceService) as Record<string, grpc.MethodDefinition<unknown, unknown>>;
  return { connect: { ...def.connect, responseDeserialize: (b: Buffer) => b } } as grpc.ServiceDefinition;
})();
const Client = grpc.makeGenericClientConstructor(definition, DeviceService.typeName);

type Stream = grpc.ClientDuplexStream<unknown, Buffer>;

export class WireDevices {
  private readonly clients: grpc.Client[];
  private readonly streams: Stream[] = [];
  private readonly byDevice = new Map<number, Stream>();
  private dirty: WireDevice[] = [];
  private flushScheduled = false;
  private flushTimer: NodeJS.Timeout | null = null;
  failures = 0;

  constructor(
    address: string,
    connections: number,
    private readonly ackDelayMs: number,
    private readonly wanted: readonly string[],
  ) {
    // Distinct channel options: a connection of its own per client. No transparent retries: grpc-js
    // would keep every message a stream sends in case the call is retried, at a cost that grows
    // with the stream (most of the client's time when streams send locations, profiled).
    this.clients = Array.from({ length: connections }, (_, i) => new Client(address, grpc.credentials.createInsecure(), { 'ambit-bench.connection': i, 'grpc.enable_retries': 0, 'grpc.per_rpc_retry_buffer_size': 1 }));
  }

  /** Opens device `i`'s stream, subscribes, and resolves once every subscription is answered. */
  connect(i: number, token: string, subs: readonly Subscription[], onNotification: OnNotification): Promise<void> {
    const md = new grpc.Metadata();
    md.set('authorization', `Bearer ${token}`);
    const s = (this.clients[i % this.clients.length] as unknown as { connect(md: grpc.Metadata): Stream }).connect(md);
    this.streams.push(s);
    this.byDevice.set(i, s);
    const d = new WireDevice(this, s);
    let replies = 0;
    return new Promise<void>((resolve, reject) => {
      s.on('error', (err: Error) => {
        this.failures++;
        reject(err);
      });
      s.on('data', (b: Buffer) => {
        fields(b, 0, b.length, (field, _wt, start, stop) => {
          if (field === 3) d.notification(b, start, stop, this.wanted, onNotification);
          else if (field === 2) {
            // Reply{request_id = 1, status = 2 {code = 1}}: a code other than 0 fails the setup.
            let code = 0;
            fields(b, start, stop, (f, wt, s0, s1) => {
              if (f === 2) fields(b, s0, s1, (g, wt2, t0) => (g === 1 && wt2 === 0 ? (code = varint(b, t0)[0]) : undefined));
              void wt;
              void s1;
            });
            if (code !== 0) reject(new Error(`wire-device: subscribe failed with code ${code}`));
            else if (++replies === subs.length) resolve();
          }
        });
      });
      const w = (m: unknown) => s.write(Buffer.from(toBinary(ConnectRequestSchema, create(ConnectRequestSchema, m as never))));
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
    const s = this.byDevice.get(i);
    if (s === undefined) throw new Error(`wire-device: device ${i} is not connected`);
    if (s.write(bytes)) return true;
    s.once('drain', ready);
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
    for (const s of this.streams) s.end();
    for (const c of this.clients) c.close();
  }
}

class WireDevice {
  private last = '';
  private marked = false;

  constructor(
    private readonly owner: WireDevices,
    private readonly stream: Stream,
  ) {}

  notification(b: Buffer, at: number, end: number, wanted: readonly string[], on: OnNotification): void {
    const attrs = new Map<string, number>();
    fields(b, at, end, (field, _wt, start, stop) => {
      if (field === 1) this.last = b.toString('utf8', start, stop);
      else if (field === 2)
        // Event{attributes = 4: map entry {key = 1, value = 2: Value{number = 1}}}
        fields(b, start, stop, (f, _w, s0, s1) => {
          if (f !== 4) return;
          let key = '';
          let num = NaN;
          fields(b, s0, s1, (g, _w2, t0, t1) => {
            if (g === 1) key = b.toString('utf8', t0, t1);
            else if (g === 2) fields(b, t0, t1, (h, wt3, u0) => (h === 1 && wt3 === 1 ? (num = b.readDoubleLE(u0)) : undefined));
          });
          if (wanted.includes(key)) attrs.set(key, num);
        });
    });
    on(attrs);
    if (!this.marked) {
      this.marked = true;
      this.owner.mark(this);
    }
  }

  sendAck(): void {
    this.marked = false;
    if (this.last !== '') this.stream.write(ackBytes(this.last));
  }
}
