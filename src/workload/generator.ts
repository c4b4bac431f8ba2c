/**
 * Seeded, deterministic workloads: subscriptions, devices and events shaped like the default
 * scenario of CLCB (Table 1) or CCM (Table 1). Every component draws from its own PRNG stream, so
 * changing one knob (say the area) leaves the others' data unchanged, and a workload of n
 * subscriptions is a prefix of one of 10·n.
 */
import { AmbitError, show } from '../model/errors.js';
import { DEFAULT_LIMITS, type NFilter, validateEvent, validateFilter } from '../model/limits.js';
import { satisfies } from '../model/semantics.js';
import type { Area, Event, Filter, LatLon, Op, Subscription, Value } from '../model/types.js';
import { ContentModel, NUMERIC_OPS, type NameDistribution, type OpWeights, STRING_OPS } from './content.js';
import { Prng } from './prng.js';
import { type Region, type RegionName, type RegionSpec, REGIONS, makeRegion, radiusForAreaFraction } from './region.js';
import { type SpatialKind, SpatialModel } from './spatial.js';

export interface WorkloadOptions {
  /** Master seed (uint32). */
  seed: number;
  subscriptions: number;
  filtersPerSub: number;
  constraintsMin: number;
  constraintsMax: number;
  attributesMin: number;
  attributesMax: number;
  /** Distinct attribute names. */
  names: number;
  /** How event-type schemas pick names. */
  nameDistribution: NameDistribution;
  nameZipfExponent: number;
  /**
   * Event types (schemas); a filter constrains one type's names. 'auto' = round(0.125 / selectivity)
   * (25 at 0.5%), so that each filter needs Π q ≈ 1/8 over its constraints: reachable by most
   * operator mixes, and enough types to use all 100 names.
   */
  eventTypes: number | 'auto';
  /** Target average content selectivity of a filter (fraction of events it matches on content). */
  selectivity: number;
  /** Distinct values per name. */
  values: number;
  /** Fraction of names (hence of constraints and attributes) that are numeric; the rest are strings. */
  numericFraction: number;
  /** Operator weights for numeric constraints (eq ne lt le gt ge exists). */
  numericOps: OpWeights;
  /** Operator weights for string constraints (eq ne prefix suffix contains exists). */
  stringOps: OpWeights;
  region: RegionName | RegionSpec;
  /** Area of each filter's circle as a fraction of the region (CLCB: 0.01% = 1e-4). */
  areaFraction: number;
  /** Filter radius in metres; when given it replaces areaFraction. */
  radiusM: number | undefined;
  spatial: SpatialKind;
  hotspots: number;
  hotspotExponent: number;
  /** Gaussian sd around a hotspot as a fraction of the region side. */
  hotspotSigma: number;
  /** Of the filters with an area, the fraction anchored to the owner device (the rest have a fixed centre). */
  anchoredFraction: number;
  /** Fraction of filters with no area at all (match anywhere). */
  contentOnlyFraction: number;
  events: number;
  /** Events' area of effect; 0 = points. */
  eventRadiusM: number;
}

/** CLCB Table 1, with CCM Table 1's operator mix and value count (the CLCB paper gives neither). */
export const DEFAULT_WORKLOAD: Readonly<WorkloadOptions> = Object.freeze({
  seed: 1,
  subscriptions: 250_000,
  filtersPerSub: 10,
  constraintsMin: 3,
  constraintsMax: 5,
  attributesMin: 3,
  attributesMax: 5,
  names: 100,
  nameDistribution: 'uniform',
  nameZipfExponent: 1,
  eventTypes: 'auto',
  selectivity: 0.005,
  values: 100,
  numericFraction: 0.5,
  numericOps: Object.freeze({ eq: 1, ne: 1, gt: 1, lt: 1 }),
  stringOps: Object.freeze({ eq: 1, ne: 1, contains: 1, prefix: 1 }),
  region: 'milan',
  areaFraction: 1e-4,
  radiusM: undefined,
  spatial: 'uniform',
  hotspots: 100,
  hotspotExponent: 1,
  hotspotSigma: 0.01,
  anchoredFraction: 1,
  contentOnlyFraction: 0,
  events: 1000,
  eventRadiusM: 0,
});

