/**
 * Adversarial, seeded workloads for the differential tests. One file because every variant draws
 * from one generator and one PRNG stream: splitting it would make a variant's seed depend on
 * module boundaries. Each scenario is a fixed sequence of
 * operations (add, replace, remove, moves, handles, forgets, matches, batches) generated from a
 * variant's knobs and a seed with the test PRNG, so a failure names (variant, seed, step) and
 * replays exactly. The generator keeps its own model of the state only to aim its probes: events
 * on filter boundaries, ids to re-add, devices to move; it never decides what should match.
 *
 * What it aims at (docs/semantics.md): boundaries at d = r_f + r_e exactly, a few ulps off, and
 * at fractions and multiples of a boundary step around them (A2, X1): where a float32 distance
 * cannot decide and an engine must decide in float64 (X2). Also clusters of devices at (nearly)
 * the same point, the antimeridian (A8), the poles (A9), radii over six orders of magnitude,
 * event areas (A3), content-only and fixed-centre filters (A4, A5), unknown positions (A6),
 * multi-byte strings (C8-C12), numeric edges (C5), several constraints on one name (C14), mixed
 * types (C2), and interleaved moves, removals, replacements and re-adds (L2, L3, A7).
 */
import { EARTH_RADIUS_M, haversineM } from '../../src/model/geo.js';
import type { Constraint, Event, Filter, LatLon, Op as ConstraintOp, PositionUpdate, Subscription, Value } from '../../src/model/types.js';
import { Rng } from './rng.js';
import { boundaryStepM, destination, nextDown, nextUp, smallestRadius, wrapLon } from './sphere.js';
import { NUMBER_EDGES, STRING_EDGES } from './values.js';

// ---------------------------------------------------------------- operations

export type Op =
  | { kind: 'add'; sub: Subscription }
  | { kind: 'replace'; sub: Subscription }
  | { kind: 'remove'; id: string }
  | { kind: 'move'; device: string; lat: number; lon: number }
  | { kind: 'moves'; updates: PositionUpdate[] }
  /** openDevice, update at each point in turn, then release (and optionally update once more). */
  | { kind: 'handle'; device: string; points: LatLon[]; useAfterRelease: boolean }
  | { kind: 'forget'; device: string }
  | { kind: 'match'; event: Event }
  | { kind: 'batch'; events: Event[] };

export interface Step {
  ops: Op[];
}

export interface Scenario {
  variant: string;
  seed: number;
  steps: Step[];
}

// ---------------------------------------------------------------- knobs

type Geo = 'world' | 'clusters' | 'antimeridian' | 'north' | 'south' | 'city' | 'extremes' | 'mixed';
type Radii = 'log' | 'tiny' | 'city' | 'max' | 'mixed';
type Content = 'basic' | 'multibyte' | 'numeric' | 'ranges' | 'mixedTypes' | 'bool' | 'all' | 'patterns';

export interface Knobs {
  geo: Geo;
  radii: Radii;
  content: Content;
  /** Initial subscriptions. */
  subs: number;
  devices: number;
  steps: number;
  /** Events per step (≤ 100). */
  events: number;
  /** Mutations between two steps' events. */
  churn: number;
  maxFilters: number;
  maxConstraints: number;
  /** Probability that a filter has no area. */
  pNoArea: number;
  /** Probability that an area is fixed rather than anchored. */
  pFixed: number;
  /** Probability that an event has an area. */
  pEventArea: number;
  /** Probability that an event is placed on (or near) a filter's boundary. */
  pBoundary: number;
  /** Probability that a device never gets a position. */
  pUnpositioned: number;
  /** Probability that a churn operation is a deliberate error (duplicate add, bad batch, ...). */
  pInvalid: number;
  /** Probability that position updates go through a device handle. */
  pHandle: number;
  /**
   * Event kinds (0: off): a filter usually starts with `kind eq <one of them>` and an event usually
   * has one, so a device's many filters share a few equality values (the fast engine's buckets).
   */
  kinds: number;
  /**
   * Tags (T1-T7; 0: off): the probability that a filter requires tags and that an event carries
   * them, drawn Zipf-like from a vocabulary with case, `#`, NFC and script variants of each tag.
   */
  tags: number;
}

const BASE: Knobs = {
  geo: 'world',
  radii: 'log',
  content: 'basic',
  subs: 250,
  devices: 60,
  steps: 6,
  events: 60,
  churn: 30,
  maxFilters: 4,
  maxConstraints: 4,
  pNoArea: 0.15,
  pFixed: 0.25,
  pEventArea: 0.15,
  pBoundary: 0.25,
  pUnpositioned: 0.1,
  pInvalid: 0.03,
  pHandle: 0.1,
  kinds: 0,
  tags: 0,
};

export interface Variant {
  name: string;
  knobs: Partial<Knobs>;
}

