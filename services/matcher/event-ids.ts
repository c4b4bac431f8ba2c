/**
 * Publishing you can retry: event ids deduplicate within a window. The first event with an id is
 * matched and delivered; a later one with the same id (a retry, in the same call or within the
 * window) is reported as a duplicate with the first one's reach and delivers nothing.
 *
 * `planPublish` sorts a call's events into fresh ones and duplicates against whatever remembers ids
 * (`EventIdWindow` in memory for the embedded hub; `{p}eid:{id}` keys in Redis for the matcher);
 * `settlePublish` turns the fresh events' reach into every event's result.
 */
import { AmbitError } from '../../src/model/errors.js';
import type { Event } from '../../src/model/types.js';
import { compareStreamIds, streamIdMs } from '../redis/codec.js';

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
    slots ??= freshSlots(fresh.length);
    slots.push(slot);
  }
  return { fresh, slots };
}

/** The slots of the first `n` events of a call, all fresh (made when its first duplicate comes). */
function freshSlots(n: number): PublishSlot[] {
  const slots: PublishSlot[] = [];
  for (let k = 0; k < n; k++) slots.push({ fresh: k });
  return slots;
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
/**
 * Judges the events of publishes read again from the Redis command stream, after the leader
 * matched them (a restart's replay after its snapshot, a standby following the stream), as fresh
 * or not the way they were judged then: an event is a duplicate when its id was fresh in an earlier
 * entry judged here less than the window before it, or when its dedupe record (`{p}eid:{id}`)
 * names an earlier entry less than the window before it, by the entries' stream times; with no
 * window, only when repeated in its own entry. Entries are given in stream order; ids that can no
 * longer make a later one a duplicate are forgotten as the stream's time moves on.
 */
export class StreamIdJudge {
  /** Ids judged fresh, with their entry's stream time, oldest first. */
  private readonly freshAt = new Map<string, number>();

  constructor(private readonly windowMs: number) {}

  plan(entryId: string, events: readonly Event[], known: ReadonlyMap<string, { entry: string }>): PublishPlan {
    const w = this.windowMs;
    const ms = streamIdMs(entryId);
    const plan = planPublish(events, (id) => {
      if (w === 0) return undefined;
      const at = this.freshAt.get(id);
      if (at !== undefined) return ms - at < w ? 0 : undefined;
      const kn = known.get(id);
      return kn !== undefined && compareStreamIds(kn.entry, entryId) < 0 && ms - streamIdMs(kn.entry) < w ? 0 : undefined;
    });
    if (w === 0) return plan;
    for (const e of plan.fresh) {
      this.freshAt.delete(e.id); // re-inserted last: the map stays in stream-time order
      this.freshAt.set(e.id, ms);
    }
    for (const [id, at] of this.freshAt) {
      if (ms - at < w) break;
      this.freshAt.delete(id);
    }
    return plan;
  }

  /** Ids remembered (tests, stats). */
  get size(): number {
    return this.freshAt.size;
  }
}

export type IdTicket = number;

/**
 * Event ids published lately, with their reach, in memory: forgotten after `windowMs` by the
 * injected clock (of elapsed time: a jump back counts none), or sooner when more than `maxIds` are
 * held (oldest first; a bound of 0 holds none).
 *
 * No object per remembered id: a window holds up to a million ids in every hub partition of a
 * node, and a million strings and map entries per partition kept the garbage collector busy
 * tracing them (the tail of the latency under sustained load). Instead:
 * - a ring of entries in typed arrays (time, reach, ticket, the id's place in the text ring);
 * - the ids' UTF-16 code units, appended in ticket order to a ring of their own (`units`), freed
 *   from its head as entries leave the ring's head;
 * - an open-addressing table of (ticket, hash) pairs by a hash of the id's code units (linear
 *   probing, backward-shift deletion): a probe compares hashes in the table itself and reads an
 *   entry's id (its code units, not a string) only when the hashes are equal, so a fresh id costs
 *   about one cache miss in the table and the ring is written in order.
 * Only a publish still being matched holds an object (its promise) until it settles.
 */
export class EventIdWindow {
  private cap = 0;
  private mask = 0;
  /** Per slot: its time, its reach, its ticket, where its id starts in `units` (absolute) and its length (-1: a dead entry), its hash. */
  private at = new Float64Array(0);
  private reachedOf = new Float64Array(0);
  private ticketOf = new Float64Array(0);
  private startOf = new Float64Array(0);
  private lenOf = new Int32Array(0);
  private hashOf = new Int32Array(0);
  /** Per slot: the publish still matching it (null once settled) and its index there. */
  private pendingOf: (Promise<readonly number[]> | null)[] = [];
  private pendingIndex = new Int32Array(0);
  /** Tickets of the oldest entry held and of the next one: slot = ticket & mask. */
  private head = 0;
  private next = 0;
  /** The ids' code units: a ring addressed by absolute offsets (& unitMask); [unitHead, unitNext) is in use. */
  private units = new Uint16Array(0);
  private unitMask = -1;
  private unitHead = 0;
  private unitNext = 0;
  /** Pairs (ticket + 1, hash) of each live entry, placed by its id's hash (ticket + 1 = 0: empty). */
  private table = new Float64Array(0);
  private tableMask = -1;
  /** Live (not dead) entries: the table's and the bound's count. */
  private liveCount = 0;
  /** `claim`'s scratch: each fresh event's index in the call. */
  private callIndex = new Int32Array(0);
  /** The injected clock's last reading, and how far it has jumped back in all (see `clock`). */
  private lastNow = -Infinity;
  private jumpedBack = 0;

  constructor(
    private readonly options: DedupeOptions,
    private readonly now: () => number,
  ) {}

  get enabled(): boolean {
    return this.options.windowMs > 0;
  }

  /**
   * The time entries are stamped and aged by: the injected clock, never going back. A clock that
   * jumps back counts no time until it moves on again (then its steps count), so an id is held a
   * window of elapsed time, not a window plus the jump, and entries stay in time order in the ring
   * (expiry takes them from its head). A clock that only moves forward is read as it is.
   */
  private clock(): number {
    const now = this.now();
    if (now < this.lastNow) this.jumpedBack += this.lastNow - now;
    this.lastNow = now;
    return now + this.jumpedBack;
  }

  /**
   * The reach of `id` when it was published within the window (a promise while that publish is
   * still matched); undefined otherwise.
   */
  get(id: string): number | Promise<number> | undefined {
    if (!this.enabled) return undefined;
    const slot = this.find(id, hashId(id));
    if (slot < 0) return undefined;
    if (this.at[slot] <= this.clock() - this.options.windowMs) return undefined;
    return this.reachOf(slot);
  }

  /**
   * Remembers a fresh event's id before it is matched: `pending` resolves with the reach of the
   * publish's fresh events, of which this is number `index`. Settle or drop the entry after.
   */
  remember(id: string, pending: Promise<readonly number[]>, index: number): IdTicket {
    if (!this.enabled) return -1;
    const h = hashId(id);
    // An id past its window published again: its old entry dies where it is.
    const old = this.find(id, h);
    if (old >= 0) this.kill(old);
    const now = this.clock();
    const ticket = this.add(id, h, pending, index, now);
    this.expire(now);
    return ticket;
  }

  /**
   * One publish's events sorted against the window and its fresh ones remembered, in one pass: the
   * plan `planPublish` gives with `get` followed by `remember` of each fresh event (a duplicate of
   * an earlier event of the call names it, `sameAs`), with one hash and one probe an event and no
   * map. `tickets[k]` is fresh event k's entry (settle or drop them after). Null when the window is
   * off, or when the call has more events than the window holds ids: remembering its first events
   * could then push them out before their duplicates later in the call are reached (plan such a
   * call with `planPublish`).
   */
  claim(events: readonly Event[], pending: Promise<readonly number[]>): { plan: PublishPlan; tickets: IdTicket[] } | null {
    if (!this.enabled || events.length > this.options.maxIds) return null;
    // All or nothing: an entry that is no event with a string id is refused before any is remembered.
    checkEventIds(events);
    const now = this.clock();
    const oldest = now - this.options.windowMs;
    const fresh: Event[] = [];
    const tickets: IdTicket[] = [];
    let slots: PublishSlot[] | null = null;
    /** Entries this call pushed out of a ring full at the bound, by id: still seen by its later events. */
    let gone: Map<string, PublishSlot> | null = null;
    /** Each fresh event's index in the call (only read once a duplicate came: before that they are equal). */
    if (this.callIndex.length < events.length) this.callIndex = new Int32Array(Math.max(events.length, 2 * this.callIndex.length));
    const callIndex = this.callIndex;
    try {
      for (let i = 0; i < events.length; i++) {
        const id = events[i].id;
        const h = hashId(id);
        const slot = this.find(id, h);
        let dup: PublishSlot | null = null;
        if (slot >= 0) {
          if (this.at[slot] <= oldest) this.kill(slot);
          else if (this.pendingOf[slot] === pending) dup = { sameAs: callIndex[this.pendingIndex[slot]] };
          else dup = { reached: this.reachOf(slot) };
        } else if (gone !== null) dup = gone.get(id) ?? null;
        if (dup === null) {
          callIndex[fresh.length] = i;
          if (slots !== null) slots.push({ fresh: fresh.length });
          // The window as the call came: nothing expires before its end, and an entry pushed out
          // by the bound (as remembering one event at a time did) is still seen by later events.
          if (this.next - this.head === this.cap && this.cap >= this.options.maxIds && this.liveCount >= this.options.maxIds) {
            const hs = this.head & this.mask;
            if (this.lenOf[hs] >= 0 && this.at[hs] > oldest) (gone ??= new Map()).set(this.idAt(hs), { reached: this.reachOf(hs) });
            this.evictHead();
          }
          tickets.push(this.add(id, h, pending, fresh.length, now));
          fresh.push(events[i]);
          continue;
        }
        slots ??= freshSlots(fresh.length);
        slots.push(dup);
      }
    } catch (err) {
      for (let k = 0; k < tickets.length; k++) this.drop(fresh[k].id, tickets[k]);
      throw err;
    }
    if (fresh.length > 0) this.expire(now);
    return { plan: { fresh, slots }, tickets };
  }

  /** The reach of the live entry in `slot`: a number, or a promise while its publish is matched. */
  private reachOf(slot: number): number | Promise<number> {
    const p = this.pendingOf[slot];
    if (p === null) return this.reachedOf[slot];
    const index = this.pendingIndex[slot];
    const r = p.then((rs) => rs[index]);
    r.catch(() => {}); // awaited by the caller in its turn: not an unhandled rejection meanwhile
    return r;
  }

  /** The id of the entry in `slot`, from the text ring. */
  private idAt(slot: number): string {
    const start = this.startOf[slot];
    let id = '';
    for (let k = 0; k < this.lenOf[slot]; k++) id += String.fromCharCode(this.units[(start + k) & this.unitMask]);
    return id;
  }

  /** A new live entry for `id` (hash `h`, not held): its ticket. Expire after. */
  private add(id: string, h: number, pending: Promise<readonly number[]>, index: number, now: number): IdTicket {
    if (this.next - this.head === this.cap) {
      // Full: grow while the ring is smaller than the bound or holds dead entries (drops, ids
      // published again) that would otherwise push live ones out early; else the oldest goes. An
      // empty ring (none yet, a bound of 0) grows: it has no oldest (expiry then forgets the entry).
      if (this.head === this.next || this.cap < this.options.maxIds || this.liveCount < this.options.maxIds) this.grow();
      else this.evictHead();
    }
    if (this.unitNext - this.unitHead + id.length > this.units.length) this.growUnits(id.length);
    const ticket = this.next++;
    const slot = ticket & this.mask;
    const start = this.unitNext;
    for (let k = 0; k < id.length; k++) this.units[(start + k) & this.unitMask] = id.charCodeAt(k);
    this.unitNext += id.length;
    this.at[slot] = now;
    this.reachedOf[slot] = 0;
    this.ticketOf[slot] = ticket;
    this.startOf[slot] = start;
    this.lenOf[slot] = id.length;
    this.hashOf[slot] = h;
    this.pendingOf[slot] = pending;
    this.pendingIndex[slot] = index;
    this.liveCount++;
    if (2 * this.liveCount > this.tableMask + 1) this.growTable(); // at most half full
    this.insert(h, ticket);
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
    if (slot >= 0 && this.idIs(slot, id)) this.kill(slot);
  }

  get size(): number {
    return this.liveCount;
  }

  /** The slot of a ticket still held, or -1. */
  private live(ticket: IdTicket): number {
    if (ticket < this.head || ticket >= this.next) return -1;
    const slot = ticket & this.mask;
    return this.ticketOf[slot] === ticket && this.lenOf[slot] >= 0 ? slot : -1;
  }

  /** Whether the live entry in `slot` holds `id`. */
  private idIs(slot: number, id: string): boolean {
    const n = this.lenOf[slot];
    if (n !== id.length) return false;
    const start = this.startOf[slot];
    const units = this.units;
    const m = this.unitMask;
    for (let k = 0; k < n; k++) if (units[(start + k) & m] !== id.charCodeAt(k)) return false;
    return true;
  }

  /** The slot of the live entry holding `id` (hash `h`), or -1. */
  private find(id: string, h: number): number {
    const table = this.table;
    const tm = this.tableMask;
    if (tm < 0) return -1;
    for (let i = h & tm; table[2 * i] !== 0; i = (i + 1) & tm) {
      if (table[2 * i + 1] !== h) continue;
      const slot = (table[2 * i] - 1) & this.mask;
      if (this.idIs(slot, id)) return slot;
    }
    return -1;
  }

  private insert(h: number, ticket: number): void {
    const table = this.table;
    const tm = this.tableMask;
    let i = h & tm;
    while (table[2 * i] !== 0) i = (i + 1) & tm;
    table[2 * i] = ticket + 1;
    table[2 * i + 1] = h;
  }

  /** Takes `ticket` out of the table, shifting back the entries after it that may move (linear probing without tombstones). */
  private remove(h: number, ticket: number): void {
    const table = this.table;
    const tm = this.tableMask;
    let i = h & tm;
    while (table[2 * i] !== ticket + 1) {
      if (table[2 * i] === 0) return;
      i = (i + 1) & tm;
    }
    for (let j = (i + 1) & tm; table[2 * j] !== 0; j = (j + 1) & tm) {
      const home = table[2 * j + 1] & tm;
      // Entry j may fill the hole at i when its home is not in the cyclic range (i, j].
      if ((j > i && (home <= i || home > j)) || (j < i && home <= i && home > j)) {
        table[2 * i] = table[2 * j];
        table[2 * i + 1] = table[2 * j + 1];
        i = j;
      }
    }
    table[2 * i] = 0;
  }

  /** Forgets the entry in `slot` (it stays in the ring, dead, until the ring's head passes it). */
  private kill(slot: number): void {
    if (this.lenOf[slot] < 0) return;
    this.remove(this.hashOf[slot], this.ticketOf[slot]);
    this.lenOf[slot] = -1;
    this.pendingOf[slot] = null;
    this.liveCount--;
  }

  private evictHead(): void {
    this.kill(this.head & this.mask);
    this.head++;
    // The id text of entries that left is free: up to where the oldest held entry's starts.
    this.unitHead = this.head < this.next ? this.startOf[this.head & this.mask] : this.unitNext;
  }

  private expire(now: number): void {
    const oldest = now - this.options.windowMs;
    while (this.head < this.next) {
      const slot = this.head & this.mask;
      if (this.lenOf[slot] >= 0 && this.liveCount <= this.options.maxIds && this.at[slot] > oldest) break;
      this.evictHead();
    }
  }

  /** Doubles the ring, keeping every entry's ticket (the table holds tickets, so it stays). */
  private grow(): void {
    const cap = this.cap === 0 ? 1024 : this.cap * 2;
    const mask = cap - 1;
    const at = new Float64Array(cap);
    const reached = new Float64Array(cap);
    const tickets = new Float64Array(cap);
    const starts = new Float64Array(cap);
    const lens = new Int32Array(cap).fill(-1);
    const hashes = new Int32Array(cap);
    const pending: (Promise<readonly number[]> | null)[] = new Array(cap).fill(null);
    const pendingIndex = new Int32Array(cap);
    for (let t = this.head; t < this.next; t++) {
      const from = t & this.mask;
      const to = t & mask;
      at[to] = this.at[from];
      reached[to] = this.reachedOf[from];
      tickets[to] = t;
      starts[to] = this.startOf[from];
      lens[to] = this.lenOf[from];
      hashes[to] = this.hashOf[from];
      pending[to] = this.pendingOf[from];
      pendingIndex[to] = this.pendingIndex[from];
    }
    this.cap = cap;
    this.mask = mask;
    this.at = at;
    this.reachedOf = reached;
    this.ticketOf = tickets;
    this.startOf = starts;
    this.lenOf = lens;
    this.hashOf = hashes;
    this.pendingOf = pending;
    this.pendingIndex = pendingIndex;
  }

  /** Doubles the text ring until `more` units fit beside those in use, keeping absolute offsets. */
  private growUnits(more: number): void {
    let size = Math.max(4096, this.units.length);
    while (this.unitNext - this.unitHead + more > size) size *= 2;
    const units = new Uint16Array(size);
    const m = size - 1;
    for (let o = this.unitHead; o < this.unitNext; o++) units[o & m] = this.units[o & this.unitMask];
    this.units = units;
    this.unitMask = m;
  }

  /** Doubles the table (at least 2048 entries) and puts every entry of the old one back. */
  private growTable(): void {
    const old = this.table;
    const size = Math.max(2048, old.length);
    this.table = new Float64Array(2 * size);
    this.tableMask = size - 1;
    for (let i = 0; i < old.length; i += 2) if (old[i] !== 0) this.insert(old[i + 1], old[i] - 1);
  }
}

/**
 * Refuses (INVALID_ARGUMENT, naming it) an entry of a publish that is no event with a string id,
 * before any id is looked up or remembered: the window keeps ids as text it measures.
 */
export function checkEventIds(events: readonly Event[]): void {
  for (let i = 0; i < events.length; i++) {
    const e = events[i] as Event | null | undefined;
    if (typeof e !== 'object' || e === null || typeof e.id !== 'string') throw new AmbitError('INVALID_ARGUMENT', 'must be an event with a string id', `events[${i}]`);
  }
}

/** FNV-1a over an id's UTF-16 code units (the table's hash; the code units themselves decide). Exported for tests. */
export function hashId(id: string): number {
  let h = 0x811c9dc5;
  for (let k = 0; k < id.length; k++) h = Math.imul(h ^ id.charCodeAt(k), 0x01000193);
  return h | 0;
}
