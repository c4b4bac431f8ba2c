/**
 * Fan-out shards of an embedded node (AMBIT_FANOUT_SHARDS=K beside AMBIT_GATEWAYS=N): the device
 * logs live in K shards, each for the devices whose id hashes to it (`shardOf`), so storing and
 * sending notifications runs on K threads instead of the hub's one. The hub keeps the engine,
 * the subscriptions and the positions: it matches and routes.
 *
 * - `ShardedFanOut` is the hub's side. The hub's thread does not group matches by device:
 *   `deliverMatches` sends each event's matched subscriptions to their devices' shards as numbers
 *   in one MATCH record per event and shard (the event written before it, numbered by a count per
 *   frame; a number is told once, with its device and id, and forgotten when the subscription
 *   leaves); each deliver call ends with a
 *   SEQ, and the hub's publish replies once every shard it wrote to has answered STORED for that
 *   sequence, so "stored before Publish replies" holds as in one process.
 * - Pattern subscriptions' matches (found by the hub's patterns) go to their devices' shards one
 *   by one (`deliver`, S.PATTERN records), in the same frames and sequence.
 * - `serveShard` is the shard's side of that link: it groups each MATCH by device as the match core
 *   would (`MatchGrouper`: one notification per device, ids sorted), appends them to the devices' logs in
 *   the shard's InboxStore (delivery ids, retention and order per device exactly as the embedded
 *   hub's, since one shard holds the whole log of a device) and answers STORED once per turn.
 * - Gateways open inboxes, ack and take credit on a link of their own to each shard (hub-server.ts
 *   serves a shard's InboxStore), so deliveries go from the shard to the gateway directly.
 */
import type { Logger } from 'pino';
import { AmbitError } from '../../src/model/errors.js';
import type { Event } from '../../src/model/types.js';
import { type Listed, type OwnerTable, type Recipient, sortIds } from '../matcher/core.js';
import { type DeliveryMatch, devicePart, splitSubscriptionKey } from './port.js';
import type { DeliverySource } from '../matcher/fanout.js';
import type { HubFanOut } from './embedded.js';
import type { InboxStore } from './inboxes.js';
import { EventCache, FrameReader, type FrameWriter, H, type Link, M, Outbox, S, writeEventRecord } from './link.js';

/** The shard of a device among `n`: FNV-1a over its id's UTF-16 code units, the same in every process. */
export function shardOf(device: string, n: number): number {
  return devicePart(device, n);
}

/** The device's shard, kept in its memo (computed once per device and shard count). */
interface Flush {
  /** The sequence each shard must have stored. */
  target: number[];
  resolve(): void;
  reject(err: Error): void;
}

/** The hub's side: routes each notification to its device's shard and waits for them to store it. */
export class ShardedFanOut implements HubFanOut {
  private readonly outs: Outbox[];
  /**
   * The next event number in each shard's current frame. An event is written to a shard's frame
   * once per deliver call that sends it there (each fresh event is delivered by one call), so its
   * number is a count, not a lookup; the shard finds an event written twice (a match and a pattern's
   * in one frame) in its event cache by the event's node number.
   */
  private readonly nextRef: number[];
  /** deliver(): the event last written to each shard in the call, and its number there. */
  private readonly lastEvent: (Event | null)[];
  private readonly lastRef: number[];
  private seq = 0;
  /** Per shard: the last sequence sent, the last stored, and its totals. */
  private readonly sent: number[];
  private readonly stored: number[];
  private readonly droppedBy: number[];
  /** Notifications each shard has stored (its totals, from STORED). */
  private readonly storedBy: number[];
  /** Per shard, while one event's matches are written: where its entry count goes, and the count. */
  private readonly countAt: number[];
  private readonly counts: number[];
  /**
   * Per owner number: its device's shard plus one (0: not worked out yet) and whether that shard
   * was told the number (TELL). Typed arrays by number: a match sent by number reads no object.
   */
  private shardByNum = new Uint8Array(1024);
  private sentByNum = new Uint8Array(1024);
  private flushes: Flush[] = [];
  private broken: AmbitError | null = null;
  /** Purges awaiting their shard's answer, by request. */
  private readonly purges = new Map<number, { resolve(n: number): void; reject(err: Error): void }>();
  private nextPurge = 0;

