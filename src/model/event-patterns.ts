/**
 * Event-pattern subscriptions (docs/semantics.md §9, rules E1–E20): TESLA rules whose every
 * element is an Ambit filter. A pattern names a terminator step (steps[0]) and the steps before it
 * in time, each within a window of the one before it in the list, with a selection policy (each,
 * last, first); parameters relate the steps' attributes; negations forbid events between two
 * steps or within a window before one; aggregates fold a numeric attribute over the events within
 * a window before a step; consuming steps use their events up.
 *
 * This module is the model and its validation: the shapes callers give, the normalised shapes
 * engines store, and the limits. The engines are in src/engines/event-patterns/.
 */
import { ValidationError, show } from './errors.js';
import { type Limits, type NFilter, checkArray, checkObject, checkString, validateFilter } from './limits.js';
import { type PatternBudget, SUBSCRIPTION_PATTERN_WORK } from './pattern.js';
import type { Filter } from './types.js';

/** Which of the valid candidates for a step a partial match takes (E8). */
export type Selection = 'each' | 'last' | 'first';
export const SELECTIONS: readonly Selection[] = ['each', 'last', 'first'];

/** Comparison of two attribute values (E6). */
export type CompareOp = 'eq' | 'ne' | 'lt' | 'le' | 'gt' | 'ge';
export const COMPARE_OPS: readonly CompareOp[] = ['eq', 'ne', 'lt', 'le', 'gt', 'ge'];

export type AggregateFn = 'count' | 'sum' | 'min' | 'max' | 'avg';
export const AGGREGATE_FNS: readonly AggregateFn[] = ['count', 'sum', 'min', 'max', 'avg'];

export interface PatternStep {
  /** Unique within the pattern; names the step in parameters, negations, aggregates and notifications. */
  name: string;
  filter: Filter;
  /** Steps after the first: which valid candidates to take (default `last`). Absent on steps[0]. */
  selection?: Selection;
  /** Steps after the first: the step's event is at most this many ms before the previous step's. */
  withinMs?: number;
}

/** An attribute of the event that fills a step. */
export interface StepAttribute {
  step: string;
  attribute: string;
}

/** `left op right` between the events of two steps, e.g. smoke.zone eq temp.zone. */
export interface PatternParameter {
  left: StepAttribute;
  op: CompareOp;
  right: StepAttribute;
}

/** `attribute op step.stepAttribute`, between a negated or aggregated event and a step's event. */
export interface ElementParameter {
  attribute: string;
  op: CompareOp;
  step: string;
  stepAttribute: string;
}

/** No event matching `filter` (and the parameters) between two steps' events, or within a window before one. */
export interface PatternNegation {
  filter: Filter;
  /** Two step names: no such event strictly between their events. */
  between?: [string, string];
  /** Or: no such event within `withinMs` before this step's event. */
  before?: string;
  withinMs?: number;
  parameters?: ElementParameter[];
}

/** fn over `attribute` of the events matching `filter` within `withinMs` before step `before`'s event. */
export interface PatternAggregate {
  /** The computed attribute's name in the notification; unique among the pattern's aggregates. */
  name: string;
  fn: AggregateFn;
  /** Required for sum, min, max, avg; absent for count. */
  attribute?: string;
  filter: Filter;
  before: string;
  withinMs: number;
  parameters?: ElementParameter[];
  /** A condition on the computed value; the match counts only when it holds (E12). */
  where?: { op: CompareOp; value: number };
}

export interface EventPattern {
  /** steps[0] is the terminator; steps[i] precedes steps[i-1] in time. */
  steps: PatternStep[];
  parameters?: PatternParameter[];
  negations?: PatternNegation[];
  aggregates?: PatternAggregate[];
  /** Steps whose events a match uses up (E14). */
  consuming?: string[];
}

export interface PatternSubscription {
  id: string;
  /** The device whose position anchored areas follow. */
  owner: string;
  pattern: EventPattern;
}

/** An event with its event time: integer milliseconds since the Unix epoch (E2). */
export interface TimedEvent<E = unknown> {
  event: E;
  timeMs: number;
}

// ---- normalised forms ----

export interface NStepAttribute {
  readonly step: number;
  readonly attribute: string;
}

