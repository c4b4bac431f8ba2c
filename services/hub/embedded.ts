/**
 * The single-process hub behind `npm start`: the match core (engine, subscriptions, positions)
 * and the memory fan-out (each device's notification log, with retention, in an InboxStore) in
 * this process's memory. On a node with fan-out shards (AMBIT_FANOUT_SHARDS) the logs live in
 * the shards instead (fanout-shard.ts) and this hub only matches and routes. Nothing survives a
 * restart.
 */
import { AmbitError, PublishError, show } from '../../src/model/errors.js';
import type { Event, PositionUpdate } from '../../src/model/types.js';
import {
  type DeviceInfo,
  type DevicePage,
  type DeviceQuery,
  type DeviceSubscription,
  type Hub,
  type HubStats,
  type LocationWriter,
  type PublishResult,
  type PurgeResult,
  type Revocation,
  mergeRevocations,
} from './port.js';
import { type Listed, type MatchCore, type OwnerTable, type PatternDelivery, type Recipient, hubStats } from '../matcher/core.js';
import type { DeliverySource, Retention } from '../matcher/fanout.js';
import { type DedupeOptions, DEFAULT_DEDUPE, EventIdWindow, checkEventIds, planPublish, settlePublish } from '../matcher/event-ids.js';
import { type EmbeddedInbox, InboxStore } from './inboxes.js';

export { DEFAULT_RETENTION, type Retention } from '../matcher/fanout.js';

/** A listing's page token in a hub that lists in id order: the last id of the page, opaque to callers. */
export function pageToken(lastId: string): string {
  return Buffer.from(lastId, 'utf8').toString('base64url');
}

/** The last id of the previous page; INVALID_ARGUMENT (page_token) when it is not a token of ours. */
export function pageAfter(token: string): string {
  const id = Buffer.from(token, 'base64url').toString('utf8');
  if (id === '' || pageToken(id) !== token) throw new AmbitError('INVALID_ARGUMENT', 'is not a page token this listing gave', 'page_token');
  return id;
}

/** Where the hub's notifications go: its own inbox store, or the node's fan-out shards. */
export interface HubFanOut {
  /** Stores the notifications of grouped recipients (the hub's own inbox store). */
  deliver?(source: DeliverySource, events: readonly Event[], recipients: readonly (readonly Recipient[])[]): number[];
  /**
   * Instead of `deliver`, for a fan-out that groups matches by device itself (fan-out shards): the
   * matches of each event (owner numbers, or engine keys) and the core that resolves them. Called
   * synchronously within the match (MatchCore.matchKeys), while the numbers are their owners'.
   */
  deliverMatches?(source: DeliverySource, events: readonly Event[], matches: readonly (readonly Listed[])[], owners: OwnerTable): number[];
  /** A subscription left the core (with deliverMatches: forget its number, which may be given again once no match is in flight). */
  forget?(num: number): void;
  /**
   * Drops the device's log and ends its open inboxes (`purgedError`); resolves with how many
   * notifications it held.
   */
  purge(device: string): Promise<number>;
  /** Resolves once everything delivered so far is stored. */
  flush(): Promise<void>;
  readonly notifications: number;
  readonly dropped: number;
  readonly now: () => number;
}

export interface EmbeddedHubOptions {
  retention?: Partial<Retention>;
  engineDetail?: string;
  /** Clock, for retention tests. */
  now?: () => number;
  /** The node's fan-out shards: the device logs live there, not in this hub (no inboxes here). */
  shards?: HubFanOut;
  /** How long event ids deduplicate (by `now`), and how many are held at most. */
  dedupe?: Partial<DedupeOptions>;
  /**
   * With pattern subscriptions and a lateness bound: how often the release order's clock moves to
   * `now` (E3), so the last events before a quiet period are released (0: only publishes move it).
   */
  patternTickMs?: number;
}

export class EmbeddedHub implements Hub {
  readonly mode = 'embedded' as const;
  /** The device logs, unless they live in fan-out shards. */
  private readonly store: InboxStore | null;
  private readonly fanout: HubFanOut;
  private eventsPublished = 0;
  private duplicates = 0;
  private closed = false;
  private readonly ids: EventIdWindow;
  /** Device → when a gateway last saw it (ms since the epoch). */
  private readonly seen = new Map<string, number>();
  private purged = 0;
  private expired = 0;
  /** Revoked tokens, by revocationKey, and who hears of changes. */
  private readonly revoked = new Map<string, Revocation>();
  private readonly revocationWatchers = new Set<(all: readonly Revocation[]) => void>();
  private patternMatches = 0;
  /** Clock moves of the patterns that failed (the element engine's failure; publishes then fail too). */
  private patternClockErrors = 0;
  private readonly patternTicker: NodeJS.Timeout | null = null;

