/**
 * Deliberately distorted engines, used only to prove that the differential comparator is not
 * vacuous: it must catch every disagreement with the reference (X1), however small, and accept an
 * engine that computes in float32 but decides every uncertain pair in float64 (X2).
 */
import type { DeviceHandle, Matcher, MatcherOptions, MatcherStats } from '../../src/engines/matcher.js';
import { ReferenceMatcher, attributeMap, contentMatches, filterDistance, tagsMatch } from '../../src/engines/reference.js';
import { EARTH_RADIUS_M } from '../../src/model/geo.js';
import type { NEvent, NSubscription } from '../../src/model/limits.js';
import type { Event, LatLon, PositionUpdate, Subscription } from '../../src/model/types.js';

/** Decides a filter's area test: centre, event, r = r_f + r_e and the reference distance d. */
export type AreaDecision = (center: LatLon, e: NEvent, r: number, d: number) => boolean;

/** The reference with its area test replaced (content stays exact). */
export class DistortedMatcher extends ReferenceMatcher {
  private readonly ids = new Set<string>();

  constructor(
    private readonly decide: AreaDecision,
    options: MatcherOptions = {},
  ) {
    super(options);
  }

  protected override insert(sub: NSubscription): void {
    super.insert(sub);
    this.ids.add(sub.id);
  }

  protected override delete(id: string): boolean {
    this.ids.delete(id);
    return super.delete(id);
  }

  override matchValid(e: NEvent): string[] {
    const attrs = attributeMap(e);
    const out: string[] = [];
    for (const id of this.ids) {
      const s = this.get(id)!;
      const pos = this.position(s.owner);
      const hit = s.filters.some((f) => {
        const d = filterDistance(f, pos, e);
        if (d === undefined) return false;
        if (d !== null && !this.decide(f.area!.center ?? pos!, e, f.area!.radiusM + e.radiusM, d)) return false;
        return contentMatches(f, attrs) && tagsMatch(f, e);
      });
      if (hit) out.push(id);
    }
    return out;
  }
}

/** Area test moved by `m` metres: m > 0 fattens every circle, m < 0 thins it. */
export function shifted(m: number): AreaDecision {
  return (_c, _e, r, d) => d <= r + m;
}

const RAD = Math.PI / 180;
const f32 = Math.fround;

function unit32(lat: number, lon: number): [number, number, number] {
  const p = lat * RAD;
  const l = lon * RAD;
  const c = Math.cos(p);
  return [f32(c * Math.cos(l)), f32(c * Math.sin(l)), f32(Math.sin(p))];
}

/**
 * What a GPU kernel computes (CLCB §4.2 SqDist), used alone: float32 unit vectors, squared chord
 * distance in float32, compared with the squared chord of the radius. Its error is well under
 * 2 m, but near the boundary it decides differently from the reference, which X1 forbids.
 */
export const float32Area: AreaDecision = (c, e, r) => {
  const c2 = chord2f32(c, e);
  const t = f32(2 * Math.sin(Math.min(r / EARTH_RADIUS_M, Math.PI) / 2));
  return c2 <= f32(t * t);
};

/** Squared chord between two points on the unit sphere, all in float32. */
function chord2f32(c: LatLon, e: LatLon): number {
  const a = unit32(c.lat, c.lon);
  const b = unit32(e.lat, e.lon);
  const dx = f32(a[0] - b[0]);
  const dy = f32(a[1] - b[1]);
  const dz = f32(a[2] - b[2]);
  return f32(f32(f32(dx * dx) + f32(dy * dy)) + f32(dz * dz));
}

/**
 * The same float32 distance used as X2 allows: it decides a pair only when it lies more than
 * max(2 m, 0.1% of r) from the boundary (well beyond its error); a pair nearer the boundary is
 * decided with the float64 reference distance, d <= r. A model of a conforming GPU engine.
 */
export const float32Rechecked: AreaDecision = (c, e, r, d) => {
  const d32 = 2 * EARTH_RADIUS_M * Math.asin(Math.min(1, Math.sqrt(chord2f32(c, e)) / 2));
  if (Math.abs(d32 - r) > Math.max(2, 0.001 * r)) return d32 <= r;
  return d <= r;
};

/** Forwards everything to an inner matcher and lets a hook edit match results. */
export class ResultHook implements Matcher {
  readonly name: string;
  private calls = 0;

  constructor(
    private readonly inner: Matcher,
    private readonly edit: (ids: string[], event: Event, call: number) => string[],
    readonly overrides: { remove?: (id: string, real: boolean) => boolean } = {},
  ) {
    this.name = `hooked-${inner.name}`;
  }

  get limits() {
    return this.inner.limits;
  }
  add(sub: Subscription): void {
    this.inner.add(sub);
  }
  addMany(subs: readonly Subscription[]): void {
    this.inner.addMany(subs);
  }
  replace(sub: Subscription): void {
    this.inner.replace(sub);
  }
  remove(id: string): boolean {
    const real = this.inner.remove(id);
    return this.overrides.remove ? this.overrides.remove(id, real) : real;
  }
  has(id: string): boolean {
    return this.inner.has(id);
  }
  get(id: string): NSubscription | undefined {
    return this.inner.get(id);
  }
  updatePosition(device: string, lat: number, lon: number): void {
    this.inner.updatePosition(device, lat, lon);
  }
  updatePositions(updates: readonly PositionUpdate[]): void {
    this.inner.updatePositions(updates);
  }
  openDevice(device: string): DeviceHandle {
    return this.inner.openDevice(device);
  }
  removeDevice(device: string): boolean {
    return this.inner.removeDevice(device);
  }
  async match(event: Event): Promise<string[]> {
    return this.edit(await this.inner.match(event), event, this.calls++);
  }
  async matchBatch(events: readonly Event[]): Promise<string[][]> {
    const rs = await this.inner.matchBatch(events);
    return rs.map((r, i) => this.edit(r, events[i], this.calls++));
  }
  stats(): MatcherStats {
    return this.inner.stats();
  }
  close(): Promise<void> {
    return this.inner.close();
  }
}
