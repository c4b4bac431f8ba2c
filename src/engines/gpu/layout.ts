/**
 * The GPU engine's state in host memory, laid out exactly as the GPU buffers (src/engines/gpu/match.wgsl):
 * struct-of-arrays with 4-byte elements (CLCB §4.2: FPos, SqDist, BF, FCount; CCM's Constraints).
 * This host mirror is what uploads read from and what rebuilds the GPU after a device loss.
 *
 * Per filter (24 B): fBloom, fMeta (count | area | live), fPos (position slot), fRad, fCon (first
 * constraint), fSub. Per constraint (12 B): cHead (name | op | type), cValA, cValB. Per position
 * slot (16 B): unit vector + known flag. A filter with 4 constraints costs 72 B plus its share of
 * the owner's position and of the strings.
 */
import type { NEvent, NFilter, NSubscription } from '../../model/limits.js';
import type { Op } from '../../model/types.js';

export const FILTER_BYTES = 24;
export const CONSTRAINT_BYTES = 12;
export const POSITION_BYTES = 16;
/** Words per event header (EventHdr) and per attribute (Attr) in match.wgsl. */
export const EVENT_WORDS = 8;
/** Parameter words at the head of the batch input. */
export const PARAM_WORDS = 16;
/**
 * Grid header in the batch input: min x y z (f32), 1/cell size (f32), nx ny nz, max event radius
 * (f32), then the grid's frame: rows u, v, w (9 f32).
 */
export const GRID_HEADER_WORDS = 17;
export const ATTR_WORDS = 4;

export const META_AREA = 0x100;
export const META_LIVE = 0x200;
const NAME_BITS = 20;
const MAX_NAMES = 1 << NAME_BITS;

const OP_CODE: Record<Op, number> = { eq: 0, ne: 1, lt: 2, le: 3, gt: 4, ge: 5, prefix: 6, suffix: 7, contains: 8, exists: 9 };
export const T_NUM = 0;
export const T_STR = 1;
export const T_BOOL = 2;
export const T_ANY = 3;

const RAD = Math.PI / 180;

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

// Order-preserving 64-bit keys: the IEEE-754 bits with the sign flipped for positives and all
// bits flipped for negatives compare as unsigned integers exactly as the doubles compare.
const f64 = new Float64Array(1);
const w32 = new Uint32Array(f64.buffer);
export function numberKey(v: number, out: Uint32Array, o: number): void {
  f64[0] = v === 0 ? 0 : v; // -0 == 0
  let lo = w32[0];
  let hi = w32[1];
  if (hi & 0x80000000) {
    hi = ~hi >>> 0;
    lo = ~lo >>> 0;
  } else {
    hi = (hi | 0x80000000) >>> 0;
  }
  out[o] = hi;
  out[o + 1] = lo;
}

/** 32-bit Bloom bit of an interned name (CLCB §4.2: 32 bits suffice for a pre-filter). */
export function bloomBit(id: number): number {
  return Math.imul(id + 1, 0x9e3779b1) >>> 27;
}

/**
 * An orthonormal frame (rows u, v, w; 9 numbers) with w along (x, y, z), the sum of a batch's unit
 * vectors; the identity when the sum is too short to point anywhere (a batch spread over the globe).
 */
export function gridFrame(x: number, y: number, z: number): number[] {
  const len = Math.hypot(x, y, z);
  if (!(len > 1e-9)) return [1, 0, 0, 0, 1, 0, 0, 0, 1];
  const w = [x / len, y / len, z / len];
  // u: perpendicular to w and to the axis w is least aligned with.
  const axis = Math.abs(w[2]) < 0.9 ? [0, 0, 1] : [1, 0, 0];
  let u = [axis[1] * w[2] - axis[2] * w[1], axis[2] * w[0] - axis[0] * w[2], axis[0] * w[1] - axis[1] * w[0]];
  const ul = Math.hypot(u[0], u[1], u[2]);
  u = [u[0] / ul, u[1] / ul, u[2] / ul];
  const v = [w[1] * u[2] - w[2] * u[1], w[2] * u[0] - w[0] * u[2], w[0] * u[1] - w[1] * u[0]];
  return [...u, ...v, ...w];
}

