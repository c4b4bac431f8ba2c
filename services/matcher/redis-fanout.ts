/**
 * The fan-out of the Redis matcher: one `ambitDeliver` script call per group of up to
 * RECIPIENTS_PER_CALL recipients of one device group (all of them on a plain Redis), across the
 * events of a read batch, all calls of the batch pipelined (a pipeline per device group: on a
 * cluster each is one slot, and the groups' pipelines run on their masters at once). The script (redis/scripts.ts) gives each recipient's delivery id, applies retention,
 * counts, publishes the notification on the device's doorbell channel and keeps a per-device
 * marker (source entry id, event index) that turns a replay after a crash into at most one copy
 * per device. Redis runs scripts on one thread: a call's own cost and each command inside it are
 * what bound the deployment, so a call carries many recipients and each event's JSON once.
 */
import type { ChainableCommander } from 'ioredis';
import type { Conn } from '../redis/connection.js';
import type { Event } from '../../src/model/types.js';
import type { GroupKeys, Keys } from '../redis/keys.js';
import { queueScript } from '../redis/scripts.js';
import type { Recipient } from './core.js';
import { type DeliverySource, type FanOut, type Retention, reachedBy } from './fanout.js';

/** Recipients per script call: bounds one call's time (Redis serves nothing else meanwhile). */
const RECIPIENTS_PER_CALL = 256;

/** The call being built for one device group. */
interface GroupCall {
  readonly g: GroupKeys;
  /** Its recipients' stream keys. */
  keys: string[];
  /** Its recipients' born:{device} keys (their last purge). */
  borns: string[];
  /** Its events' arguments (4 each). */
  eventArgs: (string | number)[];
  /** Its recipients' arguments (3 each). */
  recipientArgs: (string | number)[];
  events: number;
  /** The number of the event being added in this call (0: not in it yet), and which event that is. */
  number: number;
  event: number;
}

export class RedisFanOut implements FanOut {
  /** Pipelines by device group (one on a plain Redis): a cluster pipeline must stay in one slot. */
  private pipelines = new Map<number, ChainableCommander>();
  private queued = 0;
  private calls: (GroupCall | undefined)[];
  private readonly script: 'ambitDeliver' | 'ambitDeliverSharded';
  /** The event being queued (its JSON is built once, on its first recipient). */
  private eventSeq = 0;
  /** The events of the batch with recipients: stored once ({p}ev:<ref>) before the deliver calls. */
  private stored: (string | number)[] = [];
  /**
   * The last flush: a flush sends nothing until the one before it has stored its notifications,
   * and fails (sending nothing) if that one failed. A device's notifications are stored in order,
   * and a replay after a failure finds no later notification stored ahead of the one it repeats
   * (the deliver script's per-device marker only moves forward).
   */
  private chain: Promise<void> = Promise.resolve();
  /** The fencing token every call carries (the matcher's lease token; '' for none). */
  token = '';
  /** @internal test hook: awaited before a flush's calls are sent (the batch is already detached). */
  beforeExec: (() => Promise<void> | void) | undefined;

