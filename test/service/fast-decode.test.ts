/**
 * The fast decoder of device-stream requests (api/fast-decode.ts) against protobuf-es: for every
 * input it accepts, the same object `fromBinary` builds; inputs outside its layouts (other
 * messages, unknown fields, long or non-ASCII ids, truncated bytes) go to the generic reader.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { type DescMessage, create, fromBinary, toBinary } from '@bufbuild/protobuf';
import { ConnectRequestSchema, UpdateLocationsRequestSchema } from '../../api/gen/ambit/v1/device_pb.js';
import { BulkPublishRequestSchema, PublishRequestSchema } from '../../api/gen/ambit/v1/publisher_pb.js';
import type { Event as ApiEvent } from '../../api/gen/ambit/v1/types_pb.js';
import { LOCATION, type PublishedEvents, fastBulkPublishRequest, fastConnectRequest, fastLocation, fastPublishRequest, fastUpdateLocationsRequest, publishedEvents } from '../../api/fast-decode.js';
import { toEvent } from '../../services/edge/convert.js';
import { encodeApiEvent } from '../../services/edge/event-bytes.js';
import { keepPublishedBytes } from '../../services/edge/notification-frame.js';
import { apiEventBytes } from '../../services/hub/port.js';
import { DEFAULT_LIMITS } from '../../src/model/limits.js';
import { encodeLocation as encodeLocationBytes } from '../../sdk/device.js';

const encodeLocation = (lat: number, lon: number): Buffer => Buffer.from(encodeLocationBytes(lat, lon));
import { Prng } from '../../src/workload/prng.js';

const encode = (m: unknown): Buffer => Buffer.from(toBinary(ConnectRequestSchema, create(ConnectRequestSchema, m as never)));

/**
 * fastConnectRequest, and beside it the stream's location reader (fastLocation) on the same bytes,
 * alone and amid other bytes: it reads exactly the locations the decoder reads, the same doubles
 * bit for bit, and nothing else.
 */
function fastBoth(b: Buffer): ReturnType<typeof fastConnectRequest> {
  const fast = fastConnectRequest(b);
  const loc = fast?.message.case === 'location' ? fast.message.value : null;
  const framed = Buffer.concat([Buffer.from([0x12, 0x7f, 0]), b, Buffer.from([0x09, 1])]);
  for (const [buf, from] of [[b, 0], [framed, 3]] as const) {
    const read = fastLocation(buf, from, from + b.length);
    assert.equal(read, loc !== null, `fastLocation reads ${b.toString('hex')} as a location exactly when the decoder does`);
    if (loc !== null) {
      assert.ok(Object.is(LOCATION[0], loc.lat) && Object.is(LOCATION[1], loc.lon), `the same doubles: ${LOCATION[0]}, ${LOCATION[1]} vs ${loc.lat}, ${loc.lon}`);
    }
  }
  return fast;
}

/** Decodes fast: the same as protobuf-es when it accepts, and says whether it did. */
function check(b: Buffer, what: string): boolean {
  const fast = fastBoth(b);
  if (fast === null) return false;
  assert.deepStrictEqual(fast, fromBinary(ConnectRequestSchema, b), what);
  return true;
}

