/**
 * Where a lone event's time goes on the GPU path: a ladder of round trips through dawn.node, each
 * rung adding one piece of what the engine does per batch, then the engine itself (its lone-event
 * time split into submit, wait and parse) at a few sizes, beside the fast CPU engine.
 *
 *   node dist/bench/gpu-latency.js [--reps N] [--sizes 10000,250000] [--out FILE] [--quick] [--software]
 *
 * Rungs (each awaited alone, `reps` times after a warm-up):
 *   submit      an empty command buffer, then queue.onSubmittedWorkDone()
 *   map         copy 8 bytes into a staging buffer, submit, mapAsync, read, unmap
 *   +write      a 256-byte queue.writeBuffer first (the batch input)
 *   +1 pass     one compute dispatch (64 threads) before the copy
 *   +3 passes   three dispatches in one pass (Loc, Cont, Zip)
 *   +scopes     all of that inside two error scopes, popped and awaited with the map
 * The engine rows use subscriptions of 10 filters from the default workload.
 */
import { GpuContext } from '../src/engines/gpu/device.js';
import { GpuMatcher } from '../src/engines/gpu/matcher.js';
import { FastMatcher } from '../src/engines/fast.js';
import type { Event } from '../src/model/types.js';
import { WorkloadSource } from '../src/workload/index.js';
import { ArgReader, type Fail, cliFail, parseArgs } from './lib/args.js';
import { gpuInfo } from './lib/gpu/common.js';
import { type EngineRow, LATENCY_SCHEMA, type LatencyFile, type Rung, latencyTables } from './lib/gpu/latency-schema.js';
import { Loader, loadWithProgress } from './lib/gpu/loader.js';
import { count, sig } from './lib/format.js';
import { collect } from './lib/measure.js';
import { describeMachine } from './lib/machine.js';
import { note } from './lib/progress.js';
import { ResultRun } from './lib/result-file.js';
import { sinkNumber } from './lib/sink.js';
import { summarize } from './lib/stats.js';

const HELP = `Usage: node dist/bench/gpu-latency.js [options]
  --reps N       round trips per rung and events per engine row (default 2000; quick 200)
  --sizes LIST   subscriptions (x10 filters) for the engine rows (default 10000,250000; quick 1000)
  --batches LIST events per call of the engine rows (default 1): a size above 1 times matchBatch calls of that
                 many events (at least 20 calls, one at a time), each split the same way, per call
  --stages       time the GPU passes of each call too (timestamp queries; the engine's profile option)
  --out FILE     JSON output (default bench/results/gpu-latency.json)
  --seed N       workload seed (default 1)
  --software     allow a software adapter (llvmpipe): for trying the benchmark, not for figures
  --quick        small run
`;

const TINY = `
@group(0) @binding(0) var<storage, read_write> buf: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
  buf[g.x] = buf[g.x] + 1u;
}`;

const fail: Fail = cliFail('gpu-latency', HELP);

const us = (t0: number): number => (performance.now() - t0) * 1e3;

