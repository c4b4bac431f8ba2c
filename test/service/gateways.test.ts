/**
 * One node of several gateway processes sharing one port (AMBIT_GATEWAYS=2), on a real Redis and
 * on the embedded hub (held by the node's primary process, served to the workers over IPC):
 * connections spread over the workers, a publish on one reaches devices on both, a worker killed
 * with SIGKILL is restarted and its devices resume without loss, and SIGTERM to the node stops
 * every process.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { SCOPES, TokenAuthority } from '../../services/edge/auth.js';
import { Op } from '../../api/gen/ambit/v1/types_pb.js';
import { Clients, DeviceStream, Status, checkReplyStatus, eventually, expectStatus, meta, unary } from '../support/grpc.js';
import { type AmbitProcess, startAmbit } from '../support/processes.js';
import { WsDevice } from '../support/ws-device.js';
import { type RedisServer, redisServerMissing, startRedisServer } from '../support/redis-server.js';

const SECRET = 'gateways-test-secret-0123456789abcdef012';
const authority = new TokenAuthority(SECRET);
const deviceToken = (d: string) => authority.issue({ subject: d, scopes: [SCOPES.device] });
const publisherToken = authority.issue({ subject: 'pub', scopes: [SCOPES.publish] });
const MILAN = { lat: 45.4642, lon: 9.19 };
const num = (v: number) => ({ kind: { case: 'number', value: v } });
const accident = (id: string) => ({ id, position: MILAN, attributes: { sev: num(3) } });
const DEVICES = ['d0', 'd1', 'd2', 'd3', 'd4', 'd5'];

interface Worker {
  index: number;
  pid: number;
  metricsPort: number;
}

const isWorkerLine = (l: Record<string, unknown>, index?: number): boolean =>
  l.component === 'gateways' && typeof l.worker === 'number' && typeof l.metricsPort === 'number' && (index === undefined || l.worker === index);
const workerOf = (l: Record<string, unknown>): Worker => ({ index: l.worker as number, pid: l.pid as number, metricsPort: l.metricsPort as number });

async function connected(w: Worker): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${w.metricsPort}/metrics`)).text();
  const m = /^ambit_connected_devices\{role="gateway"\} (\d+)$/m.exec(text);
  assert.ok(m !== null, `worker ${w.index} reports ambit_connected_devices`);
  return Number(m[1]);
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

for (const mode of ['redis', 'embedded', 'embedded with 2 fan-out shards', 'embedded with 3 hub partitions'] as const) describe(`gateways (${mode}): one node, two gateway processes on one port`, { skip: (mode === 'redis' && redisServerMissing()) || false, timeout: 120_000 }, () => {
  let redis: RedisServer | null = null;
  let node: AmbitProcess;
  let wsPort = 0;
  const open: Clients[] = [];
  /** A channel of its own (its own TCP connection), so the cluster can hand it to either worker. */
  const channel = () => {
    const c = new Clients(`127.0.0.1:${node.port}`, grpc.credentials.createInsecure(), { 'grpc.use_local_subchannel_pool': 1 });
    open.push(c);
    return c;
  };
  const publish = (c: Clients, ev: unknown) => unary<{ reached: bigint }>(c.publisher, 'publish', { event: ev }, meta(publisherToken), { deadline: Date.now() + 10_000 });
  const sub = { id: 'acc', filters: [{ constraints: [{ name: 'sev', op: Op.GT, value: num(2) }], area: { radiusM: 1000 } }] };

  before(async () => {
    if (mode === 'redis') redis = await startRedisServer();
    const shards: Record<string, string> = mode === 'embedded with 2 fan-out shards' ? { AMBIT_FANOUT_SHARDS: '2' } : mode === 'embedded with 3 hub partitions' ? { AMBIT_PARTITIONS: '3' } : {};
    node = await startAmbit({ ...(redis === null ? {} : { REDIS_URL: redis.url }), ...shards, AMBIT_GATEWAYS: '2', AMBIT_TOKEN_SECRET: SECRET, AMBIT_ENGINE: 'fast', AMBIT_METRICS_PORT: '0', AMBIT_WEB_PORT: '0' }, [], 30_000);
    const up = await node.waitForLog((l) => l.component === 'gateways' && l.gateways === 2, 30_000);
    wsPort = up.webPort as number;
    assert.ok(wsPort > 0, 'the workers share a WebSocket port');
    // The device logs live in the shards: the node said it started them.
    if ('AMBIT_FANOUT_SHARDS' in shards) await node.waitForLog((l) => l.component === 'gateways' && l.shards === 2, 1);
    // The hub is split over three threads, each with its own engine.
    if ('AMBIT_PARTITIONS' in shards) for (const k of [0, 1, 2]) await node.waitForLog((l) => l.component === 'partition' && l.partition === k && l.engine === 'fast', 1);
  });

  after(async () => {
    for (const c of open) c.close();
    await node?.stop().catch(() => null);
    await redis?.stop();
  });

  it('DrainGateway is refused with FAILED_PRECONDITION: one process of the node cannot be drained alone', async () => {
    const opsToken = authority.issue({ subject: 'ops', scopes: [SCOPES.ops] });
    await expectStatus(unary(channel().ops, 'drainGateway', {}, meta(opsToken)), Status.FAILED_PRECONDITION);
  });

  it('[E20] a pattern\'s match reaches its device whichever workers took the events, with their event times', async () => {
    const { stream } = await DeviceStream.open(channel(), deviceToken('pattern-device'));
    stream.move(MILAN.lat, MILAN.lon);
    const kind = (k: string) => ({ constraints: [{ name: 'kind', op: Op.EQ, value: { kind: { case: 'text', value: k } } }] });
    const pattern = { steps: [{ name: 'smoke', filter: { ...kind('smoke'), area: { radiusM: 500 } } }, { name: 'heat', filter: kind('heat'), withinMs: 60_000 }] };
    checkReplyStatus(await stream.subscribe({ id: 'fire', pattern }), Status.OK);
    await stream.sync();
    const at = (s: number) => ({ seconds: BigInt(s), nanos: 250_000_000 });
    // Each over a connection of its own: the node hands them to either worker.
    await publish(channel(), { id: 'heat-1', position: MILAN, attributes: { kind: { kind: { case: 'text', value: 'heat' } } }, time: at(1_700_000_000) });
    await publish(channel(), { id: 'smoke-1', position: MILAN, attributes: { kind: { kind: { case: 'text', value: 'smoke' } } }, time: at(1_700_000_030) });
    const [n] = await stream.notifications(1, 10_000);
    assert.deepEqual(n.subscriptionIds, ['fire']);
    assert.deepEqual(n.match?.steps.map((x) => [x.step, x.event?.id, Number(x.time?.seconds), x.time?.nanos]), [['smoke', 'smoke-1', 1_700_000_030, 250_000_000], ['heat', 'heat-1', 1_700_000_000, 250_000_000]]);
    stream.cancel();
    // The next test counts the workers' streams: this one is gone from both first.
    const workers = [0, 1].map((i) => workerOf(node.logs.find((l) => isWorkerLine(l, i))!));
    await eventually(async () => (await Promise.all(workers.map(connected))).every((c) => c === 0), 'the pattern device\'s stream closed on its worker', 10_000);
  });

  it('devices over WebSocket, on whichever worker takes their socket, get what a publish through either worker reaches', async () => {
    const devices = await Promise.all(['ws-a', 'ws-b', 'ws-c', 'ws-d'].map(async (id) => {
      const d = await WsDevice.open(wsPort, { token: deviceToken(id) });
      d.send({ message: { case: 'hello', value: { resumeToken: '' } } });
      await d.next('welcome');
      d.send({ message: { case: 'location', value: MILAN } });
      d.send({ message: { case: 'subscribe', value: { requestId: 'r', subscription: sub as never } } });
      const r = await d.next('reply');
      assert.ok(r.message.case === 'reply' && r.message.value.status?.code === 0, JSON.stringify(r.message.value));
      return d;
    }));
    const workers = [0, 1].map((i) => workerOf(node.logs.find((l) => isWorkerLine(l, i))!));
    const counts = await Promise.all(workers.map(connected));
    assert.ok(counts[0] > 0 && counts[1] > 0 && counts[0] + counts[1] === devices.length, `WebSocket devices per worker: ${counts.join(', ')}`);
    for (const id of ['ws-ev-1', 'ws-ev-2']) assert.equal((await publish(channel(), accident(id))).reached, BigInt(devices.length));
    for (const d of devices) {
      await d.until(() => d.notifications().length === 2, 'both notifications', 10_000);
      assert.deepEqual(d.notifications().map((m) => (m.message.case === 'notification' ? m.message.value.event?.id : '')), ['ws-ev-1', 'ws-ev-2']);
      // Subscriptions outlive streams: gone before the next test counts who an event reaches.
      const from = d.messages.length;
      d.send({ message: { case: 'unsubscribe', value: { requestId: 'u', subscriptionId: sub.id } } });
      await d.next('reply', from);
      d.halfClose();
      assert.deepEqual(await d.ended(), {});
    }
    await eventually(async () => (await Promise.all(workers.map(connected))).every((c) => c === 0), 'the WebSocket devices gone from both workers', 10_000);
  });

  it('spreads devices over both workers, delivers across them, restarts a killed one, and stops whole', async () => {
    const workers = [0, 1].map((i) => workerOf(node.logs.find((l) => isWorkerLine(l, i))!));
    assert.notEqual(workers[0].pid, workers[1].pid);

    const devices = await Promise.all(DEVICES.map(async (d) => {
      const { stream } = await DeviceStream.open(channel(), deviceToken(d));
      stream.move(MILAN.lat, MILAN.lon);
      assert.equal((await stream.subscribe(sub)).code, 0);
      await stream.sync();
      return stream;
    }));
    const counts = await Promise.all(workers.map(connected));
    assert.equal(counts[0] + counts[1], DEVICES.length, `connected devices per worker: ${counts.join(', ')}`);
    assert.ok(counts[0] > 0 && counts[1] > 0, `both workers hold streams: ${counts.join(', ')}`);

    // Four events, each over a connection of its own: the cluster hands them to both workers, and
    // each device gets each one (events numbered by two processes never pass for one another).
    const ids = ['ev-1a', 'ev-1b', 'ev-1c', 'ev-1d'];
    for (const id of ids) assert.equal((await publish(channel(), accident(id))).reached, BigInt(DEVICES.length));
    const got = await Promise.all(devices.map((s) => s.notifications(ids.length, 10_000)));
    for (const ns of got) assert.deepEqual(ns.map((n) => n.event?.id), ids);
    const first = got.map((ns) => ns[ids.length - 1]);
    devices.forEach((s, i) => s.ack(first[i].deliveryId));
    await Promise.all(devices.map((s) => s.sync()));

    // SIGKILL worker 0: the primary logs the exit and starts a new worker 0.
    const relisten = node.waitForLog((l) => isWorkerLine(l, 0) && l.pid !== workers[0].pid, 30_000);
    process.kill(workers[0].pid, 'SIGKILL');
    await node.waitForLog((l) => l.component === 'gateways' && l.worker === 0 && typeof l.msg === 'string' && l.msg.includes('exited'), 10_000);
    const replacement = workerOf(await relisten);
    assert.ok(alive(workers[1].pid), 'worker 1 kept running');

    // Published while some devices are cut off: every device resumes after its ack and gets it once.
    assert.equal((await publish(channel(), accident('ev-2'))).reached, BigInt(DEVICES.length));
    for (const s of devices) s.cancel();
    const resumed = await Promise.all(DEVICES.map(async (d, i) => {
      const { stream, welcome } = await DeviceStream.open(channel(), deviceToken(d), first[i].deliveryId);
      assert.equal(welcome.missed, 0n);
      const [n] = await stream.notifications(1, 10_000);
      assert.equal(n.event?.id, 'ev-2', `${d} resumes with ev-2, nothing repeated`);
      return stream;
    }));
    for (const s of resumed) s.cancel();

    assert.equal(await node.stop(), 0, 'the node exits 0 on SIGTERM');
    for (const pid of [replacement.pid, workers[1].pid]) assert.ok(!alive(pid), `worker ${pid} stopped with the node`);
  });
});
