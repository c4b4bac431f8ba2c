/**
 * src/model/pattern.ts on its own: `like` and `regex` compiled to minimal DFAs over code points.
 *
 * Oracles that share no code with the module: JavaScript's RegExp with the flags `su` for regex,
 * and a backtracking LIKE matcher over arrays of code points written here. Seeded random patterns
 * from the supported grammar (and mutations of them, to exercise the parser against RegExp's own
 * syntax checks), random strings over multi-byte, astral, white-space and syntax characters,
 * fixed cases, every rejection rule, and structural checks of the automata: minimal (reachable,
 * pairwise distinguishable), neighbouring classes distinct, the dead state, `classOf`, and the
 * state limit (exact on typical patterns).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { type Dfa, type PatternKind, PatternError, classOf, compilePattern, dfaMatches } from '../src/model/pattern.js';

// ------------------------------------------------------------------ seeded randomness

/** mulberry32: a tiny seeded PRNG, so every run draws the same cases. */
function prng(seed: number): { next(): number; int(n: number): number; pick<T>(xs: readonly T[]): T; chance(p: number): boolean } {
  let a = seed >>> 0;
  const next = (): number => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const int = (n: number): number => Math.floor(next() * n);
  return { next, int, pick: (xs) => xs[int(xs.length)], chance: (p) => next() < p };
}
type Rng = ReturnType<typeof prng>;

// ------------------------------------------------------------------ oracles

/** SQL LIKE over code points by backtracking (memoised), independent of the module. */
function likeOracle(pattern: string, s: string): boolean {
  type Tok = { k: 'any' } | { k: 'one' } | { k: 'lit'; cp: number };
  const toks: Tok[] = [];
  const p = Array.from(pattern, (ch) => ch.codePointAt(0)!);
  for (let i = 0; i < p.length; i++) {
    if (p[i] === 0x5c) toks.push({ k: 'lit', cp: p[++i] });
    else if (p[i] === 0x25) toks.push({ k: 'any' });
    else if (p[i] === 0x5f) toks.push({ k: 'one' });
    else toks.push({ k: 'lit', cp: p[i] });
  }
  const c = Array.from(s, (ch) => ch.codePointAt(0)!);
  const memo = new Map<number, boolean>();
  const go = (i: number, j: number): boolean => {
    const key = i * (c.length + 1) + j;
    const known = memo.get(key);
    if (known !== undefined) return known;
    let r: boolean;
    if (i === toks.length) r = j === c.length;
    else {
      const t = toks[i];
      if (t.k === 'any') r = go(i + 1, j) || (j < c.length && go(i, j + 1));
      else if (j === c.length) r = false;
      else r = (t.k === 'one' || t.cp === c[j]) && go(i + 1, j + 1);
    }
    memo.set(key, r);
    return r;
  };
  return go(0, 0);
}

const regexOracle = (p: string, s: string): boolean => new RegExp(p, 'su').test(s);

// ------------------------------------------------------------------ generators

/** Literals outside a class (no syntax characters, no `}`/`]`, which u-mode rejects bare). */
const LIT = ['a', 'b', 'c', 'é', '🚑', '東', '\n', ' ', '-', '/', ',', '1', '_', 'Z', '%'];
const ESC = ['\\\\', '\\.', '\\*', '\\+', '\\?', '\\(', '\\)', '\\[', '\\]', '\\{', '\\}', '\\|', '\\^', '\\$', '\\/', '\\t', '\\n', '\\r', '\\f', '\\v', '(?:\\0)', '\\u00e9', '\\u{1F691}', '\\u{61}', '\\x61', '\\uD83D\\uDE91', '\\u6771'];
const CLS = ['\\d', '\\D', '\\w', '\\W', '\\s', '\\S', '.'];
/** Range ends in code point order (raw and escaped spellings), and single class members. */
const ENDS = ['\\0', '0', '9', 'a', '\\x62', 'c', 'z', 'é', '\\u00fc', '東', '🚑', '\\u{1F692}'];
const ENDS_CP = [0, 0x30, 0x39, 0x61, 0x62, 0x63, 0x7a, 0xe9, 0xfc, 0x6771, 0x1f691, 0x1f692];
const IN_CLASS = ['a', 'b', 'é', '🚑', '\n', ' ', '.', '*', '$', '(', '|', '\\-', '\\]', '\\[', '\\\\', '\\^', '\\b', '\\t', '\\d', '\\w', '\\s', '\\D', '\\W', '\\S', '\\u00e9', '東'];
const QUANT = ['*', '+', '?', '{2}', '{0,2}', '{1,}', '{0}', '{1,3}', '{3}'];