/**
 * Writes the UTF-8 of `v` into `bytes` from `at`; returns the end. Strings reaching here were
 * validated well-formed; a lone surrogate would become U+FFFD, as Buffer.write does.
 */
export function utf8Into(bytes: Uint8Array, at: number, v: string): number {
  const n = v.length;
  for (let c = 0; c < n; c++) {
    let code = v.charCodeAt(c);
    if (code < 0x80) {
      bytes[at++] = code;
    } else if (code < 0x800) {
      bytes[at++] = 0xc0 | (code >> 6);
      bytes[at++] = 0x80 | (code & 0x3f);
    } else if (code >= 0xd800 && code <= 0xdfff) {
      const lo = c + 1 < n ? v.charCodeAt(c + 1) : 0;
      if (code <= 0xdbff && lo >= 0xdc00 && lo <= 0xdfff) {
        code = 0x10000 + ((code - 0xd800) << 10) + (lo - 0xdc00);
        c++;
        bytes[at++] = 0xf0 | (code >> 18);
        bytes[at++] = 0x80 | ((code >> 12) & 0x3f);
        bytes[at++] = 0x80 | ((code >> 6) & 0x3f);
        bytes[at++] = 0x80 | (code & 0x3f);
      } else {
        bytes[at++] = 0xef;
        bytes[at++] = 0xbf;
        bytes[at++] = 0xbd;
      }
    } else {
      bytes[at++] = 0xe0 | (code >> 12);
      bytes[at++] = 0x80 | ((code >> 6) & 0x3f);
      bytes[at++] = 0x80 | (code & 0x3f);
    }
  }
  return at;
}

function grown<T extends Uint32Array | Float32Array | Float64Array | Uint8Array>(a: T, n: number): T {
  const b = new (a.constructor as new (n: number) => T)(n);
  b.set(a);
  return b;
}

const encoder = new TextEncoder();
const KEY = new Uint32Array(2);

export class GpuLayout {
  // names
  private readonly nameIds = new Map<string, number>();
  private nameRefs: number[] = [];
  private readonly nameFree: number[] = [];

  // subscriptions
  private readonly subIndex = new Map<string, number>();
  subId: (string | null)[] = [];
  private subFilters: number[][] = [];
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
  readonly fDirty = new Dirty();
  liveFilters = 0;

  // constraints (power-of-two blocks with free lists)
  cCap = 4096;
  cTop = 0;
  private readonly cFree = new Map<number, number[]>();
  cHead = new Uint32Array(this.cCap);
  cValA = new Uint32Array(this.cCap);
  cValB = new Uint32Array(this.cCap);
  readonly cDirty = new Dirty();
  liveConstraints = 0;

  // constraint strings (word-aligned, power-of-two blocks of words)
  sCap = 1024;
  sTop = 0;
  private readonly sFree = new Map<number, number[]>();
  cStr = new Uint32Array(this.sCap);
  readonly sDirty = new Dirty();
  private readonly strings = new Map<string, { off: number; len: number; refs: number }>();

  // position slots
  pCap = 1024;
  pTop = 0;
  private readonly pFree: number[] = [];
  readonly deviceSlot = new Map<string, number>();
  private pDevice: (string | null)[] = [];
  private pRefs = new Uint32Array(this.pCap); // filters + open handles + (1 if a device with a position)
  pLat = new Float64Array(this.pCap);
  pLon = new Float64Array(this.pCap);
  pKnown = new Uint8Array(this.pCap);
  pos = new Float32Array(4 * this.pCap);
  /** Slots whose position changed since the last upload. */
  moved: number[] = [];
  private pMoved = new Uint8Array(this.pCap);
  /**
   * Slots placed since the CPU mirror last caught up. The mirror (the fast engine that answers
   * small loads, lone events and fallbacks) is updated lazily, so a move costs one slot write here.
   */
  stale: number[] = [];
  pStale = new Uint8Array(this.pCap);
  /** The batch input's memory, reused by encodeEvents (its result is valid until the next call). */
  private scratchInput = new ArrayBuffer(4096);
  /** Name ids of a batch's attributes, reused across batches by encodeEvents. */
  private scratchIds = new Int32Array(1024);
  /** The whole position buffer must be re-sent (growth, rebuild). */
  posAll = true;

  /** Bumped whenever a host array is reallocated: GPU buffers must follow. */
  generation = 0;

