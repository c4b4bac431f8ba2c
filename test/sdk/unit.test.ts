/** The SDK's pure parts: wire conversion, the hand-encoded location, delivery ids, backoff. */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { create, fromBinary, toBinary } from '@bufbuild/protobuf';
import { ConnectRequestSchema } from '../../api/gen/ambit/v1/device_pb.js';
import { SubscriptionSchema } from '../../api/gen/ambit/v1/types_pb.js';
import { backoffDelay, compareDeliveryIds, encodeLocation, resolveBackoff, type Subscription } from '../../sdk/index.js';
import { fromWireSubscription, toWireEvent, toWireSubscription } from '../../sdk/types.js';

describe('sdk conversion', () => {
  test('subscriptions survive a round trip through the wire form', () => {
    const sub: Subscription = {
      id: 's1',
      filters: [
        { constraints: [{ name: 'severity', op: 'gt', value: 2 }, { name: 'road', op: 'prefix', value: 'A' }, { name: 'open', op: 'eq', value: true }, { name: 'x', op: 'exists' }], area: { radiusM: 500 } },
        { constraints: [], area: { radiusM: 10, center: { lat: 1, lon: -2 } } },
        { constraints: [{ name: 'price', op: 'lt', value: 50 }] },
      ],
    };
    const bytes = toBinary(SubscriptionSchema, create(SubscriptionSchema, toWireSubscription('subscription', sub)));
    assert.deepEqual(fromWireSubscription(fromBinary(SubscriptionSchema, bytes)), sub);
  });

  test('local checks name the field', () => {
    assert.throws(() => toWireSubscription('subscribe.subscription', { id: 'a', filters: [{ constraints: [{ name: 'n', op: 'gt', value: null as never }] }] }), /subscribe\.subscription\.filters\[0\]\.constraints\[0\]\.value: must be a number, string or boolean, got null/);
    assert.throws(() => toWireSubscription('s', { id: 'a', filters: [{ area: { radiusM: 1, center: { lat: 0, lon: 181 } } }] }), /s\.filters\[0\]\.area\.center\.lon/);
    assert.throws(() => toWireEvent('event', { lat: Number.POSITIVE_INFINITY, lon: 0 }), /event\.lat: must be a finite number/);
    assert.throws(() => toWireEvent('event', { lat: 0, lon: 0, attributes: { a: {} as never } }), /event\.attributes\["a"\]/);
  });

  test('the hand-encoded location is the ConnectRequest protobuf-es decodes', () => {
    for (const [lat, lon] of [[45.4642, 9.19], [0, 0], [-90, 180], [-0, -179.999999]]) {
      const m = fromBinary(ConnectRequestSchema, encodeLocation(lat, lon));
      assert.equal(m.message.case, 'location');
      assert.deepEqual(m.message.case === 'location' ? [m.message.value.lat, m.message.value.lon] : null, [lat, lon]);
    }
  });

  test('delivery ids order by time, then sequence; "" first', () => {
    assert.ok(compareDeliveryIds('', '1-1') < 0);
    assert.ok(compareDeliveryIds('1000-9', '1000-10') < 0);
    assert.ok(compareDeliveryIds('999-99', '1000-1') < 0);
    assert.equal(compareDeliveryIds('5-5', '5-5'), 0);
  });

  test('backoff grows exponentially to the ceiling with bounded jitter', () => {
    const o = resolveBackoff({ initialMs: 100, maxMs: 1000, multiplier: 2, jitter: 0.2 });
    assert.equal(backoffDelay(o, 0, () => 0.5), 100);
    assert.equal(backoffDelay(o, 3, () => 0.5), 800);
    assert.equal(backoffDelay(o, 10, () => 0.5), 1000);
    assert.equal(backoffDelay(o, 0, () => 0), 80);
    assert.equal(backoffDelay(o, 0, () => 0.999999), 120);
    assert.throws(() => resolveBackoff({ jitter: 2 }), /backoff\.jitter/);
    assert.throws(() => resolveBackoff({ initialMs: 10, maxMs: 5 }), /backoff\.maxMs/);
  });
});

describe('sdk: the ambit-field trailer', () => {
  test('restores the non-ASCII characters the server escapes, and leaves escaped backslashes alone', async () => {
    const { fieldFromTrailer } = await import('../../sdk/errors.js');
    const { asciiField } = await import('../../services/edge/convert.js');
    for (const f of ['event.attributes["é"]', 'events[3].attributes["😀x"]', 'event.attributes["a\\\\u0041"]', 'subscribe.subscription.filters[0].area.radius_m']) {
      assert.equal(fieldFromTrailer(asciiField(f)), f);
    }
  });
});

describe('sdk: the ambit-publish trailer', () => {
  test('a failed publish carries its outcome from the server to the SDK error; without one it is unknown or refused', async () => {
    const { AmbitError, withPublishOutcome } = await import('../../sdk/errors.js');
    const { statusOf, toServiceError } = await import('../../services/edge/convert.js');
    const { PublishError, AmbitError: ModelError } = await import('../../src/model/errors.js');
    const sent = (err: unknown) => withPublishOutcome(AmbitError.from(toServiceError(statusOf(err))));
    const queued = sent(new PublishError('queued', 'stored, not matched in time'));
    assert.equal(queued.codeName, 'DEADLINE_EXCEEDED');
    assert.equal(queued.publishOutcome, 'queued');
    const notStored = sent(new PublishError('not-stored', 'Redis is not reachable'));
    assert.equal(notStored.codeName, 'UNAVAILABLE');
    assert.equal(notStored.publishOutcome, 'not-stored');
    // The server did not say: a transport-like code is unknown, a refusal is not stored.
    assert.equal(sent(new ModelError('UNAVAILABLE', 'link lost')).publishOutcome, 'unknown');
    assert.equal(sent(new ModelError('INVALID_ARGUMENT', 'bad', 'event.lat')).publishOutcome, 'not-stored');
    assert.equal(AmbitError.from(toServiceError(statusOf(new ModelError('NOT_FOUND', 'x')))).publishOutcome, '', 'no outcome on other calls');
  });
});
