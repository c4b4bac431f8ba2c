/**
 * Pattern subscriptions in the service (docs/semantics.md §9): a device's pattern lives beside its
 * filter subscriptions in the embedded hub's match core, follows the device's position, and each
 * match is stored in the device's log as one notification with its steps and aggregates (E20);
 * then the same over real gRPC (the wire's Pattern, Event.time and Notification.match, errors
 * naming the proto fields), and the deployments that do not serve patterns yet refusing them.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { PatternMatcher } from '../../src/engines/event-patterns/pattern-matcher.js';
import { CPU_ENGINES } from '../../src/engines/index.js';
import type { EventPattern } from '../../src/model/event-patterns.js';
import type { Event, Filter } from '../../src/model/types.js';
import { EmbeddedHub } from '../../services/hub/embedded.js';
import { type Delivery, type DeviceSubscription, ENGINE_SIDE_LIMITS } from '../../services/hub/port.js';
import { MatchCore } from '../../services/matcher/core.js';
import { AggregateFn, Op, Selection } from '../../api/gen/ambit/v1/types_pb.js';
import { drain, rejectsWith } from '../support/hub-contract.js';
import { type Clients, DeviceStream, type Init, type TestServer, checkReplyStatus, checkStatus, startTestServer, unary } from '../support/grpc.js';
import { type RedisServer, redisServerMissing, startRedisServer } from '../support/redis-server.js';
import { pointAt } from '../support/sphere.js';

const HOME = { lat: 45.46, lon: 9.19 };
const FAR = pointAt(HOME.lat, HOME.lon, 90, 5000);
const near = (m: number) => pointAt(HOME.lat, HOME.lon, 0, m);
const kind = (k: string, area?: Filter['area']): Filter => ({ constraints: [{ name: 'kind', op: 'eq', value: k }], ...(area === undefined ? {} : { area }) });

/** Smoke within 300 m of the device, after the last temperature over 45 in its zone within 5 s. */
const FIRE: EventPattern = {
  steps: [
    { name: 'smoke', filter: kind('smoke', { radiusM: 300 }) },
    { name: 'temp', filter: { constraints: [{ name: 'kind', op: 'eq', value: 'temp' }, { name: 'value', op: 'gt', value: 45 }] }, selection: 'last', withinMs: 5000 },
  ],
  parameters: [{ left: { step: 'smoke', attribute: 'zone' }, op: 'eq', right: { step: 'temp', attribute: 'zone' } }],
  aggregates: [{ name: 'readings', fn: 'count', filter: kind('temp'), before: 'smoke', withinMs: 5000 }],
};

let seq = 0;
function ev(attributes: Record<string, string | number | boolean>, timeMs?: number, where = HOME, id = `e${++seq}`): Event {
  return { id, lat: where.lat, lon: where.lon, attributes, ...(timeMs === undefined ? {} : { timeMs }) };
}

interface Made {
  hub: EmbeddedHub;
  clock: { ms: number };
}

function makeHub(o: { patterns?: boolean; latenessMs?: number; maxPerDevice?: number } = {}): Made {
  const clock = { ms: 1_000_000 };
  const patterns = o.patterns === false ? null : new PatternMatcher({ elements: CPU_ENGINES.fast({ limits: ENGINE_SIDE_LIMITS }), latenessMs: o.latenessMs ?? 0 });
  const core = new MatchCore(CPU_ENGINES.fast({ limits: ENGINE_SIDE_LIMITS }), o.maxPerDevice, patterns);
  return { hub: new EmbeddedHub(core, { now: () => clock.ms }), clock };
}

const fire = (id = 'fire'): DeviceSubscription => ({ id, filters: [], pattern: FIRE });
const ping = (device: string): DeviceSubscription => ({ id: 'ping', filters: [{ constraints: [{ name: 'ping', op: 'eq', value: device }] }] });
/** [event id, subscription ids, the steps' event ids] of each delivery. */
const shape = (ds: readonly Delivery[]) => ds.map((d) => [d.event.id, d.subscriptionIds, d.match?.steps.map((s) => s.event.id) ?? null]);

