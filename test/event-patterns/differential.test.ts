/**
 * Differential tests of pattern subscriptions (docs/semantics.md §9): seeded workloads of random
 * patterns (1–4 steps, every selection, parameters, negations, aggregates with conditions,
 * consuming), events with ties, out-of-order and late times, devices that move, patterns removed
 * and replaced mid-stream. Every call's notifications and the final statistics must be the same
 * for the reference (reference element engine, ReferenceSequencer) and every fast pairing
 * (fast and rtree element engines with CdpSequencer).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { CdpSequencer } from '../../src/engines/event-patterns/cdp.js';
import { PatternMatcher } from '../../src/engines/event-patterns/pattern-matcher.js';
import { ReferenceSequencer } from '../../src/engines/event-patterns/reference.js';
import { FastMatcher, ReferenceMatcher, RTreeMatcher } from '../../src/engines/index.js';
import type { Matcher } from '../../src/engines/matcher.js';
import { type Knobs, generate, givePositions, run } from '../support/event-patterns.js';

const PAIRINGS: [string, () => Matcher][] = [
  ['fast', () => new FastMatcher()],
  ['rtree', () => new RTreeMatcher()],
];

const SETS: [string, Knobs, number][] = [
  ['small windows, tight retention, in order', { patterns: 12, events: 300, latenessMs: 0, maxRetained: 3, maxWindow: 8, disorder: 0 }, 12],
  ['wide windows, late events dropped', { patterns: 12, events: 300, latenessMs: 0, maxRetained: 1000, maxWindow: 40, disorder: 0.15 }, 12],
  ['lateness bound reorders', { patterns: 12, events: 300, latenessMs: 4, maxRetained: 6, maxWindow: 25, disorder: 0.2 }, 12],
];

describe('event patterns: differential against the reference', () => {
  for (const [label, knobs, seeds] of SETS) {
    for (const [engine, make] of PAIRINGS) {
      it(`[E3][E5][E7][E8][E10][E12][E14][E15] ${label}: reference vs cdp on ${engine}, ${seeds} seeds`, async () => {
        let notifications = 0;
        const seen = { late: 0, evicted: 0, consumed: 0, buffered: 0 };
        for (let s = 1; s <= seeds; s++) {
          const ops = generate(s * 7919 + knobs.maxWindow, knobs);
          const ref = new PatternMatcher({ elements: new ReferenceMatcher(), sequencer: new ReferenceSequencer({ maxRetainedPerElement: knobs.maxRetained }), latenessMs: knobs.latenessMs });
          const cand = new PatternMatcher({ elements: make(), sequencer: new CdpSequencer({ maxRetainedPerElement: knobs.maxRetained }), latenessMs: knobs.latenessMs });
          try {
            const want = await run(ops, ref);
            const got = await run(ops, cand);
            for (let i = 0; i < want.length; i++) assert.deepEqual(got[i], want[i], `seed ${s}, call ${i}`);
            const ws = ref.stats();
            const gs = cand.stats();
            assert.deepEqual({ ...gs, sequencer: '', elementEngine: '' }, { ...ws, sequencer: '', elementEngine: '' }, `seed ${s}: stats`);
            notifications += want.reduce((a, l) => a + l.length, 0);
            seen.late += ws.late;
            seen.evicted += ws.evicted;
            seen.consumed += ws.consumed;
          } finally {
            await ref.close();
            await cand.close();
          }
        }
        // The workload must exercise matching at all (a generator that produces nothing proves nothing).
        assert.ok(notifications > 20 * seeds, `only ${notifications} notifications over ${seeds} seeds`);
        assert.ok(seen.consumed > 0, 'no event was consumed');
        if (knobs.disorder > 0 && knobs.latenessMs === 0) assert.ok(seen.late > 0, 'no event was late');
        if (knobs.maxRetained < 10) assert.ok(seen.evicted > 0, 'no event was evicted');
      });
    }
  }
});

describe('event patterns: a restart from a snapshot', () => {
  it('[E15][E17] a matcher restored from another\'s snapshot (positions given back) answers as the one that never stopped, CDP to reference and back', async () => {
    const knobs: Knobs = { patterns: 12, events: 400, latenessMs: 4, maxRetained: 5, maxWindow: 25, disorder: 0.2 };
    let restoredWithState = 0;
    for (let s = 1; s <= 8; s++) {
      const ops = generate(s * 6133, knobs);
      const whole = new PatternMatcher({ elements: new ReferenceMatcher(), sequencer: new ReferenceSequencer({ maxRetainedPerElement: knobs.maxRetained }), latenessMs: knobs.latenessMs });
      const want = await run(ops, whole);
      const wantStats = { ...whole.stats(), sequencer: '', elementEngine: '' };
      await whole.close();
      for (const [first, second] of [['cdp', 'reference'], ['reference', 'cdp']] as const) {
        const make = (kind: 'cdp' | 'reference') =>
          new PatternMatcher({
            elements: new FastMatcher(),
            sequencer: kind === 'cdp' ? new CdpSequencer({ maxRetainedPerElement: knobs.maxRetained }) : new ReferenceSequencer({ maxRetainedPerElement: knobs.maxRetained }),
            latenessMs: knobs.latenessMs,
          });
        const mid = Math.floor(ops.length / 2);
        const a = make(first);
        const got = await run(ops.slice(0, mid), a);
        const snap = structuredClone(await a.snapshot());
        await a.close();
        if (snap.sequencer.patterns.some((p) => p.elements.some((e) => e.length > 0)) && snap.buffer.length > 0) restoredWithState++;
        const b = make(second);
        b.restore(snap);
        // The positions at the cut, as the service gives its engine back its positions.
        givePositions(ops.slice(0, mid), b);
        got.push(...(await run(ops.slice(mid), b)));
        for (let i = 0; i < want.length; i++) assert.deepEqual(got[i], want[i], `seed ${s}, ${first} then ${second}, call ${i}`);
        assert.deepEqual({ ...b.stats(), sequencer: '', elementEngine: '' }, wantStats, `seed ${s}, ${first} then ${second}: stats`);
        await b.close();
      }
    }
    assert.ok(restoredWithState > 0, 'no snapshot held events and a buffer');
  });
});
