/**
 * A bounded fuzz run over every request the device and publisher services take, the ops reads and
 * the authorization value: valid messages and tokens mutated (bytes flipped, inserted, cut, fields
 * repeated, lengths made to lie, strings made huge) and random bytes, sent raw over real gRPC calls
 * and device streams (gRPC and WebSocket, down to random bytes as WebSocket frames). Every answer must be a status a client can act on (never INTERNAL or
 * UNKNOWN), a refused request must change nothing, and the server must log no error and keep
 * serving. Seeded: AMBIT_FUZZ_SEED=N and AMBIT_FUZZ_ROUNDS=N repeat or widen a run.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type * as grpc from '@grpc/grpc-js';
import { create, toBinary } from '@bufbuild/protobuf';
import { ConnectRequestSchema, UpdateLocationRequestSchema, UpdateLocationsRequestSchema } from '../../api/gen/ambit/v1/device_pb.js';
import { GetDeviceSubscriptionsRequestSchema, GetStatsRequestSchema, ListDevicesRequestSchema } from '../../api/gen/ambit/v1/ops_pb.js';
import { BulkPublishRequestSchema, PublishRequestSchema } from '../../api/gen/ambit/v1/publisher_pb.js';
import { Op } from '../../api/gen/ambit/v1/types_pb.js';
import { type Clients, DeviceStream, type Init, Status, type TestServer, meta, rawClientStream, rawConnect, rawUnary, startTestServer, unary } from '../support/grpc.js';
import { Rng } from '../support/rng.js';
import { WsDevice } from '../support/ws-device.js';
import { WS_PATH } from '../../api/websocket.js';
import net from 'node:net';
import { randomBytes } from 'node:crypto';

const SEED = Number(process.env.AMBIT_FUZZ_SEED ?? 20261127);
const ROUNDS = Number(process.env.AMBIT_FUZZ_ROUNDS ?? 300);

/** Statuses a client can act on. INTERNAL, UNKNOWN and UNAVAILABLE would mean the server broke. */
const ACCEPTABLE = new Set<number>([Status.OK, Status.INVALID_ARGUMENT, Status.RESOURCE_EXHAUSTED, Status.PERMISSION_DENIED, Status.NOT_FOUND, Status.FAILED_PRECONDITION, Status.ALREADY_EXISTS]);

const num = (v: number): Init => ({ kind: { case: 'number', value: v } });
const text = (v: string): Init => ({ kind: { case: 'text', value: v } });

function varint(n: number): number[] {
  const out: number[] = [];
  while (n > 0x7f) {
    out.push((n & 0x7f) | 0x80);
    n = Math.floor(n / 128);
  }
  out.push(n);
  return out;
}

/** One mutation of `seed`, or random bytes. */
function mutate(rng: Rng, seed: Buffer): Buffer {
  const b = [...seed];
  switch (rng.int(9)) {
    case 0: // flip bytes
      for (let k = 0, n = 1 + rng.int(4); k < n && b.length > 0; k++) b[rng.int(b.length)] ^= 1 << rng.int(8);
      return Buffer.from(b);
    case 1: // insert bytes
      for (let k = 0, n = 1 + rng.int(6); k < n; k++) b.splice(rng.int(b.length + 1), 0, rng.int(256));
      return Buffer.from(b);
    case 2: // cut
      return Buffer.from(b.slice(0, rng.int(b.length + 1)));
    case 3: // delete a run
      b.splice(rng.int(b.length + 1), 1 + rng.int(8));
      return Buffer.from(b);
    case 4: // the message twice (repeated fields and oneofs set twice)
      return Buffer.from([...b, ...b]);
    case 5: // a field 1 of lying length
      return Buffer.from([0x0a, ...varint(1 + rng.int(1 << 20)), ...b.slice(0, rng.int(b.length + 1))]);
    case 6: // a huge string or bytes field in front (field 1..15, wire type 2)
      return Buffer.concat([Buffer.from([((1 + rng.int(15)) << 3) | 2, ...varint(100_000)]), Buffer.alloc(100_000, 0x61), seed]);
    case 7: // random bytes
      return Buffer.from(Array.from({ length: rng.int(64) }, () => rng.int(256)));
    default: // a varint field of an unknown number, then the message
      return Buffer.from([...varint(((100 + rng.int(1000)) << 3) | 0), ...varint(rng.int(1 << 30)), ...b]);
  }
}

