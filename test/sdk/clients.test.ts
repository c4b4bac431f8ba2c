/** AmbitPublisher, AmbitFleet and AmbitOps against a real in-process server. */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { AmbitDevice, AmbitError, AmbitFleet, AmbitOps, AmbitPublisher, StatusCode } from '../../sdk/index.js';
import { type TestServer, TcpProxy, next, startTestServer, waitFor } from './support.js';

const P = { lat: 45.4642, lon: 9.19 };
let t: TestServer;
let ops: AmbitOps;
let pub: AmbitPublisher;

before(async () => {
  t = await startTestServer();
  ops = new AmbitOps(t.address, t.opsToken);
  pub = new AmbitPublisher(t.address, t.publishToken);
});

after(async () => {
  ops.close();
  pub.close();
  await t.stop();
});

describe('AmbitPublisher', () => {
  test('publish returns the event id (server-chosen when absent) and the subscriptions reached', async () => {
    const d = await AmbitDevice.connect(t.address, t.token('pub-dev'));
    try {
      await d.subscribe({ id: 'near', filters: [{ constraints: [{ name: 'kind', op: 'exists' }], area: { radiusM: 300 } }] });
      await d.subscribe({ id: 'all', filters: [{ constraints: [{ name: 'kind', op: 'prefix', value: 'tr' }] }] });
      d.updateLocation(P.lat, P.lon);
      await waitFor('placed', async () => (await ops.deviceSubscriptions('pub-dev')).location !== null);
      const r = await pub.publish({ lat: P.lat, lon: P.lon, attributes: { kind: 'traffic' } });
      assert.equal(r.reached, 2);
      assert.match(r.eventId, /^[0-9a-f-]{36}$/);
      const n = await next(d.notifications());
      assert.deepEqual(n.subscriptionIds, ['all', 'near']);
      assert.equal(n.event.id, r.eventId);
    } finally {
      await d.close();
    }
  });

  test('bulkPublish sends any iterable in chunks of at most 1000 and totals the result', async () => {
    function* events(n: number) {
      for (let i = 0; i < n; i++) yield { id: `bulk-${i}`, lat: P.lat, lon: P.lon + i * 1e-6, attributes: { kind: i % 2 === 0 ? 'train' : 'bus' } };
    }
    const before = (await ops.stats()).eventsPublished;
    const r = await pub.bulkPublish(events(2500));
    assert.equal(r.accepted, 2500);
    assert.equal((await ops.stats()).eventsPublished - before, 2500);
    assert.deepEqual(await pub.bulkPublish([]), { accepted: 0, reached: 0, duplicates: 0 });
    const small = await pub.bulkPublish(
      (async function* () {
        yield* events(7);
      })(),
      { chunkSize: 3 },
    );
    assert.equal(small.accepted, 7);
    await assert.rejects(pub.bulkPublish(events(1), { chunkSize: 1001 }), (e: unknown) => e instanceof AmbitError && e.field === 'chunkSize');
  });

  test('a publish stream sends a steady feed, one message per turn, and totals at the end', async () => {
    const d = await AmbitDevice.connect(t.address, t.token('stream-dev'));
    try {
      await d.subscribe({ id: 'trains', filters: [{ constraints: [{ name: 'line', op: 'eq', value: 'train' }] }] });
      const s = await pub.stream();
      for (let i = 0; i < 2500; i++) s.publish({ id: `st-${i}`, lat: P.lat, lon: P.lon, attributes: { line: i < 3 ? 'train' : 'bus' } });
      assert.equal(s.pending, 2500);
      const it = d.notifications();
      assert.deepEqual([(await next(it)).event.id, (await next(it)).event.id, (await next(it)).event.id], ['st-0', 'st-1', 'st-2']);
      s.publish({ id: 'late', lat: 0, lon: 0, attributes: { line: 'train' } });
      assert.equal((await next(it)).event.id, 'late');
      assert.deepEqual(await s.end(), { accepted: 2501, reached: 4, duplicates: 0 });
      assert.throws(() => s.publish({ lat: 0, lon: 0 }), (e: unknown) => e instanceof AmbitError && e.code === StatusCode.FAILED_PRECONDITION);

      const bad = await pub.stream();
      bad.publish({ lat: 0, lon: 0 });
      bad.publish({ lat: 0, lon: 0, radiusM: -3 });
      await assert.rejects(bad.end(), (e: unknown) => e instanceof AmbitError && e.code === StatusCode.INVALID_ARGUMENT && e.field === 'events[1].radius_m');
      assert.throws(() => bad.publish({ lat: 0, lon: 0 }), (e: unknown) => e instanceof AmbitError && e.field === 'events[1].radius_m');
      assert.throws(() => (s as unknown as { publish(e: unknown): void }).publish.call(s, { lat: 0, lon: 500 }), AmbitError);
    } finally {
      await d.close();
    }
  });

  test('errors name the field: locally for positions, from the server for the rest', async () => {
    await assert.rejects(pub.publish({ lat: 100, lon: 0 }), (e: unknown) => e instanceof AmbitError && e.code === StatusCode.INVALID_ARGUMENT && e.field === 'event.lat');
    await assert.rejects(pub.publish({ lat: 0, lon: 0, radiusM: -1 }), (e: unknown) => e instanceof AmbitError && e.code === StatusCode.INVALID_ARGUMENT && e.field === 'event.radius_m');
    await assert.rejects(
      pub.bulkPublish([{ lat: 0, lon: 0 }, { lat: 0, lon: 0, attributes: { '': 1 } }]),
      (e: unknown) => e instanceof AmbitError && e.code === StatusCode.INVALID_ARGUMENT && /^events\[1\]\.attributes/.test(e.field),
    );
    const denied = new AmbitPublisher(t.address, t.token('not-a-publisher'));
    await assert.rejects(denied.publish({ lat: 0, lon: 0 }), (e: unknown) => e instanceof AmbitError && e.code === StatusCode.PERMISSION_DENIED && e.publishOutcome === 'not-stored');
    denied.close();
  });

  test('an id published again is a duplicate: reported with the first reach, delivered once', async () => {
    const d = await AmbitDevice.connect(t.address, t.token('dup-dev'));
    try {
      await d.subscribe({ id: 'dups', filters: [{ constraints: [{ name: 'dup', op: 'exists' }] }] });
      const first = await pub.publish({ id: 'dup-1', lat: P.lat, lon: P.lon, attributes: { dup: 1 } });
      assert.deepEqual(first, { eventId: 'dup-1', reached: 1, duplicate: false, attempts: 1 });
      assert.deepEqual(await pub.publish({ id: 'dup-1', lat: P.lat, lon: P.lon, attributes: { dup: 2 } }), { eventId: 'dup-1', reached: 1, duplicate: true, attempts: 1 });
      const bulk = await pub.bulkPublish(['dup-1', 'dup-2', 'dup-2', 'dup-3'].map((id) => ({ id, lat: P.lat, lon: P.lon, attributes: { dup: 3 } })));
      assert.deepEqual(bulk, { accepted: 4, reached: 4, duplicates: 2 });
      const it = d.notifications();
      assert.deepEqual([(await next(it)).event.id, (await next(it)).event.id, (await next(it)).event.id], ['dup-1', 'dup-2', 'dup-3']);
    } finally {
      await d.close();
    }
  });

  test('a publish that cannot reach the server is retried with the same id, and delivered once', async () => {
    const proxy = await TcpProxy.start(t.server.port!);
    proxy.refuse = true;
    const retried: [string, number][] = [];
    const flaky = new AmbitPublisher(proxy.address, t.publishToken, {
      publishBackoff: { initialMs: 10, maxMs: 50 },
      publishRetries: 20,
      // The channel reconnects at once too (grpc-js waits a second by default).
      channelOptions: { 'grpc.initial_reconnect_backoff_ms': 10, 'grpc.max_reconnect_backoff_ms': 20 },
      onRetry(err, attempt) {
        retried.push([err.publishOutcome, attempt]);
        proxy.refuse = false; // the network comes back
      },
    });
    const never = new AmbitPublisher(proxy.address, t.publishToken, { publishRetries: 0 });
    const d = await AmbitDevice.connect(t.address, t.token('retry-dev'));
    try {
      await d.subscribe({ id: 'r', filters: [{ constraints: [{ name: 'retry', op: 'exists' }] }] });
      const r = await flaky.publish({ lat: P.lat, lon: P.lon, attributes: { retry: 1 } });
      assert.deepEqual(retried[0], ['unknown', 1]);
      assert.ok(retried.every(([outcome]) => outcome === 'unknown'), JSON.stringify(retried));
      assert.equal(r.attempts, retried.length + 1);
      assert.equal(r.duplicate, false);
      assert.match(r.eventId, /^[0-9a-f-]{36}$/, 'the SDK gave the event its id, the same on every attempt');
      assert.equal((await next(d.notifications())).event.id, r.eventId);
      proxy.refuse = true;
      proxy.cut();
      await assert.rejects(never.publish({ lat: P.lat, lon: P.lon, attributes: { retry: 2 } }), (e: unknown) => e instanceof AmbitError && e.code === StatusCode.UNAVAILABLE && e.publishOutcome === 'unknown');
      assert.throws(() => new AmbitPublisher(t.address, t.publishToken, { publishRetries: -1 }), (e: unknown) => e instanceof AmbitError && e.field === 'publishRetries');
    } finally {
      flaky.close();
      never.close();
      await d.close();
      await proxy.close();
    }
  });
});

