/**
 * Validation and limits (docs/semantics.md §8 V, and L4): every limit at and one past its
 * bound, malformed input with its field path, all-or-nothing mutations.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { MatcherOptions } from '../../../src/engines/matcher.js';
import type { Constraint, Event, Filter, PositionUpdate, Subscription, Value } from '../../../src/model/types.js';
import { rejectsAt, snapshot, sorted, throwsAt } from '../assertions.js';
import { nextUp } from '../sphere.js';
import { anchored, c, type ContractContext, ev, fixed, ids, sub } from './common.js';

export function validationRules({ make, open }: ContractContext): void {
  describe('validation', () => {
    const good = (): Subscription =>
      sub('v', 'dev', { constraints: [c('a', 'eq', 1)], area: anchored(100) }, { constraints: [c('b', 'prefix', 'x'), c('n', 'exists')], area: fixed(5, 1, 2) });
    const F = 'subscription.filters[1]';
    type Patch = (s: any) => unknown;
    const set = (path: string, value: unknown): Patch => (s) => {
      const keys = path.split('.');
      let o = s;
      for (const k of keys.slice(0, -1)) o = o[k];
      o[keys[keys.length - 1]] = value;
    };
    const con = (j: number, k: string, v: unknown): Patch => (s) => {
      s.filters[1].constraints[j][k] = v;
    };
    const del = (path: string): Patch => (s) => {
      const keys = path.split('.');
      let o = s;
      for (const k of keys.slice(0, -1)) o = o[k];
      delete o[keys[keys.length - 1]];
    };
    const replaceAll = (v: unknown) => (): unknown => v;
    const lone = 'ab\uD800cd';
    const trail = 'x\uDC00';
    const e3 = '東'.repeat(21) + 'é'; // 65 bytes in 22 characters
    class NotPlain {
      id = 'v';
    }

    const badSubs: Array<[string, Patch, string]> = [
      ['null', replaceAll(null), 'subscription'],
      ['a number', replaceAll(5), 'subscription'],
      ['a string', replaceAll('v'), 'subscription'],
      ['an array', replaceAll([good()]), 'subscription'],
      ['a class instance', replaceAll(new NotPlain()), 'subscription'],
      ['empty id', set('id', ''), 'subscription.id'],
      ['numeric id', set('id', 5), 'subscription.id'],
      ['id of 129 bytes', set('id', 'x'.repeat(129)), 'subscription.id'],
      ['id of 33 emoji (132 bytes)', set('id', '😀'.repeat(33)), 'subscription.id'],
      ['id with a lone surrogate', set('id', lone), 'subscription.id'],
      ['id of a million chars', set('id', 'x'.repeat(1_000_000)), 'subscription.id'],
      ['missing owner', del('owner'), 'subscription.owner'],
      ['empty owner', set('owner', ''), 'subscription.owner'],
      ['owner with a lone trailing surrogate', set('owner', trail), 'subscription.owner'],
      ['missing filters', del('filters'), 'subscription.filters'],
      ['no filters', set('filters', []), 'subscription.filters'],
      ['filters not an array', set('filters', { 0: {} }), 'subscription.filters'],
      ['65 filters', set('filters', Array.from({ length: 65 }, () => ({ constraints: [] }))), 'subscription.filters'],
      ['100 000 filters', set('filters', Array.from({ length: 100_000 }, () => ({ constraints: [] }))), 'subscription.filters'],
      ['filter is an array', set('filters.1', []), F],
      ['filter is null', set('filters.1', null), F],
      ['filter is a string', set('filters.1', 'x'), F],
      ['constraints not an array', set('filters.1.constraints', 'x'), `${F}.constraints`],
      ['constraints is an object', set('filters.1.constraints', { name: 'a', op: 'exists' }), `${F}.constraints`],
      ['33 constraints', set('filters.1.constraints', Array.from({ length: 33 }, (_, i) => c(`n${i}`, 'exists'))), `${F}.constraints`],
      ['5000 constraints', set('filters.1.constraints', Array.from({ length: 5000 }, () => c('a', 'eq', 1))), `${F}.constraints`],
      ['constraint is null', (s) => { s.filters[1].constraints[1] = null; }, `${F}.constraints[1]`],
      ['constraint is an array', (s) => { s.filters[1].constraints[0] = ['a', 'eq', 1]; }, `${F}.constraints[0]`],
      ['missing name', con(0, 'name', undefined), `${F}.constraints[0].name`],
      ['empty name', con(0, 'name', ''), `${F}.constraints[0].name`],
      ['numeric name', con(0, 'name', 1), `${F}.constraints[0].name`],
      ['name of 65 bytes', con(0, 'name', 'x'.repeat(65)), `${F}.constraints[0].name`],
      ['name of 65 bytes in 3-byte chars', con(0, 'name', e3), `${F}.constraints[0].name`],
      ['name of 22 three-byte chars (66 bytes)', con(1, 'name', '東'.repeat(22)), `${F}.constraints[1].name`],
      ['name with a lone surrogate', con(1, 'name', lone), `${F}.constraints[1].name`],
      ['name of a million chars', con(1, 'name', 'x'.repeat(1_000_000)), `${F}.constraints[1].name`],
      ['unknown op', con(0, 'op', 'glob'), `${F}.constraints[0].op`],
      ['op in upper case', con(0, 'op', 'PREFIX'), `${F}.constraints[0].op`],
      ['op inherited from Object.prototype', con(0, 'op', 'toString'), `${F}.constraints[0].op`],
      ['missing op', con(0, 'op', undefined), `${F}.constraints[0].op`],
      ['op not a string', con(0, 'op', 1), `${F}.constraints[0].op`],
      ['value missing', con(0, 'value', undefined), `${F}.constraints[0].value`],
      ['value null', con(0, 'value', null), `${F}.constraints[0].value`],
      ['exists with a value', con(1, 'value', 5), `${F}.constraints[1].value`],
      ['exists with value false', con(1, 'value', false), `${F}.constraints[1].value`],
      ['exists with value ""', con(1, 'value', ''), `${F}.constraints[1].value`],
      ['prefix with a number', con(0, 'value', 5), `${F}.constraints[0].value`],
      ['prefix with a bool', con(0, 'value', true), `${F}.constraints[0].value`],
      ['suffix with a number', (s) => { s.filters[1].constraints[0] = c('b', 'suffix', 1); }, `${F}.constraints[0].value`],
      ['contains with a bool', (s) => { s.filters[1].constraints[0] = c('b', 'contains', false); }, `${F}.constraints[0].value`],
      ['lt with a string', (s) => { s.filters[1].constraints[0] = c('b', 'lt', 'x'); }, `${F}.constraints[0].value`],
      ['ge with a string', (s) => { s.filters[1].constraints[0] = c('b', 'ge', ''); }, `${F}.constraints[0].value`],
      ['value NaN', (s) => { s.filters[1].constraints[0] = c('b', 'eq', NaN); }, `${F}.constraints[0].value`],
      ['value Infinity', (s) => { s.filters[1].constraints[0] = c('b', 'lt', Infinity); }, `${F}.constraints[0].value`],
      ['value -Infinity', (s) => { s.filters[1].constraints[0] = c('b', 'gt', -Infinity); }, `${F}.constraints[0].value`],
      ['value an object', con(0, 'value', { x: 1 }), `${F}.constraints[0].value`],
      ['value an array', con(0, 'value', ['x']), `${F}.constraints[0].value`],
      ['value a bigint', con(0, 'value', 5n), `${F}.constraints[0].value`],
      ['value of 1025 bytes', con(0, 'value', 'x'.repeat(1025)), `${F}.constraints[0].value`],
      ['value of 342 three-byte chars (1026 bytes)', con(0, 'value', '東'.repeat(342)), `${F}.constraints[0].value`],
      ['value of ten million chars', con(0, 'value', 'x'.repeat(10_000_000)), `${F}.constraints[0].value`],
      ['value with a lone surrogate', con(0, 'value', lone), `${F}.constraints[0].value`],
      ['value cut inside an emoji', con(0, 'value', '😀'.slice(0, 1)), `${F}.constraints[0].value`],
      ['area is an array', set('filters.1.area', [5]), `${F}.area`],
      ['area is a number', set('filters.1.area', 5), `${F}.area`],
      ['radius missing', del('filters.1.area.radiusM'), `${F}.area.radiusM`],
      ['radius 0', set('filters.1.area.radiusM', 0), `${F}.area.radiusM`],
      ['radius -0', set('filters.1.area.radiusM', -0), `${F}.area.radiusM`],
      ['radius negative', set('filters.1.area.radiusM', -1), `${F}.area.radiusM`],
      ['radius 1e6 + 1', set('filters.1.area.radiusM', 1e6 + 1), `${F}.area.radiusM`],
      ['radius just above 1e6', set('filters.1.area.radiusM', nextUp(1e6)), `${F}.area.radiusM`],
      ['radius NaN', set('filters.1.area.radiusM', NaN), `${F}.area.radiusM`],
      ['radius Infinity', set('filters.1.area.radiusM', Infinity), `${F}.area.radiusM`],
      ['radius a string', set('filters.1.area.radiusM', '5'), `${F}.area.radiusM`],
      ['centre is an array', set('filters.1.area.center', [1, 2]), `${F}.area.center`],
      ['centre is a string', set('filters.1.area.center', '1,2'), `${F}.area.center`],
      ['centre lat 91', set('filters.1.area.center.lat', 91), `${F}.area.center.lat`],
      ['centre lat -90.0001', set('filters.1.area.center.lat', -90.0001), `${F}.area.center.lat`],
      ['centre lat NaN', set('filters.1.area.center.lat', NaN), `${F}.area.center.lat`],
      ['centre lat missing', del('filters.1.area.center.lat'), `${F}.area.center.lat`],
      ['centre lon -180.0001', set('filters.1.area.center.lon', -180.0001), `${F}.area.center.lon`],
      ['centre lon 180.0001', set('filters.1.area.center.lon', 180.0001), `${F}.area.center.lon`],
      ['centre lon -Infinity', set('filters.1.area.center.lon', -Infinity), `${F}.area.center.lon`],
      ['centre lon a string', set('filters.1.area.center.lon', '2'), `${F}.area.center.lon`],
    ];

    it('[L4][C6][V1][V2][V3][V4][V5][V6][V7][V8][V9][V10] a bad subscription is rejected whole, naming the field, and nothing changes', () =>
      open(async (m) => {
        m.updatePosition('dev', 1, 2);
        m.add(sub('other', 'dev', { constraints: [c('a', 'eq', 1)] }));
        const probes = [ev({ a: 1, b: 'xy', n: 0 }, 1, 2)];
        const before = await snapshot(m, ['v', 'other'], probes);
        for (const [label, patch, field] of badSubs) {
          const s = good() as unknown as Record<string, unknown>;
          const out = patch(s);
          const input = (out === undefined ? s : out) as Subscription;
          throwsAt(() => m.add(input), field, 'INVALID_ARGUMENT', `add: ${label}`);
          assert.deepEqual(await snapshot(m, ['v', 'other'], probes), before, `add: ${label} changed state`);
        }
      }));

    it('[L2][L4] a bad replace keeps the previous version', () =>
      open(async (m) => {
        m.updatePosition('dev', 1, 2);
        m.add(good());
        const probes = [ev({ a: 1 }, 1, 2), ev({ b: 'xy', n: false }, 1, 2)];
        const before = await snapshot(m, ['v'], probes);
        assert.deepEqual(before.matches, [['v'], ['v']]);
        for (const [label, patch, field] of badSubs) {
          if (field === 'subscription' || field === 'subscription.id') continue; // names no stored id
          const s = good() as unknown as Record<string, unknown>;
          patch(s);
          throwsAt(() => m.replace(s as unknown as Subscription), field, 'INVALID_ARGUMENT', `replace: ${label}`);
          assert.deepEqual(await snapshot(m, ['v'], probes), before, `replace: ${label} changed state`);
        }
      }));

    it('[V3][V6][V7][V8] values exactly at each limit are accepted', () =>
      open(async (m) => {
        const name64 = '東'.repeat(21) + 'a';
        const value1024 = '東'.repeat(341) + 'a';
        const id128 = '😀'.repeat(32);
        assert.equal(Buffer.byteLength(name64), 64);
        assert.equal(Buffer.byteLength(value1024), 1024);
        assert.equal(Buffer.byteLength(id128), 128);
        m.add(sub(id128, id128, { constraints: Array.from({ length: 32 }, (_, i) => (i === 0 ? c(name64, 'eq', value1024) : c(name64, 'exists'))), area: fixed(1e6, 90, 180) }));
        m.add(sub('x'.repeat(128), 'o', ...Array.from({ length: 64 }, (_, i): Filter => ({ constraints: [], area: fixed(i === 0 ? Number.MIN_VALUE : 10 * i, -90, -180) }))));
        m.add(sub('ranges', 'o', { constraints: [c('n', 'ge', -Number.MAX_VALUE), c('n', 'le', Number.MAX_VALUE), c('s', 'eq', '')] }));
        m.add(sub('lat', 'o', { constraints: [], area: fixed(10, -90, 180) }, { constraints: [], area: fixed(10, 90, -180) }));
        m.updatePosition(id128, -90, -180);
        m.updatePosition('x'.repeat(128), 90, 180);
        const attrs: Record<string, Value> = {};
        for (let i = 0; i < 63; i++) attrs[`a${i}`] = i;
        attrs[name64] = value1024;
        assert.equal(Object.keys(attrs).length, 64);
        assert.deepEqual(await ids(m, ev(attrs, 89.999, 0, 1e6)), sorted([id128, 'lat']), 'at the limits');
        assert.deepEqual(await ids(m, { id: 'x'.repeat(128), lat: -90, lon: -180, radiusM: 0, attributes: { n: 0, s: '' } }), sorted(['x'.repeat(128), 'lat', 'ranges']));
        assert.deepEqual(await ids(m, ev({ n: Number.MAX_VALUE, s: '' }, 10, 10)), ['ranges']);
      }));

    const goodEvent = (): Event => ({ id: 'ev', lat: 1, lon: 2, radiusM: 10, attributes: { a: 1, s: 'x', b: true } });
    const badEvents: Array<[string, Patch, string]> = [
      ['null', () => null, ''],
      ['an array', () => [goodEvent()], ''],
      ['a string', () => 'ev', ''],
      ['missing id', (e) => { delete e.id; }, '.id'],
      ['empty id', (e) => { e.id = ''; }, '.id'],
      ['id of 129 bytes', (e) => { e.id = 'é'.repeat(64) + 'x'; }, '.id'],
      ['id with a lone surrogate', (e) => { e.id = lone; }, '.id'],
      ['lat 91', (e) => { e.lat = 91; }, '.lat'],
      ['lat -90.0001', (e) => { e.lat = -90.0001; }, '.lat'],
      ['lat NaN', (e) => { e.lat = NaN; }, '.lat'],
      ['lat Infinity', (e) => { e.lat = Infinity; }, '.lat'],
      ['lat a string', (e) => { e.lat = '1'; }, '.lat'],
      ['lat missing', (e) => { delete e.lat; }, '.lat'],
      ['lon -180.0001', (e) => { e.lon = -180.0001; }, '.lon'],
      ['lon 180.0001', (e) => { e.lon = 180.0001; }, '.lon'],
      ['lon -Infinity', (e) => { e.lon = -Infinity; }, '.lon'],
      ['lon null', (e) => { e.lon = null; }, '.lon'],
      ['radius negative', (e) => { e.radiusM = -1; }, '.radiusM'],
      ['radius 1e6 + 1', (e) => { e.radiusM = 1e6 + 1; }, '.radiusM'],
      ['radius NaN', (e) => { e.radiusM = NaN; }, '.radiusM'],
      ['radius Infinity', (e) => { e.radiusM = Infinity; }, '.radiusM'],
      ['radius a string', (e) => { e.radiusM = '1'; }, '.radiusM'],
      ['attributes missing', (e) => { delete e.attributes; }, '.attributes'],
      ['attributes null', (e) => { e.attributes = null; }, '.attributes'],
      ['attributes an array', (e) => { e.attributes = [1, 2]; }, '.attributes'],
      ['attributes a Map', (e) => { e.attributes = new Map([['a', 1]]); }, '.attributes'],
      ['65 attributes', (e) => { e.attributes = Object.fromEntries(Array.from({ length: 65 }, (_, i) => [`k${i}`, i])); }, '.attributes'],
      ['5000 attributes', (e) => { e.attributes = Object.fromEntries(Array.from({ length: 5000 }, (_, i) => [`k${i}`, i])); }, '.attributes'],
      ['empty attribute name', (e) => { e.attributes = { '': 1 }; }, '.attributes[""]'],
      ['attribute name of 65 bytes', (e) => { e.attributes = { a: 1, [e3]: 1 }; }, `.attributes[${JSON.stringify(e3)}]`],
      ['attribute name with a lone surrogate', (e) => { e.attributes = { [trail]: 1 }; }, `.attributes[${JSON.stringify(trail)}]`],
      ['attribute value NaN', (e) => { e.attributes.a = NaN; }, '.attributes["a"]'],
      ['attribute value Infinity', (e) => { e.attributes.a = Infinity; }, '.attributes["a"]'],
      ['attribute value -Infinity', (e) => { e.attributes.a = -Infinity; }, '.attributes["a"]'],
      ['attribute value null', (e) => { e.attributes.s = null; }, '.attributes["s"]'],
      ['attribute value undefined', (e) => { e.attributes.s = undefined; }, '.attributes["s"]'],
      ['attribute value an object', (e) => { e.attributes.s = {}; }, '.attributes["s"]'],
      ['attribute value an array', (e) => { e.attributes.s = ['x']; }, '.attributes["s"]'],
      ['attribute value of 1025 bytes', (e) => { e.attributes.s = 'é'.repeat(512) + 'x'; }, '.attributes["s"]'],
      ['attribute value with a lone surrogate', (e) => { e.attributes.s = lone; }, '.attributes["s"]'],
    ];

    it('[V1][V2][V4][V5][V7][V8][V9] a bad event is rejected naming the field, by match and by matchBatch', () =>
      open(async (m) => {
        m.add(sub('s', 'd', { constraints: [] }));
        for (const [label, patch, suffix] of badEvents) {
          const e = goodEvent() as unknown as Record<string, unknown>;
          const out = patch(e);
          const input = (out === undefined ? e : out) as Event;
          await rejectsAt(() => m.match(input), `event${suffix}`, 'INVALID_ARGUMENT', `match: ${label}`);
          await rejectsAt(() => m.matchBatch([goodEvent(), goodEvent(), input]), `events[2]${suffix}`, 'INVALID_ARGUMENT', `matchBatch: ${label}`);
        }
        await rejectsAt(() => m.matchBatch(null as unknown as Event[]), 'events');
        await rejectsAt(() => m.matchBatch(goodEvent() as unknown as Event[]), 'events');
        const many = Array.from({ length: 3000 }, () => goodEvent());
        many.push({ ...goodEvent(), lat: NaN });
        await rejectsAt(() => m.matchBatch(many), 'events[3000].lat');
        assert.deepEqual(await ids(m, goodEvent()), ['s'], 'still usable');
      }));

    it('[L4][L8][V1][V2][V4][V7] positions: bad input names the field; a bad batch entry applies nothing', () =>
      open(async (m) => {
        m.add(sub('s', 'd0', { constraints: [], area: anchored(100) }));
        m.updatePosition('d0', 10, 10);
        const probes = [ev({}, 10, 10), ev({}, 20, 20)];
        const before = await snapshot(m, ['s'], probes);
        throwsAt(() => m.updatePosition('', 0, 0), 'device');
        throwsAt(() => m.updatePosition(5 as unknown as string, 0, 0), 'device');
        throwsAt(() => m.updatePosition('x'.repeat(129), 0, 0), 'device');
        throwsAt(() => m.updatePosition(lone, 0, 0), 'device');
        throwsAt(() => m.updatePosition('d0', 91, 0), 'lat', 'INVALID_ARGUMENT', 'known device');
        throwsAt(() => m.updatePosition('new', 91, 0), 'lat');
        throwsAt(() => m.updatePosition('d0', NaN, 0), 'lat');
        throwsAt(() => m.updatePosition('d0', 0, -180.0001), 'lon');
        throwsAt(() => m.updatePosition('d0', 0, Infinity), 'lon');
        throwsAt(() => m.updatePosition('d0', 0, '1' as unknown as number), 'lon');
        throwsAt(() => m.removeDevice(''), 'device');
        throwsAt(() => m.remove(''), 'id');
        throwsAt(() => m.remove(7 as unknown as string), 'id');
        throwsAt(() => m.updatePositions(null as unknown as PositionUpdate[]), 'positions');
        throwsAt(() => m.updatePositions({ device: 'd0', lat: 0, lon: 0 } as unknown as PositionUpdate[]), 'positions');
        const ok = (i: number): PositionUpdate => ({ device: i === 0 ? 'd0' : `d${i}`, lat: 20, lon: 20 });
        const badAt3: Array<[string, unknown, string]> = [
          ['lat 91', { device: 'd3', lat: 91, lon: 0 }, 'positions[3].lat'],
          ['lon NaN', { device: 'd3', lat: 0, lon: NaN }, 'positions[3].lon'],
          ['empty device', { device: '', lat: 0, lon: 0 }, 'positions[3].device'],
          ['null entry', null, 'positions[3]'],
          ['array entry', ['d3', 0, 0], 'positions[3]'],
        ];
        for (const [label, bad, field] of badAt3) {
          throwsAt(() => m.updatePositions([ok(0), ok(1), ok(2), bad as PositionUpdate, ok(4)]), field, 'INVALID_ARGUMENT', label);
          assert.deepEqual(await snapshot(m, ['s'], probes), before, `${label}: entries 0..2 must not be applied`);
        }
        const big = Array.from({ length: 10_000 }, (_, i) => ok(i));
        big.push({ device: 'late', lat: -91, lon: 0 });
        throwsAt(() => m.updatePositions(big), 'positions[10000].lat');
        assert.deepEqual(await snapshot(m, ['s'], probes), before, 'a long batch with a bad last entry');
      }));

    it('[V3][V12] limits are configurable per engine and enforced at the configured values', () =>
      open(
        async (m) => {
          assert.equal(m.limits.maxConstraintsPerFilter, 2);
          m.add(sub('abcd', 'wxyz', { constraints: [c('nmé', 'eq', 'é12'), c('n', 'exists')], area: anchored(100) }, { constraints: [], area: fixed(100, 0, 0) }));
          throwsAt(() => m.add(sub('abcde', 'o', { constraints: [] })), 'subscription.id');
          throwsAt(() => m.add(sub('é', 'o', { constraints: [c('a', 'exists'), c('b', 'exists'), c('c', 'exists')] })), 'subscription.filters[0].constraints');
          throwsAt(() => m.add(sub('é', 'o', { constraints: [] }, { constraints: [] }, { constraints: [] })), 'subscription.filters');
          throwsAt(() => m.add(sub('é', 'o', { constraints: [c('abcde', 'exists')] })), 'subscription.filters[0].constraints[0].name');
          throwsAt(() => m.add(sub('é', 'o', { constraints: [c('a', 'eq', 'abcde')] })), 'subscription.filters[0].constraints[0].value');
          throwsAt(() => m.add(sub('é', 'o', { constraints: [], area: anchored(100.000001) })), 'subscription.filters[0].area.radiusM');
          await rejectsAt(() => m.match({ id: 'e', lat: 0, lon: 0, radiusM: 10.5, attributes: {} }), 'event.radiusM');
          await rejectsAt(() => m.match({ id: 'e', lat: 0, lon: 0, attributes: { a: 1, b: 2, c: 3 } }), 'event.attributes');
          await rejectsAt(() => m.match({ id: 'e', lat: 0, lon: 0, attributes: { a: '12345' } }), 'event.attributes["a"]');
          throwsAt(() => m.updatePosition('12345', 0, 0), 'device');
          assert.deepEqual(await ids(m, { id: 'e', lat: 0, lon: 0, radiusM: 10, attributes: { a: 'é12', b: 2 } }), ['abcd']);
          assert.equal(m.stats().subscriptions, 1);
        },
        { limits: { maxConstraintsPerFilter: 2, maxFiltersPerSubscription: 2, maxAttributesPerEvent: 2, maxNameBytes: 4, maxStringBytes: 4, maxIdBytes: 4, maxRadiusM: 100, maxEventRadiusM: 10 } },
      ));

    it('[V12] bad limits are rejected at construction, naming the limit', () => {
      throwsAt(() => make({ limits: { maxRadiusM: 0 } }), 'limits.maxRadiusM');
      throwsAt(() => make({ limits: { maxConstraintsPerFilter: 1.5 } }), 'limits.maxConstraintsPerFilter');
      throwsAt(() => make({ limits: { maxConstraintsPerFilter: 256 } }), 'limits.maxConstraintsPerFilter');
      throwsAt(() => make({ limits: { maxIdBytes: NaN } }), 'limits.maxIdBytes');
      throwsAt(() => make({ limits: { bogus: 1 } as unknown as MatcherOptions['limits'] }), 'limits.bogus');
    });

    it('[V9] sparse arrays (holes) are malformed input and are rejected', () =>
      open(async (m) => {
        throwsAt(() => m.add({ id: 'holes1', owner: 'd', filters: new Array(1) }), 'subscription.filters[0]');
        assert.equal(m.has('holes1'), false);
        throwsAt(() => m.add(sub('holes2', 'd', { constraints: new Array(2) as Constraint[] })), 'subscription.filters[0].constraints[0]');
        assert.equal(m.has('holes2'), false);
        assert.deepEqual(await ids(m, ev({})), [], 'a later match must still work');
        await rejectsAt(() => m.matchBatch(new Array(2) as Event[]), 'events[0]');
      }));
  });
}
