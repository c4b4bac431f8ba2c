/**
 * A device's inbox on a Redis gateway (`RedisHub`, redis.ts): notifications pushed on the
 * device's doorbell channel, the device's stream read only after a gap.
 */
import { AmbitError } from '../../src/model/errors.js';
import { ordinalOf } from '../matcher/fanout.js';
import { type Delivery, type DrainableInbox, compareDeliveryIds, parseDeliveryId, purgedError } from './port.js';

const COMPONENT = 'redis hub';
/** Pushed notifications an inbox holds for a stream that does not take them; then it reads the stream when it does. */
const MAX_QUEUED = 256;

/** What an inbox needs of its hub. */
export interface InboxHost {
  readonly isClosed: boolean;
  /** A waiting inbox reads its stream this often even when nothing was pushed (ms). */
  readonly pollMs: number;
  /** Most notifications one read asks for. */
  readonly readBatch: number;
  /** The device's notifications after `cursor` (exclusive; '' = from the start), at most `max`. */
  range(device: string, cursor: string, max: number): Promise<Delivery[]>;
  /** Moves the device's ack point forward to `deliveryId`. */
  ackDelivery(device: string, deliveryId: string): Promise<void>;
  /** A read failed; the inbox tries again. */
  readFailed(err: unknown): void;
  /** The inbox closed: stop pushing to it. */
  unwatch(inbox: RedisInbox): void;
}

/**
 * A device's inbox on this gateway. Notifications arrive whole on the device's doorbell channel
 * and are queued when they follow the last one queued (ordinals are consecutive per device); the
 * stream in Redis is read only after a gap (the inbox was opened behind its backlog, a push was
 * lost in a reconnect, or the queue was full because the device does not read), and pushes that
 * arrive during a read are applied after it. So the device gets exactly its stream's order.
 */
export class RedisInbox implements DrainableInbox {
  resumeToken = '';
  missed = 0;
  stateLost = false;
  stateId = '';
  /** The last delivery queued (or the resume point) and its ordinal. */
  private tail = '';
  private tailOrdinal = 0;
  private queue: Delivery[] = [];
  private head = 0;
  /** The stream may hold notifications after `tail` that are not queued: read it before trusting pushes. */
  private stale = true;
  /** A read in flight; pushes meanwhile wait in `early`. */
  private reading = false;
  /**
   * The last id a read returned, queued or not: the next read starts after it when it is past
   * `tail` (a resume token whose ms part the stream's ids do not share makes a read return rows
   * at or before the tail's ordinal, which are skipped; the next read must not fetch them again).
   */
  private readTo = '';
  private early: Delivery[] | null = null;
  private closed = false;
  private purged = false;
  private waiter: (() => void) | null = null;
  private poll: NodeJS.Timeout | null = null;

  constructor(
    private readonly hub: InboxHost,
    readonly device: string,
  ) {}

  /** @internal */
  begin(start: string, missed: number, stateLost: boolean, stateId: string): void {
    this.stateLost = stateLost;
    this.stateId = stateId;
    this.resumeToken = start;
    this.tail = start;
    this.tailOrdinal = ordinalOf(start);
    this.missed = missed;
  }

  /** @internal The device's stream may have something new: read it. */
  ring(): void {
    if (this.closed) return;
    this.stale = true;
    this.wake();
  }

  /** @internal One notification stored for the device, as the deliver script published it. */
  push(d: Delivery): void {
    if (this.closed) return;
    if (this.reading) {
      (this.early ??= []).push(d);
      return;
    }
    this.accept(d);
    this.wake();
  }

  private accept(d: Delivery): void {
    const ordinal = ordinalOf(d.deliveryId);
    if (ordinal <= this.tailOrdinal) return; // queued already (a read got it first)
    if (this.stale || ordinal !== this.tailOrdinal + 1 || this.queue.length - this.head >= MAX_QUEUED) {
      this.stale = true; // a gap, or a full queue: the stream has it
      return;
    }
    this.append(d, ordinal);
  }

  private append(d: Delivery, ordinal: number): void {
    if (this.head === this.queue.length) {
      this.queue = [d];
      this.head = 0;
    } else this.queue.push(d);
    this.tail = d.deliveryId;
    this.tailOrdinal = ordinal;
  }

  /** @internal The device's state was purged: the inbox ends (takes and pulls throw purgedError). */
  purge(): void {
    if (this.closed) return;
    this.purged = true;
    this.close();
  }

