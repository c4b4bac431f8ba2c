/**
 * The GPU engine: CLCB (Loc, Cont, Zip; src/engines/gpu/match.wgsl) on WebGPU, behind the `Matcher` interface.
 *
 * - Subscription changes go to a fast CPU engine (validation, `get`, the small-scale path and the
 *   fallback) and to the host mirror of the GPU buffers (src/engines/gpu/layout.ts); changed ranges are
 *   uploaded before the next dispatch. A location update costs two host writes and a mark in the
 *   mirror only: all moves since the last batch go up as one upload plus one scatter dispatch, and
 *   the CPU engine replays the marked slots only when it next answers (syncCpu).
 * - Batches of `gridMinEvents` or more are binned into a grid of cells (layout.encodeEvents), so
 *   Loc scans only the cells within each filter's reach.
 * - Events are matched in batches. `match()` queues its event; while fewer than `inFlight` batches
 *   run, the queue is dispatched at once (a lone event goes alone: low latency), and under load the
 *   events that arrive meanwhile form the next batch (throughput). Each batch has its own readback
 *   ring slot, so the host encodes batch k+1 while the GPU runs batch k (CLCB's stream idea).
 * - Below `cpuBelowFilters` live filters the CPU engine answers: a dispatch and readback has a
 *   fixed cost that small workloads do not repay (CLCB §5: ~4000 filters).
 * - Overflow of the candidate or output buffers is detected from the counters; the affected events
 *   are answered by the CPU engine and the buffers grow, so results are always complete.
 * - On device loss every event in flight is answered by the CPU engine, later events too, while a
 *   new device is opened and rebuilt from the host mirror.
 */
import { FastMatcher } from '../fast.js';
import { type DeviceHandle, type Matcher, type MatcherOptions, type MatcherStats, checkHandleUpdate } from '../matcher.js';
import { AmbitError, ValidationError, show } from '../../model/errors.js';
import { type NEvent, type NSubscription, checkId, checkLat, checkLon, validateEvent, validateEvents, validatePositions, validateSubscription } from '../../model/limits.js';
import type { Event, PositionUpdate, Subscription } from '../../model/types.js';
import { GpuContext, type GpuOptions } from './device.js';
import { GpuLayout } from './layout.js';

export interface GpuMatcherOptions extends MatcherOptions {
  /** Device options (backend, allowSoftware, ...). */
  gpu?: Partial<GpuOptions>;
  /** Below this many live filters the CPU engine answers. */
  cpuBelowFilters?: number;
  /**
   * Who answers above that: 'adaptive' (default) sends events that arrive under load to the GPU
   * and a lone event to whichever path has been cheaper per event lately, probing the other one
   * every 32nd time; 'gpu' and 'cpu' force a path (benchmarks, tests).
   */
  select?: 'adaptive' | 'gpu' | 'cpu';
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
}

export const defaultGpuMatcherOptions = Object.freeze({
  cpuBelowFilters: 4096,
  select: 'adaptive' as 'adaptive' | 'gpu' | 'cpu',
  maxBatch: 1024,
  inFlight: 4,
  workgroupSize: 128,
  contGroups: 64,
  profile: false,
  initialCandidates: 1024,
  initialOutputs: 4096,
  gridMinEvents: 16,
});

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


/**
 * Moving average of one path's per-event cost. The first two samples are skipped (they carry
 * one-off work: re-filing every initial position, the first full upload) and later samples are
 * clamped to 4x the average, so one GC pause or rebuild does not flip the choice for long.
 */
class CostAverage {
  private seen = 0;
  add(avg: number, x: number): number {
    if (++this.seen <= 2) return avg;
    if (avg === 0) return x;
    return avg + 0.1 * (Math.min(x, 4 * avg) - avg);
  }
}

const NO_QUANTIZATION = 'disable-dawn-features=timestamp_quantization';

/**
 * Events waiting for the GPU: one match() call's event or one matchBatch() call's events. A
 * batch takes events from the head of the queue, so a large job spans several batches (which
 * then run pipelined) and small jobs share one; the job settles when its last event is answered.
 */
class Job {
  readonly results: string[][];
  /** Events handed to batches so far. */
  taken = 0;
  /** Events not answered yet. */
  left: number;
  failed = false;
  constructor(
    readonly events: readonly NEvent[],
    readonly resolve: (results: string[][]) => void,
    readonly reject: (err: unknown) => void,
  ) {
    this.results = new Array(events.length);
    this.left = events.length;
  }
}

/** The part [from, to) of a job's events that one batch carries. */
interface Segment {
  job: Job;
  from: number;
  to: number;
}

/** One readback slot: the batch's counters and output pairs, and the staging buffer they go to. */
interface Slot {
  counts: GPUBuffer;
  out: GPUBuffer;
  outCap: number;
  staging: GPUBuffer;
  stagingBytes: number;
  groups: { version: number; loc: GPUBindGroup; locFew: GPUBindGroup; cont: GPUBindGroup; zip: GPUBindGroup } | null;
  busy: boolean;
}

function checkSelect(v: unknown): 'adaptive' | 'gpu' | 'cpu' {
  if (v !== 'adaptive' && v !== 'gpu' && v !== 'cpu') throw new ValidationError('gpu.select', `must be adaptive, gpu or cpu, got ${show(v)}`);
  return v;
}

function checkInt(name: string, v: unknown, lo: number, hi: number): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < lo || v > hi) {
    throw new ValidationError(`gpu.${name}`, `must be an integer in [${lo}, ${hi}], got ${show(v)}`);
  }
  return v;
}

