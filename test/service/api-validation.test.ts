/**
 * Bad input on every RPC: INVALID_ARGUMENT (RESOURCE_EXHAUSTED for oversized batches,
 * FAILED_PRECONDITION for a stream that does not open with hello) naming the offending field,
 * in the status details and the `ambit-field` metadata, or in the in-stream Reply's status;
 * and nothing applied: the device's subscriptions, its position and the server's counters are
 * exactly what they were. Malformed protobuf frames, sent with a raw client, are INVALID_ARGUMENT
 * (field `request`), never INTERNAL.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { create, toBinary } from '@bufbuild/protobuf';
import type * as grpc from '@grpc/grpc-js';
import { show } from '../../src/model/errors.js';
import { ConnectRequestSchema } from '../../api/gen/ambit/v1/device_pb.js';
import { Op } from '../../api/gen/ambit/v1/types_pb.js';
import {
  type Clients,
  DeviceStream,
  type Init,
  Status,
  type TestServer,
  checkReplyStatus,
  checkStatus,
  clientStream,
  expectStatus,
  rawClientStream,
  rawConnect,
  rawUnary,
  startTestServer,
  unary,
} from '../support/grpc.js';

const ID_129 = 'i'.repeat(129);
const ID_129_CJK = '東'.repeat(43); // 43 characters, 129 UTF-8 bytes (semantics V6)
const HUGE = 'h'.repeat(1 << 20);

const num = (v: number): Init => ({ kind: { case: 'number', value: v } });
const text = (v: string): Init => ({ kind: { case: 'text', value: v } });

function validSub(id = 'x'): Init {
  return {
    id,
    filters: [
      { constraints: [{ name: 'price', op: Op.LT, value: num(10) }], area: { radiusM: 100, center: { lat: 1, lon: 2 } } },
      { constraints: [{ name: 'kind', op: Op.PREFIX, value: text('caf') }], area: { radiusM: 500 } },
    ],
  };
}

let eventSeq = 0;

/** A valid event with an id of its own (ids deduplicate: one id twice would deliver once). */
function validEvent(): Init {
  return { id: `e${++eventSeq}`, position: { lat: 1, lon: 2 }, radiusM: 10, attributes: { price: num(5), kind: text('cafe') } };
}

type Case = [label: string, mutate: (x: Init) => void, field: string];

