/**
 * The process roles server.ts starts when REDIS_URL is set: the matcher (engine fed from Redis)
 * and the gateway's hub. Thin: options come from the validated ServerConfig.
 */
import type { Logger } from 'pino';
import type { ServerConfig } from './config.js';
import type { Hub, HubStats } from '../hub/port.js';
import { RedisHub } from '../hub/redis.js';
import { hubStats } from '../matcher/core.js';
import { RebuildingMatcher } from '../matcher/rebuilding.js';
import { type RedisSource, clusterSourceFromUrl } from '../redis/connection.js';
import type { RedisOptions } from 'ioredis';
import { Worker } from 'node:worker_threads';
import { PartitionedHub, sumHubStats } from '../hub/partitioned.js';
import type { MatcherWorkerData } from './matcher-worker.js';

/** The Redis source of a config: REDIS_URL, or the seed nodes of a cluster it names. */
export function redisSource(config: ServerConfig): RedisSource {
  if (config.redisUrl === null) throw new Error('redis roles: REDIS_URL is not set');
  const tls = config.redisTls;
  if (config.redisCluster) {
    const source = clusterSourceFromUrl(config.redisUrl);
    if (tls !== null) source.options = { ...source.options, redisOptions: { ...source.options?.redisOptions, tls: { ...tls } } };
    return source;
  }
  return tls === null ? config.redisUrl : redisUrlOptions(config.redisUrl, tls);
}

