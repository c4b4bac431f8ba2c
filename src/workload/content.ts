/**
 * Content (attributes and constraints) with a controllable selectivity.
 *
 * CLCB Table 1 asks for filters of 3–5 constraints over 100 names, events of 3–5 attributes, and
 * filters that each match 0.5% of events on average; CCM Table 1 gives the operator mix (numbers:
 * = != > <, strings: = != contains prefix, 25% each) and 100 values. Drawing names independently
 * for events and filters makes a filter with 4 constraints almost never find all its names in an
 * event of 4 attributes, so selectivity would be ~0. Instead:
 *
 *  - There are T event types; type t has a schema of 3–5 names. An event of type t carries exactly
 *    its schema's attributes, each value uniform over the name's `values` distinct values.
 *  - A filter is written for one type and constrains names of its schema (a name repeats, forming a
 *    range, when the filter has more constraints than the schema has names).
 *  - Every candidate constraint's satisfaction probability q is known exactly (a bitset over the
 *    value indices), so a filter's expected selectivity is (1/T)·Π q over its names. The values are
 *    picked greedily so that this product meets a per-filter target.
 *  - Some operators have a fixed q (= hits 1 of 100 values, != 99 of 100), so a filter holding an
 *    equality cannot reach 0.5% when T is large; the shortfall is carried forward to the next
 *    filters (error diffusion), so the average over all filters lands on the target.
 *
 * Constraint objects are interned and frozen: every filter that says `a07 > 42` holds the same
 * object, which keeps 10 M filters in a few GB. Engines copy what they store (limits.ts), so
 * sharing is safe.
 */
import type { Constraint, Op, Value } from '../model/types.js';
import { compilePattern, dfaMatches } from '../model/pattern.js';
import { Prng, Zipf, sampleCumulative } from './prng.js';

export type NameDistribution = 'uniform' | 'zipf';
export type OpWeights = Partial<Record<Op, number>>;

export const NUMERIC_OPS: readonly Op[] = ['eq', 'ne', 'lt', 'le', 'gt', 'ge', 'exists'];
export const STRING_OPS: readonly Op[] = ['eq', 'ne', 'prefix', 'suffix', 'contains', 'like', 'regex', 'exists'];

export interface ContentOptions {
  names: number;
  nameDistribution: NameDistribution;
  nameZipfExponent: number;
  eventTypes: number;
  selectivity: number;
  values: number;
  numericFraction: number;
  numericOps: OpWeights;
  stringOps: OpWeights;
  constraintsMin: number;
  constraintsMax: number;
  attributesMin: number;
  attributesMax: number;
}

/**
 * The string vocabulary's syllables. They are prefix-free with distinct first characters, so every
 * syllable sequence spells a distinct string; several are multi-byte in UTF-8 (2, 3 and 4 bytes) so
 * that byte-wise string operators are exercised ("café", "東京", "😀").
 */
export const SYLLABLES: readonly string[] = Object.freeze(['ca', 'fé', '東京', '😀', 'lu', 'ro']);

/**
 * The candidate constraints of one (name, operator), sorted by q, in flat arrays: candidates are
 * drawn at random for every filter, and chasing one object per candidate cost more than the rest
 * of the generator together (cache misses).
 */
interface OpTable {
  readonly op: Op;
  /** Every candidate has the same q (=, !=, exists): nothing to tune. */
  readonly fixed: boolean;
  readonly size: number;
  /** Distinct log(q), ascending. */
  readonly logLevels: Float64Array;
  /** Candidates of level l are levelStart[l] .. levelStart[l+1]-1. */
  readonly levelStart: Int32Array;
  /** How many of the name's V values satisfy candidate i. */
  readonly counts: Int32Array;
  /** Bitset over value indices of candidate i, at i·words. */
  readonly bits: Uint32Array;
  readonly constraints: readonly Constraint[];
}

export interface NameInfo {
  readonly name: string;
  readonly type: 'number' | 'string';
  /** The V values an event may carry, by value index (numbers ascending). */
  readonly values: readonly Value[];
  readonly tables: readonly OpTable[];
  /** Cumulative op weights over `tables`. */
  readonly opCum: Float64Array;
}

// ---- vocabulary ----

/** Share of a range each syllable takes when the vocabulary tree splits it (Zipf-like, halving). */
const SPLIT = [1 / 2, 1 / 4, 1 / 8, 1 / 16, 1 / 32, 1 / 32];

