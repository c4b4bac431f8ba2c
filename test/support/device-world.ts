/**
 * The device world of the process tests of the Redis deployment (redis-cluster-processes and
 * matcher-partitions-processes): eight devices with their subscriptions, where they stand in two
 * rounds, the events of each round, the model of which of a device's subscriptions an event matches
 * (docs/semantics.md), and the events and subscriptions the tests publish and hold besides.
 * `deviceWorld(prefix, gateways)` names the devices `${prefix}-0` .. `${prefix}-7` and puts each on
 * the gateway its test gives it; the rest is the same for every test.
 */
import assert from 'node:assert/strict';
import { haversineM } from '../../src/model/geo.js';
import { type Notification, Op } from '../../api/gen/ambit/v1/types_pb.js';
import { type Clients, DeviceStream } from './grpc.js';

export const MILAN = { lat: 45.4642, lon: 9.19 };
const M_PER_DEG = 111_195;
/** A point `eastM` metres east and `northM` metres north of Milan's centre. */
export const at = (eastM: number, northM: number) => ({ lat: MILAN.lat + northM / M_PER_DEG, lon: MILAN.lon + eastM / (M_PER_DEG * Math.cos((MILAN.lat * Math.PI) / 180)) });
export type Point = ReturnType<typeof at>;
export const num = (v: number) => ({ kind: { case: 'number', value: v } });
export const text = (v: string) => ({ kind: { case: 'text', value: v } });

/** A subscription of the model: `sev > sevGt`, within `radiusM` of the device (null: anywhere). */
export interface Sub {
  id: string;
  radiusM: number | null;
  sevGt: number;
}
export type Gateway = 'A' | 'B';
export interface Dev {
  name: string;
  gateway: Gateway;
  subs: Sub[];
}
export interface Ev {
  seq: number;
  where: Point;
  sev: number;
}

/** Device i's subscriptions. */
const SUBS: Sub[][] = [
  [{ id: 'near', radiusM: 500, sevGt: 2 }, { id: 'severe', radiusM: 10_000, sevGt: 4 }],
  [{ id: 'near', radiusM: 1000, sevGt: 0 }],
  [{ id: 'near', radiusM: 300, sevGt: 0 }],
  [{ id: 'wide', radiusM: 5000, sevGt: 3 }],
  [{ id: 'any', radiusM: null, sevGt: 4 }],
  [{ id: 'near', radiusM: 800, sevGt: 1 }, { id: 'severe', radiusM: 10_000, sevGt: 4 }],
  [{ id: 'near', radiusM: 1500, sevGt: 2 }],
  [{ id: 'near', radiusM: 600, sevGt: 0 }],
];
/** Where device i is in round 1 (device 7 has no position yet, so its anchored areas admit nothing). */
const ROUND_1: [number, Point][] = [
  [0, at(0, 100)],
  [1, at(0, 450)],
  [2, at(0, 1000)],
  [3, at(0, 2200)],
  [4, at(0, -250)],
  [5, at(0, 5500)],
  [6, at(800, 0)],
];
/** The devices that move before round 2, in this order. */
const ROUND_2: [number, Point][] = [
  [7, at(0, 0)],
  [0, at(0, 8000)],
  [5, at(0, 300)],
  [2, at(-2000, 0)],
];

/**
 * The world's devices named `${prefix}-i`, device i on `gateways[i]`, with their positions of
 * round 1 and their moves before round 2, keyed by those names.
 */
export function deviceWorld(prefix: string, gateways: Gateway[]): { devices: Dev[]; round1Positions: Record<string, Point>; round2Moves: Record<string, Point> } {
  assert.equal(gateways.length, SUBS.length, 'a gateway for each device of the world');
  const name = (i: number) => `${prefix}-${i}`;
  return {
    devices: SUBS.map((subs, i) => ({ name: name(i), gateway: gateways[i], subs })),
    round1Positions: Object.fromEntries(ROUND_1.map(([i, p]) => [name(i), p])),
    round2Moves: Object.fromEntries(ROUND_2.map(([i, p]) => [name(i), p])),
  };
}

