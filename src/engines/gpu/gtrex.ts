/**
 * The GPU pattern sequencer, after GTrex (shared/papers/gtrex-cep-gpu-thesis.txt): every pattern
 * element's column lives in GPU memory, and a batch of releases is searched at once, one kernel
 * pass a step (gtrex.wgsl): level 1 holds each terminator's search (a terminator and one of its
 * patterns), pass i extends every partial match of level i by its step-i candidates, the last
 * step's go to the complete list, whose aggregates a last pass computes. docs/semantics.md §9 is
 * the definition; its answers equal the CPU sequencers' on every release (float64 sums in release
 * order, on the GPU from the bits).
 *
 * Terminators of one batch are independent: each sees the columns as they were at its own release
 * (records released before it, the last maxRetained of them, E15), which the kernels bound by its
 * seq, so a batch is searched in one go. Patterns with consuming steps (E14) are not: a match uses
 * events up for the terminators after it; they stay on a CdpSequencer inside this one.
 *
 * The host keeps each column's records (seq, time, event) in a ring, with the CDP's retention in
 * step, and writes only what changed to the GPU: new records, moved rings, descriptors, through
 * one staging buffer and a scatter pass. The pool (configs and rings) is rebuilt, bigger, when it
 * runs out; it must fit one storage binding (paging columns between host and GPU is not done).
 */
import type { NEventPattern } from '../../model/event-patterns.js';
import { patternElements } from '../../model/event-patterns.js';
import type { NEvent } from '../../model/limits.js';
import { CdpSequencer } from '../event-patterns/cdp.js';
import {
  type BatchRelease,
  type BatchSequencer,
  DEFAULT_MAX_RETAINED,
  type PatternHits,
  type PatternMatch,
  type SequencerOptions,
  type SequencerSnapshot,
  type SequencerStats,
  SnapshotEvents,
  checkSnapshot,
} from '../event-patterns/sequencer.js';
import { GpuContext, GpuError, type GpuOptions } from './device.js';
import { type Done, type Search, answer } from './gtrex-results.js';
import { DESC_WORDS, type GpuPattern, HostColumn, INDEX_WORDS, SUB_WORDS, Interner, type Retention, bitsDouble, compilePattern, encodeRecord, type IndexGrowth, keyOfEvent } from './gtrex-layout.js';

export interface GtrexOptions extends SequencerOptions {
  /** A device to share; otherwise one is opened with `gpu` (and closed by `close`). */
  ctx?: GpuContext;
  gpu?: Partial<GpuOptions>;
  workgroupSize?: number;
  /** Room for partial and complete matches at first (grown, and the batch run again, when short; default 1024). */
  capacity?: number;
  /** Smallest pool, in 4-byte words (default 2^18; the pool grows by rebuilds). */
  minPoolWords?: number;
  /**
   * Most sub-rings of a column indexed by an equality (a power of two; 1: no index, every column
   * scanned whole; default 256). A column gets them once it holds `bucketLoad` records a sub-ring
   * (default 64), a quarter of that after each growth.
   */
  indexBuckets?: number;
  bucketLoad?: number;
}

export interface GtrexStats extends SequencerStats {
  /** Batches searched on the GPU, searches (terminator × pattern) among them, runs again for room. */
  batches: number;
  searches: number;
  reruns: number;
  /** Pool words in use and allocated; rebuilds of the pool. */
  poolWords: number;
  poolUsed: number;
  rebuilds: number;
  /** Most scatter entries (runs of new records, descriptors, configs) one batch staged. */
  largestStage: number;
  /**
   * Wall time of the batches so far, by phase (ms): the releases taken into the host's columns,
   * what changed staged for the GPU, the GPU's passes and read-backs, the answers built and ordered.
   */
  phasesMs: { columns: number; stage: number; gpu: number; answers: number };
}

export interface PatState {
  readonly slot: number;
  readonly g: GpuPattern;
  readonly cols: HostColumn[];
  /** The config block's offset in the pool; -1 until written. */
  cfg: number;
  removed: boolean;
  /** The last batch that recorded events for it. */
  touched: number;
}


