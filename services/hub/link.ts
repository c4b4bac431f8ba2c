/**
 * The wire between gateway processes and the process that holds the embedded hub on the same
 * node (`AMBIT_GATEWAYS=N` without Redis). A link carries frames of bytes: over a private pipe
 * between the node's supervisor and each gateway process (a length prefix per frame), or over a
 * MessagePort (tests). Each side writes everything it has to say within one event-loop turn into
 * one frame, as records:
 *
 * - the hot ones in a binary layout of their own: acks, credit, location moves, publishes
 *   (events) and deliveries. An event that reaches many devices of one gateway is written once per
 *   frame and referred to by number; a delivery is its id, time, event number and subscription ids.
 *
 * Notifications are pushed, not pulled: each open inbox has a credit (how many deliveries the
 * gateway will hold for it that its device has not taken yet). The hub sends what an inbox's log
 * has, up to its credit, at the end of the turn that appended it; the gateway gives credit back
 * as its device stream takes deliveries. A device that does not read leaves its backlog in the
 * hub's log, as before, and one that reads costs no request per batch.
 * - the rest (subscription changes, lists, stats, opening an inbox) as V8-serialized values:
 *   exact for every value the model allows (-0, any string), and rare.
 *
 * `LinkedHub` (linked.ts) is the gateway side, `HubServer` (hub-server.ts) the hub side.
 */
import type { Socket } from 'node:net';
import type { MessagePort } from 'node:worker_threads';
import { AmbitError, type ErrorCode, PublishError, type PublishOutcome, ValidationError } from '../../src/model/errors.js';
import { type Limits, inRange, keepCheckedEvent, resolveLimits } from '../../src/model/limits.js';
import { quickTags } from '../../src/model/tags.js';
import type { Event, Value } from '../../src/model/types.js';
import { FrameReader, FrameWriter } from './frames.js';
import { type DeviceQuery, type DeviceSubscription, ENGINE_SIDE_LIMITS, type Revocation, apiEventBytes, eventNumberField, linkEventBytes } from './port.js';

/** The file descriptor of a gateway process's pipe to the hub (its fifth stdio entry). */
export const HUB_PIPE_FD = 4;

// ---- record tags ----

/** Gateway → hub. */
export const G = {
  /** u32 request, u8 op (CALL_OPS), bytes V8 payload. */
  CALL: 1,
  /** u32 request, u32 count, events. */
  PUB: 2,
  /** u32 inbox, u32 credit given back (deliveries its stream took). */
  CREDIT: 3,
  /** u32 inbox, str delivery id. */
  ACK: 4,
  /** u32 inbox. */
  SHUT: 5,
  /** u32 writer, str device. */
  WOPEN: 6,
  /** u32 count, then count × (u32 writer, f64 lat, f64 lon). */
  WMOVE: 7,
  /** u32 writer. */
  WCLOSE: 8,
  /** u32 request, u32 count × (u32 writer, f64 lat, f64 lon): UpdateLocations, answered once applied. */
  LOCS: 9,
} as const;

/** Hub → gateway. */
export const H = {
  /** u32 request, bytes V8 value. */
  REPLY: 20,
  /** u32 request, bytes V8 WireError. */
  ERROR: 21,
  /** u32 request, u32 count × (str event id, f64 reached, u8 duplicate). */
  PUBLISHED: 22,
  /** u32 event number within this frame, f64 the event's number in the node, u32 length, event. */
  EVENT: 23,
  /**
   * u32 inbox, u32 count × (str delivery id, f64 published at, u32 event number, u32 n, n × str,
   * u8 1 and bytes V8 DeliveryMatch for a pattern's match, else u8 0).
   */
  PUSH: 24,
  /** u32 inbox: the device's state was purged; the inbox ends (purgedError). */
  PURGED: 25,
  /** bytes V8 Revocation[]: every revocation in force (after a 'watchrev' call, and at each change). */
  REVOKED: 26,
} as const;

