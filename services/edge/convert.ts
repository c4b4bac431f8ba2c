/**
 * Between the wire (protobuf-es messages of proto/ambit/v1) and the model (src/model), and from
 * errors to gRPC statuses. Conversion checks what the wire can express but the model cannot
 * (unset oneofs, unknown enum numbers, a missing position); the model's validation does the rest,
 * so every rule lives in one place and every error names its field.
 */
import * as grpc from '@grpc/grpc-js';
import { create, toBinary } from '@bufbuild/protobuf';
import { anyPack, timestampFromMs } from '@bufbuild/protobuf/wkt';
import { BadRequestSchema, RetryInfoSchema } from '../../api/gen/google/rpc/error_details_pb.js';
import { StatusSchema as RpcStatusSchema } from '../../api/gen/google/rpc/status_pb.js';
import { AmbitError, PublishError, type PublishOutcome, ValidationError, show } from '../../src/model/errors.js';
import { type Limits, checkLat, checkLon, inRange, validateEvent, validateSubscription } from '../../src/model/limits.js';
import {
  type AggregateFn as MAggregateFn,
  type CompareOp as MCompareOp,
  DEFAULT_PATTERN_LIMITS,
  type ElementParameter as MElementParameter,
  type EventPattern as MEventPattern,
  type PatternAggregate as MPatternAggregate,
  type PatternNegation as MPatternNegation,
  type PatternStep as MPatternStep,
  type Selection as MSelection,
  checkTimeMs,
  validatePatternSubscription,
} from '../../src/model/event-patterns.js';
import type { Constraint as MConstraint, Event as MEvent, Filter as MFilter, Op as MOp, Value as MValue } from '../../src/model/types.js';
import { AuthError } from './auth.js';
import { type Delivery, type DeviceSubscription, DevicePurgedError } from '../hub/port.js';
import {
  AggregateFn,
  type ElementParameter,
  type Pattern,
  PatternSchema,
  Selection,
  type Constraint,
  type Event,
  type Filter,
  type LatLon,
  type Notification,
  NotificationSchema,
  Op,
  type Subscription,
  SubscriptionSchema,
  type Value,
  EventSchema,
  ValueSchema,
  RequestStatusSchema,
  type RequestStatus,
} from '../../api/gen/ambit/v1/types_pb.js';

const OPS: Record<number, MOp> = {
  [Op.EQ]: 'eq',
  [Op.NE]: 'ne',
  [Op.LT]: 'lt',
  [Op.LE]: 'le',
  [Op.GT]: 'gt',
  [Op.GE]: 'ge',
  [Op.PREFIX]: 'prefix',
  [Op.SUFFIX]: 'suffix',
  [Op.CONTAINS]: 'contains',
  [Op.EXISTS]: 'exists',
  [Op.LIKE]: 'like',
  [Op.REGEX]: 'regex',
};
const OP_NUMBERS = new Map<MOp, Op>(Object.entries(OPS).map(([k, v]) => [v, Number(k) as Op]));

export function position(field: string, p: LatLon | undefined): { lat: number; lon: number } {
  if (p === undefined) throw new ValidationError(field, 'is required');
  return { lat: checkLat(`${field}.lat`, p.lat), lon: checkLon(`${field}.lon`, p.lon) };
}

function value(field: string, v: Value | undefined): MValue | undefined {
  if (v === undefined || v.kind.case === undefined) return undefined;
  return v.kind.value;
}

function constraint(field: string, c: Constraint): MConstraint {
  const op = OPS[c.op];
  if (op === undefined) {
    throw new ValidationError(`${field}.op`, c.op === Op.UNSPECIFIED ? 'must be set' : `unknown operator ${c.op}`);
  }
  const out: MConstraint = { name: c.name, op };
  const v = value(`${field}.value`, c.value);
  if (v !== undefined) out.value = v;
  return out;
}

/**
 * Tags beginning with `tenant:` are reserved (docs/service.md "Tenants"): with tenants on, the
 * gateway puts `tenant:<name>` on every event and filter of a tenant. Refused in what a client
 * sends (whether tenants are on or not), and never delivered or listed.
 */
export const TENANT_TAG = 'tenant:';

/** Refuses a reserved tag among `tags` (normal form) of `field`. */
function refuseReserved(field: string, tags: readonly string[] | undefined): void {
  if (tags === undefined) return;
  for (let i = 0; i < tags.length; i++) {
    if (tags[i].startsWith(TENANT_TAG)) throw new ValidationError(`${field}.tags[${i}]`, `must not begin with "${TENANT_TAG}" (reserved for tenants), got ${show(tags[i])}`);
  }
}