export interface Device {
  id: string;
  lat: number;
  lon: number;
}

/** Resolved options plus what was derived from them. */
export interface WorkloadParams extends Omit<WorkloadOptions, 'eventTypes'> {
  eventTypes: number;
  /** The region actually used. */
  regionInfo: Region;
  /** The filter radius actually used, metres. */
  filterRadiusM: number;
  /** Area fraction of that radius. */
  filterAreaFraction: number;
}

/** Counts and the expected content selectivity of the generated filters. */
export interface WorkloadStats {
  subscriptions: number;
  filters: number;
  constraints: number;
  anchoredFilters: number;
  fixedFilters: number;
  contentOnlyFilters: number;
  /** Mean over filters of the exact per-filter expectation (1/T)·Π q (ignores cross-type matches). */
  expectedSelectivity: number;
}

export interface Workload {
  params: WorkloadParams;
  subscriptions: Subscription[];
  events: Event[];
  /** Initial positions, one device per subscription (owner `dev<i>`); call updatePosition with these before matching. */
  devices: Device[];
  /** The spatial distribution, for random-waypoint mobility over the same map. */
  space: SpatialModel;
  stats: WorkloadStats;
}

// Independent streams.
const STREAM_CONTENT = 1;
const STREAM_LAYOUT = 2;
const STREAM_DEVICES = 3;
const STREAM_EVENTS = 4;
const STREAM_EVENT_POS = 5;

// ---- validation ----

function fail(msg: string): never {
  throw new AmbitError('INVALID_ARGUMENT', `workload: ${msg}`);
}

function int(o: WorkloadOptions, key: keyof WorkloadOptions, lo: number, hi: number): void {
  const v = o[key];
  if (typeof v !== 'number' || !Number.isInteger(v) || v < lo || v > hi) fail(`${key} must be an integer in [${lo}, ${hi}], got ${show(v)}`);
}

function num(o: WorkloadOptions, key: keyof WorkloadOptions, lo: number, hi: number, loOpen = false): void {
  const v = o[key];
  if (typeof v !== 'number' || !Number.isFinite(v) || v < lo || v > hi || (loOpen && v === lo)) {
    fail(`${key} must be in ${loOpen ? '(' : '['}${lo}, ${hi}], got ${show(v)}`);
  }
}

function oneOf(o: WorkloadOptions, key: keyof WorkloadOptions, allowed: readonly string[]): void {
  const v = o[key];
  if (typeof v !== 'string' || !allowed.includes(v)) fail(`${key} must be one of ${allowed.join(', ')}, got ${show(v)}`);
}

function opWeights(key: 'numericOps' | 'stringOps', v: unknown, allowed: readonly Op[], kind: string): void {
  if (v === null || typeof v !== 'object' || Array.isArray(v)) fail(`${key} must be an object of operator weights, got ${show(v)}`);
  let sum = 0;
  for (const [op, w] of Object.entries(v as Record<string, unknown>)) {
    if (!allowed.includes(op as Op)) fail(`${key}.${op} is not a ${kind} operator (${allowed.join(', ')})`);
    if (typeof w !== 'number' || !Number.isFinite(w) || w < 0) fail(`${key}.${op} must be a finite weight >= 0, got ${show(w)}`);
    sum += w;
  }
  if (!(sum > 0)) fail(`${key} must give some operator a weight > 0`);
}

