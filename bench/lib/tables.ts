/** Result tables, shared by the console output of cpu.ts and the documents of report.ts. */
import { count, mib, pct, sig, table } from './format.js';
import type { DefaultResult, GridResult, UpdateResult } from './schema.js';

/** 'yes' when every engine gave the same answers, else which ones differ from the first. */
function agreement(items: readonly { engine: string; checksum: string }[]): string {
  if (items.length < 2) return '–';
  const first = items[0].checksum;
  const differ = items.filter((i) => i.checksum !== first).map((i) => i.engine);
  return differ.length === 0 ? 'yes' : `no (${differ.join(', ')} ≠ ${items[0].engine})`;
}

export function defaultTables(results: readonly DefaultResult[]): string {
  if (results.length === 0) return '(no results)';
  const r0 = results[0];
  const head = `${count(r0.subscriptions)} subscriptions × ${sig(r0.filters / r0.subscriptions)} filters (${count(r0.filters)} filters, ${count(r0.constraints)} constraints), ${r0.events} events`;
  const matching = table(
    ['engine', 'match min ms', 'median ms', 'p99 ms', 'mean ms', 'events/s (batch)', 'matches/event', 'mixed match median ms'],
    results.map((r) => [r.engine, sig(r.match.min), sig(r.match.median), sig(r.match.p99), sig(r.match.mean), sig(r.throughput.eventsPerSec), sig(r.avgMatches), sig(r.mixed.match.median)]),
  );
  const updating = table(
    ['engine', 'load s', 'µs/sub', 'update min µs', 'median µs', 'p99 µs', 'updates/s', 'handle median µs', 'handle updates/s'],
    results.map((r) => [
      r.engine,
      sig(r.load.totalMs / 1000),
      sig(r.load.perSubUs),
      sig(r.update.perCall.min),
      sig(r.update.perCall.median),
      sig(r.update.perCall.p99),
      sig(r.update.perSec),
      sig(r.handleUpdate?.perCall.median),
      sig(r.handleUpdate?.perSec),
    ]),
  );
  const memory = table(
    ['engine', 'engine estimate MiB', 'heap Δ MiB', 'external Δ MiB', 'rss MiB'],
    results.map((r) => [r.engine, mib(r.memory.engineBytes), mib(r.memory.heapDeltaBytes), mib(r.memory.externalDeltaBytes), mib(r.memory.rssBytes)]),
  );
  return [
    head,
    '',
    'Matching (each event timed on its own; throughput = whole event set per matchBatch):',
    '',
    matching,
    '',
    'Load and location updates (single updatePosition calls, random-waypoint moves of 1–15 m):',
    '',
    updating,
    '',
    'Memory after load and initial positions:',
    '',
    memory,
    '',
    `Engines agree on every event: ${agreement(results)}`,
  ].join('\n');
}

/** One table per spatial distribution: rows subscriptions × area, median and p99 per engine. */
export function gridTables(results: readonly GridResult[]): string {
  if (results.length === 0) return '(no results)';
  const engines = [...new Set(results.map((r) => r.engine))];
  const out: string[] = [];
  for (const spatial of [...new Set(results.map((r) => r.spatial))]) {
    const rs = results.filter((r) => r.spatial === spatial);
    const sizes = [...new Set(rs.map((r) => r.subscriptions))].sort((a, b) => a - b);
    const areas = [...new Set(rs.flatMap((r) => r.points.map((p) => p.areaFraction)))].sort((a, b) => a - b);
    const headers = ['subscriptions', 'area', 'radius m', ...engines.flatMap((e) => [`${e} median ms`, `${e} p99 ms`]), 'matches/event', 'agree'];
    const rows: string[][] = [];
    for (const n of sizes) {
      for (const a of areas) {
        const cells: string[] = [count(n), pct(a), '–'];
        const found: { engine: string; checksum: string }[] = [];
        let matches = NaN;
        for (const e of engines) {
          const p = rs.find((r) => r.engine === e && r.subscriptions === n)?.points.find((q) => q.areaFraction === a);
          cells.push(sig(p?.match.median), sig(p?.match.p99));
          if (p !== undefined) {
            cells[2] = sig(p.radiusM);
            found.push({ engine: e, checksum: p.checksum });
            matches = p.avgMatches;
          }
        }
        cells.push(sig(matches), agreement(found));
        rows.push(cells);
      }
    }
    out.push(`Spatial distribution: ${spatial}`, '', table(headers, rows), '');
  }
  return out.join('\n').trimEnd();
}

/** Rows subscriptions (per spatial distribution); median/p99 µs per engine and rtree/fast ratios. */
export function updateTables(results: readonly UpdateResult[]): string {
  if (results.length === 0) return '(no results)';
  const engines = [...new Set(results.map((r) => r.engine))];
  const ratio = engines.includes('fast') && engines.includes('rtree');
  const headers = ['spatial', 'subscriptions', ...engines.flatMap((e) => [`${e} median µs`, `${e} p99 µs`, `${e} updates/s`]), ...(ratio ? ['rtree/fast median', 'rtree/fast bulk time'] : [])];
  const rows: string[][] = [];
  for (const spatial of [...new Set(results.map((r) => r.spatial))]) {
    const rs = results.filter((r) => r.spatial === spatial);
    for (const n of [...new Set(rs.map((r) => r.subscriptions))].sort((a, b) => a - b)) {
      const cells = [spatial, count(n)];
      for (const e of engines) {
        const r = rs.find((x) => x.engine === e && x.subscriptions === n);
        cells.push(sig(r?.update.perCall.median), sig(r?.update.perCall.p99), sig(r?.update.perSec));
      }
      if (ratio) {
        const f = rs.find((x) => x.engine === 'fast' && x.subscriptions === n);
        const t = rs.find((x) => x.engine === 'rtree' && x.subscriptions === n);
        cells.push(
          f && t ? `${sig(t.update.perCall.median / f.update.perCall.median)}×` : '–',
          f && t ? `${sig(f.update.perSec / t.update.perSec)}×` : '–',
        );
      }
      rows.push(cells);
    }
  }
  return table(headers, rows);
}
