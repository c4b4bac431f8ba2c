/** The compiled kernels of match.wgsl on one device, with their bind group layouts from bindings.ts. */
import { ENTRY_POINTS, type EntryPoint, createBindGroupLayout, matchSource } from './bindings.js';
import type { GpuContext } from './device.js';
import { checkInt, defaultGpuMatcherOptions } from './options.js';

/** The compiled Loc, Cont, Zip and scatter pipelines of one device; shareable between matchers. */
export class GpuKernels {
  private constructor(
    readonly ctx: GpuContext,
    readonly wg: number,
    private readonly layouts: Readonly<Record<EntryPoint, GPUBindGroupLayout>>,
    private readonly pipelines: Readonly<Record<EntryPoint, GPUComputePipeline>>,
  ) {}

  get loc(): GPUComputePipeline {
    return this.pipelines.loc;
  }
  get locFew(): GPUComputePipeline {
    return this.pipelines.locFew;
  }
  get cont(): GPUComputePipeline {
    return this.pipelines.cont;
  }
  get zip(): GPUComputePipeline {
    return this.pipelines.zip;
  }
  get scatter(): GPUComputePipeline {
    return this.pipelines.scatter;
  }

  /** The bind group layout of an entry point (the bindings table's, not one derived from the shader). */
  layout(entry: EntryPoint): GPUBindGroupLayout {
    return this.layouts[entry];
  }

  static async compile(ctx: GpuContext, workgroupSize: number = defaultGpuMatcherOptions.workgroupSize): Promise<GpuKernels> {
    checkInt('workgroupSize', workgroupSize, 1, 1024);
    const wg = Math.min(workgroupSize, ctx.limits.maxComputeWorkgroupSizeX, ctx.limits.maxComputeInvocationsPerWorkgroup);
    const module = await ctx.compileShader('match', matchSource(ctx.loadShader('match')));
    const layouts = {} as Record<EntryPoint, GPUBindGroupLayout>;
    const pipelines = {} as Record<EntryPoint, GPUComputePipeline>;
    // Explicit layouts: a kernel that uses a binding its table entry lacks fails here, named.
    for (const entryPoint of ENTRY_POINTS) {
      pipelines[entryPoint] = await ctx.withValidation(`pipeline ${entryPoint}`, () => {
        const layout = (layouts[entryPoint] = createBindGroupLayout(ctx.device, entryPoint));
        return ctx.device.createComputePipeline({
          label: `ambit.${entryPoint}`,
          layout: ctx.device.createPipelineLayout({ label: `ambit.${entryPoint}`, bindGroupLayouts: [layout] }),
          compute: { module, entryPoint, constants: { WG: wg } },
        });
      });
    }
    return new GpuKernels(ctx, wg, layouts, pipelines);
  }
}
