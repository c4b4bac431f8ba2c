/**
 * The gateway side of the link (link.ts): a Hub whose state lives in another process of the node
 * (hub-server.ts). Each call is one request in this turn's batch; location writers coalesce, so a
 * device that moves ten times within a turn sends its newest position once, ahead of whatever
 * this gateway sends after it (a subscribe right behind a move sees the move applied).
 */
import { AmbitError } from '../../src/model/errors.js';
import type { Event, PositionUpdate } from '../../src/model/types.js';
import { type Delivery, type DeliveryMatch, type DeviceInfo, type DevicePage, type DeviceQuery, type DeviceSubscription, type DrainableInbox, type Hub, type HubStats, type Inbox, type LocationWriter, type PublishResult, type PurgeResult, type Revocation, compareDeliveryIds, purgedError } from './port.js';
import { CoalescedWriter, type WriterOwner } from './coalesced-writer.js';
import { shardOf } from './fanout-shard.js';
import { type CallArgs, CALL_OPS, type CallOp, EventCache, FrameReader, type FrameWriter, G, H, type Link, Outbox, type WireError, eventNumber, fromWire, writePublished } from './link.js';

interface Pending {
  resolve(v: unknown): void;
  reject(err: Error): void;
}

/** An inbox with nothing queued (never written to). */
const NONE: Delivery[] = [];

class LinkedInbox implements DrainableInbox {
  resumeToken = '';
  missed = 0;
  stateLost = false;
  stateId = '';
  private closed = false;
  /** Deliveries the hub pushed that the stream has not taken (at most the window). */
  private queue = NONE;
  private head = 0;
  /** Called once when deliveries arrive or the inbox ends. */
  private waiter: (() => void) | null = null;
  /** Credit to give back: deliveries taken since the last frame. */
  private taken = 0;
  /** The highest ack not yet sent: acks within one turn go as one. */
  private pendingAck: string | null = null;
  /** In this turn's list of inboxes with something to send. */
  queued = false;

  /** `at`: the link it lives on (0: the hub's; k: fan-out shard k-1's). */
  constructor(
    private readonly hub: LinkedHub,
    readonly b: number,
    readonly at: number,
  ) {}

  /** The hub said the device was purged: takes and pulls throw. */
  private purged = false;

  async pull(max: number): Promise<Delivery[]> {
    for (;;) {
      if (this.purged) throw purgedError();
      if (this.closed) return [];
      const ds = this.take(max);
      if (ds.length !== 0) return ds;
      if (this.waiter !== null) throw new Error('hub: one pull at a time per inbox');
      await new Promise<void>((resolve) => this.notify(resolve));
    }
  }

  take(max: number): Delivery[] {
    if (this.purged) throw purgedError();
    if (this.closed || this.head >= this.queue.length) return [];
    return this.takeQueued(max);
  }

  notify(ready: () => void): void {
    if (this.purged) return ready();
    if (this.closed || this.waiter !== null) return;
    if (this.head < this.queue.length) return ready();
    this.waiter = ready;
  }

  /** @internal The hub ended this inbox: the device's state was purged (the hub closed its side). */
  purge(): void {
    if (this.closed) return;
    this.purged = true;
    this.closed = true;
    // What was pushed belongs to the purged state: it is not delivered.
    this.queue = NONE;
    this.head = 0;
    this.hub.forget(this);
    const w = this.waiter;
    this.waiter = null;
    w?.();
  }

  /** @internal Deliveries the hub pushed. */
  receive(ds: Delivery[]): void {
    if (this.closed) return;
    if (this.head === this.queue.length) {
      this.queue = ds;
      this.head = 0;
    } else for (let k = 0; k < ds.length; k++) this.queue.push(ds[k]);
    const w = this.waiter;
    if (w !== null) {
      this.waiter = null;
      w();
    }
  }