async function ladder(ctx: GpuContext, reps: number): Promise<Rung[]> {
  const d = ctx.device;
  const q = ctx.queue;
  const module = await ctx.compileShader('latency-tiny', TINY);
  const pipeline = await ctx.withValidation('tiny', () => d.createComputePipeline({ layout: 'auto', compute: { module, entryPoint: 'main' } }));
  const work = ctx.createBuffer('tiny.work', 256, GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST);
  const input = ctx.createBuffer('tiny.input', 256, GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST);
  const staging = ctx.createBuffer('tiny.staging', 8, GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST);
  const group = d.createBindGroup({ layout: pipeline.getBindGroupLayout(0), entries: [{ binding: 0, resource: { buffer: work } }] });
  const data = new Uint32Array(64);
  type Step = { write: boolean; passes: number; scopes: boolean; map: boolean };
  let callUs = 0;
  const once = async (s: Step): Promise<void> => {
    const t0 = performance.now();
    if (s.scopes) {
      d.pushErrorScope('out-of-memory');
      d.pushErrorScope('validation');
    }
    if (s.write) ctx.writeBuffer(input, 0, data);
    const enc = d.createCommandEncoder();
    if (s.passes > 0) {
      const pass = enc.beginComputePass();
      for (let i = 0; i < s.passes; i++) {
        pass.setPipeline(pipeline);
        pass.setBindGroup(0, group);
        pass.dispatchWorkgroups(1);
      }
      pass.end();
    }
    if (s.map) enc.copyBufferToBuffer(work, 0, staging, 0, 8);
    q.submit([enc.finish()]);
    const scopes = s.scopes ? [d.popErrorScope(), d.popErrorScope()] : [];
    callUs = us(t0);
    if (s.map) {
      await Promise.all([staging.mapAsync(GPUMapMode.READ), ...scopes]);
      sinkNumber(new Uint32Array(staging.getMappedRange(0, 8))[0]);
      staging.unmap();
    } else {
      await Promise.all([q.onSubmittedWorkDone(), ...scopes]);
    }
  };
  const rungs: [string, Step][] = [
    ['submit', { write: false, passes: 0, scopes: false, map: false }],
    ['map', { write: false, passes: 0, scopes: false, map: true }],
    ['+write', { write: true, passes: 0, scopes: false, map: true }],
    ['+1 pass', { write: true, passes: 1, scopes: false, map: true }],
    ['+3 passes', { write: true, passes: 3, scopes: false, map: true }],
    ['+scopes', { write: true, passes: 3, scopes: true, map: true }],
  ];
  const out: Rung[] = [];
  for (const [name, step] of rungs) {
    for (let i = 0; i < Math.min(200, reps); i++) await once(step);
    const t = new Float64Array(reps);
    const call = new Float64Array(reps);
    for (let i = 0; i < reps; i++) {
      const t0 = performance.now();
      await once(step);
      t[i] = us(t0);
      call[i] = callUs;
    }
    out.push({ rung: name, us: summarize(t), callUs: summarize(call) });
    note(`  ${name}: median ${sig(out[out.length - 1].us.median)} µs`);
  }
  work.destroy();
  input.destroy();
  staging.destroy();
  return out;
}

async function engineRows(subs: number, reps: number, seed: number, software: boolean, batches: readonly number[], stages: boolean): Promise<EngineRow[]> {
  const widest = Math.max(...batches);
  const src = new WorkloadSource({ seed, subscriptions: subs, events: Math.max(1000, widest) });
  const events: Event[] = src.events();
  const gpu = await GpuMatcher.create({ gpu: { allowSoftware: software }, cpuBelowFilters: 0, select: 'gpu', profile: stages });
  const fast = new FastMatcher();
  const rows: EngineRow[] = [];
  try {
    const loader = new Loader(src, subs);
    loader.add('gpu', gpu);
    loader.add('fast', fast);
    loadWithProgress(loader, subs, `latency ${count(subs)}`);
    collect();
    for (const batch of batches) {
      for (const [name, m] of [['gpu', gpu], ['fast', fast]] as const) {
        // The fast engine answers a batch one event at a time: a few calls show its rate.
        const calls = batch === 1 ? reps : Math.max(name === 'gpu' ? 20 : 3, Math.floor(reps / batch));
        const call = async (i: number): Promise<number> => {
          if (batch === 1) return (await m.match(events[i % events.length])).length;
          const part: Event[] = [];
          for (let j = 0; j < batch; j++) part.push(events[(i * batch + j) % events.length]);
          let n = 0;
          for (const ids of await m.matchBatch(part)) n += ids.length;
          return n;
        };
        for (let i = 0; i < Math.max(3, Math.ceil(200 / batch)); i++) sinkNumber(await call(i));
        const total = new Float64Array(calls);
        const keys = ['submitUs', 'syncUs', 'encodeEventsUs', 'recordUs', 'submitCallUs', 'waitUs', 'parseUs'] as const;
        const parts = Object.fromEntries(keys.map((k) => [k, new Float64Array(calls)])) as Record<(typeof keys)[number], Float64Array>;
        const passes = { loc: new Float64Array(calls), cont: new Float64Array(calls), zip: new Float64Array(calls) };
        let timedPasses = 0;
        let matches = 0;
        for (let i = 0; i < calls; i++) {
          const t0 = performance.now();
          matches += await call(i);
          total[i] = us(t0);
          if (m instanceof GpuMatcher) {
            const t = m.lastBatchTiming!;
            for (const k of keys) parts[k][i] = t[k];
            const st = m.stageTimes;
            if (st !== null) {
              passes.loc[timedPasses] = st.loc * 1e3;
              passes.cont[timedPasses] = st.cont * 1e3;
              passes.zip[timedPasses] = st.zip * 1e3;
              timedPasses++;
            }
          }
        }
        const isGpu = name === 'gpu';
        const timed = (k: keyof typeof passes) => (timedPasses === 0 ? null : summarize(passes[k].subarray(0, timedPasses)));
        rows.push({
          subscriptions: subs,
          filters: src.stats.filters,
          engine: name,
          batch,
          totalUs: summarize(total),
          submitUs: isGpu ? summarize(parts.submitUs) : null,
          syncUs: isGpu ? summarize(parts.syncUs) : null,
          encodeEventsUs: isGpu ? summarize(parts.encodeEventsUs) : null,
          recordUs: isGpu ? summarize(parts.recordUs) : null,
          submitCallUs: isGpu ? summarize(parts.submitCallUs) : null,
          waitUs: isGpu ? summarize(parts.waitUs) : null,
          parseUs: isGpu ? summarize(parts.parseUs) : null,
          locUs: timed('loc'),
          contUs: timed('cont'),
          zipUs: timed('zip'),
          matchesPerEvent: matches / (calls * batch),
        });
        note(`  ${name} ${count(subs)} batch ${batch}: median ${sig(rows[rows.length - 1].totalUs.median)} µs a call`);
      }
    }
    const served = gpu.stats().extra ?? {};
    if (Number(served.cpuEvents ?? 0) > 0) note(`  gpu ${count(subs)}: ${served.cpuEvents} events answered by the CPU`);
  } finally {
    await gpu.close();
    await fast.close();
  }
  return rows;
}

