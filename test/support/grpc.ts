/**
 * Helpers for the gRPC API suites (test/service/api-*.test.ts): an embedded server on a free port,
 * real @grpc/grpc-js clients over loopback, token metadata, promise wrappers for unary and
 * client-streaming calls, status assertions (code, `ambit-field` metadata, "<field>: " details),
 * a raw client that sends bytes as they are, and a device-stream driver that keeps every message
 * it receives and waits for the next one of a kind with a timeout.
 */
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import * as grpc from '@grpc/grpc-js';
import { service as healthService } from 'grpc-health-check';
import { DEFAULT_LIMITS } from '../../src/model/limits.js';
import { TokenAuthority } from '../../services/edge/auth.js';
import { Gateway } from '../../services/edge/gateway.js';
import type { Hub } from '../../services/hub/port.js';
import { DEFAULT_CONFIG, type ServerConfig } from '../../services/process/config.js';
import { rootLogger } from '../../services/process/log.js';
import { Metrics } from '../../services/process/metrics.js';
import { type RunningServer, type StartOptions, startServer } from '../../services/process/server.js';
import { grpcClient } from '../../api/rpc.js';
import { fromBinary } from '@bufbuild/protobuf';
import { anyUnpack } from '@bufbuild/protobuf/wkt';
import { BadRequestSchema, RetryInfoSchema } from '../../api/gen/google/rpc/error_details_pb.js';
import { StatusSchema as RpcStatusSchema } from '../../api/gen/google/rpc/status_pb.js';
import { type ConnectResponse, DeviceService, type Reply, type Welcome } from '../../api/gen/ambit/v1/device_pb.js';
import { OpsService } from '../../api/gen/ambit/v1/ops_pb.js';
import { PublisherService } from '../../api/gen/ambit/v1/publisher_pb.js';
import type { Notification, RequestStatus } from '../../api/gen/ambit/v1/types_pb.js';

export const Status = grpc.status;

/** Plain init objects are what the serializer of api/rpc.ts takes; tests write messages this way. */
export type Init = any; // eslint-disable-line @typescript-eslint/no-explicit-any

/**
 * The embedded server of every suite: fast engine, dev secret, free ports. Its log (warn and up)
 * is kept in memory: `unexpectedErrors()` lists what it logged at error level (a request that
 * ended INTERNAL, a failed shutdown step).
 */
export async function startTestServer(config: Partial<ServerConfig> = {}, options: StartOptions = {}): Promise<TestServer> {
  const lines: string[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      lines.push(...chunk.toString('utf8').split('\n').filter((l) => l !== ''));
      done();
    },
  });
  const server = await startServer({ host: '127.0.0.1', port: 0, metricsPort: 0, engine: 'fast', dev: true, shutdownGraceS: 1, logLevel: 'warn', ...config }, rootLogger('warn', sink), options);
  return new TestServer(server, lines);
}

/**
 * A server in front of a hub the test built (e.g. an EmbeddedHub with an injected clock): the
 * gateway with the device, publisher and ops services on a free port, metrics on a free port, the
 * same in-memory log as startTestServer. stop() closes the hub too.
 */
export async function startHubServer(hub: Hub, secret = 'hub-server-test-secret-0123456789abcdef'): Promise<TestServer> {
  const lines: string[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      lines.push(...chunk.toString('utf8').split('\n').filter((l) => l !== ''));
      done();
    },
  });
  const authority = new TokenAuthority(secret);
  const metrics = new Metrics(hub, 'all');
  const gateway = new Gateway(hub, authority, DEFAULT_LIMITS, metrics, rootLogger('warn', sink).child({ component: 'gateway' }));
  const server = new grpc.Server();
  gateway.addTo(server);
  const port = await new Promise<number>((resolve, reject) => server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (e, p) => (e ? reject(e) : resolve(p))));
  assert.ok(gateway.takeOverDeviceStreams(server), 'the gateway serves device streams itself');
  const metricsPort = await metrics.listen('127.0.0.1', 0);
  let stopped: Promise<void> | null = null;
  const running: RunningServer = {
    config: { ...DEFAULT_CONFIG, host: '127.0.0.1', port, metricsPort },
    port,
    metricsPort,
    webPort: null,
    authority,
    hub,
    engineDetail: 'test hub',
    deviceStreams: 'http2',
    partitionPaths: [],
    seen: null,
    expiry: null,
    stop: () =>
      (stopped ??= (async () => {
        gateway.drain();
        server.forceShutdown();
        await metrics.close();
        await hub.close();
      })()),
  };
  return new TestServer(running, lines);
}

