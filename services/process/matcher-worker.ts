/**
 * One matcher partition's thread (roles.ts starts one per partition when a process serves several):
 * a RedisMatcher for the partition, with its own engine and connections, so the partitions of one
 * process match on as many cores. It posts `{ ready, engineDetail }` once it runs (or `{ failed }`),
 * answers `{ t: 'stats' }` with its figures and stops on 'stop'.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { hubStats } from '../matcher/core.js';
import type { RedisMatcherOptions } from '../matcher/redis.js';
import { RebuildingMatcher } from '../matcher/rebuilding.js';
import { rootLogger } from './log.js';

export interface MatcherWorkerData {
  options: Omit<RedisMatcherOptions, 'log' | 'hooks' | 'now'>;
  logLevel: string;
}

const data = workerData as MatcherWorkerData;
if (parentPort !== null && data?.options !== undefined) {
  const port = parentPort;
  const log = rootLogger(data.logLevel).child({ component: 'matcher', partition: data.options.partition ?? 0 });
  let r: RebuildingMatcher;
  try {
    // Rebuilt from Redis in place if its stream is ever trimmed past what it read.
    r = await RebuildingMatcher.start({ ...data.options, log });
  } catch (err) {
    port.postMessage({ failed: err instanceof Error ? err.message : String(err) });
    port.close();
    throw err;
  }
  port.postMessage({ ready: true, engineDetail: r.matcher.engineDetail, engine: r.matcher.core.engine.name });
  port.on('message', (msg: unknown) => {
    if (msg === 'stop') {
      void r.stop().finally(() => port.close());
      return;
    }
    const ask = msg as { t?: string; id?: number };
    if (ask?.t === 'stats') {
      const m = r.matcher;
      const s = hubStats(m.core, { mode: 'redis', engineDetail: m.engineDetail, devices: m.devices, eventsPublished: m.eventsMatchedCount, notifications: 0, notificationsDropped: 0, locationUpdates: m.locationsApplied });
      port.postMessage({ t: 'stats', id: ask.id, stats: { ...s, extra: { ...s.extra, matcherLeader: m.role === 'leader' ? 1 : 0, matcherEpoch: m.epoch, fencedWrites: m.fencedWrites, matchersServed: 1, matchersReady: m.redisReady ? 1 : 0, matcherRebuilds: r.rebuilds } } });
    }
  });
}
