/**
 * The GPU benchmark's measurements (CLCB §5 on the GPU engine, beside the CPU engines). Only the
 * Matcher interface is timed; the GPU engine always takes its GPU path (cpuBelowFilters: 0), and
 * every result says which path served and whether the device reported errors.
 *
 * Loads stream subscriptions from a WorkloadSource in chunks, so that generation is never timed
 * and never held whole; a workload of n subscriptions is a prefix of one of m > n (generator.ts),
 * so suites that sweep sizes grow one engine from size to size instead of reloading.
 */
import { type GpuMatcherOptions, GpuMatcher } from '../../src/engines/gpu/matcher.js';
import { attributeMap, contentMatches, filterDistance, filterMatches } from '../../src/engines/reference.js';
import type { Matcher } from '../../src/engines/index.js';
import { toleranceM } from '../../src/model/geo.js';
import { DEFAULT_LIMITS, type NSubscription, validateEvent } from '../../src/model/limits.js';
import type { Event, LatLon, PositionUpdate, Subscription } from '../../src/model/types.js';
import { RandomWaypoint, type SpatialKind, WorkloadSource, type WorkloadOptions } from '../../src/workload/index.js';
import { createEngine } from './cases.js';
import { count, pct, sig } from './format.js';
import type {
  GpuBatchEngine,
  GpuBatchResult,
  GpuDefaultEngine,
  GpuDefaultResult,
  GpuGridPoint,
  GpuHealth,
  GpuInfo,
  GpuMemoryPointResult,
  GpuScaleResult,
  GpuStagePoint,
  GpuUpdateEngine,
  MemoryPoint,
  MovesThenMatch,
  StageVariant,
  Verification,
} from './gpu-schema.js';
import { Progress, note } from './progress.js';
import { sink, sinkNumber } from './sink.js';
import { type Summary, summarize } from './stats.js';
import { checksum } from './args.js';
import { makeUpdates } from './moves.js';

const gc: (() => void) | undefined = (globalThis as { gc?: () => void }).gc;

export function collect(): void {
  if (gc !== undefined) {
    gc();
    gc();
  }
}

const now = (): bigint => process.hrtime.bigint();
const msSince = (t0: bigint): number => Number(now() - t0) / 1e6;

/** What every suite needs to build engines. */
export interface GpuEnv {
  allowSoftware: boolean;
  /** Passed to GpuMatcher.create besides gpu.allowSoftware and cpuBelowFilters (maxBatch, inFlight). */
  gpuOptions: Partial<Pick<GpuMatcherOptions, 'maxBatch' | 'inFlight'>>;
  seed: number;
}

/**
 * Dawn rounds timestamp-query values (as browsers do, against timing attacks) unless told not to;
 * the rounding is coarser than a Loc pass at small sizes.
 */
export const PROFILE_DAWN_FLAGS: readonly string[] = ['disable-dawn-features=timestamp_quantization'];

/** The GPU engine on its GPU path at every size; the CPU engines from the registry. */
export async function makeEngine(name: string, env: GpuEnv, profile = false): Promise<Matcher> {
  if (name === 'gpu') {
    return GpuMatcher.create({ ...env.gpuOptions, gpu: { allowSoftware: env.allowSoftware, ...(profile ? { dawnFlags: PROFILE_DAWN_FLAGS } : {}) }, cpuBelowFilters: 0, select: 'gpu', profile });
  }
  return createEngine(name);
}

/** makeEngine, or null after recording why the engine is skipped (no adapter, ...). */
async function engineOrSkip(name: string, env: GpuEnv, skip: SkipFn, what: string): Promise<Matcher | null> {
  try {
    return await makeEngine(name, env);
  } catch (err) {
    skip(name, what, errText(err));
    return null;
  }
}

export function gpuInfo(m: Matcher): GpuInfo | null {
  if (!(m instanceof GpuMatcher) || m.context === null) return null;
  const c = m.context;
  const a = c.adapterInfo;
  return {
    adapter: String(m.stats().extra?.adapter ?? c.name),
    vendor: a.vendor,
    architecture: a.architecture,
    device: a.device,
    description: a.description,
    backend: a.backend,
    featureLevel: a.featureLevel,
    software: c.isSoftware,
    features: [...c.features].sort(),
    maxBufferSize: c.limits.maxBufferSize,
    maxStorageBufferBindingSize: c.limits.maxStorageBufferBindingSize,
  };
}

export function health(m: Matcher): GpuHealth | null {
  if (!(m instanceof GpuMatcher)) return null;
  const x = m.stats().extra ?? {};
  const n = (k: string): number => (typeof x[k] === 'number' ? (x[k] as number) : 0);
  const errs = m.context?.uncapturedErrors;
  return {
    path: String(x.path ?? 'unknown'),
    gpuEvents: n('gpuEvents'),
    cpuEvents: n('cpuEvents'),
    fallbackEvents: n('fallbackEvents'),
    overflowEvents: n('overflowEvents'),
    deviceLosses: n('deviceLosses'),
    uncapturedErrors: errs?.count ?? 0,
    lastError: errs?.last?.split('\n')[0] ?? null,
  };
}

/** One line when the GPU did not serve every event itself. */
export function healthProblem(h: GpuHealth | null): string | null {
  if (h === null) return null;
  const issues: string[] = [];
  if (h.path !== 'gpu') issues.push(`path ${h.path}`);
  if (h.cpuEvents > 0) issues.push(`${h.cpuEvents} events answered by the CPU (${h.fallbackEvents} device fallback, ${h.overflowEvents} overflow)`);
  if (h.deviceLosses > 0) issues.push(`${h.deviceLosses} device losses`);
  if (h.uncapturedErrors > 0) issues.push(`${h.uncapturedErrors} device errors, last: ${h.lastError}`);
  return issues.length === 0 ? null : issues.join('; ');
}

