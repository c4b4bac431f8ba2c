/**
 * Server memory per idle device stream: the server in a child process (embedded or Redis, one or
 * several gateway processes), client processes that open device streams (hello, welcome, nothing
 * more) in steps, and the server's resident memory (summed over its processes) after each step.
 * The cost of a stream is the slope of a least-squares line through (streams, RSS); the intercept
 * is the server at rest. Streams share HTTP/2 connections, `--per-connection` to each, as a
 * device SDK does not (one phone, one connection): the report says how many connections it held.
 *
 *   node dist/bench/streams.js [--streams N] [--steps K] [--per-connection C] [--clients P]
 *     [--engine fast|auto] [--redis URL] [--gateways N] [--transport grpc|websocket] [--out FILE] [--quick]
 *
 * `--transport websocket`: the devices open their streams over the web port's WebSocket instead
 * (one socket each: there is nothing to share), for the same figure per stream.
 */
import { fork } from 'node:child_process';
import os from 'node:os';
import { fileURLToPath } from 'node:url';
import { SCOPES } from '../services/edge/auth.js';
import { AmbitDevice, type WebSocketConstructor } from '../sdk/index.js';
import { WebSocket } from 'ws';
import { ArgReader, cliFail, parseArgs, runMain } from './lib/args.js';
import { describeMachine } from './lib/machine.js';
import { note } from './lib/progress.js';
import { ResultRun } from './lib/result-file.js';
import { startChildServer } from './lib/service-server.js';

const USAGE = `usage: node dist/bench/streams.js [--streams N] [--steps K] [--per-connection C] [--clients P] [--engine fast|auto]
  [--redis URL] [--gateways N] [--transport grpc|websocket] [--settle-seconds S] [--out FILE] [--quick]
Defaults: 20000 streams opened in 4 steps, 100 per HTTP/2 connection, clients: half the cores; engine fast; embedded; gRPC.
--transport websocket: each device's stream over the web port's WebSocket (AMBIT_WEB_PORT), a socket each.
--quick: 2000 streams in 2 steps.`;

type ToWorker = { t: 'open'; address: string; secret: string; ids: string[]; perConnection: number; first: number } | { t: 'exit' };
type FromWorker = { t: 'opened'; streams: number; rssBytes: number } | { t: 'failed'; error: string };

async function worker(): Promise<void> {
  const devices: AmbitDevice[] = [];
  const { TokenAuthority } = await import('../services/edge/auth.js');
  process.on('message', (m: ToWorker) => {
    if (m.t === 'exit') {
      Promise.all(devices.map((d) => d.close())).finally(() => process.exit(0));
      return;
    }
    void (async () => {
      try {
        const authority = new TokenAuthority(m.secret);
        let next = 0;
        await Promise.all(Array.from({ length: Math.min(200, m.ids.length) }, async () => {
          for (let i = next++; i < m.ids.length; i = next++) {
            const token = authority.issue({ subject: m.ids[i], scopes: [SCOPES.device], ttlSeconds: 3600 });
            const connection = Math.floor((m.first + i) / m.perConnection);
            const ws = m.address.startsWith('ws://');
            devices.push(await AmbitDevice.connect(m.address, token, ws ? { webSocket: WebSocket as unknown as WebSocketConstructor } : { channelOptions: { 'ambit-bench.connection': connection } }));
          }
        }));
        process.send!({ t: 'opened', streams: devices.length, rssBytes: process.memoryUsage().rss } satisfies FromWorker);
      } catch (err) {
        process.send!({ t: 'failed', error: err instanceof Error ? err.message : String(err) } satisfies FromWorker);
      }
    })();
  });
}

/** Least squares y = a + b x. */
function fit(xs: readonly number[], ys: readonly number[]): { a: number; b: number } {
  const n = xs.length;
  const mx = xs.reduce((s, x) => s + x, 0) / n;
  const my = ys.reduce((s, y) => s + y, 0) / n;
  let sxy = 0;
  let sxx = 0;
  for (let i = 0; i < n; i++) {
    sxy += (xs[i] - mx) * (ys[i] - my);
    sxx += (xs[i] - mx) ** 2;
  }
  const b = sxx === 0 ? NaN : sxy / sxx;
  return { a: my - b * mx, b };
}

