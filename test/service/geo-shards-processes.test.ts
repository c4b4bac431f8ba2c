/**
 * Sharding by space (AMBIT_GEO_SHARDS) as separate processes on one real redis-server, real gRPC
 * clients.
 *
 * Two geographic shards in stripes of 0.009° (about 700 m at Milan: column j of cells belongs to
 * shard j mod 2) and one wide shard: shard 0 has two matcher processes (a leader and a standby,
 * AMBIT_MATCHER_PARTITION=0, a short lease), shards 1 and 2 one each; two gateway processes, each
 * holding one Redis hub that speaks to every shard. The device world of device-world.ts, with its
 * marker subscription anchored (a marker with no area would make every device wide): in round 1
 * the devices stand on both geographic shards and the wide one (and one, without a position yet,
 * nowhere); before round 2 one of them crosses from shard 1 to shard 0 and the one without a
 * position gets its first (it is homed on shard 1).
 *
 * Round 1: every device on both gateways gets exactly the events its subscriptions match, reached
 * counts are exact, each device is homed where the shard map puts it and each shard's matcher
 * holds its devices' subscriptions only. Then shard 0's leader is killed with SIGKILL while
 * publishes go on and the round-2 moves are sent; its standby leads, the other shards keep their
 * leaders; the hand-overs are in the shards' command streams; the round-2 events are published and
 * every device gets every event that matches it once, in order. Then OpsService.MoveCells through
 * gateway A (an ops token) gives the cells under four devices to the other geographic shard while
 * the devices are connected and publishes flow through both gateways: the answer counts the
 * devices handed over, both gateways report the new map version, the home hash, the command
 * streams and the matchers follow the new map, and later events reach exactly the devices they
 * match, once, in order; invalid moves are refused naming the field, other scopes are denied. A
 * process with other AMBIT_GEO_* settings on the same prefix refuses to start with the layout error.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { Redis } from 'ioredis';
import { SCOPES, TokenAuthority } from '../../services/edge/auth.js';
import { ShardMap } from '../../services/matcher/shard-map.js';
import type { GeoSpec } from '../../services/redis/keys.js';
import { Op, type Notification } from '../../api/gen/ambit/v1/types_pb.js';
import { Clients, DeviceStream, Status, eventually, expectStatus, meta, unary } from '../support/grpc.js';
import { type Dev, deviceWorld, type Ev, eventOf, type Gateway, markerFor, matching, moveDevices, num, openDevices, phaseEvent, type Point, ROUND_1_EVENTS, ROUND_2_EVENTS, text } from '../support/device-world.js';
import { type AmbitProcess, startAmbit } from '../support/processes.js';
import { useRedisServer } from '../support/redis-deployment.js';
import { expectExactly, inspectServer, layoutError, leading, metricOf } from '../support/process-checks.js';

const SECRET = 'geo-shards-processes-secret-0123456789ab';
const authority = new TokenAuthority(SECRET);
const deviceToken = (d: string) => authority.issue({ subject: d, scopes: [SCOPES.device] });
const publisherToken = authority.issue({ subject: 'pub', scopes: [SCOPES.publish] });
const opsToken = authority.issue({ subject: 'ops', scopes: [SCOPES.ops] });

/** Two geographic shards in stripes of 0.009° at Milan, one wide shard, a guard band of 20 m. */
const GEO: GeoSpec = { shards: 2, wide: 1, cellDeg: 0.009, guardM: 20, layout: 'stripes' };
const WIDE = GEO.shards; // the one wide shard's number
const MAP = new ShardMap({ version: 1, ...GEO });
const STORED_LAYOUT = `single geo=${GEO.shards}+${GEO.wide} cell=${GEO.cellDeg} guard=${GEO.guardM} ${GEO.layout}`;

/** The devices' gateways: each gateway holds devices of both geographic shards (checked below). */
const GATEWAYS: Gateway[] = ['A', 'A', 'B', 'B', 'A', 'B', 'A', 'B'];
const { devices: DEVICES, round1Positions: ROUND_1_POSITIONS, round2Moves: ROUND_2_MOVES } = deviceWorld('gs', GATEWAYS);
/** The radius of the markers and the phase subscriptions: anchored, and wide enough for the whole world. */
const FAR_M = 50_000;
const markerSub = (device: string) => ({ id: 'mk', filters: [{ constraints: [{ name: 'to', op: Op.EQ, value: text(device) }], area: { radiusM: FAR_M } }] });
const phaseSub = (phase: string) => ({ id: phase, filters: [{ constraints: [{ name: 'phase', op: Op.EQ, value: text(phase) }], area: { radiusM: FAR_M } }] });

/**
 * The model of a device's home under a shard map (the configured one unless told): its wide shard
 * while it holds a wide subscription; else none before its first position, then its cell's shard
 * (every position of the world is far from a column border; a device whose cell changes shard in a
 * move is far from every border of its cell: checked where cells move).
 */
