/**
 * The GPU benchmark: the GPU engine (CLCB on WebGPU) beside the CPU engines, on seeded workloads
 * shaped like CLCB's evaluation (§5).
 *
 *   default  Table 2: 250k subscriptions × 10 filters: load, single-event latency, memory, GPU = fast?
 *   grid     Fig. 3/4: latency vs subscriptions × area, uniform and zipf placement
 *   updates  Fig. 5: location updates through device handles, batches, N moves then a match
 *   stages   Fig. 6: Loc / Cont / Zip GPU times (timestamp queries) and host time; 6(b) all content matches
 *   memory   Fig. 7: GPU bytes vs filters
 *   batch    events/s with matchBatch of 1 … 1024 events and with many match() calls in flight
 *   scale    10M subscriptions (100M filters) resident: load, memory, latency
 *
 * One command runs them all (or --suite ...); everything measured goes to one JSON file, written
 * after every suite (and every scale checkpoint), so a run cut short keeps what it measured.
 * Tables go to stdout, progress to stderr. `node dist/bench/gpu-report.js` builds the document.
 */
import { spawn } from 'node:child_process';
import os from 'node:os';
import { fileURLToPath } from 'node:url';
import v8 from 'node:v8';
import { defaultGpuMatcherOptions } from '../src/engines/gpu/matcher.js';
import { CPU_ENGINES } from '../src/engines/index.js';
import { DEFAULT_WORKLOAD, STRING_OPS, type SpatialKind, resolveWorkloadOptions } from '../src/workload/index.js';
import { childExecArgv, heapLimitMb } from './lib/fork.js';
import { count, pct, sig } from './lib/format.js';
import { runBatchSuite } from './lib/gpu/batch.js';
import { type GpuEnv, PROFILE_DAWN_FLAGS, gpuInfo, healthProblem, makeEngine } from './lib/gpu/common.js';
import { runDefaultSuite } from './lib/gpu/default.js';
import { type SeriesSpec, gridChildMain, runGrid } from './lib/gpu/grid.js';
import { runMemorySuite } from './lib/gpu/memory.js';
import { GPU_HOST_BYTES_PER_SUB, runScaleSuite } from './lib/gpu/scale.js';
import { GPU_SCHEMA, GPU_SUITES, type GpuBenchConfig, type GpuBenchFile, type GpuHealth, type GpuSuiteName, type StageVariant } from './lib/gpu/schema.js';
import { runStagesSuite } from './lib/gpu/stages.js';
import { batchTables, defaultTable, gridTable, memoryTable, scaleTable, stagesTable, updatesTables } from './lib/gpu/tables.js';
import { runUpdatesSuite } from './lib/gpu/updates.js';
import { collect, errText, timerOverheadNs } from './lib/measure.js';
import { describeMachine } from './lib/machine.js';
import { note } from './lib/progress.js';
import { sinkValue } from './lib/sink.js';
import { ArgReader, type Fail, cliFail, parseArgs, runMain } from './lib/args.js';
import { ResultRun } from './lib/result-file.js';

const ENTRY = fileURLToPath(import.meta.url);
/** Set in the re-executed process (the one that measures). */
const REEXEC_ENV = 'AMBIT_GPU_BENCH_MEASURING';

