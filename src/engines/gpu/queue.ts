/**
 * Which path answers an event, and the queue of events waiting for the GPU.
 *
 * - Path: under 'adaptive' selection a lone call (no load: see PathChoice) of up to SMALL_BATCH
 *   events goes to whichever path has been cheaper lately for that many events (the CPU's cost
 *   grows with them, the GPU's round trip hardly does), probing the other every 32nd time; events
 *   under load always go to the GPU.
 * - Queue: while fewer than `inFlight` batches run, the queue is dispatched at once (a lone event
 *   goes alone: low latency), and under load the events that arrive meanwhile form the next batch
 *   (throughput), up to `maxBatch` events. Each batch has its own readback slot, so the host
 *   encodes batch k+1 while the GPU runs batch k (CLCB's stream idea). A packed call (matchPacked,
 *   packed.ts) runs whole, its words the batch's input; packed calls waiting together are merged
 *   into one batch of up to `maxBatch` events (PackedEvents.merge). Events a batch could not
 *   answer (overflow, device loss) are answered by the CPU engine: none is dropped. Without one
 *   (no CPU mirror) they run again on the GPU, ahead of the queue: an overflow with the room the
 *   batch found it needed, a device loss once a new device is up.
 */
import { AmbitError } from '../../model/errors.js';
import type { NEvent } from '../../model/limits.js';
import type { Listed } from '../matcher.js';
import type { GpuBatches } from './batch.js';
import { PackedEvents } from './packed.js';
import { type BatchEvents, nulls } from './readback.js';
import type { PathSelect, StageTimes } from './options.js';

/** What happened to events, for stats(); keys in the order stats() lists them. */
export interface Counters {
  adaptiveCpu: number;
  adaptiveGpu: number;
  gpuEvents: number;
  cpuEvents: number;
  batches: number;
  overflowEvents: number;
  fallbackEvents: number;
  /** Events run on the GPU again (no CPU mirror): after an overflow or a device loss. */
  retriedEvents: number;
  deviceLosses: number;
  rebuilds: number;
  /**
   * Milliseconds summed over the batches the GPU answered: the host's work before the submit
   * (encoding, recording), the wait for the results, and reading them (parsing, reconciling).
   */
  batchSubmitMs: number;
  batchWaitMs: number;
  batchReadMs: number;
}

export function newCounters(): Counters {
  return { adaptiveCpu: 0, adaptiveGpu: 0, gpuEvents: 0, cpuEvents: 0, batches: 0, overflowEvents: 0, fallbackEvents: 0, retriedEvents: 0, deviceLosses: 0, rebuilds: 0, batchSubmitMs: 0, batchWaitMs: 0, batchReadMs: 0 };
}

/**
 * Moving average of one path's cost (the CPU's per event, the GPU's per small batch). The first
 * two samples are skipped (they carry one-off work: re-filing every initial position, the first
 * full upload) and later samples are clamped to 4x the average, so one GC pause or rebuild does
 * not flip the choice for long.
 */
class CostAverage {
  private seen = 0;
  add(avg: number, x: number): number {
    if (++this.seen <= 2) return avg;
    if (avg === 0) return x;
    return avg + 0.1 * (Math.min(x, 4 * avg) - avg);
  }
}

/**
 * Most events in a call that the adaptive choice may answer on the CPU: a hub's publishes at low
 * rates carry a few events each, which the CPU answers in less time than one GPU round trip.
 */
export const SMALL_BATCH = 16;

/** Most failed runs of an event on the GPU (no CPU mirror) before its call fails; a device loss's wait is not one. */
export const MAX_RETRIES = 8;

/** The error of an event that failed `runs` runs: the last run's own error where it threw, else its overflows'. */
function giveUp(runs: number, error: unknown): AmbitError {
  if (error instanceof AmbitError) return error;
  if (error !== null) return new AmbitError('UNAVAILABLE', `gpu: ${error instanceof Error ? error.message : String(error)} (${runs} runs, no CPU mirror to answer)`);
  return new AmbitError('RESOURCE_EXHAUSTED', `gpu: an event's candidates or matches exceeded the device's buffers in each of ${runs} runs (no CPU mirror to answer it)`);
}

