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
 * runs out; it spans up to POOL_PAGES storage bindings (gtrex-passes.ts; paging columns between
 * host and GPU is not done).
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
import { GtrexPasses } from './gtrex-passes.js';
import { type Done, type Search, answer } from './gtrex-results.js';
import { DESC_WORDS, type GpuPattern, HostColumn, INDEX_WORDS, SUB_WORDS, Interner, type Retention, compilePattern, encodeRecord, type IndexGrowth, keyOfEvent } from './gtrex-layout.js';

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
  /** The largest storage binding to use, in bytes (default and at most the device's). */
  bindingBytes?: number;
  /**
   * Bytes of a pool page (rounded down to a power of two; default `bindingBytes`, at most what
   * the device's binding holds): the pool spans up to POOL_PAGES of them (fewer where the device
   * binds fewer storage buffers). Other than the default only to exercise pages.
   */
  pageBytes?: number;
  /** Most pages the pool spans (default and at most POOL_PAGES, or what the device's bindings allow). */
  maxPoolPages?: number;
}

export interface GtrexStats extends SequencerStats {
  /** Batches searched on the GPU, searches (terminator × pattern) among them, runs again for room. */
  batches: number;
  searches: number;
  reruns: number;
  /** Pool words in use and allocated, the storage bindings (pages) they span; rebuilds of the pool. */
  poolWords: number;
  poolUsed: number;
  poolPages: number;
  rebuilds: number;
  /** Scatter passes run ahead of a batch's own: its staged entries (a rebuild's) outgrew one binding. */
  scatterPasses: number;
  /** Most scatter entries (runs of new records, descriptors, configs) one batch staged. */
  largestStage: number;
  /** Batches whose searches went in several chunks (their matches would not fit one binding). */
  splits: number;
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
  /** Consuming patterns removed so far (a batch in flight drops their matches). */
  private innerRemoved = 0;
  private lastTimeMs: number | null = null;
  private tail: Promise<unknown> = Promise.resolve();
  private counters = { batches: 0, searches: 0, reruns: 0, rebuilds: 0, largestStage: 0, splits: 0 };
  /** Builders kept between batches: the staged entries and their offsets, the batch's searches. */
  private readonly stageData = new Words();
  private readonly stageAt = new Words();
  private readonly batchWords = new Words();
  private readonly phases = { columns: 0, stage: 0, gpu: 0, answers: 0 };

  private poolWords = 0;
  private top = 0;
  private readonly minPool: number;
  private readonly growth: IndexGrowth;
  /** The rings' pool offsets, ascending (allocation order), and their columns: a match's records back to their events. */
  private regionAt: number[] = [];
  private regionCol: HostColumn[] = [];

  private constructor(
    private readonly ctx: GpuContext,
    private readonly ownsCtx: boolean,
    private readonly gpu: GtrexPasses,
    options: GtrexOptions,
  ) {
    const m = options.maxRetainedPerElement ?? DEFAULT_MAX_RETAINED;
    if (!Number.isInteger(m) || m < 1 || m > 0xffffffff) throw new RangeError(`maxRetainedPerElement must be a positive integer, got ${m}`);
    this.maxRetained = m;
    this.minPool = Math.max(16, options.minPoolWords ?? MIN_POOL);
    const b = options.indexBuckets ?? 256;
    if (!(Number.isInteger(b) && b >= 1 && b <= 65536 && (b & (b - 1)) === 0)) throw new RangeError(`indexBuckets must be a power of two in [1, 65536], got ${b}`);
    const load = options.bucketLoad ?? 64;
    if (!(Number.isInteger(load) && load >= 1)) throw new RangeError(`bucketLoad must be a positive integer, got ${load}`);
    this.growth = { max: b, load };
    this.inner = new CdpSequencer({ maxRetainedPerElement: m });
  }

