/**
 * Pattern constraints (docs/semantics.md C16-C18, V13): `like` and `regex` on every engine,
 * against oracles that share nothing with the engines' automata: `like` rewritten as a
 * JavaScript RegExp, and `regex` run by JavaScript's own RegExp under the flags `su` (the meaning
 * C17 gives it), over multi-byte, astral, empty and line-break strings.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { type Case, c, caseLabel, checkCases, type ContractContext, ev, ids, sub } from './common.js';
import { throwsAt } from '../assertions.js';
import { STRING_EDGES } from '../values.js';

/** SQL LIKE as a JavaScript RegExp over code points (`%` any run, `_` one code point, `\` escapes). */
export function likeOracle(p: string): RegExp {
  let src = '';
  const cps = [...p];
  for (let i = 0; i < cps.length; i++) {
    const ch = cps[i];
    if (ch === '\\') src += cps[++i].replace(/[\\^$.*+?()[\]{}|/-]/g, '\\$&');
    else if (ch === '%') src += '[\\s\\S]*';
    else if (ch === '_') src += '[\\s\\S]';
    else src += ch.replace(/[\\^$.*+?()[\]{}|/-]/g, '\\$&');
  }
  return new RegExp(`^(?:${src})$`, 'su');
}

const LIKES = ['', '%', '_', '__', 'a%', '%a', '%a%', 'a_b', '%😀%', '_😀', '東%', '%京', '東_', 'café', 'caf_', 'e\u0301', '\\%', '%\\_%', '\\\\', 'a%b%', '%%', '_%_', '%\n%'];
const REGEXES = ['', 'a', '^a', 'a$', '^a$', '^$', '.', '^.$', '^..$', '😀', '^😀+$', '[a-c]', '[^a]', '^[^a]*$', '東京?', '(?:東|京)+$', '\\w+', '^\\W', '\\d', '\\s', 'é|e\\u0301', '^.{2,3}$', '\\u{1F600}', '[\\u00ff-\\u0100]', 'b?$', 'x*', '(a|)b', '[😀-😁]', '\\n'];
const ATTRS = [...STRING_EDGES, 'a\nb', '\n', 'abab', 'aaa', '%', '_', '\\', 'x%y', 'cafe', 'a_b', 'a1_', '東京京'];

