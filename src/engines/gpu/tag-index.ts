/**
 * TagMatch on WebGPU (TagMatch §3): subset matching of batches of queries against a database of
 * tag sets, exact. The host side of tagmatch.wgsl:
 *
 * - **Signatures.** (tag-build.ts, like the partitioning; on worker threads for large databases.)
 *   Each distinct set of the CPU index (tag-index.ts, whose tagset and key tables
 *   this index reads) becomes a 192-bit Bloom signature, 7 bits a tag (TagMatch's parameters), so
 *   s ⊆ q implies sig(s) ⊆ sig(q) bitwise.
 * - **Balanced partitioning** (Algorithm 1). Sets are split recursively on the bit that halves
 *   them best (chosen on a sample of up to 1024 sets of the part), until parts hold at most
 *   `maxPartition` sets; splitting goes on inside a partition down to `leafSize` sets so that
 *   neighbouring sets share bits. Signatures move with the split (no indirection). A
 *   partition's mask is the AND of its sets' signatures; each block of WG sets has one too.
 * - **Pre-process** (Algorithm 2) on the GPU: one workgroup a partition lists the batch's
 *   queries whose signatures hold its mask, and the partitions that got any become the work of
 *   the subset pass (an indirect dispatch). The host only computes the queries' signatures; a
 *   walk of partition tables per query on the host grew with the partitions and was the limit.
 * - **Subset match** on the GPU (tagmatch.wgsl), then **exact verification and key lookup** on
 *   the host: a Bloom hit counts only when the set's tags are all among the query's, so the
 *   answers equal the CPU index's (no false positives). `unique` gives match-unique.
 * GPU memory: 24 bytes a distinct set plus 24 bytes per block of WG sets (`gpuBytes`); and per
 * batch in flight its input, hits and query lists, 4·(2P + P·batch) bytes for P partitions.
 */
import { availableParallelism } from 'node:os';
import type { TagMatches, TagSetIndex, TagSetsView } from '../tag-index.js';
import { type GpuContext, GpuError } from './device.js';
import { WORDS, hostBuild, shared, signatureInto } from './tag-build.js';
import { TagWorkerPool } from './tag-pool.js';
import { type VerifyTables, verifyHits } from './tag-verify.js';

export interface GpuTagIndexOptions {
  /** Most sets in a partition (TagMatch found about 200k best). */
  maxPartition: number;
  /** Splitting goes on inside partitions down to parts of this many sets (>= maxPartition: none). */
  leafSize: number;
  /** Threads that compute signatures and split parts at build (1: the calling thread alone). */
  buildThreads: number;
  /**
   * Worker threads that verify batches' hits (0: the calling thread does). Verification is the
   * host's largest part of a batch (2-10 µs a query on a Xeon core, growing with the keys given).
   */
  verifyThreads: number;
  /** Threads (and sets) per workgroup. */
  workgroupSize: number;
  /** Queries per GPU batch. */
  batch: number;
  /** Batches in flight at once. */
  inFlight: number;
  /** Room for Bloom hits a batch has at first (it grows when a batch needs more). */
  hitCapacity: number;
  /**
   * Most room for hits a batch may get; a batch with more is answered by the CPU index (default
   * and at most: what one storage binding holds, 16.7M hits at 128 MiB, 268M at 2 GiB).
   */
  hitLimit: number;
}

export const DEFAULT_GPU_TAG_INDEX: Readonly<GpuTagIndexOptions> = Object.freeze({
  maxPartition: 200_000,
  leafSize: 1024,
  buildThreads: Math.max(1, Math.min(16, availableParallelism())),
  verifyThreads: Math.max(0, Math.min(8, availableParallelism() - 2)),
  workgroupSize: 256,
  batch: 1024,
  inFlight: 3,
  hitCapacity: 65_536,
  hitLimit: 2 ** 31,
});

/** Bindings of tagmatch.wgsl past the six signature columns. */
const B_META = 6;
const B_INP = 7;
const B_VIS = 8;
const B_ARGS = 9;
const B_OUT = 10;
/** Words of a batch's input before its query signatures; of the output before its hits. */
const IN_HEAD = 8;
const OUT_HEAD = 2;

