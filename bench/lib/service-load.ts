/**
 * The load of bench/service.ts, driven through the SDK over loopback gRPC against a child server:
 * (a) publish → notification latency at a fixed, open-loop publish rate with many subscriptions
 * held by connected devices; (b) location updates through device streams and through
 * UpdateLocations batches. Seeded: the same seed gives the same devices, subscriptions and events.
 */
import { create, toBinary } from '@bufbuild/protobuf';
import { SCOPES } from '../../services/edge/auth.js';
import { UpdateLocationsRequestSchema } from '../../api/gen/ambit/v1/device_pb.js';
import { AmbitDevice, AmbitFleet, AmbitPublisher, type DeviceOptions, type Subscription } from '../../sdk/index.js';
import { Prng } from '../../src/workload/prng.js';
import { RandomWaypoint } from '../../src/workload/mobility.js';
import { makeRegion } from '../../src/workload/region.js';
import { note } from './progress.js';
import type { ChildServer } from './service-server.js';
import { sinkNumber } from './sink.js';
import { type Summary, summarize } from './stats.js';

const M_PER_DEG = 111_195;

export interface Window {
  seconds: number;
  serverCpuSeconds: number;
  clientCpuSeconds: number;
}

function clientCpu(): number {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1e6;
}

function openWindow(server: ChildServer): () => Window {
  const t = performance.now();
  const s = server.cpuSeconds();
  const c = clientCpu();
  return () => ({ seconds: (performance.now() - t) / 1000, serverCpuSeconds: server.cpuSeconds() - s, clientCpuSeconds: clientCpu() - c });
}

export function positions(n: number, rng: Prng, cities = 1): { lat: Float64Array; lon: Float64Array } {
  const r = makeRegion('milan');
  const lat = new Float64Array(n);
  const lon = new Float64Array(n);
  for (let i = 0; i < n; i++) {
    lat[i] = r.minLat + rng.float() * (r.maxLat - r.minLat);
    // With several cities, device i lives in city i mod cities: Milan's square, 1° further east each.
    lon[i] = r.minLon + rng.float() * (r.maxLon - r.minLon) + (i % cities);
  }
  return { lat, lon };
}

/** Devices spread over `connections` HTTP/2 connections (grpc-js shares one per distinct option set). */
export function deviceOptions(i: number, connections: number): DeviceOptions {
  return { channelOptions: { 'ambit-bench.connection': i % connections }, backoff: { initialMs: 100, maxMs: 2000 }, maxBufferedNotifications: 100_000 };
}

async function connectAll(server: ChildServer, ids: readonly string[], connections: number, setup: (d: AmbitDevice, i: number) => Promise<void>): Promise<AmbitDevice[]> {
  const out: AmbitDevice[] = new Array(ids.length);
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(100, ids.length) }, async () => {
      for (let i = next++; i < ids.length; i = next++) {
        const token = server.authority.issue({ subject: ids[i], scopes: [SCOPES.device], ttlSeconds: 3600 });
        out[i] = await AmbitDevice.connect(server.address, token, deviceOptions(i, connections));
        await setup(out[i], i);
      }
    }),
  );
  return out;
}

/** Places devices with UpdateLocations (a `location:any` token), 10 000 per message. */
export async function place(server: ChildServer, ids: readonly string[], lat: Float64Array, lon: Float64Array): Promise<void> {
  const fleet = new AmbitFleet(server.address, server.authority.issue({ subject: 'bench-fleet', scopes: [SCOPES.device, SCOPES.locationAny] }));
  await fleet.updateLocations(
    ids.map((deviceId, i) => ({ deviceId, lat: lat[i], lon: lon[i] })),
    { batchSize: 10_000 },
  );
  fleet.close();
}

// ---- (a) publish → notification latency ----

export interface LatencyParams {
  devices: number;
  subscriptionsPerDevice: number;
  /** Events per second, open loop. */
  rate: number;
  warmupSeconds: number;
  seconds: number;
  connections: number;
  /** Distinct event kinds: a subscription wants one, an event has one (fewer kinds, more notifications per event). */
  kinds: number;
  seed: number;
}

