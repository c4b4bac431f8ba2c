/**
 * A seeded tag-set workload modelled on TagMatch's Twitter workload (TagMatch §4.2): a database
 * of users' interests, each a set of hashtags in one of the user's languages ("translated" by a
 * language prefix: `fr_cat`), sometimes with the id of a frequent publisher, and queries (tweets)
 * made from a database set plus a few extra tags, so that every query matches at least one set.
 *
 * Tags are produced as ids into a fixed dictionary (`tagText` spells them), in flat arrays, so a
 * database of hundreds of millions of sets fits in typed arrays: `offsets[i]..offsets[i+1]` in
 * `tags` are set i's tag ids, distinct and ascending.
 */
import { Prng, ZipfAlias, sampleCumulative } from './prng.js';

export interface TagWorkloadOptions {
  seed: number;
  /** Database tag sets. */
  sets: number;
  /** Distinct hashtags before translation. */
  hashtags: number;
  /** Zipf exponent of hashtag popularity. */
  tagExponent: number;
  /** Languages used (1..LANGUAGES.length); the weights are Twitter's language shares. */
  languages: number;
  /** Hashtags per set, uniform in [min, max]. */
  setTagsMin: number;
  setTagsMax: number;
  /** Frequent publishers (Zipf by activity, at most 2^22) whose id may join an interest, and the probability that one does. */
  publishers: number;
  publisherFraction: number;
  /** Users (keys); each set belongs to one, drawn uniformly, so a user holds several sets. */
  users: number;
  queries: number;
  /** Extra tags a query adds to the database set it starts from, uniform in [min, max]. */
  extraMin: number;
  extraMax: number;
}

/**
 * The defaults aim at the paper's interests (five tags on average, a publisher's id in most, as
 * most follows are of frequent writers) more than at the extremes: 2-5 hashtags and a publisher
 * 70% of the time average 4.2 tags. With single-tag interests (setTagsMin 1) a popular hashtag
 * alone is the interest of about 0.1% of all users, and every query carrying it fans out to that
 * many keys (thousands a query at 2M entries, hundreds of thousands at 212M): a measure of
 * copying keys, not of matching.
 */
export const DEFAULT_TAG_WORKLOAD: Readonly<TagWorkloadOptions> = Object.freeze({
  seed: 1,
  sets: 1_000_000,
  hashtags: 1_000_000,
  tagExponent: 0.8,
  languages: 10,
  setTagsMin: 2,
  setTagsMax: 5,
  publishers: 4_000_000,
  publisherFraction: 0.7,
  users: 1_400_000,
  queries: 10_000,
  extraMin: 2,
  extraMax: 4,
});

/** Language prefixes and their weights (shares of tweets by language, rounded). */
export const LANGUAGES: readonly (readonly [string, number])[] = Object.freeze([
  ['en', 34], ['ja', 14], ['es', 12], ['pt', 10], ['id', 6], ['ar', 6], ['fr', 5], ['ru', 5], ['tr', 4], ['ko', 4],
] as const);

/** Sets in flat arrays: set i's tag ids are `tags[offsets[i] .. offsets[i+1])`, ascending. */
export interface TagSets {
  readonly offsets: Uint32Array;
  readonly tags: Uint32Array;
}

export interface TagWorkload {
  readonly options: TagWorkloadOptions;
  readonly db: TagSets;
  /** The key (user) of each database set. */
  readonly keys: Uint32Array;
  readonly queries: TagSets;
  /** The language of each database set (an index into LANGUAGES). */
  readonly setLangs: Uint8Array;
  /** Distinct tag ids the dictionary can name: hashtags × languages, then publishers. */
  readonly dictionary: number;
}

function check(o: TagWorkloadOptions): void {
  const int = (k: keyof TagWorkloadOptions, lo: number, hi = 2 ** 31): void => {
    const v = o[k];
    if (!Number.isInteger(v) || v < lo || v > hi) throw new RangeError(`tag workload: ${k} must be an integer in [${lo}, ${hi}], got ${v}`);
  };
  int('sets', 1);
  int('hashtags', 1);
  int('languages', 1, LANGUAGES.length);
  int('setTagsMin', 1, 64);
  int('setTagsMax', o.setTagsMin, 64);
  int('publishers', 1, 1 << 22);
  int('users', 1);
  int('queries', 0);
  int('extraMin', 0, 64);
  int('extraMax', o.extraMin, 64);
  if (!(o.tagExponent >= 0 && o.tagExponent <= 4)) throw new RangeError(`tag workload: tagExponent must be in [0, 4], got ${o.tagExponent}`);
  if (!(o.publisherFraction >= 0 && o.publisherFraction <= 1)) throw new RangeError(`tag workload: publisherFraction must be in [0, 1], got ${o.publisherFraction}`);
  if (o.hashtags * o.languages + o.publishers > 2 ** 32) throw new RangeError('tag workload: the dictionary must have at most 2^32 tags');
}

