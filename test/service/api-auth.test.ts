/**
 * Authentication and scopes on every RPC: a missing, malformed, forged or expired token is
 * UNAUTHENTICATED; a valid token without the service's scope is PERMISSION_DENIED; neither
 * changes anything. A device's identity always comes from its token: a device token may not
 * move another device through UpdateLocations without `location:any`.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { createHmac } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { create, toBinary } from '@bufbuild/protobuf';
import { PublishRequestSchema } from '../../api/gen/ambit/v1/publisher_pb.js';
import { after, before, describe, it } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { SCOPES, TokenAuthority } from '../../services/edge/auth.js';
import { type Clients, DeviceStream, type Init, Status, type TestServer, checkStatus, clientStream, expectStatus, meta, startTestServer, unary } from '../support/grpc.js';

const SECRET = 'test-secret-of-at-least-32-bytes!!';
const ALL = Object.values(SCOPES);

interface Rpc {
  name: string;
  scope: string;
  /** Runs the call with `md`; resolves with the response or the final status, rejects with a ServiceError. */
  call: (c: Clients, md: grpc.Metadata) => Promise<unknown>;
}

const event = { id: 'auth-e', position: { lat: 0, lon: 0 }, attributes: {} };

/** Every RPC with a harmless valid request. */
const RPCS: Rpc[] = [
  {
    name: 'DeviceService.Connect',
    scope: 'device',
    call: async (c, md) => {
      const s = new DeviceStream(c.device, md);
      s.send({ message: { case: 'hello', value: {} } });
      s.send({ message: { case: 'subscribe', value: { requestId: 'a', subscription: { id: 'auth-sub', filters: [{}] } } } });
      s.send({ message: { case: 'location', value: { lat: 1, lon: 1 } } });
      const end = await s.close();
      if (end.code !== Status.OK) throw Object.assign(new Error(end.details), end);
      return end;
    },
  },
  { name: 'DeviceService.UpdateLocation', scope: 'device', call: (c, md) => unary(c.device, 'updateLocation', { location: { lat: 1, lon: 1 } }, md) },
  { name: 'DeviceService.UpdateLocations', scope: 'device', call: (c, md) => clientStream(c.device, 'updateLocations', [{ updates: [{ location: { lat: 1, lon: 1 } }] }], md) },
  { name: 'DeviceService.ListSubscriptions', scope: 'device', call: (c, md) => unary(c.device, 'listSubscriptions', {}, md) },
  { name: 'PublisherService.Publish', scope: 'publish', call: (c, md) => unary(c.publisher, 'publish', { event }, md) },
  { name: 'PublisherService.BulkPublish', scope: 'publish', call: (c, md) => clientStream(c.publisher, 'bulkPublish', [{ events: [event] }], md) },
  { name: 'OpsService.GetStats', scope: 'ops', call: (c, md) => unary(c.ops, 'getStats', {}, md) },
  { name: 'OpsService.GetDeviceSubscriptions', scope: 'ops', call: (c, md) => unary(c.ops, 'getDeviceSubscriptions', { deviceId: 'dev-a' }, md) },
];

/**
 * One gRPC call sent by curl with the given authorization headers (Node's HTTP/2 client refuses to
 * send a header twice); the grpc-status the server answered (trailers-only or in the trailers),
 * or null when curl is missing and CI does not require it.
 */
