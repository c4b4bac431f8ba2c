/**
 * Packed batches (src/engines/gpu/packed.ts): events checked and encoded ahead of the match (on
 * any thread), then matched by `GpuMatcher.matchPacked`. The shared contract and the differential
 * suite run with every matchBatch call packed (in packs of maxBatch, every other call through a
 * transfer's structured clone, as between threads), and here: events decoded back exactly as the
 * engine's check gives them; names the engine learns after the pack was made; overflows answered
 * by the CPU from decoded events, or run again without a CPU mirror; transfers refused whole,
 * naming what is wrong; packs the engine cannot take.
 */
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { ReferenceMatcher } from '../src/engines/reference.js';
import type { MatcherOptions } from '../src/engines/matcher.js';
import type { Event, Subscription } from '../src/model/types.js';
import { DEFAULT_LIMITS, type NEvent, validateEvent } from '../src/model/limits.js';
import { ValidationError } from '../src/model/errors.js';
import { GpuContext } from '../src/engines/gpu/device.js';
import { GpuKernels, GpuMatcher, type GpuMatcherOptions, PackedEvents, type PackedTransfer, packEventBatches, packEvents } from '../src/engines/gpu/matcher.js';
import { runContract } from './support/contract.js';
import { runDifferential } from './support/differential.js';
import { Rng } from './support/rng.js';
import { NUMBER_EDGES, STRING_EDGES } from './support/values.js';
import { randomEvent, randomWorkload, sorted, twin } from './support/gpu-workload.js';

const ctx = await GpuContext.open({ allowSoftware: true });
const kernels = await GpuKernels.compile(ctx);
after(() => ctx.close());

/**
 * The engine with matchBatch and matchBatchTagged answered through packs: the events checked
 * whole and packed in packs of maxBatch, every other call's packs cloned as a transfer.
 */