/**
 * V distinct strings as the leaves of a syllable tree: each node splits its range of value indices
 * among the syllables in shares 1/2, 1/4, 1/8, ... until one value is left. So syllable-aligned
 * prefixes select 1/2, 1/4, 1/8, 1/4·1/2, ... of the values and common syllables occur in most
 * words: prefix and contains constraints can be tuned from q ≈ 1/V up to q ≈ 0.9. The words are
 * prefix-free (no word is a prefix of another), 1 to ~log2(V)+1 syllables long.
 */
export function buildVocabulary(v: number): { words: string[]; syllables: string[][] } {
  const syllables: string[][] = [];
  const build = (lo: number, hi: number, path: string[]): void => {
    const n = hi - lo;
    if (n === 1) {
      syllables.push(path.length === 0 ? [SYLLABLES[0]] : path);
      return;
    }
    // Split n among the syllables: every part gets at least 1 while values remain; at most n parts.
    const parts = Math.min(n, SYLLABLES.length);
    const sizes: number[] = new Array(parts).fill(1);
    let left = n - parts;
    let share = 0;
    for (let j = 0; j < parts; j++) share += SPLIT[j];
    for (let j = 0; j < parts && left > 0; j++) {
      const extra = j === parts - 1 ? left : Math.min(left, Math.round(((n - parts) * SPLIT[j]) / share));
      sizes[j] += extra;
      left -= extra;
    }
    let at = lo;
    for (let j = 0; j < parts; j++) {
      build(at, at + sizes[j], [...path, SYLLABLES[j]]);
      at += sizes[j];
    }
  };
  build(0, v, []);
  return { words: syllables.map((p) => p.join('')), syllables };
}

// ---- bitsets over value indices ----

function bitsOf(v: number, pred: (i: number) => boolean): { bits: Uint32Array; count: number } {
  const bits = new Uint32Array((v + 31) >>> 5);
  let count = 0;
  for (let i = 0; i < v; i++) {
    if (pred(i)) {
      bits[i >>> 5] |= 1 << (i & 31);
      count++;
    }
  }
  return { bits, count };
}

function popcount32(x: number): number {
  x = x - ((x >>> 1) & 0x55555555);
  x = (x & 0x33333333) + ((x >>> 2) & 0x33333333);
  x = (x + (x >>> 4)) & 0x0f0f0f0f;
  return Math.imul(x, 0x01010101) >>> 24;
}

interface RawCandidate {
  value: Value | undefined;
  bits: Uint32Array;
  count: number;
}

type Skeleton = Omit<OpTable, 'constraints'> & { readonly values: readonly (Value | undefined)[] };

/** The name-independent part of a table: candidates sorted by q, bitsets, levels. */
function buildSkeleton(op: Op, raw: readonly RawCandidate[], v: number): Skeleton | null {
  // Never-true constraints are useless; always-true ones (other than exists) are noise.
  const kept = raw.filter((r) => r.count > 0 && (op === 'exists' || r.count < v)).sort((a, b) => a.count - b.count);
  const size = kept.length;
  if (size === 0) return null;
  const words = (v + 31) >>> 5;
  const counts = Int32Array.from(kept, (r) => r.count);
  const bits = new Uint32Array(size * words);
  kept.forEach((r, i) => bits.set(r.bits, i * words));
  const logLevels: number[] = [];
  const levelStart: number[] = [];
  for (let i = 0; i < size; i++) {
    if (i === 0 || counts[i] !== counts[i - 1]) {
      logLevels.push(Math.log(counts[i] / v));
      levelStart.push(i);
    }
  }
  levelStart.push(size);
  return {
    op,
    fixed: logLevels.length === 1,
    size,
    logLevels: Float64Array.from(logLevels),
    levelStart: Int32Array.from(levelStart),
    counts,
    bits,
    values: kept.map((r) => r.value),
  };
}

/** A name's table: the shared skeleton plus that name's (frozen, interned) constraint objects. */
function buildTable(name: string, sk: Skeleton): OpTable {
  const op = sk.op;
  const constraints = sk.values.map((value): Constraint => (op === 'exists' ? Object.freeze({ name, op }) : Object.freeze({ name, op, value })));
  return { op, fixed: sk.fixed, size: sk.size, logLevels: sk.logLevels, levelStart: sk.levelStart, counts: sk.counts, bits: sk.bits, constraints };
}

