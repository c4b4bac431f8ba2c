/**
 * A throwaway Redis Cluster for integration tests: `redis-server` processes in cluster mode on free
 * ports of 127.0.0.1, memory only (no RDB, no AOF), joined by `redis-cli --cluster create`, their
 * files in a fresh temp dir. Killed by stop() or when the test process exits.
 *
 *   const cluster = await startRedisCluster({ masters: 3, replicasPerMaster: 1 });
 *   const client = new Cluster(cluster.nodes);                 // ioredis
 *   const port = await cluster.masterOf(slot);                 // who serves the slot now
 *   await cluster.servers.find((s) => s.port === port)!.kill();  // SIGKILL a master
 *   await cluster.waitHealthy();                               // its replica took over
 *   await cluster.stop();
 *
 * startRedisCluster() returns once the cluster is healthy and every replica has finished its initial
 * sync (so a write acknowledged later by `WAIT 1` survives its master's death). Replicas always fail
 * over (`cluster-replica-validity-factor 0`, no replica migration), after about `nodeTimeoutMs` plus
 * the election delay (1-2 s at the default 1000 ms). Each node has its own RDB file name in the
 * shared temp dir: replicas loading their initial sync through one `dump.rdb` could load each
 * other's (seen under load: a promoted replica without its master's keys).
 *
 * Needs redis-server 7.0 or later (each node gets its own free cluster-bus port, `--cluster-port`)
 * and redis-cli; $REDIS_SERVER and $REDIS_CLI name other binaries.
 *
 * `redisClusterMissing()` says why cluster tests must skip (null when both binaries run), so a suite
 * can `describe(name, { skip: redisClusterMissing() ?? false }, ...)`.
 */
import { type ChildProcess, execFile, execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Redis } from 'ioredis';
import { freePort } from './ports.js';
import { ping, redisServerMissing } from './redis-server.js';

export interface ClusterNode {
  port: number;
  /** kills this node's process with SIGKILL and waits for exit */
  kill(): Promise<void>;
  /** true while the process runs */
  readonly alive: boolean;
}

export interface RedisClusterHandle {
  /** seed nodes for ioredis Cluster: [{host:'127.0.0.1', port}] of every node */
  nodes: { host: string; port: number }[];
  /** every node process (masters and replicas), in start order */
  servers: ClusterNode[];
  /** the port of the master currently serving hash slot `slot` (asks CLUSTER SLOTS on a live node) */
  masterOf(slot: number): Promise<number>;
  /** waits (polling CLUSTER INFO on every live node, up to timeoutMs, default 20 s) until every live node says cluster_state:ok and all 16384 slots are served by live masters */
  waitHealthy(timeoutMs?: number): Promise<void>;
  /** stops every node (SIGTERM, SIGKILL after 2 s), removes the temp dir. Idempotent. */
  stop(): Promise<void>;
}

export interface RedisClusterOptions {
  /** Masters; default 3 (redis-cli --cluster create needs at least 3). */
  masters?: number;
  /** Replicas of each master; default 0. */
  replicasPerMaster?: number;
  /** `cluster-node-timeout`: how long a silent node takes to be failed (and failed over); default 1000 ms. */
  nodeTimeoutMs?: number;
  /** More `--name value` arguments for every node (after ours, so they win). */
  args?: string[];
}

const SLOTS = 16384;
const HOST = '127.0.0.1';
/** How long each node has to answer its first PING. */
const PONG_TIMEOUT_MS = 10_000;
/** How long `redis-cli --cluster create` may take (it polls the join once a second). */
const CREATE_TIMEOUT_MS = 60_000;
/** After creation, how long until every node agrees the cluster is up. */
const FORM_TIMEOUT_MS = 30_000;
/** Connect and command timeouts when asking a node: a dead or stuck one is skipped, not waited on. */
const ASK_TIMEOUT_MS = 1000;

const running = new Set<ChildProcess>();
const tempDirs = new Set<string>();
let exitHook = false;

