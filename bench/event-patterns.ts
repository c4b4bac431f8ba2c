/**
 * `npm run bench:patterns`: pattern subscriptions on the GTrex thesis's workload (§4.3, rule R2:
 * `C(att=$x) and last B(att=$x) within W from C and last A(att=$x) within W from B`, with
 * `att1 = Sum(A(att=$x).value within W from B)`; 100k events spread evenly over the rule's event
 * types, a window no event leaves, so each column holds about 33k events), then the thesis's
 * sweeps: states, values per parameter, rules, negations, consuming; each with `last` and `each`.
 *
 * Measured: the time of each release (the engine's work for one event; a terminator's search is in
 * its release), as events/s over the stream and min/median/p99 per event and per terminator.
 * Before timing, each scenario's matches on a prefix of the stream are compared with the reference
 * sequencer's (`--check` events). `--trex <binary>` runs T-Rex's CPU engine on the same stream
 * (bench/trex/: a driver built against TRex2-lib) and compares its complex events with ours.
 * `--through-matcher` also times one scenario end to end through PatternMatcher with the fast
 * engine matching the elements' filters. `--gpu` runs the GPU sequencer (GTrex, gtrex.ts) on the
 * same stream in batches of each `--gpu-batches` size, its matches compared with the CDP's on the
 * whole stream.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { CdpSequencer } from '../src/engines/event-patterns/cdp.js';
import { PatternMatcher, type TimedInput } from '../src/engines/event-patterns/pattern-matcher.js';
import { ReferenceSequencer } from '../src/engines/event-patterns/reference.js';
import type { PatternHits, PatternMatch, Sequencer } from '../src/engines/event-patterns/sequencer.js';
import { FastMatcher } from '../src/engines/fast.js';
import { GpuContext } from '../src/engines/gpu/device.js';
import { type BatchRelease, GtrexSequencer } from '../src/engines/gpu/gtrex.js';
import { DEFAULT_PATTERN_LIMITS, type EventPattern, type Selection, validateEventPattern } from '../src/model/event-patterns.js';
import { DEFAULT_LIMITS, type NEvent, validateEvent } from '../src/model/limits.js';
import { Prng } from '../src/workload/prng.js';
import { cliFail, readCommandLine, runMain } from './lib/args.js';
import { count, sig, table } from './lib/format.js';
import { describeMachine } from './lib/machine.js';
import { note } from './lib/progress.js';
import { ResultRun } from './lib/result-file.js';
import { type Summary, summarize } from './lib/stats.js';

const HELP = `usage: npm run bench:patterns -- [options]
  --events N          events in the stream (default 100k; --quick 20k)
  --values V          values of the parameter attribute att (default 50k)
  --window W          every window in ms; events are 1 ms apart (default 1000000: none leaves)
  --selections L      selections to run every scenario with (default last,each)
  --states L          the states sweep (default 2,3,4,5; "none" skips)
  --values-sweep L    the values sweep (default 1k,10k,100k)
  --rules L           the rules sweep (default 10,50,100,500)
  --negations L       the negations sweep (default 1,2)
  --consume           add the consuming scenario (default on; --no-consume to skip)
  --no-basic          skip the basic rules without parameters (run with last and first only)
  --scenarios L       run only the scenarios of these names (e.g. "base,no parameters")
  --reps N            timed passes per scenario (default 3)
  --check N           events checked against the reference before timing (default 3000)
  --trex PATH         T-Rex driver binary (bench/trex/build.sh): run it on the same streams
  --trex-timeout S    give up on a T-Rex run after S seconds (default 300)
  --through-matcher   also time the base scenario through PatternMatcher + the fast engine
  --gpu               also run the GPU sequencer (GTrex) on every scenario's stream
  --gpu-batches L     releases a GPU batch, one run each (default 1000,10000,100000)
  --gpu-software      accept a software adapter (llvmpipe: for correctness, not speed)
  --gpu-page-bytes B  the GPU sequencer's pool in pages of B bytes (default: a storage binding), to time a pool of several
  --seed N            stream seed (default 1)
  --out FILE          JSON result (default bench/results/event-patterns.json)`;

interface Scenario {
  name: string;
  states: number;
  values: number;
  rules: number;
  negations: number;
  negationParams: boolean;
  /** The steps tied by att = $x (R2); false: the thesis's basic rules (§4.12), no parameter between steps. */
  stateParams: boolean;
  consume: boolean;
  selection: Selection;
}

