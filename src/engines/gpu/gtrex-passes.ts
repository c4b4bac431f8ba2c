/**
 * The GPU side of the pattern sequencer (gtrex.ts): gtrex.wgsl's pipelines, the buffers they bind
 * (the pool in pages, the batch's searches, the partial and complete lists, staging, counts,
 * parameters) and one run of a batch's passes with its read-back. No buffer bound as storage is
 * made larger than a binding may be: the pool spans up to POOL_PAGES bindings, and an upload
 * larger than one is scattered a binding at a time. The device refusing a run is an error, never
 * an answer.
 */
import { type GpuContext, GpuError, loadShader } from './device.js';
import { type HostColumn, bitsDouble } from './gtrex-layout.js';
import type { Done } from './gtrex-results.js';

export const PARAM_SLOT = 256; // bytes a level's uniform block takes (the offset alignment)
export const LEVELS = 33;
/** The most storage bindings the pool spans (pool0..pool7 at bindings 0 and 7-13; fewer where the device binds fewer). */
export const POOL_PAGES = 8;
/** Storage bindings besides the pool's (batch, parts, done, counts, staging). */
const OTHER_STORAGE = 5;
const pageBinding = (p: number): number => (p === 0 ? 0 : 6 + p);
/** gtrex.wgsl's block of the pool's pages, as written there (for a pool of one page). */
const PAGES_BLOCK = /\/\/ ---- the pool's pages ----[\s\S]*?\/\/ ---- end of the pool's pages ----/;
type PassSet = { layout: GPUBindGroupLayout; pipes: Pipes };

/**
 * gtrex.wgsl's block of the pool's pages written for `pages` of them (2 or more): their bindings,
 * and pr/pw choosing the page by a pool offset's high bits (`pageBits` low bits the word in it).
 */
export function pagesBlock(pages: number, pageBits: number): string {
  const vars = Array.from({ length: pages }, (_, p) => `@group(0) @binding(${pageBinding(p)}) var<storage, read_write> pool${p}: array<u32>;`);
  const arms = (body: (p: number) => string): string =>
    Array.from({ length: pages }, (_, p) => `    ${p === pages - 1 ? 'default' : `case ${p}u`}: { ${body(p)} }`).join('\n');
  return [
    ...vars,
    `override PAGE_BITS: u32 = ${pageBits}u;`,
    '/** Pool word i. */',
    'fn pr(i: u32) -> u32 {',
    '  let o = i & ((1u << PAGE_BITS) - 1u);',
    '  switch (i >> PAGE_BITS) {',
    arms((p) => `return pool${p}[o];`),
    '  }',
    '}',
    '/** Sets pool word i. */',
    'fn pw(i: u32, v: u32) {',
    '  let o = i & ((1u << PAGE_BITS) - 1u);',
    '  switch (i >> PAGE_BITS) {',
    arms((p) => `pool${p}[o] = v;`),
    '  }',
    '}',
  ].join('\n');
}
const COUNT_DONE = 32;
type Pipes = Record<'scatter' | 'start' | 'extend' | 'aggregate' | 'addTest', GPUComputePipeline>;

export class GtrexPasses {
  /** The pool's pages (each `pageWords` words but the last), in order; null before the first. */
  pool: GPUBuffer[] | null = null;
  /** Small buffers bound where the pool has no page. */
  private readonly unused: GPUBuffer[] = [];
  private batchBuf: GPUBuffer | null = null;
  private parts: GPUBuffer | null = null;
  private done: GPUBuffer | null = null;
  private staging: GPUBuffer | null = null;
  /** The read-back's source: counts and the first complete matches; and how many the last run had. */
  private result: GPUBuffer | null = null;
  private lastDone = 0;
  private readonly counts: GPUBuffer;
  private readonly params: GPUBuffer;
  private groups: GPUBindGroup[] | null = null;
  /** Room for partial and complete matches (grown when short, within a binding). */
  capP: number;
  capC: number;
  /** Runs again for room. */
  reruns = 0;
  /** Scatter passes run ahead of a batch's own (its staged entries outgrew one binding). */
  scatterPasses = 0;
  /** The device's error count before the first scatter pass of the batch being uploaded. */
  private errorsAt: number | null = null;

