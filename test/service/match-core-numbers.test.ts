/**
 * The match core's owner numbers (the tags an engine keeps and lists, services/matcher/core.ts):
 * dense, and a number freed by a removal is given again only once no match that may list it is
 * in flight; until then a match that lists it resolves it to the removed owner, marked gone.
 */
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { CPU_ENGINES } from '../../src/engines/index.js';
import { GpuContext } from '../../src/engines/gpu/device.js';
import { GpuKernels, GpuMatcher } from '../../src/engines/gpu/matcher.js';
import type { Listed } from '../../src/engines/matcher.js';
import { type DeviceSubscription, ENGINE_SIDE_LIMITS, subscriptionKey } from '../../services/hub/port.js';
import { MatchCore } from '../../services/matcher/core.js';
import { PatternMatcher } from '../../src/engines/event-patterns/pattern-matcher.js';

const ctx = await GpuContext.open({ allowSoftware: true });
const kernels = await GpuKernels.compile(ctx);
after(() => ctx.close());

/** The fast engine, and the GPU engine on its GPU path (batches answered asynchronously). */
const ENGINES = [
  ['fast', () => CPU_ENGINES.fast({ limits: ENGINE_SIDE_LIMITS })],
  ['gpu', () => GpuMatcher.attach(kernels, { cpuBelowFilters: 0, select: 'gpu', limits: ENGINE_SIDE_LIMITS })],
] as const;

const all = (id: string) => ({ id, filters: [{ constraints: [] }] });
const event = { id: 'e', lat: 0, lon: 0, attributes: {} };

