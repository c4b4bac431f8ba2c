/**
 * Test-side spherical helpers: placing points at a chosen distance, and float64 neighbours.
 * Distances are always judged with src/model/geo.ts `haversineM`; these only generate inputs.
 */
import { EARTH_RADIUS_M, haversineM } from '../../src/model/geo.js';

const RAD = Math.PI / 180;
const DEG = 180 / Math.PI;

/** Wraps a longitude into [-180, 180]. */
export function wrapLon(lon: number): number {
  if (lon >= -180 && lon <= 180) return lon;
  const w = ((((lon + 180) % 360) + 360) % 360) - 180;
  return w;
}

/** The point `d` metres from (lat, lon) along initial bearing `bearingDeg` (spherical, float64). */
export function destination(lat: number, lon: number, bearingDeg: number, d: number): { lat: number; lon: number } {
  const p1 = lat * RAD;
  const t = bearingDeg * RAD;
  const dl = d / EARTH_RADIUS_M;
  const sp2 = Math.sin(p1) * Math.cos(dl) + Math.cos(p1) * Math.sin(dl) * Math.cos(t);
  const p2 = Math.asin(Math.max(-1, Math.min(1, sp2)));
  const l2 = lon * RAD + Math.atan2(Math.sin(t) * Math.sin(dl) * Math.cos(p1), Math.cos(dl) - Math.sin(p1) * Math.sin(p2));
  return { lat: Math.max(-90, Math.min(90, p2 * DEG)), lon: wrapLon(l2 * DEG) };
}

const f64 = new Float64Array(1);
const i64 = new BigInt64Array(f64.buffer);

/** The next float64 above x (x finite). */
export function nextUp(x: number): number {
  if (x === 0) return Number.MIN_VALUE;
  f64[0] = x;
  i64[0] += x > 0 ? 1n : -1n;
  return f64[0];
}

/** The next float64 below x (x finite). */
export function nextDown(x: number): number {
  return -nextUp(-x);
}

/**
 * A point whose reference distance from (lat, lon) is as close to `d` as the float64 grid
 * allows, with that distance: callers then set radii relative to the exact `dist`.
 */
export function pointAt(lat: number, lon: number, bearingDeg: number, d: number): { lat: number; lon: number; dist: number } {
  const p = destination(lat, lon, bearingDeg, d);
  return { ...p, dist: haversineM(lat, lon, p.lat, p.lon) };
}

/** Smallest float64 radius rf with d <= rf + re (the inclusive boundary of A2, sum rounded once). */
export function smallestRadius(d: number, re: number): number {
  let rf = Math.max(Number.MIN_VALUE, d - re);
  while (!(d <= rf + re)) rf = nextUp(rf);
  while (rf > Number.MIN_VALUE && d <= nextDown(rf) + re) rf = nextDown(rf);
  return rf;
}

/**
 * The step the boundary probes use around a circle of radius r = r_f + r_e: max(2 m, 0.1% of r).
 * Test geometry only (workloads place events at multiples of it on either side of the boundary);
 * every engine must decide those events exactly (docs/semantics.md X1).
 */
export function boundaryStepM(r: number): number {
  return Math.max(2, 0.001 * r);
}
