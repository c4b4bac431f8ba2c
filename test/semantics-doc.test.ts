/**
 * docs/semantics.md is the normative text and the tests cite its rule ids: every rule must be
 * cited by at least one test, every citation must name a rule, and the numbers the text states
 * (limits, Earth radius) must be the code's.
 */
import assert from 'node:assert/strict';
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { EARTH_RADIUS_M } from '../src/model/geo.js';
import { DEFAULT_PATTERN_LIMITS, type PatternLimits, resolvePatternLimits } from '../src/model/event-patterns.js';
import { DEFAULT_LIMITS, type Limits, resolveLimits } from '../src/model/limits.js';

// dist/test/semantics-doc.test.js → the repository root.
const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const doc = readFileSync(join(ROOT, 'docs/semantics.md'), 'utf8');

function sources(dir: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) out.push(...sources(p));
    else if (name.endsWith('.ts')) out.push(p);
  }
  return out;
}

const ruleIds = [...doc.matchAll(/^- \*\*([A-Z]\d+)\*\*/gm)].map((m) => m[1]);
const citations = new Map<string, string[]>();
for (const file of sources(join(ROOT, 'test'))) {
  const text = readFileSync(file, 'utf8');
  // Citations are bracketed rule ids at the start of test names.
  for (const m of text.matchAll(/\[([MCARXLVTE]\d+)\]/g)) {
    const files = citations.get(m[1]) ?? [];
    if (!files.includes(file)) files.push(file);
    citations.set(m[1], files);
  }
}

/** The text of the section whose heading starts with `heading`, up to the next `## `. */
function section(heading: string): string {
  const start = doc.indexOf(`\n${heading}`);
  assert.ok(start >= 0, `section ${heading} not found`);
  const end = doc.indexOf('\n## ', start + 1);
  return doc.slice(start, end < 0 ? doc.length : end);
}

/** "1 000 000" → 1000000 */
const num = (s: string): number => Number(s.replace(/[\s\u00a0]/g, ''));

describe('docs/semantics.md', () => {
  it('numbers its rules without gaps or duplicates', () => {
    assert.ok(ruleIds.length >= 50, `only ${ruleIds.length} rules found`);
    assert.equal(new Set(ruleIds).size, ruleIds.length, 'duplicate rule ids');
    const byPrefix = new Map<string, number[]>();
    for (const id of ruleIds) byPrefix.set(id[0], [...(byPrefix.get(id[0]) ?? []), Number(id.slice(1))]);
    for (const [p, ns] of byPrefix) assert.deepEqual(ns, ns.map((_, i) => i + 1), `${p} rules must run 1..${ns.length} in order`);
  });

  it('every rule is cited by at least one test', () => {
    assert.deepEqual(ruleIds.filter((id) => !citations.has(id)), []);
  });

  it('every cited id is a rule of the document', () => {
    assert.deepEqual([...citations.keys()].filter((id) => !ruleIds.includes(id)).sort(), []);
  });

  it('[V3] the limits table states DEFAULT_LIMITS', () => {
    const rows = [...section('## 8.').matchAll(/^\s*\|\s*`(max\w+)`\s*\|\s*([\d\s]+?)\s*\|/gm)];
    const table = Object.fromEntries(rows.map((m) => [m[1], num(m[2])]));
    assert.deepEqual(table, { ...DEFAULT_LIMITS });
  });

  it('[V12] the ceilings stated are the ones resolveLimits enforces', () => {
    const m = doc.replace(/\s+/g, ' ').match(/ceilings: radii ([\d ]+) m, names (\d+) B, strings ([\d ]+) B, constraints (\d+), filters (\d+), attributes (\d+), ids (\d+) B, patterns (\d+) B, pattern states (\d+), tags per event (\d+), tags per filter (\d+), tags ([\d ]+) B\)/);
    assert.ok(m, 'ceilings sentence not found');
    const c = m.slice(1).map(num);
    const ceilings: Limits = {
      maxRadiusM: c[0], maxEventRadiusM: c[0], maxNameBytes: c[1], maxStringBytes: c[2],
      maxConstraintsPerFilter: c[3], maxFiltersPerSubscription: c[4], maxAttributesPerEvent: c[5], maxIdBytes: c[6],
      maxPatternBytes: c[7], maxPatternStates: c[8], maxTagsPerEvent: c[9], maxTagsPerFilter: c[10], maxTagBytes: c[11],
    };
    for (const k of Object.keys(ceilings) as Array<keyof Limits>) {
      assert.equal(resolveLimits({ [k]: ceilings[k] })[k], ceilings[k]);
      assert.throws(() => resolveLimits({ [k]: ceilings[k] + 1 }), { code: 'INVALID_ARGUMENT', field: `limits.${k}` });
    }
  });

  it('[E18] the pattern limits table states DEFAULT_PATTERN_LIMITS and the ceilings resolvePatternLimits enforces', () => {
    const rows = [...section('## 9.').matchAll(/^\s*\|\s*`(max\w+)`\s*\|\s*([\d\s]+?)\s*\|\s*([\d\s]+?)\s*\|/gm)];
    assert.deepEqual(Object.fromEntries(rows.map((m) => [m[1], num(m[2])])), { ...DEFAULT_PATTERN_LIMITS });
    for (const m of rows) {
      const k = m[1] as keyof PatternLimits;
      const ceiling = num(m[3]);
      assert.equal(resolvePatternLimits({ [k]: ceiling })[k], ceiling);
      assert.throws(() => resolvePatternLimits({ [k]: ceiling + 1 }), { code: 'INVALID_ARGUMENT', field: `patternLimits.${k}` });
    }
  });

  it('[A1] the Earth radius is the code\'s', () => {
    const r = doc.replace(/\s+/g, ' ').match(/`EARTH_RADIUS_M` = ([\d ]+\.\d+) m/);
    assert.ok(r);
    assert.equal(num(r[1]), EARTH_RADIUS_M);
  });
});