function numericRaw(op: Op, v: number, values: readonly number[]): RawCandidate[] {
  if (op === 'exists') return [{ value: undefined, ...bitsOf(v, () => true) }];
  const out: RawCandidate[] = [];
  for (let k = 0; k < v; k++) {
    let pred: (i: number) => boolean;
    switch (op) {
      case 'eq': pred = (i) => i === k; break;
      case 'ne': pred = (i) => i !== k; break;
      case 'lt': pred = (i) => i < k; break;
      case 'le': pred = (i) => i <= k; break;
      case 'gt': pred = (i) => i > k; break;
      case 'ge': pred = (i) => i >= k; break;
      default: throw new Error(`workload: ${op} is not a numeric operator`);
    }
    out.push({ value: values[k], ...bitsOf(v, pred) });
  }
  return out;
}

function stringRaw(op: Op, words: readonly string[], syllables: readonly string[][]): RawCandidate[] {
  const v = words.length;
  if (op === 'exists') return [{ value: undefined, ...bitsOf(v, () => true) }];
  if (op === 'eq') return words.map((s, k) => ({ value: s, ...bitsOf(v, (i) => i === k) }));
  if (op === 'ne') return words.map((s, k) => ({ value: s, ...bitsOf(v, (i) => i !== k) }));
  // Operands are syllable-aligned pieces of vocabulary words; q is counted over the actual
  // strings with the real string predicate, so accidental cross-syllable hits are accounted for.
  const pieces = new Set<string>();
  for (const parts of syllables) {
    const w = parts.length;
    if (op === 'prefix') for (let l = 1; l <= w; l++) pieces.add(parts.slice(0, l).join(''));
    else if (op === 'suffix') for (let l = 1; l <= w; l++) pieces.add(parts.slice(w - l).join(''));
    else if (op === 'contains') for (let a = 0; a < w; a++) for (let b = a + 1; b <= w; b++) pieces.add(parts.slice(a, b).join(''));
    else if (op === 'like' || op === 'regex') for (const p of patternsOf(op, parts)) pieces.add(p);
    else throw new Error(`workload: ${op} is not a string operator`);
  }
  if (op === 'like' || op === 'regex') {
    // The predicate is the pattern's own automaton (src/model/pattern.ts), compiled once per pattern.
    return [...pieces].sort().map((p) => {
      const dfa = compilePattern(op, p, 255);
      return { value: p, ...bitsOf(v, (i) => dfaMatches(dfa, words[i])) };
    });
  }
  const test =
    op === 'prefix' ? (s: string, p: string) => s.startsWith(p) : op === 'suffix' ? (s: string, p: string) => s.endsWith(p) : (s: string, p: string) => s.includes(p);
  return [...pieces].sort().map((p) => ({ value: p, ...bitsOf(v, (i) => test(words[i], p)) }));
}

/**
 * Patterns over one word's syllables, shaped like what subscribers write: like "begins with",
 * "ends with", "contains", "one character unknown"; regex anchored prefixes, alternations of
 * syllables, bounded repeats and classes.
 */
function patternsOf(op: 'like' | 'regex', parts: readonly string[]): string[] {
  const w = parts.length;
  const first = parts[0];
  const last = parts[w - 1];
  const esc = (s: string) => (op === 'like' ? s.replace(/[\\%_]/g, '\\$&') : s.replace(/[\\^$.*+?()[\]{}|/-]/g, '\\$&'));
  if (op === 'like') {
    const out = [`${esc(first)}%`, `%${esc(last)}`, `%${esc(parts[w >> 1])}%`];
    if (w >= 2) out.push(`${esc(first)}_%${esc(last)}`, `%${esc(parts[0])}%${esc(parts[w - 1])}`);
    return out;
  }
  const out = [`^${esc(first)}`, `${esc(last)}$`, `(?:${esc(first)}|${esc(last)})+$`, `^[a-m]${esc(parts.join('').slice(1, 3))}`];
  if (w >= 2) out.push(`^${esc(first)}.{1,6}${esc(last)}$`, `${esc(parts[1])}\\w*`);
  return out;
}

function numericValues(kind: number, v: number): number[] {
  const out: number[] = new Array(v);
  for (let i = 0; i < v; i++) {
    // Small integers, quarter steps (exact in binary) and tenths around zero (inexact, negative).
    out[i] = kind === 0 ? i : kind === 1 ? i * 0.25 : (i - Math.floor(v / 2)) / 10;
  }
  return out;
}

