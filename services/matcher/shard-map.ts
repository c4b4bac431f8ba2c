/**
 * The shard map of a deployment whose matching is split by space: the sphere is cut into lat/lon
 * cells of `cellDeg` degrees and every cell belongs to one of `shards` geographic shards (by a
 * default layout, or an explicit override per cell). A device whose subscriptions are all anchored
 * to it lives on one shard, its home: the shard of its position's cell when it is placed, kept while
 * the circle of `guardM` around its position still touches a cell of that shard (so a device
 * wandering along a border does not hop to and fro). Its subscriptions, its position and every
 * decision about them are that shard's alone, so no pair of an event and a subscription is matched
 * twice.
 *
 * An event must reach every shard that holds a device it can match. A shard's `reach` is the
 * largest filter radius it holds; a device homed there is within about 3 × guardM of one of its
 * cells (see `HOMED_SLACK`), so an event at P with radius r_e goes to every shard with a cell
 * touching the circle of r_e + reach + 3 × guardM around P. Cells are tested through
 * `circleBoxes`, which covers the circle (padded), so the test never drops a shard the exact
 * distance test could need: a shard may be visited without a match, never missed.
 *
 * Pure geometry and bookkeeping: no I/O.
 */
import { type Box, circleBoxes } from '../../src/model/geo.js';

/**
 * How far a homed device may be from the nearest cell of its shard, in guard bands: the guard
 * circle's covering boxes reach points up to about 2.42 × guardM away (their corners; 3 × at a
 * pole, where the box is a whole band of longitudes).
 */
export const HOMED_SLACK = 3;

export type ShardLayout = 'sectors' | 'stripes';

export interface ShardMapSpec {
  /** Increases with every change of the map. */
  version: number;
  /** Geographic shards (1-256). */
  shards: number;
  /** Cell size in degrees of latitude and longitude (0.001-30). */
  cellDeg: number;
  /** Guard band in metres (0-100 000). */
  guardM: number;
  /**
   * Which shard a cell belongs to unless overridden: `sectors` (the default): longitude sectors of
   * equal width, shard k holding the k-th; `stripes`: column j of cells to shard j mod shards
   * (every cell border a shard border: for tests).
   */
  layout?: ShardLayout;
  /** Overrides, "row,col" → shard. */
  cells?: Record<string, number>;
}

export class ShardMap {
  readonly version: number;
  readonly shards: number;
  readonly cellDeg: number;
  readonly guardM: number;
  readonly layout: ShardLayout;
  readonly rows: number;
  readonly cols: number;
  private readonly overrides: Map<number, number>;
  /** Override cells per column, for boxes: column → rows. */
  private readonly overrideCols: Map<number, number[]>;

  constructor(spec: ShardMapSpec) {
    const { version, shards, cellDeg, guardM } = spec;
    if (!Number.isSafeInteger(version) || version < 0) throw new Error(`shard map: version must be an integer >= 0, got ${String(version)}`);
    if (!Number.isInteger(shards) || shards < 1 || shards > 256) throw new Error(`shard map: shards must be an integer in [1, 256], got ${String(shards)}`);
    if (typeof cellDeg !== 'number' || !(cellDeg >= 0.001 && cellDeg <= 30)) throw new Error(`shard map: cellDeg must be in [0.001, 30], got ${String(cellDeg)}`);
    if (typeof guardM !== 'number' || !(guardM >= 0 && guardM <= 100_000)) throw new Error(`shard map: guardM must be in [0, 100000], got ${String(guardM)}`);
    const layout = spec.layout ?? 'sectors';
    if (layout !== 'sectors' && layout !== 'stripes') throw new Error(`shard map: layout must be sectors or stripes, got ${String(layout)}`);
    this.version = version;
    this.shards = shards;
    this.cellDeg = cellDeg;
    this.guardM = guardM;
    this.layout = layout;
    this.rows = Math.ceil(180 / cellDeg - 1e-9);
    this.cols = Math.ceil(360 / cellDeg - 1e-9);
    this.overrides = new Map();
    this.overrideCols = new Map();
    for (const [key, shard] of Object.entries(spec.cells ?? {})) {
      const m = /^(\d+),(\d+)$/.exec(key);
      const i = m === null ? NaN : Number(m[1]);
      const j = m === null ? NaN : Number(m[2]);
      if (!(i >= 0 && i < this.rows && j >= 0 && j < this.cols)) throw new Error(`shard map: cell ${JSON.stringify(key)} is not "row,col" within ${this.rows} x ${this.cols}`);
      if (!Number.isInteger(shard) || shard < 0 || shard >= shards) throw new Error(`shard map: cell ${key} names shard ${String(shard)}, not one of 0..${shards - 1}`);
      this.overrides.set(i * this.cols + j, shard);
      let list = this.overrideCols.get(j);
      if (list === undefined) this.overrideCols.set(j, (list = []));
      list.push(i);
    }
  }

