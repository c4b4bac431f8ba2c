/**
 * End to end over real gRPC: devices subscribe on their streams (anchored areas, fixed centres,
 * content-only filters, every operator on every type), move (stream, UpdateLocation and a fleet's
 * UpdateLocations), publishers publish (Publish and BulkPublish), and each device must receive
 * exactly the notifications the reference engine (src/engines/reference.ts) computes on the same
 * data: the same events in publish order, the same subscription ids, and `reached` equal to the
 * number of matched subscriptions. Seeded: a failure replays.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { ReferenceMatcher } from '../../src/engines/reference.js';
import type { Constraint, Event, Filter, Op as MOp, Value } from '../../src/model/types.js';
import { Op } from '../../api/gen/ambit/v1/types_pb.js';
import { Rng } from '../support/rng.js';
import { type Clients, DeviceStream, type Init, type TestServer, clientStream, meta, startTestServer, unary } from '../support/grpc.js';
import { ENGINE_SIDE_LIMITS } from '../../services/hub/port.js';
import type { ServerConfig } from '../../services/process/config.js';
import { type RedisServer, redisServerMissing, startRedisServer } from '../support/redis-server.js';
import { Redis } from 'ioredis';
import { Keys } from '../../services/redis/keys.js';

/** Resolves at the next write of `key` on the Redis at `url` (keyspace notifications). */
async function nextWrite(url: string, key: string): Promise<void> {
  const sub = new Redis(url, { lazyConnect: true });
  await sub.connect();
  try {
    await sub.config('SET', 'notify-keyspace-events', 'K$');
    const channel = `__keyspace@0__:${key}`;
    const written = new Promise<void>((resolve) => sub.on('message', (ch: string) => ch === channel && resolve()));
    await sub.subscribe(channel);
    await written;
  } finally {
    sub.disconnect();
  }
}

const SEED = 0x5eed_a4b1;
const DEVICES = 24;
const CENTER = { lat: 52.52, lon: 13.405 };
const SPAN = 0.06; // degrees: a city of about 7 x 4 km

const WIRE_OP: Record<MOp, Op> = {
  eq: Op.EQ,
  ne: Op.NE,
  lt: Op.LT,
  le: Op.LE,
  gt: Op.GT,
  ge: Op.GE,
  prefix: Op.PREFIX,
  suffix: Op.SUFFIX,
  contains: Op.CONTAINS,
  like: Op.LIKE,
  regex: Op.REGEX,
  exists: Op.EXISTS,
};

const KINDS = ['cafe', 'cafeteria', 'bar', 'bakery', 'barber', 'kebab', 'Café', '東京'];
/** Tags as clients spell them: several spellings of one tag (semantics T2). */
const TAGS = ['#Food', 'food', 'vegan', 'VEGAN', 'café', 'cafe\u0301', 'en:news', '東京', '#jam'];
/** T2 and T4, written apart from the server's code: what a delivery or a listing carries. */
const normTags = (tags: string[] | undefined): string[] =>
  [...new Set((tags ?? []).map((t) => (t.startsWith('#') ? t.slice(1) : t).toLowerCase().normalize('NFC')))].sort();

function wireValue(v: Value): Init {
  if (typeof v === 'number') return { kind: { case: 'number', value: v } };
  if (typeof v === 'string') return { kind: { case: 'text', value: v } };
  return { kind: { case: 'flag', value: v } };
}

function fromWireValue(v: Init): Value {
  return v.kind.value as Value;
}

/** One device's subscription in both forms. */
interface Sub {
  device: string;
  id: string;
  filters: Filter[];
}

function wireSub(s: Sub): Init {
  return {
    id: s.id,
    filters: s.filters.map((f) => ({
      constraints: f.constraints.map((c) => ({ name: c.name, op: WIRE_OP[c.op], value: c.value === undefined ? undefined : wireValue(c.value) })),
      area: f.area === undefined ? undefined : { radiusM: f.area.radiusM, center: f.area.center },
      tags: f.tags ?? [],
    })),
  };
}

function wireEvent(e: Event): Init {
  const attributes: Record<string, Init> = {};
  for (const [k, v] of Object.entries(e.attributes)) attributes[k] = wireValue(v);
  return { id: e.id, position: { lat: e.lat, lon: e.lon }, radiusM: e.radiusM ?? 0, attributes, tags: e.tags ?? [] };
}

class Gen {
  constructor(readonly rng: Rng) {}

