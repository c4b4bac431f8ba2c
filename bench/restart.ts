/**
 * Matcher restart time: a matcher that starts from its snapshot file against one that reads every
 * subscription and position back from Redis (what a deployment without snapshots does), at several
 * subscription counts, each start in a fresh process as after a crash or an upgrade. A benchmark,
 * not a test: it asserts no speed; it does check each start holds every subscription and position.
 *
 * Per size: the state is written into Redis as gateways leave it (each device's subscriptions in
 * its hash, its position, the device list), then 1000 more subscription changes go through a
 * gateway hub so the command stream holds commands to replay. A first process starts a matcher
 * (from Redis), writes a snapshot while idle (timed, with its size) and stops (which writes it
 * again, as every clean stop does). Then, --reps times each, alternating: a process whose matcher
 * starts from Redis, and one whose matcher starts from the snapshot. Timed: RedisMatcher.start
 * until the matcher has applied the stream's last entry (what publishing waits for after the
 * process is up), and the process's peak RSS.
 *
 *   node dist/bench/restart.js [--subscriptions 100000,1000000] [--per-device 1] [--reps 3] [--engine fast]
 */
import { spawn } from 'node:child_process';
import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { RedisHub } from '../services/hub/redis.js';
import { RedisMatcher } from '../services/matcher/redis.js';
import { type EngineChoice, ENGINE_CHOICES } from '../services/matcher/engine.js';
import { compareStreamIds, encodePosition } from '../services/redis/codec.js';
import { Keys, MAX_MATCHER_PARTITIONS } from '../services/redis/keys.js';
import { layoutFor } from '../services/redis/layout.js';
import { devicePart } from '../services/hub/port.js';
import { PartitionedHub } from '../services/hub/partitioned.js';
import { Prng } from '../src/workload/prng.js';
import { startRedisServer } from '../test/support/redis-server.js';
import { type Fail, cliFail, readCommandLine, runMain } from './lib/args.js';
import { heapLimitMb } from './lib/fork.js';
import { describeMachine } from './lib/machine.js';
import { Progress } from './lib/progress.js';
import { ResultRun } from './lib/result-file.js';
import { withRedis, wipePrefix } from './lib/redis.js';
import { type Summary, summarize } from './lib/stats.js';
import { linePlot } from './lib/svg.js';

const HELP = `Usage: node dist/bench/restart.js [options]

  --subscriptions LIST  subscription counts (default 100000,1000000)
  --per-device N        subscriptions per device (default 1; devices = subscriptions / N)
  --partitions K        matcher partitions (AMBIT_MATCHER_PARTITIONS): devices split over K, and each start
                        runs K matchers in threads of one process, as AMBIT_MATCHER_PARTITION=all does (default 1)
  --reps N              starts of each kind per size (default 3)
  --engine NAME         the matcher's engine: ${ENGINE_CHOICES.join(', ')} (default fast)
  --redis URL           use this Redis (its prefix bench-restart: is wiped) instead of starting a redis-server
  --dir PATH            where the snapshot files go (default: a temporary directory, removed at the end)
  --seed N              workload seed (default 1)
  --out PATH            result file (default bench/results/restart.json; the plot beside it, .svg)
  --help`;

const fail: Fail = cliFail('restart', HELP);
const FLAGS = new Set(['help']);
const VALUED = new Set(['subscriptions', 'per-device', 'partitions', 'reps', 'engine', 'redis', 'dir', 'seed', 'out']);
const PREFIX = 'bench-restart:';
const CENTER = { lat: 45.4642, lon: 9.19 };
const SPAN_DEG = 0.18;

const log = (msg: string) => process.stderr.write(`${msg}\n`);

/** What a child process reports on its last stdout line. */
interface ChildReport {
  startMs: number;
  restoredFrom: 'snapshot' | 'redis';
  replayed: number;
  subscriptions: number;
  devices: number;
  peakRssBytes: number;
  snapshotMs?: number;
  snapshotBytes?: number;
  stopMs?: number;
}

interface SizeResult {
  subscriptions: number;
  devices: number;
  loadMs: number;
  fromRedisMs: Summary;
  fromSnapshotMs: Summary;
  speedup: number;
  snapshotWriteMs: number;
  snapshotBytes: number;
  bytesPerSubscription: number;
  stopWithSnapshotMs: number;
  peakRssFromRedisBytes: number;
  peakRssFromSnapshotBytes: number;
  starts: { kind: 'redis' | 'snapshot'; ms: number; peakRssBytes: number; replayed: number }[];
}

