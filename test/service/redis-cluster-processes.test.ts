/**
 * The Redis deployment as separate processes on a real Redis Cluster (3 masters with a replica
 * each, started by the test): one matcher process and two gateway processes
 * (`node dist/services/process/main.js` with AMBIT_ROLE, AMBIT_REDIS_CLUSTER=1, REDIS_URL naming
 * every node, AMBIT_REDIS_DEVICE_GROUPS=16), real gRPC clients. Checks exact recipients and reached
 * counts for devices on both gateways whose notification streams lie on several masters, through
 * moves; then the matcher is killed with SIGKILL and started again: the publishes queued meanwhile
 * are delivered, in order, once, and devices that reconnect resume after their last ack.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { Cluster } from 'ioredis';
import { SCOPES, TokenAuthority } from '../../services/edge/auth.js';
import { Keys, keySlot } from '../../services/redis/keys.js';
import { Op } from '../../api/gen/ambit/v1/types_pb.js';
import { Clients, DeviceStream, Status, meta, unary, within } from '../support/grpc.js';
import { deviceWorld, type Ev, eventOf, markerFor, markerSub, matching, moveDevices, num, openDevices, phaseEvent, phaseSub, type Point, ROUND_1_EVENTS, ROUND_2_EVENTS, seqOf } from '../support/device-world.js';
import { type AmbitProcess, startAmbit } from '../support/processes.js';
import { type RedisClusterHandle, redisClusterMissing, startRedisCluster } from '../support/redis-cluster.js';

const SECRET = 'redis-cluster-processes-secret-0123456789';
const authority = new TokenAuthority(SECRET);
const deviceToken = (d: string) => authority.issue({ subject: d, scopes: [SCOPES.device] });
const publisherToken = authority.issue({ subject: 'pub', scopes: [SCOPES.publish] });
const GROUPS = 16;

const { devices: DEVICES, round1Positions: ROUND_1_POSITIONS, round2Moves: ROUND_2_MOVES } = deviceWorld('rc', ['A', 'B', 'A', 'B', 'A', 'B', 'A', 'B']);
/** An event for the matcher-restart test: only the watchers' subscriptions match it. */
const killEvent = (i: number) => phaseEvent('kill', i);