export function memoryPoint(m: Matcher): MemoryPoint {
  collect();
  const u = process.memoryUsage();
  const s = m.stats();
  const gb = s.extra?.gpuBytes;
  const gpf = s.extra?.gpuBytesPerFilter;
  return {
    engineBytes: s.memoryBytes,
    gpuBytes: typeof gb === 'number' ? gb : null,
    gpuBytesPerFilter: typeof gpf === 'number' ? gpf : null,
    heapUsedBytes: u.heapUsed,
    arrayBuffersBytes: u.arrayBuffers,
    rssBytes: u.rss,
  };
}

// ---------------------------------------------------------------- loading

interface LoadSlot {
  name: string;
  m: Matcher;
  /** Time in add(), ms. */
  addMs: number;
  /** Time in updatePosition() for the devices of the added subscriptions, ms. */
  posMs: number;
}

const CHUNK = 4096;

/**
 * Streams one workload into several engines: each chunk is generated once (timed apart), then
 * added to each engine in turn (each timed on its own), then its owners' devices are placed.
 */
export class Loader {
  readonly slots: LoadSlot[] = [];
  loaded = 0;
  generateMs = 0;
  private readonly gen: Iterator<Subscription>;
  private readonly lat: Float64Array;
  private readonly lon: Float64Array;

  constructor(readonly src: WorkloadSource, readonly total: number) {
    this.gen = src.subscriptions(total)[Symbol.iterator]();
    // Device i owns subscription i; its initial position does not depend on the workload size.
    const t0 = now();
    const devices = src.devices(total);
    this.lat = Float64Array.from(devices, (d) => d.lat);
    this.lon = Float64Array.from(devices, (d) => d.lon);
    this.generateMs += msSince(t0);
  }

  add(name: string, m: Matcher): LoadSlot {
    if (this.loaded > 0) throw new Error(`bench: engine ${name} joined a load already at ${this.loaded}`);
    const s = { name, m, addMs: 0, posMs: 0 };
    this.slots.push(s);
    return s;
  }

  drop(name: string): void {
    const i = this.slots.findIndex((s) => s.name === name);
    if (i >= 0) this.slots.splice(i, 1);
  }

  position(i: number): LatLon {
    return { lat: this.lat[i], lon: this.lon[i] };
  }

  /** Device of owner `dev<i>`, or undefined. */
  ownerPosition(owner: string): LatLon | undefined {
    const i = Number(owner.slice(3));
    return owner.startsWith('dev') && Number.isInteger(i) && i >= 0 && i < this.loaded ? this.position(i) : undefined;
  }

  /**
   * Loads up to `n` subscriptions in all (no-op when already there). Stops early, returning false,
   * when `deadline` (performance.now() ms) passes; `tick` sees the count after every chunk.
   */
  loadTo(n: number, tick?: (loaded: number) => void, deadline = Infinity): boolean {
    const target = Math.min(n, this.total);
    const chunk: Subscription[] = [];
    while (this.loaded < target) {
      if (performance.now() > deadline) return false;
      const k = Math.min(CHUNK, target - this.loaded);
      let t0 = now();
      chunk.length = 0;
      for (let i = 0; i < k; i++) {
        const r = this.gen.next();
        if (r.done === true) throw new Error('bench: workload stream ended early');
        chunk.push(r.value);
      }
      this.generateMs += msSince(t0);
      for (const s of this.slots) {
        const m = s.m;
        t0 = now();
        for (let i = 0; i < k; i++) m.add(chunk[i]);
        s.addMs += msSince(t0);
      }
      const base = this.loaded;
      for (const s of this.slots) {
        const m = s.m;
        t0 = now();
        for (let i = base; i < base + k; i++) m.updatePosition(`dev${i}`, this.lat[i], this.lon[i]);
        s.posMs += msSince(t0);
      }
      this.loaded += k;
      tick?.(this.loaded);
    }
    return true;
  }
}

/** A Progress bar over a Loader's adds (one tick per chunk). */
export function loadWithProgress(loader: Loader, n: number, label: string): void {
  const from = loader.loaded;
  if (n <= from) return;
  const p = new Progress(`${label}: add ${count(n - from)} subscriptions (to ${count(n)})${loader.slots.length > 1 ? ` into ${loader.slots.map((s) => s.name).join(', ')}` : ''}`, n - from);
  let last = from;
  loader.loadTo(n, (loaded) => {
    p.tick(loaded - last);
    last = loaded;
  });
  p.end();
}

// ---------------------------------------------------------------- matching

/** Each event awaited on its own after `warmup` untimed ones; ns per event and the answers of the timed pass. */
export async function timeEvents(m: Matcher, events: readonly Event[], warmup: number, reps: number, label: string): Promise<{ ns: Float64Array; answers: string[][] }> {
  for (let i = 0; i < warmup; i++) sink(await m.match(events[i % events.length]));
  const ns = new Float64Array(events.length * reps);
  const answers: string[][] = new Array(events.length);
  const p = new Progress(`${label}: match ${events.length} events${reps > 1 ? ` x${reps}` : ''}`, ns.length);
  let k = 0;
  for (let r = 0; r < reps; r++) {
    for (let i = 0; i < events.length; i++) {
      const t0 = now();
      const ids = await m.match(events[i]);
      ns[k++] = Number(now() - t0);
      if (r === 0) answers[i] = ids;
      sink(ids);
      p.tick();
    }
  }
  p.end();
  return { ns, answers };
}


