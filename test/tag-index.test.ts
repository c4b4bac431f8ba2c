/**
 * Subset matching over tag-set databases (TagMatch's problem): the CPU index against a brute
 * force over every entry, and the GPU index (here on a software adapter) against the CPU index,
 * for match and match-unique, on seeded Twitter-like workloads (src/workload/tags.ts), with
 * partitioning, reruns for room, and Bloom false positives forced by queries with many tags.
 */
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { TagDictionary, type TagMatches, TagSetIndex, type TagSetsView } from '../src/engines/tag-index.js';
import { GpuContext } from '../src/engines/gpu/device.js';
import { GpuTagIndex, signatureInto } from '../src/engines/gpu/tag-index.js';
import { hostBuild, shared } from '../src/engines/gpu/tag-build.js';
import { TagWorkerPool } from '../src/engines/gpu/tag-pool.js';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Prng, Zipf, ZipfAlias } from '../src/workload/prng.js';
import { tagText, tagWorkload } from '../src/workload/tags.js';

/** Small vocabularies and single-tag interests: many matches a query, many shared sets. */
const DENSE = { setTagsMin: 1, tagExponent: 1, publisherFraction: 0.3 };

/** Every entry whose set is a subset of the query, by plain Set membership. */
function brute(db: TagSetsView, keys: Uint32Array, queries: TagSetsView, unique: boolean): number[][] {
  const out: number[][] = [];
  for (let j = 0; j + 1 < queries.offsets.length; j++) {
    const q = new Set(queries.tags.subarray(queries.offsets[j], queries.offsets[j + 1]));
    const got: number[] = [];
    for (let i = 0; i + 1 < db.offsets.length; i++) {
      let ok = true;
      for (let k = db.offsets[i]; k < db.offsets[i + 1] && ok; k++) ok = q.has(db.tags[k]);
      if (ok) got.push(keys[i]);
    }
    out.push(unique ? [...new Set(got)] : got);
  }
  return out.map((l) => l.sort((a, b) => a - b));
}

function lists(m: TagMatches): number[][] {
  const out: number[][] = [];
  for (let j = 0; j + 1 < m.offsets.length; j++) out.push([...m.keys.subarray(m.offsets[j], m.offsets[j + 1])].sort((a, b) => a - b));
  return out;
}

function firstDiff(a: number[][], b: number[][]): string {
  for (let j = 0; j < Math.max(a.length, b.length); j++) {
    if (JSON.stringify(a[j]) !== JSON.stringify(b[j])) return `query ${j}: ${JSON.stringify(a[j]?.slice(0, 10))} vs ${JSON.stringify(b[j]?.slice(0, 10))}`;
  }
  return '';
}

