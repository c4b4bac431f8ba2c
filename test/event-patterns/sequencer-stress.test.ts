/**
 * Randomized comparison of CdpSequencer against ReferenceSequencer through `release()` alone
 * (docs/semantics.md E7–E17), with hits made by hand instead of an element engine: long streams
 * (past the 1024-drop compaction of Run), a small maxRetainedPerElement, few distinct attribute
 * values of mixed types (1, '1', true, -0, 0, missing), an event often hitting several elements of
 * one pattern, several patterns hit by one release, consuming steps, and patterns added and
 * removed mid-stream. Every release's matches and the statistics must agree.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { CdpSequencer } from '../../src/engines/event-patterns/cdp.js';
import { ReferenceSequencer } from '../../src/engines/event-patterns/reference.js';
import type { PatternHits, PatternMatch, Sequencer } from '../../src/engines/event-patterns/sequencer.js';
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
interface Installed {
  slot: number;
  pattern: NEventPattern;
  hitTypes: string[][];
}

function randomPattern(r: Prng, k: StressKnobs): EventPattern {
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

function makeEvent(r: Prng, id: number): NEvent {
  const attributes: Record<string, Value> = { type: r.pick(TYPES) };
  const zone = value(r);
  if (zone !== undefined) attributes.zone = zone;
  const v = value(r);
  if (v !== undefined) attributes.v = v;
  return validateEvent({ id: `e${id}`, lat: 0, lon: 0, attributes }, LIMITS);
}

const matchKey = (m: PatternMatch): string => `${m.slot}|${m.events.map((e, i) => `${e.id}@${m.timesMs[i]}`).join(',')}|${JSON.stringify(m.aggregates)}`;

function install(r: Prng, k: StressKnobs, slot: number, seqs: Sequencer[]): Installed {
  const pattern = validateEventPattern('pattern', randomPattern(r, k), LIMITS, DEFAULT_PATTERN_LIMITS);
  // Each element is hit by one or two of three types: steps often share types, so one event
  // regularly hits several elements (step 1 and step 2 with one filter, say).
  const hitTypes = patternElements(pattern).map(() => (r.chance(0.5) ? [r.pick(TYPES)] : [r.pick(TYPES), r.pick(TYPES)]));
  for (const s of seqs) s.addPattern(slot, pattern);
  return { slot, pattern, hitTypes };
}

export interface StressResult {
  /** The first disagreement, or null. */
  diff: string | null;
  matches: number;
  stats: { retained: number; evicted: number; consumed: number };
  restarts: number;
}

