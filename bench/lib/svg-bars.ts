/**
 * Grouped bar charts for the result documents, in the style of svg.ts (same fonts, grid, legend on
 * the right): a group per x label, a bar per series, optional whiskers (e.g. min–max), marker-only
 * series (e.g. max) and horizontal reference lines (targets). No dependencies; deterministic output.
 */
import { type Axis as BaseAxis, esc, logAxis as baseLogAxis, num } from './svg.js';

export interface BarSeries {
  name: string;
  color: string;
  /** 'bar' (default): a bar from the axis' bottom; 'marker': a diamond at the value, just right of a bar (see `over`); markers get no value label. */
  kind?: 'bar' | 'marker';
  /** For a marker: the index (in `series`) of the bar it is drawn beside; default the last bar series. */
  over?: number;
}

export interface BarValue {
  y: number;
  /** Whisker from lo to hi, drawn over the bar. */
  lo?: number;
  hi?: number;
}

export interface BarGroup {
  /** One line of the x label per entry. */
  label: readonly string[];
  /** One value per series (same order); null where that series has none. */
  values: readonly (BarValue | null)[];
}

export interface RefLine {
  y: number;
  label: string;
  color: string;
}

export interface BarPlotOptions {
  title: string;
  yLabel: string;
  series: readonly BarSeries[];
  groups: readonly BarGroup[];
  lines?: readonly RefLine[];
  /** Extra legend lines (plain text), e.g. what the whiskers mean. */
  notes?: readonly string[];
  logY?: boolean;
  /** Print each bar's value above it. */
  valueLabels?: boolean;
  height?: number;
  yFormat?: (y: number) => string;
}

interface Axis extends BaseAxis {
  /** The axis value bars grow from. */
  bottom: number;
}

function logAxis(lo: number, hi: number, a: number, b: number): Axis {
  const axis = baseLogAxis(lo, hi, a, b);
  return { ...axis, bottom: axis.ticks[0].v };
}

function linAxis(hi: number, a: number, b: number): Axis {
  const top = hi > 0 ? hi : 1;
  const step0 = 10 ** Math.floor(Math.log10(top / 5));
  const step = [1, 2, 5, 10].map((m) => m * step0).find((s) => top / s <= 6) ?? step0 * 10;
  const t1 = Math.ceil(top / step) * step;
  const map = (v: number): number => a + (v / t1) * (b - a);
  const ticks: { v: number; major: boolean }[] = [];
  for (let v = 0; v <= t1 + step / 2; v += step) ticks.push({ v: +v.toPrecision(12), major: true });
  return { map, ticks, bottom: 0 };
}

export function axisFormat(v: number): string {
  if (v === 0) return '0';
  const a = Math.abs(v);
  if (a >= 1e6) return `${+(v / 1e6).toPrecision(3)}M`;
  if (a >= 1e3) return `${+(v / 1e3).toPrecision(3)}k`;
  if (a >= 1e-3) return String(+v.toPrecision(3));
  return v.toExponential(0);
}

function diamond(x: number, y: number, color: string): string {
  return `<path d="M${num(x)} ${num(y - 5)}L${num(x + 5)} ${num(y)}L${num(x)} ${num(y + 5)}L${num(x - 5)} ${num(y)}Z" fill="${color}" stroke="#ffffff" stroke-width="0.8"/>`;
}