  constructor(
    links: readonly Link[],
    readonly now: () => number = Date.now,
  ) {
    const n = links.length;
    if (n < 1) throw new Error('fan-out shards: at least one');
    // Each number's shard is kept in a byte (shard + 1).
    if (n > 255) throw new Error(`fan-out shards: at most 255, got ${n}`);
    this.nextRef = new Array<number>(n).fill(0);
    this.lastEvent = new Array<Event | null>(n).fill(null);
    this.lastRef = new Array<number>(n).fill(0);
    this.outs = links.map((link, k) => new Outbox(link, () => (this.nextRef[k] = 0)));
    this.sent = new Array<number>(n).fill(0);
    this.stored = new Array<number>(n).fill(0);
    this.droppedBy = new Array<number>(n).fill(0);
    this.storedBy = new Array<number>(n).fill(0);
    this.countAt = new Array<number>(n).fill(-1);
    this.counts = new Array<number>(n).fill(0);
    links.forEach((link, k) =>
      link.listen(
        (frame) => {
          try {
            this.read(k, new FrameReader(frame));
          } catch (err) {
            this.fail(new AmbitError('UNAVAILABLE', `hub: unreadable frame from fan-out shard ${k} (${err instanceof Error ? err.message : String(err)})`));
          }
        },
        () => this.fail(new AmbitError('UNAVAILABLE', `hub: fan-out shard ${k} is gone`)),
      ),
    );
  }

  get shards(): number {
    return this.outs.length;
  }

  /** Notifications stored by the shards (as of their last STORED). */
  get notifications(): number {
    let s = 0;
    for (const x of this.storedBy) s += x;
    return s;
  }

  get dropped(): number {
    let d = 0;
    for (const x of this.droppedBy) d += x;
    return d;
  }

  /**
   * The engine's matches of each event (owner numbers, or keys resolved through the match core's
   * owner table), sent to the devices' shards as numbers; each shard groups its part by device
   * (serveShard). The hub's thread writes a few bytes per matched subscription, reads two typed
   * arrays for a number, and allocates nothing per recipient. Returns the subscriptions each event
   * reached, as `deliver` does.
   */
  deliverMatches(source: DeliverySource, events: readonly Event[], matches: readonly (readonly Listed[])[], owners: OwnerTable): number[] {
    if (this.broken !== null) throw this.broken;
    const n = this.outs.length;
    const seq = ++this.seq;
    const reached = new Array<number>(events.length);
    const countAt = this.countAt;
    const counts = this.counts;
    for (let i = 0; i < events.length; i++) {
      const keys = matches[i];
      reached[i] = keys.length;
      const e = events[i];
      for (let j = 0; j < keys.length; j++) {
        const kj = keys[j];
        // A number whose owner is gone since it was listed is delivered as matched, by its key (as an unknown key is).
        let num = -1;
        if (typeof kj === 'number') {
          if (!owners.isGone(kj)) num = kj;
        } else num = owners.numOf(kj);
        let k: number;
        let byKey: [string, string] | null = null;
        if (num < 0) {
          byKey = typeof kj === 'string' ? splitSubscriptionKey(kj) : [owners.ownerDevice(kj), owners.ownerId(kj)];
          k = shardOf(byKey[0], n);
        } else k = this.shardOfNum(num, owners, n);
        const w = this.outs[k].frame;
        if (countAt[k] < 0) {
          // This event's first match in shard k: its record's head, the count written at the end.
          const ref = this.writeEvent(k, w, e);
          w.u8(S.MATCH);
          w.u32(ref);
          w.f64(source.ms);
          countAt[k] = w.n;
          w.u32(0);
          counts[k] = 0;
          this.sent[k] = seq;
        }
        counts[k]++;
        if (byKey !== null) {
          w.u8(M.KEY);
          w.str(byKey[0]);
          w.str(byKey[1]);
        } else if (this.sentByNum[num] === 1) {
          w.u8(M.NUM);
          w.f64(num);
        } else {
          w.u8(M.TELL);
          w.f64(num);
          w.str(owners.ownerDevice(num));
          w.str(owners.ownerId(num));
          this.sentByNum[num] = 1;
        }
      }
      for (let k = 0; k < n; k++) {
        if (countAt[k] < 0) continue;
        this.outs[k].w.buf.writeUInt32LE(counts[k], countAt[k]);
        countAt[k] = -1;
      }
    }
    this.endCall(seq);
    return reached;
  }