/** A plain Redis's URL as ioredis options, with TLS material (its CA, a client certificate). */
export function redisUrlOptions(url: string, tls: NonNullable<ServerConfig['redisTls']>): RedisOptions {
  const u = new URL(url);
  const db = u.pathname.replace(/^\//, '');
  return {
    host: u.hostname.replace(/^\[|\]$/g, ''),
    port: u.port === '' ? 6379 : Number(u.port),
    ...(u.username === '' ? {} : { username: decodeURIComponent(u.username) }),
    ...(u.password === '' ? {} : { password: decodeURIComponent(u.password) }),
    ...(db === '' ? {} : { db: Number(db) }),
    // The name checked against the server's certificate is the URL's host.
    tls: { ...tls, servername: u.hostname.replace(/^\[|\]$/g, '') },
  };
}

/** The device-group setting for the hub and matcher (cluster only). */
const groups = (config: ServerConfig) => (config.redisCluster ? { deviceGroups: config.redisDeviceGroups } : {});

export interface MatcherRole {
  engineDetail: string;
  /** The matcher's own figures, for its /metrics. */
  stats(): Promise<HubStats>;
  stop(): Promise<void>;
}

export async function startMatcherRole(config: ServerConfig, log: Logger): Promise<MatcherRole> {
  const k = config.matcherPartitions;
  const served = config.matcherPartition === null ? Array.from({ length: k }, (_, i) => i) : [config.matcherPartition];
  if (served.length > 1) return startMatcherThreads(config, served, log);
  const partition = served[0];
  // Rebuilt from Redis in place if its stream is ever trimmed past what it read.
  const r = await RebuildingMatcher.start({ ...matcherOptions(config, partition), log });
  const first = r.matcher;
  log.info({ engine: first.core.engine.name, detail: first.engineDetail, mode: 'redis', offset: first.offset, partition, partitions: k }, `engine ${first.core.engine.name}: ${first.engineDetail}${config.geo !== null ? ` (${partition < config.geo.shards ? 'geographic' : 'wide'} shard ${partition} of ${k})` : k > 1 ? ` (matcher partition ${partition} of ${k})` : ''}`);
  // Notifications are counted by the deliver script in Redis; gateways report them.
  const stats = async (): Promise<HubStats> => {
    const m = r.matcher;
    const s = await hubStats(m.core, { mode: 'redis', engineDetail: m.engineDetail, devices: m.devices, eventsPublished: m.eventsMatchedCount, notifications: 0, notificationsDropped: 0, locationUpdates: m.locationsApplied });
    return { ...s, extra: { ...s.extra, matcherLeader: m.role === 'leader', matcherEpoch: m.epoch, fencedWrites: m.fencedWrites, matchersServed: 1, matchersReady: m.redisReady ? 1 : 0, restoredFrom: m.restoredFrom.from, restoreMs: Math.round(m.restoredFrom.ms), matcherRebuilds: r.rebuilds } };
  };
  return { engineDetail: first.engineDetail, stats, stop: () => r.stop() };
}

function matcherOptions(config: ServerConfig, partition: number) {
  const k = config.matcherPartitions;
  return {
    redis: redisSource(config),
    prefix: config.redisPrefix,
    ...groups(config),
    ...(config.geo !== null ? { geo: config.geo, partition } : k > 1 ? { partitions: k, partition } : {}),
    engine: config.engine,
    gpuCpuMirror: config.gpuCpuMirror,
    retention: config.retention,
    leaseMs: config.matcherLeaseMs,
    dedupeWindowMs: config.dedupe.windowMs,
    ...(config.snapshotDir === null ? {} : { snapshot: { dir: config.snapshotDir, intervalMs: config.snapshotIntervalS * 1000 } }),
    stuckReadMs: config.stuckReadS * 1000,
    handOverWaitMs: config.handOverWaitS * 1000,
    patterns: { latenessMs: config.patternLatenessMs, retainedPerElement: config.patternRetainedPerElement, sequencer: config.patternSequencer },
  };
}

/**
 * Several matcher partitions in one process: a thread each (matcher-worker.ts), so they match on
 * as many cores. A thread that dies stops the process (exit 1): its partition would stop matching.
 */
async function startMatcherThreads(config: ServerConfig, partitions: number[], log: Logger): Promise<MatcherRole> {
  const script = new URL('./matcher-worker.js', import.meta.url);
  let stopping = false;
  const started = await Promise.allSettled(
    partitions.map(
      (partition) =>
        new Promise<{ w: Worker; detail: string }>((resolve, reject) => {
          const data: MatcherWorkerData = { options: matcherOptions(config, partition), logLevel: config.logLevel };
          const w = new Worker(script, { workerData: data });
          let running = false;
          w.once('message', (m: { ready?: boolean; engineDetail?: string; failed?: string }) => {
            running = m.ready === true;
            if (running) resolve({ w, detail: m.engineDetail ?? '' });
            else reject(new Error(`matcher partition ${partition}: ${m.failed ?? JSON.stringify(m)}`));
          });
          w.once('error', reject);
          w.once('exit', (code) => {
            // A thread that never ran failed its start, which the caller reports.
            if (stopping || !running) {
              reject(new Error(`matcher partition ${partition}: its thread exited (${code}) before it ran`));
              return;
            }
            log.fatal({ partition, code }, `matcher partition ${partition}'s thread exited (${code}); the process stops`);
            process.exit(1);
          });
        }),
    ),
  );
  const failure = started.find((r): r is PromiseRejectedResult => r.status === 'rejected');
  const workers = started.filter((r): r is PromiseFulfilledResult<{ w: Worker; detail: string }> => r.status === 'fulfilled').map((r) => r.value);
  if (failure !== undefined) {
    // The threads that did start stop again; the process reports the one that did not.
    stopping = true;
    await Promise.all(workers.map(({ w }) => new Promise<void>((resolve) => (w.once('exit', () => resolve()), w.postMessage('stop')))));
    throw failure.reason;
  }
  log.info({ partitions, of: config.matcherPartitions, detail: workers[0].detail }, `matcher partitions ${partitions.join(', ')} of ${config.matcherPartitions}, a thread each: ${workers[0].detail}`);
  let seq = 0;
  const ask = (w: Worker) =>
    new Promise<HubStats>((resolve, reject) => {
      const id = ++seq;
      // A thread that does not answer does not keep a listener per question.
      const timer = setTimeout(() => {
        w.off('message', on);
        reject(new Error('a matcher partition thread did not answer for its stats within 5 s'));
      }, 5000);
      const on = (m: { t?: string; id?: number; stats?: HubStats }) => {
        if (m.t !== 'stats' || m.id !== id) return;
        clearTimeout(timer);
        w.off('message', on);
        resolve(m.stats!);
      };
      w.on('message', on);
      w.postMessage({ t: 'stats', id });
    });
  return {
    engineDetail: workers[0].detail,
    async stats() {
      // Leaders and fenced writes add up (the threads report numbers), the rest as for any partitions.
      return sumHubStats(await Promise.all(workers.map(({ w }) => ask(w))));
    },
    async stop() {
      stopping = true;
      await Promise.all(workers.map(({ w }) => new Promise<void>((resolve) => (w.once('exit', () => resolve()), w.postMessage('stop')))));
    },
  };
}

export async function connectGatewayHub(config: ServerConfig, log: Logger): Promise<Hub> {
  const k = config.matcherPartitions;
  const one = (partition: number) =>
    RedisHub.connect({
      redis: redisSource(config),
      prefix: config.redisPrefix,
      ...groups(config),
      ...(config.geo !== null ? { geo: config.geo } : k > 1 ? { partitions: k, partition } : {}),
      log,
      maxSubscriptionsPerDevice: config.maxSubscriptionsPerDevice,
      inMaxLen: config.commandStreamMaxLen,
      dedupeWindowMs: config.dedupe.windowMs,
    });
  if (k === 1 || config.geo !== null) {
    // One hub: a single matcher, or every shard of a deployment sharded by space (it places devices and routes publishes).
    const hub = await one(0);
    log.info({ gatewayId: hub.gatewayId }, `redis hub connected as gateway ${hub.gatewayId}`);
    return hub;
  }
  // One hub per matcher partition: a device's calls go to its partition, a publish to all.
  const parts = await Promise.all(Array.from({ length: k }, (_, i) => one(i)));
  log.info({ gatewayIds: parts.map((p) => p.gatewayId), partitions: k }, `redis hub connected to ${k} matcher partitions`);
  return new PartitionedHub(parts);
}
