/**
 * The GPU pattern sequencer (src/engines/gpu/gtrex.ts; here on a software adapter) against the
 * CDP sequencer, itself tested against the reference (sequencer-stress.test.ts): random patterns
 * and streams fed in batches of random sizes, every release's matches (in order) and the
 * statistics equal after every batch; snapshots equal and restored crosswise; columns indexed by
 * equality in a few sub-rings (so values share them) and not indexed; the kernels' float64 sums
 * bit for bit against JavaScript's.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { CdpSequencer } from '../../src/engines/event-patterns/cdp.js';
import { ReferenceSequencer } from '../../src/engines/event-patterns/reference.js';
import type { PatternHits, PatternMatch } from '../../src/engines/event-patterns/sequencer.js';
import { GpuContext } from '../../src/engines/gpu/device.js';
import { type BatchRelease, GtrexSequencer } from '../../src/engines/gpu/gtrex.js';
import { DEFAULT_PATTERN_LIMITS, type EventPattern, validateEventPattern } from '../../src/model/event-patterns.js';
import { type NEvent, resolveLimits, validateEvent } from '../../src/model/limits.js';
import { Prng } from '../../src/workload/prng.js';
import { type Installed, type StressKnobs, hitsOf, install, makeEvent, matchKey } from '../support/sequencer-stream.js';

let ctx: GpuContext;
before(async () => {
  ctx = await GpuContext.open({ allowSoftware: true });
});
after(async () => {
  await ctx?.close();
});

const keys = (ms: readonly PatternMatch[]): string[] => ms.map(matchKey);

interface Outcome {
  matches: number;
  reruns: number;
  rebuilds: number;
  gpuMatches: number;
  evicted: number;
  consumed: number;
  restarts: number;
  batches: number;
  /** The fewest and most pages (storage bindings) the pool spanned after a batch, and the scatter passes run ahead of batches. */
  minPages: number;
  pages: number;
  scatterPasses: number;
}

/** The next n releases of the stream (the clock moves on): the batch, and the CPU sequencer's matches for each. */
function nextBatch(r: Prng, k: StressKnobs, live: readonly Installed[], cpu: { release: CdpSequencer['release'] }, n: number, clock: { t: number; e: number }): { batch: BatchRelease[]; want: string[][] } {
  const batch: BatchRelease[] = [];
  const want: string[][] = [];
  for (let j = 0; j < n; j++) {
    clock.t += r.int(0, k.maxGap);
    const ev = makeEvent(r, clock.e++);
    const hits = hitsOf(live, ev);
    batch.push({ event: ev, timeMs: clock.t, hits });
    want.push(keys(cpu.release(ev, clock.t, hits)));
  }
  return { batch, want };
}

