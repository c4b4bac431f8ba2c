/** The SDK's pure parts: wire conversion, the hand-encoded location, delivery ids, backoff; and the device over a scripted transport. */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { create, fromBinary, toBinary } from '@bufbuild/protobuf';
import { ConnectRequestSchema, ConnectResponseSchema } from '../../api/gen/ambit/v1/device_pb.js';
import { SubscriptionSchema } from '../../api/gen/ambit/v1/types_pb.js';
import { AmbitError, StatusCode, backoffDelay, compareDeliveryIds, encodeLocation, resolveBackoff, type Subscription } from '../../sdk/index.js';
import { AmbitDevice } from '../../sdk/device.js';
import type { ChannelStream, ConnectRequestInit, DeviceChannel, StreamHandlers } from '../../sdk/channel.js';
import { utf8 } from '../../sdk/websocket-channel.js';
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

/**
 * A device's transport scripted in place of a server (the one fault here that a real server can
 * only cause over a rate limit's minutes): a state loss after which some re-subscriptions are
 * refused RESOURCE_EXHAUSTED with a short wait.
 */
class ScriptedChannel implements DeviceChannel {
  readonly kind = 'scripted';
  /** Subscriptions the "server" holds. */
  held = new Set<string>();
  /** Re-subscriptions to refuse once each (RESOURCE_EXHAUSTED, retry after 20 ms). */
  refuseOnce = new Set<string>();
  streams = 0;
  private current: StreamHandlers | null = null;

  connect(_token: string, h: StreamHandlers): ChannelStream {
    this.streams++;
    this.current = h;
    const reply = (requestId: string, code: number, retryAfterMs = 0) =>
      queueMicrotask(() => h.message(create(ConnectResponseSchema, { message: { case: 'reply', value: { requestId, status: { code, message: code === 0 ? '' : 'rate limit', field: '', retryAfterMs } } } })));
    return {
      write: (m: ConnectRequestInit) => {
        const v = m.message.value as { requestId: string; subscription?: { id: string }; subscriptionId?: string };
        if (m.message.case === 'hello') {
          // The second stream's server lost the device's state.
          queueMicrotask(() => h.message(create(ConnectResponseSchema, { message: { case: 'welcome', value: { deviceId: 'd', resumeToken: '', stateLost: this.streams > 1, stateId: `s${this.streams}` } } })));
        } else if (m.message.case === 'subscribe') {
          const id = v.subscription!.id;
          if (this.refuseOnce.delete(id)) return reply(v.requestId, 8, 20);
          this.held.add(id);
          reply(v.requestId, 0);
        }
      },
      writeLocation: () => {},
      // A half-close: the "server" ends the stream.
      end: () => queueMicrotask(() => h.ended(new AmbitError(StatusCode.UNAVAILABLE, 'sdk: the server ended the stream'))),
      cancel: () => queueMicrotask(() => h.ended(new AmbitError(StatusCode.CANCELLED, 'cancelled'))),
      pause: () => {},
      resume: () => {},
    };
  }

  /** The stream breaks (the server went away). */
  drop(): void {
    this.current?.ended(new AmbitError(StatusCode.UNAVAILABLE, 'gone'));
  }

  listSubscriptions(): Promise<never> {
    return Promise.reject(new AmbitError(StatusCode.UNIMPLEMENTED, 'scripted'));
  }

  close(): void {}
}

describe('sdk device: subscriptions made again after a state loss', () => {
  test('a rate-limited re-subscription is sent again after its wait, not dropped', async () => {
    const channel = new ScriptedChannel();
    class ScriptedDevice extends AmbitDevice {
      protected override channelFor(): DeviceChannel {
        return channel;
      }
    }
    const d = await ScriptedDevice.connect('ws://scripted', 'token', { backoff: { initialMs: 1, maxMs: 5 } });
    const warnings: string[] = [];
    d.on('warning', (e) => warnings.push(e.error.message));
    for (const id of ['s1', 's2', 's3', 's4', 's5']) await d.subscribe({ id, filters: [{ constraints: [] }] });
    // The new server holds nothing and refuses two of the five at first.
    channel.held.clear();
    channel.refuseOnce = new Set(['s4', 's5']);
    const again = new Promise<void>((resolve) => d.on('connected', (e) => e.stateLost && resolve()));
    channel.drop();
    await again;
    for (let i = 0; i < 200 && channel.held.size < 5; i++) await new Promise((r) => setTimeout(r, 5));
    assert.deepEqual([...channel.held].sort(), ['s1', 's2', 's3', 's4', 's5']);
    assert.deepEqual(warnings, []);
    await d.close();
  });
});

describe('sdk websocket transport without the web platform\'s extras', () => {
  test('its own UTF-8 decoder (platforms without TextDecoder) reads what TextDecoder reads', () => {
    const saved = globalThis.TextDecoder;
    const samples = ['', 'plain', 'é 東京 🚑', '{"error":{"code":"invalid_argument","message":"subscribe.subscription.filters[0]: café 🚒"}}'];
    try {
      (globalThis as { TextDecoder?: unknown }).TextDecoder = undefined;
      for (const s of samples) assert.equal(utf8(new TextEncoder().encode(s)), s);
    } finally {
      globalThis.TextDecoder = saved;
    }
  });
});