/** Hub (the matcher of a node with fan-out shards) ↔ one fan-out shard; events are H.EVENT records. */
export const S = {
  /** f64 sequence number of the deliver call whose notifications came before it (f64: it never wraps). */
  SEQ: 41,
  /** Shard → hub: f64 last sequence number stored, f64 notifications stored, f64 dropped by retention (totals). */
  STORED: 42,
  /**
   * u32 event number, f64 published at, u32 n, then n matched subscriptions of devices of this
   * shard, each: u8 M.NUM f64 number (told before) | u8 M.TELL f64 number, str device, str id (the
   * number's first use) | u8 M.KEY str device, str id (a subscription removed while its match was
   * awaited). The shard groups them by device: one notification per device, ids sorted. Numbers
   * are f64 so that they never wrap.
   */
  MATCH: 43,
  /** f64 number: a subscription that left; the shard forgets its number. */
  FORGET: 44,
  /** f64 request, str device: drop the device's log (after everything sent before it). */
  PURGE: 45,
  /** Shard → hub: f64 request, f64 notifications the purged log held. */
  PURGED: 46,
  /**
   * A pattern subscription's match (docs/semantics.md E20): u32 event number (its terminator),
   * f64 published at, str device, str subscription id, bytes V8 DeliveryMatch.
   */
  PATTERN: 47,
} as const;

/** The kinds of entry of an S.MATCH record. */
export const M = { NUM: 1, TELL: 2, KEY: 3 } as const;

export const CALL_OPS = ['add', 'replace', 'remove', 'list', 'info', 'open', 'stats', 'devices', 'purge', 'seen', 'expire', 'revoke', 'watchrev'] as const;
export type CallOp = (typeof CALL_OPS)[number];

/** A CALL's payload: the device, and what the op needs (subscription, id, resume point). */
export interface CallArgs {
  d: string;
  s?: DeviceSubscription;
  id?: string;
  r?: string | null;
  /** open: the inbox's number (the gateway's) and its first credit. */
  b?: number;
  c?: number;
  /** devices: the listing's query. */
  q?: DeviceQuery;
  /** seen: the devices; seen and expire: the time; expire: the most to purge. */
  ds?: readonly string[];
  ms?: number;
  n?: number;
  /** revoke: the revocations. */
  rv?: readonly Revocation[];
}

// ---- links ----

/** One end of a channel of byte frames. */
export interface Link {
  /** Sends `frame`, which is handed over: the caller neither reads nor writes it afterwards. */
  post(frame: Buffer): void;
  /** Ends the channel (both ends see it close). */
  close(): void;
  /** `onFrame` for each frame; `onClose` once the other end is gone. */
  listen(onFrame: (frame: Buffer) => void, onClose: () => void): void;
}

/** A stream socket (the node's private pipe): each frame is a u32 length and the bytes. */
export function socketLink(socket: Socket): Link {
  return {
    post: (frame) => {
      if (socket.destroyed) return;
      const head = Buffer.allocUnsafe(4);
      head.writeUInt32LE(frame.length, 0);
      socket.cork();
      socket.write(head);
      socket.write(frame);
      socket.uncork();
    },
    close: () => {
      socket.end();
      socket.unref();
    },
    listen: (onFrame, onClose) => {
      let chunks: Buffer[] = [];
      let have = 0;
      let need = -1;
      socket.on('data', (chunk: Buffer) => {
        chunks.push(chunk);
        have += chunk.length;
        for (;;) {
          if (need < 0) {
            if (have < 4) return;
            const all = chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, have);
            need = all.readUInt32LE(0);
            chunks = [all.subarray(4)];
            have -= 4;
          }
          if (have < need) return;
          const all = chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, have);
          const frame = all.subarray(0, need);
          chunks = have > need ? [all.subarray(need)] : [];
          have -= need;
          need = -1;
          onFrame(frame);
        }
      });
      let closed = false;
      const close = () => {
        if (closed) return;
        closed = true;
        onClose();
      };
      socket.on('close', close);
      socket.on('end', close);
      socket.on('error', close);
    },
  };
}

/**
 * One end of a worker_threads MessagePort pair (the fan-out shards, hub partitions; tests). A
 * frame's memory moves to the other thread (a transfer): a copy would take the whole buffer under
 * the frame's view, its unused room included. A frame in Node's shared pool of small buffers,
 * which cannot move, is copied.
 */
export function portLink(port: MessagePort): Link {
  return {
    post: (frame) => port.postMessage(frame, [frame.buffer as ArrayBuffer]),
    close: () => port.close(),
    listen: (onFrame, onClose) => {
      port.on('message', (m: Uint8Array) => onFrame(Buffer.from(m.buffer, m.byteOffset, m.byteLength)));
      port.on('close', onClose);
    },
  };
}

// ---- frames (frames.ts) ----

