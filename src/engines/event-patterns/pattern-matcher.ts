/**
 * Pattern subscriptions end to end (docs/semantics.md §9): the release order of E3 (a lateness
 * bound and a watermark), the matching of every element's filter by an ordinary engine (E5: the
 * reference, fast, rtree or GPU engine, so areas anchored to the owner follow its position), and a
 * sequencer (E7–E16: `CdpSequencer` by default, `ReferenceSequencer` for differential tests).
 *
 * Each element of a pattern is one subscription of one filter in the element engine, owned by the
 * pattern's owner. Events are validated whole, under the element engine's limits, before anything
 * changes (L4). A call's releases go to the element engine when the call is made (E5), and their
 * searches run in release order even when calls overlap or one of them fails.
 */
import { AmbitError, ValidationError, show } from '../../model/errors.js';
import {
  type NPatternSubscription,
  type PatternLimits,
  type PatternSubscription,
  checkTimeMs,
  patternElements,
  resolvePatternLimits,
  validatePatternSubscription,
} from '../../model/event-patterns.js';
import { type Limits, type NEvent, type NFilter, checkArray, checkId, checkLat, checkLon, checkObject, validateEvent } from '../../model/limits.js';
import type { Event, Filter, Subscription } from '../../model/types.js';
import type { Matcher } from '../matcher.js';
import { CdpSequencer } from './cdp.js';
import type { BatchRelease, BatchSequencer, PatternHits, PatternMatch, Sequencer, SequencerSnapshot } from './sequencer.js';

export interface PatternMatcherOptions {
  /** Matches the elements' filters; owned by the pattern matcher from now on (closed by `close`). */
  elements: Matcher;
  /**
   * Default: a `CdpSequencer` with `maxRetainedPerElement`. A `BatchSequencer` (the GPU's) gets each
   * call's releases as one batch, and is closed by `close`.
   */
  sequencer?: Sequencer | BatchSequencer;
  maxRetainedPerElement?: number;
  /** E3: how long an event may wait for earlier ones, in ms (default 0). */
  latenessMs?: number;
  patternLimits?: Partial<PatternLimits>;
}

export interface TimedInput {
  event: Event;
  timeMs: number;
}

/** One match as the owner receives it (E20). */
export interface PatternNotification {
  subscription: string;
  owner: string;
  steps: { step: string; event: NEvent; timeMs: number }[];
  /** By aggregate name; absent where the value does not exist (E12). */
  aggregates: Record<string, number>;
}

export interface PatternMatcherStats {
  subscriptions: number;
  elements: number;
  /** Events that arrived after a later-timed event was released (E3). */
  late: number;
  released: number;
  /** Events waiting for the watermark. */
  buffered: number;
  retained: number;
  evicted: number;
  consumed: number;
  sequencer: string;
  elementEngine: string;
}

interface Installed {
  readonly sub: NPatternSubscription;
  readonly slot: number;
  readonly elementIds: readonly string[];
}

/** PatternMatcher's state for a restart (plain data; the events as validated). */
export interface PatternMatcherSnapshot {
  readonly version: 1;
  readonly subscriptions: readonly { readonly slot: number; readonly subscription: NPatternSubscription }[];
  readonly nextSlot: number;
  readonly buffer: readonly { readonly event: NEvent; readonly timeMs: number; readonly arrival: number }[];
  readonly arrivals: number;
  readonly maxSeen: number | null;
  readonly clock: number | null;
  readonly frontier: number | null;
  readonly late: number;
  readonly released: number;
  readonly sequencer: SequencerSnapshot;
}

type ElementJob =
  | { kind: 'op'; run: () => void }
  | { kind: 'match'; events: Event[]; resolve: (ids: string[][]) => void; reject: (err: unknown) => void };

interface Pending {
  readonly event: NEvent;
  readonly timeMs: number;
  readonly arrival: number;
}

const NO_HITS: PatternHits[] = [];

function filterInput(f: NFilter): Filter {
  const out: Filter = {
    constraints: f.constraints.map((c) => (c.op === 'exists' ? { name: c.name, op: c.op } : { name: c.name, op: c.op, value: c.value as never })),
  };
  if (f.area !== null) out.area = f.area.center === null ? { radiusM: f.area.radiusM } : { radiusM: f.area.radiusM, center: { ...f.area.center } };
  if (f.tags.length > 0) out.tags = [...f.tags];
  return out;
}

