/**
 * Matcher failover in the Redis deployment: how long publishing stops when the leading matcher
 * dies and a warm standby takes over, against what a deployment without a standby pays (a cold
 * start: the engine rebuilt from Redis), at several subscription counts. A benchmark, not a test:
 * nothing here asserts a speed; it does count lost and duplicated notifications.
 *
 * Per size: N devices with one anchored subscription each and a position in a 20 km city, loaded
 * through gateway hubs; a leader and a standby matcher (the standby's start is timed: that is the
 * cold start). Then, per repetition, a publisher sends events at --rate through a gateway, the
 * leader is crashed (its connections dropped, as by kill -9), and the standby leads once the lease
 * lapses; a new standby is started (timed again) for the next repetition. Measured: takeover (crash
 * → the standby leads), the publish outage (the longest publish → answer time of publishes sent
 * around the crash), publish latency before the crash, and notifications stored vs the sum of the
 * answered reach (one subscription per device, so they must be equal).
 *
 *   node dist/bench/failover.js [--subscriptions 10000,100000,1000000] [--reps 3] [--lease-ms 2000] ...
 */
import os from 'node:os';
import { CPU_ENGINES } from '../src/engines/index.js';
import { Prng } from '../src/workload/prng.js';
import { RedisHub } from '../services/hub/redis.js';
import { RedisMatcher } from '../services/matcher/redis.js';
import { ENGINE_SIDE_LIMITS } from '../services/hub/port.js';
import { compareStreamIds } from '../services/redis/codec.js';
import { startRedisServer } from '../test/support/redis-server.js';
import { startRedisCluster } from '../test/support/redis-cluster.js';
import type { RedisSource } from '../services/redis/connection.js';
import { type Fail, cliFail, readCommandLine, runMain } from './lib/args.js';
import { describeMachine } from './lib/machine.js';
import { type Summary, summarize } from './lib/stats.js';
import { ResultRun } from './lib/result-file.js';
import { wipePrefix, withConn } from './lib/redis.js';

const HELP = `Usage: node dist/bench/failover.js [options]

  --subscriptions LIST  subscription counts, one device each (default 10000,100000,1000000)
  --reps N              takeovers per size (default 3)
  --lease-ms N          matcher lease (default 2000, the service default)
  --rate N              publishes per second during each takeover (default 200)
  --reach N             subscriptions an event reaches on average (default 10): the radius shrinks as
                        the count grows, so every size stores about the same notifications per second
  --seed N              positions seed (default 1)
  --redis URL           use this Redis (its prefix bench-failover: is wiped) instead of starting a redis-server
  --redis-nodes N       start a Redis Cluster of N masters (N >= 3, no replicas) for the run instead (AMBIT_REDIS_CLUSTER: a
                        new leader raises the fence of every device group before it leads)
  --out PATH            result file (default bench/results/failover.json)
  --help`;

const fail: Fail = cliFail('failover', HELP);
const FLAGS = new Set(['help']);
const VALUED = new Set(['subscriptions', 'reps', 'lease-ms', 'rate', 'reach', 'seed', 'redis', 'redis-nodes', 'out']);
const PREFIX = 'bench-failover:';
const CENTER = { lat: 45.4642, lon: 9.19 };
/** About 20 km across. */
const SPAN_DEG = 0.18;

const log = (msg: string) => process.stderr.write(`${msg}\n`);

interface Takeover {
  takeoverMs: number;
  outageMs: number;
  standbyStartMs: number;
  publishes: number;
  reached: number;
  notificationsStored: number;
}

interface SizeResult {
  subscriptions: number;
  radiusM: number;
  loadMs: number;
  coldStartMs: Summary;
  takeoverMs: Summary;
  outageMs: Summary;
  publishLatencyMs: Summary;
  lostOrDuplicated: number;
  takeovers: Takeover[];
}

