/**
 * The GPU engine (CLCB Loc/Cont/Zip on WebGPU) against the shared contract and the differential
 * suite, exactly (docs/semantics.md X1), plus what only a GPU engine has: the band's float64
 * decisions (on the positions a batch was submitted with), size sweeps around the workgroup size,
 * buffer growth, candidate and output overflow, batching of concurrent events, the move scatter,
 * the CPU crossover, and device loss mid-stream.
 *
 * Runs wherever WebGPU finds an adapter; in CI that is Mesa's llvmpipe. Finding none is a failure.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { ReferenceMatcher } from '../src/engines/reference.js';
import type { MatcherOptions } from '../src/engines/matcher.js';
import type { Event, Subscription } from '../src/model/types.js';
import { GpuContext } from '../src/engines/gpu/device.js';
import { GpuKernels, GpuMatcher, type GpuMatcherOptions, packEvents } from '../src/engines/gpu/matcher.js';
import { runContract } from './support/contract.js';
import { runDifferential } from './support/differential.js';
import { Rng } from './support/rng.js';
import { nextDown, pointAt, smallestRadius } from './support/sphere.js';
import { agree, randomEvent, randomWorkload, sorted, twin } from './support/gpu-workload.js';

// An adapter is required: open() throws (failing this file) when there is none.
const ctx = await GpuContext.open({ allowSoftware: true });
const kernels = await GpuKernels.compile(ctx);
after(() => ctx.close());

/** The GPU path always (cpuBelowFilters 0, select gpu), on the shared device. */
const make = (o?: MatcherOptions & GpuMatcherOptions) => GpuMatcher.attach(kernels, { cpuBelowFilters: 0, select: 'gpu', ...o });

describe('gpu engine: device', () => {
  it('runs on an adapter with the limits the kernels need', () => {
    assert.ok(ctx.adapterInfo.device.length > 0 || ctx.adapterInfo.description.length > 0);
    assert.ok(ctx.limits.maxStorageBuffersPerShaderStage >= 13, 'Cont binds 13 storage buffers');
    assert.ok(kernels.wg >= 1);
  });
});

runContract('gpu', make);
runDifferential('gpu', make);
// Every batch (lone events too) through Loc's cell grid, and none through it: both scans agree.
runDifferential('gpu (grid on every batch)', (o) => make({ ...o, gridMinEvents: 1 }));
runDifferential('gpu (no grid)', (o) => make({ ...o, gridMinEvents: 1_000_000 }));

// ---------------------------------------------------------------- helpers

// Seeded workloads, the twin loader and the agreement check: test/support/gpu-workload.ts.

// ---------------------------------------------------------------- sizes and growth

describe('gpu engine: sizes around the workgroup, growth', () => {
  // Sizes around several workgroups too (a kernel may take more than one filter a thread).
  const few = 8 * kernels.wg;
  for (const filters of [0, 1, kernels.wg - 1, kernels.wg, kernels.wg + 1, 1000, few - 1, few + 1, 2 * 1024 + 3, 3 * few + 5]) {
    it(`${filters} filters agree with the reference, with no GPU error`, async () => {
      const before = ctx.uncapturedErrors.count;
      const subs = randomWorkload(filters + 7, filters, 1);
      const m = make();
      const ref = new ReferenceMatcher();
      try {
        twin(m, subs, 3);
        twin(ref, subs, 3);
        await agree(m, ref, 11, 12);
        assert.equal(m.stats().filters, filters);
        assert.equal(ctx.uncapturedErrors.count, before, `GPU errors: ${ctx.uncapturedErrors.last}`);
      } finally {
        await m.close();
      }
    });
  }

  it('grows every buffer while serving, and removal frees filters for reuse', async () => {
    const m = make();
    const ref = new ReferenceMatcher();
    try {
      const subs = randomWorkload(5, 3000, 2);
      // Interleave growth with matching so growth happens between batches.
      for (let i = 0; i < subs.length; i += 500) {
        const chunk = subs.slice(i, i + 500);
        twin(m, chunk, i);
        twin(ref, chunk, i);
        await agree(m, ref, i, 4);
      }
      const before = m.stats().extra!.gpuBytes as number;
      for (let i = 0; i < subs.length; i += 2) {
        m.remove(subs[i].id);
        ref.remove(subs[i].id);
      }
      await agree(m, ref, 99, 8);
      // Re-adding reuses freed slots: GPU memory does not grow.
      for (let i = 0; i < subs.length; i += 2) {
        m.add(subs[i]);
        ref.add(subs[i]);
      }
      await agree(m, ref, 98, 8);
      assert.equal(m.stats().extra!.gpuBytes, before);
    } finally {
      await m.close();
    }
  });
});

