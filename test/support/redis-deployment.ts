/**
 * A Redis deployment for tests, on one redis-server or on a Redis Cluster: fresh key prefixes, a
 * matcher and gateway hubs on a prefix, the prefix's keys, and a connection to look at Redis
 * directly.
 */
import assert from 'node:assert/strict';
import { after, before } from 'node:test';
import { Cluster, Redis } from 'ioredis';
import { type Conn, type RedisSource, isClusterSource } from '../../services/redis/connection.js';
import { type GeoSpec, Keys } from '../../services/redis/keys.js';
import type { Event } from '../../src/model/types.js';
import { layoutFor } from '../../services/redis/layout.js';
import type { HubFixture, HubSetup } from './hub-contract.js';
import { type RedisClusterHandle, redisClusterMissing, startRedisCluster } from './redis-cluster.js';
import { CPU_ENGINES } from '../../src/engines/index.js';
import type { Retention } from '../../services/hub/embedded.js';
import { ENGINE_SIDE_LIMITS } from '../../services/hub/port.js';
import { PartitionedHub } from '../../services/hub/partitioned.js';
import { RedisHub, type RedisHubOptions } from '../../services/hub/redis.js';
import { RedisMatcher, type RedisMatcherOptions } from '../../services/matcher/redis.js';
import { type RedisServer, redisServerMissing, startRedisServer } from './redis-server.js';

/**
 * One redis-server for a test file: started before its tests, stopped after them. `missing` says
 * why the file's suites must skip (null when the binary runs); `url()` is the server's address.
 */
export function useRedisServer(): { missing: string | null; url: () => string } {
  const missing = redisServerMissing();
  let server: RedisServer | null = null;
  before(async () => {
    if (missing === null) server = await startRedisServer();
  });
  after(async () => {
    await server?.stop();
  });
  return {
    missing,
    url: () => {
      assert.ok(server !== null, 'redis-server is running');
      return server.url;
    },
  };
}

/**
 * One Redis Cluster for a test file (3 masters, a replica each, node timeout 1 s): started before
 * its tests, stopped after them. `source()` is the cluster's seed nodes.
 */
export function useRedisCluster(): { missing: string | null; source: () => RedisSource; cluster: () => RedisClusterHandle } {
  const missing = redisClusterMissing();
  let handle: RedisClusterHandle | null = null;
  before(async () => {
    if (missing === null) handle = await startRedisCluster({ masters: 3, replicasPerMaster: 1 });
  });
  after(async () => {
    await handle?.stop();
  });
  const cluster = () => {
    assert.ok(handle !== null, 'the Redis Cluster is running');
    return handle;
  };
  return { missing, cluster, source: () => ({ cluster: cluster().nodes }) };
}

let prefixSeq = 0;

/**
 * `url`: the server's address or a cluster source (asked when a deployment starts). `deviceGroups`:
 * of a cluster deployment (default: the library's).
 */
