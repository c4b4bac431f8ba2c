/**
 * The shard map's geometry (services/matcher/shard-map.ts). The property everything rests on: a
 * device homed by the map's rules (placed at its cell's shard, kept while its guard circle touches
 * that shard) is always on a shard an event visits when the exact distance test admits the pair.
 * Checked on seeded walks and events everywhere, near the antimeridian and the poles included.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { haversineM } from '../../src/model/geo.js';
import { type CellLoad, type CellPlan, ShardMap, type ShardMapSpec, balanceCells } from '../../services/matcher/shard-map.js';
import { Prng } from '../../src/workload/prng.js';
import { Rng } from '../support/rng.js';

const DEG_PER_M = 180 / (Math.PI * 6_371_008.8);

/** A point `m` metres from (lat, lon) in a random direction (small steps; longitude wraps). */
function step(rng: Rng, lat: number, lon: number, m: number): [number, number] {
  const a = rng.next() * 2 * Math.PI;
  let la = lat + Math.cos(a) * m * DEG_PER_M;
  let lo = lon + (Math.sin(a) * m * DEG_PER_M) / Math.max(0.01, Math.cos((lat * Math.PI) / 180));
  if (la > 90) la = 180 - la;
  if (la < -90) la = -180 - la;
  lo = ((((lo + 180) % 360) + 360) % 360) - 180;
  return [la, lo];
}

function checkRouting(spec: ShardMapSpec, seed: number, centre: [number, number], spreadM: number, maxRadiusM: number) {
  const map = new ShardMap(spec);
  const rng = new Rng(seed);
  const devices: { lat: number; lon: number; home: number; r: number }[] = [];
  let moves = 0;
  for (let d = 0; d < 60; d++) {
    let [lat, lon] = step(rng, centre[0], centre[1], rng.next() * spreadM);
    let home = map.home(lat, lon, null);
    assert.equal(home, map.shardOf(lat, lon));
    for (let k = 0; k < 40; k++) {
      [lat, lon] = step(rng, lat, lon, rng.next() * spec.guardM * 1.5);
      const next = map.home(lat, lon, home);
      if (next !== home) moves++;
      home = next;
      assert.ok(map.staysAt(home, lat, lon), 'a device stays where it is homed');
    }
    // Most filters have the largest radius, so the shard's reach is no wider than a pair needs.
    devices.push({ lat, lon, home, r: rng.next() < 0.7 ? maxRadiusM : 1 + rng.next() * maxRadiusM });
  }
  const reach = new Map<number, number>();
  for (const d of devices) reach.set(d.home, Math.max(reach.get(d.home) ?? 0, d.r));
  let pairs = 0;
  for (let e = 0; e < 400; e++) {
    const re = rng.next() < 0.5 ? 0 : rng.next() * maxRadiusM;
    // Half the events anywhere; half just inside a device's reach, where a shard too few is a miss.
    const near = rng.next() < 0.5 ? devices[rng.int(devices.length)] : null;
    const [lat, lon] = near === null ? step(rng, centre[0], centre[1], rng.next() * (spreadM + maxRadiusM)) : step(rng, near.lat, near.lon, (near.r + re) * (0.95 + 0.0499 * rng.next()));
    const targets = map.eventShards(lat, lon, re, reach);
    for (const d of devices) {
      if (haversineM(d.lat, d.lon, lat, lon) > d.r + re) continue;
      pairs++;
      assert.ok(targets.has(d.home), `event at ${lat},${lon} r ${re} matches a device on shard ${d.home} at ${d.lat},${d.lon} r ${d.r}; visits ${[...targets]}`);
    }
  }
  return { pairs, moves };
}

