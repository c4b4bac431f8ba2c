/**
 * The recipients' id sort (services/matcher/core.ts `sortIds`) orders exactly as
 * `Array.prototype.sort()` does, short lists by insertion and long ones by the library.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { sortIds } from '../../services/matcher/core.js';
import { Prng } from '../../src/workload/prng.js';

describe('sortIds', () => {
  it('orders as Array.prototype.sort, by UTF-16 code units, repeats kept', () => {
    const rng = new Prng(11);
    const alphabet = ['a', 'B', 'b', '0', '-', 'é', '中', '🙂', '\uffff', '\ud800', ''];
    for (let k = 0; k < 3000; k++) {
      const ids = Array.from({ length: rng.int(0, 40) }, () => {
        let s = '';
        for (let i = rng.int(0, 4); i > 0; i--) s += alphabet[rng.int(0, alphabet.length - 1)];
        return s;
      });
      const want = [...ids].sort();
      sortIds(ids);
      assert.deepEqual(ids, want);
    }
  });
});