const HELP = `Usage: node dist/bench/gpu.js [options]

  --suite LIST          ${GPU_SUITES.join(',')} (default: all, in that order)
  --quick               llvmpipe-sized smoke run: <= 5k subscriptions, <= 50 events per point
  --allow-software      accept a software adapter (llvmpipe); without it a machine with no GPU skips the GPU engine
  --engines LIST        engines of the comparing suites (default: default gpu,fast,rtree; grid gpu,fast;
                        updates gpu,fast,rtree; batch gpu,fast); stages, memory and scale are GPU-only
  --seed N              workload seed (default ${DEFAULT_WORKLOAD.seed})
  --string-ops LIST     string operators of the default and batch workloads as op:weight (e.g. like:1,regex:1,eq:1;
                        default: the workload's own, ${Object.entries(DEFAULT_WORKLOAD.stringOps).map(([k, w]) => `${k}:${w}`).join(',')})
  --out PATH            result file (default bench/out/<name>-<timestamp>.json)
  --name NAME           result name (default gpu, quick: gpu-quick)

  default:  --subs N (250000; quick 5000)  --events N (1000; quick 50)  --reps N (3; quick 1)
  grid:     --grid-sizes LIST (1k,10k,100k,250k,1M; quick 1000,5000)  --areas LIST (0.001,0.01,0.1,1 %)
            --spatial LIST (uniform,zipf)  --grid-events N (200; quick 30)
            --grid-jobs N|auto  processes that load series in parallel; measuring is always one at a time
                                (auto: min(series, cores/2, what memory allows); 1 = in this process)
            --rtree-max-subs N  largest rtree size in grid and updates (250000)
  updates:  --update-subs N (250000; quick 5000)  --moves LIST (1k,100k,1M; quick 100,1000,10000)
            --max-move-seconds S  skip a moves-then-match size whose moves alone would take longer (30)
  stages:   --stage-sizes LIST (10k,100k,250k,1M; quick 1000,5000)  --stage-events N (200; quick 30)
  memory:   --memory-sizes LIST (10k,100k,250k,500k,1M; quick 1000,2000,5000)
  batch:    --batch-subs N (250000; quick 5000)  --batch-sizes LIST (1,16,64,256,1024; quick 1,16,64)
            --concurrency LIST (16,256,1024; quick 16,64)
            --streams LIST  SIZExDEPTH: matchBatch calls of SIZE kept DEPTH in flight (1024x4,4096x2,16384x2; quick 64x2)
  scale:    --scale-subs N (10000000; quick 5000)  --scale-events N (200; quick 20)
            --scale-max-load-s S  stop loading after S seconds and measure what is resident (0 = no limit)
            --scale-add-many  load each chunk of 4096 with one addMany call (default: add one by one)
  GPU engine: --max-batch N  --in-flight N   (default: the engine's, ${defaultGpuMatcherOptions.maxBatch} and ${defaultGpuMatcherOptions.inFlight})
            --no-cpu-mirror  the engine without its CPU mirror (cpuMirror false): every event on the GPU, a third of the host memory
  --help`;

const fail: Fail = cliFail('bench:gpu', HELP);

/** SIZExDEPTH items: matchBatch calls of SIZE kept DEPTH in flight. */
function streamsArg(a: ArgReader, fallback: string): { size: number; depth: number }[] {
  return (a.list('streams') ?? fallback.split(',')).map((item) => {
    const m = /^(\d+)x(\d+)$/.exec(item.trim());
    if (m === null || Number(m[1]) < 1 || Number(m[2]) < 1) fail(`--streams: ${JSON.stringify(item)} is not SIZExDEPTH (e.g. 1024x4)`);
    return { size: Number(m[1]), depth: Number(m[2]) };
  });
}

const FLAGS = new Set(['quick', 'allow-software', 'help', 'grid-child', 'no-cpu-mirror', 'scale-add-many']);
const VALUED = new Set([
  'suite', 'engines', 'seed', 'out', 'name', 'subs', 'events', 'reps', 'grid-sizes', 'areas', 'spatial', 'grid-events', 'grid-jobs', 'rtree-max-subs',
  'update-subs', 'moves', 'max-move-seconds', 'stage-sizes', 'stage-events', 'memory-sizes', 'batch-subs', 'batch-sizes', 'concurrency', 'streams',
  'scale-subs', 'scale-events', 'scale-max-load-s', 'max-batch', 'in-flight', 'string-ops',
]);

/** What the OS can still give this process: MemAvailable, or the cgroup limit when lower. */
function availableMemory(): number {
  let avail = os.freemem();
  try {
    const constrained = (process as { constrainedMemory?: () => number | undefined }).constrainedMemory?.();
    if (typeof constrained === 'number' && constrained > 0 && constrained < os.totalmem()) avail = Math.min(avail, constrained - process.memoryUsage().rss);
  } catch {
    // not available on this Node
  }
  return avail;
}

