/**
 * Limits and validation: the one place that decides what input is acceptable. Every engine
 * validates through here before it changes anything, so a rejected subscription leaves no trace.
 * Validation returns a normalised copy (the caller's objects are never retained).
 */
import { ValidationError, show } from './errors.js';
import { type Dfa, type PatternBudget, PatternError, SUBSCRIPTION_PATTERN_WORK, compilePattern } from './pattern.js';
import { quickTags, validateTags } from './tags.js';
import type { Constraint, Event, Filter, LatLon, Op, Subscription, Value, ValueType } from './types.js';

/** Most states a pattern's automaton may have (its next-state table has one byte per entry). */
export const MAX_DFA_STATES = 255;

export interface Limits {
  /** Largest filter radius in metres (smallest is anything > 0). */
  maxRadiusM: number;
  /** Largest event area radius in metres (0 = a point). */
  maxEventRadiusM: number;
  /** Attribute/constraint name length in UTF-8 bytes (at least 1). */
  maxNameBytes: number;
  /** String value length in UTF-8 bytes. */
  maxStringBytes: number;
  maxConstraintsPerFilter: number;
  maxFiltersPerSubscription: number;
  maxAttributesPerEvent: number;
  /** Subscription, device and event id length in UTF-8 bytes (at least 1). */
  maxIdBytes: number;
  /** A like or regex pattern's length in UTF-8 bytes. */
  maxPatternBytes: number;
  /** States of a pattern's automaton (its minimal DFA over code points). */
  maxPatternStates: number;
  /** Tags an event may carry (entries of its list, repeats included). */
  maxTagsPerEvent: number;
  /** Tags a filter may require (entries of its list, repeats included). */
  maxTagsPerFilter: number;
  /** A tag's length in UTF-8 bytes, normalised (at least 1). */
  maxTagBytes: number;
}

export const DEFAULT_LIMITS: Readonly<Limits> = Object.freeze({
  maxRadiusM: 1_000_000,
  maxEventRadiusM: 1_000_000,
  maxNameBytes: 64,
  maxStringBytes: 1024,
  maxConstraintsPerFilter: 32,
  maxFiltersPerSubscription: 64,
  maxAttributesPerEvent: 64,
  maxIdBytes: 128,
  maxPatternBytes: 256,
  maxPatternStates: 128,
  maxTagsPerEvent: 32,
  maxTagsPerFilter: 16,
  maxTagBytes: 64,
});

// Hard ceilings: engines size their encodings on these (e.g. the 8-bit constraint counters of CLCB §4).
const CEILINGS: Readonly<Limits> = Object.freeze({
  maxRadiusM: 2_000_000,
  maxEventRadiusM: 2_000_000,
  maxNameBytes: 1024,
  maxStringBytes: 65_536,
  maxConstraintsPerFilter: 255,
  maxFiltersPerSubscription: 4096,
  maxAttributesPerEvent: 1024,
  maxIdBytes: 1024,
  maxPatternBytes: 4096,
  maxPatternStates: MAX_DFA_STATES,
  maxTagsPerEvent: 1024,
  maxTagsPerFilter: 255,
  maxTagBytes: 1024,
});

/** Merges `partial` over the defaults, checking each value; unknown keys are errors. */
export function resolveLimits(partial: Partial<Limits> = {}): Limits {
  if (partial === null || typeof partial !== 'object' || Array.isArray(partial)) {
    throw new ValidationError('limits', `must be an object, got ${show(partial)}`);
  }
  const out: Limits = { ...DEFAULT_LIMITS };
  for (const [key, value] of Object.entries(partial)) {
    if (!Object.prototype.hasOwnProperty.call(DEFAULT_LIMITS, key)) throw new ValidationError(`limits.${key}`, 'unknown limit');
    if (value === undefined) continue;
    const k = key as keyof Limits;
    const ceiling = CEILINGS[k];
    const integral = k !== 'maxRadiusM' && k !== 'maxEventRadiusM';
    if (typeof value !== 'number' || !Number.isFinite(value) || value <= 0 || value > ceiling || (integral && !Number.isInteger(value))) {
      throw new ValidationError(`limits.${key}`, `must be ${integral ? 'an integer' : 'a number'} in (0, ${ceiling}], got ${show(value)}`);
    }
    out[k] = value;
  }
  return out;
}

