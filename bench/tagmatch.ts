/**
 * Subset matching at TagMatch's scale (TagMatch §4.3): throughput of match and match-unique
 * against the size of the database (parts of a Twitter-like database, src/workload/tags.ts), the
 * partition size sweep, and latency against the batch size, on the GPU index beside the exact CPU
 * index on the same data. Every measured GPU answer set is first compared with the CPU index's.
 *
 *   node dist/bench/tagmatch.js [options]
 */
import { closeSync, mkdirSync, openSync, writeFileSync, writeSync } from 'node:fs';
import path from 'node:path';
import { FastMatcher } from '../src/engines/fast.js';
import { GpuContext } from '../src/engines/gpu/device.js';
import { GpuKernels, GpuMatcher } from '../src/engines/gpu/matcher.js';
import { WORDS, signatureInto } from '../src/engines/gpu/tag-build.js';
import { DEFAULT_GPU_TAG_INDEX, GpuTagIndex, type GpuTagIndexStats } from '../src/engines/gpu/tag-index.js';
import { TagBatcher } from '../src/engines/tag-batcher.js';
import { type TagMatches, TagSetIndex, type TagSetsView } from '../src/engines/tag-index.js';
import type { Event, Subscription } from '../src/model/types.js';
import { type TagWorkload, tagQueries, tagText, tagWorkload } from '../src/workload/tags.js';
import { cliFail, readCommandLine, runMain } from './lib/args.js';
import { count, sig, table } from './lib/format.js';
import { describeMachine } from './lib/machine.js';
import { note } from './lib/progress.js';
import { ResultRun } from './lib/result-file.js';
import { type Summary, summarize } from './lib/stats.js';
import { linePlot } from './lib/svg.js';

const HELP = `Usage: node dist/bench/tagmatch.js [options]
  --sets N          the whole database, (set, key) entries (default 212M, as the paper's; quick 300k)
  --fractions LIST  parts of it measured, percent (default 20,60,100)
  --queries N       queries per throughput measurement (default 32768; quick 4096)
  --reps N          timed repetitions of each measurement (default 3)
  --partitions LIST maxPartition sweep at the smallest part (default 50k,200k,800k; none: skip)
  --leaf N          leafSize of the measured GPU indexes (default the index's, 1024)
  --leaves LIST     leafSize sweep at the smallest part (default 256,1024,4096; quick 256,1024; none)
  --batches LIST    batch sizes for latency at the largest part (default 64,256,1024,4096; none)
  --timeouts LIST   batching timeouts (ms) for latency under load at the largest part: queries
                    arrive one by one at each of --rates and go to the GPU in batches of up to
                    --batch, sent when full or when the timeout passes (default 1,5,20; none)
  --rates LIST      offered queries/s for that sweep (default 10k,50k,100k), 2 s a point
  --verify LIST     verifyThreads sweep at the largest part: match and match-unique q/s with each
                    number of verification threads (0: the main thread; default 0,4,8; none)
  --batch N         queries per GPU batch in the throughput runs (default 2048)
  --cpu-queries N   queries timed on the CPU index (default 2000)
  --check N         queries whose GPU answers are compared with the CPU index's (default 1000)
  --matcher N       the first N entries also as tag-only subscriptions of the fast engine, timed per
                    lone event beside the CPU index per query, then of the GPU engine: its GPU bytes a
                    tag-only filter, lone events and batches of 1000 (default 1M; quick 100k; 0: skip)
  --no-matcher-gpu  leave the GPU engine out of the --matcher run
  --export-dir DIR  write the largest part's entries and queries as signatures for TagMatch's side by
                    side (bench/tagmatch-side/driver.cc)
  --seed N          workload seed (default 1)
  --out FILE        JSON output (default bench/results/tagmatch.json); an SVG plot beside it
  --software        allow a software adapter (for trying the benchmark, not for figures)
  --quick           small run`;

