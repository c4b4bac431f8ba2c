/**
 * Location updates on device streams, whole node: the server in a child process (embedded or
 * Redis, one or several gateway processes), load processes that each hold device streams and
 * write `location` messages on them, in rounds. The load speaks gRPC itself (a Connect request,
 * length-prefixed messages, `--per-write` of them in one DATA frame; default 1, as a phone sends
 * them), since grpc-js's client costs more per message than the server does and would be what the
 * benchmark measured. `--client raw` (the default) writes the HTTP/2 frames itself
 * (bench/lib/raw-h2.ts), many frames to a socket write, paced by the server's flow-control windows:
 * node:http2's client (`--client http2`, one write in flight per stream) took about as much CPU per
 * message as the server, so a host's load could not offer what a node of as many cores takes. The
 * rate counts the messages the transport took in the round (raw: those the windows admitted). Beside it: what the hub applied (the gateways coalesce a device's updates between flushes, so
 * fewer), server and client CPU, and the server's CPU per update. UpdateLocations batches are
 * measured by bench/service.ts.
 *
 *   node dist/bench/stream-locations.js [--client raw|http2] [--devices N] [--workers W] [--connections C] [--rounds R]
 *     [--seconds S] [--per-write K] [--engine fast|auto] [--redis URL] [--gateways N] [--partitions K] [--server-cpus LIST]
 *     [--load-cpus LIST] [--out FILE] [--quick]
 */
import { fork } from 'node:child_process';
import http2 from 'node:http2';
import os from 'node:os';
import { fileURLToPath } from 'node:url';
import { create, toBinary } from '@bufbuild/protobuf';
import { ConnectRequestSchema } from '../api/gen/ambit/v1/device_pb.js';
import { SCOPES } from '../services/edge/auth.js';
import { grpcMessages } from '../services/edge/raw-stream.js';
import { Prng } from '../src/workload/prng.js';
import { ArgReader, cliFail, parseArgs, runMain } from './lib/args.js';
import { describeMachine } from './lib/machine.js';
import { ResultRun } from './lib/result-file.js';
import { cpuLists, startChildServer } from './lib/service-server.js';
import type { RawH2Connection } from './lib/raw-h2.js';
import { summarize } from './lib/stats.js';

const USAGE = `usage: node dist/bench/stream-locations.js [--client raw|http2] [--devices N] [--workers W] [--connections C] [--rounds R] [--seconds S] [--per-write K]
  [--engine fast|rtree|auto] [--redis URL] [--geo-shards K] [--geo-cell-deg D] [--gateways N] [--partitions K] [--server-cpus LIST] [--load-cpus LIST] [--seed N] [--out FILE] [--quick]
Defaults: 4000 device streams over W load processes (half the cores), 8 HTTP/2 connections each; 5 rounds of 3 s after a
warm-up round; one message per DATA frame (--per-write K: K messages in each); engine fast; embedded, one gateway process.
--server-profile DIR: the server's processes write V8 CPU profiles there when they exit.
--client raw (default): the load writes HTTP/2 frames itself, paced by the server's windows; http2: node:http2's client,
one write in flight per stream.
--server-cpus LIST, --load-cpus LIST: confine the server's processes, or the load's, to those CPUs (taskset lists).
--quick: 400 streams, 1 load process, 2 rounds of 1 s.`;

interface Init {
  client: 'raw' | 'http2';
  address: string;
  secret: string;
  ids: string[];
  connections: number;
  perWrite: number;
  seed: number;
}
type ToWorker = { t: 'init'; init: Init } | { t: 'run'; round: number; seconds: number } | { t: 'exit' };
type FromWorker = { t: 'ready'; cpuSeconds: number } | { t: 'ran'; round: number; sent: number; cpuSeconds: number } | { t: 'failed'; error: string };

const cpuSeconds = (): number => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1e6;
};

/** A ConnectRequest as a gRPC length-prefixed message (the framing the gateway writes notifications with). */
function grpcFrame(m: Parameters<typeof create<typeof ConnectRequestSchema>>[1]): Buffer {
  return grpcMessages([toBinary(ConnectRequestSchema, create(ConnectRequestSchema, m))]);
}

