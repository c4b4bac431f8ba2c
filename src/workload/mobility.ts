/**
 * Random-waypoint mobility: each device walks in a straight line toward a waypoint drawn from the
 * workload's spatial distribution, at a speed drawn per leg, then picks the next waypoint. CLCB §5
 * notes that update cost does not depend on the mobility pattern; this gives updates a realistic
 * shape (small moves, a few metres per tick) for the update benchmarks and tests.
 * State lives in typed arrays: a million devices cost ~40 MB.
 */
import { AmbitError, show } from '../model/errors.js';
import { EARTH_RADIUS_M } from '../model/geo.js';
import type { LatLon, PositionUpdate } from '../model/types.js';
import { Prng } from './prng.js';
import { makeRegion } from './region.js';
import { SpatialModel } from './spatial.js';

const RAD = Math.PI / 180;
const DEG = 180 / Math.PI;

export interface RandomWaypointOptions {
  seed: number;
  /** Seconds per step. */
  dtS: number;
  speedMinMps: number;
  speedMaxMps: number;
  /** Seconds a device rests at a waypoint before the next leg. */
  pauseS: number;
  /** 'random': each step moves one device chosen at random; 'sweep': devices in turn, 0..n-1, 0..n-1, ... */
  order: 'random' | 'sweep';
  /** Where waypoints come from (a workload's `space`); default: uniform over Milan. */
  space: SpatialModel | undefined;
}

export const DEFAULT_RANDOM_WAYPOINT: Readonly<RandomWaypointOptions> = Object.freeze({
  seed: 1,
  dtS: 1,
  speedMinMps: 1,
  speedMaxMps: 15,
  pauseS: 0,
  order: 'random',
  space: undefined,
});

function fail(msg: string): never {
  throw new AmbitError('INVALID_ARGUMENT', `randomWaypoint: ${msg}`);
}

export class RandomWaypoint {
  readonly options: Readonly<RandomWaypointOptions>;
  readonly ids: readonly string[];
  readonly lat: Float64Array;
  readonly lon: Float64Array;
  private readonly wpLat: Float64Array;
  private readonly wpLon: Float64Array;
  private readonly speed: Float64Array;
  private readonly rest: Float64Array;
  private readonly space: SpatialModel;
  private readonly rng: Prng;
  private cursor = 0;
  private readonly p: LatLon = { lat: 0, lon: 0 };

  constructor(devices: readonly { id: string; lat: number; lon: number }[], options: Partial<RandomWaypointOptions> = {}) {
    for (const key of Object.keys(options)) if (!(key in DEFAULT_RANDOM_WAYPOINT)) fail(`unknown option ${show(key)}`);
    const o: RandomWaypointOptions = { ...DEFAULT_RANDOM_WAYPOINT };
    for (const [k, v] of Object.entries(options)) if (v !== undefined) (o as unknown as Record<string, unknown>)[k] = v;
    if (!Number.isInteger(o.seed) || o.seed < 0 || o.seed > 0xffffffff) fail(`seed must be an integer in [0, 4294967295], got ${show(o.seed)}`);
    if (!(o.dtS > 0) || !Number.isFinite(o.dtS)) fail(`dtS must be a finite number > 0, got ${show(o.dtS)}`);
    if (!(o.speedMinMps > 0) || !Number.isFinite(o.speedMinMps)) fail(`speedMinMps must be a finite number > 0, got ${show(o.speedMinMps)}`);
    if (!(o.speedMaxMps >= o.speedMinMps) || !Number.isFinite(o.speedMaxMps)) fail(`speedMaxMps must be >= speedMinMps (${o.speedMinMps}), got ${show(o.speedMaxMps)}`);
    if (!(o.pauseS >= 0) || !Number.isFinite(o.pauseS)) fail(`pauseS must be a finite number >= 0, got ${show(o.pauseS)}`);
    if (o.order !== 'random' && o.order !== 'sweep') fail(`order must be one of random, sweep, got ${show(o.order)}`);
    if (devices.length === 0) fail('needs at least one device');
    this.options = Object.freeze(o);
    const n = devices.length;
    this.ids = devices.map((d) => d.id);
    this.lat = Float64Array.from(devices, (d) => d.lat);
    this.lon = Float64Array.from(devices, (d) => d.lon);
    this.wpLat = new Float64Array(n);
    this.wpLon = new Float64Array(n);
    this.speed = new Float64Array(n);
    this.rest = new Float64Array(n);
    this.space = o.space ?? new SpatialModel(makeRegion('milan'), { kind: 'uniform', hotspots: 1, hotspotExponent: 1, hotspotSigma: 0.01 }, o.seed);
    this.rng = new Prng(o.seed, 0x3a7);
    for (let i = 0; i < n; i++) this.newLeg(i);
  }

  get size(): number {
    return this.ids.length;
  }

  private newLeg(i: number): void {
    this.space.sample(this.rng, this.p);
    this.wpLat[i] = this.p.lat;
    this.wpLon[i] = this.p.lon;
    const o = this.options;
    this.speed[i] = o.speedMinMps + this.rng.float() * (o.speedMaxMps - o.speedMinMps);
  }

  /** Advances device i by dtS seconds (local flat-earth step: legs are at most a region wide). */
  advance(i: number, dtS = this.options.dtS): void {
    let t = dtS;
    if (this.rest[i] > 0) {
      const r = Math.min(this.rest[i], t);
      this.rest[i] -= r;
      t -= r;
      if (t <= 0) return;
    }
    const lat = this.lat[i];
    const cos = Math.cos(lat * RAD);
    const dy = (this.wpLat[i] - lat) * RAD * EARTH_RADIUS_M;
    const dx = (this.wpLon[i] - this.lon[i]) * RAD * EARTH_RADIUS_M * cos;
    const dist = Math.sqrt(dx * dx + dy * dy);
    const step = this.speed[i] * t;
    if (step >= dist) {
      this.lat[i] = this.wpLat[i];
      this.lon[i] = this.wpLon[i];
      this.rest[i] = this.options.pauseS;
      this.newLeg(i);
    } else {
      const k = step / dist;
      this.lat[i] = lat + (dy * k) / EARTH_RADIUS_M * DEG;
      this.lon[i] = this.lon[i] + (dx * k) / (EARTH_RADIUS_M * cos) * DEG;
    }
  }

  /** Index of the device the next step moves. */
  nextIndex(): number {
    if (this.options.order === 'random') return this.rng.int(0, this.ids.length - 1);
    const i = this.cursor;
    this.cursor = i + 1 === this.ids.length ? 0 : i + 1;
    return i;
  }

  /** One step: moves the next device and returns its new position. */
  next(): PositionUpdate {
    const i = this.nextIndex();
    this.advance(i);
    return { device: this.ids[i], lat: this.lat[i], lon: this.lon[i] };
  }

  /** Moves every device by one step and returns all positions (for updatePositions batches). */
  tick(): PositionUpdate[] {
    const out: PositionUpdate[] = new Array(this.ids.length);
    for (let i = 0; i < this.ids.length; i++) {
      this.advance(i);
      out[i] = { device: this.ids[i], lat: this.lat[i], lon: this.lon[i] };
    }
    return out;
  }
}

/** An endless, seeded stream of position updates (see RandomWaypoint). */
export function* randomWaypoint(
  devices: readonly { id: string; lat: number; lon: number }[],
  options: Partial<RandomWaypointOptions> = {},
): Generator<PositionUpdate, never> {
  const rw = new RandomWaypoint(devices, options);
  for (;;) yield rw.next();
}
