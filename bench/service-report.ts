/**
 * Builds the service result document from the JSON of bench/service.ts (`kind: 'service'`) and
 * bench/matcher-ingest.ts (`ambit-matcher-ingest/1`): bench/results/SERVICE-BENCHMARKS.md and
 * service-*.svg next to it. Nothing in them is typed by hand; rerun after adding or replacing a
 * JSON file.
 *
 *   node dist/bench/service-report.js [FILE.json ...] [--dir bench/results]
 *
 * Without files, every *.json in the directory is read and those of the two kinds are used (the
 * other result files are left to report.ts and gpu-report.ts).
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { parseReportArgs } from './lib/args.js';
import { RESULTS_DIR, readResultFile } from './lib/result-file.js';
import { count, mib, sig, table } from './lib/format.js';
import { type MachineInfo, describeMachine } from './lib/machine.js';
import type { BatchParams, LatencyParams, LatencyResult, RateResult, StreamParams } from './lib/service-load.js';
import type { Summary } from './lib/stats.js';
import { type BarGroup, axisFormat, barPlot } from './lib/svg-bars.js';
import { type ThroughputFile, type ThroughputRun, throughputSection } from './lib/throughput-report.js';
import { type StreamLocationsFile, type StreamsFile, streamLocationsSection, streamsSection } from './lib/stream-report.js';

const INGEST_SCHEMA = 'ambit-matcher-ingest/1';

/** The three targets. */
const LATENCY_P99_MS = 10;
const LATENCY_RATE = 1000;
const LATENCY_SUBS = 100_000;
const PER_CORE = 100_000;
const INGEST = 1_000_000;
/** bench/service.ts's default number of event kinds (a run with another value says so). */
const DEFAULT_KINDS = 100;

function fail(msg: string): never {
  process.stderr.write(`bench:service-report: ${msg}\n`);
  process.exit(1);
}

// ---- input shapes (bench/service.ts, bench/matcher-ingest.ts) ----

interface ServerStats {
  engine?: string;
  engineDetail?: string;
  mode?: string;
  subscriptions?: number;
  filters?: number;
  devices?: number;
  eventsPublished?: number;
  notifications?: number;
  notificationsDropped?: number;
  locationUpdates?: number;
  engineMemoryBytes?: number;
  uptimeSeconds?: number;
}

interface ServiceFile {
  kind: 'service';
  startedAt: string;
  seconds: number;
  quick: boolean;
  seed: number;
  engine: string;
  /** 'embedded' or 'redis' (absent in files written before bench/service.ts had --redis: embedded). */
  mode?: string;
  serverNodeArgs?: string[];
  /** Gateway processes sharing the port (absent in files from before the option: 1). */
  gateways?: number;
  machine: MachineInfo;
  loadAverage?: { before: number[] | number; after: number[] | number };
  results: {
    latencySetup?: { params: LatencyParams; subscriptions: number; devices: number; setupSeconds: number };
    streams?: RateResult & { params: StreamParams; calls: number; devices: number };
    batches?: RateResult & { params: BatchParams };
    serverStats?: ServerStats;
  } & Record<string, unknown>;
}

interface IngestFile {
  schema: typeof INGEST_SCHEMA;
  createdAt: string;
  machine: MachineInfo;
  redis: string;
  loadAverage?: { before: number[] | number; after: number[] | number };
  params: { devices: number; subscribed: number; filters: number; gateways: number; rounds: number; updatesPerMeasurement: number; reps: number; flushSize: number; readCount: number; seed: number };
  method: string;
  summary: { write: Summary; drain: Summary; concurrent: Summary; applyPerBatch: Summary; rebuildMs: Summary };
}

interface Run<T> {
  file: string;
  name: string;
  f: T;
  /** ms since the epoch. */
  start: number;
  end: number;
}

type ServiceRun = Run<ServiceFile>;
type IngestRun = Run<IngestFile>;

/** The publish modes a service file measured, in the order written ('latency-stream', 'latency-unary', ...). */
function latencyResults(f: ServiceFile): LatencyResult[] {
  return Object.entries(f.results)
    .filter(([k, v]) => k.startsWith('latency-') && v !== null && typeof v === 'object' && 'latencyMs' in (v as object))
    .map(([, v]) => v as LatencyResult);
}

// ---- wording ----

const MODE: Record<string, string> = { stream: 'PublishStream', unary: 'unary Publish' };
const modeName = (m: string): string => MODE[m] ?? m;
const MODE_DETAIL: Record<string, string> = { stream: 'one long-lived BulkPublish stream', unary: 'one Publish call per event' };