/** Events whose id sets differ. */
export function differing(a: readonly (readonly string[])[], b: readonly (readonly string[])[]): number {
  let n = 0;
  for (let i = 0; i < a.length; i++) {
    if (a[i].length !== b[i].length) {
      n++;
      continue;
    }
    const s = new Set(a[i]);
    if (!b[i].every((id) => s.has(id))) n++;
  }
  return n;
}

/**
 * The GPU's answers against a float64 engine's, per event. A one-sided id is explained by the
 * float32 band (docs/semantics.md X3, as test/support/differential.ts decides it) when
 *  - only the GPU returned it: some filter with matching content has r < d <= r + tol(r);
 *  - only the reference returned it: every filter the reference matched has r - tol(r) <= d <= r.
 */
export function verify(
  events: readonly Event[],
  gpu: readonly (readonly string[])[],
  ref: readonly (readonly string[])[],
  lookup: (id: string) => NSubscription | undefined,
  position: (owner: string) => LatLon | undefined,
  reference = 'fast',
): Verification {
  const v: Verification = { reference, events: events.length, eventsDiffering: 0, onlyGpu: 0, onlyReference: 0, explainedByBand: 0, unexplained: 0, examples: [] };
  for (let i = 0; i < events.length; i++) {
    const g = new Set(gpu[i]);
    const r = new Set(ref[i]);
    const onlyG = gpu[i].filter((id) => !r.has(id));
    const onlyR = ref[i].filter((id) => !g.has(id));
    if (onlyG.length === 0 && onlyR.length === 0) continue;
    v.eventsDiffering++;
    v.onlyGpu += onlyG.length;
    v.onlyReference += onlyR.length;
    const ne = validateEvent(events[i], DEFAULT_LIMITS);
    const attrs = attributeMap(ne);
    const check = (id: string, onlyGpuSide: boolean): void => {
      const s = lookup(id);
      let ok = false;
      if (s !== undefined) {
        const pos = position(s.owner);
        const within = (d: number | null | undefined, r: number, lo: number, hi: number): boolean => d !== null && d !== undefined && lo <= d - r && d - r <= hi;
        if (onlyGpuSide) {
          ok = s.filters.some((f) => f.area !== null && contentMatches(f, attrs) && within(filterDistance(f, pos, ne), f.area.radiusM + ne.radiusM, Number.MIN_VALUE, toleranceM(f.area.radiusM + ne.radiusM)));
        } else {
          const matched = s.filters.filter((f) => filterMatches(f, pos, ne, attrs));
          ok = matched.length > 0 && matched.every((f) => f.area !== null && within(filterDistance(f, pos, ne), f.area.radiusM + ne.radiusM, -toleranceM(f.area.radiusM + ne.radiusM), 0));
        }
      }
      if (ok) v.explainedByBand++;
      else {
        v.unexplained++;
        if (v.examples.length < 8) v.examples.push(`event ${events[i].id}: ${id} returned only by ${onlyGpuSide ? 'gpu' : reference}`);
      }
    };
    for (const id of onlyG) check(id, true);
    for (const id of onlyR) check(id, false);
  }
  return v;
}

// ---------------------------------------------------------------- suites

export type SkipFn = (engine: string, detail: string, reason: string) => void;

function errText(err: unknown): string {
  return err instanceof Error ? err.message.split('\n')[0] : String(err);
}

/** Materialises `n` subscriptions (untimed) so several engines load identical objects. */
function materialize(src: WorkloadSource, n: number, label: string): { subs: Subscription[]; ms: number } {
  const p = new Progress(`${label}: generate ${count(n)} subscriptions`, n);
  const subs: Subscription[] = new Array(n);
  let i = 0;
  for (const s of src.subscriptions(n)) {
    subs[i++] = s;
    p.tick();
  }
  return { subs, ms: p.end() };
}

export interface DefaultSuiteConfig {
  engines: string[];
  subscriptions: number;
  events: number;
  reps: number;
  warmupEvents: number;
}

