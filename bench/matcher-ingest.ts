/**
 * Matcher ingest of location updates through Redis: gateway hubs' location writers → `loc` batches
 * in `{p}in` → the matcher decoding them into its engine. A benchmark, not a test: nothing here
 * asserts a speed.
 *
 * Each repetition measures three things on the same seeded walk:
 *   write      gateway side alone: every device's writer updated, flushed into Redis (matcher stopped)
 *   drain      matcher side alone: a new matcher consumes that backlog (its snapshot rebuild untimed);
 *              also per read batch: decode + apply time only, without the Redis read
 *   concurrent both at once: a running matcher, the gateways writing; until the matcher applied all
 * Updates/s count updates that reached the stream (a writer coalesces a device's updates between
 * flushes; each round here updates each device once and flushes, so none are coalesced).
 *
 *   node dist/bench/matcher-ingest.js [--devices 100000] [--updates 1000000] [--reps 5] ...
 */
import os from 'node:os';
import { CPU_ENGINES } from '../src/engines/index.js';
import { Prng } from '../src/workload/prng.js';
import type { Filter } from '../src/model/types.js';
import { RedisHub } from '../services/hub/redis.js';
import { RedisMatcher } from '../services/matcher/redis.js';
import { ENGINE_SIDE_LIMITS, type LocationWriter } from '../services/hub/port.js';
import { type RedisServer, startRedisServer } from '../test/support/redis-server.js';
import { ArgReader, type Fail, cliFail, parseArgs, runMain } from './lib/args.js';
import { describeMachine } from './lib/machine.js';
import { sinkNumber, sinkValue } from './lib/sink.js';
import { summarize } from './lib/stats.js';
import { ResultRun } from './lib/result-file.js';
import { wipePrefix } from './lib/redis.js';

const HELP = `Usage: node dist/bench/matcher-ingest.js [options]

  --devices N       devices, each with a location writer (default 100000)
  --subscribed N    devices that own a subscription of --filters anchored filters (default 10000)
  --filters N       anchored filters per subscription (default 10)
  --updates N       location updates per measurement, rounded up to whole rounds over the devices (default 1000000)
  --reps N          timed repetitions after one warm-up (default 5)
  --gateways N      gateway hubs sharing the devices (default 2)
  --flush-size N    hub flushSize: writers per flush and updates per loc entry (default 1024)
  --read-count N    matcher XREAD COUNT (default 256)
  --seed N          walk seed (default 1)
  --redis URL       use this Redis (its prefix bench-ingest: is wiped) instead of starting a redis-server
  --out PATH        result file (default bench/results/matcher-ingest.json)
  --help`;

const fail: Fail = cliFail('matcher-ingest', HELP);

const FLAGS = new Set(['help']);
const VALUED = new Set(['devices', 'subscribed', 'filters', 'updates', 'reps', 'gateways', 'flush-size', 'read-count', 'seed', 'redis', 'out']);

const PREFIX = 'bench-ingest:';
/** Milan, as the CPU benchmark's default region. */
const CENTER = { lat: 45.4642, lon: 9.19 };
const SPAN_DEG = 0.06;
/** Walk step bound, degrees (about 11 m). */
const STEP_DEG = 0.0001;

interface RepResult {
  updates: number;
  concurrentUpdates: number;
  writeMs: number;
  drainMs: number;
  concurrentMs: number;
  rebuildMs: number;
}

const log = (msg: string) => process.stderr.write(`${msg}\n`);

