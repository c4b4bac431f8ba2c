/** Redis connections for benchmarks that look at or clean up Redis directly. */
import { Cluster, Redis } from 'ioredis';
import { type Conn, type RedisSource, isClusterSource } from '../../services/redis/connection.js';

/** Runs `f` on a connection of its own to a plain Redis (a URL), closed after. */
export function withRedis<T>(url: string, f: (r: Redis) => Promise<T>): Promise<T> {
  return withConn(url, (r) => f(r as Redis));
}

/** Deletes every key under `prefix`; returns the server's version. */
export async function wipePrefix(url: string, prefix: string): Promise<string> {
  return withRedis(url, async (r) => {
    let cursor = '0';
    do {
      const [next, keys] = await r.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 10_000);
      cursor = next;
      if (keys.length > 0) await r.unlink(...keys);
    } while (cursor !== '0');
    return /redis_version:(\S+)/.exec(await r.info('server'))?.[1] ?? 'unknown';
  });
}

/** Runs `f` on a connection of its own to a plain Redis or a cluster (a cluster client), closed after. */
export async function withConn<T>(source: RedisSource, f: (r: Conn) => Promise<T>): Promise<T> {
  const r: Conn = isClusterSource(source) ? new Cluster(source.cluster, { lazyConnect: true, redisOptions: { protocol: 2 } }) : new Redis(source as string, { lazyConnect: true, protocol: 2 });
  await r.connect();
  try {
    return await f(r);
  } finally {
    r.disconnect();
  }
}
