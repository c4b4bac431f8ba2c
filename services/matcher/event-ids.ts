/**
 * Publishing you can retry: event ids deduplicate within a window. The first event with an id is
 * matched and delivered; a later one with the same id (a retry, in the same call or within the
 * window) is reported as a duplicate with the first one's reach and delivers nothing.
 *
 * `planPublish` sorts a call's events into fresh ones and duplicates against whatever remembers ids
 * (`EventIdWindow` in memory for the embedded hub; `{p}eid:{id}` keys in Redis for the matcher);
 * `settlePublish` turns the fresh events' reach into every event's result.
 */
import type { Event } from '../../src/model/types.js';

export interface DedupeOptions {
  /** How long an event id is remembered (ms); 0 turns deduplication off. */
  windowMs: number;
  /** Embedded: at most this many ids are remembered (the oldest go first). */
  maxIds: number;
}

export const DEFAULT_DEDUPE: DedupeOptions = { windowMs: 300_000, maxIds: 1_000_000 };

/** One event of a call: fresh (its index among the fresh events) or a duplicate. */
export type PublishSlot =
  | { fresh: number }
  /** Published before the call: the reach it had then (a promise while that publish is matched). */
  | { reached: number | Promise<number> }
  /** The same id earlier in this call: that event's index. */
  | { sameAs: number };

export interface PublishPlan {
  /** The events to match and deliver, in call order. */
  fresh: Event[];
  /** Null when every event is fresh (the common case: no per-event slots). */
  slots: PublishSlot[] | null;
}

/**
 * Sorts `events` into fresh ones and duplicates. `seen(id)` is the reach of an id published
 * before this call, or undefined.
 */
export function planPublish(events: readonly Event[], seen: (id: string) => number | Promise<number> | undefined): PublishPlan {
  let slots: PublishSlot[] | null = null;
  let first: Map<string, number> | null = null;
  if (events.length > 1) first = new Map();
  const fresh: Event[] = [];
  for (let i = 0; i < events.length; i++) {
    const id = events[i].id;
    const before = seen(id);
    const earlier = first?.get(id);
    let slot: PublishSlot | null = null;
    if (before !== undefined) slot = { reached: before };
    else if (earlier !== undefined) slot = { sameAs: earlier };
    if (slot === null) {
      first?.set(id, i);
      if (slots !== null) slots.push({ fresh: fresh.length });
      fresh.push(events[i]);
      continue;
    }
    if (slots === null) {
      slots = [];
      for (let k = 0; k < fresh.length; k++) slots.push({ fresh: k });
    }
    slots.push(slot);
  }
  return { fresh, slots };
}

/**
 * Every event's reach and whether it was a duplicate, from the fresh events' reach. A duplicate of
 * a publish still being matched waits for it.
 */
export async function settlePublish(plan: PublishPlan, freshReached: readonly number[]): Promise<{ reached: number; duplicate: boolean }[]> {
  if (plan.slots === null) return freshReached.map((reached) => ({ reached, duplicate: false }));
  const out: { reached: number; duplicate: boolean }[] = [];
  for (const s of plan.slots) {
    if ('fresh' in s) out.push({ reached: freshReached[s.fresh], duplicate: false });
    else if ('reached' in s) out.push({ reached: await s.reached, duplicate: true });
    else out.push({ reached: out[s.sameAs].reached, duplicate: true });
  }
  return out;
}

/** What `remember` hands back for `settle` and `drop`: the entry's place in the window (-1: none kept). */
export type IdTicket = number;

/**
 * Event ids published lately, with their reach, in memory: forgotten after `windowMs` by the
 * injected clock, or sooner when more than `maxIds` are held (oldest first).
 *
 * A ring of entries in typed arrays (time, reach, ticket) plus a map from id to its slot: no object
 * per remembered id. A window holds up to a million ids in every hub partition of a node, and an
 * object per id kept that many objects alive for the garbage collector to trace.
 */
export class EventIdWindow {
  /** Id → its slot in the ring. */
  private readonly index = new Map<string, number>();
  private cap = 0;
  private mask = 0;
  /** Per slot: the id (undefined: a dead entry), its time, its reach, its ticket. */
  private ids: (string | undefined)[] = [];
  private at = new Float64Array(0);
  private reachedOf = new Float64Array(0);
  private ticketOf = new Float64Array(0);
  /** Per slot: the publish still matching it (null once settled) and its index there. */
  private pendingOf: (Promise<readonly number[]> | null)[] = [];
  private pendingIndex = new Int32Array(0);
  /** Tickets of the oldest entry held and of the next one: slot = ticket & mask. */
  private head = 0;
  private next = 0;

