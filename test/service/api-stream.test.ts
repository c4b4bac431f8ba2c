/**
 * The device stream: delivery ids, acknowledgements and resuming after a reconnect (exactly the
 * un-acknowledged notifications, in order), a second stream of a device superseding the first
 * (ABORTED), Welcome.missed for what retention dropped, requests sent right behind hello, and a
 * slow consumer: a device that never reads while thousands of notifications are published must
 * not grow the server's memory (the backlog stays in the hub's log, which retention bounds), the
 * `ambit_send_queue` gauge stays bounded, and other devices keep getting theirs.
 */
import assert from 'node:assert/strict';
import { after, afterEach, before, describe, it } from 'node:test';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import * as grpc from '@grpc/grpc-js';
import { CPU_ENGINES } from '../../src/engines/index.js';
import { AmbitError } from '../../src/model/errors.js';
import { DEFAULT_LIMITS } from '../../src/model/limits.js';
import { TokenAuthority } from '../../services/edge/auth.js';
import { EmbeddedHub } from '../../services/hub/embedded.js';
import { Gateway } from '../../services/edge/gateway.js';
import type { Hub } from '../../services/hub/port.js';
import { silentLogger } from '../../services/process/log.js';
import { MatchCore } from '../../services/matcher/core.js';
import { Metrics } from '../../services/process/metrics.js';
import { grpcServerDefinition } from '../../api/rpc.js';
import { DeviceService } from '../../api/gen/ambit/v1/device_pb.js';
import type { Notification } from '../../api/gen/ambit/v1/types_pb.js';
import { Clients, DeviceStream, type Init, Status, type TestServer, checkStatus, clientStream, eventually, meta, startHubServer, startTestServer, unary } from '../support/grpc.js';

const everything: Init = { id: 'all', filters: [{}] };
const event = (id: string, attributes: Init = {}): Init => ({ id, position: { lat: 0, lon: 0 }, attributes });
const seqOf = (deliveryId: string) => Number(deliveryId.split('-')[1]);