// ---- normalised forms, what engines store ----

export interface NConstraint {
  readonly name: string;
  readonly op: Op;
  /** The value's type; null for `exists`. */
  readonly type: ValueType | null;
  readonly value: Value | null;
  /**
   * like / regex: the pattern's automaton, made once by validation. Not enumerable, so the
   * normalised form compares and serialises as before; a copy without it gets it from
   * `patternDfa`.
   */
  readonly dfa?: Dfa;
}

export interface NArea {
  readonly radiusM: number;
  /** Fixed centre, or null when anchored to the owner's position. */
  readonly center: LatLon | null;
}

export interface NFilter {
  readonly constraints: readonly NConstraint[];
  readonly area: NArea | null;
  /** The tags an event must carry: normalised (T2), distinct, sorted; empty for none. */
  readonly tags: readonly string[];
}

export interface NSubscription {
  readonly id: string;
  readonly owner: string;
  readonly filters: readonly NFilter[];
}

export interface NEvent {
  readonly id: string;
  readonly lat: number;
  readonly lon: number;
  readonly radiusM: number;
  readonly names: readonly string[];
  readonly values: readonly Value[];
  /** The event's tags: normalised (T2), distinct, sorted; empty for none. */
  readonly tags: readonly string[];
}

// ---- helpers ----

export function utf8Bytes(s: string): number {
  return Buffer.byteLength(s, 'utf8');
}

// String.prototype.isWellFormed is in Node 20 (V8 11.3); ES2024 typings are not in our lib.
const isWellFormed = (s: string): boolean => (s as unknown as { isWellFormed(): boolean }).isWellFormed();

export function checkString(field: string, v: unknown, minBytes: number, maxBytes: number): string {
  if (typeof v !== 'string') throw new ValidationError(field, `must be a string, got ${typeof v === 'object' ? show(v) : typeof v}`);
  // UTF-16 length bounds the UTF-8 length within a factor of 3: reject huge strings before measuring.
  if (v.length > maxBytes) throw new ValidationError(field, `must be at most ${maxBytes} UTF-8 bytes, got ${v.length > 3 * maxBytes ? 'more' : utf8Bytes(v)}`);
  if (!isWellFormed(v)) throw new ValidationError(field, 'must be well-formed Unicode (no lone surrogates)');
  const n = utf8Bytes(v);
  if (n < minBytes) throw new ValidationError(field, `must be at least ${minBytes} UTF-8 byte${minBytes === 1 ? '' : 's'}, got ${n}`);
  if (n > maxBytes) throw new ValidationError(field, `must be at most ${maxBytes} UTF-8 bytes, got ${n}`);
  return v;
}

/**
 * True for an id checkId certainly accepts, decided without building its field name: 1 to
 * maxIdBytes/3 UTF-16 units (so at most maxIdBytes UTF-8 bytes) and well-formed. False says
 * nothing: checkId decides.
 */
export function plainId(v: string, limits: Limits): boolean {
  return v.length >= 1 && v.length * 3 <= limits.maxIdBytes && isWellFormed(v);
}

export function checkId(field: string, v: unknown, limits: Limits): string {
  return checkString(field, v, 1, limits.maxIdBytes);
}

export function checkFiniteIn(field: string, v: unknown, lo: number, hi: number, loOpen = false): number {
  if (typeof v !== 'number') throw new ValidationError(field, `must be a number, got ${typeof v === 'object' ? show(v) : typeof v}`);
  if (!Number.isFinite(v)) throw new ValidationError(field, `must be finite, got ${show(v)}`);
  if (v < lo || v > hi || (loOpen && v === lo)) {
    throw new ValidationError(field, `must be within ${loOpen ? '(' : '['}${lo}, ${hi}], got ${show(v)}`);
  }
  return v;
}

