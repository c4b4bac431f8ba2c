/**
 * The GPU engine's state in host memory, laid out exactly as the GPU buffers (src/engines/gpu/match.wgsl):
 * struct-of-arrays with 4-byte elements (CLCB §4.2: FPos, SqDist, BF, FCount; CCM's Constraints).
 * This host mirror is what uploads read from and what rebuilds the GPU after a device loss.
 *
 * Per filter (24 B): fBloom, fMeta (count | area | live | names), fPos (position slot), fRad, fCon (first
 * constraint), fSub. Per constraint (12 B): cHead (name | op | type), cValA, cValB. Per position
 * slot (16 B): unit vector + known flag. A filter with 4 constraints costs 72 B plus its share of
 * the owner's position and of the strings. A filter of names only (tags and at most one `exists`, no value to
 * compare: META_NAMES) keeps no constraint slots: its name ids are one word each in cStr, a run
 * shared by every filter with the same names, the first in fPos when it has no area; so a tag-only
 * filter of k tags costs 24 + 4(k - 1) B, or 24 B where another filter holds the same tags. The per-batch event input is encoded by input.ts.
 * Host only, for the float64 test of band pairs: each filter's radius as given (8 B) and each
 * slot's uploaded coordinates (16 B), with a journal of those that batches in flight still see.
 *
 * One file because the arrays, their allocators (constraint runs, interned strings and name runs
 * sharing cStr, position slots) and the dirty ranges the uploads follow are one state: each insert
 * or removal touches several of them at once, and splitting them would expose the arrays' growth.
 */
import { type FilterView, type NArea, type NConstraint, type NEvent, type NFilter, type NSubscription, type SubscriptionView, patternDfa } from '../../model/limits.js';
import type { Dfa } from '../../model/pattern.js';
import { tagName, tagOfName } from '../../model/tags.js';
import { OP_CODE, OP_EXISTS, OP_NAME, T_ANY, T_BOOL, T_NUM, T_STR } from '../operators.js';
import type { Listed } from '../matcher.js';
import { EventEncoder, type PackedInput, RAD, bloomBit, numberKey } from './input.js';

// Moved to input.ts (the batch input); re-exported for existing importers.
export { ATTR_WORDS, EVENT_WORDS, GRID_HEADER_WORDS, PARAM_WORDS, bloomBit, gridFrame, numberKey, utf8Into } from './input.js';
export { T_ANY, T_BOOL, T_NUM, T_STR } from '../operators.js';

export const FILTER_BYTES = 24;
export const CONSTRAINT_BYTES = 12;
export const POSITION_BYTES = 32;

/** fMeta: the filter's constraint count (its tags included) in the low 10 bits, then flags. */
export const META_COUNT = 0x3ff;
export const META_AREA = 0x400;
export const META_LIVE = 0x800;
/**
 * fMeta: the filter requires names only (its tags, at most one `exists`: namesOnly), as name ids in
 * ascending order: without an area, the first is fPos (which holds no position slot then) and the
 * rest are the words of cStr from fCon; with one, all are there. A run is shared by every filter
 * with the same names.
 */
export const META_NAMES = 0x1000;
/**
 * cHead: the name id in the low NAME_BITS bits, the operator in the next 4, the type in the top 2
 * (67M distinct names: attribute names and tags, whose vocabulary grows with the tag sets).
 */
export const NAME_BITS = 26;
/** Filter indices stay below 2^31: Cont marks a band candidate as its index with bit 31 set (match.wgsl BAND). */
export const MAX_FILTER_INDEX = 0x7fffffff;
/** Bit 31 of an output pair's second word: a band pair, the rest its filter index (match.wgsl BAND). */
export const BAND_PAIR = 0x80000000;
const MAX_NAMES = 1 << NAME_BITS;

const NO_CONSTRAINTS: readonly never[] = [];
const NO_TAGS: readonly string[] = [];

/**
 * A filter whose constraints only require names (its tags, and at most one `exists`): the layout
 * keeps its names as one run of cStr words and gives it no constraint slots. The run is sorted, so
 * it could not give back the order of two `exists` given (tags are sorted anyway): a filter with
 * more takes constraint slots, in the order given.
 */
export function namesOnly(flt: FilterView): boolean {
  const cs = flt.constraints;
  if (cs === undefined) return true;
  if (cs.length > 1) return false;
  return cs.length === 0 || cs[0].op === 'exists';
}

/** A half-open range of array elements that changed since the last upload. */
export class Dirty {
  lo = Infinity;
  hi = 0;
  all = false;
  mark(i: number, n = 1): void {
    if (i < this.lo) this.lo = i;
    if (i + n > this.hi) this.hi = i + n;
  }
  clear(): void {
    this.lo = Infinity;
    this.hi = 0;
    this.all = false;
  }
  get empty(): boolean {
    return !this.all && this.hi <= this.lo;
  }
}

function grown<T extends Uint32Array | Int32Array | Float32Array | Float64Array | Uint8Array>(a: T, n: number): T {
  const b = new (a.constructor as new (n: number) => T)(n);
  b.set(a);
  return b;
}

const encoder = new TextEncoder();
const KEY = new Uint32Array(2);