  private constructor(
    private readonly ctx: GpuContext,
    private readonly wg: number,
    private readonly onePage: PassSet,
    private readonly compilePaged: () => Promise<PassSet>,
    /** The largest storage binding used, in bytes. */
    readonly bindingBytes: number,
    /** Words a pool page holds: the largest power of two a binding (or `pageBytes`) holds. */
    readonly pageWords: number,
    /** The most pages a pool may have (POOL_PAGES, or what the device's storage bindings allow). */
    readonly maxPages: number,
    capacity: number,
  ) {
    this.capP = this.capC = capacity;
    this.counts = ctx.createBuffer('ambit.gtrex.counts', 4 * 64, GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST);
    this.params = ctx.createBuffer('ambit.gtrex.params', PARAM_SLOT * LEVELS, GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST);
  }

  /**
   * The pipelines on `ctx`; `bindingBytes` at most the device's (default: it); `pageBytes` the
   * pool's page (default `bindingBytes`); `maxPoolPages` the most pages a pool may have.
   */
  static async compile(ctx: GpuContext, workgroupSize: number, bindingBytes: number | undefined, capacity: number, pageBytes?: number, maxPoolPages: number = POOL_PAGES): Promise<GtrexPasses> {
    const bind = bindingBytes ?? ctx.limits.maxStorageBufferBindingSize;
    if (!(Number.isInteger(bind) && bind >= 4096 && bind <= ctx.limits.maxStorageBufferBindingSize)) throw new RangeError(`bindingBytes must be an integer in [4096, ${ctx.limits.maxStorageBufferBindingSize}], got ${bind}`);
    const wg = Math.min(workgroupSize, ctx.limits.maxComputeWorkgroupSizeX, ctx.limits.maxComputeInvocationsPerWorkgroup);
    // A page a power of two of words (the kernels split a pool offset by a shift), no larger than
    // a binding or a buffer may be.
    const deviceBinding = ctx.limits.maxStorageBufferBindingSize;
    if (pageBytes !== undefined && !(Number.isInteger(pageBytes) && pageBytes >= 4096 && pageBytes <= deviceBinding)) throw new RangeError(`pageBytes must be an integer in [4096, ${deviceBinding}], got ${pageBytes}`);
    const pageBits = Math.floor(Math.log2(Math.min(pageBytes ?? bind, deviceBinding, ctx.limits.maxBufferSize) / 4));
    const source = loadShader('gtrex');
    const storage = (binding: number, type: GPUBufferBindingType): GPUBindGroupLayoutEntry => ({ binding, visibility: GPUShaderStage.COMPUTE, buffer: { type } });
    // One set for a pool of one page (gtrex.wgsl as written), and, made the first time a pool has
    // several, one for several: its module has their bindings and the page choice, as many pages
    // as the device's storage bindings allow beside the others.
    if (!(Number.isInteger(maxPoolPages) && maxPoolPages >= 1)) throw new RangeError(`maxPoolPages must be a positive integer, got ${maxPoolPages}`);
    const maxPages = Math.max(1, Math.min(POOL_PAGES, maxPoolPages, ctx.limits.maxStorageBuffersPerShaderStage - OTHER_STORAGE));
    const compileSet = async (pages: number): Promise<PassSet> => {
      const code = pages === 1 ? source : source.replace(PAGES_BLOCK, pagesBlock(pages, pageBits));
      const module = await ctx.compileShader(pages === 1 ? 'gtrex' : `gtrex (${pages} pages)`, code);
      const layout = ctx.device.createBindGroupLayout({
        label: `ambit.gtrex.${pages}`,
        entries: [
          storage(1, 'read-only-storage'),
          storage(2, 'storage'),
          storage(3, 'storage'),
          storage(4, 'storage'),
          storage(5, 'uniform'),
          storage(6, 'read-only-storage'),
          ...Array.from({ length: pages }, (_, p) => storage(pageBinding(p), 'storage')),
        ],
      });
      const pipelineLayout = ctx.device.createPipelineLayout({ label: `ambit.gtrex.${pages}`, bindGroupLayouts: [layout] });
      const pipes = {} as Pipes;
      for (const entryPoint of ['scatter', 'start', 'extend', 'aggregate', 'addTest'] as const) {
        pipes[entryPoint] = await ctx.withValidation(`pipeline gtrex.${entryPoint}`, () =>
          ctx.device.createComputePipeline({ label: `ambit.gtrex.${entryPoint}`, layout: pipelineLayout, compute: { module, entryPoint, constants: { WG: wg } } }),
        );
      }
      return { layout, pipes };
    };
    return new GtrexPasses(ctx, wg, await compileSet(1), () => compileSet(maxPages), bind, 2 ** pageBits, maxPages, capacity);
  }

