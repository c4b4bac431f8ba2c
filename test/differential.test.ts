/**
 * The differential comparator and the workload generator, tested on their own: the comparator must
 * catch a dropped result, an extra result, a boundary decision off by a micrometre either way, a
 * float32 distance used alone, a content error, a duplicate id and a wrong return value, and must
 * accept a float32 engine that decides every uncertain pair in float64 (X1, X2); the generator
 * must be deterministic and cover what it claims to.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ReferenceMatcher } from '../src/engines/reference.js';
import type { Event, Subscription } from '../src/model/types.js';
import { type DiffReport, runScenario } from './support/differential.js';
import { DistortedMatcher, ResultHook, float32Area, float32Rechecked, shifted } from './support/distorted.js';
import { nextDown, pointAt, smallestRadius } from './support/sphere.js';
import { type Op, type Scenario, VARIANTS, generate, knobsOf, variantSeed } from './support/workloads.js';

const variant = (name: string) => VARIANTS.find((v) => v.name === name)!;
const scenario = (name: string, salt = 0): Scenario => generate(variant(name), variantSeed(name, salt));

async function diff(scn: Scenario, cand: ReferenceMatcher | ResultHook): Promise<DiffReport> {
  const ref = new ReferenceMatcher();
  try {
    return await runScenario(scn, cand, ref);
  } finally {
    await cand.close();
    await ref.close();
  }
}

/** One fixed filter and events at r + off metres for each offset, r = r_f + r_e (events of radius r_e). */
function ladder(r: number, offsets: readonly number[], re = 0): Scenario {
  const sub: Subscription = { id: 'ring', owner: 'o', filters: [{ constraints: [], area: { radiusM: r - re, center: { lat: 10, lon: 20 } } }] };
  const events: Event[] = offsets.map((off, i) => {
    const p = pointAt(10, 20, 37 * i, r + off);
    return { id: `off=${off}`, lat: p.lat, lon: p.lon, radiusM: re, attributes: {} };
  });
  return { variant: 'ladder', seed: 0, steps: [{ ops: [{ kind: 'add', sub }, ...events.map((event): Op => ({ kind: 'match', event }))] }] };
}

/**
 * For each r: an event at distance d ≈ r from a fixed centre, a filter `on` whose r_f + r_e is the
 * smallest float64 sum with d <= r_f + r_e (the event lies exactly on its inclusive boundary) and a
 * filter `off` one ulp smaller (the event lies just outside it).
 */
function exactBoundaries(rs: readonly number[]): Scenario {
  const ops: Op[] = [];
  rs.forEach((r, i) => {
    const re = r > 1e6 ? r / 2 : 0;
    const center = { lat: -20 + 7 * i, lon: 30 + 11 * i };
    const p = pointAt(center.lat, center.lon, 23 * i, r);
    const rf = smallestRadius(p.dist, re);
    for (const [id, radiusM] of [[`on${i}`, rf], [`off${i}`, nextDown(rf)]] as const) {
      ops.push({ kind: 'add', sub: { id, owner: 'o', filters: [{ constraints: [], area: { radiusM, center } }] } });
    }
    ops.push({ kind: 'match', event: { id: `r=${r}`, lat: p.lat, lon: p.lon, radiusM: re, attributes: {} } });
    ops.push({ kind: 'remove', id: `on${i}` }, { kind: 'remove', id: `off${i}` });
  });
  return { variant: 'exact-boundaries', seed: 0, steps: [{ ops }] };
}

/** r = r_f + r_e from 1 m to the largest sum the limits allow (two radii of just under 1000 km). */
const RADII = [1, 3, 1500, 2000, 2500, 999_999, 1_999_998];

