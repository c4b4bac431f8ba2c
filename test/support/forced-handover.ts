/**
 * Sharded by space, a hand-over applied past the wait bound (RedisMatcher `handOverWaitMs`): a
 * shard with no matcher at all, a device homed on it with an event it owes the device, the device
 * moving to a running shard. Shared by the one-server and the cluster suites.
 */
import assert from 'node:assert/strict';
import { RedisHub } from '../../services/hub/redis.js';
import { RedisMatcher } from '../../services/matcher/redis.js';
import type { GeoSpec } from '../../services/redis/keys.js';
import type { MatcherStatsRecord } from '../../services/redis/protocol.js';
import { PublishError } from '../../src/model/errors.js';
import type { redisTestKit } from './redis-deployment.js';

type Kit = Pick<ReturnType<typeof redisTestKit>, 'freshPrefix' | 'matcherOptions' | 'hubOptions'>;

/**
 * Milan's column of cells on 1.56 km stripes (a publish in the middle of one visits no other):
 * `j`, the shard of a column (3 geographic shards) and the longitude of a column's middle.
 */
export function milanStripes(stripes: GeoSpec): { geo: GeoSpec; j: number; shardOf: (col: number) => number; lonOf: (col: number) => number } {
  const geo: GeoSpec = { ...stripes, cellDeg: 0.02 };
  return { geo, j: Math.floor((9.19 + 180) / geo.cellDeg), shardOf: (col) => col % 3, lonOf: (col) => (col + 0.5) * geo.cellDeg - 180 };
}

/**
 * Shard b gives up waiting for shard a (never started until the end) after 200 ms: the device gets
 * the event published where it arrived, and once shard a runs the one shard a owed it, each once,
 * the owed one after; an event near where it was, after the move, reaches it nowhere.
 */
export async function forcedHandOver(kit: Kit, stripes: GeoSpec, options: { leaderDies?: boolean } = {}): Promise<void> {
  const { freshPrefix, matcherOptions, hubOptions } = kit;
  const { geo, j, shardOf, lonOf } = milanStripes(stripes);
  const prefix = freshPrefix();
  const a = shardOf(j);
  const b = shardOf(j + 1);
  let forced!: (w: { entry: string; from: number[]; waitedMs: number }) => void;
  const bForced = new Promise<{ entry: string; from: number[]; waitedMs: number }>((resolve) => (forced = resolve));
  let closed!: (w: { released: string; closed: number }) => void;
  const bClosed = new Promise<{ released: string; closed: number }>((resolve) => (closed = resolve));
  // Every shard but a runs; b gives up waiting for a after 200 ms.
  const start = (k: number) =>
    RedisMatcher.start(matcherOptions(prefix, { geo, partition: k, ...(k === b ? { handOverWaitMs: 200, hooks: { onHandOverForced: forced, onOwedClosed: closed } } : {}) }));
  const matchers = await Promise.all([0, 1, 2, 3].filter((k) => k !== a).map(start));
  const hub = await RedisHub.connect(hubOptions(prefix, { geo }));
  const impatient = await RedisHub.connect(hubOptions(prefix, { geo, publishTimeoutMs: 300 }));
  let back: RedisMatcher | null = null;
  try {
    const dev = 'leaver';
    await hub.updateLocations([{ device: dev, lat: 45.4642, lon: lonOf(j) }]);
    await hub.addSubscription(dev, { id: 'near', filters: [{ constraints: [], area: { radiusM: 10 } }] });
    await hub.updateLocations([{ device: dev, lat: 45.4642, lon: lonOf(j) }]); // homes it on shard a (the forced hand-over below says so)
    // Published while the device is on shard a, which is down: shard a owes it this one.
    await assert.rejects(impatient.publish([{ id: 'owed', lat: 45.4642, lon: lonOf(j), attributes: {} }]), (err: unknown) => err instanceof PublishError && err.outcome === 'queued');
    await hub.updateLocations([{ device: dev, lat: 45.4642, lon: lonOf(j + 1) }]);
    const atB = hub.publish([{ id: 'at-b', lat: 45.4642, lon: lonOf(j + 1), attributes: {} }]);
    atB.catch(() => {}); // awaited below
    const w = await bForced;
    assert.deepEqual(w.from, [a]);
    assert.ok(w.waitedMs >= 200);
    assert.equal((await atB)[0].reached, 1, 'the device is on shard b once the bound passed');
    if (options.leaderDies === true) {
      // Shard b's leader goes before it could close the window; the next leader of b closes it.
      const bi = [0, 1, 2, 3].filter((k) => k !== a).indexOf(b);
      await matchers[bi].crash();
      matchers[bi] = await RedisMatcher.start(matcherOptions(prefix, { geo, partition: b, handOverWaitMs: 200, hooks: { onOwedClosed: closed } }));
    }
    // Shard a runs again: it stores what it owed the device (after shard b's, whose marker is
    // past it), applies the device's leaving, and matches nothing for it after.
    back = await start(a);
    assert.equal((await hub.publish([{ id: 'at-a', lat: 45.4642, lon: lonOf(j), attributes: {} }]))[0].reached, 0);
    const inbox = await hub.openInbox(dev, '');
    const got = [...(await inbox.pull(10))];
    if (got.length < 2) got.push(...(await inbox.pull(10)));
    inbox.close();
    assert.deepEqual(got.map((n) => n.event.id), ['at-b', 'owed'], 'each notification once, the owed one after');
    // Shard a has stored past the hand-over: shard b closes the device's window.
    assert.deepEqual(await bClosed, { released: (await bForced).entry.replace(/-(\d+)$/, (_, q: string) => `-${Number(q) - 1}`), closed: 1 });
  } finally {
    await impatient.close();
    await hub.close();
    await back?.stop();
    for (const m of matchers) await m.stop();
  }
}

