/**
 * One matcher's GPU side: runs a batch of events through the kernels, from the upload of the
 * state's changes to the ids of each event's subscriptions. The steps of a batch are named below
 * (runScoped); buffers.ts holds the buffers, record.ts the commands, readback.ts the results.
 */
import { GpuBuffers, type Slot } from './buffers.js';
import type { GpuContext } from './device.js';
import { P } from './input.js';
import type { GpuKernels } from './kernels.js';
import type { GpuLayout } from './layout.js';
import type { BatchTiming, StageTimes } from './options.js';
import { type BatchEvents, Capacity, Readback, batchSize, nulls } from './readback.js';
import { PackedEvents } from './packed.js';
import { type BatchPlan, type StageQuery, STAGE_BYTES, readPlan, recordBatch } from './record.js';
import type { Listed } from '../matcher.js';

export interface BatchOptions {
  maxBatch: number;
  contGroups: number;
  profile: boolean;
  initialCandidates: number;
  initialOutputs: number;
  gridMinEvents: number;
}

/**
 * A batch's answers: per event its matches, or null where the CPU engine must answer; and how many
 * of them are so because their candidates or the batch's pairs overflowed (the rest: a GPU error,
 * or a state the device cannot hold).
 */
export interface BatchAnswer {
  results: (Listed[] | null)[];
  overflow: number;
  /** None answered because the state exceeds what the device can bind (fits() false). */
  unfit?: boolean;
}

export class GpuBatches {
  private readonly device: GPUDevice;
  private readonly wg: number;
  private readonly buffers: GpuBuffers;
  private readonly capacity: Capacity;
  private readonly readback: Readback;
  private readonly query: StageQuery | null;
  /** Moving averages per batch, µs: host encoding (of which the event input), GPU wait, result parsing. */
  readonly timing = { encodeUs: 0, eventsUs: 0, waitUs: 0, parseUs: 0 };
  /** The last batch's own figures, µs (benchmarks read them per event). */
  readonly last: BatchTiming = { events: 0, submitUs: 0, syncUs: 0, encodeEventsUs: 0, recordUs: 0, submitCallUs: 0, waitUs: 0, parseUs: 0 };
  /** Where every answered batch's times are summed (the matcher's counters, which outlive a lost device's batches). */
  totals: { batchSubmitMs: number; batchWaitMs: number; batchReadMs: number } | null = null;

  constructor(
    private readonly ctx: GpuContext,
    private readonly layout: GpuLayout,
    private readonly opts: BatchOptions,
    private readonly kernels: GpuKernels,
  ) {
    if (kernels.ctx !== ctx) throw new Error('gpu: kernels were compiled for another device');
    this.device = ctx.device;
    this.wg = kernels.wg;
    this.query = opts.profile && ctx.features.has('timestamp-query')
      ? {
          set: this.device.createQuerySet({ label: 'ambit.stages', type: 'timestamp', count: 6 }),
          resolve: ctx.createBuffer('ambit.stages.resolve', STAGE_BYTES, GPUBufferUsage.QUERY_RESOLVE | GPUBufferUsage.COPY_SRC),
        }
      : null;
    this.buffers = new GpuBuffers(ctx, layout, kernels, opts);
    this.capacity = new Capacity(opts.initialCandidates);
    this.readback = new Readback(ctx, layout, this.buffers, this.capacity, opts);
    this.buffers.sync();
  }

  get lastStages(): StageTimes | null {
    return this.readback.lastStages;
  }

  /** Band pairs decided on the host with the float64 distance, and how many of those matched. */
  get bandPairs(): { decided: number; matched: number } {
    return { decided: this.readback.bandPairs, matched: this.readback.bandMatched };
  }

  /** GPU errors caught around batches (each sent its batch to the CPU). */
  get errors(): number {
    return this.readback.errors;
  }

  get lastError(): string {
    return this.readback.lastError;
  }

  get bindingLimit(): number {
    return this.ctx.limits.maxStorageBufferBindingSize;
  }

