/**
 * The one matching interface every engine implements (CPU reference, fast CPU, R-tree, GPU), and
 * a base class that owns validation so each engine only implements the mutations and the match.
 * Mutations are synchronous and atomic: input is validated whole before anything changes.
 */
import { AmbitError, ValidationError, show } from '../model/errors.js';
import {
  type Limits,
  type NEvent,
  type NSubscription,
  type SubscriptionView,
  checkId,
  checkLat,
  inRange,
  checkLon,
  plainSubscription,
  resolveLimits,
  validateEvent,
  validateEvents,
  validatePositions,
  validateSubscription,
} from '../model/limits.js';
import type { Event, PositionUpdate, Subscription } from '../model/types.js';

export interface MatcherStats {
  engine: string;
  subscriptions: number;
  filters: number;
  constraints: number;
  /** Devices with a known position. */
  devices: number;
  /** Estimate of the memory the engine's own structures hold, in bytes. */
  memoryBytes: number;
  /** Engine-specific figures (index sizes, GPU buffers, which path served, ...). */
  extra?: Record<string, number | string | boolean>;
}

/**
 * A device's position, resolved once for a caller that updates it often (a device's stream): each
 * update then skips the id lookup. Valid until released; the device's slot is kept while open.
 */
export interface DeviceHandle {
  readonly device: string;
  /** Same as updatePosition(device, lat, lon). */
  update(lat: number, lon: number): void;
  /** Ends the handle; update() afterwards is an error. Idempotent. */
  release(): void;
}

/** The most a tag may be (Matcher.tag): tags are small non-negative integers, kept in arrays of them. */
export const MAX_TAG = 0x7fffffff;

/** One matched subscription as `matchBatchTagged` lists it: its tag (the caller's number), or its id where it has none. */
export type Listed = string | number;

/** INVALID_ARGUMENT unless `tag` is an integer in [0, MAX_TAG]. */
export function checkTag(tag: number): void {
  if (!(Number.isInteger(tag) && tag >= 0 && tag <= MAX_TAG)) throw new AmbitError('INVALID_ARGUMENT', `must be an integer in [0, ${MAX_TAG}], got ${show(tag)}`, 'tag');
}

export interface Matcher {
  readonly name: string;
  readonly limits: Limits;
  /** Adds a subscription. ALREADY_EXISTS if the id is taken; INVALID_ARGUMENT naming the field. */
  add(sub: Subscription): void;
  /**
   * Adds many subscriptions as one step (a bulk load): every one is checked first (fields
   * `subscriptions[i]…`; ALREADY_EXISTS for an id taken or repeated), and on any error none is added.
   */
  addMany(subs: readonly Subscription[]): void;
  /** Replaces an existing subscription as one step (owner and filters may change). NOT_FOUND if absent. */
  replace(sub: Subscription): void;
  /** Removes a subscription; false when there was none. */
  remove(id: string): boolean;
  has(id: string): boolean;
  /** The stored (validated, normalised) subscription. */
  get(id: string): NSubscription | undefined;
  /** Sets a device's position; every filter anchored to it moves. */
  updatePosition(device: string, lat: number, lon: number): void;
  /** Applies a batch of positions in order; a bad entry rejects the whole batch. */
  updatePositions(updates: readonly PositionUpdate[]): void;
  /** A handle for repeated updates of one device's position. */
  openDevice(device: string): DeviceHandle;
  /** Forgets a device's position (its anchored filters match nothing until the next update). */
  removeDevice(device: string): boolean;
  /** Ids of the subscriptions matching the event, each once, in no particular order. */
  match(event: Event): Promise<string[]>;
  /** match() for many events; a bad event rejects the whole batch. */
  matchBatch(events: readonly Event[]): Promise<string[][]>;
  /**
   * Optional (every CPU engine and the GPU engine). Keeps the number `tag` (an
   * integer in [0, MAX_TAG]) with the live subscription `key` until that is removed or replaced;
   * false when there is none. A caller that resolves every matched id to a record of its own (the
   * match core's owners) numbers its records, tags each subscription with its record's number and
   * matches with `matchBatchTagged`: no lookup by string, and no object read, per matched
   * subscription. match() and matchBatch() answer ids as before. A number given to another
   * subscription while a match that may list it for the first one is in flight is listed for
   * whichever holds it when that match is read: give numbers again only once such matches settled.
   */
  tag?(key: string, tag: number): boolean;
  /**
   * matchBatch(), each matched subscription listed as its tag, or as its id where it has none
   * (never tagged, or removed or replaced while the match was awaited).
   */
  matchBatchTagged?(events: readonly Event[]): Promise<Listed[][]>;
  stats(): MatcherStats;
  /** Releases resources; the matcher must not be used afterwards. */
  close(): Promise<void>;
}