interface OpResult {
  op: 'match' | 'match-unique';
  /** Queries per second over the repetitions. */
  qps: Summary;
  /** Keys answered per query (the output rate is qps times this). */
  keysPerQuery: number;
}

interface PartResult {
  fraction: number;
  entries: number;
  sets: number;
  buildMs: { cpuIndex: number; gpuIndex: number; gpu: GpuTagIndexStats['buildMs'] };
  partitions: number;
  largestPartition: number;
  gpuBytesPerSet: number;
  cpuIndexBytesPerEntry: number;
  rssGiB: number;
  checked: number;
  mismatches: number;
  gpu: OpResult[];
  cpu: OpResult[];
  visitsPerQuery: number;
  falseHitsPerQuery: number;
  /** Host time per query in the GPU runs (µs): prepare, verify, and waiting for the GPU. */
  hostUsPerQuery: { prepare: number; verify: number; wait: number };
}

const gib = (b: number): number => b / 2 ** 30;

function view(w: TagWorkload, n: number): { db: TagSetsView; keys: Uint32Array } {
  return { db: { offsets: w.db.offsets.subarray(0, n + 1), tags: w.db.tags }, keys: w.keys.subarray(0, n) };
}

function slice(q: TagSetsView, n: number): TagSetsView {
  return { offsets: q.offsets.subarray(0, n + 1), tags: q.tags };
}

/**
 * The part's entries and queries for bench/tagmatch-side/driver.cc (TagMatch on the same data):
 * each entry's 192-bit signature as the GPU index makes it (6 little-endian u32 words, TagMatch's
 * 3 u64 blocks) in sets.sig and its key in sets.keys; each query's signature in queries.sig.
 */
function exportPart(dir: string, db: TagSetsView, keys: Uint32Array, queries: TagSetsView): void {
  mkdirSync(dir, { recursive: true });
  const writeSigs = (file: string, v: TagSetsView, n: number): void => {
    const fd = openSync(path.join(dir, file), 'w');
    const chunk = 1 << 20;
    const sig = new Uint32Array(WORDS * chunk);
    for (let from = 0; from < n; from += chunk) {
      const to = Math.min(n, from + chunk);
      for (let u = from; u < to; u++) signatureInto(sig, WORDS * (u - from), v.tags, v.offsets[u], v.offsets[u + 1]);
      writeSync(fd, sig, 0, (to - from) * WORDS * 4);
    }
    closeSync(fd);
  };
  const n = db.offsets.length - 1;
  writeSigs('sets.sig', db, n);
  writeFileSync(path.join(dir, 'sets.keys'), keys.subarray(0, n));
  writeSigs('queries.sig', queries, queries.offsets.length - 1);
  note(`exported ${count(n)} sets and ${count(queries.offsets.length - 1)} queries to ${dir} for the TagMatch driver`);
}

/** Answer sets per query, sorted, for comparison. */
function sortedLists(m: TagMatches): string[] {
  const out: string[] = [];
  for (let j = 0; j + 1 < m.offsets.length; j++) out.push([...m.keys.subarray(m.offsets[j], m.offsets[j + 1])].sort((a, b) => a - b).join(','));
  return out;
}

async function timeOp(run: () => Promise<TagMatches> | TagMatches, queries: number, reps: number): Promise<{ qps: Summary; keys: number }> {
  const rates: number[] = [];
  let keys = 0;
  for (let r = 0; r < reps; r++) {
    const t0 = performance.now();
    const m = await run();
    const ms = performance.now() - t0;
    rates.push(queries / (ms / 1000));
    keys = m.keys.length;
  }
  return { qps: summarize(rates), keys: keys / queries };
}

/**
 * Queries arriving one by one at `rate` a second for up to 2 s (open loop: arrivals are due on a
 * schedule, whatever the answers do), through TagMatch's batching front end. Latency runs from a
 * query's due time to its answer.
 */