async function main(): Promise<void> {
  if (!isMainThread) return partitionThread(workerData as ThreadJob);
  if (process.argv[2] === '--child') return child(JSON.parse(process.argv[3]) as ChildJob);
  const cl = readCommandLine(process.argv.slice(2), FLAGS, VALUED, fail, HELP);
  if (cl === null) return;
  const { a, r } = cl;
  const sizes = (r.str('subscriptions') ?? '100000,1000000').split(',').map((s) => {
    const n = Number(s.replace(/_/g, ''));
    if (!Number.isInteger(n) || n < 1) fail(`--subscriptions must list positive integers, got ${JSON.stringify(s)}`);
    return n;
  });
  const perDevice = r.int('per-device', 1, 1);
  const partitions = r.int('partitions', 1, 1);
  if (partitions > MAX_MATCHER_PARTITIONS) fail(`--partitions must be at most ${MAX_MATCHER_PARTITIONS}`);
  const reps = r.int('reps', 3, 1);
  const seed = r.int('seed', 1, 0);
  const engine = (r.str('engine') ?? 'fast') as EngineChoice;
  if (!ENGINE_CHOICES.includes(engine)) fail(`--engine must be one of ${ENGINE_CHOICES.join(', ')}, got ${JSON.stringify(engine)}`);
  const run = new ResultRun({ out: a.out, defaultFile: 'bench/results/restart.json', fail });
  const dir = typeof a.dir === 'string' ? path.resolve(a.dir) : mkdtempSync(path.join(os.tmpdir(), 'ambit-restart-'));
  const params = { sizes, perDevice, partitions, reps, engine, seed, heapLimitMb: heapLimitMb() };
  process.stdout.write(`machine: ${describeMachine(run.machine)}\nparams: ${JSON.stringify(params)}\nsnapshots in ${dir}\n`);
  let server: { stop(): Promise<void> } | null = null;
  let url: string;
  if (typeof a.redis === 'string') url = a.redis;
  else {
    const s = await startRedisServer();
    server = s;
    url = s.url;
  }
  const results: SizeResult[] = [];
  try {
    for (const n of sizes) {
      results.push(await oneSize(url, dir, n, { perDevice, partitions, reps, engine, seed }));
      writeResults(run, params, results);
    }
  } finally {
    await wipePrefix(url, PREFIX);
    await server?.stop();
    if (typeof a.dir !== 'string') rmSync(dir, { recursive: true, force: true });
  }
  const fmt = (s: Summary) => `${(s.min / 1000).toFixed(2)} / ${(s.median / 1000).toFixed(2)} / ${(s.p99 / 1000).toFixed(2)}`;
  const rows = [
    ['subscriptions', 'from Redis s', 'from snapshot s', 'speed-up', 'write s', 'file MB', 'B/sub', 'RSS GB redis/snap'],
    ...results.map((x) => [
      String(x.subscriptions),
      fmt(x.fromRedisMs),
      fmt(x.fromSnapshotMs),
      `${x.speedup.toFixed(1)}x`,
      (x.snapshotWriteMs / 1000).toFixed(2),
      (x.snapshotBytes / 1e6).toFixed(1),
      x.bytesPerSubscription.toFixed(0),
      `${(x.peakRssFromRedisBytes / 1e9).toFixed(2)} / ${(x.peakRssFromSnapshotBytes / 1e9).toFixed(2)}`,
    ]),
  ];
  process.stdout.write('start times min / median / p99 (nearest rank)\n');
  process.stdout.write(`${rows.map((row) => row.map((c, i) => (i === 0 ? c.padEnd(14) : c.padStart(20))).join('')).join('\n')}\n`);
  process.stdout.write(`wrote ${run.shown} and its plot\n`);
}

