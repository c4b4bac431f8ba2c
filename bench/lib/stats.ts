/** Summary statistics of timing samples. */

export interface Summary {
  n: number;
  min: number;
  median: number;
  p99: number;
  mean: number;
  std: number;
  max: number;
}

/** Nearest-rank percentile of sorted data (p in [0, 100]). */
export function percentile(sorted: ArrayLike<number>, p: number): number {
  const n = sorted.length;
  if (n === 0) return NaN;
  const rank = Math.ceil((p / 100) * n);
  return sorted[Math.min(n - 1, Math.max(0, rank - 1))];
}

/** Summarises samples; `scale` converts units (e.g. 1e-6 for ns → ms). */
export function summarize(samples: ArrayLike<number>, scale = 1): Summary {
  const n = samples.length;
  if (n === 0) return { n: 0, min: NaN, median: NaN, p99: NaN, mean: NaN, std: NaN, max: NaN };
  const s = Float64Array.from(samples as ArrayLike<number>).sort();
  let sum = 0;
  for (let i = 0; i < n; i++) sum += s[i];
  const mean = sum / n;
  let sq = 0;
  for (let i = 0; i < n; i++) sq += (s[i] - mean) ** 2;
  const median = n % 2 === 1 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
  return {
    n,
    min: s[0] * scale,
    median: median * scale,
    p99: percentile(s, 99) * scale,
    mean: mean * scale,
    std: Math.sqrt(sq / n) * scale,
    max: s[n - 1] * scale,
  };
}

/** FNV-1a over each event's sorted ids: equal checksums = identical answers. */
export function checksum(results: readonly (readonly string[])[]): { checksum: string; avgMatches: number } {
  let h = 0x811c9dc5;
  let total = 0;
  for (const ids of results) {
    total += ids.length;
    const sorted = [...ids].sort();
    for (const id of sorted) {
      for (let i = 0; i < id.length; i++) h = Math.imul(h ^ id.charCodeAt(i), 0x01000193);
      h = Math.imul(h ^ 0x2c, 0x01000193);
    }
    h = Math.imul(h ^ 0x0a, 0x01000193);
  }
  return { checksum: (h >>> 0).toString(16).padStart(8, '0'), avgMatches: results.length === 0 ? 0 : total / results.length };
}