/** Merges `partial` over DEFAULT_WORKLOAD and checks every value; unknown keys are errors. */
export function resolveWorkloadOptions(partial: Partial<WorkloadOptions> = {}): WorkloadParams {
  if (partial === null || typeof partial !== 'object') fail(`options must be an object, got ${show(partial)}`);
  for (const key of Object.keys(partial)) if (!(key in DEFAULT_WORKLOAD)) fail(`unknown option ${show(key)}`);
  const o: WorkloadOptions = { ...DEFAULT_WORKLOAD };
  for (const [k, v] of Object.entries(partial)) if (v !== undefined) (o as unknown as Record<string, unknown>)[k] = v;
  if ('areaFraction' in partial && partial.areaFraction !== undefined && partial.radiusM !== undefined) {
    fail('give areaFraction or radiusM, not both');
  }

  int(o, 'seed', 0, 0xffffffff);
  int(o, 'subscriptions', 0, 100_000_000);
  int(o, 'filtersPerSub', 1, DEFAULT_LIMITS.maxFiltersPerSubscription);
  int(o, 'constraintsMin', 0, DEFAULT_LIMITS.maxConstraintsPerFilter);
  int(o, 'constraintsMax', 0, DEFAULT_LIMITS.maxConstraintsPerFilter);
  if (o.constraintsMin > o.constraintsMax) fail(`constraintsMin must be <= constraintsMax (${o.constraintsMax}), got ${o.constraintsMin}`);
  int(o, 'names', 1, 100_000);
  int(o, 'attributesMin', 1, DEFAULT_LIMITS.maxAttributesPerEvent);
  int(o, 'attributesMax', 1, DEFAULT_LIMITS.maxAttributesPerEvent);
  if (o.attributesMin > o.attributesMax) fail(`attributesMin must be <= attributesMax (${o.attributesMax}), got ${o.attributesMin}`);
  if (o.attributesMax > o.names) fail(`attributesMax must be <= names (${o.names}), got ${o.attributesMax}`);
  oneOf(o, 'nameDistribution', ['uniform', 'zipf']);
  num(o, 'nameZipfExponent', 0, 10);
  num(o, 'selectivity', 0, 1, true);
  if (o.eventTypes !== 'auto' && (typeof o.eventTypes !== 'number' || !Number.isInteger(o.eventTypes) || o.eventTypes < 1 || o.eventTypes > 1_000_000)) {
    fail(`eventTypes must be 'auto' or an integer in [1, 1000000], got ${show(o.eventTypes)}`);
  }
  const eventTypes = o.eventTypes === 'auto' ? Math.max(1, Math.round(0.125 / o.selectivity)) : o.eventTypes;
  int(o, 'values', 2, 4096);
  num(o, 'numericFraction', 0, 1);
  opWeights('numericOps', o.numericOps, NUMERIC_OPS, 'numeric');
  opWeights('stringOps', o.stringOps, STRING_OPS, 'string');
  let regionInfo: Region;
  if (typeof o.region === 'string') {
    if (!(o.region in REGIONS)) fail(`region must be one of ${Object.keys(REGIONS).join(', ')} or {centerLat, centerLon, areaKm2}, got ${show(o.region)}`);
    regionInfo = makeRegion(o.region);
  } else {
    const r = o.region as unknown;
    if (r === null || typeof r !== 'object') fail(`region must be a region name or {centerLat, centerLon, areaKm2}, got ${show(r)}`);
    const s = r as RegionSpec;
    if (typeof s.centerLat !== 'number' || !(Math.abs(s.centerLat) <= 85)) fail(`region.centerLat must be in [-85, 85], got ${show(s.centerLat)}`);
    if (typeof s.centerLon !== 'number' || !(Math.abs(s.centerLon) <= 180)) fail(`region.centerLon must be in [-180, 180], got ${show(s.centerLon)}`);
    if (typeof s.areaKm2 !== 'number' || !(s.areaKm2 > 0 && s.areaKm2 <= 5e6)) fail(`region.areaKm2 must be in (0, 5000000], got ${show(s.areaKm2)}`);
    try {
      regionInfo = makeRegion(s);
    } catch (err) {
      fail(`region ${(err as Error).message.replace(/^region: /, '')}`);
    }
  }
  num(o, 'areaFraction', 0, 1, true);
  if (o.radiusM !== undefined) num(o, 'radiusM', 0, DEFAULT_LIMITS.maxRadiusM, true);
  oneOf(o, 'spatial', ['uniform', 'zipf']);
  int(o, 'hotspots', 1, 1_000_000);
  num(o, 'hotspotExponent', 0, 10);
  num(o, 'hotspotSigma', 0, 1, true);
  num(o, 'anchoredFraction', 0, 1);
  num(o, 'contentOnlyFraction', 0, 1);
  int(o, 'events', 0, 10_000_000);
  num(o, 'eventRadiusM', 0, DEFAULT_LIMITS.maxEventRadiusM);

  const filterRadiusM = o.radiusM ?? radiusForAreaFraction(o.areaFraction, regionInfo);
  if (filterRadiusM > DEFAULT_LIMITS.maxRadiusM) fail(`areaFraction ${o.areaFraction} gives a radius of ${Math.round(filterRadiusM)} m, above the ${DEFAULT_LIMITS.maxRadiusM} m limit`);
  return {
    ...o,
    eventTypes,
    numericOps: { ...o.numericOps },
    stringOps: { ...o.stringOps },
    regionInfo,
    filterRadiusM,
    filterAreaFraction: (Math.PI * filterRadiusM * filterRadiusM) / regionInfo.areaM2,
  };
}