export const ROUND_1_EVENTS: Ev[] = [
  { seq: 1, where: at(0, 0), sev: 3 },
  { seq: 2, where: at(0, 1000), sev: 1 },
  { seq: 3, where: at(0, 2200), sev: 5 },
  { seq: 4, where: at(800, 0), sev: 2 },
  { seq: 5, where: at(0, 5500), sev: 4 },
  { seq: 6, where: at(0, -3000), sev: 5 },
];
export const ROUND_2_EVENTS: Ev[] = [
  { seq: 7, where: at(0, 0), sev: 2 },
  { seq: 8, where: at(0, 8000), sev: 5 },
  { seq: 9, where: at(0, 300), sev: 3 },
  { seq: 10, where: at(-2000, 100), sev: 1 },
  { seq: 11, where: at(0, 20_000), sev: 5 },
  { seq: 12, where: at(0, 0), sev: 0 },
];

/** No event lies this close to a subscription's boundary, so the expectation does not hang on rounding. */
export const MARGIN_M = 25;

/** The subscriptions of `dev` (at `pos`) that `ev` matches, by the rules of docs/semantics.md. */
export function matching(dev: Dev, pos: Point | undefined, ev: Ev): string[] {
  const ids: string[] = [];
  for (const s of dev.subs) {
    if (!(ev.sev > s.sevGt)) continue;
    if (s.radiusM !== null) {
      if (pos === undefined) continue;
      const d = haversineM(pos.lat, pos.lon, ev.where.lat, ev.where.lon);
      assert.ok(Math.abs(d - s.radiusM) >= MARGIN_M, `the test's world: ev-${ev.seq} is ${d.toFixed(1)} m from ${dev.name}, too close to ${s.id}'s ${s.radiusM} m`);
      if (d > s.radiusM) continue;
    }
    ids.push(s.id);
  }
  return ids.sort();
}

export const eventOf = (ev: Ev) => ({ id: `ev-${ev.seq}`, position: ev.where, attributes: { sev: num(ev.sev), seq: num(ev.seq) } });
/** An event only `device`'s marker subscription matches. */
export const markerFor = (device: string, n = 0) => ({ id: `mk-${device}-${n}`, position: MILAN, attributes: { to: text(device) } });
/** `device`'s marker subscription: only its markers match it. */
export const markerSub = (device: string) => ({ id: 'mk', filters: [{ constraints: [{ name: 'to', op: Op.EQ, value: text(device) }] }] });
/** An event of one phase: only subscriptions to that phase match it. */
export const phaseEvent = (phase: string, i: number) => ({ id: `${phase}-${i}`, position: MILAN, attributes: { phase: text(phase), seq: num(i) } });
/** A subscription to one phase's events, named `id` (the phase by default). */
export const phaseSub = (phase: string, id = phase) => ({ id, filters: [{ constraints: [{ name: 'phase', op: Op.EQ, value: text(phase) }] }] });
/** The `seq` attribute of a notification's event. */
export const seqOf = (n: Notification) => n.event!.attributes.seq.kind.value as number;

/**
 * Opens every device's stream on its gateway (a new device: nothing missed) and subscribes its
 * marker (`marker`, default `markerSub`) and its subscriptions of the model; the streams by device name.
 */
export async function openDevices(
  devices: readonly Dev[],
  clientsOf: (gateway: Gateway) => Clients,
  token: (device: string) => string,
  marker: (device: string) => ReturnType<typeof markerSub> = markerSub,
): Promise<Map<string, DeviceStream>> {
  const streams = new Map<string, DeviceStream>();
  for (const dev of devices) {
    const { stream, welcome } = await DeviceStream.open(clientsOf(dev.gateway), token(dev.name));
    assert.equal(welcome.missed, 0n, dev.name);
    streams.set(dev.name, stream);
    await stream.subscribeOk(marker(dev.name));
    for (const s of dev.subs) {
      const constraints = [{ name: 'sev', op: Op.GT, value: num(s.sevGt) }];
      await stream.subscribeOk({ id: s.id, filters: [s.radiusM === null ? { constraints } : { constraints, area: { radiusM: s.radiusM } }] });
    }
  }
  return streams;
}

/** Moves each named device on its stream and records where it is; resolves once the moves are applied. */
export async function moveDevices(streams: ReadonlyMap<string, DeviceStream>, positions: Record<string, Point>, moves: Record<string, Point>): Promise<void> {
  for (const [name, p] of Object.entries(moves)) {
    streams.get(name)!.move(p.lat, p.lon);
    positions[name] = p;
  }
  for (const name of Object.keys(moves)) await streams.get(name)!.sync();
}