const PARAM_SLOT = 256; // bytes a level's uniform block takes (the offset alignment)
const LEVELS = 33;
const COUNT_DONE = 32;
const CHUNK = 256; // most words one scatter entry copies
const MIN_POOL = 1 << 18;

/** Grows a Uint32Array builder. */
class Words {
  a = new Uint32Array(1024);
  n = 0;
  reserve(k: number): number {
    if (this.n + k > this.a.length) {
      let len = this.a.length * 2;
      while (len < this.n + k) len *= 2;
      const b = new Uint32Array(len);
      b.set(this.a.subarray(0, this.n));
      this.a = b;
    }
    const at = this.n;
    this.n += k;
    return at;
  }
}

export type { BatchRelease };

export class GtrexSequencer implements BatchSequencer {
  readonly name = 'gtrex';
  private readonly maxRetained: number;
  private readonly patterns = new Map<number, PatState>();
  private readonly inner: CdpSequencer;
  private readonly innerSlots = new Set<number>();
  private readonly ret: Retention = { retained: 0, evicted: 0 };
  private readonly interner = new Interner();
  /** Patterns whose config, records or descriptors the pool lacks. */
  private dirty = new Set<PatState>();
  private seq = 0;
  private batchNo = 0;
  private lastTimeMs: number | null = null;
  private tail: Promise<unknown> = Promise.resolve();
  private counters = { batches: 0, searches: 0, reruns: 0, rebuilds: 0, largestStage: 0 };
  /** Builders kept between batches: the staged entries and their offsets, the batch's searches. */
  private readonly stageData = new Words();
  private readonly stageAt = new Words();
  private readonly batchWords = new Words();
  private readonly phases = { columns: 0, stage: 0, gpu: 0, answers: 0 };

  private poolWords = 0;
  private top = 0;
  private pool: GPUBuffer | null = null;
  private batchBuf: GPUBuffer | null = null;
  private parts: GPUBuffer | null = null;
  private done: GPUBuffer | null = null;
  private staging: GPUBuffer | null = null;
  /** The read-back's source: counts and the first complete matches; and how many the last batch had. */
  private result: GPUBuffer | null = null;
  private lastDone = 0;
  private readonly counts: GPUBuffer;
  private readonly params: GPUBuffer;
  private capP: number;
  private capC: number;
  private readonly minPool: number;
  private readonly growth: IndexGrowth;
  /** The rings' pool offsets, ascending (allocation order), and their columns: a match's records back to their events. */
  private regionAt: number[] = [];
  private regionCol: HostColumn[] = [];
  private groups: GPUBindGroup[] | null = null;

  private constructor(
    private readonly ctx: GpuContext,
    private readonly ownsCtx: boolean,
    private readonly wg: number,
    private readonly layout: GPUBindGroupLayout,
    private readonly pipes: Record<'scatter' | 'start' | 'extend' | 'aggregate' | 'addTest', GPUComputePipeline>,
    options: GtrexOptions,
  ) {
    const m = options.maxRetainedPerElement ?? DEFAULT_MAX_RETAINED;
    if (!Number.isInteger(m) || m < 1 || m > 0xffffffff) throw new RangeError(`maxRetainedPerElement must be a positive integer, got ${m}`);
    this.maxRetained = m;
    this.capP = this.capC = Math.max(1, options.capacity ?? 1024);
    this.minPool = Math.max(16, options.minPoolWords ?? MIN_POOL);
    const b = options.indexBuckets ?? 256;
    if (!(Number.isInteger(b) && b >= 1 && b <= 65536 && (b & (b - 1)) === 0)) throw new RangeError(`indexBuckets must be a power of two in [1, 65536], got ${b}`);
    const load = options.bucketLoad ?? 64;
    if (!(Number.isInteger(load) && load >= 1)) throw new RangeError(`bucketLoad must be a positive integer, got ${load}`);
    this.growth = { max: b, load };
    this.inner = new CdpSequencer({ maxRetainedPerElement: m });
    this.counts = ctx.createBuffer('ambit.gtrex.counts', 4 * 64, GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST);
    this.params = ctx.createBuffer('ambit.gtrex.params', PARAM_SLOT * LEVELS, GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST);
  }