export const VARIANTS: readonly Variant[] = [
  { name: 'uniform-world', knobs: {} },
  { name: 'zipf-clusters', knobs: { geo: 'clusters', radii: 'city', devices: 120, pBoundary: 0.3 } },
  { name: 'antimeridian', knobs: { geo: 'antimeridian', radii: 'mixed', pBoundary: 0.35 } },
  { name: 'north-pole', knobs: { geo: 'north', radii: 'mixed', pBoundary: 0.35 } },
  { name: 'south-pole', knobs: { geo: 'south', radii: 'tiny', pBoundary: 0.35 } },
  { name: 'log-radii', knobs: { radii: 'log', geo: 'mixed', pBoundary: 0.4 } },
  { name: 'tiny-radii', knobs: { radii: 'tiny', geo: 'city', pBoundary: 0.5 } },
  { name: 'event-areas', knobs: { pEventArea: 0.8, geo: 'mixed' } },
  { name: 'content-only', knobs: { pNoArea: 0.85, content: 'all' } },
  { name: 'fixed-centres', knobs: { pFixed: 0.9, geo: 'mixed' } },
  { name: 'multibyte-strings', knobs: { content: 'multibyte', geo: 'city', radii: 'city' } },
  { name: 'numeric-edges', knobs: { content: 'numeric', pNoArea: 0.4 } },
  { name: 'ranges-on-one-name', knobs: { content: 'ranges', maxConstraints: 6 } },
  { name: 'mixed-types', knobs: { content: 'mixedTypes', pNoArea: 0.4 } },
  { name: 'bools', knobs: { content: 'bool', pNoArea: 0.4 } },
  { name: 'unknown-positions', knobs: { pUnpositioned: 0.5, churn: 50, geo: 'city', radii: 'city' } },
  { name: 'churn', knobs: { churn: 120, steps: 8, events: 40, geo: 'clusters', radii: 'city' } },
  { name: 'boundary-probes', knobs: { pBoundary: 0.9, geo: 'mixed', radii: 'mixed', pEventArea: 0.4 } },
  { name: 'max-radius', knobs: { radii: 'max', pEventArea: 0.5, geo: 'world', subs: 150 } },
  { name: 'dense-filters', knobs: { subs: 40, maxFilters: 64, maxConstraints: 32, content: 'all', events: 40 } },
  { name: 'device-handles', knobs: { pHandle: 0.7, churn: 60, geo: 'clusters', radii: 'city' } },
  { name: 'city-high-match', knobs: { geo: 'city', radii: 'city', content: 'ranges', subs: 300, maxConstraints: 2 } },
  { name: 'coordinate-extremes', knobs: { geo: 'extremes', radii: 'mixed', pBoundary: 0.4 } },
  { name: 'invalid-ops', knobs: { pInvalid: 0.3, churn: 60 } },
  { name: 'kinds-per-device', knobs: { kinds: 4, devices: 6, subs: 360, maxFilters: 3, geo: 'city', radii: 'city', pFixed: 0.1, pNoArea: 0.1, pHandle: 0.3, churn: 90, steps: 8 } },
  { name: 'tags', knobs: { tags: 0.6, geo: 'city', radii: 'city', pNoArea: 0.35, churn: 40 } },
  { name: 'tags-only', knobs: { tags: 0.95, pNoArea: 0.9, maxConstraints: 1, subs: 400 } },
  { name: 'patterns', knobs: { content: 'patterns', geo: 'city', radii: 'city', pNoArea: 0.3, churn: 40 } },
  { name: 'everything', knobs: { geo: 'mixed', radii: 'mixed', content: 'all', pEventArea: 0.3, pBoundary: 0.4, pUnpositioned: 0.25, pHandle: 0.3, pInvalid: 0.05, churn: 80 } },
];

/** A stable seed per variant (FNV-1a of its name), so adding a variant never reseeds the others. */
export function variantSeed(name: string, salt = 0): number {
  let h = 0x811c9dc5 ^ salt;
  for (let i = 0; i < name.length; i++) h = Math.imul(h ^ name.charCodeAt(i), 0x01000193);
  return h >>> 0;
}

// ---------------------------------------------------------------- value pools

const NUMS: readonly number[] = [...NUMBER_EDGES, 0, 1, 2, 3, 4, 5, 10, 20, 0.5, 2.5, -3, 2 ** 53 + 1, -(2 ** 53), 1e-300, -1e-300];
const WORDS: readonly string[] = [
  ...STRING_EDGES, 'red', 'green', 'blue', 'bluegreen', 'Café', 'naïve', 'Ελλάδα', 'Москва', 'مرحبا', '東京都', '大阪', '🚲🚗', 'a\u0000b',
  '東'.repeat(341) + 'a', // exactly 1024 bytes
];
const BOOLS: readonly boolean[] = [false, true];
/** Values of `kind` with the `kinds` knob (an event may carry one no filter asks for). */
const KINDS: readonly string[] = ['red', 'green', 'blue', 'Café', 'naïve'];
/** Tags, popular first: ASCII, prefixed by a language, accented (NFC and NFD spell them alike), Greek with a final sigma, CJK, emoji. */
const TAG_WORDS: readonly string[] = ['food', 'traffic', 'en:news', 'jam', 'vegan', 'café', 'lunch', 'de:news', 'ΟΔΟΣ', '東京', '😀', 'a', 'naïve', 'x-y_z.1', 'Ω', 'ﬁ'];

