/**
 * Builds the result documents from benchmark JSON: bench/results/BENCHMARKS.md (tables) and SVG
 * plots next to it. Nothing in them is typed by hand; rerun after adding or replacing a JSON file.
 *
 *   node dist/bench/report.js [FILE.json ...] [--dir bench/results]
 *
 * Without files, every *.json in the directory is read (in name order).
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { count, pct, table } from './lib/format.js';
import { describeMachine } from './lib/machine.js';
import { type BenchFile, type GridResult, SCHEMA, type UpdateResult } from './lib/schema.js';
import { DASHES, MARKERS, type Series, engineColor, linePlot } from './lib/svg.js';
import { defaultTables, gridTables, updateTables } from './lib/tables.js';
import { parseReportArgs } from './lib/args.js';
import { RESULTS_DIR, readResultFile } from './lib/result-file.js';


function fail(msg: string): never {
  process.stderr.write(`bench:report: ${msg}\n`);
  process.exit(1);
}

function parse(argv: readonly string[]): { files: string[]; dir: string; scanned: boolean } {
  const r = parseReportArgs(argv, RESULTS_DIR, 'Usage: node dist/bench/report.js [FILE.json ...] [--dir DIR]   (default DIR: bench/results)', fail);
  if (r.files.length === 0) {
    fail(`no result files in ${path.relative(process.cwd(), r.dir) || r.dir} (run e.g. \`npm run bench -- --out bench/results/cpu.json\`, or copy a file from bench/out/)`);
  }
  return r;
}

function load(file: string): BenchFile {
  const f = readResultFile(file, fail) as Partial<BenchFile>;
  if (f === null || typeof f !== 'object' || f.schema !== SCHEMA) fail(`${file}: not a ${SCHEMA} result file (schema ${JSON.stringify(f?.schema)})`);
  return f as BenchFile;
}

/** True unless the file is JSON of another schema or kind (unreadable files are left to load() to report). */
function isCpuResult(file: string): boolean {
  try {
    const o = JSON.parse(readFileSync(file, 'utf8')) as { schema?: unknown; kind?: unknown } | null;
    if (typeof o?.kind === 'string') return false; // another benchmark's file (service results)
    return o?.schema === SCHEMA || typeof o?.schema !== 'string';
  } catch {
    return true;
  }
}

/** Fig. 3/4: one plot per spatial distribution, median latency vs subscriptions, a line per engine × area. */
function gridPlot(results: readonly GridResult[], spatial: string): string {
  const rs = results.filter((r) => r.spatial === spatial);
  const engines = [...new Set(rs.map((r) => r.engine))];
  const areas = [...new Set(rs.flatMap((r) => r.points.map((p) => p.areaFraction)))].sort((a, b) => a - b);
  const series: Series[] = [];
  engines.forEach((e, ei) => {
    areas.forEach((a, ai) => {
      const points = rs
        .filter((r) => r.engine === e)
        .map((r) => [r.subscriptions, r.points.find((p) => p.areaFraction === a)?.match.median ?? NaN] as const)
        .filter((p) => Number.isFinite(p[1]));
      if (points.length > 0) series.push({ name: `${e} ${pct(a)}`, color: engineColor(e, ei), dash: DASHES[ai % DASHES.length], marker: MARKERS[ai % MARKERS.length], points });
    });
  });
  return linePlot({
    title: `Matching time per event (${spatial} spatial distribution)`,
    xLabel: 'subscriptions (10 filters each)',
    yLabel: 'median time per event (ms)',
    series,
    logX: true,
    logY: true,
  });
}

/** Fig. 5: median update time vs subscriptions, a line per engine × spatial distribution. */
function updatePlot(results: readonly UpdateResult[]): string {
  const engines = [...new Set(results.map((r) => r.engine))];
  const spatials = [...new Set(results.map((r) => r.spatial))];
  const series: Series[] = [];
  engines.forEach((e, ei) => {
    spatials.forEach((s, si) => {
      const points = results.filter((r) => r.engine === e && r.spatial === s).map((r) => [r.subscriptions, r.update.perCall.median] as const);
      if (points.length > 0) series.push({ name: `${e} ${s}`, color: engineColor(e, ei), dash: DASHES[si % DASHES.length], marker: MARKERS[si % MARKERS.length], points });
    });
  });
  return linePlot({
    title: 'Location update time (single updatePosition)',
    xLabel: 'subscriptions (10 filters each)',
    yLabel: 'median time per update (µs)',
    series,
    logX: true,
    logY: true,
  });
}