describe('pattern subscriptions in the embedded hub', () => {
  it('[E20] each match is one notification in the owner\'s log: the terminator\'s event, the pattern\'s id, the steps with their times and the aggregates', async () => {
    const { hub } = makeHub();
    await hub.updateLocations([{ device: 'phone', ...HOME }]);
    await hub.addSubscription('phone', ping('phone'));
    await hub.addSubscription('phone', fire());
    await hub.addSubscription('phone', { id: 'temps', filters: [kind('temp', { radiusM: 1000 })] });
    const inbox = await hub.openInbox('phone', null);
    const r1 = await hub.publish([ev({ kind: 'temp', value: 40, zone: 'a' }, 1000, HOME, 't1'), ev({ kind: 'temp', value: 50, zone: 'a' }, 2000, HOME, 't2'), ev({ kind: 'temp', value: 60, zone: 'b' }, 2500, HOME, 't3')]);
    assert.deepEqual(r1.map((r) => r.reached), [1, 1, 1]);
    const [r2] = await hub.publish([ev({ kind: 'smoke', zone: 'a' }, 3000, near(100), 's1')]);
    assert.equal(r2.reached, 0, 'reached counts filter subscriptions; a pattern\'s match is its own notification');
    const got = await drain(hub, inbox, 'phone');
    assert.deepEqual(shape(got), [
      ['t1', ['temps'], null],
      ['t2', ['temps'], null],
      ['t3', ['temps'], null],
      ['s1', ['fire'], ['s1', 't2']],
    ]);
    const m = got[3].match!;
    assert.deepEqual(m.steps.map((s) => [s.step, s.timeMs]), [['smoke', 3000], ['temp', 2000]]);
    assert.equal(m.steps[1].event.attributes.value, 50);
    assert.equal(got[3].event, m.steps[0].event, 'the notification\'s event is the terminator\'s');
    assert.deepEqual({ ...m.aggregates }, { readings: 3 });
    const stats = await hub.stats();
    assert.equal(stats.subscriptions, 3);
    assert.equal(stats.extra.patternSubscriptions, 1);
    assert.equal(stats.extra.patternElements, 3);
    assert.equal(stats.extra.patternMatches, 1);
    assert.deepEqual((await hub.listSubscriptions('phone')).find((s) => s.id === 'fire'), fire());
    await hub.close();
  });

  it('[E5] an anchored step follows the owner\'s moves, through UpdateLocations and the stream\'s location writer', async () => {
    const { hub } = makeHub();
    await hub.addSubscription('phone', ping('phone'));
    await hub.addSubscription('phone', fire());
    const inbox = await hub.openInbox('phone', null);
    const smokeAt = (where: { lat: number; lon: number }, t: number) => hub.publish([ev({ kind: 'temp', value: 50, zone: 'a' }, t), ev({ kind: 'smoke', zone: 'a' }, t + 1, where)]);
    // No position yet: the anchored terminator matches nothing (E17, A6).
    await smokeAt(HOME, 1000);
    await hub.updateLocations([{ device: 'phone', ...HOME }]);
    await smokeAt(HOME, 2000);
    const writer = hub.locationWriter('phone');
    writer.update(FAR.lat, FAR.lon);
    await smokeAt(HOME, 3000);
    await smokeAt(FAR, 4000);
    await writer.close();
    const got = await drain(hub, inbox, 'phone');
    assert.deepEqual(got.map((d) => d.match!.steps.map((s) => s.timeMs)), [[2001, 2000], [4001, 4000]]);
    await hub.close();
  });

  it('[E17] a subscription turns from filters to a pattern and back by replace; remove and purge drop it; patterns count toward the device\'s subscriptions', async () => {
    const { hub } = makeHub({ maxPerDevice: 2 });
    await hub.updateLocations([{ device: 'phone', ...HOME }]);
    await hub.addSubscription('phone', ping('phone'));
    await hub.addSubscription('phone', { id: 'x', filters: [kind('smoke')] });
    await rejectsWith(hub.addSubscription('phone', fire('y')), 'RESOURCE_EXHAUSTED', 'a third subscription, a pattern');
    const inbox = await hub.openInbox('phone', null);
    // Event times after the hub's clock, which times the pings of `drain`.
    const round = async (t: number) => {
      await hub.publish([ev({ kind: 'temp', value: 50, zone: 'a' }, 2_000_000 + t, HOME, `t${t}`), ev({ kind: 'smoke', zone: 'a' }, 2_000_000 + t + 1, HOME, `s${t}`)]);
      return shape(await drain(hub, inbox, 'phone'));
    };
    assert.deepEqual(await round(1000), [['s1000', ['x'], null]]);
    await hub.replaceSubscription('phone', { ...fire('x') });
    assert.deepEqual(await round(2000), [['s2000', ['x'], ['s2000', 't2000']]]);
    // The pattern's history went with it: a new one starts empty (E17), so this smoke finds no temp.
    await hub.replaceSubscription('phone', { id: 'x', filters: [kind('smoke')] });
    await hub.replaceSubscription('phone', { ...fire('x') });
    await hub.publish([ev({ kind: 'smoke', zone: 'a' }, 2_002_500, HOME, 's2500')]);
    assert.deepEqual(shape(await drain(hub, inbox, 'phone')), []);
    await hub.removeSubscription('phone', 'x');
    assert.deepEqual(await round(3000), []);
    assert.equal((await hub.stats()).extra.patternSubscriptions, 0);
    await hub.addSubscription('phone', fire('x'));
    const purged = await hub.purgeDevice('phone');
    assert.deepEqual({ subscriptions: purged.subscriptions, location: purged.location }, { subscriptions: 2, location: true });
    const s = await hub.stats();
    assert.deepEqual([s.subscriptions, s.extra.patternSubscriptions, s.extra.patternElements], [0, 0, 0]);
    await hub.close();
  });

  it('[E2] an event without its own time takes the hub\'s clock when it is accepted', async () => {
    const { hub, clock } = makeHub();
    await hub.updateLocations([{ device: 'phone', ...HOME }]);
    await hub.addSubscription('phone', ping('phone'));
    await hub.addSubscription('phone', fire());
    const inbox = await hub.openInbox('phone', null);
    clock.ms = 5_000_000;
    await hub.publish([ev({ kind: 'temp', value: 50, zone: 'a' })]);
    clock.ms = 5_004_000;
    await hub.publish([ev({ kind: 'smoke', zone: 'a' })]);
    clock.ms = 5_100_000;
    await hub.publish([ev({ kind: 'smoke', zone: 'a' })]); // 96 s after the temperature: outside 5 s
    const got = await drain(hub, inbox, 'phone');
    assert.deepEqual(got.map((d) => d.match!.steps.map((s) => s.timeMs)), [[5_004_000, 5_000_000]]);
    await hub.close();
  });

  it('[E3] with a lateness bound events wait for earlier-timed ones, and the hub\'s clock releases the last of them', async () => {
    const { hub, clock } = makeHub({ latenessMs: 1000 });
    // The pings of `drain` take the clock's time: before the events, and released at once.
    clock.ms = 9_000;
    await hub.updateLocations([{ device: 'phone', ...HOME }]);
    await hub.addSubscription('phone', ping('phone'));
    await hub.addSubscription('phone', fire());
    const inbox = await hub.openInbox('phone', null);
    // The smoke comes first; the temperature before it in event time arrives 0.5 s later.
    await hub.publish([ev({ kind: 'smoke', zone: 'a' }, 10_000, HOME, 's')]);
    await hub.publish([ev({ kind: 'temp', value: 50, zone: 'a' }, 9_500, HOME, 't')]);
    assert.deepEqual(await drain(hub, inbox, 'phone'), [], 'nothing is released within the bound');
    assert.equal((await hub.stats()).extra.patternEventsBuffered, 2, 'the smoke and the temperature (the pings are released past them)');
    clock.ms = 10_999;
    assert.equal(await hub.releasePatterns(), 0);
    clock.ms = 11_000;
    assert.equal(await hub.releasePatterns(), 1);
    assert.deepEqual(shape(await drain(hub, inbox, 'phone')), [['s', ['fire'], ['s', 't']]]);
    // Earlier than what was released: late, counted, never part of a pattern.
    await hub.publish([ev({ kind: 'temp', value: 99, zone: 'a' }, 9_000)]);
    assert.equal((await hub.stats()).extra.patternEventsLate, 1);
    await hub.close();
  });

  it('[E17] a retried publish (the same event id) reaches the patterns once', async () => {
    const { hub } = makeHub();
    await hub.updateLocations([{ device: 'phone', ...HOME }]);
    await hub.addSubscription('phone', ping('phone'));
    await hub.addSubscription('phone', fire());
    const inbox = await hub.openInbox('phone', null);
    const temp = ev({ kind: 'temp', value: 50, zone: 'a' }, 1000, HOME, 'once');
    await hub.publish([temp]);
    const [again] = await hub.publish([{ ...temp, timeMs: 1500 }]);
    assert.equal(again.duplicate, true);
    await hub.publish([ev({ kind: 'smoke', zone: 'a' }, 2000)]);
    const got = await drain(hub, inbox, 'phone');
    assert.deepEqual(got.map((d) => d.match!.aggregates.readings), [1]);
    await hub.close();
  });

  it('a hub without pattern subscriptions refuses one FAILED_PRECONDITION, naming subscription.pattern, and changes nothing', async () => {
    const { hub } = makeHub({ patterns: false });
    await hub.addSubscription('phone', { id: 'x', filters: [kind('smoke')] });
    await rejectsWith(hub.addSubscription('phone', fire()), 'FAILED_PRECONDITION', 'add');
    await rejectsWith(hub.replaceSubscription('phone', fire('x')), 'FAILED_PRECONDITION', 'replace');
    await hub.addSubscription('phone', fire('y')).catch((err: { field?: string }) => assert.equal(err.field, 'subscription.pattern'));
    assert.deepEqual(await hub.listSubscriptions('phone'), [{ id: 'x', filters: [kind('smoke')] }]);
    assert.equal((await hub.stats()).extra.patternSubscriptions, undefined);
    await hub.close();
  });
});

