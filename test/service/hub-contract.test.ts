/** The hub contract on the embedded, memory-only hub (the Redis hub runs it in redis-hub.test.ts). */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { fromEvent } from '../../services/edge/convert.js';
import { CPU_ENGINES } from '../../src/engines/index.js';
import { EmbeddedHub } from '../../services/hub/embedded.js';
import { MatchCore } from '../../services/matcher/core.js';
import { runHubContract } from '../support/hub-contract.js';
import { ENGINE_SIDE_LIMITS } from '../../services/hub/port.js';
import { MessageChannel } from 'node:worker_threads';
import { pino } from 'pino';
import { HubServer } from '../../services/hub/hub-server.js';
import { LinkedHub } from '../../services/hub/linked.js';
import { portLink } from '../../services/hub/link.js';
import { InboxStore } from '../../services/hub/inboxes.js';
import { ShardedFanOut, serveShard } from '../../services/hub/fanout-shard.js';
import { PartitionedHub } from '../../services/hub/partitioned.js';

runHubContract('embedded', async (setup) => {
  const core = new MatchCore(CPU_ENGINES.fast({ limits: ENGINE_SIDE_LIMITS }), setup.maxSubscriptionsPerDevice);
  const hub = new EmbeddedHub(core, { retention: setup.retention });
  return { hub, dispose: () => hub.close() };
});


describe('embedded hub: retention of devices that went quiet', () => {
  it('a sweep drops (and counts) aged notifications of devices that neither connect nor receive', async () => {
    let now = 1_000_000;
    const core = new MatchCore(CPU_ENGINES.fast({ limits: ENGINE_SIDE_LIMITS }));
    const hub = new EmbeddedHub(core, { retention: { maxPerDevice: 100, maxAgeMs: 60_000 }, now: () => now });
    try {
      for (let d = 0; d < 20; d++) await hub.addSubscription(`d${d}`, { id: 's', filters: [{ constraints: [{ name: 'k', op: 'exists' }] }] });
      for (let i = 0; i < 5; i++) await hub.publish([{ id: `e${i}`, lat: 0, lon: 0, attributes: { k: i } }]);
      assert.equal((await hub.stats()).notifications, 100);
      now += 61_000; // every notification is past its age; nobody reads or receives anything
      hub.sweep();
      assert.equal((await hub.stats()).notificationsDropped, 100);
      const box = await hub.openInbox('d3', null);
      assert.equal(box.missed, 5);
      box.close();
    } finally {
      await hub.close();
    }
  });
});

describe('embedded hub: a purge while a match is awaited', () => {
  // The fast engine keeps tags (the core matches through matchBatchTagged: owners); the rtree engine answers keys (match).
  for (const name of ['fast', 'rtree'] as const) {
    /** The engine, its answers held back until `gate()`; `matching` resolves once it has them. */
    const held = () => {
      const engine = CPU_ENGINES[name]({ limits: ENGINE_SIDE_LIMITS });
      let gate!: () => void;
      const opened = new Promise<void>((resolve) => (gate = resolve));
      let started!: () => void;
      const matching = new Promise<void>((resolve) => (started = resolve));
      const hold = async <T>(answer: Promise<T>): Promise<T> => {
        const r = await answer;
        started();
        await opened;
        return r;
      };
      if (engine.matchBatchTagged !== undefined) {
        const tagged = engine.matchBatchTagged.bind(engine);
        engine.matchBatchTagged = (es) => hold(tagged(es));
      } else {
        const match = engine.match.bind(engine);
        engine.match = (e) => hold(match(e));
      }
      return { engine, gate, matching };
    };

    it(`stores nothing for the purged device of a match that was in flight (an engine that answers later, as the GPU does; ${name})`, async () => {
      const { engine, gate, matching } = held();
      const hub = new EmbeddedHub(new MatchCore(engine));
      try {
        for (const d of ['gone', 'kept']) await hub.addSubscription(d, { id: 's', filters: [{ constraints: [{ name: 'k', op: 'exists' }] }] });
        const published = hub.publish([{ id: 'e1', lat: 0, lon: 0, attributes: { k: 1 } }]);
        await matching; // the engine has both matches and has not answered yet
        await hub.purgeDevice('gone');
        gate();
        assert.equal((await published)[0].reached, 1, 'only the device that stayed');
        const box = await hub.openInbox('gone', null);
        assert.deepEqual(box.take(10), [], 'no notification came back to the purged device');
        box.close();
        const kept = await hub.openInbox('kept', null);
        assert.deepEqual(kept.take(10).map((d) => d.event.id), ['e1']);
        kept.close();
      } finally {
        await hub.close();
      }
    });

    it(`a device purged and subscribed again while a match is in flight gets nothing of that match, and what a match begun after the purge finds (${name})`, async () => {
      const { engine, gate, matching } = held();
      const hub = new EmbeddedHub(new MatchCore(engine));
      const has = { filters: [{ constraints: [{ name: 'k', op: 'exists' as const }] }] };
      try {
        await hub.addSubscription('d', { id: 's', ...has });
        const before = hub.publish([{ id: 'e1', lat: 0, lon: 0, attributes: { k: 1 } }]);
        await matching;
        await hub.purgeDevice('d');
        await hub.addSubscription('d', { id: 's', ...has });
        // Begun after the purge, and held like the first until the gate opens: both are in flight together.
        const after = hub.publish([{ id: 'e2', lat: 0, lon: 0, attributes: { k: 1 } }]);
        gate();
        assert.equal((await before)[0].reached, 0, 'the purged subscription is not reached');
        assert.equal((await after)[0].reached, 1);
        const box = await hub.openInbox('d', null);
        assert.deepEqual(box.take(10).map((n) => [n.event.id, n.subscriptionIds]), [['e2', ['s']]]);
        box.close();
      } finally {
        await hub.close();
      }
    });

    it(`delivers as matched, in one notification per device, a subscription removed and one added again while the match was in flight (${name})`, async () => {
      const { engine, gate, matching } = held();
      const hub = new EmbeddedHub(new MatchCore(engine));
      const has = { filters: [{ constraints: [{ name: 'k', op: 'exists' as const }] }] };
      try {
        for (const id of ['a', 'b']) await hub.addSubscription('d', { id, ...has });
        const published = hub.publish([{ id: 'e1', lat: 0, lon: 0, attributes: { k: 1 } }]);
        await matching;
        // Both leave while the match is awaited (the device's entry goes with its last one); one comes back.
        await hub.removeSubscription('d', 'a');
        await hub.removeSubscription('d', 'b');
        await hub.addSubscription('d', { id: 'b', ...has });
        gate();
        assert.equal((await published)[0].reached, 2);
        const box = await hub.openInbox('d', null);
        assert.deepEqual(box.take(10).map((n) => [n.event.id, n.subscriptionIds]), [['e1', ['a', 'b']]]);
        box.close();
      } finally {
        await hub.close();
      }
    });
  }
});

