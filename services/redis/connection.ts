/**
 * Connections and option checks shared by the Redis hub and the matcher. Every connection logs its
 * 'error' events (ioredis emits one per failed reconnect; an unhandled one would crash the process)
 * and speaks RESP2, whose reply shapes (XREAD as [[key, entries]]) do not depend on the server.
 */
import { Cluster, type ClusterOptions, Command, Redis, type RedisOptions } from 'ioredis';
import type { Logger } from 'pino';
import { show } from '../../src/model/errors.js';

/** A Redis Cluster: seed nodes (any live node will do; the rest is discovered) and options. */
export interface ClusterSource {
  cluster: { host: string; port: number }[];
  /** ioredis cluster options; `redisOptions` apply to every node connection (password, TLS). */
  options?: ClusterOptions;
}

/** A Redis URL ("redis://host:port/db"), ioredis options, or a Redis Cluster. */
export type RedisSource = string | RedisOptions | ClusterSource;

/** A connection: to a plain Redis, or to a Redis Cluster (commands routed by their keys' slot). */
export type Conn = Redis | Cluster;

export function isClusterSource(source: RedisSource): source is ClusterSource {
  return typeof source === 'object' && source !== null && Array.isArray((source as ClusterSource).cluster);
}

/**
 * Seed nodes of a cluster from "redis://h1:p1,h2:p2" (or rediss://, user and password on the
 * first): the ioredis cluster source. Exact error naming `name` otherwise.
 */