/** WGS84 coordinate ranges in degrees, both ends included: the one place they are written. */
export const LAT_RANGE = Object.freeze([-90, 90] as const);
export const LON_RANGE = Object.freeze([-180, 180] as const);

/**
 * True when both numbers are in range; NaN fails. The hot paths' one comparison chain; the
 * explaining checks (checkLat, checkLon) run only when it fails.
 */
export function inRange(lat: number, lon: number): boolean {
  return lat >= -90 && lat <= 90 && lon >= -180 && lon <= 180;
}

export function checkLat(field: string, v: unknown): number {
  return checkFiniteIn(field, v, LAT_RANGE[0], LAT_RANGE[1]);
}

export function checkLon(field: string, v: unknown): number {
  return checkFiniteIn(field, v, LON_RANGE[0], LON_RANGE[1]);
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  if (v === null || typeof v !== 'object' || Array.isArray(v)) return false;
  const proto = Object.getPrototypeOf(v);
  return proto === Object.prototype || proto === null;
}

export function checkObject(field: string, v: unknown): Record<string, unknown> {
  if (!isPlainObject(v)) throw new ValidationError(field, `must be an object, got ${show(v)}`);
  return v;
}

export function checkArray(field: string, v: unknown, min: number, max: number, what: string): unknown[] {
  if (!Array.isArray(v)) throw new ValidationError(field, `must be an array, got ${show(v)}`);
  if (v.length < min) throw new ValidationError(field, min === 1 ? `must have at least one ${what.replace(/s$/, '')}, got none` : `must have at least ${min} ${what}, got ${v.length}`);
  if (v.length > max) throw new ValidationError(field, `must have at most ${max} ${what}, got ${v.length}`);
  return v;
}

/** The type of a value, or throws naming `field`. Numbers must be finite. */
export function checkValue(field: string, v: unknown, limits: Limits): { type: ValueType; value: Value } {
  switch (typeof v) {
    case 'number':
      if (!Number.isFinite(v)) throw new ValidationError(field, `number must be finite, got ${show(v)}`);
      return { type: 'number', value: v };
    case 'boolean':
      return { type: 'bool', value: v };
    case 'string':
      return { type: 'string', value: checkString(field, v, 0, limits.maxStringBytes) };
    default:
      throw new ValidationError(field, `must be a number, string or bool, got ${show(v)}`);
  }
}

export function checkLatLon(field: string, v: unknown): LatLon {
  const o = checkObject(field, v);
  return { lat: checkLat(`${field}.lat`, o.lat), lon: checkLon(`${field}.lon`, o.lon) };
}

const OP_TYPES: Record<Op, readonly ValueType[]> = {
  eq: ['number', 'bool', 'string'],
  ne: ['number', 'bool', 'string'],
  lt: ['number', 'bool'],
  le: ['number', 'bool'],
  gt: ['number', 'bool'],
  ge: ['number', 'bool'],
  prefix: ['string'],
  suffix: ['string'],
  contains: ['string'],
  like: ['string'],
  regex: ['string'],
  exists: [],
};

/** OP_TYPES as bits (number 1, bool 2, string 4) by op, for the quick checks: one lookup a constraint. */
const OP_TYPE_BITS = new Map<string, number>(Object.entries(OP_TYPES).map(([op, ts]) => [op, ts.reduce((b, t) => b | (t === 'number' ? 1 : t === 'bool' ? 2 : 4), 0)]));

