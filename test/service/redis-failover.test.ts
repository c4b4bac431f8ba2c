/**
 * Matcher leadership in the Redis deployment, against a real redis-server: one matcher holds the
 * lease and leads, the others stand by with warm engines; a standby takes over when the leader
 * stops or dies, and a leader that paused past its lease has its late writes refused (fenced by
 * the lease token) and steps down. Counts every notification: none lost, none twice. The same
 * tests run on a Redis Cluster (3 masters with a replica each), where the notifications live in
 * device groups spread over the masters and each group is fenced by its own key, which a new
 * leader raises before it writes there.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { compareStreamIds } from '../../services/redis/codec.js';
import { Keys } from '../../services/redis/keys.js';
import { RedisHub } from '../../services/hub/redis.js';
import { RedisMatcher, type RedisMatcherOptions } from '../../services/matcher/redis.js';
import { defineScripts, runScript } from '../../services/redis/scripts.js';
import { anywhere, eq, event, pullN, sub } from '../support/hub-contract.js';
import { within } from '../support/grpc.js';
import { redisTestKit, useRedisCluster, useRedisServer } from '../support/redis-deployment.js';
import type { RedisSource } from '../../services/redis/connection.js';

const single = useRedisServer();
const cluster = useRedisCluster();

const LEASE_MS = 300;
const all = sub('all', anywhere({ name: 'i', op: 'exists' }));
const odd = sub('odd', anywhere(eq('odd', true)));

for (const kind of ['single', 'cluster'] as const) {
const source: () => RedisSource = kind === 'single' ? single.url : cluster.source;
const missing = kind === 'single' ? single.missing : cluster.missing;
// Few device groups on the cluster, so the devices of a test share groups as well as spreading.
const { freshPrefix, keysOf, matcherOptions, hubOptions, inspect, storedEvents } = redisTestKit(source, 4);

/** Matchers and one gateway on a fresh prefix; everything still running is stopped by close(). */
async function leadership(f: (d: { prefix: string; start(more?: Partial<RedisMatcherOptions>): Promise<RedisMatcher>; hub: RedisHub }) => Promise<void>) {
  const prefix = freshPrefix();
  const matchers: RedisMatcher[] = [];
  const hub = await RedisHub.connect(hubOptions(prefix, { publishTimeoutMs: 20_000 }));
  try {
    await f({
      prefix,
      hub,
      async start(more = {}) {
        const m = await RedisMatcher.start(matcherOptions(prefix, { leaseMs: LEASE_MS, ...more }));
        matchers.push(m);
        return m;
      },
    });
  } finally {
    await hub.close();
    for (const m of matchers) await m.stop();
  }
}

/** Each stored notification's `i` of a device, in stream order, and its ordinals. */
async function stored(prefix: string, device: string): Promise<{ is: number[]; ordinals: number[] }> {
  const entries = await storedEvents(prefix, device);
  return {
    is: entries.map(([, e]) => e.attributes.i as number),
    ordinals: entries.map(([id]) => Number(id.split('-')[1])),
  };
}

/** A promise and the function that resolves it. */
function signal(): { promise: Promise<void>; fire: () => void } {
  let fire!: () => void;
  const promise = new Promise<void>((resolve) => (fire = resolve));
  return { promise, fire };
}

const range = (from: number, n: number) => Array.from({ length: n }, (_, i) => from + i);

