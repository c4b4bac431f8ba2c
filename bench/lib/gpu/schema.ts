/**
 * The shape of a GPU result file (bench/out/gpu-*.json, bench/results/gpu*.json): written by
 * gpu.ts, read by gpu-report.ts. Times are milliseconds unless a field says otherwise.
 */
import type { MatcherStats } from '../../../src/engines/index.js';
import type { SpatialKind } from '../../../src/workload/index.js';
import type { MachineInfo } from '../machine.js';
import type { Summary } from '../stats.js';

export const GPU_SCHEMA = 'ambit-bench-gpu/1';

export type GpuSuiteName = 'default' | 'grid' | 'updates' | 'stages' | 'memory' | 'batch' | 'scale';
export const GPU_SUITES: readonly GpuSuiteName[] = ['default', 'grid', 'updates', 'stages', 'memory', 'batch', 'scale'];

/** The adapter the GPU engine ran on (from its device context and stats().extra.adapter). */
export interface GpuInfo {
  /** stats().extra.adapter, e.g. `NVIDIA H100 80GB HBM3 (default, core)`. */
  adapter: string;
  vendor: string;
  architecture: string;
  device: string;
  description: string;
  backend: string;
  featureLevel: string;
  software: boolean;
  features: string[];
  maxBufferSize: number;
  maxStorageBufferBindingSize: number;
}

/** Whether the GPU really served: counters of the engine and errors of its device. */
export interface GpuHealth {
  /** stats().extra.path at the end of the measurement: 'gpu' or 'cpu'. */
  path: string;
  gpuEvents: number;
  cpuEvents: number;
  /** Events answered by the CPU because the device failed. */
  fallbackEvents: number;
  /** Events answered by the CPU because a GPU buffer overflowed (then grown). */
  overflowEvents: number;
  deviceLosses: number;
  uncapturedErrors: number;
  lastError: string | null;
}

/** Memory after a load (and one match, so the GPU buffers exist), after GC. */
export interface MemoryPoint {
  /** stats().memoryBytes: the engine's estimate of its host structures. */
  engineBytes: number;
  /** stats().extra.gpuBytes (null for CPU engines). */
  gpuBytes: number | null;
  gpuBytesPerFilter: number | null;
  heapUsedBytes: number;
  /** Typed-array memory outside the JS heap (process.memoryUsage().arrayBuffers). */
  arrayBuffersBytes: number;
  rssBytes: number;
}

/**
 * GPU answers against the fast CPU engine's, per event. Every engine must return exactly the
 * reference's set (docs/semantics.md X1): a mismatch is a wrong answer.
 */
export interface Verification {
  reference: string;
  events: number;
  /** Events whose id sets differ. */
  mismatches: number;
  /** Ids only the GPU returned / only the reference returned, summed over events. */
  onlyGpu: number;
  onlyReference: number;
  /** A few one-sided ids of mismatching events, with d - r for their filters, for a human to look at. */
  examples: string[];
}

/**
 * The verification as files written while the GPU engine was allowed to differ near circle
 * boundaries stored it (bench/results/gpu-a.json): one-sided ids were counted as explained by
 * the float32 tolerance band of that time or not. Read for reports only; never written.
 */
export interface OlderVerification {
  reference: string;
  events: number;
  eventsDiffering: number;
  onlyGpu: number;
  onlyReference: number;
  explainedByBand: number;
  unexplained: number;
  examples: string[];
}

export interface GpuDefaultEngine {
  engine: string;
  load: { totalMs: number; perSubUs: number };
  positionsMs: number;
  /** The first match after the load (includes the GPU's first upload). */
  firstMatchMs: number;
  /** Per event, each awaited alone, ms. */
  match: Summary;
  avgMatches: number;
  checksum: string;
  memory: MemoryPoint & { heapDeltaBytes: number; arrayBuffersDeltaBytes: number };
  health: GpuHealth | null;
  stats: MatcherStats;
}

