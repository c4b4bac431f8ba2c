/**
 * The fan-out shards of an embedded node (AMBIT_FANOUT_SHARDS=K): K worker threads of the hub's
 * process, each holding the notification logs of the devices that hash to it
 * (services/hub/fanout-shard.ts). The hub reaches each over a MessagePort; gateway processes
 * connect to each over a Unix socket (thread-pool.ts). A shard that dies takes its logs with it,
 * so the node stops (embedded state is not durable anyway) rather than serve devices whose
 * notifications would go nowhere.
 */
import type { Logger } from 'pino';
import { ShardedFanOut } from '../hub/fanout-shard.js';
import { portLink } from '../hub/link.js';
import type { Retention } from '../matcher/fanout.js';
import { type PoolThreadData, startThreadPool } from './thread-pool.js';

export interface FanOutShards {
  /** The hub's side: give it to the embedded hub. */
  readonly fanout: ShardedFanOut;
  /** Where each shard listens for gateway processes. */
  readonly paths: string[];
  stop(): Promise<void>;
}

/** What a shard thread is started with (fanout-worker.ts). */
export interface ShardWorkerData extends PoolThreadData {
  retention: Retention;
}

export async function startFanOutShards(count: number, retention: Retention, logLevel: string, log: Logger, onDeath: (err: Error) => void): Promise<FanOutShards> {
  const pool = await startThreadPool('fan-out shard', new URL('./fanout-worker.js', import.meta.url), count, () => ({ retention }), logLevel, onDeath);
  log.info({ shards: count, dir: pool.dir }, `${count} fan-out shards listening`);
  return { fanout: new ShardedFanOut(pool.ports.map((p) => portLink(p))), paths: pool.paths, stop: () => pool.stop() };
}