export { addTagBits, signatureInto } from './tag-build.js';

export interface GpuTagIndexStats {
  sets: number;
  partitions: number;
  /** Largest partition, sets. */
  largestPartition: number;
  blocks: number;
  /** The index's own buffers (signatures, partition table, block masks); not the batches' buffers. */
  gpuBytes: number;
  /** Host time to build: signatures, partitioning, masks, upload (ms). */
  buildMs: { signatures: number; partitioning: number; masks: number; upload: number };
  /** Batches run, and those run again for lack of room for their hits. */
  batches: number;
  reruns: number;
  /**
   * Batches answered by the CPU index instead: their hits would need a buffer
   * larger than the device lets one binding see (maxStorageBufferBindingSize).
   */
  cpuBatches: number;
  /** Bloom hits, and those the exact check refused (false positives). */
  hits: number;
  falseHits: number;
  /** (query, partition) pairs the pre-process made. */
  visits: number;
  /** Batches verified on the calling thread because no verification worker was left. */
  verifyFallbacks: number;
  /**
   * Host time in batches (ms): signatures and the batch's input (`prepare`); exact verification
   * and key lookup (`verify`: on the calling thread, or with verifyThreads from sending a batch
   * to a worker to its answer, waits for a free worker included; also the CPU index's answer of
   * a batch it takes over); waiting for the GPU's answer to
   * come back (`wait`, which includes batches ahead in the queue).
   */
  batchMs: { prepare: number; verify: number; wait: number };
}

interface Slot {
  inp: GPUBuffer;
  inpWords: number;
  /** Per partition: its query count, the work list, its query list (tagmatch.wgsl). */
  vis: GPUBuffer;
  visWords: number;
  /** The subset dispatch's indirect arguments. */
  args: GPUBuffer;
  out: GPUBuffer;
  cap: number;
  /** Hits to read back at first (twice the last batch's, at least 4096). */
  readHint: number;
  busy: boolean;
}

export class GpuTagIndex {
  private readonly slots: Slot[] = [];
  private readonly waiting: (() => void)[] = [];
  /** Batches that may be between their start and their answer (inFlight plus two per verification worker). */
  private tickets: number;
  private readonly ticketWaiting: (() => void)[] = [];
  private readonly statsNow: GpuTagIndexStats;

  private constructor(
    private readonly ctx: GpuContext,
    readonly index: TagSetIndex,
    private readonly o: GpuTagIndexOptions,
    private readonly visitPipeline: GPUComputePipeline,
    private readonly subsetPipeline: GPUComputePipeline,
    private readonly visitLayout: GPUBindGroupLayout,
    private readonly subsetLayout: GPUBindGroupLayout,
    private readonly sigBuffers: GPUBuffer[],
    private readonly metaBuffer: GPUBuffer,
    /** The layout: the distinct set at each signature position (partition order). */
    readonly order: Uint32Array,
    private readonly partitions: number,
    /** Where the block masks start in the meta buffer (words). */
    private readonly blockOff: number,
    /** Blocks of the largest partition: the x size of the subset dispatch. */
    private readonly maxBlocks: number,
    stats: GpuTagIndexStats,
    /** What verification reads: the CPU index's tables and the order above. */
    private readonly tables: VerifyTables,
    /** Verification's worker threads (null: the calling thread verifies). */
    private readonly pool: TagWorkerPool | null,
  ) {
    this.statsNow = stats;
    this.tickets = o.inFlight + 2 * (pool?.size ?? 0);
  }