export function patternRules({ open }: ContractContext): void {
  describe('patterns', () => {
    it('[C16] like over code points, against a RegExp rewrite of SQL LIKE', () =>
      open((m) => {
        const cases: Case[] = [];
        for (const p of LIKES) {
          const re = likeOracle(p);
          for (const a of ATTRS) cases.push({ label: caseLabel('like', p, a), constraint: c('x', 'like', p), attr: a, expected: re.test(a) });
        }
        return checkCases(m, cases);
      }));

    it('[C17] regex searches like JavaScript with flags su; ^ and $ anchor', () =>
      open((m) => {
        const cases: Case[] = [];
        for (const p of REGEXES) {
          const re = new RegExp(p, 'su');
          for (const a of ATTRS) cases.push({ label: caseLabel('regex', p, a), constraint: c('x', 'regex', p), attr: a, expected: re.test(a) });
        }
        return checkCases(m, cases);
      }));

    it('[C16][C17][C2][C3] patterns hold only for strings, and never for an absent attribute', () =>
      open((m) =>
        checkCases(m, [
          { label: 'like % vs a number', constraint: c('x', 'like', '%'), attr: 1, expected: false },
          { label: 'regex "" vs a bool', constraint: c('x', 'regex', ''), attr: true, expected: false },
          { label: 'like % vs absent', constraint: c('x', 'like', '%'), attr: undefined, others: { y: 'a' }, expected: false },
          { label: 'regex "" vs absent', constraint: c('x', 'regex', ''), attr: undefined, others: { y: 'a' }, expected: false },
          { label: 'like % vs the empty string', constraint: c('x', 'like', '%'), attr: '', expected: true },
        ]),
      ));

    it('[C18] a pattern that backtracking engines take exponential time on is one pass of the automaton', () =>
      open(async (m) => {
        m.add(sub('nested', 'd', { constraints: [c('s', 'regex', '^(a+)+$')] }));
        m.add(sub('alt', 'd', { constraints: [c('s', 'regex', '^(a|a)*b$')] }));
        m.add(sub('like', 'd', { constraints: [c('s', 'like', '%a%a%a%a%a%a%a%b')] }));
        const long = 'a'.repeat(900) + '!';
        assert.deepEqual(await ids(m, ev({ s: long })), []);
        assert.deepEqual(await ids(m, ev({ s: 'a'.repeat(900) })), ['nested']);
        assert.deepEqual(await ids(m, ev({ s: `${'a'.repeat(900)}b` })), ['alt', 'like']);
      }));

    it('[C16][C17][C14] patterns combine with other constraints on one name and within a filter', () =>
      open(async (m) => {
        m.add(sub('plate', 'd', { constraints: [c('plate', 'regex', '^[A-Z]{2}[0-9]{3}$'), c('plate', 'prefix', 'M')] }));
        m.add(sub('accident', 'd', { constraints: [c('kind', 'like', '%accident%'), c('severity', 'gt', 2)] }));
        assert.deepEqual(await ids(m, ev({ plate: 'MI123' })), ['plate']);
        assert.deepEqual(await ids(m, ev({ plate: 'TO123' })), []);
        assert.deepEqual(await ids(m, ev({ plate: 'MI1234' })), []);
        assert.deepEqual(await ids(m, ev({ kind: 'road accident', severity: 3 })), ['accident']);
        assert.deepEqual(await ids(m, ev({ kind: 'road accident', severity: 2 })), []);
        assert.deepEqual(await ids(m, ev({ kind: 'Accident', severity: 3 })), [], 'case-sensitive');
      }));

    it('[V13] bad patterns are rejected naming .value, with the reason; nothing is added', () =>
      open(async (m) => {
        const F = 'subscription.filters[0].constraints[0].value';
        const bad: Array<[string, string, string]> = [
          ['like', 'a\\b', 'escape'],
          ['like', 'a\\', 'escape'],
          ['regex', '(a', ''],
          ['regex', 'a)', ''],
          ['regex', '[a', ''],
          ['regex', '(a)\\1', ''],
          ['regex', '(?=a)', ''],
          ['regex', '(?<n>a)', ''],
          ['regex', '\\bword', ''],
          ['regex', '\\p{L}', ''],
          ['regex', 'a^b', '^'],
          ['regex', 'a$b', '$'],
          ['regex', '*a', ''],
          ['regex', 'a{101}', ''],
          ['regex', 'a{3,2}', ''],
          ['regex', '[z-a]', ''],
          ['regex', '(a|b)*a(a|b){12}$', 'states'],
        ];
        for (const [op, p, why] of bad) {
          const err = throwsAt(() => m.add(sub('bad', 'd', { constraints: [c('x', op as 'like', p)] })), F, 'INVALID_ARGUMENT', `${op} ${JSON.stringify(p)}`);
          if (why !== '') assert.match(err.message, new RegExp(why.replace(/[\\^$*]/g, '\\$&')), `${op} ${JSON.stringify(p)}: ${err.message}`);
        }
        // maxPatternBytes (256) counts UTF-8 bytes: 85 three-byte characters and '%' are exactly 256.
        throwsAt(() => m.add(sub('long', 'd', { constraints: [c('x', 'like', `%${'東'.repeat(85)}_`)] })), F, 'INVALID_ARGUMENT', '257-byte pattern');
        m.add(sub('edge', 'd', { constraints: [c('x', 'like', `%${'東'.repeat(85)}`)] }));
        assert.equal(m.has('bad') || m.has('long'), false);
        assert.deepEqual(await ids(m, ev({ x: `a${'東'.repeat(85)}` })), ['edge']);
      }));
  });
}