  /**
   * `cmd` must have the scripts defined (defineScripts). `now`: the clock retention ages by; null
   * (production) is Redis's own clock, which every process of a deployment shares.
   */
  constructor(
    private readonly cmd: Conn,
    private readonly k: Keys,
    private readonly retention: Retention,
    private readonly now: (() => number) | null = null,
  ) {
    this.calls = new Array(k.groups.length).fill(undefined);
    this.script = k.layout.cluster ? 'ambitDeliverSharded' : 'ambitDeliver';
  }

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
      // The event is encoded once for all its recipients (once per call it spans), and stored once.
      const json = JSON.stringify(events[e]);
      const seq = ++this.eventSeq;
      const index = source.index === undefined ? e : source.index[e];
      this.stored.push(this.k.event(`${source.id}:${index}`), json);
      for (let i = 0; i < rs.length; i++) {
        const r = rs[i];
        const g = this.k.groupOf(r.device);
        let call = this.calls[g.index];
        if (call !== undefined && call.keys.length === RECIPIENTS_PER_CALL) {
          this.emit(call);
          call = undefined;
        }
        if (call === undefined) call = this.calls[g.index] = { g, keys: [], borns: [], eventArgs: [], recipientArgs: [], events: 0, number: 0, event: 0 };
        if (call.event !== seq) {
          call.eventArgs.push(source.id, index, source.ms, json);
          call.number = ++call.events;
          call.event = seq;
        }
        call.keys.push(g.notes(r.device));
        call.borns.push(g.born(r.device));
        // A pattern's match rides in the subscription ids' field as {s, m} (protocol.ts reads both forms).
        call.recipientArgs.push(r.device, call.number, r.match === undefined ? JSON.stringify(r.subscriptionIds) : JSON.stringify({ s: r.subscriptionIds, m: r.match }));
      }
      this.queued += rs.length;
    }
    return reached;
  }

  /** Queues a group's call in that group's pipeline. */
  private emit(call: GroupCall): void {
    this.calls[call.g.index] = undefined;
    const n = call.keys.length;
    if (n === 0) return;
    const g = call.g;
    let p = this.pipelines.get(g.index);
    if (p === undefined) {
      p = this.cmd.pipeline();
      this.pipelines.set(g.index, p);
    }
    const { maxPerDevice, maxAgeMs } = this.retention;
    queueScript(p, this.script, 5 + 2 * n, g.dstate, g.stats, g.nseq, g.nlast, ...call.keys, ...call.borns, g.fence, maxPerDevice, maxAgeMs, g.wakePrefix, this.now === null ? '' : this.now(), call.events, ...call.eventArgs, ...call.recipientArgs, this.token);
  }

  /**
   * Queues the drop of a purged device's notifications (ambitDrop) behind what was queued for its
   * group before, so it goes after them in the next flush.
   */
  drop(device: string, entryId: string): void {
    const g = this.k.groupOf(device);
    const call = this.calls[g.index];
    if (call !== undefined) this.emit(call);
    let p = this.pipelines.get(g.index);
    if (p === undefined) {
      p = this.cmd.pipeline();
      this.pipelines.set(g.index, p);
    }
    queueScript(p, this.k.layout.cluster ? 'ambitDropSharded' : 'ambitDrop', g.notes(device), g.dstate, g.nseq, g.nlast, g.acked, g.fence, g.born(device), device, g.wake(device), this.token, entryId);
  }

  private reset(): void {
    this.stored = [];
    this.pipelines = new Map();
    this.queued = 0;
    this.calls.fill(undefined);
  }

  flush(): Promise<void> {
    for (const call of this.calls) if (call !== undefined) this.emit(call);
    const pipelines = this.pipelines;
    if (pipelines.size === 0) return Promise.resolve();
    const stored = this.stored;
    this.pipelines = new Map();
    this.stored = [];
    this.queued = 0;
    const before = this.chain;
    const run = (async () => {
      await before;
      await this.send(pipelines, stored);
    })();
    run.catch(() => {}); // the caller awaits it; the next flush sees its failure through the chain
    this.chain = run;
    return run;
  }

  /** After a failure, once nothing is in flight: the next flush (a replay) sends again. */
  resetChain(): void {
    this.chain = Promise.resolve();
  }

  private async send(pipelines: Map<number, ChainableCommander>, stored: (string | number)[]): Promise<void> {
    await this.beforeExec?.();
    // The events first, so a notification is never readable before the event it names. They live
    // twice the max age: past any notification that names them (streams are trimmed by age). On
    // one server they go in the same connection's stream of commands, ahead of the deliver calls;
    // on a cluster they are on another node than most groups, so they are stored before the calls
    // are sent.
    const ttl = 2 * this.retention.maxAgeMs;
    const events = this.cmd.pipeline();
    for (let i = 0; i < stored.length; i += 2) events.set(stored[i] as string, stored[i + 1], 'PX', ttl);
    const eventsStored = events.exec();
    eventsStored.catch(() => {}); // awaited below; a failure of the calls first must not leave it unhandled
    if (this.k.layout.cluster) check(await eventsStored);
    const all = await Promise.all([...pipelines.values()].map((p) => p.exec()));
    check(await eventsStored);
    for (const results of all) check(results);
  }

  /** Notifications queued and not yet flushed. */
  get pending(): number {
    return this.queued;
  }
}

/** A pipeline's answers: aborted or a command's error fails the flush. */
function check(results: [Error | null, unknown][] | null): void {
  if (results === null) throw new Error('redis fan-out: pipeline aborted');
  for (const [err] of results) if (err !== null) throw err;
}