/** One seed: the same stream through a CDP sequencer (one release at a time) and the GPU one (in batches). */
async function compare(seed: number, k: StressKnobs, maxBatch: number, oracle: 'cdp' | 'reference' = 'cdp', room: { capacity?: number; minPoolWords?: number; indexBuckets?: number; bucketLoad?: number; bindingBytes?: number; pageBytes?: number; maxPoolPages?: number } = { indexBuckets: 4, bucketLoad: 1 }): Promise<Outcome> {
  const r = new Prng(seed);
  const make = () => (oracle === 'cdp' ? new CdpSequencer({ maxRetainedPerElement: k.maxRetained }) : new ReferenceSequencer({ maxRetainedPerElement: k.maxRetained }));
  let cpu = make();
  let gpu = await GtrexSequencer.create({ ctx, maxRetainedPerElement: k.maxRetained, ...room });
  const out: Outcome = { matches: 0, reruns: 0, rebuilds: 0, gpuMatches: 0, evicted: 0, consumed: 0, restarts: 0, batches: 0, minPages: Infinity, pages: 0, scatterPasses: 0 };
  try {
    const live: Installed[] = [];
    let slot = 0;
    for (let i = 0; i < k.patterns; i++) live.push(install(r, k, slot++, [cpu, gpu]));
    const clock = { t: 1000, e: 0 };
    let e = 0;
    let seenReruns = 0;
    let seenRebuilds = 0;
    while (e < k.events) {
      if (r.chance(k.churn * 10) && live.length > 0) {
        const gone = live.splice(r.int(0, live.length - 1), 1)[0];
        cpu.removePattern(gone.slot);
        gpu.removePattern(gone.slot);
      }
      if (r.chance(k.churn * 10)) live.push(install(r, k, slot++, [cpu, gpu]));
      if (k.restartEvery !== undefined && r.chance(1 / k.restartEvery)) {
        const a = cpu.snapshot();
        const b = gpu.snapshot();
        assert.equal(JSON.stringify(b), JSON.stringify(a), `seed ${seed}, release ${e}: the snapshots differ`);
        const patterns = new Map(live.map((p) => [p.slot, p.pattern]));
        await gpu.close();
        cpu = make();
        cpu.restore(structuredClone(b), patterns);
        gpu = await GtrexSequencer.create({ ctx, maxRetainedPerElement: k.maxRetained, ...room });
        gpu.restore(structuredClone(a), patterns);
        out.restarts++;
        seenReruns = 0;
        seenRebuilds = 0;
      }
      const n = Math.min(k.events - e, r.int(1, maxBatch));
      const { batch, want } = nextBatch(r, k, live, cpu, n, clock);
      e += n;
      const got = (await gpu.releaseBatch(batch)).map(keys);
      const gs = gpu.stats();
      out.reruns += gs.reruns - seenReruns;
      out.rebuilds += gs.rebuilds - seenRebuilds;
      seenReruns = gs.reruns;
      seenRebuilds = gs.rebuilds;
      out.pages = Math.max(out.pages, gs.poolPages);
      out.minPages = Math.min(out.minPages, gs.poolPages);
      out.scatterPasses = Math.max(out.scatterPasses, gs.scatterPasses);
      out.batches++;
      for (let j = 0; j < n; j++) {
        assert.deepEqual(got[j], want[j], `seed ${seed}, release ${e - n + j} (batch of ${n}, item ${j})`);
        out.matches += want[j].length;
      }
      const { retained, evicted, consumed } = gpu.stats();
      assert.deepEqual({ retained, evicted, consumed }, cpu.stats(), `seed ${seed}, after release ${e}: stats`);
    }
    const s = cpu.stats();
    out.evicted = s.evicted;
    out.consumed = s.consumed;
    out.gpuMatches = gpu.stats().searches;
  } finally {
    await gpu.close();
  }
  return out;
}

const SETS: [string, StressKnobs, number, number][] = [
  ['tight retention, no consuming, batches up to 40', { patterns: 6, events: 1_500, maxRetained: 3, maxWindow: 40, maxGap: 3, consuming: 0, churn: 0 }, 40, 3],
  ['retention 1, many ties, batches up to 100', { patterns: 6, events: 1_500, maxRetained: 1, maxWindow: 20, maxGap: 1, consuming: 0, churn: 0 }, 100, 3],
  ['wide windows (eviction, not expiry, drops), batches up to 200', { patterns: 5, events: 1_500, maxRetained: 6, maxWindow: 100_000, maxGap: 2, consuming: 0, churn: 0 }, 200, 3],
  ['large bound: rings grow, each multiplies, batches up to 300', { patterns: 6, events: 1_500, maxRetained: 60, maxWindow: 200, maxGap: 4, consuming: 0, churn: 0.001 }, 300, 2],
  ['consuming patterns beside (on the CDP inside), churn', { patterns: 8, events: 1_200, maxRetained: 5, maxWindow: 60, maxGap: 5, consuming: 0.4, churn: 0.002 }, 50, 3],
  ['restarts from snapshots, restored crosswise', { patterns: 6, events: 1_200, maxRetained: 4, maxWindow: 50, maxGap: 3, consuming: 0.3, churn: 0.002, restartEvery: 15 }, 30, 3],
];

