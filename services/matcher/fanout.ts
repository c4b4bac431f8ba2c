/**
 * Fan-out: where a match becomes notifications. The match core says which devices an event
 * reached (owner-aware recipients); a FanOut stores one notification per recipient in that
 * device's log, gives it the next delivery id and applies retention. Two stores, one contract:
 * MemoryFanOut (memory-fanout.ts, the embedded hub) and RedisFanOut (redis-fanout.ts, the Redis
 * matcher). Delivery ids are "<ms>-<ordinal>" with a gapless ordinal per device, so what was lost
 * between a resume point and the oldest retained notification is exact arithmetic (missedAfter).
 */
import type { Event } from '../../src/model/types.js';
import { parseDeliveryId } from '../hub/port.js';
import type { Recipient } from './core.js';

export interface Retention {
  /** Notifications kept per device; older ones are dropped (and counted). */
  maxPerDevice: number;
  /** Age after which a notification is dropped. */
  maxAgeMs: number;
}

export const DEFAULT_RETENTION: Readonly<Retention> = Object.freeze({ maxPerDevice: 10_000, maxAgeMs: 24 * 3600 * 1000 });

/** Where a published batch came from: its id in the command stream ('' in memory) and when it was accepted. */
export interface DeliverySource {
  id: string;
  ms: number;
  /**
   * Each event's index in its publish when the events are a part of it (sharding by space: a
   * shard gets the events that visit it); absent: their own positions.
   */
  index?: readonly number[];
}

export interface FanOut {
  /**
   * Queues the notifications of one published batch (recipients per event, as the match core
   * returns them) and returns the subscriptions each event reached. Storing may finish later.
   */
  deliver(source: DeliverySource, events: readonly Event[], recipients: readonly (readonly Recipient[])[]): number[];
  /** Resolves once everything queued so far is stored; rejects when storing failed. */
  flush(): Promise<void>;
}

/** Subscriptions one event reached across its recipients. */
export function reachedBy(recipients: readonly Recipient[]): number {
  let n = 0;
  for (let i = 0; i < recipients.length; i++) n += recipients[i].subscriptionIds.length;
  return n;
}

/** The ordinal part of a well-formed delivery id ('' is 0: before the first). */
export function ordinalOf(deliveryId: string): number {
  return deliveryId === '' ? 0 : parseDeliveryId(deliveryId)![1];
}

/**
 * Where an inbox starts: `start` (a resume token or the ack point), unless the device's log never
 * issued it (its state was lost, e.g. a restart of the embedded hub), then from the oldest retained.
 */
export function resumePoint(start: string, lastOrdinal: number): string {
  return start !== '' && ordinalOf(start) > lastOrdinal ? '' : start;
}

/**
 * Notifications after `start` that retention dropped: the gap between its ordinal and the oldest
 * retained one (`oldest` = '' when none is retained: then everything up to `lastOrdinal`).
 */
export function missedAfter(start: string, oldest: string, lastOrdinal: number): number {
  const oldestOrdinal = oldest === '' ? lastOrdinal + 1 : ordinalOf(oldest);
  return Math.max(0, oldestOrdinal - 1 - ordinalOf(start));
}
