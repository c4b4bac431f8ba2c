/**
 * Builds the GPU result document from gpu.ts JSON: bench/results/GPU-BENCHMARKS.md and gpu-*.svg
 * next to it. Nothing in them is typed by hand; rerun after adding or replacing a JSON file.
 *
 *   node dist/bench/gpu-report.js [FILE.json ...] [--dir bench/results]
 *
 * Without files, every ambit-bench-gpu/1 file in the directory is read (CPU result files there are
 * left to report.ts). Suites may come from several runs (a long benchmark split over several
 * calls): each suite is taken from the newest file that has it, full runs before quick ones.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { count, pct, sig, table } from './lib/format.js';
import { GPU_SCHEMA, GPU_SUITES, type GpuBenchFile, type GpuGridPoint, type GpuSuiteName } from './lib/gpu/schema.js';
import { batchTables, defaultTable, gridTable, memoryTable, scaleTable, stagesTable, updatesTables } from './lib/gpu/tables.js';
import { describeMachine } from './lib/machine.js';
import { DASHES, MARKERS, type Series, engineColor, linePlot } from './lib/svg.js';
import { parseReportArgs } from './lib/args.js';
import { RESULTS_DIR, readResultFile } from './lib/result-file.js';
import { barPlot } from './lib/svg-bars.js';
import { LATENCY_SCHEMA, type LatencyFile, latencyTables } from './lib/gpu/latency-schema.js';
import { FEED_SCHEMA, type FeedFile, report as feedTable } from './gpu-feed.js';
import { existsSync, readdirSync } from 'node:fs';


function fail(msg: string): never {
  process.stderr.write(`bench:gpu-report: ${msg}\n`);
  process.exit(1);
}

function parse(argv: readonly string[]): { files: string[]; dir: string; scanned: boolean } {
  const r = parseReportArgs(argv, RESULTS_DIR, 'Usage: node dist/bench/gpu-report.js [FILE.json ...] [--dir DIR]   (default DIR: bench/results)', fail);
  return r;
}

const FIGURE: Record<GpuSuiteName, string> = {
  default: 'Default scenario (CLCB Table 1 / Table 2)',
  grid: 'Matching time vs subscriptions and area (CLCB Fig. 3/4)',
  updates: 'Location updates (CLCB Fig. 5)',
  stages: 'Where the time goes (CLCB Fig. 6)',
  memory: 'GPU memory vs filters (CLCB Fig. 7)',
  batch: 'Batched throughput',
  scale: 'Scale',
};

function gridPlot(points: readonly GpuGridPoint[], spatial: string): string {
  const ps = points.filter((p) => p.spatial === spatial);
  const engines = [...new Set(ps.map((p) => p.engine))];
  const areas = [...new Set(ps.map((p) => p.areaFraction))].sort((a, b) => a - b);
  const series: Series[] = [];
  engines.forEach((e, ei) => {
    areas.forEach((a, ai) => {
      const pts = ps.filter((p) => p.engine === e && p.areaFraction === a).map((p) => [p.subscriptions, p.match.median] as const);
      if (pts.length > 0) series.push({ name: `${e} ${pct(a)}`, color: engineColor(e, ei), dash: DASHES[ai % DASHES.length], marker: MARKERS[ai % MARKERS.length], points: pts });
    });
  });
  return linePlot({ title: `Matching time per event (${spatial} spatial distribution)`, xLabel: 'subscriptions (10 filters each)', yLabel: 'median time per event (ms)', series, logX: true, logY: true });
}

function section(suite: GpuSuiteName, f: GpuBenchFile, src: string, outDir: string): string[] {
  const title = suite === 'scale' && f.suites.scale !== undefined ? `Scale: ${count(f.suites.scale.requested)} subscriptions (${count(f.suites.scale.requested * Number(f.workload.filtersPerSub ?? 10))} filters) requested` : FIGURE[suite];
  const lines: string[] = [`## ${title}`, '', `From \`${src}\`${f.quick ? ' (quick)' : ''}, ${f.startedAt.slice(0, 16).replace('T', ' ')}; suite wall time ${sig((f.suiteWallMs[suite] ?? NaN) / 1000)} s.`, ''];
  const c = f.config;
  const svg = (name: string, body: string, alt: string): void => {
    writeFileSync(path.join(outDir, name), body);
    lines.push(`![${alt}](${name})`, '');
  };
  switch (suite) {
    case 'default': {
      const r = f.suites.default!;
      lines.push(`Each event is matched alone (\`await match(e)\`, publish → ids in host memory) after ${c.default.warmupEvents} warm-up events.`, '', defaultTable(r), '');
      break;
    }
    case 'grid': {
      const g = f.suites.grid!;
      lines.push(`${c.grid.events} events per point after ${c.grid.warmupEvents} warm-up events, each awaited alone. Every (placement, area) series grows its engines through the sizes; ${g.jobs > 1 ? `${g.jobs} series loaded in parallel processes, and measurements ran one process at a time while the others waited idle` : 'all in one process'}.`, '');
      for (const spatial of [...new Set(g.points.map((p) => p.spatial))]) svg(`gpu-grid-${spatial}.svg`, gridPlot(g.points, spatial), `Matching time, ${spatial}`);
      lines.push(gridTable(g.points), '');
      break;
    }
    case 'updates': {
      const u = f.suites.updates!;
      const series: Series[] = u.engines.map((e, i) => ({ name: e.engine, color: engineColor(e.engine, i), marker: MARKERS[i % MARKERS.length], points: e.movesThenMatch.map((m) => [m.moves, m.endToEndUpdatesPerSec] as const) }));
      svg('gpu-updates.svg', linePlot({ title: 'Location updates end to end (N moves, then one match)', xLabel: 'moves before the match', yLabel: 'updates/s', series, logX: true, logY: true }), 'End-to-end update rate');
      lines.push(`${c.updates.timed} individually timed handle updates after a warm-up, an untimed loop of ${c.updates.loop}; updatePositions with ${c.updates.batchSizes.map(count).join(' and ')} updates (${c.updates.batchReps} calls each); N moves then a match: ${c.updates.movesReps} repetitions.`, '');
      lines.push(updatesTables(u.engines), '');
      break;
    }
    case 'stages': {
      const s = f.suites.stages!;
      for (const variant of [...new Set(s.points.map((p) => p.variant))]) {
        const ps = s.points.filter((p) => p.variant === variant);
        const line = (name: string, i: number, pick: (p: (typeof ps)[number]) => number | undefined): Series => ({
          name,
          color: ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#7f7f7f'][i],
          marker: MARKERS[i % MARKERS.length],
          dash: DASHES[i % DASHES.length],
          points: ps.map((p) => [p.filters, pick(p) ?? NaN] as const),
        });
        const series = [
          line('total', 0, (p) => p.total.median),
          line('submit (host)', 1, (p) => p.submit.median),
          line('Loc', 2, (p) => p.loc?.median),
          line('Cont', 3, (p) => p.cont?.median),
          line('Zip', 4, (p) => p.zip?.median),
          line('host + transfer', 5, (p) => p.hostAndTransfer?.median),
        ];
        const measured = series.filter((x) => x.points.some(([, y]) => Number.isFinite(y)));
        svg(`gpu-stages-${variant}.svg`, linePlot({ title: `Time per stage (${variant === 'default' ? 'default content' : 'every event satisfies the content'})`, xLabel: 'filters', yLabel: 'median ms per event', series: measured, logX: true, logY: true }), `Stages, ${variant}`);
      }
      lines.push(
        `${c.stages.events} events per size after ${c.stages.warmupEvents} warm-up events; GpuMatcher with \`profile: true\` (one timed compute pass per stage, where the unprofiled engine records one pass: its latency is in the default and grid sections). Variant all-content: selectivity 1 with \`exists\` constraints only (3–5 per filter, one event type), so every event satisfies every filter's content and only the location filters.`,
        '',
        stagesTable(s.points, s.timestampQuery),
        '',
      );
      break;
    }
    case 'memory': {
      const m = f.suites.memory!;
      svg(
        'gpu-memory.svg',
        linePlot({
          title: 'GPU memory vs filters',
          xLabel: 'filters',
          yLabel: 'MiB',
          series: [
            { name: 'GPU buffers', color: '#2ca02c', marker: 'circle', points: m.points.map((p) => [p.filters, (p.gpuBytes ?? NaN) / 2 ** 20] as const) },
            { name: 'host (engine estimate)', color: '#1f77b4', marker: 'square', dash: DASHES[1], points: m.points.map((p) => [p.filters, p.engineBytes / 2 ** 20] as const) },
          ],
          logX: true,
          logY: true,
        }),
        'GPU memory',
      );
      lines.push('One engine grown through the sizes; figures after a match (the GPU buffers are sized at the first match after a load) and a GC.', '', memoryTable(m.points), '');
      break;
    }
    case 'batch': {
      const b = f.suites.batch!;
      const series: Series[] = [];
      b.engines.forEach((e, i) => {
        series.push({ name: `${e.engine} matchBatch`, color: engineColor(e.engine, i), marker: 'circle', points: e.batches.map((p) => [p.batchSize, p.eventsPerSec] as const) });
        if (e.concurrent.length > 0) series.push({ name: `${e.engine} match() in flight`, color: engineColor(e.engine, i), dash: DASHES[1], marker: 'square', points: e.concurrent.map((p) => [p.concurrency, p.eventsPerSec] as const) });
      });
      svg('gpu-batch.svg', linePlot({ title: `Throughput at ${count(b.filters)} filters`, xLabel: 'events per batch / calls in flight', yLabel: 'events/s', series, logX: true, logY: true }), 'Batched throughput');
      lines.push(batchTables(b), '');
      break;
    }
    case 'scale': {
      const s = f.suites.scale!;
      svg(
        'gpu-scale.svg',
        linePlot({
          title: 'Latency as the GPU engine grows',
          xLabel: 'filters',
          yLabel: 'ms per event',
          series: [
            { name: 'median', color: '#2ca02c', marker: 'circle', points: s.checkpoints.map((k) => [k.filters, k.match.median] as const) },
            { name: 'p99', color: '#2ca02c', dash: DASHES[1], marker: 'square', points: s.checkpoints.map((k) => [k.filters, k.match.p99] as const) },
          ],
          logX: true,
          logY: true,
        }),
        'Scale',
      );
      lines.push(`Subscriptions streamed from the generator (never all in memory), GPU engine only; ${c.scale.events} events per checkpoint after ${c.scale.warmupEvents} warm-up events.`, '', scaleTable(s), '');
      break;
    }
  }
  const skipped = f.skipped.filter((s) => s.suite === suite);
  if (skipped.length > 0) lines.push('Skipped:', '', table(['engine', 'case', 'reason'], skipped.map((s) => [s.engine, s.detail, s.reason])), '');
  return lines;
}

/** The lone event's round trip, rung by rung (bench/gpu-latency.ts). */
function latencySection(f: LatencyFile, src: string, dir: string): string[] {
  const plot = barPlot({
    title: 'One round trip through dawn.node, piece by piece (median)',
    yLabel: 'µs',
    series: [
      { name: 'record + submit', color: '#1f77b4' },
      { name: 'wait for the GPU and the map', color: '#ff7f0e' },
    ],
    groups: [
      ...f.rungs.map((r) => ({ label: [r.rung], values: [{ y: r.callUs.median }, { y: Math.max(0, r.us.median - r.callUs.median) }] })),
      ...f.engines
        .filter((e) => e.engine === 'gpu' && e.submitUs !== null && e.waitUs !== null)
        .map((e) => ({ label: ['engine', `${count(e.filters)} filters`], values: [{ y: e.submitUs!.median }, { y: e.waitUs!.median }] })),
    ],
    valueLabels: true,
  });
  writeFileSync(path.join(dir, 'gpu-latency.svg'), plot);
  return [
    '## A lone event: where the time goes',
    '',
    `From \`${src}\`, ${f.date.slice(0, 16).replace('T', ' ')}; ${describeMachine(f.machine)}; GPU ${f.gpu?.adapter ?? 'none'}. Produced by \`node dist/bench/gpu-latency.js\` (bench/gpu-latency.ts), ${f.reps} round trips per row.`,
    '',
    'The rungs add one piece each of what the engine does for a lone event: an empty submission awaited with onSubmittedWorkDone; a copy into a staging buffer and mapAsync; a 256-byte writeBuffer; one, then three dispatches; two error scopes. The engine rows split its own lone event into submit (sync of changed state, event encoding, recording, the submit call) and wait (submission → results mapped), beside the fast CPU engine.',
    '',
    '![Round trip](gpu-latency.svg)',
    '',
    latencyTables(f),
    '',
  ];
}

