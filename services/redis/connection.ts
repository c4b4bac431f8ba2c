/**
 * Connections and option checks shared by the Redis hub and the matcher. Every connection logs its
 * 'error' events (ioredis emits one per failed reconnect; an unhandled one would crash the process)
 * and speaks RESP2, whose reply shapes (XREAD as [[key, entries]]) do not depend on the server.
 */
import { Command, Redis, type RedisOptions } from 'ioredis';
import type { Logger } from 'pino';
import { show } from '../../src/model/errors.js';

/** A Redis URL ("redis://host:port/db") or ioredis options. */
export type RedisSource = string | RedisOptions;

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
  const r = typeof source === 'string' ? new Redis(source, { ...base, ...must }) : new Redis({ ...base, ...source, ...must });
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
  return r;
}

const lastErrors = new WeakMap<Redis, Error>();

/** Connects every connection; a failure names the server and the socket's own error. */
export async function connectAll(component: string, conns: readonly Redis[]): Promise<void> {
  try {
    await Promise.all(conns.map((c) => c.connect()));
  } catch (err) {
    const o = conns[0].options;
    const cause = conns.map((c) => lastErrors.get(c)).find((e) => e !== undefined) ?? err;
    const where = o.path ? o.path : `${o.host ?? '127.0.0.1'}:${o.port ?? 6379}`;
    throw new Error(`${component}: cannot connect to Redis at ${where}: ${cause instanceof Error ? cause.message : String(cause)}`);
  }
}

/** Ends a connection: QUIT when it is up (pending replies arrive first), else drop it. */
export async function closeConnection(r: Redis): Promise<void> {
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
