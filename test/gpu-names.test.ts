/**
 * The GPU engine's filters of names only (tags and `exists`): their name ids as shared runs of
 * cStr words (the first in fPos without an area), and name ids past the 20 bits a constraint head
 * once had. Runs wherever WebGPU finds an adapter; in CI that is Mesa's llvmpipe.
 */
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import type { MatcherOptions } from '../src/engines/matcher.js';
import { GpuContext } from '../src/engines/gpu/device.js';
import { GpuKernels, GpuMatcher, type GpuMatcherOptions } from '../src/engines/gpu/matcher.js';

const ctx = await GpuContext.open({ allowSoftware: true });
const kernels = await GpuKernels.compile(ctx);
after(() => ctx.close());

/** The GPU path always (cpuBelowFilters 0, select gpu), on the shared device. */
const make = (o?: MatcherOptions & GpuMatcherOptions) => GpuMatcher.attach(kernels, { cpuBelowFilters: 0, select: 'gpu', ...o });
const sorted = (ids: string[]) => [...ids].sort();

describe('gpu engine: filters of names only (tags, exists) share one run of name ids', () => {
  it('match by their run while others with the same names come and go, and a freed run serves new names', async () => {
    const m = make();
    try {
      const ev = (tags: string[], attributes: Record<string, number> = {}) => ({ id: 'e', lat: 45.46, lon: 9.18, attributes, tags });
      m.add({ id: 'a', owner: 'd1', filters: [{ constraints: [], tags: ['food', 'vegan', 'lunch'] }] });
      m.add({ id: 'b', owner: 'd2', filters: [{ constraints: [], tags: ['lunch', 'food', 'vegan'] }] });
      m.add({ id: 'c', owner: 'd3', filters: [{ constraints: [{ name: 'lunch', op: 'exists' }], tags: ['food', 'vegan'] }] });
      m.add({ id: 'near', owner: 'd4', filters: [{ constraints: [], tags: ['food'], area: { center: { lat: 45.46, lon: 9.18 }, radiusM: 50 } }] });
      assert.deepEqual(sorted(await m.match(ev(['food', 'lunch', 'vegan', 'x']))), ['a', 'b', 'near']);
      assert.deepEqual(sorted(await m.match(ev(['food', 'vegan'], { lunch: 1 }))), ['c', 'near']);
      assert.deepEqual(sorted(await m.match(ev(['food', 'lunch']))), ['near']);
      m.remove('a');
      assert.deepEqual(sorted(await m.match(ev(['food', 'lunch', 'vegan']))), ['b', 'near'], 'the run stays while b holds it');
      m.remove('b');
      // Three other names: the freed run of three words is taken again, and holds the new names.
      m.add({ id: 'z', owner: 'd5', filters: [{ constraints: [], tags: ['x', 'y', 'z'] }] });
      assert.deepEqual(sorted(await m.match(ev(['food', 'lunch', 'vegan']))), ['near']);
      assert.deepEqual(sorted(await m.match(ev(['x', 'y', 'z']))), ['z']);
      assert.deepEqual(sorted(await m.match(ev(['x', 'y']))), []);
      assert.equal(m.stats().extra!.cpuEvents, 0, 'the GPU answered');
    } finally {
      await m.close();
    }
  });
});

describe('gpu engine: more than 2^20 distinct names', () => {
  it('names past the old 20-bit field match in names-only runs and in constraint heads alike', async () => {
    const m = make({ limits: { maxTagsPerFilter: 255, maxTagsPerEvent: 1024 } });
    try {
      // 65 subscriptions × 64 filters × 255 distinct tags: 1,060,800 names, past 2^20 = 1,048,576.
      const tagsOf = (s: number, f: number) => Array.from({ length: 255 }, (_, k) => `t${s}.${f}.${k}`);
      for (let s = 0; s < 65; s++) m.add({ id: `s${s}`, owner: 'd', filters: Array.from({ length: 64 }, (_, f) => ({ constraints: [], tags: tagsOf(s, f) })) });
      m.add({ id: 'mixed', owner: 'd', filters: [{ constraints: [{ name: 'late', op: 'eq', value: 3 }], tags: ['zz1'] }] });
      m.add({ id: 'names', owner: 'd', filters: [{ constraints: [], tags: ['zz1', 'zz2'] }] });
      const ev = (tags: string[], late: number) => ({ id: 'e', lat: 1, lon: 2, attributes: { late }, tags });
      // 255 tags pass every filter's 32-bit Bloom word: the first such event overflows the
      // candidate buffer (the CPU answers it, then the buffer grows); the GPU answers from then on.
      assert.deepEqual(sorted(await m.match(ev(tagsOf(64, 63), 0))), ['s64']);
      const cpuBefore = m.stats().extra!.cpuEvents;
      assert.deepEqual(sorted(await m.match(ev(['zz1', 'zz2'], 3))), ['mixed', 'names']);
      assert.deepEqual(sorted(await m.match(ev(['zz1', 'zz2'], 4))), ['names']);
      assert.deepEqual(sorted(await m.match(ev(['zz1'], 3))), ['mixed']);
      assert.deepEqual(sorted(await m.match(ev(tagsOf(64, 63), 0))), ['s64']);
      assert.deepEqual(sorted(await m.match(ev(tagsOf(64, 63).slice(1), 0))), []);
      assert.equal(m.stats().extra!.cpuEvents, cpuBefore, 'the GPU answered');
    } finally {
      await m.close();
    }
  });
});
