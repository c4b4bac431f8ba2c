/**
 * The Redis hub's calls of a deployment sharded by space (geo-router.ts chooses, the scripts in
 * redis/geo-scripts.ts write): location batches, publishes to the shards they visit, and the
 * figures of all shards as one.
 */
import { AmbitError } from '../../src/model/errors.js';
import type { Event } from '../../src/model/types.js';
import type { Logger } from 'pino';
import { type LocColumns, decodePosition, encodeLocations } from '../redis/codec.js';
import type { Conn } from '../redis/connection.js';
import type { Keys } from '../redis/keys.js';
import type { MatcherStatsRecord, PublishReply } from '../redis/protocol.js';
import { queueScript, runScript } from '../redis/scripts.js';
import { GEO_MAX_DEVICES_PER_CALL } from '../redis/geo-scripts.js';
import { type GeoRouter, type StoredMap, subscriptionPlacement } from './geo-router.js';
import type { CellMove, CellPlan, DeviceSubscription, HubStats } from './port.js';
import { type CellLoad, balanceCells } from '../matcher/shard-map.js';

/** A publish waiting for the shards it visits: each one's events (indices), and the sums so far. */
export interface GeoPending {
  /** The shards still to answer, each with its events' indices in the publish. */
  idx: Map<number, number[]>;
  reached: number[];
  dups: Set<number>;
  /** False until the publish script has answered: shards' answers that come first wait in `early`. */
  ready: boolean;
  early: PublishReply[];
  /** The publish's entry id ('' before the script answered). */
  entry: string;
  /** Duplicates whose first publish had no recorded reach yet (still being matched). */
  unknown: Set<number>;
}

/**
 * One shard's answer to a publish: its counts by its events' indices. True once every shard it
 * visited has answered.
 */
export function foldReply(sh: GeoPending, reply: PublishReply): boolean {
  if (!sh.ready) {
    sh.early.push(reply);
    return false;
  }
  const idx = reply.s === undefined ? undefined : sh.idx.get(reply.s);
  if (idx === undefined) return sh.idx.size === 0; // a shard this publish did not visit, or answered already (a replay)
  sh.idx.delete(reply.s!);
  for (let j = 0; j < idx.length; j++) sh.reached[idx[j]] += reply.r?.[j] ?? 0;
  return sh.idx.size === 0;
}

/** A location batch placed by a shard map that has changed since: nothing was written; the router has the new map now. */
export class MapChanged extends Error {
  constructor() {
    super('redis hub: the shard map changed while the positions were placed; they are sent again');
  }
}

/** The shard map and reach as Redis has them now, into the router. */
export async function loadMap(cmd: Conn, k: Keys, router: GeoRouter): Promise<void> {
  const [json, flat] = await Promise.all([cmd.get(k.map), cmd.call('HGETALL', k.reach) as Promise<string[]>]);
  router.setMap(json === null ? null : (JSON.parse(json) as StoredMap));
  router.setReach(flat);
}

/**
 * The newest position of each device, at most `chunk` devices per location script call, which
 * homes and hands over devices; the calls are pipelined. Calls placed by a shard map that moved on
 * wrote nothing: the positions are placed by the new one and sent again.
 */
export async function sendGeoLocations(cmd: Conn, k: Keys, router: GeoRouter, cols: LocColumns, chunk: number, inMaxLen: number): Promise<void> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await sendPlaced(cmd, k, router, cols, chunk, inMaxLen);
    } catch (err) {
      // Placed by a shard map that moved on: nothing was written, the router has the new map now.
      if (!(err instanceof MapChanged) || attempt >= 10) throw err;
    }
  }
}

