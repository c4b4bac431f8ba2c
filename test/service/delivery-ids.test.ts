/** Delivery ids ("<ms>-<seq>"): the hand-written parser against the pattern it implements. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { compareDeliveryIds, parseDeliveryId } from '../../services/hub/port.js';
import { Prng } from '../../src/workload/prng.js';

/** The rule, written as a pattern: two runs of 1-16 digits around one '-', both safe integers. */
function oracle(id: string): [number, number] | null {
  const m = /^(\d{1,16})-(\d{1,16})$/.exec(id);
  if (m === null) return null;
  const a = Number(m[1]);
  const b = Number(m[2]);
  return Number.isSafeInteger(a) && Number.isSafeInteger(b) ? [a, b] : null;
}

describe('delivery ids', () => {
  it('parse like the pattern at the edges', () => {
    const cases = ['', '-', '1-', '-1', '1-1', '0-0', '00001-00002', '1234567890123456-1234567890123456', '12345678901234567-1', '1-12345678901234567', '9007199254740993-1', '1-9007199254740991', '9999999999999999-1', 'a-1', '1-a', '1--1', '1-1-', ' 1-1', '1-1 ', '１-1', '1_1', '1.5-2'];
    for (const c of cases) assert.deepEqual(parseDeliveryId(c), oracle(c), JSON.stringify(c));
  });

  it('parse like the pattern over a seeded sweep', () => {
    const rng = new Prng(7);
    const chars = '0123456789-a .';
    for (let k = 0; k < 20_000; k++) {
      let s = '';
      for (let i = rng.int(0, 36); i > 0; i--) s += chars[rng.int(0, rng.chance(0.9) ? 9 : chars.length - 1)];
      if (rng.chance(0.6)) {
        const at = rng.int(0, s.length);
        s = `${s.slice(0, at)}-${s.slice(at)}`;
      }
      assert.deepEqual(parseDeliveryId(s), oracle(s), JSON.stringify(s));
    }
  });

  it('order by time, then ordinal; the empty id first', () => {
    assert.ok(compareDeliveryIds('', '0-1') < 0);
    assert.ok(compareDeliveryIds('5-9', '10-1') < 0);
    assert.ok(compareDeliveryIds('10-2', '10-10') < 0);
    assert.equal(compareDeliveryIds('7-7', '7-7'), 0);
    assert.throws(() => compareDeliveryIds('7-7', 'x'), /malformed delivery id "x"/);
    assert.throws(() => compareDeliveryIds('x', '7-7'), /malformed delivery id "x"/);
    // Over random pairs: the sign of the numbers' order.
    const rng = new Prng(11);
    const id = () => `${rng.int(0, 3) === 0 ? rng.int(0, 2 ** 44) : rng.int(0, 20)}-${rng.int(0, 3) === 0 ? rng.int(0, 2 ** 40) : rng.int(0, 20)}`;
    for (let k = 0; k < 5000; k++) {
      const a = id();
      const b = id();
      const [x, y] = [oracle(a)!, oracle(b)!];
      assert.equal(Math.sign(compareDeliveryIds(a, b)), Math.sign(x[0] - y[0] || x[1] - y[1]), `${a} vs ${b}`);
    }
  });
});