describe('api stream: acknowledgements, resume and supersede', () => {
  let srv: TestServer;
  let clients: Clients;
  let pubMd: Init;
  let opsMd: Init;

  const publish = async (...ids: string[]) => {
    const res = await clientStream(clients.publisher, 'bulkPublish', [{ events: ids.map((id) => event(id)) }], pubMd);
    assert.equal(res.accepted, BigInt(ids.length));
  };
  const eventIds = (ns: Notification[]) => ns.map((n) => n.event!.id);

  before(async () => {
    srv = await startTestServer();
    clients = srv.clients();
    pubMd = srv.meta('pub', ['publish']);
    opsMd = srv.meta('ops', ['ops']);
  });

  after(async () => {
    assert.deepEqual(srv.unexpectedErrors(), []);
    await srv.stop();
  });

  it('a reconnect resumes after the last ack with exactly the un-acked notifications, in order', async () => {
    const token = srv.token('dev-r', ['device']);
    const { stream: s1, welcome: w1 } = await DeviceStream.open(clients, token);
    assert.deepEqual([w1.deviceId, w1.resumeToken, w1.missed, w1.stateLost], ['dev-r', '', 0n, false]);
    assert.match(w1.stateId, /^[0-9a-f]{16}\.\d+$/);
    await s1.subscribeOk(everything);
    await publish('e1', 'e2', 'e3', 'e4', 'e5');
    const first = await s1.notifications(5);
    assert.deepEqual(eventIds(first), ['e1', 'e2', 'e3', 'e4', 'e5']);
    for (let i = 1; i < first.length; i++) assert.equal(seqOf(first[i].deliveryId), seqOf(first[i - 1].deliveryId) + 1, 'ids increase by one per notification');
    assert.deepEqual(first[0].subscriptionIds, ['all']);
    s1.ack(first[1].deliveryId);
    await s1.sync();
    s1.cancel();
    await s1.end();
    await publish('e6', 'e7');

    // Empty resume token: after the last acknowledged (e2).
    const { stream: s2, welcome: w2 } = await DeviceStream.open(clients, token);
    assert.equal(w2.resumeToken, first[1].deliveryId);
    assert.equal(w2.missed, 0n);
    assert.deepEqual([w2.stateLost, w2.stateId], [false, w1.stateId]);
    const second = await s2.notifications(5);
    assert.deepEqual(eventIds(second), ['e3', 'e4', 'e5', 'e6', 'e7']);
    assert.deepEqual(second.slice(0, 3).map((n) => n.deliveryId), first.slice(2).map((n) => n.deliveryId), 'redelivered under the same ids');
    await s2.expectQuiet('notification');
    // Acks move forward only: acking e5 then (again) e3 leaves the resume point at e5.
    s2.ack(second[2].deliveryId);
    s2.ack(second[0].deliveryId);
    await s2.sync();
    s2.cancel();
    await s2.end();

    // An explicit resume token wins over the stored ack point.
    const { stream: s3, welcome: w3 } = await DeviceStream.open(clients, token, second[3].deliveryId);
    assert.equal(w3.resumeToken, second[3].deliveryId);
    assert.equal(w3.stateLost, false);
    assert.deepEqual(eventIds(await s3.notifications(1)), ['e7']);
    await s3.expectQuiet('notification');
    s3.cancel();
    await s3.end();

    const { stream: s4, welcome: w4 } = await DeviceStream.open(clients, token);
    assert.equal(w4.resumeToken, second[2].deliveryId, 'the ack point is e5');
    assert.deepEqual(eventIds(await s4.notifications(2)), ['e6', 'e7']);
    s4.ack(second[4].deliveryId);
    await s4.sync();
    // Acknowledged everything: a reconnect delivers nothing old, and new ones continue the ids.
    s4.cancel();
    await s4.end();
    const { stream: s5 } = await DeviceStream.open(clients, token);
    await s5.expectQuiet('notification');
    await publish('e8');
    const [n8] = await s5.notifications(1);
    assert.equal(n8.event!.id, 'e8');
    assert.equal(seqOf(n8.deliveryId), seqOf(second[4].deliveryId) + 1);
    // A resume token the log never issued (state lost) starts from the oldest retained.
    s5.cancel();
    await s5.end();
    const { stream: s6, welcome: w6 } = await DeviceStream.open(clients, token, '99999999999999-99');
    assert.equal(w6.resumeToken, '');
    assert.deepEqual([w6.stateLost, w6.stateId], [true, w1.stateId], 'told: the token is of a state this server does not have');
    assert.deepEqual(eventIds(await s6.notifications(8)), ['e1', 'e2', 'e3', 'e4', 'e5', 'e6', 'e7', 'e8']);
    s6.cancel();
  });

  it('a second stream of a device supersedes the first with ABORTED; only the new one gets notifications', async () => {
    const token = srv.token('dev-s', ['device']);
    const { stream: old } = await DeviceStream.open(clients, token);
    await old.subscribeOk(everything);
    // The second one on another connection, as a phone that reconnected over a new network.
    const other = new Clients(srv.target, grpc.credentials.createInsecure(), { 'grpc.use_local_subchannel_pool': 1 });
    try {
      const { stream: fresh } = await DeviceStream.open(other, token);
      const end = await old.end();
      checkStatus(end, Status.ABORTED);
      assert.match(end.details, /superseded/);
      await publish('s1');
      assert.deepEqual(eventIds(await fresh.notifications(1)), ['s1']);
      assert.equal(old.pending('notification').length, 0);
      const info = await unary(clients.ops, 'getDeviceSubscriptions', { deviceId: 'dev-s' }, opsMd);
      assert.equal(info.connected, true);
      // Requests on the new stream act on the same device.
      assert.equal((await fresh.unsubscribe('all')).code, 0);
      fresh.cancel();
      await fresh.end();
      await eventually(async () => !(await unary(clients.ops, 'getDeviceSubscriptions', { deviceId: 'dev-s' }, opsMd)).connected, 'the device to be disconnected');
    } finally {
      other.close();
    }
  });

  it('a client half-close is answered: pending requests get their replies, then the stream ends OK', async () => {
    const s = new DeviceStream(clients.device, srv.meta('dev-h', ['device']));
    s.send({ message: { case: 'hello', value: {} } });
    s.send({ message: { case: 'subscribe', value: { requestId: 'a', subscription: everything } } });
    s.send({ message: { case: 'unsubscribe', value: { requestId: 'b', subscriptionId: 'all' } } });
    const end = await s.close();
    assert.equal(end.code, Status.OK);
    assert.deepEqual(
      s.received.map((m) => (m.message.case === 'reply' ? `${m.message.value.requestId}:${m.message.value.status!.code}` : m.message.case)),
      ['welcome', 'a:0', 'b:0'],
    );
  });
});