export function barPlot(o: BarPlotOptions): string {
  const legendW = 220;
  const groupW = 104;
  const labelLines = Math.max(1, ...o.groups.map((g) => g.label.length));
  const m = { left: 72, right: legendW + 16, top: 40, bottom: 40 + 14 * labelLines };
  const width = Math.max(760, m.left + m.right + groupW * o.groups.length);
  const height = o.height ?? 440;
  const x0 = m.left;
  const x1 = width - m.right;
  const y0 = height - m.bottom;
  const y1 = m.top;
  const yf = o.yFormat ?? axisFormat;
  const ok = (v: number | undefined): v is number => v !== undefined && Number.isFinite(v) && (!o.logY || v > 0);
  const ys: number[] = [];
  for (const g of o.groups) for (const v of g.values) if (v !== null) for (const y of [v.y, v.lo, v.hi]) if (ok(y)) ys.push(y);
  for (const l of o.lines ?? []) if (ok(l.y)) ys.push(l.y);

  const parts: string[] = [];
  parts.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="Helvetica, Arial, sans-serif" font-size="12">`);
  parts.push(`<rect width="${width}" height="${height}" fill="#ffffff"/>`);
  parts.push(`<text x="${num((x0 + x1) / 2)}" y="22" text-anchor="middle" font-size="14" font-weight="bold">${esc(o.title)}</text>`);
  if (ys.length === 0 || o.groups.length === 0) {
    parts.push(`<text x="${num((x0 + x1) / 2)}" y="${num((y0 + y1) / 2)}" text-anchor="middle">no data</text></svg>`);
    return `${parts.join('\n')}\n`;
  }
  // Headroom for the value labels above the highest bar.
  const ya = o.logY ? logAxis(Math.min(...ys), Math.max(...ys) * 1.6, y0, y1) : linAxis(Math.max(...ys) * 1.08, y0, y1);

  for (const t of ya.ticks) {
    const y = ya.map(t.v);
    parts.push(`<line x1="${num(x0)}" y1="${num(y)}" x2="${num(x1)}" y2="${num(y)}" stroke="${t.major ? '#d0d0d0' : '#eeeeee'}"/>`);
    parts.push(`<text x="${num(x0 - 6)}" y="${num(y + 4)}" text-anchor="end" fill="${t.major ? '#000' : '#777'}">${esc(yf(t.v))}</text>`);
  }
  parts.push(`<text transform="translate(18 ${num((y0 + y1) / 2)}) rotate(-90)" text-anchor="middle">${esc(o.yLabel)}</text>`);

  const bars = o.series.map((s, i) => ({ s, i })).filter((x) => (x.s.kind ?? 'bar') === 'bar');
  const gw = (x1 - x0) / o.groups.length;
  const bw = Math.min(34, (gw * 0.76) / Math.max(1, bars.length));
  o.groups.forEach((g, gi) => {
    const cx = x0 + gw * (gi + 0.5);
    if (gi > 0) parts.push(`<line x1="${num(x0 + gw * gi)}" y1="${num(y1)}" x2="${num(x0 + gw * gi)}" y2="${num(y0)}" stroke="#eeeeee"/>`);
    g.label.forEach((line, li) => {
      parts.push(`<text x="${num(cx)}" y="${num(y0 + 16 + 14 * li)}" text-anchor="middle"${li > 0 ? ' fill="#555"' : ''}>${esc(line)}</text>`);
    });
    const barX = (bi: number): number => cx + (bi - bars.length / 2) * bw;
    bars.forEach(({ s, i }, bi) => {
      const v = g.values[i];
      if (v === null || v === undefined || !ok(v.y)) return;
      const bx = barX(bi);
      const top = ya.map(v.y);
      parts.push(`<rect x="${num(bx + 1)}" y="${num(top)}" width="${num(bw - 2)}" height="${num(y0 - top)}" fill="${s.color}"/>`);
      let labelY = top;
      if (ok(v.lo) && ok(v.hi)) {
        const mx = bx + bw / 2;
        const ylo = ya.map(v.lo);
        const yhi = ya.map(v.hi);
        parts.push(`<line x1="${num(mx)}" y1="${num(ylo)}" x2="${num(mx)}" y2="${num(yhi)}" stroke="#000" stroke-width="1.2"/>`);
        for (const yy of [ylo, yhi]) parts.push(`<line x1="${num(mx - 4)}" y1="${num(yy)}" x2="${num(mx + 4)}" y2="${num(yy)}" stroke="#000" stroke-width="1.2"/>`);
        labelY = Math.min(labelY, yhi);
      }
      if (o.valueLabels) parts.push(`<text x="${num(bx + bw / 2)}" y="${num(labelY - 4)}" text-anchor="middle" font-size="10">${esc(yf(v.y))}</text>`);
    });
    o.series.forEach((s, i) => {
      if (s.kind !== 'marker') return;
      const v = g.values[i];
      if (v === null || v === undefined || !ok(v.y)) return;
      const bi = s.over === undefined ? bars.length - 1 : Math.max(0, bars.findIndex((b) => b.i === s.over));
      // Just right of that bar, clear of its value label.
      parts.push(diamond(barX(bi) + bw + 4, ya.map(v.y), s.color));
    });
  });
  for (const l of o.lines ?? []) {
    if (!ok(l.y)) continue;
    const y = ya.map(l.y);
    parts.push(`<line x1="${num(x0)}" y1="${num(y)}" x2="${num(x1)}" y2="${num(y)}" stroke="${l.color}" stroke-width="1.5" stroke-dasharray="7 4"/>`);
  }
  parts.push(`<rect x="${num(x0)}" y="${num(y1)}" width="${num(x1 - x0)}" height="${num(y0 - y1)}" fill="none" stroke="#000"/>`);

  // Legend.
  const lx = x1 + 16;
  let ly = y1 + 8;
  for (const s of o.series) {
    if (s.kind === 'marker') parts.push(diamond(lx + 14, ly, s.color));
    else parts.push(`<rect x="${lx + 4}" y="${ly - 6}" width="20" height="12" fill="${s.color}"/>`);
    parts.push(`<text x="${lx + 36}" y="${ly + 4}">${esc(s.name)}</text>`);
    ly += 18;
  }
  for (const l of o.lines ?? []) {
    parts.push(`<line x1="${lx}" y1="${ly}" x2="${lx + 28}" y2="${ly}" stroke="${l.color}" stroke-width="1.5" stroke-dasharray="7 4"/>`);
    parts.push(`<text x="${lx + 36}" y="${ly + 4}">${esc(l.label)}</text>`);
    ly += 18;
  }
  for (const n of o.notes ?? []) {
    parts.push(`<text x="${lx}" y="${ly + 4}" fill="#555">${esc(n)}</text>`);
    ly += 16;
  }
  parts.push('</svg>');
  return `${parts.join('\n')}\n`;
}
