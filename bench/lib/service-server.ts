/**
 * The server under test, as a child process (`node dist/services/process/main.js`), so its CPU time is its
 * own: read from /proc/<pid>/stat (utime + stime) before and after each measured window.
 */
import type { GeoSpec } from '../../services/redis/keys.js';
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync, readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { SCOPES, TokenAuthority } from '../../services/edge/auth.js';
import { AmbitOps } from '../../sdk/index.js';
import { freePort } from '../../test/support/ports.js';
import type { ArgReader, Fail } from './args.js';

/**
 * `--server-cpus LIST` and `--load-cpus LIST` (taskset lists such as 0-15 or 0,2,4-7): one node
 * of N cores measured on a larger host. The load CPUs confine this process at once, and with it
 * the load processes it forks; the server CPUs go to startChildServer.
 */
export function cpuLists(a: ArgReader, fail: Fail): { serverCpus: string | null; loadCpus: string | null } {
  const serverCpus = a.str('server-cpus') ?? null;
  const loadCpus = a.str('load-cpus') ?? null;
  for (const [flag, list] of [['--server-cpus', serverCpus], ['--load-cpus', loadCpus]] as const) {
    if (list !== null && !/^\d+(-\d+)?(,\d+(-\d+)?)*$/.test(list)) fail(`${flag} must be a CPU list such as 0-15 or 0,2,4-7, got ${JSON.stringify(list)}`);
  }
  if (loadCpus !== null) execFileSync('taskset', ['-a', '-cp', loadCpus, String(process.pid)], { stdio: 'ignore' });
  return { serverCpus, loadCpus };
}

export interface ChildServer {
  address: string;
  /** The web port's WebSocket address (ws://host:port) when the shape asked for one, else null. */
  webAddress: string | null;
  pid: number;
  authority: TokenAuthority;
  ops: AmbitOps;
  /** CPU seconds the process has used (user + system). */
  cpuSeconds(): number;
  /** Resident set size in bytes. */
  rssBytes(): number;
  /** The main process's Prometheus samples, summed by name (empty unless the shape asked for metrics). */
  metrics(): Promise<Map<string, number>>;
  stop(): Promise<void>;
}

let clkTck = 0;

function ticksPerSecond(): number {
  if (clkTck === 0) {
    try {
      clkTck = Number(execFileSync('getconf', ['CLK_TCK'], { stdio: ['ignore', 'pipe', 'ignore'] }).toString().trim()) || 100;
    } catch {
      clkTck = 100;
    }
  }
  return clkTck;
}

/** utime + stime of a process in seconds (Linux /proc). */
export function processCpuSeconds(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  // The command name may hold spaces and parentheses: fields are counted after the last ')'.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / ticksPerSecond();
}


/** Processes below `pid` (its workers), from /proc's parent links. */
function descendants(pid: number): number[] {
  const parent = new Map<number, number>();
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      parent.set(Number(name), Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]));
    } catch {
      // gone meanwhile
    }
  }
  const out: number[] = [];
  const walk = (p: number) => {
    for (const [child, pp] of parent) if (pp === p) {
      out.push(child);
      walk(child);
    }
  };
  walk(pid);
  return out;
}

/** CPU seconds of `pid` and every live process below it. */
function treeCpuSeconds(pid: number): number {
  let s = processCpuSeconds(pid);
  for (const c of descendants(pid)) {
    try {
      s += processCpuSeconds(c);
    } catch {
      // exited since the listing
    }
  }
  return s;
}

function rssOf(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m === null ? NaN : Number(m[1]) * 1024;
}

/**
 * `nodeArgs`: extra Node flags of the server process (e.g. --cpu-prof). `redisUrl`: run it on
 * Redis (gateway and matcher in the one process, state and delivery through Redis) under a fresh
 * key prefix, instead of the embedded hub. `gateways` > 1: that many gateway processes share the
 * port beside the matcher (Redis) or the process holding the embedded hub; CPU and memory are
 * summed over all of them. `fanoutShards` > 0 (embedded, several gateways): the device logs live in
 * that many shard threads of the hub's process (AMBIT_FANOUT_SHARDS). `partitions` > 0 (embedded):
 * the hub is split by device over that many threads (AMBIT_PARTITIONS). `cpus`: a taskset CPU list
 * the server's processes are confined to (e.g. "0-15"), so a load generator on the other CPUs of a
 * larger host measures one node of that many cores.
 */
export interface ChildServerShape {
  /** `redisUrl` names the seed nodes of a Redis Cluster (AMBIT_REDIS_CLUSTER=1). */
  redisCluster?: boolean;
  /** Redis mode: matcher partitions (AMBIT_MATCHER_PARTITIONS), a thread each in the server. */
  matcherPartitions?: number;
  /** Redis mode sharded by space (AMBIT_GEO_*), a matcher thread per shard in the server; excludes matcherPartitions. */
  geo?: GeoSpec;
  gateways?: number;
  fanoutShards?: number;
  partitions?: number;
  cpus?: string | null;
  /** Serve the web port (AMBIT_WEB_PORT: device streams over WebSocket, Connect). */
  web?: boolean;
  /** Serve the main process's /metrics on a free port (its gateways take the ports above it), for `metrics()`. */
  metrics?: boolean;
}

