/**
 * What operators and tooling see: grpc.health.v1 (SERVING per service, NOT_SERVING then
 * UNAVAILABLE on shutdown, device streams drained with UNAVAILABLE), server reflection (grpcurl
 * can list and describe the services), Prometheus /metrics after known traffic, GetStats and
 * GetDeviceSubscriptions, and the whole API over TLS with a certificate made at test time.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fromBinary } from '@bufbuild/protobuf';
import { FileDescriptorProtoSchema } from '@bufbuild/protobuf/wkt';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { Op } from '../../api/gen/ambit/v1/types_pb.js';
import { Clients, DeviceStream, type Init, Status, type TestServer, checkStatus, clientStream, eventually, expectStatus, healthCheck, healthClient, meta, startTestServer, unary, within } from '../support/grpc.js';

const AMBIT_SERVICES = ['ambit.v1.DeviceService', 'ambit.v1.PublisherService', 'ambit.v1.OpsService'];


const check = healthCheck;

/** The reflection service's client, from the proto shipped inside @grpc/reflection. */
function reflectionClient(target: string): grpc.Client {
  const require = createRequire(import.meta.url);
  const root = join(dirname(require.resolve('@grpc/reflection/package.json')), 'build/proto');
  const def = protoLoader.loadSync('grpc/reflection/v1/reflection.proto', { includeDirs: [root], keepCase: false, longs: String, enums: String, defaults: true, oneofs: true });
  const pkg = grpc.loadPackageDefinition(def) as Init;
  return new pkg.grpc.reflection.v1.ServerReflection(target, grpc.credentials.createInsecure());
}

function reflect(client: grpc.Client, requests: Init[]): Promise<Init[]> {
  return new Promise((resolve, reject) => {
    const call = (client as Init).serverReflectionInfo() as grpc.ClientDuplexStream<Init, Init>;
    const out: Init[] = [];
    call.on('data', (m: Init) => {
      out.push(m);
      if (out.length === requests.length) call.end();
    });
    call.on('error', reject);
    call.on('end', () => resolve(out));
    for (const r of requests) call.write(r);
  });
}

function metric(text: string, series: string): number {
  const escaped = series.replace(/[{}()[\].+*?^$|\\]/g, '\\$&');
  const m = new RegExp(`^${escaped} (\\S+)$`, 'm').exec(text);
  assert.ok(m !== null, `no series ${series} in /metrics`);
  return Number(m[1]);
}

