/**
 * Fan-out shards (services/hub/fanout-shard.ts): a publish replies only once every shard it wrote
 * to has stored its notifications, a shard that goes away fails publishes UNAVAILABLE instead of
 * hanging them, and devices spread over the shards. The whole hub contract with shards runs in
 * hub-contract.test.ts.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { MessageChannel } from 'node:worker_threads';
import { pino } from 'pino';
import { AmbitError } from '../../src/model/errors.js';
import { CPU_ENGINES } from '../../src/engines/index.js';
import { EmbeddedHub } from '../../services/hub/embedded.js';
import { ShardedFanOut, serveShard, shardOf } from '../../services/hub/fanout-shard.js';
import { InboxStore } from '../../services/hub/inboxes.js';
import { HubServer } from '../../services/hub/hub-server.js';
import { type Link, portLink } from '../../services/hub/link.js';
import { LinkedHub } from '../../services/hub/linked.js';
import { ENGINE_SIDE_LIMITS, subscriptionKey } from '../../services/hub/port.js';
import { MatchCore } from '../../services/matcher/core.js';
import { PatternMatcher } from '../../src/engines/event-patterns/pattern-matcher.js';

/** A link whose frames wait until `release()`; `reached` resolves when the first one is posted. */
function gated(inner: Link): Link & { reached: Promise<void>; release(): void } {
  let held: Buffer[] | null = [];
  let reachedNow!: () => void;
  const reached = new Promise<void>((resolve) => (reachedNow = resolve));
  return {
    reached,
    release: () => {
      const frames = held ?? [];
      held = null;
      for (const f of frames) inner.post(f);
    },
    post: (frame) => {
      reachedNow();
      if (held === null) inner.post(frame);
      else held.push(Buffer.from(frame));
    },
    close: () => inner.close(),
    listen: (onFrame, onClose) => inner.listen(onFrame, onClose),
  };
}

function shardedHub(n: number, wrap: (link: Link, k: number) => Link = (l) => l, patterns: PatternMatcher | null = null) {
  const quiet = pino({ level: 'silent' });
  const stores = Array.from({ length: n }, () => new InboxStore());
  const ports = stores.map((store) => {
    const { port1, port2 } = new MessageChannel();
    serveShard(store, portLink(port2), quiet);
    return port1;
  });
  const links = ports.map((p, k) => wrap(portLink(p), k));
  const hub = new EmbeddedHub(new MatchCore(CPU_ENGINES.fast({ limits: ENGINE_SIDE_LIMITS }), undefined, patterns), { shards: new ShardedFanOut(links) });
  return {
    hub,
    stores,
    ports,
    close: async () => {
      await hub.close();
      for (const p of ports) p.close();
      for (const s of stores) s.close();
    },
  };
}

/** One shard served on a MessageChannel, the hub's fan-out to it, and what a device's log holds (event ids and subscriptions). */
function oneShard() {
  const store = new InboxStore();
  const { port1, port2 } = new MessageChannel();
  serveShard(store, portLink(port2), pino({ level: 'silent' }));
  const fanout = new ShardedFanOut([portLink(port1)]);
  return {
    fanout,
    log: (d: string): [string, string[]][] => {
      const box = store.openInbox(d, null);
      const got = box.take(10).map((x): [string, string[]] => [x.event.id, x.subscriptionIds]);
      box.close();
      return got;
    },
    close: () => {
      port1.close();
      store.close();
    },
  };
}

const everything = { id: 'all', filters: [{ constraints: [] }] };

