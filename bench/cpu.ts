/**
 * The CPU benchmark: the registered engines on seeded workloads shaped like CLCB's evaluation (§5).
 *
 *   default  Table 1 scenario: load, per-event latency, throughput, location updates, memory
 *   grid     Fig. 3/4: latency vs subscriptions × area of relevance, uniform and zipf placement
 *   update   Fig. 5: update time vs subscriptions
 *
 * Tables go to stdout, progress to stderr, everything measured to a JSON file (bench/out/ by
 * default) from which `npm run bench:report` builds the result documents.
 */
import { fileURLToPath } from 'node:url';
import { CPU_ENGINES } from '../src/engines/index.js';
import { BASELINES } from './lib/baselines.js';
import { DEFAULT_WORKLOAD, type WorkloadOptions, resolveWorkloadOptions } from '../src/workload/index.js';
import { type Job, type JobResult, runJob } from './lib/cases.js';
import { childExecArgv, childMain, runInChild } from './lib/fork.js';
import { count, pct } from './lib/format.js';
import { describeMachine } from './lib/machine.js';
import { timerOverheadNs } from './lib/measure.js';
import { note } from './lib/progress.js';
import { type BenchConfig, type BenchFile, type DefaultResult, type GridResult, SCHEMA, SUITES, type Skip, type SuiteName, type UpdateResult } from './lib/schema.js';
import { sinkValue } from './lib/sink.js';
import { defaultTables, gridTables, updateTables } from './lib/tables.js';
import { ArgReader, type Fail, cliFail, parseArgs, runMain } from './lib/args.js';
import { ResultRun } from './lib/result-file.js';

const ENTRY = fileURLToPath(import.meta.url);

const HELP = `Usage: node dist/bench/cpu.js [options]     (npm run bench -- [options])

  --suite LIST      default,grid,update (default: all)
  --engines LIST    engines from the registry, and the baselines rbush and flatbush (a plain
                    spatial index of filter boxes, then exact tests: what users would build
                    instead; bench/lib/baselines.ts) (default: all but reference;
                    reference runs only when named, and only up to 10k subscriptions)
  --quick           small sizes: a 1–2 minute smoke run
  --seed N          workload seed (default ${DEFAULT_WORKLOAD.seed})
  --filters-per-sub N  filters of each subscription, all anchored to its device (default ${DEFAULT_WORKLOAD.filtersPerSub}; 1: one filter per device)
  --subs N          default suite: subscriptions (default 250000, quick 10000)
  --events N        default suite: events (default 1000, quick 200)
  --reps N          default suite: passes over the events (default 3, quick 2)
  --updates N       individually timed location updates per measurement (default 10000, quick 2000)
  --sizes LIST      grid and update suites: subscription counts (default 1000,10000,100000,250000,1000000)
  --areas LIST      grid suite: areas in percent of the region (default 0.001,0.01,0.1,1)
  --spatial LIST    grid and update suites: uniform,zipf (default both)
  --grid-events N   grid suite: events per point (default 1000, quick 100: with a few hundred, the small sizes measure warm-up and cache-hot repeats)
  --out PATH        result file (default bench/out/<name>-<timestamp>.json)
  --name NAME       result name (default cpu, quick: cpu-quick)
  --no-fork         run jobs in this process (no per-job process isolation)
  --help`;

const fail: Fail = cliFail('bench', HELP);

const FLAGS = new Set(['quick', 'no-fork', 'help', 'child']);
const VALUED = new Set(['suite', 'engines', 'seed', 'filters-per-sub', 'subs', 'events', 'reps', 'updates', 'sizes', 'areas', 'spatial', 'grid-events', 'out', 'name']);

