/**
 * Lifecycle rules (docs/semantics.md §7 L, with the model's M3 and M7): construction and close,
 * add / replace / remove, has / get and normalisation, devices, their positions and handles, stats.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { DEFAULT_LIMITS } from '../../../src/model/limits.js';
import type { PositionUpdate } from '../../../src/model/types.js';
import { snapshot, sorted, throwsAt } from '../assertions.js';
import { anchored, c, type ContractContext, ev, fixed, ids, sub } from './common.js';

export function lifecycleRules({ make, open }: ContractContext): void {
  describe('lifecycle', () => {
    it('[L9] constructs with the default limits, reports its name, and closes', async () => {
      const m = make();
      assert.equal(typeof m.name, 'string');
      assert.ok(m.name.length > 0);
      assert.deepEqual({ ...m.limits }, { ...DEFAULT_LIMITS });
      const s = m.stats();
      assert.equal(s.engine, m.name);
      assert.deepEqual([s.subscriptions, s.filters, s.constraints, s.devices], [0, 0, 0, 0]);
      await m.close();
    });

    it('[L1][L6] add stores a subscription; has/get report its normalised form', () =>
      open(async (m) => {
        assert.equal(m.has('s1'), false);
        assert.equal(m.get('s1'), undefined);
        m.add(sub('s1', 'd1', { constraints: [c('a', 'eq', 1), c('b', 'exists'), c('s', 'prefix', 'x')], area: anchored(100) }, { constraints: [], area: fixed(5, 1, 2) }, { constraints: [c('t', 'ge', false)] }));
        assert.equal(m.has('s1'), true);
        const g = JSON.parse(JSON.stringify(m.get('s1')));
        assert.deepEqual(g, {
          id: 's1',
          owner: 'd1',
          filters: [
            {
              constraints: [
                { name: 'a', op: 'eq', type: 'number', value: 1 },
                { name: 'b', op: 'exists', type: null, value: null },
                { name: 's', op: 'prefix', type: 'string', value: 'x' },
              ],
              area: { radiusM: 100, center: null },
              tags: [],
            },
            { constraints: [], area: { radiusM: 5, center: { lat: 1, lon: 2 } }, tags: [] },
            { constraints: [{ name: 't', op: 'ge', type: 'bool', value: false }], area: null, tags: [] },
          ],
        });
      }));

    it('[L1] add of an existing id is ALREADY_EXISTS and keeps the stored version', () =>
      open(async (m) => {
        m.add(sub('s1', 'd1', { constraints: [c('a', 'eq', 1)] }));
        const before = await snapshot(m, ['s1'], [ev({ a: 1 }), ev({ a: 2 })]);
        throwsAt(() => m.add(sub('s1', 'd2', { constraints: [c('a', 'eq', 2)] })), 'subscription.id', 'ALREADY_EXISTS');
        assert.deepEqual(await snapshot(m, ['s1'], [ev({ a: 1 }), ev({ a: 2 })]), before);
      }));

    it('[L11] addMany adds as add would one by one: the same matches, removable and replaceable after', () =>
      open(async (m) => {
        const subs = [
          sub('b1', 'd1', { constraints: [c('a', 'eq', 1)], area: anchored(1000) }),
          sub('b2', 'd2', { constraints: [c('a', 'eq', 1)], area: fixed(2000, 10, 10) }, { constraints: [c('z', 'exists')] }),
          sub('b3', 'd3', { constraints: [c('a', 'ge', 0)] }),
          sub('b4', 'd1', { constraints: [c('s', 'prefix', 'pi')], area: anchored(5000) }),
        ];
        const probes = [ev({ a: 1 }, 10, 10), ev({ a: 1 }, 10.005, 10), ev({ a: 2 }, -5, 3), ev({ s: 'pizza' }, 10.02, 10), ev({ z: true }, 80, 80)];
        m.updatePosition('d1', 10, 10);
        const one = make();
        one.updatePosition('d1', 10, 10);
        for (const x of subs) one.add(x);
        m.addMany(subs);
        m.addMany([]);
        const all = subs.map((x) => x.id);
        assert.deepEqual(await snapshot(m, all, probes), await snapshot(one, all, probes));
        // A device that arrives after the load: its anchored filters follow it.
        m.updatePosition('d3', 0, 0);
        one.updatePosition('d3', 0, 0);
        m.updatePosition('d1', -10, -10);
        one.updatePosition('d1', -10, -10);
        assert.deepEqual(await snapshot(m, all, probes), await snapshot(one, all, probes));
        assert.equal(m.remove('b2'), true);
        m.replace(sub('b1', 'd2', { constraints: [c('a', 'eq', 2)] }));
        assert.deepEqual(sorted(await ids(m, ev({ a: 2 }, -5, 3))), ['b1', 'b3']);
        assert.deepEqual([m.stats().subscriptions, m.has('b2')], [3, false]);
        await one.close();
      }));

    it('[L11][L4] addMany adds nothing when one is bad, taken or repeated, naming the first such', () =>
      open(async (m) => {
        m.add(sub('old', 'd1', { constraints: [c('a', 'eq', 1)] }));
        const probes = [ev({ a: 1 }), ev({ a: 2 })];
        const before = await snapshot(m, ['old', 'n1', 'n2', 'n3'], probes);
        const ok = (id: string) => sub(id, 'd1', { constraints: [c('a', 'eq', 2)] });
        throwsAt(() => m.addMany([ok('n1'), ok('n2'), sub('n3', '', { constraints: [c('a', 'eq', 2)] })]), 'subscriptions[2].owner');
        throwsAt(() => m.addMany([ok('n1'), ok('old')]), 'subscriptions[1].id', 'ALREADY_EXISTS');
        throwsAt(() => m.addMany([ok('n1'), ok('n2'), ok('n1')]), 'subscriptions[2].id', 'ALREADY_EXISTS');
        throwsAt(() => m.addMany('nope' as unknown as []), 'subscriptions');
        // Lists far over the limits are refused by name, and room is made for no more than valid
        // lists could use (an engine that sizes its arrays from the input first).
        const memory = m.stats().memoryBytes;
        throwsAt(() => m.addMany([ok('n1'), { id: 'big', owner: 'd1', filters: new Array(2 ** 26) } as never]), 'subscriptions[1].filters');
        throwsAt(() => m.addMany([ok('n1'), sub('big', 'd1', { constraints: new Array(2 ** 26) })]), 'subscriptions[1].filters[0].constraints');
        throwsAt(() => m.addMany([ok('n1'), sub('big', 'd1', { constraints: [], tags: new Array(2 ** 26) })]), 'subscriptions[1].filters[0].tags');
        // The same large subscription many times: refused at its second copy, with room made for one.
        const big = sub('big', 'd1', ...Array.from({ length: 64 }, () => ({ constraints: Array.from({ length: 32 }, (_, k) => c(`k${k}`, 'eq', k)) })));
        throwsAt(() => m.addMany(new Array(100_000).fill(big)), 'subscriptions[1].id', 'ALREADY_EXISTS');
        assert.ok(m.stats().memoryBytes - memory < 2 ** 22, `memory grew from ${memory} to ${m.stats().memoryBytes} bytes`);
        // A subscription that reads differently each time (a getter): whichever reading an engine
        // takes, it adds all or nothing (an engine that inserts as it checks takes back what it
        // inserted when a later one is refused).
        let reads = 0;
        const shifty = { id: 'n3', filters: [{ constraints: [c('a', 'eq', 2)] }] } as unknown as Record<string, unknown>;
        Object.defineProperty(shifty, 'owner', { enumerable: true, get: () => (reads++ === 0 ? 'd1' : '') });
        try {
          m.addMany([ok('n1'), ok('n2'), shifty as never]);
          assert.ok(m.has('n1') && m.has('n2') && m.has('n3'), 'taken whole');
          for (const id of ['n1', 'n2', 'n3']) m.remove(id);
        } catch (err) {
          assert.ok(err instanceof Error && /owner/.test(err.message), String(err));
        }
        assert.deepEqual(await snapshot(m, ['old', 'n1', 'n2', 'n3'], probes), before);
      }));

    it('[L2] replace swaps owner and filters as one step; only the new version matches', () =>
      open(async (m) => {
        m.updatePosition('d1', 10, 10);
        m.updatePosition('d2', -10, -10);
        m.add(sub('s1', 'd1', { constraints: [c('a', 'eq', 1)], area: anchored(1000) }));
        assert.deepEqual(await ids(m, ev({ a: 1 }, 10, 10)), ['s1']);
        m.replace(sub('s1', 'd2', { constraints: [c('a', 'eq', 2)], area: anchored(1000) }, { constraints: [c('z', 'exists')] }));
        assert.deepEqual(await ids(m, ev({ a: 1 }, 10, 10)), [], 'old owner, old content');
        assert.deepEqual(await ids(m, ev({ a: 2 }, 10, 10)), [], 'old owner, new content');
        assert.deepEqual(await ids(m, ev({ a: 1 }, -10, -10)), [], 'new owner, old content');
        assert.deepEqual(await ids(m, ev({ a: 2 }, -10, -10)), ['s1']);
        assert.deepEqual(await ids(m, ev({ z: 'anything' }, 50, 50)), ['s1'], 'new second filter');
        m.updatePosition('d1', -10, -10);
        m.updatePosition('d2', 10, 10);
        assert.deepEqual(await ids(m, ev({ a: 2 }, 10, 10)), ['s1'], 'follows the new owner');
        assert.deepEqual(await ids(m, ev({ a: 2 }, -10, -10)), [], 'not the old owner');
        const s = m.stats();
        assert.deepEqual([s.subscriptions, s.filters, s.constraints], [1, 2, 2]);
        assert.equal(m.get('s1')?.owner, 'd2');
      }));

    it('[L2] replace of a missing id is NOT_FOUND and adds nothing', () =>
      open(async (m) => {
        m.add(sub('other', 'd1', { constraints: [] }));
        const before = await snapshot(m, ['s1', 'other'], [ev({})]);
        throwsAt(() => m.replace(sub('s1', 'd1', { constraints: [] })), 'subscription.id', 'NOT_FOUND');
        assert.deepEqual(await snapshot(m, ['s1', 'other'], [ev({})]), before);
        m.remove('other');
        throwsAt(() => m.replace(sub('other', 'd1', { constraints: [] })), 'subscription.id', 'NOT_FOUND', 'after removal');
      }));

    it('[L3] remove returns true once, then false; the id is never returned again', () =>
      open(async (m) => {
        m.updatePosition('d1', 0, 0);
        m.add(sub('s1', 'd1', { constraints: [], area: anchored(10) }, { constraints: [c('a', 'exists')] }));
        m.add(sub('s2', 'd1', { constraints: [] }));
        assert.deepEqual(await ids(m, ev({ a: 1 })), ['s1', 's2']);
        assert.equal(m.remove('s1'), true);
        assert.equal(m.remove('s1'), false);
        assert.equal(m.remove('never'), false);
        assert.equal(m.has('s1'), false);
        assert.equal(m.get('s1'), undefined);
        assert.deepEqual(await ids(m, ev({ a: 1 })), ['s2']);
        m.updatePosition('d1', 0, 0.00001);
        assert.deepEqual(await ids(m, ev({ a: 1 })), ['s2'], 'a move must not resurrect removed filters');
        assert.deepEqual((await m.matchBatch([ev({ a: 1 }), ev({ a: 1 }, 45, 45)])).map(sorted), [['s2'], ['s2']]);
      }));

    it('[L3] a removed subscription leaves no trace: counts return, the id is reusable as a new subscription', () =>
      open(async (m) => {
        m.updatePosition('d1', 45, 9);
        m.add(sub('keep', 'd1', { constraints: [c('k', 'eq', true)], area: anchored(50) }));
        const probes = [ev({ a: 1 }, 45, 9), ev({ b: 'x' }, 45, 9), ev({ k: true }, 45, 9), ev({ a: 1, b: 'x' }, -45, -9)];
        const before = await snapshot(m, ['keep', 'x'], probes);
        m.add(sub('x', 'd1', { constraints: [c('a', 'eq', 1)], area: anchored(50) }, { constraints: [c('a', 'ge', 0), c('a', 'le', 2)], area: fixed(100, 45, 9) }));
        assert.deepEqual(await ids(m, probes[0]), ['x']);
        assert.equal(m.remove('x'), true);
        assert.deepEqual(await snapshot(m, ['keep', 'x'], probes), before, 'state after remove equals state before add');
        // Re-add the same id as an unrelated subscription: nothing of the old one survives.
        m.add(sub('x', 'd9', { constraints: [c('b', 'eq', 'x')] }));
        assert.deepEqual(await ids(m, probes[0]), [], 'old filters are gone');
        assert.deepEqual(await ids(m, probes[1]), ['x']);
        assert.deepEqual(await ids(m, probes[3]), ['x'], 'content-only now');
        m.remove('x');
        assert.deepEqual(await snapshot(m, ['keep', 'x'], probes), before);
      }));

    it('[L3] churn: the same id added and removed 300 times, interleaved with others', () =>
      open(async (m) => {
        m.updatePosition('d', 0, 0);
        for (let i = 0; i < 300; i++) {
          m.add(sub('churn', 'd', { constraints: [c('i', 'eq', i)], area: anchored(10 + i) }));
          m.add(sub(`o${i}`, 'd', { constraints: [c('i', 'eq', -1)] }));
          if (i % 50 === 0) assert.deepEqual(await ids(m, ev({ i })), ['churn']);
          assert.equal(m.remove('churn'), true);
          if (i % 50 === 0) assert.deepEqual(await ids(m, ev({ i })), []);
        }
        const s = m.stats();
        assert.deepEqual([s.subscriptions, s.filters, s.constraints, s.devices], [300, 300, 300, 1]);
        for (let i = 0; i < 300; i++) m.remove(`o${i}`);
        const e = m.stats();
        assert.deepEqual([e.subscriptions, e.filters, e.constraints, e.devices], [0, 0, 0, 1]);
        assert.deepEqual(await ids(m, ev({ i: -1 })), []);
      }));

    it('[L5] later changes to the caller\'s objects have no effect', () =>
      open(async (m) => {
        const s = sub('s1', 'd1', { constraints: [c('a', 'eq', 1), c('s', 'prefix', 'ab')], area: fixed(100, 10, 10) });
        m.add(s);
        s.owner = 'd2';
        s.filters[0].constraints[0].value = 2;
        s.filters[0].constraints.push(c('never', 'exists'));
        s.filters[0].area!.radiusM = 1;
        s.filters[0].area!.center!.lat = -10;
        s.filters.push({ constraints: [] });
        const r = sub('s2', 'd1', { constraints: [c('a', 'eq', 1)] });
        m.add(r);
        m.replace(r);
        r.filters[0].constraints[0].op = 'ne';
        const updates: PositionUpdate[] = [{ device: 'd1', lat: 5, lon: 5 }];
        m.updatePositions(updates);
        updates[0].lat = -5;
        const e = ev({ a: 1, s: 'abc' }, 10, 10);
        assert.deepEqual(await ids(m, e), ['s1', 's2']);
        e.attributes.a = 2;
        assert.deepEqual(await ids(m, ev({ a: 1, s: 'abc' }, 10, 10.0005)), ['s1', 's2']);
        assert.deepEqual(await ids(m, ev({ a: 2, s: 'abc' }, 10, 10)), []);
        assert.equal(m.get('s1')?.owner, 'd1');
        assert.equal(m.get('s1')?.filters.length, 1);
      }));

    it('[L7] stats counts subscriptions, filters, constraints and known devices', () =>
      open(async (m) => {
        m.add(sub('a', 'd1', { constraints: [c('x', 'eq', 1), c('y', 'eq', 2)] }, { constraints: [] }, { constraints: [c('x', 'exists'), c('x', 'ne', 3), c('z', 'contains', ''), c('w', 'lt', true), c('v', 'gt', -0)], area: anchored(5) }));
        m.add(sub('b', 'd2', { constraints: [c('q', 'suffix', 'é')], area: fixed(1, 0, 0) }));
        let s = m.stats();
        assert.equal(s.engine, m.name);
        assert.deepEqual([s.subscriptions, s.filters, s.constraints, s.devices], [2, 4, 8, 0]);
        assert.ok(Number.isFinite(s.memoryBytes) && s.memoryBytes >= 0);
        m.updatePosition('d1', 1, 1);
        m.updatePosition('d3', 1, 1);
        m.updatePosition('d1', 2, 2);
        s = m.stats();
        assert.equal(s.devices, 2, 'devices with a known position, each once');
        m.replace(sub('a', 'd1', { constraints: [c('x', 'eq', 1)] }));
        s = m.stats();
        assert.deepEqual([s.subscriptions, s.filters, s.constraints, s.devices], [2, 2, 2, 2]);
        m.removeDevice('d3');
        m.remove('b');
        s = m.stats();
        assert.deepEqual([s.subscriptions, s.filters, s.constraints, s.devices], [1, 1, 1, 1]);
      }));

    it('[L8][A6] removeDevice forgets the position but keeps the subscriptions', () =>
      open(async (m) => {
        m.updatePosition('d1', 30, 30);
        m.add(sub('s1', 'd1', { constraints: [], area: anchored(100) }));
        m.add(sub('s2', 'd1', { constraints: [], area: fixed(100, 30, 30) }, { constraints: [c('never', 'exists')], area: anchored(100) }));
        assert.deepEqual(await ids(m, ev({}, 30, 30)), ['s1', 's2']);
        assert.equal(m.removeDevice('d1'), true);
        assert.equal(m.removeDevice('d1'), false);
        assert.equal(m.removeDevice('unknown'), false);
        assert.equal(m.has('s1'), true);
        assert.equal(m.stats().devices, 0);
        assert.deepEqual(await ids(m, ev({}, 30, 30)), ['s2'], 'anchored filters match nothing; fixed ones still do');
        m.updatePosition('d1', 30, 30.0001);
        assert.deepEqual(await ids(m, ev({}, 30, 30)), ['s1', 's2']);
      }));

    it('[M7] a position may be set before its device owns subscriptions and outlives them', () =>
      open(async (m) => {
        m.updatePosition('early', -33.8688, 151.2093);
        assert.equal(m.stats().devices, 1);
        m.add(sub('s1', 'early', { constraints: [], area: anchored(1000) }));
        assert.deepEqual(await ids(m, ev({}, -33.8688, 151.2093)), ['s1']);
        m.remove('s1');
        assert.equal(m.stats().devices, 1);
        m.add(sub('s2', 'early', { constraints: [], area: anchored(1000) }));
        assert.deepEqual(await ids(m, ev({}, -33.8688, 151.2093)), ['s2'], 'the kept position anchors the new subscription');
      }));

    it('[L10][A7][M7] a device handle updates like updatePosition; opening one sets no position', () =>
      open(async (m) => {
        m.add(sub('s', 'h', { constraints: [], area: anchored(100) }));
        const h = m.openDevice('h');
        assert.equal(h.device, 'h');
        assert.equal(m.stats().devices, 0, 'an open handle is not a known position');
        assert.deepEqual(await ids(m, ev({}, 0, 0)), []);
        h.update(10, 10);
        assert.equal(m.stats().devices, 1);
        assert.deepEqual(await ids(m, ev({}, 10, 10)), ['s']);
        h.update(-10, -10);
        h.update(20, 20);
        assert.deepEqual(await ids(m, ev({}, 20, 20)), ['s'], 'the last update wins');
        assert.deepEqual(await ids(m, ev({}, -10, -10)), []);
        m.updatePosition('h', 30, 30);
        assert.deepEqual(await ids(m, ev({}, 30, 30)), ['s'], 'updatePosition and the handle write one position');
        h.update(40, 40);
        assert.deepEqual(await ids(m, ev({}, 40, 40)), ['s']);
        // removeDevice while the handle is open: unknown until the next update.
        assert.equal(m.removeDevice('h'), true);
        assert.deepEqual(await ids(m, ev({}, 40, 40)), []);
        h.update(50, 50);
        assert.deepEqual(await ids(m, ev({}, 50, 50)), ['s']);
        // A second handle for the same device; the subscription removed and re-added meanwhile.
        const h2 = m.openDevice('h');
        m.remove('s');
        h2.update(60, 60);
        m.add(sub('s', 'h', { constraints: [], area: anchored(100) }));
        assert.deepEqual(await ids(m, ev({}, 60, 60)), ['s'], 'the position outlives the subscription');
        h.release();
        h.release();
        h2.update(70, 70);
        assert.deepEqual(await ids(m, ev({}, 70, 70)), ['s'], 'releasing one handle leaves the other working');
        h2.release();
        assert.deepEqual(await ids(m, ev({}, 70, 70)), ['s'], 'releasing keeps the position');
        assert.equal(m.stats().devices, 1);
      }));

    it('[L10][V1][V4][V5][V7] device handles validate their input and refuse use after release', () =>
      open(async (m) => {
        throwsAt(() => m.openDevice(''), 'device');
        throwsAt(() => m.openDevice('x'.repeat(129)), 'device');
        throwsAt(() => m.openDevice('\uD800'), 'device');
        throwsAt(() => m.openDevice(7 as unknown as string), 'device');
        m.add(sub('s', 'd', { constraints: [], area: anchored(100) }));
        const h = m.openDevice('d');
        h.update(1, 1);
        const before = await snapshot(m, ['s'], [ev({}, 1, 1)]);
        throwsAt(() => h.update(91, 0), 'lat');
        throwsAt(() => h.update(NaN, 0), 'lat');
        throwsAt(() => h.update('1' as unknown as number, 0), 'lat');
        throwsAt(() => h.update(0, 180.5), 'lon');
        throwsAt(() => h.update(0, -Infinity), 'lon');
        assert.deepEqual(await snapshot(m, ['s'], [ev({}, 1, 1)]), before, 'a rejected update changes nothing');
        h.release();
        throwsAt(() => h.update(2, 2), 'device', 'NOT_FOUND');
        assert.deepEqual(await snapshot(m, ['s'], [ev({}, 1, 1)]), before);
        // A handle of a device that never had a subscription or a position, released unused.
        m.openDevice('ghost').release();
        assert.equal(m.stats().devices, 1);
      }));

    it('[M3][V6] ids are exact byte strings: multi-byte ids are returned unchanged and are distinct from look-alikes', () =>
      open(async (m) => {
        const idsIn = ['東京-1', '😀', 'é', 'e\u0301', 'A', 'a', ' a', 'constructor', '__proto__', 'toString', '0'];
        for (const id of idsIn) m.add(sub(id, id, { constraints: [] }));
        assert.deepEqual(await ids(m, ev({})), sorted(idsIn));
        m.remove('é');
        assert.equal(m.has('e\u0301'), true);
        assert.deepEqual(await ids(m, ev({})), sorted(idsIn.filter((x) => x !== 'é')));
      }));
  });
}