/** Subscription faults; fields relative to the subscription. */
const SUB_CASES: Case[] = [
  ['empty id', (s) => (s.id = ''), 'id'],
  ['id over 128 bytes', (s) => (s.id = ID_129), 'id'],
  ['id of 129 UTF-8 bytes in 43 characters', (s) => (s.id = ID_129_CJK), 'id'],
  ['huge id', (s) => (s.id = HUGE), 'id'],
  ['no filters', (s) => (s.filters = []), 'filters'],
  ['65 filters', (s) => (s.filters = Array.from({ length: 65 }, () => ({}))), 'filters'],
  ['33 constraints', (s) => (s.filters[0].constraints = Array.from({ length: 33 }, () => ({ name: 'n', op: Op.EXISTS }))), 'filters[0].constraints'],
  ['empty constraint name', (s) => (s.filters[0].constraints[0].name = ''), 'filters[0].constraints[0].name'],
  ['constraint name over 64 bytes', (s) => (s.filters[0].constraints[0].name = 'n'.repeat(65)), 'filters[0].constraints[0].name'],
  ['OP_UNSPECIFIED', (s) => (s.filters[0].constraints[0].op = Op.UNSPECIFIED), 'filters[0].constraints[0].op'],
  ['unknown enum number 13', (s) => (s.filters[1].constraints[0].op = 13), 'filters[1].constraints[0].op'],
  ['negative enum number', (s) => (s.filters[1].constraints[0].op = -1), 'filters[1].constraints[0].op'],
  ['value unset for lt', (s) => (s.filters[0].constraints[0].value = undefined), 'filters[0].constraints[0].value'],
  ['value with its oneof unset', (s) => (s.filters[0].constraints[0].value = {}), 'filters[0].constraints[0].value'],
  ['NaN value', (s) => (s.filters[0].constraints[0].value = num(NaN)), 'filters[0].constraints[0].value'],
  ['Infinity value', (s) => (s.filters[0].constraints[0].value = num(Infinity)), 'filters[0].constraints[0].value'],
  ['-Infinity value', (s) => (s.filters[0].constraints[0].value = num(-Infinity)), 'filters[0].constraints[0].value'],
  ['text value for lt', (s) => (s.filters[0].constraints[0].value = text('10')), 'filters[0].constraints[0].value'],
  ['number value for prefix', (s) => (s.filters[1].constraints[0].value = num(1)), 'filters[1].constraints[0].value'],
  ['flag value for contains', (s) => (s.filters[1].constraints[0] = { name: 'k', op: Op.CONTAINS, value: { kind: { case: 'flag', value: true } } }), 'filters[1].constraints[0].value'],
  ['a value for exists', (s) => (s.filters[1].constraints[0] = { name: 'k', op: Op.EXISTS, value: num(1) }), 'filters[1].constraints[0].value'],
  ['text value over 1024 bytes', (s) => (s.filters[1].constraints[0].value = text('v'.repeat(1025))), 'filters[1].constraints[0].value'],
  ['huge text value', (s) => (s.filters[1].constraints[0].value = text(HUGE)), 'filters[1].constraints[0].value'],
  ['like with a bad escape', (s) => (s.filters[1].constraints[0] = { name: 'k', op: Op.LIKE, value: text('a\\b') }), 'filters[1].constraints[0].value'],
  ['regex with a backreference', (s) => (s.filters[1].constraints[0] = { name: 'k', op: Op.REGEX, value: text('(a)\\1') }), 'filters[1].constraints[0].value'],
  ['regex with lookahead', (s) => (s.filters[1].constraints[0] = { name: 'k', op: Op.REGEX, value: text('a(?=b)') }), 'filters[1].constraints[0].value'],
  ['regex needing too many states', (s) => (s.filters[1].constraints[0] = { name: 'k', op: Op.REGEX, value: text('(a|b)*a(a|b){12}$') }), 'filters[1].constraints[0].value'],
  ['pattern over 256 bytes', (s) => (s.filters[1].constraints[0] = { name: 'k', op: Op.LIKE, value: text('%'.repeat(257)) }), 'filters[1].constraints[0].value'],
  ['number value for regex', (s) => (s.filters[1].constraints[0] = { name: 'k', op: Op.REGEX, value: num(1) }), 'filters[1].constraints[0].value'],
  ['radius 0', (s) => (s.filters[0].area.radiusM = 0), 'filters[0].area.radius_m'],
  ['radius -0', (s) => (s.filters[0].area.radiusM = -0), 'filters[0].area.radius_m'],
  ['negative radius', (s) => (s.filters[1].area.radiusM = -5), 'filters[1].area.radius_m'],
  ['huge radius', (s) => (s.filters[1].area.radiusM = 1e6 + 1), 'filters[1].area.radius_m'],
  ['NaN radius', (s) => (s.filters[0].area.radiusM = NaN), 'filters[0].area.radius_m'],
  ['Infinity radius', (s) => (s.filters[0].area.radiusM = Infinity), 'filters[0].area.radius_m'],
  ['area without a radius', (s) => (s.filters[1].area = { center: { lat: 0, lon: 0 } }), 'filters[1].area.radius_m'],
  ['centre lat 91', (s) => (s.filters[0].area.center.lat = 91), 'filters[0].area.center.lat'],
  ['centre lat -90.000001', (s) => (s.filters[0].area.center.lat = -90.000001), 'filters[0].area.center.lat'],
  ['centre lon -181', (s) => (s.filters[0].area.center.lon = -181), 'filters[0].area.center.lon'],
  ['centre lat NaN', (s) => (s.filters[0].area.center.lat = NaN), 'filters[0].area.center.lat'],
  ['centre lon Infinity', (s) => (s.filters[0].area.center.lon = Infinity), 'filters[0].area.center.lon'],
  ['a bad second filter after a good one', (s) => (s.filters[1].constraints[0].name = ''), 'filters[1].constraints[0].name'],
  ['17 tags', (s) => (s.filters[0].tags = Array.from({ length: 17 }, (_, i) => `t${i}`)), 'filters[0].tags'],
  ['17 tags, repeats counted', (s) => (s.filters[1].tags = Array(17).fill('same')), 'filters[1].tags'],
  ['an empty tag', (s) => (s.filters[1].tags = ['ok', '']), 'filters[1].tags[1]'],
  ['a lone # for a tag', (s) => (s.filters[0].tags = ['#']), 'filters[0].tags[0]'],
  ['a tag with a space', (s) => (s.filters[0].tags = ['fish chips']), 'filters[0].tags[0]'],
  ['a tag with # inside', (s) => (s.filters[0].tags = ['a#b']), 'filters[0].tags[0]'],
  ['a tag with a control character', (s) => (s.filters[0].tags = ['a\u0000']), 'filters[0].tags[0]'],
  ['a tag over 64 bytes', (s) => (s.filters[0].tags = ['t'.repeat(65)]), 'filters[0].tags[0]'],
  ['a tag of 66 bytes once lower-cased', (s) => (s.filters[0].tags = ['É'.repeat(33)]), 'filters[0].tags[0]'],
  ['a huge tag', (s) => (s.filters[0].tags = [HUGE]), 'filters[0].tags[0]'],
];

