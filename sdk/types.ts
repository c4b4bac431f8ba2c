/**
 * Plain TypeScript shapes for subscriptions, events and notifications, and their conversion to and
 * from the protobuf messages of proto/ambit/v1. The SDK checks here only what the conversion needs
 * (known operators, value types, finite positions); every other rule is the server's, which names
 * the field in its error.
 */
import type { MessageInitShape } from '@bufbuild/protobuf';
import { timestampFromMs, timestampMs } from '@bufbuild/protobuf/wkt';
import {
  AggregateFn as WireAggregateFn,
  type ElementParameter as WireElementParameter,
  type ElementParameterSchema,
  type Event as WireEvent,
  type EventSchema,
  type Filter as WireFilter,
  type FilterSchema,
  type Notification as WireNotification,
  Op as WireOp,
  type Pattern as WirePattern,
  type PatternSchema,
  Selection as WireSelection,
  type StepAttribute as WireStepAttribute,
  type Subscription as WireSubscription,
  type SubscriptionSchema,
  type Value as WireValue,
  type ValueSchema,
} from '../api/gen/ambit/v1/types_pb.js';
import type {
  AggregateFn,
  CompareOp,
  ElementParameter,
  EventPattern,
  PatternAggregate,
  PatternNegation,
  PatternParameter,
  PatternStep,
  Selection,
  StepAttribute,
} from '../src/model/event-patterns.js';
import type { Constraint, LatLon, Op, Value as AttributeValue } from '../src/model/types.js';
import { invalid } from './errors.js';

// The value, operator, position, constraint and pattern shapes are the model's own
// (src/model/types.ts, src/model/event-patterns.ts).
export type { AttributeValue, Constraint, LatLon, Op };
export type { AggregateFn, CompareOp, ElementParameter, EventPattern, PatternAggregate, PatternNegation, PatternParameter, PatternStep, Selection, StepAttribute };

/** A circle of `radiusM` metres; without `center` it follows the device. */
export interface Area {
  radiusM: number;
  center?: LatLon;
}

/**
 * A conjunction of constraints, optionally within an area (none: anywhere), optionally requiring
 * tags: the event must carry every one (`['food', '#Vegan']`; `#` and case do not matter).
 */
export interface Filter {
  constraints?: Constraint[];
  area?: Area;
  tags?: string[];
}

/**
 * Matches an event when any filter does; or, with `pattern` (and `filters: []`), a sequence of
 * events in time and space (docs/semantics.md §9). `id` is the device's own name for it.
 */
export interface Subscription {
  id: string;
  filters: Filter[];
  pattern?: EventPattern;
}

/** An event to publish. No `id` lets the server choose one. */
export interface EventInput {
  id?: string;
  lat: number;
  lon: number;
  /** Area of effect in metres; 0 or absent: a point. */
  radiusM?: number;
  attributes?: Record<string, AttributeValue>;
  /** The event's tags (a set), e.g. `['#food', '#vegan']`. */
  tags?: string[];
  /**
   * When it happened, in whole ms since the epoch: the order pattern subscriptions see events in.
   * Absent: when the server accepts it.
   */
  timeMs?: number;
}

/** An event as delivered. */
export interface AmbitEvent {
  id: string;
  lat: number;
  lon: number;
  radiusM: number;
  attributes: Record<string, AttributeValue>;
  /** The event's tags in their normal form (lower case, no `#`), distinct and sorted. */
  tags: string[];
  /** Its event time (ms since the epoch), when its publisher gave one. */
  timeMs?: number;
}

export interface Notification {
  /** Increases per device; the SDK acknowledges it (see AmbitDevice) and dedupes by it. */
  deliveryId: string;
  event: AmbitEvent;
  /** Which of the device's subscriptions matched. */
  subscriptionIds: string[];
  /** When the server accepted the event, ms since the epoch. */
  publishedAtMs: number;
  /** A pattern subscription's match; `event` is its terminator. Absent for any other notification. */
  match?: PatternMatch;
}

/** The events that filled a pattern's steps (terminator first), and its aggregates (E20). */
export interface PatternMatch {
  steps: { step: string; event: AmbitEvent; timeMs: number }[];
  /** By aggregate name; absent where the value does not exist (min, max or avg of no events). */
  aggregates: Record<string, number>;
}