export interface NPatternStep {
  readonly name: string;
  readonly filter: NFilter;
  /** `each` on steps[0] (it has no choice to make). */
  readonly selection: Selection;
  /** 0 on steps[0]. */
  readonly withinMs: number;
}

export interface NPatternParameter {
  readonly left: NStepAttribute;
  readonly op: CompareOp;
  readonly right: NStepAttribute;
  /** The later of the two steps in the list: the step whose candidates it decides (E7). */
  readonly at: number;
}

export interface NElementParameter {
  readonly attribute: string;
  readonly op: CompareOp;
  readonly step: number;
  readonly stepAttribute: string;
}

export interface NPatternNegation {
  readonly filter: NFilter;
  /** [earlier in the list, later in the list]: the forbidden events lie strictly between the later's event and the earlier's. */
  readonly between: readonly [number, number] | null;
  readonly before: number | null;
  readonly withinMs: number;
  readonly parameters: readonly NElementParameter[];
  /** The step whose candidates it decides: the largest step index it refers to (E10). */
  readonly at: number;
}

export interface NPatternAggregate {
  readonly name: string;
  readonly fn: AggregateFn;
  readonly attribute: string | null;
  readonly filter: NFilter;
  readonly before: number;
  readonly withinMs: number;
  readonly parameters: readonly NElementParameter[];
  readonly where: { readonly op: CompareOp; readonly value: number } | null;
}

export interface NEventPattern {
  readonly steps: readonly NPatternStep[];
  readonly parameters: readonly NPatternParameter[];
  readonly negations: readonly NPatternNegation[];
  readonly aggregates: readonly NPatternAggregate[];
  /** Step indices, ascending, distinct. */
  readonly consuming: readonly number[];
}

export interface NPatternSubscription {
  readonly id: string;
  readonly owner: string;
  readonly pattern: NEventPattern;
}

// ---- limits ----

export interface PatternLimits {
  maxSteps: number;
  maxParameters: number;
  maxNegations: number;
  maxAggregates: number;
  /** Largest `withinMs` of any step, negation or aggregate. */
  maxWindowMs: number;
}

export const DEFAULT_PATTERN_LIMITS: Readonly<PatternLimits> = Object.freeze({
  maxSteps: 8,
  maxParameters: 16,
  maxNegations: 4,
  maxAggregates: 4,
  maxWindowMs: 86_400_000,
});

const PATTERN_CEILINGS: Readonly<PatternLimits> = Object.freeze({
  maxSteps: 32,
  maxParameters: 64,
  maxNegations: 16,
  maxAggregates: 16,
  maxWindowMs: 30 * 86_400_000,
});

export function resolvePatternLimits(partial: Partial<PatternLimits> = {}): PatternLimits {
  if (partial === null || typeof partial !== 'object' || Array.isArray(partial)) {
    throw new ValidationError('patternLimits', `must be an object, got ${show(partial)}`);
  }
  const out: PatternLimits = { ...DEFAULT_PATTERN_LIMITS };
  for (const [key, value] of Object.entries(partial)) {
    if (!Object.prototype.hasOwnProperty.call(DEFAULT_PATTERN_LIMITS, key)) throw new ValidationError(`patternLimits.${key}`, 'unknown limit');
    const ceiling = PATTERN_CEILINGS[key as keyof PatternLimits];
    if (typeof value !== 'number' || !Number.isInteger(value) || value < 1 || value > ceiling) {
      throw new ValidationError(`patternLimits.${key}`, `must be an integer within [1, ${ceiling}], got ${show(value)}`);
    }
    out[key as keyof PatternLimits] = value;
  }
  return out;
}

/** Latest event time accepted: times are integers below 2^53, so every difference is exact. */
export const MAX_TIME_MS = Number.MAX_SAFE_INTEGER;

/** An event time (E2): an integer number of ms in [0, 2^53 − 1]. */
export function checkTimeMs(field: string, v: unknown): number {
  if (typeof v !== 'number') throw new ValidationError(field, `must be a number, got ${typeof v === 'object' ? show(v) : typeof v}`);
  if (!Number.isInteger(v) || v < 0 || v > MAX_TIME_MS) {
    throw new ValidationError(field, `must be an integer number of milliseconds within [0, ${MAX_TIME_MS}], got ${show(v)}`);
  }
  return v === 0 ? 0 : v; // -0 is 0
}