interface NameSpec {
  name: string;
  /** Usual type of the name's values. */
  type: 'number' | 'string' | 'bool' | 'any';
}

const ADVERSARIAL_NAMES: readonly NameSpec[] = [
  { name: 'constructor', type: 'string' },
  { name: '__proto__', type: 'number' },
  { name: 'toString', type: 'bool' },
];

const CONTENT: Record<Exclude<Content, 'all' | 'patterns'>, readonly NameSpec[]> = {
  basic: [
    { name: 'kind', type: 'string' }, { name: 'price', type: 'number' }, { name: 'open', type: 'bool' },
    { name: 'tag', type: 'string' }, { name: 'n', type: 'number' }, { name: 'lvl', type: 'number' },
  ],
  multibyte: [
    { name: '名前', type: 'string' }, { name: 'é', type: 'string' }, { name: 'e\u0301', type: 'string' },
    { name: '😀', type: 'string' }, { name: 'tag', type: 'string' },
  ],
  numeric: [{ name: 'n1', type: 'number' }, { name: 'n2', type: 'number' }, { name: 'n3', type: 'number' }],
  ranges: [{ name: 't', type: 'number' }, { name: 'u', type: 'number' }],
  mixedTypes: [{ name: 'x', type: 'any' }, { name: 'y', type: 'any' }, { name: 'z', type: 'any' }],
  bool: [{ name: 'b1', type: 'bool' }, { name: 'b2', type: 'bool' }, { name: 'b3', type: 'bool' }],
};

const NUM_OPS: readonly ConstraintOp[] = ['eq', 'ne', 'lt', 'le', 'gt', 'ge'];
const STR_OPS: readonly ConstraintOp[] = ['eq', 'ne', 'prefix', 'suffix', 'contains'];

// ---------------------------------------------------------------- the generator

/**
 * The northernmost (0), southernmost (1), easternmost (2) or westernmost (3) point of the circle
 * (center, d): where a bounding box is tight, so where an index with a box one ulp too small
 * loses a match. East/west is the tangent point of a meridian: sin Δλ = sin δ / cos φ and
 * sin φ_P = sin φ / cos δ (Napier's rules); a circle around a pole has no such point, and its
 * northern/southern point is taken instead.
 */
export function extremePoint(center: LatLon, d: number, which: number): LatLon {
  const delta = d / EARTH_RADIUS_M;
  const phi = (center.lat * Math.PI) / 180;
  if (which >= 2) {
    const s = Math.sin(delta) / Math.cos(phi);
    const sp = Math.sin(phi) / Math.cos(delta);
    if (s < 1 && Math.abs(sp) < 1) {
      const dLon = (Math.asin(s) * 180) / Math.PI;
      return { lat: (Math.asin(sp) * 180) / Math.PI, lon: wrapLon(center.lon + (which === 2 ? dLon : -dLon)) };
    }
  }
  return destination(center.lat, center.lon, which % 2 === 0 ? 0 : 180, d);
}

const CLUSTER_CITIES: readonly LatLon[] = [
  { lat: 45.4642, lon: 9.19 }, { lat: 35.6762, lon: 139.6503 }, { lat: -33.8688, lon: 151.2093 }, { lat: 40.7128, lon: -74.006 },
  { lat: 64.1466, lon: -21.9426 }, { lat: -17.7134, lon: 178.065 }, { lat: 0, lon: 0 }, { lat: 78.2232, lon: 15.6267 },
];

class Generator {
  private readonly k: Knobs;
  private readonly rng: Rng;
  private readonly names: readonly NameSpec[];
  private readonly deviceIds: string[];
  private readonly positions = new Map<string, LatLon>();
  private readonly unpositioned = new Set<string>();
  private readonly subs = new Map<string, Subscription>();
  private readonly removed: string[] = [];
  private subSeq = 0;
  private eventSeq = 0;

  constructor(knobs: Knobs, seed: number) {
    this.k = knobs;
    this.rng = new Rng(seed);
    this.names =
      knobs.content === 'all' ? Object.values(CONTENT).flat() : knobs.content === 'patterns' ? [...CONTENT.basic, ...CONTENT.multibyte] : CONTENT[knobs.content];
    this.deviceIds = Array.from({ length: knobs.devices }, (_, i) => (i % 17 === 5 ? `端末-${i}` : i % 23 === 7 ? `📱${i}` : `dev${i}`));
    for (const d of this.deviceIds) if (this.rng.chance(knobs.pUnpositioned)) this.unpositioned.add(d);
  }

  // ---- geometry ----

  private geo(): Exclude<Geo, 'mixed'> {
    return this.k.geo === 'mixed' ? this.rng.pick(['world', 'clusters', 'antimeridian', 'north', 'south', 'city', 'extremes'] as const) : this.k.geo;
  }