export async function startChildServer(engine: string, nodeArgs: readonly string[] = [], redisUrl: string | null = null, shape: ChildServerShape = {}): Promise<ChildServer> {
  const { gateways = 1, fanoutShards = 0, partitions = 0, cpus = null, redisCluster = false, matcherPartitions = 1, geo, web = false, metrics = false } = shape;
  const shards =
    geo === undefined
      ? { AMBIT_MATCHER_PARTITIONS: String(matcherPartitions) }
      : { AMBIT_GEO_SHARDS: String(geo.shards), AMBIT_GEO_WIDE_SHARDS: String(geo.wide), AMBIT_GEO_CELL_DEG: String(geo.cellDeg), AMBIT_GEO_GUARD_M: String(geo.guardM), AMBIT_GEO_LAYOUT: geo.layout };
  if (process.platform !== 'linux') throw new Error('bench/service: measuring the server process needs Linux /proc');
  const secret = randomBytes(32).toString('base64url');
  const port = await freePort();
  const webPort = web ? await freePort() : null;
  const metricsPort = metrics ? await freePort() : null;
  const main = fileURLToPath(new URL('../../services/process/main.js', import.meta.url));
  const argv = [...nodeArgs, main];
  const child: ChildProcess = spawn(cpus === null ? process.execPath : 'taskset', cpus === null ? argv : ['-c', cpus, process.execPath, ...argv], {
    env: {
      ...process.env,
      AMBIT_TOKEN_SECRET: secret,
      AMBIT_HOST: '127.0.0.1',
      AMBIT_PORT: String(port),
      AMBIT_METRICS_PORT: metricsPort === null ? 'off' : String(metricsPort),
      AMBIT_ENGINE: engine,
      AMBIT_LOG_LEVEL: 'warn',
      AMBIT_DEV: '',
      ...(redisUrl === null ? {} : { REDIS_URL: redisUrl, AMBIT_REDIS_PREFIX: `bench-${randomBytes(4).toString('hex')}:`, AMBIT_REDIS_CLUSTER: redisCluster ? '1' : '', ...shards }),
      AMBIT_GATEWAYS: String(gateways),
      AMBIT_FANOUT_SHARDS: String(fanoutShards),
      AMBIT_PARTITIONS: String(partitions),
      ...(webPort === null ? {} : { AMBIT_WEB_PORT: String(webPort) }),
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  const keep = (b: Buffer) => {
    output = (output + b.toString()).slice(-4000);
  };
  child.stdout!.on('data', keep);
  child.stderr!.on('data', keep);
  let exited: string | null = null;
  child.once('exit', (code, signal) => {
    exited = signal ?? `code ${code}`;
  });
  const killOnExit = () => child.kill('SIGKILL');
  process.once('exit', killOnExit);

  const authority = new TokenAuthority(secret);
  const address = `127.0.0.1:${port}`;
  const ops = new AmbitOps(address, authority.issue({ subject: 'bench-ops', scopes: [SCOPES.ops] }), { deadlineMs: 2000 });
  const deadline = Date.now() + 20_000;
  for (;;) {
    if (exited !== null) throw new Error(`bench/service: server exited (${exited}) before it was ready:\n${output}`);
    try {
      await ops.stats();
      break;
    } catch (err) {
      if (Date.now() > deadline) {
        child.kill('SIGKILL');
        throw new Error(`bench/service: server not ready after 20 s (${err instanceof Error ? err.message : String(err)}):\n${output}`);
      }
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  const pid = child.pid!;
  // Past readiness, a server under overload may take seconds to answer: a longer deadline.
  ops.close();
  const busyOps = new AmbitOps(address, authority.issue({ subject: 'bench-ops', scopes: [SCOPES.ops] }), { deadlineMs: 30_000 });
  return {
    address,
    webAddress: webPort === null ? null : `ws://127.0.0.1:${webPort}`,
    pid,
    authority,
    ops: busyOps,
    cpuSeconds: () => treeCpuSeconds(pid),
    rssBytes: () => [pid, ...descendants(pid)].reduce((sum, p) => sum + rssOf(p), 0),
    metrics: async () => (metricsPort === null ? new Map() : parseSamples(await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text())),
    stop: async () => {
      busyOps.close();
      if (exited !== null) return;
      const done = new Promise<void>((resolve) => child.once('exit', () => resolve()));
      child.kill('SIGTERM');
      const t = setTimeout(() => child.kill('SIGKILL'), 5000);
      await done;
      clearTimeout(t);
      process.off('exit', killOnExit);
    },
  };
}

/** Prometheus text: each metric's samples summed by name, whatever their labels (the process's role is one). */
export function parseSamples(text: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of text.split('\n')) {
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$/.exec(line);
    if (m !== null) out.set(m[1], (out.get(m[1]) ?? 0) + Number(m[3]));
  }
  return out;
}