async function sendPlaced(cmd: Conn, k: Keys, router: GeoRouter, cols: LocColumns, chunk: number, inMaxLen: number): Promise<void> {
  // One update per device (the last): the script places each device once per call.
  const newest = new Map<string, number>();
  for (let i = 0; i < cols.n; i++) newest.set(cols.devices[i].toString('latin1'), i);
  const order = newest.size === cols.n ? null : [...newest.values()].sort((a, b) => a - b);
  const n = order === null ? cols.n : order.length;
  const at = (i: number) => (order === null ? i : order[i]);
  const batch = encodeLocations(cols);
  const p = cmd.pipeline();
  chunk = Math.min(chunk, GEO_MAX_DEVICES_PER_CALL);
  for (let from = 0; from < n; from += chunk) {
    const to = Math.min(n, from + chunk);
    const args: (string | Buffer)[] = [k.shardPrefix, k.shared, String(inMaxLen), String(router.shards), String(router.mapVersion)];
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
  if (results.some(([, r]) => r === 'MAP')) {
    await loadMap(cmd, k, router);
    throw new MapChanged();
  }
}

/**
 * One script call deduplicates the events' ids for the whole deployment and adds the fresh events
 * to every shard they visit (chosen by the reach hash; a newer hash than the router's is taken and
 * the shards chosen again); `pending` then waits for each of those shards' answers. A duplicate is
 * answered with the reach recorded for its first publish (`recordReach`; 0 while that one is
 * still being matched). True when some shard will answer, false when every event was a duplicate.
 */
export async function publishGeo(
  cmd: Conn,
  k: Keys,
  router: GeoRouter,
  o: { gatewayId: string; inMaxLen: number; dedupeWindowMs: number },
  pending: { shards?: GeoPending } | undefined,
  corr: string,
  events: readonly Event[],
): Promise<boolean> {
  const jsons = events.map((e) => JSON.stringify(e));
  for (let attempt = 0; ; attempt++) {
    const { shards: routes, owner } = router.route(events);
    if (pending === undefined) throw new Error('the publish timed out before it was sent');
    const sh: GeoPending = (pending.shards = { idx: new Map(), reached: new Array<number>(events.length).fill(0), dups: new Set(), ready: false, early: [], entry: '', unknown: new Set() });
    const args: string[] = [];
    for (let i = 0; i < events.length; i++) args.push(events[i].id, jsons[i], String(owner[i]));
    for (const [shard, idx] of routes) args.push(String(shard), idx.join(','));
    const r = (await runScript(cmd, 'ambitGeoPub', k.seq, k.reach, k.geoStats, k.shardPrefix, o.inMaxLen, router.reachVersion, corr, o.gatewayId, events.length, o.dedupeWindowMs, k.geoEventId(''), ...args)) as string[];
    if (r[0] === 'OK') {
      sh.entry = r[1];
      const dups = r[2] === '' ? [] : r[2].split(',').map(Number);
      dups.forEach((i, j) => {
        sh.dups.add(i);
        if (r[3 + j] === '') sh.unknown.add(i);
        else sh.reached[i] = Number(r[3 + j]) || 0;
      });
      // The shards that got an entry: those with a fresh event (as the script decided).
      for (const [shard, idx] of routes) {
        const fresh = idx.filter((i) => !sh.dups.has(i));
        if (fresh.length > 0) sh.idx.set(shard, fresh);
      }
      sh.ready = true;
      const early = sh.early;
      sh.early = [];
      let done = sh.idx.size === 0;
      for (const reply of early) done = foldReply(sh, reply);
      return !done;
    }
    if (r[0] !== 'REACH' || attempt >= 20) throw new Error(`unexpected answer of the publish script: ${String(r[0])}`);
    // The reach grew, or the shard map moved (its version is in the same hash): take both again.
    await loadMap(cmd, k, router);
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
    // (duplicates are counted by the publish script, in the deployment's counters)
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
      shardMapVersion: router.mapVersion,
      // Time the shards' leaders spent waiting for shards that devices left (ms, summed).
      handOverWaitMs: alive.reduce((a, m) => a + (typeof m.extra.handOverWaitMs === 'number' ? m.extra.handOverWaitMs : 0), 0),
      // Hand-overs applied without waiting longer for the shard left behind (AMBIT_HANDOVER_WAIT_S).
      handOversForced: alive.reduce((a, m) => a + (typeof m.extra.handOversForced === 'number' ? m.extra.handOversForced : 0), 0),
      // Hand-overs past the bound that wait on: a device in them still has an earlier one's owed window.
      handOversRefused: alive.reduce((a, m) => a + (typeof m.extra.handOversRefused === 'number' ? m.extra.handOversRefused : 0), 0),
      shardMapMoving: router.prev !== null,
      duplicateEvents: num('duplicates'),
      devicesPurged: num('devicesPurged'),
      devicesExpired: num('devicesExpired'),
      gatewayId,
    },
  };
}


