/**
 * The wire contract between gateways and the matcher in Redis mode: every entry kind of the
 * command stream `{p}in`, the publish reply, a stored notification and the matcher's stats record.
 * Both sides import this module and nothing of each other. Keys are in keys.ts, byte layouts in
 * codec.ts, the scripts that write `sub`/`unsub` entries and notifications in scripts.ts.
 *
 *   {p}in entries (field t names the kind):
 *     pub    corr <correlation id> gw <gateway id> events <JSON array of events>   gateway XADD
 *     loc    data <loc batch, codec.ts>                                             gateway MULTI
 *     sub    dev <device> sub <DeviceSubscription JSON>                             script ambitSub
 *     unsub  dev <device> id <subscription id>                                      script ambitUnsub
 *     purge  dev <device>: forget the device, drop its notifications      script ambitPurge (ambitGeoPurge)
 *   sharded by space (scripts ambitGeo*; ids from {p}{g}seq, so every shard's stream is in one
 *   order): pub entries carry `idx`, the JSON array of each event's index in the publish, and
 *   `own`, the positions of the events this shard counts (each event is counted by one shard); and
 *     rel    d <device> [p <16 position bytes>] to <shard> d … the devices leave this shard, each with
 *            the position it had until then and the shard it goes to (hand-over, id "<ms>-<q+1>")
 *     acq    then per device: d <device> f <shard it comes from, or ''> [p <16 position bytes>]
 *            s <stored subscriptions, a line each> (the devices come to this shard, id "<ms>-<q+2>")
 *   {p}n:{device} entries (id "<ms>-<ordinal>"):
 *     e <event JSON> s <JSON array of the device's matched subscription ids> p <published ms>
 */
import type { ErrorCode } from '../../src/model/errors.js';
import type { Event } from '../../src/model/types.js';
import { type Delivery, type DeliveryMatch, type DeviceSubscription, parseDeliveryId } from '../hub/port.js';

/** What the matcher publishes on a gateway's reply channel. */
export interface PublishReply {
  c: string;
  /** The shard that answers (sharding by space: a publish is answered by every shard it visits). */
  s?: number;
  /** Reached count per event, in order. */
  r?: number[];
  /** Indices of the events that were duplicates (their id published within the window). */
  d?: number[];
  error?: { code: ErrorCode; message: string };
}

/** The matcher's figures, as stored in `{p}matcher:stats` (its TTL is the liveness signal). */
export interface MatcherStatsRecord {
  matcherId: string;
  engine: string;
  engineDetail: string;
  subscriptions: number;
  filters: number;
  devices: number;
  memoryBytes: number;
  offset: string;
  locationsApplied: number;
  /** The leader's lease token (absent from versions without leases). */
  epoch?: number;
  extra: Record<string, number | string | boolean>;
}

/** One `{p}in` entry as the matcher reads it. */
export type InEntry =
  | { t: 'pub'; id: string; corr: string; gw: string; events: Event[] | null; error: PublishReply['error']; idx?: number[]; own?: number[] }
  | { t: 'rel'; id: string; devices: string[]; /** each device's position when it left (null: none) */ at: ({ lat: number; lon: number } | null)[]; /** the shard each went to ('' unknown) */ to: string[] }
  | { t: 'acq'; id: string; devices: Acquired[] }
  | { t: 'loc'; id: string; data: Buffer }
  | { t: 'sub'; id: string; device: string; sub: DeviceSubscription }
  | { t: 'unsub'; id: string; device: string; subscriptionId: string }
  | { t: 'purge'; id: string; device: string };

/** A device a shard takes over: where from, its position (null: none yet) and its stored subscriptions. */
export interface Acquired {
  device: string;
  /** The shard it leaves ('' for none: a device new to the deployment). */
  from: string;
  lat: number | null;
  lon: number | null;
  /** Its subscriptions as `{p}subs:{device}` stores them ("<in-entry id> <JSON>"). */
  stored: string[];
}

/** The XADD field list of a publish (after '*'). `eventsJson` is a JSON array of plain events. */
export function pubFields(corr: string, gatewayId: string, eventsJson: string): string[] {
  return ['t', 'pub', 'corr', corr, 'gw', gatewayId, 'events', eventsJson];
}

/** The XADD field list of a location batch (after '*'). */
export function locFields(blob: Buffer): (string | Buffer)[] {
  return ['t', 'loc', 'data', blob];
}

