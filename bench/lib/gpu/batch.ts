/** The batch suite: events/s of matchBatch calls, of batch streams and of many match() calls in flight. */
import type { Event } from '../../../src/model/types.js';
import { type WorkloadOptions, WorkloadSource } from '../../../src/workload/index.js';
import { count } from '../format.js';
import { errText, msSince, now } from '../measure.js';
import { Progress, note } from '../progress.js';
import { sink, sinkNumber } from '../sink.js';
import { summarize } from '../stats.js';
import { type GpuEnv, type SkipFn, engineOrSkip, health, healthProblem } from './common.js';
import { Loader, loadWithProgress } from './loader.js';
import type { GpuBatchEngine, GpuBatchResult } from './schema.js';

export interface BatchSuiteConfig {
  engines: string[];
  subscriptions: number;
  sizes: number[];
  concurrency: number[];
  /** matchBatch calls of `size` events kept `depth` in flight (a publisher feed): sustained rate. */
  streams: { size: number; depth: number }[];
  /** Events per batch size (at least 3 calls) for the GPU; cpuEvents for CPU engines. */
  events: number;
  cpuEvents: number;
}

export async function runBatchSuite(c: BatchSuiteConfig, env: GpuEnv, skip: SkipFn, workload: Partial<WorkloadOptions> = {}): Promise<GpuBatchResult> {
  const src = new WorkloadSource({ ...workload, seed: env.seed, subscriptions: c.subscriptions, events: 1000 });
  const pool = src.events();
  const result: GpuBatchResult = { subscriptions: c.subscriptions, filters: 0, engines: [] };
  for (const name of c.engines) {
    const label = `batch ${name}`;
    const m = await engineOrSkip(name, env, skip, `${count(c.subscriptions)} subscriptions`);
    if (m === null) continue;
    try {
      const loader = new Loader(src, c.subscriptions);
      loader.add(name, m);
      loadWithProgress(loader, c.subscriptions, label);
      result.filters = src.stats.filters;
      for (let i = 0; i < 20; i++) sink(await m.match(pool[i]));
      const target = name === 'gpu' ? c.events : c.cpuEvents;
      let cursor = 0;
      const take = (k: number): Event[] => {
        const out: Event[] = new Array(k);
        for (let i = 0; i < k; i++) out[i] = pool[cursor++ % pool.length];
        return out;
      };
      const engine: GpuBatchEngine = { engine: name, batches: [], concurrent: [], streams: [], health: null };
      for (const size of c.sizes) {
        const calls = Math.max(3, Math.ceil(target / size));
        const lists = Array.from({ length: calls }, () => take(size));
        for (let w = 0; w < 2; w++) sinkNumber((await m.matchBatch(take(size))).length);
        const ms = new Float64Array(calls);
        const p = new Progress(`${label}: ${calls} batches of ${size}`, calls);
        const t0 = now();
        for (let k = 0; k < calls; k++) {
          const t = now();
          const res = await m.matchBatch(lists[k]);
          ms[k] = msSince(t);
          for (const ids of res) sink(ids);
          p.tick();
        }
        const wall = msSince(t0);
        p.end();
        engine.batches.push({ batchSize: size, calls, batchMs: summarize(ms), eventsPerSec: (calls * size) / (wall / 1000) });
      }
      // A feed: matchBatch calls kept `depth` in flight, each issued as soon as one returns (GPU
      // only: a CPU engine answers a call before the next can be issued).
      if (name === 'gpu') {
        for (const { size, depth } of c.streams) {
          const calls = Math.max(4 * depth, Math.ceil((4 * target) / size));
          const lists = Array.from({ length: Math.min(calls, 64) }, () => take(size));
          for (let w = 0; w < depth; w++) sinkNumber((await m.matchBatch(lists[w % lists.length])).length);
          const ms = new Float64Array(calls);
          const p = new Progress(`${label}: ${calls} batches of ${size}, ${depth} in flight`, calls);
          let issued = 0;
          const t0 = now();
          const lane = async (): Promise<void> => {
            while (issued < calls) {
              const k = issued++;
              const t = now();
              const res = await m.matchBatch(lists[k % lists.length]);
              ms[k] = msSince(t);
              sinkNumber(res.length);
              p.tick();
            }
          };
          await Promise.all(Array.from({ length: depth }, lane));
          const wall = msSince(t0);
          p.end();
          engine.streams!.push({ batchSize: size, depth, calls, callMs: summarize(ms), eventsPerSec: (calls * size) / (wall / 1000) });
        }
      }
      // Many match() calls in flight at once: the engine forms its own batches (GPU only; CPU
      // engines answer synchronously, so concurrency changes nothing there).
      if (name === 'gpu') {
        for (const conc of c.concurrency) {
          const rounds = Math.max(3, Math.ceil(target / conc));
          const lat: number[] = [];
          let wall = 0;
          for (let r = -1; r < rounds; r++) {
            const evs = take(conc);
            const t0 = now();
            const stamps = new Float64Array(conc);
            await Promise.all(
              evs.map((e, i) =>
                m.match(e).then((ids) => {
                  stamps[i] = Number(now() - t0) / 1e6;
                  sink(ids);
                }),
              ),
            );
            if (r < 0) continue; // warm-up round
            wall += msSince(t0);
            for (const s of stamps) lat.push(s);
          }
          engine.concurrent.push({ concurrency: conc, rounds, latencyMs: summarize(lat), eventsPerSec: (rounds * conc) / (wall / 1000) });
        }
      }
      engine.health = health(m);
      const problem = healthProblem(engine.health);
      if (problem !== null) note(`  ${label}: ${problem}`);
      result.engines.push(engine);
    } catch (err) {
      skip(name, `${count(c.subscriptions)} subscriptions`, errText(err));
    } finally {
      await m.close();
    }
  }
  return result;
}