/**
 * Gives cells of the shard map to other geographic shards while traffic flows: (1) the new map is
 * stored holding the old one (publishes visit the shards of both; positions are placed by the new
 * one from then on, a gateway with the old one is told so and loads it); (2) every device homed on
 * a geographic shard that the new map no longer keeps it on is handed over to its cell's shard
 * (skipped if it moved since it was read: its own position placed it by the new map); (3) the old
 * map is dropped. A move cut off after (1) leaves publishes visiting both maps' shards, which is
 * exact but costs more: repeating the same move finishes it.
 */
export async function moveCells(
  cmd: Conn,
  k: Keys,
  router: GeoRouter,
  moves: readonly CellMove[],
  log: Logger | undefined,
  inMaxLen: number,
  /** @internal test hook: awaited once the new map is stored, before devices are handed over. */
  afterBegin?: () => Promise<void>,
): Promise<{ version: number; devicesMoved: number }> {
  const map = router.map;
  if (moves.length === 0) throw new AmbitError('INVALID_ARGUMENT', 'must name at least one cell', 'moves');
  if (moves.length > 100_000) throw new AmbitError('INVALID_ARGUMENT', `names ${moves.length} cells, more than 100000`, 'moves');
  const wanted: Record<string, number> = {};
  moves.forEach((m, i) => {
    const int = (v: unknown, hi: number, name: string) => {
      if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v >= hi) throw new AmbitError('INVALID_ARGUMENT', `must be an integer in [0, ${hi - 1}], got ${String(v)}`, `moves[${i}].${name}`);
    };
    int(m.row, map.rows, 'row');
    int(m.col, map.cols, 'col');
    int(m.shard, router.shards, 'shard');
    const key = `${m.row},${m.col}`;
    if (key in wanted && wanted[key] !== m.shard) throw new AmbitError('INVALID_ARGUMENT', `cell ${key} is named twice with different shards`, `moves[${i}]`);
    wanted[key] = m.shard;
  });
  const json = await cmd.get(k.map);
  const cur: StoredMap = json === null ? { version: 0, cells: {} } : (JSON.parse(json) as StoredMap);
  // The cells after the move: the map's overrides, then these (a cell moved back to its default shard keeps the override).
  const target = { ...(cur.prev === undefined ? cur.cells : cur.prev.cells), ...wanted };
  let version: number;
  if (cur.prev !== undefined) {
    // A move under way: repeated, it is finished; another one must wait.
    if (JSON.stringify(sorted(cur.cells)) !== JSON.stringify(sorted(target))) {
      throw new AmbitError('FAILED_PRECONDITION', `another move of cells (to map version ${cur.version}) is under way; repeat that one to finish it`, 'moves');
    }
    version = cur.version;
  } else {
    version = cur.version + 1;
    const next: StoredMap = { version, cells: target, prev: { version: cur.version, cells: cur.cells } };
    const r = await runScript(cmd, 'ambitGeoMap', k.map, k.reach, 'begin', String(cur.version), JSON.stringify(next), String(version));
    if (r !== 'OK') throw new AmbitError('FAILED_PRECONDITION', `the shard map changed meanwhile (now version ${String((r as string[])[1])}); try again`, 'moves');
    log?.info({ version, cells: Object.keys(wanted).length }, `shard map version ${version}: moving ${Object.keys(wanted).length} cells`);
  }
  await loadMap(cmd, k, router);
  await afterBegin?.();
  const next = router.map;
  let devicesMoved = 0;
  for (let shard = 0; shard < router.shards; shard++) {
    const homed = k.of(shard).subDevices;
    let cursor = '0';
    do {
      const [nextCursor, devices] = await cmd.sscan(homed, cursor, 'COUNT', 500);
      cursor = nextCursor;
      if (devices.length === 0) continue;
      const at = await cmd.hmgetBuffer(k.pos, ...devices);
      const leaving: (string | Buffer)[][] = [];
      for (let i = 0; i < devices.length; i++) {
        const p = decodePosition(at[i]);
        if (p === null || next.staysAt(shard, p.lat, p.lon)) continue;
        leaving.push([devices[i], String(shard), at[i]!, String(next.shardOf(p.lat, p.lon))]);
      }
      for (let from = 0; from < leaving.length; from += GEO_MAX_DEVICES_PER_CALL) {
        const args = leaving.slice(from, from + GEO_MAX_DEVICES_PER_CALL).flat();
        const moved = await runScript(cmd, 'ambitGeoMove', k.seq, k.home, k.pos, k.reach, k.shardPrefix, k.shared, String(inMaxLen), String(router.shards), String(version), ...args);
        if (moved === 'MAP') throw new AmbitError('FAILED_PRECONDITION', 'the shard map changed while its cells were moving; repeat the move', 'moves');
        devicesMoved += Number(moved);
      }
    } while (cursor !== '0');
  }
  const done: StoredMap = { version, cells: target };
  const r = await runScript(cmd, 'ambitGeoMap', k.map, k.reach, 'end', String(version), JSON.stringify(done), String(version));
  // The same move run twice at once: the other one ended it already.
  const endedByOther = Array.isArray(r) && r[1] === String(version) && r[2] === '';
  if (r !== 'OK' && !endedByOther) throw new AmbitError('FAILED_PRECONDITION', `the shard map changed while its cells were moving (now version ${String((r as string[])[1])})`, 'moves');
  await loadMap(cmd, k, router);
  log?.info({ version, devicesMoved }, `shard map version ${version}: cells moved, ${devicesMoved} devices handed over`);
  return { version, devicesMoved };
}

