/** Result tables of the GPU benchmark, shared by the console output of gpu.ts and the documents of gpu-report.ts. */
import { count, mib, pct, sig, table } from '../format.js';
import type {
  GpuBatchResult,
  GpuDefaultResult,
  GpuGridPoint,
  GpuHealth,
  GpuMemoryPointResult,
  GpuScaleResult,
  GpuStagePoint,
  GpuUpdateEngine,
  OlderVerification,
  Verification,
} from './schema.js';

/** 'gpu', or what else served / went wrong. */
export function pathCell(h: GpuHealth | null): string {
  if (h === null) return 'cpu engine';
  const bad: string[] = [];
  if (h.path !== 'gpu') bad.push(`path ${h.path}`);
  if (h.cpuEvents > 0) bad.push(`${h.cpuEvents} on cpu`);
  if (h.uncapturedErrors > 0) bad.push(`${h.uncapturedErrors} errors`);
  if (h.deviceLosses > 0) bad.push(`${h.deviceLosses} losses`);
  return bad.length === 0 ? 'gpu' : bad.join(', ');
}

/** One sentence on the GPU's answers against fast's; reads the older form of result files too. */
export function verificationLine(v: Verification | OlderVerification | null): string {
  if (v === null) return 'GPU vs fast: not compared (both engines must run).';
  const eg = v.examples.length > 0 ? ` (e.g. ${v.examples.slice(0, 3).join('; ')})` : '';
  if (!('mismatches' in v)) {
    if (v.eventsDiffering === 0) return `GPU vs fast: identical answers for all ${v.events} events.`;
    return (
      `GPU vs fast: ${v.eventsDiffering} of ${v.events} events differ (${v.onlyGpu} ids only on the GPU, ${v.onlyReference} only on fast); ` +
      `${v.explainedByBand} explained by the float32 tolerance band then allowed, ${v.unexplained} not${eg}.`
    );
  }
  if (v.mismatches === 0) return `GPU vs fast: identical answers for all ${v.events} events.`;
  return `GPU vs fast: MISMATCH: ${v.mismatches} of ${v.events} events differ (${v.onlyGpu} ids only on the GPU, ${v.onlyReference} only on fast)${eg}.`;
}

export function defaultTable(r: GpuDefaultResult): string {
  const head = `${count(r.subscriptions)} subscriptions × ${sig(r.filters / Math.max(1, r.subscriptions))} filters (${count(r.filters)} filters, ${count(r.constraints)} constraints), ${r.events} events × ${r.reps} pass${r.reps === 1 ? "" : "es"}, each awaited alone`;
  const latency = table(
    ['engine', 'load s', 'µs/sub', 'first match ms', 'min ms', 'median ms', 'p99 ms', 'mean ms', 'matches/event', 'served by'],
    r.engines.map((e) => [e.engine, sig(e.load.totalMs / 1000), sig(e.load.perSubUs), sig(e.firstMatchMs), sig(e.match.min), sig(e.match.median), sig(e.match.p99), sig(e.match.mean), sig(e.avgMatches), pathCell(e.health)]),
  );
  const memory = table(
    ['engine', 'GPU MiB', 'GPU B/filter', 'host estimate MiB', 'heap Δ MiB', 'typed arrays Δ MiB', 'rss MiB'],
    r.engines.map((e) => [e.engine, mib(e.memory.gpuBytes), sig(e.memory.gpuBytesPerFilter), mib(e.memory.engineBytes), mib(e.memory.heapDeltaBytes), mib(e.memory.arrayBuffersDeltaBytes), mib(e.memory.rssBytes)]),
  );
  return [head, '', latency, '', 'Memory after load and one match:', '', memory, '', verificationLine(r.verification)].join('\n');
}

