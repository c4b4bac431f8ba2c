/**
 * A notification as the bytes of one `ConnectResponse` on the wire, built without a message
 * object per recipient: the event is encoded once (its bytes are shared by every device it
 * reaches) and each recipient's frame splices its own delivery id, subscription ids and time
 * around them. The bytes are exactly what protobuf-es writes for the same message (a test holds
 * the two side by side); the gRPC bridge (api/rpc.ts) passes bytes through unencoded.
 *
 *   ConnectResponse { 3: Notification { 1: delivery_id, 2: Event, 3: repeated subscription_ids,
 *                                        4: Timestamp { 1: seconds, 2: nanos } } }
 */
import { create, toBinary } from '@bufbuild/protobuf';
import type { Event as MEvent } from '../../src/model/types.js';
import { ConnectResponseSchema } from '../../api/gen/ambit/v1/device_pb.js';
import type { Event as ApiEvent } from '../../api/gen/ambit/v1/types_pb.js';
import type { PublishedEvents } from '../../api/fast-decode.js';
import { type Delivery, apiEventBytes } from '../hub/port.js';
import { fromDelivery } from './convert.js';
import { encodeApiEvent, timestampSize, utf8Length, varintSize, writeString, writeTimestamp, writeVarint } from './event-bytes.js';

/**
 * The event's API bytes: encoded once per event while it is alive (a device's log or a batch in
 * flight), by the first notification of it here, or by the gateway that accepted its publish on
 * another process of the node (carried over the node's links with the event).
 */
export function encodedEvent(e: MEvent): Uint8Array {
  let b = apiEventBytes.get(e);
  if (b === undefined) {
    b = encodeApiEvent(e);
    apiEventBytes.set(e, b);
  }
  return b;
}

/**
 * Takes an event's bytes as they came in its publish (`publishedEvents`, api/fast-decode.ts) for
 * its API bytes, so the node does not encode it again: the decoder vouched that they are the
 * encoder's own layout for what they decode to, and here the event must still be what they
 * decode to (its id and tags as sent: no id chosen by the gateway, no tenant's tag or prefix,
 * tags already in their normal form). Returns the event.
 */
export function keepPublishedBytes(e: MEvent, sent: ApiEvent, from: PublishedEvents | undefined, i: number): MEvent {
  if (from === undefined || e.id !== sent.id) return e;
  const tags = e.tags;
  if (tags === undefined ? sent.tags.length !== 0 : tags.length !== sent.tags.length) return e;
  if (tags !== undefined) for (let k = 0; k < tags.length; k++) if (tags[k] !== sent.tags[k]) return e;
  const bytes = from.bytes(i);
  if (bytes !== null) apiEventBytes.set(e, bytes);
  return e;
}

// Field tags: (field number << 3) | wire type 2 (length-delimited) or 0 (varint).
const TAG_NOTIFICATION = (3 << 3) | 2;
const TAG_DELIVERY_ID = (1 << 3) | 2;
const TAG_EVENT = (2 << 3) | 2;
const TAG_SUBSCRIPTION_ID = (3 << 3) | 2;
const TAG_PUBLISHED_AT = (4 << 3) | 2;

/** A delivery the direct writer does not cover (a time not of whole milliseconds since the epoch, a pattern's match: rare, one recipient each): the general encoder writes it. */
function general(d: Delivery): Uint8Array | null {
  if (Number.isSafeInteger(d.publishedAtMs) && d.publishedAtMs >= 0 && d.match === undefined) return null;
  return toBinary(ConnectResponseSchema, create(ConnectResponseSchema, { message: { case: 'notification', value: fromDelivery(d) } }));
}

/**
 * Lengths measured by `frameSize` for the `writeFrame` that follows it, per delivery in order:
 * the body's, the delivery id's, then each subscription id's (reused; a huge batch's let go).
 */
let lens: number[] = [];
let nLens = 0;

