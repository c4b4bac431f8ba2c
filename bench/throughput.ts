/**
 * What one node delivers: a ladder of offered publish rates against the service in a child
 * process, with the load spread over worker processes so the load generator is not the limit:
 * publisher workers (one PublishStream each, open loop) and subscriber workers (connected devices
 * holding the subscriptions, acking what they get). Each event carries its publish time, so a
 * subscriber measures publish → notification latency on the machine's one clock. Per rate step:
 * events/s published, notifications/s delivered, latency min/median/p99, server and client CPU.
 *
 *   node dist/bench/throughput.js [--rates 1000,5000,20000] [--seconds S] [--devices N]
 *     [--subs-per-device N] [--patterns-per-device N] [--kinds N] [--publishers P] [--subscribers S] [--connections C]
 *     [--engine fast|auto] [--redis URL] [--gateways N] [--out FILE] [--quick]
 */
import { fork } from 'node:child_process';
import os from 'node:os';
import { fileURLToPath } from 'node:url';
import { SCOPES } from '../services/edge/auth.js';
import { AmbitDevice, AmbitPublisher } from '../sdk/index.js';
import { Prng } from '../src/workload/prng.js';
import { ArgReader, cliFail, parseArgs, runMain } from './lib/args.js';
import { describeMachine } from './lib/machine.js';
import { note } from './lib/progress.js';
import { ResultRun } from './lib/result-file.js';
import { deviceOptions, patternsOf, place, positions, subscriptionsOf } from './lib/service-load.js';
import { cpuLists, startChildServer } from './lib/service-server.js';
import { redisCpuSeconds, startBenchRedis } from './lib/redis-nodes.js';
import type { ThroughputStep } from './lib/throughput-report.js';
import { WireDevices } from './lib/wire-device.js';

const USAGE = `usage: node dist/bench/throughput.js [--rates LIST] [--seconds S] [--devices N] [--subs-per-device N] [--patterns-per-device N] [--kinds N]
  [--publishers P] [--subscribers S] [--connections C] [--engine fast|rtree|auto] [--redis URL | --redis-nodes N] [--matcher-partitions K] [--geo-shards K] [--cities C] [--gateways N] [--fanout-shards K] [--partitions K] [--server-cpus LIST] [--load-cpus LIST] [--client wire|sdk] [--ack-delay-ms N] [--seed N] [--out FILE] [--quick]
  [--warmup S] [--server-profile DIR] [--client-profile DIR]
Defaults: rates 1000,2000,5000,10000,20000,50000,100000 events/s for 5 s each; 10000 devices x 5 subscriptions (one of 20 kinds, a level,
a 200-1000 m circle), publishers and subscribers: half the cores each (at least 1), 8 connections per subscriber.
--redis-nodes N: start Redis on this host for the run and use it: 1 = one redis-server, N >= 3 = a Redis Cluster of N masters
(AMBIT_REDIS_CLUSTER); the table adds the Redis servers' CPU (INFO cpu) and their CPU per notification.
--matcher-partitions K: with Redis, the devices split over K matcher partitions, a matcher thread each in the server (AMBIT_MATCHER_PARTITIONS).
--geo-shards K: with Redis, sharded by space over K geographic shards (AMBIT_GEO_SHARDS; --geo-wide-shards G, default 1; --geo-cell-deg D, default 1;
  --geo-guard-m M, default 500; --geo-layout stripes|sectors, default stripes), a matcher thread per shard in the server.
--cities C: devices spread over C copies of Milan's square, 1° of longitude apart (default 1); events follow the devices.
--fanout-shards K: with --gateways >= 2 and no --redis, the device logs live in K shard threads of the hub's process.
--partitions K: without --redis, the hub is split by device over K threads, each matching, storing and serving its devices (AMBIT_PARTITIONS).
--server-cpus LIST, --load-cpus LIST: confine the server's processes, or the load's, to those CPUs (taskset lists, e.g. 0-15): one
node of N cores measured on a larger host.
--client wire|sdk: the subscribers' device client: wire (default), a lean client that reads only what the benchmark needs from the
notification bytes and acks in bulk (bench/lib/wire-device.ts), so the load is not the limit; or the SDK (AmbitDevice), what apps use.
--ack-delay-ms N: the devices send acks at most every N ms (its ackDelayMs; default 0, at the end of each turn).
--warmup S: publish at the first rate for S seconds first, not reported (default 2; 0 with --quick).
--server-profile DIR, --client-profile DIR: the server's processes, or the load processes, write V8 CPU profiles there when they exit.
--quick: rates 200,500; 2 s; 500 devices x 2 subscriptions; 1 publisher, 1 subscriber.`;
const M_PER_DEG = 111_195;
/** The step number of the warm-up's events (no reported step has it). */
const WARMUP_STEP = -1_000_000;