export class TestServer {
  readonly target: string;
  private readonly opened: Clients[] = [];

  constructor(
    readonly server: RunningServer,
    private readonly logLines: string[] = [],
  ) {
    this.target = `127.0.0.1:${server.port}`;
  }

  /** Log records at error level or above (pino level >= 50). */
  unexpectedErrors(): { level: number; msg: string; err?: unknown }[] {
    return this.logLines.map((l) => JSON.parse(l) as { level: number; msg: string }).filter((r) => r.level >= 50);
  }

  /** A token of this server's authority. */
  token(subject: string, scopes: readonly string[], ttlSeconds?: number): string {
    return this.server.authority!.issue({ subject, scopes, ttlSeconds });
  }

  /** Metadata carrying a fresh token. */
  meta(subject: string, scopes: readonly string[]): grpc.Metadata {
    return meta(this.token(subject, scopes));
  }

  /**
   * Clients sharing one channel; closed by stop(). (grpc-js channels to one target share their
   * connection unless `grpc.use_local_subchannel_pool` is set: tests that need a connection of
   * their own set it.)
   */
  clients(creds: grpc.ChannelCredentials = grpc.credentials.createInsecure(), options: grpc.ChannelOptions = {}): Clients {
    const c = new Clients(this.target, creds, options);
    this.opened.push(c);
    return c;
  }

  async metrics(): Promise<string> {
    const res = await fetch(`http://127.0.0.1:${this.server.metricsPort}/metrics`);
    assert.equal(res.status, 200);
    return res.text();
  }

  async stop(): Promise<void> {
    for (const c of this.opened.splice(0)) c.close();
    await this.server.stop();
  }
}

const DeviceClient = grpcClient(DeviceService);
const PublisherClient = grpcClient(PublisherService);
const OpsClient = grpcClient(OpsService);

export class Clients {
  readonly device: grpc.Client;
  readonly publisher: grpc.Client;
  readonly ops: grpc.Client;
  readonly raw: grpc.Client;

  constructor(target: string, creds: grpc.ChannelCredentials, options: grpc.ChannelOptions = {}) {
    // One channel for all four (the first client's), as an app would share its connection.
    this.device = new DeviceClient(target, creds, options);
    const channelOverride = this.device.getChannel();
    this.publisher = new PublisherClient(target, creds, { ...options, channelOverride });
    this.ops = new OpsClient(target, creds, { ...options, channelOverride });
    this.raw = new grpc.Client(target, creds, { ...options, channelOverride });
  }

  close(): void {
    this.device.close();
  }
}

/** `authorization: Bearer <token>` (none when token is undefined). */
export function meta(token?: string): grpc.Metadata {
  const md = new grpc.Metadata();
  if (token !== undefined) md.set('authorization', `Bearer ${token}`);
  return md;
}

type UnaryFn = (req: unknown, md: grpc.Metadata, opts: grpc.CallOptions, cb: (err: grpc.ServiceError | null, res: unknown) => void) => grpc.ClientUnaryCall;
type ClientStreamFn = (md: grpc.Metadata, opts: grpc.CallOptions, cb: (err: grpc.ServiceError | null, res: unknown) => void) => grpc.ClientWritableStream<unknown>;

/** A unary call as a promise; rejects with the grpc-js ServiceError. */
export function unary<Res = Init>(client: grpc.Client, method: string, req: Init, md: grpc.Metadata = new grpc.Metadata(), opts: grpc.CallOptions = {}): Promise<Res> {
  const fn = (client as unknown as Record<string, UnaryFn>)[method];
  assert.equal(typeof fn, 'function', `no method ${method}`);
  return new Promise<Res>((resolve, reject) => {
    fn.call(client, req, md, opts, (err, res) => (err ? reject(err) : resolve(res as Res)));
  });
}

