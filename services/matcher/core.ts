/**
 * The match core, whichever hub it sits behind: owns the engine, lists each device's
 * subscriptions in the API's own form (filter subscriptions read back from the engine, which
 * holds them; pattern subscriptions kept here), and turns an engine match into owner-aware recipients
 * (device → its matched subscription ids) through a table kept beside the engine: no engine key
 * is parsed per matched pair. No I/O; a FanOut (fanout.ts) stores and delivers.
 */
import { AmbitError, show } from '../../src/model/errors.js';
import type { DeviceHandle, Listed, Matcher, MatcherStats } from '../../src/engines/matcher.js';
import type { NFilter } from '../../src/model/limits.js';
import type { Event, PositionUpdate } from '../../src/model/types.js';
import { type PatternMatcher, type PatternMatcherSnapshot, type PatternNotification, eventInput } from '../../src/engines/event-patterns/pattern-matcher.js';
import { DEFAULT_MAX_SUBSCRIPTIONS_PER_DEVICE, NO_PATTERNS, type DeliveryMatch, type DeviceSubscription, type HubStats, splitSubscriptionKey, subscriptionKey } from '../hub/port.js';

export type { Listed };

export interface Recipient {
  device: string;
  subscriptionIds: string[];
  /** A pattern subscription's match (its one subscription id is the pattern's). */
  match?: DeliveryMatch;
}

/** The pattern subscriptions' state at one point of a core's input (capturePatterns). */
export interface PatternCut {
  matcher: PatternMatcherSnapshot;
  subscriptions: [string, DeviceSubscription][];
}

/** One pattern match as a fan-out stores it: the terminator's event and its one recipient. */
export interface PatternDelivery {
  event: Event;
  recipient: Recipient;
}

/**
 * What a fan-out may compute once per device and reuse for each of its notifications: the
 * device's shard among `shards` (0: not computed yet) and the device id as the node's link
 * writes it (services/hub/fanout-shard.ts). Kept with the device's subscriptions.
 */
export interface DeviceMemo {
  shards: number;
  shard: number;
  idBytes: Uint8Array | null;
}

/**
 * What `held` answers for a filter subscription: the core keeps none of it but its id and owner
 * entry. The engine holds it, and `get` gives it back (each subscription kept here as well cost
 * about as much memory again as the engine's own copy).
 */
const IN_ENGINE: DeviceSubscription = Object.freeze({ id: '', filters: Object.freeze([]) as unknown as DeviceSubscription['filters'] });

/**
 * A filter subscription as the API's conversion writes it (services/edge/convert.ts `filter`):
 * a constraint's value only where it has one, an area only where there is one (its centre only
 * where fixed), tags only where there are some.
 */
function apiFilters(fs: readonly NFilter[]): DeviceSubscription['filters'] {
  return fs.map((f) => {
    const out: DeviceSubscription['filters'][number] = { constraints: f.constraints.map((c) => (c.value === null ? { name: c.name, op: c.op } : { name: c.name, op: c.op, value: c.value })) };
    if (f.area !== null) out.area = f.area.center === null ? { radiusM: f.area.radiusM } : { radiusM: f.area.radiusM, center: { lat: f.area.center.lat, lon: f.area.center.lon } };
    if (f.tags.length > 0) out.tags = [...f.tags];
    return out;
  });
}

/**
 * Appends a subscription id to the device's list. A short list is copied at its exact length (an
 * array grown by push keeps room for 16 more: 184 bytes for one id against 56); a long one grows by
 * push, so adding stays amortised O(1).
 */
function addId(mine: DeviceSubs, id: string): void {
  if (mine.ids.length < EXACT_IDS) mine.ids = mine.ids.concat(id);
  else mine.ids.push(id);
}
const EXACT_IDS = 16;

/** Takes a pattern subscription out of the device's given ones (the map goes with its last). */
function forgetGiven(mine: DeviceSubs, id: string): void {
  if (mine.given === null) return;
  mine.given.delete(id);
  if (mine.given.size === 0) mine.given = null;
}

