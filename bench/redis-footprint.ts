/**
 * What a Redis deployment keeps per subscription, per device position, per stored notification and
 * per device's delivery state, in Redis's own memory (`INFO memory` used_memory before and after
 * each step, on a redis-server the run starts), and what the matcher's engine holds per filter:
 * the per-item figures docs/scaling.md builds its model on. A benchmark, not a test.
 *
 * Steps, through the real gateway and matcher code (RedisHub, RedisMatcher, fast engine):
 *   1. N devices each subscribe S times (one anchored filter of 2-3 constraints each);
 *   2. each device reports a position;
 *   3. E events are published, each reaching about R devices; the notifications stay stored;
 *   4. every device opens its inbox and acknowledges what it has (the ack point is stored).
 *
 * Redis preallocates a stream's first node (`stream-node-max-bytes`, 4096 by default), so a device's
 * first notification costs a node and later ones fill it: --stream-node-max-bytes sets the server's
 * value for the run (docs/service.md recommends 512).
 *
 *   node dist/bench/redis-footprint.js [--devices 20000] [--subs-per-device 5] [--events 2000] [--reach 10] [--stream-node-max-bytes 4096] [--out FILE]
 */
import os from 'node:os';
import { Redis } from 'ioredis';
import { CPU_ENGINES } from '../src/engines/index.js';
import { Prng } from '../src/workload/prng.js';
import type { Constraint } from '../src/model/types.js';
import { ENGINE_SIDE_LIMITS } from '../services/hub/port.js';
import { RedisHub } from '../services/hub/redis.js';
import { RedisMatcher } from '../services/matcher/redis.js';
import { startRedisServer } from '../test/support/redis-server.js';
import { compareStreamIds } from '../services/redis/codec.js';
import { type Fail, cliFail, readCommandLine, runMain } from './lib/args.js';
import { describeMachine } from './lib/machine.js';
import { ResultRun } from './lib/result-file.js';

const HELP = `Usage: node dist/bench/redis-footprint.js [options]

  --devices N          devices (default 20000)
  --subs-per-device N  subscriptions per device (default 5)
  --events N           events published (default 2000)
  --reach N            devices an event reaches on average (default 10)
  --stream-node-max-bytes N  the redis-server's stream-node-max-bytes for the run (default 4096, Redis's own)
  --seed N             seed (default 1)
  --out PATH           result file (default bench/results/redis-footprint.json)
  --help`;

const fail: Fail = cliFail('redis-footprint', HELP);
const PREFIX = 'fp:';
const CENTER = { lat: 45.4642, lon: 9.19 };
const SPAN_DEG = 0.18;
const KINDS = ['accident', 'deal', 'concert', 'weather', 'traffic'];

async function usedMemory(r: Redis): Promise<number> {
  return Number(/used_memory:(\d+)/.exec(await r.info('memory'))?.[1]);
}