/**
 * A client-streaming call: writes each message (waiting for drain), half-closes, resolves with the
 * response. Writes after the server has answered are dropped, as grpc-js drops them.
 */
export function clientStream<Res = Init>(client: grpc.Client, method: string, messages: readonly Init[], md: grpc.Metadata = new grpc.Metadata(), opts: grpc.CallOptions = {}): Promise<Res> {
  const fn = (client as unknown as Record<string, ClientStreamFn>)[method];
  assert.equal(typeof fn, 'function', `no method ${method}`);
  return new Promise<Res>((resolve, reject) => {
    let done = false;
    const call = fn.call(client, md, opts, (err, res) => {
      done = true;
      if (err) reject(err);
      else resolve(res as Res);
    });
    void (async () => {
      for (const m of messages) {
        if (done) return;
        if (!call.write(m)) await new Promise<void>((r) => call.once('drain', r));
      }
      if (!done) call.end();
    })().catch(reject);
  });
}

/** A unary call with raw request bytes (identity serializer), for malformed frames. */
export function rawUnary(clients: Clients, path: string, bytes: Buffer, md: grpc.Metadata): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    clients.raw.makeUnaryRequest(path, (b: Buffer) => b, (b: Buffer) => b, bytes, md, {}, (err, res) => (err ? reject(err) : resolve(res!)));
  });
}

/** A client-streaming call with raw message bytes. */
export function rawClientStream(clients: Clients, path: string, frames: readonly Buffer[], md: grpc.Metadata): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const call = clients.raw.makeClientStreamRequest(path, (b: Buffer) => b, (b: Buffer) => b, md, {}, (err, res) => (err ? reject(err) : resolve(res!)));
    for (const f of frames) call.write(f);
    call.end();
  });
}

/** A device stream with raw frames: sends them, half-closes, and resolves with what came back. */
export function rawConnect(clients: Clients, frames: readonly Buffer[], md: grpc.Metadata, timeoutMs = 3000): Promise<{ messages: Buffer[]; status: StreamEnd }> {
  return new Promise((resolve, reject) => {
    const call = clients.raw.makeBidiStreamRequest('/ambit.v1.DeviceService/Connect', (b: Buffer) => b, (b: Buffer) => b, md, {});
    const messages: Buffer[] = [];
    const timer = setTimeout(() => {
      call.cancel();
      reject(new Error(`raw stream did not end within ${timeoutMs} ms`));
    }, timeoutMs);
    call.on('data', (b: Buffer) => messages.push(b));
    call.on('error', () => {});
    call.on('status', (s: grpc.StatusObject) => {
      clearTimeout(timer);
      resolve({ messages, status: { code: s.code, details: s.details, metadata: s.metadata } });
    });
    for (const f of frames) call.write(f);
    call.end();
  });
}

/** Checks a call failed with `code`; with `field`, the ambit-field metadata and a "<field>: " details prefix. */
export async function expectStatus(p: Promise<unknown>, code: grpc.status, field?: string, what = ''): Promise<grpc.ServiceError> {
  let err: grpc.ServiceError | undefined;
  try {
    await p;
  } catch (e) {
    err = e as grpc.ServiceError;
  }
  const ctx = what === '' ? '' : ` (${what})`;
  assert.ok(err !== undefined, `expected ${Status[code]}${ctx}, but the call succeeded`);
  checkStatus(err, code, field, what);
  return err;
}

