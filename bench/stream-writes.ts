/**
 * What one notification write costs the server's transport, against how many device streams are
 * open: the floor under the service's CPU per notification. A server in this process holds N open
 * streams (a client process opened them and reads everything); the server writes `--bytes`-byte
 * messages, each to a stream picked at random (as notifications of events at random places go to
 * random devices), `--batch` writes a turn, and its CPU time per write is taken over the writes
 * until the client has received every byte. Transports: node:http2 streams shared over
 * `--connections` connections (how the gateways serve gRPC device streams, `h2-device-stream.ts`),
 * and WebSocket connections through `ws`, one a device (the web port's device streams), up to what
 * the process's file limit allows. Writes JSON and an SVG of the medians against open streams.
 *
 *   node dist/bench/stream-writes.js [--streams 1000,10000,100000] [--connections C] [--writes W]
 *     [--bytes B] [--batch K] [--repeats R] [--transports http2,ws] [--out FILE] [--quick]
 */
import { execFileSync, fork } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import http2 from 'node:http2';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import { WebSocket, WebSocketServer } from 'ws';
import { cliFail, readCommandLine, runMain } from './lib/args.js';
import { describeMachine } from './lib/machine.js';
import { note } from './lib/progress.js';
import { ResultRun } from './lib/result-file.js';
import { type Summary, summarize } from './lib/stats.js';
import { DASHES, MARKERS, linePlot } from './lib/svg.js';

const USAGE = `usage: node dist/bench/stream-writes.js [--streams LIST] [--connections C] [--writes W] [--bytes B] [--batch K] [--repeats R]
  [--transports http2,ws] [--out FILE] [--quick]
Defaults: streams 1000,10000,100000; 32 HTTP/2 connections; 100000 writes of 200 bytes, 200 a turn; 5 repeats after a warm-up.
ws: one WebSocket connection per stream; counts above the file limit allows (two descriptors a stream, one per process) are skipped.
--quick: streams 200,2000; 10000 writes; 2 repeats.`;

type Transport = 'http2' | 'ws';
type ToClient = { t: 'open'; transport: Transport; port: number; streams: number; connections: number } | { t: 'expect'; bytes: number };
type FromClient = { t: 'opened' } | { t: 'received' } | { t: 'failed'; error: string };

/** The client process: opens the streams, reads everything, says when `expect` bytes have come. */
function client(): void {
  let got = 0;
  let want = Infinity;
  const tell = (m: FromClient): void => void process.send!(m);
  const take = (n: number): void => {
    got += n;
    if (got >= want) {
      want = Infinity;
      tell({ t: 'received' });
    }
  };
  process.on('message', (m: ToClient) => {
    if (m.t === 'expect') {
      want = m.bytes;
      if (got >= want) take(0);
      return;
    }
    try {
      let open = 0;
      const opened = (): void => {
        if (++open === m.streams) tell({ t: 'opened' });
      };
      if (m.transport === 'http2') {
        // Windows large enough that flow control never holds a write back: the cost measured is the write's.
        const sessions = Array.from({ length: m.connections }, () => {
          const s = http2.connect(`http://127.0.0.1:${m.port}`, { settings: { initialWindowSize: 1 << 20 } });
          s.on('connect', () => s.setLocalWindowSize(256 << 20));
          s.on('error', (err) => tell({ t: 'failed', error: err.message }));
          return s;
        });
        for (let i = 0; i < m.streams; i++) {
          const req = sessions[i % m.connections].request({ ':method': 'POST', ':path': '/stream' }, { endStream: false });
          req.once('response', opened);
          req.on('data', (d: Buffer) => take(d.length));
          req.on('error', (err) => tell({ t: 'failed', error: err.message }));
        }
      } else {
        for (let i = 0; i < m.streams; i++) {
          const ws = new WebSocket(`ws://127.0.0.1:${m.port}/stream`, { perMessageDeflate: false });
          ws.once('open', opened);
          ws.on('message', (d: Buffer) => take(d.length));
          ws.on('error', (err) => tell({ t: 'failed', error: err.message }));
        }
      }
    } catch (err) {
      tell({ t: 'failed', error: err instanceof Error ? err.message : String(err) });
    }
  });
}

interface Sink {
  write(i: number, b: Buffer): void;
  readonly count: number;
  close(): Promise<void>;
}