/** Table 2: per engine, load, single-event latency, memory; then the GPU's answers against fast's. */
export async function runDefaultSuite(c: DefaultSuiteConfig, env: GpuEnv, skip: SkipFn, workload: Partial<WorkloadOptions> = {}): Promise<GpuDefaultResult> {
  const src = new WorkloadSource({ ...workload, seed: env.seed, subscriptions: c.subscriptions, events: c.events });
  const events = src.events();
  const devices = src.devices();
  const gen = materialize(src, c.subscriptions, 'default');
  const engines: GpuDefaultEngine[] = [];
  const answers = new Map<string, string[][]>();
  for (const name of c.engines) {
    const label = `default ${name}`;
    collect();
    const before = process.memoryUsage();
    const m = await engineOrSkip(name, env, skip, `${count(c.subscriptions)} subscriptions`);
    if (m === null) continue;
    try {
      const p = new Progress(`${label}: add ${count(c.subscriptions)} subscriptions`, c.subscriptions);
      let t0 = now();
      for (let i = 0; i < gen.subs.length; i++) {
        m.add(gen.subs[i]);
        p.tick();
      }
      const loadMs = msSince(t0);
      p.end();
      t0 = now();
      for (const d of devices) m.updatePosition(d.id, d.lat, d.lon);
      const positionsMs = msSince(t0);
      t0 = now();
      sink(await m.match(events[0]));
      const firstMatchMs = msSince(t0);
      const mem = memoryPoint(m);
      const { ns, answers: a } = await timeEvents(m, events, c.warmupEvents, c.reps, label);
      answers.set(name, a);
      const sum = checksum(a);
      const h = health(m);
      const problem = healthProblem(h);
      if (problem !== null) note(`  ${label}: ${problem}`);
      engines.push({
        engine: name,
        load: { totalMs: loadMs, perSubUs: (loadMs * 1000) / Math.max(1, c.subscriptions) },
        positionsMs,
        firstMatchMs,
        match: summarize(ns, 1e-6),
        avgMatches: sum.avgMatches,
        checksum: sum.checksum,
        memory: { ...mem, heapDeltaBytes: mem.heapUsedBytes - before.heapUsed, arrayBuffersDeltaBytes: mem.arrayBuffersBytes - before.arrayBuffers },
        health: h,
        stats: m.stats(),
      });
    } catch (err) {
      skip(name, `${count(c.subscriptions)} subscriptions`, errText(err));
    } finally {
      await m.close();
    }
  }
  let verification: Verification | null = null;
  const g = answers.get('gpu');
  const f = answers.get('fast');
  if (g !== undefined && f !== undefined) {
    const owners = new Map(devices.map((d) => [d.id, { lat: d.lat, lon: d.lon }]));
    const cpu = createEngine('fast');
    verification = verify(
      events,
      g,
      f,
      (id) => {
        const i = Number(id.slice(1));
        if (!(i >= 0 && i < gen.subs.length)) return undefined;
        if (!cpu.has(id)) cpu.add(gen.subs[i]); // normalised form, for the band check
        return cpu.get(id);
      },
      (owner) => owners.get(owner),
    );
    await cpu.close();
  }
  return {
    subscriptions: c.subscriptions,
    filters: src.stats.filters,
    constraints: src.stats.constraints,
    events: events.length,
    reps: c.reps,
    generateMs: gen.ms,
    engines,
    verification,
  };
}

// ---- grid (Fig. 3/4): one series = one (spatial, area), growing through the sizes

export interface SeriesSpec {
  spatial: SpatialKind;
  areaFraction: number;
  sizes: number[];
  engines: string[];
  rtreeMaxSubs: number;
  events: number;
  warmupEvents: number;
}

/** How a series waits for its turn to measure (other series load meanwhile in other processes). */
export interface SeriesGate {
  /** Resolves when this series may measure at `size` (nothing else is running then). */
  measure(size: number): Promise<void>;
  /** Hands over the points of `size`; resolves when the series may load on. */
  measured(size: number, points: GpuGridPoint[]): Promise<void>;
}

export const OPEN_GATE: SeriesGate = { measure: async () => {}, measured: async () => {} };

export function seriesLabel(s: { spatial: string; areaFraction: number }): string {
  return `${s.spatial} ${pct(s.areaFraction)}`;
}

export async function runSeries(spec: SeriesSpec, env: GpuEnv, gate: SeriesGate, skip: SkipFn): Promise<GpuGridPoint[]> {
  const sizes = [...spec.sizes].sort((a, b) => a - b);
  const max = sizes[sizes.length - 1];
  const src = new WorkloadSource({ seed: env.seed, spatial: spec.spatial, areaFraction: spec.areaFraction, subscriptions: max, events: spec.events });
  const events = src.events();
  const radiusM = src.params.filterRadiusM;
  const loader = new Loader(src, max);
  const label = `grid ${seriesLabel(spec)}`;
  const engines: { name: string; m: Matcher }[] = [];
  for (const name of spec.engines) {
    if (name === 'rtree' && sizes[0] > spec.rtreeMaxSubs) continue;
    try {
      const m = await makeEngine(name, env);
      engines.push({ name, m });
      loader.add(name, m);
    } catch (err) {
      skip(name, label, errText(err));
    }
  }
  const all: GpuGridPoint[] = [];
  try {
    for (const n of sizes) {
      for (const e of [...engines]) {
        if (e.name === 'rtree' && n > spec.rtreeMaxSubs) {
          loader.drop('rtree');
          engines.splice(engines.indexOf(e), 1);
          await e.m.close();
          skip('rtree', `${label} ${count(n)}+`, `rtree runs up to ${count(spec.rtreeMaxSubs)} subscriptions (--rtree-max-subs): its load is slow`);
        }
      }
      loadWithProgress(loader, n, label);
      // Buffers exist before timing starts: the first match uploads everything that was added.
      for (const e of engines) sink(await e.m.match(events[0]));
      collect();
      await gate.measure(n);
      const points: GpuGridPoint[] = [];
      const answers = new Map<string, string[][]>();
      for (const e of engines) {
        const { ns, answers: a } = await timeEvents(e.m, events, spec.warmupEvents, 1, `${label} ${e.name} ${count(n)}`);
        answers.set(e.name, a);
        const sum = checksum(a);
        const h = health(e.m);
        const problem = healthProblem(h);
        if (problem !== null) note(`  ${label} ${e.name} ${count(n)}: ${problem}`);
        points.push({
          engine: e.name,
          spatial: spec.spatial,
          areaFraction: spec.areaFraction,
          radiusM,
          subscriptions: n,
          loadMs: loader.slots.find((s) => s.name === e.name)?.addMs ?? NaN,
          match: summarize(ns, 1e-6),
          avgMatches: sum.avgMatches,
          checksum: sum.checksum,
          differsFromFast: null,
          health: h,
        });
      }
      const f = answers.get('fast');
      if (f !== undefined) for (const p of points) if (p.engine !== 'fast') p.differsFromFast = differing(answers.get(p.engine)!, f);
      all.push(...points);
      await gate.measured(n, points);
    }
  } finally {
    for (const e of engines) await e.m.close();
  }
  return all;
}