const OP_TO_WIRE: Readonly<Record<Op, WireOp>> = Object.freeze({
  eq: WireOp.EQ,
  ne: WireOp.NE,
  lt: WireOp.LT,
  le: WireOp.LE,
  gt: WireOp.GT,
  ge: WireOp.GE,
  prefix: WireOp.PREFIX,
  suffix: WireOp.SUFFIX,
  contains: WireOp.CONTAINS,
  like: WireOp.LIKE,
  regex: WireOp.REGEX,
  exists: WireOp.EXISTS,
});
const OP_FROM_WIRE = new Map<WireOp, Op>(Object.entries(OP_TO_WIRE).map(([k, v]) => [v, k as Op]));

/** The wire number of a name, or undefined: an own key only, so "toString" is no operator. */
function wireEnum<K extends string, V>(map: Readonly<Record<K, V>>, name: unknown): V | undefined {
  return typeof name === 'string' && Object.prototype.hasOwnProperty.call(map, name) ? map[name as K] : undefined;
}

/** Throws INVALID_ARGUMENT naming `field` unless lat/lon are finite and in range. */
export function checkLatLon(field: string, lat: unknown, lon: unknown): void {
  if (typeof lat !== 'number' || !Number.isFinite(lat) || lat < -90 || lat > 90) throw invalid(`${field}.lat`, `must be a finite number within [-90, 90], got ${String(lat)}`);
  if (typeof lon !== 'number' || !Number.isFinite(lon) || lon < -180 || lon > 180) throw invalid(`${field}.lon`, `must be a finite number within [-180, 180], got ${String(lon)}`);
}

function toWireValue(field: string, v: unknown): MessageInitShape<typeof ValueSchema> {
  if (typeof v === 'number') return { kind: { case: 'number', value: v } };
  if (typeof v === 'string') return { kind: { case: 'text', value: v } };
  if (typeof v === 'boolean') return { kind: { case: 'flag', value: v } };
  throw invalid(field, `must be a number, string or boolean, got ${v === null ? 'null' : typeof v}`);
}

function fromWireValue(v: WireValue | undefined): AttributeValue | undefined {
  return v === undefined || v.kind.case === undefined ? undefined : v.kind.value;
}

export function toWireSubscription(field: string, s: Subscription): MessageInitShape<typeof SubscriptionSchema> {
  if (typeof s !== 'object' || s === null) throw invalid(field, 'must be an object');
  if (!Array.isArray(s.filters)) throw invalid(`${field}.filters`, 'must be an array');
  const filters = s.filters.map((f, i) => toWireFilter(`${field}.filters[${i}]`, f));
  // A plain subscription's wire form stays as it was: no pattern key at all.
  if (s.pattern === undefined || s.pattern === null) return { id: s.id, filters };
  return { id: s.id, filters, pattern: toWirePattern(`${field}.pattern`, s.pattern) };
}

export function fromWireSubscription(s: WireSubscription): Subscription {
  const out: Subscription = { id: s.id, filters: s.filters.map(fromWireFilter) };
  if (s.pattern !== undefined) out.pattern = fromWirePattern(s.pattern);
  return out;
}

function toWireFilter(field: string, f: Filter): MessageInitShape<typeof FilterSchema> {
  if (typeof f !== 'object' || f === null) throw invalid(field, 'must be an object');
  const constraints = (f.constraints ?? []).map((c, j) => {
    const cf = `${field}.constraints[${j}]`;
    const op = wireEnum(OP_TO_WIRE, c.op);
    if (op === undefined) throw invalid(`${cf}.op`, `must be one of ${Object.keys(OP_TO_WIRE).join(', ')}, got ${JSON.stringify(c.op)}`);
    return { name: c.name, op, value: c.value === undefined ? undefined : toWireValue(`${cf}.value`, c.value) };
  });
  const tags = wireStrings(`${field}.tags`, f.tags);
  if (f.area === undefined) return { constraints, tags };
  if (f.area.center !== undefined) checkLatLon(`${field}.area.center`, f.area.center.lat, f.area.center.lon);
  return { constraints, tags, area: { radiusM: f.area.radiusM, center: f.area.center === undefined ? undefined : { lat: f.area.center.lat, lon: f.area.center.lon } } };
}

