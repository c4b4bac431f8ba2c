/**
 * The GPU engine: CLCB (Loc, Cont, Zip; src/engines/gpu/match.wgsl) on WebGPU, behind the `Matcher` interface.
 *
 * - Subscription changes go to a fast CPU engine (validation, `get`, the small-scale path and the
 *   fallback) and to the host mirror of the GPU buffers (layout.ts); changed ranges are uploaded
 *   before the next dispatch. A location update costs two host writes and a mark in the mirror
 *   only: all moves since the last batch go up as one upload plus one scatter dispatch, and the
 *   CPU engine replays the marked slots only when it next answers (syncCpu).
 * - Below `cpuBelowFilters` live filters the CPU engine answers: a dispatch and readback has a
 *   fixed cost that small workloads do not repay (CLCB §5: ~4000 filters).
 * - On device loss every event in flight is answered by the CPU engine, later events too, while a
 *   new device is opened and rebuilt from the host mirror.
 * - Without the CPU engine (`cpuMirror: false`, for the largest sets: the host keeps about a third
 *   of the memory a filter) the layout answers `has` and `get` and keeps the counts, and the GPU
 *   answers every event: an event it could not answer runs again (queue.ts), and events wait out a
 *   device loss.
 *
 * The rest lives beside this file: queue.ts (the choice of path, batching, batches in flight),
 * batch.ts (one batch, step by step), buffers.ts and record.ts (device buffers, bind groups and
 * command recording), readback.ts (results, capacity checks, dedupe of pairs, overflow to the
 * CPU), kernels.ts and bindings.ts (pipelines and the bindings shared with the WGSL), input.ts
 * (the batch input), options.ts.
 */
import { FastMatcher } from '../fast.js';
import { type DeviceHandle, type Listed, type Matcher, type MatcherStats, checkHandleUpdate, checkTag, validateNew } from '../matcher.js';
import { AmbitError, ValidationError, show } from '../../model/errors.js';
import { type NEvent, type NSubscription, checkId, checkLat, checkLon, plainSubscription, resolveLimits, validateEvent, validateEvents, validatePositions, validateSubscription } from '../../model/limits.js';
import type { Event, PositionUpdate, Subscription } from '../../model/types.js';
import { GpuBatches } from './batch.js';
import { GpuContext } from './device.js';
import { GpuKernels } from './kernels.js';
import { GpuLayout, namesOnly } from './layout.js';
import { type BatchTiming, type GpuMatcherOptions, type ResolvedGpuMatcherOptions, type StageTimes, resolveGpuMatcherOptions } from './options.js';
import { BatchQueue, PathChoice, SMALL_BATCH, newCounters } from './queue.js';
import { PackedEvents } from './packed.js';

// The engine's public surface stays importable from this module.
export { GpuKernels } from './kernels.js';
export { type BatchTiming, type GpuMatcherOptions, type StageTimes, defaultGpuMatcherOptions } from './options.js';
export { MAX_PACKED_EVENTS, type PackOptions, PackedEvents, type PackedTransfer, packEventBatches, packEvents } from './packed.js';

const NO_QUANTIZATION = 'disable-dawn-features=timestamp_quantization';
/** Open handles a device may have at once (the fast engine's limit). */
const MAX_HANDLES = 0xffff;

export class GpuMatcher implements Matcher {
  readonly name = 'gpu';
  readonly limits;
  /** The CPU mirror; null without one (cpuMirror false). */
  private readonly cpu: FastMatcher | null;
  private readonly layout = new GpuLayout();
  private readonly opts: ResolvedGpuMatcherOptions;
  private ctx: GpuContext | null = null;
  private gpuState: GpuBatches | null = null;
  private closed = false;
  private reopening: Promise<void> | null = null;
  private readonly counters = newCounters();
  private readonly choice: PathChoice;
  private readonly queue: BatchQueue;

  private ownsContext = true;