  // ---------------------------------------------------------------- names

  private intern(name: string): number {
    let id = this.nameIds.get(name);
    if (id === undefined) {
      id = this.nameFree.length > 0 ? this.nameFree.pop()! : this.nameRefs.length;
      if (id >= MAX_NAMES) throw new Error(`gpu: more than ${MAX_NAMES} distinct constraint names`);
      this.nameIds.set(name, id);
      this.nameRefs[id] = 0;
    }
    this.nameRefs[id]++;
    return id;
  }

  private release(name: string): void {
    const id = this.nameIds.get(name)!;
    if (--this.nameRefs[id] === 0) {
      this.nameIds.delete(name);
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
  }

  unpin(s: number): void {
    this.unref(s);
  }

  /** A location update: the slot's coordinates and a mark; the unit vector is made at upload. */
  place(s: number, lat: number, lon: number): void {
    if (this.pKnown[s] === 0) {
      this.pKnown[s] = 1;
      if (this.pDevice[s] !== null) this.pRefs[s]++; // a device with a known position stays
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
    this.touchSlot(s);
    this.unref(s);
  }

  /** Writes the unit vectors of moved slots into `pos`; returns them (and clears the list). */
  takeMoved(): number[] {
    const moved = this.moved;
    for (let i = 0; i < moved.length; i++) {
      const s = moved[i];
      this.pMoved[s] = 0;
      const o = 4 * s;
      if (this.pKnown[s] === 1) {
        const phi = this.pLat[s] * RAD;
        const lam = this.pLon[s] * RAD;
        const c = Math.cos(phi);
        this.pos[o] = c * Math.cos(lam);
        this.pos[o + 1] = c * Math.sin(lam);
        this.pos[o + 2] = Math.sin(phi);
        this.pos[o + 3] = 1;
      } else {
        this.pos[o] = 0;
        this.pos[o + 1] = 0;
        this.pos[o + 2] = 0;
        this.pos[o + 3] = 0;
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
    while (this.cTop + b > this.cCap) {
      const m = this.cCap * 2;
      this.cHead = grown(this.cHead, m);
      this.cValA = grown(this.cValA, m);
      this.cValB = grown(this.cValB, m);
      this.cCap = m;
      this.cDirty.all = true;
      this.generation++;
    }
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
    const known = this.strings.get(s);
    if (known !== undefined) {
      known.refs++;
      return [known.off, known.len];
    }
    const bytes = encoder.encode(s);
    const b = Math.max(1, Math.ceil(bytes.length / 4));
    let start: number;
    const free = this.sFree.get(b);
    if (free !== undefined && free.length > 0) start = free.pop()!;
    else {
      while (this.sTop + b > this.sCap) {
        this.cStr = grown(this.cStr, this.sCap * 2);
        this.sCap *= 2;
        this.sDirty.all = true;
        this.generation++;
      }
      start = this.sTop;
      this.sTop += b;
    }
    this.cStr.fill(0, start, start + b);
    new Uint8Array(this.cStr.buffer, this.cStr.byteOffset + start * 4, bytes.length).set(bytes);
    this.sDirty.mark(start, b);
    this.strings.set(s, { off: start, len: bytes.length, refs: 1 });
    return [start, bytes.length];
  }

  private releaseString(s: string): void {
    const e = this.strings.get(s)!;
    if (--e.refs > 0) return;
    this.strings.delete(s);
    this.freeRun(this.sFree, e.off, Math.max(1, Math.ceil(e.len / 4)));
  }

  // ---------------------------------------------------------------- filters and subscriptions

  private newFilter(): number {
    if (this.fFree.length > 0) return this.fFree.pop()!;
    if (this.fTop === this.fCap) {
      const n = this.fCap * 2;
      this.fBloom = grown(this.fBloom, n);
      this.fMeta = grown(this.fMeta, n);
      this.fPos = grown(this.fPos, n);
      this.fRad = grown(this.fRad, n);
      this.fCon = grown(this.fCon, n);
      this.fSub = grown(this.fSub, n);
      this.fCap = n;
      this.fDirty.all = true;
      this.generation++;
    }
    return this.fTop++;
  }

  private addFilter(si: number, owner: string, flt: NFilter): number {
    const f = this.newFilter();
    const n = flt.constraints.length;
    const c0 = this.allocConstraints(n);
    let bloom = 0;
    for (let k = 0; k < n; k++) {
      const c = flt.constraints[k];
      const ci = c0 + k;
      const id = this.intern(c.name);
      bloom |= 1 << bloomBit(id);
      const type = c.type === null ? T_ANY : c.type === 'string' ? T_STR : c.type === 'number' ? T_NUM : T_BOOL;
      this.cHead[ci] = id | (OP_CODE[c.op] << NAME_BITS) | (type << 24);
      if (type === T_STR) {
        const [off, len] = this.allocString(c.value as string);
        this.cValA[ci] = off;
        this.cValB[ci] = len;
      } else if (type !== T_ANY) {
        numberKey(type === T_NUM ? (c.value as number) : c.value ? 1 : 0, KEY, 0);
        this.cValA[ci] = KEY[0];
        this.cValB[ci] = KEY[1];
      } else {
        this.cValA[ci] = 0;
        this.cValB[ci] = 0;
      }
    }
    if (n > 0) this.cDirty.mark(c0, n);
    let meta = n | META_LIVE;
    let slot = 0;
    if (flt.area !== null) {
      meta |= META_AREA;
      if (flt.area.center !== null) {
        slot = this.newSlot(null);
        this.place(slot, flt.area.center.lat, flt.area.center.lon);
      } else {
        slot = this.deviceSlotOf(owner);
      }
      this.pRefs[slot]++;
    }
    this.fBloom[f] = bloom >>> 0;
    this.fMeta[f] = meta;
    this.fPos[f] = slot;
    this.fRad[f] = flt.area === null ? 0 : flt.area.radiusM;
    this.fCon[f] = c0;
    this.fSub[f] = si;
    this.fDirty.mark(f);
    this.liveFilters++;
    this.liveConstraints += n;
    return f;
  }

  private removeFilter(f: number, flt: NFilter): void {
    const n = this.fMeta[f] & 0xff;
    const c0 = this.fCon[f];
    for (let k = 0; k < n; k++) {
      const c = flt.constraints[k];
      if (c.type === 'string') this.releaseString(c.value as string);
      this.release(c.name);
    }
    this.freeRun(this.cFree, c0, n);
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
    this.fFree.push(f);
    this.liveFilters--;
    this.liveConstraints -= n;
  }

  insert(sub: NSubscription): void {
    let si: number;
    if (this.subFree.length > 0) si = this.subFree.pop()!;
    else si = this.subTop++;
    this.subIndex.set(sub.id, si);
    this.subId[si] = sub.id;
    this.subFilters[si] = sub.filters.map((f) => this.addFilter(si, sub.owner, f));
  }

  remove(sub: NSubscription): void {
    const si = this.subIndex.get(sub.id)!;
    const fs = this.subFilters[si];
    for (let i = 0; i < fs.length; i++) this.removeFilter(fs[i], sub.filters[i]);
    this.subIndex.delete(sub.id);
    this.subId[si] = null;
    this.subFilters[si] = [];
    // A batch in flight may still name this index in its results: another subscription must not
    // take it until every batch submitted so far has been read (releaseHeld).
    if (this.batchesInFlight > 0) this.subHeld.push(si, this.submitted);
    else this.subFree.push(si);
  }

  /** Batches submitted so far (serials), and how many of them are not read yet: set by the GPU side. */
  submitted = 0;
  batchesInFlight = 0;
  /** Removed subscription indices held back: (index, last serial submitted at removal) pairs. */
  private subHeld: number[] = [];

  /** Frees the held indices that no batch still in flight can name (all with serial >= oldest). */
  releaseHeld(oldestInFlight: number): void {
    const h = this.subHeld;
    if (h.length === 0) return;
    let w = 0;
    for (let i = 0; i < h.length; i += 2) {
      if (h[i + 1] < oldestInFlight) this.subFree.push(h[i]);
      else {
        h[w++] = h[i];
        h[w++] = h[i + 1];
      }
    }
    h.length = w;
  }

  /** Words of one event's subscription bit vector. */
  get subWords(): number {
    return Math.max(1, Math.ceil(this.subTop / 32));
  }

  /** Host memory of the mirror, bytes. */
  get hostBytes(): number {
    return (
      this.fBloom.byteLength * 6 + this.cHead.byteLength * 3 + this.cStr.byteLength +
      this.pos.byteLength + this.pLat.byteLength * 2 + this.pRefs.byteLength + this.pKnown.byteLength * 2
    );
  }

  // ---------------------------------------------------------------- events

  /**
   * Encodes a batch of events into the one input buffer of match.wgsl: 16 parameter words (the
   * caller fills words 0-7), event headers, attributes and the UTF-8 of string attributes.
   * Attributes whose name no constraint uses are left out.
   */
  /**
   * The batch input (layout in match.wgsl). With `grid`, the events are also binned into a grid of
   * cubic cells over their unit vectors' bounding box (cell start offsets + event indices, a
   * counting sort), so Loc scans only the cells within a filter's reach instead of every event.
   * Unit vectors need no antimeridian or pole cases.
   */
  encodeEvents(events: readonly NEvent[], grid = false): Uint32Array {
    // The result is a view of scratch memory: valid until the next call.
    // One name lookup per attribute: the first pass keeps the ids (-1: a name no filter uses,
    // so no constraint can test it and it is left out).
    let total = 0;
    for (let k = 0; k < events.length; k++) total += events[k].names.length;
    if (this.scratchIds.length < total) this.scratchIds = new Int32Array(Math.max(total, 2 * this.scratchIds.length));
    const ids = this.scratchIds;
    let nAttr = 0;
    let strWords = 0;
    let j = 0;
    for (let k = 0; k < events.length; k++) {
      const e = events[k];
      for (let i = 0; i < e.names.length; i++, j++) {
        const id = this.nameIds.get(e.names[i]);
        if (id === undefined) {
          ids[j] = -1;
          continue;
        }
        ids[j] = id;
        nAttr++;
        const v = e.values[i];
        if (typeof v === 'string') strWords += Math.ceil((v.length * 3) / 4) + 1;
      }
    }
    const evOff = PARAM_WORDS;
    const attrOff = evOff + events.length * EVENT_WORDS;
    const strOff = attrOff + nAttr * ATTR_WORDS;
    const gridOff = strOff + strWords + 1;
    const gridWords = grid ? GRID_HEADER_WORDS + 4 * events.length + 2 + events.length : 0;
    const words = gridOff + gridWords;
    if (this.scratchInput.byteLength < 4 * words) this.scratchInput = new ArrayBuffer(Math.max(4 * words, 2 * this.scratchInput.byteLength));
    const inp = new Uint32Array(this.scratchInput, 0, words);
    inp.fill(0);
    const inpF = new Float32Array(this.scratchInput, 0, words);
    const strBytes = new Uint8Array(this.scratchInput, strOff * 4, strWords * 4);
    inp[8] = evOff;
    inp[9] = attrOff;
    inp[10] = strOff;
    let a = 0;
    let sw = 0;
    j = 0;
    for (let k = 0; k < events.length; k++) {
      const e = events[k];
      const o = evOff + k * EVENT_WORDS;
      const phi = e.lat * RAD;
      const lam = e.lon * RAD;
      const c = Math.cos(phi);
      inpF[o] = c * Math.cos(lam);
      inpF[o + 1] = c * Math.sin(lam);
      inpF[o + 2] = Math.sin(phi);
      inpF[o + 3] = e.radiusM;
      let bloom = 0;
      const start = a;
      for (let i = 0; i < e.names.length; i++, j++) {
        const id = ids[j];
        if (id < 0) continue;
        bloom |= 1 << bloomBit(id);
        const ao = attrOff + a * ATTR_WORDS;
        inp[ao] = id;
        const v = e.values[i];
        if (typeof v === 'string') {
          // UTF-8 straight into the buffer, in JS: a native encode per short string costs more
          // than the string (no view or result object per string either).
          const at = sw * 4;
          const written = utf8Into(strBytes, at, v) - at;
          inp[ao + 1] = T_STR;
          inp[ao + 2] = sw;
          inp[ao + 3] = written;
          sw += Math.ceil(written / 4);
        } else {
          inp[ao + 1] = typeof v === 'number' ? T_NUM : T_BOOL;
          numberKey(typeof v === 'number' ? v : v ? 1 : 0, inp, ao + 2);
        }
        a++;
      }
      inp[o + 4] = bloom >>> 0;
      inp[o + 5] = start;
      inp[o + 6] = a - start;
      inp[12] |= bloom;
    }
    inp[12] >>>= 0;
    if (grid && events.length > 0) this.encodeGrid(inp, inpF, evOff, events.length, gridOff);
    return inp;
  }

  /**
   * Bins the events into cells (see encodeEvents); writes the grid at `off` and its offset to word
   * 11. Cells are cubes in a frame turned so that w points at the batch's centre: a batch within a
   * city is a flat patch of the sphere, so it lies in the u-v plane one cell deep and a filter's
   * reach spans a few rows of cells instead of a box of them. A rotation keeps distances, so the
   * kernel's reach box in that frame misses no event.
   */
  private encodeGrid(inp: Uint32Array, inpF: Float32Array, evOff: number, n: number, off: number): void {
    let sx = 0;
    let sy = 0;
    let sz = 0;
    let maxR = 0;
    for (let k = 0; k < n; k++) {
      const o = evOff + k * EVENT_WORDS;
      sx += inpF[o];
      sy += inpF[o + 1];
      sz += inpF[o + 2];
      if (inpF[o + 3] > maxR) maxR = inpF[o + 3];
    }
    const frame = gridFrame(sx, sy, sz);
    const gf = new Float32Array(inp.buffer, off * 4, GRID_HEADER_WORDS);
    for (let i = 0; i < 9; i++) gf[8 + i] = frame[i];
    const f = gf.subarray(8, 17); // as the kernel reads it (float32)
    const rot = new Float64Array(3 * n);
    const lo = [Infinity, Infinity, Infinity];
    const hi = [-Infinity, -Infinity, -Infinity];
    for (let k = 0; k < n; k++) {
      const o = evOff + k * EVENT_WORDS;
      const x = inpF[o];
      const y = inpF[o + 1];
      const z = inpF[o + 2];
      for (let a = 0; a < 3; a++) {
        const v = f[3 * a] * x + f[3 * a + 1] * y + f[3 * a + 2] * z;
        rot[3 * k + a] = v;
        if (v < lo[a]) lo[a] = v;
        if (v > hi[a]) hi[a] = v;
      }
    }
    // About 2 cells per event (at most 4n): cubic cells sized on the largest extent, so a city's
    // batch gets a 2-D grid and a world-wide batch a coarse 3-D one.
    const ext = [hi[0] - lo[0], hi[1] - lo[1], hi[2] - lo[2]];
    const target = 2 * n;
    let size = Math.max(ext[0], ext[1], ext[2]) / Math.max(1, Math.ceil(Math.sqrt(target)));
    if (!(size > 0)) size = 1; // every event at one point: one cell
    let dims = [1, 1, 1];
    for (;;) {
      dims = ext.map((e) => Math.max(1, Math.ceil(e / size)));
      if (dims[0] * dims[1] * dims[2] <= 4 * n) break;
      size *= 1.5;
    }
    const inv = Math.fround(1 / size);
    const cells = dims[0] * dims[1] * dims[2];
    gf[0] = lo[0];
    gf[1] = lo[1];
    gf[2] = lo[2];
    gf[3] = inv;
    inp[off + 4] = dims[0];
    inp[off + 5] = dims[1];
    inp[off + 6] = dims[2];
    gf[7] = maxR;
    // Counting sort of events by cell (x fastest, so a row of cells is one index range).
    const startAt = off + GRID_HEADER_WORDS;
    const idxAt = startAt + cells + 1;
    const cellOf = new Uint32Array(n);
    const cell = (v: number, a: number) => Math.min(dims[a] - 1, Math.max(0, Math.floor((v - Math.fround(lo[a])) * inv)));
    for (let k = 0; k < n; k++) {
      const c = cell(rot[3 * k], 0) + dims[0] * (cell(rot[3 * k + 1], 1) + dims[1] * cell(rot[3 * k + 2], 2));
      cellOf[k] = c;
      inp[startAt + c + 1]++;
    }
    for (let c = 0; c < cells; c++) inp[startAt + c + 1] += inp[startAt + c];
    const fill = inp.slice(startAt, startAt + cells);
    for (let k = 0; k < n; k++) inp[idxAt + fill[cellOf[k]]++] = k;
    inp[11] = off;
  }
}