async function underLoad(gpu: GpuTagIndex, queries: TagSetsView, batch: number, timeoutMs: number, rate: number): Promise<{ answered: number; latencyMs: Summary; batches: number; byTimeout: number }> {
  const nq = queries.offsets.length - 1;
  const total = Math.max(1, Math.min(Math.round(2 * rate), 8 * nq));
  const batcher = new TagBatcher(gpu, { maxBatch: batch, timeoutMs, unique: true });
  const lat = new Float64Array(total);
  const answers: Promise<void>[] = [];
  const start = performance.now();
  let sent = 0;
  while (sent < total) {
    const due = Math.min(total, Math.floor(((performance.now() - start) * rate) / 1000) + 1);
    for (; sent < due; sent++) {
      const j = sent % nq;
      const at = start + (sent * 1000) / rate;
      const k = sent;
      answers.push(batcher.match(queries.tags.subarray(queries.offsets[j], queries.offsets[j + 1])).then(() => void (lat[k] = performance.now() - at)));
    }
    await new Promise<void>((resolve) => setImmediate(resolve));
  }
  await Promise.all(answers);
  const elapsed = performance.now() - start;
  await batcher.close();
  const st = batcher.stats();
  return { answered: total / (elapsed / 1000), latencyMs: summarize([...lat]), batches: st.batches, byTimeout: st.timedOut };
}

function perQueryUs(before: GpuTagIndexStats, after: GpuTagIndexStats, queries: number): PartResult['hostUsPerQuery'] {
  const us = (k: keyof GpuTagIndexStats['batchMs']): number => ((after.batchMs[k] - before.batchMs[k]) * 1000) / queries;
  return { prepare: us('prepare'), verify: us('verify'), wait: us('wait') };
}