/** One table per spatial distribution: rows subscriptions × area, median and p99 per engine, the fast/gpu ratio. */
export function gridTable(points: readonly GpuGridPoint[]): string {
  if (points.length === 0) return '(no results)';
  const engines = [...new Set(points.map((p) => p.engine))];
  const ratio = engines.includes('gpu') && engines.includes('fast');
  const out: string[] = [];
  for (const spatial of [...new Set(points.map((p) => p.spatial))]) {
    const ps = points.filter((p) => p.spatial === spatial);
    const sizes = [...new Set(ps.map((p) => p.subscriptions))].sort((a, b) => a - b);
    const areas = [...new Set(ps.map((p) => p.areaFraction))].sort((a, b) => a - b);
    const headers = ['subscriptions', 'area', 'radius m', ...engines.flatMap((e) => [`${e} median ms`, `${e} p99 ms`]), ...(ratio ? ['fast/gpu median'] : []), 'matches/event', 'gpu≠fast events', 'served by'];
    const rows: string[][] = [];
    for (const n of sizes) {
      for (const a of areas) {
        const at = (e: string) => ps.find((p) => p.engine === e && p.subscriptions === n && p.areaFraction === a);
        // Matches per event from the float64 engine when it ran (a failing GPU may return nothing).
        const any = at('fast') ?? engines.map(at).find((p) => p !== undefined);
        const g = at('gpu');
        const f = at('fast');
        rows.push([
          count(n),
          pct(a),
          sig(any?.radiusM),
          ...engines.flatMap((e) => [sig(at(e)?.match.median), sig(at(e)?.match.p99)]),
          ...(ratio ? [g && f ? `${sig(f.match.median / g.match.median)}×` : '–'] : []),
          sig(any?.avgMatches),
          g?.differsFromFast === null || g?.differsFromFast === undefined ? '–' : String(g.differsFromFast),
          g ? pathCell(g.health) : '–',
        ]);
      }
    }
    out.push(`Spatial distribution: ${spatial}`, '', table(headers, rows), '');
  }
  return out.join('\n').trimEnd();
}

export function updatesTables(engines: readonly GpuUpdateEngine[]): string {
  if (engines.length === 0) return '(no results)';
  const sizes = [...new Set(engines.flatMap((e) => e.batch.map((b) => b.size)))].sort((a, b) => a - b);
  const single = table(
    ['engine', 'subscriptions', 'handle min µs', 'median µs', 'p99 µs', 'loop ns/update', 'loop updates/s', ...sizes.map((s) => `updatePositions(${count(s)}) updates/s`), 'plain match median ms'],
    engines.map((e) => [
      e.engine,
      count(e.subscriptions),
      sig(e.handlePerCallUs.min),
      sig(e.handlePerCallUs.median),
      sig(e.handlePerCallUs.p99),
      sig(e.handleLoop.nsPerUpdate),
      sig(e.handleLoop.updatesPerSec),
      ...sizes.map((s) => sig(e.batch.find((b) => b.size === s)?.updatesPerSec)),
      sig(e.plainMatch.median),
    ]),
  );
  const rows: string[][] = [];
  for (const e of engines) {
    for (const m of e.movesThenMatch) {
      rows.push([e.engine, count(m.moves), count(m.distinctDevices), sig(m.movesMs.median), sig(m.matchMs.median), sig(e.plainMatch.median), sig(m.extraMs), sig(m.endToEndUpdatesPerSec)]);
    }
  }
  const mtm = table(['engine', 'moves', 'devices moved', 'moves ms', 'then match ms', 'plain match ms', 'extra ms', 'end-to-end updates/s'], rows);
  return [
    'Single location updates through openDevice handles (random-waypoint moves of 1–15 m):',
    '',
    single,
    '',
    'N moves, then one match of the same event (the match uploads and scatters the moved positions); medians:',
    '',
    mtm,
  ].join('\n');
}

export function stagesTable(points: readonly GpuStagePoint[], timestampQuery: boolean): string {
  if (points.length === 0) return '(no results)';
  const rows = points.map((p) => [
    p.variant,
    `${sig(p.expectedSelectivity * 100)}%`,
    count(p.subscriptions),
    count(p.filters),
    sig(p.total.median),
    sig(p.total.p99),
    sig(p.submit.median),
    sig(p.wait.median),
    sig(p.loc?.median),
    sig(p.cont?.median),
    sig(p.zip?.median),
    sig(p.gpu?.median),
    sig(p.hostAndTransfer?.median),
    sig(p.avgMatches),
    pathCell(p.health),
  ]);
  return [
    table(['variant', 'content selectivity', 'subscriptions', 'filters', 'total median ms', 'total p99 ms', 'submit ms', 'wait ms', 'Loc ms', 'Cont ms', 'Zip ms', 'GPU sum ms', 'host + transfer ms', 'matches/event', 'served by'], rows),
    '',
    timestampQuery
      ? 'Loc/Cont/Zip: timestamp queries around each pass (medians); submit = the synchronous part of match() (validate, encode, upload, dispatch); wait = submit → ids (GPU, readback, decode); host + transfer = total − GPU sum.'
      : 'The device has no timestamp-query: per-pass GPU times are not available; submit = the synchronous part of match() (validate, encode, upload, dispatch); wait = submit → ids.',
  ].join('\n');
}