const metCell = (ok: boolean): string => (ok ? 'met' : '**not met**');
/** A count or rate with thousands separators and at most one decimal: 987.3, 1,000.1, 124,284. */
const amount = (x: number | undefined): string => (x === undefined || !Number.isFinite(x) ? '–' : x.toLocaleString('en-US', { maximumFractionDigits: x >= 100 ? 1 : 2 }));
/** Cores used (CPU seconds per second), two decimals. */
const cores = (x: number): string => (Number.isFinite(x) ? x.toFixed(2) : '–');

function loads(v: number[] | number | undefined): number[] {
  return v === undefined ? [] : Array.isArray(v) ? v : [v];
}

function sameMachine(a: MachineInfo, b: MachineInfo): boolean {
  return a.cpu === b.cpu && a.logicalCores === b.logicalCores && a.memoryBytes === b.memoryBytes && a.osRelease === b.osRelease;
}

function machineLabel(m: MachineInfo): string {
  return `${m.cpu}, ${m.logicalCores} cores, ${(m.memoryBytes / 2 ** 30).toFixed(1)} GiB`;
}

/** The engine that served: requested, and what the server reported. */
function engineOf(f: ServiceFile): string {
  const s = f.results.serverStats;
  if (s?.engine === undefined) return f.engine;
  return s.engine === f.engine ? s.engine : `${s.engine} (requested ${f.engine})`;
}

/** The hub the server ran on. */
function hubMode(f: ServiceFile): string {
  return f.mode ?? f.results.serverStats?.mode ?? 'embedded';
}

/** The engine that served (the server's report), else the one requested. */
function engineName(f: ServiceFile): string {
  return f.results.serverStats?.engine ?? f.engine;
}

/** Engine, and the hub where it is not the embedded one: 'fast', 'gpu', 'fast, redis'. */
function shortEngine(f: ServiceFile): string {
  const e = engineName(f);
  const m = hubMode(f);
  return m === 'embedded' ? e : `${e}, ${m}`;
}

/** Subscriptions the run created (devices × subscriptions per device). */
function configuredSubs(f: ServiceFile): number {
  const s = f.results.latencySetup;
  return s === undefined ? 0 : s.params.devices * s.params.subscriptionsPerDevice;
}

/**
 * When a latency run counts for the target: enough subscriptions created at the target rate. The
 * subscriptions the run created count, not the server's figure right after setup, which may lag
 * behind where a matcher applies them asynchronously (the Redis hub).
 */
function latencyQualifies(f: ServiceFile): boolean {
  const s = f.results.latencySetup;
  return s !== undefined && configuredSubs(f) >= LATENCY_SUBS && s.params.rate >= LATENCY_RATE;
}

/** What sets a run apart from the defaults, for the summary cells. */
function runConditions(f: ServiceFile): string[] {
  const out: string[] = [];
  const p = f.results.latencySetup?.params;
  if (p !== undefined && p.kinds !== DEFAULT_KINDS) out.push(`${p.kinds} event kinds`);
  if (f.quick) out.push('quick');
  return out;
}

// ---- load average ----

/** Server and client cores of every measured phase of a service run. */
function phaseCpu(f: ServiceFile): { phase: string; server: number; client: number }[] {
  const out: { phase: string; server: number; client: number }[] = [];
  for (const r of latencyResults(f)) out.push({ phase: `latency, ${modeName(r.publish)}`, server: r.window.serverCpuSeconds / r.window.seconds, client: r.window.clientCpuSeconds / r.window.seconds });
  if (f.results.streams) out.push({ phase: 'device streams', server: f.results.streams.serverCores.median, client: f.results.streams.clientCores.median });
  if (f.results.batches) out.push({ phase: 'UpdateLocations', server: f.results.batches.serverCores.median, client: f.results.batches.clientCores.median });
  return out;
}

function loadLine(la: { before: number[] | number; after: number[] | number } | undefined, cores: number): string {
  if (la === undefined) return `- Load average: not recorded (${cores} logical cores)`;
  const b = loads(la.before);
  const a = loads(la.after);
  const which = b.length === 3 ? ' (1, 5, 15 min)' : b.length === 1 ? ' (1 min)' : '';
  return `- Load average${which}: ${b.map((x) => x.toFixed(2)).join(', ')} before, ${a.map((x) => x.toFixed(2)).join(', ')} after; ${cores} logical cores`;
}

