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

/** One remembered id: its reach, or the publish still matching it and its index there. */
export interface IdEntry {
  reached: number;
  pending: Promise<readonly number[]> | null;
  index: number;
  at: number;
}

/**
 * Event ids published lately, with their reach, in memory: forgotten after `windowMs` by the
 * injected clock, or sooner when more than `maxIds` are held (oldest first).
 */
export class EventIdWindow {
  /** Insertion order is time order: expiry looks at the oldest only. */
  private readonly ids = new Map<string, IdEntry>();

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
    const e = this.ids.get(id);
    if (e === undefined) return undefined;
    if (e.at <= this.now() - this.options.windowMs) return undefined;
    if (e.pending === null) return e.reached;
    const index = e.index;
    return e.pending.then((r) => r[index]);
  }

  /**
   * Remembers a fresh event's id before it is matched: `pending` resolves with the reach of the
   * publish's fresh events, of which this is number `index`. Settle or drop the entry after.
   */
  remember(id: string, pending: Promise<readonly number[]>, index: number): IdEntry {
    const now = this.now();
    const e: IdEntry = { reached: 0, pending, index, at: now };
    if (!this.enabled) return e;
    this.ids.delete(id); // an id past its window published again: it moves to the end
    this.ids.set(id, e);
    this.expire(now);
    return e;
  }

  /** The publish of a remembered id was matched: its reach. */
  settle(e: IdEntry, reached: number): void {
    e.reached = reached;
    e.pending = null;
  }

  /** The publish of a remembered id failed: it was not published, so it is forgotten. */
  drop(id: string, e: IdEntry): void {
    if (this.ids.get(id) === e) this.ids.delete(id);
  }

  get size(): number {
    return this.ids.size;
  }

  private expire(now: number): void {
    const oldest = now - this.options.windowMs;
    for (const [id, e] of this.ids) {
      if (this.ids.size <= this.options.maxIds && e.at > oldest) break;
      this.ids.delete(id);
    }
  }
}
