/**
 * Device streams over WebSocket (services/edge/ws-device-stream.ts, ws-server.ts): a real `ws`
 * client against a node with AMBIT_WEB_PORT, publishing through gRPC. The same session as a
 * gRPC stream (welcome, replies, notifications, acks, resume after a dropped socket), the
 * credentials (header or subprotocol, once), the framing rules (binary, a flags byte, the end of
 * stream in Connect's JSON shape), flow control for a client that stops reading, and the drain
 * at shutdown.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { fromBinary } from '@bufbuild/protobuf';
import { StatusSchema } from '../../api/gen/google/rpc/status_pb.js';
import { Op } from '../../api/gen/ambit/v1/types_pb.js';
import { type Clients, type Init, type TestServer, clientStream, startTestServer, unary } from '../support/grpc.js';
import { WsDevice } from '../support/ws-device.js';
import { HIGH_WATER } from '../../services/edge/ws-device-stream.js';

const everything: Init = { id: 'all', filters: [{}] };
const event = (id: string, attributes: Init = {}): Init => ({ id, position: { lat: 45.46, lon: 9.19 }, attributes });

describe('websocket device streams', () => {
  let srv: TestServer;
  let clients: Clients;
  let pubMd: Init;
  let wsPort: number;

  const publish = async (...events: Init[]) => {
    const res = await clientStream(clients.publisher, 'bulkPublish', [{ events }], pubMd);
    assert.equal(res.accepted, BigInt(events.length));
    return res;
  };

  /** A device's stream: opened, welcomed, subscribed to everything. */
  const connect = async (device: string, resumeToken = ''): Promise<WsDevice> => {
    const d = await WsDevice.open(wsPort, { token: srv.token(device, ['device']) });
    d.send({ message: { case: 'hello', value: { resumeToken } } });
    await d.next('welcome');
    return d;
  };
  const subscribe = async (d: WsDevice, sub: Init, requestId = `r-${sub.id}`) => {
    const from = d.messages.length;
    d.send({ message: { case: 'subscribe', value: { requestId, subscription: sub } } });
    const r = await d.next('reply', from);
    assert.equal(r.message.case, 'reply');
    return r.message.value;
  };
  const eventIds = (d: WsDevice) => d.notifications().map((m) => (m.message.case === 'notification' ? m.message.value.event!.id : ''));

  before(async () => {
    srv = await startTestServer({ webPort: 0 });
    assert.ok(srv.server.webPort !== null && srv.server.webPort > 0, 'the node listens for WebSocket device streams');
    wsPort = srv.server.webPort;
    clients = srv.clients();
    pubMd = srv.meta('pub', ['publish']);
  });

  after(async () => {
    assert.deepEqual(srv.unexpectedErrors(), []);
    clients.close();
    await srv.stop();
  });

  it('a session as on gRPC: welcome, replies, notifications in order, acks, and resume after a dropped socket', async () => {
    const d = await connect('ws-1');
    const w = d.messages[0];
    assert.equal(w.message.case, 'welcome');
    assert.equal(w.message.case === 'welcome' && w.message.value.deviceId, 'ws-1');
    const ok = await subscribe(d, everything);
    assert.equal(ok.requestId, 'r-all');
    assert.equal(ok.status?.code, 0);
    await publish(event('e1', { kind: { kind: { case: 'text', value: 'accident' } } }), event('e2'), event('e3'));
    await d.until(() => d.notifications().length === 3, 'three notifications');
    assert.deepEqual(eventIds(d), ['e1', 'e2', 'e3']);
    const first = d.notifications()[0];
    assert.ok(first.message.case === 'notification');
    assert.deepEqual(first.message.value.subscriptionIds, ['all']);
    assert.equal(first.message.value.event!.attributes.kind?.kind.case, 'text');
    // Ack the first two, lose the socket, publish one more: a new socket resumes after the ack.
    const second = d.notifications()[1];
    assert.ok(second.message.case === 'notification');
    d.send({ message: { case: 'ack', value: { deliveryId: second.message.value.deliveryId } } });
    // The ack is applied in order before anything after it: a reply to a later request proves it arrived.
    await subscribe(d, { id: 'other', filters: [{ constraints: [{ name: 'kind', op: Op.EQ, value: { kind: { case: 'text', value: 'fire' } } }] }] });
    d.drop();
    await publish(event('e4'));
    const again = await connect('ws-1');
    const welcome = again.messages[0];
    assert.ok(welcome.message.case === 'welcome');
    assert.equal(welcome.message.value.resumeToken, second.message.value.deliveryId);
    await again.until(() => again.notifications().length === 2, 'the un-acked notifications');
    assert.deepEqual(eventIds(again), ['e3', 'e4']);
    again.halfClose();
    const end = await again.ended();
    assert.deepEqual(end, {}, 'a half-close ends the stream OK');
    assert.equal(again.closeCode, 1000);
  });

  it('errors: a refused request is its reply; a malformed message ends the stream INVALID_ARGUMENT with its details', async () => {
    const d = await connect('ws-2');
    const bad = await subscribe(d, { id: 'bad', filters: [{ area: { radiusM: -5, fixed: { lat: 0, lon: 0 } } }] });
    assert.equal(bad.status?.code, 3);
    assert.equal(bad.status?.field, 'subscribe.subscription.filters[0].area.radius_m');
    // A location out of range: a reply without a request id, as on gRPC; the stream goes on.
    const from = d.messages.length;
    d.send({ message: { case: 'location', value: { lat: 91, lon: 0 } } });
    const loc = await d.next('reply', from);
    assert.ok(loc.message.case === 'reply');
    assert.equal(loc.message.value.requestId, '');
    assert.equal(loc.message.value.status?.code, 3);
    assert.match(loc.message.value.status?.message ?? '', /lat/);
    // Garbage in a message frame: the same refusal as a malformed gRPC message, which ends the stream.
    d.sendRaw(Buffer.from([0, 0xff, 0xff, 0xff]));
    const end = await d.ended();
    assert.equal(end.error?.code, 'invalid_argument');
    assert.match(end.error?.message ?? '', /^request: malformed ambit\.v1\.ConnectRequest message/);
    assert.deepEqual(end.metadata, { 'ambit-field': ['request'] });
    assert.equal(d.closeCode, 1000);
    // A field-naming refusal carries the google.rpc.Status (with its BadRequest) as Connect carries details.
    const details = end.error?.details ?? [];
    assert.equal(details.length, 1);
    assert.equal(details[0].type, 'google.rpc.Status');
    const status = fromBinary(StatusSchema, Buffer.from(details[0].value, 'base64'));
    assert.equal(status.code, 3);
    assert.equal(status.details[0]?.typeUrl, 'type.googleapis.com/google.rpc.BadRequest');
  });

  it('framing: text messages, unknown flags, an empty message and a client end of stream with a payload are refused', async () => {
    const cases: [string, (d: WsDevice) => void, RegExp][] = [
      ['text', (d) => d.sendRaw('hello', false), /text messages/],
      ['flags 7', (d) => d.sendRaw(Buffer.from([7, 1, 2])), /unknown flags 7/],
      ['empty', (d) => d.sendRaw(Buffer.alloc(0)), /empty message/],
      ['end with payload', (d) => d.sendRaw(Buffer.from([2, 1])), /carries nothing/],
    ];
    for (const [what, act, why] of cases) {
      const d = await connect(`ws-frame-${what.replace(/\W/g, '')}`);
      act(d);
      const end = await d.ended();
      assert.equal(end.error?.code, 'invalid_argument', what);
      assert.match(end.error?.message ?? '', why, what);
    }
  });

  it('a message after the client\'s end of stream ends the stream INVALID_ARGUMENT and is not applied', async () => {
    const d = await connect('ws-late');
    d.halfClose();
    d.send({ message: { case: 'subscribe', value: { requestId: 'late', subscription: { id: 'late', filters: [{}] } } } });
    const end = await d.ended();
    assert.equal(end.error?.code, 'invalid_argument');
    assert.match(end.error?.message ?? '', /after the client's end of stream/);
    const info = (await unary(clients.ops, 'getDeviceSubscriptions', { deviceId: 'ws-late' }, srv.meta('ops', ['ops']))) as Init;
    assert.deepEqual(info.subscriptions, []);
  });

  it('credentials: the subprotocol or the header, exactly once, with the device scope', async () => {
    const token = srv.token('ws-auth', ['device']);
    const viaHeader = await WsDevice.open(wsPort, { token, via: 'header' });
    viaHeader.send({ message: { case: 'hello', value: { resumeToken: '' } } });
    const w = await viaHeader.next('welcome');
    assert.ok(w.message.case === 'welcome' && w.message.value.deviceId === 'ws-auth');
    viaHeader.halfClose();
    await viaHeader.ended();
    const refusals: [string, Parameters<typeof WsDevice.open>[1], string][] = [
      ['none', {}, 'unauthenticated'],
      ['a bad token', { token: 'not.a.token' }, 'unauthenticated'],
      ['header and subprotocol', { token, headers: { authorization: `Bearer ${token}` } }, 'unauthenticated'],
      ['two subprotocol tokens', { token, protocols: ['ambit.v1', `ambit.bearer.${srv.token('ws-other', ['device'])}`] }, 'unauthenticated'],
      ['a publisher token', { token: srv.token('pub', ['publish']) }, 'permission_denied'],
    ];
    for (const [what, o, code] of refusals) {
      const d = await WsDevice.open(wsPort, o);
      const end = await d.ended();
      assert.equal(end.error?.code, code, what);
      assert.equal(d.messages.length, 0, `${what}: nothing before the refusal`);
    }
  });

  it('the upgrade: another path, no ambit.v1 subprotocol, or a plain request are answered in HTTP', async () => {
    const token = srv.token('ws-http', ['device']);
    await assert.rejects(WsDevice.open(wsPort, { token, path: '/elsewhere' }), (e: Error & { status?: number }) => e.status === 404);
    await assert.rejects(WsDevice.open(wsPort, { token, protocols: ['chat'] }), (e: Error & { status?: number; body?: string }) => e.status === 400 && /ambit\.v1/.test(e.body ?? ''));
    const res = await fetch(`http://127.0.0.1:${wsPort}/ambit.v1.DeviceService/Connect`);
    assert.equal(res.status, 426);
    assert.match(await res.text(), /WebSocket endpoint/);
  });

  it('a message past the size limit closes the socket with 1009', async () => {
    const d = await connect('ws-big');
    d.sendRaw(Buffer.alloc(4 * 1024 * 1024 + 2));
    assert.equal(await d.closed(10_000), 1009);
  });

  it('flow control: a client that stops reading holds back what is written to it, then gets everything in order', async () => {
    const d = await connect('ws-slow');
    await subscribe(d, everything);
    // The client stops reading its socket: the server's writes back up.
    d.ws.pause();
    const sent = async () => Number(/^ambit_notifications_sent_total\{[^}]*\} (\d+)/m.exec(await srv.metrics())?.[1] ?? NaN);
    const before = await sent();
    const big = 'x'.repeat(1000);
    const n = 4000;
    for (let i = 0; i < n; i += 200) await publish(...Array.from({ length: 200 }, (_, k) => event(`slow-${i + k}`, { body: { kind: { case: 'text', value: big } } })));
    // Every event is stored; what was written to the socket is bounded by the high-water mark and
    // the socket's buffers, far below the 4 MB published (without flow control all would be).
    const written = (await sent()) - before;
    assert.ok(written < n, `${written} of ${n} notifications written to a client that does not read (high water ${HIGH_WATER} B)`);
    d.ws.resume();
    await d.until(() => d.notifications().length === n, `${n} notifications`, 30_000);
    assert.deepEqual(eventIds(d), Array.from({ length: n }, (_, i) => `slow-${i}`));
  });

  it('shutdown ends every stream UNAVAILABLE with its end of stream, then closes the port', async () => {
    const own = await startTestServer({ webPort: 0 });
    const token = own.token('ws-bye', ['device']);
    const d = await WsDevice.open(own.server.webPort!, { token });
    d.send({ message: { case: 'hello', value: { resumeToken: '' } } });
    await d.next('welcome');
    await own.stop();
    const end = await d.ended();
    assert.equal(end.error?.code, 'unavailable');
    assert.match(end.error?.message ?? '', /shutting down/);
    await assert.rejects(WsDevice.open(own.server.webPort!, { token }));
  });
});
