/**
 * Loading subscriptions: each engine's `add` one by one against its bulk `addMany` (checked whole,
 * all or nothing: semantics L11), on the same generated CLCB Table-1 subscriptions, beside what a
 * user would load instead (rbush's `load`, with the same validation and exact checks around it:
 * bench/lib/baselines.ts). Filters per second over repeated loads into a fresh engine (min,
 * median, p99 of the load time), in one process, after a warm-up load. Target: >= 1M filters/s
 * on one core for addMany. Then each engine's memory after one addMany, in a child process of its
 * own (heap and typed arrays, per filter).
 *
 *   node --expose-gc dist/bench/bulk-load.js [--subscriptions N] [--engines fast,rtree,rbush,gpu] [--repeats R] [--seed S] [--out FILE] [--quick] [--allow-software]
 */
import { fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { GpuMatcher } from '../src/engines/gpu/matcher.js';
import type { Matcher } from '../src/engines/matcher.js';
import { type Event, type Subscription } from '../src/model/types.js';
import { WorkloadSource } from '../src/workload/index.js';
import { cliFail, readCommandLine, runMain } from './lib/args.js';
import { createEngine } from './lib/cases.js';
import { describeMachine } from './lib/machine.js';
import { collect, now } from './lib/measure.js';
import { note } from './lib/progress.js';
import { ResultRun } from './lib/result-file.js';
import { summarize } from './lib/stats.js';

const USAGE = `usage: node --expose-gc dist/bench/bulk-load.js [--subscriptions N] [--engines LIST] [--repeats R] [--seed S] [--out FILE] [--quick] [--allow-software]
Defaults: 100000 subscriptions (CLCB Table 1: 10 filters each), engines fast,rtree,rbush, 5 loads each way after a warm-up.
Engines: fast, rtree, reference, rbush, flatbush, and gpu (its host side timed; the first match after
the load, which uploads the state, reported beside it; a software adapter only with --allow-software).
--quick: 20000 subscriptions, 2 loads.`;

interface Row {
  engine: string;
  way: 'add' | 'addMany';
  ms: ReturnType<typeof summarize>;
  filtersPerSecond: { min: number; median: number; max: number };
  /** GPU engine: the first match after the load (the state's upload to the device, then one event), ms. */
  firstMatchMs?: ReturnType<typeof summarize>;
}

/**
 * An engine by name: the CPU engines and baselines of cases.ts, or `gpu` (the GPU engine on its
 * GPU path at every size; a software adapter only with --allow-software).
 */
async function makeEngine(engine: string, allowSoftware: boolean): Promise<Matcher> {
  if (engine !== 'gpu') return createEngine(engine);
  return GpuMatcher.create({ gpu: { allowSoftware }, cpuBelowFilters: 0, select: 'gpu' });
}

interface MemoryRow {
  engine: string;
  heapBytes: number;
  externalBytes: number;
  bytesPerFilter: number;
}

const ENTRY = fileURLToPath(import.meta.url);
/** Set in the child that measures one engine's memory. */
const MEMORY_ENV = 'AMBIT_BULK_LOAD_MEMORY_OF';
/** Set in that child when a software GPU adapter is allowed. */
const SOFTWARE_ENV = 'AMBIT_BULK_LOAD_SOFTWARE';

function subscriptionsOf(n: number, seed: number): Subscription[] {
  const src = new WorkloadSource({ subscriptions: n, events: 0, spatial: 'uniform', seed });
  const subs: Subscription[] = [];
  for (const s of src.subscriptions(n)) subs.push(s);
  return subs;
}

/** In the child: heap and external growth from one addMany of the engine, the subscriptions held throughout. */
async function measureMemory(engine: string, n: number, seed: number): Promise<void> {
  const subs = subscriptionsOf(n, seed);
  const settle = async (): Promise<void> => {
    for (let k = 0; k < 3; k++) {
      collect();
      await new Promise((r) => setTimeout(r, 20));
    }
  };
  // The engine made first (a GPU engine's device and kernels are not the load's).
  const m = await makeEngine(engine, process.env[SOFTWARE_ENV] === '1');
  await settle();
  const before = process.memoryUsage();
  m.addMany(subs);
  await settle();
  const after = process.memoryUsage();
  if (m.stats().subscriptions !== n) throw new Error(`bench/bulk-load: ${engine} holds ${m.stats().subscriptions} of ${n}`);
  await m.close();
  process.send!({ heapBytes: after.heapUsed - before.heapUsed, externalBytes: after.external - before.external, subscriptions: subs.length });
}

function memoryInChild(engine: string, n: number, seed: number, filters: number, allowSoftware: boolean): Promise<MemoryRow> {
  return new Promise((resolve, reject) => {
    const child = fork(ENTRY, [], { execArgv: ['--expose-gc'], env: { ...process.env, [MEMORY_ENV]: JSON.stringify({ engine, n, seed }), [SOFTWARE_ENV]: allowSoftware ? '1' : '0' } });
    let got: { heapBytes: number; externalBytes: number } | null = null;
    child.on('message', (m) => (got = m as { heapBytes: number; externalBytes: number }));
    child.on('error', reject);
    child.on('exit', (code) => {
      if (got === null) reject(new Error(`bench/bulk-load: the memory child for ${engine} exited with ${code} and no figures`));
      else resolve({ engine, heapBytes: got.heapBytes, externalBytes: got.externalBytes, bytesPerFilter: (got.heapBytes + got.externalBytes) / filters });
    });
  });
}

async function main(): Promise<void> {
  const child = process.env[MEMORY_ENV];
  if (child !== undefined) {
    const { engine, n, seed } = JSON.parse(child) as { engine: string; n: number; seed: number };
    await measureMemory(engine, n, seed);
    return;
  }
  const cl = readCommandLine(process.argv.slice(2), new Set(['quick', 'help', 'allow-software']), new Set(['subscriptions', 'engines', 'repeats', 'seed', 'out']), cliFail('bench/bulk-load', USAGE), USAGE);
  if (cl === null) return;
  const { a, r } = cl;
  const quick = a.quick === true;
  const allowSoftware = a['allow-software'] === true;
  const n = r.count('subscriptions', quick ? 20_000 : 100_000);
  const repeats = r.int('repeats', quick ? 2 : 5, 1, 100);
  const seed = r.int('seed', 1, 0);
  const engines = (r.str('engines') ?? 'fast,rtree,rbush').split(',').map((x) => x.trim()).filter((x) => x !== '');
  const run = new ResultRun({ out: a.out, name: 'bulk-load', fail: cliFail('bench/bulk-load', USAGE) });
  const out = (s: string) => process.stdout.write(`${s}\n`);
  const subs = subscriptionsOf(n, seed);
  const filters = subs.reduce((x, s) => x + s.filters.length, 0);
  const constraints = subs.reduce((x, s) => x + s.filters.reduce((y, f) => y + f.constraints.length, 0), 0);
  const firstEvent: Event = new WorkloadSource({ subscriptions: n, events: 1, spatial: 'uniform', seed }).events(1)[0];
  out(`machine: ${describeMachine(run.machine)}`);
  out(`${n} subscriptions (${filters} filters, CLCB Table 1, seed ${seed}), ${repeats} loads each way after a warm-up, engines ${engines.join(', ')}`);
  const rows: Row[] = [];
  for (const engine of engines) {
    for (const way of ['add', 'addMany'] as const) {
      const load = async (): Promise<{ ms: number; firstMatchMs: number | null }> => {
        const m = await makeEngine(engine, allowSoftware);
        try {
          collect();
          const t0 = now();
          if (way === 'add') for (let i = 0; i < subs.length; i++) m.add(subs[i]);
          else m.addMany(subs);
          const ms = Number(now() - t0) / 1e6;
          if (m.stats().subscriptions !== n) throw new Error(`bench/bulk-load: ${engine} ${way} holds ${m.stats().subscriptions} of ${n}`);
          if (engine !== 'gpu') return { ms, firstMatchMs: null };
          const t1 = now();
          await m.match(firstEvent);
          return { ms, firstMatchMs: Number(now() - t1) / 1e6 };
        } finally {
          await m.close();
        }
      };
      await load(); // warm-up
      const times: number[] = [];
      const firsts: number[] = [];
      for (let k = 0; k < repeats; k++) {
        const t = await load();
        times.push(t.ms);
        if (t.firstMatchMs !== null) firsts.push(t.firstMatchMs);
      }
      const ms = summarize(times);
      const row: Row = { engine, way, ms, filtersPerSecond: { min: filters / (ms.max / 1000), median: filters / (ms.median / 1000), max: filters / (ms.min / 1000) } };
      if (firsts.length > 0) row.firstMatchMs = summarize(firsts);
      rows.push(row);
      note(`${engine} ${way}: median ${ms.median.toFixed(0)} ms, ${(row.filtersPerSecond.median / 1e6).toFixed(2)}M filters/s`);
    }
  }
  // Memory: each engine in a process of its own (a fresh heap, nothing left by the timed loads),
  // what one addMany load leaves beside the subscriptions it was given, per filter.
  const memory: MemoryRow[] = [];
  for (const engine of engines) {
    note(`${engine}: memory, in a child process`);
    memory.push(await memoryInChild(engine, n, seed, filters, allowSoftware));
  }
  out('');
  out('| engine | load | min ms | median ms | p99 ms | filters/s (median) | target >= 1M/s (addMany) | then the first match, median ms (GPU: the upload) |');
  out('|---|---|---:|---:|---:|---:|---|---:|');
  for (const x of rows) out(`| ${x.engine} | ${x.way} | ${x.ms.min.toFixed(0)} | ${x.ms.median.toFixed(0)} | ${x.ms.p99.toFixed(0)} | ${(x.filtersPerSecond.median / 1e6).toFixed(2)}M | ${x.way === 'addMany' ? (x.filtersPerSecond.median >= 1e6 ? 'met' : 'not met') : ''} | ${x.firstMatchMs === undefined ? '–' : x.firstMatchMs.median.toFixed(0)} |`);
  {
    out('');
    out(`Memory after addMany (${(constraints / filters).toFixed(2)} constraints a filter):`);
    out('');
    out('| engine | heap Δ MiB | external Δ (typed arrays) MiB | bytes a filter |');
    out('|---|---:|---:|---:|');
    for (const x of memory) out(`| ${x.engine} | ${(x.heapBytes / 2 ** 20).toFixed(1)} | ${(x.externalBytes / 2 ** 20).toFixed(1)} | ${x.bytesPerFilter.toFixed(0)} |`);
  }
  run.write({ kind: 'bulk-load', startedAt: run.startedAt.toISOString(), machine: run.machine, command: run.command, subscriptions: n, filters, constraints, seed, repeats, rows, memory });
}

runMain('bench/bulk-load', main);
