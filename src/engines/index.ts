/**
 * Engine registry: the names the service, the benchmarks and the tests build a Matcher by.
 * `ENGINES` holds every engine behind one async factory (the GPU engine needs an adapter and
 * compiled kernels before it can answer); `CPU_ENGINES` holds the ones that construct at once.
 * The GPU module is imported only when asked for, so a CPU-only process never loads WebGPU.
 */
import { CdpSequencer } from './event-patterns/cdp.js';
import type { BatchSequencer, Sequencer } from './event-patterns/sequencer.js';
import { FastMatcher } from './fast.js';
import type { Matcher, MatcherOptions } from './matcher.js';
import { ReferenceMatcher } from './reference.js';
import { RTreeMatcher } from './rtree.js';

export type CpuEngineName = 'reference' | 'fast' | 'rtree';
export type EngineName = CpuEngineName | 'gpu';

export const CPU_ENGINES: Readonly<Record<CpuEngineName, (options?: MatcherOptions) => Matcher>> = Object.freeze({
  reference: (o?: MatcherOptions) => new ReferenceMatcher(o),
  fast: (o?: MatcherOptions) => new FastMatcher(o),
  rtree: (o?: MatcherOptions) => new RTreeMatcher(o),
});

/** In the order a service would prefer them. */
export const ENGINES: Readonly<Record<EngineName, (options?: MatcherOptions) => Promise<Matcher>>> = Object.freeze({
  /** Rejects when there is no usable adapter (GpuError UNAVAILABLE) or the kernels do not compile. */
  gpu: async (o?: MatcherOptions) => (await import('./gpu/matcher.js')).GpuMatcher.create(o),
  fast: async (o?: MatcherOptions) => CPU_ENGINES.fast(o),
  rtree: async (o?: MatcherOptions) => CPU_ENGINES.rtree(o),
  reference: async (o?: MatcherOptions) => CPU_ENGINES.reference(o),
});

export const ENGINE_NAMES = Object.freeze(Object.keys(ENGINES) as EngineName[]);

/** Pattern sequencers (docs/semantics.md §9): the CDP on the CPU, or the GPU's (GTrex, batches of releases). */
export type SequencerName = 'cdp' | 'gpu';
export const SEQUENCER_NAMES: readonly SequencerName[] = Object.freeze(['cdp', 'gpu']);

/** A pattern sequencer by name; 'gpu' rejects where there is no usable adapter (GpuError UNAVAILABLE). */
export async function openSequencer(name: SequencerName, options: { maxRetainedPerElement?: number } = {}): Promise<Sequencer | BatchSequencer> {
  if (name === 'gpu') return (await import('./gpu/gtrex.js')).GtrexSequencer.create(options);
  return new CdpSequencer(options);
}

export { FastMatcher, ReferenceMatcher, RTreeMatcher };
export type { Matcher, MatcherOptions, MatcherStats } from './matcher.js';