// ---------------------------------------------------------------- overflow and batching

describe('gpu engine: overflow and batching', () => {
  it('candidate overflow: the CPU answers those events, then the buffer grows', async () => {
    const m = make({ initialCandidates: 4 });
    const ref = new ReferenceMatcher();
    try {
      const subs = randomWorkload(21, 300, 2);
      twin(m, subs, 1);
      twin(ref, subs, 1);
      const matched = await agree(m, ref, 5, 10);
      assert.ok(matched > 20, `workload must overflow 4 candidates (matched ${matched})`);
      assert.ok((m.stats().extra!.overflowEvents as number) > 0, 'an overflow was detected');
      const overflowAfterGrowth = m.stats().extra!.overflowEvents;
      await agree(m, ref, 6, 10);
      assert.ok((m.stats().extra!.gpuEvents as number) > 0);
      assert.ok((m.stats().extra!.overflowEvents as number) - (overflowAfterGrowth as number) <= 10);
    } finally {
      await m.close();
    }
  });

  it('output overflow: the batch is answered by the CPU and the output grows', async () => {
    const m = make({ initialOutputs: 2 });
    const ref = new ReferenceMatcher();
    try {
      const subs = randomWorkload(22, 200, 1);
      twin(m, subs, 2);
      twin(ref, subs, 2);
      await agree(m, ref, 7, 10);
      assert.ok((m.stats().extra!.overflowEvents as number) > 0);
      await agree(m, ref, 8, 10);
    } finally {
      await m.close();
    }
  });

  it('concurrent match() calls are batched and each gets its own answer', async () => {
    const m = make({ maxBatch: 16, inFlight: 2 });
    const ref = new ReferenceMatcher();
    try {
      const subs = randomWorkload(23, 400, 2);
      twin(m, subs, 3);
      twin(ref, subs, 3);
      const rng = new Rng(4);
      const events = Array.from({ length: 100 }, (_, i) => randomEvent(rng, i));
      const got = await Promise.all(events.map((e) => m.match(e)));
      const batched = await m.matchBatch(events);
      for (let i = 0; i < events.length; i++) {
        const want = sorted(await ref.match(events[i]));
        assert.deepEqual(sorted(got[i]), want, `event ${i}: single`);
        assert.deepEqual(sorted(batched[i]), want, `event ${i}: batched`);
      }
      const s = m.stats().extra!;
      assert.ok((s.batches as number) < 2 * events.length, `events were batched (${s.batches} batches for ${2 * events.length} events)`);
    } finally {
      await m.close();
    }
  });
});