export class GpuMatcher implements Matcher {
  readonly name = 'gpu';
  readonly limits;
  private readonly cpu: FastMatcher;
  private readonly layout = new GpuLayout();
  private readonly opts: Required<Omit<GpuMatcherOptions, 'gpu' | 'limits'>> & { gpu: Partial<GpuOptions> };
  private ctx: GpuContext | null = null;
  private gpuState: GpuBuffers | null = null;
  private readonly queue: Job[] = [];
  private running = 0;
  private closed = false;
  private reopening: Promise<void> | null = null;
  /** Moving averages of the cost of one event on each path, µs (adaptive selection). */
  private cpuCostUs = 0;
  private gpuCostUs = 0;
  private lone = 0;
  private readonly costs = { cpu: new CostAverage(), gpu: new CostAverage() };
  /** match() calls in this synchronous run: more than one is a burst, i.e. load. */
  private burst = 0;
  private burstReset = false;
  private readonly counters = { adaptiveCpu: 0, adaptiveGpu: 0, gpuEvents: 0, cpuEvents: 0, batches: 0, overflowEvents: 0, fallbackEvents: 0, deviceLosses: 0, rebuilds: 0 };
  private lastStages: StageTimes | null = null;

  private ownsContext = true;

  private constructor(options: GpuMatcherOptions) {
    this.cpu = new FastMatcher({ limits: options.limits });
    this.limits = this.cpu.limits;
    const o = { ...defaultGpuMatcherOptions, ...options };
    this.opts = {
      cpuBelowFilters: checkInt('cpuBelowFilters', o.cpuBelowFilters, 0, 2 ** 31),
      select: checkSelect(o.select),
      maxBatch: checkInt('maxBatch', o.maxBatch, 1, 65535),
      inFlight: checkInt('inFlight', o.inFlight, 1, 16),
      workgroupSize: checkInt('workgroupSize', o.workgroupSize, 1, 1024),
      contGroups: checkInt('contGroups', o.contGroups, 1, 65535),
      profile: o.profile === true,
      initialCandidates: checkInt('initialCandidates', o.initialCandidates, 1, 2 ** 24),
      initialOutputs: checkInt('initialOutputs', o.initialOutputs, 1, 2 ** 24),
      gridMinEvents: checkInt('gridMinEvents', o.gridMinEvents, 1, 2 ** 31),
      gpu: options.gpu ?? {},
    };
  }

  /** Opens a GPU device of its own and returns the engine. Throws `gpu: ...` when no usable adapter exists. */
  static async create(options: GpuMatcherOptions = {}): Promise<GpuMatcher> {
    const m = new GpuMatcher(options);
    await m.open();
    return m;
  }

  /**
   * An engine on a device that is already open, sharing its compiled kernels (many engines, one
   * device). close() leaves the device open; after a device loss the engine opens one of its own.
   */
  static attach(kernels: GpuKernels, options: GpuMatcherOptions = {}): GpuMatcher {
    const m = new GpuMatcher({ ...options, gpu: options.gpu ?? kernels.ctx.options });
    m.install(kernels.ctx, kernels, false);
    return m;
  }

  /** The device in use (for tests and stats); null while none is. */
  get context(): GpuContext | null {
    return this.ctx;
  }

  private async open(): Promise<void> {
    // Dawn quantizes timestamps by default (a browser privacy measure); profiling needs them raw.
    const flags = this.opts.gpu.dawnFlags ?? [];
    const gpu = this.opts.profile && !flags.includes(NO_QUANTIZATION) ? { ...this.opts.gpu, dawnFlags: [...flags, NO_QUANTIZATION] } : this.opts.gpu;
    const ctx = await GpuContext.open(gpu);
    try {
      this.install(ctx, await GpuKernels.compile(ctx, this.opts.workgroupSize), true);
    } catch (err) {
      ctx.destroy();
      throw err;
    }
  }

  private install(ctx: GpuContext, kernels: GpuKernels, owned: boolean): void {
    this.gpuState = new GpuBuffers(ctx, this.layout, this.opts, kernels);
    this.ctx = ctx;
    this.ownsContext = owned;
    ctx.onLost((info) => {
      if (this.ctx !== ctx) return;
      this.ctx = null;
      this.gpuState = null;
      if (this.closed) return;
      this.counters.deviceLosses++;
      void info;
      // Serve from the CPU engine meanwhile; rebuild on a new device from the host mirror.
      this.reopening ??= this.reopen();
    });
  }

  private async reopen(): Promise<void> {
    for (let attempt = 0; attempt < 5 && !this.closed; attempt++) {
      try {
        this.layout.fDirty.all = this.layout.cDirty.all = this.layout.sDirty.all = true;
        this.layout.posAll = true;
        await this.open();
        this.counters.rebuilds++;
        break;
      } catch {
        await new Promise((r) => setTimeout(r, 200 * 2 ** attempt));
      }
    }
    this.reopening = null;
  }

  /** Resolves once a lost device has been replaced (or replacing it has been given up). */
  async recovered(): Promise<void> {
    while (this.reopening !== null) await this.reopening;
  }

  // ---------------------------------------------------------------- mutations

  add(sub: Subscription): void {
    const n = validateSubscription(sub, this.limits);
    this.cpu.addValid(n);
    this.layout.insert(n);
  }

  replace(sub: Subscription): void {
    const n = validateSubscription(sub, this.limits);
    const old = this.cpu.get(n.id);
    this.cpu.replaceValid(n);
    this.layout.remove(old!);
    this.layout.insert(n);
  }

  remove(id: string): boolean {
    const old = typeof id === 'string' ? this.cpu.get(id) : undefined;
    if (!this.cpu.remove(id)) return false;
    this.layout.remove(old!);
    return true;
  }

  has(id: string): boolean {
    return this.cpu.has(id);
  }

  get(id: string): NSubscription | undefined {
    return this.cpu.get(id);
  }

  // Moves go to the GPU layout only; the CPU mirror catches up (syncCpu) before it next answers.

  updatePosition(device: string, lat: number, lon: number): void {
    // One slot lookup: a known device's id was validated when it first arrived.
    let slot = typeof device === 'string' ? this.layout.deviceSlot.get(device) : undefined;
    if (slot === undefined) checkId('device', device, this.limits);
    checkLat('lat', lat);
    checkLon('lon', lon);
    slot ??= this.layout.deviceSlotOf(device);
    this.layout.place(slot, lat, lon);
  }