  private constructor(options: GpuMatcherOptions) {
    this.opts = resolveGpuMatcherOptions(options);
    this.cpu = this.opts.cpuMirror ? new FastMatcher({ limits: options.limits }) : null;
    this.limits = this.cpu?.limits ?? resolveLimits(options.limits);
    this.choice = new PathChoice(this.opts.select, this.counters, this.opts.costSample, this.opts.threadBusy, this.opts.clock);
    const onCpu = this.cpu === null ? null : (e: NEvent, tags: boolean) => this.matchOnCpu(e, tags);
    this.queue = new BatchQueue(this.opts, () => this.gpuState, onCpu, this.choice, this.counters, () => this.gpuBack());
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
    this.gpuState = new GpuBatches(ctx, this.layout, this.opts, kernels);
    this.gpuState.totals = this.counters;
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

  /**
   * Whether there is a GPU side to run on, once a rebuild under way has ended; where an earlier one
   * gave up, another is tried first (without a CPU mirror nothing else can answer).
   */
  private async gpuBack(): Promise<boolean> {
    if (this.gpuState === null && !this.closed && this.reopening === null) this.reopening = this.reopen();
    await this.recovered();
    return this.gpuState !== null && !this.closed;
  }

  // ---------------------------------------------------------------- mutations

  add(sub: Subscription): void {
    // A plain subscription is read as given by both, without a normalised copy.
    const v = plainSubscription(sub, this.limits) ? sub : validateSubscription(sub, this.limits);
    if (this.cpu !== null) this.cpu.addView(v);
    else if (this.layout.has(v.id)) throw new AmbitError('ALREADY_EXISTS', `subscription ${show(v.id)} already exists`, 'subscription.id');
    this.layout.insert(v);
  }

  addMany(subs: readonly Subscription[]): void {
    // Checked whole first (L11); plain subscriptions are read as given, without a normalised copy.
    const ns = validateNew(subs, this.limits, (id) => this.has(id), true);
    // The layout's room first (nothing is stored if it cannot be had), counted as it will be used:
    // constraint slots for filters with a value to compare (names-only filters keep a run of names).
    let filters = 0;
    let slots = 0;
    for (let i = 0; i < ns.length; i++) {
      const fs = ns[i].filters;
      filters += fs.length;
      for (let k = 0; k < fs.length; k++) {
        if (!namesOnly(fs[k])) slots += (fs[k].constraints?.length ?? 0) + (fs[k].tags?.length ?? 0);
      }
    }
    try {
      this.layout.reserve(filters, slots);
    } catch (err) {
      // Too large to reserve at once: the arrays grow as the load goes, as add() grows them.
      if (!(err instanceof RangeError)) throw err;
    }
    this.cpu?.addManyViews(ns);
    for (let i = 0; i < ns.length; i++) this.layout.insert(ns[i]);
  }

  replace(sub: Subscription): void {
    const n = validateSubscription(sub, this.limits);
    if (this.cpu !== null) this.cpu.replaceValid(n);
    else if (!this.layout.has(n.id)) throw new AmbitError('NOT_FOUND', `subscription ${show(n.id)} does not exist`, 'subscription.id');
    // The old version stays listed by batches already submitted (the id is still held).
    this.layout.remove(n.id, true);
    this.layout.insert(n);
  }

  remove(id: string): boolean {
    if (this.cpu !== null) {
      if (!this.cpu.remove(id)) return false;
    } else if (!this.layout.has(checkId('id', id, this.limits))) return false;
    this.layout.remove(id);
    return true;
  }

  has(id: string): boolean {
    return this.cpu !== null ? this.cpu.has(id) : this.layout.has(id);
  }

  tag(key: string, tag: number): boolean {
    // The CPU mirror answers some events (lone ones, overflow, device loss): it keeps the tag too.
    if (this.cpu !== null) {
      if (!this.cpu.tag(key, tag)) return false;
    } else checkTag(tag);
    return this.layout.tag(key, tag);
  }

  get(id: string): NSubscription | undefined {
    return this.cpu !== null ? this.cpu.get(id) : this.layout.subscription(id);
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
    const cpu = this.cpu;
    if (L.stale.length === 0 || cpu === null) return;
    const stale = L.takeStale();
    for (let i = 0; i < stale.length; i++) {
      const s = stale[i];
      const device = L.deviceOf(s);
      // A forgotten device was removed from the mirror when it was forgotten.
      if (device !== null && L.pKnown[s] === 1) cpu.updatePosition(device, L.pLat[s], L.pLon[s]);
    }
  }

  openDevice(device: string): DeviceHandle {
    const cpuHandle = this.cpu !== null ? this.cpu.openDevice(device) : null;
    if (cpuHandle === null) {
      checkId('device', device, this.limits);
      // As the fast engine (its slots count pins in 16 bits): the same limit with or without it.
      const s = this.layout.deviceSlot.get(device);
      if (s !== undefined && this.layout.pins(s) >= MAX_HANDLES) throw new AmbitError('RESOURCE_EXHAUSTED', `too many open handles for device ${show(device)}`, 'device');
    }
    const slot = this.layout.deviceSlotOf(device);
    this.layout.pin(slot);
    return new GpuDeviceHandle(this.layout, cpuHandle, device, slot);
  }

  removeDevice(device: string): boolean {
    if (this.cpu === null) {
      const s = this.layout.deviceSlot.get(checkId('device', device, this.limits));
      const had = s !== undefined && this.layout.pKnown[s] === 1;
      this.layout.forget(device);
      return had;
    }
    this.syncCpu(); // a position only the layout has yet still counts as known
    const had = this.cpu.removeDevice(device);
    if (had) this.layout.forget(device);
    return had;
  }

  // ---------------------------------------------------------------- matching

  /** Which path the next event takes (without a CPU mirror always the GPU, waiting for one while there is none). */
  get path(): 'gpu' | 'cpu' {
    if (this.cpu === null) return 'gpu';
    return this.gpuState !== null && this.layout.liveFilters >= this.opts.cpuBelowFilters && this.gpuState.fits() ? 'gpu' : 'cpu';
  }

  /** Why the CPU answers, when it does (without a CPU mirror, whose cpuBelowFilters is 0: why the GPU cannot, or ''). */
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
    return this.matchValid(e, false) as Promise<string[]>;
  }