// ---- updates (Fig. 5)

export interface UpdatesSuiteConfig {
  engines: string[];
  subscriptions: number;
  timed: number;
  loop: number;
  batchSizes: number[];
  batchReps: number;
  moves: number[];
  movesReps: number;
  plainMatches: number;
  maxMoveSeconds: number;
  rtreeMaxSubs: number;
}

function distinct(idx: Int32Array, devices: number): number {
  const seen = new Uint8Array(devices);
  let n = 0;
  for (let k = 0; k < idx.length; k++) {
    if (seen[idx[k]] === 0) {
      seen[idx[k]] = 1;
      n++;
    }
  }
  return n;
}

export async function runUpdatesSuite(c: UpdatesSuiteConfig, env: GpuEnv, skip: SkipFn): Promise<GpuUpdateEngine[]> {
  const out: GpuUpdateEngine[] = [];
  for (const name of c.engines) {
    const label = `updates ${name}`;
    if (name === 'rtree' && c.subscriptions > c.rtreeMaxSubs) {
      skip(name, `${count(c.subscriptions)} subscriptions`, `rtree runs up to ${count(c.rtreeMaxSubs)} subscriptions (--rtree-max-subs)`);
      continue;
    }
    const m = await engineOrSkip(name, env, skip, `${count(c.subscriptions)} subscriptions`);
    if (m === null) continue;
    try {
      const src = new WorkloadSource({ seed: env.seed, subscriptions: c.subscriptions, events: 20 });
      const events = src.events();
      const loader = new Loader(src, c.subscriptions);
      loader.add(name, m);
      loadWithProgress(loader, c.subscriptions, label);
      const devices = src.devices();
      for (let i = 0; i < 10; i++) sink(await m.match(events[i % events.length]));
      // The reference event: every "moves then match" is compared with it matched on a quiet engine.
      const ev = events[0];
      const plainMatch = async (): Promise<Summary> => {
        const ns = new Float64Array(c.plainMatches);
        for (let i = 0; i < ns.length; i++) {
          const t0 = now();
          sink(await m.match(ev));
          ns[i] = Number(now() - t0);
        }
        return summarize(ns, 1e-6);
      };
      await plainMatch(); // warm-up of the timed loop

      const rw = new RandomWaypoint(devices, { space: src.space, seed: env.seed, order: 'random' });
      let t0 = now();
      const handles = devices.map((d) => m.openDevice(d.id));
      const openHandlesMs = msSince(t0);

      const p = new Progress(`${label}: ${c.timed} timed + ${c.loop} looped handle updates`, c.timed + c.loop);
      const warm = makeUpdates(rw, Math.max(100, Math.floor(c.timed / 10)));
      for (let k = 0; k < warm.idx.length; k++) handles[warm.idx[k]].update(warm.lat[k], warm.lon[k]);
      sink(await m.match(ev));
      const timed = makeUpdates(rw, c.timed);
      const perCall = new Float64Array(c.timed);
      for (let k = 0; k < c.timed; k++) {
        const h = handles[timed.idx[k]];
        const t = now();
        h.update(timed.lat[k], timed.lon[k]);
        perCall[k] = Number(now() - t);
        p.tick();
      }
      sink(await m.match(ev));
      const loop = makeUpdates(rw, c.loop);
      t0 = now();
      for (let k = 0; k < c.loop; k++) handles[loop.idx[k]].update(loop.lat[k], loop.lon[k]);
      const loopNs = Number(now() - t0);
      p.tick(c.loop);
      p.end();
      sink(await m.match(ev));
      const nsPerUpdate = loopNs / Math.max(1, c.loop);

      // updatePositions with arrays of `size` updates; pending moves are flushed (untimed) between calls.
      const batch: GpuUpdateEngine['batch'] = [];
      for (const size of c.batchSizes) {
        const reps = c.batchReps;
        const estS = ((reps + 1) * size * nsPerUpdate) / 1e9;
        if (estS > c.maxMoveSeconds) {
          skip(name, `updates: updatePositions(${count(size)})`, `${reps + 1} calls would take about ${sig(estS)} s at the measured ${sig(nsPerUpdate)} ns/update (--max-move-seconds ${c.maxMoveSeconds})`);
          continue;
        }
        const lists: PositionUpdate[][] = [];
        for (let r = 0; r < reps + 1; r++) {
          const mv = makeUpdates(rw, size);
          lists.push(Array.from(mv.idx, (i, k) => ({ device: devices[i].id, lat: mv.lat[k], lon: mv.lon[k] })));
        }
        m.updatePositions(lists[0]); // warm-up
        sink(await m.match(ev));
        const ms = new Float64Array(reps);
        for (let r = 0; r < reps; r++) {
          const t = now();
          m.updatePositions(lists[r + 1]);
          ms[r] = msSince(t);
          sink(await m.match(ev));
        }
        const s = summarize(ms);
        batch.push({ size, reps, ms: s, updatesPerSec: size / (s.median / 1000) });
      }

      // N moves, then one match of the reference event: what the moved positions cost end to end.
      const movesThenMatch: MovesThenMatch[] = [];
      const base = await plainMatch();
      for (const n of c.moves) {
        const estS = (c.movesReps * n * nsPerUpdate) / 1e9;
        if (estS > c.maxMoveSeconds) {
          skip(name, `updates: ${count(n)} moves then match`, `${c.movesReps} × ${count(n)} moves would take about ${sig(estS)} s at the measured ${sig(nsPerUpdate)} ns/update (--max-move-seconds ${c.maxMoveSeconds})`);
          continue;
        }
        const movesMs = new Float64Array(c.movesReps);
        const matchMs = new Float64Array(c.movesReps);
        let dist = 0;
        for (let r = 0; r < c.movesReps; r++) {
          const mv = makeUpdates(rw, n);
          dist = distinct(mv.idx, devices.length);
          t0 = now();
          for (let k = 0; k < n; k++) handles[mv.idx[k]].update(mv.lat[k], mv.lon[k]);
          movesMs[r] = msSince(t0);
          t0 = now();
          sink(await m.match(ev));
          matchMs[r] = msSince(t0);
        }
        const mvS = summarize(movesMs);
        const maS = summarize(matchMs);
        const extra = maS.median - base.median;
        movesThenMatch.push({
          moves: n,
          distinctDevices: dist,
          reps: c.movesReps,
          movesMs: mvS,
          matchMs: maS,
          extraMs: extra,
          endToEndUpdatesPerSec: n / ((mvS.median + Math.max(0, extra)) / 1000),
        });
      }
      for (const h of handles) h.release();
      out.push({
        engine: name,
        subscriptions: c.subscriptions,
        devices: devices.length,
        loadMs: loader.slots[0].addMs,
        openHandlesMs,
        handlePerCallUs: summarize(perCall, 1e-3),
        handleLoop: { updates: c.loop, nsPerUpdate, updatesPerSec: 1e9 / nsPerUpdate },
        batch,
        plainMatch: base,
        movesThenMatch,
        health: health(m),
      });
    } catch (err) {
      skip(name, `${count(c.subscriptions)} subscriptions`, errText(err));
    } finally {
      await m.close();
    }
  }
  return out;
}