  static async build(ctx: GpuContext, index: TagSetIndex, options: Partial<GpuTagIndexOptions> = {}, progress?: (phase: string, done: number) => void): Promise<GpuTagIndex> {
    const o: GpuTagIndexOptions = { ...DEFAULT_GPU_TAG_INDEX, ...options };
    for (const k of Object.keys(DEFAULT_GPU_TAG_INDEX) as (keyof GpuTagIndexOptions)[]) {
      if (!Number.isSafeInteger(o[k]) || o[k] < (k === 'verifyThreads' ? 0 : 1)) throw new GpuError('INVALID_ARGUMENT', `tag index: ${k} must be an integer >= ${k === 'verifyThreads' ? 0 : 1}, got ${o[k]}`);
    }
    const wg = Math.min(o.workgroupSize, ctx.limits.maxComputeWorkgroupSizeX, ctx.limits.maxComputeInvocationsPerWorkgroup);
    const maxX = ctx.limits.maxComputeWorkgroupsPerDimension;
    const sets = index.sets;
    const m = sets.offsets.length - 1;
    // Every buffer is bound whole: none may pass what one binding can see.
    const maxWords = Math.floor(ctx.limits.maxStorageBufferBindingSize / 4);
    if (m > maxWords) throw new GpuError('OUT_OF_MEMORY', `tag index: ${m} distinct sets need signature columns of ${4 * m} bytes, more than one binding may hold (${ctx.limits.maxStorageBufferBindingSize}): at most ${maxWords} sets`);
    if (OUT_HEAD + 2 * o.hitCapacity > maxWords) throw new GpuError('INVALID_ARGUMENT', `tag index: hitCapacity must be at most ${Math.floor((maxWords - OUT_HEAD) / 2)} on this device, got ${o.hitCapacity}`);
    const ms = { signatures: 0, partitioning: 0, masks: 0, upload: 0 };

    // Signatures and balanced partitioning (Algorithm 1), splitting on into leaves; on worker
    // threads when the database is large.
    const built = await hostBuild(sets.offsets, sets.tags, m, { maxPartition: o.maxPartition, leafSize: o.leafSize }, o.buildThreads, progress);
    const { sig, order, parts } = built;
    ms.signatures = built.ms.signatures;
    ms.partitioning = built.ms.partitioning;

    // Masks: per partition and per block of wg sets (the AND of their signatures), in one table:
    // 10 words a partition (first set, sets, first block, 0, mask), then the block masks.
    let t0 = performance.now();
    const P = parts.length;
    if (P > maxX) throw new GpuError('INVALID_ARGUMENT', `tag index: ${P} partitions need more workgroups than ${maxX}: raise maxPartition`);
    let blocks = 0;
    let largest = 0;
    for (const [, size] of parts) {
      const nb = Math.ceil(size / wg);
      if (nb > maxX) throw new GpuError('INVALID_ARGUMENT', `tag index: a partition of ${size} sets needs ${nb} workgroups, more than ${maxX}: lower maxPartition`);
      blocks += nb;
      if (size > largest) largest = size;
    }
    const blockOff = 10 * P;
    const metaWords = blockOff + WORDS * blocks;
    if (metaWords > maxWords) throw new GpuError('OUT_OF_MEMORY', `tag index: ${blocks} block masks pass one binding (${ctx.limits.maxStorageBufferBindingSize} bytes): raise workgroupSize`);
    const meta = new Uint32Array(Math.max(1, metaWords));
    const bm = new Uint32Array(WORDS);
    for (let p = 0, blk = 0; p < P; p++) {
      const [start, size] = parts[p];
      const end = start + size;
      const pa = 10 * p;
      meta[pa] = start;
      meta[pa + 1] = size;
      meta[pa + 2] = blk;
      meta.fill(~0 >>> 0, pa + 4, pa + 10);
      for (let b = start; b < end; b += wg, blk++) {
        bm.fill(~0 >>> 0);
        for (let s = b; s < Math.min(end, b + wg); s++) for (let w = 0; w < WORDS; w++) bm[w] &= sig[WORDS * s + w];
        for (let w = 0; w < WORDS; w++) {
          meta[blockOff + WORDS * blk + w] = bm[w];
          meta[pa + 4 + w] &= bm[w];
        }
      }
    }
    ms.masks = performance.now() - t0;

    // Pipelines first: a shader that fails leaves no buffers behind.
    const module = await ctx.compileShader('tagmatch');
    // Two layouts: `visit` writes the indirect arguments that `subset` is dispatched by, so the
    // subset dispatch must not have them bound.
    const layoutOf = (label: string, bindings: number[]): GPUBindGroupLayout =>
      ctx.device.createBindGroupLayout({
        label,
        entries: bindings.map((binding) => ({ binding, visibility: GPUShaderStage.COMPUTE, buffer: { type: (binding >= B_VIS ? 'storage' : 'read-only-storage') as GPUBufferBindingType } })),
      });
    const visitLayout = layoutOf('ambit.tags.visit', [B_META, B_INP, B_VIS, B_ARGS, B_OUT]);
    const subsetLayout = layoutOf('ambit.tags.subset', [0, 1, 2, 3, 4, 5, B_META, B_INP, B_VIS, B_OUT]);
    const pipeline = (entryPoint: string, bgl: GPUBindGroupLayout): Promise<GPUComputePipeline> =>
      ctx.withValidation(`pipeline tagmatch.${entryPoint}`, () =>
        ctx.device.createComputePipeline({ label: `ambit.tags.${entryPoint}`, layout: ctx.device.createPipelineLayout({ bindGroupLayouts: [bgl] }), compute: { module, entryPoint, constants: { WG: wg } } }),
      );
    const visitPipeline = await pipeline('visit', visitLayout);
    const subsetPipeline = await pipeline('subset', subsetLayout);

    // Upload: the signature words as six arrays (structure of arrays: a thread's read of one word
    // and its neighbours' are adjacent).
    t0 = performance.now();
    const storage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST;
    const sigBuffers: GPUBuffer[] = [];
    const CHUNK = 1 << 24;
    const col = new Uint32Array(Math.min(Math.max(1, m), CHUNK));
    for (let w = 0; w < WORDS; w++) {
      const buf = ctx.createBuffer(`ambit.tags.sig${w}`, 4 * Math.max(1, m), storage);
      for (let base = 0; base < m; base += CHUNK) {
        const n = Math.min(CHUNK, m - base);
        for (let s = 0; s < n; s++) col[s] = sig[WORDS * (base + s) + w];
        ctx.writeBuffer(buf, 4 * base, col.subarray(0, n));
      }
      sigBuffers.push(buf);
    }
    const metaBuffer = ctx.createBuffer('ambit.tags.meta', meta.byteLength, storage);
    ctx.writeBuffer(metaBuffer, 0, meta);
    await ctx.queue.onSubmittedWorkDone();
    ms.upload = performance.now() - t0;
    const gpuBytes = 4 * WORDS * m + meta.byteLength;
    const stats: GpuTagIndexStats = { sets: m, partitions: P, largestPartition: largest, blocks, gpuBytes, buildMs: ms, batches: 0, reruns: 0, cpuBatches: 0, hits: 0, falseHits: 0, visits: 0, verifyFallbacks: 0, batchMs: { prepare: 0, verify: 0, wait: 0 } };
    const tables: VerifyTables = { ...index.verifyTables(), order };
    let pool: TagWorkerPool | null = null;
    if (o.verifyThreads > 0) {
      // The workers read the tables where they are when the CPU index was loaded `shared`, else
      // from a shared copy.
      const sh = (a: Uint32Array): SharedArrayBuffer => shared(a).buffer as SharedArrayBuffer;
      try {
        pool = await TagWorkerPool.start(o.verifyThreads, { kind: 'tables', setOff: sh(tables.setOff), setTags: sh(tables.setTags), keyOff: sh(tables.keyOff), keyList: sh(tables.keyList), keyValues: tables.keyValues === null ? null : sh(tables.keyValues), order: sh(order) });
      } catch (e) {
        for (const b of sigBuffers) b.destroy();
        metaBuffer.destroy();
        throw e;
      }
    }
    return new GpuTagIndex(ctx, index, o, visitPipeline, subsetPipeline, visitLayout, subsetLayout, sigBuffers, metaBuffer, order, P, blockOff, Math.ceil(largest / wg), stats, tables, pool);
  }