// ---- generation ----

/**
 * A workload that has not been materialised: iterate its subscriptions as a stream (each call to
 * `subscriptions()` restarts the same sequence) so that a million of them need not be held at once.
 */
export class WorkloadSource {
  readonly params: WorkloadParams;
  readonly content: ContentModel;
  readonly space: SpatialModel;
  /** Filled in as `subscriptions()` runs; final once an iteration has completed. */
  readonly stats: WorkloadStats = {
    subscriptions: 0,
    filters: 0,
    constraints: 0,
    anchoredFilters: 0,
    fixedFilters: 0,
    contentOnlyFilters: 0,
    expectedSelectivity: 0,
  };

  constructor(options: Partial<WorkloadOptions> = {}) {
    const p = resolveWorkloadOptions(options);
    this.params = p;
    this.content = new ContentModel(p, p.seed);
    this.space = new SpatialModel(p.regionInfo, { kind: p.spatial, hotspots: p.hotspots, hotspotExponent: p.hotspotExponent, hotspotSigma: p.hotspotSigma }, p.seed);
  }

  /** Subscription i is `s<i>`, owned by device `dev<i>`. */
  *subscriptions(count = this.params.subscriptions): Generator<Subscription> {
    const p = this.params;
    const nextFilter = this.filterMaker();
    for (let i = 0; i < count; i++) {
      const fs: Filter[] = new Array(p.filtersPerSub);
      for (let f = 0; f < p.filtersPerSub; f++) fs[f] = nextFilter();
      this.stats.subscriptions = i + 1;
      yield { id: `s${i}`, owner: `dev${i}`, filters: fs };
    }
  }

  /** An endless stream of filters (content and area); restarts the sequence and the `stats`. */
  *filters(): Generator<Filter, never> {
    const nextFilter = this.filterMaker();
    for (;;) yield nextFilter();
  }

  /** A function returning the sequence's next filter (no generator protocol on the hot path). */
  filterMaker(): () => Filter {
    const p = this.params;
    const source = this.content.filterSource(new Prng(p.seed, STREAM_CONTENT));
    const layout = new Prng(p.seed, STREAM_LAYOUT);
    const anchored: Area = Object.freeze({ radiusM: p.filterRadiusM });
    const space = this.space;
    const s = this.stats;
    Object.assign(s, { subscriptions: 0, filters: 0, constraints: 0, anchoredFilters: 0, fixedFilters: 0, contentOnlyFilters: 0, expectedSelectivity: 0 });
    const c: LatLon = { lat: 0, lon: 0 };
    return (): Filter => {
      const constraints = source.next();
      let filter: Filter;
      // Two layout draws per filter whatever the outcome, so fractions do not shift the streams.
      const u = layout.float();
      const w = layout.float();
      if (u < p.contentOnlyFraction) {
        filter = { constraints };
        s.contentOnlyFilters++;
      } else if (w < p.anchoredFraction) {
        filter = { constraints, area: anchored };
        s.anchoredFilters++;
      } else {
        space.sample(layout, c);
        filter = { constraints, area: { radiusM: p.filterRadiusM, center: { lat: c.lat, lon: c.lon } } };
        s.fixedFilters++;
      }
      s.filters = source.filters;
      s.constraints = source.constraints;
      s.expectedSelectivity = source.sumSelectivity / source.filters;
      return filter;
    };
  }

