/**
 * The Redis deployment on a real Redis Cluster (3 masters with a replica each, started by the
 * test): the hub contract; notifications spread over the masters by device group, with the
 * counters summed; the device groups' fences; a process whose key layout differs refused; and a
 * master killed mid-traffic (its replica promoted) with publishes retried under their ids: every
 * device gets every event once.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Cluster, Redis } from 'ioredis';
import type { Hub } from '../../services/hub/port.js';
import { RedisHub } from '../../services/hub/redis.js';
import { RedisMatcher } from '../../services/matcher/redis.js';
import { keySlot } from '../../services/redis/keys.js';
import { defineScripts, runScript } from '../../services/redis/scripts.js';
import { anywhere, pullN, runHubContract, sub } from '../support/hub-contract.js';
import { redisTestKit, useRedisCluster } from '../support/redis-deployment.js';
import { forcedHandOver } from '../support/forced-handover.js';
import { runGeoWorld } from '../support/geo-world.js';

const { missing, source, cluster } = useRedisCluster();
const { freshPrefix, keysOf, matcherOptions, hubOptions, deployment, contractFixture, partitionedFixture, geoFixture, geoDeployment, inspect, storedEvents } = redisTestKit(source, 8);

const all = sub('all', anywhere({ name: 'i', op: 'exists' }));
const ev = (i: number) => ({ id: `ev-${i}`, lat: 45.4642, lon: 9.19, attributes: { i } });
const range = (from: number, n: number) => Array.from({ length: n }, (_, k) => from + k);

/**
 * Publishes one event until it is answered: a failure during a failover is retried under the same
 * id once every slot is served again.
 */
async function publishUntilAnswered(hub: Hub, i: number): Promise<{ reached: number; attempts: number }> {
  for (let attempt = 1; ; attempt++) {
    try {
      const [r] = await hub.publish([ev(i)]);
      return { reached: r.reached, attempts: attempt };
    } catch (err) {
      if (attempt >= 20) throw err;
      await cluster().waitHealthy();
    }
  }
}