function sorted(cells: Record<string, number>): [string, number][] {
  return Object.entries(cells).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
}

/**
 * The reach of duplicates whose first publish was still being matched: of the same call, of
 * another call of this gateway (its answer is awaited), or of another gateway or one that failed
 * (the event's record is read until every shard it visited has added its reach).
 */
export class GeoDuplicates {
  /** The fresh events this gateway is publishing, by id, with their reach once answered. */
  private readonly inflight = new Map<string, { reach: Promise<number>; resolve(r: number): void }>();

  constructor(
    private readonly cmd: Conn,
    private readonly k: Keys,
    private readonly waitMs: number,
    private readonly closed: () => boolean,
  ) {}

  /** The publish script took `events`; `answered` resolves (or rejects) with their answer. */
  publishing(sh: GeoPending, events: readonly Event[], answered: Promise<unknown>): void {
    for (let i = 0; i < events.length; i++) {
      const id = events[i].id;
      if (sh.dups.has(i) || this.inflight.has(id)) continue;
      let resolve!: (r: number) => void;
      const reach = new Promise<number>((res) => (resolve = res));
      this.inflight.set(id, {
        reach,
        resolve: (r) => {
          this.inflight.delete(id);
          resolve(r);
        },
      });
      // A publish that fails or times out leaves its duplicates to the recorded reach.
      answered.catch(() => this.inflight.get(id)?.resolve(0));
    }
  }

  /** Once a publish is answered: records its fresh events' reach and fills in its duplicates'. */
  async answered(sh: GeoPending | undefined, events: readonly Event[], answer: PublishReply): Promise<void> {
    const r = answer.r ?? [];
    const dups = new Set(answer.d ?? []);
    const firstOf = new Map<string, number>();
    events.forEach((e, i) => {
      if (!dups.has(i) && !firstOf.has(e.id)) firstOf.set(e.id, i);
    });
    for (const [id, i] of firstOf) this.inflight.get(id)?.resolve(r[i]);
    for (const i of sh?.unknown ?? []) {
      const id = events[i].id;
      const f = firstOf.get(id);
      if (f !== undefined && f < i) r[i] = r[f];
      else r[i] = await (this.inflight.get(id)?.reach ?? this.recorded(id));
    }
  }

