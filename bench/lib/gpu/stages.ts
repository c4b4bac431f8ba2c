/** The stages suite (CLCB Fig. 6): Loc, Cont, Zip GPU times and the host's part of a match. */
import type { GpuMatcher } from '../../../src/engines/gpu/matcher.js';
import type { Matcher } from '../../../src/engines/index.js';
import { type WorkloadOptions, WorkloadSource } from '../../../src/workload/index.js';
import { count } from '../format.js';
import { errText, now } from '../measure.js';
import { Progress } from '../progress.js';
import { sink } from '../sink.js';
import { type Summary, summarize } from '../stats.js';
import { type GpuEnv, type SkipFn, health, makeEngine, memoryPoint } from './common.js';
import { Loader, loadWithProgress } from './loader.js';
import type { GpuStagePoint, StageVariant } from './schema.js';

/**
 * Fig. 6(b) "constraints chosen to select every event": selectivity 1 with `exists` as the only
 * operator, the one the generator can make always true (it drops other always-true constraints
 * as noise); one event type, so every event carries every name a filter constrains.
 */
export const ALL_CONTENT: Partial<WorkloadOptions> = Object.freeze({ selectivity: 1, numericOps: { exists: 1 }, stringOps: { exists: 1 } });

export interface StagesSuiteConfig {
  sizes: number[];
  events: number;
  warmupEvents: number;
  variants: StageVariant[];
}

export async function runStagesSuite(c: StagesSuiteConfig, env: GpuEnv, skip: SkipFn, onPoint: (p: GpuStagePoint, timestampQuery: boolean) => void): Promise<void> {
  const sizes = [...c.sizes].sort((a, b) => a - b);
  const max = sizes[sizes.length - 1];
  for (const variant of c.variants) {
    const label = `stages ${variant}`;
    let src: WorkloadSource;
    try {
      src = new WorkloadSource({ seed: env.seed, subscriptions: max, events: c.events, ...(variant === 'all-content' ? ALL_CONTENT : {}) });
    } catch (err) {
      skip('gpu', label, `the generator cannot make this variant: ${errText(err)}`);
      continue;
    }
    let m: Matcher;
    try {
      m = await makeEngine('gpu', env, true);
    } catch (err) {
      skip('gpu', label, errText(err));
      continue;
    }
    try {
      const g = m as GpuMatcher;
      const tsq = g.context?.features.has('timestamp-query') === true;
      const events = src.events();
      const loader = new Loader(src, max);
      loader.add('gpu', m);
      for (const n of sizes) {
        loadWithProgress(loader, n, label);
        sink(await m.match(events[0]));
        const memory = memoryPoint(m);
        for (let i = 0; i < c.warmupEvents; i++) sink(await m.match(events[i % events.length]));
        const E = events.length;
        const total = new Float64Array(E);
        const submit = new Float64Array(E);
        const wait = new Float64Array(E);
        const loc: number[] = [];
        const cont: number[] = [];
        const zip: number[] = [];
        const gpuSum: number[] = [];
        const host: number[] = [];
        let matches = 0;
        const p = new Progress(`${label} ${count(n)}: match ${E} events`, E);
        for (let i = 0; i < E; i++) {
          const t0 = now();
          const pending = m.match(events[i]);
          const t1 = now();
          const ids = await pending;
          const t2 = now();
          sink(ids);
          matches += ids.length;
          total[i] = Number(t2 - t0) / 1e6;
          submit[i] = Number(t1 - t0) / 1e6;
          wait[i] = Number(t2 - t1) / 1e6;
          const st = g.stageTimes;
          if (tsq && st !== null) {
            loc.push(st.loc);
            cont.push(st.cont);
            zip.push(st.zip);
            const sum = st.loc + st.cont + st.zip;
            gpuSum.push(sum);
            host.push(total[i] - sum);
          }
          p.tick();
        }
        p.end();
        const opt = (a: number[]): Summary | null => (a.length === 0 ? null : summarize(a));
        onPoint(
          {
            variant,
            subscriptions: n,
            filters: src.stats.filters,
            events: E,
            avgMatches: matches / E,
            expectedSelectivity: src.stats.expectedSelectivity,
            total: summarize(total),
            submit: summarize(submit),
            wait: summarize(wait),
            loc: opt(loc),
            cont: opt(cont),
            zip: opt(zip),
            gpu: opt(gpuSum),
            hostAndTransfer: opt(host),
            loadMs: loader.slots[0].addMs,
            memory,
            health: health(m),
          },
          tsq,
        );
      }
    } catch (err) {
      skip('gpu', label, errText(err));
    } finally {
      await m.close();
    }
  }
}
