/**
 * The node's thread pool (services/process/thread-pool.ts), under fan-out shards and hub
 * partitions: every thread listens on its own socket before the pool resolves; a thread that
 * exits unasked is reported (the node then stops, as docs/service.md says); one that fails to
 * start fails the start, with every thread stopped and the sockets' directory removed.
 */
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { connect } from 'node:net';
import { dirname } from 'node:path';
import { describe, it } from 'node:test';
import { startThreadPool } from '../../services/process/thread-pool.js';

const SCRIPT = new URL('../support/pool-worker.js', import.meta.url);

function hello(path: string): Promise<string> {
  return new Promise((resolve, reject) => {
    let got = '';
    const s = connect(path);
    s.on('data', (b) => (got += b.toString()));
    s.on('end', () => resolve(got));
    s.on('error', reject);
  });
}

describe('thread pool', { timeout: 30_000 }, () => {
  it('starts every thread listening, reports one that exits unasked, and stops the rest', async () => {
    let death!: (err: Error) => void;
    const died = new Promise<Error>((resolve) => (death = resolve));
    const pool = await startThreadPool('test thread', SCRIPT, 3, () => ({}), 'silent', (err) => death(err));
    try {
      assert.equal(pool.paths.length, 3);
      assert.deepEqual(await Promise.all(pool.paths.map(hello)), ['thread 0', 'thread 1', 'thread 2']);
      pool.ports[1].postMessage('die');
      const err = await died;
      assert.equal(err.message, 'test thread 1 exited (3)');
    } finally {
      await pool.stop();
    }
    assert.equal(existsSync(dirname(pool.paths[0])), false, 'the sockets\' directory is gone');
  });

  it('a thread that cannot start fails the start, and the threads that did start are stopped', async () => {
    let reported = 0;
    const failing = startThreadPool('test thread', SCRIPT, 3, () => ({ failBeforeListening: 2 }), 'silent', () => reported++);
    await assert.rejects(failing, /thread 2 cannot start/);
    assert.equal(reported, 0, 'a failed start is not reported as a death');
  });

  it('a thread whose error and exit reach the pool in one turn still only fails the start', async () => {
    // As on a loaded machine: this thread is busy while the failing thread throws and exits, so the
    // thread's error and its exit are handled in one turn, before the start's rejection is.
    let reported = 0;
    const failing = new Int32Array(new SharedArrayBuffer(4));
    const start = startThreadPool('test thread', SCRIPT, 2, () => ({ failBeforeListening: 1, failing }), 'silent', () => reported++);
    Atomics.wait(failing, 0, 0, 10_000);
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 200); // the throw becomes an exit
    await assert.rejects(start, /thread 1 cannot start/);
    assert.equal(reported, 0, 'a failed start is not reported as a death');
  });
});
