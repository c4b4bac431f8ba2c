/**
 * The host side of gtrex.wgsl's layout: a pattern's config block, the encoding of records (an
 * event as one pattern sees it) and the host's copy of each column (a ring, with the CDP's
 * retention kept in step, E15 and E16). gtrex.wgsl's header describes the words.
 */
import type { CompareOp, NEventPattern } from '../../model/event-patterns.js';
import { elementReach } from '../../model/event-patterns.js';
import type { NEvent } from '../../model/limits.js';

export const NONE = 0xffffffff;
export const HEADER_WORDS = 9;
export const INDEX_WORDS = 5;
export const DESC_WORDS = 4;
export const REC_FIXED = 4;
export const ATTR_WORDS = 3;
/** A sub-ring's entry: seq, time, and the record's logical index in its column's ring (gtrex.wgsl). */
export const SUB_WORDS = 5;
/** Steps a pattern may have on the GPU (the kernels' private arrays): the model's ceiling. */
export const MAX_GPU_STEPS = 32;

const OPS: Record<CompareOp, number> = { eq: 0, ne: 1, lt: 2, le: 3, gt: 4, ge: 5 };
const SELECTIONS = { each: 0, last: 1, first: 2 } as const;
const FNS = { count: 0, sum: 1, min: 2, max: 3, avg: 4 } as const;

/**
 * An element's column indexed by an equality with an earlier step (as the CDP's index): once it
 * holds enough records, they are also kept in sub-rings by a hash of the attribute's value (more
 * sub-rings as it grows), and a search reads only the sub-ring of the chosen step's value (every
 * parameter is still tested).
 */
export interface IndexPlan {
  /** The element's attribute (index into `attributes`), and the step and its attribute giving the value. */
  readonly attr: number;
  readonly step: number;
  readonly stepAttr: number;
}

/** A pattern compiled for the GPU: its config block (descriptors last, filled per column) and what the host needs. */
export interface GpuPattern {
  readonly pattern: NEventPattern;
  readonly attributes: readonly string[];
  /** Record words: REC_FIXED + ATTR_WORDS per attribute. */
  readonly stride: number;
  readonly elements: number;
  readonly reach: readonly number[];
  /** Per element: its index, or null. */
  readonly plans: readonly (IndexPlan | null)[];
  /**
   * The config block: tables, lists, the index table (per element: sub-rings, 0 while it scans
   * its whole ring; the plan; where the sub-rings' descriptors are, a pool offset), the descriptors.
   */
  readonly config: Uint32Array;
  readonly indexOffset: number;
  readonly descOffset: number;
}

export function compilePattern(p: NEventPattern, indexed = true): GpuPattern {
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
  // Index plans, as the CDP's: a step by its first equality with an earlier step; a negation or
  // aggregate by its first equality with a step decided by then.
  const raw: ({ attr: number; step: number; stepAttr: number } | null)[] = [];
  for (let i = 0; i < nSteps; i++) {
    let plan: { attr: number; step: number; stepAttr: number } | null = null;
    if (i > 0 && indexed) {
      for (const q of p.parameters) {
        if (q.at !== i || q.op !== 'eq') continue;
        const mine = q.left.step === i ? q.left : q.right;
        const other = q.left.step === i ? q.right : q.left;
        plan = { attr: attr(mine.attribute), step: other.step, stepAttr: attr(other.attribute) };
        break;
      }
    }
    raw.push(plan);
  }
  const elementPlan = (params: NEventPattern['negations'][number]['parameters'], limit: number): { attr: number; step: number; stepAttr: number } | null => {
    if (indexed) for (const q of params) if (q.op === 'eq' && q.step <= limit) return { attr: attr(q.attribute), step: q.step, stepAttr: attr(q.stepAttribute) };
    return null;
  };
  for (const n of p.negations) raw.push(elementPlan(n.parameters, n.at));
  for (const _ of p.aggregates) raw.push(elementPlan(_.parameters, nSteps - 1));
  const indexTab = tablesEnd + tail.length;
  const descOffset = indexTab + INDEX_WORDS * elements;
  const stride = REC_FIXED + ATTR_WORDS * attrs.size;
  const config = new Uint32Array(descOffset + DESC_WORDS * elements);
  config.set(words, 0);
  config.set(tail, tablesEnd);
  raw.forEach((pl, k) => {
    if (pl !== null) config.set([0, pl.attr, pl.step, pl.stepAttr, 0], indexTab + INDEX_WORDS * k);
  });
  config.set([nSteps, nNeg, nAgg, stride, descOffset, stepTab, negTab, aggTab, indexTab], 0);
  return { pattern: p, attributes: [...attrs.keys()], stride, elements, reach: elementReach(p), plans: raw, config, indexOffset: indexTab, descOffset };
}