  constructor(
    private readonly core: MatchCore,
    private readonly options: EmbeddedHubOptions = {},
  ) {
    this.store = options.shards === undefined ? new InboxStore({ retention: options.retention, now: options.now }) : null;
    this.fanout = options.shards ?? this.store!.fanout;
    const fanout = this.fanout;
    if (fanout.deliver === undefined && fanout.deliverMatches === undefined) throw new Error('hub: a fan-out delivers recipients or matches');
    if (fanout.forget !== undefined) core.onOwnerRemoved = (num) => fanout.forget!(num);
    this.ids = new EventIdWindow({ ...DEFAULT_DEDUPE, ...options.dedupe }, fanout.now);
    if (core.patterns !== null && fanout.deliver === undefined) throw new Error('hub: a fan-out for pattern matches takes grouped recipients (deliver)');
    const tick = options.patternTickMs ?? 0;
    if (core.patterns !== null && tick > 0) {
      this.patternTicker = setInterval(() => void this.releasePatterns().catch(() => this.patternClockErrors++), tick);
      this.patternTicker.unref();
    }
  }

  /**
   * Moves the pattern subscriptions' clock to now (E3) and stores the matches this releases; how
   * many. The hub's ticker calls it (`patternTickMs`).
   */
  async releasePatterns(): Promise<number> {
    const p = this.closed ? null : this.core.advancePatterns(this.fanout.now());
    if (p === null) return 0;
    return this.storePatterns(await p);
  }

  private storePatterns(ds: readonly PatternDelivery[]): number {
    if (ds.length === 0 || this.closed) return 0;
    this.fanout.deliver!({ id: '', ms: this.fanout.now() }, ds.map((d) => d.event), ds.map((d) => [d.recipient]));
    this.patternMatches += ds.length;
    return ds.length;
  }

  async addSubscription(device: string, sub: DeviceSubscription): Promise<void> {
    this.core.put(device, sub, 'add');
  }

  async replaceSubscription(device: string, sub: DeviceSubscription): Promise<void> {
    this.core.put(device, sub, 'replace');
  }

  async removeSubscription(device: string, subscriptionId: string): Promise<void> {
    if (!this.core.remove(device, subscriptionId)) {
      throw new AmbitError('NOT_FOUND', `device has no subscription ${show(subscriptionId)}`, 'subscription_id');
    }
  }

  async listSubscriptions(device: string): Promise<DeviceSubscription[]> {
    return this.core.list(device);
  }

  async deviceInfo(device: string): Promise<DeviceInfo> {
    return { subscriptions: this.core.list(device), location: this.core.position(device) };
  }

  async updateLocations(updates: readonly PositionUpdate[]): Promise<void> {
    this.core.moveMany(updates);
  }

  locationWriter(device: string): LocationWriter {
    return { update: this.core.writer(device), close: async () => {} };
  }

  async publish(events: readonly Event[]): Promise<PublishResult[]> {
    if (this.closed) throw new PublishError('not-stored', 'hub: closed');
    const ids = this.ids;
    if (!ids.enabled) {
      const reached = await this.deliver(events);
      return events.map((e, i) => ({ eventId: e.id, reached: reached[i] }));
    }
    // Ids are remembered before matching, so a retry that comes while this one is matched waits
    // for its reach instead of delivering again.
    let answer!: (r: readonly number[]) => void;
    let fail!: (err: unknown) => void;
    const pending = new Promise<readonly number[]>((resolve, reject) => ((answer = resolve), (fail = reject)));
    pending.catch(() => {}); // a duplicate awaiting it rejects with it; nobody else need look
    let claimed = ids.claim(events, pending);
    if (claimed === null) {
      // More events than the window holds ids: planned whole first, then remembered.
      checkEventIds(events);
      const plan = planPublish(events, (id) => ids.get(id));
      claimed = { plan, tickets: plan.fresh.map((e, k) => ids.remember(e.id, pending, k)) };
    }
    const { plan, tickets } = claimed;
    let reached: number[];
    try {
      reached = plan.fresh.length === 0 ? [] : await this.deliver(plan.fresh);
    } catch (err) {
      for (let k = 0; k < tickets.length; k++) ids.drop(plan.fresh[k].id, tickets[k]);
      fail(err);
      throw err;
    }
    for (let k = 0; k < tickets.length; k++) ids.settle(tickets[k], reached[k]);
    answer(reached);
    if (plan.slots === null) {
      // Every event fresh (the common case): one result object an event.
      const out = new Array<PublishResult>(events.length);
      for (let i = 0; i < events.length; i++) out[i] = { eventId: events[i].id, reached: reached[i] };
      return out;
    }
    const results = await settlePublish(plan, reached);
    this.duplicates += events.length - plan.fresh.length;
    return events.map((e, i) => (results[i].duplicate ? { eventId: e.id, reached: results[i].reached, duplicate: true } : { eventId: e.id, reached: results[i].reached }));
  }

