/**
 * The port between the gRPC edge (gateway) and wherever state, matching and delivery live. Two
 * implementations: `EmbeddedHub` (one process, memory only) and `RedisHub` (gateways and a
 * matcher process sharing Redis). The edge validates requests and names fields; a Hub receives
 * only validated input and throws AmbitError (NOT_FOUND, ALREADY_EXISTS, RESOURCE_EXHAUSTED,
 * UNAVAILABLE) for what depends on state.
 */
import { AmbitError } from '../../src/model/errors.js';
import type { Limits } from '../../src/model/limits.js';
import type { EventPattern } from '../../src/model/event-patterns.js';
import type { Event, PositionUpdate, Subscription } from '../../src/model/types.js';

/** Subscriptions one device may hold unless configured otherwise; one more is RESOURCE_EXHAUSTED. */
export const DEFAULT_MAX_SUBSCRIPTIONS_PER_DEVICE = 1000;

/**
 * The limits the engine applies. Engine subscription ids are (device, id) pairs, so the engine's
 * id limit is the ceiling while the API keeps the model's default per id. The gateway checks them
 * too, so a request the matcher's engine would refuse fails at its caller.
 */
export const ENGINE_SIDE_LIMITS: Readonly<Partial<Limits>> = Object.freeze({ maxIdBytes: 1024 });

/** One notification as stored for a device. `deliveryId` orders a device's notifications. */
export interface Delivery {
  /** "<ms>-<seq>", increasing per device (Redis stream id format in both hubs). */
  deliveryId: string;
  event: Event;
  /** The device's subscriptions the event matched (the device's own ids). */
  subscriptionIds: string[];
  /** Milliseconds since the epoch when the event was accepted (a pattern's match: when it was found). */
  publishedAtMs: number;
  /** A pattern subscription's match (then `event` is its terminator's, docs/semantics.md E20). */
  match?: DeliveryMatch;
}

/** The events of a pattern's steps, terminator first, and its aggregates by name (E20). */
export interface DeliveryMatch {
  steps: { step: string; event: Event; timeMs: number }[];
  aggregates: Record<string, number>;
}

/**
 * Why a pattern subscription is refused (FAILED_PRECONDITION): a hub whose match core holds no
 * pattern matcher (every process the service starts has one).
 */
export const NO_PATTERNS = 'pattern subscriptions are not served by this hub';

/** A device's subscription as the device names it (owner implied). */
export interface DeviceSubscription {
  id: string;
  /** Empty for a pattern subscription. */
  filters: Subscription['filters'];
  /** A pattern subscription (docs/semantics.md §9): validated by the edge as `subscription.pattern`. */
  pattern?: EventPattern;
}

export interface PublishResult {
  eventId: string;
  /** Subscriptions the event matched (a duplicate: those the first event with its id matched). */
  reached: number;
  /**
   * An event with this id was published within the dedupe window (or earlier in the same call):
   * nothing was delivered for this one.
   */
  duplicate?: boolean;
}

/** The hot path of a device stream: a coalescing writer of one device's position. */
export interface LocationWriter {
  /** Takes an already range-checked position; never blocks, never throws for load. */
  update(lat: number, lon: number): void;
  /** Flushes what is pending and ends the writer. */
  close(): Promise<void>;
}

/**
 * A device's notifications from a resume point on. Pull-based so a device that does not read
 * leaves its backlog in the store (bounded by retention), not in gateway memory.
 */
export interface Inbox {
  /** Delivery resumes after this id ('' = from the oldest retained). */
  readonly resumeToken: string;
  /** Notifications known to be lost between the resume point and the oldest retained one. */
  readonly missed: number;
  /** The resume token asked for names a notification the device's log never issued: its state was lost. */
  readonly stateLost: boolean;
  /**
   * Names the device's state where it is held: new whenever that state starts empty (the store
   * restarted empty, or the device was purged), the same otherwise.
   */
  readonly stateId: string;
  /**
   * Resolves with 1..max notifications after the last pulled one, waiting for them; [] once closed;
   * rejects with `purgedError` once the device's state was purged.
   */
  pull(max: number): Promise<Delivery[]>;
  /** Records that the device has processed everything up to and including `deliveryId`. */
  ack(deliveryId: string): Promise<void>;
  /** Ends the inbox; a pending pull resolves with []. */
  close(): void;
}

/**
 * An inbox that can also be drained without waiting (the embedded hub's): the node's hub server
 * pushes from it to gateway processes instead of answering pulls.
 */
export interface DrainableInbox extends Inbox {
  /**
   * Up to `max` notifications after the last taken one, available now ([] when none or closed);
   * throws `purgedError` once the device's state was purged (as `pull` rejects).
   */
  take(max: number): Delivery[];
  /**
   * Calls `ready` once, when notifications after the last taken one exist (at once if they do
   * now), the inbox closes or the hub closes. Nothing when either is closed already; one
   * registration at a time.
   */
  notify(ready: () => void): void;
}

