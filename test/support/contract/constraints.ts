/**
 * Constraint rules (docs/semantics.md §2 C): each operator on each value type at its edges,
 * types and names, absence, several constraints on one name.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { Constraint, Op, Value } from '../../../src/model/types.js';
import { NUMBER_EDGES, STRING_EDGES } from '../values.js';
import { c, Case, caseLabel, checkCases, type ContractContext, ev, fixed, ids, jsCompare, NUM_OPS, show, STR_OPS, sub, utf8Op } from './common.js';

export function constraintRules({ open }: ContractContext): void {
  describe('constraints', () => {
    it('[C4][C5] numbers: documented edge facts', () =>
      open((m) =>
        checkCases(m, [
          { label: '-0 eq 0', constraint: c('x', 'eq', 0), attr: -0, expected: true },
          { label: '0 eq -0', constraint: c('x', 'eq', -0), attr: 0, expected: true },
          { label: '-0 ne 0 is false', constraint: c('x', 'ne', 0), attr: -0, expected: false },
          { label: '-0 lt 0 is false', constraint: c('x', 'lt', 0), attr: -0, expected: false },
          { label: '-0 le 0', constraint: c('x', 'le', 0), attr: -0, expected: true },
          { label: '0 ge -0', constraint: c('x', 'ge', -0), attr: 0, expected: true },
          { label: '2^53 eq 2^53+1 (the same float64)', constraint: c('x', 'eq', 2 ** 53 + 1), attr: 2 ** 53, expected: true },
          { label: '2^53+1 eq 2^53', constraint: c('x', 'eq', 2 ** 53), attr: 2 ** 53 + 1, expected: true },
          { label: '2^53 lt 2^53+2', constraint: c('x', 'lt', 2 ** 53 + 2), attr: 2 ** 53, expected: true },
          { label: '2^53 ne 2^53+2', constraint: c('x', 'ne', 2 ** 53 + 2), attr: 2 ** 53, expected: true },
          { label: '2^53+2 gt 2^53+1', constraint: c('x', 'gt', 2 ** 53 + 1), attr: 2 ** 53 + 2, expected: true },
          { label: '1e-300 gt 0', constraint: c('x', 'gt', 0), attr: 1e-300, expected: true },
          { label: '1e-300 ne 0', constraint: c('x', 'ne', 0), attr: 1e-300, expected: true },
          { label: '1e-300 eq 0 is false', constraint: c('x', 'eq', 0), attr: 1e-300, expected: false },
          { label: '-1e-300 lt 0', constraint: c('x', 'lt', 0), attr: -1e-300, expected: true },
          { label: '-1e-300 lt -0', constraint: c('x', 'lt', -0), attr: -1e-300, expected: true },
          { label: '-1e-300 ge 0 is false', constraint: c('x', 'ge', 0), attr: -1e-300, expected: false },
          { label: 'MIN_VALUE gt 0', constraint: c('x', 'gt', 0), attr: Number.MIN_VALUE, expected: true },
          { label: 'MIN_VALUE eq MIN_VALUE', constraint: c('x', 'eq', Number.MIN_VALUE), attr: Number.MIN_VALUE, expected: true },
          { label: '0 lt MIN_VALUE', constraint: c('x', 'lt', Number.MIN_VALUE), attr: 0, expected: true },
          { label: 'MIN_VALUE lt 1e-300', constraint: c('x', 'lt', 1e-300), attr: Number.MIN_VALUE, expected: true },
          { label: 'MAX_VALUE eq MAX_VALUE', constraint: c('x', 'eq', Number.MAX_VALUE), attr: Number.MAX_VALUE, expected: true },
          { label: 'MAX_VALUE le MAX_VALUE', constraint: c('x', 'le', Number.MAX_VALUE), attr: Number.MAX_VALUE, expected: true },
          { label: 'MAX_VALUE gt MAX_VALUE is false', constraint: c('x', 'gt', Number.MAX_VALUE), attr: Number.MAX_VALUE, expected: false },
          { label: '-MAX_VALUE lt -1e308', constraint: c('x', 'lt', -1e308), attr: -Number.MAX_VALUE, expected: true },
          { label: '0.1+0.2 ne 0.3 (no epsilon)', constraint: c('x', 'ne', 0.3), attr: 0.1 + 0.2, expected: true },
          { label: '0.1+0.2 gt 0.3', constraint: c('x', 'gt', 0.3), attr: 0.1 + 0.2, expected: true },
          { label: '0.3 eq 0.1+0.2 is false', constraint: c('x', 'eq', 0.1 + 0.2), attr: 0.3, expected: false },
          { label: '16777217 ne 16777216 (float32 would merge them)', constraint: c('x', 'ne', 16777216), attr: 16777217, expected: true },
          { label: '16777217 gt 16777216', constraint: c('x', 'gt', 16777216), attr: 16777217, expected: true },
          { label: '1+2^-52 gt 1', constraint: c('x', 'gt', 1), attr: 1 + 2 ** -52, expected: true },
          { label: '1 eq 1 (value equal to the constant)', constraint: c('x', 'eq', 1), attr: 1, expected: true },
          { label: '1 lt 1 is false at the constant', constraint: c('x', 'lt', 1), attr: 1, expected: false },
          { label: '1 le 1 at the constant', constraint: c('x', 'le', 1), attr: 1, expected: true },
          { label: '1 gt 1 is false at the constant', constraint: c('x', 'gt', 1), attr: 1, expected: false },
          { label: '1 ge 1 at the constant', constraint: c('x', 'ge', 1), attr: 1, expected: true },
          { label: '3 lt 10 (attribute on the left)', constraint: c('x', 'lt', 10), attr: 3, expected: true },
          { label: '10 lt 3 is false', constraint: c('x', 'lt', 3), attr: 10, expected: false },
        ]),
      ));

    it('[C4][C5] numbers: every comparison operator over the edge values agrees with float64', () =>
      open((m) => {
        const cases: Case[] = [];
        for (const op of NUM_OPS) for (const v of NUMBER_EDGES) for (const a of NUMBER_EDGES) cases.push({ label: caseLabel(op, v, a), constraint: c('x', op, v), attr: a, expected: jsCompare(op, a, v) });
        return checkCases(m, cases);
      }));

    it('[C4][C7] bools: false < true under every comparison operator', () =>
      open((m) => {
        const literal: Record<string, boolean> = {
          'false eq false': true, 'false eq true': false, 'true eq true': true, 'true ne false': true, 'false ne false': false,
          'false lt true': true, 'true lt false': false, 'true lt true': false, 'false le false': true, 'true le false': false,
          'true gt false': true, 'false gt true': false, 'false gt false': false, 'true ge true': true, 'false ge true': false,
        };
        const cases: Case[] = [];
        for (const op of NUM_OPS)
          for (const v of [false, true])
            for (const a of [false, true]) {
              const key = `${a} ${op} ${v}`;
              const expected = jsCompare(op, a, v);
              if (key in literal) assert.equal(expected, literal[key], key);
              cases.push({ label: key, constraint: c('x', op, v), attr: a, expected });
            }
        return checkCases(m, cases);
      }));

    it('[C4][C8][C9][C10][C11] strings: documented multi-byte and empty-string facts', () =>
      open((m) =>
        checkCases(m, [
          { label: "'' prefix '' ", constraint: c('x', 'prefix', ''), attr: '', expected: true },
          { label: "'abc' prefix ''", constraint: c('x', 'prefix', ''), attr: 'abc', expected: true },
          { label: "'' suffix ''", constraint: c('x', 'suffix', ''), attr: '', expected: true },
          { label: "'東京' suffix ''", constraint: c('x', 'suffix', ''), attr: '東京', expected: true },
          { label: "'' contains ''", constraint: c('x', 'contains', ''), attr: '', expected: true },
          { label: "'😀' contains ''", constraint: c('x', 'contains', ''), attr: '😀', expected: true },
          { label: "'' eq ''", constraint: c('x', 'eq', ''), attr: '', expected: true },
          { label: "'' ne 'a'", constraint: c('x', 'ne', 'a'), attr: '', expected: true },
          { label: "'' prefix 'a' is false", constraint: c('x', 'prefix', 'a'), attr: '', expected: false },
          { label: "'東京' prefix '東'", constraint: c('x', 'prefix', '東'), attr: '東京', expected: true },
          { label: "'東京' prefix '京' is false", constraint: c('x', 'prefix', '京'), attr: '東京', expected: false },
          { label: "'東京' suffix '京'", constraint: c('x', 'suffix', '京'), attr: '東京', expected: true },
          { label: "'東京' contains '京'", constraint: c('x', 'contains', '京'), attr: '東京', expected: true },
          { label: "'東京' prefix '東京タワー' is false (longer)", constraint: c('x', 'prefix', '東京タワー'), attr: '東京', expected: false },
          { label: "'東京タワー' contains '京タ'", constraint: c('x', 'contains', '京タ'), attr: '東京タワー', expected: true },
          { label: "'café' suffix 'é'", constraint: c('x', 'suffix', 'é'), attr: 'café', expected: true },
          { label: "'café' suffix 'e' is false (é is one code point)", constraint: c('x', 'suffix', 'e'), attr: 'café', expected: false },
          { label: "'cafe\\u0301' suffix 'é' is false (no normalisation)", constraint: c('x', 'suffix', 'é'), attr: 'cafe\u0301', expected: false },
          { label: "'é' eq 'e\\u0301' is false", constraint: c('x', 'eq', 'e\u0301'), attr: 'é', expected: false },
          { label: "'é' ne 'e\\u0301'", constraint: c('x', 'ne', 'e\u0301'), attr: 'é', expected: true },
          { label: "'e\\u0301' prefix 'e'", constraint: c('x', 'prefix', 'e'), attr: 'e\u0301', expected: true },
          { label: "'😀' eq '😀'", constraint: c('x', 'eq', '😀'), attr: '😀', expected: true },
          { label: "'a😀b' contains '😀'", constraint: c('x', 'contains', '😀'), attr: 'a😀b', expected: true },
          { label: "'a😀b' prefix 'a😀'", constraint: c('x', 'prefix', 'a😀'), attr: 'a😀b', expected: true },
          { label: "'a😀b' suffix '😀b'", constraint: c('x', 'suffix', '😀b'), attr: 'a😀b', expected: true },
          { label: "'😀😁' contains '😁'", constraint: c('x', 'contains', '😁'), attr: '😀😁', expected: true },
          { label: "'😀' contains '😁' is false (shared lead surrogate)", constraint: c('x', 'contains', '😁'), attr: '😀', expected: false },
          { label: "'😀' prefix '😁' is false", constraint: c('x', 'prefix', '😁'), attr: '😀', expected: false },
          { label: "'A' eq 'a' is false (case-sensitive)", constraint: c('x', 'eq', 'a'), attr: 'A', expected: false },
          { label: "'ab' eq 'ab' (value equal to the constant)", constraint: c('x', 'eq', 'ab'), attr: 'ab', expected: true },
          { label: "'ab' prefix 'ab' (the whole string)", constraint: c('x', 'prefix', 'ab'), attr: 'ab', expected: true },
          { label: "'ab' suffix 'ab'", constraint: c('x', 'suffix', 'ab'), attr: 'ab', expected: true },
          { label: "'ab' contains 'ab'", constraint: c('x', 'contains', 'ab'), attr: 'ab', expected: true },
          { label: "'ab' contains 'ba' is false", constraint: c('x', 'contains', 'ba'), attr: 'ab', expected: false },
          { label: "'\\u00ff' prefix '\\u0100' is false", constraint: c('x', 'prefix', '\u0100'), attr: '\u00ff', expected: false },
          { label: "'x\\u0000y' contains '\\u0000'", constraint: c('x', 'contains', '\u0000'), attr: 'x\u0000y', expected: true },
        ]),
      ));

    it('[C8][C9][C10][C11][C12] strings: every string operator over the edge values agrees with UTF-8 bytes', () =>
      open((m) => {
        const cases: Case[] = [];
        for (const op of STR_OPS) for (const v of STRING_EDGES) for (const a of STRING_EDGES) cases.push({ label: caseLabel(op, v, a), constraint: c('x', op, v), attr: a, expected: utf8Op(op, a, v) });
        return checkCases(m, cases);
      }));

    it('[C2] a value of another type satisfies nothing, ne included', () =>
      open((m) => {
        const byType: Record<string, { values: Value[]; ops: Op[] }> = {
          number: { values: [0, 1, 5, -0], ops: NUM_OPS },
          string: { values: ['', '5', '1', 'true', 'false', '0'], ops: STR_OPS },
          bool: { values: [false, true], ops: NUM_OPS },
        };
        const attrsOf: Record<string, Value[]> = { number: [0, 1, 5, -0], string: ['', '5', '1', 'true', '0'], bool: [false, true] };
        const cases: Case[] = [];
        for (const [ct, { values, ops }] of Object.entries(byType))
          for (const [at, attrs] of Object.entries(attrsOf)) {
            if (at === ct) continue;
            for (const op of ops) for (const v of values) for (const a of attrs) cases.push({ label: `${ct} constraint vs ${at} attr: ${caseLabel(op, v, a)}`, constraint: c('x', op, v), attr: a, expected: false });
          }
        return checkCases(m, cases);
      }));

    it('[C3] an absent attribute satisfies no constraint on its name, ne included', () =>
      open((m) => {
        const cases: Case[] = [];
        const all: Array<[Op, Value | undefined]> = [
          ['eq', 1], ['ne', 1], ['lt', 1], ['le', 1], ['gt', 1], ['ge', 1], ['eq', true], ['ne', false], ['lt', true], ['ge', false],
          ['eq', ''], ['ne', 'a'], ['prefix', ''], ['suffix', ''], ['contains', ''], ['exists', undefined],
        ];
        for (const [op, v] of all) cases.push({ label: caseLabel(op, v, undefined), constraint: c('x', op, v), attr: undefined, others: { y: 1, z: 'a', w: true }, expected: false });
        return checkCases(m, cases);
      }));

    it('[C13] exists is satisfied by any type, including 0, -0, false and the empty string', () =>
      open((m) => {
        const values: Value[] = [0, -0, 1, Number.MAX_VALUE, -Number.MAX_VALUE, Number.MIN_VALUE, 2 ** 53, false, true, '', 'x', '😀', '東京'];
        return checkCases(m, values.map((a) => ({ label: caseLabel('exists', undefined, a), constraint: c('x', 'exists'), attr: a, expected: true })));
      }));

    it('[C14] several constraints on one name: ranges, equal bounds, contradictions, mixed types', () =>
      open(async (m) => {
        m.add(sub('range', 'd', { constraints: [c('t', 'ge', 10), c('t', 'lt', 20)] }));
        m.add(sub('point', 'd', { constraints: [c('t', 'ge', 15), c('t', 'le', 15)] }));
        m.add(sub('never', 'd', { constraints: [c('t', 'lt', 0), c('t', 'gt', 1)] }));
        m.add(sub('mixed', 'd', { constraints: [c('t', 'eq', 15), c('t', 'eq', '15')] }));
        m.add(sub('twice', 'd', { constraints: [c('t', 'eq', 15), c('t', 'eq', 15), c('t', 'exists')] }));
        m.add(sub('notin', 'd', { constraints: [c('t', 'ne', 15), c('t', 'ne', 16), c('t', 'gt', 0)] }));
        m.add(sub('strs', 'd', { constraints: [c('s', 'prefix', '東'), c('s', 'suffix', '京'), c('s', 'contains', '東京')] }));
        const want: Array<[Value, string[]]> = [
          [9.999999999999998, ['notin']],
          [10, ['notin', 'range']],
          [15, ['point', 'range', 'twice']],
          [16, ['range']],
          [19.999999999999996, ['notin', 'range']],
          [20, ['notin']],
          [0.5, ['notin']],
          [-0, []],
          ['15', []],
          [true, []],
        ];
        for (const [t, expected] of want) assert.deepEqual(await ids(m, ev({ t })), expected, `t = ${show(t)}`);
        assert.deepEqual(await ids(m, ev({ s: '東京' })), ['strs']);
        assert.deepEqual(await ids(m, ev({ s: '東京' + '京' })), ['strs']);
        assert.deepEqual(await ids(m, ev({ s: '東' })), [], 'prefix and suffix may not overlap into one char');
        assert.deepEqual(await ids(m, ev({ s: '東x京' })), []);
      }));

    it('[C1] names are exact: case, normalisation, and JavaScript property names are ordinary names', () =>
      open(async (m) => {
        const names = ['constructor', '__proto__', 'toString', 'hasOwnProperty', 'valueOf', 'é', 'e\u0301', 'A', 'a', '0', '1', 'a.b', ' ', '東京', '😀', 'x'.repeat(64)];
        for (const n of names) m.add(sub(`s:${n}`, 'd', { constraints: [c(n, 'exists')] }));
        m.add(sub('eqproto', 'd', { constraints: [c('__proto__', 'eq', 5)] }));
        m.add(sub('nector', 'd', { constraints: [c('constructor', 'ne', 'x')] }));
        assert.deepEqual(await ids(m, ev({ b: 1 })), [], 'inherited properties are not attributes');
        for (const n of names) {
          const attrs = JSON.parse(JSON.stringify({ [n]: 7 })) as Record<string, Value>; // an own '__proto__' key, as JSON input yields
          assert.deepEqual(await ids(m, ev(attrs)), [`s:${n}`], `name ${JSON.stringify(n)}`);
        }
        const proto = JSON.parse('{"__proto__": 5}') as Record<string, Value>;
        assert.deepEqual(await ids(m, ev(proto)), ['eqproto', 's:__proto__']);
        assert.deepEqual(await ids(m, ev({ constructor: 'y' })), ['nector', 's:constructor']);
      }));

    it('[C15][R1] a zero-constraint filter matches every event its area admits', () =>
      open(async (m) => {
        m.add(sub('all', 'd', { constraints: [] }));
        m.add(sub('omitted', 'd', { constraints: undefined as unknown as Constraint[] }));
        m.add(sub('near', 'd', { constraints: [], area: fixed(1000, 0, 0) }));
        assert.deepEqual(await ids(m, ev({})), ['all', 'near', 'omitted']);
        assert.deepEqual(await ids(m, ev({ a: 1, b: 'x', c: false })), ['all', 'near', 'omitted']);
        assert.deepEqual(await ids(m, ev({}, 0, 1)), ['all', 'omitted']);
      }));

    it('[R1][C4] a filter needs every constraint; a subscription any filter', () =>
      open(async (m) => {
        m.add(sub('and', 'd', { constraints: [c('a', 'eq', 1), c('b', 'eq', 'x'), c('c', 'eq', true)] }));
        m.add(sub('or', 'd', { constraints: [c('a', 'eq', 1)] }, { constraints: [c('b', 'eq', 'x')] }));
        assert.deepEqual(await ids(m, ev({ a: 1, b: 'x', c: true })), ['and', 'or']);
        assert.deepEqual(await ids(m, ev({ a: 1, b: 'x', c: false })), ['or']);
        assert.deepEqual(await ids(m, ev({ a: 1, b: 'x' })), ['or']);
        assert.deepEqual(await ids(m, ev({ b: 'x' })), ['or']);
        assert.deepEqual(await ids(m, ev({ a: 2, b: 'y' })), []);
      }));
  });
}