describe('wire conversion', () => {
  it('keeps an attribute named __proto__ in a notification', () => {
    const e = fromEvent({ id: 'x', lat: 1, lon: 2, attributes: JSON.parse('{"__proto__": 5, "a": "b"}') as Record<string, number | string> });
    assert.deepEqual(Object.keys(e.attributes), ['__proto__', 'a']);
  });
});

// The same contract through the link a node's gateway processes use (AMBIT_GATEWAYS without
// Redis): a real structured-clone channel between the gateway side and the hub.
runHubContract('linked (gateway side of a node-local hub)', async (setup) => {
  const core = new MatchCore(CPU_ENGINES.fast({ limits: ENGINE_SIDE_LIMITS }), setup.maxSubscriptionsPerDevice);
  const hub = new EmbeddedHub(core, { retention: setup.retention });
  const { port1, port2 } = new MessageChannel();
  const server = new HubServer(hub, pino({ level: 'silent' }), hub);
  server.serve(portLink(port1));
  const linked = new LinkedHub(portLink(port2));
  return {
    hub: linked,
    dispose: async () => {
      await linked.close();
      server.close();
      port1.close();
      await hub.close();
    },
  };
});

// And with the device logs in fan-out shards (AMBIT_FANOUT_SHARDS): the hub matches and routes
// each notification to its device's shard, the gateway opens inboxes on a link to that shard.
runHubContract('linked, with 3 fan-out shards', async (setup) => {
  const quiet = pino({ level: 'silent' });
  const k = 3;
  const stores = Array.from({ length: k }, () => new InboxStore({ retention: setup.retention }));
  const toShards = stores.map((store) => {
    const { port1, port2 } = new MessageChannel();
    serveShard(store, portLink(port2), quiet);
    return port1;
  });
  const core = new MatchCore(CPU_ENGINES.fast({ limits: ENGINE_SIDE_LIMITS }), setup.maxSubscriptionsPerDevice);
  const hub = new EmbeddedHub(core, { shards: new ShardedFanOut(toShards.map(portLink)) });
  const hubChannel = new MessageChannel();
  const server = new HubServer(hub, quiet, null);
  server.serve(portLink(hubChannel.port1));
  const shardServers = stores.map((store) => new HubServer(null, quiet, store));
  const shardChannels = stores.map((_, i) => {
    const c = new MessageChannel();
    shardServers[i].serve(portLink(c.port1));
    return c;
  });
  const linked = new LinkedHub(portLink(hubChannel.port2), { shards: shardChannels.map((c) => portLink(c.port2)) });
  return {
    hub: linked,
    dispose: async () => {
      await linked.close();
      server.close();
      for (const s of shardServers) s.close();
      for (const p of [hubChannel.port1, ...shardChannels.map((c) => c.port1), ...toShards]) p.close();
      await hub.close();
      for (const s of stores) s.close();
    },
  };
});

// And split by device (AMBIT_PARTITIONS): three embedded hubs, each with its own engine and logs,
// each behind a link as a gateway reaches a partition's thread, and one PartitionedHub in front.
runHubContract('partitioned over 3 linked hubs', async (setup) => {
  const quiet = pino({ level: 'silent' });
  const parts = Array.from({ length: 3 }, () => {
    const hub = new EmbeddedHub(new MatchCore(CPU_ENGINES.fast({ limits: ENGINE_SIDE_LIMITS }), setup.maxSubscriptionsPerDevice), { retention: setup.retention });
    const { port1, port2 } = new MessageChannel();
    const server = new HubServer(hub, quiet, hub);
    server.serve(portLink(port1));
    return { hub, server, port1, linked: new LinkedHub(portLink(port2), { name: 'hub partition' }) };
  });
  const hub = new PartitionedHub(parts.map((p) => p.linked));
  return {
    hub,
    dispose: async () => {
      await hub.close();
      for (const p of parts) {
        p.server.close();
        p.port1.close();
        await p.hub.close();
      }
    },
  };
});