describe('gpu engine: Cont and Zip edge cases', () => {
  it('an event with more attributes than Cont stages in workgroup memory matches on any of them', async () => {
    const limits = { maxAttributesPerEvent: 200 };
    const m = make({ limits });
    const ref = new ReferenceMatcher({ limits });
    try {
      const subs: Subscription[] = [];
      for (const k of [0, 63, 64, 65, 150, 199]) {
        subs.push({ id: `n${k}`, owner: 'd', filters: [{ constraints: [{ name: `a${k}`, op: 'eq', value: k }] }] });
        subs.push({ id: `s${k}`, owner: 'd', filters: [{ constraints: [{ name: `a${k}`, op: 'eq', value: k + 1 }, { name: 'a0', op: 'exists' }] }] });
      }
      for (const sub of subs) {
        m.add(sub);
        ref.add(sub);
      }
      for (const n of [64, 65, 200]) {
        const attributes: Record<string, number> = {};
        for (let k = 0; k < n; k++) attributes[`a${k}`] = k;
        const e: Event = { id: `e${n}`, lat: 45.46, lon: 9.18, attributes };
        const [got] = await m.matchBatch([e]);
        assert.deepEqual(sorted(got), sorted(await ref.match(e)), `${n} attributes`);
        assert.deepEqual(sorted(await m.match(e)), sorted(got));
      }
      assert.equal(m.stats().extra!.cpuEvents, 0, 'the GPU answered');
    } finally {
      await m.close();
    }
  });

  it('a subscription whose many filters all match one event is listed once', async () => {
    const m = make();
    try {
      const filters = Array.from({ length: 64 }, (_, i) => ({ constraints: [{ name: 'a', op: 'ge' as const, value: i % 3 }] }));
      m.add({ id: 'many', owner: 'd', filters });
      m.add({ id: 'one', owner: 'd', filters: [{ constraints: [{ name: 'a', op: 'ge', value: 0 }] }] });
      const events = Array.from({ length: 40 }, (_, i) => ({ id: `e${i}`, lat: 45.46, lon: 9.18, attributes: { a: 5 } }));
      const got = await m.matchBatch(events);
      for (const ids of got) assert.deepEqual(sorted(ids), ['many', 'one']);
      assert.deepEqual(sorted(await m.match(events[0])), ['many', 'one']);
      assert.equal(m.stats().extra!.cpuEvents, 0, 'the GPU answered');
    } finally {
      await m.close();
    }
  });

  it('candidate capacity growing while batches are in flight cuts no event short', async () => {
    const m = make({ initialCandidates: 16, maxBatch: 4, inFlight: 3 });
    try {
      for (let i = 0; i < 100; i++) m.add({ id: `s${i}`, owner: 'd', filters: [{ constraints: [{ name: 'x', op: 'exists' }] }] });
      const events = Array.from({ length: 12 }, (_, i) => ({ id: `e${i}`, lat: 45.46, lon: 9.18, attributes: { x: i } }));
      const got = await m.matchBatch(events);
      assert.deepEqual(got.map((ids) => ids.length), events.map(() => 100));
    } finally {
      await m.close();
    }
  });

  it('a subscription removed while a batch is in flight is not listed, and its index names no other', async () => {
    const m = make();
    try {
      const e = { id: 'e', lat: 45.46, lon: 9.18, attributes: { x: 1 } };
      m.add({ id: 'a', owner: 'd', filters: [{ constraints: [{ name: 'x', op: 'exists' }] }] });
      const first = m.matchBatch([e]);
      m.remove('a');
      // Would take a's index if it were free at once; y is not in the event, so b cannot match.
      m.add({ id: 'b', owner: 'd', filters: [{ constraints: [{ name: 'y', op: 'exists' }] }] });
      m.add({ id: 'c', owner: 'd', filters: [{ constraints: [{ name: 'x', op: 'exists' }] }] });
      const second = m.match(e);
      m.remove('c');
      assert.deepEqual(await first, [[]]);
      assert.deepEqual(await second, []);
      // Once nothing is in flight the indices are reused, and answers stay right.
      m.add({ id: 'd', owner: 'd', filters: [{ constraints: [{ name: 'x', op: 'exists' }] }] });
      m.add({ id: 'f', owner: 'd', filters: [{ constraints: [{ name: 'x', op: 'exists' }] }] });
      assert.deepEqual(sorted(await m.match(e)), ['d', 'f']);
    } finally {
      await m.close();
    }
  });

  it('a subscription replaced while a batch is in flight is listed by that batch, as it matched then', async () => {
    const m = make();
    try {
      const e = { id: 'e', lat: 45.46, lon: 9.18, attributes: { x: 1, k: 'road accident' } };
      m.add({ id: 'a', owner: 'd', filters: [{ constraints: [{ name: 'x', op: 'exists' }] }] });
      m.add({ id: 'gone', owner: 'd', filters: [{ constraints: [{ name: 'x', op: 'exists' }] }] });
      const first = m.match(e);
      // The same id replaced (by a version that no longer matches), another removed: the batch
      // submitted before answers from the state it was submitted with.
      m.replace({ id: 'a', owner: 'd', filters: [{ constraints: [{ name: 'k', op: 'like', value: 'fire%' }] }] });
      m.remove('gone');
      assert.deepEqual(sorted(await first), ['a']);
      assert.deepEqual(await m.match(e), []);
    } finally {
      await m.close();
    }
  });

  it('matchBatch calls and match() calls in flight together each get their own answers', async () => {
    const m = make({ maxBatch: 7, inFlight: 2 });
    const ref = new ReferenceMatcher();
    try {
      const subs = randomWorkload(31, 200, 2);
      twin(m, subs, 5);
      twin(ref, subs, 5);
      const rng = new Rng(9);
      const events = Array.from({ length: 60 }, (_, i) => randomEvent(rng, i));
      const calls: Promise<string[][]>[] = [];
      const spans: [number, number][] = [];
      for (let i = 0; i < events.length; ) {
        const n = 1 + (i % 11);
        const part = events.slice(i, i + n);
        calls.push(n === 1 ? m.match(part[0]).then((r) => [r]) : m.matchBatch(part));
        spans.push([i, i + part.length]);
        i += part.length;
      }
      calls.push(m.matchBatch([]));
      const got = await Promise.all(calls);
      assert.deepEqual(got[got.length - 1], []);
      for (let c = 0; c < spans.length; c++) {
        const [from, to] = spans[c];
        assert.equal(got[c].length, to - from);
        for (let i = from; i < to; i++) {
          assert.deepEqual(sorted(got[c][i - from]), sorted(await ref.match(events[i])), `event ${i}`);
        }
      }
    } finally {
      await m.close();
    }
  });
});

