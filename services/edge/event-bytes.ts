/**
 * An event's API bytes (`ambit.v1.Event`) written directly, without building a protobuf-es
 * message: a notification's event is encoded once per event, but with many events per second
 * and few recipients each, the reflective encoder was a tenth of the delivering thread. The
 * bytes are exactly what `toBinary(EventSchema, fromEvent(e))` writes (a test holds the two side
 * by side on generated events); anything this writer does not cover (a time before 1970 or not
 * a whole millisecond) takes that path.
 *
 *   Event { 1: id, 2: LatLon { 1: lat, 2: lon }, 3: radius_m, 4: map<string, Value> attributes,
 *           5: repeated tags, 6: Timestamp { 1: seconds, 2: nanos } }
 *   Value { oneof: 1: number (double), 2: text, 3: flag }
 */
import { toBinary } from '@bufbuild/protobuf';
import type { Event as MEvent, Value as MValue } from '../../src/model/types.js';
import { EventSchema } from '../../api/gen/ambit/v1/types_pb.js';
import { TENANT_TAG, fromEvent } from './convert.js';

const T_ID = (1 << 3) | 2;
const T_POSITION = (2 << 3) | 2;
const T_LAT = (1 << 3) | 1;
const T_LON = (2 << 3) | 1;
const T_RADIUS = (3 << 3) | 1;
const T_ATTRIBUTE = (4 << 3) | 2;
const T_KEY = (1 << 3) | 2;
const T_VALUE = (2 << 3) | 2;
const T_NUMBER = (1 << 3) | 1;
const T_TEXT = (2 << 3) | 2;
const T_FLAG = (3 << 3) | 0;
const T_TAG = (5 << 3) | 2;
const T_TIME = (6 << 3) | 2;
const T_SECONDS = (1 << 3) | 0;
const T_NANOS = (2 << 3) | 0;

/** UTF-8 length of a string as Buffer and TextEncoder write it (a lone surrogate becomes U+FFFD, 3 bytes). */
export function utf8Length(s: string): number {
  let n = s.length;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x80) continue;
    if (c < 0x800) n += 1;
    else if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length && (s.charCodeAt(i + 1) & 0xfc00) === 0xdc00) {
      i++; // a pair: 2 code units, 4 bytes
      n += 2;
    } else n += 2; // 3 bytes, a lone surrogate included
  }
  return n;
}

/** Bytes of a non-negative integer below 2^53 as a varint. */
export function varintSize(n: number): number {
  let size = 1;
  while (n >= 128) {
    n = Math.floor(n / 128);
    size++;
  }
  return size;
}

export function writeVarint(out: Buffer, o: number, n: number): number {
  while (n >= 128) {
    out[o++] = (n % 128) | 0x80;
    n = Math.floor(n / 128);
  }
  out[o++] = n;
  return o;
}

/** Writes a string, ASCII byte by byte (short ids and names: cheaper than a call into the runtime). */
export function writeString(out: Buffer, o: number, s: string, bytes: number): number {
  if (bytes === s.length && bytes <= 64) {
    for (let i = 0; i < bytes; i++) out[o + i] = s.charCodeAt(i);
    return o + bytes;
  }
  return o + out.write(s, o, 'utf8');
}

/** Bytes of a `Timestamp` message of whole milliseconds >= 0 (seconds and nanos, each left out at 0). */
export function timestampSize(ms: number): number {
  const seconds = Math.floor(ms / 1000);
  const nanos = (ms - seconds * 1000) * 1_000_000;
  return (seconds !== 0 ? 1 + varintSize(seconds) : 0) + (nanos !== 0 ? 1 + varintSize(nanos) : 0);
}

/** Writes field `tag` holding the `Timestamp` of `ms` (whole, >= 0) whose size is `size` (timestampSize). */
export function writeTimestamp(out: Buffer, o: number, tag: number, ms: number, size: number): number {
  const seconds = Math.floor(ms / 1000);
  const nanos = (ms - seconds * 1000) * 1_000_000;
  out[o++] = tag;
  o = writeVarint(out, o, size);
  if (seconds !== 0) {
    out[o++] = T_SECONDS;
    o = writeVarint(out, o, seconds);
  }
  if (nanos !== 0) {
    out[o++] = T_NANOS;
    o = writeVarint(out, o, nanos);
  }
  return o;
}

// A double is written unless it is +0 (proto3's implicit presence; protobuf-es writes -0).
const present = (v: number): boolean => v !== 0 || 1 / v < 0;
const dbl = (v: number): number => (present(v) ? 9 : 0);

/** A value's encoded `Value` message length (its oneof is always written). */
function valueLength(v: MValue, textBytes: number): number {
  if (typeof v === 'number') return 9;
  if (typeof v === 'string') return 1 + varintSize(textBytes) + textBytes;
  return 2;
}