const serverBinary = (): string => process.env.REDIS_SERVER ?? 'redis-server';
const cliBinary = (): string => process.env.REDIS_CLI ?? 'redis-cli';
const firstLine = (err: unknown): string => (err instanceof Error ? err.message.split('\n')[0] : String(err));
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** null when redis-server (7.0 or later) and redis-cli can be run; otherwise the reason to skip. */
export function redisClusterMissing(): string | null {
  // CI sets this: there a missing redis-server must fail the suites, not skip them.
  if (process.env.AMBIT_REQUIRE_REDIS === '1') return null;
  const server = redisServerMissing();
  if (server !== null) return server;
  try {
    execFileSync(cliBinary(), ['--version'], { stdio: 'ignore' });
  } catch (err) {
    return `no runnable ${cliBinary()} (${firstLine(err)})`;
  }
  try {
    const version = /v=(\d+)\.(\d+)/.exec(execFileSync(serverBinary(), ['--version'], { encoding: 'utf8' }));
    if (version !== null && Number(version[1]) < 7) return `${serverBinary()} ${version[1]}.${version[2]} is too old for a test cluster (needs 7.0: --cluster-port)`;
  } catch {
    // It ran a moment ago; a version we cannot read is not a reason to skip.
  }
  return null;
}

export async function startRedisCluster(options: RedisClusterOptions = {}): Promise<RedisClusterHandle> {
  const masters = options.masters ?? 3;
  const replicas = options.replicasPerMaster ?? 0;
  const nodeTimeoutMs = options.nodeTimeoutMs ?? 1000;
  if (!Number.isInteger(masters) || masters < 3) throw new Error(`redis cluster: masters must be an integer >= 3 (redis-cli --cluster create), got ${masters}`);
  if (!Number.isInteger(replicas) || replicas < 0) throw new Error(`redis cluster: replicasPerMaster must be an integer >= 0, got ${replicas}`);
  if (!Number.isInteger(nodeTimeoutMs) || nodeTimeoutMs <= 0) throw new Error(`redis cluster: nodeTimeoutMs must be a positive integer, got ${nodeTimeoutMs}`);
  if (!exitHook) {
    exitHook = true;
    process.on('exit', () => {
      for (const c of running) c.kill('SIGKILL');
      for (const d of tempDirs) {
        try {
          rmSync(d, { recursive: true, force: true });
        } catch {
          // best effort on the way out
        }
      }
    });
  }
  let lastErr: unknown;
  // A free port may be taken between probing and binding (by anyone, or a node's bus): start over.
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      return await launch(masters, replicas, nodeTimeoutMs, options.args ?? []);
    } catch (err) {
      lastErr = err;
    }
  }
  throw lastErr;
}

/** One redis-server process of the cluster. */
class NodeProcess implements ClusterNode {
  private stderr = '';
  private dead = false;
  private readonly exited: Promise<void>;

  constructor(
    readonly port: number,
    private readonly child: ChildProcess,
  ) {
    running.add(child);
    // redis-server logs (warnings and worse here) to stdout; config errors go to stderr.
    const keep = (d: Buffer) => {
      this.stderr = (this.stderr + d.toString()).slice(-2000);
    };
    child.stdout!.on('data', keep);
    child.stderr!.on('data', keep);
    this.exited = new Promise<void>((resolve) => {
      const gone = () => {
        this.dead = true;
        running.delete(child);
        resolve();
      };
      child.once('exit', gone);
      // A binary that cannot be spawned emits 'error' (and maybe no 'exit').
      child.once('error', (err) => {
        this.stderr += `\n${err.message}`;
        gone();
      });
    });
  }

  get alive(): boolean {
    return !this.dead;
  }

  /** Last lines of the node's output (its log at level warning, and stderr), for error messages. */
  tail(): string {
    return this.stderr.trim();
  }

  async kill(): Promise<void> {
    if (!this.dead) this.child.kill('SIGKILL');
    await this.exited;
  }

  /** SIGTERM, SIGKILL after 2 s; resolves once it has exited. */
  async stop(): Promise<void> {
    if (this.dead) return;
    this.child.kill('SIGTERM');
    const timer = setTimeout(() => this.child.kill('SIGKILL'), 2000);
    await this.exited;
    clearTimeout(timer);
  }

  /** Polls PING until +PONG; throws (with the stderr tail) if the process exits or time runs out. */
  async waitForPong(timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      if (this.dead) throw new Error(`redis cluster: node on port ${this.port} exited before answering: ${this.tail()}`);
      if (await ping(this.port)) return;
      if (Date.now() > deadline) throw new Error(`redis cluster: no PONG on port ${this.port} within ${timeoutMs} ms: ${this.tail()}`);
      await sleep(20);
    }
  }
}

