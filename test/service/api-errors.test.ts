/**
 * Errors that depend on state, and deadlines: NOT_FOUND for replacing or removing what a device
 * does not have, ALREADY_EXISTS for a second subscription of one id (subscription ids are per
 * device), RESOURCE_EXHAUSTED at the per-device cap (both the default of services/matcher/core.ts and
 * a configured one), and DEADLINE_EXCEEDED for calls whose deadline has passed, after which the
 * server goes on serving and nothing of the late call was applied.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type * as grpc from '@grpc/grpc-js';
import { DEFAULT_MAX_SUBSCRIPTIONS_PER_DEVICE } from '../../services/hub/port.js';
import { type Clients, DeviceStream, type Init, Status, type TestServer, checkReplyStatus, checkStatus, eventually, expectStatus, startTestServer, unary } from '../support/grpc.js';

const sub = (id: string, radiusM = 100): Init => ({ id, filters: [{ area: { radiusM, center: { lat: 0, lon: 0 } } }] });

describe('api errors: state-dependent statuses', () => {
  let srv: TestServer;
  let clients: Clients;
  let a: DeviceStream;
  let b: DeviceStream;
  let opsMd: Init;

  const list = async (device: string) =>
    (await unary(clients.device, 'listSubscriptions', {}, srv.meta(device, ['device']))).subscriptions.map((s: Init) => [s.id, s.filters[0].area.radiusM]).sort();

  before(async () => {
    srv = await startTestServer({ maxSubscriptionsPerDevice: 3 });
    clients = srv.clients();
    opsMd = srv.meta('ops', ['ops']);
    ({ stream: a } = await DeviceStream.open(clients, srv.token('dev-a', ['device'])));
    ({ stream: b } = await DeviceStream.open(clients, srv.token('dev-b', ['device'])));
  });

  after(async () => {
    a.cancel();
    b.cancel();
    assert.deepEqual(srv.unexpectedErrors(), []);
    await srv.stop();
  });

  it('[L2] replace of an unknown id is NOT_FOUND naming replace.subscription.id; nothing is added', async () => {
    checkReplyStatus(await a.replace(sub('ghost')), Status.NOT_FOUND, 'replace.subscription.id');
    assert.deepEqual(await list('dev-a'), []);
  });

  it('[L3] unsubscribe of an unknown id is NOT_FOUND naming unsubscribe.subscription_id', async () => {
    checkReplyStatus(await a.unsubscribe('ghost'), Status.NOT_FOUND, 'unsubscribe.subscription_id');
  });

  it('[L1] a second subscription of one id is ALREADY_EXISTS and the stored version is kept', async () => {
    await a.subscribeOk(sub('s1', 100));
    checkReplyStatus(await a.subscribe(sub('s1', 999)), Status.ALREADY_EXISTS, 'subscribe.subscription.id');
    assert.deepEqual(await list('dev-a'), [['s1', 100]]);
  });

  it('subscription ids are per device: another device may use the same id, and cannot touch this one', async () => {
    await b.subscribeOk(sub('s1', 200));
    checkReplyStatus(await b.unsubscribe('s9'), Status.NOT_FOUND, 'unsubscribe.subscription_id');
    assert.equal((await b.replace(sub('s1', 300))).code, 0);
    assert.deepEqual(await list('dev-a'), [['s1', 100]]);
    assert.deepEqual(await list('dev-b'), [['s1', 300]]);
    assert.equal((await b.unsubscribe('s1')).code, 0);
    checkReplyStatus(await b.unsubscribe('s1'), Status.NOT_FOUND, 'unsubscribe.subscription_id', 'a second unsubscribe');
    assert.deepEqual(await list('dev-a'), [['s1', 100]]);
    assert.deepEqual(await list('dev-b'), []);
  });

  it('the per-device cap (configured: 3) is RESOURCE_EXHAUSTED naming subscribe.subscription; replace still works at the cap', async () => {
    await a.subscribeOk(sub('s2'));
    await a.subscribeOk(sub('s3'));
    checkReplyStatus(await a.subscribe(sub('s4')), Status.RESOURCE_EXHAUSTED, 'subscribe.subscription');
    assert.deepEqual((await list('dev-a')).map((x: Init) => x[0]), ['s1', 's2', 's3']);
    assert.equal((await a.replace(sub('s3', 50))).code, 0, 'a replace does not count against the cap');
    // ALREADY_EXISTS is told before the cap.
    checkReplyStatus(await a.subscribe(sub('s1')), Status.ALREADY_EXISTS, 'subscribe.subscription.id');
    // Another device has its own budget.
    for (const id of ['x1', 'x2', 'x3']) await b.subscribeOk(sub(id));
    checkReplyStatus(await b.subscribe(sub('x4')), Status.RESOURCE_EXHAUSTED, 'subscribe.subscription');
    // A freed slot can be used again, and a removed id re-added as new (L3).
    assert.equal((await a.unsubscribe('s2')).code, 0);
    await a.subscribeOk(sub('s4'));
    checkReplyStatus(await a.subscribe(sub('s2')), Status.RESOURCE_EXHAUSTED, 'subscribe.subscription');
    assert.equal((await a.unsubscribe('s4')).code, 0);
    await a.subscribeOk(sub('s2', 7));
    assert.deepEqual(await list('dev-a'), [['s1', 100], ['s2', 7], ['s3', 50]]);
    const stats = await unary(clients.ops, 'getStats', {}, opsMd);
    assert.equal(stats.subscriptions, 6n);
  });

  it('an unknown device is not an error for ops: no subscriptions, no position, not connected', async () => {
    const info = await unary(clients.ops, 'getDeviceSubscriptions', { deviceId: 'nobody' }, opsMd);
    assert.deepEqual([info.subscriptions.length, info.location, info.connected], [0, undefined, false]);
  });
});

describe('api errors: the default per-device cap of services/matcher/core.ts', () => {
  it(`subscription ${DEFAULT_MAX_SUBSCRIPTIONS_PER_DEVICE + 1} of one device is RESOURCE_EXHAUSTED`, async () => {
    const srv = await startTestServer();
    try {
      const { stream } = await DeviceStream.open(srv.clients(), srv.token('dev-many', ['device']));
      const n = DEFAULT_MAX_SUBSCRIPTIONS_PER_DEVICE;
      // Pipelined: replies come back in request order.
      for (let i = 0; i <= n; i++) stream.send({ message: { case: 'subscribe', value: { requestId: `q${i}`, subscription: sub(`s${i}`) } } });
      for (let i = 0; i < n; i++) {
        const r = await stream.next('reply');
        assert.equal(r.requestId, `q${i}`);
        assert.equal(r.status!.code, 0, r.status!.message);
      }
      const last = await stream.next('reply');
      assert.equal(last.requestId, `q${n}`);
      checkReplyStatus(last.status, Status.RESOURCE_EXHAUSTED, 'subscribe.subscription');
      assert.match(last.status!.message, new RegExp(`already has ${n} subscriptions`));
      stream.cancel();
      assert.deepEqual(srv.unexpectedErrors(), []);
    } finally {
      await srv.stop();
    }
  });
});

describe('api errors: deadlines', () => {
  let srv: TestServer;
  let clients: Clients;
  let pubMd: Init;
  let opsMd: Init;
  // No id: the server gives each publish one of its own (one id twice would deliver once).
  const event = { id: '', position: { lat: 0, lon: 0 }, attributes: {} };
  const published = async () => (await unary(clients.ops, 'getStats', {}, opsMd)).eventsPublished as bigint;

  before(async () => {
    srv = await startTestServer();
    clients = srv.clients();
    pubMd = srv.meta('pub', ['publish']);
    opsMd = srv.meta('ops', ['ops']);
    await unary(clients.publisher, 'publish', { event }, pubMd); // the channel is up
  });

  after(async () => {
    assert.deepEqual(srv.unexpectedErrors(), []);
    await srv.stop();
  });

  it('a publish whose deadline has already passed is DEADLINE_EXCEEDED and is not published', async () => {
    const before = await published();
    await expectStatus(unary(clients.publisher, 'publish', { event }, pubMd, { deadline: Date.now() - 1000 }), Status.DEADLINE_EXCEEDED);
    await expectStatus(unary(clients.publisher, 'publish', { event }, pubMd, { deadline: new Date(Date.now() - 1) }), Status.DEADLINE_EXCEEDED);
    // A publish sent after them on the same channel is handled after them: only it counts.
    await unary(clients.publisher, 'publish', { event: { ...event, id: 'after-late' } }, pubMd);
    assert.equal(await published(), before + 1n);
  });

  it('a tiny deadline on a busy server is DEADLINE_EXCEEDED, not applied, and the server keeps serving', async () => {
    const before = await published();
    const late = unary(clients.publisher, 'publish', { event }, pubMd, { deadline: Date.now() + 2 });
    const moved = unary(clients.device, 'updateLocation', { location: { lat: 1, lon: 1 } }, srv.meta('dev-late', ['device']), { deadline: Date.now() + 2 });
    // The server shares this event loop: keep it busy past the deadline before it reads the calls.
    const t = Date.now();
    while (Date.now() - t < 25);
    // Both handlers attached at once: the second call may fail while the first is awaited.
    await Promise.all([expectStatus(late, Status.DEADLINE_EXCEEDED), expectStatus(moved, Status.DEADLINE_EXCEEDED)]);
    // Calls sent after them on the same channel are handled after them: the late ones left nothing.
    const ok = await unary(clients.publisher, 'publish', { event }, pubMd, { deadline: Date.now() + 5000 });
    assert.match(String(ok.eventId), /^[0-9a-f-]{36}$/);
    assert.equal(await published(), before + 1n, 'only the publish after them was published');
    const info = await unary(clients.ops, 'getDeviceSubscriptions', { deviceId: 'dev-late' }, opsMd);
    assert.equal(info.location, undefined, 'the late location update was not applied');
  });

  it('a client stream past its deadline ends DEADLINE_EXCEEDED; what arrived before stays, nothing after', async () => {
    const before = await published();
    let call!: { write: (m: Init) => boolean; end: () => void };
    const result = new Promise<grpc.ServiceError | null>((resolve) => {
      call = (clients.publisher as unknown as Record<string, (md: Init, o: Init, cb: (e: grpc.ServiceError | null) => void) => Init>).bulkPublish(pubMd, { deadline: Date.now() + 300 }, (e) => resolve(e));
    });
    // Each message once the one before it is published (nothing else signals that), until the deadline ends the call.
    let written = 0;
    let ended = false;
    void result.then(() => (ended = true));
    while (!ended && written < 1000) {
      call.write({ events: [event] });
      written++;
      const want = before + BigInt(written);
      await eventually(async () => ended || (await published()) >= want, `message ${written} to be published`);
    }
    const err = await result;
    assert.ok(err !== null);
    checkStatus(err, Status.DEADLINE_EXCEEDED);
    // Written after the call ended: goes nowhere.
    call.write({ events: [event] });
    call.end();
    // A publish sent after all that on the same channel is handled after it.
    await unary(clients.publisher, 'publish', { event: { ...event, id: 'after-stream' } }, pubMd);
    const n = (await published()) - before - 1n;
    assert.ok(n >= 1n && n <= BigInt(written), `what arrived before the deadline stays published (${n} of ${written} written)`);
    assert.ok(n >= BigInt(written) - 1n, `each message but the last was published before the next was written (${n} of ${written})`);
  });

  it('a device stream past its deadline ends DEADLINE_EXCEEDED and its session is released', async () => {
    const s = new DeviceStream(clients.device, srv.meta('dev-dl', ['device']), { deadline: Date.now() + 200 });
    await s.hello();
    assert.equal((await unary(clients.ops, 'getDeviceSubscriptions', { deviceId: 'dev-dl' }, opsMd)).connected, true);
    checkStatus(await s.end(3000), Status.DEADLINE_EXCEEDED);
    // The server learns of the end on its own (its deadline timer or the client's reset): nothing tells the caller when.
    await eventually(async () => !(await unary(clients.ops, 'getDeviceSubscriptions', { deviceId: 'dev-dl' }, opsMd)).connected, 'the session to be released');
    assert.equal((await unary(clients.ops, 'getStats', {}, opsMd)).connectedDevices, 0n);
    // A new stream of the device works.
    const { stream, welcome } = await DeviceStream.open(clients, srv.token('dev-dl', ['device']));
    assert.equal(welcome.deviceId, 'dev-dl');
    stream.cancel();
  });
});
