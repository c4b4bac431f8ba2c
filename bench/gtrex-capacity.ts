/**
 * The GPU pattern sequencer holding columns larger than one storage binding: rule
 * `A(att = $x) and each B(att = $x) within W from A` (the window longer than the stream), B events
 * released in batches until the sequencer's pool has `--gib` GiB in use (each B stays in its
 * column: the retention bound is above the stream), then one terminator A for each of a few
 * values. The answers are known without another sequencer: a terminator of value v matches every
 * B of value v, the stream's count of them, among them the one B of that value that carries an id
 * of its own (the last of its value); every other B of a value is one shared event object, so the
 * host's copy holds no event per record. Prints the pool's pages and bytes, the load's rate, the
 * check batch's time and whether every answer was right; JSON.
 *
 *   node --max-old-space-size=32000 dist/bench/gtrex-capacity.js [--gib G] [--values V] [--batch N]
 *     [--check K] [--page-bytes B] [--software] [--out FILE]
 */
import { GpuContext } from '../src/engines/gpu/device.js';
import { type BatchRelease, GtrexSequencer } from '../src/engines/gpu/gtrex.js';
import type { PatternHits } from '../src/engines/event-patterns/sequencer.js';
import { DEFAULT_PATTERN_LIMITS, type EventPattern, validateEventPattern } from '../src/model/event-patterns.js';
import { DEFAULT_LIMITS, type NEvent, validateEvent } from '../src/model/limits.js';
import { cliFail, readCommandLine, runMain } from './lib/args.js';
import { count, sig } from './lib/format.js';
import { describeMachine } from './lib/machine.js';
import { note } from './lib/progress.js';
import { ResultRun } from './lib/result-file.js';

const HELP = `usage: node dist/bench/gtrex-capacity.js [--gib G] [--values V] [--batch N] [--check K] [--page-bytes B] [--software] [--out FILE]
  --gib G          pool bytes in use to reach, GiB (default 3: past one 2 GiB binding)
  --values V       values of att (default 1000)
  --batch N        B events a release batch (default 200000)
  --check K        values whose terminator is released at the end (default 4)
  --page-bytes B   the pool's page (default: a storage binding)
  --software       accept a software adapter (correctness only)
  --out FILE       JSON result (default bench/results/gtrex-capacity.json)`;

const WINDOW_MS = 2 ** 40;

