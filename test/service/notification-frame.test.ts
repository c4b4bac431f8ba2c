/**
 * The hand-built notification frame (services/edge/notification-frame.ts) against protobuf-es:
 * byte for byte the same ConnectResponse for edge cases and a seeded sweep, and it decodes to the
 * delivery it was built from.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { create, fromBinary, toBinary } from '@bufbuild/protobuf';
import { ConnectResponseSchema } from '../../api/gen/ambit/v1/device_pb.js';
import { fromDelivery } from '../../services/edge/convert.js';
import { grpcNotifications, notificationFrame } from '../../services/edge/notification-frame.js';
import { grpcMessages } from '../../services/edge/raw-stream.js';
import type { Delivery } from '../../services/hub/port.js';
import type { Event, Value } from '../../src/model/types.js';
import { Prng } from '../../src/workload/prng.js';

const reference = (d: Delivery): Uint8Array => toBinary(ConnectResponseSchema, create(ConnectResponseSchema, { message: { case: 'notification', value: fromDelivery(d) } }));

const event = (attributes: Record<string, Value>, more: Partial<Event> = {}): Event => ({ id: 'e1', lat: 45.46, lon: 9.19, attributes, ...more });

function same(d: Delivery, what: string): void {
  assert.deepEqual(Buffer.from(notificationFrame(d)), Buffer.from(reference(d)), what);
}

describe('notification frame', () => {
  it('is byte for byte what protobuf-es writes, at the edges', () => {
    const long = 'x'.repeat(300); // a two-byte length
    const cases: [string, Delivery][] = [
      ['plain', { deliveryId: '1700000000123-1', event: event({ kind: 'food', price: 5, open: true }), subscriptionIds: ['near'], publishedAtMs: 1_700_000_000_123 }],
      ['no subscription ids, time zero', { deliveryId: '0-1', event: event({}), subscriptionIds: [], publishedAtMs: 0 }],
      ['whole seconds (no nanos)', { deliveryId: '5000-9', event: event({ a: 1 }), subscriptionIds: ['a', 'b'], publishedAtMs: 5000 }],
      ['under a second (no seconds)', { deliveryId: '999-2', event: event({ a: -1.5 }), subscriptionIds: ['s'], publishedAtMs: 999 }],
      ['non-ASCII ids and values', { deliveryId: '1-1', event: event({ città: 'Milano ☕', emoji: '🚗' }, { id: 'évènement' }), subscriptionIds: ['über', '日本', '🚲'], publishedAtMs: 1 }],
      ['long ids and many of them', { deliveryId: '9007199254740-99999', event: event({ [long]: long }, { id: long, radiusM: 250 }), subscriptionIds: Array.from({ length: 200 }, (_, i) => `${long}${i}`), publishedAtMs: 9_007_199_254_740 }],
      ['an attribute named __proto__', { deliveryId: '2-3', event: event(JSON.parse('{"__proto__": "p", "b": false}') as Record<string, Value>), subscriptionIds: ['x'], publishedAtMs: 2 }],
      ['a fractional time takes the general encoder', { deliveryId: '2-4', event: event({ a: 1 }), subscriptionIds: ['x'], publishedAtMs: 1234.5 }],
    ];
    for (const [what, d] of cases) same(d, what);
  });

  it('decodes to the delivery it was built from', () => {
    const d: Delivery = { deliveryId: '1700000000123-7', event: event({ kind: 'fuel', price: 7 }), subscriptionIds: ['cheap', 'near'], publishedAtMs: 1_700_000_000_123 };
    const m = fromBinary(ConnectResponseSchema, notificationFrame(d));
    assert.equal(m.message.case, 'notification');
    const n = m.message.value as { deliveryId: string; subscriptionIds: string[]; event?: { id: string }; publishedAt?: { seconds: bigint; nanos: number } };
    assert.equal(n.deliveryId, d.deliveryId);
    assert.deepEqual(n.subscriptionIds, d.subscriptionIds);
    assert.equal(n.event?.id, 'e1');
    assert.equal(n.publishedAt?.seconds, 1_700_000_000n);
    assert.equal(n.publishedAt?.nanos, 123_000_000);
  });

  it('matches protobuf-es over a seeded sweep of deliveries', () => {
    const rng = new Prng(20261124);
    const word = () => {
      const alphabet = ['a', 'Z', '0', '-', 'é', '中', '🙂', ' '];
      let s = '';
      for (let i = rng.int(0, 40); i > 0; i--) s += alphabet[rng.int(0, alphabet.length - 1)];
      return s;
    };
    for (let k = 0; k < 500; k++) {
      const attributes: Record<string, Value> = {};
      for (let i = rng.int(0, 6); i > 0; i--) {
        const t = rng.int(0, 2);
        attributes[word() || 'k'] = t === 0 ? (rng.float() - 0.5) * 10 ** rng.int(0, 12) : t === 1 ? word() : rng.chance(0.5);
      }
      const ms = rng.chance(0.1) ? rng.int(0, 999) : rng.int(0, 2 ** 31) * 1000 + rng.int(0, 999);
      const d: Delivery = {
        deliveryId: `${ms}-${rng.int(1, 2 ** 40)}`,
        event: event(attributes, { id: word() || 'id', lat: (rng.float() - 0.5) * 180, lon: (rng.float() - 0.5) * 360, radiusM: rng.chance(0.5) ? 0 : rng.int(1, 100_000) }),
        subscriptionIds: Array.from({ length: rng.int(0, 5) }, () => word() || 's'),
        publishedAtMs: ms,
      };
      same(d, `case ${k}`);
    }
  });
  it('a batch as gRPC messages in one buffer is the messages of each delivery, framed one after another', () => {
    const rng = new Prng(20261128);
    const one = (k: number): Delivery => {
      const ms = k % 17 === 3 ? 1234.5 : rng.int(0, 2 ** 31) * 1000 + rng.int(0, 999);
      const d: Delivery = {
        deliveryId: `${Math.floor(ms)}-${k}`,
        event: event({ kind: `k${rng.int(0, 80)}`, level: rng.int(1, 5), note: 'ü'.repeat(rng.int(0, 3)) }, { id: `e${k}` }),
        subscriptionIds: Array.from({ length: rng.int(0, 4) }, (_, j) => (j === 2 ? 'x'.repeat(200) : `s${j}-${k}`)),
        publishedAtMs: ms,
      };
      // A pattern's match takes the general encoder, framed among the others.
      if (k % 23 === 5) d.match = { steps: [{ step: 'first', event: event({ a: 1 }, { id: `f${k}` }), timeMs: 1 }], aggregates: { n: 2 } };
      return d;
    };
    for (const n of [0, 1, 2, 7, 100, 3000]) {
      const batch = Array.from({ length: n }, (_, k) => one(k));
      assert.deepEqual(grpcNotifications(batch), grpcMessages(batch.map((d) => reference(d))), `a batch of ${n}`);
    }
  });
});
