/**
 * The single-process hub behind `npm start`: the match core (engine, subscriptions, positions)
 * and the memory fan-out (each device's notification log, with retention) in this process's
 * memory. Nothing survives a restart.
 */
import { AmbitError, show } from '../../src/model/errors.js';
import type { Event, PositionUpdate } from '../../src/model/types.js';
import {
  type Delivery,
  type DeviceInfo,
  type DeviceSubscription,
  type DrainableInbox,
  type Hub,
  type HubStats,
  type LocationWriter,
  type PublishResult,
} from './port.js';
import { type MatchCore, hubStats } from '../matcher/core.js';
import { type Retention, ordinalOf } from '../matcher/fanout.js';
import { type DeviceLog, MemoryFanOut } from '../matcher/memory-fanout.js';

export { DEFAULT_RETENTION, type Retention } from '../matcher/fanout.js';

export interface EmbeddedHubOptions {
  retention?: Partial<Retention>;
  engineDetail?: string;
  /** Clock, for retention tests. */
  now?: () => number;
}

export class EmbeddedHub implements Hub {
  readonly mode = 'embedded' as const;
  private readonly fanout: MemoryFanOut;
  private eventsPublished = 0;
  private closed = false;

  constructor(
    private readonly core: MatchCore,
    private readonly options: EmbeddedHubOptions = {},
  ) {
    this.fanout = new MemoryFanOut({ retention: options.retention, now: options.now });
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
    const reached = this.fanout.deliver({ id: '', ms: this.fanout.now() }, events, recipients);
    this.eventsPublished += events.length;
    return events.map((e, i) => ({ eventId: e.id, reached: reached[i] }));
  }

  async openInbox(device: string, resumeAfter: string | null): Promise<EmbeddedInbox> {
    const log = this.fanout.log(device);
    this.fanout.expire(log);
    const { start, missed } = log.resume(resumeAfter ?? log.acked);
    return new EmbeddedInbox(this, log, start, missed);
  }

  async stats(): Promise<HubStats> {
    return hubStats(this.core, {
      mode: 'embedded',
      engineDetail: this.options.engineDetail ?? '',
      eventsPublished: this.eventsPublished,
      notifications: this.fanout.notifications,
      notificationsDropped: this.fanout.dropped,
    });
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.fanout.close();
    await this.core.close();
  }

  get isClosed(): boolean {
    return this.closed;
  }

  /** Applies age retention to every device's log (idle ones included). */
  sweep(): void {
    this.fanout.sweep();
  }

  /** @internal Drops what retention no longer keeps from one log. */
  expire(log: DeviceLog): void {
    this.fanout.expire(log);
  }
}

export class EmbeddedInbox implements DrainableInbox {
  /** The ordinal of the last pulled notification (ids are "<ms>-<ordinal>", ordinals gapless). */
  private cursor: number;
  private closed = false;
  private wake: (() => void) | null = null;

  constructor(
    private readonly hub: EmbeddedHub,
    private readonly log: DeviceLog,
    readonly resumeToken: string,
    readonly missed: number,
  ) {
    this.cursor = ordinalOf(resumeToken);
  }

  async pull(max: number): Promise<Delivery[]> {
    for (;;) {
      if (this.closed || this.hub.isClosed) return [];
      const out = this.take(max);
      if (out.length !== 0) return out;
      await new Promise<void>((resolve) => this.notify(resolve));
    }
  }

  take(max: number): Delivery[] {
    if (this.closed || this.hub.isClosed) return [];
    this.hub.expire(this.log);
    const entries = this.log.entries;
    const from = this.log.firstAfter(this.cursor);
    if (from >= entries.length) return [];
    const to = Math.min(from + max, entries.length);
    this.cursor = this.log.last - (entries.length - to);
    return entries.slice(from, to);
  }

  notify(ready: () => void): void {
    if (this.closed || this.wake !== null || this.hub.isClosed) return;
    if (this.log.firstAfter(this.cursor) < this.log.entries.length) return ready();
    const wake = (): void => {
      this.wake = null;
      ready();
    };
    this.wake = wake;
    this.log.waiters.add(wake);
  }

  async ack(deliveryId: string): Promise<void> {
    this.log.ack(deliveryId);
  }

  close(): void {
    this.closed = true;
    if (this.wake !== null) {
      this.log.waiters.delete(this.wake);
      this.wake();
    }
  }
}