/** A generated paragraph: how busy the machine was, and what the client took from the server's cores. */
function loadNote(run: ServiceRun | IngestRun, cpu: { phase: string; server: number; client: number }[], previous: { name: string; gapS: number } | undefined, shared: string): string {
  const n = run.f.machine.logicalCores;
  const before = loads(run.f.loadAverage?.before)[0];
  const s: string[] = [];
  s.push(shared);
  if (cpu.length > 0) {
    const busiest = [...cpu].sort((x, y) => y.server + y.client - (x.server + x.client))[0];
    const sum = busiest.server + busiest.client;
    s.push(
      `At its busiest (${busiest.phase}) the server used ${cores(busiest.server)} cores and the load generator ${cores(busiest.client)}: ${cores(sum)} of ${n}.` +
        (n <= 4 || sum >= 0.6 * n
          ? ` On a ${n}-core machine the load generator shares the cores with the server, so what the client uses is taken from the server: rates and latencies are those of the pair on ${n} cores, not of the server alone (the per-core figures divide by the server's own CPU time).`
          : ` With ${n} cores there is room for both.`),
    );
  }
  if (before !== undefined) {
    let t: string;
    if (before >= n) t = `Before the run the 1-minute load average (${before.toFixed(2)}) already exceeded the ${n} cores: other work competed with the benchmark throughout, so these figures understate what the machine does when quiet.`;
    else if (before >= 0.4 * n) t = `Before the run the 1-minute load average was ${before.toFixed(2)} on ${n} cores: other work held part of the cores.`;
    else t = `Other load was light: 1-minute load average ${before.toFixed(2)} before the run on ${n} cores.`;
    if (previous !== undefined && before >= 0.25 * n) t += ` The previous run on this machine (\`${previous.name}\`) ended ${sig(previous.gapS, 2)} s before this one started, so that load average still counts it.`;
    s.push(t);
  }
  const after = loads(run.f.loadAverage?.after)[0];
  if (after !== undefined && after >= n && (before === undefined || before < n)) {
    s.push(`After the run the 1-minute load average was ${after.toFixed(2)}, above the ${n} cores: the run's own processes (and whatever else ran) queued for the CPU.`);
  }
  return s.join(' ');
}

/** The run on the same machine that ended last before `run` started, if within two minutes. */
function previousRun(run: ServiceRun, all: readonly (ServiceRun | IngestRun)[]): { name: string; gapS: number } | undefined {
  let best: { name: string; gapS: number } | undefined;
  for (const o of all) {
    if (o === run || !sameMachine(o.f.machine, run.f.machine) || !Number.isFinite(o.end)) continue;
    const gapS = (run.start - o.end) / 1000;
    if (gapS >= 0 && gapS <= 120 && (best === undefined || gapS < best.gapS)) best = { name: o.name, gapS };
  }
  return best;
}

// ---- tables ----

function latencyTable(f: ServiceFile): string {
  const qualifies = latencyQualifies(f);
  const rs = latencyResults(f);
  return table(
    ['publish', 'events/s offered', 'events/s', 'notifications/event', 'notifications/s', 'min ms', 'median ms', 'p99 ms', 'max ms', 'p99 from schedule ms', 'Publish call p99 ms', 'server cores', 'client cores', `p99 ≤ ${LATENCY_P99_MS} ms`],
    rs.map((r) => [
      modeName(r.publish),
      sig(f.results.latencySetup?.params.rate),
      amount(r.eventsPerSecond),
      sig(r.notificationsPerEvent),
      amount(r.notificationsPerSecond),
      sig(r.latencyMs.min),
      sig(r.latencyMs.median),
      sig(r.latencyMs.p99),
      sig(r.latencyMs.max),
      sig(r.latencyFromScheduleMs.p99),
      r.publishRpcMs === null ? '–' : sig(r.publishRpcMs.p99),
      cores(r.window.serverCpuSeconds / r.window.seconds),
      cores(r.window.clientCpuSeconds / r.window.seconds),
      qualifies ? metCell(r.latencyMs.p99 <= LATENCY_P99_MS) : 'n/a',
    ]),
  );
}

function latencyDetails(f: ServiceFile): string[] {
  const offered = f.results.latencySetup?.params.rate ?? NaN;
  return latencyResults(f).map(
    (r) =>
      `- ${modeName(r.publish)} (${MODE_DETAIL[r.publish] ?? r.publish}): ${amount(r.eventsPublished)} of ${amount(r.eventsSent)} events published` +
      `${r.publishErrors > 0 ? `, **${r.publishErrors} errors**` : ', no errors'}; ${sig(r.avgReached)} subscriptions reached per event, ${amount(r.notifications)} notifications timed (n); ` +
      `every stored notification delivered ${sig(r.drainSeconds * 1000)} ms after the last publish; server RSS ${mib(r.serverRssBytes)} MiB.` +
      (r.eventsPerSecond < 0.99 * offered
        ? ` The publisher fell behind its schedule: ${amount(r.eventsPerSecond)} of ${amount(offered)} events/s offered were published in the window (median latency ${sig(r.latencyMs.median)} ms: requests queued, the service did not keep up with this rate).`
        : ''),
  );
}

