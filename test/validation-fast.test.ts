/**
 * validateEvent's and validateSubscription's fast checks must agree with the explaining checks on
 * every input: the same normalised event or subscription when valid, and a refusal whenever the
 * explaining check throws (whose error, naming the field, is what callers then see). Seeded random
 * events and subscriptions with edge values mutated in.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { FastMatcher } from '../src/engines/fast.js';
import { GpuLayout } from '../src/engines/gpu/layout.js';
import { GpuMatcher } from '../src/engines/gpu/matcher.js';
import { DEFAULT_LIMITS, type NSubscription, explainEvent, explainSubscription, plainSubscription, quickEvent, quickSubscription, resolveLimits, validateEvents, validateSubscription } from '../src/model/limits.js';
import type { Subscription } from '../src/model/types.js';
import { Rng } from './support/rng.js';
import { NUMBER_EDGES, STRING_EDGES } from './support/values.js';

const ODD: unknown[] = [
  NaN, Infinity, -Infinity, 91, -91, 181, -180.0000001, 90, -90, 180, -180, -0, null, undefined, '1', true, {}, [], 1n,
  '', 'x'.repeat(128), 'x'.repeat(129), 'é'.repeat(64), 'é'.repeat(65), '\ud800', 'a\udc00b', '😀'.repeat(32), '😀'.repeat(33),
  // 3-byte characters at the limits, a pair split by the end, and strings past 256 units (measured natively).
  '€'.repeat(42), '€'.repeat(43), '€'.repeat(341), '€'.repeat(342), 'é'.repeat(512), 'é'.repeat(513), 'x'.repeat(300) + '\ud800', 'ab\ud83d', '\ud83d\ud83d\ude00',
  ...NUMBER_EDGES, ...STRING_EDGES,
];

function randomEvent(rng: Rng): Record<string, unknown> {
  const attributes: Record<string, unknown> = {};
  const n = rng.int(6);
  for (let i = 0; i < n; i++) {
    const name = rng.next() < 0.8 ? `a${rng.int(50)}` : String(STRING_EDGES[rng.int(STRING_EDGES.length)]);
    attributes[name] = rng.next() < 0.4 ? rng.next() * 100 : rng.next() < 0.5 ? STRING_EDGES[rng.int(STRING_EDGES.length)] : rng.next() < 0.5;
  }
  const e: Record<string, unknown> = { id: `e${rng.int(1000)}`, lat: -90 + rng.next() * 180, lon: -180 + rng.next() * 360, attributes };
  if (rng.next() < 0.3) e.radiusM = rng.next() * 5000;
  return e;
}

function mutate(rng: Rng, e: Record<string, unknown>): unknown {
  const odd = () => ODD[rng.int(ODD.length)];
  switch (rng.int(9)) {
    case 0: return { ...e, id: odd() };
    case 1: return { ...e, lat: odd() };
    case 2: return { ...e, lon: odd() };
    case 3: return { ...e, radiusM: odd() };
    case 4: return { ...e, attributes: { ...(e.attributes as object), [String(odd())]: 1 } };
    case 5: return { ...e, attributes: { ...(e.attributes as object), k: odd() } };
    case 6: return { ...e, attributes: odd() };
    case 7: return odd();
    default: return Object.assign(Object.create({ inherited: 1 }) as object, e);
  }
}

describe('validateEvent: the fast check agrees with the explaining check', () => {
  for (const [label, limits] of [['default limits', DEFAULT_LIMITS], ['tight limits', resolveLimits({ maxIdBytes: 3, maxNameBytes: 2, maxStringBytes: 4, maxAttributesPerEvent: 2, maxEventRadiusM: 100 })]] as const) {
    it(`${label}: 20000 seeded events, valid and mutated`, () => {
      const rng = new Rng(label.length);
      let valid = 0;
      for (let i = 0; i < 20_000; i++) {
        const base = randomEvent(rng);
        const input = rng.next() < 0.5 ? base : mutate(rng, base);
        let explained: unknown;
        let threw = false;
        try {
          explained = explainEvent(input, limits);
        } catch {
          threw = true;
        }
        const quick = quickEvent(input, limits);
        if (threw) assert.equal(quick, null, `fast check accepted what the explaining check refuses: ${JSON.stringify(input, (_, v) => (typeof v === 'bigint' ? `${v}n` : v))}`);
        else {
          valid++;
          // The fast check may refuse only what is invalid; a valid input must come out identical.
          assert.deepEqual(quick, explained, 'same normalised event');
          assert.ok(Object.is((quick as { radiusM: number }).radiusM, (explained as { radiusM: number }).radiusM), '-0 radius normalised alike');
        }
      }
      assert.ok(valid > (limits === DEFAULT_LIMITS ? 5000 : 100), `enough valid events exercised (${valid})`);
    });
  }

  it('a batch still names the offending event and field', () => {
    assert.throws(() => validateEvents([{ id: 'a', lat: 1, lon: 1, attributes: {} }, { id: 'b', lat: 91, lon: 1, attributes: {} }], DEFAULT_LIMITS), /^ValidationError: events\[1\]\.lat: must be within \[-90, 90\], got 91$/);
  });
});

const OPS = ['eq', 'ne', 'lt', 'le', 'gt', 'ge', 'prefix', 'suffix', 'contains', 'exists', 'like', 'regex', 'between', '__proto__', 'toString'];

function randomSubscription(rng: Rng): Record<string, unknown> {
  const filters: unknown[] = [];
  for (let i = 0, n = 1 + rng.int(3); i < n; i++) {
    const constraints: unknown[] = [];
    for (let j = 0, m = rng.int(4); j < m; j++) {
      const op = rng.next() < 0.85 ? OPS[rng.int(10)] : OPS[rng.int(OPS.length)];
      const value = op === 'exists' ? (rng.next() < 0.9 ? undefined : 1) : rng.next() < 0.4 ? rng.next() * 10 : rng.next() < 0.6 ? `v${rng.int(9)}` : rng.next() < 0.5;
      constraints.push({ name: rng.next() < 0.9 ? `n${rng.int(20)}` : String(STRING_EDGES[rng.int(STRING_EDGES.length)]), op, value });
    }
    const f: Record<string, unknown> = { constraints };
    if (rng.next() < 0.7) f.area = rng.next() < 0.5 ? { radiusM: 1 + rng.next() * 2000 } : { radiusM: 1 + rng.next() * 2000, center: { lat: -90 + rng.next() * 180, lon: -180 + rng.next() * 360 } };
    if (rng.next() < 0.3) f.tags = rng.next() < 0.8 ? ['a', '#B', 'c d'.slice(0, 1 + rng.int(3))] : [STRING_EDGES[rng.int(STRING_EDGES.length)]];
    if (rng.next() < 0.1) delete f.constraints;
    filters.push(f);
  }
  return { id: `s${rng.int(1000)}`, owner: `d${rng.int(100)}`, filters };
}

/**
 * `count` valid random subscriptions as given, with their normalised forms; both kinds (plain, and
 * not: like / regex, tags, forms to normalise) well represented.
 */
