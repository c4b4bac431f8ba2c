/** The memory suite (CLCB Fig. 7): GPU bytes vs filters. */
import type { Matcher } from '../../../src/engines/index.js';
import { WorkloadSource } from '../../../src/workload/index.js';
import { count } from '../format.js';
import { errText } from '../measure.js';
import { note } from '../progress.js';
import { sink } from '../sink.js';
import { type GpuEnv, type SkipFn, health, healthProblem, makeEngine, memoryPoint } from './common.js';
import { Loader, loadWithProgress } from './loader.js';
import type { GpuMemoryPointResult } from './schema.js';

export async function runMemorySuite(sizes: number[], env: GpuEnv, skip: SkipFn, onPoint: (p: GpuMemoryPointResult) => void): Promise<void> {
  const sorted = [...sizes].sort((a, b) => a - b);
  const max = sorted[sorted.length - 1];
  let m: Matcher;
  try {
    m = await makeEngine('gpu', env);
  } catch (err) {
    skip('gpu', 'memory', errText(err));
    return;
  }
  try {
    const src = new WorkloadSource({ seed: env.seed, subscriptions: max, events: 1 });
    const ev = src.events()[0];
    const loader = new Loader(src, max);
    loader.add('gpu', m);
    for (const n of sorted) {
      loadWithProgress(loader, n, 'memory');
      sink(await m.match(ev)); // uploads: GPU buffers are sized at the first match after a load
      const h = health(m);
      const problem = healthProblem(h);
      if (problem !== null) note(`  memory ${count(n)}: ${problem}`);
      onPoint({ subscriptions: n, filters: src.stats.filters, constraints: src.stats.constraints, loadMs: loader.slots[0].addMs, ...memoryPoint(m), health: h });
    }
  } catch (err) {
    skip('gpu', 'memory', errText(err));
  } finally {
    await m.close();
  }
}