async function parent(): Promise<void> {
  const fail = cliFail('bench/streams', USAGE);
  const args = parseArgs(process.argv.slice(2), new Set(['quick', 'help']), new Set(['streams', 'steps', 'per-connection', 'clients', 'engine', 'redis', 'gateways', 'transport', 'settle-seconds', 'out']), fail);
  if (args.help === true) {
    process.stdout.write(`${USAGE}\n`);
    return;
  }
  const quick = args.quick === true;
  const a = new ArgReader(args, fail);
  const streams = a.count('streams', quick ? 2000 : 20_000);
  const steps = a.int('steps', quick ? 2 : 4, 1, 100);
  const perConnection = a.int('per-connection', 100, 1, 100_000);
  const clients = a.int('clients', Math.max(1, Math.floor(os.availableParallelism() / 2)), 1, 256);
  const engine = a.str('engine') ?? 'fast';
  const redisUrl = a.str('redis') ?? null;
  const gateways = a.int('gateways', 1, 1, 256);
  const settleSeconds = a.num('settle-seconds', 2, 0, 60);
  const transport = a.str('transport') ?? 'grpc';
  if (transport !== 'grpc' && transport !== 'websocket') fail(`--transport must be grpc or websocket, got ${JSON.stringify(transport)}`);
  const run = new ResultRun({ out: args.out, name: 'streams', fail });
  const out = (s: string) => process.stdout.write(`${s}\n`);
  out(`machine: ${describeMachine(run.machine)}`);
  out(`server: ${redisUrl === null ? 'embedded hub' : 'Redis hub'}, ${gateways} gateway process${gateways > 1 ? 'es' : ''}, engine ${engine}; ${streams} idle device streams in ${steps} steps, ${transport === 'websocket' ? 'over WebSocket, a socket each' : `${perConnection} per HTTP/2 connection`}, over ${clients} client processes`);

  const server = await startChildServer(engine, [], redisUrl, { gateways, web: transport === 'websocket' });
  const streamAddress = transport === 'websocket' ? server.webAddress! : server.address;
  const procs: ReturnType<typeof fork>[] = [];
  const settle = () => new Promise((r) => setTimeout(r, settleSeconds * 1000));
  const points: { streams: number; connections: number; serverRssBytes: number; clientRssBytes: number }[] = [];
  try {
    const self = fileURLToPath(import.meta.url);
    for (let i = 0; i < clients; i++) procs.push(fork(self, ['--worker'], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] }));
    await settle();
    points.push({ streams: 0, connections: 0, serverRssBytes: server.rssBytes(), clientRssBytes: 0 });
    const secret = server.authority.secretForDev();
    const clientRss = new Array<number>(clients).fill(0);
    let opened = 0;
    for (let step = 1; step <= steps; step++) {
      const upTo = Math.round((streams * step) / steps);
      const ids = Array.from({ length: upTo - opened }, (_, i) => `idle-${opened + i}`);
      const per = Math.ceil(ids.length / clients);
      // Consecutive ids per client, so connections hold `perConnection` streams each.
      await Promise.all(procs.map((p, c) => new Promise<void>((resolve, reject) => {
        const slice = ids.slice(c * per, (c + 1) * per);
        if (slice.length === 0) return resolve();
        p.once('message', (m: FromWorker) => {
          if (m.t === 'failed') return reject(new Error(`bench/streams: a client failed: ${m.error}`));
          clientRss[c] = m.rssBytes;
          resolve();
        });
        p.send({ t: 'open', address: streamAddress, secret, ids: slice, perConnection, first: opened + c * per } satisfies ToWorker);
      })));
      opened = upTo;
      await settle();
      const connections = transport === 'websocket' ? opened : Math.ceil(opened / perConnection);
      const rss = server.rssBytes();
      points.push({ streams: opened, connections, serverRssBytes: rss, clientRssBytes: clientRss.reduce((s, x) => s + x, 0) });
      note(`${opened} streams over ~${connections} connections: server RSS ${(rss / 2 ** 20).toFixed(1)} MiB`);
    }
    const { a: base, b: perStream } = fit(points.map((p) => p.streams), points.map((p) => p.serverRssBytes));
    out('');
    out('| streams | connections | server RSS MiB | per stream so far (KiB) |');
    out('|---:|---:|---:|---:|');
    for (const p of points) out(`| ${p.streams} | ${p.connections} | ${(p.serverRssBytes / 2 ** 20).toFixed(1)} | ${p.streams === 0 ? '–' : ((p.serverRssBytes - points[0].serverRssBytes) / p.streams / 1024).toFixed(2)} |`);
    out('');
    out(`server memory per idle stream (slope): ${(perStream / 1024).toFixed(2)} KiB (target <= 10 KB: ${perStream <= 10_000 ? 'met' : 'NOT met'}); at rest ${(base / 2 ** 20).toFixed(1)} MiB`);
    run.write({ kind: 'streams', startedAt: run.startedAt.toISOString(), machine: run.machine, command: run.command, engine, mode: redisUrl === null ? 'embedded' : 'redis', transport, gateways, streams, steps, perConnection, clients, points, perStreamBytes: perStream, restBytes: base });
  } finally {
    for (const p of procs) p.send({ t: 'exit' } satisfies ToWorker);
    await server.stop();
  }
}

if (process.argv.includes('--worker')) void worker();
else runMain('bench/streams', parent);
