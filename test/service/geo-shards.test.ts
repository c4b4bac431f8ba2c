/**
 * Sharding by space on a real redis-server: the hub contract over geographic shards and wide
 * shards, then devices that cross shard borders while events are published, against the
 * reference engine.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { RedisHub } from '../../services/hub/redis.js';
import { PublishError } from '../../src/model/errors.js';
import { RedisMatcher } from '../../services/matcher/redis.js';
import { type GeoSpec, Keys } from '../../services/redis/keys.js';
import { ShardMap } from '../../services/matcher/shard-map.js';
import { compareStreamIds } from '../../services/redis/codec.js';
import { runHubContract } from '../support/hub-contract.js';
import { forcedHandOver, milanStripes, refusedHandOver, stuckSourceHandOvers, twoWindowsHandOver } from '../support/forced-handover.js';
import { runGeoWorld } from '../support/geo-world.js';
import { redisTestKit, useRedisServer } from '../support/redis-deployment.js';

const { missing, url } = useRedisServer();
const kit = redisTestKit(url);
const { freshPrefix, matcherOptions, hubOptions, geoFixture, geoDeployment, inspect } = kit;

/** Stripes of 0.004° (about 310 m at Milan) over 3 shards: walkers cross a border every few steps. */
const STRIPES: GeoSpec = { shards: 3, wide: 1, cellDeg: 0.004, guardM: 60, layout: 'stripes' };

