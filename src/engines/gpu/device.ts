/**
 * The GPU device layer: finds a WebGPU adapter through Dawn's Node binding (the `webgpu` package),
 * opens a device with the adapter's own limits, and gives kernels the few helpers they share
 * (labelled buffers, writes, read-back through a staging buffer, validation scopes, WGSL loading).
 *
 * Adapter routes, in order:
 *  1. Dawn's platform default (Vulkan on Linux), `powerPreference: 'high-performance'`: the
 *     production route on a host with a GPU driver.
 *  2. Dawn's OpenGL ES backend in compatibility mode over EGL (`EGL_PLATFORM=surfaceless`):
 *     the route to Mesa llvmpipe on machines without a GPU (CI). Software: for correctness only.
 *
 * Output hygiene: Dawn writes some messages itself, from native code, where JavaScript cannot
 * intercept them. Instance warnings (a missing Vulkan loader, reduced limits) go to stderr.
 * Uncaptured device errors are printed to stdout unless an `uncapturederror` listener calls
 * `preventDefault()`, which this class always does. Shader compilation warnings are printed to
 * stdout by the device's logging callback; `compileShader` therefore rejects shaders with warnings,
 * so that the JSON log on stdout stays clean.
 */
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export type GpuBackend = 'auto' | 'vulkan' | 'opengles';

export interface GpuOptions {
  /** 'auto': platform default first, then OpenGL ES; 'vulkan' / 'opengles': that route only. */
  backend: GpuBackend;
  /** Accept a software adapter (llvmpipe, lavapipe, SwiftShader). Off: production wants a real GPU. */
  allowSoftware: boolean;
  /** Features enabled when the adapter has them; their absence is not an error. */
  optionalFeatures: readonly GPUFeatureName[];
  /** Label of the device (appears in Dawn's error messages). */
  label: string;
  /** Extra flags for Dawn's `create()`, e.g. `enable-dawn-features=...`. */
  dawnFlags: readonly string[];
}

export const defaultGpuOptions: Readonly<GpuOptions> = Object.freeze({
  backend: 'auto',
  allowSoftware: false,
  optionalFeatures: Object.freeze(['timestamp-query', 'subgroups'] as GPUFeatureName[]),
  label: 'ambit',
  dawnFlags: Object.freeze([] as string[]),
});

const BACKENDS: readonly GpuBackend[] = ['auto', 'vulkan', 'opengles'];

/**
 * Limits requested at the adapter's own values: without this the device gets the WebGPU defaults
 * (128 MiB bindings, 256 MiB buffers; in compatibility mode also 128 invocations per workgroup).
 */
export const REQUESTED_LIMITS = [
  'maxBufferSize',
  'maxStorageBufferBindingSize',
  'maxUniformBufferBindingSize',
  'maxStorageBuffersPerShaderStage',
  'maxUniformBuffersPerShaderStage',
  'maxBindGroups',
  'maxBindingsPerBindGroup',
  'maxDynamicStorageBuffersPerPipelineLayout',
  'maxComputeWorkgroupSizeX',
  'maxComputeWorkgroupSizeY',
  'maxComputeWorkgroupSizeZ',
  'maxComputeInvocationsPerWorkgroup',
  'maxComputeWorkgroupStorageSize',
  'maxComputeWorkgroupsPerDimension',
  'minStorageBufferOffsetAlignment',
  'minUniformBufferOffsetAlignment',
] as const;

export type GpuLimitName = (typeof REQUESTED_LIMITS)[number];
export type GpuLimits = Readonly<Record<GpuLimitName, number>>;

export interface GpuAdapterInfo {
  vendor: string;
  architecture: string;
  /** Device name as Dawn reports it, e.g. `llvmpipe-llvm-15-0-6-256-bits-`. */
  device: string;
  description: string;
  /** The route that found the adapter. */
  backend: 'vulkan' | 'opengles' | 'default';
  featureLevel: 'core' | 'compatibility';
}

export interface GpuLostInfo {
  /** 'destroyed' after destroy(); 'unknown' for a real loss (driver reset, out of memory, ...). */
  reason: string;
  message: string;
}