  updatePositions(updates: readonly PositionUpdate[]): void {
    const valid = validatePositions(updates, this.limits); // the whole batch first
    for (let i = 0; i < valid.length; i++) this.layout.move(valid[i].device, valid[i].lat, valid[i].lon);
  }

  /** Brings the CPU mirror's positions up to date with the moves since it last answered. */
  private syncCpu(): void {
    const L = this.layout;
    if (L.stale.length === 0) return;
    const stale = L.takeStale();
    for (let i = 0; i < stale.length; i++) {
      const s = stale[i];
      const device = L.deviceOf(s);
      // A forgotten device was removed from the mirror when it was forgotten.
      if (device !== null && L.pKnown[s] === 1) this.cpu.updatePosition(device, L.pLat[s], L.pLon[s]);
    }
  }

  openDevice(device: string): DeviceHandle {
    const cpuHandle = this.cpu.openDevice(device);
    const slot = this.layout.deviceSlotOf(device);
    this.layout.pin(slot);
    return new GpuDeviceHandle(this.layout, cpuHandle, slot);
  }

  removeDevice(device: string): boolean {
    this.syncCpu(); // a position only the layout has yet still counts as known
    const had = this.cpu.removeDevice(device);
    if (had) this.layout.forget(device);
    return had;
  }

  // ---------------------------------------------------------------- matching

  /** Which path the next event takes. */
  get path(): 'gpu' | 'cpu' {
    return this.gpuState !== null && this.layout.liveFilters >= this.opts.cpuBelowFilters && this.gpuState.fits() ? 'gpu' : 'cpu';
  }

  /** Why the CPU answers, when it does. */
  get cpuReason(): string {
    if (this.gpuState === null) return this.closed ? 'closed' : 'no device (lost or rebuilding)';
    if (this.layout.liveFilters < this.opts.cpuBelowFilters) return `below ${this.opts.cpuBelowFilters} filters`;
    if (!this.gpuState.fits()) return `state exceeds the device's ${this.gpuState.bindingLimit}-byte storage binding`;
    return '';
  }

  match(event: Event): Promise<string[]> {
    let e: NEvent;
    try {
      e = validateEvent(event, this.limits);
    } catch (err) {
      return Promise.reject(err);
    }
    return this.matchValid(e);
  }

  matchBatch(events: readonly Event[]): Promise<string[][]> {
    try {
      const valid = validateEvents(events, this.limits);
      if (this.closed || this.path === 'cpu' || this.opts.select === 'cpu') return Promise.all(valid.map((e) => this.matchValid(e)));
      if (valid.length === 0) return Promise.resolve([]);
      // One job for the whole call: no promise per event.
      return new Promise((resolve, reject) => {
        this.queue.push(new Job(valid, resolve, reject));
        this.pump();
      });
    } catch (err) {
      return Promise.reject(err);
    }
  }

  /** Whether a lone event (nothing queued or running) goes to the CPU under adaptive selection. */
  private loneOnCpu(): boolean {
    if (this.opts.select !== 'adaptive') return this.opts.select === 'cpu';
    // A CPU answer is synchronous, so a burst of calls never queues: count the calls made in one
    // synchronous run (the count resets in a microtask, which runs before an awaiting caller's
    // next call, so sequential awaited calls stay lone events).
    if (++this.burst === 1 && !this.burstReset) {
      this.burstReset = true;
      queueMicrotask(() => {
        this.burst = 0;
        this.burstReset = false;
      });
    }
    if (this.queue.length > 0 || this.running > 0 || this.burst > 1) return false; // load: batch on the GPU
    const probe = ++this.lone % 32 === 0;
    // Until both paths have been measured, measure them; then the cheaper, probing the other.
    const cpuCheaper = this.cpuCostUs === 0 || (this.gpuCostUs !== 0 && this.cpuCostUs <= this.gpuCostUs);
    const onCpu = probe ? !cpuCheaper : cpuCheaper;
    if (onCpu) this.counters.adaptiveCpu++;
    else this.counters.adaptiveGpu++;
    return onCpu;
  }

  private matchOnCpu(e: NEvent): string[] {
    const t = performance.now();
    this.syncCpu();
    const ids = this.cpu.matchValid(e);
    this.cpuCostUs = this.costs.cpu.add(this.cpuCostUs, (performance.now() - t) * 1e3);
    this.counters.cpuEvents++;
    return ids;
  }

  private matchValid(e: NEvent): Promise<string[]> {
    if (this.closed) return Promise.reject(new AmbitError('UNAVAILABLE', 'gpu: matcher is closed'));
    if (this.path === 'cpu' || this.loneOnCpu()) return Promise.resolve(this.matchOnCpu(e));
    return new Promise((resolve, reject) => {
      this.queue.push(new Job([e], (r) => resolve(r[0]), reject));
      this.pump();
    });
  }

  private pump(): void {
    const max = this.opts.maxBatch;
    while (this.queue.length > 0 && this.running < this.opts.inFlight) {
      const segments: Segment[] = [];
      const events: NEvent[] = [];
      while (events.length < max && this.queue.length > 0) {
        const job = this.queue[0];
        const from = job.taken;
        const to = Math.min(job.events.length, from + max - events.length);
        for (let i = from; i < to; i++) events.push(job.events[i]);
        segments.push({ job, from, to });
        job.taken = to;
        if (to === job.events.length) this.queue.shift();
      }
      this.running++;
      // runBatch lowers `running` before it resolves the callers, so a caller's next match()
      // does not mistake this finished batch for load.
      void this.runBatch(segments, events).finally(() => this.pump());
    }
  }

  private async runBatch(segments: Segment[], events: NEvent[]): Promise<void> {
    let counted = true;
    try {
      await this.runBatchCounted(segments, events, () => {
        this.running--;
        counted = false;
      });
    } finally {
      if (counted) this.running--;
    }
  }

