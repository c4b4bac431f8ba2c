/**
 * The fast decoder of device-stream requests (api/fast-decode.ts) against protobuf-es: for every
 * input it accepts, the same object `fromBinary` builds; inputs outside its layouts (other
 * messages, unknown fields, long or non-ASCII ids, truncated bytes) go to the generic reader.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { type DescMessage, create, fromBinary, toBinary } from '@bufbuild/protobuf';
import { ConnectRequestSchema, UpdateLocationsRequestSchema } from '../../api/gen/ambit/v1/device_pb.js';
import { fastConnectRequest, fastUpdateLocationsRequest } from '../../api/fast-decode.js';
import { encodeLocation as encodeLocationBytes } from '../../sdk/device.js';

const encodeLocation = (lat: number, lon: number): Buffer => Buffer.from(encodeLocationBytes(lat, lon));
import { Prng } from '../../src/workload/prng.js';

const encode = (m: unknown): Buffer => Buffer.from(toBinary(ConnectRequestSchema, create(ConnectRequestSchema, m as never)));

/** Decodes fast: the same as protobuf-es when it accepts, and says whether it did. */
function check(b: Buffer, what: string): boolean {
  const fast = fastConnectRequest(b);
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
    for (const [what, b] of generic) assert.equal(fastConnectRequest(b), null, what);
  });

  it('agrees with protobuf-es on a seeded sweep of random bytes around the two layouts', () => {
    const accepted = sweep(new Prng(7, 1), 20_000, ConnectRequestSchema, fastConnectRequest, (rng) =>
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