/** `perWrite` location frames in one buffer, for positions around a city; `n` such buffers. */
function locationWrites(rng: Prng, n: number, perWrite: number): Buffer[] {
  return Array.from({ length: n }, () =>
    grpcMessages(Array.from({ length: perWrite }, () => toBinary(ConnectRequestSchema, create(ConnectRequestSchema, { message: { case: 'location', value: { lat: 48.1 + rng.float() * 0.1, lon: 11.5 + rng.float() * 0.1 } } })))),
  );
}

async function worker(init: Init, send: (m: FromWorker) => void, on: (f: (m: ToWorker) => void) => void): Promise<void> {
  if (init.client === 'raw') return rawWorker(init, send, on);
  const { TokenAuthority } = await import('../services/edge/auth.js');
  const authority = new TokenAuthority(init.secret);
  const sessions = Array.from({ length: init.connections }, () => http2.connect(`http://${init.address}`));
  await Promise.all(sessions.map((c) => new Promise<void>((resolve, reject) => c.once('connect', () => resolve()).once('error', reject))));
  const hello = grpcFrame({ message: { case: 'hello', value: { resumeToken: '' } } });
  const streams: http2.ClientHttp2Stream[] = [];
  for (let i = 0; i < init.ids.length; i++) {
    const token = authority.issue({ subject: init.ids[i], scopes: [SCOPES.device], ttlSeconds: 3600 });
    const st = sessions[i % sessions.length].request({ ':method': 'POST', ':path': '/ambit.v1.DeviceService/Connect', 'content-type': 'application/grpc', te: 'trailers', authorization: `Bearer ${token}` });
    // The welcome (and anything else) is read and dropped; a stream that ends early is an error.
    await new Promise<void>((resolve, reject) => {
      st.once('data', () => resolve());
      st.once('error', reject);
      st.once('close', () => reject(new Error(`stream of ${init.ids[i]} closed (code ${st.rstCode})`)));
      st.write(hello);
    });
    st.removeAllListeners('close');
    st.on('data', () => {});
    st.on('close', () => {
      if (st.rstCode !== http2.constants.NGHTTP2_NO_ERROR) process.stderr.write(`bench/stream-locations: stream of ${init.ids[i]} closed (code ${st.rstCode})\n`);
    });
    streams.push(st);
  }
  const writes = locationWrites(new Prng(init.seed, 7), 256, init.perWrite);
  on((m) => {
    if (m.t === 'exit') {
      for (const st of streams) st.close();
      for (const c of sessions) c.close();
      process.exit(0);
    }
    if (m.t !== 'run') return;
    let running = true;
    let sent = 0;
    let k = 0;
    // One write in flight per stream: each write (of --per-write messages) goes out in a DATA
    // frame of its own, as a phone's updates do; the next follows once the transport took it.
    const pump = (i: number): void => {
      if (!running) return;
      streams[i].write(writes[k++ & 255], () => {
        sent += init.perWrite;
        pump(i);
      });
    };
    for (let i = 0; i < streams.length; i++) pump(i);
    setTimeout(() => {
      running = false;
      send({ t: 'ran', round: m.round, sent, cpuSeconds: cpuSeconds() });
    }, m.seconds * 1000);
  });
  send({ t: 'ready', cpuSeconds: cpuSeconds() });
}

/**
 * The same streams and messages from a client that writes HTTP/2 frames itself (bench/lib/raw-h2.ts):
 * many DATA frames (one message each) to a socket write, paced by the server's flow-control
 * windows instead of one write in flight per stream, so a load process offers several times what
 * node:http2's client can. The server reads the same frames either way.
 */