// ---- over gRPC ----

const wireKind = (k: string, radiusM?: number): Init => ({ constraints: [{ name: 'kind', op: Op.EQ, value: { kind: { case: 'text', value: k } } }], ...(radiusM === undefined ? {} : { area: { radiusM } }) });
const WIRE_FIRE: Init = {
  steps: [
    { name: 'smoke', filter: wireKind('smoke', 300) },
    { name: 'temp', filter: { constraints: [...(wireKind('temp').constraints as Init[]), { name: 'value', op: Op.GT, value: { kind: { case: 'number', value: 45 } } }] }, selection: Selection.LAST, withinMs: 5000 },
  ],
  parameters: [{ left: { step: 'smoke', attribute: 'zone' }, op: Op.EQ, right: { step: 'temp', attribute: 'zone' } }],
  negations: [{ filter: wireKind('all-clear'), between: ['smoke', 'temp'] }],
  aggregates: [{ name: 'hottest', fn: AggregateFn.MAX, attribute: 'value', filter: wireKind('temp'), before: 'smoke', withinMs: 5000, where: { op: Op.GE, value: 0 } }],
  consuming: ['temp'],
};
const text = (v: string): Init => ({ kind: { case: 'text', value: v } });
const num = (v: number): Init => ({ kind: { case: 'number', value: v } });
function wireEvent(id: string, attributes: Record<string, Init>, ms: number, where = HOME): Init {
  return { id, position: where, attributes, time: { seconds: BigInt(Math.floor(ms / 1000)), nanos: (ms % 1000) * 1_000_000 } };
}

