/**
 * The GPU engine's batched throughput under a publisher's feed, by where the events' per-event
 * work runs: matchBatch calls of event objects (each event checked and encoded on the engine's
 * thread), packed batches made by worker threads (packEvents there; the engine's thread takes each
 * transfer, checks its structure, turns its names into ids and runs it), and the same packs made
 * ahead (the engine's thread alone: what it can feed), beside the fast CPU engine's matchBatch
 * (what a deployment without a GPU runs). Calls are kept `depth` in flight, each issued as one
 * returns; each row runs `rounds` rounds of `seconds`.
 *
 *   node dist/bench/gpu-feed.js [--subscriptions 250k] [--sizes 1024,4096] [--depth 4]
 *     [--workers 2,4] [--rounds 5] [--seconds 2] [--engines gpu,fast] [--software] [--out FILE]
 *
 * Per row: events/s (min, median, max over rounds), call latency (min, median, p99), the engine
 * thread's busy time per event (event-loop utilization: its active time over the events), the
 * process's CPU per event (every thread), and whether the answers equal matchBatch's on the same
 * events. Writes JSON and an SVG of events/s.
 */
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import { performance } from 'node:perf_hooks';
import { FastMatcher } from '../src/engines/fast.js';
import { GpuMatcher, PackedEvents, type PackedTransfer, packEvents } from '../src/engines/gpu/matcher.js';
import type { Event } from '../src/model/types.js';
import { WorkloadSource } from '../src/workload/index.js';
import { type Fail, cliFail, readCommandLine, runMain } from './lib/args.js';
import { count, sig, table } from './lib/format.js';
import { gpuInfo } from './lib/gpu/common.js';
import { Loader, loadWithProgress } from './lib/gpu/loader.js';
import type { PackWorkerData } from './lib/gpu/pack-worker.js';
import { describeMachine } from './lib/machine.js';
import { note } from './lib/progress.js';
import { ResultRun } from './lib/result-file.js';
import { type Summary, summarize } from './lib/stats.js';
import { barPlot } from './lib/svg-bars.js';

const HELP = `Usage: node dist/bench/gpu-feed.js [options]
  --subscriptions N  subscriptions of 10 filters (default 250k: 2.5M filters; quick 10k)
  --sizes LIST       events per call / pack (default 1024,4096); the engine's maxBatch is the largest
  --depth N          calls in flight (default 4)
  --workers LIST     packing threads for the worker rows (default 2,4)
  --rounds N         rounds per row (default 5; quick 2)
  --seconds S        seconds per round (default 2; quick 0.5)
  --engines LIST     gpu and/or fast (default gpu,fast)
  --paths LIST       the GPU rows: batch, prepacked, workers (default all three)
  --seed N           workload seed (default 1)
  --software         allow a software adapter (llvmpipe): for trying the benchmark, not for figures
  --quick            small run
  --out FILE         JSON output (default bench/results/gpu-feed.json; the SVG beside it)`;

const fail: Fail = cliFail('gpu-feed', HELP);
const POOL = 8192;
export const FEED_SCHEMA = 'ambit.gpu-feed/1';

export interface Row {
  engine: string;
  mode: 'batch' | 'prepacked' | 'workers';
  size: number;
  depth: number;
  workers: number;
  rounds: { events: number; seconds: number; eventsPerSec: number; mainBusyUsPerEvent: number; cpuUsPerEvent: number }[];
  eventsPerSec: Summary;
  callMs: Summary;
  mainBusyUsPerEvent: Summary;
  cpuUsPerEvent: Summary;
  /** Busy share of each packing thread over the row (event-loop utilization). */
  workerBusy: number[];
  /** Events whose answers were compared with matchBatch's, and how many differed. */
  compared: number;
  differing: number;
  matchesPerEvent: number;
}

/** Keeps `depth` calls in flight for `rounds` rounds of `seconds`; per round the events, the engine thread's active time and the process's CPU. */
async function feed(call: () => Promise<number>, size: number, depth: number, rounds: number, seconds: number): Promise<{ rounds: Row['rounds']; callMs: number[]; matches: number }> {
  const out: Row['rounds'] = [];
  const callMs: number[] = [];
  let matches = 0;
  let events = 0;
  let t0 = performance.now();
  let elu0 = performance.eventLoopUtilization();
  let cpu0 = process.cpuUsage();
  let stop = false;
  const closeRound = (): void => {
    const t = performance.now();
    const elu = performance.eventLoopUtilization(elu0);
    const cpu = process.cpuUsage(cpu0);
    const s = (t - t0) / 1000;
    out.push({ events, seconds: s, eventsPerSec: events / s, mainBusyUsPerEvent: (elu.active * 1e3) / events, cpuUsPerEvent: (cpu.user + cpu.system) / events });
    events = 0;
    t0 = t;
    elu0 = performance.eventLoopUtilization();
    cpu0 = process.cpuUsage();
    if (out.length === rounds) stop = true;
  };
  const lane = async (): Promise<void> => {
    while (!stop) {
      const t = performance.now();
      matches += await call();
      callMs.push(performance.now() - t);
      events += size;
      if (!stop && performance.now() - t0 >= seconds * 1000) closeRound();
    }
  };
  await Promise.all(Array.from({ length: depth }, lane));
  return { rounds: out, callMs, matches };
}