async function curlCall(target: string, path: string, body: Uint8Array | null, authorizations: string[]): Promise<string | null> {
  const dir = mkdtempSync(join(tmpdir(), 'ambit-auth-'));
  const file = join(dir, 'body');
  if (body !== null) {
    const frame = Buffer.alloc(5 + body.length);
    frame.writeUInt32BE(body.length, 1);
    frame.set(body, 5);
    writeFileSync(file, frame);
  }
  try {
    const args = ['--http2-prior-knowledge', '-s', '-D', '-', '-o', '/dev/null', '-H', 'content-type: application/grpc', '-H', 'te: trailers'];
    for (const a of authorizations) args.push('-H', `authorization: ${a}`);
    // A refusal answers before the request is read: those requests end with their headers (no
    // body still being sent when the server ends the stream).
    if (body === null) args.push('-X', 'POST', `http://${target}${path}`);
    else args.push('--data-binary', `@${file}`, `http://${target}${path}`);
    let out: string;
    try {
      // Not execFileSync: the server under test runs in this process.
      out = (await execFileAsync('curl', args, { encoding: 'utf8', timeout: 30_000 })).stdout;
    } catch (err) {
      const e = err as { code?: string | number; stdout?: string };
      if (e.code === 'ENOENT' && process.env.AMBIT_REQUIRE_TOOLS !== '1') return null;
      throw err;
    }
    const m = /^grpc-status: (\d+)\s*$/im.exec(out);
    assert.ok(m !== null, `no grpc-status in ${JSON.stringify(out)}`);
    return m[1];
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const execFileAsync = promisify(execFile);

function mdRaw(value: string): grpc.Metadata {
  const md = new grpc.Metadata();
  md.set('authorization', value);
  return md;
}

const b64 = (o: unknown) => Buffer.from(JSON.stringify(o)).toString('base64url');

describe('api auth', () => {
  let srv: TestServer;
  let clients: Clients;
  let opsMd: grpc.Metadata;
  let baseline: unknown;

  async function snapshot(): Promise<unknown> {
    const s = await unary(clients.ops, 'getStats', {}, opsMd);
    const a = await unary(clients.ops, 'getDeviceSubscriptions', { deviceId: 'dev-a' }, opsMd);
    return [s.subscriptions, s.devices, s.eventsPublished, s.locationUpdates, a.subscriptions.length, a.location === undefined];
  }

  before(async () => {
    srv = await startTestServer({ tokenSecret: SECRET, dev: false });
    clients = srv.clients();
    opsMd = srv.meta('ops', ['ops']);
    baseline = await snapshot();
  });

  after(async () => {
    assert.deepEqual(srv.unexpectedErrors(), []);
    await srv.stop();
  });

  it('every RPC works with a token of its scope (the requests below are valid)', async () => {
    for (const rpc of RPCS) {
      // The probes act on dev-a; each runs on its own subject so they do not disturb the snapshot.
      await rpc.call(clients, srv.meta(`probe-${rpc.scope}`, [rpc.scope]));
    }
    baseline = await snapshot();
  });

  it('a repeated authorization header is UNAUTHENTICATED on every path, even when both are valid; nothing is applied', async (t) => {
    const ops = `Bearer ${srv.token('ops', ['ops'])}`;
    const pub = `Bearer ${srv.token('pub', ['publish'])}`;
    const dev = `Bearer ${srv.token('dev-a', ['device'])}`;
    const publish = toBinary(PublishRequestSchema, create(PublishRequestSchema, { event: { id: 'twice-authorized', position: { lat: 0, lon: 0 } } }));
    // One header: the call goes through (so the refusals below are the header's doing).
    const once = await curlCall(srv.target, '/ambit.v1.OpsService/GetStats', new Uint8Array(0), [ops]);
    if (once === null) return t.skip('no curl (Debian package curl)');
    assert.equal(once, '0');
    for (const [path, auths] of [
      ['/ambit.v1.OpsService/GetStats', [ops, ops]],
      ['/ambit.v1.PublisherService/Publish', [pub, ops]],
      ['/ambit.v1.PublisherService/Publish', [pub, pub]],
      ['/ambit.v1.DeviceService/Connect', [dev, dev]],
    ] as const) {
      assert.equal(await curlCall(srv.target, path, null, [...auths]), String(Status.UNAUTHENTICATED), `${path} with ${auths.length} authorization headers`);
    }
    assert.deepEqual(await snapshot(), baseline, 'nothing applied');
    // The same request with one header is taken (so the refusal above is the repeated header's).
    assert.equal(await curlCall(srv.target, '/ambit.v1.PublisherService/Publish', publish, [pub]), '0');
    baseline = await snapshot();
    // With device streams left to grpc-js too.
    const other = await startTestServer({ tokenSecret: SECRET, dev: false, deviceStreams: 'grpc-js' });
    try {
      const opsOther = `Bearer ${other.token('ops', ['ops'])}`;
      assert.equal(await curlCall(other.target, '/ambit.v1.OpsService/GetStats', null, [opsOther, opsOther]), String(Status.UNAUTHENTICATED), 'grpc-js device streams');
      assert.equal(await curlCall(other.target, '/ambit.v1.OpsService/GetStats', new Uint8Array(0), [opsOther]), '0');
    } finally {
      await other.stop();
    }
  });

  it('no token, a malformed header or token, a forged signature, another secret, an expired token: UNAUTHENTICATED', async () => {
    const good = new TokenAuthority(SECRET);
    const valid = good.issue({ subject: 'dev-a', scopes: ALL });
    const [h, p, sig] = valid.split('.');
    const forgedPayload = b64({ sub: 'dev-b', scope: ALL.join(' '), iat: 1, exp: 4_000_000_000 });
    // Correctly signed with the server's key, but naming another algorithm.
    const noneHeader = b64({ alg: 'none', typ: 'JWT' });
    const noneToken = `${noneHeader}.${p}.${createHmac('sha256', SECRET).update(`${noneHeader}.${p}`).digest('base64url')}`;
    const cases: [string, grpc.Metadata][] = [
      ['no authorization metadata', meta()],
      ['an empty value', mdRaw('')],
      ['not a bearer token', mdRaw(`Basic ${valid}`)],
      ['bearer without a token', mdRaw('Bearer ')],
      ['two parts', mdRaw('Bearer abc.def')],
      ['garbage', mdRaw('Bearer !!!')],
      ['a huge token', mdRaw(`Bearer ${'a'.repeat(13_000)}`)],
      ['a forged payload', mdRaw(`Bearer ${h}.${forgedPayload}.${sig}`)],
      ['a truncated signature', mdRaw(`Bearer ${h}.${p}.${sig.slice(0, -2)}`)],
      ['signed with another secret', meta(new TokenAuthority('another-secret-of-32-bytes-or-more').issue({ subject: 'dev-a', scopes: ALL }))],
      ['alg none', mdRaw(`Bearer ${noneToken}`)],
      ['expired (issued by a clock two days behind, valid one hour)', meta(new TokenAuthority(SECRET, () => Date.now() / 1000 - 2 * 86_400).issue({ subject: 'dev-a', scopes: ALL, ttlSeconds: 3600 }))],
      ['expired a second ago', meta(new TokenAuthority(SECRET, () => Date.now() / 1000 - 2).issue({ subject: 'dev-a', scopes: ALL, ttlSeconds: 1 }))],
    ];
    for (const rpc of RPCS) {
      for (const [label, md] of cases) {
        await expectStatus(rpc.call(clients, md), Status.UNAUTHENTICATED, undefined, `${rpc.name}: ${label}`);
      }
    }
    assert.deepEqual(await snapshot(), baseline);
    // The messages say why, without echoing the token.
    const err = await expectStatus(unary(clients.ops, 'getStats', {}, cases[11][1]), Status.UNAUTHENTICATED);
    assert.match(err.details, /expired/);
    const alg = await expectStatus(unary(clients.ops, 'getStats', {}, cases[10][1]), Status.UNAUTHENTICATED);
    assert.match(alg.details, /HS256/);
    const forged = await expectStatus(unary(clients.ops, 'getStats', {}, cases[7][1]), Status.UNAUTHENTICATED);
    assert.match(forged.details, /signature/);
    assert.ok(!forged.details.includes(sig));
  });

  it('a token without the service\'s scope is PERMISSION_DENIED on every RPC, and changes nothing', async () => {
    for (const rpc of RPCS) {
      const others = ALL.filter((s) => s !== rpc.scope && !(rpc.scope === 'device' && s === 'location:any'));
      const err = await expectStatus(rpc.call(clients, srv.meta('dev-a', others)), Status.PERMISSION_DENIED, undefined, rpc.name);
      assert.match(err.details, new RegExp(`lacks the ${rpc.scope} scope`));
      // location:any alone is not the device scope.
      if (rpc.scope === 'device') await expectStatus(rpc.call(clients, srv.meta('dev-a', ['location:any'])), Status.PERMISSION_DENIED, undefined, `${rpc.name} with location:any only`);
      await expectStatus(rpc.call(clients, srv.meta('dev-a', [])), Status.PERMISSION_DENIED, undefined, `${rpc.name} with no scopes`);
    }
    assert.deepEqual(await snapshot(), baseline);
  });

  it('a device token cannot move another device through UpdateLocations without location:any', async () => {
    const own = srv.meta('dev-a', ['device']);
    const where = async (d: string) => {
      const l = (await unary(clients.ops, 'getDeviceSubscriptions', { deviceId: d }, opsMd)).location;
      return l === undefined ? null : [l.lat, l.lon];
    };
    await expectStatus(clientStream(clients.device, 'updateLocations', [{ updates: [{ deviceId: 'dev-b', location: { lat: 5, lon: 5 } }] }], own), Status.PERMISSION_DENIED, 'updates[0].device_id');
    // One foreign entry rejects the whole message, its own entries included.
    await expectStatus(
      clientStream(clients.device, 'updateLocations', [{ updates: [{ location: { lat: 6, lon: 6 } }, { deviceId: 'dev-a', location: { lat: 7, lon: 7 } }, { deviceId: 'dev-b', location: { lat: 8, lon: 8 } }] }], own),
      Status.PERMISSION_DENIED,
      'updates[2].device_id',
    );
    assert.equal(await where('dev-a'), null);
    assert.equal(await where('dev-b'), null);
    assert.deepEqual(await snapshot(), baseline);
    // Its own id, spelled out or left empty, is fine.
    const res = await clientStream(clients.device, 'updateLocations', [{ updates: [{ location: { lat: 6, lon: 6 } }, { deviceId: 'dev-a', location: { lat: 7, lon: 7 } }] }], own);
    assert.equal(res.accepted, 2n);
    assert.deepEqual(await where('dev-a'), [7, 7]);
    // With location:any, a fleet back end moves anyone; empty still means its own device.
    const fleet = srv.meta('fleet-1', ['device', 'location:any']);
    const r2 = await clientStream(clients.device, 'updateLocations', [{ updates: [{ deviceId: 'dev-b', location: { lat: 8, lon: 8 } }, { location: { lat: 9, lon: 9 } }] }], fleet);
    assert.equal(r2.accepted, 2n);
    assert.deepEqual(await where('dev-b'), [8, 8]);
    assert.deepEqual(await where('fleet-1'), [9, 9]);
    baseline = await snapshot();
  });

  it('a device\'s identity is its token\'s subject on every device RPC', async () => {
    const { stream, welcome } = await DeviceStream.open(clients, srv.token('dev-c', ['device']));
    assert.equal(welcome.deviceId, 'dev-c');
    await stream.subscribeOk({ id: 'only-mine', filters: [{}] });
    stream.move(3, 3);
    await stream.sync();
    await unary(clients.device, 'updateLocation', { location: { lat: 4, lon: 4 } }, srv.meta('dev-d', ['device']));
    const c = await unary(clients.ops, 'getDeviceSubscriptions', { deviceId: 'dev-c' }, opsMd);
    assert.deepEqual([c.subscriptions.map((s: Init) => s.id), c.location.lat, c.connected], [['only-mine'], 3, true]);
    const d = await unary(clients.ops, 'getDeviceSubscriptions', { deviceId: 'dev-d' }, opsMd);
    assert.deepEqual([d.subscriptions.length, d.location.lat, d.connected], [0, 4, false]);
    assert.deepEqual((await unary(clients.device, 'listSubscriptions', {}, srv.meta('dev-c', ['device']))).subscriptions.map((s: Init) => s.id), ['only-mine']);
    assert.deepEqual((await unary(clients.device, 'listSubscriptions', {}, srv.meta('dev-d', ['device']))).subscriptions, []);
    // dev-d cannot remove dev-c's subscription: ids are looked up under the caller only.
    const { stream: ds } = await DeviceStream.open(clients, srv.token('dev-d', ['device']));
    checkStatus({ code: (await ds.unsubscribe('only-mine')).code, details: '' }, Status.NOT_FOUND);
    ds.cancel();
    stream.cancel();
  });

  it('an open device stream ends UNAUTHENTICATED when its token expires', async () => {
    const shortLived = new TokenAuthority(SECRET).issue({ subject: 'dev-e', scopes: ['device'], ttlSeconds: 1 });
    const { stream } = await DeviceStream.open(clients, shortLived);
    const { exp } = JSON.parse(Buffer.from(shortLived.split('.')[1], 'base64url').toString('utf8')) as { exp: number };
    // The gateway's expiry timer runs on the wall clock (it takes no injected clock): the stream
    // ends by itself at expiry, never before it; end() bounds the wait (a failure timeout).
    const end = await stream.end(10_000);
    assert.equal(end.code, Status.UNAUTHENTICATED);
    assert.match(end.details, /token has expired/);
    assert.ok(Date.now() >= exp * 1000, 'not before the token expired');
  });
});

describe('token authority: expiry on an injected clock', () => {
  it('a token is valid until its expiry second and expired from it on', () => {
    let now = 1_700_000_000.25; // seconds
    const authority = new TokenAuthority(SECRET, () => now);
    const token = authority.issue({ subject: 'dev-t', scopes: ['device'], ttlSeconds: 60 });
    const p = authority.verify(token);
    assert.equal(p.expiresAt, 1_700_000_060, 'expiry = whole issue second + ttl');
    now = 1_700_000_059.999;
    assert.equal(authority.verify(token).subject, 'dev-t');
    now = 1_700_000_060;
    assert.throws(() => authority.verify(token), /token has expired/);
    // An authority on the real clock sees this token (issued in 2023) as long expired.
    assert.throws(() => new TokenAuthority(SECRET).verify(token), /token has expired/);
  });
});

describe('token authority: token ids', () => {
  it('are 16 base64url characters, distinct, and never begin with "-" (a command line would read one as an option)', () => {
    const authority = new TokenAuthority(SECRET);
    const ids = new Set<string>();
    // At 1 in 64 ids beginning with '-' before, 3000 ids miss that with odds of about 1e-21.
    for (let i = 0; i < 3000; i++) {
      const id = authority.verify(authority.issue({ subject: 'd', scopes: ['device'] })).tokenId;
      assert.match(id, /^[A-Za-z0-9_][A-Za-z0-9_-]{15}$/);
      ids.add(id);
    }
    assert.equal(ids.size, 3000);
  });
});