/** Batched throughput under a feed, by where the per-event work runs (bench/gpu-feed.ts): every run in `feedDir`, oldest first. */
function feedSection(feedDir: string, dir: string): string[] {
  if (!existsSync(feedDir)) return [];
  const runs: { file: string; f: FeedFile }[] = [];
  for (const name of readdirSync(feedDir).filter((n) => n.endsWith('.json')).sort()) {
    const file = path.join(feedDir, name);
    const data = readResultFile(file, fail) as Partial<FeedFile> | null;
    if (data !== null && typeof data === 'object' && data.schema === FEED_SCHEMA) runs.push({ file, f: data as FeedFile });
  }
  if (runs.length === 0) return [];
  const out = [
    '## Batched throughput under a feed: where the per-event work runs',
    '',
    'Produced by `node dist/bench/gpu-feed.js` (bench/gpu-feed.ts): calls kept in flight, each issued as one returns, by path: `matchBatch` of event objects (each checked and encoded on the engine thread), `matchPacked` of packs made ahead, of packs made by packing threads of the process, and the fast CPU engine. Events/s are over rounds (min, median, max); the engine thread\'s µs an event is its event-loop utilization over the events. Hosts of one kind differ: compare rows of one run.',
    '',
  ];
  for (const { file, f } of runs.sort((a, b) => a.f.date.localeCompare(b.f.date))) {
    const rel = path.relative(dir, file);
    const svg = rel.replace(/\.json$/, '.svg');
    out.push(`### \`${rel}\``, '');
    out.push(`${f.date.slice(0, 16).replace('T', ' ')}; ${describeMachine(f.machine)}; GPU ${f.gpu?.adapter ?? 'none'}; ${count(f.subscriptions)} subscriptions (${count(f.filters)} filters), ${f.depth} calls in flight, ${f.rounds} rounds of ${f.seconds} s. Command: \`${f.command.replace(/^node \S*gpu-feed\.js/, 'node dist/bench/gpu-feed.js')}\``, '');
    if (existsSync(path.join(dir, svg))) out.push(`![Events/s](${svg})`, '');
    out.push(feedTable(f.rows), '');
  }
  return out;
}