export interface MatcherOptions {
  limits?: Partial<Limits>;
}

/** Validation and dispatch shared by the synchronous (CPU) engines. */
/**
 * The checks of `addMany` (L11): each subscription validated with its field path, then every id
 * new (not `taken`, not repeated in the call). Nothing is stored here.
 */
export function validateNew(subs: unknown, limits: Limits, taken: (id: string) => boolean): NSubscription[];
/** `plain`: a subscription plainSubscription() accepts is handed back as given, not normalised (for engines that read SubscriptionView). */
export function validateNew(subs: unknown, limits: Limits, taken: (id: string) => boolean, plain: true): SubscriptionView[];
export function validateNew(subs: unknown, limits: Limits, taken: (id: string) => boolean, plain = false): SubscriptionView[] {
  if (!Array.isArray(subs)) throw new ValidationError('subscriptions', `must be an array, got ${show(subs)}`);
  const out: SubscriptionView[] = new Array(subs.length);
  const seen = new Set<string>();
  for (let i = 0; i < subs.length; i++) {
    const s: unknown = subs[i];
    const id = (out[i] = plain && plainSubscription(s, limits) ? s : validateSubscription(s, limits, `subscriptions[${i}]`)).id;
    if (seen.has(id) || taken(id)) throw new AmbitError('ALREADY_EXISTS', `subscription ${show(id)} ${seen.has(id) ? 'is given twice' : 'already exists'}`, `subscriptions[${i}].id`);
    seen.add(id);
  }
  return out;
}

export abstract class CpuMatcher implements Matcher {
  abstract readonly name: string;
  readonly limits: Limits;

  constructor(options: MatcherOptions = {}) {
    this.limits = resolveLimits(options.limits);
  }

  protected abstract insert(sub: NSubscription): void;
  protected abstract delete(id: string): boolean;
  /** Position of a device, already validated. */
  protected abstract move(device: string, lat: number, lon: number): void;
  protected abstract forget(device: string): boolean;
  /** True when `device` is a device whose position is known (its id was validated on entry). */
  protected abstract knows(device: string): boolean;
  abstract has(id: string): boolean;
  abstract get(id: string): NSubscription | undefined;
  /** Match an already validated event. */
  abstract matchValid(event: NEvent): string[];
  abstract stats(): MatcherStats;

  add(sub: Subscription): void {
    if (this.readsPlain && plainSubscription(sub, this.limits)) {
      this.refuseTaken(sub.id);
      this.insertPlain(sub);
      return;
    }
    this.addValid(validateSubscription(sub, this.limits));
  }

