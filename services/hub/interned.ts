/**
 * Short strings that the node's links read again and again (attribute names, tags, category
 * values), read through a table of recent ones instead of decoded each time (link.ts,
 * `FrameReader.name`).
 */
const INTERN_SLOTS = 4096;
/** Strings up to this many bytes are looked up in the table (longer ones are decoded). */
export const INTERN_MAX_BYTES = 32;
/** The last short ASCII string read into each slot (by a hash of its bytes), in this thread. */
const interned: (string | undefined)[] = new Array(INTERN_SLOTS);

/**
 * The string of the bytes b[o, o + len) (len <= INTERN_MAX_BYTES): when they are ASCII and the
 * same bytes were read into the same slot before in this thread, that very string. Attribute
 * names, tags and category values recur in every event: reading one then costs a hash and a
 * compare, no native decode and no new string, and the maps keyed by it downstream (an engine's
 * name ids) find its hash already computed. Other bytes are decoded as UTF-8.
 */
export function internedString(b: Uint8Array, o: number, len: number): string {
  let h = 0x811c9dc5 ^ len;
  for (let i = 0; i < len; i++) {
    const c = b[o + i];
    if (c >= 0x80) return Buffer.from(b.buffer, b.byteOffset + o, len).toString('utf8');
    h = Math.imul(h ^ c, 0x01000193);
  }
  const slot = (h ^ (h >>> 15)) & (INTERN_SLOTS - 1);
  const s = interned[slot];
  if (s !== undefined && s.length === len) {
    let i = 0;
    while (i < len && s.charCodeAt(i) === b[o + i]) i++;
    if (i === len) return s;
  }
  const fresh = Buffer.from(b.buffer, b.byteOffset + o, len).toString('latin1');
  interned[slot] = fresh;
  return fresh;
}
