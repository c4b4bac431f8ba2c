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
  /** What the sequencer holds, in a form every sequencer restores (a restart: E15 state, not answers). */
  snapshot(): SequencerSnapshot;
  /**
   * Takes over a snapshot's state, on a sequencer that has released nothing and holds no pattern:
   * `patterns` gives the pattern of every slot the snapshot holds (the caller keeps them). The
   * releases after it then answer as they would have without the restart.
   */
  restore(snapshot: SequencerSnapshot, patterns: ReadonlyMap<number, NEventPattern>): void;
}

/**
 * A sequencer's state, the same whichever sequencer made it: per pattern and element, the events
 * that still count for it (E14, E15: consumed ones are gone from steps; negations and aggregates
 * keep them) in release order; the events themselves once; the counters. Plain data (structured
 * clone or JSON with the events' values).
 */
export interface SequencerSnapshot {
  readonly version: 1;
  /** Releases so far: the next release's number. */
  readonly releases: number;
  /** The latest release's time, or null before the first. */
  readonly lastTimeMs: number | null;
  readonly evicted: number;
  readonly consumed: number;
  readonly events: readonly NEvent[];
  readonly patterns: readonly SnapshotPattern[];
}

export interface SnapshotPattern {
  readonly slot: number;
  /** Per element (steps, negations, aggregates): its records, in release order. */
  readonly elements: readonly (readonly SnapshotRecord[])[];
}

export interface SnapshotRecord {
  /** The release's number (E4). */
  readonly seq: number;
  readonly timeMs: number;
  /** Index into `events`. */
  readonly event: number;
}

/** A snapshot's event table: each event once, numbered by its first appearance. */
export class SnapshotEvents {
  readonly list: NEvent[] = [];
  private readonly at = new Map<NEvent, number>();

  index(e: NEvent): number {
    let i = this.at.get(e);
    if (i === undefined) this.at.set(e, (i = this.list.push(e) - 1));
    return i;
  }
}

/** Checks a snapshot against the patterns it is restored with; throws on a mismatch. */
export function checkSnapshot(snap: SequencerSnapshot, patterns: ReadonlyMap<number, NEventPattern>, elementsOf: (p: NEventPattern) => number): void {
  if (snap.version !== 1) throw new Error(`sequencer snapshot: version ${String(snap.version)} is not 1`);
  const slots = new Set(snap.patterns.map((p) => p.slot));
  if (slots.size !== snap.patterns.length || slots.size !== patterns.size || [...slots].some((s) => !patterns.has(s))) {
    throw new Error(`sequencer snapshot: slots ${[...slots].join(',')} are not the patterns given (${[...patterns.keys()].join(',')})`);
  }
  for (const p of snap.patterns) {
    const n = elementsOf(patterns.get(p.slot)!);
    if (p.elements.length !== n) throw new Error(`sequencer snapshot: slot ${p.slot} has ${p.elements.length} elements, its pattern ${n}`);
    for (const recs of p.elements) {
      for (let i = 0; i < recs.length; i++) {
        const r = recs[i];
        if (!(r.event >= 0 && r.event < snap.events.length) || !(r.seq < snap.releases) || (i > 0 && recs[i - 1].seq >= r.seq)) {
          throw new Error(`sequencer snapshot: slot ${p.slot} holds a record out of order or out of range`);
        }
      }
    }
  }
}

export interface PatternHits {
  readonly slot: number;
  readonly elements: readonly number[];
}

/** One release of a batch: what `Sequencer.release` takes. */
export interface BatchRelease {
  readonly event: NEvent;
  readonly timeMs: number;
  readonly hits: readonly PatternHits[];
}

/**
 * A sequencer that searches a batch of releases at once (the GPU's, src/engines/gpu/gtrex.ts):
 * `Sequencer` with `releaseBatch` for `release`. Batches run one after another; a pattern
 * removed while a batch is in flight gets no matches from it. `snapshot` is taken between batches.
 */
export interface BatchSequencer extends Omit<Sequencer, 'release'> {
  /** The matches of each release, as `release` would have answered them one by one. */
  releaseBatch(batch: readonly BatchRelease[]): Promise<PatternMatch[][]>;
  close(): Promise<void>;
}