  static async create(options: GtrexOptions = {}): Promise<GtrexSequencer> {
    const ctx = options.ctx ?? (await GpuContext.open(options.gpu));
    try {
      const wg = Math.min(options.workgroupSize ?? 64, ctx.limits.maxComputeWorkgroupSizeX, ctx.limits.maxComputeInvocationsPerWorkgroup);
      const module = await ctx.compileShader('gtrex');
      const storage = (binding: number, type: GPUBufferBindingType): GPUBindGroupLayoutEntry => ({ binding, visibility: GPUShaderStage.COMPUTE, buffer: { type } });
      const layout = ctx.device.createBindGroupLayout({
        label: 'ambit.gtrex',
        entries: [
          storage(0, 'storage'),
          storage(1, 'read-only-storage'),
          storage(2, 'storage'),
          storage(3, 'storage'),
          storage(4, 'storage'),
          storage(5, 'uniform'),
          storage(6, 'read-only-storage'),
        ],
      });
      const pipelineLayout = ctx.device.createPipelineLayout({ label: 'ambit.gtrex', bindGroupLayouts: [layout] });
      const pipes = {} as Record<'scatter' | 'start' | 'extend' | 'aggregate' | 'addTest', GPUComputePipeline>;
      for (const entryPoint of ['scatter', 'start', 'extend', 'aggregate', 'addTest'] as const) {
        pipes[entryPoint] = await ctx.withValidation(`pipeline gtrex.${entryPoint}`, () =>
          ctx.device.createComputePipeline({ label: `ambit.gtrex.${entryPoint}`, layout: pipelineLayout, compute: { module, entryPoint, constants: { WG: wg } } }),
        );
      }
      return new GtrexSequencer(ctx, options.ctx === undefined, wg, layout, pipes, options);
    } catch (err) {
      if (options.ctx === undefined) await ctx.close();
      throw err;
    }
  }

  get device(): GpuContext {
    return this.ctx;
  }

  addPattern(slot: number, pattern: NEventPattern): void {
    if (this.patterns.has(slot) || this.innerSlots.has(slot)) throw new Error(`slot ${slot} is in use`);
    if (pattern.consuming.length > 0) {
      this.inner.addPattern(slot, pattern);
      this.innerSlots.add(slot);
      return;
    }
    const g = compilePattern(pattern, this.growth.max > 1);
    const st: PatState = { slot, g, cols: g.reach.map((r, k) => new HostColumn(r, g.plans[k] === null ? 'plain' : 'indexed')), cfg: -1, removed: false, touched: 0 };
    this.patterns.set(slot, st);
    this.dirty.add(st);
  }

  removePattern(slot: number): void {
    if (this.innerSlots.delete(slot)) {
      this.inner.removePattern(slot);
      return;
    }
    const st = this.patterns.get(slot);
    if (st === undefined) return;
    // Its pool space is reclaimed by the next rebuild; a batch in flight drops its matches.
    st.removed = true;
    for (const c of st.cols) this.ret.retained -= c.n;
    this.patterns.delete(slot);
    this.dirty.delete(st);
  }

  stats(): GtrexStats {
    const s = this.inner.stats();
    return {
      retained: this.ret.retained + s.retained,
      evicted: this.ret.evicted + s.evicted,
      consumed: s.consumed,
      ...this.counters,
      poolWords: this.poolWords,
      poolUsed: this.top,
      phasesMs: { ...this.phases },
    };
  }

  /**
   * Releases a batch in order (E3: times not decreasing, after every earlier release's) and answers,
   * per release, the matches as `Sequencer.release` would have. Batches run one after another.
   */
  releaseBatch(batch: readonly BatchRelease[]): Promise<PatternMatch[][]> {
    const run = this.tail.then(() => this.run(batch));
    this.tail = run.catch(() => undefined);
    return run;
  }

  /** Waits for the batches in flight. */
  async idle(): Promise<void> {
    await this.tail;
  }

