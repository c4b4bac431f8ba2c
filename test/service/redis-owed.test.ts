/**
 * Owed windows (services/redis/scripts.ts OWE, DELIVER, DROP): a shard that applies a device's
 * arrival without the shard it left having stored past the hand-over lets that shard still store
 * what it owes, once each, and nothing from before a purge. The scripts are called as the matchers
 * call them: shard a (the one left behind) stores entries up to the hand-over's release entry
 * 200-1, shard b (the arriving one) entries after it (entry ids count from the test's start, in
 * ms: notifications are kept by age).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { Redis } from 'ioredis';
import { Keys } from '../../services/redis/keys.js';
import { defineScripts, runScript } from '../../services/redis/scripts.js';
import { redisTestKit, useRedisServer } from '../support/redis-deployment.js';

const { missing, url } = useRedisServer();
const { freshPrefix, inspect } = redisTestKit(url);
const T = Date.now();
/** An entry id `n` ms after the test's start (the ids below read as `<n>-<seq>`). */
const at = (id: string): string => {
  const [n, q] = id.split('-');
  return `${T + Number(n)}-${q}`;
};
const RELEASE = '200-1';
/** The most windows a device may hold, as the matchers' default. */
const MOST = 4;

function scripts(r: Redis, k: Keys) {
  const g = k.groups[0];
  return {
    /** Stores one notification of entry `id`'s event 0 for `dev`; how many were stored (0 or 1). */
    deliver: async (dev: string, id: string) => Number(await runScript(r, 'ambitDeliver', 7, g.dstate, k.stats, g.nseq, g.nlast, k.notes(dev), g.born(dev), k.matcherEpoch, 100, 3_600_000, g.wakePrefix, '', 1, at(id), 0, Number(at(id).split('-')[0]), `{"id":"${id}"}`, dev, 1, '[]', '')),
    owe: async (release: string, ...devs: string[]) => Number(await runScript(r, 'ambitOwe', 4 + devs.length, g.dstate, g.nseq, g.nlast, k.matcherEpoch, ...devs.map((d) => g.born(d)), at(release), MOST, ...devs, '')),
    /** owe() allowing a device at most `most` windows. */
    oweUpTo: async (most: number, release: string, ...devs: string[]) => Number(await runScript(r, 'ambitOwe', 4 + devs.length, g.dstate, g.nseq, g.nlast, k.matcherEpoch, ...devs.map((d) => g.born(d)), at(release), most, ...devs, '')),
    close: async (release: string, ...devs: string[]) => Number(await runScript(r, 'ambitOweClose', g.dstate, k.matcherEpoch, at(release), ...devs, '')),
    stateBytes: async (dev: string) => (await r.hgetBuffer(g.dstate, dev))?.length ?? 0,
    drop: (dev: string, purge: string) => runScript(r, 'ambitDrop', k.notes(dev), g.dstate, g.nseq, g.nlast, g.acked, k.matcherEpoch, g.born(dev), dev, g.wake(dev), '', at(purge)),
    /** The entries (as `<n>-<seq>`) of the notifications stored for `dev`, in delivery order. */
    stored: async (dev: string) =>
      (await r.xrange(k.notes(dev), '-', '+')).map(([, f]) => {
        const [ms, q] = f[f.indexOf('r') + 1].split(':')[0].split('-');
        return `${Number(ms) - T}-${q}`;
      }),
  };
}

/** Runs `body` against the scripts on a fresh prefix. */
const withScripts = (body: (s: ReturnType<typeof scripts>, r: Redis, k: Keys) => Promise<void>): Promise<void> => {
  const k = new Keys(freshPrefix());
  return inspect(async (r) => {
    defineScripts(r);
    await body(scripts(r, k), r, k);
  });
};

