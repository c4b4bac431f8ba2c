/**
 * Tokens of an identity provider (services/edge/jwks.ts, auth.ts): keys from a JWK Set file or
 * URL, every asymmetric algorithm family, the algorithm rules (a key serves its own type only, no
 * "none", no HMAC with a public key), aud / iss / nbf / exp with a clock skew, subject and scopes
 * from configured claims, key rotation, and real gRPC calls and device streams with such tokens.
 */
import assert from 'node:assert/strict';
import { type KeyObject, constants, createHmac, generateKeyPairSync, sign } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { type Server, createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { AuthError, TokenAuthority } from '../../services/edge/auth.js';
import { KeySet, parseJwks } from '../../services/edge/jwks.js';
import { DeviceStream, Status, type TestServer, expectStatus, meta, startTestServer, unary } from '../support/grpc.js';

const SECRET = 'a-gateway-secret-of-at-least-32-bytes!!';
const b64 = (o: unknown): string => Buffer.from(JSON.stringify(o)).toString('base64url');

interface Pair {
  kid: string;
  alg: string;
  priv: KeyObject;
  jwk: Record<string, unknown>;
}

function pair(kid: string, alg: string, gen: () => { privateKey: KeyObject; publicKey: KeyObject }, pin = true): Pair {
  const { privateKey, publicKey } = gen();
  return { kid, alg, priv: privateKey, jwk: { ...(publicKey.export({ format: 'jwk' }) as Record<string, unknown>), kid, use: 'sig', ...(pin ? { alg } : {}) } };
}

const RSA = pair('rsa-1', 'RS256', () => generateKeyPairSync('rsa', { modulusLength: 2048 }));
const PSS = pair('rsa-pss', 'PS256', () => generateKeyPairSync('rsa', { modulusLength: 2048 }));
const EC256 = pair('ec-256', 'ES256', () => generateKeyPairSync('ec', { namedCurve: 'P-256' }));
const EC384 = pair('ec-384', 'ES384', () => generateKeyPairSync('ec', { namedCurve: 'P-384' }));
const ED = pair('ed-1', 'EdDSA', () => generateKeyPairSync('ed25519'));
const ALL = [RSA, PSS, EC256, EC384, ED];

/** A JWT signed with `key` under `alg` (header fields and claims as given). */
function jwt(alg: string, key: KeyObject, header: Record<string, unknown>, claims: Record<string, unknown>): string {
  const data = `${b64({ alg, typ: 'JWT', ...header })}.${b64(claims)}`;
  const hash = alg === 'EdDSA' ? null : `sha${alg.slice(2)}`;
  const opts = alg.startsWith('PS') ? { padding: constants.RSA_PKCS1_PSS_PADDING, saltLength: constants.RSA_PSS_SALTLEN_DIGEST } : alg.startsWith('ES') ? { dsaEncoding: 'ieee-p1363' as const } : {};
  return `${data}.${sign(hash, Buffer.from(data), { key, ...opts }).toString('base64url')}`;
}

const NOW = 1_800_000_000;
const claims = (over: Record<string, unknown> = {}): Record<string, unknown> => ({ sub: 'dev-j', scope: 'device ops', iat: NOW - 10, exp: NOW + 600, aud: 'ambit', iss: 'https://id.example', ...over });
const tokenOf = (p: Pair, over: Record<string, unknown> = {}, header: Record<string, unknown> = { kid: p.kid }): string => jwt(p.alg, p.priv, header, claims(over));

describe('identity provider tokens', () => {
  const dir = mkdtempSync(join(tmpdir(), 'ambit-jwks-'));
  const file = join(dir, 'jwks.json');
  writeFileSync(file, JSON.stringify({ keys: ALL.map((p) => p.jwk) }));
  let keys: KeySet;
  let now = NOW;
  let auth: TokenAuthority;

  before(async () => {
    keys = await KeySet.load(file, { refreshS: 0 }, () => now);
    auth = new TokenAuthority(SECRET, () => now, { keys, audience: ['ambit'], issuer: ['https://id.example'], clockSkewS: 30 });
  });
  after(() => {
    keys.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const refused = (token: string, why: RegExp): void => {
    assert.throws(() => auth.verify(token), (e: unknown) => e instanceof AuthError && e.code === 'UNAUTHENTICATED' && why.test(e.message));
  };

  it('every algorithm family verifies with its key; the gateway\'s own tokens still do', () => {
    for (const p of ALL) {
      const pr = auth.verify(tokenOf(p));
      assert.equal(pr.subject, 'dev-j', p.alg);
      assert.deepEqual([...pr.scopes].sort(), ['device', 'ops'], p.alg);
    }
    // The gateway's own tokens: no audience or issuer asked of them (the secret vouches).
    const own = new TokenAuthority(SECRET, () => now);
    assert.equal(auth.verify(own.issue({ subject: 'mine', scopes: ['publish'] })).subject, 'mine');
  });

  it('the algorithm rules: signatures, none, HMAC with a public key, a key of another type or curve, unknown and missing key ids', async () => {
    const good = tokenOf(RSA);
    const [h, , s] = good.split('.');
    refused(`${h}.${b64(claims({ sub: 'someone-else' }))}.${s}`, /signature is invalid/);
    refused(`${b64({ alg: 'none', typ: 'JWT' })}.${b64(claims())}.`, /algorithm must be HS256 or one of/);
    // HS256 "signed" with the RSA public key as the HMAC secret (the classic confusion).
    const pem = RSA.priv.export({ format: 'pem', type: 'pkcs1' });
    const confused = `${b64({ typ: 'JWT', alg: 'HS256', kid: RSA.kid })}.${b64(claims())}`;
    refused(`${confused}.${createHmac('sha256', pem).update(confused).digest('base64url')}`, /algorithm must be HS256 or one of|signature is invalid/);
    refused(jwt('RS256', EC256.priv, { kid: EC256.kid }, claims()), /RS256 does not go with its key \(EC P-256/);
    refused(jwt('ES384', EC256.priv, { kid: EC256.kid }, claims()), /ES384 does not go with its key/);
    refused(jwt('PS256', RSA.priv, { kid: RSA.kid }, claims()), /PS256 does not go with its key \(RSA, RS256\)/);
    refused(jwt('RS256', RSA.priv, { kid: RSA.kid, crit: ['exp'] }, claims()), /critical extensions/);
    // A provider's large access token (many group claims) is taken; past 12,288 characters, not.
    assert.equal(auth.verify(tokenOf(RSA, { groups: Array.from({ length: 180 }, (_, i) => `group-${i}-0123456789abcdef`) })).subject, 'dev-j');
    refused(tokenOf(RSA, { groups: Array.from({ length: 400 }, (_, i) => `group-${i}-0123456789abcdef`) }), /more than 12288 characters/);
    refused(jwt('RS256', RSA.priv, { kid: 'nobody' }, claims()), /key id "nobody" is not among/);
    // One key that can serve the algorithm: a token without a kid finds it; two: refused.
    assert.equal(auth.verify(jwt('EdDSA', ED.priv, {}, claims())).subject, 'dev-j');
    assert.equal(auth.verify(jwt('RS256', RSA.priv, {}, claims())).subject, 'dev-j');
    const two = join(dir, 'two.json');
    const RSA2 = pair('rsa-2', 'RS256', () => generateKeyPairSync('rsa', { modulusLength: 2048 }));
    writeFileSync(two, JSON.stringify({ keys: [RSA.jwk, RSA2.jwk] }));
    await KeySet.load(two, { refreshS: 0 }).then((set) => {
      const a2 = new TokenAuthority(SECRET, () => now, { keys: set });
      assert.throws(() => a2.verify(jwt('RS256', RSA.priv, {}, claims())), /names no key id and no single key serves RS256/);
      assert.equal(a2.verify(jwt('RS256', RSA2.priv, { kid: 'rsa-2' }, claims())).subject, 'dev-j');
      set.close();
    });
  });

  it('aud, iss, exp and nbf with the clock skew; subject and scopes checked', () => {
    refused(tokenOf(EC256, { aud: 'another-service' }), /audience must be one of ambit/);
    assert.equal(auth.verify(tokenOf(EC256, { aud: ['x', 'ambit'] })).subject, 'dev-j');
    refused(tokenOf(EC256, { aud: undefined }), /audience/);
    refused(tokenOf(EC256, { iss: 'https://evil.example' }), /issuer must be one of/);
    refused(tokenOf(EC256, { exp: NOW - 31 }), /expired/);
    assert.ok(auth.verify(tokenOf(EC256, { exp: NOW - 29 })), 'within the skew');
    refused(tokenOf(EC256, { nbf: NOW + 31 }), /not valid yet/);
    assert.ok(auth.verify(tokenOf(EC256, { nbf: NOW + 29 })), 'within the skew');
    refused(tokenOf(EC256, { sub: 'x'.repeat(129) }), /sub must be 1 to 128/);
    refused(tokenOf(EC256, { scope: 7 }), /need sub, scope, exp/);
    const later = now;
    now += 10_000;
    refused(tokenOf(EC256), /expired/);
    now = later;
  });

  it('the gateway\'s own HS256 tokens however their header is written; their times without the skew; effective expiry in whole seconds', () => {
    const hs = (header: Record<string, unknown>, c: Record<string, unknown>): string => {
      const data = `${b64(header)}.${b64(c)}`;
      return `${data}.${createHmac('sha256', SECRET).update(data).digest('base64url')}`;
    };
    // What other JWT libraries write with the secret: {"alg":"HS256"}, another key order, a kid.
    for (const header of [{ alg: 'HS256' }, { typ: 'JWT', alg: 'HS256' }, { alg: 'HS256', kid: 'k1' }]) assert.equal(auth.verify(hs(header, { sub: 'app', scope: 'publish', exp: NOW + 60 })).subject, 'app', JSON.stringify(header));
    // The skew is for the provider's clocks: the gateway's own token is expired at its exp.
    refused(hs({ alg: 'HS256' }, { sub: 'app', scope: 'publish', exp: NOW - 10 }), /expired/);
    // A provider token's effective expiry (what streams and revocations keep to) includes the skew.
    assert.equal(auth.verify(tokenOf(EC256, { exp: NOW + 100.7 })).expiresAt, NOW + 130);
    assert.equal(auth.verify(tokenOf(EC256, { exp: NOW - 10 })).expiresAt, NOW + 20);
    // Times that are not times: refused, not carried on.
    const huge = jwt('ES256', EC256.priv, { kid: EC256.kid }, claims()).split('.');
    const payload = Buffer.from(JSON.stringify(claims()).replace(/"exp":\d+/, '"exp":1e309')).toString('base64url');
    const data = `${huge[0]}.${payload}`;
    refused(`${data}.${sign('sha256', Buffer.from(data), { key: EC256.priv, dsaEncoding: 'ieee-p1363' }).toString('base64url')}`, /exp a time in seconds/);
  });

  it('subject and scopes from configured claims (an array of scopes too)', () => {
    const custom = new TokenAuthority(SECRET, () => now, { keys, subjectClaim: 'uid', scopeClaim: 'roles' });
    const p = custom.verify(tokenOf(ED, { uid: 'phone-42', roles: ['device', 'publish'] }));
    assert.equal(p.subject, 'phone-42');
    assert.deepEqual([...p.scopes].sort(), ['device', 'publish']);
    assert.throws(() => custom.verify(tokenOf(ED)), /uid must be 1 to 128/);
  });

  it('a JWK Set: unusable keys are skipped with their reason; a set with none is refused', async () => {
    const weak = generateKeyPairSync('rsa', { modulusLength: 1024 }).publicKey.export({ format: 'jwk' });
    const { skipped, keys: got } = parseJwks(
      JSON.stringify({
        keys: [
          { ...weak, kid: 'weak' },
          { ...RSA.jwk, kid: 'enc', use: 'enc' },
          { ...(RSA.priv.export({ format: 'jwk' }) as object), kid: 'private' },
          { kty: 'oct', k: 'c2VjcmV0', kid: 'sym' },
          { ...EC256.jwk, kid: 'mismatch', alg: 'RS256' },
          ED.jwk,
        ],
      }),
    );
    assert.deepEqual(got.map((k) => k.kid), ['ed-1']);
    assert.equal(skipped.length, 5);
    for (const [i, why] of [[0, /RSA key of 1024 bits/], [1, /use is "enc"/], [2, /private or symmetric/], [3, /private or symmetric/], [4, /alg "RS256" does not go with kty EC/]] as const) assert.match(skipped[i], why);
    assert.throws(() => parseJwks('{"nokeys":[]}'), /"keys" array/);
    const empty = join(dir, 'empty.json');
    writeFileSync(empty, JSON.stringify({ keys: [{ ...weak, kid: 'weak' }] }));
    await assert.rejects(KeySet.load(empty, { refreshS: 0 }), /holds no usable key \(keys\[0\] \(kid "weak"\): RSA key of 1024 bits/);
  });

  it('a JWK Set URL: rotation by refresh, an unknown key id asks for one (not more often than allowed), a failed refresh keeps the keys', async () => {
    let body = JSON.stringify({ keys: [RSA.jwk] });
    let status = 200;
    let gets = 0;
    const server: Server = createServer((_req, res) => {
      gets++;
      res.writeHead(status, { 'content-type': 'application/json' }).end(body);
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    let t = NOW;
    const url = `http://127.0.0.1:${(server.address() as { port: number }).port}/jwks.json`;
    const set = await KeySet.load(url, { refreshS: 0, minRefreshS: 30 }, () => t);
    try {
      const a = new TokenAuthority(SECRET, () => t, { keys: set });
      assert.equal(a.verify(tokenOf(RSA)).subject, 'dev-j');
      // The provider rotates: the new key is published, the old one withdrawn.
      body = JSON.stringify({ keys: [EC256.jwk] });
      assert.equal(set.stats().refreshing, false);
      assert.throws(() => a.verify(tokenOf(EC256)), /key id "ec-256" is not among/);
      assert.equal(set.stats().refreshing, true, 'the unknown key id asked for a refresh');
      await set.refresh(); // the refresh under way, awaited
      assert.equal(a.verify(tokenOf(EC256)).subject, 'dev-j');
      // Another unknown key id within minRefreshS asks for none; after it, it does.
      assert.throws(() => a.verify(tokenOf(ED)), /not among/);
      assert.equal(set.stats().refreshing, false, 'not more often than minRefreshS');
      t += 30;
      assert.throws(() => a.verify(tokenOf(ED)), /not among/);
      assert.equal(set.stats().refreshing, true);
      await set.refresh();
      assert.equal(gets, 3, 'the load and two refreshes');
      assert.throws(() => a.verify(tokenOf(RSA)), /not among/);
      // The provider fails: the keys held stay.
      status = 500;
      await set.refresh();
      assert.equal(a.verify(tokenOf(EC256)).subject, 'dev-j');
      assert.match(set.stats().lastError, /HTTP 500/);
      assert.equal(set.stats().failures, 1);
    } finally {
      set.close();
      await new Promise((r) => server.close(r));
    }
  });
});

describe('identity provider keys that cannot be read at start', () => {
  it('open: the set starts empty and keeps trying; provider tokens are UNAVAILABLE, own tokens work; then the keys come in', async () => {
    let status = 503;
    let served = 0;
    let failedOnce!: () => void;
    const failed = new Promise<void>((r) => (failedOnce = r));
    const server: Server = createServer((_req, res) => {
      res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify({ keys: [RSA.jwk] }));
      if (status !== 200) {
        if (++served >= 3) failedOnce(); // load, open, and one retry
      }
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const url = `http://127.0.0.1:${(server.address() as { port: number }).port}/jwks.json`;
    await assert.rejects(KeySet.load(url, { refreshS: 0 }), /HTTP 503/);
    const set = await KeySet.open(url, { refreshS: 0, retryMinMs: 5, retryMaxMs: 20 }, () => NOW);
    try {
      const a = new TokenAuthority(SECRET, () => NOW, { keys: set });
      assert.equal(set.usable, false);
      assert.match(set.stats().lastError, /HTTP 503/);
      assert.throws(() => a.verify(tokenOf(RSA)), (e: unknown) => e instanceof AuthError && e.code === 'UNAVAILABLE' && /not loaded yet.*HTTP 503/.test(e.message));
      const own = new TokenAuthority(SECRET, () => NOW);
      assert.equal(a.verify(own.issue({ subject: 'dev-own', scopes: ['device'] })).subject, 'dev-own');
      await failed; // it tried again, and failed again
      status = 200;
      await set.ready();
      assert.equal(set.usable, true);
      assert.equal(a.verify(tokenOf(RSA)).subject, 'dev-j');
      assert.equal(set.stats().lastError, '');
      assert.ok(set.stats().failures >= 2);
    } finally {
      set.close();
      await new Promise((r) => server.close(r));
    }
  });

  it('open: a file not there yet is read once it is', async () => {
    const d = mkdtempSync(join(tmpdir(), 'ambit-jwks-late-'));
    const f = join(d, 'jwks.json');
    const set = await KeySet.open(f, { refreshS: 0, retryMinMs: 5, retryMaxMs: 10 });
    try {
      assert.equal(set.usable, false);
      assert.match(set.stats().lastError, /ENOENT/);
      writeFileSync(f, JSON.stringify({ keys: [ED.jwk] }));
      await set.ready();
      assert.equal(new TokenAuthority(SECRET, () => NOW, { keys: set }).verify(tokenOf(ED)).subject, 'dev-j');
    } finally {
      set.close();
      rmSync(d, { recursive: true, force: true });
    }
  });

  it('a gateway whose provider is down at start serves: its own tokens work, the provider\'s are UNAVAILABLE', async () => {
    const server: Server = createServer((_req, res) => res.writeHead(503).end());
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const url = `http://127.0.0.1:${(server.address() as { port: number }).port}/jwks.json`;
    const srv = await startTestServer({ tokenSecret: SECRET, dev: false, jwks: url, jwksRefreshS: 0, tokenIssuer: ['https://id.example'] });
    try {
      const clients = srv.clients();
      assert.ok(await unary(clients.ops, 'getStats', {}, srv.meta('ops', ['ops'])));
      const t = Math.floor(Date.now() / 1000);
      const provider = jwt('ES256', EC256.priv, { kid: EC256.kid }, { ...claims(), iat: t, exp: t + 600, scope: 'ops' });
      await expectStatus(unary(clients.ops, 'getStats', {}, meta(provider)), Status.UNAVAILABLE);
      assert.deepEqual(srv.unexpectedErrors(), []);
    } finally {
      await srv.stop();
      await new Promise((r) => server.close(r));
    }
  });
});

describe('identity provider tokens on real calls', () => {
  const dir = mkdtempSync(join(tmpdir(), 'ambit-jwks-srv-'));
  const file = join(dir, 'jwks.json');
  writeFileSync(file, JSON.stringify({ keys: [EC256.jwk, ED.jwk] }));
  let srv: TestServer;
  const live = (over: Record<string, unknown> = {}): Record<string, unknown> => {
    const t = Math.floor(Date.now() / 1000);
    return { ...claims(over), iat: t, exp: t + 600, ...over };
  };

  before(async () => {
    srv = await startTestServer({ tokenSecret: SECRET, dev: false, jwks: file, jwksRefreshS: 0, tokenAudience: ['ambit'], tokenIssuer: ['https://id.example'], tokenSubjectClaim: 'uid', tokenScopeClaim: 'roles' });
  });
  after(async () => {
    assert.deepEqual(srv.unexpectedErrors(), []);
    await srv.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('a unary call and a device stream with the provider\'s tokens; a wrong audience is UNAUTHENTICATED', async () => {
    const clients = srv.clients();
    const ops = jwt('ES256', EC256.priv, { kid: EC256.kid }, live({ uid: 'ops-j', roles: ['ops'] }));
    assert.ok((await unary(clients.ops, 'getStats', {}, meta(ops))).devices >= 0n);
    const wrongAud = jwt('ES256', EC256.priv, { kid: EC256.kid }, live({ uid: 'ops-j', roles: ['ops'], aud: 'elsewhere' }));
    await expectStatus(unary(clients.ops, 'getStats', {}, meta(wrongAud)), Status.UNAUTHENTICATED);
    const device = jwt('EdDSA', ED.priv, { kid: ED.kid }, live({ uid: 'phone-j', roles: ['device'] }));
    const { stream } = await DeviceStream.open(clients, device);
    await stream.subscribeOk({ id: 'j', filters: [{ constraints: [], area: { radiusM: 100 } }] });
    const subs = await unary(clients.ops, 'getDeviceSubscriptions', { deviceId: 'phone-j' }, meta(ops));
    assert.deepEqual(subs.subscriptions.map((x: { id: string }) => x.id), ['j']);
    // The gateway's own tokens still work beside them.
    assert.ok(await unary(clients.ops, 'getStats', {}, srv.meta('ops', ['ops'])));
  });
});