  point(): LatLon {
    const r = this.rng;
    const g = this.geo();
    switch (g) {
      case 'world':
        return { lat: (Math.asin(2 * r.next() - 1) * 180) / Math.PI, lon: r.range(-180, 180) };
      case 'clusters': {
        const c = CLUSTER_CITIES[r.zipf(CLUSTER_CITIES.length, 1.3)];
        if (r.chance(0.3)) return { ...c }; // many devices at exactly the same point
        return destination(c.lat, c.lon, r.range(0, 360), r.logUniform(1e-4, 5000));
      }
      case 'antimeridian': {
        const side = r.chance(0.5) ? 1 : -1;
        const lon = r.chance(0.1) ? 180 * side : side * (180 - r.logUniform(1e-8, 3));
        const lat = r.chance(0.2) ? r.range(-89.9, 89.9) : r.range(-60, 60);
        return { lat, lon };
      }
      case 'north':
      case 'south': {
        const s = g === 'south' ? -1 : 1;
        const lat = r.chance(0.08) ? 90 * s : s * (90 - r.logUniform(1e-8, 0.1));
        const lon = r.chance(0.1) ? r.pick([-180, 180, 0, -0, 90, -90]) : r.range(-180, 180);
        return { lat, lon };
      }
      case 'city':
        return destination(45.4642, 9.19, r.range(0, 360), r.logUniform(0.01, 5000));
      case 'extremes': {
        const lats = [-90, -89.9999999, -0, 0, 89.9999999, 90, 45];
        const lons = [-180, -179.9999999, -0, 0, 179.9999999, 180, 90];
        return r.chance(0.6) ? { lat: r.pick(lats), lon: r.pick(lons) } : destination(r.pick(lats), r.pick(lons), r.range(0, 360), r.logUniform(0.01, 2e5));
      }
    }
  }

  private radius(): number {
    const r = this.rng;
    const kind = this.k.radii === 'mixed' ? r.pick(['log', 'tiny', 'city', 'max'] as const) : this.k.radii;
    switch (kind) {
      case 'log':
        return r.chance(0.03) ? r.pick([1e6, 1e-3, Number.MIN_VALUE * 1e10, 1]) : r.logUniform(1, 1e6);
      case 'tiny':
        return r.logUniform(0.5, 25);
      case 'city':
        return r.logUniform(5, 3000);
      case 'max':
        return r.chance(0.5) ? 1e6 : r.pick([nextDown(1e6), 999_000, 500_000, r.logUniform(1e5, 1e6)]);
    }
  }

  private eventRadius(): number | undefined {
    const r = this.rng;
    if (!r.chance(this.k.pEventArea)) return r.chance(0.1) ? 0 : undefined;
    if (this.k.radii === 'max') return r.chance(0.5) ? 1e6 : r.logUniform(1e3, 1e6);
    if (this.k.radii === 'tiny' || this.k.radii === 'city') return r.logUniform(0.1, 2000);
    return r.logUniform(0.01, 1e6);
  }

  // ---- content ----

  private value(type: NameSpec['type']): Value {
    const r = this.rng;
    const t = type === 'any' ? r.pick(['number', 'string', 'bool'] as const) : type;
    if (t === 'number') {
      if (this.k.content === 'ranges') return r.chance(0.7) ? r.int(21) : r.chance(0.5) ? r.int(41) / 2 : r.pick(NUMS);
      return r.pick(NUMS);
    }
    if (t === 'string') return r.pick(WORDS);
    return r.pick(BOOLS);
  }

  private nameSpec(): NameSpec {
    return this.rng.chance(0.03) ? this.rng.pick(ADVERSARIAL_NAMES) : this.rng.pick(this.names);
  }

  /** A code-point substring of s: a prefix, a suffix or any infix. */
  private piece(s: string, where: 'prefix' | 'suffix' | 'contains'): string {
    const cps = [...s];
    const n = cps.length;
    const len = this.rng.int(n + 1);
    const start = where === 'prefix' ? 0 : where === 'suffix' ? n - len : this.rng.int(n - len + 1);
    return cps.slice(start, start + len).join('');
  }

  private constraint(spec: NameSpec): Constraint {
    const r = this.rng;
    if (r.chance(0.06)) return { name: spec.name, op: 'exists' };
    // Usually the name's own type; sometimes another, which can then never be satisfied by it.
    let t = spec.type === 'any' ? r.pick(['number', 'string', 'bool'] as const) : spec.type;
    if (r.chance(0.08)) t = r.pick(['number', 'string', 'bool'] as const);
    if (t === 'string' && this.k.content === 'patterns' && r.chance(0.7)) return this.pattern(spec.name);
    if (t === 'string') {
      const op = r.pick(STR_OPS);
      const base = r.pick(WORDS);
      const value = op === 'prefix' || op === 'suffix' || op === 'contains' ? (r.chance(0.8) ? this.piece(base, op) : base) : base;
      return { name: spec.name, op, value };
    }
    return { name: spec.name, op: r.pick(NUM_OPS), value: this.value(t) };
  }

