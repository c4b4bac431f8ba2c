/**
 * A tiny SVG line plotter for the result documents: log or linear axes, one polyline per series,
 * a legend. No dependencies; the output is deterministic for the same input (diff-friendly).
 */

export interface Series {
  name: string;
  color: string;
  /** stroke-dasharray, e.g. '6 3'; solid when absent. */
  dash?: string;
  marker?: 'circle' | 'square' | 'triangle' | 'diamond';
  points: readonly (readonly [number, number])[];
}

export interface PlotOptions {
  title: string;
  xLabel: string;
  yLabel: string;
  series: readonly Series[];
  logX?: boolean;
  logY?: boolean;
  width?: number;
  height?: number;
  xFormat?: (x: number) => string;
  yFormat?: (y: number) => string;
}

const PALETTE = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b', '#e377c2', '#7f7f7f', '#bcbd22', '#17becf'];

/** Stable colours for known engine names, the palette for the rest. */
export function engineColor(engine: string, index: number): string {
  const known: Record<string, string> = { fast: '#1f77b4', rtree: '#d62728', gpu: '#2ca02c', reference: '#7f7f7f' };
  return known[engine] ?? PALETTE[(index + 3) % PALETTE.length];
}

export const DASHES = ['', '7 4', '2 3', '9 3 2 3', '4 2'];
export const MARKERS: readonly NonNullable<Series['marker']>[] = ['circle', 'square', 'triangle', 'diamond'];

/** Escapes text for SVG. */
export function esc(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
}

/** A coordinate rounded to 0.1. */
export function num(x: number): string {
  return String(Math.round(x * 10) / 10);
}

export interface Axis {
  map: (v: number) => number;
  ticks: { v: number; major: boolean }[];
}

/** A log axis over whole decades from lo to hi, mapped onto [a, b]. */
export function logAxis(lo: number, hi: number, a: number, b: number): Axis {
  let d0 = Math.floor(Math.log10(lo));
  let d1 = Math.ceil(Math.log10(hi));
  if (d0 === d1) {
    d0 -= 1;
    d1 += 0;
  }
  const map = (v: number): number => a + ((Math.log10(v) - d0) / (d1 - d0)) * (b - a);
  const ticks: { v: number; major: boolean }[] = [];
  const decades = d1 - d0;
  for (let d = d0; d <= d1; d++) {
    ticks.push({ v: 10 ** d, major: true });
    if (d < d1 && decades <= 3) for (const m of [2, 5]) ticks.push({ v: m * 10 ** d, major: false });
  }
  return { map, ticks };
}

function linAxis(lo: number, hi: number, a: number, b: number): Axis {
  if (lo === hi) {
    lo = lo === 0 ? 0 : lo * 0.9;
    hi = hi === 0 ? 1 : hi * 1.1;
  }
  const span = hi - lo;
  const step0 = 10 ** Math.floor(Math.log10(span / 5));
  const step = [1, 2, 5, 10].map((m) => m * step0).find((s) => span / s <= 6) ?? step0 * 10;
  const t0 = Math.floor(lo / step) * step;
  const t1 = Math.ceil(hi / step) * step;
  const map = (v: number): number => a + ((v - t0) / (t1 - t0)) * (b - a);
  const ticks: { v: number; major: boolean }[] = [];
  for (let v = t0; v <= t1 + step / 2; v += step) ticks.push({ v: +v.toPrecision(12), major: true });
  return { map, ticks };
}

function defaultFormat(v: number): string {
  if (v === 0) return '0';
  const a = Math.abs(v);
  if (a >= 1e6 && Number.isInteger(v / 1e6)) return `${v / 1e6}M`;
  if (a >= 1e3 && Number.isInteger(v / 1e3)) return `${v / 1e3}k`;
  if (a >= 1e-3 && a < 1e6) return String(+v.toPrecision(3));
  return v.toExponential(0);
}

function marker(kind: Series['marker'], x: number, y: number, color: string): string {
  switch (kind) {
    case 'square':
      return `<rect x="${num(x - 3)}" y="${num(y - 3)}" width="6" height="6" fill="${color}"/>`;
    case 'triangle':
      return `<path d="M${num(x)} ${num(y - 4)}L${num(x + 4)} ${num(y + 3)}L${num(x - 4)} ${num(y + 3)}Z" fill="${color}"/>`;
    case 'diamond':
      return `<path d="M${num(x)} ${num(y - 4)}L${num(x + 4)} ${num(y)}L${num(x)} ${num(y + 4)}L${num(x - 4)} ${num(y)}Z" fill="${color}"/>`;
    default:
      return `<circle cx="${num(x)}" cy="${num(y)}" r="3" fill="${color}"/>`;
  }
}