export type GpuErrorCode = 'UNAVAILABLE' | 'INVALID_ARGUMENT' | 'VALIDATION' | 'OUT_OF_MEMORY' | 'LOST' | 'SHADER';

/** Every error of this layer: message prefixed `gpu:`, saying what was expected and what came. */
export class GpuError extends Error {
  readonly code: GpuErrorCode;

  constructor(code: GpuErrorCode, message: string, options?: { cause?: unknown }) {
    super(`gpu: ${message}`, options);
    this.name = 'GpuError';
    this.code = code;
  }
}

interface WebGpuModule {
  create(flags: string[]): GPU;
  globals: Record<string, unknown>;
}

let webgpuModule: Promise<WebGpuModule> | undefined;

/** Loads `webgpu` on first use only: processes that never touch the GPU do not map the 20 MB binary. */
function loadWebGpu(): Promise<WebGpuModule> {
  webgpuModule ??= import('webgpu').then(
    (m) => {
      const mod = m as unknown as WebGpuModule;
      // The WebGPU types declare GPUBufferUsage, GPUMapMode, ... as globals; Dawn exports them
      // instead. Install those missing, never overwriting what the host already defines.
      const g = globalThis as Record<string, unknown>;
      for (const [k, v] of Object.entries(mod.globals)) if (!(k in g)) g[k] = v;
      return mod;
    },
    (err: unknown) => {
      webgpuModule = undefined;
      throw new GpuError('UNAVAILABLE', `cannot load the webgpu package: expected its dawn.node for ${process.platform}-${process.arch}, got ${errText(err)}`, { cause: err });
    },
  );
  return webgpuModule;
}

/** Validates options whole, with exact messages, before anything is created. */
export function resolveGpuOptions(options: Partial<GpuOptions> = {}): GpuOptions {
  const o: GpuOptions = { ...defaultGpuOptions, ...options };
  if (!BACKENDS.includes(o.backend)) {
    throw new GpuError('INVALID_ARGUMENT', `backend must be one of ${BACKENDS.map((b) => JSON.stringify(b)).join(', ')}, got ${showValue(o.backend)}`);
  }
  if (typeof o.allowSoftware !== 'boolean') throw new GpuError('INVALID_ARGUMENT', `allowSoftware must be a boolean, got ${showValue(o.allowSoftware)}`);
  if (typeof o.label !== 'string') throw new GpuError('INVALID_ARGUMENT', `label must be a string, got ${showValue(o.label)}`);
  if (!Array.isArray(o.optionalFeatures) || !o.optionalFeatures.every((f) => typeof f === 'string')) {
    throw new GpuError('INVALID_ARGUMENT', `optionalFeatures must be an array of feature names, got ${showValue(o.optionalFeatures)}`);
  }
  if (!Array.isArray(o.dawnFlags) || !o.dawnFlags.every((f) => typeof f === 'string' && !f.startsWith('backend='))) {
    throw new GpuError('INVALID_ARGUMENT', `dawnFlags must be an array of strings without backend= (use the backend option), got ${showValue(o.dawnFlags)}`);
  }
  return o;
}

interface Found {
  adapter: GPUAdapter;
  backend: GpuAdapterInfo['backend'];
  featureLevel: GpuAdapterInfo['featureLevel'];
  software: boolean;
  name: string;
}

/**
 * What the OpenGL ES route needs on Debian 12. Dawn (webgpu 0.6.2) dlopens the unversioned
 * `libEGL.so`, which only libegl-dev provides; libEGL.so.1 alone is not enough.
 */
const OPENGLES_HINT =
  ' (the OpenGL ES route needs libEGL.so and Mesa: apt-get install libegl1 libegl-dev libegl-mesa0 libgl1-mesa-dri; Dawn explains on stderr)';

const SOFTWARE = /llvmpipe|lavapipe|softpipe|swiftshader|microsoft basic render/i;

