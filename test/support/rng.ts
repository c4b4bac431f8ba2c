/**
 * A small seeded PRNG for tests (sfc32, seeded through splitmix32), independent of src/ so a
 * change there never changes what the tests generate. Same seed, same sequence, on every run.
 */
export class Rng {
  private a: number;
  private b: number;
  private c: number;
  private d: number;

  constructor(readonly seed: number) {
    let s = seed >>> 0;
    const next = (): number => {
      // splitmix32: spreads a small seed over the four state words.
      s = (s + 0x9e3779b9) >>> 0;
      let z = s;
      z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
      z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
      return (z ^ (z >>> 16)) >>> 0;
    };
    this.a = next();
    this.b = next();
    this.c = next();
    this.d = next();
    for (let i = 0; i < 12; i++) this.u32();
  }

  /** Uniform 32-bit unsigned integer. */
  u32(): number {
    const t = (((this.a + this.b) >>> 0) + this.d) >>> 0;
    this.d = (this.d + 1) >>> 0;
    this.a = this.b ^ (this.b >>> 9);
    this.b = (this.c + (this.c << 3)) >>> 0;
    this.c = ((this.c << 21) | (this.c >>> 11)) >>> 0;
    this.c = (this.c + t) >>> 0;
    return t;
  }

  /** Uniform in [0, 1) with 53 random bits. */
  next(): number {
    return ((this.u32() >>> 5) * 67108864 + (this.u32() >>> 6)) / 9007199254740992;
  }

  /** Uniform integer in [0, n). */
  int(n: number): number {
    return Math.floor(this.next() * n);
  }

  /** Uniform in [lo, hi). */
  range(lo: number, hi: number): number {
    return lo + (hi - lo) * this.next();
  }

  chance(p: number): boolean {
    return this.next() < p;
  }

  pick<T>(xs: readonly T[]): T {
    return xs[this.int(xs.length)];
  }

  /** Log-uniform in [lo, hi]: every order of magnitude equally likely. */
  logUniform(lo: number, hi: number): number {
    return Math.min(hi, Math.max(lo, Math.exp(this.range(Math.log(lo), Math.log(hi)))));
  }

  /** Zipf-like index in [0, n): rank k has weight 1/(k+1)^s. */
  zipf(n: number, s = 1.1): number {
    let total = 0;
    for (let k = 0; k < n; k++) total += 1 / Math.pow(k + 1, s);
    let u = this.next() * total;
    for (let k = 0; k < n; k++) {
      u -= 1 / Math.pow(k + 1, s);
      if (u < 0) return k;
    }
    return n - 1;
  }

  /** A fresh generator derived from this one (for independent sub-streams). */
  fork(): Rng {
    return new Rng(this.u32());
  }
}
