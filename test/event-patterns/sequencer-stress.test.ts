/**
 * Randomized comparison of CdpSequencer against ReferenceSequencer through `release()` alone
 * (docs/semantics.md E7–E17), with hits made by hand instead of an element engine: long streams
 * (past the 1024-drop compaction of Run), a small maxRetainedPerElement, few distinct attribute
 * values of mixed types (1, '1', true, -0, 0, missing), an event often hitting several elements of
 * one pattern, several patterns hit by one release, consuming steps, and patterns added and
 * removed mid-stream. Every release's matches and the statistics must agree.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { CdpSequencer } from '../../src/engines/event-patterns/cdp.js';
import { ReferenceSequencer } from '../../src/engines/event-patterns/reference.js';
import type { PatternHits, Sequencer } from '../../src/engines/event-patterns/sequencer.js';
import { Prng } from '../../src/workload/prng.js';
import { type Installed, type StressKnobs, hitsOf, install, makeEvent, matchKey } from '../support/sequencer-stream.js';

export type { StressKnobs };

export interface StressResult {
  /** The first disagreement, or null. */
  diff: string | null;
  matches: number;
  stats: { retained: number; evicted: number; consumed: number };
  restarts: number;
}

/** Runs one seed through both sequencers. */
export function compareSequencers(seed: number, k: StressKnobs): StressResult {
  const r = new Prng(seed);
  let ref = new ReferenceSequencer({ maxRetainedPerElement: k.maxRetained });
  let cdp = new CdpSequencer({ maxRetainedPerElement: k.maxRetained });
  const seqs: Sequencer[] = [ref, cdp];
  let restarts = 0;
  const live: Installed[] = [];
  let slot = 0;
  for (let i = 0; i < k.patterns; i++) live.push(install(r, k, slot++, seqs));
  let t = 1000;
  let matches = 0;
  for (let e = 0; e < k.events; e++) {
    if (r.chance(k.churn) && live.length > 0) {
      const gone = live.splice(r.int(0, live.length - 1), 1)[0];
      for (const s of seqs) s.removePattern(gone.slot);
    }
    if (r.chance(k.churn)) live.push(install(r, k, slot++, seqs));
    if (k.restartEvery !== undefined && e > 0 && e % k.restartEvery === 0) {
      const a = ref.snapshot();
      const b = cdp.snapshot();
      if (JSON.stringify(a) !== JSON.stringify(b)) return { diff: `seed ${seed}, release ${e}: the snapshots differ`, matches, stats: ref.stats(), restarts };
      const patterns = new Map(live.map((p) => [p.slot, p.pattern]));
      ref = new ReferenceSequencer({ maxRetainedPerElement: k.maxRetained });
      ref.restore(structuredClone(b), patterns);
      cdp = new CdpSequencer({ maxRetainedPerElement: k.maxRetained });
      cdp.restore(structuredClone(a), patterns);
      seqs[0] = ref;
      seqs[1] = cdp;
      restarts++;
    }
    t += r.int(0, k.maxGap);
    const ev = makeEvent(r, e);
    const hits = hitsOf(live, ev);
    const a = ref.release(ev, t, hits).map(matchKey).sort();
    const b = cdp.release(ev, t, hits).map(matchKey).sort();
    matches += a.length;
    const sa = ref.stats();
    const sb = cdp.stats();
    if (JSON.stringify(a) !== JSON.stringify(b) || JSON.stringify(sa) !== JSON.stringify(sb)) {
      const diff = `seed ${seed}, release ${e} (time ${t}): reference ${JSON.stringify(a)} ${JSON.stringify(sa)}, cdp ${JSON.stringify(b)} ${JSON.stringify(sb)}`;
      return { diff, matches, stats: sa, restarts };
    }
  }
  return { diff: null, matches, stats: ref.stats(), restarts };
}

const SETS: [string, StressKnobs, number][] = [
  ['tight retention, consuming, 20k events', { patterns: 6, events: 20_000, maxRetained: 3, maxWindow: 40, maxGap: 3, consuming: 0.5, churn: 0 }, 6],
  ['retention 1, many ties, 20k events', { patterns: 6, events: 20_000, maxRetained: 1, maxWindow: 20, maxGap: 1, consuming: 0.5, churn: 0 }, 6],
  ['wide windows (eviction, not expiry, drops), 20k events', { patterns: 5, events: 20_000, maxRetained: 4, maxWindow: 100_000, maxGap: 2, consuming: 0.4, churn: 0 }, 6],
  ['expiry and eviction interleaved, churn', { patterns: 8, events: 10_000, maxRetained: 5, maxWindow: 60, maxGap: 5, consuming: 0.3, churn: 0.002 }, 6],
  ['no consuming, large bound', { patterns: 6, events: 5_000, maxRetained: 50, maxWindow: 200, maxGap: 4, consuming: 0, churn: 0.001 }, 4],
  ['bound above the 1024-drop compaction, no each', { patterns: 3, events: 6_000, maxRetained: 1_100, maxWindow: 2_000_000, maxGap: 2, consuming: 0.5, churn: 0, noEach: true }, 2],
  ['restarts from snapshots, restored crosswise, every 97 releases', { patterns: 6, events: 5_000, maxRetained: 4, maxWindow: 50, maxGap: 3, consuming: 0.4, churn: 0.002, restartEvery: 97 }, 4],
];

describe('CdpSequencer agrees with ReferenceSequencer over long random streams', () => {
  for (const [name, knobs, seeds] of SETS) {
    it(name, () => {
      let matches = 0;
      let evicted = 0;
      let consumed = 0;
      for (let seed = 1; seed <= seeds; seed++) {
        const res = compareSequencers(seed * 7919 + knobs.events, knobs);
        assert.equal(res.diff, null, res.diff ?? undefined);
        if (knobs.restartEvery !== undefined) assert.ok(res.restarts > 0, 'no restart');
        matches += res.matches;
        evicted += res.stats.evicted;
        consumed += res.stats.consumed;
      }
      // The workload exercises what it is meant to.
      assert.ok(matches > 0, 'no matches');
      assert.ok(evicted > 0 || knobs.maxRetained > 10, 'no evictions');
      assert.ok(consumed > 0 || knobs.consuming === 0, 'nothing consumed');
    });
  }
});
