/**
 * One plot of subset-matching throughput against database size from several runs of
 * bench/tagmatch.ts (a database too large for one run is measured a part per run):
 *
 *   node dist/bench/tagmatch-report.js [RUN.json ...] [--dir DIR]
 *
 * Without files, every run in DIR (default bench/results/tagmatch); writes
 * DIR/throughput-vs-size.svg. Each run's parts are points; each GPU is a series.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { cliFail, parseReportArgs, runMain } from './lib/args.js';
import { count } from './lib/format.js';
import { linePlot, type Series } from './lib/svg.js';

const HELP = 'Usage: node dist/bench/tagmatch-report.js [RUN.json ...] [--dir DIR]   (default DIR: bench/results/tagmatch)';

interface Run {
  gpu: string;
  parts: { entries: number; gpu: { qps: { median: number } }[]; cpu: { qps: { median: number } }[] }[];
}

async function main(): Promise<void> {
  const fail = cliFail('tagmatch-report', HELP);
  const { files, dir } = parseReportArgs(process.argv.slice(2), path.resolve('bench/results/tagmatch'), HELP, fail);
  const out = path.join(dir, 'throughput-vs-size.svg');
  const byGpu = new Map<string, [number, number, number, number, number][]>();
  for (const f of files) {
    const run = JSON.parse(readFileSync(f, 'utf8')) as Run;
    if (!Array.isArray(run.parts)) fail(`${f}: not a tagmatch result (no parts)`);
    const pts = byGpu.get(run.gpu) ?? [];
    for (const p of run.parts) pts.push([p.entries, p.gpu[0].qps.median, p.gpu[1].qps.median, p.cpu[0].qps.median, p.cpu[1].qps.median]);
    byGpu.set(run.gpu, pts);
  }
  const series: Series[] = [];
  const colors = ['#2ca02c', '#9467bd', '#ff7f0e'];
  let i = 0;
  for (const [gpu, pts] of byGpu) {
    pts.sort((a, b) => a[0] - b[0]);
    const color = colors[i++ % colors.length];
    const name = gpu.replace(/^nvidia /, '');
    series.push({ name: `GPU match, ${name}`, color, marker: 'circle', points: pts.map((p) => [p[0], p[1]] as const) });
    series.push({ name: `GPU match-unique, ${name}`, color, dash: '7 4', marker: 'square', points: pts.map((p) => [p[0], p[2]] as const) });
    series.push({ name: `CPU index match (1 core), host of ${name}`, color: '#1f77b4', marker: 'triangle', points: pts.map((p) => [p[0], p[3]] as const) });
  }
  writeFileSync(out, linePlot({ title: 'Subset matching: queries per second vs database size', xLabel: 'database entries (set, key)', yLabel: 'queries / s', logY: true, series, xFormat: (x) => count(x), width: 900 }));
  process.stdout.write(`wrote ${path.relative(process.cwd(), out)}\n`);
}

runMain('tagmatch-report', main);