function packedPath(m: GpuMatcher): GpuMatcher {
  let calls = 0;
  const viaPacks = async (events: readonly Event[], tags: boolean) => {
    const packs = packEventBatches(events, m.maxBatch, { limits: m.limits });
    const cloned = calls++ % 2 === 1;
    const out = [];
    for (const p of packs) out.push(...(await m.matchPacked(cloned ? PackedEvents.fromTransfer(structuredClone(p.toTransfer())) : p, tags)));
    return out;
  };
  return new Proxy(m, {
    get(target, key) {
      if (key === 'matchBatch') return (events: readonly Event[]) => viaPacks(events, false);
      if (key === 'matchBatchTagged') return (events: readonly Event[]) => viaPacks(events, true);
      const v = Reflect.get(target, key, target) as unknown;
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  });
}

const make = (o?: MatcherOptions & GpuMatcherOptions) => packedPath(GpuMatcher.attach(kernels, { cpuBelowFilters: 0, select: 'gpu', ...o }));

runContract('gpu (packed batches)', make);
runDifferential('gpu (packed batches)', make);

/** An event's check with -0 as 0: a number's key (the GPU's encoding) does not keep the sign of zero, and no rule tells them apart (N1). */
function checked(e: Event) {
  const n = validateEvent(e, DEFAULT_LIMITS);
  return { ...n, values: n.values.map((v) => (Object.is(v, -0) ? 0 : v)) };
}

/** A decoded event as the event it came from. */
function asEvent(n: NEvent): Event {
  const e: Event = { id: n.id, lat: n.lat, lon: n.lon, radiusM: n.radiusM, attributes: Object.fromEntries(n.names.map((x, i) => [x, n.values[i]])) };
  if (n.tags.length > 0) e.tags = [...n.tags];
  return e;
}

function edgeEvents(seed: number, count: number): Event[] {
  const rng = new Rng(seed);
  const pick = <T>(xs: readonly T[]): T => xs[rng.int(xs.length)];
  const names = ['a', 'b', 'é', '東京', '😀', 'a😀b', 'zeta'];
  const out: Event[] = [];
  for (let i = 0; i < count; i++) {
    const attributes: Event['attributes'] = {};
    for (let k = 0, n = rng.int(5); k < n; k++) {
      const r = rng.next();
      attributes[pick(names)] = r < 0.4 ? pick(STRING_EDGES) : r < 0.8 ? pick(NUMBER_EDGES) : rng.next() < 0.5;
    }
    const e: Event = { id: i % 5 === 0 ? `é${i}😀` : `e${i}`, lat: -90 + 180 * rng.next(), lon: -180 + 360 * rng.next(), attributes };
    if (rng.next() < 0.3) e.radiusM = rng.next() * 5000;
    if (rng.next() < 0.3) e.tags = Array.from({ length: 1 + rng.int(3) }, () => pick(['alpha', '#Zed', 'Café', 'cafe\u0301', '東京', 'ALPHA']));
    out.push(e);
  }
  out.push({ id: 'edge-lat', lat: 90, lon: -180, attributes: {} });
  return out;
}

describe('gpu packed batches: the pack', () => {
  it('decodes every event exactly as the engine checks it, directly and after a transfer', () => {
    const events = edgeEvents(7, 300);
    const p = packEvents(events);
    const q = PackedEvents.fromTransfer(structuredClone(p.toTransfer()));
    assert.equal(p.count, events.length);
    assert.equal(p.grid, true);
    for (let k = 0; k < events.length; k++) {
      const want = checked(events[k]);
      assert.deepEqual(p.event(k), want, `event ${k}`);
      assert.deepEqual(q.event(k), want, `event ${k} after a transfer`);
    }
    assert.equal(packEvents(events.slice(0, 3)).grid, false, 'a small pack is not binned unless told');
    assert.equal(packEvents(events.slice(0, 3), { grid: true }).grid, true);
  });

  it('refuses bad events naming the field within the whole list, and checks against the limits given', () => {
    const events = edgeEvents(8, 40);
    events[33] = { ...events[33], lat: 91 };
    assert.throws(() => packEventBatches(events, 8), (e: unknown) => e instanceof ValidationError && e.field === 'events[33].lat');
    assert.throws(() => packEvents([{ id: 'x', lat: 0, lon: 0, attributes: { a: 'y'.repeat(20) } }], { limits: { maxStringBytes: 10 } }), (e: unknown) => e instanceof ValidationError && e.field === 'events[0].attributes["a"]');
    assert.throws(() => packEvents(null as unknown as Event[]), (e: unknown) => e instanceof ValidationError && e.field === 'events');
    const packs = packEventBatches(edgeEvents(9, 21), 8);
    assert.deepEqual(packs.map((x) => x.count), [8, 8, 6]);
  });

  it('refuses a corrupt transfer whole, naming what is wrong', () => {
    const good = packEvents(edgeEvents(10, 40)).toTransfer();
    const fresh = (): PackedTransfer => structuredClone(good);
    const cases: Array<[string, (t: PackedTransfer) => unknown, string]> = [
      ['not an object', () => 7, 'packed.'],
      ['count not an integer', (t) => ({ ...t, count: 1.5 }), 'packed.count'],
      ['count past the words', (t) => ({ ...t, count: t.count + 1000 }), 'packed.words'],
      ['a name missing', (t) => ({ ...t, names: t.names.slice(1) }), 'packed.words'],
      ['a name not a string', (t) => ({ ...t, names: [1, ...t.names.slice(1)] }), 'packed.names[0]'],
      ['a name longer than the limits', (t) => ({ ...t, names: [...t.names.slice(0, 1), 'n'.repeat(t.limits.maxNameBytes + 1), ...t.names.slice(2)] }), 'packed.names[1]'],
      ['an empty tag', (t) => ({ ...t, tags: [...t.tags.slice(0, 1), ''] }), 'packed.tags['],
      ['limits looser than the ceiling', (t) => ({ ...t, limits: { ...t.limits, maxStringBytes: 1e9 } }), 'limits.maxStringBytes'],
      ['points short', (t) => ({ ...t, points: t.points.slice(8) }), 'packed.points'],
      ['points not whole numbers', (t) => ({ ...t, points: t.points.slice(4) }), 'packed.points'],
      ['a latitude of 91', (t) => { new Float64Array(t.points)[3] = 91; return t; }, 'packed.points[1]'],
      ['an id end past the bytes', (t) => { new Uint32Array(t.ids, 0, 1)[0] = 1e6; return t; }, 'packed.ids[0]'],
      ['an attribute range out of order', (t) => { new Uint32Array(t.words)[16 + 12 + 5] += 1; return t; }, 'packed.words'],
      ['an attribute of no type', (t) => { const w = new Uint32Array(t.words); w[w[9] + 1] = 9; return t; }, 'packed.words'],
      ['a string past the strings', (t) => { const w = new Uint32Array(t.words); for (let a = w[9]; a < w[10]; a += 4) if (w[a + 1] === 1) { w[a + 2] = 1e6; break; } return t; }, 'packed.words'],
      ['a grid index past the events', (t) => { const w = new Uint32Array(t.words); const g = w[11]; w[g + 17 + w[g + 4] * w[g + 5] * w[g + 6] + 1] = 1e6; return t; }, 'packed.words'],
      ['the grid flag denied', (t) => ({ ...t, grid: false }), 'packed.grid'],
      ['words not an ArrayBuffer', (t) => ({ ...t, words: [1, 2, 3] }), 'packed.words'],
    ];
    for (const [label, corrupt, field] of cases) {
      assert.throws(() => PackedEvents.fromTransfer(corrupt(fresh())), (e: unknown) => e instanceof ValidationError && (e.field ?? "").startsWith(field), label);
    }
    assert.equal(PackedEvents.fromTransfer(fresh()).count, good.count, 'the untouched transfer is taken');
  });

  it('refuses a transfer that decodes to an event the model refuses: values, UTF-8, names, tags, per-event limits', () => {
    // Event 0's attributes: 0 n (number), 1 s (string), 2 b (bool), 3 e (0-byte string), 4 tag x, 5 tag y; event 1's: 6 n, 7 m.
    const events: Event[] = [
      { id: 'é0', lat: 1, lon: 2, attributes: { n: 1.5, s: 'héllo', b: true, e: '' }, tags: ['x', 'y'] },
      { id: 'e1', lat: 3, lon: 4, attributes: { n: 2, m: 'x😀' } },
    ];
    const good = packEvents(events, { limits: { maxAttributesPerEvent: 4, maxTagsPerEvent: 2 } }).toTransfer();
    const fresh = (): PackedTransfer => structuredClone(good);
    const words = (t: PackedTransfer) => new Uint32Array(t.words);
    const at = (t: PackedTransfer, a: number) => words(t)[9] + 4 * a;
    const key = (hi: number, lo: number) => (t: PackedTransfer) => { const w = words(t); w[at(t, 0) + 2] = hi; w[at(t, 0) + 3] = lo; return t; };
    const strByte = (t: PackedTransfer, a: number, i: number) => 4 * (words(t)[10] + words(t)[at(t, a) + 2]) + i;
    const cases: Array<[string, (t: PackedTransfer) => unknown, string]> = [
      ['a number NaN', key(0xfff80000, 0), 'packed.words'],
      ['a number Infinity', key(0xfff00000, 0), 'packed.words'],
      ['a number -Infinity', key(0x000fffff, 0xffffffff), 'packed.words'],
      ['a number -0', key(0x7fffffff, 0xffffffff), 'packed.words'],
      ['a bool neither false nor true', (t) => { words(t)[at(t, 2) + 2] = 0xbfe00000; return t; }, 'packed.words'],
      ['a tag not true', (t) => { words(t)[at(t, 4) + 2] = 0x80000000; return t; }, 'packed.words'],
      ['a string not UTF-8', (t) => { new Uint8Array(t.words)[strByte(t, 1, 0)] = 0xff; return t; }, 'packed.words'],
      ['a string cut within a character', (t) => { words(t)[at(t, 1) + 3] = 2; return t; }, 'packed.words'],
      ['a string holding a surrogate', (t) => { new Uint8Array(t.words).set([0xed, 0xa0, 0x80], strByte(t, 1, 1)); return t; }, 'packed.words'],
      ['an id not UTF-8', (t) => { new Uint8Array(t.ids)[8] = 0x80; return t; }, 'packed.ids[0]'],
      ['an id ending within a character (the bytes whole well-formed)', (t) => { new Uint32Array(t.ids, 0, 1)[0] = 1; return t; }, 'packed.ids[0]'],
      ['a name not well-formed', (t) => ({ ...t, names: ['\ud800', ...t.names.slice(1)] }), 'packed.names[0]'],
      ['a name twice in the table', (t) => ({ ...t, names: [t.names[0], t.names[0], ...t.names.slice(2)] }), 'packed.names[1]'],
      ['a tag not normalised', (t) => ({ ...t, tags: ['X', 'y'] }), 'packed.tags[0]'],
      ['a tag twice in the table', (t) => ({ ...t, tags: ['x', 'x'] }), 'packed.tags[1]'],
      ['an event\'s tags out of order', (t) => { const w = words(t); [w[at(t, 4)], w[at(t, 5)]] = [w[at(t, 5)], w[at(t, 4)]]; return t; }, 'packed.words'],
      ['a tag twice in an event', (t) => { const w = words(t); w[at(t, 5)] = w[at(t, 4)]; return t; }, 'packed.words'],
      ['a name twice in an event', (t) => { const w = words(t); w[at(t, 1)] = w[at(t, 0)]; return t; }, 'packed.words'],
      ['more names than maxAttributesPerEvent (names and tags within their sum)', (t) => { const w = words(t); const a = at(t, 4); w[a] = t.names.indexOf('m'); w[a + 1] = 0; return t; }, 'packed.words'],
    ];
    // Every case at once: the labels of those not refused as they should be.
    const taken = cases.filter(([, corrupt, field]) => {
      try {
        PackedEvents.fromTransfer(corrupt(fresh()));
        return true;
      } catch (e) {
        return !(e instanceof ValidationError && (e.field ?? '').startsWith(field));
      }
    });
    assert.deepEqual(taken.map(([label]) => label), []);
    const q = PackedEvents.fromTransfer(fresh());
    for (let k = 0; k < events.length; k++) assert.deepEqual(q.event(k), checked(events[k]), `event ${k}`);
    const negZero = fresh();
    new Float64Array(negZero.points)[2] = -0;
    assert.ok(Object.is(PackedEvents.fromTransfer(negZero).event(0).radiusM, 0), 'a radius of -0 decodes as 0, as the model gives it');
  });
});

describe('gpu packed batches: the engine', () => {
  it('matches names the engine learned after the pack was made, and ignores names no filter uses', async () => {
    const m = GpuMatcher.attach(kernels, { cpuBelowFilters: 0, select: 'gpu' });
    const ref = new ReferenceMatcher();
    try {
      const events: Event[] = Array.from({ length: 40 }, (_, i) => ({ id: `e${i}`, lat: 45.46, lon: 9.18 + i * 1e-5, attributes: { late: i, never: 'x', a: i % 3 } }));
      const p = packEvents(events);
      const subs: Subscription[] = [
        { id: 's1', owner: 'd1', filters: [{ constraints: [{ name: 'late', op: 'ge', value: 20 }], area: { radiusM: 500 } }] },
        { id: 's2', owner: 'd1', filters: [{ constraints: [{ name: 'a', op: 'eq', value: 1 }] }] },
      ];
      for (const x of [m, ref]) {
        x.updatePosition('d1', 45.46, 9.18);
        for (const s of subs) x.add(s);
      }
      const got = await m.matchPacked(p);
      for (let i = 0; i < events.length; i++) assert.deepEqual(sorted(got[i] as string[]), sorted(await ref.match(events[i])), `event ${i}`);
      assert.equal(m.stats().extra!.gpuEvents, events.length, 'answered by the GPU');
      assert.ok(got.filter((ids) => ids.includes('s1')).length === 20);
    } finally {
      await m.close();
    }
  });

  for (const [label, opts] of [['with the CPU mirror: overflowed events answered from their decoded form', {}], ['without it: overflowed events run again on the GPU', { cpuMirror: false }]] as const) {
    it(`candidate and output overflow, ${label}`, async () => {
      const m = GpuMatcher.attach(kernels, { cpuBelowFilters: 0, select: 'gpu', initialCandidates: 4, initialOutputs: 2, ...opts });
      const ref = new ReferenceMatcher();
      try {
        const subs = randomWorkload(31, 300, 2);
        twin(m, subs, 3);
        twin(ref, subs, 3);
        const rng = new Rng(5);
        const events = Array.from({ length: 64 }, (_, i) => randomEvent(rng, i));
        const got = await m.matchPacked(packEvents(events));
        let matched = 0;
        for (let i = 0; i < events.length; i++) {
          const want = sorted(await ref.match(events[i]));
          matched += want.length;
          assert.deepEqual(sorted(got[i] as string[]), want, `event ${i}`);
        }
        const s = m.stats().extra!;
        assert.ok(matched > 100, `the workload overflows (matched ${matched})`);
        assert.ok((s.overflowEvents as number) > 0, 'an overflow was detected');
        if ('cpuMirror' in opts) assert.ok((s.retriedEvents as number) > 0, 'run again on the GPU');
        else assert.ok((s.cpuEvents as number) > 0, 'answered on the CPU');
      } finally {
        await m.close();
      }
    });
  }

  it('small packs waiting together run as one batch, each call answered as if alone (strings, tags, names re-indexed)', async () => {
    const m = GpuMatcher.attach(kernels, { cpuBelowFilters: 0, select: 'gpu', inFlight: 1 });
    const ref = new ReferenceMatcher();
    try {
      const events = edgeEvents(12, 120).filter((e) => e.lat < 89);
      // A subscription per event on its first attribute's value (or its tags), around it: every pack has matches.
      const subs: Subscription[] = [];
      events.forEach((e, i) => {
        const [name, value] = Object.entries(e.attributes)[0] ?? [];
        const filters: Subscription['filters'] = [];
        if (name !== undefined && typeof value !== 'boolean') filters.push({ constraints: [{ name, op: 'eq', value }], area: { radiusM: 50_000, center: { lat: e.lat, lon: e.lon } } });
        if (e.tags !== undefined) filters.push({ constraints: [], tags: e.tags.slice(0, 1), area: { radiusM: 50_000, center: { lat: e.lat, lon: e.lon } } });
        if (filters.length > 0) subs.push({ id: `s${i}`, owner: `o${i}`, filters });
      });
      for (const x of [m, ref]) for (const s of subs) x.add(s);
      const packs = [];
      for (let i = 0, k = 0; i < events.length; k++) {
        const part = events.slice(i, i + 1 + (k % 7));
        const p = packEvents(part);
        packs.push({ part, p: k % 3 === 0 ? PackedEvents.fromTransfer(structuredClone(p.toTransfer())) : p });
        i += part.length;
      }
      const before = m.stats().extra!.batches as number;
      const got = await Promise.all(packs.map(({ p }, k) => m.matchPacked(p, k % 2 === 1)));
      let matched = 0;
      for (let k = 0; k < packs.length; k++) {
        for (let i = 0; i < packs[k].part.length; i++) {
          const want = sorted(await ref.match(packs[k].part[i]));
          matched += want.length;
          assert.deepEqual(sorted(got[k][i] as string[]), want, `pack ${k} event ${i}`);
        }
      }
      const batches = (m.stats().extra!.batches as number) - before;
      assert.ok(matched > events.length / 2, `the packs match (${matched})`);
      assert.ok(batches < packs.length / 4, `${packs.length} packs ran in ${batches} batches`);
    } finally {
      await m.close();
    }
  });

  it('refuses what it cannot take: not a pack, more than maxBatch events, looser limits', async () => {
    const m = GpuMatcher.attach(kernels, { cpuBelowFilters: 0, select: 'gpu', maxBatch: 16, limits: { maxStringBytes: 100 } });
    try {
      const events = edgeEvents(11, 20).map((e) => ({ ...e, attributes: {} }));
      const refused = async (p: unknown, rule: RegExp) =>
        assert.rejects(m.matchPacked(p as PackedEvents), (e: unknown) => e instanceof ValidationError && e.field === 'events' && e.code === 'INVALID_ARGUMENT' && rule.test(e.message));
      await refused({ count: 1 }, /packed batch/);
      await refused(packEvents(events, { limits: { maxStringBytes: 100 } }), /maxBatch \(16\)/);
      await refused(packEvents(events.slice(0, 4)), /looser/);
      assert.equal((await m.matchPacked(packEvents(events.slice(0, 4), { limits: { maxStringBytes: 50 } }))).length, 4, 'tighter limits are taken');
      assert.deepEqual(await m.matchPacked(packEvents([], { limits: { maxStringBytes: 100 } })), []);
    } finally {
      await m.close();
    }
  });

  it('with the derived check, matches a transfer as its decoded events, whatever its header words and grid said', async () => {
    const m = GpuMatcher.attach(kernels, { cpuBelowFilters: 0, select: 'gpu' });
    const ref = new ReferenceMatcher();
    try {
      // 40 events 50 m apart (grid cells of a few hundred metres), every other with an area of
      // 300 m; a subscription of 100 m, 350 m north of each: only an event's area reaches it.
      const events: Event[] = Array.from({ length: 40 }, (_, i) => ({ id: `e${i}`, lat: 45 + i * 0.00045, lon: 9.18, radiusM: i % 2 === 0 ? 0 : 300, attributes: { k: i } }));
      const subs: Subscription[] = events.map((e, i) => ({ id: `s${i}`, owner: 'o', filters: [{ constraints: [], area: { radiusM: 100, center: { lat: e.lat + 0.00315, lon: e.lon } } }] }));
      for (const x of [m, ref]) for (const s of subs) x.add(s);
      const good = packEvents(events).toTransfer();
      assert.equal(good.grid, true);
      const hdr = (k: number) => 16 + 12 * k;
      const corruptions: Array<[string, (w: Uint32Array, f: Float32Array) => void]> = [
        ['event 3 carrying event 30\'s unit vector', (w) => { for (const i of [0, 1, 2, 8, 9, 10]) w[hdr(3) + i] = w[hdr(30) + i]; }],
        ['event 5\'s radius word 1000 km', (_w, f) => { f[hdr(5) + 3] = 1e6; }],
        ['every grid index naming event 0', (w) => { const g = w[11]; const cells = w[g + 4] * w[g + 5] * w[g + 6]; for (let k = 0; k < 40; k++) w[g + 17 + cells + 1 + k] = 0; }],
        ['the grid\'s largest event radius 0', (_w, f) => { f[new Uint32Array(f.buffer)[11] + 7] = 0; }],
      ];
      // Refused, or answered as its decoded events: the labels of the corruptions that were neither.
      const wrong: string[] = [];
      for (const [label, corrupt] of corruptions) {
        const t = structuredClone(good);
        corrupt(new Uint32Array(t.words), new Float32Array(t.words));
        let q: PackedEvents;
        try {
          q = PackedEvents.fromTransfer(t, { derived: true });
        } catch (err) {
          assert.ok(err instanceof ValidationError && err.field === 'packed.words', label);
          continue;
        }
        const got = await m.matchPacked(q);
        for (let i = 0; i < events.length; i++) {
          if (JSON.stringify(sorted(got[i] as string[])) !== JSON.stringify(sorted(await ref.match(asEvent(q.event(i)))))) {
            wrong.push(`${label} (event ${i})`);
            break;
          }
        }
      }
      assert.deepEqual(wrong, []);
    } finally {
      await m.close();
    }
  });

  it('decodes an id or a string beginning with U+FEFF as it is, and the CPU answers it so', async () => {
    const m = GpuMatcher.attach(kernels, { cpuBelowFilters: 1_000_000 });
    const ref = new ReferenceMatcher();
    try {
      const events: Event[] = [{ id: '\ufeffe0', lat: 1, lon: 2, attributes: { s: '\ufeffabc', t: '\ufeff' } }];
      const p = packEvents(events);
      for (const q of [p, PackedEvents.fromTransfer(structuredClone(p.toTransfer()))]) assert.deepEqual(q.event(0), checked(events[0]));
      const subs: Subscription[] = [
        { id: 's1', owner: 'o', filters: [{ constraints: [{ name: 's', op: 'eq', value: '\ufeffabc' }] }] },
        { id: 's2', owner: 'o', filters: [{ constraints: [{ name: 't', op: 'eq', value: '' }] }] },
      ];
      for (const x of [m, ref]) for (const s of subs) x.add(s);
      assert.deepEqual(sorted((await m.matchPacked(p))[0] as string[]), sorted(await ref.match(events[0])));
      assert.equal(m.stats().extra!.cpuEvents, 1);
    } finally {
      await m.close();
    }
  });

  it('answers on the CPU from decoded events where the CPU path is chosen', async () => {
    const m = GpuMatcher.attach(kernels, { cpuBelowFilters: 1_000_000 });
    const ref = new ReferenceMatcher();
    try {
      const subs = randomWorkload(32, 100, 2);
      twin(m, subs, 4);
      twin(ref, subs, 4);
      const rng = new Rng(6);
      const events = Array.from({ length: 30 }, (_, i) => randomEvent(rng, i));
      const got = await m.matchPacked(packEvents(events));
      for (let i = 0; i < events.length; i++) assert.deepEqual(sorted(got[i] as string[]), sorted(await ref.match(events[i])), `event ${i}`);
      assert.equal(m.stats().extra!.gpuEvents, 0);
      assert.equal(m.stats().extra!.cpuEvents, events.length);
    } finally {
      await m.close();
    }
  });
});
