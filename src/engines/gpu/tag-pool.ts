/**
 * Worker threads of the GPU tag index (tag-worker.ts): the build's signatures and splits
 * (tag-build.ts) and the exact verification of batches (tag-verify.ts), over arrays in shared
 * memory. Each worker answers one task at a time; tasks wait in order for a free worker.
 */
import { Worker } from 'node:worker_threads';
import type { Part, SplitRule } from './tag-build.js';

export type TagTask =
  | { kind: 'init'; sig: SharedArrayBuffer; order: SharedArrayBuffer; offsets: SharedArrayBuffer; tags: SharedArrayBuffer }
  | { kind: 'signatures'; from: number; to: number }
  | { kind: 'step' | 'all'; part: Part; rule: SplitRule }
  | { kind: 'tables'; setOff: SharedArrayBuffer; setTags: SharedArrayBuffer; keyOff: SharedArrayBuffer; keyList: SharedArrayBuffer; keyValues: SharedArrayBuffer | null; order: SharedArrayBuffer }
  | { kind: 'verify'; qOff: Uint32Array; qTags: Uint32Array; data: Uint32Array; head: number; hits: number; unique: boolean };

export type TagReply =
  | { kind: 'done' }
  | { kind: 'step'; partition: boolean; next: Part[] }
  | { kind: 'all'; parts: number[] }
  | { kind: 'verified'; offsets: Uint32Array; keys: Uint32Array; falseHits: number }
  | { kind: 'error'; message: string };

/** A task's failure inside a worker (the worker itself goes on). */
class TaskError extends Error {}

export class TagWorkerPool {
  private readonly idle: Worker[] = [];
  private readonly live = new Set<Worker>();
  private readonly queue: { task: TagTask; transfer: ArrayBuffer[]; resolve: (r: TagReply) => void; reject: (e: Error) => void }[] = [];
  private closed = false;

  private constructor(private readonly workers: Worker[]) {
    for (const w of workers) {
      this.live.add(w);
      // A worker that dies (even idle) leaves the pool; with none left, what waits is refused.
      w.on('error', () => {});
      w.once('exit', () => this.lost(w));
      w.unref(); // an idle pool does not keep the process alive; a busy worker is ref'd
    }
    this.idle.push(...workers);
  }

  /** `n` workers, each told `init` first (shared arrays: not copied). */
  static async start(n: number, init: TagTask): Promise<TagWorkerPool> {
    const workers = Array.from({ length: n }, () => new Worker(new URL('./tag-worker.js', import.meta.url)));
    const pool = new TagWorkerPool(workers);
    try {
      await Promise.all(workers.map((w) => pool.send(w, init, [])));
    } catch (e) {
      await pool.close();
      throw e;
    }
    return pool;
  }

  /** Workers alive. */
  get size(): number {
    return this.live.size;
  }

  private lost(w: Worker): void {
    this.live.delete(w);
    const i = this.idle.indexOf(w);
    if (i >= 0) this.idle.splice(i, 1);
    if (this.live.size === 0) for (const q of this.queue.splice(0)) q.reject(new Error('tag index worker pool: no worker left'));
  }

  private send(w: Worker, task: TagTask, transfer: ArrayBuffer[]): Promise<TagReply> {
    w.ref();
    return new Promise<TagReply>((resolve, reject) => {
      const onMessage = (r: TagReply): void => {
        w.off('error', onError);
        w.off('exit', onExit);
        if (r.kind === 'error') reject(new TaskError(`tag index worker: ${r.message}`));
        else resolve(r);
      };
      const onError = (e: Error): void => {
        w.off('message', onMessage);
        w.off('exit', onExit);
        reject(e);
      };
      const onExit = (code: number): void => {
        w.off('message', onMessage);
        w.off('error', onError);
        reject(new Error(`tag index worker: exited (code ${code}) before answering ${task.kind}`));
      };
      w.once('message', onMessage);
      w.once('error', onError);
      w.once('exit', onExit);
      w.postMessage(task, transfer);
    }).finally(() => w.unref());
  }

  /** Runs `task` on the next free worker; `transfer` moves those buffers to it. */
  run(task: TagTask, transfer: ArrayBuffer[] = []): Promise<TagReply> {
    if (this.closed) return Promise.reject(new Error('tag index worker pool: closed'));
    if (this.live.size === 0) return Promise.reject(new Error('tag index worker pool: no worker left'));
    return new Promise((resolve, reject) => {
      this.queue.push({ task, transfer, resolve, reject });
      this.pump();
    });
  }

  private pump(): void {
    while (this.idle.length > 0 && this.queue.length > 0) {
      const w = this.idle.pop()!;
      const { task, transfer, resolve, reject } = this.queue.shift()!;
      this.send(w, task, transfer).then(
        (r) => {
          this.idle.push(w);
          resolve(r);
          this.pump();
        },
        (e: Error) => {
          // A task that failed inside a healthy worker gives the worker back; one that broke the
          // worker (an error event, an exit) does not, and the worker is terminated.
          if (e instanceof TaskError) this.idle.push(w);
          else if (this.live.has(w)) {
            this.lost(w);
            void w.terminate();
          }
          reject(e);
          this.pump();
        },
      );
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const q of this.queue.splice(0)) q.reject(new Error('tag index worker pool: closed'));
    await Promise.all(this.workers.map((w) => w.terminate()));
  }
}