function sameSets(a: readonly (readonly unknown[])[], b: readonly (readonly unknown[])[]): number {
  let differing = 0;
  for (let i = 0; i < a.length; i++) {
    const x = JSON.stringify([...a[i]].map(String).sort());
    const y = JSON.stringify([...(b[i] ?? [])].map(String).sort());
    if (x !== y) differing++;
  }
  return differing + Math.abs(a.length - b.length);
}

/** W packing threads, each asked for packs as the engine takes them (a few ahead). */
class Packers {
  private readonly workers: Worker[];
  private readonly ready: { t: PackedTransfer; w: number }[] = [];
  private waiting: ((x: { t: PackedTransfer; w: number }) => void)[] = [];
  private elu0: ReturnType<Worker['performance']['eventLoopUtilization']>[] = [];

  private constructor(workers: Worker[]) {
    this.workers = workers;
    workers.forEach((w, i) =>
      w.on('message', (t: PackedTransfer | 'ready') => {
        if (t === 'ready') return;
        const x = { t, w: i };
        const next = this.waiting.shift();
        if (next !== undefined) next(x);
        else this.ready.push(x);
      }),
    );
  }

  static async start(n: number, data: Omit<PackWorkerData, 'start'>): Promise<Packers> {
    const file = path.join(path.dirname(fileURLToPath(import.meta.url)), 'lib', 'gpu', 'pack-worker.js');
    const workers = Array.from({ length: n }, (_, i) => new Worker(file, { workerData: { ...data, start: Math.floor((i * POOL) / n) } satisfies PackWorkerData }));
    await Promise.all(workers.map((w) => new Promise<void>((resolve, reject) => {
      w.once('message', () => resolve());
      w.once('error', reject);
    })));
    return new Packers(workers);
  }

  /** Asks each thread for `ahead` packs. */
  prime(ahead: number): void {
    for (const w of this.workers) w.postMessage(ahead);
    this.elu0 = this.workers.map((w) => w.performance.eventLoopUtilization());
  }

  /** The next pack (its thread asked for one more in its place). */
  take(): Promise<PackedTransfer> {
    const x = this.ready.shift();
    const got = x !== undefined ? Promise.resolve(x) : new Promise<{ t: PackedTransfer; w: number }>((resolve) => this.waiting.push(resolve));
    return got.then(({ t, w }) => {
      this.workers[w].postMessage(1);
      return t;
    });
  }

  busy(): number[] {
    return this.workers.map((w, i) => w.performance.eventLoopUtilization(this.elu0[i]).utilization);
  }

  async stop(): Promise<void> {
    await Promise.all(this.workers.map((w) => w.terminate()));
  }
}

function row(engine: string, mode: Row['mode'], size: number, depth: number, workers: number, r: Awaited<ReturnType<typeof feed>>, workerBusy: number[], compared: number, differing: number): Row {
  return {
    engine,
    mode,
    size,
    depth,
    workers,
    rounds: r.rounds,
    eventsPerSec: summarize(r.rounds.map((x) => x.eventsPerSec)),
    callMs: summarize(r.callMs),
    mainBusyUsPerEvent: summarize(r.rounds.map((x) => x.mainBusyUsPerEvent)),
    cpuUsPerEvent: summarize(r.rounds.map((x) => x.cpuUsPerEvent)),
    workerBusy,
    compared,
    differing,
    matchesPerEvent: r.matches / Math.max(1, r.callMs.length * size),
  };
}

