/**
 * The GPU engine's adaptive choice of path (src/engines/gpu/queue.ts PathChoice): the rules with
 * fixed costs and an injected clock, then the engine on a device (Mesa's llvmpipe in CI) with
 * fixed costs: which path lone events and small calls take, and the order their answers come in.
 */
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { GpuContext } from '../src/engines/gpu/device.js';
import { GpuKernels, GpuMatcher, type GpuMatcherOptions } from '../src/engines/gpu/matcher.js';
import { BatchQueue, CPU_SHARE, PathChoice, SMALL_BATCH, newCounters } from '../src/engines/gpu/queue.js';
import type { BatchAnswer } from '../src/engines/gpu/batch.js';
import type { Listed } from '../src/engines/matcher.js';
import type { NEvent } from '../src/model/limits.js';
import { ReferenceMatcher } from '../src/engines/reference.js';
import { agree, randomEvent, randomWorkload, sorted, twin } from './support/gpu-workload.js';
import { Rng } from './support/rng.js';

// An adapter is required: open() throws (failing this file) when there is none.
const ctx = await GpuContext.open({ allowSoftware: true });
const kernels = await GpuKernels.compile(ctx);
after(() => ctx.close());

/** A choice whose paths cost `cpuUs` an event and `gpuUs` a small batch, on a clock the test moves. */
function choice(cpuUs: number, gpuUs: number, threadBusy: (() => boolean) | null = null) {
  const clock = { ms: 0 };
  const counters = newCounters();
  const c = new PathChoice('adaptive', counters, null, threadBusy, () => clock.ms);
  // The first two samples of each path are skipped (one-off work): the third sets the average.
  for (let i = 0; i < 3; i++) {
    c.sample('cpu', cpuUs);
    c.sample('gpu', gpuUs);
  }
  assert.deepEqual([c.cpuCostUs, c.gpuCostUs], [cpuUs, gpuUs]);
  return { c, clock, counters };
}

/** Lets the microtask that ends a synchronous run's burst run. */
const turn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/** `events` single-event calls spread evenly over `ms` of the clock, each in its own turn; how many went to the CPU. */
async function callsOverTime(x: ReturnType<typeof choice>, events: number, ms: number): Promise<number> {
  let onCpu = 0;
  for (let i = 0; i < events; i++) {
    x.clock.ms += ms / events;
    x.c.arrived(1);
    if (x.c.smallOnCpu(1, false)) onCpu++;
    await turn();
  }
  return onCpu;
}