async function launch(masters: number, replicas: number, nodeTimeoutMs: number, extra: string[]): Promise<RedisClusterHandle> {
  const count = masters * (1 + replicas);
  // A client port and a cluster-bus port for each node, all distinct. (The default bus port, port +
  // 10000, is neither known free nor always below 65536 for an ephemeral port.)
  const taken = new Set<number>();
  while (taken.size < 2 * count) taken.add(await freePort());
  const ports = [...taken];
  const dir = mkdtempSync(path.join(os.tmpdir(), 'ambit-redis-cluster-'));
  tempDirs.add(dir);
  const servers: NodeProcess[] = [];

  let stopping: Promise<void> | null = null;
  const stop = (): Promise<void> => {
    stopping ??= (async () => {
      await Promise.all(servers.map((s) => s.stop()));
      await rm(dir, { recursive: true, force: true });
      tempDirs.delete(dir);
    })();
    return stopping;
  };

  const waitHealthy = async (timeoutMs = 20_000): Promise<void> => {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const live = servers.filter((s) => s.alive);
      const livePorts = new Set(live.map((s) => s.port));
      const problems = live.length === 0 ? ['no node is running'] : (await Promise.all(live.map((s) => healthOf(s.port, livePorts)))).filter((p): p is string => p !== null);
      if (problems.length === 0) return;
      if (Date.now() > deadline) {
        const logs = servers.filter((s) => s.tail() !== '').map((s) => `[${s.port}${s.alive ? '' : ', dead'}] ${s.tail().slice(-300)}`);
        throw new Error(`redis cluster: not healthy within ${timeoutMs} ms: ${problems.join('; ')}${logs.length > 0 ? `\nnode stderr:\n${logs.join('\n')}` : ''}`);
      }
      await sleep(100);
    }
  };

  const masterOf = async (slot: number): Promise<number> => {
    if (!Number.isInteger(slot) || slot < 0 || slot >= SLOTS) throw new Error(`redis cluster: no hash slot ${slot} (0..${SLOTS - 1})`);
    const problems: string[] = [];
    for (const s of servers) {
      if (!s.alive) continue;
      let ranges: SlotRange[];
      try {
        ranges = parseSlots(await ask(s.port, [['CLUSTER', 'SLOTS']]).then((r) => r[0]));
      } catch (err) {
        problems.push(`${s.port}: ${firstLine(err)}`);
        continue;
      }
      const range = ranges.find((r) => r.start <= slot && slot <= r.end);
      if (range === undefined) problems.push(`${s.port}: slot ${slot} unassigned`);
      else if (!servers.some((o) => o.port === range.master && o.alive)) problems.push(`${s.port}: slot ${slot} on dead node ${range.master}`);
      else return range.master;
    }
    throw new Error(`redis cluster: no live node names a live master for slot ${slot} (${problems.join('; ') || 'no node is running'}); waitHealthy() first?`);
  };

  try {
    for (let i = 0; i < count; i++) {
      const port = ports[2 * i];
      const args = [
        '--port', String(port), '--bind', HOST,
        '--cluster-enabled', 'yes', '--cluster-port', String(ports[2 * i + 1]),
        '--cluster-config-file', path.join(dir, `nodes-${port}.conf`), '--cluster-node-timeout', String(nodeTimeoutMs),
        '--cluster-replica-validity-factor', '0', '--cluster-allow-replica-migration', 'no',
        '--save', '', '--appendonly', 'no', '--loglevel', 'warning', '--dir', dir,
        '--dbfilename', `dump-${port}.rdb`, '--appenddirname', `appendonly-${port}`, '--repl-diskless-sync-delay', '0',
        ...extra,
      ];
      servers.push(new NodeProcess(port, spawn(serverBinary(), args, { stdio: ['ignore', 'pipe', 'pipe'] })));
    }
    await Promise.all(servers.map((s) => s.waitForPong(PONG_TIMEOUT_MS)));
    await create(servers.map((s) => s.port), replicas);
    await waitHealthy(FORM_TIMEOUT_MS);
    await waitReplicasSynced(servers, FORM_TIMEOUT_MS);
  } catch (err) {
    await stop();
    throw err;
  }

  return { nodes: servers.map((s) => ({ host: HOST, port: s.port })), servers, masterOf, waitHealthy, stop };
}