  stats(): GpuTagIndexStats {
    return { ...this.statsNow, buildMs: { ...this.statsNow.buildMs }, batchMs: { ...this.statsNow.batchMs } };
  }

  /**
   * The keys of each query (match; match-unique with `unique`), exactly as the CPU index gives
   * them up to order; in GPU batches of `batch` queries (default: the index's option), up to
   * `inFlight` of them at once.
   */
  async matchAll(queries: TagSetsView, unique: boolean, batch = this.o.batch): Promise<TagMatches> {
    if (!Number.isSafeInteger(batch) || batch < 1) throw new GpuError('INVALID_ARGUMENT', `tag index: batch must be an integer >= 1, got ${batch}`);
    const nq = queries.offsets.length - 1;
    for (let j = 0; j < nq; j++) {
      for (let k = queries.offsets[j] + 1; k < queries.offsets[j + 1]; k++) {
        if (queries.tags[k] <= queries.tags[k - 1]) throw new GpuError('INVALID_ARGUMENT', `tag index: query ${j}'s tags must be ascending and distinct, got ${queries.tags[k - 1]} then ${queries.tags[k]}`);
      }
    }
    // Each partition has room for every query of a batch in its query list: a batch is at most
    // what one binding lets the partitions hold.
    // The batch's input (its signatures) must fit one binding too.
    const size = Math.max(1, Math.min(batch, Math.floor((this.maxBindingWords - 2 * this.partitions) / Math.max(1, this.partitions)), Math.floor((this.maxBindingWords - IN_HEAD) / WORDS)));
    const runs: Promise<TagMatches>[] = [];
    for (let from = 0; from < nq; from += size) runs.push(this.runBatch(queries, from, Math.min(nq, from + size), unique));
    const parts = await Promise.all(runs);
    const offsets = new Uint32Array(nq + 1);
    let total = 0;
    for (const r of parts) total += r.keys.length;
    const keys = new Uint32Array(total);
    let j = 0;
    let at = 0;
    for (const r of parts) {
      keys.set(r.keys, at);
      for (let k = 1; k < r.offsets.length; k++) offsets[++j] = at + r.offsets[k];
      at += r.keys.length;
    }
    return { offsets, keys };
  }