// ---- stages (Fig. 6)

/**
 * Fig. 6(b) "constraints chosen to select every event": selectivity 1 with `exists` as the only
 * operator, the one the generator can make always true (it drops other always-true constraints
 * as noise); one event type, so every event carries every name a filter constrains.
 */
export const ALL_CONTENT: Partial<WorkloadOptions> = Object.freeze({ selectivity: 1, numericOps: { exists: 1 }, stringOps: { exists: 1 } });

export interface StagesSuiteConfig {
  sizes: number[];
  events: number;
  warmupEvents: number;
  variants: StageVariant[];
}

export async function runStagesSuite(c: StagesSuiteConfig, env: GpuEnv, skip: SkipFn, onPoint: (p: GpuStagePoint, timestampQuery: boolean) => void): Promise<void> {
  const sizes = [...c.sizes].sort((a, b) => a - b);
  const max = sizes[sizes.length - 1];
  for (const variant of c.variants) {
    const label = `stages ${variant}`;
    let src: WorkloadSource;
    try {
      src = new WorkloadSource({ seed: env.seed, subscriptions: max, events: c.events, ...(variant === 'all-content' ? ALL_CONTENT : {}) });
    } catch (err) {
      skip('gpu', label, `the generator cannot make this variant: ${errText(err)}`);
      continue;
    }
    let m: Matcher;
    try {
      m = await makeEngine('gpu', env, true);
    } catch (err) {
      skip('gpu', label, errText(err));
      continue;
    }
    try {
      const g = m as GpuMatcher;
      const tsq = g.context?.features.has('timestamp-query') === true;
      const events = src.events();
      const loader = new Loader(src, max);
      loader.add('gpu', m);
      for (const n of sizes) {
        loadWithProgress(loader, n, label);
        sink(await m.match(events[0]));
        const memory = memoryPoint(m);
        for (let i = 0; i < c.warmupEvents; i++) sink(await m.match(events[i % events.length]));
        const E = events.length;
        const total = new Float64Array(E);
        const submit = new Float64Array(E);
        const wait = new Float64Array(E);
        const loc: number[] = [];
        const cont: number[] = [];
        const zip: number[] = [];
        const gpuSum: number[] = [];
        const host: number[] = [];
        let matches = 0;
        const p = new Progress(`${label} ${count(n)}: match ${E} events`, E);
        for (let i = 0; i < E; i++) {
          const t0 = now();
          const pending = m.match(events[i]);
          const t1 = now();
          const ids = await pending;
          const t2 = now();
          sink(ids);
          matches += ids.length;
          total[i] = Number(t2 - t0) / 1e6;
          submit[i] = Number(t1 - t0) / 1e6;
          wait[i] = Number(t2 - t1) / 1e6;
          const st = g.stageTimes;
          if (tsq && st !== null) {
            loc.push(st.loc);
            cont.push(st.cont);
            zip.push(st.zip);
            const sum = st.loc + st.cont + st.zip;
            gpuSum.push(sum);
            host.push(total[i] - sum);
          }
          p.tick();
        }
        p.end();
        const opt = (a: number[]): Summary | null => (a.length === 0 ? null : summarize(a));
        onPoint(
          {
            variant,
            subscriptions: n,
            filters: src.stats.filters,
            events: E,
            avgMatches: matches / E,
            expectedSelectivity: src.stats.expectedSelectivity,
            total: summarize(total),
            submit: summarize(submit),
            wait: summarize(wait),
            loc: opt(loc),
            cont: opt(cont),
            zip: opt(zip),
            gpu: opt(gpuSum),
            hostAndTransfer: opt(host),
            loadMs: loader.slots[0].addMs,
            memory,
            health: health(m),
          },
          tsq,
        );
      }
    } catch (err) {
      skip('gpu', label, errText(err));
    } finally {
      await m.close();
    }
  }
}