function buildConfig(a: ArgReader): BenchConfig {
  const quick = a.flag('quick');
  const registered = [...Object.keys(CPU_ENGINES), ...Object.keys(BASELINES)];
  const engines = a.oneOf('engines', registered, registered.filter((e) => e !== 'reference'));
  if (engines.length === 0) fail('no engines to run');
  const spatial = a.spatial('spatial');
  const updates = a.int('updates', quick ? 2000 : 10_000);
  const sizes = a.counts('sizes', quick ? [1000, 10_000] : [1000, 10_000, 100_000, 250_000, 1_000_000]);
  return {
    engines,
    seed: a.int('seed', DEFAULT_WORKLOAD.seed, 0),
    filtersPerSub: a.int('filters-per-sub', DEFAULT_WORKLOAD.filtersPerSub, 1),
    referenceMaxSubscriptions: 10_000,
    default: {
      subscriptions: a.count('subs', quick ? 10_000 : DEFAULT_WORKLOAD.subscriptions),
      events: a.int('events', quick ? 200 : DEFAULT_WORKLOAD.events),
      reps: a.int('reps', quick ? 2 : 3),
      warmupEvents: quick ? 50 : 200,
      updates,
      bulkUpdates: updates * 10,
      mixedRounds: quick ? 50 : 500,
      updatesPerEvent: 100,
    },
    grid: {
      sizes,
      areas: a.areas('areas', [1e-5, 1e-4, 1e-3, 1e-2]),
      spatial,
      events: a.int('grid-events', quick ? 100 : 1000),
      warmupEvents: quick ? 20 : 50,
    },
    update: {
      sizes: a.list('sizes') !== undefined ? sizes : quick ? [1000, 10_000, 100_000] : [1000, 10_000, 100_000, 250_000, 1_000_000],
      spatial,
      updates,
      bulkUpdates: updates * 10,
    },
  };
}

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2), FLAGS, VALUED, fail);
  if (args.child === true) return childMain();
  if (args.help === true) {
    process.stdout.write(`${HELP}\n`);
    return;
  }
  const a = new ArgReader(args, fail);
  const config = buildConfig(a);
  const suites = a.oneOf<SuiteName>('suite', SUITES, SUITES);
  const fork = args['no-fork'] !== true;
  const quick = args.quick === true;
  const name = typeof args.name === 'string' ? args.name : quick ? 'cpu-quick' : 'cpu';
  const result = new ResultRun({ out: args.out, name, execArgv: fork ? childExecArgv() : process.execArgv, fail });
  const workload: Partial<WorkloadOptions> = { seed: config.seed, filtersPerSub: config.filtersPerSub };
  const params = resolveWorkloadOptions({ ...workload, subscriptions: config.default.subscriptions, events: config.default.events });

  const machine = result.machine;
  const file: BenchFile = {
    schema: SCHEMA,
    name,
    startedAt: result.startedAt.toISOString(),
    finishedAt: '',
    quick,
    argv: result.argv,
    machine,
    config,
    workload: { ...params, regionInfo: { ...params.regionInfo } } as unknown as Record<string, unknown>,
    suites: {},
    skipped: [],
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
    result.write(file);
  };

  out(`Ambit CPU benchmark${quick ? ' (quick)' : ''}`);
  out(`machine: ${describeMachine(machine)}`);
  out(`engines: ${config.engines.join(', ')}; suites: ${suites.join(', ')}; seed ${config.seed}; ${fork ? 'one process per job' : 'in-process'}; timer overhead ${file.timerOverheadNs} ns per timed call`);
  out(
    `workload: CLCB Table 1 — ${params.filtersPerSub} filters/sub, ${params.constraintsMin}–${params.constraintsMax} constraints, ` +
      `${params.attributesMin}–${params.attributesMax} attributes, ${params.names} names, ${params.values} values, ` +
      `target selectivity ${pct(params.selectivity)}, region ${params.regionInfo.name} (${params.regionInfo.areaKm2} km²), area ${pct(params.areaFraction)} = ${params.filterRadiusM.toFixed(0)} m`,
  );
  out();

  const skip = (s: Skip): void => {
    note(`[${s.suite}] ${s.engine} ${s.detail}: skipped (${s.reason})`);
    file.skipped.push(s);
  };
  const refTooBig = (engine: string, n: number): boolean => engine === 'reference' && n > config.referenceMaxSubscriptions;
  const refReason = `the reference engine is O(n) per event; it runs up to ${count(config.referenceMaxSubscriptions)} subscriptions`;

  // Jobs per suite, for "[grid 3/40]" progress notes.
  const sizeCount = (sizes: number[]): number => config.engines.reduce((a, e) => a + sizes.filter((n) => !refTooBig(e, n)).length, 0);
  const planned: Record<SuiteName, number> = {
    default: sizeCount([config.default.subscriptions]),
    grid: config.grid.spatial.length * sizeCount(config.grid.sizes),
    update: config.update.spatial.length * (sizeCount(config.update.sizes) - (config.engines.includes('flatbush') ? config.update.sizes.length : 0)),
  };
  const done: Record<SuiteName, number> = { default: 0, grid: 0, update: 0 };
  const run = async (job: Job, skipSuite: SuiteName, detail: string): Promise<JobResult | null> => {
    note(`[${skipSuite} ${++done[skipSuite]}/${planned[skipSuite]}] ${detail}`);
    try {
      if (!fork) return await runJob(job);
      const { result, sink } = await runInChild(ENTRY, job);
      sinkTotal = (sinkTotal + sink) | 0;
      return result;
    } catch (err) {
      const reason = err instanceof Error ? err.message.split('\n')[0] : String(err);
      note(`  failed: ${reason}`);
      file.skipped.push({ suite: skipSuite, engine: job.engine, detail, reason });
      return null;
    }
  };
  if (suites.includes('default')) {
    const c = config.default;
    const results: DefaultResult[] = [];
    for (const engine of config.engines) {
      if (refTooBig(engine, c.subscriptions)) {
        skip({ suite: 'default', engine, detail: `${count(c.subscriptions)} subscriptions`, reason: refReason });
        continue;
      }
      const r = await run({ kind: 'default', engine, workload, config: c }, 'default', `${engine}: ${count(c.subscriptions)} subscriptions, ${c.events} events`);
      if (r !== null) results.push(r as DefaultResult);
    }
    file.suites.default = results;
    save();
    out('## Default scenario (CLCB Table 1)');
    out();
    out(defaultTables(results));
    out();
  }

  if (suites.includes('grid')) {
    const g = config.grid;
    const results: GridResult[] = [];
    for (const spatial of g.spatial) {
      for (const n of g.sizes) {
        for (const engine of config.engines) {
          if (refTooBig(engine, n)) {
            skip({ suite: 'grid', engine, detail: `${spatial} ${count(n)}`, reason: refReason });
            continue;
          }
          const r = await run(
            { kind: 'grid', engine, workload, spatial, subscriptions: n, areas: g.areas, events: g.events, warmupEvents: g.warmupEvents },
            'grid',
            `${engine}: ${spatial}, ${count(n)} subscriptions, areas ${g.areas.map(pct).join(' ')}`,
          );
          if (r !== null) results.push(r as GridResult);
        }
        file.suites.grid = results;
        save();
      }
    }
    file.suites.grid = results;
    save();
    out(`## Matching time vs subscriptions and area (CLCB Fig. 3/4), ${g.events} events per point`);
    out();
    out(gridTables(results));
    out();
  }

  if (suites.includes('update')) {
    const u = config.update;
    const results: UpdateResult[] = [];
    for (const spatial of u.spatial) {
      for (const n of u.sizes) {
        for (const engine of config.engines) {
          if (refTooBig(engine, n)) {
            skip({ suite: 'update', engine, detail: `${spatial} ${count(n)}`, reason: refReason });
            continue;
          }
          if (engine === 'flatbush') {
            skip({ suite: 'update', engine, detail: `${spatial} ${count(n)}`, reason: 'a static index: a move only marks it stale, and the next match rebuilds it (the default suite times that)' });
            continue;
          }
          const r = await run(
            { kind: 'update', engine, workload, spatial, subscriptions: n, updates: u.updates, bulkUpdates: u.bulkUpdates },
            'update',
            `${engine}: ${spatial}, ${count(n)} subscriptions`,
          );
          if (r !== null) results.push(r as UpdateResult);
        }
        file.suites.update = results;
        save();
      }
    }
    file.suites.update = results;
    save();
    out(`## Location update time vs subscriptions (CLCB Fig. 5), ${u.updates} timed updates per point`);
    out();
    out(updateTables(results));
    out();
  }

  if (file.skipped.length > 0) {
    out('Skipped:');
    for (const s of file.skipped) out(`- [${s.suite}] ${s.engine} ${s.detail}: ${s.reason}`);
    out();
  }
  save();
  out(`results: ${result.shown} (sink ${file.sink})`);
}

runMain('bench', main);