describe('shard map', () => {
  it('cells, default layouts and overrides', () => {
    const m = new ShardMap({ version: 1, shards: 4, cellDeg: 1, guardM: 0 });
    assert.equal(m.rows, 180);
    assert.equal(m.cols, 360);
    assert.equal(m.shardOf(0, -180), 0);
    assert.equal(m.shardOf(0, 180), 0, '180 and -180 are one meridian');
    assert.equal(m.shardOf(45, 9), 2, 'sectors: Milan in the third quarter of the longitudes');
    assert.equal(m.shardOf(-33.9, 151.2), 3);
    assert.equal(m.shardOf(90, 0), m.shardOf(89.9, 0), 'the pole row is the last row');
    const s = new ShardMap({ version: 1, shards: 3, cellDeg: 0.5, guardM: 0, layout: 'stripes' });
    assert.equal(s.shardOf(45.1, 9.1), s.col(9.1) % 3);
    assert.notEqual(s.shardOf(45.1, 9.1), s.shardOf(45.1, 9.6), 'neighbouring stripes differ');
    const o = new ShardMap({ version: 2, shards: 4, cellDeg: 1, guardM: 0, cells: { '135,189': 0 } });
    assert.equal(o.shardOf(45.5, 9.5), 0, 'an overridden cell');
    assert.equal(o.shardOf(46.5, 9.5), 2, 'its neighbour keeps the default');
    assert.deepEqual(new ShardMap(o.spec()).spec(), o.spec());
    assert.deepEqual([...o.shardsNear(45.5, 9.5, 1000)].sort(), [0]);
    assert.deepEqual([...o.shardsNear(45.9, 9.5, 20_000)].sort(), [0, 2]);
  });

  it('refuses a bad spec, naming the field', () => {
    const ok = { version: 1, shards: 2, cellDeg: 1, guardM: 100 };
    assert.throws(() => new ShardMap({ ...ok, shards: 0 }), /shards must be an integer in \[1, 256\]/);
    assert.throws(() => new ShardMap({ ...ok, cellDeg: 0 }), /cellDeg must be in/);
    assert.throws(() => new ShardMap({ ...ok, cellDeg: Number.NaN }), /cellDeg must be in/);
    assert.throws(() => new ShardMap({ ...ok, guardM: -1 }), /guardM must be in/);
    assert.throws(() => new ShardMap({ ...ok, version: 1.5 }), /version must be an integer/);
    assert.throws(() => new ShardMap({ ...ok, cells: { '1,2': 5 } }), /names shard 5/);
    assert.throws(() => new ShardMap({ ...ok, cells: { x: 0 } }), /is not "row,col"/);
    assert.throws(() => new ShardMap({ ...ok, cells: { '999,0': 0 } }), /is not "row,col"/);
  });

  it('a homed device keeps its shard inside the guard band and moves beyond it', () => {
    const m = new ShardMap({ version: 1, shards: 2, cellDeg: 0.01, guardM: 200, layout: 'stripes' });
    // A column border at lon 9.19 (cell 18919 starts there); the band reaches about 140 m east of it.
    const border = -180 + 18919 * 0.01;
    const west = border - 0.001;
    const home = m.home(45.46, west, null);
    assert.equal(home, m.shardOf(45.46, west));
    const justOver = border + 100 * DEG_PER_M / Math.cos((45.46 * Math.PI) / 180);
    assert.notEqual(m.shardOf(45.46, justOver), home, 'across the border');
    assert.equal(m.home(45.46, justOver, home), home, 'within the guard band: stays');
    const farOver = border + 0.005; // about 390 m from both borders of its column
    assert.notEqual(m.home(45.46, farOver, home), home, 'beyond the band: moves');
  });

  // [name, map, centre, spread of devices (m), largest radius (m), whether devices must change shards]
  for (const [name, spec, centre, spread, maxR, moving] of [
    ['stripes of 1 km cells, city radii', { version: 1, shards: 3, cellDeg: 0.01, guardM: 300, layout: 'stripes' }, [45.46, 9.19], 5000, 800, true],
    ['sectors with overrides, large radii', { version: 3, shards: 4, cellDeg: 0.5, guardM: 2000, cells: { '270,378': 1, '271,378': 3 } }, [45.2, 9.1], 60_000, 40_000, false],
    ['the antimeridian', { version: 1, shards: 5, cellDeg: 0.02, guardM: 500, layout: 'stripes' }, [-16.5, 179.99], 4000, 2000, true],
    // Near a pole a guard circle spans many columns: devices rarely leave their shard.
    ['near the north pole', { version: 1, shards: 3, cellDeg: 0.05, guardM: 500, layout: 'stripes' }, [89.97, 20], 3000, 1500, false],
    ['no guard band', { version: 1, shards: 3, cellDeg: 0.01, guardM: 0, layout: 'stripes' }, [45.46, 9.19], 3000, 500, false],
  ] as [string, ShardMapSpec, [number, number], number, number, boolean][]) {
    it(`every admitted pair is on a shard the event visits: ${name}`, () => {
      let pairs = 0;
      let moves = 0;
      for (let seed = 1; seed <= 6; seed++) {
        const r = checkRouting(spec, seed * 7919, centre, spread, maxR);
        pairs += r.pairs;
        moves += r.moves;
      }
      assert.ok(pairs > 200, `enough admitted pairs to mean something (${pairs})`);
      if (moving) assert.ok(moves > 10, `devices changed shards (${moves})`);
    });
  }

  it('an event visits only shards with a filter that can reach it', () => {
    const m = new ShardMap({ version: 1, shards: 4, cellDeg: 1, guardM: 100 });
    const reach = new Map([
      [0, 500],
      [2, 500],
    ]);
    assert.deepEqual([...m.eventShards(45.5, 9.5, 0, reach)], [2], 'Milan: its own sector only');
    assert.deepEqual([...m.eventShards(45.5, 9.5, 0, new Map())], [], 'no filters anywhere');
    const wide = new Map([
      [0, 500],
      [2, 9_000_000],
    ]);
    assert.deepEqual([...m.eventShards(-40, 120, 0, wide)].sort(), [2], 'a shard whose filters reach around the world');
    assert.deepEqual([...m.eventShards(-40, -120, 0, wide)].sort(), [0, 2], 'and the sector of the event');
  });
});