describe('redis cluster deployment', { skip: missing ?? false, timeout: 120_000 }, () => {
  runHubContract('redis cluster', contractFixture);
  runHubContract('redis cluster, devices split over 3 matcher partitions', partitionedFixture(3));
  runHubContract('redis cluster, sharded by space: 3 geographic shards + 1 wide shard', geoFixture({ shards: 3, wide: 1, cellDeg: 0.01, guardM: 200, layout: 'stripes' }));

  it('sharded by space: devices walking across shard borders get exactly what the reference engine gives; the shards\' keys share one slot', async () => {
    const geo = { shards: 3, wide: 1, cellDeg: 0.004, guardM: 60, layout: 'stripes' as const };
    const d = await geoDeployment(geo, 2);
    try {
      const r = await runGeoWorld(d.hubs, { seed: 5, devices: 16, rounds: 16, eventsPerRound: 4 });
      assert.ok(r.notifications > 40, `the world delivers (${r.notifications})`);
      const acq = await d.handOvers();
      assert.ok(acq.every((n) => n > 0), `every shard took devices over (${acq.join(', ')})`);
      const k0 = d.keys(0);
      const slot = keySlot(k0.in);
      for (let k = 0; k < 4; k++) assert.equal(keySlot(d.keys(k).in), slot);
      for (const key of [k0.home, k0.wide, k0.reach, k0.seq, k0.pos, k0.subs('x'), k0.meta('x'), k0.event('1-0:0')]) assert.equal(keySlot(key), slot, key);
    } finally {
      await d.close();
    }
  });

  it('sharded by space: a device leaving a shard that has no leader arrives after the wait bound, and gets what that shard owed it once it runs again (owed windows in the device groups)', async () => {
    await forcedHandOver({ freshPrefix, matcherOptions, hubOptions }, { shards: 3, wide: 1, cellDeg: 0.02, guardM: 60, layout: 'stripes' });
  });

  it('notifications live in device groups spread over the masters; the counters add up over the groups', async () => {
    const d = await deployment(2);
    try {
      const [a, b] = d.hubs;
      const devices = range(0, 24).map((i) => `dev-${i}`);
      for (const dev of devices) await a.addSubscription(dev, all);
      assert.deepEqual((await b.publish([ev(1), ev(2)])).map((r) => r.reached), [24, 24]);
      const k = keysOf(d.prefix);
      const c = cluster();
      const masters = new Set<number>();
      for (const dev of devices) {
        const g = k.groupOf(dev);
        // A device's stream, state and doorbell share its group's slot.
        assert.equal(keySlot(g.notes(dev)), keySlot(g.dstate));
        assert.equal(keySlot(g.wake(dev)), keySlot(g.fence));
        masters.add(await c.masterOf(keySlot(g.notes(dev))));
      }
      assert.ok(masters.size >= 2, `the devices' streams are on ${masters.size} master(s)`);
      for (const dev of devices) assert.equal(await inspect((r) => r.xlen(k.notes(dev))), 2, dev);
      const stats = await b.stats();
      assert.equal(stats.notifications, 48);
      assert.equal(stats.eventsPublished, 2);
      // Delivered through the shard channels to a gateway that did not publish.
      const box = await a.openInbox('dev-7', null);
      assert.deepEqual((await pullN(box, 2)).map((x) => x.event.attributes.i), [1, 2]);
      box.close();
    } finally {
      await d.close();
    }
  });

  it("a device group's fence: raised by a newer token only, and a delivery with an older one changes nothing", async () => {
    const k = keysOf(freshPrefix());
    const g = k.groupOf('d');
    await inspect<void, Cluster>(async (r) => {
      defineScripts(r);
      assert.equal(await runScript(r, 'ambitFenceRaise', g.fence, '3'), 1);
      assert.equal(await runScript(r, 'ambitFenceRaise', g.fence, '3'), 1);
      await assert.rejects(runScript(r, 'ambitFenceRaise', g.fence, '2'), /FENCED/);
      assert.equal(await r.get(g.fence), '3');
      const deliver = (token: string) => {
        const ms = Date.now();
        return runScript(r, 'ambitDeliverSharded', 7, g.dstate, g.stats, g.nseq, g.nlast, g.notes('d'), g.born('d'), g.fence, 100, 60_000, g.wakePrefix, '', 1, `${ms}-1`, 0, ms, '{"id":"e"}', 'd', 1, '[]', token);
      };
      await assert.rejects(deliver('2'), /FENCED/);
      assert.equal(await r.exists(g.notes('d')), 0);
      assert.equal(await deliver('3'), 1);
      assert.equal(await r.xlen(g.notes('d')), 1);
      assert.equal(await runScript(r, 'ambitFenceRaise', g.fence, '4'), 1);
      await assert.rejects(deliver('3'), /FENCED/);
    });
  });

  it('a process whose key layout differs from the deployment is refused, naming both', async () => {
    const d = await deployment(1);
    try {
      await assert.rejects(RedisHub.connect({ ...hubOptions(d.prefix), deviceGroups: 16 }), /uses the key layout "cluster groups=8", this process "cluster groups=16"/);
      await assert.rejects(RedisMatcher.start(matcherOptions(d.prefix, { deviceGroups: 2 })), /key layout "cluster groups=8"/);
    } finally {
      await d.close();
    }
  });

  it('the master of the command stream is killed mid-traffic: its replica takes over, retried publishes are answered once, every device gets every event once', async () => {
    const d = await deployment(1, undefined, { publishTimeoutMs: 3000 });
    try {
      const [hub] = d.hubs;
      const devices = range(0, 12).map((i) => `m-${i}`);
      for (const dev of devices) await hub.addSubscription(dev, all);
      const boxes = await Promise.all(devices.map((dev) => hub.openInbox(dev, null)));
      const N = 16;
      const k = keysOf(d.prefix);
      const c = cluster();
      const attempts: number[] = [];
      for (let i = 1; i <= N; i++) {
        if (i === 6) {
          // What the master acknowledged is on its replica (replication is asynchronous: a write
          // inside the lag dies with its master), then the master dies.
          const port = await c.masterOf(keySlot(k.in));
          const m = new Redis({ host: '127.0.0.1', port, lazyConnect: true, protocol: 2 });
          await m.connect();
          assert.equal(await m.wait(1, 5000), 1);
          m.disconnect();
          await c.servers.find((s) => s.port === port)!.kill();
        }
        const r = await publishUntilAnswered(hub, i);
        assert.equal(r.reached, devices.length, `event ${i}`);
        attempts.push(r.attempts);
      }
      await c.waitHealthy();
      for (let b = 0; b < boxes.length; b++) {
        assert.deepEqual((await pullN(boxes[b], N)).map((x) => x.event.attributes.i), range(1, N), devices[b]);
        boxes[b].close();
      }
      for (const dev of devices) {
        const ids = (await storedEvents(d.prefix, dev)).map(([, e]) => e.attributes.i);
        assert.deepEqual(ids, range(1, N), `${dev}: each event stored once`);
      }
    } finally {
      await d.close();
    }
  });
});
