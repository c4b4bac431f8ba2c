/** The scale suite: 10M subscriptions streamed into the GPU engine, measured at checkpoints. */
import type { Matcher } from '../../../src/engines/index.js';
import { WorkloadSource } from '../../../src/workload/index.js';
import { count, sig } from '../format.js';
import { errText, msSince, now } from '../measure.js';
import { note } from '../progress.js';
import { sink } from '../sink.js';
import { checksum, summarize } from '../stats.js';
import { type GpuEnv, type SkipFn, health, healthProblem, makeEngine, memoryPoint, timeEvents } from './common.js';
import { Loader } from './loader.js';
import type { GpuScaleResult } from './schema.js';

export interface ScaleSuiteConfig {
  subscriptions: number;
  /** Fractions of `subscriptions` at which to measure (1 = all). */
  checkpoints: number[];
  events: number;
  warmupEvents: number;
  /** Stop loading after this many seconds (0: no limit) and measure what is resident. */
  maxLoadS: number;
  /** Load each chunk with one addMany call. */
  addMany?: boolean;
}

/** Host bytes per subscription of the GPU engine (its CPU engine, host mirror, ids), measured at 200k with 10 filters. */
export const GPU_HOST_BYTES_PER_SUB = 7000;

export async function runScaleSuite(c: ScaleSuiteConfig, env: GpuEnv, skip: SkipFn, onCheckpoint: (r: GpuScaleResult) => void): Promise<GpuScaleResult | null> {
  const n = c.subscriptions;
  const result: GpuScaleResult = { requested: n, loaded: 0, truncated: null, loadRateSubsPerSec: 0, checkpoints: [] };
  let m: Matcher;
  try {
    m = await makeEngine('gpu', env);
  } catch (err) {
    skip('gpu', `scale ${count(n)}`, errText(err));
    return null;
  }
  try {
    const src = new WorkloadSource({ seed: env.seed, subscriptions: n, events: c.events });
    const events = src.events();
    const loader = new Loader(src, n, c.addMany === true);
    loader.add('gpu', m);
    const marks = [...new Set(c.checkpoints.map((f) => Math.max(1, Math.round(f * n))))].sort((a, b) => a - b);
    const slot = loader.slots[0];
    // The time limit counts loading only (generation, adds, positions), not the checkpoints' measurements.
    const loadingS = (): number => (loader.generateMs + slot.addMs + slot.posMs) / 1000;
    let nextPct = 5;
    const tick = (loaded: number): void => {
      const p = (100 * loaded) / n;
      if (p + 1e-9 < nextPct && loaded < n) return;
      while (nextPct <= p) nextPct += 5;
      const s = loadingS();
      const rate = loaded / s;
      const rss = process.memoryUsage().rss / 2 ** 30;
      note(`  [scale] ${loaded.toLocaleString('en-US')}/${n.toLocaleString('en-US')} (${Math.round(p)}%) ${s.toFixed(0)} s, ${sig(rate)} subs/s, eta ${((n - loaded) / rate).toFixed(0)} s, rss ${rss.toFixed(1)} GiB`);
    };
    for (const mark of marks) {
      const deadline = c.maxLoadS > 0 ? performance.now() + (c.maxLoadS - loadingS()) * 1000 : Infinity;
      const done = loader.loadTo(mark, tick, deadline);
      if (!done) result.truncated = `load time limit of ${c.maxLoadS} s (--scale-max-load-s) reached at ${loader.loaded.toLocaleString('en-US')} subscriptions`;
      const size = loader.loaded;
      if (result.checkpoints.some((k) => k.subscriptions === size)) break;
      note(`  [scale] measuring at ${count(size)} subscriptions (${count(src.stats.filters)} filters)`);
      const t0 = now();
      sink(await m.match(events[0]));
      const firstMatchMs = msSince(t0);
      const memory = memoryPoint(m);
      const { ns, answers } = await timeEvents(m, events, c.warmupEvents, 1, `scale ${count(size)}`);
      const h = health(m);
      const problem = healthProblem(h);
      if (problem !== null) note(`  [scale] ${problem}`);
      result.loaded = size;
      result.loadRateSubsPerSec = size / (slot.addMs / 1000);
      result.checkpoints.push({
        subscriptions: size,
        filters: src.stats.filters,
        constraints: src.stats.constraints,
        loadMs: slot.addMs,
        generateMs: loader.generateMs,
        firstMatchMs,
        match: summarize(ns, 1e-6),
        avgMatches: checksum(answers).avgMatches,
        memory,
        health: h,
      });
      onCheckpoint(result);
      if (!done) break;
    }
  } catch (err) {
    result.truncated = `failed at ${result.loaded.toLocaleString('en-US')}+ subscriptions: ${errText(err)}`;
    skip('gpu', `scale ${count(n)}`, errText(err));
  } finally {
    await m.close();
  }
  return result;
}