  /** Whether every array the kernels bind fits in one storage binding of this device. */
  fits(): boolean {
    const L = this.layout;
    const most = Math.max(4 * L.fTop, 4 * L.cTop, 4 * L.sTop, 16 * L.pTop, 4 * this.capacity.candCap * this.capacity.widest);
    return most <= this.bindingLimit;
  }

  /** Frees this matcher's buffers (the device may be shared). */
  destroy(): void {
    this.buffers.destroy();
    this.query?.set.destroy();
    this.query?.resolve.destroy();
  }

  /** GPU memory held, bytes. */
  get bytes(): number {
    return this.buffers.bytes;
  }

  /**
   * Matches a batch. Returns, per event, its subscriptions (as tags where `tags` says so for the
   * event and they have one, else ids), or null where the event must be answered by the CPU
   * engine (its candidates overflowed the buffer).
   */
  async run(events: BatchEvents, tags: readonly boolean[]): Promise<BatchAnswer> {
    if (!this.fits()) return { results: nulls(batchSize(events)), overflow: 0, unfit: true };
    const L = this.layout;
    const serial = ++L.submitted;
    L.inFlightSerials.add(serial);
    L.batchesInFlight++;
    try {
      return await this.runGuarded(events, tags, serial);
    } finally {
      L.inFlightSerials.delete(serial);
      L.batchesInFlight--;
      // Over every device's batches: one still reading on a device lost since names held indices too.
      let oldest = Infinity;
      for (const x of L.inFlightSerials) if (x < oldest) oldest = x;
      L.releaseHeld(oldest);
    }
  }

  private async runGuarded(events: BatchEvents, tags: readonly boolean[], serial: number): Promise<BatchAnswer> {
    // Any GPU error in this batch (validation, out of memory) sends the batch to the CPU: never
    // an empty answer from a command buffer the device refused.
    this.device.pushErrorScope('out-of-memory');
    this.device.pushErrorScope('validation');
    let scoped: Promise<GPUError | null>[] = [];
    try {
      return await this.runScoped(events, tags, serial, () => {
        scoped = [this.device.popErrorScope(), this.device.popErrorScope()];
        return scoped;
      });
    } finally {
      if (scoped.length === 0) {
        // runScoped threw before submitting: close the scopes.
        void this.device.popErrorScope().catch(() => null);
        void this.device.popErrorScope().catch(() => null);
      }
    }
  }

  private async runScoped(events: BatchEvents, tags: readonly boolean[], serial: number, closeScopes: () => Promise<GPUError | null>[]): Promise<BatchAnswer> {
    const t0 = performance.now();
    const E = batchSize(events);
    this.buffers.sync();
    const tSync = performance.now();
    const candCap = this.reserveCandidates(E);
    const te = performance.now();
    // A packed batch comes binned or not as its packer chose (its grid is in its words).
    const grid = events instanceof PackedEvents ? events.grid : E >= this.opts.gridMinEvents;
    const inp = this.encodeInput(events, grid);
    const input = this.buffers.buffer('input', inp.byteLength);

    const s = this.buffers.slot();
    s.busy = true;
    try {
      const plan = this.plan(s, E, grid);
      this.writeInput(input, inp, plan, candCap, s.outCap);
      const commands = recordBatch(this.device, this.kernels, this.buffers, s, plan, this.query);
      const tRec = performance.now();
      this.ctx.queue.submit([commands]);
      const scopes = closeScopes();
      const t1 = performance.now();
      this.last.syncUs = (tSync - t0) * 1e3;
      this.last.recordUs = (tRec - te) * 1e3 - this.last.encodeEventsUs;
      this.last.submitCallUs = (t1 - tRec) * 1e3;

      const readout = await this.readback.read(s, plan, scopes);
      const t2 = performance.now();
      if (readout === null) return { results: nulls(E), overflow: 0 };
      const answer = await this.readback.reconcile(events, tags, readout, s, candCap, serial);
      if (answer.results === null) return { results: nulls(E), overflow: answer.overflow };
      this.noteTiming(E, t0, t1, t2, performance.now());
      return answer as BatchAnswer;
    } finally {
      s.busy = false;
    }
  }