  /**
   * The most words a pool may have: `maxPages` pages, short of 2^32 (its offsets are u32, and
   * 0xffffffff is the kernels' NONE).
   */
  get maxPoolWords(): number {
    return Math.min(this.maxPages * this.pageWords, 2 ** 32 - 1024);
  }

  /** A new pool of `words` in pages (the old one goes). */
  newPool(words: number): void {
    if (words > this.maxPoolWords) throw new GpuError('OUT_OF_MEMORY', `gtrex: a pool of ${4 * words} bytes, expected at most ${4 * this.maxPoolWords} (${this.maxPages} storage binding${this.maxPages === 1 ? '' : 's'})`);
    for (const b of this.pool ?? []) b.destroy();
    this.pool = null;
    this.groups = null;
    const pages: GPUBuffer[] = [];
    for (let at = 0; at < words; at += this.pageWords) {
      pages.push(this.ctx.createBuffer(`ambit.gtrex.pool${pages.length}`, 4 * Math.min(this.pageWords, words - at), GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST));
    }
    this.pool = pages;
  }

  /**
   * The batch's searches and records, and the staged entries (`at`: each entry's offset in the
   * staging words, which are `at` then `data`). Returns how many entries the batch's run scatters:
   * all of them, unless they outgrow one storage binding (a rebuild of a pool larger than one):
   * then groups of entries that fit one are scattered by passes of their own, first, and the last
   * group is the run's.
   */
  upload(batch: Uint32Array, at: Uint32Array, data: Uint32Array): number {
    const ST = GPUBufferUsage.STORAGE;
    this.batchBuf = this.buffer(this.batchBuf, 'ambit.gtrex.batch', 4 * batch.length, ST | GPUBufferUsage.COPY_DST);
    this.ctx.writeBuffer(this.batchBuf, 0, batch);
    this.errorsAt = null; // a batch before this one that failed between its upload and its run left it
    const n = at.length;
    const bindWords = Math.floor(this.bindingBytes / 4);
    if (n + data.length <= bindWords) {
      this.stage(at, data);
      return n;
    }
    this.errorsAt = this.ctx.uncapturedErrors.count;
    // Entries lie in `data` in order, entry e from at[e] - n.
    const start = (e: number): number => (e < n ? at[e] - n : data.length);
    let first = 0;
    for (;;) {
      let last = first + 1; // an entry is at most a chunk of words (gtrex.ts): one always fits
      while (last < n && last + 1 - first + start(last + 1) - start(first) <= bindWords) last++;
      const count = last - first;
      const offsets = new Uint32Array(count);
      for (let k = 0; k < count; k++) offsets[k] = start(first + k) - start(first) + count;
      this.stage(offsets, data.subarray(start(first), start(last)));
      if (last === n) return count;
      this.scatterOnly(count);
      first = last;
    }
  }

  private stage(offsets: Uint32Array, entries: Uint32Array): void {
    this.staging = this.buffer(this.staging, 'ambit.gtrex.staging', 4 * Math.max(1, offsets.length + entries.length), GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST);
    if (offsets.length === 0) return;
    this.ctx.writeBuffer(this.staging, 0, offsets);
    this.ctx.writeBuffer(this.staging, 4 * offsets.length, entries);
  }