interface Stream {
  /** Per event: type index (rule r's type j is r * typesPerRule + j), att, value. */
  type: Int32Array;
  att: Int32Array;
  value: Int32Array;
  events: NEvent[];
  typesPerRule: number;
}

function makeStream(s: Scenario, n: number, seed: number): Stream {
  const r = new Prng(seed);
  const typesPerRule = s.states + s.negations;
  const nTypes = typesPerRule * s.rules;
  const type = new Int32Array(n);
  const att = new Int32Array(n);
  const value = new Int32Array(n);
  const events: NEvent[] = new Array(n);
  for (let i = 0; i < n; i++) {
    type[i] = r.int(0, nTypes - 1);
    att[i] = r.int(1, s.values);
    value[i] = r.int(1, 10);
    events[i] = validateEvent({ id: `e${i}`, lat: 0, lon: 0, attributes: { type: type[i], att: att[i], value: value[i] } }, DEFAULT_LIMITS);
  }
  return { type, att, value, events, typesPerRule };
}

/** The scenario's rule in Ambit's terms: the thesis's R2 family. */
function rulePattern(s: Scenario, rule: number): EventPattern {
  const t = (j: number) => ({ constraints: [{ name: 'type', op: 'eq' as const, value: rule * (s.states + s.negations) + j }] });
  const names = Array.from({ length: s.states }, (_, i) => `s${i}`);
  const p: EventPattern = {
    steps: names.map((name, i) => (i === 0 ? { name, filter: t(0) } : { name, filter: t(i), selection: s.selection, withinMs: WINDOW })),
    parameters: s.stateParams ? names.slice(1).map((name, i) => ({ left: { step: name, attribute: 'att' }, op: 'eq' as const, right: { step: names[i], attribute: 'att' } })) : [],
    negations: Array.from({ length: s.negations }, (_, j) => ({
      filter: t(s.states + j),
      between: [names[0], names[1]] as [string, string],
      parameters: s.negationParams ? [{ attribute: 'att', op: 'eq' as const, step: names[0], stepAttribute: 'att' }] : [],
    })),
    aggregates:
      s.states >= 2
        ? [{
            name: 'att1', fn: 'sum', attribute: 'value', filter: t(s.states - 1), before: names[s.states - 2], withinMs: WINDOW,
            parameters: [{ attribute: 'att', op: 'eq', step: names[s.states - 2], stepAttribute: 'att' }],
          }]
        : [],
    consuming: s.consume ? [names[s.states - 1]] : [],
  };
  return p;
}

let WINDOW = 1_000_000;
let TREX_TIMEOUT_MS = 300_000;
/** The GPU sequencer's pool page (--gpu-page-bytes); undefined: a storage binding. */
let GPU_PAGE_BYTES: number | undefined;

/** The elements each event type hits: its step or negation, and for the last step's type also the aggregate. */
function hitsOf(s: Scenario, st: Stream): PatternHits[][] {
  const byType: PatternHits[][] = [];
  for (let rule = 0; rule < s.rules; rule++) {
    for (let j = 0; j < st.typesPerRule; j++) {
      const elements = j === s.states - 1 && s.states >= 2 ? [j, s.states + s.negations] : [j];
      byType[rule * st.typesPerRule + j] = [{ slot: rule, elements }];
    }
  }
  return byType;
}

function install(seq: Pick<Sequencer, 'addPattern'>, s: Scenario): void {
  for (let rule = 0; rule < s.rules; rule++) seq.addPattern(rule, validateEventPattern('pattern', rulePattern(s, rule), DEFAULT_LIMITS, DEFAULT_PATTERN_LIMITS));
}

const matchKey = (m: PatternMatch): string => `${m.slot}:${m.events[0].id}:${m.events.map((e) => e.id).join(',')}:${m.aggregates.join(',')}`;

function runSequencer(seq: Sequencer, s: Scenario, st: Stream, n: number, times: Float64Array | null, keys: string[] | null): { matches: number; terminators: number[] } {
  install(seq, s);
  const byType = hitsOf(s, st);
  let matches = 0;
  const terminators: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = times === null ? 0 : performance.now();
    const out = seq.release(st.events[i], i, byType[st.type[i]]);
    if (times !== null) times[i] = performance.now() - t0;
    matches += out.length;
    if (keys !== null) for (const m of out) keys.push(matchKey(m));
    if (st.type[i] % st.typesPerRule === 0) terminators.push(i);
  }
  return { matches, terminators };
}