  async close(): Promise<void> {
    await this.tail;
    for (const b of [this.pool, this.batchBuf, this.parts, this.done, this.staging, this.result, this.counts, this.params]) b?.destroy();
    if (this.ownsCtx) await this.ctx.close();
  }

  private async run(batch: readonly BatchRelease[]): Promise<PatternMatch[][]> {
    const t0 = performance.now();
    const out: PatternMatch[][] = new Array(batch.length);
    const searches: Search[] = [];
    const touched: PatState[] = [];
    const mark = ++this.batchNo;
    const maxRet = this.maxRetained;
    for (let i = 0; i < batch.length; i++) {
      const { event, timeMs, hits } = batch[i];
      const seq = this.seq++;
      this.lastTimeMs = timeMs;
      let cpuHits: PatternHits[] | null = null;
      for (let h = 0; h < hits.length; h++) {
        const hit = hits[h];
        const st = this.patterns.get(hit.slot);
        if (st === undefined) {
          if (this.innerSlots.has(hit.slot)) (cpuHits ??= []).push(hit);
          continue;
        }
        const els = hit.elements;
        for (let j = 0; j < els.length; j++) {
          const k = els[j];
          if (k === 0) searches.push({ item: i, hit: h, st });
          else {
            const plan = st.g.plans[k];
            const key = plan === null ? -1 : keyOfEvent(event, st.g.attributes[plan.attr], this.interner);
            st.cols[k].append(seq, timeMs, event, key, maxRet, this.ret, this.growth);
          }
        }
        if (st.touched !== mark && (els.length > 1 || els[0] !== 0)) {
          st.touched = mark;
          touched.push(st);
        }
      }
      if (cpuHits === null) {
        this.inner.skip(timeMs);
        out[i] = [];
      } else out[i] = this.inner.release(event, timeMs, cpuHits);
    }
    for (const st of touched) this.dirty.add(st);
    this.phases.columns += performance.now() - t0;
    if (searches.length > 0) {
      this.counters.batches++;
      this.counters.searches += searches.length;
      const done = await this.search(batch, searches);
      const t1 = performance.now();
      if (done !== null) answer(batch, searches, done, out);
      this.phases.answers += performance.now() - t1;
    }
    const t2 = performance.now();
    for (const st of touched) for (const c of st.cols) c.settle();
    this.phases.columns += performance.now() - t2;
    return out;
  }