function checkWindow(field: string, v: unknown, pl: PatternLimits): number {
  if (typeof v !== 'number') throw new ValidationError(field, `must be a number, got ${typeof v === 'object' ? show(v) : typeof v}`);
  if (!Number.isInteger(v) || v < 1 || v > pl.maxWindowMs) {
    throw new ValidationError(field, `must be an integer number of milliseconds within [1, ${pl.maxWindowMs}], got ${show(v)}`);
  }
  return v;
}

function checkEnum<T extends string>(field: string, v: unknown, allowed: readonly T[]): T {
  if (typeof v !== 'string' || !(allowed as readonly string[]).includes(v)) {
    throw new ValidationError(field, `must be one of ${allowed.join(', ')}, got ${show(v)}`);
  }
  return v as T;
}

const absent = (v: unknown): boolean => v === undefined || v === null;

function checkUnknownKeys(field: string, o: Record<string, unknown>, known: readonly string[]): void {
  for (const k of Object.keys(o)) {
    if (!known.includes(k)) throw new ValidationError(`${field}.${k}`, `unknown field (expected ${known.join(', ')})`);
  }
}

/**
 * Validates a pattern subscription; throws on the first violation in document order (E19),
 * naming its field. Returns the normalised form (the caller's objects are not retained).
 */
export function validatePatternSubscription(s: unknown, limits: Limits, pl: PatternLimits, field = 'subscription'): NPatternSubscription {
  const o = checkObject(field, s);
  checkUnknownKeys(field, o, ['id', 'owner', 'pattern']);
  const id = checkString(`${field}.id`, o.id, 1, limits.maxIdBytes);
  const owner = checkString(`${field}.owner`, o.owner, 1, limits.maxIdBytes);
  const pattern = validateEventPattern(`${field}.pattern`, o.pattern, limits, pl);
  return { id, owner, pattern };
}

