/**
 * The reference engine: plain, obviously correct, float64. It is the oracle for every other
 * engine's differential tests, and its per-filter decision (`filterMatches`) is the definition
 * of a match in code form (docs/semantics.md).
 */
import { haversineM } from '../model/geo.js';
import type { NEvent, NFilter, NSubscription } from '../model/limits.js';
import { satisfies } from '../model/semantics.js';
import type { LatLon, Value } from '../model/types.js';
import { CpuMatcher, type MatcherOptions, type MatcherStats } from './matcher.js';

/** Attribute lookup for one event. */
export function attributeMap(e: NEvent): Map<string, Value> {
  const m = new Map<string, Value>();
  for (let i = 0; i < e.names.length; i++) m.set(e.names[i], e.values[i]);
  return m;
}

/**
 * Distance from the filter's area centre to the event, in metres; null when the filter has no
 * area (matches anywhere); undefined when it is anchored to an owner with no known position.
 */
export function filterDistance(f: NFilter, ownerPos: LatLon | undefined, e: NEvent): number | null | undefined {
  if (f.area === null) return null;
  const c = f.area.center ?? ownerPos;
  if (c === undefined) return undefined;
  return haversineM(c.lat, c.lon, e.lat, e.lon);
}

export function contentMatches(f: NFilter, attrs: Map<string, Value>): boolean {
  for (const c of f.constraints) if (!satisfies(c, attrs.get(c.name))) return false;
  return true;
}

/** T5: each of the filter's tags is one of the event's (plain membership: the oracle's own test). */
export function tagsMatch(f: NFilter, e: NEvent): boolean {
  return f.tags.every((t) => e.tags.includes(t));
}

export function filterMatches(f: NFilter, ownerPos: LatLon | undefined, e: NEvent, attrs: Map<string, Value>): boolean {
  const d = filterDistance(f, ownerPos, e);
  if (d === undefined) return false;
  if (d !== null && !(d <= f.area!.radiusM + e.radiusM)) return false;
  return contentMatches(f, attrs) && tagsMatch(f, e);
}

export class ReferenceMatcher extends CpuMatcher {
  readonly name = 'reference';
  private readonly subs = new Map<string, NSubscription>();
  private readonly positions = new Map<string, LatLon>();

  constructor(options: MatcherOptions = {}) {
    super(options);
  }

  protected insert(sub: NSubscription): void {
    this.subs.set(sub.id, sub);
  }

  protected delete(id: string): boolean {
    return this.subs.delete(id);
  }

  protected move(device: string, lat: number, lon: number): void {
    this.positions.set(device, { lat, lon });
  }

  protected forget(device: string): boolean {
    return this.positions.delete(device);
  }

  protected knows(device: string): boolean {
    return this.positions.has(device);
  }

  has(id: string): boolean {
    return this.subs.has(id);
  }

  get(id: string): NSubscription | undefined {
    return this.subs.get(id);
  }

  /** The known position of a device (used by tests to explain disagreements). */
  position(device: string): LatLon | undefined {
    return this.positions.get(device);
  }

  matchValid(e: NEvent): string[] {
    const attrs = attributeMap(e);
    const out: string[] = [];
    for (const s of this.subs.values()) {
      const pos = this.positions.get(s.owner);
      if (s.filters.some((f) => filterMatches(f, pos, e, attrs))) out.push(s.id);
    }
    return out;
  }

  stats(): MatcherStats {
    let filters = 0;
    let constraints = 0;
    for (const s of this.subs.values()) {
      filters += s.filters.length;
      for (const f of s.filters) constraints += f.constraints.length;
    }
    return {
      engine: this.name,
      subscriptions: this.subs.size,
      filters,
      constraints,
      devices: this.positions.size,
      // Rough object-graph estimate; the reference is not built for memory.
      memoryBytes: this.subs.size * 200 + filters * 120 + constraints * 100 + this.positions.size * 100,
    };
  }
}
