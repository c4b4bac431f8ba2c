/**
 * The Redis deployment against a real redis-server: the hub contract on RedisHub + RedisMatcher,
 * then what only a shared, durable store can show: a matcher rebuilt from Redis, a gateway or a
 * matcher dying mid-stream, a device that never reads, and two gateways behind one matcher.
 * Each test uses its own key prefix on one server.
 */
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runInNewContext } from 'node:vm';
import v8 from 'node:v8';
import { after, before, describe, it } from 'node:test';
import { Redis } from 'ioredis';
import { CPU_ENGINES } from '../../src/engines/index.js';
import { compareStreamIds, decodeLocations, encodeLocations, encodePosition, encodePositionsHset } from '../../services/redis/codec.js';
import { RedisHub } from '../../services/hub/redis.js';
import { PublishError } from '../../src/model/errors.js';
import { RedisMatcher, snapshotFileName } from '../../services/matcher/redis.js';
import { RebuildingMatcher } from '../../services/matcher/rebuilding.js';
import { Keys } from '../../services/redis/keys.js';
import { defineScripts, runScript } from '../../services/redis/scripts.js';
import { P, Q, addPing, anchored, anywhere, drain, eq, event, north, pullN, rejectsWith, runHubContract, sub } from '../support/hub-contract.js';
import { within } from '../support/grpc.js';
import { startRedisServer } from '../support/redis-server.js';
import { redisTestKit, useRedisServer } from '../support/redis-deployment.js';
import { ENGINE_SIDE_LIMITS } from '../../services/hub/port.js';

const { missing, url } = useRedisServer();
const { freshPrefix, keysOf, matcherOptions, hubOptions, deployment, contractFixture, partitionedFixture, inspect } = redisTestKit(url);