export class GpuLayout {
  // names
  private readonly nameIds = new Map<string, number>();
  /** Tag → the id of its name (tagName), for the tags some filter requires. */
  private readonly tagIds = new Map<string, number>();
  private nameRefs: number[] = [];
  private readonly nameFree: number[] = [];
  /** Name of each live id (the reverse of nameIds): removals and `subscription` read names from the arrays. */
  private nameOf: (string | undefined)[] = [];

  // subscriptions
  private readonly subIndex = new Map<string, number>();
  subId: (string | null)[] = [];
  /** Each subscription's owner (`subscription` reads it back). */
  private subOwner: (string | null)[] = [];
  /**
   * Each subscription's filters in the order given, as a list: its first filter (-1: none) and
   * each filter's next (fNextInSub). Typed arrays: an array of filter indices per subscription
   * cost about 130 bytes a subscription of ten filters, these 44.
   */
  private subFirst = new Int32Array(1024);
  private readonly subFree: number[] = [];
  subTop = 0;

  // filters
  fCap = 1024;
  fTop = 0;
  private readonly fFree: number[] = [];
  fBloom = new Uint32Array(this.fCap);
  fMeta = new Uint32Array(this.fCap);
  fPos = new Uint32Array(this.fCap);
  fRad = new Float32Array(this.fCap);
  fCon = new Uint32Array(this.fCap);
  fSub = new Uint32Array(this.fCap);
  /** The radius as given (host only): the band's float64 test uses it, not fRad's float32. */
  fRad64 = new Float64Array(this.fCap);
  /** The next filter of the same subscription (-1: its last); host only. */
  private fNextInSub = new Int32Array(this.fCap);
  readonly fDirty = new Dirty();
  liveFilters = 0;

  // constraints (runs of exact length, free lists by length)
  cCap = 4096;
  cTop = 0;
  private readonly cFree = new Map<number, number[]>();
  cHead = new Uint32Array(this.cCap);
  cValA = new Uint32Array(this.cCap);
  cValB = new Uint32Array(this.cCap);
  readonly cDirty = new Dirty();
  liveConstraints = 0;

  // constraint strings and automata (word-aligned, power-of-two blocks of words), and the name
  // runs of META_NAMES filters (exact runs): one array, cStr
  sCap = 1024;
  sTop = 0;
  private readonly sFree = new Map<number, number[]>();
  cStr = new Uint32Array(this.sCap);
  readonly sDirty = new Dirty();
  private readonly strings = new Map<string, { off: number; len: number; refs: number }>();
  /** The key of each block of `strings` by its offset: removals and `subscription` read values back by it. */
  private readonly stringAt = new Map<number, string>();
  /** Runs of name ids (META_NAMES filters) in cStr by their sorted ids, and their free runs by exact size. */
  private readonly nameRuns = new Map<string, { off: number; refs: number }>();
  /** Constraint slots whose number is -0 (its key is 0's). */
  private readonly negZero = new Set<number>();
  private readonly nFree = new Map<number, number[]>();

  // position slots
  pCap = 1024;
  pTop = 0;
  private readonly pFree: number[] = [];
  readonly deviceSlot = new Map<string, number>();
  /** Open handles per slot (those with any). */
  private readonly pPins = new Map<number, number>();
  /** Devices whose position is known. */
  knownDevices = 0;
  private pDevice: (string | null)[] = [];
  private pRefs = new Uint32Array(this.pCap); // filters + open handles + (1 if a device with a position)
  pLat = new Float64Array(this.pCap);
  pLon = new Float64Array(this.pCap);
  pKnown = new Uint8Array(this.pCap);
  pos = new Float32Array(4 * this.pCap);
  /** Per slot what float32 leaves of the float64 unit vector in `pos` (x, y, z, 0): the kernels' fine band test. */
  posLo = new Float32Array(4 * this.pCap);
  /**
   * The coordinates `pos` was last made from (what the GPU holds, or will once the next upload
   * runs), for the band's float64 test; earlier values that batches still in flight saw are in
   * the journal (positionAt).
   */
  upLat = new Float64Array(this.pCap);
  upLon = new Float64Array(this.pCap);
  /**
   * Per slot that moved while batches were in flight: (serial, lat, lon, known) records, in serial
   * order: the slot's uploaded position before the upload of batch `serial`, kept while a batch
   * submitted before it is in flight.
   */
  private journal = new Map<number, number[]>();
  /** The slot of each record, in the order they were made (= serial order), from `journalHead` on. */
  private journalOrder: number[] = [];
  private journalHead = 0;
  /** Slots whose position changed since the last upload. */
  moved: number[] = [];
  private pMoved = new Uint8Array(this.pCap);
  /**
   * Slots placed since the CPU mirror last caught up. The mirror (the fast engine that answers
   * small loads, lone events and fallbacks) is updated lazily, so a move costs one slot write here.
   */
  stale: number[] = [];
  pStale = new Uint8Array(this.pCap);
  private readonly encoder = new EventEncoder();
  /** The whole position buffer must be re-sent (growth, rebuild). */
  posAll = true;

  /** Bumped whenever a host array is reallocated: GPU buffers must follow. */
  generation = 0;

  // ---------------------------------------------------------------- names