  /**
   * Stages every dirty pattern's config, new records and descriptors for the scatter pass: the
   * entries in `stageData`, their offsets (from the start of the staging buffer) in `stageAt`.
   */
  private stage(): void {
    const w = this.stageData;
    w.n = 0;
    const entries = this.stageAt;
    entries.n = 0;
    const put = (dst: number, src: Uint32Array, from: number, len: number): void => {
      for (let o = 0; o < len; o += CHUNK) {
        const n = Math.min(CHUNK, len - o);
        const at = w.reserve(n + 2);
        const e = entries.reserve(1); // before reading entries.a: reserving may grow it
        entries.a[e] = at;
        w.a[at] = dst + o;
        w.a[at + 1] = n;
        w.a.set(src.subarray(from + o, from + o + n), at + 2);
      }
    };
    let rec = new Uint32Array(1024);
    /** A ring's new records (runs that do not wrap) and its descriptor's words in the config block. */
    const ring = (g: GpuPattern, c: HostColumn, desc: Uint32Array, d: number): void => {
      const sub = c.links !== null;
      const stride = sub ? SUB_WORDS : g.stride;
      if (c.ring < 0 && c.gN > 0) {
        c.ring = this.alloc(c.cap * stride);
        c.uploaded = 0;
        if (!sub) {
          this.regionAt.push(c.ring);
          this.regionCol.push(c);
        }
      }
      while (c.uploaded < c.gN) {
        const p = c.pos(c.uploaded);
        const run = Math.min(c.gN - c.uploaded, c.cap - p);
        const len = run * stride;
        if (rec.length < len) rec = new Uint32Array(Math.max(len, rec.length * 2));
        if (sub) {
          for (let r = 0, o = 0; r < run; r++, o += SUB_WORDS) {
            const seq = c.seqs[p + r];
            const t = c.times[p + r];
            rec[o] = Math.floor(seq / 2 ** 32);
            rec[o + 1] = seq >>> 0;
            rec[o + 2] = Math.floor(t / 2 ** 32);
            rec[o + 3] = t >>> 0;
            rec[o + 4] = c.links![p + r];
          }
        } else {
          for (let r = 0; r < run; r++) encodeRecord(g, c.seqs[p + r], c.times[p + r], c.evs[p + r]!, this.interner, rec, r * stride);
        }
        put(c.ring + p * stride, rec, 0, len);
        c.uploaded += run;
      }
      desc[d] = c.ring < 0 ? 0 : c.ring;
      desc[d + 1] = c.cap;
      desc[d + 2] = c.pos(0);
      desc[d + 3] = c.gN;
    };
    for (const st of this.dirty) {
      const g = st.g;
      if (st.cfg < 0) st.cfg = this.alloc(g.config.length);
      for (let k = 1; k < st.cols.length; k++) {
        const c = st.cols[k];
        ring(g, c, g.config, g.descOffset + DESC_WORDS * k);
        if (c.buckets === 0) continue;
        // The sub-rings: their descriptors in a region of their own (made anew when they are).
        const fresh = c.subDescAt < 0;
        if (fresh) c.subDescAt = this.alloc(c.subDesc!.length);
        for (const b of c.takeStale()) {
          ring(g, c.subs![b]!, c.subDesc!, DESC_WORDS * b);
          if (!fresh) put(c.subDescAt + DESC_WORDS * b, c.subDesc!, DESC_WORDS * b, DESC_WORDS);
        }
        if (fresh) put(c.subDescAt, c.subDesc!, 0, c.subDesc!.length);
        const ix = g.indexOffset + INDEX_WORDS * k;
        g.config[ix] = c.buckets;
        g.config[ix + 4] = c.subDescAt;
      }
      put(st.cfg, g.config, 0, g.config.length);
    }
    this.dirty.clear();
    // Offsets first (the kernel's thread t reads entry t's offset), then the entries.
    const n = entries.n;
    for (let t = 0; t < n; t++) entries.a[t] += n;
    this.counters.largestStage = Math.max(this.counters.largestStage, n);
  }

  /** Pool words for a region, or a rebuild that makes room (every pattern written again). */
  private alloc(words: number): number {
    if (this.top + words <= this.poolWords) {
      const at = this.top;
      this.top += words;
      return at;
    }
    throw new NeedRebuild();
  }

  /** A new pool sized for everything live, twice over; every pattern is staged whole again. */
  private rebuild(): void {
    let need = 0;
    for (const st of this.patterns.values()) {
      need += st.g.config.length;
      for (let k = 1; k < st.cols.length; k++) {
        need += st.cols[k].cap * st.g.stride;
        const c = st.cols[k];
        if (c.buckets > 0) need += c.subDesc!.length;
        for (const sub of c.subs ?? []) if (sub !== undefined) need += sub.cap * SUB_WORDS;
      }
    }
    const maxWords = Math.floor(this.ctx.limits.maxStorageBufferBindingSize / 4);
    if (need > maxWords) {
      throw new GpuError('OUT_OF_MEMORY', `gtrex: the pattern columns need ${4 * need} bytes, expected at most the device's storage binding of ${4 * maxWords}`);
    }
    const words = Math.min(maxWords, Math.max(this.minPool, 2 * need));
    this.pool?.destroy();
    this.pool = this.ctx.createBuffer('ambit.gtrex.pool', 4 * words, GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST);
    this.poolWords = words;
    this.top = 0;
    this.groups = null;
    this.interner.reset(); // every record is encoded again
    this.regionAt = [];
    this.regionCol = [];
    for (const st of this.patterns.values()) {
      st.cfg = -1;
      for (const c of st.cols) {
        c.ring = -1;
        c.uploaded = 0;
        if (c.buckets === 0) continue;
        c.subDescAt = -1;
        c.subDesc!.fill(0); // sub-rings not written again (none yet) read as empty
        c.subs!.forEach((sub, b) => {
          if (sub === undefined) return;
          sub.ring = -1;
          sub.uploaded = 0;
          c.markStale(sub, b);
        });
      }
      this.dirty.add(st);
    }
    this.counters.rebuilds++;
  }

