/**
 * Pattern subscriptions in Redis mode (docs/semantics.md §9), against a real redis-server: the
 * gateway stores a pattern like any subscription, the matcher holds it beside its engine, follows
 * its owner's moves, feeds it every fresh event in stream order and stores each match in the
 * device's log (read back whole, pushed or ranged). A matcher restarted from its snapshot resumes
 * the patterns' history: the state taken with the snapshot, then the publishes after it replayed
 * into the patterns without storing their matches again; a standby follows every publish, so it
 * takes over with the history; one rebuilt from Redis alone keeps the patterns but not their
 * history.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import type { EventPattern } from '../../src/model/event-patterns.js';
import type { Event, Filter } from '../../src/model/types.js';
import type { Delivery, DeviceSubscription } from '../../services/hub/port.js';
import { drain, pullN } from '../support/hub-contract.js';
import type { RedisHub } from '../../services/hub/redis.js';
import { compareStreamIds } from '../../services/redis/codec.js';
import { RedisMatcher } from '../../services/matcher/redis.js';
import { ShardMap } from '../../services/matcher/shard-map.js';
import { redisTestKit, useRedisServer } from '../support/redis-deployment.js';
import { pointAt } from '../support/sphere.js';

const redis = useRedisServer();
const kit = redisTestKit(() => redis.url());
const dirs: string[] = [];
after(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

const HOME = { lat: 45.46, lon: 9.19 };
const FAR = pointAt(HOME.lat, HOME.lon, 90, 5000);
const kind = (k: string, area?: Filter['area']): Filter => ({ constraints: [{ name: 'kind', op: 'eq', value: k }], ...(area === undefined ? {} : { area }) });

/** Smoke within 300 m of the device after the last temperature within 10 s; how many temperatures. */
const FIRE: EventPattern = {
  steps: [
    { name: 'smoke', filter: kind('smoke', { radiusM: 300 }) },
    { name: 'temp', filter: kind('temp'), selection: 'last', withinMs: 10_000 },
  ],
  aggregates: [{ name: 'temps', fn: 'count', filter: kind('temp'), before: 'smoke', withinMs: 10_000 }],
};
const fire: DeviceSubscription = { id: 'fire', filters: [], pattern: FIRE };
/** Smoke near the device after the last temperature near it within 10 s; how many temperatures near it. */
const near: DeviceSubscription = {
  id: 'near',
  filters: [],
  pattern: {
    steps: [
      { name: 'smoke', filter: kind('smoke', { radiusM: 300 }) },
      { name: 'temp', filter: kind('temp', { radiusM: 300 }), selection: 'last', withinMs: 10_000 },
    ],
    aggregates: [{ name: 'temps', fn: 'count', filter: kind('temp', { radiusM: 300 }), before: 'smoke', withinMs: 10_000 }],
  },
};
const ping = (device: string): DeviceSubscription => ({ id: 'ping', filters: [{ constraints: [{ name: 'ping', op: 'eq', value: device }] }] });

/**
 * Event times ahead of the clock the stream stamps untimed events with (the pings of `drain`), so
 * those pings, released before, never make these late.
 */
const T0 = Date.now() + 30 * 86_400_000;
let seq = 0;
const ev = (attributes: Record<string, string | number | boolean>, t: number, where = HOME, id = `e${++seq}`): Event => ({ id, lat: where.lat, lon: where.lon, attributes, timeMs: T0 + t });
/** The phone at HOME with its ping (for `drain`) and `sub`; its inbox, opened. */
async function phoneAtHome(hub: RedisHub, sub: DeviceSubscription) {
  await hub.addSubscription('phone', ping('phone'));
  await hub.addSubscription('phone', sub);
  await hub.updateLocations([{ device: 'phone', ...HOME }]);
  return hub.openInbox('phone', null);
}
/** Until matcher `m` has read its stream's last entry; `onRead` hands over the wake-up its batches call. */
async function readAll(m: RedisMatcher, prefix: string, onRead: (wake: () => void) => void): Promise<void> {
  const last = await kit.inspect(async (r) => (await r.xrevrange(kit.keysOf(prefix).in, '+', '-', 'COUNT', 1))[0][0]);
  while (compareStreamIds(m.position, last) < 0) await new Promise<void>((resolve) => onRead(resolve));
}
const matches = (ds: readonly Delivery[]) => ds.filter((d) => d.match !== undefined).map((d) => [d.subscriptionIds, d.match!.steps.map((s) => [s.step, s.event.id, s.timeMs - T0]), { ...d.match!.aggregates }]);

