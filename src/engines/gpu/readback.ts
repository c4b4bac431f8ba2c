/**
 * The end of a batch: mapping its staging buffer, checking what the kernels wrote against the
 * capacities the batch ran with, and turning (event, subscription) pairs into ids, deciding each
 * band pair (a filter within float32's uncertainty of its boundary) with the reference's float64
 * distance on the positions the batch was submitted with, so the answer is exact. Nothing
 * overflows silently: an event whose candidates exceeded their capacity, or a whole batch whose
 * pairs exceeded the output buffer, comes back as null, for the CPU engine to answer, and the
 * capacity grows for later batches.
 */
import { haversineM } from '../../model/geo.js';
import type { NEvent } from '../../model/limits.js';
import type { GpuBuffers, Slot } from './buffers.js';
import type { GpuContext } from './device.js';
import { BAND_PAIR, type GpuLayout } from './layout.js';
import type { StageTimes } from './options.js';
import { type BatchPlan, STAGE_BYTES } from './record.js';
import type { Listed } from '../matcher.js';
import { PackedEvents } from './packed.js';

/** A batch's events: checked events, or a packed batch (packed.ts). */
export type BatchEvents = readonly NEvent[] | PackedEvents;

export function batchSize(events: BatchEvents): number {
  return events instanceof PackedEvents ? events.count : events.length;
}

/** `n` nulls: a batch none of whose events the GPU answered. */
export function nulls(n: number): null[] {
  return new Array<null>(n).fill(null);
}

/** Most (event, subscription) pairs an output buffer is sized for ahead of a batch (8 MiB; more only after an overflow). */
const MAX_OUT_PAIRS = 1024 * 1024;

/** Capacities and the recent figures that size them ahead of each batch. */
export class Capacity {
  /** Candidates per event the next batch runs with (grows on overflow). */
  candCap: number;
  /** Most events in one batch so far: per-event scratch is sized to it, not to maxBatch. */
  widest = 1;
  /** Moving average of pairs per batch: how many the first readback trip brings. */
  recentPairs = 64;
  /** Moving maximum of (event, subscription) pairs per event: sizes the output ahead of a batch. */
  pairsPerEvent = 0;
  /** Moving maximum of candidates per event: sizes Cont's grid-stride dispatch. */
  recentCand = 0;

  constructor(initialCandidates: number) {
    this.candCap = initialCandidates;
  }

  /**
   * Output pairs to have room for: twice what recent events had (an overflow sends the whole
   * batch to the CPU), that headroom within a bound, but never less than they had (a batch run
   * again after its pairs overflowed must find the room they took); a buffer four times too
   * large shrinks back.
   */
  outputRoom(events: number, initialOutputs: number): number {
    const had = Math.ceil(events * this.pairsPerEvent);
    return Math.max(initialOutputs, had, Math.min(MAX_OUT_PAIRS, 2 * had));
  }

  /**
   * Cont's grid strides over the candidates, so any group count is correct; size it to recent
   * candidate counts (a lone sparse event needs one group, not contGroups).
   */
  contGroups(most: number, wg: number): number {
    return Math.max(1, Math.min(most, Math.ceil(this.recentCand / wg)));
  }

  /** Pairs the first readback trip brings: as many as recent batches needed (more take a second trip). */
  prefixPairs(outCap: number): number {
    return Math.min(outCap, Math.max(Math.min(64, outCap), 2 * this.recentPairs));
  }
}

/** What the kernels wrote, as mapped: counters per event, the total of pairs, the first pairs. */
export interface Readout {
  counts: Uint32Array;
  total: number;
  /** The first `got` pairs, (event, subscription) words; a band pair's second word is BAND_PAIR | filter. */
  pairs: Uint32Array;
  got: number;
}

export class Readback {
  lastStages: StageTimes | null = null;
  /** GPU errors caught around batches (each sent its batch to the CPU). */
  errors = 0;
  lastError = '';
  /** Band pairs decided on the host, and how many of them matched (stats). */
  bandPairs = 0;
  bandMatched = 0;
  /** Per subscription index: the stamp of the last event it was listed for (collect). */
  private seen = new Uint32Array(1024);
  private stamp = 0;
  /** collect's counting sort: each event's first pair, a cursor per event, the pairs' subscriptions grouped by event. */
  private start = new Uint32Array(1025);
  private at = new Uint32Array(1024);
  private flat = new Uint32Array(1024);

