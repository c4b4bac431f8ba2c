/**
 * AmbitDevice against a real in-process server, over each transport (gRPC on loopback, and
 * WebSocket through the `ws` package's client, which has the browser's API): delivery to exactly
 * the right devices, error replies naming fields, reconnect and resume (superseded stream, network
 * cut through a proxy, a restarted server) without loss or repeats, and location coalescing.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { DeviceService } from '../../api/gen/ambit/v1/device_pb.js';
import { grpcClient } from '../../api/rpc.js';
import { AmbitDevice, AmbitError, compareDeliveryIds, AmbitOps, AmbitPublisher, type DeviceEventMap, type Notification, StatusCode, type Subscription } from '../../sdk/index.js';
import { TcpProxy, type TestServer, next, startTestServer, waitFor } from './support.js';
import { SCOPES } from '../../services/edge/auth.js';
import { startServer } from '../../services/process/server.js';
import { WebSocket } from 'ws';
import type { WebSocketConstructor } from '../../sdk/index.js';

const P = { lat: 45.4642, lon: 9.19 };
/** Degrees of latitude per metre. */
const M = 1 / 111_195;
// A frozen clock: no connection ever counts as long-lived, so the backoff never resets mid-test.
const FAST = { backoff: { initialMs: 30, maxMs: 200, resetAfterMs: 60_000 }, now: () => 0 };

const accidents: Subscription = {
  id: 'accidents',
  filters: [{ constraints: [{ name: 'type', op: 'eq', value: 'accident' }, { name: 'severity', op: 'gt', value: 2 }], area: { radiusM: 500 } }],
};
const deals: Subscription = { id: 'deals', filters: [{ constraints: [{ name: 'type', op: 'eq', value: 'deal' }, { name: 'price', op: 'lt', value: 50 }], area: { radiusM: 1000 } }] };
/** Matches pings anywhere: a marker that everything before it has been delivered. */
const ping: Subscription = { id: 'ping', filters: [{ constraints: [{ name: 'type', op: 'eq', value: 'ping' }] }] };

let t: TestServer;
let ops: AmbitOps;
let pub: AmbitPublisher;
const open: AmbitDevice[] = [];

type Transport = 'grpc' | 'websocket';
/** The device streams' address of a server's ports on `transport` ("host:port", or a ws:// URL). */
const streamAddress = (transport: Transport, host: string): string => (transport === 'grpc' ? host : `ws://${host}`);
/** The `ws` package's client: the WebSocket API of browsers, in Node 20. */
const withSocket = (transport: Transport, o: object = {}) => (transport === 'grpc' ? o : { webSocket: WebSocket as unknown as WebSocketConstructor, ...o });

async function placed(name: string, d: AmbitDevice, lat: number, lon: number): Promise<void> {
  d.updateLocation(lat, lon);
  await waitFor(`${name} at ${lat},${lon}`, async () => {
    const loc = (await ops.deviceSubscriptions(name)).location;
    return loc !== null && loc.lat === lat && loc.lon === lon;
  });
}

const label = (n: Notification) => `${String(n.event.attributes.type)}:${n.event.id}:${n.subscriptionIds.join('+')}`;


