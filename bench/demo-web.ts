/**
 * `npm run demo:web [-- --port 8080] [--devices N] [--rate R] [--radius M] [--still]`
 *
 * The browser demo: an embedded Ambit with device streams over WebSocket, and a page
 * (demo/web/) whose simulated devices are AmbitDevice objects of the SDK's browser entry
 * (sdk/web.ts) walking around Milan, each subscribed to accidents within its reach; a publisher
 * here posts accidents near them at a fixed rate over gRPC. Open the printed URL. The page is
 * served with the SDK and protobuf-es as ES modules, unbundled (an import map names protobuf-es).
 * Device tokens are minted here for the page (a demo, not a login).
 */
import { createServer, type Server } from 'node:http';
import { readFile } from 'node:fs/promises';
import { extname, join, normalize, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { SCOPES } from '../services/edge/auth.js';
import { type RunningServer, startServer } from '../services/process/server.js';
import { AmbitPublisher, type EventInput } from '../sdk/index.js';
import { Prng } from '../src/workload/prng.js';
import { cliFail, readCommandLine, runMain } from './lib/args.js';

const DIST = fileURLToPath(new URL('..', import.meta.url));
const ROOT = join(DIST, '..');
/** What the page may load: its own files, the compiled SDK and API, and protobuf-es's ES modules. */
const MOUNTS: [string, string][] = [
  ['/sdk/', join(DIST, 'sdk')],
  ['/api/', join(DIST, 'api')],
  ['/protobuf/', join(ROOT, 'node_modules', '@bufbuild', 'protobuf', 'dist', 'esm')],
  ['/', join(DIST, 'demo', 'web')],
];
const TYPES: Record<string, string> = { '.html': 'text/html; charset=utf-8', '.js': 'text/javascript; charset=utf-8', '.mjs': 'text/javascript; charset=utf-8', '.css': 'text/css; charset=utf-8', '.json': 'application/json' };
const MILAN = { lat: 45.4642, lon: 9.19 };
const M_PER_DEG = 111_195;

export interface DeviceSpec {
  id: string;
  lat: number;
  lon: number;
}

export interface WebDemoOptions {
  /** The page's HTTP port (0: any free one). */
  port?: number;
  /** The devices and where they start (default: `devices` of them around Milan's centre). */
  devices?: DeviceSpec[] | number;
  /** Accidents published per second near the devices (0: none; a test publishes itself). */
  rate?: number;
  radiusM?: number;
  /** Devices walk (default true). */
  walk?: boolean;
  seed?: number;
}

export interface WebDemo {
  readonly url: string;
  readonly server: RunningServer;
  /** Where the page's devices open their streams: the node's WebSocket port unless set (a proxy in front of it). */
  wsUrl: string;
  readonly center: { lat: number; lon: number };
  readonly radiusM: number;
  publish(e: EventInput): Promise<number>;
  stop(): Promise<void>;
}

function serveFile(path: string): string | null {
  for (const [prefix, dir] of MOUNTS) {
    if (!path.startsWith(prefix)) continue;
    const rel = path === '/' ? 'index.html' : path.slice(prefix.length);
    const full = normalize(join(dir, rel));
    // Nothing outside the mount (no ../ escapes).
    if (full !== dir && !full.startsWith(dir + sep)) return null;
    return full;
  }
  return null;
}

export async function startWebDemo(o: WebDemoOptions = {}): Promise<WebDemo> {
  const radiusM = o.radiusM ?? 500;
  const rng = new Prng(o.seed ?? 7);
  const specs: DeviceSpec[] = Array.isArray(o.devices)
    ? o.devices
    : Array.from({ length: o.devices ?? 8 }, (_, i) => ({ id: `phone-${i + 1}`, lat: MILAN.lat + ((rng.float() - 0.5) * 3000) / M_PER_DEG, lon: MILAN.lon + ((rng.float() - 0.5) * 3000) / (M_PER_DEG * Math.cos((MILAN.lat * Math.PI) / 180)) }));
  // The page is served from another port (another origin): the web port lets it call (CORS).
  const server = await startServer({ host: '127.0.0.1', port: 0, metricsPort: null, webPort: 0, webOrigins: ['*'], engine: 'fast', dev: true, shutdownGraceS: 1, logLevel: 'warn' });
  const authority = server.authority!;
  const publisher = new AmbitPublisher(`127.0.0.1:${server.port}`, authority.issue({ subject: 'demo-publisher', scopes: [SCOPES.publish] }));
  const tokens = new Map(specs.map((d) => [d.id, authority.issue({ subject: d.id, scopes: [SCOPES.device], ttlSeconds: 24 * 3600 })]));
  const demo: WebDemo = {
    url: '',
    server,
    wsUrl: `ws://127.0.0.1:${server.webPort}`,
    center: MILAN,
    radiusM,
    publish: async (e) => (await publisher.publish(e)).reached,
    stop: async () => {
      clearInterval(timer);
      await new Promise<void>((resolve) => http.close(() => resolve()));
      http.closeAllConnections();
      publisher.close();
      await server.stop();
    },
  };
  const http: Server = createServer((req, res) => {
    void (async () => {
      const path = decodeURIComponent((req.url ?? '/').split('?')[0]);
      if (path === '/config.json') {
        const body = { wsUrl: demo.wsUrl, center: MILAN, viewM: 4000, radiusM, walk: o.walk ?? true, devices: specs.map((d) => ({ ...d, token: tokens.get(d.id) })) };
        res.writeHead(200, { 'content-type': 'application/json', 'cache-control': 'no-store' });
        res.end(JSON.stringify(body));
        return;
      }
      const file = serveFile(path);
      const type = file === null ? undefined : TYPES[extname(file)];
      if (file === null || type === undefined) {
        res.writeHead(404, { 'content-type': 'text/plain' }).end('not found\n');
        return;
      }
      try {
        res.writeHead(200, { 'content-type': type, 'cache-control': 'no-store' }).end(await readFile(file));
      } catch {
        res.writeHead(404, { 'content-type': 'text/plain' }).end('not found\n');
      }
    })();
  });
  await new Promise<void>((resolve) => http.listen(o.port ?? 0, '127.0.0.1', resolve));
  const port = (http.address() as { port: number }).port;
  (demo as { url: string }).url = `http://127.0.0.1:${port}/`;
  let n = 0;
  const rate = o.rate ?? 0;
  const timer = setInterval(() => {
    if (rate <= 0) return;
    // An accident near one of the devices' starting points, within twice the reach.
    const d = specs[Math.floor(rng.float() * specs.length)];
    const r = 2 * radiusM * Math.sqrt(rng.float());
    const a = 2 * Math.PI * rng.float();
    const e: EventInput = { id: `acc-${++n}`, lat: d.lat + (r * Math.cos(a)) / M_PER_DEG, lon: d.lon + (r * Math.sin(a)) / (M_PER_DEG * Math.cos((d.lat * Math.PI) / 180)), attributes: { type: 'accident', severity: 1 + Math.floor(rng.float() * 5) } };
    publisher.publish(e).catch(() => {});
  }, rate > 0 ? Math.max(1, Math.round(1000 / rate)) : 1000);
  timer.unref();
  return demo;
}

const USAGE = `usage: npm run demo:web -- [--port 8080] [--devices N] [--rate R] [--radius M] [--still]
  --port P     the page's port (default 8080; 0: any free one)
  --devices N  simulated devices in the page (default 8)
  --rate R     accidents published per second near them (default 2)
  --radius M   each device's reach in metres (default 500)
  --still      the devices stay where they start`;

async function main(): Promise<void> {
  const cl = readCommandLine(process.argv.slice(2), new Set(['help', 'still']), new Set(['port', 'devices', 'rate', 'radius']), cliFail('demo:web', USAGE), USAGE);
  if (cl === null) return;
  const { a, r } = cl;
  const demo = await startWebDemo({ port: r.int('port', 8080, 0, 65535), devices: r.int('devices', 8, 1, 1000), rate: r.num('rate', 2, 0, 1000), radiusM: r.num('radius', 500, 1, 100_000), walk: a.still !== true });
  console.log(`Ambit browser demo: open ${demo.url} (device streams over WebSocket on ${demo.wsUrl}; Ctrl-C stops)`);
  await new Promise<void>((resolve) => process.once('SIGINT', resolve));
  await demo.stop();
}

if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === process.argv[1]) runMain('demo:web', main);
