/**
 * The GPU pattern sequencer's answers (gtrex.ts): the complete matches read back from the GPU
 * turned into PatternMatches (their records' events from the host's rings, E12's values from the
 * GPU's count, sum, min and max, the aggregates' conditions), in the order the CPU sequencers give
 * them: by release, then in the order of the release's hits, then (for `each`) by the steps'
 * events in release order; merged with the matches of the consuming patterns kept on the CDP.
 *
 * Searches are numbered in release and hit order, so the matches are grouped by search with a
 * counting sort, and only a search's own matches (an `each`'s) are sorted by their steps' seqs.
 * Nothing is built per match but the PatternMatch itself: millions of matches in one batch fit.
 */
import type { NEvent } from '../../model/limits.js';
import { compareAttr } from '../event-patterns/compare.js';
import type { BatchRelease, PatternMatch } from '../event-patterns/sequencer.js';
import type { PatState } from './gtrex.js';
import { type HostColumn, bitsDouble } from './gtrex-layout.js';

/** A terminator's search: the release, its hit, the pattern. */
export interface Search {
  readonly item: number;
  readonly hit: number;
  readonly st: PatState;
}

/** The complete matches as read back: `n` entries of `cs` words (gtrex.wgsl), `S` the most steps, `owner` a record's column. */
export interface Done {
  readonly raw: Uint32Array;
  readonly n: number;
  readonly S: number;
  readonly cs: number;
  readonly owner: (off: number) => HostColumn;
}

/** Adds the GPU's matches to `out` (which holds the CDP's, per release), in the CPU sequencers' order. */
export function answer(batch: readonly BatchRelease[], searches: readonly Search[], done: Done, out: PatternMatch[][]): void {
  const { raw, n, S, cs, owner } = done;
  // By search (counting sort), each entry's steps' seqs beside it.
  const start = new Uint32Array(searches.length + 1);
  for (let t = 0; t < n; t++) start[raw[t * cs + 1] + 1]++;
  for (let s = 0; s < searches.length; s++) start[s + 1] += start[s];
  const next = start.slice(0, searches.length);
  const order = new Uint32Array(n);
  for (let t = 0; t < n; t++) order[next[raw[t * cs + 1]]++] = t;
  const W = Math.max(1, S - 1);
  const seqs = new Float64Array(n * W);
  for (let t = 0; t < n; t++) {
    const o = t * cs;
    const st = searches[raw[o + 1]].st;
    const nSteps = st.g.pattern.steps.length;
    for (let i = 1; i < nSteps; i++) {
      const off = raw[o + 2 + i];
      const c = owner(off);
      seqs[t * W + i - 1] = c.seqs[(off - c.ring) / st.g.stride];
    }
  }
  const bySeqs = (a: number, b: number): number => {
    for (let k = 0; k < W; k++) {
      const d = seqs[a * W + k] - seqs[b * W + k];
      if (d !== 0) return d;
    }
    return 0;
  };
  let item = -1;
  let gpu: { hit: number; m: PatternMatch }[] = [];
  const flush = (): void => {
    if (item < 0 || gpu.length === 0) return;
    const cpu = out[item];
    if (cpu.length === 0) out[item] = gpu.map((x) => x.m);
    else {
      // Both: in the order of the hits (a slot is in hits once).
      const hitOf = new Map<number, number>();
      batch[item].hits.forEach((h, i) => hitOf.set(h.slot, i));
      const all = [...cpu.map((m) => ({ hit: hitOf.get(m.slot)!, m })), ...gpu];
      all.sort((a, b) => a.hit - b.hit); // stable: each pattern's own order kept
      out[item] = all.map((x) => x.m);
    }
    gpu = [];
  };
  for (let s = 0; s < searches.length; s++) {
    const a = start[s];
    const b = start[s + 1];
    if (a === b) continue;
    const search = searches[s];
    if (search.item !== item) {
      flush();
      item = search.item;
    }
    if (search.st.removed) continue;
    const mine = b - a > 1 ? Array.from(order.subarray(a, b)).sort(bySeqs) : [order[a]];
    for (const t of mine) {
      const m = match(search.st, raw, t * cs, S, owner, batch[item]);
      if (m !== null) gpu.push({ hit: search.hit, m });
    }
  }
  flush();
}

/** One complete match: its events and times, E12's values from the GPU's count, sum, min and max, the aggregates' conditions. */
function match(st: PatState, raw: Uint32Array, o: number, S: number, owner: (off: number) => HostColumn, release: BatchRelease): PatternMatch | null {
  const p = st.g.pattern;
  const values: (number | null)[] = new Array(p.aggregates.length);
  for (let g = 0; g < p.aggregates.length; g++) {
    const a = p.aggregates[g];
    const w = o + S + 2 + 7 * g;
    const count = raw[w];
    const sum = bitsDouble(raw[w + 1], raw[w + 2]);
    let v: number | null;
    switch (a.fn) {
      case 'count': v = count; break;
      case 'sum': v = sum; break;
      case 'min': v = count === 0 ? null : bitsDouble(raw[w + 3], raw[w + 4]) + 0; break;
      case 'max': v = count === 0 ? null : bitsDouble(raw[w + 5], raw[w + 6]) + 0; break;
      case 'avg': v = count === 0 ? null : sum / count; break;
    }
    const c = a.where;
    if (c !== null && (v === null || !compareAttr(c.op, v, c.value))) return null;
    values[g] = v;
  }
  const nSteps = p.steps.length;
  const events: NEvent[] = [release.event];
  const times: number[] = [release.timeMs];
  for (let i = 1; i < nSteps; i++) {
    const off = raw[o + 2 + i];
    const c = owner(off);
    const slot = (off - c.ring) / st.g.stride;
    events.push(c.evs[slot]!);
    times.push(c.times[slot]);
  }
  return { slot: st.slot, events, timesMs: times, aggregates: values };
}