function statusOf(err: unknown): number {
  const code = (err as { code?: unknown }).code;
  return typeof code === 'number' ? code : -1;
}

describe('api fuzz: mutated and random requests', () => {
  let srv: TestServer;
  let clients: Clients;
  let devMd: grpc.Metadata;
  let fleetMd: grpc.Metadata;
  let pubMd: grpc.Metadata;
  let opsMd: grpc.Metadata;
  let state: unknown;

  /** Everything a request could change. */
  async function snapshot(): Promise<unknown> {
    const s = await unary(clients.ops, 'getStats', {}, opsMd);
    const d = await unary(clients.ops, 'getDeviceSubscriptions', { deviceId: 'dev-f' }, opsMd);
    return [s.subscriptions, s.filters, s.devices, s.eventsPublished, s.notifications, s.locationUpdates, d.subscriptions.length, d.location === undefined ? null : [d.location.lat, d.location.lon]];
  }

  before(async () => {
    srv = await startTestServer({ webPort: 0 });
    clients = srv.clients();
    devMd = srv.meta('dev-f', ['device']);
    fleetMd = srv.meta('dev-f', ['device', 'location:any']);
    pubMd = srv.meta('pub-f', ['publish']);
    opsMd = srv.meta('ops-f', ['ops']);
    // A device with a subscription, so publishes match and notifications count.
    const { stream } = await DeviceStream.open(clients, srv.token('dev-f', ['device']));
    await stream.subscribeOk({ id: 'near', filters: [{ constraints: [{ name: 'kind', op: Op.EQ, value: text('x') }], area: { radiusM: 500 } }] });
    stream.move(1, 2);
    await stream.sync();
    state = await snapshot();
  });

  after(async () => {
    assert.deepEqual(srv.unexpectedErrors(), [], 'the server logged no error');
    await srv.stop();
  });

  const event: Init = { id: 'e-seed', position: { lat: 1, lon: 2 }, radiusM: 10, attributes: { kind: text('x'), n: num(3) }, time: { seconds: 1_700_000_000n, nanos: 5_000_000 } };
  const unaries: [string, Buffer, () => grpc.Metadata][] = [
    ['/ambit.v1.DeviceService/UpdateLocation', Buffer.from(toBinary(UpdateLocationRequestSchema, create(UpdateLocationRequestSchema, { location: { lat: 1, lon: 2 } }))), () => devMd],
    ['/ambit.v1.DeviceService/ListSubscriptions', Buffer.alloc(0), () => devMd],
    ['/ambit.v1.PublisherService/Publish', Buffer.from(toBinary(PublishRequestSchema, create(PublishRequestSchema, { event }))), () => pubMd],
    ['/ambit.v1.OpsService/GetStats', Buffer.from(toBinary(GetStatsRequestSchema, create(GetStatsRequestSchema, {}))), () => opsMd],
    ['/ambit.v1.OpsService/GetDeviceSubscriptions', Buffer.from(toBinary(GetDeviceSubscriptionsRequestSchema, create(GetDeviceSubscriptionsRequestSchema, { deviceId: 'dev-f' }))), () => opsMd],
    ['/ambit.v1.OpsService/ListDevices', Buffer.from(toBinary(ListDevicesRequestSchema, create(ListDevicesRequestSchema, { pageSize: 10, idPrefix: 'dev' }))), () => opsMd],
  ];
  const streams: [string, Buffer, () => grpc.Metadata][] = [
    ['/ambit.v1.DeviceService/UpdateLocations', Buffer.from(toBinary(UpdateLocationsRequestSchema, create(UpdateLocationsRequestSchema, { updates: [{ location: { lat: 1, lon: 2 } }, { deviceId: 'dev-f', location: { lat: 3, lon: 4 } }] }))), () => fleetMd],
    ['/ambit.v1.PublisherService/BulkPublish', Buffer.from(toBinary(BulkPublishRequestSchema, create(BulkPublishRequestSchema, { events: [event, { ...event, id: 'e-seed-2' }] }))), () => pubMd],
  ];

  /** Checks one answer: a status a client can act on; a refusal changed nothing. */
  async function judge(what: string, code: number): Promise<void> {
    assert.ok(ACCEPTABLE.has(code), `${what}: status ${Status[code] ?? code}`);
    const now = await snapshot();
    if (code !== Status.OK) assert.deepEqual(now, state, `${what}: refused (${Status[code]}) but the state changed`);
    state = now;
  }

  it(`unary calls (seed ${SEED}, ${ROUNDS} rounds each)`, async () => {
    const rng = new Rng(SEED);
    for (const [path, seed, md] of unaries) {
      for (let r = 0; r < ROUNDS; r++) {
        const bytes = mutate(rng, seed);
        let code = Status.OK;
        await rawUnary(clients, path, bytes, md()).catch((err: unknown) => (code = statusOf(err)));
        await judge(`${path} round ${r} (${bytes.subarray(0, 24).toString('hex')})`, code);
      }
    }
  });

  it(`client streams: mutated messages among valid ones (seed ${SEED + 1})`, async () => {
    const rng = new Rng(SEED + 1);
    for (const [path, seed, md] of streams) {
      for (let r = 0; r < ROUNDS; r++) {
        const frames = Array.from({ length: 1 + rng.int(3) }, () => (rng.chance(0.5) ? seed : mutate(rng, seed)));
        let code = Status.OK;
        let refusedAt = -1;
        let applied = -1;
        await rawClientStream(clients, path, frames, md()).catch((err: unknown) => {
          code = statusOf(err);
          const m = (err as { metadata?: grpc.Metadata }).metadata;
          const at = m?.get('ambit-message')[0];
          refusedAt = at === undefined ? -1 : Number(at);
          applied = Number(m?.get('ambit-applied')[0] ?? -1);
        });
        const what = `${path} round ${r}`;
        if (code !== Status.OK) assert.ok(refusedAt >= 0 && refusedAt < frames.length, `${what}: the refused message is named (${refusedAt})`);
        // Messages before the refused one are applied: the state is judged when the first was refused.
        if (code === Status.OK || refusedAt === 0) await judge(what, code);
        else {
          assert.ok(ACCEPTABLE.has(code), `${what}: status ${Status[code] ?? code}`);
          const before = state as bigint[];
          state = await snapshot();
          // What the status says was applied is what the stats saw. (For updates: events repeat
          // their ids round after round, and a duplicate is taken but not published again.)
          if (path.endsWith('UpdateLocations')) assert.equal(BigInt(applied), (state as bigint[])[5] - before[5], `${what}: ambit-applied`);
          else assert.ok(applied >= 0, `${what}: ambit-applied ${applied}`);
        }
      }
    }
  });

  it(`authorization values: mutated tokens (seed ${SEED + 3})`, async () => {
    const rng = new Rng(SEED + 3);
    const good = srv.token('ops-f', ['ops']);
    const printable = (): string => String.fromCharCode(0x21 + rng.int(94));
    for (let r = 0; r < ROUNDS; r++) {
      let t = good;
      switch (rng.int(6)) {
        case 0: // a character changed
          { const i = rng.int(t.length); t = t.slice(0, i) + printable() + t.slice(i + 1); }
          break;
        case 1: // cut
          t = t.slice(0, rng.int(t.length));
          break;
        case 2: // a part dropped or doubled
          { const parts = t.split('.'); parts.splice(rng.int(parts.length), rng.chance(0.5) ? 1 : 0, ...(rng.chance(0.5) ? [] : [parts[rng.int(parts.length)]])); t = parts.join('.'); }
          break;
        case 3: // a part replaced by random base64url JSON
          { const parts = t.split('.'); parts[rng.int(3)] = Buffer.from(JSON.stringify({ alg: rng.pick(['HS256', 'RS256', 'none', 'ES256', 'EdDSA', 7, null]), exp: rng.pick([1e309, -1, 'x', 4e9, null]), sub: rng.pick(['', 'a', 5, null]), scope: rng.pick(['ops', ['ops'], 3]) })).toString('base64url'); t = parts.join('.'); }
          break;
        case 4: // huge
          t = t + 'A'.repeat(rng.int(10_000));
          break;
        default: // random printable text
          t = Array.from({ length: rng.int(200) }, printable).join('');
      }
      let code = Status.OK;
      await unary(clients.ops, 'getStats', {}, meta(t)).catch((err: unknown) => (code = statusOf(err)));
      assert.ok(code === Status.OK || code === Status.UNAUTHENTICATED || code === Status.PERMISSION_DENIED, `token round ${r}: status ${Status[code] ?? code}`);
    }
  });

  const FUZZ_PATTERN: Init = {
    steps: [
      { name: 'a', filter: { constraints: [{ name: 'kind', op: Op.EQ, value: text('x') }], area: { radiusM: 100 } } },
      { name: 'b', filter: { constraints: [{ name: 'n', op: Op.GT, value: num(1) }] }, selection: 2, withinMs: 1000 },
    ],
    parameters: [{ left: { step: 'a', attribute: 'n' }, op: Op.LT, right: { step: 'b', attribute: 'n' } }],
    negations: [{ filter: { constraints: [], tags: ['t'] }, between: ['a', 'b'], parameters: [{ attribute: 'n', op: Op.EQ, step: 'a', stepAttribute: 'n' }] }],
    aggregates: [{ name: 's', fn: 2, attribute: 'n', filter: { constraints: [] }, before: 'a', withinMs: 500, where: { op: Op.GE, value: 1 } }],
    consuming: ['b'],
  };

  it(`device streams: hello, then mutated frames (seed ${SEED + 2})`, async () => {
    const rng = new Rng(SEED + 2);
    const hello = Buffer.from(toBinary(ConnectRequestSchema, create(ConnectRequestSchema, { message: { case: 'hello', value: {} } })));
    const seeds = [
      toBinary(ConnectRequestSchema, create(ConnectRequestSchema, { message: { case: 'location', value: { lat: 1, lon: 2 } } })),
      toBinary(ConnectRequestSchema, create(ConnectRequestSchema, { message: { case: 'subscribe', value: { requestId: 'r', subscription: { id: 'fz', filters: [{ constraints: [], area: { radiusM: 100 } }] } } } })),
      // A pattern with every part, so mutations reach each of its fields.
      toBinary(ConnectRequestSchema, create(ConnectRequestSchema, { message: { case: 'subscribe', value: { requestId: 'p', subscription: { id: 'fz', pattern: FUZZ_PATTERN } } } })),
      toBinary(ConnectRequestSchema, create(ConnectRequestSchema, { message: { case: 'unsubscribe', value: { requestId: 'u', subscriptionId: 'fz' } } })),
      toBinary(ConnectRequestSchema, create(ConnectRequestSchema, { message: { case: 'ack', value: { deliveryId: '1-1' } } })),
    ].map((b) => Buffer.from(b));
    for (let r = 0; r < ROUNDS; r++) {
      const frames = [rng.chance(0.9) ? hello : mutate(rng, hello), ...Array.from({ length: 1 + rng.int(3) }, () => mutate(rng, seeds[rng.int(seeds.length)]))];
      const { status } = await rawConnect(clients, frames, srv.meta(`dev-fz${r % 4}`, ['device']));
      assert.ok(ACCEPTABLE.has(status.code), `Connect round ${r}: status ${Status[status.code] ?? status.code}: ${status.details}`);
    }
    // Still serving: a plain call works.
    assert.ok((await unary(clients.ops, 'getStats', {}, opsMd)).subscriptions >= 1n);
  });

  it(`device streams over WebSocket: mutated messages, bad flags, text, random bytes (seed ${SEED + 4})`, async () => {
    const rng = new Rng(SEED + 4);
    const framed = (b: Uint8Array, flags = 0): Buffer => Buffer.concat([Buffer.from([flags]), Buffer.from(b)]);
    const hello = toBinary(ConnectRequestSchema, create(ConnectRequestSchema, { message: { case: 'hello', value: {} } }));
    const seeds = [
      toBinary(ConnectRequestSchema, create(ConnectRequestSchema, { message: { case: 'location', value: { lat: 1, lon: 2 } } })),
      toBinary(ConnectRequestSchema, create(ConnectRequestSchema, { message: { case: 'subscribe', value: { requestId: 'r', subscription: { id: 'wz', filters: [{ constraints: [], area: { radiusM: 100 } }] } } } })),
      toBinary(ConnectRequestSchema, create(ConnectRequestSchema, { message: { case: 'subscribe', value: { requestId: 'p', subscription: { id: 'wz', pattern: FUZZ_PATTERN } } } })),
      toBinary(ConnectRequestSchema, create(ConnectRequestSchema, { message: { case: 'ack', value: { deliveryId: '1-1' } } })),
    ].map((b) => Buffer.from(b));
    const codes = new Map<string, number>();
    const rounds = Math.max(1, Math.floor(ROUNDS / 3));
    for (let r = 0; r < rounds; r++) {
      const d = await WsDevice.open(srv.server.webPort!, { token: srv.token(`dev-wz${r % 4}`, ['device']) });
      d.sendRaw(framed(rng.chance(0.9) ? hello : mutate(rng, Buffer.from(hello))));
      for (let k = 0, n = 1 + rng.int(3); k < n; k++) {
        const x = rng.next();
        if (x < 0.6) d.sendRaw(framed(mutate(rng, seeds[rng.int(seeds.length)])));
        else if (x < 0.7) d.sendRaw(framed(seeds[rng.int(seeds.length)], rng.int(256)));
        else if (x < 0.8) d.sendRaw(Buffer.from(Array.from({ length: rng.int(64) }, () => rng.int(256))));
        else if (x < 0.9) d.sendRaw(String.fromCharCode(...Array.from({ length: rng.int(32) }, () => 0x20 + rng.int(0x2000))), false);
        else d.sendRaw(Buffer.alloc(0));
      }
      d.halfClose();
      const end = await d.ended();
      const code = end.error?.code ?? 'ok';
      codes.set(code, (codes.get(code) ?? 0) + 1);
      assert.ok(['ok', 'invalid_argument', 'resource_exhausted', 'permission_denied', 'not_found', 'failed_precondition', 'already_exists'].includes(code), `WebSocket round ${r}: ${JSON.stringify(end)}`);
    }
    assert.ok((codes.get('invalid_argument') ?? 0) > 0 && codes.size > 1, `statuses seen: ${JSON.stringify([...codes])}`);
    // Garbage below the messages: random bytes as WebSocket frames after a valid upgrade. The
    // server closes that connection and serves the next.
    for (let r = 0; r < 20; r++) {
      const sock = net.connect(srv.server.webPort!, '127.0.0.1');
      const closed = new Promise<void>((resolve) => sock.on('close', () => resolve()));
      sock.on('error', () => {});
      const upgraded = new Promise<void>((resolve) => sock.once('data', () => resolve()));
      sock.write(`GET ${WS_PATH} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: ${randomBytes(16).toString('base64')}\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: ambit.v1, ambit.bearer.${srv.token('dev-wz-raw', ['device'])}\r\n\r\n`);
      await upgraded;
      sock.write(Buffer.from(Array.from({ length: 1 + rng.int(200) }, () => rng.int(256))));
      sock.end();
      await closed;
    }
    const ok = await WsDevice.open(srv.server.webPort!, { token: srv.token('dev-wz-after', ['device']) });
    ok.send({ message: { case: 'hello', value: { resumeToken: '' } } });
    await ok.next('welcome');
    ok.halfClose();
    assert.deepEqual(await ok.ended(), {});
  });
});
