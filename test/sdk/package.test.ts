/**
 * The SDK as an installable package (sdk/package.json, scripts/build-sdk.mjs): built and packed
 * with npm, unpacked into an app's node_modules beside its two dependencies, and used from a
 * separate Node process by its package name: the Node entry over gRPC and over WebSocket, and the
 * `./web` entry; the tarball holds the built modules and their declarations, not the sources or
 * tests.
 */
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';
import { AmbitPublisher } from '../../sdk/index.js';
import { type TestServer, startTestServer } from './support.js';

const ROOT = fileURLToPath(new URL('../../..', import.meta.url));

/** What the app prints: each device's received event ids. */
const APP = `
import { AmbitDevice, StatusCode } from '@ambit/sdk';
import { AmbitDevice as WebDevice } from '@ambit/sdk/web';
import { WebSocket } from 'ws';
const [grpcAddress, wsAddress, token1, token2, token3] = process.argv.slice(2);
const sub = { id: 'all', filters: [{ constraints: [{ name: 'type', op: 'eq', value: 'pkg' }] }] };
const devices = [
  await AmbitDevice.connect(grpcAddress, token1),
  await AmbitDevice.connect(wsAddress, token2, { webSocket: WebSocket }),
  await WebDevice.connect(wsAddress, token3, { webSocket: WebSocket }),
];
for (const d of devices) await d.subscribe(sub);
let refused = '';
try { new WebDevice(grpcAddress, token3); } catch (err) { refused = err.code === StatusCode.INVALID_ARGUMENT ? err.field : String(err); }
console.log(JSON.stringify({ ready: true, refused }));
const got = await Promise.all(devices.map(async (d) => { const it = d.notifications(); const ids = []; for (let i = 0; i < 2; i++) ids.push((await it.next()).value.event.id); return ids; }));
console.log(JSON.stringify({ got }));
await Promise.all(devices.map((d) => d.close()));
`;

describe('the SDK package', { timeout: 180_000 }, () => {
  let t: TestServer;
  let dir: string;

  before(async () => {
    t = await startTestServer();
    dir = mkdtempSync(join(tmpdir(), 'ambit-sdk-'));
  });

  after(async () => {
    await t?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('builds, packs, installs into an app and serves it by name, over gRPC and WebSocket', async () => {
    execFileSync(process.execPath, [join(ROOT, 'scripts', 'build-sdk.mjs')], { cwd: ROOT, stdio: 'pipe' });
    const packed = JSON.parse(execFileSync('npm', ['pack', '--json', '--pack-destination', dir], { cwd: join(ROOT, 'sdk'), encoding: 'utf8' })) as { filename: string; files: { path: string }[] }[];
    const files = packed[0].files.map((f) => f.path);
    for (const f of ['package.json', 'README.md', 'dist/sdk/index.js', 'dist/sdk/index.d.ts', 'dist/sdk/web.js', 'dist/sdk/web.d.ts', 'dist/api/websocket.js']) assert.ok(files.includes(f), `the tarball holds ${f}`);
    assert.deepEqual(files.filter((f) => /(^|\/)test\/|\.ts$/.test(f) && !f.endsWith('.d.ts')), [], 'no sources or tests');

    // An app with the package unpacked where npm would put it, and its dependencies beside it.
    const app = join(dir, 'app');
    const modules = join(app, 'node_modules');
    mkdirSync(join(modules, '@ambit', 'sdk'), { recursive: true });
    execFileSync('tar', ['-xzf', join(dir, packed[0].filename), '-C', join(modules, '@ambit', 'sdk'), '--strip-components=1']);
    for (const dep of ['@bufbuild', '@grpc', 'ws']) symlinkSync(join(ROOT, 'node_modules', dep), join(modules, dep), 'dir');
    writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'app', private: true, type: 'module', dependencies: { '@ambit/sdk': '0.1.0' } }));
    writeFileSync(join(app, 'app.mjs'), APP);
    const pkg = JSON.parse(readFileSync(join(modules, '@ambit', 'sdk', 'package.json'), 'utf8')) as { exports: Record<string, unknown> };
    assert.deepEqual(Object.keys(pkg.exports), ['.', './web', './package.json']);

    const child = spawn(process.execPath, [join(app, 'app.mjs'), t.address, t.wsAddress, t.token('pkg-1'), t.token('pkg-2'), t.token('pkg-3')], { cwd: app, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    const lines: Record<string, unknown>[] = [];
    let onLine: (() => void) | null = null;
    child.stdout.on('data', (c: Buffer) => {
      stdout += c.toString('utf8');
      const parts = stdout.split('\n');
      stdout = parts.pop() ?? '';
      for (const p of parts) if (p.trim() !== '') lines.push(JSON.parse(p) as Record<string, unknown>);
      onLine?.();
    });
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString('utf8')));
    const exited = new Promise<number>((resolve) => child.on('exit', (code) => resolve(code ?? -1)));
    const waitLine = (key: string) =>
      new Promise<Record<string, unknown>>((resolve, reject) => {
        const check = () => {
          const l = lines.find((x) => key in x);
          if (l !== undefined) resolve(l);
        };
        onLine = check;
        check();
        void exited.then((code) => reject(new Error(`the app exited (${code}) before "${key}": ${stderr}`)));
      });
    const ready = await waitLine('ready');
    assert.equal(ready.refused, 'address', 'the web entry refuses a gRPC address, naming the field');
    const pub = new AmbitPublisher(t.address, t.publishToken);
    try {
      for (const id of ['pkg-a', 'pkg-b']) assert.equal((await pub.publish({ id, lat: 0, lon: 0, attributes: { type: 'pkg' } })).reached, 3);
    } finally {
      pub.close();
    }
    const { got } = await waitLine('got');
    assert.deepEqual(got, [['pkg-a', 'pkg-b'], ['pkg-a', 'pkg-b'], ['pkg-a', 'pkg-b']]);
    assert.equal(await exited, 0, stderr);
  });
});
