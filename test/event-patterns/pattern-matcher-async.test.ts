/**
 * PatternMatcher against docs/semantics.md §9 where its element engine answers asynchronously or
 * fails (as the GPU engine may: its queue matches a job against the state at dispatch, and a batch
 * can fail), and where release order meets advanceTo (E3).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { CdpSequencer } from '../../src/engines/event-patterns/cdp.js';
import { PatternMatcher, type PatternNotification, type TimedInput } from '../../src/engines/event-patterns/pattern-matcher.js';
import { FastMatcher } from '../../src/engines/index.js';
import type { Event, Filter } from '../../src/model/types.js';

const ORIGIN = { lat: 45.46, lon: 9.19 };
const FAR = { lat: 46.46, lon: 9.19 };
const kind = (k: string, area?: Filter['area']): Filter => ({ constraints: [{ name: 'kind', op: 'eq', value: k }], ...(area === undefined ? {} : { area }) });

function ev(id: string, timeMs: number, attributes: Record<string, string | number | boolean>, where = ORIGIN): TimedInput {
  return { timeMs, event: { id, lat: where.lat, lon: where.lon, attributes } };
}

const ids = (ns: PatternNotification[]): string[] => ns.map((n) => `${n.subscription}:${n.steps.map((s) => s.event.id).join(',')}`).sort();

/** t (terminator) preceded by an a within 100 ms; a's filter optionally anchored to the owner. */
const twoSteps = (id: string, area?: Filter['area']) => ({
  id,
  owner: 'phone',
  pattern: {
    steps: [
      { name: 't', filter: kind('t') },
      { name: 'a', filter: kind('a', area), withinMs: 100 },
    ],
  },
});

type MatchBatch = (events: readonly Event[]) => Promise<string[][]>;

/** A FastMatcher whose matchBatch is replaced; `orig` matches against the state when it is called. */
function elements(wrap: (orig: MatchBatch) => MatchBatch): FastMatcher {
  const m = new FastMatcher();
  const orig: MatchBatch = m.matchBatch.bind(m);
  m.matchBatch = wrap(orig);
  return m;
}

/** Matches on a later turn of the event loop, against the state then (a queued GPU job). */
const deferred = (orig: MatchBatch): MatchBatch => (events) => new Promise((res, rej) => setImmediate(() => orig(events).then(res, rej)));