// The model's Filter, which pattern elements use, always has `constraints`; so does this.
function fromWireFilter(f: WireFilter): Filter & { constraints: Constraint[] } {
  const out: Filter & { constraints: Constraint[] } = {
    constraints: f.constraints.map((c) => {
      const value = fromWireValue(c.value);
      const op = OP_FROM_WIRE.get(c.op) ?? ('eq' as Op);
      return value === undefined ? { name: c.name, op } : { name: c.name, op, value };
    }),
  };
  if (f.area !== undefined) out.area = f.area.center === undefined ? { radiusM: f.area.radiusM } : { radiusM: f.area.radiusM, center: { lat: f.area.center.lat, lon: f.area.center.lon } };
  if (f.tags.length > 0) out.tags = [...f.tags];
  return out;
}

// ---- patterns: proto3 has no absent scalars, so an absent name is '', a window 0, a list [] ----

const SELECTION_TO_WIRE: Readonly<Record<Selection, WireSelection>> = Object.freeze({ each: WireSelection.EACH, last: WireSelection.LAST, first: WireSelection.FIRST });
const SELECTION_FROM_WIRE = new Map<WireSelection, Selection>(Object.entries(SELECTION_TO_WIRE).map(([k, v]) => [v, k as Selection]));
const FN_TO_WIRE: Readonly<Record<AggregateFn, WireAggregateFn>> = Object.freeze({
  count: WireAggregateFn.COUNT,
  sum: WireAggregateFn.SUM,
  min: WireAggregateFn.MIN,
  max: WireAggregateFn.MAX,
  avg: WireAggregateFn.AVG,
});
const FN_FROM_WIRE = new Map<WireAggregateFn, AggregateFn>(Object.entries(FN_TO_WIRE).map(([k, v]) => [v, k as AggregateFn]));
const COMPARE_OPS: readonly CompareOp[] = ['eq', 'ne', 'lt', 'le', 'gt', 'ge'];
const MAX_UINT32 = 4_294_967_295;

/** A comparison between two attributes (E6): the wire's Op, but only EQ … GE. */
function toWireCompareOp(field: string, op: unknown): WireOp {
  if (!(COMPARE_OPS as readonly unknown[]).includes(op)) throw invalid(field, `must be one of ${COMPARE_OPS.join(', ')}, got ${JSON.stringify(op) ?? String(op)}`);
  return OP_TO_WIRE[op as CompareOp];
}

/** Absent is 0; anything else must fit the wire's uint32 (the server checks the window's limits). */
function toWireWindow(field: string, v: unknown): number {
  if (v === undefined || v === null) return 0;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v > MAX_UINT32) throw invalid(field, `must be an integer number of milliseconds within [0, ${MAX_UINT32}], got ${typeof v === 'number' ? String(v) : typeof v}`);
  return v;
}

/** A list of a pattern's parts; absent is empty. */
function toWireList<T, R>(field: string, v: readonly T[] | undefined | null, each: (x: T, at: string) => R): R[] {
  if (v === undefined || v === null) return [];
  if (!Array.isArray(v)) throw invalid(field, 'must be an array');
  return v.map((x, i) => {
    const at = `${field}[${i}]`;
    if (typeof x !== 'object' || x === null) throw invalid(at, 'must be an object');
    return each(x, at);
  });
}

function toWireStepAttribute(v: StepAttribute | undefined | null): { step: string; attribute: string } | undefined {
  return v === undefined || v === null ? undefined : { step: v.step, attribute: v.attribute };
}

function toWireElementParameters(field: string, ps: readonly ElementParameter[] | undefined): MessageInitShape<typeof ElementParameterSchema>[] {
  return toWireList(field, ps, (p, at) => ({ attribute: p.attribute, op: toWireCompareOp(`${at}.op`, p.op), step: p.step, stepAttribute: p.stepAttribute }));
}