  /** The spec this map was made from (for storing it). */
  spec(): ShardMapSpec {
    const cells: Record<string, number> = {};
    for (const [k, s] of this.overrides) cells[`${Math.floor(k / this.cols)},${k % this.cols}`] = s;
    return { version: this.version, shards: this.shards, cellDeg: this.cellDeg, guardM: this.guardM, layout: this.layout, cells };
  }

  row(lat: number): number {
    return Math.min(this.rows - 1, Math.max(0, Math.floor((lat + 90) / this.cellDeg)));
  }

  col(lon: number): number {
    const j = Math.floor((lon + 180) / this.cellDeg);
    return ((j % this.cols) + this.cols) % this.cols;
  }

  /** The default shard of column j (no override). */
  private colShard(j: number): number {
    return this.layout === 'stripes' ? j % this.shards : Math.min(this.shards - 1, Math.floor((j * this.shards) / this.cols));
  }

  shardOfCell(i: number, j: number): number {
    if (this.overrides.size > 0) {
      const o = this.overrides.get(i * this.cols + j);
      if (o !== undefined) return o;
    }
    return this.colShard(j);
  }

  /** The shard of the cell holding a point. */
  shardOf(lat: number, lon: number): number {
    return this.shardOfCell(this.row(lat), this.col(lon));
  }

  /** Adds to `into` the shard of every cell that touches one of the boxes. */
  private shardsInBoxes(boxes: readonly Box[], into: Set<number>, only: ((s: number) => boolean) | null = null): void {
    for (const [minLon, minLat, maxLon, maxLat] of boxes) {
      const i0 = this.row(minLat);
      const i1 = this.row(maxLat);
      const j0 = Math.max(0, Math.floor((minLon + 180) / this.cellDeg));
      const j1 = Math.min(this.cols - 1, Math.floor((maxLon + 180) / this.cellDeg));
      // Default shards by column (rows share them), then the overridden cells within the box.
      let seenDefault = 0;
      for (let j = j0; j <= j1 && seenDefault < this.shards; j++) {
        const rowsHere = this.overrideCols.get(j);
        if (rowsHere !== undefined) {
          // The overridden cells of this column within the box; the rest of the column is default.
          let overridden = 0;
          for (const i of rowsHere) {
            if (i < i0 || i > i1) continue;
            overridden++;
            const o = this.overrides.get(i * this.cols + j)!;
            if (only === null || only(o)) into.add(o);
          }
          if (overridden === i1 - i0 + 1) continue;
        }
        const s = this.colShard(j);
        if (!into.has(s) && (only === null || only(s))) {
          into.add(s);
          seenDefault++;
        }
      }
    }
  }

  /** Shards with a cell that touches the circle of `distM` around the point. */
  shardsNear(lat: number, lon: number, distM: number, into = new Set<number>()): Set<number> {
    this.shardsInBoxes(circleBoxes(lat, lon, distM), into);
    return into;
  }

  /** Whether a device at the point may stay homed at `shard` (its guard circle touches one of its cells). */
  staysAt(shard: number, lat: number, lon: number): boolean {
    if (this.shardOf(lat, lon) === shard) return true;
    if (this.guardM === 0) return false;
    const found = new Set<number>();
    this.shardsInBoxes(circleBoxes(lat, lon, this.guardM), found, (s) => s === shard);
    return found.has(shard);
  }

  /** The home of a device at the point: `current` while it may stay there, else its cell's shard. */
  home(lat: number, lon: number, current: number | null): number {
    if (current !== null && current >= 0 && current < this.shards && this.staysAt(current, lat, lon)) return current;
    return this.shardOf(lat, lon);
  }

  /**
   * The geographic shards an event at the point with radius `radiusM` must visit, given each
   * shard's reach (the largest filter radius it holds; a shard without one holds no filter and is
   * skipped).
   */
  eventShards(lat: number, lon: number, radiusM: number, reach: ReadonlyMap<number, number>, into = new Set<number>()): Set<number> {
    const slack = HOMED_SLACK * this.guardM;
    // Shards grouped by reach: one set of boxes per distinct reach.
    const byReach = new Map<number, number[]>();
    for (const [s, r] of reach) {
      if (s < 0 || s >= this.shards) continue;
      let list = byReach.get(r);
      if (list === undefined) byReach.set(r, (list = []));
      list.push(s);
    }
    for (const [r, shards] of byReach) {
      const want = new Set(shards);
      this.shardsInBoxes(circleBoxes(lat, lon, radiusM + r + slack), into, (s) => want.has(s));
    }
    return into;
  }
}

