/**
 * The protocol check of a Redis deployment (services/redis/presence.ts): every gateway and matcher
 * records the protocol it speaks while it lives; a process of another protocol is refused while one
 * of them lives, naming it, and starts once they have stopped, or once a dead one's record lapsed.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { Redis } from 'ioredis';
import { RedisHub } from '../../services/hub/redis.js';
import { RedisMatcher } from '../../services/matcher/redis.js';
import { PROTOCOL_VERSION, Presence } from '../../services/redis/presence.js';
import { defineScripts } from '../../services/redis/scripts.js';
import { redisTestKit, useRedisServer } from '../support/redis-deployment.js';

const { missing, url } = useRedisServer();
const { freshPrefix, inspect, matcherOptions, hubOptions } = redisTestKit(url);
const NEXT = PROTOCOL_VERSION + 1;
const refusal = (live: string, protocol: number, mine: number) =>
  new RegExp(`a live process of this deployment \\("${live}:[^"]+"\\) speaks protocol ${protocol}, this one ${mine}`);

describe('protocol check', { skip: missing ?? false }, () => {
  it('a process of another protocol is refused while a gateway or a matcher of this one lives, and starts once they stopped', async () => {
    const prefix = freshPrefix();
    const matcher = await RedisMatcher.start(matcherOptions(prefix));
    const hub = await RedisHub.connect(hubOptions(prefix));
    let newer: RedisHub | null = null;
    try {
      const records = await inspect((r: Redis) => r.hgetall(`${prefix}procs`));
      assert.deepEqual(Object.keys(records).map((f) => f.split(':')[0]).sort(), ['gateway', 'matcher']);
      for (const v of Object.values(records)) assert.match(v, new RegExp(`^${PROTOCOL_VERSION} \\d+$`));
      await assert.rejects(RedisHub.connect(hubOptions(prefix, { protocol: NEXT })), refusal('(gateway|matcher)', PROTOCOL_VERSION, NEXT));
      await assert.rejects(RedisMatcher.start(matcherOptions(prefix, { protocol: NEXT })), refusal('(gateway|matcher)', PROTOCOL_VERSION, NEXT));
      assert.equal(Object.keys(await inspect((r: Redis) => r.hgetall(`${prefix}procs`))).length, 2, 'a refused process records nothing');
      await hub.close();
      await assert.rejects(RedisHub.connect(hubOptions(prefix, { protocol: NEXT })), refusal('matcher', PROTOCOL_VERSION, NEXT), 'the matcher still lives');
      await matcher.stop();
      assert.deepEqual(await inspect((r: Redis) => r.hgetall(`${prefix}procs`)), {}, 'a clean stop removes its record');
      newer = await RedisHub.connect(hubOptions(prefix, { protocol: NEXT }));
      await assert.rejects(RedisMatcher.start(matcherOptions(prefix)), refusal('gateway', NEXT, PROTOCOL_VERSION), 'and now this protocol is the other one');
    } finally {
      await newer?.close();
      await hub.close();
      await matcher.stop();
    }
  });

  it("a dead process's record lapses (a live one renews its own); another protocol then starts", async () => {
    const key = `${freshPrefix()}procs`;
    await inspect(async (r: Redis) => {
      defineScripts(r);
      const clock = { ms: 1_000_000 };
      const now = () => clock.ms;
      const live = await Presence.join('test', r, key, 'gateway', { ttlMs: 10_000, now });
      const dead = await Presence.join('test', r, key, 'matcher', { ttlMs: 10_000, now });
      await dead.leave(false); // dies: its record stays until it lapses
      clock.ms += 6_000;
      await live.beat(); // renewed to 1 016 000
      await assert.rejects(Presence.join('test', r, key, 'gateway', { protocol: NEXT, now }), refusal('(gateway|matcher)', PROTOCOL_VERSION, NEXT));
      clock.ms += 5_000; // the dead one's record lapsed at 1 010 000
      await assert.rejects(Presence.join('test', r, key, 'gateway', { protocol: NEXT, now }), refusal('gateway', PROTOCOL_VERSION, NEXT), 'the live one is still there');
      assert.deepEqual(Object.keys(await r.hgetall(key)), [live.field], "the dead one's record is gone");
      clock.ms += 6_000; // the live one stopped renewing at 1 006 000 + 10 000
      await live.leave(false);
      const next = await Presence.join('test', r, key, 'gateway', { protocol: NEXT, now });
      assert.deepEqual(Object.keys(await r.hgetall(key)), [next.field]);
      await next.leave();
      assert.deepEqual(await r.hgetall(key), {});
    });
  });
});
