/**
 * The hub side of the link (link.ts): serves one Hub (the embedded hub of this node) to any
 * number of gateway processes. Requests run as they arrive, in order, exactly as a gateway in
 * this process would call them; replies go back in one frame per event-loop turn. A gateway that
 * goes away leaves nothing behind: its inboxes close (unacknowledged notifications stay in the
 * log for the device's next stream) and its location writers end.
 */
import type { Logger } from 'pino';
import type { Event } from '../../src/model/types.js';
import type { Delivery, Hub, Inbox, LocationWriter, PublishResult } from './port.js';
import { type CallArgs, CALL_OPS, type CallOp, FrameReader, FrameWriter, G, H, type Link, Outbox, readEvent, toWire, writeEvent } from './link.js';

/** Events as link records, encoded once however many gateways and frames carry them. */
const eventBytes = new WeakMap<Event, Buffer>();
const scratch = new FrameWriter();

function encoded(e: Event): Buffer {
  let b = eventBytes.get(e);
  if (b === undefined) {
    writeEvent(scratch, e);
    b = scratch.copy();
    eventBytes.set(e, b);
  }
  return b;
}

export class HubServer {
  private readonly detachers = new Set<() => void>();

  constructor(
    private readonly hub: Hub,
    private readonly log: Logger,
  ) {}

  /** Serves the hub on `link` until its other end closes; returns a function that stops serving it. */
  serve(link: Link): () => void {
    const inboxes = new Map<number, Inbox>();
    /** Location writers by number (numbers are dense per link: an array, not a map). */
    const writers: (LocationWriter | undefined)[] = [];
    const out = new Outbox(link, () => eventRefs.clear());
    /** Events written to the current frame, by number (a frame refers to each once). */
    const eventRefs = new Map<Event, number>();
    let nextInbox = 1;
    const hub = this.hub;
    let detached = false;

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
      }
    };
    const deliveries = (i: number, ds: Delivery[]): void => {
      if (detached) return;
      const w = out.frame;
      // Events first, each once per frame.
      for (const d of ds) {
        if (eventRefs.has(d.event)) continue;
        const ref = eventRefs.size;
        eventRefs.set(d.event, ref);
        w.u8(H.EVENT);
        w.u32(ref);
        w.raw(encoded(d.event));
      }
      reply(H.DELIVERIES, i);
      w.u32(ds.length);
      for (const d of ds) {
        w.str(d.deliveryId);
        w.f64(d.publishedAtMs);
        w.u32(eventRefs.get(d.event)!);
        const ids = d.subscriptionIds;
        w.u32(ids.length);
        for (let k = 0; k < ids.length; k++) w.str(ids[k]);
      }
    };

    const call = (i: number, op: CallOp, a: CallArgs): void => {
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
        case 'open':
          return answer(
            i,
            hub.openInbox(a.d, a.r ?? null).then((box) => {
              if (detached) {
                box.close();
                return null;
              }
              const b = nextInbox++;
              inboxes.set(b, box);
              return { b, t: box.resumeToken, m: box.missed };
            }),
          );
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
          for (let k = 0; k < n; k++) events[k] = readEvent(r);
          hub.publish(events).then((rs) => published(i, rs), (err: unknown) => fail(i, err));
          return;
        }
        case G.LOCS: {
          // UpdateLocations: positions by writer number (the gateway opened one per device).
          const i = r.u32();
          const n = r.u32();
          for (let k = 0; k < n; k++) {
            const w = writers[r.u32()];
            const lat = r.f64();
            const lon = r.f64();
            w?.update(lat, lon);
          }
          answer(i, Promise.resolve());
          return;
        }
        case G.PULL: {
          const i = r.u32();
          const box = inboxes.get(r.u32());
          const max = r.u32();
          (box === undefined ? Promise.resolve([]) : box.pull(max)).then((ds) => deliveries(i, ds), (err: unknown) => fail(i, err));
          return;
        }
        case G.ACK: {
          const box = inboxes.get(r.u32());
          const id = r.str();
          box?.ack(id).catch((err: unknown) => this.log.warn({ err }, 'ack from a gateway failed'));
          return;
        }
        case G.SHUT: {
          const b = r.u32();
          const box = inboxes.get(b);
          inboxes.delete(b);
          box?.close();
          return;
        }
        case G.WOPEN: {
          const w = r.u32();
          writers[w] = hub.locationWriter(r.str());
          return;
        }
        case G.WMOVE: {
          const n = r.u32();
          for (let k = 0; k < n; k++) {
            const w = writers[r.u32()];
            const lat = r.f64();
            const lon = r.f64();
            w?.update(lat, lon);
          }
          return;
        }
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
      this.detachers.delete(detach);
      for (const box of inboxes.values()) box.close();
      inboxes.clear();
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
