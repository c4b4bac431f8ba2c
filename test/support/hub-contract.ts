/**
 * The contract every `Hub` runs (services/hub/port.ts), through its interface only: subscription
 * lifecycle and its errors, matching with exact recipients and reached counts, per-device order
 * and ids, acknowledgements and resume points, retention with an exact `missed`, and pulls that
 * wait and end. Like the engines' contract.ts, one suite, several implementations:
 *
 *   runHubContract('embedded', async (setup) => ({ hub: new EmbeddedHub(...), dispose: ... }));
 *
 * "Nothing else arrived" is asserted without timing: each device holds a `ping` subscription that
 * only its own ping event matches; a drain publishes that ping and pulls until it arrives, so what
 * came before it is exactly what the device was sent.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { AmbitError, type ErrorCode } from '../../src/model/errors.js';
import type { Event, Filter, Value } from '../../src/model/types.js';
import type { Retention } from '../../services/hub/embedded.js';
import { type Delivery, type DeviceSubscription, type DeviceSummary, type DrainableInbox, type Hub, type Inbox, PURGED_MESSAGE, type Revocation, compareDeliveryIds, parseDeliveryId, revocationKey } from '../../services/hub/port.js';

export interface HubSetup {
  retention?: Partial<Retention>;
  maxSubscriptionsPerDevice?: number;
}

export interface HubFixture {
  hub: Hub;
  /** Ends whatever the fixture started (the hub too, if still open). */
  dispose(): Promise<void>;
}

export type MakeHub = (setup: HubSetup) => Promise<HubFixture>;

// ---- places (Milan) and builders ----

/** Degrees of latitude per metre (spherical Earth, R = 6371 km). */
const DEG_PER_M = 180 / (Math.PI * 6_371_000);
export const P = { lat: 45.4642, lon: 9.19 };
/** About 11 km north of P. */
export const Q = { lat: 45.5642, lon: 9.19 };
export const north = (p: { lat: number; lon: number }, m: number) => ({ lat: p.lat + m * DEG_PER_M, lon: p.lon });

let seq = 0;
export function event(attributes: Record<string, Value>, at: { lat: number; lon: number } = P, id = `ev${++seq}`): Event {
  return { id, lat: at.lat, lon: at.lon, attributes };
}

export const eq = (name: string, value: Value) => ({ name, op: 'eq' as const, value });
export const anchored = (radiusM: number, ...constraints: Filter['constraints']): Filter => ({ constraints, area: { radiusM } });
export const fixed = (radiusM: number, center: { lat: number; lon: number }, ...constraints: Filter['constraints']): Filter => ({ constraints, area: { radiusM, center } });
export const anywhere = (...constraints: Filter['constraints']): Filter => ({ constraints });
export const sub = (id: string, ...filters: Filter[]): DeviceSubscription => ({ id, filters });

// ---- helpers ----

export async function rejectsWith(p: Promise<unknown>, code: ErrorCode, what: string): Promise<void> {
  await assert.rejects(p, (err: unknown) => {
    assert.ok(err instanceof AmbitError, `${what}: expected an AmbitError, got ${String(err)}`);
    assert.equal(err.code, code, `${what}: ${err.message}`);
    return true;
  });
}

/** Gives `device` its ping subscription (see the file comment). */
export async function addPing(hub: Hub, device: string): Promise<void> {
  await hub.addSubscription(device, sub('ping', anywhere(eq('ping', device))));
}

/** How long a pull the contract expects an answer to may wait before the test fails. */
const PULL_WAIT_MS = 10_000;

/**
 * One pull that the contract expects to be answered: one that is not, within PULL_WAIT_MS,
 * closes the inbox and fails the test, so the hub is disposed of instead of a test hanging.
 */
export async function pullOnce(inbox: Inbox, max: number): Promise<Delivery[]> {
  return within(inbox.pull(max), 'no notification came', () => inbox.close());
}

