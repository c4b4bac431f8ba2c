/**
 * Pattern subscriptions with the GPU engine matching the elements' filters (on llvmpipe where there
 * is no GPU): the GPU engine queues its batches and matches each against the state when it is sent,
 * so this is where PatternMatcher's call order (positions, patterns and matches as they were at
 * each release, E5, E17) is exercised on a real asynchronous engine. Then the GPU sequencer
 * (GTrex) searching each call's releases as one batch, with the fast engine and with the GPU
 * engine matching the elements, and a snapshot taken while calls are in flight. Every call's
 * notifications and the final statistics must equal the reference's.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { CdpSequencer } from '../../src/engines/event-patterns/cdp.js';
import { PatternMatcher } from '../../src/engines/event-patterns/pattern-matcher.js';
import { ReferenceSequencer } from '../../src/engines/event-patterns/reference.js';
import { GtrexSequencer } from '../../src/engines/gpu/gtrex.js';
import { GpuMatcher } from '../../src/engines/gpu/matcher.js';
import { FastMatcher, ReferenceMatcher } from '../../src/engines/index.js';
import type { Matcher } from '../../src/engines/matcher.js';
import { type Knobs, generate, givePositions, run } from '../support/event-patterns.js';

const KNOBS: Knobs = { patterns: 10, events: 160, latenessMs: 3, maxRetained: 5, maxWindow: 20, disorder: 0.15 };

describe('event patterns: GPU element engine against the reference', () => {
  it('[E3][E5][E17] every call and the statistics equal the reference, the GPU path forced (select gpu)', async () => {
    let notifications = 0;
    for (let s = 1; s <= 4; s++) {
      const ops = generate(s * 104729, KNOBS);
      const ref = new PatternMatcher({ elements: new ReferenceMatcher(), sequencer: new ReferenceSequencer({ maxRetainedPerElement: KNOBS.maxRetained }), latenessMs: KNOBS.latenessMs });
      const gpu = await GpuMatcher.create({ gpu: { allowSoftware: true }, select: 'gpu', cpuBelowFilters: 0 });
      const cand = new PatternMatcher({ elements: gpu, sequencer: new CdpSequencer({ maxRetainedPerElement: KNOBS.maxRetained }), latenessMs: KNOBS.latenessMs });
      try {
        const want = await run(ops, ref);
        const got = await run(ops, cand);
        for (let i = 0; i < want.length; i++) assert.deepEqual(got[i], want[i], `seed ${s}, call ${i}`);
        assert.deepEqual({ ...cand.stats(), sequencer: '', elementEngine: '' }, { ...ref.stats(), sequencer: '', elementEngine: '' }, `seed ${s}: stats`);
        notifications += want.reduce((a, l) => a + l.length, 0);
        const extra = gpu.stats().extra ?? {};
        assert.ok(Number(extra.gpuEvents) > 0 && extra.cpuEvents === 0, `the GPU path did not answer: ${JSON.stringify(extra)}`);
      } finally {
        await ref.close();
        await cand.close();
      }
    }
    assert.ok(notifications > 40, `only ${notifications} notifications`);
  });
});

describe('event patterns: the GPU sequencer (GTrex) through PatternMatcher against the reference', () => {
  const pairings: [string, () => Promise<Matcher>][] = [
    ['fast', async () => new FastMatcher()],
    ['gpu', async () => GpuMatcher.create({ gpu: { allowSoftware: true }, select: 'gpu', cpuBelowFilters: 0 })],
  ];
  for (const [engine, make] of pairings) {
    it(`[E3][E5][E7][E8][E10][E12][E14][E15][E17] every call and the statistics equal the reference, elements on the ${engine} engine`, async () => {
      let notifications = 0;
      for (let s = 1; s <= 4; s++) {
        const ops = generate(s * 7_877, KNOBS);
        const ref = new PatternMatcher({ elements: new ReferenceMatcher(), sequencer: new ReferenceSequencer({ maxRetainedPerElement: KNOBS.maxRetained }), latenessMs: KNOBS.latenessMs });
        const gtrex = await GtrexSequencer.create({ gpu: { allowSoftware: true }, maxRetainedPerElement: KNOBS.maxRetained, indexBuckets: 4, bucketLoad: 1 });
        const cand = new PatternMatcher({ elements: await make(), sequencer: gtrex, latenessMs: KNOBS.latenessMs });
        try {
          const want = await run(ops, ref);
          const got = await run(ops, cand);
          for (let i = 0; i < want.length; i++) assert.deepEqual(got[i], want[i], `seed ${s}, call ${i}`);
          const stats = cand.stats();
          assert.equal(stats.sequencer, 'gtrex');
          assert.deepEqual({ ...stats, sequencer: '', elementEngine: '' }, { ...ref.stats(), sequencer: '', elementEngine: '' }, `seed ${s}: stats`);
          assert.ok(gtrex.stats().searches > 0, 'no search ran on the GPU');
          notifications += want.reduce((a, l) => a + l.length, 0);
        } finally {
          await ref.close();
          await cand.close(); // closes the sequencer too
        }
      }
      assert.ok(notifications > 40, `only ${notifications} notifications`);
    });
  }

  it('[E15][E17] a GPU-sequenced matcher\'s snapshot restores into a CDP one (and back) that answers the rest alike', async () => {
    const knobs = { ...KNOBS, events: 300 };
    let restoredWithState = 0;
    for (let s = 1; s <= 3; s++) {
      const ops = generate(s * 424_241, knobs);
      const whole = new PatternMatcher({ elements: new ReferenceMatcher(), sequencer: new ReferenceSequencer({ maxRetainedPerElement: knobs.maxRetained }), latenessMs: knobs.latenessMs });
      const want = await run(ops, whole);
      await whole.close();
      for (const [first, second] of [['gtrex', 'cdp'], ['cdp', 'gtrex']] as const) {
        const make = async (kind: 'cdp' | 'gtrex') =>
          new PatternMatcher({
            elements: new FastMatcher(),
            sequencer: kind === 'cdp' ? new CdpSequencer({ maxRetainedPerElement: knobs.maxRetained }) : await GtrexSequencer.create({ gpu: { allowSoftware: true }, maxRetainedPerElement: knobs.maxRetained, indexBuckets: 4, bucketLoad: 1 }),
            latenessMs: knobs.latenessMs,
          });
        const mid = Math.floor(ops.length / 2);
        const a = await make(first);
        const got = await run(ops.slice(0, mid), a);
        const snap = structuredClone(await a.snapshot());
        await a.close();
        if (snap.sequencer.patterns.some((p) => p.elements.some((e) => e.length > 0))) restoredWithState++;
        const b = await make(second);
        try {
          b.restore(snap);
          givePositions(ops.slice(0, mid), b);
          got.push(...(await run(ops.slice(mid), b)));
          for (let i = 0; i < want.length; i++) assert.deepEqual(got[i], want[i], `seed ${s}, ${first} then ${second}, call ${i}`);
        } finally {
          await b.close();
        }
      }
    }
    assert.ok(restoredWithState > 0, 'no snapshot held events');
  });
});