describe('redis hub', { skip: missing ?? false, timeout: 30_000 }, () => {
  runHubContract('redis', contractFixture);
  runHubContract('redis, devices split over 3 matcher partitions', partitionedFixture(3));

  it('a matcher whose read position the stream was trimmed past says so: logged and counted once', async () => {
    let armed = false;
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    let stopped!: () => void;
    const atHold = new Promise<void>((resolve) => (stopped = resolve));
    const found: string[] = [];
    let told!: () => void;
    const trimmedSeen = new Promise<void>((resolve) => (told = resolve));
    const d = await deployment(1, undefined, {}, {
      hooks: {
        beforeRead: () => {
          if (!armed) return;
          stopped();
          return held;
        },
        onTrimmedPast: (at: string) => {
          found.push(at);
          told();
        },
      },
    });
    try {
      const [hub] = d.hubs;
      await hub.addSubscription('a', sub('s0', anywhere(eq('k', 0))));
      assert.deepEqual(await hub.publish([event({ k: 0 })]).then((r) => r.map((x) => x.reached)), [1], 'the matcher has read');
      armed = true;
      await hub.addSubscription('a', sub('s1', anywhere(eq('k', 1)))); // read, then the loop holds
      await atHold;
      for (let i = 2; i < 6; i++) await hub.addSubscription('a', sub(`s${i}`, anywhere(eq('k', i))));
      await inspect((r) => r.xtrim(keysOf(d.prefix).in, 'MAXLEN', 1));
      await trimmedSeen;
      assert.equal(found.length, 1);
      assert.equal(d.matcher.position, found[0], 'reported at the position it reads from');
    } finally {
      release();
      await d.close();
    }
  });

  it('a matcher run by the service rebuilds itself from Redis when its stream was trimmed past what it read: the subscriptions it missed are there after, its snapshot file is gone, and it leads again', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'ambit-rebuild-'));
    let armed = false;
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    let stopped!: () => void;
    const atHold = new Promise<void>((resolve) => (stopped = resolve));
    let told!: () => void;
    const trimmedSeen = new Promise<void>((resolve) => (told = resolve));
    const prefix = freshPrefix();
    const r = await RebuildingMatcher.start(
      matcherOptions(prefix, {
        snapshot: { dir, intervalMs: 0 },
        hooks: {
          beforeRead: () => {
            if (!armed) return;
            stopped();
            return held;
          },
          onTrimmedPast: () => {
            // The held loop goes on, so the matcher can stop for its rebuild.
            armed = false;
            release();
            told();
          },
        },
      }),
      () => CPU_ENGINES.fast({ limits: ENGINE_SIDE_LIMITS }),
    );
    const hub = await RedisHub.connect(hubOptions(prefix));
    try {
      const first = r.matcher;
      await hub.addSubscription('a', sub('s0', anywhere(eq('k', 0))));
      assert.deepEqual((await hub.publish([event({ k: 0 })])).map((x) => x.reached), [1], 'the matcher has read');
      assert.ok((await first.snapshotNow()) !== null);
      armed = true;
      await hub.addSubscription('a', sub('s1', anywhere(eq('k', 1)))); // read, then the loop holds
      await atHold;
      for (let i = 2; i < 6; i++) await hub.addSubscription('a', sub(`s${i}`, anywhere(eq('k', i))));
      await inspect((x) => x.xtrim(keysOf(prefix).in, 'MAXLEN', 1));
      await trimmedSeen;
      await r.settled();
      assert.notEqual(r.matcher, first, 'a new matcher');
      assert.equal(r.rebuilds, 1);
      assert.equal(existsSync(join(dir, snapshotFileName(keysOf(prefix)))), false, 'the file of the state it had is gone');
      assert.equal(r.matcher.restoredFrom.from, 'redis', 'rebuilt from Redis, not from the file of the state it had');
      await r.matcher.whenRole('leader');
      // s2-s4's commands were trimmed away unread: Redis's stored copies are applied as it reads on.
      assert.deepEqual((await hub.publish([event({ k: 4 })])).map((x) => x.reached), [1]);
      assert.deepEqual(r.matcher.core.list('a').map((x) => x.id).sort(), ['s0', 's1', 's2', 's3', 's4', 's5'], 'every subscription, those it never read included');
    } finally {
      release();
      await hub.close();
      await r.stop();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('encodes and decodes a location batch', () => {
    const devices = ['a', 'ü-device', '', 'x'.repeat(300)].map((d) => Buffer.from(d));
    const lat = [1.5, -90, 0, 45.4642];
    const lon = [2.5, 180, -0, 9.19];
    const { blob, positionAt } = encodeLocations({ devices, lat, lon, n: 4 }, 1, 4);
    const got: [string, number, number][] = [];
    assert.equal(decodeLocations(blob, (d, a, o) => got.push([d, a, o])), 3);
    assert.deepEqual(got, [
      ['ü-device', -90, 180],
      ['', 0, -0],
      ['x'.repeat(300), 45.4642, 9.19],
    ]);
    assert.equal(blob.readDoubleLE(positionAt[2]), 45.4642);
    assert.throws(() => decodeLocations(blob.subarray(0, blob.length - 1), () => {}), /redis codec: loc batch truncated/);
    const one = encodeLocations({ devices: [Buffer.from('a')], lat: [1], lon: [2], n: 1 });
    const resp = encodePositionsHset('k:pos', { devices: [Buffer.from('a')], lat: [1], lon: [2], n: 1 }, 0, 1, one);
    assert.deepEqual(resp, Buffer.concat([Buffer.from('*4\r\n$4\r\nHSET\r\n$5\r\nk:pos\r\n$1\r\na\r\n$16\r\n'), encodePosition(1, 2), Buffer.from('\r\n')]));
    assert.ok(compareStreamIds('10-2', '9-30') > 0 && compareStreamIds('5-1', '5-10') < 0 && compareStreamIds('3-3', '3-3') === 0);
  });

  it("matcher partitions write the retention where gateways read it: the shared device groups' config", async () => {
    const make = partitionedFixture(2);
    const f = await make({ retention: { maxPerDevice: 7, maxAgeMs: 3_600_000 } });
    try {
      const prefix = (f.hub as unknown as { parts: RedisHub[] }).parts[0].keys.prefix;
      // Each partition's leader writes its own config and the groups' (read by the open script).
      assert.deepEqual(await inspect((r) => r.hgetall(`${prefix}config`)), { maxPerDevice: '7', maxAgeMs: '3600000' });
      assert.deepEqual(await inspect((r) => r.hgetall(`${prefix}p1:config`)), { maxPerDevice: '7', maxAgeMs: '3600000' });
    } finally {
      await f.dispose();
    }
  });

  it('a restarted matcher rebuilds the same state from Redis', async () => {
    const d = await deployment();
    try {
      const [hub] = d.hubs;
      for (const dev of ['m1', 'm2', 'm3']) await addPing(hub, dev);
      await hub.addSubscription('m1', sub('near', anchored(300, eq('k', 'v'))));
      await hub.addSubscription('m2', sub('gone', anywhere(eq('k', 'v'))));
      await hub.addSubscription('m3', sub('far', anchored(300, eq('k', 'v'))));
      await hub.updateLocations([
        { device: 'm1', lat: P.lat, lon: P.lon },
        { device: 'm3', lat: Q.lat, lon: Q.lon },
      ]);
      await hub.removeSubscription('m2', 'gone');
      await hub.replaceSubscription('m3', sub('far', anchored(300, eq('k', 'w'))));
      const w = hub.locationWriter('m3');
      w.update(north(P, 100).lat, P.lon);
      await w.close();
      const before = await hub.publish([event({ k: 'v' }, P), event({ k: 'w' }, P)]);
      assert.deepEqual(before.map((r) => r.reached), [1, 1]);
      const s0 = await d.matcher.core.stats();
      await d.matcher.stop();
      // The stream is trimmed away entirely: the new matcher must rebuild from the snapshot alone.
      await inspect((r) => r.del(`${d.prefix}in`));
      const m = await d.restartMatcher();
      assert.equal(m.core.subscriptions, 5);
      assert.equal(m.core.stats().filters, s0.filters);
      assert.equal(m.devices, 2);
      assert.deepEqual((await hub.deviceInfo('m3')).location, north(P, 100));
      const after = await hub.publish([event({ k: 'v' }, P), event({ k: 'w' }, P)]);
      assert.deepEqual(after.map((r) => r.reached), [1, 1]);
      const inbox = await hub.openInbox('m3', null);
      const got = await drain(hub, inbox, 'm3');
      assert.deepEqual(got.map((g) => g.subscriptionIds), [['far'], ['far']]);
      inbox.close();
    } finally {
      await d.close();
    }
  });

  it('a replayed publish does not reach a subscription created after it', async () => {
    const d = await deployment();
    try {
      const [hub] = d.hubs;
      await addPing(hub, 'rio');
      await d.matcher.stop();
      const e = event({ x: 1 });
      const queued = hub.publish([e]); // no matcher: waits in the stream
      await hub.addSubscription('rio', sub('late', anywhere({ name: 'x', op: 'exists' })));
      await d.restartMatcher();
      assert.deepEqual(await queued, [{ eventId: e.id, reached: 0 }]);
      const inbox = await hub.openInbox('rio', null);
      assert.deepEqual(await drain(hub, inbox, 'rio'), []);
      const e2 = event({ x: 2 });
      assert.deepEqual(await hub.publish([e2]), [{ eventId: e2.id, reached: 1 }]);
      inbox.close();
    } finally {
      await d.close();
    }
  });

  it('a gateway that dies without closing: the device resumes from its ack on another, nothing lost or repeated', async () => {
    const d = await deployment();
    try {
      const [a] = d.hubs;
      await addPing(a, 'kim');
      await a.addSubscription('kim', sub('all', anywhere({ name: 'i', op: 'exists' })));
      await a.publish([1, 2, 3, 4, 5].map((i) => event({ i })));
      const box = await a.openInbox('kim', null);
      const seen = await pullN(box, 5);
      await box.ack(seen[2].deliveryId);
      const pendingPull = box.pull(10);
      a.crash();
      assert.deepEqual(await pendingPull, []);
      const b = await d.newHub();
      await b.publish([6, 7].map((i) => event({ i })));
      const resumed = await b.openInbox('kim', null);
      assert.equal(resumed.resumeToken, seen[2].deliveryId);
      assert.equal(resumed.missed, 0);
      const rest = await drain(b, resumed, 'kim');
      assert.deepEqual(rest.map((r) => r.event.attributes.i), [4, 5, 6, 7]);
      resumed.close();
    } finally {
      await d.close();
    }
  });

  it('a matcher killed mid-batch: after a restart pending publishes are delivered, none twice', async () => {
    const prefix = freshPrefix();
    let crashed: Promise<void> | null = null;
    let armed = false;
    let died!: (crash: Promise<void>) => void;
    const crash = new Promise<Promise<void>>((resolve) => (died = resolve));
    let m: RedisMatcher | null = null;
    m = await RedisMatcher.start(
      matcherOptions(prefix, {
        hooks: {
          afterDeliver() {
            // Notifications stored, offset not yet written: die here once.
            if (armed && crashed === null) {
              crashed = m!.crash();
              died(crashed);
            }
          },
        },
      }),
    );
    const hub = await RedisHub.connect(hubOptions(prefix, { publishTimeoutMs: 3000 }));
    let m2: RedisMatcher | null = null;
    try {
      await hub.addSubscription('lou', sub('all', anywhere({ name: 'i', op: 'exists' })));
      await hub.addSubscription('max', sub('odd', anywhere(eq('odd', true))));
      await hub.publish([event({ i: 0, odd: false })]);
      armed = true;
      // Its notifications are stored, then the matcher dies before the offset and the reply.
      const first = hub.publish([1, 2, 3].map((i) => event({ i, odd: i % 2 === 1 })));
      await (await crash);
      // Published while no matcher runs: queued in the stream.
      const second = hub.publish([4, 5].map((i) => event({ i, odd: i % 2 === 1 })));
      m2 = await RedisMatcher.start(matcherOptions(prefix));
      // The replay answers the first publish again (its notifications deduplicated) and matches the second.
      assert.deepEqual((await first).map((r) => r.reached), [2, 1, 2]);
      assert.deepEqual((await second).map((r) => r.reached), [1, 2]);
      const lou = await hub.openInbox('lou', null);
      const got = await pullN(lou, 6);
      assert.deepEqual(got.map((g) => g.event.attributes.i), [0, 1, 2, 3, 4, 5]);
      assert.deepEqual(got.map((g) => g.deliveryId.split('-')[1]), ['1', '2', '3', '4', '5', '6']);
      // Nothing after them: a replay of the whole stream adds nothing either.
      await m2.stop();
      await inspect((r) => r.set(`${prefix}matcher:offset`, '0-0'));
      const lastIn = await inspect(async (r) => (await r.xrevrange(`${prefix}in`, '+', '-', 'COUNT', 1))[0][0]);
      let replayed!: () => void;
      const caughtUp = new Promise<void>((resolve) => (replayed = resolve));
      const check = () => {
        if (m2 !== null && compareStreamIds(m2.offset, lastIn) >= 0) replayed();
      };
      m2 = await RedisMatcher.start(matcherOptions(prefix, { hooks: { onBatch: check } }));
      check(); // in case its batches ran before m2 was set
      await caughtUp;
      assert.equal(await inspect((r) => r.xlen(`${prefix}n:lou`)), 6);
      assert.equal(await inspect((r) => r.xlen(`${prefix}n:max`)), 3);
      const s = await hub.stats();
      assert.equal(s.notifications, 9);
      lou.close();
    } finally {
      await hub.close();
      await m2?.stop();
      if (crashed === null) await m.stop();
    }
  });

  it('the deliver script stores an event once per device: a replay that reaches some recipients again stores it only for the others', async () => {
    const k = new Keys(freshPrefix());
    await inspect(async (r) => {
      defineScripts(r);
      const ms = Date.now();
      const deliver = (devices: string[], index = 0) =>
        runScript(r, 'ambitDeliver', 5 + 2 * devices.length, k.groups[0].dstate, k.stats, k.groups[0].nseq, k.groups[0].nlast, ...devices.map((d) => k.notes(d)), ...devices.map((d) => k.groups[0].born(d)), k.matcherEpoch, 100, 3_600_000, k.groups[0].wakePrefix, '', 1, `${ms}-0`, index, ms, '{"id":"e"}', ...devices.flatMap((d) => [d, 1, `["s-${d}"]`]), '');
      assert.equal(await deliver(['ann']), 1, 'stored for ann');
      assert.equal(await deliver(['ann', 'ben']), 1, 'the replay stores it for ben only');
      assert.equal(await deliver(['ann', 'ben']), 0, 'a second replay stores nothing');
      assert.equal(await deliver(['ann', 'ben'], 1), 2, 'the next event of the same entry reaches both');
      assert.equal(await r.xlen(k.notes('ann')), 2);
      assert.equal(await r.xlen(k.notes('ben')), 2);
      const [[id, fields]] = await r.xrange(k.notes('ben'), '-', '+', 'COUNT', 1);
      assert.equal(id, `${ms}-1`);
      assert.deepEqual(fields, ['r', `${ms}-0:0`, 's', '["s-ben"]', 'p', String(ms)], 'the entry names its event, stored once by the matcher');
      assert.equal(await r.hget(k.stats, 'notifications'), '4');
    });
  });

  it('a device that never reads: the gateway holds nothing, Redis keeps maxPerDevice and counts the rest', async () => {
    const d = await deployment(1, { maxPerDevice: 50 });
    try {
      const [hub] = d.hubs;
      await hub.addSubscription('slow', sub('all', anywhere()));
      const inbox = await hub.openInbox('slow', null); // open, never pulled
      v8.setFlagsFromString('--expose-gc');
      const gc = runInNewContext('gc') as () => void;
      gc();
      const heap0 = process.memoryUsage().heapUsed;
      const payload = 'x'.repeat(1000);
      const total = 3000;
      for (let i = 0; i < total; i += 100) {
        const res = await hub.publish(Array.from({ length: 100 }, (_, j) => event({ i: i + j, payload })));
        assert.ok(res.every((r) => r.reached === 1));
      }
      gc();
      const grown = process.memoryUsage().heapUsed - heap0;
      // 3000 notifications of 1 KB would be 3 MB if the gateway kept them.
      assert.ok(grown < 1.5e6, `gateway heap grew by ${grown} bytes`);
      assert.equal(await inspect((r) => r.xlen(`${d.prefix}n:slow`)), 50);
      const s = await hub.stats();
      assert.equal(s.notifications, total);
      assert.equal(s.notificationsDropped, total - 50);
      inbox.close();
      const late = await hub.openInbox('slow', null);
      assert.equal(late.missed, total - 50);
      const first = await late.pull(1);
      assert.equal(first[0].event.attributes.i, total - 50);
      late.close();
    } finally {
      await d.close();
    }
  });

  it('two gateways share one matcher: a device on one is reached by a publisher on the other', async () => {
    const d = await deployment(2);
    try {
      const [a, b] = d.hubs;
      await a.addSubscription('ned', sub('near', anchored(200, eq('kind', 'food'))));
      const w = a.locationWriter('ned');
      w.update(P.lat, P.lon);
      await w.close();
      const inbox = await a.openInbox('ned', null);
      const pending = inbox.pull(10);
      const e = event({ kind: 'food' }, north(P, 100));
      assert.deepEqual(await b.publish([e]), [{ eventId: e.id, reached: 1 }]);
      const got = await pending;
      assert.deepEqual(got.map((g) => [g.event.id, g.subscriptionIds]), [[e.id, ['near']]]);
      // b sees a's subscription and position.
      assert.deepEqual(await b.deviceInfo('ned'), { subscriptions: [sub('near', anchored(200, eq('kind', 'food')))], location: P });
      inbox.close();
    } finally {
      await d.close();
    }
  });

  it('a publish with no matcher running fails DEADLINE_EXCEEDED, outcome queued, and is matched once one starts; its retry is a duplicate', async () => {
    const prefix = freshPrefix();
    const hub = await RedisHub.connect(hubOptions(prefix, { publishTimeoutMs: 200 }));
    let m: RedisMatcher | null = null;
    try {
      await hub.addSubscription('olga', sub('all', anywhere()));
      const e = event({});
      await assert.rejects(hub.publish([e]), (err: unknown) => err instanceof PublishError && err.code === 'DEADLINE_EXCEEDED' && err.outcome === 'queued');
      const s = await hub.stats();
      assert.equal(s.engine, 'none');
      assert.equal(s.extra.matcherAlive, false);
      m = await RedisMatcher.start(matcherOptions(prefix));
      const inbox = await hub.openInbox('olga', null);
      const [got] = await inbox.pull(1);
      assert.equal(got.event.id, e.id);
      // The publisher retries the same event: it was stored before, so nothing is delivered again.
      assert.deepEqual(await hub.publish([e]), [{ eventId: e.id, reached: 1, duplicate: true }]);
      const marker = event({});
      assert.deepEqual(await hub.publish([marker]), [{ eventId: marker.id, reached: 1 }]);
      const [next] = await inbox.pull(1);
      assert.equal(next.event.id, marker.id, 'the retry added nothing before the next event');
      assert.equal((await hub.stats()).extra.duplicateEvents, 1);
      // The id is kept in Redis for the dedupe window (5 minutes by default), then forgotten.
      const ttl = await inspect((r) => r.pttl(`${prefix}eid:${e.id}`));
      assert.ok(ttl > 0 && ttl <= 300_000, `the id's key expires within the window: ${ttl} ms`);
      inbox.close();
    } finally {
      await hub.close();
      await m?.stop();
    }
  });

  it('drops notifications older than maxAgeMs, on delivery and on open, and counts them', async () => {
    // One injected clock for the matcher (it stamps and ages deliveries) and the gateway (opening ages).
    const clock = { ms: Date.now() };
    const now = () => clock.ms;
    const maxAgeMs = 60_000;
    const d = await deployment(1, { maxAgeMs }, { now }, { now });
    try {
      const [hub] = d.hubs;
      await hub.addSubscription('pia', sub('all', anywhere()));
      await hub.publish([1, 2, 3].map((i) => event({ i })));
      assert.ok((await inspect((r) => r.pttl(`${d.prefix}n:pia`))) > 0, 'the stream expires with its retention');
      clock.ms += maxAgeMs + 1;
      await hub.publish([event({ i: 4 })]); // trims the three older ones as it is stored
      assert.equal(await inspect((r) => r.xlen(`${d.prefix}n:pia`)), 1, 'storing the fourth trimmed the three older ones');
      let box = await hub.openInbox('pia', null);
      assert.equal(box.missed, 3);
      assert.deepEqual((await box.pull(10)).map((x) => x.event.attributes.i), [4]);
      box.close();
      clock.ms += maxAgeMs + 1;
      box = await hub.openInbox('pia', null); // nothing delivered since: opening trims
      assert.equal(box.missed, 4);
      box.close();
      assert.equal((await hub.stats()).notificationsDropped, 4);
    } finally {
      await d.close();
    }
  });

  it('a hub whose Redis is gone answers UNAVAILABLE', async () => {
    const own = await startRedisServer();
    // Reconnect attempts 20 ms apart: the caller's 3 attempts end quickly.
    const hub = await RedisHub.connect({ redis: { host: '127.0.0.1', port: own.port, retryStrategy: () => 20 }, prefix: freshPrefix() });
    try {
      await hub.addSubscription('quin', sub('a', anywhere()));
      await own.stop();
      await rejectsWith(hub.addSubscription('quin', sub('b', anywhere())), 'UNAVAILABLE', 'subscribe without Redis');
      await rejectsWith(hub.publish([event({})]), 'UNAVAILABLE', 'publish without Redis');
    } finally {
      hub.crash();
      await own.stop();
    }
  });

  it('location writers coalesce per device and keep the order with later subscription changes and publishes', async () => {
    const d = await deployment(1, undefined, { flushMs: 50 });
    try {
      const [hub] = d.hubs;
      const n = 2000;
      const writers = Array.from({ length: n }, (_, i) => hub.locationWriter(`dev${i}`));
      for (let round = 0; round < 5; round++) for (let i = 0; i < n; i++) writers[i].update(P.lat + round * 0.001 + i * 1e-6, P.lon);
      // Not yet flushed (50 ms): a subscription and a publish must still see the final positions.
      await hub.addSubscription('dev7', sub('here', anchored(50)));
      const at = { lat: P.lat + 4 * 0.001 + 7e-6, lon: P.lon };
      const e = event({}, at);
      assert.deepEqual(await hub.publish([e]), [{ eventId: e.id, reached: 1 }]);
      await writers[0].close(); // flushes every writer of the hub
      for (const i of [0, 7, n - 1]) assert.deepEqual((await hub.deviceInfo(`dev${i}`)).location, { lat: P.lat + 4 * 0.001 + i * 1e-6, lon: P.lon });
      assert.equal(d.matcher.devices, n);
      const s = await hub.stats();
      assert.ok(s.locationUpdates >= n && s.locationUpdates <= 5 * n, `coalesced: ${s.locationUpdates} of ${5 * n} updates sent`);
      assert.equal(d.matcher.locationsApplied, s.locationUpdates);
    } finally {
      await d.close();
    }
  });
});

