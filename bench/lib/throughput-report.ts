/**
 * The throughput part of SERVICE-BENCHMARKS.md: bench/throughput.ts runs (kind "throughput") as
 * two plots (delivered notifications/s and p99 latency against the offered publish rate, one line
 * per run) and a table per run.
 */
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { describeMachine, type MachineInfo } from './machine.js';
import { type Series, linePlot } from './svg.js';

export interface ThroughputStep {
  offered: number;
  seconds: number;
  eventsPublished: number;
  publishErrors: number;
  eventsPerSecond: number;
  notifications: number;
  notificationsPerSecond: number;
  notificationsPerEvent: number;
  drainSeconds: number;
  latencyMs: { n: number; min: number; median: number; p99: number; max: number };
  /** Summed over the server's processes, over the window. */
  serverCores: number;
  /** Subscriber processes, over the window and the drain. */
  clientCores: number;
  /** Publisher processes, over the window (absent in the first files). */
  publisherCores?: number;
  serverCpuUsPerEvent: number;
  serverCpuUsPerNotification: number;
  /** Redis mode, Redis servers the benchmark can reach: their CPU summed, over the window and the drain. */
  redisCores?: number;
  redisCpuUsPerNotification?: number;
  /** The GPU engine's batches over the step (where the hub's stats carry its counters; absent in the first files). */
  gpuBatches?: number;
  gpuEventsPerBatch?: number;
  /** Events the GPU engine's CPU side answered over the step (lone events, overflow). */
  cpuAnsweredEvents?: number;
  /** A GPU batch's mean times over the step, ms: the host's submit, the wait for the GPU, the host's reading. */
  gpuBatchMs?: { submit: number; wait: number; read: number };
}

export interface ThroughputFile {
  kind: 'throughput';
  startedAt: string;
  machine: MachineInfo;
  command: string;
  engine: string;
  mode: 'embedded' | 'redis';
  /** Redis servers the run started on its host (1: one redis-server, >= 3: a cluster's masters); absent or 0: none. */
  redisNodes?: number;
  redisCluster?: boolean;
  /** Redis mode: matcher partitions (absent: 1). */
  matcherPartitions?: number;
  gateways: number;
  /** Fan-out shard threads (absent in the first files: none). */
  fanoutShards?: number;
  partitions?: number;
  /** False when the server wrote each notification through grpc-js (AMBIT_DIRECT_WRITES=0). */
  directWrites?: boolean;
  /** AMBIT_DEDUPE_WINDOW_S of the run, when set (null or absent: the default window). */
  dedupeWindowS?: number | null;
  /** Who carried device streams: the gateway on HTTP/2 (absent in files from before the option: grpc-js). */
  deviceStreams?: 'http2' | 'grpc-js';
  /** The subscribers' device client (absent in the first files: the SDK). */
  client?: 'sdk' | 'wire';
  /** The devices' ack delay in ms (absent in the first files: 0). */
  ackDelayMs?: number;
  /** CPU lists the server and the load were confined to (taskset), when they were. */
  serverCpus?: string | null;
  loadCpus?: string | null;
  devices: number;
  subsPerDevice: number;
  /** Pattern subscriptions per device (absent in runs before them: none). */
  patternsPerDevice?: number;
  kinds: number;
  publishers: number;
  subscribers: number;
  steps: ThroughputStep[];
}

export interface ThroughputRun {
  file: string;
  name: string;
  f: ThroughputFile;
}

const COLORS = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b'];
const MARKERS = ['circle', 'square', 'triangle', 'diamond'] as const;

/** The run's file name without its common prefix: it names the host, the mode and the gateways. */
const label = (r: ThroughputRun): string => r.name.replace(/^throughput-/, '');
const fmt = (x: number, d = 0): string => (Number.isFinite(x) ? x.toLocaleString('en-US', { maximumFractionDigits: d }) : '–');

function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 === 1 ? s[m] : (s[m - 1] + s[m]) / 2;
}