describe('fast device-request decoding', () => {
  it('decodes locations and acks exactly as protobuf-es, at the edges', () => {
    const doubles = [0, -0, 1, -1, 45.4642, -180, 90, Number.MIN_VALUE, Number.MAX_VALUE, Infinity, -Infinity, NaN];
    for (const lat of doubles) for (const lon of doubles) {
      assert.ok(check(encodeLocation(lat, lon), `SDK location ${lat}, ${lon}`), `accepts the SDK's layout (${lat}, ${lon})`);
      // protobuf-es leaves zeros out: a LatLon of one field or none.
      assert.ok(check(encode({ message: { case: 'location', value: { lat, lon } } }), `protobuf-es location ${lat}, ${lon}`));
    }
    // The doubles in the other order, and a field repeated (the last one wins).
    const swapped = Buffer.concat([Buffer.from([0x12, 18, 0x11]), f64(2), Buffer.from([0x09]), f64(1)]);
    assert.ok(check(swapped, 'lon before lat'));
    const twice = Buffer.concat([Buffer.from([0x12, 27, 0x09]), f64(1), Buffer.from([0x09]), f64(3), Buffer.from([0x11]), f64(2)]);
    assert.ok(check(twice, 'lat twice'));
    for (const id of ['1-1', '1700000000000-123456', '0-0', 'x', '9'.repeat(123)]) assert.ok(check(encode({ message: { case: 'ack', value: { deliveryId: id } } }), `ack ${id}`));
  });

  it('leaves everything else to protobuf-es', () => {
    const generic: [string, Buffer][] = [
      ['empty', Buffer.alloc(0)],
      ['hello', encode({ message: { case: 'hello', value: { resumeToken: '1-1' } } })],
      ['subscribe', encode({ message: { case: 'subscribe', value: { requestId: 'r', subscription: { id: 's' } } } })],
      ['an empty ack (default id)', encode({ message: { case: 'ack', value: { deliveryId: '' } } })],
      ['a non-ASCII ack', encode({ message: { case: 'ack', value: { deliveryId: 'é-1' } } })],
      ['a long ack (two-byte length)', encode({ message: { case: 'ack', value: { deliveryId: '1'.repeat(200) } } })],
      ['a location with an unknown field', Buffer.concat([Buffer.from([0x12, 20]), encodeLocation(1, 2).subarray(2), Buffer.from([0x18, 0x01])])],
      ['a location and then an ack', Buffer.concat([encodeLocation(1, 2), encode({ message: { case: 'ack', value: { deliveryId: '1-1' } } })])],
      ['a truncated location', encodeLocation(1, 2).subarray(0, 15)],
      ['a length past the end', Buffer.from([0x12, 18, 0x09, 0, 0])],
    ];
    for (const [what, b] of generic) assert.equal(fastBoth(b), null, what);
  });

  it('agrees with protobuf-es on a seeded sweep of random bytes around the two layouts', () => {
    const accepted = sweep(new Prng(7, 1), 20_000, ConnectRequestSchema, fastBoth, (rng) =>
      rng.int(0, 1) === 0 ? encodeLocation(-90 + rng.float() * 180, -180 + rng.float() * 360) : encode({ message: { case: 'ack', value: { deliveryId: `${rng.int(0, 1e9)}-${rng.int(0, 1e6)}` } } }),
    );
    assert.ok(accepted > 10_000, `most of the sweep takes the fast path (${accepted})`);
  });
});

describe('fast UpdateLocations decoding', () => {
  const encodeBatch = (updates: unknown[]): Buffer => Buffer.from(toBinary(UpdateLocationsRequestSchema, create(UpdateLocationsRequestSchema, { updates } as never)));
  const same = (b: Buffer, what: string): boolean => {
    const fast = fastUpdateLocationsRequest(b);
    if (fast === null) return false;
    assert.deepStrictEqual(fast, fromBinary(UpdateLocationsRequestSchema, b), what);
    return true;
  };

  it('decodes batches exactly as protobuf-es, at the edges', () => {
    const cases: [string, unknown[]][] = [
      ['empty', []],
      ['one', [{ deviceId: 'dev-1', location: { lat: 45.46, lon: 9.19 } }]],
      ['no device id (the caller)', [{ location: { lat: 1, lon: 2 } }]],
      ['no location', [{ deviceId: 'x' }]],
      ['zeros and -0 left out', [{ deviceId: 'z', location: { lat: 0, lon: -0 } }]],
      ['non-finite', [{ deviceId: 'n', location: { lat: NaN, lon: Infinity } }, { deviceId: 'm', location: { lat: -Infinity, lon: 5e-324 } }]],
      ['a long id (two-byte length)', [{ deviceId: 'd'.repeat(300), location: { lat: 1, lon: 1 } }]],
      ['ten thousand', Array.from({ length: 10_000 }, (_, i) => ({ deviceId: `fleet-${i}`, location: { lat: (i % 180) - 90, lon: (i % 360) - 180 } }))],
    ];
    for (const [what, updates] of cases) assert.ok(same(encodeBatch(updates), what), `accepts: ${what}`);
  });

  it('leaves other layouts to protobuf-es', () => {
    const generic: [string, Buffer][] = [
      ['a non-ASCII id', encodeBatch([{ deviceId: 'é', location: { lat: 1, lon: 2 } }])],
      ['an unknown field in an entry', Buffer.from('0a050a01611801', 'hex')],
      ['a field of the request other than updates', Buffer.from('1200', 'hex')],
      ['an entry cut short', encodeBatch([{ deviceId: 'abc', location: { lat: 1, lon: 2 } }]).subarray(0, 10)],
      ['a device id twice in one entry', Buffer.from('0a060a01610a0162', 'hex')],
    ];
    for (const [what, b] of generic) assert.equal(fastUpdateLocationsRequest(b), null, what);
  });

  it('agrees with protobuf-es on a seeded sweep of corrupted batches', () => {
    const accepted = sweep(new Prng(11, 2), 5_000, UpdateLocationsRequestSchema, fastUpdateLocationsRequest, (rng) =>
      encodeBatch(Array.from({ length: rng.int(0, 6) }, (_, k) => ({ deviceId: rng.int(0, 5) === 0 ? '' : `d${rng.int(0, 1e6)}-${k}`, ...(rng.int(0, 6) === 0 ? {} : { location: { lat: -90 + rng.float() * 180, lon: -180 + rng.float() * 360 } }) }))),
    );
    assert.ok(accepted > 2_000, `most of the sweep takes the fast path (${accepted})`);
  });
});