export interface GpuDefaultResult {
  subscriptions: number;
  filters: number;
  constraints: number;
  events: number;
  reps: number;
  generateMs: number;
  engines: GpuDefaultEngine[];
  /** GPU vs fast; null unless both ran. Files written before exact comparison hold the older form. */
  verification: Verification | OlderVerification | null;
}

export interface GpuGridPoint {
  engine: string;
  spatial: SpatialKind;
  areaFraction: number;
  radiusM: number;
  subscriptions: number;
  /** Add time of this engine up to this size (loads grow one size to the next). */
  loadMs: number;
  match: Summary;
  avgMatches: number;
  checksum: string;
  /** Events whose answer differs from the fast engine's at the same point (null for fast itself). */
  differsFromFast: number | null;
  health: GpuHealth | null;
}

export interface GpuGridResult {
  /** Processes that loaded series in parallel (measurements always one at a time). */
  jobs: number;
  points: GpuGridPoint[];
}

export interface MovesThenMatch {
  /** Moves applied through handles before the match. */
  moves: number;
  /** Distinct devices among them (moves of one device between two matches upload once). */
  distinctDevices: number;
  reps: number;
  movesMs: Summary;
  /** The match right after the moves, ms. */
  matchMs: Summary;
  /** median(matchMs) - median(plain match of the same event). */
  extraMs: number;
  /** moves / (median moves time + max(0, extra)). */
  endToEndUpdatesPerSec: number;
}

export interface GpuUpdateEngine {
  engine: string;
  subscriptions: number;
  devices: number;
  loadMs: number;
  openHandlesMs: number;
  /** Individually timed handle.update() calls, µs. */
  handlePerCallUs: Summary;
  /** An untimed loop of handle.update(): mean ns per update, and updates/s. */
  handleLoop: { updates: number; nsPerUpdate: number; updatesPerSec: number };
  /** updatePositions() with arrays of `size` updates. */
  batch: { size: number; reps: number; ms: Summary; updatesPerSec: number }[];
  /** The reference event matched with no pending moves, ms. */
  plainMatch: Summary;
  movesThenMatch: MovesThenMatch[];
  health: GpuHealth | null;
}

export interface GpuUpdatesResult {
  engines: GpuUpdateEngine[];
}

export type StageVariant = 'default' | 'all-content';

export interface GpuStagePoint {
  variant: StageVariant;
  subscriptions: number;
  filters: number;
  events: number;
  avgMatches: number;
  /** Content selectivity of the variant's filters as generated (expected value). */
  expectedSelectivity: number;
  /** publish → ids in host memory, ms. */
  total: Summary;
  /** The synchronous part of match(): validate, encode, upload, submit. */
  submit: Summary;
  /** From submit to the ids: GPU work, readback wait, decoding. */
  wait: Summary;
  /** Timestamp-query times of the passes (null without timestamp-query). */
  loc: Summary | null;
  cont: Summary | null;
  zip: Summary | null;
  gpu: Summary | null;
  /** total - (loc + cont + zip): everything the host and the transfers add. */
  hostAndTransfer: Summary | null;
  loadMs: number;
  memory: MemoryPoint;
  health: GpuHealth | null;
}

export interface GpuStagesResult {
  timestampQuery: boolean;
  points: GpuStagePoint[];
}

export interface GpuMemoryPointResult extends MemoryPoint {
  subscriptions: number;
  filters: number;
  constraints: number;
  /** Cumulative add time up to this size. */
  loadMs: number;
  health: GpuHealth | null;
}

export interface GpuMemoryResult {
  points: GpuMemoryPointResult[];
}

export interface GpuBatchPoint {
  batchSize: number;
  calls: number;
  /** Per matchBatch call, ms. */
  batchMs: Summary;
  eventsPerSec: number;
}

export interface GpuConcurrentPoint {
  /** match() calls issued at once. */
  concurrency: number;
  rounds: number;
  /** Issue → resolution of each call, ms. */
  latencyMs: Summary;
  eventsPerSec: number;
}