function genClass(r: Rng): string {
  let s = r.chance(0.3) ? '[^' : '[';
  if (r.chance(0.1)) s += '-';
  for (let i = 0, n = r.int(4); i < n; i++) {
    if (r.chance(0.35)) {
      const a = r.int(ENDS.length);
      const b = a + r.int(ENDS.length - a);
      s += `${ENDS[a]}-${ENDS[b]}`;
    } else s += r.pick(IN_CLASS);
  }
  if (r.chance(0.1)) s += '-';
  return `${s}]`;
}

function genRegex(r: Rng, depth = 0): string {
  const atom = (): string => {
    const x = r.next();
    if (x < 0.4) return r.pick(LIT);
    if (x < 0.5) return r.pick(ESC);
    if (x < 0.62) return r.pick(CLS);
    if (x < 0.78) return genClass(r);
    if (depth < 3) return `(${r.chance(0.5) ? '?:' : ''}${genRegex(r, depth + 1)})`;
    return r.pick(LIT);
  };
  const alts: string[] = [];
  do {
    let seq = '';
    for (let i = 0, n = r.int(4); i < n; i++) seq += atom() + (r.chance(0.35) ? r.pick(QUANT) + (r.chance(0.2) ? '?' : '') : '');
    alts.push(seq);
  } while (alts.length < 3 && r.chance(0.25));
  return alts.join('|');
}

const STR_CHARS = ['a', 'b', 'c', 'é', 'ü', 'ö', '🚑', '🚒', '東', '\n', '\t', ' ', '\u00a0', '\u2028', '\u3000', '\ufeff', '\u200b', '\0', '\b', '0', '1', '9', '_', 'Z', '-', '/', ',', '.', '*', '$', '^', '\\', '(', ')', '[', ']', '{', '}', '|', '%', 'x'];

/** A string over a few characters (few, so that patterns match often enough to be tested both ways). */
function genString(r: Rng, alphabet: readonly string[]): string {
  let s = '';
  for (let i = 0, n = r.chance(0.1) ? 0 : r.int(9); i < n; i++) s += r.pick(alphabet);
  return s;
}

function subAlphabet(r: Rng, from: readonly string[]): string[] {
  return Array.from({ length: 3 + r.int(4) }, () => r.pick(from));
}

/** A string LIKE `p` would match (% and _ filled in from the alphabet), or, half the time, one code point off. */
function likeInstance(r: Rng, p: string, alphabet: readonly string[]): string {
  const out: string[] = [];
  const cps = [...p];
  for (let i = 0; i < cps.length; i++) {
    if (cps[i] === '\\') out.push(cps[++i]);
    else if (cps[i] === '%') for (let n = r.int(3); n > 0; n--) out.push(r.pick(alphabet));
    else if (cps[i] === '_') out.push(r.pick(alphabet));
    else out.push(cps[i]);
  }
  if (r.chance(0.5)) {
    const at = r.int(out.length + 1);
    if (r.chance(0.5) && out.length > 0) out.splice(Math.min(at, out.length - 1), 1, ...(r.chance(0.5) ? [r.pick(alphabet)] : []));
    else out.splice(at, 0, r.pick(alphabet));
  }
  return out.join('');
}

// ------------------------------------------------------------------ structural checks

/** Minimal: every state reachable from start, and every two states distinguishable (table filling). */
function assertMinimal(d: Dfa, label: string): void {
  const S = d.states;
  const C = d.classes;
  const seen = new Uint8Array(S);
  const queue = [d.start];
  seen[d.start] = 1;
  for (let q = 0; q < queue.length; q++) {
    for (let c = 0; c < C; c++) {
      const t = d.next[queue[q] * C + c];
      if (!seen[t]) (seen[t] = 1), queue.push(t);
    }
  }
  assert.equal(queue.length, S, `${label}: every state is reachable`);
  const dist = new Uint8Array(S * S);
  for (let p = 0; p < S; p++) for (let q = 0; q < S; q++) dist[p * S + q] = d.accept[p] !== d.accept[q] ? 1 : 0;
  for (let changed = true; changed; ) {
    changed = false;
    for (let p = 0; p < S; p++) {
      for (let q = p + 1; q < S; q++) {
        if (dist[p * S + q]) continue;
        for (let c = 0; c < C; c++) {
          if (dist[d.next[p * C + c] * S + d.next[q * C + c]]) {
            dist[p * S + q] = dist[q * S + p] = 1;
            changed = true;
            break;
          }
        }
      }
    }
  }
  for (let p = 0; p < S; p++) for (let q = p + 1; q < S; q++) assert.equal(dist[p * S + q], 1, `${label}: states ${p} and ${q} are equivalent`);
}

