/**
 * The fast CPU engine: what Ambit runs without a GPU. It mirrors CLCB's struct-of-arrays layout
 * (CLCB §4.2: FPos, SqDist, BF, FCount) in typed arrays and adds the indexing a CPU needs:
 *
 * - Position slots. Every anchored filter refers to its owner's slot, so a location update writes
 *   the slot's coordinates once, whatever the number of filters (CLCB's "copy of 2 floats").
 * - A multi-level grid over the unit sphere in 3-D (ECEF metres). Level L holds the slots that own
 *   filters with radius in (s_L/2, s_L], s_L = minCell·2^L, in cubic cells of side 2·s_L (cellScale:
 *   a point event's reach then spans 8 cells, not 27). Cells in 3-D
 *   have no antimeridian and no poles, and a move only touches the grid when the slot changes cell.
 *   A cell keeps its slots' records inline in flat arrays (cell-grid.ts). An event visits, per
 *   populated level, the cells within s_L + r_e of it (chord <= arc: a superset), skips a slot
 *   whose filters' common Bloom bits it lacks, then the Bloom test (CLCB S1a), the exact float64
 *   haversine (S1b) and the constraints.
 * - Equality buckets. A filter with a string equality is filed under its slot, level, name and
 *   (interned) value (eq-buckets.ts); an event near the slot looks up only the buckets of the values
 *   it carries, after a 32-bit mask of the slot's (name, value) pairs says one may be there. A
 *   device with 100 subscriptions over 20 kinds costs 1-2 filters per slot and level, not ~33.
 * - Content-only filters (no area) use CCM's counting algorithm over per-name posting lists.
 * - A tag is an `exists` on the tag's own name (tagName), so the constraint paths decide T5; a
 *   content-only filter with tags is filed under its rarest tag alone and checked whole when an
 *   event carries that tag (popular tags' counting lists would be walked by every event).
 *
 * Distances use the reference haversine, so this engine agrees with the reference exactly.
 *
 * One file because it is one data structure (as rbush and flatbush are): add, move and match all
 * read the same struct-of-arrays state in their hot loops, and splitting it across modules would
 * put those reads behind accessors or a shared state object.
 */
import { EARTH_RADIUS_M, haversineM } from '../model/geo.js';
import { type NArea, type NConstraint, type NEvent, type NFilter, type NSubscription, type FilterView, type SubscriptionView, inRange, patternDfa } from '../model/limits.js';
import { AmbitError, show } from '../model/errors.js';
import { CellGrid, REC } from './cell-grid.js';
import { EqBuckets, NO_BUCKET } from './eq-buckets.js';
import { CpuMatcher, type DeviceHandle, type Listed, type MatcherOptions, type MatcherStats, checkHandleUpdate, checkTag } from './matcher.js';
import { OP_CODE, OP_CONTAINS, OP_EQ, OP_EXISTS, OP_GE, OP_GT, OP_LE, OP_LIKE, OP_LT, OP_NAME, OP_NE, OP_PREFIX, OP_REGEX, OP_SUFFIX, T_ANY, T_BOOL, T_NUM, T_STR } from './operators.js';
import { type Dfa, dfaMatches } from '../model/pattern.js';
import { tagName, tagOfName } from '../model/tags.js';
import type { Event, Subscription } from '../model/types.js';

export interface FastMatcherOptions extends MatcherOptions {
  /**
   * Radius bound of the finest grid level, metres; its cells are cellScale times that. Default and
   * least: 64 / cellScale (cells of 64 m, the least the 53-bit cell keys allow).
   */
  minCellM?: number;
  /**
   * Cell side over the largest radius of the level's filters: 1, 2 (default) or 4. At 2 a point
   * event's query box spans 2 cells an axis (8 in all) instead of 3 (27): fewer cell lookups for
   * slightly more slots to test, which the inline records make cheap.
   */
  cellScale?: number;
}

const NONE = -1;
const SLOT_DEVICE = 1;
const SLOT_FIXED = 2;
/** Levels s_L = minCell·2^L: at the least minCell (16 m, cellScale 4) s_17 is 2,097 km, above every radius the limits allow. */
const MAX_LEVELS = 18;
/**
 * The smallest cell side, metres: a level's cell keys ix·k² + iy·k + iz, k = 2·(⌈R/side⌉ + 2) + 1,
 * must stay exact integers in a float64 (k³ < 2^53 holds for sides above 61.3 m).
 */
const MIN_CELL_SIDE_M = 64;

const NO_CONSTRAINTS: readonly never[] = [];
/** A slot's list of at most this many filters at a level has its Bloom AND recomputed when one leaves. */
const AND_RECOMPUTE = 32;
const NO_TAGS: readonly string[] = [];

/**
 * A point's Earth-centred coordinates in metres, written into out[o..o+2]: the same arithmetic for
 * slots and events, so a slot at an event's own position is at chord 0 from it. A function of its
 * own: written inline in matchValid, these four sines and cosines cost about ten times as much
 * (V8 11.3 in Node 20, an event at 10k filters: 0.34 against 0.10 µs with no slot in reach).
 */
function pointOf(lat: number, lon: number, out: Float64Array, o: number): void {
  const phi = (lat * Math.PI) / 180;
  const lam = (lon * Math.PI) / 180;
  const c = Math.cos(phi) * EARTH_RADIUS_M;
  out[o] = c * Math.cos(lam);
  out[o + 1] = c * Math.sin(lam);
  out[o + 2] = Math.sin(phi) * EARTH_RADIUS_M;
}


/** One grid level: cubic cells of side `size` metres, holding position slots. */
interface Level {
  readonly size: number;
  /**
   * The largest radius of a filter filed at this level since it last held none (at most `size`):
   * an event's scan reaches this far plus the event's own radius, not `size` (a level of 24 m
   * circles in cells for up to 32 m scans about half the slots).
   */
  maxRadius: number;
  /** Filters filed at this level (positioned or not). */
  filters: number;
  readonly inv: number;
  readonly off: number;
  readonly k: number;
  /** The cells and their slot records (cell-grid.ts). */
  readonly grid: CellGrid;
  /** The cell id holding each slot at this level (meaningful while cellOf is not NaN). */
  cellId: Int32Array;
  /** Cell key of each slot at this level (NaN = not in this level's grid). */
  cellOf: Float64Array;
  /** Index of the slot inside its cell's array. */
  idx: Int32Array;
  /** Number of the slot's filters that live at this level. */
  count: Uint16Array;
  /** The first of the slot's filters at this level (a list through fNext/fPrev; NONE: none). */
  head: Int32Array;
  /** Occupied cells per hash bucket: most of a query's 27 cells are empty and skip the Map. */
  occ: Uint32Array;
  /** One bit per `occ` bucket, set while the bucket counts a cell: 8 KiB, so the query's test stays in L1. */
  occBits: Int32Array;
  /** Per slot, the equalities its bucketed filters at this level require (a bit per name and value: a pre-filter, eqBit). */
  eqMask: Uint32Array;
  /** Per slot, how many of its filters at this level sit in equality buckets. */
  eqCount: Uint16Array;
  /**
   * Per slot, the AND of the Bloom words of its filters in the level's list (`head`), mirrored in
   * its record: an event lacking one of these bits can match none of them, and the scan skips the
   * list without reading any filter.
   */
  andLo: Uint32Array;
  andHi: Uint32Array;
}

const OCC_BITS = 16;

/** Bucket of a cell key (an integer below 2^53) in a level's occupancy table. */
function occHash(key: number): number {
  // key | 0 is the low 32 bits (ToInt32); key · 2^-32 is exact, so its truncation is the high bits.
  return (Math.imul(key | 0, 0x9e3779b1) ^ Math.imul((key * 2.3283064365386963e-10) | 0, 0x85ebca6b)) >>> (32 - OCC_BITS);
}