/** The tags a client sees: the reserved ones left out. */
function shownTags(tags: readonly string[] | undefined): string[] {
  if (tags === undefined) return [];
  let reserved = false;
  for (const t of tags) if (t.startsWith(TENANT_TAG)) reserved = true;
  return reserved ? tags.filter((t) => !t.startsWith(TENANT_TAG)) : (tags as string[]);
}

function filter(field: string, f: Filter, limits: Limits): MFilter {
  if (f.constraints.length > limits.maxConstraintsPerFilter) {
    throw new ValidationError(`${field}.constraints`, `must have at most ${limits.maxConstraintsPerFilter} constraints, got ${f.constraints.length}`);
  }
  const out: MFilter = { constraints: f.constraints.map((c, i) => constraint(`${field}.constraints[${i}]`, c)) };
  if (f.area !== undefined) {
    out.area = { radiusM: f.area.radiusM };
    if (f.area.center !== undefined) out.area.center = { lat: f.area.center.lat, lon: f.area.center.lon };
  }
  if (f.tags.length > 0) out.tags = f.tags;
  return out;
}

/** A device's subscription from the wire, validated under the API limits (owner = the device). */
export function toSubscription(field: string, device: string, s: Subscription | undefined, limits: Limits): DeviceSubscription {
  if (s === undefined) throw new ValidationError(field, 'is required');
  if (s.pattern !== undefined) {
    if (s.filters.length > 0) throw new ValidationError(`${field}.filters`, 'must be empty in a pattern subscription (its filters are in its pattern)');
    const pattern = toPattern(`${field}.pattern`, s.pattern, limits);
    const checked = wireNames(() => validatePatternSubscription({ id: s.id, owner: device, pattern }, limits, DEFAULT_PATTERN_LIMITS, field));
    checked.pattern.steps.forEach((x, i) => refuseReserved(`${field}.pattern.steps[${i}].filter`, x.filter.tags));
    (checked.pattern.negations ?? []).forEach((x, i) => refuseReserved(`${field}.pattern.negations[${i}].filter`, x.filter.tags));
    (checked.pattern.aggregates ?? []).forEach((x, i) => refuseReserved(`${field}.pattern.aggregates[${i}].filter`, x.filter.tags));
    return { id: s.id, filters: [], pattern };
  }
  if (s.filters.length > limits.maxFiltersPerSubscription) {
    throw new ValidationError(`${field}.filters`, `must have at most ${limits.maxFiltersPerSubscription} filters, got ${s.filters.length}`);
  }
  const model = { id: s.id, owner: device, filters: s.filters.map((f, i) => filter(`${field}.filters[${i}]`, f, limits)) };
  const valid = wireNames(() => validateSubscription(model, limits, field));
  // Tags are kept in their normal form (T2), as every engine and listing then sees them.
  for (let i = 0; i < model.filters.length; i++) {
    const f = model.filters[i];
    if (f.tags === undefined) continue;
    refuseReserved(`${field}.filters[${i}]`, valid.filters[i].tags);
    if (valid.filters[i].tags.length === 0) delete f.tags;
    else f.tags = [...valid.filters[i].tags];
  }
  return { id: model.id, filters: model.filters };
}

const SELECTIONS: Record<number, MSelection> = { [Selection.EACH]: 'each', [Selection.LAST]: 'last', [Selection.FIRST]: 'first' };
const SELECTION_NUMBERS = new Map<MSelection, Selection>(Object.entries(SELECTIONS).map(([k, v]) => [v, Number(k) as Selection]));
const FNS: Record<number, MAggregateFn> = { [AggregateFn.COUNT]: 'count', [AggregateFn.SUM]: 'sum', [AggregateFn.MIN]: 'min', [AggregateFn.MAX]: 'max', [AggregateFn.AVG]: 'avg' };
const FN_NUMBERS = new Map<MAggregateFn, AggregateFn>(Object.entries(FNS).map(([k, v]) => [v, Number(k) as AggregateFn]));
const COMPARE_OPS: readonly Op[] = [Op.EQ, Op.NE, Op.LT, Op.LE, Op.GT, Op.GE];

