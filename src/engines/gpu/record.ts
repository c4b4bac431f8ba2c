/** Command recording of one batch: Loc, Cont and Zip, then the copies its readback maps. */
import type { GpuBuffers, Slot } from './buffers.js';
import type { GpuKernels } from './kernels.js';

/** A batch's dispatch shape and the layout of its staging buffer. */
export interface BatchPlan {
  events: number;
  /** Loc over the cell grid (`loc`) or over every event (`locFew`). */
  grid: boolean;
  /** Loc's workgroups, split over x and z. */
  fx: number;
  fz: number;
  /** Cont's and Zip's workgroups per event. */
  contGroups: number;
  /** Staging: the counters (E + 1 words), then `prefixPairs` pairs from `pairsAt`, then timestamps. */
  countBytes: number;
  pairsAt: number;
  prefixPairs: number;
  /** Bytes of staging to map. */
  want: number;
  /** Stage timestamps follow the pairs. */
  timestamps: boolean;
}

/** Timestamp queries around each stage (profiling). */
export interface StageQuery {
  set: GPUQuerySet;
  resolve: GPUBuffer;
}

/** Bytes of resolved timestamps: a begin and an end for each of the three stages. */
export const STAGE_BYTES = 48;

/** The staging layout for a batch of `events`, reading `prefixPairs` pairs in the first trip. */
export function readPlan(events: number, prefixPairs: number, timestamps: boolean): Pick<BatchPlan, 'countBytes' | 'pairsAt' | 'prefixPairs' | 'want' | 'timestamps'> {
  const countBytes = 4 * (events + 1);
  const pairsAt = Math.ceil(countBytes / 8) * 8;
  return { countBytes, pairsAt, prefixPairs, want: pairsAt + 8 * prefixPairs + (timestamps ? STAGE_BYTES : 0), timestamps };
}

/**
 * Records the batch into one command buffer: the counters cleared, one compute pass of three
 * dispatches (Dawn orders them with barriers; three passes only when timestamps are written around
 * each stage), and the copies of the counters, the first pairs and the timestamps into staging.
 */
export function recordBatch(device: GPUDevice, kernels: GpuKernels, buffers: GpuBuffers, s: Slot, plan: BatchPlan, q: StageQuery | null): GPUCommandBuffer {
  const E = plan.events;
  const g = buffers.groups(s);
  const cmd = device.createCommandEncoder({ label: 'ambit.match' });
  cmd.clearBuffer(s.counts, 0, Math.ceil((4 * (E + 1)) / 4) * 4);
  const ts = (i: number): GPUComputePassTimestampWrites | undefined =>
    q === null ? undefined : { querySet: q.set, beginningOfPassWriteIndex: 2 * i, endOfPassWriteIndex: 2 * i + 1 };

  let pass = cmd.beginComputePass({ label: 'ambit.loc', timestampWrites: ts(0) });
  pass.setPipeline(plan.grid ? kernels.loc : kernels.locFew);
  pass.setBindGroup(0, plan.grid ? g.loc : g.locFew);
  pass.dispatchWorkgroups(plan.fx, 1, plan.fz);
  if (q !== null) {
    pass.end();
    pass = cmd.beginComputePass({ label: 'ambit.cont', timestampWrites: ts(1) });
  }
  pass.setPipeline(kernels.cont);
  pass.setBindGroup(0, g.cont);
  pass.dispatchWorkgroups(plan.contGroups, E, 1);
  if (q !== null) {
    pass.end();
    pass = cmd.beginComputePass({ label: 'ambit.zip', timestampWrites: ts(2) });
  }
  pass.setPipeline(kernels.zip);
  pass.setBindGroup(0, g.zip);
  pass.dispatchWorkgroups(plan.contGroups, E, 1);
  pass.end();
  if (q !== null) cmd.resolveQuerySet(q.set, 0, 6, q.resolve, 0);

  const staging = buffers.staging(s, plan.want);
  cmd.copyBufferToBuffer(s.counts, 0, staging, 0, plan.countBytes);
  cmd.copyBufferToBuffer(s.out, 0, staging, plan.pairsAt, 8 * plan.prefixPairs);
  if (q !== null) cmd.copyBufferToBuffer(q.resolve, 0, staging, plan.pairsAt + 8 * plan.prefixPairs, STAGE_BYTES);
  return cmd.finish();
}
