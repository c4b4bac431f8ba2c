/**
 * Matcher partitions (AMBIT_MATCHER_PARTITIONS=K) as separate processes on one real redis-server,
 * real gRPC clients.
 *
 * K = 2: two matcher processes for partition 0 (a leader and a standby, AMBIT_MATCHER_PARTITION=0,
 * a short lease), one for partition 1, and two gateway processes, each holding a hub per partition.
 * Devices of both partitions on both gateways get exactly the events their subscriptions match and
 * reached counts add up over the partitions; each partition's state sits under its own keys. Then
 * partition 0's leader is killed with SIGKILL: its standby leads, partition 1's leader is untouched,
 * and every device gets every event once, in order. A process with another partition count on
 * the same prefix refuses to start with the layout error.
 *
 * K = 3 in one process of role all (a matcher thread per partition) with its own gateway: exact
 * notifications; a matcher process serving every partition (three threads) stands by for all three
 * and, when the first process is killed, leads all three: its ambit_matcher_leader is 3.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { Redis } from 'ioredis';
import { SCOPES, TokenAuthority } from '../../services/edge/auth.js';
import { devicePart } from '../../services/hub/port.js';
import { Keys } from '../../services/redis/keys.js';
import { type Notification, Op } from '../../api/gen/ambit/v1/types_pb.js';
import { Clients, DeviceStream, Status, eventually, meta, unary } from '../support/grpc.js';
import { at, deviceWorld, type Ev, eventOf, markerFor, markerSub, matching, MILAN, moveDevices, num, openDevices, phaseEvent, phaseSub, type Point, ROUND_1_EVENTS, ROUND_2_EVENTS, seqOf } from '../support/device-world.js';
import { type AmbitProcess, startAmbit } from '../support/processes.js';
import { useRedisServer } from '../support/redis-deployment.js';
import { assertIncreasing, inspectServer, layoutError, leading, metricOf } from '../support/process-checks.js';

const SECRET = 'matcher-partitions-secret-0123456789abcd';
const authority = new TokenAuthority(SECRET);
const deviceToken = (d: string) => authority.issue({ subject: d, scopes: [SCOPES.device] });
const publisherToken = authority.issue({ subject: 'pub', scopes: [SCOPES.publish] });

/** Gateways A, A, B, B, ...: the names alternate partitions, so each gateway holds devices of both. */
const { devices: DEVICES, round1Positions: ROUND_1_POSITIONS, round2Moves: ROUND_2_MOVES } = deviceWorld('mp', ['A', 'A', 'B', 'B', 'A', 'A', 'B', 'B']);

const redis = useRedisServer();
const inspect = <T>(f: (r: Redis) => Promise<T>): Promise<T> => inspectServer(redis.url(), f);

/** Starts processes of one deployment and stops them all in after(). */
function deploymentOf(prefix: string, partitions: number) {
  const processes: AmbitProcess[] = [];
  const open: Clients[] = [];
  const env = (role: string, more: Record<string, string> = {}): Record<string, string> => ({
    AMBIT_ROLE: role,
    REDIS_URL: redis.url(),
    AMBIT_REDIS_PREFIX: prefix,
    AMBIT_MATCHER_PARTITIONS: String(partitions),
    AMBIT_TOKEN_SECRET: SECRET,
    AMBIT_ENGINE: 'fast',
    AMBIT_MATCHER_LEASE_MS: '500',
    AMBIT_LOG_LEVEL: 'info',
    ...more,
  });
  const start = async (role: string, more: Record<string, string> = {}) => {
    const p = await startAmbit(env(role, more), [], 30_000);
    processes.push(p);
    return p;
  };
  const clients = (p: AmbitProcess) => {
    assert.ok(p.port !== null, 'the process serves gRPC');
    const c = new Clients(`127.0.0.1:${p.port}`, grpc.credentials.createInsecure());
    open.push(c);
    return c;
  };
  after(async () => {
    for (const c of open) c.close();
    await Promise.all(processes.map((p) => p.stop().catch(() => null)));
  });
  return { env, start, clients, processes };
}