  /**
   * A like or regex constraint built from the words events carry (C16, C17): prefixes, suffixes
   * and infixes with wildcards, one code point unknown, alternations, classes, bounded repeats and
   * anchors, over multi-byte and astral text, the empty string and a 1024-byte value.
   */
  private pattern(name: string): Constraint {
    const r = this.rng;
    const w = r.pick(WORDS);
    const likeEsc = (s: string) => s.replace(/[\\%_]/g, '\\$&');
    const reEsc = (s: string) => s.replace(/[\\^$.*+?()[\]{}|/-]/g, '\\$&');
    const cut = (s: string, n: number) => [...s].slice(0, n).join('');
    if (r.chance(0.5)) {
      const cps = [...w];
      const forms = [
        () => `${likeEsc(this.piece(w, 'prefix'))}%`,
        () => `%${likeEsc(this.piece(w, 'suffix'))}`,
        () => `%${likeEsc(this.piece(w, 'contains'))}%`,
        () => {
          const k = r.int(cps.length + 1);
          return cps.map((c, i) => (i === k ? '_' : likeEsc(c))).join('') + (k === cps.length ? '_' : '');
        },
        () => likeEsc(cut(w, 60)),
        () => r.pick(['%', '', '_', '%_%', '__%']),
      ];
      return { name, op: 'like', value: r.pick(forms)() };
    }
    const a = reEsc(cut(this.piece(w, 'contains'), 8));
    const b = reEsc(cut(r.pick(WORDS), 8));
    const forms = [
      () => `^${reEsc(cut(this.piece(w, 'prefix'), 12))}`,
      () => `${reEsc(cut(this.piece(w, 'suffix'), 12))}$`,
      () => `(?:${a}|${b})`,
      () => `^(?:${a})+$`,
      () => `${a}.{0,3}${b}`,
      () => `^.{${r.int(4)},${4 + r.int(4)}}$`,
      () => r.pick(['[a-z]', '[^a-z]+$', '\\w\\d?', '^\\S*$', '[東-龥]', '[😀-🙏]|é', '\\u0000', '']),
    ];
    return { name, op: 'regex', value: r.pick(forms)() };
  }

  private constraints(): Constraint[] {
    const r = this.rng;
    if (r.chance(0.1)) return [];
    const n = 1 + Math.floor(r.next() ** 2 * this.k.maxConstraints);
    const out: Constraint[] = [];
    if (this.k.kinds > 0 && r.chance(0.85)) out.push({ name: 'kind', op: 'eq', value: KINDS[r.int(Math.min(this.k.kinds, KINDS.length))] });
    while (out.length < Math.min(n, this.k.maxConstraints)) {
      const spec = this.nameSpec();
      if (this.k.content === 'ranges' || r.chance(0.15)) {
        // Several constraints on one name: a range, an equal-bounds range or a contradiction (C14).
        const lo = this.value(spec.type);
        const hi = this.value(spec.type);
        if (typeof lo === 'number' && typeof hi === 'number') {
          out.push({ name: spec.name, op: r.pick(['ge', 'gt'] as const), value: Math.min(lo, hi) });
          if (out.length < this.k.maxConstraints) out.push({ name: spec.name, op: r.pick(['le', 'lt'] as const), value: r.chance(0.1) ? Math.min(lo, hi) : Math.max(lo, hi) });
          if (out.length < this.k.maxConstraints && r.chance(0.3)) out.push({ name: spec.name, op: 'ne', value: this.value('number') });
          continue;
        }
      }
      out.push(this.constraint(spec));
    }
    return out;
  }

  private attributes(): Record<string, Value> {
    const r = this.rng;
    const entries: Array<[string, Value]> = [];
    const seen = new Set<string>();
    const n = r.int(Math.min(this.names.length + 2, 9));
    for (let i = 0; i < n; i++) {
      const spec = this.nameSpec();
      if (seen.has(spec.name)) continue;
      seen.add(spec.name);
      const type = r.chance(0.1) ? 'any' : spec.type;
      entries.push([spec.name, this.value(type)]);
    }
    if (r.chance(0.1)) entries.push([`unused${r.int(3)}`, this.value('any')]);
    if (this.k.kinds > 0 && !seen.has('kind') && r.chance(0.85)) entries.push(['kind', KINDS[r.int(Math.min(this.k.kinds + 1, KINDS.length))]]);
    // fromEntries defines own properties, so '__proto__' is an attribute like any other.
    return Object.fromEntries(entries);
  }

  // ---- subscriptions ----

  private owner(): string {
    return this.deviceIds[this.rng.zipf(this.deviceIds.length, 0.9)];
  }

