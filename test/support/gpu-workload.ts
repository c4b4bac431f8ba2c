/**
 * Seeded subscriptions and events for the GPU engine's tests, a twin loader and an agreement check
 * against the reference (test/gpu-engine.test.ts, test/gpu-adaptive.test.ts).
 */
import assert from 'node:assert/strict';
import type { GpuMatcher } from '../../src/engines/gpu/matcher.js';
import type { ReferenceMatcher } from '../../src/engines/reference.js';
import type { Event, Subscription } from '../../src/model/types.js';
import { Rng } from './rng.js';

export const sorted = (ids: string[]) => [...ids].sort();

export function randomWorkload(seed: number, subs: number, filtersPer = 2) {
  const rng = new Rng(seed);
  const names = ['a', 'b', 'c', 'd'];
  const out: Subscription[] = [];
  for (let i = 0; i < subs; i++) {
    const filters = [];
    for (let f = 0; f < filtersPer; f++) {
      const constraints = [];
      const n = rng.int(3);
      for (let k = 0; k < n; k++) constraints.push({ name: names[rng.int(4)], op: 'lt' as const, value: rng.int(11) });
      filters.push({ constraints, area: rng.next() < 0.8 ? { radiusM: 50 + rng.next() * 2000 } : undefined });
    }
    out.push({ id: `s${i}`, owner: `d${i % Math.max(1, Math.floor(subs / 2))}`, filters });
  }
  return out;
}

export function randomEvent(rng: Rng, i: number): Event {
  return {
    id: `e${i}`,
    lat: 45.45 + rng.next() * 0.03,
    lon: 9.17 + rng.next() * 0.04,
    attributes: { a: rng.int(11), b: rng.int(11), c: rng.int(11) },
  };
}

/** Loads the same subscriptions and positions into the engine and a reference. */
export function twin(m: GpuMatcher | ReferenceMatcher, subs: Subscription[], seed: number): void {
  const rng = new Rng(seed);
  const devices = new Set(subs.map((s) => s.owner));
  for (const d of devices) m.updatePosition(d, 45.45 + rng.next() * 0.03, 9.17 + rng.next() * 0.04);
  for (const s of subs) m.add(s);
}

/** Asserts the same sets as the reference on `n` events. */
export async function agree(m: GpuMatcher, ref: ReferenceMatcher, seed: number, n: number): Promise<number> {
  const rng = new Rng(seed);
  let matched = 0;
  for (let i = 0; i < n; i++) {
    const e = randomEvent(rng, i);
    const want = sorted(await ref.match(e));
    const got = await m.match(e);
    assert.equal(new Set(got).size, got.length, 'each subscription once');
    assert.deepEqual(sorted(got), want, `event ${i}`);
    matched += want.length;
  }
  return matched;
}