// ---- a log-bucket histogram of milliseconds, mergeable across processes ----

const BUCKETS_PER_DECADE = 50;
const MIN_MS = 0.01;
const N_BUCKETS = BUCKETS_PER_DECADE * 8; // 0.01 ms .. 1e6 ms

function bucketOf(ms: number): number {
  if (!(ms > MIN_MS)) return 0;
  return Math.min(N_BUCKETS - 1, Math.floor(Math.log10(ms / MIN_MS) * BUCKETS_PER_DECADE));
}

/** The upper edge of a bucket, in ms: quantiles are reported within one bucket (4.7%). */
const bucketMs = (b: number): number => MIN_MS * 10 ** ((b + 1) / BUCKETS_PER_DECADE);

function quantile(h: readonly number[], total: number, q: number): number {
  if (total === 0) return NaN;
  const want = Math.ceil(q * total);
  let seen = 0;
  for (let b = 0; b < h.length; b++) {
    seen += h[b];
    if (seen >= want) return bucketMs(b);
  }
  return bucketMs(h.length - 1);
}

// ---- IPC ----

interface Init {
  address: string;
  secret: string;
  seed: number;
  kinds: number;
  subsPerDevice: number;
  /** Pattern subscriptions per device beside the filter subscriptions (service-load.ts patternsOf). */
  patternsPerDevice: number;
  connections: number;
  /** The SDK's ackDelayMs for every device. */
  ackDelayMs: number;
  /** The device client: the SDK, or the lean wire client (bench/lib/wire-device.ts). */
  client: 'sdk' | 'wire';
  ids: string[];
  lat: number[];
  lon: number[];
  /** Publisher: which stream of the seeded events it draws. */
  index: number;
}
type ToWorker = { t: 'init'; init: Init } | { t: 'run'; step: number; rate: number; seconds: number } | { t: 'report'; step: number } | { t: 'exit' };
type FromWorker =
  | { t: 'ready'; cpuSeconds: number }
  | { t: 'ran'; step: number; published: number; errors: number; cpuSeconds: number }
  | { t: 'report'; step: number; received: number; histogram: number[]; min: number; max: number; cpuSeconds: number };

const cpuSeconds = (): number => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1e6;
};
const nowMs = (): number => performance.timeOrigin + performance.now();