  private buffer(cur: GPUBuffer | null, label: string, bytes: number, usage: number): GPUBuffer {
    if (cur !== null && cur.size >= bytes) return cur;
    cur?.destroy();
    this.groups = null;
    let size = 1024;
    while (size < bytes) size *= 2;
    return this.ctx.createBuffer(label, size, usage);
  }

  private async search(batch: readonly BatchRelease[], searches: readonly Search[]): Promise<Done | null> {
    const t0 = performance.now();
    // Room first: a pool too small, or an intern table far larger than what is held, is rebuilt.
    if (this.pool === null || this.interner.size > 4 * (this.ret.retained + searches.length) + 65536) this.rebuild();
    for (;;) {
      try {
        this.stage();
        break;
      } catch (err) {
        if (!(err instanceof NeedRebuild)) throw err;
        this.rebuild();
      }
    }
    let S = 1;
    let G = 0;
    for (const s of searches) {
      S = Math.max(S, s.st.g.pattern.steps.length);
      G = Math.max(G, s.st.g.pattern.aggregates.length);
    }
    const ps = S + 2;
    const cs = S + 2 + 7 * G;
    // The batch: (config, terminator record) per search, then the records.
    const bw = this.batchWords;
    bw.n = 0;
    bw.reserve(2 * searches.length);
    for (let t = 0; t < searches.length; t++) {
      const s = searches[t];
      const at = bw.reserve(s.st.g.stride);
      bw.a[2 * t] = s.st.cfg;
      bw.a[2 * t + 1] = at;
      encodeRecord(s.st.g, this.seq - batch.length + s.item, batch[s.item].timeMs, batch[s.item].event, this.interner, bw.a, at);
    }
    const ST = GPUBufferUsage.STORAGE;
    this.batchBuf = this.buffer(this.batchBuf, 'ambit.gtrex.batch', 4 * bw.n, ST | GPUBufferUsage.COPY_DST);
    const sa = this.stageAt;
    const sd = this.stageData;
    this.staging = this.buffer(this.staging, 'ambit.gtrex.staging', 4 * Math.max(1, sa.n + sd.n), ST | GPUBufferUsage.COPY_DST);
    this.ctx.writeBuffer(this.batchBuf, 0, bw.a.subarray(0, bw.n));
    if (sa.n > 0) {
      this.ctx.writeBuffer(this.staging, 0, sa.a.subarray(0, sa.n));
      this.ctx.writeBuffer(this.staging, 4 * sa.n, sd.a.subarray(0, sd.n));
    }
    let scatter = sa.n;
    const t1 = performance.now();
    this.phases.stage += t1 - t0;
    for (let attempt = 0; ; attempt++) {
      this.capP = Math.max(this.capP, searches.length);
      this.parts = this.buffer(this.parts, 'ambit.gtrex.parts', 4 * 2 * this.capP * ps, ST);
      this.done = this.buffer(this.done, 'ambit.gtrex.done', 4 * this.capC * cs, ST | GPUBufferUsage.COPY_SRC);
      const groups = this.bindGroups();
      const prm = new Uint32Array((PARAM_SLOT / 4) * S);
      for (let l = 0; l < S; l++) prm.set([l, S, ps, cs, G, this.capP, this.capC, this.maxRetained, searches.length, scatter], (PARAM_SLOT / 4) * l);
      this.ctx.writeBuffer(this.params, 0, prm);
      const enc = this.ctx.device.createCommandEncoder({ label: 'ambit.gtrex.batch' });
      enc.clearBuffer(this.counts);
      const pass = enc.beginComputePass({ label: 'ambit.gtrex' });
      const dispatch = (pipe: GPUComputePipeline, group: GPUBindGroup, threads: number): void => {
        if (threads === 0) return;
        pass.setPipeline(pipe);
        pass.setBindGroup(0, group);
        const [x, y] = this.ctx.grid(Math.ceil(threads / this.wg));
        pass.dispatchWorkgroups(x, y);
      };
      dispatch(this.pipes.scatter, groups[0], scatter);
      dispatch(this.pipes.start, groups[0], searches.length);
      for (let l = 1; l < S; l++) dispatch(this.pipes.extend, groups[l], this.capP);
      if (G > 0) dispatch(this.pipes.aggregate, groups[0], this.capC);
      pass.end();
      // One read-back: the counts, then as many complete matches as the last batch had, twice over
      // (a second read only when there are more).
      const K = Math.min(this.capC, Math.max(64, 2 * this.lastDone));
      const bytes = 4 * (LEVELS + K * cs);
      this.result = this.buffer(this.result, 'ambit.gtrex.result', bytes, GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST);
      enc.copyBufferToBuffer(this.counts, 0, this.result, 0, 4 * LEVELS);
      enc.copyBufferToBuffer(this.done, 0, this.result, 4 * LEVELS, 4 * K * cs);
      const back = await this.ctx.submitAndRead(enc, this.result, 0, bytes);
      const counts = new Uint32Array(back, 0, LEVELS);
      scatter = 0; // written: a run again only searches
      let needP = 0;
      for (let l = 1; l < S; l++) needP = Math.max(needP, counts[l]);
      const needC = counts[COUNT_DONE];
      if (needP <= this.capP && needC <= this.capC) {
        this.lastDone = needC;
        let raw: Uint32Array | null = null;
        if (needC > K) raw = new Uint32Array(await this.ctx.readBuffer(this.done, 0, 4 * needC * cs));
        else if (needC > 0) raw = new Uint32Array(back, 4 * LEVELS, needC * cs);
        this.phases.gpu += performance.now() - t1;
        return raw === null ? null : { raw, n: needC, S, cs, owner: (off) => this.owner(off) };
      }
      this.counters.reruns++;
      while (this.capP < needP) this.capP *= 2;
      while (this.capC < needC) this.capC *= 2;
      if (attempt > 40) throw new GpuError('OUT_OF_MEMORY', `gtrex: expected room for ${needP} partial and ${needC} complete matches, got none after ${attempt} tries`);
    }
  }

