/** The updates suite (CLCB Fig. 5): location updates through device handles and arrays, and N moves then a match. */
import type { PositionUpdate } from '../../../src/model/types.js';
import { RandomWaypoint, WorkloadSource } from '../../../src/workload/index.js';
import { count, sig } from '../format.js';
import { errText, msSince, now } from '../measure.js';
import { makeUpdates } from '../moves.js';
import { Progress } from '../progress.js';
import { sink } from '../sink.js';
import { type Summary, summarize } from '../stats.js';
import { type GpuEnv, type SkipFn, engineOrSkip, health } from './common.js';
import { Loader, loadWithProgress } from './loader.js';
import type { GpuBenchConfig, GpuUpdateEngine, MovesThenMatch } from './schema.js';

/** The suite's configuration (as recorded in the result file) and the rtree size cap it applies. */
export type UpdatesSuiteConfig = GpuBenchConfig['updates'] & { rtreeMaxSubs: number };

function distinct(idx: Int32Array, devices: number): number {
  const seen = new Uint8Array(devices);
  let n = 0;
  for (let k = 0; k < idx.length; k++) {
    if (seen[idx[k]] === 0) {
      seen[idx[k]] = 1;
      n++;
    }
  }
  return n;
}

export async function runUpdatesSuite(c: UpdatesSuiteConfig, env: GpuEnv, skip: SkipFn): Promise<GpuUpdateEngine[]> {
  const out: GpuUpdateEngine[] = [];
  for (const name of c.engines) {
    const label = `updates ${name}`;
    if (name === 'rtree' && c.subscriptions > c.rtreeMaxSubs) {
      skip(name, `${count(c.subscriptions)} subscriptions`, `rtree runs up to ${count(c.rtreeMaxSubs)} subscriptions (--rtree-max-subs)`);
      continue;
    }
    const m = await engineOrSkip(name, env, skip, `${count(c.subscriptions)} subscriptions`);
    if (m === null) continue;
    try {
      const src = new WorkloadSource({ seed: env.seed, subscriptions: c.subscriptions, events: 20 });
      const events = src.events();
      const loader = new Loader(src, c.subscriptions);
      loader.add(name, m);
      loadWithProgress(loader, c.subscriptions, label);
      const devices = src.devices();
      for (let i = 0; i < 10; i++) sink(await m.match(events[i % events.length]));
      // The reference event: every "moves then match" is compared with it matched on a quiet engine.
      const ev = events[0];
      const plainMatch = async (): Promise<Summary> => {
        const ns = new Float64Array(c.plainMatches);
        for (let i = 0; i < ns.length; i++) {
          const t0 = now();
          sink(await m.match(ev));
          ns[i] = Number(now() - t0);
        }
        return summarize(ns, 1e-6);
      };
      await plainMatch(); // warm-up of the timed loop

      const rw = new RandomWaypoint(devices, { space: src.space, seed: env.seed, order: 'random' });
      let t0 = now();
      const handles = devices.map((d) => m.openDevice(d.id));
      const openHandlesMs = msSince(t0);

      const p = new Progress(`${label}: ${c.timed} timed + ${c.loop} looped handle updates`, c.timed + c.loop);
      const warm = makeUpdates(rw, Math.max(100, Math.floor(c.timed / 10)));
      for (let k = 0; k < warm.idx.length; k++) handles[warm.idx[k]].update(warm.lat[k], warm.lon[k]);
      sink(await m.match(ev));
      const timed = makeUpdates(rw, c.timed);
      const perCall = new Float64Array(c.timed);
      for (let k = 0; k < c.timed; k++) {
        const h = handles[timed.idx[k]];
        const t = now();
        h.update(timed.lat[k], timed.lon[k]);
        perCall[k] = Number(now() - t);
        p.tick();
      }
      sink(await m.match(ev));
      const loop = makeUpdates(rw, c.loop);
      t0 = now();
      for (let k = 0; k < c.loop; k++) handles[loop.idx[k]].update(loop.lat[k], loop.lon[k]);
      const loopNs = Number(now() - t0);
      p.tick(c.loop);
      p.end();
      sink(await m.match(ev));
      const nsPerUpdate = loopNs / Math.max(1, c.loop);

      // updatePositions with arrays of `size` updates; pending moves are flushed (untimed) between calls.
      const batch: GpuUpdateEngine['batch'] = [];
      for (const size of c.batchSizes) {
        const reps = c.batchReps;
        const estS = ((reps + 1) * size * nsPerUpdate) / 1e9;
        if (estS > c.maxMoveSeconds) {
          skip(name, `updates: updatePositions(${count(size)})`, `${reps + 1} calls would take about ${sig(estS)} s at the measured ${sig(nsPerUpdate)} ns/update (--max-move-seconds ${c.maxMoveSeconds})`);
          continue;
        }
        const lists: PositionUpdate[][] = [];
        for (let r = 0; r < reps + 1; r++) {
          const mv = makeUpdates(rw, size);
          lists.push(Array.from(mv.idx, (i, k) => ({ device: devices[i].id, lat: mv.lat[k], lon: mv.lon[k] })));
        }
        m.updatePositions(lists[0]); // warm-up
        sink(await m.match(ev));
        const ms = new Float64Array(reps);
        for (let r = 0; r < reps; r++) {
          const t = now();
          m.updatePositions(lists[r + 1]);
          ms[r] = msSince(t);
          sink(await m.match(ev));
        }
        const s = summarize(ms);
        batch.push({ size, reps, ms: s, updatesPerSec: size / (s.median / 1000) });
      }

      // N moves, then one match of the reference event: what the moved positions cost end to end.
      const movesThenMatch: MovesThenMatch[] = [];
      const base = await plainMatch();
      for (const n of c.moves) {
        const estS = (c.movesReps * n * nsPerUpdate) / 1e9;
        if (estS > c.maxMoveSeconds) {
          skip(name, `updates: ${count(n)} moves then match`, `${c.movesReps} × ${count(n)} moves would take about ${sig(estS)} s at the measured ${sig(nsPerUpdate)} ns/update (--max-move-seconds ${c.maxMoveSeconds})`);
          continue;
        }
        const movesMs = new Float64Array(c.movesReps);
        const matchMs = new Float64Array(c.movesReps);
        let dist = 0;
        for (let r = 0; r < c.movesReps; r++) {
          const mv = makeUpdates(rw, n);
          dist = distinct(mv.idx, devices.length);
          t0 = now();
          for (let k = 0; k < n; k++) handles[mv.idx[k]].update(mv.lat[k], mv.lon[k]);
          movesMs[r] = msSince(t0);
          t0 = now();
          sink(await m.match(ev));
          matchMs[r] = msSince(t0);
        }
        const mvS = summarize(movesMs);
        const maS = summarize(matchMs);
        const extra = maS.median - base.median;
        movesThenMatch.push({
          moves: n,
          distinctDevices: dist,
          reps: c.movesReps,
          movesMs: mvS,
          matchMs: maS,
          extraMs: extra,
          endToEndUpdatesPerSec: n / ((mvS.median + Math.max(0, extra)) / 1000),
        });
      }
      for (const h of handles) h.release();
      out.push({
        engine: name,
        subscriptions: c.subscriptions,
        devices: devices.length,
        loadMs: loader.slots[0].addMs,
        openHandlesMs,
        handlePerCallUs: summarize(perCall, 1e-3),
        handleLoop: { updates: c.loop, nsPerUpdate, updatesPerSec: 1e9 / nsPerUpdate },
        batch,
        plainMatch: base,
        movesThenMatch,
        health: health(m),
      });
    } catch (err) {
      skip(name, `${count(c.subscriptions)} subscriptions`, errText(err));
    } finally {
      await m.close();
    }
  }
  return out;
}