describe(`redis matcher leadership (${kind === 'single' ? 'one redis-server' : 'Redis Cluster'})`, { skip: missing ?? false, timeout: 60_000 }, () => {
  // The scripts on one server (the cluster's group fences have their own test in redis-cluster.test.ts).
  if (kind === 'single') it('the lease scripts: one holder at a time, tokens grow, and a write with an older token changes nothing', async () => {
    const k = new Keys(freshPrefix());
    await inspect(async (r) => {
      defineScripts(r);
      assert.deepEqual(await runScript(r, 'ambitLeaseAcquire', k.matcherLease, k.matcherEpoch, 'a', 60_000), [1, '1']);
      assert.deepEqual(await runScript(r, 'ambitLeaseAcquire', k.matcherLease, k.matcherEpoch, 'b', 60_000), [0, '1 a']);
      assert.equal(await runScript(r, 'ambitLeaseRenew', k.matcherLease, '1 b', 60_000), 0);
      assert.equal(await runScript(r, 'ambitLeaseRenew', k.matcherLease, '1 a', 60_000), 1);
      assert.equal(await runScript(r, 'ambitCommit', k.matcherOffset, k.matcherEpoch, '1', '5-0'), 1);
      assert.equal(await runScript(r, 'ambitLeaseRelease', k.matcherLease, '1 b'), 0);
      assert.equal(await runScript(r, 'ambitLeaseRelease', k.matcherLease, '1 a'), 1);
      assert.deepEqual(await runScript(r, 'ambitLeaseAcquire', k.matcherLease, k.matcherEpoch, 'b', 60_000), [1, '2']);
      // Token 1 is stale now: its offset, answers and notifications are refused whole.
      await assert.rejects(runScript(r, 'ambitCommit', k.matcherOffset, k.matcherEpoch, '1', '9-0'), /FENCED/);
      assert.equal(await r.get(k.matcherOffset), '5-0');
      // The stats record: the leader's is written, a stale leader's is not (quietly: 0).
      assert.equal(await runScript(r, 'ambitStats', k.matcherStats, k.matcherEpoch, '2', '{"matcherId":"b"}', 60_000), 1);
      assert.equal(await runScript(r, 'ambitStats', k.matcherStats, k.matcherEpoch, '1', '{"matcherId":"a"}', 60_000), 0);
      assert.equal(await r.get(k.matcherStats), '{"matcherId":"b"}');
      const sub = await r.duplicate();
      await sub.subscribe(k.reply('gw'));
      let replies = 0;
      sub.on('message', () => replies++);
      await assert.rejects(runScript(r, 'ambitAnswer', 3, k.stats, k.matcherEpoch, k.eventId('e1'), '1', 3, 0, 60_000, '0 1-0', k.reply('gw'), 'stale'), /FENCED/);
      const ms = Date.now();
      await assert.rejects(
        runScript(r, 'ambitDeliver', 7, k.groups[0].dstate, k.stats, k.groups[0].nseq, k.groups[0].nlast, k.notes('d'), k.groups[0].born('d'), k.matcherEpoch, 100, 60_000, k.groups[0].wakePrefix, '', 1, `${ms}-1`, 0, ms, '{"id":"e"}', 'd', 1, '[]', '1'),
        /FENCED/,
      );
      assert.equal(await r.exists(k.notes('d'), k.groups[0].dstate, k.stats, k.eventId('e1')), 0);
      // The current token passes; a reply published after the stale one arrives alone.
      assert.equal(await runScript(r, 'ambitAnswer', 2, k.stats, k.matcherEpoch, '2', 3, 0, 60_000, k.reply('gw'), 'fresh'), 1);
      assert.equal(await r.hget(k.stats, 'events'), '3');
      await sub.quit();
      assert.equal(replies, 1);
    });
  });

  it('a second matcher stands by with a warm engine and delivers nothing; when the leader stops it leads at once', () =>
    leadership(async ({ prefix, start, hub }) => {
      const a = await start();
      let read!: () => void;
      const b = await start({ hooks: { onBatch: () => read?.() } });
      assert.equal(a.role, 'leader');
      assert.equal(b.role, 'standby');
      assert.equal(a.epoch, 1);
      await hub.addSubscription('lou', all);
      await hub.addSubscription('max', odd);
      await hub.updateLocations([{ device: 'lou', lat: 45, lon: 9 }]);
      for (let i = 1; i <= 6; i++) assert.deepEqual((await hub.publish([event({ i, odd: i % 2 === 1 })])).map((r) => r.reached), [i % 2 === 1 ? 2 : 1]);
      assert.equal(b.eventsMatchedCount, 0);
      // The standby applied the subscriptions and the move once it has read the whole stream.
      const last = await inspect(async (r) => (await r.xrevrange(keysOf(prefix).in, '+', '-', 'COUNT', 1))[0][0]);
      while (compareStreamIds(b.position, last) < 0) await new Promise<void>((resolve) => (read = resolve));
      assert.equal(b.core.subscriptions, 2);
      assert.equal(b.devices, 1);
      const stats = await hub.stats();
      assert.equal(stats.extra.matcherId, a.matcherId);
      assert.equal(stats.extra.matcherEpoch, 1);
      await a.stop();
      // Released, not lapsed: the standby takes it on its next lease tick.
      await within(b.whenRole('leader'), 10_000, 'the standby leads');
      assert.equal(b.epoch, 2);
      assert.deepEqual((await hub.publish([event({ i: 7, odd: true })])).map((r) => r.reached), [2]);
      assert.deepEqual(await stored(prefix, 'lou'), { is: range(1, 7), ordinals: range(1, 7) });
      assert.deepEqual((await stored(prefix, 'max')).is, [1, 3, 5, 7]);
      assert.equal((await hub.stats()).notifications, 11);
    }));

  it('the leader dies mid-traffic: the standby takes over after the lease, every publish is answered and stored once', () =>
    leadership(async ({ prefix, start, hub }) => {
      let killed: Promise<void> | null = null;
      let a!: RedisMatcher;
      let batches = 0;
      a = await start({
        hooks: {
          afterDeliver() {
            // Stored, offset and replies not written: the process dies here, in its 5th batch.
            if (++batches === 5 && killed === null) killed = a.crash();
          },
        },
      });
      const b = await start();
      await hub.addSubscription('lou', all);
      await hub.addSubscription('max', odd);
      const N = 40;
      const answers: Promise<number[]>[] = [];
      for (let i = 1; i <= N; i++) {
        answers.push(hub.publish([event({ i, odd: i % 2 === 1 })]).then((rs) => rs.map((r) => r.reached)));
        if (i % 4 === 0) await answers[i - 1];
      }
      const reached = await Promise.all(answers);
      assert.ok(killed !== null, 'the leader died mid-traffic');
      assert.deepEqual(
        reached,
        range(1, N).map((i) => [i % 2 === 1 ? 2 : 1]),
      );
      assert.equal(b.role, 'leader');
      assert.equal(b.epoch, 2);
      assert.deepEqual(await stored(prefix, 'lou'), { is: range(1, N), ordinals: range(1, N) });
      assert.deepEqual(
        (await stored(prefix, 'max')).is,
        range(1, N).filter((i) => i % 2 === 1),
      );
      const box = await hub.openInbox('lou', null);
      assert.deepEqual(
        (await pullN(box, N)).map((d) => d.event.attributes.i),
        range(1, N),
      );
      box.close();
    }));

  it('a standby that lags behind the leader takes over from its own position: what it had not applied is applied, nothing delivered twice', () =>
    leadership(async ({ prefix, start, hub }) => {
      let lagging = false;
      const gate = signal();
      const held = signal();
      const leased = signal();
      const a = await start();
      const b = await start({
        hooks: {
          async beforeRead() {
            if (!lagging) return;
            held.fire();
            await gate.promise;
          },
          onLease: leased.fire,
        },
      });
      await hub.addSubscription('lou', all);
      assert.deepEqual((await hub.publish([event({ i: 1 })])).map((r) => r.reached), [1]);
      lagging = true;
      await within(held.promise, 10_000, 'the standby stopped reading');
      // The standby reads none of this; the leader applies, delivers and commits it.
      await hub.addSubscription('max', odd);
      assert.deepEqual((await hub.publish([event({ i: 2, odd: true })])).map((r) => r.reached), [2]);
      await a.crash();
      await within(leased.promise, 10_000, 'the standby takes the lease');
      lagging = false;
      gate.fire();
      await within(b.whenRole('leader'), 10_000, 'the standby leads');
      // It led from its own position, behind the stored offset: max's subscription is in its engine.
      assert.deepEqual((await hub.publish([event({ i: 3, odd: true })])).map((r) => r.reached), [2]);
      assert.deepEqual(await stored(prefix, 'lou'), { is: [1, 2, 3], ordinals: [1, 2, 3] });
      assert.deepEqual((await stored(prefix, 'max')).is, [2, 3]);
    }));

  it("a batch whose notifications fail to store: the batch read meanwhile stores nothing ahead of it, and the replay stores both in order", () =>
    leadership(async ({ prefix, start, hub }) => {
      const entered = signal();
      const gate = signal();
      const secondMatched = signal();
      let calls = 0;
      let matched = 0;
      await start({
        hooks: {
          async beforeStore() {
            if (++calls !== 1) return;
            entered.fire();
            await gate.promise;
            throw new Error('injected: the first batch fails to store');
          },
          onMatched({ publishes }) {
            matched += publishes;
            if (matched >= 2) secondMatched.fire();
          },
        },
      });
      await hub.addSubscription('lou', all);
      const first = hub.publish([event({ i: 1 })]);
      await within(entered.promise, 10_000, 'the first batch reached its store');
      const second = hub.publish([event({ i: 2 })]);
      // The matcher reads and matches the second publish while the first batch is held.
      await within(secondMatched.promise, 10_000, 'the second publish was matched while the first batch is held');
      gate.fire();
      assert.deepEqual((await first).map((r) => r.reached), [1]);
      assert.deepEqual((await second).map((r) => r.reached), [1]);
      assert.deepEqual(await stored(prefix, 'lou'), { is: [1, 2], ordinals: [1, 2] });
    }));

  it('a leader paused past its lease: the new leader delivers its batch; its late writes are refused and it stands down', () =>
    leadership(async ({ prefix, start, hub }) => {
      const gate = signal();
      let held = false;
      const arrived = signal();
      const a = await start({
        hooks: {
          async beforeStore() {
            if (!held) return;
            arrived.fire();
            await gate.promise;
          },
        },
      });
      const b = await start();
      await hub.addSubscription('lou', all);
      assert.deepEqual((await hub.publish([event({ i: 1 })])).map((r) => r.reached), [1]);
      held = true;
      a.suspendLease(); // its lease timer stops: the lease lapses while its loop goes on
      const second = hub.publish([event({ i: 2 })]);
      await within(arrived.promise, 10_000, 'the leader reached the gate'); // matched by a, its notifications built and not yet sent
      await within(b.whenRole('leader'), 10_000, 'the standby leads');
      assert.deepEqual((await second).map((r) => r.reached), [1]);
      gate.fire();
      await within(a.whenRole('standby'), 10_000, 'the fenced leader stands down');
      assert.equal(a.fencedWrites, 1);
      assert.deepEqual(await stored(prefix, 'lou'), { is: [1, 2], ordinals: [1, 2] });
      assert.deepEqual((await hub.publish([event({ i: 3 })])).map((r) => r.reached), [1]);
      assert.deepEqual((await stored(prefix, 'lou')).is, [1, 2, 3]);
      assert.equal(a.eventsMatchedCount, 2);
      assert.equal((await hub.stats()).extra.matcherId, b.matcherId);
    }));
});
}
