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

export class TagWorkerPool {
  private readonly idle: Worker[] = [];
  private readonly queue: { task: TagTask; transfer: ArrayBuffer[]; resolve: (r: TagReply) => void; reject: (e: Error) => void }[] = [];
  private closed = false;

  private constructor(private readonly workers: Worker[]) {
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

  get size(): number {
    return this.workers.length;
  }

  private send(w: Worker, task: TagTask, transfer: ArrayBuffer[]): Promise<TagReply> {
    return new Promise((resolve, reject) => {
      const onMessage = (r: TagReply): void => {
        w.off('error', onError);
        w.off('exit', onExit);
        if (r.kind === 'error') reject(new Error(`tag index worker: ${r.message}`));
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
    });
  }

  /** Runs `task` on the next free worker; `transfer` moves those buffers to it. */
  run(task: TagTask, transfer: ArrayBuffer[] = []): Promise<TagReply> {
    if (this.closed) return Promise.reject(new Error('tag index worker pool: closed'));
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
          // A worker that failed is not trusted again: its task's caller hears why.
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