/**
 * Decodes one entry read with XREAD (fields as Buffers). Throws naming the entry when it is not a
 * well-formed command; a publish whose events do not parse decodes with `error` set instead, so
 * its publisher still gets an answer.
 */
export function parseInEntry(id: string, fields: Buffer[]): InEntry {
  const type = field(fields, 't')?.toString('latin1');
  switch (type) {
    case 'pub':
      return parsePub(id, fields);
    case 'loc':
      return { t: 'loc', id, data: required(fields, 'data', id) };
    case 'sub':
      return { t: 'sub', id, device: required(fields, 'dev', id).toString('utf8'), sub: JSON.parse(required(fields, 'sub', id).toString('utf8')) as DeviceSubscription };
    case 'unsub':
      return { t: 'unsub', id, device: required(fields, 'dev', id).toString('utf8'), subscriptionId: required(fields, 'id', id).toString('utf8') };
    case 'purge':
      return { t: 'purge', id, device: required(fields, 'dev', id).toString('utf8') };
    case 'rel': {
      const devices: string[] = [];
      const at: ({ lat: number; lon: number } | null)[] = [];
      const to: string[] = [];
      for (let i = 2; i + 1 < fields.length; i += 2) {
        const name = fields[i].toString('latin1');
        const v = fields[i + 1];
        if (name === 'd') {
          devices.push(v.toString('utf8'));
          at.push(null);
          to.push('');
        } else if (name === 'p' && at.length > 0 && v.length === 16) at[at.length - 1] = { lat: v.readDoubleLE(0), lon: v.readDoubleLE(8) };
        else if (name === 'to' && to.length > 0) to[to.length - 1] = v.toString('latin1');
      }
      return { t: 'rel', id, devices, at, to };
    }
    case 'acq':
      return { t: 'acq', id, devices: parseAcquired(id, fields) };
    default:
      throw new Error(`redis protocol: entry ${id} has unknown command type ${JSON.stringify(type)}`);
  }
}

function parseAcquired(id: string, fields: Buffer[]): Acquired[] {
  const out: Acquired[] = [];
  let cur: Acquired | null = null;
  for (let i = 2; i + 1 < fields.length; i += 2) {
    const name = fields[i].toString('latin1');
    const v = fields[i + 1];
    if (name === 'd') out.push((cur = { device: v.toString('utf8'), from: '', lat: null, lon: null, stored: [] }));
    else if (cur === null) throw new Error(`redis protocol: acq entry ${id} has field ${JSON.stringify(name)} before its first device`);
    else if (name === 'f') cur.from = v.toString('latin1');
    else if (name === 'p') {
      if (v.length !== 16) throw new Error(`redis protocol: acq entry ${id} has a position of ${v.length} bytes, not 16`);
      cur.lat = v.readDoubleLE(0);
      cur.lon = v.readDoubleLE(8);
    } else if (name === 's') for (const line of v.toString('utf8').split('\n')) cur.stored.push(line);
    else throw new Error(`redis protocol: acq entry ${id} has unknown field ${JSON.stringify(name)}`);
  }
  return out;
}

function parsePub(id: string, fields: Buffer[]): InEntry {
  const p: InEntry & { t: 'pub' } = {
    t: 'pub',
    id,
    corr: field(fields, 'corr')?.toString('utf8') ?? '',
    gw: field(fields, 'gw')?.toString('utf8') ?? '',
    events: null,
    error: undefined,
  };
  try {
    const events = JSON.parse(field(fields, 'events')?.toString('utf8') ?? 'null') as unknown;
    if (!Array.isArray(events)) throw new Error('events must be an array');
    const idx = field(fields, 'idx');
    if (idx !== undefined) {
      const list = JSON.parse(idx.toString('latin1')) as unknown;
      if (!Array.isArray(list) || list.length !== events.length || !list.every((x) => Number.isInteger(x) && (x as number) >= 0)) throw new Error('idx must be an array of event indices, one per event');
      p.idx = list as number[];
      const own = field(fields, 'own');
      if (own !== undefined) {
        const mine = JSON.parse(own.toString('latin1')) as unknown;
        if (!Array.isArray(mine) || !mine.every((x) => Number.isInteger(x) && (x as number) >= 0 && (x as number) < events.length)) throw new Error('own must be an array of positions among the events');
        p.own = mine as number[];
      }
    }
    p.events = events as Event[];
  } catch (err) {
    p.error = { code: 'INVALID_ARGUMENT', message: `redis matcher: malformed publish entry ${id}: ${err instanceof Error ? err.message : String(err)}` };
  }
  return p;
}

