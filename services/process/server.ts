/**
 * Starts one Ambit process in its role: 'all' (gateway and matcher in one process; embedded
 * memory-only hub without Redis), 'gateway' (device and publisher streams over a Redis hub) or
 * 'matcher' (the engine, fed from Redis). Shutdown drains streams, flushes, closes Redis and
 * releases the GPU.
 */
import { randomBytes } from 'node:crypto';
import * as grpc from '@grpc/grpc-js';
import { ReflectionService } from '@grpc/reflection';
import { HealthImplementation } from 'grpc-health-check';
import { DEFAULT_LIMITS } from '../../src/model/limits.js';
import { KeySet } from '../edge/jwks.js';
import { TokenAuthority } from '../edge/auth.js';
import { type ServerConfig, DEFAULT_CONFIG, checkConfig } from './config.js';
import { EmbeddedHub } from '../hub/embedded.js';
import { openEngine, openPatterns, patternTickMs } from '../matcher/engine.js';
import { Gateway } from '../edge/gateway.js';
import type { Hub, HubStats } from '../hub/port.js';
import { LinkedHub } from '../hub/linked.js';
import { linkedPartitions } from '../hub/partitioned.js';
import { startPartitions } from './partitions.js';
import { Socket, connect } from 'node:net';
import { HUB_PIPE_FD, type Link, setEventOrigin, socketLink } from '../hub/link.js';
import type { HubFanOut } from '../hub/embedded.js';
import { type Logger, silentLogger } from './log.js';
import { MatchCore } from '../matcher/core.js';
import { Metrics } from './metrics.js';
import { connectGatewayHub, startMatcherRole } from './roles.js';
import { SERVICES, reflectionPackage } from '../../api/rpc.js';
import cluster from 'node:cluster';
import { Readiness } from './readiness.js';
import { Dashboard } from './dashboard.js';
import { DeviceExpiry, type SeenTracker } from '../edge/seen.js';
import { plainAnswer, startWsServer } from '../edge/ws-server.js';
import { connectHandler, withCors } from '../edge/connect-edge.js';

/** The largest request message the server takes (grpc-js and the gateway's own device streams alike). */
const MAX_RECEIVE_BYTES = 4 * 1024 * 1024;

export interface RunningServer {
  readonly config: ServerConfig;
  /** The gRPC port (null for a matcher, which serves no gRPC). */
  readonly port: number | null;
  readonly metricsPort: number | null;
  /** The WebSocket port of device streams (null: off, or no gateway here). */
  readonly webPort: number | null;
  readonly authority: TokenAuthority | null;
  readonly hub: Hub | null;
  /** Engine in use and why (matcher-holding roles). */
  readonly engineDetail: string;
  /** Who carries this process's device streams (null: it serves no gRPC). */
  readonly deviceStreams: 'http2' | 'grpc-js' | null;
  /** With AMBIT_PARTITIONS: where each hub partition listens for the node's gateway processes. */
  readonly partitionPaths: string[];
  /** This gateway's record of when devices were seen (null: no gateway here). */
  readonly seen: SeenTracker | null;
  /** The sweep of devices unseen for AMBIT_DEVICE_EXPIRY_DAYS (null: none runs here). */
  readonly expiry: DeviceExpiry | null;
  stop(): Promise<void>;
}

export interface StartOptions {
  /** False: no gRPC server; the hub is served to a node's gateway processes instead (gateways.ts). */
  grpc?: boolean;
  /** The node's fan-out shards: the embedded hub's device logs live there (gateways.ts). */
  shards?: HubFanOut;
  /** Clock (ms since the epoch) of tokens and device lifecycle, for tests. */
  now?: () => number;
}

/**
 * The gRPC port's credentials: plaintext, TLS, or mutual TLS (client certificates checked against
 * `clientCa`, required or optional). Mutual TLS goes through grpc-js's certificate-provider
 * credentials, the one way it offers to ask for a client certificate without requiring one; the
 * provider here hands over the configured PEMs (it serves both roles, so the order grpc-js reads
 * its arguments in does not matter).
 */
export function serverCredentials(tls: ServerConfig['tls']): grpc.ServerCredentials {
  if (tls === null) return grpc.ServerCredentials.createInsecure();
  const ca = tls.clientCa ?? null;
  if (ca === null) return grpc.ServerCredentials.createSsl(null, [{ cert_chain: tls.cert, private_key: tls.key }], false);
  // Delivered in a microtask: grpc-js adds the listeners before it registers the server that waits
  // for them, and an update delivered at once would reach no server (its connections then drop).
  const pems: grpc.experimental.CertificateProvider = {
    addCaCertificateListener: (l) => queueMicrotask(() => l({ caCertificate: ca })),
    removeCaCertificateListener: () => {},
    addIdentityCertificateListener: (l) => queueMicrotask(() => l({ certificate: tls.cert, privateKey: tls.key })),
    removeIdentityCertificateListener: () => {},
  };
  return grpc.experimental.createCertificateProviderServerCredentials(pems, pems, tls.requireClientCert ?? true);
}