async function main(): Promise<void> {
  const fail = cliFail('tagmatch', HELP);
  const cl = readCommandLine(process.argv.slice(2), new Set(['software', 'quick', 'help', 'no-matcher-gpu']), new Set(['sets', 'fractions', 'queries', 'reps', 'partitions', 'leaf', 'leaves', 'batches', 'batch', 'timeouts', 'rates', 'verify', 'cpu-queries', 'check', 'seed', 'out', 'matcher', 'export-dir']), fail, HELP);
  if (cl === null) return;
  const { a, r } = cl;
  const quick = r.flag('quick');
  const sets = r.count('sets', quick ? 300_000 : 212_000_000);
  const fractions = (r.list('fractions') ?? ['20', '60', '100']).map((s) => {
    const p = Number(s);
    if (!(p > 0 && p <= 100)) fail(`--fractions: ${JSON.stringify(s)} is not a percentage in (0, 100]`);
    return p / 100;
  });
  const nQueries = r.count('queries', quick ? 4096 : 32768);
  const reps = r.int('reps', 3, 1, 100);
  // A sweep given as "none" is skipped.
  const sweep = (key: string, fallback: number[]): number[] => (r.list(key)?.join() === 'none' ? [] : r.counts(key, fallback));
  const partitionSweep = sweep('partitions', quick ? [10_000, 50_000] : [50_000, 200_000, 800_000]);
  const leaf = r.int('leaf', DEFAULT_GPU_TAG_INDEX.leafSize, 1);
  const leafSweep = sweep('leaves', quick ? [256, 1024] : [256, 1024, 4096]);
  const batchSweep = sweep('batches', quick ? [64, 1024] : [64, 256, 1024, 4096]);
  const timeoutSweep = (r.list('timeouts') ?? (quick ? ['5'] : ['1', '5', '20'])).map((t) => {
    if (t === 'none') return NaN;
    const ms = Number(t);
    if (!(Number.isFinite(ms) && ms >= 0)) fail(`--timeouts: ${JSON.stringify(t)} is not a number of ms >= 0`);
    return ms;
  }).filter((t) => !Number.isNaN(t));
  const rateSweep = sweep('rates', quick ? [200, 1000] : [10_000, 50_000, 100_000]);
  const verifySweep = r.list('verify')?.join() === 'none' ? [] : (r.list('verify') ?? (quick ? ['0', '2'] : ['0', '4', '8'])).map((v) => {
    const n = Number(v);
    if (!Number.isSafeInteger(n) || n < 0) fail(`--verify: ${JSON.stringify(v)} is not a number of threads >= 0`);
    return n;
  });
  const batch = r.int('batch', 2048, 1, 65535);
  const cpuQueries = r.count('cpu-queries', quick ? 500 : 2000);
  const check = r.count('check', quick ? 500 : 1000);
  const seed = r.int('seed', 1, 0, 2 ** 32 - 1);
  const matcherN = r.int('matcher', quick ? 100_000 : 1_000_000, 0);
  const matcherGpu = !r.flag('no-matcher-gpu');
  const exportDir = r.str('export-dir');
  const run = new ResultRun({ out: a.out, defaultFile: 'bench/results/tagmatch.json', fail });

  const ctx = await GpuContext.open({ allowSoftware: r.flag('software') });
  const adapter = `${ctx.adapterInfo.vendor} ${ctx.adapterInfo.device || ctx.adapterInfo.description}`.trim();
  note(`machine: ${describeMachine(run.machine)}; GPU: ${adapter}`);
  note(`database: ${count(sets)} entries (parts ${fractions.map((f) => `${f * 100}%`).join(', ')}); ${count(nQueries)} queries of a database set plus 2-4 tags; batches of ${batch}`);

  let t0 = performance.now();
  // Parts are prefixes of the whole database, and the generator makes entries one after another
  // from one seed: only the largest part measured is generated (users as for the whole).
  const users = Math.round(sets * 1.4);
  const generated = Math.max(1, Math.round(sets * Math.max(...fractions)));
  const w = tagWorkload({ seed, sets: generated, users, queries: 0 }, (n) => note(`  generated ${count(n)} sets (${sig((performance.now() - t0) / 1000)} s)`));
  note(`workload: ${count(generated)} entries of ${count(sets)}, ${count(w.db.tags.length)} tags in all, in ${sig((performance.now() - t0) / 1000)} s`);

  const doc = {
    benchmark: 'tagmatch',
    startedAt: run.startedAt.toISOString(),
    command: run.command,
    machine: run.machine,
    gpu: adapter,
    parameters: { sets, fractions, queries: nQueries, reps, batch, leaf, cpuQueries, check, seed, workload: w.options },
    parts: [] as PartResult[],
    partitionSweep: [] as { maxPartition: number; partitions: number; buildMs: number; qps: Summary }[],
    leafSweep: [] as { leafSize: number; blocks: number; qps: Summary; hostUsPerQuery: PartResult['hostUsPerQuery'] }[],
    latency: [] as { batch: number; latencyMs: Summary; qps: number }[],
    verifySweep: [] as { verifyThreads: number; match: Summary; unique: Summary }[],
    batching: [] as { timeoutMs: number; offered: number; answered: number; latencyMs: Summary; batches: number; byTimeout: number }[],
    matcher: null as null | {
      subscriptions: number;
      loadS: number;
      fastUs: Summary;
      indexUs: number;
      matchesPerEvent: number;
      mismatches: number;
      gpu: null | { loadS: number; loneUs: Summary; batchEventsPerS: Summary; gpuBytesPerFilter: number; stateBytesPerFilter: number; cpuEvents: number; mismatches: number };
    },
  };
  const save = (): void => run.write(doc);

  if (matcherN > 0) {
    // Tag-only subscriptions in the matching engine (one filter each, the entry's tags as text)
    // against the CPU index on the same entries: lone events, as a publish arrives.
    const n = Math.min(matcherN, sets);
    const o = w.options;
    const text = (v: TagSetsView, i: number): string[] => {
      const out: string[] = [];
      for (let k = v.offsets[i]; k < v.offsets[i + 1]; k++) out.push(tagText(o, v.tags[k]));
      return out;
    };
    const subs: Subscription[] = [];
    // Entry i as a tag-only subscription of its key's user.
    const tagOnly = (i: number): Subscription => ({ id: String(i), owner: `u${w.keys[i]}`, filters: [{ constraints: [], tags: text(w.db, i) }] });
    for (let i = 0; i < n; i++) subs.push(tagOnly(i));
    const fast = new FastMatcher();
    t0 = performance.now();
    fast.addMany(subs);
    const loadS = (performance.now() - t0) / 1000;
    subs.length = 0;
    const qs = tagQueries(w, n, 3000, seed + 7, 2, 4);
    const events: Event[] = Array.from({ length: 3000 }, (_, j) => ({ id: `e${j}`, lat: 0, lon: 0, attributes: {}, tags: text(qs, j) }));
    const idx = TagSetIndex.load(view(w, n).db, Uint32Array.from({ length: n }, (_, i) => i));
    for (let j = 0; j < 500; j++) await fast.match(events[j]);
    idx.matchAll(slice(qs, 500), false);
    const lat: number[] = [];
    let matches = 0;
    let mismatches = 0;
    const want = sortedLists(idx.matchAll(qs, false));
    for (let j = 0; j < events.length; j++) {
      const s0 = performance.now();
      const got = await fast.match(events[j]);
      lat.push((performance.now() - s0) * 1000);
      matches += got.length;
      if (got.map(Number).sort((x, y) => x - y).join(',') !== want[j]) mismatches++;
    }
    t0 = performance.now();
    idx.matchAll(qs, false);
    const indexUs = ((performance.now() - t0) * 1000) / 3000;
    doc.matcher = { subscriptions: n, loadS, fastUs: summarize(lat), indexUs, matchesPerEvent: matches / 3000, mismatches, gpu: null };
    note(`matcher: ${count(n)} tag-only subscriptions loaded in ${sig(loadS)} s; fast engine ${sig(doc.matcher.fastUs.median)} µs median, ${sig(doc.matcher.fastUs.p99)} µs p99 per lone event; CPU tag index ${sig(indexUs)} µs a query; ${sig(matches / 3000)} matches an event; ${mismatches} events answered differently`);
    await fast.close();
    save();
    if (matcherGpu) {
      // The same subscriptions in the GPU engine (GPU path always): its bytes a tag-only filter
      // (names only: 24 B a filter plus 4 B a tag in a run shared by equal sets), lone events, and
      // events/s in batches, each answer compared with the CPU index's.
      const kernels = await GpuKernels.compile(ctx);
      const gpu = GpuMatcher.attach(kernels, { cpuBelowFilters: 0, select: 'gpu' });
      for (let i = 0; i < n; i++) subs.push(tagOnly(i));
      t0 = performance.now();
      gpu.addMany(subs);
      await gpu.match(events[0]);
      const gLoadS = (performance.now() - t0) / 1000;
      subs.length = 0;
      for (let j = 0; j < 200; j++) await gpu.match(events[j]);
      const gLat: number[] = [];
      let gMismatches = 0;
      for (let j = 0; j < 1000; j++) {
        const s0 = performance.now();
        const got = await gpu.match(events[j]);
        gLat.push((performance.now() - s0) * 1000);
        if (got.map(Number).sort((x, y) => x - y).join(',') !== want[j]) gMismatches++;
      }
      const batchEps: number[] = [];
      for (let rep = 0; rep < 3; rep++) {
        const s0 = performance.now();
        for (let at = 0; at < events.length; at += 1000) {
          const got = await gpu.matchBatch(events.slice(at, at + 1000));
          for (let j = 0; j < got.length; j++) if (got[j].map(Number).sort((x, y) => x - y).join(',') !== want[at + j]) gMismatches++;
        }
        batchEps.push(events.length / ((performance.now() - s0) / 1000));
      }
      const st = gpu.stats().extra!;
      doc.matcher.gpu = {
        loadS: gLoadS,
        loneUs: summarize(gLat),
        batchEventsPerS: summarize(batchEps),
        gpuBytesPerFilter: Number(st.gpuBytesPerFilter),
        stateBytesPerFilter: Number(st.stateBytesPerFilter),
        cpuEvents: Number(st.cpuEvents),
        mismatches: gMismatches,
      };
      const g = doc.matcher.gpu;
      note(`matcher: GPU engine loaded ${count(n)} in ${sig(gLoadS)} s; ${sig(g.stateBytesPerFilter)} state bytes a tag-only filter (${sig(g.gpuBytesPerFilter)} with buffer headroom and batch scratch); lone event ${sig(g.loneUs.median)} µs median, ${sig(g.loneUs.p99)} µs p99; batches of 1000: ${sig(g.batchEventsPerS.median)} events/s; ${g.mismatches} answers differed; ${g.cpuEvents} events answered on the CPU`);
      await gpu.close();
      save();
    }
  }

  const sorted = [...fractions].sort((x, y) => x - y);
  for (const f of sorted) {
    const n = Math.max(1, Math.round(sets * f));
    const { db, keys } = view(w, Math.min(n, generated));
    const queries = tagQueries(w, n, nQueries, seed + Math.round(f * 1000), 2, 4);
    if (exportDir !== undefined && f === sorted[sorted.length - 1]) exportPart(exportDir, db, keys, queries);
    t0 = performance.now();
    const cpu = TagSetIndex.load(db, keys, undefined, { shared: true });
    const cpuMs = performance.now() - t0;
    t0 = performance.now();
    const gpu = await GpuTagIndex.build(ctx, cpu, { batch, leafSize: leaf });
    const gpuMs = performance.now() - t0;
    const st = gpu.stats();
    note(`${f * 100}%: ${count(n)} entries, ${count(st.sets)} distinct sets; CPU index ${sig(cpuMs / 1000)} s, GPU index ${sig(gpuMs / 1000)} s (signatures ${sig(st.buildMs.signatures / 1000)}, partitioning ${sig(st.buildMs.partitioning / 1000)}, masks ${sig(st.buildMs.masks / 1000)}, upload ${sig(st.buildMs.upload / 1000)}); ${st.partitions} partitions`);
    // Exactness first: the GPU's answers are the CPU index's.
    const qc = slice(queries, Math.min(check, nQueries));
    let mismatches = 0;
    for (const unique of [false, true]) {
      const g = sortedLists(await gpu.matchAll(qc, unique));
      const c = sortedLists(cpu.matchAll(qc, unique));
      for (let j = 0; j < c.length; j++) if (g[j] !== c[j]) mismatches++;
    }
    if (mismatches > 0) note(`  ${mismatches} queries answered differently by the GPU and CPU indexes`);
    await gpu.matchAll(slice(queries, Math.min(nQueries, 4 * batch)), false); // warm-up
    const before = gpu.stats();
    const gpuOps: OpResult[] = [];
    for (const unique of [false, true]) {
      const t = await timeOp(() => gpu.matchAll(queries, unique), nQueries, reps);
      gpuOps.push({ op: unique ? 'match-unique' : 'match', qps: t.qps, keysPerQuery: t.keys });
    }
    const after = gpu.stats();
    const measured = 2 * reps * nQueries;
    const cq = slice(queries, Math.min(cpuQueries, nQueries));
    const cpuOps: OpResult[] = [];
    cpu.matchAll(slice(queries, Math.min(nQueries, 500)), false); // warm-up
    for (const unique of [false, true]) {
      const t = await timeOp(() => cpu.matchAll(cq, unique), cq.offsets.length - 1, reps);
      cpuOps.push({ op: unique ? 'match-unique' : 'match', qps: t.qps, keysPerQuery: t.keys });
    }
    const part: PartResult = {
      fraction: f,
      entries: n,
      sets: st.sets,
      buildMs: { cpuIndex: cpuMs, gpuIndex: gpuMs, gpu: st.buildMs },
      partitions: st.partitions,
      largestPartition: st.largestPartition,
      gpuBytesPerSet: st.gpuBytes / Math.max(1, st.sets),
      cpuIndexBytesPerEntry: cpu.stats().memoryBytes / n,
      rssGiB: gib(process.memoryUsage().rss),
      checked: qc.offsets.length - 1,
      mismatches,
      gpu: gpuOps,
      cpu: cpuOps,
      visitsPerQuery: (after.visits - before.visits) / measured,
      falseHitsPerQuery: (after.falseHits - before.falseHits) / measured,
      hostUsPerQuery: perQueryUs(before, after, measured),
    };
    doc.parts.push(part);
    note(
      `  GPU match ${sig(gpuOps[0].qps.median)} q/s, match-unique ${sig(gpuOps[1].qps.median)} q/s (${sig(gpuOps[0].keysPerQuery)} keys a query; ${sig(part.visitsPerQuery)} partitions visited a query); CPU index ${sig(cpuOps[0].qps.median)} / ${sig(cpuOps[1].qps.median)} q/s`,
    );
    note(
      `  host per query: prepare ${sig(part.hostUsPerQuery.prepare)} µs, verify ${sig(part.hostUsPerQuery.verify)} µs, waiting for the GPU ${sig(part.hostUsPerQuery.wait)} µs (batches overlap: waits include those ahead)`,
    );
    save();

    if (f === sorted[0]) {
      for (const mp of partitionSweep) {
        const g = await GpuTagIndex.build(ctx, cpu, { batch, maxPartition: mp, leafSize: leaf });
        await g.matchAll(slice(queries, Math.min(nQueries, 4 * batch)), true);
        const t = await timeOp(() => g.matchAll(queries, true), nQueries, reps);
        const s = g.stats();
        doc.partitionSweep.push({ maxPartition: mp, partitions: s.partitions, buildMs: s.buildMs.partitioning, qps: t.qps });
        note(`  maxPartition ${count(mp)}: ${s.partitions} partitions, match-unique ${sig(t.qps.median)} q/s`);
        g.destroy();
      }
      for (const ls of leafSweep) {
        const g = await GpuTagIndex.build(ctx, cpu, { batch, leafSize: ls });
        await g.matchAll(slice(queries, Math.min(nQueries, 4 * batch)), true);
        const s0 = g.stats();
        const t = await timeOp(() => g.matchAll(queries, true), nQueries, reps);
        const s = g.stats();
        const hostUsPerQuery = perQueryUs(s0, s, reps * nQueries);
        doc.leafSweep.push({ leafSize: ls, blocks: s.blocks, qps: t.qps, hostUsPerQuery });
        note(`  leafSize ${count(ls)}: match-unique ${sig(t.qps.median)} q/s (host per query: prepare ${sig(hostUsPerQuery.prepare)} µs, verify ${sig(hostUsPerQuery.verify)} µs, wait ${sig(hostUsPerQuery.wait)} µs)`);
        g.destroy();
      }
      save();
    }
    if (f === sorted[sorted.length - 1]) {
      for (const b of batchSweep.filter((x) => x <= nQueries)) {
        // One batch at a time: a batch's latency from its first query's arrival to its answers.
        const lat: number[] = [];
        const rounds = Math.max(5, Math.min(200, Math.floor(nQueries / b)));
        for (let k = 0; k < rounds + 2; k++) {
          const from = (k * b) % Math.max(1, nQueries - b);
          const q: TagSetsView = { offsets: queries.offsets.subarray(from, from + b + 1), tags: queries.tags };
          const s0 = performance.now();
          await gpu.matchAll(q, true, b);
          if (k >= 2) lat.push(performance.now() - s0);
        }
        const latencyMs = summarize(lat);
        doc.latency.push({ batch: b, latencyMs, qps: b / (latencyMs.median / 1000) });
        note(`  batch ${b}: latency median ${sig(latencyMs.median)} ms, p99 ${sig(latencyMs.p99)} ms (one batch at a time: ${sig(b / (latencyMs.median / 1000))} q/s)`);
      }
      save();
      for (const v of verifySweep) {
        const g = await GpuTagIndex.build(ctx, cpu, { batch, leafSize: leaf, verifyThreads: v });
        await g.matchAll(slice(queries, Math.min(nQueries, 4 * batch)), false);
        const m = await timeOp(() => g.matchAll(queries, false), nQueries, reps);
        const u = await timeOp(() => g.matchAll(queries, true), nQueries, reps);
        doc.verifySweep.push({ verifyThreads: v, match: m.qps, unique: u.qps });
        note(`  verifyThreads ${v}: match ${sig(m.qps.median)} q/s, match-unique ${sig(u.qps.median)} q/s`);
        g.destroy();
      }
      save();
      for (const timeoutMs of timeoutSweep) {
        for (const rate of rateSweep) {
          const point = await underLoad(gpu, queries, batch, timeoutMs, rate);
          doc.batching.push({ timeoutMs, offered: rate, ...point });
          note(`  timeout ${timeoutMs} ms, ${count(rate)} q/s offered: ${count(Math.round(point.answered))} q/s answered, latency median ${sig(point.latencyMs.median)} ms, p99 ${sig(point.latencyMs.p99)} ms; ${point.batches} batches, ${point.byTimeout} sent by the timeout`);
        }
      }
      save();
    }
    gpu.destroy();
  }

  // Tables and a plot.
  const rows = doc.parts.map((p) => [
    `${p.fraction * 100}%`, count(p.entries), count(p.sets), String(p.partitions),
    sig(p.gpu[0].qps.median), sig(p.gpu[1].qps.median), sig(p.cpu[0].qps.median), sig(p.cpu[1].qps.median),
    sig(p.gpu[0].keysPerQuery), sig(p.gpuBytesPerSet), String(p.mismatches),
  ]);
  process.stdout.write(`\n${table(['part', 'entries', 'sets', 'partitions', 'GPU match q/s', 'GPU unique q/s', 'CPU match q/s', 'CPU unique q/s', 'keys/query', 'GPU B/set', 'mismatches'], rows)}\n`);
  const svg = linePlot({
    title: `Subset matching throughput vs database size (${adapter})`,
    xLabel: 'database entries (set, key)',
    yLabel: 'queries / s',
    logY: true,
    series: [
      { name: 'GPU match', color: '#2ca02c', marker: 'circle', points: doc.parts.map((p) => [p.entries, p.gpu[0].qps.median] as const) },
      { name: 'GPU match-unique', color: '#2ca02c', dash: '7 4', marker: 'square', points: doc.parts.map((p) => [p.entries, p.gpu[1].qps.median] as const) },
      { name: 'CPU index match', color: '#1f77b4', marker: 'circle', points: doc.parts.map((p) => [p.entries, p.cpu[0].qps.median] as const) },
      { name: 'CPU index match-unique', color: '#1f77b4', dash: '7 4', marker: 'square', points: doc.parts.map((p) => [p.entries, p.cpu[1].qps.median] as const) },
    ],
    xFormat: (x) => count(x),
  });
  const svgPath = run.path.replace(/\.json$/, '') + '-throughput.svg';
  writeFileSync(svgPath, svg);
  save();
  note(`wrote ${run.shown} and ${path.relative(process.cwd(), svgPath)}`);
  await ctx.close();
}

runMain('tagmatch', main);
