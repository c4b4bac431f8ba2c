/**
 * The hub side of the link (link.ts): serves one Hub (the embedded hub of this node) to any
 * number of gateway processes. Requests run as they arrive, in order, exactly as a gateway in
 * this process would call them; replies go back batched per event-loop turn. A gateway that goes
 * away leaves nothing behind: its inboxes close (unacknowledged notifications stay in the log for
 * the device's next stream) and its location writers end.
 */
import type { Logger } from 'pino';
import type { Hub, Inbox, LocationWriter } from './port.js';
import { type Link, Outbox, type Request, toWire } from './link.js';

export class HubServer {
  private readonly detachers = new Set<() => void>();

  constructor(
    private readonly hub: Hub,
    private readonly log: Logger,
  ) {}

  /** Serves the hub on `link` until its other end closes; returns a function that stops serving it. */
  serve(link: Link): () => void {
    const inboxes = new Map<number, Inbox>();
    const writers = new Map<number, LocationWriter>();
    const out = new Outbox(link);
    let nextInbox = 1;
    const hub = this.hub;

    const answer = (i: number, p: Promise<unknown>): void => {
      p.then(
        (v) => out.push({ i, v }),
        (err: unknown) => out.push({ i, e: toWire(err) }),
      );
    };
    const run = (r: Request): void => {
      switch (r.o) {
        case 'add':
          return answer(r.i, hub.addSubscription(r.d, r.s));
        case 'replace':
          return answer(r.i, hub.replaceSubscription(r.d, r.s));
        case 'remove':
          return answer(r.i, hub.removeSubscription(r.d, r.id));
        case 'list':
          return answer(r.i, hub.listSubscriptions(r.d));
        case 'info':
          return answer(r.i, hub.deviceInfo(r.d));
        case 'locs':
          return answer(r.i, hub.updateLocations(r.u));
        case 'pub':
          return answer(r.i, hub.publish(r.e));
        case 'stats':
          return answer(r.i, hub.stats());
        case 'open':
          return answer(
            r.i,
            hub.openInbox(r.d, r.r).then((box) => {
              if (out.closed) {
                box.close();
                return null;
              }
              const b = nextInbox++;
              inboxes.set(b, box);
              return { b, t: box.resumeToken, m: box.missed };
            }),
          );
        case 'pull': {
          const box = inboxes.get(r.b);
          return answer(r.i, box === undefined ? Promise.resolve([]) : box.pull(r.n));
        }
        case 'ack': {
          const box = inboxes.get(r.b);
          if (box !== undefined) box.ack(r.id).catch((err: unknown) => this.log.warn({ err }, 'ack from a gateway failed'));
          return;
        }
        case 'shut': {
          const box = inboxes.get(r.b);
          inboxes.delete(r.b);
          box?.close();
          return;
        }
        case 'w':
          writers.set(r.w, hub.locationWriter(r.d));
          return;
        case 'wu': {
          const { w, c } = r;
          for (let k = 0; k < w.length; k++) writers.get(w[k])?.update(c[2 * k], c[2 * k + 1]);
          return;
        }
        case 'wx': {
          const w = writers.get(r.w);
          writers.delete(r.w);
          w?.close().catch((err: unknown) => this.log.warn({ err }, 'location writer close failed'));
          return;
        }
      }
    };

    let detached = false;
    const detach = (): void => {
      if (detached) return;
      detached = true;
      out.closed = true;
      this.detachers.delete(detach);
      for (const box of inboxes.values()) box.close();
      inboxes.clear();
      for (const w of writers.values()) void w.close().catch(() => null);
      writers.clear();
    };
    link.listen(
      (batch) => {
        if (detached) return;
        for (const r of batch as Request[]) {
          try {
            run(r);
          } catch (err) {
            // A request the hub could not even start (a malformed message from a gateway of
            // another version): answered as an error when it expects an answer.
            if (typeof (r as { i?: unknown }).i === 'number') out.push({ i: (r as { i: number }).i, e: toWire(err) });
            else this.log.warn({ err, op: (r as { o?: unknown }).o }, 'gateway message failed');
          }
        }
      },
      detach,
    );
    this.detachers.add(detach);
    return detach;
  }

  /** Stops serving every link (their inboxes close). */
  close(): void {
    for (const d of [...this.detachers]) d();
  }
}