/** How often a gateway writes when devices were seen, and rewrites its connected ones, for an expiry. */
export function seenPeriods(expiryMs: number): { flushMs: number; refreshMs: number } {
  const e = expiryMs > 0 ? expiryMs : 30 * 86_400_000;
  return { flushMs: Math.max(1, Math.min(60_000, Math.floor(e / 8))), refreshMs: Math.max(1, Math.min(3_600_000, Math.floor(e / 4))) };
}

/** A gateway's link to one fan-out shard or hub partition of its node (a Unix socket). */
async function connectThread(what: string, path: string): Promise<Link> {
  const socket = connect(path);
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', resolve);
    socket.once('error', (err) => reject(new Error(`hub: cannot reach the ${what} at ${path}: ${err.message}`)));
  });
  return socketLink(socket);
}

/** Links to each of `paths`, or none (those made are closed) if one cannot be reached. */
async function connectAll(what: string, paths: readonly string[]): Promise<Link[]> {
  const connected = await Promise.allSettled(paths.map((p) => connectThread(what, p)));
  const failed = connected.find((c): c is PromiseRejectedResult => c.status === 'rejected');
  if (failed !== undefined) {
    for (const c of connected) if (c.status === 'fulfilled') c.value.close();
    throw failed.reason;
  }
  return connected.map((c) => (c as PromiseFulfilledResult<Link>).value);
}

