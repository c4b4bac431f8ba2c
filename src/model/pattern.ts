/**
 * Pattern constraints (docs/semantics.md C16-C18): `like` (SQL LIKE) and `regex` (a safe subset
 * of JavaScript regular expressions under the flags `su`), each compiled once into a minimal DFA
 * over Unicode code points that every engine runs: the CPU engines here (`dfaMatches`), the GPU
 * engine's Cont kernel from the same tables (src/engines/gpu/layout.ts `dfaWords`).
 *
 * - like: `%` any run of code points, `_` one code point, `\` escapes `%`, `_` or `\` (anything
 *   else after it, or a trailing `\`, is an error); the whole string must match.
 * - regex: search semantics (a match anywhere) unless `^` opens or `$` closes the pattern, which
 *   anchor it (as in JavaScript, `^` the first top-level alternative and `$` the last); literals, `.`, escapes of syntax characters, `\t \n \r \f \v \0 \xHH \uHHHH
 *   \u{H…}`, `\d \D \w \W \s \S`, classes with ranges, `( )`, `(?: )`, `|`, and the quantifiers
 *   `* + ? {n} {n,} {n,m}` (n, m ≤ 100), greedy or lazy. Everything else (back-references,
 *   lookaround, named groups, `\b \B \p \k \c`, `^`/`$` elsewhere) is a PatternError.
 *
 * One file because it is one pipeline with one encoding: the parsers produce the sets of code
 * points that the class partition, the NFA, the subset construction and the minimisation all work
 * on, and the runner reads the tables they build.
 *
 * Construction: parse to sets of code-point ranges, split the code points into classes at every
 * range boundary, build a Thompson NFA over classes, determinise (subset construction over the
 * labelled and accepting states; when its sets pass the bound, again with each set reduced by a
 * simulation between those states), minimise (Moore), and merge adjacent classes that every state
 * treats alike. The result is the unique
 * minimal DFA of the language (up to numbering), so two spellings of one pattern get the same
 * automaton.
 */

export type PatternKind = 'like' | 'regex';

/** A DFA over Unicode code points: code points are mapped to classes by `bounds`, then states step by class. */
export interface Dfa {
  /** Number of states S (1..255). */
  readonly states: number;
  /** Number of code point classes C (1..255): class(cp) = how many entries of `bounds` are <= cp. */
  readonly classes: number;
  /** Strictly increasing code points, C - 1 of them (each starts a new class). */
  readonly bounds: Uint32Array;
  readonly start: number;
  /** The state that can never reach acceptance (it loops to itself), or -1 if there is none. */
  readonly dead: number;
  /** accept[s] = 1 when s accepts. */
  readonly accept: Uint8Array;
  /** next[s * C + c]: the state after a code point of class c in state s. */
  readonly next: Uint8Array;
}

/** A pattern that is not accepted; `rule` says why (the engines' INVALID_ARGUMENT names the field). */
export class PatternError extends Error {
  constructor(readonly rule: string) {
    super(rule);
    this.name = 'PatternError';
  }
}

const MAX_CP = 0x10ffff;
const MAX_REPEAT = 100;
const MAX_NFA = 20_000;
/**
 * Most classes of code points a pattern may tell apart (runs of code points it treats alike, before
 * neighbouring runs merge): each costs a column of the next-state table on the host and the GPU.
 */
export const MAX_CLASSES = 64;
/** Steps the subset construction may take (tens of ms on one core at most): past it, PatternError. */
const WORK = 1_500_000;
/** Most important NFA states (labelled or accepting) a pattern may have for its sets to be reduced by simulation (its table is their square). */
const SIM_STATES = 160;
/** Most steps the simulation may take (a few ms at most); past it the sets are not reduced. */
const SIM_WORK = 200_000;
/** Thrown inside the first subset construction when its sets pass the bound. */
const OVERFLOW = new Error('overflow');

// ---------------------------------------------------------------- sets of code points

/** Sorted, disjoint, non-adjacent inclusive ranges [lo0, hi0, lo1, hi1, ...]. */
type CpSet = number[];

function normalize(r: number[]): CpSet {
  const pairs: [number, number][] = [];
  for (let i = 0; i < r.length; i += 2) pairs.push([r[i], r[i + 1]]);
  pairs.sort((a, b) => a[0] - b[0]);
  const out: number[] = [];
  for (const [lo, hi] of pairs) {
    const n = out.length;
    if (n > 0 && lo <= out[n - 1] + 1) out[n - 1] = Math.max(out[n - 1], hi);
    else out.push(lo, hi);
  }
  return out;
}