describe('differential comparator', () => {
  it('[X1] accepts the reference against itself, and the workloads match something', async () => {
    for (const name of ['uniform-world', 'boundary-probes', 'everything', 'invalid-ops']) {
      const rep = await diff(scenario(name), new ReferenceMatcher());
      assert.deepEqual(rep.failures, []);
      assert.ok(rep.events >= 100 && rep.matched > 0, `${name}: ${rep.events} events, ${rep.matched} matches`);
      if (name === 'invalid-ops') assert.ok(rep.errors > 5, `invalid-ops must produce errors, got ${rep.errors}`);
    }
    const rep = await diff(exactBoundaries(RADII), new ReferenceMatcher());
    assert.deepEqual(rep.failures, []);
    assert.equal(rep.matched, RADII.length, 'each exact-boundary event matches its `on` filter only');
  });

  it('[R3] catches a dropped result', async () => {
    const drop = (ids: string[]) => (ids.length > 0 ? [...ids].sort().slice(1) : ids);
    const rep = await diff(scenario('uniform-world'), new ResultHook(new ReferenceMatcher(), drop));
    assert.ok(rep.failures.length > 0, 'a dropped result went unnoticed');
    assert.match(rep.failures[0], /returned only by the reference/);
    assert.match(rep.failures[0], /seed=\d+ step=\d+ op=\d+/);
  });

  it('[R3] catches a duplicate id', async () => {
    const dup = (ids: string[]) => (ids.length > 0 ? [...ids, ids[0]] : ids);
    const rep = await diff(scenario('uniform-world'), new ResultHook(new ReferenceMatcher(), dup));
    assert.ok(rep.failures.some((f) => /duplicate/.test(f)));
  });

  it('[X1] catches a subscription returned outside its circle, with distance and radius in the report', async () => {
    const rep = await diff(ladder(5000, [-50, -15, 15, 50]), new DistortedMatcher(shifted(17.5)));
    assert.equal(rep.failures.length, 1, rep.failures.join('\n'));
    assert.match(rep.failures[0], /event off=15 .*"ring" returned only by the candidate; filter\[0\] content=true d=5015\.0\d* r=5000 .* d-r=15\.0\d* \(outside\)/);
  });

  it('[X1] catches a subscription missed inside its circle', async () => {
    const rep = await diff(ladder(5000, [-50, -15, 15, 50]), new DistortedMatcher(shifted(-17.5)));
    assert.equal(rep.failures.length, 1, rep.failures.join('\n'));
    assert.match(rep.failures[0], /event off=-15 .*"ring" returned only by the reference; filter\[0\] content=true d=4984\.9\d* r=5000 .* \(inside\)/);
  });

  it('[X1][A2] catches a boundary decision off by a micrometre: circles 1e-6 m fatter or thinner', async () => {
    for (const m of [1e-6, -1e-6]) {
      const rep = await diff(exactBoundaries(RADII), new DistortedMatcher(shifted(m)));
      const side = m > 0 ? 'candidate' : 'reference';
      const caught = rep.failures.filter((f) => f.includes(`returned only by the ${side}`));
      assert.equal(caught.length, RADII.length, `shift ${m} m: every radius must be caught:\n${rep.failures.join('\n')}`);
      for (const name of ['boundary-probes', 'tiny-radii', 'max-radius', 'event-areas']) {
        const w = await diff(scenario(name), new DistortedMatcher(shifted(m)));
        assert.ok(w.failures.length > 0, `shift ${m} m went unnoticed by the ${name} workload`);
      }
    }
  });

  it('[X2] a float32 distance alone is caught; deciding uncertain pairs in float64 passes every variant', async () => {
    for (const name of ['boundary-probes', 'tiny-radii', 'max-radius']) {
      const rep = await diff(scenario(name), new DistortedMatcher(float32Area));
      assert.ok(rep.failures.length > 0, `float32 alone went unnoticed by ${name}: the boundary probes are not probing`);
    }
    for (const v of VARIANTS) {
      const rep = await diff(generate(v, variantSeed(v.name)), new DistortedMatcher(float32Rechecked));
      assert.deepEqual(rep.failures, [], v.name);
    }
  });

  it('[X1][C5] content is exact: a float32 number comparison is caught', async () => {
    const f = Math.fround;
    // Compare numbers as float32 would: turns 16777217 == 16777216 and 1e-300 == 0 into matches.
    class Float32Content extends DistortedMatcher {
      constructor() {
        super((_c, _e, r, d) => d <= r);
      }
      override matchValid(e: Parameters<ReferenceMatcher['matchValid']>[0]): string[] {
        return super.matchValid({ ...e, values: e.values.map((v) => (typeof v === 'number' ? f(v) : v)) });
      }
    }
    const rep = await diff(scenario('numeric-edges'), new Float32Content());
    assert.ok(rep.failures.length > 0, 'float32 content went unnoticed');
    assert.match(rep.failures.join('\n'), /content=(true|false)/);
  });

  it('[L3] catches a wrong return value from remove', async () => {
    const rep = await diff(scenario('churn'), new ResultHook(new ReferenceMatcher(), (ids) => ids, { remove: () => true }));
    assert.ok(rep.failures.some((f) => /return value differs/.test(f)), rep.failures.join('\n'));
  });
});