function main(): void {
  const { files, dir, scanned } = parse(process.argv.slice(2));
  const docs: { file: string; f: GpuBenchFile }[] = [];
  const latency: { file: string; f: LatencyFile }[] = [];
  for (const file of files) {
    const data = readResultFile(file, fail) as Partial<GpuBenchFile> | null;
    if (data !== null && typeof data === 'object' && (data as { schema?: string }).schema === LATENCY_SCHEMA) {
      latency.push({ file, f: data as unknown as LatencyFile });
      continue;
    }
    if (data === null || typeof data !== 'object' || data.schema !== GPU_SCHEMA) {
      if (scanned) continue; // CPU results (report.ts) and other files
      fail(`${file}: not a ${GPU_SCHEMA} result file (schema ${JSON.stringify(data?.schema)})`);
    }
    docs.push({ file, f: data as GpuBenchFile });
  }
  if (docs.length === 0) fail(`no ${GPU_SCHEMA} result files in ${path.relative(process.cwd(), dir) || dir} (run e.g. \`node dist/bench/gpu.js --out bench/results/gpu.json\`)`);
  mkdirSync(dir, { recursive: true });
  // Full runs before quick ones, newer before older.
  const ranked = [...docs].sort((a, b) => Number(a.f.quick) - Number(b.f.quick) || b.f.startedAt.localeCompare(a.f.startedAt));
  const chosen = new Map<GpuSuiteName, { file: string; f: GpuBenchFile }>();
  for (const s of GPU_SUITES) {
    const d = ranked.find((x) => x.f.suites[s] !== undefined);
    if (d !== undefined) chosen.set(s, d);
  }
  const rel = (file: string): string => path.relative(dir, file) || path.basename(file);
  const used = [...new Set([...chosen.values()])];
  const lines: string[] = [
    '# GPU benchmarks',
    '',
    '<!-- Generated by `node dist/bench/gpu-report.js` from the JSON files in this directory. Do not edit by hand. -->',
    '',
    'Produced by `node dist/bench/gpu.js` (bench/gpu.ts): seeded workloads from src/workload (CLCB Table 1 defaults), ' +
      'the GPU engine on its GPU path at every size (`cpuBelowFilters: 0`) beside the CPU engines, warm-up before timing, ' +
      `single events awaited one at a time and summarised as min/median/p99. Sizes are subscriptions of 10 filters (${count(1_000_000)} subscriptions = 10M filters).`,
    '',
    '## Runs',
    '',
  ];
  for (const d of used) {
    const f = d.f;
    const suites = GPU_SUITES.filter((s) => chosen.get(s) === d);
    lines.push(`- \`${rel(d.file)}\`${f.quick ? ' (quick)' : ''}: ${suites.join(', ')}`);
    lines.push(`  - Machine: ${describeMachine(f.machine)}`);
    lines.push(`  - GPU: ${f.gpu === null ? 'none' : `${f.gpu.adapter}${f.gpu.software ? ' (software adapter: timings are not meaningful)' : ''}; features ${f.gpu.features.join(', ') || 'none'}`}`);
    lines.push(`  - Command: \`node dist/bench/gpu.js ${f.argv.join(' ')}\``.replace(/ `$/, '`'));
    lines.push(`  - Node flags: \`${f.machine.execArgv.join(' ') || '(none)'}\`; seed ${f.config.seed}; timer overhead ${f.timerOverheadNs} ns per timed call`);
    lines.push(`  - Wall time: ${GPU_SUITES.filter((s) => f.suiteWallMs[s] !== undefined).map((s) => `${s} ${sig(f.suiteWallMs[s]! / 1000)} s`).join(', ')}`);
    for (const n of f.notes) lines.push(`  - Note: ${n}`);
  }
  const unused = docs.filter((d) => !used.includes(d));
  if (unused.length > 0) lines.push(`- Not used (a newer or full run has the same suites): ${unused.map((d) => `\`${rel(d.file)}\``).join(', ')}`);
  lines.push('');
  for (const [suite, d] of chosen) lines.push(...section(suite, d.f, rel(d.file), dir));
  const lat = latency.sort((a, b) => b.f.date.localeCompare(a.f.date))[0];
  if (lat !== undefined) lines.push(...latencySection(lat.f, rel(lat.file), dir));
  lines.push(...feedSection(path.join(dir, 'gpu-feed'), dir));
  const out = path.join(dir, 'GPU-BENCHMARKS.md');
  writeFileSync(out, `${lines.join('\n').trimEnd()}\n`);
  process.stdout.write(`bench:gpu-report: ${used.length} result file${used.length === 1 ? '' : 's'} → ${path.relative(process.cwd(), out) || out}\n`);
}

main();