function toWirePattern(field: string, p: EventPattern): MessageInitShape<typeof PatternSchema> {
  if (typeof p !== 'object') throw invalid(field, 'must be an object');
  // Steps are required; the other lists may be left out.
  if (!Array.isArray(p.steps)) throw invalid(`${field}.steps`, 'must be an array');
  // A missing filter stays missing, for the server to name.
  const filter = (at: string, f: Filter | undefined) => (f === undefined || f === null ? undefined : toWireFilter(at, f));
  return {
    steps: toWireList(`${field}.steps`, p.steps, (s: PatternStep, at) => {
      let selection = WireSelection.UNSPECIFIED;
      if (s.selection !== undefined && s.selection !== null) {
        const sel = wireEnum(SELECTION_TO_WIRE, s.selection);
        if (sel === undefined) throw invalid(`${at}.selection`, `must be one of ${Object.keys(SELECTION_TO_WIRE).join(', ')}, got ${JSON.stringify(s.selection)}`);
        selection = sel;
      }
      return { name: s.name, filter: filter(`${at}.filter`, s.filter), selection, withinMs: toWireWindow(`${at}.withinMs`, s.withinMs) };
    }),
    parameters: toWireList(`${field}.parameters`, p.parameters, (q, at) => ({ left: toWireStepAttribute(q.left), op: toWireCompareOp(`${at}.op`, q.op), right: toWireStepAttribute(q.right) })),
    negations: toWireList(`${field}.negations`, p.negations, (n: PatternNegation, at) => ({
      filter: filter(`${at}.filter`, n.filter),
      between: wireStrings(`${at}.between`, n.between),
      before: n.before ?? '',
      withinMs: toWireWindow(`${at}.withinMs`, n.withinMs),
      parameters: toWireElementParameters(`${at}.parameters`, n.parameters),
    })),
    aggregates: toWireList(`${field}.aggregates`, p.aggregates, (a: PatternAggregate, at) => {
      const fn = wireEnum(FN_TO_WIRE, a.fn);
      if (fn === undefined) throw invalid(`${at}.fn`, `must be one of ${Object.keys(FN_TO_WIRE).join(', ')}, got ${JSON.stringify(a.fn)}`);
      let where: { op: WireOp; value: number } | undefined;
      if (a.where !== undefined && a.where !== null) {
        if (typeof a.where.value !== 'number') throw invalid(`${at}.where.value`, `must be a number, got ${a.where.value === null ? 'null' : typeof a.where.value}`);
        where = { op: toWireCompareOp(`${at}.where.op`, a.where.op), value: a.where.value };
      }
      return {
        name: a.name,
        fn,
        attribute: a.attribute ?? '',
        filter: filter(`${at}.filter`, a.filter),
        before: a.before ?? '',
        withinMs: toWireWindow(`${at}.withinMs`, a.withinMs),
        parameters: toWireElementParameters(`${at}.parameters`, a.parameters),
        where,
      };
    }),
    consuming: wireStrings(`${field}.consuming`, p.consuming),
  };
}

function fromWireStepAttribute(v: WireStepAttribute | undefined): StepAttribute {
  return v === undefined ? { step: '', attribute: '' } : { step: v.step, attribute: v.attribute };
}

function fromWireElementParameters(ps: readonly WireElementParameter[]): ElementParameter[] {
  return ps.map((p) => ({ attribute: p.attribute, op: (OP_FROM_WIRE.get(p.op) ?? 'eq') as CompareOp, step: p.step, stepAttribute: p.stepAttribute }));
}

/** The inverse of toWirePattern: what the wire leaves empty is left out, as the caller would. */
function fromWirePattern(p: WirePattern): EventPattern {
  // The server always sends a step's or element's filter; an empty one stands in should it not.
  const filter = (f: WireFilter | undefined) => (f === undefined ? { constraints: [] } : fromWireFilter(f));
  const out: EventPattern = {
    steps: p.steps.map((s): PatternStep => {
      const step: PatternStep = { name: s.name, filter: filter(s.filter) };
      const selection = SELECTION_FROM_WIRE.get(s.selection);
      if (selection !== undefined) step.selection = selection;
      if (s.withinMs !== 0) step.withinMs = s.withinMs;
      return step;
    }),
  };
  if (p.parameters.length > 0) {
    out.parameters = p.parameters.map((q): PatternParameter => ({ left: fromWireStepAttribute(q.left), op: (OP_FROM_WIRE.get(q.op) ?? 'eq') as CompareOp, right: fromWireStepAttribute(q.right) }));
  }
  if (p.negations.length > 0) {
    out.negations = p.negations.map((n): PatternNegation => {
      const neg: PatternNegation = { filter: filter(n.filter) };
      if (n.between.length > 0) neg.between = [...n.between] as [string, string];
      if (n.before !== '') neg.before = n.before;
      if (n.withinMs !== 0) neg.withinMs = n.withinMs;
      if (n.parameters.length > 0) neg.parameters = fromWireElementParameters(n.parameters);
      return neg;
    });
  }
  if (p.aggregates.length > 0) {
    out.aggregates = p.aggregates.map((a): PatternAggregate => {
      const agg: PatternAggregate = { name: a.name, fn: FN_FROM_WIRE.get(a.fn) ?? 'count', filter: filter(a.filter), before: a.before, withinMs: a.withinMs };
      if (a.attribute !== '') agg.attribute = a.attribute;
      if (a.parameters.length > 0) agg.parameters = fromWireElementParameters(a.parameters);
      if (a.where !== undefined) agg.where = { op: (OP_FROM_WIRE.get(a.where.op) ?? 'eq') as CompareOp, value: a.where.value };
      return agg;
    });
  }
  if (p.consuming.length > 0) out.consuming = [...p.consuming];
  return out;
}