describe('pattern subscriptions over gRPC', { timeout: 60_000 }, () => {
  let srv: TestServer;
  let clients: Clients;
  before(async () => {
    srv = await startTestServer();
    clients = srv.clients();
  });
  after(async () => {
    await srv.stop();
    assert.deepEqual(srv.unexpectedErrors(), []);
  });

  it('[E20][E2] a device subscribes to a pattern on its stream, lists it as sent, and gets each match with its steps, their times and the aggregates', async () => {
    const { stream } = await DeviceStream.open(clients, srv.token('grpc-phone', ['device']));
    const md = srv.meta('pub', ['publish']);
    stream.move(HOME.lat, HOME.lon);
    await stream.subscribeOk({ id: 'fire', pattern: WIRE_FIRE });
    const listed = await unary<{ subscriptions: { id: string; pattern?: unknown; filters: unknown[] }[] }>(clients.device, 'listSubscriptions', {}, srv.meta('grpc-phone', ['device']));
    const mine = listed.subscriptions.find((s) => s.id === 'fire')!;
    assert.equal(mine.filters.length, 0);
    assert.deepEqual(JSON.parse(JSON.stringify(mine.pattern, (_, v: unknown) => (typeof v === 'bigint' ? Number(v) : v))).steps.map((s: { name: string; withinMs: number }) => [s.name, s.withinMs]), [['smoke', 0], ['temp', 5000]]);
    await unary(clients.publisher, 'publish', { event: wireEvent('t1', { kind: text('temp'), value: num(47), zone: text('a') }, 1_700_000_001_000) }, md);
    await unary(clients.publisher, 'publish', { event: wireEvent('t2', { kind: text('temp'), value: num(52), zone: text('a') }, 1_700_000_002_500) }, md);
    const res = await unary<{ reached: bigint }>(clients.publisher, 'publish', { event: wireEvent('s1', { kind: text('smoke'), zone: text('a') }, 1_700_000_003_000, near(50)) }, md);
    assert.equal(res.reached, 0n);
    const n = (await stream.notifications(1))[0] as unknown as { event: { id: string }; subscriptionIds: string[]; match: { steps: { step: string; event: { id: string }; time: { seconds: bigint; nanos: number } }[]; aggregates: Record<string, number> } };
    assert.equal(n.event.id, 's1');
    assert.deepEqual(n.subscriptionIds, ['fire']);
    assert.deepEqual(n.match.steps.map((s) => [s.step, s.event.id, Number(s.time.seconds) * 1000 + s.time.nanos / 1e6]), [['smoke', 's1', 1_700_000_003_000], ['temp', 't2', 1_700_000_002_500]]);
    assert.deepEqual({ ...n.match.aggregates }, { hottest: 52 });
    // t2 was consumed: the next smoke takes t1, the only temperature left.
    await unary(clients.publisher, 'publish', { event: wireEvent('s2', { kind: text('smoke'), zone: text('a') }, 1_700_000_004_000, near(50)) }, md);
    const n2 = (await stream.notifications(1))[0] as unknown as typeof n;
    assert.deepEqual(n2.match.steps.map((s) => s.event.id), ['s2', 't1']);
    const metrics = await srv.metrics();
    assert.match(metrics, /^ambit_pattern_subscriptions(\{[^}]*\})? 1$/m);
    assert.match(metrics, /^ambit_pattern_matches_total(\{[^}]*\})? 2$/m);
    stream.call.end();
    await stream.ended;
  });

  it('[E19] a bad pattern or event time is refused INVALID_ARGUMENT naming the proto field, and changes nothing', async () => {
    const { stream } = await DeviceStream.open(clients, srv.token('grpc-bad', ['device']));
    const steps = WIRE_FIRE.steps as Init[];
    const cases: [Init, string][] = [
      [{ id: 'b', pattern: { ...WIRE_FIRE, steps: [steps[0], { ...steps[1], withinMs: 0 }] } }, 'subscribe.subscription.pattern.steps[1].within_ms'],
      [{ id: 'b', pattern: { ...WIRE_FIRE, parameters: [{ left: { step: 'smoke', attribute: 'zone' }, op: Op.PREFIX, right: { step: 'temp', attribute: 'zone' } }] } }, 'subscribe.subscription.pattern.parameters[0].op'],
      [{ id: 'b', pattern: { ...WIRE_FIRE, negations: [{ filter: wireKind('x'), between: ['smoke', 'nope'] }] } }, 'subscribe.subscription.pattern.negations[0].between[1]'],
      [{ id: 'b', pattern: { ...WIRE_FIRE, aggregates: [{ name: 'n', fn: AggregateFn.UNSPECIFIED, filter: wireKind('x'), before: 'smoke', withinMs: 10 }] } }, 'subscribe.subscription.pattern.aggregates[0].fn'],
      [{ id: 'b', pattern: { ...WIRE_FIRE, negations: [{ filter: wireKind('x'), before: 'smoke', parameters: [{ attribute: 'a', op: Op.EQ, step: 'temp', stepAttribute: 'b' }] }] } }, 'subscribe.subscription.pattern.negations[0].within_ms'],
      [{ id: 'b', pattern: { steps: [{ name: 'only', filter: { area: { radiusM: -1 } } }] } }, 'subscribe.subscription.pattern.steps[0].filter.area.radius_m'],
      [{ id: 'b', filters: [wireKind('x')], pattern: WIRE_FIRE }, 'subscribe.subscription.filters'],
    ];
    for (const [sub, field] of cases) checkReplyStatus(await stream.subscribe(sub), grpc.status.INVALID_ARGUMENT, field, field);
    const listed = await unary<{ subscriptions: unknown[] }>(clients.device, 'listSubscriptions', {}, srv.meta('grpc-bad', ['device']));
    assert.deepEqual(listed.subscriptions, []);
    const md = srv.meta('pub', ['publish']);
    for (const [time, field] of [
      [{ seconds: 1n, nanos: 500 }, 'event.time.nanos'],
      [{ seconds: -1n, nanos: 0 }, 'event.time'],
    ] as const) {
      await assert.rejects(unary(clients.publisher, 'publish', { event: { id: 'bad-time', position: HOME, time } }, md), (err: grpc.ServiceError) => {
        checkStatus(err, grpc.status.INVALID_ARGUMENT, field, field);
        return true;
      });
    }
    stream.call.end();
    await stream.ended;
  });
});

