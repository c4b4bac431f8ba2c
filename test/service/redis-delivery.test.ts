/**
 * How notifications travel in the Redis deployment, against a real redis-server: the deliver
 * script stores groups of recipients across events (once per device and event, replays skipped);
 * each stored notification is published whole on the device's channel, so a live inbox delivers
 * without reading its stream, and reads it only after a gap (opened behind a backlog, a full queue,
 * a lost push); acks of one turn go in one call; devices notified by the earlier layout
 * ({p}nseq + {p}nlast) keep their ordinals. Gateways here never poll (pollMs 10 min): whatever
 * arrives, arrives by push or by a read after a gap.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { Redis } from 'ioredis';
import type { Delivery } from '../../services/hub/port.js';
import { Keys } from '../../services/redis/keys.js';
import { RecentEvents, parsePushedNotification } from '../../services/redis/protocol.js';
import { defineScripts, runScript } from '../../services/redis/scripts.js';
import { anywhere, event, pullN, sub } from '../support/hub-contract.js';
import { redisTestKit, useRedisServer } from '../support/redis-deployment.js';

const { missing, url } = useRedisServer();
const { freshPrefix, deployment, inspect } = redisTestKit(url);

/** Calls of a command since the server started, scripts' own calls included. */
async function calls(r: Redis, command: string): Promise<number> {
  const m = new RegExp(`cmdstat_${command}:calls=(\\d+)`).exec(await r.info('commandstats'));
  return m === null ? 0 : Number(m[1]);
}

const ordinals = (ds: readonly Delivery[]) => ds.map((d) => Number(d.deliveryId.split('-')[1]));

/** The events' `i` in delivery order, and their ordinals: exactly `is`, ordinals `from` on. */
function assertDelivered(got: readonly Delivery[], is: readonly number[], from: number): void {
  assert.deepEqual(
    got.map((g) => g.event.attributes.i),
    is,
  );
  assert.deepEqual(ordinals(got), range(from, is.length));
}

/** A deployment of `gateways` hubs that never poll, closed after `f`. */
async function live(gateways: number, f: (d: Awaited<ReturnType<typeof deployment>>) => Promise<void>): Promise<void> {
  const d = await deployment(gateways, undefined, { pollMs: 600_000 });
  try {
    await f(d);
  } finally {
    await d.close();
  }
}
const range = (from: number, n: number) => Array.from({ length: n }, (_, i) => from + i);
const all = sub('all', anywhere({ name: 'i', op: 'exists' }));