  constructor(
    private readonly ctx: GpuContext,
    private readonly layout: GpuLayout,
    private readonly buffers: GpuBuffers,
    private readonly capacity: Capacity,
    private readonly opts: { maxBatch: number; initialOutputs: number },
  ) {}

  /**
   * Waits for the slot's staging buffer and the batch's error scopes, then copies out what the
   * kernels wrote. Null when the device refused the batch (the error is counted).
   */
  async read(s: Slot, plan: BatchPlan, scopes: Promise<GPUError | null>[]): Promise<Readout | null> {
    const [, validation, oom] = await Promise.all([s.staging.mapAsync(GPUMapMode.READ, 0, plan.want), ...scopes]);
    const fault = validation ?? oom;
    if (fault !== null) {
      s.staging.unmap();
      // A buffer the device refused (out of memory) must not stay in the slot.
      s.outCap = 0;
      this.buffers.resizeOut(s, this.opts.initialOutputs);
      this.errors++;
      this.lastError = fault.message;
      return null;
    }
    const E = plan.events;
    const mapped = s.staging.getMappedRange(0, plan.want);
    const counts = new Uint32Array(mapped, 0, E + 1).slice();
    const total = counts[E];
    const got = Math.min(total, plan.prefixPairs, s.outCap);
    const pairs = new Uint32Array(mapped, plan.pairsAt, 2 * got).slice();
    if (plan.timestamps) {
      const at = plan.pairsAt + 8 * plan.prefixPairs;
      const t = new BigUint64Array(mapped.slice(at, at + STAGE_BYTES));
      const ms = (i: number) => Number(t[2 * i + 1] - t[2 * i]) / 1e6;
      this.lastStages = { loc: ms(0), cont: ms(1), zip: ms(2) };
    }
    s.staging.unmap();
    return { counts, total, pairs, got };
  }

  /**
   * Per event, its subscription ids, or null where the CPU engine must answer (its candidates
   * exceeded `candCap`, the capacity the batch ran with). Null for the whole batch when the pairs
   * overflowed the output buffer: which events lost pairs is unknown. `overflow`: how many events
   * the CPU must answer for either reason. `serial`: the batch's, for the positions it was
   * submitted with.
   */
  async reconcile(events: BatchEvents, tags: readonly boolean[], r: Readout, s: Slot, candCap: number, serial: number): Promise<{ results: (Listed[] | null)[] | null; overflow: number }> {
    const E = batchSize(events);
    const { counts, total } = r;
    const cap = this.capacity;
    cap.recentPairs = Math.max(32, Math.round(0.8 * cap.recentPairs + 0.2 * total));
    cap.pairsPerEvent = Math.max(total / E, 0.8 * cap.pairsPerEvent);
    if (total > s.outCap) {
      this.buffers.growOut(s, total);
      return { results: null, overflow: E };
    }
    const all = await this.allPairs(r, s);
    const results: (Listed[] | null)[] = new Array(E);
    for (let e = 0; e < E; e++) results[e] = [];
    let overflow = 0;
    let maxCand = 0;
    let most = 0;
    for (let e = 0; e < E; e++) {
      if (counts[e] > most) most = counts[e];
      if (counts[e] > candCap) {
        results[e] = null;
        overflow++;
        if (counts[e] > maxCand) maxCand = counts[e];
      }
    }
    this.collect(all, total, results, events, tags, serial);
    cap.recentCand = Math.max(most, Math.round(0.9 * cap.recentCand));
    if (maxCand > 0) {
      // Up to what one event's list may take of a binding: a batch of more runs with less each (GpuBatches.reserveCandidates).
      const fit = Math.floor(this.ctx.limits.maxStorageBufferBindingSize / 4);
      while (cap.candCap < maxCand && cap.candCap * 2 <= fit) cap.candCap *= 2;
    }
    return { results, overflow };
  }

  /** The first trip's pairs, plus the rest read in a second trip when there were more. */
  private async allPairs(r: Readout, s: Slot): Promise<Uint32Array> {
    if (r.total <= r.got) return r.pairs;
    const rest = await this.ctx.readBuffer(s.out, 8 * r.got, 8 * (r.total - r.got));
    const all = new Uint32Array(2 * r.total);
    all.set(r.pairs);
    all.set(new Uint32Array(rest), 2 * r.got);
    return all;
  }

