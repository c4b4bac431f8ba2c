/**
 * Process configuration, from the environment (and flags in main.ts), validated whole with exact
 * errors before anything starts.
 */
import { SEQUENCER_NAMES, type SequencerName } from '../../src/engines/index.js';
import { DEFAULT_PATTERN_LIMITS } from '../../src/model/event-patterns.js';
import { DEFAULT_DEDUPE, type DedupeOptions } from '../matcher/event-ids.js';
import { readFileSync } from 'node:fs';
import { DEFAULT_RETENTION, type Retention } from '../hub/embedded.js';
import { ENGINE_CHOICES, type EngineChoice } from '../matcher/engine.js';
import { LOG_LEVELS } from './log.js';
import { DEFAULT_MAX_SUBSCRIPTIONS_PER_DEVICE } from '../hub/port.js';
import { MAX_EVENT_ORIGIN } from '../hub/link.js';
import { clusterSourceFromUrl } from '../redis/connection.js';
import { DEFAULT_CLUSTER_GROUPS, type GeoSpec, MAX_CLUSTER_GROUPS, MAX_MATCHER_PARTITIONS } from '../redis/keys.js';
import { MAX_GEO_SHARDS, MAX_WIDE_SHARDS } from '../redis/layout.js';
import { KNOWN_SCOPES, TENANT_NAME } from '../edge/auth.js';
import { NO_RATE_LIMITS, type RateLimits } from '../edge/rate-limits.js';

export type Role = 'all' | 'gateway' | 'matcher';

/** Gateway processes one node may run. */
export const MAX_GATEWAYS = 256;

