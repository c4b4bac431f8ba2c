/**
 * The reference sequencer: docs/semantics.md §9 (E7–E17) read literally. It is the oracle of the
 * differential tests, so it is written to be obviously correct, not fast: every element of every
 * pattern keeps a plain array of the events recorded for it, and each terminator's search scans
 * the whole array of every step it visits.
 */
import {
  type NElementParameter,
  type NEventPattern,
  type NPatternAggregate,
  type NPatternNegation,
  elementReach,
  patternElements,
} from '../../model/event-patterns.js';
import type { NEvent } from '../../model/limits.js';
import { attrOf, compareAttr } from './compare.js';
import {
  DEFAULT_MAX_RETAINED,
  type PatternHits,
  type PatternMatch,
  type Sequencer,
  type SequencerOptions,
  type SequencerSnapshot,
  type SequencerStats,
  SnapshotEvents,
  checkSnapshot,
} from './sequencer.js';

/** An event recorded for an element: `seq` is its release number, the order ≺ (E4). */
interface Rec {
  readonly event: NEvent;
  readonly timeMs: number;
  readonly seq: number;
}

interface Slot {
  readonly pattern: NEventPattern;
  /** elementReach(pattern): how far back each element's events can still count (E16). */
  readonly reach: readonly number[];
  /** One array per element (steps, negations, aggregates), in release order. */
  readonly elements: Rec[][];
}

/** A partial or complete match: chosen[i] fills steps[i]. */
type Chosen = readonly Rec[];

/** A complete match with its aggregates' values, computed on the state its search saw. */
interface Found {
  readonly chosen: Chosen;
  readonly aggregates: readonly (number | null)[];
}

export class ReferenceSequencer implements Sequencer {
  readonly name = 'reference';
  private readonly maxRetained: number;
  private readonly slots = new Map<number, Slot>();
  private seq = 0;
  private lastTimeMs = -Infinity;
  private evicted = 0;
  private consumed = 0;

  constructor(options: SequencerOptions = {}) {
    const m = options.maxRetainedPerElement ?? DEFAULT_MAX_RETAINED;
    if (!Number.isInteger(m) || m < 1) throw new RangeError(`maxRetainedPerElement must be an integer >= 1, got ${m}`);
    this.maxRetained = m;
  }

  addPattern(slot: number, pattern: NEventPattern): void {
    if (this.slots.has(slot)) throw new Error(`slot ${slot} is in use`);
    const n = patternElements(pattern).length;
    const elements: Rec[][] = [];
    for (let i = 0; i < n; i++) elements.push([]);
    this.slots.set(slot, { pattern, reach: elementReach(pattern), elements });
  }

  removePattern(slot: number): void {
    this.slots.delete(slot);
  }

  stats(): SequencerStats {
    let retained = 0;
    for (const s of this.slots.values()) for (const arr of s.elements) retained += arr.length;
    return { retained, evicted: this.evicted, consumed: this.consumed };
  }

  snapshot(): SequencerSnapshot {
    const events = new SnapshotEvents();
    const patterns = [...this.slots].map(([slot, s]) => ({
      slot,
      elements: s.elements.map((arr) => arr.map((r) => ({ seq: r.seq, timeMs: r.timeMs, event: events.index(r.event) }))),
    }));
    return { version: 1, releases: this.seq, lastTimeMs: this.seq === 0 ? null : this.lastTimeMs, evicted: this.evicted, consumed: this.consumed, events: events.list, patterns };
  }

  restore(snap: SequencerSnapshot, patterns: ReadonlyMap<number, NEventPattern>): void {
    if (this.seq !== 0 || this.slots.size !== 0) throw new Error('restore: the sequencer is not fresh');
    checkSnapshot(snap, patterns, (p) => patternElements(p).length);
    for (const p of snap.patterns) {
      const pattern = patterns.get(p.slot)!;
      this.slots.set(p.slot, {
        pattern,
        reach: elementReach(pattern),
        elements: p.elements.map((recs) => recs.map((r) => ({ event: snap.events[r.event], timeMs: r.timeMs, seq: r.seq }))),
      });
    }
    this.seq = snap.releases;
    this.lastTimeMs = snap.lastTimeMs ?? -Infinity;
    this.evicted = snap.evicted;
    this.consumed = snap.consumed;
  }