export { FrameReader, FrameWriter } from './frames.js';

// ---- events ----

const T_NUMBER = 0;
const T_STRING = 1;
const T_TRUE = 2;
const T_FALSE = 3;

/**
 * id, lat, lon, radius (NaN: absent), then each attribute: name, type, value; the tags (a count,
 * 0 when absent or empty, then each); the event time (NaN: absent); then the event as the API
 * encodes it, when a gateway did (`apiEventBytes`; length 0: not encoded).
 */
export function writeEvent(w: FrameWriter, e: Event): void {
  w.str(e.id);
  w.f64(e.lat);
  w.f64(e.lon);
  w.f64(e.radiusM === undefined ? NaN : e.radiusM);
  const a = e.attributes;
  const keys = Object.keys(a);
  w.u32(keys.length);
  for (const k of keys) {
    w.str(k);
    const v = a[k];
    if (typeof v === 'number') {
      w.u8(T_NUMBER);
      w.f64(v);
    } else if (typeof v === 'string') {
      w.u8(T_STRING);
      w.str(v);
    } else w.u8(v ? T_TRUE : T_FALSE);
  }
  const tags = e.tags;
  if (tags === undefined) w.u32(0);
  else {
    w.u32(tags.length);
    for (let i = 0; i < tags.length; i++) w.str(tags[i]);
  }
  w.f64(e.timeMs === undefined ? NaN : e.timeMs);
  const api = apiEventBytes.get(e);
  if (api === undefined) w.u32(0);
  else w.bytes(api);
}

/**
 * The limits a hub's engine applies to events (ENGINE_SIDE_LIMITS over the model's defaults), which
 * the gateways of the node check before they publish: a hub's reader of published events checks
 * them again as it decodes (`readPublished`) and keeps the event's normal form with it, so the
 * engine does not measure its strings again.
 */
export const HUB_EVENT_LIMITS: Limits = resolveLimits(ENGINE_SIDE_LIMITS);

/**
 * `keepApi` false: the API bytes are skipped, not kept (a reader that keeps the whole record
 * instead). `check`: limits to check the event against as it is read; when it keeps to them, its
 * normal form is kept with it (keepCheckedEvent), built from what is read anyway: each string's
 * UTF-8 length is in the frame (this writer's strings are well-formed UTF-8), so nothing is
 * measured again. An event that does not keep to them is read as it is, for the engine to refuse
 * with its field named.
 */
export function readEvent(r: FrameReader, keepApi = true, check: Limits | null = null): Event {
  const idBytes = r.nextLength();
  let ok = check !== null && idBytes >= 1 && idBytes <= check.maxIdBytes;
  const id = r.str();
  const lat = r.f64();
  const lon = r.f64();
  const radiusM = r.f64();
  const n = r.u32();
  const attributes: Record<string, Value> = {};
  if (ok) ok = inRange(lat, lon) && (Number.isNaN(radiusM) || (radiusM >= 0 && radiusM <= check!.maxEventRadiusM)) && n <= check!.maxAttributesPerEvent;
  const names: string[] | null = ok ? new Array<string>(n) : null;
  const values: Value[] | null = ok ? new Array<Value>(n) : null;
  for (let k = 0; k < n; k++) {
    if (ok) {
      const len = r.nextLength();
      ok = len >= 1 && len <= check!.maxNameBytes;
    }
    const name = r.name();
    const t = r.u8();
    let v: Value;
    if (t === T_NUMBER) {
      v = r.f64();
      if (ok) ok = Number.isFinite(v);
    } else if (t === T_STRING) {
      if (ok) ok = r.nextLength() <= check!.maxStringBytes;
      v = r.name();
    } else v = t === T_TRUE;
    // A name twice (no writer of ours does that) leaves one attribute: not the normal form's two.
    if (ok && Object.hasOwn(attributes, name)) ok = false;
    // An attribute may be named __proto__: define it, do not set the prototype.
    if (name === '__proto__') Object.defineProperty(attributes, name, { value: v, enumerable: true, writable: true, configurable: true });
    else attributes[name] = v;
    if (ok) {
      names![k] = name;
      values![k] = v;
    }
  }
  const e: Event = Number.isNaN(radiusM) ? { id, lat, lon, attributes } : { id, lat, lon, radiusM, attributes };
  const nTags = r.u32();
  if (nTags > 0) {
    const tags: string[] = new Array(nTags);
    for (let k = 0; k < nTags; k++) tags[k] = r.name();
    e.tags = tags;
  }
  const timeMs = r.f64();
  if (!Number.isNaN(timeMs)) e.timeMs = timeMs;
  const apiLen = r.u32();
  if (apiLen > 0) {
    if (r.o + apiLen > r.b.length) throw new RangeError(`event bytes of ${apiLen} past the frame's end`);
    // A copy: the frame's buffer is not kept alive by the events it carried.
    if (keepApi) apiEventBytes.set(e, Buffer.from(r.b.subarray(r.o, r.o + apiLen)));
    r.o += apiLen;
  }
  if (ok) {
    // Tags in their normal form (T2), as the engine's own check gives them; null: not kept to.
    const tags = quickTags(e.tags, check!.maxTagsPerEvent, check!.maxTagBytes);
    if (tags !== null) keepCheckedEvent(e, { id, lat, lon, radiusM: Number.isNaN(radiusM) || radiusM === 0 ? 0 : radiusM, names: names!, values: values!, tags }, check!);
  }
  return e;
}