describe('sharded by space', { skip: missing ?? false, timeout: 60_000 }, () => {
  // Milan's centre sits on stripes 0.01° wide: the contract's moves cross shard borders.
  runHubContract('redis, 3 geographic shards (0.01° stripes) + 1 wide shard', geoFixture({ shards: 3, wide: 1, cellDeg: 0.01, guardM: 200, layout: 'stripes' }));
  runHubContract('redis, 2 geographic shards (sectors) + 2 wide shards', geoFixture({ shards: 2, wide: 2, cellDeg: 1, guardM: 1000, layout: 'sectors' }));

  it('devices walking across shard borders get exactly what one matcher holding everything gives (reference engine as oracle), through two gateways', async () => {
    const d = await geoDeployment(STRIPES, 2);
    try {
      const r = await runGeoWorld(d.hubs, { seed: 11, devices: 24, rounds: 30, eventsPerRound: 4 });
      assert.ok(r.notifications > 100, `the world delivers (${r.notifications} notifications)`);
      assert.ok(r.wideDevices > 0, 'some devices took a wide subscription');
      const acq = await d.handOvers();
      assert.ok(acq.slice(0, STRIPES.shards).every((n) => n > 5), `every geographic shard took devices over (${acq.join(', ')})`);
      assert.ok(acq[STRIPES.shards] > 0, `the wide shard took devices over (${acq.join(', ')})`);
    } finally {
      await d.close();
    }
  });

  it('with coarse cells and small radii a publish visits a shard or two: devices near borders still get exactly what the reference engine gives', async () => {
    const geo: GeoSpec = { ...STRIPES, cellDeg: 0.01, guardM: 20 };
    const d = await geoDeployment(geo, 2);
    try {
      const r = await runGeoWorld(d.hubs, { seed: 17, devices: 30, rounds: 30, eventsPerRound: 4, maxRadiusM: 200 });
      assert.ok(r.notifications > 30, `the world delivers (${r.notifications})`);
      const acq = await d.handOvers();
      assert.ok(acq.slice(0, geo.shards).every((n) => n > 3), `every geographic shard took devices over (${acq.join(', ')})`);
    } finally {
      await d.close();
    }
  });

  it('hand-overs of many devices at once, and of a device with a thousand subscriptions, arrive whole', async () => {
    const d = await geoDeployment(STRIPES, 1);
    try {
      const [hub] = d.hubs;
      const j = Math.floor((9.19 + 180) / STRIPES.cellDeg);
      const lonOf = (col: number) => (col + 0.5) * STRIPES.cellDeg - 180;
      const everywhere = { id: 's', filters: [{ constraints: [], area: { radiusM: 50 } }] };
      // 1100 devices subscribe before any position, then all arrive in one call: 1100 acquisitions.
      const devs = Array.from({ length: 1100 }, (_, i) => `crowd-${i}`);
      await Promise.all(devs.map((dev) => hub.addSubscription(dev, everywhere)));
      await hub.updateLocations(devs.map((dev) => ({ device: dev, lat: 45.4642, lon: lonOf(j) })));
      assert.equal((await hub.publish([{ id: 'crowd-1', lat: 45.4642, lon: lonOf(j), attributes: {} }]))[0].reached, 1100);
      // ... and all leave for the next column in one call.
      await hub.updateLocations(devs.map((dev) => ({ device: dev, lat: 45.4642, lon: lonOf(j + 1) })));
      assert.equal((await hub.publish([{ id: 'crowd-2', lat: 45.4642, lon: lonOf(j + 1), attributes: {} }]))[0].reached, 1100);
      assert.equal((await hub.publish([{ id: 'crowd-3', lat: 45.4642, lon: lonOf(j), attributes: {} }]))[0].reached, 0);
      // One device with the most subscriptions a device may hold crosses a border.
      const subs = Array.from({ length: 1000 }, (_, i) => ({ id: `s${i}`, filters: [{ constraints: [{ name: 'n', op: 'ge' as const, value: i }], area: { radiusM: 50 } }] }));
      await hub.updateLocations([{ device: 'many', lat: 45.4642, lon: lonOf(j + 3) }]);
      for (const sub of subs) await hub.addSubscription('many', sub);
      await hub.updateLocations([{ device: 'many', lat: 45.4642, lon: lonOf(j + 4) }]);
      assert.equal((await hub.publish([{ id: 'many-1', lat: 45.4642, lon: lonOf(j + 4), attributes: { n: 999 } }]))[0].reached, 1000);
      assert.equal((await hub.publish([{ id: 'many-2', lat: 45.4642, lon: lonOf(j + 4), attributes: { n: 499 } }]))[0].reached, 500);
    } finally {
      await d.close();
    }
  });

  it("a shard's leader trims its stream only below every shard's stored offset: a shard held back can still read the hand-overs it is owed", async () => {
    const j = Math.floor((9.19 + 180) / STRIPES.cellDeg);
    const col = (shard: number) => j + ((shard - (j % STRIPES.shards) + STRIPES.shards) % STRIPES.shards);
    const lonOf = (c: number) => (c + 0.5) * STRIPES.cellDeg - 180;
    let hold: Promise<void> | null = null;
    let release = () => {};
    let held = () => {};
    const belows: string[] = [];
    let kept = () => {};
    let batched = () => {};
    const d = await geoDeployment(STRIPES, 1, (k) => ({
      statsMs: 50,
      hooks: {
        onBatch: () => batched(),
        ...(k === 0
          ? {
              beforeRead: async () => {
                if (hold === null) return;
                held();
                await hold;
              },
            }
          : {}),
        ...(k === 1
          ? {
              onKeep: (t: { below: string }) => {
                belows.push(t.below);
                kept();
              },
            }
          : {}),
      },
    }));
    const nextKeep = () => new Promise<void>((resolve) => (kept = resolve));
    const caughtUp = async (m: RedisMatcher) => {
      const last = await d.inspectStream(m.keys.partition);
      while (compareStreamIds(m.position, last.last) < 0) await new Promise<void>((resolve) => (batched = resolve));
    };
    try {
      const [hub] = d.hubs;
      const near = { id: 's', filters: [{ constraints: [], area: { radiusM: 30 } }] };
      await hub.addSubscription('on0', near);
      await hub.addSubscription('on1', near);
      await hub.updateLocations([
        { device: 'on0', lat: 45.4642, lon: lonOf(col(0)) },
        { device: 'on1', lat: 45.4642, lon: lonOf(col(1)) },
      ]);
      await Promise.all([caughtUp(d.matchers[0]), caughtUp(d.matchers[1])]);
      const isHeld = new Promise<void>((resolve) => (held = resolve));
      hold = new Promise<void>((resolve) => (release = resolve));
      await hub.updateLocations([{ device: 'on0', lat: 45.4643, lon: lonOf(col(0)) }]); // wakes shard 0 into its hold
      await isHeld;
      // Shard 0 now has a command it has not read (a shard that has read all it has holds nothing back).
      await hub.updateLocations([{ device: 'on0', lat: 45.4644, lon: lonOf(col(0)) }]);
      for (let i = 0; i < 300; i++) await hub.updateLocations([{ device: 'on1', lat: 45.4642 + i * 1e-6, lon: lonOf(col(1)) }]);
      await caughtUp(d.matchers[1]);
      for (let i = 0; i < 3; i++) await nextKeep();
      // Shard 0 reads nothing while held: what it stored is final by now.
      const stored0 = d.matchers[0].offset;
      const s1 = await d.inspectStream(1);
      assert.ok(s1.length >= 300, `shard 1 keeps its entries after shard 0's stored offset ${stored0} (XLEN ${s1.length})`);
      assert.ok(belows.every((x) => x === '' || compareStreamIds(x, stored0) <= 0), `no trim of shard 1 went past shard 0's stored offset: ${belows.filter((x) => x !== '').join(' ')}`);
      assert.equal(d.matchers[1].streamHold.heldBy, d.keys(0).matcherOffset, "shard 1's leader knows shard 0's offset holds its stream");
      hold = null;
      release();
      await caughtUp(d.matchers[0]);
      while (!(belows.length > 0 && belows[belows.length - 1] !== '' && compareStreamIds(belows[belows.length - 1], stored0) > 0)) await nextKeep();
      assert.ok((await d.inspectStream(1)).length < 300, 'shard 1 trims once shard 0 has gone on');
      assert.equal((await hub.publish([{ id: 'after', lat: 45.4642 + 299e-6, lon: lonOf(col(1)), attributes: {} }]))[0].reached, 1);
    } finally {
      hold = null;
      release();
      await d.close();
    }
  });

  for (const how of ['its standby takes over', 'a new matcher rebuilds it from Redis'] as const) {
    it(`a shard leader killed after matching a publish, before storing it, while the device then leaves for another shard: ${how} and the replayed publish still reaches the device`, async () => {
      const geo: GeoSpec = { shards: 3, wide: 1, cellDeg: 0.004, guardM: 60, layout: 'stripes' };
      const j = Math.floor((9.19 + 180) / geo.cellDeg);
      const b = j % 3;
      const lonOf = (col: number) => (col + 0.5) * geo.cellDeg - 180;
      let armed = false;
      let matched!: () => void;
      const bMatched = new Promise<void>((resolve) => (matched = resolve));
      const leaders: RedisMatcher[] = [];
      const d = await geoDeployment(geo, 1, (k) =>
        k === b
          ? {
              leaseMs: 400,
              hooks: {
                onMatched: (m: { publishes: number }) => {
                  if (!armed || m.publishes === 0) return;
                  armed = false;
                  void leaders[b].crash(); // matched, nothing stored or answered
                  matched();
                },
              },
            }
          : {},
      );
      leaders.push(...d.matchers);
      const standby = how === 'its standby takes over' ? await RedisMatcher.start(matcherOptions(d.prefix, { geo, partition: b, leaseMs: 400 })) : null;
      let fresh: RedisMatcher | null = null;
      try {
        const [hub] = d.hubs;
        await hub.updateLocations([{ device: 'leaver', lat: 45.4642, lon: lonOf(j) }]);
        await hub.addSubscription('leaver', { id: 'near', filters: [{ constraints: [], area: { radiusM: 300 } }] });
        assert.equal(await inspect((r) => r.hget(`${d.prefix}home`, 'leaver')), String(b));
        armed = true;
        const p = hub.publish([{ id: 'while-here', lat: 45.4642, lon: lonOf(j), attributes: {} }]);
        p.catch(() => {}); // awaited below
        await bMatched;
        // After the publish in the order: the device leaves shard b (its rel is after the publish),
        // then, on its new shard, drops the subscription the publish matched and takes another.
        await hub.updateLocations([{ device: 'leaver', lat: 45.4642, lon: lonOf(j + 1) }]);
        assert.notEqual(await inspect((r) => r.hget(`${d.prefix}home`, 'leaver')), String(b));
        await hub.removeSubscription('leaver', 'near');
        await hub.addSubscription('leaver', { id: 'later', filters: [{ constraints: [], area: { radiusM: 5000 } }] });
        if (standby === null) fresh = await RedisMatcher.start(matcherOptions(d.prefix, { geo, partition: b }));
        else await standby.whenRole('leader');
        assert.equal((await p)[0].reached, 1, 'the replayed publish reaches the device, as one matcher holding everything would');
        const inbox = await hub.openInbox('leaver', '');
        const got = await inbox.pull(10);
        inbox.close();
        assert.deepEqual(got.map((n) => [n.event.id, n.subscriptionIds]), [['while-here', ['near']]], 'matched with the subscriptions the device had then');
      } finally {
        await standby?.stop();
        await fresh?.stop();
        await d.close();
      }
    });
  }

  it('event ids deduplicate across shards: a repeated id in one publish whose copies fall on different shards, and a retry that visits other shards than the first, are duplicates delivered nowhere', async () => {
    const d = await geoDeployment(STRIPES, 1);
    try {
      const [hub] = d.hubs;
      const j = Math.floor((9.19 + 180) / STRIPES.cellDeg);
      const lonOf = (col: number) => (col + 0.5) * STRIPES.cellDeg - 180;
      const near = { id: 'near', filters: [{ constraints: [], area: { radiusM: 50 } }] };
      await hub.updateLocations([
        { device: 'x', lat: 45.4642, lon: lonOf(j) },
        { device: 'y', lat: 45.4642, lon: lonOf(j + 3) },
      ]);
      await hub.addSubscription('x', near);
      await hub.addSubscription('y', near);
      const at = (col: number, id: string) => ({ id, lat: 45.4642, lon: lonOf(col), attributes: {} });
      assert.deepEqual(await hub.publish([at(j, 'same'), at(j + 3, 'same')]), [
        { eventId: 'same', reached: 1 },
        { eventId: 'same', reached: 1, duplicate: true },
      ]);
      // An event nobody is near yet; then a device comes near it; the retry is still a duplicate.
      assert.deepEqual(await hub.publish([at(j + 6, 'early')]), [{ eventId: 'early', reached: 0 }]);
      await hub.updateLocations([{ device: 'z', lat: 45.4642, lon: lonOf(j + 6) }]);
      await hub.addSubscription('z', near);
      assert.deepEqual(await hub.publish([at(j + 6, 'early')]), [{ eventId: 'early', reached: 0, duplicate: true }]);
      assert.deepEqual(await hub.publish([at(j + 6, 'later')]), [{ eventId: 'later', reached: 1 }]);
      const got = async (dev: string) => {
        const inbox = await hub.openInbox(dev, '');
        const ns = await inbox.pull(10);
        inbox.close();
        return ns.map((n) => n.event.id);
      };
      assert.deepEqual(await got('x'), ['same']);
      assert.deepEqual(await got('z'), ['later']);
      // y's only notification would be the duplicate: a marker shows nothing came before it.
      await hub.publish([at(j + 3, 'marker')]);
      assert.deepEqual(await got('y'), ['marker']);
      const s = await hub.stats();
      assert.equal(s.extra.duplicateEvents, 2);
      assert.equal(s.eventsPublished, 4);
      // Without a dedupe window, an id repeated within one publish is still a duplicate.
      const noWindow = await RedisHub.connect(hubOptions(d.prefix, { geo: STRIPES, dedupeWindowMs: 0 }));
      try {
        assert.deepEqual(await noWindow.publish([at(j, 'twice'), at(j + 3, 'twice')]), [
          { eventId: 'twice', reached: 1 },
          { eventId: 'twice', reached: 1, duplicate: true },
        ]);
        assert.deepEqual(await noWindow.publish([at(j, 'twice')]), [{ eventId: 'twice', reached: 1 }], 'without a window a later publish of the id is new');
      } finally {
        await noWindow.close();
      }
      await hub.publish([at(j + 3, 'marker-2')]);
      assert.deepEqual(await got('y'), ['marker', 'marker-2'], 'the repeated id reached nobody on its second place');
    } finally {
      await d.close();
    }
  });

  it('a publish that timed out while a shard was down, retried after the shard came back: a duplicate answered with the reach the shards recorded', async () => {
    const d = await geoDeployment(STRIPES, 1);
    const j = Math.floor((9.19 + 180) / STRIPES.cellDeg);
    const a = j % 3;
    const lonOf = (col: number) => (col + 0.5) * STRIPES.cellDeg - 180;
    const impatient = await RedisHub.connect(hubOptions(d.prefix, { geo: STRIPES, publishTimeoutMs: 300 }));
    let back: RedisMatcher | null = null;
    try {
      const [hub] = d.hubs;
      await hub.updateLocations([{ device: 'x', lat: 45.4642, lon: lonOf(j) }]);
      await hub.addSubscription('x', { id: 'near', filters: [{ constraints: [], area: { radiusM: 50 } }] });
      await d.matchers[a].stop();
      const ev = { id: 'lost', lat: 45.4642, lon: lonOf(j), attributes: {} };
      await assert.rejects(impatient.publish([ev]), (err: unknown) => err instanceof PublishError && err.outcome === 'queued');
      back = await RedisMatcher.start(matcherOptions(d.prefix, { geo: STRIPES, partition: a }));
      // Through the other gateway, which never saw the first publish: its retry is a duplicate
      // answered with the reach the shards record once the one that was down has matched it.
      assert.deepEqual(await hub.publish([ev]), [{ eventId: 'lost', reached: 1, duplicate: true }]);
      const inbox = await hub.openInbox('x', '');
      const got = await inbox.pull(10);
      inbox.close();
      assert.deepEqual(got.map((n) => n.event.id), ['lost']);
    } finally {
      await impatient.close();
      await back?.stop();
      await d.close();
    }
  });

  it('a shard applies a device it takes over only once the shard the device left has stored what it owed the device: a notification of that shard is never overtaken, nor lost', async () => {
    const geo: GeoSpec = { shards: 3, wide: 1, cellDeg: 0.004, guardM: 60, layout: 'stripes' };
    const prefix = freshPrefix();
    const hold: { release: () => void } = { release: () => {} };
    let heldA: Promise<void> = Promise.resolve();
    const waits: { entry: string; from: number[] }[] = [];
    let waiting!: () => void;
    const bWaits = new Promise<void>((resolve) => (waiting = resolve));
    // Milan's column of cells and the next: shards j mod 3 and j+1 mod 3.
    const j = Math.floor((9.19 + 180) / geo.cellDeg);
    const a = j % 3;
    const b = (j + 1) % 3;
    const lonOf = (col: number) => (col + 0.5) * geo.cellDeg - 180;
    let matchedA!: () => void;
    let matchedB!: () => void;
    const bMatched = new Promise<void>((resolve) => (matchedB = resolve));
    const aMatched = new Promise<void>((resolve) => (matchedA = resolve));
    const hooks = (k: number) =>
      k === a
        ? {
            beforeStore: () => heldA,
            onMatched: (m: { publishes: number }) => {
              if (m.publishes > 0) matchedA();
            },
          }
        : k === b
          ? {
              onHandOverWait: (w: { entry: string; from: number[] }) => {
                waits.push(w);
                waiting();
              },
              onMatched: (m: { publishes: number }) => {
                if (m.publishes > 0) matchedB();
              },
            }
          : {};
    const matchers = await Promise.all(Array.from({ length: 4 }, (_, k) => RedisMatcher.start(matcherOptions(prefix, { geo, partition: k, hooks: hooks(k) }))));
    const hub = await RedisHub.connect(hubOptions(prefix, { geo }));
    try {
      const dev = 'walker';
      await hub.updateLocations([{ device: dev, lat: 45.4642, lon: lonOf(j) }]);
      await hub.addSubscription(dev, { id: 'near', filters: [{ constraints: [], area: { radiusM: 100 } }] });
      await hub.updateLocations([{ device: dev, lat: 45.4642, lon: lonOf(j) }]); // homes it on shard a
      assert.equal(await inspect((r) => r.hget(`${prefix}home`, dev)), String(a));
      // Shard a holds its notifications back; the device moves to shard b; an event there.
      heldA = new Promise<void>((resolve) => (hold.release = resolve));
      const first = hub.publish([{ id: 'at-a', lat: 45.4642, lon: lonOf(j), attributes: {} }]);
      first.catch(() => {}); // awaited below
      await aMatched; // matched on shard a, its notification held back
      await hub.updateLocations([{ device: dev, lat: 45.4642, lon: lonOf(j + 1) }]);
      assert.equal(await inspect((r) => r.hget(`${prefix}home`, dev)), String(b));
      const second = hub.publish([{ id: 'at-b', lat: 45.4642, lon: lonOf(j + 1), attributes: {} }]);
      second.catch(() => {}); // awaited below
      const raced = await Promise.race([bWaits.then(() => 'waits' as const), bMatched.then(() => 'matched' as const)]);
      assert.equal(raced, 'waits', 'shard b waits for shard a before it applies the arrival');
      assert.deepEqual(waits.map((w) => w.from), [[a]]);
      hold.release();
      assert.equal((await first)[0].reached, 1);
      assert.equal((await second)[0].reached, 1);
      const inbox = await hub.openInbox(dev, '');
      const got = [...(await inbox.pull(10))];
      if (got.length < 2) got.push(...(await inbox.pull(10)));
      inbox.close();
      assert.deepEqual(got.map((n) => n.event.id), ['at-a', 'at-b'], 'both notifications, in publish order');
    } finally {
      hold.release();
      await hub.close();
      for (const m of matchers) await m.stop();
    }
  });

  it("a purge still queued on the shard the device was homed on when the device subscribes again on another: that shard's drop, when it comes, keeps what the other stored after the purge", async () => {
    const { geo, j, shardOf, lonOf } = milanStripes(STRIPES);
    const prefix = freshPrefix();
    const a = shardOf(j);
    const b = shardOf(j + 1);
    const dev = 'returner';
    const start = (k: number, hooks = {}) => RedisMatcher.start(matcherOptions(prefix, { geo, partition: k, hooks }));
    const matchers = await Promise.all([0, 1, 2, 3].map((k) => start(k)));
    const hub = await RedisHub.connect(hubOptions(prefix, { geo }));
    try {
      await hub.updateLocations([{ device: dev, lat: 45.4642, lon: lonOf(j) }]);
      await hub.addSubscription(dev, { id: 'near', filters: [{ constraints: [], area: { radiusM: 10 } }] });
      await hub.updateLocations([{ device: dev, lat: 45.4642, lon: lonOf(j) }]); // homes it on shard a
      assert.equal(await inspect((r) => r.hget(`${prefix}home`, dev)), String(a));
      assert.equal((await hub.publish([{ id: 'before', lat: 45.4642, lon: lonOf(j), attributes: {} }]))[0].reached, 1);
      // Shard a stops; the purge waits in its stream. The device comes back on shard b.
      await matchers[a].stop();
      await hub.purgeDevice(dev);
      await hub.updateLocations([{ device: dev, lat: 45.4642, lon: lonOf(j + 1) }]);
      await hub.addSubscription(dev, { id: 'near', filters: [{ constraints: [], area: { radiusM: 10 } }] });
      assert.equal(await inspect((r) => r.hget(`${prefix}home`, dev)), String(b));
      assert.equal((await hub.publish([{ id: 'after', lat: 45.4642, lon: lonOf(j + 1), attributes: {} }]))[0].reached, 1);
      // Shard a runs again and applies the purge: the drop of what it stored before.
      let dropped!: () => void;
      const aDropped = new Promise<void>((resolve) => (dropped = resolve));
      const born = new Keys(prefix).groups[0].born(dev);
      matchers[a] = await start(a, { afterDeliver: async () => (await inspect((r) => r.exists(born))) === 1 && dropped() });
      await aDropped;
      assert.equal(await inspect((r) => r.xlen(new Keys(prefix).notes(dev))), 1, "shard b's notification is still stored");
      const inbox = await hub.openInbox(dev, '');
      const got = await inbox.pull(10);
      inbox.close();
      assert.deepEqual(got.map((n) => n.event.id), ['after'], "the notification from before the purge went; shard b's, after it, stayed");
    } finally {
      await hub.close();
      for (const m of matchers) await m.stop();
    }
  });

  it('a device leaving a shard that has no leader: the shard it arrives on applies it after the wait bound, the device gets its events there, and once the shard left behind runs again what it owed the device too, nothing twice', async () => {
    await forcedHandOver(kit, STRIPES);
  });

  it('the leader that opened an owed window dies before closing it: the next leader of its shard closes it', async () => {
    await forcedHandOver(kit, STRIPES, { leaderDies: true });
  });

  it('a device that holds the most owed windows (one, here) leaves a shard with no leader: the shard it arrives on does not apply it past the bound, counts the refusal and applies it once that shard runs again', async () => {
    await refusedHandOver(kit, STRIPES);
  });

  it('a device leaves two shards with no leader in a row: the second hand-over opens a second owed window, and each shard left behind stores what it owed, once', async () => {
    await twoWindowsHandOver(kit, STRIPES);
  });

  it('a shard given up on once is not waited for again while it has stored nothing since: a later hand-over from it is applied at once, and once it stores, the bound holds again', async () => {
    await stuckSourceHandOvers(kit, STRIPES);
  });

  it('a shard leader killed right after it matched a publish: its standby takes over and replays; every reach and notification is still exact', async () => {
    const crashed: number[] = [];
    let matched = [0, 0, 0, 0];
    const crashAt = new Map([
      [0, 8],
      [3, 15],
    ]);
    const leaders: RedisMatcher[] = [];
    const d = await geoDeployment(STRIPES, 2, (k) => ({
      leaseMs: 400,
      hooks: {
        onMatched: (m: { publishes: number }) => {
          if (m.publishes === 0 || !crashAt.has(k)) return;
          matched[k]++;
          if (matched[k] === crashAt.get(k)) {
            crashed.push(k);
            void leaders[k].crash(); // before its notifications and answers are stored
          }
        },
      },
    }));
    leaders.push(...d.matchers);
    const standbys = await Promise.all(d.matchers.map((_, k) => RedisMatcher.start(matcherOptions(d.prefix, { geo: STRIPES, partition: k, leaseMs: 400 }))));
    try {
      assert.deepEqual(standbys.map((m) => m.role), ['standby', 'standby', 'standby', 'standby']);
      const r = await runGeoWorld(d.hubs, { seed: 23, devices: 24, rounds: 24, eventsPerRound: 4 });
      assert.deepEqual(crashed.sort(), [0, 3], 'a geographic shard and the wide shard lost their leaders mid-publish');
      assert.equal(standbys[0].role, 'leader');
      assert.equal(standbys[3].role, 'leader');
      assert.ok(r.notifications > 100);
    } finally {
      matched = [-1e9, -1e9, -1e9, -1e9];
      for (const m of standbys) await m.stop();
      await d.close();
    }
  });

  it('cells move between shards while devices walk and publishes flow (two gateways, one of them with the old map): every reach and notification stays exact, and the map version shows', async () => {
    // Columns of 0.01° (780 m) and radii up to 200 m: a publish visits a shard or two, so where a
    // device is homed matters to every publish near it.
    const geo: GeoSpec = { ...STRIPES, cellDeg: 0.01 };
    const d = await geoDeployment(geo, 2);
    try {
      const [a, b] = d.hubs;
      const map = new ShardMap({ version: 0, shards: 3, cellDeg: geo.cellDeg, guardM: geo.guardM, layout: 'stripes' });
      // The columns and rows around Milan's centre, each column given to the next shard.
      const moves: { row: number; col: number; shard: number }[] = [];
      const c0 = map.col(9.19);
      const r0 = map.row(45.4642);
      for (let col = c0 - 1; col <= c0 + 1; col++) for (let row = r0 - 2; row <= r0 + 2; row++) moves.push({ row, col, shard: (map.shardOfCell(row, col) + 1) % 3 });
      let moving: Promise<{ version: number; devicesMoved: number }> | null = null;
      // The new map is stored at round 8; devices are handed over only from round 11 on, so rounds
      // 8-10 publish while devices are homed by the old map and placed by the new one.
      let handOver!: () => void;
      const held = new Promise<void>((resolve) => (handOver = resolve));
      const r = await runGeoWorld(d.hubs, {
        seed: 31,
        devices: 24,
        rounds: 24,
        eventsPerRound: 4,
        maxRadiusM: 200,
        standStillFrom: 6, // a third of the devices stay where the old map homed them: the move hands them over
        onRound: async (round) => {
          if (round === 8) moving = a.moveCells(moves, () => held); // not awaited: the rounds go on meanwhile
          if (round === 9) assert.equal((await b.stats()).extra.shardMapMoving, true, 'a move is under way');
          if (round === 11) handOver();
          if (round === 12) {
            const done = await moving!;
            assert.equal(done.version, 1);
            assert.ok(done.devicesMoved > 0, `devices were handed over (${done.devicesMoved})`);
          }
        },
      });
      assert.ok(r.notifications > 100);
      const s = await b.stats();
      assert.equal(s.extra.shardMapVersion, 1, 'the other gateway took the new map');
      assert.equal(s.extra.shardMapMoving, false);
      // Every homed device is where the new map keeps it.
      const moved = new ShardMap({ version: 1, shards: 3, cellDeg: geo.cellDeg, guardM: geo.guardM, layout: 'stripes', cells: Object.fromEntries(moves.map((m) => [`${m.row},${m.col}`, m.shard])) });
      const homes = await inspect((r) => r.hgetall(`${d.prefix}home`));
      const at = await inspect((r) => r.hgetallBuffer(`${d.prefix}pos`));
      let checked = 0;
      for (const [dev, home] of Object.entries(homes)) {
        const p = at[dev];
        if (Number(home) >= geo.shards || p === undefined) continue;
        assert.ok(moved.staysAt(Number(home), p.readDoubleLE(0), p.readDoubleLE(8)), `${dev} is homed on shard ${home}, where the new map keeps it`);
        checked++;
      }
      assert.ok(checked > 10);
      await assert.rejects(a.moveCells([{ row: 0, col: moved.cols, shard: 0 }]), /moves\[0\]\.col: must be an integer in \[0, /);
      await assert.rejects(a.moveCells([{ row: 0, col: 0, shard: 3 }]), /moves\[0\]\.shard: must be an integer in \[0, 2\]/);
      await assert.rejects(a.moveCells([]), /moves: must name at least one cell/);
    } finally {
      await d.close();
    }
  });
  it('fitting the shard map to load: planCells counts the devices homed on each geographic shard by cell and proposes moves that even them out; moved, the shards hold what the plan said, and a plan of an even map moves nothing', async () => {
    // Two sectors of 1° cells (west and east of Greenwich): every device starts on shard 1.
    const geo: GeoSpec = { shards: 2, wide: 1, cellDeg: 1, guardM: 100, layout: 'sectors' };
    const d = await geoDeployment(geo, 1);
    try {
      const hub = d.hubs[0];
      const map = new ShardMap({ version: 0, ...geo });
      // 3 cells of shard 1 with 12, 8 and 4 devices; a device with only a wide subscription is not counted.
      const cells = [{ lat: 45.5, lon: 9.5, n: 12 }, { lat: 45.5, lon: 10.5, n: 8 }, { lat: 46.5, lon: 9.5, n: 4 }];
      const updates: { device: string; lat: number; lon: number }[] = [];
      for (const [c, cell] of cells.entries()) {
        for (let k = 0; k < cell.n; k++) {
          const device = `c${c}-${k}`;
          await hub.addSubscription(device, { id: 's', filters: [{ constraints: [], area: { radiusM: 100 } }] });
          updates.push({ device, lat: cell.lat, lon: cell.lon });
        }
      }
      await hub.addSubscription('wide', { id: 'w', filters: [{ constraints: [] }] });
      updates.push({ device: 'wide', lat: 45.5, lon: 9.5 });
      await hub.updateLocations(updates);
      assert.deepEqual(cells.map((c) => map.shardOf(c.lat, c.lon)), [1, 1, 1]);
      const plan = await hub.planCells(10);
      assert.deepEqual(plan.before, [0, 24]);
      // The 12-device cell alone evens them out best (12 / 12).
      assert.deepEqual(plan.moves, [{ row: map.row(45.5), col: map.col(9.5), shard: 0 }]);
      assert.deepEqual(plan.after, [12, 12]);
      const moved = await hub.moveCells(plan.moves);
      assert.equal(moved.devicesMoved, 12, 'the devices homed there; the wide device lives on its wide shard');
      // Each shard's leader holds what the plan said (a publish to every shard waits for them).
      await hub.publish([{ id: 'probe', lat: 0, lon: 0, attributes: {} }]);
      assert.deepEqual([d.matchers[0].devices, d.matchers[1].devices], [12, 12]);
      assert.deepEqual((await hub.planCells(10)).moves, [], 'even now');
      await assert.rejects(hub.planCells(100_001), /max_moves: must be an integer in \[0, 100000\]/);
    } finally {
      await d.close();
    }
  });
  it("an event's record takes a shard's reach only from the publish that made it: an answer that comes after the record lapsed and a later publish of the id made a new one adds nothing to the new one", async () => {
    const geo: GeoSpec = { shards: 2, wide: 1, cellDeg: 0.01, guardM: 50, layout: 'stripes' };
    const at = { lat: 45.46, lon: 9.195 };
    const A = new ShardMap({ version: 0, ...geo }).shardOf(at.lat, at.lon);
    // Shard A's stores wait, one batch per hold, while holds are queued.
    const holds: { reached: () => void; gate: Promise<void> }[] = [];
    const hold = () => {
      let release!: () => void;
      let reached!: () => void;
      const atHold = new Promise<void>((resolve) => (reached = resolve));
      holds.push({ reached, gate: new Promise<void>((resolve) => (release = resolve)) });
      return { release, atHold };
    };
    const hooks = {
      beforeStore: () => {
        const h = holds.shift();
        if (h === undefined) return;
        h.reached();
        return h.gate;
      },
    };
    const d = await geoDeployment(geo, 1, (k) => (k === A ? { hooks } : {}));
    try {
      const hub = d.hubs[0];
      const ev = (id: string) => ({ id, lat: at.lat, lon: at.lon, attributes: { k: 1 } });
      await hub.addSubscription('p', { id: 's', filters: [{ constraints: [{ name: 'k', op: 'eq', value: 1 }], area: { radiusM: 300 } }] });
      await hub.updateLocations([{ device: 'p', ...at }]);
      assert.deepEqual((await hub.publish([ev('probe')])).map((r) => r.reached), [1], 'shard A holds the device');
      const record = d.keys(A).geoEventId('x');
      const h1 = hold();
      const first = hub.publish([ev('x')]);
      first.catch(() => {}); // awaited below; a failure before then must not go unhandled
      await h1.atHold; // shard A matched it; its store and answer wait
      // The record lapses (as the window would have it), and a later publish of the id is new.
      await inspect((r) => r.del(record));
      const h2 = hold();
      const second = hub.publish([ev('x')]);
      second.catch(() => {});
      h1.release();
      assert.deepEqual((await first).map((r) => [r.reached, r.duplicate === true]), [[1, false]], 'the first publish answered, late');
      await h2.atHold;
      const fields = await inspect((r) => r.hgetall(record));
      assert.equal(fields[`s${A}`], undefined, `shard A has not answered the second publish yet: its late answer to the first left the new record alone (${JSON.stringify(fields)})`);
      h2.release();
      assert.deepEqual((await second).map((r) => [r.reached, r.duplicate === true]), [[1, false]]);
      assert.equal((await inspect((r) => r.hgetall(record)))[`s${A}`], '1', 'its answer to the second publish');
    } finally {
      for (const h of holds.splice(0)) h.reached();
      await d.close();
    }
  });
});