/** A device's subscriptions, and the marks that group one event's matches by device. */
interface DeviceSubs extends DeviceMemo {
  readonly device: string;
  /**
   * Its subscriptions' ids in the order first put (a replaced one keeps its place). An array, not
   * a map: most devices hold a few, and a map per device cost about 150 bytes more than this.
   * Whether it holds one is asked of the owner table (filter subscriptions) or `given`.
   */
  ids: string[];
  /** Its pattern subscriptions as given, by id; null while it holds none. */
  given: Map<string, DeviceSubscription> | null;
  /** How many of its subscriptions are pattern subscriptions (their owner's position goes to the patterns too). */
  patterns: number;
  /** The match that last touched this device, and its recipient's index in that match. */
  stamp: number;
  slot: number;
}

/**
 * What an engine subscription key stands for: the device (with its memo) and the subscription
 * id. `num` numbers the subscription in this core: an engine that keeps tags (Matcher.tag) keeps
 * it as the subscription's tag and lists it when matched, and a fan-out that resolves matches
 * elsewhere (fan-out shards) sends it instead of the key. Numbers are dense: one freed by a
 * removal is given again once every match begun before it was freed has settled (any of them
 * could list it).
 */
export interface Owner {
  /** The engine key. */
  readonly key: string;
  readonly of: DeviceMemo & { readonly device: string };
  readonly id: string;
  readonly num: number;
  /**
   * The subscription left the core. A match listed before (a tag the engine listed while it was
   * live) is delivered as matched by its device and id, as a key the core no longer knows is.
   */
  gone: boolean;
}

/** A match core's owners as a fan-out reads the matches of `matchKeys`: by key, or by number. */
export interface OwnerTable {
  ownerOf(key: string): Owner | undefined;
  /** The owner numbered `num` while a match that may list it is in flight (gone ones included). */
  owner(num: number): Owner | undefined;
  /** Whether the owner numbered `num` left the core (read without touching the owner). */
  isGone(num: number): boolean;
}

interface OwnerEntry extends Owner {
  readonly of: DeviceSubs;
}

/** A device's last position plus the engine handle that moves it (two writes per update). */
interface Position {
  readonly device: string;
  lat: number;
  lon: number;
  handle: DeviceHandle | null;
  /** The device owns pattern subscriptions: the pattern matcher gets its positions too (E5). */
  patterned: boolean;
  /** Purged: a writer holding this record resolves the device again. */
  dead?: boolean;
}

export class MatchCore {
  private readonly subs = new Map<string, DeviceSubs>();
  /** Engine key → owner, so a match is grouped by device without decoding keys. */
  private readonly owners = new Map<string, OwnerEntry>();
  /** Owners by number (gone ones until their number is free again), and which of them are gone. */
  private readonly byNum: (OwnerEntry | undefined)[] = [];
  private goneByNum = new Uint8Array(1024);
  /** Numbers free to give. */
  private readonly freeNums: number[] = [];
  /**
   * Numbers freed while matches were in flight, as (number, matches begun by then) pairs in the
   * order freed: each is free once every match begun by then has settled (later ones cannot list
   * it), so numbers come back under a load where matches always overlap.
   */
  private readonly freedWhileMatching: number[] = [];
  /** Matches begun so far (each one's serial), and the serials of those not settled. */
  private matchesBegun = 0;
  private readonly matchesInFlight = new Set<number>();
  private stamp = 0;
  private nextOwner = 0;
  /**
   * Told when a device comes to own pattern subscriptions or owns none any more: a holder of
   * positions outside the core (the Redis matcher's) sends such a device's moves to the patterns.
   */
  onPatternOwner: ((device: string, owns: boolean) => void) | null = null;
  /** Told when a subscription leaves the table (a fan-out that was sent its number forgets it). */
  onOwnerRemoved: ((o: Owner) => void) | null = null;
  private readonly positions = new Map<string, Position>();
  private subscriptionCount = 0;
  /** The devices purged while matches were awaited (matchesInFlight): their late matches are dropped. */
  private readonly purgedWhileMatching = new Map<string, number>();
  /** Counts purges made while a match was awaited (the value kept with each such device). */
  private purgeGen = 0;
  locationUpdates = 0;

  /**
   * `maxPerDevice`: subscriptions one device may hold (RESOURCE_EXHAUSTED beyond), pattern
   * subscriptions included. `patterns`: serves pattern subscriptions (owned and closed by the
   * core); without it they are refused (FAILED_PRECONDITION).
   */
  constructor(
    readonly engine: Matcher,
    readonly maxPerDevice = DEFAULT_MAX_SUBSCRIPTIONS_PER_DEVICE,
    readonly patterns: PatternMatcher | null = null,
  ) {}

