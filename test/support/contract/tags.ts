/**
 * Tags (docs/semantics.md T1-T7 and the rules of L and V they touch) on every engine: the subset
 * test against a plain oracle on seeded sets, normalisation, tags beside areas and constraints,
 * the separation from attributes, the lifecycle, and every validation rule with its field.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { Matcher } from '../../../src/engines/matcher.js';
import { resolveLimits } from '../../../src/model/limits.js';
import type { Event, Filter, Subscription } from '../../../src/model/types.js';
import { Prng } from '../../../src/workload/prng.js';
import { rejectsAt, snapshot, sorted, throwsAt } from '../assertions.js';
import { type ContractContext, anchored, c, fixed, ids, sub } from './common.js';

let seq = 0;
function tev(tags: string[] | undefined, attributes: Record<string, string | number | boolean> = {}, lat = 10, lon = 20): Event {
  seq++;
  return tags === undefined ? { id: `t${seq}`, lat, lon, attributes } : { id: `t${seq}`, lat, lon, attributes, tags };
}

const only = (tags: string[], rest: Partial<Filter> = {}): Filter => ({ constraints: [], ...rest, tags });

/** The oracle of T2 and T5, written apart from the model's code. */
const norm = (t: string): string => (t.startsWith('#') ? t.slice(1) : t).toLowerCase().normalize('NFC');
const subset = (need: string[], have: string[]): boolean => {
  const h = new Set(have.map(norm));
  return need.every((t) => h.has(norm(t)));
};

/** One content-only subscription per filter tag set and one event per event set, all pairs in one batch. */
async function checkPairs(m: Matcher, filters: string[][], events: string[][]): Promise<void> {
  filters.forEach((tags, i) => m.add(sub(`f${i}`, 'dev', only(tags))));
  const results = await m.matchBatch(events.map((t) => tev(t)));
  const wrong: string[] = [];
  events.forEach((et, k) => {
    const want = filters.flatMap((ft, i) => (subset(ft, et) ? [`f${i}`] : []));
    const got = sorted(results[k]);
    if (JSON.stringify(got) !== JSON.stringify(sorted(want))) wrong.push(`event ${JSON.stringify(et)}: want ${JSON.stringify(sorted(want))}, got ${JSON.stringify(got)}`);
  });
  assert.deepEqual(wrong.slice(0, 5), [], `${wrong.length} of ${events.length} events wrong`);
}