function writeResults(run: ResultRun, params: object, results: SizeResult[]): void {
  run.write({
    schema: 'ambit-restart/1',
    createdAt: new Date().toISOString(),
    machine: run.machine,
    params,
    method:
      'Per size: the state written into one redis-server as gateways leave it, plus 1000 subscription changes through a gateway hub. ' +
      'Each start is a fresh node process (--max-old-space-size as params) with one thread per matcher partition, timed from before the threads start until the RedisMatcher.start of every thread has returned and the matcher has applied the last entry of the stream: from Redis = every stored subscription and position read back ' +
      '(SSCAN + HGETALL pipelines, HSCAN), then the stream replayed from the stored offset; from snapshot = the file checked whole (SHA-256), read, and the commands after its start applied. ' +
      'Starts alternate between the two kinds. snapshotWriteMs: one snapshot per partition written by idle matchers (the slowest); stopWithSnapshotMs: a clean stop, which writes one. Peak RSS of the process from /proc (VmHWM).',
    results,
  });
  const series = [
    { name: 'from Redis (median)', color: '#d62728', marker: 'square' as const, points: results.map((x) => [x.subscriptions, x.fromRedisMs.median / 1000] as const) },
    { name: 'from snapshot (median)', color: '#1f77b4', marker: 'circle' as const, points: results.map((x) => [x.subscriptions, x.fromSnapshotMs.median / 1000] as const) },
    { name: 'snapshot write', color: '#7f7f7f', dash: '4 2', marker: 'triangle' as const, points: results.map((x) => [x.subscriptions, x.snapshotWriteMs / 1000] as const) },
  ];
  const k = (params as { partitions: number }).partitions;
  const svg = linePlot({ title: `Matcher start: from Redis vs from its snapshot (${k} partition${k > 1 ? 's' : ''}; ${run.machine.cpu}, ${run.machine.logicalCores} cores)`, xLabel: 'subscriptions', yLabel: 'seconds', series, logX: true, logY: true });
  writeFileSync(run.path.replace(/\.json$/, '') + '.svg', svg);
}

async function oneSize(url: string, dir: string, n: number, o: { perDevice: number; partitions: number; reps: number; engine: EngineChoice; seed: number }): Promise<SizeResult> {
  await wipePrefix(url, PREFIX);
  rmSync(dir, { recursive: true, force: true });
  const devices = Math.ceil(n / o.perDevice);
  const t0 = performance.now();
  await load(url, n, devices, o.perDevice, o.partitions, o.seed);
  const loadMs = performance.now() - t0;
  log(`${n}: state written in ${(loadMs / 1000).toFixed(1)} s`);
  const job = (kind: ChildJob['kind']): ChildJob => ({ kind, url, dir, engine: o.engine, partitions: o.partitions });
  const first = await runChild(job('write'));
  check(first, n, devices, 'the first start');
  log(`${n}: snapshot of ${((first.snapshotBytes ?? 0) / 1e6).toFixed(1)} MB written in ${((first.snapshotMs ?? 0) / 1000).toFixed(2)} s; a clean stop (writing it again) took ${((first.stopMs ?? 0) / 1000).toFixed(2)} s`);
  const starts: SizeResult['starts'] = [];
  for (let rep = 0; rep < o.reps; rep++) {
    for (const kind of ['redis', 'snapshot'] as const) {
      const rep1 = await runChild(job(kind));
      check(rep1, n, devices, `a start from ${kind}`);
      if (rep1.restoredFrom !== kind) throw new Error(`restart: a start meant to be from ${kind} was from ${rep1.restoredFrom}`);
      starts.push({ kind, ms: rep1.startMs, peakRssBytes: rep1.peakRssBytes, replayed: rep1.replayed });
      log(`${n} rep ${rep}: from ${kind} in ${(rep1.startMs / 1000).toFixed(2)} s, peak RSS ${(rep1.peakRssBytes / 1e9).toFixed(2)} GB`);
    }
  }
  const of = (kind: 'redis' | 'snapshot') => starts.filter((s) => s.kind === kind);
  const fromRedisMs = summarize(of('redis').map((s) => s.ms));
  const fromSnapshotMs = summarize(of('snapshot').map((s) => s.ms));
  return {
    subscriptions: n,
    devices,
    loadMs,
    fromRedisMs,
    fromSnapshotMs,
    speedup: fromRedisMs.median / fromSnapshotMs.median,
    snapshotWriteMs: first.snapshotMs ?? NaN,
    snapshotBytes: first.snapshotBytes ?? NaN,
    bytesPerSubscription: (first.snapshotBytes ?? NaN) / n,
    stopWithSnapshotMs: first.stopMs ?? NaN,
    peakRssFromRedisBytes: Math.max(...of('redis').map((s) => s.peakRssBytes)),
    peakRssFromSnapshotBytes: Math.max(...of('snapshot').map((s) => s.peakRssBytes)),
    starts,
  };
}