  /** Adds or replaces (mode) one device subscription; the engine validates again, as a guard. */
  put(device: string, sub: DeviceSubscription, mode: 'add' | 'replace' | 'upsert'): void {
    let mine = this.subs.get(device);
    const key = subscriptionKey(device, sub.id);
    const old = this.held(mine, sub.id, key);
    const exists = old !== undefined;
    if (mode === 'add' && exists) throw new AmbitError('ALREADY_EXISTS', `device already has subscription ${show(sub.id)}`, 'subscription.id');
    if (mode === 'replace' && !exists) throw new AmbitError('NOT_FOUND', `device has no subscription ${show(sub.id)}`, 'subscription.id');
    if (!exists && mode !== 'upsert' && (mine?.ids.length ?? 0) >= this.maxPerDevice) {
      throw new AmbitError('RESOURCE_EXHAUSTED', `device already has ${this.maxPerDevice} subscriptions, the most allowed`, 'subscription');
    }
    if (sub.pattern !== undefined) {
      if (this.patterns === null) throw new AmbitError('FAILED_PRECONDITION', NO_PATTERNS, 'subscription.pattern');
      const ps = { id: key, owner: device, pattern: sub.pattern };
      // The new version first: if it is refused, the old one stays.
      if (old?.pattern !== undefined) this.patterns.replace(ps);
      else {
        this.patterns.add(ps);
        if (old !== undefined) this.engine.remove(key);
      }
    } else {
      const engineSub = { id: key, owner: device, filters: sub.filters };
      if (old !== undefined && old.pattern === undefined) this.engine.replace(engineSub);
      else {
        this.engine.add(engineSub);
        if (old !== undefined) this.patterns!.remove(key);
      }
    }
    mine ??= this.deviceSubs(device);
    if (!exists) {
      this.subscriptionCount++;
      addId(mine, sub.id);
    }
    // Pattern subscriptions have no engine key to resolve: they are delivered as their matches come.
    const wasFilters = old !== undefined && old.pattern === undefined;
    if (sub.pattern === undefined && !wasFilters) this.newOwner(key, mine, sub.id);
    else if (sub.pattern !== undefined && wasFilters) this.dropOwner(key);
    // A replaced version is a new engine subscription: tagged again.
    if (sub.pattern === undefined) this.engine.tag?.(key, this.owners.get(key)!.num);
    if (sub.pattern !== undefined) (mine.given ??= new Map()).set(sub.id, sub);
    else if (old?.pattern !== undefined) forgetGiven(mine, sub.id);
    this.countPatterns(mine, (sub.pattern !== undefined ? 1 : 0) - (old?.pattern !== undefined ? 1 : 0));
  }

  /** The device's entry, made (empty) if it holds nothing yet. */
  private deviceSubs(device: string): DeviceSubs {
    let mine = this.subs.get(device);
    if (mine === undefined) {
      mine = { device, ids: [], given: null, patterns: 0, stamp: 0, slot: 0, shards: 0, shard: 0, idBytes: null };
      this.subs.set(device, mine);
      this.devicesVersion++;
    }
    return mine;
  }

  /**
   * The device's subscription `id` (engine key `key`): IN_ENGINE for a filter subscription (the
   * owner table holds each), the pattern subscription as given, or undefined.
   */
  private held(mine: DeviceSubs | undefined, id: string, key: string): DeviceSubscription | undefined {
    if (mine === undefined) return undefined;
    if (this.owners.has(key)) return IN_ENGINE;
    return mine.given?.get(id);
  }

  private newOwner(key: string, of: DeviceSubs, id: string): void {
    const num = this.freeNums.length > 0 ? this.freeNums.pop()! : this.nextOwner++;
    const o: OwnerEntry = { key, of, id, num, gone: false };
    this.owners.set(key, o);
    this.byNum[num] = o;
    if (num >= this.goneByNum.length) {
      const grown = new Uint8Array(Math.max(2 * this.goneByNum.length, num + 1));
      grown.set(this.goneByNum);
      this.goneByNum = grown;
    }
    this.goneByNum[num] = 0;
  }

