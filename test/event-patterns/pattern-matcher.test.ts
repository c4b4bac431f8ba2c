/**
 * Pattern subscriptions end to end through PatternMatcher (docs/semantics.md §9): event times and
 * release order (E2, E3), elements matched at release against the owner's position then (E5),
 * lifecycle (E17), notifications (E20), and the all-or-nothing validation of its calls.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { CdpSequencer } from '../../src/engines/event-patterns/cdp.js';
import { PatternMatcher, type PatternNotification, type TimedInput } from '../../src/engines/event-patterns/pattern-matcher.js';
import { ReferenceSequencer } from '../../src/engines/event-patterns/reference.js';
import { FastMatcher, ReferenceMatcher } from '../../src/engines/index.js';
import type { EventPattern, PatternSubscription } from '../../src/model/event-patterns.js';
import type { Filter } from '../../src/model/types.js';
import { pointAt } from '../support/sphere.js';

const ORIGIN = { lat: 45.46, lon: 9.19 };
const at = (bearing: number, m: number) => pointAt(ORIGIN.lat, ORIGIN.lon, bearing, m);
const kind = (k: string, area?: Filter['area']): Filter => ({ constraints: [{ name: 'kind', op: 'eq', value: k }], ...(area === undefined ? {} : { area }) });

/** smoke (terminator) and the last temperature > 45 in the same zone within 5 s before it. */
const FIRE: EventPattern = {
  steps: [
    { name: 'smoke', filter: kind('smoke', { radiusM: 300 }) },
    { name: 'temp', filter: { constraints: [{ name: 'kind', op: 'eq', value: 'temp' }, { name: 'value', op: 'gt', value: 45 }] }, selection: 'last', withinMs: 5000 },
  ],
  parameters: [{ left: { step: 'smoke', attribute: 'zone' }, op: 'eq', right: { step: 'temp', attribute: 'zone' } }],
  aggregates: [{ name: 'avgTemp', fn: 'avg', attribute: 'value', filter: kind('temp'), before: 'smoke', withinMs: 5000, parameters: [{ attribute: 'zone', op: 'eq', step: 'smoke', stepAttribute: 'zone' }] }],
};

function ev(id: string, timeMs: number, attributes: Record<string, string | number | boolean>, where = ORIGIN): TimedInput {
  return { timeMs, event: { id, lat: where.lat, lon: where.lon, attributes } };
}

const ids = (ns: PatternNotification[]): string[] => ns.map((n) => `${n.subscription}:${n.steps.map((s) => s.event.id).join(',')}`).sort();

function make(o: { latenessMs?: number; reference?: boolean } = {}): PatternMatcher {
  return o.reference
    ? new PatternMatcher({ elements: new ReferenceMatcher(), sequencer: new ReferenceSequencer(), latenessMs: o.latenessMs })
    : new PatternMatcher({ elements: new FastMatcher(), sequencer: new CdpSequencer(), latenessMs: o.latenessMs });
}

const fire = (id = 'fire', owner = 'phone'): PatternSubscription => ({ id, owner, pattern: FIRE });

