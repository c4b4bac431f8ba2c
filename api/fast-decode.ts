/**
 * The two messages a device stream carries most, decoded without the generic protobuf reader:
 * `ConnectRequest{location: LatLon}` and `ConnectRequest{ack: Ack}` in the layouts encoders write
 * (one field, a one-byte length; LatLon's doubles in any order; an ASCII delivery id). The result
 * is the object protobuf-es's `fromBinary` builds for the same bytes (a test holds the two side by
 * side over random and edge-case inputs); anything else returns null and takes the generic reader.
 */
import type { ConnectRequest } from './gen/ambit/v1/device_pb.js';

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
    const view = new DataView(b.buffer, b.byteOffset, n);
    let lat = 0;
    let lon = 0;
    let o = 2;
    while (o < n) {
      const k = b[o++];
      if (o + 8 > n) return null;
      if (k === TAG_LAT) lat = view.getFloat64(o, true);
      else if (k === TAG_LON) lon = view.getFloat64(o, true);
      else return null;
      o += 8;
    }
    return { $typeName: 'ambit.v1.ConnectRequest', message: { case: 'location', value: { $typeName: 'ambit.v1.LatLon', lat, lon } } };
  }
  if (b[0] === TAG_ACK) {
    if (n < 4 || b[2] !== TAG_DELIVERY_ID || b[3] + 4 !== n) return null;
    let id = '';
    for (let i = 4; i < n; i++) {
      const c = b[i];
      if (c >= 0x80) return null;
      id += String.fromCharCode(c);
    }
    return { $typeName: 'ambit.v1.ConnectRequest', message: { case: 'ack', value: { $typeName: 'ambit.v1.Ack', deliveryId: id } } };
  }
  return null;
}
