/**
 * A device stream's position, coalesced: an update stores the newest pair and, the first time
 * since its owner last sent it, puts the writer on the owner's dirty list. The owner sends the
 * dirty writers as one batch (Redis mode: one HSET and one stream entry per flush; the node-local
 * link: one record per frame) and clears `dirty`. `key` is what the owner sends for the device.
 */
import type { LocationWriter } from './port.js';

export interface WriterOwner<K> {
  /** The writer has a position its owner has not sent yet. */
  mark(w: CoalescedWriter<K>): void;
  /** The writer ended: send what is pending (and whatever ending it means to the owner). */
  ended(w: CoalescedWriter<K>): Promise<void>;
}

export class CoalescedWriter<K> implements LocationWriter {
  lat = 0;
  lon = 0;
  dirty = false;
  private closed = false;

  constructor(
    private readonly owner: WriterOwner<K>,
    readonly key: K,
  ) {}

  update(lat: number, lon: number): void {
    if (this.closed) return;
    this.lat = lat;
    this.lon = lon;
    if (!this.dirty) {
      this.dirty = true;
      this.owner.mark(this);
    }
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.owner.ended(this);
  }
}