// ---------------------------------------------------------------- moves

// ---------------------------------------------------------------- the band, decided in float64

describe('gpu engine: exact at the boundary (pairs in the float32 band are decided in float64)', () => {
  /**
   * Circles (fixed and anchored) whose boundary passes exactly through, a float64 step off, or a
   * fraction of a metre to a few metres off their event, at radii from 1 m to 1000 km and with
   * event radii: all inside float32's uncertainty, so every one is a band pair the host decides.
   */
  function boundaryCase(seed: number) {
    const rng = new Rng(seed);
    const subs: Subscription[] = [];
    const events: Event[] = [];
    const devices: [string, number, number][] = [];
    // Inside the kernels' fine band (1 cm, or 2e-6 of the radius), just outside it (decided on the
    // GPU with the unit vectors' low parts), and inside the coarse band (4 m, 0.2%).
    const offsets = [0, -0.001, 0.001, -0.015, 0.015, -0.03, 0.03, -0.5, 0.5, -1.5, 1.5, -3, 3];
    for (let i = 0; i < 40; i++) {
      const lat = -70 + 140 * rng.next();
      const lon = -180 + 360 * rng.next();
      const d = [1, 24, 300, 5_000, 80_000, 450_000][i % 6] * (1 + rng.next());
      const re = i % 3 === 0 ? (d / 4) * rng.next() : 0;
      const p = pointAt(lat, lon, 360 * rng.next(), d);
      events.push({ id: `e${i}`, lat: p.lat, lon: p.lon, ...(re > 0 ? { radiusM: re } : {}), attributes: { k: i } });
      // The smallest radius that reaches the event (A2, inclusive) and the largest that does not.
      const exact = smallestRadius(p.dist, re);
      const radii = [exact, nextDown(exact), ...offsets.map((o) => exact + o), ...[-8e-6, -4e-6, -1e-6, 1e-6, 4e-6, 8e-6].map((k) => exact * (1 + k))].filter((r) => r > 0);
      const anchored = i % 2 === 0;
      if (anchored) devices.push([`dev${i}`, lat, lon]);
      radii.forEach((r, k) =>
        subs.push({
          id: `s${i}.${k}`,
          owner: anchored ? `dev${i}` : `o${i}`,
          filters: [{ constraints: [{ name: 'k', op: 'eq', value: i }], area: anchored ? { radiusM: r } : { radiusM: r, center: { lat, lon } } }],
        }),
      );
    }
    return { subs, events, devices };
  }

  for (const [label, opts] of [['lone events (no grid)', {}], ['batches with the grid', { gridMinEvents: 1 }], ['packed batches (packEvents, the grid)', {}]] as const) {
    it(`${label}: the same sets as the reference, with band pairs on both sides`, async () => {
      const m = make(opts);
      const ref = new ReferenceMatcher();
      try {
        const { subs, events, devices } = boundaryCase(label.length);
        for (const x of [m, ref]) {
          for (const [d, lat, lon] of devices) x.updatePosition(d, lat, lon);
          for (const sub of subs) x.add(sub);
        }
        const got = label.startsWith('lone') ? await Promise.all(events.map((e) => m.match(e))) : label.startsWith('packed') ? await m.matchPacked(packEvents(events, { grid: true })) : await m.matchBatch(events);
        let hits = 0;
        for (let i = 0; i < events.length; i++) {
          const want = sorted(await ref.match(events[i]));
          hits += want.length;
          assert.deepEqual(sorted(got[i] as string[]), want, `event ${i}`);
        }
        const s = m.stats().extra!;
        assert.equal(s.gpuEvents, events.length, 'every event answered by the GPU path');
        assert.ok((s.bandPairs as number) > 0 && (s.bandPairsMatched as number) > 0, `band pairs decided on the host (${s.bandPairs}, ${s.bandPairsMatched} matched)`);
        assert.ok((s.bandPairsMatched as number) < (s.bandPairs as number), 'and some of them did not match');
        assert.ok(hits > events.length && hits < subs.length, `both sides of the boundary present (${hits} of ${subs.length})`);
      } finally {
        await m.close();
      }
    });
  }

  /** A device on the boundary of its 1 km circle around an event point, and that event. */
  function onBoundary(m: GpuMatcher) {
    const c = { lat: 45.46, lon: 9.18 };
    const p = pointAt(c.lat, c.lon, 40, 1000);
    const e: Event = { id: 'e', lat: p.lat, lon: p.lon, attributes: { x: 1 } };
    m.updatePosition('d', c.lat, c.lon);
    return { c, e, r: smallestRadius(p.dist, 0) };
  }

  it('a band pair is decided on the position its batch was submitted with, not on a later move', async () => {
    const m = make();
    try {
      const { c, e, r } = onBoundary(m);
      m.add({ id: 'in', owner: 'd', filters: [{ constraints: [], area: { radiusM: r } }] });
      m.add({ id: 'out', owner: 'd2', filters: [{ constraints: [], area: { radiusM: nextDown(r) } }] });
      m.updatePosition('d2', c.lat, c.lon);
      const first = m.match(e); // submitted: 'in' on its boundary (matches), 'out' a step short
      // Both devices move by 3 mm (inside the kernels' fine band of a centimetre, so the host decides
      // again), 'd' away and 'd2' towards the event; the next batch uploads it.
      const away = pointAt(c.lat, c.lon, 220, 0.003);
      const toward = pointAt(c.lat, c.lon, 40, 0.003);
      m.updatePosition('d', away.lat, away.lon);
      m.updatePosition('d2', toward.lat, toward.lon);
      const second = m.match(e);
      assert.deepEqual(await first, ['in']);
      assert.deepEqual(await second, ['out']);
      assert.deepEqual(await m.match(e), ['out'], 'and after both');
      const s = m.stats().extra!;
      assert.ok((s.bandPairs as number) >= 4, `the pairs were band pairs (${s.bandPairs})`);
    } finally {
      await m.close();
    }
  });

  it('a filter removed while its band pair is in flight names no other filter', async () => {
    const m = make();
    try {
      const { e, r } = onBoundary(m);
      m.add({ id: 'a', owner: 'd', filters: [{ constraints: [], area: { radiusM: r } }] });
      const first = m.match(e);
      m.remove('a');
      // Would take a's filter index if it were free at once: the band pair would then name b.
      m.add({ id: 'b', owner: 'd', filters: [{ constraints: [], area: { radiusM: r } }] });
      assert.deepEqual(await first, []);
      assert.deepEqual(await m.match(e), ['b']);
    } finally {
      await m.close();
    }
  });
});

