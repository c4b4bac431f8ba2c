/**
 * Every registered engine other than the reference runs the shared contract and the differential
 * suite against the reference, and must agree with it exactly (X1).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { CPU_ENGINES } from '../src/engines/index.js';
import type { Matcher, MatcherOptions } from '../src/engines/matcher.js';
import { AmbitError } from '../src/model/errors.js';
import { haversineM } from '../src/model/geo.js';
import { runContract } from './support/contract.js';
import { runDifferential } from './support/differential.js';
import { Rng } from './support/rng.js';
import type { Subscription } from '../src/model/types.js';

type Make = (options?: MatcherOptions) => Matcher;
const engines = Object.entries(CPU_ENGINES as Record<string, Make>).filter(([name]) => name !== 'reference');

/** Engine-specific configurations worth a second differential run (different index shapes). */
const EXTRA: Record<string, Array<[string, Record<string, unknown>]>> = {
  fast: [
    ['coarse grid, minCellM = 1000 km', { minCellM: 1_000_000 }],
    ['finest grid, minCellM = 64 m, cells the size of their radii (cellScale 1)', { minCellM: 64, cellScale: 1 }],
    ['the grid of before: minCellM = 64 m, 128 m cells', { minCellM: 64 }],
    ['cells four times their radii (cellScale 4)', { cellScale: 4 }],
  ],
  rtree: [['deep tree, maxEntries = 4', { maxEntries: 4 }]],
};

describe('engine registry', () => {
  it('[X1] registers the CPU engines fast and rtree next to the reference', () => {
    const names = Object.keys(CPU_ENGINES);
    for (const n of ['reference', 'fast', 'rtree']) assert.ok(names.includes(n), `CPU_ENGINES lacks '${n}' (has ${names.join(', ')})`);
  });

  it('[L9] every registered engine builds, names itself and closes', async () => {
    for (const [name, make] of Object.entries(CPU_ENGINES as Record<string, Make>)) {
      let m: Matcher;
      try {
        m = make();
      } catch (e) {
        if (e instanceof AmbitError && e.code === 'UNAVAILABLE') continue;
        throw e;
      }
      assert.equal(m.name, name, 'an engine reports the name it is registered under');
      assert.equal(m.stats().engine, name);
      await m.close();
    }
  });
});

for (const [name, make] of engines) {
  // An engine that needs hardware this machine lacks says so with UNAVAILABLE; skip, giving the reason.
  let unavailable: string | undefined;
  try {
    const probe = make();
    void probe.close();
  } catch (e) {
    if (e instanceof AmbitError && e.code === 'UNAVAILABLE') unavailable = e.message;
    else throw e;
  }
  if (unavailable !== undefined) {
    describe(`engine ${name}`, () => {
      it('contract and differential', { skip: `engine unavailable here: ${unavailable}` }, () => {});
    });
    continue;
  }
  runContract(name, make);
  runDifferential(name, make);
  for (const [label, extra] of EXTRA[name] ?? []) {
    runDifferential(`${name} (${label})`, (o) => make({ ...o, ...extra } as MatcherOptions));
  }
}