  private bindGroups(): GPUBindGroup[] {
    if (this.groups !== null) return this.groups;
    const gs: GPUBindGroup[] = [];
    for (let l = 0; l < LEVELS; l++) {
      gs.push(
        this.ctx.device.createBindGroup({
          label: `ambit.gtrex.level${l}`,
          layout: this.layout,
          entries: [
            { binding: 0, resource: { buffer: this.pool! } },
            { binding: 1, resource: { buffer: this.batchBuf! } },
            { binding: 2, resource: { buffer: this.parts! } },
            { binding: 3, resource: { buffer: this.done! } },
            { binding: 4, resource: { buffer: this.counts } },
            { binding: 5, resource: { buffer: this.params, offset: PARAM_SLOT * l, size: 48 } },
            { binding: 6, resource: { buffer: this.staging! } },
          ],
        }),
      );
    }
    this.groups = gs;
    return gs;
  }

  /** The column whose ring holds pool offset `off`. */
  private owner(off: number): HostColumn {
    const at = this.regionAt;
    let lo = 0;
    let hi = at.length - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >>> 1;
      if (at[mid] <= off) lo = mid;
      else hi = mid - 1;
    }
    return this.regionCol[lo];
  }

  snapshot(): SequencerSnapshot {
    const inner = this.inner.snapshot();
    const innerBySlot = new Map(inner.patterns.map((p) => [p.slot, p]));
    // In slot order, each event numbered where it first appears (as the CDP's own snapshot).
    const events = new SnapshotEvents();
    const slots = [...innerBySlot.keys(), ...this.patterns.keys()].sort((a, b) => a - b);
    const patterns = slots.map((slot) => {
      const ip = innerBySlot.get(slot);
      if (ip !== undefined) return { slot, elements: ip.elements.map((list) => list.map((r) => ({ seq: r.seq, timeMs: r.timeMs, event: events.index(inner.events[r.event]) }))) };
      const st = this.patterns.get(slot)!;
      return { slot, elements: st.cols.map((c, k) => (k === 0 ? [] : [...c.held()].map((r) => ({ seq: r.seq, timeMs: r.timeMs, event: events.index(r.ev) })))) };
    });
    return { version: 1, releases: this.seq, lastTimeMs: this.lastTimeMs, evicted: this.ret.evicted + inner.evicted, consumed: inner.consumed, events: events.list, patterns };
  }

  restore(snap: SequencerSnapshot, patterns: ReadonlyMap<number, NEventPattern>): void {
    if (this.seq !== 0 || this.patterns.size !== 0 || this.innerSlots.size !== 0) throw new Error('restore: the sequencer is not fresh');
    checkSnapshot(snap, patterns, (p) => patternElements(p).length);
    const innerPatterns = new Map<number, NEventPattern>();
    const innerSnap: SequencerSnapshot['patterns'][number][] = [];
    for (const p of snap.patterns) {
      const pat = patterns.get(p.slot)!;
      if (pat.consuming.length > 0) {
        innerPatterns.set(p.slot, pat);
        innerSnap.push(p);
        this.innerSlots.add(p.slot);
        continue;
      }
      this.addPattern(p.slot, pat);
      const st = this.patterns.get(p.slot)!;
      p.elements.forEach((list, k) => {
        if (k === 0) return;
        // As recorded: retention applies again as each record comes (it held them, so it keeps them).
        const plan = st.g.plans[k];
        for (const r of list) {
          const ev = snap.events[r.event];
          const key = plan === null ? -1 : keyOfEvent(ev, st.g.attributes[plan.attr], this.interner);
          st.cols[k].append(r.seq, r.timeMs, ev, key, Number.MAX_SAFE_INTEGER, this.ret, this.growth);
        }
        st.cols[k].settle();
      });
    }
    // The CDP's part: its own counters zero but the release count (the evictions are this one's).
    this.inner.restore({ ...snap, evicted: 0, consumed: snap.consumed, patterns: innerSnap }, innerPatterns);
    this.seq = snap.releases;
    this.lastTimeMs = snap.lastTimeMs;
    this.ret.evicted = snap.evicted;
  }

  /** Runs f64add on the GPU over pairs of doubles (a test of the kernels' float64 sums). */
  async addOnGpu(pairs: Float64Array): Promise<Float64Array> {
    const n = pairs.length >> 1;
    const words = new Uint32Array(4 * n);
    for (let t = 0; t < 2 * n; t++) {
      const f = new Float64Array([pairs[t]]);
      const u = new Uint32Array(f.buffer);
      words[2 * t] = u[1];
      words[2 * t + 1] = u[0];
    }
    if (this.pool === null) this.rebuild();
    this.staging = this.buffer(this.staging, 'ambit.gtrex.staging', 4 * words.length, GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST);
    this.batchBuf = this.buffer(this.batchBuf, 'ambit.gtrex.batch', 16, GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST);
    this.parts = this.buffer(this.parts, 'ambit.gtrex.parts', 16, GPUBufferUsage.STORAGE);
    this.done = this.buffer(this.done, 'ambit.gtrex.done', 8 * n, GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC);
    this.ctx.writeBuffer(this.staging, 0, words);
    const prm = new Uint32Array(PARAM_SLOT / 4);
    prm[9] = n;
    this.ctx.writeBuffer(this.params, 0, prm);
    const enc = this.ctx.device.createCommandEncoder();
    const pass = enc.beginComputePass();
    pass.setPipeline(this.pipes.addTest);
    pass.setBindGroup(0, this.bindGroups()[0]);
    const [x, y] = this.ctx.grid(Math.ceil(n / this.wg));
    pass.dispatchWorkgroups(x, y);
    pass.end();
    const raw = new Uint32Array(await this.ctx.submitAndRead(enc, this.done, 0, 8 * n));
    const res = new Float64Array(n);
    for (let t = 0; t < n; t++) res[t] = bitsDouble(raw[2 * t], raw[2 * t + 1]);
    return res;
  }
}

/** The pool ran out: rebuild and stage again. */
class NeedRebuild extends Error {}