  release(event: NEvent, timeMs: number, hits: readonly PatternHits[]): PatternMatch[] {
    if (timeMs < this.lastTimeMs) throw new Error(`release out of order: ${timeMs} after ${this.lastTimeMs}`);
    this.lastTimeMs = timeMs;
    const rec: Rec = { event, timeMs, seq: this.seq++ };
    const out: PatternMatch[] = [];
    const seen = new Set<number>();
    for (const h of hits) {
      const s = this.slots.get(h.slot);
      if (s === undefined) throw new Error(`no pattern in slot ${h.slot}`);
      if (seen.has(h.slot)) throw new Error(`slot ${h.slot} given twice in hits`);
      seen.add(h.slot);
      for (const el of h.elements) {
        if (!Number.isInteger(el) || el < 0 || el >= s.elements.length) throw new Error(`slot ${h.slot} has no element ${el}`);
      }

      // (1) E13: the terminator's search runs over the state before this event is recorded.
      let matches: Found[] = [];
      if (h.elements.includes(0)) matches = this.search(s, rec);

      // (2) E14: consumption, once all the terminator's matches are found.
      const consumedSeqs = new Set<number>();
      for (const m of matches) for (const step of s.pattern.consuming) consumedSeqs.add(m.chosen[step].seq);
      if (consumedSeqs.size > 0) {
        this.consumed += consumedSeqs.size;
        // Consumed events stop filling steps; negations and aggregates still see them.
        for (let e = 1; e < s.pattern.steps.length; e++) s.elements[e] = s.elements[e].filter((r) => !consumedSeqs.has(r.seq));
      }

      // (3) E15/E16: record the event for every element it matched, unless it was consumed.
      {
        const used = consumedSeqs.has(rec.seq);
        for (const el of h.elements) {
          if (el === 0) continue; // the terminator step keeps nothing (E15)
          if (used && el < s.pattern.steps.length) continue; // a consumed terminator fills no step
          const limit = timeMs - s.reach[el];
          const arr = s.elements[el].filter((r) => r.timeMs >= limit);
          arr.push(rec);
          while (arr.length > this.maxRetained) {
            arr.shift();
            this.evicted++;
          }
          s.elements[el] = arr;
        }
      }

      for (const m of matches) {
        out.push({ slot: h.slot, events: m.chosen.map((r) => r.event), timesMs: m.chosen.map((r) => r.timeMs), aggregates: m.aggregates });
      }
    }
    return out;
  }

  /** E7–E12: every match the terminator `t` completes, searched over the slot's current state. */
  private search(s: Slot, t: Rec): Found[] {
    const p = s.pattern;
    const complete: Found[] = [];
    const extend = (chosen: Chosen): void => {
      const i = chosen.length;
      if (i === p.steps.length) {
        const aggregates = this.aggregates(s, chosen);
        if (aggregates !== null) complete.push({ chosen, aggregates });
        return;
      }
      const step = p.steps[i];
      const prev = chosen[i - 1];
      const valid: Rec[] = [];
      for (const e of s.elements[i]) {
        // (a) matched steps[i] and (d) still retained: it is in the step's array.
        if (!(e.seq < prev.seq)) continue; // (b)
        if (!(prev.timeMs - e.timeMs <= step.withinMs)) continue; // (c)
        const next = [...chosen, e];
        if (!this.decidedAtHold(s, i, next)) continue; // (e), (f)
        valid.push(e);
      }
      valid.sort((x, y) => x.seq - y.seq);
      let taken: Rec[];
      if (step.selection === 'each') taken = valid;
      else if (valid.length === 0) taken = [];
      else if (step.selection === 'last') taken = [valid[valid.length - 1]];
      else taken = [valid[0]];
      for (const e of taken) extend([...chosen, e]);
    };
    const start: Chosen = [t];
    // Negations that refer to the terminator alone are decided at step 0 (E10).
    if (this.decidedAtHold(s, 0, start)) extend(start);
    return complete;
  }