  /**
   * A tag as a client might spell it: popular ones more often, with a `#`, in capitals, or (for
   * the accented ones) decomposed; all spellings of one tag are one tag (T2).
   */
  private tag(): string {
    const r = this.rng;
    const t = TAG_WORDS[r.zipf(TAG_WORDS.length, 1.1)];
    const spelled = r.chance(0.15) ? t.toUpperCase() : r.chance(0.1) ? t.normalize('NFD') : t;
    return r.chance(0.2) ? `#${spelled}` : spelled;
  }

  private tagList(max: number): string[] {
    const n = 1 + Math.floor(this.rng.next() ** 2 * max);
    return Array.from({ length: n }, () => this.tag());
  }

  private filter(): Filter {
    const f = this.plainFilter();
    if (this.k.tags > 0 && this.rng.chance(this.k.tags)) {
      f.tags = this.tagList(4);
      // Tags alone, or beside an area only: the kinds T7 names.
      if (this.rng.chance(0.4)) f.constraints = [];
    }
    return f;
  }

  private withTags(e: Event, f?: Filter): Event {
    if (this.k.tags === 0) return e;
    const r = this.rng;
    const tags = r.chance(this.k.tags) ? this.tagList(10) : r.chance(0.1) ? [] : undefined;
    // Most of the time an event near a filter carries that filter's tags, so its area decides.
    if (f?.tags !== undefined && r.chance(0.8)) return { ...e, tags: [...(tags ?? []), ...f.tags.filter(() => r.chance(0.9))] };
    return tags === undefined ? e : { ...e, tags };
  }

  private plainFilter(): Filter {
    const r = this.rng;
    const constraints = this.constraints();
    if (r.chance(this.k.pNoArea)) return r.chance(0.05) ? ({ constraints, area: null } as unknown as Filter) : { constraints };
    const radiusM = this.radius();
    if (r.chance(this.k.pFixed)) return { constraints, area: { radiusM, center: this.point() } };
    return r.chance(0.05) ? ({ constraints, area: { radiusM, center: null } } as unknown as Filter) : { constraints, area: { radiusM } };
  }

  private newSub(id: string): Subscription {
    const n = 1 + Math.floor(this.rng.next() ** 3 * this.k.maxFilters);
    return { id, owner: this.owner(), filters: Array.from({ length: Math.min(n, this.k.maxFilters) }, () => this.filter()) };
  }

  private freshId(): string {
    this.subSeq++;
    return this.subSeq % 29 === 3 ? `購読-${this.subSeq}` : this.subSeq % 31 === 5 ? `🔔${this.subSeq}` : `s${this.subSeq}`;
  }

  private randomSubId(): string | undefined {
    if (this.subs.size === 0) return undefined;
    const i = this.rng.int(this.subs.size);
    let k = 0;
    for (const id of this.subs.keys()) if (k++ === i) return id;
    return undefined;
  }

  // ---- positions ----

  private nextPosition(device: string): LatLon {
    const cur = this.positions.get(device);
    if (cur === undefined || this.rng.chance(0.25)) return this.point();
    return destination(cur.lat, cur.lon, this.rng.range(0, 360), this.rng.logUniform(0.05, 2e5));
  }

  private movable(): string {
    for (let i = 0; i < 5; i++) {
      const d = this.rng.pick(this.deviceIds);
      if (!this.unpositioned.has(d)) return d;
    }
    return this.deviceIds[0];
  }

  // ---- events ----

  private eventId(): string {
    return `ev${++this.eventSeq}`;
  }

  /** An area filter whose centre is known now, with its centre. */
  private areaTarget(): { sub: Subscription; filter: Filter; center: LatLon } | undefined {
    for (let tries = 0; tries < 12; tries++) {
      const id = this.randomSubId();
      if (id === undefined) return undefined;
      const sub = this.subs.get(id)!;
      const filter = this.rng.pick(sub.filters);
      if (filter.area === undefined || filter.area === null) continue;
      const center = filter.area.center ?? this.positions.get(sub.owner);
      if (center === undefined || center === null) continue;
      return { sub, filter, center };
    }
    return undefined;
  }

  /**
   * An event at a chosen offset from a filter's boundary r = r_f + r_e: exactly on it (as far as
   * float64 placement allows), at a few ulps, at fractions and multiples of `boundaryStepM`, or far.
   */
  private boundaryEvent(): Event | undefined {
    const t = this.areaTarget();
    if (t === undefined) return undefined;
    const r = this.rng;
    const re = this.eventRadius() ?? 0;
    const R = t.filter.area!.radiusM + re;
    const step = boundaryStepM(R);
    const k = r.pick([0, 0, 1e-12, -1e-12, 0.25, -0.25, 0.5, -0.5, 0.99, -0.99, 1.005, -1.005, 1.5, -1.5, 3, -3, 10, -10]);
    const target = k === 1e-12 || k === -1e-12 ? R * (1 + k) : R + k * step;
    if (!(target > 0) || target > 2e7) return undefined;
    const p = r.chance(0.3) ? extremePoint(t.center, target, r.int(4)) : destination(t.center.lat, t.center.lon, r.range(0, 360), target);
    const ev: Event = { id: this.eventId(), lat: p.lat, lon: p.lon, attributes: this.attributesFor(t.filter) };
    if (re > 0 || r.chance(0.2)) ev.radiusM = re;
    return this.withTags(ev, t.filter);
  }

