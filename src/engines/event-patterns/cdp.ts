/**
 * The fast pattern engine: Column-based Delayed Processing (the GTrex thesis §1.4.2, T-Rex's CPU
 * engine), with the columns indexed by parameter value. docs/semantics.md §9 is the definition;
 * `ReferenceSequencer` is the oracle it is tested against.
 *
 * Each pattern keeps one column per element (step, negation, aggregate): the events that matched
 * it, in release order (so also in time order). Nothing is computed when an event arrives; a
 * terminator starts a search backwards, step by step: the candidates for step i lie in one
 * contiguous run of step i's column, found by two binary searches (released before the previous
 * step's event, and no earlier than its time minus the window), scanned from the end for `last`,
 * from the start for `first`, all of it for `each`. Where a parameter ties the step to an earlier
 * one by equality, the column keeps a hash index from that attribute's value to its own ordered
 * run, so the search reads only the events with the right value (T-Rex scans the whole column and
 * tests each event). Negations and aggregates read their columns the same way.
 *
 * Retention (E15, E16) removes a prefix of a column: events too old for the element's reach, then
 * the earliest while more than the bound remain. An index run drops its stale prefix when next read.
 */
import type { NEvent } from '../../model/limits.js';
import { type CompareOp, type NElementParameter, type NEventPattern, elementReach, patternElements } from '../../model/event-patterns.js';
import type { Value } from '../../model/types.js';
import { attrOf, compareAttr } from './compare.js';
import {
  DEFAULT_MAX_RETAINED,
  type PatternHits,
  type PatternMatch,
  type Sequencer,
  type SequencerOptions,
  type SequencerSnapshot,
  type SequencerStats,
  SnapshotEvents,
  checkSnapshot,
} from './sequencer.js';

/** One released event as one pattern holds it; shared by that pattern's columns. */
interface Rec {
  readonly seq: number;
  readonly time: number;
  readonly ev: NEvent;
  /** The elements the event was recorded for (to keep their live counts on consumption). */
  readonly elements: readonly number[];
  consumed: boolean;
}

/** An ordered run of records with a moving start (a deque without pops at the end). */
class Run {
  recs: Rec[] = [];
  head = 0;

  get size(): number {
    return this.recs.length - this.head;
  }

  push(r: Rec): void {
    this.recs.push(r);
  }

  /** Drops the first n records, compacting now and then so the array does not grow without end. */
  drop(n: number): void {
    this.head += n;
    if (this.head > 1024 && this.head * 2 > this.recs.length) {
      this.recs = this.recs.slice(this.head);
      this.head = 0;
    }
  }

  /** First index in [head, end) whose record has time ≥ t. */
  lowerTime(t: number): number {
    let lo = this.head;
    let hi = this.recs.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.recs[mid].time < t) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  /** First index in [from, end) whose record has seq ≥ s. */
  lowerSeq(s: number, from = this.head): number {
    let lo = from;
    let hi = this.recs.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.recs[mid].seq < s) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }
}

/** Where an element's candidates are read: its whole column, or an index run keyed by `probe`. */
interface IndexPlan {
  /** The element's attribute the index is keyed by. */
  readonly attribute: string;
  /** The step whose event gives the key, and that event's attribute. */
  readonly step: number;
  readonly stepAttribute: string;
}

class Column {
  readonly run = new Run();
  /** Records from the run's head on that still count: for a step, the unconsumed ones (E14). */
  live = 0;
  readonly index: Map<Value, Run> | null;

  constructor(
    readonly plan: IndexPlan | null,
    /** A step's column: consumed records stop counting. Negations and aggregates keep them. */
    readonly isStep: boolean,
  ) {
    this.index = plan === null ? null : new Map();
  }

  counts(r: Rec): boolean {
    return !(this.isStep && r.consumed);
  }

  /** Files a record just pushed on the run under its key, when the column is indexed. */
  file(r: Rec): void {
    if (this.index === null) return;
    const key = attrOf(r.ev, this.plan!.attribute);
    if (key === undefined) return;
    let run = this.index.get(key);
    if (run === undefined) this.index.set(key, (run = new Run()));
    run.push(r);
  }

