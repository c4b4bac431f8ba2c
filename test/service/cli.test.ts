/**
 * The `ambit` command line against a real server: tokens it mints are the server's, ops calls
 * print what the server holds (text and JSON), failures exit 1 with the gRPC code and field,
 * usage errors exit 2 naming what is wrong, and `ready` follows /readyz.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';
import { TokenAuthority } from '../../services/edge/auth.js';
import { AmbitDevice } from '../../sdk/index.js';
import { type TestServer, startTestServer } from '../support/grpc.js';

const CLI = fileURLToPath(new URL('../../services/cli/main.js', import.meta.url));
const SECRET = 'cli-test-secret-0123456789abcdef0123456789';

function ambit(args: string[], env: Record<string, string> = {}): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [CLI, ...args], { env: { PATH: process.env.PATH ?? '', ...env } }, (err, stdout, stderr) => {
      resolve({ code: err === null ? 0 : typeof err.code === 'number' ? err.code : -1, stdout, stderr });
    });
  });
}

describe('ambit command line', () => {
  let srv: TestServer;
  let address: string;
  before(async () => {
    srv = await startTestServer({ tokenSecret: SECRET, dev: false });
    address = srv.target;
  });
  after(async () => {
    await srv.stop();
  });

  it('token: mints a token of the deployment secret with the scopes and lifetime asked; refuses unknown scopes and a missing secret', async () => {
    const r = await ambit(['token', '--subject', 'ops-alice', '--scopes', 'ops,publish', '--ttl', '600'], { AMBIT_TOKEN_SECRET: SECRET });
    assert.equal(r.code, 0, r.stderr);
    const p = new TokenAuthority(SECRET).verify(r.stdout.trim());
    assert.equal(p.subject, 'ops-alice');
    assert.deepEqual([...p.scopes].sort(), ['ops', 'publish']);
    assert.ok(p.expiresAt - Date.now() / 1000 > 590 && p.expiresAt - Date.now() / 1000 <= 601);
    const bad = await ambit(['token', '--subject', 'x', '--scopes', 'ops,root'], { AMBIT_TOKEN_SECRET: SECRET });
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /unknown scope "root", expected one of device, location:any, publish, ops/);
    const noSecret = await ambit(['token', '--subject', 'x', '--scopes', 'ops']);
    assert.equal(noSecret.code, 2);
    assert.match(noSecret.stderr, /set AMBIT_TOKEN_SECRET/);
    const badTtl = await ambit(['token', '--subject', 'x', '--scopes', 'ops', '--ttl=-5'], { AMBIT_TOKEN_SECRET: SECRET });
    assert.match(badTtl.stderr, /--ttl must be a whole number of seconds > 0, got "-5"/);
  });

  it('stats and device: what the server holds, as text and JSON, with a token minted by the command line', async () => {
    const opsToken = (await ambit(['token', '--subject', 'ops-bob', '--scopes', 'ops'], { AMBIT_TOKEN_SECRET: SECRET })).stdout.trim();
    const dev = await AmbitDevice.connect(address, srv.token('cli-dev', ['device']));
    try {
      await dev.subscribe({ id: 'near', filters: [{ constraints: [{ name: 'type', op: 'eq', value: 'accident' }], area: { radiusM: 300 } }] });
      dev.updateLocation(45.5, 9.2);
      const env = { AMBIT_ADDRESS: address, AMBIT_OPS_TOKEN: opsToken };
      const s = await ambit(['stats', '--json'], env);
      assert.equal(s.code, 0, s.stderr);
      const stats = JSON.parse(s.stdout) as { mode: string; subscriptions: number; connectedDevices: number };
      assert.deepEqual([stats.mode, stats.subscriptions, stats.connectedDevices], ['embedded', 1, 1]);
      assert.match((await ambit(['stats'], env)).stdout, /^subscriptions\s+1$/m);
      let info: { subscriptions: { id: string }[]; location: { lat: number; lon: number } | null; connected: boolean };
      // The position travels on the device's stream: asked again until it is there (bounded).
      let tries = 0;
      do info = JSON.parse((await ambit(['device', 'cli-dev', '--json'], env)).stdout);
      while (info.location === null && ++tries < 50);
      assert.deepEqual(info.subscriptions.map((x) => x.id), ['near']);
      assert.deepEqual(info.location, { lat: 45.5, lon: 9.2 });
      assert.equal(info.connected, true);
      const text = await ambit(['device', 'cli-dev', '--address', address, '--token', opsToken]);
      assert.match(text.stdout, /^device cli-dev: connected, at 45\.5, 9\.2, 1 subscriptions$/m);
      assert.match(text.stdout, /^ {2}near: \[/m);
    } finally {
      await dev.close();
    }
  });

  it('unsubscribe: removes one subscription of a device; an unknown one is NOT_FOUND naming the field; a bad id is INVALID_ARGUMENT', async () => {
    const opsToken = srv.token('ops', ['ops']);
    const env = { AMBIT_ADDRESS: address, AMBIT_OPS_TOKEN: opsToken };
    const dev = await AmbitDevice.connect(address, srv.token('cli-unsub', ['device']));
    try {
      await dev.subscribe({ id: 'a', filters: [{ constraints: [{ name: 'k', op: 'eq', value: 'x' }] }] });
      await dev.subscribe({ id: 'b', filters: [{ constraints: [{ name: 'k', op: 'eq', value: 'y' }] }] });
      const r = await ambit(['unsubscribe', 'cli-unsub', 'a'], env);
      assert.equal(r.code, 0, r.stderr);
      assert.equal(r.stdout, 'removed subscription a of device cli-unsub\n');
      assert.deepEqual((await dev.listSubscriptions()).map((x) => x.id), ['b']);
      const again = await ambit(['unsubscribe', 'cli-unsub', 'a'], env);
      assert.equal(again.code, 1);
      assert.match(again.stderr, /^ambit: NOT_FOUND: .* \(field subscription_id\)$/m);
      const bad = await ambit(['unsubscribe', 'cli-unsub', 'x'.repeat(300)], env);
      assert.equal(bad.code, 1);
      assert.match(bad.stderr, /^ambit: INVALID_ARGUMENT: .*\(field subscription_id\)$/m);
      const usage = await ambit(['unsubscribe', 'cli-unsub'], env);
      assert.equal(usage.code, 2);
      assert.match(usage.stderr, /give the device id and the subscription id/);
      const denied = await ambit(['unsubscribe', 'cli-unsub', 'b', '--token', srv.token('cli-unsub', ['device'])], env);
      assert.equal(denied.code, 1);
      assert.match(denied.stderr, /^ambit: PERMISSION_DENIED/);
      assert.deepEqual((await dev.listSubscriptions()).map((x) => x.id), ['b']);
    } finally {
      await dev.close();
    }
  });

  it('devices and purge: pages of devices; a purged device is told its state is lost and its SDK subscribes again', async () => {
    const env = { AMBIT_ADDRESS: address, AMBIT_OPS_TOKEN: srv.token('ops', ['ops']) };
    const devs = await Promise.all(['fleet-a', 'fleet-b', 'fleet-c'].map((d) => AmbitDevice.connect(address, srv.token(d, ['device']))));
    try {
      for (const d of devs) await d.subscribe({ id: 'acc', filters: [{ constraints: [{ name: 'type', op: 'eq', value: 'accident' }] }] });
      const first = await ambit(['devices', '--prefix', 'fleet-', '--limit', '2', '--json'], env);
      assert.equal(first.code, 0, first.stderr);
      const page = JSON.parse(first.stdout) as { devices: { deviceId: string; subscriptions: number }[]; nextPageToken: string };
      assert.equal(page.devices.length, 2);
      assert.notEqual(page.nextPageToken, '');
      const text = await ambit(['devices', '--prefix', 'fleet-', '--page-token', page.nextPageToken], env);
      assert.equal(text.code, 0, text.stderr);
      assert.match(text.stdout, /^fleet-\w {2}1 subscriptions {2}no position {2}(never seen|seen \S+)$/m);
      const all = JSON.parse((await ambit(['devices', '--all', '--prefix', 'fleet-', '--json'], env)).stdout) as { devices: { deviceId: string }[] };
      assert.deepEqual(all.devices.map((d) => d.deviceId).sort(), ['fleet-a', 'fleet-b', 'fleet-c']);

      const welcomed = new Promise<{ stateLost: boolean }>((resolve) => {
        const off = devs[1].on('connected', (c) => {
          off();
          resolve(c);
        });
      });
      const purged = await ambit(['purge', 'fleet-b'], env);
      assert.equal(purged.code, 0, purged.stderr);
      assert.match(purged.stdout, /^purged device fleet-b: 1 subscriptions, 0 notifications, no position$/m);
      // Its stream ended; the SDK reconnects, hears that its state is gone and subscribes again.
      assert.equal((await welcomed).stateLost, true);
      let held: string[] = [];
      for (let tries = 0; held.length === 0 && tries < 100; tries++) held = (await devs[1].listSubscriptions()).map((x) => x.id);
      assert.deepEqual(held, ['acc']);
      assert.equal(devs[1].stats.resubscribed, 1);

      const usage = await ambit(['devices', '--limit', '5000'], env);
      assert.equal(usage.code, 2);
      assert.match(usage.stderr, /--limit: an integer in \[1, 1000\]/);
      const badToken = await ambit(['devices', '--page-token', 'nope'], env);
      assert.equal(badToken.code, 1);
      assert.match(badToken.stderr, /^ambit: INVALID_ARGUMENT: .*\(field page_token\)$/m);
      assert.equal((await ambit(['purge'], env)).code, 2);
    } finally {
      for (const d of devs) await d.close();
    }
  });

  it('revoke: by subject and by the token id that token --json prints; the revoked tokens are refused', async () => {
    const env = { AMBIT_ADDRESS: address, AMBIT_OPS_TOKEN: srv.token('ops', ['ops']) };
    const minted = JSON.parse((await ambit(['token', '--subject', 'cli-rev', '--scopes', 'device', '--json'], { AMBIT_TOKEN_SECRET: srv.server.authority!.secretForDev() })).stdout) as { token: string; tokenId: string };
    assert.match(minted.tokenId, /^[A-Za-z0-9_-]{16}$/);
    const dev = await AmbitDevice.connect(address, minted.token);
    await dev.listSubscriptions();
    await dev.close();
    const byId = await ambit(['revoke', 'token-id', minted.tokenId, '--keep-days', '2', '--json'], env);
    assert.equal(byId.code, 0, byId.stderr);
    assert.equal((JSON.parse(byId.stdout) as { revoked: string }).revoked, `token-id ${minted.tokenId}`);
    const refused = await AmbitDevice.connect(address, minted.token).then(
      async (d) => {
        await d.close();
        return 'connected';
      },
      (err: { code?: number; details?: string }) => err.details ?? String(err),
    );
    assert.match(refused, /token was revoked/);
    const bySubject = await ambit(['revoke', 'subject', 'cli-other'], env);
    assert.equal(bySubject.code, 0, bySubject.stderr);
    assert.match(bySubject.stdout, /^revoked every token of cli-other issued up to now until \S+; 0 device streams ended on this gateway$/m);
    assert.equal((await ambit(['revoke', 'nonsense', 'x'], env)).code, 2);
    assert.equal((await ambit(['revoke', 'token', minted.token, '--keep-days', '3'], env)).code, 2);
  });

  it('a failed call exits 1 with its code, message and field; usage errors exit 2', async () => {
    const opsToken = srv.token('ops', ['ops']);
    const env = { AMBIT_ADDRESS: address };
    const noToken = await ambit(['stats'], env);
    assert.equal(noToken.code, 2);
    assert.match(noToken.stderr, /pass --token or set AMBIT_OPS_TOKEN/);
    const wrongScope = await ambit(['stats', '--token', srv.token('d', ['device'])], env);
    assert.equal(wrongScope.code, 1);
    assert.match(wrongScope.stderr, /^ambit: PERMISSION_DENIED: /);
    const forged = await ambit(['stats', '--token', new TokenAuthority('another-secret-0123456789abcdef012345').issue({ subject: 'x', scopes: ['ops'] })], env);
    assert.equal(forged.code, 1);
    assert.match(forged.stderr, /^ambit: UNAUTHENTICATED: token signature is invalid/);
    const notSharded = await ambit(['move-cells', '2270,4729:1', '--token', opsToken], env);
    assert.equal(notSharded.code, 1);
    assert.match(notSharded.stderr, /^ambit: FAILED_PRECONDITION: .*not sharded by space/);
    const notShardedPlan = await ambit(['plan-cells', '--token', opsToken], env);
    assert.equal(notShardedPlan.code, 1);
    assert.match(notShardedPlan.stderr, /^ambit: FAILED_PRECONDITION: .*not sharded by space/);
    const badMax = await ambit(['plan-cells', '--max-moves', '0', '--token', opsToken], env);
    assert.equal(badMax.code, 2);
    assert.match(badMax.stderr, /--max-moves: an integer in \[1, 100000\]/);
    const badMove = await ambit(['move-cells', '2270;4729', '--token', opsToken], env);
    assert.equal(badMove.code, 2);
    assert.match(badMove.stderr, /"2270;4729" is not ROW,COL:SHARD/);
    const badId = await ambit(['device', '', '--token', opsToken, '--json'], env);
    assert.equal(badId.code, 1);
    assert.match(badId.stderr, /^ambit: INVALID_ARGUMENT: .*\(field device_id\)/);
    const unknown = await ambit(['frobnicate']);
    assert.equal(unknown.code, 2);
    assert.match(unknown.stderr, /unknown command "frobnicate"/);
    const flag = await ambit(['stats', '--bogus']);
    assert.equal(flag.code, 2);
    assert.match(flag.stderr, /bogus/);
    const down = await ambit(['stats', '--token', opsToken, '--address', '127.0.0.1:1', '--deadline-ms', '2000']);
    assert.equal(down.code, 1);
    assert.match(down.stderr, /^ambit: (UNAVAILABLE|DEADLINE_EXCEEDED): /);
  });

  it('drain: the gateway ends its device streams and turns unready; ready then exits 1 naming it', async () => {
    const other = await startTestServer({ tokenSecret: SECRET, dev: false });
    try {
      const dev = await AmbitDevice.connect(other.target, other.token('drain-dev', ['device']), { backoff: { initialMs: 60_000, maxMs: 60_000 } });
      try {
        const r = await ambit(['drain', '--address', other.target, '--token', other.token('ops', ['ops']), '--json']);
        assert.equal(r.code, 0, r.stderr);
        assert.deepEqual(JSON.parse(r.stdout), { streamsEnded: 1 });
        const ready = await ambit(['ready', '--metrics', `http://127.0.0.1:${other.server.metricsPort}`]);
        assert.equal(ready.code, 1);
        assert.match(ready.stdout, /^NOT READY \(stopping\)$/m);
      } finally {
        await dev.close();
      }
    } finally {
      await other.stop();
    }
  });

  it('ready: prints the readiness report and exits 0 while ready; 1 when the process cannot be reached', async () => {
    const metrics = `http://127.0.0.1:${srv.server.metricsPort}`;
    const r = await ambit(['ready', '--metrics', metrics]);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /^ready\n {2}ok {3}hub: embedded: /);
    const j = JSON.parse((await ambit(['ready', '--metrics', metrics, '--json'])).stdout) as { ready: boolean };
    assert.equal(j.ready, true);
    const gone = await ambit(['ready', '--metrics', 'http://127.0.0.1:1']);
    assert.equal(gone.code, 1);
    assert.match(gone.stderr, /cannot reach http:\/\/127\.0\.0\.1:1\/readyz/);
  });
});