/**
 * Packs smaller than this are merged with the small packs waiting behind them into one batch:
 * a batch's fixed host cost (recording, submitting, reading back: about 0.25 ms on an H200 host)
 * is more than merging's copy of a pack's words below about this size.
 */
export const MERGE_BELOW = 512;

/** Share of the thread that answering every event on the CPU may take before calls count as load (see PathChoice). */
export const CPU_SHARE = 0.25;
/** Window over which PathChoice counts the events coming in, ms. */
const RATE_WINDOW_MS = 100;

/**
 * The choice of path for lone calls of up to SMALL_BATCH events, from the measured cost of each
 * path and the load: a CPU answer holds the thread for its whole cost, a GPU answer only for
 * encoding and reading back, so under load calls go to the GPU whatever their latency on the CPU.
 * Load is a burst (the calls of one synchronous run answered on the CPU one after another: past
 * SMALL_BATCH events, or costing more than a GPU round trip), events waiting for a batch (every
 * batch slot taken), or events coming in at a rate at which answering them all on the CPU would
 * take more than CPU_SHARE of the thread. Not the event loop's utilization, nor batches running:
 * the GPU binding polls with setImmediate while batches are in flight, so the loop counts as busy
 * whenever the GPU answers, and calls sent to the GPU because of either would keep it so (a CPU
 * answer given while batches run is handed back after them: BatchQueue.release).
 */
export class PathChoice {
  /**
   * Moving averages, µs: of one event on the CPU, and of a GPU round trip of a small batch (at most
   * SMALL_BATCH events; nearly all of it the same whatever their number).
   */
  cpuCostUs = 0;
  gpuCostUs = 0;
  /** Events a second coming in (calls of every size), over the last full window. */
  rate = 0;
  private lone = 0;
  private readonly costs = { cpu: new CostAverage(), gpu: new CostAverage() };
  /** Events answered on the CPU in this synchronous run. */
  private burst = 0;
  private windowStart = -1;
  private windowEvents = 0;

  constructor(
    private readonly select: PathSelect,
    private readonly counters: Counters,
    private readonly costSample: ((path: 'cpu' | 'gpu', us: number) => number) | null,
    /** Whether the thread is loaded, in place of the rate rule (tests fix it); null: the rate rule. */
    private readonly threadBusy: (() => boolean) | null = null,
    private readonly now: () => number = () => performance.now(),
  ) {}

  /** Adds a measured cost of a path: per event on the CPU, per small batch on the GPU. */
  sample(path: 'cpu' | 'gpu', us: number): void {
    const x = this.costSample === null ? us : this.costSample(path, us);
    if (path === 'cpu') this.cpuCostUs = this.costs.cpu.add(this.cpuCostUs, x);
    else this.gpuCostUs = this.costs.gpu.add(this.gpuCostUs, x);
  }

  /** Counts a call's `n` events towards the rate (every call, whatever its size or path). */
  arrived(n: number): void {
    const t = this.now();
    if (this.windowStart < 0) this.windowStart = t;
    this.windowEvents += n;
    const dt = t - this.windowStart;
    if (dt >= RATE_WINDOW_MS) {
      this.rate = (1000 * this.windowEvents) / dt;
      this.windowStart = t;
      this.windowEvents = 0;
    }
  }

  /** Whether the thread counts as loaded: by `threadBusy` where given, else by the rate at the CPU's cost. */
  private loaded(): boolean {
    if (this.threadBusy !== null) return this.threadBusy();
    return this.rate * this.cpuCostUs > CPU_SHARE * 1e6;
  }