describe('redis delivery', { skip: missing ?? false, timeout: 60_000 }, () => {
  it('a pushed notification parses into a delivery; the recipients of one event share its object; anything else is null', () => {
    const events = new RecentEvents(2);
    const json = '{"id":"e1","lat":1,"lon":2,"attributes":{"k":"v"}}';
    const a = parsePushedNotification(`5-1\n1700\n["s1","s2"]\n${json}`, events);
    const b = parsePushedNotification(`9-4\n1700\n["t"]\n${json}`, events);
    assert.deepEqual(a, { deliveryId: '5-1', event: { id: 'e1', lat: 1, lon: 2, attributes: { k: 'v' } }, subscriptionIds: ['s1', 's2'], publishedAtMs: 1700 });
    assert.ok(a !== null && b !== null && a.event === b.event, 'one object for one event');
    parsePushedNotification(`9-5\n1\n[]\n{"id":"e2"}`, events);
    parsePushedNotification(`9-6\n1\n[]\n{"id":"e3"}`, events); // e1 falls out of the two kept
    assert.notEqual(parsePushedNotification(`9-7\n1700\n[]\n${json}`, events)?.event, a!.event);
    for (const bad of ['5-1', 'x-1\n1\n[]\n{}', '5-1\n1\n[\n{}', '5-1\n1\n[]\n{', '5-1\n1\n[]']) assert.equal(parsePushedNotification(bad, events), null, JSON.stringify(bad));
  });

  it("an event is stored once for all its recipients: their entries name it, a read after a gap resolves it, and an entry whose event expired is skipped", () =>
    live(1, async (d) => {
      const [hub] = d.hubs;
      const k = hub.keys;
      for (const dev of ['ev-a', 'ev-b', 'ev-c']) await hub.addSubscription(dev, all);
      assert.deepEqual((await hub.publish([event({ i: 1 }), event({ i: 2 })])).map((r) => r.reached), [3, 3]);
      const refs = await inspect(async (r) => {
        const out: string[][] = [];
        for (const dev of ['ev-a', 'ev-b', 'ev-c']) {
          const rows = await r.xrange(k.notes(dev), '-', '+');
          for (const [, f] of rows) assert.ok(!f.includes('e'), 'the entry does not hold the event');
          out.push(rows.map(([, f]) => f[f.indexOf('r') + 1]));
        }
        return out;
      });
      assert.deepEqual(refs[1], refs[0], 'the recipients name the same events');
      assert.deepEqual(refs[2], refs[0]);
      const maxAge = 24 * 3600_000; // the matcher's default retention
      await inspect(async (r) => {
        for (const ref of refs[0]) {
          assert.equal((JSON.parse((await r.get(k.event(ref)))!) as { attributes: { i: number } }).attributes.i, refs[0].indexOf(ref) + 1);
          const ttl = await r.pttl(k.event(ref));
          assert.ok(ttl > maxAge && ttl <= 2 * maxAge, `the event outlives the notifications that name it (${ttl} ms)`);
        }
      });
      // Opened behind its backlog, the inbox reads the stream and gets the events whole.
      const a = await hub.openInbox('ev-a', '');
      assert.deepEqual((await pullN(a, 2)).map((x) => x.event.attributes.i), [1, 2]);
      a.close();
      // The first event's key gone (as after twice the max age): its entry is skipped, the next delivered.
      await inspect((r) => r.del(k.event(refs[0][0])));
      const b = await hub.openInbox('ev-b', '');
      assert.deepEqual((await pullN(b, 1)).map((x) => x.event.attributes.i), [2]);
      b.close();
    }));

  it('a live inbox gets its notifications pushed: its stream is read at open, not per notification', () =>
    live(1, async (d) => {
      const [hub] = d.hubs;
      await hub.addSubscription('lea', all);
      const inbox = await hub.openInbox('lea', null);
      const got: Delivery[] = [];
      const before = await inspect((r) => calls(r, 'xrange'));
      for (let i = 1; i <= 20; i++) {
        await hub.publish([event({ i })]);
        got.push(...(await pullN(inbox, 1)));
      }
      const reads = (await inspect((r) => calls(r, 'xrange'))) - before;
      assertDelivered(got, range(1, 20), 1);
      // One read when the inbox first waited (it opened with nothing queued); none per publish.
      assert.ok(reads <= 1, `the stream was read ${reads} times for 20 notifications`);
      inbox.close();
    }));

  it('a device that takes nothing while 700 notifications arrive gets every one, in order, once, when it reads', () =>
    live(1, async (d) => {
      const [hub] = d.hubs;
      await hub.addSubscription('max', all);
      const inbox = await hub.openInbox('max', null);
      const first = inbox.pull(10); // waits: the inbox is live when the notifications come
      await hub.publish([event({ i: 0 })]);
      const got = [...(await first)];
      for (let b = 0; b < 4; b++) await hub.publish(range(1 + 100 * b, 100).map((i) => event({ i })));
      got.push(...(await pullN(inbox, 401 - got.length)));
      // More arrive while it reads: pushes behind the backlog wait for the read, then follow it.
      const more = (async () => {
        for (let b = 4; b < 7; b++) await hub.publish(range(1 + 100 * b, 100).map((i) => event({ i })));
      })();
      got.push(...(await pullN(inbox, 701 - got.length)));
      await more;
      assertDelivered(got, range(0, 701), 1);
      inbox.close();
    }));

  it('notifications published while a gateway is cut from Redis arrive after it reconnects; a message that is not a notification makes the inbox read', () =>
    live(2, async (d) => {
      const [a, b] = d.hubs;
      await a.addSubscription('ned', all);
      const inbox = await a.openInbox('ned', null);
      const first = inbox.pull(10);
      await b.publish([event({ i: 1 })]);
      assertDelivered(await first, [1], 1);
      // Cut gateway a's channel connection; b publishes at once, before a has resubscribed.
      await inspect(async (r) => {
        const list = await r.client('LIST');
        const line = String(list)
          .split('\n')
          .find((l) => l.includes(`name=ambit-gateway-${a.gatewayId}-sub `));
        assert.ok(line !== undefined, 'the gateway names its channel connection');
        await r.client('KILL', 'ID', /id=(\d+)/.exec(line)![1]);
      });
      await b.publish([event({ i: 2 }), event({ i: 3 })]);
      const got = await pullN(inbox, 2);
      // Something else on the device's channel: the inbox reads its stream and finds nothing new.
      await inspect((r) => r.publish(a.keys.wake('ned'), 'not a notification'));
      await b.publish([event({ i: 4 })]);
      got.push(...(await pullN(inbox, 1)));
      assertDelivered(got, [2, 3, 4], 2);
      inbox.close();
    }));

  it('acks of one turn from many streams go in one script call; each device keeps its highest', () =>
    live(1, async (d) => {
      const [hub] = d.hubs;
      const devices = ['ack-a', 'ack-b', 'ack-c'];
      for (const dev of devices) await hub.addSubscription(dev, all);
      await hub.publish(range(1, 3).map((i) => event({ i })));
      const boxes = await Promise.all(devices.map((dev) => hub.openInbox(dev, null)));
      const got = await Promise.all(boxes.map((box) => pullN(box, 3)));
      await Promise.all(got.map((ds, i) => boxes[i].ack(ds[0].deliveryId))); // a turn before (the script is loaded)
      const before = await inspect((r) => calls(r, 'evalsha'));
      // Out of order within the turn: the highest of each device counts.
      await Promise.all(got.flatMap((ds, i) => [boxes[i].ack(ds[2].deliveryId), boxes[i].ack(ds[i].deliveryId)]));
      assert.equal((await inspect((r) => calls(r, 'evalsha'))) - before, 1, 'one script call for six acks');
      const acked = await inspect((r) => r.hmget(hub.keys.groups[0].acked, ...devices));
      assert.deepEqual(
        acked,
        got.map((ds) => ds[2].deliveryId),
      );
      for (const box of boxes) box.close();
    }));

  it('the deliver script: several events per call, a device in several of them, replays skipped per device and event', async () => {
    const k = new Keys(freshPrefix());
    await inspect(async (r) => {
      defineScripts(r);
      const ms = Date.now();
      const src = `${ms}-7`;
      // events: [entry, index]; recipients: [device, event number]
      const deliver = (events: [string, number][], recipients: [string, number][]) =>
        runScript(
          r,
          'ambitDeliver',
          5 + 2 * recipients.length,
          k.groups[0].dstate,
          k.stats,
          k.groups[0].nseq,
          k.groups[0].nlast,
          ...recipients.map(([dev]) => k.notes(dev)),
          ...recipients.map(([dev]) => k.groups[0].born(dev)),
          k.matcherEpoch,
          100,
          3_600_000,
          k.groups[0].wakePrefix,
          '',
          events.length,
          ...events.flatMap(([entry, index]) => [entry, index, ms, JSON.stringify({ id: `e${index}` })]),
          ...recipients.flatMap(([dev, n]) => [dev, n, `["s-${dev}"]`]),
          '',
        );
      const e0: [string, number] = [src, 0];
      const e1: [string, number] = [src, 1];
      const ada1: [string, number] = ['ada', 1];
      const bo1: [string, number] = ['bo', 1];
      const ada2: [string, number] = ['ada', 2];
      assert.equal(await deliver([e0, e1], [ada1, bo1, ada2]), 3);
      assert.equal(await deliver([e0, e1], [ada1, bo1, ada2, ['bo', 2]]), 1, 'the replay stores only what bo lacked');
      assert.equal(await deliver([[`${ms}-8`, 0]], [['bo', 1]]), 1, 'a later entry is stored');
      // Each entry names its event: "<in-entry id>:<event index>" (the events here are e<index>).
      const ids = async (dev: string) => (await r.xrange(k.notes(dev), '-', '+')).map(([id, f]) => [id, `e${f[f.indexOf('r') + 1].split(':')[1]}`]);
      assert.deepEqual(await ids('ada'), [
        [`${ms}-1`, 'e0'],
        [`${ms}-2`, 'e1'],
      ]);
      assert.deepEqual(await ids('bo'), [
        [`${ms}-1`, 'e0'],
        [`${ms}-2`, 'e1'],
        [`${ms}-3`, 'e0'],
      ]);
      assert.equal(await r.hget(k.stats, 'notifications'), '5');
    });
  });

  it('an inbox resumed from a token whose time part the stream does not share skips what the token covers, reading on', () =>
    live(1, async (d) => {
      const [hub] = d.hubs;
      await hub.addSubscription('tom', all);
      await hub.publish(range(1, 100).map((i) => event({ i })));
      // "1-80": ordinal 80 of a stream whose ids are "<now>-<ordinal>": a read after it returns
      // ordinals 1.. first (all covered by the token), a whole read's worth of them.
      const inbox = await hub.openInbox('tom', '1-80');
      assertDelivered(await pullN(inbox, 20), range(81, 20), 81);
      inbox.close();
    }));

  it('the deliver script: a command that fails mid-call keeps the states of what was stored, so the replay stores only the rest', async () => {
    const k = new Keys(freshPrefix());
    await inspect(async (r) => {
      defineScripts(r);
      const ms = Date.now();
      await r.set(k.notes('bad'), 'not a stream');
      const deliver = () =>
        runScript(r, 'ambitDeliver', 11, k.groups[0].dstate, k.stats, k.groups[0].nseq, k.groups[0].nlast, k.notes('ok1'), k.notes('bad'), k.notes('ok3'), k.groups[0].born('ok1'), k.groups[0].born('bad'), k.groups[0].born('ok3'), k.matcherEpoch, 100, 3_600_000, k.groups[0].wakePrefix, '', 1, `${ms}-1`, 0, ms, '{"id":"e"}', 'ok1', 1, '[]', 'bad', 1, '[]', 'ok3', 1, '[]', '');
      await assert.rejects(deliver(), /WRONGTYPE/);
      await r.del(k.notes('bad'));
      assert.equal(await deliver(), 2, 'the replay skips ok1 and stores bad and ok3');
      for (const dev of ['ok1', 'bad', 'ok3']) assert.equal(await r.xlen(k.notes(dev)), 1, dev);
      assert.equal(await r.hget(k.stats, 'notifications'), '3');
    });
  });

  it('the deliver script: a notification older than the max age (a late replay) is counted as dropped and not published', async () => {
    const k = new Keys(freshPrefix());
    await inspect(async (r) => {
      defineScripts(r);
      const listener = r.duplicate();
      try {
        const first = new Promise<string>((resolve) => listener.once('message', (_c: string, m: string) => resolve(m)));
        await listener.subscribe(k.wake('late'));
        const now = Date.now();
        const deliver = (pub: number, entry: string) =>
          runScript(r, 'ambitDeliver', 7, k.groups[0].dstate, k.stats, k.groups[0].nseq, k.groups[0].nlast, k.notes('late'), k.groups[0].born('late'), k.matcherEpoch, 100, 60_000, k.groups[0].wakePrefix, String(now), 1, entry, 0, pub, `{"id":"${entry}"}`, 'late', 1, '[]', '');
        assert.equal(await deliver(now - 120_000, '1-1'), 1);
        assert.equal(await deliver(now, '2-1'), 1);
        assert.match(await first, /^\d+-2\n/, 'the first message on the channel is the second notification');
        assert.equal(await r.xlen(k.notes('late')), 1);
        assert.equal(await r.hget(k.stats, 'dropped'), '1');
      } finally {
        listener.disconnect();
      }
    });
  });

  it("a purge's drop removes the device's notifications and ack point once: the same command replayed (a new leader) changes nothing", async () => {
    const k = new Keys(freshPrefix());
    await inspect(async (r) => {
      defineScripts(r);
      const g = k.groups[0];
      const drop = (entry: string) => runScript(r, 'ambitDrop', g.notes('pd'), g.dstate, g.nseq, g.nlast, g.acked, k.matcherEpoch, g.born('pd'), 'pd', g.wake('pd'), '', entry);
      await r.xadd(g.notes('pd'), '1000-1', 'e', '{"id":"a"}', 's', '[]', 'p', '1000');
      await r.xadd(g.notes('pd'), '1000-2', 'e', '{"id":"b"}', 's', '[]', 'p', '1000');
      await r.hset(g.acked, 'pd', '1000-1');
      assert.equal(await drop('5000-0'), 2);
      assert.deepEqual([await r.exists(g.notes('pd')), await r.hget(g.acked, 'pd'), await r.get(g.born('pd'))], [0, null, '5000-0']);
      // The device comes back; then the same purge command is applied again.
      await r.xadd(g.notes('pd'), '6000-1', 'e', '{"id":"c"}', 's', '[]', 'p', '6000');
      await r.hset(g.acked, 'pd', '6000-1');
      assert.equal(await drop('5000-0'), 0);
      assert.deepEqual([await r.xlen(g.notes('pd')), await r.hget(g.acked, 'pd')], [1, '6000-1'], 'what came after the purge stays');
      assert.equal(await drop('7000-0'), 1, 'a later purge drops it');
      assert.equal(await r.get(g.born('pd')), '7000-0');
    });
  });

  it('a device notified under the earlier layout ({p}nseq, {p}nlast) keeps its ordinals, its replay marker and its dropped count', async () => {
    const k = new Keys(freshPrefix());
    await inspect(async (r) => {
      defineScripts(r);
      const ms = Date.now() - 1000;
      // What the earlier scripts left: ordinal 41, the last from entry ms-3 index 2, 2 in the stream.
      await r.xadd(k.notes('old'), `${ms}-40`, 'e', '{"id":"x"}', 's', '[]', 'p', String(ms));
      await r.xadd(k.notes('old'), `${ms}-41`, 'e', '{"id":"y"}', 's', '[]', 'p', String(ms));
      await r.hset(k.groups[0].nseq, 'old', '41');
      await r.hset(k.groups[0].nlast, 'old', `${ms} ${ms}-3 2 2`);
      const open = () => runScript(r, 'ambitOpen', k.notes('old'), k.groups[0].dstate, k.groups[0].acked, k.stats, k.config, k.groups[0].nseq, k.groups[0].nlast, k.groups[0].born('old'), 'old', 'acked', '', '');
      assert.deepEqual(await open(), ['', '41', `${ms}-40`, '']);
      const deliver = (entry: string, index: number) =>
        runScript(r, 'ambitDeliver', 7, k.groups[0].dstate, k.stats, k.groups[0].nseq, k.groups[0].nlast, k.notes('old'), k.groups[0].born('old'), k.matcherEpoch, 100, 3_600_000, k.groups[0].wakePrefix, '', 1, entry, index, ms + 1, '{"id":"z"}', 'old', 1, '["s"]', '');
      assert.equal(await deliver(`${ms}-3`, 2), 0, 'the entry it already has is skipped');
      assert.equal(await deliver(`${ms}-3`, 3), 1);
      const last = await r.xrevrange(k.notes('old'), '+', '-', 'COUNT', 1);
      assert.equal(last[0][0], `${ms + 1}-42`);
      // The stream vanishes (expired): the next notification counts the 3 it held as dropped.
      await r.del(k.notes('old'));
      assert.equal(await deliver(`${ms}-4`, 0), 1);
      assert.equal(await r.hget(k.stats, 'dropped'), '3');
      assert.deepEqual(await open(), ['', '43', `${ms + 1}-43`, '']);
    });
  });
});
