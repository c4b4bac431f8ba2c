/**
 * The hottest requests, decoded without the generic protobuf reader: the two messages a device
 * stream carries most, `ConnectRequest{location: LatLon}` and `ConnectRequest{ack: Ack}`, in the
 * layouts encoders write (one field, a one-byte length; LatLon's doubles in any order; an ASCII
 * delivery id), UpdateLocations batches, and the events of Publish and BulkPublish. The result is
 * the object protobuf-es's `fromBinary` builds for the same bytes (a test holds the two side by
 * side over random and edge-case inputs); anything else returns null and takes the generic reader.
 */
import type { ConnectRequest, UpdateLocationsRequest } from './gen/ambit/v1/device_pb.js';
import type { BulkPublishRequest, PublishRequest } from './gen/ambit/v1/publisher_pb.js';
import type { Event, Value } from './gen/ambit/v1/types_pb.js';

const TAG_LOCATION = (2 << 3) | 2;
const TAG_ACK = (6 << 3) | 2;
const TAG_LAT = (1 << 3) | 1;
const TAG_LON = (2 << 3) | 1;
const TAG_DELIVERY_ID = (1 << 3) | 2;

export function fastConnectRequest(b: Uint8Array): ConnectRequest | null {
  const n = b.length;
  if (n < 2) return null;
  const len = b[1];
  if (len >= 0x80 || len + 2 !== n) return null;
  if (b[0] === TAG_LOCATION) {
    const value = latLon(b, 2, n);
    return value === null ? null : { $typeName: 'ambit.v1.ConnectRequest', message: { case: 'location', value } };
  }
  if (b[0] === TAG_ACK) {
    if (n < 4 || b[2] !== TAG_DELIVERY_ID || b[3] + 4 !== n) return null;
    const deliveryId = ascii(b, 4, n);
    return deliveryId === null ? null : { $typeName: 'ambit.v1.ConnectRequest', message: { case: 'ack', value: { $typeName: 'ambit.v1.Ack', deliveryId } } };
  }
  return null;
}

/** Where fastLocation (and every LatLon read here) puts lat and lon. */
export const LOCATION = new Float64Array(2);
/** A double's 8 bytes copied from the message, read little-endian (no view made per message). */
const F64_BYTES = new Uint8Array(8);
const F64_VIEW = new DataView(F64_BYTES.buffer);

/**
 * The message b[from, to) when it is a `ConnectRequest{location}` that fastConnectRequest reads
 * (its layout exactly): true, with lat and lon in LOCATION[0] and [1]; false for anything else,
 * which the decoder takes. The stream's hot path: no request, no view, no object built.
 */
export function fastLocation(b: Uint8Array, from: number, to: number): boolean {
  const n = to - from;
  if (n < 2 || b[from] !== TAG_LOCATION) return false;
  const len = b[from + 1];
  return len < 0x80 && len + 2 === n && readLatLon(b, from + 2, to);
}

/**
 * A LatLon's fields in [from, to) into LOCATION: doubles 1 and 2, in any order, the last one
 * winning, a missing one 0; false for anything else.
 */
function readLatLon(b: Uint8Array, from: number, to: number): boolean {
  let lat = 0;
  let lon = 0;
  let o = from;
  while (o < to) {
    const k = b[o++];
    if (o + 8 > to) return false;
    for (let i = 0; i < 8; i++) F64_BYTES[i] = b[o + i];
    if (k === TAG_LAT) lat = F64_VIEW.getFloat64(0, true);
    else if (k === TAG_LON) lon = F64_VIEW.getFloat64(0, true);
    else return false;
    o += 8;
  }
  LOCATION[0] = lat;
  LOCATION[1] = lon;
  return true;
}

/** A LatLon's fields in [from, to) as protobuf-es's object (readLatLon); null for anything else. */
function latLon(b: Uint8Array, from: number, to: number): { $typeName: 'ambit.v1.LatLon'; lat: number; lon: number } | null {
  return readLatLon(b, from, to) ? { $typeName: 'ambit.v1.LatLon', lat: LOCATION[0], lon: LOCATION[1] } : null;
}

/** The bytes [from, to) as one flat string when all are ASCII, else null. */
function ascii(b: Uint8Array, from: number, to: number): string | null {
  for (let i = from; i < to; i++) if (b[i] >= 0x80) return null;
  // Short strings (ids, names, kinds) byte by byte: cheaper than a call into the runtime.
  if (to - from > 24) return (Buffer.isBuffer(b) ? b : Buffer.from(b.buffer, b.byteOffset, b.length)).toString('latin1', from, to);
  let s = '';
  for (let i = from; i < to; i++) s += String.fromCharCode(b[i]);
  return s;
}

