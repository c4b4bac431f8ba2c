/**
 * The GPU engine without its CPU mirror (`cpuMirror: false`): the host keeps only the GPU buffers'
 * mirror, so `get` reads subscriptions back from it, the counts come from it, and every event is
 * answered by the GPU, an event it could not answer run again there. It runs the shared contract
 * and the differential suite like every engine, and here: subscriptions read back exactly as the
 * reference stores them (numbers to the bit, -0, strings in every script, patterns, tags, `exists`
 * in the order given, fixed centres) through adds, replaces and removals; overflows answered by
 * running again on the GPU; a device loss waited out; the options that contradict it refused.
 */
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { ReferenceMatcher } from '../src/engines/reference.js';
import type { MatcherOptions } from '../src/engines/matcher.js';
import type { Subscription } from '../src/model/types.js';
import { GpuContext } from '../src/engines/gpu/device.js';
import { GpuKernels, GpuMatcher, type GpuMatcherOptions } from '../src/engines/gpu/matcher.js';
import { BatchQueue, MAX_RETRIES, PathChoice, newCounters } from '../src/engines/gpu/queue.js';
import type { Listed } from '../src/engines/matcher.js';
import type { NEvent } from '../src/model/limits.js';
import { Capacity } from '../src/engines/gpu/readback.js';
import { runContract } from './support/contract.js';
import { runDifferential } from './support/differential.js';
import { Rng } from './support/rng.js';
import { NUMBER_EDGES, STRING_EDGES } from './support/values.js';
import { agree, randomEvent, randomWorkload, sorted, twin } from './support/gpu-workload.js';

const ctx = await GpuContext.open({ allowSoftware: true });
const kernels = await GpuKernels.compile(ctx);
after(() => ctx.close());

const make = (o?: MatcherOptions & GpuMatcherOptions) => GpuMatcher.attach(kernels, { cpuMirror: false, ...o });

runContract('gpu (no CPU mirror)', make);
runDifferential('gpu (no CPU mirror)', make);

// ---------------------------------------------------------------- subscriptions read back

const NAMES = ['a', 'b', 'c', 'zeta', 'é', '東京', '😀', 'a😀b', 'n1', 'n2', 'n3', 'n4'];
const PATTERNS: Array<['like' | 'regex', string]> = [
  ['like', 'caf_%'],
  ['like', '%東京\\%%'],
  ['like', ''],
  ['regex', 'a(b|c)*d'],
  ['regex', '^[0-9]{2,3}$'],
  ['regex', '😀.+'],
];

/** A valid subscription of every kind of constraint the model has, values at their edges. */
function richSubscription(rng: Rng, id: string): Subscription {
  const pick = <T>(xs: readonly T[]): T => xs[rng.int(xs.length)];
  const filters: Subscription['filters'] = [];
  for (let i = 0, n = 1 + rng.int(4); i < n; i++) {
    const constraints: NonNullable<Subscription['filters'][number]['constraints']> = [];
    const kind = rng.int(4);
    for (let j = 0, m = rng.int(5); j < m; j++) {
      const name = pick(NAMES);
      // kind 0: names only (`exists`, in any order, beside tags), so the layout keeps a name run.
      if (kind === 0 || rng.next() < 0.1) constraints.push({ name, op: 'exists' });
      else if (rng.next() < 0.15) {
        const [op, value] = pick(PATTERNS);
        constraints.push({ name, op, value });
      } else if (rng.next() < 0.4) constraints.push({ name, op: pick(['eq', 'ne', 'prefix', 'suffix', 'contains'] as const), value: pick(STRING_EDGES) });
      else if (rng.next() < 0.2) constraints.push({ name, op: pick(['eq', 'ne', 'lt', 'ge'] as const), value: rng.next() < 0.5 });
      else constraints.push({ name, op: pick(['eq', 'ne', 'lt', 'le', 'gt', 'ge'] as const), value: rng.next() < 0.6 ? pick(NUMBER_EDGES) : rng.next() * 1e6 - 5e5 });
    }
    const f: Subscription['filters'][number] = { constraints };
    const a = rng.int(3);
    if (a === 1) f.area = { radiusM: 0.5 + rng.next() * 5000 };
    if (a === 2) f.area = { radiusM: 1 + rng.next() * 900_000, center: { lat: -90 + rng.next() * 180, lon: -180 + rng.next() * 360 } };
    if (rng.next() < 0.35) f.tags = Array.from({ length: 1 + rng.int(4) }, () => pick(['alpha', '#Zed', 'Café', 'cafe\u0301', '東京', 'x', 'y', 'ALPHA']));
    filters.push(f);
  }
  return { id, owner: `d${rng.int(30)}`, filters };
}

