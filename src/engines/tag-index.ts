/**
 * Subset matching over a database of tag sets, TagMatch's problem (TagMatch §2; docs/semantics.md
 * T5): the database holds (set, key) entries; `match(q)` gives the key of every entry whose set
 * is a subset of the query q (a key once per matching entry), `matchUnique(q)` each such key
 * once. Tags are integer ids of a caller's dictionary (`TagDictionary` turns strings into ids).
 *
 * This is the exact CPU index, and the store the GPU index (gpu/tag-index.ts) verifies against:
 * - Equal sets are stored once (the *tagset table*), each with the keys of its entries (the *key
 *   table*), as TagMatch stores them.
 * - Each distinct set is filed under its rarest tag (the tag the fewest distinct sets hold), so a
 *   query walks the lists of its own tags and checks each set found there against the query by
 *   one merge of two ascending lists. A set whose tags are all in the query is found exactly
 *   once, under the one tag it is filed by.
 * The database is loaded whole (`load`), as TagMatch's `consolidate` builds its tables.
 */

/** Sets in flat arrays: set i's tag ids are `tags[offsets[i] .. offsets[i+1])`, ascending and distinct. */
export interface TagSetsView {
  readonly offsets: Uint32Array;
  readonly tags: Uint32Array;
}

/** Query results in flat arrays: query j's keys are `keys[offsets[j] .. offsets[j+1])`. */
export interface TagMatches {
  readonly offsets: Uint32Array;
  readonly keys: Uint32Array;
}

/** A string tag → id table for callers whose tags are strings (ids are dense, from 0). */
export class TagDictionary {
  private readonly ids = new Map<string, number>();
  private readonly names: string[] = [];

  /** The id of `tag`, made on first sight. */
  id(tag: string): number {
    let id = this.ids.get(tag);
    if (id === undefined) {
      id = this.names.length;
      this.ids.set(tag, id);
      this.names.push(tag);
    }
    return id;
  }

  /** The id of `tag`, or undefined when no set has named it. */
  find(tag: string): number | undefined {
    return this.ids.get(tag);
  }

  name(id: number): string {
    return this.names[id];
  }

  get size(): number {
    return this.names.length;
  }

  /** Flat sets of the given tag lists (each made ascending and distinct). */
  sets(lists: readonly (readonly string[])[]): TagSetsView {
    const offsets = new Uint32Array(lists.length + 1);
    const all: number[] = [];
    lists.forEach((list, i) => {
      const ids = [...new Set(list.map((t) => this.id(t)))].sort((a, b) => a - b);
      all.push(...ids);
      offsets[i + 1] = all.length;
    });
    return { offsets, tags: Uint32Array.from(all) };
  }
}

/** The distinct values of `a`, ascending (a new array). */
function sortedDistinct(a: Uint32Array): Uint32Array {
  const s = Uint32Array.from(a).sort();
  let w = 0;
  for (let i = 0; i < s.length; i++) if (i === 0 || s[i] !== s[w - 1]) s[w++] = s[i];
  return s.slice(0, w);
}