interface GpuResult {
  batch: number;
  matches: number;
  /** Every match of the whole stream equal to the CDP's (same releases, same order). */
  equal: boolean;
  eventsPerS: Summary;
  /** One releaseBatch call, ms. */
  perBatchMs: Summary;
  /** Median events/s over the CDP's median. */
  vsCdp: number;
  reruns: number;
  /** Pages (storage bindings) the pool spanned at the end of the last pass. */
  poolPages: number;
  /** The last pass's time by phase (GtrexStats.phasesMs), ms. */
  phasesMs: Record<string, number>;
}

/** The GPU sequencer on one scenario's stream, in batches of `size`; `want` is the CDP's matches per release. */
async function gpuRun(ctx: GpuContext, s: Scenario, st: Stream, n: number, size: number, reps: number, want: readonly string[][]): Promise<Omit<GpuResult, 'vsCdp'>> {
  const byType = hitsOf(s, st);
  const batches: BatchRelease[][] = [];
  for (let i = 0; i < n; i += size) {
    const b: BatchRelease[] = [];
    for (let j = i; j < Math.min(n, i + size); j++) b.push({ event: st.events[j], timeMs: j, hits: byType[st.type[j]] });
    batches.push(b);
  }
  const rates: number[] = [];
  const perBatch: number[] = [];
  let matches = 0;
  let equal = true;
  let reruns = 0;
  let poolPages = 0;
  let phasesMs: Record<string, number> = {};
  for (let rep = 0; rep < reps; rep++) {
    const seq = await GtrexSequencer.create({ ctx, maxRetainedPerElement: n, pageBytes: GPU_PAGE_BYTES });
    install(seq, s);
    matches = 0;
    let at = 0;
    const t0 = performance.now();
    for (const b of batches) {
      const t1 = performance.now();
      const out = await seq.releaseBatch(b);
      perBatch.push(performance.now() - t1);
      if (rep === 0) {
        // Checked on the first pass only (outside no timing: the CDP's keys were made before).
        for (let j = 0; j < out.length; j++) {
          const got = out[j].map(matchKey);
          const w = want[at + j];
          if (got.length !== w.length || got.some((k, q) => k !== w[q])) equal = false;
        }
      }
      at += b.length;
      for (const o of out) matches += o.length;
    }
    rates.push(n / ((performance.now() - t0) / 1000));
    reruns = seq.stats().reruns;
    poolPages = seq.stats().poolPages;
    phasesMs = seq.stats().phasesMs;
    await seq.close();
  }
  return { batch: size, matches, equal, eventsPerS: summarize(rates), perBatchMs: summarize(perBatch), reruns, poolPages, phasesMs };
}

interface ScenarioResult {
  scenario: Scenario;
  events: number;
  matches: number;
  /** Matches per terminator's pattern over the prefix checked, equal to the reference's. */
  checked: { events: number; matches: number; equal: boolean };
  eventsPerS: Summary;
  perEventUs: Summary;
  perTerminatorUs: Summary;
  /** The GPU sequencer, one entry a batch size. */
  gpu: GpuResult[];
  trex: null | { complexEvents: number; equal: boolean | null; eventsPerS: number; perEventUs: Record<string, number>; perTerminatorUs?: Record<string, number>; note?: string };
}

function trexRun(bin: string, s: Scenario, st: Stream, n: number, dir: string): { json: Record<string, unknown>; ces: string[] } {
  const file = path.join(dir, 'stream.txt');
  const lines = ['# ambit-pattern-stream v1'];
  for (let i = 0; i < n; i++) lines.push(`${st.type[i]} ${i} ${st.att[i]} ${st.value[i]}`);
  writeFileSync(file, `${lines.join('\n')}\n`);
  // T-Rex's windows are open (t_ref - W < t < t_ref); ours include t_ref - W (E7): with integer
  // times, W + 1 there is W here. The engine runs in the calling thread (--engine direct): its
  // worker-thread hand-off would add 10-15 µs an event that is not matching work.
  const args = [file, '--engine', 'direct', '--states', String(s.states), '--selection', s.selection, '--window', String(WINDOW + 1), '--aggregate', 'sum', '--negations', String(s.negations), '--negation-params', s.negationParams ? '1' : '0', '--state-params', s.stateParams ? '1' : '0', '--consume', s.consume ? '1' : '0'];
  const out = execFileSync(bin, args, { encoding: 'utf8', maxBuffer: 1 << 30, timeout: TREX_TIMEOUT_MS });
  const ces: string[] = [];
  let json: Record<string, unknown> = {};
  for (const line of out.split('\n')) {
    if (line.startsWith('ce ')) ces.push(line.slice(3).trim());
    else if (line.startsWith('{')) json = JSON.parse(line) as Record<string, unknown>;
  }
  return { json, ces };
}