describe('gpu (no CPU mirror): subscriptions read back', () => {
  it('get() returns exactly what the reference stores, through adds, bulk adds, replaces and removals', async () => {
    const m = make();
    const ref = new ReferenceMatcher();
    const rng = new Rng(2026);
    const live = new Set<string>();
    const check = (when: string) => {
      for (const id of live) assert.deepStrictEqual(m.get(id), ref.get(id), `${id} ${when}`);
      const a = m.stats();
      const b = ref.stats();
      assert.deepEqual([a.subscriptions, a.filters, a.constraints, a.devices], [b.subscriptions, b.filters, b.constraints, b.devices], when);
    };
    try {
      const bulk = Array.from({ length: 150 }, (_, i) => richSubscription(rng, `b${i}`));
      m.addMany(bulk);
      ref.addMany(bulk);
      bulk.forEach((s) => live.add(s.id));
      check('after addMany');
      for (let round = 0; round < 6; round++) {
        for (let k = 0; k < 120; k++) {
          const id = `s${rng.int(200)}`;
          const r = rng.next();
          if (!live.has(id)) {
            const s = richSubscription(rng, id);
            m.add(s);
            ref.add(s);
            live.add(id);
          } else if (r < 0.5) {
            const s = richSubscription(rng, id);
            m.replace(s);
            ref.replace(s);
          } else {
            assert.equal(m.remove(id), true);
            ref.remove(id);
            live.delete(id);
            assert.equal(m.get(id), undefined);
            assert.equal(m.has(id), false);
          }
        }
        // Devices placed and forgotten: the count of known positions follows.
        for (let k = 0; k < 10; k++) {
          const d = `d${rng.int(40)}`;
          if (rng.next() < 0.7) {
            const [lat, lon] = [-60 + rng.next() * 120, -170 + rng.next() * 340];
            m.updatePosition(d, lat, lon);
            ref.updatePosition(d, lat, lon);
          } else assert.equal(m.removeDevice(d), ref.removeDevice(d), `removeDevice(${d})`);
        }
        check(`after round ${round}`);
      }
      // -0 read back as -0, not 0 (a key of its own is kept for it).
      m.add({ id: 'negzero', owner: 'd0', filters: [{ constraints: [{ name: 'a', op: 'eq', value: -0 }, { name: 'b', op: 'lt', value: 0 }] }] });
      const got = m.get('negzero')!.filters[0].constraints;
      assert.ok(Object.is(got[0].value, -0) && Object.is(got[1].value, 0));
      // Names only, given against the order of their ids: read back as given.
      m.add({ id: 'order', owner: 'd0', filters: [{ constraints: [{ name: 'n4', op: 'exists' }, { name: 'n1', op: 'exists' }, { name: 'n3', op: 'exists' }] }] });
      assert.deepEqual(m.get('order')!.filters[0].constraints.map((c) => c.name), ['n4', 'n1', 'n3']);
    } finally {
      await m.close();
    }
  });

  it('a removed subscription gives back its names and strings: adding the same set again reuses the same space', async () => {
    const m = make();
    try {
      const rng = new Rng(7);
      const subs = Array.from({ length: 80 }, (_, i) => richSubscription(rng, `r${i}`));
      const layout = (m as unknown as { layout: { sTop: number; cTop: number; fTop: number } }).layout;
      const ref = new ReferenceMatcher();
      ref.addMany(subs);
      m.addMany(subs);
      const top = [layout.sTop, layout.cTop, layout.fTop];
      for (const s of subs) m.remove(s.id);
      assert.equal(m.stats().filters, 0);
      m.addMany(subs);
      assert.deepEqual([layout.sTop, layout.cTop, layout.fTop], top, 'strings, constraint runs and filters reused, not grown');
      for (const s of subs) assert.deepStrictEqual(m.get(s.id), ref.get(s.id));
    } finally {
      await m.close();
    }
  });
});

