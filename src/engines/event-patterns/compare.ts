/**
 * Comparing two event attributes (docs/semantics.md E6), shared by the pattern engines: used by
 * pattern parameters (E7), element parameters of negations and aggregates (E11), and aggregate
 * conditions (E12, both sides numbers).
 */
import type { CompareOp } from '../../model/event-patterns.js';
import type { NEvent } from '../../model/limits.js';
import type { Value } from '../../model/types.js';

/** The value of attribute `name` of `e`, or undefined when the event has none. */
export function attrOf(e: NEvent, name: string): Value | undefined {
  const i = e.names.indexOf(name);
  return i < 0 ? undefined : e.values[i];
}

/**
 * `a op b` (E6): false unless both exist and have the same type. `eq`/`ne` compare numbers as
 * float64 (-0 equals 0), strings by content, bools by value; `lt`/`le`/`gt`/`ge` hold only between
 * two numbers or two bools (false < true), never between strings.
 */
export function compareAttr(op: CompareOp, a: Value | undefined, b: Value | undefined): boolean {
  if (a === undefined || b === undefined) return false;
  if (typeof a !== typeof b) return false;
  switch (op) {
    case 'eq':
      return a === b;
    case 'ne':
      return a !== b;
    case 'lt':
    case 'le':
    case 'gt':
    case 'ge':
      if (typeof a === 'string') return false;
      if (op === 'lt') return a < b;
      if (op === 'le') return a <= b;
      if (op === 'gt') return a > b;
      return a >= b;
  }
}
