/**
 * The two transports of a device stream (services/edge/device-stream.ts): the gateway's own gRPC
 * framing on the HTTP/2 stream (h2-device-stream.ts, the default) and grpc-js. A raw node:http2
 * client sends each stream byte by byte where it matters (split prefixes, messages over many
 * DATA frames, gzip, deadlines, oversized and malformed messages, wrong content types and tokens)
 * to a node of each kind, and the two must answer alike: the same response messages, gRPC status
 * and `ambit-field`. Also: the pinned grpc-js lets the gateway take its streams over (if an
 * upgrade changes that, the node falls back to grpc-js and this fails), and every other method
 * still reaches grpc-js.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import * as http2 from 'node:http2';
import { gzipSync } from 'node:zlib';
import * as grpc from '@grpc/grpc-js';
import { create, fromBinary, toBinary } from '@bufbuild/protobuf';
import { ConnectRequestSchema, ConnectResponseSchema, DeviceService } from '../../api/gen/ambit/v1/device_pb.js';
import { H2DeviceStream, takeOverStreams } from '../../services/edge/h2-device-stream.js';
import { type TestServer, startTestServer, unary } from '../support/grpc.js';

const CONNECT = `/${DeviceService.typeName}/Connect`;

type Init = Parameters<typeof create<typeof ConnectRequestSchema>>[1];
const msg = (m: Init): Buffer => Buffer.from(toBinary(ConnectRequestSchema, create(ConnectRequestSchema, m)));
const frame = (body: Uint8Array, flag = 0): Buffer => {
  const out = Buffer.alloc(5 + body.length);
  out[0] = flag;
  out.writeUInt32BE(body.length, 1);
  out.set(body, 5);
  return out;
};
const hello = (): Buffer => frame(msg({ message: { case: 'hello', value: { resumeToken: '' } } }));
const subscribe = (requestId: string, id: string): Buffer => frame(msg({ message: { case: 'subscribe', value: { requestId, subscription: { id, filters: [{}] } } } }));
const unsubscribe = (requestId: string, id: string): Buffer => frame(msg({ message: { case: 'unsubscribe', value: { requestId, subscriptionId: id } } }));

/** What a client saw of one stream. */
interface Seen {
  http: number;
  /** Response messages: 'welcome', 'reply:<requestId>:<code>', 'notification'. */
  messages: string[];
  code: number | null;
  details: string;
  field: string | null;
  /** The status came alone, in the response headers. */
  trailersOnly: boolean;
}

interface CallPlan {
  token?: string | null;
  headers?: Record<string, string>;
  /** Written one after the other (each its own DATA frame). */
  writes: Buffer[];
  /** Half-close after the writes (else the server must end the stream by itself). */
  end: boolean;
}

/** One Connect stream over a raw HTTP/2 connection of its own; resolves when the stream closes. */
function rawCall(port: number, token: string, plan: CallPlan): Promise<Seen> {
  return new Promise((resolve, reject) => {
    const session = http2.connect(`http://127.0.0.1:${port}`);
    session.on('error', reject);
    const auth = plan.token === null ? {} : { authorization: `Bearer ${plan.token ?? token}` };
    const req = session.request({ ':method': 'POST', ':path': CONNECT, 'content-type': 'application/grpc', te: 'trailers', ...auth, ...plan.headers });
    const seen: Seen = { http: 0, messages: [], code: null, details: '', field: null, trailersOnly: false };
    const chunks: Buffer[] = [];
    const status = (h: http2.IncomingHttpHeaders) => {
      if (h['grpc-status'] === undefined) return false;
      seen.code = Number(h['grpc-status']);
      seen.details = decodeURI(String(h['grpc-message'] ?? ''));
      seen.field = h['ambit-field'] === undefined ? null : String(h['ambit-field']);
      // The server ended the call: so does this side, and the stream closes.
      if (!req.writableEnded) req.end();
      return true;
    };
    req.on('response', (h) => {
      seen.http = Number(h[':status']);
      seen.trailersOnly = status(h);
    });
    req.on('trailers', (h) => status(h));
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('error', () => {});
    req.on('close', () => {
      const all = Buffer.concat(chunks);
      for (let at = 0; at + 5 <= all.length; ) {
        const len = all.readUInt32BE(at + 1);
        const m = fromBinary(ConnectResponseSchema, all.subarray(at + 5, at + 5 + len)).message;
        seen.messages.push(m.case === 'reply' ? `reply:${m.value.requestId}:${m.value.status?.code ?? 0}` : String(m.case));
        at += 5 + len;
      }
      session.close();
      resolve(seen);
    });
    const writeAll = async () => {
      for (const w of plan.writes) {
        if (req.closed || req.destroyed || req.writableEnded) return;
        // One write at a time, each on its way before the next (so each is its own DATA frame).
        await new Promise<void>((done) => req.write(w, () => done()));
      }
      if (plan.end && !req.closed && !req.writableEnded) req.end();
    };
    writeAll().catch(reject);
  });
}