export function toWireEvent(field: string, e: EventInput): MessageInitShape<typeof EventSchema> {
  if (typeof e !== 'object' || e === null) throw invalid(field, 'must be an object');
  checkLatLon(field, e.lat, e.lon);
  const attributes: Record<string, MessageInitShape<typeof ValueSchema>> = {};
  if (e.attributes !== undefined) for (const k of Object.keys(e.attributes)) attributes[k] = toWireValue(`${field}.attributes[${JSON.stringify(k)}]`, e.attributes[k]);
  const out: MessageInitShape<typeof EventSchema> = { id: e.id ?? '', position: { lat: e.lat, lon: e.lon }, radiusM: e.radiusM ?? 0, attributes, tags: wireStrings(`${field}.tags`, e.tags) };
  if (e.timeMs !== undefined) {
    // Whole ms below 2^53 (E2): a Timestamp carries them exactly, and the server takes nothing else.
    if (typeof e.timeMs !== 'number' || !Number.isSafeInteger(e.timeMs) || e.timeMs < 0) throw invalid(`${field}.timeMs`, `must be an integer number of milliseconds within [0, ${Number.MAX_SAFE_INTEGER}], got ${typeof e.timeMs === 'number' ? String(e.timeMs) : typeof e.timeMs}`);
    out.time = timestampFromMs(e.timeMs);
  }
  return out;
}

/**
 * Tags, and a pattern's lists of step names, as the wire carries them: an array of strings (the
 * server normalises and checks them).
 */
function wireStrings(field: string, v: unknown): string[] {
  if (v === undefined || v === null) return [];
  if (!Array.isArray(v)) throw invalid(field, 'must be an array of strings');
  for (let i = 0; i < v.length; i++) if (typeof v[i] !== 'string') throw invalid(`${field}[${i}]`, 'must be a string');
  return v as string[];
}

export function fromWireEvent(e: WireEvent | undefined): AmbitEvent {
  const attributes: Record<string, AttributeValue> = {};
  if (e === undefined) return { id: '', lat: 0, lon: 0, radiusM: 0, attributes, tags: [] };
  for (const k of Object.keys(e.attributes)) {
    const v = fromWireValue(e.attributes[k]);
    if (v !== undefined) attributes[k] = v;
  }
  const out: AmbitEvent = { id: e.id, lat: e.position?.lat ?? 0, lon: e.position?.lon ?? 0, radiusM: e.radiusM, attributes, tags: [...e.tags] };
  if (e.time !== undefined) out.timeMs = timestampMs(e.time);
  return out;
}

export function fromWireNotification(n: WireNotification): Notification {
  const out: Notification = {
    deliveryId: n.deliveryId,
    event: fromWireEvent(n.event),
    subscriptionIds: n.subscriptionIds,
    publishedAtMs: n.publishedAt === undefined ? 0 : timestampMs(n.publishedAt),
  };
  if (n.match !== undefined) {
    out.match = {
      steps: n.match.steps.map((s) => ({ step: s.step, event: fromWireEvent(s.event), timeMs: s.time === undefined ? 0 : timestampMs(s.time) })),
      // fromEntries: an aggregate may be named "__proto__".
      aggregates: Object.fromEntries(Object.entries(n.match.aggregates)),
    };
  }
  return out;
}

// ---- delivery ids: "<ms>-<seq>", increasing per device ----

const ID_RE = /^(\d{1,16})-(\d{1,16})$/;

export function isDeliveryId(id: string): boolean {
  return ID_RE.test(id);
}

/** Orders delivery ids ('' first); malformed ids sort as ''. */
export function compareDeliveryIds(a: string, b: string): number {
  if (a === b) return 0;
  const x = ID_RE.exec(a);
  const y = ID_RE.exec(b);
  if (x === null) return y === null ? 0 : -1;
  if (y === null) return 1;
  return Number(x[1]) - Number(y[1]) || Number(x[2]) - Number(y[2]);
}