  private async runBatchCounted(segments: Segment[], events: NEvent[], done: () => void): Promise<void> {
    const state = this.gpuState;
    let results: (string[] | null)[];
    try {
      if (state === null) throw new Error('no device');
      const t = performance.now();
      results = await state.run(events);
      // Adaptive selection compares lone events, so only batches of one feed the GPU's cost.
      if (events.length === 1) this.gpuCostUs = this.costs.gpu.add(this.gpuCostUs, (performance.now() - t) * 1e3);
      this.counters.batches++;
    } catch {
      // The device was lost (or never came back): the CPU engine answers, nothing is dropped.
      results = events.map(() => null);
      this.counters.fallbackEvents += events.length;
    }
    if (state !== null) {
      this.counters.overflowEvents += state.lastOverflow;
      if (state.lastStages !== null) this.lastStages = state.lastStages;
    }
    done();
    let k = 0;
    for (const { job, from, to } of segments) {
      for (let i = from; i < to; i++, k++) {
        if (job.failed) continue;
        try {
          let ids = results[k];
          if (ids === null) {
            ids = this.matchOnCpu(events[k]);
          } else {
            this.counters.gpuEvents++;
          }
          job.results[i] = ids;
        } catch (err) {
          job.failed = true;
          job.reject(err);
        }
      }
      job.left -= to - from;
      if (job.left === 0 && !job.failed) job.resolve(job.results);
    }
  }

  /** Host-side figures of the last batch the GPU answered (null before the first). */
  get lastBatchTiming(): Readonly<BatchTiming> | null {
    const t = this.gpuState?.last;
    return t !== undefined && t.events > 0 ? t : null;
  }

  /** GPU time per stage of the last profiled batch (profile option and timestamp-query needed). */
  get stageTimes(): StageTimes | null {
    return this.lastStages;
  }

  stats(): MatcherStats {
    this.syncCpu();
    const s = this.cpu.stats();
    const gpuBytes = this.gpuState?.bytes ?? 0;
    return {
      engine: this.name,
      subscriptions: s.subscriptions,
      filters: s.filters,
      constraints: s.constraints,
      devices: s.devices,
      memoryBytes: s.memoryBytes + this.layout.hostBytes,
      extra: {
        path: this.path,
        cpuReason: this.cpuReason,
        gpuErrors: this.gpuState?.errors ?? 0,
        lastGpuError: this.gpuState?.lastError ?? '',
        adapter: this.ctx?.name ?? 'none',
        gpuBytes,
        gpuBytesPerFilter: this.layout.liveFilters > 0 ? gpuBytes / this.layout.liveFilters : 0,
        cpuBelowFilters: this.opts.cpuBelowFilters,
        select: this.opts.select,
        cpuCostUs: Math.round(this.cpuCostUs),
        gpuCostUs: Math.round(this.gpuCostUs),
        hostEncodeUs: Math.round(this.gpuState?.timing.encodeUs ?? 0),
        eventEncodeUs: Math.round(this.gpuState?.timing.eventsUs ?? 0),
        gpuWaitUs: Math.round(this.gpuState?.timing.waitUs ?? 0),
        parseUs: Math.round(this.gpuState?.timing.parseUs ?? 0),
        ...this.counters,
      },
    };
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    while (this.running > 0 || this.queue.length > 0) {
      await new Promise((r) => setTimeout(r, 1));
    }
    const ctx = this.ctx;
    const state = this.gpuState;
    this.ctx = null;
    this.gpuState = null;
    if (this.reopening !== null) await this.reopening;
    if (ctx !== null && !ctx.isLost) {
      if (this.ownsContext) await ctx.close();
      else state?.destroy();
    }
    // A device opened by a rebuild that finished after close() began.
    const late = this.ctx as GpuContext | null;
    if (late !== null && late !== ctx) await late.close();
    await this.cpu.close();
  }
}

class GpuDeviceHandle implements DeviceHandle {
  private slot: number;
  constructor(private readonly layout: GpuLayout, private readonly cpu: DeviceHandle, slot: number) {
    this.slot = slot;
  }

  get device(): string {
    return this.cpu.device;
  }

  update(lat: number, lon: number): void {
    checkHandleUpdate(this.slot >= 0, this.device, lat, lon);
    // The CPU mirror catches up lazily (GpuMatcher.syncCpu).
    this.layout.place(this.slot, lat, lon);
  }

  release(): void {
    if (this.slot < 0) return;
    this.cpu.release();
    this.layout.unpin(this.slot);
    this.slot = -1;
  }
}

/** Bytes to allocate for `need`: 1/16 more (at least 4 KiB), so growth re-uploads rarely. */
function headroom(need: number): number {
  return need + Math.max(4096, Math.ceil(need / 16));
}

/** Most (event, subscription) pairs an output buffer is sized for ahead of a batch (8 MiB; more only after an overflow). */
const MAX_OUT_PAIRS = 1024 * 1024;

const STORAGE = () => GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST | GPUBufferUsage.COPY_SRC;

/** The compiled Loc, Cont, Zip and scatter pipelines of one device; shareable between matchers. */
export class GpuKernels {
  private constructor(
    readonly ctx: GpuContext,
    readonly wg: number,
    readonly loc: GPUComputePipeline,
    readonly locFew: GPUComputePipeline,
    readonly cont: GPUComputePipeline,
    readonly zip: GPUComputePipeline,
    readonly scatter: GPUComputePipeline,
  ) {}

  static async compile(ctx: GpuContext, workgroupSize: number = defaultGpuMatcherOptions.workgroupSize): Promise<GpuKernels> {
    checkInt('workgroupSize', workgroupSize, 1, 1024);
    const wg = Math.min(workgroupSize, ctx.limits.maxComputeWorkgroupSizeX, ctx.limits.maxComputeInvocationsPerWorkgroup);
    const module = await ctx.compileShader('match');
    const make = (entryPoint: string) =>
      ctx.withValidation(`pipeline ${entryPoint}`, () =>
        ctx.device.createComputePipeline({ label: `ambit.${entryPoint}`, layout: 'auto', compute: { module, entryPoint, constants: { WG: wg } } }),
      );
    return new GpuKernels(ctx, wg, await make('loc'), await make('locFew'), await make('cont'), await make('zip'), await make('scatter'));
  }
}

