/**
 * Self-check of the workload generator against the papers' numbers: radii per area fraction
 * (CLCB §5: Milan 24/76/240/759 m, Italy 1/3/10/31 km, Pisa 7/22/71/225 m), generation time of the
 * default scenario, content selectivity measured with the reference semantics (target 0.5%), and
 * determinism. Exits 1 when a check fails.
 *
 *   node dist/bench/workload-check.js [--subs N] [--seed N]
 */
import {
  DEFAULT_WORKLOAD,
  WorkloadSource,
  generateCcmWorkload,
  generateWorkload,
  measureSelectivity,
  radiusForAreaFraction,
} from '../src/workload/index.js';
import type { Subscription } from '../src/model/types.js';
import { pct, sig, table } from './lib/format.js';

function arg(name: string, fallback: number): number {
  const i = process.argv.indexOf(`--${name}`);
  if (i < 0) return fallback;
  const n = Number(process.argv[i + 1]);
  if (!Number.isInteger(n) || n < 0) {
    process.stderr.write(`workload-check: --${name} must be a non-negative integer\n`);
    process.exit(2);
  }
  return n;
}

const subs = arg('subs', DEFAULT_WORKLOAD.subscriptions);
const seed = arg('seed', DEFAULT_WORKLOAD.seed);
let failed = 0;
const check = (ok: boolean, what: string): void => {
  process.stdout.write(`${ok ? 'ok  ' : 'FAIL'} ${what}\n`);
  if (!ok) failed++;
};

// Radii: the paper's figures, rounded as it rounds them.
const paper: Record<string, number[]> = { milan: [24, 76, 240, 759], italy: [1000, 3000, 10000, 31000], pisa: [7, 22, 71, 225] };
const fractions = [1e-5, 1e-4, 1e-3, 1e-2];
process.stdout.write(
  `${table(
    ['region', ...fractions.map((f) => `${pct(f)} radius m`)],
    Object.keys(paper).map((r) => [r, ...fractions.map((f) => sig(radiusForAreaFraction(f, r as 'milan')))]),
  )}\n\n`,
);
for (const [region, radii] of Object.entries(paper)) {
  fractions.forEach((f, i) => {
    const r = radiusForAreaFraction(f, region as 'milan');
    const tol = region === 'italy' ? 0.05 : 0.03;
    check(Math.abs(r - radii[i]) / radii[i] <= tol, `${region} ${pct(f)}: ${sig(r)} m vs paper ${radii[i]} m`);
  });
}

// Default scenario.
const t0 = performance.now();
const w = generateWorkload({ seed, subscriptions: subs });
const genMs = performance.now() - t0;
const sel = measureSelectivity(w, 10_000, 1000);
process.stdout.write(
  `\ndefault scenario: ${subs} subscriptions, ${w.stats.filters} filters, ${w.stats.constraints} constraints generated in ${sig(genMs / 1000)} s\n` +
    `content selectivity: expected ${pct(w.stats.expectedSelectivity)}, measured ${pct(sel.selectivity)} (${sel.matches} of ${sel.pairs} filter×event pairs)\n`,
);
if (subs > 0) check(sel.selectivity >= 0.003 && sel.selectivity <= 0.008, `default selectivity ${pct(sel.selectivity)} within 0.3%–0.8%`);
check(w.events.length === DEFAULT_WORKLOAD.events && w.devices.length === subs, 'events and devices counts');

// Variants.
const variants: [string, Parameters<typeof generateWorkload>[0]][] = [
  ['zipf names', { nameDistribution: 'zipf' }],
  ['zipf spatial', { spatial: 'zipf' }],
  ['selectivity 2%', { selectivity: 0.02 }],
  ['1000 values', { values: 1000 }],
];
const rows: string[][] = [];
for (const [name, o] of variants) {
  const v = generateWorkload({ ...o, seed, subscriptions: 2000 });
  rows.push([name, pct(v.stats.expectedSelectivity), pct(measureSelectivity(v, 10_000, 1000).selectivity)]);
}
const ccm = generateCcmWorkload({ seed });
rows.push([`CCM (${ccm.subscriptions.length} subscriptions, ${ccm.stats.filters} filters)`, pct(ccm.stats.expectedSelectivity), pct(measureSelectivity(ccm, 10_000, 1000).selectivity)]);
process.stdout.write(`\n${table(['variant', 'expected selectivity', 'measured'], rows)}\n\n`);

// Determinism: same seed, same data; a smaller workload is a prefix of a larger one.
const a = JSON.stringify(generateWorkload({ seed, subscriptions: 300 }).subscriptions);
const b = JSON.stringify(generateWorkload({ seed, subscriptions: 300 }).subscriptions);
const prefix: Subscription[] = [];
for (const s of new WorkloadSource({ seed, subscriptions: 600 }).subscriptions()) if (prefix.length < 300) prefix.push(s);
check(a === b, 'same seed, same subscriptions');
check(a === JSON.stringify(prefix), 'a smaller workload is a prefix of a larger one');

process.exit(failed === 0 ? 0 : 1);