describe('workload generator', () => {
  const all = VARIANTS.map((v) => ({ v, scn: generate(v, variantSeed(v.name)) }));
  const ops = (s: Scenario) => s.steps.flatMap((st) => st.ops);
  const events = (s: Scenario): Event[] => ops(s).flatMap((o) => (o.kind === 'match' ? [o.event] : o.kind === 'batch' ? o.events : []));
  const subs = (s: Scenario): Subscription[] => ops(s).flatMap((o) => (o.kind === 'add' || o.kind === 'replace' ? [o.sub] : []));

  it('has at least 20 distinct variants with stable seeds', () => {
    assert.ok(VARIANTS.length >= 20);
    assert.equal(new Set(VARIANTS.map((v) => v.name)).size, VARIANTS.length);
    assert.equal(variantSeed('uniform-world'), variantSeed('uniform-world'));
    assert.notEqual(variantSeed('uniform-world', 0), variantSeed('uniform-world', 1));
  });

  it('is deterministic: the same seed gives the same operations, another seed others', () => {
    const v = variant('everything');
    const a = JSON.stringify(generate(v, 42));
    assert.equal(a, JSON.stringify(generate(v, 42)));
    assert.notEqual(a, JSON.stringify(generate(v, 43)));
  });

  it('stays small: a few hundred subscriptions, at most 100 events per step', () => {
    for (const { v, scn } of all) {
      const k = knobsOf(v);
      assert.ok(k.subs <= 400, v.name);
      for (const st of scn.steps) {
        const n = st.ops.reduce((acc, o) => acc + (o.kind === 'match' ? 1 : o.kind === 'batch' ? o.events.length : 0), 0);
        assert.ok(n <= 100 + 40, `${v.name}: ${n} events in a step`); // + exact-boundary pairs from churn
      }
    }
  });

  it('covers what it claims: geography, radii, areas, content, churn', () => {
    const seen = new Set<string>();
    const mark = (k: string, cond: boolean) => cond && seen.add(k);
    for (const { scn } of all) {
      for (const o of ops(scn)) mark(`op:${o.kind}`, true);
      for (const e of events(scn)) {
        mark('antimeridian', Math.abs(e.lon) > 179.9);
        mark('lon=+180', e.lon === 180);
        mark('lon=-180', e.lon === -180);
        mark('north>89.9', e.lat > 89.9);
        mark('south<-89.9', e.lat < -89.9);
        mark('pole', Math.abs(e.lat) === 90);
        mark('event-area', (e.radiusM ?? 0) > 0);
        mark('event-area=1e6', e.radiusM === 1e6);
        for (const [n, v] of Object.entries(e.attributes)) {
          mark('attr:-0', Object.is(v, -0));
          mark('attr:2^53', v === 2 ** 53);
          mark('attr:1e-300', v === 1e-300);
          mark('attr:MIN_VALUE', v === Number.MIN_VALUE);
          mark('attr:multibyte', typeof v === 'string' && /[^\x00-\x7f]/.test(v));
          mark('attr:astral', typeof v === 'string' && /[\u{10000}-\u{10FFFF}]/u.test(v));
          mark('attr:__proto__', n === '__proto__');
          mark('attr:bool', typeof v === 'boolean');
        }
      }
      for (const s of subs(scn)) {
        for (const f of s.filters) {
          mark('filter:content-only', f.area === undefined || f.area === null);
          mark('filter:fixed', !!f.area?.center);
          mark('filter:anchored', !!f.area && !f.area.center);
          mark('radius<=1m', !!f.area && f.area.radiusM <= 1);
          mark('radius=1e6', f.area?.radiusM === 1e6);
          mark('filter:zero-constraints', (f.constraints ?? []).length === 0);
          const names = (f.constraints ?? []).map((c) => c.name);
          mark('filter:same-name-twice', new Set(names).size < names.length);
          for (const c of f.constraints ?? []) {
            mark(`op:${c.op}`, true);
            mark('value:multibyte-prefix', c.op === 'prefix' && typeof c.value === 'string' && /[^\x00-\x7f]/.test(c.value));
            mark('value:empty-string', c.value === '');
          }
        }
      }
      // Re-adds: an id added, removed, then added again.
      const removed = new Set<string>();
      for (const o of ops(scn)) {
        if (o.kind === 'remove') removed.add(o.id);
        if (o.kind === 'add') mark('re-add', removed.has(o.sub.id));
      }
      // Owners that never get a position.
      const positioned = new Set<string>();
      for (const o of ops(scn)) {
        if (o.kind === 'move' || o.kind === 'handle') positioned.add(o.device);
        if (o.kind === 'moves') for (const u of o.updates) positioned.add(u.device);
      }
      mark('owner-never-positioned', subs(scn).some((s) => !positioned.has(s.owner)));
      mark('clustered-devices', ops(scn).filter((o) => o.kind === 'move').length > new Set(ops(scn).flatMap((o) => (o.kind === 'move' ? [`${o.lat},${o.lon}`] : []))).size);
    }
    const want = [
      'op:add', 'op:replace', 'op:remove', 'op:move', 'op:moves', 'op:handle', 'op:forget', 'op:match', 'op:batch',
      'antimeridian', 'lon=+180', 'lon=-180', 'north>89.9', 'south<-89.9', 'pole', 'event-area', 'event-area=1e6',
      'attr:-0', 'attr:2^53', 'attr:1e-300', 'attr:MIN_VALUE', 'attr:multibyte', 'attr:astral', 'attr:__proto__', 'attr:bool',
      'filter:content-only', 'filter:fixed', 'filter:anchored', 'radius<=1m', 'radius=1e6', 'filter:zero-constraints', 'filter:same-name-twice',
      'op:eq', 'op:ne', 'op:lt', 'op:le', 'op:gt', 'op:ge', 'op:prefix', 'op:suffix', 'op:contains', 'op:exists',
      'value:multibyte-prefix', 'value:empty-string', 're-add', 'owner-never-positioned', 'clustered-devices',
    ];
    assert.deepEqual(want.filter((k) => !seen.has(k)), []);
  });
});