  /** An event's reach from its record, once every shard it visits has added its own (0 if none does in time). */
  private async recorded(id: string): Promise<number> {
    const until = Date.now() + this.waitMs;
    for (let pause = 2; Date.now() < until && !this.closed(); pause = Math.min(100, pause * 2)) {
      const h = await this.cmd.hgetall(this.k.geoEventId(id));
      if (h.w === undefined) return 0; // no record (expired)
      let got = 0;
      let reach = 0;
      for (const [f, v] of Object.entries(h)) {
        if (f.startsWith('s')) {
          got++;
          reach += Number(v) || 0;
        }
      }
      if (got >= Number(h.w)) return reach;
      await new Promise((resolve) => setTimeout(resolve, pause));
    }
    return 0;
  }
}

/**
 * Adds or replaces a subscription (the subscribe script homes the device by its stored position,
 * placed here, or moves it to its wide shard); placed again when the shard map moved meanwhile.
 * Returns the script's answer (the entry, or ALREADY_EXISTS / NOT_FOUND / RESOURCE_EXHAUSTED).
 */
export async function putGeoSubscription(
  cmd: Conn,
  k: Keys,
  router: GeoRouter,
  o: { mode: 'add' | 'replace'; device: string; sub: DeviceSubscription; json: string; cap: number; inMaxLen: number },
): Promise<unknown> {
  const { radiusM, wide } = subscriptionPlacement(o.sub.filters, o.sub.pattern !== undefined);
  const device = o.device;
  for (let attempt = 0; ; attempt++) {
    const pos = await cmd.hgetBuffer(k.pos, device);
    const at = decodePosition(pos);
    const cell = at === null ? '' : String(router.map.shardOf(at.lat, at.lon));
    const r = await runScript(cmd, 'ambitGeoSub', k.seq, k.subs(device), k.meta(device), k.home, k.wide, k.reach, k.pos, k.shardPrefix, o.mode, device, o.sub.id, o.json, o.cap, o.inMaxLen, String(radiusM), wide ? '1' : '0', String(router.wideShard(device)), String(router.shards), pos ?? '', cell, String(router.mapVersion), k.shared);
    if (r !== 'MAP' || attempt >= 10) return r;
    await loadMap(cmd, k, router); // the shard map moved: place again
  }
}

/**
 * The devices homed on the geographic shards, counted by the cell each one's position is in (a
 * device on a wide shard, or without a position, is not counted): the load `planCells` evens out.
 */
export async function cellLoads(cmd: Conn, k: Keys, router: GeoRouter): Promise<CellLoad[]> {
  const map = router.map;
  const counts = new Map<number, number>();
  let cursor = '0';
  do {
    const [next, flat] = await cmd.hscan(k.home, cursor, 'COUNT', 1000);
    cursor = next;
    const devices: string[] = [];
    for (let i = 0; i + 1 < flat.length; i += 2) if (Number(flat[i + 1]) < router.shards) devices.push(flat[i]);
    if (devices.length === 0) continue;
    for (const p of await cmd.hmgetBuffer(k.pos, ...devices)) {
      const at = decodePosition(p);
      if (at === null) continue;
      const cell = map.row(at.lat) * map.cols + map.col(at.lon);
      counts.set(cell, (counts.get(cell) ?? 0) + 1);
    }
  } while (cursor !== '0');
  return [...counts].map(([cell, devices]) => ({ row: Math.floor(cell / map.cols), col: cell % map.cols, devices }));
}

/** Fits the shard map to load (`balanceCells` over `cellLoads`, on the map stored now); moves nothing. */
export async function planCells(cmd: Conn, k: Keys, router: GeoRouter, maxMoves: number): Promise<CellPlan> {
  if (!Number.isInteger(maxMoves) || maxMoves < 0 || maxMoves > 100_000) throw new AmbitError('INVALID_ARGUMENT', `must be an integer in [0, 100000], got ${String(maxMoves)}`, 'max_moves');
  await loadMap(cmd, k, router);
  return balanceCells(router.map, await cellLoads(cmd, k, router), maxMoves === 0 ? 100 : maxMoves);
}
