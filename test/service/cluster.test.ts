/**
 * The Redis deployment as separate processes: a real redis-server, one matcher process and two
 * gateway processes (`node dist/services/process/main.js` with AMBIT_ROLE), real gRPC clients. Gateways and
 * the matcher are killed with SIGKILL mid-stream; Redis is kept. Checks exact recipients across
 * gateways, and that after restarts and reconnects every published notification arrives, in
 * order, with nothing acknowledged delivered again.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { SCOPES, TokenAuthority } from '../../services/edge/auth.js';
import { type Notification, Op } from '../../api/gen/ambit/v1/types_pb.js';
import { Clients, DeviceStream, Status, unary } from '../support/grpc.js';
import { type AmbitProcess, startAmbit } from '../support/processes.js';
import { type RedisServer, redisServerMissing, startRedisServer } from '../support/redis-server.js';

const SECRET = 'cluster-test-secret-0123456789abcdef0123';
const authority = new TokenAuthority(SECRET);
const deviceToken = (d: string) => authority.issue({ subject: d, scopes: [SCOPES.device] });
const publisherToken = authority.issue({ subject: 'pub', scopes: [SCOPES.publish] });

const MILAN = { lat: 45.4642, lon: 9.19 };
const num = (v: number) => ({ kind: { case: 'number', value: v } });

/** An accident near Milan's centre with severity `sev`, tagged with its sequence number. */
const accident = (seq: number, sev = 3, at = MILAN) => ({ id: `ev-${seq}`, position: at, attributes: { sev: num(sev), seq: num(seq) } });