describe('gpu engine: the adaptive choice of path for small calls', () => {
  it('a call of n events goes to the CPU while n times its cost there is at most a GPU round trip', async () => {
    const x = choice(20, 100);
    assert.equal(x.c.smallOnCpu(5, false), true, '5 x 20 µs = 100 µs: the CPU');
    await turn();
    assert.equal(x.c.smallOnCpu(6, false), false, '6 x 20 µs > 100 µs: the GPU');
    await turn();
    assert.deepEqual([x.counters.adaptiveCpu, x.counters.adaptiveGpu], [1, 1]);
  });

  it('the calls of one synchronous run count together: their events are answered one after another on the CPU', async () => {
    const x = choice(10, 500);
    // 4 calls of 4 events: 16 events, 160 µs, within SMALL_BATCH and below 500 µs.
    const run = [4, 4, 4, 4].map((n) => x.c.smallOnCpu(n, false));
    assert.deepEqual(run, [true, true, true, true]);
    assert.equal(x.c.smallOnCpu(1, false), false, 'a 17th event in the same run is past SMALL_BATCH: the GPU');
    assert.equal(SMALL_BATCH, 16);
    await turn();
    assert.equal(x.c.smallOnCpu(4, false), true, 'the next turn starts a new run');
    await turn();
    // Cost decides within a run too: 3 calls of 2 events at 100 µs an event against a 500 µs round trip.
    const y = choice(100, 500);
    assert.deepEqual([2, 2, 2].map((n) => y.c.smallOnCpu(n, false)), [true, true, false], '600 µs for the third call on the CPU: the GPU');
    assert.equal(y.c.smallOnCpu(1, false), true, 'events sent to the GPU take no CPU time: 5 events, 500 µs');
  });

  it('events waiting for a batch are load: the GPU', () => {
    const x = choice(10, 500);
    assert.equal(x.c.smallOnCpu(1, true), false);
    assert.deepEqual([x.counters.adaptiveCpu, x.counters.adaptiveGpu], [0, 0], 'load is not a decision between costs');
  });

  it(`events coming in faster than the CPU could answer with ${CPU_SHARE * 100}% of the thread are load; a slower rate is not`, async () => {
    const x = choice(20, 500);
    // 1k events/s at 20 µs: 2% of the thread.
    assert.equal(await callsOverTime(x, 300, 300), 300 - Math.floor(300 / 32), 'every call on the CPU but the GPU probes');
    assert.ok(Math.abs(x.c.rate - 1000) < 1, `rate ${x.c.rate}`);
    // 20k events/s at 20 µs: 40% of the thread.
    const before = x.counters.adaptiveCpu + x.counters.adaptiveGpu;
    const fast = await callsOverTime(x, 6000, 300);
    assert.ok(Math.abs(x.c.rate - 20000) < 10, `rate ${x.c.rate}`);
    // The first window (100 ms) still counts the slow rate; after it, none is decided by cost.
    const decided = x.counters.adaptiveCpu + x.counters.adaptiveGpu - before;
    assert.ok(fast <= 2100 && decided <= 2100, `at 20k/s only the first window's calls go by cost (${fast} on the CPU, ${decided} decided)`);
    // 10k/s at 20 µs is 20%: not load.
    await callsOverTime(x, 2000, 200);
    assert.ok(Math.abs(x.c.rate - 10000) < 10, `rate ${x.c.rate}`);
    assert.equal(x.c.smallOnCpu(1, false), true);
  });

  it('a given threadBusy decides load in place of the rate', async () => {
    let busy = true;
    const x = choice(20, 500, () => busy);
    assert.equal(x.c.smallOnCpu(1, false), false);
    await turn();
    busy = false;
    // 50k events/s would be load by the rate rule.
    assert.equal(await callsOverTime(x, 1000, 20), 1000 - Math.floor(1000 / 32));
  });

  it('a fixed selection is not adaptive', () => {
    const counters = newCounters();
    assert.equal(new PathChoice('cpu', counters, null).smallOnCpu(1, true), true);
    assert.equal(new PathChoice('gpu', counters, null).smallOnCpu(1, false), false);
  });
});

/**
 * A BatchQueue over a stand-in for the GPU whose batches finish when the test says: each answers
 * its events with their ids, or null (for the CPU) for ids starting with "cpu".
 */
function heldQueue(inFlight = 4) {
  const batches: { ids: string[]; finish: () => void }[] = [];
  const gpu = {
    lastStages: null,
    run: (events: readonly NEvent[]) =>
      new Promise<BatchAnswer>((resolve) => {
        const ids = events.map((e) => e.id);
        const results = ids.map((id) => (id.startsWith('cpu') ? null : [`gpu:${id}`]));
        batches.push({ ids, finish: () => resolve({ results, overflow: results.filter((r) => r === null).length }) });
      }),
  };
  const counters = newCounters();
  const onCpu = (e: NEvent): Listed[] => {
    if (e.id === 'cpu-throws') throw new Error('the CPU engine refused it');
    return [`cpu:${e.id}`];
  };
  const q = new BatchQueue({ maxBatch: 2, inFlight }, () => gpu, onCpu, new PathChoice('gpu', counters, null), counters);
  const event = (id: string) => ({ id }) as unknown as NEvent;
  const order: string[] = [];
  const seen = <T>(name: string, p: Promise<T>) => p.then((r) => (order.push(name), r), (err: Error) => (order.push(`${name}: ${err.message}`), null));
  return { q, batches, event, order, seen, counters };
}

/** Lets every microtask and pending promise reaction run. */
const settle = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