export function redisTestKit(url: () => RedisSource, deviceGroups?: number) {
  const freshPrefix = () => `t${process.pid}-${++prefixSeq}:`;
  const groups = () => (isClusterSource(url()) && deviceGroups !== undefined ? { deviceGroups } : {});

  /** The keys of a deployment on `prefix`, in its layout. */
  const keysOf = (prefix: string) => new Keys(prefix, layoutFor('test', url(), groups().deviceGroups));

  function matcherOptions(prefix: string, more: Partial<RedisMatcherOptions> = {}): RedisMatcherOptions {
    return { redis: url(), prefix, ...groups(), engine: CPU_ENGINES.fast({ limits: ENGINE_SIDE_LIMITS }), engineDetail: 'fast (test)', statsMs: 100, ...more };
  }

  function hubOptions(prefix: string, more: Partial<RedisHubOptions> = {}): RedisHubOptions {
    return { redis: url(), prefix, ...groups(), publishTimeoutMs: 5000, pollMs: 600_000, ...more };
  }

  /** A deployment on a fresh prefix: one matcher and `gateways` hubs; close() ends whatever is still running. */
  async function deployment(gateways = 1, retention?: Partial<Retention>, hubMore: Partial<RedisHubOptions> = {}, matcherMore: Partial<RedisMatcherOptions> = {}) {
    const prefix = freshPrefix();
    let matcher = await RedisMatcher.start(matcherOptions(prefix, { retention, ...matcherMore }));
    const hubs: RedisHub[] = [];
    for (let i = 0; i < gateways; i++) hubs.push(await RedisHub.connect(hubOptions(prefix, hubMore)));
    const extra: RedisHub[] = [];
    return {
      prefix,
      hubs,
      get matcher() {
        return matcher;
      },
      async restartMatcher(more: Partial<RedisMatcherOptions> = {}) {
        matcher = await RedisMatcher.start(matcherOptions(prefix, { retention, ...more }));
        return matcher;
      },
      async newHub(more: Partial<RedisHubOptions> = {}) {
        const h = await RedisHub.connect(hubOptions(prefix, { ...hubMore, ...more }));
        extra.push(h);
        return h;
      },
      async close() {
        for (const h of [...hubs, ...extra]) await h.close();
        await matcher.stop();
      },
    };
  }

  /** The hub contract's fixture: a matcher and one gateway hub on a fresh prefix. */
  async function contractFixture(setup: HubSetup): Promise<HubFixture> {
    const prefix = freshPrefix();
    const matcher = await RedisMatcher.start(matcherOptions(prefix, { retention: setup.retention }));
    const hub = await RedisHub.connect(hubOptions(prefix, { maxSubscriptionsPerDevice: setup.maxSubscriptionsPerDevice }));
    return {
      hub,
      dispose: async () => {
        await hub.close();
        await matcher.stop();
      },
    };
  }

  /**
   * The hub contract's fixture on `k` matcher partitions: a matcher per partition and, as a
   * gateway has it, a PartitionedHub of one RedisHub per partition.
   */
  function partitionedFixture(k: number) {
    return async (setup: HubSetup): Promise<HubFixture> => {
      const prefix = freshPrefix();
      const matchers = await Promise.all(Array.from({ length: k }, (_, i) => RedisMatcher.start(matcherOptions(prefix, { retention: setup.retention, partitions: k, partition: i }))));
      const hub = new PartitionedHub(await Promise.all(Array.from({ length: k }, (_, i) => RedisHub.connect(hubOptions(prefix, { maxSubscriptionsPerDevice: setup.maxSubscriptionsPerDevice, partitions: k, partition: i })))));
      return {
        hub,
        dispose: async () => {
          await hub.close();
          for (const m of matchers) await m.stop();
        },
      };
    };
  }

  /**
   * The hub contract's fixture sharded by space: a matcher per shard (geographic and wide) and one
   * gateway hub that speaks to all of them.
   */
  function geoFixture(geo: GeoSpec) {
    return async (setup: HubSetup): Promise<HubFixture> => {
      const prefix = freshPrefix();
      const n = geo.shards + geo.wide;
      const matchers = await Promise.all(Array.from({ length: n }, (_, i) => RedisMatcher.start(matcherOptions(prefix, { retention: setup.retention, geo, partition: i }))));
      const hub = await RedisHub.connect(hubOptions(prefix, { maxSubscriptionsPerDevice: setup.maxSubscriptionsPerDevice, geo }));
      return {
        hub,
        dispose: async () => {
          await hub.close();
          for (const m of matchers) await m.stop();
        },
      };
    };
  }

  /**
   * A deployment sharded by space on a fresh prefix: a matcher per shard (`more(k)`: options of
   * shard k's) and `gateways` hubs; `handOvers()` counts the devices each shard took over.
   */
  async function geoDeployment(geo: GeoSpec, gateways: number, more: (k: number) => Partial<RedisMatcherOptions> = () => ({})) {
    const prefix = freshPrefix();
    const n = geo.shards + geo.wide;
    const matchers = await Promise.all(Array.from({ length: n }, (_, i) => RedisMatcher.start(matcherOptions(prefix, { geo, partition: i, ...more(i) }))));
    const hubs: RedisHub[] = [];
    for (let i = 0; i < gateways; i++) hubs.push(await RedisHub.connect(hubOptions(prefix, { geo })));
    const keys = (k: number) => new Keys(prefix, layoutFor('test', url(), groups().deviceGroups, undefined, geo), k);
    return {
      prefix,
      matchers,
      hubs,
      keys,
      /** Shard k's command stream: its length and last entry id ('0-0' when empty). */
      inspectStream: (k: number) =>
        inspect(async (r) => ({ length: await r.xlen(keys(k).in), last: (await r.xrevrange(keys(k).in, '+', '-', 'COUNT', 1))[0]?.[0] ?? '0-0' })),
      /** Devices each shard's leader took over (its streams are trimmed as the shards go on). */
      handOvers: async () => matchers.map((m) => m.handOvers.in),
      async close() {
        for (const h of hubs) await h.close();
        for (const m of matchers) await m.stop();
      },
    };
  }

  /** A connection for looking at Redis directly (a cluster client on a cluster). */
  async function inspect<T, C extends Conn = Redis>(f: (r: C) => Promise<T>): Promise<T> {
    const source = url();
    const r = (isClusterSource(source) ? new Cluster(source.cluster, { lazyConnect: true, redisOptions: { protocol: 2 } }) : new Redis(source as string, { lazyConnect: true, protocol: 2 })) as C;
    await r.connect();
    try {
      return await f(r);
    } finally {
      r.disconnect();
    }
  }

  /**
   * A device's stored notifications as [delivery id, event], in stream order: the events the
   * entries name are read from their keys (an entry of earlier versions holds its event).
   */
  async function storedEvents(prefix: string, device: string, partition = 0): Promise<[string, Event][]> {
    const k = new Keys(prefix, keysOf(prefix).layout, partition);
    return inspect(async (r) => {
      const out: [string, Event][] = [];
      for (const [id, f] of await r.xrange(k.notes(device), '-', '+')) {
        const ref = f[f.indexOf('r') + 1];
        const json = f.includes('e') ? f[f.indexOf('e') + 1] : await r.get(k.event(ref));
        assert.ok(json !== null, `the event of ${device}'s ${id} is stored`);
        out.push([id, JSON.parse(json) as Event]);
      }
      return out;
    });
  }

  return { freshPrefix, keysOf, matcherOptions, hubOptions, deployment, contractFixture, partitionedFixture, geoFixture, geoDeployment, inspect, storedEvents };
}
