/**
 * TagMatch's batching front end (src/engines/tag-batcher.ts): a batch goes to the index when it is
 * full or when its timeout fires, never before; each query gets its own answer; bad queries and
 * failed batches are refused without touching the others. Time is a hand-driven timer.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { type BatchIndex, type BatchTimer, TagBatcher } from '../src/engines/tag-batcher.js';
import { type TagMatches, TagSetIndex, type TagSetsView } from '../src/engines/tag-index.js';
import { GpuContext } from '../src/engines/gpu/device.js';
import { GpuTagIndex } from '../src/engines/gpu/tag-index.js';
import { tagWorkload } from '../src/workload/tags.js';

/** A timer that fires only when the test says so. */
class HandTimer implements BatchTimer {
  private next = 1;
  readonly armed = new Map<number, { fn: () => void; ms: number }>();
  set(fn: () => void, ms: number): unknown {
    const h = this.next++;
    this.armed.set(h, { fn, ms });
    return h;
  }
  clear(h: unknown): void {
    this.armed.delete(h as number);
  }
  fireAll(): void {
    const due = [...this.armed.values()];
    this.armed.clear();
    for (const d of due) d.fn();
  }
}

/** An index that records the batches it is asked and answers from the CPU index. */
class Recording implements BatchIndex {
  readonly batches: number[][][] = [];
  failNext = false;
  constructor(private readonly index: TagSetIndex) {}
  matchAll(queries: TagSetsView, unique: boolean): TagMatches {
    const qs: number[][] = [];
    for (let j = 0; j + 1 < queries.offsets.length; j++) qs.push([...queries.tags.subarray(queries.offsets[j], queries.offsets[j + 1])]);
    this.batches.push(qs);
    if (this.failNext) {
      this.failNext = false;
      throw new Error('device lost');
    }
    return this.index.matchAll(queries, unique);
  }
}

const sorted = (a: Uint32Array): number[] => [...a].sort((x, y) => x - y);

function queryOf(q: TagSetsView, j: number): number[] {
  return [...q.tags.subarray(q.offsets[j], q.offsets[j + 1])];
}