  static async create(options: GtrexOptions = {}): Promise<GtrexSequencer> {
    const ctx = options.ctx ?? (await GpuContext.open(options.gpu));
    try {
      const gpu = await GtrexPasses.compile(ctx, options.workgroupSize ?? 64, options.bindingBytes, Math.max(1, options.capacity ?? 1024), options.pageBytes, options.maxPoolPages);
      return new GtrexSequencer(ctx, options.ctx === undefined, gpu, options);
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
      this.innerRemoved++;
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
      reruns: this.gpu.reruns,
      poolWords: this.poolWords,
      poolUsed: this.top,
      poolPages: this.gpu.pool?.length ?? 0,
      scatterPasses: this.gpu.scatterPasses,
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
    this.gpu.destroy();
    if (this.ownsCtx) await this.ctx.close();
  }

  private async run(batch: readonly BatchRelease[]): Promise<PatternMatch[][]> {
    const t0 = performance.now();
    const out: PatternMatch[][] = new Array(batch.length);
    const searches: Search[] = [];
    const touched: PatState[] = [];
    const mark = ++this.batchNo;
    const innerRemovedAtStart = this.innerRemoved;
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
            const key = plan === null ? -1 : keyOfEvent(event, st.g.attributes[plan.attr]);
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
    try {
      if (searches.length > 0) {
        this.counters.batches++;
        this.counters.searches += searches.length;
        const done = await this.search(batch, searches);
        const t1 = performance.now();
        for (const d of done) answer(batch, searches, d, out);
        this.phases.answers += performance.now() - t1;
      }
    } finally {
      // The columns move on whether or not the search could run (a failed batch's matches are lost, not its records).
      const t2 = performance.now();
      for (const st of touched) {
        let moved = false;
        for (const c of st.cols) if (c.settle()) moved = true;
        if (moved && !st.removed) this.dirty.add(st);
      }
      this.phases.columns += performance.now() - t2;
    }
    // A consuming pattern removed while the batch was in flight gets nothing from it (as a GPU one).
    if (this.innerRemoved > innerRemovedAtStart) for (let i = 0; i < out.length; i++) if (out[i].length > 0) out[i] = out[i].filter((m) => this.patterns.has(m.slot) || this.innerSlots.has(m.slot));
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
    // The pool spans up to POOL_PAGES storage bindings (gtrex-passes.ts), and a re-upload larger
    // than one is staged and scattered a binding at a time.
    const maxWords = this.gpu.maxPoolWords;
    if (need > maxWords) {
      throw new GpuError('OUT_OF_MEMORY', `gtrex: the pattern columns need ${4 * need} bytes, expected at most the ${4 * maxWords} of ${this.gpu.maxPages} storage binding${this.gpu.maxPages === 1 ? '' : 's'}`);
    }
    const words = Math.min(maxWords, Math.max(this.minPool, 2 * need));
    this.gpu.newPool(words);
    this.poolWords = words;
    this.top = 0;
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

  private async search(batch: readonly BatchRelease[], searches: readonly Search[]): Promise<Done[]> {
    const t0 = performance.now();
    // Room first: a pool too small, or an intern table far larger than what is held, is rebuilt.
    if (this.gpu.pool === null || this.interner.size > 4 * (this.ret.retained + searches.length) + 65536) this.rebuild();
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
    const sa = this.stageAt;
    const sd = this.stageData;
    await this.gpu.ready(); // a pool rebuilt into several pages needs their pipelines
    let scatter = this.gpu.upload(bw.a.subarray(0, bw.n), sa.a.subarray(0, sa.n), sd.a.subarray(0, sd.n));
    const t1 = performance.now();
    this.phases.stage += t1 - t0;
    // Searches in chunks whose partial and complete lists fit one storage binding each (all of
    // them at once unless that is too many): a chunk's matches are answered as the chunk's.
    const limit = this.gpu.bindingBytes;
    const maxP = Math.floor(limit / (8 * ps));
    const maxC = Math.floor(limit / (4 * cs));
    const out: Done[] = [];
    let first = 0;
    let size = searches.length;
    while (first < searches.length) {
      const count = Math.min(size, searches.length - first);
      const got = await this.gpu.dispatch(first, count, S, G, ps, cs, scatter, maxP, maxC, this.maxRetained, (off) => this.owner(off));
      scatter = 0; // written: later runs only search
      if (got === 'split') {
        if (count === 1) throw new GpuError('OUT_OF_MEMORY', `gtrex: one terminator's search needs more partial or complete matches than a storage binding of ${limit} bytes holds`);
        if (size === searches.length) this.counters.splits++;
        size = Math.ceil(count / 2);
        continue;
      }
      if (got !== null) out.push(got);
      first += count;
    }
    this.phases.gpu += performance.now() - t1;
    return out;
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
          const key = plan === null ? -1 : keyOfEvent(ev, st.g.attributes[plan.attr]);
          st.cols[k].append(r.seq, r.timeMs, ev, key, this.maxRetained, this.ret, this.growth);
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
  addOnGpu(pairs: Float64Array): Promise<Float64Array> {
    return this.gpu.addTest(pairs);
  }
}

/** The pool ran out: rebuild and stage again. */
class NeedRebuild extends Error {}