/** Removes `list[i]` by moving the last item into its place; `pos` holds each item's index in the list. */
function swapRemove(list: number[], i: number, pos: Int32Array): void {
  const last = list.pop()!;
  if (i < list.length) {
    list[i] = last;
    pos[last] = i;
  }
}

function growF64(a: Float64Array, n: number, fill = 0): Float64Array<ArrayBuffer> {
  const b = new Float64Array(n);
  b.set(a);
  if (fill !== 0) b.fill(fill, a.length);
  return b;
}
function growI32(a: Int32Array, n: number, fill = 0): Int32Array<ArrayBuffer> {
  const b = new Int32Array(n);
  b.set(a);
  if (fill !== 0) b.fill(fill, a.length);
  return b;
}
function growU32(a: Uint32Array, n: number): Uint32Array<ArrayBuffer> {
  const b = new Uint32Array(n);
  b.set(a);
  return b;
}
function growU16(a: Uint16Array, n: number): Uint16Array<ArrayBuffer> {
  const b = new Uint16Array(n);
  b.set(a);
  return b;
}
function growU8(a: Uint8Array, n: number): Uint8Array<ArrayBuffer> {
  const b = new Uint8Array(n);
  b.set(a);
  return b;
}

/** Bloom bit of an interned name id (64-bit filter, one hash: a pre-filter only, CLCB §4.2). */
function bloomBit(id: number): number {
  return Math.imul(id + 1, 0x9e3779b1) >>> 26;
}

/**
 * A (name, value) pair's bit in a slot's mask of the equalities its bucketed filters require (32
 * bits, one hash: a pre-filter only). A slot with a few filters is skipped without a bucket lookup
 * unless one of them may require the event's value.
 */
function eqBit(name: number, value: number): number {
  return 1 << (Math.imul(Math.imul(name + 1, 0x85ebca6b) ^ value, 0x9e3779b1) >>> 27);
}

export class FastMatcher extends CpuMatcher {
  readonly name = 'fast';
  private readonly minCell: number;
  private readonly cellScale: number;

  // ---- names (interned, ref-counted so unused ids are recycled) ----
  private readonly nameIds = new Map<string, number>();
  /** Tag → the id of its name (tagName) among nameIds, for the tags some filter requires. */
  private readonly tagIds = new Map<string, number>();
  /** The event's tags' name ids (NONE: a tag no filter names), for the match in progress. */
  private evTagId = new Int32Array(64);
  private tagsTotal = 0;
  private nameOf: string[] = [];
  private nameRefs = new Int32Array(64);
  private readonly nameFree: number[] = [];
  /** Posting lists of content-only filters' constraints, per name id (CCM's Constraints table). */
  private postings: number[][] = [];
  /** Content-only filters with tags, by the name id of the tag each is filed under (its rarest). */
  private tagFiled: number[][] = [];

  // ---- subscriptions ----
  private readonly subIndex = new Map<string, number>();
  private subId: (string | null)[] = [];
  private subOwner: (string | null)[] = [];
  private subHead = new Int32Array(1024).fill(NONE);
  private subStamp = new Uint32Array(1024);
  /** Tags by subscription index (tag()); null until the first. */
  private subTag: (number | undefined)[] | null = null;
  /** While matchValidTagged runs: hits list a subscription's tag where it has one. */
  private listTags = false;
  private readonly subFree: number[] = [];
  private subTop = 0;

  // ---- filters (struct of arrays) ----
  private fCap = 1024;
  private fTop = 0;
  private readonly fFree: number[] = [];
  private fSub = new Int32Array(this.fCap);
  private fNextInSub = new Int32Array(this.fCap);
  private fSlot = new Int32Array(this.fCap); // NONE = content-only
  private fRadius = new Float64Array(this.fCap);
  private fLevel = new Uint8Array(this.fCap);
  private fBloomLo = new Uint32Array(this.fCap);
  private fBloomHi = new Uint32Array(this.fCap);
  private fCStart = new Int32Array(this.fCap);
  private fCCount = new Uint16Array(this.fCap);
  private fNext = new Int32Array(this.fCap); // doubly linked list of a slot's filters
  private fPrev = new Int32Array(this.fCap);
  private fCounter = new Uint16Array(this.fCap); // counting algorithm, content-only filters
  private fAlwaysPos = new Int32Array(this.fCap); // index in `always`, or NONE
  // A filter's first string-equality constraint (name id, interned value id; NONE: it has none):
  // a filter that has one sits in that value's equality bucket of its slot and level (`eq`).
  private fEqName = new Int32Array(this.fCap);
  private fEqStr = new Int32Array(this.fCap);
  /** The name id a content-only filter with tags is filed under (NONE: not filed so), and its place there. */
  private fFiledName = new Int32Array(this.fCap);
  private fFiledPos = new Int32Array(this.fCap);
  /** Content-only filters without constraints: they match every event. */
  private readonly always: number[] = [];

  // ---- constraints (pooled in runs of exact length, free lists by length) ----
  private cCap = 4096;
  private cTop = 0;
  private readonly cFree = new Map<number, number[]>();
  /** Slots in the free runs, all lengths together. */
  private cFreeSlots = 0;
  private cName = new Int32Array(this.cCap);
  private cOp = new Uint8Array(this.cCap);
  private cType = new Uint8Array(this.cCap);
  private cNum = new Float64Array(this.cCap);
  // String values are interned: a constraint holds a 32-bit id in cNum's place. (A JS array indexed
  // by constraint would also hit V8's ~2^27 element limit near 100M constraints.)
  private readonly strIds = new Map<string, number>();
  private strOf: (string | null)[] = [];
  /** The automaton of each like / regex constraint slot (semantics C16, C17). */
  private cDfa: (Dfa | undefined)[] = [];
  private strRefs = new Int32Array(64);
  private readonly strFree: number[] = [];
  private cFilter = new Int32Array(this.cCap);
  private cPostingPos = new Int32Array(this.cCap);

  // ---- position slots ----
  private sCap = 1024;
  private sTop = 0;
  private readonly sFree: number[] = [];
  private readonly deviceSlot = new Map<string, number>();
  private sDevice: (string | null)[] = [];
  private sKind = new Uint8Array(this.sCap);
  private sHasPos = new Uint8Array(this.sCap);
  private sDirty = new Uint8Array(this.sCap);
  /** Slots moved since the last match (each once: sDirty). */
  private readonly dirty: number[] = [];
  private sLat = new Float64Array(this.sCap);
  private sLon = new Float64Array(this.sCap);
  private sXYZ = new Float64Array(3 * this.sCap);
  private sFilters = new Int32Array(this.sCap);
  private sPins = new Uint16Array(this.sCap); // open DeviceHandles keep a device's slot
  private sLevels = new Uint32Array(this.sCap); // bit L set: the slot has filters at level L (MAX_LEVELS <= 32)
  private positioned = 0;

  private readonly levels: (Level | null)[] = new Array(MAX_LEVELS).fill(null);
  /**
   * Filters with a string equality, bucketed per slot and level by its name and value (the name id
   * times MAX_LEVELS plus the level, the interned value): a bucket is a list through fNext/fPrev,
   * as a level's other filters of the slot are through the level's `head`.
   */
  private readonly eq = new EqBuckets();

  // ---- per-event scratch ----
  private stamp = 0;
  private attrStamp = new Uint32Array(64);
  private attrIndex = new Int32Array(64);
  private eType = new Uint8Array(64);
  private eNum = new Float64Array(64);
  /** The name id of each event attribute (NONE: a name no constraint uses), once prepared. */
  private evNameId = new Int32Array(64);
  private eStr: string[] = [];
  private readonly touched: number[] = [];
  /**
   * This event's strings that some filter's equality may name: name id times MAX_LEVELS, the
   * interned value, the name's bit (eqBit); their count; all the bits together.
   */
  private evEqNameLevel = new Int32Array(64);
  private evEqValue = new Int32Array(64);
  private evEqBit = new Int32Array(64);
  private evEqCount = 0;
  private evEqMask = 0;
  /** The complements of the event's Bloom words (names and tags it has), once prepared. */
  private evNotLo = 0;
  private evNotHi = 0;
  /** Whether matchValid has read the current event's attributes yet (prepare). */
  private prepared = false;
  /** Content-only filters filed by name (CCM postings) or under a tag: an event's attributes are read up front while any exist. */
  private contentFiled = 0;
  /** Event point (x, y, z, metres) and squared reach of the level being scanned. */
  private readonly query = new Float64Array(4);
  private constraintsTotal = 0;
  private filtersTotal = 0;

