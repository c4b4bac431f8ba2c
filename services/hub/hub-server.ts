/**
 * The hub side of the link (link.ts): serves one Hub (the embedded hub of this node) to any
 * number of gateway processes. Requests run as they arrive, in order, exactly as a gateway in
 * this process would call them; replies go back in one frame per event-loop turn, and so do the
 * deliveries of every inbox whose log grew in that turn, up to each inbox's credit. A gateway that
 * goes away leaves nothing behind: its inboxes close (unacknowledged notifications stay in the
 * log for the device's next stream) and its location writers end.
 */
import type { Logger } from 'pino';
import type { Event } from '../../src/model/types.js';
import type { Delivery, DrainableInbox, Hub, LocationWriter, PublishResult } from './port.js';
import { type CallArgs, CALL_OPS, type CallOp, FrameReader, type FrameWriter, G, H, type Link, Outbox, readPublished, toWire, writeEventRecord } from './link.js';

/** Where a served link's inboxes open: the embedded hub, or a fan-out shard's store. */
export interface InboxSource {
  openInbox(device: string, resumeAfter: string | null): DrainableInbox | Promise<DrainableInbox>;
}

/** An open inbox of one link: what its gateway will still take (credit) and whether a push is due. */
interface Served {
  readonly b: number;
  readonly box: DrainableInbox;
  credit: number;
  due: boolean;
  /** Marks it due (registered with the inbox while it has credit). */
  readonly ready: () => void;
}

export class HubServer {
  private readonly detachers = new Set<() => void>();

  /**
   * `hub`: what the calls, publishes and location writes of a link go to (null: a fan-out shard,
   * whose links only open inboxes). `inboxes`: where inboxes open (null: in the node's fan-out
   * shards, which gateways reach on links of their own).
   */
  constructor(
    private readonly hub: Hub | null,
    private readonly log: Logger,
    private readonly inboxes: InboxSource | null,
  ) {}

