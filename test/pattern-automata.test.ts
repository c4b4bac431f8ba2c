/**
 * src/model/pattern.ts: the automata of like and regex (docs/semantics.md C16-C18, V13) against
 * oracles that share no code with them: JavaScript's RegExp under the flags `su` for regex, and a
 * RegExp rewrite of SQL LIKE, on thousands of seeded random patterns and strings (multi-byte,
 * astral, line breaks, empty); every rejection rule; minimality and the dead state.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { DEFAULT_LIMITS, validateSubscription } from '../src/model/limits.js';
import { type Dfa, PatternError, classOf, compilePattern, dfaMatches } from '../src/model/pattern.js';
import { throwsAt } from './support/assertions.js';
import { likeOracle } from './support/contract/patterns.js';
import { Rng } from './support/rng.js';

const ALPHA = ['a', 'b', 'é', '🚑', '\n', '東'];

function randomRegex(r: Rng, depth = 0): string {
  const atom = (): string => {
    const x = r.next();
    if (x < 0.35) return r.pick(ALPHA);
    if (x < 0.45) return '.';
    if (x < 0.55) return r.pick(['\\d', '\\w', '\\s', '\\W', '\\S', '\\.', '\\*', '\\u00e9', '\\u{1F691}', '\\x61', '\\n', '\\uD83D\\uDE91']);
    if (x < 0.7) return `[${r.chance(0.3) ? '^' : ''}${r.pick(['a-c', 'é', '🚑-🚒', 'a\\d', '東a', '\\-b', 'b-é', '\\s\\w', ''])}]`;
    if (depth < 3) return `(${r.chance(0.5) ? '?:' : ''}${randomRegex(r, depth + 1)})`;
    return r.pick(ALPHA);
  };
  let s = '';
  for (let i = 0, n = 1 + r.int(3); i < n; i++) s += atom() + r.pick(['', '', '', '*', '+', '?', '{2}', '{0,2}', '{1,}', '*?', '{0}', '+?']);
  if (r.chance(0.2)) s += `|${randomRegex(r, depth + 1)}`;
  return s;
}

function randomString(r: Rng): string {
  let s = '';
  for (let i = 0, n = r.int(8); i < n; i++) s += r.pick([...ALPHA, 'c', '1', ' ', '.', '\u2028', '%', '_', '\\']);
  return s;
}

describe('pattern automata', () => {
  it('[C17] regex: the same answer as JavaScript RegExp with flags su, on seeded random patterns and strings', () => {
    const r = new Rng(20261127);
    let compared = 0;
    let matched = 0;
    for (let k = 0; k < 1000; k++) {
      let p = randomRegex(r);
      if (r.chance(0.2)) p = `^${p}`;
      if (r.chance(0.2)) p = `${p}$`;
      let d: Dfa;
      try {
        d = compilePattern('regex', p, 255);
      } catch (err) {
        // The generator writes only supported syntax; the one way out is a pattern past 255 states.
        assert.ok(err instanceof PatternError && /states|too complex|runs of characters/.test(err.rule), `${JSON.stringify(p)}: ${String(err)}`);
        continue;
      }
      const re = new RegExp(p, 'su');
      for (let j = 0; j < 40; j++) {
        const s = randomString(r);
        const want = re.test(s);
        assert.equal(dfaMatches(d, s), want, `regex ${JSON.stringify(p)} on ${JSON.stringify(s)}`);
        compared++;
        if (want) matched++;
      }
    }
    assert.ok(compared > 30_000 && matched > compared / 10 && matched < compared - compared / 10, `${compared} compared, ${matched} matched`);
  });

  it('[C16] like: the same answer as a RegExp rewrite of SQL LIKE', () => {
    const r = new Rng(7);
    let compared = 0;
    for (let k = 0; k < 2500; k++) {
      let p = '';
      for (let i = 0, n = r.int(7); i < n; i++) p += r.pick(['%', '_', 'a', 'b', 'é', '🚑', '\\%', '\\_', '\\\\', '\n', '.', '*']);
      const d = compilePattern('like', p, 255);
      const re = likeOracle(p);
      for (let j = 0; j < 24; j++) {
        const s = r.chance(0.2) ? r.pick(['', '%', '_', '\\', 'a%b', 'a_b', '🚑🚑']) : randomString(r);
        assert.equal(dfaMatches(d, s), re.test(s), `like ${JSON.stringify(p)} on ${JSON.stringify(s)}`);
        compared++;
      }
    }
    assert.ok(compared === 60_000);
  });

  it('[C17] documented facts: anchors, alternation, classes, escapes, repeats', () => {
    const t = (p: string, s: string) => dfaMatches(compilePattern('regex', p, 255), s);
    assert.equal(t('', ''), true, 'the empty pattern matches everything');
    assert.equal(t('^$', ''), true);
    assert.equal(t('^$', 'a'), false);
    assert.equal(t('^a|b$', 'xb'), true, '$ belongs to the last alternative');
    assert.equal(t('^a|b$', 'ax'), true, '^ belongs to the first alternative');
    assert.equal(t('^(?:a|b)$', 'ab'), false);
    assert.equal(t('.', '\n'), true, '. matches line breaks (flag s)');
    assert.equal(t('^.$', '🚑'), true, 'an astral code point is one character');
    assert.equal(t('^\\uD83D\\uDE91$', '🚑'), true, 'a surrogate pair of escapes is one code point');
    assert.equal(t('^[^a]$', '🚑'), true);
    assert.equal(t('^x{0}$', ''), true);
    assert.equal(t('^a{2,3}$', 'aaaa'), false);
    assert.equal(t('\\$', 'a$'), true, 'an escaped $ is a literal');
    assert.equal(t('^\\\\$', '\\'), true, 'an escaped backslash before a closing $');
    assert.equal(t('[\\b]', '\b'), true, '\\b inside a class is U+0008');
    assert.equal(t('\\s', '\u3000'), true);
    assert.equal(t('\\w', 'é'), false, '\\w is ASCII');
  });

  it('[V13] rejections name the construct and where it is', () => {
    const bad: Array<[ 'like' | 'regex', string, RegExp]> = [
      ['like', 'a\\b', /escape/],
      ['like', 'a\\', /trailing/],
      ['regex', '(?=a)', /lookaround/],
      ['regex', '(?!a)', /lookaround/],
      ['regex', '(?<=a)b', /lookaround/],
      ['regex', '(?<n>a)', /named groups/],
      ['regex', '(a)\\1', /back-references/],
      ['regex', '\\k<n>', /named back-references/],
      ['regex', '\\bx', /word boundaries/],
      ['regex', '\\B', /word boundaries/],
      ['regex', '\\p{L}', /property/],
      ['regex', '\\cA', /unknown escape/],
      ['regex', '\\-', /outside a class/],
      ['regex', 'a^b', /\^ may only open/],
      ['regex', 'a$b', /\$ may only close/],
      ['regex', '(a', /unbalanced \(/],
      ['regex', 'a)', /unbalanced \)/],
      ['regex', '[a', /unbalanced \[/],
      ['regex', 'a]', /lone \]/],
      ['regex', 'a}', /lone \}/],
      ['regex', '*a', /nothing to repeat/],
      ['regex', 'a**', /nothing to repeat/],
      ['regex', 'a{2}{3}', /nothing to repeat/],
      ['regex', 'x{', /starts no quantifier/],
      ['regex', 'a{101}', /above 100/],
      ['regex', 'a{3,2}', /out of order/],
      ['regex', '[z-a]', /out of order/],
      ['regex', '[\\d-z]', /class escape/],
      ['regex', '\\u{110000}', /above 10FFFF/],
      ['regex', '\\x4', /hex digits/],
      ['regex', '\\01', /\\0 followed by a digit/],
    ];
    for (const [kind, p, why] of bad) {
      assert.throws(() => compilePattern(kind, p, 128), (e: unknown) => e instanceof PatternError && why.test(e.rule), `${kind} ${JSON.stringify(p)}`);
      // JavaScript rejects the regex ones too, except the ones that are ours alone (anchors inside, lookaround, ...).
    }
    // Anchored at the end, the 13th code point from the end must be remembered: 2^13 sets of
    // states, none covering another, so the construction passes its bound before minimising.
    assert.throws(() => compilePattern('regex', '(a|b)*a(a|b){12}$', 128), (e: unknown) => e instanceof PatternError && /too complex to compile \(its automaton passes 512 states/.test(e.rule));
    assert.throws(() => compilePattern('regex', '^(a|b)*a(a|b){5}$', 40), (e: unknown) => e instanceof PatternError && /needs more than 40 states \(it needs 65\)/.test(e.rule));
    // Classes: at most 64 runs of code points told apart (each is a column of the tables).
    const runs = (n: number) => `[${Array.from({ length: n }, (_, k) => String.fromCodePoint(0x4e00 + 2 * k)).join('')}]`;
    compilePattern('regex', runs(31), 128);
    assert.throws(() => compilePattern('regex', runs(32), 128), (e: unknown) => e instanceof PatternError && /65 runs of characters, more than 64/.test(e.rule));
    assert.throws(() => compilePattern('regex', '(?:(?:a{100}){100}){100}', 255), (e: unknown) => e instanceof PatternError && /too large/.test(e.rule), 'a repeat that expands past the NFA bound');
    // A pattern whose construction would take long is refused quickly (the work is bounded).
    const slow = '(.+?){0,2}(?:(?:([^b-é]+?[東a]{0,2}|a\n+)?[^b-é]{2}(?:a{1,}[^\\s\\w]*?){1,})*🚑{1,}|b{2}){2}b+?|(b{2}(?:東|é*\n+?|.+[🚑-🚒]é{2})*?\\u00e9+?){0,2}';
    assert.throws(() => compilePattern('regex', slow, 255), (e: unknown) => e instanceof PatternError && /too complex/.test(e.rule));
    // Minimising is charged to the same budget: a pattern whose subset automaton is large but under
    // its bound is refused quickly too (it took seconds when minimisation was not counted).
    const wide = `^(?:(?:[${Array.from({ length: 30 }, (_, k) => String.fromCodePoint(0x61 + 2 * (k % 13)) ).join('')}]){15}){30}$`;
    assert.throws(() => compilePattern('regex', wide, 128), (e: unknown) => e instanceof PatternError && /too complex/.test(e.rule));
  });

  it('[V13] the patterns of one subscription share a bound on compilation work; a refused pattern is refused again', () => {
    const cls = "!#%'13579;=ACEGIKMOQSUWY¡£¥";
    const filters = Array.from({ length: 40 }, (_, i) => ({ constraints: [{ name: 'n', op: 'regex' as const, value: `^[${cls}]{0,${40 + i}}$` }] }));
    // Each compiles alone; together they pass the subscription's bound, and the filter where it
    // runs out is named.
    validateSubscription({ id: 'one', owner: 'o', filters: filters.slice(39) }, DEFAULT_LIMITS);
    const e = throwsAt(() => validateSubscription({ id: 'x', owner: 'o', filters }, DEFAULT_LIMITS), 'subscription.filters[31].constraints[0].value');
    assert.match(e.rule, /together take too much work/);
    // Patterns already compiled cost nothing the next time: the same filters again, one by one.
    for (let i = 0; i < 40; i++) validateSubscription({ id: `s${i}`, owner: 'o', filters: [filters[i]] }, DEFAULT_LIMITS);
    validateSubscription({ id: 'again', owner: 'o', filters }, DEFAULT_LIMITS);
    const bad = { id: 'b', owner: 'o', filters: [{ constraints: [{ name: 'n', op: 'regex' as const, value: '(a|b)*a(a|b){12}$' }] }] };
    for (let k = 0; k < 2; k++) throwsAt(() => validateSubscription(bad, DEFAULT_LIMITS), 'subscription.filters[0].constraints[0].value', 'INVALID_ARGUMENT', `attempt ${k}`);
  });

  it('[V13] a search remembers only what decides it: patterns whose sets of states explode but whose minimal automaton is small compile', () => {
    // Each was refused before the sets were reduced by simulation: the subset construction tracked
    // every position it could be at (2^12 sets for the first), where the earliest one decides.
    const cases: [string, number, number][] = [
      ['(a|b)*a(a|b){12}', 128, 14],
      ['(a|b)*a(a|b){12}', 14, 14],
      ['a[ab]{20}', 64, 22],
      ['(a|b){2,3}', 3, 3],
      ['[\\s\\S]{0,100}', 255, 1],
      ['.{0,80}x', 255, 2],
      ['a.{30}', 255, 32],
      ['x[ab]{0,30}y', 255, 33],
    ];
    const r = new Rng(1313);
    for (const [p, max, states] of cases) {
      const d = compilePattern('regex', p, max);
      assert.equal(d.states, states, `${p}: states`);
      const re = new RegExp(p, 'su');
      for (let k = 0; k < 3000; k++) {
        let s = '';
        for (let i = 0, n = r.int(40); i < n; i++) s += r.chance(0.15) ? r.pick(['c', 'x', 'y', '東', '\n']) : r.pick(['a', 'b']);
        assert.equal(dfaMatches(d, s), re.test(s), `${p} on ${JSON.stringify(s)}`);
      }
    }
    // Seeded random patterns built both ways, from the sets as they come and from sets reduced by
    // simulation: one automaton (the minimal one is unique), and the same answers as RegExp.
    const g = new Rng(271127);
    let both = 0;
    let reducedOnly = 0;
    for (let k = 0; k < 1500; k++) {
      let p = randomRegex(g);
      if (g.chance(0.2)) p = `^${p}`;
      if (g.chance(0.2)) p = `${p}$`;
      const refusals: string[] = [];
      const tryCompile = (reduction: 'never' | 'always'): Dfa | null => {
        try {
          return compilePattern('regex', p, 255, undefined, reduction);
        } catch (err) {
          assert.ok(err instanceof PatternError && /states|too complex|runs of characters/.test(err.rule), `${JSON.stringify(p)}: ${String(err)}`);
          refusals.push(err.rule);
          return null;
        }
      };
      const plain = tryCompile('never');
      const reduced = tryCompile('always');
      // Reducing costs work of its own (the simulation), so only the work bound may refuse a
      // pattern that its plain sets would build.
      if (plain !== null && reduced === null) assert.match(refusals[0], /takes too much work/, `${p}: refused only when reduced`);
      if (reduced === null) continue;
      if (plain !== null) {
        assert.deepEqual(reduced, plain, `${p}: one automaton either way`);
        both++;
      } else reducedOnly++;
      const re = new RegExp(p, 'su');
      for (let j = 0; j < 30; j++) {
        const s = randomString(g);
        assert.equal(dfaMatches(reduced, s), re.test(s), `regex ${JSON.stringify(p)} on ${JSON.stringify(s)}`);
      }
    }
    assert.ok(both > 1000 && reducedOnly > 0, `${both} built both ways, ${reducedOnly} only reduced`);
    // What must remember every position is still refused: an a exactly ten code points before a c.
    assert.throws(() => compilePattern('regex', '(?:a|b)*a(?:a|b){9}c', 255), (e: unknown) => e instanceof PatternError && /too complex|more than 255 states/.test(e.rule));
  });

  it('[C18] minimal: one language, one automaton, and a dead state that loops', () => {
    const size = (k: 'like' | 'regex', p: string) => {
      const d = compilePattern(k, p, 255);
      return [d.states, d.classes];
    };
    assert.deepEqual(size('regex', 'a|a'), size('regex', 'a'));
    assert.deepEqual(size('regex', '^(?:a|b)*$'), size('regex', '^[ab]*$'));
    assert.deepEqual(size('like', '%'), [1, 1]);
    assert.deepEqual(size('regex', ''), [1, 1]);
    assert.deepEqual(size('regex', '^a{3}$'), size('like', 'aaa'));
    const d = compilePattern('like', 'a%', 255);
    assert.ok(d.dead >= 0 && d.accept[d.dead] === 0);
    for (let c = 0; c < d.classes; c++) assert.equal(d.next[d.dead * d.classes + c], d.dead, 'the dead state loops');
    assert.equal(dfaMatches(d, `b${'a'.repeat(10_000)}`), false);
    assert.equal(compilePattern('regex', 'a', 255).dead, -1, 'a search never dies');
  });

  it('classOf agrees with the bounds: classes are runs of code points treated alike', () => {
    const d = compilePattern('regex', '^[b-d][é🚑]$', 255);
    for (const [cp, other] of [[0x61, 0x62], [0x62, 0x64], [0x65, 0x64], [0x62, 0xe9]]) {
      const same = classOf(d, cp) === classOf(d, other);
      assert.equal(same, cp === 0x62 && other === 0x64, `${cp.toString(16)} vs ${other.toString(16)}`);
    }
    // é and 🚑 behave alike but are not neighbours: two classes (only neighbours merge).
    assert.notEqual(classOf(d, 0xe9), classOf(d, 0x1f691));
    assert.deepEqual([...d.bounds], [0x62, 0x65, 0xe9, 0xea, 0x1f691, 0x1f692], 'runs: below b, b-d, up to é, é, up to 🚑, 🚑, above');
    assert.equal(classOf(d, 0), 0);
    assert.equal(classOf(d, 0x10ffff), d.classes - 1);
  });
});