/** The API bytes of an event, as `toBinary(EventSchema, fromEvent(e))` writes them. */
export function encodeApiEvent(e: MEvent): Uint8Array {
  const t = e.timeMs;
  if (t !== undefined && !(Number.isSafeInteger(t) && t >= 0)) return toBinary(EventSchema, fromEvent(e));
  // A tenant's event: its id without "<tenant>/", its tags without the reserved one (as fromEvent).
  let tenant = '';
  let reserved = false;
  const tags = e.tags;
  if (tags !== undefined) {
    for (let i = 0; i < tags.length; i++) {
      if (!tags[i].startsWith(TENANT_TAG)) continue;
      if (!reserved) tenant = tags[i].slice(TENANT_TAG.length);
      reserved = true;
    }
  }
  const id = tenant !== '' && e.id.startsWith(`${tenant}/`) ? e.id.slice(tenant.length + 1) : e.id;
  const idBytes = utf8Length(id);
  let size = idBytes > 0 ? 1 + varintSize(idBytes) + idBytes : 0;
  const posLen = dbl(e.lat) + dbl(e.lon);
  size += 2 + posLen; // the position is always set (its length fits one byte)
  const radius = e.radiusM ?? 0;
  size += dbl(radius);
  // Attribute entries in the object's own order, as protobuf-es iterates the map it is given.
  const names = Object.keys(e.attributes);
  const lens: number[] = new Array<number>(names.length * 3);
  for (let i = 0; i < names.length; i++) {
    const v = e.attributes[names[i]];
    const kb = utf8Length(names[i]);
    const tb = typeof v === 'string' ? utf8Length(v) : 0;
    const vl = valueLength(v, tb);
    const entry = 1 + varintSize(kb) + kb + 1 + varintSize(vl) + vl;
    lens[i * 3] = kb;
    lens[i * 3 + 1] = tb;
    lens[i * 3 + 2] = entry;
    size += 1 + varintSize(entry) + entry;
  }
  let tagBytes: number[] | null = null;
  if (tags !== undefined && tags.length > 0) {
    tagBytes = new Array<number>(tags.length);
    for (let i = 0; i < tags.length; i++) {
      if (reserved && tags[i].startsWith(TENANT_TAG)) continue;
      const n = (tagBytes[i] = utf8Length(tags[i]));
      size += 1 + varintSize(n) + n;
    }
  }
  const timeLen = t === undefined ? 0 : timestampSize(t);
  if (t !== undefined) size += 1 + varintSize(timeLen) + timeLen;

  const out = Buffer.allocUnsafe(size);
  let o = 0;
  if (idBytes > 0) {
    out[o++] = T_ID;
    o = writeVarint(out, o, idBytes);
    o = writeString(out, o, id, idBytes);
  }
  out[o++] = T_POSITION;
  out[o++] = posLen;
  if (present(e.lat)) {
    out[o++] = T_LAT;
    o = out.writeDoubleLE(e.lat, o);
  }
  if (present(e.lon)) {
    out[o++] = T_LON;
    o = out.writeDoubleLE(e.lon, o);
  }
  if (present(radius)) {
    out[o++] = T_RADIUS;
    o = out.writeDoubleLE(radius, o);
  }
  for (let i = 0; i < names.length; i++) {
    const v = e.attributes[names[i]];
    const kb = lens[i * 3];
    const tb = lens[i * 3 + 1];
    out[o++] = T_ATTRIBUTE;
    o = writeVarint(out, o, lens[i * 3 + 2]);
    out[o++] = T_KEY;
    o = writeVarint(out, o, kb);
    o = writeString(out, o, names[i], kb);
    out[o++] = T_VALUE;
    o = writeVarint(out, o, valueLength(v, tb));
    if (typeof v === 'number') {
      out[o++] = T_NUMBER;
      o = out.writeDoubleLE(v, o);
    } else if (typeof v === 'string') {
      out[o++] = T_TEXT;
      o = writeVarint(out, o, tb);
      o = writeString(out, o, v, tb);
    } else {
      out[o++] = T_FLAG;
      out[o++] = v ? 1 : 0;
    }
  }
  if (tagBytes !== null) {
    for (let i = 0; i < tags!.length; i++) {
      if (reserved && tags![i].startsWith(TENANT_TAG)) continue;
      out[o++] = T_TAG;
      o = writeVarint(out, o, tagBytes[i]);
      o = writeString(out, o, tags![i], tagBytes[i]);
    }
  }
  if (t !== undefined) o = writeTimestamp(out, o, T_TIME, t, timeLen);
  if (o !== size) throw new Error(`event bytes: wrote ${o} of ${size} bytes`);
  return out;
}