function rateRow(label: string, clients: string, r: RateResult): string[] {
  return [
    label,
    clients,
    String(r.rounds.length),
    sig(r.perSecond.min),
    sig(r.perSecond.median),
    sig(r.perSecond.max),
    sig(r.perServerCoreSecond.min),
    sig(r.perServerCoreSecond.median),
    sig(r.perServerCoreSecond.max),
    cores(r.serverCores.median),
    cores(r.clientCores.median),
    metCell(r.perServerCoreSecond.median >= PER_CORE),
  ];
}

function updatesTable(f: ServiceFile): string {
  const rows: string[][] = [];
  const s = f.results.streams;
  if (s) rows.push(rateRow('device streams', `${count(s.devices)} devices on ${s.params.connections} connections`, s));
  const b = f.results.batches;
  if (b) rows.push(rateRow('UpdateLocations', `${count(b.params.devices)} devices, ${count(b.params.batch)} per message, ${b.params.streams} streams`, b));
  return table(
    ['path', 'clients', 'rounds', 'updates/s min', 'updates/s median', 'updates/s max', 'per server core min', 'per server core median', 'per server core max', 'server cores', 'client cores', `≥ ${count(PER_CORE)}/s per core`],
    rows,
  );
}

/** Generated remarks on the rate phases: a load generator at its limit, server threads beyond one core. */
function rateNotes(f: ServiceFile): string[] {
  const out: string[] = [];
  const phases: [string, RateResult | undefined][] = [
    ['device streams', f.results.streams],
    ['UpdateLocations', f.results.batches],
  ];
  for (const [name, r] of phases) {
    if (r === undefined) continue;
    if (r.clientCores.median >= 0.9) {
      out.push(
        `- ${name}: the load generator used ${cores(r.clientCores.median)} cores (median) against the server's ${cores(r.serverCores.median)}: one JavaScript thread at its limit, so updates/s here is bounded by the client; per server core is the figure that describes the server.`,
      );
    }
    if (r.serverCores.median > 1.05) {
      out.push(`- ${name}: the server used ${cores(r.serverCores.median)} cores: its CPU time counts every thread of the process (garbage collection and native threads besides the JavaScript one), so it can exceed 1, and per server core divides by all of it.`);
    }
  }
  return out.length > 0 ? out : ['- Neither side was at a core\'s limit.'];
}

const INGEST_MEASURES: { key: 'write' | 'drain' | 'concurrent' | 'applyPerBatch'; what: string }[] = [
  { key: 'write', what: 'gateways alone: every writer updated and flushed into Redis, matcher stopped' },
  { key: 'drain', what: 'matcher alone: a new matcher consumes the backlog (snapshot rebuild untimed)' },
  { key: 'concurrent', what: 'both at once: gateways writing while a running matcher applies' },
  { key: 'applyPerBatch', what: 'decode + engine apply only, per XREAD batch of ≥ 1000 updates' },
];

function ingestTable(f: IngestFile): string {
  return table(
    ['measure', 'what', 'n', 'updates/s min', 'median', 'p99', `≥ ${count(INGEST)}/s (median)`],
    INGEST_MEASURES.map(({ key, what }) => {
      const s = f.summary[key];
      return [key, what, String(s.n), sig(s.min), sig(s.median), sig(s.p99), metCell(s.median >= INGEST)];
    }),
  );
}

// ---- plots ----

function latencyPlot(runs: readonly ServiceRun[]): string {
  const groups: BarGroup[] = [];
  for (const r of runs) {
    for (const l of latencyResults(r.f)) {
      groups.push({
        label: [r.name, `${l.publish}, ${engineName(r.f)}`, `${hubMode(r.f) === 'embedded' ? '' : `${hubMode(r.f)}, `}${r.f.machine.logicalCores} cores`],
        values: [{ y: l.latencyMs.median }, { y: l.latencyMs.p99 }, { y: l.latencyMs.max }],
      });
    }
  }
  return barPlot({
    title: 'Publish → notification latency per run and publish mode',
    yLabel: 'ms (log scale)',
    series: [
      { name: 'median', color: '#1f77b4' },
      { name: 'p99', color: '#ff7f0e' },
      { name: 'max', color: '#7f7f7f', kind: 'marker' },
    ],
    groups,
    lines: [{ y: LATENCY_P99_MS, label: `target: p99 ≤ ${LATENCY_P99_MS} ms`, color: '#d62728' }],
    notes: ['median, p99 and max of', 'every notification timed'],
    logY: true,
    valueLabels: true,
  });
}