export interface ServerConfig {
  role: Role;
  host: string;
  /** gRPC port; 0 picks a free one. */
  port: number;
  /** Prometheus /metrics port; 0 picks a free one, null turns it off. */
  metricsPort: number | null;
  /** Device streams over WebSocket (ws-device-stream.ts): the port; 0 picks a free one, null (the default) turns it off. */
  webPort: number | null;
  /** Origins whose pages may call the web port from another origin (CORS; '*' any); empty: same origin only. */
  webOrigins: string[];
  /** Redis connection URL; null runs the embedded, memory-only hub (role 'all' only). */
  redisUrl: string | null;
  /**
   * TLS material for Redis (rediss://): the CA to trust and this process's client certificate
   * (mutual TLS between the roles and Redis: AMBIT_REDIS_TLS_CA, AMBIT_REDIS_TLS_CERT,
   * AMBIT_REDIS_TLS_KEY); null: the system's CAs, no client certificate.
   */
  redisTls: { ca?: Buffer; cert?: Buffer; key?: Buffer } | null;
  /** Prefix of every Redis key, so several deployments can share one Redis. */
  redisPrefix: string;
  /**
   * REDIS_URL names seed nodes of a Redis Cluster (redis://h1:p1,h2:p2): the matcher's keys share
   * one hash slot and devices' notification keys spread over `redisDeviceGroups` slots.
   */
  redisCluster: boolean;
  /** Device groups of a cluster deployment; the same in every process (checked at start). */
  redisDeviceGroups: number;
  /** Redis mode: matcher partitions the devices are split over; the same in every process. */
  matcherPartitions: number;
  /** The partition a matcher process serves; null: all of them (a thread each when several). */
  matcherPartition: number | null;
  /**
   * Redis mode sharded by space (keys.ts `GeoSpec`; null: not): the matcher partitions are then
   * its geographic shards and wide shards (`matcherPartitions` = shards + wide).
   */
  geo: GeoSpec | null;
  engine: EngineChoice;
  /** The GPU engine keeps its CPU engine beside it (AMBIT_GPU_CPU_MIRROR; false: a third of the host memory a filter, every event on the GPU). */
  gpuCpuMirror: boolean;
  /** HMAC secret for tokens (≥ 32 bytes); null only in dev mode, which makes one up. */
  tokenSecret: string | null;
  /**
   * An identity provider's public keys, a JWK Set file or http(s) URL (AMBIT_JWKS): its tokens
   * (RS*, PS*, ES*, EdDSA) are taken beside the secret's own; null: none.
   */
  jwks: string | null;
  /** Seconds between reads of the JWK Set (0: read once). */
  jwksRefreshS: number;
  /** A token's `aud` must name one of these (empty: not checked). */
  tokenAudience: string[];
  /** A token's `iss` must be one of these (empty: not checked). */
  tokenIssuer: string[];
  /** Seconds of clock difference allowed on a token's `exp` and `nbf`. */
  tokenClockSkewS: number;
  /** The claims holding a token's subject (device id or publisher) and scopes. */
  tokenSubjectClaim: string;
  tokenScopeClaim: string;
  /** Tenants (AMBIT_TENANT_CLAIM): the identity provider's claim naming a token's tenant (the gateway's own tokens use `tenant`); null: tenants off. */
  tenantClaim: string | null;
  /** Dev mode: a made-up secret when none is set, and ready tokens printed at start. */
  dev: boolean;
  /**
   * TLS of the gRPC and WebSocket ports. `clientCa`: mutual TLS, client certificates checked
   * against this CA (AMBIT_TLS_CLIENT_CA), required unless `requireClientCert` is false
   * (AMBIT_TLS_CLIENT_CERT=optional).
   */
  tls: { cert: Buffer; key: Buffer; clientCa?: Buffer | null; requireClientCert?: boolean } | null;
  /** Mutual TLS: scopes a verified client certificate grants a call without a token (AMBIT_TLS_CLIENT_SCOPES); null: none. */
  tlsClientScopes: string[] | null;
  /** Rate limits (AMBIT_LIMIT_*; services/edge/rate-limits.ts); 0: unlimited. */
  rateLimits: RateLimits;
  /** Tenants' own rate limits over `rateLimits` (AMBIT_TENANT_LIMITS; '' the default tenant). */
  tenantLimits: Record<string, Partial<RateLimits>>;
  retention: Retention;
  /**
   * Redis mode: how long a matcher's lease lives without renewal (ms). Every matcher of a
   * deployment but the lease holder stands by; one takes over within about 1.25× this.
   */
  matcherLeaseMs: number;
  /**
   * Redis mode: the directory of a matcher's snapshot files (null: none, a start reads every
   * subscription back from Redis) and how often one is written besides at a clean stop (s; 0: only
   * then).
   */
  snapshotDir: string | null;
  snapshotIntervalS: number;
  /**
   * Redis mode, gateways: about how many entries the command stream keeps (XADD MAXLEN ~). A
   * matcher further behind loses publishes, and a snapshot older than that is refused.
   */
  commandStreamMaxLen: number;
  /**
   * Redis mode, matchers: how long (s) a matcher's read position may stay put behind the stored
   * offset and still hold back the leader's trimming (0: no bound). One stuck longer is trimmed
   * past and rebuilds itself from Redis.
   */
  stuckReadS: number;
  /**
   * Sharded by space, matchers: how long (s) a shard's leader waits for the shard a device leaves
   * to store past the hand-over before it applies the arrival anyway (30 by default; 0: no bound).
   * Past it the device's notifications still owed by the shard it left come after later ones; a
   * later hand-over from a shard given up on that has not stored since is applied at once.
   */
  handOverWaitS: number;
  /**
   * Event ids deduplicate for `windowMs` (0: off); an embedded hub (each partition) holds at most
   * `maxIds` of them. In Redis mode the ids live in Redis for the window.
   */
  dedupe: DedupeOptions;
  /** Subscriptions one device may hold; one more is RESOURCE_EXHAUSTED. */
  maxSubscriptionsPerDevice: number;
  logLevel: string;
  /** Seconds to wait for calls to finish on shutdown before cutting them. */
  shutdownGraceS: number;
  /** How often the gRPC health service is brought in line with readiness (ms; readiness.ts). */
  healthIntervalMs: number;
  /**
   * Devices unseen for this long expire: their subscriptions, position and backlog are purged
   * (ms; 0: never). A device is seen when a gateway hears from it and while its stream is open.
   */
  deviceExpiryMs: number;
  /** How long a revocation by token id or subject is kept unless the call says (days). */
  revocationKeepDays: number;
  /**
   * Gateway processes sharing the gRPC port (1: this process serves it). Without Redis, this
   * process keeps the embedded hub and the gateways reach it over a private pipe each.
   */
  gateways: number;
  /** A gateway process of a node whose parent process holds the embedded hub (set by gateways.ts). */
  hubInParent: boolean;
  /**
   * Fan-out shards of an embedded node of several gateways (0: the hub's thread keeps every
   * device's log): threads of the hub's process, each holding the logs of the devices that hash
   * to it and sending their notifications to the gateways itself.
   */
  fanoutShards: number;
  /** A gateway of a node with fan-out shards: where each shard listens (set by gateways.ts). */
  hubShards: string[];
  /**
   * Hub partitions of an embedded node (0: one hub on the main thread): threads, each matching,
   * storing and serving the devices that hash to it with an engine of its own; a publish goes to
   * every partition. Uses K cores for what one hub thread does otherwise.
   */
  partitions: number;
  /** A gateway process of a node with hub partitions: where each partition listens (set by gateways.ts). */
  hubPartitions: string[];
  /** A gateway process of an embedded node: the origin its events are numbered from, unique in the node (set by gateways.ts). */
  eventOrigin: number;
  /**
   * Who carries device streams (`DeviceService.Connect`): 'http2', the gateway on the HTTP/2
   * stream itself (services/edge/h2-device-stream.ts), or 'grpc-js', as every other method.
   */
  deviceStreams: 'http2' | 'grpc-js';
  /**
   * With grpc-js carrying device streams: notifications written to the HTTP/2 stream under a
   * device's call, a batch per write (services/edge/raw-stream.ts); false: each one through grpc-js.
   */
  directWrites: boolean;
  /**
   * Pattern subscriptions (docs/semantics.md E3): how long an event may wait for earlier-timed
   * ones before it is released to the patterns (ms; 0: released as it comes).
   */
  patternLatenessMs: number;
  /** Pattern subscriptions (E15): events each pattern element keeps at most. */
  patternRetainedPerElement: number;
  /** Pattern subscriptions: the sequencer, the CDP on the CPU or the GPU's (docs/gpu.md). */
  patternSequencer: SequencerName;
}