describe('api ops: health, reflection, metrics and stats', () => {
  let srv: TestServer;
  let clients: Clients;
  let opsMd: grpc.Metadata;

  before(async () => {
    srv = await startTestServer();
    clients = srv.clients();
    opsMd = srv.meta('ops', ['ops']);
  });

  after(async () => {
    assert.deepEqual(srv.unexpectedErrors(), []);
    await srv.stop();
  });

  it('grpc.health.v1 Check: SERVING for the server and each service; NOT_FOUND for an unknown one', async () => {
    const h = healthClient(srv.target);
    try {
      assert.equal(await check(h, ''), 'SERVING');
      for (const s of AMBIT_SERVICES) assert.equal(await check(h, s), 'SERVING', s);
      await expectStatus(check(h, 'ambit.v1.NoSuchService'), Status.NOT_FOUND);
    } finally {
      h.close();
    }
  });

  it('server reflection lists the services and serves their descriptors with their imports', async () => {
    const r = reflectionClient(srv.target);
    try {
      const [list, byService, byFile] = await reflect(r, [
        { listServices: '*' },
        { fileContainingSymbol: 'ambit.v1.DeviceService' },
        { fileByFilename: 'ambit/v1/types.proto' },
      ]);
      const names = list.listServicesResponse.service.map((s: Init) => s.name);
      for (const s of AMBIT_SERVICES) assert.ok(names.includes(s), `${s} listed (got ${names.join(', ')})`);
      const files = byService.fileDescriptorResponse.fileDescriptorProto.map((b: Buffer) => fromBinary(FileDescriptorProtoSchema, b));
      const device = files.find((f: Init) => f.name === 'ambit/v1/device.proto');
      assert.ok(device, `device.proto served (got ${files.map((f: Init) => f.name).join(', ')})`);
      assert.deepEqual(
        device.service[0].method.map((m: Init) => m.name),
        ['Connect', 'UpdateLocation', 'UpdateLocations', 'ListSubscriptions'],
      );
      const types = byFile.fileDescriptorResponse.fileDescriptorProto.map((b: Buffer) => fromBinary(FileDescriptorProtoSchema, b));
      const t = types.find((f: Init) => f.name === 'ambit/v1/types.proto');
      assert.ok(t.messageType.some((m: Init) => m.name === 'Subscription'));
      assert.ok(t.dependency.includes('google/protobuf/timestamp.proto'));
      const [method] = await reflect(r, [{ fileContainingSymbol: 'ambit.v1.PublisherService.Publish' }]);
      assert.ok(method.fileDescriptorResponse.fileDescriptorProto.length >= 1);
      const [missing] = await reflect(r, [{ fileContainingSymbol: 'ambit.v1.Nothing' }]);
      assert.equal(missing.errorResponse.errorCode, Status.NOT_FOUND);
    } finally {
      r.close();
    }
  });

  it('/metrics, GetStats and GetDeviceSubscriptions report the traffic that was sent', async () => {
    const before = await srv.metrics();
    const sent0 = metric(before, 'ambit_notifications_sent_total{role="all"}');
    const rejected0 = metric(before, 'ambit_requests_rejected_total{role="all"}');
    const pubMd = srv.meta('pub', ['publish']);
    const { stream } = await DeviceStream.open(clients, srv.token('dev-m', ['device']));
    await stream.subscribeOk({
      id: 'near',
      filters: [
        { constraints: [{ name: 'kind', op: Op.EQ, value: { kind: { case: 'text', value: 'cafe' } } }], area: { radiusM: 1000 } },
        { area: { radiusM: 50, center: { lat: 10, lon: 10 } } },
      ],
    });
    await stream.subscribeOk({ id: 'any', filters: [{ constraints: [{ name: 'kind', op: Op.EXISTS }] }] });
    stream.move(48.85, 2.35);
    stream.move(48.86, 2.35);
    await stream.sync();
    await unary(clients.device, 'updateLocation', { location: { lat: 1, lon: 1 } }, srv.meta('dev-u', ['device']));
    await clientStream(clients.device, 'updateLocations', [{ updates: [{ location: { lat: 2, lon: 2 } }, { location: { lat: 2, lon: 3 } }] }], srv.meta('dev-u', ['device']));
    const e = (id: string, lat: number, kind?: string): Init => ({ id, position: { lat, lon: 2.35 }, attributes: kind === undefined ? {} : { kind: { kind: { case: 'text', value: kind } } } });
    const r1 = await unary(clients.publisher, 'publish', { event: e('p1', 48.8601, 'cafe') }, pubMd);
    assert.equal(r1.reached, 2n);
    const r2 = await clientStream(clients.publisher, 'bulkPublish', [{ events: [e('p2', 48.8601, 'bar'), e('p3', 0)] }, { events: [e('p4', 48.8601, 'cafe')] }], pubMd);
    assert.deepEqual([r2.accepted, r2.reached], [3n, 3n]);
    await expectStatus(unary(clients.publisher, 'publish', { event: e('bad', 91) }, pubMd), Status.INVALID_ARGUMENT);
    const ns = await stream.notifications(3);
    assert.deepEqual(ns.map((n) => [n.event!.id, n.subscriptionIds.join('+')]), [['p1', 'any+near'], ['p2', 'any'], ['p4', 'any+near']]);

    const stats = await unary(clients.ops, 'getStats', {}, opsMd);
    assert.equal(stats.engine, 'fast');
    assert.equal(stats.engineDetail, 'fast engine (configured)');
    assert.equal(stats.mode, 'embedded');
    assert.deepEqual(
      [stats.subscriptions, stats.filters, stats.devices, stats.connectedDevices, stats.eventsPublished, stats.notifications, stats.locationUpdates, stats.notificationsDropped],
      [2n, 3n, 2n, 1n, 4n, 3n, 5n, 0n],
    );
    assert.ok(stats.engineMemoryBytes > 0n);
    assert.ok(stats.uptimeSeconds >= 0n && stats.uptimeSeconds < 600n);
    assert.deepEqual([stats.shardMapVersion, stats.shardMapMoving], [0n, false], 'not sharded by space');

    const info = await unary(clients.ops, 'getDeviceSubscriptions', { deviceId: 'dev-m' }, opsMd);
    assert.equal(info.connected, true);
    assert.deepEqual([info.location.lat, info.location.lon], [48.86, 2.35]);
    assert.deepEqual(info.subscriptions.map((s: Init) => s.id).sort(), ['any', 'near']);
    const near = info.subscriptions.find((s: Init) => s.id === 'near');
    assert.equal(near.filters[0].constraints[0].op, Op.EQ);
    assert.equal(near.filters[0].constraints[0].value.kind.value, 'cafe');
    assert.equal(near.filters[0].area.center, undefined, 'anchored');
    assert.deepEqual([near.filters[1].area.radiusM, near.filters[1].area.center.lat], [50, 10]);

    const m = await srv.metrics();
    const series = (name: string) => metric(m, name);
    assert.equal(series('ambit_events_published_total{role="all"}'), 4);
    assert.equal(series('ambit_matches_total{role="all"}'), 5);
    assert.equal(series('ambit_notifications_sent_total{role="all"}') - sent0, 3);
    assert.equal(series('ambit_location_updates_total{path="stream",role="all"}'), 2);
    assert.equal(series('ambit_location_updates_total{path="endpoint",role="all"}'), 3);
    assert.equal(series('ambit_location_updates_applied{role="all"}'), 5);
    assert.equal(series('ambit_requests_rejected_total{role="all"}') - rejected0, 2, 'the bad publish and the sync barrier');
    assert.equal(series('ambit_connected_devices{role="all"}'), 1);
    assert.equal(series('ambit_send_queue{role="all"}'), 0);
    assert.equal(series('ambit_subscriptions{role="all"}'), 2);
    assert.equal(series('ambit_filters{role="all"}'), 3);
    assert.equal(series('ambit_devices{role="all"}'), 2);
    assert.equal(series('ambit_notifications_dropped{role="all"}'), 0);
    assert.ok(series('ambit_engine_memory_bytes{role="all"}') > 0);
    assert.equal(series('ambit_gpu_memory_bytes{role="all"}'), 0);
    assert.equal(series('ambit_engine_info{engine="fast",mode="embedded",path="",role="all"}'), 1);
    // One observation per hub publish: the Publish and the two BulkPublish messages.
    assert.equal(series('ambit_publish_seconds_count{role="all"}'), 3);
    assert.ok(series('ambit_publish_seconds_sum{role="all"}') > 0);
    // Moving cells is for a deployment sharded by space, and for the ops scope.
    const err = await expectStatus(unary(clients.ops, 'moveCells', { moves: [{ row: 1, col: 2, shard: 0 }] }, opsMd), Status.FAILED_PRECONDITION, 'moves');
    assert.match(err.details, /not sharded by space \(AMBIT_GEO_SHARDS\)/);
    await expectStatus(unary(clients.ops, 'moveCells', { moves: [] }, pubMd), Status.PERMISSION_DENIED);
    assert.match((await expectStatus(unary(clients.ops, 'planCells', { maxMoves: 5 }, opsMd), Status.FAILED_PRECONDITION, 'max_moves')).details, /not sharded by space/);
    await expectStatus(unary(clients.ops, 'planCells', {}, pubMd), Status.PERMISSION_DENIED);
    // The process and Node.js defaults, under ambit_process_ and ambit_nodejs_ (docs/service.md).
    assert.match(m, /^ambit_process_resident_memory_bytes\{role="all"\} [1-9]\d*$/m);
    assert.match(m, /^ambit_nodejs_eventloop_lag_seconds\{role="all"\} /m);
    // Counters never go back between scrapes.
    const again = await srv.metrics();
    assert.equal(metric(again, 'ambit_events_published_total{role="all"}'), 4);
    stream.cancel();
    await eventually(async () => metric(await srv.metrics(), 'ambit_connected_devices{role="all"}') === 0, 'the gauge to follow the disconnect');

    const base = `http://127.0.0.1:${srv.server.metricsPort}`;
    assert.equal(await (await fetch(`${base}/healthz`)).text(), 'ok\n');
    assert.equal((await fetch(`${base}/nope`)).status, 404);
  });
});