/**
 * A device whose forced hand-over's owed window is still open (shard a, which owes it, is down)
 * leaves shard b while b is down too: shard c (which allows a device one window here), past the
 * bound, finds the window open and does not force this one; it counts the refusal and waits for
 * b, and applies the arrival once b runs again.
 */
export async function refusedHandOver(kit: Kit, stripes: GeoSpec): Promise<void> {
  const { freshPrefix, matcherOptions, hubOptions } = kit;
  const { geo, j, shardOf, lonOf } = milanStripes(stripes);
  const prefix = freshPrefix();
  const [a, b, c] = [shardOf(j), shardOf(j + 1), shardOf(j + 2)];
  let forced!: () => void;
  const bForced = new Promise<void>((resolve) => (forced = resolve));
  let refused!: (w: { entry: string; from: number[]; waitedMs: number }) => void;
  const cRefused = new Promise<{ entry: string; from: number[]; waitedMs: number }>((resolve) => (refused = resolve));
  let cForced = false;
  // The second stats record shard c writes after the refusal (the first may have been read before it).
  let written = -1;
  let counted!: (r: MatcherStatsRecord) => void;
  const cCounted = new Promise<MatcherStatsRecord>((resolve) => (counted = resolve));
  const hooks = (k: number) =>
    k === b
      ? { onHandOverForced: () => forced() }
      : k === c
        ? { onHandOverRefused: refused, onHandOverForced: () => (cForced = true), onStatsWritten: (r: MatcherStatsRecord) => written >= 0 && ++written === 2 && counted(r) }
        : {};
  const start = (k: number) => RedisMatcher.start(matcherOptions(prefix, { geo, partition: k, handOverWaitMs: 200, hooks: hooks(k), ...(k === c ? { maxOwedWindows: 1 } : {}) }));
  const running = new Map<number, RedisMatcher>();
  for (const k of [b, c, 3]) running.set(k, await start(k));
  const hub = await RedisHub.connect(hubOptions(prefix, { geo }));
  try {
    const dev = 'twice';
    await hub.updateLocations([{ device: dev, lat: 45.4642, lon: lonOf(j) }]);
    await hub.addSubscription(dev, { id: 'near', filters: [{ constraints: [], area: { radiusM: 10 } }] });
    await hub.updateLocations([{ device: dev, lat: 45.4642, lon: lonOf(j) }]); // homed on shard a, which is down
    await hub.updateLocations([{ device: dev, lat: 45.4642, lon: lonOf(j + 1) }]);
    await bForced; // shard b applied it past the bound: the device's window stays open while a is down
    assert.equal((await hub.publish([{ id: 'at-b', lat: 45.4642, lon: lonOf(j + 1), attributes: {} }]))[0].reached, 1);
    await running.get(b)!.stop();
    running.delete(b);
    await hub.updateLocations([{ device: dev, lat: 45.4642, lon: lonOf(j + 2) }]);
    const w = await cRefused;
    written = 0;
    assert.deepEqual(w.from, [b]);
    assert.ok(w.waitedMs >= 200);
    assert.equal((await cCounted).extra?.handOversRefused, 1, "shard c's stats record counts it");
    assert.equal((await hub.stats()).extra.handOversRefused, 1, "the gateways' figure (and metric)");
    // Shard b runs again and stores past the hand-over: shard c applies the arrival.
    running.set(b, await start(b));
    assert.equal((await hub.publish([{ id: 'at-c', lat: 45.4642, lon: lonOf(j + 2), attributes: {} }]))[0].reached, 1);
    assert.equal(cForced, false, 'shard c never applied it past the bound');
  } finally {
    await hub.close();
    for (const m of running.values()) await m.stop();
  }
}

