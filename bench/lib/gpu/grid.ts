/**
 * The Fig. 3/4 grid of the GPU benchmark, optionally spread over processes. Loading dominates the
 * grid (every (spatial, area) series grows engines to 1M subscriptions) and is single-threaded, so
 * series load in parallel processes; measuring is strictly one process at a time, while every
 * other one waits idle on its IPC channel, so no timing shares the machine with a load:
 *
 *   parent → all:  start(spec)
 *   each → parent: loaded(size)                 (after its own GC)
 *   parent → one at a time: measure  →  measured(size, points)
 *   parent → all:  continue                     (next size)
 *   each → parent: done | error
 */
import { type ChildProcess, fork } from 'node:child_process';
import type { Matcher } from '../../../src/engines/index.js';
import { type SpatialKind, WorkloadSource } from '../../../src/workload/index.js';
import { count, pct } from '../format.js';
import { childExecArgv } from '../fork.js';
import { collect, errText } from '../measure.js';
import { note } from '../progress.js';
import { sink, sinkValue } from '../sink.js';
import { checksum, summarize } from '../stats.js';
import { type GpuEnv, type SkipFn, health, healthProblem, makeEngine, timeEvents } from './common.js';
import { Loader, loadWithProgress } from './loader.js';
import type { GpuGridPoint } from './schema.js';
import { differing } from './verify.js';

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

// ---- series over processes

type ToChild = { type: 'start'; spec: SeriesSpec; env: GpuEnv } | { type: 'measure' } | { type: 'continue' };
type FromChild =
  | { type: 'loaded'; size: number }
  | { type: 'measured'; size: number; points: GpuGridPoint[] }
  | { type: 'skip'; engine: string; detail: string; reason: string }
  | { type: 'done'; sink: number }
  | { type: 'error'; message: string }
  | { type: 'exit'; code: number | null; signal: string | null };

/** Messages in arrival order, awaited one at a time. */
class Inbox<T> {
  private readonly items: T[] = [];
  private waiter: ((t: T) => void) | null = null;

  push(t: T): void {
    if (this.waiter !== null) {
      const w = this.waiter;
      this.waiter = null;
      w(t);
    } else this.items.push(t);
  }

  next(): Promise<T> {
    const t = this.items.shift();
    if (t !== undefined) return Promise.resolve(t);
    return new Promise((resolve) => {
      this.waiter = resolve;
    });
  }
}

/** Runs the series, `jobs` at a time; `onPoints` receives each (series, size)'s points as they come. */
export async function runGrid(
  specs: readonly SeriesSpec[],
  jobs: number,
  env: GpuEnv,
  entry: string,
  skip: SkipFn,
  onPoints: (points: GpuGridPoint[]) => void,
): Promise<{ sink: number }> {
  if (jobs <= 1) {
    const gate: SeriesGate = { ...OPEN_GATE, measured: async (_size, points) => onPoints(points) };
    for (const spec of specs) {
      try {
        await runSeries(spec, env, gate, skip);
      } catch (err) {
        skip('*', `grid ${seriesLabel(spec)}`, errText(err));
      }
    }
    return { sink: 0 };
  }
  let sinkTotal = 0;
  for (let r = 0; r < specs.length; r += jobs) {
    const round = specs.slice(r, r + jobs);
    note(`[grid] round ${r / jobs + 1}/${Math.ceil(specs.length / jobs)}: ${round.length} series loading in parallel: ${round.map(seriesLabel).join(', ')}`);
    sinkTotal = (sinkTotal + (await runRound(round, env, entry, skip, onPoints))) | 0;
  }
  return { sink: sinkTotal };
}

interface Child {
  spec: SeriesSpec;
  proc: ChildProcess;
  inbox: Inbox<FromChild>;
  alive: boolean;
}