  private dropOwner(key: string): void {
    const o = this.owners.get(key);
    this.owners.delete(key);
    if (o === undefined) return;
    o.gone = true;
    this.goneByNum[o.num] = 1;
    if (this.onOwnerRemoved !== null) this.onOwnerRemoved(o);
    // A match in flight may list the number: it stays this owner's until those settle.
    if (this.matchesInFlight.size > 0) this.freedWhileMatching.push(o.num, this.matchesBegun);
    else this.freeNum(o.num);
  }

  /** Frees the held numbers no match in flight can list (those freed before the oldest began). */
  private releaseNums(): void {
    let oldest = Infinity;
    for (const m of this.matchesInFlight) if (m < oldest) oldest = m;
    const held = this.freedWhileMatching;
    let k = 0;
    // Pairs are in the order freed, so their serials never go down: free from the front.
    while (k < held.length && held[k + 1] < oldest) {
      this.freeNum(held[k]);
      k += 2;
    }
    if (k > 0) held.splice(0, k);
  }

  private freeNum(num: number): void {
    this.byNum[num] = undefined;
    this.freeNums.push(num);
  }

  /**
   * Keeps the pattern matcher told of the positions of the devices that own patterns: a device's
   * first pattern gets its known position, and its last one's removal forgets it there.
   */
  private countPatterns(mine: DeviceSubs, delta: number): void {
    if (delta === 0) return;
    const before = mine.patterns;
    mine.patterns += delta;
    const p = this.positions.get(mine.device);
    if (before === 0 && mine.patterns > 0) {
      if (p !== undefined) {
        p.patterned = true;
        this.patterns!.updatePosition(mine.device, p.lat, p.lon);
      }
      this.onPatternOwner?.(mine.device, true);
    } else if (before > 0 && mine.patterns === 0) {
      if (p !== undefined) p.patterned = false;
      this.patterns!.removeDevice(mine.device);
      this.onPatternOwner?.(mine.device, false);
    }
  }

  /** False when the device has no such subscription. */
  remove(device: string, subscriptionId: string): boolean {
    const mine = this.subs.get(device);
    if (mine === undefined) return false;
    const key = subscriptionKey(device, subscriptionId);
    const sub = this.held(mine, subscriptionId, key);
    if (sub === undefined) return false;
    if (sub.pattern !== undefined) this.patterns!.remove(key);
    else {
      this.engine.remove(key);
      this.dropOwner(key);
    }
    mine.ids.splice(mine.ids.indexOf(subscriptionId), 1);
    if (sub.pattern !== undefined) forgetGiven(mine, subscriptionId);
    this.subscriptionCount--;
    if (sub.pattern !== undefined) this.countPatterns(mine, -1);
    if (mine.ids.length === 0) {
      this.subs.delete(device);
      this.devicesVersion++;
    }
    return true;
  }

  /**
   * Removes every subscription of the device and its position (the engine forgets both); what
   * was removed. A location writer opened before finds the device again on its next update.
   */
  purge(device: string): { subscriptions: number; location: boolean } {
    const ids = [...(this.subs.get(device)?.ids ?? [])];
    for (const id of ids) this.remove(device, id);
    // A match awaited now may still name its subscriptions: those notifications are not stored.
    if (this.matchesInFlight.size > 0) this.purgedWhileMatching.set(device, ++this.purgeGen);
    const p = this.positions.get(device);
    if (p !== undefined) {
      this.positions.delete(device);
      p.dead = true;
      p.handle?.release();
      p.handle = null;
      this.engine.removeDevice(device);
    }
    return { subscriptions: ids.length, location: p !== undefined };
  }

  /** How many subscriptions the device holds. */
  count(device: string): number {
    return this.subs.get(device)?.ids.length ?? 0;
  }

  /** Moves whenever a device gains its first subscription or loses its last. */
  devicesVersion = 0;
  private sortedDevices: { version: number; ids: string[] } | null = null;

  /** Ids of the devices holding subscriptions, sorted (made again only after the set changed). */
  sortedSubscribedDevices(): readonly string[] {
    if (this.sortedDevices === null || this.sortedDevices.version !== this.devicesVersion) this.sortedDevices = { version: this.devicesVersion, ids: [...this.subs.keys()].sort() };
    return this.sortedDevices.ids;
  }

  list(device: string): DeviceSubscription[] {
    const mine = this.subs.get(device);
    return mine === undefined ? [] : [...this.listed(mine)];
  }