  private intern(name: string): number {
    let id = this.nameIds.get(name);
    if (id === undefined) {
      id = this.nameFree.length > 0 ? this.nameFree.pop()! : this.nameRefs.length;
      if (id >= MAX_NAMES) throw new Error(`gpu: more than ${MAX_NAMES} distinct attribute and tag names`);
      this.nameIds.set(name, id);
      this.nameOf[id] = name;
      this.nameRefs[id] = 0;
      const tag = tagOfName(name);
      if (tag !== null) this.tagIds.set(tag, id);
    }
    this.nameRefs[id]++;
    return id;
  }

  /** Drops one reference to name id `id`; the id is freed with its last. */
  private release(id: number): void {
    if (--this.nameRefs[id] === 0) {
      const name = this.nameOf[id]!;
      this.nameOf[id] = undefined;
      this.nameIds.delete(name);
      const tag = tagOfName(name);
      if (tag !== null) this.tagIds.delete(tag);
      this.nameFree.push(id);
    }
  }

  nameId(name: string): number | undefined {
    return this.nameIds.get(name);
  }

  // ---------------------------------------------------------------- positions

  private newSlot(device: string | null): number {
    let s: number;
    if (this.pFree.length > 0) s = this.pFree.pop()!;
    else {
      if (this.pTop === this.pCap) {
        const n = this.pCap * 2;
        this.pRefs = grown(this.pRefs, n);
        this.pLat = grown(this.pLat, n);
        this.pLon = grown(this.pLon, n);
        this.pKnown = grown(this.pKnown, n);
        this.pos = grown(this.pos, 4 * n);
        this.posLo = grown(this.posLo, 4 * n);
        this.upLat = grown(this.upLat, n);
        this.upLon = grown(this.upLon, n);
        this.pMoved = grown(this.pMoved, n);
        this.pStale = grown(this.pStale, n);
        this.pCap = n;
        this.posAll = true;
        this.generation++;
      }
      s = this.pTop++;
    }
    this.pDevice[s] = device;
    this.pRefs[s] = 0;
    this.pKnown[s] = 0;
    this.touchSlot(s);
    if (device !== null) this.deviceSlot.set(device, s);
    return s;
  }

  private unref(s: number): void {
    if (--this.pRefs[s] !== 0) return;
    const d = this.pDevice[s];
    if (d !== null) this.deviceSlot.delete(d);
    this.pDevice[s] = null;
    this.pKnown[s] = 0;
    this.touchSlot(s);
    this.pFree.push(s);
  }

  private touchSlot(s: number): void {
    if (this.pMoved[s] === 0) {
      this.pMoved[s] = 1;
      this.moved.push(s);
    }
  }

  /** Slot of a device, created (with no position) if needed. */
  deviceSlotOf(device: string): number {
    return this.deviceSlot.get(device) ?? this.newSlot(device);
  }

  pin(s: number): void {
    this.pRefs[s]++;
    this.pPins.set(s, (this.pPins.get(s) ?? 0) + 1);
  }

  unpin(s: number): void {
    const n = this.pPins.get(s)! - 1;
    if (n === 0) this.pPins.delete(s);
    else this.pPins.set(s, n);
    this.unref(s);
  }

  /** Open handles of slot `s`. */
  pins(s: number): number {
    return this.pPins.get(s) ?? 0;
  }

  /** A location update: the slot's coordinates and a mark; the unit vector is made at upload. */
  place(s: number, lat: number, lon: number): void {
    if (this.pKnown[s] === 0) {
      this.pKnown[s] = 1;
      if (this.pDevice[s] !== null) {
        this.pRefs[s]++; // a device with a known position stays
        this.knownDevices++;
      }
    }
    this.pLat[s] = lat;
    this.pLon[s] = lon;
    if (this.pMoved[s] === 0) {
      this.pMoved[s] = 1;
      this.moved.push(s);
    }
    if (this.pStale[s] === 0) {
      this.pStale[s] = 1;
      this.stale.push(s);
    }
  }

  /** Device of a slot (null for a fixed centre's slot). */
  deviceOf(s: number): string | null {
    return this.pDevice[s];
  }

  /** Hands the stale slots to the caller (the CPU mirror's catch-up) and clears the list. */
  takeStale(): number[] {
    const st = this.stale;
    for (let i = 0; i < st.length; i++) this.pStale[st[i]] = 0;
    this.stale = [];
    return st;
  }

  move(device: string, lat: number, lon: number): void {
    this.place(this.deviceSlotOf(device), lat, lon);
  }

  forget(device: string): void {
    const s = this.deviceSlot.get(device);
    if (s === undefined || this.pKnown[s] === 0) return;
    this.pKnown[s] = 0;
    this.knownDevices--;
    this.touchSlot(s);
    this.unref(s);
  }

