/**
 * The service over loopback gRPC, through the SDK, against `node dist/services/process/main.js` in a child
 * process whose CPU time is read from /proc:
 *   (a) publish → notification latency and events/s at a fixed open-loop publish rate, with
 *       subscriptions created through device streams by connected devices;
 *   (b) location updates/s through device streams (many devices, SDK-coalesced) and through
 *       UpdateLocations batches, also per second of server CPU ("per core").
 * Client and server share the machine: the client's CPU is reported too.
 *
 *   npm run bench:service                     full: 1000 devices × 100 subscriptions, 1000 events/s
 *   npm run bench:service -- --quick          < 30 s
 *   node dist/bench/service.js --help
 */
import os from 'node:os';
import { ArgReader, type Fail, cliFail, parseArgs, runMain } from './lib/args.js';
import { describeMachine } from './lib/machine.js';
import { note } from './lib/progress.js';
import { type BatchParams, type LatencyParams, type PublishMode, type RateResult, type StreamParams, runBatches, runLatency, runStreams, setupSubscribers } from './lib/service-load.js';
import { startChildServer } from './lib/service-server.js';
import { sinkValue } from './lib/sink.js';
import type { Summary } from './lib/stats.js';
import { ResultRun } from './lib/result-file.js';

const USAGE = `usage: node dist/bench/service.js [--quick] [--out PATH] [--engine fast|rtree|auto] [--redis URL] [--seed N]
  [--devices N] [--subs-per-device N] [--kinds N] [--rate EVENTS_PER_S] [--seconds S] [--connections N]
  [--publish stream,unary] [--movers N] [--rounds N] [--round-seconds S] [--fleet N] [--batch N] [--batch-streams N]
  [--skip latency,streams,batches] [--server-node-args cpu-prof,cpu-prof-dir=DIR] [--gateways N]
Defaults: 1000 devices × 100 subscriptions (100k; each wants one of --kinds 100 event kinds, a level and a
200–1000 m circle around its device), 1000 events/s for 10 s after 2 s of warm-up, published through a
PublishStream and then with unary Publish calls;
1000 streaming devices and 100k fleet devices in 10k batches, 5 rounds of 3 s after a warm-up round.
--quick: 200 × 50 subscriptions, 3 s; 500 streaming devices, 20k fleet devices; 3 rounds of 1.5 s.`;

const fail: Fail = cliFail('bench/service', USAGE);

