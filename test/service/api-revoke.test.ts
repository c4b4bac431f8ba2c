/**
 * RevokeTokens over real gRPC: a token revoked whole, by its id or by its subject is refused
 * (UNAUTHENTICATED "token was revoked") on every gateway, the device streams it opened end, and a
 * token minted later for the same subject still works. Embedded, and Redis with two gateway
 * processes' worth of servers on one Redis (the revocation made on one, felt on the other).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { TokenAuthority } from '../../services/edge/auth.js';
import { type Clients, DeviceStream, type Init, Status, type TestServer, checkStatus, expectStatus, meta, startTestServer, unary, within } from '../support/grpc.js';
import { type RedisServer, redisServerMissing, startRedisServer } from '../support/redis-server.js';

/** The token's id (its jti claim). */
function tokenId(token: string): string {
  return (JSON.parse(Buffer.from(token.split('.')[1], 'base64url').toString('utf8')) as { jti: string }).jti;
}

interface Deployment {
  /** Where the revocations are made, and another gateway of the same deployment (may be the same). */
  a: TestServer;
  b: TestServer;
  stop(): Promise<void>;
}

function revokeSuite(name: string, start: () => Promise<Deployment>, skip: string | false = false): void {
  describe(`api revoke: ${name}`, { timeout: 60_000, skip }, () => {
    let d: Deployment;
    let ca: Clients;
    let cb: Clients;
    before(async () => {
      d = await start();
      ca = d.a.clients();
      cb = d.b.clients();
    });
    after(async () => {
      assert.deepEqual([...d.a.unexpectedErrors(), ...d.b.unexpectedErrors()], []);
      await d.stop();
    });
    const ops = () => d.a.meta('ops', ['ops']);
    const event = (id: string): Init => ({ id, position: { lat: 1, lon: 1 }, attributes: {} });

    it('by subject: its streams end on every gateway, its tokens are refused, a token minted later works', async () => {
      const { stream } = await DeviceStream.open(cb, d.b.token('rev-dev', ['device']));
      const old = d.b.meta('rev-dev', ['device']);
      assert.ok(Array.isArray(((await unary(cb.device, 'listSubscriptions', {}, old)) as Init).subscriptions));
      const r = (await unary(ca.ops, 'revokeTokens', { subject: 'rev-dev' }, ops())) as Init;
      assert.ok(r.keptUntilUnixS > BigInt(Math.floor(Date.now() / 1000) + 29 * 86_400), 'kept 30 days');
      const end = await stream.end(10_000);
      checkStatus(end, Status.UNAUTHENTICATED);
      assert.match(end.details, /token was revoked/);
      const refused = await expectStatus(unary(ca.device, 'listSubscriptions', {}, old), Status.UNAUTHENTICATED);
      assert.match(refused.details, /token was revoked/);
      // The other gateway refuses it too, once it has heard (its stream ending above says it has).
      await expectStatus(unary(cb.device, 'listSubscriptions', {}, old), Status.UNAUTHENTICATED);
      // Revocation by subject covers tokens issued up to its second: one minted after it works.
      const later = new TokenAuthority(d.a.server.authority!.secretForDev(), () => Date.now() / 1000 + 2);
      const fresh = later.issue({ subject: 'rev-dev', scopes: ['device'] });
      await unary(cb.device, 'listSubscriptions', {}, meta(fresh));
      const again = await DeviceStream.open(cb, fresh);
      again.stream.cancel();
    });

    it('one token, whole or by its id: refused everywhere, the subject\'s other tokens still work', async () => {
      const t1 = d.a.token('pub-x', ['publish']);
      const t2 = d.a.token('pub-x', ['publish']);
      const t3 = d.a.token('pub-x', ['publish']);
      await unary(cb.publisher, 'publish', { event: event('ok-1') }, meta(t1));
      const whole = (await unary(ca.ops, 'revokeTokens', { token: t1 }, ops())) as Init;
      assert.ok(whole.keptUntilUnixS <= BigInt(Math.ceil(Date.now() / 1000) + 86_400), 'kept until the token expires (one day)');
      await expectStatus(unary(ca.publisher, 'publish', { event: event('no-1') }, meta(t1)), Status.UNAUTHENTICATED);
      // The other gateway's hub says when it has the revocation (it checks tokens against it).
      let stopWatching = (): void => {};
      const bHeard = new Promise<void>((resolve) => {
        stopWatching = d.b.server.hub!.watchRevocations((all) => {
          if (all.some((r) => 'tokenId' in r && r.tokenId === tokenId(t2))) resolve();
        });
      });
      await unary(ca.ops, 'revokeTokens', { tokenId: tokenId(t2), keepDays: 2 }, ops());
      await expectStatus(unary(ca.publisher, 'publish', { event: event('no-2') }, meta(t2)), Status.UNAUTHENTICATED);
      await unary(ca.publisher, 'publish', { event: event('ok-3') }, meta(t3));
      // The other gateway refuses it once it has heard.
      await within(bHeard, 10_000, 'the other gateway hearing of the revocation');
      stopWatching();
      await expectStatus(unary(cb.publisher, 'publish', { event: event('no-3') }, meta(t2)), Status.UNAUTHENTICATED);
      await unary(cb.publisher, 'publish', { event: event('ok-4') }, meta(t3));
    });

    it('bad requests name the field; only the ops scope revokes', async () => {
      await expectStatus(unary(ca.ops, 'revokeTokens', {}, ops()), Status.INVALID_ARGUMENT, 'token_id');
      await expectStatus(unary(ca.ops, 'revokeTokens', { tokenId: 'abc', subject: 'x' }, ops()), Status.INVALID_ARGUMENT, 'subject');
      await expectStatus(unary(ca.ops, 'revokeTokens', { tokenId: 'not an id!' }, ops()), Status.INVALID_ARGUMENT, 'token_id');
      await expectStatus(unary(ca.ops, 'revokeTokens', { subject: 's'.repeat(200) }, ops()), Status.INVALID_ARGUMENT, 'subject');
      await expectStatus(unary(ca.ops, 'revokeTokens', { subject: 'x', keepDays: 4000 }, ops()), Status.INVALID_ARGUMENT, 'keep_days');
      const forged = new TokenAuthority('another-secret-0123456789abcdef012345').issue({ subject: 'x', scopes: ['device'] });
      const bad = await expectStatus(unary(ca.ops, 'revokeTokens', { token: forged }, ops()), Status.INVALID_ARGUMENT, 'token');
      assert.match(bad.details, /signature is invalid/);
      await expectStatus(unary(ca.ops, 'revokeTokens', { token: d.a.token('y', ['device']), keepDays: 3 }, ops()), Status.INVALID_ARGUMENT, 'keep_days');
      await expectStatus(unary(ca.ops, 'revokeTokens', { subject: 'x' }, d.a.meta('x', ['device'])), Status.PERMISSION_DENIED);
    });
  });
}

revokeSuite('embedded', async () => {
  const srv = await startTestServer();
  return { a: srv, b: srv, stop: () => srv.stop() };
});

let redis: RedisServer | null = null;
revokeSuite(
  'redis, two gateways',
  async () => {
    redis = await startRedisServer();
    const secret = 'revoke-test-secret-0123456789abcdef01';
    const a = await startTestServer({ redisUrl: redis.url, redisPrefix: 'rev:', tokenSecret: secret, dev: false });
    const b = await startTestServer({ redisUrl: redis.url, redisPrefix: 'rev:', tokenSecret: secret, dev: false, role: 'gateway' });
    return {
      a,
      b,
      stop: async () => {
        await b.stop();
        await a.stop();
        await redis?.stop();
      },
    };
  },
  redisServerMissing() ?? false,
);