/** A cell's load for `balanceCells`: its row and column and the devices homed in it. */
export interface CellLoad {
  row: number;
  col: number;
  devices: number;
}

/** What `balanceCells` proposes: the cells to move (each to its new shard) and the shards' devices before and after. */
export interface CellPlan {
  moves: { row: number; col: number; shard: number }[];
  before: number[];
  after: number[];
}

/**
 * Fits the shard map to load: moves of cells that even out the devices homed on the geographic
 * shards, at most `maxMoves`. Greedy: while moves are left, a cell goes from the most loaded shard
 * to the least loaded one if that lowers the larger of the two: of the cells that do not overshoot
 * (at most half their difference) the largest, a cell beside one of the receiving shard's counting
 * double (the map's regions stay contiguous where they can). Stops when no cell helps. Pure: the
 * caller applies the moves (MoveCells) and the devices follow.
 */
export function balanceCells(map: ShardMap, loads: readonly CellLoad[], maxMoves: number): CellPlan {
  const shards = map.shards;
  const owner = new Map<number, number>();
  const load = new Map<number, number>();
  const before = new Array<number>(shards).fill(0);
  for (const c of loads) {
    if (!(c.devices > 0) || c.row < 0 || c.row >= map.rows || c.col < 0 || c.col >= map.cols) continue;
    const k = c.row * map.cols + c.col;
    const s = map.shardOfCell(c.row, c.col);
    owner.set(k, s);
    load.set(k, (load.get(k) ?? 0) + c.devices);
    before[s] += c.devices;
  }
  const after = before.slice();
  const moved = new Map<number, number>();
  /** The shard a cell has in the plan so far (columns wrap at the antimeridian). */
  const shardOf = (i: number, j: number): number => {
    const col = ((j % map.cols) + map.cols) % map.cols;
    const k = i * map.cols + col;
    return moved.get(k) ?? owner.get(k) ?? map.shardOfCell(i, col);
  };
  const besideOf = (k: number, s: number): boolean => {
    const i = Math.floor(k / map.cols);
    const j = k % map.cols;
    for (let di = -1; di <= 1; di++) {
      for (let dj = -1; dj <= 1; dj++) {
        if ((di !== 0 || dj !== 0) && i + di >= 0 && i + di < map.rows && shardOf(i + di, j + dj) === s) return true;
      }
    }
    return false;
  };
  // Each shard's loaded cells by load, largest first: a move looks only at the cells that fit and
  // stops where even a doubled load cannot reach the best score found (work per move is what it
  // looks at, not every loaded cell: max_moves can be large). Cells a move takes away stay in
  // their list and are skipped; cells a move brings are kept beside it, unsorted (at most one per move).
  const lists: number[][] = Array.from({ length: shards }, () => []);
  for (const [k, s] of owner) lists[s].push(k);
  for (const list of lists) list.sort((a, b) => load.get(b)! - load.get(a)! || a - b);
  const arrived: number[][] = Array.from({ length: shards }, () => []);
  for (let n = 0; n < maxMoves && shards > 1; n++) {
    let hi = 0;
    let lo = 0;
    for (let s = 1; s < shards; s++) {
      if (after[s] > after[hi]) hi = s;
      if (after[s] < after[lo]) lo = s;
    }
    const room = (after[hi] - after[lo]) / 2;
    let best = -1;
    let bestLoad = 0;
    let bestScore = 0;
    const consider = (k: number): void => {
      const l = load.get(k)!;
      // A cell beside the receiving shard counts double; ties by cell number (a plan is the same every time).
      const score = besideOf(k, lo) ? 2 * l : l;
      if (best < 0 || score > bestScore || (score === bestScore && k < best)) {
        best = k;
        bestLoad = l;
        bestScore = score;
      }
    };
    const list = lists[hi];
    // The first cell that fits: loads fall along the list.
    let a = 0;
    let b = list.length;
    while (a < b) {
      const m = (a + b) >>> 1;
      if (load.get(list[m])! > room) a = m + 1;
      else b = m;
    }
    for (let i = a; i < list.length; i++) {
      const k = list[i];
      if (best >= 0 && 2 * load.get(k)! < bestScore) break;
      if ((moved.get(k) ?? hi) === hi) consider(k);
    }
    for (const k of arrived[hi]) if (moved.get(k) === hi && load.get(k)! <= room) consider(k);
    if (best < 0) break;
    moved.set(best, lo);
    arrived[lo].push(best);
    after[hi] -= bestLoad;
    after[lo] += bestLoad;
  }
  const moves = [...moved].map(([k, shard]) => ({ row: Math.floor(k / map.cols), col: k % map.cols, shard })).sort((a, b) => a.row - b.row || a.col - b.col);
  return { moves, before, after };
}