export interface HubStats {
  mode: 'embedded' | 'redis';
  engine: string;
  engineDetail: string;
  subscriptions: number;
  filters: number;
  devices: number;
  eventsPublished: number;
  notifications: number;
  locationUpdates: number;
  notificationsDropped: number;
  engineMemoryBytes: number;
  /** Engine-specific figures (GPU memory, path, ...). */
  extra: Record<string, number | string | boolean>;
}

export interface DeviceInfo {
  subscriptions: DeviceSubscription[];
  location: { lat: number; lon: number } | null;
}

/** One device of a listing: what it holds and when it was last seen. */
export interface DeviceSummary {
  device: string;
  subscriptions: number;
  location: { lat: number; lon: number } | null;
  /** Milliseconds since the epoch when a gateway last saw the device (0: not recorded). */
  lastSeenMs: number;
}

/** A page of devices that hold subscriptions, in no order a caller may rely on. */
export interface DeviceQuery {
  /** Only devices whose id starts with this ('' for all). */
  prefix: string;
  /** Where the previous page ended ('' for the first page): a hub's own token, opaque to callers. */
  after: string;
  /** At most this many devices (≥ 1). */
  limit: number;
}

export interface DevicePage {
  devices: DeviceSummary[];
  /** Token of the next page; '' when this was the last. */
  next: string;
}

/** What a purge removed. */
export interface PurgeResult {
  subscriptions: number;
  /** Notifications of its backlog (stored, not yet trimmed by retention). */
  notifications: number;
  /** Whether it had a position. */
  location: boolean;
}

/**
 * A revocation of tokens, kept until `untilS` (seconds since the epoch): one token by its id (`jti`),
 * or every token of a subject issued at or before `issuedUpToS`.
 */
export type Revocation = { tokenId: string; untilS: number } | { subject: string; issuedUpToS: number; untilS: number };

/** Revocations held at most (a deployment revokes by subject, not token by token, at scale). */
export const MAX_REVOCATIONS = 100_000;

/** The key a revocation is kept under: one per token id, one per subject. */
export function revocationKey(r: Revocation): string {
  return 'tokenId' in r ? `id:${r.tokenId}` : `sub:${r.subject}`;
}

/**
 * Adds revocations to those kept by key (the later of two for one key: the wider issued-up-to and
 * the longer keep), drops the ones past `nowS`; RESOURCE_EXHAUSTED beyond MAX_REVOCATIONS (nothing added).
 */
export function mergeRevocations(kept: Map<string, Revocation>, add: readonly Revocation[], nowS: number): void {
  for (const [k, r] of kept) if (r.untilS <= nowS) kept.delete(k);
  let fresh = 0;
  for (const r of add) if (!kept.has(revocationKey(r))) fresh++;
  if (kept.size + fresh > MAX_REVOCATIONS) throw new AmbitError('RESOURCE_EXHAUSTED', `at most ${MAX_REVOCATIONS} revocations are kept; revoke by subject instead of token by token`);
  for (const r of add) {
    if (r.untilS <= nowS) continue;
    const k = revocationKey(r);
    const had = kept.get(k);
    if (had === undefined) kept.set(k, r);
    else if ('tokenId' in r) kept.set(k, { tokenId: r.tokenId, untilS: Math.max(had.untilS, r.untilS) });
    else kept.set(k, { subject: r.subject, issuedUpToS: Math.max((had as { issuedUpToS: number }).issuedUpToS, r.issuedUpToS), untilS: Math.max(had.untilS, r.untilS) });
  }
}

/** Devices at most per `listDevices` page. */
export const MAX_DEVICE_PAGE = 1000;

/** The message an open inbox of a purged device ends with. */
export const PURGED_MESSAGE = "the device's state was purged (reconnect to start afresh)";

/** What ends an open inbox of a device whose state was purged: UNAVAILABLE (reconnect), an expected end. */
export class DevicePurgedError extends AmbitError {
  constructor() {
    super('UNAVAILABLE', PURGED_MESSAGE);
    this.name = 'DevicePurgedError';
  }
}

export function purgedError(): DevicePurgedError {
  return new DevicePurgedError();
}

/** A value kept with an event object while the event is alive. */
export interface EventField<T> {
  get(e: Event): T | undefined;
  set(e: Event, v: T): void;
}

/** Returns the object it is given: a subclass's fields are then added to that object. */
class Stamped {
  constructor(e: object) {
    return e;
  }
}

