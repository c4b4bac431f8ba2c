/**
 * Constraint evaluation: the exact semantics of docs/semantics.md, shared by every CPU engine.
 *
 * Strings: = != prefix suffix contains are defined on UTF-8 bytes. For well-formed strings (the
 * only kind validation admits) byte-wise and UTF-16-code-unit-wise answers coincide: UTF-8 and
 * UTF-16 are both prefix-free and self-synchronising per code point, so a byte match can only
 * start and end on code-point boundaries. Numbers: JavaScript's float64 comparisons (-0 == 0).
 * Bools: false < true.
 */
import { type NConstraint, patternDfa } from './limits.js';
import { dfaMatches } from './pattern.js';
import type { Op, Value, ValueType } from './types.js';

export function typeOf(v: Value): ValueType {
  return typeof v === 'number' ? 'number' : typeof v === 'string' ? 'string' : 'bool';
}

/**
 * Whether attribute value `a` satisfies `op c`; types must already agree (same name, same type).
 * Patterns (like, regex) need their automaton: `satisfies`.
 */
export function compare(op: Op, a: Value, c: Value): boolean {
  switch (op) {
    case 'eq': return a === c;
    case 'ne': return a !== c;
    case 'lt': return a < c;
    case 'le': return a <= c;
    case 'gt': return a > c;
    case 'ge': return a >= c;
    case 'prefix': return (a as string).startsWith(c as string);
    case 'suffix': return (a as string).endsWith(c as string);
    case 'contains': return (a as string).includes(c as string);
    case 'like':
    case 'regex': throw new Error(`compare: op ${op} needs the constraint's pattern (satisfies)`);
    case 'exists': return true;
  }
}

/**
 * Whether a constraint is satisfied by an attribute value; `a` is undefined when the event has no
 * attribute of that name. Only an attribute of the same type satisfies (exists: any type).
 */
export function satisfies(c: NConstraint, a: Value | undefined): boolean {
  if (a === undefined) return false;
  if (c.op === 'exists') return true;
  if (typeOf(a) !== c.type) return false;
  if (c.op === 'like' || c.op === 'regex') return dfaMatches(patternDfa(c), a as string);
  return compare(c.op, a, c.value as Value);
}