/** Lines of the section; the plots are written into `dir`. */
export function throughputSection(runs: readonly ThroughputRun[], dir: string, rel: (file: string) => string): string[] {
  if (runs.length === 0) return [];
  const lines = [
    '## Throughput: what one node delivers',
    '',
    'Produced by `npm run bench:throughput` (bench/throughput.ts): a ladder of offered publish rates, the load spread over publisher processes (one PublishStream each, open loop) and subscriber processes (connected devices that ack); each event carries its publish time and subscribers time it on arrival. Server cores are summed over the server\'s processes.',
    '',
    'One pair of plots per host (the first word of the file name after `throughput-`): runs on different hosts do not compare.',
    '',
  ];
  const hosts = new Map<string, ThroughputRun[]>();
  for (const r of runs) {
    const host = label(r).split('-')[0];
    const list = hosts.get(host) ?? [];
    list.push(r);
    hosts.set(host, list);
  }
  for (const [host, rs] of [...hosts].sort((x, y) => x[0].localeCompare(y[0]))) {
    // Repeated runs (names that differ only in a final `-a`, `-b`, ...) are one series: the median at each offered rate.
    const variants = new Map<string, ThroughputRun[]>();
    for (const r of rs) {
      const v = label(r).replace(/-[a-z]$/, '');
      variants.set(v, [...(variants.get(v) ?? []), r]);
    }
    const series = (y: (s: ThroughputStep) => number): Series[] =>
      [...variants].map(([v, vs], i) => {
        const at = new Map<number, number[]>();
        for (const r of vs) for (const s of r.f.steps) at.set(s.offered, [...(at.get(s.offered) ?? []), y(s)]);
        const points = [...at].sort((p, q) => p[0] - q[0]).map(([x, ys]) => [x, median(ys)] as [number, number]);
        const short = v.slice(host.length + 1) || v; // the host is in the title
        return { name: vs.length > 1 ? `${short} (median of ${vs.length})` : short, color: COLORS[i % COLORS.length], marker: MARKERS[Math.floor(i / COLORS.length) % MARKERS.length], points };
      });
    const delivered = `throughput-${host}-delivered.svg`;
    const p99 = `throughput-${host}-p99.svg`;
    writeFileSync(
      path.join(dir, delivered),
      linePlot({ title: `Delivered vs offered (${host})`, xLabel: 'offered publish rate (events/s)', yLabel: 'notifications/s delivered', logX: true, logY: true, series: series((s) => s.notificationsPerSecond) }),
    );
    writeFileSync(
      path.join(dir, p99),
      linePlot({ title: `Publish → notification p99 vs offered rate (${host})`, xLabel: 'offered publish rate (events/s)', yLabel: 'p99 latency (ms)', logX: true, logY: true, series: series((s) => s.latencyMs.p99) }),
    );
    lines.push(`### Plots: ${host} (${rs.length} run${rs.length === 1 ? '' : 's'})`, '', `![Delivered notifications/s against the offered rate, ${host}](${delivered})`, '', `![p99 latency against the offered rate, ${host}](${p99})`, '');
  }
  for (const r of runs) {
    const f = r.f;
    const redisCpu = f.steps.some((s) => s.redisCores !== undefined);
    const gpu = f.steps.some((s) => s.gpuBatches !== undefined);
    const redisKind = f.mode !== 'redis' || f.redisNodes === undefined || f.redisNodes === 0 ? '' : f.redisCluster ? ` on a Redis Cluster of ${f.redisNodes} masters (the run's own, same host)` : ' on one redis-server (the run\'s own, same host)';
    const mparts = (f.matcherPartitions ?? 1) > 1 ? `, devices split over ${f.matcherPartitions} matcher partitions (a thread each)` : '';
    lines.push(
      `### ${r.name} — ${f.startedAt.slice(0, 16).replace('T', ' ')}`,
      '',
      `Source: \`${rel(r.file)}\`. ${describeMachine(f.machine)}. Server: ${f.mode === 'embedded' ? 'embedded hub' : `Redis hub${redisKind}${mparts}`}, ${f.gateways} gateway process${f.gateways > 1 ? 'es' : ''}${f.gateways > 1 || f.mode === 'redis' ? ` beside the ${f.mode === 'embedded' ? ((f.partitions ?? 0) > 0 ? 'process of the partitions' : 'hub process') : 'matcher'}` : ''}, ${(f.fanoutShards ?? 0) > 0 ? `device logs in ${f.fanoutShards} fan-out shard threads, ` : ''}${(f.partitions ?? 0) > 0 ? `the hub split by device over ${f.partitions} partition threads, ` : ''}${f.deviceStreams === 'http2' ? 'device streams served by the gateways on HTTP/2, ' : `device streams through grpc-js${f.directWrites === false ? ', notifications written one by one (AMBIT_DIRECT_WRITES=0)' : ''}, `}engine ${f.engine}; ${f.devices} devices × ${f.subsPerDevice} subscriptions (${f.kinds} kinds)${(f.patternsPerDevice ?? 0) > 0 ? ` and ${f.patternsPerDevice} pattern subscription${f.patternsPerDevice === 1 ? '' : 's'} each (two kinds near the device within 2 s, same level)` : ''}; ${f.publishers} publisher and ${f.subscribers} subscriber processes (${f.client === 'wire' ? 'lean wire device client' : 'SDK devices'}${(f.ackDelayMs ?? 0) > 0 ? `, acking every ${f.ackDelayMs} ms` : ''}).${typeof f.dedupeWindowS === 'number' ? ` Event ids deduplicated over ${f.dedupeWindowS} s (AMBIT_DEDUPE_WINDOW_S; the default is 300 s).` : ''}${f.serverCpus ? ` The server ran on CPUs ${f.serverCpus} only${f.loadCpus ? `, the load on CPUs ${f.loadCpus}` : ''}.` : ''}`,
      '',
      `| offered ev/s | published ev/s | errors | notifications/s | per event | median ms | p99 ms | server cores | subscriber cores | publisher cores | server µs/event | server µs/notification | drain s |${redisCpu ? ' redis cores | redis µs/notification |' : ''}${gpu ? ' GPU events a batch | events on the CPU | a batch: submit / wait / read ms |' : ''}`,
      `|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|${redisCpu ? '---:|---:|' : ''}${gpu ? '---:|---:|---:|' : ''}`,
      ...f.steps.map(
        (s) =>
          `| ${fmt(s.offered)} | ${fmt(s.eventsPerSecond)} | ${fmt(s.publishErrors)} | ${fmt(s.notificationsPerSecond)} | ${s.eventsPublished > 0 ? fmt(s.notificationsPerEvent, 2) : '–'} | ${fmt(s.latencyMs.median, 1)} | ${fmt(s.latencyMs.p99, 1)} | ${fmt(s.serverCores, 2)} | ${fmt(s.clientCores, 2)} | ${fmt(s.publisherCores ?? NaN, 2)} | ${s.eventsPublished > 0 ? fmt(s.serverCpuUsPerEvent, 1) : '–'} | ${fmt(s.serverCpuUsPerNotification, 1)} | ${fmt(s.drainSeconds, 2)} |${redisCpu ? ` ${fmt(s.redisCores ?? NaN, 2)} | ${fmt(s.redisCpuUsPerNotification ?? NaN, 1)} |` : ''}${gpu ? ` ${fmt(s.gpuEventsPerBatch ?? NaN, 1)} | ${fmt(s.cpuAnsweredEvents ?? NaN)} | ${s.gpuBatchMs === undefined ? '–' : `${fmt(s.gpuBatchMs.submit, 2)} / ${fmt(s.gpuBatchMs.wait, 2)} / ${fmt(s.gpuBatchMs.read, 2)}`} |` : ''}`,
      ),
      '',
      'A step whose publish stream failed (errors: its events were accepted but not answered in time) counts no published events; its notifications still arrive.',
      '',
    );
  }
  return lines;
}