describe('gpu engine: answers come back in call order, whichever path and batch gave them', () => {
  it('a long queue (3,000 jobs waiting, one batch at a time) is handed back whole and in order, CPU answers among the jobs', async () => {
    const { q, batches, event, order, seen } = heldQueue(1);
    const all: Promise<unknown>[] = [];
    for (let i = 0; i < 3000; i++) {
      all.push(seen(`j${i}`, q.submit([event(`e${i}`)], false)));
      if (i % 100 === 99) all.push(seen(`c${i}`, q.inOrder([['cpu']])));
    }
    for (let b = 0; b < batches.length; b++) {
      batches[b].finish();
      await settle();
    }
    await Promise.all(all);
    // The first job goes alone at once; the rest wait and go two a batch (maxBatch 2), the last alone.
    assert.equal(batches.length, 1501);
    assert.deepEqual([batches[0].ids, batches[1].ids, batches[1500].ids], [['e0'], ['e1', 'e2'], ['e2999']]);
    const want: string[] = [];
    for (let i = 0; i < 3000; i++) {
      want.push(`j${i}`);
      if (i % 100 === 99) want.push(`c${i}`);
    }
    assert.deepEqual(order, want);
    assert.equal(q.busy, false);
  });

  it('each batch counts its own overflow, whichever finishes first', async () => {
    const { q, batches, event, counters } = heldQueue();
    const a = q.submit([event('cpu-a1'), event('a2')], false);
    const b = q.submit([event('cpu-b1'), event('cpu-b2')], false);
    batches[1].finish();
    batches[0].finish();
    assert.deepEqual(await Promise.all([a, b]), [[['cpu:cpu-a1'], ['gpu:a2']], [['cpu:cpu-b1'], ['cpu:cpu-b2']]]);
    assert.equal(counters.overflowEvents, 3);
    assert.equal(counters.gpuEvents, 1);
  });

  it('a CPU answer given while a lone GPU event is out comes back after it, not before', async () => {
    const { q, batches, event, order, seen } = heldQueue();
    const a = seen('a', q.submitOne(event('a'), false));
    const b = seen('b', q.inOrder(['cpu:b']));
    await settle();
    assert.deepEqual(order, [], 'the CPU answer waits for the GPU call made before it');
    batches[0].finish();
    assert.deepEqual(await Promise.all([a, b]), [['gpu:a'], ['cpu:b']]);
    assert.deepEqual(order, ['a', 'b']);
    const c = seen('c', q.inOrder(['cpu:c']));
    await c;
    assert.deepEqual(order, ['a', 'b', 'c'], 'with nothing out, a CPU answer comes back at once');
  });

  it('batches that finish out of order hand their calls back in call order, CPU answers between them included', async () => {
    const { q, batches, event, order, seen } = heldQueue();
    const a = seen('a', q.submit([event('a1'), event('a2')], false));
    const b = seen('b', q.submit([event('b1'), event('b2')], false));
    const c = seen('c', q.inOrder([['cpu:c']]));
    assert.equal(batches.length, 2, 'one batch a job (maxBatch 2)');
    batches[1].finish();
    await settle();
    assert.deepEqual(order, [], 'b is done but a, called before it, is not');
    const d = seen('d', q.inOrder([['cpu:d']]));
    batches[0].finish();
    assert.deepEqual(await Promise.all([a, b, c, d]), [[['gpu:a1'], ['gpu:a2']], [['gpu:b1'], ['gpu:b2']], [['cpu:c']], [['cpu:d']]]);
    assert.deepEqual(order, ['a', 'b', 'c', 'd']);
  });

  it('a job spanning batches, a job that fails, and the calls after them', async () => {
    const { q, batches, event, order, seen } = heldQueue();
    const a = seen('a', q.submit([event('a1'), event('a2'), event('a3')], false));
    const b = seen('b', q.submit([event('cpu-throws')], false));
    const c = seen('c', q.inOrder([['cpu:c']]));
    // a spans two batches (maxBatch 2); b, submitted after a's batches left, has its own.
    assert.deepEqual(batches.map((x) => x.ids), [['a1', 'a2'], ['a3'], ['cpu-throws']]);
    batches[2].finish();
    batches[1].finish();
    await settle();
    assert.deepEqual(order, [], 'a waits for its first batch; b and c wait for a');
    batches[0].finish();
    const got = await Promise.all([a, b, c]);
    assert.deepEqual(got, [[['gpu:a1'], ['gpu:a2'], ['gpu:a3']], null, [['cpu:c']]]);
    assert.deepEqual(order, ['a', 'b: the CPU engine refused it', 'c']);
    assert.equal(q.busy, false);
  });
});

