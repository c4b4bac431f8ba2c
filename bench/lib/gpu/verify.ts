/** The GPU's answers against a float64 engine's. */
import { attributeMap, contentMatches, filterDistance } from '../../../src/engines/reference.js';
import { DEFAULT_LIMITS, type NEvent, type NSubscription, validateEvent } from '../../../src/model/limits.js';
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

const MAX_EXAMPLES = 8;

/** The subscription's filters whose content matches, with d - r for those with a known area. */
function anatomy(s: NSubscription | undefined, pos: LatLon | undefined, ne: NEvent): string {
  if (s === undefined) return 'unknown subscription';
  const attrs = attributeMap(ne);
  const parts: string[] = [];
  s.filters.forEach((f, j) => {
    if (!contentMatches(f, attrs)) return;
    const d = filterDistance(f, pos, ne);
    if (d === null) parts.push(`filter ${j}: content-only`);
    else if (d === undefined) parts.push(`filter ${j}: owner position unknown`);
    else parts.push(`filter ${j}: d - r = ${(d - (f.area!.radiusM + ne.radiusM)).toPrecision(3)} m`);
  });
  return parts.length === 0 ? 'no filter with matching content' : parts.join(', ');
}

/**
 * The GPU's answers against a float64 engine's, per event. Every engine must return exactly the
 * reference's set (docs/semantics.md X1), so any event whose sets differ is a mismatch; a few are
 * kept as examples, each one-sided id with d - r for its filters whose content matches (from
 * `lookup` and `position`, the subscription's normalised form and its owner's position).
 */
export function verify(
  events: readonly Event[],
  gpu: readonly (readonly string[])[],
  ref: readonly (readonly string[])[],
  lookup: (id: string) => NSubscription | undefined,
  position: (owner: string) => LatLon | undefined,
  reference = 'fast',
): Verification {
  const v: Verification = { reference, events: events.length, mismatches: 0, onlyGpu: 0, onlyReference: 0, examples: [] };
  for (let i = 0; i < events.length; i++) {
    const g = new Set(gpu[i]);
    const r = new Set(ref[i]);
    const onlyG = gpu[i].filter((id) => !r.has(id));
    const onlyR = ref[i].filter((id) => !g.has(id));
    if (onlyG.length === 0 && onlyR.length === 0) continue;
    v.mismatches++;
    v.onlyGpu += onlyG.length;
    v.onlyReference += onlyR.length;
    if (v.examples.length >= MAX_EXAMPLES) continue;
    const ne = validateEvent(events[i], DEFAULT_LIMITS);
    const ids = [...onlyG.map((id) => [id, 'gpu'] as const), ...onlyR.map((id) => [id, reference] as const)];
    for (const [id, side] of ids.slice(0, 3)) {
      const s = lookup(id);
      v.examples.push(`event ${events[i].id}: ${id} returned only by ${side} (${anatomy(s, s === undefined ? undefined : position(s.owner), ne)})`);
      if (v.examples.length >= MAX_EXAMPLES) break;
    }
  }
  return v;
}
