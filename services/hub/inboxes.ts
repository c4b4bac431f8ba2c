/**
 * Device inboxes over the memory fan-out: each device's notification log (memory-fanout.ts) and
 * the readers of it. The embedded hub holds one store for every device; a node with fan-out
 * shards (fanout-shard.ts) holds one per shard, each for the devices that hash to it.
 */
import { randomBytes } from 'node:crypto';
import type { Event } from '../../src/model/types.js';
import { type Delivery, type DrainableInbox, purgedError } from './port.js';
import type { Recipient } from '../matcher/core.js';
import { type DeliverySource, type Retention, ordinalOf } from '../matcher/fanout.js';
import { type DeviceLog, MemoryFanOut } from '../matcher/memory-fanout.js';

export interface InboxStoreOptions {
  retention?: Partial<Retention>;
  /** Clock, for retention tests. */
  now?: () => number;
}

export class InboxStore {
  readonly fanout: MemoryFanOut;
  /** New with every store: a device's state lives in one store, so a new id means it started empty. */
  readonly stateId = randomBytes(8).toString('hex');
  private closed = false;

  constructor(options: InboxStoreOptions = {}) {
    this.fanout = new MemoryFanOut({ retention: options.retention, now: options.now });
  }

  /** Stores one notification per recipient (see MemoryFanOut.deliver); returns what each event reached. */
  deliver(source: DeliverySource, events: readonly Event[], recipients: readonly (readonly Recipient[])[]): number[] {
    return this.fanout.deliver(source, events, recipients);
  }

  /** Opens the device's inbox after `resumeAfter` (null: after the last acknowledged). */
  openInbox(device: string, resumeAfter: string | null): EmbeddedInbox {
    const log = this.fanout.log(device);
    this.fanout.expire(log);
    const asked = resumeAfter ?? log.acked;
    const { start, missed } = log.resume(asked);
    // The device's state is its log: one made anew (after a purge) is another state.
    return new EmbeddedInbox(this, log, start, missed, start !== asked, `${this.stateId}.${log.born}`);
  }

  get isClosed(): boolean {
    return this.closed;
  }

  /** Applies age retention to every device's log (idle ones included). */
  sweep(): void {
    this.fanout.sweep();
  }

  /** Drops what retention no longer keeps from one log. */
  expire(log: DeviceLog): void {
    this.fanout.expire(log);
  }

  /** Ends every reader (their pulls resolve with []). */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.fanout.close();
  }
}

export class EmbeddedInbox implements DrainableInbox {
  /** The ordinal of the last pulled notification (ids are "<ms>-<ordinal>", ordinals gapless). */
  private cursor: number;
  private closed = false;
  /** The reader waiting for the next entry (one at a time), woken through `wakeOnce`. */
  private ready: (() => void) | null = null;
  /**
   * Made once per inbox: an idle device's stream waits for its next notification through this
   * one function, not a closure made per wait that would live (and be promoted) until then.
   */
  private readonly wakeOnce = (): void => {
    const r = this.ready;
    this.ready = null;
    r?.();
  };

  constructor(
    private readonly store: InboxStore,
    private readonly log: DeviceLog,
    readonly resumeToken: string,
    readonly missed: number,
    readonly stateLost: boolean,
    readonly stateId: string,
  ) {
    this.cursor = ordinalOf(resumeToken);
  }

  async pull(max: number): Promise<Delivery[]> {
    for (;;) {
      if (this.closed || this.store.isClosed) return [];
      if (this.log.purged) throw purgedError();
      const out = this.take(max);
      if (out.length !== 0) return out;
      await new Promise<void>((resolve) => this.notify(resolve));
    }
  }

  /** Throws `purgedError` once the device's state was purged. */
  take(max: number): Delivery[] {
    if (this.closed || this.store.isClosed) return [];
    if (this.log.purged) throw purgedError();
    this.store.expire(this.log);
    const entries = this.log.entries;
    const from = this.log.firstAfter(this.cursor);
    if (from >= entries.length) return [];
    const to = Math.min(from + max, entries.length);
    this.cursor = this.log.last - (entries.length - to);
    return entries.slice(from, to);
  }

  notify(ready: () => void): void {
    if (this.closed || this.ready !== null || this.store.isClosed) return;
    if (this.log.purged || this.log.firstAfter(this.cursor) < this.log.entries.length) return ready();
    this.ready = ready;
    this.log.await(this.wakeOnce);
  }

  async ack(deliveryId: string): Promise<void> {
    this.log.ack(deliveryId);
  }

  close(): void {
    this.closed = true;
    if (this.ready !== null) {
      this.log.forget(this.wakeOnce);
      this.wakeOnce();
    }
  }
}
