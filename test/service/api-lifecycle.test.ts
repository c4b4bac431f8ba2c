/**
 * Device lifecycle through the API, over real gRPC: ListDevices pages and its errors, PurgeDevice
 * (the device's open stream ends, it comes back with its state lost), and the expiry of devices
 * no gateway saw for AMBIT_DEVICE_EXPIRY_DAYS, with an injected clock: a connected device is seen
 * again while its stream is open and never expires; one that left does, counted in /metrics. The
 * same over a node of two gateway processes (the hub in the parent) and a Redis deployment.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Op } from '../../api/gen/ambit/v1/types_pb.js';
import { Clients, DeviceStream, type Init, Status, type TestServer, checkStatus, expectStatus, startTestServer, unary } from '../support/grpc.js';
import { type RedisServer, redisServerMissing, startRedisServer } from '../support/redis-server.js';

const DAY = 86_400_000;

const food: Init = { id: 'food', filters: [{ constraints: [{ name: 'kind', op: Op.EQ, value: { kind: { case: 'text', value: 'food' } } }] }] };

function metric(text: string, series: string): number {
  const m = new RegExp(`^${series.replace(/[{}()[\].+*?^$|\\]/g, '\\$&')} (\\S+)$`, 'm').exec(text);
  assert.ok(m !== null, `no series ${series} in /metrics`);
  return Number(m[1]);
}

/**
 * Gives `device` the food subscription on a stream of its own, then half-closes it: the server
 * ends the stream once its session is over (when it noted the device as seen).
 */
async function subscribe(srv: TestServer, clients: Clients, device: string): Promise<void> {
  const { stream } = await DeviceStream.open(clients, srv.token(device, ['device']));
  await stream.subscribeOk(food);
  await stream.close();
}

/** Every device of a listing, page by page (`size` a page). */
async function listAll(srv: TestServer, size: number, prefix = ''): Promise<Init[]> {
  const clients = srv.clients();
  const out: Init[] = [];
  let token = '';
  do {
    const page = (await unary(clients.ops, 'listDevices', { pageSize: size, pageToken: token, idPrefix: prefix }, srv.meta('ops', ['ops']))) as Init;
    assert.ok(page.devices.length <= (size === 0 ? 100 : size));
    out.push(...page.devices);
    token = page.nextPageToken;
  } while (token !== '');
  return out.sort((a, b) => (a.deviceId < b.deviceId ? -1 : 1));
}

