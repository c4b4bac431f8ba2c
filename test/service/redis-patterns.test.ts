/**
 * Pattern subscriptions in Redis mode (docs/semantics.md §9), against a real redis-server: the
 * gateway stores a pattern like any subscription, the matcher holds it beside its engine, follows
 * its owner's moves, feeds it every fresh event in stream order and stores each match in the
 * device's log (read back whole, pushed or ranged). A matcher restarted from its snapshot resumes
 * the patterns' history: the state taken with the snapshot, then the publishes after it replayed
 * into the patterns without storing their matches again; one rebuilt from Redis alone keeps the
 * patterns but not their history.
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
const ping = (device: string): DeviceSubscription => ({ id: 'ping', filters: [{ constraints: [{ name: 'ping', op: 'eq', value: device }] }] });

/**
 * Event times ahead of the clock the stream stamps untimed events with (the pings of `drain`), so
 * those pings, released before, never make these late.
 */
const T0 = Date.now() + 30 * 86_400_000;
let seq = 0;
const ev = (attributes: Record<string, string | number | boolean>, t: number, where = HOME, id = `e${++seq}`): Event => ({ id, lat: where.lat, lon: where.lon, attributes, timeMs: T0 + t });
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
      await hub.addSubscription('phone', ping('phone'));
      await hub.addSubscription('phone', fire);
      await hub.updateLocations([{ device: 'phone', ...HOME }]);
      const inbox = await hub.openInbox('phone', null);
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
      await hub.addSubscription('phone', ping('phone'));
      await hub.addSubscription('phone', fire);
      await hub.updateLocations([{ device: 'phone', ...HOME }]);
      const inbox = await hub.openInbox('phone', null);
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

  it('[E17] a matcher rebuilt from Redis alone (no snapshot) serves the patterns again, without their history', async () => {
    const d = await kit.deployment();
    try {
      const hub = d.hubs[0];
      await hub.addSubscription('phone', ping('phone'));
      await hub.addSubscription('phone', fire);
      await hub.updateLocations([{ device: 'phone', ...HOME }]);
      const inbox = await hub.openInbox('phone', null);
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