  constructor(options: FastMatcherOptions = {}) {
    super(options);
    const cellScale = options.cellScale ?? 2;
    if (cellScale !== 1 && cellScale !== 2 && cellScale !== 4) throw new RangeError(`fast: cellScale must be 1, 2 or 4, got ${cellScale}`);
    this.cellScale = cellScale;
    // The finest level's cells are as small as the keys allow: radii up to 32 m (at cellScale 2)
    // get 64 m cells, not 128 m ones (a city with a device every 20 m scans 8× fewer of them).
    const least = MIN_CELL_SIDE_M / cellScale;
    const minCell = options.minCellM ?? least;
    if (!Number.isFinite(minCell) || minCell < least || minCell > 1_000_000) {
      throw new RangeError(`fast: minCellM must be in [${least}, 1000000] m at cellScale ${cellScale} (cells of at least ${MIN_CELL_SIDE_M} m), got ${minCell}`);
    }
    this.minCell = minCell;
    // The top level holds every radius above it (levelFor): its cells must still reach them.
    if (minCell * 2 ** (MAX_LEVELS - 1) < this.limits.maxRadiusM) throw new RangeError(`fast: ${MAX_LEVELS} grid levels from ${minCell} m do not reach maxRadiusM ${this.limits.maxRadiusM} m`);
    const a = Math.max(this.limits.maxAttributesPerEvent, 1);
    this.eType = new Uint8Array(a);
    this.eNum = new Float64Array(a);
    this.evNameId = new Int32Array(a);
    this.evEqNameLevel = new Int32Array(a);
    this.evEqValue = new Int32Array(a);
    this.evEqBit = new Int32Array(a);
  }

  // =============================== names ===============================

  private intern(name: string): number {
    let id = this.nameIds.get(name);
    if (id === undefined) {
      id = this.nameFree.length > 0 ? this.nameFree.pop()! : this.nameOf.length;
      this.nameIds.set(name, id);
      this.nameOf[id] = name;
      if (id >= this.nameRefs.length) {
        const n = Math.max(id + 1, this.nameRefs.length * 2);
        this.nameRefs = growI32(this.nameRefs, n);
        this.attrStamp = growU32(this.attrStamp, n);
        this.attrIndex = growI32(this.attrIndex, n);
      }
      this.postings[id] = [];
      this.tagFiled[id] = [];
      this.nameRefs[id] = 0;
      const tag = tagOfName(name);
      if (tag !== null) this.tagIds.set(tag, id);
    }
    this.nameRefs[id]++;
    return id;
  }

  private release(id: number): void {
    if (--this.nameRefs[id] === 0) {
      this.nameIds.delete(this.nameOf[id]);
      const tag = tagOfName(this.nameOf[id]);
      if (tag !== null) this.tagIds.delete(tag);
      this.postings[id] = [];
      this.tagFiled[id] = [];
      this.nameFree.push(id);
    }
  }

  private internString(v: string): number {
    let id = this.strIds.get(v);
    if (id === undefined) {
      id = this.strFree.length > 0 ? this.strFree.pop()! : this.strOf.length;
      this.strIds.set(v, id);
      this.strOf[id] = v;
      if (id >= this.strRefs.length) this.strRefs = growI32(this.strRefs, Math.max(id + 1, this.strRefs.length * 2));
      this.strRefs[id] = 0;
    }
    this.strRefs[id]++;
    return id;
  }

  private releaseString(id: number): void {
    if (--this.strRefs[id] === 0) {
      this.strIds.delete(this.strOf[id]!);
      this.strOf[id] = null;
      this.strFree.push(id);
    }
  }

  // =============================== levels ===============================

  private levelFor(radius: number): number {
    let l = 0;
    let s = this.minCell;
    while (s < radius && l < MAX_LEVELS - 1) {
      s *= 2;
      l++;
    }
    return l;
  }

  private level(l: number): Level {
    let lv = this.levels[l];
    if (lv === null) {
      const size = this.minCell * 2 ** l;
      const side = size * this.cellScale;
      const off = Math.ceil(EARTH_RADIUS_M / side) + 2;
      const k = 2 * off + 1;
      // Cell keys ix·k² + iy·k + iz must stay exact integers in a float64.
      if (k * k * k >= 2 ** 53) throw new Error(`fast: grid level ${l} (${size} m) has too many cells for 53-bit keys`);
      lv = {
        size,
        maxRadius: 0,
        filters: 0,
        inv: 1 / side,
        off,
        k,
        grid: new CellGrid(),
        cellId: new Int32Array(this.sCap),
        cellOf: new Float64Array(this.sCap).fill(NaN),
        idx: new Int32Array(this.sCap),
        count: new Uint16Array(this.sCap),
        head: new Int32Array(this.sCap).fill(NONE),
        occ: new Uint32Array(1 << OCC_BITS),
        occBits: new Int32Array(1 << (OCC_BITS - 5)),
        eqMask: new Uint32Array(this.sCap),
        eqCount: new Uint16Array(this.sCap),
        andLo: new Uint32Array(this.sCap),
        andHi: new Uint32Array(this.sCap),
      };
      this.levels[l] = lv;
    }
    return lv;
  }

  private cellKey(lv: Level, s: number): number {
    const o = 3 * s;
    const ix = Math.floor(this.sXYZ[o] * lv.inv) + lv.off;
    const iy = Math.floor(this.sXYZ[o + 1] * lv.inv) + lv.off;
    const iz = Math.floor(this.sXYZ[o + 2] * lv.inv) + lv.off;
    return (ix * lv.k + iy) * lv.k + iz;
  }

  private gridInsert(lv: Level, s: number, key: number): void {
    const grid = lv.grid;
    const c = grid.cellFor(key);
    if (grid.count(c) === 0) {
      const h = occHash(key);
      if (lv.occ[h]++ === 0) lv.occBits[h >>> 5] |= 1 << (h & 31);
    }
    const i = grid.push(c);
    const rec = grid.pool; // after push: it may have grown
    const o = grid.offset(c) + i * REC;
    const p = 3 * s;
    rec[o] = this.sXYZ[p];
    rec[o + 1] = this.sXYZ[p + 1];
    rec[o + 2] = this.sXYZ[p + 2];
    rec[o + 3] = s;
    rec[o + 4] = lv.head[s];
    rec[o + 5] = lv.eqMask[s];
    rec[o + 6] = lv.andLo[s];
    rec[o + 7] = lv.andHi[s];
    lv.cellOf[s] = key;
    lv.cellId[s] = c;
    lv.idx[s] = i;
  }

  private gridRemove(lv: Level, s: number): void {
    const key = lv.cellOf[s];
    const c = lv.cellId[s];
    const emptied = lv.grid.count(c) === 1; // the cell goes with its last record
    const moved = lv.grid.removeAt(c, lv.idx[s]);
    if (moved >= 0) lv.idx[moved] = lv.idx[s];
    if (emptied) {
      const h = occHash(key);
      if (--lv.occ[h] === 0) lv.occBits[h >>> 5] &= ~(1 << (h & 31));
    }
    lv.cellOf[s] = NaN;
  }

  // =============================== slots ===============================

