/**
 * Plots runs of bench/event-patterns.ts: for each run, events/s per scenario and selection, the
 * CDP sequencer (median over passes, whiskers min–max) beside T-Rex's CPU engine on the same stream
 * where the run had it (log scale).
 *
 *   node dist/bench/event-patterns-report.js [RUN.json ...] [--dir DIR]
 *
 * Without files, every run in DIR (default bench/results/event-patterns). One plot per machine,
 * named after the common prefix of its runs' files: <prefix>-events-per-s.svg beside them. A run
 * with the GPU sequencer (`--gpu`) gets a plot of its own, <name>-events-per-s.svg: the CDP beside
 * the GPU sequencer at each batch size.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { cliFail, parseReportArgs, runMain } from './lib/args.js';
import type { MachineInfo } from './lib/machine.js';
import { describeMachine } from './lib/machine.js';
import { type BarGroup, barPlot } from './lib/svg-bars.js';

const HELP = 'Usage: node dist/bench/event-patterns-report.js [RUN.json ...] [--dir DIR]   (default DIR: bench/results/event-patterns)';

interface Run {
  benchmark: string;
  machine: MachineInfo;
  parameters: { events: number; values: number };
  scenarios: {
    scenario: { name: string; selection: string };
    matches: number;
    eventsPerS: { min: number; median: number; max: number };
    trex: null | { eventsPerS: number; equal: boolean | null; note?: string };
    gpu?: { batch: number; equal: boolean; eventsPerS: { min: number; median: number; max: number } }[];
  }[];
  gpu?: { device: string } | null;
}

const GPU_COLORS = ['#ff7f0e', '#2ca02c', '#9467bd', '#8c564b'];

/** The CDP beside the GPU sequencer at each of the run's batch sizes. */
function gpuPlot(f: string, run: Run): void {
  const sizes = [...new Set(run.scenarios.flatMap((s) => (s.gpu ?? []).map((g) => g.batch)))].sort((a, b) => a - b);
  const groups: BarGroup[] = run.scenarios.map((s) => ({
    label: [s.scenario.name, s.scenario.selection],
    values: [
      { y: s.eventsPerS.median, lo: s.eventsPerS.min, hi: s.eventsPerS.max },
      ...sizes.map((b) => {
        const g = (s.gpu ?? []).find((x) => x.batch === b);
        return g === undefined || !g.equal ? null : { y: g.eventsPerS.median, lo: g.eventsPerS.min, hi: g.eventsPerS.max };
      }),
    ],
  }));
  const svg = barPlot({
    title: `Pattern matching on the GPU (GTrex) and the CDP, R2 workload (${run.parameters.events} events): ${describeMachine(run.machine).replace(/, commit .*$/, '')}, ${run.gpu?.device ?? 'GPU'}`,
    yLabel: 'events/s (log)',
    logY: true,
    series: [{ name: 'CDP sequencer (one release at a time)', color: '#1f77b4' }, ...sizes.map((b, i) => ({ name: `GPU sequencer, batches of ${b}`, color: GPU_COLORS[i % GPU_COLORS.length] }))],
    groups,
    notes: ['whiskers: min-max over passes', 'every GPU answer equal to the CDP\'s (no bar: not equal)'],
    height: 440,
  });
  const out = path.join(path.dirname(f), `${path.basename(f, '.json')}-events-per-s.svg`);
  writeFileSync(out, svg);
  process.stdout.write(`wrote ${path.relative(process.cwd(), out)}\n`);
}

/** The longest common prefix of the runs' file names, without a trailing '-': the plot's name. */
function commonName(files: readonly string[]): string {
  const names = files.map((f) => path.basename(f, '.json'));
  let p = names[0];
  for (const n of names) while (!n.startsWith(p)) p = p.slice(0, -1);
  return p.replace(/[-_.]+$/, '') || 'runs';
}

async function main(): Promise<void> {
  const fail = cliFail('event-patterns-report', HELP);
  const { files } = parseReportArgs(process.argv.slice(2), path.resolve('bench/results/event-patterns'), HELP, fail);
  // One plot per machine: runs on one machine (a sweep split over several processes) go together.
  const byMachine = new Map<string, { files: string[]; runs: Run[] }>();
  for (const f of files) {
    const run = JSON.parse(readFileSync(f, 'utf8')) as Run;
    if (run.benchmark !== 'event-patterns' || !Array.isArray(run.scenarios)) fail(`${f}: not an event-patterns result`);
    if (run.scenarios.some((s) => (s.gpu ?? []).length > 0)) {
      gpuPlot(f, run);
      continue;
    }
    const m = describeMachine(run.machine).replace(/, commit .*$/, '');
    const g = byMachine.get(m) ?? { files: [], runs: [] };
    g.files.push(f);
    g.runs.push(run);
    byMachine.set(m, g);
  }
  for (const [machine, g] of byMachine) {
    const groups: BarGroup[] = [];
    const seen = new Set<string>();
    for (const run of g.runs) {
      for (const s of run.scenarios) {
        // A scenario several runs repeated (each split run measured the base again): the first.
        const key = `${s.scenario.name}/${s.scenario.selection}`;
        if (seen.has(key)) continue;
        seen.add(key);
        groups.push({
          label: [s.scenario.name, s.scenario.selection],
          values: [
            { y: s.eventsPerS.median, lo: s.eventsPerS.min, hi: s.eventsPerS.max },
            s.trex === null || s.trex.note !== undefined || !Number.isFinite(s.trex.eventsPerS) ? null : { y: s.trex.eventsPerS },
          ],
        });
      }
    }
    const svg = barPlot({
      title: `Pattern matching, the thesis's R2 workload (${g.runs[0].parameters.events} events): ${machine}`,
      yLabel: 'events/s (log)',
      logY: true,
      series: [
        { name: 'Ambit CDP sequencer', color: '#1f77b4' },
        { name: "T-Rex's CPU engine", color: '#d62728' },
      ],
      groups,
      notes: ['whiskers: min-max over passes', 'no T-Rex bar: not run, or past its time limit'],
      height: 440,
    });
    const out = path.join(path.dirname(g.files[0]), `${commonName(g.files)}-events-per-s.svg`);
    writeFileSync(out, svg);
    process.stdout.write(`wrote ${path.relative(process.cwd(), out)}\n`);
  }
}

runMain('event-patterns-report', main);
