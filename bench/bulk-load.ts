/**
 * Loading subscriptions: each engine's `add` one by one against its bulk `addMany` (checked whole,
 * all or nothing: semantics L11), on the same generated CLCB Table-1 subscriptions, beside what a
 * user would load instead (rbush's `load`, with the same validation and exact checks around it:
 * bench/lib/baselines.ts). Filters per second over repeated loads into a fresh engine (min,
 * median, p99 of the load time), in one process, after a warm-up load. Target (#13): >= 1M
 * filters/s on one core for addMany.
 *
 *   node --expose-gc dist/bench/bulk-load.js [--subscriptions N] [--engines fast,rtree,rbush] [--repeats R] [--seed S] [--out FILE] [--quick]
 */
import { type Subscription } from '../src/model/types.js';
import { WorkloadSource } from '../src/workload/index.js';
import { cliFail, readCommandLine, runMain } from './lib/args.js';
import { createEngine } from './lib/cases.js';
import { describeMachine } from './lib/machine.js';
import { collect, now } from './lib/measure.js';
import { note } from './lib/progress.js';
import { ResultRun } from './lib/result-file.js';
import { summarize } from './lib/stats.js';

const USAGE = `usage: node --expose-gc dist/bench/bulk-load.js [--subscriptions N] [--engines LIST] [--repeats R] [--seed S] [--out FILE] [--quick]
Defaults: 100000 subscriptions (CLCB Table 1: 10 filters each), engines fast,rtree,rbush, 5 loads each way after a warm-up.
--quick: 20000 subscriptions, 2 loads.`;

interface Row {
  engine: string;
  way: 'add' | 'addMany';
  ms: ReturnType<typeof summarize>;
  filtersPerSecond: { min: number; median: number; max: number };
}

async function main(): Promise<void> {
  const cl = readCommandLine(process.argv.slice(2), new Set(['quick', 'help']), new Set(['subscriptions', 'engines', 'repeats', 'seed', 'out']), cliFail('bench/bulk-load', USAGE), USAGE);
  if (cl === null) return;
  const { a, r } = cl;
  const quick = a.quick === true;
  const n = r.count('subscriptions', quick ? 20_000 : 100_000);
  const repeats = r.int('repeats', quick ? 2 : 5, 1, 100);
  const seed = r.int('seed', 1, 0);
  const engines = (r.str('engines') ?? 'fast,rtree,rbush').split(',').map((x) => x.trim()).filter((x) => x !== '');
  const run = new ResultRun({ out: a.out, name: 'bulk-load', fail: cliFail('bench/bulk-load', USAGE) });
  const out = (s: string) => process.stdout.write(`${s}\n`);
  const src = new WorkloadSource({ subscriptions: n, events: 0, spatial: 'uniform', seed });
  const subs: Subscription[] = [];
  for (const s of src.subscriptions(n)) subs.push(s);
  const filters = subs.reduce((x, s) => x + s.filters.length, 0);
  out(`machine: ${describeMachine(run.machine)}`);
  out(`${n} subscriptions (${filters} filters, CLCB Table 1, seed ${seed}), ${repeats} loads each way after a warm-up, engines ${engines.join(', ')}`);
  const rows: Row[] = [];
  for (const engine of engines) {
    for (const way of ['add', 'addMany'] as const) {
      const load = (): number => {
        const m = createEngine(engine);
        collect();
        const t0 = now();
        if (way === 'add') for (let i = 0; i < subs.length; i++) m.add(subs[i]);
        else m.addMany(subs);
        const ms = Number(now() - t0) / 1e6;
        if (m.stats().subscriptions !== n) throw new Error(`bench/bulk-load: ${engine} ${way} holds ${m.stats().subscriptions} of ${n}`);
        return ms;
      };
      load(); // warm-up
      const times: number[] = [];
      for (let k = 0; k < repeats; k++) times.push(load());
      const ms = summarize(times);
      const row: Row = { engine, way, ms, filtersPerSecond: { min: filters / (ms.max / 1000), median: filters / (ms.median / 1000), max: filters / (ms.min / 1000) } };
      rows.push(row);
      note(`${engine} ${way}: median ${ms.median.toFixed(0)} ms, ${(row.filtersPerSecond.median / 1e6).toFixed(2)}M filters/s`);
    }
  }
  out('');
  out('| engine | load | min ms | median ms | p99 ms | filters/s (median) | target >= 1M/s (addMany) |');
  out('|---|---|---:|---:|---:|---:|---|');
  for (const x of rows) out(`| ${x.engine} | ${x.way} | ${x.ms.min.toFixed(0)} | ${x.ms.median.toFixed(0)} | ${x.ms.p99.toFixed(0)} | ${(x.filtersPerSecond.median / 1e6).toFixed(2)}M | ${x.way === 'addMany' ? (x.filtersPerSecond.median >= 1e6 ? 'met' : 'not met') : ''} |`);
  run.write({ kind: 'bulk-load', startedAt: run.startedAt.toISOString(), machine: run.machine, command: run.command, subscriptions: n, filters, seed, repeats, rows });
}

runMain('bench/bulk-load', main);