export class PatternMatcher {
  readonly limits: Limits;
  readonly patternLimits: PatternLimits;
  readonly latenessMs: number;
  private readonly elements: Matcher;
  private readonly sequencer: Sequencer | BatchSequencer;
  private readonly subs = new Map<string, Installed>();
  /** Element subscription id → [slot, element index]. */
  private readonly elementOf = new Map<string, readonly [number, number]>();
  private readonly bySlot = new Map<number, Installed>();
  private nextSlot = 0;
  private buffer: Pending[] = [];
  private bufferHead = 0;
  private arrivals = 0;
  private maxSeen = -Infinity;
  private clock = -Infinity;
  private frontier = -Infinity;
  private late = 0;
  private released = 0;
  private tail: Promise<unknown> = Promise.resolve();
  /** Releases whose searches have not finished. */
  private searching = 0;
  /** Element subscriptions installed (stats()). */
  private elementCount = 0;
  /** Element-engine work in call order: mutations, and matches that hold back what follows them. */
  private jobs: ElementJob[] = [];
  private jobsHead = 0;
  private matching = false;
  /** A deferred change the element engine threw on: every later publish fails with it. */
  private broken: Error | null = null;
  /** Devices with a known position (L8). */
  private readonly located = new Set<string>();
  private closed = false;

  constructor(options: PatternMatcherOptions) {
    this.elements = options.elements;
    // The element engine's own limits: what is accepted here, it accepts (L4).
    this.limits = options.elements.limits;
    this.patternLimits = resolvePatternLimits(options.patternLimits);
    const l = options.latenessMs ?? 0;
    if (typeof l !== 'number' || !Number.isInteger(l) || l < 0 || l > this.patternLimits.maxWindowMs) {
      throw new ValidationError('latenessMs', `must be an integer number of milliseconds within [0, ${this.patternLimits.maxWindowMs}], got ${show(l)}`);
    }
    this.latenessMs = l;
    this.sequencer = options.sequencer ?? new CdpSequencer({ maxRetainedPerElement: options.maxRetainedPerElement });
  }

  add(sub: PatternSubscription): void {
    const n = validatePatternSubscription(sub, this.limits, this.patternLimits);
    if (this.subs.has(n.id)) throw new AmbitError('ALREADY_EXISTS', `pattern subscription ${show(n.id)} exists`, 'subscription.id');
    this.install(n);
  }

  /** E17: a remove and an add as one step; the new version starts with no history. */
  replace(sub: PatternSubscription): void {
    const n = validatePatternSubscription(sub, this.limits, this.patternLimits);
    if (!this.subs.has(n.id)) throw new AmbitError('NOT_FOUND', `no pattern subscription ${show(n.id)}`, 'subscription.id');
    this.uninstall(n.id);
    this.install(n);
  }

  remove(id: string): boolean {
    if (typeof id !== 'string') throw new ValidationError('id', `must be a string, got ${show(id)}`);
    if (!this.subs.has(id)) return false;
    this.uninstall(id);
    return true;
  }

  has(id: string): boolean {
    return this.subs.has(id);
  }

  get(id: string): NPatternSubscription | undefined {
    return this.subs.get(id)?.sub;
  }

  /** Checked now; applied to the element engine after the releases before it are matched (E5). */
  updatePosition(device: string, lat: number, lon: number): void {
    const d = checkId('device', device, this.limits);
    const la = checkLat('lat', lat);
    const lo = checkLon('lon', lon);
    this.located.add(d);
    this.elementOp(() => this.elements.updatePosition(d, la, lo));
  }

  /** Whether the device had a position (L8); forgotten after the releases before it are matched. */
  removeDevice(device: string): boolean {
    const d = checkId('device', device, this.limits);
    const known = this.located.delete(d);
    if (known) this.elementOp(() => this.elements.removeDevice(d));
    return known;
  }

