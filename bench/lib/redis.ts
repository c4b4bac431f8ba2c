/** A plain Redis connection for benchmarks that look at or clean up Redis directly. */
import { Redis } from 'ioredis';

/** Runs `f` on a connection of its own, closed after. */
export async function withRedis<T>(url: string, f: (r: Redis) => Promise<T>): Promise<T> {
  const r = new Redis(url, { lazyConnect: true, protocol: 2 });
  await r.connect();
  try {
    return await f(r);
  } finally {
    r.disconnect();
  }
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
