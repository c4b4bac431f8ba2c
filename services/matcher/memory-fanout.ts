/**
 * The fan-out of the embedded hub: each device's notification log in this process's memory.
 * A log keeps at most `retention.maxPerDevice` notifications for `retention.maxAgeMs`, then drops
 * the oldest and counts them; a periodic sweep applies age retention to devices that went quiet.
 */
import type { Event } from '../../src/model/types.js';
import { type Delivery, type DeliveryMatch, parseDeliveryId } from '../hub/port.js';
import type { Recipient } from './core.js';
import { DEFAULT_RETENTION, type DeliverySource, type FanOut, type Retention, missedAfter, reachedBy, resumePoint } from './fanout.js';

/** One device's log: a FIFO of deliveries with increasing ids, plus its ack point and readers. */
export class DeviceLog {
  entries: Delivery[] = [];
  head = 0;
  acked = '';
  /** `acked` parsed: its ms and ordinal (0, 0 for ''). */
  ackedMs = 0;
  ackedOrdinal = 0;
  /** Ordinal of the last appended notification (the seq part of its id). */
  last = 0;
  lastMs = 0;
  /** The ms part of the first id this log issued (ordinal 1); the id of the last one retention dropped ('' none). */
  firstMs = 0;
  droppedId = '';
  /** The device's state was purged: this log is no longer its log, and its readers end. */
  purged = false;
  /** Numbers this log among the store's: a device's log made anew (after a purge) has another. */
  born = 0;
  /**
   * Readers waiting for the next entry: none, the one (the usual case: a device's one stream, so
   * an idle stream holds no set), or a set of them.
   */
  private waiting: (() => void) | Set<() => void> | null = null;

  get size(): number {
    return this.entries.length - this.head;
  }

  push(d: Delivery): void {
    if (this.last === 1) this.firstMs = this.lastMs;
    this.entries.push(d);
    if (this.waiting !== null) this.wakeAll();
  }

  /**
   * Drops from the front while the log holds more than `maxSize` or the front entry was published
   * before `oldestMs`; returns how many.
   */
  trim(maxSize: number, oldestMs: number): number {
    let n = 0;
    const entries = this.entries;
    let gone: Delivery | undefined;
    while (this.head < entries.length && (entries.length - this.head > maxSize || entries[this.head].publishedAtMs < oldestMs)) {
      // Let the dropped notification go now, not at the next compaction: up to 1024 of them
      // (and their events) would otherwise outlive retention.
      gone = entries[this.head];
      (this.entries as (Delivery | undefined)[])[this.head] = undefined;
      this.head++;
      n++;
    }
    // Kept as it is: parsed only where a token or ack older than the log needs it (`issued`).
    if (gone !== undefined) this.droppedId = gone.deliveryId;
    if (this.head > 1024 && this.head * 2 > this.entries.length) {
      this.entries = this.entries.slice(this.head);
      this.head = 0;
    }
    return n;
  }

  /** Where a reader starts (see fanout.ts resumePoint) and how many it missed. */
  resume(start: string): { start: string; missed: number } {
    // A token this log never issued (its ordinal ahead, or its ms not that of the ordinal here:
    // another run's or a purged log's) is lost state: from the oldest retained.
    const from = start === '' || this.issued(start) ? resumePoint(start, this.last) : '';
    const oldest = this.head < this.entries.length ? this.entries[this.head].deliveryId : '';
    return { start: from, missed: missedAfter(from, oldest, this.last) };
  }

  /**
   * Index of the first entry after ordinal `after` (the seq part of a delivery id). Ordinals are consecutive from the head (entries
   * are appended with the next ordinal and dropped only from the front), so it is arithmetic on
   * the ordinal, not a search.
   */
  firstAfter(after: number): number {
    const i = this.entries.length - (this.last - after);
    return i < this.head ? this.head : i > this.entries.length ? this.entries.length : i;
  }

  /**
   * Whether this log issued `id`: exactly, for the retained ones, the last one and the last one
   * dropped; for older dropped ones, as far as is known (an ms between the first issued and the
   * last dropped). Ids are "<lastMs>-<ordinal>" with lastMs never going back, so the ms grow with the ordinal.
   */
  issued(id: string): boolean {
    const p = parseDeliveryId(id);
    return p !== null && this.issuedAs(id, p[0], p[1]);
  }

  /** `issued` of `id` already parsed into its ms and ordinal. */
  private issuedAs(id: string, ms: number, o: number): boolean {
    if (o < 1 || o > this.last) return false;
    if (o === this.last) return ms === this.lastMs;
    const oldest = this.last - this.size + 1;
    if (o >= oldest) return this.entries[this.firstAfter(o - 1)].deliveryId === id;
    // Ordinals below the oldest retained were dropped, so the last one dropped is known.
    const droppedMs = parseDeliveryId(this.droppedId)![0];
    if (o === oldest - 1) return ms === droppedMs;
    return ms >= this.firstMs && ms <= droppedMs;
  }