/**
 * The engine with each path's cost fixed (µs: the CPU's per event, the GPU's per small batch),
 * beside a reference holding the same seeded subscriptions (`seed`) and positions (`positions`).
 */
function costed(cost: { cpu: number; gpu: number }, o: Partial<GpuMatcherOptions>, seed: number, positions: number, subs = 200) {
  const m = GpuMatcher.attach(kernels, { cpuBelowFilters: 0, costSample: (path) => cost[path], ...o });
  const ref = new ReferenceMatcher();
  const ws = randomWorkload(seed, subs, 2);
  twin(m, ws, positions);
  twin(ref, ws, positions);
  return { m, ref };
}

describe('gpu engine: the adaptive choice of path on a device (costs fixed through costSample)', () => {
  it('adaptive: on a busy thread lone events go to the GPU even when the CPU is cheaper', async () => {
    let busy = false;
    const { m, ref } = costed({ cpu: 10, gpu: 100 }, { threadBusy: () => busy }, 44, 4);
    try {
      await agree(m, ref, 4, 40);
      const idle = m.stats().extra!;
      assert.ok((idle.adaptiveCpu as number) > (idle.adaptiveGpu as number), 'an idle thread takes the cheaper CPU');
      busy = true;
      await agree(m, ref, 5, 40);
      const loaded = m.stats().extra!;
      assert.equal((loaded.adaptiveCpu as number) - (idle.adaptiveCpu as number), 0, 'a busy thread sends every lone event to the GPU');
      assert.equal((loaded.gpuEvents as number) - (idle.gpuEvents as number), 40, 'all of them answered by the GPU');
    } finally {
      await m.close();
    }
  });

  // Costs are fixed through costSample, so the choice does not depend on how fast this machine is.
  for (const cheaper of ['cpu', 'gpu'] as const) {
    it(`adaptive: lone events go to the cheaper path (${cheaper}), probing the other; load goes to the GPU`, async () => {
      const cost = { cpu: cheaper === 'cpu' ? 10 : 100, gpu: cheaper === 'gpu' ? 10 : 100 };
      const { m, ref } = costed(cost, { threadBusy: () => false }, 43, 3, 300);
      try {
        await agree(m, ref, 3, 96);
        const x = m.stats().extra!;
        // agree() awaits each call: none of them is load, so all were decided as lone events.
        assert.equal((x.adaptiveCpu as number) + (x.adaptiveGpu as number), 96, 'sequential awaited calls are lone events');
        assert.equal(x.select, 'adaptive');
        assert.deepEqual([x.cpuCostUs, x.gpuCostUs], [cost.cpu, cost.gpu], 'both paths measured');
        const onCheaper = cheaper === 'cpu' ? (x.adaptiveCpu as number) : (x.adaptiveGpu as number);
        const onOther = cheaper === 'cpu' ? (x.adaptiveGpu as number) : (x.adaptiveCpu as number);
        assert.ok(onCheaper > onOther, `most lone events on the cheaper path (${cheaper}: ${onCheaper} vs ${onOther})`);
        assert.ok(onOther >= 2, 'the other path is probed');
        // Concurrent events are load: batched on the GPU whichever path is cheaper alone.
        const before = x.gpuEvents as number;
        const rng = new Rng(8);
        await Promise.all(Array.from({ length: 40 }, (_, i) => m.match(randomEvent(rng, i))));
        assert.ok((m.stats().extra!.gpuEvents as number) - before >= 30, `events under load go to the GPU: ${JSON.stringify(m.stats().extra)}`);
      } finally {
        await m.close();
      }
    });
  }

  it('adaptive: a batch of one event is a lone event (a hub publishes one event at a time at low rates)', async () => {
    const m = GpuMatcher.attach(kernels, { cpuBelowFilters: 0, costSample: (path) => (path === 'cpu' ? 10 : 100), threadBusy: () => false });
    try {
      for (const s of randomWorkload(45, 200, 2)) m.add(s);
      const rng = new Rng(9);
      for (let i = 0; i < 40; i++) {
        const e = randomEvent(rng, i);
        assert.deepEqual(sorted((await m.matchBatch([e]))[0]), sorted((await m.matchBatchTagged([e]))[0] as string[]), 'untagged: ids either way');
      }
      const x = m.stats().extra!;
      assert.equal((x.adaptiveCpu as number) + (x.adaptiveGpu as number), 80, 'every batch of one decided as a lone event');
      assert.ok((x.adaptiveCpu as number) > (x.adaptiveGpu as number), 'mostly on the cheaper CPU');
    } finally {
      await m.close();
    }
  });

  it('adaptive: a small batch goes to the CPU while its events cost less there than one GPU round trip, and to the GPU on a busy thread', async () => {
    let busy = false;
    // An event costs 10 µs on the CPU; a small batch's GPU round trip 100 µs.
    const { m, ref } = costed({ cpu: 10, gpu: 100 }, { threadBusy: () => busy }, 46, 6);
    try {
      // Lone events until both paths are measured.
      await agree(m, ref, 6, 40);
      assert.deepEqual([m.stats().extra!.cpuCostUs, m.stats().extra!.gpuCostUs], [10, 100]);
      const rng = new Rng(10);
      let k = 0;
      const calls = async (size: number, times: number): Promise<{ cpu: number; gpu: number; cpuEvents: number; gpuEvents: number }> => {
        const x0 = m.stats().extra!;
        for (let c = 0; c < times; c++) {
          const events = Array.from({ length: size }, () => randomEvent(rng, k++));
          const got = await m.matchBatch(events);
          for (let i = 0; i < size; i++) assert.deepEqual(sorted(got[i]), sorted(await ref.match(events[i])), `event ${events[i].id}`);
        }
        const x = m.stats().extra!;
        const d = (key: string) => (x[key] as number) - (x0[key] as number);
        return { cpu: d('adaptiveCpu'), gpu: d('adaptiveGpu'), cpuEvents: d('cpuEvents'), gpuEvents: d('gpuEvents') };
      };
      // 4 events: 40 µs on the CPU against 100 on the GPU; the GPU probed every 32nd call.
      const four = await calls(4, 40);
      assert.equal(four.cpu + four.gpu, 40, 'each call decided once');
      assert.ok(four.cpu >= 38 && four.gpu >= 1, `calls of 4 on the CPU, the GPU probed: ${JSON.stringify(four)}`);
      assert.equal(four.cpuEvents, 4 * four.cpu);
      assert.equal(four.gpuEvents, 4 * four.gpu);
      // 16 events: 160 µs on the CPU, more than the GPU's 100.
      const sixteen = await calls(16, 40);
      assert.ok(sixteen.gpu >= 38 && sixteen.cpu >= 1, `calls of 16 on the GPU, the CPU probed: ${JSON.stringify(sixteen)}`);
      assert.equal(sixteen.gpuEvents, 16 * sixteen.gpu);
      // Beyond the small batches' bound: not decided, always the GPU.
      const big = await calls(SMALL_BATCH + 1, 4);
      assert.deepEqual(big, { cpu: 0, gpu: 0, cpuEvents: 0, gpuEvents: 4 * (SMALL_BATCH + 1) });
      busy = true;
      const loaded = await calls(4, 20);
      assert.deepEqual([loaded.cpu, loaded.cpuEvents, loaded.gpuEvents], [0, 0, 80], 'a busy thread sends small batches to the GPU');
    } finally {
      await m.close();
    }
  });

  it('adaptive, by the rate: events coming in faster than the CPU could answer are load; every call counts its events once', async () => {
    // No threadBusy: the default rule. An event costs 100 µs on the CPU, a small batch 100 ms on
    // the GPU (the CPU is always cheaper alone); 2.5k events/s would take a quarter of the thread.
    const clock = { ms: 0 };
    const { m, ref } = costed({ cpu: 100, gpu: 100_000 }, { clock: () => clock.ms }, 48, 8);
    try {
      const rng = new Rng(13);
      let k = 0;
      /** `calls` awaited calls `stepMs` apart on the clock, alternating match(e), matchBatch([e]) and matchBatch of 3; the events the GPU answered. */
      const calls = async (n: number, stepMs: number): Promise<number> => {
        const before = m.stats().extra!.gpuEvents as number;
        for (let c = 0; c < n; c++) {
          clock.ms += stepMs;
          const events = Array.from({ length: c % 3 === 2 ? 3 : 1 }, () => randomEvent(rng, k++));
          const got = c % 3 === 0 ? [await m.match(events[0])] : await m.matchBatch(events);
          for (let i = 0; i < events.length; i++) assert.deepEqual(sorted(got[i]), sorted(await ref.match(events[i])));
        }
        return (m.stats().extra!.gpuEvents as number) - before;
      };
      // Both paths measured (the GPU is probed among lone events), at 5 events every 3 ms.
      await calls(150, 1);
      assert.deepEqual([m.stats().extra!.cpuCostUs, m.stats().extra!.gpuCostUs], [100, 100_000]);
      const near = (x: unknown, want: number) => Math.abs((x as number) - want) <= want / 50;
      assert.ok(near(m.stats().extra!.eventsPerSecond, 1667), `the events of each call counted once (5 events every 3 ms): ${m.stats().extra!.eventsPerSecond}/s`);
      // 1.7k events/s at 100 µs: 17% of the thread: only the probes go to the GPU.
      const slow = await calls(96, 1);
      assert.ok(slow <= 3 * 5, `at 1.7k events/s the CPU answers (the GPU took ${slow} events)`);
      // 8.3k events/s: 83% of the thread. Once a window (100 ms) holds only these, every call is load.
      await calls(1100, 0.2);
      assert.ok(near(m.stats().extra!.eventsPerSecond, 8333), `${m.stats().extra!.eventsPerSecond}/s`);
      const fast = await calls(300, 0.2);
      assert.equal(fast, 500, 'at 8.3k events/s every event goes to the GPU');
    } finally {
      await m.close();
    }
  });

  it('adaptive: a call answered on the CPU while a batch runs is handed over after that batch (call order kept)', async () => {
    const { m, ref } = costed({ cpu: 10, gpu: 100 }, { threadBusy: () => false }, 47, 7);
    try {
      await agree(m, ref, 7, 40);
      const rng = new Rng(12);
      const big = Array.from({ length: SMALL_BATCH + 1 }, (_, i) => randomEvent(rng, i));
      const lone = randomEvent(rng, 99);
      const x0 = m.stats().extra!;
      const order: string[] = [];
      const onBatch = m.matchBatch(big).then((r) => (order.push('batch'), r));
      const onEmpty = m.matchBatch([]).then((r) => (order.push('empty'), r));
      const onLone = m.match(lone).then((r) => (order.push('lone'), r));
      const [got, gotLone, empty] = await Promise.all([onBatch, onLone, onEmpty]);
      assert.deepEqual(empty, []);
      const x = m.stats().extra!;
      assert.equal((x.cpuEvents as number) - (x0.cpuEvents as number), 1, 'the lone event answered on the CPU while the batch ran');
      assert.equal((x.gpuEvents as number) - (x0.gpuEvents as number), SMALL_BATCH + 1);
      assert.deepEqual(order, ['batch', 'empty', 'lone'], 'answers in call order');
      for (let i = 0; i < big.length; i++) assert.deepEqual(sorted(got[i]), sorted(await ref.match(big[i])));
      assert.deepEqual(sorted(gotLone), sorted(await ref.match(lone)));
    } finally {
      await m.close();
    }
  });

});