function check(r: ChildReport, n: number, devices: number, what: string): void {
  if (r.subscriptions !== n || r.devices !== devices) throw new Error(`restart: ${what} holds ${r.subscriptions} subscriptions and ${r.devices} positioned devices, not ${n} and ${devices}`);
}

/** Each device's subscriptions, position and membership as the gateways' scripts store them; then commands through a hub. */
async function load(url: string, n: number, devices: number, perDevice: number, partitions: number, seed: number): Promise<void> {
  const keysOf = Array.from({ length: partitions }, (_, k) => keysFor(url, partitions, k));
  const rng = new Prng(seed);
  const progress = new Progress(`writing ${n} subscriptions`, devices);
  await withRedis(url, async (redis) => {
    let written = 0;
    const chunk = 5000;
    for (let d0 = 0; d0 < devices; d0 += chunk) {
      const p = redis.pipeline();
      for (let d = d0; d < Math.min(devices, d0 + chunk); d++) {
        const device = `dev-${d}`;
        const keys = keysOf[devicePart(device, partitions)];
        const fields: string[] = [];
        for (let j = 0; j < perDevice && written < n; j++, written++) {
          const radiusM = 200 + Math.floor(rng.float() * 2000);
          const sub = { id: `s${j}`, filters: [{ constraints: [{ name: 'kind', op: 'eq', value: ['accident', 'jam', 'works'][j % 3] }, { name: 'severity', op: 'gt', value: j % 4 }], area: { radiusM } }] };
          // Version 0-0: older than any command, so a rebuild takes it as it is.
          fields.push(sub.id, `0-0 ${JSON.stringify(sub)}`);
        }
        p.hset(keys.subs(device), ...fields);
        p.sadd(keys.subDevices, device);
        p.hset(keys.pos, device, encodePosition(CENTER.lat + (rng.float() - 0.5) * SPAN_DEG, CENTER.lon + (rng.float() - 0.5) * SPAN_DEG));
        progress.tick();
      }
      await p.exec();
    }
  });
  progress.end();
  // Commands in the stream, as a running deployment has: replaces of existing subscriptions.
  const hub = new PartitionedHub(await Promise.all(Array.from({ length: partitions }, (_, k) => RedisHub.connect({ redis: url, prefix: PREFIX, ...(partitions > 1 ? { partitions, partition: k } : {}) }))));
  try {
    const puts: Promise<void>[] = [];
    for (let i = 0; i < 1000; i++) {
      const device = `dev-${Math.floor(rng.float() * devices)}`;
      puts.push(hub.replaceSubscription(device, { id: 's0', filters: [{ constraints: [{ name: 'kind', op: 'eq', value: 'accident' }], area: { radiusM: 300 } }] }));
    }
    await Promise.all(puts);
  } finally {
    await hub.close();
  }
}

/** A partition's keys (`partitions` > 1 names them per partition, as the service does). */
function keysFor(url: string, partitions: number, partition: number): Keys {
  return new Keys(PREFIX, layoutFor('restart', url, undefined, partitions), partition);
}

// ---- the child processes ----

interface ChildJob {
  kind: 'write' | 'redis' | 'snapshot';
  url: string;
  dir: string;
  engine: EngineChoice;
  partitions: number;
}

interface ThreadJob extends ChildJob {
  partition: number;
}

/** What a partition's thread reports when its matcher has applied its whole stream. */
interface ThreadReady {
  startMs: number;
  restoredFrom: 'snapshot' | 'redis';
  replayed: number;
  subscriptions: number;
  devices: number;
}