  /** Attributes that satisfy the filter's constraints where that is easy, so the area decides. */
  private attributesFor(f: Filter): Record<string, Value> {
    const entries = new Map<string, Value>(Object.entries(this.attributes()));
    for (const c of f.constraints ?? []) {
      if (this.rng.chance(0.1)) continue;
      if (c.op === 'exists') entries.set(c.name, this.value('any'));
      else if (c.op === 'eq' || c.op === 'le' || c.op === 'ge' || c.op === 'prefix' || c.op === 'suffix' || c.op === 'contains') entries.set(c.name, c.value!);
    }
    return Object.fromEntries(entries);
  }

  private event(): Event {
    const r = this.rng;
    if (r.chance(this.k.pBoundary)) {
      const b = this.boundaryEvent();
      if (b !== undefined) return b;
    }
    let p: LatLon;
    if (r.chance(0.5) && this.positions.size > 0) {
      // Near a device: where anchored filters are.
      const devs = [...this.positions.keys()];
      const c = this.positions.get(r.pick(devs))!;
      p = r.chance(0.1) ? { ...c } : destination(c.lat, c.lon, r.range(0, 360), r.logUniform(0.01, 2e6));
    } else p = this.point();
    const e: Event = { id: this.eventId(), lat: p.lat, lon: p.lon, attributes: this.attributes() };
    const re = this.eventRadius();
    if (re !== undefined) e.radiusM = re;
    return this.withTags(e);
  }

  /**
   * A subscription whose radius is set from an exact haversine distance, added just before an event
   * at that distance: the inclusive boundary d = r_f + r_e itself (A2), or one ulp inside.
   */
  private exactBoundaryPair(): Op[] {
    const r = this.rng;
    const anchoredTo = r.chance(0.5) && this.positions.size > 0 ? r.pick([...this.positions.keys()]) : undefined;
    const center = anchoredTo !== undefined ? this.positions.get(anchoredTo)! : this.point();
    const p = r.chance(0.5) ? extremePoint(center, this.radius(), r.int(4)) : destination(center.lat, center.lon, r.range(0, 360), this.radius());
    const d = haversineM(center.lat, center.lon, p.lat, p.lon);
    const re = r.chance(0.4) ? r.range(0, d) : 0;
    let rf = re > 0 ? smallestRadius(d, re) : d;
    if (r.chance(0.3)) rf = nextDown(rf);
    else if (r.chance(0.2)) rf = nextUp(rf);
    if (!(rf > 0 && rf <= 1e6)) return [];
    const id = this.freshId();
    const sub: Subscription = {
      id,
      owner: anchoredTo ?? this.owner(),
      filters: [{ constraints: r.chance(0.7) ? [] : this.constraints(), area: anchoredTo !== undefined ? { radiusM: rf } : { radiusM: rf, center } }],
    };
    this.subs.set(id, sub);
    const event: Event = { id: this.eventId(), lat: p.lat, lon: p.lon, attributes: this.attributes() };
    if (re > 0) event.radiusM = re;
    return [{ kind: 'add', sub }, { kind: 'match', event }];
  }

  // ---- mutations ----

  private mutation(): Op[] {
    const r = this.rng;
    if (r.chance(this.k.pInvalid)) return this.invalid();
    const x = r.next();
    if (x < 0.3) {
      const d = this.movable();
      const p = this.nextPosition(d);
      if (r.chance(this.k.pHandle)) {
        const points = [p];
        for (let i = r.int(4); i > 0; i--) points.push(destination(points[points.length - 1].lat, points[points.length - 1].lon, r.range(0, 360), r.logUniform(0.1, 5e4)));
        this.positions.set(d, points[points.length - 1]);
        return [{ kind: 'handle', device: d, points, useAfterRelease: false }];
      }
      this.positions.set(d, p);
      return [{ kind: 'move', device: d, lat: p.lat, lon: p.lon }];
    }
    if (x < 0.4) {
      const n = 1 + r.int(12);
      const updates: PositionUpdate[] = [];
      for (let i = 0; i < n; i++) {
        const d = r.chance(0.2) && updates.length > 0 ? updates[r.int(updates.length)].device : this.movable(); // repeats: the last wins
        const p = this.nextPosition(d);
        this.positions.set(d, p);
        updates.push({ device: d, lat: p.lat, lon: p.lon });
      }
      return [{ kind: 'moves', updates }];
    }
    if (x < 0.47) {
      const d = r.chance(0.8) && this.positions.size > 0 ? r.pick([...this.positions.keys()]) : r.pick(this.deviceIds);
      this.positions.delete(d);
      return [{ kind: 'forget', device: d }];
    }
    if (x < 0.62) {
      const id = r.chance(0.95) ? this.randomSubId() : `missing-${r.int(1000)}`;
      if (id === undefined) return [];
      if (this.subs.delete(id)) this.removed.push(id);
      return [{ kind: 'remove', id }];
    }
    if (x < 0.77) {
      const id = this.randomSubId();
      if (id === undefined) return [];
      const sub = this.newSub(id);
      if (r.chance(0.5)) sub.owner = this.subs.get(id)!.owner;
      this.subs.set(id, sub);
      return [{ kind: 'replace', sub }];
    }
    if (x < 0.87 && this.removed.length > 0) {
      // Re-add a removed id as a new subscription (L3).
      const id = this.removed.splice(r.int(this.removed.length), 1)[0];
      const sub = this.newSub(id);
      this.subs.set(id, sub);
      return [{ kind: 'add', sub }];
    }
    if (x < 0.92) return this.exactBoundaryPair();
    const id = this.freshId();
    const sub = this.newSub(id);
    this.subs.set(id, sub);
    return [{ kind: 'add', sub }];
  }

