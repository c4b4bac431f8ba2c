/** Precomputed location updates for the benchmarks, so timing sees only the calls. */
import type { RandomWaypoint } from '../../src/workload/index.js';

export interface UpdateList {
  /** Index of the moved device in the walk. */
  idx: Int32Array;
  ids: string[];
  lat: Float64Array;
  lon: Float64Array;
}

/** Random-waypoint moves of random devices (1 s ticks at 1–15 m/s: moves of 1–15 m). */
export function makeUpdates(rw: RandomWaypoint, n: number): UpdateList {
  const idx = new Int32Array(n);
  const ids: string[] = new Array(n);
  const lat = new Float64Array(n);
  const lon = new Float64Array(n);
  for (let k = 0; k < n; k++) {
    const i = rw.nextIndex();
    rw.advance(i);
    idx[k] = i;
    ids[k] = rw.ids[i];
    lat[k] = rw.lat[i];
    lon[k] = rw.lon[i];
  }
  return { idx, ids, lat, lon };
}