// ---------------------------------------------------------------- events only the GPU answers

describe('gpu (no CPU mirror): every event on the GPU', () => {
  it('events whose candidates or pairs overflow run again on the GPU with the room they needed', async () => {
    const m = make({ initialCandidates: 1, initialOutputs: 1 });
    const ref = new ReferenceMatcher();
    try {
      const subs = randomWorkload(61, 400, 2);
      twin(m, subs, 3);
      twin(ref, subs, 3);
      const rng = new Rng(62);
      const events = Array.from({ length: 40 }, (_, i) => randomEvent(rng, i));
      const got = await Promise.all([m.matchBatch(events.slice(0, 25)), ...events.slice(25).map((e) => m.match(e))]);
      const answers = [...got[0], ...(got.slice(1) as string[][])];
      for (let i = 0; i < events.length; i++) assert.deepEqual(sorted(answers[i]), sorted(await ref.match(events[i])), `event ${i}`);
      const s = m.stats().extra!;
      assert.ok((s.overflowEvents as number) > 0, 'the tiny buffers overflowed');
      assert.ok((s.retriedEvents as number) > 0, 'and their events ran again');
      assert.equal(s.cpuEvents, 0, 'none answered on the CPU');
      assert.equal(s.path, 'gpu');
      assert.equal(s.cpuMirror, false);
      await agree(m, ref, 63, 10);
    } finally {
      await m.close();
    }
  });

  it('a batch whose pairs far exceed the output bound (5000 filters matching each of 1024 events) is answered by narrower runs', async () => {
    const m = make();
    try {
      m.addMany(Array.from({ length: 5000 }, (_, i) => ({ id: `s${i}`, owner: 'o', filters: [{ constraints: [] }] })));
      const events = Array.from({ length: 1024 }, (_, i) => ({ id: `e${i}`, lat: 0, lon: 0, radiusM: 10, attributes: {} }));
      const got = await m.matchBatch(events);
      for (let i = 0; i < events.length; i++) assert.equal(new Set(got[i]).size, 5000, `event ${i}`);
      const s = m.stats().extra!;
      assert.ok((s.retriedEvents as number) > 0);
      assert.equal(s.cpuEvents, 0);
    } finally {
      await m.close();
    }
  });

  it('an event with more candidates than a full-width batch may list is answered alone (maxBatch 65535)', async () => {
    const m = make({ maxBatch: 65535 });
    try {
      m.addMany(Array.from({ length: 2000 }, (_, i) => ({ id: `s${i}`, owner: 'o', filters: [{ constraints: [{ name: 'x', op: 'eq', value: 1 }] }] })));
      const got = await m.match({ id: 'e', lat: 0, lon: 0, attributes: { x: 1 } });
      assert.equal(new Set(got).size, 2000);
      assert.equal(m.stats().extra!.cpuEvents, 0);
    } finally {
      await m.close();
    }
  });

  it('a small workload is matched on the GPU too (no crossover), lone events included', async () => {
    const m = make();
    const ref = new ReferenceMatcher();
    try {
      const subs = randomWorkload(71, 20, 1);
      twin(m, subs, 4);
      twin(ref, subs, 4);
      await agree(m, ref, 72, 6);
      const s = m.stats().extra!;
      assert.equal(s.cpuEvents, 0);
      assert.ok((s.gpuEvents as number) >= 6);
    } finally {
      await m.close();
    }
  });

  it('holds far less host memory than the engine with its mirror on the same state', async () => {
    const m = make();
    const mirrored = GpuMatcher.attach(kernels, {});
    try {
      const subs = randomWorkload(81, 3000, 3);
      twin(m, subs, 5);
      twin(mirrored, subs, 5);
      const lean = m.stats().memoryBytes;
      const full = mirrored.stats().memoryBytes;
      assert.ok(lean > 0 && lean < 0.6 * full, `without the mirror ${lean} B, with it ${full} B`);
    } finally {
      await m.close();
      await mirrored.close();
    }
  });

  it('a device may have as many open handles as on the fast engine, and no more', async () => {
    const m = make();
    try {
      const handles = Array.from({ length: 0xffff }, () => m.openDevice('d'));
      assert.throws(() => m.openDevice('d'), (e: { code: string; field?: string }) => e.code === 'RESOURCE_EXHAUSTED' && e.field === 'device');
      handles[0].release();
      m.openDevice('d').update(45, 9);
      assert.equal(m.stats().devices, 1);
    } finally {
      await m.close();
    }
  });

  it('refuses options that need the CPU mirror, naming them', () => {
    assert.throws(() => make({ select: 'adaptive' }), /gpu\.select: must be gpu without a CPU mirror \(cpuMirror false\), got "adaptive"/);
    assert.throws(() => make({ select: 'cpu' }), /gpu\.select: must be gpu without a CPU mirror/);
    assert.throws(() => make({ cpuBelowFilters: 4096 }), /gpu\.cpuBelowFilters: must be 0 without a CPU mirror \(cpuMirror false\), got 4096/);
    assert.throws(() => GpuMatcher.attach(kernels, { cpuMirror: 'no' as unknown as boolean }), /gpu\.cpuMirror: must be true or false, got "no"/);
  });
});