  subscription(device: string, subscriptionId: string): DeviceSubscription | undefined {
    const s = this.held(this.subs.get(device), subscriptionId, subscriptionKey(device, subscriptionId));
    return s === IN_ENGINE ? this.readBack(device, subscriptionId) : s;
  }

  /** Whether the device holds a pattern subscription of this id (nothing read back from the engine). */
  isPattern(device: string, subscriptionId: string): boolean {
    return this.subs.get(device)?.given?.get(subscriptionId) !== undefined;
  }

  /** A device's subscriptions in the API's form: its filter subscriptions read back from the engine. */
  private *listed(mine: DeviceSubs): Generator<DeviceSubscription> {
    for (const id of mine.ids) yield mine.given?.get(id) ?? this.readBack(mine.device, id);
  }

  private readBack(device: string, id: string): DeviceSubscription {
    const n = this.engine.get(subscriptionKey(device, id));
    if (n === undefined) throw new Error(`match core: the engine lost subscription ${show(id)} of ${show(device)}`);
    return { id, filters: apiFilters(n.filters) };
  }

  has(device: string, subscriptionId: string): boolean {
    return this.held(this.subs.get(device), subscriptionId, subscriptionKey(device, subscriptionId)) !== undefined;
  }

  /** Each device with subscriptions and its subscriptions (live: take them before the next change). */
  *byDevice(): Generator<[string, Iterable<DeviceSubscription>]> {
    for (const [device, mine] of this.subs) yield [device, this.listed(mine)];
  }

  /** Positions are range-checked by the caller. */
  move(device: string, lat: number, lon: number): void {
    this.place(this.record(device), lat, lon);
  }

  /**
   * The hot path of one device's stream: its record is resolved on the first update, so each
   * update after that is two writes and the engine handle's, with no lookup by id.
   */
  writer(device: string): (lat: number, lon: number) => void {
    let p: Position | null = null;
    return (lat, lon) => {
      if (p === null || p.dead === true) p = this.record(device);
      this.place(p, lat, lon);
    };
  }

  private record(device: string): Position {
    let p = this.positions.get(device);
    if (p === undefined) {
      p = { device, lat: 0, lon: 0, handle: this.engine.openDevice(device), patterned: (this.subs.get(device)?.patterns ?? 0) > 0 };
      this.positions.set(device, p);
    }
    return p;
  }

  private place(p: Position, lat: number, lon: number): void {
    p.lat = lat;
    p.lon = lon;
    p.handle!.update(lat, lon);
    if (p.patterned) this.patterns!.updatePosition(p.device, lat, lon);
    this.locationUpdates++;
  }

  moveMany(updates: readonly PositionUpdate[]): void {
    for (let i = 0; i < updates.length; i++) this.move(updates[i].device, updates[i].lat, updates[i].lon);
  }

  position(device: string): { lat: number; lon: number } | null {
    const p = this.positions.get(device);
    return p === undefined ? null : { lat: p.lat, lon: p.lon };
  }

  get deviceCount(): number {
    return this.positions.size;
  }

  get subscriptions(): number {
    return this.subscriptionCount;
  }

  /**
   * The engine's matches of each event, ungrouped, handed to `use` (synchronously, so the numbers
   * they list stay their owners' meanwhile): for a fan-out that groups them by device itself. Each
   * is its owner's number where the engine keeps tags (Matcher.tag), else its key (`ownerOf`
   * resolves it). A number whose owner is gone (`isGone`), or a key the core does not know, was
   * removed while the match was awaited and is delivered as matched, as `match` does.
   */
  async matchKeys<R>(events: readonly Event[], use: (matches: readonly (readonly Listed[])[]) => R): Promise<R> {
    const serial = ++this.matchesBegun;
    this.matchesInFlight.add(serial);
    const gen = this.purgeGen;
    try {
      if (events.length === 0) return use([]);
      const e = this.engine;
      const keys: readonly (readonly Listed[])[] =
        e.matchBatchTagged !== undefined ? await e.matchBatchTagged(events) : events.length === 1 ? [await e.match(events[0])] : await e.matchBatch(events);
      if (this.purgedWhileMatching.size === 0) return use(keys);
      // The matches of a device purged after this match began are dropped, owners and keys alike
      // (what the device subscribed again since was not there to match); a purge before it began
      // left nothing of the device to match. One removed otherwise is delivered as matched.
      const live = (k: Listed): boolean => {
        const at = this.purgedWhileMatching.get(typeof k === 'string' ? splitSubscriptionKey(k)[0] : this.byNum[k]!.of.device);
        return at === undefined || at <= gen;
      };
      return use(keys.map((ks) => ks.filter(live)));
    } finally {
      this.matchesInFlight.delete(serial);
      if (this.freedWhileMatching.length > 0) this.releaseNums();
      if (this.matchesInFlight.size === 0) this.purgedWhileMatching.clear();
    }
  }

