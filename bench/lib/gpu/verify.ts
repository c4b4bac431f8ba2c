/** The GPU's answers against a float64 engine's. */
import { attributeMap, contentMatches, filterDistance, filterMatches } from '../../../src/engines/reference.js';
import { toleranceM } from '../../../src/model/geo.js';
import { DEFAULT_LIMITS, type NSubscription, validateEvent } from '../../../src/model/limits.js';
import type { Event, LatLon } from '../../../src/model/types.js';
import type { Verification } from './schema.js';

/** Events whose id sets differ. */
export function differing(a: readonly (readonly string[])[], b: readonly (readonly string[])[]): number {
  let n = 0;
  for (let i = 0; i < a.length; i++) {
    if (a[i].length !== b[i].length) {
      n++;
      continue;
    }
    const s = new Set(a[i]);
    if (!b[i].every((id) => s.has(id))) n++;
  }
  return n;
}

/**
 * The GPU's answers against a float64 engine's, per event. A one-sided id is explained by the
 * float32 band (docs/semantics.md X3, as test/support/differential.ts decides it) when
 *  - only the GPU returned it: some filter with matching content has r < d <= r + tol(r);
 *  - only the reference returned it: every filter the reference matched has r - tol(r) <= d <= r.
 */
export function verify(
  events: readonly Event[],
  gpu: readonly (readonly string[])[],
  ref: readonly (readonly string[])[],
  lookup: (id: string) => NSubscription | undefined,
  position: (owner: string) => LatLon | undefined,
  reference = 'fast',
): Verification {
  const v: Verification = { reference, events: events.length, eventsDiffering: 0, onlyGpu: 0, onlyReference: 0, explainedByBand: 0, unexplained: 0, examples: [] };
  for (let i = 0; i < events.length; i++) {
    const g = new Set(gpu[i]);
    const r = new Set(ref[i]);
    const onlyG = gpu[i].filter((id) => !r.has(id));
    const onlyR = ref[i].filter((id) => !g.has(id));
    if (onlyG.length === 0 && onlyR.length === 0) continue;
    v.eventsDiffering++;
    v.onlyGpu += onlyG.length;
    v.onlyReference += onlyR.length;
    const ne = validateEvent(events[i], DEFAULT_LIMITS);
    const attrs = attributeMap(ne);
    const check = (id: string, onlyGpuSide: boolean): void => {
      const s = lookup(id);
      let ok = false;
      if (s !== undefined) {
        const pos = position(s.owner);
        const within = (d: number | null | undefined, r: number, lo: number, hi: number): boolean => d !== null && d !== undefined && lo <= d - r && d - r <= hi;
        if (onlyGpuSide) {
          ok = s.filters.some((f) => f.area !== null && contentMatches(f, attrs) && within(filterDistance(f, pos, ne), f.area.radiusM + ne.radiusM, Number.MIN_VALUE, toleranceM(f.area.radiusM + ne.radiusM)));
        } else {
          const matched = s.filters.filter((f) => filterMatches(f, pos, ne, attrs));
          ok = matched.length > 0 && matched.every((f) => f.area !== null && within(filterDistance(f, pos, ne), f.area.radiusM + ne.radiusM, -toleranceM(f.area.radiusM + ne.radiusM), 0));
        }
      }
      if (ok) v.explainedByBand++;
      else {
        v.unexplained++;
        if (v.examples.length < 8) v.examples.push(`event ${events[i].id}: ${id} returned only by ${onlyGpuSide ? 'gpu' : reference}`);
      }
    };
    for (const id of onlyG) check(id, true);
    for (const id of onlyR) check(id, false);
  }
  return v;
}
