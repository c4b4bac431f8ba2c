/**
 * Worker threads of a node's process that each serve a part of the node on a link: fan-out
 * shards (fanout-shards.ts) and hub partitions (partitions.ts). Each thread gets a MessagePort to
 * this thread and a Unix socket path, in a directory only this user can open, where it listens
 * for the node's gateway processes; it posts `{ listening: true }` once it does, and stops on the
 * message 'stop'. A thread that exits unasked is reported to `onDeath`.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createServer, type Socket } from 'node:net';
import { MessageChannel, type MessagePort, Worker, parentPort } from 'node:worker_threads';
import type { Logger } from 'pino';
import { type Link, socketLink } from '../hub/link.js';

export interface ThreadPool {
  /** This thread's end of each thread's MessagePort. */
  readonly ports: MessagePort[];
  /** Where each thread listens for gateway processes. */
  readonly paths: string[];
  /** The sockets' directory. */
  readonly dir: string;
  stop(): Promise<void>;
}

/** What every thread of a pool gets beside its own data. */
export interface PoolThreadData {
  index: number;
  socketPath: string;
  logLevel: string;
}

/**
 * Starts `count` threads of `script`, each with `data(index)` and the fields of PoolThreadData;
 * resolves once every one listens (rejects, with all stopped, if one fails first).
 */
export async function startThreadPool<D extends object>(what: string, script: URL, count: number, data: (index: number) => D, logLevel: string, onDeath: (err: Error) => void): Promise<ThreadPool> {
  const dir = mkdtempSync(join(tmpdir(), 'ambit-threads-'));
  const workers: Worker[] = [];
  const ports: MessagePort[] = [];
  /** Threads that have not exited (stop waits for these only). */
  const running = new Set<Worker>();
  let stopping = false;
  /**
   * Until every thread listens, an exit or error fails the start and is not a death: a worker's
   * error and exit can come in one turn, before the start's rejection has been handled.
   */
  let started = false;
  let failStart!: (err: Error) => void;
  const startFailed = new Promise<never>((_, reject) => (failStart = reject));
  const paths = Array.from({ length: count }, (_, k) => join(dir, `${k}.sock`));
  try {
    const listening = paths.map((socketPath, index) => {
      const { port1, port2 } = new MessageChannel();
      const own: PoolThreadData = { index, socketPath, logLevel };
      const w = new Worker(script, { workerData: { ...data(index), ...own, port: port2 }, transferList: [port2] });
      workers.push(w);
      running.add(w);
      ports.push(port1);
      w.on('error', (err) => {
        if (!started) failStart(err);
      });
      w.once('exit', (code) => {
        running.delete(w);
        if (!started) failStart(new Error(`${what} ${index} exited (${code}) before it listened`));
        else if (!stopping) onDeath(new Error(`${what} ${index} exited (${code})`));
      });
      return new Promise<void>((resolve) => {
        w.once('message', (m: unknown) => ((m as { listening?: boolean })?.listening === true ? resolve() : failStart(new Error(`${what} ${index}: unexpected ${JSON.stringify(m)}`))));
      });
    });
    await Promise.race([Promise.all(listening), startFailed]);
    started = true;
  } catch (err) {
    stopping = true;
    started = true;
    await Promise.all(workers.map((w) => w.terminate()));
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
  // The sockets' directory goes with the process, also when it exits without stop().
  const removeDir = (): void => rmSync(dir, { recursive: true, force: true });
  process.once('exit', removeDir);
  return {
    ports,
    paths,
    dir,
    stop: async () => {
      if (stopping) return;
      stopping = true;
      await Promise.all(
        [...running].map(
          (w) =>
            new Promise<void>((resolve) => {
              // A thread that does not stop within 5 s is terminated.
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

/**
 * In a pool's thread: listens on its socket path, hands each gateway process's connection to
 * `serve` as a link, and tells the pool once it listens (a socket error ends the thread). Returns
 * what closes the server and every connection.
 */
export function listenForGateways(socketPath: string, serve: (link: Link) => void, log: Logger): () => void {
  const sockets = new Set<Socket>();
  const server = createServer((socket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
    serve(socketLink(socket));
  });
  server.on('error', (err) => {
    log.error({ err }, 'socket for gateway processes failed');
    process.exit(1);
  });
  server.listen(socketPath, () => parentPort!.postMessage({ listening: true }));
  return () => {
    for (const s of sockets) s.destroy();
    server.close();
  };
}
