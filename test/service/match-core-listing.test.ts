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
});