function complement(s: CpSet): CpSet {
  const out: number[] = [];
  let next = 0;
  for (let i = 0; i < s.length; i += 2) {
    if (s[i] > next) out.push(next, s[i] - 1);
    next = s[i + 1] + 1;
  }
  if (next <= MAX_CP) out.push(next, MAX_CP);
  return out;
}

const ANY: CpSet = [0, MAX_CP];
const DIGIT: CpSet = [0x30, 0x39];
const WORD: CpSet = normalize([0x30, 0x39, 0x41, 0x5a, 0x5f, 0x5f, 0x61, 0x7a]);
const SPACE: CpSet = normalize([
  0x09, 0x0d, 0x20, 0x20, 0xa0, 0xa0, 0x1680, 0x1680, 0x2000, 0x200a, 0x2028, 0x2029, 0x202f, 0x202f, 0x205f, 0x205f, 0x3000, 0x3000, 0xfeff, 0xfeff,
]);

// ---------------------------------------------------------------- syntax tree

type Node =
  | { t: 'set'; s: CpSet }
  | { t: 'cat'; xs: Node[] }
  | { t: 'alt'; xs: Node[] }
  | { t: 'rep'; x: Node; min: number; max: number };

const EMPTY: Node = { t: 'cat', xs: [] };
const anyStar = (): Node => ({ t: 'rep', x: { t: 'set', s: ANY }, min: 0, max: Infinity });

function parseLike(p: string): Node {
  const xs: Node[] = [];
  const cps = [...p];
  for (let i = 0; i < cps.length; i++) {
    const ch = cps[i];
    if (ch === '%') xs.push(anyStar());
    else if (ch === '_') xs.push({ t: 'set', s: ANY });
    else if (ch === '\\') {
      const e = cps[++i];
      if (e === undefined) throw new PatternError('a trailing \\ escapes nothing (escape %, _ or \\)');
      if (e !== '%' && e !== '_' && e !== '\\') throw new PatternError(`\\ must escape %, _ or \\, got \\${e} at character ${i}`);
      const cp = e.codePointAt(0)!;
      xs.push({ t: 'set', s: [cp, cp] });
    } else {
      const cp = ch.codePointAt(0)!;
      xs.push({ t: 'set', s: [cp, cp] });
    }
  }
  return { t: 'cat', xs };
}

const SYNTAX = '^$\\.*+?()[]{}|/';

class RegexParser {
  private i: number;
  private readonly cps: number[];

  /**
   * Parses the code points [from, to) of `src` (the pattern without its anchors): positions in
   * errors are the whole pattern's.
   */
  constructor(src: string, from: number, to: number) {
    this.cps = [...src].slice(0, to).map((c) => c.codePointAt(0)!);
    this.i = from;
  }

  private peek(): number | undefined {
    return this.cps[this.i];
  }

  private where(): string {
    return `at character ${this.i}`;
  }

  parse(): Node {
    const n = this.alt();
    if (this.i < this.cps.length) {
      throw new PatternError(this.cps[this.i] === 0x29 ? `unbalanced ) ${this.where()}` : `unexpected ${String.fromCodePoint(this.cps[this.i])} ${this.where()}`);
    }
    return n;
  }

  private alt(): Node {
    const xs = [this.seq()];
    while (this.peek() === 0x7c) {
      this.i++;
      xs.push(this.seq());
    }
    return xs.length === 1 ? xs[0] : { t: 'alt', xs };
  }

  private seq(): Node {
    const xs: Node[] = [];
    for (;;) {
      const c = this.peek();
      if (c === undefined || c === 0x7c || c === 0x29) break;
      let atom = this.atom();
      const q = this.quantifier();
      if (q !== null) {
        atom = { t: 'rep', x: atom, min: q[0], max: q[1] };
        if (this.peek() === 0x3f) this.i++; // lazy: the same match or no match
        const after = this.peek();
        if (after === 0x2a || after === 0x2b || after === 0x3f || (after === 0x7b && this.quantifierAhead())) throw new PatternError(`nothing to repeat ${this.where()}`);
      }
      xs.push(atom);
    }
    return xs.length === 1 ? xs[0] : { t: 'cat', xs };
  }

  private quantifierAhead(): boolean {
    const save = this.i;
    try {
      return this.braces() !== null;
    } catch {
      return true;
    } finally {
      this.i = save;
    }
  }

