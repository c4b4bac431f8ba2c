/**
 * Matching results (docs/semantics.md §5 R): one id per subscription, batches in order, no
 * state change.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { snapshot, sorted } from '../assertions.js';
import { anchored, c, type ContractContext, ev, fixed, ids, sub } from './common.js';

export function resultRules({ open }: ContractContext): void {
  describe('results', () => {
    it('[R2][R3] a subscription with several matching filters is returned once', () =>
      open(async (m) => {
        m.updatePosition('d', 0, 0);
        m.add(sub('multi', 'd', { constraints: [] }, { constraints: [], area: anchored(100) }, { constraints: [c('a', 'exists')], area: fixed(100, 0, 0) }, { constraints: [c('a', 'eq', 1)] }, { constraints: [c('a', 'ge', 1)], area: anchored(1e6) }));
        for (let i = 0; i < 50; i++) m.add(sub(`s${i}`, 'd', { constraints: [c('a', 'eq', 1)] }, { constraints: [c('a', 'le', 1)] }, { constraints: [], area: anchored(10 + i) }));
        const r = await m.match(ev({ a: 1 }));
        assert.equal(r.length, new Set(r).size, 'no duplicates');
        assert.equal(r.length, 51);
        assert.ok(r.includes('multi'));
        const [b] = await m.matchBatch([ev({ a: 1 })]);
        assert.equal(b.length, 51);
      }));

    it('[R4] matchBatch returns one result per event, in order, as match would', () =>
      open(async (m) => {
        for (let i = 0; i < 8; i++) m.add(sub(`s${i}`, 'd', { constraints: [c('i', 'eq', i)] }, { constraints: [c('all', 'exists')] }));
        const events = [ev({ i: 3 }), ev({ i: 0 }), ev({}), ev({ all: false }), ev({ i: 7 }, 90, 0), ev({ i: 3 })];
        const batch = await m.matchBatch(events);
        assert.equal(batch.length, events.length);
        for (let k = 0; k < events.length; k++) assert.deepEqual(sorted(batch[k]), await ids(m, events[k]), `event ${k}`);
        assert.deepEqual(batch.map(sorted), [['s3'], ['s0'], [], ['s0', 's1', 's2', 's3', 's4', 's5', 's6', 's7'], ['s7'], ['s3']]);
        assert.deepEqual(await m.matchBatch([]), []);
      }));

    it('[R5] matching changes nothing', () =>
      open(async (m) => {
        m.updatePosition('d', 1, 1);
        m.add(sub('s', 'd', { constraints: [c('a', 'eq', 1)], area: anchored(1000) }));
        const e = ev({ a: 1 }, 1, 1);
        const before = await snapshot(m, ['s'], [e]);
        for (let i = 0; i < 5; i++) assert.deepEqual(await ids(m, e), ['s']);
        await m.matchBatch([e, e, e]);
        assert.deepEqual(await snapshot(m, ['s'], [e]), before);
      }));
  });
}