describe('GtrexSequencer (GPU) answers as the CDP sequencer, batch by batch', () => {
  for (const [name, knobs, maxBatch, seeds] of SETS) {
    it(name, async () => {
      const sum: Outcome = { matches: 0, reruns: 0, rebuilds: 0, gpuMatches: 0, evicted: 0, consumed: 0, restarts: 0, batches: 0, minPages: 0, pages: 0, scatterPasses: 0 };
      for (let seed = 1; seed <= seeds; seed++) {
        const o = await compare(seed * 104_729 + knobs.events, knobs, maxBatch);
        for (const key of Object.keys(sum) as (keyof Outcome)[]) sum[key] += o[key];
      }
      // The workload exercises what it is meant to.
      assert.ok(sum.matches > 50, `only ${sum.matches} matches`);
      assert.ok(sum.gpuMatches > 50, `only ${sum.gpuMatches} searches on the GPU`);
      assert.ok(sum.evicted > 0 || knobs.maxRetained > 10, 'no evictions');
      assert.ok(sum.consumed > 0 || knobs.consuming === 0, 'nothing consumed');
      if (knobs.restartEvery !== undefined) assert.ok(sum.restarts > 0, 'no restart');
    });
  }

  it('room short at first: partial and complete lists grown (batches run again), the pool rebuilt bigger', async () => {
    const knobs: StressKnobs = { patterns: 6, events: 1_000, maxRetained: 30, maxWindow: 200, maxGap: 3, consuming: 0, churn: 0.002 };
    let reruns = 0;
    let rebuilds = 0;
    let matches = 0;
    for (let seed = 1; seed <= 2; seed++) {
      const o = await compare(seed * 7_727, knobs, 120, 'cdp', { capacity: 2, minPoolWords: 64, indexBuckets: 8, bucketLoad: 2 });
      reruns += o.reruns;
      rebuilds += o.rebuilds;
      matches += o.matches;
    }
    assert.ok(matches > 50, `only ${matches} matches`);
    assert.ok(reruns > 0, 'no batch ran again');
    assert.ok(rebuilds > 2, `the pool was rebuilt ${rebuilds} times`);
  });

  it('a pool that grows from one storage binding to two (pages of 8192 words): rebuilt across pages, staged a binding at a time, every answer the CDP\'s', async () => {
    // Two pages at most: the software adapter compiles the kernels with the page choice slowly, the
    // more pages the slower (minutes for eight, with a cold shader cache).
    // Staging and lists bound at 16 KiB, so re-uploading a pool of two pages of 32 KiB outgrows one.
    const knobs: StressKnobs = { patterns: 5, events: 1_200, maxRetained: 20, maxWindow: 200, maxGap: 3, consuming: 0, churn: 0.002 };
    const o = await compare(6_151, knobs, 24, 'cdp', { bindingBytes: 16_384, pageBytes: 32_768, maxPoolPages: 2, minPoolWords: 64, indexBuckets: 8, bucketLoad: 2 });
    assert.ok(o.matches > 50, `only ${o.matches} matches`);
    assert.equal(o.minPages, 1, `the first batches ran on a pool of one page (${JSON.stringify(o)})`);
    assert.ok(o.pages > 1, `the pool spanned ${o.pages} page at most`);
    assert.ok(o.rebuilds > 1, `the pool was rebuilt ${o.rebuilds} times`);
    assert.ok(o.scatterPasses > 0, 'no upload outgrew one binding');
  });

  it('batches that stage thousands of ring updates at once (the staging builders grow mid-batch)', async () => {
    const r = new Prng(99);
    const k: StressKnobs = { patterns: 40, events: 0, maxRetained: 20, maxWindow: 100, maxGap: 2, consuming: 0, churn: 0, noEach: true };
    const cpu = new CdpSequencer({ maxRetainedPerElement: k.maxRetained });
    const gpu = await GtrexSequencer.create({ ctx, maxRetainedPerElement: k.maxRetained, indexBuckets: 64, bucketLoad: 1 });
    try {
      const live: Installed[] = [];
      for (let i = 0; i < k.patterns; i++) live.push(install(r, k, i, [cpu, gpu]));
      const clock = { t: 0, e: 0 };
      let matches = 0;
      for (let b = 0; b < 3; b++) {
        const { batch, want } = nextBatch(r, k, live, cpu, 1500, clock);
        const got = (await gpu.releaseBatch(batch)).map(keys);
        for (let j = 0; j < got.length; j++) assert.deepEqual(got[j], want[j], `batch ${b}, item ${j}`);
        matches += want.reduce((a, l) => a + l.length, 0);
      }
      assert.ok(matches > 100, `only ${matches} matches`);
      assert.ok(gpu.stats().largestStage > 2048, `a batch staged only ${gpu.stats().largestStage} entries`);
    } finally {
      await gpu.close();
    }
  });

  it('answers as the reference sequencer too (one stream, batches up to 64)', async () => {
    const o = await compare(31337, { patterns: 8, events: 800, maxRetained: 4, maxWindow: 30, maxGap: 3, consuming: 0.3, churn: 0.002 }, 64, 'reference');
    assert.ok(o.matches > 50, `only ${o.matches} matches`);
  });

  it('without the equality index (every column scanned whole), as with it', async () => {
    const knobs: StressKnobs = { patterns: 6, events: 1_000, maxRetained: 8, maxWindow: 60, maxGap: 3, consuming: 0, churn: 0.002 };
    let matches = 0;
    for (let seed = 1; seed <= 2; seed++) matches += (await compare(seed * 4_241, knobs, 80, 'cdp', { indexBuckets: 1 })).matches;
    assert.ok(matches > 50, `only ${matches} matches`);
  });
});

