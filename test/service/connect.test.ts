/**
 * The unary calls on the web port (services/edge/connect-edge.ts): Connect (binary and JSON) and
 * gRPC-Web clients of @connectrpc/connect-node over HTTP/1.1 against a live node, beside the
 * WebSocket device streams. The same answers as over gRPC: results, errors naming fields (with
 * google.rpc.BadRequest details), credentials checked once, rate limits with their wait; the
 * streaming calls are not served there.
 */
import assert from 'node:assert/strict';
import net from 'node:net';
import { after, before, describe, it } from 'node:test';
import { Code, ConnectError, type Interceptor, type Transport, createClient } from '@connectrpc/connect';
import { createConnectTransport, createGrpcWebTransport } from '@connectrpc/connect-node';
import { OpsService } from '../../api/gen/ambit/v1/ops_pb.js';
import { PublisherService } from '../../api/gen/ambit/v1/publisher_pb.js';
import { DeviceService } from '../../api/gen/ambit/v1/device_pb.js';
import { BadRequestSchema, RetryInfoSchema } from '../../api/gen/google/rpc/error_details_pb.js';
import { type TestServer, startTestServer } from '../support/grpc.js';
import { WsDevice } from '../support/ws-device.js';

const bearer = (token: string): Interceptor => (next) => async (req) => {
  req.header.set('authorization', `Bearer ${token}`);
  return next(req);
};

async function connectError(p: Promise<unknown>): Promise<ConnectError> {
  try {
    await p;
  } catch (err) {
    return ConnectError.from(err);
  }
  assert.fail('expected an error');
}