/** The same checks on a status object (a stream's final status or a ServiceError). */
export function checkStatus(s: { code: number; details: string; metadata?: grpc.Metadata }, code: grpc.status, field?: string, what = ''): void {
  const ctx = what === '' ? '' : ` (${what})`;
  assert.equal(Status[s.code], Status[code], `status code${ctx}: ${s.details}`);
  if (field !== undefined) {
    const got = s.metadata?.get('ambit-field') ?? [];
    assert.deepEqual(got, [metadataField(field)], `ambit-field metadata${ctx}: ${s.details}`);
    assert.ok(s.details.startsWith(`${field}: `), `details must start with "${field}: "${ctx}, got ${JSON.stringify(s.details)}`);
  }
  // Bad input also comes in gRPC's rich error model: google.rpc.Status with a BadRequest naming the field.
  const bin = s.metadata?.get('grpc-status-details-bin') ?? [];
  if (code === grpc.status.INVALID_ARGUMENT && field !== undefined) {
    assert.equal(bin.length, 1, `grpc-status-details-bin${ctx}`);
    const st = fromBinary(RpcStatusSchema, bin[0] as Buffer);
    assert.equal(st.code, code, `details status code${ctx}`);
    assert.equal(st.message, s.details, `details message${ctx}`);
    assert.equal(st.details.length, 1, `one detail${ctx}`);
    const bad = anyUnpack(st.details[0], BadRequestSchema);
    assert.ok(bad !== undefined, `a google.rpc.BadRequest${ctx}: ${st.details[0].typeUrl}`);
    assert.deepEqual(
      bad.fieldViolations.map((v) => [v.field, v.description]),
      [[field, s.details.slice(field.length + 2)]],
      `the field violation${ctx}`,
    );
  } else if (code === grpc.status.RESOURCE_EXHAUSTED && bin.length > 0) {
    // A rate limit's refusal: a google.rpc.RetryInfo with the wait the trailer gives.
    const st = fromBinary(RpcStatusSchema, bin[0] as Buffer);
    const retry = anyUnpack(st.details[0], RetryInfoSchema);
    assert.ok(retry !== undefined, `a google.rpc.RetryInfo${ctx}: ${st.details[0]?.typeUrl}`);
    const ms = Number(retry.retryDelay?.seconds ?? 0n) * 1000 + (retry.retryDelay?.nanos ?? 0) / 1e6;
    assert.equal(String(ms), String(s.metadata?.get('ambit-retry-after-ms')[0]), `the retry delay and the ambit-retry-after-ms trailer${ctx}`);
  } else if (code !== grpc.status.INVALID_ARGUMENT) {
    assert.deepEqual(bin, [], `no BadRequest for ${Status[code]}${ctx}`);
  }
}

/** The `ambit-field` metadata of a field: printable ASCII, anything else as a JSON \\uXXXX escape (services/edge/convert.ts). */
export function metadataField(field: string): string {
  let out = '';
  for (let i = 0; i < field.length; i++) {
    const u = field.charCodeAt(i);
    out += u >= 0x20 && u <= 0x7e ? field[i] : `\\u${u.toString(16).padStart(4, '0')}`;
  }
  return out;
}

/** Checks an in-stream RequestStatus. */
export function checkReplyStatus(s: RequestStatus | undefined, code: grpc.status, field?: string, what = ''): void {
  const ctx = what === '' ? '' : ` (${what})`;
  assert.ok(s !== undefined, `reply without a status${ctx}`);
  assert.equal(Status[s.code], Status[code], `reply code${ctx}: ${s.message}`);
  if (field !== undefined) {
    assert.equal(s.field, field, `reply field${ctx}: ${s.message}`);
    assert.ok(s.message.startsWith(`${field}: `), `reply message must start with "${field}: "${ctx}, got ${JSON.stringify(s.message)}`);
  }
}

/**
 * Waits until `check` returns true, polling every 10 ms; fails with `what` after `timeoutMs`. Only
 * for states nothing signals (a metric, another process's view); the bound is a failure timeout,
 * never something a test asserts on.
 */
export async function eventually(check: () => boolean | Promise<boolean>, what: string, timeoutMs = 3000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await check()) return;
    if (Date.now() > deadline) assert.fail(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise<void>((r) => setTimeout(r, 10));
  }
}