  /** A quantifier at the cursor, consumed, as [min, max]; null when there is none. */
  private quantifier(): [number, number] | null {
    const c = this.peek();
    if (c === 0x2a) return (this.i++, [0, Infinity]);
    if (c === 0x2b) return (this.i++, [1, Infinity]);
    if (c === 0x3f) return (this.i++, [0, 1]);
    if (c === 0x7b) {
      const q = this.braces();
      if (q === null) throw new PatternError(`a { that starts no quantifier ${this.where()} (escape it as \\{)`);
      return q;
    }
    return null;
  }

  /** `{n}`, `{n,}`, `{n,m}` at the cursor, consumed; null (cursor kept) when it is none. */
  private braces(): [number, number] | null {
    const start = this.i;
    this.i++;
    const num = (): number | null => {
      let s = '';
      while (this.peek() !== undefined && this.peek()! >= 0x30 && this.peek()! <= 0x39) s += String.fromCodePoint(this.cps[this.i++]);
      return s === '' ? null : Number(s);
    };
    const n = num();
    if (n === null) return ((this.i = start), null);
    let m = n;
    if (this.peek() === 0x2c) {
      this.i++;
      const k = num();
      m = k === null ? Infinity : k;
    }
    if (this.peek() !== 0x7d) return ((this.i = start), null);
    this.i++;
    if (n > MAX_REPEAT || (m !== Infinity && m > MAX_REPEAT)) throw new PatternError(`a repeat count above ${MAX_REPEAT} at character ${start}`);
    if (m < n) throw new PatternError(`repeat counts out of order {${n},${m}} at character ${start}`);
    return [n, m];
  }

  private atom(): Node {
    const at = this.i;
    const c = this.cps[this.i++];
    switch (c) {
      case 0x28: {
        // (
        if (this.peek() === 0x3f) {
          if (this.cps[this.i + 1] !== 0x3a) {
            const k = this.cps[this.i + 1];
            throw new PatternError(k === 0x3d || k === 0x21 || k === 0x3c ? `lookaround and named groups are not supported (at character ${at})` : `unknown group (? at character ${at}`);
          }
          this.i += 2;
        }
        const n = this.alt();
        if (this.peek() !== 0x29) throw new PatternError(`unbalanced ( at character ${at}`);
        this.i++;
        // Wrapped, so that a group's alternatives never read as the pattern's own (see parseRegex).
        return { t: 'cat', xs: [n] };
      }
      case 0x5b:
        return this.charClass(at);
      case 0x2e:
        return { t: 'set', s: ANY };
      case 0x5c:
        return { t: 'set', s: this.escape(false) };
      case 0x5e:
        throw new PatternError(`^ may only open the pattern (found at character ${at})`);
      case 0x24:
        throw new PatternError(`$ may only close the pattern (found at character ${at})`);
      case 0x2a:
      case 0x2b:
      case 0x3f:
        throw new PatternError(`nothing to repeat at character ${at}`);
      case 0x7b:
        throw new PatternError(this.quantifierAheadAt(at) ? `nothing to repeat at character ${at}` : `a lone { at character ${at} (escape it as \\{)`);
      case 0x7d:
      case 0x5d:
        throw new PatternError(`a lone ${String.fromCodePoint(c)} at character ${at} (escape it)`);
      case 0x29:
        throw new PatternError(`unbalanced ) at character ${at}`);
      default:
        return { t: 'set', s: [c, c] };
    }
  }

  private quantifierAheadAt(at: number): boolean {
    this.i = at;
    const q = this.braces();
    this.i = at + 1;
    return q !== null;
  }

  private hex(n: number): number {
    let v = 0;
    for (let k = 0; k < n; k++) {
      const c = this.peek();
      const d = c === undefined ? -1 : hexDigit(c);
      if (d < 0) throw new PatternError(`expected ${n} hex digits ${this.where()}`);
      v = v * 16 + d;
      this.i++;
    }
    return v;
  }