describe('gpu engine: location updates', () => {
  for (const moves of [1, 4, 5, 300]) {
    it(`${moves} moves between events (single writes up to 4, one scatter above)`, async () => {
      const m = make();
      const ref = new ReferenceMatcher();
      try {
        const subs = randomWorkload(31, 400, 2);
        twin(m, subs, 5);
        twin(ref, subs, 5);
        const handles = [...new Set(subs.map((s) => s.owner))].map((d) => m.openDevice(d));
        const rng = new Rng(moves);
        for (let round = 0; round < 5; round++) {
          for (let k = 0; k < moves; k++) {
            const h = handles[rng.int(handles.length)];
            const lat = 45.45 + rng.next() * 0.03;
            const lon = 9.17 + rng.next() * 0.04;
            h.update(lat, lon);
            ref.updatePosition(h.device, lat, lon);
          }
          await agree(m, ref, round, 5);
        }
        for (const h of handles) h.release();
        // Forgetting a device takes its anchored filters out of the GPU's view too.
        for (let i = 0; i < 20; i++) {
          m.removeDevice(`d${i}`);
          ref.removeDevice(`d${i}`);
        }
        await agree(m, ref, 77, 5);
      } finally {
        await m.close();
      }
    });
  }
});

describe('gpu engine: the CPU mirror catches up with moves it did not see', () => {
  it('moves applied on the GPU side only are seen by CPU answers, stats and removals', async () => {
    // select 'gpu' then 'cpu' on one state: moves land in the layout only, the CPU mirror syncs lazily.
    const m = make();
    const cpuOnly = make({ select: 'cpu' });
    const ref = new ReferenceMatcher();
    try {
      const subs = randomWorkload(53, 300, 2);
      twin(m, subs, 5);
      twin(cpuOnly, subs, 5);
      twin(ref, subs, 5);
      const devices = [...new Set(subs.map((s) => s.owner))];
      const handles = devices.map((d) => m.openDevice(d));
      const rng = new Rng(9);
      for (let round = 0; round < 4; round++) {
        for (let k = 0; k < 200; k++) {
          const i = rng.int(devices.length);
          const lat = 45.45 + rng.next() * 0.03;
          const lon = 9.17 + rng.next() * 0.04;
          if (k % 3 === 0) m.updatePosition(devices[i], lat, lon);
          else handles[i].update(lat, lon);
          if (k % 5 === 0) cpuOnly.updatePositions([{ device: devices[i], lat, lon }]);
          else cpuOnly.updatePosition(devices[i], lat, lon);
          ref.updatePosition(devices[i], lat, lon);
        }
        await agree(m, ref, 100 + round, 4);
        await agree(cpuOnly, ref, 200 + round, 4);
        assert.equal(m.stats().devices, ref.stats().devices);
      }
      // A device known only through a layout-side move is still removable (true), once.
      m.updatePosition('fresh', 45.46, 9.18);
      ref.updatePosition('fresh', 45.46, 9.18);
      assert.equal(m.removeDevice('fresh'), true);
      assert.equal(m.removeDevice('fresh'), false);
      ref.removeDevice('fresh');
      for (const h of handles) h.release();
      assert.throws(() => handles[0].update(45, 9), /released/);
      assert.throws(() => m.updatePosition(devices[0], 91, 9), /lat: must be within \[-90, 90\], got 91/);
      await agree(m, ref, 300, 4);
    } finally {
      await m.close();
      await cpuOnly.close();
    }
  });
});