export async function startServer(partial: Partial<ServerConfig> = {}, log: Logger = silentLogger(), options: StartOptions = {}): Promise<RunningServer> {
  const config: ServerConfig = { ...DEFAULT_CONFIG, ...partial };
  checkConfig(config);
  const cleanups: (() => Promise<void>)[] = [];
  const cleanup = async () => {
    for (const f of cleanups.splice(0).reverse()) await f().catch((err: unknown) => log.error({ err }, 'shutdown step failed'));
  };
  try {
    let hub: Hub | null = null;
    let engineDetail = '';
    // What /metrics reads engine figures from: the hub, or in a matcher-only process the matcher.
    let statsSource: { stats(): Promise<HubStats> } | null = null;
    let partitionPaths: string[] = [];
    // A gateway process numbers the events it accepts from its own origin (unique in the node).
    if (config.hubInParent) setEventOrigin(config.eventOrigin);
    if (config.hubInParent && config.hubPartitions.length > 0) {
      // A gateway of a node whose parent process holds hub partitions: a link to each.
      const h = linkedPartitions(await connectAll('hub partition', config.hubPartitions));
      hub = h;
      cleanups.push(() => h.close());
    } else if (config.hubInParent) {
      // A gateway of a node whose parent process holds the embedded hub.
      const shardLinks = await connectAll('fan-out shard', config.hubShards);
      const h = new LinkedHub(socketLink(new Socket({ fd: HUB_PIPE_FD, readable: true, writable: true })), { shards: shardLinks });
      hub = h;
      cleanups.push(() => h.close());
    } else if (config.redisUrl === null && config.partitions > 0) {
      const mlog = log.child({ component: 'matcher' });
      const parts = await startPartitions(config.partitions, config, mlog, (err) => {
        // Its devices' subscriptions and logs are gone: stop the node.
        mlog.fatal({ err }, 'a hub partition died; the node stops');
        process.exit(1);
      });
      cleanups.push(() => parts.stop());
      hub = parts.hub;
      partitionPaths = parts.paths;
      engineDetail = (await hub.stats()).engineDetail;
      mlog.info({ partitions: config.partitions, mode: 'embedded', durable: false }, `${config.partitions} hub partitions (${engineDetail}); embedded mode keeps all state in memory (not durable)`);
    } else if (config.redisUrl === null) {
      const { engine, detail } = await openEngine(config.engine, config);
      engineDetail = detail;
      const patterns = await openPatterns(config);
      hub = new EmbeddedHub(new MatchCore(engine, config.maxSubscriptionsPerDevice, patterns), { retention: config.retention, dedupe: config.dedupe, engineDetail: detail, patternTickMs: patternTickMs(config.patternLatenessMs), ...(options.shards === undefined ? {} : { shards: options.shards }) });
      const h = hub;
      cleanups.push(() => h.close());
      log.child({ component: 'matcher' }).info({ engine: engine.name, detail, mode: 'embedded', durable: false }, `engine ${engine.name}: ${detail}; embedded mode keeps all state in memory (not durable)`);
    } else {
      if (config.role !== 'gateway') {
        const m = await startMatcherRole(config, log.child({ component: 'matcher' }));
        engineDetail = m.engineDetail;
        statsSource = m;
        cleanups.push(() => m.stop());
      }
      if (config.role !== 'matcher') {
        const h = await connectGatewayHub(config, log.child({ component: 'hub' }));
        hub = h;
        cleanups.push(() => h.close());
      }
    }

    const now = options.now ?? Date.now;
    // Devices unseen for the expiry are purged by the process that holds the hub (each gateway
    // process in Redis mode: sweeps are idempotent), not by a gateway of a node's parent.
    let expiry: DeviceExpiry | null = null;
    if (hub !== null && !config.hubInParent && config.deviceExpiryMs > 0) {
      const e = new DeviceExpiry(hub, now, { expiryMs: config.deviceExpiryMs, everyMs: Math.max(1, Math.min(3_600_000, Math.floor(config.deviceExpiryMs / 4))), beforeSweep: async () => gatewayRef?.seen?.flush() }, log.child({ component: 'lifecycle' }));
      e.start();
      expiry = e;
      cleanups.push(async () => e.stop());
    }
    const metrics = new Metrics(hub ?? statsSource, config.role, statsSource);
    cleanups.push(() => metrics.close());
    const readiness = new Readiness();
    if (hub !== null) readiness.watchHub(hub);
    if (statsSource !== null) readiness.watchMatchers(statsSource);
    metrics.readiness = readiness;
    // The dashboard's data needs an ops token: the gateway's authority, or one of the configured
    // secret in a process without gRPC.
    let authority: TokenAuthority | null = null;
    const ownAuthority = config.tokenSecret === null ? null : new TokenAuthority(config.tokenSecret);
    const dashboard = new Dashboard({ role: config.role, counters: metrics.counters, publishSeconds: metrics.publishSeconds, stats: hub !== null ? () => hub!.stats() : statsSource !== null ? () => statsSource!.stats() : null, readiness, density: () => gatewayRef?.density() ?? null, shards: hub?.shardStatus === undefined ? null : () => hub!.shardStatus!() }, () => authority ?? ownAuthority);
    metrics.routes = (req, res) => dashboard.handle(req, res);
    cleanups.push(async () => dashboard.close());
    const metricsPort = config.metricsPort === null ? null : await metrics.listen(config.host, config.metricsPort);

    let followHealth: () => Promise<unknown> = async () => {};
    let gatewayRef: Gateway | null = null;
    let port: number | null = null;
    let deviceStreams: RunningServer['deviceStreams'] = null;
    let webPort: number | null = null;
    if (hub !== null && options.grpc !== false) {
      const secret = config.tokenSecret ?? randomBytes(32).toString('base64url');
      // An identity provider's keys: read before the port opens. When they cannot be read (the
      // provider down at start), the gateway starts anyway and keeps trying: its own tokens work,
      // the provider's are UNAVAILABLE until the keys are in (a crash loop would refuse both).
      const keys = config.jwks === null ? null : await KeySet.open(config.jwks, { refreshS: config.jwksRefreshS });
      if (keys !== null) {
        cleanups.push(async () => keys.close());
        const loaded = (): void => log.info({ jwks: config.jwks, keys: keys.stats().keys, skipped: keys.stats().skipped }, 'identity provider keys loaded');
        if (keys.usable) loaded();
        else {
          log.warn({ jwks: config.jwks, err: keys.stats().lastError }, "identity provider keys not loaded: its tokens are refused (UNAVAILABLE) until they are; retrying");
          void keys.ready().then(loaded);
        }
      }
      authority = new TokenAuthority(secret, undefined, { keys, audience: config.tokenAudience, issuer: config.tokenIssuer, clockSkewS: config.tokenClockSkewS, subjectClaim: config.tokenSubjectClaim, scopeClaim: config.tokenScopeClaim, tenantClaim: config.tenantClaim });
      const gateway = new Gateway(hub, authority, DEFAULT_LIMITS, metrics, log.child({ component: 'gateway' }), {
        deviceStreams: config.deviceStreams,
        rawWrites: config.directWrites,
        maxReceiveBytes: MAX_RECEIVE_BYTES,
        // A gateway of a node of several shares its port: it cannot be drained alone.
        onDrain: config.hubInParent || cluster.isWorker
          ? null
          : () => {
              readiness.drain();
              void followHealth().catch(() => {});
            },
        seen: seenPeriods(config.deviceExpiryMs),
        now,
        revocationKeepDays: config.revocationKeepDays,
        certScopes: config.tlsClientScopes === null ? null : new Set(config.tlsClientScopes),
        rateLimits: config.rateLimits,
        tenantLimits: config.tenantLimits,
        tenants: config.tenantClaim !== null,
      });
      // At shutdown, after the streams ended (cleanups run last first): the last seen times are written.
      cleanups.push(async () => gateway.seen?.close());
      const server = new grpc.Server({
        // A client that never reads must not hold memory: keepalive finds dead peers.
        'grpc.keepalive_time_ms': 30_000,
        'grpc.keepalive_timeout_ms': 10_000,
        'grpc.http2.max_ping_strikes': 5,
        'grpc.max_receive_message_length': MAX_RECEIVE_BYTES,
      });
      gateway.addTo(server);
      gatewayRef = gateway;
      const health = new HealthImplementation({ '': 'SERVING', ...Object.fromEntries(SERVICES.map((s) => [s.typeName, 'SERVING' as const])) });
      health.addToServer(server);
      // Health follows readiness: every service while the process is ready; the Publisher service
      // only while matchers also run (otherwise events are stored and wait).
      const publisher = SERVICES.find((x) => x.typeName.endsWith('PublisherService'));
      const follow = async () => {
        const r = await readiness.report();
        const status = r.ready ? 'SERVING' : 'NOT_SERVING';
        health.setStatus('', status);
        for (const x of SERVICES) health.setStatus(x.typeName, x === publisher && r.checks.matchers?.ok === false ? 'NOT_SERVING' : status);
        return r;
      };
      followHealth = follow;
      await follow();
      const healthTimer = setInterval(() => void follow().catch((err: unknown) => log.warn({ err }, 'readiness not checked')), config.healthIntervalMs);
      healthTimer.unref();
      cleanups.push(async () => clearInterval(healthTimer));
      new ReflectionService(reflectionPackage() as never).addToServer(server);
      const creds = serverCredentials(config.tls);
      port = await new Promise<number>((resolve, reject) => server.bindAsync(`${config.host.includes(':') ? `[${config.host}]` : config.host}:${config.port}`, creds, (err, p) => (err ? reject(err) : resolve(p))));
      const ownStreams = gateway.takeOverDeviceStreams(server);
      deviceStreams = ownStreams ? 'http2' : 'grpc-js';
      if (config.deviceStreams === 'http2' && !ownStreams) log.child({ component: 'server' }).warn('device streams stay with grpc-js: its HTTP/2 servers were not found (a grpc-js upgrade changed its shape)');
      if (config.webPort !== null) {
        // Closed after the gRPC cleanup below has drained the sessions (cleanups run last first).
        const ws = await startWsServer({
          host: config.host,
          port: config.webPort,
          tls: config.tls,
          maxPayload: MAX_RECEIVE_BYTES + 1,
          onRequest: withCors(config.webOrigins, connectHandler(gateway, MAX_RECEIVE_BYTES, plainAnswer)),
          onStream: (socket, credentials, req) => gateway.connectWs(socket, credentials, req.socket),
        });
        webPort = ws.port;
        cleanups.push(() => ws.close(config.shutdownGraceS * 1000));
      }
      cleanups.push(async () => {
        health.setStatus('', 'NOT_SERVING');
        for (const s of SERVICES) health.setStatus(s.typeName, 'NOT_SERVING');
        gateway.drain();
        await new Promise<void>((resolve) => {
          const timer = setTimeout(() => {
            server.forceShutdown();
            resolve();
          }, config.shutdownGraceS * 1000);
          server.tryShutdown(() => {
            clearTimeout(timer);
            resolve();
          });
        });
      });
      log.child({ component: 'server' }).info({ port, metricsPort, webPort, tls: config.tls !== null, role: config.role, deviceStreams }, `listening on ${config.host}:${port}${webPort === null ? '' : `; device streams over WebSocket on ${config.host}:${webPort}`}`);
    }
    // Stopping: unready first, before anything closes.
    cleanups.push(async () => readiness.drain());
    if (port === null) log.child({ component: 'server' }).info({ port: null, metricsPort, role: config.role }, `${hub === null ? 'matcher' : 'hub'} ready${metricsPort === null ? '' : `; metrics on ${config.host}:${metricsPort}`}`);
    let stopped: Promise<void> | null = null;
    return {
      config,
      port,
      metricsPort,
      webPort,
      authority,
      hub,
      engineDetail,
      deviceStreams,
      partitionPaths,
      seen: gatewayRef?.seen ?? null,
      expiry,
      stop: () => (stopped ??= cleanup()),
    };
  } catch (err) {
    await cleanup();
    throw err;
  }
}
