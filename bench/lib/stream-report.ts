/**
 * The device-stream sections of SERVICE-BENCHMARKS.md (bench/service-report.ts): server memory per
 * idle stream (bench/streams.ts) and location updates on device streams for a whole node
 * (bench/stream-locations.ts).
 */
import type { MachineInfo } from './machine.js';
import type { Summary } from './stats.js';

/** A bench/streams.ts result: server memory per idle device stream. */
export interface StreamsFile {
  machine: { cpuModel?: string; cores?: number; commit?: string };
  mode: string;
  gateways: number;
  engine: string;
  streams: number;
  perConnection: number;
  /** How the devices opened their streams (absent in files from before the web port: gRPC). */
  transport?: 'grpc' | 'websocket';
  points: { streams: number; connections: number; serverRssBytes: number }[];
  perStreamBytes: number;
  restBytes: number;
}

export function streamsSection(runs: readonly { name: string; file: string; f: StreamsFile }[], rel: (file: string) => string): string[] {
  if (runs.length === 0) return [];
  const lines = [
    '## Memory per idle device stream',
    '',
    'Produced by `npm run bench:streams` (bench/streams.ts): client processes open idle device streams (hello, welcome) in steps; the cost of a stream is the slope of the server\'s resident memory (summed over its processes) against open streams. Target: ≤ 10 KB per stream.',
    '',
    '| run | mode | transport | gateway processes | streams | per connection | server RSS at rest | server RSS with all streams | per stream (slope) | target |',
    '|---|---|---|---:|---:|---:|---:|---:|---:|---|',
  ];
  const mib = (b: number) => `${(b / 2 ** 20).toFixed(0)} MiB`;
  for (const r of runs) {
    const f = r.f;
    const last = f.points[f.points.length - 1];
    const ws = f.transport === 'websocket';
    lines.push(`| [${r.name}](${rel(r.file)}) | ${f.mode}, ${f.engine} | ${ws ? 'WebSocket' : 'gRPC'} | ${f.gateways} | ${f.streams.toLocaleString('en-US')} | ${ws ? 1 : f.perConnection} | ${mib(f.points[0].serverRssBytes)} | ${mib(last.serverRssBytes)} | ${(f.perStreamBytes / 1024).toFixed(1)} KiB | ${f.perStreamBytes <= 10_000 ? 'met' : 'not met'} |`);
  }
  lines.push('');
  return lines;
}

export interface StreamLocationsFile {
  kind: 'stream-locations';
  startedAt: string;
  machine: MachineInfo;
  mode: string;
  engine: string;
  gateways: number;
  /** Hub partitions (absent in files from before it was recorded). */
  partitions?: number;
  serverCpus: string | null;
  loadCpus: string | null;
  /** The load's HTTP/2 client (absent in files from before `raw`: node:http2). */
  client?: 'raw' | 'http2';
  devices: number;
  workers: number;
  connections: number;
  perWrite: number;
  rounds: number;
  seconds: number;
  updatesPerSecond: Summary;
  results: { round: number; updatesPerSecond: number; appliedPerSecond: number; serverCores: number; loadCores: number; serverUsPerUpdate: number }[];
}

/** Location updates/s on device streams for a whole node (bench/stream-locations.ts). */
export function streamLocationsSection(runs: readonly { name: string; file: string; f: StreamLocationsFile }[], rel: (file: string) => string): string[] {
  if (runs.length === 0) return [];
  const lines = [
    '## Location updates on device streams, whole node',
    '',
    'Produced by `npm run bench:stream-locations` (bench/stream-locations.ts): load processes hold device streams and write `location` messages over gRPC, one message per DATA frame unless "per frame" says more. The load\'s client: `http2`, node:http2 with one write in flight per stream (updates/s: the writes the transport completed); `raw`, HTTP/2 frames the load writes itself, many to a socket write, paced by the server\'s flow-control windows (updates/s: the messages the windows admitted), at a tenth of the load\'s CPU. The hub applies fewer than arrive (a gateway coalesces a device\'s updates between flushes). Medians over rounds; server and load cores are measured, not shares of the machine. Target: ≥ 5M updates/s per node, one message per frame as phones send them (rows with several per frame show what the gateways can parse, not the target).',
    '',
    '| run | machine | server | client | streams | per frame | updates/s (min–max) | applied by the hub/s | server cores | load cores | server µs/update | target |',
    '|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|',
  ];
  const n = (x: number) => Math.round(x).toLocaleString('en-US');
  const med = (xs: number[]) => {
    const s = [...xs].sort((a, b) => a - b);
    return s[Math.floor((s.length - 1) / 2)];
  };
  for (const r of runs) {
    const f = r.f;
    const u = f.updatesPerSecond;
    const parts = f.partitions !== undefined && f.partitions > 0 ? `, ${f.partitions} hub partitions` : '';
    const server = `${f.mode}, ${f.engine}, ${f.gateways} gateway process${f.gateways === 1 ? '' : 'es'}${parts}${f.serverCpus === null ? '' : `, CPUs ${f.serverCpus}`}`;
    const load = f.loadCpus === null ? '' : ` (load on CPUs ${f.loadCpus})`;
    lines.push(
      `| [${r.name}](${rel(r.file)}) | ${f.machine.logicalCores} cores${load} | ${server} | ${f.client ?? 'http2'} | ${f.devices.toLocaleString('en-US')} | ${f.perWrite} | ${n(u.median)} (${n(u.min)}–${n(u.max)}) | ${n(med(f.results.map((x) => x.appliedPerSecond)))} | ${med(f.results.map((x) => x.serverCores)).toFixed(2)} | ${med(f.results.map((x) => x.loadCores)).toFixed(2)} | ${med(f.results.map((x) => x.serverUsPerUpdate)).toFixed(2)} | ${f.perWrite > 1 ? '– (messages batched per frame)' : u.median >= 5e6 ? 'met' : 'not met'} |`,
    );
  }
  lines.push('');
  return lines;
}