function seededValid(seed: number, count: number): { given: Subscription[]; normal: NSubscription[] } {
  const rng = new Rng(seed);
  const given: Subscription[] = [];
  const normal: NSubscription[] = [];
  let plainOnes = 0;
  while (given.length < count) {
    const input = { ...randomSubscription(rng), id: `s${given.length}` };
    let n: NSubscription;
    try {
      n = validateSubscription(input, DEFAULT_LIMITS);
    } catch {
      continue;
    }
    if (plainSubscription(input, DEFAULT_LIMITS)) plainOnes++;
    given.push(input as unknown as Subscription);
    normal.push(n);
  }
  assert.ok(plainOnes > count / 3 && plainOnes < given.length, `both paths exercised (${plainOnes} plain of ${given.length})`);
  return { given, normal };
}

function mutateSubscription(rng: Rng, s: Record<string, unknown>): unknown {
  const odd = () => ODD[rng.int(ODD.length)];
  const fs = s.filters as Record<string, unknown>[];
  const f = fs[0];
  const cs = (f.constraints ?? []) as Record<string, unknown>[];
  switch (rng.int(12)) {
    case 0: return { ...s, id: odd() };
    case 1: return { ...s, owner: odd() };
    case 2: return { ...s, filters: odd() };
    case 3: return { ...s, filters: [odd(), ...fs.slice(1)] };
    case 4: return { ...s, filters: [{ ...f, constraints: odd() }, ...fs.slice(1)] };
    case 5: return { ...s, filters: [{ ...f, constraints: [...cs, { name: odd(), op: 'eq', value: 1 }] }, ...fs.slice(1)] };
    case 6: return { ...s, filters: [{ ...f, constraints: [...cs, { name: 'x', op: 'eq', value: odd() }] }, ...fs.slice(1)] };
    case 7: return { ...s, filters: [{ ...f, area: odd() }, ...fs.slice(1)] };
    case 8: return { ...s, filters: [{ ...f, area: { radiusM: odd() } }, ...fs.slice(1)] };
    case 9: return { ...s, filters: [{ ...f, area: { radiusM: 10, center: { lat: odd(), lon: odd() } } }, ...fs.slice(1)] };
    case 10: return { ...s, filters: [{ ...f, tags: [odd()] }, ...fs.slice(1)] };
    default: return Object.assign(Object.create({ inherited: 1 }) as object, s);
  }
}