describe('tag batcher', () => {
  const w = tagWorkload({ seed: 3, sets: 4000, hashtags: 300, languages: 2, publishers: 200, users: 1500, queries: 40, setTagsMin: 1 });
  const cpu = TagSetIndex.load(w.db, w.keys);
  const want = cpu.matchAll(w.queries, false);
  const wantOf = (j: number): number[] => sorted(want.keys.subarray(want.offsets[j], want.offsets[j + 1]));

  it('a full batch is sent at once; a partial one only when its timeout fires; each query gets its own keys', async () => {
    const idx = new Recording(cpu);
    const timer = new HandTimer();
    const b = new TagBatcher(idx, { maxBatch: 8, timeoutMs: 5 }, timer);
    const answers: Promise<Uint32Array>[] = [];
    for (let j = 0; j < 8; j++) answers.push(b.match(queryOf(w.queries, j)));
    assert.equal(idx.batches.length, 1, 'the eighth query filled the batch');
    assert.equal(timer.armed.size, 0, 'no timer left for a sent batch');
    for (let j = 8; j < 11; j++) answers.push(b.match(queryOf(w.queries, j)));
    assert.equal(idx.batches.length, 1, 'three queries wait');
    assert.deepEqual([...timer.armed.values()].map((a) => a.ms), [5], 'one timer, armed by the first query of the batch');
    timer.fireAll();
    assert.equal(idx.batches.length, 2);
    assert.deepEqual(idx.batches.map((x) => x.length), [8, 3]);
    const got = await Promise.all(answers);
    for (let j = 0; j < 11; j++) assert.deepEqual(sorted(got[j]), wantOf(j), `query ${j}`);
    assert.deepEqual(b.stats(), { queries: 11, batches: 2, full: 1, timedOut: 1, failedBatches: 0 });
  });

  it('a bad query is refused alone; a failed batch rejects its queries and the next batch is answered', async () => {
    const idx = new Recording(cpu);
    const timer = new HandTimer();
    const b = new TagBatcher(idx, { maxBatch: 4, timeoutMs: 2 }, timer);
    await assert.rejects(b.match([5, 3]), /ascending and distinct, got 5 then 3/);
    await assert.rejects(b.match([1, 1]), /ascending and distinct/);
    await assert.rejects(b.match([Number.NaN]), /query tag 0 must be an integer/);
    assert.equal(timer.armed.size, 0, 'refused queries arm nothing');
    idx.failNext = true;
    const lost = [b.match(queryOf(w.queries, 0)), b.match(queryOf(w.queries, 1))];
    timer.fireAll();
    for (const p of lost) await assert.rejects(p, /device lost/);
    const next = b.match(queryOf(w.queries, 2));
    timer.fireAll();
    assert.deepEqual(sorted(await next), wantOf(2));
    assert.equal(b.stats().failedBatches, 1);
  });

  it('flush sends what waits; close answers what was asked and refuses what comes after', async () => {
    const idx = new Recording(cpu);
    const timer = new HandTimer();
    const b = new TagBatcher(idx, { maxBatch: 100, timeoutMs: 1000, unique: true }, timer);
    const p = b.match(queryOf(w.queries, 4));
    await b.flush();
    const u = cpu.matchAll({ offsets: Uint32Array.of(0, queryOf(w.queries, 4).length), tags: Uint32Array.from(queryOf(w.queries, 4)) }, true);
    assert.deepEqual(sorted(await p), sorted(u.keys));
    assert.equal(timer.armed.size, 0);
    const q = b.match(queryOf(w.queries, 5));
    await b.close();
    assert.deepEqual(sorted(await q), wantOf(5).filter((k, i, a) => i === 0 || a[i - 1] !== k));
    await assert.rejects(b.match(queryOf(w.queries, 6)), /closed/);
    assert.throws(() => new TagBatcher(idx, { maxBatch: 0 }), /maxBatch must be an integer >= 1/);
    assert.throws(() => new TagBatcher(idx, { timeoutMs: Number.POSITIVE_INFINITY }), /timeoutMs must be a number in \[0, 2147483647\]/);
    assert.throws(() => new TagBatcher(idx, { timeoutMs: 3e9 }), /timeoutMs must be a number in \[0, 2147483647\], got 3000000000/);
    // An index that answers the wrong number of queries: the batch's queries are rejected, not left waiting.
    const short = new TagBatcher({ matchAll: () => ({ offsets: Uint32Array.of(0), keys: new Uint32Array(0) }) }, { maxBatch: 2 }, timer);
    const both = [short.match([1]), short.match([2])];
    for (const p of both) await assert.rejects(p, /answered 0 queries of 2/);
  });

  it('over the GPU index: answers equal the CPU index, batches by size and by timeout', async () => {
    const ctx = await GpuContext.open({ allowSoftware: true });
    const gpu = await GpuTagIndex.build(ctx, cpu, { maxPartition: 1000, leafSize: 128, workgroupSize: 64 });
    try {
      const timer = new HandTimer();
      const b = new TagBatcher(gpu, { maxBatch: 16, timeoutMs: 3 }, timer);
      const answers: Promise<Uint32Array>[] = [];
      for (let j = 0; j < 40; j++) answers.push(b.match(queryOf(w.queries, j)));
      timer.fireAll();
      const got = await Promise.all(answers);
      for (let j = 0; j < 40; j++) assert.deepEqual(sorted(got[j]), wantOf(j), `query ${j}`);
      assert.deepEqual(b.stats(), { queries: 40, batches: 3, full: 2, timedOut: 1, failedBatches: 0 });
    } finally {
      gpu.destroy();
      await ctx.close();
    }
  });
});