async function subscriberWorker(init: Init, send: (m: FromWorker) => void, on: (f: (m: ToWorker) => void) => void): Promise<void> {
  const { TokenAuthority } = await import('../services/edge/auth.js');
  const authority = new TokenAuthority(init.secret);
  const rng = new Prng(init.seed, 21 + init.index);
  const devices: AmbitDevice[] = [];
  const steps = new Map<number, { received: number; histogram: number[]; min: number; max: number }>();
  const stepOf = (s: number) => {
    let x = steps.get(s);
    if (x === undefined) steps.set(s, (x = { received: 0, histogram: new Array<number>(N_BUCKETS).fill(0), min: Infinity, max: 0 }));
    return x;
  };
  const record = (step: unknown, t: unknown): void => {
    if (typeof step !== 'number' || typeof t !== 'number') return;
    const ms = nowMs() - t;
    const x = stepOf(step);
    x.received++;
    x.histogram[bucketOf(ms)]++;
    if (ms < x.min) x.min = ms;
    if (ms > x.max) x.max = ms;
  };
  let wire: WireDevices | null = null;
  if (init.client === 'wire') wire = new WireDevices(init.address, init.connections, init.ackDelayMs, ['step', 't']);
  let next = 0;
  await Promise.all(Array.from({ length: Math.min(50, init.ids.length) }, async () => {
    for (let i = next++; i < init.ids.length; i = next++) {
      const token = authority.issue({ subject: init.ids[i], scopes: [SCOPES.device], ttlSeconds: 3600 });
      const subs = subscriptionsOf(rng, init.subsPerDevice, init.kinds);
      if (init.patternsPerDevice > 0) subs.push(...patternsOf(rng, init.patternsPerDevice, init.kinds));
      if (wire !== null) {
        await wire.connect(i, token, subs, (attrs) => record(attrs.get('step'), attrs.get('t')));
        continue;
      }
      const d = await AmbitDevice.connect(init.address, token, { ...deviceOptions(i, init.connections), ackDelayMs: init.ackDelayMs });
      await Promise.all(subs.map((s) => d.subscribe(s)));
      devices.push(d);
      void (async () => {
        for await (const n of d.notifications()) record(n.event.attributes.step, n.event.attributes.t);
      })();
    }
  }));
  on((m) => {
    if (m.t === 'report') {
      const x = stepOf(m.step);
      send({ t: 'report', step: m.step, received: x.received, histogram: x.histogram, min: x.min, max: x.max, cpuSeconds: cpuSeconds() });
    } else if (m.t === 'exit') {
      wire?.close();
      Promise.all(devices.map((d) => d.close())).finally(() => process.exit(0));
    }
  });
  send({ t: 'ready', cpuSeconds: cpuSeconds() });
}

async function publisherWorker(init: Init, send: (m: FromWorker) => void, on: (f: (m: ToWorker) => void) => void): Promise<void> {
  const { TokenAuthority } = await import('../services/edge/auth.js');
  const authority = new TokenAuthority(init.secret);
  const publisher = new AmbitPublisher(init.address, authority.issue({ subject: `bench-publisher-${init.index}`, scopes: [SCOPES.publish], ttlSeconds: 3600 }));
  const rng = new Prng(init.seed, 41 + init.index);
  let seq = 0;
  on((m) => {
    if (m.t === 'exit') {
      publisher.close();
      process.exit(0);
    }
    if (m.t !== 'run') return;
    void (async () => {
      const stream = await publisher.stream();
      const total = Math.round(m.rate * m.seconds);
      const start = performance.now();
      let i = 0;
      await new Promise<void>((resolve) => {
        // Open loop: every millisecond, send what the schedule says is due.
        const timer = setInterval(() => {
          const due = Math.min(total, Math.floor(((performance.now() - start) * m.rate) / 1000) + 1);
          for (; i < due; i++) {
            const d = rng.int(0, init.ids.length - 1);
            const r = rng.float() * 300;
            const a = rng.float() * 2 * Math.PI;
            const lat = init.lat[d] + (r * Math.cos(a)) / M_PER_DEG;
            stream.publish({
              id: `p${init.index}-${seq++}`,
              lat,
              lon: init.lon[d] + (r * Math.sin(a)) / (M_PER_DEG * Math.cos((lat * Math.PI) / 180)),
              attributes: { kind: `k${rng.int(0, init.kinds - 1)}`, level: rng.int(1, 5), step: m.step, t: nowMs() },
            });
          }
          if (i >= total) {
            clearInterval(timer);
            resolve();
          }
        }, 1);
      });
      let published = 0;
      let errors = 0;
      try {
        published = (await stream.end()).accepted;
      } catch {
        errors = total;
      }
      send({ t: 'ran', step: m.step, published, errors, cpuSeconds: cpuSeconds() });
    })();
  });
  send({ t: 'ready', cpuSeconds: cpuSeconds() });
}

// ---- the parent ----

type Step = ThroughputStep;