  /** The shard of owner `num`'s device, worked out once per number (its arrays grown to hold it). */
  private shardOfNum(num: number, owners: OwnerTable, n: number): number {
    if (num < this.shardByNum.length) {
      const s = this.shardByNum[num];
      if (s !== 0) return s - 1;
    } else {
      const size = Math.max(2 * this.shardByNum.length, num + 1);
      const shards = new Uint8Array(size);
      shards.set(this.shardByNum);
      this.shardByNum = shards;
      const sent = new Uint8Array(size);
      sent.set(this.sentByNum);
      this.sentByNum = sent;
    }
    const k = shardOf(owners.ownerDevice(num), n);
    this.shardByNum[num] = k + 1;
    return k;
  }

  /**
   * Grouped recipients, for what the hub does not match per event: pattern subscriptions' matches
   * (each a recipient with its `match`), each sent to its device's shard. Returns each event's
   * recipients' subscriptions, as `deliver` does.
   */
  deliver(source: DeliverySource, events: readonly Event[], recipients: readonly (readonly Recipient[])[]): number[] {
    if (this.broken !== null) throw this.broken;
    const n = this.outs.length;
    const seq = ++this.seq;
    const reached = new Array<number>(events.length).fill(0);
    // Within this call only: a later call may write to another frame.
    this.lastEvent.fill(null);
    for (let i = 0; i < events.length; i++) {
      for (const r of recipients[i]) {
        if (r.match === undefined || r.subscriptionIds.length !== 1) throw new Error('fan-out shards: deliver() takes pattern matches only (one subscription each)');
        const k = shardOf(r.device, n);
        const w = this.outs[k].frame;
        let ref: number;
        if (this.lastEvent[k] === events[i]) ref = this.lastRef[k];
        else {
          ref = this.lastRef[k] = this.writeEvent(k, w, events[i]);
          this.lastEvent[k] = events[i];
        }
        w.u8(S.PATTERN);
        w.u32(ref);
        w.f64(source.ms);
        w.str(r.device);
        w.str(r.subscriptionIds[0]);
        w.value(r.match);
        this.sent[k] = seq;
        reached[i]++;
      }
    }
    this.endCall(seq);
    return reached;
  }

  /** Closes a deliver call: each shard written to gets its sequence number. */
  private endCall(seq: number): void {
    for (let k = 0; k < this.outs.length; k++) {
      if (this.sent[k] !== seq) continue;
      const w = this.outs[k].frame;
      w.u8(S.SEQ);
      w.f64(seq);
    }
  }

  /**
   * A subscription left the match core: the shard that was told its number forgets it, and the
   * number starts afresh here (the core gives it again once no match that may list it is in flight).
   */
  forget(num: number): void {
    if (num >= this.shardByNum.length) return;
    const told = this.sentByNum[num] === 1;
    const k = this.shardByNum[num] - 1;
    this.sentByNum[num] = 0;
    this.shardByNum[num] = 0;
    if (!told || this.broken !== null) return;
    const w = this.outs[k].frame;
    w.u8(S.FORGET);
    w.f64(num);
  }

