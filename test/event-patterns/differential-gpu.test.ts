/**
 * Pattern subscriptions with the GPU engine matching the elements' filters (on llvmpipe where there
 * is no GPU): the GPU engine queues its batches and matches each against the state when it is sent,
 * so this is where PatternMatcher's call order (positions, patterns and matches as they were at
 * each release, E5, E17) is exercised on a real asynchronous engine. Every call's notifications and
 * the final statistics must equal the reference's.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { CdpSequencer } from '../../src/engines/event-patterns/cdp.js';
import { PatternMatcher } from '../../src/engines/event-patterns/pattern-matcher.js';
import { ReferenceSequencer } from '../../src/engines/event-patterns/reference.js';
import { GpuMatcher } from '../../src/engines/gpu/matcher.js';
import { ReferenceMatcher } from '../../src/engines/index.js';
import { type Knobs, generate, run } from '../support/event-patterns.js';

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