  constructor(
    private readonly options: DedupeOptions,
    private readonly now: () => number,
  ) {}

  get enabled(): boolean {
    return this.options.windowMs > 0;
  }

  /**
   * The reach of `id` when it was published within the window (a promise while that publish is
   * still matched); undefined otherwise.
   */
  get(id: string): number | Promise<number> | undefined {
    if (!this.enabled) return undefined;
    const slot = this.index.get(id);
    if (slot === undefined) return undefined;
    if (this.at[slot] <= this.now() - this.options.windowMs) return undefined;
    const pending = this.pendingOf[slot];
    if (pending === null) return this.reachedOf[slot];
    const index = this.pendingIndex[slot];
    return pending.then((r) => r[index]);
  }

  /**
   * Remembers a fresh event's id before it is matched: `pending` resolves with the reach of the
   * publish's fresh events, of which this is number `index`. Settle or drop the entry after.
   */
  remember(id: string, pending: Promise<readonly number[]>, index: number): IdTicket {
    if (!this.enabled) return -1;
    const now = this.now();
    // An id past its window published again: its old entry dies where it is.
    const old = this.index.get(id);
    if (old !== undefined) this.kill(old);
    if (this.next - this.head === this.cap) {
      // Full: grow while the ring is smaller than the bound or holds dead entries (drops, ids
      // published again) that would otherwise push live ones out early; else the oldest goes.
      if (this.cap < this.options.maxIds || this.index.size < this.options.maxIds) this.grow();
      else this.evictHead();
    }
    const ticket = this.next++;
    const slot = ticket & this.mask;
    this.ids[slot] = id;
    this.at[slot] = now;
    this.reachedOf[slot] = 0;
    this.ticketOf[slot] = ticket;
    this.pendingOf[slot] = pending;
    this.pendingIndex[slot] = index;
    this.index.set(id, slot);
    this.expire(now);
    return ticket;
  }

  /** The publish of a remembered id was matched: its reach. */
  settle(ticket: IdTicket, reached: number): void {
    const slot = this.live(ticket);
    if (slot < 0) return;
    this.reachedOf[slot] = reached;
    this.pendingOf[slot] = null;
  }

  /** The publish of a remembered id failed: it was not published, so it is forgotten. */
  drop(id: string, ticket: IdTicket): void {
    const slot = this.live(ticket);
    if (slot >= 0 && this.ids[slot] === id) this.kill(slot);
  }

  get size(): number {
    return this.index.size;
  }

  /** The slot of a ticket still held, or -1. */
  private live(ticket: IdTicket): number {
    if (ticket < this.head || ticket >= this.next) return -1;
    const slot = ticket & this.mask;
    return this.ticketOf[slot] === ticket && this.ids[slot] !== undefined ? slot : -1;
  }

  /** Forgets the entry in `slot` (it stays in the ring, dead, until the ring's head passes it). */
  private kill(slot: number): void {
    const id = this.ids[slot];
    if (id === undefined) return;
    if (this.index.get(id) === slot) this.index.delete(id);
    this.ids[slot] = undefined;
    this.pendingOf[slot] = null;
  }

  private evictHead(): void {
    this.kill(this.head & this.mask);
    this.head++;
  }

  private expire(now: number): void {
    const oldest = now - this.options.windowMs;
    while (this.head < this.next) {
      const slot = this.head & this.mask;
      if (this.ids[slot] !== undefined && this.index.size <= this.options.maxIds && this.at[slot] > oldest) break;
      this.evictHead();
    }
  }

  /** Doubles the ring, keeping every entry's ticket. */
  private grow(): void {
    const cap = this.cap === 0 ? 1024 : this.cap * 2;
    const mask = cap - 1;
    const ids: (string | undefined)[] = new Array(cap).fill(undefined);
    const at = new Float64Array(cap);
    const reached = new Float64Array(cap);
    const tickets = new Float64Array(cap);
    const pending: (Promise<readonly number[]> | null)[] = new Array(cap).fill(null);
    const pendingIndex = new Int32Array(cap);
    for (let t = this.head; t < this.next; t++) {
      const from = t & this.mask;
      const to = t & mask;
      const id = this.ids[from];
      ids[to] = id;
      at[to] = this.at[from];
      reached[to] = this.reachedOf[from];
      tickets[to] = t;
      pending[to] = this.pendingOf[from];
      pendingIndex[to] = this.pendingIndex[from];
      if (id !== undefined && this.index.get(id) === from) this.index.set(id, to);
    }
    this.cap = cap;
    this.mask = mask;
    this.ids = ids;
    this.at = at;
    this.reachedOf = reached;
    this.ticketOf = tickets;
    this.pendingOf = pending;
    this.pendingIndex = pendingIndex;
  }
}