/** Fan-out shards one node may run. */
export const MAX_FANOUT_SHARDS = 64;

/** Hub partitions one node may run. */
export const MAX_PARTITIONS = 64;

export const DEFAULT_CONFIG: Readonly<ServerConfig> = Object.freeze({
  role: 'all',
  host: '127.0.0.1',
  port: 50051,
  metricsPort: 9464,
  webPort: null,
  webOrigins: [],
  redisUrl: null,
  redisTls: null,
  redisPrefix: 'ambit:',
  redisCluster: false,
  redisDeviceGroups: DEFAULT_CLUSTER_GROUPS,
  matcherPartitions: 1,
  matcherPartition: null,
  geo: null,
  engine: 'auto',
  gpuCpuMirror: true,
  tokenSecret: null,
  jwks: null,
  jwksRefreshS: 300,
  tokenAudience: [],
  tokenIssuer: [],
  tokenClockSkewS: 0,
  tokenSubjectClaim: 'sub',
  tokenScopeClaim: 'scope',
  tenantClaim: null,
  dev: false,
  tls: null,
  tlsClientScopes: null,
  rateLimits: NO_RATE_LIMITS,
  tenantLimits: {},
  retention: DEFAULT_RETENTION,
  matcherLeaseMs: 2000,
  snapshotDir: null,
  snapshotIntervalS: 300,
  commandStreamMaxLen: 100_000,
  stuckReadS: 600,
  handOverWaitS: 30,
  dedupe: DEFAULT_DEDUPE,
  maxSubscriptionsPerDevice: DEFAULT_MAX_SUBSCRIPTIONS_PER_DEVICE,
  logLevel: 'info',
  shutdownGraceS: 10,
  healthIntervalMs: 1000,
  deviceExpiryMs: 30 * 86_400_000,
  revocationKeepDays: 30,
  gateways: 1,
  hubInParent: false,
  fanoutShards: 0,
  hubShards: [],
  partitions: 0,
  hubPartitions: [],
  eventOrigin: 0,
  deviceStreams: 'http2',
  directWrites: true,
  patternLatenessMs: 0,
  patternRetainedPerElement: 10_000,
  patternSequencer: 'cdp',
});

