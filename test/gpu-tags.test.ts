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
      const ta = { key: 'a' };
      const tb = { key: 'b' };
      const tc = { key: 'c' };
      assert.equal(m.tag(ta), true);
      assert.equal(m.tag(tb), true);
      assert.equal(m.tag(tc), true);
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
      assert.equal(m.tag({ key: 'a' }), false, 'a removed subscription takes no tag');
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
      const ta = { key: 'a' };
      m.tag(ta);
      assert.equal(m.path, 'cpu');
      const [listed] = await m.matchBatchTagged([e]);
      assert.deepEqual(listed.filter((x) => typeof x !== 'string'), [ta]);
      assert.deepEqual(listed.filter((x) => typeof x === 'string'), ['b']);
      assert.deepEqual(sorted(await m.match(e)), ['a', 'b']);
    } finally {
      await m.close();
    }
  });

});