export function linePlot(o: PlotOptions): string {
  const width = o.width ?? 760;
  const height = o.height ?? 440;
  const legendW = 200;
  const m = { left: 72, right: legendW + 16, top: 40, bottom: 56 };
  const x0 = m.left;
  const x1 = width - m.right;
  const y0 = height - m.bottom;
  const y1 = m.top;
  const ok = (v: number, log: boolean | undefined): boolean => Number.isFinite(v) && (!log || v > 0);
  const pts = o.series.flatMap((s) => s.points.filter(([x, y]) => ok(x, o.logX) && ok(y, o.logY)));
  const xs = pts.map((p) => p[0]);
  const ys = pts.map((p) => p[1]);
  const xf = o.xFormat ?? defaultFormat;
  const yf = o.yFormat ?? defaultFormat;
  const parts: string[] = [];
  parts.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="Helvetica, Arial, sans-serif" font-size="12">`);
  parts.push(`<rect width="${width}" height="${height}" fill="#ffffff"/>`);
  parts.push(`<text x="${num((x0 + x1) / 2)}" y="22" text-anchor="middle" font-size="14" font-weight="bold">${esc(o.title)}</text>`);
  if (pts.length === 0) {
    parts.push(`<text x="${num((x0 + x1) / 2)}" y="${num((y0 + y1) / 2)}" text-anchor="middle">no data</text></svg>`);
    return `${parts.join('\n')}\n`;
  }
  const xa = o.logX ? logAxis(Math.min(...xs), Math.max(...xs), x0, x1) : linAxis(Math.min(...xs), Math.max(...xs), x0, x1);
  const ya = o.logY ? logAxis(Math.min(...ys), Math.max(...ys), y0, y1) : linAxis(Math.min(0, ...ys), Math.max(...ys), y0, y1);

  // Grid and ticks.
  for (const t of xa.ticks) {
    const x = xa.map(t.v);
    parts.push(`<line x1="${num(x)}" y1="${num(y1)}" x2="${num(x)}" y2="${num(y0)}" stroke="${t.major ? '#d0d0d0' : '#eeeeee'}"/>`);
    if (t.major || xa.ticks.length <= 12) parts.push(`<text x="${num(x)}" y="${num(y0 + 16)}" text-anchor="middle" fill="${t.major ? '#000' : '#777'}">${esc(xf(t.v))}</text>`);
  }
  for (const t of ya.ticks) {
    const y = ya.map(t.v);
    parts.push(`<line x1="${num(x0)}" y1="${num(y)}" x2="${num(x1)}" y2="${num(y)}" stroke="${t.major ? '#d0d0d0' : '#eeeeee'}"/>`);
    parts.push(`<text x="${num(x0 - 6)}" y="${num(y + 4)}" text-anchor="end" fill="${t.major ? '#000' : '#777'}">${esc(yf(t.v))}</text>`);
  }
  parts.push(`<rect x="${num(x0)}" y="${num(y1)}" width="${num(x1 - x0)}" height="${num(y0 - y1)}" fill="none" stroke="#000"/>`);
  parts.push(`<text x="${num((x0 + x1) / 2)}" y="${num(height - 14)}" text-anchor="middle">${esc(o.xLabel)}</text>`);
  parts.push(`<text transform="translate(18 ${num((y0 + y1) / 2)}) rotate(-90)" text-anchor="middle">${esc(o.yLabel)}</text>`);

  // Series: a missing or non-positive point (on a log axis) breaks the line.
  for (const s of o.series) {
    const segs: string[][] = [[]];
    const marks: string[] = [];
    for (const [x, y] of [...s.points].sort((a, b) => a[0] - b[0])) {
      if (!ok(x, o.logX) || !ok(y, o.logY)) {
        segs.push([]);
        continue;
      }
      const px = xa.map(x);
      const py = ya.map(y);
      segs[segs.length - 1].push(`${num(px)},${num(py)}`);
      marks.push(marker(s.marker, px, py, s.color));
    }
    for (const seg of segs) {
      if (seg.length > 1) parts.push(`<polyline points="${seg.join(' ')}" fill="none" stroke="${s.color}" stroke-width="1.8"${s.dash ? ` stroke-dasharray="${s.dash}"` : ''}/>`);
    }
    parts.push(...marks);
  }

  // Legend.
  const lx = x1 + 16;
  o.series.forEach((s, i) => {
    const ly = y1 + 8 + i * 18;
    parts.push(`<line x1="${lx}" y1="${ly}" x2="${lx + 28}" y2="${ly}" stroke="${s.color}" stroke-width="1.8"${s.dash ? ` stroke-dasharray="${s.dash}"` : ''}/>`);
    parts.push(marker(s.marker, lx + 14, ly, s.color));
    parts.push(`<text x="${lx + 36}" y="${ly + 4}">${esc(s.name)}</text>`);
  });
  parts.push('</svg>');
  return `${parts.join('\n')}\n`;
}
