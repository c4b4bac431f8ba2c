/**
 * The GPU tag index's exact verification (gpu/tag-index.ts): each Bloom hit (query, signature
 * position) is kept only when the set's tags are all among the query's, and gives the set's keys.
 * A plain function over the CPU index's tables, so the calling thread and worker threads
 * (tag-worker.ts, over shared copies of the tables) run the same code.
 */
import { type TagMatches, isSubsetOf } from '../tag-index.js';

/** The tables verification reads: the CPU index's tagset and key tables, and the GPU's order. */
export interface VerifyTables {
  setOff: Uint32Array;
  setTags: Uint32Array;
  keyOff: Uint32Array;
  keyList: Uint32Array;
  /** When keys are ranked: their values by rank. */
  keyValues: Uint32Array | null;
  /** Distinct set at each signature position. */
  order: Uint32Array;
}

/**
 * Answers of a batch: queries `qTags[qOff[j] .. qOff[j+1])`, hits as (query, position) pairs from
 * `data[head]`. match-unique (`unique`) gives each key of a query once.
 */
export function verifyHits(t: VerifyTables, qOff: Uint32Array, qTags: Uint32Array, data: Uint32Array, head: number, hits: number, unique: boolean): TagMatches & { falseHits: number } {
  const nq = qOff.length - 1;
  // Hits by query (a counting sort).
  const start = new Uint32Array(nq + 1);
  for (let h = 0; h < hits; h++) start[data[head + 2 * h] + 1]++;
  for (let j = 0; j < nq; j++) start[j + 1] += start[j];
  const fill = start.slice(0, nq);
  const byQuery = new Uint32Array(hits);
  for (let h = 0; h < hits; h++) byQuery[fill[data[head + 2 * h]]++] = data[head + 1 + 2 * h];
  const offsets = new Uint32Array(nq + 1);
  const keys: number[] = [];
  const { keyOff, keyList, keyValues, order } = t;
  const sets = { offsets: t.setOff, tags: t.setTags };
  let falseHits = 0;
  for (let j = 0; j < nq; j++) {
    const qf = qOff[j];
    const qt = qOff[j + 1];
    const first = keys.length;
    for (let h = start[j]; h < start[j + 1]; h++) {
      const u = order[byQuery[h]];
      if (!isSubsetOf(sets, u, qTags, qf, qt)) {
        falseHits++;
        continue;
      }
      for (let k = keyOff[u], end = keyOff[u + 1]; k < end; k++) keys.push(keyList[k]);
    }
    if (unique && keys.length - first > 1) {
      // Each key once: sort the query's keys and drop repeats.
      const mine = Uint32Array.from(keys.slice(first)).sort();
      keys.length = first;
      for (let i = 0; i < mine.length; i++) if (i === 0 || mine[i] !== mine[i - 1]) keys.push(mine[i]);
    }
    offsets[j + 1] = keys.length;
  }
  const out = new Uint32Array(keys.length);
  if (keyValues === null) out.set(keys);
  else for (let i = 0; i < keys.length; i++) out[i] = keyValues[keys[i]];
  return { offsets, keys: out, falseHits };
}
