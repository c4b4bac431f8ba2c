/**
 * The single-process hub behind `npm start`: the engine, subscriptions, positions and each
 * device's notification log all live in this process's memory. Nothing survives a restart; the
 * log per device keeps at most `retention.maxPerDevice` notifications for `retention.maxAgeMs`,
 * then drops the oldest and counts them.
 */
import { AmbitError, show } from '../../src/model/errors.js';
import type { Event, PositionUpdate } from '../../src/model/types.js';
import {
  type Delivery,
  type DeviceInfo,
  type DeviceSubscription,
  type Hub,
  type HubStats,
  type Inbox,
  type LocationWriter,
  type PublishResult,
  compareDeliveryIds,
  parseDeliveryId,
} from './port.js';
import type { MatchCore } from '../matcher/core.js';

export interface Retention {
  /** Notifications kept per device; older ones are dropped (and counted). */
  maxPerDevice: number;
  /** Age after which a notification is dropped. */
  maxAgeMs: number;
}

export const DEFAULT_RETENTION: Readonly<Retention> = Object.freeze({ maxPerDevice: 10_000, maxAgeMs: 24 * 3600 * 1000 });

export interface EmbeddedHubOptions {
  retention?: Partial<Retention>;
  engineDetail?: string;
  /** Clock, for retention tests. */
  now?: () => number;
}

/** One device's log: a FIFO of deliveries with increasing ids, plus its ack point and readers. */
class DeviceLog {
  entries: Delivery[] = [];
  head = 0;
  acked = '';
  /** Ordinal of the last appended notification (the seq part of its id). */
  last = 0;
  lastMs = 0;
  dropped = 0;
  readonly waiters = new Set<() => void>();

  get size(): number {
    return this.entries.length - this.head;
  }

  push(d: Delivery): void {
    this.entries.push(d);
    for (const w of this.waiters) w();
    this.waiters.clear();
  }

  /** Drops from the front while `drop` says so; returns how many. */
  trim(drop: (d: Delivery, size: number) => boolean): number {
    let n = 0;
    while (this.head < this.entries.length && drop(this.entries[this.head], this.size)) {
      // Let the dropped notification go now, not at the next compaction: up to 1024 of them
      // (and their events) would otherwise outlive retention.
      (this.entries as (Delivery | undefined)[])[this.head] = undefined;
      this.head++;
      n++;
    }
    if (this.head > 1024 && this.head * 2 > this.entries.length) {
      this.entries = this.entries.slice(this.head);
      this.head = 0;
    }
    this.dropped += n;
    return n;
  }

  /**
   * Notifications after `after` that were dropped: ids are "<ms>-<ordinal>" with a per-device
   * ordinal, so the gap between the resume point and the oldest retained entry is exact.
   */
  missedAfter(after: string): number {
    const from = after === '' ? 0 : parseDeliveryId(after)![1];
    const oldest = this.head < this.entries.length ? parseDeliveryId(this.entries[this.head].deliveryId)![1] : this.last + 1;
    return Math.max(0, oldest - 1 - from);
  }

  /** Index of the first entry with id > `after`. */
  firstAfter(after: string): number {
    let lo = this.head;
    let hi = this.entries.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (compareDeliveryIds(this.entries[mid].deliveryId, after) <= 0) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }
}

export class EmbeddedHub implements Hub {
  readonly mode = 'embedded' as const;
  private readonly logs = new Map<string, DeviceLog>();
  private readonly retention: Retention;
  private readonly now: () => number;
  private eventsPublished = 0;
  private notifications = 0;
  private dropped = 0;
  private closed = false;
  private readonly sweeper: NodeJS.Timeout;