// ---- errors ----

export interface WireError {
  /** AmbitError code, or '' for any other error. */
  c: ErrorCode | '';
  /** The message without the `field: ` prefix AmbitError adds. */
  m: string;
  f?: string;
  /** A ValidationError's rule. */
  r?: string;
  /** A PublishError's outcome. */
  o?: PublishOutcome;
}

export function toWire(err: unknown): WireError {
  if (err instanceof ValidationError) return { c: err.code, m: err.rule, f: err.field, r: err.rule };
  if (err instanceof PublishError) return { c: err.code, m: err.message, o: err.outcome };
  if (err instanceof AmbitError) {
    const f = err.field;
    return { c: err.code, m: f === undefined ? err.message : err.message.slice(f.length + 2), ...(f === undefined ? {} : { f }) };
  }
  return { c: '', m: err instanceof Error ? err.message : String(err) };
}

export function fromWire(e: WireError): Error {
  if (e.r !== undefined && e.f !== undefined) return new ValidationError(e.f, e.r);
  if (e.o !== undefined) return new PublishError(e.o, e.m);
  if (e.c !== '') return new AmbitError(e.c, e.m, e.f);
  return new Error(`hub: ${e.m}`);
}

// ---- the sending side ----

/**
 * Records written within one event-loop turn, posted as one frame at its end. `beforeFlush`
 * lets the owner add what it coalesces (location moves) at the end of the frame.
 */
/** Events as link records, encoded once however many gateways, shards and frames carry them. */
const eventBytes = linkEventBytes;
const scratch = new FrameWriter();

export function encodedEvent(e: Event): Buffer {
  let b = eventBytes.get(e);
  if (b === undefined) {
    writeEvent(scratch, e);
    b = scratch.copy();
    eventBytes.set(e, b);
  }
  return b;
}

/**
 * Each event published on a node has a number there, given by the gateway process that accepted
 * it (its origin, unique among the node's gateway processes, in the high bits; a count in the low
 * 32) and carried with it on every link: the hub, its partitions and its fan-out shards keep it
 * (`readPublished`, `EventCache.read`). A gateway that gets an event again, in another frame or
 * from another shard or partition, finds the object it decoded the first time: the event is
 * decoded, converted and encoded for its devices once, not once per frame.
 */
const eventNumbers = eventNumberField;
const ORIGIN_UNIT = 2 ** 32;
/** Origins a node may number events with (the number stays an exact double). */
export const MAX_EVENT_ORIGIN = 2 ** 20;
let nextEventNumber = 1;

/** Numbers this process's events from `origin` on (a gateway process of a node: its own origin). */
export function setEventOrigin(origin: number): void {
  if (!Number.isSafeInteger(origin) || origin < 0 || origin >= MAX_EVENT_ORIGIN) throw new RangeError(`event origin ${origin} outside [0, ${MAX_EVENT_ORIGIN})`);
  nextEventNumber = origin * ORIGIN_UNIT + 1;
}

export function eventNumber(e: Event): number {
  let n = eventNumbers.get(e);
  if (n === undefined) {
    n = nextEventNumber++;
    eventNumbers.set(e, n);
  }
  return n;
}

/** Writes an H.EVENT record: `ref` numbers the event within this frame. */
export function writeEventRecord(w: FrameWriter, ref: number, e: Event): void {
  const b = encodedEvent(e);
  w.u8(H.EVENT);
  w.u32(ref);
  w.f64(eventNumber(e));
  w.u32(b.length);
  w.raw(b);
}