  /** Writes the unit vectors of moved slots into `pos`; returns them (and clears the list). */
  takeMoved(): number[] {
    const moved = this.moved;
    // Batches in flight besides the one this upload is for keep seeing the old positions: the
    // journal keeps them for their band tests.
    const keep = this.batchesInFlight > 1;
    const serial = this.submitted;
    for (let i = 0; i < moved.length; i++) {
      const s = moved[i];
      this.pMoved[s] = 0;
      const o = 4 * s;
      if (keep) {
        const rec = this.journal.get(s);
        if (rec === undefined) this.journal.set(s, [serial, this.upLat[s], this.upLon[s], this.pos[o + 3]]);
        else rec.push(serial, this.upLat[s], this.upLon[s], this.pos[o + 3]);
        this.journalOrder.push(s);
      }
      this.upLat[s] = this.pLat[s];
      this.upLon[s] = this.pLon[s];
      if (this.pKnown[s] === 1) {
        const phi = this.pLat[s] * RAD;
        const lam = this.pLon[s] * RAD;
        const c = Math.cos(phi);
        const x = c * Math.cos(lam);
        const y = c * Math.sin(lam);
        const z = Math.sin(phi);
        this.pos[o] = x;
        this.pos[o + 1] = y;
        this.pos[o + 2] = z;
        this.pos[o + 3] = 1;
        // What float32 leaves of the float64 vector (see unitVector, input.ts).
        this.posLo[o] = x - this.pos[o];
        this.posLo[o + 1] = y - this.pos[o + 1];
        this.posLo[o + 2] = z - this.pos[o + 2];
      } else {
        this.pos.fill(0, o, o + 4);
        this.posLo.fill(0, o, o + 4);
      }
    }
    this.moved = [];
    return moved;
  }

  // ---------------------------------------------------------------- constraints and strings

  /** n consecutive constraint slots: a freed run of exactly n, else the end of the array. */
  private allocConstraints(n: number): number {
    if (n === 0) return 0;
    const free = this.cFree.get(n);
    if (free !== undefined && free.length > 0) return free.pop()!;
    const b = n;
    if (this.cTop + b > this.cCap) this.growConstraints(this.cTop + b);
    const start = this.cTop;
    this.cTop += b;
    return start;
  }

  private freeRun(map: Map<number, number[]>, start: number, n: number): void {
    if (n === 0) return;
    let list = map.get(n);
    if (list === undefined) map.set(n, (list = []));
    list.push(start);
  }

  /** Constraint strings are interned: values repeat across filters (CCM: 100 values per name). */
  private allocString(s: string): [number, number] {
    return this.allocBytes(s, () => encoder.encode(s));
  }

  /**
   * Bytes in cStr, word-aligned, interned by `key`: a string's UTF-8 (its own key) or a pattern's
   * automaton (`patternKey`).
   */
  private allocBytes(s: string, make: () => Uint8Array): [number, number] {
    const known = this.strings.get(s);
    if (known !== undefined) {
      known.refs++;
      return [known.off, known.len];
    }
    const bytes = make();
    const b = blockWords(bytes.length);
    const start = this.takeWords(this.sFree, b);
    this.cStr.fill(0, start, start + b);
    new Uint8Array(this.cStr.buffer, this.cStr.byteOffset + start * 4, bytes.length).set(bytes);
    this.sDirty.mark(start, b);
    this.strings.set(s, { off: start, len: bytes.length, refs: 1 });
    this.stringAt.set(start, s);
    return [start, bytes.length];
  }

  /** `b` words of cStr: a freed run of that size from `free`, else the end of the array (grown). */
  private takeWords(free: Map<number, number[]>, b: number): number {
    const list = free.get(b);
    if (list !== undefined && list.length > 0) return list.pop()!;
    while (this.sTop + b > this.sCap) {
      this.cStr = grown(this.cStr, this.sCap * 2);
      this.sCap *= 2;
      this.sDirty.all = true;
      this.generation++;
    }
    const start = this.sTop;
    this.sTop += b;
    return start;
  }

  /**
   * The run of cStr words holding these name ids, given in ascending order (so the same names in
   * any order share one run), interned: an exact-size block, not a power of two as strings take.
   */
  private allocNames(ids: readonly number[]): number {
    if (ids.length === 0) return 0;
    const key = ids.join(',');
    const known = this.nameRuns.get(key);
    if (known !== undefined) {
      known.refs++;
      return known.off;
    }
    const b = ids.length;
    const start = this.takeWords(this.nFree, b);
    for (let k = 0; k < b; k++) this.cStr[start + k] = ids[k];
    this.sDirty.mark(start, b);
    this.nameRuns.set(key, { off: start, refs: 1 });
    return start;
  }

  private releaseNames(ids: readonly number[]): void {
    if (ids.length === 0) return;
    const key = ids.join(',');
    const e = this.nameRuns.get(key)!;
    if (--e.refs > 0) return;
    this.nameRuns.delete(key);
    this.freeRun(this.nFree, e.off, ids.length);
  }

  private releaseString(s: string): void {
    const e = this.strings.get(s)!;
    if (--e.refs > 0) return;
    this.strings.delete(s);
    this.stringAt.delete(e.off);
    this.freeRun(this.sFree, e.off, blockWords(e.len));
  }

  // ---------------------------------------------------------------- filters and subscriptions

  private newFilter(): number {
    if (this.fFree.length > 0) return this.fFree.pop()!;
    // Cont marks a band candidate as its filter index with the top bit set.
    if (this.fTop >= MAX_FILTER_INDEX) throw new Error(`gpu: more than ${MAX_FILTER_INDEX} filters`);
    if (this.fTop === this.fCap) this.growFilters(this.fTop + 1);
    return this.fTop++;
  }