describe('tag-set index: CPU', () => {
  it('[T5] match and match-unique equal a brute force on a seeded workload', () => {
    const w = tagWorkload({ ...DENSE, seed: 3, sets: 4000, hashtags: 300, languages: 3, publishers: 200, users: 1500, queries: 400 });
    const idx = TagSetIndex.load(w.db, w.keys);
    for (const unique of [false, true]) {
      const want = brute(w.db, w.keys, w.queries, unique);
      const got = lists(idx.matchAll(w.queries, unique));
      assert.equal(firstDiff(got, want), '', `unique=${unique}`);
      assert.ok(want.every((l) => l.length > 0), 'every query matches the set it was made from');
    }
    const st = idx.stats();
    assert.equal(st.entries, 4000);
    assert.ok(st.sets < 4000, `equal sets are stored once (${st.sets} distinct)`);
  });

  it('[T5] an empty set matches every query; equal sets keep every key; bad input is refused', () => {
    const dict = new TagDictionary();
    const db = dict.sets([[], ['a', 'b'], ['b', 'a'], ['c'], ['a', 'b', 'c', 'd']]);
    const idx = TagSetIndex.load(db, Uint32Array.from([9, 1, 2, 3, 4]));
    const q = dict.sets([['a', 'b'], [], ['c', 'a', 'b', 'd', 'e']]);
    assert.deepEqual(lists(idx.matchAll(q, false)), [[1, 2, 9], [9], [1, 2, 3, 4, 9]]);
    assert.deepEqual(lists(TagSetIndex.load(db, Uint32Array.from([1, 1, 1, 2, 2])).matchAll(q, true)), [[1], [1], [1, 2]]);
    assert.throws(() => TagSetIndex.load({ offsets: Uint32Array.from([0, 2]), tags: Uint32Array.from([5, 5]) }, Uint32Array.from([0])), /ascending and distinct/);
    assert.throws(() => TagSetIndex.load(db, Uint32Array.from([1])), /5 sets but 1 keys/);
    // Keys may be any u32 (ranked inside); tag ids must be dense.
    const big = TagSetIndex.load(db, Uint32Array.from([2 ** 32 - 1, 2 ** 31, 2 ** 31, 7, 2 ** 32 - 1]));
    assert.deepEqual(lists(big.matchAll(q, false)), [[2 ** 31, 2 ** 31, 2 ** 32 - 1], [2 ** 32 - 1], [7, 2 ** 31, 2 ** 31, 2 ** 32 - 1, 2 ** 32 - 1]]);
    assert.deepEqual(lists(big.matchAll(q, true)), [[2 ** 31, 2 ** 32 - 1], [2 ** 32 - 1], [7, 2 ** 31, 2 ** 32 - 1]]);
    assert.ok(big.stats().memoryBytes < 4096, `no table sized by the largest key (${big.stats().memoryBytes} bytes)`);
    // Sparse tag ids are ranked for the filing table; queries may name ids no set holds.
    const sparse = TagSetIndex.load({ offsets: Uint32Array.from([0, 1, 3, 4]), tags: Uint32Array.from([2 ** 32 - 1, 7, 2 ** 31, 2 ** 31]) }, Uint32Array.from([1, 2, 3]));
    assert.deepEqual(lists(sparse.matchAll({ offsets: Uint32Array.from([0, 2, 5, 6]), tags: Uint32Array.from([7, 2 ** 31, 3, 2 ** 31, 2 ** 32 - 1, 9]) }, false)), [[2, 3], [1, 3], []]);
    assert.ok(sparse.stats().memoryBytes < 4096, `no table sized by the largest tag id (${sparse.stats().memoryBytes} bytes)`);
    // Queries must be ascending and distinct, as sets are.
    assert.throws(() => sparse.matchAll({ offsets: Uint32Array.from([0, 2]), tags: Uint32Array.from([9, 7]) }, false), /ascending and distinct/);
  });

  it('the alias Zipf sampler draws each rank with its Zipf probability', () => {
    for (const [n, s] of [[1, 1], [7, 0], [50, 0.8], [50, 1.2], [1000, 1]] as const) {
      const z = new ZipfAlias(n, s);
      const ref = new Zipf(n, s);
      const rng = new Prng(n + s * 10);
      const N = 200_000;
      const hist = new Float64Array(n);
      for (let k = 0; k < N; k++) hist[z.sample(rng)]++;
      for (let k = 0; k < n; k++) {
        const p = ref.probability(k);
        const sd = Math.sqrt((p * (1 - p)) / N);
        assert.ok(Math.abs(hist[k] / N - p) <= 5 * sd + 1e-9, `n ${n}, s ${s}, rank ${k}: ${hist[k] / N} vs ${p}`);
      }
    }
  });

  it('tag text: languages prefix hashtags; publishers are named', () => {
    const o = { hashtags: 100, languages: 2 };
    assert.equal(tagText(o, 0), 'en_h0');
    assert.equal(tagText(o, 150), 'ja_h50');
    assert.equal(tagText(o, 200), '@p0');
  });
});

