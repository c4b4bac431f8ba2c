/**
 * What a user would build instead of Ambit's engines, for the CPU benchmark to run beside them in
 * the same process and on the same workload: every filter's area as lat/lon boxes in a plain
 * spatial index, the event's box searched, then each candidate's exact float64 distance and its
 * constraints as the reference engine decides them, so the answers (and the checksums) are the
 * reference's.
 *
 * - `rbush`: the dynamic R-tree (npm rbush); a bulk load uses rbush.load, a move removes and
 *   re-inserts the device's filters' boxes.
 * - `flatbush`: the static packed Hilbert R-tree (npm flatbush); any change marks it stale and the
 *   next match rebuilds it whole (fine for matching a settled set, hopeless for moving devices).
 *
 * Bench code, not engines: they are not in the registry and the service never runs them.
 */
import Flatbush from 'flatbush';
import RBush from 'rbush';
import { type Box, circleBoxes, haversineM } from '../../src/model/geo.js';
import type { NEvent, NFilter, NSubscription } from '../../src/model/limits.js';
import type { LatLon } from '../../src/model/types.js';
import { CpuMatcher, type Matcher, type MatcherOptions, type MatcherStats } from '../../src/engines/matcher.js';
import { attributeMap, contentMatches } from '../../src/engines/reference.js';
import { tagsSubset } from '../../src/model/tags.js';

/** One filter as the baselines keep it; its boxes' centre is `lat`/`lon` (NaN: not indexed). */
interface Rec {
  readonly sub: string;
  readonly owner: string;
  readonly filter: NFilter;
  lat: number;
  lon: number;
  boxes: Box[];
}

interface Item {
  minX: number;
  minY: number;
  maxX: number;
  maxY: number;
  f: number;
}

abstract class BoxBaseline extends CpuMatcher {
  protected readonly recs: (Rec | null)[] = [];
  private readonly freeRecs: number[] = [];
  private readonly subs = new Map<string, { sub: NSubscription; fs: number[] }>();
  private readonly positions = new Map<string, LatLon>();
  /** Filters anchored to each device (moved with it). */
  private readonly anchored = new Map<string, Set<number>>();
  /** Filters without an area: tested against every event. */
  private readonly everywhere = new Set<number>();
  private readonly subStamp = new Map<string, number>();
  private stamp = 0;
  private filterCount = 0;
  private constraintCount = 0;

  /** Files filter f's boxes (rec.boxes) in the index. */
  protected abstract indexBoxes(f: number, rec: Rec): void;
  /** Takes filter f's boxes out of the index. */
  protected abstract unindexBoxes(f: number, rec: Rec): void;
  /** Calls `visit` with each filter whose boxes intersect `b` (a filter may come once per box). */
  protected abstract search(b: Box, visit: (f: number) => void): void;
  protected abstract indexBytes(): number;

  /** Computes and files a filter's boxes where it has a centre. */
  private place(f: number, rec: Rec): void {
    const area = rec.filter.area!;
    const c = area.center ?? this.positions.get(rec.owner);
    if (c === undefined) return;
    rec.lat = c.lat;
    rec.lon = c.lon;
    rec.boxes = circleBoxes(c.lat, c.lon, area.radiusM);
    this.indexBoxes(f, rec);
  }

  private unplace(f: number, rec: Rec): void {
    if (rec.boxes.length === 0) return;
    this.unindexBoxes(f, rec);
    rec.boxes = [];
    rec.lat = NaN;
    rec.lon = NaN;
  }

  protected insert(sub: NSubscription): void {
    const fs: number[] = [];
    for (const filter of sub.filters) {
      const f = this.freeRecs.length > 0 ? this.freeRecs.pop()! : this.recs.length;
      const rec: Rec = { sub: sub.id, owner: sub.owner, filter, lat: NaN, lon: NaN, boxes: [] };
      this.recs[f] = rec;
      fs.push(f);
      this.filterCount++;
      this.constraintCount += filter.constraints.length;
      if (filter.area === null) this.everywhere.add(f);
      else {
        if (filter.area.center === null) {
          let set = this.anchored.get(sub.owner);
          if (set === undefined) this.anchored.set(sub.owner, (set = new Set()));
          set.add(f);
        }
        this.place(f, rec);
      }
    }
    this.subs.set(sub.id, { sub, fs });
  }

  protected delete(id: string): boolean {
    const s = this.subs.get(id);
    if (s === undefined) return false;
    for (const f of s.fs) {
      const rec = this.recs[f]!;
      this.unplace(f, rec);
      this.everywhere.delete(f);
      this.anchored.get(rec.owner)?.delete(f);
      this.recs[f] = null;
      this.freeRecs.push(f);
      this.filterCount--;
      this.constraintCount -= rec.filter.constraints.length;
    }
    this.subs.delete(id);
    this.subStamp.delete(id);
    return true;
  }