  /** After a backslash: the set it stands for. `inClass`: inside [ ], where \b is U+0008 and \- is allowed. */
  private escape(inClass: boolean): CpSet {
    const at = this.i - 1;
    const c = this.cps[this.i++];
    if (c === undefined) throw new PatternError('a trailing \\ escapes nothing');
    const ch = String.fromCodePoint(c);
    switch (ch) {
      case 'd': return DIGIT;
      case 'D': return complement(DIGIT);
      case 'w': return WORD;
      case 'W': return complement(WORD);
      case 's': return SPACE;
      case 'S': return complement(SPACE);
      case 't': return [9, 9];
      case 'n': return [10, 10];
      case 'v': return [11, 11];
      case 'f': return [12, 12];
      case 'r': return [13, 13];
      case '0': {
        const d = this.peek();
        if (d !== undefined && d >= 0x30 && d <= 0x39) throw new PatternError(`\\0 followed by a digit at character ${at} (back-references and octal escapes are not supported)`);
        return [0, 0];
      }
      case 'x': {
        const v = this.hex(2);
        return [v, v];
      }
      case 'u': {
        if (this.peek() === 0x7b) {
          this.i++;
          let v = 0;
          let digits = 0;
          while (this.peek() !== 0x7d) {
            const d = this.peek() === undefined ? -1 : hexDigit(this.peek()!);
            if (d < 0) throw new PatternError(`bad \\u{…} escape at character ${at}`);
            v = v * 16 + d;
            digits++;
            this.i++;
            if (v > MAX_CP) throw new PatternError(`\\u{…} above 10FFFF at character ${at}`);
          }
          if (digits === 0) throw new PatternError(`bad \\u{…} escape at character ${at}`);
          this.i++;
          return [v, v];
        }
        let v = this.hex(4);
        // A surrogate pair written as two escapes is one code point (as JavaScript's u flag reads it).
        if (v >= 0xd800 && v <= 0xdbff && this.cps[this.i] === 0x5c && this.cps[this.i + 1] === 0x75) {
          const save = this.i;
          this.i += 2;
          let lo = -1;
          try {
            lo = this.hex(4);
          } catch {
            lo = -1;
          }
          if (lo >= 0xdc00 && lo <= 0xdfff) v = 0x10000 + ((v - 0xd800) << 10) + (lo - 0xdc00);
          else this.i = save;
        }
        return [v, v];
      }
      case 'b':
        if (inClass) return [8, 8];
        throw new PatternError(`word boundaries (\\b) are not supported (at character ${at})`);
      case 'B':
        throw new PatternError(`word boundaries (\\B) are not supported (at character ${at})`);
      case '-':
        if (inClass) return [0x2d, 0x2d];
        throw new PatternError(`\\- outside a class at character ${at}`);
      default:
        if (SYNTAX.includes(ch)) return [c, c];
        if (ch >= '1' && ch <= '9') throw new PatternError(`back-references are not supported (\\${ch} at character ${at})`);
        if (ch === 'k') throw new PatternError(`named back-references are not supported (at character ${at})`);
        if (ch === 'p' || ch === 'P') throw new PatternError(`Unicode property escapes (\\${ch}) are not supported (at character ${at})`);
        throw new PatternError(`unknown escape \\${ch} at character ${at}`);
    }
  }

  private charClass(at: number): Node {
    let negate = false;
    if (this.peek() === 0x5e) {
      negate = true;
      this.i++;
    }
    const ranges: number[] = [];
    for (;;) {
      const c = this.peek();
      if (c === undefined) throw new PatternError(`unbalanced [ at character ${at}`);
      if (c === 0x5d) {
        this.i++;
        break;
      }
      const a = this.classAtom();
      if (this.peek() === 0x2d && this.cps[this.i + 1] !== 0x5d && this.cps[this.i + 1] !== undefined) {
        this.i++;
        const b = this.classAtom();
        if (!isOne(a) || !isOne(b)) throw new PatternError(`a range with a class escape as an end in the class at character ${at}`);
        if (a[0] > b[0]) throw new PatternError(`range out of order in the class at character ${at}`);
        ranges.push(a[0], b[0]);
      } else ranges.push(...a);
    }
    const s = normalize(ranges);
    return { t: 'set', s: negate ? complement(s) : s };
  }

  private classAtom(): CpSet {
    const c = this.cps[this.i++];
    if (c === 0x5c) return this.escape(true);
    return [c, c];
  }
}

function isOne(s: CpSet): boolean {
  return s.length === 2 && s[0] === s[1];
}

function hexDigit(c: number): number {
  if (c >= 0x30 && c <= 0x39) return c - 0x30;
  if (c >= 0x41 && c <= 0x46) return c - 0x37;
  if (c >= 0x61 && c <= 0x66) return c - 0x57;
  return -1;
}