  private takeQueued(max: number): Delivery[] {
    const q = this.queue;
    const from = this.head;
    const to = Math.min(q.length, from + max);
    const out = from === 0 && to === q.length ? q : q.slice(from, to);
    if (to === q.length) {
      this.queue = NONE;
      this.head = 0;
    } else this.head = to;
    this.taken += to - from;
    this.hub.due(this);
    return out;
  }

  async ack(deliveryId: string): Promise<void> {
    if (this.closed) return;
    if (this.pendingAck === null) {
      this.pendingAck = deliveryId;
      this.hub.due(this);
    } else if (compareDeliveryIds(deliveryId, this.pendingAck) > 0) this.pendingAck = deliveryId;
  }

  /** @internal Writes the coalesced ack and the credit given back. */
  writePending(w: FrameWriter): void {
    this.queued = false;
    if (this.closed) return;
    if (this.pendingAck !== null) {
      w.u8(G.ACK);
      w.u32(this.b);
      w.str(this.pendingAck);
      this.pendingAck = null;
    }
    if (this.taken !== 0) {
      w.u8(G.CREDIT);
      w.u32(this.b);
      w.u32(this.taken);
      this.taken = 0;
    }
  }

  close(): void {
    if (this.closed) return;
    // A pending ack goes before the close.
    const w = this.hub.frameOn(this.at);
    this.writePending(w);
    this.closed = true;
    w.u8(G.SHUT);
    w.u32(this.b);
    this.hub.forget(this);
    this.end();
  }

  /** Ends a pull in flight with []; what was pushed and not taken stays in the hub's log. */
  end(): void {
    this.closed = true;
    this.queue = NONE;
    this.head = 0;
    const w = this.waiter;
    this.waiter = null;
    w?.();
  }
}

/**
 * Deliveries the hub may push to one inbox ahead of its stream: one send batch, so a stream that
 * HTTP/2 holds back keeps no more in the gateway than a pulled batch would.
 */
export const DEFAULT_WINDOW = 64;

/** Devices of UpdateLocations a gateway keeps writer numbers for; past that it starts over. */
const MAX_FLEET_WRITERS = 1 << 20;

export interface LinkedHubOptions {
  /** Deliveries the hub may push to one inbox before its stream takes them (DEFAULT_WINDOW). */
  window?: number;
  /** UpdateLocations devices it keeps writer numbers for (tests make it small). */
  maxFleetWriters?: number;
  /** Links to the node's fan-out shards, where inboxes open (none: in the hub). */
  shards?: readonly Link[];
  /** What the hub's end is called in the error once it is gone ('the node process holding the hub'). */
  name?: string;
  /** The events lately received, shared with the process's other links (a hub partition's each). */
  events?: EventCache;
}

export class LinkedHub implements Hub, WriterOwner<number> {
  /** Events go to the node's hub process, and from its shards to every gateway with recipients. */
  readonly forwardsEvents = true;
  private readonly window: number;
  private readonly maxFleetWriters: number;
  private readonly shardLinks: readonly Link[];
  readonly mode = 'embedded' as const;
  private readonly out: Outbox;
  /** The outboxes of the hub's link (0) and of each fan-out shard's link (1..K). */
  private readonly outs: Outbox[];
  private readonly pending = new Map<number, Pending>();
  /** Events lately received, so one that comes again is the same object (encoded once for the devices). */
  private readonly events: EventCache;
  private readonly inboxes = new Map<number, LinkedInbox>();
  private nextRequest = 1;
  private nextWriter = 1;
  private nextInbox = 1;
  private moves: CoalescedWriter<number>[] = [];
  /** Inboxes with an ack or credit to send this turn, per link. */
  private dues: LinkedInbox[][];
  /** Writer numbers of devices moved through UpdateLocations. */
  private readonly fleet = new Map<string, number>();
  /** The revocations the hub last pushed (null: none yet), and who hears of them. */
  private revocations: readonly Revocation[] | null = null;
  private readonly revocationListeners = new Set<(all: readonly Revocation[]) => void>();
  private revocationsAsked = false;
  private gone = false;

