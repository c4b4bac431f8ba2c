/**
 * Geometry on the sphere. The float64 haversine here is the reference distance (docs/semantics.md):
 * every engine decides every area test exactly as it does (X1, X2).
 */

/** IUGG mean Earth radius, metres. */
export const EARTH_RADIUS_M = 6_371_008.8;
const RAD = Math.PI / 180;
const DEG = 180 / Math.PI;

/** Great-circle distance in metres (haversine, float64). Handles the antimeridian and the poles. */
export function haversineM(lat1: number, lon1: number, lat2: number, lon2: number): number {
  const s1 = Math.sin(((lat2 - lat1) * RAD) / 2);
  const s2 = Math.sin(((lon2 - lon1) * RAD) / 2);
  const a = s1 * s1 + Math.cos(lat1 * RAD) * Math.cos(lat2 * RAD) * s2 * s2;
  return 2 * EARTH_RADIUS_M * Math.asin(Math.min(1, Math.sqrt(a)));
}

/** [minLon, minLat, maxLon, maxLat] in degrees. */
export type Box = [number, number, number, number];

// Pads boxes by ~1 cm so float rounding never drops a point the exact test would accept.
const PAD_DEG = 1e-7;

/**
 * Lat/lon boxes that together cover the spherical circle (centre, r metres): one box, two when it
 * crosses the antimeridian, and a full-longitude band when it contains a pole.
 */
export function circleBoxes(lat: number, lon: number, r: number): Box[] {
  const delta = r / EARTH_RADIUS_M; // angular radius, rad
  const dLat = delta * DEG + PAD_DEG;
  const minLat = lat - dLat;
  const maxLat = lat + dLat;
  if (maxLat >= 90 || minLat <= -90 || delta >= Math.PI / 2) {
    return [[-180, Math.max(-90, minLat), 180, Math.min(90, maxLat)]];
  }
  // Largest longitude offset reached by a small circle: asin(sin δ / cos φ) (no pole inside, so <= 1).
  const dLon = Math.asin(Math.min(1, Math.sin(delta) / Math.cos(lat * RAD))) * DEG + PAD_DEG;
  const minLon = lon - dLon;
  const maxLon = lon + dLon;
  if (minLon < -180) return [[minLon + 360, minLat, 180, maxLat], [-180, minLat, maxLon, maxLat]];
  if (maxLon > 180) return [[minLon, minLat, 180, maxLat], [-180, minLat, maxLon - 360, maxLat]];
  return [[minLon, minLat, maxLon, maxLat]];
}

/** Unit vector of a lat/lon point, written into out[o..o+2]. */
export function unitVector(lat: number, lon: number, out: Float64Array, o = 0): void {
  const phi = lat * RAD;
  const lam = lon * RAD;
  const c = Math.cos(phi);
  out[o] = c * Math.cos(lam);
  out[o + 1] = c * Math.sin(lam);
  out[o + 2] = Math.sin(phi);
}
