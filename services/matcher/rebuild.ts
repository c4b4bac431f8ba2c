/**
 * A matcher's engine rebuilt from what Redis keeps: every stored subscription and position; the
 * caller then replays the command stream from the returned offset.
 */
import type { Conn } from '../redis/connection.js';
import type { Logger } from 'pino';
import type { DeviceSubscription } from '../hub/port.js';
import { compareStreamIds, decodePosition, splitStoredSubscription } from '../redis/codec.js';
import type { Keys } from '../redis/keys.js';
import type { MatchCore } from './core.js';

/**
 * The engine from Redis: every stored subscription and position, then the stream after the
 * stored offset is replayed (idempotent: upserts, moves, unsubscribing a missing one is a no-op).
 * A subscription written by a command still in the replay is left to that command, so publishes
 * replayed before it do not see it; it is returned as deferred, for the matcher to apply itself
 * should the command be trimmed away before the replay reads it. What the replay cannot restore: a
 * subscription removed or replaced after a replayed publish is seen by it as it is now, and
 * positions are the latest.
 */
export async function rebuildFromRedis(cmd: Conn, keys: Keys, core: MatchCore, move: (device: string, lat: number, lon: number) => void, log: Logger | undefined, component: string): Promise<{ from: string; deferred: Deferred[] }> {
  const t0 = performance.now();
  const k = keys;
  const offset = await cmd.get(k.matcherOffset);
  const from = offset ?? '0-0';
  const bounds = await streamBounds(cmd, keys);
  if (!holdsAfter(bounds, from)) {
    log?.warn(
      { offset: from, first: bounds.first },
      `${component}: ${k.in} was trimmed past the stored offset: commands before ${bounds.first ?? bounds.lastId} were never matched (their publishes are lost; subscriptions and positions come from what Redis stores)`,
    );
  }
  let subs = 0;
  const deferred: Deferred[] = [];
  // Sharding by space: the shard's devices are those homed there (k.subDevices), positions and all.
  const geo = k.layout.geo !== undefined;
  let positions = 0;
  let cursor = '0';
  do {
    const [next, devices] = await cmd.sscan(k.subDevices, cursor, 'COUNT', 500);
    cursor = next;
    if (devices.length === 0) continue;
    if (geo) {
      const at = await cmd.hmgetBuffer(k.pos, ...devices);
      for (let i = 0; i < devices.length; i++) {
        const p = decodePosition(at[i]);
        if (p === null) continue;
        move(devices[i], p.lat, p.lon);
        positions++;
      }
    }
    const p = cmd.pipeline();
    for (const d of devices) p.hgetall(k.subs(d));
    const results = (await p.exec()) ?? [];
    for (let i = 0; i < devices.length; i++) {
      const [err, stored] = results[i];
      if (err !== null) throw err;
      for (const value of Object.values(stored as Record<string, string>)) {
        const { version, json } = splitStoredSubscription(value);
        if (compareStreamIds(version, from) > 0 && holdsEntry(bounds, version)) {
          // Its own command is in the replay.
          try {
            deferred.push({ version, device: devices[i], sub: JSON.parse(json) as DeviceSubscription });
          } catch (err) {
            log?.warn({ err, device: devices[i] }, `${component}: stored subscription refused by the engine, skipped`);
          }
          continue;
        }
        if (putStored(core, devices[i], json, log, `${component}: stored subscription`)) subs++;
      }
    }
  } while (cursor !== '0');
  cursor = '0';
  if (!geo) do {
    const [next, flat] = await cmd.hscanBuffer(k.pos, cursor, 'COUNT', 10_000);
    cursor = next.toString();
    for (let i = 0; i + 1 < flat.length; i += 2) {
      const p = decodePosition(flat[i + 1]);
      if (p === null) continue;
      move(flat[i].toString('utf8'), p.lat, p.lon);
      positions++;
    }
  } while (cursor !== '0');
  log?.info(
    { subscriptions: subs, deferred: deferred.length, positions, offset: from, ms: Math.round(performance.now() - t0) },
    `${component}: rebuilt ${subs} subscriptions and ${positions} positions; replaying ${k.in} after ${from}`,
  );
  deferred.sort((a, b) => compareStreamIds(a.version, b.version));
  return { from, deferred };
}

/**
 * Puts a subscription (its JSON, or parsed) into the core; one the engine refuses is logged as
 * `<what> refused by the engine, skipped` and left out (false).
 */
export function putStored(core: MatchCore, device: string, sub: DeviceSubscription | string, log: Logger | undefined, what: string): boolean {
  try {
    core.put(device, typeof sub === 'string' ? (JSON.parse(sub) as DeviceSubscription) : sub, 'upsert');
    return true;
  } catch (err) {
    log?.warn({ err, device }, `${what} refused by the engine, skipped`);
    return false;
  }
}

/** A stored subscription left to its command in the stream (`version`, the command's id). */
export interface Deferred {
  version: string;
  device: string;
  sub: DeviceSubscription;
}

/** What `{p}in` holds now, from XINFO STREAM. */
export interface StreamBounds {
  /** The first entry it still holds; null when it holds none. */
  first: string | null;
  /** Whether any entry it ever had was removed (trimmed or deleted), or the stream is gone. */
  removed: boolean;
  /** The highest id deleted by XDEL ('0-0' when none). */
  maxDeleted: string;
  /** The highest id it ever gave ('0-0' when none). */
  lastId: string;
}

export async function streamBounds(cmd: Conn, keys: Keys): Promise<StreamBounds> {
  let info: unknown;
  try {
    info = await cmd.call('XINFO', 'STREAM', keys.in);
  } catch (err) {
    if (!(err instanceof Error && /no such key/i.test(err.message))) throw err;
    return { first: null, removed: true, maxDeleted: '0-0', lastId: '0-0' }; // no stream (any more)
  }
  const flat = info as unknown[];
  const b: StreamBounds = { first: null, removed: true, maxDeleted: '0-0', lastId: '0-0' };
  let length = -1;
  let added = -1;
  for (let i = 0; i + 1 < flat.length; i += 2) {
    const v = flat[i + 1];
    if (flat[i] === 'length') length = Number(v);
    else if (flat[i] === 'entries-added') added = Number(v);
    else if (flat[i] === 'max-deleted-entry-id') b.maxDeleted = String(v);
    else if (flat[i] === 'last-generated-id') b.lastId = String(v);
    else if (flat[i] === 'first-entry' && Array.isArray(v) && v.length > 0) b.first = String(v[0]);
  }
  // Without entries-added (before Redis 7) a removal cannot be ruled out.
  b.removed = !(length >= 0 && added >= 0 && added === length);
  return b;
}

/** Whether every entry the stream had after `id` is still in it. */
export function holdsAfter(b: StreamBounds, id: string): boolean {
  if (compareStreamIds(b.maxDeleted, id) > 0) return false;
  if (!b.removed) return true;
  if (b.first === null) return compareStreamIds(id, b.lastId) >= 0;
  // Trimming removes from the head: what came before the first entry kept may be gone.
  return compareStreamIds(b.first, id) <= 0;
}

/** Whether the entry `id`, which the stream had, is still in it (Ambit removes only by trimming). */
export function holdsEntry(b: StreamBounds, id: string): boolean {
  if (!b.removed) return true;
  return b.first !== null && compareStreamIds(id, b.first) >= 0 && compareStreamIds(id, b.maxDeleted) > 0;
}