// ---- UpdateLocationsRequest { repeated LocationUpdate updates = 1 } ----
//      LocationUpdate { string device_id = 1; LatLon location = 2 }

const TAG_UPDATES = (1 << 3) | 2;
const TAG_UPDATE_DEVICE = (1 << 3) | 2;
const TAG_UPDATE_LOCATION = (2 << 3) | 2;

/** A varint at `at` (up to 28 bits, enough for any length in a message here), or -1. */
function len(b: Uint8Array, at: number, end: number): [value: number, next: number] {
  let v = 0;
  for (let shift = 0; shift < 28; shift += 7) {
    if (at >= end) return [-1, at];
    const c = b[at++];
    v |= (c & 0x7f) << shift;
    if (c < 0x80) return [v, at];
  }
  return [-1, at];
}

/**
 * The batch of UpdateLocations as protobuf-es would decode it, for the layout clients write:
 * entries of an ASCII device id and a LatLon of doubles, each field at most once, nothing else.
 * Null for anything else (the generic reader then decides, errors included).
 */
export function fastUpdateLocationsRequest(b: Uint8Array): UpdateLocationsRequest | null {
  const n = b.length;
  const updates: UpdateLocationsRequest['updates'] = [];
  let o = 0;
  while (o < n) {
    if (b[o++] !== TAG_UPDATES) return null;
    const [size, start] = len(b, o, n);
    if (size < 0 || start + size > n) return null;
    const end = start + size;
    let deviceId: string | null = null;
    let location: { $typeName: 'ambit.v1.LatLon'; lat: number; lon: number } | undefined;
    let p = start;
    while (p < end) {
      const tag = b[p++];
      const [l, q] = len(b, p, end);
      if (l < 0 || q + l > end) return null;
      if (tag === TAG_UPDATE_DEVICE && deviceId === null) {
        deviceId = ascii(b, q, q + l);
        if (deviceId === null) return null;
      } else if (tag === TAG_UPDATE_LOCATION && location === undefined) {
        const at = latLon(b, q, q + l);
        if (at === null) return null;
        location = at;
      } else return null;
      p = q + l;
    }
    updates.push(location === undefined ? { $typeName: 'ambit.v1.LocationUpdate', deviceId: deviceId ?? '' } : { $typeName: 'ambit.v1.LocationUpdate', deviceId: deviceId ?? '', location });
    o = end;
  }
  return { $typeName: 'ambit.v1.UpdateLocationsRequest', updates };
}

// ---- PublishRequest { Event event = 1 }, BulkPublishRequest { repeated Event events = 1 } ----
//      Event { 1: id, 2: LatLon position, 3: double radius_m, 4: map<string, Value> attributes,
//              5: repeated string tags, 6: Timestamp time }
//      Value { oneof kind { 1: double number, 2: string text, 3: bool flag } }

const TAG_EVENTS = (1 << 3) | 2;
const E_ID = (1 << 3) | 2;
const E_POSITION = (2 << 3) | 2;
const E_RADIUS = (3 << 3) | 1;
const E_ATTRIBUTE = (4 << 3) | 2;
const E_TAG = (5 << 3) | 2;
const E_TIME = (6 << 3) | 2;
const ENTRY_KEY = (1 << 3) | 2;
const ENTRY_VALUE = (2 << 3) | 2;
const V_NUMBER = (1 << 3) | 1;
const V_TEXT = (2 << 3) | 2;
const V_FLAG = (3 << 3) | 0;
const TS_SECONDS = (1 << 3) | 0;
const TS_NANOS = (2 << 3) | 0;

/**
 * The bytes each event of a Publish or BulkPublish request came in, where they are exactly what
 * the API's encoder writes for the event they decode to: fields in number order, each once
 * (attributes and tags in a run), no field left at its default written out, no key twice or
 * ordered otherwise by JavaScript (a key starting with a digit), shortest lengths, a non-empty
 * id, whole milliseconds. A notification may carry such bytes as they came.
 */
export class PublishedEvents {
  private readonly source: Buffer;
  constructor(source: Uint8Array, private readonly spans: readonly number[]) {
    this.source = Buffer.isBuffer(source) ? source : Buffer.from(source.buffer, source.byteOffset, source.length);
  }