/** The bytes of `b` one write each (split length prefixes included). */
const bytewise = (b: Buffer): Buffer[] => Array.from(b, (x) => Buffer.from([x]));
/** `b` in pieces of `n` bytes. */
const pieces = (b: Buffer, n: number): Buffer[] => {
  const out: Buffer[] = [];
  for (let i = 0; i < b.length; i += n) out.push(b.subarray(i, i + n));
  return out;
};

const CASES: [string, (t: (sub: string, scopes?: string[]) => string) => CallPlan, Partial<Seen>][] = [
  ['hello, subscribe, half-close', () => ({ writes: [Buffer.concat([hello(), subscribe('r1', 's1')])], end: true }), { messages: ['welcome', 'reply:r1:0'], code: 0, field: null }],
  [
    'every byte in a DATA frame of its own',
    () => ({ writes: bytewise(Buffer.concat([hello(), subscribe('r1', 's1'), unsubscribe('r2', 'none')])), end: true }),
    { messages: ['welcome', 'reply:r1:0', `reply:r2:${grpc.status.NOT_FOUND}`], code: 0 },
  ],
  [
    'a 200 kB message over many DATA frames, beside small ones',
    () => ({ writes: pieces(Buffer.concat([hello(), unsubscribe('big', 'x'.repeat(200_000)), subscribe('r1', 's1')]), 7001), end: true }),
    { messages: ['welcome', `reply:big:${grpc.status.INVALID_ARGUMENT}`, 'reply:r1:0'], code: 0 },
  ],
  [
    'gzip-compressed messages (grpc-encoding: gzip)',
    () => ({ headers: { 'grpc-encoding': 'gzip' }, writes: [frame(gzipSync(msg({ message: { case: 'hello', value: { resumeToken: '' } } })), 1), subscribe('r1', 's1')], end: true }),
    { messages: ['welcome', 'reply:r1:0'], code: 0 },
  ],
  ['a compressed message in an encoding the server lacks', () => ({ headers: { 'grpc-encoding': 'snappy' }, writes: [frame(Buffer.from('xyz'), 1)], end: false }), { messages: [], code: grpc.status.UNIMPLEMENTED }],
  ['a message over the size limit', () => ({ writes: [Buffer.from([0, 0, 0x50, 0, 0])], end: false }), { messages: [], code: grpc.status.RESOURCE_EXHAUSTED, field: null }],
  ['a deadline that passes on an open stream', () => ({ headers: { 'grpc-timeout': '300m' }, writes: [hello()], end: false }), { messages: ['welcome'], code: grpc.status.DEADLINE_EXCEEDED, details: 'Deadline exceeded' }],
  ['a deadline longer than a timer can hold (none, in effect)', () => ({ headers: { 'grpc-timeout': '99999999S' }, writes: [hello()], end: true }), { messages: ['welcome'], code: 0 }],
  ['a malformed grpc-timeout', () => ({ headers: { 'grpc-timeout': 'soon' }, writes: [hello()], end: false }), { messages: [], code: grpc.status.INTERNAL }],
  ['no token', () => ({ token: null, writes: [hello()], end: false }), { http: 200, messages: [], code: grpc.status.UNAUTHENTICATED, trailersOnly: true }],
  ['a token without the device scope', (t) => ({ token: t('pub', ['publish']), writes: [hello()], end: false }), { messages: [], code: grpc.status.PERMISSION_DENIED, trailersOnly: true }],
  ['a first message that is not hello', () => ({ writes: [subscribe('r1', 's1')], end: false }), { messages: [], code: grpc.status.FAILED_PRECONDITION, field: 'hello' }],
  ['bytes that are not a ConnectRequest', () => ({ writes: [hello(), frame(Buffer.from([0xff, 0xff, 0xff]))], end: false }), { messages: ['welcome'], code: grpc.status.INVALID_ARGUMENT, field: 'request' }],
  ['a first message that is a location (read without decoding it)', () => ({ writes: [frame(msg({ message: { case: 'location', value: { lat: 1, lon: 2 } } }))], end: false }), { messages: [], code: grpc.status.FAILED_PRECONDITION, field: 'hello' }],
  [
    'locations among other requests, every byte a DATA frame of its own',
    () => ({
      writes: bytewise(
        Buffer.concat([
          hello(),
          frame(msg({ message: { case: 'location', value: { lat: 1, lon: 2 } } })),
          subscribe('r1', 's1'),
          frame(msg({ message: { case: 'location', value: { lat: 91, lon: 0 } } })),
          unsubscribe('r2', 'none'),
          frame(msg({ message: { case: 'location', value: { lat: -90, lon: NaN } } })),
        ]),
      ),
      end: true,
    }),
    { messages: ['welcome', 'reply:r1:0', `reply::${grpc.status.INVALID_ARGUMENT}`, `reply:r2:${grpc.status.NOT_FOUND}`, `reply::${grpc.status.INVALID_ARGUMENT}`], code: 0 },
  ],
  [
    'a location out of range, then half-close',
    () => ({ writes: [hello(), frame(msg({ message: { case: 'location', value: { lat: 91, lon: 0 } } }))], end: true }),
    { messages: ['welcome', `reply::${grpc.status.INVALID_ARGUMENT}`], code: 0 },
  ],
];