  /** Scatters the `entries` staged now, in a submission of their own (ahead of what follows on the queue). */
  private scatterOnly(entries: number): void {
    const ST = GPUBufferUsage.STORAGE;
    // The bind group names every buffer: the lists exist before the first run.
    this.parts = this.buffer(this.parts, 'ambit.gtrex.parts', 16, ST);
    this.done = this.buffer(this.done, 'ambit.gtrex.done', 16, ST | GPUBufferUsage.COPY_SRC);
    const prm = new Uint32Array(PARAM_SLOT / 4);
    prm[9] = entries;
    this.ctx.writeBuffer(this.params, 0, prm);
    const enc = this.ctx.device.createCommandEncoder({ label: 'ambit.gtrex.scatter' });
    const pass = enc.beginComputePass({ label: 'ambit.gtrex.scatter' });
    pass.setPipeline(this.pipes.scatter);
    pass.setBindGroup(0, this.bindGroups()[0]);
    const [x, y] = this.ctx.grid(Math.ceil(entries / this.wg));
    pass.dispatchWorkgroups(x, y);
    pass.end();
    this.ctx.queue.submit([enc.finish()]);
    this.scatterPasses++;
  }

  /** A buffer of at least `bytes` (grown by doubling); one bound as storage is never made larger than a binding may be. */
  buffer(cur: GPUBuffer | null, label: string, bytes: number, usage: number): GPUBuffer {
    if (cur !== null && cur.size >= bytes) return cur;
    const limit = (usage & GPUBufferUsage.STORAGE) !== 0 ? this.bindingBytes : Number.MAX_SAFE_INTEGER;
    if (bytes > limit) throw new GpuError('OUT_OF_MEMORY', `gtrex: ${label} needs ${bytes} bytes, expected at most the device's storage binding of ${limit}`);
    cur?.destroy();
    if ((usage & GPUBufferUsage.STORAGE) !== 0) this.groups = null; // the bind groups name it
    let size = 1024;
    while (size < bytes) size *= 2;
    return this.ctx.createBuffer(label, Math.min(size, Math.floor(limit / 4) * 4), usage);
  }

  /**
   * Searches [first, first + count): the passes, then one read-back (the counts and as many complete
   * matches as the last run had, twice over; a second read only past that). Runs again with more
   * room when the lists were short, answers 'split' when they would outgrow a storage binding.
   */
  async dispatch(first: number, count: number, S: number, G: number, ps: number, cs: number, scatter: number, maxP: number, maxC: number, maxRetained: number, owner: (off: number) => HostColumn): Promise<Done | null | 'split'> {
    const ST = GPUBufferUsage.STORAGE;
    for (let attempt = 0; ; attempt++) {
      this.capP = Math.min(maxP, Math.max(this.capP, count));
      this.capC = Math.min(maxC, this.capC);
      this.parts = this.buffer(this.parts, 'ambit.gtrex.parts', 4 * 2 * this.capP * ps, ST);
      this.done = this.buffer(this.done, 'ambit.gtrex.done', 4 * this.capC * cs, ST | GPUBufferUsage.COPY_SRC);
      const groups = this.bindGroups();
      const prm = new Uint32Array((PARAM_SLOT / 4) * S);
      for (let l = 0; l < S; l++) prm.set([l, S, ps, cs, G, this.capP, this.capC, maxRetained, count, scatter, first], (PARAM_SLOT / 4) * l);
      this.ctx.writeBuffer(this.params, 0, prm);
      const enc = this.ctx.device.createCommandEncoder({ label: 'ambit.gtrex.batch' });
      enc.clearBuffer(this.counts);
      const pass = enc.beginComputePass({ label: 'ambit.gtrex' });
      const run = (pipe: GPUComputePipeline, group: GPUBindGroup, threads: number): void => {
        if (threads === 0) return;
        pass.setPipeline(pipe);
        pass.setBindGroup(0, group);
        const [x, y] = this.ctx.grid(Math.ceil(threads / this.wg));
        pass.dispatchWorkgroups(x, y);
      };
      run(this.pipes.scatter, groups[0], scatter);
      run(this.pipes.start, groups[0], count);
      for (let l = 1; l < S; l++) run(this.pipes.extend, groups[l], this.capP);
      if (G > 0) run(this.pipes.aggregate, groups[0], this.capC);
      pass.end();
      const K = Math.min(this.capC, Math.max(64, 2 * this.lastDone));
      const bytes = 4 * (LEVELS + K * cs);
      this.result = this.buffer(this.result, 'ambit.gtrex.result', bytes, GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST);
      enc.copyBufferToBuffer(this.counts, 0, this.result, 0, 4 * LEVELS);
      enc.copyBufferToBuffer(this.done, 0, this.result, 4 * LEVELS, 4 * K * cs);
      // Counted from before any scatter pass of its own that this batch's upload ran.
      const errors = this.errorsAt ?? this.ctx.uncapturedErrors.count;
      this.errorsAt = null;
      const back = await this.ctx.submitAndRead(enc, this.result, 0, bytes);
      // The device refusing the work (an invalid binding, say) shows only here: never answer from it.
      if (this.ctx.uncapturedErrors.count !== errors) throw new GpuError('VALIDATION', `gtrex: expected the batch's passes to run, got a device error: ${this.ctx.uncapturedErrors.last ?? 'unknown'}`);
      const counts = new Uint32Array(back, 0, LEVELS);
      scatter = 0;
      let needP = 0;
      for (let l = 1; l < S; l++) needP = Math.max(needP, counts[l]);
      const needC = counts[COUNT_DONE];
      if (needP <= this.capP && needC <= this.capC) {
        this.lastDone = needC;
        let raw: Uint32Array | null = null;
        if (needC > K) raw = new Uint32Array(await this.ctx.readBuffer(this.done, 0, 4 * needC * cs));
        else if (needC > 0) raw = new Uint32Array(back, 4 * LEVELS, needC * cs);
        return raw === null ? null : { raw, n: needC, S, cs, owner: owner };
      }
      if (needP > maxP || needC > maxC) return 'split';
      this.reruns++;
      while (this.capP < needP) this.capP = Math.min(maxP, this.capP * 2);
      while (this.capC < needC) this.capC = Math.min(maxC, this.capC * 2);
      if (attempt > 40) throw new GpuError('OUT_OF_MEMORY', `gtrex: expected room for ${needP} partial and ${needC} complete matches, got none after ${attempt} tries`);
    }
  }

