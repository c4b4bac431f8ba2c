/**
 * Host memory of a matcher's match core and engine per filter, as the service holds them: each
 * subscription handed to `MatchCore.put` as the gateway hands it over (a fresh object, dropped
 * after the call), then a collection, in a child process of its own per engine. Beside each engine,
 * the same core with every subscription also kept as given (what a core that lists its own copies
 * holds), and the engine alone (each subscription and position given to it directly, under the
 * key the core would give it), for comparison in the same run. A benchmark, not a test.
 *
 *   node dist/bench/core-memory.js [--subscriptions 100000] [--engines fast,gpu-no-mirror,gpu] [--positions] [--without-copies | --holders core,engine] [--allow-software] [--out FILE]
 */
import { fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { CPU_ENGINES } from '../src/engines/index.js';
import { GpuMatcher } from '../src/engines/gpu/matcher.js';
import type { Matcher } from '../src/engines/matcher.js';
import { WorkloadSource } from '../src/workload/index.js';
import { type DeviceSubscription, ENGINE_SIDE_LIMITS, subscriptionKey } from '../services/hub/port.js';
import { MatchCore } from '../services/matcher/core.js';
import { cliFail, readCommandLine, runMain } from './lib/args.js';
import { count, sig, table } from './lib/format.js';
import { describeMachine } from './lib/machine.js';
import { collect } from './lib/measure.js';
import { heapLimitMb } from './lib/fork.js';
import { ResultRun } from './lib/result-file.js';

const USAGE = `Usage: node dist/bench/core-memory.js [options]

  --subscriptions N  subscriptions of 10 filters (CLCB Table 1), one device each (default 100000)
  --engines LIST     of fast, rtree, gpu (with its CPU mirror), gpu-no-mirror (default fast,gpu-no-mirror,gpu)
  --positions        each subscription's device located once through the core (as a gateway's location
                     writer does): the core's position record and engine handle per device counted too
  --without-copies   the core as the service runs it and the engine alone (not the comparison rows that
                     also keep each subscription as given: at 10M subscriptions those hold several GiB)
  --holders LIST     the rows to run, of core, copies, engine (default all three; core,engine with --without-copies)
  --allow-software   let the GPU engines run on a software adapter (llvmpipe: its buffers are host memory)
  --seed N           workload seed (default 1)
  --out FILE         result JSON (default bench/out/core-memory-<time>.json)`;

const ENGINES = ['fast', 'rtree', 'gpu', 'gpu-no-mirror'];
const HOLDERS: Record<Holder, string> = { core: 'the match core', copies: 'a core keeping copies too', engine: 'the engine alone' };
const CHILD_ENV = 'AMBIT_CORE_MEMORY_OF';

/** What a row holds: the core as the service runs it, that core keeping copies too, or the engine alone. */
type Holder = 'core' | 'copies' | 'engine';

interface ChildSpec {
  engine: string;
  holder: Holder;
  n: number;
  seed: number;
  allowSoftware: boolean;
  positions: boolean;
}

interface Row {
  engine: string;
  /** Each subscription's device was located once through the core. */
  positions?: boolean;
  /** The core as the service runs it, the core keeping each subscription as given too, or the engine alone (no core). */
  holder: Holder;
  filters: number;
  heapBytes: number;
  arrayBufferBytes: number;
  rssBytes: number;
  gpuBytes: number;
}

async function engineOf(name: string, allowSoftware: boolean): Promise<Matcher> {
  // The mirrored engine on its GPU path, so that the one match below sends its state to the device
  // (adaptive selection may answer a lone event on the CPU and upload nothing).
  if (name === 'gpu' || name === 'gpu-no-mirror') return GpuMatcher.create({ gpu: { allowSoftware }, limits: ENGINE_SIDE_LIMITS, ...(name === 'gpu-no-mirror' ? { cpuMirror: false } : { select: 'gpu', cpuBelowFilters: 0 }) });
  return CPU_ENGINES[name as 'fast' | 'rtree']({ limits: ENGINE_SIDE_LIMITS });
}

/** In the child: the core loaded, with or without copies kept beside it; its growth sent to the parent. */
async function child(o: ChildSpec): Promise<void> {
  const settle = async (): Promise<void> => {
    for (let k = 0; k < 3; k++) {
      collect();
      await new Promise((r) => setTimeout(r, 20));
    }
  };
  const core = new MatchCore(await engineOf(o.engine, o.allowSoftware));
  const copies = new Map<string, Map<string, DeviceSubscription>>();
  const src = new WorkloadSource({ seed: o.seed, subscriptions: o.n, events: 0 });
  await settle();
  const before = process.memoryUsage();
  let filters = 0;
  for (const s of src.subscriptions(o.n)) {
    const given: DeviceSubscription = { id: s.id, filters: s.filters };
    filters += given.filters.length;
    // Its device located, as the matcher's location batches and a gateway's location writer do: a point in the workload's city.
    const lat = 45.40 + 0.1 * ((filters * 0.618) % 1);
    const lon = 9.10 + 0.1 * ((filters * 0.382) % 1);
    if (o.holder === 'engine') {
      core.engine.add({ id: subscriptionKey(s.owner, s.id), owner: s.owner, filters: s.filters });
      if (o.positions) core.engine.updatePosition(s.owner, lat, lon);
      continue;
    }
    core.put(s.owner, given, 'add');
    if (o.positions) core.move(s.owner, lat, lon);
    if (o.holder === 'copies') {
      let mine = copies.get(s.owner);
      if (mine === undefined) copies.set(s.owner, (mine = new Map()));
      mine.set(given.id, given);
    }
  }
  // One match, so a GPU engine has sent its state to the device (what it holds from then on).
  await core.engine.match({ id: 'e', lat: 45.46, lon: 9.19, attributes: {} });
  await settle();
  const after = process.memoryUsage();
  const stats = core.engine.stats();
  if (stats.subscriptions !== o.n || copies.size !== (o.holder === 'copies' ? o.n : 0) || (o.positions && o.holder !== 'engine' && core.deviceCount < 1)) throw new Error('bench/core-memory: not everything was loaded');
  const gpuBytes = typeof stats.extra?.gpuBytes === 'number' ? stats.extra.gpuBytes : 0;
  const row: Row = { engine: o.engine, positions: o.positions, holder: o.holder, filters, heapBytes: after.heapUsed - before.heapUsed, arrayBufferBytes: after.arrayBuffers - before.arrayBuffers, rssBytes: after.rss - before.rss, gpuBytes };
  await core.engine.close();
  process.send!(row);
}

function inChild(o: ChildSpec): Promise<Row> {
  return new Promise((resolve, reject) => {
    // Room for 10M subscriptions and more (the default old space stops near 4 GiB).
    const p = fork(fileURLToPath(import.meta.url), [], { execArgv: ['--expose-gc', `--max-old-space-size=${heapLimitMb()}`], env: { ...process.env, [CHILD_ENV]: JSON.stringify(o) } });
    let got: Row | null = null;
    p.on('message', (m) => (got = m as Row));
    p.on('error', reject);
    p.on('exit', (code) => (got === null ? reject(new Error(`bench/core-memory: the child for ${o.engine} exited with ${code} and no figures`)) : resolve(got)));
  });
}

async function main(): Promise<void> {
  const fail = cliFail('bench/core-memory', USAGE);
  const cl = readCommandLine(process.argv.slice(2), new Set(['help', 'allow-software', 'positions', 'without-copies']), new Set(['subscriptions', 'engines', 'holders', 'seed', 'out']), fail, USAGE);
  if (cl === null) return;
  const { a, r } = cl;
  const n = r.count('subscriptions', 100_000);
  const seed = r.int('seed', 1, 0);
  const engines = r.oneOf('engines', ENGINES, ['fast', 'gpu-no-mirror', 'gpu']);
  const allowSoftware = a['allow-software'] === true;
  const positions = a.positions === true;
  const holders = r.oneOf('holders', ['core', 'copies', 'engine'], a['without-copies'] === true ? ['core', 'engine'] : ['core', 'copies', 'engine']) as Holder[];
  const run = new ResultRun({ out: a.out, name: 'core-memory', fail });
  process.stdout.write(`match core memory: ${describeMachine(run.machine)}\n${count(n)} subscriptions of 10 filters (CLCB Table 1), one device each${positions ? ', each device located once through the core' : ''}; a child process per row\n\n`);
  const rows: Row[] = [];
  for (const engine of engines) {
    for (const holder of holders) {
      try {
        rows.push(await inChild({ engine, holder, n, seed, allowSoftware, positions }));
      } catch (err) {
        process.stdout.write(`${engine}: skipped (${err instanceof Error ? err.message.split('\n')[0] : String(err)})\n`);
        break;
      }
    }
  }
  const per = (b: number, r: Row) => sig(b / r.filters);
  process.stdout.write(
    `${table(
      ['engine', 'held by', 'heap B/filter', 'typed arrays B/filter', 'RSS B/filter', 'GPU B/filter', 'RSS / GPU'],
      rows.map((x) => [x.engine, HOLDERS[x.holder], per(x.heapBytes, x), per(x.arrayBufferBytes, x), per(x.rssBytes, x), per(x.gpuBytes, x), x.gpuBytes > 0 ? sig(x.rssBytes / x.gpuBytes) : '-']),
    )}\n`,
  );
  run.write({ kind: 'core-memory', startedAt: run.startedAt.toISOString(), machine: run.machine, command: run.command, subscriptions: n, seed, positions, rows });
  process.stdout.write(`\nresults: ${run.shown}\n`);
}

const spec = process.env[CHILD_ENV];
if (spec !== undefined) runMain('bench/core-memory', () => child(JSON.parse(spec)));
else runMain('bench/core-memory', main);