  /** Initial device positions, drawn from the spatial distribution; device i owns subscription i. */
  devices(count = this.params.subscriptions): Device[] {
    const rng = new Prng(this.params.seed, STREAM_DEVICES);
    const out: Device[] = new Array(count);
    const p: LatLon = { lat: 0, lon: 0 };
    for (let i = 0; i < count; i++) {
      this.space.sample(rng, p);
      out[i] = { id: `dev${i}`, lat: p.lat, lon: p.lon };
    }
    return out;
  }

  /** Events `e<i>` with the same spatial distribution as devices. */
  events(count = this.params.events): Event[] {
    const rng = new Prng(this.params.seed, STREAM_EVENTS);
    const pos = new Prng(this.params.seed, STREAM_EVENT_POS);
    const out: Event[] = new Array(count);
    const p: LatLon = { lat: 0, lon: 0 };
    for (let i = 0; i < count; i++) {
      this.space.sample(pos, p);
      const e: Event = { id: `e${i}`, lat: p.lat, lon: p.lon, attributes: this.content.eventAttributes(rng) };
      if (this.params.eventRadiusM > 0) e.radiusM = this.params.eventRadiusM;
      out[i] = e;
    }
    return out;
  }
}

/** Builds a whole workload in memory (CLCB Table 1 by default; every option adjustable). */
export function generateWorkload(options: Partial<WorkloadOptions> = {}): Workload {
  const src = new WorkloadSource(options);
  const subscriptions: Subscription[] = new Array(src.params.subscriptions);
  let i = 0;
  for (const s of src.subscriptions()) subscriptions[i++] = s;
  return {
    params: src.params,
    subscriptions,
    events: src.events(),
    devices: src.devices(),
    space: src.space,
    stats: { ...src.stats },
  };
}

// ---- CCM ----

export interface CcmOptions {
  /** CCM Table 1: 10 interfaces. */
  interfaces: number;
  /** CCM Table 1: 22,500–27,500 filters per interface. */
  filtersPerInterfaceMin: number;
  filtersPerInterfaceMax: number;
}

export const DEFAULT_CCM: Readonly<CcmOptions> = Object.freeze({ interfaces: 10, filtersPerInterfaceMin: 22_500, filtersPerInterfaceMax: 27_500 });

/**
 * CCM Table 1's content-only scenario. CCM's interfaces hold ~25,000 filters each, but a
 * subscription here holds at most 64 (limits.ts), so interface k is modelled as consecutive
 * subscriptions `i<k>.<j>` of 64 filters (the last one shorter), all owned by `if<k>`; a match of
 * interface k is a match of any of its subscriptions. The total (~250,000 filters) is the paper's.
 * Filters have no area; content options (names, values, operator mix, selectivity, ...) are shared
 * with the CLCB generator and CCM's 50/50 numeric/string and 25% operator mixes are the defaults.
 */