  /** Drops the device's log in its shard (after what was delivered before); the notifications it held. */
  purge(device: string): Promise<number> {
    if (this.broken !== null) return Promise.reject(this.broken);
    const req = ++this.nextPurge;
    const w = this.outs[shardOf(device, this.outs.length)].frame;
    w.u8(S.PURGE);
    w.f64(req);
    w.str(device);
    return new Promise((resolve, reject) => this.purges.set(req, { resolve, reject }));
  }

  /** Writes event `e` to shard k's current frame; its number there. */
  private writeEvent(k: number, w: FrameWriter, e: Event): number {
    const ref = this.nextRef[k]++;
    writeEventRecord(w, ref, e);
    return ref;
  }

  flush(): Promise<void> {
    if (this.broken !== null) return Promise.reject(this.broken);
    if (this.done(this.sent)) return Promise.resolve();
    return new Promise((resolve, reject) => this.flushes.push({ target: this.sent.slice(), resolve, reject }));
  }

  private done(target: readonly number[]): boolean {
    for (let k = 0; k < target.length; k++) if (this.stored[k] < target[k]) return false;
    return true;
  }

  private read(k: number, r: FrameReader): void {
    while (r.more) {
      const tag = r.u8();
      if (tag === S.PURGED) {
        const req = r.f64();
        const n = r.f64();
        const p = this.purges.get(req);
        this.purges.delete(req);
        p?.resolve(n);
        continue;
      }
      if (tag !== S.STORED) throw new Error(`unknown record ${tag}`);
      this.stored[k] = r.f64();
      this.storedBy[k] = r.f64();
      this.droppedBy[k] = r.f64();
    }
    // Flushes were queued in order and their targets never go down: settle from the front.
    let i = 0;
    while (i < this.flushes.length && this.done(this.flushes[i].target)) this.flushes[i++].resolve();
    if (i !== 0) this.flushes = this.flushes.slice(i);
  }

  private fail(err: AmbitError): void {
    if (this.broken !== null) return;
    this.broken = err;
    for (const o of this.outs) o.closed = true;
    for (const f of this.flushes) f.reject(err);
    this.flushes = [];
    for (const p of this.purges.values()) p.reject(err);
    this.purges.clear();
  }
}

/**
 * The shard's side of the hub's link: stores what the hub routes here and says how far it got.
 * Returns a function that stops serving it.
 */
export function serveShard(store: InboxStore, link: Link, log: Logger): () => void {
  const fanout = store.fanout;
  const cache = new EventCache();
  const matches = new MatchGrouper((device, event, ids, ms) => fanout.store(device, event, ids, ms));
  // One STORED per turn, however many frames the turn read.
  const out: Outbox = new Outbox(link, () => {
    const w = out.w;
    w.u8(S.STORED);
    w.f64(seq);
    w.f64(fanout.notifications);
    w.f64(fanout.dropped);
  });
  let seq = 0;
  let stopped = false;
  link.listen(
    (frame) => {
      if (stopped) return;
      const r = new FrameReader(frame);
      const events: Event[] = [];
      try {
        while (r.more) {
          const tag = r.u8();
          switch (tag) {
            case H.EVENT: {
              const [ref, e] = cache.read(r);
              events[ref] = e;
              break;
            }
            case S.MATCH: {
              const event = events[r.u32()];
              matches.group(r, event, r.f64());
              break;
            }
            case S.PATTERN: {
              const event = events[r.u32()];
              const ms = r.f64();
              const device = r.str();
              const id = r.str();
              fanout.store(device, event, [id], ms, r.value<DeliveryMatch>());
              break;
            }
            case S.FORGET:
              matches.forget(r.f64());
              break;
            case S.SEQ:
              seq = r.f64();
              break;
            case S.PURGE: {
              const req = r.f64();
              const n = fanout.drop(r.str());
              const w = out.frame;
              w.u8(S.PURGED);
              w.f64(req);
              w.f64(n);
              break;
            }
            default:
              throw new Error(`unknown record ${tag}`);
          }
        }
      } catch (err) {
        log.error({ err }, 'unreadable frame from the hub; dropping its link');
        stopped = true;
        out.closed = true;
        link.close();
        return;
      }
      out.wake();
    },
    () => {
      stopped = true;
      out.closed = true;
    },
  );
  return () => {
    stopped = true;
    out.closed = true;
  };
}