export function encodeReply(reply: PublishReply): string {
  return JSON.stringify(reply);
}

/** Null when the message is not JSON (the caller logs and ignores it). */
export function parseReply(message: string): PublishReply | null {
  try {
    return JSON.parse(message) as PublishReply;
  } catch {
    return null;
  }
}

/** A stored notification, from XRANGE's flat [field, value, ...]; null when it has no event. */
/**
 * A stored notification as its stream holds it: with its event (entries of earlier versions, field
 * 'e') or naming it (field 'r': the reference of `Keys.event`, read separately). Null when it has
 * neither.
 */
export function parseStoredNotification(
  deliveryId: string,
  f: readonly string[],
): { deliveryId: string; event: Event | null; ref: string | null; subscriptionIds: string[]; publishedAtMs: number; match?: DeliveryMatch } | null {
  let event: Event | null = null;
  let ref: string | null = null;
  let recipient: { subscriptionIds: string[]; match?: DeliveryMatch } = { subscriptionIds: [] };
  let publishedAtMs = 0;
  for (let j = 0; j + 1 < f.length; j += 2) {
    if (f[j] === 'r') ref = f[j + 1];
    else if (f[j] === 'e') event = JSON.parse(f[j + 1]) as Event;
    else if (f[j] === 's') recipient = parseRecipient(f[j + 1]);
    else if (f[j] === 'p') publishedAtMs = Number(f[j + 1]);
  }
  if (event === null && ref === null) return null;
  const out = { deliveryId, event, ref, subscriptionIds: recipient.subscriptionIds, publishedAtMs };
  return recipient.match === undefined ? out : { ...out, match: recipient.match };
}

/**
 * A stored notification's subscription ids: a JSON array, or for a pattern's match (E20) an object
 * `{s: ids, m: match}` (redis-fanout.ts writes both).
 */
export function parseRecipient(json: string): { subscriptionIds: string[]; match?: DeliveryMatch } {
  const v = JSON.parse(json) as string[] | { s: string[]; m: DeliveryMatch };
  return Array.isArray(v) ? { subscriptionIds: v } : { subscriptionIds: v.s, match: v.m };
}

/**
 * The events of recent pushed notifications by their JSON: the recipients of one event on a
 * gateway share one object, so it is parsed once, and encoded for the wire once (the encoding is
 * kept per event object), not once per recipient. The deliver script publishes an event's
 * recipients one after another, so a few hundred recent events are enough.
 */
export class RecentEvents {
  private readonly byJson = new Map<string, Event>();

  constructor(private readonly max = 256) {}

  /** The event of `json` (parsed now, or the object parsed for the same text lately); throws on bad JSON. */
  get(json: string): Event {
    let e = this.byJson.get(json);
    if (e === undefined) {
      e = JSON.parse(json) as Event;
      this.byJson.set(json, e);
      if (this.byJson.size > this.max) this.byJson.delete(this.byJson.keys().next().value as string);
    }
    return e;
  }
}

/**
 * A notification as the deliver script publishes it on the device's doorbell channel:
 * "<delivery id>\n<published ms>\n<subscription ids JSON>\n<event JSON>". Null for anything else
 * (a bare doorbell from an earlier version): the inbox then reads the stream.
 */
export function parsePushedNotification(message: string, events: RecentEvents): Delivery | null {
  const a = message.indexOf('\n');
  if (a < 0) return null;
  const b = message.indexOf('\n', a + 1);
  if (b < 0) return null;
  const c = message.indexOf('\n', b + 1);
  if (c < 0) return null;
  const deliveryId = message.slice(0, a);
  if (parseDeliveryId(deliveryId) === null) return null;
  try {
    const event = events.get(message.slice(c + 1));
    const r = parseRecipient(message.slice(b + 1, c));
    const d: Delivery = { deliveryId, event, subscriptionIds: r.subscriptionIds, publishedAtMs: Number(message.slice(a + 1, b)) };
    if (r.match !== undefined) d.match = r.match;
    return d;
  } catch {
    return null;
  }
}

function field(fields: Buffer[], name: string): Buffer | undefined {
  for (let i = 0; i + 1 < fields.length; i += 2) if (fields[i].length === name.length && fields[i].toString('latin1') === name) return fields[i + 1];
  return undefined;
}

function required(fields: Buffer[], name: string, id: string): Buffer {
  const v = field(fields, name);
  if (v === undefined) throw new Error(`redis protocol: entry ${id} lacks field ${JSON.stringify(name)}`);
  return v;
}
