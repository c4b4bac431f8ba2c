/**
 * The Redis Cluster test harness itself (test/support/redis-cluster.ts), against real redis-server
 * processes: 3 masters with a replica each come up healthy and serve writes through ioredis Cluster;
 * SIGKILL the master of a key's slot and its replica takes the slot over, with the key, and the
 * cluster serves writes to that slot again.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Cluster, Redis } from 'ioredis';
import { Keys, keySlot } from '../../services/redis/keys.js';
import { type RedisClusterHandle, redisClusterMissing, startRedisCluster } from '../support/redis-cluster.js';

/** A direct connection to one node (not following the cluster); close with disconnect(). */
function direct(port: number): Redis {
  const r = new Redis({ host: '127.0.0.1', port, lazyConnect: true, protocol: 2, maxRetriesPerRequest: 1, connectTimeout: 1000 });
  r.on('error', () => {});
  return r;
}

/**
 * Runs `f`, and while it fails (the client may still route to the dead master) has the client
 * refresh its slot map and tries again once the refresh is done, up to `tries` times.
 */
async function afterRefresh<T>(client: Cluster, f: () => Promise<T>, tries = 20): Promise<T> {
  for (let t = 1; ; t++) {
    try {
      return await f();
    } catch (err) {
      if (t >= tries) throw err;
      await new Promise<void>((resolve) => client.refreshSlotsCache(() => resolve()));
    }
  }
}

describe('redis cluster harness', { skip: redisClusterMissing() ?? false, timeout: 60_000 }, () => {
  let cluster: RedisClusterHandle | null = null;
  let client: Cluster | null = null;

  before(async () => {
    cluster = await startRedisCluster({ masters: 3, replicasPerMaster: 1 });
  });

  after(async () => {
    client?.disconnect();
    await cluster?.stop();
  });

  it('serves writes, and fails a killed master over to its replica', async () => {
    assert.ok(cluster !== null);
    const c = cluster;
    assert.equal(c.servers.length, 6);
    assert.deepEqual(c.nodes.map((n) => n.port), c.servers.map((s) => s.port));
    assert.ok(c.servers.every((s) => s.alive));
    await c.waitHealthy();
    const masters = new Set(await Promise.all([0, 5461, 10923, 16383].map((slot) => c.masterOf(slot))));
    assert.equal(masters.size, 3, 'slots spread over 3 masters');

    client = new Cluster(c.nodes, { redisOptions: { protocol: 2, connectTimeout: 1000 }, retryDelayOnFailover: 100, retryDelayOnClusterDown: 100 });
    client.on('error', () => {});
    const key = `harness:${process.pid}`;
    await client.set(key, 'v1');
    assert.equal(await client.get(key), 'v1');

    const fromNode = direct(c.servers[0].port);
    let slot: number;
    try {
      slot = Number(await fromNode.call('CLUSTER', ['KEYSLOT', key]));
      // Ambit's own slot function (the matcher finds its stream's node with it) agrees with the
      // server's, for plain keys and for the hash tags of both key layouts.
      const k = new Keys('ambit:', { cluster: true, groups: 64 });
      for (const name of [key, 'plain', 'ü-ñ', k.in, k.matcherEpoch, k.notes('dev-1'), k.groupOf('x').dstate, '{}empty-tag', 'a{b}c{d}', '{'])
        assert.equal(keySlot(name), Number(await fromNode.call('CLUSTER', ['KEYSLOT', name])), name);
    } finally {
      fromNode.disconnect();
    }

    const before = await c.masterOf(slot);
    const victim = c.servers.find((s) => s.port === before);
    assert.ok(victim !== undefined && masters.has(before));

    // The replica has the key before its master dies: WAIT counts replicas that acknowledged.
    const master = direct(before);
    try {
      await master.set(key, 'v1');
      assert.ok(Number(await master.call('WAIT', ['1', '10000'])) >= 1, 'the replica acknowledged the write');
    } finally {
      master.disconnect();
    }

    await victim.kill();
    assert.equal(victim.alive, false);
    await c.waitHealthy();
    const now = await c.masterOf(slot);
    assert.notEqual(now, before, 'a replica was promoted');
    assert.ok(c.servers.find((s) => s.port === now)?.alive);

    assert.equal(await afterRefresh(client, () => client!.get(key)), 'v1', 'the promoted replica kept the key');
    await afterRefresh(client, () => client!.set(key, 'v2'));
    assert.equal(await client.get(key), 'v2');
    const promoted = direct(now);
    try {
      assert.equal(await promoted.get(key), 'v2', 'the write went to the promoted replica');
    } finally {
      promoted.disconnect();
    }
  });
});