describe('redis cluster processes: two gateways and a matcher on a Redis Cluster', { skip: redisClusterMissing() ?? false, timeout: 120_000 }, () => {
  let cluster: RedisClusterHandle;
  let redisUrl: string;
  const prefix = `rcp${process.pid}-${Date.now()}:`;
  let matcher: AmbitProcess;
  let gwA: AmbitProcess;
  let gwB: AmbitProcess;
  const processes: AmbitProcess[] = [];
  const open: Clients[] = [];

  const env = (role: string): Record<string, string> => ({
    AMBIT_ROLE: role,
    AMBIT_REDIS_CLUSTER: '1',
    REDIS_URL: redisUrl,
    AMBIT_REDIS_DEVICE_GROUPS: String(GROUPS),
    AMBIT_REDIS_PREFIX: prefix,
    AMBIT_TOKEN_SECRET: SECRET,
    AMBIT_ENGINE: 'fast',
    AMBIT_LOG_LEVEL: 'info',
  });
  const started = async (p: Promise<AmbitProcess>) => {
    const proc = await p;
    processes.push(proc);
    return proc;
  };
  const startMatcher = () => started(startAmbit({ ...env('matcher'), AMBIT_METRICS_PORT: '0' }, [], 30_000));
  const startGateway = () => started(startAmbit(env('gateway'), [], 30_000));
  const clients = (p: AmbitProcess) => {
    const c = new Clients(`127.0.0.1:${p.port}`, grpc.credentials.createInsecure());
    open.push(c);
    return c;
  };
  const publish = (c: Clients, ev: unknown, deadlineMs = 10_000) =>
    unary<{ eventId: string; reached: bigint }>(c.publisher, 'publish', { event: ev }, meta(publisherToken), { deadline: Date.now() + deadlineMs });
  /** A look at the cluster itself. */
  async function inspect<T>(f: (r: Cluster) => Promise<T>): Promise<T> {
    const r = new Cluster(cluster.nodes, { lazyConnect: true, redisOptions: { protocol: 2 } });
    await r.connect();
    try {
      return await f(r);
    } finally {
      r.disconnect();
    }
  }

  before(async () => {
    cluster = await startRedisCluster({ masters: 3, replicasPerMaster: 1 });
    redisUrl = `redis://${cluster.nodes.map((n) => `${n.host}:${n.port}`).join(',')}`;
    matcher = await startMatcher();
    [gwA, gwB] = await Promise.all([startGateway(), startGateway()]);
  });

  after(async () => {
    for (const c of open) c.close();
    await Promise.all(processes.map((p) => p.stop().catch(() => null)));
    await cluster?.stop();
  });

  it('devices on both gateways, on several masters: each gets exactly the events its subscriptions match, in order, through moves; reached counts are exact', async () => {
    const keys = new Keys(prefix, { cluster: true, groups: GROUPS });
    const masters = new Set(await Promise.all(DEVICES.map((d) => cluster.masterOf(keySlot(keys.notes(d.name))))));
    assert.ok(masters.size >= 2, `the devices' notification streams lie on ${masters.size} master(s)`);

    const ca = clients(gwA);
    const cb = clients(gwB);
    const streams = await openDevices(DEVICES, (g) => (g === 'A' ? ca : cb), deviceToken);
    const pub = ca; // every publish goes through gateway A; half the devices read on B
    const positions: Record<string, Point> = {};
    const expected = new Map<string, { id: string; subs: string[] }[]>(DEVICES.map((d) => [d.name, []]));
    const reachedOf = new Map<number, number>();
    const round = async (moves: Record<string, Point>, events: Ev[]) => {
      await moveDevices(streams, positions, moves);
      for (const ev of events) {
        let reached = 0;
        for (const d of DEVICES) {
          const subs = matching(d, positions[d.name], ev);
          reached += subs.length;
          if (subs.length > 0) expected.get(d.name)!.push({ id: `ev-${ev.seq}`, subs });
        }
        const r = await publish(pub, eventOf(ev));
        assert.equal(r.eventId, `ev-${ev.seq}`);
        assert.equal(r.reached, BigInt(reached), `reached of ev-${ev.seq}`);
        reachedOf.set(ev.seq, reached);
      }
    };
    await round(ROUND_1_POSITIONS, ROUND_1_EVENTS);
    await round(ROUND_2_MOVES, ROUND_2_EVENTS);
    // The world is not trivial: every device hears something, some events reach several devices on
    // both gateways, one reaches nobody.
    for (const d of DEVICES) assert.ok(expected.get(d.name)!.length > 0, `${d.name} expects a notification`);
    const onBoth = [...reachedOf.keys()].filter((seq) => new Set(DEVICES.filter((d) => expected.get(d.name)!.some((e) => e.id === `ev-${seq}`)).map((d) => d.gateway)).size === 2);
    assert.ok(onBoth.length >= 3, `events reaching devices on both gateways: ${onBoth.join(', ')}`);
    assert.equal(reachedOf.get(12), 0, 'ev-12 reaches nobody');

    for (const d of DEVICES) {
      const stream = streams.get(d.name)!;
      const want = expected.get(d.name)!;
      const got = await stream.notifications(want.length, 15_000);
      assert.deepEqual(
        got.map((n) => ({ id: n.event!.id, subs: [...n.subscriptionIds].sort() })),
        want,
        `${d.name} (on gateway ${d.gateway}) gets exactly its events, in publish order`,
      );
      for (let i = 1; i < got.length; i++) assert.ok(cmpId(got[i - 1].deliveryId, got[i].deliveryId) < 0, `${d.name}: delivery ids increase`);
      // Nothing else came: the next notification is the one only this device's marker matches.
      await stream.expectNextNotification(`mk-${d.name}-0`, async () => {
        const r = await publish(pub, markerFor(d.name));
        assert.equal(r.reached, 1n, `only ${d.name}'s marker subscription matches`);
      }, 10_000);
    }

    // Each device's notifications are in its group's stream on the cluster; the deployment recorded its layout.
    await inspect(async (r) => {
      assert.equal(await r.get(keys.layoutKey), `cluster groups=${GROUPS}`);
      for (const d of DEVICES) assert.equal(await r.xlen(keys.notes(d.name)), expected.get(d.name)!.length + 1, `${d.name}'s stream`);
    });
    // The matcher process's own /metrics: its engine and what it holds.
    assert.ok(matcher.metricsPort !== null, 'the matcher serves metrics');
    const m = await (await fetch(`http://127.0.0.1:${matcher.metricsPort}/metrics`)).text();
    assert.match(m, /^ambit_engine_info\{engine="fast",mode="redis",path="",role="matcher"\} 1$/m);
    const subscriptions = DEVICES.reduce((n, d) => n + d.subs.length + 1, 0);
    assert.match(m, new RegExp(`^ambit_subscriptions\\{role="matcher"\\} ${subscriptions}$`, 'm'));
    for (const s of streams.values()) s.cancel();
  });

  it('matcher SIGKILL: publishes queue on the cluster and are delivered after the restart, in order, once; reconnecting devices resume after their last ack', async () => {
    const ca = clients(gwA);
    const cb = clients(gwB);
    const watch = phaseSub('kill', 'k');
    const a = (await DeviceStream.open(ca, deviceToken('kw-a'))).stream;
    const b = (await DeviceStream.open(cb, deviceToken('kw-b'))).stream;
    await a.subscribeOk(watch);
    await b.subscribeOk(watch);
    for (let i = 0; i < 10; i++) assert.equal((await publish(ca, killEvent(i))).reached, 2n, `kill-${i}`);
    const firstA = await a.notifications(10, 10_000);
    const firstB = await b.notifications(10, 10_000);
    assert.deepEqual(firstA.map(seqOf), [...Array(10).keys()]);
    assert.deepEqual(firstB.map(seqOf), [...Array(10).keys()]);
    a.ack(firstA[9].deliveryId);
    b.ack(firstB[9].deliveryId);
    await a.sync();
    await b.sync();

    await matcher.kill9();
    // With the matcher down a publish is accepted (queued in the command stream) but not answered in time.
    for (let i = 10; i < 15; i++) {
      await assert.rejects(publish(i % 2 === 0 ? ca : cb, killEvent(i), 1000), (err: grpc.ServiceError) => err.code === Status.DEADLINE_EXCEEDED || err.code === Status.UNAVAILABLE);
    }
    assert.equal(a.pending('notification').length + b.pending('notification').length, 0, 'nothing is delivered while no matcher runs');
    matcher = await startMatcher();
    // The new matcher rebuilt the subscriptions from the cluster: new events match too.
    for (let i = 15; i < 20; i++) assert.equal((await publish(ca, killEvent(i))).reached, 2n, `kill-${i}`);
    const restA = await a.notifications(10, 20_000);
    const restB = await b.notifications(10, 20_000);
    for (const [name, all] of [['kw-a', [...firstA, ...restA]], ['kw-b', [...firstB, ...restB]]] as const) {
      assert.deepEqual(all.map(seqOf), [...Array(20).keys()], `${name}: the queued events before the later ones, each once`);
      for (let i = 1; i < all.length; i++) assert.ok(cmpId(all[i - 1].deliveryId, all[i].deliveryId) < 0, `${name}: delivery ids increase`);
    }
    // Nothing twice: the next notification of each is the next event.
    assert.equal(a.pending('notification').length + b.pending('notification').length, 0);
    assert.equal((await publish(ca, killEvent(20))).reached, 2n);
    assert.equal(seqOf(await a.next('notification', 10_000)), 20);
    assert.equal(seqOf(await b.next('notification', 10_000)), 20);

    // kw-a acks up to kill-14 and moves to gateway B with that as its resume token.
    const ackedA = restA[4];
    assert.equal(seqOf(ackedA), 14);
    a.ack(ackedA.deliveryId);
    await a.sync();
    a.cancel();
    const again = await DeviceStream.open(cb, deviceToken('kw-a'), ackedA.deliveryId);
    assert.equal(again.welcome.resumeToken, ackedA.deliveryId);
    assert.equal(again.welcome.missed, 0n);
    assert.deepEqual((await again.stream.notifications(6, 10_000)).map(seqOf), [15, 16, 17, 18, 19, 20]);
    // kw-b moves to gateway A with no token: it resumes after its last ack (kill-9).
    b.cancel();
    const bAgain = (await DeviceStream.open(ca, deviceToken('kw-b'))).stream;
    assert.deepEqual((await bAgain.notifications(11, 10_000)).map(seqOf), [10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20]);
    // And nothing more: the next one of each is the next event.
    assert.equal(again.stream.pending('notification').length + bAgain.pending('notification').length, 0);
    assert.equal((await publish(cb, killEvent(21))).reached, 2n);
    assert.equal(seqOf(await again.stream.next('notification', 10_000)), 21);
    assert.equal(seqOf(await bAgain.next('notification', 10_000)), 21);
    again.stream.cancel();
    bAgain.cancel();
    await within(Promise.all([again.stream.ended, bAgain.ended]), 10_000, 'the streams end');
  });

  it('every process wrote only JSON log lines to stdout, none at error level', () => {
    assert.equal(processes.length, 4, 'two matchers (one killed) and two gateways');
    for (const p of processes) {
      assert.deepEqual(p.logs.filter((l) => 'nonJson' in l), [], 'stdout is the JSON log stream');
      assert.deepEqual(p.logs.filter((l) => typeof l.level === 'number' && l.level >= 50), [], 'no error logs');
    }
  });
});

function cmpId(a: string, b: string): number {
  const [x1, x2] = a.split('-').map(Number);
  const [y1, y2] = b.split('-').map(Number);
  return x1 - y1 || x2 - y2;
}
