/**
 * The model's tag functions (src/model/tags.ts) on their own: the normal form is a fixed point
 * over every code point, the validation's fast path agrees with its explaining path, the subset
 * test agrees with a set's, and a tag's engine name can never be an attribute's.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ValidationError } from '../src/model/errors.js';
import { DEFAULT_LIMITS, validateEvent } from '../src/model/limits.js';
import { NO_TAGS, normalizeTag, plainTag, quickTags, tagName, tagOfName, tagsSubset, validateTags } from '../src/model/tags.js';
import { Prng } from '../src/workload/prng.js';

const MAX = DEFAULT_LIMITS.maxTagBytes;

/** normalizeTag's result, or null when it refuses. */
function tryTag(v: string): string | null {
  try {
    return normalizeTag('t', v, MAX);
  } catch (err) {
    assert.ok(err instanceof ValidationError);
    assert.equal(err.field, 't');
    return null;
  }
}

describe('tags: the normal form', () => {
  it('[T2] is a fixed point for every code point, alone, after #, upper-cased and with a combining mark', () => {
    const bad: string[] = [];
    for (let cp = 0; cp <= 0x10ffff; cp++) {
      if (cp >= 0xd800 && cp <= 0xdfff) continue;
      // Every code point of the BMP; above it, every 7th (all planes, each block touched).
      if (cp > 0xffff && cp % 7 !== 0) continue;
      const ch = String.fromCodePoint(cp);
      for (const v of [ch, `#${ch}`, `A${ch}`, `${ch}\u0301`, ch.toUpperCase()]) {
        const t = tryTag(v);
        if (t === null) continue;
        if (tryTag(t) !== t || tryTag(`#${t}`) !== t) bad.push(`U+${cp.toString(16)} ${JSON.stringify(v)} → ${JSON.stringify(t)} → ${JSON.stringify(tryTag(t))}`);
        if (!(t as unknown as { isWellFormed(): boolean }).isWellFormed() || t.length === 0 || /[\s\p{Cc}#]/u.test(t)) bad.push(`U+${cp.toString(16)}: ${JSON.stringify(t)} breaks T3`);
      }
    }
    assert.deepEqual(bad.slice(0, 10), [], `${bad.length} failures`);
  });

  it('[T2] spellings of one tag are one tag', () => {
    assert.equal(normalizeTag('t', '#Food', MAX), 'food');
    assert.equal(normalizeTag('t', 'CAFE\u0301', MAX), 'caf\u00e9');
    assert.equal(normalizeTag('t', 'ΟΔΟΣ', MAX), 'οδος'); // final sigma by Unicode's context rule
    assert.equal(normalizeTag('t', 'İstanbul', MAX), 'i\u0307stanbul'); // the same in every locale
    assert.equal(normalizeTag('t', 'en:News', MAX), 'en:news');
    assert.equal(normalizeTag('t', '😀', MAX), '😀');
  });

  it('[T3] a refusal names the offending character at its place in the tag as given', () => {
    for (const v of ['İİ x', '#e\u0301e\u0301 x', 'ΣΣ\tσ', 'a#b', '#東京\u0007']) {
      let rule = '';
      try {
        normalizeTag('t', v, MAX);
      } catch (err) {
        rule = (err as ValidationError).rule;
      }
      const m = /at character (\d+)/.exec(rule);
      assert.ok(m !== null, `${JSON.stringify(v)}: ${rule}`);
      assert.match(v[Number(m[1])], /[\s#\u0007]/u, `${JSON.stringify(v)}: ${rule}`);
    }
  });

  it('[T3] the plain fast path says yes only to what normalizeTag returns unchanged', () => {
    for (let c = 0; c < 0x80; c++) {
      const s = `a${String.fromCharCode(c)}`;
      if (plainTag(s, MAX)) assert.equal(normalizeTag('t', s, MAX), s);
    }
    assert.equal(plainTag('x'.repeat(MAX), MAX), true);
    assert.equal(plainTag('x'.repeat(MAX + 1), MAX), false);
    assert.equal(plainTag('', MAX), false);
  });
});

describe('tags: sets', () => {
  it('[T4] validateTags and quickTags agree, on valid and refused lists alike', () => {
    const rng = new Prng(11);
    const parts = ['a', 'B', '#', ' ', '\u0007', 'é', 'e\u0301', '東', '😀', '\ud800', 'x'.repeat(40), ':', 'Σ'];
    for (let k = 0; k < 20000; k++) {
      const n = rng.int(0, 6);
      const list: unknown[] = Array.from({ length: n }, () => {
        if (rng.chance(0.02)) return rng.chance(0.5) ? 7 : null;
        return Array.from({ length: rng.int(1, 3) }, () => parts[rng.int(0, parts.length - 1)]!).join('');
      });
      let want: readonly string[] | null;
      try {
        want = validateTags('tags', list, 5, MAX);
      } catch (err) {
        assert.ok(err instanceof ValidationError, String(err));
        assert.match(err.field ?? '', /^tags(\[\d\])?$/);
        want = null;
      }
      assert.deepEqual(quickTags(list, 5, MAX), want, JSON.stringify(list));
      if (want !== null) {
        assert.deepEqual([...want], [...new Set(want)].sort(), 'distinct and sorted');
        // Events take the fast path or the explaining one; both give this set.
        const e = { id: 'e', lat: 0, lon: 0, attributes: {}, tags: list };
        assert.deepEqual(validateEvent(e, { ...DEFAULT_LIMITS, maxTagsPerEvent: 5 }).tags, want);
      }
    }
    assert.equal(validateTags('tags', undefined, 5, MAX), NO_TAGS);
    assert.equal(validateTags('tags', null, 5, MAX), NO_TAGS);
    assert.equal(quickTags([], 5, MAX), NO_TAGS);
  });

  it('[T5] tagsSubset agrees with a set on seeded sets', () => {
    const rng = new Prng(3);
    const vocab = Array.from({ length: 12 }, (_, i) => `t${i}`);
    for (let k = 0; k < 50000; k++) {
      const need = validateTags('n', Array.from({ length: rng.int(0, 5) }, () => vocab[rng.int(0, 11)]), 16, MAX);
      const have = validateTags('h', Array.from({ length: rng.int(0, 8) }, () => vocab[rng.int(0, 11)]), 16, MAX);
      const set = new Set(have);
      assert.equal(tagsSubset(need, have), need.every((t) => set.has(t)), `${need} ⊆ ${have}`);
    }
  });

  it('[T6] a tag\'s engine name is never an attribute\'s name', () => {
    for (const t of ['a', 'severity', '東京', '😀']) {
      const n = tagName(t);
      assert.equal(tagOfName(n), t);
      assert.throws(() => validateEvent({ id: 'e', lat: 0, lon: 0, attributes: { [n]: 1 } }, DEFAULT_LIMITS), { field: `event.attributes[${JSON.stringify(n)}]` });
    }
    assert.equal(tagOfName('severity'), null);
  });
});