// ---- the model ----

export class ContentModel {
  readonly options: Readonly<ContentOptions>;
  readonly names: readonly NameInfo[];
  /** Name indices of each event type's schema. */
  readonly schemas: readonly Int32Array[];
  readonly vocabulary: readonly string[];
  readonly valueCount: number;
  /** Words per value bitset. */
  readonly words: number;

  constructor(options: ContentOptions, seed: number) {
    this.options = Object.freeze({ ...options });
    const o = options;
    const rng = new Prng(seed, 0xc0de);
    const v = o.values;
    this.valueCount = v;
    this.words = (v + 31) >>> 5;
    const vocab = buildVocabulary(v);
    this.vocabulary = Object.freeze(vocab.words);

    // Name types: exactly round(numericFraction·names) numeric, placed at random ranks (so a
    // zipf-popular name is as likely to be a string as a number).
    const numeric = Math.round(o.numericFraction * o.names);
    const isNumeric = rng.shuffle(Array.from({ length: o.names }, (_, i) => i < numeric));
    const pad = String(o.names - 1).length;

    const numericOps = NUMERIC_OPS.filter((op) => (o.numericOps[op] ?? 0) > 0);
    const stringOps = STRING_OPS.filter((op) => (o.stringOps[op] ?? 0) > 0);
    // Skeletons depend on the operator and the value set only: strings share one vocabulary,
    // numbers have three value sets; names share them and differ only in constraint objects.
    const skeletons = new Map<string, Skeleton | null>();
    const skeleton = (key: string, make: () => RawCandidate[], op: Op): Skeleton | null => {
      if (!skeletons.has(key)) skeletons.set(key, buildSkeleton(op, make(), v));
      return skeletons.get(key)!;
    };
    const numericValueSets = [0, 1, 2].map((k) => numericValues(k, v));

    const names: NameInfo[] = [];
    let numericSeen = 0;
    for (let n = 0; n < o.names; n++) {
      const name = `a${String(n).padStart(pad, '0')}`;
      const type = isNumeric[n] ? 'number' : 'string';
      const kind = type === 'number' ? numericSeen++ % 3 : 0;
      const values: readonly Value[] = type === 'number' ? numericValueSets[kind] : vocab.words;
      const ops = type === 'number' ? numericOps : stringOps;
      const weights = type === 'number' ? o.numericOps : o.stringOps;
      const tables: OpTable[] = [];
      const cum: number[] = [];
      let acc = 0;
      for (const op of ops) {
        const sk =
          type === 'string'
            ? skeleton(`s/${op}`, () => stringRaw(op, vocab.words, vocab.syllables), op)
            : skeleton(`n/${op}/${kind}`, () => numericRaw(op, v, numericValueSets[kind]), op);
        if (sk === null) continue;
        tables.push(buildTable(name, sk));
        acc += weights[op] ?? 0;
        cum.push(acc);
      }
      if (tables.length === 0) {
        throw new RangeError(`workload: no usable ${type} operator with ${v} values (every candidate constraint is always or never true)`);
      }
      names.push(Object.freeze({ name, type, values, tables, opCum: Float64Array.from(cum) }));
    }
    this.names = Object.freeze(names);
    this.schemas = Object.freeze(this.buildSchemas(rng));
  }

  private buildSchemas(rng: Prng): Int32Array[] {
    const o = this.options;
    const schemas: Int32Array[] = [];
    if (o.nameDistribution === 'uniform') {
      // Deal names from a shuffled deck so that every name is used and types overlap little.
      let deck: number[] = [];
      for (let t = 0; t < o.eventTypes; t++) {
        const k = rng.int(o.attributesMin, o.attributesMax);
        const s: number[] = [];
        while (s.length < k) {
          if (deck.length === 0) deck = rng.shuffle(Array.from({ length: o.names }, (_, i) => i));
          const n = deck.pop()!;
          if (!s.includes(n)) s.push(n);
        }
        schemas.push(Int32Array.from(s));
      }
    } else {
      // Popular names recur across many types (CCM's Zipf-names scenario: more candidate filters per event).
      const zipf = new Zipf(o.names, o.nameZipfExponent);
      for (let t = 0; t < o.eventTypes; t++) {
        const k = rng.int(o.attributesMin, o.attributesMax);
        const s: number[] = [];
        for (let tries = 0; s.length < k && tries < 1000 * k; tries++) {
          const n = zipf.sample(rng);
          if (!s.includes(n)) s.push(n);
        }
        for (let n = 0; s.length < k; n++) if (!s.includes(n)) s.push(n);
        schemas.push(Int32Array.from(s));
      }
    }
    return schemas;
  }

