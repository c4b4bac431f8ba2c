/**
 * The node-local hub link (services/hub/link.ts): frames cross a real socket whole and in order
 * whatever the chunking, events round-trip exactly (-0, an attribute named __proto__, any
 * string, radius absent or 0), errors keep their code and field, and an unreadable frame ends the
 * link instead of being half-applied.
 */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { type Socket, createServer, connect } from 'node:net';
import { describe, it } from 'node:test';
import { MessageChannel, type MessagePort } from 'node:worker_threads';
import { pino } from 'pino';
import { AmbitError, ValidationError } from '../../src/model/errors.js';
import type { Event } from '../../src/model/types.js';
import { CPU_ENGINES } from '../../src/engines/index.js';
import { EmbeddedHub, type EmbeddedHubOptions } from '../../services/hub/embedded.js';
import { HubServer } from '../../services/hub/hub-server.js';
import { EventCache, FrameReader, FrameWriter, fromWire, portLink, readEvent, socketLink, toWire, writeEvent } from '../../services/hub/link.js';
import { INTERN_MAX_BYTES, internedString } from '../../services/hub/interned.js';
import { type PartitionedHub, linkedPartitions } from '../../services/hub/partitioned.js';
import { shardOf } from '../../services/hub/fanout-shard.js';
import { toBinary } from '@bufbuild/protobuf';
import { EventSchema } from '../../api/gen/ambit/v1/types_pb.js';
import { fromEvent } from '../../services/edge/convert.js';
import { encodedEvent } from '../../services/edge/notification-frame.js';
import { LinkedHub, type LinkedHubOptions } from '../../services/hub/linked.js';
import { ENGINE_SIDE_LIMITS, apiEventBytes } from '../../services/hub/port.js';
import { MatchCore } from '../../services/matcher/core.js';

async function socketPair(): Promise<[Socket, Socket, () => void]> {
  const server = createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as { port: number };
  const accepted = once(server, 'connection') as Promise<[Socket]>;
  const a = connect(port, '127.0.0.1');
  const [b] = await accepted;
  await once(a, 'connect').catch(() => null);
  return [a, b, () => server.close()];
}

function roundTrip(e: Event): Event {
  const w = new FrameWriter();
  writeEvent(w, e);
  const r = new FrameReader(w.take());
  const back = readEvent(r);
  assert.equal(r.more, false, 'the whole record is read');
  return back;
}

/** An embedded hub served over a MessageChannel to its gateway side; `port` is the gateway's raw end. */
async function withLinked(
  options: LinkedHubOptions,
  run: (linked: LinkedHub, hub: EmbeddedHub, port: MessagePort, other: LinkedHub) => Promise<void>,
  hubOptions: EmbeddedHubOptions = {},
): Promise<void> {
  const hub = new EmbeddedHub(new MatchCore(CPU_ENGINES.fast({ limits: ENGINE_SIDE_LIMITS })), hubOptions);
  const server = new HubServer(hub, pino({ level: 'silent' }), hub);
  const { port1, port2 } = new MessageChannel();
  server.serve(portLink(port1));
  const linked = new LinkedHub(portLink(port2), options);
  // Another gateway of the node, on a link of its own.
  const second = new MessageChannel();
  server.serve(portLink(second.port1));
  const other = new LinkedHub(portLink(second.port2));
  try {
    await run(linked, hub, port2, other);
  } finally {
    await linked.close();
    await other.close();
    await hub.close();
  }
}

