/**
 * The gateway side of the link (link.ts): a Hub whose state lives in another process of the node
 * (hub-server.ts). Each call is one request in this turn's batch; location writers coalesce, so a
 * device that moves ten times within a turn sends its newest position once, ahead of whatever
 * this gateway sends after it (a subscribe right behind a move sees the move applied).
 */
import { AmbitError } from '../../src/model/errors.js';
import type { Event, PositionUpdate } from '../../src/model/types.js';
import type { Delivery, DeviceInfo, DeviceSubscription, Hub, HubStats, Inbox, LocationWriter, PublishResult } from './port.js';
import { type Link, Outbox, type Reply, type Request, fromWire } from './link.js';

interface Pending {
  resolve(v: unknown): void;
  reject(err: Error): void;
}

class LinkedWriter implements LocationWriter {
  lat = 0;
  lon = 0;
  dirty = false;
  closed = false;

  constructor(
    private readonly hub: LinkedHub,
    readonly n: number,
  ) {}

  update(lat: number, lon: number): void {
    if (this.closed) return;
    this.lat = lat;
    this.lon = lon;
    if (!this.dirty) {
      this.dirty = true;
      this.hub.moved(this);
    }
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.hub.send({ o: 'wx', w: this.n });
  }
}

class LinkedInbox implements Inbox {
  private closed = false;
  private waiting: ((d: Delivery[]) => void) | null = null;

  constructor(
    private readonly hub: LinkedHub,
    private readonly b: number,
    readonly resumeToken: string,
    readonly missed: number,
  ) {}

  async pull(max: number): Promise<Delivery[]> {
    if (this.closed) return [];
    const got = this.hub.call<Delivery[]>({ o: 'pull', i: 0, b: this.b, n: max });
    // close() answers a pending pull with [] at once; the hub's own [] follows and is dropped.
    return Promise.race([got, new Promise<Delivery[]>((resolve) => (this.waiting = resolve))]).finally(() => (this.waiting = null));
  }

  async ack(deliveryId: string): Promise<void> {
    if (!this.closed) this.hub.send({ o: 'ack', b: this.b, id: deliveryId });
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.hub.send({ o: 'shut', b: this.b });
    this.hub.forget(this);
    this.waiting?.([]);
  }

  /** The hub is gone. */
  end(): void {
    this.closed = true;
    this.waiting?.([]);
  }
}

export class LinkedHub implements Hub {
  readonly mode = 'embedded' as const;
  private readonly out: Outbox;
  private readonly pending = new Map<number, Pending>();
  private readonly inboxes = new Set<LinkedInbox>();
  private nextRequest = 1;
  private nextWriter = 1;
  private moves: LinkedWriter[] = [];
  private gone = false;

  constructor(link: Link) {
    this.out = new Outbox(link, () => this.sendMoves());
    link.listen(
      (batch) => {
        for (const r of batch as Reply[]) {
          const p = this.pending.get(r.i);
          if (p === undefined) continue;
          this.pending.delete(r.i);
          if ('e' in r) p.reject(fromWire(r.e));
          else p.resolve(r.v);
        }
      },
      () => this.end(new AmbitError('UNAVAILABLE', 'hub: the node process holding the hub is gone')),
    );
  }

  /** @internal One-way message, behind the moves coalesced so far. */
  send(r: Request): void {
    if (this.gone) return;
    this.sendMoves();
    this.out.push(r);
  }

  /** @internal A request with a reply; `r.i` is assigned here. */
  call<T>(r: Request & { i: number }): Promise<T> {
    if (this.gone) return Promise.reject(new AmbitError('UNAVAILABLE', 'hub: closed'));
    r.i = this.nextRequest++;
    return new Promise<T>((resolve, reject) => {
      this.pending.set(r.i, { resolve: resolve as (v: unknown) => void, reject });
      this.send(r);
    });
  }

  /** @internal A closed inbox. */
  forget(box: LinkedInbox): void {
    this.inboxes.delete(box);
  }

  /** @internal A writer has a new position to send. */
  moved(w: LinkedWriter): void {
    this.moves.push(w);
    this.out.wake();
  }

  private sendMoves(): void {
    const ms = this.moves;
    if (ms.length === 0) return;
    this.moves = [];
    const w = new Int32Array(ms.length);
    const c = new Float64Array(2 * ms.length);
    for (let k = 0; k < ms.length; k++) {
      const m = ms[k];
      m.dirty = false;
      w[k] = m.n;
      c[2 * k] = m.lat;
      c[2 * k + 1] = m.lon;
    }
    this.out.push({ o: 'wu', w, c });
  }

  addSubscription(device: string, sub: DeviceSubscription): Promise<void> {
    return this.call({ o: 'add', i: 0, d: device, s: sub });
  }

  replaceSubscription(device: string, sub: DeviceSubscription): Promise<void> {
    return this.call({ o: 'replace', i: 0, d: device, s: sub });
  }

  removeSubscription(device: string, subscriptionId: string): Promise<void> {
    return this.call({ o: 'remove', i: 0, d: device, id: subscriptionId });
  }

  listSubscriptions(device: string): Promise<DeviceSubscription[]> {
    return this.call({ o: 'list', i: 0, d: device });
  }

  deviceInfo(device: string): Promise<DeviceInfo> {
    return this.call({ o: 'info', i: 0, d: device });
  }

  updateLocations(updates: readonly PositionUpdate[]): Promise<void> {
    return this.call({ o: 'locs', i: 0, u: updates as PositionUpdate[] });
  }

  locationWriter(device: string): LocationWriter {
    const w = new LinkedWriter(this, this.nextWriter++);
    this.send({ o: 'w', w: w.n, d: device });
    return w;
  }

  publish(events: readonly Event[]): Promise<PublishResult[]> {
    return this.call({ o: 'pub', i: 0, e: events as Event[] });
  }

  async openInbox(device: string, resumeAfter: string | null): Promise<Inbox> {
    const r = await this.call<{ b: number; t: string; m: number } | null>({ o: 'open', i: 0, d: device, r: resumeAfter });
    if (r === null) throw new AmbitError('UNAVAILABLE', 'hub: closed');
    const box = new LinkedInbox(this, r.b, r.t, r.m);
    if (this.gone) box.end();
    else this.inboxes.add(box);
    return box;
  }

  stats(): Promise<HubStats> {
    return this.call({ o: 'stats', i: 0 });
  }

  /** Ends this gateway's use of the hub (the hub itself lives on in its process). */
  async close(): Promise<void> {
    if (this.gone) return;
    this.out.flush();
    this.end(new AmbitError('UNAVAILABLE', 'hub: closed'));
  }

  private end(err: AmbitError): void {
    if (this.gone) return;
    this.gone = true;
    this.out.closed = true;
    // Pending pulls end with [] (the Inbox contract), before their requests fail.
    for (const b of this.inboxes) b.end();
    this.inboxes.clear();
    for (const p of this.pending.values()) p.reject(err);
    this.pending.clear();
  }
}