/** Host bytes per subscription of one grid process at its largest size: GPU engine + fast engine measured ~6.5 kB at 1M, plus margin. */
const GRID_BYTES_PER_SUB = 8000;

/**
 * Grid processes: one per series up to half the cores and what memory allows, then evened out over
 * the rounds that takes (8 series with room for 6 run as 2 rounds of 4, not 6 + 2).
 */
function autoJobs(series: number, maxSize: number): number {
  const cores = typeof os.availableParallelism === 'function' ? os.availableParallelism() : os.cpus().length;
  const byMemory = Math.floor((0.7 * availableMemory()) / (maxSize * GRID_BYTES_PER_SUB + 1e9));
  const most = Math.max(1, Math.min(series, Math.floor(cores / 2), byMemory));
  return Math.ceil(series / Math.ceil(series / most));
}

/** `--string-ops like:2,regex:1,eq:1`: the string operators of the default and batch workloads, weighted. */
function stringOps(v: string): Record<string, number> {
  const out: Record<string, number> = {};
  for (const part of v.split(',')) {
    const [op, w] = part.split(':');
    const weight = w === undefined ? 1 : Number(w);
    if (!STRING_OPS.includes(op as (typeof STRING_OPS)[number]) || !(weight > 0)) fail(`--string-ops: expected op:weight pairs of ${STRING_OPS.join(' ')}, got ${JSON.stringify(part)}`);
    out[op] = weight;
  }
  return out;
}

function buildConfig(a: ArgReader): GpuBenchConfig {
  const quick = a.flag('quick');
  const q = <T>(full: T, small: T): T => (quick ? small : full);
  const engines = (fallback: string[]): string[] => a.oneOf('engines', ['gpu', ...Object.keys(CPU_ENGINES)], fallback);
  const areas = a.areas('areas', [1e-5, 1e-4, 1e-3, 1e-2]);
  const spatial = a.spatial('spatial');
  const gridSizes = a.counts('grid-sizes', q([1000, 10_000, 100_000, 250_000, 1_000_000], [1000, 5000]), true);
  const gridJobs = a.str('grid-jobs') === undefined || a.str('grid-jobs') === 'auto' ? autoJobs(areas.length * spatial.length, gridSizes[gridSizes.length - 1]) : a.count('grid-jobs', 1);
  const gpuOptions: Record<string, number | boolean | string> = { cpuBelowFilters: 0, select: 'gpu' };
  if (a.str('max-batch') !== undefined) gpuOptions.maxBatch = a.count('max-batch', 1);
  if (a.str('in-flight') !== undefined) gpuOptions.inFlight = a.count('in-flight', 1);
  if (a.flag('no-cpu-mirror')) gpuOptions.cpuMirror = false;
  return {
    seed: a.count('seed', DEFAULT_WORKLOAD.seed, 0),
    ...(a.str('string-ops') === undefined ? {} : { stringOps: stringOps(a.str('string-ops')!) }),
    allowSoftware: a.flag('allow-software'),
    gpuOptions,
    rtreeMaxSubs: a.count('rtree-max-subs', 250_000),
    default: {
      engines: engines(['gpu', 'fast', 'rtree']),
      subscriptions: a.count('subs', q(DEFAULT_WORKLOAD.subscriptions, 5000)),
      events: a.count('events', q(DEFAULT_WORKLOAD.events, 50)),
      reps: a.count('reps', q(3, 1)),
      warmupEvents: q(200, 10),
    },
    grid: {
      engines: engines(['gpu', 'fast']),
      sizes: gridSizes,
      areas,
      spatial,
      events: a.count('grid-events', q(200, 30)),
      warmupEvents: q(50, 5),
      jobs: gridJobs,
    },
    updates: {
      engines: engines(['gpu', 'fast', 'rtree']),
      subscriptions: a.count('update-subs', q(250_000, 5000)),
      timed: q(10_000, 2000),
      loop: q(100_000, 10_000),
      batchSizes: q([1000, 100_000], [100, 1000]),
      batchReps: q(5, 3),
      moves: a.counts('moves', q([1000, 100_000, 1_000_000], [100, 1000, 10_000]), true),
      movesReps: q(5, 3),
      plainMatches: q(50, 10),
      maxMoveSeconds: a.num('max-move-seconds', 30),
    },
    stages: {
      sizes: a.counts('stage-sizes', q([10_000, 100_000, 250_000, 1_000_000], [1000, 5000]), true),
      events: a.count('stage-events', q(200, 30)),
      warmupEvents: q(50, 5),
      variants: ['default', 'all-content'] as StageVariant[],
      dawnFlags: [...PROFILE_DAWN_FLAGS],
    },
    memory: { sizes: a.counts('memory-sizes', q([10_000, 100_000, 250_000, 500_000, 1_000_000], [1000, 2000, 5000]), true) },
    batch: {
      engines: engines(['gpu', 'fast']),
      subscriptions: a.count('batch-subs', q(250_000, 5000)),
      sizes: a.counts('batch-sizes', q([1, 16, 64, 256, 1024], [1, 16, 64]), true),
      concurrency: a.counts('concurrency', q([16, 256, 1024], [16, 64]), true),
      streams: streamsArg(a, q('1024x4,4096x2,16384x2', '64x2')),
      events: q(4096, 128),
      cpuEvents: q(512, 48),
    },
    scale: {
      subscriptions: a.count('scale-subs', q(10_000_000, 5000)),
      checkpoints: [0.1, 0.25, 0.5, 1],
      events: a.count('scale-events', q(200, 20)),
      warmupEvents: q(50, 5),
      maxLoadS: a.num('scale-max-load-s', 0),
      addMany: a.flag('scale-add-many'),
    },
  };
}

