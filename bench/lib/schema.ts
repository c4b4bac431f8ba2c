/** The shape of a result file (bench/out/*.json, bench/results/*.json): written by cpu.ts, read by report.ts. */
import type { MatcherStats } from '../../src/engines/index.js';
import type { SpatialKind } from '../../src/workload/index.js';
import type { MachineInfo } from './machine.js';
import type { Summary } from './stats.js';

export const SCHEMA = 'ambit-bench/1';

export type SuiteName = 'default' | 'grid' | 'update';
export const SUITES: readonly SuiteName[] = ['default', 'grid', 'update'];

export interface DefaultConfig {
  subscriptions: number;
  events: number;
  /** Passes over the events for per-event timing (after one warm-up pass over warmupEvents). */
  reps: number;
  warmupEvents: number;
  /** Individually timed updatePosition calls (after `updates / 10` warm-up updates). */
  updates: number;
  /** Updates timed as one loop, for updates/s. */
  bulkUpdates: number;
  /** Mixed rounds: `updatesPerEvent` updates, then one event. */
  mixedRounds: number;
  updatesPerEvent: number;
}

export interface GridConfig {
  sizes: number[];
  /** Fractions of the region (1e-4 = 0.01%). */
  areas: number[];
  spatial: SpatialKind[];
  events: number;
  warmupEvents: number;
}

export interface UpdateConfig {
  sizes: number[];
  spatial: SpatialKind[];
  updates: number;
  bulkUpdates: number;
}

export interface BenchConfig {
  engines: string[];
  seed: number;
  /** Filters of each subscription (all anchored to its device); absent in older files: 10. */
  filtersPerSub?: number;
  /** The reference engine is O(subscriptions) per event: it only runs up to this size. */
  referenceMaxSubscriptions: number;
  default: DefaultConfig;
  grid: GridConfig;
  update: UpdateConfig;
}

export interface MemoryFigures {
  /** The engine's own estimate (stats().memoryBytes). */
  engineBytes: number;
  /** JS heap growth over the load, after GC (null when GC was not exposed). */
  heapDeltaBytes: number | null;
  /** Growth of memory outside the JS heap (typed-array buffers), after GC. */
  externalDeltaBytes: number | null;
  rssBytes: number;
}

/** Timing of updates: per call (µs) plus a bulk rate. */
export interface UpdateFigures {
  /** Individually timed calls, microseconds. */
  perCall: Summary;
  /** Calls per second over an untimed loop. */
  perSec: number;
}

export interface DefaultResult {
  engine: string;
  subscriptions: number;
  filters: number;
  constraints: number;
  events: number;
  generateMs: number;
  load: { totalMs: number; perSubUs: number };
  /** Initial updatePosition of every device. */
  positions: { totalMs: number; perDeviceUs: number };
  /** Per event, milliseconds. */
  match: Summary;
  throughput: { eventsPerSec: number; batchMs: Summary };
  update: UpdateFigures;
  /** The same updates through openDevice() handles. */
  handleUpdate: UpdateFigures | null;
  /** Updates and events interleaved: what lazily applied moves cost at match time. */
  mixed: { updatesPerEvent: number; match: Summary; updatesUs: Summary };
  memory: MemoryFigures;
  avgMatches: number;
  /** Hash of every event's sorted match list (engines that agree have equal checksums). */
  checksum: string;
  stats: MatcherStats;
}

export interface GridPoint {
  areaFraction: number;
  radiusM: number;
  loadMs: number;
  /** Per event, milliseconds. */
  match: Summary;
  avgMatches: number;
  checksum: string;
}

export interface GridResult {
  engine: string;
  spatial: SpatialKind;
  subscriptions: number;
  generateMs: number;
  points: GridPoint[];
}

export interface UpdateResult {
  engine: string;
  spatial: SpatialKind;
  subscriptions: number;
  loadMs: number;
  update: UpdateFigures;
  handleUpdate: UpdateFigures | null;
}

export interface Skip {
  suite: SuiteName;
  engine: string;
  detail: string;
  reason: string;
}

export interface BenchFile {
  schema: typeof SCHEMA;
  name: string;
  startedAt: string;
  finishedAt: string;
  quick: boolean;
  argv: string[];
  machine: MachineInfo;
  config: BenchConfig;
  /** Resolved workload parameters of the default scenario (the other suites vary size, area, spatial). */
  workload: Record<string, unknown>;
  suites: {
    default?: DefaultResult[];
    grid?: GridResult[];
    update?: UpdateResult[];
  };
  skipped: Skip[];
  /** Median cost of one back-to-back pair of process.hrtime.bigint() calls, included in every per-call figure. */
  timerOverheadNs: number;
  sink: number;
}