  matchBatch(events: readonly Event[]): Promise<string[][]> {
    return this.matchSome(events, false) as Promise<string[][]>;
  }

  matchBatchTagged(events: readonly Event[]): Promise<Listed[][]> {
    return this.matchSome(events, true);
  }

  /** matchBatch (`tags` false: ids only) and matchBatchTagged. */
  private matchSome(events: readonly Event[], tags: boolean): Promise<Listed[][]> {
    try {
      const valid = validateEvents(events, this.limits);
      if (valid.length === 0) return this.queue.inOrder([]);
      if (this.closed) return Promise.reject(new AmbitError('UNAVAILABLE', 'gpu: matcher is closed'));
      this.refuseUnfit();
      this.choice.arrived(valid.length);
      // A small call (a hub's publish at a low rate carries a few events) takes the adaptive
      // choice of path, as a lone event does; either way the answers come back in call order.
      const onCpu = this.callOnCpu(valid.length);
      if (onCpu) return this.queue.inOrder(valid.map((e) => this.matchOnCpu(e, tags)));
      // One job for the whole call: no promise per event.
      return this.queue.submit(valid, tags);
    } catch (err) {
      return Promise.reject(err);
    }
  }

  /**
   * Matches a packed batch (packed.ts: checked and encoded by `packEvents`, on this thread or
   * another, `PackedEvents.fromTransfer`), as one GPU batch of its own: this thread only turns the
   * pack's names into the engine's ids. The answers are `matchBatch`'s (or `matchBatchTagged`'s,
   * `tags`) on the same events; where the CPU answers (no device, below `cpuBelowFilters`, a lone
   * small call under the adaptive choice, an overflow) it decodes the events it answers. A pack
   * must hold at most `maxBatch` events and have been checked against limits no looser than the
   * engine's (else INVALID_ARGUMENT on `events`).
   */
  matchPacked(packed: PackedEvents, tags = false): Promise<Listed[][]> {
    try {
      if (!(packed instanceof PackedEvents)) throw new ValidationError('events', `must be a packed batch (packEvents), got ${show(packed)}`);
      const n = packed.count;
      if (n > this.opts.maxBatch) throw new ValidationError('events', `must hold at most maxBatch (${this.opts.maxBatch}) events a pack, got ${n}`);
      if (!packed.within(this.limits)) throw new ValidationError('events', "were packed under limits looser than the engine's");
      if (n === 0) return this.queue.inOrder([]);
      if (this.closed) return Promise.reject(new AmbitError('UNAVAILABLE', 'gpu: matcher is closed'));
      this.refuseUnfit();
      this.choice.arrived(n);
      const onCpu = this.callOnCpu(n);
      if (onCpu) {
        const out: Listed[][] = new Array(n);
        for (let k = 0; k < n; k++) out[k] = this.matchOnCpu(packed.event(k), tags);
        return this.queue.inOrder(out);
      }
      return this.queue.submitPacked(packed, tags);
    } catch (err) {
      return Promise.reject(err);
    }
  }