/** `budget`: compilation work the patterns of one subscription share (validateSubscription's). */
export function validateConstraint(field: string, c: unknown, limits: Limits, budget?: PatternBudget): NConstraint {
  const o = checkObject(field, c);
  const name = checkString(`${field}.name`, o.name, 1, limits.maxNameBytes);
  const op = o.op;
  if (typeof op !== 'string' || !Object.prototype.hasOwnProperty.call(OP_TYPES, op)) {
    throw new ValidationError(`${field}.op`, `must be one of ${Object.keys(OP_TYPES).join(', ')}, got ${show(op)}`);
  }
  const allowed = OP_TYPES[op as Op];
  if (op === 'exists') {
    if (o.value !== undefined && o.value !== null) throw new ValidationError(`${field}.value`, `must be absent for op exists, got ${show(o.value)}`);
    return { name, op, type: null, value: null };
  }
  if (o.value === undefined || o.value === null) throw new ValidationError(`${field}.value`, `is required for op ${op}`);
  const { type, value } = checkValue(`${field}.value`, o.value, limits);
  if (!allowed.includes(type)) {
    throw new ValidationError(`${field}.value`, `op ${op} takes a ${allowed.join(' or ')} value, got a ${type}`);
  }
  const out: NConstraint = { name, op: op as Op, type, value };
  if (op === 'like' || op === 'regex') {
    const p = value as string;
    const bytes = utf8Bytes(p);
    if (bytes > limits.maxPatternBytes) throw new ValidationError(`${field}.value`, `pattern must be at most ${limits.maxPatternBytes} bytes, got ${bytes}`);
    let dfa: Dfa;
    try {
      dfa = compiled(op, p, limits.maxPatternStates, budget);
    } catch (err) {
      if (err instanceof PatternError) throw new ValidationError(`${field}.value`, `${op} pattern ${show(p)}: ${err.rule}`);
      throw err;
    }
    Object.defineProperty(out, 'dfa', { value: dfa, enumerable: false });
  }
  return out;
}

/**
 * Automata made lately, and patterns refused lately, by (op, state limit, pattern): subscribers
 * share patterns, a load repeats them, and a client that retries a refused pattern costs one
 * lookup. Bounded in entries and in table bytes; the oldest go first.
 */
const automata = new Map<string, Dfa | PatternError>();
const AUTOMATA_KEPT = 4096;
const AUTOMATA_BYTES = 8 << 20;
let automataBytes = 0;

const dfaBytes = (d: Dfa | PatternError): number => (d instanceof PatternError ? 64 : d.next.length + 4 * d.bounds.length + d.accept.length + 64);

/** The pattern's automaton, from the cache or compiled (and kept); throws the PatternError it got. */
function compiled(op: 'like' | 'regex', p: string, maxStates: number, budget?: PatternBudget): Dfa {
  const key = `${op}\u0000${maxStates}\u0000${p}`;
  let d = automata.get(key);
  if (d === undefined) {
    try {
      d = compilePattern(op, p, maxStates, budget);
    } catch (err) {
      if (!(err instanceof PatternError)) throw err;
      // A pattern refused only because its subscription's budget ran out is not remembered as bad.
      if (budget !== undefined && budget.left < 0) throw err;
      d = err;
    }
    automata.set(key, d);
    automataBytes += dfaBytes(d);
    while (automata.size > AUTOMATA_KEPT || automataBytes > AUTOMATA_BYTES) {
      const [k, v] = automata.entries().next().value as [string, Dfa | PatternError];
      automata.delete(k);
      automataBytes -= dfaBytes(v);
    }
  }
  if (d instanceof PatternError) throw d;
  return d;
}

/**
 * The automaton of a like / regex constraint: the one validation made, or (for a copy that lost
 * it, e.g. one passed between threads) compiled again, which gives the same minimal DFA.
 */
export function patternDfa(c: NConstraint): Dfa {
  if (c.dfa !== undefined) return c.dfa;
  if (c.op !== 'like' && c.op !== 'regex') throw new Error(`patternDfa: op ${c.op} has no pattern`);
  const dfa = compiled(c.op, c.value as string, MAX_DFA_STATES);
  if (Object.isExtensible(c)) Object.defineProperty(c, 'dfa', { value: dfa, enumerable: false });
  return dfa;
}

