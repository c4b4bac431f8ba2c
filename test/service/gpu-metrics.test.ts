/**
 * The GPU engine's batching in /metrics: an embedded hub over a real GPU engine (software adapter
 * here), published to as a gateway publishes, its counters read by the process's Metrics.
 */
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { GpuContext } from '../../src/engines/gpu/device.js';
import { GpuKernels, GpuMatcher } from '../../src/engines/gpu/matcher.js';
import { EmbeddedHub } from '../../services/hub/embedded.js';
import { MatchCore } from '../../services/matcher/core.js';
import { Metrics } from '../../services/process/metrics.js';

const ctx = await GpuContext.open({ allowSoftware: true });
const kernels = await GpuKernels.compile(ctx);
after(() => ctx.close());

/** A counter's value in Prometheus text (the process's role label included). */
function sample(text: string, name: string): number {
  const m = new RegExp(`^${name}\\{role="all"\\} (\\S+)$`, 'm').exec(text);
  assert.ok(m !== null, `${name} is served`);
  return Number(m[1]);
}

describe('metrics: the GPU engine', () => {
  it('counts batches, the events the GPU answered and those its CPU side answered', async () => {
    const engine = GpuMatcher.attach(kernels, { cpuBelowFilters: 0, select: 'gpu' });
    const hub = new EmbeddedHub(new MatchCore(engine));
    const metrics = new Metrics(hub, 'all');
    try {
      await hub.addSubscription('d1', { id: 's', filters: [{ constraints: [{ name: 'x', op: 'exists' }] }] });
      const ev = (id: string) => ({ id, lat: 45.46, lon: 9.18, attributes: { x: 1 } });
      const zero = await metrics.scrape();
      assert.equal(sample(zero, 'ambit_gpu_batches_total'), 0);
      assert.equal(sample(zero, 'ambit_gpu_events_total'), 0);
      const rs = await hub.publish([ev('a'), ev('b'), ev('c')]);
      assert.deepEqual(rs.map((r) => r.reached), [1, 1, 1]);
      await hub.publish([ev('d'), ev('e')]);
      const text = await metrics.scrape();
      assert.equal(sample(text, 'ambit_gpu_batches_total'), 2, 'one batch a publish');
      assert.equal(sample(text, 'ambit_gpu_events_total'), 5);
      assert.equal(sample(text, 'ambit_gpu_cpu_events_total'), 0);
      // Both batches' times, summed: each part took some time.
      for (const part of ['submit', 'wait', 'read']) assert.ok(sample(text, `ambit_gpu_batch_${part}_seconds_total`) > 0, part);
      assert.equal(sample(zero, 'ambit_gpu_batch_wait_seconds_total'), 0);
    } finally {
      await metrics.close();
      await hub.close();
    }
  });

  it('counts events its CPU side answered, below the crossover', async () => {
    const engine = GpuMatcher.attach(kernels, { cpuBelowFilters: 1_000 });
    const hub = new EmbeddedHub(new MatchCore(engine));
    const metrics = new Metrics(hub, 'all');
    try {
      await hub.addSubscription('d1', { id: 's', filters: [{ constraints: [{ name: 'x', op: 'exists' }] }] });
      await hub.publish([1, 2, 3, 4].map((i) => ({ id: `e${i}`, lat: 45.46, lon: 9.18, attributes: { x: 1 } })));
      const text = await metrics.scrape();
      assert.equal(sample(text, 'ambit_gpu_batches_total'), 0);
      assert.equal(sample(text, 'ambit_gpu_events_total'), 0);
      assert.equal(sample(text, 'ambit_gpu_cpu_events_total'), 4);
      assert.equal(sample(text, 'ambit_gpu_batch_wait_seconds_total'), 0, 'no batch ran');
    } finally {
      await metrics.close();
      await hub.close();
    }
  });
});