  constructor(
    private readonly link: Link,
    options: LinkedHubOptions = {},
  ) {
    this.window = options.window ?? DEFAULT_WINDOW;
    this.maxFleetWriters = options.maxFleetWriters ?? MAX_FLEET_WRITERS;
    this.shardLinks = options.shards ?? [];
    this.events = options.events ?? new EventCache();
    const links = [link, ...this.shardLinks];
    this.dues = links.map(() => []);
    this.outs = links.map((l, k) => new Outbox(l, k === 0 ? () => this.writeCoalesced() : () => this.writeDues(k)));
    this.out = this.outs[0];
    links.forEach((l, k) =>
      l.listen(
        (frame) => {
          try {
            this.read(new FrameReader(frame));
          } catch (err) {
            // A frame this side cannot read: nothing after it can be trusted.
            this.end(new AmbitError('UNAVAILABLE', `hub: unreadable reply (${err instanceof Error ? err.message : String(err)})`));
            for (const x of links) x.close();
          }
        },
        () => this.end(new AmbitError('UNAVAILABLE', k === 0 ? `hub: ${options.name ?? 'the node process holding the hub'} is gone` : `hub: fan-out shard ${k - 1} is gone`)),
      ),
    );
  }

  private read(r: FrameReader): void {
    const events: Event[] = [];
    while (r.more) {
      const tag = r.u8();
      switch (tag) {
        case H.EVENT: {
          const [ref, e] = this.events.read(r);
          events[ref] = e;
          break;
        }
        case H.PUSH: {
          const b = r.u32();
          const n = r.u32();
          const ds = new Array<Delivery>(n);
          for (let k = 0; k < n; k++) {
            const deliveryId = r.str();
            const publishedAtMs = r.f64();
            const event = events[r.u32()];
            const m = r.u32();
            const subscriptionIds = new Array<string>(m);
            for (let j = 0; j < m; j++) subscriptionIds[j] = r.str();
            ds[k] = r.u8() === 0 ? { deliveryId, event, subscriptionIds, publishedAtMs } : { deliveryId, event, subscriptionIds, publishedAtMs, match: r.value<DeliveryMatch>() };
          }
          // An inbox closed here since: its deliveries stay in the hub's log.
          this.inboxes.get(b)?.receive(ds);
          break;
        }
        case H.PURGED:
          this.inboxes.get(r.u32())?.purge();
          break;
        case H.REVOKED: {
          const all = r.value<Revocation[]>();
          this.revocations = all;
          for (const l of this.revocationListeners) l(all);
          break;
        }
        case H.PUBLISHED: {
          const i = r.u32();
          const n = r.u32();
          const rs = new Array<PublishResult>(n);
          for (let k = 0; k < n; k++) {
            const eventId = r.str();
            const reached = r.f64();
            rs[k] = r.u8() === 1 ? { eventId, reached, duplicate: true } : { eventId, reached };
          }
          this.settle(i, rs);
          break;
        }
        case H.REPLY: {
          const i = r.u32();
          this.settle(i, r.value());
          break;
        }
        case H.ERROR: {
          const i = r.u32();
          this.settle(i, undefined, fromWire(r.value<WireError>()));
          break;
        }
        default:
          throw new Error(`unknown record ${tag}`);
      }
    }
  }

  /** @internal Answers request `i` (nothing when it was answered already). */
  settle(i: number, v: unknown, err?: Error): void {
    const p = this.pending.get(i);
    if (p === undefined) return;
    this.pending.delete(i);
    if (err !== undefined) p.reject(err);
    else p.resolve(v);
  }

  /** @internal The current frame's writer, behind the moves coalesced so far. */
  frame() {
    this.writeCoalesced();
    return this.out.frame;
  }

  /** @internal The current frame of link `at` (0: the hub's), behind what was coalesced for it. */
  frameOn(at: number) {
    if (at === 0) return this.frame();
    this.writeDues(at);
    return this.outs[at].frame;
  }

