/** Timing building blocks shared by the CPU and GPU benchmarks. */
import type { Subscription } from '../../src/model/types.js';
import type { WorkloadSource } from '../../src/workload/index.js';
import { count } from './format.js';
import { Progress } from './progress.js';
import { summarize } from './stats.js';

const gc: (() => void) | undefined = (globalThis as { gc?: () => void }).gc;

/** True when the process runs with --expose-gc (memory figures are only clean then). */
export const gcExposed = gc !== undefined;

/** Two full collections: the second frees what the first's finalisers released. */
export function collect(): void {
  if (gc !== undefined) {
    gc();
    gc();
  }
}

export const now = (): bigint => process.hrtime.bigint();
export const msSince = (t0: bigint): number => Number(now() - t0) / 1e6;

/** What a timed call costs with nothing inside: the floor of every per-call figure. */
export function timerOverheadNs(): number {
  const ns = new Float64Array(20_000);
  for (let i = 0; i < ns.length; i++) {
    const t0 = process.hrtime.bigint();
    ns[i] = Number(process.hrtime.bigint() - t0);
  }
  return summarize(ns).median;
}

/** Materialises `n` subscriptions (untimed) so that several engines load identical objects. */
export function materialize(src: WorkloadSource, n: number, label: string): { subs: Subscription[]; ms: number } {
  const p = new Progress(`${label}: generate ${count(n)} subscriptions`, n);
  const subs: Subscription[] = new Array(n);
  let i = 0;
  for (const s of src.subscriptions(n)) {
    subs[i++] = s;
    p.tick();
  }
  return { subs, ms: p.end() };
}

/** The first line of an error's message. */
export function errText(err: unknown): string {
  return err instanceof Error ? err.message.split('\n')[0] : String(err);
}
