/**
 * Tenants (AMBIT_TENANT_CLAIM, docs/service.md "Tenants") over real gRPC and WebSocket clients:
 * two tenants and the default one, each with a device called "alice" in the same place,
 * subscribed to everything. A publisher reaches only its own tenant's devices, event ids are its
 * own (the same id in two tenants is no duplicate), the reserved tags never show and cannot be
 * sent, and a tenant's operators see and manage only their tenant's devices.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { SCOPES } from '../../services/edge/auth.js';
import { type Clients, DeviceStream, type Init, Status, type TestServer, clientStream, expectStatus, meta, startTestServer, unary } from '../support/grpc.js';
import { WsDevice } from '../support/ws-device.js';
import { Op } from '../../api/gen/ambit/v1/types_pb.js';
import { checkConfig, configFromEnv, parseTenantLimits } from '../../services/process/config.js';

const HERE = { lat: 45.46, lon: 9.19 };
const event = (id: string, tags: string[] = []): Init => ({ id, position: HERE, attributes: {}, tags });

describe('tenants', () => {
  let srv: TestServer;
  let clients: Clients;
  const tok = (subject: string, scopes: string[], tenant?: string) => srv.server.authority!.issue({ subject, scopes, ...(tenant === undefined ? {} : { tenant }) });
  const md = (subject: string, scopes: string[], tenant?: string) => meta(tok(subject, scopes, tenant));

  before(async () => {
    srv = await startTestServer({ tenantClaim: 'tenant', webPort: 0 });
    clients = srv.clients();
  });

  after(async () => {
    assert.deepEqual(srv.unexpectedErrors(), []);
    clients.close();
    await srv.stop();
  });

  it('a publisher reaches only its tenant\'s devices; ids and tags are each tenant\'s own', async () => {
    const open = async (tenant?: string) => {
      const { stream, welcome } = await DeviceStream.open(clients, tok('alice', [SCOPES.device], tenant));
      await stream.subscribeOk({ id: 'all', filters: [{ tags: ['news'] }] });
      stream.move(HERE.lat, HERE.lon);
      await stream.sync();
      return { stream, welcome };
    };
    const acme = await open('acme');
    const globex = await open('globex');
    const plain = await open();
    assert.equal(acme.welcome.deviceId, 'acme/alice');
    assert.equal(plain.welcome.deviceId, 'alice');
    // A WebSocket device of acme too.
    const ws = await WsDevice.open(srv.server.webPort!, { token: tok('bob', [SCOPES.device], 'acme') });
    ws.send({ message: { case: 'hello', value: { resumeToken: '' } } });
    await ws.next('welcome');
    ws.send({ message: { case: 'subscribe', value: { requestId: 'r', subscription: { id: 'all', filters: [{}] } } } });
    await ws.next('reply');

    const publish = (id: string, tenant?: string) => unary(clients.publisher, 'publish', { event: event(id, ['news']) }, md('pub', [SCOPES.publish], tenant)) as Promise<Init>;
    const a = await publish('e1', 'acme');
    assert.deepEqual([a.eventId, a.reached, a.duplicate], ['e1', 2n, false], 'acme: alice and bob');
    const g = await publish('e1', 'globex');
    assert.deepEqual([g.eventId, g.reached, g.duplicate], ['e1', 1n, false], 'the same id in another tenant is another event');
    const p = await publish('e1');
    assert.deepEqual([p.eventId, p.reached], ['e1', 1n], 'the default tenant has its own too');
    assert.equal(((await publish('e1', 'acme')) as Init).duplicate, true, 'a retry within the tenant is a duplicate');

    for (const [name, d] of [['acme', acme], ['globex', globex], ['default', plain]] as const) {
      const [n] = await d.stream.notifications(1);
      assert.deepEqual([n.event?.id, n.event?.tags], ['e1', ['news']], `${name}: the event as its publisher sent it`);
      await d.stream.sync();
      await d.stream.expectQuiet('notification');
    }
    await ws.until(() => ws.notifications().length === 1, 'bob\'s notification');
    const wn = ws.notifications()[0];
    assert.ok(wn.message.case === 'notification');
    assert.deepEqual([wn.message.value.event?.id, wn.message.value.event?.tags], ['e1', ['news']]);
    // Listed without the reserved tag.
    const listed = (await unary(clients.device, 'listSubscriptions', {}, md('alice', [SCOPES.device], 'acme'))) as Init;
    assert.deepEqual(listed.subscriptions.map((s: Init) => s.filters[0].tags), [['news']]);
    for (const d of [acme, globex, plain]) d.stream.cancel();
    ws.halfClose();
    await ws.ended();
  });

  it('a pattern subscription matches its tenant\'s events only', async () => {
    const { stream } = await DeviceStream.open(clients, tok('watcher', [SCOPES.device], 'acme'));
    stream.move(HERE.lat, HERE.lon);
    const kind = (k: string) => ({ constraints: [{ name: 'kind', op: Op.EQ, value: { kind: { case: 'text', value: k } } }] });
    const pattern = { steps: [{ name: 'smoke', filter: { ...kind('smoke'), area: { radiusM: 500 } } }, { name: 'heat', filter: kind('heat'), withinMs: 60_000 }] };
    assert.equal((await stream.subscribe({ id: 'fire', pattern })).code, Status.OK);
    await stream.sync();
    const ev = (id: string, k: string, s: number): Init => ({ id, position: HERE, attributes: { kind: { kind: { case: 'text', value: k } } }, time: { seconds: BigInt(s), nanos: 0 } });
    const pub = (e: Init, tenant: string) => unary(clients.publisher, 'publish', { event: e }, md('pub2', [SCOPES.publish], tenant));
    // Times after the events published before (the node's patterns take events in time order).
    const t0 = Math.floor(Date.now() / 1000) + 60;
    await pub(ev('h-g', 'heat', t0), 'globex');
    await pub(ev('s-g', 'smoke', t0 + 10), 'globex');
    await pub(ev('h-a', 'heat', t0 + 20), 'acme');
    await pub(ev('s-a', 'smoke', t0 + 30), 'acme');
    const [n] = await stream.notifications(1);
    assert.deepEqual(n.match?.steps.map((x) => x.event?.id), ['s-a', 'h-a']);
    await stream.sync();
    await stream.expectQuiet('notification');
    stream.cancel();
  });

  it('tags beginning with tenant: are refused from clients, naming the field', async () => {
    await expectStatus(unary(clients.publisher, 'publish', { event: event('x', ['ok', 'Tenant:acme']) }, md('pub', [SCOPES.publish], 'globex')), Status.INVALID_ARGUMENT, 'event.tags[1]');
    const { stream } = await DeviceStream.open(clients, tok('carol', [SCOPES.device], 'globex'));
    const r = await stream.subscribe({ id: 's', filters: [{ tags: ['tenant:acme'] }] });
    assert.deepEqual([r.code, r.field], [Status.INVALID_ARGUMENT, 'subscribe.subscription.filters[0].tags[0]']);
    stream.cancel();
  });

  it('a tenant\'s operators see and manage only their tenant\'s devices; the deployment\'s see all', async () => {
    const acmeOps = md('ops', [SCOPES.ops], 'acme');
    const all = md('root', [SCOPES.ops]);
    const ids = async (m: grpc.Metadata, prefix = '') => ((await unary(clients.ops, 'listDevices', { pageSize: 100, idPrefix: prefix }, m)) as Init).devices.map((d: Init) => d.deviceId).sort();
    assert.deepEqual(await ids(acmeOps), ['alice', 'bob', 'watcher']);
    assert.deepEqual(await ids(md('ops', [SCOPES.ops], 'globex')), ['alice'], 'carol holds no subscription');
    assert.deepEqual(await ids(all), ['acme/alice', 'acme/bob', 'acme/watcher', 'alice', 'globex/alice']);
    const info = (await unary(clients.ops, 'getDeviceSubscriptions', { deviceId: 'alice' }, acmeOps)) as Init;
    assert.deepEqual([info.subscriptions.length, info.subscriptions[0].filters[0].tags], [1, ['news']]);
    // Managing: acme's operators delete acme's alice's subscription, not the others'.
    await unary(clients.ops, 'deleteSubscription', { deviceId: 'alice', subscriptionId: 'all' }, acmeOps);
    assert.equal(((await unary(clients.ops, 'getDeviceSubscriptions', { deviceId: 'acme/alice' }, all)) as Init).subscriptions.length, 0);
    assert.equal(((await unary(clients.ops, 'getDeviceSubscriptions', { deviceId: 'globex/alice' }, all)) as Init).subscriptions.length, 1);
    // Statistics of the tenant: its devices holding subscriptions (alice has none left: bob and
    // watcher), their subscriptions, what its publishers did (e1 twice, h-a, s-a).
    const st = (await unary(clients.ops, 'getStats', {}, acmeOps)) as Init;
    assert.deepEqual([st.mode, st.devices, st.subscriptions, st.eventsPublished, st.engine], ['tenant', 2n, 2n, 4n, '']);
    assert.ok(st.notifications >= 3n);
    const metrics = await srv.metrics();
    assert.match(metrics, /^ambit_tenant_events_published_total\{[^}]*tenant="acme"[^}]*\} 4$/m);
    assert.match(metrics, /^ambit_tenant_events_published_total\{[^}]*tenant="globex"[^}]*\} 3$/m);
    // The deployment's calls are the deployment operators'.
    assert.equal(((await unary(clients.ops, 'getStats', {}, all)) as Init).mode, 'embedded');
    await expectStatus(unary(clients.ops, 'drainGateway', {}, acmeOps), Status.PERMISSION_DENIED);
    await expectStatus(unary(clients.ops, 'revokeTokens', { tokenId: 'abc' }, acmeOps), Status.PERMISSION_DENIED);
    // Revoking by subject revokes that subject of the operator's tenant only.
    await unary(clients.ops, 'revokeTokens', { subject: 'pub' }, acmeOps);
    await expectStatus(unary(clients.publisher, 'publish', { event: event('after') }, md('pub', [SCOPES.publish], 'acme')), Status.UNAUTHENTICATED);
    assert.equal(((await unary(clients.publisher, 'publish', { event: event('after') }, md('pub', [SCOPES.publish], 'globex'))) as Init).eventId, 'after');
  });

  it('the default tenant\'s ids hold no /, so none is ever one of a tenant\'s; a tenant\'s fleet moves its own devices', async () => {
    await expectStatus(unary(clients.ops, 'listDevices', {}, md('acme/alice', [SCOPES.ops])), Status.UNAUTHENTICATED);
    await expectStatus(unary(clients.publisher, 'publish', { event: event('acme/e9') }, md('pub', [SCOPES.publish])), Status.INVALID_ARGUMENT, 'event.id');
    const fleet = md('trucks', [SCOPES.device, SCOPES.locationAny], 'globex');
    const r = await clientStream(clients.device, 'updateLocations', [{ updates: [{ deviceId: 'alice', location: { lat: 10, lon: 20 } }] }], fleet);
    assert.equal((r as Init).accepted, 1n);
    const where = async (id: string) => ((await unary(clients.ops, 'getDeviceSubscriptions', { deviceId: id }, md('root', [SCOPES.ops]))) as Init).location?.lat;
    assert.equal(await where('globex/alice'), 10, "the fleet's tenant's alice moved");
    assert.notEqual(await where('acme/alice'), 10);
    assert.notEqual(await where('alice'), 10);
    await expectStatus(clientStream(clients.device, 'updateLocations', [{ updates: [{ deviceId: 'x/y', location: { lat: 1, lon: 2 } }] }], md('trucks', [SCOPES.device, SCOPES.locationAny])), Status.INVALID_ARGUMENT, 'updates[0].device_id');
  });

  it('a malformed tenant claim is a malformed token', async () => {
    assert.throws(() => tok('x', [SCOPES.ops], 'Acme'), /tenant must match/);
    // A token with a bad tenant claim, signed with the deployment's secret by hand.
    const { createHmac } = await import('node:crypto');
    const b64 = (o: unknown) => Buffer.from(JSON.stringify(o)).toString('base64url');
    const body = `${b64({ alg: 'HS256', typ: 'JWT' })}.${b64({ sub: 'x', scope: 'ops', exp: Math.floor(Date.now() / 1000) + 600, tenant: 'a/b' })}`;
    const secret = srv.server.authority!.secretForDev();
    const bad = `${body}.${createHmac('sha256', secret).update(body).digest('base64url')}`;
    const err = await expectStatus(unary(clients.ops, 'listDevices', {}, meta(bad)), Status.UNAUTHENTICATED);
    assert.match(err.details, /tenant must be a tenant name/);
  });
});

describe('tenants: limits of their own (AMBIT_TENANT_LIMITS)', () => {
  let srv: TestServer;
  let clients: Clients;

  before(async () => {
    // A clock that stands still: a bucket holds what it holds, whatever the pace.
    const clock = Date.now();
    srv = await startTestServer({ tenantClaim: 'tenant', tenantLimits: { acme: { eventsPerS: 2 }, '': { eventsPerS: 1 } } }, { now: () => clock });
    clients = srv.clients();
  });

  after(async () => {
    clients.close();
    await srv.stop();
  });

  it('a tenant\'s own limits apply to it; others keep the deployment\'s (here none)', async () => {
    const pub = (tenant: string | undefined, id: string) => unary(clients.publisher, 'publish', { event: event(id) }, meta(srv.server.authority!.issue({ subject: 'pub', scopes: [SCOPES.publish], ...(tenant === undefined ? {} : { tenant }) })));
    await pub('acme', 'a1');
    await pub('acme', 'a2');
    await expectStatus(pub('acme', 'a3'), Status.RESOURCE_EXHAUSTED);
    await pub(undefined, 'd1');
    await expectStatus(pub(undefined, 'd2'), Status.RESOURCE_EXHAUSTED);
    for (let i = 0; i < 5; i++) await pub('globex', `g${i}`);
  });

  it('configuration: JSON inline or in a file; names, limits and values checked', () => {
    assert.deepEqual({ ...parseTenantLimits('{"acme": {"eventsPerS": 5, "burstS": 2}, "": {"locationsPerS": 1}}') }, { acme: { eventsPerS: 5, burstS: 2 }, '': { locationsPerS: 1 } });
    assert.throws(() => parseTenantLimits('{"Acme": {}}'), /not a tenant name/);
    assert.throws(() => parseTenantLimits('{"acme": {"eventsPerSecond": 1}}'), /is not a limit/);
    assert.throws(() => parseTenantLimits('{"acme": {"burstS": 0}}'), /burstS must be a number > 0/);
    assert.throws(() => parseTenantLimits('[1]'), /must be a JSON object/);
    assert.throws(() => checkConfig({ ...configFromEnv({ AMBIT_TENANT_LIMITS: '{"acme": {"eventsPerS": 1}}' }), dev: true }), /needs AMBIT_TENANT_CLAIM/);
    assert.deepEqual({ ...configFromEnv({ AMBIT_TENANT_CLAIM: 'tenant', AMBIT_TENANT_LIMITS: '{"acme": {"eventsPerS": 1}}' }).tenantLimits }, { acme: { eventsPerS: 1 } });
  });
});
