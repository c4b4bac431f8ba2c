/**
 * A packing thread of bench/gpu-feed.ts: it builds the same seeded events as the main thread
 * (WorkloadSource with the same options) and, for each pack asked for, checks and packs the next
 * `size` of them (packEvents) and transfers the pack to the main thread. So the main thread never
 * touches an event object, as when events are packed where they arrive.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { packEvents } from '../../../src/engines/gpu/packed.js';
import type { Limits } from '../../../src/model/limits.js';
import { WorkloadSource } from '../../../src/workload/index.js';

export interface PackWorkerData {
  seed: number;
  subscriptions: number;
  pool: number;
  size: number;
  /** Where this worker's cursor starts in the pool (workers spread over it). */
  start: number;
  limits: Limits;
}

const d = workerData as PackWorkerData;
const pool = new WorkloadSource({ seed: d.seed, subscriptions: d.subscriptions, events: d.pool }).events();
let cursor = d.start;
const part = new Array(d.size);

parentPort!.on('message', (want: number) => {
  for (let i = 0; i < want; i++) {
    for (let k = 0; k < d.size; k++) part[k] = pool[cursor++ % pool.length];
    const t = packEvents(part, { limits: d.limits }).toTransfer();
    parentPort!.postMessage(t, [t.words, t.points, t.ids]);
  }
});
parentPort!.postMessage('ready');
