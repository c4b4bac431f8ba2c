/**
 * The sequence layer of event patterns (docs/semantics.md §9, E3–E17), as a contract every
 * `Sequencer` implements. Events are released directly with hand-built hits, so the cases do not
 * depend on filter matching; every expected answer is computed by hand from the rules cited in the
 * test's name. Matches are compared as multisets (E9): one key per match, `ids|aggregates`, sorted.
 *
 * One file because it is one contract: every case runs against each sequencer in `SEQUENCERS`, and
 * the cases share the harness that checks the shape of every match.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { CdpSequencer } from '../../src/engines/event-patterns/cdp.js';
import { compareAttr } from '../../src/engines/event-patterns/compare.js';
import { ReferenceSequencer } from '../../src/engines/event-patterns/reference.js';
import type { PatternHits, PatternMatch, Sequencer, SequencerOptions } from '../../src/engines/event-patterns/sequencer.js';
import { type NEventPattern, resolvePatternLimits, validateEventPattern } from '../../src/model/event-patterns.js';
import { DEFAULT_LIMITS, type NEvent, validateEvent } from '../../src/model/limits.js';
import type { Value } from '../../src/model/types.js';

export const SEQUENCERS: Array<[string, (o?: SequencerOptions) => Sequencer]> = [
  ['reference', (o) => new ReferenceSequencer(o)],
  ['cdp', (o) => new CdpSequencer(o)],
];

type Attrs = Record<string, Value>;

function ev(id: string, attributes: Attrs = {}): NEvent {
  return validateEvent({ id, lat: 0, lon: 0, attributes }, DEFAULT_LIMITS);
}

/** The default limits, but room for all five aggregate functions in one pattern. */
const PL = resolvePatternLimits({ maxAggregates: 8 });

function pat(p: unknown): NEventPattern {
  return validateEventPattern('pattern', p, DEFAULT_LIMITS, PL);
}

/** A step, negation or aggregate filter: never evaluated here (hits are given by hand). */
const F = {};

function key(m: PatternMatch): string {
  const ids = m.events.map((e) => e.id).join(',');
  return m.aggregates.length === 0 ? ids : `${ids}|${m.aggregates.map((a) => (a === null ? 'null' : String(a))).join(',')}`;
}

/**
 * Drives one sequencer: `rel` releases an event (ids must be unique per harness) with the elements
 * it hit in slot 0, or explicit hits, and returns the sorted keys of the matches; every match's
 * shape is checked (slot, one event per step, times as released, one value per aggregate).
 */
class Harness {
  readonly s: Sequencer;
  private readonly patterns = new Map<number, NEventPattern>();
  private readonly times = new Map<string, number>();
  private lastTime = 0;

  constructor(make: (o?: SequencerOptions) => Sequencer, opts?: SequencerOptions) {
    this.s = opts === undefined ? make() : make(opts);
  }

  add(slot: number, p: unknown): this {
    const n = pat(p);
    this.patterns.set(slot, n);
    this.s.addPattern(slot, n);
    return this;
  }

  remove(slot: number): void {
    this.patterns.delete(slot);
    this.s.removePattern(slot);
  }

  /** Releases `id` at `t` hitting `elements` of slot 0; returns the sorted keys of the matches. */
  rel(id: string, t: number, elements: number[], attrs: Attrs = {}): string[] {
    return this.relMany(id, t, elements.length === 0 ? [] : [{ slot: 0, elements }], attrs).map((m) => key(m)).sort();
  }

  /** Releases with explicit hits; returns the matches as given (grouped by slot in hits order). */
  relMany(id: string, t: number, hits: PatternHits[], attrs: Attrs = {}): PatternMatch[] {
    assert.ok(!this.times.has(id), `test bug: id ${id} released twice`);
    assert.ok(t >= this.lastTime, `test bug: ${id} released out of order`);
    this.lastTime = t;
    this.times.set(id, t);
    const out = this.s.release(ev(id, attrs), t, hits);
    for (const m of out) {
      const p = this.patterns.get(m.slot);
      assert.ok(p !== undefined, `match for a slot not installed: ${m.slot}`);
      assert.ok(hits.some((h) => h.slot === m.slot && h.elements.includes(0)), `match for slot ${m.slot}, which ${id} does not terminate`);
      assert.equal(m.events.length, p.steps.length, 'one event per step');
      assert.equal(m.events[0].id, id, 'events[0] is the terminator');
      assert.deepEqual(
        m.timesMs,
        m.events.map((e) => this.times.get(e.id)),
        'timesMs are the events’ release times',
      );
      assert.equal(m.aggregates.length, p.aggregates.length, 'one value per aggregate');
    }
    return out;
  }
}

const step = (name: string, withinMs: number, selection?: 'each' | 'last' | 'first') =>
  selection === undefined ? { name, filter: F, withinMs } : { name, filter: F, withinMs, selection };
const term = (name: string) => ({ name, filter: F });
const param = (ls: string, la: string, op: string, rs: string, ra: string) => ({ left: { step: ls, attribute: la }, op, right: { step: rs, attribute: ra } });

// Common shapes. Elements: steps first, then negations, then aggregates (patternElements).
/** C ← B (window w, selection sel). Elements: 0 C, 1 B. */
const two = (w: number, sel?: 'each' | 'last' | 'first', extra: Record<string, unknown> = {}) => ({ steps: [term('C'), step('B', w, sel)], ...extra });
/** C ← B ← A. Elements: 0 C, 1 B, 2 A. */
const three = (wb: number, selB: 'each' | 'last' | 'first', wa: number, selA: 'each' | 'last' | 'first', extra: Record<string, unknown> = {}) => ({
  steps: [term('C'), step('B', wb, selB), step('A', wa, selA)],
  ...extra,
});

