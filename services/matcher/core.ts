/**
 * The match core, whichever hub it sits behind: owns the engine, lists each device's
 * subscriptions in the API's own form (filter subscriptions read back from the engine, which
 * holds them; pattern subscriptions kept here), keeps each device's position and engine handle,
 * and turns an engine match into owner-aware recipients (device → its matched subscription ids)
 * through tables kept beside the engine: no engine key is parsed per matched pair. No I/O; a
 * FanOut (fanout.ts) stores and delivers.
 *
 * One file over 700 lines: the flat device and owner tables and every method that changes them
 * keep one invariant together (a number is given again only once no match in flight may list it).
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
 * A match core's owners as a fan-out reads the matches of `matchKeys`: each matched subscription
 * is its owner's number, or an engine key resolved to one.
 */
export interface OwnerTable {
  /** The number of the live filter subscription `key` names (an engine key), or -1. */
  numOf(key: string): number;
  /** Whether the owner numbered `num` left the core (a match in flight listed it before). */
  isGone(num: number): boolean;
  /** The device and the subscription id of owner `num` (a gone one's too, while a match that may list it is in flight). */
  ownerDevice(num: number): string;
  ownerId(num: number): string;
}

/** What an owner number holds (`subState`). */
const FREE = 0;
/** A live filter subscription: the engine holds it, tagged with the number. */
const FILTER = 1;
/** A live pattern subscription, kept as given (`given`). */
const PATTERN = 2;
/** A removed filter subscription whose number a match in flight may still list (delivered as matched). */
const GONE = 3;

const FIRST_ROWS = 256;

function grownI32(a: Int32Array<ArrayBuffer>, need: number): Int32Array<ArrayBuffer> {
  const out = new Int32Array(Math.max(2 * a.length, need));
  out.set(a);
  return out;
}

function grownU8(a: Uint8Array<ArrayBuffer>, need: number): Uint8Array<ArrayBuffer> {
  const out = new Uint8Array(Math.max(2 * a.length, need));
  out.set(a);
  return out;
}

/**
 * Devices and subscriptions in flat tables. A device (one with subscriptions, a position, or
 * both) has a dense number: its id, its subscriptions as a list of owner numbers in the order
 * first put (a replaced one keeps its place), its position and engine handle, and the marks that
 * group one event's matches by device. A subscription's owner number is dense too: an engine that
 * keeps tags (Matcher.tag) keeps it as the subscription's tag and lists it when matched, and a
 * fan-out that resolves matches elsewhere (fan-out shards) sends it instead of the key. A number
 * freed by a removal (an owner's or a device's) is given again once every match begun before it
 * was freed has settled (any of them could list it, or its device). One map entry per device and
 * a few typed-array cells per subscription: per-device and per-subscription objects cost three
 * times as much (the host memory of a matcher at 100M filters, docs/gpu.md).
 */
export class MatchCore implements OwnerTable {
  /** Device id → number (attached devices only: one being freed is out of it). */
  private readonly devNums = new Map<string, number>();
  private readonly devName: string[] = [];
  /** First and last of the device's subscriptions (owner number + 1; 0: none), and how many it holds. */
  private devHead = new Int32Array(FIRST_ROWS);
  private devTail = new Int32Array(FIRST_ROWS);
  private devSubs = new Int32Array(FIRST_ROWS);
  /** How many of its subscriptions are pattern subscriptions (its position goes to the patterns too, E5). */
  private devPatterns = new Int32Array(FIRST_ROWS);
  /** The match that last touched the device, and its recipient's index in that match. */
  private devStamp = new Int32Array(FIRST_ROWS);
  private devSlot = new Int32Array(FIRST_ROWS);
  /** Moves when the number leaves its device (purged, or nothing left): a location writer resolves the device again. */
  private devGen = new Int32Array(FIRST_ROWS);
  private devLocated = new Uint8Array(FIRST_ROWS);
  /** Last position (lat, lon) of each located device, and the engine handle that moves it. */
  private coords = new Float64Array(2 * FIRST_ROWS);
  private readonly devHandle: (DeviceHandle | null)[] = [];
  private readonly freeDevs: number[] = [];
  private nextDev = 0;
  private located = 0;
  private patternOwnerCount = 0;