  /**
   * Hands events with their event times to the patterns (E2, E3) and resolves with the matches
   * of the terminators this call released. The whole list is validated first (fields
   * `events[k].event…`, `events[k].timeMs`); a bad entry changes nothing.
   */
  publish(events: readonly TimedInput[]): Promise<PatternNotification[]> {
    this.open();
    const list = checkArray('events', events, 0, Number.MAX_SAFE_INTEGER, 'events');
    const checked: { event: NEvent; timeMs: number }[] = new Array(list.length);
    for (let k = 0; k < list.length; k++) {
      const o = checkObject(`events[${k}]`, list[k]);
      const event = validateEvent(o.event, this.limits, `events[${k}].event`);
      checked[k] = { event, timeMs: checkTimeMs(`events[${k}].timeMs`, o.timeMs) };
    }
    // No pattern and nothing waiting, without a lateness bound: each event is released as it
    // comes and nothing records it (a pattern added later sees only later releases, E17), so only
    // the release order's clock moves. The service's publishes take this path until a device
    // subscribes to a pattern.
    if (this.subs.size === 0 && this.latenessMs === 0 && this.bufferHead === this.buffer.length) {
      for (const c of checked) {
        if (c.timeMs < this.frontier) {
          this.late++;
          continue;
        }
        this.arrivals++;
        this.frontier = c.timeMs;
        if (c.timeMs > this.maxSeen) this.maxSeen = c.timeMs;
        this.released++;
      }
      return this.tail.then(() => []);
    }
    // One event at a time, as if each came alone: an event released by an earlier one of the
    // same call makes a later, earlier-timed one late (E3).
    const due: Pending[] = [];
    for (const c of checked) {
      if (c.timeMs < this.frontier) {
        this.late++;
        continue;
      }
      this.insert({ event: c.event, timeMs: c.timeMs, arrival: this.arrivals++ });
      if (c.timeMs > this.maxSeen) this.maxSeen = c.timeMs;
      this.takeDue(due);
    }
    return this.releaseAll(due);
  }

  /** Moves the watermark to `timeMs − latenessMs` if that is later (E3): a clock for quiet periods. */
  advanceTo(timeMs: number): Promise<PatternNotification[]> {
    this.open();
    const t = checkTimeMs('timeMs', timeMs);
    if (t > this.clock) this.clock = t;
    const due: Pending[] = [];
    this.takeDue(due);
    return this.releaseAll(due);
  }

  stats(): PatternMatcherStats {
    const s = this.sequencer.stats();
    return {
      subscriptions: this.subs.size,
      elements: this.elementCount,
      late: this.late,
      released: this.released,
      buffered: this.buffer.length - this.bufferHead,
      retained: s.retained,
      evicted: s.evicted,
      consumed: s.consumed,
      sequencer: this.sequencer.name,
      elementEngine: this.elements.name,
    };
  }

  /**
   * The state to resume from after a restart, once the searches of earlier calls are done: the
   * subscriptions with their slots, the release order's buffer, clock and counters, and the
   * sequencer's snapshot. Positions are not in it: they are the element engine's, which the
   * caller restores as it does for any engine.
   */
  async snapshot(): Promise<PatternMatcherSnapshot> {
    this.open();
    // Calls made while earlier searches finish add searches of their own: wait until none is left,
    // then capture in the same turn.
    while (!this.idle) await this.tail;
    return this.capture();
  }

  /** No search or element-engine job is waiting: the state is that of every call made so far. */
  get idle(): boolean {
    return this.searching === 0 && !this.matching && this.jobsHead === this.jobs.length;
  }

  /**
   * The snapshot of an idle matcher, now (a caller that knows it is idle, e.g. between the batches
   * of a matcher loop, so the state is that of an exact point of its input).
   */
  capture(): PatternMatcherSnapshot {
    this.open();
    if (!this.idle) throw new Error('pattern matcher: capture() while searches are running');
    return {
      version: 1,
      subscriptions: [...this.subs.values()].map((i) => ({ slot: i.slot, subscription: i.sub })),
      nextSlot: this.nextSlot,
      buffer: this.buffer.slice(this.bufferHead).map((b) => ({ event: b.event, timeMs: b.timeMs, arrival: b.arrival })),
      arrivals: this.arrivals,
      maxSeen: Number.isFinite(this.maxSeen) ? this.maxSeen : null,
      clock: Number.isFinite(this.clock) ? this.clock : null,
      frontier: Number.isFinite(this.frontier) ? this.frontier : null,
      late: this.late,
      released: this.released,
      sequencer: this.sequencer.snapshot(),
    };
  }

