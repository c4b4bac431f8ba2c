/**
 * The measurements. Each job runs in a fresh process (see fork.ts) so that one engine's garbage,
 * JIT state and heap growth never bill another; inside a job: generate (untimed), warm up, measure.
 * Only the Matcher interface is used.
 */
import { CPU_ENGINES, type Matcher, type MatcherOptions } from '../../src/engines/index.js';
import type { Event, Subscription } from '../../src/model/types.js';
import {
  type Device,
  RandomWaypoint,
  type SpatialKind,
  type WorkloadOptions,
  WorkloadSource,
  radiusForAreaFraction,
} from '../../src/workload/index.js';
import { BASELINES } from './baselines.js';
import { pct } from './format.js';
import { collect, gcExposed, materialize, now } from './measure.js';
import { Progress } from './progress.js';
import type { DefaultConfig, DefaultResult, GridPoint, GridResult, MemoryFigures, UpdateFigures, UpdateResult } from './schema.js';
import { sink, sinkNumber } from './sink.js';
import { checksum, summarize } from './stats.js';
import { type UpdateList, makeUpdates } from './moves.js';

export type Job =
  | { kind: 'default'; engine: string; workload: Partial<WorkloadOptions>; config: DefaultConfig }
  | { kind: 'grid'; engine: string; workload: Partial<WorkloadOptions>; spatial: SpatialKind; subscriptions: number; areas: number[]; events: number; warmupEvents: number }
  | { kind: 'update'; engine: string; workload: Partial<WorkloadOptions>; spatial: SpatialKind; subscriptions: number; updates: number; bulkUpdates: number };

export type JobResult = DefaultResult | GridResult | UpdateResult;


/** An engine of the registry, or a baseline (bench/lib/baselines.ts: what users would build instead). */
export function createEngine(name: string, options?: MatcherOptions): Matcher {
  const make = (CPU_ENGINES as Record<string, ((o?: MatcherOptions) => Matcher) | undefined>)[name] ?? BASELINES[name];
  if (make === undefined) throw new Error(`bench: unknown engine ${JSON.stringify(name)} (registered: ${Object.keys(CPU_ENGINES).join(', ')}; baselines: ${Object.keys(BASELINES).join(', ')})`);
  return make(options);
}

export async function runJob(job: Job): Promise<JobResult> {
  switch (job.kind) {
    case 'default': return runDefault(job);
    case 'grid': return runGrid(job);
    case 'update': return runUpdate(job);
  }
}

// ---- building blocks ----

function load(m: Matcher, subs: readonly Subscription[], label: string): number {
  const p = new Progress(`${label}: add ${subs.length} subscriptions`, subs.length);
  const t0 = now();
  for (let i = 0; i < subs.length; i++) {
    m.add(subs[i]);
    p.tick();
  }
  const ms = Number(now() - t0) / 1e6;
  p.end();
  return ms;
}

function place(m: Matcher, devices: readonly Device[]): number {
  const t0 = now();
  for (let i = 0; i < devices.length; i++) m.updatePosition(devices[i].id, devices[i].lat, devices[i].lon);
  return Number(now() - t0) / 1e6;
}

/**
 * Changes every filter's radius in place (the bench owns these objects; engines copy on add), so
 * one generated workload serves every area of the Fig. 3/4 grid with identical content.
 */
function setRadius(subs: readonly Subscription[], radiusM: number): void {
  const anchored = Object.freeze({ radiusM });
  for (const s of subs) {
    for (const f of s.filters) {
      if (f.area === undefined) continue;
      if (f.area.center === undefined) f.area = anchored;
      else f.area = { radiusM, center: f.area.center };
    }
  }
}

/** Least warm-up time before timing: a fixed event count leaves µs-scale cases un-optimised by the JIT. */
const MIN_WARMUP_MS = 300;

/**
 * The untimed warm-up before events are timed one at a time: one event, which may carry an
 * engine's one-time work (the fast engine files the positions placed since its last match then:
 * seconds at 1M devices; the GPU engine uploads its state), then at least `warmup` events and at
 * least MIN_WARMUP_MS (cycling over the events, at most 20 passes) on a clock started after that
 * first event. Before, the first event's filing used up the clock, so an engine that files lazily
 * was timed after 50 warm-up events where the others had 20 passes. (A collection after the first
 * event was tried too: it made rbush's rows slower and noisier, so there is none.)
 */
export async function warmUp(m: Matcher, events: readonly Event[], warmup: number): Promise<void> {
  if (events.length === 0) return;
  sink(await m.match(events[0]));
  const started = performance.now();
  for (let i = 1; i < Math.min(warmup, events.length) || (performance.now() - started < MIN_WARMUP_MS && i < 20 * events.length); i++) {
    sink(await m.match(events[i % events.length]));
  }
}

