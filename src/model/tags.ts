/**
 * Tags (docs/semantics.md T): the normal form of a tag, the set form events and filters hold, and
 * the subset test that decides a filter's tags. Validation (limits.ts) calls these; engines store
 * what they return.
 */
import { ValidationError, show } from './errors.js';

// String.prototype.isWellFormed is in Node 20 (V8 11.3); ES2024 typings are not in our lib.
const isWellFormed = (s: string): boolean => (s as unknown as { isWellFormed(): boolean }).isWellFormed();

/** What a normalised tag may not contain (T3). */
const FORBIDDEN = /[\s\p{Cc}#]/u;

/** The tag set of an event or filter without tags (shared; never written). */
export const NO_TAGS: readonly string[] = Object.freeze([]);

/**
 * A tag already in normal form and within `maxBytes`, decided in one pass without allocating:
 * 1..maxBytes printable ASCII characters, none of them `#`, white space or an upper-case letter.
 * False says nothing: normalizeTag decides.
 */
export function plainTag(v: string, maxBytes: number): boolean {
  const n = v.length;
  if (n === 0 || n > maxBytes) return false;
  for (let i = 0; i < n; i++) {
    const c = v.charCodeAt(i);
    if (c <= 0x20 || c >= 0x7f || c === 0x23 || (c >= 0x41 && c <= 0x5a)) return false;
  }
  return true;
}

/**
 * The normal form of a tag (T2): one leading `#` dropped, then lower case (Unicode's default case
 * mapping, the same in every locale) and NFC. Throws a ValidationError naming `field` when the
 * result is empty, holds white space, a control character or `#` (T3), or is longer than
 * `maxBytes` UTF-8 bytes.
 */
export function normalizeTag(field: string, v: unknown, maxBytes: number): string {
  if (typeof v !== 'string') throw new ValidationError(field, `must be a string, got ${typeof v === 'object' ? show(v) : typeof v}`);
  if (plainTag(v, maxBytes)) return v;
  // Lower case and NFC change a length by a small factor at most: refuse a huge string before either.
  if (v.length > 4 * maxBytes + 1) throw new ValidationError(field, `must be at most ${maxBytes} UTF-8 bytes, got more`);
  if (!isWellFormed(v)) throw new ValidationError(field, 'must be well-formed Unicode (no lone surrogates)');
  const body = v.charCodeAt(0) === 0x23 ? v.slice(1) : v;
  const t = body.toLowerCase().normalize('NFC');
  if (t.length === 0) throw new ValidationError(field, v.length === 0 ? 'must not be empty' : `must not be empty after its leading #, got ${show(v)}`);
  // Looked for in the tag as given (lower case and NFC neither make nor remove these characters),
  // so the position names a character of what the caller sent; the normal form is checked too.
  const given = FORBIDDEN.exec(body);
  const bad = given ?? FORBIDDEN.exec(t);
  if (bad !== null) {
    const what = bad[0] === '#' ? '# after the first character' : /\s/u.test(bad[0]) ? 'white space' : 'a control character';
    const at = given !== null ? ` at character ${given.index + (body === v ? 0 : 1)}` : '';
    throw new ValidationError(field, `must not contain ${what} (${show(bad[0])}${at}), got ${show(v)}`);
  }
  const n = Buffer.byteLength(t, 'utf8');
  if (n > maxBytes) throw new ValidationError(field, `must be at most ${maxBytes} UTF-8 bytes once normalised, got ${n}`);
  return t;
}

/** Sorts and drops repeats in place (code-unit order); returns `a`. */
function canonical(a: string[]): string[] {
  if (a.length < 2) return a;
  a.sort();
  let w = 1;
  for (let i = 1; i < a.length; i++) if (a[i] !== a[w - 1]) a[w++] = a[i];
  a.length = w;
  return a;
}

/**
 * The tag set of an event's or a filter's `tags` (T1-T4): absent or null is none; otherwise an
 * array of at most `max` entries, each normalised (normalizeTag), returned distinct and sorted.
 */
export function validateTags(field: string, v: unknown, max: number, maxBytes: number): readonly string[] {
  if (v === undefined || v === null) return NO_TAGS;
  if (!Array.isArray(v)) throw new ValidationError(field, `must be an array of strings, got ${show(v)}`);
  if (v.length > max) throw new ValidationError(field, `must have at most ${max} tags, got ${v.length}`);
  if (v.length === 0) return NO_TAGS;
  // An index loop: a hole reads as undefined and is refused (V9).
  const out: string[] = new Array(v.length);
  for (let i = 0; i < v.length; i++) out[i] = normalizeTag(`${field}[${i}]`, v[i], maxBytes);
  return canonical(out);
}

/** validateTags without building a field or an error: the set, or null when validateTags would throw. */
export function quickTags(v: unknown, max: number, maxBytes: number): readonly string[] | null {
  if (v === undefined || v === null) return NO_TAGS;
  if (!Array.isArray(v) || v.length > max) return null;
  if (v.length === 0) return NO_TAGS;
  const out: string[] = new Array(v.length);
  for (let i = 0; i < v.length; i++) {
    const t = v[i];
    if (typeof t !== 'string') return null;
    if (plainTag(t, maxBytes)) out[i] = t;
    else {
      try {
        out[i] = normalizeTag('', t, maxBytes);
      } catch {
        return null;
      }
    }
  }
  return canonical(out);
}

/** T5: every tag of `need` is in `have` (both sets as validateTags returns them: sorted, distinct). */
export function tagsSubset(need: readonly string[], have: readonly string[]): boolean {
  const n = need.length;
  if (n === 0) return true;
  const m = have.length;
  if (n > m) return false;
  let j = 0;
  for (let i = 0; i < n; i++) {
    const t = need[i];
    while (j < m && have[j] < t) j++;
    if (j === m || have[j] !== t) return false;
    j++;
  }
  return true;
}

/**
 * The name under which an engine may file a tag beside attribute names (as an `exists` on it): it
 * begins with a lone surrogate, which no attribute name can hold (V5), so a tag and an attribute
 * never share a name.
 */
export function tagName(tag: string): string {
  return `\uDC00${tag}`;
}

/** The tag `tagName` made `name` from, or null when `name` is an attribute's. */
export function tagOfName(name: string): string | null {
  return name.charCodeAt(0) === 0xdc00 ? name.slice(1) : null;
}