/** Shape, class boundaries, the dead state and classOf, checked from the tables alone. */
function assertWellFormed(d: Dfa, label: string): void {
  const S = d.states;
  const C = d.classes;
  assert.ok(S >= 1 && S <= 255 && C >= 1 && C <= 255, `${label}: ${S} states, ${C} classes`);
  assert.equal(d.bounds.length, C - 1);
  assert.equal(d.accept.length, S);
  assert.equal(d.next.length, S * C);
  assert.ok(d.start >= 0 && d.start < S);
  for (let i = 0; i < d.bounds.length; i++) {
    assert.ok(d.bounds[i] > (i === 0 ? 0 : d.bounds[i - 1]) && d.bounds[i] <= 0x10ffff, `${label}: bounds increase within 1..10FFFF`);
  }
  for (const t of d.next) assert.ok(t < S);
  // Neighbouring classes differ in some state (else they should have been merged).
  for (let c = 1; c < C; c++) {
    let differ = false;
    for (let s = 0; s < S && !differ; s++) differ = d.next[s * C + c] !== d.next[s * C + c - 1];
    assert.ok(differ, `${label}: classes ${c - 1} and ${c} behave alike`);
  }
  // Which states can still reach acceptance (backwards from the accepting ones).
  const live = new Uint8Array(S);
  for (let s = 0; s < S; s++) live[s] = d.accept[s];
  for (let changed = true; changed; ) {
    changed = false;
    for (let s = 0; s < S; s++) {
      if (live[s]) continue;
      for (let c = 0; c < C; c++) if (live[d.next[s * C + c]]) (live[s] = 1), (changed = true), (c = C);
    }
  }
  const doomed = [...live.keys()].filter((s) => !live[s]);
  if (d.dead === -1) assert.deepEqual(doomed, [], `${label}: states that cannot accept, but no dead state`);
  else {
    assert.deepEqual(doomed, [d.dead], `${label}: the dead state is the one state that cannot accept`);
    for (let c = 0; c < C; c++) assert.equal(d.next[d.dead * C + c], d.dead, `${label}: the dead state loops`);
  }
}

function compileOrStates(kind: PatternKind, p: string): Dfa | null {
  try {
    return compilePattern(kind, p, 255);
  } catch (err) {
    // Only the size limits may refuse a pattern of the supported syntax.
    assert.ok(err instanceof PatternError && /states|too complex/.test(err.rule), `${kind} ${JSON.stringify(p)}: ${String(err)}`);
    return null;
  }
}

// ------------------------------------------------------------------ tests

/** Random patterns per oracle test (each tried on 30 strings, or 10 for the mutated ones). */
const PATTERNS = 1500;