describe('the web port: Connect and gRPC-Web', () => {
  let srv: TestServer;
  let base: string;

  before(async () => {
    // A clock that stands still: a publisher's 5 events are all it gets, whatever the pace.
    const clock = Date.now();
    srv = await startTestServer({ webPort: 0, rateLimits: { locationsPerS: 0, subscriptionChangesPerMin: 0, eventsPerS: 5, burstS: 1 } }, { now: () => clock });
    base = `http://127.0.0.1:${srv.server.webPort}`;
  });

  after(async () => {
    assert.deepEqual(srv.unexpectedErrors(), []);
    await srv.stop();
  });

  const transports = (token: string): [string, Transport][] => [
    ['connect', createConnectTransport({ baseUrl: base, httpVersion: '1.1', interceptors: [bearer(token)] })],
    ['connect+json', createConnectTransport({ baseUrl: base, httpVersion: '1.1', useBinaryFormat: false, interceptors: [bearer(token)] })],
    ['grpc-web', createGrpcWebTransport({ baseUrl: base, httpVersion: '1.1', interceptors: [bearer(token)] })],
  ];

  it('publishes to a device on the WebSocket and reads the stats, over each protocol', async () => {
    const d = await WsDevice.open(srv.server.webPort!, { token: srv.token('web-dev', ['device']) });
    d.send({ message: { case: 'hello', value: { resumeToken: '' } } });
    await d.next('welcome');
    d.send({ message: { case: 'subscribe', value: { requestId: 'r', subscription: { id: 'all', filters: [{}] } } } });
    await d.next('reply');
    const ids: string[] = [];
    for (const [name, t] of transports(srv.token('web-pub', ['publish']))) {
      const pub = createClient(PublisherService, t);
      const r = await pub.publish({ event: { id: `w-${name}`, position: { lat: 45, lon: 9 }, attributes: { kind: { kind: { case: 'text', value: name } } } } });
      assert.deepEqual([r.eventId, r.reached], [`w-${name}`, 1n], name);
      ids.push(`w-${name}`);
    }
    await d.until(() => d.notifications().length === ids.length, 'the notifications');
    assert.deepEqual(d.notifications().map((m) => (m.message.case === 'notification' ? m.message.value.event?.id : '')), ids);
    for (const [name, t] of transports(srv.token('web-ops', ['ops']))) {
      const stats = await createClient(OpsService, t).getStats({});
      assert.ok(stats.eventsPublished >= 3n, name);
    }
    // A device's own unary calls too.
    const own = createClient(DeviceService, transports(srv.token('web-dev', ['device']))[0][1]);
    await own.updateLocation({ location: { lat: 45.1, lon: 9.1 } });
    assert.deepEqual((await own.listSubscriptions({})).subscriptions.map((s) => s.id), ['all']);
    d.halfClose();
    await d.ended();
  });

  it('errors as over gRPC: the field in metadata and a google.rpc.BadRequest; credentials once and with the scope', async () => {
    for (const [name, t] of transports(srv.token('web-pub', ['publish']))) {
      const e = await connectError(createClient(PublisherService, t).publish({ event: { id: 'bad', position: { lat: 91, lon: 0 }, attributes: {} } }));
      assert.equal(e.code, Code.InvalidArgument, name);
      assert.equal(e.metadata.get('ambit-field'), 'event.position.lat', name);
      assert.match(e.rawMessage, /^event\.position\.lat: /, name);
      const [bad] = e.findDetails(BadRequestSchema);
      assert.deepEqual(bad?.fieldViolations.map((v) => v.field), ['event.position.lat'], name);
    }
    const none = createConnectTransport({ baseUrl: base, httpVersion: '1.1' });
    assert.equal((await connectError(createClient(OpsService, none).getStats({}))).code, Code.Unauthenticated);
    const twice = createConnectTransport({ baseUrl: base, httpVersion: '1.1', interceptors: [(next) => async (req) => {
      req.header.append('authorization', `Bearer ${srv.token('a', ['ops'])}`);
      req.header.append('authorization', `Bearer ${srv.token('b', ['ops'])}`);
      return next(req);
    }] });
    const e2 = await connectError(createClient(OpsService, twice).getStats({}));
    assert.equal(e2.code, Code.Unauthenticated);
    assert.match(e2.rawMessage, /more than one/);
    // Two header lines (Node's request headers keep only the first): refused too.
    const raw = await new Promise<string>((resolve, reject) => {
      const sock = net.connect(srv.server.webPort!, '127.0.0.1', () => {
        const body = '{}';
        sock.end(`POST /${OpsService.typeName}/GetStats HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAuthorization: Bearer ${srv.token('a', ['ops'])}\r\nAuthorization: Bearer junk\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`);
      });
      let got = '';
      sock.on('data', (c: Buffer) => (got += c.toString('utf8')));
      sock.on('end', () => resolve(got));
      sock.on('error', reject);
    });
    assert.match(raw.split('\r\n')[0], / 401 /);
    assert.match(raw, /more than one authorization/);
    assert.equal((await connectError(createClient(OpsService, transports(srv.token('web-dev', ['device']))[0][1]).getStats({}))).code, Code.PermissionDenied);
  });

  it('CORS (AMBIT_WEB_ORIGINS): preflights answered for the listed origins only; answers readable by them', async () => {
    const other = await startTestServer({ webPort: 0, webOrigins: ['https://app.example'] });
    try {
      const url = `http://127.0.0.1:${other.server.webPort}/${OpsService.typeName}/GetStats`;
      const preflight = (origin: string) => fetch(url, { method: 'OPTIONS', headers: { origin, 'access-control-request-method': 'POST', 'access-control-request-headers': 'authorization, content-type' } });
      const yes = await preflight('https://app.example');
      assert.equal(yes.status, 204);
      assert.equal(yes.headers.get('access-control-allow-origin'), 'https://app.example');
      assert.match(yes.headers.get('access-control-allow-headers') ?? '', /authorization/);
      const no = await preflight('https://evil.example');
      assert.equal(no.status, 403);
      assert.equal(no.headers.get('access-control-allow-origin'), null);
      const call = await fetch(url, { method: 'POST', headers: { origin: 'https://app.example', 'content-type': 'application/json', authorization: `Bearer ${other.token('ops', ['ops'])}` }, body: '{}' });
      assert.equal(call.status, 200);
      assert.equal(call.headers.get('access-control-allow-origin'), 'https://app.example');
      assert.ok(Number((await call.json() as { eventsPublished?: string }).eventsPublished ?? 0) >= 0);
      // Without AMBIT_WEB_ORIGINS no CORS headers at all (same origin only).
      const plain = await fetch(`${base}/${OpsService.typeName}/GetStats`, { method: 'OPTIONS', headers: { origin: 'https://app.example', 'access-control-request-method': 'POST' } });
      assert.equal(plain.headers.get('access-control-allow-origin'), null);
    } finally {
      await other.stop();
    }
  });

  it('a rate limit answers ResourceExhausted with the wait; the streaming calls are not served on the web port', async () => {
    const pub = createClient(PublisherService, transports(srv.token('web-burst', ['publish']))[0][1]);
    let e: ConnectError | null = null;
    for (let i = 0; i < 6 && e === null; i++) {
      try {
        await pub.publish({ event: { id: `burst-${i}`, position: { lat: 0, lon: 0 }, attributes: {} } });
      } catch (err) {
        e = ConnectError.from(err);
      }
    }
    assert.ok(e !== null, 'the sixth event is refused');
    assert.equal(e.code, Code.ResourceExhausted);
    const wait = Number(e.metadata.get('ambit-retry-after-ms'));
    assert.ok(wait >= 1, `waits ${wait} ms`);
    assert.equal(e.findDetails(RetryInfoSchema).length, 1);
    const bulk = await connectError(createClient(PublisherService, transports(srv.token('web-pub', ['publish']))[0][1]).bulkPublish((async function* () {
      yield { events: [] };
    })()));
    assert.equal(bulk.code, Code.Unimplemented);
    assert.match(bulk.rawMessage, /BulkPublish is not implemented/);
  });
});