function updatesPlot(runs: readonly ServiceRun[]): string {
  const groups: BarGroup[] = [];
  const v = (r: RateResult | undefined) => (r === undefined ? null : { y: r.perServerCoreSecond.median, lo: r.perServerCoreSecond.min, hi: r.perServerCoreSecond.max });
  for (const r of runs) {
    const s = r.f.results.streams;
    const b = r.f.results.batches;
    if (s === undefined && b === undefined) continue;
    groups.push({ label: [r.name, engineName(r.f), `${hubMode(r.f) === 'embedded' ? '' : `${hubMode(r.f)}, `}${r.f.machine.logicalCores} cores`], values: [v(s), v(b)] });
  }
  return barPlot({
    title: 'Location updates per second of server CPU',
    yLabel: 'updates per server core-second',
    series: [
      { name: 'device streams', color: '#1f77b4' },
      { name: 'UpdateLocations', color: '#2ca02c' },
    ],
    groups,
    lines: [{ y: PER_CORE, label: `target: ≥ ${count(PER_CORE)}/s per core`, color: '#d62728' }],
    notes: ['bars: median over rounds;', 'whiskers: min–max'],
    valueLabels: true,
  });
}

// ---- document ----

function serviceSection(run: ServiceRun, all: readonly (ServiceRun | IngestRun)[], rel: (f: string) => string): string[] {
  const f = run.f;
  const r = f.results;
  const lines: string[] = [`### ${run.name} — ${f.startedAt.slice(0, 16).replace('T', ' ')}${f.quick ? ' (quick)' : ''}`, ''];
  lines.push(`Source: \`${rel(run.file)}\` (bench/service.ts), ${sig(f.seconds)} s in all.`, '');
  lines.push(`- Machine: ${describeMachine(f.machine)}`);
  lines.push(loadLine(f.loadAverage, f.machine.logicalCores));
  const st = r.serverStats;
  lines.push(
    `- Engine: ${engineOf(f)}${st?.engineDetail ? ` — ${st.engineDetail}` : ''}; the server (\`npm run serve\`) in a child process, hub: ${hubMode(f) === 'redis' ? ((f.gateways ?? 1) > 1 ? `Redis (${f.gateways} gateway processes on one port beside the matcher, state and delivery through Redis; server CPU summed over them)` : 'Redis (gateway and matcher in the one process, state and delivery through Redis)') : hubMode(f)}${f.serverNodeArgs && f.serverNodeArgs.length > 0 ? ` with \`${f.serverNodeArgs.join(' ')}\`` : ''}; seed ${f.seed}`,
  );
  const phases = [
    ...latencyResults(f).map((l) => `latency (${modeName(l.publish)})`),
    ...(r.streams ? ['device streams'] : []),
    ...(r.batches ? ['UpdateLocations'] : []),
  ];
  lines.push(`- Phases: ${phases.join(', ') || 'none'}`);
  const ls = r.latencySetup;
  if (ls !== undefined) {
    const p = ls.params;
    lines.push(
      `- Latency parameters: ${count(p.devices)} devices × ${p.subscriptionsPerDevice} subscriptions = ${count(configuredSubs(f))} subscriptions (each wants 1 of ${p.kinds} event kinds, a level, a 200–1000 m circle around its device), ` +
        `created through ${count(ls.devices)} device streams in ${sig(ls.setupSeconds)} s over ${p.connections} HTTP/2 connections; ${count(p.rate)} events/s offered open loop for ${p.seconds} s after ${p.warmupSeconds} s of warm-up`,
    );
    if (ls.subscriptions !== configuredSubs(f)) {
      lines.push(
        `- Note: the server reported ${amount(ls.subscriptions)} of the ${amount(configuredSubs(f))} subscriptions when setup finished` +
          `${st?.subscriptions !== undefined ? ` (${amount(st.subscriptions)} at the end of the run)` : ''}: the latency phase may have started before all of them were applied.`,
      );
    }
  }
  if (r.streams) {
    const p = r.streams.params;
    lines.push(`- Device streams: ${count(p.devices)} devices moving by random waypoint on ${p.connections} connections (SDK coalescing: one update in flight per device), ${p.rounds} rounds of ${p.seconds} s after a warm-up round; ${amount(r.streams.calls)} updateLocation calls made by the client in all (warm-up included)`);
  }
  if (r.batches) {
    const p = r.batches.params;
    lines.push(`- UpdateLocations: ${count(p.devices)} fleet devices, ${count(p.batch)} updates per message (encoded before timing), ${p.streams} concurrent client streams, ${p.rounds} rounds of ${p.seconds} s after a warm-up round`);
  }
  if (st !== undefined) {
    lines.push(
      `- Server at the end (GetStats): ${amount(st.subscriptions)} subscriptions, ${amount(st.devices)} devices, ${amount(st.eventsPublished)} events published, ${amount(st.notifications)} notifications (${amount(st.notificationsDropped)} dropped), ` +
        `${amount(st.locationUpdates)} location updates; engine estimate ${mib(st.engineMemoryBytes)} MiB`,
    );
  }
  lines.push('');
  const redis =
    hubMode(f) === 'redis'
      ? ` The Redis server's CPU time is in none of these figures (server cores count the Ambit process alone); if it ran on this machine, it shared the ${f.machine.logicalCores} cores too.`
      : '';
  lines.push(loadNote(run, phaseCpu(f), previousRun(run, all), `Client (the SDK, in the benchmark process) and server run on the same machine; each one's CPU time is measured (the server's from /proc).${redis}`), '');

  const lr = latencyResults(f);
  if (lr.length > 0) {
    lines.push('#### Publish → notification latency', '');
    lines.push(
      `From the publish call to the notification at the device, for every notification of the timed window; "from schedule" counts from the event's scheduled send time (client lag included, no coordinated omission). ` +
        (latencyQualifies(f)
          ? `Target: p99 ≤ ${LATENCY_P99_MS} ms at ${count(LATENCY_RATE)} events/s with ${count(LATENCY_SUBS)} subscriptions.`
          : `The target (p99 ≤ ${LATENCY_P99_MS} ms at ${count(LATENCY_RATE)} events/s with ${count(LATENCY_SUBS)} subscriptions) does not apply: this run created ${amount(configuredSubs(f))} subscriptions at ${amount(ls?.params.rate)} events/s.`),
      '',
    );
    lines.push(latencyTable(f), '', ...latencyDetails(f), '');
  }
  if (r.streams || r.batches) {
    lines.push('#### Location updates', '');
    lines.push(
      `Updates the server applied (its location_updates counter for device streams, accepted updates for UpdateLocations) per second of wall time, and per second of the server's CPU time ("per server core": the rate one fully busy core would sustain). ` +
        `Target: ≥ ${count(PER_CORE)} updates/s per server core (median over rounds). With ${r.streams?.rounds.length ?? r.batches?.rounds.length} rounds, max is also the p99.`,
      '',
    );
    lines.push(updatesTable(f), '');
    lines.push(...rateNotes(f), '');
  }
  return lines;
}