  take(max: number): Delivery[] {
    if (this.purged) throw purgedError();
    if (this.closed || this.hub.isClosed) return [];
    const avail = this.queue.length - this.head;
    if (avail === 0) {
      if (this.stale) this.read();
      return [];
    }
    const n = Math.min(max, avail);
    const out = this.head === 0 && n === this.queue.length ? this.queue : this.queue.slice(this.head, this.head + n);
    this.head += n;
    if (this.head === this.queue.length) {
      this.queue = [];
      this.head = 0;
    }
    return out;
  }

  notify(ready: () => void): void {
    if (this.purged) return ready();
    if (this.closed || this.hub.isClosed || this.waiter !== null) return;
    if (this.head < this.queue.length) return ready();
    this.waiter = ready;
    if (this.stale) this.read();
    else this.poll = setTimeout(this.onPoll, this.hub.pollMs);
  }

  private readonly onPoll = (): void => {
    this.poll = null;
    this.ring();
  };

  private wake(): void {
    const w = this.waiter;
    if (w === null || (this.head === this.queue.length && !this.stale)) return;
    if (this.head === this.queue.length) {
      // Stale with nothing queued: read, and wake when the read brings something.
      this.read();
      return;
    }
    this.waiter = null;
    if (this.poll !== null) {
      clearTimeout(this.poll);
      this.poll = null;
    }
    w();
  }

  /** Reads the stream after `tail` (one read at a time); pushes that came meanwhile follow. */
  private read(): void {
    if (this.reading || this.closed) return;
    const max = this.hub.readBatch;
    this.reading = true;
    this.stale = false;
    const from = this.readTo !== '' && compareDeliveryIds(this.readTo, this.tail) > 0 ? this.readTo : this.tail;
    this.hub.range(this.device, from, max).then(
      (rows) => {
        this.reading = false;
        if (this.closed || this.hub.isClosed) return;
        for (const d of rows) {
          const ordinal = ordinalOf(d.deliveryId);
          if (ordinal > this.tailOrdinal) this.append(d, ordinal);
        }
        if (rows.length > 0) this.readTo = rows[rows.length - 1].deliveryId;
        if (rows.length === max) this.stale = true; // there may be more (the next read starts after these)
        const early = this.early;
        this.early = null;
        if (early !== null) for (const d of early) this.accept(d);
        if (this.head < this.queue.length) this.wake();
        else if (this.stale && this.waiter !== null) this.read();
        else if (this.waiter !== null && this.poll === null) this.poll = setTimeout(this.onPoll, this.hub.pollMs);
      },
      (err: unknown) => {
        this.reading = false;
        this.early = null;
        this.stale = true;
        if (this.closed || this.hub.isClosed) return;
        // Redis is away: try again after a pause (a reconnect also rings every inbox).
        this.hub.readFailed(err);
        if (this.poll !== null) clearTimeout(this.poll);
        this.poll = this.waiter === null ? null : setTimeout(this.onPoll, Math.min(this.hub.pollMs, 1000));
      },
    );
  }

  async pull(max: number): Promise<Delivery[]> {
    for (;;) {
      if (this.purged) throw purgedError();
      if (this.closed || this.hub.isClosed) return [];
      const ds = this.take(max);
      if (ds.length !== 0) return ds;
      if (this.waiter !== null) throw new Error(`${COMPONENT}: one pull at a time per inbox`);
      await new Promise<void>((resolve) => this.notify(resolve));
    }
  }

  async ack(deliveryId: string): Promise<void> {
    if (this.hub.isClosed) throw new AmbitError('UNAVAILABLE', `${COMPONENT}: closed`);
    if (parseDeliveryId(deliveryId) === null) throw new Error(`${COMPONENT}: malformed delivery id ${JSON.stringify(deliveryId)}`);
    // An ack at or before the resume point changes nothing (the ack point only moves forward).
    if (this.resumeToken !== '' && compareDeliveryIds(deliveryId, this.resumeToken) <= 0) return;
    await this.hub.ackDelivery(this.device, deliveryId);
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.hub.unwatch(this);
    if (this.poll !== null) {
      clearTimeout(this.poll);
      this.poll = null;
    }
    this.queue = [];
    this.head = 0;
    const w = this.waiter;
    this.waiter = null;
    w?.();
  }
}
