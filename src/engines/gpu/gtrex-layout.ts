/**
 * The host side of gtrex.wgsl's layout: a pattern's config block, the encoding of records (an
 * event as one pattern sees it) and the host's copy of each column (a ring, with the CDP's
 * retention kept in step, E15 and E16). gtrex.wgsl's header describes the words.
 */
import type { CompareOp, NEventPattern } from '../../model/event-patterns.js';
import { elementReach } from '../../model/event-patterns.js';
import type { NEvent } from '../../model/limits.js';

export const NONE = 0xffffffff;
export const HEADER_WORDS = 8;
export const DESC_WORDS = 4;
export const REC_FIXED = 4;
export const ATTR_WORDS = 3;
/** Steps a pattern may have on the GPU (the kernels' private arrays): the model's ceiling. */
export const MAX_GPU_STEPS = 32;

const OPS: Record<CompareOp, number> = { eq: 0, ne: 1, lt: 2, le: 3, gt: 4, ge: 5 };
const SELECTIONS = { each: 0, last: 1, first: 2 } as const;
const FNS = { count: 0, sum: 1, min: 2, max: 3, avg: 4 } as const;

/** A pattern compiled for the GPU: its config block (descriptors last, filled per column) and what the host needs. */
export interface GpuPattern {
  readonly pattern: NEventPattern;
  readonly attributes: readonly string[];
  /** Record words: REC_FIXED + ATTR_WORDS per attribute. */
  readonly stride: number;
  readonly elements: number;
  readonly reach: readonly number[];
  /** The config block; its last elements × DESC_WORDS words are the descriptors. */
  readonly config: Uint32Array;
  readonly descOffset: number;
}

export function compilePattern(p: NEventPattern): GpuPattern {
  if (p.steps.length > MAX_GPU_STEPS) throw new RangeError(`a GPU pattern has at most ${MAX_GPU_STEPS} steps, got ${p.steps.length}`);
  const attrs = new Map<string, number>();
  const attr = (name: string): number => {
    let i = attrs.get(name);
    if (i === undefined) attrs.set(name, (i = attrs.size));
    return i;
  };
  const nSteps = p.steps.length;
  const nNeg = p.negations.length;
  const nAgg = p.aggregates.length;
  const elements = nSteps + nNeg + nAgg;
  const tail: number[] = []; // parameter lists, after the tables
  const tablesEnd = HEADER_WORDS + 7 * (nSteps + nNeg + nAgg);
  const at = (): number => tablesEnd + tail.length;
  const words: number[] = new Array(tablesEnd).fill(0);
  const stepTab = HEADER_WORDS;
  const negTab = stepTab + 7 * nSteps;
  const aggTab = negTab + 7 * nNeg;
  const win = (ms: number): [number, number] => [Math.floor(ms / 2 ** 32), ms >>> 0];
  const elementParams = (list: NEventPattern['negations'][number]['parameters']): [number, number] => {
    const off = at();
    for (const q of list) tail.push(attr(q.attribute), OPS[q.op], q.step, attr(q.stepAttribute));
    return [off, list.length];
  };
  for (let i = 0; i < nSteps; i++) {
    const s = p.steps[i];
    const params = p.parameters.filter((q) => q.at === i);
    const pOff = at();
    for (const q of params) tail.push(attr(q.left.attribute), q.left.step, OPS[q.op], attr(q.right.attribute), q.right.step);
    const negs: number[] = [];
    p.negations.forEach((n, j) => {
      if (n.at === i) negs.push(j);
    });
    const nOff = at();
    tail.push(...negs);
    const [wh, wl] = win(s.withinMs);
    words.splice(stepTab + 7 * i, 7, SELECTIONS[s.selection], wh, wl, pOff, params.length, nOff, negs.length);
  }
  p.negations.forEach((n, j) => {
    const [off, cnt] = elementParams(n.parameters);
    const [wh, wl] = win(n.withinMs);
    const row = n.between !== null ? [0, n.between[0], n.between[1]] : [1, n.before as number, 0];
    words.splice(negTab + 7 * j, 7, ...row, wh, wl, off, cnt);
  });
  p.aggregates.forEach((a, g) => {
    const [off, cnt] = elementParams(a.parameters);
    const [wh, wl] = win(a.withinMs);
    words.splice(aggTab + 7 * g, 7, FNS[a.fn], a.attribute === null ? NONE : attr(a.attribute), a.before, wh, wl, off, cnt);
  });
  const descOffset = tablesEnd + tail.length;
  const stride = REC_FIXED + ATTR_WORDS * attrs.size;
  const config = new Uint32Array(descOffset + DESC_WORDS * elements);
  config.set(words, 0);
  config.set(tail, tablesEnd);
  config.set([nSteps, nNeg, nAgg, stride, descOffset, stepTab, negTab, aggTab], 0);
  return { pattern: p, attributes: [...attrs.keys()], stride, elements, reach: elementReach(p), config, descOffset };
}

/** Strings as ids (compared for equality only, E6); ids are handed out until the table is reset. */
export class Interner {
  private readonly ids = new Map<string, number>();

  get size(): number {
    return this.ids.size;
  }

  id(s: string): number {
    let i = this.ids.get(s);
    if (i === undefined) this.ids.set(s, (i = this.ids.size));
    return i;
  }

  reset(): void {
    this.ids.clear();
  }
}