function ingestSection(run: IngestRun, rel: (f: string) => string): string[] {
  const f = run.f;
  const p = f.params;
  const lines: string[] = [`### ${run.name} — ${f.createdAt.slice(0, 16).replace('T', ' ')}`, ''];
  lines.push(`Source: \`${rel(run.file)}\` (bench/matcher-ingest.ts).`, '');
  lines.push(`- Machine: ${describeMachine(f.machine)}`);
  lines.push(loadLine(f.loadAverage, f.machine.logicalCores));
  lines.push(`- Redis ${f.redis}; engine fast in the matcher`);
  lines.push(
    `- Parameters: ${count(p.devices)} devices with a location writer each over ${p.gateways} gateway hubs (flush size ${p.flushSize}), ${count(p.subscribed)} of them with a subscription of ${p.filters} anchored filters; ` +
      `${count(p.updatesPerMeasurement)} updates per measurement (${p.rounds} rounds over the devices, no update coalesced), ${p.reps} repetitions after a warm-up; matcher XREAD COUNT ${p.readCount}; seed ${p.seed}`,
  );
  lines.push(`- Snapshot rebuild of a new matcher (untimed in drain): median ${sig(f.summary.rebuildMs.median)} ms (min ${sig(f.summary.rebuildMs.min)}, max ${sig(f.summary.rebuildMs.max)})`);
  lines.push('');
  lines.push(`Method (from the file): ${f.method}`, '');
  const n = f.machine.logicalCores;
  lines.push(
    loadNote(
      run,
      [],
      undefined,
      `Redis, the gateways and the matcher share the ${n} cores${n <= 4 ? ': in write and drain one side works at a time (with Redis), in concurrent both compete for the cores with Redis, so concurrent is the whole pipeline on this machine, not the matcher alone' : ''}.`,
    ),
    '',
  );
  lines.push(`Target: matcher ingest ≥ ${count(INGEST)} updates/s (median over repetitions).`, '', ingestTable(f), '');
  return lines;
}

/** One summary cell: each run's value and verdict. */
function cell(entries: string[]): string {
  return entries.length === 0 ? '–' : entries.join('; ');
}