describe('api ops: shutdown', () => {
  it('stop: health watchers see NOT_SERVING, device streams end UNAVAILABLE, then the port is closed', async () => {
    // A grace period far longer than the test waits: stop() returning at all shows the drained
    // streams did not hold it (no timing assertion).
    const srv = await startTestServer({ shutdownGraceS: 60 });
    // Not srv.clients(): those are closed by stop(), and these must outlive it.
    const clients = new Clients(srv.target, grpc.credentials.createInsecure());
    const h = healthClient(srv.target);
    try {
      const { stream } = await DeviceStream.open(clients, srv.token('dev-x', ['device']));
      const statuses: string[] = [];
      const watch = (h as Init).watch({ service: 'ambit.v1.DeviceService' }) as grpc.ClientReadableStream<Init>;
      watch.on('data', (m: Init) => statuses.push(m.status));
      watch.on('error', () => {});
      // Each status the watch delivers, as a signal (no polling).
      const nextStatus = () => new Promise<void>((resolve) => watch.once('data', () => resolve()));
      await nextStatus();
      assert.deepEqual(statuses, ['SERVING']);
      const second = nextStatus();
      const stopping = srv.stop();
      await second;
      assert.deepEqual(statuses, ['SERVING', 'NOT_SERVING']);
      // A health watch is a call like any other: graceful shutdown waits for it (up to the grace).
      watch.cancel();
      const end = await stream.end();
      checkStatus(end, Status.UNAVAILABLE);
      assert.match(end.details, /shutting down/);
      await within(stopping, 20_000, 'drained streams do not hold shutdown to the 60 s grace period');
      await expectStatus(check(h, ''), Status.UNAVAILABLE);
      await expectStatus(unary(clients.ops, 'getStats', {}, srv.meta('ops', ['ops']), { deadline: Date.now() + 1000 }), Status.UNAVAILABLE);
      assert.deepEqual(srv.unexpectedErrors(), []);
    } finally {
      h.close();
      clients.close();
      await srv.stop();
    }
  });
});