describe('tag-set index: the GPU index\'s host build', () => {
  /** `n` sets of 1-3 tags of `tags`, placed inside larger shared buffers (views that do not start at 0). */
  function sharedSets(n: number, tags: number, seed: number): { offsets: Uint32Array; tags: Uint32Array } {
    const rnd = new Prng(seed);
    const offs: number[] = [0];
    const all: number[] = [];
    for (let i = 0; i < n; i++) {
      const set = new Set<number>();
      const k = rnd.int(1, 3);
      while (set.size < k) set.add(rnd.int(0, tags - 1));
      all.push(...[...set].sort((a, b) => a - b));
      offs.push(all.length);
    }
    const pad = 7;
    const o = new Uint32Array(new SharedArrayBuffer(4 * (offs.length + 2 * pad)), 4 * pad, offs.length);
    o.set(offs);
    const t = new Uint32Array(new SharedArrayBuffer(4 * (all.length + 2 * pad)), 4 * pad, all.length);
    t.set(all);
    return { offsets: o, tags: t };
  }

  it('workers read views into shared buffers from where they start: the same layout as one thread', async () => {
    const db = sharedSets(70_000, 20_000, 4);
    const rule = { maxPartition: 4000, leafSize: 256 };
    const one = await hostBuild(db.offsets, db.tags, 70_000, rule, 1);
    const two = await hostBuild(db.offsets, db.tags, 70_000, rule, 2);
    assert.ok(one.parts.length >= 16, `${one.parts.length} partitions`);
    assert.deepEqual(two.parts, one.parts);
    assert.ok(Buffer.compare(Buffer.from(two.order.buffer, two.order.byteOffset, two.order.byteLength), Buffer.from(one.order.buffer, one.order.byteOffset, one.order.byteLength)) === 0, 'the same set at every position');
    const copy = shared(db.tags);
    assert.ok(copy !== db.tags && copy.byteOffset === 0 && copy.byteLength === copy.buffer.byteLength);
    assert.deepEqual([...copy.subarray(0, 50)], [...db.tags.subarray(0, 50)]);
    assert.equal(shared(new Uint32Array(0)).length, 0);
  });

  it('tens of thousands of partitions are listed (one at a time: no spread into one call)', async () => {
    // 64,000 single-tag sets, split down to one set a partition.
    const n = 64_000;
    const offsets = Uint32Array.from({ length: n + 1 }, (_, i) => i);
    const tags = Uint32Array.from({ length: n }, (_, i) => i);
    const b = await hostBuild(offsets, tags, n, { maxPartition: 1, leafSize: 1 }, 1);
    assert.ok(b.parts.length >= 63_000, `${b.parts.length} partitions`);
    assert.equal(b.parts.reduce((a, p) => a + p[1], 0), n, 'every set in one partition');
    assert.equal((await hostBuild(offsets, tags, 0, { maxPartition: 1, leafSize: 1 }, 1)).order.length, 0, 'an empty database has an empty order');
  });
});

const ctx = await GpuContext.open({ allowSoftware: true });
after(() => ctx.close());