  private async slot(): Promise<Slot> {
    for (;;) {
      const free = this.slots.find((s) => !s.busy);
      if (free !== undefined) {
        free.busy = true;
        return free;
      }
      if (this.slots.length < this.o.inFlight) {
        const cap = this.o.hitCapacity;
        const storage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST;
        const s: Slot = {
          inp: this.ctx.createBuffer('ambit.tags.inp', 4096, storage),
          inpWords: 1024,
          vis: this.ctx.createBuffer('ambit.tags.vis', 4096, storage),
          visWords: 1024,
          args: this.ctx.createBuffer('ambit.tags.args', 16, storage | GPUBufferUsage.INDIRECT),
          out: this.ctx.createBuffer('ambit.tags.out', 4 * (OUT_HEAD + 2 * cap), storage | GPUBufferUsage.COPY_SRC),
          cap,
          readHint: 4096,
          busy: true,
        };
        this.slots.push(s);
        return s;
      }
      await new Promise<void>((resolve) => this.waiting.push(resolve));
    }
  }

  private release(s: Slot): void {
    s.busy = false;
    this.waiting.shift()?.();
  }

  /** Queries [from, to): signatures, the GPU's passes (again with more room if hits overflowed), verification. */
  private async runBatch(queries: TagSetsView, from: number, to: number, unique: boolean): Promise<TagMatches> {
    // A ticket first: batches between their start and their answer are bounded (those whose hits
    // wait for a verification worker included), so the GPU cannot run far ahead of verification.
    await this.ticket();
    try {
      return await this.runBatchTicketed(queries, from, to, unique);
    } finally {
      this.tickets++;
      this.ticketWaiting.shift()?.();
    }
  }

  private async ticket(): Promise<void> {
    while (this.tickets === 0) await new Promise<void>((resolve) => this.ticketWaiting.push(resolve));
    this.tickets--;
  }

