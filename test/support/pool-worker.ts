/**
 * A thread for the thread-pool test (test/service/thread-pool.test.ts): listens on its socket
 * like a fan-out shard or a hub partition, answers a connection with its index, exits with code
 * 3 on 'die' (sent on its link), stops on 'stop', and with `failBeforeListening` throws before it
 * listens (first setting `failing`'s word to 1, where given).
 */
import { createServer } from 'node:net';
import { type MessagePort, parentPort, workerData } from 'node:worker_threads';

function startThread(pool: NonNullable<typeof parentPort>): void {
  const data = workerData as { index: number; socketPath: string; port: MessagePort; failBeforeListening?: number; failing?: Int32Array };
  if (data.failBeforeListening === data.index) {
    if (data.failing !== undefined) {
      Atomics.store(data.failing, 0, 1);
      Atomics.notify(data.failing, 0);
    }
    throw new Error(`thread ${data.index} cannot start`);
  }
  const server = createServer((socket) => socket.end(`thread ${data.index}`));
  server.listen(data.socketPath, () => pool.postMessage({ listening: true }));
  // 'die' comes on the thread's link (the pool's port to it), 'stop' from the pool.
  data.port.on('message', (m: unknown) => {
    if (m === 'die') process.exit(3);
  });
  pool.on('message', (m: unknown) => {
    if (m === 'stop') {
      server.close();
      data.port.close();
      pool.close();
    }
  });
}

// The test runner also loads every file under test/ on its own: outside a pool's thread this does nothing.
if (parentPort !== null) startThread(parentPort);