describe('GtrexSequencer: float64 sums on the GPU', () => {
  it('f64add equals JavaScript\'s a + b bit for bit (normal, subnormal, huge, cancelling, ties)', async () => {
    const r = new Prng(7);
    const f = new Float64Array(1);
    const u = new Uint32Array(f.buffer);
    const randomBits = (): number => {
      u[0] = r.int(0, 0xffffffff);
      u[1] = r.int(0, 0xffffffff);
      return Number.isFinite(f[0]) ? f[0] : 1;
    };
    const special = [0, -0, 1, -1, 0.1, 0.2, 0.3, 1e308, -1e308, 1.7976931348623157e308, 5e-324, -5e-324, 2.2250738585072014e-308, 2 ** 53, 2 ** 53 + 2, 1 + 2 ** -52, 3, 1e16, -1e16];
    const pairs: number[] = [];
    for (const a of special) for (const b of special) pairs.push(a, b);
    for (let i = 0; i < 20_000; i++) {
      const a = r.chance(0.5) ? randomBits() : (r.float() - 0.5) * 10 ** r.int(-20, 20);
      const kind = r.int(0, 3);
      // Close magnitudes (cancellation, ties), a far one, a subnormal-sized one, anything.
      const b = kind === 0 ? -a * (1 + (r.float() - 0.5) * 2 ** -r.int(1, 52)) : kind === 1 ? a * 2 ** -r.int(50, 60) : kind === 2 ? r.float() * 1e-310 : randomBits();
      pairs.push(a, b);
    }
    const gpu = await GtrexSequencer.create({ ctx });
    try {
      const got = await gpu.addOnGpu(Float64Array.from(pairs));
      let diffs = 0;
      let first = '';
      for (let i = 0; i < got.length; i++) {
        const want = pairs[2 * i] + pairs[2 * i + 1];
        if (!Object.is(got[i], want)) {
          if (diffs++ === 0) first = `${pairs[2 * i]} + ${pairs[2 * i + 1]}: got ${got[i]}, want ${want}`;
        }
      }
      assert.equal(diffs, 0, `${diffs} of ${got.length} sums differ; first: ${first}`);
    } finally {
      await gpu.close();
    }
  });
});