describe('bulk loading', () => {
  it('[L11] a seeded load of 4000 subscriptions with addMany matches exactly what the reference holds, added one by one, before and after moves', async () => {
    const rng = new Rng(20261126);
    const devices = Array.from({ length: 400 }, (_, i) => `d${i}`);
    const subs: Subscription[] = Array.from({ length: 4000 }, (_, i) => {
      const kind = rng.int(3);
      const area = kind === 0 ? { radiusM: rng.logUniform(20, 5000) } : kind === 1 ? { radiusM: rng.logUniform(20, 5000), center: { lat: 45.4 + rng.range(0, 0.2), lon: 9.1 + rng.range(0, 0.2) } } : undefined;
      return { id: `s${i}`, owner: devices[rng.int(devices.length)], filters: [{ constraints: [{ name: 'k', op: 'lt', value: rng.int(10) }], ...(area === undefined ? {} : { area }) }] };
    });
    const place = (m: Matcher, seed: number) => {
      const r = new Rng(seed);
      for (const d of devices) m.updatePosition(d, 45.4 + r.range(0, 0.2), 9.1 + r.range(0, 0.2));
    };
    const events = Array.from({ length: 300 }, (_, i) => ({ id: `e${i}`, lat: 45.4 + rng.range(0, 0.2), lon: 9.1 + rng.range(0, 0.2), attributes: { k: rng.int(10) } }));
    const ref = CPU_ENGINES.reference();
    place(ref, 1);
    for (const s of subs) ref.add(s);
    for (const [name, make] of engines) {
      const m = make();
      place(m, 1);
      m.addMany(subs);
      for (const round of [1, 2]) {
        if (round === 2) {
          place(m, 2);
          place(ref, 2);
        }
        let matched = 0;
        for (const e of events) {
          const want = (await ref.match(e)).sort();
          assert.deepEqual((await m.match(e)).sort(), want, `${name}, round ${round}, event ${e.id}`);
          matched += want.length;
        }
        assert.ok(matched > 300, `the load matches something: ${matched}`);
      }
      place(ref, 1);
      await m.close();
    }
    await ref.close();
  });
});

