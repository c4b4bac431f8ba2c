/** Engine registry: the names the bench, tests and (later) the service use to build a Matcher. */
import { FastMatcher } from './fast.js';
import type { Matcher, MatcherOptions } from './matcher.js';
import { ReferenceMatcher } from './reference.js';
import { RTreeMatcher } from './rtree.js';

export type EngineName = 'reference' | 'fast' | 'rtree';

export const ENGINES: Record<EngineName, (options?: MatcherOptions) => Matcher> = {
  reference: (o) => new ReferenceMatcher(o),
  fast: (o) => new FastMatcher(o),
  rtree: (o) => new RTreeMatcher(o),
};

export { FastMatcher, ReferenceMatcher, RTreeMatcher };
export type { Matcher, MatcherOptions, MatcherStats } from './matcher.js';