  addMany(subs: readonly Subscription[]): void {
    if (this.insertsWhole) {
      this.insertMany(validateNew(subs, this.limits, (id) => this.has(id)));
      return;
    }
    // One pass: each subscription checked and inserted in turn, and on the first refusal every
    // one this call inserted taken out again, so nothing is added (L4, L11). Checking all first and
    // holding a million normalised subscriptions until the end cost more than this.
    if (!Array.isArray(subs)) throw new ValidationError('subscriptions', `must be an array, got ${show(subs)}`);
    this.reserveFor(subs);
    const inserted: string[] = [];
    try {
      const plain = this.readsPlain;
      for (let i = 0; i < subs.length; i++) {
        const s = subs[i];
        // A subscription the engine can read as given is not copied into its normalised form.
        const n = plain && plainSubscription(s, this.limits) ? s : validateSubscription(s, this.limits, `subscriptions[${i}]`);
        const id = n.id;
        // An id given earlier in this call is held by now: the engine tells both cases; which one
        // it is is looked up only for the message.
        if (this.has(id)) throw new AmbitError('ALREADY_EXISTS', `subscription ${show(id)} ${inserted.includes(id) ? 'is given twice' : 'already exists'}`, `subscriptions[${i}].id`);
        if (n === s) this.insertPlain(s);
        else this.insert(n as NSubscription);
        inserted.push(id);
      }
    } catch (err) {
      for (let k = inserted.length - 1; k >= 0; k--) this.delete(inserted[k]);
      throw err;
    }
  }

  /**
   * Room for what a bulk load brings, counted from the input as given, each count capped by the
   * limits: filters, and constraints with tags. Counting stops where validation is sure to refuse
   * (an entry that is no object or has no filter list, an id given twice or already held), so
   * room is made only for what precedes it; a list too large to make room for is loaded as it
   * comes.
   */
  protected reserveFor(subs: readonly unknown[]): void {
    const L = this.limits;
    let filters = 0;
    let slots = 0;
    const ids = new Set<string>();
    for (let i = 0; i < subs.length; i++) {
      const s = subs[i];
      if (typeof s !== 'object' || s === null) break;
      const { id, filters: fs } = s as { id?: unknown; filters?: unknown };
      if (!Array.isArray(fs) || typeof id !== 'string' || ids.has(id) || this.has(id)) break;
      ids.add(id);
      const nf = Math.min(fs.length, L.maxFiltersPerSubscription);
      filters += nf;
      for (let k = 0; k < nf; k++) {
        const f = fs[k];
        if (typeof f !== 'object' || f === null) continue;
        const { constraints, tags } = f as { constraints?: unknown; tags?: unknown };
        if (Array.isArray(constraints)) slots += Math.min(constraints.length, L.maxConstraintsPerFilter);
        if (Array.isArray(tags)) slots += Math.min(tags.length, L.maxTagsPerFilter);
      }
    }
    if (filters === 0 && slots === 0) return;
    try {
      this.reserve(filters, slots);
    } catch (err) {
      if (!(err instanceof RangeError)) throw err;
    }
  }

  /** Makes room for `filters` more filters and `slots` more constraint slots (engines with arrays that grow). */
  protected reserve(_filters: number, _slots: number): void {}

  /**
   * True for an engine that reads a subscription plainSubscription() accepts as given
   * (insertPlain overridden): its bulk load and add() skip the normalised copy.
   */
  protected get readsPlain(): boolean {
    return false;
  }

  /** Inserts a subscription plainSubscription() accepted, as given (only when readsPlain). */
  protected insertPlain(sub: Subscription): void {
    this.insert(validateSubscription(sub, this.limits));
  }

  /** True for an engine whose bulk insert needs every subscription at once (insertMany overridden: rbush's load). */
  protected get insertsWhole(): boolean {
    return false;
  }

  /** addMany() of subscriptions validateNew() has checked (engines built on this one). */
  addManyValid(ns: readonly NSubscription[]): void {
    this.reserveFor(ns);
    this.insertMany(ns);
  }

  /** Inserts checked subscriptions; an engine with a bulk path (rbush's load) overrides it. */
  protected insertMany(ns: readonly NSubscription[]): void {
    for (let i = 0; i < ns.length; i++) this.insert(ns[i]);
  }

  replace(sub: Subscription): void {
    this.replaceValid(validateSubscription(sub, this.limits));
  }

  /** add() of a subscription validateSubscription() has already normalised (engines built on this one). */
  addValid(n: NSubscription): void {
    this.refuseTaken(n.id);
    this.insert(n);
  }

  protected refuseTaken(id: string): void {
    if (this.has(id)) throw new AmbitError('ALREADY_EXISTS', `subscription ${show(id)} already exists`, 'subscription.id');
  }