/** Runs one seed through both sequencers. */
export function compareSequencers(seed: number, k: StressKnobs): StressResult {
  const r = new Prng(seed);
  let ref = new ReferenceSequencer({ maxRetainedPerElement: k.maxRetained });
  let cdp = new CdpSequencer({ maxRetainedPerElement: k.maxRetained });
  const seqs: Sequencer[] = [ref, cdp];
  let restarts = 0;
  const live: Installed[] = [];
  let slot = 0;
  for (let i = 0; i < k.patterns; i++) live.push(install(r, k, slot++, seqs));
  let t = 1000;
  let matches = 0;
  for (let e = 0; e < k.events; e++) {
    if (r.chance(k.churn) && live.length > 0) {
      const gone = live.splice(r.int(0, live.length - 1), 1)[0];
      for (const s of seqs) s.removePattern(gone.slot);
    }
    if (r.chance(k.churn)) live.push(install(r, k, slot++, seqs));
    if (k.restartEvery !== undefined && e > 0 && e % k.restartEvery === 0) {
      const a = ref.snapshot();
      const b = cdp.snapshot();
      if (JSON.stringify(a) !== JSON.stringify(b)) return { diff: `seed ${seed}, release ${e}: the snapshots differ`, matches, stats: ref.stats(), restarts };
      const patterns = new Map(live.map((p) => [p.slot, p.pattern]));
      ref = new ReferenceSequencer({ maxRetainedPerElement: k.maxRetained });
      ref.restore(structuredClone(b), patterns);
      cdp = new CdpSequencer({ maxRetainedPerElement: k.maxRetained });
      cdp.restore(structuredClone(a), patterns);
      seqs[0] = ref;
      seqs[1] = cdp;
      restarts++;
    }
    t += r.int(0, k.maxGap);
    const ev = makeEvent(r, e);
    const type = ev.values[ev.names.indexOf('type')] as string;
    const hits: PatternHits[] = [];
    for (const p of live) {
      const elements: number[] = [];
      p.hitTypes.forEach((ts, el) => {
        if (ts.includes(type)) elements.push(el);
      });
      if (elements.length > 0) hits.push({ slot: p.slot, elements });
    }
    const a = ref.release(ev, t, hits).map(matchKey).sort();
    const b = cdp.release(ev, t, hits).map(matchKey).sort();
    matches += a.length;
    const sa = ref.stats();
    const sb = cdp.stats();
    if (JSON.stringify(a) !== JSON.stringify(b) || JSON.stringify(sa) !== JSON.stringify(sb)) {
      const diff = `seed ${seed}, release ${e} (time ${t}): reference ${JSON.stringify(a)} ${JSON.stringify(sa)}, cdp ${JSON.stringify(b)} ${JSON.stringify(sb)}`;
      return { diff, matches, stats: sa, restarts };
    }
  }
  return { diff: null, matches, stats: ref.stats(), restarts };
}

const SETS: [string, StressKnobs, number][] = [
  ['tight retention, consuming, 20k events', { patterns: 6, events: 20_000, maxRetained: 3, maxWindow: 40, maxGap: 3, consuming: 0.5, churn: 0 }, 6],
  ['retention 1, many ties, 20k events', { patterns: 6, events: 20_000, maxRetained: 1, maxWindow: 20, maxGap: 1, consuming: 0.5, churn: 0 }, 6],
  ['wide windows (eviction, not expiry, drops), 20k events', { patterns: 5, events: 20_000, maxRetained: 4, maxWindow: 100_000, maxGap: 2, consuming: 0.4, churn: 0 }, 6],
  ['expiry and eviction interleaved, churn', { patterns: 8, events: 10_000, maxRetained: 5, maxWindow: 60, maxGap: 5, consuming: 0.3, churn: 0.002 }, 6],
  ['no consuming, large bound', { patterns: 6, events: 5_000, maxRetained: 50, maxWindow: 200, maxGap: 4, consuming: 0, churn: 0.001 }, 4],
  ['bound above the 1024-drop compaction, no each', { patterns: 3, events: 6_000, maxRetained: 1_100, maxWindow: 2_000_000, maxGap: 2, consuming: 0.5, churn: 0, noEach: true }, 2],
  ['restarts from snapshots, restored crosswise, every 97 releases', { patterns: 6, events: 5_000, maxRetained: 4, maxWindow: 50, maxGap: 3, consuming: 0.4, churn: 0.002, restartEvery: 97 }, 4],
];

describe('CdpSequencer agrees with ReferenceSequencer over long random streams', () => {
  for (const [name, knobs, seeds] of SETS) {
    it(name, () => {
      let matches = 0;
      let evicted = 0;
      let consumed = 0;
      for (let seed = 1; seed <= seeds; seed++) {
        const res = compareSequencers(seed * 7919 + knobs.events, knobs);
        assert.equal(res.diff, null, res.diff ?? undefined);
        if (knobs.restartEvery !== undefined) assert.ok(res.restarts > 0, 'no restart');
        matches += res.matches;
        evicted += res.stats.evicted;
        consumed += res.stats.consumed;
      }
      // The workload exercises what it is meant to.
      assert.ok(matches > 0, 'no matches');
      assert.ok(evicted > 0 || knobs.maxRetained > 10, 'no evictions');
      assert.ok(consumed > 0 || knobs.consuming === 0, 'nothing consumed');
    });
  }
});