  /**
   * Takes a record the column is dropping out of its index run too, so runs hold no more than the
   * column (a key never searched again would otherwise keep every record filed under it). Drops
   * come in release order, so the record is at the head of its run unless a search pruned it.
   */
  unindex(r: Rec): void {
    if (this.index === null) return;
    const key = attrOf(r.ev, this.plan!.attribute);
    if (key === undefined) return;
    const run = this.index.get(key);
    if (run === undefined || run.recs[run.head] !== r) return;
    run.drop(1);
    if (run.size === 0) this.index.delete(key);
  }

  /** Seq of the first record still held; records below it are gone from every index run too. */
  firstSeq(next: number): number {
    return this.run.size > 0 ? this.run.recs[this.run.head].seq : next;
  }

  /** The run to search for a partial match: the index run for the key, pruned, or the column. */
  runFor(key: Value | undefined, nextSeq: number): Run | null {
    if (this.index === null) return this.run;
    if (key === undefined) return null;
    const r = this.index.get(key);
    if (r === undefined) return null;
    const first = this.firstSeq(nextSeq);
    let n = 0;
    while (r.head + n < r.recs.length && r.recs[r.head + n].seq < first) n++;
    if (n > 0) r.drop(n);
    if (r.size === 0) {
      this.index.delete(key);
      return null;
    }
    return r;
  }
}

interface Compiled {
  readonly pattern: NEventPattern;
  readonly nSteps: number;
  readonly reach: readonly number[];
  /** Per step i ≥ 1: the pattern's parameters decided at i. */
  readonly paramsAt: readonly (readonly { la: string; ls: number; op: CompareOp; ra: string; rs: number }[])[];
  /** Per step i: the negations decided at i (element indices). */
  readonly negsAt: readonly (readonly number[])[];
  readonly consuming: readonly number[];
}

interface PatternState {
  readonly c: Compiled;
  readonly columns: Column[];
}

function compile(p: NEventPattern): { c: Compiled; plans: (IndexPlan | null)[] } {
  const nSteps = p.steps.length;
  const paramsAt: { la: string; ls: number; op: CompareOp; ra: string; rs: number }[][] = p.steps.map(() => []);
  const plans: (IndexPlan | null)[] = [];
  for (const q of p.parameters) paramsAt[q.at].push({ la: q.left.attribute, ls: q.left.step, op: q.op, ra: q.right.attribute, rs: q.right.step });
  for (let i = 0; i < nSteps; i++) {
    // Index step i by the first equality that ties it to an earlier step (both sides known then).
    let plan: IndexPlan | null = null;
    if (i > 0) {
      for (const q of p.parameters) {
        if (q.at !== i || q.op !== 'eq') continue;
        const mine = q.left.step === i ? q.left : q.right;
        const other = q.left.step === i ? q.right : q.left;
        plan = { attribute: mine.attribute, step: other.step, stepAttribute: other.attribute };
        break;
      }
    }
    plans.push(plan);
  }
  const negsAt: number[][] = p.steps.map(() => []);
  const elementPlan = (params: NEventPattern['negations'][number]['parameters'], limit: number): IndexPlan | null => {
    for (const q of params) if (q.op === 'eq' && q.step <= limit) return { attribute: q.attribute, step: q.step, stepAttribute: q.stepAttribute };
    return null;
  };
  p.negations.forEach((n, j) => {
    negsAt[n.at].push(nSteps + j);
    plans.push(elementPlan(n.parameters, n.at));
  });
  for (const a of p.aggregates) plans.push(elementPlan(a.parameters, nSteps - 1));
  return { c: { pattern: p, nSteps, reach: elementReach(p), paramsAt, negsAt, consuming: p.consuming }, plans };
}

export class CdpSequencer implements Sequencer {
  readonly name = 'cdp';
  private readonly maxRetained: number;
  private readonly patterns = new Map<number, PatternState>();
  private seq = 0;
  private lastTimeMs: number | null = null;
  private evicted = 0;
  private consumed = 0;
  /** The sum of every column's `live` (stats() runs on every metrics scrape: no walk over patterns). */
  private retained = 0;

