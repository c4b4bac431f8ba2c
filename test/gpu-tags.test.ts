/**
 * The GPU engine's tags (Matcher.tag, matchBatchTagged) where its batches make them subtle:
 * subscriptions removed or replaced while a batch is in flight, and events its CPU mirror answers.
 * Every answer is also checked by the differential suite (gpu-engine.test.ts), which tags.
 */
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { GpuContext } from '../src/engines/gpu/device.js';
import { GpuKernels, GpuMatcher, type GpuMatcherOptions } from '../src/engines/gpu/matcher.js';
import type { MatcherOptions } from '../src/engines/matcher.js';

const ctx = await GpuContext.open({ allowSoftware: true });
const kernels = await GpuKernels.compile(ctx);
after(() => ctx.close());

const make = (o?: MatcherOptions & GpuMatcherOptions) => GpuMatcher.attach(kernels, { cpuBelowFilters: 0, select: 'gpu', ...o });
const sorted = (ids: string[]) => [...ids].sort();

describe('gpu engine: tags', () => {
  it('[R6] tagged: a removed subscription is not listed by a batch in flight, a replaced one is listed by its id, not by the tag it lost', async () => {
    const m = make();
    try {
      const e = { id: 'e', lat: 45.46, lon: 9.18, attributes: { x: 1 } };
      const has = { filters: [{ constraints: [{ name: 'x', op: 'exists' as const }] }] };
      for (const id of ['a', 'b', 'c']) m.add({ id, owner: 'd', ...has });
      const [ta, tb, tc] = [10, 11, 12];
      assert.equal(m.tag('a', ta), true);
      assert.equal(m.tag('b', tb), true);
      assert.equal(m.tag('c', tc), true);
      const first = m.matchBatchTagged([e]);
      m.remove('a');
      m.replace({ id: 'b', owner: 'd', ...has });
      // A new subscription that would take a's index were it free at once.
      m.add({ id: 'n', owner: 'd', ...has });
      const [listed] = await first;
      assert.equal(listed.length, 2);
      assert.ok(listed.includes(tc), 'the untouched subscription is listed as its tag');
      assert.ok(listed.includes('b'), 'the replaced one is listed by its id');
      // After the batch: b (untagged since its replacement) and n by id, c by its tag; ids through matchBatch.
      const [now] = await m.matchBatchTagged([e]);
      assert.deepEqual(now.filter((x) => typeof x === 'string').sort(), ['b', 'n']);
      assert.deepEqual(now.filter((x) => typeof x !== 'string'), [tc]);
      assert.deepEqual(sorted((await m.matchBatch([e]))[0]), ['b', 'c', 'n']);
      assert.deepEqual(sorted(await m.match(e)), ['b', 'c', 'n']);
      assert.equal(m.tag('a', 13), false, 'a removed subscription takes no tag');
    } finally {
      await m.close();
    }
  });

  it('[R6] tagged: events the CPU answers (a lone event on the CPU path, overflow) list the same tags', async () => {
    const m = GpuMatcher.attach(kernels, { cpuBelowFilters: 1_000_000 });
    try {
      const e = { id: 'e', lat: 45.46, lon: 9.18, attributes: { x: 1 } };
      m.add({ id: 'a', owner: 'd', filters: [{ constraints: [{ name: 'x', op: 'exists' }] }] });
      m.add({ id: 'b', owner: 'd', filters: [{ constraints: [{ name: 'x', op: 'exists' }] }] });
      const ta = 0;
      m.tag('a', ta);
      assert.equal(m.path, 'cpu');
      const [listed] = await m.matchBatchTagged([e]);
      assert.deepEqual(listed.filter((x) => typeof x !== 'string'), [ta]);
      assert.deepEqual(listed.filter((x) => typeof x === 'string'), ['b']);
      assert.deepEqual(sorted(await m.match(e)), ['a', 'b']);
    } finally {
      await m.close();
    }
  });

  it('[R6] tagged: one batch of a tagged call and untagged ones lists tags for the first only', async () => {
    const m = make({ inFlight: 1 });
    try {
      const e = (id: string) => ({ id, lat: 45.46, lon: 9.18, attributes: { x: 1 } });
      for (const id of ['a', 'b']) m.add({ id, owner: 'd', filters: [{ constraints: [{ name: 'x', op: 'exists' as const }] }] });
      m.tag('a', 5);
      // The first call runs alone; the three behind it wait for it and go as one batch.
      const first = m.matchBatch([e('0')]);
      const tagged = m.matchBatchTagged([e('1'), e('2')]);
      const lone = m.match(e('3'));
      const plain = m.matchBatch([e('4')]);
      const batches = m.stats().extra!.batches as number;
      assert.deepEqual((await first).map(sorted), [['a', 'b']]);
      assert.deepEqual((await tagged).map((r) => r.map(String).sort()), [['5', 'b'], ['5', 'b']]);
      assert.deepEqual(sorted(await lone), ['a', 'b']);
      assert.deepEqual((await plain).map(sorted), [['a', 'b']]);
      assert.equal((m.stats().extra!.batches as number) - batches, 2, 'the three calls behind the first shared one batch');
    } finally {
      await m.close();
    }
  });

  it('[R6] tagged: a mixed batch whose events overflow their candidates is answered on the CPU, tags for the tagged call only', async () => {
    // One candidate a event: every event here has two, so each overflows and the CPU answers it.
    const m = make({ inFlight: 1, initialCandidates: 1 });
    try {
      const e = (id: string) => ({ id, lat: 45.46, lon: 9.18, attributes: { x: 1 } });
      for (const id of ['a', 'b']) m.add({ id, owner: 'd', filters: [{ constraints: [{ name: 'x', op: 'exists' as const }] }] });
      m.tag('a', 9);
      // The first batch has no candidates (no filter can take an event without x): it grows nothing.
      const first = m.matchBatch([{ id: '0', lat: 45.46, lon: 9.18, attributes: { y: 1 } }]);
      const tagged = m.matchBatchTagged([e('1')]);
      const plain = m.matchBatch([e('2')]);
      assert.deepEqual(await first, [[]]);
      assert.deepEqual((await tagged).map((r) => r.map(String).sort()), [['9', 'b']]);
      assert.deepEqual((await plain).map(sorted), [['a', 'b']]);
      assert.ok((m.stats().extra!.overflowEvents as number) >= 2, 'the shared batch overflowed');
    } finally {
      await m.close();
    }
  });
});