  protected move(device: string, lat: number, lon: number): void {
    this.positions.set(device, { lat, lon });
    const fs = this.anchored.get(device);
    if (fs === undefined) return;
    for (const f of fs) {
      const rec = this.recs[f]!;
      this.unplace(f, rec);
      this.place(f, rec);
    }
  }

  protected forget(device: string): boolean {
    if (!this.positions.delete(device)) return false;
    for (const f of this.anchored.get(device) ?? []) this.unplace(f, this.recs[f]!);
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
    const out: string[] = [];
    const attrs = attributeMap(e);
    const hit = (f: number): void => {
      const rec = this.recs[f]!;
      if (this.subStamp.get(rec.sub) === stamp) return;
      if (rec.filter.area !== null && !(haversineM(rec.lat, rec.lon, e.lat, e.lon) <= rec.filter.area.radiusM + e.radiusM)) return;
      if (!contentMatches(rec.filter, attrs) || !tagsSubset(rec.filter.tags, e.tags)) return;
      this.subStamp.set(rec.sub, stamp);
      out.push(rec.sub);
    };
    const boxes: Box[] = e.radiusM > 0 ? circleBoxes(e.lat, e.lon, e.radiusM) : [[e.lon, e.lat, e.lon, e.lat]];
    // lon ±180 is one meridian: ask for both spellings.
    if (e.radiusM === 0 && Math.abs(e.lon) === 180) boxes.push([-e.lon, e.lat, -e.lon, e.lat]);
    for (const b of boxes) this.search(b, hit);
    for (const f of this.everywhere) hit(f);
    return out;
  }

  stats(): MatcherStats {
    return {
      engine: this.name,
      subscriptions: this.subs.size,
      filters: this.filterCount,
      constraints: this.constraintCount,
      devices: this.positions.size,
      memoryBytes: this.indexBytes(),
    };
  }
}

export class RbushBaseline extends BoxBaseline {
  readonly name = 'rbush';
  private readonly tree = new RBush<Item>();
  private readonly items: (Item[] | undefined)[] = [];
  private bulk: Item[] | null = null;

  protected indexBoxes(f: number, rec: Rec): void {
    const items = rec.boxes.map((b) => ({ minX: b[0], minY: b[1], maxX: b[2], maxY: b[3], f }));
    this.items[f] = items;
    if (this.bulk !== null) for (const it of items) this.bulk.push(it);
    else for (const it of items) this.tree.insert(it);
  }

  protected unindexBoxes(f: number): void {
    for (const it of this.items[f] ?? []) this.tree.remove(it);
    this.items[f] = undefined;
  }

  protected override get insertsWhole(): boolean {
    return true;
  }

  protected override insertMany(ns: readonly NSubscription[]): void {
    this.bulk = [];
    try {
      super.insertMany(ns);
      this.tree.load(this.bulk);
    } finally {
      this.bulk = null;
    }
  }

  protected search(b: Box, visit: (f: number) => void): void {
    const found = this.tree.search({ minX: b[0], minY: b[1], maxX: b[2], maxY: b[3] });
    for (let i = 0; i < found.length; i++) visit(found[i].f);
  }

  protected indexBytes(): number {
    return 0;
  }
}

export class FlatbushBaseline extends BoxBaseline {
  readonly name = 'flatbush';
  private index: Flatbush | null = null;
  /** The filter of each box in the built index. */
  private owners: Int32Array = new Int32Array(0);
  private stale = true;

  protected indexBoxes(): void {
    this.stale = true;
  }

  protected unindexBoxes(): void {
    this.stale = true;
  }

  /** Builds the index from every filed box (after any change). */
  private build(): void {
    let n = 0;
    for (const rec of this.recs) if (rec !== null) n += rec.boxes.length;
    this.owners = new Int32Array(n);
    if (n === 0) {
      this.index = null;
    } else {
      const index = new Flatbush(n);
      for (let f = 0; f < this.recs.length; f++) {
        const rec = this.recs[f];
        if (rec === null) continue;
        for (const b of rec.boxes) this.owners[index.add(b[0], b[1], b[2], b[3])] = f;
      }
      index.finish();
      this.index = index;
    }
    this.stale = false;
  }

  protected search(b: Box, visit: (f: number) => void): void {
    if (this.stale) this.build();
    if (this.index === null) return;
    const found = this.index.search(b[0], b[1], b[2], b[3]);
    for (let i = 0; i < found.length; i++) visit(this.owners[found[i]]);
  }

  protected indexBytes(): number {
    return this.index === null ? 0 : this.index.data.byteLength + this.owners.byteLength;
  }
}

/** The baselines by name, as the benchmark's --engines takes them. */
export const BASELINES: Readonly<Record<string, (o?: MatcherOptions) => Matcher>> = Object.freeze({
  rbush: (o?: MatcherOptions) => new RbushBaseline(o),
  flatbush: (o?: MatcherOptions) => new FlatbushBaseline(o),
});