describe('fan-out shards', { timeout: 30_000 }, () => {
  it('a publish replies only after its shard has stored the notifications', async () => {
    let gate!: ReturnType<typeof gated>;
    const { hub, stores, close } = shardedHub(1, (link) => (gate = gated(link)));
    try {
      await hub.addSubscription('d', everything);
      const order: string[] = [];
      const published = hub.publish([{ id: 'e1', lat: 0, lon: 0, attributes: {} }]).then((rs) => {
        order.push('replied');
        return rs;
      });
      await gate.reached;
      order.push('notes posted to the shard');
      assert.equal(stores[0].fanout.notifications, 0, 'held at the gate: not stored yet');
      gate.release();
      const [r] = await published;
      assert.equal(r.reached, 1);
      assert.deepEqual(order, ['notes posted to the shard', 'replied']);
      assert.equal(stores[0].fanout.notifications, 1, 'stored when the publish replied');
      const stats = await hub.stats();
      assert.equal(stats.notifications, 1);
    } finally {
      await close();
    }
  });

  it('[E20] a pattern\'s match goes to its owner\'s shard, in that device\'s log after the notifications of before, and stored before the publish replies', async () => {
    const { hub, stores, close } = shardedHub(3, undefined, new PatternMatcher({ elements: CPU_ENGINES.fast({ limits: ENGINE_SIDE_LIMITS }) }));
    try {
      const kind = (k: string) => ({ constraints: [{ name: 'kind', op: 'eq' as const, value: k }] });
      const devices = Array.from({ length: 9 }, (_, i) => `pd-${i}`);
      for (const d of devices) {
        await hub.addSubscription(d, everything);
        await hub.addSubscription(d, { id: 'seq', filters: [], pattern: { steps: [{ name: 'b', filter: kind('b') }, { name: 'a', filter: kind('a'), withinMs: 1000 }], aggregates: [{ name: 'n', fn: 'count', filter: kind('a'), before: 'b', withinMs: 1000 }] } });
      }
      await hub.publish([{ id: 'a1', lat: 0, lon: 0, attributes: { kind: 'a' }, timeMs: 1000 }]);
      await hub.publish([{ id: 'b1', lat: 0, lon: 0, attributes: { kind: 'b' }, timeMs: 1500 }]);
      for (const d of devices) {
        const k = shardOf(d, 3);
        const box = stores[k].openInbox(d, '');
        const got = box.take(100);
        box.close();
        assert.deepEqual(
          got.map((x) => [x.deliveryId.split('-')[1], x.event.id, x.subscriptionIds, x.match?.steps.map((st) => [st.step, st.event.id, st.timeMs]) ?? null, x.match === undefined ? null : { ...x.match.aggregates }]),
          [
            ['1', 'a1', ['all'], null, null],
            ['2', 'b1', ['all'], null, null],
            ['3', 'b1', ['seq'], [['b', 'b1', 1500], ['a', 'a1', 1000]], { n: 1 }],
          ],
          d,
        );
      }
      const stats = await hub.stats();
      assert.deepEqual([stats.notifications, stats.extra.patternMatches], [27, 9]);
    } finally {
      await close();
    }
  });

  it('[E20] an event delivered to a shard in two frames is written to each: the second call does not refer to the first frame', async () => {
    const { fanout, log, close } = oneShard();
    try {
      const a = { id: 'a', lat: 0, lon: 0, attributes: { k: 1 } };
      const b = { id: 'b', lat: 0, lon: 0, attributes: { k: 2 } };
      const match = (e: typeof a) => ({ steps: [{ step: 's', event: e, timeMs: 1 }], aggregates: {} });
      // One call: two recipients of b (b written once), then a frame ends.
      fanout.deliver({ id: '', ms: Date.now() }, [a, b], [[{ device: 'd1', subscriptionIds: ['p'], match: match(a) }], [{ device: 'd1', subscriptionIds: ['p'], match: match(b) }, { device: 'd2', subscriptionIds: ['p'], match: match(b) }]]);
      await fanout.flush();
      // The next frame starts with b again, the event the last call wrote last.
      fanout.deliver({ id: '', ms: Date.now() }, [b], [[{ device: 'd3', subscriptionIds: ['p'], match: match(b) }]]);
      await fanout.flush();
      const ids = (d: string) => log(d).map(([id]) => id);
      assert.deepEqual([ids('d1'), ids('d2'), ids('d3')], [['a', 'b'], ['b'], ['b']]);
    } finally {
      close();
    }
  });

  it('a number forgotten and given to another device within one frame: the shard is told again, each match lands in its own device\'s log', async () => {
    const { fanout: fan, log, close } = oneShard();
    const core = new MatchCore(CPU_ENGINES.fast({ limits: ENGINE_SIDE_LIMITS }));
    core.onOwnerRemoved = (o) => fan.forget(o);
    try {
      const ev = (id: string) => [{ id, lat: 0, lon: 0, attributes: {} }];
      const deliver = (events: ReturnType<typeof ev>) => core.matchKeys(events, (keys) => fan.deliverMatches({ id: '', ms: Date.now() }, events, keys, core));
      core.put('d1', everything, 'add');
      const first = core.numOf(subscriptionKey('d1', 'all'));
      // All before the frame goes (at the end of this turn): TELL, FORGET, TELL of the same number.
      await deliver(ev('e1'));
      core.remove('d1', 'all');
      core.put('d2', everything, 'add');
      assert.equal(core.numOf(subscriptionKey('d2', 'all')), first, 'the number is given again');
      await deliver(ev('e2'));
      await deliver(ev('e3'));
      await fan.flush();
      assert.deepEqual(log('d1'), [['e1', ['all']]]);
      assert.deepEqual(log('d2'), [['e2', ['all']], ['e3', ['all']]]);
    } finally {
      await core.close();
      close();
    }
  });

  it('each device lives in one shard; its notifications, ids and retention are those of one log', async () => {
    const { hub, stores, close } = shardedHub(3);
    try {
      const devices = Array.from({ length: 30 }, (_, i) => `dev-${i}`);
      for (const d of devices) await hub.addSubscription(d, everything);
      for (let i = 0; i < 4; i++) await hub.publish([{ id: `e${i}`, lat: 0, lon: 0, attributes: { i } }]);
      for (const d of devices) {
        const k = shardOf(d, 3);
        for (let j = 0; j < 3; j++) {
          const box = stores[j].openInbox(d, '');
          const got = box.take(100);
          box.close();
          if (j === k) assert.deepEqual(got.map((x) => [x.deliveryId.split('-')[1], x.event.attributes.i]), [['1', 0], ['2', 1], ['3', 2], ['4', 3]], d);
          else assert.deepEqual(got, [], `${d} is not in shard ${j}`);
        }
      }
      assert.equal((await hub.stats()).notifications, 120);
    } finally {
      await close();
    }
  });

  it('a shard that goes away fails publishes UNAVAILABLE, also one waiting on it', async () => {
    let gate!: ReturnType<typeof gated>;
    const { hub, ports, close } = shardedHub(1, (link) => (gate = gated(link)));
    try {
      await hub.addSubscription('d', everything);
      const waiting = hub.publish([{ id: 'e1', lat: 0, lon: 0, attributes: {} }]);
      await gate.reached;
      ports[0].close();
      const unavailable = (err: unknown) => err instanceof AmbitError && err.code === 'UNAVAILABLE';
      await assert.rejects(waiting, unavailable);
      await assert.rejects(hub.publish([{ id: 'e2', lat: 0, lon: 0, attributes: {} }]), unavailable);
    } finally {
      await close();
    }
  });

  it('through a gateway: more than the window per device, acks and credit on the shard links', async () => {
    const quiet = pino({ level: 'silent' });
    const { hub, stores, close } = shardedHub(2);
    const hubChannel = new MessageChannel();
    const server = new HubServer(hub, quiet, null);
    server.serve(portLink(hubChannel.port1));
    const shardChannels = stores.map((store) => {
      const c = new MessageChannel();
      new HubServer(null, quiet, store).serve(portLink(c.port1));
      return c;
    });
    // A window of 3: ten notifications per device need credit back from the shard links.
    const linked = new LinkedHub(portLink(hubChannel.port2), { window: 3, shards: shardChannels.map((c) => portLink(c.port2)) });
    try {
      const devices = ['dev-a', 'dev-b', 'dev-c', 'dev-d'];
      assert.deepEqual(new Set(devices.map((d) => shardOf(d, 2))).size, 2, 'the devices use both shards');
      for (const d of devices) await linked.addSubscription(d, everything);
      const boxes = await Promise.all(devices.map((d) => linked.openInbox(d, null)));
      for (let i = 0; i < 10; i++) await linked.publish([{ id: `e${i}`, lat: 0, lon: 0, attributes: { i } }]);
      for (const [k, box] of boxes.entries()) {
        const got: number[] = [];
        let last = '';
        while (got.length < 10) {
          const ds = await box.pull(100);
          assert.ok(ds.length <= 3, 'never more than the window at once');
          for (const x of ds) {
            got.push(x.event.attributes.i as number);
            last = x.deliveryId;
          }
        }
        assert.deepEqual(got, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9], devices[k]);
        await box.ack(last);
        // A second stream of the device through this gateway: the ack went to the shard ahead of it.
        const again = await linked.openInbox(devices[k], null);
        assert.equal(again.resumeToken, last, `${devices[k]} resumes after its ack`);
        again.close();
      }
    } finally {
      await linked.close();
      server.close();
      for (const c of [hubChannel, ...shardChannels]) c.port1.close();
      await close();
    }
  });

  // The fast engine keeps tags (each match listed as its owner's number); the rtree engine lists keys.
  for (const engine of ['fast', 'rtree'] as const)
  it(`grouping matches in the shards stores what the match core groups, with subscriptions removed and re-added while matches are awaited (${engine} engine: ${engine === 'fast' ? 'owners' : 'keys'})`, async () => {
    const quiet = pino({ level: 'silent' });
    const n = 3;
    const stores = Array.from({ length: n }, () => new InboxStore());
    const ports = stores.map((store) => {
      const { port1, port2 } = new MessageChannel();
      serveShard(store, portLink(port2), quiet);
      return port1;
    });
    const fan = new ShardedFanOut(ports.map(portLink));
    const core = new MatchCore(CPU_ENGINES[engine]({ limits: ENGINE_SIDE_LIMITS }));
    core.onOwnerRemoved = (o) => fan.forget(o);
    let seed = 42;
    const rand = (k: number) => {
      seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
      return (seed >>> 8) % k;
    };
    const devices = Array.from({ length: 25 }, (_, i) => `d${i}`);
    const kSub = (id: string, v: number) => ({ id, filters: [{ constraints: [{ name: 'k', op: 'eq' as const, value: v }] }] });
    const put = () => {
      const d = devices[rand(devices.length)];
      const id = `s${rand(6)}`;
      core.put(d, kSub(id, rand(4)), 'upsert');
    };
    for (let i = 0; i < 80; i++) put();
    const expected = new Map<string, [string, string[]][]>();
    let eventNo = 0;
    for (let round = 0; round < 40; round++) {
      const events = Array.from({ length: 1 + rand(6) }, () => ({ id: `e${eventNo++}`, lat: 0, lon: 0, attributes: { k: rand(4) } }));
      // Both matches begin (the engine answers as they are called), then, while they are awaited,
      // some subscriptions leave (their numbers arrive gone, their keys unknown) and some come back
      // under new numbers; numbers freed now are given again only once both have settled.
      const delivering = core.matchKeys(events, (keys) => fan.deliverMatches({ id: '', ms: Date.now() }, events, keys, core));
      const grouping = core.match(events);
      for (let i = rand(4); i > 0; i--) {
        const d = devices[rand(devices.length)];
        const subs = core.list(d);
        if (subs.length > 0) core.remove(d, subs[rand(subs.length)].id);
      }
      for (let i = rand(4); i > 0; i--) put();
      const [reached, grouped] = await Promise.all([delivering, grouping]);
      await fan.flush();
      events.forEach((e, i) => {
        let sum = 0;
        for (const r of grouped[i]) {
          sum += r.subscriptionIds.length;
          const list = expected.get(r.device) ?? [];
          list.push([e.id, [...r.subscriptionIds]]);
          expected.set(r.device, list);
        }
        assert.equal(reached[i], sum, `reached of ${e.id}`);
      });
    }
    let total = 0;
    for (const d of devices) {
      const got = stores[shardOf(d, n)].openInbox(d, null).take(100_000);
      assert.deepEqual(got.map((x) => [x.event.id, x.subscriptionIds]), expected.get(d) ?? [], d);
      total += got.length;
    }
    assert.ok(total > 100, `a workload that delivers (${total})`);
    assert.equal(fan.notifications, total);
    for (const p of ports) p.close();
    for (const st of stores) st.close();
    await core.close();
  });

  for (const where of ['in the hub', 'in 3 shards'] as const) {
    it(`a subscription removed while its match is awaited: the device still gets one notification with both ids (grouped ${where})`, async () => {
      for (const removed of ['a', 'b']) {
        // The engine's answer waits for `release`: the removal lands while the match is awaited.
        let release!: () => void;
        const gate = new Promise<void>((resolve) => (release = resolve));
        const engine = CPU_ENGINES.fast({ limits: ENGINE_SIDE_LIMITS });
        const gatedEngine = new Proxy(engine, {
          get(t, p) {
            const v = (t as unknown as Record<string | symbol, unknown>)[p];
            if (p === 'match' || p === 'matchBatch') {
              return async (...args: unknown[]) => {
                const r = await (v as (...a: unknown[]) => Promise<unknown>).apply(t, args);
                await gate;
                return r;
              };
            }
            return typeof v === 'function' ? v.bind(t) : v;
          },
        });
        const core = new MatchCore(gatedEngine);
        const quiet = pino({ level: 'silent' });
        const stores = where === 'in the hub' ? [] : [0, 1, 2].map(() => new InboxStore());
        const ports = stores.map((store) => {
          const { port1, port2 } = new MessageChannel();
          serveShard(store, portLink(port2), quiet);
          return port1;
        });
        const hub = new EmbeddedHub(core, stores.length === 0 ? {} : { shards: new ShardedFanOut(ports.map(portLink)) });
        for (const id of ['a', 'b']) await hub.addSubscription('dev', { ...everything, id });
        const published = hub.publish([{ id: 'e', lat: 0, lon: 0, attributes: {} }]);
        await hub.removeSubscription('dev', removed);
        release();
        const [r] = await published;
        assert.equal(r.reached, 2);
        const box = stores.length === 0 ? await hub.openInbox('dev', null) : stores[shardOf('dev', 3)].openInbox('dev', null);
        const got = await box.pull(10);
        assert.deepEqual(got.map((d) => [d.event.id, d.subscriptionIds]), [['e', ['a', 'b']]], `with ${removed} removed`);
        await hub.close();
        for (const p of ports) p.close();
        for (const st of stores) st.close();
      }
    });
  }

  it('spreads device ids evenly and the same way every time', () => {
    const counts = [0, 0, 0, 0];
    for (let i = 0; i < 40_000; i++) counts[shardOf(`device-${i}`, 4)]++;
    for (const c of counts) assert.ok(c > 9_000 && c < 11_000, `shard sizes ${counts.join(', ')}`);
    assert.equal(shardOf('device-1', 4), shardOf('device-1', 4));
    assert.equal(shardOf('anything', 1), 0);
    // FNV-1a of "a" is 0xe40c292c: fixed, so every process of a node agrees.
    assert.equal(shardOf('a', 1 << 30), 0xe40c292c % (1 << 30));
  });
});
