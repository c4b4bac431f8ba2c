/**
 * The fan-out of the Redis matcher: one `ambitDeliverEvent` script call per event (per chunk of
 * its recipients), all of a read batch pipelined. The script (redis/scripts.ts) gives each
 * recipient's delivery id, applies retention, counts, rings the device's doorbell and keeps a
 * per-device marker (source entry id, event index) that turns a replay after a crash into at most
 * one copy per device. One call per event instead of one per notification: Redis runs scripts on
 * one thread, and the call's own cost was half of it.
 */
import type { ChainableCommander, Redis } from 'ioredis';
import type { Event } from '../../src/model/types.js';
import type { Keys } from '../redis/keys.js';
import { queueScript } from '../redis/scripts.js';
import type { Recipient } from './core.js';
import { type DeliverySource, type FanOut, type Retention, reachedBy } from './fanout.js';

/** Recipients per script call: bounds one call's time (Redis serves nothing else meanwhile). */
const RECIPIENTS_PER_CALL = 128;

export class RedisFanOut implements FanOut {
  private pipeline: ChainableCommander | null = null;
  private queued = 0;

  /**
   * `cmd` must have the scripts defined (defineScripts). `now`: the clock retention ages by; null
   * (production) is Redis's own clock, which every process of a deployment shares.
   */
  constructor(
    private readonly cmd: Redis,
    private readonly keys: Keys,
    private readonly retention: Retention,
    private readonly now: (() => number) | null = null,
  ) {}

  deliver(source: DeliverySource, events: readonly Event[], recipients: readonly (readonly Recipient[])[]): number[] {
    try {
      return this.queue(source, events, recipients);
    } catch (err) {
      // Nothing half-queued is sent with a later flush: the batch is replayed whole.
      this.pipeline = null;
      this.queued = 0;
      throw err;
    }
  }

  private queue(source: DeliverySource, events: readonly Event[], recipients: readonly (readonly Recipient[])[]): number[] {
    const k = this.keys;
    const { maxPerDevice, maxAgeMs } = this.retention;
    const reached = new Array<number>(events.length);
    for (let e = 0; e < events.length; e++) {
      const rs = recipients[e];
      reached[e] = reachedBy(rs);
      if (rs.length === 0) continue;
      const p = (this.pipeline ??= this.cmd.pipeline());
      // The event is encoded once for all its recipients.
      const json = JSON.stringify(events[e]);
      for (let from = 0; from < rs.length; from += RECIPIENTS_PER_CALL) {
        const chunk = rs.length <= RECIPIENTS_PER_CALL ? rs : rs.slice(from, from + RECIPIENTS_PER_CALL);
        const keys = chunk.map((r) => k.notes(r.device));
        const pairs = chunk.flatMap((r) => [r.device, JSON.stringify(r.subscriptionIds)]);
        queueScript(p, 'ambitDeliverEvent', 3 + keys.length, k.nseq, k.nlast, k.stats, ...keys, source.id, e, source.ms, json, maxPerDevice, maxAgeMs, k.wakePrefix, this.now === null ? '' : this.now(), ...pairs);
        this.queued += chunk.length;
      }
    }
    return reached;
  }

  async flush(): Promise<void> {
    const p = this.pipeline;
    if (p === null) return;
    this.pipeline = null;
    this.queued = 0;
    const results = await p.exec();
    if (results === null) throw new Error('redis fan-out: pipeline aborted');
    for (const [err] of results) if (err !== null) throw err;
  }

  /** Notifications queued and not yet flushed. */
  get pending(): number {
    return this.queued;
  }
}