  private growSlots(): void {
    const n = this.sCap * 2;
    this.sKind = growU8(this.sKind, n);
    this.sHasPos = growU8(this.sHasPos, n);
    this.sDirty = growU8(this.sDirty, n);
    this.sLat = growF64(this.sLat, n);
    this.sLon = growF64(this.sLon, n);
    this.sXYZ = growF64(this.sXYZ, 3 * n);
    this.sFilters = growI32(this.sFilters, n);
    this.sPins = growU16(this.sPins, n);
    this.sLevels = growU32(this.sLevels, n);
    for (const lv of this.levels) {
      if (lv === null) continue;
      lv.cellOf = growF64(lv.cellOf, n, NaN);
      lv.cellId = growI32(lv.cellId, n);
      lv.idx = growI32(lv.idx, n);
      lv.count = growU16(lv.count, n);
      lv.head = growI32(lv.head, n, NONE);
      lv.eqMask = growU32(lv.eqMask, n);
      lv.eqCount = growU16(lv.eqCount, n);
      lv.andLo = growU32(lv.andLo, n);
      lv.andHi = growU32(lv.andHi, n);
    }
    this.sCap = n;
  }

  private newSlot(kind: number, device: string | null): number {
    let s: number;
    if (this.sFree.length > 0) s = this.sFree.pop()!;
    else {
      if (this.sTop === this.sCap) this.growSlots();
      s = this.sTop++;
    }
    this.sKind[s] = kind;
    this.sDevice[s] = device;
    this.sHasPos[s] = 0;
    this.sFilters[s] = 0;
    this.sPins[s] = 0;
    this.sLevels[s] = 0;
    if (device !== null) this.deviceSlot.set(device, s);
    return s;
  }

  private freeSlotIfUnused(s: number): void {
    if (this.sFilters[s] !== 0 || this.sPins[s] !== 0 || (this.sKind[s] === SLOT_DEVICE && this.sHasPos[s] === 1)) return;
    const d = this.sDevice[s];
    if (d !== null) this.deviceSlot.delete(d);
    this.sDevice[s] = null;
    this.sKind[s] = 0;
    this.sHasPos[s] = 0;
    this.sFree.push(s);
  }

  /**
   * Writes a slot's position: the whole cost of a location update (CLCB's two-float write). The
   * grid is brought up to date lazily, by `flush()` before the next match, so a device that moves
   * many times between events is re-filed once.
   */
  private place(s: number, lat: number, lon: number): void {
    this.sLat[s] = lat;
    this.sLon[s] = lon;
    if (this.sHasPos[s] === 0) {
      this.sHasPos[s] = 1;
      if (this.sKind[s] === SLOT_DEVICE) this.positioned++;
    }
    if (this.sDirty[s] === 0) {
      this.sDirty[s] = 1;
      this.dirty.push(s);
    }
  }

  /** Recomputes a moved slot's 3-D point and moves it between cells where its cell changed. */
  private sync(s: number): void {
    this.sDirty[s] = 0;
    if (this.sHasPos[s] === 0) return; // forgotten since it moved; unplace() left the grid already
    const o = 3 * s;
    pointOf(this.sLat[s], this.sLon[s], this.sXYZ, o);
    let mask = this.sLevels[s];
    while (mask !== 0) {
      const l = 31 - Math.clz32(mask);
      mask &= ~(1 << l);
      const lv = this.levels[l]!;
      const key = this.cellKey(lv, s);
      const cur = lv.cellOf[s];
      if (cur === key) {
        // Same cell: its record takes the new point.
        const rec = lv.grid.pool;
        const r = lv.grid.offset(lv.cellId[s]) + lv.idx[s] * REC;
        rec[r] = this.sXYZ[o];
        rec[r + 1] = this.sXYZ[o + 1];
        rec[r + 2] = this.sXYZ[o + 2];
        continue;
      }
      if (cur === cur) this.gridRemove(lv, s); // not NaN: filed elsewhere
      this.gridInsert(lv, s, key);
    }
  }

  /** Files every slot moved since the last match. */
  private flush(): void {
    const dirty = this.dirty;
    if (dirty.length === 0) return;
    for (let i = 0; i < dirty.length; i++) this.sync(dirty[i]);
    dirty.length = 0; // a call into the runtime even when the array is empty: not made per match
  }

  private unplace(s: number): void {
    if (this.sHasPos[s] === 0) return;
    let mask = this.sLevels[s];
    while (mask !== 0) {
      const l = 31 - Math.clz32(mask);
      mask &= ~(1 << l);
      const lv = this.levels[l]!;
      if (lv.cellOf[s] === lv.cellOf[s]) this.gridRemove(lv, s);
    }
    this.sHasPos[s] = 0;
    if (this.sKind[s] === SLOT_DEVICE) this.positioned--;
  }

  private attach(f: number, s: number, l: number): void {
    const lv = this.level(l);
    lv.filters++;
    if (this.fRadius[f] > lv.maxRadius) lv.maxRadius = this.fRadius[f];
    // The slot's filters of one level form one list (a level's scan walks only its own), or, for a
    // filter with a string equality, the list of its bucket: the scan looks up the event's value.
    const en = this.fEqName[f];
    const nameLevel = en * MAX_LEVELS + l;
    const head = en === NONE ? lv.head[s] : this.eq.get(s, nameLevel, this.fEqStr[f]);
    this.fNext[f] = head;
    this.fPrev[f] = NONE;
    if (head !== NONE) this.fPrev[head] = f;
    if (en === NONE) {
      lv.head[s] = f;
      lv.andLo[s] = head === NONE ? this.fBloomLo[f] : lv.andLo[s] & this.fBloomLo[f];
      lv.andHi[s] = head === NONE ? this.fBloomHi[f] : lv.andHi[s] & this.fBloomHi[f];
    } else {
      this.eq.set(s, nameLevel, this.fEqStr[f], f);
      lv.eqMask[s] |= eqBit(en, this.fEqStr[f]);
      lv.eqCount[s]++;
    }
    this.mirror(lv, s);
    this.sFilters[s]++;
    if (lv.count[s]++ === 0) {
      this.sLevels[s] |= 1 << l;
      // A moved slot is filed by the next flush; a settled one has a valid 3-D point now.
      if (this.sHasPos[s] === 1 && this.sDirty[s] === 0) this.gridInsert(lv, s, this.cellKey(lv, s));
    }
  }

  /** Copies the slot's list head and equality mask at this level into its cell's record. */
  private mirror(lv: Level, s: number): void {
    const key = lv.cellOf[s];
    if (key !== key) return; // NaN: not filed at this level
    const o = lv.grid.offset(lv.cellId[s]) + lv.idx[s] * REC;
    const rec = lv.grid.pool;
    rec[o + 4] = lv.head[s];
    rec[o + 5] = lv.eqMask[s];
    rec[o + 6] = lv.andLo[s];
    rec[o + 7] = lv.andHi[s];
  }

  private detach(f: number): void {
    const s = this.fSlot[f];
    const next = this.fNext[f];
    const prev = this.fPrev[f];
    const l = this.fLevel[f];
    const lv = this.levels[l]!;
    // The reach is a high-water mark: it shrinks only when the level is left with no filter.
    if (--lv.filters === 0) lv.maxRadius = 0;
    const en = this.fEqName[f];
    if (prev !== NONE) this.fNext[prev] = next;
    else if (en === NONE) lv.head[s] = next;
    else if (next === NONE) this.eq.delete(s, en * MAX_LEVELS + l, this.fEqStr[f]);
    else this.eq.set(s, en * MAX_LEVELS + l, this.fEqStr[f], next); // the bucket's head left
    if (next !== NONE) this.fPrev[next] = prev;
    if (en === NONE) {
      // The list's AND of Bloom words, without this filter, where the list is short; a long list
      // keeps the AND it had: it has fewer bits than the list's own (a filter less can only add
      // bits), so it still skips only slots none of whose filters can match.
      let lo = -1;
      let hi = -1;
      let n = 0;
      for (let g = lv.head[s]; g !== NONE && n <= AND_RECOMPUTE; g = this.fNext[g], n++) {
        lo &= this.fBloomLo[g];
        hi &= this.fBloomHi[g];
      }
      if (n <= AND_RECOMPUTE) {
        lv.andLo[s] = lo;
        lv.andHi[s] = hi;
      }
    }
    // The mask only gathers bits while the slot has bucketed filters here; it starts over after.
    if (en !== NONE && --lv.eqCount[s] === 0) lv.eqMask[s] = 0;
    this.mirror(lv, s);
    this.sFilters[s]--;
    if (--lv.count[s] === 0) {
      this.sLevels[s] &= ~(1 << l);
      if (lv.cellOf[s] === lv.cellOf[s]) this.gridRemove(lv, s);
    }
    this.freeSlotIfUnused(s);
  }