  /**
   * Takes over a snapshot on a pattern matcher that holds nothing and has released nothing: its
   * subscriptions are installed (their elements in the element engine) at their slots, and the
   * next calls answer as the snapshotted matcher's would have, given the same positions.
   */
  restore(snap: PatternMatcherSnapshot): void {
    this.open();
    if (snap.version !== 1) throw new Error(`pattern matcher snapshot: version ${String(snap.version)} is not 1`);
    if (this.subs.size !== 0 || this.arrivals !== 0 || this.nextSlot !== 0) throw new Error('restore: the pattern matcher is not fresh');
    const patterns = new Map(snap.subscriptions.map((x) => [x.slot, x.subscription.pattern]));
    this.sequencer.restore(snap.sequencer, patterns);
    for (const x of snap.subscriptions) this.install(x.subscription, x.slot, false);
    this.nextSlot = snap.nextSlot;
    this.buffer = snap.buffer.map((b) => ({ event: b.event, timeMs: b.timeMs, arrival: b.arrival }));
    this.bufferHead = 0;
    this.arrivals = snap.arrivals;
    this.maxSeen = snap.maxSeen ?? -Infinity;
    this.clock = snap.clock ?? -Infinity;
    this.frontier = snap.frontier ?? -Infinity;
    this.late = snap.late;
    this.released = snap.released;
  }

  /** Waits for the searches of earlier calls, then closes the element engine. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.tail.catch(() => undefined);
    await this.elements.close();
    if ('releaseBatch' in this.sequencer) await this.sequencer.close();
  }

  private open(): void {
    if (this.closed) throw new AmbitError('FAILED_PRECONDITION', 'the pattern matcher is closed');
    if (this.broken !== null) throw new AmbitError('UNAVAILABLE', `the element engine failed a deferred change: ${this.broken.message}`);
  }

  /** `withSequencer` false: the sequencer gets the pattern from a restored snapshot instead. */
  private install(n: NPatternSubscription, slot = this.nextSlot++, withSequencer = true): void {
    const filters = patternElements(n.pattern);
    const ids = filters.map((_, k) => `${slot}.${k}`);
    const subs: Subscription[] = filters.map((f, k) => ({ id: ids[k], owner: n.owner, filters: [filterInput(f)] }));
    this.elementOp(() => this.elements.addMany(subs));
    if (withSequencer) this.sequencer.addPattern(slot, n.pattern);
    const inst: Installed = { sub: n, slot, elementIds: ids };
    this.elementCount += ids.length;
    this.subs.set(n.id, inst);
    this.bySlot.set(slot, inst);
    ids.forEach((id, k) => this.elementOf.set(id, [slot, k]));
  }

  private uninstall(id: string): void {
    const inst = this.subs.get(id)!;
    const gone = inst.elementIds;
    this.elementOp(() => {
      for (const e of gone) this.elements.remove(e);
    });
    for (const e of gone) this.elementOf.delete(e);
    this.elementCount -= gone.length;
    this.sequencer.removePattern(inst.slot);
    this.subs.delete(id);
    this.bySlot.delete(inst.slot);
  }

  /**
   * The element engine sees its mutations and matches in the order they were made here, even an
   * engine that runs a match later than asked (the GPU engine's queue): while a match is in
   * flight, what comes after it waits (E5, E17). Input is checked before it is queued.
   */
  private elementOp(run: () => void): void {
    // Nothing ahead of it: now, and a failure is the caller's (before any bookkeeping here).
    if (!this.matching && this.jobsHead === this.jobs.length) {
      run();
      return;
    }
    this.jobs.push({ kind: 'op', run });
  }

  private elementMatch(events: Event[]): Promise<string[][]> {
    return new Promise((resolve, reject) => {
      this.jobs.push({ kind: 'match', events, resolve, reject });
      this.pump();
    });
  }

  private pump(): void {
    while (!this.matching && this.jobsHead < this.jobs.length) {
      const j = this.jobs[this.jobsHead++];
      if (j.kind === 'op') {
        try {
          j.run();
        } catch (err) {
          // Checked input the engine refused after all: its state and ours differ from now on.
          this.broken ??= err instanceof Error ? err : new Error(String(err));
        }
        continue;
      }
      this.matching = true;
      let p: Promise<string[][]>;
      try {
        p = this.elements.matchBatch(j.events);
      } catch (err) {
        p = Promise.reject(err);
      }
      p.then(j.resolve, j.reject).finally(() => {
        this.matching = false;
        this.pump();
      });
    }
    if (this.jobsHead === this.jobs.length) {
      this.jobs = [];
      this.jobsHead = 0;
    }
  }