describe('fast engine options', () => {
  it('refuses a grid it cannot build: cells under 64 m (minCellM × cellScale), a cellScale other than 1, 2 or 4', () => {
    const fast = (o: Record<string, unknown>): Matcher => CPU_ENGINES.fast(o as MatcherOptions);
    assert.throws(() => fast({ minCellM: 63, cellScale: 1 }), /minCellM must be in \[64, 1000000\] m at cellScale 1/);
    assert.throws(() => fast({ minCellM: 31 }), /minCellM must be in \[32, 1000000\] m at cellScale 2/);
    assert.throws(() => fast({ minCellM: 15, cellScale: 4 }), /minCellM/);
    for (const [minCellM, cellScale] of [[64, 1], [32, 2], [16, 4]]) assert.equal(fast({ minCellM, cellScale }).stats().extra?.cellScale, cellScale);
    for (const cellScale of [0, 3, 8, NaN, -2]) assert.throws(() => fast({ cellScale }), /cellScale/, `cellScale ${cellScale}`);
    for (const cellScale of [1, 2, 4]) assert.equal(fast({ cellScale }).stats().extra?.cellScale, cellScale);
  });

  it("an event's scan reaches the largest radius a grid level holds: filters of one level with different radii, the largest removed and added back", async () => {
    // 20 m and 31 m both file at the first level (32 m); a scan reaching only the first radius
    // it saw, or shrinking while a larger one is still there, misses the 31 m filter.
    const fast = CPU_ENGINES.fast();
    const ref = CPU_ENGINES.reference();
    const north = (m: number) => 45 + m / 111_195;
    const subs = (r: number, id: string): Subscription => ({ id, owner: `d-${id}`, filters: [{ constraints: [], area: { radiusM: r } }] });
    const both = (f: (m: Matcher) => void) => { f(fast); f(ref); };
    both((m) => m.add(subs(20, 'small')));
    both((m) => m.add(subs(31, 'large')));
    both((m) => m.updatePosition('d-small', 45, 9));
    both((m) => m.updatePosition('d-large', 45, 9));
    const check = async (label: string) => {
      for (const d of [5, 19, 21, 29, 30.5, 31.5, 40]) {
        const e = { id: `e${d}`, lat: north(d), lon: 9, attributes: {} };
        assert.deepEqual((await fast.match(e)).sort(), (await ref.match(e)).sort(), `${label}: ${d} m`);
      }
    };
    await check('both');
    assert.deepEqual((await fast.match({ id: 'e', lat: north(29), lon: 9, attributes: {} })).sort(), ['large']);
    both((m) => m.remove('small'));
    await check('the smaller removed');
    both((m) => m.remove('large'));
    both((m) => m.add(subs(10, 'small')));
    both((m) => m.updatePosition('d-small', 45, 9));
    await check('a smaller one alone after the level emptied');
    both((m) => m.add(subs(31, 'large')));
    await check('the larger one back');
    assert.deepEqual((await fast.match({ id: 'e', lat: north(30.5), lon: 9, attributes: {} })).sort(), ['large']);
    await fast.close();
    await ref.close();
  });

  it('the scan keeps every filter whose circle just reaches the event (radius = the exact distance), anywhere on the globe', async () => {
    // Each filter's radius is the reference's own distance to its event: a match on the boundary
    // (inclusive), which the grid's first distance test (chords between 3-D points) without its
    // rounding margin would drop.
    const rng = new Rng(42);
    const fast = CPU_ENGINES.fast();
    const ref = CPU_ENGINES.reference();
    const cases: { id: string; e: { id: string; lat: number; lon: number; attributes: Record<string, never> } }[] = [];
    for (let i = 0; i < 400; i++) {
      const lat = -89 + 178 * rng.next();
      const lon = -180 + 360 * rng.next();
      // The event within about 5-60 m (radii of the finest levels) in a random direction.
      const d = 5 + 55 * rng.next();
      const a = 2 * Math.PI * rng.next();
      const elat = lat + (d / 111_195) * Math.cos(a);
      const elon = lon + (d / (111_195 * Math.cos((lat * Math.PI) / 180))) * Math.sin(a);
      const r = haversineM(lat, lon, elat, elon);
      const sub: Subscription = { id: `s${i}`, owner: `d${i}`, filters: [{ constraints: [], area: { radiusM: r } }] };
      for (const m of [fast, ref]) {
        m.add(sub);
        m.updatePosition(`d${i}`, lat, lon);
      }
      cases.push({ id: `s${i}`, e: { id: `e${i}`, lat: elat, lon: elon, attributes: {} } });
    }
    let boundary = 0;
    for (const { id, e } of cases) {
      const want = (await ref.match(e)).sort();
      assert.deepEqual((await fast.match(e)).sort(), want, `event ${e.id}`);
      if (want.includes(id)) boundary++;
    }
    assert.equal(boundary, cases.length, 'every filter matches its own event (on its boundary)');
    await fast.close();
    await ref.close();
  });

  it("an event's attributes are read when a slot is in reach, or at once while content-only filters (by name or by tag) are filed: answers as the reference's as those come and go", async () => {
    // The engine reads an event's attributes at the first slot within reach, unless content-only
    // filters are filed, which need them at once. Their count going wrong (one left counted, or
    // one removed twice) or a previous event's attributes read again would show as a different
    // answer from the reference's.
    const rng = new Rng(7);
    const fast = CPU_ENGINES.fast();
    const ref = CPU_ENGINES.reference();
    const all = (f: (m: Matcher) => void) => { f(fast); f(ref); };
    const kinds = ['fire', 'flood', 'smoke'];
    // Anchored filters of several devices, each on a kind and a level.
    for (let i = 0; i < 40; i++) {
      const sub: Subscription = { id: `near${i}`, owner: `d${i}`, filters: [{ constraints: [{ name: 'kind', op: 'eq', value: kinds[i % 3] }, { name: 'level', op: 'ge', value: i % 5 }], area: { radiusM: 100 + 20 * (i % 7) } }] };
      const lat = 45 + 0.004 * rng.next();
      const lon = 9 + 0.004 * rng.next();
      all((m) => {
        m.add(sub);
        m.updatePosition(`d${i}`, lat, lon);
      });
    }
    const byName = (i: number): Subscription => ({ id: `name${i}`, owner: `o${i}`, filters: [{ constraints: [{ name: 'level', op: 'ge', value: i % 5 }] }] });
    const byTag = (i: number): Subscription => ({ id: `tag${i}`, owner: `t${i}`, filters: [{ constraints: [{ name: 'kind', op: 'eq', value: kinds[i % 3] }], tags: [`#t${i % 2}`] }] });
    const events = Array.from({ length: 60 }, (_, k) => ({
      id: `e${k}`,
      // Half near the devices, half far from all of them (no slot in reach).
      lat: k % 2 === 0 ? 45 + 0.004 * rng.next() : -30,
      lon: k % 2 === 0 ? 9 + 0.004 * rng.next() : 120,
      attributes: { kind: kinds[k % 3], level: k % 6 },
      tags: k % 4 === 0 ? ['#t0'] : k % 4 === 1 ? ['#t1'] : [],
    }));
    let contentOnlyHits = 0;
    const check = async (label: string) => {
      for (const e of events) {
        const want = (await ref.match(e)).sort();
        assert.deepEqual((await fast.match(e)).sort(), want, `${label}: ${e.id}`);
        contentOnlyHits += want.filter((id) => !id.startsWith('near')).length;
      }
    };
    await check('anchored filters only');
    for (let i = 0; i < 6; i++) all((m) => m.add(byName(i)));
    for (let i = 0; i < 4; i++) all((m) => m.add(byTag(i)));
    await check('with content-only filters by name and by tag');
    for (let i = 0; i < 6; i++) all((m) => m.remove(`name${i}`));
    await check('those by name removed');
    all((m) => m.remove('tag0'));
    all((m) => m.add(byName(9)));
    await check('one by name back, one by tag fewer');
    for (const id of ['tag1', 'tag2', 'tag3', 'name9']) all((m) => m.remove(id));
    await check('every content-only filter removed');
    all((m) => m.add(byTag(5)));
    await check('one by tag added again');
    assert.ok(contentOnlyHits > 0, 'content-only filters matched some events');
    await fast.close();
    await ref.close();
  });
});

