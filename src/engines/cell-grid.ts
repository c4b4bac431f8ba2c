/**
 * The cells of one grid level of the fast engine, in flat arrays: an open-addressing table from a
 * cell's key (an integer below 2^53) to its id, and every cell's slot records in one pool of
 * float64s, a block a cell. An event's scan of a cell then reads one table line, one line of the
 * cells' metadata and the records themselves; with a Map of cell objects, each holding its own
 * array, it read the Map's entry, the boxed key, the object, the array's header and then the
 * records (a 1M-filter grid's scan was mostly those cache misses).
 *
 * A record is REC float64s (64 bytes): x, y, z (the slot's 3-D point), the slot, and four words
 * the engine mirrors there (its list head, equality mask and the AND of its listed filters' Bloom
 * words at this level). Blocks hold 4·2^c records; a cell that outgrows its block moves to one
 * twice the size, one that shrinks to a quarter of a large block moves to one half the size, and
 * freed blocks are reused by size. Once more than half of a large pool is free blocks (devices that
 * gathered in dense cells and left), the live blocks are packed into a new pool; a grid left empty
 * starts over.
 */

/** Float64s per slot record. */
export const REC = 8;

const EMPTY = -1;
/** Records in the smallest block. */
const MIN_BLOCK = 4;
/** Blocks larger than this many records shrink when a quarter full. */
const SHRINK_ABOVE = 64;
/** Pools of at least this many float64s (8 MiB) are packed when more than half of them is free blocks. */
const COMPACT_ABOVE = 1 << 20;
/** Offsets are int32s. */
const MAX_POOL = 2 ** 31 - 1;

/** Bucket of a key in a table of 2^bits entries (both 32-bit halves mixed). */
function slotOf(key: number, mask: number): number {
  const lo = key | 0;
  const hi = (key * 2.3283064365386963e-10) | 0;
  let h = Math.imul(lo ^ Math.imul(hi, 0x85ebca6b), 0x9e3779b1);
  h ^= h >>> 15;
  h = Math.imul(h, 0x2c1b3c6d);
  h ^= h >>> 12;
  return h & mask;
}

export class CellGrid {
  /** Slot records, REC float64s each; a cell's are consecutive from its offset. Re-read after push(): it may be replaced. */
  pool = new Float64Array(64 * REC);
  /** Per cell id: [offset into pool, records, block capacity in records, its place in `live`]. */
  meta = new Int32Array(4 * 64);
  /** Per cell id: its key (EMPTY: a free id). */
  private keys = new Float64Array(64).fill(EMPTY);
  /** Cell ids above the highest ever used are free; below, `freeIds`. */
  private top = 0;
  private readonly freeIds: number[] = [];
  /** Open addressing, linear probing: [key, cell id] pairs, EMPTY keys free. */
  private table = new Float64Array(2 * 64).fill(EMPTY);
  private mask = 63;
  /** Cells holding at least one record. */
  size = 0;
  /** The ids of those cells, in no order (`size` of them): a walk over a level's cells costs its live ones. */
  live = new Int32Array(64);
  private poolTop = 0;
  /** Float64s in the live cells' blocks. */
  private liveLen = 0;
  /** Free blocks by size class (4·2^c records): their offsets. */
  private readonly freeBlocks: number[][] = [];

  /** The cell of `key`, or -1. */
  find(key: number): number {
    const t = this.table;
    const mask = this.mask;
    for (let i = slotOf(key, mask); ; i = (i + 1) & mask) {
      const k = t[2 * i];
      if (k === key) return t[2 * i + 1];
      if (k === EMPTY) return -1;
    }
  }

  /** The cell of `key`, made (empty) when there is none. */
  cellFor(key: number): number {
    const found = this.find(key);
    if (found >= 0) return found;
    if (2 * (this.size + 1) > this.mask + 1) this.rehash(2 * (this.mask + 1));
    const c = this.freeIds.length > 0 ? this.freeIds.pop()! : this.newId();
    this.keys[c] = key;
    const off = this.allocBlock(0);
    this.meta[4 * c] = off;
    this.meta[4 * c + 1] = 0;
    this.meta[4 * c + 2] = MIN_BLOCK;
    this.liveLen += MIN_BLOCK * REC;
    if (this.size === this.live.length) {
      const live = new Int32Array(2 * this.size);
      live.set(this.live);
      this.live = live;
    }
    this.live[this.size] = c;
    this.meta[4 * c + 3] = this.size;
    this.place(key, c);
    this.size++;
    return c;
  }

  /** Records in cell `c`. */
  count(c: number): number {
    return this.meta[4 * c + 1];
  }

  /** Where cell `c`'s records start in the pool. */
  offset(c: number): number {
    return this.meta[4 * c];
  }

  /** Appends a record to cell `c` (its block grown if full): its index in the cell. Write it through `pool` afterwards. */
  push(c: number): number {
    const m = 4 * c;
    const n = this.meta[m + 1];
    const cap = this.meta[m + 2];
    if (n === cap) this.move(c, cap * 2);
    this.meta[m + 1] = n + 1;
    return n;
  }

  /**
   * Removes record `i` of cell `c`, the last one moving into its place: the slot of the record that
   * moved (-1 when none did). A cell left empty is dropped from the table.
   */
  removeAt(c: number, i: number): number {
    const m = 4 * c;
    const off = this.meta[m];
    const last = --this.meta[m + 1];
    let moved = -1;
    if (i !== last) {
      this.pool.copyWithin(off + i * REC, off + last * REC, off + last * REC + REC);
      moved = this.pool[off + i * REC + 3];
    }
    const cap = this.meta[m + 2];
    if (last === 0) this.drop(c);
    else if (cap > SHRINK_ABOVE && last * 4 < cap) this.move(c, cap / 2);
    return moved;
  }