const isWide = (dev: Dev) => dev.subs.some((s) => s.radiusM === null);
const homeOf = (dev: Dev, pos: Point | undefined, map: ShardMap = MAP): number | undefined => (isWide(dev) ? WIDE : pos === undefined ? undefined : map.shardOf(pos.lat, pos.lon));
/** How far a point is from the nearest border of its column of cells, in metres. */
function borderDistanceM(p: Point): number {
  const x = (p.lon + 180) / GEO.cellDeg;
  const frac = x - Math.floor(x);
  return Math.min(frac, 1 - frac) * GEO.cellDeg * 111_195 * Math.cos((p.lat * Math.PI) / 180);
}
/** How far a point is from the nearest border of its cell (its column's or its row's), in metres. */
function cellBorderDistanceM(p: Point): number {
  const y = (p.lat + 90) / GEO.cellDeg;
  const frac = y - Math.floor(y);
  return Math.min(borderDistanceM(p), Math.min(frac, 1 - frac) * GEO.cellDeg * 111_195);
}

const redis = useRedisServer();
const inspect = <T>(f: (r: Redis) => Promise<T>): Promise<T> => inspectServer(redis.url(), f);

const publish = (c: Clients, ev: unknown, deadlineMs = 10_000) =>
  unary<{ eventId: string; reached: bigint }>(c.publisher, 'publish', { event: ev }, meta(publisherToken), { deadline: Date.now() + deadlineMs });

/** A hand-over as the shards' command streams record it: `acq` of device `d` on `to`, from `from` ('' when it had no home). */
interface Acq {
  d: string;
  from: string;
  to: number;
}