  constructor(
    private readonly core: MatchCore,
    private readonly options: EmbeddedHubOptions = {},
  ) {
    this.retention = { ...DEFAULT_RETENTION, ...options.retention };
    this.now = options.now ?? Date.now;
    // Age retention also for devices that no longer connect or receive: a periodic sweep.
    this.sweeper = setInterval(() => this.sweep(), Math.max(1000, Math.min(60_000, this.retention.maxAgeMs / 4)));
    this.sweeper.unref();
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
    if (this.closed) throw new AmbitError('UNAVAILABLE', 'hub: closed');
    const recipients = await this.core.match(events);
    const now = this.now();
    const out: PublishResult[] = [];
    for (let i = 0; i < events.length; i++) {
      let reached = 0;
      for (const r of recipients[i]) {
        reached += r.subscriptionIds.length;
        this.append(r.device, { deliveryId: '', event: events[i], subscriptionIds: r.subscriptionIds, publishedAtMs: now });
      }
      out.push({ eventId: events[i].id, reached });
    }
    this.eventsPublished += events.length;
    return out;
  }

  async openInbox(device: string, resumeAfter: string | null): Promise<Inbox> {
    const log = this.log(device);
    this.expire(log);
    let start = resumeAfter ?? log.acked;
    // A resume point this log never issued (its state was lost in a restart): start from the oldest.
    if (start !== '' && parseDeliveryId(start)![1] > log.last) start = '';
    return new EmbeddedInbox(this, log, start, log.missedAfter(start));
  }

  async stats(): Promise<HubStats> {
    const s = this.core.stats();
    return {
      mode: 'embedded',
      engine: s.engine,
      engineDetail: this.options.engineDetail ?? '',
      subscriptions: this.core.subscriptions,
      filters: s.filters,
      devices: this.core.deviceCount,
      eventsPublished: this.eventsPublished,
      notifications: this.notifications,
      locationUpdates: this.core.locationUpdates,
      notificationsDropped: this.dropped,
      engineMemoryBytes: s.memoryBytes,
      extra: s.extra ?? {},
    };
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this.sweeper);
    for (const log of this.logs.values()) {
      for (const w of log.waiters) w();
      log.waiters.clear();
    }
    await this.core.close();
  }

  get isClosed(): boolean {
    return this.closed;
  }

  /** Applies age retention to every device's log (idle ones included). */
  sweep(): void {
    for (const log of this.logs.values()) if (log.size > 0) this.expire(log);
  }

  /** Drops what retention no longer keeps. */
  expire(log: DeviceLog): void {
    const oldest = this.now() - this.retention.maxAgeMs;
    this.dropped += log.trim((d) => d.publishedAtMs < oldest);
  }

  private log(device: string): DeviceLog {
    let log = this.logs.get(device);
    if (log === undefined) {
      log = new DeviceLog();
      this.logs.set(device, log);
    }
    return log;
  }

  /** Appends with the next id of the device's log: "<ms>-<ordinal>", ms never going back. */
  private append(device: string, d: Delivery): void {
    const log = this.log(device);
    log.lastMs = Math.max(log.lastMs, d.publishedAtMs);
    d.deliveryId = `${log.lastMs}-${++log.last}`;
    log.push(d);
    this.notifications++;
    const max = this.retention.maxPerDevice;
    const oldest = d.publishedAtMs - this.retention.maxAgeMs;
    this.dropped += log.trim((e, size) => size > max || e.publishedAtMs < oldest);
  }

}

class EmbeddedInbox implements Inbox {
  private cursor: string;
  private closed = false;
  private wake: (() => void) | null = null;

  constructor(
    private readonly hub: EmbeddedHub,
    private readonly log: DeviceLog,
    readonly resumeToken: string,
    readonly missed: number,
  ) {
    this.cursor = resumeToken;
  }

  async pull(max: number): Promise<Delivery[]> {
    for (;;) {
      if (this.closed || this.hub.isClosed) return [];
      this.hub.expire(this.log);
      const from = this.log.firstAfter(this.cursor);
      if (from < this.log.entries.length) {
        const out = this.log.entries.slice(from, Math.min(from + max, this.log.entries.length));
        this.cursor = out[out.length - 1].deliveryId;
        return out;
      }
      await new Promise<void>((resolve) => {
        this.wake = resolve;
        this.log.waiters.add(resolve);
      });
      this.wake = null;
    }
  }

  async ack(deliveryId: string): Promise<void> {
    if (compareDeliveryIds(deliveryId, this.log.acked) > 0) this.log.acked = deliveryId;
  }

  close(): void {
    this.closed = true;
    if (this.wake !== null) {
      this.log.waiters.delete(this.wake);
      this.wake();
    }
  }
}