describe('api ops: TLS', () => {
  let dir = '';
  let cert: Buffer;
  let key: Buffer;
  let otherCert: Buffer;
  let opensslMissing = '';

  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'ambit-tls-'));
    const make = (name: string) => {
      execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-days', '1', '-subj', '/CN=localhost', '-addext', 'subjectAltName=DNS:localhost', '-keyout', join(dir, `${name}.key`), '-out', join(dir, `${name}.crt`)], { stdio: 'pipe' });
      return { cert: readFileSync(join(dir, `${name}.crt`)), key: readFileSync(join(dir, `${name}.key`)) };
    };
    try {
      ({ cert, key } = make('server'));
      otherCert = make('other').cert;
    } catch (err) {
      opensslMissing = `openssl could not make a certificate: ${err instanceof Error ? err.message.split('\n')[0] : String(err)}`;
    }
  });

  after(() => rmSync(dir, { recursive: true, force: true }));

  it('the API over TLS with a self-signed certificate; plaintext and an untrusted certificate are refused', async (t) => {
    if (opensslMissing !== '') return t.skip(opensslMissing);
    const srv = await startTestServer({ tls: { cert, key } });
    const tls = (ca: Buffer) => srv.clients(grpc.credentials.createSsl(ca), { 'grpc.ssl_target_name_override': 'localhost', 'grpc.default_authority': 'localhost' });
    try {
      const clients = tls(cert);
      const { stream, welcome } = await DeviceStream.open(clients, srv.token('dev-tls', ['device']));
      assert.equal(welcome.deviceId, 'dev-tls');
      await stream.subscribeOk({ id: 'all', filters: [{}] });
      const r = await unary(clients.publisher, 'publish', { event: { id: 'secret', position: { lat: 0, lon: 0 }, attributes: {} } }, srv.meta('pub', ['publish']));
      assert.equal(r.reached, 1n);
      assert.equal((await stream.notifications(1))[0].event!.id, 'secret');
      stream.cancel();
      const plain = srv.clients();
      await expectStatus(unary(plain.ops, 'getStats', {}, srv.meta('ops', ['ops']), { deadline: Date.now() + 2000 }), Status.UNAVAILABLE);
      const untrusted = tls(otherCert);
      await expectStatus(unary(untrusted.ops, 'getStats', {}, srv.meta('ops', ['ops']), { deadline: Date.now() + 2000 }), Status.UNAVAILABLE);
      assert.deepEqual(srv.unexpectedErrors(), []);
    } finally {
      await srv.stop();
    }
  });
});

