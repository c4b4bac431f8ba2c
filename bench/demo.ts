/**
 * `npm run demo -- --server host:port --secret <secret> [--devices N] [--seconds S] [--rate events/s]`
 * `npm run demo -- --embedded`
 *
 * Simulated phones in Milan on the SDK: N devices walk by random waypoint and report their
 * position over their streams, each holding one or two subscriptions (accidents with severity > 2
 * within 500 m; deals under 50 within 1 km, for half of them); a publisher posts accidents and deals
 * near them at a fixed rate. Prints a status line every second and a summary at the end; stops
 * after --seconds or on Ctrl-C. Tokens are minted with the server's secret (`npm start` prints it);
 * --embedded starts a server in this process instead.
 */
import { parseArgs } from 'node:util';
import { SCOPES, TokenAuthority } from '../services/edge/auth.js';
import type { EngineChoice } from '../services/matcher/engine.js';
import { startServer } from '../services/process/server.js';
import { Prng } from '../src/workload/prng.js';
import { RandomWaypoint } from '../src/workload/mobility.js';
import { makeRegion } from '../src/workload/region.js';
import { AmbitDevice, AmbitOps, AmbitPublisher, type AttributeValue, type Notification, type Subscription } from '../sdk/index.js';

const USAGE = `usage: npm run demo -- (--server host:port --secret <secret> | --embedded) [options]
  --server host:port   an Ambit server (npm start prints its address and secret)
  --secret <secret>    the server's token secret, to mint device, publisher and ops tokens
  --embedded           start a server in this process instead (--engine fast|rtree|reference|auto|gpu, default fast)
  --devices N          simulated devices (default 50)
  --seconds S          how long to run (default 20)
  --rate R             events published per second (default 20)
  --tick-ms MS         how often devices report their position (default 500)
  --publish unary|stream  one Publish call per event (default; shows subscriptions reached), or one
                       long-lived PublishStream (cheaper and faster at high rates)
  --seed N             random seed (default 1)
  --tls                connect with TLS (system roots)`;

function fail(msg: string): never {
  process.stderr.write(`demo: ${msg}\n${USAGE}\n`);
  process.exit(2);
}

function parse() {
  return parseArgs({
    options: {
      server: { type: 'string' },
      secret: { type: 'string' },
      embedded: { type: 'boolean', default: false },
      engine: { type: 'string', default: 'fast' },
      devices: { type: 'string', default: '50' },
      seconds: { type: 'string', default: '20' },
      rate: { type: 'string', default: '20' },
      'tick-ms': { type: 'string', default: '500' },
      publish: { type: 'string', default: 'unary' },
      seed: { type: 'string', default: '1' },
      tls: { type: 'boolean', default: false },
      help: { type: 'boolean', short: 'h', default: false },
    },
    strict: true,
  });
}

let parsed: ReturnType<typeof parse>;
try {
  parsed = parse();
} catch (err) {
  fail(err instanceof Error ? err.message : String(err));
}
const args = parsed.values;

function num(name: string, v: string, lo: number, hi: number, integer = true): number {
  const n = Number(v);
  if (!Number.isFinite(n) || n < lo || n > hi || (integer && !Number.isInteger(n))) fail(`--${name} must be ${integer ? 'an integer' : 'a number'} in [${lo}, ${hi}], got ${JSON.stringify(v)}`);
  return n;
}

if (args.help) {
  process.stdout.write(`${USAGE}\n`);
  process.exit(0);
}
const nDevices = num('devices', args.devices, 1, 20_000);
const seconds = num('seconds', args.seconds, 0.1, 86_400, false);
const rate = num('rate', args.rate, 0, 100_000, false);
const tickMs = num('tick-ms', args['tick-ms'], 10, 60_000);
const seed = num('seed', args.seed, 0, 0xffffffff);
if (args.publish !== 'unary' && args.publish !== 'stream') fail(`--publish must be unary or stream, got ${JSON.stringify(args.publish)}`);
if (!args.embedded && (args.server === undefined || args.secret === undefined)) fail('give --server and --secret, or --embedded');
if (args.embedded && args.server !== undefined) fail('--embedded and --server exclude each other');

const out = (s: string) => process.stdout.write(`${s}\n`);
const fmt = (n: number, digits = 0) => (Number.isFinite(n) ? n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits }) : '-');

/** Nearest-rank percentile of unsorted samples. */
function pct(samples: number[], p: number): number {
  if (samples.length === 0) return NaN;
  const s = Float64Array.from(samples).sort();
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))];
}

const ACCIDENTS: Subscription = {
  id: 'accidents',
  filters: [{ constraints: [{ name: 'type', op: 'eq', value: 'accident' }, { name: 'severity', op: 'gt', value: 2 }], area: { radiusM: 500 } }],
};
const DEALS: Subscription = {
  id: 'deals',
  filters: [{ constraints: [{ name: 'type', op: 'eq', value: 'deal' }, { name: 'price', op: 'lt', value: 50 }], area: { radiusM: 1000 } }],
};
const M_PER_DEG = 111_195;