/** The rank of `t` among the ascending `values` (where it is, or where it would go). */
function rankIn(values: Uint32Array, t: number): number {
  let lo = 0;
  let hi = values.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (values[mid] < t) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** FNV-1a over a set's ids (for finding equal sets). */
function hashSet(tags: Uint32Array, from: number, to: number): number {
  let h = 0x811c9dc5;
  for (let i = from; i < to; i++) {
    let v = tags[i];
    for (let b = 0; b < 4; b++) {
      h = Math.imul(h ^ (v & 0xff), 0x01000193);
      v >>>= 8;
    }
  }
  return h >>> 0;
}

function sameSet(a: Uint32Array, af: number, at: number, b: Uint32Array, bf: number, bt: number): boolean {
  if (at - af !== bt - bf) return false;
  for (let i = 0; i < at - af; i++) if (a[af + i] !== b[bf + i]) return false;
  return true;
}

/**
 * Whether set u of `sets` is a subset of the query `q[from, to)`: one merge of two ascending
 * lists. The CPU index's check, and the GPU index's exact verification of its Bloom hits.
 */
export function isSubsetOf(sets: TagSetsView, u: number, q: Uint32Array, from: number, to: number): boolean {
  const st = sets.tags;
  let j = from;
  for (let k = sets.offsets[u], end = sets.offsets[u + 1]; k < end; k++) {
    const t = st[k];
    while (j < to && q[j] < t) j++;
    if (j === to || q[j] !== t) return false;
    j++;
  }
  return true;
}

export interface TagIndexStats {
  /** (set, key) entries loaded. */
  entries: number;
  /** Distinct sets. */
  sets: number;
  /** Distinct tags the sets use. */
  tags: number;
  /** Bytes of the index's own arrays (not the caller's). */
  memoryBytes: number;
}

export class TagSetIndex {
  private constructor(
    /** Distinct sets, flat (the tagset table). */
    readonly sets: TagSetsView,
    /** Keys of distinct set u: keys[keyOff[u] .. keyOff[u+1]) (the key table). */
    private readonly keyOff: Uint32Array,
    private readonly keyList: Uint32Array,
    /** Sets filed under tag t: filed[fileOff[t] .. fileOff[t+1]). */
    private readonly fileOff: Uint32Array,
    private readonly filed: Uint32Array,
    readonly entries: number,
    /** One past the largest key held in keyList (for match-unique's stamps). */
    keySpace: number,
    /** The empty set's number, or -1 when the database has none. */
    private readonly emptySet: number,
    /** When keys are sparse, keyList holds their ranks and this their values (ascending). */
    private readonly keyValues: Uint32Array | null,
    /** When tag ids are sparse, the filing table is by rank and this holds the ids (ascending). */
    private readonly tagValues: Uint32Array | null,
  ) {
    this.stamp = new Uint32Array(keySpace);
  }

  private stamp: Uint32Array;
  private stampNow = 0;

  /**
   * Builds the index of `db` (each set ascending and distinct), entry i with key `keys[i]`. The
   * caller's arrays are read, not kept. `progress` hears the entries done now and then. Tag ids and
   * keys may be any u32: sparse ones are ranked, so no table is sized by the largest.
   */
  static load(db: TagSetsView, keys: Uint32Array, progress?: (done: number, phase: string) => void, options: { shared?: boolean } = {}): TagSetIndex {
    const n = db.offsets.length - 1;
    // Tables others may read from worker threads (verifyTables) live in shared memory on request.
    const alloc = options.shared === true ? (len: number): Uint32Array => new Uint32Array(new SharedArrayBuffer(4 * len)) : (len: number): Uint32Array => new Uint32Array(len);
    if (keys.length !== n) throw new RangeError(`tag index: ${n} sets but ${keys.length} keys`);
    // 1. Distinct sets: an open-addressing table of set numbers by hash.
    let cap = 1;
    while (cap < 2 * n) cap *= 2;
    const table = new Int32Array(cap).fill(-1);
    const uniqOf = new Uint32Array(n);
    // The first entry of each distinct set.
    const uniq = new Uint32Array(n);
    let m = 0;
    const mask = cap - 1;
    let maxTag = -1;
    let maxKey = 0;
    for (let i = 0; i < n; i++) {
      const f = db.offsets[i];
      const t = db.offsets[i + 1];
      for (let k = f; k < t; k++) {
        if (k > f && db.tags[k] <= db.tags[k - 1]) throw new RangeError(`tag index: set ${i} is not ascending and distinct`);
        if (db.tags[k] > maxTag) maxTag = db.tags[k];
      }
      if (keys[i] > maxKey) maxKey = keys[i];
      let h = hashSet(db.tags, f, t) & mask;
      for (;;) {
        const u = table[h];
        if (u < 0) {
          table[h] = m;
          uniqOf[i] = m;
          uniq[m++] = i;
          break;
        }
        const j = uniq[u];
        if (sameSet(db.tags, f, t, db.tags, db.offsets[j], db.offsets[j + 1])) {
          uniqOf[i] = u;
          break;
        }
        h = (h + 1) & mask;
      }
      if (progress !== undefined && (i & 0xfffff) === 0xfffff) progress(i + 1, 'distinct sets');
    }
    // Sparse keys (user ids, say) are ranked: stamps over their ranks, values given back on output.
    const ranked = maxKey >= 2 * n + 1024 ? sortedDistinct(keys) : null;
    let keyValues = ranked;
    if (ranked !== null && options.shared === true) (keyValues = alloc(ranked.length)).set(ranked);
    const rankOf = ranked === null ? (k: number): number => k : (k: number): number => rankIn(ranked, k);
    if (ranked !== null) maxKey = ranked.length - 1;
    // The tagset table, flat.
    const sOff = alloc(m + 1);
    for (let u = 0; u < m; u++) sOff[u + 1] = sOff[u] + (db.offsets[uniq[u] + 1] - db.offsets[uniq[u]]);
    const sTags = alloc(sOff[m]);
    for (let u = 0; u < m; u++) sTags.set(db.tags.subarray(db.offsets[uniq[u]], db.offsets[uniq[u] + 1]), sOff[u]);
    // 2. The key table (counting sort of entries by their set).
    const keyOff = alloc(m + 1);
    for (let i = 0; i < n; i++) keyOff[uniqOf[i] + 1]++;
    for (let u = 0; u < m; u++) keyOff[u + 1] += keyOff[u];
    const fill = keyOff.slice(0, m);
    const keyList = alloc(n);
    for (let i = 0; i < n; i++) keyList[fill[uniqOf[i]]++] = rankOf(keys[i]);
    // 3. File each distinct set under its rarest tag. The filing table is indexed by tag id, or,
    // when ids are sparse (far more ids than tags held), by the rank among the ids held.
    const tagValues = maxTag >= 2 * sTags.length + (1 << 20) ? sortedDistinct(sTags) : null;
    const tagCount = tagValues === null ? maxTag + 1 : tagValues.length;
    const rankTag = tagValues === null ? (t: number): number => t : (t: number): number => rankIn(tagValues, t);
    const df = new Uint32Array(tagCount);
    for (let k = 0; k < sTags.length; k++) df[rankTag(sTags[k])]++;
    const fileTag = new Uint32Array(m);
    const fileOff = new Uint32Array(tagCount + 1);
    // The empty set (a subset of every query) is filed under no tag: it is listed apart.
    let empty = -1;
    for (let u = 0; u < m; u++) {
      if (sOff[u] === sOff[u + 1]) {
        empty = u;
        continue;
      }
      let best = rankTag(sTags[sOff[u]]);
      for (let k = sOff[u] + 1; k < sOff[u + 1]; k++) {
        const r = rankTag(sTags[k]);
        if (df[r] < df[best]) best = r;
      }
      fileTag[u] = best;
      fileOff[best + 1]++;
    }
    for (let t = 0; t < tagCount; t++) fileOff[t + 1] += fileOff[t];
    const at = fileOff.slice(0, tagCount);
    const filed = new Uint32Array(m);
    for (let u = 0; u < m; u++) if (u !== empty) filed[at[fileTag[u]]++] = u;
    return new TagSetIndex({ offsets: sOff, tags: sTags }, keyOff, keyList, fileOff, filed.subarray(0, m - (empty < 0 ? 0 : 1)), n, maxKey + 1, empty, keyValues, tagValues);
  }

  stats(): TagIndexStats {
    const bytes = this.sets.offsets.byteLength + this.sets.tags.byteLength + this.keyOff.byteLength + this.keyList.byteLength + this.fileOff.byteLength + this.filed.byteLength + this.stamp.byteLength + (this.keyValues?.byteLength ?? 0);
    return { entries: this.entries, sets: this.sets.offsets.length - 1, tags: this.fileOff.length - 1, memoryBytes: bytes };
  }

  /**
   * The tagset and key tables (read only) for verification elsewhere (gpu/tag-verify.ts): keys in
   * keyList are ranks when keyValues is not null. In shared memory when loaded with `shared`.
   */
  verifyTables(): { setOff: Uint32Array; setTags: Uint32Array; keyOff: Uint32Array; keyList: Uint32Array; keyValues: Uint32Array | null } {
    return { setOff: this.sets.offsets, setTags: this.sets.tags, keyOff: this.keyOff, keyList: this.keyList, keyValues: this.keyValues };
  }

  /** Starts a query's match-unique: keys pushed with `pushKeys(u, out, true)` appear once. */
  private beginQuery(): void {
    if (++this.stampNow === 0xffffffff) {
      this.stamp.fill(0);
      this.stampNow = 1;
    }
  }

  /** Appends set u's keys to `out` (unique: those not yet given since beginQuery). */
  private pushKeys(u: number, out: number[], unique: boolean): void {
    const kl = this.keyList;
    for (let k = this.keyOff[u], end = this.keyOff[u + 1]; k < end; k++) {
      const key = kl[k];
      if (unique) {
        if (this.stamp[key] === this.stampNow) continue;
        this.stamp[key] = this.stampNow;
      }
      out.push(this.keyValues === null ? key : this.keyValues[key]);
    }
  }

  /** The keys matching query `q[from, to)` (ascending, distinct ids), appended to `out`. */
  matchInto(q: Uint32Array, from: number, to: number, unique: boolean, out: number[]): void {
    this.beginQuery();
    if (this.emptySet >= 0) this.pushKeys(this.emptySet, out, unique);
    const fo = this.fileOff;
    const tags = fo.length - 1;
    const tv = this.tagValues;
    for (let i = from; i < to; i++) {
      if (i > from && q[i] <= q[i - 1]) throw new RangeError(`tag index: a query's tags must be ascending and distinct, got ${q[i - 1]} then ${q[i]}`);
      let t = q[i];
      if (tv !== null) {
        t = rankIn(tv, t);
        if (tv[t] !== q[i]) continue;
      }
      if (t >= tags) continue;
      for (let k = fo[t], end = fo[t + 1]; k < end; k++) {
        const u = this.filed[k];
        if (isSubsetOf(this.sets, u, q, from, to)) this.pushKeys(u, out, unique);
      }
    }
  }

  /** Every query of `queries` (TagMatch's match, or match-unique with `unique`). */
  matchAll(queries: TagSetsView, unique: boolean): TagMatches {
    const nq = queries.offsets.length - 1;
    const offsets = new Uint32Array(nq + 1);
    const out: number[] = [];
    for (let j = 0; j < nq; j++) {
      this.matchInto(queries.tags, queries.offsets[j], queries.offsets[j + 1], unique, out);
      offsets[j + 1] = out.length;
    }
    return { offsets, keys: Uint32Array.from(out) };
  }
}
