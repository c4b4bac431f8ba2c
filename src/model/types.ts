/**
 * The Ambit data model (docs/semantics.md is the normative text; CLCB §2, CCM §3).
 * These are the shapes callers hand to a `Matcher`; engines validate and copy them on entry,
 * so a caller may reuse or mutate its objects afterwards.
 */

/** An attribute or constraint value: a float64, a UTF-8 string or a bool. */
export type Value = number | string | boolean;

export type ValueType = 'number' | 'string' | 'bool';

/**
 * Constraint operators. Numbers and bools: eq ne lt le gt ge; strings: eq ne prefix suffix
 * contains, and the patterns like (SQL LIKE) and regex (a safe regular-expression subset); any
 * type: exists.
 */
export type Op = 'eq' | 'ne' | 'lt' | 'le' | 'gt' | 'ge' | 'prefix' | 'suffix' | 'contains' | 'like' | 'regex' | 'exists';

export const OPS: readonly Op[] = ['eq', 'ne', 'lt', 'le', 'gt', 'ge', 'prefix', 'suffix', 'contains', 'like', 'regex', 'exists'];

export interface LatLon {
  /** WGS84 degrees, [-90, 90]. */
  lat: number;
  /** WGS84 degrees, [-180, 180]. */
  lon: number;
}

export interface Constraint {
  name: string;
  op: Op;
  /** Absent for `exists`, required otherwise. */
  value?: Value;
}

/**
 * A filter's area of relevance: a circle of `radiusM` metres, centred on the fixed point `center`
 * when given, otherwise on the owner device's live position (it moves with every update).
 */
export interface Area {
  radiusM: number;
  center?: LatLon;
}

/**
 * A conjunction of constraints, an optional area (none means "anywhere") and an optional tag set:
 * the filter's tags must all be among the event's (a subset test; docs/semantics.md T).
 */
export interface Filter {
  constraints: Constraint[];
  area?: Area;
  /** Tags the event must carry, e.g. `['food', 'vegan']` (a leading `#` is dropped, case folded). */
  tags?: string[];
}

export interface Subscription {
  id: string;
  /** The device that owns the subscription; anchored areas follow this device's position. */
  owner: string;
  filters: Filter[];
}

export interface Event {
  id: string;
  lat: number;
  lon: number;
  /** Area of effect in metres; 0 or absent = a point. */
  radiusM?: number;
  attributes: Record<string, Value>;
  /** The event's tags, e.g. `['#food', '#vegan', '#lunch']`: a set (order and repeats do not matter). */
  tags?: string[];
  /**
   * Its event time (docs/semantics.md E2), integer ms since the epoch: the order pattern
   * subscriptions see events in. Absent: stamped when the service accepts it. Filters ignore it.
   */
  timeMs?: number;
}

/** A device's position report, as a batch entry. */
export interface PositionUpdate {
  device: string;
  lat: number;
  lon: number;
}