describe('owed windows', { skip: missing ?? false }, () => {
  it('the shard left behind stores what it owes once, its replays store nothing twice, whether its stores came before or after the arriving shard\'s', async () => {
    await withScripts(async (s) => {
      assert.equal(await s.deliver('d', '100-0'), 1);
      assert.equal(await s.owe(RELEASE, 'd'), 1);
      assert.equal(await s.deliver('d', '150-0'), 1, 'a store of the shard left behind before the arriving one stored anything');
      assert.equal(await s.deliver('d', '150-0'), 0, 'its replay');
      assert.equal(await s.deliver('d', '210-0'), 1, 'the arriving shard');
      assert.equal(await s.deliver('d', '150-0'), 0, 'the replay again, after the arriving shard stored');
      assert.equal(await s.deliver('d', '180-0'), 1, 'owed: after the marker of the window, before the release');
      assert.equal(await s.deliver('d', '180-0'), 0, 'its replay');
      assert.equal(await s.deliver('d', '120-0'), 0, 'older than what the shard left behind stored since');
      assert.equal(await s.deliver('d', '200-2'), 0, "past the release: the arriving shard's, and older than its marker");
      assert.equal(await s.deliver('d', '220-0'), 1);
      assert.deepEqual(await s.stored('d'), ['100-0', '150-0', '210-0', '180-0', '220-0']);
    });
  });

  it('the same hand-over opens its window again as it was; past the most windows a device may hold, none is opened for any device of the call', async () => {
    await withScripts(async (s) => {
      assert.equal(await s.deliver('d', '100-0'), 1);
      assert.equal(await s.deliver('e', '100-0'), 1);
      assert.equal(await s.oweUpTo(1, RELEASE, 'd'), 1);
      assert.equal(await s.deliver('d', '210-0'), 1);
      assert.equal(await s.deliver('d', '150-0'), 1, 'owed');
      assert.equal(await s.oweUpTo(1, RELEASE, 'd'), 1, 'a replay of the same hand-over');
      assert.equal(await s.deliver('d', '150-0'), 0, 'the window kept what was stored in it');
      assert.equal(await s.oweUpTo(1, '300-1', 'e', 'd'), -1, 'another hand-over of d, past the most (1)');
      assert.equal(await s.deliver('e', '150-0'), 1, 'e got no window: a store of its old marker is as before');
      assert.equal(await s.deliver('e', '140-0'), 0);
      assert.equal(await s.deliver('d', '190-0'), 1, "d's window is the first one still");
      assert.equal(await s.stateBytes('d'), 120);
    });
  });

  it('two stuck shards in a row: a second window beside the first, each shard left behind stores what it owes once whichever stores first, replays store nothing twice, and each window closes alone', async () => {
    // Shard a owes up to 200-1; shard b took the device (stores from 210) and owes up to 300-1;
    // shard c took it from b (stores from 310).
    // Also where b stored nothing for the device before c gave up on it: both windows then start
    // at the same marker, and a's stores fall within both.
    for (const [aFirst, bStored] of [[true, true], [false, true], [true, false], [false, false]]) {
      await withScripts(async (s) => {
        assert.equal(await s.deliver('d', '100-0'), 1);
        assert.equal(await s.owe(RELEASE, 'd'), 1, 'b gives up on a');
        if (bStored) assert.equal(await s.deliver('d', '210-0'), 1, 'b');
        assert.equal(await s.owe('300-1', 'd'), 1, 'c gives up on b: a second window');
        assert.equal(await s.stateBytes('d'), 56 + 2 * 64);
        assert.equal(await s.deliver('d', '310-0'), 1, 'c');
        const stores = aFirst ? ['150-0', '250-0', '160-0', '260-0'] : ['250-0', '150-0', '260-0', '160-0'];
        for (const id of stores) {
          assert.equal(await s.deliver('d', id), 1, `owed ${id}`);
          assert.equal(await s.deliver('d', id), 0, `its replay at once`);
        }
        for (const id of ['150-0', '160-0', '250-0', '260-0', ...(bStored ? ['210-0'] : []), '310-0', '100-0']) assert.equal(await s.deliver('d', id), 0, `a replay of ${id}`);
        assert.deepEqual(await s.stored('d'), ['100-0', ...(bStored ? ['210-0'] : []), '310-0', ...stores]);
        // Either window closes alone (a's first where a stored first, else b's).
        const [first, second] = aFirst ? [RELEASE, '300-1'] : ['300-1', RELEASE];
        assert.equal(await s.close(first, 'd'), 1, 'one window closes');
        assert.equal(await s.stateBytes('d'), 56 + 64);
        if (aFirst) {
          assert.equal(await s.deliver('d', '270-0'), 1, "b's window still takes what b owes");
          assert.equal(await s.deliver('d', '170-0'), 0, "a's is gone");
        } else {
          assert.equal(await s.deliver('d', '170-0'), 1, "a's window still takes what a owes");
          assert.equal(await s.deliver('d', '270-0'), 0, "b's is gone");
        }
        assert.equal(await s.close(second, 'd'), 1);
        assert.equal(await s.stateBytes('d'), 56);
        assert.equal(await s.deliver('d', '320-0'), 1, 'c, as before');
      });
    }
  });

  it('a window closes once the shard left behind stored past the hand-over: the state is seven doubles again, and another hand-over may open one', async () => {
    await withScripts(async (s) => {
      assert.equal(await s.deliver('d', '100-0'), 1);
      assert.equal(await s.owe(RELEASE, 'd'), 1);
      assert.equal(await s.stateBytes('d'), 120);
      assert.equal(await s.deliver('d', '210-0'), 1);
      assert.equal(await s.deliver('d', '150-0'), 1, 'owed');
      assert.equal(await s.close('300-1', 'd'), 0, 'the window of another hand-over stays');
      assert.equal(await s.stateBytes('d'), 120);
      assert.equal(await s.close(RELEASE, 'd', 'nobody'), 1);
      assert.equal(await s.stateBytes('d'), 56);
      assert.equal(await s.deliver('d', '150-0'), 0, 'its marker is kept');
      assert.equal(await s.deliver('d', '220-0'), 1);
      assert.equal(await s.owe('300-1', 'd'), 1, 'a later hand-over opens a window again');
      assert.equal(await s.deliver('d', '250-0'), 1, 'owed by the next shard left behind');
    });
  });

  it('a purge after the arriving shard took the device over: what the shard left behind owed from before it is refused, later notifications are stored', async () => {
    await withScripts(async (s, r, k) => {
      assert.equal(await s.deliver('d', '100-0'), 1);
      assert.equal(await s.owe(RELEASE, 'd'), 1);
      assert.equal(await s.deliver('d', '210-0'), 1);
      assert.equal(Number(await s.drop('d', '220-0')), 2);
      assert.equal(await s.deliver('d', '150-0'), 0, 'owed, but from before the purge');
      assert.equal(await s.deliver('d', '230-0'), 1);
      assert.deepEqual(await s.stored('d'), ['230-0']);
      // Purged again after it came back: still nothing from before the purges.
      assert.equal(Number(await s.drop('d', '240-0')), 1);
      // A purge leaves no state behind: the purge's id (born:{device}) is the mark.
      assert.equal(await r.hexists(k.groups[0].dstate, 'd'), 0);
      assert.equal(await s.deliver('d', '160-0'), 0, 'owed, from before both purges');
      assert.equal(await s.deliver('d', '250-0'), 1);
      assert.deepEqual(await s.stored('d'), ['250-0']);
    });
  });

  it('a drop that comes late (sharded by space: the purge queued on the shard the device left) keeps what the shard it came to stored after the purge, once', async () => {
    await withScripts(async (s, r, k) => {
      assert.equal(await s.deliver('d', '100-0'), 1, 'shard a, before the purge');
      assert.equal(await s.deliver('d', '120-0'), 1);
      // The purge is entry 150-0 on shard a; the device subscribed again and came to shard b,
      // which stores from later entries before shard a reads the purge.
      assert.equal(await s.deliver('d', '160-0'), 1, 'shard b, after the purge');
      assert.equal(await s.deliver('d', '170-0'), 1);
      const g = k.groups[0];
      const acked = (await r.xrange(k.notes('d'), '-', '+'))[2][0];
      await r.hset(g.acked, 'd', acked); // the device acked the first from after the purge
      const doorbell = r.duplicate();
      const rang = new Promise<string>((resolve) => doorbell.on('message', (_c: string, m: string) => resolve(m)));
      await doorbell.subscribe(g.wake('d'));
      assert.equal(Number(await s.drop('d', '150-0')), 2, 'only the two from before the purge');
      assert.equal(await rang, 'purged', 'open inboxes end: the state id is new');
      doorbell.disconnect();
      assert.deepEqual(await s.stored('d'), ['160-0', '170-0']);
      assert.equal((await r.hgetBuffer(g.dstate, 'd'))!.readDoubleLE(16), 2, "the state's stream length");
      assert.equal(await r.hget(g.acked, 'd'), acked, 'the ack point stays');
      assert.equal(await r.get(k.groups[0].born('d')), at('150-0'), 'the purge names the new state');
      assert.equal(await s.deliver('d', '170-0'), 0, "shard b's replay: the state that marks it stayed");
      assert.equal(await s.deliver('d', '120-0'), 0, "shard a's replay from before the purge");
      assert.equal(Number(await s.drop('d', '150-0')), 0, 'the drop replayed');
      assert.equal(Number(await s.drop('d', '140-0')), 0, "an earlier purge's drop after this one's");
      assert.equal(await r.get(k.groups[0].born('d')), at('150-0'));
      assert.equal(await s.deliver('d', '180-0'), 1);
      assert.deepEqual(await s.stored('d'), ['160-0', '170-0', '180-0']);
    });
  });

  it('a late drop keeps the state of a device with an owed window that the arriving shard stored in after the purge; the window owes nothing from before the purge', async () => {
    await withScripts(async (s) => {
      assert.equal(await s.deliver('d', '100-0'), 1);
      assert.equal(await s.owe(RELEASE, 'd'), 1);
      assert.equal(await s.deliver('d', '210-0'), 1, 'the arriving shard, after the purge at 205-0');
      assert.equal(Number(await s.drop('d', '205-0')), 1);
      assert.equal(await s.stateBytes('d'), 120, 'the window stays');
      assert.equal(await s.deliver('d', '180-0'), 0, 'owed, but from before the purge');
      assert.equal(await s.deliver('d', '200-1'), 0);
      assert.deepEqual(await s.stored('d'), ['210-0']);
    });
  });

  it('a late drop before anything was stored past the purge keeps the window of a hand-over after the purge: the state starts over from the purge, and the window still owes what came after it', async () => {
    await withScripts(async (s, r, k) => {
      assert.equal(await s.deliver('d', '100-0'), 1, 'shard a, before the purge (150-0, queued on shard a, which lags)');
      await r.hset(k.groups[0].acked, 'd', 'x');
      // The device came back on shard b after the purge and was handed over from b at 200-1: the
      // arriving shard stopped waiting for b and opened a window; nothing is stored past the purge.
      assert.equal(await s.owe(RELEASE, 'd'), 1);
      assert.equal(Number(await s.drop('d', '150-0')), 1, "shard a's late drop");
      assert.equal(await r.hexists(k.groups[0].acked, 'd'), 0, 'nothing kept: the ack point goes');
      assert.equal(await s.deliver('d', '120-0'), 0, 'owed, but from before the purge');
      assert.equal(await s.deliver('d', '210-0'), 1, 'the arriving shard');
      assert.equal(await s.deliver('d', '180-0'), 1, 'shard b: owed, after the purge');
      assert.deepEqual(await s.stored('d'), ['210-0', '180-0']);
    });
  });

  it('a window opened for a device purged since (no state; born:{device} set) owes nothing from before the purge', async () => {
    await withScripts(async (s) => {
      assert.equal(await s.deliver('d', '100-0'), 1);
      assert.equal(Number(await s.drop('d', '150-0')), 1, 'the purge at 150-0: the state goes');
      assert.equal(await s.owe(RELEASE, 'd'), 1, 'a hand-over after the purge, applied past the bound');
      assert.equal(await s.deliver('d', '120-0'), 0, 'a shard still behind the purge: from before it');
      assert.equal(await s.deliver('d', '160-0'), 1, 'owed, after the purge');
    });
  });

  it('a replay across a purge stores nothing from before it (a matcher that crashed after the purge, before its offset moved past it)', async () => {
    await withScripts(async (s) => {
      assert.equal(await s.deliver('x', '100-0'), 1);
      assert.equal(await s.deliver('x', '120-0'), 1);
      assert.equal(Number(await s.drop('x', '150-0')), 2);
      // The replay from the stored offset: the stores before the purge, the purge, what came after.
      assert.equal(await s.deliver('x', '100-0'), 0);
      assert.equal(await s.deliver('x', '120-0'), 0);
      assert.equal(Number(await s.drop('x', '150-0')), 0, 'the purge replayed changes nothing');
      assert.equal(await s.deliver('x', '160-0'), 1);
      assert.deepEqual(await s.stored('x'), ['160-0']);
    });
  });
});
