/**
 * The hub partitions of an embedded node (AMBIT_PARTITIONS=K): K worker threads of the node's
 * main process, each an embedded hub (engine, subscriptions, positions, notification logs) for
 * the devices that hash to it (partition-worker.ts). The process's own gateway reaches each over
 * a MessagePort, gateway processes over a Unix socket (thread-pool.ts); either way through a
 * PartitionedHub of LinkedHubs (services/hub/partitioned.ts). A partition that dies takes its
 * devices' state with it, so the node stops (embedded state is not durable anyway).
 */
import type { DedupeOptions } from '../matcher/event-ids.js';
import type { Logger } from 'pino';
import { portLink } from '../hub/link.js';
import { type PartitionedHub, linkedPartitions } from '../hub/partitioned.js';
import type { Retention } from '../matcher/fanout.js';
import type { SequencerName } from '../../src/engines/index.js';
import type { EngineChoice } from '../matcher/engine.js';
import { type PoolThreadData, startThreadPool } from './thread-pool.js';

export interface Partitions {
  /** This process's hub: the partitions over their MessagePorts. */
  readonly hub: PartitionedHub;
  /** Where each partition listens for gateway processes. */
  readonly paths: string[];
  stop(): Promise<void>;
}

/** What a partition thread is started with (partition-worker.ts). */
export interface PartitionWorkerData extends PoolThreadData {
  engine: EngineChoice;
  gpuCpuMirror: boolean;
  maxSubscriptionsPerDevice: number;
  retention: Retention;
  dedupe: DedupeOptions;
  patternLatenessMs: number;
  patternRetainedPerElement: number;
  patternSequencer: SequencerName;
}

export interface PartitionSettings {
  engine: EngineChoice;
  gpuCpuMirror: boolean;
  maxSubscriptionsPerDevice: number;
  retention: Retention;
  dedupe: DedupeOptions;
  logLevel: string;
  patternLatenessMs: number;
  patternRetainedPerElement: number;
  patternSequencer: SequencerName;
}

export async function startPartitions(count: number, s: PartitionSettings, log: Logger, onDeath: (err: Error) => void): Promise<Partitions> {
  const pool = await startThreadPool(
    'hub partition',
    new URL('./partition-worker.js', import.meta.url),
    count,
    () => ({ engine: s.engine, gpuCpuMirror: s.gpuCpuMirror, maxSubscriptionsPerDevice: s.maxSubscriptionsPerDevice, retention: s.retention, dedupe: s.dedupe, patternLatenessMs: s.patternLatenessMs, patternRetainedPerElement: s.patternRetainedPerElement, patternSequencer: s.patternSequencer }),
    s.logLevel,
    onDeath,
  );
  log.info({ partitions: count, dir: pool.dir }, `${count} hub partitions listening`);
  const hub = linkedPartitions(pool.ports.map((p) => portLink(p)));
  return {
    hub,
    paths: pool.paths,
    stop: async () => {
      await hub.close();
      await pool.stop();
    },
  };
}
