/**
 * `npm run demo:engine`: Ambit's matching core at work on an embedded default, with nothing to set up.
 * Generates a Milan workload (CLCB Table 1 shape, smaller by default), loads it into an engine,
 * then interleaves moving devices (random waypoint, through device handles) with published events
 * and prints live counts once a second, then a summary.
 *
 *   node dist/bench/demo-engine.js [--engine fast|rtree|reference] [--subscriptions N] [--seconds S]
 *                           [--spatial uniform|zipf] [--seed N]
 */
import os from 'node:os';
import { parseArgs } from 'node:util';
import { CPU_ENGINES, type CpuEngineName } from '../src/engines/index.js';
import { RandomWaypoint, WorkloadSource } from '../src/workload/index.js';

const { values: args } = parseArgs({
  options: {
    engine: { type: 'string', default: 'fast' },
    subscriptions: { type: 'string', default: '50000' },
    seconds: { type: 'string', default: '10' },
    spatial: { type: 'string', default: 'uniform' },
    seed: { type: 'string', default: '1' },
    help: { type: 'boolean', default: false },
  },
});

function fail(msg: string): never {
  process.stderr.write(`demo: ${msg}\n`);
  process.exit(2);
}

if (args.help) {
  process.stdout.write('usage: node dist/bench/demo-engine.js [--engine fast|rtree|reference] [--subscriptions N] [--seconds S] [--spatial uniform|zipf] [--seed N]\n');
  process.exit(0);
}
const engineName = args.engine as CpuEngineName;
if (!(engineName in CPU_ENGINES)) fail(`--engine must be one of ${Object.keys(CPU_ENGINES).join(', ')}, got ${args.engine}`);
const subscriptions = Number(args.subscriptions);
if (!Number.isInteger(subscriptions) || subscriptions < 1 || subscriptions > 2_000_000) fail(`--subscriptions must be an integer in [1, 2000000], got ${args.subscriptions}`);
const seconds = Number(args.seconds);
if (!(seconds > 0 && seconds <= 3600)) fail(`--seconds must be in (0, 3600], got ${args.seconds}`);
if (args.spatial !== 'uniform' && args.spatial !== 'zipf') fail(`--spatial must be uniform or zipf, got ${args.spatial}`);
const seed = Number(args.seed);
if (!Number.isInteger(seed) || seed < 0) fail(`--seed must be a non-negative integer, got ${args.seed}`);

const fmt = (n: number) => n.toLocaleString('en-US', { maximumFractionDigits: 1 });
const out = (s: string) => process.stdout.write(`${s}\n`);

out(`Ambit demo: ${os.cpus()[0]?.model ?? 'cpu'} x${os.cpus().length}, node ${process.version}`);
const source = new WorkloadSource({ subscriptions, seed, spatial: args.spatial, events: 2000 });
const p = source.params;
out(`workload: ${fmt(subscriptions)} subscriptions x ${p.filtersPerSub} filters, ${p.constraintsMin}-${p.constraintsMax} constraints, ` +
  `radius ${fmt(p.filterRadiusM)} m (${p.areaFraction * 100}% of ${p.regionInfo.name}), ${p.spatial} positions, seed ${seed}`);

const matcher = CPU_ENGINES[engineName]();
const devices = source.devices();
let t0 = performance.now();
const handles = devices.map((d) => matcher.openDevice(d.id));
for (let i = 0; i < devices.length; i++) handles[i].update(devices[i].lat, devices[i].lon);
for (const s of source.subscriptions()) matcher.add(s);
out(`loaded into '${matcher.name}' engine in ${fmt((performance.now() - t0) / 1000)} s; ${fmt(matcher.stats().memoryBytes / 2 ** 20)} MiB of engine state`);

// 'sweep' moves devices in turn, so the handle to use is the next index.
const walk = new RandomWaypoint(devices, { seed, space: source.space, order: 'sweep' });
let cursor = 0;
const events = source.events();
let published = 0;
let delivered = 0;
let moves = 0;
let matchMs = 0;
const latencies: number[] = [];
const deadline = performance.now() + seconds * 1000;
let nextReport = performance.now() + 1000;
let lastPublished = 0;
let lastMoves = 0;
t0 = performance.now();
out('');
out('  time   events/s   moves/s   matches/event   match p50 (us)');
while (performance.now() < deadline) {
  // A burst of device moves (1000 per event, the ratio mobile apps produce), then one event.
  for (let k = 0; k < 1000; k++) {
    const u = walk.next();
    handles[cursor].update(u.lat, u.lon);
    cursor = cursor + 1 === handles.length ? 0 : cursor + 1;
  }
  moves += 1000;
  const e = events[published % events.length];
  const ts = performance.now();
  const ids = await matcher.match(e);
  const dt = performance.now() - ts;
  matchMs += dt;
  latencies.push(dt);
  delivered += ids.length;
  published++;
  const now = performance.now();
  if (now >= nextReport) {
    const recent = latencies.slice(-(published - lastPublished)).sort((a, b) => a - b);
    const p50 = recent[Math.floor(recent.length / 2)] ?? 0;
    out(`${fmt((now - t0) / 1000).padStart(5)} s ${fmt(published - lastPublished).padStart(10)} ${fmt(moves - lastMoves).padStart(9)} ` +
      `${fmt(delivered / published).padStart(15)} ${fmt(p50 * 1000).padStart(16)}`);
    lastPublished = published;
    lastMoves = moves;
    nextReport = now + 1000;
  }
}
latencies.sort((a, b) => a - b);
const q = (f: number) => latencies[Math.min(latencies.length - 1, Math.floor(f * latencies.length))] * 1000;
out('');
out(`summary: ${fmt(published)} events, ${fmt(moves)} device moves, ${fmt(delivered)} deliveries ` +
  `(${fmt(delivered / published)} subscriptions per event); match latency incl. re-filing moved devices: ` +
  `p50 ${fmt(q(0.5))} us, p99 ${fmt(q(0.99))} us, mean ${fmt((matchMs / published) * 1000)} us`);
for (const h of handles) h.release();
await matcher.close();