function runChild(job: ChildJob): Promise<ChildReport> {
  const script = fileURLToPath(import.meta.url);
  return new Promise((resolve, reject) => {
    const c = spawn(process.execPath, [`--max-old-space-size=${heapLimitMb()}`, script, '--child', JSON.stringify(job)], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    c.stdout.on('data', (b: Buffer) => (out += b.toString()));
    c.on('error', reject);
    c.on('exit', (code) => {
      const last = out.trim().split('\n').pop() ?? '';
      if (code !== 0) return reject(new Error(`restart: the ${job.kind} process exited with ${code}`));
      try {
        resolve(JSON.parse(last) as ChildReport);
      } catch {
        reject(new Error(`restart: the ${job.kind} process printed no report (${JSON.stringify(last.slice(0, 200))})`));
      }
    });
  });
}

/**
 * A restarted matcher process: one thread per partition (as AMBIT_MATCHER_PARTITION=all runs
 * them), each starting its matcher and waiting until it has applied its stream; timed from before
 * the threads start until the last is ready.
 */
async function child(job: ChildJob): Promise<void> {
  const script = fileURLToPath(import.meta.url);
  const t0 = performance.now();
  const threads = Array.from({ length: job.partitions }, (_, partition) => new Worker(script, { workerData: { ...job, partition } satisfies ThreadJob }));
  const ready = await Promise.all(
    threads.map(
      (w) =>
        new Promise<ThreadReady>((resolve, reject) => {
          w.once('message', (m: ThreadReady) => resolve(m));
          w.once('error', reject);
          w.once('exit', (code) => reject(new Error(`restart: a partition thread exited with ${code} before it was ready`)));
        }),
    ),
  );
  const startMs = performance.now() - t0;
  const report: ChildReport = {
    startMs,
    restoredFrom: ready.every((r) => r.restoredFrom === 'snapshot') ? 'snapshot' : 'redis',
    replayed: ready.reduce((a, r) => a + r.replayed, 0),
    subscriptions: ready.reduce((a, r) => a + r.subscriptions, 0),
    devices: ready.reduce((a, r) => a + r.devices, 0),
    peakRssBytes: 0,
  };
  // Then each thread writes a snapshot (kind write) and stops; the slowest thread is the figure.
  const done = await Promise.all(
    threads.map(
      (w) =>
        new Promise<{ snapshotMs?: number; snapshotBytes?: number; stopMs: number }>((resolve, reject) => {
          w.removeAllListeners('exit');
          w.once('message', resolve);
          w.once('error', reject);
          w.postMessage('finish');
        }),
    ),
  );
  if (job.kind === 'write') {
    report.snapshotMs = Math.max(...done.map((d) => d.snapshotMs ?? NaN));
    report.snapshotBytes = done.reduce((a, d) => a + (d.snapshotBytes ?? NaN), 0);
    report.stopMs = Math.max(...done.map((d) => d.stopMs));
  }
  await Promise.all(threads.map((w) => w.terminate()));
  report.peakRssBytes = peakRss();
  process.stdout.write(`${JSON.stringify(report)}\n`);
}

async function partitionThread(job: ThreadJob): Promise<void> {
  const k = job.partitions;
  const keys = keysFor(job.url, k, job.partition);
  const last = await withRedis(job.url, async (r) => (await r.xrevrange(keys.in, '+', '-', 'COUNT', 1))[0]?.[0] ?? '0-0');
  let batch = () => {};
  const t0 = performance.now();
  const m = await RedisMatcher.start({
    redis: job.url,
    prefix: PREFIX,
    engine: job.engine,
    ...(k > 1 ? { partitions: k, partition: job.partition } : {}),
    hooks: { onBatch: () => batch() },
    ...(job.kind === 'redis' ? {} : { snapshot: { dir: job.dir, intervalMs: 0 } }),
  });
  // Ready when every command in the stream is applied (nothing is written meanwhile).
  while (compareStreamIds(m.position, last) < 0) await new Promise<void>((resolve) => (batch = resolve));
  const port = parentPort!;
  port.postMessage({ startMs: performance.now() - t0, restoredFrom: m.restoredFrom.from, replayed: m.restoredFrom.replayed, subscriptions: m.core.subscriptions, devices: m.devices } satisfies ThreadReady);
  port.once('message', () => {
    void (async () => {
      let snapshotMs: number | undefined;
      let snapshotBytes: number | undefined;
      if (job.kind === 'write') {
        const w0 = performance.now();
        const info = await m.snapshotNow();
        if (info === null) throw new Error('restart: the snapshot was not written');
        snapshotMs = performance.now() - w0;
        snapshotBytes = info.bytes;
      }
      const s0 = performance.now();
      await m.stop();
      port.postMessage({ snapshotMs, snapshotBytes, stopMs: performance.now() - s0 });
    })();
  });
}

/** The process's peak resident set (VmHWM), or the current RSS where /proc is not there. */
function peakRss(): number {
  try {
    const status = readFileSync('/proc/self/status', 'utf8');
    const m = /VmHWM:\s+(\d+) kB/.exec(status);
    if (m !== null) return Number(m[1]) * 1024;
  } catch {
    // not Linux
  }
  return process.memoryUsage().rss;
}

runMain('restart', main);