describe('tags (Matcher.tag, matchBatchTagged)', () => {
  const all = Object.entries(CPU_ENGINES as Record<string, Make>);
  const tagging = all.filter(([, make]) => typeof make().tag === 'function');
  it('every CPU engine keeps tags (fast by number, the others in a map by id)', () => {
    assert.deepEqual(tagging.map(([n]) => n).sort(), all.map(([n]) => n).sort());
  });
  for (const [name, make] of tagging) {
    it(`[R6] ${name}: a tagged subscription is listed as its tag until it is removed or replaced; ids through match() and matchBatch()`, async () => {
      const m = make();
      try {
        const e = { id: 'e', lat: 45.46, lon: 9.18, attributes: { x: 1 } };
        const has = { filters: [{ constraints: [{ name: 'x', op: 'exists' as const }] }] };
        assert.equal(m.tag!('a', 7), false, 'no subscription a yet');
        m.add({ id: 'a', owner: 'd', ...has });
        m.add({ id: 'b', owner: 'd', ...has });
        assert.equal(m.tag!('a', 7), true);
        const tagged = async () => (await m.matchBatchTagged!([e]))[0];
        let [r] = [await tagged()];
        assert.equal(r.length, 2);
        assert.ok(r.includes(7) && r.includes('b'));
        assert.deepEqual([...(await m.match(e))].sort(), ['a', 'b']);
        assert.deepEqual([...(await m.matchBatch([e]))[0]].sort(), ['a', 'b']);
        // Replaced: listed by its id until tagged again.
        m.replace({ id: 'a', owner: 'd', ...has });
        assert.deepEqual([...(await tagged())].sort(), ['a', 'b']);
        m.tag!('a', 0);
        r = await tagged();
        assert.ok(r.includes(0) && !r.includes(7));
        // Removed: not listed, takes no tag; added again, listed by its id.
        assert.equal(m.remove('a'), true);
        assert.deepEqual(await tagged(), ['b']);
        assert.equal(m.tag!('a', 1), false);
        m.add({ id: 'a', owner: 'd', ...has });
        assert.deepEqual([...(await tagged())].sort(), ['a', 'b']);
        // A tag is an integer in [0, 2^31 - 1].
        for (const bad of [-1, 1.5, NaN, 2 ** 31]) assert.throws(() => m.tag!('b', bad), (err: AmbitError) => err.code === 'INVALID_ARGUMENT' && err.field === 'tag');
        // Bad events are refused as by matchBatch, the field named.
        await assert.rejects(m.matchBatchTagged!([{ ...e, lat: 91 }]), (err: AmbitError) => err.code === 'INVALID_ARGUMENT' && err.field === 'events[0].lat');
      } finally {
        await m.close();
      }
    });
  }
});