  /**
   * Whether a call's `n` events (1..SMALL_BATCH) go to the CPU rather than the queue; `waiting`:
   * events wait for a batch.
   */
  smallOnCpu(n: number, waiting: boolean): boolean {
    if (this.select !== 'adaptive') return this.select === 'cpu';
    // A CPU answer is synchronous, so the CPU answers of one synchronous run come one after
    // another: count their events (the count resets in a microtask, which runs before an awaiting
    // caller's next call, so sequential awaited calls stay lone calls).
    const burst = this.burst + n;
    if (waiting || burst > SMALL_BATCH || this.loaded()) return false; // load: batch on the GPU
    const probe = ++this.lone % 32 === 0;
    // Until both paths have been measured, measure them; then the cheaper for the run's CPU
    // answers so far and these (the last of them is answered after all of them), probing the other.
    const cpuCheaper = this.cpuCostUs === 0 || (this.gpuCostUs !== 0 && burst * this.cpuCostUs <= this.gpuCostUs);
    const onCpu = probe ? !cpuCheaper : cpuCheaper;
    if (onCpu) {
      if (this.burst === 0) queueMicrotask(this.endBurst);
      this.burst = burst;
      this.counters.adaptiveCpu++;
    } else this.counters.adaptiveGpu++;
    return onCpu;
  }

  private readonly endBurst = (): void => {
    this.burst = 0;
  };
}

/**
 * The head of a list consumed from its front, after compaction: the list emptied once all of it is
 * consumed, shifted down once half of it (at least 1024 entries) is; so each entry is moved O(1)
 * times.
 */
function compacted(list: unknown[], head: number): number {
  if (head === list.length) {
    list.length = 0;
    return 0;
  }
  if (head >= 1024 && 2 * head >= list.length) {
    list.splice(0, head);
    return 0;
  }
  return head;
}

/** A call's answer, handed back in call order (BatchQueue.release). */
interface Release {
  /** Answered: may be handed back once every call before it has been. */
  done: boolean;
  hand(): void;
}

/**
 * Events waiting for the GPU: one match() call's event or one matchBatch() call's events. A
 * batch takes events from the head of the queue, so a large job spans several batches (which
 * then run pipelined) and small jobs share one; the job is done when its last event is answered,
 * and handed back in call order.
 */
class Job implements Release {
  readonly results: Listed[][];
  /** Events handed to batches so far. */
  taken = 0;
  /** Events not answered yet. */
  left: number;
  done = false;
  failed = false;
  private error: unknown = undefined;
  /** A retry job's events: where each came from, and how many of its runs failed to answer it. */
  origin: Retry[] | null = null;
  /** A retry job's batches hold only its events, at most this many (0: any job, batched with others). */
  limit = 0;
  /** Events in the job. */
  readonly count: number;
  constructor(
    /** The call's checked events; empty for a packed call (`packed`). */
    readonly events: readonly NEvent[],
    /** Matches listed as tags where the subscriptions have them (matchBatchTagged), else as ids. */
    readonly tags: boolean,
    /** A match() call's job: resolved with its one event's matches, not a list of them. */
    private readonly one: boolean,
    private readonly resolve: (results: Listed[][] | Listed[]) => void,
    private readonly reject: (err: unknown) => void,
    /** A matchPacked() call's events: one batch of their own (see pump). */
    readonly packed: PackedEvents | null = null,
  ) {
    this.count = packed === null ? events.length : packed.count;
    this.results = new Array(this.count);
    this.left = this.count;
  }

  /** Event `i` of the job, checked (a packed one decoded: the CPU's answer, a retry). */
  eventAt(i: number): NEvent {
    return this.packed === null ? this.events[i] : this.packed.event(i);
  }

  fail(err: unknown): void {
    this.failed = true;
    this.error = err;
  }

  /** One of the call's events answered (or given up); true when it was the last: the call is done. */
  countOne(): boolean {
    if (--this.left !== 0) return false;
    this.done = true;
    return true;
  }

  hand(): void {
    if (this.failed) this.reject(this.error);
    else this.resolve(this.one ? this.results[0] : this.results);
  }
}

/** An event to run again (no CPU mirror): its call, its index there, and its failed runs. */
interface Retry {
  job: Job;
  i: number;
  attempt: number;
}

