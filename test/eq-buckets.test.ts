/**
 * src/engines/eq-buckets.ts, the fast engine's table of equality buckets: seeded random adds,
 * updates and removals against a Map, in a table small enough that probe runs collide and wrap
 * around its end, so backward-shift deletion is exercised on every kind of run.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { EqBuckets, NO_BUCKET } from '../src/engines/eq-buckets.js';
import { Rng } from './support/rng.js';

const key = (s: number, n: number, v: number): string => `${s}/${n}/${v}`;

function checkAll(t: EqBuckets, model: Map<string, number>, universe: readonly [number, number, number][]): void {
  assert.equal(t.size, model.size);
  for (const [s, n, v] of universe) assert.equal(t.get(s, n, v), model.get(key(s, n, v)) ?? NO_BUCKET, `get(${s}, ${n}, ${v})`);
}

describe('EqBuckets', () => {
  it('agrees with a Map through adds, updates and removals, across growth and wrapped probe runs', () => {
    for (const seed of [1, 2, 3, 4]) {
      const rng = new Rng(seed);
      const t = new EqBuckets(16);
      const model = new Map<string, number>();
      // Few distinct slots, names and values: many keys share a home or a run.
      const universe: [number, number, number][] = [];
      for (let s = 0; s < 12; s++) for (let n = 0; n < 4; n++) for (let v = 0; v < 5; v++) universe.push([s, n * 16 + (v % 3), v]);
      for (let step = 0; step < 3000; step++) {
        const [s, n, v] = universe[rng.int(universe.length)];
        const k = key(s, n, v);
        if (rng.chance(0.55)) {
          const first = rng.int(1_000_000);
          t.set(s, n, v, first);
          model.set(k, first);
        } else {
          assert.equal(t.delete(s, n, v), model.delete(k), `delete(${s}, ${n}, ${v})`);
        }
        if (step % 25 === 0) checkAll(t, model, universe);
      }
      checkAll(t, model, universe);
      // Emptied whole, it still answers and fills again.
      for (const [s, n, v] of universe) t.delete(s, n, v);
      model.clear();
      checkAll(t, model, universe);
      t.set(7, 3, 2, 42);
      assert.equal(t.get(7, 3, 2), 42);
    }
  });

  it('tells a bucket from its neighbours that differ in one part only', () => {
    const t = new EqBuckets();
    t.set(5, 17, 3, 100);
    assert.equal(t.get(5, 17, 3), 100);
    assert.equal(t.get(6, 17, 3), NO_BUCKET);
    assert.equal(t.get(5, 18, 3), NO_BUCKET);
    assert.equal(t.get(5, 17, 4), NO_BUCKET);
    assert.equal(t.delete(5, 17, 4), false);
    assert.equal(t.size, 1);
    assert.throws(() => t.set(-1, 0, 0, 1), /negative/);
  });
});