describe('PatternMatcher', () => {
  it('[E3][E4] searches run in release order even when an earlier call\'s element matching fails', async () => {
    let call = 0;
    let finishFirst!: () => void;
    const m = elements((orig) => (events) => {
      call++;
      if (call === 1) return new Promise((res) => (finishFirst = () => void orig(events).then(res)));
      if (call === 2) return Promise.reject(new Error('element engine failure'));
      return orig(events);
    });
    const pm = new PatternMatcher({ elements: m, sequencer: new CdpSequencer() });
    pm.add(twoSteps('p'));
    const p1 = pm.publish([ev('a1', 1, { kind: 'a' })]);
    const p2 = pm.publish([ev('x', 2, { kind: 'x' })]);
    const p3 = pm.publish([ev('t1', 3, { kind: 't' })]);
    const refused = assert.rejects(p2, /element engine failure/);
    // Give the third call every chance to run its search before the first call's matching ends.
    for (let k = 0; k < 3; k++) await new Promise((r) => setImmediate(r));
    finishFirst();
    await p1;
    await refused;
    // a1 was released before t1, within 100 ms: t1's search must see it.
    assert.deepEqual(ids(await p3), ['p:t1,a1']);
    await pm.close();
  });

  it('[E17] a pattern added after a publish call gets no history from that call, however late its matching ends', async () => {
    const pm = new PatternMatcher({ elements: elements(deferred), sequencer: new CdpSequencer() });
    const p1 = pm.publish([ev('a1', 1, { kind: 'a' })]); // released now, before the pattern exists
    pm.add(twoSteps('p'));
    await p1;
    assert.deepEqual(ids(await pm.publish([ev('t1', 3, { kind: 't' })])), []);
    await pm.close();
  });

  it('[E5] an anchored element is matched against the owner position at release, not when the element engine gets to it', async () => {
    const pm = new PatternMatcher({ elements: elements(deferred), sequencer: new CdpSequencer() });
    pm.updatePosition('phone', ORIGIN.lat, ORIGIN.lon);
    pm.add(twoSteps('p', { radiusM: 500 }));
    const p1 = pm.publish([ev('a1', 1, { kind: 'a' })]); // at the owner's position when released
    pm.updatePosition('phone', FAR.lat, FAR.lon); // the move comes after the release
    await p1;
    assert.deepEqual(ids(await pm.publish([ev('t1', 3, { kind: 't' })])), ['p:t1,a1']);
    await pm.close();
  });

  it('[L4] events are checked under the element engine\'s limits: one it would refuse fails the call up front and changes nothing', async () => {
    const pm = new PatternMatcher({ elements: new FastMatcher({ limits: { maxAttributesPerEvent: 8 } }), sequencer: new CdpSequencer() });
    pm.add(twoSteps('p'));
    const wide: Record<string, string | number | boolean> = { kind: 'a' };
    for (let i = 0; i < 8; i++) wide[`k${i}`] = i;
    assert.throws(() => pm.publish([ev('a1', 5, { kind: 'a' }), ev('w', 6, wide)]), { code: 'INVALID_ARGUMENT', field: 'events[1].event.attributes' });
    assert.equal(pm.stats().released, 0);
    await pm.publish([ev('a2', 5, { kind: 'a' })]);
    assert.equal(pm.stats().late, 0);
    assert.deepEqual(ids(await pm.publish([ev('t1', 7, { kind: 't' })])), ['p:t1,a2']);
    await pm.close();
  });

  it('[E3] advanceTo past an event gives up the lateness guarantee: an event within L of every earlier arrival is late behind it', async () => {
    const pm = new PatternMatcher({ elements: new FastMatcher(), sequencer: new CdpSequencer(), latenessMs: 10 });
    pm.add(twoSteps('p'));
    await pm.publish([ev('a1', 100, { kind: 'a' })]); // waits: the watermark is 90
    await pm.advanceTo(200); // the watermark is 190: a1 is released
    // b arrives 5 ms older than a1, the only event that arrived before it: within L = 10, but
    // the clock released a1 already.
    await pm.publish([ev('b', 95, { kind: 'a' })]);
    assert.equal(pm.stats().late, 1);
    // Without the clock, the same arrivals are not late.
    const quiet = new PatternMatcher({ elements: new FastMatcher(), sequencer: new CdpSequencer(), latenessMs: 10 });
    quiet.add(twoSteps('p'));
    await quiet.publish([ev('a1', 100, { kind: 'a' })]);
    await quiet.publish([ev('b', 95, { kind: 'a' })]);
    assert.equal(quiet.stats().late, 0);
    await quiet.close();
    await pm.close();
  });

  it('[E5] a change the element engine refuses while a match is in flight fails every later call with UNAVAILABLE', async () => {
    const m = elements(deferred);
    const pm = new PatternMatcher({ elements: m, sequencer: new CdpSequencer() });
    pm.add(twoSteps('p'));
    m.updatePosition = () => {
      throw new Error('engine refused the position');
    };
    const p1 = pm.publish([ev('a1', 1, { kind: 'a' })]);
    pm.updatePosition('phone', ORIGIN.lat, ORIGIN.lon); // queued behind the match, refused later
    await p1;
    assert.throws(() => pm.publish([ev('t1', 2, { kind: 't' })]), { code: 'UNAVAILABLE', message: /engine refused the position/ });
    // With nothing in flight the engine's refusal is the caller's, at once.
    const direct = new PatternMatcher({ elements: elements((o) => o), sequencer: new CdpSequencer() });
    (direct as unknown as { elements: FastMatcher }).elements.updatePosition = () => {
      throw new Error('refused now');
    };
    assert.throws(() => direct.updatePosition('phone', 0, 0), /refused now/);
    await pm.close();
    await direct.close();
  });

  it('[E20] an aggregate named __proto__ is reported under its name like any other', async () => {
    const pm = new PatternMatcher({ elements: new FastMatcher(), sequencer: new CdpSequencer() });
    pm.add({
      id: 'p',
      owner: 'phone',
      pattern: { steps: [{ name: 't', filter: kind('t') }], aggregates: [{ name: '__proto__', fn: 'count', filter: kind('a'), before: 't', withinMs: 100 }] },
    });
    await pm.publish([ev('a1', 1, { kind: 'a' }), ev('a2', 2, { kind: 'a' })]);
    const [n] = await pm.publish([ev('t1', 3, { kind: 't' })]);
    assert.ok(Object.prototype.hasOwnProperty.call(n.aggregates, '__proto__'), 'the aggregate is missing from the notification');
    assert.equal(Object.getOwnPropertyDescriptor(n.aggregates, '__proto__')?.value, 2);
    await pm.close();
  });
});
