/**
 * A seeded world for sharding by space: devices that walk across shard borders around Milan, with
 * anchored subscriptions and, for some, a wide one that comes and goes; publishes between the
 * moves; the reference engine as the oracle of every publish's reach and every device's
 * notifications. `runGeoWorld` drives any set of Redis hubs (gateways) of one deployment in one
 * total order (each step awaited), so the oracle's order is the deployment's.
 */
import assert from 'node:assert/strict';
import { CPU_ENGINES } from '../../src/engines/index.js';
import type { DeviceHandle } from '../../src/engines/matcher.js';
import type { Event, Filter } from '../../src/model/types.js';
import { Prng } from '../../src/workload/prng.js';
import { type DeviceSubscription, type Hub, type LocationWriter, subscriptionKey, ENGINE_SIDE_LIMITS } from '../../services/hub/port.js';
import type { RedisHub } from '../../services/hub/redis.js';
import { pullOnce } from './hub-contract.js';

const MILAN = { lat: 45.4642, lon: 9.19 };
const M_PER_DEG = 111_195;
const COS = Math.cos((MILAN.lat * Math.PI) / 180);
const at = (eastM: number, northM: number) => ({ lat: MILAN.lat + northM / M_PER_DEG, lon: MILAN.lon + eastM / (M_PER_DEG * COS) });
/** The world is a square of 2 × HALF_M metres around Milan's centre. */
const HALF_M = 1500;

export interface GeoWorldOptions {
  seed: number;
  devices: number;
  rounds: number;
  eventsPerRound: number;
  /**
   * Radii no larger than this (metres; default 1500: anchored areas of 50-950 m and some of 1500 m,
   * events up to 300 m). A small one keeps each publish to a shard or two of a coarse map.
   */
  maxRadiusM?: number;
  /** From this round on every third device stands still (default: never). */
  standStillFrom?: number;
  /** Called at the start of each round, before the moves (e.g. to move cells while traffic flows). */
  onRound?: (round: number) => Promise<void> | void;
}

export interface GeoWorldResult {
  events: number;
  notifications: number;
  /** Devices that held a wide subscription at some point. */
  wideDevices: number;
}

interface Dev {
  id: string;
  hub: RedisHub;
  writer: LocationWriter | null;
  east: number;
  north: number;
  subs: Map<string, DeviceSubscription>;
  handle: DeviceHandle;
  expected: { eventId: string; subs: string[] }[];
}

const anchored = (radiusM: number, sevGt: number): Filter => ({ constraints: [{ name: 'sev', op: 'gt', value: sevGt }], area: { radiusM } });

/**
 * Runs the world on `hubs` (devices spread over them; even devices write through location writers,
 * odd ones through updateLocations) and checks every reach and, at the end, every device's
 * notifications, in order, against the oracle.
 */