describe('gpu (no CPU mirror): device loss', () => {
  it('events in flight when the device is lost wait for the new device and are answered there', async () => {
    const own = await GpuMatcher.create({ gpu: { allowSoftware: true }, cpuMirror: false });
    const ref = new ReferenceMatcher();
    try {
      const subs = randomWorkload(91, 400, 2);
      twin(own, subs, 8);
      twin(ref, subs, 8);
      const rng = new Rng(92);
      const events = Array.from({ length: 50 }, (_, i) => randomEvent(rng, i));
      const first = own.context!;
      const pending = events.map((e) => own.match(e));
      first.device.destroy();
      // A change made while the device is gone reaches the new one.
      own.remove(subs[1].id);
      ref.remove(subs[1].id);
      const late = events.map((e) => own.match(e));
      const got = await Promise.all(pending);
      const before = new ReferenceMatcher();
      twin(before, subs, 8);
      for (let i = 0; i < events.length; i++) {
        // Answered after the removal or before it: either state's answer, never anything else.
        const g = sorted(got[i]);
        const a = sorted(await before.match(events[i]));
        const b = sorted(await ref.match(events[i]));
        assert.ok(JSON.stringify(g) === JSON.stringify(a) || JSON.stringify(g) === JSON.stringify(b), `event ${i}: ${g}`);
      }
      const after2 = await Promise.all(late);
      for (let i = 0; i < events.length; i++) assert.deepEqual(sorted(after2[i]), sorted(await ref.match(events[i])), `late event ${i}`);
      const s = own.stats().extra!;
      assert.equal(s.deviceLosses, 1);
      assert.equal(s.rebuilds, 1);
      assert.equal(s.cpuEvents, 0);
      assert.notEqual(own.context, first);
      await agree(own, ref, 93, 8);
    } finally {
      await own.close();
    }
  });
});

// ---------------------------------------------------------------- the queue's retries, on a GPU side the test scripts

