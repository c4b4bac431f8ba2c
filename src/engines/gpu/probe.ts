/**
 * Host side of gpu/probe.wgsl: y[i] = x[i] * 2 + 1 plus an atomic count of the elements written.
 * Used by the device tests to prove that an adapter computes, not only that it exists.
 */
import { type BindingDecl, checkBindings, layoutEntries } from './bindings.js';
import { GpuContext, GpuError } from './device.js';

/**
 * The probe's bindings. probe.wgsl keeps its own declarations (the device tests compile it
 * standalone), so they are checked against this table when the kernel is built.
 */
const PROBE_BINDINGS = {
  x: { binding: 0, access: 'read', type: 'array<u32>', elementBytes: 4, buffer: 'x', doc: 'input' },
  y: { binding: 1, access: 'read_write', type: 'array<u32>', elementBytes: 4, buffer: 'y', doc: 'output' },
  counter: { binding: 2, access: 'read_write', type: 'atomic<u32>', elementBytes: 4, buffer: 'counter', doc: 'elements written' },
  params: { binding: 3, access: 'uniform', type: 'Params', elementBytes: 4, buffer: 'params', doc: 'n' },
} as const satisfies Record<string, BindingDecl>;

type ProbeBuffer = (typeof PROBE_BINDINGS)[keyof typeof PROBE_BINDINGS]['buffer'];

export interface ProbeResult {
  y: Uint32Array;
  /** The atomic counter: must equal x.length. */
  count: number;
}

export class ProbeKernel {
  readonly workgroupSize: number;
  readonly #ctx: GpuContext;
  readonly #pipeline: GPUComputePipeline;
  readonly #layout: GPUBindGroupLayout;
  readonly #params: GPUBuffer;

  private constructor(ctx: GpuContext, workgroupSize: number, pipeline: GPUComputePipeline, layout: GPUBindGroupLayout) {
    this.#ctx = ctx;
    this.workgroupSize = workgroupSize;
    this.#pipeline = pipeline;
    this.#layout = layout;
    this.#params = ctx.createBuffer('probe.params', 16, GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST);
  }

  /** Compiles the shader and builds the pipeline with `WG = workgroupSize`. */
  static async create(ctx: GpuContext, workgroupSize = 64): Promise<ProbeKernel> {
    const max = Math.min(ctx.limits.maxComputeWorkgroupSizeX, ctx.limits.maxComputeInvocationsPerWorkgroup);
    if (!Number.isInteger(workgroupSize) || workgroupSize < 1 || workgroupSize > max) {
      throw new GpuError('INVALID_ARGUMENT', `probe: workgroupSize must be an integer in [1, ${max}], got ${workgroupSize}`);
    }
    const code = ctx.loadShader('probe');
    checkBindings('probe', code, PROBE_BINDINGS);
    const module = await ctx.compileShader('probe', code);
    const layout = ctx.device.createBindGroupLayout({ label: 'probe', entries: layoutEntries(Object.values(PROBE_BINDINGS)) });
    const pipeline = await ctx.withValidation('probe pipeline', () =>
      ctx.device.createComputePipeline({
        label: `probe WG=${workgroupSize}`,
        layout: ctx.device.createPipelineLayout({ label: 'probe', bindGroupLayouts: [layout] }),
        compute: { module, entryPoint: 'main', constants: { WG: workgroupSize } },
      }),
    );
    return new ProbeKernel(ctx, workgroupSize, pipeline, layout);
  }

  /** Runs the probe over `x`; buffers are made per call (a probe, not a hot path). */
  async run(x: Uint32Array): Promise<ProbeResult> {
    const ctx = this.#ctx;
    const n = x.length;
    const bytes = n * 4;
    const xBuf = ctx.createBuffer('probe.x', bytes, GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST);
    const yBuf = ctx.createBuffer('probe.y', bytes, GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC);
    const counter = ctx.createBuffer('probe.counter', 4, GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST);
    try {
      if (n > 0) ctx.writeBuffer(xBuf, 0, x);
      ctx.writeBuffer(counter, 0, new Uint32Array([0]));
      ctx.writeBuffer(this.#params, 0, new Uint32Array([n, 0, 0, 0]));
      const buffers: Record<ProbeBuffer, GPUBuffer> = { x: xBuf, y: yBuf, counter, params: this.#params };
      const bindGroup = ctx.device.createBindGroup({
        label: 'probe',
        layout: this.#layout,
        entries: Object.values(PROBE_BINDINGS).map((b) => ({ binding: b.binding, resource: { buffer: buffers[b.buffer] } })),
      });
      const [gx, gy] = ctx.grid(Math.ceil(n / this.workgroupSize));
      const enc = ctx.device.createCommandEncoder({ label: 'probe' });
      const pass = enc.beginComputePass({ label: 'probe' });
      pass.setPipeline(this.#pipeline);
      pass.setBindGroup(0, bindGroup);
      if (gx > 0) pass.dispatchWorkgroups(gx, gy);
      pass.end();
      const y = new Uint32Array(await ctx.submitAndRead(enc, yBuf, 0, bytes));
      const count = new Uint32Array(await ctx.readBuffer(counter, 0, 4))[0];
      return { y, count };
    } finally {
      xBuf.destroy();
      yBuf.destroy();
      counter.destroy();
    }
  }

  destroy(): void {
    this.#params.destroy();
  }
}

/** One-shot probe: builds the kernel, runs it over `x`, frees it. */
export async function runProbe(ctx: GpuContext, x: Uint32Array, workgroupSize = 64): Promise<ProbeResult> {
  const k = await ProbeKernel.create(ctx, workgroupSize);
  try {
    return await k.run(x);
  } finally {
    k.destroy();
  }
}