for (const reference of [false, true]) {
  const label = reference ? 'reference' : 'cdp';
  describe(`PatternMatcher (${label})`, () => {
    it('[E20] a match is one notification with the steps by name, their times and the aggregates', async () => {
      const pm = make({ reference });
      pm.updatePosition('phone', ORIGIN.lat, ORIGIN.lon);
      pm.add(fire());
      await pm.publish([ev('t1', 1000, { kind: 'temp', value: 40, zone: 'a' }), ev('t2', 2000, { kind: 'temp', value: 50, zone: 'a' }), ev('t3', 2500, { kind: 'temp', value: 60, zone: 'b' })]);
      const got = await pm.publish([ev('s1', 3000, { kind: 'smoke', zone: 'a' }, at(0, 100))]);
      assert.equal(got.length, 1);
      const n = got[0];
      assert.equal(n.subscription, 'fire');
      assert.equal(n.owner, 'phone');
      assert.deepEqual(n.steps.map((s) => [s.step, s.event.id, s.timeMs]), [['smoke', 's1', 3000], ['temp', 't2', 2000]]);
      assert.deepEqual({ ...n.aggregates }, { avgTemp: 45 }); // zone a: 40 and 50
      assert.equal(n.steps[1].event.values[n.steps[1].event.names.indexOf('value')], 50);
      await pm.close();
    });

    it('[E20] an aggregate whose value does not exist is absent from the notification', async () => {
      const pm = make({ reference });
      pm.add({ id: 'p', owner: 'o', pattern: { steps: [{ name: 'x', filter: kind('x') }], aggregates: [{ name: 'lo', fn: 'min', attribute: 'v', filter: kind('y'), before: 'x', withinMs: 10 }] } });
      const [n] = await pm.publish([ev('x1', 5, { kind: 'x' })]);
      assert.deepEqual({ ...n.aggregates }, {});
      await pm.close();
    });

    it('[E5] an anchored step is decided against the owner position at release; a later move changes nothing', async () => {
      const pm = make({ reference });
      const p: EventPattern = {
        steps: [
          { name: 'b', filter: kind('b') },
          { name: 'a', filter: kind('a', { radiusM: 500 }), withinMs: 10_000 },
        ],
      };
      pm.updatePosition('phone', ORIGIN.lat, ORIGIN.lon);
      pm.add({ id: 'p', owner: 'phone', pattern: p });
      await pm.publish([ev('near', 1, { kind: 'a' }, at(90, 400)), ev('far', 2, { kind: 'a' }, at(90, 2000))]);
      // The device moves next to 'far': 'far' did not match at its release, and still does not count.
      const there = at(90, 2000);
      pm.updatePosition('phone', there.lat, there.lon);
      assert.deepEqual(ids(await pm.publish([ev('b1', 3, { kind: 'b' })])), ['p:b1,near']);
      // A new 'a' near the new position counts.
      await pm.publish([ev('near2', 4, { kind: 'a' }, at(90, 1800))]);
      assert.deepEqual(ids(await pm.publish([ev('b2', 5, { kind: 'b' })])), ['p:b2,near2']);
      // Forgetting the position: anchored elements match nothing (E17, A6).
      pm.removeDevice('phone');
      await pm.publish([ev('a3', 6, { kind: 'a' }, there)]);
      assert.deepEqual(ids(await pm.publish([ev('b3', 7, { kind: 'b' })])), ['p:b3,near2']);
      await pm.close();
    });

    it('[E2][E3] with lateness 0 an event earlier than one released is late: counted, never part of a pattern', async () => {
      const pm = make({ reference });
      pm.add({ id: 'p', owner: 'o', pattern: { steps: [{ name: 'b', filter: kind('b') }, { name: 'a', filter: kind('a'), withinMs: 100 }] } });
      await pm.publish([ev('a1', 10, { kind: 'a' })]);
      await pm.publish([ev('x', 20, { kind: 'x' })]);
      assert.deepEqual(await pm.publish([ev('a0', 15, { kind: 'a' }), ev('b0', 19, { kind: 'b' })]), []); // both late
      assert.equal(pm.stats().late, 2);
      assert.deepEqual(ids(await pm.publish([ev('b1', 20, { kind: 'b' })])), ['p:b1,a1']); // equal time is not late
      assert.equal(pm.stats().released, 3);
      await pm.close();
    });

    it('[E3] within one call, an event released by an earlier one makes a later, earlier-timed one late', async () => {
      const pm = make({ reference });
      pm.add({ id: 'p', owner: 'o', pattern: { steps: [{ name: 'b', filter: kind('b') }, { name: 'a', filter: kind('a'), withinMs: 100 }] } });
      assert.deepEqual(await pm.publish([ev('b1', 10, { kind: 'b' }), ev('a1', 5, { kind: 'a' })]), []);
      assert.equal(pm.stats().late, 1);
      await pm.close();
    });

    it('[E3][E4] a lateness bound holds events and releases them in time order, ties by arrival', async () => {
      const pm = make({ latenessMs: 10, reference });
      pm.add({ id: 'p', owner: 'o', pattern: { steps: [{ name: 'b', filter: kind('b') }, { name: 'a', filter: kind('a'), selection: 'each', withinMs: 100 }] } });
      // b1 at 20 arrives before a1 at 15 and a2 at 20: released after them, so both count.
      assert.deepEqual(await pm.publish([ev('b1', 20, { kind: 'b' }), ev('a1', 15, { kind: 'a' })]), []);
      assert.equal(pm.stats().buffered, 2);
      assert.deepEqual(await pm.publish([ev('a2', 20, { kind: 'a' })]), []);
      // The watermark reaches 20 at time 30: b1 first (it arrived before a2 at the same time).
      assert.deepEqual(ids(await pm.publish([ev('x', 30, { kind: 'x' })])), ['p:b1,a1']);
      assert.equal(pm.stats().buffered, 1);
      assert.equal(pm.stats().late, 0);
      // 25 is below no released time (20): not late, and released in order before x.
      await pm.publish([ev('a3', 25, { kind: 'a' })]);
      assert.deepEqual(ids(await pm.advanceTo(40)), []);
      assert.equal(pm.stats().buffered, 0);
      assert.deepEqual(ids(await pm.publish([ev('b2', 50, { kind: 'b' })])), []);
      assert.deepEqual(ids(await pm.advanceTo(60)), ['p:b2,a1', 'p:b2,a2', 'p:b2,a3']);
      await pm.close();
    });

    it('[E17] add starts with no history; replace discards it; remove drops the pattern', async () => {
      const pm = make({ reference });
      await pm.publish([ev('a0', 1, { kind: 'a' })]);
      const p = (k: string): PatternSubscription => ({ id: 'p', owner: 'o', pattern: { steps: [{ name: 'b', filter: kind('b') }, { name: 'a', filter: kind(k), withinMs: 100 }] } });
      pm.add(p('a'));
      assert.deepEqual(await pm.publish([ev('b0', 2, { kind: 'b' })]), []); // a0 came before the add
      await pm.publish([ev('a1', 3, { kind: 'a' })]);
      pm.replace(p('a'));
      assert.deepEqual(await pm.publish([ev('b1', 4, { kind: 'b' })]), []);
      await pm.publish([ev('a2', 5, { kind: 'a' })]);
      assert.deepEqual(ids(await pm.publish([ev('b2', 6, { kind: 'b' })])), ['p:b2,a2']);
      assert.equal(pm.remove('p'), true);
      assert.equal(pm.remove('p'), false);
      assert.deepEqual(await pm.publish([ev('b3', 7, { kind: 'b' })]), []);
      assert.deepEqual({ subs: pm.stats().subscriptions, el: pm.stats().elements, retained: pm.stats().retained }, { subs: 0, el: 0, retained: 0 });
      await pm.close();
    });

    it('[E19] add, replace and publish refuse bad input whole, naming the field, and change nothing', async () => {
      const pm = make({ reference });
      pm.add(fire());
      assert.throws(() => pm.add(fire()), { code: 'ALREADY_EXISTS', field: 'subscription.id' });
      assert.throws(() => pm.replace(fire('nope')), { code: 'NOT_FOUND', field: 'subscription.id' });
      assert.throws(() => pm.add({ ...fire('bad'), pattern: { ...FIRE, steps: [FIRE.steps[0], { ...FIRE.steps[1], withinMs: 0 }] } }), { code: 'INVALID_ARGUMENT', field: 'subscription.pattern.steps[1].withinMs' });
      assert.equal(pm.has('bad'), false);
      assert.throws(() => pm.replace({ ...fire(), pattern: { steps: [] } }), { code: 'INVALID_ARGUMENT', field: 'subscription.pattern.steps' });
      assert.deepEqual(pm.get('fire')?.pattern.steps.map((s) => s.name), ['smoke', 'temp']);
      const before = pm.stats();
      assert.throws(() => pm.publish([ev('ok', 1, { kind: 'temp', value: 50, zone: 'a' }), { timeMs: 1.5, event: { id: 'x', lat: 0, lon: 0, attributes: {} } }]), { code: 'INVALID_ARGUMENT', field: 'events[1].timeMs' });
      assert.throws(() => pm.publish([{ timeMs: 1, event: { id: 'x', lat: 91, lon: 0, attributes: {} } }]), { code: 'INVALID_ARGUMENT', field: 'events[0].event.lat' });
      assert.throws(() => pm.publish([{ timeMs: -1, event: { id: 'x', lat: 0, lon: 0, attributes: {} } }]), { code: 'INVALID_ARGUMENT', field: 'events[0].timeMs' });
      assert.throws(() => pm.publish('nope' as never), { code: 'INVALID_ARGUMENT', field: 'events' });
      assert.throws(() => pm.advanceTo(Number.NaN), { code: 'INVALID_ARGUMENT', field: 'timeMs' });
      assert.deepEqual(pm.stats(), before);
      assert.throws(() => new PatternMatcher({ elements: new FastMatcher(), latenessMs: -1 }), { code: 'INVALID_ARGUMENT', field: 'latenessMs' });
      await pm.close();
      assert.throws(() => pm.publish([]), { code: 'FAILED_PRECONDITION' });
    });

    it('[E3][E17] with no pattern installed events still move the release order, as they do with one installed', async () => {
      // `bare` has no pattern (its publishes skip the element engine); `busy` has one that never
      // matches. Both must release, count late events and then match a new pattern alike.
      const never: PatternSubscription = { id: 'never', owner: 'phone', pattern: { steps: [{ name: 'x', filter: kind('nothing') }] } };
      const bare = make({ reference });
      const busy = make({ reference });
      busy.add(never);
      for (const pm of [bare, busy]) pm.updatePosition('phone', ORIGIN.lat, ORIGIN.lon);
      const early = [ev('t1', 1000, { kind: 'temp', value: 50, zone: 'a' }), ev('t0', 900, { kind: 'temp', value: 70, zone: 'a' }), ev('t2', 1000, { kind: 'temp', value: 55, zone: 'a' })];
      for (const pm of [bare, busy]) assert.deepEqual(await pm.publish(early), []);
      const pick = (pm: PatternMatcher) => ({ late: pm.stats().late, released: pm.stats().released, buffered: pm.stats().buffered });
      assert.deepEqual(pick(bare), { late: 1, released: 2, buffered: 0 });
      assert.deepEqual(pick(busy), pick(bare));
      for (const pm of [bare, busy]) pm.add(fire());
      // 950 is before the last release (1000): late for the new pattern too, in both.
      const later = [ev('t3', 950, { kind: 'temp', value: 90, zone: 'a' }), ev('t4', 2000, { kind: 'temp', value: 46, zone: 'a' }), ev('s1', 2500, { kind: 'smoke', zone: 'a' })];
      const got = await Promise.all([bare, busy].map((pm) => pm.publish(later)));
      assert.deepEqual(ids(got[0]), ['fire:s1,t4']);
      assert.deepEqual(ids(got[1]), ids(got[0]));
      assert.deepEqual(pick(busy), pick(bare));
      assert.deepEqual(pick(bare), { late: 2, released: 4, buffered: 0 });
      await Promise.all([bare.close(), busy.close()]);
    });

    it('[E5] an attribute named __proto__ is an ordinary name on its way to the element engine', async () => {
      const pm = make({ reference });
      pm.add({ id: 'p', owner: 'o', pattern: { steps: [{ name: 'x', filter: { constraints: [{ name: '__proto__', op: 'eq', value: 1 }] } }] } });
      assert.deepEqual(ids(await pm.publish([ev('e', 1, { ['__proto__']: 1 } as never)])), ['p:e']);
      const e = { timeMs: 2, event: { id: 'f', lat: 0, lon: 0, attributes: JSON.parse('{"__proto__": 1}') as Record<string, number> } };
      assert.deepEqual(ids(await pm.publish([e])), ['p:f']);
      await pm.close();
    });
  });
}