/** The GPU side: buffers mirroring the layout, pipelines, and the batch runner. */
class GpuBuffers {
  private readonly device: GPUDevice;
  private readonly wg: number;
  private readonly pipelines: GpuKernels;
  private bufs = new Map<string, GPUBuffer>();
  /** Buffers created since their last full upload. */
  private readonly fresh = new Set<string>();
  private bindVersion = 0;
  private candCap: number;
  private slots: Slot[] = [];
  private readonly query: { set: GPUQuerySet; resolve: GPUBuffer } | null;
  lastOverflow = 0;
  lastStages: StageTimes | null = null;
  /** GPU errors caught around batches (each sent its batch to the CPU). */
  errors = 0;
  lastError = '';
  /** Moving averages (µs) of where a batch's time goes on the host side. */
  /** Moving averages per batch, µs: host encoding (of which the event input), GPU wait, result parsing. */
  readonly timing = { encodeUs: 0, eventsUs: 0, waitUs: 0, parseUs: 0 };
  /** The last batch's own figures, µs (benchmarks read them per event). */
  readonly last: BatchTiming = { events: 0, submitUs: 0, syncUs: 0, encodeEventsUs: 0, recordUs: 0, submitCallUs: 0, waitUs: 0, parseUs: 0 };
  private recentPairs = 64;
  /** Serials of the batches submitted and not read yet. */
  private readonly serials = new Set<number>();
  /** Moving maximum of (event, subscription) pairs per event: sizes the output ahead of a batch. */
  private pairsPerEvent = 0;
  /** Per subscription index: the stamp of the last event it was listed for (collect). */
  private seen = new Uint32Array(1024);
  private stamp = 0;
  /** Most events in one batch so far. */
  private widest = 1;
  /** Moving maximum of candidates per event: sizes Cont's grid-stride dispatch. */
  private recentCand = 0;

  constructor(
    private readonly ctx: GpuContext,
    private readonly layout: GpuLayout,
    private readonly opts: { maxBatch: number; inFlight: number; contGroups: number; profile: boolean; initialCandidates: number; initialOutputs: number; gridMinEvents: number },
    kernels: GpuKernels,
  ) {
    this.candCap = opts.initialCandidates;
    if (kernels.ctx !== ctx) throw new Error('gpu: kernels were compiled for another device');
    this.device = ctx.device;
    this.wg = kernels.wg;
    this.pipelines = kernels;
    this.query = opts.profile && ctx.features.has('timestamp-query')
      ? {
          set: this.device.createQuerySet({ label: 'ambit.stages', type: 'timestamp', count: 6 }),
          resolve: ctx.createBuffer('ambit.stages.resolve', 48, GPUBufferUsage.QUERY_RESOLVE | GPUBufferUsage.COPY_SRC),
        }
      : null;
    this.sync();
  }

  get bindingLimit(): number {
    return this.ctx.limits.maxStorageBufferBindingSize;
  }

  /** Whether every array the kernels bind fits in one storage binding of this device. */
  fits(): boolean {
    const L = this.layout;
    const most = Math.max(4 * L.fTop, 4 * L.cTop, 4 * L.sTop, 16 * L.pTop, 4 * this.candCap * this.widest);
    return most <= this.bindingLimit;
  }

  /** Frees this matcher's buffers (the device may be shared). */
  destroy(): void {
    for (const b of this.bufs.values()) b.destroy();
    for (const s of this.slots) {
      s.counts.destroy();
      s.out.destroy();
      s.staging.destroy();
    }
    this.query?.set.destroy();
    this.query?.resolve.destroy();
    this.bufs.clear();
    this.slots = [];
  }

  /** GPU memory held, bytes. */
  get bytes(): number {
    let n = 0;
    for (const buf of this.bufs.values()) n += buf.size;
    for (const s of this.slots) n += s.counts.size + s.out.size + s.staging.size;
    return n;
  }

  /** The named buffer, at least `bytes` long; a new one (zeroed) when it had to grow. */
  private buffer(name: string, bytes: number): GPUBuffer {
    const size = Math.max(16, Math.ceil(bytes / 4) * 4);
    let b = this.bufs.get(name);
    if (b === undefined || b.size < size) {
      b?.destroy();
      b = this.ctx.createBuffer(`ambit.${name}`, size, STORAGE());
      this.bufs.set(name, b);
      this.fresh.add(name);
      this.bindVersion++; // cached bind groups refer to the old buffer
    }
    return b;
  }

  /**
   * Sends elements [lo, hi) of a host array, or all of [0, used) after growth. GPU buffers are
   * sized to the used part plus 1/16, not to the host array's doubling capacity.
   */
  private upload(name: string, arr: Uint32Array | Float32Array, lo: number, hi: number, all: boolean, used: number): void {
    const have = this.bufs.get(name);
    const need = 4 * Math.max(used, 1);
    const buf = have !== undefined && have.size >= need ? have : this.buffer(name, Math.min(arr.byteLength, headroom(need)));
    if (all || this.fresh.delete(name)) this.ctx.writeBuffer(buf, 0, arr.subarray(0, Math.min(arr.length, buf.size / 4)));
    else if (hi > lo) this.ctx.writeBuffer(buf, lo * 4, arr.subarray(lo, Math.min(hi, used)));
  }