async function runRound(round: readonly SeriesSpec[], env: GpuEnv, entry: string, skip: SkipFn, onPoints: (points: GpuGridPoint[]) => void): Promise<number> {
  const children: Child[] = round.map((spec) => {
    const proc = fork(entry, ['--grid-child'], { execArgv: childExecArgv(), stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    const inbox = new Inbox<FromChild>();
    proc.on('message', (m: FromChild) => inbox.push(m));
    proc.once('exit', (code, signal) => inbox.push({ type: 'exit', code, signal }));
    proc.send({ type: 'start', spec, env } satisfies ToChild);
    return { spec, proc, inbox, alive: true };
  });
  let sink = 0;
  const fail = (c: Child, why: string): void => {
    if (!c.alive) return;
    c.alive = false;
    skip('*', `grid ${seriesLabel(c.spec)}`, why);
    if (c.proc.exitCode === null) c.proc.kill();
  };
  /** The next message of a kind; skips are recorded on the way, a death or error ends the child. */
  const expect = async (c: Child, type: 'loaded' | 'measured' | 'done'): Promise<FromChild | null> => {
    while (c.alive) {
      const m = await c.inbox.next();
      if (m.type === 'skip') skip(m.engine, m.detail, m.reason);
      else if (m.type === 'error') fail(c, m.message);
      else if (m.type === 'exit') fail(c, `process exited with ${m.signal ?? `code ${m.code}`}${m.code === 134 || m.signal === 'SIGKILL' ? ' (out of memory?)' : ''}`);
      else if (m.type === type) return m;
      else fail(c, `protocol: expected ${type}, got ${m.type}`);
    }
    return null;
  };
  const sizes = [...round[0].sizes].sort((a, b) => a - b);
  for (const size of sizes) {
    for (const c of children) await expect(c, 'loaded');
    note(`[grid] ${count(size)}: loaded in ${children.filter((c) => c.alive).length} processes; measuring one at a time`);
    for (const c of children) {
      if (!c.alive) continue;
      c.proc.send({ type: 'measure' } satisfies ToChild);
      const m = await expect(c, 'measured');
      if (m !== null && m.type === 'measured') onPoints(m.points);
    }
    for (const c of children) if (c.alive) c.proc.send({ type: 'continue' } satisfies ToChild);
  }
  for (const c of children) {
    const m = await expect(c, 'done');
    if (m !== null && m.type === 'done') sink = (sink + m.sink) | 0;
    c.alive = false;
  }
  await Promise.all(children.map((c) => (c.proc.exitCode !== null || c.proc.signalCode !== null ? null : new Promise((r) => c.proc.once('exit', r)))));
  return sink;
}

/** Entry of a grid process: one series, paced by the parent. */
export function gridChildMain(): void {
  const inbox = new Inbox<ToChild>();
  process.on('message', (m: ToChild) => inbox.push(m));
  const send = (m: FromChild): Promise<void> => new Promise((resolve) => process.send!(m, () => resolve()));
  const wait = async (type: ToChild['type']): Promise<void> => {
    const m = await inbox.next();
    if (m.type !== type) throw new Error(`bench: grid protocol: expected ${type}, got ${m.type}`);
  };
  void (async () => {
    let code = 0;
    try {
      const start = await inbox.next();
      if (start.type !== 'start') throw new Error(`bench: grid protocol: expected start, got ${start.type}`);
      const gate: SeriesGate = {
        measure: async (size) => {
          await send({ type: 'loaded', size });
          await wait('measure');
        },
        measured: async (size, points) => {
          await send({ type: 'measured', size, points });
          await wait('continue');
        },
      };
      await runSeries(start.spec, start.env, gate, (engine, detail, reason) => void send({ type: 'skip', engine, detail, reason }));
      await send({ type: 'done', sink: sinkValue() });
    } catch (err) {
      code = 1;
      await send({ type: 'error', message: err instanceof Error ? (err.message.split('\n')[0] ?? String(err)) : String(err) });
    }
    process.exit(code);
  })();
}