function section(file: string, f: BenchFile, outDir: string): string {
  const base = path.basename(file, '.json');
  const c = f.config;
  const w = f.workload as Record<string, unknown> & { regionInfo?: { name: string; areaKm2: number } };
  const lines: string[] = [];
  lines.push(`## ${f.name}${f.quick ? ' (quick)' : ''} — ${f.startedAt.slice(0, 10)}`, '');
  lines.push(`Source: \`${path.relative(outDir, file) || path.basename(file)}\``, '');
  lines.push(`- Machine: ${describeMachine(f.machine)}`);
  lines.push(`- Node flags of the measuring processes: \`${f.machine.execArgv.join(' ') || '(none)'}\``);
  lines.push(`- Command: \`node dist/bench/cpu.js ${f.argv.join(' ')}\``.replace(/ `$/, '`'));
  lines.push(`- Engines: ${c.engines.join(', ')}; seed ${c.seed}`);
  if (typeof f.timerOverheadNs === 'number') lines.push(`- Timer overhead: ${f.timerOverheadNs} ns per timed call (included in every per-call figure)`);
  if (w.regionInfo) {
    lines.push(
      `- Workload (CLCB Table 1): ${w.filtersPerSub} filters/subscription, ${w.constraintsMin}–${w.constraintsMax} constraints/filter, ` +
        `${w.attributesMin}–${w.attributesMax} attributes/event, ${w.names} names, ${w.values} values/name, ${w.eventTypes} event types, ` +
        `target content selectivity ${pct(w.selectivity as number)}, ${w.spatial} placement in ${w.regionInfo.name} (${w.regionInfo.areaKm2} km²), anchored areas of ${pct(w.areaFraction as number)}`,
    );
  }
  lines.push('');

  const d = f.suites.default;
  if (d !== undefined) {
    lines.push('### Default scenario (CLCB Table 1)', '');
    lines.push(`${c.default.events} events, ${c.default.reps} timed passes after ${c.default.warmupEvents} warm-up events; ${c.default.updates} timed updates; mixed rounds: ${c.default.updatesPerEvent} updates then 1 event.`, '');
    lines.push(defaultTables(d), '');
  }

  const g = f.suites.grid;
  if (g !== undefined && g.length > 0) {
    lines.push('### Matching time vs subscriptions and area (CLCB Fig. 3/4)', '');
    lines.push(`${c.grid.events} events per point (after ${c.grid.warmupEvents} warm-up events), each timed on its own.`, '');
    for (const spatial of [...new Set(g.map((r) => r.spatial))]) {
      const svg = `${base}-match-${spatial}.svg`;
      writeFileSync(path.join(outDir, svg), gridPlot(g, spatial));
      lines.push(`![Matching time, ${spatial}](${svg})`, '');
    }
    lines.push(gridTables(g), '');
  }

  const u = f.suites.update;
  if (u !== undefined && u.length > 0) {
    lines.push('### Location update time vs subscriptions (CLCB Fig. 5)', '');
    lines.push(`${c.update.updates} individually timed updatePosition calls per point (random devices, random-waypoint moves of 1–15 m); updates/s from an untimed loop of ${c.update.bulkUpdates}.`, '');
    const svg = `${base}-update.svg`;
    writeFileSync(path.join(outDir, svg), updatePlot(u));
    lines.push(`![Update time](${svg})`, '');
    lines.push(updateTables(u), '');
  }

  if (f.skipped.length > 0) {
    lines.push('Skipped:', '');
    lines.push(table(['suite', 'engine', 'case', 'reason'], f.skipped.map((s) => [s.suite, s.engine, s.detail, s.reason])), '');
  }
  return lines.join('\n');
}

function main(): void {
  const { files, dir, scanned } = parse(process.argv.slice(2));
  mkdirSync(dir, { recursive: true });
  // A scanned directory may also hold GPU results (ambit-bench-gpu/1): gpu-report.ts renders those.
  const cpuFiles = scanned ? files.filter((f) => isCpuResult(f)) : files;
  if (cpuFiles.length === 0) fail(`no ${SCHEMA} result files in ${path.relative(process.cwd(), dir) || dir}`);
  const docs = cpuFiles.map((f) => section(f, load(f), dir));
  const head = [
    '# Benchmarks',
    '',
    '<!-- Generated by `npm run bench:report` from the JSON files in this directory. Do not edit by hand. -->',
    '',
    'Produced by `npm run bench` (bench/cpu.ts): seeded workloads from src/workload (CLCB Table 1 defaults), ' +
      'one process per engine and case, warm-up before timing, per-event and per-update timings summarised as min/median/p99. ' +
      `Sizes are subscriptions of 10 filters (${count(1_000_000)} subscriptions = 10M filters).`,
    '',
  ];
  const out = path.join(dir, 'BENCHMARKS.md');
  writeFileSync(out, `${[...head, ...docs].join('\n').trimEnd()}\n`);
  process.stdout.write(`bench:report: ${files.length} result file${files.length === 1 ? '' : 's'} → ${path.relative(process.cwd(), out) || out}\n`);
}

main();