/** Event faults; fields relative to the event. */
const EVENT_CASES: Case[] = [
  ['no position', (e) => (e.position = undefined), 'position'],
  ['lat 91', (e) => (e.position.lat = 91), 'position.lat'],
  ['lat NaN', (e) => (e.position.lat = NaN), 'position.lat'],
  ['lat -Infinity', (e) => (e.position.lat = -Infinity), 'position.lat'],
  ['lon -181', (e) => (e.position.lon = -181), 'position.lon'],
  ['lon 180.0000001', (e) => (e.position.lon = 180.0000001), 'position.lon'],
  ['lon Infinity', (e) => (e.position.lon = Infinity), 'position.lon'],
  ['negative radius', (e) => (e.radiusM = -1), 'radius_m'],
  ['huge radius', (e) => (e.radiusM = 1e6 + 1), 'radius_m'],
  ['NaN radius', (e) => (e.radiusM = NaN), 'radius_m'],
  ['Infinity radius', (e) => (e.radiusM = Infinity), 'radius_m'],
  ['id over 128 bytes', (e) => (e.id = ID_129), 'id'],
  ['id of 129 UTF-8 bytes in 43 characters', (e) => (e.id = ID_129_CJK), 'id'],
  ['65 attributes', (e) => (e.attributes = Object.fromEntries(Array.from({ length: 65 }, (_, i) => [`a${i}`, num(i)]))), 'attributes'],
  ['attribute value unset', (e) => (e.attributes.price = {}), 'attributes["price"]'],
  ['NaN attribute', (e) => (e.attributes.price = num(NaN)), 'attributes["price"]'],
  ['-Infinity attribute', (e) => (e.attributes.price = num(-Infinity)), 'attributes["price"]'],
  ['empty attribute name', (e) => (e.attributes[''] = num(1)), 'attributes[""]'],
  ['attribute name over 64 bytes', (e) => (e.attributes['a'.repeat(65)] = num(1)), `attributes[${show('a'.repeat(65))}]`],
  ['NaN attribute with a non-ASCII name', (e) => (e.attributes['é'] = num(NaN)), 'attributes["é"]'],
  ['attribute name of 66 bytes in 22 characters', (e) => (e.attributes['東'.repeat(22)] = num(1)), `attributes[${show('東'.repeat(22))}]`],
  ['text attribute over 1024 bytes', (e) => (e.attributes.kind = text('é'.repeat(513))), 'attributes["kind"]'],
  ['huge text attribute', (e) => (e.attributes.kind = text(HUGE)), 'attributes["kind"]'],
  ['33 tags', (e) => (e.tags = Array.from({ length: 33 }, (_, i) => `t${i}`)), 'tags'],
  ['an empty tag', (e) => (e.tags = ['a', 'b', '']), 'tags[2]'],
  ['a tag with a tab', (e) => (e.tags = ['a\tb']), 'tags[0]'],
  ['a tag of two #', (e) => (e.tags = ['##x']), 'tags[0]'],
  ['a huge tag', (e) => (e.tags = [HUGE]), 'tags[0]'],
];

const clone = <T>(x: T): T => structuredClone(x);

function withFault(base: () => Init, mutate: (x: Init) => void): Init {
  const x = clone(base());
  mutate(x);
  return x;
}