async function rawWorker(init: Init, send: (m: FromWorker) => void, on: (f: (m: ToWorker) => void) => void): Promise<void> {
  const { TokenAuthority } = await import('../services/edge/auth.js');
  const { RawH2Connection } = await import('./lib/raw-h2.js');
  const authority = new TokenAuthority(init.secret);
  const colon = init.address.lastIndexOf(':');
  const host = init.address.slice(0, colon);
  const port = Number(init.address.slice(colon + 1));
  const writes = locationWrites(new Prng(init.seed, 7), 256, init.perWrite);
  const longest = Math.max(...writes.map((w) => w.length));
  // One write is one DATA frame: past HTTP/2's default frame size it would need several.
  if (longest > 16_384) throw new Error(`--per-write ${init.perWrite} makes DATA frames of ${longest} bytes, more than the 16384 an HTTP/2 frame holds by default; use fewer, or --client http2`);
  // No connection without streams (a worker may get fewer devices than connections).
  const conns = await Promise.all(Array.from({ length: Math.min(init.connections, init.ids.length) }, () => RawH2Connection.connect(host, port)));
  const ids: number[][] = conns.map(() => []);
  const hello = [grpcFrame({ message: { case: 'hello', value: { resumeToken: '' } } })];
  /** Resolves at the connection's next frames (a window opening), rejects once it failed. */
  const progress = (c: RawH2Connection): Promise<void> =>
    new Promise<void>((resolve, reject) => {
      c.onProgress = () => {
        c.onProgress = () => {};
        if (c.error !== null) reject(c.error);
        else resolve();
      };
    });
  for (let i = 0; i < init.ids.length; i++) {
    const c = i % conns.length;
    const token = authority.issue({ subject: init.ids[i], scopes: [SCOPES.device], ttlSeconds: 3600 });
    const id = conns[c].open([
      [':method', 'POST'],
      [':scheme', 'http'],
      [':path', '/ambit.v1.DeviceService/Connect'],
      [':authority', init.address],
      ['content-type', 'application/grpc'],
      ['te', 'trailers'],
      ['authorization', `Bearer ${token}`],
    ]);
    ids[c].push(id);
    // Thousands of hellos on one connection can spend its window before the server opens it again.
    while (conns[c].writeData([id], 0, 1, hello, 0).sent !== 1) await progress(conns[c]);
  }
  // Every stream's welcome (the server's first message) before the rounds.
  await Promise.all(conns.map((c, k) => c.until(() => ids[k].every((id) => c.received(id) > 0))));
  const BATCH = 512;
  const cursor = conns.map(() => 0);
  on((m) => {
    if (m.t === 'exit') {
      for (const c of conns) c.close();
      process.exit(0);
    }
    if (m.t !== 'run') return;
    let running = true;
    let sent = 0;
    const pump = (k: number): void => {
      const c = conns[k];
      // A failed connection (reset, GOAWAY) sends no more; the round reports its error.
      if (!running || c.error !== null) return;
      const r = c.writeData(ids[k], cursor[k], BATCH, writes, sent);
      cursor[k] = (cursor[k] + r.sent) % ids[k].length;
      sent += r.sent * init.perWrite;
      if (r.full) void c.drained().then(() => pump(k));
      else if (r.sent < BATCH) {
        // A window is shut: go on when the server opens one (a WINDOW_UPDATE arrives); a failed
        // connection is reported at the round's end.
        progress(c).then(() => setImmediate(() => pump(k)), () => {});
      } else setImmediate(() => pump(k));
    };
    for (let k = 0; k < conns.length; k++) pump(k);
    setTimeout(() => {
      running = false;
      for (const c of conns) if (c.error !== null) process.stderr.write(`bench/stream-locations: ${c.error.message}\n`);
      send({ t: 'ran', round: m.round, sent, cpuSeconds: cpuSeconds() });
    }, m.seconds * 1000);
  });
  send({ t: 'ready', cpuSeconds: cpuSeconds() });
}