describe('pattern subscriptions on a node of hub partitions and in Redis mode', { timeout: 60_000 }, () => {
  it('[E20][E2] a node of hub partitions serves them over its links: each device\'s match comes from its own partition, event times included', async () => {
    const srv = await startTestServer({ partitions: 2 });
    try {
      const clients = srv.clients();
      const md = srv.meta('pub', ['publish']);
      // Four devices: with two partitions, both hold some (devices are spread by id).
      const streams = await Promise.all(['pa', 'pb', 'pc', 'pd'].map(async (d) => {
        const { stream } = await DeviceStream.open(clients, srv.token(d, ['device']));
        stream.move(HOME.lat, HOME.lon);
        await stream.subscribeOk({ id: `fire-${d}`, pattern: WIRE_FIRE });
        await stream.sync();
        return stream;
      }));
      await unary(clients.publisher, 'publish', { event: wireEvent('pt', { kind: text('temp'), value: num(60), zone: text('z') }, 1_700_000_010_007) }, md);
      await unary(clients.publisher, 'publish', { event: wireEvent('ps', { kind: text('smoke'), zone: text('z') }, 1_700_000_011_000) }, md);
      for (const [i, stream] of streams.entries()) {
        const n = (await stream.notifications(1))[0] as unknown as { subscriptionIds: string[]; match: { steps: { event: { id: string }; time: { seconds: bigint; nanos: number } }[]; aggregates: Record<string, number> } };
        assert.deepEqual(n.subscriptionIds, [`fire-${['pa', 'pb', 'pc', 'pd'][i]}`]);
        assert.deepEqual(n.match.steps.map((s) => [s.event.id, Number(s.time.seconds) * 1000 + s.time.nanos / 1e6]), [['ps', 1_700_000_011_000], ['pt', 1_700_000_010_007]]);
        assert.deepEqual({ ...n.match.aggregates }, { hottest: 60 });
        stream.call.end();
        await stream.ended;
      }
    } finally {
      await srv.stop();
    }
  });

  let redis: RedisServer | null = null;
  after(async () => redis?.stop());
  it('[E20][E2] Redis mode serves them: a match is stored in the device\'s log, pushed to its stream and read back on resume, event times included', { skip: redisServerMissing() ?? false }, async () => {
    redis = await startRedisServer();
    const srv = await startTestServer({ redisUrl: redis.url });
    try {
      const clients = srv.clients();
      const md = srv.meta('pub', ['publish']);
      const { stream } = await DeviceStream.open(clients, srv.token('r', ['device']));
      stream.move(HOME.lat, HOME.lon);
      await stream.subscribeOk({ id: 'fire', pattern: WIRE_FIRE });
      await stream.subscribeOk({ id: 'temps', filters: [wireKind('temp')] });
      await stream.sync();
      const listed = await unary<{ subscriptions: { id: string; pattern?: { steps: unknown[] } }[] }>(clients.device, 'listSubscriptions', {}, srv.meta('r', ['device']));
      assert.deepEqual(listed.subscriptions.map((x) => [x.id, x.pattern?.steps.length ?? 0]), [['fire', 2], ['temps', 0]]);
      await unary(clients.publisher, 'publish', { event: wireEvent('rt', { kind: text('temp'), value: num(70), zone: text('q') }, 1_700_000_020_250) }, md);
      // The smoke's terminator event also matches nothing else: its one notification is the match.
      await unary(clients.publisher, 'publish', { event: wireEvent('rs', { kind: text('smoke'), zone: text('q') }, 1_700_000_021_000) }, md);
      type N = { event: { id: string }; subscriptionIds: string[]; match?: { steps: { event: { id: string }; time: { seconds: bigint; nanos: number } }[]; aggregates: Record<string, number> } };
      const shape = (ns: N[]) => ns.map((n) => [n.event.id, n.subscriptionIds, n.match?.steps.map((x) => [x.event.id, Number(x.time.seconds) * 1000 + x.time.nanos / 1e6]) ?? null, n.match === undefined ? null : { ...n.match.aggregates }]);
      const want = [
        ['rt', ['temps'], null, null],
        ['rs', ['fire'], [['rs', 1_700_000_021_000], ['rt', 1_700_000_020_250]], { hottest: 70 }],
      ];
      assert.deepEqual(shape((await stream.notifications(2)) as unknown as N[]), want);
      stream.call.end();
      await stream.ended;
      // Nothing was acknowledged: a new stream reads both back from the device's log in Redis.
      const { stream: again } = await DeviceStream.open(clients, srv.token('r', ['device']));
      assert.deepEqual(shape((await again.notifications(2)) as unknown as N[]), want);
      again.call.end();
      await again.ended;
    } finally {
      await srv.stop();
    }
  });
});
