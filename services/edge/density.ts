/**
 * Where things are, for the ops dashboard's map: the positions of the events this gateway
 * accepted lately (a ring of the last 8192, with their time) and, read on demand, the last
 * positions of the devices connected here. Binned into cells only when asked, so the hot paths
 * pay two or three number writes.
 */

const RING = 8192;

export interface DensityCell {
  lat: number;
  lon: number;
  n: number;
}

export interface DensityMap {
  /** Cell size in degrees (chosen so the points span at most about 80 cells). */
  cellDeg: number;
  devices: DensityCell[];
  events: DensityCell[];
  /** Events in the window the map shows (ms). */
  windowMs: number;
}

export class RecentEvents {
  private readonly lat = new Float64Array(RING);
  private readonly lon = new Float64Array(RING);
  private readonly ms = new Float64Array(RING);
  private next = 0;
  private size = 0;

  record(lat: number, lon: number, atMs: number): void {
    const i = this.next;
    this.lat[i] = lat;
    this.lon[i] = lon;
    this.ms[i] = atMs;
    this.next = (i + 1) % RING;
    if (this.size < RING) this.size++;
  }

  /** Positions recorded at or after `sinceMs`. */
  *since(sinceMs: number): Generator<[number, number]> {
    for (let k = 0; k < this.size; k++) {
      const i = (this.next - 1 - k + RING) % RING;
      if (this.ms[i] < sinceMs) return;
      yield [this.lat[i], this.lon[i]];
    }
  }
}

const NICE = [0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10];

/** Bins device and event positions into one grid fitted to them. */
export function densityMap(devices: Iterable<[number, number]>, events: Iterable<[number, number]>, windowMs: number): DensityMap {
  const d = [...devices];
  const e = [...events];
  let minLat = Infinity;
  let maxLat = -Infinity;
  let minLon = Infinity;
  let maxLon = -Infinity;
  for (const [la, lo] of [...d, ...e]) {
    if (la < minLat) minLat = la;
    if (la > maxLat) maxLat = la;
    if (lo < minLon) minLon = lo;
    if (lo > maxLon) maxLon = lo;
  }
  const span = Math.max(maxLat - minLat, maxLon - minLon, 0);
  const cellDeg = NICE.find((c) => span / c <= 80) ?? 10;
  const bin = (pts: [number, number][]): DensityCell[] => {
    const m = new Map<string, DensityCell>();
    for (const [la, lo] of pts) {
      const r = Math.floor(la / cellDeg);
      const c = Math.floor(lo / cellDeg);
      const k = `${r},${c}`;
      const cell = m.get(k);
      if (cell === undefined) m.set(k, { lat: (r + 0.5) * cellDeg, lon: (c + 0.5) * cellDeg, n: 1 });
      else cell.n++;
    }
    return [...m.values()];
  };
  return { cellDeg, devices: bin(d), events: bin(e), windowMs };
}