describe('GtrexSequencer: past its limits', () => {
  const LIM = resolveLimits();
  const pattern = (p: EventPattern) => validateEventPattern('pattern', p, LIM, DEFAULT_PATTERN_LIMITS);
  const type = (t: string) => ({ constraints: [{ name: 'type', op: 'eq' as const, value: t }] });
  let id = 0;
  const ev = (t: string): NEvent => validateEvent({ id: `x${id++}`, lat: 0, lon: 0, attributes: { type: t } }, LIM);

  it('more matches than one storage binding holds: the searches go in chunks, every answer equal to the CDP\'s', async () => {
    const p = pattern({ steps: [{ name: 't', filter: type('A') }, { name: 's', filter: type('B'), selection: 'each', withinMs: 100_000 }] });
    const cpu = new CdpSequencer({ maxRetainedPerElement: 300 });
    const gpu = await GtrexSequencer.create({ ctx, maxRetainedPerElement: 300, bindingBytes: 65_536, maxPoolPages: 1 });
    try {
      cpu.addPattern(0, p);
      gpu.addPattern(0, p);
      const batch: BatchRelease[] = [];
      const want: string[][] = [];
      // 300 B events, then 100 A events: each A matches every B (30k matches, 16 bytes each).
      for (let i = 0; i < 400; i++) {
        const e = ev(i < 300 ? 'B' : 'A');
        const hits = [{ slot: 0, elements: [i < 300 ? 1 : 0] }];
        batch.push({ event: e, timeMs: i, hits });
        want.push(keys(cpu.release(e, i, hits)));
      }
      const got = (await gpu.releaseBatch(batch)).map(keys);
      assert.deepEqual(got, want);
      assert.equal(want.reduce((a, l) => a + l.length, 0), 30_000);
      assert.ok(gpu.stats().splits > 0, 'the searches went in one chunk');
    } finally {
      await gpu.close();
    }
  });

  it('a batch too large for the pool fails (OUT_OF_MEMORY), and the sequencer goes on with smaller ones, as the CDP', async () => {
    const p = pattern({ steps: [{ name: 't', filter: type('A') }, { name: 's', filter: type('A'), selection: 'last', withinMs: 100_000 }, { name: 'u', filter: type('A'), selection: 'first', withinMs: 100_000 }] });
    const cpu = new CdpSequencer({ maxRetainedPerElement: 10 });
    const gpu = await GtrexSequencer.create({ ctx, maxRetainedPerElement: 10, bindingBytes: 65_536, maxPoolPages: 1 });
    try {
      cpu.addPattern(0, p);
      gpu.addPattern(0, p);
      let t = 0;
      const next = (n: number): { batch: BatchRelease[]; want: string[][] } => {
        const batch: BatchRelease[] = [];
        const want: string[][] = [];
        for (let i = 0; i < n; i++, t++) {
          const e = ev('A');
          const hits = [{ slot: 0, elements: [0, 1, 2] }];
          batch.push({ event: e, timeMs: t, hits });
          want.push(keys(cpu.release(e, t, hits)));
        }
        return { batch, want };
      };
      // Every release records into two rings that keep the whole batch: 2 × 8192 records of 4 words.
      await assert.rejects(gpu.releaseBatch(next(5000).batch), (err: Error) => (err as { code?: string }).code === 'OUT_OF_MEMORY');
      for (const n of [1, 7, 100, 1, 300]) {
        const { batch, want } = next(n);
        assert.deepEqual((await gpu.releaseBatch(batch)).map(keys), want, `a batch of ${n} after the one that failed`);
        const { retained, evicted, consumed } = gpu.stats();
        assert.deepEqual({ retained, evicted, consumed }, cpu.stats());
      }
    } finally {
      await gpu.close();
    }
  });

  it('a consuming pattern removed while its batch is in flight gets nothing from it', async () => {
    const p = pattern({ steps: [{ name: 't', filter: type('A') }, { name: 's', filter: type('B'), selection: 'last', withinMs: 100 }], consuming: ['s'] });
    const q = pattern({ steps: [{ name: 't', filter: type('A') }, { name: 's', filter: type('B'), selection: 'last', withinMs: 100 }] });
    const gpu = await GtrexSequencer.create({ ctx, maxRetainedPerElement: 10 });
    try {
      gpu.addPattern(0, p);
      gpu.addPattern(1, q);
      const b = ev('B');
      const a = ev('A');
      const pending = gpu.releaseBatch([
        { event: b, timeMs: 1, hits: [{ slot: 0, elements: [1] }, { slot: 1, elements: [1] }] },
        { event: a, timeMs: 2, hits: [{ slot: 0, elements: [0] }, { slot: 1, elements: [0] }] },
      ]);
      // Once the batch has been taken in (the CDP inside has matched the consuming one) and waits for the GPU.
      while (gpu.stats().batches === 0) await new Promise((r) => setImmediate(r));
      gpu.removePattern(0);
      gpu.removePattern(1);
      const got = await pending;
      assert.deepEqual(got.map((l) => l.length), [0, 0]);
      // Kept, the same batch matches both.
      const again = await GtrexSequencer.create({ ctx, maxRetainedPerElement: 10 });
      try {
        again.addPattern(0, p);
        again.addPattern(1, q);
        const both = await again.releaseBatch([
          { event: b, timeMs: 1, hits: [{ slot: 0, elements: [1] }, { slot: 1, elements: [1] }] },
          { event: a, timeMs: 2, hits: [{ slot: 0, elements: [0] }, { slot: 1, elements: [0] }] },
        ]);
        assert.deepEqual(both.map((l) => l.map((m) => m.slot)), [[], [0, 1]]);
      } finally {
        await again.close();
      }
    } finally {
      await gpu.close();
    }
  });
});