  /**
   * Whether a call of `n` events is answered on the CPU: the CPU path, or a small call (a hub's
   * publish at a low rate carries a few events) under the adaptive choice, as a lone event is.
   */
  private callOnCpu(n: number): boolean {
    return this.path === 'cpu' || this.opts.select === 'cpu' || (n <= SMALL_BATCH && this.choice.smallOnCpu(n, this.queue.waiting));
  }

  /** Most events a batch (and a pack, matchPacked) holds. */
  get maxBatch(): number {
    return this.opts.maxBatch;
  }

  /** Without a CPU mirror, a state the device cannot bind cannot be matched: RESOURCE_EXHAUSTED. */
  private refuseUnfit(): void {
    if (this.cpu === null && this.gpuState !== null && !this.gpuState.fits()) throw new AmbitError('RESOURCE_EXHAUSTED', `gpu: ${this.cpuReason}, and there is no CPU mirror (cpuMirror false) to answer`);
  }

  private matchOnCpu(e: NEvent, tags: boolean): Listed[] {
    const t = performance.now();
    this.syncCpu();
    const cpu = this.cpu!;
    const ids = tags ? cpu.matchValidTagged(e) : cpu.matchValid(e);
    this.choice.sample('cpu', (performance.now() - t) * 1e3);
    this.counters.cpuEvents++;
    return ids;
  }

  private matchValid(e: NEvent, tags: boolean): Promise<Listed[]> {
    if (this.closed) return Promise.reject(new AmbitError('UNAVAILABLE', 'gpu: matcher is closed'));
    try {
      this.refuseUnfit();
    } catch (err) {
      return Promise.reject(err);
    }
    this.choice.arrived(1);
    if (this.path === 'cpu' || this.choice.smallOnCpu(1, this.queue.waiting)) return this.queue.inOrder(this.matchOnCpu(e, tags));
    return this.queue.submitOne(e, tags);
  }

  /** Host-side figures of the last batch the GPU answered (null before the first). */
  get lastBatchTiming(): Readonly<BatchTiming> | null {
    const t = this.gpuState?.last;
    return t !== undefined && t.events > 0 ? t : null;
  }

  /** GPU time per stage of the last profiled batch (profile option and timestamp-query needed). */
  get stageTimes(): StageTimes | null {
    return this.queue.lastStages;
  }

  stats(): MatcherStats {
    this.syncCpu();
    const L = this.layout;
    const s = this.cpu?.stats() ?? { subscriptions: L.subscriptions, filters: L.liveFilters, constraints: L.liveConstraints, devices: L.knownDevices, memoryBytes: 0 };
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
        cpuMirror: this.cpu !== null,
        cpuReason: this.cpuReason,
        gpuErrors: this.gpuState?.errors ?? 0,
        // Pairs within float32's uncertainty of a boundary, decided on the host in float64 (since the device opened).
        bandPairs: this.gpuState?.bandPairs.decided ?? 0,
        bandPairsMatched: this.gpuState?.bandPairs.matched ?? 0,
        lastGpuError: this.gpuState?.lastError ?? '',
        adapter: this.ctx?.name ?? 'none',
        gpuBytes,
        gpuBytesPerFilter: this.layout.liveFilters > 0 ? gpuBytes / this.layout.liveFilters : 0,
        // The state buffers' used part alone (filters, constraints, strings and name runs, positions).
        stateBytesPerFilter: this.layout.liveFilters > 0 ? this.layout.stateBytes / this.layout.liveFilters : 0,
        cpuBelowFilters: this.opts.cpuBelowFilters,
        select: this.opts.select,
        cpuCostUs: Math.round(this.choice.cpuCostUs),
        gpuCostUs: Math.round(this.choice.gpuCostUs),
        eventsPerSecond: Math.round(this.choice.rate),
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
    while (this.queue.busy) {
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
    await this.cpu?.close();
  }
}

class GpuDeviceHandle implements DeviceHandle {
  private slot: number;
  constructor(
    private readonly layout: GpuLayout,
    /** The CPU mirror's handle; null without a mirror. */
    private readonly cpu: DeviceHandle | null,
    readonly device: string,
    slot: number,
  ) {
    this.slot = slot;
  }

  update(lat: number, lon: number): void {
    checkHandleUpdate(this.slot >= 0, this.device, lat, lon);
    // The CPU mirror catches up lazily (GpuMatcher.syncCpu).
    this.layout.place(this.slot, lat, lon);
  }

  release(): void {
    if (this.slot < 0) return;
    this.cpu?.release();
    this.layout.unpin(this.slot);
    this.slot = -1;
  }
}
