/** Number formatting and aligned Markdown tables (readable in a terminal, pasteable into docs). */

/** `digits` significant digits, no exponent for everyday magnitudes; '–' for missing values. */
export function sig(x: number | null | undefined, digits = 3): string {
  if (x === null || x === undefined || !Number.isFinite(x)) return '–';
  if (x === 0) return '0';
  const a = Math.abs(x);
  if (a >= 10 ** digits) return Math.round(x).toLocaleString('en-US');
  if (a < 1e-4) return x.toExponential(digits - 1);
  return String(+x.toPrecision(digits));
}

export function mib(bytes: number | null | undefined): string {
  return bytes === null || bytes === undefined ? '–' : sig(bytes / 2 ** 20);
}

/** An area fraction as a percentage: 1e-4 → 0.01%. */
export function pct(fraction: number): string {
  return `${+(fraction * 100).toPrecision(6)}%`;
}

/** 1000 → 1k, 250000 → 250k, 1000000 → 1M. */
export function count(n: number): string {
  if (n >= 1e6 && n % 1e5 === 0) return `${n / 1e6}M`;
  if (n >= 1e3 && n % 100 === 0) return `${n / 1e3}k`;
  return String(n);
}

const NUMERIC = /^[-+]?[\d,.]+(e[-+]?\d+)?[%kM×x]?$|^–$/;

/** A Markdown pipe table with padded columns; numeric-looking columns are right-aligned. */
export function table(headers: readonly string[], rows: readonly (readonly string[])[]): string {
  const cols = headers.length;
  const width = headers.map((h, c) => Math.max(h.length, ...rows.map((r) => (r[c] ?? '').length), 3));
  const right = headers.map((_, c) => rows.length > 0 && rows.every((r) => NUMERIC.test(r[c] ?? '')));
  const line = (cells: readonly string[]): string =>
    `| ${Array.from({ length: cols }, (_, c) => (right[c] ? (cells[c] ?? '').padStart(width[c]) : (cells[c] ?? '').padEnd(width[c]))).join(' | ')} |`;
  const rule = `|${width.map((w, c) => (right[c] ? `${'-'.repeat(w + 1)}:` : `${'-'.repeat(w + 2)}`)).join('|')}|`;
  return [line(headers), rule, ...rows.map(line)].join('\n');
}