describe('geo shards processes: 2 geographic shards (stripes) + 1 wide shard, a leader and a standby for shard 0, two gateways', { skip: redis.missing ?? false, timeout: 120_000 }, () => {
  const prefix = `gsp${process.pid}-${Date.now()}:`;
  const processes: AmbitProcess[] = [];
  const open: Clients[] = [];
  const env = (role: string, more: Record<string, string> = {}): Record<string, string> => ({
    AMBIT_ROLE: role,
    REDIS_URL: redis.url(),
    AMBIT_REDIS_PREFIX: prefix,
    AMBIT_GEO_SHARDS: String(GEO.shards),
    AMBIT_GEO_WIDE_SHARDS: String(GEO.wide),
    AMBIT_GEO_CELL_DEG: String(GEO.cellDeg),
    AMBIT_GEO_GUARD_M: String(GEO.guardM),
    AMBIT_GEO_LAYOUT: GEO.layout,
    AMBIT_TOKEN_SECRET: SECRET,
    AMBIT_ENGINE: 'fast',
    AMBIT_MATCHER_LEASE_MS: '500',
    AMBIT_LOG_LEVEL: 'info',
    ...more,
  });
  const start = async (role: string, more: Record<string, string> = {}) => {
    const p = await startAmbit(env(role, more), [], 30_000);
    processes.push(p);
    return p;
  };
  const matcher = (shard: number) => start('matcher', { AMBIT_MATCHER_PARTITION: String(shard), AMBIT_METRICS_PORT: '0' });
  const clients = (p: AmbitProcess) => {
    assert.ok(p.port !== null, 'the process serves gRPC');
    const c = new Clients(`127.0.0.1:${p.port}`, grpc.credentials.createInsecure());
    open.push(c);
    return c;
  };

  let leader0: AmbitProcess;
  let standby0: AmbitProcess;
  let leader1: AmbitProcess;
  let leader2: AmbitProcess;
  let gwA: AmbitProcess;
  let gwB: AmbitProcess;
  let ca: Clients;
  let cb: Clients;
  const clientsOf = (g: Gateway) => (g === 'A' ? ca : cb);
  /** The world's streams, kept open from the first test to the second. */
  const streams = new Map<string, DeviceStream>();
  const positions: Record<string, Point> = {};

  /** The home hash of the deployment (device → shard), the world's devices only. */
  const homes = () => inspect(async (r) => Object.fromEntries(Object.entries(await r.hgetall(`${prefix}home`)).filter(([dev]) => DEVICES.some((d) => d.name === dev)).map(([dev, k]) => [dev, Number(k)])));
  const modelHomes = (map: ShardMap = MAP) => {
    const out: Record<string, number> = {};
    for (const dev of DEVICES) {
      const home = homeOf(dev, positions[dev.name], map);
      if (home !== undefined) out[dev.name] = home;
    }
    return out;
  };
  /** Every device an `acq` entry of a shard's command stream takes over (an entry may name several). */
  const handOvers = () =>
    inspect(async (r) => {
      const out: Acq[] = [];
      for (let k = 0; k < GEO.shards + GEO.wide; k++) {
        for (const [, fields] of await r.xrange(`${prefix}s${k}:in`, '-', '+')) {
          if (fields[0] !== 't' || fields[1] !== 'acq') continue;
          for (let i = 2; i + 1 < fields.length; i += 2) {
            if (fields[i] === 'd') out.push({ d: fields[i + 1], from: '?', to: k });
            else if (fields[i] === 'f') out[out.length - 1].from = fields[i + 1];
          }
        }
      }
      return out;
    });
  /** How many subscriptions each shard's devices hold (by the model's homes), `extra` more per device. */
  const subsPerShard = (extra: number, map: ShardMap = MAP) => {
    const per = Array<number>(GEO.shards + GEO.wide).fill(0);
    for (const dev of DEVICES) {
      const home = homeOf(dev, positions[dev.name], map);
      if (home !== undefined) per[home] += dev.subs.length + 1 + extra;
    }
    return per;
  };

  before(async () => {
    // The checks below read every hand-over from the command streams: a reader of the streams
    // holds them the way a matcher does (scripts.ts KEEP), from the start and for the whole run.
    await inspect(async (r) => {
      const [sec] = await r.time();
      for (let k = 0; k < GEO.shards + GEO.wide; k++) await r.hset(`${prefix}s${k}:matcher:keep`, 'test-reader:read', `0-1 ${(Number(sec) + 3600) * 1000}`);
    });
    leader0 = await matcher(0);
    await leader0.waitForLog(leading);
    [leader1, leader2] = await Promise.all([matcher(1), matcher(2)]);
    await Promise.all([leader1.waitForLog(leading), leader2.waitForLog(leading)]);
    [standby0, gwA, gwB] = await Promise.all([matcher(0), start('gateway'), start('gateway')]);
    ca = clients(gwA);
    cb = clients(gwB);
  });

  after(async () => {
    for (const s of streams.values()) s.cancel();
    for (const c of open) c.close();
    await Promise.all(processes.map((p) => p.stop().catch(() => null)));
  });

  it('round 1: devices on both gateways, homed on both geographic shards and the wide shard, get exactly the events their subscriptions match; reached counts are exact', async () => {
    // The world: every position of both rounds is far enough from a column border that its home is its cell's shard.
    for (const p of [...Object.values(ROUND_1_POSITIONS), ...Object.values(ROUND_2_MOVES)]) assert.ok(borderDistanceM(p) > 3 * GEO.guardM, `${JSON.stringify(p)} is ${borderDistanceM(p).toFixed(0)} m from a border`);
    for (const [k, p] of [leader0, leader1, leader2].entries()) {
      assert.ok(p.logs.some((l) => typeof l.msg === 'string' && l.msg.includes(`${k < GEO.shards ? 'geographic' : 'wide'} shard ${k} of 3`)), `the matcher of shard ${k} says which shard it serves`);
      assert.equal(await metricOf(p, 'ambit_matcher_leader', 'matcher'), 1, `shard ${k}'s first matcher leads`);
    }
    assert.equal(await metricOf(standby0, 'ambit_matcher_leader', 'matcher'), 0, "shard 0's second matcher stands by");
    for (const gw of [gwA, gwB]) assert.equal(gw.logs.filter((l) => typeof l.msg === 'string' && l.msg.startsWith('redis hub connected')).length, 1, 'a gateway holds one hub for every shard');

    // Open every device on its gateway: its anchored marker, then its subscriptions of the model.
    for (const [name, stream] of await openDevices(DEVICES, clientsOf, deviceToken, markerSub)) streams.set(name, stream);
    // Before any position only the device with a wide subscription has a home: the wide shard.
    assert.deepEqual(await homes(), { 'gs-4': WIDE }, 'no position yet: only the wide device is homed');
    await moveDevices(streams, positions, ROUND_1_POSITIONS);

    // Each device is homed where the shard map puts it: both geographic shards and the wide shard hold devices.
    const homes1 = await homes();
    assert.deepEqual(homes1, modelHomes(), 'round 1: the home of each device');
    assert.equal(homes1['gs-7'], undefined, 'gs-7 has no position yet, nor a home');
    assert.deepEqual(new Set(Object.values(homes1)), new Set([0, 1, WIDE]), 'devices on shards 0, 1 and the wide shard');
    // Over both rounds each gateway holds devices of both geographic shards.
    for (const g of ['A', 'B'] as const) {
      const shards = new Set<number | undefined>();
      for (const dev of DEVICES.filter((x) => x.gateway === g)) {
        shards.add(homeOf(dev, ROUND_1_POSITIONS[dev.name]));
        shards.add(homeOf(dev, ROUND_2_MOVES[dev.name] ?? ROUND_1_POSITIONS[dev.name]));
      }
      assert.ok(shards.has(0) && shards.has(1), `gateway ${g} holds devices of both geographic shards (${[...shards].join(', ')})`);
    }

    const expected = new Map<string, { id: string; subs: string[] }[]>(DEVICES.map((dev) => [dev.name, []]));
    const reachedOf = new Map<number, number[]>(); // per shard
    for (const ev of ROUND_1_EVENTS) {
      const per = Array<number>(GEO.shards + GEO.wide).fill(0);
      for (const dev of DEVICES) {
        const subs = matching(dev, positions[dev.name], ev);
        if (subs.length === 0) continue;
        assert.ok(homes1[dev.name] !== undefined, `${dev.name} matches ev-${ev.seq}: it has a home`);
        per[homes1[dev.name]] += subs.length;
        expected.get(dev.name)!.push({ id: `ev-${ev.seq}`, subs });
      }
      const r = await publish(ev.seq % 2 === 0 ? ca : cb, eventOf(ev)); // both gateways route publishes
      assert.equal(r.eventId, `ev-${ev.seq}`);
      assert.equal(r.reached, BigInt(per.reduce((a, b) => a + b, 0)), `reached of ev-${ev.seq} (${per.join(' + ')} over the shards)`);
      reachedOf.set(ev.seq, per);
    }
    // The world is not trivial: devices of every shard hear something, some events reach both geographic shards.
    for (let k = 0; k < GEO.shards + GEO.wide; k++) assert.ok([...reachedOf.values()].some((per) => per[k] > 0), `an event reaches shard ${k}'s devices`);
    const onBoth = [...reachedOf].filter(([, per]) => per[0] > 0 && per[1] > 0).map(([seq]) => seq);
    assert.ok(onBoth.length >= 1, `events reaching devices of both geographic shards: ${onBoth.join(', ')}`);

    for (const dev of DEVICES) {
      const stream = streams.get(dev.name)!;
      await expectExactly(stream, dev.name, expected.get(dev.name)!, 15_000, `${dev.name} (shard ${homes1[dev.name]}, on gateway ${dev.gateway}) gets exactly its events, in publish order`);
      // Nothing else came: the next notification is the one only this device's marker matches
      // (gs-7 has no position: its anchored marker admits nothing yet; it is checked in round 2).
      if (positions[dev.name] === undefined) continue;
      await stream.expectNextNotification(`mk-${dev.name}-0`, async () => {
        const r = await publish(dev.gateway === 'A' ? cb : ca, markerFor(dev.name));
        assert.equal(r.reached, 1n, `only ${dev.name}'s marker subscription matches`);
      }, 10_000);
    }

    // Each shard's matchers hold the subscriptions of the devices homed there, and no others (the standby tails shard 0 too).
    const subs = subsPerShard(0);
    assert.ok(subs.every((n) => n > 0), `subscriptions per shard: ${subs.join(', ')}`);
    await eventually(async () => (await metricOf(leader0, 'ambit_subscriptions', 'matcher')) === subs[0], `shard 0's leader holds ${subs[0]} subscriptions`, 10_000);
    await eventually(async () => (await metricOf(standby0, 'ambit_subscriptions', 'matcher')) === subs[0], `shard 0's standby holds ${subs[0]} subscriptions`, 10_000);
    await eventually(async () => (await metricOf(leader1, 'ambit_subscriptions', 'matcher')) === subs[1], `shard 1 holds ${subs[1]} subscriptions`, 10_000);
    await eventually(async () => (await metricOf(leader2, 'ambit_subscriptions', 'matcher')) === subs[2], `the wide shard holds ${subs[2]} subscriptions`, 10_000);
    await inspect(async (r) => assert.equal(await r.get(`${prefix}layout`), STORED_LAYOUT));
  });

  it("SIGKILL of shard 0's leader while publishes go on and a device crosses into shard 0: its standby leads, the other shards keep theirs; round 2 and every event before it arrive once, in order", async (t) => {
    const homes1 = await homes();
    const expected = new Map<string, { id: string; subs: string[] }[]>(DEVICES.map((dev) => [dev.name, []]));
    // Each device subscribes to the kill phase (anchored: a device without a position hears none of it).
    for (const dev of DEVICES) await streams.get(dev.name)!.subscribeOk(phaseSub('kill'));
    const killEvent = (i: number) => phaseEvent('kill', i);
    const expectKill = (i: number) => {
      let n = 0;
      for (const dev of DEVICES) {
        if (positions[dev.name] === undefined) continue;
        expected.get(dev.name)!.push({ id: `kill-${i}`, subs: ['kill'] });
        n++;
      }
      return n;
    };
    for (let i = 0; i < 10; i++) {
      const n = expectKill(i);
      assert.equal((await publish(i % 2 === 0 ? ca : cb, killEvent(i))).reached, BigInt(n), `kill-${i}`);
    }
    const epochs = [await metricOf(leader1, 'ambit_matcher_epoch', 'matcher'), await metricOf(leader2, 'ambit_matcher_epoch', 'matcher')];
    assert.deepEqual(epochs, [1, 1], "shards 1 and 2's first leases");

    // Publishes go on while shard 0's leader dies (one of them in flight), and the round-2 moves
    // are sent meanwhile: each publish is answered (with every recipient) or times out; either way
    // it is stored in the streams of the shards it visits and delivered.
    let answered = 0;
    let timedOut = 0;
    let slowestMs = 0;
    for (let i = 10; i < 30; i++) {
      if (i === 16) await moveDevices(streams, positions, ROUND_2_MOVES);
      const n = expectKill(i);
      const sent = Date.now();
      const answer = publish(i % 2 === 0 ? ca : cb, killEvent(i), 5000);
      if (i === 12) await leader0.kill9(); // kill-12 is on its way
      let r: { reached: bigint };
      try {
        r = await answer;
      } catch (err) {
        assert.ok((err as grpc.ServiceError).code === Status.DEADLINE_EXCEEDED, `kill-${i}: ${String(err)}`);
        timedOut++;
        continue;
      }
      assert.equal(r.reached, BigInt(n), `kill-${i}`);
      answered++;
      slowestMs = Math.max(slowestMs, Date.now() - sent);
    }
    assert.equal(answered + timedOut, 20);
    t.diagnostic(`during the takeover: ${answered} publishes answered (the slowest in ${slowestMs} ms), ${timedOut} timed out`);
    await standby0.waitForLog(leading, 15_000);
    assert.equal(await metricOf(standby0, 'ambit_matcher_leader', 'matcher'), 1, 'the standby leads shard 0');
    assert.equal(await metricOf(standby0, 'ambit_matcher_epoch', 'matcher'), 2, "shard 0's second lease");
    // The other shards' leases are their own: their leaders never changed.
    for (const [k, p] of [[1, leader1], [2, leader2]] as const) {
      assert.equal(await metricOf(p, 'ambit_matcher_leader', 'matcher'), 1, `shard ${k} keeps its leader`);
      assert.equal(await metricOf(p, 'ambit_matcher_epoch', 'matcher'), 1, `shard ${k}'s first lease`);
    }

    // The moves handed devices over: one crossed from geographic shard 1 to shard 0, one came from
    // the wide shard with its first position; the home hash and the command streams say so.
    const homes2 = await homes();
    assert.deepEqual(homes2, modelHomes(), 'round 2: the home of each device');
    const geographic = (k: number | undefined) => k !== undefined && k < GEO.shards;
    const crossed = DEVICES.filter((dev) => geographic(homes1[dev.name]) && geographic(homes2[dev.name]) && homes1[dev.name] !== homes2[dev.name]).map((dev) => `${dev.name}: ${homes1[dev.name]} → ${homes2[dev.name]}`);
    assert.deepEqual(crossed, ['gs-2: 1 → 0'], 'a device crossed a border between geographic shards');
    assert.deepEqual(new Set(Object.values(homes2)), new Set([0, 1, WIDE]), 'devices on shards 0, 1 and the wide shard');
    // Every change of home is an `acq` entry of the shard the device came to, naming the shard it
    // left ('' for its first home: the wide shard at its wide subscription, else its first position's).
    const want: Acq[] = [];
    for (const dev of DEVICES) {
      const r0 = homeOf(dev, undefined);
      const r1 = homeOf(dev, ROUND_1_POSITIONS[dev.name]);
      const r2 = homeOf(dev, ROUND_2_MOVES[dev.name] ?? ROUND_1_POSITIONS[dev.name]);
      let cur: number | undefined;
      for (const next of [r0, r1, r2]) {
        if (next !== undefined && next !== cur) want.push({ d: dev.name, from: cur === undefined ? '' : String(cur), to: next });
        cur = next ?? cur;
      }
    }
    const key = (a: Acq) => `${a.d} ${a.from}→${a.to}`;
    assert.deepEqual((await handOvers()).map(key).sort(), want.map(key).sort(), 'the hand-overs in the command streams');
    assert.ok(want.some((a) => a.d === 'gs-2' && a.from === '1' && a.to === 0));

    // Round 2's events, with shard 0's new leader.
    for (const ev of ROUND_2_EVENTS) {
      let reached = 0;
      for (const dev of DEVICES) {
        const subs = matching(dev, positions[dev.name], ev);
        reached += subs.length;
        if (subs.length > 0) expected.get(dev.name)!.push({ id: `ev-${ev.seq}`, subs });
      }
      const r = await publish(ev.seq % 2 === 0 ? cb : ca, eventOf(ev));
      assert.equal(r.eventId, `ev-${ev.seq}`);
      assert.equal(r.reached, BigInt(reached), `reached of ev-${ev.seq}`);
    }
    for (let i = 30; i < 35; i++) {
      const n = expectKill(i);
      assert.equal((await publish(i % 2 === 0 ? ca : cb, killEvent(i))).reached, BigInt(n), `kill-${i}`);
    }
    // Round 2 reaches the crossing device on its new shard, and the device that got its first position.
    assert.ok(expected.get('gs-2')!.some((e) => e.id.startsWith('ev-')), 'gs-2 expects a round-2 event on shard 0');
    assert.ok(expected.get('gs-7')!.some((e) => e.id.startsWith('ev-')), 'gs-7 expects a round-2 event on shard 1');

    for (const dev of DEVICES) {
      await expectExactly(streams.get(dev.name)!, dev.name, expected.get(dev.name)!, 20_000, `${dev.name} (shard ${homes1[dev.name]} then ${homes2[dev.name]}, on gateway ${dev.gateway}): every event that matches it once, in publish order`);
    }
    // Nothing twice, nothing more: the next notification of each is its own next marker.
    for (const dev of DEVICES) {
      await streams.get(dev.name)!.expectNextNotification(`mk-${dev.name}-1`, async () => {
        assert.equal((await publish(dev.gateway === 'A' ? ca : cb, markerFor(dev.name, 1))).reached, 1n, `only ${dev.name}'s marker subscription matches`);
      }, 10_000);
    }
    // Each shard's leader holds the subscriptions of the devices homed there now.
    const subs = subsPerShard(1);
    await eventually(async () => (await metricOf(standby0, 'ambit_subscriptions', 'matcher')) === subs[0], `shard 0's new leader holds ${subs[0]} subscriptions`, 10_000);
    await eventually(async () => (await metricOf(leader1, 'ambit_subscriptions', 'matcher')) === subs[1], `shard 1 holds ${subs[1]} subscriptions`, 10_000);
    await eventually(async () => (await metricOf(leader2, 'ambit_subscriptions', 'matcher')) === subs[2], `the wide shard holds ${subs[2]} subscriptions`, 10_000);
  });

  it('MoveCells through one gateway while devices are connected and publishes flow: devices in the moved cells are handed over, both gateways take the new map, later events reach exactly the devices they match; invalid moves and other scopes are refused', async (t) => {
    const opsMd = meta(opsToken);
    const stats = (c: Clients) => unary<{ shardMapVersion: bigint; shardMapMoving: boolean }>(c.ops, 'getStats', {}, opsMd);
    const name = (i: number) => DEVICES[i].name;
    const cellOf = (i: number) => ({ row: MAP.row(positions[name(i)].lat), col: MAP.col(positions[name(i)].lon) });
    const other = (i: number) => 1 - MAP.shardOf(positions[name(i)].lat, positions[name(i)].lon);
    // The cells: device 5's (it holds device 7 and the wide device 4 too) and device 3's go from
    // shard 1 to shard 0, device 6's from shard 0 to shard 1; device 0's cell is named with the
    // shard it has already (its device stays). Device 1 stays in the unmoved cell just north of
    // device 5's, device 2 on shard 0 far west.
    const moves = [
      { ...cellOf(5), shard: other(5) },
      { ...cellOf(6), shard: other(6) },
      { ...cellOf(3), shard: other(3) },
      { ...cellOf(0), shard: 1 - other(0) },
    ];
    const NEW = new ShardMap({ version: 1, ...GEO, cells: Object.fromEntries(moves.map((m) => [`${m.row},${m.col}`, m.shard])) });
    const before = modelHomes();
    const after = modelHomes(NEW);
    const moved = DEVICES.filter((dev) => before[dev.name] !== after[dev.name]);
    // The world: the model's moves, both ways, devices of both gateways; each device that changes
    // shard is far enough from every border of its cell that its guard circle reaches no other cell.
    assert.deepEqual(await homes(), before, 'the homes before the move');
    assert.deepEqual(moved.map((dev) => `${dev.name}: ${before[dev.name]} → ${after[dev.name]}`), ['gs-3: 1 → 0', 'gs-5: 1 → 0', 'gs-6: 0 → 1', 'gs-7: 1 → 0'], 'the devices the move hands over');
    assert.deepEqual(cellOf(7), cellOf(5), 'devices 5 and 7 share a cell');
    assert.deepEqual(cellOf(4), cellOf(5), 'the wide device stands in a moved cell');
    assert.equal(after[name(4)], WIDE, 'the wide device stays on the wide shard');
    assert.deepEqual(new Set(moved.map((dev) => dev.gateway)), new Set(['A', 'B']), 'moved devices on both gateways');
    for (const dev of moved) assert.ok(cellBorderDistanceM(positions[dev.name]) > 3 * GEO.guardM, `${dev.name} is ${cellBorderDistanceM(positions[dev.name]).toFixed(0)} m from a border of its cell`);

    // Refused, and nothing changes: a shard that is not geographic (the wide shard's number), a
    // column or a row outside the map, no cell at all; scopes other than ops.
    const [row, col] = [cellOf(5).row, cellOf(5).col];
    await expectStatus(unary(ca.ops, 'moveCells', { moves: [{ row, col, shard: GEO.shards }] }, opsMd), Status.INVALID_ARGUMENT, 'moves[0].shard');
    await expectStatus(unary(cb.ops, 'moveCells', { moves: [{ row, col: MAP.cols, shard: 0 }] }, opsMd), Status.INVALID_ARGUMENT, 'moves[0].col');
    await expectStatus(unary(ca.ops, 'moveCells', { moves: [moves[0], { row: MAP.rows, col, shard: 0 }] }, opsMd), Status.INVALID_ARGUMENT, 'moves[1].row');
    await expectStatus(unary(cb.ops, 'moveCells', { moves: [] }, opsMd), Status.INVALID_ARGUMENT, 'moves');
    await expectStatus(unary(ca.ops, 'moveCells', { moves }, meta(publisherToken)), Status.PERMISSION_DENIED);
    await expectStatus(unary(cb.ops, 'moveCells', { moves }, meta(deviceToken(name(5)))), Status.PERMISSION_DENIED);
    for (const [g, c] of [['A', ca], ['B', cb]] as const) {
      const s = await stats(c);
      assert.deepEqual([s.shardMapVersion, s.shardMapMoving], [0n, false], `gateway ${g}: the configured map, no move under way`);
    }
    assert.equal(await inspect((r) => r.get(`${prefix}map`)), null, 'no shard map is stored');
    assert.deepEqual(await homes(), before, 'the refused moves moved nobody');
    // PlanCells counts the devices homed on the geographic shards by the cells they are in, and moves nothing.
    const counted = [0, 0];
    for (const dev of DEVICES) if (before[dev.name] < GEO.shards) counted[MAP.shardOf(positions[dev.name].lat, positions[dev.name].lon)]++;
    const plan = await unary<{ moves: { row: number; col: number; shard: number }[]; devicesBefore: bigint[]; devicesAfter: bigint[] }>(cb.ops, 'planCells', { maxMoves: 3 }, opsMd);
    assert.deepEqual(plan.devicesBefore.map(Number), counted);
    assert.ok(plan.moves.length <= 3);
    assert.equal(plan.devicesAfter.reduce((a, b) => a + Number(b), 0), counted[0] + counted[1]);
    assert.ok(Math.max(...plan.devicesAfter.map(Number)) <= Math.max(...counted));
    await expectStatus(unary(ca.ops, 'planCells', {}, meta(publisherToken)), Status.PERMISSION_DENIED);
    assert.deepEqual(await homes(), before, 'a plan moves nobody');

    // Every device hears the move phase: each of its events reaches all eight (all have positions).
    for (const dev of DEVICES) await streams.get(dev.name)!.subscribeOk(phaseSub('move'));
    const everyone = DEVICES.filter((dev) => positions[dev.name] !== undefined).length;
    assert.equal(everyone, DEVICES.length);
    const acqsBefore = await handOvers();

    // Publishes through both gateways before, during and after the move; device 2 (its cell
    // unmoved) sends its position again through gateway B meanwhile (UpdateLocation, answered once
    // it is placed), so B places by the map the move stores.
    let published = 0;
    const publishMove = async () => {
      const i = published++;
      const r = await publish(i % 2 === 0 ? cb : ca, phaseEvent('move', i));
      assert.equal(r.reached, BigInt(everyone), `move-${i}`);
    };
    await publishMove();
    const inFlight = publishMove();
    let settled = false;
    const answer = unary<{ shardMapVersion: bigint; devicesMoved: bigint }>(ca.ops, 'moveCells', { moves }, opsMd);
    answer.then(
      () => (settled = true),
      () => (settled = true),
    );
    await inFlight;
    let during = 0;
    const again = () => unary(cb.device, 'updateLocation', { location: positions[name(2)] }, meta(deviceToken(name(2))));
    while (!settled && published < 1000) {
      await Promise.all([publishMove(), again()]);
      during++;
    }
    const r = await answer;
    assert.deepEqual([r.shardMapVersion, r.devicesMoved], [1n, BigInt(moved.length)], 'MoveCells: the new map version and the devices handed over');
    // Both gateways publish after the move: B takes the map as it stands now (A moved it itself).
    await publishMove();
    await publishMove();
    t.diagnostic(`${published} move-phase publishes, ${during} of them (each with a position of ${name(2)}) sent after the MoveCells call and answered before its answer`);
    for (const [g, c] of [['A', ca], ['B', cb]] as const) {
      const s = await stats(c);
      assert.deepEqual([s.shardMapVersion, s.shardMapMoving], [1n, false], `gateway ${g}: the new map, no move under way`);
    }

    // Every device is homed where the new map puts it; each hand-over is an `acq` entry of the shard
    // it went to, naming the shard it left; each shard's leader holds its devices' subscriptions.
    assert.deepEqual(await homes(), after, 'after the move: the home of each device');
    const key = (a: Acq) => `${a.d} ${a.from}→${a.to}`;
    const wantAcqs = [...acqsBefore, ...moved.map((dev) => ({ d: dev.name, from: String(before[dev.name]), to: after[dev.name] }))];
    assert.deepEqual((await handOvers()).map(key).sort(), wantAcqs.map(key).sort(), 'the hand-overs in the command streams');
    const subs = subsPerShard(2, NEW);
    await eventually(async () => (await metricOf(standby0, 'ambit_subscriptions', 'matcher')) === subs[0], `shard 0's leader holds ${subs[0]} subscriptions`, 10_000);
    await eventually(async () => (await metricOf(leader1, 'ambit_subscriptions', 'matcher')) === subs[1], `shard 1 holds ${subs[1]} subscriptions`, 10_000);
    await eventually(async () => (await metricOf(leader2, 'ambit_subscriptions', 'matcher')) === subs[2], `the wide shard holds ${subs[2]} subscriptions`, 10_000);

    // Both rounds' events again (new ids), through both gateways: exact reach and recipients.
    const expected = new Map<string, { id: string; subs: string[] }[]>(DEVICES.map((dev) => [dev.name, Array.from({ length: published }, (_, i) => ({ id: `move-${i}`, subs: ['move'] }))]));
    for (const ev of [...ROUND_1_EVENTS, ...ROUND_2_EVENTS].map((e) => ({ ...e, seq: 100 + e.seq }))) {
      let reached = 0;
      for (const dev of DEVICES) {
        const m = matching(dev, positions[dev.name], ev);
        reached += m.length;
        if (m.length > 0) expected.get(dev.name)!.push({ id: `ev-${ev.seq}`, subs: m });
      }
      const res = await publish(ev.seq % 2 === 0 ? ca : cb, eventOf(ev));
      assert.equal(res.eventId, `ev-${ev.seq}`);
      assert.equal(res.reached, BigInt(reached), `reached of ev-${ev.seq} after the move`);
    }
    for (const dev of moved) assert.ok(expected.get(dev.name)!.some((e) => e.id.startsWith('ev-')), `${dev.name} expects an event on its new shard`);
    for (const dev of DEVICES) {
      const stream = streams.get(dev.name)!;
      await expectExactly(stream, dev.name, expected.get(dev.name)!, 15_000, `${dev.name} (shard ${before[dev.name]} then ${after[dev.name]}, on gateway ${dev.gateway}): every event that matches it once, in publish order`);
      // Nothing twice, nothing more: the next notification is its own next marker.
      await stream.expectNextNotification(`mk-${dev.name}-3`, async () => {
        assert.equal((await publish(dev.gateway === 'A' ? cb : ca, markerFor(dev.name, 3))).reached, 1n, `only ${dev.name}'s marker subscription matches`);
      }, 10_000);
    }
  });

  it('a process with other AMBIT_GEO_* settings on the same prefix refuses to start with the layout error', async () => {
    const refused = async (role: string, more: Record<string, string>, message: string) => {
      await assert.rejects(startAmbit(env(role, more), [], 30_000), (err: Error) => {
        assert.match(err.message, /exited \(1\) before the expected log line/, err.message);
        assert.ok(err.message.includes(message), `${role} ${JSON.stringify(more)}: ${err.message}`);
        return true;
      });
    };
    const mine = (o: Partial<GeoSpec>) => {
      const g = { ...GEO, ...o };
      return `single geo=${g.shards}+${g.wide} cell=${g.cellDeg} guard=${g.guardM} ${g.layout}`;
    };
    await refused('gateway', { AMBIT_GEO_CELL_DEG: '0.01' }, layoutError('redis hub', prefix, STORED_LAYOUT, mine({ cellDeg: 0.01 })));
    await refused('gateway', { AMBIT_GEO_WIDE_SHARDS: '2' }, layoutError('redis hub', prefix, STORED_LAYOUT, mine({ wide: 2 })));
    await refused('matcher', { AMBIT_MATCHER_PARTITION: '0', AMBIT_GEO_LAYOUT: 'sectors' }, layoutError('redis matcher', prefix, STORED_LAYOUT, mine({ layout: 'sectors' })));
    await refused('matcher', { AMBIT_MATCHER_PARTITION: '1', AMBIT_GEO_GUARD_M: '50' }, layoutError('redis matcher', prefix, STORED_LAYOUT, mine({ guardM: 50 })));
    // Without sharding by space at all.
    const plain = { AMBIT_GEO_SHARDS: '', AMBIT_GEO_WIDE_SHARDS: '', AMBIT_GEO_CELL_DEG: '', AMBIT_GEO_GUARD_M: '', AMBIT_GEO_LAYOUT: '' };
    await refused('gateway', plain, layoutError('redis hub', prefix, STORED_LAYOUT, 'single'));
    // The record is unchanged and the deployment still serves.
    assert.equal(await inspect((r) => r.get(`${prefix}layout`)), STORED_LAYOUT);
    assert.equal((await publish(cb, phaseEvent('after', 0))).reached, 0n);
    assert.equal((await publish(ca, markerFor(DEVICES[0].name, 2))).reached, 1n);
  });

  it('every process wrote only JSON log lines to stdout, none at error level', () => {
    assert.equal(processes.length, 6, 'four matchers (one killed) and two gateways');
    for (const p of processes) {
      assert.deepEqual(p.logs.filter((l) => 'nonJson' in l), [], 'stdout is the JSON log stream');
      assert.deepEqual(p.logs.filter((l) => typeof l.level === 'number' && l.level >= 50), [], 'no error logs');
    }
  });
});