  /** Sends every change of the host mirror since the last call. */
  private sync(): void {
    const L = this.layout;
    const fAll = L.fDirty.all;
    const f = L.fDirty;
    this.upload('fBloom', L.fBloom, f.lo, f.hi, fAll, L.fTop);
    this.upload('fMeta', L.fMeta, f.lo, f.hi, fAll, L.fTop);
    this.upload('fPos', L.fPos, f.lo, f.hi, fAll, L.fTop);
    this.upload('fRad', L.fRad, f.lo, f.hi, fAll, L.fTop);
    this.upload('fCon', L.fCon, f.lo, f.hi, fAll, L.fTop);
    this.upload('fSub', L.fSub, f.lo, f.hi, fAll, L.fTop);
    f.clear();
    const c = L.cDirty;
    const cAll = c.all;
    this.upload('cHead', L.cHead, c.lo, c.hi, cAll, L.cTop);
    this.upload('cValA', L.cValA, c.lo, c.hi, cAll, L.cTop);
    this.upload('cValB', L.cValB, c.lo, c.hi, cAll, L.cTop);
    c.clear();
    const s = L.sDirty;
    this.upload('cStr', L.cStr, s.lo, s.hi, s.all, L.sTop);
    s.clear();
    // Positions: the whole array after growth; else one scatter of the moved slots.
    const moved = L.takeMoved();
    const havePos = this.bufs.get('pos');
    const posNeed = 16 * Math.max(L.pTop, 1);
    const posBuf = havePos !== undefined && havePos.size >= posNeed ? havePos : this.buffer('pos', Math.min(L.pos.byteLength, headroom(posNeed)));
    if (L.posAll || this.fresh.delete('pos')) {
      this.ctx.writeBuffer(posBuf, 0, L.pos.subarray(0, Math.min(L.pos.length, posBuf.size / 4)));
      L.posAll = false;
    } else if (moved.length > 0 && moved.length <= 4) {
      for (const slot of moved) this.ctx.writeBuffer(posBuf, slot * 16, L.pos.subarray(slot * 4, slot * 4 + 4));
    } else if (moved.length > 0) {
      // One upload of (x, y, z, slot) records, one scatter dispatch (record 0 holds the count).
      const rec = new Float32Array((moved.length + 1) * 4);
      const recU = new Uint32Array(rec.buffer);
      recU[0] = moved.length;
      for (let i = 0; i < moved.length; i++) {
        const slot = moved[i];
        const o = 4 * (i + 1);
        rec[o] = L.pos[4 * slot];
        rec[o + 1] = L.pos[4 * slot + 1];
        rec[o + 2] = L.pos[4 * slot + 2];
        recU[o + 3] = slot;
      }
      const movesBuf = this.buffer('moves', rec.byteLength);
      this.ctx.writeBuffer(movesBuf, 0, rec);
      const enc = this.device.createCommandEncoder({ label: 'ambit.scatter' });
      const pass = enc.beginComputePass({ label: 'ambit.scatter' });
      pass.setPipeline(this.pipelines.scatter);
      pass.setBindGroup(0, this.device.createBindGroup({
        label: 'ambit.scatter',
        layout: this.pipelines.scatter.getBindGroupLayout(0),
        entries: [
          { binding: 19, resource: { buffer: movesBuf } },
          { binding: 20, resource: { buffer: posBuf } },
        ],
      }));
      pass.dispatchWorkgroups(Math.ceil(moved.length / this.wg));
      pass.end();
      this.ctx.queue.submit([enc.finish()]);
    }
  }

  private slot(): Slot {
    let s = this.slots.find((x) => !x.busy);
    if (s === undefined) {
      s = {
        counts: this.ctx.createBuffer('ambit.counts', 4 * (this.opts.maxBatch + 1), STORAGE()),
        out: this.ctx.createBuffer('ambit.out', 8 * this.opts.initialOutputs, STORAGE()),
        outCap: this.opts.initialOutputs,
        staging: this.ctx.createBuffer('ambit.staging', 4 * (this.opts.maxBatch + 2) + 8 * this.opts.initialOutputs, GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST),
        stagingBytes: 4 * (this.opts.maxBatch + 2) + 8 * this.opts.initialOutputs,
        groups: null,
        busy: false,
      };
      this.slots.push(s);
    }
    return s;
  }

  private growOut(s: Slot, pairs: number): void {
    let cap = s.outCap;
    while (cap < pairs) cap *= 2;
    this.resizeOut(s, cap);
  }

  /** Replaces the slot's output buffer with one of `pairs` pairs (within the binding limit). */
  private resizeOut(s: Slot, pairs: number): void {
    const cap = Math.max(1, Math.min(pairs, Math.floor(this.ctx.limits.maxStorageBufferBindingSize / 8)));
    if (cap === s.outCap) return;
    s.out.destroy();
    s.out = this.ctx.createBuffer('ambit.out', 8 * cap, STORAGE());
    s.outCap = cap;
    s.groups = null;
  }

  private groups(s: Slot): { loc: GPUBindGroup; locFew: GPUBindGroup; cont: GPUBindGroup; zip: GPUBindGroup } {
    if (s.groups === null || s.groups.version !== this.bindVersion) {
      s.groups = { version: this.bindVersion, loc: this.group(s, 'loc'), locFew: this.group(s, 'locFew'), cont: this.group(s, 'cont'), zip: this.group(s, 'zip') };
    }
    return s.groups;
  }

  private group(s: Slot, kernel: 'loc' | 'locFew' | 'cont' | 'zip'): GPUBindGroup {
    const b = (n: string) => ({ buffer: this.bufs.get(n)! });
    const entries: GPUBindGroupEntry[] = [{ binding: 1, resource: b('input') }];
    if (kernel === 'loc' || kernel === 'locFew') {
      entries.push(
        { binding: 4, resource: b('fBloom') },
        { binding: 5, resource: b('fMeta') },
        { binding: 6, resource: b('fPos') },
        { binding: 7, resource: b('fRad') },
        { binding: 8, resource: b('pos') },
        { binding: 9, resource: b('cand') },
        { binding: 10, resource: { buffer: s.counts } },
      );
    } else if (kernel === 'cont') {
      entries.push(
        { binding: 5, resource: b('fMeta') },
        { binding: 9, resource: b('cand') },
        { binding: 10, resource: { buffer: s.counts } },
        { binding: 11, resource: b('fCon') },
        { binding: 12, resource: b('fSub') },
        { binding: 13, resource: b('cHead') },
        { binding: 14, resource: b('cValA') },
        { binding: 15, resource: b('cValB') },
        { binding: 16, resource: b('cStr') },
      );
    } else {
      entries.push(
        { binding: 9, resource: b('cand') },
        { binding: 10, resource: { buffer: s.counts } },
        { binding: 18, resource: { buffer: s.out } },
      );
    }
    return this.device.createBindGroup({ label: `ambit.${kernel}`, layout: this.pipelines[kernel].getBindGroupLayout(0), entries });
  }

