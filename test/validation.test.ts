/**
 * Limits and validation (docs/semantics.md V1-V12), tested on the pure functions of
 * src/model/limits.ts and src/model/errors.ts, plus the constraint semantics of
 * src/model/semantics.ts. Engine-level validation (nothing changes on a rejected call) is in the
 * contract suite.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { AmbitError, ValidationError, show } from '../src/model/errors.js';
import {
  DEFAULT_LIMITS,
  type Limits,
  checkId,
  checkLat,
  checkLatLon,
  checkLon,
  checkValue,
  plainId,
  resolveLimits,
  utf8Bytes,
  validateConstraint,
  validateEvent,
  validateFilter,
  validatePosition,
  validatePositions,
  validateSubscription,
} from '../src/model/limits.js';
import { compare, satisfies, typeOf } from '../src/model/semantics.js';
import { OPS, type Op, type Value } from '../src/model/types.js';
import { checkError, throwsAt } from './support/assertions.js';

const L = resolveLimits();

const CEILINGS: Limits = {
  maxRadiusM: 2_000_000,
  maxEventRadiusM: 2_000_000,
  maxNameBytes: 1024,
  maxStringBytes: 65_536,
  maxConstraintsPerFilter: 255,
  maxFiltersPerSubscription: 4096,
  maxAttributesPerEvent: 1024,
  maxIdBytes: 1024,
  maxPatternBytes: 4096,
  maxPatternStates: 255,
  maxTagsPerEvent: 1024,
  maxTagsPerFilter: 255,
  maxTagBytes: 1024,
};

describe('resolveLimits', () => {
  it('[V3][V12] defaults are the documented ones, frozen, and resolveLimits returns a copy', () => {
    assert.deepEqual({ ...DEFAULT_LIMITS }, {
      maxRadiusM: 1_000_000, maxEventRadiusM: 1_000_000, maxNameBytes: 64, maxStringBytes: 1024,
      maxConstraintsPerFilter: 32, maxFiltersPerSubscription: 64, maxAttributesPerEvent: 64, maxIdBytes: 128,
      maxPatternBytes: 256, maxPatternStates: 128, maxTagsPerEvent: 32, maxTagsPerFilter: 16, maxTagBytes: 64,
    });
    assert.ok(Object.isFrozen(DEFAULT_LIMITS));
    const a = resolveLimits();
    assert.deepEqual(a, { ...DEFAULT_LIMITS });
    a.maxIdBytes = 1;
    assert.equal(DEFAULT_LIMITS.maxIdBytes, 128);
    assert.equal(resolveLimits({}).maxIdBytes, 128);
  });

  it('[V12] merges a partial over the defaults; undefined entries are skipped', () => {
    const l = resolveLimits({ maxIdBytes: 4, maxRadiusM: 12.5, maxNameBytes: undefined });
    assert.equal(l.maxIdBytes, 4);
    assert.equal(l.maxRadiusM, 12.5);
    assert.equal(l.maxNameBytes, 64);
    assert.equal(l.maxStringBytes, 1024);
  });

  it('[V12] each limit is accepted up to its ceiling and rejected past it, at 0, negative, non-finite or non-number', () => {
    for (const key of Object.keys(CEILINGS) as Array<keyof Limits>) {
      const ceiling = CEILINGS[key];
      const radius = key === 'maxRadiusM' || key === 'maxEventRadiusM';
      assert.equal(resolveLimits({ [key]: ceiling })[key], ceiling, `${key} at its ceiling`);
      assert.equal(resolveLimits({ [key]: 1 })[key], 1, `${key} = 1`);
      const bad: unknown[] = [ceiling + 1, 0, -0, -1, NaN, Infinity, -Infinity, '5', null, true, [5], { v: 5 }];
      if (!radius) bad.push(1.5, ceiling - 0.5);
      for (const v of bad) {
        const e = throwsAt(() => resolveLimits({ [key]: v } as Partial<Limits>), `limits.${key}`, 'INVALID_ARGUMENT', `${key} = ${show(v)}`);
        assert.match(e.message, radius ? /must be a number in \(0, / : /must be an integer in \(0, /);
        assert.ok(e.message.includes(String(ceiling)), e.message);
      }
      if (radius) assert.equal(resolveLimits({ [key]: 0.5 })[key], 0.5, 'radii need not be integers');
    }
  });

  it('[V12] unknown keys are rejected, naming them', () => {
    const e = throwsAt(() => resolveLimits({ maxFoo: 1 } as unknown as Partial<Limits>), 'limits.maxFoo');
    assert.equal(e.message, 'limits.maxFoo: unknown limit');
    throwsAt(() => resolveLimits({ maxradiusm: 1 } as unknown as Partial<Limits>), 'limits.maxradiusm');
  });

  it('[V12] keys inherited from Object.prototype are unknown limits too', () => {
    for (const key of ['toString', 'constructor', 'hasOwnProperty', 'valueOf']) {
      throwsAt(() => resolveLimits({ [key]: 5 } as unknown as Partial<Limits>), `limits.${key}`, 'INVALID_ARGUMENT', key);
    }
    throwsAt(() => resolveLimits(JSON.parse('{"__proto__": 5}') as Partial<Limits>), 'limits.__proto__');
  });

  it('[V1][V12] a partial that is not an object is a ValidationError, not a TypeError', () => {
    throwsAt(() => resolveLimits(null as unknown as Partial<Limits>), 'limits');
  });
});

describe('errors', () => {
  it('[V1] ValidationError: code INVALID_ARGUMENT, field, rule, message `<field>: <rule>`', () => {
    const e = new ValidationError('subscription.filters[1].constraints[0].value', 'is required for op eq');
    assert.ok(e instanceof AmbitError && e instanceof Error);
    assert.equal(e.code, 'INVALID_ARGUMENT');
    assert.equal(e.field, 'subscription.filters[1].constraints[0].value');
    assert.equal(e.rule, 'is required for op eq');
    assert.equal(e.message, 'subscription.filters[1].constraints[0].value: is required for op eq');
    assert.equal(e.name, 'ValidationError');
    const n = new AmbitError('NOT_FOUND', 'gone');
    assert.equal(n.message, 'gone');
    assert.equal(n.field, undefined);
  });

  it('[V1] error messages never echo huge input: strings are cut at 40 characters', () => {
    assert.equal(show('x'.repeat(41)), JSON.stringify('x'.repeat(40) + '…(41 chars)'));
    assert.equal(show('abc'), '"abc"');
    assert.equal(show(-0), '-0');
    assert.equal(show(NaN), 'NaN');
    assert.equal(show(null), 'null');
    assert.equal(show(undefined), 'undefined');
    assert.equal(show([1, 2, 3]), 'array(3)');
    assert.equal(show({ a: 1 }), 'object');
    assert.equal(show(true), 'true');
    for (const huge of ['x'.repeat(1_000_000), '東'.repeat(100_000)]) {
      let err: unknown;
      try {
        validateSubscription({ id: 'ok', owner: huge, filters: [] }, L);
      } catch (e) {
        err = e;
      }
      checkError(err, 'subscription.owner');
      assert.ok((err as Error).message.length < 200, (err as Error).message.slice(0, 300));
    }
  });
});

describe('validators', () => {
  it('[V5][V6] checkId: 1 to 128 UTF-8 bytes, well-formed, a string', () => {
    assert.equal(checkId('id', 'a', L), 'a');
    assert.equal(checkId('id', 'x'.repeat(128), L), 'x'.repeat(128));
    assert.equal(checkId('id', '😀'.repeat(32), L), '😀'.repeat(32));
    assert.equal(checkId('id', '東'.repeat(42) + 'ab', L).length, 44);
    const cases: Array<[unknown, RegExp]> = [
      ['', /at least 1 UTF-8 byte, got 0/],
      ['x'.repeat(129), /at most 128 UTF-8 bytes, got 129/],
      ['東'.repeat(43), /at most 128 UTF-8 bytes, got 129/],
      ['😀'.repeat(32) + 'a', /at most 128 UTF-8 bytes, got 129/],
      ['x'.repeat(10_000), /at most 128 UTF-8 bytes, got more/],
      ['\uD83D', /well-formed/],
      ['a\uDE00', /well-formed/],
      ['\uDE00\uD83D', /well-formed/],
      [5, /must be a string, got number/],
      [null, /must be a string, got null/],
      [undefined, /must be a string, got undefined/],
      [['a'], /must be a string, got array\(1\)/],
      [{}, /must be a string, got object/],
      [Symbol('s'), /must be a string/],
    ];
    for (const [v, rule] of cases) assert.match(throwsAt(() => checkId('sub.id', v, L), 'sub.id', 'INVALID_ARGUMENT', show(v)).rule, rule);
    assert.equal(utf8Bytes('é東😀'), 2 + 3 + 4);
  });

  it('[V4][V7] checkLat/checkLon: inclusive ranges, finite numbers only', () => {
    for (const v of [-90, -0, 0, 90, 45.5, 1e-300]) assert.ok(Object.is(checkLat('lat', v), v));
    for (const v of [-180, 180, -0, 179.9999999]) assert.ok(Object.is(checkLon('lon', v), v));
    const lat: Array<[unknown, RegExp]> = [
      [90.0000001, /must be within \[-90, 90\], got 90.0000001/],
      [-91, /must be within \[-90, 90\], got -91/],
      [NaN, /must be finite, got NaN/],
      [Infinity, /must be finite, got Infinity/],
      [-Infinity, /must be finite/],
      ['45', /must be a number, got string/],
      [null, /must be a number, got null/],
      [undefined, /must be a number, got undefined/],
      [45n, /must be a number, got bigint/],
    ];
    for (const [v, rule] of lat) assert.match(throwsAt(() => checkLat('p.lat', v), 'p.lat', 'INVALID_ARGUMENT', show(v)).rule, rule);
    for (const v of [180.0000001, -180.0001, NaN, -Infinity, '0']) throwsAt(() => checkLon('p.lon', v), 'p.lon', 'INVALID_ARGUMENT', show(v));
    assert.deepEqual(checkLatLon('c', { lat: 1, lon: 2 }), { lat: 1, lon: 2 });
    throwsAt(() => checkLatLon('c', [1, 2]), 'c');
    throwsAt(() => checkLatLon('c', null), 'c');
    throwsAt(() => checkLatLon('c', { lat: 1 }), 'c.lon');
    throwsAt(() => checkLatLon('c', { lat: 100, lon: 1000 }), 'c.lat', 'INVALID_ARGUMENT', 'first violation');
  });

  it('[M2][V4][V5][V6] checkValue: finite numbers, strings of 0 to 1024 bytes, bools', () => {
    assert.deepEqual(checkValue('v', 1.5, L), { type: 'number', value: 1.5 });
    assert.ok(Object.is(checkValue('v', -0, L).value, -0), '-0 is kept as given (it equals 0 anyway)');
    assert.deepEqual(checkValue('v', '', L), { type: 'string', value: '' });
    assert.deepEqual(checkValue('v', false, L), { type: 'bool', value: false });
    assert.equal(checkValue('v', '東'.repeat(341) + 'a', L).value, '東'.repeat(341) + 'a');
    assert.equal(checkValue('v', Number.MAX_VALUE, L).value, Number.MAX_VALUE);
    for (const v of [NaN, Infinity, -Infinity, 'x'.repeat(1025), '東'.repeat(342), 'é'.repeat(513), '\uD800', null, undefined, {}, [], 1n, Symbol('x'), () => 1, new Date(0), new Number(1), new String('a')]) {
      throwsAt(() => checkValue('a.value', v, L), 'a.value', 'INVALID_ARGUMENT', typeof v === 'symbol' ? 'symbol' : show(v));
    }
  });

  it('[M6][C4][V10] validateConstraint: the operator × type table, exactly', () => {
    const allowed: Record<string, Op[]> = {
      number: ['eq', 'ne', 'lt', 'le', 'gt', 'ge'],
      bool: ['eq', 'ne', 'lt', 'le', 'gt', 'ge'],
      string: ['eq', 'ne', 'prefix', 'suffix', 'contains', 'like', 'regex'],
    };
    const sample: Record<string, Value> = { number: 1, bool: true, string: 'a' };
    assert.deepEqual([...OPS].sort(), ['contains', 'eq', 'exists', 'ge', 'gt', 'le', 'like', 'lt', 'ne', 'prefix', 'regex', 'suffix']);
    for (const op of OPS) {
      if (op === 'exists') continue;
      for (const type of ['number', 'bool', 'string']) {
        const input: Record<string, unknown> = { name: 'n', op, value: sample[type] };
        if (allowed[type].includes(op)) {
          assert.deepEqual(validateConstraint('c', input, L), { name: 'n', op, type, value: sample[type] }, `${op} ${type}`);
        } else {
          const e = throwsAt(() => validateConstraint('c', input, L), 'c.value', 'INVALID_ARGUMENT', `${op} ${type}`);
          assert.match(e.rule, new RegExp(`op ${op} takes a .* value, got a ${type}`));
        }
      }
    }
    assert.deepEqual(validateConstraint('c', { name: 'n', op: 'exists' }, L), { name: 'n', op: 'exists', type: null, value: null });
    assert.deepEqual(validateConstraint('c', { name: 'n', op: 'exists', value: null }, L), { name: 'n', op: 'exists', type: null, value: null });
    for (const v of [0, false, '', 'x', {}]) throwsAt(() => validateConstraint('c', { name: 'n', op: 'exists', value: v }, L), 'c.value', 'INVALID_ARGUMENT', `exists ${show(v)}`);
    for (const op of ['eq', 'lt', 'prefix']) {
      throwsAt(() => validateConstraint('c', { name: 'n', op }, L), 'c.value');
      throwsAt(() => validateConstraint('c', { name: 'n', op, value: null }, L), 'c.value');
    }
    for (const op of ['EQ', 'LIKE', 'glob', '', 'toString', '__proto__', 'hasOwnProperty', 1, null, undefined, ['eq']]) {
      const e = throwsAt(() => validateConstraint('c', { name: 'n', op, value: 1 }, L), 'c.op', 'INVALID_ARGUMENT', show(op));
      assert.match(e.rule, /must be one of eq, ne, lt, le, gt, ge, prefix, suffix, contains, like, regex, exists/);
    }
    throwsAt(() => validateConstraint('c', { op: 'eq', value: 1 }, L), 'c.name');
    throwsAt(() => validateConstraint('c', { name: '', op: 'eq', value: 1 }, L), 'c.name');
    throwsAt(() => validateConstraint('c', { name: 'x'.repeat(65), op: 'eq', value: 1 }, L), 'c.name');
    throwsAt(() => validateConstraint('c', { name: '東'.repeat(21) + 'é', op: 'eq', value: 1 }, L), 'c.name', 'INVALID_ARGUMENT', '65 bytes');
    assert.equal(validateConstraint('c', { name: '東'.repeat(21) + 'a', op: 'exists' }, L).name.length, 22);
    throwsAt(() => validateConstraint('c', { name: '\uDFFF', op: 'exists' }, L), 'c.name');
    throwsAt(() => validateConstraint('c', null, L), 'c');
    throwsAt(() => validateConstraint('c', [], L), 'c');
  });

  it('[M4][M5][V8] validateFilter: absent/null forms, radius bounds, copies', () => {
    assert.deepEqual(validateFilter('f', {}, L), { constraints: [], area: null, tags: [] });
    assert.deepEqual(validateFilter('f', { constraints: null, area: null, tags: null }, L), { constraints: [], area: null, tags: [] });
    assert.deepEqual(validateFilter('f', { area: { radiusM: 5, center: null } }, L), { constraints: [], area: { radiusM: 5, center: null }, tags: [] });
    assert.deepEqual(validateFilter('f', { area: { radiusM: 1e6, center: { lat: -90, lon: 180 } } }, L), { constraints: [], area: { radiusM: 1e6, center: { lat: -90, lon: 180 } }, tags: [] });
    assert.deepEqual(validateFilter('f', { tags: ['#B', 'a', 'b'] }, L), { constraints: [], area: null, tags: ['a', 'b'] });
    assert.equal(validateFilter('f', { area: { radiusM: Number.MIN_VALUE } }, L).area!.radiusM, Number.MIN_VALUE);
    const input = { constraints: [{ name: 'a', op: 'eq', value: 1 }], area: { radiusM: 5, center: { lat: 1, lon: 2 } } };
    const out = validateFilter('f', input, L);
    assert.notEqual(out.constraints, input.constraints);
    assert.notEqual(out.constraints[0], input.constraints[0]);
    assert.notEqual(out.area!.center, input.area.center);
    for (const r of [0, -0, -1, 1e6 + 1, NaN, Infinity, '5', null, undefined]) {
      const e = throwsAt(() => validateFilter('f', { area: { radiusM: r } }, L), 'f.area.radiusM', 'INVALID_ARGUMENT', show(r));
      if (typeof r === 'number' && Number.isFinite(r)) assert.match(e.rule, /must be within \(0, 1000000\]/);
    }
    throwsAt(() => validateFilter('f', { constraints: Array.from({ length: 33 }, () => ({ name: 'a', op: 'exists' })) }, L), 'f.constraints');
    assert.equal(validateFilter('f', { constraints: Array.from({ length: 32 }, () => ({ name: 'a', op: 'exists' })) }, L).constraints.length, 32);
  });

  it('[V11] validateSubscription reports the first violation in document order', () => {
    const bad = { name: '', op: 'eq', value: 1 };
    throwsAt(() => validateSubscription({ id: '', owner: '', filters: [] }, L), 'subscription.id');
    throwsAt(() => validateSubscription({ id: 'a', owner: '', filters: [] }, L), 'subscription.owner');
    throwsAt(() => validateSubscription({ id: 'a', owner: 'o', filters: [] }, L), 'subscription.filters');
    throwsAt(() => validateSubscription({ id: 'a', owner: 'o', filters: [{ constraints: [bad] }, { constraints: [bad] }] }, L), 'subscription.filters[0].constraints[0].name');
    throwsAt(() => validateSubscription({ id: 'a', owner: 'o', filters: [{}, { constraints: [{ name: 'a', op: 'exists' }, bad], area: { radiusM: 0 } }] }, L), 'subscription.filters[1].constraints[1].name');
    throwsAt(() => validateSubscription({ id: 'a', owner: 'o', filters: [{}, { area: { radiusM: 0, center: { lat: 99, lon: 0 } } }] }, L), 'subscription.filters[1].area.radiusM');
    throwsAt(() => validateSubscription({ id: 'a', owner: 'o', filters: [{ constraints: 'x', area: 7 }] }, L), 'subscription.filters[0].constraints');
  });

  it('[V2] field paths take the caller\'s prefix', () => {
    throwsAt(() => validateSubscription({ id: 'a', owner: 'o', filters: [{ area: { radiusM: 0 } }] }, L, 'subs[3]'), 'subs[3].filters[0].area.radiusM');
    throwsAt(() => validateEvent({ id: 'e', lat: 0, lon: 0, attributes: { 'a"b': NaN } }, L, 'events[7]'), 'events[7].attributes["a\\"b"]');
    throwsAt(() => validatePositions([{ device: 'd', lat: 0, lon: 0 }, { device: 'd', lat: 0, lon: 200 }], L, 'batch'), 'batch[1].lon');
    throwsAt(() => validatePosition('', 0, 0, L), 'position.device');
    throwsAt(() => validatePosition('d', 0, 181, L, 'pos'), 'pos.lon');
  });

  it('[M1][V8] validateEvent normalises: radius absent, null or -0 is 0; names and values in order', () => {
    const base = { id: 'e', lat: 1, lon: 2, attributes: { b: 1, a: 'x', c: false } };
    const n = validateEvent(base, L);
    assert.deepEqual(n, { id: 'e', lat: 1, lon: 2, radiusM: 0, names: ['b', 'a', 'c'], values: [1, 'x', false], tags: [] });
    assert.ok(Object.is(validateEvent({ ...base, radiusM: -0 }, L).radiusM, 0));
    assert.equal(validateEvent({ ...base, radiusM: null }, L).radiusM, 0);
    assert.equal(validateEvent({ ...base, radiusM: 1e6 }, L).radiusM, 1e6);
    assert.deepEqual(validateEvent({ ...base, attributes: {} }, L).names, []);
    const proto = validateEvent({ ...base, attributes: JSON.parse('{"__proto__": 1, "constructor": "x"}') }, L);
    assert.deepEqual([proto.names, proto.values], [['__proto__', 'constructor'], [1, 'x']]);
    const attrs64 = Object.fromEntries(Array.from({ length: 64 }, (_, i) => [`k${i}`, i]));
    assert.equal(validateEvent({ ...base, attributes: attrs64 }, L).names.length, 64);
    throwsAt(() => validateEvent({ ...base, attributes: { ...attrs64, extra: 1 } }, L), 'event.attributes');
    throwsAt(() => validateEvent({ ...base, radiusM: 1e6 + 1 }, L), 'event.radiusM');
    throwsAt(() => validateEvent({ ...base, radiusM: -Number.MIN_VALUE }, L), 'event.radiusM');
    throwsAt(() => validateEvent({ ...base, attributes: Object.create({ inherited: 1 }) }, L), 'event.attributes', 'INVALID_ARGUMENT', 'not a plain object');
    assert.deepEqual(validateEvent({ ...base, attributes: Object.assign(Object.create(null), { a: 1 }) }, L).names, ['a'], 'a null-prototype object is plain');
  });

  it('[V9] positions: an array of plain objects; an empty batch is fine', () => {
    assert.deepEqual(validatePositions([], L), []);
    assert.deepEqual(validatePositions([{ device: 'd', lat: -0, lon: 180 }], L), [{ device: 'd', lat: -0, lon: 180 }]);
    throwsAt(() => validatePositions('x', L), 'positions');
    throwsAt(() => validatePositions({ length: 1, 0: { device: 'd', lat: 0, lon: 0 } }, L), 'positions');
    throwsAt(() => validatePositions([null], L), 'positions[0]');
    throwsAt(() => validatePositions([{ device: 'd', lat: 0, lon: 0 }, 'd'], L), 'positions[1]');
  });
});

describe('constraint semantics (src/model/semantics.ts)', () => {
  it('[M2] typeOf names the three types', () => {
    assert.deepEqual([typeOf(1), typeOf(-0), typeOf(''), typeOf(false)], ['number', 'number', 'string', 'bool']);
  });

  it('[C5][C7][C9][C10][C11] compare: numbers, bools, strings', () => {
    assert.equal(compare('eq', -0, 0), true);
    assert.equal(compare('lt', false, true), true);
    assert.equal(compare('ge', true, true), true);
    assert.equal(compare('prefix', '', ''), true);
    assert.equal(compare('suffix', 'a😀', '😀'), true);
    assert.equal(compare('contains', '東京タワー', '京タ'), true);
    assert.equal(compare('contains', '😀', '\uDE00'), true, 'JS works on code units; validation keeps lone surrogates out (C12, V5)');
    assert.equal(compare('exists', 1, 1), true);
  });

  it('[C2][C3][C13] satisfies: absent attribute, type mismatch, exists', () => {
    const c = (op: Op, type: 'number' | 'string' | 'bool' | null, value: Value | null) => ({ name: 'n', op, type, value });
    assert.equal(satisfies(c('ne', 'number', 5), undefined), false);
    assert.equal(satisfies(c('ne', 'number', 5), '5'), false);
    assert.equal(satisfies(c('ne', 'string', '5'), 5), false);
    assert.equal(satisfies(c('eq', 'bool', true), 1), false);
    assert.equal(satisfies(c('exists', null, null), 0), true);
    assert.equal(satisfies(c('exists', null, null), ''), true);
    assert.equal(satisfies(c('exists', null, null), false), true);
    assert.equal(satisfies(c('exists', null, null), undefined), false);
    assert.equal(satisfies(c('lt', 'number', 10), 3), true, 'attribute on the left');
  });
});

describe('plainId: the quick check of an id', () => {
  it('says true only for ids checkId accepts; checkId decides the rest', () => {
    const limits = resolveLimits({ maxIdBytes: 12 });
    const ids = ['', 'a', 'abcd', 'abcde', 'é', 'éé', 'éééé', '\u{1F600}', '\u{1F600}\u{1F600}', '\uD800', 'a\uDC00', 'x'.repeat(12), 'x'.repeat(13)];
    for (const id of ids) {
      let accepted = true;
      try {
        checkId('id', id, limits);
      } catch {
        accepted = false;
      }
      if (plainId(id, limits)) assert.ok(accepted, `plainId(${JSON.stringify(id)}) but checkId refuses it`);
    }
    // Short, well-formed ids take the quick path.
    assert.equal(plainId('abcd', limits), true);
    assert.equal(plainId('\u{1F600}', limits), true);
    assert.equal(plainId('', limits), false);
    assert.equal(plainId('\uD800', limits), false);
    assert.equal(plainId('abcde', limits), false, 'beyond a third of the byte limit: checkId decides');
  });
});