describe('api stream: retention and Welcome.missed', () => {
  // One server per rule, so a slow run cannot age out what the count test counts.
  let srv: TestServer;
  let clients: Clients;
  let pubMd: Init;

  const use = async (retention: { maxPerDevice: number; maxAgeMs: number }, now?: () => number) => {
    // With a clock, the hub is built here (the server's config takes no clock).
    srv = now === undefined ? await startTestServer({ retention }) : await startHubServer(new EmbeddedHub(new MatchCore(CPU_ENGINES.fast()), { retention, now }));
    clients = srv.clients();
    pubMd = srv.meta('pub', ['publish']);
  };

  afterEach(async () => {
    assert.deepEqual(srv.unexpectedErrors(), []);
    await srv.stop();
  });

  const publishN = async (prefix: string, n: number) => {
    await clientStream(clients.publisher, 'bulkPublish', [{ events: Array.from({ length: n }, (_, i) => event(`${prefix}${i}`)) }], pubMd);
  };

  it('a device away while 12 notifications arrive, 5 kept: Welcome.missed is 7, the newest 5 follow', async () => {
    await use({ maxPerDevice: 5, maxAgeMs: 3600_000 });
    const token = srv.token('dev-m', ['device']);
    const { stream: s1 } = await DeviceStream.open(clients, token);
    await s1.subscribeOk(everything);
    s1.cancel();
    await s1.end();
    await publishN('m', 12);
    const { stream: s2, welcome } = await DeviceStream.open(clients, token);
    assert.equal(welcome.missed, 7n);
    assert.equal(welcome.resumeToken, '');
    const got = await s2.notifications(5);
    assert.deepEqual(got.map((n) => n.event!.id), ['m7', 'm8', 'm9', 'm10', 'm11']);
    assert.equal(seqOf(got[0].deliveryId), 8);
    s2.ack(got[1].deliveryId); // m8
    await s2.sync();
    s2.cancel();
    await s2.end();
    // Missed counts from the resume point: after m8 (seq 9) come m9-m11 (10-12) and n0-n5 (13-18);
    // the log keeps the newest 5 (n1-n5), so m9, m10, m11 and n0 are lost.
    await publishN('n', 6);
    const { stream: s3, welcome: w3 } = await DeviceStream.open(clients, token);
    assert.equal(w3.resumeToken, got[1].deliveryId);
    assert.equal(w3.missed, 4n, 'm9, m10, m11 and n0 were dropped after the resume point');
    assert.deepEqual((await s3.notifications(5)).map((n) => n.event!.id), ['n1', 'n2', 'n3', 'n4', 'n5']);
    s3.cancel();
    const stats = await unary(clients.ops, 'getStats', {}, srv.meta('ops', ['ops']));
    assert.equal(stats.notificationsDropped, 13n, '7 on the first reconnect, 6 more on the second');
    assert.match(await srv.metrics(), /^ambit_notifications_dropped\{role="all"\} 13$/m);
  });

  it('notifications older than maxAgeMs are dropped and counted in Welcome.missed', async () => {
    let now = 1_700_000_000_000;
    await use({ maxPerDevice: 100, maxAgeMs: 1000 }, () => now);
    const token = srv.token('dev-age', ['device']);
    const { stream: s1 } = await DeviceStream.open(clients, token);
    await s1.subscribeOk(everything);
    s1.cancel();
    await s1.end();
    await publishN('old', 3);
    now += 1000; // exactly maxAgeMs old: still kept
    await publishN('new', 2);
    now += 1; // the old ones are now past maxAgeMs, the new ones not
    const { stream: s2, welcome } = await DeviceStream.open(clients, token);
    assert.equal(welcome.missed, 3n);
    assert.deepEqual((await s2.notifications(2)).map((n) => n.event!.id), ['new0', 'new1']);
    s2.cancel();
  });
});