  /** Bytes of the arrays (pool, metadata, table). */
  get bytes(): number {
    return this.pool.byteLength + this.meta.byteLength + this.keys.byteLength + this.table.byteLength + this.live.byteLength;
  }

  private newId(): number {
    const c = this.top++;
    if (c === this.keys.length) {
      const keys = new Float64Array(2 * c).fill(EMPTY);
      keys.set(this.keys);
      this.keys = keys;
      const meta = new Int32Array(8 * c);
      meta.set(this.meta);
      this.meta = meta;
    }
    return c;
  }

  private drop(c: number): void {
    const key = this.keys[c];
    this.freeBlock(this.meta[4 * c], this.meta[4 * c + 2]);
    this.liveLen -= this.meta[4 * c + 2] * REC;
    this.keys[c] = EMPTY;
    this.freeIds.push(c);
    const at = this.meta[4 * c + 3];
    const last = this.live[--this.size];
    this.live[at] = last;
    this.meta[4 * last + 3] = at;
    // Linear probing's deletion: later entries of the run move back over the hole.
    const t = this.table;
    const mask = this.mask;
    let i = slotOf(key, mask);
    while (t[2 * i] !== key) i = (i + 1) & mask;
    for (let j = (i + 1) & mask; t[2 * j] !== EMPTY; j = (j + 1) & mask) {
      const home = slotOf(t[2 * j], mask);
      // The entry at j may fill the hole at i unless its home lies cyclically in (i, j].
      if (i <= j ? home > i && home <= j : home > i || home <= j) continue;
      t[2 * i] = t[2 * j];
      t[2 * i + 1] = t[2 * j + 1];
      i = j;
    }
    t[2 * i] = EMPTY;
    t[2 * i + 1] = EMPTY;
    if (this.size === 0) this.reset();
    else if (this.poolTop >= COMPACT_ABOVE && 2 * this.liveLen < this.poolTop) this.compact();
  }

  /** Back to a new grid's arrays (the last cell went). */
  private reset(): void {
    this.pool = new Float64Array(64 * REC);
    this.meta = new Int32Array(4 * 64);
    this.keys = new Float64Array(64).fill(EMPTY);
    this.table = new Float64Array(2 * 64).fill(EMPTY);
    this.live = new Int32Array(64);
    this.mask = 63;
    this.top = 0;
    this.freeIds.length = 0;
    this.freeBlocks.length = 0;
    this.poolTop = 0;
    this.liveLen = 0;
  }

  /** Packs the live cells' blocks into a new pool, in the order of `live`; no free block is left. */
  private compact(): void {
    const pool = new Float64Array(Math.max(64 * REC, 2 * this.liveLen));
    let top = 0;
    for (let i = 0; i < this.size; i++) {
      const m = 4 * this.live[i];
      const from = this.meta[m];
      pool.set(this.pool.subarray(from, from + this.meta[m + 1] * REC), top);
      this.meta[m] = top;
      top += this.meta[m + 2] * REC;
    }
    this.pool = pool;
    this.poolTop = top;
    this.freeBlocks.length = 0;
  }

  private rehash(entries: number): void {
    const old = this.table;
    this.table = new Float64Array(2 * entries).fill(EMPTY);
    this.mask = entries - 1;
    for (let i = 0; i < old.length; i += 2) if (old[i] !== EMPTY) this.place(old[i], old[i + 1]);
  }

  /** Files `key` → `c` in the table's first free entry from its bucket. */
  private place(key: number, c: number): void {
    const t = this.table;
    let i = slotOf(key, this.mask);
    while (t[2 * i] !== EMPTY) i = (i + 1) & this.mask;
    t[2 * i] = key;
    t[2 * i + 1] = c;
  }

  /** Moves cell `c`'s records to a block of `cap` records. */
  private move(c: number, cap: number): void {
    const m = 4 * c;
    const cls = 31 - Math.clz32(cap / MIN_BLOCK);
    const to = this.allocBlock(cls);
    const from = this.meta[m];
    this.pool.copyWithin(to, from, from + this.meta[m + 1] * REC);
    this.freeBlock(from, this.meta[m + 2]);
    this.liveLen += (cap - this.meta[m + 2]) * REC;
    this.meta[m] = to;
    this.meta[m + 2] = cap;
  }

  /** A block of MIN_BLOCK·2^cls records: its offset. */
  private allocBlock(cls: number): number {
    const free = this.freeBlocks[cls];
    if (free !== undefined && free.length > 0) return free.pop()!;
    const len = (MIN_BLOCK << cls) * REC;
    if (this.poolTop + len > this.pool.length) {
      if (this.poolTop + len > MAX_POOL) throw new RangeError(`fast: a grid level's records would pass ${MAX_POOL} float64s`);
      const pool = new Float64Array(Math.min(MAX_POOL, Math.max(2 * this.pool.length, this.poolTop + len)));
      pool.set(this.pool.subarray(0, this.poolTop));
      this.pool = pool;
    }
    const off = this.poolTop;
    this.poolTop += len;
    return off;
  }

  private freeBlock(off: number, cap: number): void {
    const cls = 31 - Math.clz32(cap / MIN_BLOCK);
    (this.freeBlocks[cls] ??= []).push(off);
  }
}