  /** Matches and stores `events`; their reach (pattern matches are stored too, not counted in it). */
  private async deliver(events: readonly Event[]): Promise<number[]> {
    // Handed to the patterns first, so concurrent publishes are released in the order they came.
    const patterned = this.core.publishPatterns(events, this.fanout.now());
    patterned?.catch(() => {}); // a failure is this call's, awaited below
    let reached: number[];
    if (this.fanout.deliverMatches !== undefined) {
      const fanout = this.fanout;
      reached = await this.core.matchKeys(events, (matches) => fanout.deliverMatches!({ id: '', ms: fanout.now() }, events, matches, this.core));
    } else {
      const recipients = await this.core.match(events);
      reached = this.fanout.deliver!({ id: '', ms: this.fanout.now() }, events, recipients);
    }
    if (patterned !== null) this.storePatterns(await patterned);
    // Shards store asynchronously: the reply waits until they have.
    if (this.store === null) await this.fanout.flush();
    this.eventsPublished += events.length;
    return reached;
  }

  async openInbox(device: string, resumeAfter: string | null): Promise<EmbeddedInbox> {
    if (this.store === null) throw new Error('hub: the inboxes of this node live in its fan-out shards');
    return this.store.openInbox(device, resumeAfter);
  }

  async listDevices(q: DeviceQuery): Promise<DevicePage> {
    const after = q.after === '' ? '' : pageAfter(q.after);
    // By id: a binary search for where the page starts in the sorted ids (kept while the set stays).
    const ids = this.core.sortedSubscribedDevices();
    const from = q.prefix > after ? q.prefix : after;
    let lo = 0;
    let hi = ids.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (ids[mid] < from || (ids[mid] === from && from === after)) lo = mid + 1;
      else hi = mid;
    }
    const page: string[] = [];
    let i = lo;
    for (; i < ids.length && page.length < q.limit && ids[i].startsWith(q.prefix); i++) page.push(ids[i]);
    const more = i < ids.length && ids[i].startsWith(q.prefix);
    return {
      devices: page.map((device) => ({ device, subscriptions: this.core.count(device), location: this.core.position(device), lastSeenMs: this.seen.get(device) ?? 0 })),
      next: more ? pageToken(page[page.length - 1]) : '',
    };
  }

  async purgeDevice(device: string): Promise<PurgeResult> {
    const r = await this.drop(device);
    if (r.held) this.purged++;
    return r.result;
  }

  /** Purges the device; `held`: it had subscriptions, a position or a last-seen record (it counts). */
  private async drop(device: string): Promise<{ result: PurgeResult; held: boolean }> {
    const r = this.core.purge(device);
    const wasSeen = this.seen.delete(device);
    return { result: { ...r, notifications: await this.fanout.purge(device) }, held: r.subscriptions > 0 || r.location || wasSeen };
  }

  async markSeen(devices: readonly string[], ms: number): Promise<void> {
    for (let i = 0; i < devices.length; i++) {
      const was = this.seen.get(devices[i]);
      if (was === undefined || was < ms) this.seen.set(devices[i], ms);
    }
  }

  async expireDevices(beforeMs: number, max: number): Promise<string[]> {
    const gone: string[] = [];
    for (const [device, ms] of this.seen) {
      if (gone.length >= max) break;
      if (ms < beforeMs) gone.push(device);
    }
    const purged: string[] = [];
    for (const device of gone) {
      // Seen again while an earlier purge of this sweep was awaited: kept.
      const ms = this.seen.get(device);
      if (ms === undefined || ms >= beforeMs) continue;
      await this.drop(device);
      purged.push(device);
    }
    this.expired += purged.length;
    return purged;
  }

  async revokeTokens(revocations: readonly Revocation[]): Promise<void> {
    mergeRevocations(this.revoked, revocations, this.fanout.now() / 1000);
    const all = [...this.revoked.values()];
    for (const w of this.revocationWatchers) w(all);
  }

  watchRevocations(listener: (all: readonly Revocation[]) => void): () => void {
    this.revocationWatchers.add(listener);
    listener([...this.revoked.values()]);
    return () => this.revocationWatchers.delete(listener);
  }

  async stats(): Promise<HubStats> {
    return hubStats(this.core, {
      mode: 'embedded',
      engineDetail: this.options.engineDetail ?? '',
      eventsPublished: this.eventsPublished,
      notifications: this.fanout.notifications,
      notificationsDropped: this.fanout.dropped,
      extra: { duplicateEvents: this.duplicates, devicesPurged: this.purged, devicesExpired: this.expired, ...this.patternStats() },
    });
  }

  /** The pattern subscriptions' figures, where this hub serves them. */
  private patternStats(): Record<string, number> {
    const s = this.core.patternStats(this.patternMatches);
    return s === null ? {} : { ...s, patternClockErrors: this.patternClockErrors };
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.patternTicker !== null) clearInterval(this.patternTicker);
    this.store?.close();
    await this.core.close();
  }

  get isClosed(): boolean {
    return this.closed;
  }

  /** Applies age retention to every device's log (idle ones included). */
  sweep(): void {
    this.store?.sweep();
  }
}
