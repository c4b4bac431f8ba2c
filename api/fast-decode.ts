/**
 * The hottest requests, decoded without the generic protobuf reader: the two messages a device
 * stream carries most, `ConnectRequest{location: LatLon}` and `ConnectRequest{ack: Ack}`, in the
 * layouts encoders write (one field, a one-byte length; LatLon's doubles in any order; an ASCII
 * delivery id), and UpdateLocations batches. The result is the object protobuf-es's `fromBinary`
 * builds for the same bytes (a test holds the two side by side over random and edge-case inputs);
 * anything else returns null and takes the generic reader.
 */
import type { ConnectRequest, UpdateLocationsRequest } from './gen/ambit/v1/device_pb.js';

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

/** A LatLon's fields in [from, to): doubles 1 and 2, in any order, the last one winning; null for anything else. */
function latLon(b: Uint8Array, from: number, to: number): { $typeName: 'ambit.v1.LatLon'; lat: number; lon: number } | null {
  const view = new DataView(b.buffer, b.byteOffset, b.length);
  let lat = 0;
  let lon = 0;
  let o = from;
  while (o < to) {
    const k = b[o++];
    if (o + 8 > to) return null;
    if (k === TAG_LAT) lat = view.getFloat64(o, true);
    else if (k === TAG_LON) lon = view.getFloat64(o, true);
    else return null;
    o += 8;
  }
  return { $typeName: 'ambit.v1.LatLon', lat, lon };
}

/** The bytes [from, to) as one flat string when all are ASCII, else null. */
function ascii(b: Uint8Array, from: number, to: number): string | null {
  for (let i = from; i < to; i++) if (b[i] >= 0x80) return null;
  return Buffer.isBuffer(b) ? b.toString('latin1', from, to) : String.fromCharCode(...b.subarray(from, to));
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
