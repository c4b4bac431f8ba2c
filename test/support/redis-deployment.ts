/**
 * A Redis deployment for tests, on one redis-server: fresh key prefixes, a matcher and gateway hubs
 * on a prefix, and a plain connection to look at Redis directly.
 */
import assert from 'node:assert/strict';
import { after, before } from 'node:test';
import { Redis } from 'ioredis';
import { CPU_ENGINES } from '../../src/engines/index.js';
import type { Retention } from '../../services/hub/embedded.js';
import { ENGINE_SIDE_LIMITS } from '../../services/hub/port.js';
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

let prefixSeq = 0;

/** `url`: the server's address (asked when a deployment starts). */
export function redisTestKit(url: () => string) {
  const freshPrefix = () => `t${process.pid}-${++prefixSeq}:`;

  function matcherOptions(prefix: string, more: Partial<RedisMatcherOptions> = {}): RedisMatcherOptions {
    return { redis: url(), prefix, engine: CPU_ENGINES.fast({ limits: ENGINE_SIDE_LIMITS }), engineDetail: 'fast (test)', statsMs: 100, ...more };
  }

  function hubOptions(prefix: string, more: Partial<RedisHubOptions> = {}): RedisHubOptions {
    return { redis: url(), prefix, publishTimeoutMs: 5000, pollMs: 600_000, ...more };
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

  /** A plain connection for looking at Redis directly. */
  async function inspect<T>(f: (r: Redis) => Promise<T>): Promise<T> {
    const r = new Redis(url(), { lazyConnect: true, protocol: 2 });
    await r.connect();
    try {
      return await f(r);
    } finally {
      r.disconnect();
    }
  }

  return { freshPrefix, matcherOptions, hubOptions, deployment, inspect };
}
