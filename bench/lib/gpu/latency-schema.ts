/** The result file of bench/gpu-latency.ts and its tables (shared with the report). */
import { count, sig, table } from '../format.js';
import type { MachineInfo } from '../machine.js';
import type { GpuInfo } from './schema.js';
import type { Summary } from '../stats.js';

export const LATENCY_SCHEMA = 'ambit.bench.gpu-latency/1';

export interface LatencyFile {
  schema: string;
  date: string;
  command: string;
  machine: MachineInfo;
  gpu: GpuInfo | null;
  reps: number;
  seed: number;
  rungs: Rung[];
  engines: EngineRow[];
}

export interface Rung {
  rung: string;
  us: Summary;
  /** The synchronous part: recording and queue.submit, until the wait begins. */
  callUs: Summary;
}

export interface EngineRow {
  subscriptions: number;
  filters: number;
  engine: 'gpu' | 'fast';
  /** Events per call (1: match; more: matchBatch); every figure is per call. Absent in older files: 1. */
  batch?: number;
  totalUs: Summary;
  submitUs: Summary | null;
  syncUs: Summary | null;
  encodeEventsUs: Summary | null;
  recordUs: Summary | null;
  submitCallUs: Summary | null;
  waitUs: Summary | null;
  parseUs: Summary | null;
  /** GPU time of the Loc, Cont and Zip passes (timestamp queries, --stages); absent or null otherwise. */
  locUs?: Summary | null;
  contUs?: Summary | null;
  zipUs?: Summary | null;
  matchesPerEvent: number;
}

export function latencyTables(f: { rungs: Rung[]; engines: EngineRow[]; reps: number }): string {
  const u = (s: Summary | null) => (s === null ? '–' : sig(s.median));
  const a = table(
    ['rung', 'min µs', 'median µs', 'p99 µs', 'median step µs', 'of which record + submit µs (median)'],
    f.rungs.map((r, i) => [r.rung, sig(r.us.min), sig(r.us.median), sig(r.us.p99), i === 0 ? '–' : sig(r.us.median - f.rungs[i - 1].us.median), sig(r.callUs.median)]),
  );
  const b = table(
    ['subscriptions', 'filters', 'engine', 'events a call', 'min µs', 'median µs', 'p99 µs', 'submit µs', 'sync', 'encode', 'record', 'submit call', 'wait µs', 'parse µs', 'Loc / Cont / Zip GPU µs', 'events/s (median)', 'matches/event'],
    f.engines.map((r) => {
      const batch = r.batch ?? 1;
      const passes = r.locUs == null ? '–' : `${sig(r.locUs.median)} / ${u(r.contUs ?? null)} / ${u(r.zipUs ?? null)}`;
      return [count(r.subscriptions), count(r.filters), r.engine, count(batch), sig(r.totalUs.min), sig(r.totalUs.median), sig(r.totalUs.p99), u(r.submitUs), u(r.syncUs), u(r.encodeEventsUs), u(r.recordUs), u(r.submitCallUs), u(r.waitUs), u(r.parseUs), passes, count(Math.round((batch * 1e6) / r.totalUs.median)), sig(r.matchesPerEvent)];
    }),
  );
  return `${a}\n\n${b}`;
}

