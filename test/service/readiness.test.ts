/**
 * Readiness: `/readyz` on the ops port and the gRPC health service follow what a process can do
 * now. First the checks on their own (a required check that fails, one that never answers, one
 * that is only reported, a process that is stopping), then real processes on a redis-server of
 * this file's own: a gateway and a matcher, the matcher killed and started again, then Redis
 * killed.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import type { HubStats } from '../../services/hub/port.js';
import { Readiness } from '../../services/process/readiness.js';
import { eventually, healthCheck, healthClient } from '../support/grpc.js';
import { type AmbitProcess, startAmbit } from '../support/processes.js';
import { type RedisServer, redisServerMissing, startRedisServer } from '../support/redis-server.js';


const check = healthCheck;

function stats(mode: 'embedded' | 'redis', extra: Record<string, unknown>): HubStats {
  return { mode, engine: 'fast', engineDetail: 'fast (test)', subscriptions: 0, filters: 0, devices: 0, eventsPublished: 0, notifications: 0, locationUpdates: 0, notificationsDropped: 0, engineMemoryBytes: 0, extra } as HubStats;
}

type Report = { ready: boolean; draining: boolean; checks: Record<string, { ok: boolean; required: boolean; detail: string }> };

async function readyz(p: AmbitProcess): Promise<{ status: number; body: Report }> {
  const res = await fetch(`http://127.0.0.1:${p.metricsPort}/readyz`);
  return { status: res.status, body: (await res.json()) as Report };
}

describe('readiness checks', () => {
  it('a hub that answers is ready; in Redis mode a missing matcher is reported but does not make it unready', async () => {
    const ok = await new Readiness().watchHub({ stats: async () => stats('embedded', {}) }).report();
    assert.deepEqual(ok, { ready: true, draining: false, checks: { hub: { ok: true, required: true, detail: 'embedded: fast (test)' } } });
    const r = await new Readiness().watchHub({ stats: async () => stats('redis', { matcherAlive: false }) }).report();
    assert.equal(r.ready, true);
    assert.equal(r.checks.matchers.ok, false);
    assert.equal(r.checks.matchers.required, false);
    assert.match(r.checks.matchers.detail, /no live matcher: publishes are stored and wait for it/);
    const geo = await new Readiness().watchHub({ stats: async () => stats('redis', { matcherAlive: false, shardsAlive: 2, geoShards: 2, wideShards: 1 }) }).report();
    assert.match(geo.checks.matchers.detail, /^2 of 3 shards have a live matcher/);
  });

  it('a hub that fails or never answers makes the process unready, naming why; a stopping process is unready', async () => {
    const failing = await new Readiness().watchHub({ stats: async () => Promise.reject(new Error('Redis is unreachable')) }).report();
    assert.deepEqual(failing, { ready: false, draining: false, checks: { hub: { ok: false, required: true, detail: 'Redis is unreachable' } } });
    const silent = await new Readiness(50).watchHub({ stats: () => new Promise<HubStats>(() => {}) }).report();
    assert.equal(silent.ready, false);
    assert.equal(silent.checks.hub.detail, 'no answer within 50 ms');
    const matchers = new Readiness().watchMatchers({ stats: async () => stats('redis', { matchersServed: 2, matchersReady: 1, matcherLeader: 1 }) });
    const half = await matchers.report();
    assert.equal(half.ready, false);
    assert.equal(half.checks.matcher.detail, '1 of 2 matcher partitions connected to Redis and running, 1 leading');
    const draining = new Readiness().watchHub({ stats: async () => stats('embedded', {}) });
    draining.drain();
    assert.deepEqual(await draining.report(), { ready: false, draining: true, checks: { hub: { ok: true, required: true, detail: 'embedded: fast (test)' } } });
  });
});

const missing = redisServerMissing();

describe('readiness of real processes', { skip: missing ?? false, timeout: 90_000 }, () => {
  let redis: RedisServer;
  const processes: AmbitProcess[] = [];
  let gateway: AmbitProcess;
  let matcher: AmbitProcess;
  let health: grpc.Client;
  const env = (role: string) => ({ AMBIT_ROLE: role, REDIS_URL: redis.url, AMBIT_REDIS_PREFIX: 'ready:', AMBIT_METRICS_PORT: '0', AMBIT_ENGINE: 'fast', AMBIT_MATCHER_LEASE_MS: '500', AMBIT_TOKEN_SECRET: 'readiness-test-secret-0123456789abcdef' });
  const start = async (role: string) => {
    const p = await startAmbit(env(role), [], 30_000);
    processes.push(p);
    return p;
  };
  const services = async () => {
    const out: Record<string, string> = {};
    for (const s of ['', 'ambit.v1.DeviceService', 'ambit.v1.PublisherService', 'ambit.v1.OpsService']) out[s] = await check(health, s);
    return out;
  };

  before(async () => {
    redis = await startRedisServer();
    matcher = await start('matcher');
    gateway = await start('gateway');
    health = healthClient(`127.0.0.1:${gateway.port}`);
  });
  after(async () => {
    health?.close();
    await Promise.all(processes.map((p) => p.stop().catch(() => null)));
    await redis?.stop();
  });

  it('a gateway with a leading matcher is ready and every service SERVING; the matcher is ready', async () => {
    await eventually(async () => (await readyz(gateway)).body.checks.matchers?.ok === true, 'the gateway to see the matcher', 10_000);
    const g = await readyz(gateway);
    assert.equal(g.status, 200);
    assert.equal(g.body.ready, true);
    assert.equal(g.body.checks.hub.ok, true);
    assert.match(g.body.checks.hub.detail, /^redis: /);
    await eventually(async () => (await services())['ambit.v1.PublisherService'] === 'SERVING', 'health to follow', 5000);
    assert.deepEqual(await services(), { '': 'SERVING', 'ambit.v1.DeviceService': 'SERVING', 'ambit.v1.PublisherService': 'SERVING', 'ambit.v1.OpsService': 'SERVING' });
    const m = await readyz(matcher);
    assert.equal(m.status, 200);
    assert.deepEqual(m.body.checks.matcher, { ok: true, required: true, detail: '1 of 1 matcher partitions connected to Redis and running, 1 leading' });
    assert.equal((await fetch(`http://127.0.0.1:${gateway.metricsPort}/healthz`)).status, 200);
  });

  it('the matcher killed: the gateway stays ready (publishes are stored) but the Publisher service turns NOT_SERVING; a new matcher brings it back', async () => {
    await matcher.kill9();
    await eventually(async () => (await readyz(gateway)).body.checks.matchers?.ok === false, 'the gateway to see the matcher gone', 15_000);
    const g = await readyz(gateway);
    assert.equal(g.status, 200);
    assert.equal(g.body.ready, true);
    await eventually(async () => (await services())['ambit.v1.PublisherService'] === 'NOT_SERVING', 'the Publisher service to turn NOT_SERVING', 5000);
    assert.deepEqual(await services(), { '': 'SERVING', 'ambit.v1.DeviceService': 'SERVING', 'ambit.v1.PublisherService': 'NOT_SERVING', 'ambit.v1.OpsService': 'SERVING' });
    matcher = await start('matcher');
    await eventually(async () => (await services())['ambit.v1.PublisherService'] === 'SERVING', 'the Publisher service to serve again', 15_000);
  });

  it('Redis killed: the gateway and the matcher turn unready (503, naming the check) and every service NOT_SERVING; /healthz stays ok', async () => {
    await redis.stop();
    await eventually(async () => (await readyz(gateway)).status === 503, 'the gateway to turn unready', 15_000);
    const g = await readyz(gateway);
    assert.equal(g.body.ready, false);
    assert.equal(g.body.checks.hub.ok, false);
    await eventually(async () => (await readyz(matcher)).status === 503, 'the matcher to turn unready', 15_000);
    const m = await readyz(matcher);
    assert.equal(m.body.checks.matcher.ok, false);
    assert.match(m.body.checks.matcher.detail, /^0 of 1 matcher partitions connected/);
    await eventually(async () => (await services())[''] === 'NOT_SERVING', 'health to follow', 10_000);
    assert.deepEqual(Object.values(await services()), ['NOT_SERVING', 'NOT_SERVING', 'NOT_SERVING', 'NOT_SERVING']);
    assert.equal((await fetch(`http://127.0.0.1:${gateway.metricsPort}/healthz`)).status, 200);
  });
});