describe('api stream: requests sent right behind hello wait for it', () => {
  /** A hub whose openInbox waits for `gate` and then fails or succeeds, in front of an embedded hub. */
  function gatedHub(): { hub: Hub; inner: EmbeddedHub; open: (fail: boolean) => void } {
    const inner = new EmbeddedHub(new MatchCore(CPU_ENGINES.fast()));
    let release!: (fail: boolean) => void;
    const gate = new Promise<boolean>((r) => (release = r));
    const hub: Hub = {
      mode: 'embedded',
      addSubscription: (d, s) => inner.addSubscription(d, s),
      replaceSubscription: (d, s) => inner.replaceSubscription(d, s),
      removeSubscription: (d, id) => inner.removeSubscription(d, id),
      listSubscriptions: (d) => inner.listSubscriptions(d),
      deviceInfo: (d) => inner.deviceInfo(d),
      updateLocations: (u) => inner.updateLocations(u),
      locationWriter: (d) => inner.locationWriter(d),
      publish: (e) => inner.publish(e),
      openInbox: async (d, after) => {
        if (await gate) throw new AmbitError('UNAVAILABLE', 'hub: store unreachable');
        return inner.openInbox(d, after);
      },
      stats: () => inner.stats(),
      listDevices: (q) => inner.listDevices(q),
      purgeDevice: (d) => inner.purgeDevice(d),
      markSeen: (ds, ms) => inner.markSeen(ds, ms),
      expireDevices: (before, max) => inner.expireDevices(before, max),
      revokeTokens: (rs) => inner.revokeTokens(rs),
      watchRevocations: (l) => inner.watchRevocations(l),
      close: () => inner.close(),
    };
    return { hub, inner, open: release };
  }

  async function serve(hub: Hub): Promise<{ clients: Clients; token: string; received: () => number; stop: () => Promise<void> }> {
    const authority = new TokenAuthority('a'.repeat(32));
    const metrics = new Metrics(hub, 'all');
    const gateway = new Gateway(hub, authority, DEFAULT_LIMITS, metrics, silentLogger());
    const server = new grpc.Server();
    server.addService(grpcServerDefinition(DeviceService), gateway.handlers().device);
    const port = await new Promise<number>((resolve, reject) => server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (e, p) => (e ? reject(e) : resolve(p))));
    const clients = new Clients(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
    return {
      clients,
      token: authority.issue({ subject: 'dev-g', scopes: ['device'] }),
      // Stream location messages the gateway has read (counted on arrival, before hello is answered).
      received: () => metrics.counters.locationUpdatesStream,
      stop: async () => {
        clients.close();
        server.forceShutdown();
        await metrics.close();
        await hub.close();
      },
    };
  }

  it('when the hello succeeds late, the queued subscribe and location apply after the welcome', async () => {
    const { hub, inner, open } = gatedHub();
    const s = await serve(hub);
    try {
      const stream = new DeviceStream(s.clients.device, meta(s.token));
      stream.send({ message: { case: 'hello', value: {} } });
      stream.send({ message: { case: 'location', value: { lat: 3, lon: 4 } } });
      stream.send({ message: { case: 'subscribe', value: { requestId: 'q', subscription: everything } } });
      // The same position again, last: once the gateway has read it, it has read the subscribe.
      stream.send({ message: { case: 'location', value: { lat: 3, lon: 4 } } });
      await eventually(() => s.received() === 2, 'the gateway to read every message sent');
      assert.equal(stream.received.length, 0, 'nothing answered before the hello');
      open(false);
      await stream.next('welcome');
      const r = await stream.next('reply');
      assert.deepEqual([r.requestId, r.status!.code], ['q', 0]);
      assert.deepEqual((await inner.listSubscriptions('dev-g')).map((x) => x.id), ['all']);
      assert.deepEqual((await inner.deviceInfo('dev-g')).location, { lat: 3, lon: 4 });
      stream.cancel();
    } finally {
      await s.stop();
    }
  });

  it('when the hello fails, requests queued behind it are not applied', async () => {
    const { hub, inner, open } = gatedHub();
    const s = await serve(hub);
    try {
      const stream = new DeviceStream(s.clients.device, meta(s.token));
      stream.send({ message: { case: 'hello', value: {} } });
      stream.send({ message: { case: 'subscribe', value: { requestId: 'q', subscription: everything } } });
      stream.send({ message: { case: 'location', value: { lat: 3, lon: 4 } } });
      await eventually(() => s.received() === 1, 'the gateway to read every message sent');
      open(true);
      // The requests queued behind the hello run in the promise turns right after its failure, so
      // before the status it sent has crossed the socket.
      checkStatus(await stream.end(), Status.UNAVAILABLE);
      assert.deepEqual(await inner.listSubscriptions('dev-g'), [], 'the subscribe behind the failed hello was not applied');
      assert.equal((await inner.deviceInfo('dev-g')).location, null);
    } finally {
      await s.stop();
    }
  });
});