  // =============================== constraints ===============================

  /**
   * n consecutive constraint slots: a freed run of exactly n, else the end of the arrays. Exact
   * runs, not power-of-two blocks: CLCB's 3-5 constraints a filter took 4 or 8 slots, and the
   * arrays' doubling then held about twice the constraints' own bytes.
   */
  private allocConstraints(n: number): number {
    if (n === 0) return 0;
    // No freed run at all (a load into a fresh engine): no lookup.
    const free = this.cFreeSlots === 0 ? undefined : this.cFree.get(n);
    if (free !== undefined && free.length > 0) {
      this.cFreeSlots -= n;
      return free.pop()!;
    }
    if (this.cTop + n > this.cCap) this.growConstraints(Math.max(this.cTop + n, this.cCap * 2));
    const start = this.cTop;
    this.cTop += n;
    return start;
  }

  private growConstraints(m: number): void {
    this.cName = growI32(this.cName, m);
    this.cOp = growU8(this.cOp, m);
    this.cType = growU8(this.cType, m);
    this.cNum = growF64(this.cNum, m);
    this.cFilter = growI32(this.cFilter, m);
    this.cPostingPos = growI32(this.cPostingPos, m);
    this.cCap = m;
  }

  /**
   * Room for `filters` more filters and `slots` more constraint slots, made at once: a bulk load
   * copies its arrays once, to the size it needs, where growing by doubling as it went copied them
   * about as often and left up to half of them unused (301 bytes a filter at 2.5M filters).
   */
  protected override reserve(filters: number, slots: number): void {
    // Freed filters and runs are taken first (runs by exact length: their total is an upper bound).
    // Exact into empty arrays; arrays that hold something grow by at least half, so a load given
    // in chunks (many addMany calls) copies them O(log n) times, not once a chunk.
    const f = filters - this.fFree.length;
    if (f > 0 && this.fTop + f > this.fCap) this.growFilters(atLeastHalfMore(this.fTop, this.fTop + f, this.fCap));
    const c = slots - this.cFreeSlots;
    if (c > 0 && this.cTop + c > this.cCap) this.growConstraints(atLeastHalfMore(this.cTop, this.cTop + c, this.cCap));
  }

  private freeConstraints(start: number, n: number): void {
    if (n === 0) return;
    for (let i = start; i < start + n; i++) {
      if (this.cType[i] === T_STR) this.releaseString(this.cNum[i]);
      this.cDfa[i] = undefined;
    }
    let free = this.cFree.get(n);
    if (free === undefined) this.cFree.set(n, (free = []));
    free.push(start);
    this.cFreeSlots += n;
  }

  // =============================== filters ===============================

  private growFilters(n = this.fCap * 2): void {
    this.fSub = growI32(this.fSub, n);
    this.fNextInSub = growI32(this.fNextInSub, n);
    this.fSlot = growI32(this.fSlot, n);
    this.fRadius = growF64(this.fRadius, n);
    this.fLevel = growU8(this.fLevel, n);
    this.fBloomLo = growU32(this.fBloomLo, n);
    this.fBloomHi = growU32(this.fBloomHi, n);
    this.fCStart = growI32(this.fCStart, n);
    this.fCCount = growU16(this.fCCount, n);
    this.fNext = growI32(this.fNext, n);
    this.fPrev = growI32(this.fPrev, n);
    this.fCounter = growU16(this.fCounter, n);
    this.fAlwaysPos = growI32(this.fAlwaysPos, n);
    this.fEqName = growI32(this.fEqName, n);
    this.fEqStr = growI32(this.fEqStr, n);
    this.fFiledName = growI32(this.fFiledName, n);
    this.fFiledPos = growI32(this.fFiledPos, n);
    this.fCap = n;
  }

  private addFilter(si: number, owner: string, flt: FilterView): number {
    let f: number;
    if (this.fFree.length > 0) f = this.fFree.pop()!;
    else {
      if (this.fTop === this.fCap) this.growFilters();
      f = this.fTop++;
    }
    this.fSub[f] = si;
    this.fAlwaysPos[f] = NONE;
    const cs = flt.constraints ?? NO_CONSTRAINTS;
    const tags = flt.tags ?? NO_TAGS;
    const nc = cs.length;
    const n = nc + tags.length;
    const start = this.allocConstraints(n);
    this.fCStart[f] = start;
    this.fCCount[f] = n;
    let lo = 0;
    let hi = 0;
    this.fEqName[f] = NONE;
    for (let i = 0; i < nc; i++) {
      const c = cs[i];
      const ci = start + i;
      const id = this.intern(c.name);
      this.cName[ci] = id;
      this.cOp[ci] = OP_CODE[c.op];
      this.cFilter[ci] = f;
      const bit = bloomBit(id);
      if (bit < 32) lo |= 1 << bit;
      else hi |= 1 << (bit - 32);
      // The value's type is its JavaScript type (validation made `type` say the same).
      const v = c.value;
      if (c.op === 'exists') {
        this.cType[ci] = T_ANY;
      } else if (typeof v === 'string') {
        this.cType[ci] = T_STR;
        this.cNum[ci] = this.internString(v);
        if (c.op === 'like' || c.op === 'regex') this.cDfa[ci] = patternDfa(c as NConstraint);
        if (this.cOp[ci] === OP_EQ && this.fEqName[f] === NONE) {
          this.fEqName[f] = id;
          this.fEqStr[f] = this.cNum[ci];
        }
      } else {
        this.cType[ci] = typeof v === 'number' ? T_NUM : T_BOOL;
        this.cNum[ci] = typeof v === 'number' ? v : v ? 1 : 0;
      }
    }
    // Tags after the constraints: each an `exists` on the tag's name.
    for (let i = nc; i < n; i++) {
      const ci = start + i;
      const id = this.intern(tagName(tags[i - nc]));
      this.cName[ci] = id;
      this.cOp[ci] = OP_EXISTS;
      this.cType[ci] = T_ANY;
      this.cFilter[ci] = f;
      const bit = bloomBit(id);
      if (bit < 32) lo |= 1 << bit;
      else hi |= 1 << (bit - 32);
    }
    this.fBloomLo[f] = lo >>> 0;
    this.fBloomHi[f] = hi >>> 0;
    this.constraintsTotal += nc;
    this.tagsTotal += n - nc;
    this.filtersTotal++;

    const area = flt.area;
    this.fFiledName[f] = NONE;
    if (area === undefined || area === null) {
      this.fSlot[f] = NONE;
      this.fRadius[f] = 0;
      if (n > nc) {
        // Filed under its rarest tag (fewest filters name it now): an event carrying that tag
        // checks the filter whole; one without it cannot match.
        let best = this.cName[start + nc];
        for (let i = nc + 1; i < n; i++) if (this.nameRefs[this.cName[start + i]] < this.nameRefs[best]) best = this.cName[start + i];
        const list = this.tagFiled[best];
        this.fFiledName[f] = best;
        this.fFiledPos[f] = list.length;
        list.push(f);
        this.contentFiled++;
      } else if (n === 0) {
        this.fAlwaysPos[f] = this.always.length;
        this.always.push(f);
      } else {
        for (let i = 0; i < n; i++) {
          const ci = start + i;
          const list = this.postings[this.cName[ci]];
          this.cPostingPos[ci] = list.length;
          list.push(ci);
        }
        this.contentFiled++;
      }
      return f;
    }
    let s: number;
    const center = area.center;
    if (center !== undefined && center !== null) {
      s = this.newSlot(SLOT_FIXED, null);
      this.place(s, center.lat, center.lon);
      this.sync(s);
    } else {
      const existing = this.deviceSlot.get(owner);
      s = existing ?? this.newSlot(SLOT_DEVICE, owner);
    }
    const l = this.levelFor(area.radiusM);
    this.fSlot[f] = s;
    this.fRadius[f] = area.radiusM;
    this.fLevel[f] = l;
    this.attach(f, s, l);
    return f;
  }

