/**
 * The R-tree engine: CLCB's comparison baseline (§5, "location first, then content"). Filter
 * areas go into an rbush tree as lat/lon boxes (two across the antimeridian, a full-longitude
 * band around a pole; content-only filters cover the whole world); an event queries the tree with
 * its own box and every candidate gets the exact float64 test. Moving a device removes and
 * re-inserts the boxes of each of its anchored filters, which is what makes updates expensive.
 */
import RBush from 'rbush';
import { type Box, circleBoxes, haversineM } from '../model/geo.js';
import type { NEvent, NFilter, NSubscription } from '../model/limits.js';
import type { LatLon } from '../model/types.js';
import { CpuMatcher, type MatcherOptions, type MatcherStats } from './matcher.js';
import { attributeMap, contentMatches } from './reference.js';
import { tagsSubset } from '../model/tags.js';

interface SubRec {
  readonly sub: NSubscription;
  readonly refs: FilterRef[];
  stamp: number;
}

interface FilterRef {
  readonly rec: SubRec;
  readonly filter: NFilter;
  items: Item[];
  stamp: number;
}

interface Item {
  minX: number;
  minY: number;
  maxX: number;
  maxY: number;
  ref: FilterRef;
}

const WORLD: Box = [-180, -90, 180, 90];

export interface RTreeMatcherOptions extends MatcherOptions {
  /** rbush node size (its default, 9, is what rbush's benchmarks favour). */
  maxEntries?: number;
}

export class RTreeMatcher extends CpuMatcher {
  readonly name = 'rtree';
  private readonly tree: RBush<Item>;
  private readonly subs = new Map<string, SubRec>();
  private readonly positions = new Map<string, LatLon>();
  /** Anchored filters of each device, the ones a move must re-insert. */
  private readonly anchored = new Map<string, Set<FilterRef>>();
  private stamp = 0;
  private items = 0;
  private filterCount = 0;
  private constraintCount = 0;

  constructor(options: RTreeMatcherOptions = {}) {
    super(options);
    this.tree = new RBush<Item>(options.maxEntries ?? 9);
  }

  private boxesOf(ref: FilterRef, owner: string): Box[] {
    const area = ref.filter.area;
    if (area === null) return [WORLD];
    const c = area.center ?? this.positions.get(owner);
    if (c === undefined) return [];
    return circleBoxes(c.lat, c.lon, area.radiusM);
  }

  /** Files the filter's boxes in the tree, or (a bulk load) in `bulk` for one rbush load. */
  private index(ref: FilterRef, bulk: Item[] | null = null): void {
    const boxes = this.boxesOf(ref, ref.rec.sub.owner);
    ref.items = boxes.map((b) => ({ minX: b[0], minY: b[1], maxX: b[2], maxY: b[3], ref }));
    if (bulk !== null) for (const it of ref.items) bulk.push(it);
    else for (const it of ref.items) this.tree.insert(it);
    this.items += ref.items.length;
  }

  private unindex(ref: FilterRef): void {
    for (const it of ref.items) this.tree.remove(it);
    this.items -= ref.items.length;
    ref.items = [];
  }

  /** A bulk load: rbush's load (OMT packing) of every box at once instead of one insert each. */
  protected override get insertsWhole(): boolean {
    return true;
  }

  protected override insertMany(ns: readonly NSubscription[]): void {
    const bulk: Item[] = [];
    for (let i = 0; i < ns.length; i++) this.insertInto(ns[i], bulk);
    this.tree.load(bulk);
  }

  protected insert(sub: NSubscription): void {
    this.insertInto(sub, null);
  }

  private insertInto(sub: NSubscription, bulk: Item[] | null): void {
    const rec: SubRec = { sub, refs: [], stamp: 0 };
    for (const filter of sub.filters) {
      const ref: FilterRef = { rec, filter, items: [], stamp: 0 };
      rec.refs.push(ref);
      this.index(ref, bulk);
      this.filterCount++;
      this.constraintCount += filter.constraints.length;
      if (filter.area !== null && filter.area.center === null) {
        let set = this.anchored.get(sub.owner);
        if (set === undefined) this.anchored.set(sub.owner, (set = new Set()));
        set.add(ref);
      }
    }
    this.subs.set(sub.id, rec);
  }

  protected delete(id: string): boolean {
    const rec = this.subs.get(id);
    if (rec === undefined) return false;
    const set = this.anchored.get(rec.sub.owner);
    for (const ref of rec.refs) {
      this.unindex(ref);
      set?.delete(ref);
      this.filterCount--;
      this.constraintCount -= ref.filter.constraints.length;
    }
    if (set !== undefined && set.size === 0) this.anchored.delete(rec.sub.owner);
    this.subs.delete(id);
    return true;
  }

  protected move(device: string, lat: number, lon: number): void {
    this.positions.set(device, { lat, lon });
    const set = this.anchored.get(device);
    if (set === undefined) return;
    for (const ref of set) {
      this.unindex(ref);
      this.index(ref);
    }
  }

  protected forget(device: string): boolean {
    if (!this.positions.delete(device)) return false;
    const set = this.anchored.get(device);
    if (set !== undefined) for (const ref of set) this.unindex(ref);
    return true;
  }

  protected knows(device: string): boolean {
    return this.positions.has(device);
  }

  has(id: string): boolean {
    return this.subs.has(id);
  }

  get(id: string): NSubscription | undefined {
    return this.subs.get(id)?.sub;
  }

  matchValid(e: NEvent): string[] {
    const stamp = ++this.stamp;
    const attrs = attributeMap(e);
    const out: string[] = [];
    const boxes: Box[] = e.radiusM > 0 ? circleBoxes(e.lat, e.lon, e.radiusM) : [[e.lon, e.lat, e.lon, e.lat]];
    // lon ±180 is one meridian: ask for both spellings.
    if (e.radiusM === 0 && Math.abs(e.lon) === 180) boxes.push([-e.lon, e.lat, -e.lon, e.lat]);
    for (const b of boxes) {
      const hits = this.tree.search({ minX: b[0], minY: b[1], maxX: b[2], maxY: b[3] });
      for (const it of hits) {
        const ref = it.ref;
        if (ref.stamp === stamp || ref.rec.stamp === stamp) continue;
        ref.stamp = stamp;
        const area = ref.filter.area;
        if (area !== null) {
          const c = area.center ?? this.positions.get(ref.rec.sub.owner)!;
          if (!(haversineM(c.lat, c.lon, e.lat, e.lon) <= area.radiusM + e.radiusM)) continue;
        }
        if (!contentMatches(ref.filter, attrs) || !tagsSubset(ref.filter.tags, e.tags)) continue;
        ref.rec.stamp = stamp;
        out.push(ref.rec.sub.id);
      }
    }
    return out;
  }

  stats(): MatcherStats {
    return {
      engine: this.name,
      subscriptions: this.subs.size,
      filters: this.filterCount,
      constraints: this.constraintCount,
      devices: this.positions.size,
      // V8 object estimates: item 72 B + its node slot, filter ref 56 B, constraints ~80 B each.
      memoryBytes: this.items * 96 + this.filterCount * 120 + this.constraintCount * 80 + this.subs.size * 150 + this.positions.size * 100,
      extra: { treeItems: this.items },
    };
  }
}