const publish = (c: Clients, ev: unknown, deadlineMs = 10_000) =>
  unary<{ eventId: string; reached: bigint }>(c.publisher, 'publish', { event: ev }, meta(publisherToken), { deadline: Date.now() + deadlineMs });

describe('matcher partitions processes: K=2, a leader and a standby for partition 0, one matcher for partition 1, two gateways', { skip: redis.missing ?? false, timeout: 120_000 }, () => {
  const K = 2;
  const prefix = `mpp${process.pid}-${Date.now()}:`;
  const d = deploymentOf(prefix, K);
  const keysOf = (k: number) => new Keys(prefix, { cluster: false, groups: 1, partitions: K }, k);
  let leader0: AmbitProcess;
  let standby0: AmbitProcess;
  let leader1: AmbitProcess;
  let gwA: AmbitProcess;
  let gwB: AmbitProcess;

  before(async () => {
    leader0 = await d.start('matcher', { AMBIT_MATCHER_PARTITION: '0', AMBIT_METRICS_PORT: '0' });
    await leader0.waitForLog(leading);
    leader1 = await d.start('matcher', { AMBIT_MATCHER_PARTITION: '1', AMBIT_METRICS_PORT: '0' });
    await leader1.waitForLog(leading);
    standby0 = await d.start('matcher', { AMBIT_MATCHER_PARTITION: '0', AMBIT_METRICS_PORT: '0' });
    [gwA, gwB] = await Promise.all([d.start('gateway'), d.start('gateway')]);
  });

  it('devices of both partitions on both gateways: exact recipients, reached counts summed over the partitions, each partition under its own keys', async () => {
    // The world spreads over the partitions: each gateway holds devices of both.
    for (const gw of ['A', 'B'] as const) {
      for (let k = 0; k < K; k++) assert.ok(DEVICES.some((dev) => dev.gateway === gw && devicePart(dev.name, K) === k), `gateway ${gw} holds a device of partition ${k}`);
    }
    assert.equal(await metricOf(leader0, 'ambit_matcher_leader', 'matcher'), 1);
    assert.equal(await metricOf(leader1, 'ambit_matcher_leader', 'matcher'), 1);
    assert.equal(await metricOf(standby0, 'ambit_matcher_leader', 'matcher'), 0);

    const ca = d.clients(gwA);
    const cb = d.clients(gwB);
    const streams = await openDevices(DEVICES, (g) => (g === 'A' ? ca : cb), deviceToken);
    const pub = ca; // every publish goes through gateway A; half the devices read on B
    const positions: Record<string, Point> = {};
    const expected = new Map<string, { id: string; subs: string[] }[]>(DEVICES.map((dev) => [dev.name, []]));
    const reachedOf = new Map<number, number[]>(); // per partition
    const round = async (moves: Record<string, Point>, events: Ev[]) => {
      await moveDevices(streams, positions, moves);
      for (const ev of events) {
        const per = Array<number>(K).fill(0);
        for (const dev of DEVICES) {
          const subs = matching(dev, positions[dev.name], ev);
          per[devicePart(dev.name, K)] += subs.length;
          if (subs.length > 0) expected.get(dev.name)!.push({ id: `ev-${ev.seq}`, subs });
        }
        const r = await publish(pub, eventOf(ev));
        assert.equal(r.eventId, `ev-${ev.seq}`);
        assert.equal(r.reached, BigInt(per[0] + per[1]), `reached of ev-${ev.seq} (${per.join(' + ')} over the partitions)`);
        reachedOf.set(ev.seq, per);
      }
    };
    await round(ROUND_1_POSITIONS, ROUND_1_EVENTS);
    await round(ROUND_2_MOVES, ROUND_2_EVENTS);
    // The world is not trivial: every device hears something, some events reach both partitions, one nobody.
    for (const dev of DEVICES) assert.ok(expected.get(dev.name)!.length > 0, `${dev.name} expects a notification`);
    const onBoth = [...reachedOf].filter(([, per]) => per.every((n) => n > 0)).map(([seq]) => seq);
    assert.ok(onBoth.length >= 3, `events reaching devices of both partitions: ${onBoth.join(', ')}`);
    assert.deepEqual(reachedOf.get(12), [0, 0], 'ev-12 reaches nobody');

    for (const dev of DEVICES) {
      const stream = streams.get(dev.name)!;
      const want = expected.get(dev.name)!;
      const got = await stream.notifications(want.length, 15_000);
      assert.deepEqual(
        got.map((n) => ({ id: n.event!.id, subs: [...n.subscriptionIds].sort() })),
        want,
        `${dev.name} (partition ${devicePart(dev.name, K)}, on gateway ${dev.gateway}) gets exactly its events, in publish order`,
      );
      assertIncreasing(dev.name, got);
      // Nothing else came: the next notification is the one only this device's marker matches.
      await stream.expectNextNotification(`mk-${dev.name}-0`, async () => {
        const r = await publish(pub, markerFor(dev.name));
        assert.equal(r.reached, 1n, `only ${dev.name}'s marker subscription matches`);
      }, 10_000);
    }

    // Each device's subscriptions are in its partition's keys only; each partition has its own
    // command stream; the notifications are in the shared device keys; the layout names K.
    await inspect(async (r) => {
      assert.equal(await r.get(`${prefix}layout`), 'single partitions=2');
      for (let k = 0; k < K; k++) {
        assert.equal(keysOf(k).in, `${prefix}p${k}:in`);
        assert.ok((await r.xlen(keysOf(k).in)) > 0, `partition ${k}'s command stream`);
        assert.equal(await r.exists(`${prefix}in`), 0, 'no unpartitioned command stream');
      }
      for (const dev of DEVICES) {
        const k = devicePart(dev.name, K);
        assert.equal(await r.hlen(keysOf(k).subs(dev.name)), dev.subs.length + 1, `${dev.name}'s subscriptions in partition ${k}`);
        assert.equal(await r.exists(keysOf(1 - k).subs(dev.name)), 0, `${dev.name} has nothing in partition ${1 - k}`);
        assert.equal(await r.xlen(keysOf(0).notes(dev.name)), expected.get(dev.name)!.length + 1, `${dev.name}'s notification stream`);
      }
    });
    // Each partition's matchers hold their devices' subscriptions only (the standby tails the stream too).
    const subsOf = (k: number) => DEVICES.filter((dev) => devicePart(dev.name, K) === k).reduce((n, dev) => n + dev.subs.length + 1, 0);
    assert.ok(subsOf(0) > 0 && subsOf(1) > 0);
    assert.equal(await metricOf(leader0, 'ambit_subscriptions', 'matcher'), subsOf(0));
    assert.equal(await metricOf(leader1, 'ambit_subscriptions', 'matcher'), subsOf(1));
    await eventually(async () => (await metricOf(standby0, 'ambit_subscriptions', 'matcher')) === subsOf(0), "the standby's subscriptions", 10_000);
    for (const s of streams.values()) s.cancel();
  });

  it("SIGKILL of partition 0's leader: its standby leads, partition 1 keeps its leader; every device gets every event once, in order", async (t) => {
    const ca = d.clients(gwA);
    const cb = d.clients(gwB);
    const watchers = ['kw-0', 'kw-1', 'kw-2', 'kw-3'];
    assert.deepEqual(watchers.map((w) => devicePart(w, K)), [0, 1, 0, 1], 'two watchers per partition');
    const streams = new Map<string, DeviceStream>();
    for (const [i, w] of watchers.entries()) {
      const { stream } = await DeviceStream.open(i < 2 ? ca : cb, deviceToken(w)); // each gateway: one of each partition
      await stream.subscribeOk(phaseSub('kill'));
      streams.set(w, stream);
    }
    const got = new Map<string, Notification[]>(watchers.map((w) => [w, []]));
    const take = async (n: number, timeoutMs: number) => {
      for (const w of watchers) got.get(w)!.push(...(await streams.get(w)!.notifications(n, timeoutMs)));
    };
    for (let i = 0; i < 10; i++) assert.equal((await publish(i % 2 === 0 ? ca : cb, phaseEvent('kill', i))).reached, 4n, `kill-${i}`);
    await take(10, 10_000);
    const epoch1 = await metricOf(leader1, 'ambit_matcher_epoch', 'matcher');

    // Publishes go on while partition 0's leader dies: each is answered (with every recipient) or
    // times out; either way it is stored in both partitions' streams and delivered.
    let answered = 0;
    let timedOut = 0;
    for (let i = 10; i < 30; i++) {
      if (i === 12) await leader0.kill9();
      try {
        const r = await publish(i % 2 === 0 ? ca : cb, phaseEvent('kill', i), 5000);
        assert.equal(r.reached, 4n, `kill-${i}`);
        answered++;
      } catch (err) {
        assert.ok((err as grpc.ServiceError).code === Status.DEADLINE_EXCEEDED, `kill-${i}: ${String(err)}`);
        timedOut++;
      }
    }
    assert.equal(answered + timedOut, 20);
    t.diagnostic(`during the takeover: ${answered} publishes answered, ${timedOut} timed out`);
    await standby0.waitForLog(leading, 15_000);
    assert.equal(await metricOf(standby0, 'ambit_matcher_leader', 'matcher'), 1, 'the standby leads partition 0');
    assert.equal(await metricOf(standby0, 'ambit_matcher_epoch', 'matcher'), 2, "partition 0's second lease");
    // Partition 1's lease is its own: its leader never changed.
    assert.equal(await metricOf(leader1, 'ambit_matcher_leader', 'matcher'), 1);
    assert.equal(await metricOf(leader1, 'ambit_matcher_epoch', 'matcher'), epoch1);
    assert.equal(epoch1, 1);
    for (let i = 30; i < 35; i++) assert.equal((await publish(i % 2 === 0 ? ca : cb, phaseEvent('kill', i))).reached, 4n, `kill-${i}`);
    await take(25, 20_000);
    for (const w of watchers) {
      const all = got.get(w)!;
      assert.deepEqual(all.map(seqOf), [...Array(35).keys()], `${w} (partition ${devicePart(w, K)}): every event once, in order`);
      assertIncreasing(w, all);
    }
    // Nothing twice: the next notification of each is the next event.
    for (const w of watchers) assert.equal(streams.get(w)!.pending('notification').length, 0, `${w}: nothing more`);
    assert.equal((await publish(cb, phaseEvent('kill', 35))).reached, 4n);
    for (const w of watchers) assert.equal(seqOf(await streams.get(w)!.next('notification', 10_000)), 35, w);
    for (const s of streams.values()) s.cancel();
  });

  it('a process with another partition count on the same prefix refuses to start with the layout error', async () => {
    const refused = async (role: string, more: Record<string, string>, message: string) => {
      await assert.rejects(startAmbit(d.env(role, more), [], 30_000), (err: Error) => {
        assert.match(err.message, /exited \(1\) before the expected log line/, err.message);
        assert.ok(err.message.includes(message), `${role} ${JSON.stringify(more)}: ${err.message}`);
        return true;
      });
    };
    await refused('gateway', { AMBIT_MATCHER_PARTITIONS: '3' }, layoutError('redis hub', prefix, 'single partitions=2', 'single partitions=3'));
    await refused('gateway', { AMBIT_MATCHER_PARTITIONS: '1' }, layoutError('redis hub', prefix, 'single partitions=2', 'single'));
    await refused('matcher', { AMBIT_MATCHER_PARTITIONS: '3', AMBIT_MATCHER_PARTITION: '0' }, layoutError('redis matcher', prefix, 'single partitions=2', 'single partitions=3'));
    await refused('matcher', { AMBIT_MATCHER_PARTITIONS: '' }, layoutError('redis matcher', prefix, 'single partitions=2', 'single'));
    // The record is unchanged and the deployment still serves.
    assert.equal(await inspect((r) => r.get(`${prefix}layout`)), 'single partitions=2');
    assert.equal((await publish(d.clients(gwB), phaseEvent('after', 0))).reached, 0n);
  });

  it('every process wrote only JSON log lines to stdout, none at error level', () => {
    assert.equal(d.processes.length, 5, 'three matchers (one killed) and two gateways');
    for (const p of d.processes) {
      assert.deepEqual(p.logs.filter((l) => 'nonJson' in l), [], 'stdout is the JSON log stream');
      assert.deepEqual(p.logs.filter((l) => typeof l.level === 'number' && l.level >= 50), [], 'no error logs');
    }
  });
});