function lifecycleSuite(name: string, start: (now: () => number) => Promise<TestServer>, skip: string | false = false): void {
  describe(`api lifecycle: ${name}`, { timeout: 60_000, skip }, () => {
    let srv: TestServer;
    let clients: Clients;
    let t = 1_000 * DAY;
    const now = () => t;

    before(async () => {
      srv = await start(now);
      clients = srv.clients();
    });
    after(async () => {
      assert.deepEqual(srv.unexpectedErrors(), []);
      await srv.stop();
    });

    it('ListDevices pages through the devices with subscriptions; bad requests name the field; ops scope only', async () => {
      for (const d of ['l-a', 'l-b', 'l-c', 'm-a']) await subscribe(srv, clients, d);
      await unary(clients.device, 'updateLocation', { location: { lat: 45, lon: 9 } }, srv.meta('l-b', ['device']));
      const all = await listAll(srv, 2, 'l-');
      assert.deepEqual(all.map((d) => [d.deviceId, d.subscriptions]), [['l-a', 1], ['l-b', 1], ['l-c', 1]]);
      assert.deepEqual([all[1].location.lat, all[1].location.lon], [45, 9]);
      assert.equal(all[0].location, undefined);
      assert.equal((await listAll(srv, 0)).length, 4, 'page size 0 is the default');
      const ops = srv.meta('ops', ['ops']);
      await expectStatus(unary(clients.ops, 'listDevices', { pageSize: 1001 }, ops), Status.INVALID_ARGUMENT, 'page_size');
      await expectStatus(unary(clients.ops, 'listDevices', { pageToken: 'x'.repeat(2000) }, ops), Status.INVALID_ARGUMENT, 'page_token');
      await expectStatus(unary(clients.ops, 'listDevices', { pageToken: '@@not-ours' }, ops), Status.INVALID_ARGUMENT, 'page_token');
      await expectStatus(unary(clients.ops, 'listDevices', { idPrefix: 'p'.repeat(5000) }, ops), Status.INVALID_ARGUMENT, 'id_prefix');
      await expectStatus(unary(clients.ops, 'listDevices', {}, srv.meta('l-a', ['device'])), Status.PERMISSION_DENIED);
      await expectStatus(unary(clients.ops, 'purgeDevice', { deviceId: 'l-a' }, srv.meta('l-a', ['device'])), Status.PERMISSION_DENIED);
      await expectStatus(unary(clients.ops, 'purgeDevice', { deviceId: '' }, ops), Status.INVALID_ARGUMENT, 'device_id');
    });

    it('PurgeDevice removes its state and ends its stream; it comes back with its state lost and subscribes again', async () => {
      const pub = srv.meta('pub', ['publish']);
      const { stream, welcome } = await DeviceStream.open(clients, srv.token('p-1', ['device']));
      assert.equal(welcome.stateLost, false);
      await stream.subscribeOk(food);
      stream.move(45, 9);
      await stream.sync();
      const r1 = (await unary(clients.publisher, 'publish', { event: { id: 'e1', position: { lat: 45, lon: 9 }, attributes: { kind: { kind: { case: 'text', value: 'food' } } } } }, pub)) as Init;
      assert.ok(r1.reached >= 1n);
      const [n1] = await stream.notifications(1);
      const purged = (await unary(clients.ops, 'purgeDevice', { deviceId: 'p-1' }, srv.meta('ops', ['ops']))) as Init;
      assert.deepEqual([purged.subscriptionsRemoved, purged.hadLocation], [1n, true]);
      const end = await stream.end(10_000);
      checkStatus(end, Status.UNAVAILABLE);
      assert.match(end.details, /purged/);
      const info = (await unary(clients.ops, 'getDeviceSubscriptions', { deviceId: 'p-1' }, srv.meta('ops', ['ops']))) as Init;
      assert.deepEqual([info.subscriptions.length, info.location], [0, undefined]);
      assert.ok(!(await listAll(srv, 100)).some((d) => d.deviceId === 'p-1'));
      // Back with its last delivery id: the server says its state is gone.
      const again = await DeviceStream.open(clients, srv.token('p-1', ['device']), n1.deliveryId);
      assert.equal(again.welcome.stateLost, true);
      assert.notEqual(again.welcome.stateId, welcome.stateId, 'its state has another id');
      again.stream.cancel();
      const m = await srv.metrics();
      assert.equal(metric(m, `ambit_devices_purged_total{role="${srv.server.config.role}"}`), 1);
    });

    it('expires devices no gateway saw for the expiry; a connected device is seen again and stays', async () => {
      const { stream } = await DeviceStream.open(clients, srv.token('x-connected', ['device']));
      await stream.subscribeOk(food);
      await subscribe(srv, clients, 'x-gone');
      assert.equal(((await unary(clients.ops, 'getDeviceSubscriptions', { deviceId: 'x-gone' }, srv.meta('ops', ['ops']))) as Init).connected, false, 'its stream ended on the server');
      await srv.server.seen!.flush();
      const seen = await listAll(srv, 100, 'x-');
      assert.deepEqual(seen.map((d) => [d.deviceId, Number(d.lastSeenMs)]), [['x-connected', t], ['x-gone', t]]);
      const expiry = srv.server.config.deviceExpiryMs;
      // Time passes: the connected device's gateway writes it again; the other is not heard from.
      t += expiry / 2;
      await srv.server.seen!.flush();
      t += expiry / 2 + 1;
      await srv.server.seen!.flush();
      const gone = await sweep(srv);
      assert.ok(gone.includes('x-gone'), `x-gone expired: ${gone.join(', ')}`);
      assert.ok(!gone.includes('x-connected'));
      assert.deepEqual((await listAll(srv, 100, 'x-')).map((d) => d.deviceId), ['x-connected']);
      const m = await srv.metrics();
      assert.ok(metric(m, `ambit_devices_expired_total{role="${srv.server.config.role}"}`) >= 1);
      stream.cancel();
    });
  });
}

/** The process's sweep, or (a node of gateway processes) the parent's, reached through the test's hook. */
async function sweep(srv: TestServer): Promise<string[]> {
  assert.ok(srv.server.expiry !== null, 'this process sweeps');
  return srv.server.expiry.sweep();
}

lifecycleSuite('embedded', (now) => startTestServer({ deviceExpiryMs: 30 * DAY }, { now }));

let redis: RedisServer | null = null;
lifecycleSuite(
  'redis (gateway and matcher in one process)',
  async (now) => {
    redis = await startRedisServer();
    const srv = await startTestServer({ redisUrl: redis.url, deviceExpiryMs: 30 * DAY }, { now });
    const stop = srv.stop.bind(srv);
    srv.stop = async () => {
      await stop();
      await redis?.stop();
    };
    return srv;
  },
  redisServerMissing() ?? false,
);