/** gtrex.wgsl's `bucketOf`: a hash of an encoded value (a string by its content hash, not its id). */
export function bucketHash(tag: number, hi: number, lo: number): number {
  let h = (Math.imul(tag, 0x9e3779b1) ^ Math.imul(hi, 0x85ebca77) ^ Math.imul(tag === 3 ? 0 : lo, 0xc2b2ae3d)) >>> 0;
  h = (h ^ (h >>> 15)) >>> 0;
  h = Math.imul(h, 0x2c1b3c6d) >>> 0;
  return (h ^ (h >>> 12)) >>> 0;
}

/** FNV-1a over the UTF-16 code units: a string's hash, the same whatever its id. */
export function stringHash(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193);
  return h >>> 0;
}

/** The hash of `ev`'s value of attribute `name` (its bucket: the low bits), or -1 where it has none (such a record is in no sub-ring). */
export function keyOfEvent(ev: NEvent, name: string): number {
  const i = ev.names.indexOf(name);
  if (i < 0) return -1;
  const v = ev.values[i];
  let h: number;
  if (typeof v === 'number') {
    f64[0] = v === 0 ? 0 : v;
    h = bucketHash(1, u32[1], u32[0]);
  } else if (typeof v === 'boolean') h = bucketHash(2, 0, v ? 1 : 0);
  else h = bucketHash(3, stringHash(v), 0); // by content: no id needed (the interner is for records staged)
  return h;
}

/**
 * Strings as ids (compared for equality only, E6) beside their content hashes (which pick sub-rings);
 * ids are handed out until the table is reset.
 */
export class Interner {
  private readonly ids = new Map<string, number>();
  private hashes: number[] = [];

  get size(): number {
    return this.ids.size;
  }

  id(s: string): number {
    let i = this.ids.get(s);
    if (i === undefined) {
      this.ids.set(s, (i = this.ids.size));
      this.hashes.push(stringHash(s));
    }
    return i;
  }

  /** The content hash of the string interned as `id`. */
  hashOf(id: number): number {
    return this.hashes[id];
  }

