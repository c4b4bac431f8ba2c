/** Options of the GPU engine, their defaults and checks, and the figures it reports per batch. */
import type { MatcherOptions } from '../matcher.js';
import { ValidationError, show } from '../../model/errors.js';
import type { GpuOptions } from './device.js';

export type PathSelect = 'adaptive' | 'gpu' | 'cpu';

export interface GpuMatcherOptions extends MatcherOptions {
  /** Device options (backend, allowSoftware, ...). */
  gpu?: Partial<GpuOptions>;
  /**
   * Keep a fast CPU engine beside the GPU (default true): it answers small workloads, lone events
   * when that is quicker, overflows and events during a device loss. Without it (false) the host
   * keeps only the GPU buffers' mirror (about a third of the memory a filter), `get` reads the
   * subscription back from it, every event goes to the GPU (an overflowed one is run again with the
   * room it needed) and events wait out a device loss; `select` must then be 'gpu' and
   * `cpuBelowFilters` 0, their defaults without a mirror.
   */
  cpuMirror?: boolean;
  /** Below this many live filters the CPU engine answers. */
  cpuBelowFilters?: number;
  /**
   * Who answers above that: 'adaptive' (default) sends events that arrive under load to the GPU
   * and a lone call of up to 16 events to whichever path has been cheaper for them lately (the
   * CPU's cost per event against a GPU round trip), probing the other one every 32nd time; 'gpu'
   * and 'cpu' force a path (benchmarks, tests).
   */
  select?: PathSelect;
  /** Most events in one dispatch. */
  maxBatch?: number;
  /** Batches in flight at once (readback ring size). */
  inFlight?: number;
  /** Threads per workgroup (capped by the device). */
  workgroupSize?: number;
  /** Cont workgroups per event (grid-stride over the candidates). */
  contGroups?: number;
  /** Record per-stage GPU time with timestamp queries when the device has them. */
  profile?: boolean;
  /** Initial candidate capacity per event (grows on overflow). */
  initialCandidates?: number;
  /** Initial (event, subscription) pairs per batch (grows on overflow). */
  initialOutputs?: number;
  /**
   * Batches of at least this many events are binned into a grid of cells so Loc scans only the
   * cells within each filter's reach (smaller batches: every filter tests every event).
   */
  gridMinEvents?: number;
  /**
   * @internal Maps each measured per-event cost (µs) of a path before adaptive selection averages
   * it, so that tests can fix the costs and check the choice without depending on timing.
   */
  costSample?: (path: 'cpu' | 'gpu', measuredUs: number) => number;
  /**
   * @internal Whether the calling thread is loaded, in place of the default rule (events coming in
   * at a rate at which answering them all on the CPU would take more than a quarter of the thread):
   * then small calls go to the GPU too, since a CPU match holds the thread for its whole cost and a
   * GPU match only for encoding and reading back. Tests fix it.
   */
  threadBusy?: () => boolean;
  /** @internal The clock (ms) the adaptive choice counts the rate of incoming events by; tests move it. */
  clock?: () => number;
}

export const defaultGpuMatcherOptions = Object.freeze({
  cpuBelowFilters: 4096,
  select: 'adaptive' as PathSelect,
  maxBatch: 1024,
  inFlight: 4,
  workgroupSize: 128,
  contGroups: 64,
  profile: false,
  initialCandidates: 1024,
  initialOutputs: 4096,
  gridMinEvents: 16,
});

export type ResolvedGpuMatcherOptions = Required<Omit<GpuMatcherOptions, 'gpu' | 'limits' | 'costSample' | 'threadBusy' | 'clock'>> & {
  threadBusy: (() => boolean) | null;
  clock: () => number;
  gpu: Partial<GpuOptions>;
  costSample: ((path: 'cpu' | 'gpu', measuredUs: number) => number) | null;
};

/** Merges over the defaults and checks every option, naming the first bad one. */
export function resolveGpuMatcherOptions(options: GpuMatcherOptions): ResolvedGpuMatcherOptions {
  if (options.cpuMirror !== undefined && typeof options.cpuMirror !== 'boolean') throw new ValidationError('gpu.cpuMirror', `must be true or false, got ${show(options.cpuMirror)}`);
  const mirror = options.cpuMirror !== false;
  // Without a mirror only the GPU answers: the defaults say so, and a contrary choice is refused.
  const o = { ...defaultGpuMatcherOptions, ...(mirror ? {} : { cpuBelowFilters: 0, select: 'gpu' as PathSelect }), ...options };
  const select = checkSelect(o.select);
  const cpuBelowFilters = checkInt('cpuBelowFilters', o.cpuBelowFilters, 0, 2 ** 31);
  if (!mirror && select !== 'gpu') throw new ValidationError('gpu.select', `must be gpu without a CPU mirror (cpuMirror false), got ${show(select)}`);
  if (!mirror && cpuBelowFilters !== 0) throw new ValidationError('gpu.cpuBelowFilters', `must be 0 without a CPU mirror (cpuMirror false), got ${show(cpuBelowFilters)}`);
  return {
    cpuMirror: mirror,
    cpuBelowFilters,
    select,
    maxBatch: checkInt('maxBatch', o.maxBatch, 1, 65535),
    inFlight: checkInt('inFlight', o.inFlight, 1, 16),
    workgroupSize: checkInt('workgroupSize', o.workgroupSize, 1, 1024),
    contGroups: checkInt('contGroups', o.contGroups, 1, 65535),
    profile: o.profile === true,
    initialCandidates: checkInt('initialCandidates', o.initialCandidates, 1, 2 ** 24),
    initialOutputs: checkInt('initialOutputs', o.initialOutputs, 1, 2 ** 24),
    gridMinEvents: checkInt('gridMinEvents', o.gridMinEvents, 1, 2 ** 31),
    gpu: options.gpu ?? {},
    costSample: typeof options.costSample === 'function' ? options.costSample : null,
    threadBusy: typeof options.threadBusy === 'function' ? options.threadBusy : null,
    clock: typeof options.clock === 'function' ? options.clock : () => performance.now(),
  };
}

function checkSelect(v: unknown): PathSelect {
  if (v !== 'adaptive' && v !== 'gpu' && v !== 'cpu') throw new ValidationError('gpu.select', `must be adaptive, gpu or cpu, got ${show(v)}`);
  return v;
}

export function checkInt(name: string, v: unknown, lo: number, hi: number): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < lo || v > hi) {
    throw new ValidationError(`gpu.${name}`, `must be an integer in [${lo}, ${hi}], got ${show(v)}`);
  }
  return v;
}

/**
 * Where the host's time went in one batch, µs: `submitUs` from the start of the batch to its
 * submission, made of `syncUs` (uploads of changed state and moves), `encodeEventsUs`, `recordUs`
 * (the input upload, buffers, command recording) and `submitCallUs` (queue.submit and closing the
 * error scopes); `waitUs` from submission to the results mapped in host memory, `parseUs` from
 * there to ids.
 */
export interface BatchTiming {
  events: number;
  submitUs: number;
  syncUs: number;
  encodeEventsUs: number;
  recordUs: number;
  submitCallUs: number;
  waitUs: number;
  parseUs: number;
}

/** Per-stage GPU time of the last profiled batch, in milliseconds. */
export interface StageTimes {
  loc: number;
  cont: number;
  zip: number;
}