  /**
   * Room for `filters` more filters and `slots` more constraint slots, each array grown once (a
   * bulk load counts them first instead of doubling the arrays as it goes).
   */
  reserve(filters: number, slots: number): void {
    const more = filters - this.fFree.length; // freed filter indices are taken first
    if (this.fTop + more > this.fCap) this.growFilters(Math.min(this.fTop + more, MAX_FILTER_INDEX));
    if (this.cTop + slots > this.cCap) this.growConstraints(this.cTop + slots);
  }

  /** Doubles the filter arrays until `need` fit. */
  private growFilters(need: number): void {
    let n = this.fCap;
    while (n < need) n *= 2;
    this.fBloom = grown(this.fBloom, n);
    this.fMeta = grown(this.fMeta, n);
    this.fPos = grown(this.fPos, n);
    this.fRad = grown(this.fRad, n);
    this.fCon = grown(this.fCon, n);
    this.fSub = grown(this.fSub, n);
    this.fRad64 = grown(this.fRad64, n);
    this.fNextInSub = grown(this.fNextInSub, n);
    this.fCap = n;
    this.fDirty.all = true;
    this.generation++;
  }

  /** Doubles the constraint arrays until `need` slots fit. */
  private growConstraints(need: number): void {
    let m = this.cCap;
    while (m < need) m *= 2;
    this.cHead = grown(this.cHead, m);
    this.cValA = grown(this.cValA, m);
    this.cValB = grown(this.cValB, m);
    this.cCap = m;
    this.cDirty.all = true;
    this.generation++;
  }

  /** A filter normalised, or as given (FilterView: lists and area may be missing, a constraint's type is its value's). */
  private addFilter(si: number, owner: string, flt: FilterView): number {
    const f = this.newFilter();
    const cs = flt.constraints ?? NO_CONSTRAINTS;
    const tags = flt.tags ?? NO_TAGS;
    const area = flt.area ?? null;
    const nc = cs.length;
    const n = nc + tags.length;
    let bloom = 0;
    let meta = n | META_LIVE;
    let c0 = 0;
    let firstName = 0;
    if (n > 0 && namesOnly(flt)) {
      // Names only (tags and `exists`): the names' ids as one interned run of cStr words, 4 bytes
      // a name, shared by every filter that requires the same names (NAMES_ONLY).
      const ids: number[] = [];
      for (const t of tags) ids.push(this.intern(tagName(t)));
      for (const c of cs) ids.push(this.intern(c.name));
      for (const id of ids) bloom |= 1 << bloomBit(id);
      ids.sort((a, b) => a - b);
      // Without an area fPos holds no position slot: it holds the first name instead (NAMES_FIRST).
      if (area === null) firstName = ids.shift()!;
      c0 = this.allocNames(ids);
      meta |= META_NAMES;
    } else {
      c0 = this.allocConstraints(n);
      // Tags after the constraints, each an `exists` on the tag's name (tagName): the event's tags
      // are encoded as attributes of those names, so Cont's walk decides the subset test.
      for (let k = nc; k < n; k++) {
        const ci = c0 + k;
        const id = this.intern(tagName(tags[k - nc]));
        bloom |= 1 << bloomBit(id);
        this.cHead[ci] = (id | (OP_EXISTS << NAME_BITS) | (T_ANY << (NAME_BITS + 4))) >>> 0;
        this.cValA[ci] = 0;
        this.cValB[ci] = 0;
      }
      for (let k = 0; k < nc; k++) {
        const c = cs[k];
        const ci = c0 + k;
        const id = this.intern(c.name);
        bloom |= 1 << bloomBit(id);
        // The value's type is its JavaScript type (validation made `type` say the same).
        const v = c.value;
        const type = c.op === 'exists' ? T_ANY : typeof v === 'string' ? T_STR : typeof v === 'number' ? T_NUM : T_BOOL;
        this.cHead[ci] = (id | (OP_CODE[c.op] << NAME_BITS) | (type << (NAME_BITS + 4))) >>> 0;
        if (type === T_STR && (c.op === 'like' || c.op === 'regex')) {
          // A pattern (only ever normalised: a plain subscription has none): its automaton's words (dfaWords), interned by pattern.
          const p = c as NConstraint;
          const [off, len] = this.allocBytes(patternKey(p), () => dfaBytes(patternDfa(p)));
          this.cValA[ci] = off;
          this.cValB[ci] = len;
        } else if (type === T_STR) {
          const [off, len] = this.allocString(v as string);
          this.cValA[ci] = off;
          this.cValB[ci] = len;
        } else if (type !== T_ANY) {
          numberKey(type === T_NUM ? (v as number) : v ? 1 : 0, KEY, 0);
          this.cValA[ci] = KEY[0];
          this.cValB[ci] = KEY[1];
          if (Object.is(v, -0)) this.negZero.add(ci); // -0 compares as 0, but reads back as given
        } else {
          this.cValA[ci] = 0;
          this.cValB[ci] = 0;
        }
      }
      if (n > 0) this.cDirty.mark(c0, n);
    }
    let slot = 0;
    if (area !== null) {
      meta |= META_AREA;
      const center = area.center ?? null;
      if (center !== null) {
        slot = this.newSlot(null);
        this.place(slot, center.lat, center.lon);
      } else {
        slot = this.deviceSlotOf(owner);
      }
      this.pRefs[slot]++;
    }
    this.fBloom[f] = bloom >>> 0;
    this.fMeta[f] = meta;
    this.fPos[f] = area === null ? firstName : slot;
    this.fRad[f] = area === null ? 0 : area.radiusM;
    this.fRad64[f] = area === null ? 0 : area.radiusM;
    this.fCon[f] = c0;
    this.fSub[f] = si;
    this.fDirty.mark(f);
    this.liveFilters++;
    this.liveConstraints += nc;
    return f;
  }