describe('fast Publish and BulkPublish decoding', () => {
  const encodeBulk = (events: unknown[]): Buffer => Buffer.from(toBinary(BulkPublishRequestSchema, create(BulkPublishRequestSchema, { events } as never)));
  const encodeOne = (event: unknown): Buffer => Buffer.from(toBinary(PublishRequestSchema, create(PublishRequestSchema, { event } as never)));
  const num = (value: number) => ({ kind: { case: 'number', value } });
  const txt = (value: string) => ({ kind: { case: 'text', value } });
  const flag = (value: boolean) => ({ kind: { case: 'flag', value } });

  /**
   * Decodes fast: the same as protobuf-es when it accepts, and each event's bytes, where it
   * offers them, exactly the API encoder's bytes for the event the gateway makes of it. Returns
   * how many events' bytes were kept, or -1 where the generic reader decides.
   */
  function same(b: Buffer, what: string): number {
    const fast = fastBulkPublishRequest(b);
    if (fast === null) return -1;
    assert.deepStrictEqual(fast, fromBinary(BulkPublishRequestSchema, b), what);
    return kept(fast.events, publishedEvents(fast)!, what);
  }

  /** The bytes the gateway keeps for each event (keepPublishedBytes) are the encoder's; returns how many. */
  function kept(events: readonly ApiEvent[], sent: PublishedEvents, what: string): number {
    let n = 0;
    for (let i = 0; i < events.length; i++) {
      let e;
      try {
        e = toEvent(`events[${i}]`, events[i], DEFAULT_LIMITS, () => 'chosen-id');
      } catch {
        continue; // refused by the gateway: nothing is kept
      }
      keepPublishedBytes(e, events[i], sent, i);
      const k = apiEventBytes.get(e);
      if (k === undefined) continue;
      assert.deepStrictEqual(Buffer.from(k), Buffer.from(encodeApiEvent(e)), `${what}: event ${i}'s bytes kept as they came are the encoder's`);
      n++;
    }
    return n;
  }

  const typical = (i: number) => ({ id: `p0-${i}`, position: { lat: 45.46 + i * 1e-4, lon: 9.19 }, attributes: { kind: txt(`k${i % 80}`), level: num(1 + (i % 5)), step: num(2), t: num(1764323000123.5) } });

  it('decodes events exactly as protobuf-es and keeps the bytes of those the encoder would write the same', () => {
    const cases: [string, unknown[], number][] = [
      ['none', [], 0],
      ['the throughput benchmark\'s events', Array.from({ length: 50 }, (_, i) => typical(i)), 50],
      ['every field', [{ id: 'e1', position: { lat: -33.9, lon: 151.2 }, radiusM: 250, attributes: { type: txt('accident'), severity: num(3), open: flag(true), shut: flag(false) }, tags: ['fire', 'road'], time: { seconds: 1764323000n, nanos: 123_000_000 } }], 1],
      ['non-ASCII text and names', [{ id: 'é-1', position: { lat: 1, lon: 2 }, attributes: { 'naïve': txt('日本語 🚀'), x: txt('') } }], 1],
      ['-0 written, +0 left out', [{ id: 'z', position: { lat: -0, lon: 0 }, radiusM: -0, attributes: { n: num(-0), m: num(0) } }], 1],
      ['no id: the gateway chooses one', [{ position: { lat: 1, lon: 2 } }], 0],
      ['tags not in their normal form', [{ id: 'a', position: { lat: 1, lon: 2 }, tags: ['road', '#Fire', 'road'] }], 0],
      ['a key ordered otherwise by JavaScript', [{ id: 'a', position: { lat: 1, lon: 2 }, attributes: { b: num(1), '7': num(2) } }], 0],
      ['no position (refused by the gateway)', [{ id: 'a' }], 0],
      ['a time at the epoch', [{ id: 'a', position: { lat: 1, lon: 2 }, time: {} }], 1],
      ['a time of seconds only, and of milliseconds only', [{ id: 'a', position: { lat: 1, lon: 2 }, time: { seconds: 5n } }, { id: 'b', position: { lat: 1, lon: 2 }, time: { nanos: 7_000_000 } }], 2],
      ['a time not of whole milliseconds (refused by the gateway)', [{ id: 'a', position: { lat: 1, lon: 2 }, time: { seconds: 5n, nanos: 1 } }], 0],
      // protobuf-es reads a leading U+FEFF as text, not as a byte-order mark: so must the fast path.
      ['a leading U+FEFF in an id, a name and a text', [{ id: '\uFEFFa', position: { lat: 1, lon: 2 }, attributes: { '\uFEFFk': txt('\uFEFFx') } }], 1],
      ['long strings (lengths of two bytes)', [{ id: 'x'.repeat(128), position: { lat: 1, lon: 2 }, attributes: { s: txt('y'.repeat(1000)) } }], 1],
    ];
    for (const [what, events, keep] of cases) assert.equal(same(encodeBulk(events), what), keep, what);
    // An event changed after its decoding (a tenant's prefix on its id, its reserved tag) keeps no bytes.
    for (const change of [(e: { id: string }) => (e.id = `acme/${e.id}`), (e: { tags?: string[] }) => (e.tags = ['\u{10FFFF}tenant:acme'])]) {
      const req = fastBulkPublishRequest(encodeBulk([typical(1)]))!;
      const e = toEvent('events[0]', req.events[0], DEFAULT_LIMITS, () => 'x');
      change(e);
      keepPublishedBytes(e, req.events[0], publishedEvents(req), 0);
      assert.equal(apiEventBytes.get(e), undefined, 'bytes of an event changed since');
    }
    // A Publish carries one event the same way.
    for (const event of [typical(3), { id: '', position: { lat: 1, lon: 2 } }]) {
      const b = encodeOne(event);
      const fast = fastPublishRequest(b);
      assert.ok(fast !== null);
      assert.deepStrictEqual(fast, fromBinary(PublishRequestSchema, b));
      assert.equal(kept([fast.event!], publishedEvents(fast)!, 'publish'), event.id === '' ? 0 : 1);
    }
  });

  it('keeps no bytes for layouts the encoder does not write, and leaves the rest to protobuf-es', () => {
    // Hand-built layouts: a field is its tag byte, then its bytes (a length first for a length-delimited one).
    const len = (tag: number, ...parts: Buffer[]): Buffer => {
      const body = Buffer.concat(parts);
      return Buffer.concat([Buffer.from([tag, body.length]), body]);
    };
    const raw = (...bytes: number[]): Buffer => Buffer.from(bytes);
    const d = (tag: number, v: number): Buffer => Buffer.concat([raw(tag), f64(v)]);
    const s = (tag: number, v: string): Buffer => len(tag, Buffer.from(v));
    const id = s(0x0a, 'a');
    const pos = len(0x12, d(0x09, 2), d(0x11, 3));
    const entry = (key: string, ...value: Buffer[]): Buffer => len(0x22, s(0x0a, key), len(0x12, ...value));
    const request = (...fields: Buffer[]): Buffer => len(0x0a, ...fields);
    assert.ok(same(request(id, pos, entry('k', d(0x09, 1))), 'the encoder\'s layout') === 1, 'the baseline keeps its bytes');
    // Decoded exactly, bytes not kept: the encoder writes the same event otherwise.
    const notKept: [string, Buffer][] = [
      ['+0 radius written', request(id, pos, d(0x19, 0))],
      ['position before id', request(pos, id)],
      ['a key twice', request(id, pos, entry('k', d(0x09, 1)), entry('k', d(0x09, 2)))],
      ['a length in two bytes where one does', request(raw(0x0a, 0x81, 0x00, 0x61), pos)],
      ['an id written empty', request(raw(0x0a, 0x00), pos)],
      ['a time\'s zero written', request(id, pos, len(0x32, raw(0x08, 0x05, 0x10, 0x00)))],
      ['a time of a billion nanoseconds or more', request(id, pos, len(0x32, raw(0x10, 0x80, 0x94, 0xeb, 0xdc, 0x03)))],
    ];
    for (const [what, b] of notKept) {
      const fast = fastBulkPublishRequest(b);
      assert.ok(fast !== null, what);
      assert.deepStrictEqual(fast, fromBinary(BulkPublishRequestSchema, b), what);
      assert.equal(publishedEvents(fast)!.bytes(0), null, what);
    }
    const generic: [string, Buffer][] = [
      ['an unknown field', request(id, pos, raw(0x38, 0x01))],
      ['an id twice', request(id, s(0x0a, 'b'), pos)],
      ['lon before lat', request(id, len(0x12, d(0x11, 3), d(0x09, 2)))],
      ['a value of no kind', request(id, pos, entry('k'))],
      ['a value of two kinds', request(id, pos, entry('k', d(0x09, 1), raw(0x18, 0x01)))],
      ['a map entry without its key', request(id, pos, len(0x22, len(0x12, d(0x09, 1))))],
      ['a flag of 2', request(id, pos, entry('k', raw(0x18, 0x02)))],
      ['invalid UTF-8 in an id', request(len(0x0a, raw(0xc3, 0x28)), pos)],
      ['a time before 1970', Buffer.from(toBinary(BulkPublishRequestSchema, create(BulkPublishRequestSchema, { events: [{ id: 'a', time: { seconds: -5n } }] } as never)))],
      ['another field of the request', Buffer.from('1200', 'hex')],
      ['an event cut short', encodeBulk([typical(1)]).subarray(0, 20)],
    ];
    for (const [what, b] of generic) assert.equal(fastBulkPublishRequest(b), null, what);
  });

  it('agrees with protobuf-es, and keeps only the encoder\'s bytes, on a seeded sweep of corrupted requests', () => {
    const rng = new Prng(13, 3);
    const value = () => {
      const k = rng.int(0, 3);
      return k === 0 ? num(rng.int(0, 3) === 0 ? 0 : rng.float() * 100 - 50) : k === 1 ? txt(['', 'a', 'accident', 'é', 'x'.repeat(rng.int(0, 200))][rng.int(0, 4)]) : flag(rng.int(0, 1) === 1);
    };
    const event = () => {
      const attributes: Record<string, unknown> = {};
      for (let a = rng.int(0, 4); a > 0; a--) attributes[['kind', 'level', 'n', '__proto__', '2x', 'ü'][rng.int(0, 5)]] = value();
      const e: Record<string, unknown> = { id: rng.int(0, 5) === 0 ? '' : `id-${rng.int(0, 1e6)}`, attributes };
      if (rng.int(0, 6) !== 0) e.position = { lat: rng.int(0, 8) === 0 ? 0 : -90 + rng.float() * 180, lon: -180 + rng.float() * 360 };
      if (rng.int(0, 2) === 0) e.radiusM = rng.int(0, 1) === 0 ? 0 : rng.float() * 1000;
      if (rng.int(0, 3) === 0) e.tags = Array.from({ length: rng.int(1, 3) }, () => ['a', 'b', '#C', 'road'][rng.int(0, 3)]);
      if (rng.int(0, 3) === 0) e.time = { seconds: BigInt(rng.int(0, 2e9)), nanos: rng.int(0, 4) === 0 ? rng.int(0, 999_999_999) : rng.int(0, 999) * 1_000_000 };
      return e;
    };
    let keptBytes = 0;
    const fast = (b: Buffer) => {
      const r = fastBulkPublishRequest(b);
      if (r !== null) keptBytes += kept(r.events, publishedEvents(r)!, `input ${b.toString('hex')}`);
      return r;
    };
    const accepted = sweep(rng, 4000, BulkPublishRequestSchema, fast, () => encodeBulk(Array.from({ length: rng.int(1, 4) }, event)));
    assert.ok(accepted > 1500, `most of the sweep takes the fast path (${accepted})`);
    assert.ok(keptBytes > 1000, `and keeps many events' bytes (${keptBytes})`);
  });
});

/**
 * Encodes `rounds` seeded messages, flips up to two bytes of each (some stay valid, some stop being
 * a layout the fast decoder takes), and checks every input it accepts against protobuf-es (which
 * must then decode it to the same object). Returns how many it accepted.
 */
function sweep<D extends DescMessage>(rng: Prng, rounds: number, schema: D, fast: (b: Buffer) => unknown, make: (rng: Prng) => Buffer): number {
  let accepted = 0;
  for (let i = 0; i < rounds; i++) {
    const b = Buffer.from(make(rng));
    for (let k = rng.int(0, 2); k > 0 && b.length > 0; k--) b[rng.int(0, b.length - 1)] = rng.int(0, 255);
    const got = fast(b);
    if (got === null) continue;
    accepted++;
    let reference: unknown;
    try {
      reference = fromBinary(schema, b);
    } catch {
      reference = null;
    }
    assert.deepStrictEqual(got, reference, `input ${b.toString('hex')}`);
  }
  return accepted;
}

function f64(v: number): Buffer {
  const b = Buffer.alloc(8);
  b.writeDoubleLE(v, 0);
  return b;
}