  point(): { lat: number; lon: number } {
    return { lat: CENTER.lat + this.rng.range(-SPAN / 2, SPAN / 2), lon: CENTER.lon + this.rng.range(-SPAN, SPAN) };
  }

  constraint(): Constraint {
    const r = this.rng;
    switch (r.int(5)) {
      case 0:
        return { name: 'price', op: r.pick<MOp>(['eq', 'ne', 'lt', 'le', 'gt', 'ge']), value: r.int(21) * 5 };
      case 1:
        return { name: 'open', op: r.pick<MOp>(['eq', 'ne', 'lt', 'le', 'gt', 'ge']), value: r.chance(0.5) };
      case 2: {
        const op = r.pick<MOp>(['eq', 'ne', 'prefix', 'suffix', 'contains', 'like', 'regex']);
        const k = r.pick(KINDS);
        const value =
          op === 'eq' || op === 'ne' ? k
          : op === 'prefix' ? k.slice(0, 1 + r.int(3))
          : op === 'suffix' ? k.slice(-1 - r.int(3))
          : op === 'like' ? `${k.slice(0, 1 + r.int(2))}_%`
          : op === 'regex' ? `^(?:${k.slice(0, 2)}|${r.pick(KINDS).slice(-2)})[a-zé]*$`
          : k.slice(1, 3);
        return { name: 'kind', op, value };
      }
      case 3:
        return { name: r.pick(['price', 'open', 'kind', 'tag']), op: 'exists' };
      default:
        // A type mismatch on purpose now and then (semantics C2: matches nothing).
        return r.chance(0.8) ? { name: 'tag', op: r.pick<MOp>(['prefix', 'contains', 'eq']), value: r.pick(['red', 'r', 'e', 'blue']) } : { name: 'price', op: 'eq', value: '5' };
    }
  }

  filter(): Filter {
    const f = this.plainFilter();
    // Tags beside the rest, or alone (constraints dropped): T7.
    if (this.rng.chance(0.3)) {
      f.tags = Array.from({ length: 1 + this.rng.int(2) }, () => this.rng.pick(TAGS));
      if (this.rng.chance(0.3)) f.constraints = [];
    }
    return f;
  }

  plainFilter(): Filter {
    const r = this.rng;
    const constraints = Array.from({ length: r.int(4) }, () => this.constraint());
    const kind = r.int(5);
    if (kind === 0 && constraints.length > 0) return { constraints }; // content-only
    const radiusM = r.logUniform(100, 3000);
    if (kind <= 2) return { constraints, area: { radiusM } }; // anchored to the device
    return { constraints, area: { radiusM, center: this.point() } };
  }

  sub(device: string, id: string): Sub {
    return { device, id, filters: Array.from({ length: 1 + this.rng.int(3) }, () => this.filter()) };
  }

  event(id: string): Event {
    const r = this.rng;
    const p = this.point();
    const attributes: Record<string, Value> = {};
    if (r.chance(0.8)) attributes.price = r.int(21) * 5;
    if (r.chance(0.6)) attributes.open = r.chance(0.5);
    if (r.chance(0.8)) attributes.kind = r.pick(KINDS);
    if (r.chance(0.4)) attributes.tag = r.pick(['red', 'dark-red', 'blue', 'reddish', 'e']);
    const e: Event = { id, lat: p.lat, lon: p.lon, radiusM: r.chance(0.5) ? 0 : r.range(1, 400), attributes };
    if (r.chance(0.6)) e.tags = Array.from({ length: r.int(5) }, () => r.pick(TAGS));
    return e;
  }
}