  /** Takes filter `f` out, reading what it holds from the arrays alone. */
  private removeFilter(f: number): void {
    const meta = this.fMeta[f];
    const n = meta & META_COUNT;
    const c0 = this.fCon[f];
    let nc = 0;
    if (meta & META_NAMES) {
      const ids = this.runNames(f);
      this.releaseNames((meta & META_AREA) !== 0 ? ids : ids.slice(1));
      for (const id of ids) {
        if (tagOfName(this.nameOf[id]!) === null) nc++;
        this.release(id);
      }
    } else {
      for (let ci = c0; ci < c0 + n; ci++) {
        const head = this.cHead[ci];
        const id = head & (MAX_NAMES - 1);
        if (head >>> (NAME_BITS + 4) === T_STR) this.releaseString(this.stringAt.get(this.cValA[ci])!);
        if (tagOfName(this.nameOf[id]!) === null) nc++;
        this.release(id);
        this.negZero.delete(ci);
      }
      this.freeRun(this.cFree, c0, n);
    }
    if (this.fMeta[f] & META_AREA) {
      const s = this.fPos[f];
      if (this.pDevice[s] === null) {
        // A fixed centre: its slot goes with the filter.
        this.pKnown[s] = 0;
        this.touchSlot(s);
      }
      this.unref(s);
    }
    this.fMeta[f] = 0; // not live: Loc skips it
    this.fBloom[f] = 0xffffffff; // and its Bloom word almost never passes, so Loc rarely looks
    this.fDirty.mark(f);
    // A batch in flight may name this filter in a band pair: another filter must not take the
    // index until every batch submitted so far has been read (releaseHeld).
    if (this.batchesInFlight > 0) this.fHeld.push(f, this.submitted);
    else this.fFree.push(f);
    this.liveFilters--;
    this.liveConstraints -= nc;
  }

  /** A subscription in its normalised form, or as given when plainSubscription() accepted it. */
  insert(sub: SubscriptionView): void {
    let si: number;
    if (this.subFree.length > 0) si = this.subFree.pop()!;
    else si = this.subTop++;
    this.subIndex.set(sub.id, si);
    this.subId[si] = sub.id;
    this.subOwner[si] = sub.owner;
    if (si >= this.subFirst.length) this.subFirst = grown(this.subFirst, Math.max(2 * this.subFirst.length, si + 1));
    this.subFirst[si] = -1;
    let last = -1;
    for (const flt of sub.filters) {
      const f = this.addFilter(si, sub.owner, flt);
      this.fNextInSub[f] = -1;
      if (last < 0) this.subFirst[si] = f;
      else this.fNextInSub[last] = f;
      last = f;
    }
  }

  /**
   * `replaced`: the id is inserted again at once (a replace), so batches in flight still list the
   * old version under it (`heldId`); a plain removal is not listed by them.
   */
  remove(id: string, replaced = false): void {
    const si = this.subIndex.get(id)!;
    for (let f = this.subFirst[si]; f >= 0; ) {
      const next = this.fNextInSub[f];
      this.removeFilter(f);
      f = next;
    }
    this.subIndex.delete(id);
    this.subId[si] = null;
    this.subOwner[si] = null;
    if (this.subTag !== null) this.subTag[si] = undefined;
    // A batch in flight may still name this index in its results: another subscription must not
    // take it until every batch submitted so far has been read (releaseHeld).
    if (this.batchesInFlight > 0) {
      this.subHeld.push(si, this.submitted);
      if (replaced) this.replacedIds.set(si, id);
    } else this.subFree.push(si);
  }

  /** Subscriptions held. */
  get subscriptions(): number {
    return this.subIndex.size;
  }

  has(id: string): boolean {
    return this.subIndex.has(id);
  }

  /**
   * A held subscription in its normalised form, read back from the arrays (the engine without a
   * CPU mirror keeps no other copy): constraints in the order given, tags sorted, values exact.
   */
  subscription(id: string): NSubscription | undefined {
    const si = this.subIndex.get(id);
    if (si === undefined) return undefined;
    const filters: NFilter[] = [];
    for (let f = this.subFirst[si]; f >= 0; f = this.fNextInSub[f]) filters.push(this.filterOf(f));
    return { id, owner: this.subOwner[si]!, filters };
  }