async function main(): Promise<void> {
  const cl = readCommandLine(process.argv.slice(2), FLAGS, VALUED, fail, HELP);
  if (cl === null) return;
  const { a, r } = cl;
  const sizes = (r.str('subscriptions') ?? '10000,100000,1000000').split(',').map((s) => {
    const n = Number(s.replace(/_/g, ''));
    if (!Number.isInteger(n) || n < 1) fail(`--subscriptions must list positive integers, got ${JSON.stringify(s)}`);
    return n;
  });
  const reps = r.int('reps', 3, 1);
  const leaseMs = r.int('lease-ms', 2000, 100);
  const rate = r.int('rate', 200, 1);
  const reach = r.int('reach', 10, 1);
  const seed = r.int('seed', 1, 0);
  const run = new ResultRun({ out: a.out, defaultFile: 'bench/results/failover.json', fail });
  const redisNodes = r.int('redis-nodes', 0, 0);
  if (redisNodes > 0 && redisNodes < 3) fail('--redis-nodes must be at least 3 (a Redis Cluster)');
  if (redisNodes > 0 && typeof a.redis === 'string') fail('--redis and --redis-nodes exclude each other');
  const params = { sizes, reps, leaseMs, rate, reach, seed, engine: 'fast', redisNodes };
  process.stdout.write(`machine: ${describeMachine(run.machine)}\nparams: ${JSON.stringify(params)}\n`);
  const loadBefore = os.loadavg();
  let server: { stop(): Promise<void> } | null = null;
  let url: RedisSource;
  if (redisNodes > 0) {
    const c = await startRedisCluster({ masters: redisNodes, replicasPerMaster: 0 });
    server = c;
    url = { cluster: c.nodes };
  } else if (typeof a.redis === 'string') url = a.redis;
  else {
    const s1 = await startRedisServer();
    server = s1;
    url = s1.url;
  }
  const results: SizeResult[] = [];
  try {
    for (const n of sizes) results.push(await oneSize(url, n, { reps, leaseMs, rate, radiusM: radiusFor(n, reach), seed }));
  } finally {
    if (typeof url === 'string') await wipe(url);
    await server?.stop();
  }
  const fmt = (s: Summary) => `${s.min.toFixed(0)} / ${s.median.toFixed(0)} / ${s.p99.toFixed(0)}`;
  const rows = [
    ['subscriptions', 'cold start ms', 'takeover ms', 'outage ms', 'publish ms', 'lost+dup'],
    ...results.map((x) => [String(x.subscriptions), fmt(x.coldStartMs), fmt(x.takeoverMs), fmt(x.outageMs), fmt(x.publishLatencyMs), String(x.lostOrDuplicated)]),
  ];
  process.stdout.write('min / median / p99 (nearest rank)\n');
  process.stdout.write(`${rows.map((row) => row.map((c, i) => (i === 0 ? c.padEnd(14) : c.padStart(22))).join('')).join('\n')}\n`);
  run.write({
    schema: 'ambit-failover/1',
    createdAt: new Date().toISOString(),
    machine: run.machine,
    loadAverage: { before: loadBefore[0], after: os.loadavg()[0] },
    params,
    method:
      'Per size, one leader and one standby matcher (fast engine) in one process with two gateway hubs, one redis-server on the same machine. ' +
      'cold start: RedisMatcher.start of a new matcher (engine rebuilt from Redis, stream replayed), what a deployment without a standby waits after a crash besides the process start. ' +
      'takeover: leader crash (connections dropped, as kill -9) until the standby leads. outage: the longest publish-to-answer time of publishes sent from 0.5 s before the crash on. ' +
      'publish ms: answer times before the crash. lostOrDuplicated: |notifications stored - sum of reached| over all takeovers (one subscription per device).',
    results,
  });
  process.stdout.write(`wrote ${run.shown}\n`);
}