describe('api stream: a slow consumer', () => {
  const N = 8000;
  const RETAIN = 200;
  let srv: TestServer;
  let clients: Clients;
  let slowClients: Clients;

  before(async () => {
    srv = await startTestServer({ retention: { maxPerDevice: RETAIN, maxAgeMs: 3600_000 } });
    clients = srv.clients();
    // Its own connection: a stalled stream holds its connection's HTTP/2 window too.
    slowClients = new Clients(srv.target, grpc.credentials.createInsecure(), { 'grpc.use_local_subchannel_pool': 1 });
  });

  after(async () => {
    slowClients.close();
    assert.deepEqual(srv.unexpectedErrors(), []);
    await srv.stop();
  });

  it(`a device that never reads while ${N} notifications of 4 KiB are published: bounded heap and send queue; others get theirs`, async (t) => {
    setFlagsFromString('--expose-gc');
    const gc = runInNewContext('gc') as () => void;
    const heap = () => {
      gc();
      gc();
      // Serialized messages are Buffers: count memory outside the V8 heap too.
      const m = process.memoryUsage();
      return m.heapUsed + m.external;
    };
    const pubMd = srv.meta('pub', ['publish']);
    const { stream: slow } = await DeviceStream.open(slowClients, srv.token('dev-slow', ['device']));
    await slow.subscribeOk(everything);
    const { stream: fast } = await DeviceStream.open(clients, srv.token('dev-fast', ['device']));
    await fast.subscribeOk({ id: 'some', filters: [{ constraints: [{ name: 'pick', op: 10 /* EXISTS */ }] }] });
    slow.call.pause(); // the app stops reading

    const blob = (i: number, k: number) => `${i}:${k}:`.padEnd(1000, 'x');
    // Every 50th event is a small one the fast device wants; the rest are 4 KiB for the slow one.
    const batch = (from: number, n: number) =>
      Array.from({ length: n }, (_, j) => {
        const i = from + j;
        if (i % 50 === 0) return event(`ev${i}`, { pick: { kind: { case: 'flag', value: true } } });
        const text = (k: number) => ({ kind: { case: 'text', value: blob(i, k) } });
        return event(`ev${i}`, { a: text(0), b: text(1), c: text(2), d: text(3) });
      });
    const round = async (from: number) => {
      const msgs = Array.from({ length: 10 }, (_, k) => ({ events: batch(from + k * 100, 100) }));
      const res = await clientStream(clients.publisher, 'bulkPublish', msgs, pubMd);
      assert.equal(res.reached, 1000n + 20n, 'every event reaches the slow device, every 50th the fast one too');
      // The fast device gets its own meanwhile, in order.
      const got = await fast.notifications(20, 5000);
      assert.deepEqual(got.map((n) => n.event!.id), Array.from({ length: 20 }, (_, k) => `ev${from + k * 50}`));
    };
    // A warm-up round of the same shape, so the baseline holds what the first rounds allocate for good.
    await round(-1000);
    const base = heap();
    for (let i = 0; i < N / 2; i += 1000) await round(i);
    const mid = heap();
    for (let i = N / 2; i < N; i += 1000) await round(i);
    const end = heap();
    const published = (N * 49) / 50 * 4 * 1000;
    const mib = (b: number) => `${(b / 2 ** 20).toFixed(1)} MiB`;
    t.diagnostic(`memory: +${mib(mid - base)} over the first half, +${mib(end - mid)} over the second, ${mib(published)} published to a device that does not read`);
    assert.ok(end - base < published / 4, `memory grew ${mib(end - base)} while ${mib(published)} were published to a device that does not read`);
    assert.ok(end - mid < published / 2 / 10, `memory kept growing: ${mib(end - mid)} over the second half`);

    const m = await srv.metrics();
    const sendQueue = Number(/^ambit_send_queue\{role="all"\} (\d+)$/m.exec(m)?.[1]);
    const sent = Number(/^ambit_notifications_sent_total\{role="all"\} (\d+)$/m.exec(m)?.[1]);
    assert.equal(sendQueue, 1, 'the slow stream waits for HTTP/2 to drain (one stream blocked)');
    assert.ok(sent < N / 10 + RETAIN, `the server stopped writing to the stalled stream (${sent} notifications written in all)`);
    t.diagnostic(`${sent} notifications written in all; send queue ${sendQueue}`);
    const stats = await unary(clients.ops, 'getStats', {}, srv.meta('ops', ['ops']));
    assert.ok(stats.notificationsDropped >= BigInt(N - sent), `retention dropped the backlog (${stats.notificationsDropped})`);

    // The app reads again: what was in flight, then the newest retained, in order, ending with the last.
    slow.call.resume();
    await eventually(() => slow.pending('notification').at(-1)?.event?.id === `ev${N - 1}`, 'the slow device to catch up', 10_000);
    const ids = slow.pending('notification').map((n) => seqOf(n.deliveryId));
    for (let i = 1; i < ids.length; i++) assert.ok(ids[i] > ids[i - 1], 'in order');
    assert.ok(ids.length <= sent + RETAIN, `the backlog was not kept in memory (${ids.length} delivered)`);
    await eventually(async () => /^ambit_send_queue\{role="all"\} 0$/m.test(await srv.metrics()), 'the send queue to drain');
    slow.cancel();
    fast.cancel();
  });

  it('a client that sends requests and never reads the replies is held back by flow control, not buffered', async () => {
    const rejected = async () => Number(/^ambit_requests_rejected_total\{role="all"\} (\d+)$/m.exec(await srv.metrics())![1]);
    const r0 = await rejected();
    const { stream } = await DeviceStream.open(slowClients, srv.token('dev-spam', ['device']));
    stream.call.pause();
    // Each out-of-range location is answered with a Reply the client never reads. (The client's own
    // HTTP/2 stream buffers what the server does not take; that is the client's memory.)
    const SENT = 3000;
    for (let i = 0; i < SENT; i++) {
      if (!stream.call.write({ message: { case: 'location', value: { lat: 91, lon: 0 } } })) await new Promise((r) => stream.call.once('drain', r));
    }
    // The server stops reading the stream once a reply cannot be written (the gauge says so), long
    // before it has handled what was sent.
    const heldBack = async () => Number(/^ambit_streams_held_back\{role="all"\} (\d+)$/m.exec(await srv.metrics())![1]);
    await eventually(async () => (await heldBack()) === 1, 'the server to hold the stream back', 10_000);
    const handled = (await rejected()) - r0;
    assert.ok(handled < SENT / 2, `the server stopped reading once its replies backed up (${handled} handled of ${SENT} sent)`);
    // Once the client reads again, everything it sent is answered, in order.
    stream.call.resume();
    await eventually(() => stream.pending('reply').length === SENT, `${SENT} replies`, 10_000);
    assert.equal((await rejected()) - r0, SENT);
    assert.ok(stream.pending('reply').every((r) => r.status!.field === 'location.lat'));
    await eventually(async () => (await heldBack()) === 0, 'the server to read the stream again');
    stream.cancel();
  });
});