  /** Serves the hub on `link` until its other end closes; returns a function that stops serving it. */
  serve(link: Link): () => void {
    const inboxes = new Map<number, Served>();
    /** Location writers by number (numbers are dense per link: an array, not a map). */
    const writers: (LocationWriter | undefined)[] = [];
    /** Inboxes to push from at the end of this turn. */
    let due: Served[] = [];
    const out = new Outbox(link, () => {
      pushDue();
      eventRefs.clear();
    });
    /** Events written to the current frame, by number (a frame refers to each once). */
    const eventRefs = new Map<Event, number>();
    const served = this.hub;
    const source = this.inboxes;
    /** The hub, for what only it serves. */
    const hubFor = (what: string): Hub => {
      if (served === null) throw new Error(`hub link: ${what} goes to the hub, not to a fan-out shard`);
      return served;
    };
    let detached = false;
    let unwatchRevocations: (() => void) | null = null;

    /** The frame with a reply's tag and request number written, or null once detached. */
    const reply = (tag: number, i: number): FrameWriter | null => {
      if (detached) return null;
      const w = out.frame;
      w.u8(tag);
      w.u32(i);
      return w;
    };
    const fail = (i: number, err: unknown): void => reply(H.ERROR, i)?.value(toWire(err));
    const answer = (i: number, p: Promise<unknown>): void => {
      p.then((v) => reply(H.REPLY, i)?.value(v), (err: unknown) => fail(i, err));
    };
    const published = (i: number, rs: PublishResult[]): void => {
      const w = reply(H.PUBLISHED, i);
      if (w === null) return;
      w.u32(rs.length);
      for (const r of rs) {
        w.str(r.eventId);
        w.f64(r.reached);
        w.u8(r.duplicate === true ? 1 : 0);
      }
    };
    const push = (b: number, ds: Delivery[]): void => {
      const w = out.frame;
      // Events first, each once per frame.
      for (const d of ds) {
        if (eventRefs.has(d.event)) continue;
        const ref = eventRefs.size;
        eventRefs.set(d.event, ref);
        writeEventRecord(w, ref, d.event);
      }
      w.u8(H.PUSH);
      w.u32(b);
      w.u32(ds.length);
      for (const d of ds) {
        w.str(d.deliveryId);
        w.f64(d.publishedAtMs);
        w.u32(eventRefs.get(d.event)!);
        const ids = d.subscriptionIds;
        w.u32(ids.length);
        for (let k = 0; k < ids.length; k++) w.str(ids[k]);
        if (d.match === undefined) w.u8(0);
        else {
          w.u8(1);
          w.value(d.match);
        }
      }
    };
    /** Marks an inbox for a push at the end of this turn. */
    const wake = (s: Served): void => {
      if (s.due || detached) return;
      s.due = true;
      due.push(s);
      out.wake();
    };
    const pushDue = (): void => {
      const list = due;
      due = [];
      for (const s of list) {
        s.due = false;
        if (s.credit <= 0 || inboxes.get(s.b) !== s) continue;
        let ds: Delivery[];
        try {
          ds = s.box.take(s.credit);
        } catch {
          // The device was purged: its inbox on the gateway ends too.
          inboxes.delete(s.b);
          s.box.close();
          const w = out.frame;
          w.u8(H.PURGED);
          w.u32(s.b);
          continue;
        }
        if (ds.length !== 0) {
          s.credit -= ds.length;
          push(s.b, ds);
        }
        // Credit left: push again when the log grows (at once, within this flush, if it has more).
        if (s.credit > 0) s.box.notify(s.ready);
      }
    };

    const call = (i: number, op: CallOp, a: CallArgs): void => {
      if (op === 'open') return open(i, a);
      const hub = hubFor(op);
      switch (op) {
        case 'add':
          return answer(i, hub.addSubscription(a.d, a.s!));
        case 'replace':
          return answer(i, hub.replaceSubscription(a.d, a.s!));
        case 'remove':
          return answer(i, hub.removeSubscription(a.d, a.id!));
        case 'list':
          return answer(i, hub.listSubscriptions(a.d));
        case 'info':
          return answer(i, hub.deviceInfo(a.d));
        case 'stats':
          return answer(i, hub.stats());
        case 'devices':
          return answer(i, hub.listDevices(a.q!));
        case 'purge':
          return answer(i, hub.purgeDevice(a.d));
        case 'seen':
          return answer(i, hub.markSeen(a.ds!, a.ms!));
        case 'expire':
          return answer(i, hub.expireDevices(a.ms!, a.n!));
        case 'revoke':
          return answer(i, hub.revokeTokens(a.rv!));
        case 'watchrev':
          // Every revocation now and at each change goes to this gateway (once per link).
          if (unwatchRevocations === null) {
            unwatchRevocations = hub.watchRevocations((all) => {
              if (detached) return;
              const w = out.frame;
              w.u8(H.REVOKED);
              w.value(all);
            });
          }
          return answer(i, Promise.resolve(null));
      }
    };

    const open = (i: number, a: CallArgs): void => {
      // The gateway numbers its inboxes, so a push right behind the reply finds its inbox.
      const b = a.b ?? 0;
      if (source === null) return fail(i, new Error('hub link: inboxes of this node open in its fan-out shards'));
      answer(
        i,
        Promise.resolve()
          .then(() => source.openInbox(a.d, a.r ?? null))
          .then((box) => {
            if (detached) {
              box.close();
              return null;
            }
            inboxes.get(b)?.box.close();
            const s: Served = { b, box, credit: a.c ?? 0, due: false, ready: () => wake(s) };
            inboxes.set(b, s);
            // Its backlog goes behind the reply, at the end of this turn.
            wake(s);
            return { t: box.resumeToken, m: box.missed, l: box.stateLost, s: box.stateId };
          }),
      );
    };

    /** A count, then that many (writer number, lat, lon): positions of writers opened on this link. */
    const move = (r: FrameReader): void => {
      const n = r.u32();
      for (let k = 0; k < n; k++) {
        const w = writers[r.u32()];
        const lat = r.f64();
        const lon = r.f64();
        w?.update(lat, lon);
      }
    };

    const record = (r: FrameReader): void => {
      const tag = r.u8();
      switch (tag) {
        case G.CALL: {
          const i = r.u32();
          const op = CALL_OPS[r.u8()];
          try {
            const a = r.value<CallArgs>();
            if (op === undefined) throw new Error('unknown call');
            call(i, op, a);
          } catch (err) {
            fail(i, err);
          }
          return;
        }
        case G.PUB: {
          const i = r.u32();
          const n = r.u32();
          const events = new Array<Event>(n);
          for (let k = 0; k < n; k++) events[k] = readPublished(r);
          if (served === null) return fail(i, new Error('hub link: publish goes to the hub, not to a fan-out shard'));
          served.publish(events).then((rs) => published(i, rs), (err: unknown) => fail(i, err));
          return;
        }
        case G.LOCS: {
          // UpdateLocations: positions by writer number (the gateway opened one per device).
          const i = r.u32();
          hubFor('UpdateLocations');
          move(r);
          answer(i, Promise.resolve());
          return;
        }
        case G.CREDIT: {
          const s = inboxes.get(r.u32());
          const n = r.u32();
          if (s === undefined) return;
          s.credit += n;
          wake(s);
          return;
        }
        case G.ACK: {
          const s = inboxes.get(r.u32());
          const id = r.str();
          s?.box.ack(id).catch((err: unknown) => this.log.warn({ err }, 'ack from a gateway failed'));
          return;
        }
        case G.SHUT: {
          const b = r.u32();
          const s = inboxes.get(b);
          inboxes.delete(b);
          s?.box.close();
          return;
        }
        case G.WOPEN: {
          const w = r.u32();
          writers[w] = hubFor('a location writer').locationWriter(r.str());
          return;
        }
        case G.WMOVE:
          return move(r);
        case G.WCLOSE: {
          const n = r.u32();
          const w = writers[n];
          writers[n] = undefined;
          w?.close().catch((err: unknown) => this.log.warn({ err }, 'location writer close failed'));
          return;
        }
        default:
          throw new Error(`hub link: unknown record ${tag}`);
      }
    };

    const detach = (): void => {
      if (detached) return;
      detached = true;
      out.closed = true;
      unwatchRevocations?.();
      this.detachers.delete(detach);
      for (const s of inboxes.values()) s.box.close();
      inboxes.clear();
      due = [];
      for (const w of writers) if (w !== undefined) void w.close().catch(() => null);
      writers.length = 0;
    };
    link.listen((frame) => {
      if (detached) return;
      const r = new FrameReader(frame);
      try {
        while (r.more) record(r);
      } catch (err) {
        // A frame this side cannot read (a gateway of another version): nothing after it can be
        // trusted, so the link ends and the gateway's calls fail UNAVAILABLE.
        this.log.error({ err }, 'unreadable frame from a gateway; dropping its link');
        detach();
        link.close();
      }
    }, detach);
    this.detachers.add(detach);
    return detach;
  }

  /** Stops serving every link (their inboxes close). */
  close(): void {
    for (const d of [...this.detachers]) d();
  }
}
