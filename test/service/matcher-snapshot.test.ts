/**
 * Matcher snapshot files: the format on its own (every record back as written, every kind of
 * damage refused before a record is handed out), then matchers against a real redis-server: a
 * matcher that loads its snapshot ends with exactly the subscriptions and positions a model of
 * every command sent holds, and matches probe events exactly as a matcher rebuilt from Redis
 * does: after a clean stop, after a crash with a snapshot written while commands flowed, and when
 * the snapshot is refused (damaged, of a flushed deployment, trimmed past, ahead of the stream).
 * Then the stream's trimming by progress, which exists for these matchers and their files: a
 * standby held back, a rebuild while the leader trims, a stopped matcher's file held and let go.
 *
 * One file because every case drives the same model of commands (World), the same deployment
 * helper and the same checks of what a matcher holds.
 */
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import type { DeviceSubscription } from '../../services/hub/port.js';
import type { RedisHub } from '../../services/hub/redis.js';
import { RedisHub as Hub } from '../../services/hub/redis.js';
import { PartitionedHub } from '../../services/hub/partitioned.js';
import { RedisMatcher, type RedisMatcherOptions, snapshotFileName } from '../../services/matcher/redis.js';
import { SnapshotRefused, type SnapshotSource, checkSnapshot, readSnapshot, writeSnapshot } from '../../services/matcher/snapshot.js';
import { compareStreamIds } from '../../services/redis/codec.js';
import type { Event, Filter } from '../../src/model/types.js';
import { anchored, anywhere, eq, fixed, sub } from '../support/hub-contract.js';
import { redisTestKit, useRedisServer } from '../support/redis-deployment.js';
import { Rng } from '../support/rng.js';
import { within } from '../support/grpc.js';
import { pino } from 'pino';
import { configFromEnv } from '../../services/process/config.js';
import { connectGatewayHub } from '../../services/process/roles.js';