/** The bytes delivery `d`'s `ConnectResponse` (not `general`) will take; its lengths are pushed to `lens`. */
function frameSize(d: Delivery): number {
  const event = encodedEvent(d.event);
  const tsLen = timestampSize(d.publishedAtMs);
  const idLen = utf8Length(d.deliveryId);
  const at = nLens;
  lens[nLens++] = 0; // the body's, below
  lens[nLens++] = idLen;
  let body = (idLen > 0 ? 1 + varintSize(idLen) + idLen : 0) + 1 + varintSize(event.length) + event.length + 1 + varintSize(tsLen) + tsLen;
  const ids = d.subscriptionIds;
  for (let i = 0; i < ids.length; i++) {
    const n = utf8Length(ids[i]);
    lens[nLens++] = n;
    body += 1 + varintSize(n) + n;
  }
  lens[at] = body;
  return 1 + varintSize(body) + body;
}

/** Writes delivery `d`'s `ConnectResponse` of `size` bytes (frameSize) at `o`, its lengths from `lens` at `k`; returns the next index into `lens`. */
function writeFrame(out: Buffer, o: number, d: Delivery, size: number, k: number): number {
  const end = o + size;
  const event = encodedEvent(d.event);
  const tsLen = timestampSize(d.publishedAtMs);
  out[o++] = TAG_NOTIFICATION;
  o = writeVarint(out, o, lens[k++]);
  const idLen = lens[k++];
  if (idLen > 0) {
    out[o++] = TAG_DELIVERY_ID;
    o = writeVarint(out, o, idLen);
    o = writeString(out, o, d.deliveryId, idLen);
  }
  out[o++] = TAG_EVENT;
  o = writeVarint(out, o, event.length);
  out.set(event, o);
  o += event.length;
  const ids = d.subscriptionIds;
  for (let i = 0; i < ids.length; i++) {
    const n = lens[k++];
    out[o++] = TAG_SUBSCRIPTION_ID;
    o = writeVarint(out, o, n);
    o = writeString(out, o, ids[i], n);
  }
  o = writeTimestamp(out, o, TAG_PUBLISHED_AT, d.publishedAtMs, tsLen);
  if (o !== end) throw new Error(`notification frame: wrote ${o - end + size} of ${size} bytes`);
  return k;
}

/** The `ConnectResponse` bytes of one delivery. */
export function notificationFrame(d: Delivery): Uint8Array {
  const g = general(d);
  if (g !== null) return g;
  nLens = 0;
  const size = frameSize(d);
  const out = Buffer.allocUnsafe(size);
  writeFrame(out, 0, d, size, 0);
  return out;
}

/**
 * A batch of deliveries as gRPC messages (a flag byte, a 4-byte length, the `ConnectResponse`,
 * each), written into one buffer: no buffer per notification, no copy of each into the batch.
 */
export function grpcNotifications(batch: readonly Delivery[]): Buffer {
  const n = batch.length;
  const sizes = new Array<number>(n);
  // The general encoder's bytes, for the rare deliveries that take it (null while none has).
  let generals: (Uint8Array | undefined)[] | null = null;
  nLens = 0;
  let total = 0;
  for (let i = 0; i < n; i++) {
    const g = general(batch[i]);
    if (g !== null) (generals ??= new Array<Uint8Array | undefined>(n))[i] = g;
    sizes[i] = g !== null ? g.length : frameSize(batch[i]);
    total += 5 + sizes[i];
  }
  const out = Buffer.allocUnsafe(total);
  let o = 0;
  let k = 0;
  for (let i = 0; i < n; i++) {
    out[o] = 0; // not compressed
    out.writeUInt32BE(sizes[i], o + 1);
    o += 5;
    const g = generals?.[i];
    if (g !== undefined) out.set(g, o);
    else k = writeFrame(out, o, batch[i], sizes[i], k);
    o += sizes[i];
  }
  if (lens.length > 1 << 16) lens = [];
  return out;
}
