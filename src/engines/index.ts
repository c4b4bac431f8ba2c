/** Engine registry: the names the bench, tests and (later) the service use to build a Matcher. */
import type { Matcher, MatcherOptions } from './matcher.js';
import { ReferenceMatcher } from './reference.js';

export type EngineName = 'reference';

export const ENGINES: Record<EngineName, (options?: MatcherOptions) => Matcher> = {
  reference: (o) => new ReferenceMatcher(o),
};

export type { Matcher, MatcherOptions, MatcherStats } from './matcher.js';
