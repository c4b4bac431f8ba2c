/**
 * The fan-out of the Redis matcher: one `ambitDeliver` script call per group of up to
 * RECIPIENTS_PER_CALL recipients, across the events of a read batch, all calls of the batch
 * pipelined. The script (redis/scripts.ts) gives each recipient's delivery id, applies retention,
 * counts, publishes the notification on the device's doorbell channel and keeps a per-device
 * marker (source entry id, event index) that turns a replay after a crash into at most one copy
 * per device. Redis runs scripts on one thread: a call's own cost and each command inside it are
 * what bound the deployment, so a call carries many recipients and each event's JSON once.
 */
import type { ChainableCommander, Redis } from 'ioredis';
import type { Event } from '../../src/model/types.js';
import type { Keys } from '../redis/keys.js';
import { queueScript } from '../redis/scripts.js';
import type { Recipient } from './core.js';
import { type DeliverySource, type FanOut, type Retention, reachedBy } from './fanout.js';

/** Recipients per script call: bounds one call's time (Redis serves nothing else meanwhile). */
const RECIPIENTS_PER_CALL = 256;

export class RedisFanOut implements FanOut {
  private pipeline: ChainableCommander | null = null;
  private queued = 0;
  // The call being built: its recipients' stream keys, its events' arguments (4 each), its
  // recipients' arguments (3 each).
  private keys: string[] = [];
  private eventArgs: (string | number)[] = [];
  private recipientArgs: (string | number)[] = [];
  private events = 0;
  /** The fencing token every call carries (the matcher's lease token; '' for none). */
  token = '';
  /** @internal test hook: awaited before a flush's calls are sent (the batch is already detached). */
  beforeExec: (() => Promise<void> | void) | undefined;

  /**
   * `cmd` must have the scripts defined (defineScripts). `now`: the clock retention ages by; null
   * (production) is Redis's own clock, which every process of a deployment shares.
   */
  constructor(
    private readonly cmd: Redis,
    private readonly k: Keys,
    private readonly retention: Retention,
    private readonly now: (() => number) | null = null,
  ) {}

  deliver(source: DeliverySource, events: readonly Event[], recipients: readonly (readonly Recipient[])[]): number[] {
    try {
      return this.queue(source, events, recipients);
    } catch (err) {
      // Nothing half-queued is sent with a later flush: the batch is replayed whole.
      this.reset();
      throw err;
    }
  }

  private queue(source: DeliverySource, events: readonly Event[], recipients: readonly (readonly Recipient[])[]): number[] {
    const reached = new Array<number>(events.length);
    for (let e = 0; e < events.length; e++) {
      const rs = recipients[e];
      reached[e] = reachedBy(rs);
      if (rs.length === 0) continue;
      // The event is encoded once for all its recipients (once per call it spans).
      const json = JSON.stringify(events[e]);
      let number = 0; // the event's number in the call being built; 0: not in it yet
      for (let i = 0; i < rs.length; i++) {
        if (this.keys.length === RECIPIENTS_PER_CALL) {
          this.emit();
          number = 0;
        }
        if (number === 0) {
          this.eventArgs.push(source.id, e, source.ms, json);
          number = ++this.events;
        }
        const r = rs[i];
        this.keys.push(this.k.notes(r.device));
        this.recipientArgs.push(r.device, number, JSON.stringify(r.subscriptionIds));
      }
      this.queued += rs.length;
    }
    return reached;
  }

  /** Queues the call being built in the pipeline. */
  private emit(): void {
    const n = this.keys.length;
    if (n === 0) return;
    const k = this.k;
    const p = (this.pipeline ??= this.cmd.pipeline());
    const { maxPerDevice, maxAgeMs } = this.retention;
    queueScript(p, 'ambitDeliver', 5 + n, k.dstate, k.stats, k.nseq, k.nlast, ...this.keys, k.matcherEpoch, maxPerDevice, maxAgeMs, k.wakePrefix, this.now === null ? '' : this.now(), this.events, ...this.eventArgs, ...this.recipientArgs, this.token);
    this.keys = [];
    this.eventArgs = [];
    this.recipientArgs = [];
    this.events = 0;
  }

  private reset(): void {
    this.pipeline = null;
    this.queued = 0;
    this.keys = [];
    this.eventArgs = [];
    this.recipientArgs = [];
    this.events = 0;
  }

  async flush(): Promise<void> {
    this.emit();
    const p = this.pipeline;
    if (p === null) return;
    this.pipeline = null;
    this.queued = 0;
    await this.beforeExec?.();
    const results = await p.exec();
    if (results === null) throw new Error('redis fan-out: pipeline aborted');
    for (const [err] of results) if (err !== null) throw err;
  }

  /** Notifications queued and not yet flushed. */
  get pending(): number {
    return this.queued;
  }
}
