/**
 * The match core lists a device's filter subscriptions as the engine holds them, in the API's
 * form (services/edge/convert.ts writes that form from the wire), and keeps no copy of its own:
 * what a device gave is listed back value for value, on every engine, through replaces and
 * removals, and changing the object given afterwards changes nothing listed.
 */
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { CPU_ENGINES } from '../../src/engines/index.js';
import { GpuContext } from '../../src/engines/gpu/device.js';
import { GpuKernels, GpuMatcher } from '../../src/engines/gpu/matcher.js';
import type { Matcher } from '../../src/engines/matcher.js';
import { type DeviceSubscription, ENGINE_SIDE_LIMITS } from '../../services/hub/port.js';
import { MatchCore } from '../../services/matcher/core.js';

const ctx = await GpuContext.open({ allowSoftware: true });
const kernels = await GpuKernels.compile(ctx);
after(() => ctx.close());

const ENGINES: [string, () => Matcher][] = [
  ['fast', () => CPU_ENGINES.fast({ limits: ENGINE_SIDE_LIMITS })],
  ['rtree', () => CPU_ENGINES.rtree({ limits: ENGINE_SIDE_LIMITS })],
  ['reference', () => CPU_ENGINES.reference({ limits: ENGINE_SIDE_LIMITS })],
  ['gpu', () => GpuMatcher.attach(kernels, { limits: ENGINE_SIDE_LIMITS })],
  ['gpu without its CPU mirror', () => GpuMatcher.attach(kernels, { cpuMirror: false, limits: ENGINE_SIDE_LIMITS })],
];

/** Subscriptions in the API's form: every shape convert.ts writes. */
const GIVEN: DeviceSubscription[] = [
  { id: 'anywhere', filters: [{ constraints: [{ name: 'kind', op: 'eq', value: 'food' }] }] },
  { id: 'anchored', filters: [{ constraints: [{ name: 'sev', op: 'gt', value: 2 }, { name: 'open', op: 'eq', value: true }], area: { radiusM: 500 } }] },
  { id: 'fixed', filters: [{ constraints: [], area: { radiusM: 250.5, center: { lat: 45.4642, lon: 9.19 } } }] },
  { id: 'tags', filters: [{ constraints: [{ name: 'n', op: 'exists' }], tags: ['alpha', 'zed'] }, { constraints: [{ name: 'a', op: 'exists' }, { name: 'b', op: 'exists' }] }] },
  { id: 'strings', filters: [{ constraints: [{ name: 'name', op: 'prefix', value: '東京' }, { name: 'x', op: 'like', value: 'caf_%' }, { name: 'y', op: 'regex', value: 'a(b|c)*' }, { name: 'z', op: 'ne', value: -0 }] }] },
  { id: 'many', filters: Array.from({ length: 5 }, (_, i) => ({ constraints: [{ name: `n${i}`, op: 'le' as const, value: i * 1.5 }], area: { radiusM: 10 + i } })) },
];

const clone = <T>(x: T): T => structuredClone(x);

describe('match core: listing from the engine', () => {
  for (const [name, make] of ENGINES) {
    it(`${name}: lists what was given, value for value, through replaces and removals, and keeps no copy`, async () => {
      const core = new MatchCore(make());
      try {
        const given = GIVEN.map(clone);
        for (const s of given) core.put('dev', s, 'add');
        core.move('dev', 45.46, 9.19);
        const byId = (l: DeviceSubscription[]) => [...l].sort((a, b) => (a.id < b.id ? -1 : 1));
        assert.deepStrictEqual(byId(core.list('dev')), byId(GIVEN));
        assert.ok(Object.is(core.subscription('dev', 'strings')!.filters[0].constraints![3].value, -0), '-0 listed as -0');
        // The core listed the engine's copy: the objects given may change after the call.
        (given[0].filters[0].constraints![0] as { value: unknown }).value = 'changed';
        given[1].filters.push({ constraints: [] });
        assert.deepStrictEqual(core.subscription('dev', 'anywhere'), GIVEN[0]);
        assert.deepStrictEqual(core.subscription('dev', 'anchored'), GIVEN[1]);
        const replaced: DeviceSubscription = { id: 'anchored', filters: [{ constraints: [{ name: 'sev', op: 'ge', value: 4 }], area: { radiusM: 90 } }] };
        core.put('dev', clone(replaced), 'replace');
        assert.deepStrictEqual(core.subscription('dev', 'anchored'), replaced);
        assert.equal(core.remove('dev', 'fixed'), true);
        assert.equal(core.subscription('dev', 'fixed'), undefined);
        const left = GIVEN.filter((s) => s.id !== 'fixed').map((s) => (s.id === 'anchored' ? replaced : s));
        assert.deepStrictEqual(byId(core.list('dev')), byId(left));
        const snapshot = [...core.byDevice()].map(([d, subs]) => [d, byId([...subs])]);
        assert.deepStrictEqual(snapshot, [['dev', byId(left)]]);
        assert.deepStrictEqual(core.list('nobody'), []);
        assert.equal(core.isPattern('dev', 'anywhere'), false);
        assert.equal(core.isPattern('dev', 'fixed'), false);
      } finally {
        await core.engine.close();
      }
    });
  }

  it("a device's list keeps the order subscriptions were first put, through replaces, removals and adds again, short and long (past the copied length)", async () => {
    // A device's ids are a short array copied at its exact length, and pushed to once long: the
    // order, the count, what it holds and the per-device limit read the same either way.
    const core = new MatchCore(CPU_ENGINES.fast({ limits: ENGINE_SIDE_LIMITS }), 30);
    try {
      const sub = (id: string, v: number): DeviceSubscription => ({ id, filters: [{ constraints: [{ name: 'v', op: 'eq', value: v }] }] });
      const want: string[] = [];
      const check = (label: string) => {
        assert.deepStrictEqual(core.list('dev').map((s) => s.id), want, label);
        assert.equal(core.count('dev'), want.length, label);
        for (const id of want) assert.equal(core.has('dev', id), true, `${label}: ${id}`);
      };
      for (let i = 0; i < 3; i++) {
        core.put('dev', sub(`s${i}`, i), 'add');
        want.push(`s${i}`);
      }
      check('short');
      core.put('dev', sub('s1', 100), 'replace');
      assert.deepStrictEqual(core.subscription('dev', 's1'), sub('s1', 100));
      check('a replaced one keeps its place');
      for (let i = 3; i < 30; i++) {
        core.put('dev', sub(`s${i}`, i), 'upsert');
        want.push(`s${i}`);
      }
      check('long');
      assert.throws(() => core.put('dev', sub('s30', 30), 'add'), /30 subscriptions, the most allowed/);
      for (const id of ['s0', 's17', 's29', 's5']) {
        assert.equal(core.remove('dev', id), true);
        assert.equal(core.has('dev', id), false);
        want.splice(want.indexOf(id), 1);
      }
      assert.equal(core.remove('dev', 's17'), false, 'removed already');
      check('removals from the front, the middle and the end');
      core.put('dev', sub('s17', 17), 'add');
      want.push('s17');
      check('one added again comes last');
      assert.equal(core.purge('dev').subscriptions, want.length);
      want.length = 0;
      check('purged');
      assert.equal(core.has('dev', 's1'), false);
      core.put('dev', sub('again', 1), 'add');
      want.push('again');
      check('a device holding subscriptions again');
      assert.deepStrictEqual(core.sortedSubscribedDevices(), ['dev']);
    } finally {
      await core.engine.close();
    }
  });
});