describe('fitting the shard map to load (balanceCells)', () => {
  const map = new ShardMap({ version: 1, shards: 3, cellDeg: 1, guardM: 0, layout: 'sectors' });
  // Sectors of 120 columns: shard 0 holds columns 0-119, 1 holds 120-239, 2 holds 240-359.
  const spread = (plan: ReturnType<typeof balanceCells>) => Math.max(...plan.after) - Math.min(...plan.after);

  it('moves cells from the most loaded shard to the least until no cell helps; the devices add up and no shard ends above where the most loaded began', () => {
    const loads = [
      { row: 100, col: 10, devices: 400 },
      { row: 100, col: 11, devices: 300 },
      { row: 101, col: 10, devices: 200 },
      { row: 101, col: 11, devices: 100 },
      { row: 100, col: 130, devices: 50 },
    ];
    const plan = balanceCells(map, loads, 10);
    assert.deepEqual(plan.before, [1000, 50, 0]);
    assert.equal(plan.after.reduce((a, b) => a + b, 0), 1050);
    assert.ok(Math.max(...plan.after) < 1000);
    assert.ok(spread(plan) <= 400, `after ${plan.after.join(',')}`);
    // Applied to the map, the moves give the loads the plan says.
    const moved = new ShardMap({ ...map.spec(), version: 2, cells: Object.fromEntries(plan.moves.map((m) => [`${m.row},${m.col}`, m.shard])) });
    const after = [0, 0, 0];
    for (const c of loads) after[moved.shardOfCell(c.row, c.col)] += c.devices;
    assert.deepEqual(after, plan.after);
  });

  it('a cell that would overshoot is not moved; at most maxMoves cells move; an even map moves nothing', () => {
    assert.deepEqual(balanceCells(map, [{ row: 1, col: 1, devices: 900 }], 5).moves, [], 'one cell: moving it only moves the peak');
    const many = Array.from({ length: 30 }, (_, i) => ({ row: 50, col: i, devices: 10 }));
    assert.equal(balanceCells(map, many, 4).moves.length, 4);
    const even = [0, 130, 250].map((col) => ({ row: 10, col, devices: 7 }));
    assert.deepEqual(balanceCells(map, even, 5).moves, []);
  });

  it('plans exactly what the plain planner (every loaded cell looked at for every move) plans, over seeded maps and loads', () => {
    const rng = new Prng(20261127);
    for (let t = 0; t < 300; t++) {
      const m = new ShardMap({ version: 1, shards: rng.int(2, 6), cellDeg: rng.chance(0.5) ? 1 : 2, guardM: 0, layout: rng.chance(0.5) ? 'sectors' : 'stripes' });
      const loads = Array.from({ length: rng.int(0, 300) }, () => ({
        row: rng.int(0, m.rows - 1),
        // Clustered columns (neighbours meet), now and then one far away; loads with many ties.
        col: rng.chance(0.8) ? rng.int(0, 20) : rng.int(0, m.cols - 1),
        devices: rng.chance(0.3) ? 10 : rng.int(1, 500),
      }));
      const maxMoves = rng.int(0, 60);
      assert.deepEqual(balanceCells(m, loads, maxMoves), balanceCellsPlain(m, loads, maxMoves), `case ${t}`);
    }
  });

  it('prefers a cell beside the receiving shard\'s cells, so regions stay in one piece where they can', () => {
    // Two sectors of 180 columns: column 179 borders shard 1, columns 5 and 6 do not.
    const plan = balanceCells(new ShardMap({ version: 1, shards: 2, cellDeg: 1, guardM: 0, layout: 'sectors' }), [
      { row: 60, col: 5, devices: 100 },
      { row: 60, col: 179, devices: 100 },
      { row: 60, col: 6, devices: 100 },
    ], 1);
    assert.deepEqual(plan.moves, [{ row: 60, col: 179, shard: 1 }]);
  });
});

/** The planner as first written: every loaded cell looked at for every move (the oracle of the test above). */
function balanceCellsPlain(map: ShardMap, loads: readonly CellLoad[], maxMoves: number): CellPlan {
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
    for (const [k, s] of owner) {
      if ((moved.get(k) ?? s) !== hi) continue;
      const l = load.get(k)!;
      if (l > room) continue;
      // A cell beside the receiving shard counts double; ties by cell number (a plan is the same every time).
      const score = besideOf(k, lo) ? 2 * l : l;
      if (best < 0 || score > bestScore || (score === bestScore && k < best)) {
        best = k;
        bestLoad = l;
        bestScore = score;
      }
    }
    if (best < 0) break;
    moved.set(best, lo);
    after[hi] -= bestLoad;
    after[lo] += bestLoad;
  }
  const moves = [...moved].map(([k, shard]) => ({ row: Math.floor(k / map.cols), col: k % map.cols, shard })).sort((a, b) => a.row - b.row || a.col - b.col);
  return { moves, before, after };
}