/** A device of a shard, as the subscription numbers the hub told it refer to it. */
interface ShardDevice {
  readonly device: string;
  /** Numbers that name a subscription of this device. */
  subscriptions: number;
  /** The S.MATCH record that last touched it, and its recipient's index there. */
  stamp: number;
  slot: number;
}

interface Told {
  readonly of: ShardDevice;
  readonly id: string;
}

/**
 * The shard's side of S.MATCH: resolves the matched subscriptions of one event to their devices
 * and stores one notification per device with its subscription ids sorted, exactly as the match
 * core's grouping does for a hub that stores its own notifications.
 */
export class MatchGrouper {
  private readonly told = new Map<number, Told>();
  private readonly devices = new Map<string, ShardDevice>();
  private stamp = 0;
  private readonly out: { of: ShardDevice; ids: string[] }[] = [];

  constructor(private readonly store: (device: string, event: Event, ids: string[], ms: number) => void) {}

  /** Subscription numbers this shard knows. */
  get size(): number {
    return this.told.size;
  }

  /** Reads one S.MATCH record after its event number and time. */
  group(r: FrameReader, event: Event, ms: number): void {
    const n = r.u32();
    const stamp = ++this.stamp;
    const out = this.out;
    out.length = 0;
    let late: Map<string, ShardDevice> | null = null;
    for (let j = 0; j < n; j++) {
      const kind = r.u8();
      let d: ShardDevice;
      let id: string;
      if (kind === M.NUM) {
        const t = this.told.get(r.f64());
        if (t === undefined) throw new Error('a subscription number the hub did not tell');
        d = t.of;
        id = t.id;
      } else if (kind === M.TELL) {
        const num = r.f64();
        const device = r.str();
        id = r.str();
        let dev = this.devices.get(device);
        if (dev === undefined) {
          // One entry per device in this record: a removed subscription's key may have come first.
          dev = late?.get(device) ?? { device, subscriptions: 0, stamp: 0, slot: 0 };
          late?.delete(device);
          this.devices.set(device, dev);
        }
        dev.subscriptions++;
        this.told.set(num, { of: dev, id });
        d = dev;
      } else if (kind === M.KEY) {
        const device = r.str();
        id = r.str();
        // A subscription removed while its match was awaited: its device may have none left here.
        let dev = this.devices.get(device) ?? late?.get(device);
        if (dev === undefined) {
          dev = { device, subscriptions: 0, stamp: 0, slot: 0 };
          (late ??= new Map()).set(device, dev);
        }
        d = dev;
      } else throw new Error(`unknown match entry ${kind}`);
      if (d.stamp !== stamp) {
        d.stamp = stamp;
        d.slot = out.length;
        out.push({ of: d, ids: [id] });
      } else out[d.slot].ids.push(id);
    }
    for (let i = 0; i < out.length; i++) {
      const x = out[i];
      if (x.ids.length > 1) sortIds(x.ids);
      this.store(x.of.device, event, x.ids, ms);
    }
    out.length = 0;
  }

  forget(num: number): void {
    const t = this.told.get(num);
    if (t === undefined) return;
    this.told.delete(num);
    if (--t.of.subscriptions === 0) this.devices.delete(t.of.device);
  }
}