/** Per-event latency (ns), each event awaited on its own, after `warmUp`. */
async function timeEvents(m: Matcher, events: readonly Event[], warmup: number, reps: number, label: string): Promise<Float64Array> {
  await warmUp(m, events, warmup);
  const out = new Float64Array(events.length * reps);
  const p = new Progress(`${label}: match ${events.length} events${reps > 1 ? ` x${reps}` : ''}`, out.length);
  let k = 0;
  for (let r = 0; r < reps; r++) {
    for (let i = 0; i < events.length; i++) {
      const t0 = now();
      const ids = await m.match(events[i]);
      out[k++] = Number(now() - t0);
      sink(ids);
      p.tick();
    }
  }
  p.end();
  return out;
}


function timeUpdates(m: Matcher, rw: RandomWaypoint, count: number, bulk: number, label: string): { plain: UpdateFigures; handle: UpdateFigures | null } {
  const warm = makeUpdates(rw, Math.max(100, Math.floor(count / 10)));
  for (let k = 0; k < warm.ids.length; k++) m.updatePosition(warm.ids[k], warm.lat[k], warm.lon[k]);
  const p = new Progress(`${label}: ${count} + ${bulk} updates`, 2 * (count + bulk));

  const timed = makeUpdates(rw, count);
  const ns = new Float64Array(count);
  for (let k = 0; k < count; k++) {
    const t0 = now();
    m.updatePosition(timed.ids[k], timed.lat[k], timed.lon[k]);
    ns[k] = Number(now() - t0);
    p.tick();
  }
  const many = makeUpdates(rw, bulk);
  let t0 = now();
  for (let k = 0; k < bulk; k++) m.updatePosition(many.ids[k], many.lat[k], many.lon[k]);
  const bulkNs = Number(now() - t0);
  p.tick(bulk);
  const plain: UpdateFigures = { perCall: summarize(ns, 1e-3), perSec: bulk / (bulkNs / 1e9) };

  // The same kind of moves through device handles (the hot path for a device's own stream).
  let handle: UpdateFigures | null = null;
  if (typeof m.openDevice === 'function') {
    const timed2 = makeUpdates(rw, count);
    const many2 = makeUpdates(rw, bulk);
    const handles = new Map<number, ReturnType<Matcher['openDevice']>>();
    const hs = (list: UpdateList): ReturnType<Matcher['openDevice']>[] =>
      Array.from(list.idx, (i, k) => {
        let h = handles.get(i);
        if (h === undefined) handles.set(i, (h = m.openDevice(list.ids[k])));
        return h;
      });
    const h1 = hs(timed2);
    const h2 = hs(many2);
    const ns2 = new Float64Array(count);
    for (let k = 0; k < count; k++) {
      const t = now();
      h1[k].update(timed2.lat[k], timed2.lon[k]);
      ns2[k] = Number(now() - t);
      p.tick();
    }
    t0 = now();
    for (let k = 0; k < bulk; k++) h2[k].update(many2.lat[k], many2.lon[k]);
    const bulk2 = Number(now() - t0);
    p.tick(bulk);
    for (const h of handles.values()) h.release();
    handle = { perCall: summarize(ns2, 1e-3), perSec: bulk / (bulk2 / 1e9) };
  }
  p.end();
  return { plain, handle };
}

function memory(m: Matcher, before: NodeJS.MemoryUsage | null): MemoryFigures {
  collect();
  const after = process.memoryUsage();
  return {
    engineBytes: m.stats().memoryBytes,
    heapDeltaBytes: before === null ? null : after.heapUsed - before.heapUsed,
    externalDeltaBytes: before === null ? null : after.external - before.external,
    rssBytes: after.rss,
  };
}

// ---- suites ----