/** The text of tag `id` of a workload's dictionary: `en_h123` (a hashtag) or `@p45` (a publisher). */
export function tagText(o: Pick<TagWorkloadOptions, 'hashtags' | 'languages'>, id: number): string {
  const hashtags = o.hashtags * o.languages;
  if (id < hashtags) return `${LANGUAGES[Math.floor(id / o.hashtags)][0]}_h${id % o.hashtags}`;
  return `@p${id - hashtags}`;
}

/** Sorts `a[from, to)` ascending and drops repeats; returns the new end. */
function sortUnique(a: Uint32Array, from: number, to: number): number {
  // Insertion sort: sets are short.
  for (let i = from + 1; i < to; i++) {
    const v = a[i];
    let j = i - 1;
    while (j >= from && a[j] > v) {
      a[j + 1] = a[j];
      j--;
    }
    a[j + 1] = v;
  }
  let w = from;
  for (let i = from; i < to; i++) if (i === from || a[i] !== a[w - 1]) a[w++] = a[i];
  return w;
}

/** Generates the workload; `progress` is called now and then with the sets made so far. */
export function tagWorkload(partial: Partial<TagWorkloadOptions> = {}, progress?: (sets: number) => void): TagWorkload {
  const o: TagWorkloadOptions = { ...DEFAULT_TAG_WORKLOAD, ...partial };
  check(o);
  const rng = new Prng(o.seed, 1);
  const zipf = new ZipfAlias(o.hashtags, o.tagExponent);
  const pubZipf = new ZipfAlias(o.publishers, 1);
  const langCum = new Float64Array(o.languages);
  let acc = 0;
  for (let l = 0; l < o.languages; l++) langCum[l] = acc += LANGUAGES[l][1];
  const hashtagIds = o.hashtags * o.languages;
  // Each user speaks one language (40%) or two (60%); a set is in one of its user's languages.
  const userLangs = new Uint8Array(o.users * 2);
  for (let u = 0; u < o.users; u++) {
    const a = sampleCumulative(langCum, rng);
    userLangs[2 * u] = a;
    userLangs[2 * u + 1] = rng.chance(0.6) ? sampleCumulative(langCum, rng) : a;
  }
  const maxPerSet = o.setTagsMax + 1;
  const offsets = new Uint32Array(o.sets + 1);
  let tags = new Uint32Array(Math.max(16, Math.ceil(o.sets * ((o.setTagsMin + o.setTagsMax) / 2 + o.publisherFraction + 0.5))));
  const keys = new Uint32Array(o.sets);
  const setLang = new Uint8Array(o.sets);
  let w = 0;
  for (let i = 0; i < o.sets; i++) {
    if (w + maxPerSet > tags.length) {
      const t = new Uint32Array(Math.ceil(tags.length * 1.25) + maxPerSet);
      t.set(tags.subarray(0, w));
      tags = t;
    }
    const user = rng.int(0, o.users - 1);
    keys[i] = user;
    const lang = userLangs[2 * user + (rng.chance(0.5) ? 1 : 0)];
    setLang[i] = lang;
    const n = rng.int(o.setTagsMin, o.setTagsMax);
    const start = w;
    for (let k = 0; k < n; k++) tags[w++] = lang * o.hashtags + zipf.sample(rng);
    if (rng.chance(o.publisherFraction)) tags[w++] = hashtagIds + pubZipf.sample(rng);
    w = sortUnique(tags, start, w);
    offsets[i + 1] = w;
    if (progress !== undefined && (i & 0xfffff) === 0xfffff) progress(i + 1);
  }
  const db: TagSets = { offsets, tags: tags.slice(0, w) };
  const base = { options: o, db, keys, setLangs: setLang, dictionary: hashtagIds + o.publishers };
  return { ...base, queries: tagQueries(base, o.sets, o.queries, o.seed, o.extraMin, o.extraMax) };
}

/**
 * Queries (TagMatch §4.2.2): each starts from a set drawn uniformly from the first `sets` of the
 * database, so it matches at least that one, and adds `extraMin`..`extraMax` hashtags in that
 * set's language, drawn by popularity.
 */
export function tagQueries(w: Pick<TagWorkload, 'options' | 'db' | 'setLangs'>, sets: number, count: number, seed: number, extraMin: number, extraMax: number): TagSets {
  const o = w.options;
  const zipf = new ZipfAlias(o.hashtags, o.tagExponent);
  const rng = new Prng(seed, 2);
  const offsets = new Uint32Array(count + 1);
  const tags = new Uint32Array(count * (o.setTagsMax + 1 + extraMax));
  let q = 0;
  for (let j = 0; j < count; j++) {
    const s = rng.int(0, sets - 1);
    const start = q;
    for (let k = w.db.offsets[s]; k < w.db.offsets[s + 1]; k++) tags[q++] = w.db.tags[k];
    const extra = rng.int(extraMin, extraMax);
    for (let k = 0; k < extra; k++) tags[q++] = w.setLangs[s] * o.hashtags + zipf.sample(rng);
    q = sortUnique(tags, start, q);
    offsets[j + 1] = q;
  }
  return { offsets, tags: tags.slice(0, q) };
}