export function clusterSourceFromUrl(url: string, name = 'REDIS_URL'): ClusterSource {
  const m = /^(rediss?):\/\/(?:([^@/]*)@)?([^/?#]+)\/?$/.exec(url);
  if (m === null) throw new Error(`config: ${name} for a cluster must be redis://[user:password@]host:port[,host:port...], got ${JSON.stringify(url)}`);
  const nodes = m[3].split(',').map((hp) => {
    const at = hp.lastIndexOf(':');
    const port = Number(hp.slice(at + 1));
    const host = hp.slice(0, at).replace(/^\[|\]$/g, '');
    if (at <= 0 || !Number.isInteger(port) || port < 1 || port > 65535 || host === '') throw new Error(`config: ${name}: ${JSON.stringify(hp)} is not host:port`);
    return { host, port };
  });
  const redisOptions: RedisOptions = {};
  if (m[2] !== undefined) {
    // As ioredis reads a plain URL: "user:password", ":password", or "user" alone; the password
    // may hold colons (split at the first only) and percent-escapes.
    const decode = (v: string) => {
      try {
        return decodeURIComponent(v);
      } catch {
        throw new Error(`config: ${name}: the user or password has a malformed %-escape`);
      }
    };
    const colon = m[2].indexOf(':');
    const user = colon < 0 ? m[2] : m[2].slice(0, colon);
    if (user !== '') redisOptions.username = decode(user);
    if (colon >= 0) redisOptions.password = decode(m[2].slice(colon + 1));
  }
  if (m[1] === 'rediss') redisOptions.tls = {};
  return { cluster: nodes, options: { redisOptions } };
}

export const DEFAULT_REDIS: RedisSource = 'redis://127.0.0.1:6379';

/** Logs at most one error per connection every 5 s, with how many were not logged in between. */
const ERROR_LOG_INTERVAL_MS = 5000;

/**
 * A connection not yet connected (call `connect()`), named in CLIENT LIST as `ambit-<role>`.
 * `defaults` yield to the source's options, `forced` override them (e.g. maxRetriesPerRequest
 * null for blocking reads).
 */
export function openConnection(
  source: RedisSource,
  role: string,
  component: string,
  log: Logger | undefined,
  forced: RedisOptions = {},
  defaults: RedisOptions = {},
): Redis {
  const must: RedisOptions = { lazyConnect: true, protocol: 2, ...forced };
  const base: RedisOptions = { connectionName: `ambit-${role}`, ...defaults };
  if (isClusterSource(source)) throw new Error(`${component}: openConnection is for a plain Redis; use openConn for a cluster`);
  const r = typeof source === 'string' ? new Redis(source, { ...base, ...must }) : new Redis({ ...base, ...source, ...must });
  logErrors(r, role, component, log);
  return r;
}

/**
 * A connection to a plain Redis or, for a cluster source, a cluster client (not yet connected).
 * On a cluster, `forced` and `defaults` apply to every node connection; `cluster` adds cluster
 * options (e.g. sharded subscribers).
 */
export function openConn(
  source: RedisSource,
  role: string,
  component: string,
  log: Logger | undefined,
  forced: RedisOptions = {},
  defaults: RedisOptions = {},
  cluster: ClusterOptions = {},
): Conn {
  if (!isClusterSource(source)) return openConnection(source, role, component, log, forced, defaults);
  const o = source.options ?? {};
  const { enableAutoPipelining, maxRetriesPerRequest, ...nodeForced } = forced;
  const c = new Cluster(source.cluster, {
    ...o,
    lazyConnect: true,
    ...(enableAutoPipelining === undefined ? {} : { enableAutoPipelining }),
    ...cluster,
    redisOptions: {
      connectionName: `ambit-${role}`,
      ...defaults,
      ...o.redisOptions,
      protocol: 2,
      ...nodeForced,
      ...(maxRetriesPerRequest === undefined ? {} : { maxRetriesPerRequest }),
    },
  });
  logErrors(c, role, component, log);
  clusterSeeds.set(c, source.cluster.map((n) => `${n.host}:${n.port}`).join(','));
  return c;
}

const clusterSeeds = new WeakMap<Cluster, string>();

function logErrors(r: Conn, role: string, component: string, log: Logger | undefined): void {
  let lastLog = 0;
  let suppressed = 0;
  r.on('error', (err: Error) => {
    lastErrors.set(r, err);
    const now = Date.now();
    if (now - lastLog < ERROR_LOG_INTERVAL_MS) {
      suppressed++;
      return;
    }
    log?.warn({ err, connection: role, suppressed }, `${component}: redis connection ${role}: ${err.message}`);
    lastLog = now;
    suppressed = 0;
  });
}

const lastErrors = new WeakMap<Conn, Error>();

/** Connects every connection; a failure names the server and the socket's own error. */
export async function connectAll(component: string, conns: readonly Conn[]): Promise<void> {
  try {
    await Promise.all(conns.map((c) => c.connect()));
  } catch (err) {
    const c0 = conns[0];
    const cause = conns.map((c) => lastErrors.get(c)).find((e) => e !== undefined) ?? err;
    let where: string;
    if (c0 instanceof Cluster) where = `cluster nodes ${clusterSeeds.get(c0) ?? '?'}`;
    else where = c0.options.path ? c0.options.path : `${c0.options.host ?? '127.0.0.1'}:${c0.options.port ?? 6379}`;
    throw new Error(`${component}: cannot connect to Redis at ${where}: ${cause instanceof Error ? cause.message : String(cause)}`);
  }
}

/** Ends a connection: QUIT when it is up (pending replies arrive first), else drop it. */
export async function closeConnection(r: Conn): Promise<void> {
  if (r.status === 'ready') {
    try {
      await r.quit();
      return;
    } catch {
      // fall through: the socket is gone anyway
    }
  }
  r.disconnect();
}

/** An integer option in [lo, hi], or its default; exact error otherwise. */
export function intOption(component: string, name: string, v: unknown, dflt: number, lo: number, hi: number): number {
  if (v === undefined) return dflt;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < lo || v > hi) {
    throw new Error(`${component}: ${name} must be an integer in [${lo}, ${hi}], got ${show(v)}`);
  }
  return v;
}

export function prefixOption(component: string, v: unknown, dflt: string): string {
  if (v === undefined) return dflt;
  if (typeof v !== 'string' || v.length > 200) throw new Error(`${component}: prefix must be a string of at most 200 characters, got ${show(v)}`);
  return v;
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/**
 * A command sent as bytes the caller encoded (see codec.encodePositionsHset); ioredis still matches
 * its reply. `key` is its first key, for ioredis' own bookkeeping.
 */
export class RawCommand extends Command {
  constructor(
    name: string,
    key: string,
    private readonly resp: Buffer,
  ) {
    super(name, [key]);
  }

  override toWritable(): Buffer {
    return this.resp;
  }
}

/** Queues a command object on a pipeline or MULTI (the typed API has no such method). */
export function queueCommand(p: unknown, c: Command): void {
  (p as { sendCommand(c: Command): unknown }).sendCommand(c);
}