export function tagRules({ open }: ContractContext): void {
  describe('tags', () => {
    it('[T5][T1] a filter matches when its tags are a subset of the event\'s (seeded sets, one batch)', () =>
      open(async (m) => {
        const rng = new Prng(77);
        const vocab = ['food', 'vegan', 'lunch', 'en:news', 'de:news', 'traffic', 'jam', '東京', '😀', 'a', 'b', 'c'];
        const pick = (n: number): string[] => Array.from({ length: n }, () => vocab[rng.int(0, vocab.length - 1)]);
        const filters = Array.from({ length: 40 }, (_, i) => pick(1 + (i % 4)));
        filters.push([]); // no tags: every event
        const events = Array.from({ length: 60 }, (_, k) => pick(k % 9));
        events.push([], vocab);
        await checkPairs(m, filters, events);
      }));

    it('[T1] order and repeats do not matter, in filters and in events', () =>
      open(async (m) => {
        m.add(sub('s', 'dev', only(['b', 'a', 'b'])));
        assert.deepEqual(await ids(m, tev(['a', 'a', 'b'])), ['s']);
        assert.deepEqual(await ids(m, tev(['b', 'x', 'a'])), ['s']);
        assert.deepEqual(await ids(m, tev(['b', 'b'])), []);
      }));

    it('[T2] tags compare in their normal form: one # dropped, lower case, NFC', () =>
      open(async (m) => {
        m.add(sub('food', 'dev', only(['#Food'])));
        m.add(sub('cafe', 'dev', only(['caf\u00e9'])));
        m.add(sub('greek', 'dev', only(['ΣΊΣΥΦΟΣ'])));
        m.add(sub('hash', 'dev', only(['#a'])));
        assert.deepEqual(await ids(m, tev(['FOOD'])), ['food']);
        assert.deepEqual(await ids(m, tev(['food'])), ['food']);
        assert.deepEqual(await ids(m, tev(['#fOOd'])), ['food']);
        assert.deepEqual(await ids(m, tev(['CAFE\u0301'])), ['cafe']);
        assert.deepEqual(await ids(m, tev(['Σίσυφος'])), ['greek']);
        assert.deepEqual(await ids(m, tev(['a'])), ['hash']);
        assert.deepEqual(await ids(m, tev(['food!'])), []);
      }));

    it('[T2][T4][L6] get returns the tags normalised, distinct and sorted; no tags is []', () =>
      open((m) => {
        m.add(sub('s', 'dev', only(['#Zed', 'alpha', 'ALPHA', 'caf\u0065\u0301'])));
        m.add(sub('t', 'dev', { constraints: [c('x', 'exists')] }));
        assert.deepEqual(m.get('s')!.filters[0].tags, ['alpha', 'caf\u00e9', 'zed']);
        assert.deepEqual(m.get('t')!.filters[0].tags, []);
      }));

    it('[T5] an event without tags matches only filters without tags; tags no filter names play no part', () =>
      open(async (m) => {
        m.add(sub('none', 'dev', only([])));
        m.add(sub('one', 'dev', only(['x'])));
        assert.deepEqual(await ids(m, tev(undefined)), ['none']);
        assert.deepEqual(await ids(m, tev([])), ['none']);
        assert.deepEqual(await ids(m, tev(['unheard', 'of'])), ['none']);
        assert.deepEqual(await ids(m, tev(['unheard', 'x'])), ['none', 'one']);
      }));

    it('[T6] tags and attributes are separate names', () =>
      open(async (m) => {
        m.add(sub('tag', 'dev', only(['severity'])));
        m.add(sub('attr', 'dev', { constraints: [c('severity', 'exists')] }));
        assert.deepEqual(await ids(m, tev(undefined, { severity: 3 })), ['attr']);
        assert.deepEqual(await ids(m, tev(['severity'])), ['tag']);
        assert.deepEqual(await ids(m, tev(['severity'], { severity: true })), ['attr', 'tag']);
      }));

    it('[T7][R1] tags with areas and constraints: every part must hold', () =>
      open(async (m) => {
        m.updatePosition('me', 10, 20);
        m.add(sub('near', 'me', only(['jam'], { area: anchored(1000) })));
        m.add(sub('fixed', 'other', only(['jam'], { area: fixed(1000, 10, 20.005) })));
        m.add(sub('sev', 'other', only(['jam', 'traffic'], { constraints: [c('severity', 'gt', 2)] })));
        m.add(sub('all', 'me', only(['jam'], { area: anchored(1000), constraints: [c('severity', 'ge', 1)] })));
        assert.deepEqual(await ids(m, tev(['jam'], {}, 10, 20.005)), ['fixed', 'near']);
        assert.deepEqual(await ids(m, tev(['jam', 'traffic'], { severity: 3 }, 10, 20.005)), ['all', 'fixed', 'near', 'sev']);
        assert.deepEqual(await ids(m, tev(['jam', 'traffic'], { severity: 3 }, 11, 20)), ['sev']);
        assert.deepEqual(await ids(m, tev(['traffic'], { severity: 3 }, 10, 20)), []);
        m.updatePosition('me', 50, 50);
        assert.deepEqual(await ids(m, tev(['jam'], { severity: 3 }, 10, 20)), ['fixed']);
      }));

    it('[T5][R2] a subscription matches once when several of its filters match', () =>
      open(async (m) => {
        m.add(sub('s', 'dev', only(['a']), only(['b']), only(['a', 'b'])));
        assert.deepEqual(await m.match(tev(['a', 'b'])), ['s']);
      }));

    it('[L2][L3] replace and remove take a filter\'s tags with them', () =>
      open(async (m) => {
        m.add(sub('s', 'dev', only(['old'])));
        m.add(sub('keep', 'dev', only(['old', 'kept'])));
        m.replace(sub('s', 'dev', only(['new'])));
        assert.deepEqual(await ids(m, tev(['old'])), []);
        assert.deepEqual(await ids(m, tev(['new'])), ['s']);
        assert.deepEqual(await ids(m, tev(['old', 'kept'])), ['keep']);
        m.remove('s');
        assert.deepEqual(await ids(m, tev(['new'])), []);
        m.add(sub('s', 'dev', { constraints: [] }));
        assert.deepEqual(await ids(m, tev(['new'])), ['s']);
        m.remove('keep');
        m.add(sub('k2', 'dev', only(['kept'])));
        assert.deepEqual(await ids(m, tev(['kept'])), ['k2', 's']);
      }));

    it('[T4][V3] tag counts and bytes at their limits are accepted, one past is refused', () =>
      open((m) => {
        const L = resolveLimits();
        const many = (n: number, p = 't'): string[] => Array.from({ length: n }, (_, i) => `${p}${i}`);
        m.add(sub('f', 'dev', only(many(L.maxTagsPerFilter))));
        throwsAt(() => m.add(sub('g', 'dev', only(many(L.maxTagsPerFilter + 1)))), 'subscription.filters[0].tags');
        // Repeats count as given (T4).
        throwsAt(() => m.add(sub('g', 'dev', only(Array(L.maxTagsPerFilter + 1).fill('x')))), 'subscription.filters[0].tags');
        m.add(sub('b', 'dev', only(['x'.repeat(L.maxTagBytes), `#${'y'.repeat(L.maxTagBytes)}`, 'é'.repeat(L.maxTagBytes / 2)])));
        throwsAt(() => m.add(sub('g', 'dev', only(['x'.repeat(L.maxTagBytes + 1)]))), 'subscription.filters[0].tags[0]');
        throwsAt(() => m.add(sub('g', 'dev', only(['a', 'É'.repeat(L.maxTagBytes / 2 + 1)]))), 'subscription.filters[0].tags[1]');
        assert.equal(m.has('g'), false);
      }));

    it('[T4][V3] events at the tag limits match; one past is refused', () =>
      open(async (m) => {
        const L = resolveLimits();
        m.add(sub('s', 'dev', only(['t0', `t${L.maxTagsPerEvent - 1}`])));
        const tags = Array.from({ length: L.maxTagsPerEvent }, (_, i) => `t${i}`);
        assert.deepEqual(await ids(m, tev(tags)), ['s']);
        await rejectsAt(() => m.match(tev([...tags, 'extra'])), 'event.tags');
        await rejectsAt(() => m.matchBatch([tev(['a']), tev(['x'.repeat(L.maxTagBytes + 1)])]), 'events[1].tags[0]');
      }));

    it('[T3][V1][V2][V5][V9][L4] bad tags are refused naming the tag, and nothing changes', () =>
      open(async (m) => {
        m.add(sub('keep', 'dev', only(['ok'])));
        const probe = tev(['ok']);
        const before = await snapshot(m, ['keep'], [probe]);
        const bad: [string, unknown, string][] = [
          ['empty', '', '[0]'],
          ['a lone #', '#', '[0]'],
          ['## (a # after the first)', '##x', '[0]'],
          ['# inside', 'a#b', '[0]'],
          ['a space', 'a b', '[0]'],
          ['a tab', 'a\tb', '[0]'],
          ['a newline', 'x\n', '[0]'],
          ['no-break space', 'a\u00a0b', '[0]'],
          ['ideographic space', 'a\u3000b', '[0]'],
          ['a control character', 'a\u0007', '[0]'],
          ['DEL', 'a\u007f', '[0]'],
          ['a lone surrogate', 'a\ud800', '[0]'],
          ['a number', 5, '[0]'],
          ['null', null, '[0]'],
          ['an object', { t: 'x' }, '[0]'],
          ['huge', 'x'.repeat(1 << 20), '[0]'],
        ];
        for (const [label, t, at] of bad) {
          throwsAt(() => m.add(sub('new', 'dev', only(['fine', t as string].reverse()))), `subscription.filters[0].tags${at}`, 'INVALID_ARGUMENT', label);
          await rejectsAt(() => m.match(tev([t as string])), `event.tags${at}`, 'INVALID_ARGUMENT', label);
        }
        // Not an array; a hole.
        for (const v of ['food', { 0: 'a' }, 3, true]) {
          throwsAt(() => m.add({ id: 'new', owner: 'dev', filters: [{ constraints: [], tags: v }] } as unknown as Subscription), 'subscription.filters[0].tags');
          await rejectsAt(() => m.match({ ...tev([]), tags: v } as unknown as Event), 'event.tags');
        }
        // eslint-disable-next-line no-sparse-arrays
        const holey = ['a', , 'b'] as string[];
        throwsAt(() => m.add(sub('new', 'dev', only(holey))), 'subscription.filters[0].tags[1]');
        await rejectsAt(() => m.match(tev(holey)), 'event.tags[1]');
        // The first bad filter is named, after its constraints and area (V11).
        throwsAt(() => m.add(sub('new', 'dev', only(['x']), { constraints: [c('', 'exists')], tags: ['a b'] })), 'subscription.filters[1].constraints[0].name');
        throwsAt(() => m.add(sub('new', 'dev', { constraints: [], area: { radiusM: -1 }, tags: ['a b'] })), 'subscription.filters[0].area.radiusM');
        await rejectsAt(() => m.match({ ...tev(['a b']), attributes: { '': 1 } }), 'event.attributes[""]');
        assert.deepEqual(await snapshot(m, ['keep'], [probe]), before);
      }));

    it('[T2][T3] the refusal says why', () =>
      open((m) => {
        const rule = (t: string): string => throwsAt(() => m.add(sub('n', 'dev', only([t]))), 'subscription.filters[0].tags[0]').rule;
        assert.match(rule('a b'), /white space/);
        assert.match(rule('a\u0001'), /control character/);
        assert.match(rule('a#b'), /#/);
        assert.match(rule('#'), /empty/);
        assert.match(rule('x'.repeat(65)), /64 UTF-8 bytes/);
      }));

    it('[T5][X1] many filters over many distinct tags, with the same tag in many filters', () =>
      open(async (m) => {
        const rng = new Prng(5);
        const vocab = Array.from({ length: 300 }, (_, i) => `tag${i}`);
        // Zipf-ish: low indices are popular.
        const pick = (): string => vocab[Math.floor(vocab.length * rng.float() ** 3)];
        const filters = Array.from({ length: 600 }, (_, i) => Array.from({ length: 1 + (i % 3) }, pick));
        const events = Array.from({ length: 120 }, (_, k) => Array.from({ length: 1 + (k % 10) }, pick));
        await checkPairs(m, filters, events);
      }));
  });
}