export function validateEventPattern(field: string, p: unknown, limits: Limits, pl: PatternLimits): NEventPattern {
  const o = checkObject(field, p);
  checkUnknownKeys(field, o, ['steps', 'parameters', 'negations', 'aggregates', 'consuming']);
  const budget: PatternBudget = { left: SUBSCRIPTION_PATTERN_WORK };
  const name = (f: string, v: unknown): string => checkString(f, v, 1, limits.maxNameBytes);

  const rawSteps = checkArray(`${field}.steps`, o.steps, 1, pl.maxSteps, 'steps');
  const steps: NPatternStep[] = [];
  const stepIndex = new Map<string, number>();
  for (let i = 0; i < rawSteps.length; i++) {
    const f = `${field}.steps[${i}]`;
    const so = checkObject(f, rawSteps[i]);
    checkUnknownKeys(f, so, ['name', 'filter', 'selection', 'withinMs']);
    const n = name(`${f}.name`, so.name);
    if (stepIndex.has(n)) throw new ValidationError(`${f}.name`, `must be unique among the steps, ${show(n)} is steps[${stepIndex.get(n)}]`);
    stepIndex.set(n, i);
    const filter = validateFilter(`${f}.filter`, so.filter, limits, budget);
    let selection: Selection = 'each';
    let withinMs = 0;
    if (i === 0) {
      if (!absent(so.selection)) throw new ValidationError(`${f}.selection`, 'must be absent on the terminator (steps[0])');
      if (!absent(so.withinMs)) throw new ValidationError(`${f}.withinMs`, 'must be absent on the terminator (steps[0])');
    } else {
      selection = absent(so.selection) ? 'last' : checkEnum(`${f}.selection`, so.selection, SELECTIONS);
      if (absent(so.withinMs)) throw new ValidationError(`${f}.withinMs`, 'is required on every step after the terminator');
      withinMs = checkWindow(`${f}.withinMs`, so.withinMs, pl);
    }
    steps.push({ name: n, filter, selection, withinMs });
  }
  const stepRef = (f: string, v: unknown): number => {
    const n = name(f, v);
    const i = stepIndex.get(n);
    if (i === undefined) throw new ValidationError(f, `must name a step, got ${show(n)}`);
    return i;
  };

  const rawParams = checkArray(`${field}.parameters`, o.parameters ?? [], 0, pl.maxParameters, 'parameters');
  const parameters: NPatternParameter[] = [];
  for (let i = 0; i < rawParams.length; i++) {
    const f = `${field}.parameters[${i}]`;
    const po = checkObject(f, rawParams[i]);
    checkUnknownKeys(f, po, ['left', 'op', 'right']);
    const side = (sf: string, v: unknown): NStepAttribute => {
      const so = checkObject(sf, v);
      checkUnknownKeys(sf, so, ['step', 'attribute']);
      return { step: stepRef(`${sf}.step`, so.step), attribute: name(`${sf}.attribute`, so.attribute) };
    };
    const left = side(`${f}.left`, po.left);
    const op = checkEnum(`${f}.op`, po.op, COMPARE_OPS);
    const right = side(`${f}.right`, po.right);
    if (left.step === right.step) throw new ValidationError(`${f}.right.step`, 'must name another step than left.step (a condition on one event is a constraint of its filter)');
    parameters.push({ left, op, right, at: Math.max(left.step, right.step) });
  }

  const elementParams = (f: string, v: unknown): NElementParameter[] => {
    const arr = checkArray(f, v ?? [], 0, pl.maxParameters, 'parameters');
    const out: NElementParameter[] = [];
    for (let i = 0; i < arr.length; i++) {
      const ef = `${f}[${i}]`;
      const eo = checkObject(ef, arr[i]);
      checkUnknownKeys(ef, eo, ['attribute', 'op', 'step', 'stepAttribute']);
      const attribute = name(`${ef}.attribute`, eo.attribute);
      const op = checkEnum(`${ef}.op`, eo.op, COMPARE_OPS);
      const step = stepRef(`${ef}.step`, eo.step);
      const stepAttribute = name(`${ef}.stepAttribute`, eo.stepAttribute);
      out.push({ attribute, op, step, stepAttribute });
    }
    return out;
  };

  const rawNegs = checkArray(`${field}.negations`, o.negations ?? [], 0, pl.maxNegations, 'negations');
  const negations: NPatternNegation[] = [];
  for (let i = 0; i < rawNegs.length; i++) {
    const f = `${field}.negations[${i}]`;
    const no = checkObject(f, rawNegs[i]);
    checkUnknownKeys(f, no, ['filter', 'between', 'before', 'withinMs', 'parameters']);
    const filter = validateFilter(`${f}.filter`, no.filter, limits, budget);
    let between: [number, number] | null = null;
    let before: number | null = null;
    let withinMs = 0;
    if (!absent(no.between)) {
      const b = checkArray(`${f}.between`, no.between, 2, 2, 'step names');
      const a0 = stepRef(`${f}.between[0]`, b[0]);
      const a1 = stepRef(`${f}.between[1]`, b[1]);
      if (a0 === a1) throw new ValidationError(`${f}.between[1]`, 'must name another step than between[0]');
      if (!absent(no.before)) throw new ValidationError(`${f}.before`, 'must be absent when between is given (a negation has one form)');
      if (!absent(no.withinMs)) throw new ValidationError(`${f}.withinMs`, 'must be absent when between is given (the steps bound the interval)');
      between = [Math.min(a0, a1), Math.max(a0, a1)];
    } else if (!absent(no.before)) {
      before = stepRef(`${f}.before`, no.before);
      if (absent(no.withinMs)) throw new ValidationError(`${f}.withinMs`, 'is required with before');
      withinMs = checkWindow(`${f}.withinMs`, no.withinMs, pl);
    } else {
      throw new ValidationError(f, 'must give between (two steps) or before (a step) with withinMs');
    }
    const parameters = elementParams(`${f}.parameters`, no.parameters);
    let at = between !== null ? between[1] : (before as number);
    for (const p of parameters) at = Math.max(at, p.step);
    negations.push({ filter, between, before, withinMs, parameters, at });
  }

  const rawAggs = checkArray(`${field}.aggregates`, o.aggregates ?? [], 0, pl.maxAggregates, 'aggregates');
  const aggregates: NPatternAggregate[] = [];
  const aggNames = new Set<string>();
  for (let i = 0; i < rawAggs.length; i++) {
    const f = `${field}.aggregates[${i}]`;
    const ao = checkObject(f, rawAggs[i]);
    checkUnknownKeys(f, ao, ['name', 'fn', 'attribute', 'filter', 'before', 'withinMs', 'parameters', 'where']);
    const n = name(`${f}.name`, ao.name);
    if (aggNames.has(n)) throw new ValidationError(`${f}.name`, `must be unique among the aggregates, got ${show(n)} twice`);
    aggNames.add(n);
    const fn = checkEnum(`${f}.fn`, ao.fn, AGGREGATE_FNS);
    let attribute: string | null = null;
    if (fn === 'count') {
      if (!absent(ao.attribute)) throw new ValidationError(`${f}.attribute`, 'must be absent for count (it counts events)');
    } else {
      if (absent(ao.attribute)) throw new ValidationError(`${f}.attribute`, `is required for ${fn}`);
      attribute = name(`${f}.attribute`, ao.attribute);
    }
    const filter = validateFilter(`${f}.filter`, ao.filter, limits, budget);
    const before = stepRef(`${f}.before`, ao.before);
    if (absent(ao.withinMs)) throw new ValidationError(`${f}.withinMs`, 'is required');
    const withinMs = checkWindow(`${f}.withinMs`, ao.withinMs, pl);
    const parameters = elementParams(`${f}.parameters`, ao.parameters);
    let where: NPatternAggregate['where'] = null;
    if (!absent(ao.where)) {
      const wo = checkObject(`${f}.where`, ao.where);
      checkUnknownKeys(`${f}.where`, wo, ['op', 'value']);
      const op = checkEnum(`${f}.where.op`, wo.op, COMPARE_OPS);
      if (typeof wo.value !== 'number') throw new ValidationError(`${f}.where.value`, `must be a number, got ${typeof wo.value === 'object' ? show(wo.value) : typeof wo.value}`);
      if (!Number.isFinite(wo.value)) throw new ValidationError(`${f}.where.value`, `must be finite, got ${show(wo.value)}`);
      where = { op, value: wo.value === 0 ? 0 : wo.value };
    }
    aggregates.push({ name: n, fn, attribute, filter, before, withinMs, parameters, where });
  }

  const rawCons = checkArray(`${field}.consuming`, o.consuming ?? [], 0, pl.maxSteps, 'step names');
  const consumingSet = new Set<number>();
  for (let i = 0; i < rawCons.length; i++) {
    const s = stepRef(`${field}.consuming[${i}]`, rawCons[i]);
    if (consumingSet.has(s)) throw new ValidationError(`${field}.consuming[${i}]`, `must not repeat a step, got ${show(steps[s].name)} twice`);
    consumingSet.add(s);
  }
  const consuming = [...consumingSet].sort((a, b) => a - b);
  return { steps, parameters, negations, aggregates, consuming };
}

/** The elements of a pattern in the order engines number them: steps, then negations, then aggregates. */
export function patternElements(p: NEventPattern): NFilter[] {
  return [...p.steps.map((s) => s.filter), ...p.negations.map((n) => n.filter), ...p.aggregates.map((a) => a.filter)];
}

/**
 * How far before a terminator's time an element's events can still count (E16): for step i the
 * sum of the windows of steps 1..i; for a negation between two steps, the reach of the earlier in
 * time; for a negation or aggregate before step s within W, reach(s) + W. An event older than
 * (latest time − reach) can never count again and may be dropped.
 */
export function elementReach(p: NEventPattern): number[] {
  const stepReach: number[] = [];
  let acc = 0;
  for (let i = 0; i < p.steps.length; i++) {
    acc += p.steps[i].withinMs;
    stepReach.push(acc);
  }
  const out = [...stepReach];
  for (const n of p.negations) out.push(n.between !== null ? stepReach[n.between[1]] : stepReach[n.before as number] + n.withinMs);
  for (const a of p.aggregates) out.push(stepReach[a.before] + a.withinMs);
  return out;
}
