/**
 * Matcher failover with real processes: a real redis-server, two matcher processes (one leads,
 * one stands by) and a gateway process, real gRPC clients. The leader is killed with SIGKILL while
 * events are published; later a leader is stopped with SIGSTOP past its lease and resumed. Every
 * event reaches the device once, in order; the resumed leader stands down.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { SCOPES, TokenAuthority } from '../../services/edge/auth.js';
import { Op } from '../../api/gen/ambit/v1/types_pb.js';
import { Clients, DeviceStream, unary } from '../support/grpc.js';
import { type AmbitProcess, startAmbit } from '../support/processes.js';
import { type RedisServer, redisServerMissing, startRedisServer } from '../support/redis-server.js';

const SECRET = 'failover-test-secret-0123456789abcdef012';
const authority = new TokenAuthority(SECRET);
const deviceToken = (d: string) => authority.issue({ subject: d, scopes: [SCOPES.device] });
const publisherToken = authority.issue({ subject: 'pub', scopes: [SCOPES.publish] });
const MILAN = { lat: 45.4642, lon: 9.19 };
const num = (v: number) => ({ kind: { case: 'number', value: v } });
const accident = (seq: number) => ({ id: `ev-${seq}`, position: MILAN, attributes: { sev: num(3), seq: num(seq) } });

const leading = (l: Record<string, unknown>) => l.component === 'matcher' && typeof l.msg === 'string' && l.msg.includes('leading (lease epoch');
const standingDown = (l: Record<string, unknown>) => l.component === 'matcher' && typeof l.msg === 'string' && l.msg.includes('standing down');

describe('matcher failover: a leader and a standby process on one Redis', { skip: redisServerMissing() ?? false, timeout: 120_000 }, () => {
  let redis: RedisServer;
  let gateway: AmbitProcess;
  const matchers: AmbitProcess[] = [];
  let clients: Clients;
  const env = (role: string): Record<string, string> => ({
    AMBIT_ROLE: role,
    REDIS_URL: redis.url,
    AMBIT_TOKEN_SECRET: SECRET,
    AMBIT_ENGINE: 'fast',
    AMBIT_MATCHER_LEASE_MS: '500',
  });
  const startMatcher = async () => {
    const m = await startAmbit({ ...env('matcher'), AMBIT_METRICS_PORT: '0' }, [], 30_000);
    matchers.push(m);
    return m;
  };
  const metric = async (p: AmbitProcess, name: string) => {
    const text = await (await fetch(`http://127.0.0.1:${p.metricsPort}/metrics`)).text();
    const m = new RegExp(`^${name}\\{role="matcher"\\} (\\S+)$`, 'm').exec(text);
    assert.ok(m !== null, `${name} is exported`);
    return Number(m[1]);
  };
  const publish = (seq: number) => {
    const md = new grpc.Metadata();
    md.set('authorization', `Bearer ${publisherToken}`);
    return unary<{ reached: bigint }>(clients.publisher, 'publish', { event: accident(seq) }, md, { deadline: Date.now() + 15_000 });
  };

  before(async () => {
    redis = await startRedisServer();
    await startMatcher();
    await matchers[0].waitForLog(leading);
    await startMatcher();
    gateway = await startAmbit(env('gateway'));
    clients = new Clients(`127.0.0.1:${gateway.port}`, grpc.credentials.createInsecure());
  });

  after(async () => {
    clients?.close();
    await Promise.all([gateway, ...matchers].map((p) => p?.stop().catch(() => null)));
    await redis?.stop();
  });

  it('SIGKILL of the leader mid-stream: the standby leads, every event reaches the device once, in order', async () => {
    const [first, standby] = matchers;
    assert.equal(await metric(first, 'ambit_matcher_leader'), 1);
    assert.equal(await metric(standby, 'ambit_matcher_leader'), 0);
    const dev = await DeviceStream.open(clients, deviceToken('watcher'));
    dev.stream.move(MILAN.lat, MILAN.lon);
    assert.equal((await dev.stream.subscribe({ id: 'w', filters: [{ constraints: [{ name: 'sev', op: Op.GE, value: num(0) }], area: { radiusM: 2000 } }] })).code, 0);
    await dev.stream.sync();
    const total = 60;
    const answers: Promise<{ reached: bigint }>[] = [];
    for (let i = 0; i < total; i++) {
      answers.push(publish(i));
      if (i === 20) await first.kill9();
      if (i % 5 === 4) await answers[i];
    }
    assert.deepEqual(
      (await Promise.all(answers)).map((a) => a.reached),
      Array(total).fill(1n),
      'every publish answered with its recipient',
    );
    await standby.waitForLog(leading);
    assert.equal(await metric(standby, 'ambit_matcher_leader'), 1);
    assert.equal(await metric(standby, 'ambit_matcher_epoch'), 2);
    const got = await dev.stream.notifications(total, 15_000);
    assert.deepEqual(
      got.map((n) => n.event!.attributes.seq.kind.value),
      [...Array(total).keys()],
      'every event once, in order',
    );
    dev.stream.ack(got[total - 1].deliveryId);
    await dev.stream.sync();
    dev.stream.cancel();
  });

  it('a leader stopped (SIGSTOP) past its lease: a new matcher leads; resumed, the old one stands down and nothing is delivered twice', async () => {
    const paused = matchers[1];
    const next = await startMatcher();
    const dev = await DeviceStream.open(clients, deviceToken('watcher'));
    process.kill(paused.pid, 'SIGSTOP');
    try {
      await next.waitForLog(leading, 15_000);
      for (let i = 100; i < 110; i++) assert.equal((await publish(i)).reached, 1n);
    } finally {
      process.kill(paused.pid, 'SIGCONT');
    }
    await paused.waitForLog(standingDown, 15_000);
    assert.equal(await metric(paused, 'ambit_matcher_leader'), 0);
    for (let i = 110; i < 115; i++) assert.equal((await publish(i)).reached, 1n);
    const got = await dev.stream.notifications(15, 15_000);
    assert.deepEqual(
      got.map((n) => n.event!.attributes.seq.kind.value),
      [...Array(15).keys()].map((i) => 100 + i),
    );
    await dev.stream.expectNextNotification('ev-115', () => publish(115), 10_000);
    dev.stream.cancel();
  });
});