export function memoryTable(points: readonly GpuMemoryPointResult[]): string {
  if (points.length === 0) return '(no results)';
  return table(
    ['subscriptions', 'filters', 'constraints', 'GPU MiB', 'GPU B/filter', 'host estimate MiB', 'heap MiB', 'typed arrays MiB', 'rss MiB', 'load s', 'served by'],
    points.map((p) => [count(p.subscriptions), count(p.filters), count(p.constraints), mib(p.gpuBytes), sig(p.gpuBytesPerFilter), mib(p.engineBytes), mib(p.heapUsedBytes), mib(p.arrayBuffersBytes), mib(p.rssBytes), sig(p.loadMs / 1000), pathCell(p.health ?? null)]),
  );
}

export function batchTables(r: GpuBatchResult): string {
  const rows: string[][] = [];
  for (const e of r.engines) {
    for (const b of e.batches) {
      rows.push([e.engine, String(b.batchSize), String(b.calls), sig(b.batchMs.min), sig(b.batchMs.median), sig(b.batchMs.p99), sig((b.batchMs.median * 1000) / b.batchSize), sig(b.eventsPerSec)]);
    }
  }
  const conc: string[][] = [];
  for (const e of r.engines) {
    for (const c of e.concurrent) conc.push([e.engine, String(c.concurrency), String(c.rounds), sig(c.latencyMs.median), sig(c.latencyMs.p99), sig(c.eventsPerSec)]);
  }
  const streams: string[][] = [];
  for (const e of r.engines) {
    for (const x of e.streams ?? []) streams.push([e.engine, String(x.batchSize), String(x.depth), String(x.calls), sig(x.callMs.median), sig(x.callMs.p99), sig(x.eventsPerSec)]);
  }
  return [
    `${count(r.subscriptions)} subscriptions (${count(r.filters)} filters). matchBatch of N events:`,
    '',
    table(['engine', 'batch', 'calls', 'min ms', 'median ms', 'p99 ms', 'µs/event (median)', 'events/s'], rows),
    ...(streams.length > 0 ? ['', 'A feed: matchBatch calls of N events kept D in flight (each issued as one returns); sustained rate:', '', table(['engine', 'batch', 'in flight', 'calls', 'call median ms', 'call p99 ms', 'events/s'], streams)] : []),
    ...(conc.length > 0 ? ['', 'N match() calls in flight at once (the engine forms its own batches); latency = call → ids:', '', table(['engine', 'in flight', 'rounds', 'latency median ms', 'p99 ms', 'events/s'], conc)] : []),
  ].join('\n');
}

export function scaleTable(r: GpuScaleResult): string {
  const rows = r.checkpoints.map((k) => [
    count(k.subscriptions),
    count(k.filters),
    sig(k.loadMs / 1000),
    sig((k.loadMs * 1000) / k.subscriptions),
    sig(k.firstMatchMs),
    sig(k.match.min),
    sig(k.match.median),
    sig(k.match.p99),
    sig(k.avgMatches),
    mib(k.memory.gpuBytes),
    sig(k.memory.gpuBytesPerFilter),
    mib(k.memory.rssBytes),
    k.memory.gpuBytes !== null && k.memory.gpuBytes > 0 ? sig(k.memory.rssBytes / k.memory.gpuBytes) : '-',
    sig(k.memory.rssBytes / k.filters),
    pathCell(k.health),
  ]);
  return [
    `Requested ${count(r.requested)} subscriptions, resident ${count(r.loaded)}${r.truncated !== null ? ` (stopped: ${r.truncated})` : ''}; load rate ${sig(r.loadRateSubsPerSec)} subscriptions/s (adds only; generation not included).`,
    '',
    table(['subscriptions', 'filters', 'load s', 'µs/sub', 'first match ms', 'min ms', 'median ms', 'p99 ms', 'matches/event', 'GPU MiB', 'GPU B/filter', 'rss MiB', 'rss / GPU', 'rss B/filter', 'served by'], rows),
  ].join('\n');
}