  /** Attributes of one event: a uniform type, then a uniform value per schema name. */
  eventAttributes(rng: Prng): Record<string, Value> {
    const schema = this.schemas[rng.int(0, this.schemas.length - 1)];
    const attrs: Record<string, Value> = {};
    for (let i = 0; i < schema.length; i++) {
      const info = this.names[schema[i]];
      attrs[info.name] = info.values[rng.int(0, this.valueCount - 1)];
    }
    return attrs;
  }

  /** A stateful source of filters' constraints; its selectivity bookkeeping is per source. */
  filterSource(rng: Prng): FilterSource {
    return new FilterSource(this, rng);
  }
}

const JOINT_SAMPLES = 8;

export class FilterSource {
  private readonly m: ContentModel;
  private readonly rng: Prng;
  private readonly target: number;
  private readonly maxSel: number;
  /** Error-diffusion carry: target minus achieved expected selectivity, summed so far. */
  private carry = 0;
  // Scratch, sized for the largest filter.
  private readonly tmp: Int32Array;
  private readonly nameIdx: Int32Array;
  private readonly tables: OpTable[];
  private readonly slotName: Int32Array;
  private readonly slotCount: Int32Array;
  private readonly slotBits: Uint32Array;
  private slots = 0;
  /** log(i) for i = 0..V (log 0 = -Infinity, never used). */
  private readonly logN: Float64Array;
  /** Expected content selectivity of the last filter, and the running sum over all. */
  lastSelectivity = 0;
  sumSelectivity = 0;
  filters = 0;
  constraints = 0;

  constructor(model: ContentModel, rng: Prng) {
    this.m = model;
    this.rng = rng;
    const o = model.options;
    this.target = o.selectivity;
    this.maxSel = 1 / o.eventTypes;
    const maxC = Math.max(o.constraintsMax, 1);
    this.tmp = new Int32Array(o.attributesMax);
    this.nameIdx = new Int32Array(maxC);
    this.tables = new Array(maxC);
    this.slotName = new Int32Array(maxC);
    this.slotCount = new Int32Array(maxC);
    this.slotBits = new Uint32Array(maxC * model.words);
    this.logN = Float64Array.from({ length: model.valueCount + 1 }, (_, i) => Math.log(i));
  }

  /** The constraints of the next filter (a fresh array of shared, frozen constraint objects). */
  next(): Constraint[] {
    const m = this.m;
    const o = m.options;
    const rng = this.rng;
    const v = m.valueCount;
    const T = o.eventTypes;
    const schema = m.schemas[rng.int(0, T - 1)];
    const k = schema.length;
    const c = rng.int(o.constraintsMin, o.constraintsMax);
    const nm = this.nameIdx;
    const tmp = this.tmp;
    for (let i = 0; i < k; i++) tmp[i] = schema[i];
    const distinct = Math.min(c, k);
    for (let j = 0; j < distinct; j++) {
      const r = rng.int(j, k - 1);
      const t = tmp[j];
      tmp[j] = tmp[r];
      tmp[r] = t;
      nm[j] = tmp[j];
    }
    for (let j = k; j < c; j++) nm[j] = schema[rng.int(0, k - 1)];

    const tables = this.tables;
    let adjustable = 0;
    for (let j = 0; j < c; j++) {
      const info = m.names[nm[j]];
      const tb = info.tables[info.tables.length === 1 ? 0 : sampleCumulative(info.opCum, rng)];
      tables[j] = tb;
      if (!tb.fixed) adjustable++;
    }

    let want = this.target + this.carry;
    if (want > this.maxSel) want = this.maxSel;
    else if (want < this.target * 1e-3) want = this.target * 1e-3;
    // In log space: wanted and achieved products of q over the filter's names.
    const logP = Math.log(want * T);
    const logN = this.logN;
    let logA = 0;
    let dead = false; // two constraints on one name that no value satisfies together
    this.slots = 0;
    const out: Constraint[] = new Array(c);
    // Fixed-q operators first; the tunable ones then share what is left of the budget.
    for (let pass = 0; pass < 2; pass++) {
      for (let j = 0; j < c; j++) {
        const tb = tables[j];
        if (tb.fixed !== (pass === 0)) continue;
        let logF = tb.logLevels[0];
        if (pass === 1) {
          logF = dead ? 0 : (logP - logA) / adjustable;
          adjustable--;
        }
        const s = this.slotOf(nm[j]);
        if (s < 0) {
          const ci = pass === 0 ? rng.int(0, tb.size - 1) : pickLevel(tb, logF, rng);
          this.openSlot(nm[j], tb, ci);
          logA += logN[tb.counts[ci]] - logN[v];
          out[j] = tb.constraints[ci];
        } else {
          const before = this.slotCount[s];
          const ci = this.pickJoint(tb, s, logN[before] + logF, rng);
          const after = this.narrowSlot(s, tb, ci);
          if (after === 0) dead = true;
          else logA += logN[after] - logN[before];
          out[j] = tb.constraints[ci];
        }
      }
    }

    // No constraints at all: the filter matches every event, of any type.
    const sel = c === 0 ? 1 : dead ? 0 : Math.exp(logA) / T;
    this.lastSelectivity = sel;
    this.sumSelectivity += sel;
    this.filters++;
    this.constraints += c;
    const bound = 100 * this.target;
    this.carry += this.target - sel;
    if (this.carry > bound) this.carry = bound;
    else if (this.carry < -bound) this.carry = -bound;
    return out;
  }

