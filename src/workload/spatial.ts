/**
 * Where devices, fixed filter centres and events are. CLCB §5 uses two distributions: uniform over
 * the area (Fig. 3) and a Zipf power law concentrating filters and events around a few areas of
 * interest (Fig. 4). The paper does not say how its Zipf points are placed; here K hotspots are
 * uniform in the region, picked with Zipf popularity, and a point is a Gaussian offset around one.
 */
import { EARTH_RADIUS_M } from '../model/geo.js';
import type { LatLon } from '../model/types.js';
import { Prng, Zipf } from './prng.js';
import type { Region } from './region.js';

const RAD = Math.PI / 180;
const DEG = 180 / Math.PI;

export type SpatialKind = 'uniform' | 'zipf';

export interface SpatialOptions {
  kind: SpatialKind;
  /** Number of hotspots (zipf). */
  hotspots: number;
  /** Zipf exponent of hotspot popularity. */
  hotspotExponent: number;
  /** Standard deviation of the offset around a hotspot, as a fraction of the region's side. */
  hotspotSigma: number;
}

/** Stream id for hotspot placement: the same seed always yields the same hotspots. */
const HOTSPOT_STREAM = 0x5107;

export class SpatialModel {
  readonly region: Region;
  readonly options: Readonly<SpatialOptions>;
  /** Hotspot centres in popularity order (rank 0 is the most popular); empty when uniform. */
  readonly hotspotLat: Float64Array;
  readonly hotspotLon: Float64Array;
  private readonly zipf: Zipf | null;
  private readonly sinMin: number;
  private readonly sinSpan: number;
  private readonly sigmaM: number;

  constructor(region: Region, options: SpatialOptions, seed: number) {
    this.region = region;
    this.options = Object.freeze({ ...options });
    this.sinMin = Math.sin(region.minLat * RAD);
    this.sinSpan = Math.sin(region.maxLat * RAD) - this.sinMin;
    this.sigmaM = options.hotspotSigma * region.sideM;
    if (options.kind === 'zipf') {
      const rng = new Prng(seed, HOTSPOT_STREAM);
      this.hotspotLat = new Float64Array(options.hotspots);
      this.hotspotLon = new Float64Array(options.hotspots);
      const p: LatLon = { lat: 0, lon: 0 };
      for (let k = 0; k < options.hotspots; k++) {
        this.uniform(rng, p);
        this.hotspotLat[k] = p.lat;
        this.hotspotLon[k] = p.lon;
      }
      this.zipf = new Zipf(options.hotspots, options.hotspotExponent);
    } else {
      this.hotspotLat = new Float64Array(0);
      this.hotspotLon = new Float64Array(0);
      this.zipf = null;
    }
  }

  /** Writes a point into `out` (and returns it); allocation-free when `out` is given. */
  sample(rng: Prng, out: LatLon = { lat: 0, lon: 0 }): LatLon {
    if (this.zipf === null) return this.uniform(rng, out);
    const k = this.zipf.sample(rng);
    const hLat = this.hotspotLat[k];
    const dy = rng.gaussian() * this.sigmaM;
    const dx = rng.gaussian() * this.sigmaM;
    const r = this.region;
    out.lat = clamp(hLat + (dy / EARTH_RADIUS_M) * DEG, r.minLat, r.maxLat);
    out.lon = clamp(this.hotspotLon[k] + (dx / (EARTH_RADIUS_M * Math.cos(hLat * RAD))) * DEG, r.minLon, r.maxLon);
    return out;
  }

  /** Uniform by area on the sphere: sin(lat) uniform, lon uniform. */
  private uniform(rng: Prng, out: LatLon): LatLon {
    const r = this.region;
    out.lat = Math.asin(this.sinMin + rng.float() * this.sinSpan) * DEG;
    out.lon = r.minLon + rng.float() * (r.maxLon - r.minLon);
    // asin rounding may step a hair outside the box.
    if (out.lat < r.minLat) out.lat = r.minLat;
    else if (out.lat > r.maxLat) out.lat = r.maxLat;
    return out;
  }
}

function clamp(v: number, lo: number, hi: number): number {
  return v < lo ? lo : v > hi ? hi : v;
}