export interface GpuBatchEngine {
  engine: string;
  batches: GpuBatchPoint[];
  concurrent: GpuConcurrentPoint[];
  /** matchBatch calls kept `depth` in flight (absent in files written before it was measured). */
  streams?: GpuStreamPoint[];
  health: GpuHealth | null;
}

export interface GpuStreamPoint {
  batchSize: number;
  depth: number;
  calls: number;
  /** Call → results, per call. */
  callMs: Summary;
  eventsPerSec: number;
}

export interface GpuBatchResult {
  subscriptions: number;
  filters: number;
  engines: GpuBatchEngine[];
}

export interface GpuScaleCheckpoint {
  subscriptions: number;
  filters: number;
  constraints: number;
  /** Cumulative add time. */
  loadMs: number;
  /** Cumulative workload generation time (not in loadMs). */
  generateMs: number;
  firstMatchMs: number;
  match: Summary;
  avgMatches: number;
  memory: MemoryPoint;
  health: GpuHealth | null;
}

export interface GpuScaleResult {
  requested: number;
  loaded: number;
  /** Why fewer than requested were loaded (time limit, error), else null. */
  truncated: string | null;
  loadRateSubsPerSec: number;
  checkpoints: GpuScaleCheckpoint[];
}

export interface GpuSkip {
  suite: GpuSuiteName;
  engine: string;
  detail: string;
  reason: string;
}

export interface GpuBenchConfig {
  seed: number;
  /** The string operators of the default and batch suites' workloads, weighted (--string-ops); absent: the workload's own. */
  stringOps?: Record<string, number>;
  allowSoftware: boolean;
  /** GpuMatcher options besides allowSoftware (cpuBelowFilters is always 0: the GPU path is measured). */
  gpuOptions: Record<string, number | boolean | string>;
  rtreeMaxSubs: number;
  default: { engines: string[]; subscriptions: number; events: number; reps: number; warmupEvents: number };
  grid: { engines: string[]; sizes: number[]; areas: number[]; spatial: SpatialKind[]; events: number; warmupEvents: number; jobs: number };
  updates: {
    engines: string[];
    subscriptions: number;
    timed: number;
    loop: number;
    batchSizes: number[];
    batchReps: number;
    moves: number[];
    movesReps: number;
    plainMatches: number;
    /** A moves-then-match size whose moves would take longer than this (at the measured rate) is skipped. */
    maxMoveSeconds: number;
  };
  /** dawnFlags: what the profiled engine's Dawn instance is created with (timestamp rounding off). */
  stages: { sizes: number[]; events: number; warmupEvents: number; variants: StageVariant[]; dawnFlags: string[] };
  memory: { sizes: number[] };
  batch: { engines: string[]; subscriptions: number; sizes: number[]; concurrency: number[]; streams?: { size: number; depth: number }[]; events: number; cpuEvents: number };
  /** addMany: each chunk loaded with one addMany call (absent in files from before it: add one by one). */
  scale: { subscriptions: number; checkpoints: number[]; events: number; warmupEvents: number; maxLoadS: number; addMany?: boolean };
}

export interface GpuBenchFile {
  schema: typeof GPU_SCHEMA;
  name: string;
  startedAt: string;
  finishedAt: string;
  quick: boolean;
  argv: string[];
  machine: MachineInfo;
  gpu: GpuInfo | null;
  config: GpuBenchConfig;
  /** Resolved workload parameters of the default scenario (suites vary size, area, spatial, content). */
  workload: Record<string, unknown>;
  suites: {
    default?: GpuDefaultResult;
    grid?: GpuGridResult;
    updates?: GpuUpdatesResult;
    stages?: GpuStagesResult;
    memory?: GpuMemoryResult;
    batch?: GpuBatchResult;
    scale?: GpuScaleResult;
  };
  /** Wall time of each suite that ran, ms. */
  suiteWallMs: Partial<Record<GpuSuiteName, number>>;
  skipped: GpuSkip[];
  notes: string[];
  /** Median cost of one back-to-back pair of process.hrtime.bigint() calls. */
  timerOverheadNs: number;
  sink: number;
}