describe('match core: owner numbers', () => {
  for (const [name, make] of ENGINES)
  it(`${name}: a number freed while a match is in flight is given again only after it settles; the match resolves it to the gone owner`, async () => {
    const core = new MatchCore(make());
    try {
      const num = (d: string, id: string) => core.numOf(subscriptionKey(d, id));
      core.put('d1', all('s1'), 'add');
      core.put('d1', all('s2'), 'add');
      assert.deepEqual([num('d1', 's1'), num('d1', 's2')], [0, 1]);
      let seen: { keys: readonly Listed[]; gone: boolean[]; keysOf: string[] } | null = null;
      // The removal and the new subscription come while the match is awaited. The fast engine
      // answered as it was called (s1 listed, its owner gone by then); a GPU batch lists what is
      // live when it is read (s1 not listed, R6) and s3 not at all (added after the batch went).
      const m = core.matchKeys([event], ([keys]) => {
        seen = { keys, gone: keys.map((k) => core.isGone(k as number)), keysOf: keys.map((k) => subscriptionKey(core.ownerDevice(k as number), core.ownerId(k as number))) };
      });
      core.remove('d1', 's1');
      core.put('d2', all('s3'), 'add');
      assert.equal(num('d2', 's3'), 2, 'not the number a match in flight may list');
      await m;
      const got = seen!;
      assert.deepEqual([...got.keys].sort(), name === 'fast' ? [0, 1] : [1], 'listed as numbers');
      if (name === 'fast') {
        const at0 = got.keys.indexOf(0);
        assert.equal(got.gone[at0], true);
        assert.equal(got.keysOf[at0], subscriptionKey('d1', 's1'), 'the gone owner, by its key');
      }
      // Settled: the number is free again, and matched as its new owner's.
      core.put('d3', all('s4'), 'add');
      assert.equal(num('d3', 's4'), 0);
      const grouped = await core.match([event]);
      assert.deepEqual(grouped[0].map((r) => [r.device, r.subscriptionIds]).sort(), [['d1', ['s2']], ['d2', ['s3']], ['d3', ['s4']]]);
    } finally {
      await core.close();
    }
  });

  it('numbers come back while matches always overlap (each freed once the matches begun before it settle)', async () => {
    const engine = CPU_ENGINES.fast({ limits: ENGINE_SIDE_LIMITS });
    // The engine's answers are held until the test lets each go: one match is always in flight.
    const held: (() => void)[] = [];
    const tagged = engine.matchBatchTagged!.bind(engine);
    engine.matchBatchTagged = (es) => {
      const answer = tagged(es);
      return new Promise((resolve) => held.push(() => resolve(answer)));
    };
    const core = new MatchCore(engine);
    try {
      const live = 20;
      for (let i = 0; i < live; i++) core.put(`d${i}`, all('s0'), 'add');
      let most = 0;
      let previous = core.matchKeys([event], () => {});
      for (let step = 1; step <= 60; step++) {
        const next = core.matchKeys([event], () => {});
        const d = `d${step % live}`;
        core.remove(d, core.list(d)[0].id);
        core.put(d, all(`s${step}`), 'add');
        most = Math.max(most, core.numOf(subscriptionKey(d, `s${step}`)));
        // The earlier match settles; the later one stays in flight.
        while (held.length > 0) held.shift()!();
        await previous;
        previous = next;
      }
      while (held.length > 0) held.shift()!();
      await previous;
      assert.ok(most < live + 4, `numbers stay near the live count (${most} for ${live} live subscriptions over 60 replacements)`);
    } finally {
      await core.close();
    }
  });

  it('a removed subscription matched by a match in flight is delivered as matched; a replaced one keeps its number', async () => {
    const core = new MatchCore(CPU_ENGINES.fast({ limits: ENGINE_SIDE_LIMITS }));
    try {
      core.put('d1', all('a'), 'add');
      core.put('d1', all('b'), 'add');
      const before = core.numOf(subscriptionKey('d1', 'b'));
      const m = core.match([event]);
      core.remove('d1', 'a');
      core.put('d1', { id: 'b', filters: [{ constraints: [{ name: 'x', op: 'exists' }] }] }, 'replace');
      assert.equal(core.numOf(subscriptionKey('d1', 'b')), before, 'a replaced subscription keeps its owner and number');
      const [grouped] = await m;
      assert.deepEqual(grouped.map((r) => [r.device, r.subscriptionIds]), [['d1', ['a', 'b']]]);
      assert.deepEqual(await core.match([event]), [[]], 'b no longer matches, a is gone');
    } finally {
      await core.close();
    }
  });

  it("a device's number is not given to another while a match in flight may list its removed subscription", async () => {
    const core = new MatchCore(CPU_ENGINES.fast({ limits: ENGINE_SIDE_LIMITS }));
    try {
      core.put('d1', all('s1'), 'add');
      const m = core.match([event]);
      // d1 holds nothing now (no position either): its number leaves it, but d2 must not get it yet.
      core.remove('d1', 's1');
      core.put('d2', all('s2'), 'add');
      const [grouped] = await m;
      assert.deepEqual(grouped.map((r) => [r.device, r.subscriptionIds]), [['d1', ['s1']]], 'delivered as matched, to the device it was');
      assert.deepEqual((await core.match([event]))[0].map((r) => [r.device, r.subscriptionIds]), [['d2', ['s2']]]);
      assert.deepEqual(core.sortedSubscribedDevices(), ['d2']);
    } finally {
      await core.close();
    }
  });

  it("a location writer finds its device again after a purge, not the device given the number since", async () => {
    const core = new MatchCore(CPU_ENGINES.fast({ limits: ENGINE_SIDE_LIMITS }));
    try {
      const w = core.writer('a');
      w(1, 1);
      assert.deepEqual(core.position('a'), { lat: 1, lon: 1 });
      assert.deepEqual(core.purge('a'), { subscriptions: 0, location: true });
      assert.equal(core.position('a'), null);
      core.move('b', 2, 2);
      w(3, 3);
      assert.deepEqual(core.position('b'), { lat: 2, lon: 2 }, "b's position is its own");
      assert.deepEqual(core.position('a'), { lat: 3, lon: 3 });
      assert.equal(core.deviceCount, 2);
      // A device with only a position keeps it through its subscriptions coming and going.
      core.put('b', all('x'), 'add');
      core.remove('b', 'x');
      assert.deepEqual(core.position('b'), { lat: 2, lon: 2 });
      assert.deepEqual([...core.positions()].sort(), [['a', 3, 3], ['b', 2, 2]]);
      const cut = core.positionCut();
      core.move('a', 4, 4);
      const inCut = cut.devices.flatMap((d, i) => (d === '' ? [] : [[d, cut.coords[2 * i], cut.coords[2 * i + 1]]]));
      assert.deepEqual(inCut.sort(), [['a', 3, 3], ['b', 2, 2]], 'a cut keeps the positions of when it was taken');
    } finally {
      await core.close();
    }
  });

  it("keeps each device's subscriptions in the order first put through replaces of either kind and removals", async () => {
    const patterns = new PatternMatcher({ elements: CPU_ENGINES.fast({ limits: ENGINE_SIDE_LIMITS }) });
    const core = new MatchCore(CPU_ENGINES.fast({ limits: ENGINE_SIDE_LIMITS }), undefined, patterns);
    const pattern = (id: string): DeviceSubscription => ({ id, filters: [], pattern: { steps: [{ name: 'a', filter: { constraints: [{ name: 'k', op: 'eq', value: 'a' }] } }, { name: 'b', filter: { constraints: [{ name: 'k', op: 'eq', value: 'b' }] }, withinMs: 1000 }] } });
    const order = (d: string) => core.list(d).map((s) => `${s.id}:${s.pattern === undefined ? 'f' : 'p'}`);
    try {
      for (const id of ['a', 'b', 'c', 'd']) core.put('dev', id === 'b' ? pattern(id) : all(id), 'add');
      assert.deepEqual(order('dev'), ['a:f', 'b:p', 'c:f', 'd:f']);
      core.put('dev', all('b'), 'replace');
      core.put('dev', pattern('a'), 'replace');
      core.put('dev', pattern('d'), 'upsert');
      assert.deepEqual(order('dev'), ['a:p', 'b:f', 'c:f', 'd:p'], 'a replaced one keeps its place, of either kind');
      assert.equal(core.patternOwners, 1);
      assert.equal(core.isPattern('dev', 'a'), true);
      assert.equal(core.isPattern('dev', 'b'), false);
      core.remove('dev', 'd');
      core.put('dev', all('e'), 'add');
      core.remove('dev', 'a');
      core.put('dev', pattern('f'), 'add');
      assert.deepEqual(order('dev'), ['b:f', 'c:f', 'e:f', 'f:p'], 'removing the first or the last keeps the list whole');
      core.remove('dev', 'c');
      assert.deepEqual(order('dev'), ['b:f', 'e:f', 'f:p']);
      assert.equal(core.count('dev'), 3);
      assert.equal(core.subscriptions, 3);
      assert.deepEqual((await core.match([event]))[0].map((r) => [r.device, r.subscriptionIds]), [['dev', ['b', 'e']]]);
      for (const id of ['b', 'e', 'f']) assert.equal(core.remove('dev', id), true);
      assert.equal(core.patternOwners, 0);
      assert.deepEqual(core.list('dev'), []);
      assert.deepEqual(core.sortedSubscribedDevices(), []);
    } finally {
      await core.close();
    }
  });

  it("groups one event's matches by device across the wrap of its int32 marks", async () => {
    const core = new MatchCore(CPU_ENGINES.fast({ limits: ENGINE_SIDE_LIMITS }));
    try {
      core.put('d1', all('a'), 'add');
      core.put('d1', all('b'), 'add');
      core.put('d2', all('c'), 'add');
      // The marks' counter just short of the largest int32: the matches below cross it.
      (core as unknown as { stamp: number }).stamp = 0x7fffffff - 3;
      for (let i = 0; i < 6; i++) {
        const [grouped] = await core.match([event]);
        assert.deepEqual(grouped.map((r) => [r.device, r.subscriptionIds]).sort(), [['d1', ['a', 'b']], ['d2', ['c']]], `match ${i}`);
      }
    } finally {
      await core.close();
    }
  });
});