/** A truncated length-delimited field: not a protobuf message of any type. */
const TRUNCATED = Buffer.from([0x0a, 0x05, 0x01]);
/** Wire type 7 does not exist. */
const BAD_WIRE_TYPE = Buffer.from([0x0f, 0x01]);

/** Field 1 (a string in every request below that has one) holding invalid UTF-8 (0xC3 0x28). */
const BAD_UTF8_STRING = Buffer.from([0x0a, 0x02, 0xc3, 0x28]);

describe('api validation: bad input on every RPC names its field and changes nothing', () => {
  let srv: TestServer;
  let clients: Clients;
  let stream: DeviceStream;
  let devMd: Init;
  let fleetMd: Init;
  let pubMd: Init;
  let opsMd: Init;
  let baseline: unknown;

  /** Everything a rejected request could have changed. */
  async function snapshot(): Promise<unknown> {
    const list = await unary(clients.device, 'listSubscriptions', {}, devMd);
    const info = await unary(clients.ops, 'getDeviceSubscriptions', { deviceId: 'dev-v' }, opsMd);
    const other = await unary(clients.ops, 'getDeviceSubscriptions', { deviceId: 'dev-other' }, opsMd);
    const s = await unary(clients.ops, 'getStats', {}, opsMd);
    return {
      list: list.subscriptions.map((x: Init) => JSON.stringify(x)),
      location: info.location === undefined ? null : [info.location.lat, info.location.lon],
      other: [other.subscriptions.length, other.location === undefined],
      stats: [s.subscriptions, s.filters, s.devices, s.eventsPublished, s.notifications, s.locationUpdates, s.notificationsDropped],
    };
  }

  async function unchanged(what: string): Promise<void> {
    assert.deepEqual(await snapshot(), baseline, `state changed after: ${what}`);
  }

  before(async () => {
    srv = await startTestServer();
    clients = srv.clients();
    devMd = srv.meta('dev-v', ['device']);
    fleetMd = srv.meta('dev-v', ['device', 'location:any']);
    pubMd = srv.meta('pub', ['publish']);
    opsMd = srv.meta('ops', ['ops']);
    ({ stream } = await DeviceStream.open(clients, srv.token('dev-v', ['device'])));
    await stream.subscribeOk(validSub('base'));
    // A content-only filter: every published event would notify dev-v.
    await stream.subscribeOk({ id: 'everything', filters: [{}] });
    stream.move(10, 20);
    await stream.sync();
    baseline = await snapshot();
    assert.deepEqual((baseline as { location: unknown }).location, [10, 20]);
  });

  after(async () => {
    stream.cancel();
    await srv.stop();
  });

  it('Connect subscribe: every fault is a Reply naming subscribe.subscription.<field>', async () => {
    const st = await stream.request('subscribe', {});
    checkReplyStatus(st, Status.INVALID_ARGUMENT, 'subscribe.subscription', 'subscription unset');
    for (const [label, mutate, field] of SUB_CASES) {
      const s = await stream.subscribe(withFault(validSub, mutate));
      checkReplyStatus(s, Status.INVALID_ARGUMENT, `subscribe.subscription.${field}`, label);
    }
    await unchanged('bad subscribes');
  });

  it('Connect replace: a bad version is rejected and the stored one kept', async () => {
    const st = await stream.request('replace', {});
    checkReplyStatus(st, Status.INVALID_ARGUMENT, 'replace.subscription', 'subscription unset');
    for (const [label, mutate, field] of SUB_CASES) {
      if (field === 'id') continue; // a bad id names no stored subscription; covered by subscribe
      const s = await stream.replace(withFault(() => validSub('base'), mutate));
      checkReplyStatus(s, Status.INVALID_ARGUMENT, `replace.subscription.${field}`, label);
    }
    await unchanged('bad replaces');
  });

  it('Connect unsubscribe: empty, over-long and huge ids', async () => {
    for (const [id, label] of [
      ['', 'empty'],
      [ID_129, '129 bytes'],
      [ID_129_CJK, '129 bytes in 43 characters'],
      [HUGE, 'huge'],
    ]) {
      checkReplyStatus(await stream.unsubscribe(id), Status.INVALID_ARGUMENT, 'unsubscribe.subscription_id', label);
    }
    await unchanged('bad unsubscribes');
  });

  it('Connect location: out of range or non-finite is a Reply naming location.lat/lon, worded as the unary calls word it; the stream goes on', async () => {
    const cases: [number, number, string, RegExp][] = [
      [91, 0, 'location.lat', /must be within \[-90, 90\], got 91$/],
      [-90.5, 0, 'location.lat', /must be within \[-90, 90\], got -90.5$/],
      [NaN, 0, 'location.lat', /must be finite, got NaN$/],
      [Infinity, 0, 'location.lat', /must be finite, got Infinity$/],
      [-Infinity, 0, 'location.lat', /must be finite, got -Infinity$/],
      [0, -181, 'location.lon', /must be within \[-180, 180\], got -181$/],
      [0, 180.5, 'location.lon', /must be within \[-180, 180\], got 180.5$/],
      [0, NaN, 'location.lon', /must be finite, got NaN$/],
      [0, Infinity, 'location.lon', /must be finite, got Infinity$/],
    ];
    for (const [lat, lon, field, message] of cases) {
      stream.move(lat, lon);
      const r = await stream.next('reply');
      assert.equal(r.requestId, '');
      checkReplyStatus(r.status, Status.INVALID_ARGUMENT, field, `${lat}, ${lon}`);
      assert.match(r.status!.message, message, `${lat}, ${lon}`);
    }
    await stream.sync();
    await unchanged('bad stream locations');
  });

  it('Connect ack: a malformed id, and an id never delivered on this stream', async () => {
    for (const id of ['', 'garbage', '1-2-3', '99999999999999999-1', '9999999999999-99']) {
      stream.ack(id);
      const r = await stream.next('reply');
      checkReplyStatus(r.status, Status.INVALID_ARGUMENT, 'ack.delivery_id', JSON.stringify(id));
    }
    await unchanged('bad acks');
  });

  it('Connect: stream-level faults end the stream with the status naming the field', async () => {
    const frame = (m: Init) => Buffer.from(toBinary(ConnectRequestSchema, create(ConnectRequestSchema, m)));
    const hello = frame({ message: { case: 'hello', value: {} } });
    const sub = frame({ message: { case: 'subscribe', value: { requestId: 'a', subscription: validSub() } } });
    const md = () => srv.meta('dev-other', ['device']);
    const cases: [string, Buffer[], grpc.status, string][] = [
      ['location before hello', [frame({ message: { case: 'location', value: { lat: 1, lon: 2 } } })], Status.FAILED_PRECONDITION, 'hello'],
      ['subscribe before hello', [sub, hello], Status.FAILED_PRECONDITION, 'hello'],
      ['ack before hello', [frame({ message: { case: 'ack', value: { deliveryId: '1-1' } } })], Status.FAILED_PRECONDITION, 'hello'],
      ['hello twice', [hello, hello, sub], Status.FAILED_PRECONDITION, 'hello'],
      ['a malformed resume token', [frame({ message: { case: 'hello', value: { resumeToken: 'yesterday' } } }), sub], Status.INVALID_ARGUMENT, 'hello.resume_token'],
      ['message unset', [hello, frame({})], Status.INVALID_ARGUMENT, 'message'],
      ['an unknown oneof member (field 9)', [hello, Buffer.from([0x48, 0x01])], Status.INVALID_ARGUMENT, 'message'],
      ['a truncated frame', [hello, TRUNCATED], Status.INVALID_ARGUMENT, 'request'],
      ['a frame with wire type 7', [hello, BAD_WIRE_TYPE], Status.INVALID_ARGUMENT, 'request'],
      ['a malformed first frame', [TRUNCATED], Status.INVALID_ARGUMENT, 'request'],
      // Unsubscribe{request_id: <invalid UTF-8>} inside ConnectRequest field 5.
      ['invalid UTF-8 in a string', [hello, Buffer.from([0x2a, 0x04, ...BAD_UTF8_STRING])], Status.INVALID_ARGUMENT, 'request'],
    ];
    for (const [label, frames, code, field] of cases) {
      const { messages, status } = await rawConnect(clients, frames, md());
      checkStatus(status, code, field, label);
      assert.ok(messages.length <= 1, `${label}: at most the welcome came back`);
    }
    // The same through the typed client: the stream ends; nothing was applied for dev-other.
    const s = new DeviceStream(clients.device, md());
    s.send({ message: { case: 'subscribe', value: { requestId: 'early', subscription: validSub() } } });
    checkStatus(await s.end(), Status.FAILED_PRECONDITION, 'hello');
    assert.equal(s.received.length, 0);
    await unchanged('stream-level faults');
  });

  it('UpdateLocation: unset, out of range and non-finite positions', async () => {
    await expectStatus(unary(clients.device, 'updateLocation', {}, devMd), Status.INVALID_ARGUMENT, 'location', 'unset');
    for (const [lat, lon, field] of [
      [91, 0, 'location.lat'],
      [NaN, 0, 'location.lat'],
      [-Infinity, 0, 'location.lat'],
      [0, -181, 'location.lon'],
      [0, Infinity, 'location.lon'],
      [0, NaN, 'location.lon'],
    ] as [number, number, string][]) {
      await expectStatus(unary(clients.device, 'updateLocation', { location: { lat, lon } }, devMd), Status.INVALID_ARGUMENT, field, `${lat}, ${lon}`);
    }
    await unchanged('bad UpdateLocation');
  });

  it('UpdateLocations: a bad entry rejects its whole message; oversized messages are RESOURCE_EXHAUSTED', async () => {
    const good = { deviceId: '', location: { lat: 5, lon: 5 } };
    const cases: [string, Init[], grpc.status, string][] = [
      ['location unset', [{ updates: [{ deviceId: '' }] }], Status.INVALID_ARGUMENT, 'updates[0].location'],
      ['lat 91 after a good entry', [{ updates: [good, { location: { lat: 91, lon: 0 } }] }], Status.INVALID_ARGUMENT, 'updates[1].location.lat'],
      ['lon -181', [{ updates: [{ location: { lat: 0, lon: -181 } }, good] }], Status.INVALID_ARGUMENT, 'updates[0].location.lon'],
      ['lon NaN', [{ updates: [good, good, { location: { lat: 0, lon: NaN } }] }], Status.INVALID_ARGUMENT, 'updates[2].location.lon'],
      ['device id over 128 bytes', [{ updates: [{ deviceId: ID_129, location: { lat: 0, lon: 0 } }] }], Status.INVALID_ARGUMENT, 'updates[0].device_id'],
      ['device id of 129 bytes in 43 characters', [{ updates: [good, { deviceId: ID_129_CJK, location: { lat: 0, lon: 0 } }] }], Status.INVALID_ARGUMENT, 'updates[1].device_id'],
      ['10 001 updates in one message', [{ updates: Array.from({ length: 10_001 }, () => good) }], Status.RESOURCE_EXHAUSTED, 'updates'],
    ];
    for (const [label, msgs, code, field] of cases) {
      await expectStatus(clientStream(clients.device, 'updateLocations', msgs, fleetMd), code, field, label);
    }
    await unchanged('bad UpdateLocations');
    // At the limit: 10 000 updates are one message; the last entry wins (A7).
    const many = Array.from({ length: 10_000 }, (_, i) => ({ location: { lat: 10, lon: i === 9_999 ? 20 : 21 } }));
    const res = await clientStream(clients.device, 'updateLocations', [{ updates: many }], devMd);
    assert.equal(res.accepted, 10_000n);
    baseline = await snapshot();
    assert.deepEqual((baseline as { location: unknown }).location, [10, 20]);
  });

  it('UpdateLocations: a bad message ends the call; what came before it stays applied, nothing after it is', async () => {
    const before = (await unary(clients.ops, 'getStats', {}, opsMd)).locationUpdates;
    const err = await expectStatus(
      clientStream(clients.device, 'updateLocations', [{ updates: [{ location: { lat: 10, lon: 20 } }] }, { updates: [{ location: { lat: 99, lon: 0 } }] }, { updates: [{ location: { lat: 0, lon: 0 } }] }], devMd),
      Status.INVALID_ARGUMENT,
      'updates[0].location.lat',
    );
    // The status says which message was refused and how much was applied before it.
    assert.deepEqual(err.metadata.get('ambit-message'), ['1']);
    assert.deepEqual(err.metadata.get('ambit-applied'), ['1']);
    assert.match(err.details, /^updates\[0\]\.location\.lat: must be within \[-90, 90\], got 99 \(message 1 of this stream, refused whole; the 1 updates before it applied\)$/);
    const afterStats = await unary(clients.ops, 'getStats', {}, opsMd);
    assert.equal(afterStats.locationUpdates, before + 1n, 'only the first message was applied');
    baseline = await snapshot();
    assert.deepEqual((baseline as { location: unknown }).location, [10, 20]);
  });

  it('BulkPublish: a bad message ends the call; the messages before it stay published and counted', async () => {
    const matches = async () => Number(/^ambit_matches_total\{role="all"\} (\d+)$/m.exec(await srv.metrics())![1]);
    const before = await unary(clients.ops, 'getStats', {}, opsMd);
    const m0 = await matches();
    const bad = { ...validEvent(), position: { lat: 91, lon: 0 } };
    const err = await expectStatus(clientStream(clients.publisher, 'bulkPublish', [{ events: [validEvent(), validEvent()] }, { events: [validEvent(), bad] }, { events: [validEvent()] }], pubMd), Status.INVALID_ARGUMENT, 'events[1].position.lat');
    assert.deepEqual(err.metadata.get('ambit-message'), ['1']);
    assert.deepEqual(err.metadata.get('ambit-applied'), ['2']);
    assert.match(err.details, /\(message 1 of this stream, refused whole; the 2 events before it applied\)$/);
    const after = await unary(clients.ops, 'getStats', {}, opsMd);
    assert.equal(after.eventsPublished, before.eventsPublished + 2n, 'only the first message was published');
    assert.equal(await matches(), m0 + 4, 'and its matches are counted (base and everything, twice)');
    for (let k = 0; k < 2; k++) {
      const n = await stream.next('notification');
      assert.deepEqual(n.subscriptionIds, ['base', 'everything']);
      stream.ack(n.deliveryId);
    }
    await stream.sync();
    await stream.expectQuiet('notification');
    baseline = await snapshot();
  });

  it('Publish: every event fault names event.<field>; nothing is published', async () => {
    await expectStatus(unary(clients.publisher, 'publish', {}, pubMd), Status.INVALID_ARGUMENT, 'event', 'event unset');
    for (const [label, mutate, field] of EVENT_CASES) {
      await expectStatus(unary(clients.publisher, 'publish', { event: withFault(validEvent, mutate) }, pubMd), Status.INVALID_ARGUMENT, `event.${field}`, label);
    }
    // The field of a non-ASCII name: JSON-escaped in the metadata (which must be ASCII), as is in the details.
    const err = await expectStatus(unary(clients.publisher, 'publish', { event: { ...validEvent(), attributes: { 'é東😀': num(NaN) } } }, pubMd), Status.INVALID_ARGUMENT);
    assert.deepEqual(err.metadata.get('ambit-field'), ['event.attributes["\\u00e9\\u6771\\ud83d\\ude00"]']);
    assert.equal(JSON.parse(String(err.metadata.get('ambit-field')[0]).slice('event.attributes['.length, -1)), 'é東😀');
    assert.ok(err.details.startsWith('event.attributes["é東😀"]: '), err.details);
    await unchanged('bad publishes');
    await stream.expectQuiet('notification');
  });

  it('BulkPublish: a bad event rejects its message; more than 1000 events per message is RESOURCE_EXHAUSTED', async () => {
    for (const [label, mutate, field] of EVENT_CASES) {
      const events = [validEvent(), validEvent(), withFault(validEvent, mutate)];
      await expectStatus(clientStream(clients.publisher, 'bulkPublish', [{ events }], pubMd), Status.INVALID_ARGUMENT, `events[2].${field}`, label);
    }
    await expectStatus(clientStream(clients.publisher, 'bulkPublish', [{ events: [validEvent(), {}] }], pubMd), Status.INVALID_ARGUMENT, 'events[1].position', 'an empty event (a repeated element cannot be unset)');
    const events = Array.from({ length: 1001 }, () => validEvent());
    await expectStatus(clientStream(clients.publisher, 'bulkPublish', [{ events }], pubMd), Status.RESOURCE_EXHAUSTED, 'events', '1001 events');
    await unchanged('bad bulk publishes');
    await stream.expectQuiet('notification');
  });

  it('GetDeviceSubscriptions: empty, over-long and huge device ids', async () => {
    for (const deviceId of ['', ID_129, ID_129_CJK, HUGE]) {
      await expectStatus(unary(clients.ops, 'getDeviceSubscriptions', { deviceId }, opsMd), Status.INVALID_ARGUMENT, 'device_id', deviceId.slice(0, 10));
    }
  });

  it('malformed frames on every RPC are INVALID_ARGUMENT (field request), not INTERNAL; the server keeps serving', async () => {
    const unaries: [string, Init][] = [
      ['/ambit.v1.DeviceService/UpdateLocation', devMd],
      ['/ambit.v1.DeviceService/ListSubscriptions', devMd],
      ['/ambit.v1.PublisherService/Publish', pubMd],
      ['/ambit.v1.OpsService/GetStats', opsMd],
      ['/ambit.v1.OpsService/GetDeviceSubscriptions', opsMd],
    ];
    for (const [path, md] of unaries) {
      for (const [label, bytes] of [
        ['truncated', TRUNCATED],
        ['wire type 7', BAD_WIRE_TYPE],
      ] as const) {
        const err = await expectStatus(rawUnary(clients, path, bytes, md), Status.INVALID_ARGUMENT, 'request', `${path} ${label}`);
        assert.match(err.details, /^request: malformed ambit\.v1\.\w+ message: /);
      }
    }
    // Invalid UTF-8 in a string field (proto3 strings must be UTF-8).
    await expectStatus(rawUnary(clients, '/ambit.v1.OpsService/GetDeviceSubscriptions', BAD_UTF8_STRING, opsMd), Status.INVALID_ARGUMENT, 'request', 'device_id not UTF-8');
    // PublishRequest{event: Event{id: <invalid UTF-8>}}.
    await expectStatus(rawUnary(clients, '/ambit.v1.PublisherService/Publish', Buffer.from([0x0a, 0x04, ...BAD_UTF8_STRING]), pubMd), Status.INVALID_ARGUMENT, 'request', 'event id not UTF-8');
    for (const [path, md] of [
      ['/ambit.v1.DeviceService/UpdateLocations', fleetMd],
      ['/ambit.v1.PublisherService/BulkPublish', pubMd],
    ] as [string, Init][]) {
      await expectStatus(rawClientStream(clients, path, [TRUNCATED], md), Status.INVALID_ARGUMENT, 'request', path);
      // UpdateLocationsRequest{updates: [LocationUpdate{device_id: <invalid UTF-8>}]} / BulkPublishRequest{events: [Event{id: ...}]}.
      await expectStatus(rawClientStream(clients, path, [Buffer.from([0x0a, 0x04, ...BAD_UTF8_STRING])], md), Status.INVALID_ARGUMENT, 'request', `${path} not UTF-8`);
    }
    await unchanged('malformed frames');
    const ok = await unary(clients.publisher, 'publish', { event: validEvent() }, pubMd);
    assert.equal(ok.reached, 2n, 'the server still serves');
    const n = await stream.next('notification');
    assert.deepEqual(n.subscriptionIds, ['base', 'everything']);
    stream.ack(n.deliveryId);
    await stream.sync();
    baseline = await snapshot();
  });

  it('values at each limit are accepted (the bounds are inclusive)', async () => {
    const atLimit: Init = {
      id: 'l'.repeat(128),
      filters: [
        {
          constraints: Array.from({ length: 32 }, (_, i) => ({ name: i === 0 ? 'n'.repeat(64) : `c${i}`, op: Op.EQ, value: text(i === 1 ? 'v'.repeat(1024) : '') })),
          area: { radiusM: 1e6, center: { lat: -90, lon: 180 } },
        },
        ...Array.from({ length: 63 }, () => ({ area: { radiusM: Number.MIN_VALUE, center: { lat: 90, lon: -180 } } })),
      ],
    };
    const st = await stream.subscribe(atLimit);
    assert.equal(st.code, 0, st.message);
    assert.equal((await stream.unsubscribe(atLimit.id)).code, 0);
    const e: Init = {
      id: 'e'.repeat(128),
      position: { lat: -90, lon: -180 },
      radiusM: 1e6,
      attributes: Object.fromEntries(Array.from({ length: 64 }, (_, i) => [i === 0 ? 'a'.repeat(64) : `a${i}`, i === 1 ? text('é'.repeat(512)) : num(-Number.MAX_VALUE)])),
    };
    const res = await unary(clients.publisher, 'publish', { event: e }, pubMd);
    assert.equal(res.eventId, e.id);
    const n = await stream.next('notification');
    assert.equal(n.event!.id, e.id);
    stream.ack(n.deliveryId);
    await stream.sync();
  });
});