/** One try at one route; returns the adapter found, or the reason none was. */
async function tryRoute(
  wg: WebGpuModule,
  route: 'default' | 'vulkan' | 'opengles',
  dawnFlags: readonly string[],
): Promise<Found | string> {
  const flags = [...dawnFlags];
  if (route !== 'default') flags.push(`backend=${route}`);
  // Mesa picks its EGL platform when Dawn opens the display; without this it looks for X11 or
  // Wayland and finds no display on a server. Set before create() so Dawn's getenv sees it.
  if (route === 'opengles' && process.env.EGL_PLATFORM === undefined) process.env.EGL_PLATFORM = 'surfaceless';
  try {
    const gpu = instance(wg, flags);
    // The OpenGL ES backend offers only compatibility-mode adapters (core finds none there).
    const adapter =
      route === 'opengles'
        ? await gpu.requestAdapter({ featureLevel: 'compatibility' })
        : await gpu.requestAdapter({ powerPreference: 'high-performance' });
    if (adapter === null) return 'no adapter';
    const i = adapter.info;
    const name = i.device || i.description || i.vendor || '(unnamed)';
    const software = i.isFallbackAdapter === true || SOFTWARE.test(`${i.vendor} ${i.architecture} ${i.device} ${i.description}`);
    return {
      adapter,
      backend: route,
      featureLevel: route === 'opengles' ? 'compatibility' : 'core',
      software,
      name,
    };
  } catch (err) {
    return errText(err);
  }
}

/** One Dawn instance per set of create() flags, for the life of the process. */
const instances = new Map<string, GPU>();

/**
 * Dawn instances are created once and pinned. With webgpu 0.6.2, letting the object that create()
 * returns be garbage-collected while an adapter or device made from it is still reachable crashes
 * the process (SIGSEGV, or abort with "std::system_error: Invalid argument", or a hang inside
 * InstanceBase::ProcessEvents from the binding's setImmediate poll), even after device.destroy().
 * The package README's advice to drop the reference so that Node can exit is therefore not
 * followed: Node exits with it held. Reusing the instance also makes re-opening after a device
 * loss cheap, and bounds the instances to one per route and set of dawnFlags.
 */
function instance(wg: WebGpuModule, flags: readonly string[]): GPU {
  const key = flags.join('\u0000');
  let gpu = instances.get(key);
  if (gpu === undefined) {
    gpu = wg.create([...flags]);
    instances.set(key, gpu);
  }
  return gpu;
}

type LostCallback = (info: GpuLostInfo) => void;
type ErrorCallback = (error: GpuError) => void;

export class GpuContext {
  readonly options: GpuOptions;
  readonly adapter: GPUAdapter;
  readonly device: GPUDevice;
  readonly queue: GPUQueue;
  readonly adapterInfo: Readonly<GpuAdapterInfo>;
  /** llvmpipe, lavapipe, SwiftShader and the like: correct, but slower than the CPU engines. */
  readonly isSoftware: boolean;
  /** Features enabled on the device (those of `optionalFeatures` the adapter has). */
  readonly features: ReadonlySet<string>;
  /** The device's limits, as granted (the adapter's own values). */
  readonly limits: GpuLimits;
  /** Resolves once, when the device is lost or destroyed; never rejects. */
  readonly lost: Promise<GpuLostInfo>;

  #lostInfo: GpuLostInfo | undefined;
  #destroyed = false;
  #lostCallbacks: LostCallback[] = [];
  #errorCallbacks: ErrorCallback[] = [];
  #uncaptured = 0;
  #lastUncaptured: string | undefined;
  #staging: GPUBuffer | undefined;
  #stagingBusy = false;

