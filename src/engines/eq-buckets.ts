/**
 * A hash table from (slot, name-and-level, value) to the first filter of a bucket: the fast
 * engine's index of a position slot's filters by their first string equality. An event near a
 * slot looks up the bucket of each string it carries instead of walking every filter of the slot
 * (a device with 100 subscriptions over 20 event kinds: 1-2 filters per bucket instead of ~33 per
 * grid level).
 *
 * Open addressing with linear probing in one typed array of 16-byte entries (slot, name-and-level,
 * value, first filter: one cache line per probe, no object per entry), at most half full, deletion
 * by backward shift (no tombstones, so probes stay short whatever the churn).
 */
const EMPTY = -1;
/** Int32s per entry. */
const E = 4;
/** What `get` returns for a key that is not in the table. */
export const NO_BUCKET = -1;

export class EqBuckets {
  private cap: number;
  private mask: number;
  private used = 0;
  /** Entries: slot (EMPTY: free), name-and-level, value, first filter. */
  private t: Int32Array;

  constructor(capacity = 1024) {
    let cap = 16;
    while (cap < capacity) cap *= 2;
    this.cap = cap;
    this.mask = cap - 1;
    this.t = EqBuckets.table(cap);
  }

  private static table(cap: number): Int32Array {
    const t = new Int32Array(cap * E);
    for (let i = 0; i < t.length; i += E) t[i] = EMPTY;
    return t;
  }

  /** Buckets held. */
  get size(): number {
    return this.used;
  }

  /** Bytes of the table. */
  get bytes(): number {
    return this.t.byteLength;
  }

  private home(slot: number, nameLevel: number, value: number): number {
    const h = Math.imul(slot ^ Math.imul(nameLevel, 0x27d4eb2d) ^ Math.imul(value, 0x165667b1), 0x9e3779b1);
    return (h ^ (h >>> 15)) & this.mask;
  }

  /** The bucket's first filter, or NO_BUCKET. The hot path of a match: one probe sequence. */
  get(slot: number, nameLevel: number, value: number): number {
    const t = this.t;
    const mask = this.mask;
    for (let i = this.home(slot, nameLevel, value); ; i = (i + 1) & mask) {
      const o = i * E;
      const s = t[o];
      if (s === EMPTY) return NO_BUCKET;
      if (s === slot && t[o + 1] === nameLevel && t[o + 2] === value) return t[o + 3];
    }
  }

  /** Sets the bucket's first filter, adding the bucket if it is new. */
  set(slot: number, nameLevel: number, value: number, first: number): void {
    if (slot < 0) throw new RangeError(`eq buckets: slot ${slot} is negative`);
    if (2 * (this.used + 1) > this.cap) this.grow();
    const t = this.t;
    for (let i = this.home(slot, nameLevel, value); ; i = (i + 1) & this.mask) {
      const o = i * E;
      const s = t[o];
      if (s === EMPTY) {
        t[o] = slot;
        t[o + 1] = nameLevel;
        t[o + 2] = value;
        t[o + 3] = first;
        this.used++;
        return;
      }
      if (s === slot && t[o + 1] === nameLevel && t[o + 2] === value) {
        t[o + 3] = first;
        return;
      }
    }
  }

  /** Removes the bucket; false when there was none. */
  delete(slot: number, nameLevel: number, value: number): boolean {
    const t = this.t;
    let i = this.home(slot, nameLevel, value);
    for (; ; i = (i + 1) & this.mask) {
      const o = i * E;
      const s = t[o];
      if (s === EMPTY) return false;
      if (s === slot && t[o + 1] === nameLevel && t[o + 2] === value) break;
    }
    // Backward shift: pull later entries of the run into the hole when their home allows it.
    let j = i;
    for (;;) {
      j = (j + 1) & this.mask;
      const o = j * E;
      if (t[o] === EMPTY) break;
      const h = this.home(t[o], t[o + 1], t[o + 2]);
      // Entry j may move to i only if its home is not cyclically within (i, j].
      if (i <= j ? h > i && h <= j : h > i || h <= j) continue;
      t.copyWithin(i * E, o, o + E);
      i = j;
    }
    t[i * E] = EMPTY;
    this.used--;
    return true;
  }

  private grow(): void {
    const old = this.t;
    this.cap *= 2;
    this.mask = this.cap - 1;
    this.t = EqBuckets.table(this.cap);
    this.used = 0;
    for (let o = 0; o < old.length; o += E) {
      if (old[o] !== EMPTY) this.set(old[o], old[o + 1], old[o + 2], old[o + 3]);
    }
  }
}
