/**
 * Rate limits (services/edge/rate-limits.ts, docs/service.md "Rate limits") over real gRPC calls:
 * a device's locations and subscription changes, a publisher's events; RESOURCE_EXHAUSTED with
 * the wait (the `ambit-retry-after-ms` trailer, a google.rpc.RetryInfo, a reply's
 * `retry_after_ms`); refills on an injected clock, so every count is exact and nothing sleeps.
 * In Redis mode two gateways share a publisher's bucket.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { fromBinary } from '@bufbuild/protobuf';
import { anyUnpack } from '@bufbuild/protobuf/wkt';
import { RetryInfoSchema } from '../../api/gen/google/rpc/error_details_pb.js';
import { StatusSchema } from '../../api/gen/google/rpc/status_pb.js';
import { file_google_rpc_error_details } from '../../api/gen/google/rpc/error_details_pb.js';
import { createRegistry } from '@bufbuild/protobuf';
import { NO_RATE_LIMITS, type RateLimits } from '../../services/edge/rate-limits.js';
import { AmbitError, AmbitPublisher, StatusCode } from '../../sdk/index.js';
import { type Clients, DeviceStream, type Init, Status, type TestServer, clientStream, startTestServer, unary } from '../support/grpc.js';
import { type RedisServer, redisServerMissing, startRedisServer } from '../support/redis-server.js';

const limits = (l: Partial<RateLimits>): RateLimits => ({ ...NO_RATE_LIMITS, ...l });
const event = (id: string): Init => ({ id, position: { lat: 45, lon: 9 }, attributes: {} });

/** The retry delay a failed call carried: the trailer, and the google.rpc.RetryInfo beside it (ms). */
function retryOf(err: unknown): { trailer: number; info: number } {
  const md = (err as grpc.ServiceError).metadata;
  const trailer = Number(md.get('ambit-retry-after-ms')[0]);
  const status = fromBinary(StatusSchema, md.get('grpc-status-details-bin')[0] as Buffer);
  const info = anyUnpack(status.details[0], createRegistry(file_google_rpc_error_details)) as { $typeName: string; retryDelay?: { seconds: bigint; nanos: number } };
  assert.equal(info.$typeName, RetryInfoSchema.typeName);
  return { trailer, info: Number(info.retryDelay!.seconds) * 1000 + info.retryDelay!.nanos / 1e6 };
}

async function refused(p: Promise<unknown>): Promise<grpc.ServiceError> {
  try {
    await p;
  } catch (err) {
    assert.equal((err as grpc.ServiceError).code, Status.RESOURCE_EXHAUSTED, String(err));
    return err as grpc.ServiceError;
  }
  assert.fail('expected RESOURCE_EXHAUSTED');
}