async function main(): Promise<void> {
  const cl = readCommandLine(process.argv.slice(2), new Set(['quick', 'software', 'help']), new Set(['subscriptions', 'sizes', 'depth', 'workers', 'rounds', 'seconds', 'engines', 'paths', 'seed', 'out']), fail, HELP);
  if (cl === null) return;
  const a = cl.r;
  const quick = a.flag('quick');
  const subs = a.count('subscriptions', quick ? 10_000 : 250_000);
  const sizes = a.counts('sizes', quick ? [256, 1024] : [1024, 4096], true);
  const depth = a.int('depth', 4, 1, 64);
  const workerCounts = a.counts('workers', quick ? [2] : [2, 4], true);
  const rounds = a.int('rounds', quick ? 2 : 5, 1, 1000);
  const seconds = a.num('seconds', quick ? 0.5 : 2, 0.05, 600);
  const engines = a.list('engines') ?? ['gpu', 'fast'];
  for (const e of engines) if (e !== 'gpu' && e !== 'fast') fail(`--engines: gpu or fast, got ${JSON.stringify(e)}`);
  const paths = a.list('paths') ?? ['batch', 'prepacked', 'workers'];
  for (const x of paths) if (x !== 'batch' && x !== 'prepacked' && x !== 'workers') fail(`--paths: batch, prepacked or workers, got ${JSON.stringify(x)}`);
  const seed = a.int('seed', 1, 0);
  const software = a.flag('software');
  const run = new ResultRun({ out: a.str('out'), defaultFile: 'bench/results/gpu-feed.json', fail });

  const src = new WorkloadSource({ seed, subscriptions: subs, events: POOL });
  const pool: Event[] = src.events();
  const take = (from: number, n: number): Event[] => Array.from({ length: n }, (_, k) => pool[(from + k) % POOL]);
  const maxBatch = Math.max(...sizes);
  const rows: Row[] = [];
  let gpu: GpuMatcher | null = null;
  let fast: FastMatcher | null = null;
  try {
    const loader = new Loader(src, subs, true);
    if (engines.includes('gpu')) {
      gpu = await GpuMatcher.create({ gpu: { allowSoftware: software }, cpuBelowFilters: 0, select: 'gpu', maxBatch });
      loader.add('gpu', gpu);
    }
    if (engines.includes('fast')) {
      fast = new FastMatcher();
      loader.add('fast', fast);
    }
    loadWithProgress(loader, subs, `gpu-feed ${count(subs)}`);
    note(`gpu-feed: ${count(src.stats.filters)} filters; ${rounds} rounds of ${seconds} s a row, ${depth} calls in flight`);
    if (gpu !== null) {
      const m = gpu;
      const limits = m.limits;
      for (const size of sizes) {
        const lists = Array.from({ length: Math.ceil(POOL / size) }, (_, i) => take(i * size, size));
        const want = await m.matchBatch(lists[0]);
        // matchBatch of event objects: every event checked and encoded on this thread.
        let k = 0;
        if (paths.includes('batch')) {
          note(`gpu-feed: gpu matchBatch, ${size} events a call`);
          rows.push(row('gpu', 'batch', size, depth, 0, await feed(async () => (await m.matchBatch(lists[k++ % lists.length])).length, size, depth, rounds, seconds), [], 0, 0));
        }
        if (paths.includes('prepacked')) {
          // The same events packed ahead: this thread only runs the packs.
          const packs = lists.map((l) => packEvents(l, { limits }));
          const differing = sameSets(want, await m.matchPacked(packs[0]));
          note(`gpu-feed: gpu matchPacked, packs made ahead, ${size} events a pack`);
          k = 0;
          rows.push(row('gpu', 'prepacked', size, depth, 0, await feed(async () => (await m.matchPacked(packs[k++ % packs.length])).length, size, depth, rounds, seconds), [], size, differing));
        }
        for (const w of paths.includes('workers') ? workerCounts : []) {
          const packers = await Packers.start(w, { seed, subscriptions: subs, pool: POOL, size, limits: { ...limits } });
          try {
            packers.prime(depth + 2);
            // The first pack of thread 0 starts at the pool's start: compared with matchBatch's answers.
            let first = await packers.take();
            while (PackedEvents.fromTransfer(first).event(0).id !== pool[0].id) first = await packers.take();
            const diff = sameSets(want, await m.matchPacked(PackedEvents.fromTransfer(first)));
            note(`gpu-feed: gpu matchPacked, ${w} packing threads, ${size} events a pack`);
            const r = await feed(async () => (await m.matchPacked(PackedEvents.fromTransfer(await packers.take()))).length, size, depth, rounds, seconds);
            rows.push(row('gpu', 'workers', size, depth, w, r, packers.busy(), size, diff));
          } finally {
            await packers.stop();
          }
        }
      }
    }
    if (fast !== null) {
      const m = fast;
      const size = sizes[0];
      const lists = Array.from({ length: Math.ceil(POOL / size) }, (_, i) => take(i * size, size));
      const differing = gpu === null ? 0 : sameSets(await gpu.matchBatch(lists[0]), await m.matchBatch(lists[0]));
      let k = 0;
      note(`gpu-feed: fast matchBatch, ${size} events a call`);
      rows.push(row('fast', 'batch', size, 1, 0, await feed(async () => (await m.matchBatch(lists[k++ % lists.length])).length, size, 1, rounds, seconds), [], gpu === null ? 0 : size, differing));
    }
    const info = gpu === null ? null : gpuInfo(gpu);
    const file: FeedFile = { schema: FEED_SCHEMA, date: run.startedAt.toISOString(), command: run.command, machine: run.machine, gpu: info, subscriptions: subs, filters: src.stats.filters, seed, depth, rounds, seconds, rows };
    run.write(file);
    const svg = run.path.replace(/\.json$/, '') + '.svg';
    writeFileSync(svg, plot(rows, src.stats.filters, info?.adapter ?? 'no GPU'));
    process.stdout.write(`Machine: ${describeMachine(run.machine)}\nGPU: ${info?.adapter ?? 'none'}\n${count(subs)} subscriptions, ${count(src.stats.filters)} filters; ${depth} calls in flight (fast: 1); ${rounds} rounds of ${seconds} s\n\n`);
    process.stdout.write(`${report(rows)}\n`);
    note(`gpu-feed: wrote ${run.shown} and ${path.relative(process.cwd(), svg)}`);
  } finally {
    await gpu?.close();
    await fast?.close();
  }
}

