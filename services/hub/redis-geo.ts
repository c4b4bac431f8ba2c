/**
 * The Redis hub's calls of a deployment sharded by space (geo-router.ts chooses, the scripts in
 * redis/geo-scripts.ts write): location batches, publishes to the shards they visit, and the
 * figures of all shards as one.
 */
import type { Event } from '../../src/model/types.js';
import { type LocColumns, encodeLocations } from '../redis/codec.js';
import type { Conn } from '../redis/connection.js';
import type { Keys } from '../redis/keys.js';
import type { MatcherStatsRecord } from '../redis/protocol.js';
import { queueScript, runScript } from '../redis/scripts.js';
import type { GeoRouter } from './geo-router.js';
import type { HubStats } from './port.js';

/** A publish waiting for the shards it visits: each one's events (indices), and the sums so far. */
export interface GeoPending {
  idx: Map<number, number[]>;
  reached: number[];
  dups: Set<number>;
}

/**
 * The newest position of each device, at most `chunk` devices per location script call, which
 * homes and hands over devices; the calls are pipelined.
 */
export async function sendGeoLocations(cmd: Conn, k: Keys, router: GeoRouter, cols: LocColumns, chunk: number, inMaxLen: number): Promise<void> {
  // One update per device (the last): the script places each device once per call.
  const newest = new Map<string, number>();
  for (let i = 0; i < cols.n; i++) newest.set(cols.devices[i].toString('latin1'), i);
  const order = newest.size === cols.n ? null : [...newest.values()].sort((a, b) => a - b);
  const n = order === null ? cols.n : order.length;
  const at = (i: number) => (order === null ? i : order[i]);
  const batch = encodeLocations(cols);
  const p = cmd.pipeline();
  for (let from = 0; from < n; from += chunk) {
    const to = Math.min(n, from + chunk);
    const args: (string | Buffer)[] = [k.shardPrefix, k.shared, String(inMaxLen), String(router.shards)];
    for (let j = from; j < to; j++) {
      const i = at(j);
      const d = cols.devices[i];
      const { stay, cell } = router.placement(cols.lat[i], cols.lon[i]);
      // The device's record in the batch: u16 id length, id, 16 position bytes.
      args.push(d, batch.blob.subarray(batch.positionAt[i] - 2 - d.length, batch.positionAt[i] + 16), stay, String(cell), String(router.wideShard(d.toString('utf8'))));
    }
    queueScript(p, 'ambitGeoLoc', k.seq, k.home, k.wide, k.pos, k.reach, k.geoStats, ...args);
  }
  const results = await p.exec();
  if (results === null) throw new Error('redis hub: location pipeline aborted');
  for (const [err] of results) if (err !== null) throw err;
}

/**
 * One script call adds the publish to every shard it visits (chosen by the reach hash; a newer
 * hash than the router's is taken and the shards chosen again); `pending` then waits for each of
 * those shards' answers.
 */
export async function publishGeo(cmd: Conn, k: Keys, router: GeoRouter, gatewayId: string, inMaxLen: number, pending: { shards?: GeoPending } | undefined, corr: string, events: readonly Event[]): Promise<void> {
  const jsons = events.map((e) => JSON.stringify(e));
  for (let attempt = 0; ; attempt++) {
    const { shards: routes, owner } = router.route(events);
    if (pending === undefined) throw new Error('the publish timed out before it was sent');
    pending.shards = { idx: new Map(routes), reached: new Array<number>(events.length).fill(0), dups: new Set() };
    const args: string[] = [];
    for (const [shard, idx] of routes) {
      const own: number[] = [];
      for (let j = 0; j < idx.length; j++) if (owner[idx[j]] === shard) own.push(j);
      args.push(String(shard), `[${idx.map((i) => jsons[i]).join(',')}]`, JSON.stringify(idx), JSON.stringify(own));
    }
    const r = (await runScript(cmd, 'ambitGeoPub', k.seq, k.reach, k.geoStats, k.shardPrefix, inMaxLen, router.reachVersion, corr, gatewayId, events.length, ...args)) as string[];
    if (r[0] === 'OK') return;
    if (r[0] !== 'REACH' || attempt >= 20) throw new Error(`unexpected answer of the publish script: ${String(r[0])}`);
    router.setReach(r.slice(1));
  }
}

/**
 * The shards' matcher figures add up; events published and duplicates too (each event is counted by
 * one shard it visits); location updates and notifications are the deployment's counters.
 */
export async function geoHubStats(cmd: Conn, keys: Keys, router: GeoRouter, gatewayId: string): Promise<HubStats> {
  const all = Array.from({ length: router.shards + router.wide }, (_, i) => keys.of(i));
  const counters = [...new Set([keys.geoStats, ...keys.groups.map((g) => g.stats)])];
  const [records, shardStats, ...sums] = await Promise.all([
    cmd.mget(all.map((k) => k.matcherStats)),
    Promise.all(all.map((k) => cmd.hgetall(k.stats))),
    ...counters.map((key) => cmd.hgetall(key)),
  ]);
  const num = (field: string) => {
    let n = 0;
    for (const s of sums as Record<string, string>[]) n += Number(s[field] ?? 0);
    return n;
  };
  const alive = (records as (string | null)[]).filter((r): r is string => r !== null).map((r) => JSON.parse(r) as MatcherStatsRecord);
  const sum = (f: (m: MatcherStatsRecord) => number) => alive.reduce((a, m) => a + f(m), 0);
  const perShard = shardStats as Record<string, string>[];
  // Each event is counted by one shard it visits (its duplicates too).
  const shardSum = (field: string) => perShard.reduce((a, s) => a + Number(s[field] ?? 0), 0);
  return {
    mode: 'redis',
    engine: alive[0]?.engine ?? 'none',
    engineDetail: alive.length === 0 ? 'no matcher alive (their stats keys have expired)' : alive[0].engineDetail,
    subscriptions: sum((m) => m.subscriptions),
    filters: sum((m) => m.filters),
    devices: sum((m) => m.devices),
    eventsPublished: shardSum('events'),
    notifications: num('notifications'),
    locationUpdates: num('locations'),
    notificationsDropped: num('dropped'),
    engineMemoryBytes: sum((m) => m.memoryBytes),
    extra: {
      matcherAlive: alive.length === all.length,
      shardsAlive: alive.length,
      geoShards: router.shards,
      wideShards: router.wide,
      reachVersion: Number(router.reachVersion),
      duplicateEvents: shardSum('duplicates'),
      gatewayId,
    },
  };
}