// ---- memory (Fig. 7)

export async function runMemorySuite(sizes: number[], env: GpuEnv, skip: SkipFn, onPoint: (p: GpuMemoryPointResult) => void): Promise<void> {
  const sorted = [...sizes].sort((a, b) => a - b);
  const max = sorted[sorted.length - 1];
  let m: Matcher;
  try {
    m = await makeEngine('gpu', env);
  } catch (err) {
    skip('gpu', 'memory', errText(err));
    return;
  }
  try {
    const src = new WorkloadSource({ seed: env.seed, subscriptions: max, events: 1 });
    const ev = src.events()[0];
    const loader = new Loader(src, max);
    loader.add('gpu', m);
    for (const n of sorted) {
      loadWithProgress(loader, n, 'memory');
      sink(await m.match(ev)); // uploads: GPU buffers are sized at the first match after a load
      const h = health(m);
      const problem = healthProblem(h);
      if (problem !== null) note(`  memory ${count(n)}: ${problem}`);
      onPoint({ subscriptions: n, filters: src.stats.filters, constraints: src.stats.constraints, loadMs: loader.slots[0].addMs, ...memoryPoint(m), health: h });
    }
  } catch (err) {
    skip('gpu', 'memory', errText(err));
  } finally {
    await m.close();
  }
}

// ---- batch

export interface BatchSuiteConfig {
  engines: string[];
  subscriptions: number;
  sizes: number[];
  concurrency: number[];
  /** matchBatch calls of `size` events kept `depth` in flight (a publisher feed): sustained rate. */
  streams: { size: number; depth: number }[];
  /** Events per batch size (at least 3 calls) for the GPU; cpuEvents for CPU engines. */
  events: number;
  cpuEvents: number;
}

export async function runBatchSuite(c: BatchSuiteConfig, env: GpuEnv, skip: SkipFn): Promise<GpuBatchResult> {
  const src = new WorkloadSource({ seed: env.seed, subscriptions: c.subscriptions, events: 1000 });
  const pool = src.events();
  const result: GpuBatchResult = { subscriptions: c.subscriptions, filters: 0, engines: [] };
  for (const name of c.engines) {
    const label = `batch ${name}`;
    const m = await engineOrSkip(name, env, skip, `${count(c.subscriptions)} subscriptions`);
    if (m === null) continue;
    try {
      const loader = new Loader(src, c.subscriptions);
      loader.add(name, m);
      loadWithProgress(loader, c.subscriptions, label);
      result.filters = src.stats.filters;
      for (let i = 0; i < 20; i++) sink(await m.match(pool[i]));
      const target = name === 'gpu' ? c.events : c.cpuEvents;
      let cursor = 0;
      const take = (k: number): Event[] => {
        const out: Event[] = new Array(k);
        for (let i = 0; i < k; i++) out[i] = pool[cursor++ % pool.length];
        return out;
      };
      const engine: GpuBatchEngine = { engine: name, batches: [], concurrent: [], streams: [], health: null };
      for (const size of c.sizes) {
        const calls = Math.max(3, Math.ceil(target / size));
        const lists = Array.from({ length: calls }, () => take(size));
        for (let w = 0; w < 2; w++) sinkNumber((await m.matchBatch(take(size))).length);
        const ms = new Float64Array(calls);
        const p = new Progress(`${label}: ${calls} batches of ${size}`, calls);
        const t0 = now();
        for (let k = 0; k < calls; k++) {
          const t = now();
          const res = await m.matchBatch(lists[k]);
          ms[k] = msSince(t);
          for (const ids of res) sink(ids);
          p.tick();
        }
        const wall = msSince(t0);
        p.end();
        engine.batches.push({ batchSize: size, calls, batchMs: summarize(ms), eventsPerSec: (calls * size) / (wall / 1000) });
      }
      // A feed: matchBatch calls kept `depth` in flight, each issued as soon as one returns (GPU
      // only: a CPU engine answers a call before the next can be issued).
      if (name === 'gpu') {
        for (const { size, depth } of c.streams) {
          const calls = Math.max(4 * depth, Math.ceil((4 * target) / size));
          const lists = Array.from({ length: Math.min(calls, 64) }, () => take(size));
          for (let w = 0; w < depth; w++) sinkNumber((await m.matchBatch(lists[w % lists.length])).length);
          const ms = new Float64Array(calls);
          const p = new Progress(`${label}: ${calls} batches of ${size}, ${depth} in flight`, calls);
          let issued = 0;
          const t0 = now();
          const lane = async (): Promise<void> => {
            while (issued < calls) {
              const k = issued++;
              const t = now();
              const res = await m.matchBatch(lists[k % lists.length]);
              ms[k] = msSince(t);
              sinkNumber(res.length);
              p.tick();
            }
          };
          await Promise.all(Array.from({ length: depth }, lane));
          const wall = msSince(t0);
          p.end();
          engine.streams!.push({ batchSize: size, depth, calls, callMs: summarize(ms), eventsPerSec: (calls * size) / (wall / 1000) });
        }
      }
      // Many match() calls in flight at once: the engine forms its own batches (GPU only; CPU
      // engines answer synchronously, so concurrency changes nothing there).
      if (name === 'gpu') {
        for (const conc of c.concurrency) {
          const rounds = Math.max(3, Math.ceil(target / conc));
          const lat: number[] = [];
          let wall = 0;
          for (let r = -1; r < rounds; r++) {
            const evs = take(conc);
            const t0 = now();
            const stamps = new Float64Array(conc);
            await Promise.all(
              evs.map((e, i) =>
                m.match(e).then((ids) => {
                  stamps[i] = Number(now() - t0) / 1e6;
                  sink(ids);
                }),
              ),
            );
            if (r < 0) continue; // warm-up round
            wall += msSince(t0);
            for (const s of stamps) lat.push(s);
          }
          engine.concurrent.push({ concurrency: conc, rounds, latencyMs: summarize(lat), eventsPerSec: (rounds * conc) / (wall / 1000) });
        }
      }
      engine.health = health(m);
      const problem = healthProblem(engine.health);
      if (problem !== null) note(`  ${label}: ${problem}`);
      result.engines.push(engine);
    } catch (err) {
      skip(name, `${count(c.subscriptions)} subscriptions`, errText(err));
    } finally {
      await m.close();
    }
  }
  return result;
}

