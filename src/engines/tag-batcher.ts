/**
 * TagMatch's front end (TagMatch §3.4): queries arrive one at a time and are answered in batches.
 * A batch is sent to the index when it holds `maxBatch` queries or when `timeoutMs` has passed
 * since its first query arrived, whichever comes first; the timeout bounds the wait a query adds,
 * the batch size bounds the work a batch holds. Works over any index with `matchAll` (the GPU
 * index, gpu/tag-index.ts, or the CPU index).
 *
 * Each query's own promise gets its keys. A query that is not ascending and distinct is refused
 * alone, at `match`; when the index fails a batch, every query of that batch is rejected with the
 * error and later batches go on. The timer is injected so tests decide when time passes.
 */
import type { TagMatches, TagSetsView } from './tag-index.js';

export interface BatchIndex {
  matchAll(queries: TagSetsView, unique: boolean): Promise<TagMatches> | TagMatches;
}

/** setTimeout and clearTimeout, or a test's stand-in. */
export interface BatchTimer {
  set(fn: () => void, ms: number): unknown;
  clear(handle: unknown): void;
}

const MAX_TIMEOUT_MS = 2 ** 31 - 1;

export const REAL_TIMER: BatchTimer = {
  set: (fn, ms) => setTimeout(fn, ms),
  clear: (h) => clearTimeout(h as ReturnType<typeof setTimeout>),
};

export interface TagBatcherOptions {
  /** Most queries a batch holds; a batch that fills is sent at once. */
  maxBatch: number;
  /** Longest a batch waits for more queries after its first, ms (0: sent on the next turn of the timer). */
  timeoutMs: number;
  /** match-unique (each key once a query) instead of match. */
  unique: boolean;
}

export interface TagBatcherStats {
  queries: number;
  batches: number;
  /** Batches sent because they were full, and because their timeout passed (or on flush). */
  full: number;
  timedOut: number;
  failedBatches: number;
}

interface Pending {
  resolve: (keys: Uint32Array) => void;
  reject: (e: Error) => void;
}

export class TagBatcher {
  private tags: number[] = [];
  private offsets: number[] = [0];
  private pending: Pending[] = [];
  private timer: unknown = null;
  private closed = false;
  private readonly inFlight = new Set<Promise<void>>();
  private readonly counts: TagBatcherStats = { queries: 0, batches: 0, full: 0, timedOut: 0, failedBatches: 0 };
  private readonly o: TagBatcherOptions;

  constructor(
    private readonly index: BatchIndex,
    options: Partial<TagBatcherOptions> = {},
    private readonly timer_: BatchTimer = REAL_TIMER,
  ) {
    const o: TagBatcherOptions = { maxBatch: 1024, timeoutMs: 1, unique: false, ...options };
    if (!Number.isSafeInteger(o.maxBatch) || o.maxBatch < 1) throw new RangeError(`tag batcher: maxBatch must be an integer >= 1, got ${o.maxBatch}`);
    // Timers take at most 2^31-1 ms (a longer delay fires at once).
    if (!(Number.isFinite(o.timeoutMs) && o.timeoutMs >= 0 && o.timeoutMs <= MAX_TIMEOUT_MS)) throw new RangeError(`tag batcher: timeoutMs must be a number in [0, ${MAX_TIMEOUT_MS}], got ${o.timeoutMs}`);
    this.o = o;
  }

  /** The keys of the entries whose sets are subsets of `query` (ascending, distinct tag ids). */
  match(query: ArrayLike<number>): Promise<Uint32Array> {
    if (this.closed) return Promise.reject(new Error('tag batcher: closed'));
    for (let k = 0; k < query.length; k++) {
      const t = query[k];
      if (!Number.isInteger(t) || t < 0 || t > 0xffffffff) return Promise.reject(new RangeError(`tag batcher: query tag ${k} must be an integer in [0, 2^32), got ${t}`));
      if (k > 0 && t <= query[k - 1]) return Promise.reject(new RangeError(`tag batcher: a query's tags must be ascending and distinct, got ${query[k - 1]} then ${t}`));
    }
    return new Promise<Uint32Array>((resolve, reject) => {
      for (let k = 0; k < query.length; k++) this.tags.push(query[k]);
      this.offsets.push(this.tags.length);
      this.pending.push({ resolve, reject });
      this.counts.queries++;
      if (this.pending.length >= this.o.maxBatch) this.send(true);
      else if (this.timer === null) this.timer = this.timer_.set(() => this.send(false), this.o.timeoutMs);
    });
  }

  /** Sends what waits now, and resolves when every batch sent so far is answered. */
  async flush(): Promise<void> {
    if (this.pending.length > 0) this.send(false);
    await Promise.all([...this.inFlight]);
  }

  /** Refuses new queries; what was asked is still answered (flushed). */
  async close(): Promise<void> {
    this.closed = true;
    await this.flush();
  }

  stats(): TagBatcherStats {
    return { ...this.counts };
  }

  private send(full: boolean): void {
    if (this.timer !== null) {
      this.timer_.clear(this.timer);
      this.timer = null;
    }
    if (this.pending.length === 0) return;
    const queries: TagSetsView = { offsets: Uint32Array.from(this.offsets), tags: Uint32Array.from(this.tags) };
    const pending = this.pending;
    this.tags = [];
    this.offsets = [0];
    this.pending = [];
    this.counts.batches++;
    if (full) this.counts.full++;
    else this.counts.timedOut++;
    const run = (async (): Promise<void> => {
      let m: TagMatches;
      try {
        m = await this.index.matchAll(queries, this.o.unique);
      } catch (e) {
        this.counts.failedBatches++;
        const err = e instanceof Error ? e : new Error(String(e));
        for (const p of pending) p.reject(err);
        return;
      }
      try {
        if (m.offsets.length !== pending.length + 1) throw new Error(`tag batcher: the index answered ${m.offsets.length - 1} queries of ${pending.length}`);
        for (let j = 0; j < pending.length; j++) pending[j].resolve(m.keys.slice(m.offsets[j], m.offsets[j + 1]));
      } catch (e) {
        this.counts.failedBatches++;
        const err = e instanceof Error ? e : new Error(String(e));
        for (const p of pending) p.reject(err); // those already resolved stay resolved
      }
    })();
    this.inFlight.add(run);
    void run.finally(() => this.inFlight.delete(run));
  }
}