  private removeFilter(f: number): void {
    const n = this.fCCount[f];
    const start = this.fCStart[f];
    if (this.fSlot[f] === NONE) {
      if (this.fFiledName[f] !== NONE) {
        swapRemove(this.tagFiled[this.fFiledName[f]], this.fFiledPos[f], this.fFiledPos);
        this.fFiledName[f] = NONE;
        this.contentFiled--;
      } else if (n === 0) {
        swapRemove(this.always, this.fAlwaysPos[f], this.fAlwaysPos);
      } else {
        for (let ci = start; ci < start + n; ci++) swapRemove(this.postings[this.cName[ci]], this.cPostingPos[ci], this.cPostingPos);
        this.contentFiled--;
      }
    } else {
      this.detach(f);
    }
    let tags = 0;
    for (let k = 0; k < n; k++) {
      const id = this.cName[start + k];
      if (tagOfName(this.nameOf[id]) !== null) tags++;
      this.release(id);
    }
    this.freeConstraints(start, n);
    this.constraintsTotal -= n - tags;
    this.tagsTotal -= tags;
    this.filtersTotal--;
    this.fSlot[f] = NONE;
    this.fFree.push(f);
  }

  // =============================== Matcher ===============================

  protected override get readsPlain(): boolean {
    return true;
  }

  protected override insertPlain(sub: Subscription): void {
    this.insert(sub);
  }

  /**
   * addManyValid of what validateNew(…, true) checked: normalised subscriptions and plain ones as
   * given (the GPU engine's host mirror, so its bulk load makes no normalised copies either).
   */
  addManyViews(subs: readonly SubscriptionView[]): void {
    this.reserveFor(subs);
    for (let i = 0; i < subs.length; i++) this.insert(subs[i]);
  }

  /** addValid of a subscription normalised, or as given when plainSubscription() accepted it. */
  addView(sub: SubscriptionView): void {
    this.refuseTaken(sub.id);
    this.insert(sub);
  }

  protected insert(sub: SubscriptionView): void {
    let si: number;
    if (this.subFree.length > 0) si = this.subFree.pop()!;
    else {
      si = this.subTop++;
      if (si >= this.subHead.length) {
        this.subHead = growI32(this.subHead, this.subHead.length * 2, NONE);
        this.subStamp = growU32(this.subStamp, this.subStamp.length * 2);
      }
    }
    this.subIndex.set(sub.id, si);
    this.subId[si] = sub.id;
    this.subOwner[si] = sub.owner;
    let head = NONE;
    // Insert in reverse so the list keeps the subscription's filter order.
    for (let i = sub.filters.length - 1; i >= 0; i--) {
      const f = this.addFilter(si, sub.owner, sub.filters[i]);
      this.fNextInSub[f] = head;
      head = f;
    }
    this.subHead[si] = head;
  }

  protected delete(id: string): boolean {
    const si = this.subIndex.get(id);
    if (si === undefined) return false;
    let f = this.subHead[si];
    while (f !== NONE) {
      const next = this.fNextInSub[f];
      this.removeFilter(f);
      f = next;
    }
    this.subIndex.delete(id);
    this.subHead[si] = NONE;
    this.subId[si] = null;
    if (this.subTag !== null) this.subTag[si] = undefined;
    this.subOwner[si] = null;
    this.subFree.push(si);
    return true;
  }

  protected move(device: string, lat: number, lon: number): void {
    const s = this.deviceSlot.get(device) ?? this.newSlot(SLOT_DEVICE, device);
    this.place(s, lat, lon);
  }

  protected forget(device: string): boolean {
    const s = this.deviceSlot.get(device);
    if (s === undefined || this.sHasPos[s] === 0) return false;
    this.unplace(s);
    this.freeSlotIfUnused(s);
    return true;
  }

  protected knows(device: string): boolean {
    return this.deviceSlot.has(device);
  }

  has(id: string): boolean {
    return this.subIndex.has(id);
  }

  /** Rebuilds the normalised subscription from the arrays (nothing else is retained). */
  get(id: string): NSubscription | undefined {
    const si = this.subIndex.get(id);
    if (si === undefined) return undefined;
    const filters: NFilter[] = [];
    for (let f = this.subHead[si]; f !== NONE; f = this.fNextInSub[f]) {
      const constraints: NConstraint[] = [];
      const tags: string[] = [];
      for (let ci = this.fCStart[f], end = ci + this.fCCount[f]; ci < end; ci++) {
        const t = this.cType[ci];
        const tag = tagOfName(this.nameOf[this.cName[ci]]);
        if (tag !== null) {
          tags.push(tag);
          continue;
        }
        constraints.push({
          name: this.nameOf[this.cName[ci]],
          op: OP_NAME[this.cOp[ci]],
          type: t === T_ANY ? null : t === T_STR ? 'string' : t === T_NUM ? 'number' : 'bool',
          value: t === T_ANY ? null : t === T_STR ? this.strOf[this.cNum[ci]]! : t === T_NUM ? this.cNum[ci] : this.cNum[ci] === 1,
        });
      }
      const s = this.fSlot[f];
      let area: NArea | null = null;
      if (s !== NONE) {
        area = {
          radiusM: this.fRadius[f],
          center: this.sKind[s] === SLOT_FIXED ? { lat: this.sLat[s], lon: this.sLon[s] } : null,
        };
      }
      filters.push({ constraints, area, tags });
    }
    return { id, owner: this.subOwner[si]!, filters };
  }

  override updatePosition(device: string, lat: number, lon: number): void {
    // Hot path: a known device and in-range coordinates (NaN fails the comparisons) cost one map
    // lookup and two writes; anything else takes the validating path for its exact error.
    const s = typeof device === 'string' ? this.deviceSlot.get(device) : undefined;
    if (s !== undefined && typeof lat === 'number' && typeof lon === 'number' && inRange(lat, lon)) {
      this.place(s, lat, lon);
      return;
    }
    super.updatePosition(device, lat, lon);
  }

  override openDevice(device: string): DeviceHandle {
    super.openDevice(device); // validates the id
    const s = this.deviceSlot.get(device) ?? this.newSlot(SLOT_DEVICE, device);
    if (this.sPins[s] === 0xffff) throw new AmbitError('RESOURCE_EXHAUSTED', `too many open handles for device ${show(device)}`, 'device');
    this.sPins[s]++;
    return new FastDeviceHandle(this, device, s);
  }

  /** @internal FastDeviceHandle's write: coordinates already validated. */
  placeSlot(s: number, lat: number, lon: number): void {
    this.place(s, lat, lon);
  }

  /** @internal */
  unpin(s: number): void {
    this.sPins[s]--;
    this.freeSlotIfUnused(s);
  }