export function validateFilter(field: string, f: unknown, limits: Limits, budget?: PatternBudget): NFilter {
  const o = checkObject(field, f);
  const cs = checkArray(`${field}.constraints`, o.constraints ?? [], 0, limits.maxConstraintsPerFilter, 'constraints');
  // Index loops, not map(): map() skips the holes of a sparse array, which must be rejected.
  const constraints: NConstraint[] = new Array(cs.length);
  for (let i = 0; i < cs.length; i++) constraints[i] = validateConstraint(`${field}.constraints[${i}]`, cs[i], limits, budget);
  let area: NArea | null = null;
  if (o.area !== undefined && o.area !== null) {
    const a = checkObject(`${field}.area`, o.area);
    const radiusM = checkFiniteIn(`${field}.area.radiusM`, a.radiusM, 0, limits.maxRadiusM, true);
    const center = a.center === undefined || a.center === null ? null : checkLatLon(`${field}.area.center`, a.center);
    area = { radiusM, center };
  }
  const tags = validateTags(`${field}.tags`, o.tags, limits.maxTagsPerFilter, limits.maxTagBytes);
  return { constraints, area, tags };
}

/** Validates a whole subscription; throws on the first violation, naming its field. */
export function validateSubscription(s: unknown, limits: Limits, field = 'subscription'): NSubscription {
  return quickSubscription(s, limits) ?? explainSubscription(s, limits, field);
}

/**
 * The normalised subscription when `s` is valid and holds no like / regex constraint, decided
 * without building a field path or an error; else null (explainSubscription then decides and
 * names the field). A bulk load validates millions: most of the explaining check's cost was the
 * field paths it built for every constraint. Exported for tests.
 */
export function quickSubscription(s: unknown, limits: Limits): NSubscription | null {
  return scanSubscription(s, limits, true) as NSubscription | null;
}

/**
 * True when `s` is valid, holds no like / regex constraint and no tags, so that an engine can read
 * it as given in place of its normalised form (which differs only in what reading it need not
 * tell apart: a missing list or area, a missing `type`); quickSubscription's checks, nothing
 * built. False says nothing more: the caller validates it (and gets its normalised form or the
 * error naming the field). The fast engine's bulk load: the normalised copies were most of its
 * allocations.
 */
export function plainSubscription(s: unknown, limits: Limits): s is Subscription {
  return scanSubscription(s, limits, false) === true;
}

/**
 * What an engine that reads plain subscriptions reads of a filter: its normalised form, or the
 * filter as given when plainSubscription() accepted its subscription (a list or area may be missing
 * there, and a constraint has no `type`: the value's own type says it, `exists` has none).
 */
export interface FilterView {
  readonly constraints?: readonly { readonly name: string; readonly op: Op; readonly value?: Value | null }[];
  readonly area?: { readonly radiusM: number; readonly center?: LatLon | null } | null;
  readonly tags?: readonly string[];
}

/** A subscription an engine reads (`FilterView`): normalised, or as given when plain. */
export interface SubscriptionView {
  readonly id: string;
  readonly owner: string;
  readonly filters: readonly FilterView[];
}