describe('matcher partitions processes: K=3 in one process of role all (a matcher thread per partition)', { skip: redis.missing ?? false, timeout: 120_000 }, () => {
  const K = 3;
  const prefix = `mpa${process.pid}-${Date.now()}:`;
  const d = deploymentOf(prefix, K);
  const keysOf = (k: number) => new Keys(prefix, { cluster: false, groups: 1, partitions: K }, k);
  const NAMES = ['a3-0', 'a3-1', 'a3-2', 'a3-3', 'a3-4', 'a3-5'];
  let node: AmbitProcess;

  before(async () => {
    node = await d.start('all', { AMBIT_METRICS_PORT: '0' });
  });

  it('devices of three partitions on the one gateway get exact notifications; three leases, one per thread', async () => {
    assert.deepEqual(new Set(NAMES.map((n) => devicePart(n, K))), new Set([0, 1, 2]), 'the devices cover the three partitions');
    assert.ok(node.logs.some((l) => l.component === 'matcher' && typeof l.msg === 'string' && l.msg.startsWith('matcher partitions 0, 1, 2 of 3, a thread each')), 'three matcher threads');
    const c = d.clients(node);
    const streams = new Map<string, DeviceStream>();
    // Device i subscribes to `sev > i % 3` near Milan and to its marker; all stand at Milan.
    for (const [i, name] of NAMES.entries()) {
      const { stream } = await DeviceStream.open(c, deviceToken(name));
      stream.move(MILAN.lat, MILAN.lon);
      await stream.subscribeOk(markerSub(name));
      await stream.subscribeOk({ id: 'sev', filters: [{ constraints: [{ name: 'sev', op: Op.GT, value: num(i % 3) }], area: { radiusM: 1000 } }] });
      await stream.sync();
      streams.set(name, stream);
    }
    for (let sev = 0; sev <= 3; sev++) {
      const want = NAMES.filter((_, i) => sev > i % 3);
      const r = await publish(c, { id: `sev-${sev}`, position: at(0, 200), attributes: { sev: num(sev), seq: num(sev) } });
      assert.equal(r.reached, BigInt(want.length), `sev-${sev}`);
    }
    assert.equal((await publish(c, { id: 'far', position: at(0, 3000), attributes: { sev: num(9), seq: num(9) } })).reached, 0n, 'too far for everyone');
    for (const [i, name] of NAMES.entries()) {
      const s = streams.get(name)!;
      const want = [0, 1, 2, 3].filter((sev) => sev > i % 3).map((sev) => `sev-${sev}`);
      const got = await s.notifications(want.length, 10_000);
      assert.deepEqual(got.map((n) => n.event!.id), want, `${name} (partition ${devicePart(name, K)})`);
      for (const n of got) assert.deepEqual(n.subscriptionIds, ['sev']);
      const marker = await s.expectNextNotification(`mk-${name}-0`, async () => assert.equal((await publish(c, markerFor(name))).reached, 1n), 10_000);
      s.ack(marker.deliveryId); // the next test's streams resume after it
      await s.sync();
    }
    await inspect(async (r) => {
      assert.equal(await r.get(`${prefix}layout`), 'single partitions=3');
      for (let k = 0; k < K; k++) assert.match((await r.get(keysOf(k).matcherLease)) ?? '', /^\d+ \S+$/, `partition ${k} has a lease holder`);
      for (const name of NAMES) assert.equal(await r.hlen(keysOf(devicePart(name, K)).subs(name)), 2, `${name}'s subscriptions in its partition`);
    });
    // The gateway's figures add up over the partitions (each matcher's stats record, written every second).
    await eventually(async () => (await metricOf(node, 'ambit_subscriptions', 'all')) === NAMES.length * 2, 'the subscriptions of the three partitions on /metrics', 10_000);
    for (const s of streams.values()) s.cancel();
  });

  it("role all's /metrics shows the partitions it leads: ambit_matcher_leader 3", async () => {
    assert.equal(await metricOf(node, 'ambit_matcher_leader', 'all'), 3);
  });

  it('a matcher process serving all three partitions (three threads) stands by, then leads all three when the first process dies: ambit_matcher_leader 3', async () => {
    const threads = await d.start('matcher', { AMBIT_METRICS_PORT: '0' });
    assert.equal(await metricOf(threads, 'ambit_matcher_leader', 'matcher'), 0, 'it stands by for the three partitions');
    await eventually(async () => (await metricOf(threads, 'ambit_subscriptions', 'matcher')) === NAMES.length * 2, 'its three threads hold every subscription (summed)', 10_000);
    // A gateway of its own, for when the node (and its gateway) is gone.
    const gw = await d.start('gateway');
    const c = d.clients(gw);
    const streams = new Map<string, DeviceStream>();
    for (const name of NAMES) {
      const { stream } = await DeviceStream.open(c, deviceToken(name));
      await stream.subscribeOk(phaseSub('t'));
      streams.set(name, stream);
    }
    for (let i = 0; i < 3; i++) assert.equal((await publish(c, phaseEvent('t', i))).reached, BigInt(NAMES.length), `t-${i}`);
    await node.kill9();
    // Each of its threads logs when it leads its partition.
    for (let k = 0; k < 3; k++) await threads.waitForLog((l) => leading(l) && l.partition === k, 15_000);
    assert.equal(await metricOf(threads, 'ambit_matcher_leader', 'matcher'), 3, 'the matcher process leads all three partitions');
    for (let i = 3; i < 6; i++) assert.equal((await publish(c, phaseEvent('t', i))).reached, BigInt(NAMES.length), `t-${i}`);
    for (const [name, s] of streams) {
      const got = await s.notifications(6, 15_000);
      assert.deepEqual(got.map(seqOf), [0, 1, 2, 3, 4, 5], `${name} (partition ${devicePart(name, K)}): every event once, in order`);
      assertIncreasing(name, got);
    }
    // Nothing twice: the next notification of each is the next event.
    for (const [name, s] of streams) assert.equal(s.pending('notification').length, 0, `${name}: nothing more`);
    assert.equal((await publish(c, phaseEvent('t', 6))).reached, BigInt(NAMES.length));
    for (const [name, s] of streams) assert.equal(seqOf(await s.next('notification', 10_000)), 6, name);
    for (const s of streams.values()) s.cancel();
  });

  it('a process with another partition count on the same prefix refuses to start with the layout error', async () => {
    await assert.rejects(startAmbit(d.env('gateway', { AMBIT_MATCHER_PARTITIONS: '2' }), [], 30_000), (err: Error) => {
      assert.ok(err.message.includes(layoutError('redis hub', prefix, 'single partitions=3', 'single partitions=2')), err.message);
      return true;
    });
    // A matcher serving every partition of its (wrong) count: its threads fail the check.
    await assert.rejects(startAmbit(d.env('matcher', { AMBIT_MATCHER_PARTITIONS: '2' }), [], 30_000), (err: Error) => {
      assert.ok(err.message.includes(layoutError('redis matcher', prefix, 'single partitions=3', 'single partitions=2')), err.message);
      return true;
    });
  });
});