  matchValid(e: NEvent): string[] {
    this.flush();
    // Stamps make per-event resets O(touched) (the role of CLCB's FCount reset in Loc).
    const stamp = this.nextStamp();
    const out: string[] = [];
    // Content-only filters without constraints match everything.
    for (let i = 0; i < this.always.length; i++) this.hit(this.fSub[this.always[i]], stamp, out);
    // The event's attributes are read once something needs them: at once where content-only
    // filters are filed by name or tag, else at the first slot within reach (most events at low
    // density have none).
    this.prepared = false;
    if (this.contentFiled > 0) {
      this.prepare(e, stamp);
      this.matchContentOnly(e, stamp, out);
    }

    // Filters with an area: grid candidates, then Bloom, distance and constraints.
    const q = this.query;
    pointOf(e.lat, e.lon, q, 0);
    const ex = q[0];
    const ey = q[1];
    const ez = q[2];
    for (let l = 0; l < MAX_LEVELS; l++) {
      const lv = this.levels[l];
      if (lv === null || lv.grid.size === 0) continue;
      // Any filter here has r <= maxRadius, so candidates lie within maxRadius + r_e (chord <= arc).
      const h = (lv.maxRadius + e.radiusM) * (1 + 1e-9) + 1e-3;
      const x0 = Math.floor((ex - h) * lv.inv);
      const x1 = Math.floor((ex + h) * lv.inv);
      const y0 = Math.floor((ey - h) * lv.inv);
      const y1 = Math.floor((ey + h) * lv.inv);
      const z0 = Math.floor((ez - h) * lv.inv);
      const z1 = Math.floor((ez + h) * lv.inv);
      const nCells = (x1 - x0 + 1) * (y1 - y0 + 1) * (z1 - z0 + 1);
      q[3] = h * h; // chord <= arc, and h already carries a rounding margin
      const grid = lv.grid;
      if (nCells > grid.size) {
        // The query box holds more cells than the level has: walk the level instead.
        for (let i = 0; i < grid.size; i++) this.scanCell(grid, grid.live[i], l, e, stamp, out, q);
        continue;
      }
      const k = lv.k;
      const occBits = lv.occBits;
      const off = lv.off;
      for (let ix = x0; ix <= x1; ix++) {
        for (let iy = y0; iy <= y1; iy++) {
          const base = ((ix + off) * k + (iy + off)) * k + off;
          for (let iz = z0; iz <= z1; iz++) {
            const h = occHash(base + iz);
            if ((occBits[h >>> 5] & (1 << (h & 31))) === 0) continue;
            const c = grid.find(base + iz);
            if (c >= 0) this.scanCell(grid, c, l, e, stamp, out, q);
          }
        }
      }
    }
    return out;
  }

  /** Content-only filters filed by tag (checked whole) and by name (CCM counting); the event prepared. */
  private matchContentOnly(e: NEvent, stamp: number, out: string[]): void {
    const notLo = this.evNotLo;
    const notHi = this.evNotHi;
    const nAttr = e.names.length;
    const nTag = this.tagIds.size > 0 ? e.tags.length : 0;
    const evTagId = this.evTagId;
    // Content-only filters with tags: those filed under a tag the event carries, checked whole.
    if (nTag > 0) {
      for (let i = 0; i < nTag; i++) {
        const id = evTagId[i];
        if (id === NONE) continue;
        const list = this.tagFiled[id];
        for (let j = 0; j < list.length; j++) {
          const f = list[j];
          if ((this.fBloomLo[f] & notLo) !== 0 || (this.fBloomHi[f] & notHi) !== 0) continue;
          const si = this.fSub[f];
          if (this.subStamp[si] !== stamp && this.contentOk(f)) this.hit(si, stamp, out);
        }
      }
    }

    // Content-only filters: CCM counting over the event's names.
    const touched = this.touched;
    for (let i = 0; i < nAttr; i++) {
      const id = this.evNameId[i];
      if (id === NONE) continue;
      const list = this.postings[id];
      for (let j = 0; j < list.length; j++) {
        const ci = list[j];
        if (!this.sat(ci, i)) continue;
        const f = this.cFilter[ci];
        const cnt = this.fCounter[f];
        if (cnt === 0) touched.push(f);
        this.fCounter[f] = cnt + 1;
        if (cnt + 1 === this.fCCount[f]) this.hit(this.fSub[f], stamp, out);
      }
    }
    if (touched.length !== 0) {
      for (let i = 0; i < touched.length; i++) this.fCounter[touched[i]] = 0;
      touched.length = 0;
    }
  }

  /** Reads the event's attributes and tags for the tests of matchValid (names, Bloom words, equality buckets). */
  private prepare(e: NEvent, stamp: number): void {
    this.prepared = true;
    let lo = 0;
    let hi = 0;
    let nEq = 0;
    let eqMask = 0;
    const nAttr = e.names.length;
    for (let i = 0; i < nAttr; i++) {
      const id = this.nameIds.get(e.names[i]);
      this.evNameId[i] = id ?? NONE;
      if (id === undefined) continue; // no constraint uses this name
      this.attrStamp[id] = stamp;
      this.attrIndex[id] = i;
      const bit = bloomBit(id);
      if (bit < 32) lo |= 1 << bit;
      else hi |= 1 << (bit - 32);
      const v = e.values[i];
      if (typeof v === 'number') {
        this.eType[i] = T_NUM;
        this.eNum[i] = v;
      } else if (typeof v === 'string') {
        this.eType[i] = T_STR;
        this.eStr[i] = v;
        const sv = this.strIds.get(v);
        if (sv !== undefined) {
          // A value some constraint holds: the buckets of filters that require it are looked up.
          const b = eqBit(id, sv);
          this.evEqNameLevel[nEq] = id * MAX_LEVELS;
          this.evEqValue[nEq] = sv;
          this.evEqBit[nEq++] = b;
          eqMask |= b;
        }
      } else {
        this.eType[i] = T_BOOL;
        this.eNum[i] = v ? 1 : 0;
      }
    }
    // The event's tags, as attributes of their names (any value satisfies their `exists`).
    const nTag = this.tagIds.size > 0 ? e.tags.length : 0;
    if (nTag > this.evTagId.length) this.evTagId = new Int32Array(Math.max(nTag, 2 * this.evTagId.length));
    if (nTag > 0) {
      for (let i = 0; i < nTag; i++) {
        const id = this.tagIds.get(e.tags[i]);
        this.evTagId[i] = id ?? NONE;
        if (id === undefined) continue; // no filter requires this tag
        this.attrStamp[id] = stamp;
        const bit = bloomBit(id);
        if (bit < 32) lo |= 1 << bit;
        else hi |= 1 << (bit - 32);
      }
    }
    this.evNotLo = ~lo;
    this.evNotHi = ~hi;
    this.evEqCount = nEq;
    this.evEqMask = eqMask;
  }

  private scanCell(grid: CellGrid, c: number, l: number, e: NEvent, stamp: number, out: string[], q: Float64Array): void {
    const rec = grid.pool;
    const start = grid.offset(c);
    const n = start + grid.count(c) * REC;
    const qx = q[0];
    const qy = q[1];
    const qz = q[2];
    const reach2 = q[3];
    // The event's words in locals (read again once the event is prepared here).
    let ready = this.prepared;
    let notLo = this.evNotLo;
    let notHi = this.evNotHi;
    let evMask = this.evEqMask;
    for (let o = start; o < n; o += REC) {
      // A slot whose chord to the event exceeds this level's reach (largest radius + r_e) has no
      // filter that can match: skip it before touching any of its own cache lines.
      const dx = rec[o] - qx;
      const dy = rec[o + 1] - qy;
      const dz = rec[o + 2] - qz;
      if (dx * dx + dy * dy + dz * dz > reach2) continue;
      if (!ready) {
        this.prepare(e, stamp);
        ready = true;
        notLo = this.evNotLo;
        notHi = this.evNotHi;
        evMask = this.evEqMask;
      }
      const s = rec[o + 3];
      // S1b: exact float64 great-circle distance, computed once per slot (-1: not yet).
      let d = -1;
      const h = rec[o + 4];
      if (h !== NONE && (rec[o + 6] & notLo) === 0 && (rec[o + 7] & notHi) === 0) d = this.scanList(h, s, d, e, notLo, notHi, stamp, out);
      // Filters with a string equality: only the buckets of the event's own values.
      const m = rec[o + 5] & evMask;
      if (m === 0) continue;
      for (let k = 0; k < this.evEqCount; k++) {
        if ((m & this.evEqBit[k]) === 0) continue;
        const b = this.eq.get(s, this.evEqNameLevel[k] + l, this.evEqValue[k]);
        if (b !== NO_BUCKET) d = this.scanList(b, s, d, e, notLo, notHi, stamp, out);
      }
    }
  }