export async function runGeoWorld(hubs: readonly RedisHub[], o: GeoWorldOptions): Promise<GeoWorldResult> {
  const rng = new Prng(o.seed);
  const oracle = CPU_ENGINES.reference({ limits: ENGINE_SIDE_LIMITS });
  const owners = new Map<string, [Dev, string]>();
  const devs: Dev[] = [];
  const put = async (d: Dev, s: DeviceSubscription) => {
    const had = d.subs.has(s.id);
    await (had ? d.hub.replaceSubscription(d.id, s) : d.hub.addSubscription(d.id, s));
    const key = subscriptionKey(d.id, s.id);
    const engineSub = { id: key, owner: d.id, filters: s.filters };
    if (had) oracle.replace(engineSub);
    else oracle.add(engineSub);
    owners.set(key, [d, s.id]);
    d.subs.set(s.id, s);
  };
  const drop = async (d: Dev, id: string) => {
    await d.hub.removeSubscription(d.id, id);
    oracle.remove(subscriptionKey(d.id, id));
    d.subs.delete(id);
  };
  const cap = o.maxRadiusM ?? 1500;
  let wideDevices = 0;
  for (let i = 0; i < o.devices; i++) {
    const id = `geo-${o.seed}-${i}`;
    const hub = hubs[i % hubs.length];
    const d: Dev = { id, hub, writer: i % 2 === 0 ? hub.locationWriter(id) : null, east: rng.float() * 2 * HALF_M - HALF_M, north: rng.float() * 2 * HALF_M - HALF_M, subs: new Map(), handle: oracle.openDevice(id), expected: [] };
    devs.push(d);
    // The ping: only the device's own final event, at its final position, matches it.
    await put(d, { id: 'ping', filters: [{ constraints: [{ name: 'ping', op: 'eq', value: id }], area: { radiusM: 1 } }] });
    await put(d, { id: 'near', filters: [anchored(Math.min(cap, 100 + rng.int(0, 600)), rng.int(0, 3))] });
    if (rng.chance(0.3) && cap >= 1500) await put(d, { id: 'far', filters: [anchored(1500, 3)] });
  }
  const move = async (round: number) => {
    for (let i = 0; i < devs.length; i++) {
      const d = devs[i];
      if (!rng.chance(0.8) || (o.standStillFrom !== undefined && round >= o.standStillFrom && i % 3 === 0)) continue;
      const step = rng.float() * 250;
      const a = rng.float() * 2 * Math.PI;
      d.east = Math.max(-HALF_M, Math.min(HALF_M, d.east + step * Math.cos(a)));
      d.north = Math.max(-HALF_M, Math.min(HALF_M, d.north + step * Math.sin(a)));
      const p = at(d.east, d.north);
      d.handle.update(p.lat, p.lon);
      if (d.writer !== null) d.writer.update(p.lat, p.lon);
      else await d.hub.updateLocations([{ device: d.id, lat: p.lat, lon: p.lon }]);
    }
    await Promise.all(hubs.map((h) => h.flush()));
  };
  let events = 0;
  let notifications = 0;
  const publish = async (hub: Hub, evs: Event[]) => {
    const results = await hub.publish(evs);
    for (let j = 0; j < evs.length; j++) {
      const keys = await oracle.match(evs[j]);
      const byDevice = new Map<Dev, string[]>();
      for (const k of keys) {
        const [d, sid] = owners.get(k)!;
        let list = byDevice.get(d);
        if (list === undefined) byDevice.set(d, (list = []));
        list.push(sid);
      }
      for (const [d, sids] of byDevice) d.expected.push({ eventId: evs[j].id, subs: sids.sort() });
      assert.equal(results[j].reached, keys.length, `event ${evs[j].id} at ${evs[j].lat},${evs[j].lon} r=${evs[j].radiusM ?? 0}: reached`);
      assert.ok(results[j].duplicate !== true, `event ${evs[j].id} is not a duplicate`);
      notifications += byDevice.size;
    }
    events += evs.length;
  };
  for (let round = 0; round < o.rounds; round++) {
    await o.onRound?.(round);
    await move(round);
    if (round % 4 === 1) {
      // Some devices take or drop a wide subscription (a fixed area): they move to their wide
      // shard and back. Others change their anchored radius.
      for (const d of devs) {
        if (rng.chance(0.15)) {
          if (d.subs.has('city')) await drop(d, 'city');
          else {
            wideDevices++;
            await put(d, { id: 'city', filters: [{ constraints: [{ name: 'sev', op: 'ge', value: 4 }], area: { radiusM: 800, center: at(rng.float() * 2000 - 1000, rng.float() * 2000 - 1000) } }] });
          }
        } else if (rng.chance(0.1)) await put(d, { id: 'near', filters: [anchored(Math.min(cap, 50 + rng.int(0, 900)), rng.int(0, 3))] });
      }
    }
    const evs: Event[] = [];
    for (let j = 0; j < o.eventsPerRound; j++) {
      // Half of the events fall near a device (within 250 m), the rest anywhere in the world.
      const near = rng.chance(0.5) ? devs[rng.int(0, devs.length - 1)] : null;
      const p = near === null ? at(rng.float() * 2 * HALF_M - HALF_M, rng.float() * 2 * HALF_M - HALF_M) : at(near.east + rng.float() * 500 - 250, near.north + rng.float() * 500 - 250);
      const e: Event = { id: `ev-${o.seed}-${round}-${j}`, lat: p.lat, lon: p.lon, attributes: { sev: rng.int(0, 5) } };
      if (rng.chance(0.3)) e.radiusM = rng.int(1, Math.min(cap, 300));
      evs.push(e);
    }
    await publish(hubs[round % hubs.length], evs);
  }
  // Every device's notifications, in order: up to its ping.
  for (const d of devs) {
    const p = at(d.east, d.north);
    const ping: Event = { id: `ping-${d.id}`, lat: p.lat, lon: p.lon, attributes: { ping: d.id } };
    await publish(d.hub, [ping]);
    const inbox = await d.hub.openInbox(d.id, '');
    const got: { eventId: string; subs: string[] }[] = [];
    try {
      for (;;) {
        const batch = await pullOnce(inbox, 100);
        assert.ok(batch.length > 0, `inbox of ${d.id} ended before its ping`);
        const stop = batch.findIndex((n) => n.event.id === ping.id);
        for (const n of stop < 0 ? batch : batch.slice(0, stop + 1)) got.push({ eventId: n.event.id, subs: [...n.subscriptionIds].sort() });
        if (stop >= 0) break;
      }
    } finally {
      inbox.close();
    }
    assert.deepEqual(got, d.expected, `notifications of ${d.id}`);
    await d.writer?.close();
  }
  return { events, notifications, wideDevices };
}