  /**
   * Sizes the candidate lists for a batch of `events` and returns the capacity per event the batch
   * runs with (a batch finishing meanwhile may grow the capacity for later batches).
   */
  private reserveCandidates(events: number): number {
    const cap = this.capacity;
    // Per-event scratch sized to the largest batch so far, not maxBatch: a service that sends
    // lone events never pays for 256 candidate lists.
    if (events > cap.widest) cap.widest = events;
    // Within one storage binding: a wide batch may run with fewer per event than the capacity
    // (its overflowed events run again in narrower batches, or on the CPU).
    const words = Math.min(cap.candCap * cap.widest, Math.floor(this.ctx.limits.maxStorageBufferBindingSize / 4));
    this.buffers.buffer('cand', 4 * words);
    return Math.min(cap.candCap, Math.floor(words / events));
  }

  /** The batch input (input.ts), valid until the next batch is encoded. */
  private encodeInput(events: BatchEvents, grid: boolean): Uint32Array {
    const te = performance.now();
    const inp = events instanceof PackedEvents ? this.layout.encodePacked(events) : this.layout.encodeEvents(events, grid);
    this.last.encodeEventsUs = (performance.now() - te) * 1e3;
    this.timing.eventsUs += 0.05 * (this.last.encodeEventsUs - this.timing.eventsUs);
    return inp;
  }

  /** Output room, dispatch shape and readback layout of a batch on slot `s`. */
  private plan(s: Slot, E: number, grid: boolean): BatchPlan {
    const room = this.capacity.outputRoom(E, this.opts.initialOutputs);
    if (room > s.outCap || 4 * room < s.outCap) this.buffers.resizeOut(s, room);
    const [fx, fz] = this.split(Math.ceil(this.layout.fTop / this.wg));
    const contGroups = this.capacity.contGroups(this.opts.contGroups, this.wg);
    return { events: E, grid, fx, fz, contGroups, ...readPlan(E, this.capacity.prefixPairs(s.outCap), this.query !== null) };
  }

  /** Fills the parameter words and sends the input: the batch's only upload. */
  private writeInput(input: GPUBuffer, inp: Uint32Array, plan: BatchPlan, candCap: number, outCap: number): void {
    inp[P.FILTERS] = this.layout.fTop;
    inp[P.EVENTS] = plan.events;
    inp[P.CANDCAP] = candCap;
    inp[P.OUTCAP] = outCap;
    inp[P.CONTGROUPS] = plan.contGroups;
    inp[P.LOCSTRIDE] = plan.fx;
    // Queue order keeps it intact until this batch's passes have run.
    this.ctx.writeBuffer(input, 0, inp);
  }

  /** Splits `groups` workgroups over x and z (each at most the device's per-dimension limit). */
  private split(groups: number): [number, number] {
    const max = this.ctx.limits.maxComputeWorkgroupsPerDimension;
    if (groups <= max) return [Math.max(1, groups), 1];
    const z = Math.ceil(groups / max);
    return [Math.ceil(groups / z), z];
  }

  private noteTiming(E: number, t0: number, t1: number, t2: number, t3: number): void {
    const a = 0.05;
    this.last.events = E;
    this.last.submitUs = (t1 - t0) * 1e3;
    this.last.waitUs = (t2 - t1) * 1e3;
    this.last.parseUs = (t3 - t2) * 1e3;
    this.timing.encodeUs += a * ((t1 - t0) * 1e3 - this.timing.encodeUs);
    this.timing.waitUs += a * ((t2 - t1) * 1e3 - this.timing.waitUs);
    this.timing.parseUs += a * ((t3 - t2) * 1e3 - this.timing.parseUs);
    const sum = this.totals;
    if (sum !== null) {
      sum.batchSubmitMs += t1 - t0;
      sum.batchWaitMs += t2 - t1;
      sum.batchReadMs += t3 - t2;
    }
  }
}
