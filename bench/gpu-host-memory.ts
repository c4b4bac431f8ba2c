/**
 * The GPU engine's host memory against its GPU memory, from the scale suite of bench/gpu.ts
 * (`--suite scale`, with and without `--no-cpu-mirror`): HOST-MEMORY.md and host-memory.svg in
 * the directory read, one series per run. Nothing in them is typed by hand.
 *
 *   node dist/bench/gpu-host-memory.js [FILE.json ...] [--dir bench/results/gpu-no-mirror]
 */
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { parseReportArgs } from './lib/args.js';
import { count, sig, table } from './lib/format.js';
import { GPU_SCHEMA, type GpuBenchFile } from './lib/gpu/schema.js';
import { describeMachine } from './lib/machine.js';
import { readResultFile } from './lib/result-file.js';
import { MARKERS, type Series, engineColor, linePlot } from './lib/svg.js';

function fail(msg: string): never {
  process.stderr.write(`bench:gpu-host-memory: ${msg}\n`);
  process.exit(1);
}

const { files, dir } = parseReportArgs(process.argv.slice(2), path.resolve('bench/results/gpu-no-mirror'), 'Usage: node dist/bench/gpu-host-memory.js [FILE.json ...] [--dir DIR]', fail);
const runs: { file: string; doc: GpuBenchFile }[] = [];
for (const f of files) {
  const doc = readResultFile(f, fail) as Partial<GpuBenchFile> | null;
  if (doc === null || typeof doc !== 'object' || doc.schema !== GPU_SCHEMA) continue;
  if ((doc.suites?.scale?.checkpoints.length ?? 0) > 0) runs.push({ file: path.basename(f), doc: doc as GpuBenchFile });
}
if (runs.length === 0) fail(`no scale suite in ${files.length} file(s)`);

const label = (d: GpuBenchFile): string => (d.config.gpuOptions.cpuMirror === false ? 'no CPU mirror' : 'with the CPU mirror');
const series: Series[] = [];
const lines: string[] = [
  '# GPU engine: host memory against GPU memory',
  '',
  'Host RSS of the benchmark process (the engine, the workload generator, Node) and the GPU buffers, at each checkpoint of the scale suite (`bench/gpu.ts --suite scale`), subscriptions of 10 filters streamed from the generator (never all in memory).',
  '',
];
runs.forEach(({ file, doc }, i) => {
  const s = doc.suites.scale!;
  const pts = s.checkpoints.filter((k) => k.memory.gpuBytes !== null && k.memory.gpuBytes > 0);
  series.push({ name: `${label(doc)} (${count(s.loaded)} subs)`, color: engineColor(doc.config.gpuOptions.cpuMirror === false ? 'gpu' : 'fast', i), marker: MARKERS[i % MARKERS.length], points: pts.map((k) => [k.filters, k.memory.rssBytes / k.memory.gpuBytes!] as const) });
  lines.push(`## ${file}: ${label(doc)}`, '', `${describeMachine(doc.machine)}; ${doc.config.scale.addMany === true ? 'chunks of 4096 loaded with addMany' : 'loaded add by add'}.`, '');
  lines.push(
    table(
      ['filters', 'GPU MiB', 'GPU B/filter', 'host RSS MiB', 'host B/filter', 'RSS / GPU', 'µs a subscription loaded', 'median ms an event'],
      pts.map((k) => [count(k.filters), sig(k.memory.gpuBytes! / 2 ** 20), sig(k.memory.gpuBytesPerFilter ?? 0), sig(k.memory.rssBytes / 2 ** 20), sig(k.memory.rssBytes / k.filters), sig(k.memory.rssBytes / k.memory.gpuBytes!), sig((1000 * k.loadMs) / k.subscriptions), sig(k.match.median)]),
    ),
    '',
  );
});
const svg = linePlot({ title: 'Host RSS over GPU bytes, GPU engine', xLabel: 'filters resident', yLabel: 'host RSS / GPU bytes', series, logX: true, logY: true });
writeFileSync(path.join(dir, 'host-memory.svg'), svg);
lines.splice(4, 0, '![host RSS over GPU bytes](host-memory.svg)', '');
writeFileSync(path.join(dir, 'HOST-MEMORY.md'), `${lines.join('\n')}\n`);
process.stdout.write(`${lines.join('\n')}\n`);