describe('AmbitFleet and AmbitOps', () => {
  test('updateLocations places many devices; ops reports them', async () => {
    const fleet = new AmbitFleet(t.address, t.token('fleet', ['device', 'location:any']));
    const n = 2500;
    const accepted = await fleet.updateLocations(
      Array.from({ length: n }, (_, i) => ({ deviceId: `truck-${i}`, lat: P.lat + i * 1e-5, lon: P.lon })),
      { batchSize: 1000 },
    );
    assert.equal(accepted, n);
    assert.deepEqual((await ops.deviceSubscriptions('truck-7')).location, { lat: P.lat + 7e-5, lon: P.lon });
    await fleet.updateLocation(1, 2);
    assert.deepEqual((await ops.deviceSubscriptions('fleet')).location, { lat: 1, lon: 2 });
    fleet.close();

    const own = new AmbitFleet(t.address, t.token('lonely'));
    await assert.rejects(own.updateLocations([{ deviceId: 'someone-else', lat: 0, lon: 0 }]), (e: unknown) => e instanceof AmbitError && e.code === StatusCode.PERMISSION_DENIED);
    // A message refused in the middle of the stream: the error says which, and what was applied before it.
    await assert.rejects(own.updateLocations([{ lat: 1, lon: 1 }, { lat: 2, lon: 2 }, { lat: 3, lon: 3 }, { deviceId: 'someone-else', lat: 0, lon: 0 }], { batchSize: 2 }), (e: unknown) => {
      assert.ok(e instanceof AmbitError && e.code === StatusCode.PERMISSION_DENIED, String(e));
      assert.deepEqual([e.streamMessage, e.applied, e.field], [1, 2, 'updates[1].device_id']);
      return true;
    });
    await assert.rejects(own.updateLocations([{ lat: 0, lon: 200 }]), (e: unknown) => e instanceof AmbitError && e.field === 'updates[0].lon');
    own.close();

    const s = await ops.stats();
    assert.equal(s.mode, 'embedded');
    assert.equal(s.engine, 'fast');
    assert.ok(s.devices >= n);
    assert.ok(s.locationUpdates >= n + 1);
    const none = await ops.deviceSubscriptions('nobody');
    assert.deepEqual(none, { subscriptions: [], location: null, connected: false });
    await assert.rejects(new AmbitOps(t.address, t.publishToken).stats(), (e: unknown) => e instanceof AmbitError && e.code === StatusCode.PERMISSION_DENIED);
  });
});