/** Why a batch did not answer its events: a throw (or no device), or a state the device cannot bind. */
interface Unanswered {
  error: unknown;
  unfit: boolean;
}

/** The part [from, to) of a job's events that one batch carries. */
interface Segment {
  job: Job;
  from: number;
  to: number;
}

export class BatchQueue {
  /** Jobs not yet wholly in a batch, from `qHead` (a head index: shift() costs O(n) on long queues). */
  private readonly queue: Job[] = [];
  private qHead = 0;
  private running = 0;
  /**
   * Calls not handed back yet, in call order (from `head`): the GPU's jobs, and answers the CPU
   * gave while jobs were out. Batches can finish out of order (one whose pairs take a second
   * read-back trip), and a CPU answer is ready at once: each is handed back once every call
   * before it has been, so a caller's calls are answered in the order made.
   */
  private readonly out: Release[] = [];
  private head = 0;
  /** GPU time per stage of the last profiled batch. */
  lastStages: StageTimes | null = null;

  constructor(
    private readonly opts: { maxBatch: number; inFlight: number },
    /** The GPU side now; null while there is none (lost, rebuilding, closed). */
    private readonly gpu: () => Pick<GpuBatches, 'run' | 'lastStages'> | null,
    /** Answers one event on the CPU engine (fallback), listing tags or ids; null: no CPU engine (events run again on the GPU). */
    private readonly onCpu: ((e: NEvent, tags: boolean) => Listed[]) | null,
    private readonly choice: PathChoice,
    private readonly counters: Counters,
    /**
     * Without a CPU engine: resolves once there is a GPU side to run on again (at once when there is
     * one), with false when there will be none (closed, or no device could be opened).
     */
    private readonly gpuBack: () => Promise<boolean> = async () => false,
  ) {}

  /** Events queued, batches running, or events waiting to run again. */
  get busy(): boolean {
    return this.qHead < this.queue.length || this.running > 0 || this.retrying > 0;
  }

  /** Retries waiting for a device (no CPU mirror). */
  private retrying = 0;

  /** Events waiting for a batch (every batch slot taken). */
  get waiting(): boolean {
    return this.qHead < this.queue.length;
  }

  /** Queues the events as one job (no promise per event); resolves with one result per event, listing tags (`tags`) or ids. */
  submit(events: readonly NEvent[], tags: boolean): Promise<Listed[][]> {
    return this.enqueue(events, tags, false) as Promise<Listed[][]>;
  }

  /** Queues a packed batch (a matchPacked() call), run as one batch of its own; resolves with one result per event. */
  submitPacked(packed: PackedEvents, tags: boolean): Promise<Listed[][]> {
    return new Promise((resolve, reject) => {
      const job = new Job([], tags, false, resolve as (r: Listed[][] | Listed[]) => void, reject, packed);
      this.queue.push(job);
      this.out.push(job);
      this.pump();
    });
  }

  /** Queues one event (a match() call); resolves with its matches. */
  submitOne(event: NEvent, tags: boolean): Promise<Listed[]> {
    return this.enqueue([event], tags, true) as Promise<Listed[]>;
  }

  private enqueue(events: readonly NEvent[], tags: boolean, one: boolean): Promise<Listed[][] | Listed[]> {
    return new Promise((resolve, reject) => {
      const job = new Job(events, tags, one, resolve, reject);
      this.queue.push(job);
      this.out.push(job);
      this.pump();
    });
  }

  /**
   * An answer the CPU gave, handed back once every call made before it has been (at once when
   * none is out): a caller's calls are answered in the order made, whichever path answered each.
   */
  inOrder<T>(answer: T): Promise<T> {
    if (this.head === this.out.length) return Promise.resolve(answer);
    return new Promise((resolve) => this.out.push({ done: true, hand: () => resolve(answer) }));
  }

  /** Hands back the answered calls at the front, in call order. */
  private release(): void {
    const out = this.out;
    while (this.head < out.length && out[this.head].done) out[this.head++].hand();
    this.head = compacted(out, this.head);
  }