describe('cluster: two gateways and a matcher on one Redis', { skip: redisServerMissing() ?? false, timeout: 120_000 }, () => {
  let redis: RedisServer;
  let matcher: AmbitProcess;
  let gwA: AmbitProcess;
  let gwB: AmbitProcess;
  const env = (role: string): Record<string, string> => ({
    AMBIT_ROLE: role,
    REDIS_URL: redis.url,
    AMBIT_TOKEN_SECRET: SECRET,
    AMBIT_ENGINE: 'fast',
    AMBIT_LOG_LEVEL: 'info',
  });
  const startMatcher = () => startAmbit({ ...env('matcher'), AMBIT_METRICS_PORT: '0' }, [], 30_000);
  const startGateway = () => startAmbit(env('gateway'));
  const clientsOf = (p: AmbitProcess) => new Clients(`127.0.0.1:${p.port}`, grpc.credentials.createInsecure());
  const publish = (c: Clients, ev: unknown, deadlineMs = 10_000) =>
    unary<{ eventId: string; reached: bigint }>(c.publisher, 'publish', { event: ev }, meta(publisherToken), { deadline: Date.now() + deadlineMs });
  const open: Clients[] = [];
  const clients = (p: AmbitProcess) => {
    const c = clientsOf(p);
    open.push(c);
    return c;
  };

  before(async () => {
    redis = await startRedisServer();
    matcher = await startMatcher();
    [gwA, gwB] = await Promise.all([startGateway(), startGateway()]);
  });

  after(async () => {
    for (const c of open) c.close();
    await Promise.all([matcher, gwA, gwB].map((p) => p?.stop().catch(() => null)));
    await redis?.stop();
  });

  it('delivers across gateways: device on A, publisher on B, exact recipients', async () => {
    const a = clients(gwA);
    const b = clients(gwB);
    const near = await DeviceStream.open(a, deviceToken('near'));
    const far = await DeviceStream.open(a, deviceToken('far'));
    const sub = (id: string, radiusM: number, minSev: number) => ({
      id,
      filters: [{ constraints: [{ name: 'sev', op: Op.GT, value: num(minSev) }], area: { radiusM } }],
    });
    near.stream.move(MILAN.lat + 0.001, MILAN.lon); // ~111 m north
    far.stream.move(MILAN.lat + 0.05, MILAN.lon); // ~5.5 km north
    assert.equal((await near.stream.subscribe(sub('close', 500, 2))).code, 0);
    assert.equal((await near.stream.subscribe(sub('strict', 500, 4))).code, 0);
    assert.equal((await far.stream.subscribe(sub('close', 500, 2))).code, 0);
    await near.stream.sync();
    await far.stream.sync();
    const r = await publish(b, accident(1, 3));
    assert.equal(r.reached, 1n, 'only near/close matches');
    const [n] = await near.stream.notifications(1, 5000);
    assert.deepEqual(n.subscriptionIds, ['close']);
    assert.equal(n.event?.id, 'ev-1');
    // Nothing for far: an event at far's position (5.4 km from near) is the next thing it gets.
    await far.stream.expectNextNotification('ev-far', async () => {
      const rf = await publish(b, { ...accident(0, 3, { lat: MILAN.lat + 0.05, lon: MILAN.lon }), id: 'ev-far' });
      assert.equal(rf.reached, 1n, 'only far/close matches the marker');
    });
    const r2 = await publish(b, accident(2, 5));
    assert.equal(r2.reached, 2n, 'near has two matching subscriptions');
    const [n2] = await near.stream.notifications(1, 5000);
    assert.deepEqual([...n2.subscriptionIds].sort(), ['close', 'strict']);
    near.stream.ack(n2.deliveryId);
    await near.stream.sync();
    // The matcher process's own /metrics: its engine and what it holds.
    assert.ok(matcher.metricsPort !== null, 'the matcher serves metrics');
    const m = await (await fetch(`http://127.0.0.1:${matcher.metricsPort}/metrics`)).text();
    assert.match(m, /^ambit_engine_info\{engine="fast",mode="redis",path="",role="matcher"\} 1$/m);
    assert.match(m, /^ambit_subscriptions\{role="matcher"\} 3$/m);
    assert.match(m, /^ambit_devices\{role="matcher"\} 2$/m);
    near.stream.cancel();
    far.stream.cancel();
  });

  it('gateway SIGKILL mid-stream: the device resumes on the other gateway, nothing lost, nothing acked repeated', async () => {
    const pubC = clients(gwB);
    let a = clients(gwA);
    const dev = await DeviceStream.open(a, deviceToken('mover'));
    dev.stream.move(MILAN.lat, MILAN.lon);
    assert.equal((await dev.stream.subscribe({ id: 'all', filters: [{ constraints: [{ name: 'sev', op: Op.GE, value: num(0) }], area: { radiusM: 2000 } }] })).code, 0);
    await dev.stream.sync();
    const total = 60;
    const got: Notification[] = [];
    let acked = '';
    // Publish from B while the device reads on A; ack every notification it has taken.
    const publishing = (async () => {
      for (let i = 0; i < total; i++) await publish(pubC, accident(100 + i, 1));
    })();
    while (got.length < 20) {
      const [n] = await dev.stream.notifications(1, 5000);
      got.push(n);
      dev.stream.ack(n.deliveryId);
      acked = n.deliveryId;
    }
    await dev.stream.sync(); // the acks before it are recorded
    await gwA.kill9();
    await publishing;
    // Reconnect to B with the last acked id as the resume token.
    const b = clients(gwB);
    const again = await DeviceStream.open(b, deviceToken('mover'), acked);
    assert.equal(again.welcome.resumeToken, acked);
    assert.equal(again.welcome.missed, 0n);
    const rest = await again.stream.notifications(total - got.length, 10_000);
    const seqs = [...got, ...rest].map((n) => (n.event!.attributes.seq.kind.value as number) - 100);
    assert.deepEqual(seqs, [...Array(total).keys()], 'every event once, in order');
    const ids = [...got, ...rest].map((n) => n.deliveryId);
    for (let i = 1; i < ids.length; i++) assert.ok(cmpId(ids[i - 1], ids[i]) < 0, `delivery ids increase: ${ids[i - 1]} then ${ids[i]}`);
    await again.stream.expectNextNotification(`ev-${100 + total}`, () => publish(pubC, accident(100 + total, 1)), 10_000);
    again.stream.cancel();
    gwA = await startGateway(); // back for later tests
    a = clients(gwA);
    void a;
  });

  it('matcher SIGKILL mid-stream: publishes queue in Redis and are delivered after the restart, in order, once', async () => {
    const c = clients(gwB);
    const dev = await DeviceStream.open(c, deviceToken('watcher'));
    dev.stream.move(MILAN.lat, MILAN.lon);
    assert.equal((await dev.stream.subscribe({ id: 'w', filters: [{ constraints: [{ name: 'sev', op: Op.GE, value: num(0) }], area: { radiusM: 2000 } }] })).code, 0);
    await dev.stream.sync();
    for (let i = 0; i < 10; i++) await publish(c, accident(200 + i, 1));
    const first = await dev.stream.notifications(10, 5000);
    dev.stream.ack(first[9].deliveryId);
    await dev.stream.sync();
    await matcher.kill9();
    // With the matcher down a publish is accepted (queued) but cannot be answered in time.
    const queued: number[] = [];
    for (let i = 10; i < 15; i++) {
      await assert.rejects(publish(c, accident(200 + i, 1), 300), (err: grpc.ServiceError) => err.code === Status.DEADLINE_EXCEEDED || err.code === Status.UNAVAILABLE);
      queued.push(i);
    }
    matcher = await startMatcher();
    // The restarted matcher rebuilt subscriptions and positions from Redis: new events match too.
    for (let i = 15; i < 20; i++) await publish(c, accident(200 + i, 1));
    const rest = await dev.stream.notifications(10, 15_000);
    const seqs = [...first, ...rest].map((n) => (n.event!.attributes.seq.kind.value as number) - 200);
    assert.deepEqual(seqs, [...Array(20).keys()], 'the queued events arrive before the later ones, each once');
    await dev.stream.expectNextNotification('ev-220', () => publish(c, accident(220, 1)), 10_000);
    dev.stream.cancel();
  });

  it('a restarted gateway process serves a device that reconnects with no token: it resumes after its last ack', async () => {
    const c = clients(gwA);
    const dev = await DeviceStream.open(c, deviceToken('watcher'));
    // The previous test acked the 10th; everything after it was taken but not acked.
    const all = await dev.stream.notifications(10, 5000);
    const seqs = all.map((n) => (n.event!.attributes.seq.kind.value as number) - 200);
    assert.deepEqual(seqs, [10, 11, 12, 13, 14, 15, 16, 17, 18, 19]);
    dev.stream.cancel();
  });

  it('every process wrote only JSON log lines to stdout, none at error level', () => {
    for (const p of [matcher, gwA, gwB]) {
      assert.deepEqual(p.logs.filter((l) => 'nonJson' in l), [], 'stdout is the JSON log stream');
      assert.deepEqual(p.logs.filter((l) => typeof l.level === 'number' && l.level >= 50), [], 'no error logs');
      assert.ok(p.logs.every((l) => typeof l.component === 'string' || typeof l.signal === 'string' || l.msg === 'stopped'), 'every line names its component');
    }
  });
});

function meta(token: string): grpc.Metadata {
  const md = new grpc.Metadata();
  md.set('authorization', `Bearer ${token}`);
  return md;
}

function cmpId(a: string, b: string): number {
  const [x1, x2] = a.split('-').map(Number);
  const [y1, y2] = b.split('-').map(Number);
  return x1 - y1 || x2 - y2;
}