  private filterOf(f: number): NFilter {
    const meta = this.fMeta[f];
    const constraints: NConstraint[] = [];
    const tags: string[] = [];
    if (meta & META_NAMES) {
      // Its tags and at most one `exists` (namesOnly).
      for (const id of this.runNames(f)) {
        const name = this.nameOf[id]!;
        const tag = tagOfName(name);
        if (tag !== null) tags.push(tag);
        else constraints.push({ name, op: 'exists', type: null, value: null });
      }
      tags.sort(); // as validation sorts them
    } else {
      const c0 = this.fCon[f];
      for (let ci = c0, end = c0 + (meta & META_COUNT); ci < end; ci++) {
        const head = this.cHead[ci];
        const name = this.nameOf[head & (MAX_NAMES - 1)]!;
        const tag = tagOfName(name);
        if (tag !== null) {
          tags.push(tag);
          continue;
        }
        const op = OP_NAME[(head >>> NAME_BITS) & 15];
        const type = head >>> (NAME_BITS + 4);
        if (type === T_ANY) constraints.push({ name, op, type: null, value: null });
        else if (type === T_STR) {
          const key = this.stringAt.get(this.cValA[ci])!;
          // A pattern's key is patternKey's: the source follows its first NUL.
          const value = op === 'like' || op === 'regex' ? key.slice(key.indexOf('\u0000') + 1) : key;
          constraints.push({ name, op, type: 'string', value });
        } else {
          const v = this.negZero.has(ci) ? -0 : keyNumber(this.cValA[ci], this.cValB[ci]);
          constraints.push(type === T_NUM ? { name, op, type: 'number', value: v } : { name, op, type: 'bool', value: v === 1 });
        }
      }
    }
    let area: NArea | null = null;
    if (meta & META_AREA) {
      const slot = this.fPos[f];
      area = { radiusM: this.fRad64[f], center: this.pDevice[slot] === null ? { lat: this.pLat[slot], lon: this.pLon[slot] } : null };
    }
    return { constraints, area, tags };
  }

  /** The name ids of a META_NAMES filter: the first from fPos when it has no area, then its run in cStr. */
  private runNames(f: number): number[] {
    const meta = this.fMeta[f];
    const n = meta & META_COUNT;
    const ids: number[] = [];
    const c0 = this.fCon[f];
    if (meta & META_AREA) for (let k = 0; k < n; k++) ids.push(this.cStr[c0 + k]);
    else {
      ids.push(this.fPos[f]);
      for (let k = 0; k < n - 1; k++) ids.push(this.cStr[c0 + k]);
    }
    return ids;
  }

  /** The serials of the batches not read yet, on whichever device (a lost one's may still settle after a new one runs). */
  readonly inFlightSerials = new Set<number>();
  /** Batches submitted so far (serials), and how many of them are not read yet: set by the GPU side. */
  submitted = 0;
  batchesInFlight = 0;
  /** Removed subscription and filter indices held back: (index, last serial submitted at removal) pairs. */
  private subHeld: number[] = [];
  private fHeld: number[] = [];
  /** Held subscription indices of versions replaced while batches were in flight: their id. */
  private readonly replacedIds = new Map<number, string>();

  /** The id a batch in flight lists for subscription index `si`: its live id, or the id of a version replaced since. */
  heldId(si: number): string | null {
    return this.subId[si] ?? this.replacedIds.get(si) ?? null;
  }

  /** Tags by subscription index (Matcher.tag); null until the first. Cleared when the index's subscription leaves. */
  private subTag: (number | undefined)[] | null = null;

  tag(key: string, tag: number): boolean {
    const si = this.subIndex.get(key);
    if (si === undefined) return false;
    (this.subTag ??= [])[si] = tag;
    return true;
  }

  /** What a batch lists for subscription index `si`: its tag where it has one and `tags`, else heldId. */
  listed(si: number, tags: boolean): Listed | null {
    return tags ? (this.subTag?.[si] ?? this.heldId(si)) : this.heldId(si);
  }

  /**
   * Frees the held indices that no batch still in flight can name (all with serial >= oldest),
   * and drops the journal's records that only older batches needed.
   */
  releaseHeld(oldestInFlight: number): void {
    const before = this.subFree.length;
    release(this.subHeld, this.subFree, oldestInFlight);
    for (let k = before; k < this.subFree.length; k++) this.replacedIds.delete(this.subFree[k]);
    release(this.fHeld, this.fFree, oldestInFlight);
    const order = this.journalOrder;
    if (order.length === 0) return;
    if (oldestInFlight === Infinity) {
      this.journal.clear();
      this.journalOrder = [];
      this.journalHead = 0;
      return;
    }
    // Records were made in serial order: the oldest first, each its slot's first record. Those up
    // to the oldest batch in flight serve no batch.
    let h = this.journalHead;
    for (; h < order.length; h++) {
      const rec = this.journal.get(order[h])!;
      if (rec[0] > oldestInFlight) break;
      if (rec.length === 4) this.journal.delete(order[h]);
      else rec.splice(0, 4);
    }
    if (h === order.length) {
      this.journalOrder = [];
      h = 0;
    } else if (h > 4096 && 2 * h > order.length) {
      this.journalOrder = order.slice(h);
      h = 0;
    }
    this.journalHead = h;
  }