  private pump(): void {
    const max = this.opts.maxBatch;
    const queue = this.queue;
    while (this.qHead < queue.length && this.running < this.opts.inFlight) {
      const segments: Segment[] = [];
      const events: NEvent[] = [];
      const tags: boolean[] = [];
      // Packed jobs run whole, their words the batch's input: small packs waiting together, as
      // many as maxBatch events hold, are merged into one batch (each need not pay a batch's fixed
      // cost); a pack of MERGE_BELOW events or more runs alone (merging copies it again).
      if (queue[this.qHead].packed !== null) {
        const packs: PackedEvents[] = [];
        let n = 0;
        while (this.qHead < queue.length) {
          const job = queue[this.qHead];
          if (job.packed === null || (packs.length > 0 && (n + job.count > max || job.count >= MERGE_BELOW || n >= MERGE_BELOW))) break;
          queue[this.qHead++] = undefined as unknown as Job;
          job.taken = job.count;
          segments.push({ job, from: 0, to: job.count });
          for (let i = 0; i < job.count; i++) tags.push(job.tags);
          packs.push(job.packed);
          n += job.count;
        }
        this.qHead = compacted(queue, this.qHead);
        this.running++;
        // Each pack was held to limits within the engine's; the merged one lives only in this batch.
        void this.runBatch(segments, PackedEvents.merge(packs, packs[0].limits), tags).finally(() => this.pump());
        continue;
      }
      while (events.length < max && this.qHead < queue.length) {
        const job = queue[this.qHead];
        if (job.packed !== null) break;
        // A retry job's events run in batches of their own, smaller with each failed run.
        if (job.limit !== 0 && events.length > 0) break;
        const from = job.taken;
        const to = Math.min(job.count, from + (job.limit !== 0 ? Math.min(job.limit, max) : max - events.length));
        for (let i = from; i < to; i++) {
          events.push(job.events[i]);
          tags.push(job.tags);
        }
        segments.push({ job, from, to });
        job.taken = to;
        if (to === job.count) queue[this.qHead++] = undefined as unknown as Job;
        if (job.limit !== 0) break;
      }
      this.qHead = compacted(queue, this.qHead);
      this.running++;
      // runBatch lowers `running` before it resolves the callers, so a caller's next match()
      // does not mistake this finished batch for load.
      void this.runBatch(segments, events, tags).finally(() => this.pump());
    }
  }

  private async runBatch(segments: Segment[], events: BatchEvents, tags: boolean[]): Promise<void> {
    let counted = true;
    try {
      await this.runBatchCounted(segments, events, tags, () => {
        this.running--;
        counted = false;
      });
    } finally {
      if (counted) this.running--;
    }
  }

  private async runBatchCounted(segments: Segment[], events: BatchEvents, tags: boolean[], done: () => void): Promise<void> {
    let state: ReturnType<typeof this.gpu> = null;
    let results: (Listed[] | null)[];
    let why: Unanswered = { error: null, unfit: false };
    try {
      state = this.gpu();
      if (state === null) throw new Error('no device');
      const t = performance.now();
      // Adaptive selection compares small calls, so only small batches feed the GPU's cost, and
      // only those that ran alone (not behind other batches).
      const sample = tags.length <= SMALL_BATCH && this.running === 1;
      const answer = await state.run(events, tags);
      results = answer.results;
      if (answer.unfit === true) why = { error: null, unfit: true };
      // The batch's own count: read after an await, a field shared by the batches in flight
      // could be another's.
      this.counters.overflowEvents += answer.overflow;
      if (sample) this.choice.sample('gpu', (performance.now() - t) * 1e3);
      this.counters.batches++;
    } catch (err) {
      // The device was lost (or never came back): the CPU engine answers, nothing is dropped.
      results = nulls(tags.length);
      if (this.onCpu !== null) this.counters.fallbackEvents += tags.length;
      why = { error: err, unfit: false };
    }
    if (state !== null && state.lastStages !== null) this.lastStages = state.lastStages;
    done();
    this.settle(segments, results, why);
  }