/** quickSubscription (`build`) or plainSubscription (not: true or null, nothing allocated). */
function scanSubscription(s: unknown, limits: Limits, build: boolean): NSubscription | true | null {
  if (!isPlainObject(s)) return null;
  const id = s.id;
  const owner = s.owner;
  if (!okString(id, 1, limits.maxIdBytes) || !okString(owner, 1, limits.maxIdBytes)) return null;
  const fs = s.filters;
  if (!Array.isArray(fs) || fs.length < 1 || fs.length > limits.maxFiltersPerSubscription) return null;
  const filters: NFilter[] | null = build ? new Array(fs.length) : null;
  for (let i = 0; i < fs.length; i++) {
    const f = fs[i];
    if (!isPlainObject(f)) return null;
    const cs = f.constraints ?? [];
    if (!Array.isArray(cs) || cs.length > limits.maxConstraintsPerFilter) return null;
    const constraints: NConstraint[] | null = build ? new Array(cs.length) : null;
    for (let j = 0; j < cs.length; j++) {
      const c = cs[j];
      if (!isPlainObject(c)) return null;
      const name = c.name;
      const op = c.op;
      const allowed = typeof op === 'string' ? OP_TYPE_BITS.get(op) : undefined;
      if (allowed === undefined || !okString(name, 1, limits.maxNameBytes)) return null;
      const v = c.value;
      if (op === 'exists') {
        if (v !== undefined && v !== null) return null;
        if (constraints !== null) constraints[j] = { name, op, type: null, value: null };
        continue;
      }
      // Patterns compile under a budget the explaining check keeps.
      if (op === 'like' || op === 'regex') return null;
      let type: ValueType;
      if (typeof v === 'number') {
        if (!Number.isFinite(v) || (allowed & 1) === 0) return null;
        type = 'number';
      } else if (typeof v === 'boolean') {
        if ((allowed & 2) === 0) return null;
        type = 'bool';
      } else if (typeof v === 'string') {
        if ((allowed & 4) === 0 || !okString(v, 0, limits.maxStringBytes)) return null;
        type = 'string';
      } else return null;
      if (constraints !== null) constraints[j] = { name, op: op as Op, type, value: v };
    }
    let area: NArea | null = null;
    const a = f.area;
    if (a !== undefined && a !== null) {
      if (!isPlainObject(a)) return null;
      const r = a.radiusM;
      if (typeof r !== 'number' || !(r > 0 && r <= limits.maxRadiusM)) return null;
      const c = a.center;
      let center: LatLon | null = null;
      if (c !== undefined && c !== null) {
        if (!isPlainObject(c)) return null;
        const lat = c.lat;
        const lon = c.lon;
        if (typeof lat !== 'number' || typeof lon !== 'number' || !inRange(lat, lon)) return null;
        if (build) center = { lat, lon };
      }
      if (build) area = { radiusM: r, center };
    }
    if (filters === null) {
      // Tags take their normal form (case, NFC, order): left to the building check.
      const t = f.tags;
      if (t !== undefined && t !== null && !(Array.isArray(t) && t.length === 0)) return null;
      continue;
    }
    const tags = quickTags(f.tags, limits.maxTagsPerFilter, limits.maxTagBytes);
    if (tags === null) return null;
    filters[i] = { constraints: constraints!, area, tags };
  }
  return filters === null ? true : { id, owner, filters };
}

/** The explaining validation of a subscription: throws naming the first offending field. Exported for tests. */
export function explainSubscription(s: unknown, limits: Limits, field = 'subscription'): NSubscription {
  const o = checkObject(field, s);
  const id = checkId(`${field}.id`, o.id, limits);
  const owner = checkId(`${field}.owner`, o.owner, limits);
  const fs = checkArray(`${field}.filters`, o.filters, 1, limits.maxFiltersPerSubscription, 'filters');
  const filters: NFilter[] = new Array(fs.length);
  // The patterns of one subscription share a bound on compilation work (V13).
  const budget: PatternBudget = { left: SUBSCRIPTION_PATTERN_WORK };
  for (let i = 0; i < fs.length; i++) filters[i] = validateFilter(`${field}.filters[${i}]`, fs[i], limits, budget);
  return { id, owner, filters };
}

/**
 * Validates an event: the fast check (no field paths built, no allocation beyond the result) and,
 * only when it refuses, the explaining check that names the field. Publishing is the hot path.
 */
export function validateEvent(e: unknown, limits: Limits, field = 'event'): NEvent {
  return checkedEvent(e, limits) ?? quickEvent(e, limits) ?? explainEvent(e, limits, field);
}

/** Returns the object it is given, so a subclass's private fields are added to that object. */
class Stamp {
  constructor(o: object) {
    return o;
  }
}

/**
 * An event's normal form, kept on the event object by a reader that checked the event against
 * `limits` as it decoded it (an event a gateway of the node sent over its private link, whose
 * byte lengths the reader has without measuring strings): `validateEvent(s)` take it instead of
 * checking the event again, where those limits are no looser than theirs. Private fields (as the
 * hub's own event fields): invisible to JSON, keys and equality, read through inline caches, gone
 * with the event. The event must not be changed after it is checked.
 */
class Checked extends Stamp {
  #normal: NEvent | undefined = undefined;
  #limits: Limits | undefined = undefined;