  constructor(options: SequencerOptions = {}) {
    const m = options.maxRetainedPerElement ?? DEFAULT_MAX_RETAINED;
    if (!Number.isInteger(m) || m < 1) throw new RangeError(`maxRetainedPerElement must be a positive integer, got ${m}`);
    this.maxRetained = m;
  }

  addPattern(slot: number, pattern: NEventPattern): void {
    if (this.patterns.has(slot)) throw new Error(`slot ${slot} is in use`);
    const { c, plans } = compile(pattern);
    this.patterns.set(slot, { c, columns: plans.map((pl, k) => new Column(pl, k < c.nSteps)) });
  }

  removePattern(slot: number): void {
    const st = this.patterns.get(slot);
    if (st === undefined) return;
    for (const col of st.columns) this.retained -= col.live;
    this.patterns.delete(slot);
  }

  stats(): SequencerStats {
    return { retained: this.retained, evicted: this.evicted, consumed: this.consumed };
  }

  snapshot(): SequencerSnapshot {
    const events = new SnapshotEvents();
    const patterns = [...this.patterns].map(([slot, st]) => ({
      slot,
      elements: st.columns.map((col) => {
        const out: { seq: number; timeMs: number; event: number }[] = [];
        const run = col.run;
        for (let j = run.head; j < run.recs.length; j++) {
          const r = run.recs[j];
          if (col.counts(r)) out.push({ seq: r.seq, timeMs: r.time, event: events.index(r.ev) });
        }
        return out;
      }),
    }));
    return { version: 1, releases: this.seq, lastTimeMs: this.lastTimeMs, evicted: this.evicted, consumed: this.consumed, events: events.list, patterns };
  }

  restore(snap: SequencerSnapshot, patterns: ReadonlyMap<number, NEventPattern>): void {
    if (this.seq !== 0 || this.patterns.size !== 0) throw new Error('restore: the sequencer is not fresh');
    checkSnapshot(snap, patterns, (p) => patternElements(p).length);
    for (const p of snap.patterns) {
      this.addPattern(p.slot, patterns.get(p.slot)!);
      const st = this.patterns.get(p.slot)!;
      // One record per event and pattern, shared by the pattern's columns (as at release).
      const recs = new Map<number, { seq: number; time: number; ev: NEvent; elements: number[]; consumed: boolean }>();
      p.elements.forEach((list, k) => {
        for (const r of list) {
          let rec = recs.get(r.seq);
          if (rec === undefined) recs.set(r.seq, (rec = { seq: r.seq, time: r.timeMs, ev: snap.events[r.event], elements: [], consumed: false }));
          rec.elements.push(k);
        }
      });
      p.elements.forEach((list, k) => {
        const col = st.columns[k];
        for (const r of list) {
          const rec = recs.get(r.seq)!;
          col.run.push(rec);
          col.live++;
          this.retained++;
          col.file(rec);
        }
      });
    }
    this.seq = snap.releases;
    this.lastTimeMs = snap.lastTimeMs;
    this.evicted = snap.evicted;
    this.consumed = snap.consumed;
  }

  /** A release that hits none of its patterns (as `release(event, timeMs, [])`, without the event). */
  skip(timeMs: number): void {
    this.seq++;
    this.lastTimeMs = timeMs;
  }

  release(event: NEvent, timeMs: number, hits: readonly PatternHits[]): PatternMatch[] {
    const seq = this.seq++;
    this.lastTimeMs = timeMs;
    const out: PatternMatch[] = [];
    for (const h of hits) {
      const st = this.patterns.get(h.slot);
      if (st === undefined) continue;
      const rec: Rec = { seq, time: timeMs, ev: event, elements: h.elements, consumed: false };
      if (h.elements.length > 0 && h.elements[0] === 0) {
        const found = new Search(st, rec, seq, h.slot).run();
        if (found.length > 0) {
          for (const m of found) out.push(m.match);
          this.consume(st, found, rec);
        }
      }
      // The terminator step keeps nothing (E15): its events are only ever terminators.
      // A consumed terminator fills no step later, but negations and aggregates still see it.
      for (const k of h.elements) if (k !== 0 && !(rec.consumed && k < st.c.nSteps)) this.record(st, k, rec);
    }
    return out;
  }