/** 'stream': one long-lived BulkPublish stream (PublishStream); 'unary': one Publish call per event. */
export type PublishMode = 'stream' | 'unary';

export interface LatencyResult {
  publish: PublishMode;
  eventsSent: number;
  eventsPublished: number;
  publishErrors: number;
  eventsPerSecond: number;
  notifications: number;
  notificationsPerSecond: number;
  /** Subscriptions reached per event. */
  avgReached: number;
  /** Notifications (devices reached) per event. */
  notificationsPerEvent: number;
  /** Seconds after the last publish until every stored notification had reached its device. */
  drainSeconds: number;
  /** publish() call → notification at the device, per notification, ms. */
  latencyMs: Summary;
  /** From the event's scheduled send time (counts client lag too: no coordinated omission), ms. */
  latencyFromScheduleMs: Summary;
  /** Publish call → its reply, ms (unary only). */
  publishRpcMs: Summary | null;
  window: Window;
  serverRssBytes: number;
}

/** Connected devices holding the subscriptions, with one consumer each feeding `onNotification`. */
export interface Subscribers {
  devices: AmbitDevice[];
  lat: Float64Array;
  lon: Float64Array;
  subscriptions: number;
  setupSeconds: number;
  onNotification: ((eventId: string, now: number) => void) | null;
}

/** Subscriptions of one device: one kind of `kinds`, a minimum level 1–5, a circle of 200–1000 m around the device. */
export function subscriptionsOf(rng: Prng, n: number, kinds: number): Subscription[] {
  const out: Subscription[] = [];
  for (let j = 0; j < n; j++) {
    out.push({
      id: `s${j}`,
      filters: [{ constraints: [{ name: 'kind', op: 'eq', value: `k${rng.int(0, kinds - 1)}` }, { name: 'level', op: 'ge', value: rng.int(1, 5) }], area: { radiusM: 200 + rng.int(0, 800) } }],
    });
  }
  return out;
}

/**
 * `n` pattern subscriptions (docs/semantics.md §9) of one device: an event of one kind within
 * 200-1000 m of the device, after the last event of another kind and the same level within 500 m
 * of it at most 2 s before. Both steps follow the device, so each event reaches only the patterns
 * of devices near it.
 */
export function patternsOf(rng: Prng, n: number, kinds: number): Subscription[] {
  const out: Subscription[] = [];
  for (let j = 0; j < n; j++) {
    const kind = (k: number) => ({ name: 'kind', op: 'eq' as const, value: `k${k}` });
    out.push({
      id: `p${j}`,
      filters: [],
      pattern: {
        steps: [
          { name: 'then', filter: { constraints: [kind(rng.int(0, kinds - 1))], area: { radiusM: 200 + rng.int(0, 800) } } },
          { name: 'first', filter: { constraints: [kind(rng.int(0, kinds - 1))], area: { radiusM: 500 } }, selection: 'last', withinMs: 2000 },
        ],
        parameters: [{ left: { step: 'then', attribute: 'level' }, op: 'eq', right: { step: 'first', attribute: 'level' } }],
      },
    });
  }
  return out;
}

/** Places the devices (UpdateLocations), connects them and creates their subscriptions through their streams. */
export async function setupSubscribers(server: ChildServer, p: LatencyParams): Promise<Subscribers> {
  const rng = new Prng(p.seed, 11);
  const ids = Array.from({ length: p.devices }, (_, i) => `sub-${i}`);
  const { lat, lon } = positions(p.devices, rng);
  const t0 = performance.now();
  await place(server, ids, lat, lon);
  let subscribed = 0;
  let lastNote = performance.now();
  const devices = await connectAll(server, ids, p.connections, async (d) => {
    await Promise.all(subscriptionsOf(rng, p.subscriptionsPerDevice, p.kinds).map((s) => d.subscribe(s)));
    subscribed += p.subscriptionsPerDevice;
    if (performance.now() - lastNote > 2000) {
      lastNote = performance.now();
      note(`  subscriptions: ${subscribed}/${p.devices * p.subscriptionsPerDevice}`);
    }
  });
  const subs: Subscribers = { devices, lat, lon, subscriptions: (await server.ops.stats()).subscriptions, setupSeconds: (performance.now() - t0) / 1000, onNotification: null };
  for (const d of devices) {
    void (async () => {
      for await (const n of d.notifications()) subs.onNotification?.(n.event.id, performance.now());
    })();
  }
  note(`  ${subs.subscriptions} subscriptions on ${p.devices} connected devices in ${subs.setupSeconds.toFixed(1)} s`);
  return subs;
}