/** `redis-cli --cluster create`: slots spread over the first `masters` ports, the rest replicas. */
function create(ports: number[], replicas: number): Promise<void> {
  const args = ['--cluster', 'create', ...ports.map((p) => `${HOST}:${p}`), '--cluster-replicas', String(replicas), '--cluster-yes'];
  return new Promise((resolve, reject) => {
    execFile(cliBinary(), args, { timeout: CREATE_TIMEOUT_MS, maxBuffer: 4 << 20 }, (err, stdout, stderr) => {
      if (err === null) return resolve();
      const output = `${stdout}${stderr}`.trim().slice(-3000);
      reject(new Error(`redis cluster: ${cliBinary()} ${args.join(' ')} failed: ${firstLine(err)}${err.killed ? ` (killed after ${CREATE_TIMEOUT_MS} ms)` : ''}\n${output}`));
    });
  });
}

/** Polls INFO replication until every replica has its master link up and no sync in progress. */
async function waitReplicasSynced(servers: NodeProcess[], timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const problems = (await Promise.all(servers.filter((s) => s.alive).map((s) => replicaSyncOf(s.port)))).filter((p): p is string => p !== null);
    if (problems.length === 0) return;
    if (Date.now() > deadline) throw new Error(`redis cluster: replicas not in sync within ${timeoutMs} ms: ${problems.join('; ')}`);
    await sleep(100);
  }
}

/** null when the node on `port` is a master, or a replica done syncing with its master; else what is wrong. */
async function replicaSyncOf(port: number): Promise<string | null> {
  let info: string;
  try {
    info = String((await ask(port, [['INFO', 'replication']]))[0]);
  } catch (err) {
    return `${port}: ${firstLine(err)}`;
  }
  const field = (name: string) => new RegExp(`^${name}:(\\S+)`, 'm').exec(info)?.[1];
  if (field('role') !== 'slave') return null;
  if (field('master_link_status') !== 'up' || field('master_sync_in_progress') !== '0') {
    return `${port}: replica of ${field('master_port') ?? '?'}, link ${field('master_link_status') ?? '?'}, sync in progress ${field('master_sync_in_progress') ?? '?'}`;
  }
  return null;
}

/** null when the node on `port` says cluster_state:ok and names a live master for every slot; else what is wrong. */
async function healthOf(port: number, livePorts: Set<number>): Promise<string | null> {
  let info: string;
  let ranges: SlotRange[];
  try {
    const [i, s] = await ask(port, [['CLUSTER', 'INFO'], ['CLUSTER', 'SLOTS']]);
    info = String(i);
    ranges = parseSlots(s);
  } catch (err) {
    return `${port}: ${firstLine(err)}`;
  }
  const state = /^cluster_state:(\S+)/m.exec(info)?.[1];
  if (state !== 'ok') return `${port}: cluster_state:${state ?? '?'}`;
  let served = 0;
  const dead = new Set<number>();
  for (const r of ranges) {
    if (livePorts.has(r.master)) served += r.end - r.start + 1;
    else dead.add(r.master);
  }
  if (served !== SLOTS) return `${port}: ${served}/${SLOTS} slots on live masters${dead.size > 0 ? ` (others on ${[...dead].join(', ')})` : ''}`;
  return null;
}

interface SlotRange {
  start: number;
  end: number;
  /** The master's port. */
  master: number;
}

/** CLUSTER SLOTS (RESP2): [[start, end, [ip, port, id, ...], ...replicas], ...]. */
function parseSlots(reply: unknown): SlotRange[] {
  if (!Array.isArray(reply)) throw new Error(`CLUSTER SLOTS: unexpected reply ${JSON.stringify(reply)}`);
  return reply.map((entry: unknown) => {
    if (!Array.isArray(entry) || entry.length < 3 || !Array.isArray(entry[2])) throw new Error(`CLUSTER SLOTS: unexpected entry ${JSON.stringify(entry)}`);
    return { start: Number(entry[0]), end: Number(entry[1]), master: Number(entry[2][1]) };
  });
}

/** Sends `commands` on one short-lived connection to the node; fails fast (about 1 s) on a dead or stuck node. */
async function ask(port: number, commands: string[][]): Promise<unknown[]> {
  const conn = new Redis({
    host: HOST,
    port,
    lazyConnect: true,
    protocol: 2,
    maxRetriesPerRequest: 1,
    connectTimeout: ASK_TIMEOUT_MS,
    commandTimeout: ASK_TIMEOUT_MS,
    retryStrategy: () => null,
    enableOfflineQueue: false,
  });
  conn.on('error', () => {}); // the failure reaches the caller through the rejected promise
  try {
    await conn.connect();
    const out: unknown[] = [];
    for (const [name, ...args] of commands) out.push(await conn.call(name, args));
    return out;
  } finally {
    conn.disconnect();
  }
}

