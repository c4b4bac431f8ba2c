/**
 * The SDK's pattern subscriptions on the wire: a pattern with every part survives the round trip
 * and reads as the server reads it, bad input is refused naming the field as the caller wrote it,
 * an event's time travels as a Timestamp, and a match comes back with its steps and aggregates.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { create, fromBinary, toBinary } from '@bufbuild/protobuf';
import { timestampFromMs, timestampMs } from '@bufbuild/protobuf/wkt';
import { AggregateFn, EventSchema, NotificationSchema, Op, Selection, SubscriptionSchema } from '../../api/gen/ambit/v1/types_pb.js';
import { AmbitError, StatusCode, type EventInput, type EventPattern, type Notification, type Subscription } from '../../sdk/index.js';
import { fromWireNotification, fromWireSubscription, toWireEvent, toWireSubscription } from '../../sdk/types.js';
import { fromDelivery, fromSubscription, toSubscription } from '../../services/edge/convert.js';
import { DEFAULT_LIMITS } from '../../src/model/limits.js';

/** Smoke after a temperature over 45 within 5 minutes, same zone, with every other part a pattern has. */
const FULL: EventPattern = {
  steps: [
    { name: 'smoke', filter: { constraints: [{ name: 'type', op: 'eq', value: 'smoke' }], area: { radiusM: 1000 } } },
    { name: 'temp', filter: { constraints: [{ name: 'celsius', op: 'gt', value: 45 }], tags: ['sensor'] }, selection: 'each', withinMs: 300_000 },
    { name: 'alarm', filter: { constraints: [{ name: 'armed', op: 'eq', value: true }], area: { radiusM: 50, center: { lat: 45.46, lon: 9.19 } } }, selection: 'first', withinMs: 60_000 },
    { name: 'door', filter: { constraints: [{ name: 'door', op: 'exists' }] }, selection: 'last', withinMs: 1 },
  ],
  parameters: [
    { left: { step: 'smoke', attribute: 'zone' }, op: 'eq', right: { step: 'temp', attribute: 'zone' } },
    { left: { step: 'temp', attribute: 'floor' }, op: 'ne', right: { step: 'alarm', attribute: 'floor' } },
    { left: { step: 'door', attribute: 'opened' }, op: 'lt', right: { step: 'alarm', attribute: 'armedAt' } },
  ],
  negations: [
    { filter: { constraints: [{ name: 'type', op: 'eq', value: 'all-clear' }] }, between: ['smoke', 'temp'], parameters: [{ attribute: 'zone', op: 'eq', step: 'smoke', stepAttribute: 'zone' }] },
    { filter: { constraints: [{ name: 'type', op: 'eq', value: 'drill' }] }, before: 'smoke', withinMs: 600_000 },
  ],
  aggregates: [
    { name: 'readings', fn: 'count', filter: { constraints: [{ name: 'type', op: 'eq', value: 'temperature' }] }, before: 'temp', withinMs: 600_000 },
    {
      name: 'peak',
      fn: 'max',
      attribute: 'celsius',
      filter: { constraints: [{ name: 'type', op: 'eq', value: 'temperature' }] },
      before: 'smoke',
      withinMs: 900_000,
      parameters: [{ attribute: 'zone', op: 'eq', step: 'smoke', stepAttribute: 'zone' }, { attribute: 'floor', op: 'ge', step: 'temp', stepAttribute: 'floor' }],
      where: { op: 'gt', value: 50.5 },
    },
    { name: 'total', fn: 'sum', attribute: 'celsius', filter: { constraints: [] }, before: 'temp', withinMs: 1000 },
    { name: 'low', fn: 'min', attribute: 'celsius', filter: { constraints: [] }, before: 'temp', withinMs: 1000, where: { op: 'le', value: -3 } },
  ],
  consuming: ['temp', 'smoke'],
};
const SUB: Subscription = { id: 'fire', filters: [], pattern: FULL };