  /** Deliberate errors: the candidate must fail the same way, and change nothing (L1, L2, L4). */
  private invalid(): Op[] {
    const r = this.rng;
    switch (r.int(7)) {
      case 0: {
        const id = this.randomSubId();
        return id === undefined ? [] : [{ kind: 'add', sub: this.newSub(id) }]; // ALREADY_EXISTS
      }
      case 1:
        return [{ kind: 'replace', sub: this.newSub(`absent-${r.int(1e6)}`) }]; // NOT_FOUND
      case 2: {
        const sub = this.newSub(this.freshId());
        sub.filters.push({ constraints: [], area: { radiusM: r.pick([0, -1, 1e6 + 1, NaN]) } });
        return [{ kind: 'add', sub }]; // one bad filter: rejected whole
      }
      case 3: {
        const d = this.movable();
        const p = this.nextPosition(d); // not applied: the batch fails
        return [{ kind: 'moves', updates: [{ device: d, lat: p.lat, lon: p.lon }, { device: this.movable(), lat: r.pick([91, -90.5, NaN]), lon: 0 }] }];
      }
      case 4: {
        const good = this.event();
        return [{ kind: 'batch', events: [good, { ...this.event(), lon: r.pick([180.5, -181, Infinity]) }] }];
      }
      case 5: {
        const d = this.movable();
        const p = this.nextPosition(d);
        this.positions.set(d, p);
        return [{ kind: 'handle', device: d, points: [p], useAfterRelease: true }]; // NOT_FOUND after release
      }
      default: {
        const id = this.randomSubId();
        if (id === undefined) return [];
        const sub = this.newSub(id);
        sub.filters[0] = { constraints: [{ name: 'x', op: 'lt', value: 'not a number' }] };
        return [{ kind: 'replace', sub }]; // INVALID_ARGUMENT: the old version stays
      }
    }
  }

  // ---- the scenario ----

  run(): Step[] {
    const steps: Step[] = [];
    const setup: Op[] = [];
    // Positions first for most devices, then subscriptions, then the rest of the positions: some
    // filters are anchored before their owner has a position.
    const late: string[] = [];
    for (const d of this.deviceIds) {
      if (this.unpositioned.has(d)) continue;
      if (this.rng.chance(0.3)) {
        late.push(d);
        continue;
      }
      const p = this.point();
      this.positions.set(d, p);
      setup.push({ kind: 'move', device: d, lat: p.lat, lon: p.lon });
    }
    for (let i = 0; i < this.k.subs; i++) {
      const id = this.freshId();
      const sub = this.newSub(id);
      this.subs.set(id, sub);
      setup.push({ kind: 'add', sub });
    }
    const updates: PositionUpdate[] = late.map((d) => {
      const p = this.point();
      this.positions.set(d, p);
      return { device: d, lat: p.lat, lon: p.lon };
    });
    setup.push({ kind: 'moves', updates });
    steps.push({ ops: setup });
    for (let s = 0; s < this.k.steps; s++) {
      const ops: Op[] = [];
      let events = 0;
      const budget = Math.min(100, this.k.events);
      while (events < budget) {
        // Interleave mutations and events: a few mutations, then a single match or a batch.
        for (let i = this.rng.int(Math.max(1, Math.round((2 * this.k.churn) / Math.max(1, budget / 4)))); i > 0; i--) ops.push(...this.mutation());
        if (this.rng.chance(0.4)) {
          const n = Math.min(budget - events, 1 + this.rng.int(20));
          const batch: Event[] = [];
          for (let i = 0; i < n; i++) batch.push(this.event());
          ops.push({ kind: 'batch', events: batch });
          events += n;
        } else {
          ops.push({ kind: 'match', event: this.event() });
          events++;
        }
      }
      steps.push({ ops });
    }
    return steps;
  }
}

/** The knobs of a variant (defaults filled in). */
export function knobsOf(v: Variant): Knobs {
  return { ...BASE, ...v.knobs };
}

export function generate(v: Variant, seed: number): Scenario {
  return { variant: v.name, seed, steps: new Generator(knobsOf(v), seed).run() };
}