export async function runLatency(server: ChildServer, subs: Subscribers, p: LatencyParams, mode: PublishMode): Promise<LatencyResult> {
  note(`  ${mode}: publishing ${p.rate}/s for ${p.warmupSeconds} s warm-up + ${p.seconds} s`);
  const { lat, lon } = subs;
  const warm = Math.round(p.rate * p.warmupSeconds);
  const total = warm + Math.round(p.rate * p.seconds);
  const sent = new Float64Array(total);
  const scheduled = new Float64Array(total);
  const latency: number[] = [];
  const fromSchedule: number[] = [];
  const rpc: number[] = [];
  let notifications = 0;
  let reached = 0;
  let replies = 0;
  let errors = 0;
  const prefix = `${mode}-`;
  let received = 0;
  const stored0 = (await server.ops.stats()).notifications;
  subs.onNotification = (id, now) => {
    if (!id.startsWith(prefix)) return;
    received++;
    const i = Number(id.slice(prefix.length));
    if (i >= warm && i < total) {
      notifications++;
      latency.push(now - sent[i]);
      fromSchedule.push(now - scheduled[i]);
    }
  };

  const publisher = new AmbitPublisher(server.address, server.authority.issue({ subject: 'bench-publisher', scopes: [SCOPES.publish], ttlSeconds: 3600 }));
  const stream = mode === 'stream' ? await publisher.stream() : null;
  const events = new Prng(p.seed, mode === 'stream' ? 12 : 13);
  let closeWindow: (() => Window) | null = null;
  await new Promise<void>((resolve, reject) => {
    const start = performance.now();
    let i = 0;
    const settle = () => {
      if (replies + errors === total) resolve();
    };
    const send = (k: number) => {
      const d = events.int(0, p.devices - 1);
      const r = events.float() * 300;
      const a = events.float() * 2 * Math.PI;
      const ev = {
        id: `${prefix}${k}`,
        lat: lat[d] + (r * Math.cos(a)) / M_PER_DEG,
        lon: lon[d] + (r * Math.sin(a)) / (M_PER_DEG * Math.cos((lat[d] * Math.PI) / 180)),
        attributes: { kind: `k${events.int(0, p.kinds - 1)}`, level: events.int(1, 5) },
      };
      scheduled[k] = start + (k * 1000) / p.rate;
      const t = performance.now();
      sent[k] = t;
      if (stream !== null) {
        stream.publish(ev);
        return;
      }
      publisher.publish(ev).then(
        (res) => {
          replies++;
          if (k >= warm) {
            rpc.push(performance.now() - t);
            reached += res.reached;
          }
          settle();
        },
        () => {
          errors++;
          settle();
        },
      );
    };
    // Open loop: every millisecond, send what the schedule says is due.
    const timer = setInterval(() => {
      const due = Math.min(total, Math.floor(((performance.now() - start) * p.rate) / 1000) + 1);
      while (i < due) {
        if (i === warm) closeWindow = openWindow(server);
        send(i++);
      }
      if (i === total) {
        clearInterval(timer);
        if (stream !== null) {
          stream.end().then((res) => {
            replies = res.accepted;
            errors = total - res.accepted;
            reached = res.reached; // includes the warm-up events
            resolve();
          }, reject);
        }
      }
    }, 1);
  });
  const window = closeWindow!();
  // Every notification the server stored must reach its device before the next phase starts.
  const drainStart = performance.now();
  for (;;) {
    const stored = (await server.ops.stats()).notifications - stored0;
    if (received >= stored || performance.now() - drainStart > 60_000) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  const drainSeconds = (performance.now() - drainStart) / 1000;
  subs.onNotification = null;
  publisher.close();
  const published = stream !== null ? replies - warm : rpc.length;
  return {
    publish: mode,
    eventsSent: total - warm,
    eventsPublished: published,
    publishErrors: errors,
    eventsPerSecond: published / window.seconds,
    notifications,
    notificationsPerSecond: notifications / window.seconds,
    avgReached: stream !== null ? reached / Math.max(1, replies) : reached / Math.max(1, rpc.length),
    notificationsPerEvent: notifications / Math.max(1, total - warm),
    drainSeconds,
    latencyMs: summarize(latency),
    latencyFromScheduleMs: summarize(fromSchedule),
    publishRpcMs: stream !== null ? null : summarize(rpc),
    window,
    serverRssBytes: server.rssBytes(),
  };
}

// ---- (b) location updates ----

export interface StreamParams {
  devices: number;
  connections: number;
  rounds: number;
  seconds: number;
  seed: number;
}

export interface RateRound {
  updates: number;
  perSecond: number;
  /** Updates per second of server CPU time: the rate one fully busy server core would sustain. */
  perServerCoreSecond: number;
  window: Window;
}

export interface RateResult {
  rounds: RateRound[];
  perSecond: Summary;
  perServerCoreSecond: Summary;
  /** Fraction of a core the server used. */
  serverCores: Summary;
  clientCores: Summary;
}

function rateResult(rounds: RateRound[]): RateResult {
  return {
    rounds,
    perSecond: summarize(rounds.map((r) => r.perSecond)),
    perServerCoreSecond: summarize(rounds.map((r) => r.perServerCoreSecond)),
    serverCores: summarize(rounds.map((r) => r.window.serverCpuSeconds / r.window.seconds)),
    clientCores: summarize(rounds.map((r) => r.window.clientCpuSeconds / r.window.seconds)),
  };
}

const DEMO_SUBS: Subscription[] = [
  { id: 'accidents', filters: [{ constraints: [{ name: 'type', op: 'eq', value: 'accident' }, { name: 'severity', op: 'gt', value: 2 }], area: { radiusM: 500 } }] },
  { id: 'deals', filters: [{ constraints: [{ name: 'type', op: 'eq', value: 'deal' }, { name: 'price', op: 'lt', value: 50 }], area: { radiusM: 1000 } }] },
];

/**
 * Device streams: every device moves by random waypoint and calls updateLocation on every turn of
 * the event loop; the SDK coalesces (one message in flight per device). The count is the server's
 * (GetStats location_updates), not the calls made.
 */
export async function runStreams(server: ChildServer, p: StreamParams): Promise<RateResult & { calls: number; devices: number }> {
  const rng = new Prng(p.seed, 21);
  const ids = Array.from({ length: p.devices }, (_, i) => `mover-${i}`);
  const { lat, lon } = positions(p.devices, rng);
  const devices = await connectAll(server, ids, p.connections, async (d, i) => {
    d.updateLocation(lat[i], lon[i]);
    await Promise.all(DEMO_SUBS.map((s) => d.subscribe(s)));
  });
  const walk = new RandomWaypoint(
    ids.map((id, i) => ({ id, lat: lat[i], lon: lon[i] })),
    { seed: p.seed, dtS: 0.05, order: 'sweep' },
  );
  const n = p.devices;
  let calls = 0;
  const rounds: RateRound[] = [];
  // Round -1 is a warm-up and not recorded.
  for (let r = -1; r < p.rounds; r++) {
    const s0 = (await server.ops.stats()).locationUpdates;
    const close = openWindow(server);
    const end = performance.now() + p.seconds * 1000;
    while (performance.now() < end) {
      for (let i = 0; i < n; i++) {
        walk.advance(i);
        devices[i].updateLocation(walk.lat[i], walk.lon[i]);
      }
      calls += n;
      await new Promise((resolve) => setImmediate(resolve));
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
    const window = close();
    const updates = (await server.ops.stats()).locationUpdates - s0;
    if (r < 0) continue;
    rounds.push({ updates, perSecond: updates / window.seconds, perServerCoreSecond: updates / window.serverCpuSeconds, window });
    note(`  streams round ${r + 1}/${p.rounds}: ${Math.round(updates / window.seconds).toLocaleString('en-US')} updates/s, server ${(window.serverCpuSeconds / window.seconds).toFixed(2)} cores, client ${(window.clientCpuSeconds / window.seconds).toFixed(2)} cores`);
  }
  let coalesced = 0;
  for (const d of devices) coalesced += d.stats.locationsCoalesced;
  sinkNumber(coalesced);
  await Promise.all(devices.map((d) => d.close()));
  return { ...rateResult(rounds), calls, devices: n };
}

export interface BatchParams {
  /** Distinct devices the batches cover. */
  devices: number;
  /** Updates per UpdateLocations message (≤ 10 000). */
  batch: number;
  /** Concurrent client streams. */
  streams: number;
  rounds: number;
  seconds: number;
  seed: number;
}

/**
 * UpdateLocations with a `location:any` token: messages are encoded before timing (what is measured
 * is the server), then written back to back on `streams` client streams with flow control.
 */
export async function runBatches(server: ChildServer, p: BatchParams): Promise<RateResult> {
  const rng = new Prng(p.seed, 31);
  const ids = Array.from({ length: p.devices }, (_, i) => `fleet-${i}`);
  const { lat, lon } = positions(p.devices, rng);
  const walk = new RandomWaypoint(
    ids.map((id, i) => ({ id, lat: lat[i], lon: lon[i] })),
    { seed: p.seed, dtS: 1, order: 'sweep' },
  );
  // Two steps of every device, as ready messages.
  const messages: Buffer[] = [];
  for (let step = 0; step < 2; step++) {
    for (let from = 0; from < p.devices; from += p.batch) {
      const updates = [];
      for (let i = from; i < Math.min(p.devices, from + p.batch); i++) {
        walk.advance(i);
        updates.push({ deviceId: ids[i], location: { lat: walk.lat[i], lon: walk.lon[i] } });
      }
      const bytes = toBinary(UpdateLocationsRequestSchema, create(UpdateLocationsRequestSchema, { updates }));
      messages.push(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength));
    }
  }
  // One connection per stream, so a node of several gateway processes spreads them (its
  // supervisor hands out connections, not streams).
  const token = server.authority.issue({ subject: 'bench-fleet', scopes: [SCOPES.device, SCOPES.locationAny], ttlSeconds: 3600 });
  const fleets = Array.from({ length: p.streams }, (_, s) => new AmbitFleet(server.address, token, { channelOptions: { 'ambit-bench.connection': s } }));
  const rounds: RateRound[] = [];
  // Round -1 is a warm-up and not recorded.
  for (let r = -1; r < p.rounds; r++) {
    const close = openWindow(server);
    const end = performance.now() + p.seconds * 1000;
    let k = r + 1;
    const accepted = await Promise.all(
      fleets.map((fleet) =>
        fleet.updateLocationsEncoded(
          (function* () {
            while (performance.now() < end) yield messages[k++ % messages.length];
          })(),
        ),
      ),
    );
    const window = close();
    const updates = accepted.reduce((a, b) => a + b, 0);
    if (r < 0) continue;
    rounds.push({ updates, perSecond: updates / window.seconds, perServerCoreSecond: updates / window.serverCpuSeconds, window });
    note(`  batches round ${r + 1}/${p.rounds}: ${Math.round(updates / window.seconds).toLocaleString('en-US')} updates/s, server ${(window.serverCpuSeconds / window.seconds).toFixed(2)} cores, client ${(window.clientCpuSeconds / window.seconds).toFixed(2)} cores`);
  }
  for (const f of fleets) f.close();
  return rateResult(rounds);
}