  ownerOf(key: string): Owner | undefined {
    return this.owners.get(key);
  }

  owner(num: number): Owner | undefined {
    return this.byNum[num];
  }

  isGone(num: number): boolean {
    return this.goneByNum[num] === 1;
  }

  /**
   * Hands published events to the pattern subscriptions, in call order (E3: an event without its
   * own time takes `nowMs`, when it was accepted); resolves with the matches this releases, as
   * deliveries. Null without pattern subscriptions served here. Call it before awaiting the
   * events' own match, so concurrent publishes are released in the order they came.
   */
  publishPatterns(events: readonly Event[], nowMs: number): Promise<PatternDelivery[]> | null {
    if (this.patterns === null) return null;
    // Every event goes through, with or without patterns: it moves the release order's clock (E3).
    return this.patterns.publish(events.map((e) => ({ event: e, timeMs: e.timeMs ?? nowMs }))).then((ns) => ns.map(patternDelivery));
  }

  /**
   * The pattern subscriptions' state now, for a snapshot: the pattern matcher's (history included)
   * and the subscriptions as devices gave them. The patterns must be idle (no search running),
   * e.g. between two batches of a matcher loop, so it is the state of an exact point of its input.
   */
  capturePatterns(): PatternCut | null {
    if (this.patterns === null) return null;
    const subscriptions: [string, DeviceSubscription][] = [];
    for (const mine of this.subs.values()) {
      if (mine.patterns === 0) continue;
      for (const id of mine.ids) {
        const sub = mine.given?.get(id);
        if (sub !== undefined) subscriptions.push([mine.device, sub]);
      }
    }
    return { matcher: this.patterns.capture(), subscriptions };
  }

  /**
   * Takes a captured state on a core that holds no pattern subscription yet: the pattern matcher
   * resumes from it, and its subscriptions are the devices' again (positions follow as they come).
   */
  restorePatterns(cut: PatternCut): void {
    if (this.patterns === null) throw new Error('match core: pattern state given to a core without patterns');
    this.patterns.restore(cut.matcher);
    for (const [device, sub] of cut.subscriptions) {
      const mine = this.deviceSubs(device);
      if (this.held(mine, sub.id, subscriptionKey(device, sub.id)) !== undefined) throw new Error(`match core: restored pattern ${sub.id} of ${device} is already held`);
      addId(mine, sub.id);
      (mine.given ??= new Map()).set(sub.id, sub);
      this.subscriptionCount++;
      // The pattern matcher holds it already (restored above); only its owner's moves are wired.
      this.countPatterns(mine, 1);
    }
  }

  /** Moves the release order's clock to `nowMs` (E3: events older than the lateness bound are released). */
  advancePatterns(nowMs: number): Promise<PatternDelivery[]> | null {
    if (this.patterns === null) return null;
    return this.patterns.advanceTo(nowMs).then((ns) => ns.map(patternDelivery));
  }

  /** Recipients of each event, grouped by device, subscription ids in engine order. */
  async match(events: readonly Event[]): Promise<Recipient[][]> {
    if (events.length === 0) return [];
    return this.matchKeys(events, (matches) => matches.map((keys) => this.group(keys)));
  }