  /**
   * Walks one list of a slot's filters (a level's filters without an equality, or one equality
   * bucket); `d` is the slot's distance to the event if computed already (else -1), returned.
   */
  private scanList(first: number, s: number, d: number, e: NEvent, notLo: number, notHi: number, stamp: number, out: string[]): number {
    for (let f = first; f !== NONE; f = this.fNext[f]) {
      // S1a: names of the filter ⊆ names of the event (Bloom inclusion).
      if ((this.fBloomLo[f] & notLo) !== 0 || (this.fBloomHi[f] & notHi) !== 0) continue;
      const si = this.fSub[f];
      if (this.subStamp[si] === stamp) continue; // subscription already matched
      if (d < 0) d = haversineM(this.sLat[s], this.sLon[s], e.lat, e.lon);
      if (!(d <= this.fRadius[f] + e.radiusM)) continue;
      if (this.contentOk(f)) this.hit(si, stamp, out);
    }
    return d;
  }

  private contentOk(f: number): boolean {
    const stamp = this.stamp;
    for (let ci = this.fCStart[f], end = ci + this.fCCount[f]; ci < end; ci++) {
      const id = this.cName[ci];
      if (this.attrStamp[id] !== stamp) return false;
      if (!this.sat(ci, this.attrIndex[id])) return false;
    }
    return true;
  }

  /** Constraint `ci` against event attribute `i` (docs/semantics.md). */
  private sat(ci: number, i: number): boolean {
    const t = this.cType[ci];
    if (t === T_ANY) return true;
    if (this.eType[i] !== t) return false;
    const op = this.cOp[ci];
    if (t === T_STR) {
      const a = this.eStr[i];
      const c = this.strOf[this.cNum[ci]]!;
      switch (op) {
        case OP_EQ: return a === c;
        case OP_NE: return a !== c;
        case OP_PREFIX: return a.startsWith(c);
        case OP_SUFFIX: return a.endsWith(c);
        case OP_CONTAINS: return a.includes(c);
        case OP_LIKE:
        case OP_REGEX: return dfaMatches(this.cDfa[ci]!, a);
        default: return false;
      }
    }
    const a = this.eNum[i];
    const c = this.cNum[ci];
    switch (op) {
      case OP_EQ: return a === c;
      case OP_NE: return a !== c;
      case OP_LT: return a < c;
      case OP_LE: return a <= c;
      case OP_GT: return a > c;
      case OP_GE: return a >= c;
      default: return false;
    }
  }

  private hit(si: number, stamp: number, out: string[]): void {
    if (this.subStamp[si] === stamp) return;
    this.subStamp[si] = stamp;
    // matchValidTagged reads `out` as Listed[].
    if (this.listTags) (out as Listed[]).push(this.subTag![si] ?? this.subId[si]!);
    else out.push(this.subId[si]!);
  }

  override tag(key: string, tag: number): boolean {
    checkTag(tag);
    const si = typeof key === 'string' ? this.subIndex.get(key) : undefined;
    if (si === undefined) return false;
    (this.subTag ??= [])[si] = tag;
    return true;
  }

  /** matchValid(), each match listed as its tag where it has one (tag()). */
  matchValidTagged(e: NEvent): Listed[] {
    this.listTags = this.subTag !== null;
    try {
      return this.matchValid(e);
    } finally {
      this.listTags = false;
    }
  }

  override matchBatchTagged(events: readonly Event[]): Promise<Listed[][]> {
    return this.eachValid(events, (e) => this.matchValidTagged(e));
  }

  /** The automata of the like / regex constraints held (each once, however many constraints share it). */
  private patternBytes(): number {
    const seen = new Set<Dfa>();
    let bytes = 8 * this.cDfa.length;
    for (const d of this.cDfa) {
      if (d === undefined || seen.has(d)) continue;
      seen.add(d);
      bytes += d.next.byteLength + d.bounds.byteLength + d.accept.byteLength + 64;
    }
    return bytes;
  }

  private nextStamp(): number {
    if (++this.stamp === 0xffffffff) {
      this.stamp = 1;
      this.subStamp.fill(0);
      this.attrStamp.fill(0);
    }
    return this.stamp;
  }

  stats(): MatcherStats {
    let cells = 0;
    let cellEntries = 0;
    let cellBytes = 0;
    let levels = 0;
    let levelBytes = 0;
    for (const lv of this.levels) {
      if (lv === null) continue;
      levels++;
      cells += lv.grid.size;
      for (let i = 0; i < lv.grid.size; i++) cellEntries += lv.grid.count(lv.grid.live[i]);
      cellBytes += lv.grid.bytes;
      levelBytes += lv.cellOf.byteLength + lv.cellId.byteLength + lv.idx.byteLength + lv.count.byteLength + lv.head.byteLength + lv.eqMask.byteLength + lv.eqCount.byteLength + lv.andLo.byteLength + lv.andHi.byteLength;
    }
    const typed =
      this.fSub.byteLength + this.fNextInSub.byteLength + this.fSlot.byteLength + this.fRadius.byteLength +
      this.fLevel.byteLength + this.fBloomLo.byteLength + this.fBloomHi.byteLength + this.fCStart.byteLength +
      this.fCCount.byteLength + this.fNext.byteLength + this.fPrev.byteLength + this.fCounter.byteLength +
      this.fAlwaysPos.byteLength + this.cName.byteLength + this.cOp.byteLength + this.cType.byteLength +
      this.cNum.byteLength + this.cFilter.byteLength + this.cPostingPos.byteLength + this.sKind.byteLength +
      this.sHasPos.byteLength + this.sDirty.byteLength + this.sLat.byteLength + this.sLon.byteLength + this.sXYZ.byteLength +
      this.sFilters.byteLength + this.sPins.byteLength + this.sLevels.byteLength + this.subHead.byteLength +
      this.subStamp.byteLength + levelBytes;
    // Maps and arrays of references: ~ 8 bytes a slot plus ~ 60 bytes per map entry (V8 estimates).
    const refs = 8 * (this.strOf.length + this.subId.length + this.subOwner.length + this.sDevice.length) +
      60 * (this.subIndex.size + this.deviceSlot.size) + cellBytes + this.eq.bytes + this.patternBytes();
    return {
      engine: this.name,
      subscriptions: this.subIndex.size,
      filters: this.filtersTotal,
      constraints: this.constraintsTotal,
      devices: this.positioned,
      memoryBytes: typed + refs,
      extra: { gridLevels: levels, cellScale: this.cellScale, gridCells: cells, gridEntries: cellEntries, names: this.nameIds.size - this.tagIds.size, tags: this.tagsTotal, tagNames: this.tagIds.size, contentOnlyAlways: this.always.length, pendingMoves: this.dirty.length },
    };
  }
}


/** A device's slot, pinned while the handle is open: an update is two writes and a dirty mark. */
class FastDeviceHandle implements DeviceHandle {
  private slot: number;
  constructor(private readonly engine: FastMatcher, readonly device: string, slot: number) {
    this.slot = slot;
  }

  update(lat: number, lon: number): void {
    checkHandleUpdate(this.slot >= 0, this.device, lat, lon);
    this.engine.placeSlot(this.slot, lat, lon);
  }

  release(): void {
    if (this.slot < 0) return;
    this.engine.unpin(this.slot);
    this.slot = -1;
  }
}

/** The new size of arrays of `cap` elements, `used` of them in use, that must hold `need`: `need` when none is in use, else at least 1.5 × cap. */
function atLeastHalfMore(used: number, need: number, cap: number): number {
  return used === 0 ? need : Math.max(need, Math.ceil(cap * 1.5));
}