/** CLCB Table 1: load, per-event latency, throughput, updates, memory. */
async function runDefault(job: Extract<Job, { kind: 'default' }>): Promise<DefaultResult> {
  const c = job.config;
  const label = `default ${job.engine}`;
  const src = new WorkloadSource({ ...job.workload, subscriptions: c.subscriptions, events: c.events });
  const events = src.events();
  const devices = src.devices();
  collect();
  const before = gcExposed ? process.memoryUsage() : null;

  let subs: Subscription[] | null = null;
  let generateMs = 0;
  ({ subs, ms: generateMs } = materialize(src, c.subscriptions, label));
  const m = createEngine(job.engine);
  const loadMs = load(m, subs, label);
  const filters = src.stats.filters;
  const constraints = src.stats.constraints;
  subs = null;
  const positionsMs = place(m, devices);
  const mem = memory(m, before);

  const ns = await timeEvents(m, events, c.warmupEvents, c.reps, label);

  // Throughput: the whole event set per matchBatch call.
  const batches = Math.max(3, c.reps);
  const batchNs = new Float64Array(batches);
  let answers: string[][] = [];
  for (let b = 0; b < batches; b++) {
    const t0 = now();
    answers = await m.matchBatch(events);
    batchNs[b] = Number(now() - t0);
    sinkNumber(answers.length);
  }
  const batch = summarize(batchNs, 1e-6);
  const sum = checksum(answers);

  const rw = new RandomWaypoint(devices, { space: src.space, seed: src.params.seed, order: 'random' });
  const upd = timeUpdates(m, rw, c.updates, c.bulkUpdates, label);

  // Mixed: updates then one event, repeatedly.
  const mixMatch = new Float64Array(c.mixedRounds);
  const mixUpd = new Float64Array(c.mixedRounds);
  for (let r = 0; r < c.mixedRounds; r++) {
    const list = makeUpdates(rw, c.updatesPerEvent);
    let t0 = now();
    for (let k = 0; k < c.updatesPerEvent; k++) m.updatePosition(list.ids[k], list.lat[k], list.lon[k]);
    mixUpd[r] = Number(now() - t0) / Math.max(1, c.updatesPerEvent);
    const e = events[r % events.length];
    t0 = now();
    sink(await m.match(e));
    mixMatch[r] = Number(now() - t0);
  }

  const result: DefaultResult = {
    engine: job.engine,
    subscriptions: c.subscriptions,
    filters,
    constraints,
    events: events.length,
    generateMs,
    load: { totalMs: loadMs, perSubUs: (loadMs * 1000) / Math.max(1, c.subscriptions) },
    positions: { totalMs: positionsMs, perDeviceUs: (positionsMs * 1000) / Math.max(1, devices.length) },
    match: summarize(ns, 1e-6),
    throughput: { eventsPerSec: events.length / (batch.median / 1000), batchMs: batch },
    update: upd.plain,
    handleUpdate: upd.handle,
    mixed: { updatesPerEvent: c.updatesPerEvent, match: summarize(mixMatch, 1e-6), updatesUs: summarize(mixUpd, 1e-3) },
    memory: mem,
    avgMatches: sum.avgMatches,
    checksum: sum.checksum,
    stats: m.stats(),
  };
  await m.close();
  return result;
}

/** CLCB Fig. 3/4: per-event latency over subscriptions × area, for one spatial distribution. */
async function runGrid(job: Extract<Job, { kind: 'grid' }>): Promise<GridResult> {
  const label = `grid ${job.engine} ${job.spatial} ${job.subscriptions}`;
  const src = new WorkloadSource({ ...job.workload, spatial: job.spatial, subscriptions: job.subscriptions, events: job.events });
  const events = src.events();
  const devices = src.devices();
  const gen = materialize(src, job.subscriptions, label);
  const points: GridPoint[] = [];
  for (const area of job.areas) {
    const radiusM = radiusForAreaFraction(area, src.params.regionInfo);
    setRadius(gen.subs, radiusM);
    collect();
    const l = `${label} area ${pct(area)}`;
    const m = createEngine(job.engine);
    const loadMs = load(m, gen.subs, l);
    place(m, devices);
    const ns = await timeEvents(m, events, job.warmupEvents, 1, l);
    const sum = checksum(await m.matchBatch(events));
    points.push({ areaFraction: area, radiusM, loadMs, match: summarize(ns, 1e-6), avgMatches: sum.avgMatches, checksum: sum.checksum });
    await m.close();
  }
  return { engine: job.engine, spatial: job.spatial, subscriptions: job.subscriptions, generateMs: gen.ms, points };
}

/** CLCB Fig. 5: update time over subscriptions. */
async function runUpdate(job: Extract<Job, { kind: 'update' }>): Promise<UpdateResult> {
  const label = `update ${job.engine} ${job.spatial} ${job.subscriptions}`;
  const src = new WorkloadSource({ ...job.workload, spatial: job.spatial, subscriptions: job.subscriptions, events: 0 });
  const devices = src.devices();
  let subs: Subscription[] | null = null;
  ({ subs } = materialize(src, job.subscriptions, label));
  const m = createEngine(job.engine);
  const loadMs = load(m, subs, label);
  subs = null;
  place(m, devices);
  collect();
  const rw = new RandomWaypoint(devices, { space: src.space, seed: src.params.seed, order: 'random' });
  const upd = timeUpdates(m, rw, job.updates, job.bulkUpdates, label);
  await m.close();
  return { engine: job.engine, spatial: job.spatial, subscriptions: job.subscriptions, loadMs, update: upd.plain, handleUpdate: upd.handle };
}