  /** One event's matches (owner numbers, or engine keys) as recipients, subscription ids sorted per device. */
  private group(keys: readonly Listed[]): Recipient[] {
    if (keys.length === 0) return [];
    const stamp = ++this.stamp;
    const out: Recipient[] = [];
    for (let i = 0; i < keys.length; i++) {
      const k = keys[i];
      const o = typeof k === 'string' ? this.owners.get(k) : this.goneByNum[k] === 1 ? undefined : this.byNum[k];
      if (o === undefined) {
        this.lateMatch(typeof k === 'string' ? k : this.byNum[k]!.key, out, stamp);
        continue;
      }
      const d = o.of;
      if (d.stamp !== stamp) {
        d.stamp = stamp;
        d.slot = out.length;
        out.push({ device: d.device, subscriptionIds: [o.id] });
      } else out[d.slot].subscriptionIds.push(o.id);
    }
    for (let i = 0; i < out.length; i++) if (out[i].subscriptionIds.length > 1) sortIds(out[i].subscriptionIds);
    return out;
  }

  /**
   * A key the engine matched whose subscription was removed while the match was awaited (an
   * unsubscribe that arrived in the same turn): it is delivered as matched, decoded from the key,
   * as it was before the removal. Rare, so a linear search for the device's recipient is fine.
   */
  private lateMatch(key: string, out: Recipient[], stamp: number): void {
    const [device, id] = splitSubscriptionKey(key);
    // A device with subscriptions left groups under its marks, whichever of its keys came first.
    const d = this.subs.get(device);
    if (d !== undefined) {
      if (d.stamp !== stamp) {
        d.stamp = stamp;
        d.slot = out.length;
        out.push({ device, subscriptionIds: [id] });
      } else out[d.slot].subscriptionIds.push(id);
      return;
    }
    const r = out.find((x) => x.device === device);
    if (r === undefined) out.push({ device, subscriptionIds: [id] });
    else r.subscriptionIds.push(id);
  }

  stats(): MatcherStats {
    return this.engine.stats();
  }

  /** The pattern subscriptions' figures (`matches`: those the caller delivered), or null where none are served. */
  patternStats(matches: number): Record<string, number> | null {
    if (this.patterns === null) return null;
    const s = this.patterns.stats();
    return {
      patternSubscriptions: s.subscriptions,
      patternElements: s.elements,
      patternMatches: matches,
      patternEventsLate: s.late,
      patternEventsBuffered: s.buffered,
      patternEventsRetained: s.retained,
      patternEventsEvicted: s.evicted,
    };
  }

  async close(): Promise<void> {
    for (const p of this.positions.values()) p.handle?.release();
    this.positions.clear();
    await this.engine.close();
    await this.patterns?.close();
  }
}

/** A pattern match as a delivery to its owner (E20): the terminator's event, the steps and aggregates. */
function patternDelivery(n: PatternNotification): PatternDelivery {
  const [device, id] = splitSubscriptionKey(n.subscription);
  const steps = n.steps.map((s) => ({ step: s.step, event: eventInput(s.event), timeMs: s.timeMs }));
  return { event: steps[0].event, recipient: { device, subscriptionIds: [id], match: { steps, aggregates: n.aggregates } } };
}

/** The figures every deployment reports, from the match core and the fan-out's counters. */
export function hubStats(
  core: MatchCore,
  more: Pick<HubStats, 'mode' | 'engineDetail' | 'eventsPublished' | 'notifications' | 'notificationsDropped'> & { devices?: number; locationUpdates?: number; extra?: HubStats['extra'] },
): HubStats {
  const s = core.stats();
  return {
    mode: more.mode,
    engine: s.engine,
    engineDetail: more.engineDetail,
    subscriptions: core.subscriptions,
    filters: s.filters,
    devices: more.devices ?? core.deviceCount,
    eventsPublished: more.eventsPublished,
    notifications: more.notifications,
    locationUpdates: more.locationUpdates ?? core.locationUpdates,
    notificationsDropped: more.notificationsDropped,
    engineMemoryBytes: s.memoryBytes,
    extra: { ...(s.extra ?? {}), ...more.extra },
  };
}

/**
 * Sorts ids in place as `Array.prototype.sort()` does (UTF-16 code units): by insertion for the
 * few ids one device's recipient holds, where the library sort's call cost was most of the
 * grouping of an event's matches; the library sort for longer lists.
 */
export function sortIds(ids: string[]): void {
  const n = ids.length;
  if (n > 16) {
    ids.sort();
    return;
  }
  for (let i = 1; i < n; i++) {
    const x = ids[i];
    let j = i - 1;
    while (j >= 0 && ids[j] > x) {
      ids[j + 1] = ids[j];
      j--;
    }
    ids[j + 1] = x;
  }
}