  /**
   * Appends each pair's subscription id to its event's result, once: a subscription with several
   * filters matching one event comes in one pair per filter. Pairs of different events interleave,
   * so they are grouped by event first (counting sort), then deduplicated with a stamp per event.
   * A band pair counts only if its filter passes the float64 test (`bandSub`).
   */
  private collect(pairs: Uint32Array, total: number, results: (Listed[] | null)[], events: BatchEvents, tags: readonly boolean[], serial: number): void {
    const subId = this.layout.subId;
    // A null id: the subscription was removed after the batch was submitted (its index is held
    // back from reuse until the batch is read, so an index never names another subscription); a
    // version replaced since is listed under its id (heldId); a live one by its tag, if it has one
    // and the event's caller asked for tags.
    if (total === 1) {
      const e = pairs[0];
      const r = results[e];
      const sub = pairs[1] >= BAND_PAIR ? this.bandSub(pairs[1] - BAND_PAIR, events, e, serial) : pairs[1];
      if (r === null || sub < 0) return;
      const id = this.layout.listed(sub, tags[e]);
      if (id !== null) r.push(id);
      return;
    }
    const E = results.length;
    // Scratch kept across batches (collect runs whole, between awaits): no typed arrays a batch.
    if (this.start.length < E + 1) this.start = new Uint32Array(Math.max(E + 1, 2 * this.start.length));
    if (this.at.length < E) this.at = new Uint32Array(Math.max(E, 2 * this.at.length));
    if (this.flat.length < total) this.flat = new Uint32Array(Math.max(total, 2 * this.flat.length));
    const start = this.start;
    const at = this.at;
    const flat = this.flat;
    start.fill(0, 0, E + 1);
    for (let i = 0; i < total; i++) start[pairs[2 * i] + 1]++;
    for (let e = 0; e < E; e++) start[e + 1] += start[e];
    at.set(start.subarray(0, E));
    for (let i = 0; i < total; i++) flat[at[pairs[2 * i]]++] = pairs[2 * i + 1];
    if (this.seen.length < subId.length) this.seen = new Uint32Array(Math.max(subId.length, 2 * this.seen.length));
    const seen = this.seen;
    const L = this.layout;
    for (let e = 0; e < E; e++) {
      const lo = start[e];
      const hi = start[e + 1];
      if (lo === hi) continue;
      const r = results[e];
      if (r === null) continue;
      const tagged = tags[e];
      if (hi - lo === 1) {
        // One pair: nothing to deduplicate (most events that match at all).
        let sub = flat[lo];
        if (sub >= BAND_PAIR) {
          sub = this.bandSub(sub - BAND_PAIR, events, e, serial);
          if (sub < 0) continue;
        }
        const id = L.listed(sub, tagged);
        if (id !== null) r.push(id);
        continue;
      }
      if (this.stamp === 0xffffffff) {
        seen.fill(0);
        this.stamp = 0;
      }
      const stamp = ++this.stamp;
      for (let k = lo; k < hi; k++) {
        let sub = flat[k];
        if (sub >= BAND_PAIR) {
          sub = this.bandSub(sub - BAND_PAIR, events, e, serial);
          if (sub < 0) continue;
        }
        if (seen[sub] === stamp) continue;
        seen[sub] = stamp;
        const id = L.listed(sub, tagged);
        if (id !== null) r.push(id);
      }
    }
  }

  /**
   * A band pair: the filter's subscription index if its area holds the event by the reference's
   * test (A1, A2: float64 haversine from the position the batch saw, inclusive), else -1.
   */
  private bandSub(f: number, events: BatchEvents, e: number, serial: number): number {
    const L = this.layout;
    const si = L.fSub[f];
    // A subscription removed since the batch was submitted is not listed (as for any pair); its
    // filter's index is held back, so `f` still names its filter.
    if (L.heldId(si) === null) return -1;
    this.bandPairs++;
    const p = L.positionAt(L.fPos[f], serial);
    if (p === null) return -1;
    let lat: number;
    let lon: number;
    let radiusM: number;
    if (events instanceof PackedEvents) {
      lat = events.points[3 * e];
      lon = events.points[3 * e + 1];
      radiusM = events.points[3 * e + 2];
    } else ({ lat, lon, radiusM } = events[e]);
    if (!(haversineM(p.lat, p.lon, lat, lon) <= L.fRad64[f] + radiusM)) return -1;
    this.bandMatched++;
    return si;
  }
}
