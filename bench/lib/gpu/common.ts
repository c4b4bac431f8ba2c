/**
 * What every GPU suite shares: building engines (the GPU engine always on its GPU path,
 * cpuBelowFilters: 0), what the adapter is, whether the GPU served cleanly, memory figures, and
 * per-event timing.
 */
import { type GpuMatcherOptions, GpuMatcher } from '../../../src/engines/gpu/matcher.js';
import type { Matcher } from '../../../src/engines/index.js';
import type { Event } from '../../../src/model/types.js';
import { createEngine, warmUp } from '../cases.js';
import { collect, errText, now } from '../measure.js';
import { Progress } from '../progress.js';
import { sink } from '../sink.js';
import type { GpuHealth, GpuInfo, MemoryPoint } from './schema.js';

/** What every suite needs to build engines. */
export interface GpuEnv {
  allowSoftware: boolean;
  /** Passed to GpuMatcher.create besides gpu.allowSoftware and cpuBelowFilters (maxBatch, inFlight). */
  gpuOptions: Partial<Pick<GpuMatcherOptions, 'maxBatch' | 'inFlight' | 'cpuMirror'>>;
  seed: number;
}

/**
 * Dawn rounds timestamp-query values (as browsers do, against timing attacks) unless told not to;
 * the rounding is coarser than a Loc pass at small sizes.
 */
export const PROFILE_DAWN_FLAGS: readonly string[] = ['disable-dawn-features=timestamp_quantization'];

/** The GPU engine on its GPU path at every size; the CPU engines from the registry. */
export async function makeEngine(name: string, env: GpuEnv, profile = false): Promise<Matcher> {
  if (name === 'gpu') {
    return GpuMatcher.create({ ...env.gpuOptions, gpu: { allowSoftware: env.allowSoftware, ...(profile ? { dawnFlags: PROFILE_DAWN_FLAGS } : {}) }, cpuBelowFilters: 0, select: 'gpu', profile });
  }
  return createEngine(name);
}

/** makeEngine, or null after recording why the engine is skipped (no adapter, ...). */

export async function engineOrSkip(name: string, env: GpuEnv, skip: SkipFn, what: string): Promise<Matcher | null> {
  try {
    return await makeEngine(name, env);
  } catch (err) {
    skip(name, what, errText(err));
    return null;
  }
}

export function gpuInfo(m: Matcher): GpuInfo | null {
  if (!(m instanceof GpuMatcher) || m.context === null) return null;
  const c = m.context;
  const a = c.adapterInfo;
  return {
    adapter: String(m.stats().extra?.adapter ?? c.name),
    vendor: a.vendor,
    architecture: a.architecture,
    device: a.device,
    description: a.description,
    backend: a.backend,
    featureLevel: a.featureLevel,
    software: c.isSoftware,
    features: [...c.features].sort(),
    maxBufferSize: c.limits.maxBufferSize,
    maxStorageBufferBindingSize: c.limits.maxStorageBufferBindingSize,
  };
}

export function health(m: Matcher): GpuHealth | null {
  if (!(m instanceof GpuMatcher)) return null;
  const x = m.stats().extra ?? {};
  const n = (k: string): number => (typeof x[k] === 'number' ? (x[k] as number) : 0);
  const errs = m.context?.uncapturedErrors;
  return {
    path: String(x.path ?? 'unknown'),
    gpuEvents: n('gpuEvents'),
    cpuEvents: n('cpuEvents'),
    fallbackEvents: n('fallbackEvents'),
    overflowEvents: n('overflowEvents'),
    deviceLosses: n('deviceLosses'),
    uncapturedErrors: errs?.count ?? 0,
    lastError: errs?.last?.split('\n')[0] ?? null,
  };
}

/** One line when the GPU did not serve every event itself. */
export function healthProblem(h: GpuHealth | null): string | null {
  if (h === null) return null;
  const issues: string[] = [];
  if (h.path !== 'gpu') issues.push(`path ${h.path}`);
  if (h.cpuEvents > 0) issues.push(`${h.cpuEvents} events answered by the CPU (${h.fallbackEvents} device fallback, ${h.overflowEvents} overflow)`);
  if (h.deviceLosses > 0) issues.push(`${h.deviceLosses} device losses`);
  if (h.uncapturedErrors > 0) issues.push(`${h.uncapturedErrors} device errors, last: ${h.lastError}`);
  return issues.length === 0 ? null : issues.join('; ');
}

export function memoryPoint(m: Matcher): MemoryPoint {
  collect();
  const u = process.memoryUsage();
  const s = m.stats();
  const gb = s.extra?.gpuBytes;
  const gpf = s.extra?.gpuBytesPerFilter;
  return {
    engineBytes: s.memoryBytes,
    gpuBytes: typeof gb === 'number' ? gb : null,
    gpuBytesPerFilter: typeof gpf === 'number' ? gpf : null,
    heapUsedBytes: u.heapUsed,
    arrayBuffersBytes: u.arrayBuffers,
    rssBytes: u.rss,
  };
}

export type SkipFn = (engine: string, detail: string, reason: string) => void;

/**
 * Each event awaited on its own after the CPU benchmark's warm-up (`warmUp`: the first event alone,
 * then at least `warmup` events and 300 ms); ns per event and the answers of the timed pass.
 */
export async function timeEvents(m: Matcher, events: readonly Event[], warmup: number, reps: number, label: string): Promise<{ ns: Float64Array; answers: string[][] }> {
  await warmUp(m, events, warmup);
  const ns = new Float64Array(events.length * reps);
  const answers: string[][] = new Array(events.length);
  const p = new Progress(`${label}: match ${events.length} events${reps > 1 ? ` x${reps}` : ''}`, ns.length);
  let k = 0;
  for (let r = 0; r < reps; r++) {
    for (let i = 0; i < events.length; i++) {
      const t0 = now();
      const ids = await m.match(events[i]);
      ns[k++] = Number(now() - t0);
      if (r === 0) answers[i] = ids;
      sink(ids);
      p.tick();
    }
  }
  p.end();
  return { ns, answers };
}