  /** Keeps the buffer in (time, arrival) order; arrivals only grow, so after every equal time. */
  private insert(p: Pending): void {
    const b = this.buffer;
    let lo = this.bufferHead;
    let hi = b.length;
    if (hi === lo || b[hi - 1].timeMs <= p.timeMs) {
      b.push(p);
      return;
    }
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (b[mid].timeMs <= p.timeMs) lo = mid + 1;
      else hi = mid;
    }
    b.splice(lo, 0, p);
  }

  /** Moves the events the watermark has passed from the buffer to `due`, in release order. */
  private takeDue(due: Pending[]): void {
    const watermark = Math.max(this.maxSeen, this.clock) - this.latenessMs;
    while (this.bufferHead < this.buffer.length && this.buffer[this.bufferHead].timeMs <= watermark) {
      const p = this.buffer[this.bufferHead++];
      this.frontier = p.timeMs;
      due.push(p);
    }
    if (this.bufferHead > 1024 && this.bufferHead * 2 > this.buffer.length) {
      this.buffer = this.buffer.slice(this.bufferHead);
      this.bufferHead = 0;
    }
  }

  private releaseAll(due: Pending[]): Promise<PatternNotification[]> {
    if (due.length === 0) return this.tail.then(() => []);
    this.released += due.length;
    // E5: matched now, against the positions of this moment; searched in release order.
    const matched = this.elementMatch(due.map((d) => eventInput(d.event)));
    matched.catch(() => undefined); // its failure is this call's; the chain must not skip ahead
    // Patterns installed from now on count only later releases (E17).
    const upto = this.nextSlot;
    const run = this.tail.then(() => matched).then((ids) => this.search(due, ids, upto));
    this.searching++;
    this.tail = run.then(
      () => void this.searching--,
      () => void this.searching--,
    );
    return run;
  }

  private search(due: readonly Pending[], ids: readonly string[][], upto: number): PatternNotification[] | Promise<PatternNotification[]> {
    const seq = this.sequencer;
    // A batch sequencer gets the call's releases at once; a plain one each as it comes.
    const batch: BatchRelease[] | null = 'releaseBatch' in seq ? [] : null;
    const out: PatternNotification[] = [];
    for (let i = 0; i < due.length; i++) {
      const bySlot = new Map<number, number[]>();
      for (const id of ids[i]) {
        const e = this.elementOf.get(id);
        // Removed since the batch was matched, or installed after its release.
        if (e === undefined || e[0] >= upto) continue;
        let l = bySlot.get(e[0]);
        if (l === undefined) bySlot.set(e[0], (l = []));
        l.push(e[1]);
      }
      let hits: PatternHits[] = NO_HITS;
      if (bySlot.size > 0) {
        hits = [];
        for (const [slot, elements] of bySlot) hits.push({ slot, elements: elements.sort((a, b) => a - b) });
        // In slot order, not the element engine's (which is in no particular order): a restarted
        // matcher gives the same matches in the same order (a Redis matcher numbers them by it).
        hits.sort((a, b) => a.slot - b.slot);
      }
      if (batch !== null) batch.push({ event: due[i].event, timeMs: due[i].timeMs, hits });
      else for (const m of (seq as Sequencer).release(due[i].event, due[i].timeMs, hits)) out.push(this.notification(m));
    }
    if (batch === null) return out;
    return (seq as BatchSequencer).releaseBatch(batch).then((lists) => this.notifications(lists));
  }

  /** A batch sequencer's matches; a pattern removed while it searched gets nothing more. */
  private notifications(lists: readonly (readonly PatternMatch[])[]): PatternNotification[] {
    const out: PatternNotification[] = [];
    for (const list of lists) for (const m of list) if (this.bySlot.has(m.slot)) out.push(this.notification(m));
    return out;
  }

  private notification(m: PatternMatch): PatternNotification {
    const inst = this.bySlot.get(m.slot)!;
    const p = inst.sub.pattern;
    // No prototype: an aggregate may be called __proto__.
    const aggregates: Record<string, number> = Object.create(null);
    p.aggregates.forEach((a, g) => {
      const v = m.aggregates[g];
      if (v !== null) aggregates[a.name] = v;
    });
    return {
      subscription: inst.sub.id,
      owner: inst.sub.owner,
      steps: p.steps.map((s, i) => ({ step: s.name, event: m.events[i], timeMs: m.timesMs[i] })),
      aggregates,
    };
  }
}

/** A normalised event back in the shape engines take (they validate and copy it again). */
export function eventInput(e: NEvent): Event {
  // No prototype: an attribute named __proto__ is an ordinary name (C1).
  const attributes: Record<string, string | number | boolean> = Object.create(null);
  for (let i = 0; i < e.names.length; i++) attributes[e.names[i]] = e.values[i];
  const out: Event = { id: e.id, lat: e.lat, lon: e.lon, attributes };
  if (e.radiusM !== 0) out.radiusM = e.radiusM;
  if (e.tags.length > 0) out.tags = [...e.tags];
  return out;
}
