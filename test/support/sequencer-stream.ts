/**
 * Random pattern streams for the sequencer tests (docs/semantics.md E7–E17), with hits made by hand
 * instead of an element engine: patterns of 1–4 steps with every selection, parameters,
 * negations, aggregates with conditions and (by a knob) consuming steps, and events of three types
 * whose attributes are few values of mixed types (1, '1', true, -0, 0, missing).
 */
import {
  type AggregateFn,
  type CompareOp,
  DEFAULT_PATTERN_LIMITS,
  type EventPattern,
  type NEventPattern,
  type Selection,
  patternElements,
  validateEventPattern,
} from '../../src/model/event-patterns.js';
import type { PatternHits, PatternMatch } from '../../src/engines/event-patterns/sequencer.js';
import { type NEvent, resolveLimits, validateEvent } from '../../src/model/limits.js';
import type { Value } from '../../src/model/types.js';
import { Prng } from '../../src/workload/prng.js';

const LIMITS = resolveLimits();
const TYPES = ['A', 'B', 'C'];
const ANY = { constraints: [{ name: 'type', op: 'exists' as const }] };

export interface StressKnobs {
  patterns: number;
  events: number;
  maxRetained: number;
  maxWindow: number;
  /** Largest time step between two releases. */
  maxGap: number;
  /** Probability of consuming steps in a pattern. */
  consuming: number;
  /** Probability of a pattern being removed or added at a release. */
  churn: number;
  /** Leave out `each` (whose partial matches multiply with a large retention bound). */
  noEach?: boolean;
  /**
   * Every this many releases, both sequencers are snapshot (the two snapshots must be equal) and
   * replaced by fresh ones restored crosswise: the reference from the CDP's, the CDP from the
   * reference's.
   */
  restartEvery?: number;
}

/** A pattern and, per element, the event types whose events hit it. */
export interface Installed {
  slot: number;
  pattern: NEventPattern;
  hitTypes: string[][];
}

export function randomPattern(r: Prng, k: StressKnobs): EventPattern {
  const n = r.int(1, 4);
  const names = ['t', 's1', 's2', 's3'].slice(0, n);
  const win = () => r.int(1, k.maxWindow);
  const p: EventPattern = {
    steps: names.map((name, i) =>
      i === 0 ? { name, filter: ANY } : { name, filter: ANY, selection: r.pick((k.noEach ? ['last', 'first'] : ['each', 'last', 'first']) as Selection[]), withinMs: win() },
    ),
  };
  const ops: CompareOp[] = ['eq', 'eq', 'eq', 'eq', 'ne', 'lt', 'ge'];
  const attrs = ['zone', 'zone', 'zone', 'v'];
  if (n > 1 && r.chance(0.8)) {
    p.parameters = [];
    const m = r.int(1, 3);
    for (let j = 0; j < m; j++) {
      const a = r.int(0, n - 1);
      let b = r.int(0, n - 2);
      if (b >= a) b++;
      const at = r.pick(attrs);
      p.parameters.push({ left: { step: names[a], attribute: at }, op: r.pick(ops), right: { step: names[b], attribute: r.chance(0.85) ? at : r.pick(attrs) } });
    }
  }
  if (r.chance(0.4)) {
    p.negations = [];
    const m = r.int(1, 2);
    for (let j = 0; j < m; j++) {
      const params = r.chance(0.6) ? [{ attribute: r.pick(attrs), op: r.pick(ops), step: r.pick(names), stepAttribute: r.pick(attrs) }] : [];
      if (n > 1 && r.chance(0.5)) {
        const a = r.int(0, n - 1);
        let b = r.int(0, n - 2);
        if (b >= a) b++;
        p.negations.push({ filter: ANY, between: [names[a], names[b]], parameters: params });
      } else p.negations.push({ filter: ANY, before: r.pick(names), withinMs: win(), parameters: params });
    }
  }
  if (r.chance(0.4)) {
    p.aggregates = [];
    const m = r.int(1, 2);
    for (let j = 0; j < m; j++) {
      const fn = r.pick(['count', 'sum', 'min', 'max', 'avg'] as AggregateFn[]);
      const agg: NonNullable<EventPattern['aggregates']>[number] = { name: `g${j}`, fn, filter: ANY, before: r.pick(names), withinMs: win() };
      if (fn !== 'count') agg.attribute = 'v';
      if (r.chance(0.6)) agg.parameters = [{ attribute: r.pick(attrs), op: r.pick(ops), step: r.pick(names), stepAttribute: r.pick(attrs) }];
      if (r.chance(0.3)) agg.where = { op: r.pick(['gt', 'le', 'eq'] as CompareOp[]), value: r.pick([0, 1, 2, 3]) };
      p.aggregates.push(agg);
    }
  }
  if (r.chance(k.consuming)) p.consuming = names.filter(() => r.chance(0.6));
  return p;
}

function value(r: Prng): Value | undefined {
  const x = r.float();
  if (x < 0.08) return undefined;
  if (x < 0.14) return '1';
  if (x < 0.2) return true;
  if (x < 0.26) return -0;
  return r.pick([0, 1, 2]);
}

export function makeEvent(r: Prng, id: number): NEvent {
  const attributes: Record<string, Value> = { type: r.pick(TYPES) };
  const zone = value(r);
  if (zone !== undefined) attributes.zone = zone;
  const v = value(r);
  if (v !== undefined) attributes.v = v;
  return validateEvent({ id: `e${id}`, lat: 0, lon: 0, attributes }, LIMITS);
}

export const matchKey = (m: PatternMatch): string => `${m.slot}|${m.events.map((e, i) => `${e.id}@${m.timesMs[i]}`).join(',')}|${JSON.stringify(m.aggregates)}`;

export function install(r: Prng, k: StressKnobs, slot: number, seqs: readonly { addPattern(slot: number, p: NEventPattern): void }[]): Installed {
  const pattern = validateEventPattern('pattern', randomPattern(r, k), LIMITS, DEFAULT_PATTERN_LIMITS);
  // Each element is hit by one or two of three types: steps often share types, so one event
  // regularly hits several elements (step 1 and step 2 with one filter, say).
  const hitTypes = patternElements(pattern).map(() => (r.chance(0.5) ? [r.pick(TYPES)] : [r.pick(TYPES), r.pick(TYPES)]));
  for (const s of seqs) s.addPattern(slot, pattern);
  return { slot, pattern, hitTypes };
}


/** The hits of `ev` on the installed patterns: each element whose types include the event's. */
export function hitsOf(live: readonly Installed[], ev: NEvent): PatternHits[] {
  const type = ev.values[ev.names.indexOf('type')] as string;
  const hits: PatternHits[] = [];
  for (const p of live) {
    const elements: number[] = [];
    p.hitTypes.forEach((ts, el) => {
      if (ts.includes(type)) elements.push(el);
    });
    if (elements.length > 0) hits.push({ slot: p.slot, elements });
  }
  return hits;
}