async function main(): Promise<void> {
  const fail = cliFail('event-patterns', HELP);
  const cl = readCommandLine(process.argv.slice(2), new Set(['quick', 'help', 'consume', 'no-consume', 'no-basic', 'through-matcher', 'gpu', 'gpu-software']), new Set(['events', 'values', 'window', 'selections', 'states', 'values-sweep', 'rules', 'negations', 'reps', 'check', 'scenarios', 'trex', 'trex-timeout', 'seed', 'out', 'gpu-batches', 'gpu-page-bytes']), fail, HELP);
  if (cl === null) return;
  const { a, r } = cl;
  const quick = r.flag('quick');
  const nEvents = r.count('events', quick ? 20_000 : 100_000);
  const values = r.count('values', 50_000);
  WINDOW = r.count('window', 1_000_000);
  const selections = (r.list('selections') ?? ['last', 'each']).map((x) => (['each', 'last', 'first'].includes(x) ? (x as Selection) : fail(`--selections: ${x} is not each, last or first`)));
  const sweep = (key: string, fallback: number[]): number[] => (r.list(key)?.join() === 'none' ? [] : r.counts(key, fallback));
  const statesSweep = sweep('states', [2, 3, 4, 5]);
  const valuesSweep = sweep('values-sweep', [1000, 10_000, 100_000]);
  const rulesSweep = sweep('rules', quick ? [10, 100] : [10, 50, 100, 500]);
  const negSweep = sweep('negations', [1, 2]);
  const consume = !r.flag('no-consume');
  const basic = !r.flag('no-basic');
  const reps = r.int('reps', 3, 1, 100);
  const check = r.count('check', 3000);
  const seed = r.int('seed', 1, 0, 2 ** 32 - 1);
  const trex = r.str('trex');
  TREX_TIMEOUT_MS = r.int('trex-timeout', 300, 1) * 1000;
  GPU_PAGE_BYTES = r.str('gpu-page-bytes') === undefined ? undefined : r.int('gpu-page-bytes', 0, 4096, 2 ** 31);
  const gpuBatches = r.flag('gpu') ? r.counts('gpu-batches', [1000, 10_000, 100_000]) : [];
  const run = new ResultRun({ out: a.out, defaultFile: 'bench/results/event-patterns.json', fail });
  const ctx = gpuBatches.length > 0 ? await GpuContext.open({ allowSoftware: r.flag('gpu-software') }) : null;
  if (ctx !== null) note(`GPU: ${ctx.adapterInfo.device} (${ctx.adapterInfo.backend}${ctx.isSoftware ? ', software' : ''})`);
  note(`machine: ${describeMachine(run.machine)}`);
  note(`stream: ${count(nEvents)} events 1 ms apart, att in [1, ${count(values)}], windows ${count(WINDOW)} ms; ${reps} timed passes a scenario${trex ? `; T-Rex driver ${trex}` : ''}`);

  const base: Omit<Scenario, 'selection' | 'name'> = { states: 3, values, rules: 1, negations: 0, negationParams: true, stateParams: true, consume: false };
  const scenarios: Scenario[] = [];
  for (const selection of selections) {
    scenarios.push({ name: 'base', ...base, selection });
    for (const k of statesSweep) if (k !== 3) scenarios.push({ name: `states=${k}`, ...base, states: k, selection });
    for (const v of valuesSweep) if (v !== values) scenarios.push({ name: `values=${v}`, ...base, values: v, selection });
    for (const n of rulesSweep) if (n !== 1) scenarios.push({ name: `rules=${n}`, ...base, rules: n, selection });
    for (const n of negSweep) {
      scenarios.push({ name: `negations=${n}`, ...base, negations: n, selection });
      scenarios.push({ name: `negations=${n} without parameter`, ...base, negations: n, negationParams: false, selection });
    }
    if (consume) scenarios.push({ name: 'consuming', ...base, consume: true, selection });
    // The thesis's basic rules (§4.12): no parameter between steps, single selection only (with
    // each every B before a C pairs with every A before it: billions of matches).
    if (basic && selection !== 'each') scenarios.push({ name: 'no parameters', ...base, stateParams: false, selection });
  }

  const only = r.list('scenarios');
  if (only !== undefined) {
    const names = new Set(scenarios.map((x) => x.name));
    for (const n of only) if (!names.has(n)) fail(`--scenarios: no scenario ${JSON.stringify(n)} (there are: ${[...names].join(', ')})`);
    const keep = scenarios.filter((x) => only.includes(x.name));
    scenarios.length = 0;
    scenarios.push(...keep);
  }

  const doc = {
    benchmark: 'event-patterns',
    startedAt: run.startedAt.toISOString(),
    command: run.command,
    machine: run.machine,
    parameters: { events: nEvents, values, window: WINDOW, selections, reps, check, seed, trex: trex ?? null, gpuBatches, gpuPageBytes: GPU_PAGE_BYTES ?? null },
    gpu: ctx === null ? null : { ...ctx.adapterInfo, software: ctx.isSoftware },
    scenarios: [] as ScenarioResult[],
    throughMatcher: null as null | { selection: Selection; eventsPerS: Summary; matches: number; sequencerOnlyEventsPerS: number },
  };
  const dir = mkdtempSync(path.join(tmpdir(), 'ambit-patterns-'));
  const rows: string[][] = [];
  try {
    for (const s of scenarios) {
      const st = makeStream(s, nEvents, seed);
      // Answers first: the prefix against the reference, every match compared.
      const nc = Math.min(check, nEvents);
      const want: string[] = [];
      const got: string[] = [];
      runSequencer(new ReferenceSequencer({ maxRetainedPerElement: nEvents }), s, st, nc, null, want);
      runSequencer(new CdpSequencer({ maxRetainedPerElement: nEvents }), s, st, nc, null, got);
      want.sort();
      got.sort();
      const equal = want.length === got.length && want.every((k, i) => k === got[i]);
      if (!equal) note(`  ${s.name} (${s.selection}): MISMATCH against the reference on ${nc} events (${got.length} vs ${want.length} matches)`);

      const rates: number[] = [];
      let times = new Float64Array(nEvents);
      let res = { matches: 0, terminators: [] as number[] };
      for (let rep = 0; rep < reps; rep++) {
        times = new Float64Array(nEvents);
        const t0 = performance.now();
        res = runSequencer(new CdpSequencer({ maxRetainedPerElement: nEvents }), s, st, nEvents, times, null);
        rates.push(nEvents / ((performance.now() - t0) / 1000));
      }
      const termTimes = res.terminators.map((i) => times[i]);
      const result: ScenarioResult = {
        scenario: s,
        events: nEvents,
        matches: res.matches,
        checked: { events: nc, matches: want.length, equal },
        eventsPerS: summarize(rates),
        perEventUs: summarize(times, 1000),
        perTerminatorUs: summarize(termTimes, 1000),
        gpu: [],
        trex: null,
      };
      if (ctx !== null) {
        const wantAll: string[][] = [];
        const cdp = new CdpSequencer({ maxRetainedPerElement: nEvents });
        install(cdp, s);
        const byType = hitsOf(s, st);
        for (let i = 0; i < nEvents; i++) wantAll.push(cdp.release(st.events[i], i, byType[st.type[i]]).map(matchKey));
        for (const size of gpuBatches) {
          const g = await gpuRun(ctx, s, st, nEvents, size, reps, wantAll);
          const res1 = { ...g, vsCdp: g.eventsPerS.median / result.eventsPerS.median };
          result.gpu.push(res1);
          note(`  ${s.name} (${s.selection}) GPU, batches of ${count(size)}: ${count(Math.round(g.eventsPerS.median))} events/s (${sig(res1.vsCdp)}x the CDP), batch median ${sig(g.perBatchMs.median)} ms, p99 ${sig(g.perBatchMs.p99)} ms, ${g.equal ? 'equal to the CDP' : 'MISMATCH against the CDP'}, pool in ${g.poolPages} page${g.poolPages === 1 ? '' : 's'}; last pass ms: ${Object.entries(g.phasesMs).map(([k, v]) => `${k} ${sig(v)}`).join(', ')}`);
        }
      }
      let trexOut: ReturnType<typeof trexRun> | null = null;
      if (trex !== undefined && s.rules === 1) {
        try {
          trexOut = trexRun(trex, s, st, nEvents, dir);
        } catch (err) {
          // A run past --trex-timeout (T-Rex rescans every window for every complex event).
          result.trex = { complexEvents: NaN, equal: null, eventsPerS: NaN, perEventUs: {}, note: `did not finish: ${(err as Error).message.split('\n')[0]}` };
          note(`  ${s.name} (${s.selection}): T-Rex ${result.trex.note}`);
        }
      }
      if (trexOut !== null) {
        const { json, ces } = trexOut;
        // Ours as the driver prints them: the terminator's index and the aggregate, sorted.
        const ours: string[] = [];
        const seq = new CdpSequencer({ maxRetainedPerElement: nEvents });
        install(seq, s);
        const byType = hitsOf(s, st);
        for (let i = 0; i < nEvents; i++) for (const m of seq.release(st.events[i], i, byType[st.type[i]])) ours.push(`${i} ${m.aggregates.length > 0 ? m.aggregates[0] : '-'}`);
        ours.sort();
        ces.sort();
        const same = ours.length === ces.length && ours.every((k, i) => k === ces[i]);
        const per = (json.perEventUs ?? {}) as Record<string, number>;
        const totalMs = Number(json.totalMs);
        result.trex = {
          complexEvents: ces.length,
          equal: same,
          eventsPerS: nEvents / (totalMs / 1000),
          perEventUs: per,
          perTerminatorUs: json.perTerminatorUs as Record<string, number> | undefined,
        };
        if (!same) note(`  ${s.name} (${s.selection}): T-Rex gave ${ces.length} complex events, ours ${ours.length}; they differ`);
      }
      doc.scenarios.push(result);
      run.write(doc);
      rows.push([
        s.name,
        s.selection,
        count(res.matches),
        equal ? 'yes' : 'NO',
        count(Math.round(result.eventsPerS.median)),
        sig(result.perEventUs.median),
        sig(result.perEventUs.p99),
        sig(result.perTerminatorUs.median),
        sig(result.perTerminatorUs.p99),
        result.trex === null ? '-' : result.trex.note !== undefined ? 'timed out' : count(Math.round(result.trex.eventsPerS)),
        result.trex === null || result.trex.note !== undefined ? '-' : result.trex.equal ? 'yes' : 'NO',
        result.trex === null || result.trex.note !== undefined ? '-' : `${sig(result.eventsPerS.median / result.trex.eventsPerS)}x`,
      ]);
      note(`  ${s.name} (${s.selection}): ${count(res.matches)} matches, ${count(Math.round(result.eventsPerS.median))} events/s, terminator p99 ${sig(result.perTerminatorUs.p99)} µs`);
    }

    if (r.flag('through-matcher')) {
      // End to end: the elements' filters matched by the fast engine, then the same search.
      const s: Scenario = { name: 'base', ...base, selection: selections[0] };
      const st = makeStream(s, nEvents, seed);
      const input: TimedInput[] = st.events.map((_, i) => ({ timeMs: i, event: { id: `e${i}`, lat: 0, lon: 0, attributes: { type: st.type[i], att: st.att[i], value: st.value[i] } } }));
      const rates: number[] = [];
      let matches = 0;
      for (let rep = 0; rep < reps; rep++) {
        const pm = new PatternMatcher({ elements: new FastMatcher(), maxRetainedPerElement: nEvents });
        for (let rule = 0; rule < s.rules; rule++) pm.add({ id: `r${rule}`, owner: 'd', pattern: rulePattern(s, rule) });
        const t0 = performance.now();
        matches = 0;
        for (let i = 0; i < nEvents; i += 256) matches += (await pm.publish(input.slice(i, i + 256))).length;
        rates.push(nEvents / ((performance.now() - t0) / 1000));
        await pm.close();
      }
      const baseRes = doc.scenarios.find((x) => x.scenario.name === 'base' && x.scenario.selection === s.selection);
      doc.throughMatcher = { selection: s.selection, eventsPerS: summarize(rates), matches, sequencerOnlyEventsPerS: baseRes?.eventsPerS.median ?? NaN };
      note(`through PatternMatcher + fast engine (${s.selection}): ${count(Math.round(doc.throughMatcher.eventsPerS.median))} events/s, ${count(matches)} matches`);
      run.write(doc);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
    await ctx?.close();
  }
  process.stdout.write(`\n${table(['scenario', 'selection', 'matches', '= reference', 'events/s', 'µs/event median', 'p99', 'µs/terminator median', 'p99', 'T-Rex events/s', '= T-Rex', 'vs T-Rex'], rows)}\n`);
  note(`wrote ${run.shown}`);
}

runMain('event-patterns', main);