async function main(): Promise<void> {
  const a = parseArgs(process.argv.slice(2), FLAGS, VALUED, fail);
  const r = new ArgReader(a, fail);
  if (a.help) {
    process.stdout.write(`${HELP}\n`);
    return;
  }
  const devices = r.int('devices', 100_000, 1);
  const subscribed = Math.min(devices, r.int('subscribed', 10_000, 0));
  const filters = r.int('filters', 10, 1);
  const gateways = r.int('gateways', 2, 1);
  const rounds = Math.ceil(r.int('updates', 1_000_000, 1) / devices);
  const reps = r.int('reps', 5, 1);
  const flushSize = r.int('flush-size', 1024, 1);
  const readCount = r.int('read-count', 256, 1);
  const seed = r.int('seed', 1, 0);
  const run = new ResultRun({ out: a.out, defaultFile: 'bench/results/matcher-ingest.json', fail });
  const machine = run.machine;
  const loadBefore = os.loadavg();
  const params = { devices, subscribed, filters, gateways, rounds, updatesPerMeasurement: rounds * devices, reps, flushSize, readCount, seed };
  process.stdout.write(`machine: ${describeMachine(machine)}\nparams: ${JSON.stringify(params)}\n`);

  let server: RedisServer | null = null;
  const url = typeof a.redis === 'string' ? a.redis : (server = await startRedisServer()).url;
  const redisVersion = await wipe(url);

  const hubs: RedisHub[] = [];
  let matcher: RedisMatcher | null = null;
  try {
    for (let g = 0; g < gateways; g++) hubs.push(await RedisHub.connect({ redis: url, prefix: PREFIX, flushSize, publishTimeoutMs: 60_000 }));
    const ids = Array.from({ length: devices }, (_, i) => `device-${i}`);
    const writers: LocationWriter[] = ids.map((id, i) => hubs[i % gateways].locationWriter(id));
    const rng = new Prng(seed);
    const lat = new Float64Array(devices);
    const lon = new Float64Array(devices);
    for (let i = 0; i < devices; i++) {
      lat[i] = CENTER.lat + (rng.float() - 0.5) * SPAN_DEG;
      lon[i] = CENTER.lon + (rng.float() - 0.5) * SPAN_DEG;
    }
    const step = new Float64Array(2 * devices);
    for (let i = 0; i < step.length; i++) step[i] = (rng.float() * 2 - 1) * STEP_DEG;

    log(`setup: ${subscribed} subscriptions of ${filters} anchored filters, ${devices} initial positions`);
    const anchoredFilter = (k: number): Filter => ({ constraints: [{ name: 'kind', op: 'eq', value: k % 100 }], area: { radiusM: 100 } });
    for (let i = 0; i < subscribed; i += 200) {
      const batch: Promise<void>[] = [];
      for (let j = i; j < Math.min(subscribed, i + 200); j++) {
        batch.push(hubs[j % gateways].addSubscription(ids[j], { id: 's', filters: Array.from({ length: filters }, (_, f) => anchoredFilter(j + f)) }));
      }
      await Promise.all(batch);
    }
    for (let i = 0; i < devices; i++) writers[i].update(lat[i], lon[i]);
    await Promise.all(hubs.map((h) => h.flush()));

    /** `rounds` rounds: every device moves once per round; each round ends with a flush. */
    const produce = async (): Promise<{ n: number; ms: number }> => {
      const before = await locationsCounted(hubs[0]);
      const t0 = performance.now();
      for (let r = 0; r < rounds; r++) {
        const off = (r * 7919) % devices;
        for (let i = 0; i < devices; i++) {
          const k = 2 * ((i + off) % devices);
          let y = lat[i] + step[k];
          let x = lon[i] + step[k + 1];
          // Reflect at the region's edge.
          if (Math.abs(y - CENTER.lat) > SPAN_DEG / 2) y = lat[i] - step[k];
          if (Math.abs(x - CENTER.lon) > SPAN_DEG / 2) x = lon[i] - step[k + 1];
          lat[i] = y;
          lon[i] = x;
          writers[i].update(y, x);
        }
        await Promise.all(hubs.map((h) => h.flush()));
      }
      const ms = performance.now() - t0;
      return { n: (await locationsCounted(hubs[0])) - before, ms };
    };

    const batchSamples: number[] = []; // ns per update, decode + apply, per read batch
    let collect = false;
    let applied = 0;
    let waiter: { target: number; resolve: () => void } | null = null;
    const hooks = {
      onBatch(b: { entries: number; locations: number; ms: number }) {
        applied += b.locations;
        if (collect && b.locations >= 1000) batchSamples.push((b.ms * 1e6) / b.locations);
        if (waiter !== null && applied >= waiter.target) {
          waiter.resolve();
          waiter = null;
        }
      },
    };
    const untilApplied = (target: number) => (applied >= target ? Promise.resolve() : new Promise<void>((resolve) => (waiter = { target, resolve })));
    const startMatcher = async () => {
      const engine = CPU_ENGINES.fast({ limits: ENGINE_SIDE_LIMITS });
      const t0 = performance.now();
      const m = await RedisMatcher.start({ redis: url, prefix: PREFIX, engine, engineDetail: 'fast (bench)', readCount, hooks });
      return { m, rebuildMs: performance.now() - t0 };
    };

    ({ m: matcher } = await startMatcher());
    await untilApplied(devices); // the initial positions, so no rep counts them
    const results: RepResult[] = [];
    for (let rep = -1; rep < reps; rep++) {
      const label = rep < 0 ? 'warm-up' : `rep ${rep + 1}/${reps}`;
      collect = rep >= 0;
      // write + drain: matcher stopped while the gateways write, then a new one consumes the backlog.
      await matcher!.stop();
      matcher = null;
      const { n: updates, ms: writeMs } = await produce();
      applied = 0;
      const started = await startMatcher();
      matcher = started.m;
      const t0 = performance.now();
      await untilApplied(updates);
      const drainMs = performance.now() - t0;
      // concurrent: the gateways write while the matcher applies.
      applied = 0;
      const t1 = performance.now();
      const { n: updates2 } = await produce();
      await untilApplied(updates2);
      const concurrentMs = performance.now() - t1;
      sinkNumber(matcher.core.deviceCount);
      const r: RepResult = { updates, concurrentUpdates: updates2, writeMs, drainMs, concurrentMs, rebuildMs: started.rebuildMs };
      log(
        `${label}: ${updates} updates; write ${rate(updates, writeMs)}/s, drain ${rate(updates, drainMs)}/s, concurrent ${rate(updates2, concurrentMs)}/s (rebuild ${started.rebuildMs.toFixed(0)} ms, heap ${(process.memoryUsage().heapUsed / 2 ** 20).toFixed(0)} MiB)`,
      );
      if (rep >= 0) results.push(r);
    }

    const perSec = (pick: (r: RepResult) => number) => summarize(results.map((r) => (r.updates / pick(r)) * 1000));
    const batchRate = summarize(batchSamples.map((ns) => 1e9 / ns));
    const summary = {
      write: perSec((r) => r.writeMs),
      drain: perSec((r) => r.drainMs),
      concurrent: summarize(results.map((r) => (r.concurrentUpdates / r.concurrentMs) * 1000)),
      applyPerBatch: batchRate,
      rebuildMs: summarize(results.map((r) => r.rebuildMs)),
    };
    const table = [
      ['measure', 'min', 'median', 'p99', 'n'],
      ...(['write', 'drain', 'concurrent', 'applyPerBatch'] as const).map((k) => [`${k} updates/s`, fmt(summary[k].min), fmt(summary[k].median), fmt(summary[k].p99), String(summary[k].n)]),
    ];
    process.stdout.write(`${table.map((row) => row.map((c, i) => (i === 0 ? c.padEnd(26) : c.padStart(12))).join('')).join('\n')}\n`);
    process.stdout.write(`rebuild (snapshot of ${devices} positions, ${subscribed} subscriptions): median ${summary.rebuildMs.median.toFixed(0)} ms\n`);
    const doc = {
      schema: 'ambit-matcher-ingest/1',
      createdAt: new Date().toISOString(),
      machine,
      redis: redisVersion,
      // Other processes on the machine show here: the 1-minute load average before and after.
      loadAverage: { before: loadBefore[0], after: os.loadavg()[0] },
      params,
      method:
        'min/median/p99 over repetitions of updates/s (p99 is nearest rank: with few repetitions, the extreme); applyPerBatch: per XREAD batch of >= 1000 updates, decode + engine apply only. ' +
        'Redis, the gateways and the matcher share the machine (one process for hubs and matcher, one redis-server).',
      summary,
      reps: results,
      sink: sinkValue(),
    };
    run.write(doc);
    process.stdout.write(`wrote ${run.shown}\n`);
  } finally {
    for (const h of hubs) await h.close().catch(() => {});
    await matcher?.stop().catch(() => {});
    await server?.stop();
  }
}

async function locationsCounted(hub: RedisHub): Promise<number> {
  return (await hub.stats()).locationUpdates;
}

/** Deletes the benchmark's keys; returns the server's version. */
const wipe = (url: string) => wipePrefix(url, PREFIX);

function rate(n: number, ms: number): string {
  return fmt((n / ms) * 1000);
}

function fmt(x: number): string {
  return x >= 1e6 ? `${(x / 1e6).toFixed(2)}M` : x >= 1e3 ? `${(x / 1e3).toFixed(0)}k` : x.toFixed(0);
}

runMain('matcher-ingest', main);
