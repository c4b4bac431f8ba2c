/**
 * Plots runs of bench/event-patterns.ts: for each run, events/s per scenario and selection, the
 * CDP sequencer (median over passes, whiskers min–max) beside T-Rex's CPU engine on the same stream
 * where the run had it (log scale).
 *
 *   node dist/bench/event-patterns-report.js [RUN.json ...] [--dir DIR]
 *
 * Without files, every run in DIR (default bench/results/event-patterns). One plot per machine,
 * named after the common prefix of its runs' files: <prefix>-events-per-s.svg beside them.
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
  }[];
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