const viaBytes = (s: Subscription): Subscription => fromWireSubscription(fromBinary(SubscriptionSchema, toBinary(SubscriptionSchema, create(SubscriptionSchema, toWireSubscription('subscription', s)))));

/** Throws an INVALID_ARGUMENT AmbitError naming exactly `field`. */
function refuses(f: () => unknown, field: string): void {
  assert.throws(f, (err: unknown) => {
    assert.ok(err instanceof AmbitError, `not an AmbitError: ${String(err)}`);
    assert.equal(err.code, StatusCode.INVALID_ARGUMENT);
    assert.equal(err.field, field);
    return true;
  });
}

const withStep = (i: number, change: object): Subscription => ({ ...SUB, pattern: { ...FULL, steps: FULL.steps.map((s, j) => (j === i ? { ...s, ...change } : s)) } });

describe('sdk: pattern subscriptions', () => {
  test('a pattern with every part survives the round trip through the wire bytes', () => {
    assert.deepEqual(viaBytes(SUB), SUB);
  });

  test('a plain subscription still round-trips unchanged, with no pattern on the wire or back', () => {
    const plain: Subscription = { id: 'a', filters: [{ constraints: [{ name: 'severity', op: 'gt', value: 2 }], area: { radiusM: 500 }, tags: ['road'] }] };
    const wire = toWireSubscription('subscription', plain);
    assert.ok(!('pattern' in wire));
    const back = viaBytes(plain);
    assert.deepEqual(back, plain);
    assert.ok(!('pattern' in back));
  });

  test('the wire form carries the enums, and absent fields as the proto says (empty, 0, unset)', () => {
    const w = create(SubscriptionSchema, toWireSubscription('subscription', SUB)).pattern!;
    assert.deepEqual(w.steps.map((s) => [s.selection, s.withinMs]), [[Selection.UNSPECIFIED, 0], [Selection.EACH, 300_000], [Selection.FIRST, 60_000], [Selection.LAST, 1]]);
    assert.deepEqual(w.parameters.map((p) => p.op), [Op.EQ, Op.NE, Op.LT]);
    assert.deepEqual(w.negations.map((n) => [[...n.between], n.before, n.withinMs]), [[['smoke', 'temp'], '', 0], [[], 'smoke', 600_000]]);
    assert.deepEqual(w.negations[1].parameters, []);
    assert.deepEqual(w.aggregates.map((a) => [a.fn, a.attribute, a.where?.op, a.where?.value]), [
      [AggregateFn.COUNT, '', undefined, undefined],
      [AggregateFn.MAX, 'celsius', Op.GT, 50.5],
      [AggregateFn.SUM, 'celsius', undefined, undefined],
      [AggregateFn.MIN, 'celsius', Op.LE, -3],
    ]);
    assert.deepEqual(w.aggregates[1].parameters.map((p) => [p.op, p.stepAttribute]), [[Op.EQ, 'zone'], [Op.GE, 'floor']]);
    assert.deepEqual(w.consuming, ['temp', 'smoke']);
  });

  test('the server reads the SDK wire form as the pattern sent, and its listing reads back the same', () => {
    const wire = create(SubscriptionSchema, toWireSubscription('subscription', SUB));
    const model = toSubscription('subscription', 'dev-1', wire, DEFAULT_LIMITS);
    assert.deepEqual(model.pattern, FULL);
    const listed = fromBinary(SubscriptionSchema, toBinary(SubscriptionSchema, fromSubscription(model)));
    assert.deepEqual(fromWireSubscription(listed), SUB);
  });

  test('the windows of the wire (uint32) pass whole, from 0 to 2^32 − 1', () => {
    for (const withinMs of [0, 4_294_967_295]) {
      const w = create(SubscriptionSchema, toWireSubscription('subscription', withStep(1, { withinMs })));
      assert.equal(w.pattern!.steps[1].withinMs, withinMs);
    }
  });

  test('what the wire cannot carry is refused naming the field as the caller wrote it', () => {
    const p = (change: Partial<EventPattern>): Subscription => ({ ...SUB, pattern: { ...FULL, ...change } });
    const [, peak] = FULL.aggregates!;
    refuses(() => toWireSubscription('subscription', p({ parameters: [{ ...FULL.parameters![0], op: 'prefix' as never }] })), 'subscription.pattern.parameters[0].op');
    refuses(() => toWireSubscription('subscribe.subscription', p({ negations: [FULL.negations![0], { ...FULL.negations![1], parameters: [{ attribute: 'a', op: 'exists' as never, step: 'smoke', stepAttribute: 'b' }] }] })), 'subscribe.subscription.pattern.negations[1].parameters[0].op');
    refuses(() => toWireSubscription('subscription', p({ aggregates: [{ ...peak, parameters: [{ attribute: 'a', op: 'regex' as never, step: 'smoke', stepAttribute: 'b' }] }] })), 'subscription.pattern.aggregates[0].parameters[0].op');
    refuses(() => toWireSubscription('subscription', p({ aggregates: [{ ...peak, where: { op: 'contains' as never, value: 1 } }] })), 'subscription.pattern.aggregates[0].where.op');
    refuses(() => toWireSubscription('subscription', p({ aggregates: [{ ...peak, where: { op: 'gt', value: '50' as never } }] })), 'subscription.pattern.aggregates[0].where.value');
    refuses(() => toWireSubscription('subscription', p({ aggregates: [{ ...peak, fn: 'median' as never }] })), 'subscription.pattern.aggregates[0].fn');
    refuses(() => toWireSubscription('subscription', withStep(1, { selection: 'latest' })), 'subscription.pattern.steps[1].selection');
    refuses(() => toWireSubscription('subscription', withStep(2, { selection: 'toString' })), 'subscription.pattern.steps[2].selection');
    for (const withinMs of [1.5, -1, 2 ** 32, Number.NaN, '5']) refuses(() => toWireSubscription('subscription', withStep(1, { withinMs })), 'subscription.pattern.steps[1].withinMs');
    refuses(() => toWireSubscription('subscription', p({ negations: [{ ...FULL.negations![1], withinMs: 0.5 }] })), 'subscription.pattern.negations[0].withinMs');
    refuses(() => toWireSubscription('subscription', p({ aggregates: [{ ...peak, withinMs: -1 }] })), 'subscription.pattern.aggregates[0].withinMs');
    refuses(() => toWireSubscription('subscription', p({ negations: [{ ...FULL.negations![0], between: 'smoke' as never }] })), 'subscription.pattern.negations[0].between');
    refuses(() => toWireSubscription('subscription', p({ consuming: ['temp', 7 as never] })), 'subscription.pattern.consuming[1]');
    refuses(() => toWireSubscription('subscription', p({ steps: [FULL.steps[0], { ...FULL.steps[1], filter: { constraints: [{ name: 'x', op: 'gt', value: null as never }] } }] })), 'subscription.pattern.steps[1].filter.constraints[0].value');
    refuses(() => toWireSubscription('subscription', p({ steps: undefined as never })), 'subscription.pattern.steps');
  });

  test("an event's time travels as a Timestamp of the same ms; absent, none is sent", () => {
    const e: EventInput = { lat: 45.46, lon: 9.19, attributes: { type: 'smoke' } };
    for (const timeMs of [0, 1_767_225_600_123, Number.MAX_SAFE_INTEGER]) {
      const w = fromBinary(EventSchema, toBinary(EventSchema, create(EventSchema, toWireEvent('event', { ...e, timeMs }))));
      assert.equal(timestampMs(w.time!), timeMs);
    }
    assert.ok(!('time' in toWireEvent('event', e)));
    assert.equal(create(EventSchema, toWireEvent('event', e)).time, undefined);
  });

  test('an event time that is not a non-negative safe integer is refused', () => {
    for (const timeMs of [-1, 1.5, Number.NaN, Number.POSITIVE_INFINITY, 2 ** 53, '5', null]) {
      refuses(() => toWireEvent('events[2]', { lat: 0, lon: 0, timeMs: timeMs as never }), 'events[2].timeMs');
    }
  });

  test('a notification with a match has its steps with their times and its aggregates', () => {
    const event = (id: string, type: string, timeMs: number) => ({ id, position: { lat: 45.46, lon: 9.19 }, radiusM: 0, attributes: { type: { kind: { case: 'text' as const, value: type } } }, tags: [], time: timestampFromMs(timeMs) });
    const wire = create(NotificationSchema, {
      deliveryId: '1767225600200-0',
      event: event('e3', 'smoke', 1_767_225_600_123),
      subscriptionIds: ['fire'],
      publishedAt: timestampFromMs(1_767_225_600_200),
      match: {
        steps: [
          { step: 'smoke', event: event('e3', 'smoke', 1_767_225_600_123), time: timestampFromMs(1_767_225_600_123) },
          { step: 'temp', event: event('e1', 'temperature', 1_767_225_400_000), time: timestampFromMs(1_767_225_400_000) },
        ],
        aggregates: { peak: 51.5, readings: 3 },
      },
    });
    const n = fromWireNotification(fromBinary(NotificationSchema, toBinary(NotificationSchema, wire)));
    // The events carry their own times too (the publisher's), as AmbitEvent.timeMs.
    const ev = (id: string, type: string, timeMs: number) => ({ id, lat: 45.46, lon: 9.19, radiusM: 0, attributes: { type }, tags: [], timeMs });
    const expected: Notification = {
      deliveryId: '1767225600200-0',
      event: ev('e3', 'smoke', 1_767_225_600_123),
      subscriptionIds: ['fire'],
      publishedAtMs: 1_767_225_600_200,
      match: {
        steps: [
          { step: 'smoke', event: ev('e3', 'smoke', 1_767_225_600_123), timeMs: 1_767_225_600_123 },
          { step: 'temp', event: ev('e1', 'temperature', 1_767_225_400_000), timeMs: 1_767_225_400_000 },
        ],
        aggregates: { peak: 51.5, readings: 3 },
      },
    };
    assert.deepEqual(n, expected);
    const none = fromWireNotification(fromBinary(NotificationSchema, toBinary(NotificationSchema, create(NotificationSchema, { ...wire, match: undefined }))));
    assert.ok(!('match' in none), 'a notification without a match has no match key');
    const { match: _, ...plain } = expected;
    assert.deepEqual(none, plain);
  });

  test("the server's delivery of a match reads as the match; one without a match has no match key", () => {
    const terminator = { id: 'e3', lat: 1, lon: 2, attributes: { zone: 'b' } };
    const temp = { id: 'e1', lat: 1, lon: 2, attributes: { zone: 'b', celsius: 47 } };
    const delivered = (match?: Parameters<typeof fromDelivery>[0]['match']) =>
      fromWireNotification(fromBinary(NotificationSchema, toBinary(NotificationSchema, fromDelivery({ deliveryId: '9-1', event: terminator, subscriptionIds: ['fire'], publishedAtMs: 9, ...(match === undefined ? {} : { match }) }))));
    const n = delivered({ steps: [{ step: 'smoke', event: terminator, timeMs: 5000 }, { step: 'temp', event: temp, timeMs: 4000 }], aggregates: { total: 0 } });
    assert.deepEqual(n.match, {
      steps: [
        { step: 'smoke', event: { id: 'e3', lat: 1, lon: 2, radiusM: 0, attributes: { zone: 'b' }, tags: [] }, timeMs: 5000 },
        { step: 'temp', event: { id: 'e1', lat: 1, lon: 2, radiusM: 0, attributes: { zone: 'b', celsius: 47 }, tags: [] }, timeMs: 4000 },
      ],
      aggregates: { total: 0 },
    });
    const plain = delivered();
    assert.ok(!('match' in plain), 'a plain notification has no match key');
    assert.deepEqual(plain.subscriptionIds, ['fire']);
  });
});
