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
import { count } from './format.js';
import { childExecArgv } from './fork.js';
import { type GpuEnv, OPEN_GATE, type SeriesGate, type SeriesSpec, type SkipFn, runSeries, seriesLabel } from './gpu-cases.js';
import type { GpuGridPoint } from './gpu-schema.js';
import { note } from './progress.js';
import { sinkValue } from './sink.js';

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
        skip('*', `grid ${seriesLabel(spec)}`, err instanceof Error ? err.message.split('\n')[0] : String(err));
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
