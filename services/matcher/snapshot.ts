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
 * replayed before it do not see it. What the replay cannot restore: a subscription removed or
 * replaced after a replayed publish is seen by it as it is now, and positions are the latest.
 */
export async function rebuildFromRedis(cmd: Conn, keys: Keys, core: MatchCore, move: (device: string, lat: number, lon: number) => void, log: Logger | undefined, component: string): Promise<string> {
  const t0 = performance.now();
  const k = keys;
  const offset = await cmd.get(k.matcherOffset);
  const from = offset ?? '0-0';
  const trimmedTo = await maxDeletedId(cmd, keys);
  if (compareStreamIds(trimmedTo, from) > 0) {
    log?.warn(
      { offset: from, trimmedTo },
      `${component}: ${k.in} was trimmed past the stored offset: commands up to ${trimmedTo} were never matched (their publishes are lost; subscriptions and positions come from the snapshot)`,
    );
  }
  let subs = 0;
  let deferred = 0;
  let cursor = '0';
  do {
    const [next, devices] = await cmd.sscan(k.subDevices, cursor, 'COUNT', 500);
    cursor = next;
    if (devices.length === 0) continue;
    const p = cmd.pipeline();
    for (const d of devices) p.hgetall(k.subs(d));
    const results = (await p.exec()) ?? [];
    for (let i = 0; i < devices.length; i++) {
      const [err, stored] = results[i];
      if (err !== null) throw err;
      for (const value of Object.values(stored as Record<string, string>)) {
        const { version, json } = splitStoredSubscription(value);
        if (compareStreamIds(version, from) > 0 && compareStreamIds(version, trimmedTo) > 0) {
          deferred++; // its own command is in the replay
          continue;
        }
        try {
          core.put(devices[i], JSON.parse(json) as DeviceSubscription, 'upsert');
          subs++;
        } catch (err) {
          log?.warn({ err, device: devices[i] }, `${component}: stored subscription refused by the engine, skipped`);
        }
      }
    }
  } while (cursor !== '0');
  let positions = 0;
  cursor = '0';
  do {
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
    { subscriptions: subs, deferred, positions, offset: from, ms: Math.round(performance.now() - t0) },
    `${component}: rebuilt ${subs} subscriptions and ${positions} positions; replaying ${k.in} after ${from}`,
  );
  return from;
}

/** Highest id trimmed from `{p}in` ('0-0' when none, or no stream yet). */
async function maxDeletedId(cmd: Conn, keys: Keys): Promise<string> {
  let info: unknown;
  try {
    info = await cmd.call('XINFO', 'STREAM', keys.in);
  } catch {
    return '0-0'; // no stream yet
  }
  const flat = info as unknown[];
  for (let i = 0; i + 1 < flat.length; i += 2) if (flat[i] === 'max-deleted-entry-id') return String(flat[i + 1]);
  return '0-0';
}