for (const transport of ['grpc', 'websocket'] as const) describe(`AmbitDevice over ${transport}`, () => {
  const addr = (): string => (transport === 'grpc' ? t.address : t.wsAddress);
  /** The port a proxy in front of the device streams forwards to. */
  const streamPort = (server: { port: number | null; webPort: number | null }): number => (transport === 'grpc' ? server.port! : server.webPort!);
  const device = async (name: string, options = {}): Promise<AmbitDevice> => {
    const d = await AmbitDevice.connect(addr(), t.token(name), withSocket(transport, { ...FAST, ...options }));
    open.push(d);
    return d;
  };
  // A server of its own per transport: device state outlives streams.
  before(async () => {
    t = await startTestServer();
    ops = new AmbitOps(t.address, t.opsToken);
    pub = new AmbitPublisher(t.address, t.publishToken);
  });

  after(async () => {
    await Promise.all(open.splice(0).map((d) => d.close()));
    ops.close();
    pub.close();
    await t.stop();
  });

  /** The device's subscriptions, by its own unary call (gRPC, or Connect on the web port), and as ops see them. */
  const listed = async (d: AmbitDevice, name: string): Promise<Subscription[]> => {
    const own = await d.listSubscriptions();
    assert.deepEqual(own, (await ops.deviceSubscriptions(name)).subscriptions);
    return own;
  };

  test('subscribe, move, publish: notifications reach exactly the matching devices', async () => {
    const [a, b, c] = await Promise.all([device('rcpt-a'), device('rcpt-b'), device('rcpt-c')]);
    await Promise.all([a.subscribe(accidents), a.subscribe(ping), b.subscribe(accidents), b.subscribe(ping), c.subscribe(deals), c.subscribe(ping)]);
    await Promise.all([placed('rcpt-a', a, P.lat, P.lon), placed('rcpt-b', b, P.lat + 2000 * M, P.lon), placed('rcpt-c', c, P.lat, P.lon)]);

    const near = { lat: P.lat + 100 * M, lon: P.lon };
    assert.equal((await pub.publish({ id: 'acc1', ...near, attributes: { type: 'accident', severity: 4 } })).reached, 1);
    assert.equal((await pub.publish({ id: 'ping1', ...P, attributes: { type: 'ping' } })).reached, 3);

    await placed('rcpt-b', b, P.lat, P.lon);
    assert.deepEqual(await pub.publish({ id: 'acc2', ...near, attributes: { type: 'accident', severity: 3 } }), { eventId: 'acc2', reached: 2, duplicate: false, attempts: 1 });
    assert.equal((await pub.publish({ id: 'acc-minor', ...near, attributes: { type: 'accident', severity: 2 } })).reached, 0);
    assert.equal((await pub.publish({ id: 'deal1', ...near, attributes: { type: 'deal', price: 30 } })).reached, 1);
    assert.equal((await pub.publish({ id: 'ping2', ...P, attributes: { type: 'ping' } })).reached, 3);

    const read = async (d: AmbitDevice, n: number) => {
      const it = d.notifications();
      const out: string[] = [];
      for (let i = 0; i < n; i++) out.push(label(await next(it)));
      return out;
    };
    assert.deepEqual(await read(a, 4), ['accident:acc1:accidents', 'ping:ping1:ping', 'accident:acc2:accidents', 'ping:ping2:ping']);
    assert.deepEqual(await read(b, 3), ['ping:ping1:ping', 'accident:acc2:accidents', 'ping:ping2:ping']);
    assert.deepEqual(await read(c, 3), ['ping:ping1:ping', 'deal:deal1:deals', 'ping:ping2:ping']);

    // The notification carries the event as published.
    const it = a.notifications();
    const t0 = Date.now();
    await pub.publish({ id: 'acc3', ...near, radiusM: 50, attributes: { type: 'accident', severity: 5, road: 'A4', closed: true }, tags: ['#Traffic', 'A4', 'traffic'] });
    const n = await next(it);
    // Tags arrive in their normal form: no #, lower case, distinct, sorted.
    assert.deepEqual(n.event, { id: 'acc3', lat: near.lat, lon: near.lon, radiusM: 50, attributes: { type: 'accident', severity: 5, road: 'A4', closed: true }, tags: ['a4', 'traffic'] });
    // Stamped by the server (in this process, on the same clock) between the publish and its receipt.
    const t1 = Date.now();
    assert.ok(t0 <= n.publishedAtMs && n.publishedAtMs <= t1, `publishedAtMs ${n.publishedAtMs} within [${t0}, ${t1}]`);
  });

  test('tag subscriptions: a filter\'s tags must all be on the event; listed in their normal form', async () => {
    const d = await device('tagged');
    await d.subscribe({ id: 'vegan-lunch', filters: [{ tags: ['#Vegan', 'Lunch'] }] });
    await d.subscribe({ id: 'near-food', filters: [{ tags: ['food'], area: { radiusM: 300 } }] });
    await placed('tagged', d, P.lat, P.lon);
    const far = { lat: P.lat + 5000 * M, lon: P.lon };
    assert.equal((await pub.publish({ id: 'tg1', ...far, tags: ['vegan', 'lunch', 'food'] })).reached, 1);
    assert.equal((await pub.publish({ id: 'tg2', ...P, tags: ['#FOOD', 'vegan'] })).reached, 1);
    assert.equal((await pub.publish({ id: 'tg3', ...P, attributes: { food: true } })).reached, 0);
    const it = d.notifications();
    const first = await next(it);
    const second = await next(it);
    assert.deepEqual([first.event.id, first.subscriptionIds, first.event.tags], ['tg1', ['vegan-lunch'], ['food', 'lunch', 'vegan']]);
    assert.deepEqual([second.event.id, second.subscriptionIds, second.event.tags], ['tg2', ['near-food'], ['food', 'vegan']]);
    const subs = await listed(d, 'tagged');
    assert.deepEqual(subs.find((s) => s.id === 'vegan-lunch'), { id: 'vegan-lunch', filters: [{ constraints: [], tags: ['lunch', 'vegan'] }] });
    await assert.rejects(d.subscribe({ id: 'bad', filters: [{ tags: ['two words'] }] }), (err: unknown) => err instanceof AmbitError && err.field === 'subscribe.subscription.filters[0].tags[0]');
    await assert.rejects(pub.publish({ id: 'tg4', ...P, tags: [3 as unknown as string] }), (err: unknown) => err instanceof AmbitError && err.field === 'event.tags[0]');
  });

  test('error replies carry the gRPC code, message and field; the stream stays usable', async () => {
    const d = await device('errors');
    const rejects = async (p: Promise<unknown>, code: number, field: string, re: RegExp) => {
      await assert.rejects(p, (err: unknown) => {
        assert.ok(err instanceof AmbitError, String(err));
        assert.equal(err.code, code, err.message);
        assert.equal(err.field, field);
        assert.match(err.message, re);
        return true;
      });
    };
    await rejects(d.subscribe({ id: 'bad', filters: [{ area: { radiusM: -5 } }] }), StatusCode.INVALID_ARGUMENT, 'subscribe.subscription.filters[0].area.radius_m', /^INVALID_ARGUMENT: .*got -5/);
    await rejects(
      d.subscribe({ id: 'bad', filters: [{ constraints: [{ name: 'price', op: 'lt', value: 'cheap' }] }] }),
      StatusCode.INVALID_ARGUMENT,
      'subscribe.subscription.filters[0].constraints[0].value',
      /takes a number/,
    );
    await d.subscribe(deals);
    await rejects(d.subscribe(deals), StatusCode.ALREADY_EXISTS, 'subscribe.subscription.id', /already has subscription "deals"/);
    await rejects(d.unsubscribe('nope'), StatusCode.NOT_FOUND, 'unsubscribe.subscription_id', /no subscription "nope"/);
    await rejects(d.replace({ id: 'nope', filters: [{}] }), StatusCode.NOT_FOUND, 'replace.subscription.id', /no subscription "nope"/);
    // Caught by the SDK before anything is sent.
    await rejects(d.subscribe({ id: 'x', filters: [{ constraints: [{ name: 'a', op: 'glob' as never, value: 1 }] }] }), StatusCode.INVALID_ARGUMENT, 'subscribe.subscription.filters[0].constraints[0].op', /must be one of/);
    assert.throws(() => d.updateLocation(91, 0), (err: unknown) => err instanceof AmbitError && err.field === 'location.lat' && /\[-90, 90\], got 91/.test(err.message));
    assert.throws(() => d.updateLocation(0, Number.NaN), (err: unknown) => err instanceof AmbitError && err.field === 'location.lon');

    await d.replace({ id: 'deals', filters: [{ constraints: [{ name: 'price', op: 'le', value: 10 }] }] });
    assert.deepEqual(await listed(d, 'errors'), [{ id: 'deals', filters: [{ constraints: [{ name: 'price', op: 'le', value: 10 }] }] }]);
    await d.unsubscribe('deals');
    assert.deepEqual((await ops.deviceSubscriptions('errors')).subscriptions, []);
    assert.equal(d.state, 'connected');
  });

  test('a superseded stream reconnects and resumes after the last processed notification, without repeats', async () => {
    const d = await device('resume', { backoff: { initialMs: 150, maxMs: 300 } });
    const log: string[] = [];
    d.on('disconnected', (e: DeviceEventMap['disconnected']) => log.push(`disconnected:${e.error.codeName}:${e.willReconnect}`));
    d.on('reconnecting', () => log.push('reconnecting'));
    d.on('connected', (e) => log.push(`connected:${e.reconnect}`));
    await d.subscribe(ping);
    for (let i = 1; i <= 5; i++) await pub.publish({ id: `e${i}`, ...P, attributes: { type: 'ping' } });
    await waitFor('5 notifications buffered', () => d.stats.notifications === 5);
    const it = d.notifications();
    const seen: Notification[] = [];
    for (let i = 0; i < 3; i++) seen.push(await next(it));
    await new Promise((r) => setImmediate(r)); // lets the ack go out

    // A second stream of the same device: the server ends the SDK's stream with ABORTED.
    const Dev = grpcClient(DeviceService);
    const raw = new Dev(t.address, grpc.credentials.createInsecure());
    const md = new grpc.Metadata();
    md.set('authorization', `Bearer ${t.token('resume')}`);
    const s = raw.connect(md) as grpc.ClientDuplexStream<unknown, unknown>;
    s.on('data', () => {});
    s.on('error', () => {});
    s.write({ message: { case: 'hello', value: { resumeToken: '' } } });
    await waitFor('disconnect', () => log.includes('disconnected:ABORTED:true'));
    for (let i = 6; i <= 7; i++) await pub.publish({ id: `e${i}`, ...P, attributes: { type: 'ping' } });
    await waitFor('reconnect', () => d.state === 'connected' && d.stats.reconnects === 1);
    for (let i = 0; i < 4; i++) seen.push(await next(it));
    raw.close();

    assert.deepEqual(
      seen.map((n) => n.event.id),
      ['e1', 'e2', 'e3', 'e4', 'e5', 'e6', 'e7'],
    );
    for (let i = 1; i < seen.length; i++) assert.ok(compareDeliveryIds(seen[i - 1].deliveryId, seen[i].deliveryId) < 0);
    // Resumed after e2 (e3 was taken but not yet processed): e3..e5 came again and were dropped.
    assert.equal(d.stats.duplicates, 3);
    assert.deepEqual(log, ['disconnected:ABORTED:true', 'reconnecting', 'connected:true']);

    // close() acknowledges what was taken: a new stream of the device resumes after e7.
    await d.close();
    const again = await device('resume');
    assert.equal(again.resumeToken, seen[6].deliveryId);
    await pub.publish({ id: 'e8', ...P, attributes: { type: 'ping' } });
    assert.equal((await next(again.notifications())).event.id, 'e8');
  });

  test('location updates coalesce: the newest wins while connected and while the network is down', async () => {
    const proxy = await TcpProxy.start(streamPort(t.server));
    try {
      const d = await device('mover');
      d.updateLocation(P.lat, P.lon);
      await d.subscribe(ping);
      await waitFor('first position', async () => (await ops.deviceSubscriptions('mover')).location !== null);

      // 1000 updates in one turn of the event loop: one message.
      let s0 = await ops.stats();
      for (let i = 1; i <= 1000; i++) d.updateLocation(P.lat + i * M, P.lon);
      await waitFor('last position', async () => (await ops.deviceSubscriptions('mover')).location?.lat === P.lat + 1000 * M);
      let s1 = await ops.stats();
      assert.equal(s1.locationUpdates - s0.locationUpdates, 1);
      assert.equal(d.stats.locationsCoalesced, 999);
      await d.close();

      // Through the proxy: cut the network, move while disconnected, publish meanwhile.
      const via = await AmbitDevice.connect(streamAddress(transport, proxy.address), t.token('mover'), withSocket(transport, { backoff: { initialMs: 40, maxMs: 80 } }));
      open.push(via);
      const it = via.notifications();
      await pub.publish({ id: 'p1', ...P, attributes: { type: 'ping' } });
      assert.equal((await next(it)).event.id, 'p1');
      proxy.refuse = true;
      proxy.cut();
      await waitFor('disconnected', () => via.state !== 'connected');
      await pub.publish({ id: 'p2', ...P, attributes: { type: 'ping' } });
      s0 = await ops.stats();
      for (let i = 1; i <= 500; i++) via.updateLocation(P.lat - i * M, P.lon);
      // A few refused reconnects: attempts that ended, each announcing the next.
      let refused = 0;
      const counting = via.on('reconnecting', () => refused++);
      await waitFor('three refused reconnects', () => refused >= 3);
      counting();
      assert.equal(via.state, 'reconnecting');
      assert.equal((await ops.stats()).locationUpdates, s0.locationUpdates);
      proxy.refuse = false;
      await waitFor('reconnected', () => via.state === 'connected');
      await waitFor('position after reconnect', async () => (await ops.deviceSubscriptions('mover')).location?.lat === P.lat - 500 * M);
      s1 = await ops.stats();
      assert.equal(s1.locationUpdates - s0.locationUpdates, 1);
      assert.equal((await next(it)).event.id, 'p2');
      // p1 was taken but not yet processed when the network went: delivered again, dropped.
      assert.equal(via.stats.duplicates, 1);
    } finally {
      await proxy.close();
    }
  });

  test('close() answers what was asked, ends notifications and refuses new requests', async () => {
    const d = await device('closer');
    const it = d.notifications();
    const pending = it.next();
    const sub = d.subscribe(ping);
    await d.close();
    await sub; // answered before the stream ended
    assert.deepEqual(await pending, { value: undefined, done: true });
    assert.equal(d.state, 'closed');
    await assert.rejects(d.subscribe(deals), (err: unknown) => err instanceof AmbitError && err.code === StatusCode.CANCELLED);
    assert.throws(() => d.updateLocation(0, 0), AmbitError);
    assert.equal((await ops.deviceSubscriptions('closer')).connected, false);
  });

  test('errors not worth retrying fail connect() at once', { timeout: 60_000 }, async () => {
    // A retry would wait an hour and then fail DEADLINE_EXCEEDED: failing with the server's code shows there was none.
    const SLOW = { backoff: { initialMs: 3_600_000, maxMs: 3_600_000 }, connectTimeoutMs: 3_600_000 };
    await assert.rejects(AmbitDevice.connect(addr(), 'not.a.token', withSocket(transport, SLOW)), (err: unknown) => err instanceof AmbitError && err.code === StatusCode.UNAUTHENTICATED);
    await assert.rejects(AmbitDevice.connect(addr(), t.token('pub', ['publish']), withSocket(transport, SLOW)), (err: unknown) => err instanceof AmbitError && err.code === StatusCode.PERMISSION_DENIED);
    // Nothing listening: retried until the connect timeout.
    await assert.rejects(AmbitDevice.connect(streamAddress(transport, '127.0.0.1:1'), t.token('x'), withSocket(transport, { ...FAST, connectTimeoutMs: 300 })), (err: unknown) => err instanceof AmbitError && err.code === StatusCode.DEADLINE_EXCEEDED);
  });

  test('delayed acks: one ack message for many notifications, sent at close at the latest', async () => {
    // A delay no test outlives: only close() can send the ack.
    const d = await device('delayed', { ackDelayMs: 3_600_000 });
    await d.subscribe(ping);
    const it = d.notifications();
    for (let i = 1; i <= 5; i++) await pub.publish({ id: `q${i}`, ...P, attributes: { type: 'ping' } });
    let last = '';
    for (let i = 1; i <= 5; i++) last = (await next(it)).deliveryId;
    // A round trip on the stream: turns pass in which an undelayed ack would have gone out.
    await assert.rejects(d.unsubscribe('none'), (err: unknown) => err instanceof AmbitError && err.code === StatusCode.NOT_FOUND);
    assert.equal(d.stats.acksSent, 0, 'nothing sent within the delay');
    await d.close();
    assert.equal(d.stats.acksSent, 1, 'one message at close for everything taken');
    const again = await device('delayed');
    assert.equal(again.resumeToken, last, 'the server has the ack of the fifth');
    await pub.publish({ id: 'q6', ...P, attributes: { type: 'ping' } });
    assert.equal((await next(again.notifications())).event.id, 'q6', 'nothing acknowledged comes again');
    assert.throws(() => new AmbitDevice(addr(), t.token('x'), { ackDelayMs: -1 }), (err: unknown) => err instanceof AmbitError && /ackDelayMs/.test(err.message));
  });

  test('explicit acks: nothing is acknowledged until ack() is called', async () => {
    const d = await device('manual', { autoAck: false });
    await d.subscribe(ping);
    const it = d.notifications();
    await pub.publish({ id: 'm1', ...P, attributes: { type: 'ping' } });
    await pub.publish({ id: 'm2', ...P, attributes: { type: 'ping' } });
    const m1 = await next(it);
    await next(it);
    d.ack(m1);
    assert.throws(() => d.ack('9999999999999-1'), AmbitError);
    await d.close();
    const again = await device('manual', { autoAck: false });
    assert.equal(again.resumeToken, m1.deliveryId);
    assert.equal((await next(again.notifications())).event.id, 'm2');
  });

  test('an embedded server restarted: the welcome says the state is gone and the SDK subscribes again to what the server had confirmed; delivery starts afresh', async () => {
    const secret = 'restart-test-secret-0123456789abcdef0123';
    const first = await startServer({ port: 0, metricsPort: null, webPort: 0, engine: 'fast', tokenSecret: secret, shutdownGraceS: 1 });
    // The devices reach the server through the proxy; publishers and ops call it directly.
    const proxy = await TcpProxy.start(streamPort(first));
    let second: Awaited<ReturnType<typeof startServer>> | null = null;
    const devs: AmbitDevice[] = [];
    try {
      const token = (subject: string, scopes: string[] = [SCOPES.device]) => first.authority!.issue({ subject, scopes, ttlSeconds: 600 });
      const connected = new Map<string, DeviceEventMap['connected'][]>();
      const open2 = async (name: string) => {
        const d = await AmbitDevice.connect(streamAddress(transport, proxy.address), token(name), withSocket(transport, FAST));
        devs.push(d);
        const seen: DeviceEventMap['connected'][] = [];
        connected.set(name, seen);
        d.on('connected', (e) => seen.push(e));
        return d;
      };
      // `heard` acknowledges a notification (a resume token); `quiet` acknowledges none (no token: only the state id tells).
      const [heard, quiet] = await Promise.all([open2('heard'), open2('quiet')]);
      await Promise.all([heard.subscribe(ping), heard.subscribe(accidents), heard.subscribe(deals), quiet.subscribe(ping)]);
      await heard.unsubscribe('deals');
      await heard.replace({ ...accidents, filters: [{ constraints: [{ name: 'type', op: 'eq', value: 'accident' }] }] });
      const p1 = new AmbitPublisher(`127.0.0.1:${first.port}`, token('pub', [SCOPES.publish]));
      try {
        assert.equal((await p1.publish({ id: 'before', ...P, attributes: { type: 'ping' } })).reached, 2);
      } finally {
        p1.close();
      }
      const it = heard.notifications();
      const before = await next(it);
      assert.equal(before.event.id, 'before');
      heard.ack(before);
      await waitFor('the notification acknowledged', () => heard.resumeToken === before.deliveryId);

      await first.stop();
      second = await startServer({ port: 0, metricsPort: null, webPort: 0, engine: 'fast', tokenSecret: secret, shutdownGraceS: 1 });
      proxy.retarget(streamPort(second));
      proxy.cut();
      // (the listeners were added after the first welcome: each has seen the new server's only)
      await waitFor('both devices welcomed by the new server', () => connected.get('heard')!.length === 1 && connected.get('quiet')!.length === 1, 10_000);
      for (const name of ['heard', 'quiet']) {
        const again = connected.get(name)![0];
        assert.equal(again.reconnect, true);
        assert.equal(again.stateLost, true, `${name}: told its state is gone`);
      }
      assert.equal(heard.stats.resubscribed, 2);
      assert.equal(quiet.stats.resubscribed, 1);
      const ops2 = new AmbitOps(`127.0.0.1:${second.port}`, token('ops', [SCOPES.ops]));
      const p2 = new AmbitPublisher(`127.0.0.1:${second.port}`, token('pub', [SCOPES.publish]));
      try {
        // What the server had confirmed, as it was last: deals removed, accidents replaced.
        await waitFor('the subscriptions made again', async () => (await ops2.deviceSubscriptions('heard')).subscriptions.length === 2 && (await ops2.deviceSubscriptions('quiet')).subscriptions.length === 1);
        const held = (await ops2.deviceSubscriptions('heard')).subscriptions.sort((a, b) => a.id.localeCompare(b.id));
        assert.deepEqual(held.map((x) => x.id), ['accidents', 'ping']);
        assert.deepEqual(held[0].filters[0].constraints, [{ name: 'type', op: 'eq', value: 'accident' }]);
        // Delivery starts afresh: the new server's first notification is not taken for a repeat.
        assert.equal((await p2.publish({ id: 'after', ...P, attributes: { type: 'ping' } })).reached, 2);
        assert.equal((await next(it)).event.id, 'after');
        // `quiet` acknowledged nothing (its resume token is empty): it still holds the first server's notification, then the new one.
        const qi = quiet.notifications();
        const old = await next(qi);
        assert.equal(old.event.id, 'before');
        const fresh = await next(qi);
        assert.equal(fresh.event.id, 'after');
        // The old notification's id means nothing to the new log: acknowledging it changes nothing,
        // also after a newer one (whose id compares above it) was delivered.
        quiet.ack(old);
        quiet.ack(old.deliveryId);
        assert.notEqual(quiet.resumeToken, old.deliveryId);
        quiet.ack(fresh);
        assert.equal(quiet.resumeToken, fresh.deliveryId);
        assert.equal(heard.stats.duplicates, 0);
      } finally {
        ops2.close();
        p2.close();
      }
    } finally {
      await Promise.all(devs.map((d) => d.close()));
      await proxy.close();
      await first.stop();
      await second?.stop();
    }
  });
});