  /** A copy of event `i`'s bytes (by index in `events`; a PublishRequest's one is 0), or null where they are not the encoder's. */
  bytes(i: number): Uint8Array | null {
    const from = this.spans[2 * i];
    if (from === undefined || from < 0) return null;
    const to = this.spans[2 * i + 1];
    // A copy, not a view: the request's buffer is the transport's.
    const out = Buffer.allocUnsafe(to - from);
    this.source.copy(out, 0, from, to);
    return out;
  }
}

/** Returns the object it is given, so a subclass's private fields are added to that object. */
class Stamp {
  constructor(o: object) {
    return o;
  }
}

/**
 * A request's PublishedEvents as a private field of the request object: invisible to its keys
 * and to equality (the object stays the one protobuf-es would build), gone with the request.
 */
class Published extends Stamp {
  #events: PublishedEvents | undefined = undefined;

  static keep(req: object, events: PublishedEvents): void {
    new Published(req);
    (req as Published).#events = events;
  }

  static read(req: object): PublishedEvents | undefined {
    return #events in req ? (req as Published).#events : undefined;
  }
}

/** The events' bytes of a Publish or BulkPublish request the fast reader decoded; undefined for one the generic reader did. */
export function publishedEvents(req: object): PublishedEvents | undefined {
  return Published.read(req);
}

/** A BulkPublishRequest as protobuf-es decodes it, or null for a layout left to it. */
export function fastBulkPublishRequest(b: Uint8Array): BulkPublishRequest | null {
  const n = b.length;
  const events: Event[] = [];
  const spans: number[] = [];
  const view = new DataView(b.buffer, b.byteOffset, b.length);
  let o = 0;
  while (o < n) {
    if (b[o++] !== TAG_EVENTS) return null;
    const size = varint(b, o, n);
    o = at;
    if (size < 0 || o + size > n) return null;
    const e = readEvent(b, view, o, o + size);
    if (e === null) return null;
    events.push(e);
    spans.push(canonical ? o : -1, o + size);
    o += size;
  }
  const req: BulkPublishRequest = { $typeName: 'ambit.v1.BulkPublishRequest', events };
  Published.keep(req, new PublishedEvents(b, spans));
  return req;
}

/** A PublishRequest as protobuf-es decodes it, or null for a layout left to it. */
export function fastPublishRequest(b: Uint8Array): PublishRequest | null {
  const n = b.length;
  if (n < 2 || b[0] !== TAG_EVENTS) return null;
  const size = varint(b, 1, n);
  if (size < 0 || at + size !== n) return null;
  const e = readEvent(b, new DataView(b.buffer, b.byteOffset, b.length), at, n);
  if (e === null) return null;
  const req: PublishRequest = { $typeName: 'ambit.v1.PublishRequest', event: e };
  Published.keep(req, new PublishedEvents(b, [canonical ? n - size : -1, n]));
  return req;
}

/** Set by varint(): the offset after the varint read. */
let at = 0;
/** Set by varint(): whether it was written in the fewest bytes. */
let shortest = true;
/** Set by readEvent(): whether the event's bytes are canonical. */
let canonical = false;

/** A varint at `o` below 2^53 (else -1), the offset after it in `at`. */
function varint(b: Uint8Array, o: number, end: number): number {
  let v = 0;
  let scale = 1;
  for (let k = 0; k < 8; k++) {
    if (o >= end) return -1;
    const c = b[o++];
    v += (c & 0x7f) * scale;
    if (c < 0x80) {
      at = o;
      shortest = c !== 0 || k === 0;
      return v <= Number.MAX_SAFE_INTEGER ? v : -1;
    }
    scale *= 128;
  }
  return -1;
}

const strict = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/** The UTF-8 string in [from, to) as protobuf-es reads it, or null where it is not well-formed. */
function text(b: Uint8Array, from: number, to: number): string | null {
  const s = ascii(b, from, to);
  if (s !== null) return s;
  try {
    return strict.decode(b.subarray(from, to));
  } catch {
    return null;
  }
}

/** +0 is proto3's default, left out by encoders (-0 is written). */
const isDefault = (v: number): boolean => v === 0 && 1 / v > 0;

/**
 * One Event in [from, to): each singular field at most once, map entries of a key then a value,
 * values of one field, timestamps of non-negative whole parts; null for anything else. Sets
 * `canonical`.
 */