/**
 * Shard b gives up on shard a (down) once, after the bound; a later hand-over from a, which has
 * still not stored, is applied at once (its first sign is the forcing, not a wait). Once a runs
 * and stores past where it was stuck, b waits for it again: stopped anew, a hand-over from it
 * waits the bound before it is forced.
 */
export async function stuckSourceHandOvers(kit: Kit, stripes: GeoSpec): Promise<void> {
  const { freshPrefix, matcherOptions, hubOptions } = kit;
  const { geo, j, shardOf, lonOf } = milanStripes(stripes);
  const prefix = freshPrefix();
  const [a, b] = [shardOf(j), shardOf(j + 1)];
  // What shard b's leader does about each arrival from a, in order: a wait begun, a forcing.
  const seen: [string, string][] = [];
  const forced = () => seen.filter(([k]) => k === 'forced');
  let waiter: { n: number; resolve: () => void } | null = null;
  const note = (what: string) => (w: { entry: string }) => {
    seen.push([what, w.entry]);
    if (waiter !== null && forced().length >= waiter.n) waiter.resolve();
  };
  /** Resolves once shard b has forced `n` hand-overs. */
  const forcings = (n: number) => new Promise<void>((resolve) => (forced().length >= n ? resolve() : (waiter = { n, resolve })));
  const start = (k: number) => RedisMatcher.start(matcherOptions(prefix, { geo, partition: k, ...(k === b ? { handOverWaitMs: 200, hooks: { onHandOverWait: note('wait'), onHandOverForced: note('forced') } } : {}) }));
  const running = new Map<number, RedisMatcher>();
  for (const k of [0, 1, 2, 3].filter((k) => k !== a)) running.set(k, await start(k));
  const hub = await RedisHub.connect(hubOptions(prefix, { geo }));
  const home = async (dev: string) => {
    await hub.updateLocations([{ device: dev, lat: 45.4642, lon: lonOf(j) }]);
    await hub.addSubscription(dev, { id: 'near', filters: [{ constraints: [], area: { radiusM: 10 } }] });
    await hub.updateLocations([{ device: dev, lat: 45.4642, lon: lonOf(j) }]);
  };
  const moveOn = (dev: string) => hub.updateLocations([{ device: dev, lat: 45.4642, lon: lonOf(j + 1) }]);
  /** What shard b did about the n-th hand-over it forced, in order. */
  const entriesOf = (n: number) => seen.filter(([, e]) => e === forced()[n][1]).map(([k]) => k);
  try {
    await home('one');
    await home('two');
    await moveOn('one');
    await forcings(1);
    assert.deepEqual(entriesOf(0), ['wait', 'forced'], 'the first hand-over from shard a waits the bound');
    await moveOn('two');
    await forcings(2);
    assert.deepEqual(entriesOf(1), ['forced'], 'a later one from shard a, still stuck, is applied at once');
    assert.equal((await hub.publish([{ id: 'at-b', lat: 45.4642, lon: lonOf(j + 1), attributes: {} }]))[0].reached, 2);
    // Shard a runs and stores past both hand-overs; a device homed on it then, and a stopped anew.
    running.set(a, await start(a));
    await home('three');
    assert.equal((await hub.publish([{ id: 'at-a', lat: 45.4642, lon: lonOf(j), attributes: {} }]))[0].reached, 1, 'shard a holds the third device');
    await running.get(a)!.stop();
    running.delete(a);
    await moveOn('three');
    await forcings(3);
    assert.deepEqual(entriesOf(2), ['wait', 'forced'], 'shard a stored since it was given up on: the bound is waited again');
    assert.equal((await hub.publish([{ id: 'at-b-2', lat: 45.4642, lon: lonOf(j + 1), attributes: {} }]))[0].reached, 3);
  } finally {
    await hub.close();
    for (const m of running.values()) await m.stop();
  }
}