  private async runBatchTicketed(queries: TagSetsView, from: number, to: number, unique: boolean): Promise<TagMatches> {
    // A slot next: no more than inFlight batches are prepared ahead of the GPU, so the host's
    // work on the next batch overlaps the GPU's on those in flight. The slot is given back once
    // the hits are read: verification runs beside the next batches' GPU passes.
    const slot = await this.slot();
    const nq = to - from;
    let pass: { data: Uint32Array; hits: number } | TagMatches;
    try {
      const t0 = performance.now();
      const inp = new Uint32Array(IN_HEAD + WORDS * nq);
      for (let j = 0; j < nq; j++) signatureInto(inp, IN_HEAD + WORDS * j, queries.tags, queries.offsets[from + j], queries.offsets[from + j + 1]);
      inp[0] = nq;
      inp[1] = IN_HEAD;
      inp[2] = this.partitions;
      inp[3] = this.blockOff;
      this.statsNow.batchMs.prepare += performance.now() - t0;
      pass = await this.gpuPass(slot, queries, from, nq, inp, unique);
    } finally {
      this.release(slot);
    }
    this.statsNow.batches++;
    if (!('data' in pass)) return pass;
    const v0 = performance.now();
    const qOff = queries.offsets.subarray(from, to + 1);
    let r: (TagMatches & { falseHits: number }) | null = null;
    if (this.pool !== null && this.pool.size === 0) this.statsNow.verifyFallbacks++;
    else if (this.pool !== null) {
      // The batch's queries, rebased, and its hits (copied: should the worker die, this thread
      // verifies them) go to a worker.
      const base = qOff[0];
      const rebased = qOff.map((o) => o - base);
      const qTags = queries.tags.slice(base, qOff[nq]);
      try {
        const reply = await this.pool.run({ kind: 'verify', qOff: rebased, qTags, data: pass.data, head: OUT_HEAD, hits: pass.hits, unique });
        if (reply.kind === 'verified') r = reply;
      } catch (err) {
        if (this.pool.size > 0) throw err; // the task failed, not the pool
        this.statsNow.verifyFallbacks++;
      }
    }
    // No worker (or none left): the calling thread verifies.
    r ??= verifyHits(this.tables, qOff, queries.tags, pass.data, OUT_HEAD, pass.hits, unique);
    this.statsNow.falseHits += r.falseHits;
    this.statsNow.batchMs.verify += performance.now() - v0;
    return { offsets: r.offsets, keys: r.keys };
  }

  /** A buffer of at least `words` words in place of `buf` (doubling, up to one binding's reach). */
  private grown(label: string, buf: GPUBuffer, have: number, words: number, usage: number): [GPUBuffer, number] {
    if (have >= words) return [buf, have];
    const n = Math.min(Math.max(words, 2 * have), this.maxBindingWords);
    const next = this.ctx.createBuffer(label, 4 * n, usage);
    buf.destroy();
    return [next, n];
  }