describe('hub link', () => {
  it('carries frames of 0 B to 3 MB over a socket, whole and in order', async () => {
    const [a, b, done] = await socketPair();
    try {
      const sizes = [0, 1, 3, 4, 5, 1000, 65_535, 65_536, 200_000, 3_000_000, 7, 0, 12];
      const frames = sizes.map((n, k) => Buffer.alloc(n, k + 1));
      const got: Buffer[] = [];
      let closed = false;
      const all = new Promise<void>((resolve) => {
        socketLink(b).listen((f) => {
          got.push(Buffer.from(f));
          if (got.length === frames.length) resolve();
        }, () => (closed = true));
      });
      const sender = socketLink(a);
      for (const f of frames) sender.post(f);
      await all;
      assert.deepEqual(got.map((f) => f.length), sizes);
      got.forEach((f, k) => assert.ok(f.every((x) => x === k + 1), `frame ${k} intact`));
      sender.close();
      await once(b, 'end');
      assert.ok(closed || b.readableEnded, 'the other end sees the link close');
    } finally {
      a.destroy();
      b.destroy();
      done();
    }
  });

  it('a port link moves a written frame\'s memory to the other end; a frame in the shared pool of small buffers is copied, the pool left whole', async () => {
    const { port1, port2 } = new MessageChannel();
    try {
      const got: Buffer[] = [];
      let arrived!: () => void;
      const both = new Promise<void>((resolve) => (arrived = resolve));
      portLink(port2).listen((f) => {
        got.push(f);
        if (got.length === 2) arrived();
      }, () => {});
      const sender = portLink(port1);
      const w = new FrameWriter();
      for (let i = 0; i < 5000; i++) w.u32(i);
      const frame = w.take();
      const room = frame.buffer.byteLength;
      assert.ok(room >= 20_000);
      sender.post(frame);
      assert.equal(frame.buffer.byteLength, 0, 'moved, not copied: the sender no longer holds it');
      // Buffer.from of a few bytes takes a slice of Node's shared pool, whose other slices belong to others.
      const small = Buffer.from([1, 2, 3, 4]);
      const neighbour = Buffer.from([9, 9, 9, 9]);
      assert.equal(small.buffer, neighbour.buffer, 'both in the shared pool');
      sender.post(small);
      assert.deepEqual([...small, ...neighbour], [1, 2, 3, 4, 9, 9, 9, 9], 'the pool stays readable where it is');
      await both;
      assert.equal(got[0].length, 20_000);
      for (let i = 0; i < 5000; i++) assert.equal(got[0].readUInt32LE(4 * i), i);
      assert.equal(got[0].buffer.byteLength, room, 'the same memory, unused room and all');
      assert.deepEqual([...got[1]], [1, 2, 3, 4]);
    } finally {
      port1.close();
    }
  });

  it('round-trips events exactly', () => {
    const proto = JSON.parse('{"__proto__": 5, "a": "b"}') as Record<string, number | string>;
    const cases: Event[] = [
      { id: 'e1', lat: 45.5, lon: -9.25, attributes: {} },
      { id: 'e2', lat: -0, lon: 0, radiusM: 0, attributes: { z: -0, t: true, f: false, s: '' } },
      { id: 'é🚑', lat: 90, lon: -180, radiusM: 1500.5, attributes: { 'ключ': 'значение 🚑', n: 1e-300, big: Number.MAX_VALUE } },
      { id: 'p', lat: 1, lon: 2, attributes: proto },
    ];
    for (const e of cases) {
      const back = roundTrip(e);
      assert.deepEqual(back, e);
      assert.deepEqual(Object.keys(back.attributes), Object.keys(e.attributes));
      assert.equal('radiusM' in back, 'radiusM' in e);
    }
    assert.ok(Object.is(roundTrip(cases[1]).attributes.z, -0), '-0 stays -0');
    assert.equal(Object.getPrototypeOf(roundTrip(cases[3]).attributes), Object.prototype, 'an attribute named __proto__ is data, not a prototype');
  });

  it('reads recurring names and short values through a table of recent strings, every string exactly (slots shared, non-ASCII, past the end)', () => {
    const e: Event = { id: 'x1', lat: 1, lon: 2, attributes: { kind: 'k7', level: 3, 'caf\u00e9': 'na\u00efve', [`l${'o'.repeat(40)}ng`]: 'v'.repeat(INTERN_MAX_BYTES + 1) }, tags: ['red'] };
    const a = roundTrip(e);
    const b = roundTrip({ ...e, id: 'x2' });
    assert.deepEqual(a, e);
    assert.deepEqual(b, { ...e, id: 'x2' });
    // Thousands of distinct short strings through a table of 4096 slots: each read back exactly.
    const bytes = (s: string) => new Uint8Array(Buffer.from(s, 'utf8'));
    for (let i = 0; i < 20_000; i++) {
      const s = i % 7 === 0 ? `\u00e9${i}` : `n${i.toString(36)}`;
      const buf = bytes(`..${s}..`);
      const len = buf.length - 4;
      assert.equal(internedString(buf, 2, len), s);
      assert.equal(internedString(buf, 2, len), s, 'again, from the table');
    }
    assert.equal(internedString(bytes(''), 0, 0), '');
    // A string whose length runs past the frame is an unreadable frame, not bytes beyond it.
    const w = new FrameWriter();
    w.u32(10);
    w.u8(0x61);
    assert.throws(() => new FrameReader(w.take()).name(), RangeError);
  });

  it('carries an event\'s API bytes beside it, when a gateway encoded them, as a copy', () => {
    const e: Event = { id: 'api', lat: 1, lon: 2, attributes: { k: 'v' } };
    assert.equal(apiEventBytes.get(roundTrip(e)), undefined, 'none set, none carried');
    const bytes = encodedEvent(e);
    const w = new FrameWriter();
    writeEvent(w, e);
    const frame = w.take();
    const back = readEvent(new FrameReader(frame));
    assert.deepEqual(back, e);
    assert.deepEqual(Buffer.from(apiEventBytes.get(back)!), Buffer.from(bytes));
    assert.notEqual(apiEventBytes.get(back)!.buffer, frame.buffer, 'not a view of the frame');
    assert.throws(() => readEvent(new FrameReader(frame.subarray(0, frame.length - 1))), RangeError);
  });

  it('a gateway delivers the API bytes its publisher encoded: each event is encoded once on the node', async () => {
    await withLinked({}, async (linked, _hub, _port, other) => {
      assert.equal(linked.forwardsEvents, true);
      await linked.addSubscription('a', { id: 'all', filters: [{ constraints: [] }] });
      const box = await other.openInbox('a', null);
      const sent: Event = { id: 'enc', lat: 3, lon: 4, radiusM: 50, attributes: { n: 7, s: 'x', b: true } };
      const bytes = encodedEvent(sent);
      await linked.publish([sent]);
      const [d] = await box.pull(10);
      assert.notEqual(d.event, sent, 'decoded from the link by the other gateway');
      assert.deepEqual(Buffer.from(apiEventBytes.get(d.event)!), Buffer.from(bytes), 'the publisher\'s bytes came with it');
      assert.deepEqual(Buffer.from(toBinary(EventSchema, fromEvent(d.event))), Buffer.from(bytes), 'and they are what encoding the delivered event gives');
      box.close();
      // The publishing gateway's own devices get the object it published: nothing to decode.
      const mine = await linked.openInbox('a', null);
      const [again] = await mine.pull(10);
      assert.equal(again.event, sent);
      mine.close();
    });
  });

  it('the event cache keeps events apart by origin and slot, and decodes again what it let go', () => {
    const record = (n: number, e: Event): FrameReader => {
      const inner = new FrameWriter();
      writeEvent(inner, e);
      const b = inner.take();
      const w = new FrameWriter();
      w.u32(0);
      w.f64(n);
      w.u32(b.length);
      w.raw(b);
      return new FrameReader(w.take());
    };
    const ev = (id: string): Event => ({ id, lat: 1, lon: 2, attributes: { id } });
    const cache = new EventCache(2);
    const ORIGIN = 2 ** 32;
    const [, a] = cache.read(record(1, ev('a')));
    const [, b] = cache.read(record(ORIGIN + 1, ev('b')));
    assert.deepEqual([a.id, b.id], ['a', 'b'], 'the same count from two origins: two events');
    assert.equal(cache.read(record(1, ev('ignored')))[1], a, 'a number it holds is not decoded again');
    assert.equal(cache.get(ORIGIN + 1), b);
    // Same origin, same slot (the ring holds 1024): the newer one takes it.
    const [, c] = cache.read(record(1 + 1024, ev('c')));
    assert.equal(cache.get(1), undefined, 'a let go');
    assert.equal(cache.get(1 + 1024), c);
    const [, a2] = cache.read(record(1, ev('a')));
    assert.notEqual(a2, a, 'decoded again');
    assert.deepEqual(a2, a);
    // A third origin: the oldest origin's ring goes (two kept).
    cache.read(record(2 * ORIGIN + 5, ev('d')));
    assert.equal(cache.get(1), undefined);
    assert.equal(cache.get(ORIGIN + 1), b);
    assert.equal(cache.get(2 * ORIGIN + 5)?.id, 'd');
  });

  it('a gateway decodes an event once however many hub partitions push it', async () => {
    const quiet = pino({ level: 'silent' });
    const hubs = [0, 1, 2].map(() => new EmbeddedHub(new MatchCore(CPU_ENGINES.fast({ limits: ENGINE_SIDE_LIMITS }))));
    const servers = hubs.map((h) => new HubServer(h, quiet, h));
    const gateway = (): PartitionedHub =>
      linkedPartitions(servers.map((srv) => {
        const { port1, port2 } = new MessageChannel();
        srv.serve(portLink(port1));
        return portLink(port2);
      }));
    const [publisher, receiver] = [gateway(), gateway()];
    try {
      // Devices until every partition holds some.
      const devices: string[] = [];
      for (let i = 0; new Set(devices.map((d) => shardOf(d, 3))).size < 3 || devices.length < 6; i++) devices.push(`dev-${i}`);
      for (const d of devices) await publisher.addSubscription(d, { id: 'all', filters: [{ constraints: [] }] });
      const boxes = await Promise.all(devices.map((d) => receiver.openInbox(d, null)));
      const sent: Event = { id: 'once', lat: 0, lon: 0, attributes: {} };
      assert.deepEqual(await publisher.publish([sent]), [{ eventId: 'once', reached: devices.length }]);
      const got = await Promise.all(boxes.map(async (b) => (await b.pull(10))[0].event));
      assert.notEqual(got[0], sent);
      for (const e of got) assert.equal(e, got[0], 'one object for every partition\'s push');
      for (const b of boxes) b.close();
    } finally {
      await publisher.close();
      await receiver.close();
      for (const srv of servers) srv.close();
      for (const h of hubs) await h.close();
    }
  });

  it('keeps an error\'s code, field and rule', () => {
    const v = fromWire(toWire(new ValidationError('subscription.filters[0].constraints[1].value', 'must be finite, got NaN')));
    assert.ok(v instanceof ValidationError);
    assert.equal(v.message, 'subscription.filters[0].constraints[1].value: must be finite, got NaN');
    const a = fromWire(toWire(new AmbitError('NOT_FOUND', 'device has no subscription "x"', 'subscription_id')));
    assert.ok(a instanceof AmbitError);
    assert.equal(a.code, 'NOT_FOUND');
    assert.equal(a.field, 'subscription_id');
    assert.equal(a.message, 'subscription_id: device has no subscription "x"');
    const plain = fromWire(toWire(new Error('boom')));
    assert.ok(!(plain instanceof AmbitError));
    assert.equal(plain.message, 'hub: boom');
  });

  it('UpdateLocations through the link: positions land, also after the writer table starts over', async () => {
    await withLinked({ maxFleetWriters: 3 }, async (linked) => {
      const at = (k: number, round: number) => ({ device: `f${k}`, lat: 10 + k + round / 100, lon: 20 - k - round / 100 });
      for (let round = 0; round < 4; round++) {
        // Two batches of two, then one of four: the table of three fills and starts over.
        await linked.updateLocations([at(0, round), at(1, round)]);
        await linked.updateLocations([at(round % 4, round + 0.5), at(2, round)]);
        await linked.updateLocations([0, 1, 2, 3].map((k) => at(k, round + 0.7)));
        for (let k = 0; k < 4; k++) {
          const { lat, lon } = at(k, round + 0.7);
          assert.deepEqual((await linked.deviceInfo(`f${k}`)).location, { lat, lon }, `f${k} after round ${round}`);
        }
      }
    });
  });

  it('pushes an inbox no more than its credit ahead of its stream; the rest waits in the hub and survives a close', async () => {
    // A window of 3: the hub may push three deliveries the stream has not taken.
    await withLinked({ window: 3 }, async (linked) => {
      await linked.addSubscription('d', { id: 'all', filters: [{ constraints: [] }] });
      const box = await linked.openInbox('d', null);
      const ev = (i: number): Event => ({ id: `e${i}`, lat: 1, lon: 2, attributes: { i } });
      // The publish's reply and the push behind it come in one frame: after it, the gateway holds
      // exactly what the hub pushed.
      await linked.publish([1, 2, 3, 4, 5, 6, 7].map(ev));
      const got = (ds: { event: Event }[]) => ds.map((d) => d.event.attributes.i);
      assert.deepEqual(got(await box.pull(100)), [1, 2, 3], 'the first push stops at the credit');
      // Taking them gave the credit back: the next three come.
      assert.deepEqual(got(await box.pull(2)), [4, 5]);
      const [sixth] = await box.pull(100);
      assert.equal(sixth.event.attributes.i, 6);
      await box.ack(sixth.deliveryId);
      // 7 may sit in this gateway, pushed and not taken: closing leaves it in the hub's log.
      box.close();
      assert.deepEqual(await box.pull(1), [], 'a closed inbox pulls nothing');
      const again = await linked.openInbox('d', null);
      assert.equal(again.resumeToken, sixth.deliveryId, 'resumes after the acknowledged one');
      assert.deepEqual(got(await again.pull(100)), [7]);
      again.close();
    });
  });

  it('an event reaching a gateway in several frames is one object there; events with one id stay apart', async () => {
    await withLinked({}, async (linked) => {
      for (const d of ['a', 'b']) await linked.addSubscription(d, { id: 'all', filters: [{ constraints: [] }] });
      const a = await linked.openInbox('a', null);
      await linked.publish([{ id: 'x', lat: 1, lon: 2, attributes: { n: 1 } }]);
      const [fromA] = await a.pull(10);
      // b's inbox opens later: its backlog comes in another frame.
      const b = await linked.openInbox('b', null);
      const [fromB] = await b.pull(10);
      assert.equal(fromB.event, fromA.event, 'the same object, decoded once');
      // Another event with the same id (with deduplication off, as here) is another event.
      await linked.publish([{ id: 'x', lat: 1, lon: 2, attributes: { n: 2 } }]);
      const [second] = await a.pull(10);
      assert.notEqual(second.event, fromA.event);
      assert.deepEqual(second.event.attributes, { n: 2 });
      a.close();
      b.close();
    }, { dedupe: { windowMs: 0 } });
  });

  it('an unreadable frame ends the link: pending calls fail UNAVAILABLE and nothing of it applies', async () => {
    await withLinked({}, async (linked, hub, port2) => {
      await linked.addSubscription('d', { id: 'a', filters: [{ constraints: [] }] });
      // A gateway of another version: a record the hub does not know, then a subscribe.
      const w = new FrameWriter();
      w.u8(99);
      port2.postMessage(w.take());
      await assert.rejects(linked.addSubscription('d', { id: 'b', filters: [{ constraints: [] }] }), (err: unknown) => err instanceof AmbitError && err.code === 'UNAVAILABLE');
      assert.deepEqual((await hub.listSubscriptions('d')).map((s) => s.id), ['a']);
    });
  });
});