/**
 * Two stuck shards in a row: shard a (down) owes the device an event when it moves to shard b,
 * which gives up on a after the bound; b then stops owing it one of its own, and the device moves
 * on to shard c, which gives up on b with a second owed window (a still owes). The device gets what
 * b and c stored, then, once a and b run again, what each owed it: every notification once.
 */
export async function twoWindowsHandOver(kit: Kit, stripes: GeoSpec): Promise<void> {
  const { freshPrefix, matcherOptions, hubOptions } = kit;
  const { geo, j, shardOf, lonOf } = milanStripes(stripes);
  const prefix = freshPrefix();
  const [a, b, c] = [shardOf(j), shardOf(j + 1), shardOf(j + 2)];
  const signal = <T>() => {
    let resolve!: (v: T) => void;
    return { promise: new Promise<T>((r) => (resolve = r)), resolve: (v: T) => resolve(v) };
  };
  const bForced = signal<void>();
  // Shard c's first word on the device's arrival from b: forced, or refused.
  const cGaveUp = signal<{ how: string; from: number[] }>();
  const hooks = (k: number) =>
    k === b
      ? { onHandOverForced: () => bForced.resolve() }
      : k === c
        ? { onHandOverForced: (w: { from: number[] }) => cGaveUp.resolve({ how: 'forced', from: w.from }), onHandOverRefused: (w: { from: number[] }) => cGaveUp.resolve({ how: 'refused', from: w.from }) }
        : {};
  const start = (k: number) => RedisMatcher.start(matcherOptions(prefix, { geo, partition: k, handOverWaitMs: 200, hooks: hooks(k) }));
  const running = new Map<number, RedisMatcher>();
  for (const k of [b, c, 3]) running.set(k, await start(k));
  const hub = await RedisHub.connect(hubOptions(prefix, { geo }));
  const impatient = await RedisHub.connect(hubOptions(prefix, { geo, publishTimeoutMs: 300 }));
  const at = (col: number) => ({ lat: 45.4642, lon: lonOf(col) });
  const queued = (id: string, col: number) => assert.rejects(impatient.publish([{ id, ...at(col), attributes: {} }]), (err: unknown) => err instanceof PublishError && err.outcome === 'queued');
  try {
    const dev = 'twice';
    await hub.updateLocations([{ device: dev, ...at(j) }]);
    await hub.addSubscription(dev, { id: 'near', filters: [{ constraints: [], area: { radiusM: 10 } }] });
    await hub.updateLocations([{ device: dev, ...at(j) }]); // homed on shard a, which is down
    await queued('owed-a', j);
    await hub.updateLocations([{ device: dev, ...at(j + 1) }]);
    await bForced.promise;
    assert.equal((await hub.publish([{ id: 'at-b', ...at(j + 1), attributes: {} }]))[0].reached, 1);
    await running.get(b)!.stop();
    running.delete(b);
    await queued('owed-b', j + 1);
    await hub.updateLocations([{ device: dev, ...at(j + 2) }]);
    assert.deepEqual(await cGaveUp.promise, { how: 'forced', from: [b] }, 'shard c gives up on b with a second window (a still owes the device)');
    assert.equal((await hub.publish([{ id: 'at-c', ...at(j + 2), attributes: {} }]))[0].reached, 1);
    // The shards left behind run again: each stores what it owed the device, once.
    running.set(a, await start(a));
    running.set(b, await start(b));
    assert.equal((await hub.publish([{ id: 'after', ...at(j + 2), attributes: {} }]))[0].reached, 1);
    const inbox = await hub.openInbox(dev, '');
    const got: string[] = [];
    const all = ['at-b', 'at-c', 'owed-a', 'owed-b', 'after'];
    while (!all.every((id) => got.includes(id))) got.push(...(await inbox.pull(10)).map((n) => n.event.id));
    inbox.close();
    assert.deepEqual(got.slice(0, 2), ['at-b', 'at-c']);
    assert.deepEqual([...got.slice(2)].sort(), ['after', 'owed-a', 'owed-b'], 'each notification once');
  } finally {
    await impatient.close();
    await hub.close();
    for (const m of running.values()) await m.stop();
  }
}