// The same workload on a node with one hub, on one whose hub is split by device over three
// threads (AMBIT_PARTITIONS), each with its own engine and logs, and in Redis mode (events and
// subscriptions through the command stream, notifications stored in Redis).
let redis: RedisServer | null = null;
const DEPLOYMENTS: [string, () => Promise<Partial<ServerConfig>>, string | false][] = [
  ['one hub', async () => ({}), false],
  ['3 hub partitions', async () => ({ partitions: 3 }), false],
  ['Redis', async () => ((redis = await startRedisServer()), { redisUrl: redis.url, redisPrefix: 'e2e:' }), redisServerMissing() ?? false],
];
for (const [deployment, config, skip] of DEPLOYMENTS) describe(`api e2e (${deployment}): seeded workload against the reference engine`, { skip }, () => {
  let srv: TestServer;
  let clients: Clients;
  const ref = new ReferenceMatcher({ limits: ENGINE_SIDE_LIMITS });
  const gen = new Gen(new Rng(SEED));
  const devices = Array.from({ length: DEVICES }, (_, i) => `dev-${String(i).padStart(2, '0')}`);
  const streams = new Map<string, DeviceStream>();
  const subs = new Map<string, Sub>(); // key: device/id
  /** Per device: the expected notifications in order (event id, sorted subscription ids). */
  const expected = new Map<string, { eventId: string; subscriptionIds: string[] }[]>();
  const published: Event[] = [];
  let notified = 0;
  let reachedTotal = 0n;
  let publisherMd: ReturnType<typeof meta>;
  let opsMd: ReturnType<typeof meta>;

  const key = (device: string, id: string) => `${device}/${id}`;

  before(async () => {
    srv = await startTestServer(await config());
    clients = srv.clients();
    publisherMd = srv.meta('publisher-1', ['publish']);
    opsMd = srv.meta('ops', ['ops']);
    for (const d of devices) {
      const { stream, welcome } = await DeviceStream.open(clients, srv.token(d, ['device']));
      assert.equal(welcome.deviceId, d);
      assert.equal(welcome.missed, 0n);
      streams.set(d, stream);
      expected.set(d, []);
    }
  });

  after(async () => {
    for (const s of streams.values()) s.cancel();
    await srv.stop();
    await redis?.stop();
    redis = null;
  });

  async function addSub(s: Sub): Promise<void> {
    await streams.get(s.device)!.subscribeOk(wireSub(s));
    ref.add({ id: key(s.device, s.id), owner: s.device, filters: s.filters });
    subs.set(key(s.device, s.id), s);
  }

  /** Publishes `events` (alternating Publish and BulkPublish) and records what the reference expects; returns how many matches were of subscriptions whose every filter is anchored. */
  async function publishAndExpect(events: Event[]): Promise<number> {
    let anchoredOnly = 0;
    let i = 0;
    while (i < events.length) {
      // BulkPublish answers with totals only: events without an id go through Publish, which names them.
      const bulk = events[i].id !== '' && gen.rng.chance(0.5);
      let chunk = [events[i]];
      if (bulk) {
        chunk = events.slice(i, i + 1 + gen.rng.int(12));
        const unnamed = chunk.findIndex((e) => e.id === '');
        if (unnamed > 0) chunk = chunk.slice(0, unnamed);
      }
      i += chunk.length;
      // An event sent without an id is matched under a stand-in; the server names it.
      const matches = await Promise.all(chunk.map((e) => ref.match(e.id === '' ? { ...e, id: 'unnamed' } : e)));
      const want = matches.reduce((n, m) => n + m.length, 0);
      if (bulk) {
        // Split over several messages of one call.
        const half = Math.ceil(chunk.length / 2);
        const msgs = [{ events: chunk.slice(0, half).map(wireEvent) }, { events: chunk.slice(half).map(wireEvent) }];
        const res = await clientStream(clients.publisher, 'bulkPublish', msgs, publisherMd);
        assert.equal(res.accepted, BigInt(chunk.length));
        assert.equal(res.reached, BigInt(want), 'BulkPublish reached = matched subscriptions');
        reachedTotal += res.reached;
      } else {
        const e = chunk[0];
        const res = await unary(clients.publisher, 'publish', { event: wireEvent(e) }, publisherMd);
        if (e.id === '') {
          assert.match(res.eventId, /^[0-9a-f-]{36}$/, 'the server names an event sent without an id');
          e.id = res.eventId;
        } else {
          assert.equal(res.eventId, e.id);
        }
        assert.equal(res.reached, BigInt(want), `Publish ${e.id} reached = matched subscriptions`);
        reachedTotal += res.reached;
      }
      for (let k = 0; k < chunk.length; k++) {
        const byDevice = new Map<string, string[]>();
        for (const m of matches[k]) {
          const s = subs.get(m)!;
          if (s.filters.every((f) => f.area !== undefined && f.area.center === undefined)) anchoredOnly++;
          byDevice.set(s.device, [...(byDevice.get(s.device) ?? []), s.id]);
        }
        for (const [d, ids] of byDevice) expected.get(d)!.push({ eventId: chunk[k].id, subscriptionIds: ids.sort() });
      }
      published.push(...chunk);
    }
    return anchoredOnly;
  }

  /** Each device has received exactly its expected notifications since the last check. */
  async function checkDeliveries(): Promise<number> {
    const byId = new Map(published.map((e) => [e.id, e]));
    let total = 0;
    await Promise.all(
      devices.map(async (d) => {
        const want = expected.get(d)!.splice(0);
        total += want.length;
        notified += want.length;
        const s = streams.get(d)!;
        const got = await s.notifications(want.length, 10_000);
        assert.equal(s.pending('notification').length, 0, `more notifications than expected for ${d}`);
        assert.deepEqual(
          got.map((n) => ({ eventId: n.event!.id, subscriptionIds: [...n.subscriptionIds] })),
          want,
          `notifications of ${d}`,
        );
        for (const n of got) {
          const e = byId.get(n.event!.id)!;
          assert.deepEqual({ lat: n.event!.position!.lat, lon: n.event!.position!.lon, radiusM: n.event!.radiusM }, { lat: e.lat, lon: e.lon, radiusM: e.radiusM ?? 0 });
          const attrs = Object.fromEntries(Object.entries(n.event!.attributes).map(([k, v]) => [k, fromWireValue(v)]));
          assert.deepEqual(attrs, e.attributes);
          assert.deepEqual([...n.event!.tags], normTags(e.tags), 'tags are delivered in their normal form');
          assert.ok(n.publishedAt !== undefined && Number(n.publishedAt.seconds) > 1_600_000_000);
        }
        if (got.length > 0) s.ack(got[got.length - 1].deliveryId);
      }),
    );
    // Nothing arrives late either: no device has one waiting behind the reply to a sync request.
    await Promise.all(devices.map((d) => streams.get(d)!.expectQuiet('notification')));
    return total;
  }

  async function moveAll(): Promise<void> {
    const fleet = srv.meta('fleet', ['device', 'location:any']);
    const batch: Init[] = [];
    for (const [i, d] of devices.entries()) {
      if (i % 8 === 7) continue; // never located in this phase: anchored filters match nothing (A6)
      const p = gen.point();
      ref.updatePosition(d, p.lat, p.lon);
      if (i % 4 === 0) await unary(clients.device, 'updateLocation', { location: p }, srv.meta(d, ['device']));
      else if (i % 4 === 1) batch.push({ deviceId: d, location: p });
      else streams.get(d)!.move(p.lat, p.lon);
    }
    const res = await clientStream(clients.device, 'updateLocations', [{ updates: batch.slice(0, 3) }, { updates: batch.slice(3) }], fleet);
    assert.equal(res.accepted, BigInt(batch.length));
    // Stream locations get no reply: a request behind them on the same stream is the barrier.
    await Promise.all(devices.map((d) => streams.get(d)!.sync()));
  }

  it('subscriptions of every kind are accepted and listed back as sent', async () => {
    for (const d of devices) {
      const n = 9 + gen.rng.int(8);
      for (let i = 0; i < n; i++) await addSub(gen.sub(d, `s${i}`));
    }
    assert.ok(subs.size >= 250, `a few hundred subscriptions (${subs.size})`);
    const ops = new Set<number>();
    for (const s of subs.values()) for (const f of s.filters) for (const c of f.constraints) ops.add(WIRE_OP[c.op]);
    assert.equal(ops.size, 12, 'every operator is used');
    const listed = await unary(clients.device, 'listSubscriptions', {}, srv.meta('dev-03', ['device']));
    const mine = [...subs.values()].filter((s) => s.device === 'dev-03');
    assert.deepEqual(
      listed.subscriptions.map((s: Init) => s.id).sort(),
      mine.map((s) => s.id).sort(),
    );
    const s0 = listed.subscriptions.find((s: Init) => s.id === 's0');
    const want = wireSub(mine.find((s) => s.id === 's0')!);
    assert.equal(s0.filters.length, want.filters.length);
    for (const [i, f] of s0.filters.entries()) {
      assert.deepEqual(
        f.constraints.map((c: Init) => ({ name: c.name, op: c.op, value: c.value === undefined ? undefined : fromWireValue(c.value) })),
        want.filters[i].constraints.map((c: Init) => ({ name: c.name, op: c.op, value: c.value === undefined ? undefined : fromWireValue(c.value) })),
      );
      assert.equal(f.area?.radiusM, want.filters[i].area?.radiusM);
      assert.deepEqual([...f.tags], normTags(want.filters[i].tags), 'tags are listed in their normal form');
      assert.deepEqual(f.area?.center === undefined ? undefined : { lat: f.area.center.lat, lon: f.area.center.lon }, want.filters[i].area?.center);
    }
    let tagged = 0;
    for (const d of devices) {
      const all = await unary(clients.device, 'listSubscriptions', {}, srv.meta(d, ['device']));
      for (const ls of all.subscriptions) {
        const sent = subs.get(key(d, ls.id))!;
        ls.filters.forEach((f: Init, i: number) => {
          assert.deepEqual([...f.tags], normTags(sent.filters[i].tags), `${d}/${ls.id} filter ${i}: tags listed in their normal form`);
          if (f.tags.length > 0) tagged++;
        });
      }
    }
    assert.ok(tagged >= 30, `filters with tags (${tagged})`);
  });

  it('publish before any position: only fixed-centre and content-only filters match', async () => {
    const events = Array.from({ length: 40 }, (_, i) => gen.event(i % 7 === 0 ? '' : `a${i}`));
    assert.equal(await publishAndExpect(events), 0, 'anchored areas of devices without a position match nothing (A6)');
    const n = await checkDeliveries();
    assert.ok(n > 0, 'some notifications');
  });

  it('devices move by stream, UpdateLocation and a fleet UpdateLocations; anchored areas follow', async () => {
    await moveAll();
    const events = Array.from({ length: 80 }, (_, i) => gen.event(`b${i}`));
    const anchored = await publishAndExpect(events);
    assert.ok(anchored >= 10, `subscriptions matched only through their device's position (${anchored})`);
    const n = await checkDeliveries();
    assert.ok(n > 40, `enough notifications to mean something (${n})`);
  });

  it('after replaces, unsubscribes and a second move, only the current versions match', async (t) => {
    const all = [...subs.values()];
    for (let i = 0; i < 40; i++) {
      const s = all[gen.rng.int(all.length)];
      if (!subs.has(key(s.device, s.id))) continue;
      const stream = streams.get(s.device)!;
      if (i % 3 === 0) {
        const st = await stream.unsubscribe(s.id);
        assert.equal(st.code, 0, st.message);
        ref.remove(key(s.device, s.id));
        subs.delete(key(s.device, s.id));
      } else {
        const next = gen.sub(s.device, s.id);
        const st = await stream.replace(wireSub(next));
        assert.equal(st.code, 0, st.message);
        ref.replace({ id: key(s.device, s.id), owner: s.device, filters: next.filters });
        subs.set(key(s.device, s.id), next);
      }
    }
    await moveAll();
    const events = Array.from({ length: 80 }, (_, i) => gen.event(`c${i}`));
    await publishAndExpect(events);
    await checkDeliveries();

    // Redis mode: the matcher's figures reach the gateways in its stats record, which it rewrites
    // now and then; wait for the first rewrite after the last delivery (Redis says when: a
    // keyspace notification of the record's key).
    if (deployment === 'Redis') await nextWrite(redis!.url, new Keys('e2e:', { cluster: false, groups: 1 }).matcherStats);
    const stats = await unary(clients.ops, 'getStats', {}, opsMd);
    assert.equal(stats.subscriptions, BigInt(subs.size));
    assert.equal(stats.eventsPublished, BigInt(published.length));
    assert.equal(stats.connectedDevices, BigInt(DEVICES));
    assert.equal(stats.mode, deployment === 'Redis' ? 'redis' : 'embedded');
    assert.equal(stats.engine, 'fast');
    let filters = 0;
    for (const s of subs.values()) filters += s.filters.length;
    assert.equal(stats.filters, BigInt(filters));
    assert.equal(stats.notifications, BigInt(notified), 'one notification per (event, device) pair the reference matched');
    const m = await srv.metrics();
    assert.match(m, new RegExp(`^ambit_matches_total\\{role="all"\\} ${reachedTotal}$`, 'm'));
    assert.match(m, new RegExp(`^ambit_notifications_sent_total\\{role="all"\\} ${notified}$`, 'm'));
    assert.match(m, new RegExp(`^ambit_events_published_total\\{role="all"\\} ${published.length}$`, 'm'));
    assert.deepEqual(srv.unexpectedErrors(), []);
    t.diagnostic(`${subs.size} subscriptions of ${DEVICES} devices; ${published.length} events reached ${reachedTotal} subscriptions in ${notified} notifications`);
  });
});
