#!/usr/bin/env node
/**
 * Summarises V8 CPU profiles (the .cpuprofile files `node --cpu-prof` writes, one per process or
 * thread, e.g. from `bench/throughput.ts --server-profile DIR`): for each profile, how busy the
 * thread was (samples outside "(idle)"), then its top functions and files by self time, as a
 * share of the busy time.
 *
 *   node scripts/profile-summary.mjs DIR|FILE... [--top N] [--min-busy-ms MS] [--last S]
 *
 * --last S: only the samples of each profile's last S seconds (e.g. a benchmark's publishing phase,
 * leaving out the subscribing before it).
 */
import fs from 'node:fs';
import path from 'node:path';

const args = process.argv.slice(2);
let top = 25;
let minBusy = 0;
let lastS = Infinity;
const inputs = [];
for (let i = 0; i < args.length; i++) {
  if (args[i] === '--top') top = Number(args[++i]);
  else if (args[i] === '--min-busy-ms') minBusy = Number(args[++i]);
  else if (args[i] === '--last') lastS = Number(args[++i]);
  else inputs.push(args[i]);
}
if (inputs.length === 0 || !(top > 0) || !(minBusy >= 0) || !(lastS > 0)) {
  console.error('usage: node scripts/profile-summary.mjs DIR|FILE... [--top N] [--min-busy-ms MS] [--last S]');
  process.exit(2);
}
const files = inputs.flatMap((p) =>
  fs.statSync(p).isDirectory()
    ? fs
        .readdirSync(p)
        .filter((f) => f.endsWith('.cpuprofile'))
        .sort()
        .map((f) => path.join(p, f))
    : [p],
);

const short = (url) => (url === '' ? '(native)' : url.replace(/^file:\/\//, '').replace(/^.*\/(dist|node_modules)\//, '$1/'));

for (const file of files) {
  const prof = JSON.parse(fs.readFileSync(file, 'utf8'));
  const byId = new Map(prof.nodes.map((n) => [n.id, n]));
  const selfUs = new Map();
  // Sample i lasts until sample i + 1; with --last, samples that start before the window are left out.
  const from = prof.endTime - lastS * 1e6;
  let t = prof.startTime;
  for (let i = 0; i < prof.samples.length; i++) {
    t += prof.timeDeltas[i] ?? 0;
    const dt = prof.timeDeltas[i + 1] ?? 0;
    if (t < from) continue;
    selfUs.set(prof.samples[i], (selfUs.get(prof.samples[i]) ?? 0) + Math.max(0, dt));
  }
  let total = 0;
  let idle = 0;
  const fns = new Map();
  const byFile = new Map();
  for (const [id, us] of selfUs) {
    const n = byId.get(id);
    const cf = n.callFrame;
    total += us;
    if (cf.functionName === '(idle)') {
      idle += us;
      continue;
    }
    const key = `${cf.functionName || '(anonymous)'} ${short(cf.url)}:${cf.lineNumber + 1}`;
    fns.set(key, (fns.get(key) ?? 0) + us);
    const f = cf.url === '' ? cf.functionName : short(cf.url);
    byFile.set(f, (byFile.get(f) ?? 0) + us);
  }
  const busy = total - idle;
  if (busy / 1000 < minBusy) continue;
  console.log(`\n== ${path.basename(file)}: ${(total / 1e6).toFixed(1)} s sampled, busy ${(busy / 1e6).toFixed(1)} s (${((100 * busy) / Math.max(1, total)).toFixed(0)}%)`);
  const pct = (us) => `${((100 * us) / Math.max(1, busy)).toFixed(1).padStart(5)}%`;
  console.log('  by file:');
  for (const [k, us] of [...byFile].sort((a, b) => b[1] - a[1]).slice(0, Math.min(top, 15))) console.log(`  ${pct(us)}  ${k}`);
  console.log('  by function:');
  for (const [k, us] of [...fns].sort((a, b) => b[1] - a[1]).slice(0, top)) console.log(`  ${pct(us)}  ${k}`);
}