describe('rate limits (embedded, an injected clock)', () => {
  let clock = Date.now();
  const now = () => clock;
  let srv: TestServer;
  let clients: Clients;

  before(async () => {
    srv = await startTestServer({ rateLimits: limits({ locationsPerS: 5, subscriptionChangesPerMin: 3, eventsPerS: 10, burstS: 1 }) }, { now });
    clients = srv.clients();
  });

  after(async () => {
    assert.deepEqual(srv.unexpectedErrors(), []);
    clients.close();
    await srv.stop();
  });

  const stats = async () => (await unary(clients.ops, 'getStats', {}, srv.meta('ops', ['ops']))) as Init;
  const metric = async (limit: string) => Number(new RegExp(`^ambit_rate_limited_total\\{[^}]*limit="${limit}"[^}]*\\} (\\d+)`, 'm').exec(await srv.metrics())?.[1] ?? 0);

  it('a device\'s locations: past its rate they are dropped and said once per wait; the bucket refills; the unary call shares it', async () => {
    const { stream } = await DeviceStream.open(clients, srv.token('lim-dev', ['device']));
    const before = (await stats()).locationUpdates as bigint;
    for (let i = 1; i <= 12; i++) stream.move(45 + i / 1000, 9);
    // One reply for the seven dropped: no request id, RESOURCE_EXHAUSTED, one token's wait (200 ms at 5/s).
    const r = await stream.next('reply');
    assert.deepEqual([r.requestId, r.status?.code, r.status?.retryAfterMs], ['', Status.RESOURCE_EXHAUSTED, 200]);
    assert.match(r.status?.message ?? '', /5 location updates\/s/);
    // (sync is a subscription change: within this device's 3 a minute)
    await stream.sync();
    assert.deepEqual(stream.pending('reply'), [], 'said once');
    assert.equal((await stats()).locationUpdates as bigint, before + 5n);
    const info = (await unary(clients.ops, 'getDeviceSubscriptions', { deviceId: 'lim-dev' }, srv.meta('ops', ['ops']))) as Init;
    assert.equal(info.location.lat, 45.005, 'the fifth is the last applied');
    assert.equal(await metric('locations'), 7);
    // A second later the bucket is full again: five more, the unary call drawing on the same bucket.
    clock += 1000;
    const md = srv.meta('lim-dev', ['device']);
    for (let i = 0; i < 5; i++) await unary(clients.device, 'updateLocation', { location: { lat: 46, lon: 9 } }, md);
    const err = await refused(unary(clients.device, 'updateLocation', { location: { lat: 46, lon: 9 } }, md));
    assert.deepEqual(retryOf(err), { trailer: 200, info: 200 });
    // UpdateLocations of its own device draws on the same bucket (a fleet's, with location:any, does not).
    clock += 1000;
    const own = await refused(clientStream(clients.device, 'updateLocations', [{ updates: Array.from({ length: 5 }, () => ({ location: { lat: 47, lon: 9 } })) }, { updates: [{ location: { lat: 48, lon: 9 } }] }], md));
    assert.deepEqual([own.metadata.get('ambit-message')[0], own.metadata.get('ambit-applied')[0]], ['1', '5']);
    assert.equal(((await clientStream(clients.device, 'updateLocations', [{ updates: Array.from({ length: 50 }, () => ({ deviceId: 'lim-dev', location: { lat: 47, lon: 9 } })) }], srv.meta('fleet', ['device', 'location:any']))) as Init).accepted, 50n);
    stream.cancel();
  });

  it('a device\'s subscription changes: a minute\'s worth, then RESOURCE_EXHAUSTED in request order with the wait', async () => {
    const { stream } = await DeviceStream.open(clients, srv.token('lim-subs', ['device']));
    for (const id of ['a', 'b', 'c']) assert.equal((await stream.subscribe({ id, filters: [{}] })).code, Status.OK);
    const d = await stream.subscribe({ id: 'd', filters: [{}] });
    assert.deepEqual([d.code, d.retryAfterMs], [Status.RESOURCE_EXHAUSTED, 20_000]);
    assert.match(d.message, /3 times a minute/);
    assert.equal((await stream.unsubscribe('a')).code, Status.RESOURCE_EXHAUSTED);
    clock += 20_000;
    assert.equal((await stream.unsubscribe('a')).code, Status.OK);
    assert.equal((await stream.subscribe({ id: 'd', filters: [{}] })).code, Status.RESOURCE_EXHAUSTED);
    stream.cancel();
  });

  it('a publisher\'s events: Publish and BulkPublish share its bucket; a refused message is named with what was applied; other publishers are not held back', async () => {
    clock += 60_000; // every bucket full
    const pub = srv.meta('lim-pub', ['publish']);
    for (let i = 0; i < 4; i++) await unary(clients.publisher, 'publish', { event: event(`lp-${i}`) }, pub);
    // 6 tokens left: messages of 3 and 3 pass, the third (4 events) is refused whole.
    const err = await refused(clientStream(clients.publisher, 'bulkPublish', [{ events: [event('lb-1'), event('lb-2'), event('lb-3')] }, { events: [event('lb-4'), event('lb-5'), event('lb-6')] }, { events: [event('lb-7'), event('lb-8'), event('lb-9'), event('lb-10')] }], pub));
    const md = (err as grpc.ServiceError).metadata;
    assert.deepEqual([md.get('ambit-message')[0], md.get('ambit-applied')[0]], ['2', '6']);
    assert.deepEqual(retryOf(err), { trailer: 400, info: 400 });
    // Another publisher has a bucket of its own.
    await unary(clients.publisher, 'publish', { event: event('other-1') }, srv.meta('lim-other', ['publish']));
    // The SDK: AmbitError with the wait, not stored (safe to publish again).
    const sdk = new AmbitPublisher(srv.target, srv.token('lim-pub', ['publish']));
    try {
      await assert.rejects(sdk.publish({ id: 'lp-sdk', lat: 45, lon: 9 }), (e: unknown) => e instanceof AmbitError && e.code === StatusCode.RESOURCE_EXHAUSTED && e.retryAfterMs === 100 && e.publishOutcome === 'not-stored');
      clock += 100;
      assert.equal((await sdk.publish({ id: 'lp-sdk', lat: 45, lon: 9 })).eventId, 'lp-sdk');
    } finally {
      sdk.close();
    }
    assert.equal(await metric('events'), 2);
  });
});

describe('rate limits (Redis: two gateways share a publisher\'s bucket)', { skip: redisServerMissing() ?? false }, () => {
  let redis: RedisServer;
  const servers: TestServer[] = [];

  before(async () => {
    redis = await startRedisServer();
    // 10 tokens refilled one per 100 s: nothing refills during the test, so the counts are exact.
    const rateLimits = limits({ eventsPerS: 0.01, burstS: 1000 });
    const secret = 'rate-limit-test-secret-0123456789abcdef';
    servers.push(await startTestServer({ redisUrl: redis.url, redisPrefix: 'rl:', tokenSecret: secret, dev: false, rateLimits }));
    servers.push(await startTestServer({ redisUrl: redis.url, redisPrefix: 'rl:', tokenSecret: secret, dev: false, role: 'gateway', rateLimits }));
  });

  after(async () => {
    for (const s of servers.reverse()) await s.stop();
    await redis?.stop();
  });

  it('events through either gateway draw on one bucket', async () => {
    const [a, b] = servers;
    const ca = a.clients();
    const cb = b.clients();
    const md = a.meta('shared-pub', ['publish']);
    try {
      for (let i = 0; i < 7; i++) await unary(ca.publisher, 'publish', { event: event(`sa-${i}`) }, md, { deadline: Date.now() + 10_000 });
      for (let i = 0; i < 3; i++) await unary(cb.publisher, 'publish', { event: event(`sb-${i}`) }, md, { deadline: Date.now() + 10_000 });
      const err = await refused(unary(cb.publisher, 'publish', { event: event('sb-over') }, md));
      assert.ok(retryOf(err).trailer > 90_000, 'a token takes 100 s');
      await refused(unary(ca.publisher, 'publish', { event: event('sa-over') }, md));
    } finally {
      ca.close();
      cb.close();
    }
  });
});