  private request<T>(write: (i: number) => void): Promise<T> {
    if (this.gone) return Promise.reject(new AmbitError('UNAVAILABLE', 'hub: closed'));
    const i = this.nextRequest++;
    return new Promise<T>((resolve, reject) => {
      this.pending.set(i, { resolve: resolve as (v: unknown) => void, reject });
      write(i);
    });
  }

  private call<T>(op: CallOp, args: CallArgs, at = 0): Promise<T> {
    return this.request<T>((i) => {
      const w = this.frameOn(at);
      w.u8(G.CALL);
      w.u32(i);
      w.u8(CALL_OPS.indexOf(op));
      w.value(args);
    });
  }

  /** @internal A closed inbox. */
  forget(box: LinkedInbox): void {
    this.inboxes.delete(box.b);
  }

  /** @internal A writer has a new position to send. */
  mark(w: CoalescedWriter<number>): void {
    if (this.gone) return;
    this.moves.push(w);
    this.out.wake();
  }

  /** @internal A writer ended: its pending move goes first (frame() writes it), then its close. */
  async ended(writer: CoalescedWriter<number>): Promise<void> {
    const w = this.frame();
    w.u8(G.WCLOSE);
    w.u32(writer.key);
  }

  /** @internal An inbox has an ack or credit to send. */
  due(box: LinkedInbox): void {
    if (box.queued || this.gone) return;
    box.queued = true;
    this.dues[box.at].push(box);
    this.outs[box.at].wake();
  }

  /** Writes what was coalesced (acks, location moves) ahead of whatever comes next. */
  private writeCoalesced(): void {
    if (this.gone) return;
    this.writeDues(0);
    const ms = this.moves;
    if (ms.length === 0) return;
    this.moves = [];
    const w = this.out.frame;
    w.u8(G.WMOVE);
    w.u32(ms.length);
    for (let k = 0; k < ms.length; k++) {
      const m = ms[k];
      m.dirty = false;
      w.u32(m.key);
      w.f64(m.lat);
      w.f64(m.lon);
    }
  }

  /** Writes the acks and credit of link `at`'s inboxes. */
  private writeDues(at: number): void {
    const boxes = this.dues[at];
    if (boxes.length === 0 || this.gone) return;
    this.dues[at] = [];
    const w = this.outs[at].w;
    for (const b of boxes) b.writePending(w);
  }

  addSubscription(device: string, sub: DeviceSubscription): Promise<void> {
    return this.call('add', { d: device, s: sub });
  }

  replaceSubscription(device: string, sub: DeviceSubscription): Promise<void> {
    return this.call('replace', { d: device, s: sub });
  }

  removeSubscription(device: string, subscriptionId: string): Promise<void> {
    return this.call('remove', { d: device, id: subscriptionId });
  }

  listSubscriptions(device: string): Promise<DeviceSubscription[]> {
    return this.call('list', { d: device });
  }

  deviceInfo(device: string): Promise<DeviceInfo> {
    return this.call('info', { d: device });
  }

  listDevices(q: DeviceQuery): Promise<DevicePage> {
    return this.call('devices', { d: '', q });
  }

  purgeDevice(device: string): Promise<PurgeResult> {
    return this.call('purge', { d: device });
  }

  markSeen(devices: readonly string[], ms: number): Promise<void> {
    return this.call('seen', { d: '', ds: devices, ms });
  }

  expireDevices(beforeMs: number, max: number): Promise<string[]> {
    return this.call('expire', { d: '', ms: beforeMs, n: max });
  }

  revokeTokens(revocations: readonly Revocation[]): Promise<void> {
    return this.call('revoke', { d: '', rv: revocations });
  }

  /** The hub pushes every change once asked (the first watcher asks). */
  watchRevocations(listener: (all: readonly Revocation[]) => void): () => void {
    this.revocationListeners.add(listener);
    if (this.revocations !== null) listener(this.revocations);
    if (!this.revocationsAsked) {
      this.revocationsAsked = true;
      this.call('watchrev', { d: '' }).catch(() => (this.revocationsAsked = false));
    }
    return () => this.revocationListeners.delete(listener);
  }