const f64 = new Float64Array(1);
const u32 = new Uint32Array(f64.buffer);
// Little-endian hosts only (every platform Dawn runs on): word 1 is the high word.

/** The float64 bits of v as [hi, lo], with -0 as 0. */
export function doubleBits(v: number): [number, number] {
  f64[0] = v === 0 ? 0 : v;
  return [u32[1], u32[0]];
}

export function bitsDouble(hi: number, lo: number): number {
  u32[1] = hi;
  u32[0] = lo;
  return f64[0];
}

/** Writes the record of `ev` (release seq, time) as pattern `g` sees it at out[o..o + stride). */
export function encodeRecord(g: GpuPattern, seq: number, timeMs: number, ev: NEvent, interner: Interner, out: Uint32Array, o: number): void {
  out[o] = Math.floor(seq / 2 ** 32);
  out[o + 1] = seq >>> 0;
  out[o + 2] = Math.floor(timeMs / 2 ** 32);
  out[o + 3] = timeMs >>> 0;
  const names = ev.names;
  let w = o + REC_FIXED;
  for (const a of g.attributes) {
    const i = names.indexOf(a);
    if (i < 0) {
      out[w] = 0;
      out[w + 1] = 0;
      out[w + 2] = 0;
    } else {
      const v = ev.values[i];
      if (typeof v === 'number') {
        f64[0] = v === 0 ? 0 : v;
        out[w] = 1;
        out[w + 1] = u32[1];
        out[w + 2] = u32[0];
      } else if (typeof v === 'boolean') {
        out[w] = 2;
        out[w + 1] = 0;
        out[w + 2] = v ? 1 : 0;
      } else {
        out[w] = 3;
        out[w + 1] = 0;
        out[w + 2] = interner.id(v);
      }
    }
    w += ATTR_WORDS;
  }
}

/** Retention counters shared by a sequencer's columns (the CDP's, E15). */
export interface Retention {
  retained: number;
  evicted: number;
}

/**
 * The host's copy of one column: a ring of (seq, time, event). The GPU's view starts at `gHead`,
 * where the CDP's started when the batch being searched began (a terminator early in the batch
 * still sees what a later record of the batch drops; the kernels bound each one by its own seq);
 * `n` follows the CDP's retention record by record (E16 time drops, then E15 evictions).
 */
export class HostColumn {
  cap: number;
  seqs: Float64Array;
  times: Float64Array;
  evs: (NEvent | undefined)[];
  /** Records the CDP would hold: the last n from the tail. */
  n = 0;
  /** Physical position of the GPU's first record, and records from there to the tail. */
  gHead = 0;
  gN = 0;
  /** Records from gHead already written to the ring in the pool. */
  uploaded = 0;
  /** The ring's offset in the pool; -1: none yet (written whole at the next upload). */
  ring = -1;

  constructor(
    readonly reach: number,
    cap = 16,
  ) {
    this.cap = cap;
    this.seqs = new Float64Array(cap);
    this.times = new Float64Array(cap);
    this.evs = new Array(cap);
  }

  /** E16 then E15, as CdpSequencer.record. */
  append(seq: number, timeMs: number, ev: NEvent, maxRetained: number, r: Retention): void {
    const oldest = timeMs - this.reach;
    while (this.n > 0 && this.times[this.pos(this.gN - this.n)] < oldest) {
      this.n--;
      r.retained--;
    }
    if (this.gN === this.cap) this.grow();
    const pos = this.pos(this.gN);
    this.seqs[pos] = seq;
    this.times[pos] = timeMs;
    this.evs[pos] = ev;
    this.gN++;
    this.n++;
    r.retained++;
    if (this.n > maxRetained) {
      this.n--;
      r.retained--;
      r.evicted++;
    }
  }

  /** Doubles the ring (linearised from gHead); the pool's copy moves with it (`ring` = -1). */
  private grow(): void {
    const cap = this.cap * 2;
    const seqs = new Float64Array(cap);
    const times = new Float64Array(cap);
    const evs: (NEvent | undefined)[] = new Array(cap);
    for (let k = 0; k < this.gN; k++) {
      const p = this.pos(k);
      seqs[k] = this.seqs[p];
      times[k] = this.times[p];
      evs[k] = this.evs[p];
    }
    this.gHead = 0;
    this.cap = cap;
    this.seqs = seqs;
    this.times = times;
    this.evs = evs;
    this.ring = -1;
    this.uploaded = 0;
  }

  /** After a batch: the GPU's view starts where the CDP's does. */
  settle(): void {
    const d = this.gN - this.n;
    for (let k = 0; k < d; k++) this.evs[this.pos(k)] = undefined; // the event is gone from this column
    this.gHead = this.pos(d);
    this.gN = this.n;
    this.uploaded = Math.max(0, this.uploaded - d);
  }

  /** Physical position of record k from gHead. */
  pos(k: number): number {
    const p = this.gHead + k;
    return p >= this.cap ? p - this.cap : p;
  }

  /** The records the CDP holds, oldest first (snapshots). */
  *held(): Generator<{ seq: number; timeMs: number; ev: NEvent }> {
    for (let k = this.gN - this.n; k < this.gN; k++) {
      const p = this.pos(k);
      yield { seq: this.seqs[p], timeMs: this.times[p], ev: this.evs[p]! };
    }
  }
}