/** Every distinct GPU health problem anywhere in a suite's results, with where it was seen. */
function healthProblems(result: unknown): string[] {
  const found = new Map<string, string>();
  const walk = (x: unknown, where: string): void => {
    if (x === null || typeof x !== 'object') return;
    if (Array.isArray(x)) {
      x.forEach((y) => walk(y, where));
      return;
    }
    const o = x as Record<string, unknown>;
    const here = [where, o.variant, o.spatial, typeof o.areaFraction === 'number' ? pct(o.areaFraction) : undefined, typeof o.subscriptions === 'number' ? count(o.subscriptions) : undefined]
      .filter((s) => s !== undefined && s !== '')
      .join(' ');
    if ('health' in o) {
      const p = healthProblem((o.health ?? null) as GpuHealth | null);
      if (p !== null && !found.has(p)) found.set(p, here);
    }
    for (const [k, v] of Object.entries(o)) if (k !== 'health' && k !== 'stats') walk(v, here);
  };
  walk(result, '');
  // Counters are cumulative per engine: the first few say where it started.
  const all = [...found].map(([p, where]) => `${where ? `${where}: ` : ''}${p}`);
  return all.length <= 3 ? all : [...all.slice(0, 3), `… and ${all.length - 3} more results with problems (see "health" in the JSON)`];
}

/** `key value, key a,b,c` for the console; sizes as 10k / 1M. */
function describeParams(o: object): string {
  const v = (k: string, x: unknown): string => {
    if (Array.isArray(x)) return x.map((y) => v(k, y)).join(',');
    if (typeof x === 'number') return /areas/.test(k) ? pct(x) : Number.isInteger(x) && x >= 1000 ? count(x) : String(x);
    return String(x);
  };
  return Object.entries(o).map(([k, x]) => `${k} ${v(k, x)}`).join('; ');
}

/**
 * Measuring needs exposed GC (clean memory figures) and an old space large enough for 10M
 * subscriptions; when this process was started without them, it runs itself again with them.
 */
