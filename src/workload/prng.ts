/**
 * Seeded randomness for workloads and benchmarks: every run with the same seed sees the same data.
 * sfc32 (Chris Doty-Humphrey's Small Fast Counting generator, 128-bit state, passes PractRand) is
 * seeded through splitmix32 so that nearby seeds give unrelated streams. 32-bit integer arithmetic
 * only (Math.imul, |0), which V8 keeps in registers.
 */

/** A splitmix32 sequence: a tiny generator used to expand one number into a full state. */
export function splitmix32(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x9e3779b9) | 0;
    let z = s;
    z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
    z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
    return (z ^ (z >>> 16)) >>> 0;
  };
}

/** Mixes a seed and a stream number into one 32-bit seed, so components draw from independent streams. */
export function streamSeed(seed: number, stream: number): number {
  const next = splitmix32((seed >>> 0) ^ Math.imul((stream + 1) >>> 0, 0x27d4eb2f));
  next();
  return next();
}

const TWO_POW_32 = 4294967296;

export class Prng {
  private a: number;
  private b: number;
  private c: number;
  private d: number;
  // Box–Muller yields pairs; the second one is kept for the next call.
  private spare = 0;
  private hasSpare = false;

  /** `stream` selects an independent sequence for the same seed (0 = the seed's own). */
  constructor(seed: number, stream = 0) {
    const next = splitmix32(stream === 0 ? seed : streamSeed(seed, stream));
    this.a = next() | 0;
    this.b = next() | 0;
    this.c = next() | 0;
    this.d = next() | 0;
    for (let i = 0; i < 12; i++) this.u32();
  }

  /** Uniform unsigned 32-bit integer. */
  u32(): number {
    const t = (((this.a + this.b) | 0) + this.d) | 0;
    this.d = (this.d + 1) | 0;
    this.a = this.b ^ (this.b >>> 9);
    this.b = (this.c + (this.c << 3)) | 0;
    this.c = (this.c << 21) | (this.c >>> 11);
    this.c = (this.c + t) | 0;
    return t >>> 0;
  }

  /** Uniform in [0, 1), 32 bits of resolution (3 µm over a 13 km city, 0.1 mm over Italy). */
  float(): number {
    return this.u32() / TWO_POW_32;
  }

  /** Uniform integer in [lo, hiInclusive]. */
  int(lo: number, hiInclusive: number): number {
    return lo + Math.floor(this.float() * (hiInclusive - lo + 1));
  }

  pick<T>(arr: readonly T[]): T {
    if (arr.length === 0) throw new RangeError('prng: pick from an empty array');
    return arr[Math.floor(this.float() * arr.length)];
  }

  /** True with probability p. */
  chance(p: number): boolean {
    return this.float() < p;
  }

  /** Standard normal (mean 0, sd 1), Box–Muller. */
  gaussian(): number {
    if (this.hasSpare) {
      this.hasSpare = false;
      return this.spare;
    }
    let u = 0;
    while (u === 0) u = this.float();
    const v = this.float();
    const r = Math.sqrt(-2 * Math.log(u));
    this.spare = r * Math.sin(2 * Math.PI * v);
    this.hasSpare = true;
    return r * Math.cos(2 * Math.PI * v);
  }

  /** In-place Fisher–Yates shuffle. */
  shuffle<T>(arr: T[]): T[] {
    for (let i = arr.length - 1; i > 0; i--) {
      const j = Math.floor(this.float() * (i + 1));
      const t = arr[i];
      arr[i] = arr[j];
      arr[j] = t;
    }
    return arr;
  }
}

/**
 * Zipf over ranks 0..n-1: P(k) ∝ 1 / (k+1)^s. The CDF is computed once; a draw is one binary
 * search (n = 100 hotspots or names: 7 comparisons).
 */
export class Zipf {
  readonly n: number;
  readonly exponent: number;
  private readonly cdf: Float64Array;

  constructor(n: number, exponent = 1.0) {
    if (!Number.isInteger(n) || n < 1) throw new RangeError(`zipf: n must be an integer >= 1, got ${n}`);
    if (!Number.isFinite(exponent) || exponent < 0) throw new RangeError(`zipf: exponent must be finite and >= 0, got ${exponent}`);
    this.n = n;
    this.exponent = exponent;
    this.cdf = new Float64Array(n);
    let sum = 0;
    for (let k = 0; k < n; k++) {
      sum += 1 / Math.pow(k + 1, exponent);
      this.cdf[k] = sum;
    }
    for (let k = 0; k < n; k++) this.cdf[k] /= sum;
    this.cdf[n - 1] = 1; // no rounding gap at the top
  }

  /** Probability of rank k. */
  probability(k: number): number {
    return k === 0 ? this.cdf[0] : this.cdf[k] - this.cdf[k - 1];
  }

  sample(rng: Prng): number {
    const u = rng.float();
    let lo = 0;
    let hi = this.n - 1;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.cdf[mid] > u) hi = mid;
      else lo = mid + 1;
    }
    return lo;
  }
}

/**
 * Zipf over ranks 0..n-1 like `Zipf`, drawn in O(1) by Walker's alias method (one uniform number:
 * its integer part picks a column, its fraction the column's rank or its alias), for generators
 * that draw billions of times from large n (a binary search over a 1M-entry table misses cache at
 * every step). Not the same draws as `Zipf` for the same stream.
 */
export class ZipfAlias {
  readonly n: number;
  private readonly prob: Float64Array;
  private readonly alias: Int32Array;

  constructor(n: number, exponent = 1.0) {
    if (!Number.isInteger(n) || n < 1) throw new RangeError(`zipf: n must be an integer >= 1, got ${n}`);
    if (!Number.isFinite(exponent) || exponent < 0) throw new RangeError(`zipf: exponent must be finite and >= 0, got ${exponent}`);
    this.n = n;
    const p = new Float64Array(n);
    let sum = 0;
    for (let k = 0; k < n; k++) sum += p[k] = 1 / Math.pow(k + 1, exponent);
    // Scaled so the mean column holds 1; columns below 1 are topped up from those above.
    for (let k = 0; k < n; k++) p[k] = (p[k] * n) / sum;
    this.prob = new Float64Array(n);
    this.alias = new Int32Array(n);
    const small = new Int32Array(n);
    const large = new Int32Array(n);
    let ns = 0;
    let nl = 0;
    for (let k = 0; k < n; k++) {
      if (p[k] < 1) small[ns++] = k;
      else large[nl++] = k;
    }
    while (ns > 0 && nl > 0) {
      const s = small[--ns];
      const l = large[nl - 1];
      this.prob[s] = p[s];
      this.alias[s] = l;
      p[l] -= 1 - p[s];
      if (p[l] < 1) {
        nl--;
        small[ns++] = l;
      }
    }
    // What is left holds 1 up to rounding.
    while (nl > 0) this.prob[large[--nl]] = 1;
    while (ns > 0) this.prob[small[--ns]] = 1;
  }

  sample(rng: Prng): number {
    const u = rng.float() * this.n;
    const i = Math.floor(u);
    return u - i < this.prob[i] ? i : this.alias[i];
  }
}

/** Draws an index from unnormalised weights through a precomputed cumulative table. */
export function sampleCumulative(cum: Float64Array, rng: Prng): number {
  const u = rng.float() * cum[cum.length - 1];
  let lo = 0;
  let hi = cum.length - 1;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (cum[mid] > u) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}