describe('redis: Redis itself goes away', { skip: missing ?? false }, () => {
  it('the matcher still stops (SIGTERM does not hang on a dead Redis), and a hub writing locations to a paused Redis keeps its flushes bounded', async () => {
    const own = await startRedisServer();
    try {
      const prefix = freshPrefix();
      const hub = await RedisHub.connect({ redis: own.url, prefix, flushMs: 2, maxInFlightFlushes: 4, publishTimeoutMs: 1000 });
      // Paused Redis: timer-driven flushes must not pile up beyond maxInFlightFlushes.
      const admin = new Redis(own.url, { lazyConnect: true });
      await admin.connect();
      await admin.call('CLIENT', 'PAUSE', '800', 'ALL');
      const writers = Array.from({ length: 200 }, (_, i) => hub.locationWriter(`w${i}`));
      // 60 rounds of moves, each followed by a turn in which the 2 ms flush timer can fire (the
      // pause outlasts them): at no point more than 4 flushes in flight.
      const inFlight = () => (hub as unknown as { batcher: { inFlight: Set<unknown> } }).batcher.inFlight.size;
      let most = 0;
      for (let round = 0; round < 60; round++) {
        for (const w of writers) w.update(45 + Math.random() / 100, 9 + Math.random() / 100);
        await new Promise((r) => setTimeout(r, 5));
        most = Math.max(most, inFlight());
      }
      assert.ok(most <= 4, `flushes in flight ${most} <= 4`);
      await admin.quit();
      await hub.close();

      const matcher = await RedisMatcher.start({ redis: own.url, prefix, engine: CPU_ENGINES.fast({ limits: ENGINE_SIDE_LIMITS }), engineDetail: 'fast (test)', statsMs: 100 });
      await own.stop();
      // Does not hang: a failure timeout, not a timing assertion.
      await within(matcher.stop(), 20_000, 'the matcher stops with its Redis gone');
    } finally {
      await own.stop();
    }
  });
});