function summary(services: readonly ServiceRun[], ingests: readonly IngestRun[]): string[] {
  const machines: MachineInfo[] = [];
  for (const r of [...services, ...ingests]) if (!machines.some((m) => sameMachine(m, r.f.machine))) machines.push(r.f.machine);
  const on = <T extends { f: { machine: MachineInfo } }>(rs: readonly T[], m: MachineInfo): T[] => rs.filter((r) => sameMachine(r.f.machine, m));
  const tag = (r: ServiceRun): string => {
    const c = [`\`${r.name}\``, shortEngine(r.f), ...runConditions(r.f)];
    return c.join(', ');
  };
  const rows: string[][] = [];
  const modes = [...new Set(services.flatMap((r) => latencyResults(r.f).map((l) => l.publish)))];
  for (const mode of modes) {
    rows.push([
      `p99 ≤ ${LATENCY_P99_MS} ms at ${count(LATENCY_RATE)} events/s, ${count(LATENCY_SUBS)} subscriptions: ${modeName(mode)}`,
      ...machines.map((m) =>
        cell(
          on(services, m).flatMap((r) => {
            const l = latencyResults(r.f).find((x) => x.publish === mode);
            if (l === undefined) return [];
            const verdict = latencyQualifies(r.f) ? (l.latencyMs.p99 <= LATENCY_P99_MS ? 'met' : '**not met**') : 'n/a';
            return [`${verdict}: ${sig(l.latencyMs.p99)} ms (${tag(r)})`];
          }),
        ),
      ),
    ]);
  }
  const paths: { key: 'streams' | 'batches'; name: string }[] = [
    { key: 'streams', name: 'device streams' },
    { key: 'batches', name: 'UpdateLocations' },
  ];
  for (const { key, name } of paths) {
    rows.push([
      `≥ ${count(PER_CORE)} location updates/s per server core: ${name}`,
      ...machines.map((m) =>
        cell(
          on(services, m).flatMap((r) => {
            const x = r.f.results[key];
            if (x === undefined) return [];
            return [`${metCell(x.perServerCoreSecond.median >= PER_CORE)}: ${axisFormat(x.perServerCoreSecond.median)}/s per core, ${axisFormat(x.perSecond.median)}/s at ${cores(x.serverCores.median)} server cores (${tag(r)})`];
          }),
        ),
      ),
    ]);
  }
  const ingestRows: { key: 'drain' | 'concurrent'; name: string }[] = [
    { key: 'drain', name: 'matcher alone (drain)' },
    { key: 'concurrent', name: 'matcher with the gateways writing (concurrent)' },
  ];
  for (const { key, name } of ingestRows) {
    rows.push([
      `matcher ingest ≥ ${count(INGEST)} updates/s: ${name}`,
      ...machines.map((m) => cell(on(ingests, m).map((r) => `${metCell(r.f.summary[key].median >= INGEST)}: ${axisFormat(r.f.summary[key].median)}/s (\`${r.name}\`)`))),
    ]);
  }
  const first = [...services.map((r) => r.start), ...ingests.map((r) => r.end)].filter(Number.isFinite).sort((a, b) => a - b);
  const when = first.length > 0 ? ` from ${new Date(first[0]).toISOString().slice(0, 16).replace('T', ' ')} to ${new Date(first[first.length - 1]).toISOString().slice(0, 16).replace('T', ' ')} UTC` : '';
  const para =
    `${services.length} service run${services.length === 1 ? '' : 's'} and ${ingests.length} matcher-ingest run${ingests.length === 1 ? '' : 's'} on ${machines.length} machine${machines.length === 1 ? '' : 's'}${when}. ` +
    `The three targets: publish → notification p99 ≤ ${LATENCY_P99_MS} ms at ${count(LATENCY_RATE)} events/s with ${count(LATENCY_SUBS)} subscriptions (p99 over every notification of a run; a run with fewer subscriptions or a lower rate is n/a); ` +
    `≥ ${count(PER_CORE)} location updates/s per server core (median over rounds); matcher ingest ≥ ${count(INGEST)} updates/s (median over repetitions). ` +
    `Each cell lists every run on that machine: verdict, value, run (engine, and what differs from the defaults).` +
    machines
      .filter((m) => m.logicalCores <= 4 && on(services, m).length > 0)
      .map((m) => {
        const la = on(services, m)
          .map((r) => loads(r.f.loadAverage?.before)[0])
          .filter((x): x is number => x !== undefined);
        const range = la.length === 0 ? '' : ` (1-minute load average ${Math.min(...la).toFixed(2)}–${Math.max(...la).toFixed(2)} before its runs)`;
        return ` On the ${m.logicalCores}-core ${m.cpu} the load generator shares the cores with the server${range}, so its service figures are those of client and server together.`;
      })
      .join('');
  // A target no run measured gets no row.
  const measured = rows.filter((r) => r.slice(1).some((c) => c !== '–'));
  return [para, '', table(['target', ...machines.map(machineLabel)], measured)];
}