// ---- scale

export interface ScaleSuiteConfig {
  subscriptions: number;
  /** Fractions of `subscriptions` at which to measure (1 = all). */
  checkpoints: number[];
  events: number;
  warmupEvents: number;
  /** Stop loading after this many seconds (0: no limit) and measure what is resident. */
  maxLoadS: number;
}

/** Host bytes per subscription of the GPU engine (its CPU engine, host mirror, ids), measured at 200k with 10 filters. */
export const GPU_HOST_BYTES_PER_SUB = 7000;

export async function runScaleSuite(c: ScaleSuiteConfig, env: GpuEnv, skip: SkipFn, onCheckpoint: (r: GpuScaleResult) => void): Promise<GpuScaleResult | null> {
  const n = c.subscriptions;
  const result: GpuScaleResult = { requested: n, loaded: 0, truncated: null, loadRateSubsPerSec: 0, checkpoints: [] };
  let m: Matcher;
  try {
    m = await makeEngine('gpu', env);
  } catch (err) {
    skip('gpu', `scale ${count(n)}`, errText(err));
    return null;
  }
  try {
    const src = new WorkloadSource({ seed: env.seed, subscriptions: n, events: c.events });
    const events = src.events();
    const loader = new Loader(src, n);
    loader.add('gpu', m);
    const marks = [...new Set(c.checkpoints.map((f) => Math.max(1, Math.round(f * n))))].sort((a, b) => a - b);
    const slot = loader.slots[0];
    // The time limit counts loading only (generation, adds, positions), not the checkpoints' measurements.
    const loadingS = (): number => (loader.generateMs + slot.addMs + slot.posMs) / 1000;
    let nextPct = 5;
    const tick = (loaded: number): void => {
      const p = (100 * loaded) / n;
      if (p + 1e-9 < nextPct && loaded < n) return;
      while (nextPct <= p) nextPct += 5;
      const s = loadingS();
      const rate = loaded / s;
      const rss = process.memoryUsage().rss / 2 ** 30;
      note(`  [scale] ${loaded.toLocaleString('en-US')}/${n.toLocaleString('en-US')} (${Math.round(p)}%) ${s.toFixed(0)} s, ${sig(rate)} subs/s, eta ${((n - loaded) / rate).toFixed(0)} s, rss ${rss.toFixed(1)} GiB`);
    };
    for (const mark of marks) {
      const deadline = c.maxLoadS > 0 ? performance.now() + (c.maxLoadS - loadingS()) * 1000 : Infinity;
      const done = loader.loadTo(mark, tick, deadline);
      if (!done) result.truncated = `load time limit of ${c.maxLoadS} s (--scale-max-load-s) reached at ${loader.loaded.toLocaleString('en-US')} subscriptions`;
      const size = loader.loaded;
      if (result.checkpoints.some((k) => k.subscriptions === size)) break;
      note(`  [scale] measuring at ${count(size)} subscriptions (${count(src.stats.filters)} filters)`);
      const t0 = now();
      sink(await m.match(events[0]));
      const firstMatchMs = msSince(t0);
      const memory = memoryPoint(m);
      const { ns, answers } = await timeEvents(m, events, c.warmupEvents, 1, `scale ${count(size)}`);
      const h = health(m);
      const problem = healthProblem(h);
      if (problem !== null) note(`  [scale] ${problem}`);
      result.loaded = size;
      result.loadRateSubsPerSec = size / (slot.addMs / 1000);
      result.checkpoints.push({
        subscriptions: size,
        filters: src.stats.filters,
        constraints: src.stats.constraints,
        loadMs: slot.addMs,
        generateMs: loader.generateMs,
        firstMatchMs,
        match: summarize(ns, 1e-6),
        avgMatches: checksum(answers).avgMatches,
        memory,
        health: h,
      });
      onCheckpoint(result);
      if (!done) break;
    }
  } catch (err) {
    result.truncated = `failed at ${result.loaded.toLocaleString('en-US')}+ subscriptions: ${errText(err)}`;
    skip('gpu', `scale ${count(n)}`, errText(err));
  } finally {
    await m.close();
  }
  return result;
}