/** Reads AMBIT_* (and REDIS_URL) variables over the defaults; throws naming the variable. */
export function configFromEnv(env: NodeJS.ProcessEnv = process.env): ServerConfig {
  const c: ServerConfig = { ...DEFAULT_CONFIG, retention: { ...DEFAULT_RETENTION }, dedupe: { ...DEFAULT_DEDUPE } };
  const str = (name: string): string | undefined => {
    const v = env[name];
    return v === undefined || v === '' ? undefined : v;
  };
  const int = (name: string, lo: number, hi: number): number | undefined => {
    const v = str(name);
    if (v === undefined) return undefined;
    const n = Number(v);
    if (!/^\d+$/.test(v) || !Number.isSafeInteger(n) || n < lo || n > hi) throw new Error(`config: ${name} must be an integer in [${lo}, ${hi}], got ${JSON.stringify(v)}`);
    return n;
  };
  const decimal = (name: string, lo: number, hi: number): number | undefined => {
    const v = str(name);
    if (v === undefined) return undefined;
    const n = Number(v);
    if (!/^\d+(\.\d+)?$/.test(v) || !(n >= lo && n <= hi)) throw new Error(`config: ${name} must be a number in [${lo}, ${hi}], got ${JSON.stringify(v)}`);
    return n;
  };
  function flag(name: string): boolean | undefined {
    const v = str(name);
    if (v === undefined) return undefined;
    if (!['0', '1', 'true', 'false'].includes(v)) throw new Error(`config: ${name} must be 0, 1, true or false, got ${JSON.stringify(v)}`);
    return v === '1' || v === 'true';
  }
  const role = str('AMBIT_ROLE');
  if (role !== undefined) {
    if (role !== 'all' && role !== 'gateway' && role !== 'matcher') throw new Error(`config: AMBIT_ROLE must be all, gateway or matcher, got ${JSON.stringify(role)}`);
    c.role = role;
  }
  c.host = str('AMBIT_HOST') ?? c.host;
  c.port = int('AMBIT_PORT', 0, 65535) ?? c.port;
  const mp = str('AMBIT_METRICS_PORT');
  c.metricsPort = mp === 'off' ? null : (int('AMBIT_METRICS_PORT', 0, 65535) ?? c.metricsPort);
  const wp = str('AMBIT_WEB_PORT');
  c.webPort = wp === 'off' ? null : (int('AMBIT_WEB_PORT', 0, 65535) ?? c.webPort);
  const origins = str('AMBIT_WEB_ORIGINS');
  if (origins !== undefined) {
    c.webOrigins = origins.split(',').map((o) => o.trim()).filter((o) => o !== '');
    const bad = c.webOrigins.find((o) => o !== '*' && !/^https?:\/\/[^/\s]+$/.test(o));
    if (bad !== undefined) throw new Error(`config: AMBIT_WEB_ORIGINS must be '*' or origins such as https://app.example.com (scheme and host, no path), got ${JSON.stringify(bad)}`);
  }
  c.redisUrl = str('REDIS_URL') ?? null;
  if (c.redisUrl !== null && !/^rediss?:\/\//.test(c.redisUrl)) throw new Error(`config: REDIS_URL must start with redis:// or rediss://, got ${JSON.stringify(c.redisUrl)}`);
  c.redisPrefix = str('AMBIT_REDIS_PREFIX') ?? c.redisPrefix;
  c.redisCluster = flag('AMBIT_REDIS_CLUSTER') ?? c.redisCluster;
  c.redisDeviceGroups = int('AMBIT_REDIS_DEVICE_GROUPS', 1, MAX_CLUSTER_GROUPS) ?? c.redisDeviceGroups;
  c.matcherPartitions = int('AMBIT_MATCHER_PARTITIONS', 1, MAX_MATCHER_PARTITIONS) ?? c.matcherPartitions;
  const geoShards = int('AMBIT_GEO_SHARDS', 1, MAX_GEO_SHARDS);
  if (geoShards !== undefined) {
    if (c.redisUrl === null) throw new Error('config: AMBIT_GEO_SHARDS is for Redis mode (REDIS_URL)');
    if (str('AMBIT_MATCHER_PARTITIONS') !== undefined) throw new Error('config: AMBIT_GEO_SHARDS and AMBIT_MATCHER_PARTITIONS exclude each other: a deployment sharded by space has AMBIT_GEO_SHARDS + AMBIT_GEO_WIDE_SHARDS matcher partitions');
    const layout = str('AMBIT_GEO_LAYOUT') ?? 'stripes';
    if (layout !== 'stripes' && layout !== 'sectors') throw new Error(`config: AMBIT_GEO_LAYOUT must be stripes or sectors, got ${JSON.stringify(layout)}`);
    c.geo = { shards: geoShards, wide: int('AMBIT_GEO_WIDE_SHARDS', 1, MAX_WIDE_SHARDS) ?? 1, cellDeg: decimal('AMBIT_GEO_CELL_DEG', 0.001, 30) ?? 0.05, guardM: decimal('AMBIT_GEO_GUARD_M', 0, 100_000) ?? 500, layout };
    c.matcherPartitions = c.geo.shards + c.geo.wide;
  } else {
    for (const name of ['AMBIT_GEO_WIDE_SHARDS', 'AMBIT_GEO_CELL_DEG', 'AMBIT_GEO_GUARD_M', 'AMBIT_GEO_LAYOUT', 'AMBIT_HANDOVER_WAIT_S']) if (str(name) !== undefined) throw new Error(`config: ${name} needs AMBIT_GEO_SHARDS (sharding by space)`);
  }
  c.handOverWaitS = int('AMBIT_HANDOVER_WAIT_S', 0, 24 * 3600) ?? c.handOverWaitS;
  const mpart = str('AMBIT_MATCHER_PARTITION');
  if (mpart !== undefined && mpart !== 'all') c.matcherPartition = int('AMBIT_MATCHER_PARTITION', 0, c.matcherPartitions - 1) ?? null;
  if (c.matcherPartitions > 1 && c.redisUrl === null) throw new Error('config: AMBIT_MATCHER_PARTITIONS is for Redis mode (REDIS_URL); an embedded node splits its hub with AMBIT_PARTITIONS');
  if (c.matcherPartition !== null && c.role === 'gateway') throw new Error('config: AMBIT_MATCHER_PARTITION is for a process that runs a matcher (role matcher or all)');
  if (env.AMBIT_REDIS_DEVICE_GROUPS !== undefined && env.AMBIT_REDIS_DEVICE_GROUPS !== '' && !c.redisCluster) throw new Error('config: AMBIT_REDIS_DEVICE_GROUPS is for a Redis Cluster (AMBIT_REDIS_CLUSTER=1)');
  if (c.redisCluster) {
    if (c.redisUrl === null) throw new Error('config: AMBIT_REDIS_CLUSTER needs REDIS_URL (the seed nodes: redis://host:port[,host:port...])');
    clusterSourceFromUrl(c.redisUrl); // exact error now rather than at connect
    if (/[{}]/.test(c.redisPrefix)) throw new Error(`config: AMBIT_REDIS_PREFIX must not contain { or } on a Redis Cluster (keys carry hash tags), got ${JSON.stringify(c.redisPrefix)}`);
  }
  const engine = str('AMBIT_ENGINE');
  if (engine !== undefined) {
    if (!(ENGINE_CHOICES as readonly string[]).includes(engine)) throw new Error(`config: AMBIT_ENGINE must be one of ${ENGINE_CHOICES.join(', ')}, got ${JSON.stringify(engine)}`);
    c.engine = engine as EngineChoice;
  }
  c.gpuCpuMirror = flag('AMBIT_GPU_CPU_MIRROR') ?? c.gpuCpuMirror;
  c.tokenSecret = str('AMBIT_TOKEN_SECRET') ?? null;
  c.jwks = str('AMBIT_JWKS') ?? null;
  c.jwksRefreshS = int('AMBIT_JWKS_REFRESH_S', 0, 86_400) ?? c.jwksRefreshS;
  const names = (name: string): string[] => (str(name) ?? '').split(',').map((x) => x.trim()).filter((x) => x !== '');
  c.tokenAudience = names('AMBIT_TOKEN_AUDIENCE');
  c.tokenIssuer = names('AMBIT_TOKEN_ISSUER');
  c.tokenClockSkewS = int('AMBIT_TOKEN_CLOCK_SKEW_S', 0, 3600) ?? c.tokenClockSkewS;
  c.tokenSubjectClaim = str('AMBIT_TOKEN_SUBJECT_CLAIM') ?? c.tokenSubjectClaim;
  c.tokenScopeClaim = str('AMBIT_TOKEN_SCOPE_CLAIM') ?? c.tokenScopeClaim;
  const tenantClaim = str('AMBIT_TENANT_CLAIM');
  if (tenantClaim !== undefined) {
    if (tenantClaim.trim() === '') throw new Error('config: AMBIT_TENANT_CLAIM must name a claim (e.g. tenant)');
    c.tenantClaim = tenantClaim.trim();
  }
  if (c.jwks === null) {
    // These shape only an identity provider's tokens: set without one, they would do nothing.
    for (const name of ['AMBIT_JWKS_REFRESH_S', 'AMBIT_TOKEN_AUDIENCE', 'AMBIT_TOKEN_ISSUER', 'AMBIT_TOKEN_CLOCK_SKEW_S', 'AMBIT_TOKEN_SUBJECT_CLAIM', 'AMBIT_TOKEN_SCOPE_CLAIM']) {
      if (str(name) !== undefined) throw new Error(`config: ${name} is for an identity provider's tokens (AMBIT_JWKS)`);
    }
  }
  c.dev = flag('AMBIT_DEV') ?? false;
  c.directWrites = flag('AMBIT_DIRECT_WRITES') ?? c.directWrites;
  const streams = str('AMBIT_DEVICE_STREAMS');
  if (streams !== undefined) {
    if (streams !== 'http2' && streams !== 'grpc-js') throw new Error(`config: AMBIT_DEVICE_STREAMS must be http2 or grpc-js, got ${JSON.stringify(streams)}`);
    c.deviceStreams = streams;
  }
  const cert = str('AMBIT_TLS_CERT');
  const key = str('AMBIT_TLS_KEY');
  if ((cert === undefined) !== (key === undefined)) throw new Error('config: AMBIT_TLS_CERT and AMBIT_TLS_KEY must be set together');
  if (cert !== undefined && key !== undefined) c.tls = { cert: readPem('AMBIT_TLS_CERT', cert), key: readPem('AMBIT_TLS_KEY', key) };
  const clientCa = str('AMBIT_TLS_CLIENT_CA');
  const clientCert = str('AMBIT_TLS_CLIENT_CERT');
  const clientScopes = str('AMBIT_TLS_CLIENT_SCOPES');
  if (clientCa !== undefined) {
    if (c.tls === null) throw new Error('config: AMBIT_TLS_CLIENT_CA needs AMBIT_TLS_CERT and AMBIT_TLS_KEY (mutual TLS is TLS first)');
    if (clientCert !== undefined && clientCert !== 'required' && clientCert !== 'optional') throw new Error(`config: AMBIT_TLS_CLIENT_CERT must be required or optional, got ${JSON.stringify(clientCert)}`);
    c.tls = { ...c.tls, clientCa: readPem('AMBIT_TLS_CLIENT_CA', clientCa), requireClientCert: clientCert !== 'optional' };
  } else if (clientCert !== undefined || clientScopes !== undefined) {
    throw new Error(`config: ${clientCert !== undefined ? 'AMBIT_TLS_CLIENT_CERT' : 'AMBIT_TLS_CLIENT_SCOPES'} needs AMBIT_TLS_CLIENT_CA (the CA client certificates are checked against)`);
  }
  if (clientScopes !== undefined) {
    const scopes = clientScopes.split(',').map((x) => x.trim()).filter((x) => x !== '');
    const unknown = scopes.filter((x) => !KNOWN_SCOPES.has(x));
    if (scopes.length === 0 || unknown.length > 0) throw new Error(`config: AMBIT_TLS_CLIENT_SCOPES must be a comma-separated list of ${[...KNOWN_SCOPES].join(', ')}, got ${JSON.stringify(clientScopes)}`);
    c.tlsClientScopes = scopes;
  }
  c.rateLimits = {
    locationsPerS: decimal('AMBIT_LIMIT_LOCATIONS_PER_S', 0, 1_000_000) ?? c.rateLimits.locationsPerS,
    subscriptionChangesPerMin: decimal('AMBIT_LIMIT_SUBSCRIPTION_CHANGES_PER_MIN', 0, 1_000_000) ?? c.rateLimits.subscriptionChangesPerMin,
    eventsPerS: decimal('AMBIT_LIMIT_EVENTS_PER_S', 0, 100_000_000) ?? c.rateLimits.eventsPerS,
    burstS: decimal('AMBIT_LIMIT_BURST_S', 0.001, 86_400) ?? c.rateLimits.burstS,
  };
  const rca = str('AMBIT_REDIS_TLS_CA');
  const rcert = str('AMBIT_REDIS_TLS_CERT');
  const rkey = str('AMBIT_REDIS_TLS_KEY');
  if ((rcert === undefined) !== (rkey === undefined)) throw new Error('config: AMBIT_REDIS_TLS_CERT and AMBIT_REDIS_TLS_KEY must be set together');
  if (rca !== undefined || rcert !== undefined) {
    if (c.redisUrl === null || !c.redisUrl.startsWith('rediss://')) throw new Error('config: AMBIT_REDIS_TLS_* need a rediss:// REDIS_URL');
    c.redisTls = {
      ...(rca === undefined ? {} : { ca: readPem('AMBIT_REDIS_TLS_CA', rca) }),
      ...(rcert === undefined || rkey === undefined ? {} : { cert: readPem('AMBIT_REDIS_TLS_CERT', rcert), key: readPem('AMBIT_REDIS_TLS_KEY', rkey) }),
    };
  }
  const tl = str('AMBIT_TENANT_LIMITS');
  if (tl !== undefined) c.tenantLimits = parseTenantLimits(tl.trim().startsWith('{') ? tl : readPem('AMBIT_TENANT_LIMITS', tl).toString('utf8'));
  c.retention.maxPerDevice = int('AMBIT_RETENTION_MAX', 1, 10_000_000) ?? c.retention.maxPerDevice;
  const hours = int('AMBIT_RETENTION_HOURS', 1, 24 * 365);
  if (hours !== undefined) c.retention.maxAgeMs = hours * 3600_000;
  c.matcherLeaseMs = int('AMBIT_MATCHER_LEASE_MS', 100, 600_000) ?? c.matcherLeaseMs;
  c.snapshotDir = str('AMBIT_SNAPSHOT_DIR') ?? c.snapshotDir;
  c.snapshotIntervalS = int('AMBIT_SNAPSHOT_INTERVAL_S', 0, 7 * 24 * 3600) ?? c.snapshotIntervalS;
  if (c.snapshotDir !== null && c.redisUrl === null) throw new Error('config: AMBIT_SNAPSHOT_DIR is for Redis mode (REDIS_URL): an embedded node keeps nothing across restarts');
  if (c.snapshotDir !== null && c.role === 'gateway') throw new Error('config: AMBIT_SNAPSHOT_DIR is for a process that runs a matcher (role matcher or all)');
  c.commandStreamMaxLen = int('AMBIT_COMMAND_STREAM_MAXLEN', 100, 1_000_000_000) ?? c.commandStreamMaxLen;
  if (env.AMBIT_COMMAND_STREAM_MAXLEN !== undefined && env.AMBIT_COMMAND_STREAM_MAXLEN !== '') {
    if (c.redisUrl === null) throw new Error('config: AMBIT_COMMAND_STREAM_MAXLEN is for Redis mode (REDIS_URL)');
    if (c.role === 'matcher') throw new Error('config: AMBIT_COMMAND_STREAM_MAXLEN is for a process that runs a gateway (role gateway or all): gateways trim the command stream');
  }
  c.stuckReadS = int('AMBIT_MATCHER_STUCK_S', 0, 30 * 24 * 3600) ?? c.stuckReadS;
  if (env.AMBIT_MATCHER_STUCK_S !== undefined && env.AMBIT_MATCHER_STUCK_S !== '' && c.redisUrl === null) throw new Error('config: AMBIT_MATCHER_STUCK_S is for Redis mode (REDIS_URL)');
  const dedupeS = int('AMBIT_DEDUPE_WINDOW_S', 0, 7 * 24 * 3600);
  if (dedupeS !== undefined) c.dedupe.windowMs = dedupeS * 1000;
  c.dedupe.maxIds = int('AMBIT_DEDUPE_MAX_IDS', 1, 100_000_000) ?? c.dedupe.maxIds;
  const level = str('AMBIT_LOG_LEVEL');
  if (level !== undefined) {
    if (!(LOG_LEVELS as readonly string[]).includes(level)) throw new Error(`config: AMBIT_LOG_LEVEL must be one of ${LOG_LEVELS.join(', ')}, got ${JSON.stringify(level)}`);
    c.logLevel = level;
  }
  c.shutdownGraceS = int('AMBIT_SHUTDOWN_GRACE_S', 0, 3600) ?? c.shutdownGraceS;
  const expiryDays = int('AMBIT_DEVICE_EXPIRY_DAYS', 0, 3650);
  if (expiryDays !== undefined) c.deviceExpiryMs = expiryDays * 86_400_000;
  c.revocationKeepDays = int('AMBIT_REVOCATION_KEEP_DAYS', 1, 3650) ?? c.revocationKeepDays;
  c.gateways = int('AMBIT_GATEWAYS', 1, MAX_GATEWAYS) ?? c.gateways;
  const hub = str('AMBIT_HUB');
  if (hub !== undefined && hub !== 'parent') throw new Error(`config: AMBIT_HUB may only be "parent" (set by a node for its gateway processes), got ${JSON.stringify(hub)}`);
  c.hubInParent = hub === 'parent';
  c.fanoutShards = int('AMBIT_FANOUT_SHARDS', 0, MAX_FANOUT_SHARDS) ?? c.fanoutShards;
  c.hubShards = socketPaths('AMBIT_HUB_SHARDS', str('AMBIT_HUB_SHARDS')) ?? c.hubShards;
  c.partitions = int('AMBIT_PARTITIONS', 0, MAX_PARTITIONS) ?? c.partitions;
  c.hubPartitions = socketPaths('AMBIT_HUB_PARTITIONS', str('AMBIT_HUB_PARTITIONS')) ?? c.hubPartitions;
  c.eventOrigin = int('AMBIT_EVENT_ORIGIN', 0, MAX_EVENT_ORIGIN - 1) ?? c.eventOrigin;
  c.patternLatenessMs = int('AMBIT_PATTERN_LATENESS_MS', 0, DEFAULT_PATTERN_LIMITS.maxWindowMs) ?? c.patternLatenessMs;
  c.patternRetainedPerElement = int('AMBIT_PATTERN_RETAINED_PER_ELEMENT', 1, 10_000_000) ?? c.patternRetainedPerElement;
  const sequencer = str('AMBIT_PATTERN_SEQUENCER');
  if (sequencer !== undefined) {
    if (!(SEQUENCER_NAMES as readonly string[]).includes(sequencer)) throw new Error(`config: AMBIT_PATTERN_SEQUENCER must be one of ${SEQUENCER_NAMES.join(', ')}, got ${JSON.stringify(sequencer)}`);
    c.patternSequencer = sequencer as SequencerName;
  }
  return c;
}

/** A JSON array of socket paths that a node sets for its gateway processes. */
function socketPaths(name: string, v: string | undefined): string[] | undefined {
  if (v === undefined) return undefined;
  let paths: unknown;
  try {
    paths = JSON.parse(v);
  } catch {
    paths = null;
  }
  if (!Array.isArray(paths) || paths.length === 0 || !paths.every((p) => typeof p === 'string' && p !== '')) throw new Error(`config: ${name} must be a JSON array of socket paths (set by a node for its gateway processes), got ${JSON.stringify(v.slice(0, 80))}`);
  return paths as string[];
}

/** A PEM file named by `name`; a read error names the variable (ENOENT alone does not say which). */
const LIMIT_KEYS: readonly (keyof RateLimits)[] = ['locationsPerS', 'subscriptionChangesPerMin', 'eventsPerS', 'burstS'];

/**
 * AMBIT_TENANT_LIMITS: JSON (inline, or the file it names) of tenant name ('' the default tenant)
 * → some of the rate limits, e.g. {"acme": {"eventsPerS": 500}, "": {"eventsPerS": 50}}.
 */
export function parseTenantLimits(text: string): Record<string, Partial<RateLimits>> {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch (err) {
    throw new Error(`config: AMBIT_TENANT_LIMITS is not JSON (${err instanceof Error ? err.message : String(err)})`);
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw new Error('config: AMBIT_TENANT_LIMITS must be a JSON object of tenant name → limits');
  const out: Record<string, Partial<RateLimits>> = Object.create(null) as Record<string, Partial<RateLimits>>;
  for (const [tenant, limits] of Object.entries(v)) {
    if (tenant !== '' && !TENANT_NAME.test(tenant)) throw new Error(`config: AMBIT_TENANT_LIMITS: ${JSON.stringify(tenant)} is not a tenant name (lower-case letters, digits, '.', '_', '-'; '' the default tenant)`);
    if (typeof limits !== 'object' || limits === null || Array.isArray(limits)) throw new Error(`config: AMBIT_TENANT_LIMITS[${JSON.stringify(tenant)}] must be an object of limits`);
    const l: Partial<RateLimits> = {};
    for (const [k, n] of Object.entries(limits as Record<string, unknown>)) {
      if (!(LIMIT_KEYS as readonly string[]).includes(k)) throw new Error(`config: AMBIT_TENANT_LIMITS[${JSON.stringify(tenant)}].${k} is not a limit (${LIMIT_KEYS.join(', ')})`);
      if (typeof n !== 'number' || !Number.isFinite(n) || n < 0 || (k === 'burstS' && n <= 0)) throw new Error(`config: AMBIT_TENANT_LIMITS[${JSON.stringify(tenant)}].${k} must be a number ${k === 'burstS' ? '> 0' : '>= 0'}, got ${JSON.stringify(n)}`);
      l[k as keyof RateLimits] = n;
    }
    out[tenant] = l;
  }
  return out;
}

function readPem(name: string, path: string): Buffer {
  try {
    return readFileSync(path);
  } catch (err) {
    throw new Error(`config: ${name} names a file that cannot be read (${JSON.stringify(path)}): ${err instanceof Error ? err.message : String(err)}`);
  }
}

/** Checks a whole config (also one built in code, e.g. by tests). */
export function checkConfig(c: ServerConfig): void {
  if (c.jwks !== null) {
    // A provider's keys may sign for others too (shared key sets): its tokens must name this deployment's issuer.
    if (c.tokenIssuer.length === 0) throw new Error("config: AMBIT_JWKS needs AMBIT_TOKEN_ISSUER (the issuer its tokens must name; keys can be shared across a provider's customers)");
    if (!/^https:\/\//i.test(c.jwks) && /^[a-z]+:\/\//i.test(c.jwks) && !/^http:\/\/(127\.0\.0\.1|localhost|\[::1\])(:\d+)?\//i.test(c.jwks)) {
      throw new Error(`config: AMBIT_JWKS must be a file path or an https:// URL (http:// only on this host), got ${JSON.stringify(c.jwks)}`);
    }
  }
  if (c.hubInParent && (c.role !== 'gateway' || c.redisUrl !== null)) throw new Error('config: AMBIT_HUB=parent is for a gateway process without REDIS_URL');
  if (c.role !== 'all' && c.redisUrl === null && !c.hubInParent) throw new Error(`config: role ${c.role} needs REDIS_URL (only role all runs without Redis)`);
  if (c.tokenSecret === null && !c.dev && c.role !== 'matcher') throw new Error('config: AMBIT_TOKEN_SECRET is required (at least 32 bytes), or AMBIT_DEV=1 for a made-up one');
  if (c.tokenSecret !== null && Buffer.byteLength(c.tokenSecret) < 32) throw new Error(`config: AMBIT_TOKEN_SECRET must be at least 32 bytes, got ${Buffer.byteLength(c.tokenSecret)}`);
  if (!Number.isSafeInteger(c.deviceExpiryMs) || c.deviceExpiryMs < 0) throw new Error(`config: deviceExpiryMs must be an integer ≥ 0 (AMBIT_DEVICE_EXPIRY_DAYS), got ${String(c.deviceExpiryMs)}`);
  if (!Number.isSafeInteger(c.gateways) || c.gateways < 1 || c.gateways > MAX_GATEWAYS) throw new Error(`config: gateways must be an integer in [1, ${MAX_GATEWAYS}], got ${String(c.gateways)}`);
  if (c.gateways > 1 && c.role === 'matcher') throw new Error(`config: AMBIT_GATEWAYS=${c.gateways} with role matcher: a matcher serves no gRPC`);
  if (!Number.isSafeInteger(c.fanoutShards) || c.fanoutShards < 0 || c.fanoutShards > MAX_FANOUT_SHARDS) throw new Error(`config: AMBIT_FANOUT_SHARDS must be an integer in [0, ${MAX_FANOUT_SHARDS}], got ${String(c.fanoutShards)}`);
  if (c.fanoutShards > 0 && c.redisUrl !== null) throw new Error('config: AMBIT_FANOUT_SHARDS is for an embedded node (without REDIS_URL): with Redis the notification logs live in Redis');
  if (c.fanoutShards > 0 && c.gateways < 2) throw new Error(`config: AMBIT_FANOUT_SHARDS=${c.fanoutShards} needs AMBIT_GATEWAYS >= 2: the shards send notifications to gateway processes`);
  if (c.hubShards.length > 0 && !c.hubInParent) throw new Error('config: AMBIT_HUB_SHARDS is for a gateway process of an embedded node (with AMBIT_HUB=parent)');
  if (!Number.isSafeInteger(c.partitions) || c.partitions < 0 || c.partitions > MAX_PARTITIONS) throw new Error(`config: AMBIT_PARTITIONS must be an integer in [0, ${MAX_PARTITIONS}], got ${String(c.partitions)}`);
  if (c.partitions > 0 && c.redisUrl !== null) throw new Error('config: AMBIT_PARTITIONS is for an embedded node (without REDIS_URL): with Redis the matcher runs in its own process');
  if (c.partitions > 0 && c.fanoutShards > 0) throw new Error('config: AMBIT_PARTITIONS and AMBIT_FANOUT_SHARDS exclude each other: each partition keeps its devices\' notification logs itself');
  if (c.hubPartitions.length > 0 && !c.hubInParent) throw new Error('config: AMBIT_HUB_PARTITIONS is for a gateway process of an embedded node (with AMBIT_HUB=parent)');
  if (!Number.isSafeInteger(c.eventOrigin) || c.eventOrigin < 0 || c.eventOrigin >= MAX_EVENT_ORIGIN) throw new Error(`config: AMBIT_EVENT_ORIGIN must be an integer in [0, ${MAX_EVENT_ORIGIN - 1}], got ${String(c.eventOrigin)}`);
  if (c.hubPartitions.length > 0 && c.hubShards.length > 0) throw new Error('config: AMBIT_HUB_PARTITIONS and AMBIT_HUB_SHARDS exclude each other');
  const cap = c.maxSubscriptionsPerDevice;
  if (!Number.isSafeInteger(cap) || cap < 1) throw new Error(`config: maxSubscriptionsPerDevice must be an integer >= 1, got ${String(cap)}`);
  if (Object.keys(c.tenantLimits).length > 0 && c.tenantClaim === null) throw new Error('config: AMBIT_TENANT_LIMITS needs AMBIT_TENANT_CLAIM (tenants on)');
  if (c.tlsClientScopes !== null && (c.tls?.clientCa ?? null) === null) throw new Error('config: AMBIT_TLS_CLIENT_SCOPES needs AMBIT_TLS_CLIENT_CA (only a verified client certificate can stand in for a token)');
  const ws = c.webPort;
  if (ws !== null && ws !== 0 && (ws === c.port || ws === c.metricsPort)) throw new Error(`config: AMBIT_WEB_PORT ${ws} is taken by ${ws === c.port ? 'AMBIT_PORT' : 'AMBIT_METRICS_PORT'}`);
}