/**
 * What a process keeps with an event while the event is alive, as private fields added to the
 * event object itself (a constructor that returns the object it is given): invisible to JSON,
 * Object.keys, spreads and deep equality, gone with the event, and set and read through inline
 * caches. Not WeakMaps (an ephemeron per event, thousands a second in every hub thread and
 * gateway, is work for the garbage collector and a hash per lookup), nor defineProperty (a runtime
 * call per event: 5% of a gateway's time in a profile).
 */
class EventSideFields extends Stamped {
  #api: Uint8Array | undefined = undefined;
  #link: Buffer | undefined = undefined;
  #num: number | undefined = undefined;

  /** The event with its fields (added on first use). */
  private static of(e: object): EventSideFields {
    if (!(#api in e)) new EventSideFields(e);
    return e as EventSideFields;
  }

  static readonly api: EventField<Uint8Array> = {
    get: (e) => (#api in e ? (e as EventSideFields).#api : undefined),
    set: (e, v) => void (EventSideFields.of(e).#api = v),
  };
  static readonly link: EventField<Buffer> = {
    get: (e) => (#api in e ? (e as EventSideFields).#link : undefined),
    set: (e, v) => void (EventSideFields.of(e).#link = v),
  };
  static readonly num: EventField<number> = {
    get: (e) => (#api in e ? (e as EventSideFields).#num : undefined),
    set: (e, v) => void (EventSideFields.of(e).#num = v),
  };
}

/**
 * Events as the API encodes them (an `ambit.v1.Event`), kept while the event is alive: set by the
 * gateway that accepted the publish when its hub sends events to other processes
 * (`Hub.forwardsEvents`), carried beside the event on the node's links (link.ts), and spliced
 * into every notification of the event (services/edge/notification-frame.ts). So an event is
 * encoded once on a node, not once per gateway that delivers it.
 */
export const apiEventBytes: EventField<Uint8Array> = EventSideFields.api;

/** The event as the node's links encode it (services/hub/link.ts), kept while the event is alive. */
export const linkEventBytes: EventField<Buffer> = EventSideFields.link;

/** The event's number in the node (services/hub/link.ts), kept while the event is alive. */
export const eventNumberField: EventField<number> = EventSideFields.num;

export interface Hub {
  readonly mode: 'embedded' | 'redis';
  /**
   * Events published here travel to other processes of the node, which deliver them (the
   * node-local link): a gateway then encodes each event for the API once, before publishing
   * (`apiEventBytes`).
   */
  readonly forwardsEvents?: boolean;
  /** ALREADY_EXISTS when the device has a subscription with that id. */
  addSubscription(device: string, sub: DeviceSubscription): Promise<void>;
  /** NOT_FOUND when the device has no subscription with that id. */
  replaceSubscription(device: string, sub: DeviceSubscription): Promise<void>;
  /** NOT_FOUND when the device has no subscription with that id. */
  removeSubscription(device: string, subscriptionId: string): Promise<void>;
  listSubscriptions(device: string): Promise<DeviceSubscription[]>;
  deviceInfo(device: string): Promise<DeviceInfo>;
  /** Applies validated positions; resolves once they are accepted (durable in Redis mode). */
  updateLocations(updates: readonly PositionUpdate[]): Promise<void>;
  locationWriter(device: string): LocationWriter;
  /** Matches and stores notifications; resolves once every event's notifications are stored. */
  publish(events: readonly Event[]): Promise<PublishResult[]>;
  /** Opens the device's inbox after `resumeAfter` (null: after the last acknowledged). */
  openInbox(device: string, resumeAfter: string | null): Promise<Inbox>;
  stats(): Promise<HubStats>;
  /**
   * Devices that hold at least one subscription, a page at a time (`DeviceQuery`); a device
   * may be missing from a listing made while it subscribes or is purged, never twice in one page.
   */
  listDevices(query: DeviceQuery): Promise<DevicePage>;
  /**
   * Removes everything the deployment holds for a device: its subscriptions, its position, its
   * notification backlog, its acknowledgements and when it was last seen. Its open inboxes end
   * (`purgedError`); a device that connects again starts with empty state (`stateLost`).
   */
  purgeDevice(device: string): Promise<PurgeResult>;
  /** Records that gateways saw these devices at `ms` (an older time than one recorded changes nothing). */
  markSeen(devices: readonly string[], ms: number): Promise<void>;
  /**
   * Purges up to `max` devices last seen before `beforeMs` (devices never recorded as seen are
   * kept); returns the ids purged. Connected devices are seen again by their gateways on a
   * period much shorter than any expiry, so they do not expire.
   */
  expireDevices(beforeMs: number, max: number): Promise<string[]>;
  /**
   * Revokes tokens in the whole deployment (kept until each one's `untilS`); RESOURCE_EXHAUSTED
   * beyond MAX_REVOCATIONS.
   */
  revokeTokens(revocations: readonly Revocation[]): Promise<void>;
  /**
   * Calls `listener` with every revocation in force, now and whenever they change (other
   * gateways' revocations too); returns a function that stops it.
   */
  watchRevocations(listener: (all: readonly Revocation[]) => void): () => void;
  close(): Promise<void>;
  /** Redis mode: each matcher partition or shard (absent where there are none: embedded). */
  shardStatus?(): Promise<ShardStatus[]>;
  /**
   * A deployment sharded by space: gives cells of the shard map to other geographic shards while
   * traffic flows. Absent on hubs that are not.
   */
  moveCells?(moves: readonly CellMove[]): Promise<{ version: number; devicesMoved: number }>;
  /**
   * A deployment sharded by space: moves of cells (at most `maxMoves`) that even out the devices
   * homed on the geographic shards, counted by the cells they are in; nothing is moved. Absent on
   * hubs that are not.
   */
  planCells?(maxMoves: number): Promise<CellPlan>;
  /**
   * A token bucket shared by every gateway of the deployment (rate limits, services/edge/rate-limits.ts):
   * takes `n` tokens of bucket `key` (capacity `capacity`, refilled at `perS`); resolves 0 when
   * granted, else the milliseconds until they would be. Absent where gateways share nothing (embedded).
   */
  takeQuota?(key: string, n: number, perS: number, capacity: number): Promise<number>;
}

/** One matcher partition or shard of a Redis deployment as its leader last reported it. */
export interface ShardStatus {
  /** "matcher" (one), "partition k", "geo k" or "wide k". */
  name: string;
  /** Its leader's stats record is fresh (it expires when no matcher of the shard renews it). */
  alive: boolean;
  matcherId: string;
  epoch: number;
  subscriptions: number;
  devices: number;
  /** The last command whose effects are stored, and how long its command stream is. */
  offset: string;
  streamLength: number;
  /** Sharded by space: devices handed over to it and from it. */
  handOversIn: number;
  handOversOut: number;
}

/** A cell of a shard map (row, column) and the geographic shard it is to belong to. */
export interface CellMove {
  row: number;
  col: number;
  shard: number;
}

/** A plan that fits the shard map to load (`Hub.planCells`): the moves and each geographic shard's devices before and after. */
export interface CellPlan {
  moves: CellMove[];
  before: number[];
  after: number[];
}

// ---- delivery ids ----

/**
 * Parses "<ms>-<seq>" (each 1-16 digits, safe integers); null when malformed. A character loop,
 * not a regular expression: every ack and resume point goes through it.
 */
export function parseDeliveryId(id: string): [number, number] | null {
  const n = id.length;
  let i = 0;
  let a = 0;
  while (i < n && i < 17) {
    const c = id.charCodeAt(i);
    if (c < 48 || c > 57) break;
    a = a * 10 + (c - 48);
    i++;
  }
  if (i === 0 || i > 16 || i >= n || id.charCodeAt(i) !== 45) return null;
  const start = ++i;
  let b = 0;
  while (i < n) {
    const c = id.charCodeAt(i);
    if (c < 48 || c > 57) return null;
    b = b * 10 + (c - 48);
    i++;
  }
  const digits = i - start;
  if (digits === 0 || digits > 16) return null;
  return Number.isSafeInteger(a) && Number.isSafeInteger(b) ? [a, b] : null;
}

/** Orders two well-formed delivery ids ('' sorts first). */
export function compareDeliveryIds(a: string, b: string): number {
  if (a === b) return 0;
  if (a === '') return -1;
  if (b === '') return 1;
  const x = parseDeliveryId(a);
  const y = parseDeliveryId(b);
  if (x === null || y === null) throw new Error(`hub: malformed delivery id ${JSON.stringify(x === null ? a : b)}`);
  return x[0] - y[0] || x[1] - y[1];
}

// ---- engine-side subscription keys ----

/**
 * Subscriptions are per device at the API and global in the engine: the engine id is the pair,
 * JSON-encoded so no choice of ids can collide.
 */
export function subscriptionKey(device: string, subscriptionId: string): string {
  return JSON.stringify([device, subscriptionId]);
}

export function splitSubscriptionKey(key: string): [device: string, subscriptionId: string] {
  const v = JSON.parse(key) as [string, string];
  return v;
}

/**
 * Which of `n` parts a device belongs to (hub partitions, fan-out shards, matcher partitions,
 * Redis device groups): FNV-1a over the id's UTF-16 code units, modulo n. Stable across processes
 * and versions: every process of a deployment must place a device in the same part.
 */
export function devicePart(device: string, n: number): number {
  if (n === 1) return 0;
  let h = 0x811c9dc5;
  for (let i = 0; i < device.length; i++) {
    h ^= device.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return (h >>> 0) % n;
}