/** The regex's tree, wrapped for search: any run before unless ^ opens it, after unless $ closes it. */
function parseRegex(p: string): Node {
  let body = p;
  const anchoredStart = body.startsWith('^');
  if (anchoredStart) body = body.slice(1);
  let anchoredEnd = false;
  if (body.endsWith('$')) {
    let slashes = 0;
    for (let k = body.length - 2; k >= 0 && body[k] === '\\'; k--) slashes++;
    if (slashes % 2 === 0) {
      anchoredEnd = true;
      body = body.slice(0, -1);
    }
  }
  const n = new RegexParser(p, anchoredStart ? 1 : 0, [...p].length - (anchoredEnd ? 1 : 0)).parse();
  // As in JavaScript, ^ belongs to the first alternative of the pattern and $ to the last: a|b$
  // is (a) or (b at the end). The search matches some alternative somewhere.
  const alts = n.t === 'alt' ? n.xs : [n];
  const wrapped = alts.map((x, i): Node => {
    const xs: Node[] = [];
    if (!(anchoredStart && i === 0)) xs.push(anyStar());
    xs.push(x);
    if (!(anchoredEnd && i === alts.length - 1)) xs.push(anyStar());
    return { t: 'cat', xs };
  });
  return wrapped.length === 1 ? wrapped[0] : { t: 'alt', xs: wrapped };
}

// ---------------------------------------------------------------- classes, NFA, DFA

function collectSets(n: Node, out: CpSet[]): void {
  if (n.t === 'set') out.push(n.s);
  else if (n.t === 'rep') collectSets(n.x, out);
  else for (const x of n.xs) collectSets(x, out);
}

/** Class boundaries: every code point where some set starts or stops. */
function partition(sets: CpSet[]): number[] {
  const b = new Set<number>();
  for (const s of sets) {
    for (let i = 0; i < s.length; i += 2) {
      if (s[i] > 0) b.add(s[i]);
      if (s[i + 1] < MAX_CP) b.add(s[i + 1] + 1);
    }
  }
  return [...b].sort((x, y) => x - y);
}

