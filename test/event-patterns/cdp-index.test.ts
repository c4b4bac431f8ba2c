/**
 * CdpSequencer's hash index runs against the retention bound (docs/semantics.md E15, E16): an
 * element keeps at most maxRetainedPerElement events, so what its index holds must stay bounded
 * too, whether or not a terminator ever reads the key again. White-box: it reads the sequencer's
 * private columns.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { CdpSequencer } from '../../src/engines/event-patterns/cdp.js';
import { DEFAULT_PATTERN_LIMITS, validateEventPattern } from '../../src/model/event-patterns.js';
import { resolveLimits, validateEvent } from '../../src/model/limits.js';

const LIMITS = resolveLimits();
const ANY = { constraints: [{ name: 'zone', op: 'exists' as const }] };

/** t (terminator) and s within 10 ms before it, in the same zone: step 1 is indexed by zone. */
const PATTERN = validateEventPattern(
  'pattern',
  {
    steps: [
      { name: 't', filter: ANY },
      { name: 's', filter: ANY, withinMs: 10 },
    ],
    parameters: [{ left: { step: 't', attribute: 'zone' }, op: 'eq', right: { step: 's', attribute: 'zone' } }],
  },
  LIMITS,
  DEFAULT_PATTERN_LIMITS,
);

interface RunView {
  recs: unknown[];
  head: number;
}
interface ColumnView {
  run: RunView;
  index: Map<unknown, RunView> | null;
}

/** Records held by step 1's index runs (entries from each run's head on), and the number of keys. */
function indexHeld(cdp: CdpSequencer): { keys: number; records: number; arrays: number } {
  const st = (cdp as unknown as { patterns: Map<number, { columns: ColumnView[] }> }).patterns.get(0)!;
  const index = st.columns[1].index!;
  let records = 0;
  let arrays = 0;
  for (const r of index.values()) {
    records += r.recs.length - r.head;
    arrays += r.recs.length;
  }
  return { keys: index.size, records, arrays };
}

describe('CdpSequencer index runs stay within the retention bound', () => {
  it('[E15][E16] distinct keys never read again are not kept forever', () => {
    const cdp = new CdpSequencer({ maxRetainedPerElement: 10 });
    cdp.addPattern(0, PATTERN);
    for (let i = 0; i < 20_000; i++) {
      const ev = validateEvent({ id: `s${i}`, lat: 0, lon: 0, attributes: { zone: i } }, LIMITS);
      cdp.release(ev, i, [{ slot: 0, elements: [1] }]); // step 1 only: no terminator reads the index
    }
    assert.equal(cdp.stats().retained, 10);
    const held = indexHeld(cdp);
    assert.ok(held.keys <= 10, `the index keeps ${held.keys} keys for 10 retained events`);
    assert.ok(held.arrays <= 2 * 1024 + 20, `the index arrays hold ${held.arrays} entries for 10 retained events`);
  });

  it('[E15][E16] one key never read again does not grow without bound', () => {
    const cdp = new CdpSequencer({ maxRetainedPerElement: 10 });
    cdp.addPattern(0, PATTERN);
    for (let i = 0; i < 20_000; i++) {
      const ev = validateEvent({ id: `s${i}`, lat: 0, lon: 0, attributes: { zone: 'z' } }, LIMITS);
      cdp.release(ev, i, [{ slot: 0, elements: [1] }]);
    }
    assert.equal(cdp.stats().retained, 10);
    const held = indexHeld(cdp);
    assert.ok(held.arrays <= 2 * 1024 + 20, `the index arrays hold ${held.arrays} entries for 10 retained events`);
  });
});