  /** E7 (e) and (f): the parameters and negations decided at step `i` hold for `chosen` (steps 0..i filled). */
  private decidedAtHold(s: Slot, i: number, chosen: Chosen): boolean {
    const p = s.pattern;
    for (const par of p.parameters) {
      if (par.at !== i) continue;
      const l = attrOf(chosen[par.left.step].event, par.left.attribute);
      const r = attrOf(chosen[par.right.step].event, par.right.attribute);
      if (!compareAttr(par.op, l, r)) return false;
    }
    for (let k = 0; k < p.negations.length; k++) {
      const n = p.negations[k];
      if (n.at !== i) continue;
      if (this.negationViolated(s, p.steps.length + k, n, chosen)) return false;
    }
    return true;
  }

  /** E10: some retained event of the negation's element lies in its interval and satisfies its parameters. */
  private negationViolated(s: Slot, element: number, n: NPatternNegation, chosen: Chosen): boolean {
    for (const x of s.elements[element]) {
      let inside: boolean;
      if (n.between !== null) {
        // between [a, b] with a < b: e_b ≺ x ≺ e_a.
        const ea = chosen[n.between[0]];
        const eb = chosen[n.between[1]];
        inside = eb.seq < x.seq && x.seq < ea.seq;
      } else {
        const es = chosen[n.before as number];
        inside = x.seq < es.seq && es.timeMs - x.timeMs <= n.withinMs;
      }
      if (inside && paramsHold(n.parameters, x, chosen)) return true;
    }
    return false;
  }

  /** E12: the set S of an aggregate, in ≺ order. */
  private aggregateSet(s: Slot, element: number, a: NPatternAggregate, chosen: Chosen): Rec[] {
    const es = chosen[a.before];
    const set: Rec[] = [];
    for (const x of s.elements[element]) {
      if (!(x.seq < es.seq)) continue;
      if (!(es.timeMs - x.timeMs <= a.withinMs)) continue;
      if (!paramsHold(a.parameters, x, chosen)) continue;
      if (a.fn !== 'count' && typeof attrOf(x.event, a.attribute as string) !== 'number') continue;
      set.push(x);
    }
    set.sort((x, y) => x.seq - y.seq);
    return set;
  }

  /** E12: an aggregate's value over a complete sequence; null where it does not exist. */
  private aggregate(s: Slot, element: number, a: NPatternAggregate, chosen: Chosen): number | null {
    const set = this.aggregateSet(s, element, a, chosen);
    if (a.fn === 'count') return set.length;
    const values = set.map((x) => attrOf(x.event, a.attribute as string) as number);
    let sum = 0;
    for (const v of values) sum += v;
    switch (a.fn) {
      case 'sum':
        return sum;
      case 'avg':
        return values.length === 0 ? null : sum / values.length;
      case 'min':
        return values.length === 0 ? null : values.reduce((m, v) => Math.min(m, v)) + 0; // -0 is reported as 0
      case 'max':
        return values.length === 0 ? null : values.reduce((m, v) => Math.max(m, v)) + 0;
    }
  }

  /**
   * E12: the aggregates' values over a complete sequence, in the pattern's order; null when some
   * aggregate's condition fails (no value, or `value op where.value` does not hold): no match.
   */
  private aggregates(s: Slot, chosen: Chosen): (number | null)[] | null {
    const p = s.pattern;
    const values: (number | null)[] = [];
    for (let k = 0; k < p.aggregates.length; k++) {
      const a = p.aggregates[k];
      const v = this.aggregate(s, p.steps.length + p.negations.length + k, a, chosen);
      if (a.where !== null && (v === null || !compareAttr(a.where.op, v, a.where.value))) return null;
      values.push(v);
    }
    return values;
  }
}

/** E11: `x.attribute op e_step.stepAttribute` for every parameter. */
function paramsHold(params: readonly NElementParameter[], x: Rec, chosen: Chosen): boolean {
  for (const q of params) {
    if (!compareAttr(q.op, attrOf(x.event, q.attribute), attrOf(chosen[q.step].event, q.stepAttribute))) return false;
  }
  return true;
}
