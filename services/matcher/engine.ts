/**
 * Chooses the matching engine for a process that holds the matcher: the GPU engine when a
 * hardware adapter is there, else the fast CPU engine; or the engine configured by name. Engines
 * come from the one registry (src/engines/index.ts) with the engine-side limits of the hub port.
 */
import { ENGINES, ENGINE_NAMES, type EngineName, type SequencerName, openSequencer } from '../../src/engines/index.js';
import type { Matcher } from '../../src/engines/matcher.js';
import { PatternMatcher } from '../../src/engines/event-patterns/pattern-matcher.js';
import { ENGINE_SIDE_LIMITS } from '../hub/port.js';

export type EngineChoice = 'auto' | EngineName;

export const ENGINE_CHOICES: readonly EngineChoice[] = Object.freeze(['auto', ...ENGINE_NAMES]);

export interface OpenedEngine {
  engine: Matcher;
  /** Why this engine: "GPU adapter NVIDIA H200 (vulkan)", "no hardware GPU adapter: ...". */
  detail: string;
}

/** How the GPU engine is opened: `gpuCpuMirror` false keeps no CPU engine beside it (AMBIT_GPU_CPU_MIRROR=0). */
export interface EngineSettings {
  gpuCpuMirror?: boolean;
}

export async function openEngine(choice: EngineChoice, settings: EngineSettings = {}): Promise<OpenedEngine> {
  const limits = ENGINE_SIDE_LIMITS;
  if (choice === 'auto' || choice === 'gpu') {
    try {
      const options = { limits, cpuMirror: settings.gpuCpuMirror !== false };
      const engine = await ENGINES.gpu(options);
      const adapter = engine.stats().extra?.adapter;
      return { engine, detail: `GPU adapter ${typeof adapter === 'string' ? adapter : 'unknown'}${settings.gpuCpuMirror === false ? ', no CPU mirror' : ''}` };
    } catch (err) {
      if (choice === 'gpu') throw err;
      const why = err instanceof Error ? err.message : String(err);
      return { engine: await ENGINES.fast({ limits }), detail: `fast CPU engine (no GPU: ${why.split('\n')[0]})` };
    }
  }
  return { engine: await ENGINES[choice]({ limits }), detail: `${choice} engine (configured)` };
}

/**
 * The engine that matches pattern elements' filters (PatternMatcher's element engine): the
 * configured CPU engine, or the fast CPU engine beside a GPU one (a pattern's few elements are
 * matched at release, one release at a time, where a GPU round trip costs more than it saves).
 */
export async function openPatternElementEngine(choice: EngineChoice): Promise<Matcher> {
  const name: EngineName = choice === 'auto' || choice === 'gpu' ? 'fast' : choice;
  return ENGINES[name]({ limits: ENGINE_SIDE_LIMITS });
}

export interface PatternSettings {
  engine: EngineChoice;
  /** E3: how long an event may wait for earlier-timed ones (ms). */
  patternLatenessMs: number;
  /** E15: events each element keeps at most. */
  patternRetainedPerElement: number;
  /** The sequencer: the CDP (default) or the GPU's, which searches each batch of releases at once. */
  patternSequencer?: SequencerName;
}

/** The pattern matcher of a hub that serves pattern subscriptions, with its own element engine. */
export async function openPatterns(s: PatternSettings): Promise<PatternMatcher> {
  const sequencer = await openSequencer(s.patternSequencer ?? 'cdp', { maxRetainedPerElement: s.patternRetainedPerElement });
  try {
    return new PatternMatcher({ elements: await openPatternElementEngine(s.engine), sequencer, latenessMs: s.patternLatenessMs });
  } catch (err) {
    if ('releaseBatch' in sequencer) await sequencer.close();
    throw err;
  }
}

/** How often a hub with a lateness bound moves its patterns' clock: a quarter of the bound, 10 ms to 1 s (0: never). */
export function patternTickMs(latenessMs: number): number {
  return latenessMs === 0 ? 0 : Math.max(10, Math.min(1000, Math.floor(latenessMs / 4)));
}