describe('validateSubscription: the fast check agrees with the explaining check', () => {
  for (const [label, limits] of [['default limits', DEFAULT_LIMITS], ['tight limits', resolveLimits({ maxIdBytes: 3, maxNameBytes: 2, maxStringBytes: 4, maxConstraintsPerFilter: 2, maxFiltersPerSubscription: 2, maxRadiusM: 1000, maxTagsPerFilter: 1 })]] as const) {
    it(`${label}: 20000 seeded subscriptions, valid and mutated`, () => {
      const rng = new Rng(label.length + 7);
      let valid = 0;
      let quickOnes = 0;
      for (let i = 0; i < 20_000; i++) {
        const base = randomSubscription(rng);
        const input = rng.next() < 0.5 ? base : mutateSubscription(rng, base);
        let explained: unknown;
        let threw = false;
        try {
          explained = explainSubscription(input, limits);
        } catch {
          threw = true;
        }
        const quick = quickSubscription(input, limits);
        const plain = plainSubscription(input, limits);
        // Read as given only when valid, and whenever the quick check accepts it without tags.
        const tagged = quick !== null && quick.filters.some((f) => f.tags.length > 0);
        assert.equal(plain, quick !== null && !tagged, `plain check ${plain ? 'accepted' : 'refused'}: ${JSON.stringify(input, (_, v) => (typeof v === 'bigint' ? `${v}n` : v))}`);
        if (threw) assert.equal(quick, null, `fast check accepted what the explaining check refuses: ${JSON.stringify(input, (_, v) => (typeof v === 'bigint' ? `${v}n` : v))}`);
        else {
          valid++;
          // The fast check may leave a valid one to the explaining check only for its patterns (like, regex).
          if (quick === null) assert.ok(JSON.stringify(input).match(/"op":"(like|regex)"/), `fast check refused a valid subscription without patterns: ${JSON.stringify(input)}`);
          else {
            quickOnes++;
            assert.deepEqual(quick, explained, 'same normalised subscription');
          }
        }
      }
      assert.ok(valid > (limits === DEFAULT_LIMITS ? 3000 : 50) && quickOnes > valid / 2, `enough valid subscriptions exercised (${valid}, ${quickOnes} by the fast check)`);
    });
  }

  it('the fast engine reads a plain subscription as given: the same stored subscription as from its normalised form', () => {
    const { given, normal } = seededValid(99, 3000);
    const bulk = new FastMatcher();
    bulk.addMany(given);
    const oneByOne = new FastMatcher();
    for (const s of given) oneByOne.add(s);
    const fromNormal = new FastMatcher();
    fromNormal.addMany(normal as unknown as Subscription[]);
    for (let i = 0; i < given.length; i++) {
      assert.deepEqual(bulk.get(given[i].id), normal[i], `addMany: ${JSON.stringify(given[i])}`);
      assert.deepEqual(oneByOne.get(given[i].id), normal[i], `add: ${JSON.stringify(given[i])}`);
      assert.deepEqual(fromNormal.get(given[i].id), normal[i]);
    }
    assert.deepEqual(bulk.stats(), fromNormal.stats());
  });

  it('the GPU engine\'s layout reads a plain subscription as given: the same host arrays as from its normalised form, and after removing them', () => {
    const { given, normal } = seededValid(98, 3000);
    // As the engine does: a plain one as given, any other normalised.
    const asGiven = new GpuLayout();
    const fromNormal = new GpuLayout();
    given.forEach((s, i) => asGiven.insert(plainSubscription(s, DEFAULT_LIMITS) ? s : normal[i]));
    normal.forEach((n) => fromNormal.insert(n));
    const arrays = ['fBloom', 'fMeta', 'fPos', 'fRad', 'fCon', 'fSub', 'cHead', 'cValA', 'cValB', 'cStr', 'pLat', 'pLon', 'pKnown'] as const;
    const same = (when: string) => {
      for (const k of arrays) assert.deepEqual(asGiven[k], fromNormal[k], `${k} ${when}`);
      assert.deepEqual([asGiven.sTop, asGiven.cTop, asGiven.liveFilters], [fromNormal.sTop, fromNormal.cTop, fromNormal.liveFilters], when);
    };
    same('after inserting');
    for (let i = 0; i < normal.length; i += 2) {
      asGiven.remove(normal[i].id);
      fromNormal.remove(normal[i].id);
    }
    same('after removing every other one');
  });

  it('the GPU engine\'s addMany and add read plain subscriptions as given: the same stored subscriptions and the same answers on the GPU as the fast engine', async () => {
    const { given } = seededValid(97, 2000);
    const rng = new Rng(96);
    const gpu = await GpuMatcher.create({ gpu: { allowSoftware: true }, cpuBelowFilters: 0, select: 'gpu' });
    try {
      const fast = new FastMatcher();
      for (let d = 0; d < 100; d++) {
        const lat = -60 + rng.next() * 120;
        const lon = -180 + rng.next() * 360;
        gpu.updatePosition(`d${d}`, lat, lon);
        fast.updatePosition(`d${d}`, lat, lon);
      }
      gpu.addMany(given.slice(0, 1500));
      for (const s of given.slice(1500)) gpu.add(s);
      fast.addMany(given);
      for (const s of given) assert.deepEqual(gpu.get(s.id), fast.get(s.id), s.id);
      // Events where the subscriptions are: at devices and fixed centres, with the names they ask for.
      const events = Array.from({ length: 400 }, (_, i) => {
        const near = given[rng.int(given.length)].filters[0].area?.center ?? { lat: -60 + rng.next() * 120, lon: -180 + rng.next() * 360 };
        const attributes: Record<string, string | number | boolean> = {};
        for (let k = 0; k < 6; k++) attributes[`n${rng.int(20)}`] = rng.next() < 0.4 ? rng.next() * 10 : rng.next() < 0.6 ? `v${rng.int(9)}` : rng.next() < 0.5;
        return { id: `e${i}`, lat: near.lat, lon: near.lon, radiusM: rng.next() < 0.5 ? 0 : rng.next() * 1e6, attributes, tags: rng.next() < 0.3 ? ['a', 'b', 'c'] : undefined };
      });
      // The first batch may outgrow the candidate lists (then the CPU answers it and they grow).
      await gpu.matchBatch(events);
      const before = gpu.stats().extra?.gpuEvents as number;
      const got = await gpu.matchBatch(events);
      let hits = 0;
      for (let i = 0; i < events.length; i++) {
        const want = fast.matchValid(validateEvents([events[i]], DEFAULT_LIMITS)[0]).sort();
        assert.deepEqual([...got[i]].sort(), want, `event ${i}`);
        hits += want.length;
      }
      assert.ok(hits > 200, `the events matched something (${hits})`);
      assert.equal((gpu.stats().extra?.gpuEvents as number) - before, events.length, `answered on the GPU: ${JSON.stringify(gpu.stats().extra)}`);
    } finally {
      await gpu.close();
    }
  });

  it('the GPU engine\'s addMany reserves what it will use: freed filters are taken first, and names-only filters take no constraint slots', async () => {
    const gpu = await GpuMatcher.create({ gpu: { allowSoftware: true }, cpuBelowFilters: 0, select: 'gpu' });
    try {
      const layout = (gpu as unknown as { layout: GpuLayout }).layout;
      const namesOnly = (from: number, n: number): Subscription[] =>
        Array.from({ length: n }, (_, i) => ({ id: `n${from + i}`, owner: 'd', filters: [{ constraints: [{ name: `x${i % 7}`, op: 'exists' }], tags: ['t'] }] }));
      const cCap = layout.cCap;
      gpu.addMany(namesOnly(0, 2500));
      assert.equal(layout.cCap, cCap, 'no constraint slots reserved for names-only filters (2 names each)');
      const fCap = layout.fCap;
      for (let i = 0; i < 2000; i++) gpu.remove(`n${i}`);
      gpu.addMany(namesOnly(2500, 2000));
      assert.equal(layout.fCap, fCap, 'the freed filter indices were counted');
      assert.equal(gpu.stats().subscriptions, 2500);
    } finally {
      await gpu.close();
    }
  });

  it('the fast engine loaded in chunks (many addMany calls) grows its arrays geometrically: exact for the first, then by half or more', async () => {
    const fast = new FastMatcher();
    try {
      const arrays = fast as unknown as { fCap: number; cCap: number };
      const chunk = (from: number, n: number): Subscription[] =>
        Array.from({ length: n }, (_, i) => ({ id: `c${from + i}`, owner: `d${i}`, filters: [{ constraints: [{ name: 'a', op: 'eq', value: i }], area: { radiusM: 50 } }, { constraints: [{ name: 'b', op: 'lt', value: 3 }] }] }));
      fast.addMany(chunk(0, 3000));
      assert.deepEqual([arrays.fCap, arrays.cCap], [6000, 6000], 'the first load sizes them exactly');
      const caps = new Set<number>();
      for (let k = 0; k < 170; k++) {
        fast.addMany(chunk(3000 + 100 * k, 100));
        caps.add(arrays.fCap);
        assert.ok(arrays.fCap >= 6000 + 200 * (k + 1) && arrays.cCap >= 6000 + 200 * (k + 1));
      }
      // 6,000 to 40,000 filters: about log1.5(40000 / 6000) sizes, where exact sizes made one a chunk.
      assert.ok(caps.size <= 8, `${caps.size} sizes over 170 chunks`);
      assert.equal(fast.stats().filters, 40_000);
    } finally {
      await fast.close();
    }
  });

  it('a refused subscription still names its field', () => {
    assert.throws(() => validateSubscription({ id: 'a', owner: 'o', filters: [{ constraints: [{ name: 'n', op: 'gt', value: 'x' }] }] }, DEFAULT_LIMITS), /subscription\.filters\[0\]\.constraints\[0\]\.value: op gt takes a number or bool value, got a string/);
  });
});