function main(): void {
  const { files, dir, scanned } = parseReportArgs(process.argv.slice(2), RESULTS_DIR, 'Usage: node dist/bench/service-report.js [FILE.json ...] [--dir DIR]   (default DIR: bench/results)', fail);
  const services: ServiceRun[] = [];
  const ingests: IngestRun[] = [];
  const throughputs: ThroughputRun[] = [];
  const streamRuns: { name: string; file: string; f: StreamsFile }[] = [];
  const locationRuns: { name: string; file: string; f: StreamLocationsFile }[] = [];
  for (const file of files) {
    const data = readResultFile(file, fail) as { kind?: unknown; schema?: unknown } | null;
    const name = path.basename(file, '.json');
    if (data !== null && typeof data === 'object' && data.kind === 'service') {
      const f = data as ServiceFile;
      const start = Date.parse(f.startedAt);
      services.push({ file, name, f, start, end: start + f.seconds * 1000 });
    } else if (data !== null && typeof data === 'object' && data.schema === INGEST_SCHEMA) {
      const f = data as IngestFile;
      // createdAt is written at the end of the run; its start is not recorded.
      ingests.push({ file, name, f, start: NaN, end: Date.parse(f.createdAt) });
    } else if (data !== null && typeof data === 'object' && data.kind === 'throughput') {
      throughputs.push({ file, name, f: data as ThroughputFile });
    } else if (data !== null && typeof data === 'object' && data.kind === 'streams') {
      streamRuns.push({ file, name, f: data as StreamsFile });
    } else if (data !== null && typeof data === 'object' && data.kind === 'stream-locations') {
      locationRuns.push({ file, name, f: data as StreamLocationsFile });
    } else if (!scanned) fail(`${file}: neither a bench/service.ts result (kind "service"), a bench/throughput.ts result (kind "throughput"), a bench/streams.ts result (kind "streams"), a bench/stream-locations.ts result (kind "stream-locations") nor ${INGEST_SCHEMA}`);
  }
  if (services.length === 0 && ingests.length === 0) {
    fail(`no service or matcher-ingest result files in ${path.relative(process.cwd(), dir) || dir} (run \`npm run bench:service\` or \`npm run bench:ingest\`)`);
  }
  services.sort((a, b) => a.start - b.start || a.name.localeCompare(b.name));
  ingests.sort((a, b) => a.end - b.end || a.name.localeCompare(b.name));
  mkdirSync(dir, { recursive: true });
  const rel = (file: string): string => path.relative(dir, file) || path.basename(file);
  const all = [...services, ...ingests];

  const lines: string[] = [
    '# Service benchmarks',
    '',
    '<!-- Generated by `npm run bench:service-report` from the JSON files in this directory. Do not edit by hand. -->',
    '',
    'Produced by `npm run bench:service` (bench/service.ts: the gRPC service over loopback through the SDK, against the server (`npm run serve`) in a child process whose CPU time is read from /proc) ' +
      'and `npm run bench:ingest` (bench/matcher-ingest.ts: location updates from gateway hubs through Redis into the matcher). Every file is one run; runs are listed oldest first.',
    '',
    '## Summary',
    '',
    ...summary(services, ingests),
    '',
  ];
  const svg = (name: string, body: string, alt: string): void => {
    writeFileSync(path.join(dir, name), body);
    lines.push(`![${alt}](${name})`, '');
  };
  if (services.some((r) => latencyResults(r.f).length > 0)) {
    svg('service-latency-percentiles.svg', latencyPlot(services), 'Publish → notification latency per run and mode');
    lines.push(
      `Bars: median and p99 over every notification timed in a run; diamonds: the maximum; the dashed line: the ${LATENCY_P99_MS} ms target for p99. ` +
        'The JSON keeps min/median/p99/max only (no histogram), so there is no CDF.',
      '',
    );
  }
  if (services.some((r) => r.f.results.streams || r.f.results.batches)) {
    svg('service-updates-per-core.svg', updatesPlot(services), 'Location updates per server core per run');
    lines.push('Bars: median over rounds of updates applied per second of server CPU time; whiskers: min–max over rounds; the dashed line: the target.', '');
  }

  throughputs.sort((a, b) => Date.parse(a.f.startedAt) - Date.parse(b.f.startedAt) || a.name.localeCompare(b.name));
  lines.push(...throughputSection(throughputs, dir, rel));
  lines.push(...streamsSection(streamRuns, rel));
  locationRuns.sort((a, b) => Date.parse(a.f.startedAt) - Date.parse(b.f.startedAt) || a.name.localeCompare(b.name));
  lines.push(...streamLocationsSection(locationRuns, rel));
  if (services.length > 0) {
    lines.push('## Service runs', '');
    for (const r of services) lines.push(...serviceSection(r, all, rel));
  }
  if (ingests.length > 0) {
    lines.push('## Matcher ingest', '');
    for (const r of ingests) lines.push(...ingestSection(r, rel));
  }
  const out = path.join(dir, 'SERVICE-BENCHMARKS.md');
  writeFileSync(out, `${lines.join('\n').trimEnd()}\n`);
  process.stdout.write(`bench:service-report: ${all.length} result file${all.length === 1 ? '' : 's'} → ${path.relative(process.cwd(), out) || out}\n`);
}

main();