/** E6: a comparison between two attributes is one of OP_EQ … OP_GE. */
function compareOp(field: string, op: Op): MCompareOp {
  if (op === Op.UNSPECIFIED) throw new ValidationError(field, 'must be set');
  if (!COMPARE_OPS.includes(op)) throw new ValidationError(field, `must be one of OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE, got ${Op[op] === undefined ? op : `OP_${Op[op]}`}`);
  return OPS[op] as MCompareOp;
}

function elementParameters(field: string, ps: readonly ElementParameter[]): MElementParameter[] | undefined {
  if (ps.length === 0) return undefined;
  return ps.map((p, j) => ({ attribute: p.attribute, op: compareOp(`${field}[${j}].op`, p.op), step: p.step, stepAttribute: p.stepAttribute }));
}

/**
 * A pattern from the wire in the model's shape, for its validation (E19) to name every field:
 * proto3 has no absent scalars, so an empty string, an empty list and a window of 0 are absent.
 */
function toPattern(field: string, p: Pattern, limits: Limits): MEventPattern {
  const lengthOk = (f: string, n: number, max: number, what: string): void => {
    if (n > max) throw new ValidationError(f, `must have at most ${max} ${what}, got ${n}`);
  };
  const pl = DEFAULT_PATTERN_LIMITS;
  lengthOk(`${field}.steps`, p.steps.length, pl.maxSteps, 'steps');
  lengthOk(`${field}.parameters`, p.parameters.length, pl.maxParameters, 'parameters');
  lengthOk(`${field}.negations`, p.negations.length, pl.maxNegations, 'negations');
  lengthOk(`${field}.aggregates`, p.aggregates.length, pl.maxAggregates, 'aggregates');
  lengthOk(`${field}.consuming`, p.consuming.length, pl.maxSteps, 'step names');
  const f = (at: string, x: Filter | undefined): MFilter => (x === undefined ? (undefined as unknown as MFilter) : filter(at, x, limits));
  const steps = p.steps.map((s, i): MPatternStep => {
    const at = `${field}.steps[${i}]`;
    const out: MPatternStep = { name: s.name, filter: f(`${at}.filter`, s.filter) };
    if (s.selection !== Selection.UNSPECIFIED) {
      const sel = SELECTIONS[s.selection];
      if (sel === undefined) throw new ValidationError(`${at}.selection`, `unknown selection ${s.selection}`);
      out.selection = sel;
    }
    if (s.withinMs !== 0) out.withinMs = s.withinMs;
    return out;
  });
  const out: MEventPattern = { steps };
  if (p.parameters.length > 0) {
    out.parameters = p.parameters.map((q, i) => {
      const at = `${field}.parameters[${i}]`;
      return {
        left: (q.left === undefined ? undefined : { step: q.left.step, attribute: q.left.attribute }) as { step: string; attribute: string },
        op: compareOp(`${at}.op`, q.op),
        right: (q.right === undefined ? undefined : { step: q.right.step, attribute: q.right.attribute }) as { step: string; attribute: string },
      };
    });
  }
  if (p.negations.length > 0) {
    out.negations = p.negations.map((n, i): MPatternNegation => {
      const at = `${field}.negations[${i}]`;
      const o: MPatternNegation = { filter: f(`${at}.filter`, n.filter) };
      if (n.between.length > 0) o.between = [...n.between] as [string, string];
      if (n.before !== '') o.before = n.before;
      if (n.withinMs !== 0) o.withinMs = n.withinMs;
      const ps = elementParameters(`${at}.parameters`, n.parameters);
      if (ps !== undefined) o.parameters = ps;
      return o;
    });
  }
  if (p.aggregates.length > 0) {
    out.aggregates = p.aggregates.map((a, i): MPatternAggregate => {
      const at = `${field}.aggregates[${i}]`;
      const fn = FNS[a.fn];
      if (fn === undefined) throw new ValidationError(`${at}.fn`, a.fn === AggregateFn.UNSPECIFIED ? 'must be set' : `unknown function ${a.fn}`);
      const o: MPatternAggregate = { name: a.name, fn, filter: f(`${at}.filter`, a.filter), before: a.before, withinMs: a.withinMs };
      if (a.attribute !== '') o.attribute = a.attribute;
      const ps = elementParameters(`${at}.parameters`, a.parameters);
      if (ps !== undefined) o.parameters = ps;
      if (a.where !== undefined) o.where = { op: compareOp(`${at}.where.op`, a.where.op), value: a.where.value };
      return o;
    });
  }
  if (p.consuming.length > 0) out.consuming = [...p.consuming];
  return out;
}