for (const [name, make] of SEQUENCERS) {
  const H = (opts?: SequencerOptions) => new Harness(make, opts);

  describe(`event-pattern sequencer contract: ${name}`, () => {
    describe('thesis rule R1 (E7, E8)', () => {
      // Level(TankID=$x, Value<5) and last Open(TankID=$x) within 10 from Level, on table 1.1:
      // O at 1,2,4,5,7 with TankIDs 3,4,1,5,3; L at 12 with TankID 3 (its filter, Value<5, matched).
      const r1 = (selection: 'each' | 'last' | 'first', withinMs = 10) => ({
        steps: [{ name: 'Level', filter: { constraints: [{ name: 'Value', op: 'lt', value: 5 }] } }, { name: 'Open', filter: F, selection, withinMs }],
        parameters: [param('Level', 'TankID', 'eq', 'Open', 'TankID')],
      });
      const stream = (h: Harness): void => {
        const opens: Array<[number, number]> = [
          [1, 3],
          [2, 4],
          [4, 1],
          [5, 5],
          [7, 3],
        ];
        for (const [t, tank] of opens) assert.deepEqual(h.rel(`O${t}`, t, [1], { TankID: tank }), []);
      };

      it('[E7][E8] R1 on table 1.1: exactly one match, using the Open at 7', () => {
        const h = H().add(0, r1('last'));
        stream(h);
        assert.deepEqual(h.rel('L12', 12, [0], { TankID: 3, Value: 4 }), ['L12,O7']);
      });

      it('[E7c][E8] R1 with each: the Open at 1 is 11 before the Level, outside the window', () => {
        const h = H().add(0, r1('each'));
        stream(h);
        assert.deepEqual(h.rel('L12', 12, [0], { TankID: 3, Value: 4 }), ['L12,O7']);
      });

      it('[E8] R1 widened to 11: each takes both TankID 3 Opens, last the one at 7, first the one at 1', () => {
        for (const [sel, want] of [
          ['each', ['L12,O1', 'L12,O7']],
          ['last', ['L12,O7']],
          ['first', ['L12,O1']],
        ] as const) {
          const h = H().add(0, r1(sel, 11));
          stream(h);
          assert.deepEqual(h.rel('L12', 12, [0], { TankID: 3, Value: 4 }), [...want], sel);
        }
      });

      it('[E7c][E7e] R1 for other tanks: the Open of that tank, only within the window', () => {
        const h = H().add(0, r1('last'));
        stream(h);
        assert.deepEqual(h.rel('L12', 12, [0], { TankID: 4, Value: 4 }), ['L12,O2']); // exactly 10 before
        const h2 = H().add(0, r1('last'));
        stream(h2);
        assert.deepEqual(h2.rel('L13', 13, [0], { TankID: 4, Value: 4 }), []); // 11 before: out
        const h3 = H().add(0, r1('last'));
        stream(h3);
        assert.deepEqual(h3.rel('L12', 12, [0], { TankID: 1, Value: 4 }), ['L12,O4']);
      });
    });

    describe('order and windows (E4, E7, E13)', () => {
      it('[E7c] the window is inclusive: exactly withinMs apart counts, one more does not', () => {
        const h = H().add(0, two(5));
        h.rel('B', 10, [1]);
        assert.deepEqual(h.rel('C', 15, [0]), ['C,B']);
        const g = H().add(0, two(5));
        g.rel('B', 10, [1]);
        assert.deepEqual(g.rel('C', 16, [0]), []);
      });

      it('[E7c] each window is measured from the previous step, not from the terminator', () => {
        const h = H().add(0, three(10, 'last', 10, 'last'));
        h.rel('A', 4, [2]);
        h.rel('B', 12, [1]);
        assert.deepEqual(h.rel('C', 20, [0]), ['C,B,A']); // C−A = 16 > 10, but B−A = 8
        const g = H().add(0, three(10, 'last', 10, 'last'));
        g.rel('A', 1, [2]);
        g.rel('B', 12, [1]);
        assert.deepEqual(g.rel('C', 20, [0]), []); // B−A = 11
      });

      it('[E4][E7b] equal times are ordered by release: before the terminator counts, after does not', () => {
        const h = H().add(0, two(5));
        h.rel('B1', 10, [1]);
        assert.deepEqual(h.rel('C1', 10, [0]), ['C1,B1']);
        const g = H().add(0, two(5));
        assert.deepEqual(g.rel('C1', 10, [0]), []);
        g.rel('B1', 10, [1]);
        assert.deepEqual(g.rel('C2', 10, [0]), ['C2,B1']);
      });

      it('[E4][E7b] at a later step too, an equal-time event released after the previous step is not before it', () => {
        const h = H().add(0, three(10, 'last', 10, 'each'));
        h.rel('A1', 5, [2]);
        h.rel('B', 5, [1]);
        h.rel('A2', 5, [2]);
        assert.deepEqual(h.rel('C', 6, [0]), ['C,B,A1']);
      });

      it('[E10] a before-negation on a later step needs x ≺ e_s: an equal-time event after the step does not count', () => {
        const h = H().add(0, two(10, 'last', { negations: [{ filter: F, before: 'B', withinMs: 3 }] }));
        h.rel('B', 5, [1]);
        h.rel('N', 5, [2]);
        assert.deepEqual(h.rel('C', 6, [0]), ['C,B']);
        const g = H().add(0, two(10, 'last', { negations: [{ filter: F, before: 'B', withinMs: 3 }] }));
        g.rel('N', 5, [2]);
        g.rel('B', 5, [1]);
        assert.deepEqual(g.rel('C', 6, [0]), []);
      });

      it('[E4][E7b] with equal times last means latest released, first means earliest released', () => {
        for (const [sel, want] of [
          ['last', 'C,B2'],
          ['first', 'C,B1'],
        ] as const) {
          const h = H().add(0, two(5, sel));
          h.rel('B1', 3, [1]);
          h.rel('B2', 3, [1]);
          assert.deepEqual(h.rel('C', 3, [0]), [want], sel);
        }
      });

      it('[E13] a terminator never fills a step of its own search, but fills steps of later searches', () => {
        const h = H().add(0, two(5));
        assert.deepEqual(h.rel('X1', 1, [0, 1]), []);
        assert.deepEqual(h.rel('X2', 1, [0, 1]), ['X2,X1']);
        assert.deepEqual(h.rel('X3', 2, [0, 1]), ['X3,X2']);
      });

      it('[E7a] only events that hit the step are candidates', () => {
        const h = H().add(0, three(10, 'each', 10, 'each'));
        h.rel('A', 1, [2]);
        h.rel('Z', 2, []); // hits nothing
        h.rel('B', 3, [1]);
        assert.deepEqual(h.rel('C', 4, [0]), ['C,B,A']);
        const g = H().add(0, three(10, 'each', 10, 'each'));
        g.rel('A', 1, [1]); // an A hitting B's step only
        g.rel('B', 3, [1]);
        assert.deepEqual(g.rel('C', 4, [0]), []);
      });

      it('[E9] a single-step pattern matches every terminator', () => {
        const h = H().add(0, { steps: [term('C')] });
        assert.deepEqual(h.rel('C1', 1, [0]), ['C1']);
        assert.deepEqual(h.rel('C2', 1, [0]), ['C2']);
        assert.deepEqual(h.rel('Z', 2, []), []);
      });
    });

    describe('selection (E7e, E8, E9)', () => {
      // A1@1 k=1, A2@2 k=2, A3@3 k=1, B1@5, B2@6, C@10 k; parameter A.k eq C.k (steps 2 and 0: decided at step 2).
      const run = (selB: 'each' | 'last' | 'first', selA: 'each' | 'last' | 'first', k: number): string[] => {
        const h = H().add(0, three(10, selB, 10, selA, { parameters: [param('A', 'k', 'eq', 'C', 'k')] }));
        h.rel('A1', 1, [2], { k: 1 });
        h.rel('A2', 2, [2], { k: 2 });
        h.rel('A3', 3, [2], { k: 1 });
        h.rel('B1', 5, [1]);
        h.rel('B2', 6, [1]);
        return h.rel('C', 10, [0], { k });
      };

      it('[E8][E9] each × each: one match per candidate pair, parameter between non-adjacent steps', () => {
        assert.deepEqual(run('each', 'each', 1), ['C,B1,A1', 'C,B1,A3', 'C,B2,A1', 'C,B2,A3']);
      });

      it('[E8] last × each, first × last, last × first', () => {
        assert.deepEqual(run('last', 'each', 1), ['C,B2,A1', 'C,B2,A3']);
        assert.deepEqual(run('first', 'last', 1), ['C,B1,A3']);
        assert.deepEqual(run('last', 'first', 1), ['C,B2,A1']);
      });

      it('[E7e][E8] last takes the latest valid candidate: A3 is latest but fails the parameter', () => {
        assert.deepEqual(run('last', 'last', 2), ['C,B2,A2']);
        assert.deepEqual(run('first', 'first', 2), ['C,B1,A2']);
        assert.deepEqual(run('last', 'last', 7), []);
      });

      it('[E7e] a parameter between two later steps is decided where the later of them is chosen', () => {
        const h = H().add(0, three(10, 'last', 10, 'last', { parameters: [param('B', 'k', 'eq', 'A', 'k')] }));
        h.rel('A1', 1, [2], { k: 1 });
        h.rel('A2', 2, [2], { k: 2 });
        h.rel('B', 3, [1], { k: 1 });
        assert.deepEqual(h.rel('C', 4, [0]), ['C,B,A1']);
      });

      it('[E8] last takes the latest valid candidate and never backtracks', () => {
        // B2 is the latest B; no A lies within 2 before it. B1 would have worked, but is not tried.
        const mk = (sel: 'each' | 'last') => {
          const h = H().add(0, three(10, sel, 2, 'last'));
          h.rel('A1', 1, [2]);
          h.rel('B1', 2, [1]);
          h.rel('B2', 8, [1]);
          return h.rel('C', 10, [0]);
        };
        assert.deepEqual(mk('last'), []);
        assert.deepEqual(mk('each'), ['C,B1,A1']);
      });

      it('[E8] first never backtracks either', () => {
        const mk = (sel: 'each' | 'first') => {
          const h = H().add(0, three(10, sel, 2, 'last'));
          h.rel('B1', 2, [1]);
          h.rel('A1', 6, [2]);
          h.rel('B2', 7, [1]);
          return h.rel('C', 10, [0]);
        };
        assert.deepEqual(mk('first'), []); // B1 has no A before it
        assert.deepEqual(mk('each'), ['C,B2,A1']);
      });

      it('[E8] without a valid candidate the partial match ends', () => {
        const h = H().add(0, three(10, 'each', 10, 'each'));
        h.rel('B', 1, [1]);
        assert.deepEqual(h.rel('C', 2, [0]), []);
      });
    });

    describe('attribute comparison (E6)', () => {
      const cmp = (op: string, o: Value | undefined, l: Value | undefined): boolean => {
        const h = H().add(0, { steps: [term('L'), step('O', 10)], parameters: [param('O', 'v', op, 'L', 'v')] });
        h.rel('O', 1, [1], o === undefined ? {} : { v: o });
        return h.rel('L', 2, [0], l === undefined ? {} : { v: l }).length === 1;
      };

      it("[E6] string '5' and number 5 are never equal, and ne is false across types", () => {
        assert.equal(cmp('eq', '5', 5), false);
        assert.equal(cmp('ne', '5', 5), false);
        assert.equal(cmp('eq', true, 1), false);
        assert.equal(cmp('ne', true, 1), false);
        assert.equal(cmp('eq', 5, 5), true);
        assert.equal(cmp('ne', 5, 6), true);
        assert.equal(cmp('ne', 5, 5), false);
      });

      it('[E6] eq and ne on strings (by content), bools, and -0 equals 0', () => {
        assert.equal(cmp('eq', 'ab', 'ab'), true);
        assert.equal(cmp('ne', 'ab', 'abc'), true);
        assert.equal(cmp('eq', '', ''), true);
        assert.equal(cmp('eq', false, false), true);
        assert.equal(cmp('ne', false, true), true);
        assert.equal(cmp('eq', -0, 0), true);
        assert.equal(cmp('ne', -0, 0), false);
      });

      it('[E6] a missing attribute satisfies nothing, not even ne', () => {
        for (const op of ['eq', 'ne', 'lt', 'le', 'gt', 'ge']) {
          assert.equal(cmp(op, undefined, 5), false, op);
          assert.equal(cmp(op, 5, undefined), false, op);
          assert.equal(cmp(op, undefined, undefined), false, op);
        }
      });

      it('[E6] lt/le/gt/ge on numbers and bools (false < true), never on strings; left op right', () => {
        assert.equal(cmp('lt', 1, 2), true);
        assert.equal(cmp('lt', 2, 1), false);
        assert.equal(cmp('le', 2, 2), true);
        assert.equal(cmp('gt', 2, 1), true);
        assert.equal(cmp('ge', 1, 2), false);
        assert.equal(cmp('lt', false, true), true);
        assert.equal(cmp('gt', false, true), false);
        assert.equal(cmp('le', true, true), true);
        assert.equal(cmp('lt', 'a', 'b'), false);
        assert.equal(cmp('le', 'a', 'a'), false);
        assert.equal(cmp('gt', 'b', 'a'), false);
        assert.equal(cmp('ge', 'a', 'a'), false);
        assert.equal(cmp('lt', false, 1), false);
        assert.equal(cmp('lt', 1, '2'), false);
      });
    });

    describe('negations (E10, E11)', () => {
      // C ← B, negation N between [C, B]. Elements: 0 C, 1 B, 2 N.
      const betweenCB = (sel: 'each' | 'last' | 'first' = 'last', parameters?: unknown[]) =>
        two(10, sel, { negations: [parameters === undefined ? { filter: F, between: ['C', 'B'] } : { filter: F, between: ['C', 'B'], parameters }] });

      it('[E10] an event strictly between the two steps violates the negation', () => {
        const h = H().add(0, betweenCB());
        h.rel('B', 1, [1]);
        h.rel('N', 3, [2]);
        assert.deepEqual(h.rel('C', 5, [0]), []);
      });

      it('[E10] between is strict, by release order: equal times before B or after C do not count', () => {
        const h = H().add(0, betweenCB());
        h.rel('N1', 1, [2]); // released before B at the same time
        h.rel('B', 1, [1]);
        assert.deepEqual(h.rel('C1', 5, [0]), ['C1,B']);
        h.rel('N2', 5, [2]); // at C1's time but after it; strictly between B and C2
        assert.deepEqual(h.rel('C2', 5, [0]), []);
      });

      it('[E10] an event at the same time as C, released before it, is between', () => {
        const h = H().add(0, betweenCB());
        h.rel('B', 1, [1]);
        h.rel('N', 5, [2]);
        assert.deepEqual(h.rel('C', 5, [0]), []);
      });

      it('[E10] the event filling a step is not strictly between: one event may hit both B and N', () => {
        const h = H().add(0, betweenCB());
        h.rel('X', 1, [1, 2]);
        assert.deepEqual(h.rel('C', 5, [0]), ['C,X']);
      });

      it('[E10] a terminator hitting the negation does not violate its own search (E13)', () => {
        const h = H().add(0, betweenCB());
        h.rel('B', 1, [1]);
        assert.deepEqual(h.rel('C1', 2, [0, 2]), ['C1,B']);
        assert.deepEqual(h.rel('C2', 3, [0, 2]), []); // C1 is now between B and C2
      });

      it('[E10] the names of between may be given in either order', () => {
        const h = H().add(0, two(10, 'last', { negations: [{ filter: F, between: ['B', 'C'] }] }));
        h.rel('B', 1, [1]);
        h.rel('N', 3, [2]);
        assert.deepEqual(h.rel('C', 5, [0]), []);
      });

      it('[E10][E11] a violated negation makes last move on to an earlier candidate', () => {
        const h = H().add(0, betweenCB('last', [{ attribute: 'k', op: 'eq', step: 'B', stepAttribute: 'k' }]));
        h.rel('B1', 1, [1], { k: 1 });
        h.rel('B2', 2, [1], { k: 2 });
        h.rel('N', 3, [2], { k: 2 }); // between both Bs and C, but only matches B2's k
        assert.deepEqual(h.rel('C', 5, [0]), ['C,B1']);
      });

      it('[E10] a before-negation makes last move on to an earlier candidate, and first keep it', () => {
        const p = (sel: 'last' | 'first') => two(10, sel, { negations: [{ filter: F, before: 'B', withinMs: 2 }] });
        for (const [sel, want] of [
          ['last', ['C,B1']],
          ['first', ['C,B1']],
        ] as const) {
          const h = H().add(0, p(sel));
          h.rel('B1', 1, [1]);
          h.rel('N', 4, [2]);
          h.rel('B2', 5, [1]); // N is 1 before B2: B2 is not valid
          assert.deepEqual(h.rel('C', 6, [0]), [...want], sel);
        }
        const h = H().add(0, p('first'));
        h.rel('N', 0, [2]);
        h.rel('B1', 1, [1]); // N is 1 before B1: first moves on to B2
        h.rel('B2', 5, [1]);
        assert.deepEqual(h.rel('C', 6, [0]), ['C,B2']);
      });

      it('[E10] before within W is inclusive: exactly W before violates, W+1 does not', () => {
        const p = { steps: [term('C')], negations: [{ filter: F, before: 'C', withinMs: 3 }] };
        const h = H().add(0, p);
        h.rel('N', 2, [1]);
        assert.deepEqual(h.rel('C1', 5, [0]), []);
        assert.deepEqual(h.rel('C2', 6, [0]), ['C2']);
      });

      it('[E10] before needs x ≺ e_s: at equal time, only an event released before the step counts', () => {
        const p = { steps: [term('C')], negations: [{ filter: F, before: 'C', withinMs: 3 }] };
        const h = H().add(0, p);
        assert.deepEqual(h.rel('C1', 5, [0]), ['C1']);
        h.rel('N', 5, [1]);
        assert.deepEqual(h.rel('C2', 5, [0]), []);
      });

      it('[E10][E11] a negation is decided at the greatest step its parameters name', () => {
        // between [C, B] with a parameter on A: decided at step 2, so last on A skips A2.
        const h = H().add(
          0,
          three(10, 'last', 10, 'last', { negations: [{ filter: F, between: ['C', 'B'], parameters: [{ attribute: 'k', op: 'eq', step: 'A', stepAttribute: 'k' }] }] }),
        );
        h.rel('A1', 1, [2], { k: 1 });
        h.rel('A2', 2, [2], { k: 2 });
        h.rel('B', 5, [1]);
        h.rel('N', 6, [3], { k: 2 });
        assert.deepEqual(h.rel('C', 10, [0]), ['C,B,A1']);
      });

      it('[E11] every parameter of a negation must hold for the event to violate it', () => {
        const params = [
          { attribute: 'k', op: 'eq', step: 'C', stepAttribute: 'k' },
          { attribute: 'v', op: 'gt', step: 'B', stepAttribute: 'v' },
        ];
        const run = (n: Attrs): string[] => {
          const h = H().add(0, betweenCB('last', params));
          h.rel('B', 1, [1], { v: 10 });
          h.rel('N', 2, [2], n);
          return h.rel('C', 3, [0], { k: 'x' });
        };
        assert.deepEqual(run({ k: 'x', v: 11 }), []);
        assert.deepEqual(run({ k: 'x', v: 10 }), ['C,B']);
        assert.deepEqual(run({ k: 'y', v: 11 }), ['C,B']);
        assert.deepEqual(run({ v: 11 }), ['C,B']);
      });

      it('[E10] a negation on a three-step pattern between the non-terminator steps', () => {
        const p = three(10, 'each', 10, 'each', { negations: [{ filter: F, between: ['A', 'B'] }] });
        const h = H().add(0, p);
        h.rel('A1', 1, [2]);
        h.rel('N', 2, [3]);
        h.rel('A2', 3, [2]);
        h.rel('B', 4, [1]);
        assert.deepEqual(h.rel('C', 5, [0]), ['C,B,A2']);
      });
    });

    describe('aggregates (E12)', () => {
      const fns = (w: number, where: Record<string, unknown> = {}) => ({
        steps: [term('C')],
        aggregates: [
          { name: 'n', fn: 'count', filter: F, before: 'C', withinMs: w, ...(where.n === undefined ? {} : { where: where.n }) },
          { name: 's', fn: 'sum', attribute: 'v', filter: F, before: 'C', withinMs: w, ...(where.s === undefined ? {} : { where: where.s }) },
          { name: 'lo', fn: 'min', attribute: 'v', filter: F, before: 'C', withinMs: w, ...(where.lo === undefined ? {} : { where: where.lo }) },
          { name: 'hi', fn: 'max', attribute: 'v', filter: F, before: 'C', withinMs: w, ...(where.hi === undefined ? {} : { where: where.hi }) },
          { name: 'mean', fn: 'avg', attribute: 'v', filter: F, before: 'C', withinMs: w, ...(where.mean === undefined ? {} : { where: where.mean }) },
        ],
      });
      const ALL = [1, 2, 3, 4, 5];

      it('[E12] count, sum, min, max, avg over the window (inclusive); count includes events without a number', () => {
        const h = H().add(0, fns(10));
        h.rel('G0', 0, ALL, { v: 100 }); // 11 before C: out
        h.rel('G1', 1, ALL, { v: 4 });
        h.rel('G2', 3, ALL, { v: 2 });
        h.rel('G3', 4, ALL, { v: 'x' });
        h.rel('G4', 5, ALL, { v: true });
        h.rel('G5', 6, ALL, {});
        assert.deepEqual(h.rel('C', 11, [0]), ['C|5,6,2,4,3']);
      });

      it('[E12] an empty set: count 0, sum 0, min/max/avg do not exist (null)', () => {
        const h = H().add(0, fns(10));
        assert.deepEqual(h.rel('C', 11, [0]), ['C|0,0,null,null,null']);
        const g = H().add(0, fns(10));
        g.rel('G', 1, ALL, { v: 'x' }); // counted, but carries no number
        assert.deepEqual(g.rel('C', 2, [0]), ['C|1,0,null,null,null']);
      });

      it('[E12] sum adds in release order from the earliest, in float64', () => {
        // (1e16 + 1) + 1 = 1e16 in float64; adding from the latest would give 1e16 + 2.
        const h = H().add(0, fns(10));
        h.rel('G1', 1, ALL, { v: 1e16 });
        h.rel('G2', 2, ALL, { v: 1 });
        h.rel('G3', 3, ALL, { v: 1 });
        const [m] = h.s.release(ev('C'), 4, [{ slot: 0, elements: [0] }]);
        assert.equal(m.aggregates[1], 1e16);
        assert.equal(m.aggregates[4], 1e16 / 3);
        assert.equal(m.aggregates[2], 1);
        assert.equal(m.aggregates[3], 1e16);
      });

      it('[E12] the set needs x ≺ e_s: an equal-time event released after the step, or the terminator itself, is out', () => {
        const h = H().add(0, { steps: [term('C')], aggregates: [{ name: 'n', fn: 'count', filter: F, before: 'C', withinMs: 5 }] });
        h.rel('G1', 1, [1]);
        assert.deepEqual(h.rel('C1', 1, [0, 1]), ['C1|1']);
        h.rel('G2', 1, [1]);
        assert.deepEqual(h.rel('C2', 1, [0]), ['C2|3']);
      });

      it('[E12] an aggregate over a non-terminator step measures its window from that step', () => {
        const p = two(10, 'last', { aggregates: [{ name: 'n', fn: 'count', filter: F, before: 'B', withinMs: 3 }] });
        const h = H().add(0, p);
        h.rel('G1', 1, [2]); // 4 before B: out
        h.rel('G2', 2, [2]); // 3 before B: in
        h.rel('B', 5, [1]);
        h.rel('G3', 5, [2]); // B's time, released after B: out
        assert.deepEqual(h.rel('C', 7, [0]), ['C,B|1']);
      });

      it('[E11][E12] aggregate parameters select the events of the set', () => {
        const p = {
          steps: [term('C')],
          aggregates: [{ name: 's', fn: 'sum', attribute: 'v', filter: F, before: 'C', withinMs: 10, parameters: [{ attribute: 'zone', op: 'eq', step: 'C', stepAttribute: 'zone' }] }],
        };
        const h = H().add(0, p);
        h.rel('G1', 1, [1], { v: 1, zone: 'a' });
        h.rel('G2', 2, [1], { v: 2, zone: 'b' });
        h.rel('G3', 3, [1], { v: 4, zone: 'a' });
        h.rel('G4', 4, [1], { v: 8 });
        assert.deepEqual(h.rel('C1', 5, [0], { zone: 'a' }), ['C1|5']);
        assert.deepEqual(h.rel('C2', 5, [0], { zone: 'b' }), ['C2|2']);
        assert.deepEqual(h.rel('C3', 5, [0]), ['C3|0']);
      });

      it('[E12] where keeps the match only when the value exists and the condition holds', () => {
        const withG = (where: Record<string, unknown>): string[] => {
          const h = H().add(0, fns(10, where));
          h.rel('G1', 1, ALL, { v: 4 });
          h.rel('G2', 2, ALL, { v: 2 });
          return h.rel('C', 3, [0]);
        };
        assert.deepEqual(withG({ n: { op: 'ge', value: 2 } }), ['C|2,6,2,4,3']);
        assert.deepEqual(withG({ n: { op: 'gt', value: 2 } }), []);
        assert.deepEqual(withG({ s: { op: 'eq', value: 6 }, lo: { op: 'le', value: 2 }, hi: { op: 'lt', value: 5 }, mean: { op: 'eq', value: 3 } }), ['C|2,6,2,4,3']);
        assert.deepEqual(withG({ mean: { op: 'ne', value: 3 } }), []);
        assert.deepEqual(withG({ lo: { op: 'lt', value: 2 } }), []);
      });

      it('[E12] where on an empty set: sum 0 and count 0 exist, min/max/avg do not, so their condition fails', () => {
        const empty = (where: Record<string, unknown>): string[] => H().add(0, fns(10, where)).rel('C', 3, [0]);
        assert.deepEqual(empty({ n: { op: 'eq', value: 0 } }), ['C|0,0,null,null,null']);
        assert.deepEqual(empty({ s: { op: 'eq', value: 0 } }), ['C|0,0,null,null,null']);
        assert.deepEqual(empty({ lo: { op: 'lt', value: 100 } }), []);
        assert.deepEqual(empty({ lo: { op: 'ne', value: 100 } }), []);
        assert.deepEqual(empty({ hi: { op: 'gt', value: -100 } }), []);
        assert.deepEqual(empty({ mean: { op: 'ge', value: -100 } }), []);
      });

      it('[E12][E8] a failed where ends that sequence: last does not fall back to an earlier candidate', () => {
        const p = (sel: 'last' | 'each') => two(20, sel, { aggregates: [{ name: 'n', fn: 'count', filter: F, before: 'B', withinMs: 5, where: { op: 'ge', value: 1 } }] });
        const run = (sel: 'last' | 'each'): string[] => {
          const h = H().add(0, p(sel));
          h.rel('G', 0, [2]);
          h.rel('B1', 1, [1]); // G is 1 before: count 1
          h.rel('B2', 10, [1]); // G is 10 before: count 0
          return h.rel('C', 11, [0]);
        };
        assert.deepEqual(run('last'), []);
        assert.deepEqual(run('each'), ['C,B1|1']);
      });
    });

    describe('consuming (E14)', () => {
      it('[E14] consumed events are not reused by later terminators', () => {
        const h = H().add(0, two(10, 'each', { consuming: ['B'] }));
        h.rel('B1', 1, [1]);
        h.rel('B2', 2, [1]);
        assert.deepEqual(h.rel('C1', 3, [0]), ['C1,B1', 'C1,B2']);
        assert.deepEqual(h.rel('C2', 4, [0]), []);
        assert.equal(h.s.stats().consumed, 2);
        h.rel('B3', 5, [1]);
        assert.deepEqual(h.rel('C3', 6, [0]), ['C3,B3']);
        assert.equal(h.s.stats().consumed, 3);
      });

      it('[E14] with last, the consumed candidate leaves the next terminator the earlier one', () => {
        const h = H().add(0, two(10, 'last', { consuming: ['B'] }));
        h.rel('B1', 1, [1]);
        h.rel('B2', 2, [1]);
        assert.deepEqual(h.rel('C1', 3, [0]), ['C1,B2']);
        assert.deepEqual(h.rel('C2', 4, [0]), ['C2,B1']);
        assert.deepEqual(h.rel('C3', 5, [0]), []);
      });

      it('[E14] matches of one terminator do not consume from each other', () => {
        const h = H().add(0, three(10, 'each', 10, 'each', { consuming: ['A', 'B'] }));
        h.rel('A1', 1, [2]);
        h.rel('B1', 2, [1]);
        h.rel('B2', 3, [1]);
        assert.deepEqual(h.rel('C1', 4, [0]), ['C1,B1,A1', 'C1,B2,A1']);
        assert.equal(h.s.stats().consumed, 3); // A1 once, B1, B2
        h.rel('B3', 5, [1]);
        assert.deepEqual(h.rel('C2', 6, [0]), []);
      });

      it('[E14] only consuming steps consume', () => {
        const h = H().add(0, three(10, 'last', 10, 'last', { consuming: ['B'] }));
        h.rel('A1', 1, [2]);
        h.rel('B1', 2, [1]);
        h.rel('B2', 3, [1]);
        assert.deepEqual(h.rel('C1', 4, [0]), ['C1,B2,A1']);
        assert.deepEqual(h.rel('C2', 5, [0]), ['C2,B1,A1']);
        assert.equal(h.s.stats().consumed, 2);
      });

      it('[E14] a terminator with no match consumes nothing', () => {
        const h = H().add(0, two(10, 'last', { consuming: ['B', 'C'], parameters: [param('B', 'k', 'eq', 'C', 'k')] }));
        h.rel('B1', 1, [1], { k: 1 });
        assert.deepEqual(h.rel('C1', 2, [0, 1], { k: 2 }), []); // B1 fails the parameter: nothing consumed
        assert.equal(h.s.stats().consumed, 0);
        assert.deepEqual(h.rel('C2', 3, [0], { k: 1 }), ['C2,B1']);
        assert.equal(h.s.stats().consumed, 2); // B1 and the terminator C2
        assert.deepEqual(h.rel('C3', 4, [0], { k: 2 }), ['C3,C1']); // C1 was recorded as a B
      });

      it('[E13][E14] a consumed terminator fills no step later', () => {
        const run = (consuming: string[]): string[][] => {
          const h = H().add(0, two(10, 'last', { consuming }));
          return [h.rel('X1', 1, [0, 1]), h.rel('X2', 2, [0, 1]), h.rel('X3', 3, [0, 1])];
        };
        assert.deepEqual(run([]), [[], ['X2,X1'], ['X3,X2']]);
        // Consuming C: X2 is consumed by its own match, so it is never recorded as a B.
        assert.deepEqual(run(['C']), [[], ['X2,X1'], ['X3,X1']]);
        // Consuming B: X1 is consumed by X2's match; X2 itself is recorded and fills B for X3.
        assert.deepEqual(run(['B']), [[], ['X2,X1'], ['X3,X2']]);
      });

      it('[E14] a consumed event fills no step but still counts for the negations of the pattern', () => {
        // N before C within 10 with N.k eq C.k. X hits B and N; consumed by C1's match.
        const p = two(10, 'last', { consuming: ['B'], negations: [{ filter: F, before: 'C', withinMs: 10, parameters: [{ attribute: 'k', op: 'eq', step: 'C', stepAttribute: 'k' }] }] });
        const run = (consume: boolean): string[] => {
          const h = H().add(0, consume ? p : { ...p, consuming: [] });
          h.rel('X', 1, [1, 2], { k: 1 });
          assert.deepEqual(h.rel('C1', 2, [0], { k: 2 }), ['C1,X']);
          h.rel('Y', 3, [1], { k: 0 });
          return h.rel('C2', 4, [0], { k: 1 });
        };
        // Consumed or not, X lies within 10 before C2 with the same k: C2 has no match either way.
        assert.deepEqual(run(true), []);
        assert.deepEqual(run(false), []);
      });

      it('[E14] a consumed event fills no step but still counts for the aggregates of the pattern', () => {
        const p = two(10, 'last', { consuming: ['B'], aggregates: [{ name: 'n', fn: 'count', filter: F, before: 'C', withinMs: 10 }] });
        const h = H().add(0, p);
        h.rel('X', 1, [1, 2]);
        assert.deepEqual(h.rel('C1', 2, [0]), ['C1,X|1']);
        h.rel('Y', 3, [1]);
        // X no longer fills B (Y does), but the aggregate still counts it.
        assert.deepEqual(h.rel('C2', 4, [0]), ['C2,Y|1']);
      });

      it('[E14] the values of a match are computed before its consumption', () => {
        // X fills B and is counted by the aggregate of the same match, which consumes it.
        const p = two(10, 'each', { consuming: ['B'], aggregates: [{ name: 'n', fn: 'count', filter: F, before: 'C', withinMs: 10 }] });
        const h = H().add(0, p);
        h.rel('X1', 1, [1, 2]);
        h.rel('X2', 2, [1, 2]);
        assert.deepEqual(h.rel('C', 3, [0]), ['C,X1|2', 'C,X2|2']);
      });

      it('[E14] consumption is per pattern: another pattern still sees the event', () => {
        const h = H()
          .add(0, two(10, 'last', { consuming: ['B'] }))
          .add(1, two(10, 'last'));
        h.relMany('B', 1, [
          { slot: 0, elements: [1] },
          { slot: 1, elements: [1] },
        ]);
        const both: PatternHits[] = [
          { slot: 0, elements: [0] },
          { slot: 1, elements: [0] },
        ];
        assert.deepEqual(
          h.relMany('C1', 2, both).map((m) => `${m.slot}:${key(m)}`),
          ['0:C1,B', '1:C1,B'],
        );
        assert.deepEqual(
          h.relMany('C2', 3, both).map((m) => `${m.slot}:${key(m)}`),
          ['1:C2,B'],
        );
      });
    });

    describe('retention and reach (E15, E16)', () => {
      it('[E15] an element keeps at most maxRetainedPerElement events: the earliest is evicted and counted', () => {
        const h = H({ maxRetainedPerElement: 2 }).add(0, two(100, 'each'));
        h.rel('B1', 1, [1]);
        h.rel('B2', 2, [1]);
        assert.equal(h.s.stats().evicted, 0);
        h.rel('B3', 3, [1]);
        assert.equal(h.s.stats().evicted, 1);
        assert.deepEqual(h.rel('C', 4, [0]), ['C,B2', 'C,B3']);
        h.rel('B4', 5, [1]);
        assert.equal(h.s.stats().evicted, 2);
      });

      it('[E15] the default bound keeps a few thousand events without eviction', () => {
        const h = H().add(0, two(100_000, 'first'));
        for (let i = 0; i < 3000; i++) h.rel(`B${i}`, i, [1]);
        assert.deepEqual(h.rel('C', 3000, [0]), ['C,B0']);
        assert.equal(h.s.stats().evicted, 0);
      });

      it('[E15] an evicted event no longer counts for a negation', () => {
        const p = two(10, 'last', { negations: [{ filter: F, between: ['C', 'B'], parameters: [{ attribute: 'k', op: 'eq', step: 'C', stepAttribute: 'k' }] }] });
        const run = (max: number): string[] => {
          const h = H({ maxRetainedPerElement: max }).add(0, p);
          h.rel('B', 0, [1]);
          h.rel('N1', 1, [2], { k: 1 });
          h.rel('N2', 2, [2], { k: 2 });
          const out = h.rel('C', 3, [0], { k: 1 });
          assert.equal(h.s.stats().evicted, max === 1 ? 1 : 0);
          return out;
        };
        assert.deepEqual(run(1), ['C,B']);
        assert.deepEqual(run(2), []);
      });

      it('[E15] an evicted event no longer counts for an aggregate', () => {
        const p = { steps: [term('C')], aggregates: [{ name: 's', fn: 'sum', attribute: 'v', filter: F, before: 'C', withinMs: 10 }] };
        const h = H({ maxRetainedPerElement: 2 }).add(0, p);
        h.rel('G1', 1, [1], { v: 1 });
        h.rel('G2', 2, [1], { v: 2 });
        h.rel('G3', 3, [1], { v: 4 });
        assert.deepEqual(h.rel('C', 4, [0]), ['C|6']);
      });

      it('[E14][E15] consumed events do not occupy the bound', () => {
        const h = H({ maxRetainedPerElement: 2 }).add(0, two(100, 'each', { consuming: ['B'] }));
        h.rel('B1', 1, [1]);
        h.rel('B2', 2, [1]);
        assert.deepEqual(h.rel('C1', 3, [0]), ['C1,B1', 'C1,B2']);
        h.rel('B3', 4, [1]);
        h.rel('B4', 5, [1]);
        assert.equal(h.s.stats().evicted, 0);
        assert.deepEqual(h.rel('C2', 6, [0]), ['C2,B3', 'C2,B4']);
      });

      it('[E13][E15] the search runs before the terminator is recorded: its recording cannot evict a candidate', () => {
        const h = H({ maxRetainedPerElement: 1 }).add(0, two(10));
        h.rel('X1', 1, [0, 1]);
        assert.deepEqual(h.rel('X2', 2, [0, 1]), ['X2,X1']);
        assert.equal(h.s.stats().evicted, 1); // X1 as B, once X2 is recorded
      });

      it('[E16] events out of reach are dropped, not evicted', () => {
        const h = H({ maxRetainedPerElement: 2 }).add(0, two(10, 'each'));
        h.rel('B1', 1, [1]);
        h.rel('B2', 2, [1]);
        h.rel('B3', 20, [1]); // B1, B2 are 19 and 18 before: beyond the reach of 10
        assert.equal(h.s.stats().evicted, 0);
        assert.deepEqual(h.rel('C', 21, [0]), ['C,B3']);
      });

      it('[E16] a step event exactly at the reach (sum of windows) still counts', () => {
        // Step A reaches 10 + 5 = 15 back. A1 is exactly 15 before A2 (when A2 is recorded) and C.
        const h = H({ maxRetainedPerElement: 2 }).add(0, three(10, 'last', 5, 'first'));
        h.rel('A1', 0, [2]);
        h.rel('B', 5, [1]);
        h.rel('A2', 15, [2]);
        assert.deepEqual(h.rel('C', 15, [0]), ['C,B,A1']);
      });

      it('[E16] a between-negation event exactly at the reach of its earlier step still counts', () => {
        const p = two(10, 'last', { negations: [{ filter: F, between: ['C', 'B'], parameters: [{ attribute: 'k', op: 'eq', step: 'C', stepAttribute: 'k' }] }] });
        const h = H().add(0, p);
        h.rel('B', 5, [1]);
        h.rel('N1', 5, [2], { k: 1 });
        h.rel('N2', 15, [2], { k: 2 }); // records N2: N1 is exactly 10 (the reach) before
        assert.deepEqual(h.rel('C', 15, [0], { k: 1 }), []);
      });

      it('[E16] a before-negation or aggregate event exactly at its reach (step reach + W) still counts', () => {
        const neg = { steps: [term('C')], negations: [{ filter: F, before: 'C', withinMs: 5, parameters: [{ attribute: 'k', op: 'eq', step: 'C', stepAttribute: 'k' }] }] };
        const h = H().add(0, neg);
        h.rel('N1', 0, [1], { k: 1 });
        h.rel('N2', 5, [1], { k: 2 });
        assert.deepEqual(h.rel('C', 5, [0], { k: 1 }), []);

        const agg = two(10, 'last', { aggregates: [{ name: 's', fn: 'sum', attribute: 'v', filter: F, before: 'B', withinMs: 5 }] });
        const g = H().add(0, agg);
        g.rel('G1', 0, [2], { v: 1 });
        g.rel('B', 5, [1]);
        g.rel('G2', 15, [2], { v: 2 }); // records G2: G1 is exactly 15 (10 + 5) before
        assert.deepEqual(g.rel('C', 15, [0]), ['C,B|1']);
      });
    });

    describe('lifecycle and many patterns (E5, E17)', () => {
      it('[E17] add installs a pattern with no history: earlier events do not count', () => {
        const h = H().add(0, two(10));
        h.rel('B', 1, [1]);
        h.add(1, two(10));
        const out = h.relMany('C', 2, [
          { slot: 0, elements: [0] },
          { slot: 1, elements: [0] },
        ]);
        assert.deepEqual(
          out.map((m) => `${m.slot}:${key(m)}`),
          ['0:C,B'],
        );
      });

      it('[E17] remove drops everything; adding again under the same slot starts empty', () => {
        const h = H().add(0, two(10));
        h.rel('B1', 1, [1]);
        assert.ok(h.s.stats().retained > 0);
        h.remove(0);
        assert.equal(h.s.stats().retained, 0);
        h.add(0, two(10));
        assert.deepEqual(h.rel('C1', 2, [0]), []);
        h.rel('B2', 3, [1]);
        assert.deepEqual(h.rel('C2', 4, [0]), ['C2,B2']);
      });

      it('[E17] removing one pattern leaves the others intact', () => {
        const h = H().add(0, two(10)).add(1, two(10));
        h.relMany('B', 1, [
          { slot: 0, elements: [1] },
          { slot: 1, elements: [1] },
        ]);
        h.remove(0);
        assert.deepEqual(
          h.relMany('C', 2, [{ slot: 1, elements: [0] }]).map((m) => `${m.slot}:${key(m)}`),
          ['1:C,B'],
        );
      });

      it('[E5] two patterns in the same release: matches grouped by slot in the order of the hits', () => {
        const h = H()
          .add(0, two(10, 'each'))
          .add(7, { steps: [term('T'), step('U', 10)], aggregates: [{ name: 'n', fn: 'count', filter: F, before: 'T', withinMs: 10 }] });
        h.relMany('B1', 1, [{ slot: 0, elements: [1] }]);
        h.relMany('X', 2, [
          { slot: 7, elements: [1, 2] },
          { slot: 0, elements: [1] },
        ]);
        const out = h.relMany('Y', 3, [
          { slot: 7, elements: [0, 2] },
          { slot: 0, elements: [0] },
        ]);
        assert.deepEqual(
          out.map((m) => m.slot),
          [7, 0, 0],
        );
        assert.deepEqual(
          out.map((m) => `${m.slot}:${key(m)}`).sort(),
          ['0:Y,B1', '0:Y,X', '7:Y,X|1'],
        );
      });

      it('[E5] an event may fill different elements of a pattern, and patterns, at once', () => {
        const h = H().add(0, three(10, 'last', 10, 'last'));
        h.rel('X', 1, [1, 2]);
        h.rel('Y', 2, [1, 2]);
        assert.deepEqual(h.rel('C', 3, [0]), ['C,Y,X']);
      });
    });
  });
}

describe('compareAttr (E6)', () => {
  it('[E6] holds only for two attributes of the same type; order only on numbers and bools', () => {
    assert.equal(compareAttr('eq', 5, 5), true);
    assert.equal(compareAttr('eq', -0, 0), true);
    assert.equal(compareAttr('eq', '5', 5), false);
    assert.equal(compareAttr('ne', '5', 5), false);
    assert.equal(compareAttr('ne', 'a', 'b'), true);
    assert.equal(compareAttr('ne', undefined, 1), false);
    assert.equal(compareAttr('lt', 'a', 'b'), false);
    assert.equal(compareAttr('lt', false, true), true);
    assert.equal(compareAttr('ge', true, false), true);
    assert.equal(compareAttr('le', 1, 1), true);
    assert.equal(compareAttr('gt', 1, true), false);
  });
});
