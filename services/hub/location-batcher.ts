/**
 * The Redis hub's location writers: the newest position of each dirty device, flushed together
 * every `flushMs` or once `flushSize` are dirty, with at most `maxInFlight` flushes outstanding.
 */
import type { Logger } from 'pino';
import type { LocColumns } from '../redis/codec.js';
import { CoalescedWriter, type WriterOwner } from './coalesced-writer.js';

const COMPONENT = 'redis hub';

/** A Redis hub's location writers: coalesced, keyed by the device id's bytes. */
export type Writer = CoalescedWriter<Buffer>;

/**
 * The shared dirty list of a hub's writers: flushed every `flushMs`, or at once when `flushSize`
 * writers are dirty and fewer than `maxInFlight` flushes are outstanding. When Redis is slow the
 * list only coalesces (one slot per writer), so memory stays bounded by the number of writers.
 * A failed flush marks its writers dirty again (their latest positions are retried, later).
 */
export class LocationBatcher implements WriterOwner<Buffer> {
  private dirty: Writer[] = [];
  private timer: NodeJS.Timeout | null = null;
  private readonly inFlight = new Set<Promise<void>>();
  private stopped = false;
  private lastErrorLog = 0;

  constructor(
    private readonly send: (cols: LocColumns) => Promise<void>,
    private readonly flushMs: number,
    readonly flushSize: number,
    private readonly maxInFlight: number,
    private readonly log: Logger | undefined,
  ) {}

  /** A writer's close waits for what is pending to be stored. */
  ended(): Promise<void> {
    return this.drain();
  }

  mark(w: Writer): void {
    if (this.stopped) return;
    this.dirty.push(w);
    if (this.dirty.length >= this.flushSize && this.inFlight.size < this.maxInFlight) this.flush();
    else if (this.timer === null) this.timer = setTimeout(this.onTimer, this.flushMs);
  }

  private readonly onTimer = (): void => {
    this.timer = null;
    // A slow Redis must not pile up flushes: writers stay dirty (and keep coalescing) until a
    // flush in flight completes, which re-arms the timer.
    if (this.inFlight.size >= this.maxInFlight) return;
    this.flush();
  };

  /** Sends what is dirty now (in this connection's order, before any command issued after it). */
  flush(): void {
    if (this.timer !== null) {
      clearTimeout(this.timer);
      this.timer = null;
    }
    const batch = this.dirty;
    if (batch.length === 0 || this.stopped) return;
    this.dirty = [];
    const n = batch.length;
    const devices = new Array<Buffer>(n);
    const lat = new Float64Array(n);
    const lon = new Float64Array(n);
    for (let i = 0; i < n; i++) {
      const w = batch[i];
      devices[i] = w.key;
      lat[i] = w.lat;
      lon[i] = w.lon;
      w.dirty = false;
    }
    const p: Promise<void> = this.send({ devices, lat, lon, n }).then(
      () => {
        this.inFlight.delete(p);
        if (this.dirty.length > 0 && this.timer === null && !this.stopped) this.timer = setTimeout(this.onTimer, this.flushMs);
      },
      (err: unknown) => {
        this.inFlight.delete(p);
        const now = Date.now();
        if (now - this.lastErrorLog > 5000) {
          this.lastErrorLog = now;
          this.log?.error({ err, positions: n }, `${COMPONENT}: location flush failed; positions are retried`);
        }
        if (this.stopped) return;
        for (const w of batch) {
          if (!w.dirty) {
            w.dirty = true;
            this.dirty.push(w);
          }
        }
        if (this.timer === null) this.timer = setTimeout(this.onTimer, Math.max(this.flushMs, 250));
        throw err;
      },
    );
    p.catch(() => {}); // drain() reports it; the batch is already queued again
    this.inFlight.add(p);
  }

  /** Flushes and waits for every flush in flight; rejects when one failed. */
  async drain(): Promise<void> {
    this.flush();
    await Promise.all([...this.inFlight]);
  }

  stop(): void {
    this.stopped = true;
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    this.dirty = [];
  }
}