async function parent(): Promise<void> {
  const fail = cliFail('bench/throughput', USAGE);
  const args = parseArgs(process.argv.slice(2), new Set(['quick', 'help']), new Set(['rates', 'seconds', 'devices', 'subs-per-device', 'patterns-per-device', 'kinds', 'publishers', 'subscribers', 'connections', 'engine', 'redis', 'redis-nodes', 'matcher-partitions', 'geo-shards', 'geo-wide-shards', 'geo-cell-deg', 'geo-guard-m', 'geo-layout', 'cities', 'gateways', 'fanout-shards', 'partitions', 'server-cpus', 'load-cpus', 'ack-delay-ms', 'client', 'seed', 'out', 'server-profile', 'client-profile', 'warmup']), fail);
  if (args.help === true) {
    process.stdout.write(`${USAGE}\n`);
    return;
  }
  const quick = args.quick === true;
  const a = new ArgReader(args, fail);
  const rates = a.counts('rates', quick ? [200, 500] : [1000, 2000, 5000, 10_000, 20_000, 50_000, 100_000]);
  const seconds = a.num('seconds', quick ? 2 : 5, 0.5, 600);
  const devices = a.count('devices', quick ? 500 : 10_000);
  const subsPerDevice = a.int('subs-per-device', quick ? 2 : 5, 1, 1000);
  const kinds = a.int('kinds', 20, 1, 100_000);
  const patternsPerDevice = a.int('patterns-per-device', 0, 0, 1000);
  const half = Math.max(1, Math.floor(os.availableParallelism() / 2));
  const publishers = a.int('publishers', quick ? 1 : half, 1, 256);
  const subscribers = a.int('subscribers', quick ? 1 : half, 1, 256);
  const connections = a.int('connections', 8, 1, 10_000);
  const seed = a.int('seed', 1, 0, 0xffffffff);
  const engine = a.str('engine') ?? 'fast';
  const redisNodes = a.int('redis-nodes', 0, 0, 64);
  if (redisNodes > 0 && a.str('redis') !== undefined) fail('--redis and --redis-nodes exclude each other');
  if (redisNodes === 2) fail('--redis-nodes must be 1 (one redis-server) or at least 3 (a Redis Cluster)');
  const benchRedis = redisNodes > 0 ? await startBenchRedis(redisNodes) : null;
  const redisUrl = benchRedis?.url ?? a.str('redis') ?? null;
  const matcherPartitions = a.int('matcher-partitions', 1, 1, 64);
  if (matcherPartitions > 1 && redisUrl === null) fail('--matcher-partitions needs Redis (--redis or --redis-nodes)');
  const geoShards = a.int('geo-shards', 0, 0, 64);
  if (geoShards > 0 && (redisUrl === null || matcherPartitions > 1)) fail('--geo-shards needs Redis (--redis or --redis-nodes) and no --matcher-partitions');
  const geoLayout = a.str('geo-layout') ?? 'stripes';
  if (geoLayout !== 'stripes' && geoLayout !== 'sectors') fail(`--geo-layout must be stripes or sectors, got ${JSON.stringify(geoLayout)}`);
  const geo = geoShards === 0 ? undefined : { shards: geoShards, wide: a.int('geo-wide-shards', 1, 1, 16), cellDeg: a.num('geo-cell-deg', 1, 0.001, 30), guardM: a.num('geo-guard-m', 500, 0, 100_000), layout: geoLayout as 'stripes' | 'sectors' };
  const cities = a.int('cities', 1, 1, 64);
  const gateways = a.int('gateways', 1, 1, 256);
  const fanoutShards = a.int('fanout-shards', 0, 0, 64);
  if (fanoutShards > 0 && (gateways < 2 || redisUrl !== null)) fail('--fanout-shards needs --gateways >= 2 and no --redis (the embedded node keeps its device logs in the shards)');
  const partitions = a.int('partitions', 0, 0, 64);
  if (partitions > 0 && (fanoutShards > 0 || redisUrl !== null)) fail('--partitions needs no --redis and no --fanout-shards (each partition keeps its devices\' logs)');
  const ackDelayMs = a.int('ack-delay-ms', 0, 0, 60_000);
  const client = (a.str('client') ?? 'wire') as 'wire' | 'sdk';
  if (client !== 'wire' && client !== 'sdk') fail(`--client must be wire or sdk, got ${JSON.stringify(client)}`);
  const { serverCpus, loadCpus } = cpuLists(a, fail);
  const run = new ResultRun({ out: args.out, name: 'throughput', fail });
  // The server inherits the environment: AMBIT_DIRECT_WRITES=0 compares with notifications written through grpc-js.
  const deviceStreams = process.env.AMBIT_DEVICE_STREAMS === 'grpc-js' ? 'grpc-js' : 'http2';
  const directWrites = !['0', 'false'].includes(process.env.AMBIT_DIRECT_WRITES ?? '');
  // The server inherits this process's environment: a dedupe window other than the default is said.
  const dedupeWindowS = process.env.AMBIT_DEDUPE_WINDOW_S === undefined || process.env.AMBIT_DEDUPE_WINDOW_S === '' ? null : Number(process.env.AMBIT_DEDUPE_WINDOW_S);
  const out = (s: string) => process.stdout.write(`${s}\n`);
  out(`machine: ${describeMachine(run.machine)}; load average ${os.loadavg().map((l) => l.toFixed(2)).join(' ')} before the run`);
  out(`server: role all, ${redisUrl === null ? 'embedded hub' : `Redis hub${benchRedis === null ? '' : ` on ${benchRedis.describe}`}${matcherPartitions > 1 ? `, devices split over ${matcherPartitions} matcher partitions (a thread each)` : ''}${geo === undefined ? '' : `, sharded by space over ${geo.shards} geographic shards (${geo.layout} of ${geo.cellDeg}°, guard ${geo.guardM} m) + ${geo.wide} wide, a matcher thread each`}`}, ${gateways} gateway process${gateways > 1 ? 'es' : ''}${gateways > 1 && redisUrl === null ? (partitions > 0 ? ' beside the process of the partitions' : ' beside the hub process') : ''}${fanoutShards > 0 ? `, device logs in ${fanoutShards} fan-out shard threads` : ''}${partitions > 0 ? `, the hub split by device over ${partitions} partition threads` : ''}${deviceStreams === 'http2' ? '' : `, device streams through grpc-js (AMBIT_DEVICE_STREAMS=grpc-js${directWrites ? '' : ', AMBIT_DIRECT_WRITES=0: notifications one by one'})`}, engine ${engine}; load: ${publishers} publisher and ${subscribers} subscriber processes (${client === 'wire' ? 'lean wire' : 'SDK'} device client)${serverCpus === null ? '' : `; server on CPUs ${serverCpus}`}${loadCpus === null ? '' : `, load on CPUs ${loadCpus}`}${ackDelayMs === 0 ? '' : `; devices ack every ${ackDelayMs} ms`}${dedupeWindowS === null ? '' : `; event ids deduplicated over ${dedupeWindowS} s (AMBIT_DEDUPE_WINDOW_S)`}`);
  out(`workload: ${devices} devices${cities > 1 ? ` in ${cities} cities (Milan's square, 1° apart)` : ''} x ${subsPerDevice} subscriptions (one of ${kinds} kinds, a level 1-5, 200-1000 m around the device)${patternsPerDevice > 0 ? ` and ${patternsPerDevice} pattern subscriptions (a kind within 200-1000 m after another of the same level within 500 m and 2 s)` : ''}, events within 300 m of a random device, ${seconds} s per rate`);

  const warmupSeconds = a.num('warmup', quick ? 0 : 2, 0, 600);
  const profileDir = a.str('server-profile') ?? null;
  const clientProfileDir = a.str('client-profile') ?? null;
  const server = await startChildServer(engine, profileDir === null ? [] : ['--cpu-prof', `--cpu-prof-dir=${profileDir}`], redisUrl, { gateways, fanoutShards, partitions, cpus: serverCpus, redisCluster: benchRedis?.cluster ?? false, matcherPartitions, geo, metrics: redisUrl === null });
  const workers: { proc: ReturnType<typeof fork>; kind: 'publisher' | 'subscriber' }[] = [];
  const steps: Step[] = [];
  try {
    const ids = Array.from({ length: devices }, (_, i) => `dev-${i}`);
    const { lat, lon } = positions(devices, new Prng(seed, 11), cities);
    await place(server, ids, lat, lon);
    const secret = server.authority.secretForDev();
    const pubCpu: number[] = [];
    const self = fileURLToPath(import.meta.url);
    const start = (kind: 'publisher' | 'subscriber', index: number, slice: string[]) => {
      const execArgv = clientProfileDir === null ? [] : ['--cpu-prof', `--cpu-prof-dir=${clientProfileDir}`, `--cpu-prof-name=${kind}-${index}.cpuprofile`];
      const proc = fork(self, ['--worker', kind], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'], serialization: 'advanced', execArgv });
      workers.push({ proc, kind });
      const init: Init = { address: server.address, secret, seed, kinds, subsPerDevice, patternsPerDevice, connections, ackDelayMs, client, ids: kind === 'publisher' ? ids : slice, lat: Array.from(lat), lon: Array.from(lon), index };
      proc.send({ t: 'init', init } satisfies ToWorker);
      return new Promise<void>((resolve, reject) => {
        proc.once('message', (m: FromWorker) => {
          if (m.t !== 'ready') return reject(new Error(`worker: ${JSON.stringify(m)}`));
          if (kind === 'publisher') pubCpu[index] = m.cpuSeconds;
          resolve();
        });
        proc.once('exit', (code) => reject(new Error(`bench/throughput: a ${kind} worker exited (${code}) before it was ready`)));
      });
    };
    const t0 = performance.now();
    const per = Math.ceil(devices / subscribers);
    await Promise.all(Array.from({ length: subscribers }, (_, i) => start('subscriber', i, ids.slice(i * per, (i + 1) * per))));
    await Promise.all(Array.from({ length: publishers }, (_, i) => start('publisher', i, [])));
    const s0 = await server.ops.stats();
    out(`${s0.subscriptions} subscriptions on ${devices} connected devices in ${((performance.now() - t0) / 1000).toFixed(1)} s; engine ${s0.engine} (${s0.engineDetail})`);
    out('');
    const redisCols = benchRedis === null ? '' : ' redis cores | redis µs/notification |';
    out(`| offered ev/s | published ev/s | errors | notifications/s | per event | latency median ms | p99 ms | max ms | server cores | subscriber cores | publisher cores | server µs/event | server µs/notification | drain s |${redisCols}`);
    out(`|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|${benchRedis === null ? '' : '---:|---:|'}`);

    const ask = <T extends FromWorker['t']>(w: (typeof workers)[number], msg: ToWorker, t: T, step: number) =>
      new Promise<Extract<FromWorker, { t: T }>>((resolve) => {
        const f = (m: FromWorker) => {
          if (m.t === t && (m as { step?: number }).step === step) {
            w.proc.off('message', f);
            resolve(m as Extract<FromWorker, { t: T }>);
          }
        };
        w.proc.on('message', f);
        w.proc.send(msg);
      });
    const subs = workers.filter((w) => w.kind === 'subscriber');
    const pubs = workers.filter((w) => w.kind === 'publisher');
    const clientCpu = async (step: number) => {
      const r = await Promise.all(subs.map((w) => ask(w, { t: 'report', step }, 'report', step)));
      return r;
    };
    if (warmupSeconds > 0) {
      // Not reported: JIT, connection windows and the engine's first batches settle here.
      note(`warm-up at ${rates[0]}/s for ${warmupSeconds} s (not reported)`);
      const warm = await Promise.all(pubs.map((w) => ask(w, { t: 'run', step: WARMUP_STEP, rate: rates[0] / pubs.length, seconds: warmupSeconds }, 'ran', WARMUP_STEP)));
      warm.forEach((r, i) => (pubCpu[i] = r.cpuSeconds));
    }
    for (let step = 0; step < rates.length; step++) {
      const rate = rates[step];
      note(`rate ${rate}/s: publishing for ${seconds} s`);
      const m0 = await server.metrics();
      const stored0 = (await server.ops.stats()).notifications;
      const before = await clientCpu(-1 - step);
      const subCpu0 = before.reduce((s, r) => s + r.cpuSeconds, 0);
      const cpu0 = server.cpuSeconds();
      const redis0 = benchRedis === null ? 0 : await redisCpuSeconds(benchRedis.ports);
      const w0 = performance.now();
      const ran = await Promise.all(pubs.map((w) => ask(w, { t: 'run', step, rate: rate / pubs.length, seconds }, 'ran', step)));
      const windowS = (performance.now() - w0) / 1000;
      const serverCpu = server.cpuSeconds() - cpu0;
      // Drain: every notification the server stored for this step reaches its device.
      const d0 = performance.now();
      let reports = await clientCpu(step);
      for (;;) {
        const stored = (await server.ops.stats()).notifications - stored0;
        const got = reports.reduce((s, r) => s + r.received, 0);
        if (got >= stored || performance.now() - d0 > 60_000) break;
        await new Promise((r) => setTimeout(r, 100));
        reports = await clientCpu(step);
      }
      const drainSeconds = (performance.now() - d0) / 1000;
      const engineFigures = engineStep(m0, await server.metrics());
      const redisCpu = benchRedis === null ? null : (await redisCpuSeconds(benchRedis.ports)) - redis0;
      const histogram = new Array<number>(N_BUCKETS).fill(0);
      let received = 0;
      let min = Infinity;
      let max = 0;
      for (const r of reports) {
        received += r.received;
        for (let b = 0; b < N_BUCKETS; b++) histogram[b] += r.histogram[b];
        min = Math.min(min, r.min);
        max = Math.max(max, r.max);
      }
      const published = ran.reduce((s, r) => s + r.published, 0);
      const errors = ran.reduce((s, r) => s + r.errors, 0);
      const clientCpuS = reports.reduce((s, r) => s + r.cpuSeconds, 0) - subCpu0; // subscribers, through the drain
      let publisherCpuS = 0;
      ran.forEach((r, i) => {
        publisherCpuS += r.cpuSeconds - pubCpu[i];
        pubCpu[i] = r.cpuSeconds;
      });
      const s: Step = {
        offered: rate,
        seconds: windowS,
        eventsPublished: published,
        publishErrors: errors,
        eventsPerSecond: published / windowS,
        notifications: received,
        notificationsPerSecond: received / (windowS + drainSeconds),
        notificationsPerEvent: received / Math.max(1, published),
        drainSeconds,
        latencyMs: { n: received, min, median: Math.min(max, quantile(histogram, received, 0.5)), p99: Math.min(max, quantile(histogram, received, 0.99)), max },
        serverCores: serverCpu / windowS,
        clientCores: clientCpuS / (windowS + drainSeconds),
        publisherCores: publisherCpuS / windowS,
        serverCpuUsPerEvent: (serverCpu * 1e6) / Math.max(1, published),
        serverCpuUsPerNotification: (serverCpu * 1e6) / Math.max(1, received),
        ...engineFigures,
        ...(redisCpu === null ? {} : { redisCores: redisCpu / (windowS + drainSeconds), redisCpuUsPerNotification: (redisCpu * 1e6) / Math.max(1, received) }),
      };
      steps.push(s);
      const f = (x: number, d = 0) => x.toLocaleString('en-US', { maximumFractionDigits: d });
      out(`| ${f(rate)} | ${f(s.eventsPerSecond)} | ${f(errors)} | ${f(s.notificationsPerSecond)} | ${f(s.notificationsPerEvent, 2)} | ${f(s.latencyMs.median, 2)} | ${f(s.latencyMs.p99, 2)} | ${f(max, 1)} | ${f(s.serverCores, 2)} | ${f(s.clientCores, 2)} | ${f(publisherCpuS / windowS, 2)} | ${f(s.serverCpuUsPerEvent, 1)} | ${f(s.serverCpuUsPerNotification, 1)} | ${f(drainSeconds, 2)} |${redisCpu === null ? '' : ` ${f(s.redisCores ?? NaN, 2)} | ${f(s.redisCpuUsPerNotification ?? NaN, 1)} |`}`);
      if (s.gpuBatches !== undefined) {
        const ms = s.gpuBatchMs;
        note(`GPU engine over the step: ${f(s.gpuBatches)} batches, ${f(s.gpuEventsPerBatch ?? 0, 1)} events a batch, ${f(s.cpuAnsweredEvents ?? 0)} events answered on the CPU${ms === undefined ? '' : `; a batch: ${f(ms.submit, 2)} ms submitting, ${f(ms.wait, 2)} ms waiting for the GPU, ${f(ms.read, 2)} ms reading`}`);
      }
      run.write({ kind: 'throughput', startedAt: run.startedAt.toISOString(), machine: run.machine, command: run.command, engine, mode: redisUrl === null ? 'embedded' : 'redis', redisNodes, redisCluster: benchRedis?.cluster ?? false, matcherPartitions, geo: geo ?? null, cities, gateways, fanoutShards, partitions, deviceStreams, directWrites, dedupeWindowS, serverCpus, loadCpus, devices, subsPerDevice, patternsPerDevice, kinds, publishers, subscribers, connections, client, ackDelayMs, seed, warmupSeconds, steps });
    }
    out('');
    out(`Latency quantiles are exact to one histogram bucket (4.7%).${warmupSeconds > 0 ? '' : " The first step's publisher cores include connecting."}`);
    out(`results: ${run.shown}`);
  } finally {
    for (const w of workers) w.proc.send({ t: 'exit' } satisfies ToWorker);
    await Promise.all(workers.map((w) => new Promise<void>((resolve) => (w.proc.exitCode !== null ? resolve() : w.proc.once('exit', () => resolve())))));
    await server.stop();
    await benchRedis?.stop();
  }
}

/**
 * The GPU engine's batching over a step (from its stats' counters, where the hub reports them):
 * batches run, events they answered, and events the CPU engine answered instead.
 */
function engineStep(before: ReadonlyMap<string, number>, after: ReadonlyMap<string, number>): Pick<Step, 'gpuBatches' | 'gpuEventsPerBatch' | 'cpuAnsweredEvents' | 'gpuBatchMs'> {
  const d = (k: string): number | null => {
    const a = before.get(k);
    const b = after.get(k);
    return a === undefined || b === undefined ? null : b - a;
  };
  const batches = d('ambit_gpu_batches_total');
  const events = d('ambit_gpu_events_total');
  const cpu = d('ambit_gpu_cpu_events_total');
  if (batches === null || events === null || cpu === null || batches + cpu === 0) return {};
  const perBatch = (k: string): number => (batches > 0 ? (1000 * (d(k) ?? 0)) / batches : 0);
  return {
    gpuBatches: batches,
    gpuEventsPerBatch: batches > 0 ? events / batches : 0,
    cpuAnsweredEvents: cpu,
    gpuBatchMs: { submit: perBatch('ambit_gpu_batch_submit_seconds_total'), wait: perBatch('ambit_gpu_batch_wait_seconds_total'), read: perBatch('ambit_gpu_batch_read_seconds_total') },
  };
}

// ---- entry ----

const workerKind = process.argv[2] === '--worker' ? process.argv[3] : null;
if (workerKind === null) runMain('bench/throughput', parent);
else {
  const send = (m: FromWorker) => process.send!(m);
  let handler: ((m: ToWorker) => void) | null = null;
  process.on('message', (m: ToWorker) => {
    if (m.t === 'init') {
      const on = (f: (m: ToWorker) => void) => (handler = f);
      (workerKind === 'publisher' ? publisherWorker : subscriberWorker)(m.init, send, on).catch((err: unknown) => {
        process.stderr.write(`bench/throughput ${workerKind}: ${err instanceof Error ? err.stack : String(err)}\n`);
        process.exit(1);
      });
    } else handler?.(m);
  });
  process.on('disconnect', () => process.exit(0));
}