  static keep(e: object, n: NEvent, limits: Limits): void {
    if (!(#normal in e)) new Checked(e);
    (e as Checked).#normal = n;
    (e as Checked).#limits = limits;
  }

  static read(e: unknown, limits: Limits): NEvent | null {
    if (typeof e !== 'object' || e === null || !(#normal in e)) return null;
    const c = e as Checked;
    const by = c.#limits!;
    return by === limits || noLooser(by, limits) ? c.#normal! : null;
  }
}

/** Whether an event held to `by` keeps to `limits` (every event limit of `by` no looser); exported for packed event batches. */
export function eventLimitsWithin(by: Limits, limits: Limits): boolean {
  return by === limits || noLooser(by, limits);
}

/** The event limits a checked event was held to (by value; the last answer kept, the same two objects come again and again). */
let lastBy: Limits | null = null;
let lastFor: Limits | null = null;
let lastNoLooser = false;
function noLooser(by: Limits, limits: Limits): boolean {
  if (by === lastBy && limits === lastFor) return lastNoLooser;
  lastBy = by;
  lastFor = limits;
  lastNoLooser =
    by.maxIdBytes <= limits.maxIdBytes &&
    by.maxEventRadiusM <= limits.maxEventRadiusM &&
    by.maxAttributesPerEvent <= limits.maxAttributesPerEvent &&
    by.maxNameBytes <= limits.maxNameBytes &&
    by.maxStringBytes <= limits.maxStringBytes &&
    by.maxTagsPerEvent <= limits.maxTagsPerEvent &&
    by.maxTagBytes <= limits.maxTagBytes;
  return lastNoLooser;
}

/**
 * Keeps `normal` with the event as its normal form under `limits`, for a reader that has checked
 * every rule quickEvent checks against them (see Checked). The event must not change afterwards.
 */
export function keepCheckedEvent(e: Event, normal: NEvent, limits: Limits): void {
  Checked.keep(e, normal, limits);
}

/** The normal form a reader kept with the event (keepCheckedEvent), where its limits are no looser than `limits`; else null. Exported for tests. */
export function checkedEvent(e: unknown, limits: Limits): NEvent | null {
  return Checked.read(e, limits);
}

/**
 * A string of `min`..`max` UTF-8 bytes, well-formed. Short strings (attribute values, names, ids)
 * are measured in one JS pass that also finds lone surrogates: two native calls cost more.
 */
function okString(v: unknown, min: number, max: number): v is string {
  if (typeof v !== 'string') return false;
  const n = v.length;
  if (n > max) return false;
  if (n > 256) {
    if (!isWellFormed(v)) return false;
    const b = utf8Bytes(v);
    return b >= min && b <= max;
  }
  let b = n;
  for (let i = 0; i < n; i++) {
    const c = v.charCodeAt(i);
    if (c < 0x80) continue;
    if (c < 0x800) b += 1;
    else if (c < 0xd800 || c > 0xdfff) b += 2;
    else {
      // A high surrogate followed by a low one: 4 bytes for the pair (2 units counted so far).
      const lo = i + 1 < n ? v.charCodeAt(i + 1) : 0;
      if (c > 0xdbff || lo < 0xdc00 || lo > 0xdfff) return false;
      b += 2;
      i++;
    }
  }
  return b >= min && b <= max;
}

/** The normalised event when `e` is valid, else null (explainEvent then says why). Exported for tests. */
export function quickEvent(e: unknown, limits: Limits): NEvent | null {
  if (!isPlainObject(e)) return null;
  const id = e.id;
  if (!okString(id, 1, limits.maxIdBytes)) return null;
  const lat = e.lat;
  const lon = e.lon;
  if (typeof lat !== 'number' || typeof lon !== 'number' || !inRange(lat, lon)) return null;
  let radiusM = 0;
  const r = e.radiusM;
  if (r !== undefined && r !== null) {
    if (typeof r !== 'number' || !(r >= 0 && r <= limits.maxEventRadiusM)) return null;
    radiusM = r === 0 ? 0 : r;
  }
  const attrs = e.attributes;
  if (!isPlainObject(attrs)) return null;
  const names = Object.keys(attrs);
  if (names.length > limits.maxAttributesPerEvent) return null;
  const values: Value[] = new Array(names.length);
  for (let i = 0; i < names.length; i++) {
    const name = names[i];
    if (!okString(name, 1, limits.maxNameBytes)) return null;
    const v = attrs[name];
    if (typeof v === 'number') {
      if (!Number.isFinite(v)) return null;
    } else if (typeof v === 'string') {
      if (!okString(v, 0, limits.maxStringBytes)) return null;
    } else if (typeof v !== 'boolean') {
      return null;
    }
    values[i] = v;
  }
  const tags = quickTags(e.tags, limits.maxTagsPerEvent, limits.maxTagBytes);
  if (tags === null) return null;
  return { id, lat, lon, radiusM, names, values, tags };
}

/** The explaining validation: throws naming the first offending field. Exported for tests. */
export function explainEvent(e: unknown, limits: Limits, field = 'event'): NEvent {
  const o = checkObject(field, e);
  const id = checkId(`${field}.id`, o.id, limits);
  const lat = checkLat(`${field}.lat`, o.lat);
  const lon = checkLon(`${field}.lon`, o.lon);
  const radiusM = o.radiusM === undefined || o.radiusM === null ? 0 : checkFiniteIn(`${field}.radiusM`, o.radiusM, 0, limits.maxEventRadiusM);
  const attrs = checkObject(`${field}.attributes`, o.attributes);
  const names = Object.keys(attrs);
  if (names.length > limits.maxAttributesPerEvent) {
    throw new ValidationError(`${field}.attributes`, `must have at most ${limits.maxAttributesPerEvent} attributes, got ${names.length}`);
  }
  const values: Value[] = new Array(names.length);
  for (let i = 0; i < names.length; i++) {
    const name = names[i];
    checkString(`${field}.attributes[${show(name)}]`, name, 1, limits.maxNameBytes);
    values[i] = checkValue(`${field}.attributes[${show(name)}]`, attrs[name], limits).value;
  }
  const tags = validateTags(`${field}.tags`, o.tags, limits.maxTagsPerEvent, limits.maxTagBytes);
  return { id, lat, lon, radiusM: radiusM === 0 ? 0 : radiusM, names, values, tags };
}

export interface NPosition {
  readonly device: string;
  readonly lat: number;
  readonly lon: number;
}

export function validatePosition(device: unknown, lat: unknown, lon: unknown, limits: Limits, field = 'position'): NPosition {
  return { device: checkId(`${field}.device`, device, limits), lat: checkLat(`${field}.lat`, lat), lon: checkLon(`${field}.lon`, lon) };
}

/** Validates every event of a batch (holes included) before any is matched. */
export function validateEvents(events: unknown, limits: Limits, field = 'events'): NEvent[] {
  if (!Array.isArray(events)) throw new ValidationError(field, `must be an array, got ${show(events)}`);
  const out: NEvent[] = new Array(events.length);
  for (let i = 0; i < events.length; i++) out[i] = checkedEvent(events[i], limits) ?? quickEvent(events[i], limits) ?? explainEvent(events[i], limits, `${field}[${i}]`);
  return out;
}

export function validatePositions(updates: unknown, limits: Limits, field = 'positions'): NPosition[] {
  if (!Array.isArray(updates)) throw new ValidationError(field, `must be an array, got ${show(updates)}`);
  const out: NPosition[] = new Array(updates.length);
  for (let i = 0; i < updates.length; i++) {
    const u = updates[i];
    // The hot path: no field path is built unless the update is refused.
    if (isPlainObject(u)) {
      const { device, lat, lon } = u;
      if (okString(device, 1, limits.maxIdBytes) && typeof lat === 'number' && typeof lon === 'number' && inRange(lat, lon)) {
        out[i] = { device, lat, lon };
        continue;
      }
    }
    const o = checkObject(`${field}[${i}]`, u);
    out[i] = validatePosition(o.device, o.lat, o.lon, limits, `${field}[${i}]`);
  }
  return out;
}

export type { Constraint, Event, Filter, Subscription };