describe('tag-set index: GPU', () => {
  it('signatures tell tags apart: 200k tags, 200k different bit patterns, 7 bits each', () => {
    // Positions taken modulo 192 of two hashes would give about 37k patterns: one tag in 37k
    // would pass for another (seen as 2,900 false hits a query at 42M entries).
    const sig = new Uint32Array(6);
    const seen = new Set<string>();
    let bits = 0;
    for (let t = 0; t < 200_000; t++) {
      signatureInto(sig, 0, Uint32Array.of(t), 0, 1);
      seen.add(sig.join(','));
      for (const w of sig) for (let x = w; x !== 0; x &= x - 1) bits++;
    }
    assert.ok(seen.size >= 199_990, `${seen.size} patterns`);
    assert.ok(bits / 200_000 > 6.8 && bits / 200_000 <= 7, `${bits / 200_000} bits a tag`);
  });

  it('[T5][X1] equals the CPU index, match and match-unique, over many small partitions', async () => {
    const w = tagWorkload({ ...DENSE, seed: 5, sets: 6000, hashtags: 400, languages: 4, publishers: 300, users: 2000, queries: 300 });
    const cpu = TagSetIndex.load(w.db, w.keys);
    const gpu = await GpuTagIndex.build(ctx, cpu, { maxPartition: 700, leafSize: 64, workgroupSize: 64, batch: 70, inFlight: 2 });
    try {
      const st = gpu.stats();
      assert.ok(st.partitions >= 6, `partitions: ${st.partitions}`);
      assert.ok(st.largestPartition <= 700, `largest partition ${st.largestPartition}`);
      for (const unique of [false, true]) {
        const want = lists(cpu.matchAll(w.queries, unique));
        const got = lists(await gpu.matchAll(w.queries, unique));
        assert.equal(firstDiff(got, want), '', `unique=${unique}`);
      }
      // The GPU's pre-process sends a query only to partitions whose mask it holds.
      const visits = gpu.stats().visits / (2 * 300);
      assert.ok(visits >= 1 && visits < st.partitions / 2, `${visits} of ${st.partitions} partitions visited a query`);
    } finally {
      gpu.destroy();
    }
  });

  it('[X1] verification on worker threads: the same answers, false hits refused, sparse keys given back', async () => {
    // Queries with many extra tags (Bloom false positives) and keys far apart (ranked by the index).
    const w = tagWorkload({ ...DENSE, seed: 21, sets: 5000, hashtags: 1500, languages: 1, publishers: 100, users: 3000, queries: 120, extraMin: 30, extraMax: 45 });
    const keys = w.keys.map((k) => k * 977 + 13);
    for (const sharedTables of [false, true]) {
      const cpu = TagSetIndex.load(w.db, keys, undefined, { shared: sharedTables });
      assert.equal(cpu.verifyTables().keyValues !== null, true, 'keys are ranked');
      const gpu = await GpuTagIndex.build(ctx, cpu, { maxPartition: 800, leafSize: 128, workgroupSize: 64, batch: 25, inFlight: 2, verifyThreads: 2 });
      try {
        for (const unique of [false, true]) {
          const want = lists(cpu.matchAll(w.queries, unique));
          assert.equal(firstDiff(lists(await gpu.matchAll(w.queries, unique)), want), '', `unique=${unique} shared=${sharedTables}`);
        }
        const st = gpu.stats();
        assert.ok(st.falseHits > 0, `false positives refused by the workers (${st.falseHits} of ${st.hits})`);
        assert.equal(st.batches, 2 * Math.ceil(120 / 25));
      } finally {
        gpu.destroy();
      }
    }
    await assert.rejects(GpuTagIndex.build(ctx, TagSetIndex.load(w.db, w.keys), { verifyThreads: -1 }), /verifyThreads must be an integer >= 0, got -1/);
  });

  // (The time limit only turns a process that cannot exit into a failure instead of a hang.)
  it('verification workers: a task that fails gives its worker back; with every worker gone this thread verifies; an index left undestroyed lets the process exit', { timeout: 180_000 }, async () => {
    // The pool alone: a task that throws in the worker, twice, then the worker still serves.
    const empty = new SharedArrayBuffer(0);
    const pool = await TagWorkerPool.start(1, { kind: 'signatures', from: 0, to: 0 });
    try {
      const bad = { kind: 'verify' as const, qOff: Uint32Array.of(0), qTags: new Uint32Array(0), data: Uint32Array.of(0, 0), head: 2, hits: 0, unique: false };
      await assert.rejects(pool.run(bad), /verify before tables/);
      await assert.rejects(pool.run(bad), /verify before tables/);
      assert.equal((await pool.run({ kind: 'tables', setOff: new SharedArrayBuffer(4), setTags: empty, keyOff: new SharedArrayBuffer(4), keyList: empty, keyValues: null, order: empty })).kind, 'done');
      assert.equal((await pool.run(bad)).kind, 'verified');
      assert.equal(pool.size, 1);
    } finally {
      await pool.close();
    }
    // The index: its workers killed, answers still come (from this thread).
    const w = tagWorkload({ ...DENSE, seed: 31, sets: 3000, hashtags: 500, languages: 2, publishers: 100, users: 1000, queries: 80 });
    const cpu = TagSetIndex.load(w.db, w.keys);
    const gpu = await GpuTagIndex.build(ctx, cpu, { maxPartition: 600, leafSize: 128, workgroupSize: 64, batch: 20, verifyThreads: 2 });
    try {
      const want = lists(cpu.matchAll(w.queries, false));
      assert.equal(firstDiff(lists(await gpu.matchAll(w.queries, false)), want), '');
      assert.equal(gpu.stats().verifyFallbacks, 0);
      for (const worker of (gpu as unknown as { pool: { workers: { terminate(): Promise<number> }[] } }).pool.workers) await worker.terminate();
      assert.equal(firstDiff(lists(await gpu.matchAll(w.queries, false)), want), '');
      assert.equal(gpu.stats().verifyFallbacks, 4, 'the four batches verified here');
    } finally {
      gpu.destroy();
    }
    // A program that never destroys its index still exits (idle workers are unref'd).
    const script = `import { GpuContext } from ${JSON.stringify(new URL('../src/engines/gpu/device.js', import.meta.url).href)};
      import { GpuTagIndex } from ${JSON.stringify(new URL('../src/engines/gpu/tag-index.js', import.meta.url).href)};
      import { TagSetIndex } from ${JSON.stringify(new URL('../src/engines/tag-index.js', import.meta.url).href)};
      const ctx = await GpuContext.open({ allowSoftware: true });
      const cpu = TagSetIndex.load({ offsets: Uint32Array.of(0, 1, 3), tags: Uint32Array.of(1, 1, 2) }, Uint32Array.of(7, 8));
      const gpu = await GpuTagIndex.build(ctx, cpu, { verifyThreads: 1 });
      const m = await gpu.matchAll({ offsets: Uint32Array.of(0, 2), tags: Uint32Array.of(1, 2) }, false);
      console.log([...m.keys].sort().join(','));
      await ctx.close();`;
    const dir = mkdtempSync(join(tmpdir(), 'ambit-tags-'));
    const file = join(dir, 'no-destroy.mjs');
    writeFileSync(file, script);
    const child = spawn(process.execPath, [file], { stdio: ['ignore', 'pipe', 'inherit'], env: { ...process.env, EGL_PLATFORM: 'surfaceless' } });
    let out = '';
    child.stdout.on('data', (b: Buffer) => (out += b.toString()));
    const [code] = (await once(child, 'exit')) as [number];
    rmSync(dir, { recursive: true, force: true });
    assert.equal(code, 0);
    assert.equal(out.trim(), '7,8');
  });

  it('[X1] a build on worker threads lays the index out as one on the calling thread', async () => {
    const w = tagWorkload({ seed: 12, sets: 90_000, hashtags: 5000, languages: 3, publishers: 2000, users: 50_000, queries: 200 });
    const cpu = TagSetIndex.load(w.db, w.keys);
    const opts = { maxPartition: 9000, leafSize: 512, batch: 200 };
    const one = await GpuTagIndex.build(ctx, cpu, { ...opts, buildThreads: 1 });
    const three = await GpuTagIndex.build(ctx, cpu, { ...opts, buildThreads: 3 });
    try {
      const a = one.stats();
      const b = three.stats();
      assert.ok(a.partitions >= 10, `partitions: ${a.partitions}`);
      assert.deepEqual([b.sets, b.partitions, b.largestPartition, b.blocks, b.gpuBytes], [a.sets, a.partitions, a.largestPartition, a.blocks, a.gpuBytes]);
      assert.ok(three.order.length === a.sets && Buffer.compare(Buffer.from(three.order.buffer, three.order.byteOffset, three.order.byteLength), Buffer.from(one.order.buffer, one.order.byteOffset, one.order.byteLength)) === 0, 'the same set at every position');
      const want = lists(cpu.matchAll(w.queries, false));
      assert.equal(firstDiff(lists(await three.matchAll(w.queries, false)), want), '');
      assert.equal(firstDiff(lists(await one.matchAll(w.queries, false)), want), '');
      assert.equal(three.stats().visits, one.stats().visits);
    } finally {
      one.destroy();
      three.destroy();
    }
  });

  it('[X1] Bloom false positives are refused by the exact check; hits past the room are found on a rerun', async () => {
    // Queries of 40-60 extra tags fill most of their 192 bits: many sets pass the bitwise test.
    const w = tagWorkload({ ...DENSE, seed: 8, sets: 3000, hashtags: 2000, languages: 1, publishers: 100, users: 3000, queries: 60, extraMin: 40, extraMax: 60 });
    const cpu = TagSetIndex.load(w.db, w.keys);
    const gpu = await GpuTagIndex.build(ctx, cpu, { maxPartition: 1000, leafSize: 128, workgroupSize: 64, batch: 60, inFlight: 1 });
    try {
      const want = lists(cpu.matchAll(w.queries, false));
      const got = lists(await gpu.matchAll(w.queries, false));
      assert.equal(firstDiff(got, want), '');
      const st = gpu.stats();
      assert.ok(st.falseHits > 0, `false positives met and refused (${st.falseHits} of ${st.hits})`);
      // Room for 50 hits at first; the batch needs more.
      const dense = tagWorkload({ ...DENSE, seed: 9, sets: 3000, hashtags: 30, languages: 1, publishers: 10, users: 50, queries: 300, setTagsMax: 2, extraMin: 20, extraMax: 25 });
      const cpu2 = TagSetIndex.load(dense.db, dense.keys);
      const gpu2 = await GpuTagIndex.build(ctx, cpu2, { maxPartition: 3000, leafSize: 3000, batch: 300, inFlight: 1, hitCapacity: 50 });
      try {
        const want2 = lists(cpu2.matchAll(dense.queries, false));
        assert.ok(want2.reduce((n, l) => n + l.length, 0) > 50, 'more hits than the first room');
        assert.equal(firstDiff(lists(await gpu2.matchAll(dense.queries, false)), want2), '');
        assert.ok(gpu2.stats().reruns >= 1, 'the batch ran again with room');
      } finally {
        gpu2.destroy();
      }
    } finally {
      gpu.destroy();
    }
  });

  it('[X1] a batch with more hits than a batch may hold is answered by the CPU index; sparse tag ids; bad queries refused', async () => {
    const w = tagWorkload({ ...DENSE, seed: 9, sets: 3000, hashtags: 30, languages: 1, publishers: 10, users: 50, queries: 300, setTagsMax: 2, extraMin: 20, extraMax: 25 });
    // Tag ids spread over the u32 range: the filing table ranks them; signatures hash them alike.
    const spread = (v: TagSetsView): TagSetsView => ({ offsets: v.offsets, tags: v.tags.map((t) => t * 65_521 + 3) });
    const cpu = TagSetIndex.load(spread(w.db), w.keys);
    const gpu = await GpuTagIndex.build(ctx, cpu, { maxPartition: 3000, leafSize: 3000, batch: 300, inFlight: 1, hitCapacity: 50, hitLimit: 100 });
    try {
      const want = lists(cpu.matchAll(spread(w.queries), false));
      assert.ok(want.reduce((n, l) => n + l.length, 0) > 100, 'more hits than the limit');
      assert.equal(firstDiff(lists(await gpu.matchAll(spread(w.queries), false)), want), '');
      assert.equal(gpu.stats().cpuBatches, 1, 'the batch went to the CPU index');
      await assert.rejects(gpu.matchAll({ offsets: Uint32Array.from([0, 2]), tags: Uint32Array.from([5, 5]) }, false), /ascending and distinct/);
    } finally {
      gpu.destroy();
    }
    await assert.rejects(GpuTagIndex.build(ctx, cpu, { hitCapacity: 2 ** 30 }), /hitCapacity must be at most/);
  });

  it('[X1] a batch with more hits than its first read back reads the rest', async () => {
    const dense = tagWorkload({ ...DENSE, seed: 9, sets: 3000, hashtags: 30, languages: 1, publishers: 10, users: 50, queries: 300, setTagsMax: 2, extraMin: 20, extraMax: 25 });
    const cpu = TagSetIndex.load(dense.db, dense.keys);
    const gpu = await GpuTagIndex.build(ctx, cpu, { maxPartition: 3000, leafSize: 3000, batch: 300, inFlight: 1 });
    try {
      assert.equal(firstDiff(lists(await gpu.matchAll(dense.queries, false)), lists(cpu.matchAll(dense.queries, false))), '');
      const st = gpu.stats();
      assert.ok(st.hits > 4096 && st.reruns === 0, `hits ${st.hits} past the first read of 4096, within the room (reruns ${st.reruns})`);
    } finally {
      gpu.destroy();
    }
  });

  it('[T5] an empty database, empty sets and empty queries', async () => {
    const dict = new TagDictionary();
    const q = dict.sets([['a'], []]);
    const empty = await GpuTagIndex.build(ctx, TagSetIndex.load({ offsets: Uint32Array.from([0]), tags: new Uint32Array(0) }, new Uint32Array(0)));
    assert.deepEqual(lists(await empty.matchAll(q, false)), [[], []]);
    empty.destroy();
    const db = dict.sets([[], ['a'], ['b']]);
    const g = await GpuTagIndex.build(ctx, TagSetIndex.load(db, Uint32Array.from([7, 8, 9])));
    assert.deepEqual(lists(await g.matchAll(q, false)), [[7, 8], [7]]);
    g.destroy();
  });
});