  /**
   * Appends each pair's subscription id to its event's result, once: a subscription with several
   * filters matching one event comes in one pair per filter. Pairs of different events interleave,
   * so they are grouped by event first (counting sort), then deduplicated with a stamp per event.
   */
  private collect(pairs: Uint32Array, total: number, results: (string[] | null)[]): void {
    const subId = this.layout.subId;
    // A null id: the subscription was removed after the batch was submitted (its index is held
    // back from reuse until the batch is read, so an index never names another subscription).
    if (total === 1) {
      const r = results[pairs[0]];
      const id = subId[pairs[1]];
      if (r !== null && id !== null) r.push(id);
      return;
    }
    const E = results.length;
    const start = new Uint32Array(E + 1);
    for (let i = 0; i < total; i++) start[pairs[2 * i] + 1]++;
    for (let e = 0; e < E; e++) start[e + 1] += start[e];
    const at = start.slice(0, E);
    const flat = new Uint32Array(total);
    for (let i = 0; i < total; i++) flat[at[pairs[2 * i]]++] = pairs[2 * i + 1];
    if (this.seen.length < subId.length) this.seen = new Uint32Array(Math.max(subId.length, 2 * this.seen.length));
    const seen = this.seen;
    for (let e = 0; e < E; e++) {
      const r = results[e];
      if (r === null || start[e] === start[e + 1]) continue;
      if (this.stamp === 0xffffffff) {
        seen.fill(0);
        this.stamp = 0;
      }
      const stamp = ++this.stamp;
      for (let k = start[e]; k < start[e + 1]; k++) {
        const sub = flat[k];
        if (seen[sub] === stamp) continue;
        seen[sub] = stamp;
        const id = subId[sub];
        if (id !== null) r.push(id);
      }
    }
  }

  /** Splits `groups` workgroups over x and z (each at most the device's per-dimension limit). */
  private split(groups: number): [number, number] {
    const max = this.ctx.limits.maxComputeWorkgroupsPerDimension;
    if (groups <= max) return [Math.max(1, groups), 1];
    const z = Math.ceil(groups / max);
    return [Math.ceil(groups / z), z];
  }

  /**
   * Matches a batch. Returns, per event, its subscription ids, or null where the event must be
   * answered by the CPU engine (its candidates overflowed the buffer).
   */
  async run(events: readonly NEvent[]): Promise<(string[] | null)[]> {
    if (!this.fits()) return events.map(() => null);
    const L = this.layout;
    const serial = ++L.submitted;
    this.serials.add(serial);
    L.batchesInFlight++;
    try {
      return await this.runGuarded(events);
    } finally {
      this.serials.delete(serial);
      L.batchesInFlight--;
      let oldest = Infinity;
      for (const x of this.serials) if (x < oldest) oldest = x;
      L.releaseHeld(oldest);
    }
  }