  /** The pipelines for a pool of several pages, once one had. */
  private paged: PassSet | null = null;

  /** The pipelines and layout for the pool as it is: of one page, or of several (`ready` made them). */
  private get set(): PassSet {
    if (this.pool === null || this.pool.length === 1) return this.onePage;
    if (this.paged === null) throw new Error('gtrex: a pool of several pages before its pipelines were made (ready())');
    return this.paged;
  }

  private get pipes(): Pipes {
    return this.set.pipes;
  }

  /** Makes the pipelines the pool needs (those for several pages, the first time it has several). */
  async ready(): Promise<void> {
    if (this.pool !== null && this.pool.length > 1 && this.paged === null) {
      this.paged = await this.compilePaged();
      this.groups = null;
    }
  }

  /** Page p of the pool, or a small buffer of its own where the pool has none. */
  private page(p: number): GPUBuffer {
    const pool = this.pool!;
    if (p < pool.length) return pool[p];
    this.unused[p] ??= this.ctx.createBuffer(`ambit.gtrex.unusedPage${p}`, 16, GPUBufferUsage.STORAGE);
    return this.unused[p];
  }

  private bindGroups(): GPUBindGroup[] {
    if (this.groups !== null) return this.groups;
    const set = this.set;
    const pages = set === this.onePage ? 1 : this.maxPages;
    const gs: GPUBindGroup[] = [];
    for (let l = 0; l < LEVELS; l++) {
      gs.push(
        this.ctx.device.createBindGroup({
          label: `ambit.gtrex.level${l}`,
          layout: set.layout,
          entries: [
            ...Array.from({ length: pages }, (_, p) => ({ binding: pageBinding(p), resource: { buffer: this.page(p) } })),
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

  /** Runs f64add on the GPU over pairs of doubles (a test of the kernels' float64 sums). */
  async addTest(pairs: Float64Array): Promise<Float64Array> {
    const n = pairs.length >> 1;
    const words = new Uint32Array(4 * n);
    for (let t = 0; t < 2 * n; t++) {
      const f = new Float64Array([pairs[t]]);
      const u = new Uint32Array(f.buffer);
      words[2 * t] = u[1];
      words[2 * t + 1] = u[0];
    }
    if (this.pool === null) this.newPool(1024);
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

  destroy(): void {
    for (const b of [...(this.pool ?? []), ...this.unused, this.batchBuf, this.parts, this.done, this.staging, this.result, this.counts, this.params]) b?.destroy();
  }
}
