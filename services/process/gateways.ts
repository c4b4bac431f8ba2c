/**
 * Several gateway processes on one node sharing one gRPC port (`AMBIT_GATEWAYS=N`): node:cluster's
 * primary accepts connections and hands them to the workers in turn, so HTTP/2, TLS, protobuf and
 * stream writes use N cores. A gateway keeps no state but its open streams. With Redis any number
 * of them serve one deployment, and this process runs the matcher when the role is `all`. Without
 * Redis this process keeps the embedded hub (engine, subscriptions, notification logs) and serves
 * it to its workers over a private pipe each (hub-server.ts); with AMBIT_FANOUT_SHARDS the
 * notification logs live in shard threads of this process that the workers reach over Unix
 * sockets of their own (fanout-shards.ts); with AMBIT_PARTITIONS the whole hub is split by device
 * over threads of this process, and the workers link to each (partitions.ts). Either way it starts the workers,
 * restarts one that dies, and stops them all on shutdown.
 */
import cluster, { type Worker } from 'node:cluster';
import { randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import { TokenAuthority } from '../edge/auth.js';
import type { ServerConfig } from './config.js';
import { type RunningServer, startServer } from './server.js';
import { HubServer } from '../hub/hub-server.js';
import { EmbeddedHub } from '../hub/embedded.js';
import type { Socket } from 'node:net';
import { HUB_PIPE_FD, socketLink } from '../hub/link.js';
import { type FanOutShards, startFanOutShards } from './fanout-shards.js';

export interface GatewayNode {
  readonly config: ServerConfig;
  /** The shared gRPC port, once every worker listens. */
  readonly port: number;
  /** The shared WebSocket port of device streams (AMBIT_WEB_PORT), null when off. */
  readonly webPort: number | null;
  /** The matcher's metrics port (role all), null otherwise. */
  readonly metricsPort: number | null;
  /** Issues tokens with the secret every worker checks (dev mode prints some). */
  readonly authority: TokenAuthority;
  /** Workers' process ids, in worker order. */
  pids(): number[];
  stop(): Promise<void>;
}

/** True in a process that cluster started as a gateway worker. */
export function isGatewayWorker(): boolean {
  return cluster.isWorker;
}

/**
 * Starts the matcher (role all) and `config.gateways` workers; resolves once each listens.
 * `env`: the environment the workers start from (this process's, with its flags applied).
 */
export async function startGatewayNode(config: ServerConfig, env: NodeJS.ProcessEnv, log: Logger): Promise<GatewayNode> {
  const plog = log.child({ component: 'gateways' });
  const secret = config.tokenSecret ?? randomBytes(32).toString('base64url');
  const embedded = config.redisUrl === null;
  let matcher: RunningServer | null = null;
  let hubServer: HubServer | null = null;
  let shards: FanOutShards | null = null;
  if (embedded) {
    if (config.fanoutShards > 0) {
      shards = await startFanOutShards(config.fanoutShards, config.retention, config.logLevel, plog, (err) => {
        // Its devices' logs are gone and their notifications would go nowhere: stop the node.
        plog.fatal({ err }, 'a fan-out shard died; the node stops');
        process.exit(1);
      });
    }
    // The hub's process serves no gRPC; its metrics report the hub's figures.
    try {
      matcher = await startServer({ ...config, gateways: 1, fanoutShards: 0 }, log, { grpc: false, ...(shards === null ? {} : { shards: shards.fanout }) });
    } catch (err) {
      await shards?.stop();
      throw err;
    }
    const hub = matcher.hub;
    if (matcher.partitionPaths.length === 0) {
      if (!(hub instanceof EmbeddedHub)) throw new Error('gateways: an embedded node serves its embedded hub');
      // With shards, inboxes open there (the gateways have a link to each), not in the hub.
      hubServer = new HubServer(hub, log.child({ component: 'hub-server' }), shards === null ? hub : null);
    }
  } else if (config.role === 'all') matcher = await startServer({ ...config, role: 'matcher', gateways: 1 }, log);
  // With hub partitions the gateways link to each partition's thread; nothing goes through this one.
  const partitionPaths = matcher?.partitionPaths ?? [];
  const n = config.gateways;
  const base = config.metricsPort;
  /** Each started worker numbers its events from an origin no other worker of this node had. */
  let origins = 0;
  const workerEnv = (i: number): NodeJS.ProcessEnv => ({
    ...env,
    AMBIT_ROLE: 'gateway',
    ...(embedded ? { AMBIT_HUB: 'parent' } : {}),
    ...(shards === null ? {} : { AMBIT_HUB_SHARDS: JSON.stringify(shards.paths) }),
    ...(partitionPaths.length === 0 ? {} : { AMBIT_HUB_PARTITIONS: JSON.stringify(partitionPaths) }),
    AMBIT_FANOUT_SHARDS: '0',
    AMBIT_PARTITIONS: '0',
    AMBIT_GATEWAYS: '1',
    AMBIT_TOKEN_SECRET: secret,
    AMBIT_DEV: '0',
    // Each worker's own /metrics: the port after the matcher's, one per worker (0: any free one).
    AMBIT_METRICS_PORT: base === null ? 'off' : base === 0 ? '0' : String(base + 1 + i),
    AMBIT_GATEWAY_INDEX: String(i),
    AMBIT_EVENT_ORIGIN: String(++origins),
  });
  // Workers get their settings from the environment only (flags were applied to `env`).
  // Without Redis each worker gets a private pipe to the hub (its fd 4, HUB_PIPE_FD), unless the
  // hub is partitioned.
  cluster.setupPrimary({ args: [], ...(hubServer !== null ? { stdio: ['inherit', 'inherit', 'inherit', 'ipc', 'pipe'] } : {}) });

  const workers: (Worker | null)[] = new Array(n).fill(null);
  let stopping = false;
  let port = -1;
  let webPort: number | null = null;
  const restarts = new Array<number>(n).fill(0);
  const fork = (i: number): Promise<void> => {
    const w = cluster.fork(workerEnv(i));
    workers[i] = w;
    if (hubServer !== null) hubServer.serve(socketLink(w.process.stdio![HUB_PIPE_FD] as Socket));
    const startedAt = Date.now();
    w.once('exit', (code, signal) => {
      if (workers[i] === w) workers[i] = null;
      if (stopping) return;
      // A worker that ran a while is restarted at once; one that keeps dying backs off to 5 s.
      restarts[i] = Date.now() - startedAt > 10_000 ? 0 : restarts[i] + 1;
      const delay = Math.min(5000, restarts[i] === 0 ? 0 : 100 * 2 ** (restarts[i] - 1));
      plog.error({ worker: i, pid: w.process.pid, code, signal, restartInMs: delay }, `gateway worker ${i} exited (${signal ?? code}); restarting`);
      setTimeout(() => {
        if (!stopping) fork(i).catch((err: unknown) => plog.error({ err, worker: i }, `gateway worker ${i} did not start`));
      }, delay).unref();
    });
    return new Promise<void>((resolve, reject) => {
      // The worker says where it listens once its gRPC server is bound (main.ts).
      w.on('message', (m: unknown) => {
        const msg = m as { ambit?: string; port?: number; metricsPort?: number | null; webPort?: number | null };
        if (msg?.ambit !== 'listening' || typeof msg.port !== 'number') return;
        port = msg.port;
        webPort = typeof msg.webPort === 'number' ? msg.webPort : null;
        plog.info({ worker: i, pid: w.process.pid, port: msg.port, metricsPort: msg.metricsPort ?? null }, `gateway worker ${i} listening`);
        resolve();
      });
      w.once('exit', (code, signal) => reject(new Error(`gateways: worker ${i} exited (${signal ?? code}) before it listened`)));
    });
  };

  const stop = async (): Promise<void> => {
    stopping = true;
    // A message, not a signal: a worker that a signal to the whole group already stops ignores it
    // (a second signal would cut its streams short).
    const exits = workers.filter((w): w is Worker => w !== null && !w.isDead()).map((w) => new Promise<void>((resolve) => {
      w.once('exit', () => resolve());
      try {
        w.send({ ambit: 'stop' });
      } catch {
        w.process.kill('SIGTERM');
      }
    }));
    // A worker drains its streams for up to the grace period; past that and 5 s more it is killed.
    const killer = setTimeout(() => {
      for (const w of workers) if (w !== null && !w.isDead()) w.process.kill('SIGKILL');
    }, (config.shutdownGraceS + 5) * 1000);
    await Promise.all(exits);
    clearTimeout(killer);
    hubServer?.close();
    if (matcher !== null) await matcher.stop();
    await shards?.stop();
  };

  try {
    await Promise.all(Array.from({ length: n }, (_, i) => fork(i)));
  } catch (err) {
    await stop();
    throw err;
  }
  plog.info({ port, webPort, gateways: n, role: config.role }, `${n} gateway workers listening on ${config.host}:${port}${webPort === null ? '' : `; device streams over WebSocket on ${config.host}:${webPort}`}`);
  let stopped: Promise<void> | null = null;
  return {
    config,
    port,
    webPort,
    metricsPort: matcher?.metricsPort ?? null,
    authority: new TokenAuthority(secret),
    pids: () => workers.map((w) => w?.process.pid ?? -1),
    stop: () => (stopped ??= stop()),
  };
}
