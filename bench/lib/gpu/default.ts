/** The default suite (CLCB Table 2). */
import type { WorkloadOptions } from '../../../src/workload/index.js';
import { WorkloadSource } from '../../../src/workload/index.js';
import { createEngine } from '../cases.js';
import { count } from '../format.js';
import { collect, errText, materialize, msSince, now } from '../measure.js';
import { Progress, note } from '../progress.js';
import { sink } from '../sink.js';
import { checksum, summarize } from '../stats.js';
import { type GpuEnv, type SkipFn, engineOrSkip, health, healthProblem, memoryPoint, timeEvents } from './common.js';
import type { GpuDefaultEngine, GpuDefaultResult, Verification } from './schema.js';
import { verify } from './verify.js';

export interface DefaultSuiteConfig {
  engines: string[];
  subscriptions: number;
  events: number;
  reps: number;
  warmupEvents: number;
}

/** Table 2: per engine, load, single-event latency, memory; then the GPU's answers against fast's. */
export async function runDefaultSuite(c: DefaultSuiteConfig, env: GpuEnv, skip: SkipFn, workload: Partial<WorkloadOptions> = {}): Promise<GpuDefaultResult> {
  const src = new WorkloadSource({ ...workload, seed: env.seed, subscriptions: c.subscriptions, events: c.events });
  const events = src.events();
  const devices = src.devices();
  const gen = materialize(src, c.subscriptions, 'default');
  const engines: GpuDefaultEngine[] = [];
  const answers = new Map<string, string[][]>();
  for (const name of c.engines) {
    const label = `default ${name}`;
    collect();
    const before = process.memoryUsage();
    const m = await engineOrSkip(name, env, skip, `${count(c.subscriptions)} subscriptions`);
    if (m === null) continue;
    try {
      const p = new Progress(`${label}: add ${count(c.subscriptions)} subscriptions`, c.subscriptions);
      let t0 = now();
      for (let i = 0; i < gen.subs.length; i++) {
        m.add(gen.subs[i]);
        p.tick();
      }
      const loadMs = msSince(t0);
      p.end();
      t0 = now();
      for (const d of devices) m.updatePosition(d.id, d.lat, d.lon);
      const positionsMs = msSince(t0);
      t0 = now();
      sink(await m.match(events[0]));
      const firstMatchMs = msSince(t0);
      const mem = memoryPoint(m);
      const { ns, answers: a } = await timeEvents(m, events, c.warmupEvents, c.reps, label);
      answers.set(name, a);
      const sum = checksum(a);
      const h = health(m);
      const problem = healthProblem(h);
      if (problem !== null) note(`  ${label}: ${problem}`);
      engines.push({
        engine: name,
        load: { totalMs: loadMs, perSubUs: (loadMs * 1000) / Math.max(1, c.subscriptions) },
        positionsMs,
        firstMatchMs,
        match: summarize(ns, 1e-6),
        avgMatches: sum.avgMatches,
        checksum: sum.checksum,
        memory: { ...mem, heapDeltaBytes: mem.heapUsedBytes - before.heapUsed, arrayBuffersDeltaBytes: mem.arrayBuffersBytes - before.arrayBuffers },
        health: h,
        stats: m.stats(),
      });
    } catch (err) {
      skip(name, `${count(c.subscriptions)} subscriptions`, errText(err));
    } finally {
      await m.close();
    }
  }
  let verification: Verification | null = null;
  const g = answers.get('gpu');
  const f = answers.get('fast');
  if (g !== undefined && f !== undefined) {
    const owners = new Map(devices.map((d) => [d.id, { lat: d.lat, lon: d.lon }]));
    const cpu = createEngine('fast');
    verification = verify(
      events,
      g,
      f,
      (id) => {
        const i = Number(id.slice(1));
        if (!(i >= 0 && i < gen.subs.length)) return undefined;
        if (!cpu.has(id)) cpu.add(gen.subs[i]); // normalised form, for the examples' distances
        return cpu.get(id);
      },
      (owner) => owners.get(owner),
    );
    await cpu.close();
  }
  return {
    subscriptions: c.subscriptions,
    filters: src.stats.filters,
    constraints: src.stats.constraints,
    events: events.length,
    reps: c.reps,
    generateMs: gen.ms,
    engines,
    verification,
  };
}