function readEvent(b: Uint8Array, view: DataView, from: number, to: number): Event | null {
  let canon = true;
  let last = 0;
  let id: string | null = null;
  let position: Event['position'];
  let radiusM: number | null = null;
  let time: Event['time'];
  const attributes: Record<string, Value> = {};
  const tags: string[] = [];
  let o = from;
  while (o < to) {
    const tag = b[o++];
    const field = tag >>> 3;
    if (field < last) canon = false;
    last = field;
    if (tag === E_RADIUS) {
      if (radiusM !== null || o + 8 > to) return null;
      radiusM = view.getFloat64(o, true);
      if (isDefault(radiusM)) canon = false;
      o += 8;
      continue;
    }
    const size = varint(b, o, to);
    o = at;
    if (size < 0 || o + size > to) return null;
    if (!shortest) canon = false;
    const end = o + size;
    switch (tag) {
      case E_ID:
        if (id !== null) return null;
        id = text(b, o, end);
        if (id === null) return null;
        break;
      case E_POSITION: {
        if (position !== undefined) return null;
        let lat: number | null = null;
        let lon: number | null = null;
        for (let p = o; p < end; p += 8) {
          const k = b[p++];
          if (p + 8 > end) return null;
          if (k === TAG_LAT && lat === null && lon === null) lat = view.getFloat64(p, true);
          else if (k === TAG_LON && lon === null) lon = view.getFloat64(p, true);
          else return null;
        }
        if ((lat !== null && isDefault(lat)) || (lon !== null && isDefault(lon))) canon = false;
        position = { $typeName: 'ambit.v1.LatLon', lat: lat ?? 0, lon: lon ?? 0 };
        break;
      }
      case E_ATTRIBUTE: {
        if (b[o] !== ENTRY_KEY) return null;
        const kLen = varint(b, o + 1, end);
        if (kLen < 0 || at + kLen > end) return null;
        if (!shortest) canon = false;
        const key = text(b, at, at + kLen);
        // An own __proto__ key is the generic reader's to make.
        if (key === null || key === '__proto__') return null;
        let p = at + kLen;
        if (b[p] !== ENTRY_VALUE) return null;
        const vLen = varint(b, p + 1, end);
        if (vLen < 0 || at + vLen !== end) return null;
        if (!shortest) canon = false;
        p = at;
        let value: Value;
        const k = b[p++];
        if (k === V_NUMBER && p + 8 === end) value = { $typeName: 'ambit.v1.Value', kind: { case: 'number', value: view.getFloat64(p, true) } };
        else if (k === V_FLAG && p + 1 === end && b[p] <= 1) value = { $typeName: 'ambit.v1.Value', kind: { case: 'flag', value: b[p] === 1 } };
        else if (k === V_TEXT) {
          const tLen = varint(b, p, end);
          if (tLen < 0 || at + tLen !== end) return null;
          if (!shortest) canon = false;
          const t = text(b, at, end);
          if (t === null) return null;
          value = { $typeName: 'ambit.v1.Value', kind: { case: 'text', value: t } };
        } else return null;
        // JavaScript lists integer-like keys first, and a key given twice where it first came.
        const c = key.charCodeAt(0);
        if ((c >= 48 && c <= 57) || Object.hasOwn(attributes, key)) canon = false;
        attributes[key] = value;
        break;
      }
      case E_TAG: {
        const t = text(b, o, end);
        if (t === null) return null;
        tags.push(t);
        break;
      }
      case E_TIME: {
        if (time !== undefined) return null;
        let seconds = -1;
        let nanos = -1;
        let p = o;
        while (p < end) {
          const k = b[p];
          const v = varint(b, p + 1, end);
          if (v < 0) return null;
          if (!shortest) canon = false;
          p = at;
          if (k === TS_SECONDS && seconds < 0 && nanos < 0) seconds = v;
          else if (k === TS_NANOS && nanos < 0 && v <= 0x7fffffff) nanos = v;
          else return null;
          if (v === 0) canon = false;
        }
        // The API's encoder writes whole milliseconds, carried into seconds.
        if (nanos > 0 && (nanos % 1_000_000 !== 0 || nanos >= 1_000_000_000)) canon = false;
        time = { $typeName: 'google.protobuf.Timestamp', seconds: BigInt(Math.max(seconds, 0)), nanos: Math.max(nanos, 0) };
        break;
      }
      default:
        return null;
    }
    o = end;
  }
  if (id === null || id === '' || position === undefined) canon = false;
  canonical = canon;
  const e: Event = { $typeName: 'ambit.v1.Event', id: id ?? '', radiusM: radiusM ?? 0, attributes, tags };
  if (position !== undefined) e.position = position;
  if (time !== undefined) e.time = time;
  return e;
}
