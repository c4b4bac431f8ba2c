/**
 * The sequence layer of event-pattern matching (docs/semantics.md §9): what every pattern engine
 * implements. It is handed events already released in order (E3, E4), each with the pattern
 * elements it matched (E5; the filters are matched by an ordinary engine beforehand), and answers
 * the matches each terminator completes. Two implementations: `ReferenceSequencer` (the rules
 * read literally, for differential tests) and `CdpSequencer` (columns per element, searched
 * backwards from the terminator, as the CDP algorithm of T-Rex).
 */
import type { NEvent } from '../../model/limits.js';
import type { NEventPattern } from '../../model/event-patterns.js';

/** One complete match (E9, E20). */
export interface PatternMatch {
  /** The pattern's slot, as given to `addPattern`. */
  readonly slot: number;
  /** The events filling the steps: events[i] fills steps[i]; events[0] is the terminator. */
  readonly events: readonly NEvent[];
  /** Their event times, same order. */
  readonly timesMs: readonly number[];
  /** One value per aggregate, in the pattern's order; null where the value does not exist (E12). */
  readonly aggregates: readonly (number | null)[];
}

export interface SequencerStats {
  /** Events held for some element of some pattern. */
  retained: number;
  /** Events dropped by the retention bound while they could still have counted (E15). */
  evicted: number;
  /** Events used up by consuming steps (E14). */
  consumed: number;
}

export interface SequencerOptions {
  /** Most events an element of a pattern keeps (E15); default 10,000. */
  maxRetainedPerElement?: number;
}

export const DEFAULT_MAX_RETAINED = 10_000;

export interface Sequencer {
  readonly name: string;
  /** Installs a validated pattern under a slot number not in use; it starts with no history (E17). */
  addPattern(slot: number, pattern: NEventPattern): void;
  /** Drops a pattern and all it holds. */
  removePattern(slot: number): void;
  /**
   * Releases one event (E3): `timeMs` is not below any earlier release's. `hits` lists, for each
   * pattern that has an element the event matched, the slot and the element indices ascending
   * (steps, then negations, then aggregates: `patternElements`). Returns the matches of every
   * pattern for which the event is a terminator, grouped by slot in the order of `hits`; within a
   * slot in no particular order.
   */
  release(event: NEvent, timeMs: number, hits: readonly PatternHits[]): PatternMatch[];
  stats(): SequencerStats;
}

export interface PatternHits {
  readonly slot: number;
  readonly elements: readonly number[];
}
