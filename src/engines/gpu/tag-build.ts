/**
 * The GPU tag index's build on the host (TagMatch §3.2): Bloom signatures and balanced
 * partitioning (Algorithm 1), on the calling thread or spread over worker threads
 * (tag-worker.ts) that share the signature and order arrays. Either way the result is the
 * same: every part is split by the same rule whoever splits it, and partitions are listed by their
 * first set.
 */
import { TagWorkerPool } from './tag-pool.js';

/** The paper's signatures: 192 bits, 7 a tag. */
export const WORDS = 6;
export const BITS = 192;
const HASHES = 7;
const BITS_PER_2_32 = BITS / 2 ** 32;

function fmix32(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

/**
 * ORs tag `t`'s HASHES bits into `sig[at .. at+WORDS)`: each position from its own mix of the tag
 * (fmix32 of the tag's hash plus a step per position), scaled by its high bits. Double hashing
 * (positions h1 + i·h2 taken modulo BITS, or scaled) leaves a pattern set by two numbers that
 * BITS quantises: about BITS² patterns taken modulo (37k at 192 bits), 150k scaled, so one tag
 * in tens of thousands passes for another (measured: 146 false hits a query at 2M entries and
 * 2,900 at 42M with the modulo; 0.15 at 2M now).
 */
export function addTagBits(sig: Uint32Array, at: number, t: number): void {
  const h = fmix32(Math.imul(t, 0x9e3779b1) ^ 0x7f4a7c15);
  for (let i = 1; i <= HASHES; i++) {
    const b = Math.floor(fmix32((h + Math.imul(i, 0x85ebca77)) | 0) * BITS_PER_2_32);
    sig[at + (b >>> 5)] |= 1 << (b & 31);
  }
}

/** The signature of `tags[from, to)` into `sig[at .. at+6)`. */
export function signatureInto(sig: Uint32Array, at: number, tags: Uint32Array, from: number, to: number): void {
  for (let w = 0; w < WORDS; w++) sig[at + w] = 0;
  for (let k = from; k < to; k++) addTagBits(sig, at, tags[k]);
}

/** Signatures of sets [from, to) of (offsets, tags), AoS, WORDS words a set. */
export function signaturesOf(sig: Uint32Array, offsets: Uint32Array, tags: Uint32Array, from: number, to: number): void {
  for (let u = from; u < to; u++) signatureInto(sig, WORDS * u, tags, offsets[u], offsets[u + 1]);
}

/** A part of the signature array still to split: [lo, hi), whether it lies in a partition, the bits used on its way. */
export interface Part {
  lo: number;
  hi: number;
  inPart: boolean;
  used: Uint8Array;
}

export interface SplitRule {
  maxPartition: number;
  leafSize: number;
}

/**
 * One step of Algorithm 1 on `part`: whether it becomes a partition (the first part on its way of
 * at most maxPartition sets), and the parts to split next. Sets are split on the unused bit closest
 * to half of a sample of the part (up to 1024 sets); those without it go first. Splitting goes on
 * inside a partition down to leafSize sets so that neighbouring sets share bits. Signatures and
 * `order` move together.
 */
export function splitStep(sig: Uint32Array, order: Uint32Array, part: Part, rule: SplitRule, counts: Float64Array): { partition: boolean; next: Part[] } {
  const { lo, hi, inPart, used } = part;
  const size = hi - lo;
  let partition = false;
  let isPart = inPart;
  if (!inPart && size <= rule.maxPartition) {
    partition = true;
    isPart = true;
  }
  const limit = isPart ? Math.min(rule.leafSize, rule.maxPartition) : rule.maxPartition;
  if (size <= limit || size < 2) return { partition, next: [] };
  counts.fill(0);
  const step = Math.max(1, Math.floor(size / 1024));
  let sampled = 0;
  for (let i = lo; i < hi; i += step) {
    const a = WORDS * i;
    for (let w = 0; w < WORDS; w++) {
      let x = sig[a + w];
      while (x !== 0) {
        const low = x & -x;
        counts[32 * w + (31 - Math.clz32(low))]++;
        x ^= low;
      }
    }
    sampled++;
  }
  let pivot = -1;
  let best = Infinity;
  for (let b = 0; b < BITS; b++) {
    if (used[b] !== 0 || counts[b] === 0 || counts[b] === sampled) continue;
    const d = Math.abs(counts[b] - sampled / 2);
    if (d < best) {
      best = d;
      pivot = b;
    }
  }
  // No bit splits the sample: the part stays whole (a partition of its own if it is none yet).
  if (pivot < 0) return { partition: !isPart || partition, next: [] };
  const pw = pivot >>> 5;
  const pb = 1 << (pivot & 31);
  let i = lo;
  let j = hi - 1;
  for (;;) {
    while (i <= j && (sig[WORDS * i + pw] & pb) === 0) i++;
    while (i <= j && (sig[WORDS * j + pw] & pb) !== 0) j--;
    if (i >= j) break;
    const a = WORDS * i;
    const c = WORDS * j;
    for (let w = 0; w < WORDS; w++) {
      const x = sig[a + w];
      sig[a + w] = sig[c + w];
      sig[c + w] = x;
    }
    const x = order[i];
    order[i] = order[j];
    order[j] = x;
    i++;
    j--;
  }
  const mid = i;
  const nextUsed = used.slice();
  nextUsed[pivot] = 1;
  // The sample misled (every set on one side): the bit is marked used and the part tried again.
  if (mid === lo || mid === hi) return { partition, next: [{ lo, hi, inPart: isPart, used: nextUsed }] };
  return { partition, next: [{ lo, hi: mid, inPart: isPart, used: nextUsed }, { lo: mid, hi, inPart: isPart, used: nextUsed }] };
}

/** Splits `root` down to its leaves; the partitions found, as (first set, sets) pairs. */
export function splitAll(sig: Uint32Array, order: Uint32Array, root: Part, rule: SplitRule, onSets?: (n: number) => void): number[] {
  const parts: number[] = [];
  const counts = new Float64Array(BITS);
  const stack: Part[] = [root];
  while (stack.length > 0) {
    const part = stack.pop()!;
    const r = splitStep(sig, order, part, rule, counts);
    if (r.partition) parts.push(part.lo, part.hi - part.lo);
    if (r.next.length === 0) onSets?.(part.hi - part.lo);
    for (let k = r.next.length - 1; k >= 0; k--) stack.push(r.next[k]);
  }
  return parts;
}

/**
 * A Uint32Array that is the whole of a SharedArrayBuffer and holds `a`'s values: `a` itself when
 * it is one already, else a copy. Workers see only the buffer, so a view into part of one is
 * copied too.
 */
export function shared(a: Uint32Array): Uint32Array {
  if (a.buffer instanceof SharedArrayBuffer && a.byteOffset === 0 && a.byteLength === a.buffer.byteLength) return a;
  const s = new Uint32Array(new SharedArrayBuffer(a.byteLength));
  s.set(a);
  return s;
}

export interface HostBuild {
  /** Signatures in partition order, AoS. */
  sig: Uint32Array;
  /** Distinct set of each signature position. */
  order: Uint32Array;
  /** Partitions as (first set, sets), by first set. */
  parts: [number, number][];
  ms: { signatures: number; partitioning: number };
}

/**
 * Signatures and partitions of the `m` sets of (offsets, tags). With `threads` > 1 and enough
 * sets, worker threads compute the signatures in ranges and split parts: a part larger than
 * `m / (4 * threads)` is split one step at a time (its halves are queued), a smaller one is split
 * whole by one worker.
 */
export async function hostBuild(offsets: Uint32Array, tags: Uint32Array, m: number, rule: SplitRule, threads: number, progress?: (phase: string, done: number) => void): Promise<HostBuild> {
  const parallel = threads > 1 && m >= 1 << 16;
  const sig = parallel ? new Uint32Array(new SharedArrayBuffer(4 * WORDS * Math.max(1, m))) : new Uint32Array(WORDS * Math.max(1, m));
  const order = parallel ? new Uint32Array(new SharedArrayBuffer(4 * m)) : new Uint32Array(m);
  for (let u = 0; u < m; u++) order[u] = u;
  const root: Part = { lo: 0, hi: m, inPart: false, used: new Uint8Array(BITS) };
  const flat: number[] = [];
  let t0 = performance.now();
  const ms = { signatures: 0, partitioning: 0 };
  if (!parallel) {
    signaturesOf(sig, offsets, tags, 0, m);
    ms.signatures = performance.now() - t0;
    progress?.('signatures', m);
    t0 = performance.now();
    let done = 0;
    let told = 0;
    const found = splitAll(sig, order, root, rule, (n) => {
      done += n;
      if (done - told >= 1 << 20) progress?.('partitioning', (told = done));
    });
    // One at a time: spreading tens of thousands of partitions into one call overflows the stack.
    for (const x of found) flat.push(x);
  } else {
    const pool = await TagWorkerPool.start(threads, { kind: 'init', sig: sig.buffer as SharedArrayBuffer, order: order.buffer as SharedArrayBuffer, offsets: shared(offsets).buffer as SharedArrayBuffer, tags: shared(tags).buffer as SharedArrayBuffer });
    try {
      const chunk = Math.ceil(m / (4 * threads));
      const sigs: Promise<unknown>[] = [];
      for (let from = 0; from < m; from += chunk) sigs.push(pool.run({ kind: 'signatures', from, to: Math.min(m, from + chunk) }));
      await Promise.all(sigs);
      ms.signatures = performance.now() - t0;
      progress?.('signatures', m);
      t0 = performance.now();
      const big = Math.max(rule.leafSize, Math.ceil(m / (4 * threads)));
      let done = 0;
      const split = async (part: Part): Promise<void> => {
        if (part.hi - part.lo > big) {
          const r = await pool.run({ kind: 'step', part, rule });
          if (r.kind !== 'step') throw new Error('tag index build: a worker answered a step with ' + r.kind);
          if (r.partition) flat.push(part.lo, part.hi - part.lo);
          if (r.next.length === 0) done += part.hi - part.lo;
          await Promise.all(r.next.map(split));
        } else {
          const r = await pool.run({ kind: 'all', part, rule });
          if (r.kind !== 'all') throw new Error('tag index build: a worker answered a subtree with ' + r.kind);
          for (const x of r.parts) flat.push(x);
          done += part.hi - part.lo;
          progress?.('partitioning', done);
        }
      };
      await split(root);
    } finally {
      await pool.close();
    }
  }
  const parts: [number, number][] = [];
  for (let k = 0; k < flat.length; k += 2) parts.push([flat[k], flat[k + 1]]);
  parts.sort((a, b) => a[0] - b[0]);
  ms.partitioning = performance.now() - t0;
  progress?.('partitioning', m);
  return { sig, order, parts, ms };
}