  /** replace() of an already validated subscription. */
  replaceValid(n: NSubscription): void {
    if (!this.has(n.id)) throw new AmbitError('NOT_FOUND', `subscription ${show(n.id)} does not exist`, 'subscription.id');
    this.delete(n.id);
    this.tagsById?.delete(n.id);
    this.insert(n);
  }

  remove(id: string): boolean {
    const gone = this.delete(checkId('id', id, this.limits));
    if (gone) this.tagsById?.delete(id);
    return gone;
  }

  /**
   * Tags by subscription id (R6), for the engines that do not number their subscriptions (the
   * reference and rtree engines: a map lookup per match listed; fast keeps them by number and
   * overrides both methods); null until the first.
   */
  private tagsById: Map<string, number> | null = null;

  tag(key: string, tag: number): boolean {
    checkTag(tag);
    if (typeof key !== 'string' || !this.has(key)) return false;
    (this.tagsById ??= new Map()).set(key, tag);
    return true;
  }

  matchBatchTagged(events: readonly Event[]): Promise<Listed[][]> {
    return this.eachValid(events, (e): Listed[] => {
      const ids = this.matchValid(e);
      const tags = this.tagsById;
      if (tags === null) return ids;
      const out: Listed[] = new Array(ids.length);
      for (let i = 0; i < ids.length; i++) out[i] = tags.get(ids[i]) ?? ids[i];
      return out;
    });
  }

  updatePosition(device: string, lat: number, lon: number): void {
    // Hot path: a known device's id was validated when it first arrived.
    if (typeof device !== 'string' || !this.knows(device)) checkId('device', device, this.limits);
    this.move(device, checkLat('lat', lat), checkLon('lon', lon));
  }

  updatePositions(updates: readonly PositionUpdate[]): void {
    const valid = validatePositions(updates, this.limits);
    for (let i = 0; i < valid.length; i++) this.move(valid[i].device, valid[i].lat, valid[i].lon);
  }

  openDevice(device: string): DeviceHandle {
    const id = checkId('device', device, this.limits);
    return new GenericDeviceHandle(this, id);
  }

  removeDevice(device: string): boolean {
    return this.forget(checkId('device', device, this.limits));
  }

  match(event: Event): Promise<string[]> {
    try {
      return Promise.resolve(this.matchValid(validateEvent(event, this.limits)));
    } catch (err) {
      return Promise.reject(err);
    }
  }

  matchBatch(events: readonly Event[]): Promise<string[][]> {
    return this.eachValid(events, (e) => this.matchValid(e));
  }

  /** A batch validated whole (a bad event rejects it), then each event answered by `one`. */
  protected eachValid<T>(events: readonly Event[], one: (e: NEvent) => T): Promise<T[]> {
    try {
      return Promise.resolve(validateEvents(events, this.limits).map(one));
    } catch (err) {
      return Promise.reject(err);
    }
  }

  async close(): Promise<void> {}
}

/** The fallback handle: every update goes through the matcher's validating path. */
/**
 * What every DeviceHandle.update checks before it writes: still open, and a position in range
 * (one comparison chain on the hot path; the explaining checks only when it fails).
 */
export function checkHandleUpdate(open: boolean, device: string, lat: number, lon: number): void {
  if (!open) throw new AmbitError('NOT_FOUND', `device handle for ${show(device)} was released`, 'device');
  if (!(typeof lat === 'number' && typeof lon === 'number' && inRange(lat, lon))) {
    checkLat('lat', lat);
    checkLon('lon', lon);
  }
}

class GenericDeviceHandle implements DeviceHandle {
  private open = true;
  constructor(private readonly matcher: Matcher, readonly device: string) {}

  update(lat: number, lon: number): void {
    if (!this.open) throw new AmbitError('NOT_FOUND', `device handle for ${show(this.device)} was released`, 'device');
    this.matcher.updatePosition(this.device, lat, lon);
  }

  release(): void {
    this.open = false;
  }
}