  private async runGuarded(events: readonly NEvent[]): Promise<(string[] | null)[]> {
    // Any GPU error in this batch (validation, out of memory) sends the batch to the CPU: never
    // an empty answer from a command buffer the device refused.
    this.device.pushErrorScope('out-of-memory');
    this.device.pushErrorScope('validation');
    let scoped: Promise<GPUError | null>[] = [];
    try {
      return await this.runScoped(events, () => {
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

  private async runScoped(events: readonly NEvent[], closeScopes: () => Promise<GPUError | null>[]): Promise<(string[] | null)[]> {
    const t0 = performance.now();
    const L = this.layout;
    const E = events.length;
    this.sync();
    const tSync = performance.now();
    // Per-event scratch sized to the largest batch so far, not maxBatch: a service that sends
    // lone events never pays for 256 candidate lists.
    if (E > this.widest) this.widest = E;
    // The capacity this batch runs with: a batch finishing meanwhile may grow this.candCap.
    const candCap = this.candCap;
    this.buffer('cand', 4 * candCap * this.widest);
    const te = performance.now();
    const grid = E >= this.opts.gridMinEvents;
    const inp = L.encodeEvents(events, grid);
    this.last.encodeEventsUs = (performance.now() - te) * 1e3;
    this.timing.eventsUs += 0.05 * (this.last.encodeEventsUs - this.timing.eventsUs);
    const input = this.buffer('input', inp.byteLength);

    const s = this.slot();
    s.busy = true;
    try {
      // Room for twice the pairs recent events had (an overflow sends the whole batch to the CPU),
      // within a bound; a buffer four times too large shrinks back.
      const room = Math.min(MAX_OUT_PAIRS, Math.max(this.opts.initialOutputs, Math.ceil(2 * E * this.pairsPerEvent)));
      if (room > s.outCap || 4 * room < s.outCap) this.resizeOut(s, room);
      const filterCount = L.fTop;
      const [fx, fz] = this.split(Math.ceil(filterCount / this.wg));
      // Cont's grid strides over the candidates, so any group count is correct; size it to recent
      // candidate counts (a lone sparse event needs one group, not contGroups).
      const contGroups = Math.max(1, Math.min(this.opts.contGroups, Math.ceil(this.recentCand / this.wg)));
      inp.set([filterCount, E, candCap, 0, s.outCap, contGroups, fx, 0], 0);
      // The batch's only upload; queue order keeps it intact until this batch's passes have run.
      this.ctx.writeBuffer(input, 0, inp);
      const g = this.groups(s);
      const cmd = this.device.createCommandEncoder({ label: 'ambit.match' });
      cmd.clearBuffer(s.counts, 0, Math.ceil((4 * (E + 1)) / 4) * 4);
      const q = this.query;
      const ts = (i: number): GPUComputePassTimestampWrites | undefined =>
        q === null ? undefined : { querySet: q.set, beginningOfPassWriteIndex: 2 * i, endOfPassWriteIndex: 2 * i + 1 };

      // One pass with three dispatches (Dawn orders them with barriers); three passes only when
      // timestamps are written around each stage.
      let pass = cmd.beginComputePass({ label: 'ambit.loc', timestampWrites: ts(0) });
      pass.setPipeline(grid ? this.pipelines.loc : this.pipelines.locFew);
      pass.setBindGroup(0, grid ? g.loc : g.locFew);
      pass.dispatchWorkgroups(fx, 1, fz);
      if (q !== null) {
        pass.end();
        pass = cmd.beginComputePass({ label: 'ambit.cont', timestampWrites: ts(1) });
      }
      pass.setPipeline(this.pipelines.cont);
      pass.setBindGroup(0, g.cont);
      pass.dispatchWorkgroups(contGroups, E, 1);
      if (q !== null) {
        pass.end();
        pass = cmd.beginComputePass({ label: 'ambit.zip', timestampWrites: ts(2) });
      }
      pass.setPipeline(this.pipelines.zip);
      pass.setBindGroup(0, g.zip);
      pass.dispatchWorkgroups(contGroups, E, 1);
      pass.end();
      if (q !== null) cmd.resolveQuerySet(q.set, 0, 6, q.resolve, 0);

      // Counters, then as many pairs as recent batches needed (more are read in a second trip).
      const countBytes = 4 * (E + 1);
      const countBytesAligned = Math.ceil(countBytes / 8) * 8;
      const prefixPairs = Math.min(s.outCap, Math.max(Math.min(64, s.outCap), 2 * this.recentPairs));
      const want = countBytesAligned + 8 * prefixPairs + (q !== null ? 48 : 0);
      if (s.stagingBytes < want) {
        s.staging.destroy();
        s.stagingBytes = want * 2;
        s.staging = this.ctx.createBuffer('ambit.staging', s.stagingBytes, GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST);
      }
      cmd.copyBufferToBuffer(s.counts, 0, s.staging, 0, countBytes);
      cmd.copyBufferToBuffer(s.out, 0, s.staging, countBytesAligned, 8 * prefixPairs);
      if (q !== null) cmd.copyBufferToBuffer(q.resolve, 0, s.staging, countBytesAligned + 8 * prefixPairs, 48);
      const finished = cmd.finish();
      const tRec = performance.now();
      this.ctx.queue.submit([finished]);
      const scopes = closeScopes();
      const t1 = performance.now();
      this.last.syncUs = (tSync - t0) * 1e3;
      this.last.recordUs = (tRec - te) * 1e3 - this.last.encodeEventsUs;
      this.last.submitCallUs = (t1 - tRec) * 1e3;
      const [, validation, oom] = await Promise.all([s.staging.mapAsync(GPUMapMode.READ, 0, want), ...scopes]);
      const t2 = performance.now();
      const fault = validation ?? oom;
      if (fault !== null) {
        s.staging.unmap();
        // A buffer the device refused (out of memory) must not stay in the slot.
        s.outCap = 0;
        this.resizeOut(s, this.opts.initialOutputs);
        this.errors++;
        this.lastError = fault.message;
        return events.map(() => null);
      }
      const mapped = s.staging.getMappedRange(0, want);
      const counts = new Uint32Array(mapped, 0, E + 1).slice();
      const total = counts[E];
      const got = Math.min(total, prefixPairs, s.outCap);
      const pairs = new Uint32Array(mapped, countBytesAligned, 2 * got).slice();
      if (q !== null) {
        const t = new BigUint64Array(mapped.slice(countBytesAligned + 8 * prefixPairs, countBytesAligned + 8 * prefixPairs + 48));
        const ms = (i: number) => Number(t[2 * i + 1] - t[2 * i]) / 1e6;
        this.lastStages = { loc: ms(0), cont: ms(1), zip: ms(2) };
      }
      s.staging.unmap();

      this.recentPairs = Math.max(32, Math.round(0.8 * this.recentPairs + 0.2 * total));
      this.pairsPerEvent = Math.max(total / E, 0.8 * this.pairsPerEvent);
      if (total > s.outCap) {
        // Output overflowed: which events lost pairs is unknown, so the CPU answers the batch.
        this.growOut(s, total);
        this.lastOverflow = E;
        return events.map(() => null);
      }
      let all = pairs;
      if (total > got) {
        const rest = await this.ctx.readBuffer(s.out, 8 * got, 8 * (total - got));
        all = new Uint32Array(2 * total);
        all.set(pairs);
        all.set(new Uint32Array(rest), 2 * got);
      }
      const results: (string[] | null)[] = events.map(() => []);
      let overflow = 0;
      let maxCand = 0;
      let most = 0;
      for (let e = 0; e < E; e++) {
        if (counts[e] > most) most = counts[e];
        if (counts[e] > candCap) {
          results[e] = null;
          overflow++;
          if (counts[e] > maxCand) maxCand = counts[e];
        }
      }
      this.collect(all, total, results);
      this.recentCand = Math.max(most, Math.round(0.9 * this.recentCand));
      if (maxCand > 0) {
        const fit = Math.floor(this.ctx.limits.maxStorageBufferBindingSize / (4 * this.opts.maxBatch));
        while (this.candCap < maxCand && this.candCap * 2 <= fit) this.candCap *= 2;
      }
      this.lastOverflow = overflow;
      const t3 = performance.now();
      const a = 0.05;
      this.last.events = E;
      this.last.submitUs = (t1 - t0) * 1e3;
      this.last.waitUs = (t2 - t1) * 1e3;
      this.last.parseUs = (t3 - t2) * 1e3;
      this.timing.encodeUs += a * ((t1 - t0) * 1e3 - this.timing.encodeUs);
      this.timing.waitUs += a * ((t2 - t1) * 1e3 - this.timing.waitUs);
      this.timing.parseUs += a * ((t3 - t2) * 1e3 - this.timing.parseUs);
      return results;
    } finally {
      s.busy = false;
    }
  }
}