  /** E14. The terminator is in no column yet (E13): consuming it only keeps it from being recorded. */
  private consume(st: PatternState, found: readonly Found[], terminator: Rec): void {
    const cons = st.c.consuming;
    if (cons.length === 0) return;
    for (const f of found) {
      for (const i of cons) {
        const r = f.recs[i];
        if (r.consumed) continue;
        r.consumed = true;
        this.consumed++;
        if (r === terminator) continue;
        for (const k of r.elements) {
          if (k === 0 || k >= st.c.nSteps) continue; // only steps stop counting it
          const col = st.columns[k];
          // Still held by that column (its prefix is what retention removed)?
          if (col.run.size > 0 && r.seq >= col.run.recs[col.run.head].seq) {
            col.live--;
            this.retained--;
          }
        }
      }
    }
  }

  private record(st: PatternState, k: number, rec: Rec): void {
    const col = st.columns[k];
    const run = col.run;
    // E16: drop what the element can no longer reach.
    const oldest = rec.time - st.c.reach[k];
    let n = 0;
    while (run.head + n < run.recs.length && run.recs[run.head + n].time < oldest) {
      const r = run.recs[run.head + n];
      if (col.counts(r)) {
        col.live--;
        this.retained--;
      }
      col.unindex(r);
      n++;
    }
    run.drop(n);
    run.push(rec);
    col.live++;
    this.retained++;
    col.file(rec);
    // E15: keep at most maxRetained events that still count, evicting the earliest.
    if (col.live > this.maxRetained) {
      let m = 0;
      while (col.live > this.maxRetained) {
        const r = run.recs[run.head + m];
        if (col.counts(r)) {
          col.live--;
          this.retained--;
          this.evicted++;
        }
        col.unindex(r);
        m++;
      }
      run.drop(m);
    }
  }
}

interface Found {
  readonly recs: readonly Rec[];
  readonly match: PatternMatch;
}

/** One terminator's search over one pattern (E7–E12). */
class Search {
  private readonly chosen: Rec[];
  private readonly found: Found[] = [];

  constructor(
    private readonly st: PatternState,
    terminator: Rec,
    private readonly nextSeq: number,
    private readonly slot: number,
  ) {
    this.chosen = new Array(st.c.nSteps);
    this.chosen[0] = terminator;
  }

  run(): Found[] {
    // Negations decided at the terminator itself (before it, with no later step's parameter).
    for (const k of this.st.c.negsAt[0]) if (this.violated(k)) return this.found;
    this.step(1);
    return this.found;
  }

  private key(col: Column): Value | undefined {
    const pl = col.plan;
    return pl === null ? undefined : attrOf(this.chosen[pl.step].ev, pl.stepAttribute);
  }

  private step(i: number): void {
    const c = this.st.c;
    if (i === c.nSteps) {
      this.complete();
      return;
    }
    const col = this.st.columns[i];
    const run = col.runFor(this.key(col), this.nextSeq);
    if (run === null) return;
    const ref = this.chosen[i - 1];
    const s = c.pattern.steps[i];
    // runFor's run holds nothing the column dropped: the window's start is the only lower bound.
    const lo = run.lowerTime(ref.time - s.withinMs);
    const hi = run.lowerSeq(ref.seq, lo);
    const recs = run.recs;
    if (s.selection === 'last') {
      for (let j = hi - 1; j >= lo; j--) {
        if (this.valid(i, recs[j])) {
          this.chosen[i] = recs[j];
          this.step(i + 1);
          return;
        }
      }
    } else if (s.selection === 'first') {
      for (let j = lo; j < hi; j++) {
        if (this.valid(i, recs[j])) {
          this.chosen[i] = recs[j];
          this.step(i + 1);
          return;
        }
      }
    } else {
      for (let j = lo; j < hi; j++) {
        if (this.valid(i, recs[j])) {
          this.chosen[i] = recs[j];
          this.step(i + 1);
        }
      }
    }
  }