describe('device stream transports', { timeout: 120_000 }, () => {
  const nodes = new Map<string, TestServer>();
  before(async () => {
    for (const deviceStreams of ['http2', 'grpc-js'] as const) nodes.set(deviceStreams, await startTestServer({ deviceStreams }));
  });
  after(async () => {
    for (const n of nodes.values()) {
      assert.deepEqual(n.unexpectedErrors(), []);
      await n.stop();
    }
  });

  it('each node serves device streams with the transport it was configured for', () => {
    assert.equal(nodes.get('http2')!.server.deviceStreams, 'http2', 'the gateway took over device streams (a grpc-js upgrade changed its servers if not)');
    assert.equal(nodes.get('grpc-js')!.server.deviceStreams, 'grpc-js');
  });

  let device = 0;
  for (const [name, plan, expected] of CASES) {
    it(`both answer alike: ${name}`, async () => {
      const seen: Record<string, Seen> = {};
      for (const [kind, n] of nodes) {
        const id = `tr-${device++}`;
        const token = (sub: string, scopes = ['device']) => n.token(sub, scopes);
        seen[kind] = await rawCall(n.server.port!, token(id), plan(token));
      }
      const own = seen['http2'];
      const theirs = seen['grpc-js'];
      for (const [k, v] of Object.entries(expected)) assert.deepEqual(own[k as keyof Seen], v, `${k}: ${JSON.stringify(own)}`);
      assert.deepEqual({ ...own, details: '' }, { ...theirs, details: '' }, 'the same answer from both transports');
      if (own.code === grpc.status.UNAUTHENTICATED || own.code === grpc.status.FAILED_PRECONDITION) assert.equal(own.details, theirs.details);
    });
  }

  it('a stream the transport ends (deadline, size limit) ends its session at once, the client still connected', async () => {
    for (const [kind, n] of nodes) {
      const ops = n.clients();
      const opsMd = n.meta('ops', ['ops']);
      for (const [name, headers, second] of [
        ['deadline', { 'grpc-timeout': '200m' }, null],
        ['size limit', {}, Buffer.from([0, 0x7f, 0, 0, 0])],
      ] as const) {
        const session = http2.connect(`http://127.0.0.1:${n.server.port}`);
        const req = session.request({ ':method': 'POST', ':path': CONNECT, 'content-type': 'application/grpc', te: 'trailers', authorization: `Bearer ${n.token(`gone-${kind}-${name.replace(' ', '-')}`, ['device'])}`, ...headers });
        req.on('error', () => {});
        const status = new Promise<string>((resolve) => {
          req.on('response', (h) => h['grpc-status'] !== undefined && resolve(String(h['grpc-status'])));
          req.on('trailers', (h) => resolve(String(h['grpc-status'])));
        });
        req.on('data', () => {});
        req.write(hello());
        if (second !== null) req.write(second);
        assert.notEqual(await status, '0', `${kind}, ${name}: the stream failed`);
        // The client neither ends nor resets its side: the session must be gone all the same.
        const stats = await unary<{ connectedDevices: bigint }>(ops.ops, 'getStats', {}, opsMd);
        assert.equal(stats.connectedDevices, 0n, `${kind}, ${name}: no session left`);
        req.close();
        session.close();
      }
    }
  });

  it('a status sent while a resume replays what came during a pause: the stream still reads to its end and closes', async () => {
    const server = http2.createServer();
    let gone = 0;
    let serverClosed!: () => void;
    const closed = new Promise<void>((resolve) => (serverClosed = resolve));
    server.on('stream', (stream, headers) => {
      const t = new H2DeviceStream(stream, headers, { maxReceiveBytes: 1000, decode: (b) => b });
      let first = true;
      t.attach({
        onMessage: () => {
          if (!first) return;
          // The session pauses reads on the first message (its replies back up) and resumes later:
          // the rest of the chunk, a prefix over the limit, waits in the backlog until then.
          first = false;
          t.pause();
          setImmediate(() => t.resume());
        },
        onLocation: () => {},
        onHalfClose: () => {},
        onGone: () => gone++,
      });
      stream.on('close', serverClosed);
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const session = http2.connect(`http://127.0.0.1:${(server.address() as { port: number }).port}`);
    try {
      const req = session.request({ ':method': 'POST', ':path': CONNECT, 'content-type': 'application/grpc', te: 'trailers' });
      req.on('error', () => {});
      const code = new Promise<string>((resolve) => req.on('response', (h) => resolve(String(h['grpc-status']))));
      req.write(Buffer.concat([hello(), Buffer.from([0, 0, 0, 0x13, 0x88])]));
      assert.equal(await code, String(grpc.status.RESOURCE_EXHAUSTED));
      req.write(hello());
      req.end(hello());
      await closed;
      assert.equal(gone, 1, 'the listener heard of the end once');
    } finally {
      session.close();
      server.close();
    }
  });

  it('a content type that is not gRPC gets HTTP 415 from both', async () => {
    for (const n of nodes.values()) {
      const session = http2.connect(`http://127.0.0.1:${n.server.port}`);
      const req = session.request({ ':method': 'POST', ':path': CONNECT, 'content-type': 'text/plain' });
      const status = await new Promise<number>((resolve) => req.on('response', (h) => resolve(Number(h[':status']))));
      req.close();
      session.close();
      assert.equal(status, 415);
    }
  });

  it('other methods, and unknown ones, still reach grpc-js on a node that took device streams over', async () => {
    const n = nodes.get('http2')!;
    const clients = n.clients();
    const md = n.meta('ops', ['ops']);
    const stats = await unary<{ engine: string }>(clients.ops, 'getStats', {}, md);
    assert.ok(stats.engine.length > 0);
    const seen = await new Promise<number>((resolve) => {
      const session = http2.connect(`http://127.0.0.1:${n.server.port}`);
      const req = session.request({ ':method': 'POST', ':path': '/ambit.v1.DeviceService/NoSuchMethod', 'content-type': 'application/grpc', te: 'trailers' });
      req.on('response', (h) => {
        session.close();
        resolve(Number(h['grpc-status']));
      });
      req.end();
    });
    assert.equal(seen, grpc.status.UNIMPLEMENTED);
  });

  it('takeOverStreams needs a bound server and leaves an unbound one as it is', () => {
    const server = new grpc.Server();
    assert.equal(takeOverStreams(server, new Map()), false);
    server.forceShutdown();
  });
});