export function generateCcmWorkload(options: Partial<WorkloadOptions> & Partial<CcmOptions> = {}): Workload {
  const { interfaces = DEFAULT_CCM.interfaces, filtersPerInterfaceMin = DEFAULT_CCM.filtersPerInterfaceMin, filtersPerInterfaceMax = DEFAULT_CCM.filtersPerInterfaceMax, ...rest } = options;
  if (!Number.isInteger(interfaces) || interfaces < 1 || interfaces > 100_000) fail(`interfaces must be an integer in [1, 100000], got ${show(interfaces)}`);
  if (!Number.isInteger(filtersPerInterfaceMin) || filtersPerInterfaceMin < 1) fail(`filtersPerInterfaceMin must be an integer >= 1, got ${show(filtersPerInterfaceMin)}`);
  if (!Number.isInteger(filtersPerInterfaceMax) || filtersPerInterfaceMax < filtersPerInterfaceMin) {
    fail(`filtersPerInterfaceMax must be an integer >= filtersPerInterfaceMin (${filtersPerInterfaceMin}), got ${show(filtersPerInterfaceMax)}`);
  }
  if ('contentOnlyFraction' in rest && rest.contentOnlyFraction !== 1) fail('contentOnlyFraction is always 1 in the CCM scenario');
  const src = new WorkloadSource({ ...rest, contentOnlyFraction: 1, subscriptions: 0 });
  const perSub = DEFAULT_LIMITS.maxFiltersPerSubscription;
  const sizes = new Prng(src.params.seed, 0xcc);
  const nextFilter = src.filterMaker();
  const subscriptions: Subscription[] = [];
  for (let k = 0; k < interfaces; k++) {
    let left = sizes.int(filtersPerInterfaceMin, filtersPerInterfaceMax);
    for (let j = 0; left > 0; j++) {
      const n = Math.min(perSub, left);
      const fs: Filter[] = new Array(n);
      for (let f = 0; f < n; f++) fs[f] = nextFilter();
      subscriptions.push({ id: `i${k}.${j}`, owner: `if${k}`, filters: fs });
      left -= n;
    }
  }
  src.stats.subscriptions = subscriptions.length;
  const params = { ...src.params, subscriptions: subscriptions.length, filtersPerSub: perSub };
  return { params, subscriptions, events: src.events(), devices: [], space: src.space, stats: { ...src.stats } };
}

// ---- measurement ----

export interface SelectivityReport {
  /** Fraction of (filter, event) pairs whose constraints all hold. */
  selectivity: number;
  filters: number;
  events: number;
  pairs: number;
  matches: number;
}

/**
 * Content selectivity measured with the reference semantics (validation + `satisfies`), ignoring
 * areas: filters are sampled evenly across all subscriptions (a deterministic stride), events are
 * the first `sampleEvents`.
 */
export function measureSelectivity(
  workload: { subscriptions: readonly Subscription[]; events: readonly Event[] },
  sampleFilters = 5000,
  sampleEvents = 1000,
): SelectivityReport {
  let total = 0;
  for (const s of workload.subscriptions) total += s.filters.length;
  const nf = Math.min(sampleFilters, total);
  const stride = nf === 0 ? 1 : total / nf;
  const filters: NFilter[] = [];
  let next = 0;
  let idx = 0;
  outer: for (const s of workload.subscriptions) {
    for (const f of s.filters) {
      if (filters.length >= nf) break outer;
      if (idx >= Math.floor(next)) {
        filters.push(validateFilter('filter', f, DEFAULT_LIMITS));
        next += stride;
      }
      idx++;
    }
  }
  const events = workload.events.slice(0, sampleEvents).map((e) => {
    const ne = validateEvent(e, DEFAULT_LIMITS);
    const m = new Map<string, Value>();
    for (let i = 0; i < ne.names.length; i++) m.set(ne.names[i], ne.values[i]);
    return m;
  });
  let matches = 0;
  for (const f of filters) {
    for (const attrs of events) {
      let ok = true;
      for (const c of f.constraints) {
        if (!satisfies(c, attrs.get(c.name))) {
          ok = false;
          break;
        }
      }
      if (ok) matches++;
    }
  }
  const pairs = filters.length * events.length;
  return { selectivity: pairs === 0 ? 0 : matches / pairs, filters: filters.length, events: events.length, pairs, matches };
}