describe('pattern subscriptions in Redis mode', { skip: redis.missing ?? false, timeout: 60_000 }, () => {
  it('[E20][E5] the matcher serves a device\'s pattern: its match is stored in the log and read back whole; a move away leaves the next smoke unmatched', async () => {
    const d = await kit.deployment();
    try {
      const hub = d.hubs[0];
      await hub.addSubscription('phone', ping('phone'));
      await hub.addSubscription('phone', fire);
      assert.deepEqual((await hub.listSubscriptions('phone')).find((s) => s.id === 'fire'), fire);
      await hub.updateLocations([{ device: 'phone', ...HOME }]);
      const inbox = await hub.openInbox('phone', null);
      await hub.publish([ev({ kind: 'temp' }, 1000, HOME, 't1'), ev({ kind: 'temp' }, 2000, HOME, 't2')]);
      const [r] = await hub.publish([ev({ kind: 'smoke' }, 3000, HOME, 's1')]);
      assert.equal(r.reached, 0, 'reached counts filter subscriptions');
      // A retried publish is a duplicate: the patterns do not see it again.
      const [again] = await hub.publish([ev({ kind: 'temp' }, 2500, HOME, 't2')]);
      assert.equal(again.duplicate, true);
      await hub.updateLocations([{ device: 'phone', ...FAR }]);
      await hub.publish([ev({ kind: 'smoke' }, 4000, HOME, 's2')]);
      const got = await drain(hub, inbox, 'phone');
      assert.deepEqual(matches(got), [[['fire'], [['smoke', 's1', 3000], ['temp', 't2', 2000]], { temps: 2 }]]);
      // Read back from the log (not the push): the same match.
      const again2 = await hub.openInbox('phone', null);
      const all = await pullN(again2, got.length);
      assert.deepEqual(matches(all), matches(got));
      again2.close();
      inbox.close();
    } finally {
      await d.close();
    }
  });

  it('[E17] a matcher restarted from its snapshot resumes the history: the state taken with the snapshot and the publishes after it, replayed; nothing is stored twice', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'ambit-patterns-'));
    dirs.push(dir);
    const d = await kit.deployment(1, undefined, {}, { snapshot: { dir, intervalMs: 0 } });
    try {
      const hub = d.hubs[0];
      const inbox = await phoneAtHome(hub, fire);
      await hub.publish([ev({ kind: 'temp' }, 1000, HOME, 'before-snapshot')]);
      await hub.publish([ev({ kind: 'smoke' }, 1500, HOME, 's0')]);
      const info = await d.matcher.snapshotNow();
      assert.ok(info !== null, 'the snapshot was written');
      // After the snapshot: a temperature, and a match the old matcher stores; then it dies.
      await hub.publish([ev({ kind: 'temp' }, 2000, HOME, 'after-snapshot')]);
      await hub.publish([ev({ kind: 'smoke' }, 2500, HOME, 's1')]);
      const before = matches(await drain(hub, inbox, 'phone'));
      assert.deepEqual(before, [
        [['fire'], [['smoke', 's0', 1500], ['temp', 'before-snapshot', 1000]], { temps: 1 }],
        [['fire'], [['smoke', 's1', 2500], ['temp', 'after-snapshot', 2000]], { temps: 2 }],
      ]);
      await d.matcher.crash();
      const m = await d.restartMatcher({ snapshot: { dir, intervalMs: 0 } });
      assert.equal(m.restoredFrom.from, 'snapshot');
      // Both temperatures count: one from the snapshot's state, one replayed into it.
      await hub.publish([ev({ kind: 'smoke' }, 3000, HOME, 's2')]);
      assert.deepEqual(matches(await drain(hub, inbox, 'phone')), [[['fire'], [['smoke', 's2', 3000], ['temp', 'after-snapshot', 2000]], { temps: 2 }]], 'one new match, and the replay stored none again');
      inbox.close();
    } finally {
      await d.close();
    }
  });

  it('[E12] a batch replayed after its commit failed gives the patterns nothing twice, and stores what it released once', async () => {
    let failCommit = false;
    let commitsAfterFailure = -1;
    let replayed!: () => void;
    const replay = new Promise<void>((resolve) => (replayed = resolve));
    const d = await kit.deployment(1, undefined, {}, {
      hooks: {
        afterDeliver: () => {
          if (commitsAfterFailure >= 0 && ++commitsAfterFailure === 1) replayed();
          if (!failCommit) return;
          failCommit = false;
          commitsAfterFailure = 0;
          throw new Error('the commit fails (test)');
        },
      },
    });
    try {
      const hub = d.hubs[0];
      const inbox = await phoneAtHome(hub, fire);
      await hub.publish([ev({ kind: 'temp' }, 1000, HOME, 't1')]);
      await hub.publish([ev({ kind: 'temp' }, 1500, HOME, 't2'), ev({ kind: 'smoke' }, 1500, HOME, 's1')]);
      // Matched, stored and answered; then its offset is not written, so the batch is read and
      // matched again. t3's time is the latest yet: given again, it would not be late (E3).
      failCommit = true;
      await hub.publish([ev({ kind: 'temp' }, 2000, HOME, 't3')]);
      await replay;
      await hub.publish([ev({ kind: 'smoke' }, 3000, HOME, 's2')]);
      assert.deepEqual(matches(await drain(hub, inbox, 'phone')), [
        [['fire'], [['smoke', 's1', 1500], ['temp', 't2', 1500]], { temps: 2 }],
        [['fire'], [['smoke', 's2', 3000], ['temp', 't3', 2000]], { temps: 3 }],
      ]);
      inbox.close();
    } finally {
      await d.close();
    }
  });

  it('[E5] a restart from a snapshot replays the publishes after it at the owner\'s positions of then, not those the file was written with', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'ambit-patterns-'));
    dirs.push(dir);
    const NEAR: DeviceSubscription = { id: 'near', filters: [], pattern: { steps: [{ name: 'smoke', filter: kind('smoke', { radiusM: 300 }) }, { name: 'temp', filter: kind('temp', { radiusM: 300 }), withinMs: 10_000 }] } };
    let hub!: RedisHub;
    let armed = false;
    const d = await kit.deployment(1, undefined, {}, {
      snapshot: { dir, intervalMs: 0, blockBytes: 16 },
      hooks: {
        // The patterns' state is cut; while the file's records are written, a temperature at home,
        // then the phone walks away (both after the cut: replayed at a restart).
        snapshotBlock: async () => {
          if (!armed) return;
          armed = false;
          await hub.publish([ev({ kind: 'temp' }, 1000, HOME, 't1')]);
          await hub.updateLocations([{ device: 'phone', ...FAR }]);
          await hub.publish([ev({ kind: 'noop' }, 1100, FAR)]);
        },
      },
    });
    hub = d.hubs[0];
    try {
      const inbox = await phoneAtHome(hub, NEAR);
      await drain(hub, inbox, 'phone');
      armed = true;
      assert.ok((await d.matcher.snapshotNow()) !== null);
      await drain(hub, inbox, 'phone'); // the matcher has stored (and committed) what came before
      await d.matcher.crash();
      assert.equal((await d.restartMatcher({ snapshot: { dir, intervalMs: 0 } })).restoredFrom.from, 'snapshot');
      await hub.updateLocations([{ device: 'phone', ...HOME }]);
      await hub.publish([ev({ kind: 'smoke' }, 2000, HOME, 's1')]);
      assert.deepEqual(matches(await drain(hub, inbox, 'phone')), [[['near'], [['smoke', 's1', 2000], ['temp', 't1', 1000]], {}]], 't1 was near the phone when it came');
      inbox.close();
    } finally {
      await d.close();
    }
  });

  it('[E20] a publish matched again after a crash stores each device\'s matches once, whatever order the restored engine finds them in', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'ambit-patterns-'));
    dirs.push(dir);
    let crashNow = false;
    let crashed: Promise<void> = Promise.resolve();
    const SMOKE: DeviceSubscription = { id: 'p', filters: [], pattern: { steps: [{ name: 'smoke', filter: kind('smoke') }] } };
    // eslint-disable-next-line prefer-const
    let d: Awaited<ReturnType<typeof kit.deployment>>;
    d = await kit.deployment(1, undefined, {}, {
      snapshot: { dir, intervalMs: 0 },
      hooks: {
        // Stored and answered, then the matcher dies before its offset is written.
        afterDeliver: () => {
          if (!crashNow) return;
          crashNow = false;
          crashed = d.matcher.crash();
        },
      },
    });
    try {
      const hub = d.hubs[0];
      const devices = ['d0', 'd1', 'd2'];
      const inboxes = new Map<string, Awaited<ReturnType<typeof hub.openInbox>>>();
      for (const x of devices) {
        await hub.addSubscription(x, ping(x));
        await hub.addSubscription(x, SMOKE);
        await hub.updateLocations([{ device: x, ...HOME }]);
        inboxes.set(x, await hub.openInbox(x, null));
      }
      // Removing the first leaves the fast engine's order of the others unlike a fresh engine's.
      await hub.removeSubscription('d0', 'p');
      await drain(hub, inboxes.get('d1')!, 'd1');
      assert.ok((await d.matcher.snapshotNow()) !== null);
      crashNow = true;
      await hub.publish([ev({ kind: 'smoke' }, 1000, HOME, 's1')]);
      await crashed;
      assert.equal((await d.restartMatcher({ snapshot: { dir, intervalMs: 0 } })).restoredFrom.from, 'snapshot');
      for (const x of ['d1', 'd2']) assert.deepEqual(matches(await drain(hub, inboxes.get(x)!, x)), [[['p'], [['smoke', 's1', 1000]], {}]], x);
      for (const box of inboxes.values()) box.close();
    } finally {
      await d.close();
    }
  });

  it('[E17] a standby started from the snapshot follows the publishes the leader matches: when it takes over, the history holds the snapshot\'s events and those', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'ambit-patterns-'));
    dirs.push(dir);
    const d = await kit.deployment(1, undefined, {}, { snapshot: { dir, intervalMs: 0 }, leaseMs: 400 });
    let b: RedisMatcher | null = null;
    try {
      const hub = d.hubs[0];
      const inbox = await phoneAtHome(hub, fire);
      await hub.publish([ev({ kind: 'temp' }, 1000, HOME, 't1')]);
      await drain(hub, inbox, 'phone');
      // The leader's file has t1; a standby loads it, then the leader matches t2 alone.
      assert.ok((await d.matcher.snapshotNow()) !== null);
      b = await RedisMatcher.start(kit.matcherOptions(d.prefix, { snapshot: { dir, intervalMs: 0 }, leaseMs: 400 }));
      assert.equal(b.role, 'standby');
      await hub.publish([ev({ kind: 'temp' }, 2000, HOME, 't2')]);
      await drain(hub, inbox, 'phone');
      await d.matcher.stop();
      await b.whenRole('leader');
      await hub.publish([ev({ kind: 'smoke' }, 3000, HOME, 's1')]);
      assert.deepEqual(matches(await drain(hub, inbox, 'phone')), [[['fire'], [['smoke', 's1', 3000], ['temp', 't2', 2000]], { temps: 2 }]], 't1 from the file, t2 followed');
      inbox.close();
    } finally {
      await b?.stop();
      await d.close();
    }
  });

  it('[E17][E12][E5] a standby follows every publish in stream order: after the leader\'s crash it matches with the whole history, a retried event counted once, at the positions of then', async () => {
    const d = await kit.deployment(1, undefined, {}, { leaseMs: 400 });
    let b: RedisMatcher | null = null;
    try {
      const hub = d.hubs[0];
      let read: (() => void) | undefined;
      b = await RedisMatcher.start(kit.matcherOptions(d.prefix, { leaseMs: 400, hooks: { onBatch: () => read?.() } }));
      assert.equal(b.role, 'standby');
      const inbox = await phoneAtHome(hub, near);
      await hub.publish([ev({ kind: 'temp' }, 1000, HOME, 't1')]);
      // A retry of t1: a duplicate for the leader, so for the standby too.
      assert.deepEqual((await hub.publish([ev({ kind: 'temp' }, 1000, HOME, 't1')])).map((r) => r.duplicate), [true]);
      // A temperature at home while the phone is away: not near it then, whatever comes later.
      await hub.updateLocations([{ device: 'phone', ...FAR }]);
      await hub.publish([ev({ kind: 'temp' }, 2000, HOME, 't2')]);
      await hub.updateLocations([{ device: 'phone', ...HOME }]);
      assert.deepEqual(matches(await drain(hub, inbox, 'phone')), [], 'no smoke yet');
      await readAll(b, d.prefix, (wake) => (read = wake));
      await d.matcher.crash();
      await b.whenRole('leader');
      await hub.publish([ev({ kind: 'smoke' }, 3000, HOME, 's1')]);
      assert.deepEqual(matches(await drain(hub, inbox, 'phone')), [[['near'], [['smoke', 's1', 3000], ['temp', 't1', 1000]], { temps: 1 }]]);
      inbox.close();
    } finally {
      await b?.stop();
      await d.close();
    }
  });

  it('[E12] a standby judges a retried event by its dedupe record when it did not see the first: a duplicate, not part of the history it takes over with', async () => {
    const d = await kit.deployment(1, undefined, {}, { leaseMs: 400 });
    let b: RedisMatcher | null = null;
    try {
      const hub = d.hubs[0];
      const inbox = await phoneAtHome(hub, fire);
      await hub.publish([ev({ kind: 'temp' }, 1000, HOME, 't1')]);
      await drain(hub, inbox, 'phone');
      // Started from Redis after t1: no history of it, only its record.
      let read: (() => void) | undefined;
      b = await RedisMatcher.start(kit.matcherOptions(d.prefix, { leaseMs: 400, hooks: { onBatch: () => read?.() } }));
      assert.equal(b.role, 'standby');
      assert.deepEqual((await hub.publish([ev({ kind: 'temp' }, 1000, HOME, 't1')])).map((r) => r.duplicate), [true]);
      await readAll(b, d.prefix, (wake) => (read = wake));
      await d.matcher.crash();
      await b.whenRole('leader');
      await hub.publish([ev({ kind: 'smoke' }, 3000, HOME, 's1')]);
      assert.deepEqual(matches(await drain(hub, inbox, 'phone')), [], 'the retried t1 is no temperature of the history');
      inbox.close();
    } finally {
      await b?.stop();
      await d.close();
    }
  });

  it('[E20][E5] sharded by space, a device with a pattern lives on its wide shard, which every event visits: its history holds events from every shard\'s cells, at the positions of then, and stays as the device crosses them', async () => {
    const geo = { shards: 2, wide: 1, cellDeg: 0.01, guardM: 50, layout: 'stripes' as const };
    // Columns 919 and 920 of 0.01°: a shard each, 780 m apart.
    const A = { lat: 45.46, lon: 9.195 };
    const B = { lat: 45.46, lon: 9.205 };
    const d = await kit.geoDeployment(geo, 1);
    try {
      const hub = d.hubs[0];
      const [shardA, shardB] = [A, B].map((p) => new ShardMap({ version: 1, ...geo }).shardOf(p.lat, p.lon));
      assert.notEqual(shardA, shardB, 'A and B are on different geographic shards');
      // A device of anchored filters only is homed on its cell's shard.
      await hub.addSubscription('walker', { id: 'w', filters: [kind('temp', { radiusM: 300 })] });
      await hub.updateLocations([{ device: 'walker', ...A }, { device: 'phone', ...A }]);
      await hub.addSubscription('phone', near);
      const inbox = await hub.openInbox('phone', null);
      const holders = (device: string) => d.matchers.map((m, k) => (m.core.list(device).length > 0 ? k : -1)).filter((k) => k >= 0);
      await hub.publish([ev({ kind: 'temp' }, 1000, A, 't1')]);
      assert.deepEqual(holders('walker'), [shardA]);
      assert.deepEqual(holders('phone'), [geo.shards], 'the phone is on the wide shard');
      await hub.updateLocations([{ device: 'phone', ...B }]);
      // t1b at A: 780 m from the phone now, so not near it, though near where it was.
      await hub.publish([ev({ kind: 'temp' }, 2000, A, 't1b'), ev({ kind: 'temp' }, 3000, B, 't2')]);
      await hub.publish([ev({ kind: 'smoke' }, 4000, B, 's1')]);
      const got = await pullN(inbox, 1);
      assert.deepEqual(matches(got), [[['near'], [['smoke', 's1', 4000], ['temp', 't2', 3000]], { temps: 2 }]], 't1 near the phone at A, t2 at B; t1b at A after it left');
      assert.deepEqual(holders('phone'), [geo.shards], 'still on the wide shard');
      // Dropping the pattern: the phone lives nowhere until its next position homes it.
      await hub.removeSubscription('phone', 'near');
      await hub.addSubscription('phone', { id: 'here', filters: [kind('smoke', { radiusM: 300 })] });
      await hub.updateLocations([{ device: 'phone', ...B }]);
      assert.deepEqual((await hub.publish([ev({ kind: 'smoke' }, 5000, B, 's2')])).map((r) => r.reached), [1]);
      assert.deepEqual(holders('phone'), [shardB], 'home on B\'s shard');
      inbox.close();
    } finally {
      await d.close();
    }
  });

  it('[E12] sharded by space, a wide shard that reads its stream again over a device\'s arrival keeps the pattern\'s history: the arrival replayed puts the pattern back only where the patterns lack it', async () => {
    const geo = { shards: 2, wide: 1, cellDeg: 0.01, guardM: 50, layout: 'stripes' as const };
    const A = { lat: 45.46, lon: 9.195 };
    // The wide shard's commit of the batch that brings the phone fails once, after the next
    // batch (a publish) was read and given to the patterns: both are read again.
    let failNext = false;
    let nextRead: (() => void) | null = null;
    let replayed = false;
    const hooks = {
      afterDeliver: async () => {
        if (!failNext) return;
        failNext = false;
        await new Promise<void>((resolve) => (nextRead = resolve));
        replayed = true;
        throw new Error('the commit fails (test)');
      },
      onMatched: (b: { publishes: number }) => {
        if (b.publishes > 0) nextRead?.();
      },
    };
    const d = await kit.geoDeployment(geo, 1, (k) => (k === geo.shards ? { hooks } : {}));
    try {
      const hub = d.hubs[0];
      await hub.addSubscription('phone', { id: 'here', filters: [kind('fog', { radiusM: 300 })] });
      await hub.updateLocations([{ device: 'phone', ...A }]);
      const inbox = await hub.openInbox('phone', null);
      failNext = true;
      await hub.addSubscription('phone', fire);
      await hub.publish([ev({ kind: 'temp' }, 1000, A, 't1')]);
      assert.ok(replayed, 'the wide shard read the arrival and t1 again');
      await hub.publish([ev({ kind: 'smoke' }, 2000, A, 's1')]);
      assert.deepEqual(matches(await pullN(inbox, 1)), [[['fire'], [['smoke', 's1', 2000], ['temp', 't1', 1000]], { temps: 1 }]]);
      inbox.close();
    } finally {
      await d.close();
    }
  });

  it('[E17] a matcher rebuilt from Redis alone (no snapshot) serves the patterns again, without their history', async () => {
    const d = await kit.deployment();
    try {
      const hub = d.hubs[0];
      const inbox = await phoneAtHome(hub, fire);
      await hub.publish([ev({ kind: 'temp' }, 1000, HOME, 'lost')]);
      await drain(hub, inbox, 'phone');
      await d.matcher.crash();
      const m = await d.restartMatcher();
      assert.equal(m.restoredFrom.from, 'redis');
      await hub.publish([ev({ kind: 'smoke' }, 2000, HOME, 'alone')]);
      await hub.publish([ev({ kind: 'temp' }, 3000, HOME, 'new'), ev({ kind: 'smoke' }, 3500, HOME, 'with')]);
      assert.deepEqual(matches(await drain(hub, inbox, 'phone')), [[['fire'], [['smoke', 'with', 3500], ['temp', 'new', 3000]], { temps: 1 }]]);
      inbox.close();
    } finally {
      await d.close();
    }
  });
});