/** E2: a Timestamp of whole milliseconds within [0, 2^53 − 1]. */
function eventTime(field: string, seconds: bigint, nanos: number): number {
  if (nanos % 1_000_000 !== 0) throw new ValidationError(`${field}.nanos`, `must be whole milliseconds, got ${nanos} ns`);
  const ms = Number(seconds) * 1000 + nanos / 1_000_000;
  return checkTimeMs(field, ms);
}

/** An event from the wire, validated; `id` is filled in by the caller when empty. */
export function toEvent(field: string, e: Event | undefined, limits: Limits, newId: () => string): MEvent {
  if (e === undefined) throw new ValidationError(field, 'is required');
  // Field names are built only for an error (a publish of thousands of events names none).
  const at = e.position;
  const { lat, lon } = at !== undefined && inRange(at.lat, at.lon) ? at : position(`${field}.position`, at);
  const keys = Object.keys(e.attributes);
  if (keys.length > limits.maxAttributesPerEvent) {
    throw new ValidationError(`${field}.attributes`, `must have at most ${limits.maxAttributesPerEvent} attributes, got ${keys.length}`);
  }
  const attributes: Record<string, MValue> = Object.create(null) as Record<string, MValue>;
  for (const k of keys) {
    const w = e.attributes[k];
    if (w === undefined || w.kind.case === undefined) throw new ValidationError(`${field}.attributes[${show(k)}]`, 'value must be set');
    attributes[k] = w.kind.value;
  }
  const model: MEvent = { id: e.id === '' ? newId() : e.id, lat, lon, radiusM: e.radiusM, attributes };
  if (e.tags.length > 0) model.tags = e.tags;
  if (e.time !== undefined) model.timeMs = eventTime(`${field}.time`, e.time.seconds, e.time.nanos);
  const valid = wireNames(() => validateEvent(model, limits, field));
  // Tags travel and are delivered in their normal form (T2).
  if (model.tags !== undefined) {
    refuseReserved(field, valid.tags);
    if (valid.tags.length === 0) delete model.tags;
    else model.tags = valid.tags as string[];
  }
  return model;
}

/**
 * The model names its two-word fields in camel case (`radiusM`, a pattern's `withinMs` and
 * `stepAttribute`); on the wire (and in every path an API error names) they are the proto fields
 * `radius_m`, `within_ms` and `step_attribute`. Every other field the model can report here has
 * the same name in both.
 */
