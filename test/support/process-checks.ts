/**
 * Checks the process tests of a Redis deployment share (matcher-partitions-processes,
 * geo-shards-processes): a matcher's "leading" log line, the exact layout error, one value of a
 * process's /metrics, delivery ids in order, and a look at the redis-server itself.
 */
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import type { Notification } from '../../api/gen/ambit/v1/types_pb.js';
import type { DeviceStream } from './grpc.js';
import type { AmbitProcess } from './processes.js';

export const leading = (l: Record<string, unknown>) => l.component === 'matcher' && typeof l.msg === 'string' && l.msg.includes('leading (lease epoch');

/** The exact error a process of layout `mine` gets on a deployment recorded as `stored` (layout.ts checkLayout). */
export const layoutError = (component: string, prefix: string, stored: string, mine: string) =>
  `${component}: the deployment ${JSON.stringify(prefix)} uses the key layout "${stored}", this process "${mine}" (every process of a deployment needs the same Redis kind, AMBIT_REDIS_DEVICE_GROUPS, AMBIT_MATCHER_PARTITIONS and AMBIT_GEO_* settings)`;

/** One value of `name` on a process's /metrics (null when it is not exported). */
export async function metricOf(p: AmbitProcess, name: string, role: string): Promise<number | null> {
  assert.ok(p.metricsPort !== null, 'the process serves metrics');
  const body = await (await fetch(`http://127.0.0.1:${p.metricsPort}/metrics`)).text();
  const m = new RegExp(`^${name}\\{role="${role}"\\} (\\S+)$`, 'm').exec(body);
  return m === null ? null : Number(m[1]);
}

function cmpId(a: string, b: string): number {
  const [x1, x2] = a.split('-').map(Number);
  const [y1, y2] = b.split('-').map(Number);
  return x1 - y1 || x2 - y2;
}

export function assertIncreasing(name: string, all: Notification[]): void {
  for (let i = 1; i < all.length; i++) assert.ok(cmpId(all[i - 1].deliveryId, all[i].deliveryId) < 0, `${name}: delivery ids increase (${all[i - 1].deliveryId} then ${all[i].deliveryId})`);
}

/**
 * The next `want.length` notifications of a device stream are exactly `want` (event id and sorted
 * subscription ids), in order, with increasing delivery ids.
 */
export async function expectExactly(stream: DeviceStream, name: string, want: readonly { id: string; subs: string[] }[], timeoutMs: number, message: string): Promise<void> {
  const got = await stream.notifications(want.length, timeoutMs);
  assert.deepEqual(
    got.map((n) => ({ id: n.event!.id, subs: [...n.subscriptionIds].sort() })),
    want,
    message,
  );
  assertIncreasing(name, got);
}

/** A look at the redis-server at `url`. */
export async function inspectServer<T>(url: string, f: (r: Redis) => Promise<T>): Promise<T> {
  const r = new Redis(url, { lazyConnect: true, protocol: 2 });
  await r.connect();
  try {
    return await f(r);
  } finally {
    r.disconnect();
  }
}
