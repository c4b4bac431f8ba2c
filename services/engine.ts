/**
 * Chooses the matching engine for a matcher process: the GPU engine when a hardware adapter is
 * there, else the fast CPU engine. Engine subscription ids are (device, id) pairs, so the engine's
 * id limit is the ceiling while the API keeps the model's default per id.
 */
import { ENGINES, type EngineName } from '../src/engines/index.js';
import type { Matcher } from '../src/engines/matcher.js';

export type EngineChoice = 'auto' | 'gpu' | EngineName;

export const ENGINE_CHOICES: readonly EngineChoice[] = ['auto', 'gpu', 'fast', 'rtree', 'reference'];

export interface OpenedEngine {
  engine: Matcher;
  /** Why this engine: "GPU adapter NVIDIA H200 (vulkan)", "no hardware GPU adapter: ...". */
  detail: string;
}

const ENGINE_LIMITS = { maxIdBytes: 1024 };

export async function openEngine(choice: EngineChoice): Promise<OpenedEngine> {
  if (choice === 'auto' || choice === 'gpu') {
    try {
      const { GpuMatcher } = await import('../gpu/matcher.js');
      const engine = await GpuMatcher.create({ limits: ENGINE_LIMITS });
      const adapter = engine.stats().extra?.adapter;
      return { engine, detail: `GPU adapter ${typeof adapter === 'string' ? adapter : 'unknown'}` };
    } catch (err) {
      if (choice === 'gpu') throw err;
      const why = err instanceof Error ? err.message : String(err);
      return { engine: ENGINES.fast({ limits: ENGINE_LIMITS }), detail: `fast CPU engine (no GPU: ${why.split('\n')[0]})` };
    }
  }
  return { engine: ENGINES[choice]({ limits: ENGINE_LIMITS }), detail: `${choice} engine (configured)` };
}