async function oneSize(url: RedisSource, n: number, o: { reps: number; leaseMs: number; rate: number; radiusM: number; seed: number }): Promise<SizeResult> {
  // A fresh prefix per size (a cluster is not wiped, a plain Redis is).
  const prefix = `${PREFIX}${n}:`;
  if (typeof url === 'string') await wipe(url);
  const hubs = [0, 1].map(() => RedisHub.connect({ redis: url, prefix, publishTimeoutMs: 120_000 }));
  const [hubA, hubB] = await Promise.all(hubs);
  const matchers: RedisMatcher[] = [];
  const start = async () => {
    const t0 = performance.now();
    const m = await RedisMatcher.start({ redis: url, prefix, engine: CPU_ENGINES.fast({ limits: ENGINE_SIDE_LIMITS }), engineDetail: 'fast', leaseMs: o.leaseMs, readCount: 1024 });
    matchers.push(m);
    return { m, ms: performance.now() - t0 };
  };
  try {
    let leader = (await start()).m;
    const rng = new Prng(o.seed);
    const t0 = performance.now();
    const chunk = 2000;
    for (let i = 0; i < n; i += chunk) {
      const adds: Promise<void>[] = [];
      const moves: { device: string; lat: number; lon: number }[] = [];
      for (let j = i; j < Math.min(n, i + chunk); j++) {
        const device = `d${j}`;
        adds.push((j % 2 === 0 ? hubA : hubB).addSubscription(device, { id: 's', filters: [{ constraints: [], area: { radiusM: o.radiusM } }] }));
        moves.push({ device, lat: CENTER.lat + (rng.float() - 0.5) * SPAN_DEG, lon: CENTER.lon + (rng.float() - 0.5) * SPAN_DEG });
      }
      await Promise.all(adds);
      await hubA.updateLocations(moves);
      if (i % 100_000 === 0 && i > 0) log(`${n}: loaded ${i}`);
    }
    await caughtUp(url, hubA, leader);
    const loadMs = performance.now() - t0;
    log(`${n}: ${n} subscriptions and positions loaded in ${(loadMs / 1000).toFixed(1)} s; the leader has applied them`);
    const cold: number[] = [];
    let standby = await start();
    cold.push(standby.ms);
    await caughtUp(url, hubA, standby.m);
    const takeovers: Takeover[] = [];
    const latencies: number[] = [];
    let seq = 0;
    for (let rep = 0; rep < o.reps; rep++) {
      const before = await stored(hubA);
      const answers: { sent: number; done: Promise<{ at: number; reached: number }> }[] = [];
      let crashAt = Infinity;
      let stop = false;
      const publishing = (async () => {
        const every = 1000 / o.rate;
        const begin = performance.now();
        for (let k = 0; !stop; k++) {
          const due = begin + k * every;
          const wait = due - performance.now();
          if (wait > 0) await new Promise((res) => setTimeout(res, wait));
          const ev = { id: `e${++seq}`, lat: CENTER.lat + (rng.float() - 0.5) * SPAN_DEG, lon: CENTER.lon + (rng.float() - 0.5) * SPAN_DEG, attributes: { k: seq } };
          const sent = performance.now();
          answers.push({ sent, done: hubB.publish([ev]).then(([res]) => ({ at: performance.now(), reached: res.reached })) });
        }
      })();
      await new Promise((res) => setTimeout(res, 1500));
      crashAt = performance.now();
      const dying = leader.crash();
      await standby.m.whenRole('leader');
      const takeoverMs = performance.now() - crashAt;
      await dying;
      leader = standby.m;
      await new Promise((res) => setTimeout(res, 1000));
      stop = true;
      await publishing;
      const done = await Promise.all(answers.map(async (x) => ({ sent: x.sent, ...(await x.done) })));
      let outageMs = 0;
      let reached = 0;
      for (const d of done) {
        reached += d.reached;
        if (d.sent >= crashAt - 500) outageMs = Math.max(outageMs, d.at - d.sent);
        else latencies.push(d.at - d.sent);
      }
      const notificationsStored = (await stored(hubA)) - before;
      // The next standby, cold-started while the new leader serves.
      standby = await start();
      cold.push(standby.ms);
      await caughtUp(url, hubA, standby.m);
      takeovers.push({ takeoverMs, outageMs, standbyStartMs: standby.ms, publishes: done.length, reached, notificationsStored });
      log(`${n} rep ${rep}: takeover ${takeoverMs.toFixed(0)} ms, outage ${outageMs.toFixed(0)} ms, ${done.length} publishes, reached ${reached}, stored ${notificationsStored}; cold start ${standby.ms.toFixed(0)} ms`);
    }
    return {
      subscriptions: n,
      radiusM: o.radiusM,
      loadMs,
      coldStartMs: summarize(cold),
      takeoverMs: summarize(takeovers.map((t) => t.takeoverMs)),
      outageMs: summarize(takeovers.map((t) => t.outageMs)),
      publishLatencyMs: summarize(latencies),
      lostOrDuplicated: takeovers.reduce((s, t) => s + Math.abs(t.notificationsStored - t.reached), 0),
      takeovers,
    };
  } finally {
    await hubA.close().catch(() => {});
    await hubB.close().catch(() => {});
    for (const m of matchers) await m.stop().catch(() => {});
  }
}

/** The radius at which an event reaches `reach` of `n` devices spread over the city, on average. */
function radiusFor(n: number, reach: number): number {
  const m = SPAN_DEG * 111_195;
  const density = n / (m * m * Math.cos((CENTER.lat * Math.PI) / 180));
  return Math.max(1, Math.round(Math.sqrt(reach / (density * Math.PI))));
}

const wipe = (url: string) => wipePrefix(url, PREFIX);

/** Resolves once `m` has applied everything now in the command stream. */
async function caughtUp(url: RedisSource, hub: RedisHub, m: RedisMatcher): Promise<void> {
  const last = await withConn(url, async (r) => (await r.xrevrange(hub.keys.in, '+', '-', 'COUNT', 1))[0]?.[0] ?? '0-0');
  while (compareStreamIds(m.position, last) < 0) await new Promise((res) => setTimeout(res, 20));
}

/** Notifications stored in the deployment (summed over the device groups on a cluster). */
async function stored(hub: RedisHub): Promise<number> {
  return (await hub.stats()).notifications;
}

runMain('failover', main);