function reexec(): Promise<number> {
  const child = spawn(process.execPath, [...childExecArgv(), ENTRY, ...process.argv.slice(2)], {
    stdio: 'inherit',
    env: { ...process.env, [REEXEC_ENV]: '1' },
  });
  for (const sig of ['SIGINT', 'SIGTERM'] as const) process.on(sig, () => child.kill(sig));
  return new Promise((resolve) => child.once('exit', (code, signal) => resolve(code ?? (signal !== null ? 128 + (os.constants.signals[signal] ?? 0) : 1))));
}

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2), FLAGS, VALUED, fail);
  if (args['grid-child'] === true) return gridChildMain();
  if (args.help === true) {
    process.stdout.write(`${HELP}\n`);
    return;
  }
  const a = new ArgReader(args, fail);
  const config = buildConfig(a);
  const suites = a.oneOf<GpuSuiteName>('suite', GPU_SUITES, GPU_SUITES);
  if (process.env[REEXEC_ENV] !== '1') process.exit(await reexec());

  const quick = args.quick === true;
  const name = typeof args.name === 'string' ? args.name : quick ? 'gpu-quick' : 'gpu';
  const run = new ResultRun({ out: args.out, name, fail });
  const env: GpuEnv = {
    allowSoftware: config.allowSoftware,
    seed: config.seed,
    gpuOptions: {
      ...(typeof config.gpuOptions.maxBatch === 'number' ? { maxBatch: config.gpuOptions.maxBatch } : {}),
      ...(typeof config.gpuOptions.inFlight === 'number' ? { inFlight: config.gpuOptions.inFlight } : {}),
      ...(config.gpuOptions.cpuMirror === false ? { cpuMirror: false } : {}),
    },
  };
  const params = resolveWorkloadOptions({ seed: config.seed, subscriptions: config.default.subscriptions, events: config.default.events });
  const file: GpuBenchFile = {
    schema: GPU_SCHEMA,
    name,
    startedAt: run.startedAt.toISOString(),
    finishedAt: '',
    quick,
    argv: run.argv,
    machine: run.machine,
    gpu: null,
    config,
    workload: { ...params, regionInfo: { ...params.regionInfo } } as unknown as Record<string, unknown>,
    suites: {},
    suiteWallMs: {},
    skipped: [],
    notes: [],
    timerOverheadNs: timerOverheadNs(),
    sink: 0,
  };
  let sinkTotal = 0;
  const out = (s = ''): void => {
    process.stdout.write(`${s}\n`);
  };
  const save = (): void => {
    file.finishedAt = new Date().toISOString();
    file.sink = (sinkTotal + sinkValue()) | 0;
    run.write(file);
  };
  const addNote = (s: string): void => {
    file.notes.push(s);
    note(`note: ${s}`);
  };

  // The adapter, once, before anything is timed.
  let gpuOk = true;
  let gpuWhy = '';
  try {
    const probe = await makeEngine('gpu', env);
    file.gpu = gpuInfo(probe);
    await probe.close();
  } catch (err) {
    gpuOk = false;
    gpuWhy = errText(err);
  }

  out(`Ambit GPU benchmark${quick ? ' (quick)' : ''}`);
  out(`machine: ${describeMachine(file.machine)}`);
  out(
    file.gpu !== null
      ? `gpu: ${file.gpu.adapter}${file.gpu.software ? ' — SOFTWARE adapter: correctness smoke run, timings mean nothing' : ''}; features ${file.gpu.features.join(', ') || 'none'}; maxBufferSize ${sig(file.gpu.maxBufferSize / 2 ** 30)} GiB, maxStorageBufferBindingSize ${sig(file.gpu.maxStorageBufferBindingSize / 2 ** 30)} GiB`
      : `gpu: none (${gpuWhy})`,
  );
  out(`GpuMatcher: cpuBelowFilters 0, select gpu (always the GPU path), maxBatch ${config.gpuOptions.maxBatch ?? defaultGpuMatcherOptions.maxBatch}, inFlight ${config.gpuOptions.inFlight ?? defaultGpuMatcherOptions.inFlight}${config.gpuOptions.cpuMirror === false ? ', no CPU mirror (cpuMirror false)' : ''}`);
  out(`suites: ${suites.join(', ')}; seed ${config.seed}; timer overhead ${file.timerOverheadNs} ns per timed call; node ${process.execArgv.join(' ')}`);
  out(
    `workload: CLCB Table 1 — ${params.filtersPerSub} filters/sub, ${params.constraintsMin}–${params.constraintsMax} constraints, ${params.attributesMin}–${params.attributesMax} attributes, ` +
      `${params.names} names, target selectivity ${pct(params.selectivity)}, region ${params.regionInfo.name} (${params.regionInfo.areaKm2} km²), area ${pct(params.areaFraction)} = ${params.filterRadiusM.toFixed(0)} m` +
      (config.stringOps === undefined ? '' : `; string operators ${Object.entries(config.stringOps).map(([k, w]) => `${k}:${w}`).join(',')} (default and batch suites)`),
  );
  out(`results: ${run.shown}`);
  out();
  if (!gpuOk) addNote(`no GPU engine: ${gpuWhy}${config.allowSoftware ? '' : ' (--allow-software accepts llvmpipe)'}`);
  save();

  let current: GpuSuiteName = suites[0];
  const skip = (engine: string, detail: string, reason: string): void => {
    note(`[${current}] ${engine} ${detail}: skipped (${reason})`);
    file.skipped.push({ suite: current, engine, detail, reason });
  };
  const withoutGpu = (engines: string[]): string[] => {
    if (gpuOk || !engines.includes('gpu')) return engines;
    skip('gpu', 'all cases', gpuWhy);
    return engines.filter((e) => e !== 'gpu');
  };
  const gpuOnly = (): boolean => {
    if (!gpuOk) skip('gpu', 'suite', gpuWhy);
    return gpuOk;
  };

  for (const suite of suites) {
    current = suite;
    const t0 = performance.now();
    note(`[${suite}] start`);
    out(`[${suite}] parameters: ${describeParams(config[suite])}`);
    collect();
    switch (suite) {
      case 'default': {
        const c = config.default;
        const r = await runDefaultSuite({ ...c, engines: withoutGpu(c.engines) }, env, skip, config.stringOps === undefined ? {} : { stringOps: config.stringOps });
        file.suites.default = r;
        out('## Default scenario (CLCB Table 1 / Table 2)');
        out();
        out(defaultTable(r));
        break;
      }
      case 'grid': {
        const g = config.grid;
        const engines = withoutGpu(g.engines);
        const specs: SeriesSpec[] = [];
        for (const spatial of g.spatial) {
          for (const areaFraction of g.areas) specs.push({ spatial, areaFraction, sizes: g.sizes, engines, rtreeMaxSubs: config.rtreeMaxSubs, events: g.events, warmupEvents: g.warmupEvents });
        }
        const jobs = Math.min(g.jobs, specs.length);
        note(`[grid] ${specs.length} series (spatial × area) × sizes ${g.sizes.map(count).join(', ')}; ${jobs === 1 ? 'in this process' : `${jobs} loading processes, measuring one at a time`}`);
        file.suites.grid = { jobs, points: [] };
        const res = await runGrid(specs, jobs, env, ENTRY, skip, (points) => {
          file.suites.grid!.points.push(...points);
          save();
        });
        sinkTotal = (sinkTotal + res.sink) | 0;
        // Rows in a stable order whatever order the processes finished in.
        const order = (p: { spatial: string; subscriptions: number; areaFraction: number; engine: string }) => [g.spatial.indexOf(p.spatial as SpatialKind), p.subscriptions, p.areaFraction, engines.indexOf(p.engine)];
        file.suites.grid.points.sort((a, b) => {
          const x = order(a);
          const y = order(b);
          for (let i = 0; i < x.length; i++) if (x[i] !== y[i]) return x[i] - y[i];
          return 0;
        });
        out(`## Matching time vs subscriptions and area (CLCB Fig. 3/4), ${g.events} events per point, each awaited alone`);
        out();
        out(gridTable(file.suites.grid.points));
        break;
      }
      case 'updates': {
        const c = config.updates;
        const engines = await runUpdatesSuite({ ...c, engines: withoutGpu(c.engines), rtreeMaxSubs: config.rtreeMaxSubs }, env, skip);
        file.suites.updates = { engines };
        out(`## Location updates (CLCB Fig. 5), ${count(c.subscriptions)} subscriptions`);
        out();
        out(updatesTables(engines));
        break;
      }
      case 'stages': {
        if (!gpuOnly()) break;
        file.suites.stages = { timestampQuery: false, points: [] };
        await runStagesSuite(config.stages, env, skip, (p, tsq) => {
          file.suites.stages!.timestampQuery = tsq;
          file.suites.stages!.points.push(p);
          save();
        });
        if (!file.suites.stages.timestampQuery) addNote('stages: the device has no timestamp-query; Loc/Cont/Zip times are missing (host-side times are there)');
        out('## Where the time goes (CLCB Fig. 6): (a) default content, (b) every event satisfies every filter\'s content');
        out();
        out(stagesTable(file.suites.stages.points, file.suites.stages.timestampQuery));
        break;
      }
      case 'memory': {
        if (!gpuOnly()) break;
        file.suites.memory = { points: [] };
        await runMemorySuite(config.memory.sizes, env, skip, (p) => {
          file.suites.memory!.points.push(p);
          save();
        });
        out('## GPU memory vs filters (CLCB Fig. 7)');
        out();
        out(memoryTable(file.suites.memory.points));
        break;
      }
      case 'batch': {
        const c = config.batch;
        const r = await runBatchSuite({ ...c, streams: c.streams ?? [], engines: withoutGpu(c.engines) }, env, skip, config.stringOps === undefined ? {} : { stringOps: config.stringOps });
        file.suites.batch = r;
        out('## Batched throughput');
        out();
        out(batchTables(r));
        break;
      }
      case 'scale': {
        if (!gpuOnly()) break;
        const c = config.scale;
        // The GPU engine keeps its CPU engine and the host mirror: ~7 kB of host memory per subscription (a third without the CPU engine).
        const needBytes = (c.subscriptions * GPU_HOST_BYTES_PER_SUB * 1.25) / (env.gpuOptions.cpuMirror === false ? 3 : 1) + 2 * 2 ** 30;
        const avail = availableMemory();
        const heapNeed = c.subscriptions * 1500 + 2 ** 30;
        const heapHave = v8.getHeapStatistics().heap_size_limit;
        if (needBytes > avail) {
          skip('gpu', `scale ${count(c.subscriptions)}`, `needs about ${sig(needBytes / 2 ** 30)} GiB of host memory, ${sig(avail / 2 ** 30)} GiB available (--scale-subs lowers it)`);
          break;
        }
        if (heapNeed > heapHave) {
          skip('gpu', `scale ${count(c.subscriptions)}`, `needs a JS heap of about ${sig(heapNeed / 2 ** 30)} GiB, the limit is ${sig(heapHave / 2 ** 30)} GiB (node --max-old-space-size=${Math.ceil(heapNeed / 2 ** 20)}; this run uses ${heapLimitMb()} MB)`);
          break;
        }
        note(`[scale] ${count(c.subscriptions)} subscriptions: about ${sig(needBytes / 2 ** 30)} GiB of ${sig(avail / 2 ** 30)} GiB available host memory; checkpoints at ${c.checkpoints.map((f) => count(Math.round(f * c.subscriptions))).join(', ')}`);
        const r = await runScaleSuite(c, env, skip, (partial) => {
          file.suites.scale = partial;
          save();
        });
        if (r !== null) {
          file.suites.scale = r;
          out(`## Scale: ${count(c.subscriptions)} subscriptions resident`);
          out();
          out(scaleTable(r));
        }
        break;
      }
    }
    for (const problem of healthProblems(file.suites[suite])) addNote(`${suite}: the GPU did not serve cleanly: ${problem}`);
    const wall = performance.now() - t0;
    file.suiteWallMs[suite] = wall;
    save();
    out();
    out(`(${suite}: ${sig(wall / 1000)} s)`);
    out();
    note(`[${suite}] done in ${sig(wall / 1000)} s`);
  }

  if (file.skipped.length > 0) {
    out('Skipped:');
    for (const s of file.skipped) out(`- [${s.suite}] ${s.engine} ${s.detail}: ${s.reason}`);
    out();
  }
  save();
  const total = Object.values(file.suiteWallMs).reduce((a, b) => a + (b ?? 0), 0);
  out(`total ${sig(total / 1000)} s; results: ${run.shown} (sink ${file.sink})`);
}

runMain('bench:gpu', main);