  reset(): void {
    this.ids.clear();
    this.hashes = [];
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
        const id = interner.id(v);
        out[w] = 3;
        out[w + 1] = interner.hashOf(id);
        out[w + 2] = id;
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

/** When and how far an indexed column's sub-rings grow: past `load` records a sub-ring on average, to `load / 4`, at most `max`. */
export interface IndexGrowth {
  load: number;
  max: number;
}

/**
 * The host's copy of one column: a ring of (seq, time, event), its capacity a power of two, each
 * record at its logical index (appends so far) masked by the capacity, so an index stays valid
 * when the ring grows. The GPU's view starts at `gHead`, where the CDP's started when the batch
 * being searched began (a terminator early in the batch still sees what a later record of the batch
 * drops; the kernels bound each one by its own seq); `n` follows the CDP's retention record by
 * record (E16 time drops, then E15 evictions). An indexed column keeps each record's key hash and,
 * once it holds `load` records, each record's (seq, time, logical index) in the sub-ring of its
 * bucket as well (more sub-rings, rebuilt, as it grows): sub-rings are HostColumns whose `n` the
 * column drives (a record leaves its sub-ring when it leaves the column).
 */
export class HostColumn {
  cap: number;
  seqs: Float64Array;
  times: Float64Array;
  /** A column's events; a sub-ring's links (logical indices in its column, mod 2^32). */
  evs: (NEvent | undefined)[];
  links: Uint32Array | null;
  /** Per record of an indexed column: its key's hash, or -1 (no value: in no sub-ring). */
  keys: Float64Array | null;
  /** Records the CDP would hold: the last n from the tail. */
  n = 0;
  /** Logical index of the GPU's first record, and records from there to the tail. */
  gHead = 0;
  gN = 0;
  /** Records from gHead already written to the ring in the pool. */
  uploaded = 0;
  /** The ring's offset in the pool; -1: none yet (written whole at the next upload). */
  ring = -1;
  /** An indexed column's sub-rings (0: none yet, its ring is scanned whole), made when first used. */
  buckets = 0;
  subs: (HostColumn | undefined)[] | null = null;
  /** The sub-rings whose pool copy is behind, those this batch changed. */
  stale: number[] = [];
  changed: number[] = [];
  /** The sub-rings' descriptors (4 words each) and their pool offset (-1: to be written whole). */
  subDesc: Uint32Array | null = null;
  subDescAt = -1;
  /** A sub-ring's membership of its column's `stale` and `changed` lists. */
  isStale = false;
  isChanged = false;

  constructor(
    readonly reach: number,
    /** 'indexed': keeps keys (and sub-rings when it grows); 'sub': a sub-ring. */
    kind: 'plain' | 'indexed' | 'sub' = 'plain',
    cap = 16,
  ) {
    this.cap = cap;
    this.seqs = new Float64Array(cap);
    this.times = new Float64Array(cap);
    this.evs = kind === 'sub' ? [] : new Array(cap);
    this.links = kind === 'sub' ? new Uint32Array(cap) : null;
    this.keys = kind === 'indexed' ? new Float64Array(cap) : null;
  }

  /** E16 then E15, as CdpSequencer.record; `key` is the record's key hash in an indexed column. */
  append(seq: number, timeMs: number, ev: NEvent, key: number, maxRetained: number, r: Retention, growth: IndexGrowth): void {
    const oldest = timeMs - this.reach;
    while (this.n > 0 && this.times[this.pos(this.gN - this.n)] < oldest) this.dropOldest(r);
    const logical = this.gHead + this.gN;
    const pos = this.push(seq, timeMs);
    this.evs[pos] = ev;
    if (this.keys !== null) {
      this.keys[pos] = key;
      if (this.buckets > 0 && key >= 0) {
        const b = key & (this.buckets - 1);
        const sub: HostColumn = (this.subs![b] ??= new HostColumn(0, 'sub'));
        const q = sub.push(seq, timeMs); // before reading sub.links: a push may grow it
        sub.links![q] = logical >>> 0;
        sub.n++;
        this.markStale(sub, b);
        this.markChanged(sub, b);
      }
    }
    this.n++;
    r.retained++;
    while (this.n > maxRetained) {
      this.dropOldest(r);
      r.evicted++;
    }
    if (this.keys !== null && this.buckets < growth.max && this.n > growth.load * Math.max(1, this.buckets)) {
      let b = 2;
      while (b < growth.max && b * growth.load < 4 * this.n) b *= 2;
      this.rebucket(b);
    }
  }

  /** Sub-ring b's pool copy is behind (written at the next upload). */
  markStale(sub: HostColumn, b: number): void {
    if (sub.isStale) return;
    sub.isStale = true;
    this.stale.push(b);
  }

  private markChanged(sub: HostColumn, b: number): void {
    if (sub.isChanged) return;
    sub.isChanged = true;
    this.changed.push(b);
  }

  /** The stale sub-rings, taken (their flags cleared). */
  takeStale(): number[] {
    const list = this.stale.splice(0);
    for (const b of list) this.subs![b]!.isStale = false;
    return list;
  }

  /**
   * The sub-rings made anew with `buckets` of them, from every record of the GPU's view (those
   * the CDP no longer holds first, not counted: settle drops them); written whole at the next upload.
   */
  private rebucket(buckets: number): void {
    this.buckets = buckets;
    this.subs = new Array(buckets);
    this.stale = [];
    this.changed = [];
    this.subDesc = new Uint32Array(DESC_WORDS * buckets);
    this.subDescAt = -1;
    const held = this.gN - this.n;
    for (let k = 0; k < this.gN; k++) {
      const p = this.pos(k);
      const key = this.keys![p];
      if (key < 0) continue;
      const b = key & (buckets - 1);
      const sub: HostColumn = (this.subs[b] ??= new HostColumn(0, 'sub'));
      const q = sub.push(this.seqs[p], this.times[p]);
      sub.links![q] = (this.gHead + k) >>> 0;
      if (k >= held) sub.n++;
      this.markStale(sub, b);
      this.markChanged(sub, b);
    }
  }

  private dropOldest(r: Retention): void {
    if (this.buckets > 0) {
      const key = this.keys![this.pos(this.gN - this.n)];
      if (key >= 0) {
        const b = key & (this.buckets - 1);
        const sub = this.subs![b]!;
        sub.n--;
        this.markChanged(sub, b);
      }
    }
    this.n--;
    r.retained--;
  }

  /** Appends (seq, time) at the tail (growing the ring); returns the position. */
  push(seq: number, timeMs: number): number {
    if (this.gN === this.cap) this.grow();
    const pos = this.pos(this.gN);
    this.seqs[pos] = seq;
    this.times[pos] = timeMs;
    this.gN++;
    return pos;
  }

  /** Doubles the ring. */
  private grow(): void {
    this.resize(this.cap * 2);
  }

  /** A ring of `cap` (≥ gN), each record at its logical index masked anew; the pool's copy moves with it (`ring` = -1). */
  private resize(cap: number): void {
    const seqs = new Float64Array(cap);
    const times = new Float64Array(cap);
    const evs: (NEvent | undefined)[] = this.links === null ? new Array(cap) : [];
    const links = this.links === null ? null : new Uint32Array(cap);
    const keys = this.keys === null ? null : new Float64Array(cap);
    for (let k = 0; k < this.gN; k++) {
      const p = this.pos(k);
      const q = (this.gHead + k) & (cap - 1);
      seqs[q] = this.seqs[p];
      times[q] = this.times[p];
      if (links !== null) links[q] = this.links![p];
      else evs[q] = this.evs[p];
      if (keys !== null) keys[q] = this.keys![p];
    }
    this.cap = cap;
    this.seqs = seqs;
    this.times = times;
    this.evs = evs;
    this.links = links;
    this.keys = keys;
    this.ring = -1;
    this.uploaded = 0;
  }

  /**
   * After a batch: the GPU's view starts where the CDP's does (sub-rings too). A ring a large batch
   * grew far past what it holds now shrinks (to twice that, at least 16), so the pool does not keep
   * room for the largest batch ever seen. Returns whether a ring moved (its pattern is written again).
   */
  settle(): boolean {
    const d = this.gN - this.n;
    if (this.links === null) for (let k = 0; k < d; k++) this.evs[this.pos(k)] = undefined; // the event is gone from this column
    this.gHead += d;
    this.gN = this.n;
    this.uploaded = Math.max(0, this.uploaded - d);
    let moved = false;
    if (this.cap > 64 && this.cap > 8 * this.gN) {
      let cap = 16;
      while (cap < 2 * this.gN) cap *= 2;
      this.resize(cap);
      moved = true;
    }
    for (const b of this.changed) {
      const sub = this.subs![b]!;
      sub.isChanged = false;
      if (sub.settle()) {
        this.markStale(sub, b);
        moved = true;
      }
    }
    this.changed.length = 0;
    return moved;
  }

  /** Physical position of record k from gHead. */
  pos(k: number): number {
    return (this.gHead + k) & (this.cap - 1);
  }

  /** The records the CDP holds, oldest first (snapshots). */
  *held(): Generator<{ seq: number; timeMs: number; ev: NEvent }> {
    for (let k = this.gN - this.n; k < this.gN; k++) {
      const p = this.pos(k);
      yield { seq: this.seqs[p], timeMs: this.times[p], ev: this.evs[p]! };
    }
  }
}
