/**
 * The GPU pattern sequencer's answers (gtrex.ts): the complete matches read back from the GPU
 * turned into PatternMatches (their records' events from the host's rings, E12's values from the
 * GPU's count, sum, min and max, the aggregates' conditions), in the order the CPU sequencers give
 * them: by release, then in the order of the release's hits, then (for `each`) by the steps'
 * events in release order; merged with the matches of the consuming patterns kept on the CDP.
 */
import type { NEvent } from '../../model/limits.js';
import { compareAttr } from '../event-patterns/compare.js';
import type { PatternMatch } from '../event-patterns/sequencer.js';
import type { BatchRelease, PatState, Search } from './gtrex.js';
import { type HostColumn, bitsDouble } from './gtrex-layout.js';

export /** A complete match as decode reads it; `key`: item, hit, then the seqs of steps 1.. (the order of `merge`). */
interface Row {
  readonly st: PatState;
  readonly key: Float64Array;
  readonly events: NEvent[];
  readonly times: number[];
  /** Per aggregate: count, sum, min, max. */
  readonly aggs: Float64Array;
}

/** The complete matches read back: their records' events and times (from the host's rings), their aggregates. */
export function decode(batch: readonly BatchRelease[], searches: readonly Search[], raw: Uint32Array, n: number, S: number, cs: number, owner: (off: number) => HostColumn): Row[] {
  const rows: Row[] = [];
  for (let t = 0; t < n; t++) {
    const o = t * cs;
    const s = searches[raw[o + 1]];
    const st = s.st;
    const nSteps = st.g.pattern.steps.length;
    const nAgg = st.g.pattern.aggregates.length;
    const key = new Float64Array(1 + nSteps);
    key[0] = s.item;
    key[1] = s.hit;
    const events: NEvent[] = [batch[s.item].event];
    const times: number[] = [batch[s.item].timeMs];
    for (let i = 1; i < nSteps; i++) {
      const off = raw[o + 2 + i];
      const c = owner(off);
      const slot = (off - c.ring) / st.g.stride;
      key[1 + i] = c.seqs[slot];
      events.push(c.evs[slot]!);
      times.push(c.times[slot]);
    }
    const aggs = new Float64Array(4 * nAgg);
    for (let g = 0; g < nAgg; g++) {
      const w = o + S + 2 + 7 * g;
      aggs[4 * g] = raw[w];
      aggs[4 * g + 1] = bitsDouble(raw[w + 1], raw[w + 2]);
      aggs[4 * g + 2] = bitsDouble(raw[w + 3], raw[w + 4]);
      aggs[4 * g + 3] = bitsDouble(raw[w + 5], raw[w + 6]);
    }
    rows.push({ st, key, events, times, aggs });
  }
  return rows;
}

/** Sorts the GPU's matches into release, hit and (for `each`) step order, and merges them with the CDP's. */
export function merge(batch: readonly BatchRelease[], out: PatternMatch[][], rows: Row[]): void {
  rows.sort((x, y) => {
    const a = x.key;
    const b = y.key;
    const n = Math.min(a.length, b.length);
    for (let k = 0; k < n; k++) if (a[k] !== b[k]) return a[k] - b[k];
    return 0;
  });
  let r = 0;
  while (r < rows.length) {
    const item = rows[r].key[0];
    const hits = batch[item].hits;
    const gpu: { hit: number; m: PatternMatch }[] = [];
    for (; r < rows.length && rows[r].key[0] === item; r++) {
      const row = rows[r];
      if (row.st.removed) continue;
      const m = match(row);
      if (m !== null) gpu.push({ hit: row.key[1], m });
    }
    if (gpu.length === 0) continue;
    const cpu = out[item];
    if (cpu.length === 0) {
      out[item] = gpu.map((x) => x.m);
      continue;
    }
    // Both: in the order of the hits (a slot is in hits once).
    const hitOf = new Map<number, number>();
    hits.forEach((h, i) => hitOf.set(h.slot, i));
    const all = [...cpu.map((m) => ({ hit: hitOf.get(m.slot)!, m })), ...gpu];
    all.sort((a, b) => a.hit - b.hit); // stable: each pattern's own order kept
    out[item] = all.map((x) => x.m);
  }
}

/** E12's values from the GPU's count, sum, min and max, and the aggregates' conditions. */
function match(row: Row): PatternMatch | null {
  const p = row.st.g.pattern;
  const values: (number | null)[] = new Array(p.aggregates.length);
  for (let g = 0; g < p.aggregates.length; g++) {
    const a = p.aggregates[g];
    const count = row.aggs[4 * g];
    const sum = row.aggs[4 * g + 1];
    let v: number | null;
    switch (a.fn) {
      case 'count': v = count; break;
      case 'sum': v = sum; break;
      case 'min': v = count === 0 ? null : row.aggs[4 * g + 2] + 0; break;
      case 'max': v = count === 0 ? null : row.aggs[4 * g + 3] + 0; break;
      case 'avg': v = count === 0 ? null : sum / count; break;
    }
    const w = a.where;
    if (w !== null && (v === null || !compareAttr(w.op, v, w.value))) return null;
    values[g] = v;
  }
  return { slot: row.st.slot, events: row.events, timesMs: row.times, aggregates: values };
}