  private constructor(options: GpuOptions, found: Found, device: GPUDevice) {
    this.options = options;
    this.adapter = found.adapter;
    this.device = device;
    this.queue = device.queue;
    const i = found.adapter.info;
    this.adapterInfo = Object.freeze({
      vendor: i.vendor,
      architecture: i.architecture,
      device: i.device,
      description: i.description,
      backend: found.backend,
      featureLevel: found.featureLevel,
    });
    this.isSoftware = found.software;
    this.features = new Set(device.features);
    const limits = {} as Record<GpuLimitName, number>;
    for (const k of REQUESTED_LIMITS) limits[k] = device.limits[k];
    this.limits = Object.freeze(limits);

    this.lost = device.lost.then((info) => {
      const l: GpuLostInfo = { reason: String(info.reason), message: info.message };
      this.#lostInfo = l;
      for (const cb of this.#lostCallbacks.splice(0)) invokeLater(cb, l);
      return l;
    });

    // Without a listener that prevents the default, Dawn prints each uncaptured error to stdout.
    device.addEventListener('uncapturederror', (ev) => {
      ev.preventDefault();
      const e = (ev as GPUUncapturedErrorEvent).error;
      const err = scopeError(e, 'an operation outside any error scope');
      this.#uncaptured++;
      this.#lastUncaptured = err.message;
      for (const cb of this.#errorCallbacks) invokeLater(cb, err);
    });
  }

  /**
   * Finds an adapter by the routes the options allow and opens a device on it.
   * Rejects with `gpu:` UNAVAILABLE when no acceptable adapter exists; callers fall back to the CPU.
   */
  static async open(options: Partial<GpuOptions> = {}): Promise<GpuContext> {
    const opts = resolveGpuOptions(options);
    const wg = await loadWebGpu();
    const routes: Array<'default' | 'vulkan' | 'opengles'> =
      opts.backend === 'auto' ? ['default', 'opengles'] : [opts.backend];

    const tried: string[] = [];
    let chosen: Found | undefined;
    let software: Found | undefined;
    for (const route of routes) {
      const r = await tryRoute(wg, route, opts.dawnFlags);
      if (typeof r === 'string') {
        tried.push(`${route}: ${r}`);
        continue;
      }
      if (!r.software) {
        chosen = r;
        break;
      }
      tried.push(`${route}: software adapter ${JSON.stringify(r.name)}`);
      software ??= r;
    }
    if (chosen === undefined && software !== undefined && opts.allowSoftware) chosen = software;
    if (chosen === undefined) {
      const want = opts.allowSoftware ? 'a WebGPU adapter' : 'a hardware GPU adapter (allowSoftware is false)';
      const hint = routes.includes('opengles') && software === undefined ? OPENGLES_HINT : '';
      throw new GpuError('UNAVAILABLE', `no usable adapter: expected ${want}, got ${tried.join('; ')}${hint}`);
    }

    const requiredLimits: Record<string, number> = {};
    for (const k of REQUESTED_LIMITS) {
      const v = chosen.adapter.limits[k];
      if (typeof v === 'number') requiredLimits[k] = v;
    }
    const requiredFeatures = opts.optionalFeatures.filter((f) => chosen.adapter.features.has(f));
    let device: GPUDevice;
    try {
      device = await chosen.adapter.requestDevice({ label: opts.label, requiredLimits, requiredFeatures });
    } catch (err) {
      throw new GpuError('UNAVAILABLE', `requestDevice failed on ${JSON.stringify(chosen.name)} (${chosen.backend}): expected a device with the adapter's limits and features [${requiredFeatures.join(', ')}], got ${errText(err)}`, { cause: err });
    }
    return new GpuContext(opts, chosen, device);
  }

  /** Short description for logs: `llvmpipe-llvm-15-0-6-256-bits- (opengles, compatibility, software)`. */
  get name(): string {
    const a = this.adapterInfo;
    return `${a.device || a.description || a.vendor} (${a.backend}, ${a.featureLevel}${this.isSoftware ? ', software' : ''})`;
  }

  get isLost(): boolean {
    return this.#lostInfo !== undefined;
  }

  /** Uncaptured errors seen so far, and the last one's message. */
  get uncapturedErrors(): { count: number; last: string | undefined } {
    return { count: this.#uncaptured, last: this.#lastUncaptured };
  }

  /** Calls `cb` once when the device is lost (at once, asynchronously, if it already is). Returns an unsubscribe. */
  onLost(cb: LostCallback): () => void {
    if (this.#lostInfo !== undefined) {
      invokeLater(cb, this.#lostInfo);
      return () => {};
    }
    this.#lostCallbacks.push(cb);
    return () => removeItem(this.#lostCallbacks, cb);
  }

  /** Calls `cb` for each GPU error no error scope caught. Returns an unsubscribe. */
  onError(cb: ErrorCallback): () => void {
    this.#errorCallbacks.push(cb);
    return () => removeItem(this.#errorCallbacks, cb);
  }

  /**
   * Destroys the device (lost resolves with reason 'destroyed'). Idempotent.
   * Exit behaviour (webgpu 0.6.2): a Node process exits by itself even with a device open and
   * idle, and with its Dawn instance referenced; only an unsettled GPU promise (mapAsync,
   * onSubmittedWorkDone, ...) keeps it running, while the binding re-arms a setImmediate poll,
   * and destroying the device settles those. The instance is never released: see `instance()`.
   */
  destroy(): void {
    if (this.#destroyed) return;
    this.#destroyed = true;
    this.#staging?.destroy();
    this.#staging = undefined;
    this.device.destroy();
  }

  /** destroy(), then waits for the lost promise, so that nothing of the device is pending. */
  async close(): Promise<void> {
    this.destroy();
    await this.lost;
  }

  /** A labelled buffer; size is rounded up to a multiple of 4 (at least 4) so copies and bindings are valid. */
  createBuffer(label: string, size: number, usage: GPUBufferUsageFlags): GPUBuffer {
    this.#checkOpen(`createBuffer(${JSON.stringify(label)})`);
    if (!Number.isSafeInteger(size) || size < 0) {
      throw new GpuError('INVALID_ARGUMENT', `buffer ${JSON.stringify(label)}: size must be an integer >= 0, got ${showValue(size)}`);
    }
    const bytes = Math.max(4, align4(size));
    if (bytes > this.limits.maxBufferSize) {
      throw new GpuError('OUT_OF_MEMORY', `buffer ${JSON.stringify(label)}: size must be <= maxBufferSize ${this.limits.maxBufferSize}, got ${bytes}`);
    }
    return this.device.createBuffer({ label, size: bytes, usage });
  }

  /** Queues a write of `data` at `offset`; both must be multiples of 4 bytes. */
  writeBuffer(buffer: GPUBuffer, offset: number, data: ArrayBufferView | ArrayBuffer): void {
    this.#checkOpen(`writeBuffer(${JSON.stringify(buffer.label)})`);
    const bytes = data.byteLength;
    if (!Number.isSafeInteger(offset) || offset < 0 || offset % 4 !== 0 || bytes % 4 !== 0 || offset + bytes > buffer.size) {
      throw new GpuError('INVALID_ARGUMENT', `writeBuffer ${JSON.stringify(buffer.label)}: expected offset and length multiples of 4 within ${buffer.size} bytes, got offset ${showValue(offset)}, length ${bytes}`);
    }
    if (ArrayBuffer.isView(data)) this.queue.writeBuffer(buffer, offset, data.buffer, data.byteOffset, bytes);
    else this.queue.writeBuffer(buffer, offset, data);
  }

  /**
   * Copies `size` bytes at `offset` of `buffer` (which needs COPY_SRC) into a MAP_READ staging buffer
   * and maps it. Returns a copy that outlives the mapping. One staging buffer (up to 16 MiB) is kept
   * and grown; a larger read, or one issued while it is in use, gets a temporary one.
   */
  readBuffer(buffer: GPUBuffer, offset = 0, size = buffer.size - offset): Promise<ArrayBuffer> {
    return this.#read('readBuffer', undefined, buffer, offset, size);
  }

  /**
   * Records the read-back copy into `encoder` (after the work it already holds), submits it and
   * maps the result: one submit per round trip instead of readBuffer's two (about 0.04 ms less
   * on llvmpipe).
   */
  submitAndRead(encoder: GPUCommandEncoder, buffer: GPUBuffer, offset = 0, size = buffer.size - offset): Promise<ArrayBuffer> {
    return this.#read('submitAndRead', encoder, buffer, offset, size);
  }

  async #read(what: string, encoder: GPUCommandEncoder | undefined, buffer: GPUBuffer, offset: number, size: number): Promise<ArrayBuffer> {
    const name = `${what} ${JSON.stringify(buffer.label)}`;
    this.#checkOpen(name);
    if (!Number.isSafeInteger(offset) || !Number.isSafeInteger(size) || offset < 0 || size < 0 || offset % 4 !== 0 || size % 4 !== 0 || offset + size > buffer.size) {
      throw new GpuError('INVALID_ARGUMENT', `${name}: expected offset and size multiples of 4 within ${buffer.size} bytes, got offset ${showValue(offset)}, size ${showValue(size)}`);
    }
    if (size === 0) {
      if (encoder !== undefined) this.queue.submit([encoder.finish()]);
      return new ArrayBuffer(0);
    }
    let staging: GPUBuffer;
    let temporary = false;
    if (!this.#stagingBusy && size <= KEPT_STAGING_MAX) {
      if (this.#staging === undefined || this.#staging.size < size) {
        this.#staging?.destroy();
        this.#staging = this.createBuffer('ambit.readback', nextPow2(size), GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST);
      }
      staging = this.#staging;
      this.#stagingBusy = true;
    } else {
      staging = this.createBuffer('ambit.readback.temp', size, GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST);
      temporary = true;
    }
    try {
      const enc = encoder ?? this.device.createCommandEncoder({ label: `read ${buffer.label}` });
      enc.copyBufferToBuffer(buffer, offset, staging, 0, size);
      this.queue.submit([enc.finish()]);
      try {
        await staging.mapAsync(GPUMapMode.READ, 0, size);
      } catch (err) {
        if (this.#lostInfo !== undefined || this.#destroyed) {
          throw new GpuError('LOST', `${name}: expected the device to be alive, got it lost (${this.#lostInfo?.reason ?? 'destroyed'})`, { cause: err });
        }
        throw new GpuError('VALIDATION', `${name}: mapAsync failed: ${errText(err)}`, { cause: err });
      }
      const copy = staging.getMappedRange(0, size).slice(0);
      staging.unmap();
      return copy;
    } finally {
      if (temporary) staging.destroy();
      else this.#stagingBusy = false;
    }
  }

  /**
   * Runs `fn` inside a validation error scope and throws `gpu: validation error in <label>: ...` if
   * any GPU call in it was invalid. Scopes are a per-device stack: nest calls, never interleave two
   * that await at the same time.
   */
  async withValidation<T>(label: string, fn: () => T | Promise<T>): Promise<T> {
    this.#checkOpen(`withValidation(${JSON.stringify(label)})`);
    this.device.pushErrorScope('validation');
    let result: T;
    try {
      result = await fn();
    } catch (err) {
      await this.device.popErrorScope().catch(() => null);
      throw err;
    }
    const e = await this.device.popErrorScope();
    if (e !== null) throw scopeError(e, label);
    return result;
  }

  /** The source of `src/engines/gpu/<name>.wgsl`, read from the source tree (tsc does not copy .wgsl files). */
  loadShader(name: string): string {
    return loadShader(name);
  }

  /**
   * Compiles `src/engines/gpu/<name>.wgsl` (or `code`), labelled `name`. Rejects on errors, and on warnings
   * too: Dawn prints those to stdout, which would break the JSON log.
   */
  async compileShader(name: string, code: string = loadShader(name)): Promise<GPUShaderModule> {
    this.#checkOpen(`compileShader(${JSON.stringify(name)})`);
    // The scope keeps a broken shader's error out of the uncaptured-error stream; the compilation
    // messages below say more (line and column).
    this.device.pushErrorScope('validation');
    const module = this.device.createShaderModule({ label: name, code });
    const info = await module.getCompilationInfo();
    const scoped = await this.device.popErrorScope();
    const bad = info.messages.filter((m) => m.type === 'error' || m.type === 'warning');
    if (bad.length === 0 && scoped !== null) throw scopeError(scoped, `shader ${JSON.stringify(name)}`);
    if (bad.length > 0) {
      const lines = bad.map((m) => `${m.lineNum}:${m.linePos} ${m.type}: ${m.message}`).join('; ');
      throw new GpuError('SHADER', `shader ${JSON.stringify(name)}: expected no errors or warnings, got ${lines}`);
    }
    return module;
  }

  /**
   * The dispatch grid for `groups` workgroups: 1-D up to maxComputeWorkgroupsPerDimension, then
   * 2-D. Kernels rebuild the linear index as `gid.x + gid.y * num_workgroups.x * WG` and bound-check it.
   */
  grid(groups: number): [number, number] {
    const max = this.limits.maxComputeWorkgroupsPerDimension;
    if (!Number.isSafeInteger(groups) || groups < 0 || groups > max * max) {
      throw new GpuError('INVALID_ARGUMENT', `grid: workgroups must be an integer in [0, ${max * max}], got ${showValue(groups)}`);
    }
    if (groups <= max) return [groups, groups === 0 ? 0 : 1];
    const y = Math.ceil(groups / max);
    return [Math.ceil(groups / y), y];
  }

  #checkOpen(what: string): void {
    if (this.#destroyed || this.#lostInfo !== undefined) {
      throw new GpuError('LOST', `${what}: expected an open device, got one ${this.#destroyed ? 'destroyed' : `lost (${this.#lostInfo?.reason}: ${this.#lostInfo?.message})`}`);
    }
  }
}

/** Largest staging buffer kept between reads; larger reads allocate and free their own. */
const KEPT_STAGING_MAX = 16 << 20;

const shaderCache = new Map<string, string>();
let shaderDir: string | undefined;
const GPU_SOURCE = join('src', 'engines', 'gpu');

/**
 * The `src/engines/gpu/` folder of the source tree: below the nearest ancestor of this module that
 * holds package.json and that folder. Found from the source (tests through a loader) and from
 * `dist/src/engines/gpu/device.js` (tsc does not copy .wgsl files).
 */
export function gpuSourceDir(): string {
  if (shaderDir !== undefined) return shaderDir;
  const start = dirname(fileURLToPath(import.meta.url));
  for (let dir = start; ; dir = dirname(dir)) {
    if (existsSync(join(dir, 'package.json')) && existsSync(join(dir, GPU_SOURCE))) return (shaderDir = join(dir, GPU_SOURCE));
    if (dirname(dir) === dir) break;
  }
  throw new GpuError('UNAVAILABLE', `shader folder not found: expected a package.json beside ${GPU_SOURCE}/ above ${start}, got none`);
}

/** Reads `src/engines/gpu/<name>.wgsl` once and caches it. */
export function loadShader(name: string): string {
  if (typeof name !== 'string' || !/^[A-Za-z0-9_-]+(\.wgsl)?$/.test(name)) {
    throw new GpuError('INVALID_ARGUMENT', `shader name must be letters, digits, '_' or '-' (optionally ending .wgsl), got ${showValue(name)}`);
  }
  const file = name.endsWith('.wgsl') ? name : `${name}.wgsl`;
  const cached = shaderCache.get(file);
  if (cached !== undefined) return cached;
  const path = resolve(gpuSourceDir(), file);
  let code: string;
  try {
    code = readFileSync(path, 'utf8');
  } catch (err) {
    throw new GpuError('UNAVAILABLE', `shader ${JSON.stringify(name)}: expected ${path}, got ${errText(err)}`, { cause: err });
  }
  shaderCache.set(file, code);
  return code;
}

function scopeError(e: GPUError, label: string): GpuError {
  const kind = e instanceof GPUOutOfMemoryError ? 'out-of-memory' : e instanceof GPUValidationError ? 'validation' : 'internal';
  const code: GpuErrorCode = kind === 'out-of-memory' ? 'OUT_OF_MEMORY' : 'VALIDATION';
  return new GpuError(code, `${kind} error in ${label}: ${e.message.trim()}`);
}

/** Runs a callback outside the caller's stack; a throw surfaces as an uncaught exception, as with an EventEmitter. */
function invokeLater<A>(cb: (a: A) => void, arg: A): void {
  queueMicrotask(() => cb(arg));
}

function removeItem<T>(list: T[], item: T): void {
  const i = list.indexOf(item);
  if (i >= 0) list.splice(i, 1);
}

function align4(n: number): number {
  return Math.ceil(n / 4) * 4;
}

function nextPow2(n: number): number {
  let p = 4;
  while (p < n) p *= 2;
  return p;
}

function errText(err: unknown): string {
  if (err instanceof Error) return err.message.split('\n')[0];
  return String(err);
}

function showValue(v: unknown): string {
  if (typeof v === 'string') return JSON.stringify(v.length > 40 ? `${v.slice(0, 40)}…` : v);
  if (Array.isArray(v)) return `array(${v.length})`;
  if (v === null) return 'null';
  if (typeof v === 'object') return 'object';
  return String(v);
}