// ---------------------------------------------------------------- crossover

describe('gpu engine: CPU below the crossover', () => {
  it('answers on the CPU below cpuBelowFilters and on the GPU above, visibly in stats', async () => {
    const m = GpuMatcher.attach(kernels, { cpuBelowFilters: 100, select: 'gpu' });
    const ref = new ReferenceMatcher();
    try {
      const subs = randomWorkload(41, 80, 1);
      twin(m, subs.slice(0, 40), 1);
      twin(ref, subs.slice(0, 40), 1);
      assert.equal(m.path, 'cpu');
      await agree(m, ref, 1, 3);
      assert.equal(m.stats().extra!.path, 'cpu');
      assert.equal(m.stats().extra!.gpuEvents, 0);
      const more = randomWorkload(42, 120, 1).map((s) => ({ ...s, id: `t${s.id}` }));
      twin(m, more, 2);
      twin(ref, more, 2);
      assert.equal(m.path, 'gpu');
      await agree(m, ref, 2, 3);
      assert.ok((m.stats().extra!.gpuEvents as number) > 0);
    } finally {
      await m.close();
    }
  });

  it('rejects bad options with the option named', () => {
    assert.throws(() => GpuMatcher.attach(kernels, { select: 'fastest' as 'gpu' }), /gpu\.select: must be adaptive, gpu or cpu, got "fastest"/);
    assert.throws(() => GpuMatcher.attach(kernels, { maxBatch: 0 }), /gpu\.maxBatch: must be an integer in \[1, 65535\], got 0/);
    assert.throws(() => GpuMatcher.attach(kernels, { cpuBelowFilters: Number.NaN }), /gpu\.cpuBelowFilters/);
  });
});