  /**
   * Moves the ack point forward to `id` (a well-formed delivery id); an older one, or one this
   * log never issued, changes nothing.
   */
  ack(id: string): void {
    const p = parseDeliveryId(id);
    if (p === null) throw new Error(`hub: malformed delivery id ${JSON.stringify(id)}`);
    if (p[1] > this.ackedOrdinal && this.issuedAs(id, p[0], p[1])) {
      this.acked = id;
      this.ackedMs = p[0];
      this.ackedOrdinal = p[1];
    }
  }

  /** Calls `w` once at the next entry (or wakeAll). */
  await(w: () => void): void {
    const ws = this.waiting;
    if (ws === null) this.waiting = w;
    else if (typeof ws === 'function') {
      if (ws !== w) this.waiting = new Set([ws, w]);
    } else ws.add(w);
  }

  /** Forgets a waiting reader. */
  forget(w: () => void): void {
    const ws = this.waiting;
    if (ws === w) this.waiting = null;
    else if (ws !== null && typeof ws !== 'function') ws.delete(w);
  }

  /** Wakes every waiting reader (they see the log closed or new entries). */
  wakeAll(): void {
    const ws = this.waiting;
    if (ws === null) return;
    this.waiting = null;
    if (typeof ws === 'function') ws();
    else for (const w of ws) w();
  }
}

export interface MemoryFanOutOptions {
  retention?: Partial<Retention>;
  /** Clock, for retention tests. */
  now?: () => number;
}

export class MemoryFanOut implements FanOut {
  readonly retention: Retention;
  readonly now: () => number;
  notifications = 0;
  dropped = 0;
  private readonly logs = new Map<string, DeviceLog>();
  private readonly sweeper: NodeJS.Timeout;
  private logsMade = 0;

  constructor(options: MemoryFanOutOptions = {}) {
    this.retention = { ...DEFAULT_RETENTION, ...options.retention };
    this.now = options.now ?? Date.now;
    // Age retention also for devices that no longer connect or receive: a periodic sweep.
    this.sweeper = setInterval(() => this.sweep(), Math.max(1000, Math.min(60_000, this.retention.maxAgeMs / 4)));
    this.sweeper.unref();
  }

  deliver(source: DeliverySource, events: readonly Event[], recipients: readonly (readonly Recipient[])[]): number[] {
    const reached = new Array<number>(events.length);
    for (let i = 0; i < events.length; i++) {
      const rs = recipients[i];
      for (let j = 0; j < rs.length; j++) {
        const r = rs[j];
        if (r.match === undefined) this.append(r.device, { deliveryId: '', event: events[i], subscriptionIds: r.subscriptionIds, publishedAtMs: source.ms });
        else this.append(r.device, { deliveryId: '', event: events[i], subscriptionIds: r.subscriptionIds, publishedAtMs: source.ms, match: r.match });
      }
      reached[i] = reachedBy(rs);
    }
    return reached;
  }

  async flush(): Promise<void> {}

  /** The device's log, created empty on first use. */
  log(device: string): DeviceLog {
    let log = this.logs.get(device);
    if (log === undefined) {
      log = new DeviceLog();
      log.born = ++this.logsMade;
      this.logs.set(device, log);
    }
    return log;
  }

  /** Applies age retention to every device's log (idle ones included). */
  sweep(): void {
    for (const log of this.logs.values()) if (log.size > 0) this.expire(log);
  }

  /** Drops what retention no longer keeps. */
  expire(log: DeviceLog): void {
    this.dropped += log.trim(Infinity, this.now() - this.retention.maxAgeMs);
  }

  /** Drops the device's log (its readers see it `purged`); how many notifications it held. */
  async purge(device: string): Promise<number> {
    return this.drop(device);
  }

  drop(device: string): number {
    const log = this.logs.get(device);
    if (log === undefined) return 0;
    this.logs.delete(device);
    log.purged = true;
    log.wakeAll();
    return log.size;
  }

  close(): void {
    clearInterval(this.sweeper);
    for (const log of this.logs.values()) log.wakeAll();
  }

  /** Stores one notification (a fan-out shard's deliveries arrive one by one); `match`: a pattern's. */
  store(device: string, event: Event, subscriptionIds: string[], publishedAtMs: number, match?: DeliveryMatch): void {
    if (match === undefined) this.append(device, { deliveryId: '', event, subscriptionIds, publishedAtMs });
    else this.append(device, { deliveryId: '', event, subscriptionIds, publishedAtMs, match });
  }

  /** Appends with the next id of the device's log: "<ms>-<ordinal>", ms never going back. */
  private append(device: string, d: Delivery): void {
    const log = this.log(device);
    log.lastMs = Math.max(log.lastMs, d.publishedAtMs);
    d.deliveryId = `${log.lastMs}-${++log.last}`;
    log.push(d);
    this.notifications++;
    this.dropped += log.trim(this.retention.maxPerDevice, d.publishedAtMs - this.retention.maxAgeMs);
  }
}
