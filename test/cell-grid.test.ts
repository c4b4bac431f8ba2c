/**
 * The fast engine's cell table (src/engines/cell-grid.ts) against a Map of arrays: seeded runs of
 * records added to and removed from cells, with keys that collide in the table, cells that grow
 * past and shrink below the block sizes, and tables that grow; after each step every cell's
 * records are what the model holds, in its order, absent keys are not found and the list of live
 * cells is exact; a pool mostly freed is packed, and an emptied grid starts over.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { CellGrid, REC } from '../src/engines/cell-grid.js';
import { Rng } from './support/rng.js';

/** Checks every cell of the model in the grid, and a few keys never used. */
function check(grid: CellGrid, model: Map<number, number[]>, absent: readonly number[]): void {
  let live = 0;
  const ids = new Set<number>();
  for (const [key, slots] of model) {
    const c = grid.find(key);
    if (slots.length === 0) {
      assert.equal(c, -1, `key ${key} emptied: gone from the table`);
      continue;
    }
    live++;
    assert.ok(c >= 0, `key ${key} found`);
    ids.add(c);
    assert.equal(grid.count(c), slots.length, `key ${key}: records`);
    const off = grid.offset(c);
    for (let i = 0; i < slots.length; i++) {
      const o = off + i * REC;
      assert.equal(grid.pool[o + 3], slots[i], `key ${key}: record ${i}'s slot`);
      assert.equal(grid.pool[o], key + slots[i], `key ${key}: record ${i}'s payload`);
    }
  }
  assert.equal(grid.size, live, 'cells holding records');
  assert.deepEqual(new Set(grid.live.subarray(0, grid.size)), ids, 'the list of live cells');
  for (const k of absent) assert.equal(grid.find(k), -1);
}

describe('CellGrid', () => {
  for (const [label, keys, steps] of [
    ['few keys, large cells (blocks grow to 256 records and shrink back)', 3, 6000],
    ['many keys, small cells (the table grows; deletions move runs back)', 3000, 20000],
    ['keys near 2^53 and keys differing only in their high bits', 64, 8000],
  ] as const) {
    it(label, () => {
      const rng = new Rng(keys + steps);
      const grid = new CellGrid();
      const model = new Map<number, number[]>();
      const keyOf = (i: number): number => (label.startsWith('keys near') ? (i % 2 === 0 ? 2 ** 52 + i * 2 ** 33 : 2 ** 53 - 1 - i) : i * 7919 * 2 ** 20 + i);
      const where = new Map<number, number>(); // slot -> key
      let nextSlot = 0;
      const absent = [keyOf(keys + 1), keyOf(keys + 2), 12345];
      for (let step = 0; step < steps; step++) {
        const add = where.size === 0 || rng.next() < (step < steps / 2 ? 0.7 : 0.35);
        if (add) {
          const key = keyOf(rng.int(keys));
          const slot = nextSlot++;
          const c = grid.cellFor(key);
          const i = grid.push(c);
          const o = grid.offset(c) + i * REC;
          grid.pool[o] = key + slot;
          grid.pool[o + 3] = slot;
          (model.get(key) ?? model.set(key, []).get(key)!).push(slot);
          where.set(slot, key);
        } else {
          const slots = [...where.keys()];
          const slot = slots[rng.int(slots.length)];
          const key = where.get(slot)!;
          const list = model.get(key)!;
          const i = list.indexOf(slot);
          const moved = grid.removeAt(grid.find(key), i);
          // The model does what the grid says it does: the last record moves into the hole.
          const last = list.pop()!;
          if (i < list.length) list[i] = last;
          assert.equal(moved, i < list.length ? last : -1, 'the slot that moved');
          where.delete(slot);
        }
        if (step % 97 === 0 || step === steps - 1) check(grid, model, absent);
      }
      // Empty everything: every cell and key goes.
      for (const [slot, key] of where) {
        const list = model.get(key)!;
        const i = list.indexOf(slot);
        grid.removeAt(grid.find(key), i);
        const last = list.pop()!;
        if (i < list.length) list[i] = last;
      }
      check(grid, model, absent);
      assert.equal(grid.size, 0);
    });
  }

  it('a pool mostly freed (dense cells emptied) is packed, records kept; an emptied grid starts over', () => {
    const rng = new Rng(5);
    const grid = new CellGrid();
    const model = new Map<number, number[]>();
    const add = (key: number, slot: number): void => {
      const c = grid.cellFor(key);
      const i = grid.push(c); // first: it may move the cell's block
      const o = grid.offset(c) + i * REC;
      grid.pool[o] = key + slot;
      grid.pool[o + 3] = slot;
      (model.get(key) ?? model.set(key, []).get(key)!).push(slot);
    };
    const remove = (key: number, slot: number): void => {
      const list = model.get(key)!;
      const i = list.indexOf(slot);
      grid.removeAt(grid.find(key), i);
      const last = list.pop()!;
      if (i < list.length) list[i] = last;
    };
    // 300 cells of 500 records: blocks of 512, a pool of about 150k records (1.2M float64s).
    for (let s = 0; s < 150_000; s++) add(1000 + (s % 300), s);
    const full = grid.bytes;
    check(grid, model, [5]);
    // Most cells empty, a few keep a record or two: the freed blocks would be half the pool.
    for (let s = 0; s < 150_000; s++) if (s % 300 >= 20 || s >= 600) remove(1000 + (s % 300), s);
    check(grid, model, [5]);
    assert.ok(grid.bytes < full / 4, `packed: ${grid.bytes} bytes, ${full} full`);
    for (let k = 0; k < 1000; k++) add(5000 + rng.int(50), 200_000 + k);
    check(grid, model, [5]);
    for (const [key, slots] of model) for (const s of [...slots]) remove(key, s);
    check(grid, model, [5]);
    assert.ok(grid.bytes < 16_384, `an emptied grid starts over: ${grid.bytes} bytes`);
  });
});