async function main(): Promise<void> {
  let address: string;
  let authority: TokenAuthority;
  let stopServer: (() => Promise<void>) | null = null;
  if (args.embedded) {
    const server = await startServer({ port: 0, metricsPort: null, engine: args.engine as EngineChoice, dev: true });
    address = `127.0.0.1:${server.port}`;
    authority = server.authority!;
    stopServer = () => server.stop();
    out(`embedded server on ${address} (${server.engineDetail})`);
  } else {
    address = args.server!;
    try {
      authority = new TokenAuthority(args.secret!);
    } catch (err) {
      fail(err instanceof Error ? err.message : String(err));
    }
  }
  const tls = args.tls ? { tls: true } : {};
  const publisher = new AmbitPublisher(address, authority.issue({ subject: 'demo-publisher', scopes: [SCOPES.publish] }), tls);
  const ops = new AmbitOps(address, authority.issue({ subject: 'demo-ops', scopes: [SCOPES.ops] }), tls);

  // Devices start at random points of Milan and walk by random waypoint.
  const region = makeRegion('milan');
  const rng = new Prng(seed, 7);
  const starts = Array.from({ length: nDevices }, (_, i) => ({
    id: `demo-phone-${i}`,
    lat: region.minLat + rng.float() * (region.maxLat - region.minLat),
    lon: region.minLon + rng.float() * (region.maxLon - region.minLon),
  }));
  const walk = new RandomWaypoint(starts, { seed, speedMinMps: 1, speedMaxMps: 15, order: 'sweep' });

  // Counters for the status line: current second and totals.
  const sec = { locations: 0, events: 0, reached: 0, notifications: 0, latencies: [] as number[] };
  const total = { locations: 0, events: 0, reached: 0, notifications: 0, publishErrors: 0, skipped: 0 };
  const allLatencies: number[] = [];
  const sentAt = new Map<string, number>();
  let connected = 0;
  let reconnects = 0;

  out(`connecting ${fmt(nDevices)} devices to ${address} ...`);
  const devices: AmbitDevice[] = new Array(nDevices);
  const consumers: Promise<void>[] = [];
  const consume = async (d: AmbitDevice) => {
    for await (const n of d.notifications() as AsyncIterable<Notification>) {
      const t0 = sentAt.get(n.event.id);
      sec.notifications++;
      total.notifications++;
      if (t0 !== undefined) {
        const ms = performance.now() - t0;
        sec.latencies.push(ms);
        if (allLatencies.length < 2_000_000) allLatencies.push(ms);
      }
    }
  };
  let nextDevice = 0;
  const t0Connect = performance.now();
  await Promise.all(
    Array.from({ length: Math.min(64, nDevices) }, async () => {
      for (let i = nextDevice++; i < nDevices; i = nextDevice++) {
        const d = await AmbitDevice.connect(address, authority.issue({ subject: starts[i].id, scopes: [SCOPES.device] }), { ...tls, backoff: { initialMs: 200, maxMs: 5000 } });
        connected++;
        d.on('disconnected', () => connected--);
        d.on('connected', (e) => {
          if (e.reconnect) {
            connected++;
            reconnects++;
          }
        });
        devices[i] = d;
        d.updateLocation(walk.lat[i], walk.lon[i]);
        // Subscriptions are server state: a rerun finds them there already.
        const subs = i % 2 === 0 ? [ACCIDENTS, DEALS] : [ACCIDENTS];
        await Promise.all(subs.map((s) => d.subscribe(s).catch((err: { code?: number }) => (err.code === 6 ? d.replace(s) : Promise.reject(err)))));
        consumers.push(consume(d));
      }
    }),
  );
  out(`${fmt(nDevices)} devices connected and subscribed in ${fmt((performance.now() - t0Connect) / 1000, 1)} s; publishing ${fmt(rate)} events/s for ${seconds} s (Ctrl-C stops)`);
  out('');

  // Positions: every device moves and reports every tick.
  const moveTimer = setInterval(() => {
    const dt = tickMs / 1000;
    for (let i = 0; i < nDevices; i++) {
      walk.advance(i, dt);
      devices[i].updateLocation(walk.lat[i], walk.lon[i]);
    }
    sec.locations += nDevices;
    total.locations += nDevices;
  }, tickMs);

  // Events near random devices, paced every 20 ms; at most 512 unary publishes in flight.
  const stream = args.publish === 'stream' ? await publisher.stream() : null;
  let inFlight = 0;
  let seq = 0;
  let owed = 0;
  let lastPace = performance.now();
  const publishOne = () => {
    const i = rng.int(0, nDevices - 1);
    const r = rng.float() * 800;
    const a = rng.float() * 2 * Math.PI;
    const lat = walk.lat[i] + (r * Math.cos(a)) / M_PER_DEG;
    const lon = walk.lon[i] + (r * Math.sin(a)) / (M_PER_DEG * Math.cos((walk.lat[i] * Math.PI) / 180));
    const accident = rng.chance(0.5);
    const attributes: Record<string, AttributeValue> = accident ? { type: 'accident', severity: rng.int(1, 5) } : { type: 'deal', price: rng.int(5, 100) };
    const id = `demo-ev-${seed}-${seq++}`;
    sentAt.set(id, performance.now());
    if (stream !== null) {
      try {
        stream.publish({ id, lat, lon, attributes });
        sec.events++;
        total.events++;
      } catch {
        total.publishErrors++;
      }
      return;
    }
    inFlight++;
    publisher.publish({ id, lat, lon, attributes }).then(
      (res) => {
        inFlight--;
        sec.events++;
        total.events++;
        sec.reached += res.reached;
        total.reached += res.reached;
      },
      () => {
        inFlight--;
        total.publishErrors++;
      },
    );
  };
  const paceTimer = setInterval(() => {
    const now = performance.now();
    owed += ((now - lastPace) / 1000) * rate;
    lastPace = now;
    while (owed >= 1) {
      owed--;
      if (inFlight >= 512 || (stream !== null && stream.pending > 10_000)) total.skipped++;
      else publishOne();
    }
  }, 20);

  // Status, once a second; old send times are forgotten after 30 s.
  const started = performance.now();
  let lastStatus = started;
  const statusTimer = setInterval(() => {
    const now = performance.now();
    const dt = (now - lastStatus) / 1000;
    lastStatus = now;
    out(
      `[${fmt((now - started) / 1000).padStart(4)} s] devices ${fmt(connected)}/${fmt(nDevices)} connected | locations ${fmt(sec.locations / dt)}/s | ` +
        `events ${fmt(sec.events / dt)}/s | notifications ${fmt(sec.notifications / dt)}/s | publish→notify p50 ${fmt(pct(sec.latencies, 50), 1)} ms p99 ${fmt(pct(sec.latencies, 99), 1)} ms` +
        (total.publishErrors > 0 ? ` | publish errors ${fmt(total.publishErrors)}` : ''),
    );
    sec.locations = sec.events = sec.reached = sec.notifications = 0;
    sec.latencies = [];
    if (sentAt.size > 100_000) for (const [k, t] of sentAt) if (now - t > 30_000) sentAt.delete(k);
  }, 1000);

  let finish: () => void;
  const finished = new Promise<void>((resolve) => (finish = resolve));
  const runTimer = setTimeout(() => finish(), seconds * 1000);
  let interrupted = false;
  process.on('SIGINT', () => {
    if (interrupted) process.exit(130);
    interrupted = true;
    out('\ninterrupted: stopping (Ctrl-C again to quit at once)');
    finish();
  });
  await finished;
  const elapsed = (performance.now() - started) / 1000;
  clearTimeout(runTimer);
  clearInterval(moveTimer);
  clearInterval(paceTimer);
  clearInterval(statusTimer);
  // Let publishes in flight land and their notifications arrive.
  const drainEnd = Date.now() + 2000;
  while (inFlight > 0 && Date.now() < drainEnd) await new Promise((r) => setTimeout(r, 20));
  if (stream !== null) {
    try {
      const r = await stream.end();
      total.reached = r.reached;
    } catch (err) {
      out(`publish stream failed: ${err instanceof Error ? err.message : String(err)}`);
    }
  }
  await new Promise((r) => setTimeout(r, 200));

  let server = '';
  try {
    const s = await ops.stats();
    server = `server: engine ${s.engine}, ${fmt(s.subscriptions)} subscriptions, ${fmt(s.devices)} devices, ${fmt(s.connectedDevices)} connected, ${fmt(s.eventsPublished)} events, ${fmt(s.notifications)} notifications stored, ${fmt(s.notificationsDropped)} dropped`;
  } catch (err) {
    server = `server: stats unavailable (${err instanceof Error ? err.message : String(err)})`;
  }
  let duplicates = 0;
  for (const d of devices) duplicates += d.stats.duplicates;
  await Promise.all(devices.map((d) => d.close()));
  await Promise.all(consumers);
  publisher.close();
  ops.close();

  out('');
  out(`summary after ${fmt(elapsed, 1)} s with ${fmt(nDevices)} devices:`);
  out(`  location updates  ${fmt(total.locations)} (${fmt(total.locations / elapsed)}/s)`);
  out(`  events published  ${fmt(total.events)} (${fmt(total.events / elapsed, 1)}/s), ${fmt(total.reached)} subscriptions reached${total.publishErrors > 0 ? `, ${fmt(total.publishErrors)} failed` : ''}${total.skipped > 0 ? `, ${fmt(total.skipped)} skipped (publisher backed up)` : ''}${stream !== null ? ' (one PublishStream)' : ''}`);
  out(`  notifications     ${fmt(total.notifications)} received (${fmt(total.notifications / elapsed, 1)}/s), ${fmt(duplicates)} repeats dropped, ${fmt(reconnects)} reconnects`);
  out(`  publish→notify    p50 ${fmt(pct(allLatencies, 50), 2)} ms, p99 ${fmt(pct(allLatencies, 99), 2)} ms, max ${fmt(pct(allLatencies, 100), 2)} ms over ${fmt(allLatencies.length)} notifications`);
  out(`  ${server}`);
  if (stopServer !== null) await stopServer();
  process.exit(0);
}

main().catch((err: unknown) => {
  process.stderr.write(`demo: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