/** A result file of this benchmark. */
export interface FeedFile {
  schema: typeof FEED_SCHEMA;
  date: string;
  command: string;
  machine: ResultRun['machine'];
  gpu: ReturnType<typeof gpuInfo>;
  subscriptions: number;
  filters: number;
  seed: number;
  depth: number;
  rounds: number;
  seconds: number;
  rows: Row[];
}

const modeName = (r: Row): string => (r.mode === 'batch' ? 'matchBatch (event objects)' : r.mode === 'prepacked' ? 'matchPacked, packed ahead' : `matchPacked, ${r.workers} packing threads`);

export function report(rows: readonly Row[]): string {
  return table(
    ['engine', 'path', 'events a call', 'events/s min', 'median', 'max', 'call ms median', 'p99', 'engine thread µs/event', 'process CPU µs/event', 'packing threads busy', 'answers = matchBatch'],
    rows.map((r) => [
      r.engine,
      modeName(r),
      String(r.size),
      count(Math.round(r.eventsPerSec.min)),
      count(Math.round(r.eventsPerSec.median)),
      count(Math.round(r.eventsPerSec.max)),
      sig(r.callMs.median),
      sig(r.callMs.p99),
      sig(r.mainBusyUsPerEvent.median),
      sig(r.cpuUsPerEvent.median),
      r.workerBusy.length === 0 ? '–' : r.workerBusy.map((b) => `${Math.round(100 * b)}%`).join(' '),
      r.compared === 0 ? '–' : r.differing === 0 ? `yes (${r.compared})` : `${r.differing} of ${r.compared} differ`,
    ]),
  );
}

function plot(rows: readonly Row[], filters: number, adapter: string): string {
  const sizes = [...new Set(rows.map((r) => r.size))];
  const modes = [...new Set(rows.map((r) => `${r.engine}: ${modeName(r)}`))];
  const colors = ['#888888', '#1f77b4', '#2ca02c', '#98df8a', '#d62728', '#ff7f0e'];
  return barPlot({
    title: `Events/s under a feed, ${count(filters)} filters (${adapter})`,
    yLabel: 'events/s',
    logY: true,
    valueLabels: true,
    series: modes.map((name, i) => ({ name, color: colors[i % colors.length] })),
    groups: sizes.map((size) => ({
      label: [`${size} events a call`],
      values: modes.map((mname) => {
        const r = rows.find((x) => x.size === size && `${x.engine}: ${modeName(x)}` === mname);
        return r === undefined ? null : { y: r.eventsPerSec.median, lo: r.eventsPerSec.min, hi: r.eventsPerSec.max };
      }),
    })),
    notes: ['bars: median over rounds; whiskers: min–max'],
    lines: [{ y: 2e6, label: 'target 2M events/s', color: '#d62728' }],
  });
}

if (process.argv[1]?.endsWith('gpu-feed.js')) runMain('gpu-feed', async () => {
  await main();
  process.exit(0);
});