async function main(): Promise<void> {
  const cl = readCommandLine(process.argv.slice(2), new Set(['help']), new Set(['devices', 'subs-per-device', 'events', 'reach', 'seed', 'out', 'stream-node-max-bytes']), fail, HELP);
  if (cl === null) return;
  const { a, r } = cl;
  const devices = r.int('devices', 20_000, 10);
  const subsPerDevice = r.int('subs-per-device', 5, 1);
  const events = r.int('events', 2000, 1);
  const reach = r.int('reach', 10, 1);
  const seed = r.int('seed', 1, 0);
  const nodeBytes = r.int('stream-node-max-bytes', 4096, 0);
  const run = new ResultRun({ out: a.out, defaultFile: 'bench/results/redis-footprint.json', fail });
  process.stdout.write(`machine: ${describeMachine(run.machine)}\nparams: ${JSON.stringify({ devices, subsPerDevice, events, reach, seed, streamNodeMaxBytes: nodeBytes })}\n`);
  const server = await startRedisServer();
  const look = new Redis(server.url, { protocol: 2 });
  await look.config('SET', 'stream-node-max-bytes', String(nodeBytes));
  const rng = new Prng(seed);
  // A radius such that an event reaches about `reach` devices of the city.
  const areaM2 = (SPAN_DEG * 111_320) * (SPAN_DEG * 111_320 * Math.cos((CENTER.lat * Math.PI) / 180));
  const radiusM = Math.sqrt((reach * areaM2) / (devices * Math.PI));
  const matcher = await RedisMatcher.start({ redis: server.url, prefix: PREFIX, engine: CPU_ENGINES.fast({ limits: ENGINE_SIDE_LIMITS }), engineDetail: 'fast', readCount: 1024, statsMs: 200 });
  const hub = await RedisHub.connect({ redis: server.url, prefix: PREFIX, publishTimeoutMs: 120_000 });
  const ids = Array.from({ length: devices }, (_, i) => `device-${i.toString(36).padStart(6, '0')}`);
  const steps: Record<string, { items: number; bytes: number; bytesPerItem: number }> = {};
  // The command stream is emptied after each step (what stays is the stored state), once the
  // matcher has applied everything in it.
  const settle = async () => {
    const last = await look.xrevrange(hub.keys.in, '+', '-', 'COUNT', 1);
    if (last.length > 0) while (compareStreamIds(matcher.offset, last[0][0]) < 0) await new Promise((res) => setTimeout(res, 20));
    await look.xtrim(hub.keys.in, 'MAXLEN', 0);
  };
  const measure = async (name: string, items: number, f: () => Promise<void>) => {
    const before = await usedMemory(look);
    await f();
    const bytes = (await usedMemory(look)) - before;
    steps[name] = { items, bytes, bytesPerItem: bytes / items };
    process.stdout.write(`${name.padEnd(34)} ${String(items).padStart(9)} items  ${(bytes / items).toFixed(1).padStart(8)} B each\n`);
  };
  try {
    const base = await usedMemory(look);
    await measure('subscriptions (stored + command)', devices * subsPerDevice, async () => {
      for (let from = 0; from < devices; from += 500) {
        await Promise.all(
          ids.slice(from, from + 500).map(async (d) => {
            for (let s = 0; s < subsPerDevice; s++) {
              const constraints: Constraint[] = [{ name: 'kind', op: 'eq' as const, value: KINDS[rng.int(0, KINDS.length - 1)] }, { name: 'level', op: 'ge' as const, value: rng.int(0, 4) }];
              if (rng.float() < 0.5) constraints.push({ name: 'price', op: 'le' as const, value: rng.int(10, 99) });
              await hub.addSubscription(d, { id: `s${s}`, filters: [{ constraints, area: { radiusM: Math.round(radiusM) } }] });
            }
          }),
        );
      }
      // The command stream holds the subscriptions' commands until its cap trims them: what stays is the stored form.
      await settle();
    });
    await measure('positions', devices, async () => {
      for (let from = 0; from < devices; from += 5000) {
        await hub.updateLocations(ids.slice(from, from + 5000).map((device) => ({ device, lat: CENTER.lat - SPAN_DEG / 2 + rng.float() * SPAN_DEG, lon: CENTER.lon - SPAN_DEG / 2 + rng.float() * SPAN_DEG })));
      }
      await settle();
    });
    // Notifications: a first round gives most devices their stream and delivery state, a second
    // round adds entries to existing streams (the cost per notification at steady state).
    const storedNow = async () => (await Promise.all(ids.map((d) => look.xlen(hub.keys.notes(d))))).reduce((x, y) => x + y, 0);
    const publishRound = async (n: number) => {
      const before = await storedNow();
      for (let i = 0; i < n; i++) {
        await hub.publish([{ id: `e${rng.int(0, 2 ** 30)}-${i}`, lat: CENTER.lat - SPAN_DEG / 2 + rng.float() * SPAN_DEG, lon: CENTER.lon - SPAN_DEG / 2 + rng.float() * SPAN_DEG, attributes: { kind: KINDS[rng.int(0, KINDS.length - 1)], level: 4, price: 5 } }]);
      }
      await settle();
      return (await storedNow()) - before;
    };
    for (const [name, n] of [
      ['notifications, first round', events],
      ['notifications, later rounds', events * 9],
    ] as [string, number][]) {
      let stored = 0;
      // The measurement of the round includes counting what it stored (no memory of its own).
      await measure(name, 1, async () => {
        stored = await publishRound(n);
      });
      steps[name].items = stored;
      steps[name].bytesPerItem = steps[name].bytes / Math.max(1, stored);
      process.stdout.write(`  (${n} events, ${stored} notifications stored: ${steps[name].bytesPerItem.toFixed(1)} B each, with delivery states, stored events and event ids)\n`);
    }
    // What notifications cost per device: its stream (a node preallocated at its first entry) and
    // its entries, over both rounds.
    const lens = await Promise.all(ids.map((d) => look.xlen(hub.keys.notes(d))));
    const notifiedDevices = lens.filter((n) => n > 0).length;
    const storedNotifications = lens.reduce((a2, b2) => a2 + b2, 0);
    const notificationBytes = steps['notifications, first round'].bytes + steps['notifications, later rounds'].bytes;
    const perDevice = { notifiedDevices, storedNotifications, perNotifiedDevice: notificationBytes / notifiedDevices, notificationsPerDevice: storedNotifications / notifiedDevices };
    process.stdout.write(`notification storage: ${perDevice.perNotifiedDevice.toFixed(0)} B per notified device, ${perDevice.notificationsPerDevice.toFixed(1)} notifications each on average (${notifiedDevices} devices)\n`);
    await measure('ack points', devices, async () => {
      for (let from = 0; from < devices; from += 200) {
        await Promise.all(
          ids.slice(from, from + 200).map(async (d) => {
            if ((await look.xlen(hub.keys.notes(d))) === 0) return;
            const box = await hub.openInbox(d, null);
            const got = await box.pull(64);
            await box.ack(got[got.length - 1].deliveryId);
            box.close();
          }),
        );
      }
    });
    const stats = matcher.core.stats();
    const total = (await usedMemory(look)) - base;
    const engine = { filters: stats.filters, memoryBytes: stats.memoryBytes, bytesPerFilter: stats.memoryBytes / Math.max(1, stats.filters) };
    process.stdout.write(`matcher engine (fast): ${stats.filters} filters, ${engine.bytesPerFilter.toFixed(0)} B each (its own estimate)\nRedis in all: ${(total / 1e6).toFixed(1)} MB for ${devices} devices\n`);
    run.write({ schema: 'ambit-redis-footprint/1', createdAt: new Date().toISOString(), machine: run.machine, loadAverage: os.loadavg()[0], params: { devices, subsPerDevice, events, reach, seed, radiusM, streamNodeMaxBytes: nodeBytes }, steps, perDevice, engine, redisTotalBytes: total });
    process.stdout.write(`wrote ${run.shown}\n`);
  } finally {
    await hub.close();
    await matcher.stop();
    look.disconnect();
    await server.stop();
  }
}

runMain('redis-footprint', main);