// ---------------------------------------------------------------- device loss

describe('gpu engine: device loss', () => {
  let own: GpuMatcher;
  before(async () => {
    own = await GpuMatcher.create({ gpu: { allowSoftware: true }, cpuBelowFilters: 0 });
  });
  after(() => own.close());

  it('loses no event when the device is destroyed mid-stream, then rebuilds on a new device', async () => {
    const ref = new ReferenceMatcher();
    const subs = randomWorkload(51, 500, 2);
    twin(own, subs, 9);
    twin(ref, subs, 9);
    const rng = new Rng(10);
    const events = Array.from({ length: 60 }, (_, i) => randomEvent(rng, i));
    const first = own.context!;
    const pending = events.map((e) => own.match(e));
    // A packed batch in flight too: the CPU answers it from its decoded events.
    const packed = own.matchPacked(packEvents(events.slice(0, 40)));
    first.device.destroy(); // the loss lands while batches are in flight
    const got = await Promise.all(pending);
    const gotPacked = await packed;
    for (let i = 0; i < events.length; i++) {
      const want = sorted(await ref.match(events[i]));
      assert.deepEqual(sorted(got[i]), want, `event ${i}`);
      if (i < 40) assert.deepEqual(sorted(gotPacked[i] as string[]), want, `packed event ${i}`);
    }
    // Mutations during the outage reach the rebuilt device.
    own.remove(subs[0].id);
    ref.remove(subs[0].id);
    await own.recovered();
    const s = own.stats().extra!;
    assert.equal(s.deviceLosses, 1);
    assert.equal(s.rebuilds, 1);
    assert.notEqual(own.context, first);
    assert.equal(own.path, 'gpu');
    const gpuBefore = s.gpuEvents as number;
    await agree(own, ref, 12, 10);
    assert.ok((own.stats().extra!.gpuEvents as number) > gpuBefore, 'the rebuilt device serves again');
  });
});