const args = parseArgs(
  process.argv.slice(2),
  new Set(['quick', 'help']),
  new Set(['out', 'engine', 'redis', 'seed', 'devices', 'subs-per-device', 'rate', 'seconds', 'connections', 'movers', 'rounds', 'round-seconds', 'fleet', 'batch', 'batch-streams', 'skip', 'publish', 'kinds', 'server-node-args', 'gateways']),
  fail,
);
if (args.help === true) {
  process.stdout.write(`${USAGE}\n`);
  process.exit(0);
}
const quick = args.quick === true;
const arg = new ArgReader(args, fail);
const seed = arg.int('seed', 1, 0, 0xffffffff);
// Flags without their leading dashes, comma-separated (the shared parser takes no value that starts with --).
const serverNodeArgs = typeof args['server-node-args'] === 'string' ? args['server-node-args'].split(',').filter((a) => a !== '').map((a) => `--${a.replace(/^-+/, '')}`) : [];
const engine = typeof args.engine === 'string' ? args.engine : 'fast';
const redisUrl = typeof args.redis === 'string' ? args.redis : null;
if (redisUrl !== null && !/^rediss?:\/\//.test(redisUrl)) fail(`--redis must be a redis:// URL, got ${JSON.stringify(redisUrl)}`);
const gateways = arg.int('gateways', 1, 1, 256);
const publishModes: PublishMode[] = typeof args.publish === 'string' ? (args.publish.split(',') as PublishMode[]) : ['stream', 'unary'];
for (const m of publishModes) if (m !== 'stream' && m !== 'unary') fail(`--publish takes stream, unary; got ${JSON.stringify(m)}`);
const skip = new Set(typeof args.skip === 'string' ? args.skip.split(',') : []);
for (const s of skip) if (!['latency', 'streams', 'batches'].includes(s)) fail(`--skip takes latency, streams, batches; got ${JSON.stringify(s)}`);
const rounds = arg.int('rounds', quick ? 3 : 5, 1, 100);
const roundSeconds = arg.num('round-seconds', quick ? 1.5 : 3, 0.2, 600);
const connections = arg.int('connections', 16, 1, 100_000);

const latency: LatencyParams = {
  devices: arg.int('devices', quick ? 200 : 1000, 1, 100_000),
  subscriptionsPerDevice: arg.int('subs-per-device', quick ? 50 : 100, 1, 1000),
  rate: arg.num('rate', 1000, 1, 1_000_000),
  warmupSeconds: quick ? 1 : 2,
  seconds: arg.num('seconds', quick ? 3 : 10, 0.5, 3600),
  connections,
  kinds: arg.int('kinds', 100, 1, 1_000_000),
  seed,
};
const streams: StreamParams = { devices: arg.int('movers', quick ? 500 : 1000, 1, 100_000), connections, rounds, seconds: roundSeconds, seed };
const batches: BatchParams = {
  devices: arg.int('fleet', quick ? 20_000 : 100_000, 1, 10_000_000),
  batch: arg.int('batch', 10_000, 1, 10_000),
  streams: arg.int('batch-streams', 2, 1, 64),
  rounds,
  seconds: roundSeconds,
  seed,
};

const out = (s: string) => process.stdout.write(`${s}\n`);
const f = (n: number, d = 0) => (Number.isFinite(n) ? n.toLocaleString('en-US', { maximumFractionDigits: d, minimumFractionDigits: d }) : '-');
const ms = (s: Summary) => `min ${f(s.min, 2)}  median ${f(s.median, 2)}  p99 ${f(s.p99, 2)}  max ${f(s.max, 2)} ms  (n=${f(s.n)})`;
const rate = (s: Summary) => `min ${f(s.min)}  median ${f(s.median)}  p99 ${f(s.p99)}`;

async function main(): Promise<void> {
  const run = new ResultRun({ out: args.out, defaultFile: quick ? 'bench/out/service-quick.json' : 'bench/results/service.json', fail });
  const machine = run.machine;
  const startedAt = run.startedAt.toISOString();
  out(`machine: ${describeMachine(machine)}; load average ${os.loadavg().map((l) => l.toFixed(2)).join(' ')} before the run (other processes share these cores)`);
  const loadBefore = os.loadavg();
  out(`server: the server (npm run serve) as a child process: role all, ${redisUrl === null ? 'embedded hub' : 'Redis hub'}${gateways > 1 ? `, ${gateways} gateway processes on one port beside the ${redisUrl === null ? 'hub process' : 'matcher'} (server CPU and memory summed over them)` : ''}, engine ${engine}; client: this process, SDK over loopback`);
  const t0 = performance.now();
  const server = await startChildServer(engine, serverNodeArgs, redisUrl, { gateways });
  const results: Record<string, unknown> = {};
  try {
    const s0 = await server.ops.stats();
    out(`engine: ${s0.engine} (${s0.engineDetail})`);
    if (!skip.has('latency')) {
      note(`(a) latency: ${latency.devices} devices × ${latency.subscriptionsPerDevice} subscriptions, ${latency.rate} events/s`);
      const subs = await setupSubscribers(server, latency);
      results.latencySetup = { params: latency, subscriptions: subs.subscriptions, devices: subs.devices.length, setupSeconds: subs.setupSeconds };
      out('');
      out(`(a) publish → notification, ${f(subs.subscriptions)} subscriptions (${latency.kinds} event kinds) created through ${f(latency.devices)} device streams in ${f(subs.setupSeconds, 1)} s (${latency.connections} HTTP/2 connections), ${f(latency.rate)} events/s offered for ${latency.seconds} s after ${latency.warmupSeconds} s of warm-up`);
      for (const mode of publishModes) {
        const r = await runLatency(server, subs, latency, mode);
        results[`latency-${mode}`] = r;
        out(`  publisher: ${mode === 'stream' ? 'one long-lived BulkPublish stream (PublishStream)' : 'one unary Publish call per event'}`);
        out(`    events/s published   ${f(r.eventsPerSecond, 1)}  (${f(r.eventsPublished)} of ${f(r.eventsSent)}, ${r.publishErrors} errors), ${f(r.avgReached, 2)} subscriptions reached per event`);
        out(`    notifications/s      ${f(r.notificationsPerSecond, 1)}  (${f(r.notifications)}; ${f(r.notificationsPerEvent, 2)} per event; all delivered ${f(r.drainSeconds, 2)} s after the last publish)`);
        out(`    latency              ${ms(r.latencyMs)}   target p99 <= 10 ms: ${r.latencyMs.p99 <= 10 ? 'met' : 'NOT met'}`);
        out(`    from schedule        ${ms(r.latencyFromScheduleMs)}`);
        if (r.publishRpcMs !== null) out(`    Publish call         ${ms(r.publishRpcMs)}`);
        out(`    CPU                  server ${f(r.window.serverCpuSeconds / r.window.seconds, 2)} cores, client ${f(r.window.clientCpuSeconds / r.window.seconds, 2)} cores; server RSS ${f(r.serverRssBytes / 2 ** 20)} MiB`);
      }
      // Subscribers stay connected through (b): the server holds their streams as it would in production.
      if (!skip.has('streams')) await streamsPhase(server);
      await Promise.all(subs.devices.map((d) => d.close()));
    } else if (!skip.has('streams')) await streamsPhase(server);
    if (!skip.has('batches')) {
      note(`(b2) UpdateLocations: ${batches.devices} devices, ${batches.batch} per message, ${batches.streams} streams`);
      const r = await runBatches(server, batches);
      results.batches = { params: batches, ...r };
      out('');
      out(`(b2) location updates through UpdateLocations, ${f(batches.batch)} per message, ${batches.streams} concurrent streams, ${f(batches.devices)} devices, ${rounds} rounds of ${roundSeconds} s`);
      printRate(r);
    }
    const s1 = await server.ops.stats();
    results.serverStats = s1;
  } finally {
    await server.stop();
  }
  const file = { kind: 'service', startedAt, seconds: (performance.now() - t0) / 1000, quick, seed, engine, mode: redisUrl === null ? 'embedded' : 'redis', gateways, serverNodeArgs, machine, loadAverage: { before: loadBefore, after: os.loadavg() }, results, sink: sinkValue() };
  run.write(file);
  out('');
  out(`wrote ${run.shown} (${f((performance.now() - t0) / 1000, 1)} s)`);
  process.exit(0);

  async function streamsPhase(srv: typeof server): Promise<void> {
    note(`(b1) device streams: ${streams.devices} devices`);
    const r = await runStreams(srv, streams);
    results.streams = { params: streams, ...r };
    out('');
    out(`(b1) location updates through ${f(streams.devices)} device streams (${streams.connections} HTTP/2 connections; SDK coalescing: one in flight per device), ${rounds} rounds of ${roundSeconds} s`);
    printRate(r);
  }
}

function printRate(r: RateResult): void {
  out(`    updates/s            ${rate(r.perSecond)}`);
  out(`    per server core      ${rate(r.perServerCoreSecond)}   target >= 100,000: ${r.perServerCoreSecond.median >= 100_000 ? 'met' : 'NOT met'}`);
  out(`    CPU                  server ${f(r.serverCores.median, 2)} cores, client ${f(r.clientCores.median, 2)} cores (medians)`);
}

runMain('bench/service', main);
