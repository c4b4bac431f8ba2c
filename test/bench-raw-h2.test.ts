/**
 * The load's own HTTP/2 client (bench/lib/raw-h2.ts) against node:http2's server: streams open
 * with the headers given, DATA frames arrive whole and in order on their streams, the server's
 * windows are kept (a server that reads nothing stops the client without a protocol error, and
 * its WINDOW_UPDATEs let it go on), PINGs are answered, a reset stream is an error.
 */
import assert from 'node:assert/strict';
import http2 from 'node:http2';
import type { AddressInfo } from 'node:net';
import { describe, it } from 'node:test';
import { RawH2Connection } from '../bench/lib/raw-h2.js';

interface Received {
  headers: http2.IncomingHttpHeaders;
  stream: http2.ServerHttp2Stream;
  data: Buffer[];
  bytes: number;
}

interface Served {
  port: number;
  streams: Received[];
  /** Resolves once the streams have received `total` bytes of DATA in all. */
  arrived(total: number): Promise<void>;
  sessions: http2.ServerHttp2Session[];
  close(): Promise<void>;
}

async function serve(settings: http2.Settings, read: boolean): Promise<Served> {
  const server = http2.createServer({ settings });
  let bytes = 0;
  let waiting: { total: number; resolve: () => void } | null = null;
  const served: Served = {
    port: 0,
    streams: [],
    sessions: [],
    close: async () => {},
    arrived: (total) => new Promise<void>((resolve) => (bytes >= total ? resolve() : (waiting = { total, resolve }))),
  };
  server.on('session', (s) => served.sessions.push(s));
  server.on('stream', (stream, headers) => {
    const rec: Received = { headers, stream, data: [], bytes: 0 };
    served.streams.push(rec);
    stream.respond({ ':status': 200, 'content-type': 'application/grpc' });
    stream.write(Buffer.from([0, 0, 0, 0, 1, 7])); // a first message, as the node's welcome
    stream.on('data', (c: Buffer) => {
      rec.data.push(c);
      rec.bytes += c.length;
      bytes += c.length;
      if (waiting !== null && bytes >= waiting.total) waiting.resolve();
    });
    if (!read) stream.pause();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  served.port = (server.address() as AddressInfo).port;
  served.close = async () => {
    for (const s of served.sessions) s.destroy();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  };
  return served;
}

const HEADERS: [string, string][] = [
  [':method', 'POST'],
  [':scheme', 'http'],
  [':path', '/ambit.v1.DeviceService/Connect'],
  [':authority', 'localhost'],
  ['content-type', 'application/grpc'],
  ['te', 'trailers'],
  ['authorization', `Bearer ${'x'.repeat(300)}`], // a length past HPACK's one-byte prefix
];

describe('bench raw HTTP/2 client', () => {
  it('opens streams with its headers and writes DATA frames that arrive whole and in order per stream', async () => {
    const srv = await serve({}, true);
    const c = await RawH2Connection.connect('127.0.0.1', srv.port);
    try {
      const ids = Array.from({ length: 5 }, () => c.open(HEADERS));
      await c.until(() => ids.every((id) => c.received(id) > 0));
      assert.equal(srv.streams.length, 5);
      for (const s of srv.streams) {
        assert.equal(s.headers[':path'], '/ambit.v1.DeviceService/Connect');
        assert.equal(s.headers['content-type'], 'application/grpc');
        assert.equal(s.headers.authorization, `Bearer ${'x'.repeat(300)}`);
      }
      const payloads = Array.from({ length: 7 }, (_, k) => Buffer.from(`message ${k} `.repeat(k + 1)));
      let sent = 0;
      while (sent < 1000) {
        const r = c.writeData(ids, sent % ids.length, Math.min(64, 1000 - sent), payloads, sent);
        sent += r.sent;
        if (r.full) await c.drained();
        else if (r.sent === 0) await new Promise<void>((resolve) => (c.onProgress = () => resolve()));
      }
      // Frame k went to stream k mod 5 with payload k mod 7.
      const want = ids.map((_, i) => Buffer.concat(Array.from({ length: 200 }, (_, j) => payloads[(i + 5 * j) % 7])));
      const total = want.reduce((n, b) => n + b.length, 0);
      await srv.arrived(total);
      for (let i = 0; i < ids.length; i++) assert.deepEqual(Buffer.concat(srv.streams[i].data), want[i], `stream ${i}`);
      // A PING from the server is answered.
      const acked = await new Promise<boolean>((resolve, reject) => srv.sessions[0].ping((err) => (err === null ? resolve(true) : reject(err))));
      assert.equal(acked, true);
    } finally {
      c.close();
      await srv.close();
    }
  });

  it('keeps the server\'s windows: stops where a stream\'s window is shut, goes on when the server reads', async () => {
    const srv = await serve({ initialWindowSize: 1000 }, false);
    const c = await RawH2Connection.connect('127.0.0.1', srv.port);
    try {
      const id = c.open(HEADERS);
      await c.until(() => c.received(id) > 0);
      const payload = [Buffer.alloc(100, 1)];
      let sent = c.writeData([id], 0, 50, payload, 0).sent;
      assert.equal(sent, 10, 'a window of 1000 bytes takes ten frames of 100');
      // A PING's answer comes after the server took every frame sent before it: no WINDOW_UPDATE
      // came meanwhile (nobody reads), and no frame broke the window (no error).
      await new Promise<void>((resolve, reject) => srv.sessions[0].ping((err) => (err === null ? resolve() : reject(err))));
      assert.equal(c.writeData([id], 0, 50, payload, 0).sent, 0, 'the window is still shut');
      assert.equal(c.error, null, 'and the server saw no flow-control error');
      // The server reads: its WINDOW_UPDATEs let the client go on.
      srv.streams[0].stream.resume();
      while (sent < 100) {
        const r = c.writeData([id], 0, 100 - sent, payload, 0);
        sent += r.sent;
        if (r.sent === 0) await new Promise<void>((resolve) => (c.onProgress = () => resolve()));
      }
      await srv.arrived(10_000);
      assert.equal(srv.streams[0].bytes, 10_000);
      assert.equal(c.error, null);
    } finally {
      c.close();
      await srv.close();
    }
  });

  it('fails when the server resets a stream', { timeout: 20_000 }, async () => {
    const srv = await serve({}, true);
    const c = await RawH2Connection.connect('127.0.0.1', srv.port);
    try {
      const id = c.open(HEADERS);
      await c.until(() => c.received(id) > 0);
      srv.streams[0].stream.close(http2.constants.NGHTTP2_CANCEL);
      await assert.rejects(c.until(() => false), /reset by the server|ended by the server/);
      assert.throws(() => c.writeData([id], 0, 1, [Buffer.alloc(1)], 0));
    } finally {
      c.close();
      await srv.close();
    }
  });
});