/** `p`, or a failure after PULL_WAIT_MS (after `onTimeout`, which lets go of what `p` waits on). */
async function within<T>(p: Promise<T>, what: string, onTimeout: () => void = () => {}): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const never = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      onTimeout();
      reject(new Error(`${what} within ${PULL_WAIT_MS} ms`));
    }, PULL_WAIT_MS);
  });
  try {
    return await Promise.race([p, never]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * A watcher of the hub's revocations: `heard` resolves with the first list it was told that
 * satisfies `ok` (at once if one came already), failing after PULL_WAIT_MS.
 */
function watchRevocations(hub: Hub): { heard: (ok: (all: readonly Revocation[]) => boolean, what: string) => Promise<readonly Revocation[]>; stop: () => void } {
  const lists: (readonly Revocation[])[] = [];
  const waiting = new Set<{ ok: (all: readonly Revocation[]) => boolean; resolve: (all: readonly Revocation[]) => void }>();
  const stop = hub.watchRevocations((all) => {
    lists.push(all);
    for (const w of [...waiting]) {
      if (!w.ok(all)) continue;
      waiting.delete(w);
      w.resolve(all);
    }
  });
  const heard = (ok: (all: readonly Revocation[]) => boolean, what: string): Promise<readonly Revocation[]> => {
    const hit = lists.find(ok);
    if (hit !== undefined) return Promise.resolve(hit);
    return within(new Promise((resolve) => waiting.add({ ok, resolve })), `the watcher did not hear ${what}`);
  };
  return { heard, stop };
}

/** Pulls until `n` notifications arrived (each pull may return fewer). */
export async function pullN(inbox: Inbox, n: number): Promise<Delivery[]> {
  const out: Delivery[] = [];
  while (out.length < n) {
    const got = await pullOnce(inbox, n - out.length);
    assert.ok(got.length > 0, `pull ended after ${out.length} of ${n} notifications`);
    out.push(...got);
  }
  return out;
}

/** Everything the device was sent up to now: publishes its ping and pulls until it arrives. */
export async function drain(hub: Hub, inbox: Inbox, device: string): Promise<Delivery[]> {
  const ping = event({ ping: device }, P, `ping-${device}-${++seq}`);
  const [r] = await hub.publish([ping]);
  assert.equal(r.reached, 1, `the ping of ${device} reaches its ping subscription only`);
  const out: Delivery[] = [];
  for (;;) {
    const got = await pullOnce(inbox, 100);
    assert.ok(got.length > 0, `inbox of ${device} ended before its ping`);
    for (const d of got) {
      if (d.event.id === ping.id) return out;
      out.push(d);
    }
  }
}

/** [event id, subscription ids] of each delivery: the shape the assertions compare. */
const shape = (ds: readonly Delivery[]) => ds.map((d) => [d.event.id, d.subscriptionIds] as [string, string[]]);

function assertIncreasing(ds: readonly Delivery[]): void {
  for (let i = 0; i < ds.length; i++) {
    assert.ok(parseDeliveryId(ds[i].deliveryId) !== null, `delivery id ${ds[i].deliveryId} is "<ms>-<seq>"`);
    if (i > 0) assert.ok(compareDeliveryIds(ds[i - 1].deliveryId, ds[i].deliveryId) < 0, `ids increase: ${ds[i - 1].deliveryId} < ${ds[i].deliveryId}`);
  }
}

/**
 * Whether `p` is still pending once another device's ping has gone through the hub (published,
 * stored and pulled): a pull that had anything to return, or gave up, would have settled by then.
 */
async function pendingAfterPing<T>(hub: Hub, p: Promise<T>, other: string): Promise<boolean> {
  let settled = false;
  void p.then(
    () => (settled = true),
    () => (settled = true),
  );
  await addPing(hub, other);
  const box = await hub.openInbox(other, null);
  await drain(hub, box, other);
  box.close();
  return !settled;
}

// ---- the suite ----

export function runHubContract(name: string, makeHub: MakeHub, options: { timeoutMs?: number } = {}): void {
  const timeout = options.timeoutMs ?? 15_000;
  const withHub = async (setup: HubSetup, body: (hub: Hub) => Promise<void>) => {
    const f = await makeHub(setup);
    try {
      await body(f.hub);
    } finally {
      await f.dispose();
    }
  };

  describe(`hub contract: ${name}`, { timeout }, () => {
    it('adds, replaces, lists and removes subscriptions; ALREADY_EXISTS and NOT_FOUND', () =>
      withHub({}, async (hub) => {
        const a = sub('a', anywhere(eq('kind', 'food')));
        const b = sub('b', anchored(100, eq('kind', 'fuel')));
        await hub.addSubscription('dev1', a);
        await hub.addSubscription('dev1', b);
        await rejectsWith(hub.addSubscription('dev1', sub('a', anywhere())), 'ALREADY_EXISTS', 'add of a taken id');
        await rejectsWith(hub.replaceSubscription('dev1', sub('c', anywhere())), 'NOT_FOUND', 'replace of a missing id');
        await rejectsWith(hub.removeSubscription('dev1', 'c'), 'NOT_FOUND', 'remove of a missing id');
        const a2 = sub('a', fixed(250, P, eq('kind', 'food'), eq('open', true)));
        await hub.replaceSubscription('dev1', a2);
        const byId = (s: DeviceSubscription[]) => [...s].sort((x, y) => (x.id < y.id ? -1 : 1));
        assert.deepEqual(byId(await hub.listSubscriptions('dev1')), [a2, b]);
        // Ids are per device: another device may use the same ones.
        await hub.addSubscription('dev2', a);
        await hub.removeSubscription('dev1', 'b');
        await rejectsWith(hub.removeSubscription('dev1', 'b'), 'NOT_FOUND', 'second remove');
        assert.deepEqual(await hub.listSubscriptions('dev1'), [a2]);
        assert.deepEqual(await hub.listSubscriptions('dev2'), [a]);
        assert.deepEqual(await hub.listSubscriptions('nobody'), []);
        assert.deepEqual(await hub.deviceInfo('dev1'), { subscriptions: [a2], location: null });
      }));

    it('refuses a subscription beyond the per-device cap with RESOURCE_EXHAUSTED', () =>
      withHub({ maxSubscriptionsPerDevice: 3 }, async (hub) => {
        for (const id of ['s1', 's2', 's3']) await hub.addSubscription('dev', sub(id, anywhere()));
        await rejectsWith(hub.addSubscription('dev', sub('s4', anywhere())), 'RESOURCE_EXHAUSTED', 'fourth subscription');
        await hub.replaceSubscription('dev', sub('s3', anywhere(eq('x', 1)))); // replacing is not adding
        await hub.addSubscription('other', sub('s4', anywhere())); // the cap is per device
        await hub.removeSubscription('dev', 's1');
        await hub.addSubscription('dev', sub('s4', anywhere()));
        assert.deepEqual((await hub.listSubscriptions('dev')).map((s) => s.id).sort(), ['s2', 's3', 's4']);
      }));

    it('matches anchored areas that follow the device, fixed areas and content, with exact recipients', () =>
      withHub({}, async (hub) => {
        for (const d of ['anna', 'bob', 'carl']) await addPing(hub, d);
        await hub.addSubscription('anna', sub('near', anchored(500, eq('kind', 'food'))));
        await hub.addSubscription('anna', sub('cheap', anywhere({ name: 'price', op: 'le', value: 5 }), anchored(200, eq('kind', 'fuel'))));
        await hub.addSubscription('bob', sub('fixed', fixed(1000, P, { name: 'price', op: 'lt', value: 10 })));
        await hub.addSubscription('bob', sub('prefix', anchored(2000, { name: 'name', op: 'prefix', value: 'pi' })));
        await hub.addSubscription('carl', sub('any', anywhere(eq('kind', 'food'))));
        await hub.updateLocations([
          { device: 'anna', lat: P.lat, lon: P.lon },
          { device: 'bob', lat: Q.lat, lon: Q.lon },
        ]);
        assert.deepEqual((await hub.deviceInfo('bob')).location, Q);

        const e1 = event({ kind: 'food', price: 5 }, north(P, 50));
        const e2 = event({ kind: 'food', price: 20, name: 'pizza' }, Q);
        assert.deepEqual(await hub.publish([e1, e2]), [
          { eventId: e1.id, reached: 4 },
          { eventId: e2.id, reached: 2 },
        ]);

        // anna moves to Q on her stream: her anchored areas go with her.
        const w = hub.locationWriter('anna');
        w.update(north(P, 3000).lat, P.lon);
        w.update(Q.lat, Q.lon);
        const e3 = event({ kind: 'fuel', price: 7 }, north(Q, 100));
        assert.deepEqual(await hub.publish([e3]), [{ eventId: e3.id, reached: 1 }]);
        assert.deepEqual((await hub.deviceInfo('anna')).location, Q);
        const e4 = event({ kind: 'food' }, P);
        assert.deepEqual(await hub.publish([e4]), [{ eventId: e4.id, reached: 1 }]);
        const e5 = event({ kind: 'toys' }, P);
        assert.deepEqual(await hub.publish([e5]), [{ eventId: e5.id, reached: 0 }]);
        await w.close();

        const boxes = await Promise.all(['anna', 'bob', 'carl'].map((d) => hub.openInbox(d, null)));
        const [anna, bob, carl] = await Promise.all(['anna', 'bob', 'carl'].map((d, i) => drain(hub, boxes[i], d)));
        assert.deepEqual(shape(anna), [
          [e1.id, ['cheap', 'near']],
          [e3.id, ['cheap']],
        ]);
        assert.deepEqual(shape(bob), [
          [e1.id, ['fixed']],
          [e2.id, ['prefix']],
        ]);
        assert.deepEqual(shape(carl), [
          [e1.id, ['any']],
          [e2.id, ['any']],
          [e4.id, ['any']],
        ]);
        assert.deepEqual(anna[0].event, e1, 'the event arrives as published');
        for (const b of boxes) b.close();
      }));

    it('delivers in publish order per device, with increasing delivery ids', () =>
      withHub({}, async (hub) => {
        await hub.addSubscription('dora', sub('all', anywhere({ name: 'n', op: 'exists' })));
        const t0 = Date.now();
        const events: Event[] = [];
        for (let i = 0; i < 3; i++) {
          const e = event({ n: i });
          events.push(e);
          await hub.publish([e]);
        }
        const batch = [4, 5, 6, 7].map((i) => event({ n: i }));
        events.push(...batch);
        await hub.publish(batch);
        const inbox = await hub.openInbox('dora', null);
        assert.equal(inbox.resumeToken, '');
        assert.equal(inbox.missed, 0);
        const got = await pullN(inbox, events.length);
        assert.deepEqual(shape(got), events.map((e) => [e.id, ['all']]));
        assertIncreasing(got);
        for (let i = 1; i < got.length; i++) assert.ok(got[i].publishedAtMs >= got[i - 1].publishedAtMs);
        // A wall-clock time (the hub's or its store's clock, this machine's): stamped between the
        // first publish and the pull, give or take the store rounding to whole milliseconds.
        const t1 = Date.now();
        assert.ok(got[0].publishedAtMs >= t0 - 1 && got[got.length - 1].publishedAtMs <= t1 + 1, `publishedAtMs ${got[0].publishedAtMs}..${got[got.length - 1].publishedAtMs} within [${t0}, ${t1}]`);
        inbox.close();
      }));

    it('an unsubscribe in the same turn as a publish: the publish succeeds for everyone, and reached says whether the leaver got it', () =>
      withHub({}, async (hub) => {
        for (const d of ['eve', 'finn']) {
          await addPing(hub, d);
          await hub.addSubscription(d, sub('race', anywhere(eq('kind', 'race'))));
        }
        const e = event({ kind: 'race' });
        // Called in one turn, as two requests read from one connection are: the removal may land
        // while the publish's match is awaited.
        const published = hub.publish([e]);
        const removed = hub.removeSubscription('eve', 'race');
        const [r] = await published;
        await removed;
        assert.ok(r.reached === 1 || r.reached === 2, `reached ${r.reached}`);
        const boxes = await Promise.all(['eve', 'finn'].map((d) => hub.openInbox(d, null)));
        const [eve, finn] = await Promise.all(['eve', 'finn'].map((d, i) => drain(hub, boxes[i], d)));
        assert.deepEqual(shape(finn), [[e.id, ['race']]]);
        assert.deepEqual(shape(eve), r.reached === 2 ? [[e.id, ['race']]] : []);
        assert.deepEqual(await hub.listSubscriptions('eve'), [sub('ping', anywhere(eq('ping', 'eve')))]);
        for (const b of boxes) b.close();
      }));

    it('resumes after the last acknowledged delivery; the ack point only moves forward', () =>
      withHub({}, async (hub) => {
        await hub.addSubscription('eve', sub('all', anywhere()));
        const events = [1, 2, 3, 4, 5].map((i) => event({ i }));
        await hub.publish(events);
        const first = await hub.openInbox('eve', null);
        const got = await pullN(first, 5);
        await first.ack(got[2].deliveryId);
        await first.ack(got[0].deliveryId); // older: ignored
        first.close();
        const again = await hub.openInbox('eve', null);
        assert.equal(again.resumeToken, got[2].deliveryId);
        assert.equal(again.missed, 0);
        const rest = await pullN(again, 2);
        assert.deepEqual(rest.map((d) => d.deliveryId), [got[3].deliveryId, got[4].deliveryId]);
        // Later notifications continue the same order.
        const e6 = event({ i: 6 });
        await hub.publish([e6]);
        const [sixth] = await pullOnce(again, 10);
        assert.equal(sixth.event.id, e6.id);
        assert.ok(compareDeliveryIds(got[4].deliveryId, sixth.deliveryId) < 0);
        // Acks in one turn, out of order: the ack point is the highest of them.
        await Promise.all([again.ack(got[3].deliveryId), again.ack(sixth.deliveryId), again.ack(got[4].deliveryId)]);
        again.close();
        const third = await hub.openInbox('eve', null);
        assert.equal(third.resumeToken, sixth.deliveryId);
        third.close();
      }));

    it('resumes after an explicit token; an empty one starts at the oldest, an unknown one is reset', () =>
      withHub({}, async (hub) => {
        await hub.addSubscription('fay', sub('all', anywhere()));
        await hub.publish([1, 2, 3, 4].map((i) => event({ i })));
        const all = await pullN(await hub.openInbox('fay', null), 4);
        const after1 = await hub.openInbox('fay', all[1].deliveryId);
        assert.equal(after1.resumeToken, all[1].deliveryId);
        assert.equal(after1.stateLost, false);
        assert.ok(after1.stateId !== '', 'the store holding the device has an id');
        assert.deepEqual((await pullN(after1, 2)).map((d) => d.deliveryId), [all[2].deliveryId, all[3].deliveryId]);
        after1.close();
        const fromStart = await hub.openInbox('fay', '');
        assert.equal(fromStart.resumeToken, '');
        assert.deepEqual([fromStart.stateLost, fromStart.stateId], [false, after1.stateId]);
        assert.deepEqual((await pullN(fromStart, 4)).map((d) => d.deliveryId), all.map((d) => d.deliveryId));
        fromStart.close();
        // A token this device was never given (its ordinal is ahead of the log): start from the oldest.
        const future = await hub.openInbox('fay', `${Date.now() + 1000}-999999`);
        assert.equal(future.resumeToken, '');
        assert.equal(future.missed, 0);
        assert.deepEqual([future.stateLost, future.stateId], [true, after1.stateId], 'the token is of a state this hub does not hold');
        assert.equal((await pullOnce(future, 1))[0].deliveryId, all[0].deliveryId);
        future.close();
      }));

    it('keeps the newest maxPerDevice notifications and counts exactly what a resume missed', () =>
      withHub({ retention: { maxPerDevice: 3 } }, async (hub) => {
        await hub.addSubscription('gus', sub('all', anywhere()));
        await hub.publish([event({ i: 1 })]);
        const box = await hub.openInbox('gus', null);
        const [one] = await pullOnce(box, 10);
        await box.ack(one.deliveryId);
        box.close();
        const later = [2, 3, 4, 5, 6].map((i) => event({ i }));
        for (const e of later) await hub.publish([e]);
        // Ordinals 2..6 were stored, 4..6 kept: after the ack at 1, ordinals 2 and 3 are missed.
        const resumed = await hub.openInbox('gus', null);
        assert.equal(resumed.resumeToken, one.deliveryId);
        assert.equal(resumed.missed, 2);
        assert.deepEqual((await pullN(resumed, 3)).map((d) => d.event.id), later.slice(2).map((e) => e.id));
        resumed.close();
        const fromOldest = await hub.openInbox('gus', '');
        assert.equal(fromOldest.missed, 3);
        fromOldest.close();
        const s = await hub.stats();
        assert.equal(s.notificationsDropped, 3);
        assert.equal(s.notifications, 6);
        assert.equal(s.eventsPublished, 6);
      }));

    it('a pull waits until a publish reaches the device', () =>
      withHub({}, async (hub) => {
        await hub.addSubscription('hal', sub('all', anywhere(eq('x', 1))));
        const inbox = await hub.openInbox('hal', null);
        const pending = inbox.pull(10);
        assert.ok(await pendingAfterPing(hub, pending, 'hal-other'), 'the pull waits while nothing reaches hal');
        const e = event({ x: 1 });
        await hub.publish([e]);
        const got = await pending;
        assert.deepEqual(shape(got), [[e.id, ['all']]]);
        inbox.close();
      }));

    it('closing an inbox or the hub ends a pending pull with []', () =>
      withHub({}, async (hub) => {
        const a = await hub.openInbox('ivy', null);
        const pa = a.pull(10);
        assert.ok(await pendingAfterPing(hub, pa, 'ivy-other-a'), 'the pull waits');
        a.close();
        assert.deepEqual(await pa, []);
        const b = await hub.openInbox('ivy', null);
        const pb = b.pull(10);
        assert.ok(await pendingAfterPing(hub, pb, 'ivy-other-b'), 'the pull waits');
        await hub.close();
        assert.deepEqual(await pb, []);
        assert.deepEqual(await b.pull(10), []);
      }));

    it('an event id published again is a duplicate: answered with the first reach, delivered once', () =>
      withHub({}, async (hub) => {
        await hub.addSubscription('ida', sub('all', anywhere({ name: 'i', op: 'exists' })));
        await hub.addSubscription('ugo', sub('odd', anywhere(eq('odd', true))));
        const first = event({ i: 1, odd: true });
        assert.deepEqual(await hub.publish([first]), [{ eventId: first.id, reached: 2 }]);
        // A retry, even with other content, delivers nothing and reports the first one's reach.
        assert.deepEqual(await hub.publish([{ ...first, attributes: { i: 99 } }]), [{ eventId: first.id, reached: 2, duplicate: true }]);
        // Within one call: the first of an id is delivered, the others are duplicates of it.
        const two = event({ i: 2, odd: false });
        const three = event({ i: 3, odd: true });
        assert.deepEqual(await hub.publish([two, three, { ...two, attributes: { i: 98, odd: true } }, first]), [
          { eventId: two.id, reached: 1 },
          { eventId: three.id, reached: 2 },
          { eventId: two.id, reached: 1, duplicate: true },
          { eventId: first.id, reached: 2, duplicate: true },
        ]);
        // Concurrent retries: one of them is delivered, the other waits for its reach.
        const four = event({ i: 4, odd: true });
        const both = await Promise.all([hub.publish([four]), hub.publish([four])]);
        assert.deepEqual(
          both.map(([r]) => r.reached),
          [2, 2],
        );
        assert.equal(both.filter(([r]) => r.duplicate === true).length, 1, `exactly one duplicate: ${JSON.stringify(both)}`);
        const marker = event({ i: 5, odd: true });
        await hub.publish([marker]);
        const ida = await hub.openInbox('ida', null);
        assert.deepEqual(
          (await pullN(ida, 5)).map((d) => d.event.attributes.i),
          [1, 2, 3, 4, 5],
        );
        const ugo = await hub.openInbox('ugo', null);
        assert.deepEqual(
          (await pullN(ugo, 4)).map((d) => d.event.attributes.i),
          [1, 3, 4, 5],
        );
        ida.close();
        ugo.close();
        // Stats count each event once, and the duplicates apart; both counters are written before
        // a publish is answered, so they are current here.
        const s = await hub.stats();
        assert.equal(s.extra.duplicateEvents, 4);
        assert.equal(s.eventsPublished, 5);
      }));

    it('reports its figures in stats()', () =>
      withHub({}, async (hub) => {
        await hub.addSubscription('jo', sub('s', anywhere(), anchored(10)));
        await hub.updateLocations([{ device: 'jo', lat: P.lat, lon: P.lon }]);
        await hub.publish([event({})]);
        // Engine figures may lag (a Redis matcher refreshes them on a timer, and nothing signals
        // a refresh): poll, at most 250 times.
        let s = await hub.stats();
        for (let turns = 0; s.subscriptions !== 1 || s.devices !== 1; turns++) {
          assert.ok(turns < 250, `stats never showed the subscription and device: ${JSON.stringify(s)}`);
          await new Promise((r) => setTimeout(r, 20));
          s = await hub.stats();
        }
        assert.equal(s.mode, hub.mode);
        assert.equal(s.subscriptions, 1);
        assert.equal(s.filters, 2);
        assert.equal(s.eventsPublished, 1);
        assert.equal(s.notifications, 1);
        assert.equal(s.locationUpdates, 1);
        assert.equal(s.devices, 1);
        assert.ok(s.engine.length > 0);
      }));

    it('lists the devices holding subscriptions a page at a time, by prefix; a bad token is INVALID_ARGUMENT', () =>
      withHub({}, async (hub) => {
        const devices = ['fleet-1', 'fleet-2', 'fleet-3', 'fleet-4', 'fleet-5', 'other-1'];
        for (const [i, d] of devices.entries()) for (let k = 0; k <= i % 3; k++) await hub.addSubscription(d, sub(`s${k}`, anywhere(eq('n', k))));
        await hub.updateLocations([{ device: 'fleet-2', lat: P.lat, lon: P.lon }, { device: 'only-moves', lat: Q.lat, lon: Q.lon }]);
        await hub.markSeen(['fleet-3'], 1234);
        await hub.addSubscription('gone', sub('s', anywhere()));
        await hub.removeSubscription('gone', 's');
        const all = async (prefix: string, limit: number) => {
          const seen: DeviceSummary[] = [];
          let after = '';
          let pages = 0;
          do {
            const page = await hub.listDevices({ prefix, after, limit });
            assert.ok(page.devices.length <= limit, `a page holds at most ${limit}`);
            assert.equal(new Set(page.devices.map((d) => d.device)).size, page.devices.length, 'no device twice in a page');
            seen.push(...page.devices);
            after = page.next;
            assert.ok(++pages <= 20, 'the listing ends');
          } while (after !== '');
          return seen.sort((a, b) => (a.device < b.device ? -1 : 1));
        };
        const everything = await all('', 2);
        assert.deepEqual(everything.map((d) => d.device), devices, 'devices without subscriptions are not listed');
        assert.deepEqual(everything.map((d) => d.subscriptions), [1, 2, 3, 1, 2, 3]);
        assert.deepEqual(everything[1].location, P);
        assert.equal(everything[0].location, null);
        assert.equal(everything[2].lastSeenMs, 1234);
        assert.equal(everything[0].lastSeenMs, 0);
        assert.deepEqual((await all('fleet-', 1)).map((d) => d.device), devices.slice(0, 5));
        assert.deepEqual((await all('other', 100)).map((d) => d.device), ['other-1']);
        // A device whose only subscription follows it and that has no position yet is listed too.
        await hub.addSubscription('anch-1', sub('near', anchored(100, eq('kind', 'x'))));
        assert.deepEqual((await all('anch-', 10)).map((d) => [d.device, d.subscriptions]), [['anch-1', 1]]);
        assert.deepEqual(await hub.listDevices({ prefix: 'nobody', after: '', limit: 10 }), { devices: [], next: '' });
        await rejectsWith(hub.listDevices({ prefix: '', after: 'not a token', limit: 10 }), 'INVALID_ARGUMENT', 'a made-up page token');
      }));

    it('purges a device: subscriptions, position and backlog go, its open inbox ends, it starts afresh', () =>
      withHub({}, async (hub) => {
        await addPing(hub, 'keep');
        await hub.addSubscription('keep', sub('food', anywhere(eq('kind', 'food'))));
        await hub.addSubscription('drop', sub('food', anywhere(eq('kind', 'food'))));
        await hub.addSubscription('drop', sub('near', anchored(500, eq('kind', 'food'))));
        await hub.updateLocations([{ device: 'drop', lat: P.lat, lon: P.lon }]);
        const e1 = event({ kind: 'food' });
        assert.deepEqual(await hub.publish([e1]), [{ eventId: e1.id, reached: 3 }]);
        const old = await hub.openInbox('drop', null);
        const [first] = await pullN(old, 1);
        assert.equal(first.event.id, e1.id);
        await old.ack(first.deliveryId);
        const e2 = event({ kind: 'food' }, north(P, 100));
        await hub.publish([e2]);

        // Another published before the purge and not pulled: it may wait in the inbox's queue.
        const e2b = event({ kind: 'food' }, north(P, 200));
        await hub.publish([e2b]);
        const r = await hub.purgeDevice('drop');
        assert.deepEqual(r.subscriptions, 2);
        assert.equal(r.location, true);
        assert.ok(r.notifications >= 1, `the backlog was counted: ${r.notifications}`);
        // Pulls may hand out what was queued before the purge reached the inbox; then they end.
        let err: unknown = null;
        if ('take' in old) {
          // A stream's way (DeviceSession.pump): wait to be told, then take, until it throws.
          const box = old as DrainableInbox;
          for (let k = 0; k < 8 && err === null; k++) {
            await within(new Promise<void>((resolve) => box.notify(resolve)), 'the inbox said neither that it had something nor that it ended');
            try {
              box.take(1);
            } catch (x) {
              err = x;
            }
          }
        } else for (let k = 0; k < 4 && err === null; k++) err = await pullOnce(old, 1).then(() => null, (x: unknown) => x);
        assert.ok(err instanceof AmbitError && err.code === 'UNAVAILABLE' && err.message === PURGED_MESSAGE, `the open inbox ends with the purge: ${String(err)}`);
        old.close();
        // A device whose only subscription follows it, with no position (homed nowhere when sharded by space).
        await hub.addSubscription('nohome', sub('near', anchored(100, eq('kind', 'food'))));
        const nohome = await hub.openInbox('nohome', null);
        assert.equal((await hub.purgeDevice('nohome')).subscriptions, 1);
        await assert.rejects(pullOnce(nohome, 1), (x: unknown) => x instanceof AmbitError && x.message === PURGED_MESSAGE, 'its open inbox ends too');
        nohome.close();

        assert.deepEqual(await hub.listSubscriptions('drop'), []);
        assert.deepEqual(await hub.deviceInfo('drop'), { subscriptions: [], location: null });
        assert.deepEqual((await hub.listDevices({ prefix: 'drop', after: '', limit: 10 })).devices, []);
        const e3 = event({ kind: 'food' });
        assert.deepEqual(await hub.publish([e3]), [{ eventId: e3.id, reached: 1 }], 'only the kept device matches');

        // Back with its old resume point: its state is gone, and nothing of before is delivered.
        await addPing(hub, 'drop');
        const again = await hub.openInbox('drop', first.deliveryId);
        assert.equal(again.stateLost, true);
        assert.notEqual(again.stateId, old.stateId, 'its state has another id');
        // A device that never acknowledged anything learns it from the id alone.
        const fresh = await hub.openInbox('drop', null);
        assert.deepEqual([fresh.stateLost, fresh.stateId], [false, again.stateId]);
        fresh.close();
        assert.deepEqual(await drain(hub, again, 'drop'), []);
        again.close();
        const keep = await hub.openInbox('keep', null);
        assert.deepEqual(shape(await drain(hub, keep, 'keep')), [[e1.id, ['food']], [e2.id, ['food']], [e2b.id, ['food']], [e3.id, ['food']]]);
        keep.close();

        assert.deepEqual(await hub.purgeDevice('nobody'), { subscriptions: 0, notifications: 0, location: false });
        assert.equal((await hub.stats()).extra.devicesPurged, 2, 'a device that held nothing is not counted');
      }));

    it('expires devices last seen before a time, at most as many as asked, never one not recorded as seen', () =>
      withHub({}, async (hub) => {
        for (const d of ['old1', 'old2', 'old3', 'fresh', 'unseen']) await hub.addSubscription(d, sub('s', anywhere(eq('kind', 'x'))));
        await hub.markSeen(['old1', 'old2', 'fresh'], 1_000);
        await hub.markSeen(['old3'], 1_500);
        await hub.markSeen(['fresh'], 9_000);
        await hub.markSeen(['fresh'], 2_000); // older than what is recorded: no change
        const first = await hub.expireDevices(5_000, 2);
        assert.equal(first.length, 2);
        const second = await hub.expireDevices(5_000, 10);
        assert.deepEqual([...first, ...second].sort(), ['old1', 'old2', 'old3']);
        assert.deepEqual(await hub.expireDevices(5_000, 10), []);
        for (const d of ['old1', 'old2', 'old3']) assert.deepEqual(await hub.listSubscriptions(d), [], `${d} expired`);
        const left = await hub.listDevices({ prefix: '', after: '', limit: 10 });
        assert.deepEqual(left.devices.map((d) => [d.device, d.lastSeenMs]).sort(), [['fresh', 9_000], ['unseen', 0]]);
        const e = event({ kind: 'x' });
        assert.deepEqual(await hub.publish([e]), [{ eventId: e.id, reached: 2 }]);
        const s = await hub.stats();
        assert.equal(s.extra.devicesExpired, 3);
        assert.equal(s.extra.devicesPurged, 0);
      }));

    it('keeps revocations of tokens and subjects, the widest of each, until they lapse, and tells its watchers', () =>
      withHub({}, async (hub) => {
        const nowS = Math.floor(Date.now() / 1000);
        const { heard, stop } = watchRevocations(hub);
        const sorted = (all: readonly Revocation[]) => [...all].sort((a, b) => (revocationKey(a) < revocationKey(b) ? -1 : 1));
        await heard((all) => all.length === 0, 'an empty list first');
        await hub.revokeTokens([
          { tokenId: 'tok-1', untilS: nowS + 600 },
          { subject: 'dev-9', issuedUpToS: nowS - 50, untilS: nowS + 600 },
          { tokenId: 'lapsed', untilS: nowS - 1 },
        ]);
        const first = await heard((all) => all.length === 2, 'the two revocations in force');
        assert.deepEqual(sorted(first), [{ tokenId: 'tok-1', untilS: nowS + 600 }, { subject: 'dev-9', issuedUpToS: nowS - 50, untilS: nowS + 600 }]);
        // A narrower one changes nothing; a wider one widens it.
        await hub.revokeTokens([{ subject: 'dev-9', issuedUpToS: nowS - 100, untilS: nowS + 60 }]);
        await hub.revokeTokens([{ subject: 'dev-9', issuedUpToS: nowS, untilS: nowS + 900 }]);
        const wider = await heard((all) => all.some((r) => 'subject' in r && r.issuedUpToS === nowS), 'the wider revocation');
        assert.deepEqual(sorted(wider), [{ tokenId: 'tok-1', untilS: nowS + 600 }, { subject: 'dev-9', issuedUpToS: nowS, untilS: nowS + 900 }]);
        // A second watcher hears what is in force at once (or with the hub's next read).
        const late = watchRevocations(hub);
        await late.heard((all) => all.length === 2, 'the revocations in force (a second watcher)');
        late.stop();
        stop();
      }));
  });
}