describe('pattern: automata against oracles', () => {
  it('regex: same answer as RegExp(p, "su").test on seeded random patterns and strings', () => {
    const r = prng(0x5eed_1);
    let compared = 0;
    let matched = 0;
    let tooBig = 0;
    for (let k = 0; k < PATTERNS; k++) {
      let p = genRegex(r);
      if (r.chance(0.25)) p = `^${p}`;
      if (r.chance(0.25)) p = `${p}$`;
      const d = compileOrStates('regex', p);
      if (d === null) {
        tooBig++;
        continue;
      }
      if (k % 3 === 0) assertWellFormed(d, p);
      if (k % 10 === 0 && d.states <= 40) assertMinimal(d, p);
      const re = new RegExp(p, 'su');
      const alpha = subAlphabet(r, STR_CHARS);
      for (let j = 0; j < 30; j++) {
        const s = genString(r, j < 20 ? alpha : STR_CHARS);
        const want = re.test(s);
        assert.equal(dfaMatches(d, s), want, `regex ${JSON.stringify(p)} on ${JSON.stringify(s)}`);
        compared++;
        if (want) matched++;
      }
    }
    assert.ok(tooBig < PATTERNS / 100, `${tooBig} of ${PATTERNS} random patterns refused as too big for 255 states`);
    assert.ok(matched > compared / 5 && matched < compared - compared / 5, `${matched} of ${compared} matched: both answers must be tested`);
  });

  it('regex: mutated patterns: what RegExp rejects is rejected, what both accept agrees', () => {
    const r = prng(0x5eed_2);
    const INSERT = ['(', ')', '[', ']', '{', '}', '^', '$', '\\', '|', '*', '+', '?', '-', ',', '0', '1', '2', '9', 'a', 'b', 'u', 'x', '?:', '{1', '1}', '.', 'é', '🚑'];
    const OURS_ONLY = /\^ may only|\$ may only|back-references|word boundaries|above 100|states|too complex|too large/;
    let agreed = 0;
    let bothRejected = 0;
    for (let k = 0; k < PATTERNS; k++) {
      const cps = [...genRegex(r)];
      for (let m = 0, n = 1 + r.int(2); m < n; m++) {
        const at = r.int(cps.length + 1);
        if (r.chance(0.3) && cps.length > 0) cps.splice(Math.min(at, cps.length - 1), 1);
        else cps.splice(at, 0, r.pick(INSERT));
      }
      const p = cps.join('');
      let re: RegExp | null = null;
      try {
        re = new RegExp(p, 'su');
      } catch {
        re = null;
      }
      let d: Dfa | null = null;
      let rule = '';
      try {
        d = compilePattern('regex', p, 255);
      } catch (err) {
        assert.ok(err instanceof PatternError, `${JSON.stringify(p)}: ${String(err)}`);
        rule = err.rule;
      }
      if (re === null) {
        assert.equal(d, null, `RegExp rejects ${JSON.stringify(p)}, the module accepts it`);
        bothRejected++;
        continue;
      }
      if (d === null) {
        assert.match(rule, OURS_ONLY, `RegExp accepts ${JSON.stringify(p)}; rejected for ${rule}`);
        continue;
      }
      for (let j = 0; j < 10; j++) {
        const s = genString(r, STR_CHARS);
        assert.equal(dfaMatches(d, s), re.test(s), `regex ${JSON.stringify(p)} on ${JSON.stringify(s)}`);
      }
      agreed++;
    }
    assert.ok(agreed > PATTERNS / 5 && bothRejected > PATTERNS / 5, `${agreed} compared, ${bothRejected} rejected by both`);
  });

  it('like: same answer as a backtracking LIKE matcher on seeded random patterns and strings', () => {
    const r = prng(0x5eed_3);
    const TOK = ['%', '_', 'a', 'b', 'é', '🚑', '\\%', '\\_', '\\\\', '\n', '.', '*', '[', '^', '$', '(', '?', '東', 'a', 'b'];
    const CH = ['a', 'b', 'é', '🚑', '\n', '%', '_', '\\', '.', 'x', '東', '*'];
    let compared = 0;
    let matched = 0;
    for (let k = 0; k < 3000; k++) {
      let p = '';
      for (let i = 0, n = r.int(8); i < n; i++) p += r.pick(TOK);
      const d = compilePattern('like', p, 255);
      if (k % 3 === 0) assertWellFormed(d, p);
      if (k % 10 === 0 && d.states <= 40) assertMinimal(d, p);
      const alpha = subAlphabet(r, CH);
      for (let j = 0; j < 30; j++) {
        const s = j < 15 ? likeInstance(r, p, alpha) : genString(r, j < 25 ? alpha : CH);
        const want = likeOracle(p, s);
        assert.equal(dfaMatches(d, s), want, `like ${JSON.stringify(p)} on ${JSON.stringify(s)}`);
        compared++;
        if (want) matched++;
      }
    }
    assert.ok(matched > compared / 10 && matched < compared - compared / 10, `${matched} of ${compared} matched`);
  });

  it('fixed cases (each regex one checked against RegExp too)', () => {
    // [kind, pattern, strings it matches, strings it does not match]
    const cases: Array<[PatternKind, string, string[], string[]]> = [
      ['like', '', [''], ['a']],
      ['like', '%', ['', 'any\nthing 🚑'], []],
      ['like', '_', ['é', '🚑', '\n'], ['', 'ab']],
      ['like', 'a%b', ['ab', 'a🚑\nb'], ['abc', 'ba', 'a']],
      ['like', 'ab%', ['ab', 'abc'], ['xab']],
      ['like', '%ab', ['xab'], ['abx']],
      ['like', '\\%', ['%'], ['a', '', '\\%']],
      ['like', '\\_', ['_'], ['a']],
      ['like', '\\\\', ['\\'], ['\\\\']],
      ['like', '_%_', ['🚑🚑', 'abc'], ['a']],
      ['like', 'a.c', ['a.c'], ['abc']],
      ['like', 'Abc', ['Abc'], ['abc']],
      ['regex', '', ['', 'anything'], []],
      ['regex', '^$', [''], ['\n', 'a']],
      ['regex', '^a*$', ['', 'aaa'], ['ab']],
      ['regex', 'a*', ['', 'xyz'], []],
      ['regex', '[^a]', ['ab', '\n'], ['a', '']],
      ['regex', '^[^a]$', ['🚑'], ['🚑🚑']],
      ['regex', '.', ['\n', '🚑'], ['']],
      ['regex', '^.$', ['🚑', 'é'], ['ab']],
      ['regex', '🚑+', ['x🚑🚑'], ['x', '']],
      ['regex', '^🚑{2}$', ['🚑🚑'], ['🚑']],
      ['regex', '[é-ü]', ['é', 'ö', 'ü'], ['e', 'ÿ']],
      ['regex', '^(a|b){2,3}$', ['ab', 'bab'], ['a', 'abab']],
      ['regex', '(a|b){2,3}', ['xbay'], ['axb']],
      ['regex', 'x{0}', ['', 'y'], []],
      ['regex', '^x{0}$', [''], ['x']],
      ['regex', '[\\s\\S]*', [''], []],
      ['regex', 'a|', ['zzz'], []],
      ['regex', '(?:)', [''], []],
      ['regex', '^', ['x'], []],
      ['regex', '$', ['x'], []],
      ['regex', '[]', [], ['', 'abc']],
      ['regex', '[^\\s\\S]', [], ['x']],
      ['regex', 'a[]b', [], ['ab']],
      ['regex', '[^]', ['x'], ['']],
      ['regex', '^ab', ['abc'], ['cab']],
      ['regex', 'ab$', ['cab'], ['abc', 'ab\n']],
      ['regex', '^a|b$', ['xb', 'ax'], ['xa', 'bx']],
      ['regex', '^(?:a|b)$', ['a'], ['ab']],
      ['regex', '\\^', ['a^b'], ['ab']],
      ['regex', '\\$', ['a$b'], ['ab']],
      ['regex', '\\$$', ['x$'], ['$x']],
      ['regex', '^\\\\$', ['\\'], ['\\\\']],
      ['regex', '^a+?$', ['aaa'], ['']],
      ['regex', '^a{2,}?$', ['aa'], ['a']],
      ['regex', '^\\u{1F691}$', ['🚑'], ['\ud83d\ude92']],
      ['regex', '^\\uD83D\\uDE91$', ['🚑'], []],
      ['regex', '^\\x41\\u0042$', ['AB'], ['ab']],
      ['regex', '[\\b]', ['\b'], ['b']],
      ['regex', '\\0', ['\0'], ['0']],
      ['regex', '\\s', ['\u2028', '\ufeff', '\u3000', '\t', '\v'], ['\u200b', 'a']],
      ['regex', '\\S', ['\u200b'], [' ']],
      ['regex', '\\w', ['_', 'Z'], ['é', '-']],
      ['regex', '\\W', ['é'], ['a']],
      ['regex', '^[\\d-]+$', ['1-2'], ['a']],
      ['regex', '^[-a]$', ['-'], ['b']],
      ['regex', '^[a-c-e]+$', ['a-e'], ['d']],
      ['regex', '^[A-Z]{2}[0-9]{3}$', ['AB123'], ['AB1234', 'ab123']],
      ['regex', 'a/b', ['a/b'], ['ab']],
      ['regex', '\\/', ['/'], ['\\']],
      ['regex', 'Abc', ['xAbc'], ['abc']],
    ];
    for (const [kind, p, yes, no] of cases) {
      const d = compilePattern(kind, p, 255);
      assertWellFormed(d, `${kind} ${JSON.stringify(p)}`);
      for (const [s, want] of [...yes.map((x) => [x, true] as const), ...no.map((x) => [x, false] as const)]) {
        const label = `${kind} ${JSON.stringify(p)} on ${JSON.stringify(s)}`;
        assert.equal(kind === 'regex' ? regexOracle(p, s) : likeOracle(p, s), want, `${label}: the expectation agrees with the oracle`);
        assert.equal(dfaMatches(d, s), want, label);
      }
    }
  });
});