/** Rejects with `what` when `p` has not settled within `timeoutMs` (a hang guard, not a timing assertion). */
export async function within<T>(p: Promise<T>, timeoutMs: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const t = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: not settled within ${timeoutMs} ms`)), timeoutMs);
  });
  try {
    return await Promise.race([p, t]);
  } finally {
    clearTimeout(timer);
  }
}

type Kind = 'welcome' | 'reply' | 'notification';
type ValueOf<K extends Kind> = K extends 'welcome' ? Welcome : K extends 'reply' ? Reply : Notification;

export interface StreamEnd {
  code: grpc.status;
  details: string;
  metadata: grpc.Metadata;
}

/**
 * Drives one device stream: `received` holds every message in arrival order; `next(kind)` hands
 * out the next not-yet-taken message of that kind (waiting up to a timeout). `ended` resolves
 * with the final status.
 */
export class DeviceStream {
  readonly call: grpc.ClientDuplexStream<Init, ConnectResponse>;
  readonly received: ConnectResponse[] = [];
  readonly ended: Promise<StreamEnd>;
  private final: StreamEnd | null = null;
  private readonly queues: Record<Kind, unknown[]> = { welcome: [], reply: [], notification: [] };
  private readonly waiters = new Set<() => void>();
  private seq = 0;

  constructor(client: grpc.Client, md: grpc.Metadata, opts: grpc.CallOptions = {}) {
    const connect = (client as unknown as Record<string, (md: grpc.Metadata, opts: grpc.CallOptions) => grpc.ClientDuplexStream<Init, ConnectResponse>>).connect;
    this.call = connect.call(client, md, opts);
    this.call.on('data', (m: ConnectResponse) => {
      this.received.push(m);
      if (m.message.case !== undefined) this.queues[m.message.case].push(m.message.value);
      this.wake();
    });
    this.ended = new Promise<StreamEnd>((resolve) => {
      this.call.on('status', (s: grpc.StatusObject) => {
        this.final = { code: s.code, details: s.details, metadata: s.metadata };
        this.wake();
        resolve(this.final);
      });
    });
    // Non-OK statuses also arrive as 'error'; 'status' above records them.
    this.call.on('error', () => {});
  }

  /** Opens a stream for `token` and, unless `hello` is false, sends hello and waits for the welcome. */
  static async open(clients: Clients, token: string, resumeToken = ''): Promise<{ stream: DeviceStream; welcome: Welcome }> {
    const stream = new DeviceStream(clients.device, meta(token));
    const welcome = await stream.hello(resumeToken);
    return { stream, welcome };
  }

  get status(): StreamEnd | null {
    return this.final;
  }

  send(m: Init): void {
    this.call.write(m);
  }

  async hello(resumeToken = ''): Promise<Welcome> {
    this.send({ message: { case: 'hello', value: { resumeToken } } });
    return this.next('welcome');
  }

  move(lat: number, lon: number): void {
    this.send({ message: { case: 'location', value: { lat, lon } } });
  }

  ack(deliveryId: string): void {
    this.send({ message: { case: 'ack', value: { deliveryId } } });
  }

  /** Sends one request and waits for its reply (replies come in request order). */
  async request(kind: 'subscribe' | 'replace' | 'unsubscribe', value: Init): Promise<RequestStatus> {
    const requestId = value.requestId ?? `r${++this.seq}`;
    this.send({ message: { case: kind, value: { ...value, requestId } } });
    const r = await this.next('reply');
    assert.equal(r.requestId, requestId, `replies come in request order (got ${JSON.stringify(r.requestId)}: ${r.status?.message})`);
    return r.status!;
  }

  async subscribe(subscription: Init): Promise<RequestStatus> {
    return this.request('subscribe', { subscription });
  }

  /** Subscribes and asserts OK. */
  async subscribeOk(subscription: Init): Promise<void> {
    const s = await this.subscribe(subscription);
    assert.equal(s.code, 0, `subscribe ${subscription.id}: ${s.message}`);
  }

  async replace(subscription: Init): Promise<RequestStatus> {
    return this.request('replace', { subscription });
  }

  async unsubscribe(subscriptionId: string): Promise<RequestStatus> {
    return this.request('unsubscribe', { subscriptionId });
  }

  /**
   * A barrier: everything sent before it (locations included, which get no reply) has been
   * processed once its reply is back. An unsubscribe of an id no test uses answers NOT_FOUND and
   * changes nothing.
   */
  async sync(): Promise<void> {
    const s = await this.unsubscribe('\u0000sync');
    assert.equal(s.code, Status.NOT_FOUND, `sync: ${s.message}`);
  }

  /** The next message of `kind` not handed out before; fails after `timeoutMs`. */
  async next<K extends Kind>(kind: K, timeoutMs = 3000): Promise<ValueOf<K>> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const q = this.queues[kind];
      if (q.length > 0) return q.shift() as ValueOf<K>;
      if (this.final !== null) assert.fail(`stream ended (${Status[this.final.code]}: ${this.final.details}) while waiting for a ${kind}`);
      const left = deadline - Date.now();
      if (left <= 0) assert.fail(`no ${kind} within ${timeoutMs} ms (received so far: ${this.received.map((m) => m.message.case).join(',') || 'nothing'})`);
      await this.waitAny(left);
    }
  }

  /** The next `n` notifications. */
  async notifications(n: number, timeoutMs = 5000): Promise<Notification[]> {
    const out: Notification[] = [];
    const deadline = Date.now() + timeoutMs;
    while (out.length < n) out.push(await this.next('notification', Math.max(1, deadline - Date.now())).catch((e: unknown) => assert.fail(`got ${out.length} of ${n} notifications: ${String(e)}`)));
    return out;
  }

  /** Messages of `kind` received and not yet handed out. */
  pending<K extends Kind>(kind: K): ValueOf<K>[] {
    return this.queues[kind].slice() as ValueOf<K>[];
  }

  /**
   * Asserts no further message of `kind` came before the reply to a sync request. The stream is
   * ordered: whatever the server wrote to it before it handled the sync arrives before the reply.
   * That covers what an embedded hub had to deliver when the sync was sent (its deliveries are
   * written in the turns right after a publish is stored or an inbox opens), not what reaches the
   * gateway later from another process: use `expectNextNotification` for that.
   */
  async expectQuiet(kind: Kind): Promise<void> {
    await this.sync();
    const q = this.queues[kind];
    assert.equal(q.length, 0, `expected no further ${kind}, got ${q.length}`);
  }

  /**
   * Asserts that the next notification is the one `publishMarker` causes (an event that reaches
   * this device, named `markerEventId`): a device's deliveries come in order, so anything sent to
   * it before the marker would come first.
   */
  async expectNextNotification(markerEventId: string, publishMarker: () => Promise<unknown>, timeoutMs = 5000): Promise<Notification> {
    assert.equal(this.queues.notification.length, 0, 'no notification is waiting before the marker is published');
    await publishMarker();
    const n = await this.next('notification', timeoutMs);
    assert.equal(n.event?.id, markerEventId, `expected no notification before the marker ${markerEventId}, got ${n.event?.id}`);
    return n;
  }

  /** Waits for the final status. */
  async end(timeoutMs = 3000): Promise<StreamEnd> {
    let timer: NodeJS.Timeout | undefined;
    const t = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`stream did not end within ${timeoutMs} ms`)), timeoutMs);
    });
    try {
      return await Promise.race([this.ended, t]);
    } finally {
      clearTimeout(timer);
    }
  }

  /** Half-closes and waits for the server to end the stream. */
  async close(): Promise<StreamEnd> {
    if (this.final === null) this.call.end();
    return this.end();
  }

  cancel(): void {
    this.call.cancel();
  }

  private wake(): void {
    for (const w of this.waiters) w();
    this.waiters.clear();
  }

  private waitAny(ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const timer = setTimeout(done, ms);
      function done() {
        clearTimeout(timer);
        resolve();
      }
      this.waiters.add(done);
    });
  }
}

const HealthClient = grpc.makeGenericClientConstructor(healthService, 'Health');

/** A grpc.health.v1 client of `target` (plaintext). */
export function healthClient(target: string): grpc.Client {
  return new HealthClient(target, grpc.credentials.createInsecure());
}

/** grpc.health.v1 Check of `service` ('' = the server): its status name. */
export function healthCheck(client: grpc.Client, service: string): Promise<string> {
  return new Promise((resolve, reject) =>
    (client as unknown as { check: (r: Init, o: Init, cb: (e: grpc.ServiceError | null, r: Init) => void) => void }).check({ service }, { deadline: Date.now() + 2000 }, (e, r) => (e ? reject(e) : resolve(r.status as string))),
  );
}