const dirs: string[] = [];
function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'ambit-snap-'));
  dirs.push(d);
  return d;
}
after(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

/** A source over fixed lists. */
function source(subs: [string, DeviceSubscription[]][], positions: [string, number, number][], start = '5-0', end = '9-1'): SnapshotSource {
  return { engine: 'test', start: () => start, end: () => end, subscriptions: () => subs, positions: () => positions };
}

function collect(): { subs: [string, DeviceSubscription[]][]; positions: [string, number, number][]; sink: Parameters<typeof readSnapshot>[2] } {
  const subs: [string, DeviceSubscription[]][] = [];
  const positions: [string, number, number][] = [];
  return { subs, positions, sink: { subscriptions: (d, s) => subs.push([d, s]), position: (d, a, o) => positions.push([d, a, o]) } };
}

const awkward = ['', 'ü-device', '東京😀', 'x'.repeat(300), 'd\u0000nul'];

describe('matcher snapshot file', () => {
  const subs: [string, DeviceSubscription[]][] = awkward.map((d, i) => [d, [sub(`s${i}`, anchored(300 + i, eq('k', 'v'))), sub('ü', fixed(50, { lat: -89.5, lon: 179.9 }, { name: 'n', op: 'gt', value: -1.5 }), anywhere())]]);
  const positions: [string, number, number][] = awkward.map((d, i) => [d, -90 + i * 0.1, i === 0 ? -0 : 180 - i * 1e-9]);

  it('reads back every record as written, in order, in one block or in a block per record', async () => {
    for (const blockBytes of [1, 1 << 20]) {
      const path = join(tempDir(), 'a.snapshot');
      const info = await writeSnapshot(path, 'id-1', source(subs, positions), { blockBytes });
      assert.deepEqual([info.start, info.end, info.devices, info.subscriptions, info.positions, info.engine], ['5-0', '9-1', 5, 10, 5, 'test']);
      const c = collect();
      const read = await readSnapshot(path, 'id-1', c.sink);
      assert.deepEqual(read, { ...info, bytes: readFileSync(path).length });
      assert.deepEqual(c.subs, subs);
      assert.deepEqual(c.positions, positions);
      assert.ok(Object.is(c.positions[0][2], -0), 'negative zero survives');
      assert.deepEqual(readdirSync(join(path, '..')), ['a.snapshot'], 'no temporary file is left');
    }
  });

  it('a device without subscriptions is not written; an empty snapshot is still a snapshot', async () => {
    const path = join(tempDir(), 'e.snapshot');
    const info = await writeSnapshot(path, 'e', source([['none', []]], []));
    assert.deepEqual([info.devices, info.subscriptions, info.positions], [0, 0, 0]);
    const c = collect();
    await readSnapshot(path, 'e', c.sink);
    assert.deepEqual([c.subs, c.positions], [[], []]);
  });

  it('refuses, before handing out a record, a snapshot that is damaged, cut short, lengthened, of another matcher, not one, or missing', async () => {
    const dir = tempDir();
    const path = join(dir, 'good.snapshot');
    await writeSnapshot(path, 'me', source(subs, positions), { blockBytes: 64 });
    const good = readFileSync(path);
    const cases: [string, Buffer, RegExp][] = [];
    for (const at of [0, 9, 20, Math.floor(good.length / 2), good.length - 40, good.length - 1]) {
      const b = Buffer.from(good);
      b[at] ^= 0x20;
      cases.push([`byte ${at} flipped`, b, /damaged: its SHA-256 does not match/]);
    }
    cases.push(['cut short', good.subarray(0, good.length - 100), /damaged/]);
    cases.push(['a byte appended', Buffer.concat([good, Buffer.from([0])]), /damaged/]);
    cases.push(['empty', Buffer.alloc(0), /too short to be a snapshot/]);
    cases.push(['not a snapshot', Buffer.from('{"hello":"world"}'.repeat(10)), /damaged|not a snapshot/]);
    for (const [what, bytes, message] of cases) {
      const p = join(dir, 'bad.snapshot');
      writeFileSync(p, bytes);
      const c = collect();
      await assert.rejects(readSnapshot(p, 'me', c.sink), (err: unknown) => err instanceof SnapshotRefused && message.test(err.message) && !err.missing, what);
      assert.deepEqual([c.subs.length, c.positions.length], [0, 0], `${what}: nothing handed out`);
    }
    await assert.rejects(checkSnapshot(path, 'you'), /of "me", not of this matcher \("you"\)/);
    await assert.rejects(checkSnapshot(join(dir, 'none.snapshot'), 'me'), (err: unknown) => err instanceof SnapshotRefused && err.missing);
    assert.equal((await checkSnapshot(path, 'me')).subscriptions, 10);
  });

  it('a write that fails midway leaves the snapshot before it whole and no temporary file', async () => {
    const dir = tempDir();
    const path = join(dir, 'm.snapshot');
    const first = await writeSnapshot(path, 'm', source(subs.slice(0, 2), positions.slice(0, 2), '1-0', '1-0'));
    let blocks = 0;
    await assert.rejects(
      writeSnapshot(path, 'm', source(subs, positions), {
        blockBytes: 1,
        betweenBlocks: () => {
          if (++blocks === 3) throw new Error('stopped midway');
        },
      }),
      /stopped midway/,
    );
    assert.deepEqual(await checkSnapshot(path, 'm'), first);
    assert.deepEqual(readdirSync(dir), ['m.snapshot']);
  });
});

// ---- matchers on a real Redis ----

const { missing, url } = useRedisServer();
const { freshPrefix, matcherOptions, hubOptions, inspect, keysOf } = redisTestKit(url);
const CENTER = { lat: 45.46, lon: 9.19 };

/**
 * Sends seeded subscription changes and moves through a gateway hub and keeps what they must
 * leave: each device's subscriptions and position.
 */
class World {
  readonly subs = new Map<string, Map<string, DeviceSubscription>>();
  readonly positions = new Map<string, { lat: number; lon: number }>();
  private readonly rng: Rng;

  constructor(
    private readonly hub: RedisHub,
    seed: number,
    readonly devices = 30,
  ) {
    this.rng = new Rng(seed);
  }

  private point(spread = 0.05): { lat: number; lon: number } {
    return { lat: CENTER.lat + (this.rng.next() - 0.5) * spread, lon: CENTER.lon + (this.rng.next() - 0.5) * spread };
  }

  private filter(): Filter {
    const k = eq('k', ['a', 'b', 'c'][this.rng.int(3)]);
    const r = 200 + this.rng.int(3000);
    switch (this.rng.int(3)) {
      case 0:
        return anchored(r, k);
      case 1:
        return fixed(r, this.point(), { name: 'n', op: 'gt', value: this.rng.int(10) });
      default:
        return anywhere(k);
    }
  }

  /** n commands: puts (add or replace), removes and batches of moves. */
  async step(n: number): Promise<void> {
    for (let i = 0; i < n; i++) {
      const device = `d${this.rng.int(this.devices)}`;
      const mine = this.subs.get(device) ?? new Map<string, DeviceSubscription>();
      const roll = this.rng.next();
      if (roll < 0.5) {
        const s = sub(`s${this.rng.int(4)}`, ...Array.from({ length: 1 + this.rng.int(3) }, () => this.filter()));
        if (mine.has(s.id)) await this.hub.replaceSubscription(device, s);
        else await this.hub.addSubscription(device, s);
        mine.set(s.id, s);
        this.subs.set(device, mine);
      } else if (roll < 0.65 && mine.size > 0) {
        const id = [...mine.keys()][this.rng.int(mine.size)];
        await this.hub.removeSubscription(device, id);
        mine.delete(id);
        if (mine.size === 0) this.subs.delete(device);
      } else {
        const moves = Array.from({ length: 1 + this.rng.int(5) }, () => ({ device: `d${this.rng.int(this.devices)}`, ...this.point() }));
        await this.hub.updateLocations(moves);
        for (const m of moves) this.positions.set(m.device, { lat: m.lat, lon: m.lon });
      }
    }
  }

  /** Events at and around the devices, with every content the filters test. */
  probes(): Event[] {
    const out: Event[] = [];
    let i = 0;
    for (const p of [...this.positions.values(), CENTER]) {
      for (const k of ['a', 'b', 'c']) out.push({ id: `p${++i}`, lat: p.lat, lon: p.lon, attributes: { k, n: 5 } });
      out.push({ id: `p${++i}`, lat: p.lat + 0.004, lon: p.lon, attributes: { k: 'a', n: 11 } });
    }
    return out;
  }
}

/** A matcher's match of the probes, each recipient's ids sorted, recipients by device. */
async function matchesOf(m: RedisMatcher, events: Event[]): Promise<string[][]> {
  const got = await m.core.match(events);
  return got.map((rs) => rs.map((r) => `${r.device}:${[...r.subscriptionIds].sort().join(',')}`).sort());
}

/** The matcher's subscriptions equal the world's, device by device. */
function assertSubscriptions(m: RedisMatcher, w: World, what: string): void {
  assert.equal(m.core.subscriptions, [...w.subs.values()].reduce((n, s) => n + s.size, 0), `${what}: subscription count`);
  for (let i = 0; i < w.devices; i++) {
    const d = `d${i}`;
    const want = [...(w.subs.get(d)?.values() ?? [])].sort((a, b) => a.id.localeCompare(b.id));
    const have = m.core.list(d).sort((a, b) => a.id.localeCompare(b.id));
    assert.deepEqual(have, want, `${what}: ${d}'s subscriptions`);
  }
}

describe('matcher snapshots in a Redis deployment', { skip: missing ?? false, timeout: 60_000 }, () => {
  /** A fresh deployment: one gateway hub; matchers started (and all stopped at the end) through it. */
  type Deployment = {
    prefix: string;
    hub: RedisHub;
    start(more?: Partial<RedisMatcherOptions>): Promise<RedisMatcher>;
    caughtUp(m: RedisMatcher): Promise<void>;
    /** A matcher (`more`) that applies `before` commands of the world and stops; then `after` more commands. */
    stoppedThen(w: World, before: number, after: number, more?: Partial<RedisMatcherOptions>): Promise<RedisMatcher>;
  };
  async function deployment(f: (d: Deployment) => Promise<void>): Promise<void> {
    const prefix = freshPrefix();
    const hub = await Hub.connect(hubOptions(prefix));
    const matchers: RedisMatcher[] = [];
    const batches = new Set<() => void>();
    try {
      const d: Deployment = {
        prefix,
        hub,
        async start(more = {}) {
          const mine = more.hooks?.onBatch;
          const onBatch = (x: { entries: number; locations: number; ms: number }) => {
            mine?.(x);
            batches.forEach((b) => b());
          };
          const m = await RedisMatcher.start(matcherOptions(prefix, { ...more, hooks: { ...more.hooks, onBatch } }));
          matchers.push(m);
          return m;
        },
        /** Until the matcher has applied the stream's last entry (woken by its batches). */
        async caughtUp(m) {
          const last = await inspect(async (r) => (await r.xrevrange(keysOf(prefix).in, '+', '-', 'COUNT', 1))[0]?.[0] ?? '0-0');
          while (compareStreamIds(m.position, last) < 0) {
            await new Promise<void>((resolve) => {
              const b = () => {
                batches.delete(b);
                resolve();
              };
              batches.add(b);
            });
          }
        },
        async stoppedThen(w, before, after, more = {}) {
          const m = await d.start(more);
          await w.step(before);
          await d.caughtUp(m);
          await m.stop();
          await w.step(after);
          return m;
        },
      };
      await f(d);
    } finally {
      await hub.close();
      for (const m of matchers) await m.stop();
    }
  }

  it('a matcher stopped cleanly writes its snapshot; another loads it, applies what came after, and holds what a model and a Redis rebuild hold', () =>
    deployment(async ({ hub, start, caughtUp }) => {
      const dir = tempDir();
      const w = new World(hub, 11);
      const a = await start({ snapshot: { dir, intervalMs: 0 } });
      await w.step(250);
      await caughtUp(a);
      await a.stop();
      const written = a.snapshot;
      assert.ok(written !== null && written.subscriptions > 0 && written.positions > 0, 'a snapshot was written at stop');
      assert.equal(written.start, written.end, 'nothing applied while it was written: exact');
      await w.step(150); // while no matcher runs
      const b = await start({ snapshot: { dir, intervalMs: 0 } });
      assert.equal(b.restoredFrom.from, 'snapshot');
      await caughtUp(b);
      assertSubscriptions(b, w, 'from the snapshot');
      const c = await start();
      assert.equal(c.restoredFrom.from, 'redis');
      await caughtUp(c);
      assertSubscriptions(c, w, 'from Redis');
      const probes = w.probes();
      const want = await matchesOf(c, probes);
      assert.ok(want.some((r) => r.length > 0), 'the probes match something');
      assert.deepEqual(await matchesOf(b, probes), want);
    }));

  it('a snapshot written while commands flow, then a crash: the new matcher replays from its start and converges', () =>
    deployment(async ({ hub, start, caughtUp }) => {
      const dir = tempDir();
      const w = new World(hub, 12);
      await w.step(200);
      let midway: (() => Promise<void>) | null = null;
      let blocks = 0;
      const a = await start({
        snapshot: { dir, intervalMs: 0, blockBytes: 200 },
        hooks: {
          snapshotBlock: async () => {
            // After the first block, the world changes and the matcher applies it before the rest is written.
            if (++blocks === 1 && midway !== null) await midway();
          },
        },
      });
      await caughtUp(a);
      midway = async () => {
        await w.step(150);
        await caughtUp(a);
      };
      const info = await a.snapshotNow();
      assert.ok(info !== null && blocks > 3, 'written in several blocks');
      assert.ok(compareStreamIds(info.end, info.start) > 0, `commands were applied while it was written (${info.start}..${info.end})`);
      await w.step(100);
      await caughtUp(a);
      await a.crash(); // no snapshot at the end: the fuzzy one is the newest
      const b = await start({ snapshot: { dir, intervalMs: 0 } });
      assert.equal(b.restoredFrom.from, 'snapshot');
      assert.ok(b.restoredFrom.replayed > 0, 'commands after its start were applied at load');
      await caughtUp(b);
      assertSubscriptions(b, w, 'after a fuzzy snapshot');
      const c = await start();
      await caughtUp(c);
      const probes = w.probes();
      assert.deepEqual(await matchesOf(b, probes), await matchesOf(c, probes));
    }));

  it('a crash while a snapshot is written leaves the one before it', () =>
    deployment(async ({ hub, start, caughtUp }) => {
      const dir = tempDir();
      const w = new World(hub, 13);
      await w.step(100);
      let crashNow = false;
      let a: RedisMatcher | null = null;
      a = await start({
        snapshot: { dir, intervalMs: 0, blockBytes: 100 },
        hooks: {
          snapshotBlock: async () => {
            if (crashNow) await a?.crash();
          },
        },
      });
      await caughtUp(a);
      const first = await a.snapshotNow();
      assert.ok(first !== null);
      await w.step(50);
      await caughtUp(a);
      crashNow = true;
      assert.equal(await a.snapshotNow(), null, 'the write stopped');
      const path = join(dir, snapshotFileName(a.keys));
      assert.equal((await checkSnapshot(path, `${a.keys.in} ${await inspect((r) => r.get(a!.keys.matcherInstance))}`)).end, first.end);
      assert.deepEqual(readdirSync(dir), [snapshotFileName(a.keys)]);
      const b = await start({ snapshot: { dir, intervalMs: 0 } });
      assert.equal(b.restoredFrom.from, 'snapshot');
      await caughtUp(b);
      assertSubscriptions(b, w, 'from the snapshot before the crash');
    }));

  it('a batch replayed while a snapshot is written (its commit failed) moves the snapshot start back: a subscription made and removed meanwhile does not come back', () =>
    deployment(async ({ prefix, hub, start }) => {
      const dir = tempDir();
      // Waiters re-check their condition whenever the matcher reports progress.
      const waiters = new Set<() => void>();
      const progress = () => waiters.forEach((w) => w());
      const until = async (cond: () => boolean) => {
        while (!cond()) await new Promise<void>((resolve) => waiters.add(() => (waiters.clear(), resolve())));
      };
      let holdCommit = false;
      let failCommit = false;
      let releaseCommit = () => {};
      let commitGate: Promise<void> = Promise.resolve();
      let pauseAt: string | null = null;
      let paused = () => {};
      const pausedThere = new Promise<void>((resolve) => (paused = resolve));
      let releaseLoop = () => {};
      const loopGate = new Promise<void>((resolve) => (releaseLoop = resolve));
      let c1 = '';
      let blocks = 0;
      const a: RedisMatcher = await start({
        readCount: 1,
        snapshot: { dir, intervalMs: 0, blockBytes: 50 },
        hooks: {
          onMatched: progress,
          afterDeliver: async () => {
            if (!holdCommit) return;
            await commitGate;
            if (failCommit) {
              failCommit = holdCommit = false;
              throw new Error('the commit fails (test)');
            }
          },
          beforeRead: async () => {
            progress();
            if (pauseAt !== null && a.position === pauseAt) {
              paused();
              await loopGate;
            }
          },
          snapshotBlock: async () => {
            if (++blocks !== 1) return;
            // The held commit (of c1) fails: the loop reads again from before c1, applies c1, and
            // stops there, with the subscription c2 removed back in the state being written.
            failCommit = true;
            pauseAt = c1;
            releaseCommit();
            await pausedThere;
          },
        },
      });
      for (let i = 0; i < 5; i++) await hub.addSubscription(`e${i}`, sub('s', anywhere(eq('k', 'a'))));
      await until(() => a.core.subscriptions === 5 && a.offset === a.position);
      commitGate = new Promise<void>((resolve) => (releaseCommit = resolve));
      holdCommit = true;
      await hub.addSubscription('d', sub('ghost', anywhere(eq('k', 'a'))));
      await hub.removeSubscription('d', 'ghost');
      const [[c2], [first]] = await inspect((r) => r.xrevrange(keysOf(prefix).in, '+', '-', 'COUNT', 2));
      c1 = first;
      await until(() => a.position === c2);
      assert.equal(a.core.has('d', 'ghost'), false);
      const info = await a.snapshotNow();
      assert.ok(info !== null && blocks > 1);
      assert.ok(compareStreamIds(info.start, c1) < 0, `the snapshot starts before the replayed command (${info.start} < ${c1})`);
      pauseAt = null;
      releaseLoop();
      await until(() => a.offset === c2 && a.position === c2);
      await a.crash();
      let caught = () => {};
      const b = await start({ snapshot: { dir, intervalMs: 0 }, hooks: { onBatch: () => caught() } });
      assert.equal(b.restoredFrom.from, 'snapshot');
      while (compareStreamIds(b.position, c2) < 0) await new Promise<void>((resolve) => (caught = resolve));
      assert.equal(b.core.has('d', 'ghost'), false, 'the removed subscription stays removed');
      assert.equal(b.core.subscriptions, 5);
    }));

  it('a snapshot that has applied commands past the stored offset is refused: their publishes are matched again', () =>
    deployment(async ({ hub, start, caughtUp }) => {
      const dir = tempDir();
      const w = new World(hub, 16);
      let hold = false;
      let release = () => {};
      const gate = new Promise<void>((resolve) => (release = resolve));
      let applied = () => {};
      const a = await start({
        snapshot: { dir, intervalMs: 0 },
        hooks: {
          afterDeliver: async () => {
            if (hold) await gate;
          },
          onMatched: () => applied(),
        },
      });
      await w.step(60);
      await caughtUp(a);
      hold = true; // the offset stops at the next batch; the matcher applies the one after it too
      await w.step(40);
      while (compareStreamIds(a.position, a.offset) <= 0) await new Promise<void>((resolve) => (applied = resolve));
      const info = await a.snapshotNow();
      assert.ok(info !== null && compareStreamIds(info.end, a.offset) > 0, 'the snapshot is ahead of the stored offset');
      const crashed = a.crash();
      release();
      await crashed;
      const b = await start({ snapshot: { dir, intervalMs: 0 } });
      assert.equal(b.restoredFrom.from, 'redis');
      await caughtUp(b);
      assertSubscriptions(b, w, 'rebuilt');
    }));

  it('a stream trimmed past the snapshot while it loads fails the start; the next start rebuilds from Redis', () =>
    deployment(async ({ prefix, hub, start, stoppedThen }) => {
      const dir = tempDir();
      const w = new World(hub, 17);
      await stoppedThen(w, 60, 40, { snapshot: { dir, intervalMs: 0 } });
      const trim = () => inspect(async (r) => void (await r.xtrim(keysOf(prefix).in, 'MAXLEN', 0)));
      await assert.rejects(start({ snapshot: { dir, intervalMs: 0 }, hooks: { restoring: trim } }), /was trimmed past the start of snapshot .* while it loaded/);
      const c = await start({ snapshot: { dir, intervalMs: 0 } });
      assert.equal(c.restoredFrom.from, 'redis');
      assertSubscriptions(c, w, 'rebuilt');
    }));

  for (const next of ['the stream is idle', 'the next command arrives'] as const) {
    it(`a rebuild from Redis leaves subscriptions to their commands in the stream; trimmed away before they are read, they are applied as stored (${next})`, () =>
      deployment(async ({ prefix, hub, start, stoppedThen }) => {
        const w = new World(hub, 18);
        // The commands after the stop are stored with versions past the offset: left to their commands.
        await stoppedThen(w, 40, 60);
        let progress = () => {};
        let reads = 0;
        let batches = 0;
        const b = await start({
          hooks: {
            restoring: () => inspect(async (r) => void (await r.xtrim(keysOf(prefix).in, 'MAXLEN', 0))),
            beforeRead: () => {
              reads++;
              progress();
            },
            onBatch: () => {
              batches++;
              progress();
            },
          },
        });
        // Idle: the loop's second turn comes after a read that found nothing (and the check after it).
        let done = () => reads >= 2;
        if (next === 'the next command arrives') {
          const s = sub('next', anywhere(eq('k', 'a')));
          await hub.addSubscription('d0', s);
          w.subs.set('d0', (w.subs.get('d0') ?? new Map<string, DeviceSubscription>()).set(s.id, s));
          done = () => batches >= 1;
        }
        while (!done()) await new Promise<void>((resolve) => (progress = resolve));
        assertSubscriptions(b, w, 'after the trim');
      }));
  }

  it('a deferred subscription removed or replaced before its trimmed command is read takes what Redis stores now', () =>
    deployment(async ({ prefix, hub, start, stoppedThen }) => {
      const w = new World(hub, 20);
      await stoppedThen(w, 30, 0);
      // Written while no matcher runs: a rebuild leaves them to their commands.
      const put = async (device: string, s: ReturnType<typeof sub>, how: 'add' | 'replace') => {
        if (how === 'add') await hub.addSubscription(device, s);
        else await hub.replaceSubscription(device, s);
        w.subs.set(device, (w.subs.get(device) ?? new Map<string, DeviceSubscription>()).set(s.id, s));
      };
      await put('dx', sub('gone', anywhere(eq('k', 'a'))), 'add');
      await put('dy', sub('changed', anywhere(eq('k', 'a'))), 'add');
      let batches = 0;
      let progress = () => {};
      const b = await start({
        hooks: {
          restoring: async () => {
            // After the rebuild deferred them: the devices change them, and every command is trimmed.
            await hub.removeSubscription('dx', 'gone');
            w.subs.delete('dx');
            await put('dy', sub('changed', anywhere(eq('k', 'b'))), 'replace');
            await inspect(async (r) => void (await r.xtrim(keysOf(prefix).in, 'MAXLEN', 0)));
          },
          onBatch: () => {
            batches++;
            progress();
          },
        },
      });
      await put('dz', sub('next', anywhere(eq('k', 'c'))), 'add');
      while (batches < 1) await new Promise<void>((resolve) => (progress = resolve));
      assert.equal(b.core.has('dx', 'gone'), false, 'the removed subscription does not come back');
      assert.deepEqual(b.core.list('dy'), [sub('changed', anywhere(eq('k', 'b')))], 'the replaced subscription is the new one');
      assertSubscriptions(b, w, 'after the trim');
    }));

  const refusals: [string, (d: { prefix: string; path: string }) => Promise<void>][] = [
    [
      'damaged',
      async ({ path }) => {
        const b = readFileSync(path);
        b[Math.floor(b.length / 2)] ^= 1;
        writeFileSync(path, b);
      },
    ],
    ['of a deployment flushed since (another instance id)', ({ prefix }) => inspect(async (r) => void (await r.set(keysOf(prefix).matcherInstance, 'another')))],
    ['trimmed past: the stream no longer holds the commands after its start', ({ prefix }) => inspect(async (r) => void (await r.xtrim(keysOf(prefix).in, 'MAXLEN', 0)))],
  ];
  for (const [what, spoil] of refusals) {
    it(`a snapshot ${what} is refused: the matcher rebuilds from Redis and holds what the model holds`, () =>
      deployment(async ({ prefix, hub, start, caughtUp, stoppedThen }) => {
        const dir = tempDir();
        const w = new World(hub, 14);
        const a = await stoppedThen(w, 120, 80, { snapshot: { dir, intervalMs: 0 } });
        await spoil({ prefix, path: join(dir, snapshotFileName(a.keys)) });
        const b = await start({ snapshot: { dir, intervalMs: 0 } });
        assert.equal(b.restoredFrom.from, 'redis');
        await caughtUp(b);
        assertSubscriptions(b, w, what);
      }));
  }

  it('a snapshot that saw more of the stream than Redis still has (writes lost) is refused', () =>
    deployment(async ({ prefix, hub, start, stoppedThen }) => {
      const dir = tempDir();
      const w = new World(hub, 15);
      const a = await stoppedThen(w, 60, 0, { snapshot: { dir, intervalMs: 0 } });
      // As after a failover to a replica that had not received the last writes: the snapshot saw
      // an entry the stream never gave. The same records, written as if seen a minute later.
      const path = join(dir, snapshotFileName(a.keys));
      const identity = `${a.keys.in} ${await inspect((r) => r.get(keysOf(prefix).matcherInstance))}`;
      const c = collect();
      const info = await readSnapshot(path, identity, c.sink);
      const ahead = `${Number(info.end.split('-')[0]) + 60_000}-0`;
      await writeSnapshot(path, identity, source(c.subs, c.positions, info.start, ahead));
      const b = await start({ snapshot: { dir, intervalMs: 0 } });
      assert.equal(b.restoredFrom.from, 'redis');
      assertSubscriptions(b, w, 'rebuilt');
    }));

  it("the gateways' AMBIT_COMMAND_STREAM_MAXLEN caps the command stream; a snapshot older than what it keeps is refused", async () => {
    const prefix = freshPrefix();
    const dir = tempDir();
    const config = configFromEnv({ REDIS_URL: url() as string, AMBIT_REDIS_PREFIX: prefix, AMBIT_ROLE: 'gateway', AMBIT_COMMAND_STREAM_MAXLEN: '100' });
    const hub = (await connectGatewayHub(config, pino({ level: 'silent' }))) as RedisHub;
    const matchers: RedisMatcher[] = [];
    try {
      const w = new World(hub, 19);
      const a = await RedisMatcher.start(matcherOptions(prefix, { snapshot: { dir, intervalMs: 0 } }));
      matchers.push(a);
      await w.step(50);
      await a.stop();
      await w.step(600);
      const length = await inspect((r) => r.xlen(keysOf(prefix).in));
      assert.ok(length < 400, `the stream keeps about 100 entries (XLEN ${length}), not the 600 commands after the stop`);
      let wake = () => {};
      const b = await RedisMatcher.start(matcherOptions(prefix, { snapshot: { dir, intervalMs: 0 }, hooks: { onBatch: () => wake() } }));
      matchers.push(b);
      assert.equal(b.restoredFrom.from, 'redis');
      const last = await inspect(async (r) => (await r.xrevrange(keysOf(prefix).in, '+', '-', 'COUNT', 1))[0][0]);
      while (compareStreamIds(b.position, last) < 0) await new Promise<void>((resolve) => (wake = resolve));
      assertSubscriptions(b, w, 'rebuilt');
    } finally {
      await hub.close();
      for (const m of matchers) await m.stop();
    }
  });

  /** A leader's trims, as its hooks report them; `after(n)` resolves after n more. */
  function keepLog() {
    const belows: string[] = [];
    const waiters: { n: number; resolve: () => void }[] = [];
    return {
      belows,
      hook: (t: { below: string; removed: number }) => {
        belows.push(t.below);
        for (const w of [...waiters]) if (--w.n <= 0) waiters.splice(waiters.indexOf(w), 1), w.resolve();
      },
      after: (n: number) => new Promise<void>((resolve) => waiters.push({ n, resolve })),
      /** Resolves at the first trim reported from now on that goes past `at`. */
      async past(at: string): Promise<void> {
        for (;;) {
          await this.after(1);
          const x = belows[belows.length - 1];
          if (x !== '' && compareStreamIds(x, at) > 0) return;
        }
      },
    };
  }

  /** A matcher's loop held at its next read while `close()`d (resolves once it is held), until `open()`. */
  function readGate() {
    let hold: Promise<void> | null = null;
    let release = () => {};
    let held = () => {};
    return {
      beforeRead: async () => {
        if (hold === null) return;
        held();
        await hold;
      },
      close: (): Promise<void> => {
        const isHeld = new Promise<void>((resolve) => (held = resolve));
        hold = new Promise<void>((resolve) => (release = resolve));
        return isHeld;
      },
      open: () => {
        hold = null;
        release();
      },
    };
  }
  const bounds = (prefix: string) =>
    inspect(async (r) => {
      const first = (await r.xrange(keysOf(prefix).in, '-', '+', 'COUNT', 1))[0]?.[0] ?? null;
      return { first, length: await r.xlen(keysOf(prefix).in) };
    });

  it('the leader trims the stream as it goes, but never past what a standby has still to read: the standby held back catches up with nothing lost', () =>
    deployment(async ({ prefix, hub, start, caughtUp }) => {
      const w = new World(hub, 31);
      const keeps = keepLog();
      const leader = await start({ statsMs: 50, hooks: { onKeep: keeps.hook } });
      const gate = readGate();
      const standby = await start({ statsMs: 50, hooks: { beforeRead: gate.beforeRead } });
      assert.equal(standby.role, 'standby');
      await w.step(400);
      await caughtUp(leader);
      await caughtUp(standby);
      await gate.close();
      const at = standby.position;
      await w.step(600);
      await caughtUp(leader);
      await keeps.after(3);
      const b = await bounds(prefix);
      assert.ok(b.first !== null && compareStreamIds(b.first, at) <= 0, `the stream still holds what the standby has to read after ${at} (first entry ${b.first})`);
      assert.ok(keeps.belows.every((x) => x === '' || compareStreamIds(x, at) <= 0), `no trim went past the standby's position ${at}: ${keeps.belows.filter((x) => x !== '').join(' ')}`);
      assert.ok(leader.streamTrimmed > 0, 'the leader trimmed below the standby what nobody needs');
      assert.equal(leader.streamHold.heldBy, `${standby.matcherId}:read`, 'the leader knows who holds the stream');
      assert.ok(leader.streamHold.length >= 600, `the stream keeps what the standby has to read (${leader.streamHold.length})`);
      gate.open();
      await caughtUp(standby);
      assertSubscriptions(standby, w, 'the standby held back');
      // Nobody needs the old entries now: the stream shrinks to about the last node.
      await keeps.past(at);
      const after = await bounds(prefix);
      assert.ok(after.length < 400, `the stream keeps few entries once everyone has read them (XLEN ${after.length} of the 1000 commands)`);
      const stats = JSON.parse((await inspect((r) => r.get(keysOf(prefix).matcherStats))) ?? '{}') as { extra?: { trimmedPastReads?: number; streamTrims?: number } };
      assert.equal(stats.extra?.trimmedPastReads, 0);
      assert.ok((stats.extra?.streamTrims ?? 0) > 0, 'the stats count the trimmed entries');
    }));

  it('a standby whose read position stays put behind the stored offset for longer than stuckReadMs no longer holds the stream: the leader trims past it and it finds out', () =>
    deployment(async ({ prefix, hub, start, caughtUp }) => {
      const w = new World(hub, 37);
      const keeps = keepLog();
      // Stuck for 50 ms: the commands below take longer than that to write.
      const leader = await start({ statsMs: 50, stuckReadMs: 50, hooks: { onKeep: keeps.hook } });
      const gate = readGate();
      let told = () => {};
      const trimmedPast = new Promise<void>((resolve) => (told = resolve));
      const standby = await start({ statsMs: 50, hooks: { beforeRead: gate.beforeRead, onTrimmedPast: () => told() } });
      assert.equal(standby.role, 'standby');
      await w.step(200);
      await caughtUp(standby);
      await gate.close();
      const at = standby.position;
      await w.step(400);
      await caughtUp(leader);
      // Keeps after the last command: the leader trims past the standby's position.
      await within(keeps.past(at), 10_000, `the leader trims past the standby's read position ${at}`);
      gate.open();
      await within(trimmedPast, 10_000, 'the standby finds the stream trimmed past what it read');
      const b = await bounds(prefix);
      assert.ok(b.first === null || compareStreamIds(b.first, at) > 0);
    }));

  it('a matcher rebuilding from Redis while the leader trims: the commands after the offset it read are kept until it reads them', () =>
    deployment(async ({ hub, start, caughtUp }) => {
      const w = new World(hub, 41);
      const keeps = keepLog();
      const leader = await start({ statsMs: 50, hooks: { onKeep: keeps.hook } });
      await w.step(300);
      await caughtUp(leader);
      // A standby reads the stored offset and every subscription, then waits before its first read.
      let rebuilt = () => {};
      let proceed = () => {};
      const gate = new Promise<void>((resolve) => (proceed = resolve));
      const isRebuilt = new Promise<void>((resolve) => (rebuilt = resolve));
      const standbyStarting = start({
        statsMs: 50,
        hooks: {
          restoring: async () => {
            rebuilt();
            await gate;
          },
        },
      });
      await isRebuilt;
      // Meanwhile subscriptions change and the leader stores and trims what it applied.
      await w.step(400);
      await caughtUp(leader);
      await keeps.after(3);
      proceed();
      const standby = await standbyStarting;
      await caughtUp(standby);
      assertSubscriptions(standby, w, 'the standby rebuilt while the leader went on');
    }));

  it("a stopped matcher's snapshot start holds the stream while its hold lasts (a restart loads the file), and no longer after", () =>
    deployment(async ({ prefix, hub, start, caughtUp }) => {
      let t = Date.now();
      const now = () => t;
      const dir = tempDir();
      const w = new World(hub, 37);
      const a = await start({ statsMs: 50, now, snapshot: { dir, intervalMs: 0, holdMs: 60_000 } });
      await w.step(300);
      await caughtUp(a);
      await a.stop();
      const snap = a.snapshot;
      assert.ok(snap !== null, 'written at the stop');
      const keeps = keepLog();
      const b = await start({ statsMs: 50, now, hooks: { onKeep: keeps.hook } });
      await w.step(500);
      await caughtUp(b);
      await keeps.after(3);
      const held = await bounds(prefix);
      assert.ok(held.first !== null && compareStreamIds(held.first, snap.start) <= 0, `the stream still holds the commands after the snapshot's start ${snap.start} (first ${held.first})`);
      // A copy of the file loads: the stream still has everything after its start.
      const copy = tempDir();
      writeFileSync(join(copy, snapshotFileName(a.keys)), readFileSync(join(dir, snapshotFileName(a.keys))));
      const c = await start({ statsMs: 50, now, snapshot: { dir: copy, intervalMs: 0, holdMs: 60_000 } });
      assert.equal(c.restoredFrom.from, 'snapshot');
      await caughtUp(c);
      assertSubscriptions(c, w, 'from the held snapshot');
      await c.crash();
      // The holds pass: the stream is trimmed to the leader's progress, and the file is refused.
      t += 61_000;
      await w.step(300);
      await caughtUp(b);
      while (true) {
        await keeps.after(1);
        const x = keeps.belows[keeps.belows.length - 1];
        if (x !== '' && compareStreamIds(x, snap.start) > 0) break;
      }
      const d = await start({ statsMs: 50, now, snapshot: { dir, intervalMs: 0 } });
      assert.equal(d.restoredFrom.from, 'redis', 'the stream no longer holds what the file needs');
      await caughtUp(d);
      assertSubscriptions(d, w, 'rebuilt from Redis');
    }));

  it('each matcher partition keeps its own file in a shared directory', async () => {
    {
      const prefix = freshPrefix();
      const dir = tempDir();
      let wake = () => {};
      const ms = await Promise.all([0, 1].map((partition) => RedisMatcher.start(matcherOptions(prefix, { partitions: 2, partition, snapshot: { dir, intervalMs: 0 }, hooks: { onBatch: () => wake() } }))));
      const hub = new PartitionedHub(await Promise.all([0, 1].map((partition) => Hub.connect(hubOptions(prefix, { partitions: 2, partition })))));
      try {
        for (let i = 0; i < 20; i++) await hub.addSubscription(`dev${i}`, sub('s', anywhere(eq('k', 'a'))));
      } finally {
        await hub.close();
      }
      while (ms[0].core.subscriptions + ms[1].core.subscriptions < 20) await new Promise<void>((resolve) => (wake = resolve));
      const held = ms.map((m) => m.core.subscriptions);
      assert.ok(held[0] > 0 && held[1] > 0 && held[0] + held[1] === 20, `both partitions hold devices (${held.join(', ')})`);
      for (const m of ms) await m.stop();
      assert.equal(new Set(ms.map((m) => snapshotFileName(m.keys))).size, 2);
      assert.ok(ms.every((m) => existsSync(join(dir, snapshotFileName(m.keys)))));
      assert.deepEqual(ms.map((m) => m.snapshot?.subscriptions), held);
    }
  });
});
