/**
 * The differential comparator and the workload generator, tested on their own: the comparator must
 * catch a dropped result, an extra result outside the band (at r + 3·tol and at r + 1.01·tol), a
 * content error, a duplicate id and a wrong return value; it must accept a float32 engine and
 * disagreements inside the band (X2, X3); the generator must be deterministic and cover what it
 * claims to.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ReferenceMatcher } from '../src/engines/reference.js';
import { toleranceM } from '../src/model/geo.js';
import type { Event, Subscription } from '../src/model/types.js';
import { type DiffReport, runScenario } from './support/differential.js';
import { DistortedMatcher, ResultHook, float32Area, shifted } from './support/distorted.js';
import { pointAt } from './support/sphere.js';
import { type Op, type Scenario, VARIANTS, generate, knobsOf, variantSeed } from './support/workloads.js';

const variant = (name: string) => VARIANTS.find((v) => v.name === name)!;
const scenario = (name: string, salt = 0): Scenario => generate(variant(name), variantSeed(name, salt));

async function diff(scn: Scenario, cand: ReferenceMatcher | ResultHook, band: boolean): Promise<DiffReport> {
  const ref = new ReferenceMatcher();
  try {
    return await runScenario(scn, cand, ref, { band });
  } finally {
    await cand.close();
    await ref.close();
  }
}

/** One fixed filter and events at r + k·tol(r) for each k, r = r_f + r_e (events of radius r_e). */
function ladder(r: number, ks: readonly number[], re = 0): Scenario {
  const sub: Subscription = { id: 'ring', owner: 'o', filters: [{ constraints: [], area: { radiusM: r - re, center: { lat: 10, lon: 20 } } }] };
  const events: Event[] = ks.map((k, i) => {
    const p = pointAt(10, 20, 37 * i, r + k * toleranceM(r));
    return { id: `k=${k}`, lat: p.lat, lon: p.lon, radiusM: re, attributes: {} };
  });
  return { variant: 'ladder', seed: 0, steps: [{ ops: [{ kind: 'add', sub }, ...events.map((event): Op => ({ kind: 'match', event }))] }] };
}

describe('differential comparator', () => {
  it('[X1] accepts the reference against itself, and the workloads match something', async () => {
    for (const name of ['uniform-world', 'boundary-probes', 'everything', 'invalid-ops']) {
      const rep = await diff(scenario(name), new ReferenceMatcher(), false);
      assert.deepEqual(rep.failures, []);
      assert.ok(rep.events >= 100 && rep.matched > 0, `${name}: ${rep.events} events, ${rep.matched} matches`);
      if (name === 'invalid-ops') assert.ok(rep.errors > 5, `invalid-ops must produce errors, got ${rep.errors}`);
    }
  });

  it('[R3] catches a dropped result, exact or banded', async () => {
    const drop = (ids: string[]) => (ids.length > 0 ? [...ids].sort().slice(1) : ids);
    for (const band of [false, true]) {
      const rep = await diff(scenario('uniform-world'), new ResultHook(new ReferenceMatcher(), drop), band);
      assert.ok(rep.failures.length > 0, `band=${band}: a dropped result went unnoticed`);
      assert.match(rep.failures[0], /returned only by the reference/);
      assert.match(rep.failures[0], /seed=\d+ step=\d+ op=\d+/);
    }
  });

  it('[R3] catches a duplicate id', async () => {
    const dup = (ids: string[]) => (ids.length > 0 ? [...ids, ids[0]] : ids);
    const rep = await diff(scenario('uniform-world'), new ResultHook(new ReferenceMatcher(), dup), true);
    assert.ok(rep.failures.some((f) => /duplicate/.test(f)));
  });

  it('[X3] catches a subscription added at r + 3·tol(r), with distance and radius in the report', async () => {
    const rep = await diff(ladder(5000, [-10, -3, 0.5, 3, 10]), new DistortedMatcher(shifted(3.5)), true);
    assert.equal(rep.failures.length, 1, rep.failures.join('\n'));
    assert.match(rep.failures[0], /event k=3 .*"ring" returned only by the candidate; filter\[0\] content=true d=5015\.0\d* r=5000 .* = 3\.0000 tol/);
  });

  it('[X3] the band is no wider than tol: r + 1.01·tol and r - 1.01·tol are caught', async () => {
    for (const r of [1, 3, 1500, 2000, 2500, 1e6, 2e6]) {
      const re = r > 1e6 ? r / 2 : 0;
      const fat = await diff(ladder(r, [0.5, 1.01], re), new DistortedMatcher(shifted(1.02)), true);
      assert.equal(fat.failures.length, 1, `r=${r}: ${fat.failures.join('\n')}`);
      assert.equal(fat.explained, 1);
      if (r - 1.01 * toleranceM(r) <= 0) continue; // no room inside a 1 m circle for r - 1.01·tol
      const thin = await diff(ladder(r, [-0.5, -1.01], re), new DistortedMatcher(shifted(-1.02)), true);
      assert.equal(thin.failures.length, 1, `r=${r}: ${thin.failures.join('\n')}`);
      assert.equal(thin.explained, 1);
    }
  });

  it('[X2][X3] accepts disagreements anywhere inside the band, and only with band: true', async () => {
    for (const k of [0.99, -0.99, 0.3, -0.3]) {
      let explained = 0;
      for (const name of ['boundary-probes', 'tiny-radii', 'max-radius']) {
        const rep = await diff(scenario(name), new DistortedMatcher(shifted(k)), true);
        assert.deepEqual(rep.failures, [], `k=${k} ${name}`);
        explained += rep.explained;
      }
      assert.ok(explained > 0, `k=${k}: the workloads never probed inside the band`);
      const strict = await diff(scenario('boundary-probes'), new DistortedMatcher(shifted(k)), false);
      assert.ok(strict.failures.length > 0, `k=${k}: band: false must reject in-band disagreements`);
    }
  });

  it('[X2] a float32 (GPU-style) engine passes every variant with the band, and fails without it', async () => {
    let explained = 0;
    for (const v of VARIANTS) {
      const rep = await diff(generate(v, variantSeed(v.name)), new DistortedMatcher(float32Area), true);
      assert.deepEqual(rep.failures, [], v.name);
      explained += rep.explained;
    }
    assert.ok(explained > 0, 'float32 never disagreed: the boundary probes are not probing');
    const strict = await diff(scenario('boundary-probes'), new DistortedMatcher(float32Area), false);
    assert.ok(strict.failures.length > 0);
  });

  it('[X2][C5] content is exact even with the band: a float32 number comparison is caught', async () => {
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
    const rep = await diff(scenario('numeric-edges'), new Float32Content(), true);
    assert.ok(rep.failures.length > 0, 'float32 content went unnoticed');
    assert.match(rep.failures.join('\n'), /content=(true|false)/);
  });

  it('[L3] catches a wrong return value from remove', async () => {
    const rep = await diff(scenario('churn'), new ResultHook(new ReferenceMatcher(), (ids) => ids, { remove: () => true }), false);
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