async function main(): Promise<void> {
  const fail = cliFail('bench/gtrex-capacity', HELP);
  const cl = readCommandLine(process.argv.slice(2), new Set(['help', 'software']), new Set(['gib', 'values', 'batch', 'check', 'page-bytes', 'out']), fail, HELP);
  if (cl === null) return;
  const { a, r } = cl;
  const gib = r.num('gib', 3, 1e-6, 16);
  const values = r.int('values', 1000, 1, 1e6);
  const batchSize = r.int('batch', 200_000, 1, 1e7);
  const checkValues = r.int('check', 4, 1, values);
  const pageBytes = r.str('page-bytes') === undefined ? undefined : r.int('page-bytes', 0, 4096, 2 ** 31);
  const run = new ResultRun({ out: a.out, defaultFile: 'bench/results/gtrex-capacity.json', fail });
  const ctx = await GpuContext.open({ allowSoftware: r.flag('software') });
  note(`machine: ${describeMachine(run.machine)}`);
  note(`GPU: ${ctx.adapterInfo.device} (${ctx.adapterInfo.backend}${ctx.isSoftware ? ', software' : ''}); storage binding ${count(ctx.limits.maxStorageBufferBindingSize)} bytes`);
  const event = (id: string, type: number, att: number): NEvent => validateEvent({ id, lat: 0, lon: 0, attributes: { type, att } }, DEFAULT_LIMITS);
  const shared = Array.from({ length: values }, (_, v) => event(`b-${v + 1}`, 1, v + 1));
  const pattern: EventPattern = {
    steps: [
      { name: 'a', filter: { constraints: [{ name: 'type', op: 'eq', value: 0 }] } },
      { name: 'b', filter: { constraints: [{ name: 'type', op: 'eq', value: 1 }] }, selection: 'each', withinMs: WINDOW_MS },
    ],
    parameters: [{ left: { step: 'b', attribute: 'att' }, op: 'eq', right: { step: 'a', attribute: 'att' } }],
    negations: [],
    aggregates: [],
    consuming: [],
  };
  const target = gib * 2 ** 30;
  // Retention above anything the run can reach: every B stays.
  const seq = await GtrexSequencer.create({ ctx, maxRetainedPerElement: 2 ** 31, pageBytes });
  const result: Record<string, unknown> = { gib, values, batchSize, checkValues, pageBytes: pageBytes ?? null };
  try {
    seq.addPattern(0, validateEventPattern('pattern', pattern, DEFAULT_LIMITS, { ...DEFAULT_PATTERN_LIMITS, maxWindowMs: WINDOW_MS }));
    const hitB: PatternHits[] = [{ slot: 0, elements: [1] }];
    const hitA: PatternHits[] = [{ slot: 0, elements: [0] }];
    let released = 0;
    const t0 = performance.now();
    let lastNote = t0;
    const batch: BatchRelease[] = new Array(batchSize + 1);
    // A terminator of a value no B has ends each batch: its search (which finds nothing) is what
    // makes the sequencer write the batch's records to the GPU.
    const probe = event('a-none', 0, 0);
    let t = 0;
    // Until the pool holds the target; then one more round of `values` Bs, each with an id of its own.
    while (4 * seq.stats().poolUsed < target) {
      for (let j = 0; j < batchSize; j++, released++) batch[j] = { event: shared[released % values], timeMs: t++, hits: hitB };
      batch[batchSize] = { event: probe, timeMs: t++, hits: hitA };
      const out = await seq.releaseBatch(batch);
      if (out.some((m) => m.length > 0)) throw new Error('a release matched something before the terminators of the check');
      if (performance.now() - lastNote > 5000) {
        lastNote = performance.now();
        const s = seq.stats();
        note(`  ${count(released)} Bs released, pool ${sig((4 * s.poolUsed) / 2 ** 30)} GiB in use of ${sig((4 * s.poolWords) / 2 ** 30)} GiB in ${s.poolPages} page(s), ${s.rebuilds} rebuilds`);
      }
    }
    const own: BatchRelease[] = Array.from({ length: values }, (_, v) => ({ event: event(`last-${v + 1}`, 1, v + 1), timeMs: t++, hits: hitB }));
    await seq.releaseBatch(own);
    released += values;
    const loadS = (performance.now() - t0) / 1000;
    const s = seq.stats();
    note(`${count(released)} Bs in ${sig(loadS)} s (${count(Math.round(released / loadS))}/s): pool ${sig((4 * s.poolUsed) / 2 ** 30)} GiB in use of ${sig((4 * s.poolWords) / 2 ** 30)} GiB in ${s.poolPages} page(s), ${s.rebuilds} rebuilds, ${s.scatterPasses} scatter passes ahead of batches`);
    // The terminators: value v matches every B of value v (each), one of them last-v.
    const checks: BatchRelease[] = Array.from({ length: checkValues }, (_, k) => {
      const v = 1 + Math.floor((k * values) / checkValues);
      return { event: event(`a-${v}`, 0, v), timeMs: t++, hits: hitA };
    });
    const t1 = performance.now();
    const answers = await seq.releaseBatch(checks);
    const checkMs = performance.now() - t1;
    let right = true;
    const perValue: { value: number; want: number; got: number; ownFound: number }[] = [];
    for (let k = 0; k < checks.length; k++) {
      const v = checks[k].event.values[checks[k].event.names.indexOf('att')] as number;
      const want = Math.floor((released - values) / values) + ((released - values) % values >= v ? 1 : 0) + 1;
      const ms = answers[k];
      const wrongValue = ms.filter((m) => m.events[1].values[m.events[1].names.indexOf('att')] !== v).length;
      const ownFound = ms.filter((m) => m.events[1].id === `last-${v}`).length;
      perValue.push({ value: v, want, got: ms.length, ownFound });
      if (ms.length !== want || wrongValue !== 0 || ownFound !== 1) right = false;
      note(`  terminator att=${v}: ${count(ms.length)} matches (want ${count(want)}), ${wrongValue} of another value, last-${v} ${ownFound === 1 ? 'found once' : `found ${ownFound} times`}`);
    }
    note(`check batch: ${sig(checkMs)} ms; ${right ? 'every answer right' : 'WRONG ANSWERS'}`);
    Object.assign(result, { released, loadSeconds: loadS, poolBytesUsed: 4 * s.poolUsed, poolBytes: 4 * s.poolWords, poolPages: s.poolPages, rebuilds: s.rebuilds, scatterPasses: s.scatterPasses, checkMs, perValue, right });
    run.write({ kind: 'gtrex-capacity', startedAt: run.startedAt.toISOString(), machine: run.machine, command: run.command, gpu: { ...ctx.adapterInfo, software: ctx.isSoftware }, ...result });
    note(`results: ${run.shown}`);
    if (!right) process.exitCode = 1;
  } finally {
    await seq.close();
    await ctx.close();
  }
}

runMain('bench/gtrex-capacity', main);
