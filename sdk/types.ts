/**
 * Plain TypeScript shapes for subscriptions, events and notifications, and their conversion to and
 * from the protobuf messages of proto/ambit/v1. The SDK checks here only what the conversion needs
 * (known operators, value types, finite positions); every other rule is the server's, which names
 * the field in its error.
 */
import type { MessageInitShape } from '@bufbuild/protobuf';
import { timestampMs } from '@bufbuild/protobuf/wkt';
import {
  type Event as WireEvent,
  type EventSchema,
  type Notification as WireNotification,
  Op as WireOp,
  type Subscription as WireSubscription,
  type SubscriptionSchema,
  type Value as WireValue,
  type ValueSchema,
} from '../api/gen/ambit/v1/types_pb.js';
import type { Constraint, LatLon, Op, Value as AttributeValue } from '../src/model/types.js';
import { invalid } from './errors.js';

// The value, operator, position and constraint shapes are the model's own (src/model/types.ts).
export type { AttributeValue, Constraint, LatLon, Op };

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

/** Matches an event when any filter does. `id` is the device's own name for it. */
export interface Subscription {
  id: string;
  filters: Filter[];
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
}

export interface Notification {
  /** Increases per device; the SDK acknowledges it (see AmbitDevice) and dedupes by it. */
  deliveryId: string;
  event: AmbitEvent;
  /** Which of the device's subscriptions matched. */
  subscriptionIds: string[];
  /** When the server accepted the event, ms since the epoch. */
  publishedAtMs: number;
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
  return {
    id: s.id,
    filters: s.filters.map((f, i) => {
      const ff = `${field}.filters[${i}]`;
      const constraints = (f.constraints ?? []).map((c, j) => {
        const cf = `${ff}.constraints[${j}]`;
        const op = OP_TO_WIRE[c.op];
        if (op === undefined) throw invalid(`${cf}.op`, `must be one of ${Object.keys(OP_TO_WIRE).join(', ')}, got ${JSON.stringify(c.op)}`);
        return { name: c.name, op, value: c.value === undefined ? undefined : toWireValue(`${cf}.value`, c.value) };
      });
      const tags = wireTags(`${ff}.tags`, f.tags);
      if (f.area === undefined) return { constraints, tags };
      if (f.area.center !== undefined) checkLatLon(`${ff}.area.center`, f.area.center.lat, f.area.center.lon);
      return { constraints, tags, area: { radiusM: f.area.radiusM, center: f.area.center === undefined ? undefined : { lat: f.area.center.lat, lon: f.area.center.lon } } };
    }),
  };
}

export function fromWireSubscription(s: WireSubscription): Subscription {
  return {
    id: s.id,
    filters: s.filters.map((f) => {
      const out: Filter = {
        constraints: f.constraints.map((c) => {
          const value = fromWireValue(c.value);
          const op = OP_FROM_WIRE.get(c.op) ?? ('eq' as Op);
          return value === undefined ? { name: c.name, op } : { name: c.name, op, value };
        }),
      };
      if (f.area !== undefined) out.area = f.area.center === undefined ? { radiusM: f.area.radiusM } : { radiusM: f.area.radiusM, center: { lat: f.area.center.lat, lon: f.area.center.lon } };
      if (f.tags.length > 0) out.tags = [...f.tags];
      return out;
    }),
  };
}

export function toWireEvent(field: string, e: EventInput): MessageInitShape<typeof EventSchema> {
  if (typeof e !== 'object' || e === null) throw invalid(field, 'must be an object');
  checkLatLon(field, e.lat, e.lon);
  const attributes: Record<string, MessageInitShape<typeof ValueSchema>> = {};
  if (e.attributes !== undefined) for (const k of Object.keys(e.attributes)) attributes[k] = toWireValue(`${field}.attributes[${JSON.stringify(k)}]`, e.attributes[k]);
  return { id: e.id ?? '', position: { lat: e.lat, lon: e.lon }, radiusM: e.radiusM ?? 0, attributes, tags: wireTags(`${field}.tags`, e.tags) };
}

/** Tags as the wire carries them: an array of strings (the server normalises and checks them). */
function wireTags(field: string, tags: unknown): string[] {
  if (tags === undefined || tags === null) return [];
  if (!Array.isArray(tags)) throw invalid(field, 'must be an array of strings');
  for (let i = 0; i < tags.length; i++) if (typeof tags[i] !== 'string') throw invalid(`${field}[${i}]`, 'must be a string');
  return tags as string[];
}

export function fromWireEvent(e: WireEvent | undefined): AmbitEvent {
  const attributes: Record<string, AttributeValue> = {};
  if (e === undefined) return { id: '', lat: 0, lon: 0, radiusM: 0, attributes, tags: [] };
  for (const k of Object.keys(e.attributes)) {
    const v = fromWireValue(e.attributes[k]);
    if (v !== undefined) attributes[k] = v;
  }
  return { id: e.id, lat: e.position?.lat ?? 0, lon: e.position?.lon ?? 0, radiusM: e.radiusM, attributes, tags: [...e.tags] };
}

export function fromWireNotification(n: WireNotification): Notification {
  return {
    deliveryId: n.deliveryId,
    event: fromWireEvent(n.event),
    subscriptionIds: n.subscriptionIds,
    publishedAtMs: n.publishedAt === undefined ? 0 : timestampMs(n.publishedAt),
  };
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
