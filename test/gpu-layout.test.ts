/** Host-side encoding of the GPU engine's batch input (src/engines/gpu/layout.ts): UTF-8 and the grid frame. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { GpuLayout, META_NAMES, gridFrame, utf8Into } from '../src/engines/gpu/layout.js';
import { resolveLimits, validateSubscription } from '../src/model/limits.js';
import { Rng } from './support/rng.js';

describe('gpu layout: utf8Into', () => {
  const pieces = ['a', 'Z', '~', '\u007f', '\u0080', 'é', '\u07ff', '\u0800', '€', '\uffff', '😀', '\u{10ffff}', '\u{10000}', '中'];

  it('writes what Buffer writes, for every kind of code point', () => {
    const rng = new Rng(5);
    for (let t = 0; t < 2000; t++) {
      let v = '';
      const n = rng.int(12);
      for (let i = 0; i < n; i++) v += pieces[rng.int(pieces.length)];
      const want = Buffer.from(v, 'utf8');
      const bytes = new Uint8Array(want.length + 8).fill(0xaa);
      const end = utf8Into(bytes, 3, v);
      assert.equal(end - 3, want.length, JSON.stringify(v));
      assert.deepEqual(Buffer.from(bytes.subarray(3, end)), want, JSON.stringify(v));
      assert.equal(bytes[2], 0xaa, 'nothing before');
      assert.equal(bytes[end], 0xaa, 'nothing after');
    }
  });

  it('a lone surrogate becomes U+FFFD, as Buffer makes it', () => {
    for (const v of ['\ud800', 'a\udc00b', '\ud83d', '\ud83dx', '\ude00\ud83d']) {
      const want = Buffer.from(v, 'utf8');
      const bytes = new Uint8Array(want.length);
      assert.equal(utf8Into(bytes, 0, v), want.length);
      assert.deepEqual(Buffer.from(bytes), want, JSON.stringify(v));
    }
  });
});

describe('gpu layout: gridFrame', () => {
  it('is orthonormal with w along the given direction, and the identity for no direction', () => {
    assert.deepEqual(gridFrame(0, 0, 0), [1, 0, 0, 0, 1, 0, 0, 0, 1]);
    const rng = new Rng(6);
    const dirs = [[0, 0, 1], [0, 0, -1], [1, 0, 0], [0.1, 0.2, 0.97]];
    for (let i = 0; i < 200; i++) dirs.push([rng.next() - 0.5, rng.next() - 0.5, rng.next() - 0.5]);
    for (const [x, y, z] of dirs) {
      const f = gridFrame(x, y, z);
      const row = (r: number) => f.slice(3 * r, 3 * r + 3);
      const dot = (a: number[], b: number[]) => a[0] * b[0] + a[1] * b[1] + a[2] * b[2];
      for (let a = 0; a < 3; a++) {
        for (let b = 0; b < 3; b++) assert.ok(Math.abs(dot(row(a), row(b)) - (a === b ? 1 : 0)) < 1e-12, `rows ${a}, ${b} of ${[x, y, z]}`);
      }
      const len = Math.hypot(x, y, z);
      assert.ok(Math.abs(dot(row(2), [x / len, y / len, z / len]) - 1) < 1e-12, 'w points along the batch');
    }
  });
});

describe('gpu layout: positions as each batch in flight saw them (the band test\'s journal)', () => {
  it('keeps each record while a batch submitted before it is in flight, and drops it after', () => {
    const L = new GpuLayout();
    const s = L.deviceSlotOf('d');
    const other = L.deviceSlotOf('e');
    L.place(other, 9, 9);
    // Batch k uploads position k; the upload of batch k records position k - 1 for the older ones.
    const submit = (k: number): void => {
      L.place(s, k, k);
      L.submitted = k;
      L.batchesInFlight++;
      L.takeMoved();
    };
    const at = (serial: number) => L.positionAt(s, serial)?.lat;
    submit(1);
    submit(2);
    submit(3);
    assert.deepEqual([at(1), at(2), at(3)], [1, 2, 3]);
    assert.equal(L.positionAt(other, 1)?.lat, 9, 'a slot with no record: its uploaded position');
    // Batch 1 is read: batch 2's record (position 1) serves no one, batch 3's (position 2) still does.
    L.batchesInFlight--;
    L.releaseHeld(2);
    assert.deepEqual([at(2), at(3)], [2, 3]);
    L.batchesInFlight--;
    L.releaseHeld(3);
    assert.equal(at(3), 3);
    submit(4);
    assert.deepEqual([at(3), at(4)], [3, 4]);
    L.batchesInFlight = 0;
    L.releaseHeld(Infinity);
    assert.equal(at(4), 4);
  });
});

describe('gpu layout: filters of names only (tags, exists) keep their names as a shared run', () => {
  const limits = resolveLimits();
  const sub = (id: string, tags: string[], names: string[] = [], area = false) =>
    validateSubscription(
      {
        id,
        owner: 'd',
        filters: [{ constraints: names.map((name) => ({ name, op: 'exists' })), tags, ...(area ? { area: { center: { lat: 1, lon: 2 }, radiusM: 100 } } : {}) }],
      },
      limits,
    );

  it('takes 4 bytes a name (the first in fPos) once for every filter with the same names, in any order, and frees the run with the last', () => {
    const L = new GpuLayout();
    const s0 = L.sTop;
    const c0 = L.cTop;
    L.insert(sub('a', ['food', 'vegan', 'lunch']));
    assert.equal(L.sTop - s0, 2, 'two words of cStr, the first name in fPos');
    assert.equal(L.cTop, c0, 'no constraint slot');
    assert.ok((L.fMeta[0] & META_NAMES) !== 0);
    L.insert(sub('b', ['lunch', 'food', 'vegan']));
    L.insert(sub('c', ['vegan', 'food'], ['lunch']));
    assert.equal(L.fCon[1], L.fCon[0], 'the same names share one run');
    assert.equal(L.fPos[1], L.fPos[0]);
    assert.equal(L.sTop - s0, 4, 'tags food and vegan with the attribute lunch (not the tag) are another run');
    L.remove(sub('a', ['food', 'vegan', 'lunch']).id);
    L.remove(sub('b', ['lunch', 'food', 'vegan']).id);
    const freed = L.fCon[0];
    L.insert(sub('d', ['x', 'y', 'z']));
    assert.equal(L.sTop - s0, 4, 'a freed run of the same length is taken again');
    const live = [0, 1, 2, 3].filter((f) => (L.fMeta[f] & META_NAMES) !== 0 && L.fCon[f] === freed);
    assert.equal(live.length, 1, 'only the new filter names the run');
  });

  it('a filter with a value to compare keeps its constraint slots (tags after the constraints)', () => {
    const L = new GpuLayout();
    const c0 = L.cTop;
    L.insert(validateSubscription({ id: 'a', owner: 'd', filters: [{ constraints: [{ name: 'kind', op: 'eq', value: 'x' }], tags: ['t'] }] }, limits));
    assert.equal(L.cTop - c0, 2);
    assert.equal(L.fMeta[0] & META_NAMES, 0);
    const s0 = L.sTop;
    L.insert(sub('b', ['t'], [], true));
    assert.ok((L.fMeta[1] & META_NAMES) !== 0, 'an area beside names only still keeps names only');
    assert.equal(L.sTop - s0, 1, 'with an area fPos is its position slot, so every name is in the run');
  });
});