  /**
   * Hands each job its events' results; an event the GPU did not answer is answered by the CPU, or
   * without one run again (retry).
   */
  private settle(segments: Segment[], results: (Listed[] | null)[], why: Unanswered): void {
    let k = 0;
    let finished = false;
    const again: Retry[] = [];
    const againTags: boolean[] = [];
    for (const { job, from, to } of segments) {
      for (let i = from; i < to; i++, k++) {
        const ids = results[k];
        // A retry job's event belongs to the call it came from.
        const at = job.origin === null ? { job, i, attempt: 0 } : job.origin[i];
        if (at.job.failed) {
          if (at.job.countOne()) finished = true;
          continue;
        }
        if (ids === null && this.onCpu === null) {
          again.push({ job: at.job, i: at.i, attempt: at.attempt + 1 });
          againTags.push(job.tags);
          continue;
        }
        try {
          if (ids === null) at.job.results[at.i] = this.onCpu!(job.eventAt(i), job.tags);
          else {
            this.counters.gpuEvents++;
            at.job.results[at.i] = ids;
          }
        } catch (err) {
          at.job.fail(err);
        }
        if (at.job.countOne()) finished = true;
      }
    }
    if (again.length > 0) void this.retry(again, againTags, why);
    if (finished) this.release();
  }

  /**
   * Runs the events the GPU did not answer again (no CPU mirror), ahead of every queued job, in
   * batches of their own that shrink with each failed run (an overflow of the batch's pairs
   * fails every event of it; fewer events, fewer pairs), after a new device is up where the old
   * one was lost (that wait costs no attempt). An event whose runs failed MAX_RETRIES times fails
   * its call, as does every event of a state the device cannot bind or with no device to run on.
   */
  private async retry(again: Retry[], againTags: boolean[], why: Unanswered): Promise<void> {
    this.retrying++;
    let back = true;
    try {
      // No device now: it was lost, and the wait for a new one costs no attempt.
      if (this.gpu() === null) {
        for (const a of again) a.attempt--;
        back = await this.gpuBack();
      } else if (why.error !== null) back = await this.gpuBack();
    } finally {
      this.retrying--;
    }
    let finished = false;
    const fail = (a: Retry, err: AmbitError): void => {
      a.job.fail(err);
      if (a.job.countOne()) finished = true;
    };
    const runs: Retry[][] = [[], []];
    for (let k = 0; k < again.length; k++) {
      const a = again[k];
      if (a.job.failed) {
        if (a.job.countOne()) finished = true;
      } else if (!back) fail(a, new AmbitError('UNAVAILABLE', 'gpu: no device to run on (lost, and none could be opened), and no CPU mirror to answer'));
      else if (why.unfit) fail(a, new AmbitError('RESOURCE_EXHAUSTED', "gpu: the state exceeds the device's storage binding, and there is no CPU mirror (cpuMirror false) to answer"));
      else if (a.attempt > MAX_RETRIES) fail(a, giveUp(a.attempt, why.error));
      else runs[againTags[k] ? 1 : 0].push(a);
    }
    if (finished) this.release();
    const jobs: Job[] = [];
    for (const tags of [false, true]) {
      const part = runs[tags ? 1 : 0];
      if (part.length === 0) continue;
      this.counters.retriedEvents += part.length;
      // Not a call: it resolves nothing and is not in `out`; settle writes into the calls it came from.
      const job = new Job(part.map((a) => a.job.eventAt(a.i)), tags, false, () => {}, () => {});
      job.origin = part;
      const attempt = Math.max(...part.map((a) => a.attempt));
      job.limit = Math.max(1, this.opts.maxBatch >> (2 * Math.max(0, attempt)));
      jobs.push(job);
    }
    if (jobs.length === 0) return;
    this.queue.splice(this.qHead, 0, ...jobs);
    this.pump();
  }

}