  private valid(i: number, r: Rec): boolean {
    if (r.consumed) return false;
    const ch = this.chosen;
    for (const q of this.st.c.paramsAt[i]) {
      const l = q.ls === i ? r.ev : ch[q.ls].ev;
      const rr = q.rs === i ? r.ev : ch[q.rs].ev;
      if (!compareAttr(q.op, attrOf(l, q.la), attrOf(rr, q.ra))) return false;
    }
    const negs = this.st.c.negsAt[i];
    if (negs.length > 0) {
      ch[i] = r;
      for (const k of negs) if (this.violated(k)) return false;
    }
    return true;
  }

  /** E10: whether some retained event of negation element k lies in its interval and meets its parameters. */
  private violated(k: number): boolean {
    const c = this.st.c;
    const n = c.pattern.negations[k - c.nSteps];
    const col = this.st.columns[k];
    const run = col.runFor(this.key(col), this.nextSeq);
    if (run === null) return false;
    const ch = this.chosen;
    let lo: number;
    let hi: number;
    if (n.between !== null) {
      lo = run.lowerSeq(ch[n.between[1]].seq + 1);
      hi = run.lowerSeq(ch[n.between[0]].seq, lo);
    } else {
      const s = ch[n.before as number];
      lo = run.lowerTime(s.time - n.withinMs);
      hi = run.lowerSeq(s.seq, lo);
    }
    const recs = run.recs;
    for (let j = lo; j < hi; j++) if (this.holds(n.parameters, recs[j])) return true;
    return false;
  }

  /** E11: whether a negated or aggregated event meets the element's parameters against the chosen steps. */
  private holds(params: readonly NElementParameter[], x: Rec): boolean {
    const ch = this.chosen;
    for (const q of params) if (!compareAttr(q.op, attrOf(x.ev, q.attribute), attrOf(ch[q.step].ev, q.stepAttribute))) return false;
    return true;
  }

  private complete(): void {
    const c = this.st.c;
    const aggs = c.pattern.aggregates;
    const values: (number | null)[] = new Array(aggs.length);
    for (let g = 0; g < aggs.length; g++) {
      const v = this.aggregate(g);
      const w = aggs[g].where;
      if (w !== null && (v === null || !compareAttr(w.op, v, w.value))) return;
      values[g] = v;
    }
    const recs = this.chosen.slice();
    this.found.push({
      recs,
      match: { slot: this.slot, events: recs.map((r) => r.ev), timesMs: recs.map((r) => r.time), aggregates: values },
    });
  }

  /** E12, in release order from the earliest. */
  private aggregate(g: number): number | null {
    const c = this.st.c;
    const a = c.pattern.aggregates[g];
    const k = c.nSteps + c.pattern.negations.length + g;
    const col = this.st.columns[k];
    const run = col.runFor(this.key(col), this.nextSeq);
    let count = 0;
    let sum = 0;
    let min = Infinity;
    let max = -Infinity;
    if (run !== null) {
      const s = this.chosen[a.before];
      const lo = run.lowerTime(s.time - a.withinMs);
      const hi = run.lowerSeq(s.seq, lo);
      const recs = run.recs;
      for (let j = lo; j < hi; j++) {
        const x = recs[j];
        if (!this.holds(a.parameters, x)) continue;
        if (a.attribute === null) {
          count++;
          continue;
        }
        const v = attrOf(x.ev, a.attribute);
        if (typeof v !== 'number') continue;
        count++;
        sum += v;
        if (v < min) min = v;
        if (v > max) max = v;
      }
    }
    switch (a.fn) {
      case 'count': return count;
      case 'sum': return sum;
      case 'min': return count === 0 ? null : min + 0; // -0 + 0 is 0 (E12)
      case 'max': return count === 0 ? null : max + 0;
      case 'avg': return count === 0 ? null : sum / count;
    }
  }
}