  /** The batch's hits (GPU), or its answer when the CPU index had to give it. */
  private async gpuPass(slot: Slot, queries: TagSetsView, from: number, nq: number, inp: Uint32Array, unique: boolean): Promise<{ data: Uint32Array; hits: number } | TagMatches> {
    const P = this.partitions;
    const storage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST;
    [slot.inp, slot.inpWords] = this.grown('ambit.tags.inp', slot.inp, slot.inpWords, inp.length, storage);
    [slot.vis, slot.visWords] = this.grown('ambit.tags.vis', slot.vis, slot.visWords, 2 * P + P * nq, storage);
    let hits = 0;
    let data: Uint32Array;
    for (;;) {
      const t0 = performance.now();
      inp[4] = slot.cap;
      this.ctx.writeBuffer(slot.inp, 0, inp);
      this.ctx.writeBuffer(slot.args, 0, new Uint32Array([this.maxBlocks, 0, 1]));
      const sigs = this.sigBuffers.map((buffer, binding) => ({ binding, resource: { buffer } }));
      const common = [
        { binding: B_META, resource: { buffer: this.metaBuffer } },
        { binding: B_INP, resource: { buffer: slot.inp } },
        { binding: B_VIS, resource: { buffer: slot.vis } },
        { binding: B_OUT, resource: { buffer: slot.out } },
      ];
      const visitGroup = this.ctx.device.createBindGroup({ layout: this.visitLayout, entries: [...common, { binding: B_ARGS, resource: { buffer: slot.args } }] });
      const subsetGroup = this.ctx.device.createBindGroup({ layout: this.subsetLayout, entries: [...sigs, ...common] });
      const enc = this.ctx.device.createCommandEncoder({ label: 'ambit.tags.batch' });
      enc.clearBuffer(slot.out, 0, 4 * OUT_HEAD);
      const pass = enc.beginComputePass();
      pass.setPipeline(this.visitPipeline);
      pass.setBindGroup(0, visitGroup);
      pass.dispatchWorkgroups(P);
      pass.setPipeline(this.subsetPipeline);
      pass.setBindGroup(0, subsetGroup);
      pass.dispatchWorkgroupsIndirect(slot.args, 0);
      pass.end();
      // Read what the last batches suggest (twice their hits), not the whole room: most batches
      // hit far less than their room; the rest, when there is more, in a second read.
      const readN = Math.min(slot.cap, slot.readHint);
      this.statsNow.batchMs.prepare += performance.now() - t0;
      const w0 = performance.now();
      data = new Uint32Array(await this.ctx.submitAndRead(enc, slot.out, 0, 4 * (OUT_HEAD + 2 * readN)));
      this.statsNow.batchMs.wait += performance.now() - w0;
      hits = data[0];
      if (hits <= slot.cap) {
        if (hits > readN) {
          const r0 = performance.now();
          const rest = new Uint32Array(await this.ctx.readBuffer(slot.out, 4 * (OUT_HEAD + 2 * readN), 8 * (hits - readN)));
          this.statsNow.batchMs.wait += performance.now() - r0;
          const all = new Uint32Array(OUT_HEAD + 2 * hits);
          all.set(data);
          all.set(rest, OUT_HEAD + 2 * readN);
          data = all;
        }
        slot.readHint = Math.max(4096, 2 * hits);
        break;
      }
      // Room for every hit, and a quarter more, then the batch again; past what one binding
      // may hold, the CPU index answers the batch.
      this.statsNow.reruns++;
      const room = Math.min(Math.ceil(hits * 1.25), this.maxHits);
      if (room < hits) {
        this.statsNow.cpuBatches++;
        this.statsNow.visits += data[1];
        return this.onCpu(queries, from, nq, unique);
      }
      const buf = this.ctx.createBuffer('ambit.tags.out', 4 * (OUT_HEAD + 2 * room), storage | GPUBufferUsage.COPY_SRC);
      slot.out.destroy();
      slot.out = buf;
      slot.cap = room;
    }
    this.statsNow.visits += data[1];
    this.statsNow.hits += hits;
    return { data, hits };
  }

  private onCpu(queries: TagSetsView, from: number, nq: number, unique: boolean): TagMatches {
    const t0 = performance.now();
    const part: TagSetsView = { offsets: queries.offsets.subarray(from, from + nq + 1), tags: queries.tags };
    const answer = this.index.matchAll(part, unique);
    this.statsNow.batchMs.verify += performance.now() - t0;
    return answer;
  }

  /** Words one storage binding may hold on this device. */
  private get maxBindingWords(): number {
    return Math.floor(this.ctx.limits.maxStorageBufferBindingSize / 4);
  }

  /** Most hits a batch's output binding can hold. */
  private get maxHits(): number {
    return Math.min(this.o.hitLimit, Math.floor((this.maxBindingWords - OUT_HEAD) / 2));
  }

  /** Frees the GPU buffers and stops the verification workers. */
  destroy(): void {
    void this.pool?.close();
    for (const b of this.sigBuffers) b.destroy();
    this.metaBuffer.destroy();
    for (const s of this.slots) {
      s.inp.destroy();
      s.vis.destroy();
      s.args.destroy();
      s.out.destroy();
    }
  }
}