describe('pattern: rejections', () => {
  it('every construct outside the syntax is a PatternError naming the problem', () => {
    const bad: Array<[PatternKind, string, RegExp]> = [
      ['like', 'a\\b', /escape/], ['like', '\\a', /escape/], ['like', 'a\\', /trailing/], ['like', '%\\', /trailing/],
      ['regex', '(?=a)', /lookaround/], ['regex', '(?!a)', /lookaround/], ['regex', '(?<=a)b', /lookaround/], ['regex', '(?<!a)b', /lookaround/],
      ['regex', '(?<n>a)', /named groups/], ['regex', '(?i:a)', /group/], ['regex', '(a)\\1', /back-references/], ['regex', '\\1', /back-references/],
      ['regex', '\\k<n>', /named back-references/], ['regex', '\\bx', /word boundaries/], ['regex', 'x\\B', /word boundaries/],
      ['regex', '\\p{L}', /property/], ['regex', '\\P{L}', /property/], ['regex', '[\\p{L}]', /property/], ['regex', '\\cA', /unknown escape \\c/],
      ['regex', '\\a', /unknown escape \\a/], ['regex', '\\e', /unknown escape/], ['regex', '\\_', /unknown escape/],
      ['regex', '\\é', /unknown escape/], ['regex', '\\-', /outside a class/], ['regex', '\\', /trailing/],
      ['regex', 'a^b', /\^ may only open the pattern.*character 1\b/], ['regex', '^^', /\^ may only open.*character 1\b/],
      ['regex', '^a^b', /\^ may only open.*character 2\b/], ['regex', '🚑(^a)', /\^ may only open.*character 2\b/],
      ['regex', 'a|^b', /\^ may only open/], ['regex', 'a$b', /\$ may only close the pattern.*character 1\b/],
      ['regex', '^a$b', /\$ may only close.*character 2\b/], ['regex', '$a', /\$ may only close/], ['regex', '(a$)', /\$ may only close/],
      ['regex', 'a$$', /\$ may only close/], ['regex', '(a', /unbalanced \(.*character 0\b/], ['regex', '((a)', /unbalanced \(/],
      ['regex', 'a)', /unbalanced \).*character 1\b/], ['regex', ')', /unbalanced \)/], ['regex', '[a', /unbalanced \[/],
      ['regex', '[', /unbalanced \[/], ['regex', '[^', /unbalanced \[/], ['regex', 'a]', /lone \]/], ['regex', 'a}', /lone \}/],
      ['regex', '{', /lone \{|nothing to repeat|quantifier/], ['regex', 'x{', /starts no quantifier/], ['regex', 'x{1', /starts no quantifier/],
      ['regex', 'x{,2}', /starts no quantifier/], ['regex', 'x{1, 2}', /starts no quantifier/], ['regex', '*a', /nothing to repeat/],
      ['regex', '+', /nothing to repeat/], ['regex', '?', /nothing to repeat/], ['regex', '{2}', /nothing to repeat/],
      ['regex', 'a|*', /nothing to repeat/], ['regex', '(*)', /nothing to repeat/], ['regex', '^*', /nothing to repeat/],
      ['regex', 'a**', /nothing to repeat/], ['regex', 'a+*', /nothing to repeat/], ['regex', 'a??+', /nothing to repeat/],
      ['regex', 'a{2}{3}', /nothing to repeat/], ['regex', 'a{101}', /above 100/], ['regex', 'a{0,101}', /above 100/],
      ['regex', 'a{101,}', /above 100/], ['regex', 'a{3,2}', /out of order/], ['regex', '[z-a]', /out of order/], ['regex', '[🚑-a]', /out of order/],
      ['regex', '[\\d-z]', /class escape/], ['regex', '[a-\\w]', /class escape/], ['regex', '[\\W-a]', /class escape/],
      ['regex', '\\u{110000}', /above 10FFFF/], ['regex', '\\u{}', /\\u\{/], ['regex', '\\u{zz}', /\\u\{/], ['regex', '\\u12', /hex digits/],
      ['regex', '\\x4', /hex digits/], ['regex', '\\xg0', /hex digits/], ['regex', '\\01', /\\0 followed by a digit/],
      ['regex', '[\\01]', /\\0 followed by a digit/],
    ];
    for (const [kind, p, why] of bad) {
      assert.throws(
        () => compilePattern(kind, p, 128),
        (e: unknown) => e instanceof PatternError && why.test(e.rule),
        `${kind} ${JSON.stringify(p)} must be rejected matching ${why}`,
      );
    }
  });

  it('limits: states (exact), the construction, the NFA, the classes', () => {
    const rejects = (kind: PatternKind, p: string, max: number, why: RegExp): void => {
      assert.throws(() => compilePattern(kind, p, max), (e: unknown) => e instanceof PatternError && why.test(e.rule), `${kind} ${JSON.stringify(p)} max ${max}: ${why}`);
    };
    // Refused for size: past the states allowed, or (a guard on the construction) too complex to build.
    const tooBig = (max: number): RegExp => new RegExp(`more than ${max} states|too complex`);
    // The classic exponential automaton (the 13th code point from the end is an a): 2^13 states.
    rejects('regex', '(a|b)*a(a|b){12}$', 255, tooBig(255));
    rejects('regex', '^(a|b)*a(a|b){12}$', 255, tooBig(255));
    // Unanchored, only the earliest a of the last run matters: 14 states.
    assert.equal(compilePattern('regex', '(a|b)*a(a|b){12}', 64).states, 14);
    rejects('like', '%a____________', 255, tooBig(255));
    // Small enough to build: the last four code points, as far as they are a or b (2^4 states).
    assert.equal(compilePattern('regex', '(a|b)*a(a|b){3}$', 255).states, 16);
    rejects('regex', '(a|b)*a(a|b){3}$', 15, /more than 15 states/);
    // The limit is on the minimal automaton: S states compile at maxStates S, not at S - 1.
    for (const [kind, p] of [['regex', '^[A-Z]{2}[0-9]{3}$'], ['like', '%accident%'], ['regex', '^(?:ab|cd){20}$'], ['regex', 'x'], ['regex', 'colou?r']] as const) {
      const d = compilePattern(kind, p, 255);
      assert.deepEqual(compilePattern(kind, p, d.states), d, `${kind} ${p} at exactly ${d.states} states`);
      if (d.states > 1) rejects(kind, p, d.states - 1, tooBig(d.states - 1));
    }
    assert.equal(compilePattern('regex', '^a{100}$', 255).states, 102);
    rejects('regex', '^a{100}$', 101, /more than 101 states/);
    rejects('regex', '(?:(?:a{100}){100}){100}', 255, /too large/);
    rejects('regex', '(?:[ab]{100}){100}', 255, /too large|states|too complex/);
    // Every second code point from U+0100 as a class: 483 runs of code points that all differ.
    const alternate = (n: number): string => Array.from({ length: n }, (_, k) => String.fromCodePoint(0x100 + 2 * k)).join('');
    rejects('regex', `[${alternate(241)}]`, 255, /classes|runs of characters/);
    assert.equal(compilePattern('regex', `^[${alternate(30)}]$`, 255).classes, 61);
  });
});

describe('pattern: structure', () => {
  it('minimal: small sizes, one language one automaton', () => {
    const size = (k: PatternKind, p: string): [number, number] => {
      const d = compilePattern(k, p, 255);
      return [d.states, d.classes];
    };
    const a = compilePattern('regex', 'a*', 255);
    assert.ok(a.states <= 2, 'a* is at most 2 states');
    const pct = compilePattern('like', '%', 255);
    assert.equal(pct.states, 1);
    assert.equal(pct.accept[pct.start], 1);
    assert.deepEqual(size('regex', ''), [1, 1]);
    assert.deepEqual(size('regex', '.*'), [1, 1]);
    const same: Array<[PatternKind, string, PatternKind, string]> = [
      ['regex', 'a|a', 'regex', 'a'],
      ['regex', '^(?:a|b)*$', 'regex', '^[ab]*$'],
      ['regex', '^a{3}$', 'like', 'aaa'],
      ['regex', '^a.*b$', 'like', 'a%b'],
      ['regex', '^.', 'like', '_%'],
      ['regex', 'abc', 'like', '%abc%'],
      ['regex', 'a{2,}', 'regex', 'aa+'],
      ['regex', '^(?:a*)*$', 'regex', '^a*$'],
      ['regex', '(?:x|y)z', 'regex', '[xy]z'],
      ['regex', '^[\\s\\S]{2}$', 'like', '__'],
      ['regex', '\\d', 'regex', '[0-9]'],
      ['regex', '^a+?$', 'regex', '^a+$'],
    ];
    for (const [k1, p1, k2, p2] of same) {
      const d1 = compilePattern(k1, p1, 255);
      const d2 = compilePattern(k2, p2, 255);
      assert.deepEqual(d1, d2, `${k1} ${p1} and ${k2} ${p2} are one language, so one automaton`);
      assertMinimal(d1, p1);
    }
  });

  it('the dead state: not accepting, loops on every class, reached early', () => {
    const d = compilePattern('like', 'a%', 255);
    assert.ok(d.dead >= 0);
    assert.equal(d.accept[d.dead], 0);
    for (let c = 0; c < d.classes; c++) assert.equal(d.next[d.dead * d.classes + c], d.dead);
    assert.equal(d.next[d.start * d.classes + classOf(d, 0x62)], d.dead, "like 'a%' on b… goes to the dead state");
    assert.equal(dfaMatches(d, `b${'a'.repeat(100_000)}`), false);
    assert.equal(dfaMatches(d, `a${'b'.repeat(1000)}`), true);
    assert.equal(compilePattern('regex', 'a', 255).dead, -1, 'an unanchored search never dies');
    assert.equal(compilePattern('like', '%', 255).dead, -1);
    const never = compilePattern('regex', '[]', 255);
    assert.equal(never.states, 1);
    assert.equal(never.dead, never.start, 'a pattern that matches nothing is its dead state');
  });

  it('classOf is the number of bounds at or below the code point; neighbours merge, others cannot', () => {
    const d = compilePattern('regex', '^[b-d][é🚑]$', 255);
    assert.deepEqual([...d.bounds], [0x62, 0x65, 0xe9, 0xea, 0x1f691, 0x1f692]);
    const r = prng(9);
    for (let k = 0; k < 2000; k++) {
      const cp = r.chance(0.5) ? r.int(0x110000) : r.pick([0, 0x61, 0x62, 0x64, 0x65, 0xe9, 0xea, 0x1f690, 0x1f691, 0x1f692, 0x10ffff]);
      assert.equal(classOf(d, cp), d.bounds.filter((b) => b <= cp).length, `cp ${cp.toString(16)}`);
    }
    assert.equal(classOf(d, 0), 0);
    assert.equal(classOf(d, 0x10ffff), d.classes - 1);
    assert.deepEqual(compilePattern('regex', '^[a-c][b-d]$', 255).bounds, Uint32Array.from([0x61, 0x62, 0x64, 0x65]));
  });

  it('identical tables however often compiled, and the same tables at any sufficient maxStates', () => {
    for (const p of ['^[A-Z]{2}[0-9]{3}$', 'colou?r', '(?:ab|cd){5}']) {
      assert.deepEqual(compilePattern('regex', p, 255), compilePattern('regex', p, 255));
      assert.deepEqual(compilePattern('regex', p, 128), compilePattern('regex', p, 255));
    }
  });

  it('compiles 1000 typical patterns (no timing assertion)', () => {
    const r = prng(0x5eed_4);
    const WORDS = ['accident', 'fire', 'flood', 'road', 'closure', 'Zürich', '東京', 'ambulance🚑', 'M25', 'A1'];
    const TEMPLATES: Array<(w: string) => [PatternKind, string]> = [
      (w) => ['like', `%${w}%`],
      (w) => ['like', `${w}%`],
      (w) => ['like', `%${w}`],
      (w) => ['like', `${w}_%`],
      () => ['regex', '^[A-Z]{2}[0-9]{3}$'],
      (w) => ['regex', w],
      (w) => ['regex', `^(?:${w}|road|fire)\\s+\\d{1,3}$`],
      () => ['regex', '^[a-z0-9._%+-]+@[a-z0-9.-]+\\.[a-z]{2,}$'],
      () => ['regex', '\\d{3}-\\d{4}'],
      (w) => ['regex', `(?:\\s|_)${w}\\s`],
      (w) => ['regex', `^${w}.*(?:closed|open)$`],
      () => ['regex', '[^,]*,[^,]*,[^,]*'],
      () => ['regex', '^\\+?[0-9 ]{6,15}$'],
      (w) => ['regex', `${w}|${w.slice(0, 2)}x{2,4}`],
    ];
    let states = 0;
    for (let k = 0; k < 1000; k++) {
      const [kind, p] = r.pick(TEMPLATES)(r.pick(WORDS));
      const d = compilePattern(kind, p, 128);
      states += d.states;
      if (k < 30) assertWellFormed(d, p);
    }
    assert.ok(states > 1000);
  });
});