  /**
   * A slot's position as batch `serial` saw it (uploaded before it was submitted): the first
   * journal record made after it, else the uploaded one. Null: unknown then.
   */
  positionAt(s: number, serial: number): { lat: number; lon: number } | null {
    const rec = this.journal.size === 0 ? undefined : this.journal.get(s);
    if (rec !== undefined) {
      for (let k = 0; k < rec.length; k += 4) {
        if (rec[k] > serial) return rec[k + 3] === 1 ? { lat: rec[k + 1], lon: rec[k + 2] } : null;
      }
    }
    return this.pos[4 * s + 3] === 1 ? { lat: this.upLat[s], lon: this.upLon[s] } : null;
  }

  /** Words of one event's subscription bit vector. */
  get subWords(): number {
    return Math.max(1, Math.ceil(this.subTop / 32));
  }

  /**
   * Bytes of the GPU's state buffers in use: filters, constraint slots, cStr (strings, automata,
   * name runs) and position slots; buffer headroom and per-batch scratch not counted.
   */
  get stateBytes(): number {
    return FILTER_BYTES * this.fTop + CONSTRAINT_BYTES * this.cTop + 4 * this.sTop + POSITION_BYTES * this.pTop;
  }

  /** Host memory of the mirror, bytes. */
  get hostBytes(): number {
    return (
      this.fBloom.byteLength * 7 + this.fRad64.byteLength + this.subFirst.byteLength + this.cHead.byteLength * 3 + this.cStr.byteLength +
      this.pos.byteLength + this.posLo.byteLength + this.pLat.byteLength * 4 + this.pRefs.byteLength + this.pKnown.byteLength * 2 + 40 * (this.journalOrder.length - this.journalHead) +
      // Arrays of references and maps (V8: about 8 bytes a slot, 60 an entry).
      8 * (this.subId.length + this.subOwner.length + this.pDevice.length + this.nameOf.length) + 60 * (this.subIndex.size + this.deviceSlot.size) +
      // Interned names, strings and name runs: their entries and keys.
      (60 + 24) * (this.nameIds.size + this.strings.size + this.nameRuns.size) + 60 * (this.stringAt.size + this.negZero.size)
    );
  }

  // ---------------------------------------------------------------- events

  /**
   * The batch input of match.wgsl (input.ts). Attributes whose name no constraint uses are left
   * out. The result is a view of scratch memory: valid until the next call.
   */
  encodeEvents(events: readonly NEvent[], grid = false): Uint32Array {
    return this.encoder.encode(events, this.nameIds, this.tagIds, grid);
  }

  /** The batch input of a packed batch (packed.ts) under this layout's name ids. */
  encodePacked(p: PackedInput): Uint32Array {
    return this.encoder.encodePacked(p, this.nameIds, this.tagIds);
  }
}

const KEY64 = new Float64Array(1);
const KEY32 = new Uint32Array(KEY64.buffer);
/** The number numberKey(v) made the key (hi, lo) of. */
export function keyNumber(hi: number, lo: number): number {
  if (hi & 0x80000000) {
    KEY32[1] = (hi & 0x7fffffff) >>> 0;
    KEY32[0] = lo;
  } else {
    KEY32[1] = ~hi >>> 0;
    KEY32[0] = ~lo >>> 0;
  }
  return KEY64[0];
}

/** Moves the (index, serial) pairs of `held` whose serial is below `oldest` to `free`. */
function release(held: number[], free: number[], oldest: number): void {
  if (held.length === 0) return;
  let w = 0;
  for (let i = 0; i < held.length; i += 2) {
    if (held[i + 1] < oldest) free.push(held[i]);
    else {
      held[w++] = held[i];
      held[w++] = held[i + 1];
    }
  }
  held.length = w;
}

/**
 * Words of the cStr block that holds `bytes`: a power of two, so that a freed block serves any
 * later string or automaton of up to its size class (free lists are per block size).
 */
function blockWords(bytes: number): number {
  const w = Math.max(1, Math.ceil(bytes / 4));
  return 2 ** Math.ceil(Math.log2(w));
}

/**
 * The key a pattern's automaton is interned by among the constraint strings: it begins with a
 * lone surrogate, which no string value can hold (V5), so it never meets a string's key.
 */
function patternKey(c: NConstraint): string {
  return `\ud800${c.op}\u0000${c.value as string}`;
}

/**
 * A pattern's automaton as Cont reads it (match.wgsl, dfaMatch), u32 words: a header (states,
 * classes, start state, dead state + 1 or 0), the class bounds (classes - 1 code points), the
 * accepting states as a bit set, then the next-state table, one byte per (state, class).
 */
export function dfaWords(d: Dfa): Uint32Array {
  const S = d.states;
  const C = d.classes;
  const nb = C - 1;
  const accWords = Math.ceil(S / 32);
  const out = new Uint32Array(1 + nb + accWords + Math.ceil((S * C) / 4));
  out[0] = (S | (C << 8) | (d.start << 16) | ((d.dead < 0 ? 0 : d.dead + 1) << 24)) >>> 0;
  out.set(d.bounds, 1);
  for (let s = 0; s < S; s++) if (d.accept[s] === 1) out[1 + nb + (s >>> 5)] |= 1 << (s & 31);
  new Uint8Array(out.buffer, 4 * (1 + nb + accWords), S * C).set(d.next.subarray(0, S * C));
  return out;
}

function dfaBytes(d: Dfa): Uint8Array {
  const w = dfaWords(d);
  return new Uint8Array(w.buffer, w.byteOffset, w.byteLength);
}