  updateLocations(updates: readonly PositionUpdate[]): Promise<void> {
    return this.request((i) => {
      // Each device gets a writer number the first time (WOPEN); from then on its positions cross
      // as numbers, and the hub finds its record by index instead of by device id.
      if (this.fleet.size + updates.length > this.maxFleetWriters) this.forgetFleet();
      const nums = new Array<number>(updates.length);
      for (let k = 0; k < updates.length; k++) {
        const device = updates[k].device;
        let n = this.fleet.get(device);
        if (n === undefined) {
          n = this.nextWriter++;
          this.fleet.set(device, n);
          const w = this.frame();
          w.u8(G.WOPEN);
          w.u32(n);
          w.str(device);
        }
        nums[k] = n;
      }
      const w = this.frame();
      w.u8(G.LOCS);
      w.u32(i);
      w.u32(updates.length);
      for (let k = 0; k < updates.length; k++) {
        w.u32(nums[k]);
        w.f64(updates[k].lat);
        w.f64(updates[k].lon);
      }
    });
  }

  /** Ends the writers of UpdateLocations devices (the table is bounded). */
  private forgetFleet(): void {
    const w = this.frame();
    for (const n of this.fleet.values()) {
      w.u8(G.WCLOSE);
      w.u32(n);
    }
    this.fleet.clear();
  }

  locationWriter(device: string): LocationWriter {
    const writer = new CoalescedWriter(this, this.nextWriter++);
    const w = this.frame();
    w.u8(G.WOPEN);
    w.u32(writer.key);
    w.str(device);
    return writer;
  }

  publish(events: readonly Event[]): Promise<PublishResult[]> {
    return this.request((i) => {
      const w = this.frame();
      w.u8(G.PUB);
      w.u32(i);
      w.u32(events.length);
      for (const e of events) {
        writePublished(w, e);
        // Its pushes back to this gateway find it without decoding it.
        this.events.remember(eventNumber(e), e);
      }
    });
  }

  async openInbox(device: string, resumeAfter: string | null): Promise<Inbox> {
    // Registered before the request goes: the hub pushes its backlog right behind the reply.
    const b = this.nextInbox++;
    const n = this.shardLinks.length;
    // With fan-out shards the device's inbox lives in its shard.
    const box = new LinkedInbox(this, b, n === 0 ? 0 : 1 + shardOf(device, n));
    this.inboxes.set(b, box);
    try {
      const r = await this.call<{ t: string; m: number; l?: boolean; s?: string } | null>('open', { d: device, r: resumeAfter, b, c: this.window }, box.at);
      if (r === null) throw new AmbitError('UNAVAILABLE', 'hub: closed');
      box.resumeToken = r.t;
      box.missed = r.m;
      box.stateLost = r.l === true;
      box.stateId = r.s ?? '';
      return box;
    } catch (err) {
      this.inboxes.delete(b);
      box.end();
      throw err;
    }
  }

  stats(): Promise<HubStats> {
    return this.call('stats', { d: '' });
  }

  /** Ends this gateway's use of the hub (the hub itself lives on in its process). */
  async close(): Promise<void> {
    if (this.gone) return;
    for (const o of this.outs) o.flush();
    this.end(new AmbitError('UNAVAILABLE', 'hub: closed'));
    this.link.close();
    for (const l of this.shardLinks) l.close();
  }

  private end(err: AmbitError): void {
    if (this.gone) return;
    this.gone = true;
    // One link gone is the hub gone: the others close too.
    this.link.close();
    for (const l of this.shardLinks) l.close();
    for (const o of this.outs) o.closed = true;
    // Pending pulls end with [] (the Inbox contract), before their requests fail.
    for (const b of this.inboxes.values()) b.end();
    this.inboxes.clear();
    this.dues = this.dues.map(() => []);
    for (const p of this.pending.values()) p.reject(err);
    this.pending.clear();
  }
}