/** Writes a published event: its number, then the event (encoded once for every link it goes on). */
export function writePublished(w: FrameWriter, e: Event): void {
  w.f64(eventNumber(e));
  w.raw(encodedEvent(e));
}

/** Reads what `writePublished` wrote; the event keeps its number and its bytes for the links it goes on. */
export function readPublished(r: FrameReader): Event {
  const n = r.f64();
  const start = r.o;
  // The record kept whole carries the API bytes on to the gateways: no second copy of them.
  const e = readEvent(r, false, HUB_EVENT_LIMITS);
  eventNumbers.set(e, n);
  eventBytes.set(e, Buffer.from(r.b.subarray(start, r.o)));
  return e;
}

/** Events a cache keeps per origin (a power of two): the newest of each slot. */
const RING = 1024;

/** One origin's events lately received, each in the slot of its count. */
interface Ring {
  readonly ns: Float64Array;
  readonly es: (Event | undefined)[];
}

/**
 * The events a reader received lately, by their number in the node: per origin, a ring of the
 * newest in each slot (an event that lost its slot is decoded again if it comes again). Shared by
 * the links of one gateway (one per hub partition), so an event is decoded once per process.
 */
export class EventCache {
  private readonly rings = new Map<number, Ring>();
  private lastOrigin = -1;
  private last: Ring | null = null;

  /** `maxOrigins`: origins it keeps rings for (the oldest ring goes first). */
  constructor(private readonly maxOrigins = 1024) {}

  private ring(n: number, make: boolean): Ring | null {
    const origin = Math.floor(n / ORIGIN_UNIT);
    if (origin === this.lastOrigin) return this.last;
    let ring = this.rings.get(origin) ?? null;
    if (ring === null) {
      if (!make) return null;
      ring = { ns: new Float64Array(RING).fill(-1), es: new Array<Event | undefined>(RING).fill(undefined) };
      this.rings.set(origin, ring);
      if (this.rings.size > this.maxOrigins) this.rings.delete(this.rings.keys().next().value as number);
    }
    this.lastOrigin = origin;
    this.last = ring;
    return ring;
  }

  /** The event numbered `n`, if it is still here. */
  get(n: number): Event | undefined {
    const ring = this.ring(n, false);
    if (ring === null) return undefined;
    const slot = n % RING;
    return ring.ns[slot] === n ? ring.es[slot] : undefined;
  }

  /** Keeps `e` (numbered `n`). */
  remember(n: number, e: Event): void {
    const ring = this.ring(n, true)!;
    const slot = n % RING;
    ring.ns[slot] = n;
    ring.es[slot] = e;
  }

  /** Reads an H.EVENT record (its tag already read): the frame's number for it and the event. */
  read(r: FrameReader): [ref: number, e: Event] {
    const ref = r.u32();
    const n = r.f64();
    const len = r.u32();
    const known = this.get(n);
    if (known !== undefined) {
      r.o += len;
      return [ref, known];
    }
    const end = r.o + len;
    const e = readEvent(r);
    if (r.o !== end) throw new Error(`event record of ${len} bytes read as ${len + r.o - end}`);
    eventNumbers.set(e, n);
    this.remember(n, e);
    return [ref, e];
  }
}

export class Outbox {
  readonly w = new FrameWriter();
  private scheduled = false;
  closed = false;

  constructor(
    private readonly link: Link,
    private readonly beforeFlush: () => void = () => {},
  ) {}

  /**
   * The writer of the current frame, with a flush scheduled at the end of this turn. Once the
   * outbox is closed, what is written is dropped (the writer starts over each time).
   */
  get frame(): FrameWriter {
    if (this.closed) {
      this.w.n = 0;
      return this.w;
    }
    if (!this.scheduled) {
      this.scheduled = true;
      setImmediate(this.flush);
    }
    return this.w;
  }

  /** Schedules a flush with nothing written yet (coalesced updates wait for it). */
  wake(): void {
    if (!this.scheduled && !this.closed) {
      this.scheduled = true;
      setImmediate(this.flush);
    }
  }

  readonly flush = (): void => {
    this.scheduled = false;
    if (this.closed) return;
    this.beforeFlush();
    if (this.w.empty) return;
    this.link.post(this.w.take());
  };
}
