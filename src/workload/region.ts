/**
 * The map a workload lives on. CLCB §5 states areas of relevance as a fraction of "the entire area
 * under analysis" and translates them for Milan (0.01% → 76 m), Italy (→ 3 km) and Pisa (→ 22 m);
 * a region here is that area as a lat/lon rectangle, square in metres, of exactly the given size.
 */
import { EARTH_RADIUS_M } from '../model/geo.js';

const RAD = Math.PI / 180;
const DEG = 180 / Math.PI;

export interface RegionSpec {
  name?: string;
  /** Centre, WGS84 degrees. */
  centerLat: number;
  centerLon: number;
  /** Surface area in km². */
  areaKm2: number;
}

export interface Region {
  readonly name: string;
  readonly centerLat: number;
  readonly centerLon: number;
  readonly areaKm2: number;
  readonly areaM2: number;
  /** Side of the square, metres (north–south extent exactly; east–west at the centre latitude, approximately). */
  readonly sideM: number;
  readonly minLat: number;
  readonly maxLat: number;
  readonly minLon: number;
  readonly maxLon: number;
}

/**
 * Named regions. Milan: the comune's 181.67 km², which gives the paper's 24/76/240/759 m radii.
 * Italy: 301,340 km² → 1/3/10/31 km. Pisa: the paper's 7/22/71/225 m imply ~15.9 km² (the built-up
 * city rather than the 185 km² comune), so that is the figure used.
 */
export const REGIONS: Readonly<Record<'milan' | 'italy' | 'pisa', Readonly<Required<RegionSpec>>>> = Object.freeze({
  milan: Object.freeze({ name: 'milan', centerLat: 45.4642, centerLon: 9.19, areaKm2: 181.67 }),
  italy: Object.freeze({ name: 'italy', centerLat: 42.5, centerLon: 12.5, areaKm2: 301_340 }),
  pisa: Object.freeze({ name: 'pisa', centerLat: 43.7228, centerLon: 10.4017, areaKm2: 15.9 }),
});

export type RegionName = keyof typeof REGIONS;

/**
 * Builds the rectangle: the latitude span is side/R, the longitude span is solved so that the
 * spherical area R²·Δλ·(sin φ2 − sin φ1) equals the requested area exactly.
 */
export function makeRegion(spec: RegionName | RegionSpec): Region {
  const s = typeof spec === 'string' ? REGIONS[spec] : spec;
  if (s === undefined) throw new RangeError(`region: unknown region ${JSON.stringify(spec)} (known: ${Object.keys(REGIONS).join(', ')})`);
  const areaM2 = s.areaKm2 * 1e6;
  const sideM = Math.sqrt(areaM2);
  const dLat = (sideM / EARTH_RADIUS_M) * DEG;
  const minLat = s.centerLat - dLat / 2;
  const maxLat = s.centerLat + dLat / 2;
  if (minLat < -89 || maxLat > 89) throw new RangeError('region: must stay clear of the poles');
  const dLonRad = areaM2 / (EARTH_RADIUS_M * EARTH_RADIUS_M * (Math.sin(maxLat * RAD) - Math.sin(minLat * RAD)));
  const dLon = dLonRad * DEG;
  if (dLon >= 360) throw new RangeError('region: too large');
  const minLon = s.centerLon - dLon / 2;
  const maxLon = s.centerLon + dLon / 2;
  if (minLon < -180 || maxLon > 180) throw new RangeError('region: must not cross the antimeridian');
  return Object.freeze({
    name: s.name ?? 'custom',
    centerLat: s.centerLat,
    centerLon: s.centerLon,
    areaKm2: s.areaKm2,
    areaM2,
    sideM,
    minLat,
    maxLat,
    minLon,
    maxLon,
  });
}

/** Radius of the circle covering `fraction` of the region: sqrt(fraction·A/π). */
export function radiusForAreaFraction(fraction: number, region: RegionName | RegionSpec | Region = 'milan'): number {
  const areaM2 = typeof region === 'string' ? REGIONS[region].areaKm2 * 1e6 : region.areaKm2 * 1e6;
  return Math.sqrt((fraction * areaM2) / Math.PI);
}

/** Inverse of radiusForAreaFraction. */
export function areaFractionForRadius(radiusM: number, region: RegionName | RegionSpec | Region = 'milan'): number {
  const areaM2 = typeof region === 'string' ? REGIONS[region].areaKm2 * 1e6 : region.areaKm2 * 1e6;
  return (Math.PI * radiusM * radiusM) / areaM2;
}