  /** Each owner number's device, next in its device's list (+1; 0: last), state (FREE…GONE) and subscription id. */
  private subDev = new Int32Array(FIRST_ROWS);
  private subNext = new Int32Array(FIRST_ROWS);
  private subState = new Uint8Array(FIRST_ROWS);
  private readonly subId: string[] = [];
  /** Pattern subscriptions as given, by owner number. */
  private readonly given = new Map<number, DeviceSubscription>();
  /** Numbers free to give. */
  private readonly freeNums: number[] = [];
  private nextNum = 0;
  /**
   * Numbers freed while matches were in flight, as (code, matches begun by then) pairs in the
   * order freed (code: an owner number, or ~device number): each is free once every match begun by
   * then has settled (later ones cannot list it), so numbers come back under a load where matches
   * always overlap.
   */
  private readonly freedWhileMatching: number[] = [];
  /** Matches begun so far (each one's serial), and the serials of those not settled. */
  private matchesBegun = 0;
  private readonly matchesInFlight = new Set<number>();
  private stamp = 0;
  /** Told when a filter subscription's owner number leaves the table (a fan-out that was sent it forgets it). */
  onOwnerRemoved: ((num: number) => void) | null = null;
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
    let d = this.devNums.get(device);
    const old = d === undefined ? -1 : this.find(d, sub.id);
    const was = old < 0 ? FREE : this.subState[old];
    const exists = old >= 0;
    if (mode === 'add' && exists) throw new AmbitError('ALREADY_EXISTS', `device already has subscription ${show(sub.id)}`, 'subscription.id');
    if (mode === 'replace' && !exists) throw new AmbitError('NOT_FOUND', `device has no subscription ${show(sub.id)}`, 'subscription.id');
    if (!exists && mode !== 'upsert' && (d === undefined ? 0 : this.devSubs[d]) >= this.maxPerDevice) {
      throw new AmbitError('RESOURCE_EXHAUSTED', `device already has ${this.maxPerDevice} subscriptions, the most allowed`, 'subscription');
    }
    const key = subscriptionKey(device, sub.id);
    const kind = sub.pattern !== undefined ? PATTERN : FILTER;
    if (kind === PATTERN) {
      if (this.patterns === null) throw new AmbitError('FAILED_PRECONDITION', NO_PATTERNS, 'subscription.pattern');
      const ps = { id: key, owner: device, pattern: sub.pattern! };
      // The new version first: if it is refused, the old one stays.
      if (was === PATTERN) this.patterns.replace(ps);
      else {
        this.patterns.add(ps);
        if (exists) this.engine.remove(key);
      }
    } else {
      const engineSub = { id: key, owner: device, filters: sub.filters };
      if (was === FILTER) this.engine.replace(engineSub);
      else {
        this.engine.add(engineSub);
        if (exists) this.patterns!.remove(key);
      }
    }
    d ??= this.attach(device);
    let num = old;
    if (!exists) {
      num = this.newNum(d, sub.id, kind);
      this.append(d, num);
      this.subscriptionCount++;
    } else if (was !== kind) {
      // A filter subscription replaced by a pattern one or the other way: a new number in its place.
      num = this.newNum(d, sub.id, kind);
      this.swap(d, old, num);
      this.retire(old);
    }
    // A replaced version is a new engine subscription: tagged again.
    if (kind === FILTER) this.engine.tag?.(key, num);
    else this.given.set(num, sub);
    this.countPatterns(d, (kind === PATTERN ? 1 : 0) - (was === PATTERN ? 1 : 0));
  }

  /** The device's subscription `id`'s owner number, or -1 (a walk of the device's list: it holds at most maxPerDevice). */
  private find(d: number, id: string): number {
    for (let k = this.devHead[d]; k !== 0; k = this.subNext[k - 1]) if (this.subId[k - 1] === id) return k - 1;
    return -1;
  }

  /** The device's number, made (holding nothing yet) where it has none. */
  private attach(device: string): number {
    let d = this.freeDevs.pop();
    if (d === undefined) {
      d = this.nextDev++;
      if (d >= this.devHead.length) this.growDevices(d + 1);
    }
    this.devName[d] = device;
    this.devHandle[d] = null;
    this.devNums.set(device, d);
    return d;
  }

  private growDevices(need: number): void {
    this.devHead = grownI32(this.devHead, need);
    this.devTail = grownI32(this.devTail, need);
    this.devSubs = grownI32(this.devSubs, need);
    this.devPatterns = grownI32(this.devPatterns, need);
    this.devStamp = grownI32(this.devStamp, need);
    this.devSlot = grownI32(this.devSlot, need);
    this.devGen = grownI32(this.devGen, need);
    this.devLocated = grownU8(this.devLocated, need);
    const coords = new Float64Array(2 * this.devHead.length);
    coords.set(this.coords);
    this.coords = coords;
  }

  /** A device that holds nothing any more (no subscription, no position) leaves its number. */
  private detachIfEmpty(d: number): void {
    if (this.devSubs[d] !== 0 || this.devLocated[d] !== 0) return;
    this.devNums.delete(this.devName[d]);
    this.devGen[d]++;
    // A match in flight may list a gone subscription of it, which names the device by number.
    if (this.matchesInFlight.size > 0) this.freedWhileMatching.push(~d, this.matchesBegun);
    else this.freeDevice(d);
  }

  private freeDevice(d: number): void {
    this.devName[d] = '';
    this.devHead[d] = 0;
    this.devTail[d] = 0;
    this.devPatterns[d] = 0;
    this.freeDevs.push(d);
  }

  private newNum(d: number, id: string, kind: number): number {
    let num = this.freeNums.pop();
    if (num === undefined) {
      num = this.nextNum++;
      if (num >= this.subDev.length) {
        this.subDev = grownI32(this.subDev, num + 1);
        this.subNext = grownI32(this.subNext, num + 1);
        this.subState = grownU8(this.subState, num + 1);
      }
    }
    this.subDev[num] = d;
    this.subNext[num] = 0;
    this.subState[num] = kind;
    this.subId[num] = id;
    return num;
  }

  /** Appends owner `num` to its device's list. */
  private append(d: number, num: number): void {
    if (this.devHead[d] === 0) this.devHead[d] = num + 1;
    else this.subNext[this.devTail[d] - 1] = num + 1;
    this.devTail[d] = num + 1;
    if (this.devSubs[d]++ === 0) this.devicesVersion++;
  }

  /** Puts `num` in `old`'s place in the device's list (`old` leaves it). */
  private swap(d: number, old: number, num: number): void {
    this.subNext[num] = this.subNext[old];
    this.relink(d, old, num + 1);
    if (this.devTail[d] === old + 1) this.devTail[d] = num + 1;
  }

  /** Points whatever points at `old` in the device's list (its head, or the one before) at `to` (+1; 0: nothing). */
  private relink(d: number, old: number, to: number): number {
    if (this.devHead[d] === old + 1) {
      this.devHead[d] = to;
      return -1;
    }
    let k = this.devHead[d];
    while (this.subNext[k - 1] !== old + 1) k = this.subNext[k - 1];
    this.subNext[k - 1] = to;
    return k - 1;
  }

  /**
   * A number leaves its subscription: a pattern one's is free at once (no engine lists it); a
   * filter one's stays its owner's, marked gone, until no match in flight may list it.
   */
  private retire(num: number): void {
    if (this.subState[num] === PATTERN) {
      this.given.delete(num);
      this.freeNum(num);
      return;
    }
    this.subState[num] = GONE;
    if (this.onOwnerRemoved !== null) this.onOwnerRemoved(num);
    if (this.matchesInFlight.size > 0) this.freedWhileMatching.push(num, this.matchesBegun);
    else this.freeNum(num);
  }

  /** Frees the held numbers no match in flight can list (those freed before the oldest began). */
  private releaseNums(): void {
    let oldest = Infinity;
    for (const m of this.matchesInFlight) if (m < oldest) oldest = m;
    const held = this.freedWhileMatching;
    let k = 0;
    // Pairs are in the order freed, so their serials never go down: free from the front.
    while (k < held.length && held[k + 1] < oldest) {
      const code = held[k];
      if (code >= 0) this.freeNum(code);
      else this.freeDevice(~code);
      k += 2;
    }
    if (k > 0) held.splice(0, k);
  }

  private freeNum(num: number): void {
    this.subState[num] = FREE;
    this.subId[num] = '';
    this.freeNums.push(num);
  }

  /**
   * Keeps the pattern matcher told of the positions of the devices that own patterns: a device's
   * first pattern gets its known position, and its last one's removal forgets it there.
   */
  private countPatterns(d: number, delta: number): void {
    if (delta === 0) return;
    const before = this.devPatterns[d];
    const now = (this.devPatterns[d] += delta);
    const device = this.devName[d];
    if (before === 0 && now > 0) {
      this.patternOwnerCount++;
      if (this.devLocated[d] === 1) this.patterns!.updatePosition(device, this.coords[2 * d], this.coords[2 * d + 1]);
    } else if (before > 0 && now === 0) {
      this.patternOwnerCount--;
      this.patterns!.removeDevice(device);
    }
  }

  /** Devices that own pattern subscriptions. */
  get patternOwners(): number {
    return this.patternOwnerCount;
  }

  /** False when the device has no such subscription. */
  remove(device: string, subscriptionId: string): boolean {
    const d = this.devNums.get(device);
    if (d === undefined) return false;
    const num = this.find(d, subscriptionId);
    if (num < 0) return false;
    const pattern = this.subState[num] === PATTERN;
    const key = subscriptionKey(device, subscriptionId);
    if (pattern) this.patterns!.remove(key);
    else this.engine.remove(key);
    const before = this.relink(d, num, this.subNext[num]);
    if (this.devTail[d] === num + 1) this.devTail[d] = before + 1;
    this.subscriptionCount--;
    if (--this.devSubs[d] === 0) this.devicesVersion++;
    this.retire(num);
    if (pattern) this.countPatterns(d, -1);
    this.detachIfEmpty(d);
    return true;
  }

  /**
   * Removes every subscription of the device and its position (the engine forgets both); what
   * was removed. A location writer opened before finds the device again on its next update.
   */
  purge(device: string): { subscriptions: number; location: boolean } {
    const ids = this.ids(device);
    for (const id of ids) this.remove(device, id);
    // A match awaited now may still name its subscriptions: those notifications are not stored.
    if (this.matchesInFlight.size > 0) this.purgedWhileMatching.set(device, ++this.purgeGen);
    return { subscriptions: ids.length, location: this.forgetPosition(device) };
  }

  /** The device's subscription ids in the order first put. */
  private ids(device: string): string[] {
    const d = this.devNums.get(device);
    const out: string[] = [];
    if (d !== undefined) for (let k = this.devHead[d]; k !== 0; k = this.subNext[k - 1]) out.push(this.subId[k - 1]);
    return out;
  }

  /**
   * Forgets the device's position (its handle released, the engine told); false where it had none.
   * A location writer opened before finds the device again on its next update.
   */
  forgetPosition(device: string): boolean {
    const d = this.devNums.get(device);
    if (d === undefined || this.devLocated[d] === 0) return false;
    this.devLocated[d] = 0;
    this.located--;
    this.devGen[d]++;
    this.devHandle[d]!.release();
    this.devHandle[d] = null;
    this.engine.removeDevice(device);
    this.detachIfEmpty(d);
    return true;
  }

  /** How many subscriptions the device holds. */
  count(device: string): number {
    const d = this.devNums.get(device);
    return d === undefined ? 0 : this.devSubs[d];
  }

  /** Moves whenever a device gains its first subscription or loses its last. */
  devicesVersion = 0;
  private sortedDevices: { version: number; ids: string[] } | null = null;

  /** Ids of the devices holding subscriptions, sorted (made again only after the set changed). */
  sortedSubscribedDevices(): readonly string[] {
    if (this.sortedDevices === null || this.sortedDevices.version !== this.devicesVersion) {
      const ids: string[] = [];
      for (const [device, d] of this.devNums) if (this.devSubs[d] > 0) ids.push(device);
      this.sortedDevices = { version: this.devicesVersion, ids: ids.sort() };
    }
    return this.sortedDevices.ids;
  }

  list(device: string): DeviceSubscription[] {
    const d = this.devNums.get(device);
    return d === undefined ? [] : [...this.listed(d)];
  }

  subscription(device: string, subscriptionId: string): DeviceSubscription | undefined {
    const d = this.devNums.get(device);
    const num = d === undefined ? -1 : this.find(d, subscriptionId);
    return num < 0 ? undefined : this.subscriptionOf(num);
  }

  /** Whether the device holds a pattern subscription of this id (nothing read back from the engine). */
  isPattern(device: string, subscriptionId: string): boolean {
    const d = this.devNums.get(device);
    return d !== undefined && this.subState[this.find(d, subscriptionId)] === PATTERN;
  }

  /** A device's subscriptions in the API's form: its filter subscriptions read back from the engine. */
  private *listed(d: number): Generator<DeviceSubscription> {
    for (let k = this.devHead[d]; k !== 0; k = this.subNext[k - 1]) yield this.subscriptionOf(k - 1);
  }

  private subscriptionOf(num: number): DeviceSubscription {
    if (this.subState[num] === PATTERN) return this.given.get(num)!;
    const device = this.devName[this.subDev[num]];
    const id = this.subId[num];
    const n = this.engine.get(subscriptionKey(device, id));
    if (n === undefined) throw new Error(`match core: the engine lost subscription ${show(id)} of ${show(device)}`);
    return { id, filters: apiFilters(n.filters) };
  }

  has(device: string, subscriptionId: string): boolean {
    const d = this.devNums.get(device);
    return d !== undefined && this.find(d, subscriptionId) >= 0;
  }

  /** Each device with subscriptions and its subscriptions (live: take them before the next change). */
  *byDevice(): Generator<[string, Iterable<DeviceSubscription>]> {
    for (const [device, d] of this.devNums) if (this.devSubs[d] > 0) yield [device, this.listed(d)];
  }

  /**
   * Positions are range-checked by the caller. The engine's handle for the device is opened at
   * its first position (an id the engine refuses throws, and nothing is kept).
   */
  move(device: string, lat: number, lon: number): void {
    this.place(this.locate(device), lat, lon);
  }

  /**
   * The hot path of one device's stream: its number is resolved on the first update, so each
   * update after that is two writes and the engine handle's, with no lookup by id.
   */
  writer(device: string): (lat: number, lon: number) => void {
    let d = -1;
    let gen = 0;
    return (lat, lon) => {
      if (d < 0 || this.devGen[d] !== gen) {
        d = this.locate(device);
        gen = this.devGen[d];
      }
      this.place(d, lat, lon);
    };
  }

  /** The device's number, located (its engine handle opened). */
  private locate(device: string): number {
    let d = this.devNums.get(device);
    if (d !== undefined && this.devLocated[d] === 1) return d;
    const handle = this.engine.openDevice(device);
    d ??= this.attach(device);
    this.devHandle[d] = handle;
    this.devLocated[d] = 1;
    this.located++;
    return d;
  }

  private place(d: number, lat: number, lon: number): void {
    this.coords[2 * d] = lat;
    this.coords[2 * d + 1] = lon;
    this.devHandle[d]!.update(lat, lon);
    if (this.devPatterns[d] > 0) this.patterns!.updatePosition(this.devName[d], lat, lon);
    this.locationUpdates++;
  }

  moveMany(updates: readonly PositionUpdate[]): void {
    for (let i = 0; i < updates.length; i++) this.move(updates[i].device, updates[i].lat, updates[i].lon);
  }

  position(device: string): { lat: number; lon: number } | null {
    const d = this.devNums.get(device);
    return d === undefined || this.devLocated[d] === 0 ? null : { lat: this.coords[2 * d], lon: this.coords[2 * d + 1] };
  }

  /** Each located device and its position (live: take them before the next change). */
  *positions(): Generator<[string, number, number]> {
    for (const [device, d] of this.devNums) if (this.devLocated[d] === 1) yield [device, this.coords[2 * d], this.coords[2 * d + 1]];
  }

  /** The positions now, copied (for a snapshot written while they move on): devices ('' where none) and their coordinates by index. */
  positionCut(): { devices: string[]; coords: Float64Array } {
    const devices = new Array<string>(this.nextDev);
    for (let d = 0; d < this.nextDev; d++) devices[d] = this.devLocated[d] === 1 ? this.devName[d] : '';
    return { devices, coords: this.coords.slice(0, 2 * this.nextDev) };
  }

  /** Devices with a position. */
  get deviceCount(): number {
    return this.located;
  }

  get subscriptions(): number {
    return this.subscriptionCount;
  }

  /**
   * The engine's matches of each event, ungrouped, handed to `use` (synchronously, so the numbers
   * they list stay their owners' meanwhile): for a fan-out that groups them by device itself. Each
   * is its owner's number where the engine keeps tags (Matcher.tag), else its key (`numOf`
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
        const at = this.purgedWhileMatching.get(typeof k === 'string' ? splitSubscriptionKey(k)[0] : this.ownerDevice(k));
        return at === undefined || at <= gen;
      };
      return use(keys.map((ks) => ks.filter(live)));
    } finally {
      this.matchesInFlight.delete(serial);
      if (this.freedWhileMatching.length > 0) this.releaseNums();
      if (this.matchesInFlight.size === 0) this.purgedWhileMatching.clear();
    }
  }

  numOf(key: string): number {
    const [device, id] = splitSubscriptionKey(key);
    const d = this.devNums.get(device);
    const num = d === undefined ? -1 : this.find(d, id);
    return num >= 0 && this.subState[num] === FILTER ? num : -1;
  }

  isGone(num: number): boolean {
    return this.subState[num] === GONE;
  }

  ownerDevice(num: number): string {
    return this.devName[this.subDev[num]];
  }

  ownerId(num: number): string {
    return this.subId[num];
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
    for (const [device, d] of this.devNums) {
      if (this.devPatterns[d] === 0) continue;
      for (let k = this.devHead[d]; k !== 0; k = this.subNext[k - 1]) if (this.subState[k - 1] === PATTERN) subscriptions.push([device, this.given.get(k - 1)!]);
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
      const d = this.devNums.get(device) ?? this.attach(device);
      if (this.find(d, sub.id) >= 0) throw new Error(`match core: restored pattern ${sub.id} of ${device} is already held`);
      const num = this.newNum(d, sub.id, PATTERN);
      this.append(d, num);
      this.given.set(num, sub);
      this.subscriptionCount++;
      // The pattern matcher holds it already (restored above); only its owner's moves are wired.
      this.countPatterns(d, 1);
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
    // Marks are int32: past the largest, every device's mark starts over (no old mark can equal a new one).
    if (++this.stamp === 0x7fffffff) {
      this.devStamp.fill(0);
      this.stamp = 1;
    }
    const stamp = this.stamp;
    const out: Recipient[] = [];
    for (let i = 0; i < keys.length; i++) {
      const k = keys[i];
      const num = typeof k === 'string' ? this.numOf(k) : this.subState[k] === FILTER ? k : -1;
      if (num < 0) {
        if (typeof k === 'string') {
          const [device, id] = splitSubscriptionKey(k);
          this.lateMatch(device, id, out, stamp);
        } else this.lateMatch(this.ownerDevice(k), this.subId[k], out, stamp);
        continue;
      }
      const d = this.subDev[num];
      if (this.devStamp[d] !== stamp) {
        this.devStamp[d] = stamp;
        this.devSlot[d] = out.length;
        out.push({ device: this.devName[d], subscriptionIds: [this.subId[num]] });
      } else out[this.devSlot[d]].subscriptionIds.push(this.subId[num]);
    }
    for (let i = 0; i < out.length; i++) if (out[i].subscriptionIds.length > 1) sortIds(out[i].subscriptionIds);
    return out;
  }

  /**
   * A subscription the engine matched that was removed while the match was awaited (an
   * unsubscribe that arrived in the same turn): it is delivered as matched, as it was before the
   * removal. Rare, so a linear search for the device's recipient is fine where it holds nothing now.
   */
  private lateMatch(device: string, id: string, out: Recipient[], stamp: number): void {
    // A device still here groups under its marks, whichever of its subscriptions came first.
    const d = this.devNums.get(device);
    if (d !== undefined) {
      if (this.devStamp[d] !== stamp) {
        this.devStamp[d] = stamp;
        this.devSlot[d] = out.length;
        out.push({ device, subscriptionIds: [id] });
      } else out[this.devSlot[d]].subscriptionIds.push(id);
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
    for (let d = 0; d < this.nextDev; d++) {
      this.devHandle[d]?.release();
      this.devHandle[d] = null;
    }
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