/** A server holding `streams` open streams of `transport`, the client process that opened them, and its messages. */
async function open(transport: Transport, streams: number, connections: number): Promise<{ sink: Sink; ask: (m: ToClient) => Promise<FromClient>; end: () => void }> {
  const child = fork(fileURLToPath(import.meta.url), [], { env: { ...process.env, AMBIT_STREAM_WRITES_CLIENT: '1' } });
  let waiter: ((m: FromClient) => void) | null = null;
  let failed: string | null = null;
  child.on('message', (m: FromClient) => {
    if (m.t === 'failed') failed ??= m.error;
    waiter?.(m);
  });
  child.once('exit', (code) => waiter?.({ t: 'failed', error: `client exited with ${code}` }));
  const ask = (m: ToClient): Promise<FromClient> =>
    new Promise((resolve, reject) => {
      waiter = (r) => {
        waiter = null;
        if (r.t === 'failed') reject(new Error(`bench/stream-writes: ${failed ?? r.error}`));
        else resolve(r);
      };
      child.send(m);
    });
  let sink: Sink;
  let port: number;
  if (transport === 'http2') {
    const server = http2.createServer({ settings: { maxConcurrentStreams: 2 ** 31 - 1 } });
    const held: http2.ServerHttp2Stream[] = [];
    const sessions: http2.ServerHttp2Session[] = [];
    server.on('session', (s) => {
      sessions.push(s);
      s.on('error', () => {});
    });
    server.on('stream', (s) => {
      s.on('error', () => {});
      s.respond({ ':status': 200 });
      held.push(s);
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    port = (server.address() as AddressInfo).port;
    sink = {
      write: (i, b) => void held[i].write(b),
      get count() {
        return held.length;
      },
      close: async () => {
        for (const s of sessions) s.destroy();
        await new Promise<void>((r) => server.close(() => r()));
      },
    };
  } else {
    const server = new WebSocketServer({ host: '127.0.0.1', port: 0, perMessageDeflate: false });
    const held: WebSocket[] = [];
    server.on('connection', (ws) => {
      ws.on('error', () => {});
      held.push(ws);
    });
    await new Promise<void>((r) => server.once('listening', r));
    port = (server.address() as AddressInfo).port;
    sink = {
      write: (i, b) => held[i].send(b),
      get count() {
        return held.length;
      },
      close: async () => {
        for (const ws of held) ws.terminate();
        await new Promise<void>((r) => server.close(() => r()));
      },
    };
  }
  await ask({ t: 'open', transport, port, streams, connections });
  // The client saw every stream answered; the server may not have seen the last ones yet.
  while (sink.count < streams) await new Promise((r) => setImmediate(r));
  return { sink, ask, end: () => child.kill() };
}

/** µs of this process's CPU per write over `writes` writes to random streams, until the client has them all. */
async function measure(sink: Sink, ask: (m: ToClient) => Promise<FromClient>, streams: number, writes: number, bytes: number, batch: number, seed: number): Promise<number> {
  const msg = Buffer.alloc(bytes, 0x61);
  // A fixed sequence of streams per repeat (xorshift), the same for every transport.
  let x = seed >>> 0 || 1;
  const received = ask({ t: 'expect', bytes: writes * bytes });
  const c0 = process.cpuUsage();
  await new Promise<void>((resolve) => {
    let done = 0;
    const turn = (): void => {
      for (let k = 0; k < batch && done < writes; k++, done++) {
        x ^= x << 13;
        x ^= x >>> 17;
        x ^= x << 5;
        sink.write((x >>> 0) % streams, msg);
      }
      if (done < writes) setImmediate(turn);
      else resolve();
    };
    turn();
  });
  await received;
  const c = process.cpuUsage(c0);
  return (c.user + c.system) / writes;
}

interface Row {
  transport: Transport;
  streams: number;
  connections: number;
  usPerWrite: Summary;
}

async function main(): Promise<void> {
  if (process.env.AMBIT_STREAM_WRITES_CLIENT === '1') return client();
  const cl = readCommandLine(process.argv.slice(2), new Set(['quick', 'help']), new Set(['streams', 'connections', 'writes', 'bytes', 'batch', 'repeats', 'transports', 'out']), cliFail('bench/stream-writes', USAGE), USAGE);
  if (cl === null) return;
  const { a, r } = cl;
  const quick = a.quick === true;
  const fail = cliFail('bench/stream-writes', USAGE);
  const streamCounts = (r.str('streams') ?? (quick ? '200,2000' : '1000,10000,100000')).split(',').map((s) => {
    const n = Number(s);
    if (!Number.isSafeInteger(n) || n < 1) fail(`--streams: each count a positive integer, got ${JSON.stringify(s)}`);
    return n;
  });
  const connections = r.int('connections', 32, 1, 10_000);
  const writes = r.int('writes', quick ? 10_000 : 100_000, 1, 1e8);
  const bytes = r.int('bytes', 200, 1, 1 << 20);
  const batch = r.int('batch', 200, 1, 1e6);
  const repeats = r.int('repeats', quick ? 2 : 5, 1, 100);
  const transports = (r.str('transports') ?? 'http2,ws').split(',').map((t) => {
    if (t !== 'http2' && t !== 'ws') fail(`--transports: http2 or ws, got ${JSON.stringify(t)}`);
    return t as Transport;
  });
  const run = new ResultRun({ out: a.out, name: 'stream-writes', fail });
  const out = (s: string) => process.stdout.write(`${s}\n`);
  out(`machine: ${describeMachine(run.machine)}`);
  out(`${writes} writes of ${bytes} bytes to random open streams, ${batch} a turn, ${repeats} repeats after a warm-up; http2: ${connections} connections`);
  // Each ws stream holds a descriptor in each process; leave room for the rest.
  const fdLimit = Number(execFileSync('sh', ['-c', 'ulimit -n']).toString().trim()) || 1024;
  const rows: Row[] = [];
  const skipped: string[] = [];
  for (const transport of transports) {
    for (const streams of streamCounts) {
      if (transport === 'ws' && streams > fdLimit - 256) {
        skipped.push(`ws at ${streams} streams (file limit ${fdLimit})`);
        continue;
      }
      note(`${transport}: opening ${streams} streams`);
      const { sink, ask, end } = await open(transport, streams, Math.min(connections, streams));
      try {
        await measure(sink, ask, streams, Math.min(writes, 20_000), bytes, batch, 7); // warm-up
        const us: number[] = [];
        for (let k = 0; k < repeats; k++) us.push(await measure(sink, ask, streams, writes, bytes, batch, 1000 + k));
        const row: Row = { transport, streams, connections: transport === 'http2' ? Math.min(connections, streams) : streams, usPerWrite: summarize(us) };
        rows.push(row);
        note(`${transport} ${streams} streams: median ${row.usPerWrite.median.toFixed(2)} µs a write`);
      } finally {
        await sink.close();
        end();
      }
    }
  }
  out('');
  out('| transport | open streams | connections | µs of server CPU a write: min | median | p99 |');
  out('|---|---:|---:|---:|---:|---:|');
  for (const x of rows) out(`| ${x.transport} | ${x.streams} | ${x.connections} | ${x.usPerWrite.min.toFixed(2)} | ${x.usPerWrite.median.toFixed(2)} | ${x.usPerWrite.p99.toFixed(2)} |`);
  for (const s of skipped) out(`skipped: ${s}`);
  run.write({ kind: 'stream-writes', startedAt: run.startedAt.toISOString(), machine: run.machine, command: run.command, writes, bytes, batch, repeats, connections, rows, skipped });
  // The medians against open streams, a line per transport, beside the JSON.
  const svgPath = run.path.replace(/\.json$/, '') + '.svg';
  const series = transports.map((t, i) => ({
    name: t === 'http2' ? `http2, ${connections} connections` : 'ws, a socket a stream',
    color: ['#1f77b4', '#d62728'][i % 2],
    dash: DASHES[i % DASHES.length],
    marker: MARKERS[i % MARKERS.length],
    points: rows.filter((x) => x.transport === t).map((x) => [x.streams, x.usPerWrite.median] as const),
  }));
  writeFileSync(svgPath, linePlot({ title: `Server CPU per ${bytes}-byte write to a random open stream (median)`, xLabel: 'open streams', yLabel: 'µs of CPU a write', series, logX: true }));
  out(`results: ${run.shown} and its plot ${svgPath.replace(/.*\//, '')}`);
}

runMain('bench/stream-writes', main);