async function main(): Promise<void> {
  const a = new ArgReader(parseArgs(process.argv.slice(2), new Set(['quick', 'software', 'stages', 'help']), new Set(['reps', 'sizes', 'batches', 'out', 'seed']), fail), fail);
  if (a.flag('help')) {
    process.stdout.write(HELP);
    return;
  }
  const quick = a.flag('quick');
  const reps = a.int('reps', quick ? 200 : 2000);
  const seed = a.int('seed', 1);
  const sizes = a.counts('sizes', quick ? [1000] : [10_000, 250_000]);
  const software = a.flag('software');
  const batches = a.counts('batches', [1]);
  const stages = a.flag('stages');

  const run = new ResultRun({ out: a.str('out'), defaultFile: 'bench/results/gpu-latency.json', fail });
  const machine = run.machine;
  const ctx = await GpuContext.open({ allowSoftware: software });
  let rungs: Rung[];
  let gpu;
  try {
    note(`gpu-latency: ${ctx.name}; ${reps} round trips per rung`);
    rungs = await ladder(ctx, reps);
  } finally {
    await ctx.close();
  }
  const rows: EngineRow[] = [];
  for (const n of sizes) rows.push(...(await engineRows(n, reps, seed, software, batches, stages)));
  {
    // Adapter details from an engine of its own (the ladder's context is closed).
    const m = await GpuMatcher.create({ gpu: { allowSoftware: software } });
    gpu = gpuInfo(m);
    await m.close();
  }
  const file: LatencyFile = { schema: LATENCY_SCHEMA, date: new Date().toISOString(), command: run.command, machine, gpu, reps, seed, rungs, engines: rows };
  run.write(file);
  process.stdout.write(`Machine: ${describeMachine(machine)}\nGPU: ${gpu?.adapter ?? 'none'}\n\n`);
  process.stdout.write(`${latencyTables(file)}\n`);
  note(`gpu-latency: wrote ${run.shown}`);
}

if (process.argv[1]?.endsWith('gpu-latency.js')) {
  main().then(
    () => process.exit(0),
    (err) => {
      process.stderr.write(`gpu-latency: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
      process.exit(1);
    },
  );
}
