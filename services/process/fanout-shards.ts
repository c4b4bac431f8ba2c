/**
 * The fan-out shards of an embedded node (AMBIT_FANOUT_SHARDS=K): K worker threads of the hub's
 * process, each holding the notification logs of the devices that hash to it
 * (services/hub/fanout-shard.ts). The hub reaches each over a MessagePort; gateway processes
 * connect to each over a Unix socket in a directory only this user can open. A shard that dies
 * takes its logs with it, so the node stops (embedded state is not durable anyway) rather than
 * serve devices whose notifications would go nowhere.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { MessageChannel, Worker } from 'node:worker_threads';
import type { Logger } from 'pino';
import { ShardedFanOut } from '../hub/fanout-shard.js';
import { portLink } from '../hub/link.js';
import type { Retention } from '../matcher/fanout.js';

export interface FanOutShards {
  /** The hub's side: give it to the embedded hub. */
  readonly fanout: ShardedFanOut;
  /** Where each shard listens for gateway processes. */
  readonly paths: string[];
  stop(): Promise<void>;
}

/** What a shard thread is started with (fanout-worker.ts). */
export interface ShardWorkerData {
  index: number;
  socketPath: string;
  retention: Retention;
  logLevel: string;
}

export async function startFanOutShards(count: number, retention: Retention, logLevel: string, log: Logger, onDeath: (err: Error) => void): Promise<FanOutShards> {
  const dir = mkdtempSync(join(tmpdir(), 'ambit-shards-'));
  const workers: Worker[] = [];
  const ports: MessageChannel['port1'][] = [];
  let stopping = false;
  const paths = Array.from({ length: count }, (_, k) => join(dir, `${k}.sock`));
  try {
    await Promise.all(
      paths.map((socketPath, index) => {
        const { port1, port2 } = new MessageChannel();
        const data: ShardWorkerData = { index, socketPath, retention, logLevel };
        const w = new Worker(new URL('./fanout-worker.js', import.meta.url), { workerData: { ...data, port: port2 }, transferList: [port2] });
        workers.push(w);
        ports.push(port1);
        w.once('exit', (code) => {
          if (!stopping) onDeath(new Error(`fan-out shard ${index} exited (${code})`));
        });
        return new Promise<void>((resolve, reject) => {
          w.once('message', (m: unknown) => ((m as { listening?: boolean })?.listening === true ? resolve() : reject(new Error(`fan-out shard ${index}: unexpected ${JSON.stringify(m)}`))));
          w.once('error', reject);
          w.once('exit', (code) => reject(new Error(`fan-out shard ${index} exited (${code}) before it listened`)));
        });
      }),
    );
  } catch (err) {
    stopping = true;
    await Promise.all(workers.map((w) => w.terminate()));
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
  log.info({ shards: count, dir }, `${count} fan-out shards listening`);
  // The sockets' directory goes with the process, also when it exits without stop().
  const removeDir = (): void => rmSync(dir, { recursive: true, force: true });
  process.once('exit', removeDir);
  const fanout = new ShardedFanOut(ports.map((p) => portLink(p)));
  return {
    fanout,
    paths,
    stop: async () => {
      if (stopping) return;
      stopping = true;
      await Promise.all(
        workers.map(
          (w) =>
            new Promise<void>((resolve) => {
              // A shard that does not stop within 5 s is terminated.
              const t = setTimeout(() => void w.terminate(), 5000);
              w.once('exit', () => {
                clearTimeout(t);
                resolve();
              });
              w.postMessage('stop');
            }),
        ),
      );
      for (const p of ports) p.close();
      process.off('exit', removeDir);
      removeDir();
    },
  };
}