function classOfIn(bounds: ArrayLike<number>, cp: number): number {
  let lo = 0;
  let hi = bounds.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (bounds[mid] <= cp) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

class Nfa {
  /** Epsilon moves per state. */
  eps: number[][] = [];
  /** The one labelled move of a state: its classes (or null) and target. */
  lab: (Uint8Array | null)[] = [];
  to: number[] = [];

  constructor(
    private readonly bounds: number[],
    private readonly classes: number,
  ) {}

  state(): number {
    if (this.eps.length >= MAX_NFA) throw new PatternError('the pattern is too large (its repeats expand past the size allowed)');
    this.eps.push([]);
    this.lab.push(null);
    this.to.push(-1);
    return this.eps.length - 1;
  }

  /** A fragment [entry, exit] for `n`. */
  build(n: Node): [number, number] {
    switch (n.t) {
      case 'set': {
        const a = this.state();
        const b = this.state();
        const m = new Uint8Array(this.classes);
        for (let i = 0; i < n.s.length; i += 2) {
          const c0 = classOfIn(this.bounds, n.s[i]);
          const c1 = classOfIn(this.bounds, n.s[i + 1]);
          for (let c = c0; c <= c1; c++) m[c] = 1;
        }
        this.lab[a] = m;
        this.to[a] = b;
        return [a, b];
      }
      case 'cat': {
        const a = this.state();
        let end = a;
        for (const x of n.xs) {
          const [s, e] = this.build(x);
          this.eps[end].push(s);
          end = e;
        }
        return [a, end];
      }
      case 'alt': {
        const a = this.state();
        const b = this.state();
        for (const x of n.xs) {
          const [s, e] = this.build(x);
          this.eps[a].push(s);
          this.eps[e].push(b);
        }
        return [a, b];
      }
      case 'rep': {
        const a = this.state();
        let end = a;
        for (let k = 0; k < n.min; k++) {
          const [s, e] = this.build(n.x);
          this.eps[end].push(s);
          end = e;
        }
        if (n.max === Infinity) {
          const [s, e] = this.build(n.x);
          const out = this.state();
          this.eps[end].push(s, out);
          this.eps[e].push(s, out);
          end = out;
        } else {
          const out = this.state();
          for (let k = n.min; k < n.max; k++) {
            const [s, e] = this.build(n.x);
            this.eps[end].push(s, out);
            end = e;
          }
          this.eps[end].push(out);
          end = out;
        }
        return [a, end];
      }
    }
  }
}

function closure(nfa: Nfa, seeds: number[], mark: Int32Array, stamp: number): number[] {
  const out: number[] = [];
  const stack = [...seeds];
  while (stack.length > 0) {
    const s = stack.pop()!;
    if (mark[s] === stamp) continue;
    mark[s] = stamp;
    out.push(s);
    for (const t of nfa.eps[s]) if (mark[t] !== stamp) stack.push(t);
  }
  return out.sort((x, y) => x - y);
}

function compileTree(tree: Node, maxStates: number, budget: PatternBudget | undefined, reduction: SetReduction): Dfa {
  const sets: CpSet[] = [];
  collectSets(tree, sets);
  const bounds = partition(sets);
  const C = bounds.length + 1;
  if (C > MAX_CLASSES) throw new PatternError(`the pattern tells apart ${C} runs of characters, more than ${MAX_CLASSES}`);
  const nfa = new Nfa(bounds, C);
  const [start, accept] = nfa.build(tree);

  // Bounds on the work, so that no pattern makes validation slow: the subset automaton may grow
  // to 4 times the states allowed before minimisation, and its construction, the simulation and
  // minimisation together to WORK steps.
  const limit = 4 * maxStates;
  let work = 0;
  const spend = (n: number): void => {
    work += n;
    if (work > WORK) throw new PatternError('the pattern is too complex to compile (its automaton takes too much work to build)');
    if (budget !== undefined && (budget.left -= n) < 0) throw new PatternError("the subscription's patterns together take too much work to compile");
  };

  // The states that matter to a set of states: the labelled ones and the accepting one (the others
  // only lead on by epsilon moves). `succ[i]`: the important states one labelled move of important
  // state i leads to (its target's closure), the same for every class it moves on.
  const N = nfa.eps.length;
  const index = new Int32Array(N).fill(-1);
  const important: number[] = [];
  for (let s = 0; s < N; s++) {
    if (nfa.lab[s] !== null || s === accept) {
      index[s] = important.length;
      important.push(s);
    }
  }
  const n1 = important.length;
  const mark = new Int32Array(N);
  let stamp = 0;
  const importantOf = (states: number[]): number[] => {
    const out: number[] = [];
    for (const s of states) if (index[s] >= 0) out.push(index[s]);
    return out;
  };
  const succ: number[][] = important.map((s) => {
    if (s === accept) return [];
    const set = importantOf(closure(nfa, [nfa.to[s]], mark, ++stamp));
    spend(set.length + 1);
    return set;
  });
  const accI = index[accept];
  const labOf = (i: number): Uint8Array | null => nfa.lab[important[i]];

  // A simulation between important states (sim[i * n1 + j] = 1: state j simulates state i, so
  // j's language contains i's): the largest relation where j accepts when i does, moves on every
  // class i moves on, and each state i moves to is simulated by one j moves to. A set that holds
  // both keeps only j, which leaves its language unchanged, so sets that differ only in states
  // something else in them covers become one state of the subset automaton before minimising:
  // a search's sets stop growing with the positions it need not remember (the earliest a of
  // (a|b)*a(a|b){12} is enough), and every set holding a state that accepts whatever follows
  // (a search's trailing run) becomes one. Only computed for patterns of up to SIM_STATES
  // important states and within SIM_WORK steps; otherwise the sets are not reduced.
  const simulate = (): Uint8Array | null => {
  let sim: Uint8Array | null = null;
  let simWork = 0;
  const simSpend = (k: number): boolean => {
    simWork += k;
    spend(k);
    return simWork <= SIM_WORK;
  };
  if (n1 <= SIM_STATES && simSpend(n1 * n1)) {
    sim = new Uint8Array(n1 * n1);
    for (let i = 0; i < n1; i++) {
      const li = labOf(i);
      for (let j = 0; j < n1; j++) {
        if (i === accI && j !== accI) continue;
        let ok = true;
        if (li !== null && succ[i].length > 0) {
          const lj = labOf(j);
          for (let c = 0; c < C && ok; c++) if (li[c] === 1 && (lj === null || lj[c] !== 1)) ok = false;
        }
        if (ok) sim[i * n1 + j] = 1;
      }
    }
    // Refinement: check every pair once, then again only the pairs whose successors lost a pair.
    const pred: number[][] = Array.from({ length: n1 }, () => []);
    for (let i = 0; i < n1; i++) for (const t of succ[i]) pred[t].push(i);
    const holds = (i: number, j: number): boolean => {
      const si = succ[i];
      const sj = succ[j];
      for (const a of si) {
        let covered = false;
        for (const b of sj) {
          if (sim![a * n1 + b] === 1) {
            covered = true;
            break;
          }
        }
        if (!covered) return false;
      }
      return true;
    };
    const lost: number[] = [];
    const check = (i: number, j: number): boolean => {
      if (!simSpend(succ[i].length * (succ[j].length + 1) + 1)) return false;
      if (!holds(i, j)) {
        sim![i * n1 + j] = 0;
        lost.push(i, j);
      }
      return true;
    };
    refine: {
      for (let i = 0; i < n1; i++) {
        if (succ[i].length === 0) continue;
        for (let j = 0; j < n1; j++) {
          if (i !== j && sim[i * n1 + j] === 1 && !check(i, j)) {
            sim = null;
            break refine;
          }
        }
      }
      while (lost.length > 0) {
        const b = lost.pop()!;
        const a = lost.pop()!;
        for (const i of pred[a]) {
          for (const j of pred[b]) {
            if (i !== j && sim[i * n1 + j] === 1 && !check(i, j)) {
              sim = null;
              break refine;
            }
          }
        }
      }
    }
  }
  return sim;
  };
  /** A set of important states (sorted) without those another member simulates (of two that simulate each other, the lower stays). */
  const reduce = (sim: Uint8Array | null, set: number[]): number[] => {
    if (sim === null || set.length < 2) return set;
    spend(set.length * set.length);
    const out: number[] = [];
    for (const q of set) {
      let covered = false;
      for (const p of set) {
        if (p !== q && sim[q * n1 + p] === 1 && (sim[p * n1 + q] === 0 || p < q)) {
          covered = true;
          break;
        }
      }
      if (!covered) out.push(q);
    }
    return out;
  };

  // Subset construction over sets of important states, reduced by `sim` when given (the empty
  // set becomes a state too: the dead one). Without `sim`, null when the sets pass the bound.
  const subsets = (sim: Uint8Array | null): { members: number[][]; rows: number[][] } | null => {
  const ids = new Map<string, number>();
  const members: number[][] = [];
  const rows: number[][] = [];
  const add = (set: number[]): number => {
    const key = set.join(',');
    let id = ids.get(key);
    if (id === undefined) {
      id = members.length;
      if (id >= limit) {
        if (sim === null) throw OVERFLOW;
        throw new PatternError(`the pattern is too complex to compile (its automaton passes ${limit} states before it is minimised)`);
      }
      ids.set(key, id);
      members.push(set);
    }
    return id;
  };
  try {
  add(reduce(sim, importantOf(closure(nfa, [start], mark, ++stamp))));
  const seen = new Int32Array(n1);
  let seenStamp = 0;
  for (let d = 0; d < members.length; d++) {
    // The targets of each class's moves, gathered in one pass over the members.
    const seeds: number[][] = Array.from({ length: C }, () => []);
    for (const i of members[d]) {
      const m = labOf(i);
      if (m === null || succ[i].length === 0) continue;
      spend(C);
      for (let c = 0; c < C; c++) if (m[c] === 1) seeds[c].push(i);
    }
    const row = new Array<number>(C);
    for (let c = 0; c < C; c++) {
      const set: number[] = [];
      seenStamp++;
      for (const i of seeds[c]) {
        for (const t of succ[i]) {
          if (seen[t] !== seenStamp) {
            seen[t] = seenStamp;
            set.push(t);
          }
        }
      }
      spend(set.length + 1);
      set.sort((x, y) => x - y);
      row[c] = add(reduce(sim, set));
    }
    rows.push(row);
  }
  } catch (err) {
    if (err === OVERFLOW) return null;
    throw err;
  }
  return { members, rows };
  };
  // First the sets as they come (most patterns stay far below the bound, and the simulation would
  // only add work); past the bound, again with the sets reduced by the simulation.
  let built = reduction === 'always' ? null : subsets(null);
  if (built === null) {
    const sim = reduction === 'never' ? null : simulate();
    built = sim !== null ? subsets(sim) : reduction === 'always' ? subsets(null) : null;
    if (built === null) throw new PatternError(`the pattern is too complex to compile (its automaton passes ${limit} states before it is minimised)`);
  }
  const { members, rows } = built;
  const n = members.length;
  const acc: number[] = members.map((set) => (set.includes(accI) ? 1 : 0));

  // Moore minimisation: refine the accepting / rejecting split until no block splits.
  let block = acc.slice();
  let count = new Set(block).size;
  for (;;) {
    spend(n * (C + 1));
    const sig = new Map<string, number>();
    const next = new Array<number>(n);
    for (let s = 0; s < n; s++) {
      let key = `${block[s]}`;
      for (let c = 0; c < C; c++) key += `,${block[rows[s][c]]}`;
      let b = sig.get(key);
      if (b === undefined) sig.set(key, (b = sig.size));
      next[s] = b;
    }
    block = next;
    if (sig.size === count) break;
    count = sig.size;
  }
  // Number the blocks from the start state's, breadth first.
  const order = new Map<number, number>();
  const queue = [block[0]];
  order.set(block[0], 0);
  const rep = new Map<number, number>();
  for (let s = 0; s < n; s++) if (!rep.has(block[s])) rep.set(block[s], s);
  for (let q = 0; q < queue.length; q++) {
    const s = rep.get(queue[q])!;
    for (let c = 0; c < C; c++) {
      const b = block[rows[s][c]];
      if (!order.has(b)) {
        order.set(b, order.size);
        queue.push(b);
      }
    }
  }
  const S = order.size;
  if (S > maxStates) throw new PatternError(`the pattern needs more than ${maxStates} states (it needs ${S})`);
  const table: number[][] = new Array(S);
  const accepting = new Uint8Array(S);
  for (const [b, k] of order) {
    const s = rep.get(b)!;
    table[k] = rows[s].map((t) => order.get(block[t])!);
    accepting[k] = acc[s];
  }

  // Merge neighbouring classes that every state moves on alike (fewer bounds, smaller tables).
  const keep: number[] = [0];
  const keptBounds: number[] = [];
  for (let c = 1; c < C; c++) {
    const prev = keep[keep.length - 1];
    let same = true;
    for (let s = 0; s < S && same; s++) same = table[s][c] === table[s][prev];
    if (!same) {
      keep.push(c);
      keptBounds.push(bounds[c - 1]);
    }
  }
  const K = keep.length;
  const next = new Uint8Array(S * K);
  for (let s = 0; s < S; s++) for (let k = 0; k < K; k++) next[s * K + k] = table[s][keep[k]];
  let dead = -1;
  for (let s = 0; s < S && dead < 0; s++) {
    if (accepting[s] === 1) continue;
    let loops = true;
    for (let k = 0; k < K && loops; k++) loops = next[s * K + k] === s;
    if (loops) dead = s;
  }
  return Object.freeze({ states: S, classes: K, bounds: Uint32Array.from(keptBounds), start: 0, dead, accept: accepting, next });
}

/** Compiles a pattern (a well-formed string) into its minimal DFA of at most `maxStates` states; throws PatternError. */
/**
 * Compiles a pattern (a well-formed string) into its minimal DFA of at most `maxStates` states;
 * throws PatternError. `budget`: work shared with other patterns (a subscription's), drawn down by
 * what this one takes; PatternError once it is spent.
 */
export function compilePattern(kind: PatternKind, pattern: string, maxStates: number, budget?: PatternBudget, reduction: SetReduction = 'auto'): Dfa {
  const tree = kind === 'like' ? parseLike(pattern) : parseRegex(pattern);
  return compileTree(tree, Math.min(maxStates, 255), budget, reduction);
}

/**
 * How the subset construction treats its sets: 'auto' builds them as they come and, past the
 * bound, again reduced by simulation; 'never' and 'always' take one way only (the automaton is
 * the same whichever way it is built; only what is refused differs).
 */
export type SetReduction = 'auto' | 'never' | 'always';

/** Compilation work left to several patterns together (steps of the subset construction and minimisation). */
export interface PatternBudget {
  left: number;
}

/** The work one subscription's patterns may take together: about four times one pattern's bound. */
export const SUBSCRIPTION_PATTERN_WORK = 6_000_000;

/** The class of code point `cp` (binary search in the bounds). */
export function classOf(d: Dfa, cp: number): number {
  return classOfIn(d.bounds, cp);
}

/** Runs the DFA over the code points of `s`; whole-string acceptance, stopping at the dead state. */
export function dfaMatches(d: Dfa, s: string): boolean {
  const C = d.classes;
  const bounds = d.bounds;
  const next = d.next;
  const dead = d.dead;
  let st = d.start;
  for (let i = 0; i < s.length; i++) {
    let cp = s.charCodeAt(i);
    if (cp >= 0xd800 && cp <= 0xdbff && i + 1 < s.length) {
      const lo = s.charCodeAt(i + 1);
      if (lo >= 0xdc00 && lo <= 0xdfff) {
        cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
        i++;
      }
    }
    st = next[st * C + classOfIn(bounds, cp)];
    if (st === dead) return false;
  }
  return d.accept[st] === 1;
}