const WIRE_NAMES: Record<string, string> = { radiusM: 'radius_m', withinMs: 'within_ms', stepAttribute: 'step_attribute' };
const CAMEL_FIELD = /\.(radiusM|withinMs|stepAttribute)(?=$|[.[])/g;

function wireNames<T>(validate: () => T): T {
  try {
    return validate();
  } catch (err) {
    if (err instanceof ValidationError && err.field !== undefined && CAMEL_FIELD.test(err.field)) {
      CAMEL_FIELD.lastIndex = 0;
      throw new ValidationError(err.field.replace(CAMEL_FIELD, (_, name: string) => `.${WIRE_NAMES[name]}`), err.rule);
    }
    throw err;
  }
}

// ---- model → wire ----

function toValue(v: MValue): Value {
  if (typeof v === 'number') return create(ValueSchema, { kind: { case: 'number', value: v } });
  if (typeof v === 'string') return create(ValueSchema, { kind: { case: 'text', value: v } });
  return create(ValueSchema, { kind: { case: 'flag', value: v } });
}

function fromFilter(f: MFilter) {
  return {
    constraints: f.constraints.map((c) => ({ name: c.name, op: OP_NUMBERS.get(c.op)!, value: c.value === undefined || c.value === null ? undefined : toValue(c.value) })),
    area: f.area === undefined || f.area === null ? undefined : { radiusM: f.area.radiusM, center: f.area.center ?? undefined },
    tags: shownTags(f.tags),
  };
}

function fromElementParameters(ps: readonly MElementParameter[] | undefined) {
  return (ps ?? []).map((p) => ({ attribute: p.attribute, op: OP_NUMBERS.get(p.op)!, step: p.step, stepAttribute: p.stepAttribute }));
}

function fromPattern(p: MEventPattern): Pattern {
  return create(PatternSchema, {
    steps: p.steps.map((s) => ({ name: s.name, filter: fromFilter(s.filter), selection: s.selection === undefined ? Selection.UNSPECIFIED : SELECTION_NUMBERS.get(s.selection)!, withinMs: s.withinMs ?? 0 })),
    parameters: (p.parameters ?? []).map((q) => ({ left: { ...q.left }, op: OP_NUMBERS.get(q.op)!, right: { ...q.right } })),
    negations: (p.negations ?? []).map((n) => ({ filter: fromFilter(n.filter), between: n.between === undefined ? [] : [...n.between], before: n.before ?? '', withinMs: n.withinMs ?? 0, parameters: fromElementParameters(n.parameters) })),
    aggregates: (p.aggregates ?? []).map((a) => ({
      name: a.name,
      fn: FN_NUMBERS.get(a.fn)!,
      attribute: a.attribute ?? '',
      filter: fromFilter(a.filter),
      before: a.before,
      withinMs: a.withinMs,
      parameters: fromElementParameters(a.parameters),
      where: a.where === undefined ? undefined : { op: OP_NUMBERS.get(a.where.op)!, value: a.where.value },
    })),
    consuming: [...(p.consuming ?? [])],
  });
}

export function fromSubscription(s: DeviceSubscription): Subscription {
  return create(SubscriptionSchema, { id: s.id, filters: s.filters.map(fromFilter), pattern: s.pattern === undefined ? undefined : fromPattern(s.pattern) });
}

export function fromEvent(e: MEvent): Event {
  // Built without a prototype: an attribute may be called "__proto__".
  const attributes: Record<string, Value> = Object.create(null) as Record<string, Value>;
  for (const [k, v] of Object.entries(e.attributes)) attributes[k] = toValue(v);
  // A tenant's event: its id as its publisher gave it (without "<tenant>/"), its tags without the reserved one.
  const tenant = e.tags?.find((t) => t.startsWith(TENANT_TAG))?.slice(TENANT_TAG.length) ?? '';
  const id = tenant !== '' && e.id.startsWith(`${tenant}/`) ? e.id.slice(tenant.length + 1) : e.id;
  return create(EventSchema, { id, position: { lat: e.lat, lon: e.lon }, radiusM: e.radiusM ?? 0, attributes, tags: shownTags(e.tags), time: e.timeMs === undefined ? undefined : timestampFromMs(e.timeMs) });
}

/** Wire form of each event, built once however many devices it reaches (the embedded hub shares the object). */
const wireEvents = new WeakMap<MEvent, Event>();

export function fromDelivery(d: Delivery): Notification {
  let event = wireEvents.get(d.event);
  if (event === undefined) {
    event = fromEvent(d.event);
    wireEvents.set(d.event, event);
  }
  return create(NotificationSchema, {
    deliveryId: d.deliveryId,
    event,
    subscriptionIds: d.subscriptionIds,
    publishedAt: timestampFromMs(d.publishedAtMs),
    match:
      d.match === undefined
        ? undefined
        : {
            steps: d.match.steps.map((s) => ({ step: s.step, event: s.event === d.event ? event : fromEvent(s.event), time: timestampFromMs(s.timeMs) })),
            aggregates: { ...d.match.aggregates },
          },
  });
}

// ---- errors ----

const CODES: Record<string, grpc.status> = {
  INVALID_ARGUMENT: grpc.status.INVALID_ARGUMENT,
  NOT_FOUND: grpc.status.NOT_FOUND,
  ALREADY_EXISTS: grpc.status.ALREADY_EXISTS,
  RESOURCE_EXHAUSTED: grpc.status.RESOURCE_EXHAUSTED,
  UNAVAILABLE: grpc.status.UNAVAILABLE,
  UNAUTHENTICATED: grpc.status.UNAUTHENTICATED,
  PERMISSION_DENIED: grpc.status.PERMISSION_DENIED,
  FAILED_PRECONDITION: grpc.status.FAILED_PRECONDITION,
  DEADLINE_EXCEEDED: grpc.status.DEADLINE_EXCEEDED,
};

export interface StatusInfo {
  code: grpc.status;
  message: string;
  field: string;
  /** True for errors the client caused (no error log). */
  expected: boolean;
  /** A failed publish: what became of its events (the `ambit-publish` trailer). */
  outcome?: PublishOutcome;
  /**
   * A failed client stream: the index (from 0) of the message that was refused, when one was
   * (`ambit-message`), and the updates or events applied before the failure (`ambit-applied`).
   */
  stream?: { message?: number; applied: number };
  /** RESOURCE_EXHAUSTED by a rate limit: how long to wait (the `ambit-retry-after-ms` trailer and a google.rpc.RetryInfo). */
  retryAfterMs?: number;
}

/** What an error means on the wire. Anything unexpected is INTERNAL with a generic message. */
export function statusOf(err: unknown): StatusInfo {
  if (err instanceof PublishError) return { code: CODES[err.code], message: err.message, field: '', expected: err.outcome === 'queued', outcome: err.outcome };
  // A purged device's stream ends UNAVAILABLE by design, not because something failed.
  if (err instanceof DevicePurgedError) return { code: grpc.status.UNAVAILABLE, message: err.message, field: '', expected: true };
  if (err instanceof AmbitError) return { code: CODES[err.code] ?? grpc.status.UNKNOWN, message: err.message, field: err.field ?? '', expected: err.code !== 'UNAVAILABLE' };
  if (err instanceof AuthError) return { code: CODES[err.code], message: err.message, field: '', expected: true };
  if (err instanceof ApiError) {
    const retry = (err as { retryAfterMs?: unknown }).retryAfterMs;
    return { code: err.code, message: err.message, field: err.field, expected: true, ...(typeof retry === 'number' ? { retryAfterMs: retry } : {}) };
  }
  return { code: grpc.status.INTERNAL, message: 'internal error', field: '', expected: false };
}

/** An error the edge raises itself (failed preconditions, malformed requests). */
export class ApiError extends Error {
  constructor(
    readonly code: grpc.status,
    message: string,
    readonly field = '',
  ) {
    super(field === '' ? message : `${field}: ${message}`);
    this.name = 'ApiError';
  }
}

export function toServiceError(s: StatusInfo): Partial<grpc.StatusObject> {
  const metadata = new grpc.Metadata();
  if (s.field !== '') metadata.set('ambit-field', asciiField(s.field));
  const details = statusDetails(s.code, s.message, s.field, s.retryAfterMs);
  if (details !== null) metadata.set('grpc-status-details-bin', details);
  if (s.retryAfterMs !== undefined) metadata.set('ambit-retry-after-ms', String(s.retryAfterMs));
  if (s.outcome !== undefined) metadata.set('ambit-publish', s.outcome);
  if (s.stream !== undefined) {
    if (s.stream.message !== undefined) metadata.set('ambit-message', String(s.stream.message));
    metadata.set('ambit-applied', String(s.stream.applied));
  }
  return { code: s.code, details: s.message, metadata };
}

/**
 * gRPC's rich error model for bad input (INVALID_ARGUMENT naming a field): a google.rpc.Status
 * with one google.rpc.BadRequest field violation (the field, and the rule it broke), the bytes of
 * the `grpc-status-details-bin` trailer; null for other errors.
 */
export function statusDetails(code: number, message: string, field: string, retryAfterMs?: number): Buffer | null {
  if (code === grpc.status.RESOURCE_EXHAUSTED && retryAfterMs !== undefined) {
    const seconds = Math.floor(retryAfterMs / 1000);
    const retry = create(RetryInfoSchema, { retryDelay: { seconds: BigInt(seconds), nanos: (retryAfterMs - seconds * 1000) * 1_000_000 } });
    return Buffer.from(toBinary(RpcStatusSchema, create(RpcStatusSchema, { code, message, details: [anyPack(RetryInfoSchema, retry)] })));
  }
  if (field === '' || code !== grpc.status.INVALID_ARGUMENT) return null;
  const description = message.startsWith(`${field}: `) ? message.slice(field.length + 2) : message;
  const bad = create(BadRequestSchema, { fieldViolations: [{ field, description }] });
  return Buffer.from(toBinary(RpcStatusSchema, create(RpcStatusSchema, { code, message, details: [anyPack(BadRequestSchema, bad)] })));
}

/**
 * Metadata values must be printable ASCII (grpc-js throws on anything else, which here would be an
 * unhandled rejection: a client could crash the process with an attribute named "é"). Other
 * characters of a field path go as JSON `\uXXXX` escapes, so a quoted name stays a JSON string.
 */
export function asciiField(field: string): string {
  return field.replace(/[^\x20-\x7e]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

export function requestStatus(s: StatusInfo | null): RequestStatus {
  return s === null ? create(RequestStatusSchema, { code: 0 }) : create(RequestStatusSchema, { code: s.code, message: s.message, field: s.field, retryAfterMs: s.retryAfterMs ?? 0 });
}