async function parent(): Promise<void> {
  const fail = cliFail('bench/stream-locations', USAGE);
  const args = parseArgs(process.argv.slice(2), new Set(['quick', 'help']), new Set(['client', 'devices', 'workers', 'connections', 'per-write', 'rounds', 'seconds', 'engine', 'redis', 'gateways', 'partitions', 'geo-shards', 'geo-cell-deg', 'server-cpus', 'load-cpus', 'seed', 'out', 'server-profile']), fail);
  if (args.help === true) {
    process.stdout.write(`${USAGE}\n`);
    return;
  }
  const quick = args.quick === true;
  const a = new ArgReader(args, fail);
  const devices = a.count('devices', quick ? 400 : 4000);
  const workers = a.int('workers', quick ? 1 : Math.max(1, Math.floor(os.availableParallelism() / 2)), 1, 256);
  const connections = a.int('connections', 8, 1, 10_000);
  const perWrite = a.int('per-write', 1, 1, 10_000);
  const clientArg = a.str('client') ?? 'raw';
  if (clientArg !== 'raw' && clientArg !== 'http2') fail(`--client must be raw or http2, got ${clientArg}`);
  const client: Init['client'] = clientArg === 'http2' ? 'http2' : 'raw';
  const rounds = a.int('rounds', quick ? 2 : 5, 1, 100);
  const seconds = a.num('seconds', quick ? 1 : 3, 0.2, 600);
  const engine = a.str('engine') ?? 'fast';
  const redisUrl = a.str('redis') ?? null;
  const gateways = a.int('gateways', 1, 1, 256);
  const partitions = a.int('partitions', 0, 0, 64);
  if (partitions > 0 && redisUrl !== null) fail('--partitions is for the embedded hub (no --redis)');
  const geoShards = a.int('geo-shards', 0, 0, 64);
  if (geoShards > 0 && redisUrl === null) fail('--geo-shards needs --redis');
  const geo = geoShards === 0 ? undefined : { shards: geoShards, wide: 1, cellDeg: a.num('geo-cell-deg', 0.01, 0.001, 30), guardM: 100, layout: 'stripes' as const };
  const seed = a.int('seed', 1, 0, 0xffffffff);
  const { serverCpus, loadCpus } = cpuLists(a, fail);
  const run = new ResultRun({ out: args.out, name: 'stream-locations', fail });
  const out = (s: string) => process.stdout.write(`${s}\n`);
  out(`machine: ${describeMachine(run.machine)}; load average ${os.loadavg().map((l) => l.toFixed(2)).join(' ')} before the run`);
  out(`server: role all, ${redisUrl === null ? 'embedded hub' : 'Redis hub'}${geo === undefined ? '' : ` sharded by space over ${geo.shards} geographic shards (stripes of ${geo.cellDeg}°, guard ${geo.guardM} m) + 1 wide`}, ${gateways} gateway process${gateways > 1 ? 'es' : ''}${partitions > 0 ? `, the hub split by device over ${partitions} partition threads` : ''}, engine ${engine}${serverCpus === null ? '' : `, on CPUs ${serverCpus}`}; load: ${workers} processes (${client === 'raw' ? 'HTTP/2 frames written by the load itself, paced by the windows' : 'node:http2, one write in flight per stream'}), ${devices} device streams over ${workers * connections} HTTP/2 connections, ${perWrite} message${perWrite > 1 ? 's' : ''} per DATA frame${loadCpus === null ? '' : `, on CPUs ${loadCpus}`}; ${rounds} rounds of ${seconds} s after a warm-up round`);

  const profileDir = a.str('server-profile') ?? null;
  const server = await startChildServer(engine, profileDir === null ? [] : ['--cpu-prof', `--cpu-prof-dir=${profileDir}`], redisUrl, { gateways, partitions, cpus: serverCpus, geo });
  const procs: ReturnType<typeof fork>[] = [];
  try {
    const secret = server.authority.secretForDev();
    const self = fileURLToPath(import.meta.url);
    const per = Math.ceil(devices / workers);
    const t0 = performance.now();
    await Promise.all(
      Array.from({ length: workers }, (_, w) => {
        const proc = fork(self, ['--worker'], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'], serialization: 'advanced' });
        procs.push(proc);
        const ids = Array.from({ length: Math.max(0, Math.min(per, devices - w * per)) }, (_, i) => `loc-${w * per + i}`);
        proc.send({ t: 'init', init: { client, address: server.address, secret, ids, connections, perWrite, seed: seed + w } } satisfies ToWorker);
        return new Promise<void>((resolve, reject) => {
          proc.once('message', (m: FromWorker) => (m.t === 'ready' ? resolve() : reject(new Error(`worker: ${JSON.stringify(m)}`))));
          proc.once('exit', (code) => reject(new Error(`bench/stream-locations: a load process exited (${code}) before it was ready`)));
        });
      }),
    );
    out(`${devices} device streams open in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
    out('');
    out('| round | updates/s sent | applied by the hub/s | server cores | load cores | server µs/update |');
    out('|---:|---:|---:|---:|---:|---:|');
    const lastCpu = new Map<ReturnType<typeof fork>, number>();
    const results: { round: number; updatesPerSecond: number; appliedPerSecond: number; serverCores: number; loadCores: number; serverUsPerUpdate: number }[] = [];
    for (let r = -1; r < rounds; r++) {
      const s0 = await server.ops.stats();
      const c0 = server.cpuSeconds();
      const w0 = performance.now();
      const ran = await Promise.all(
        procs.map(
          (p) =>
            new Promise<Extract<FromWorker, { t: 'ran' }>>((resolve, reject) => {
              const gone = (code: number | null) => reject(new Error(`bench/stream-locations: a load process exited (${code}) during round ${r + 1}`));
              const f = (m: FromWorker) => {
                if (m.t === 'ran' && m.round === r) {
                  p.off('message', f);
                  p.off('exit', gone);
                  resolve(m);
                }
              };
              p.on('message', f);
              p.once('exit', gone);
              p.send({ t: 'run', round: r, seconds } satisfies ToWorker);
            }),
        ),
      );
      const wall = (performance.now() - w0) / 1000;
      const serverCpu = server.cpuSeconds() - c0;
      const s1 = await server.ops.stats();
      let loadCpu = 0;
      for (let i = 0; i < procs.length; i++) {
        loadCpu += ran[i].cpuSeconds - (lastCpu.get(procs[i]) ?? 0);
        lastCpu.set(procs[i], ran[i].cpuSeconds);
      }
      if (r < 0) continue; // warm-up: fills the windows, compiles the hot paths
      const sent = ran.reduce((n, x) => n + x.sent, 0);
      const row = {
        round: r + 1,
        updatesPerSecond: sent / seconds,
        appliedPerSecond: (s1.locationUpdates - s0.locationUpdates) / wall,
        serverCores: serverCpu / wall,
        loadCores: loadCpu / wall,
        serverUsPerUpdate: (serverCpu * 1e6) / sent,
      };
      results.push(row);
      out(`| ${row.round} | ${Math.round(row.updatesPerSecond).toLocaleString('en-US')} | ${Math.round(row.appliedPerSecond).toLocaleString('en-US')} | ${row.serverCores.toFixed(2)} | ${row.loadCores.toFixed(2)} | ${row.serverUsPerUpdate.toFixed(2)} |`);
    }
    const rate = summarize(results.map((x) => x.updatesPerSecond));
    out('');
    out(`updates/s sent: min ${Math.round(rate.min).toLocaleString('en-US')}, median ${Math.round(rate.median).toLocaleString('en-US')}, p99 ${Math.round(rate.p99).toLocaleString('en-US')} over ${rounds} rounds`);
    run.write({ kind: 'stream-locations', startedAt: run.startedAt.toISOString(), machine: run.machine, command: run.command, engine, mode: redisUrl === null ? 'embedded' : 'redis', geo: geo ?? null, gateways, partitions, serverCpus, loadCpus, client, devices, workers, connections, perWrite, rounds, seconds, seed, updatesPerSecond: rate, results });
    out(`results: ${run.shown}`);
  } finally {
    for (const p of procs) if (p.connected) p.send({ t: 'exit' } satisfies ToWorker);
    await server.stop();
  }
}

if (process.argv.includes('--worker')) {
  process.once('message', (m: ToWorker) => {
    if (m.t !== 'init') return;
    worker(
      m.init,
      (x) => process.send!(x),
      (f) => process.on('message', f),
    ).catch((err: unknown) => {
      process.send!({ t: 'failed', error: String(err) } satisfies FromWorker);
      process.exit(1);
    });
  });
} else {
  runMain('bench/stream-locations', parent);
}