describe('api ops: DrainGateway', () => {
  it('drains the gateway: unready and NOT_SERVING, device streams end UNAVAILABLE and new ones are refused, other calls still served; ops scope only', async () => {
    const srv = await startTestServer();
    const clients = new Clients(srv.target, grpc.credentials.createInsecure());
    const h = healthClient(srv.target);
    try {
      const { stream } = await DeviceStream.open(clients, srv.token('drained-dev', ['device']));
      await expectStatus(unary(clients.ops, 'drainGateway', {}, srv.meta('dev', ['device'])), Status.PERMISSION_DENIED);
      const base = `http://127.0.0.1:${srv.server.metricsPort}`;
      assert.equal((await fetch(`${base}/readyz`)).status, 200, 'ready before');
      const r = (await unary(clients.ops, 'drainGateway', {}, srv.meta('ops', ['ops']))) as Init;
      assert.equal(r.streamsEnded, 1n);
      const end = await stream.end();
      checkStatus(end, Status.UNAVAILABLE);
      assert.match(end.details, /this gateway is draining; reconnect/);
      const refused = new DeviceStream(clients.device, meta(srv.token('drained-dev', ['device'])));
      refused.send({ message: { case: 'hello', value: { resumeToken: '' } } });
      const no = await refused.end();
      checkStatus(no, Status.UNAVAILABLE);
      assert.match(no.details, /this gateway is draining/);
      const ready = await fetch(`${base}/readyz`);
      assert.equal(ready.status, 503);
      assert.equal(((await ready.json()) as { draining: boolean }).draining, true);
      await eventually(async () => (await check(h, '')) === 'NOT_SERVING', 'health to follow the drain');
      assert.equal(await check(h, 'ambit.v1.DeviceService'), 'NOT_SERVING');
      // Other calls are still answered while the process drains.
      const stats = (await unary(clients.ops, 'getStats', {}, srv.meta('ops', ['ops']))) as Init;
      assert.equal(stats.mode, 'embedded');
    } finally {
      h.close();
      clients.close();
      await srv.stop();
    }
  });
});