  private slotOf(name: number): number {
    for (let s = 0; s < this.slots; s++) if (this.slotName[s] === name) return s;
    return -1;
  }

  private openSlot(name: number, tb: OpTable, ci: number): void {
    const s = this.slots++;
    const w = this.m.words;
    this.slotName[s] = name;
    this.slotCount[s] = tb.counts[ci];
    const off = s * w;
    const src = ci * w;
    for (let k = 0; k < w; k++) this.slotBits[off + k] = tb.bits[src + k];
  }

  private narrowSlot(s: number, tb: OpTable, ci: number): number {
    const w = this.m.words;
    const off = s * w;
    const src = ci * w;
    let n = 0;
    for (let k = 0; k < w; k++) {
      const x = this.slotBits[off + k] & tb.bits[src + k];
      this.slotBits[off + k] = x;
      n += popcount32(x);
    }
    this.slotCount[s] = n;
    return n;
  }

  /**
   * A second constraint on a name already constrained in this filter: q is no longer the
   * candidate's own, so a few candidates are scored on the joint count (all of them if none of
   * the sample intersects). Returns a candidate index.
   */
  private pickJoint(tb: OpTable, s: number, logWant: number, rng: Prng): number {
    const w = this.m.words;
    const off = s * w;
    const logN = this.logN;
    const sampled = tb.size > JOINT_SAMPLES;
    let best = -1;
    let bestScore = Infinity;
    for (let pass = 0; pass < 2 && best < 0; pass++) {
      // Second pass (only when no sampled candidate intersects): score every candidate.
      if (pass === 1 && !sampled) break;
      const n = pass === 0 && sampled ? JOINT_SAMPLES : tb.size;
      for (let i = 0; i < n; i++) {
        const ci = pass === 0 && sampled ? rng.int(0, tb.size - 1) : i;
        let hit = 0;
        for (let k = 0; k < w; k++) hit += popcount32(this.slotBits[off + k] & tb.bits[ci * w + k]);
        if (hit === 0) continue;
        const d = Math.abs(logN[hit] - logWant);
        if (d < bestScore) {
          bestScore = d;
          best = ci;
        }
      }
    }
    return best >= 0 ? best : rng.int(0, tb.size - 1);
  }
}

/** Index of a random candidate of the level whose log q is nearest to x. */
function pickLevel(tb: OpTable, x: number, rng: Prng): number {
  const lv = tb.logLevels;
  let lo = 0;
  let hi = lv.length - 1;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (lv[mid] < x) lo = mid + 1;
    else hi = mid;
  }
  if (lo > 0 && Math.abs(lv[lo - 1] - x) <= Math.abs(lv[lo] - x)) lo--;
  const start = tb.levelStart[lo];
  const n = tb.levelStart[lo + 1] - start;
  return n === 1 ? start : start + rng.int(0, n - 1);
}
