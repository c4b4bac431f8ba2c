/**
 * The gateway's half of sharding by space (keys.ts `GeoSpec`): which shards a publish visits and
 * what a position update tells the location script (redis/geo-scripts.ts), which places devices.
 *
 * - A device with a wide subscription (a fixed area or none) lives on its wide shard, one of
 *   `wide` chosen by its id; every publish visits every wide shard that ever held a device.
 * - A device whose subscriptions are all anchored lives on a geographic shard: while its guard
 *   circle touches a cell of the shard it is homed at, it stays; else it goes to its cell's shard.
 * - A publish visits every geographic shard whose cells come within the event's radius plus the
 *   largest anchored radius that shard ever held plus the homing slack (shard-map.ts) of the event,
 *   and no other: a device homed there is within the slack of one of its cells, so no match is
 *   missed. The reach is read from Redis and checked by the publish script at its version.
 * - An event that would visit no shard visits its cell's, so every event is matched somewhere:
 *   its id is remembered for the dedupe window, and it is counted once.
 */
import type { Event, Filter } from '../../src/model/types.js';
import type { GeoSpec } from '../redis/keys.js';
import { ShardMap } from '../matcher/shard-map.js';
import { devicePart } from './port.js';

/** What `{p}map` holds: the cells moved from the configured layout, and while a move is under way the map before it. */
export interface StoredMap {
  version: number;
  cells: Record<string, number>;
  prev?: { version: number; cells: Record<string, number> };
}

export class GeoRouter {
  /** The shard map devices are placed by. */
  map: ShardMap;
  /** While cells move: the map before, whose shards publishes visit too. */
  prev: ShardMap | null = null;
  private readonly spec: GeoSpec;
  readonly shards: number;
  readonly wide: number;
  /** Geographic shard → the largest anchored radius it ever held. */
  private reach = new Map<number, number>();
  /** Wide shards that ever held a device. */
  private occupied: number[] = [];
  /** The version of the reach hash those radii are of ('0': none yet). */
  reachVersion = '0';
  private readonly near = new Set<number>();

  constructor(spec: GeoSpec) {
    this.spec = spec;
    this.map = this.mapOf(0, {});
    this.shards = spec.shards;
    this.wide = spec.wide;
  }

  /** The wide shard of a device. */
  wideShard(device: string): number {
    return this.shards + (this.wide === 1 ? 0 : devicePart(device, this.wide));
  }

  private mapOf(version: number, cells: Record<string, number>): ShardMap {
    const { shards, cellDeg, guardM, layout } = this.spec;
    return new ShardMap({ version, shards, cellDeg, guardM, layout, cells });
  }

  /** The map version devices are placed by (0: as configured). */
  get mapVersion(): number {
    return this.map.version;
  }

  /** Takes `{p}map` as stored (null: no cell moved yet). Throws on a map this deployment cannot have. */
  setMap(stored: StoredMap | null): void {
    this.map = stored === null ? this.mapOf(0, {}) : this.mapOf(stored.version, stored.cells);
    this.prev = stored?.prev === undefined ? null : this.mapOf(stored.prev.version, stored.prev.cells);
  }

  /** The map version the reach hash names (a newer one than this router's means: load the map). */
  storedMapVersion(flat: readonly string[]): number {
    for (let i = 0; i + 1 < flat.length; i += 2) if (flat[i] === 'map') return Number(flat[i + 1]);
    return 0;
  }

  /** Takes the reach hash as HGETALL gives it (flat field, value pairs). */
  setReach(flat: readonly string[]): void {
    const reach = new Map<number, number>();
    const occupied: number[] = [];
    let version = '0';
    for (let i = 0; i + 1 < flat.length; i += 2) {
      if (flat[i] === 'v') version = flat[i + 1];
      else {
        const k = Number(flat[i]);
        const r = Number(flat[i + 1]);
        if (flat[i] === 'map' || flat[i] === 'moving' || !Number.isInteger(k) || k < 0) continue;
        if (k < this.shards && r > 0) reach.set(k, r);
        else if (k >= this.shards && k < this.shards + this.wide) occupied.push(k);
      }
    }
    this.reach = reach;
    this.occupied = occupied.sort((a, b) => a - b);
    this.reachVersion = version;
  }

  /**
   * The shards a publish visits, each with the indices of its events (ascending), wide shards
   * included; and for each event the one shard that counts it (the lowest it visits).
   */
  route(events: readonly Event[]): { shards: Map<number, number[]>; owner: Int32Array } {
    const out = new Map<number, number[]>();
    const owner = new Int32Array(events.length).fill(-1);
    const add = (s: number, i: number) => {
      let list = out.get(s);
      if (list === undefined) out.set(s, (list = []));
      list.push(i);
      if (owner[i] < 0 || s < owner[i]) owner[i] = s;
    };
    for (let i = 0; i < events.length; i++) {
      const e = events[i];
      this.near.clear();
      if (this.reach.size > 0) {
        this.map.eventShards(e.lat, e.lon, e.radiusM ?? 0, this.reach, this.near);
        // While cells move, a device may still be homed by the map before.
        this.prev?.eventShards(e.lat, e.lon, e.radiusM ?? 0, this.reach, this.near);
      }
      for (const s of this.near) add(s, i);
      for (const w of this.occupied) add(w, i);
      if (owner[i] < 0) add(this.map.shardOf(e.lat, e.lon), i);
    }
    return { shards: out, owner };
  }

  /**
   * What the location script needs of a position: the shards the device may stay at (",3,4,": its
   * cell's and those its guard circle touches) and its cell's shard.
   */
  placement(lat: number, lon: number): { stay: string; cell: number } {
    const cell = this.map.shardOf(lat, lon);
    if (this.map.guardM === 0 || this.shards === 1) return { stay: `,${cell},`, cell };
    this.near.clear();
    this.map.shardsNear(lat, lon, this.map.guardM, this.near);
    this.near.add(cell);
    return { stay: `,${[...this.near].join(',')},`, cell };
  }
}

/**
 * How a subscription is placed: its largest anchored radius (0: none) and whether it is wide (a
 * filter with a fixed area or with none matches events anywhere near that area, or anywhere; a
 * pattern, whose history must stay on one shard while its owner moves, is wide too).
 */
export function subscriptionPlacement(filters: readonly Filter[], pattern = false): { radiusM: number; wide: boolean } {
  let radiusM = 0;
  let wide = pattern;
  for (const f of filters) {
    const a = f.area;
    if (a === undefined || a === null || (a.center !== undefined && a.center !== null)) wide = true;
    else if (a.radiusM > radiusM) radiusM = a.radiusM;
  }
  return { radiusM, wide };
}