describe('gpu (no CPU mirror): the batch queue runs unanswered events again', () => {
  const ev = (id: string): NEvent => ({ id, lat: 0, lon: 0, radiusM: 0, names: [], values: [], tags: [] });
  type Run = (events: readonly NEvent[]) => Promise<{ results: (Listed[] | null)[]; overflow: number; unfit?: boolean }> | { results: (Listed[] | null)[]; overflow: number; unfit?: boolean };
  function queue(run: Run, maxBatch = 16, inFlight = 1) {
    const counters = newCounters();
    const log: string[][] = [];
    const gpu = {
      lastStages: null,
      run: async (events: readonly NEvent[]) => {
        log.push(events.map((e) => e.id));
        await Promise.resolve();
        return run(events);
      },
    };
    const q = new BatchQueue({ maxBatch, inFlight }, () => gpu, null, new PathChoice('gpu', counters, null), counters, async () => true);
    return { q, log, counters };
  }
  const outcome = (p: Promise<unknown>) => p.then((r) => JSON.stringify(r), (e: { code: string }) => `failed ${e.code}`);

  it('each event counts its own failed runs: one that never fits fails alone, one that joins its retries is answered', async () => {
    let yRuns = 0;
    let y: Promise<string> | null = null;
    const { q, log } = queue((events) => {
      // Y arrives during X's fifth run, so their retries share batches from then on.
      if (log.length === 5 && y === null) y = outcome(q.submitOne(ev('Y'), false));
      return { overflow: 0, results: events.map((e) => (e.id === 'X' ? null : e.id === 'Y' && yRuns++ === 0 ? null : [e.id])) };
    });
    const x = outcome(q.submitOne(ev('X'), false));
    assert.equal(await x, 'failed RESOURCE_EXHAUSTED');
    assert.equal(await y, '["Y"]');
    assert.equal(log.filter((b) => b.includes('X')).length, MAX_RETRIES + 1, 'X ran once, then MAX_RETRIES times again');
    assert.equal(yRuns, 2);
  });

  it('retries run in batches of their own that narrow with each failed run; calls are still answered in the order made', async () => {
    // A batch of more than 3 events overflows its pairs: none of its events is answered.
    const { q, log } = queue((events) => ({ overflow: events.length, results: events.map((e) => (events.length > 3 ? null : [e.id])) }), 64, 4);
    const order: string[] = [];
    const first = q.submit(Array.from({ length: 40 }, (_, i) => ev(`a${i}`)), false).then((r) => {
      order.push('first');
      return r;
    });
    const second = q.submitOne(ev('b'), false).then((r) => {
      order.push('second');
      return r;
    });
    assert.deepEqual((await first).map((r) => r[0]), Array.from({ length: 40 }, (_, i) => `a${i}`));
    assert.deepEqual(await second, ['b']);
    assert.deepEqual(order, ['first', 'second']);
    assert.deepEqual(log.slice(0, 2).map((b) => b.length), [40, 1], 'the calls as they came');
    assert.ok(log.slice(2).every((b) => b.every((id) => id.startsWith('a'))), 'retry batches hold only retried events');
    // Then the 40 again in batches of at most 64 >> 2 = 16 (overflowing), of 64 >> 4 = 4 (overflowing), of 1.
    const sizes = log.slice(2).map((b) => b.length).sort((a, b) => b - a);
    assert.deepEqual(sizes, [16, 16, 8, ...Array(10).fill(4), ...Array(40).fill(1)]);
  });

  it('the output room ahead of a batch is never less than its events had, whatever the bound on headroom', () => {
    const cap = new Capacity(1024);
    cap.pairsPerEvent = 5_000_000; // one event matched five million filters
    assert.ok(cap.outputRoom(1, 4096) >= 5_000_000);
    cap.pairsPerEvent = 3;
    assert.equal(cap.outputRoom(1000, 4096), 6000, 'twice what they had, as headroom');
  });

  it('a state the device cannot bind fails at once; a run that throws fails with its own error after the retries', async () => {
    const unfit = queue((events) => ({ overflow: 0, unfit: true, results: events.map(() => null) }));
    assert.equal(await outcome(unfit.q.submitOne(ev('u'), false)), 'failed RESOURCE_EXHAUSTED');
    assert.equal(unfit.log.length, 1, 'not run again');
    const throwing = queue(() => {
      throw new Error('createBuffer: out of memory');
    });
    const err = await throwing.q.submitOne(ev('t'), false).then(() => null, (e: Error & { code: string }) => e);
    assert.equal(err?.code, 'UNAVAILABLE');
    assert.match(err!.message, /createBuffer: out of memory/);
    assert.equal(throwing.log.length, MAX_RETRIES + 1);
  });
});
