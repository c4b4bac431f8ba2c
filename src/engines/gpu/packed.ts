/**
 * Events packed for the GPU engine ahead of the match, on any thread: `packEvents` checks a batch
 * (the model's rules, the field named) and writes it as the batch input of match.wgsl
 * (input.ts), unit vectors, numbers' keys, strings' UTF-8 and the grid included, with each
 * attribute's name as an index into the batch's own table of names. The engine's thread then only
 * turns those indices into its name ids and the events' Bloom words (a pass over the attribute
 * words, no event object), so the per-event work of a batch can run in worker threads or in the
 * process that received the events (`matchPacked`, matcher.ts).
 *
 * A pack moves between threads as `toTransfer()` (plain data and three ArrayBuffers, for
 * postMessage's transfer list) and `PackedEvents.fromTransfer`, which checks it whole before any
 * of it reaches a kernel: its structure (offsets, ranges, the grid's cells and indices), so no
 * word read sends a kernel outside its buffers, and what it decodes to (`event(k)`), so every
 * event is one the model's check gives under the pack's limits (ids, names, strings well-formed
 * UTF-8 within them, numbers finite and not -0, bools 0 or 1, names distinct, tags normal,
 * distinct and sorted, the attribute and tag counts each within theirs). The words that derive
 * from the points (the unit vectors, the radii, the grid's binning) are the packer's: with
 * `{ derived: true }` they are also compared with what the packer writes from the points, so the
 * GPU's answers are those of the decoded events whatever made the transfer (it doubles the cost,
 * about 0.1 µs an event otherwise). The events are decoded again only where the CPU must answer
 * one (`event(k)`: an overflow, a device loss).
 */
import { isUtf8 } from 'node:buffer';
import { ValidationError, show } from '../../model/errors.js';
import { type Limits, type NEvent, eventLimitsWithin, resolveLimits, validateEvents } from '../../model/limits.js';
import { normalizeTag } from '../../model/tags.js';
import type { Value } from '../../model/types.js';
import { T_BOOL, T_NUM, T_STR } from '../operators.js';
import { ATTR_WORDS, EVENT_WORDS, GRID_HEADER_WORDS, P, PARAM_WORDS, TAG_BIT, attributeValue, encodeGrid, gridWords, numberKey, unitVector, utf8Into, utf8Length } from './input.js';
import { keyNumber } from './layout.js';
import { defaultGpuMatcherOptions } from './options.js';

export { TAG_BIT };
/** Most events in one pack (the engine's largest maxBatch). */
export const MAX_PACKED_EVENTS = 65535;
/** A pack of this many events or more is binned into the grid unless told (the engine's own default). */
const GRID_MIN_EVENTS = defaultGpuMatcherOptions.gridMinEvents;

export interface PackOptions {
  /** Limits the events are checked against; the engine matching the pack must have none looser (default: the model's). */
  limits?: Partial<Limits>;
  /** Bin the events into the kernels' grid (default: 16 events or more, the engine's own default). */
  grid?: boolean;
}

/** A pack as plain data, for postMessage (its buffers in the transfer list) and `PackedEvents.fromTransfer`. */
export interface PackedTransfer {
  count: number;
  grid: boolean;
  names: string[];
  tags: string[];
  limits: Limits;
  words: ArrayBuffer;
  points: ArrayBuffer;
  ids: ArrayBuffer;
}

const LIMIT_KEYS = ['maxIdBytes', 'maxEventRadiusM', 'maxAttributesPerEvent', 'maxNameBytes', 'maxStringBytes', 'maxTagsPerEvent', 'maxTagBytes'] as const;
/** ignoreBOM: a leading U+FEFF is part of an id or a string (the decoder would otherwise drop it). */
const decoder = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/** Only this module builds packs (packEvents, fromTransfer): a pack reaching the engine was checked. */
const BUILD: unique symbol = Symbol('PackedEvents');

export class PackedEvents {
  constructor(
    token: typeof BUILD,
    readonly count: number,
    /** The batch input (input.ts), parameter words 0-7 and the Bloom words left for the engine; names as indices. */
    readonly words: Uint32Array,
    /** Per event: lat, lon, radius (m) as given: the exact test of a pair inside float32's band reads them. */
    readonly points: Float64Array,
    /** Per event the end of its id in `idBytes` (ids are UTF-8, one after another), then the bytes. */
    /** @internal */ readonly idEnds: Uint32Array,
    /** @internal */ readonly idBytes: Uint8Array,
    /** The batch's attribute names and tags, by the index its attribute words hold. */
    readonly names: readonly string[],
    readonly tags: readonly string[],
    readonly grid: boolean,
    /** The limits the events were checked against. */
    readonly limits: Limits,
  ) {
    if (token !== BUILD) throw new TypeError('PackedEvents: made by packEvents or PackedEvents.fromTransfer only');
  }

  /** Checks `events` (throws ValidationError naming the field, `events[i]…`) and packs them. */
  static pack(events: readonly unknown[], options: PackOptions = {}): PackedEvents {
    const limits = resolveLimits(options.limits);
    const valid = validateEvents(events, limits, 'events');
    if (valid.length > MAX_PACKED_EVENTS) throw new ValidationError('events', `must hold at most ${MAX_PACKED_EVENTS} events a pack, got ${valid.length}`);
    return packValid(valid, limits, options.grid ?? valid.length >= GRID_MIN_EVENTS);
  }

  /**
   * Checks `events` whole (a refusal names the field within all of them) and packs them in packs
   * of at most `maxEvents` (an engine's `maxBatch`), in order.
   */
  static packAll(events: readonly unknown[], maxEvents: number, options: PackOptions = {}): PackedEvents[] {
    if (!Number.isInteger(maxEvents) || maxEvents < 1 || maxEvents > MAX_PACKED_EVENTS) throw new RangeError(`maxEvents must be an integer in [1, ${MAX_PACKED_EVENTS}], got ${maxEvents}`);
    const limits = resolveLimits(options.limits);
    const valid = validateEvents(events, limits, 'events');
    const out: PackedEvents[] = [];
    for (let i = 0; i < valid.length; i += maxEvents) {
      const part = valid.slice(i, i + maxEvents);
      out.push(packValid(part, limits, options.grid ?? part.length >= GRID_MIN_EVENTS));
    }
    return out;
  }

  /** The event `k` as the engine's check gives it (for the CPU's answer). */
  event(k: number): NEvent {
    if (!(Number.isInteger(k) && k >= 0 && k < this.count)) throw new RangeError(`event ${k} of a pack of ${this.count}`);
    const w = this.words;
    const o = w[P.EVOFF] + k * EVENT_WORDS;
    const start = w[o + 5];
    const n = w[o + 6];
    const attrOff = w[P.ATTROFF];
    const strBytes = new Uint8Array(w.buffer, w.byteOffset + 4 * w[P.STROFF], 4 * (w.length - w[P.STROFF]));
    const names: string[] = [];
    const values: Value[] = [];
    const tags: string[] = [];
    for (let a = start; a < start + n; a++) {
      const ao = attrOff + a * ATTR_WORDS;
      const name = w[ao];
      if (name & TAG_BIT) {
        tags.push(this.tags[name & ~TAG_BIT]);
        continue;
      }
      names.push(this.names[name]);
      const t = w[ao + 1];
      if (t === T_STR) values.push(decoder.decode(strBytes.subarray(4 * w[ao + 2], 4 * w[ao + 2] + w[ao + 3])));
      else if (t === T_NUM) values.push(keyNumber(w[ao + 2], w[ao + 3]));
      else values.push(keyNumber(w[ao + 2], w[ao + 3]) === 1);
    }
    const id = decoder.decode(this.idBytes.subarray(k === 0 ? 0 : this.idEnds[k - 1], this.idEnds[k]));
    return { id, lat: this.points[3 * k], lon: this.points[3 * k + 1], radiusM: this.points[3 * k + 2], names, values, tags };
  }

  /** Whether events held to this pack's limits keep to `limits`. */
  within(limits: Limits): boolean {
    return eventLimitsWithin(this.limits, limits);
  }

  /**
   * The pack as plain data; its buffers are copies where they are views into larger ones, so they
   * can be transferred (after which this pack, whose arrays they were, is spent).
   */
  toTransfer(): PackedTransfer {
    return { count: this.count, grid: this.grid, names: [...this.names], tags: [...this.tags], limits: { ...this.limits }, words: own(this.words), points: own(this.points), ids: packIds(this.idEnds, this.idBytes) };
  }

  /**
   * A pack received from another thread, checked whole (throws ValidationError naming what is
   * wrong): its structure and what it decodes to. `derived`: also that the words derived from the
   * points (unit vectors, radii, the grid) are those the packer writes from them, which costs
   * about as much again as the rest (for packs of another origin than `packEvents`, and tests).
   */
  static fromTransfer(t: unknown, options: { derived?: boolean } = {}): PackedEvents {
    return readTransfer(t, options.derived === true);
  }

  /**
   * One pack of the events of `packs`, in order (the engine's queue runs small packs waiting
   * together as one batch): their words one after another with attribute and string offsets moved
   * and names re-indexed into one table, the grid made for the whole. `limits`: what the result
   * claims (each pack was held to them or tighter).
   */
  static merge(packs: readonly PackedEvents[], limits: Limits): PackedEvents {
    if (packs.length === 1) return packs[0];
    let n = 0;
    let nAttr = 0;
    let strWords = 0;
    let idTotal = 0;
    for (const p of packs) {
      n += p.count;
      nAttr += (p.words[P.STROFF] - p.words[P.ATTROFF]) / ATTR_WORDS;
      strWords += stringWordsOf(p);
      idTotal += p.idBytes.length;
    }
    const grid = n >= GRID_MIN_EVENTS;
    const { inp, inpF, evOff, attrOff, strOff, gridOff, points, idEnds, idBytes } = packArrays(n, nAttr, strWords, idTotal, grid);
    const nameIdx = new Map<string, number>();
    const tagIdx = new Map<string, number>();
    const names: string[] = [];
    const tags: string[] = [];
    let k0 = 0;
    let a0 = 0;
    let s0 = 0;
    let id0 = 0;
    for (const p of packs) {
      const w = p.words;
      const m = p.count;
      const pAttr = (w[P.STROFF] - w[P.ATTROFF]) / ATTR_WORDS;
      // Event headers, each attribute range moved by the attributes before this pack.
      inp.set(w.subarray(w[P.EVOFF], w[P.EVOFF] + m * EVENT_WORDS), evOff + k0 * EVENT_WORDS);
      for (let k = 0; k < m; k++) inp[evOff + (k0 + k) * EVENT_WORDS + 5] += a0;
      // Attributes, names re-indexed, strings moved by the string words before this pack.
      const nameMap = p.names.map((x) => indexIn(nameIdx, names, x));
      const tagMap = p.tags.map((x) => indexIn(tagIdx, tags, x));
      inp.set(w.subarray(w[P.ATTROFF], w[P.STROFF]), attrOff + a0 * ATTR_WORDS);
      for (let a = 0; a < pAttr; a++) {
        const ao = attrOff + (a0 + a) * ATTR_WORDS;
        const name = inp[ao];
        inp[ao] = name & TAG_BIT ? (TAG_BIT | tagMap[name & ~TAG_BIT]) >>> 0 : nameMap[name];
        if (inp[ao + 1] === T_STR) inp[ao + 2] += s0;
      }
      const sw = stringWordsOf(p);
      inp.set(w.subarray(w[P.STROFF], w[P.STROFF] + sw), strOff + s0);
      points.set(p.points, 3 * k0);
      for (let k = 0; k < m; k++) idEnds[k0 + k] = p.idEnds[k] + id0;
      idBytes.set(p.idBytes, id0);
      k0 += m;
      a0 += pAttr;
      s0 += sw;
      id0 += p.idBytes.length;
    }
    if (grid) encodeGrid(inp, inpF, evOff, n, gridOff);
    return new PackedEvents(BUILD, n, inp, points, idEnds, idBytes, names, tags, grid, limits);
  }
}

/** Words of a pack's strings (before the pad word that ends them). */
function stringWordsOf(p: PackedEvents): number {
  const w = p.words;
  return (p.grid ? w[P.GRIDOFF] - 1 : w.length - 1) - w[P.STROFF];
}

/** The buffer of `a` when `a` covers it whole, else a copy of `a`'s bytes. */
function own(a: Uint32Array | Float64Array | Uint8Array): ArrayBuffer {
  const b = a.buffer as ArrayBuffer;
  return a.byteOffset === 0 && a.byteLength === b.byteLength ? b : b.slice(a.byteOffset, a.byteOffset + a.byteLength);
}

/** Ids as one buffer: the count's ends (u32), then the bytes. */
function packIds(ends: Uint32Array, bytes: Uint8Array): ArrayBuffer {
  const n = ends.length;
  const total = n === 0 ? 0 : ends[n - 1];
  const out = new ArrayBuffer(4 * n + total);
  new Uint32Array(out, 0, n).set(ends);
  new Uint8Array(out, 4 * n, total).set(bytes.subarray(0, total));
  return out;
}

/** `key`'s index in the pack's table `list` (added at its end the first time). */
function indexIn(index: Map<string, number>, list: string[], key: string): number {
  let ix = index.get(key);
  if (ix === undefined) {
    ix = list.length;
    index.set(key, ix);
    list.push(key);
  }
  return ix;
}

/**
 * A pack's arrays at their exact sizes for `n` events, `nAttr` attributes, `strWords` words of
 * strings and `idTotal` bytes of ids: the words (offsets in their parameter words; the strings'
 * pad word, then the grid's room when `grid`), the points and the ids.
 */
function packArrays(n: number, nAttr: number, strWords: number, idTotal: number, grid: boolean) {
  const evOff = PARAM_WORDS;
  const attrOff = evOff + n * EVENT_WORDS;
  const strOff = attrOff + nAttr * ATTR_WORDS;
  const gridOff = strOff + strWords + 1;
  const buf = new ArrayBuffer(4 * (gridOff + (grid ? gridWords(n) : 0)));
  const inp = new Uint32Array(buf);
  inp[P.EVOFF] = evOff;
  inp[P.ATTROFF] = attrOff;
  inp[P.STROFF] = strOff;
  return { inp, inpF: new Float32Array(buf), evOff, attrOff, strOff, gridOff, points: new Float64Array(3 * n), idEnds: new Uint32Array(n), idBytes: new Uint8Array(idTotal) };
}

function packValid(valid: readonly NEvent[], limits: Limits, grid: boolean): PackedEvents {
  const n = valid.length;
  const nameIdx = new Map<string, number>();
  const tagIdx = new Map<string, number>();
  const names: string[] = [];
  const tags: string[] = [];
  // Exact sizes first (each string's UTF-8 length, word-aligned), so the pack's arrays are
  // allocated once at their size: no bound to trim by a copy afterwards.
  let nAttr = 0;
  let strWords = 0;
  let idBytesTotal = 0;
  for (let k = 0; k < n; k++) {
    const e = valid[k];
    nAttr += e.names.length + e.tags.length;
    for (let i = 0; i < e.values.length; i++) {
      const v = e.values[i];
      if (typeof v === 'string') strWords += (utf8Length(v) + 3) >>> 2;
    }
    idBytesTotal += utf8Length(e.id);
  }
  const { inp, inpF, evOff, attrOff, strOff, gridOff, points, idEnds, idBytes } = packArrays(n, nAttr, strWords, idBytesTotal, grid && n > 0);
  const strBytes = new Uint8Array(inp.buffer, 4 * strOff, 4 * strWords);
  let a = 0;
  let sw = 0;
  let idAt = 0;
  for (let k = 0; k < n; k++) {
    const e = valid[k];
    const o = evOff + k * EVENT_WORDS;
    unitVector(e.lat, e.lon, inpF, o);
    inpF[o + 3] = e.radiusM;
    points[3 * k] = e.lat;
    points[3 * k + 1] = e.lon;
    points[3 * k + 2] = e.radiusM;
    idAt = utf8Into(idBytes, idAt, e.id);
    idEnds[k] = idAt;
    const start = a;
    for (let i = 0; i < e.names.length; i++, a++) {
      const ao = attrOff + a * ATTR_WORDS;
      inp[ao] = indexIn(nameIdx, names, e.names[i]);
      sw = attributeValue(inp, ao, strBytes, sw, e.values[i]);
    }
    for (let i = 0; i < e.tags.length; i++, a++) {
      const ao = attrOff + a * ATTR_WORDS;
      inp[ao] = (TAG_BIT | indexIn(tagIdx, tags, e.tags[i])) >>> 0;
      inp[ao + 1] = T_BOOL;
      numberKey(1, inp, ao + 2);
    }
    inp[o + 5] = start;
    inp[o + 6] = a - start;
  }
  // The strings as written (the bound counted 3 bytes a UTF-16 unit), then the grid.
  if (grid && n > 0) encodeGrid(inp, inpF, evOff, n, gridOff);
  return new PackedEvents(BUILD, n, inp, points, idEnds, idBytes, names, tags, grid && n > 0, limits);
}


/** Checks a transferred pack whole before any word of it can reach a kernel (`derived`: fromTransfer's option). */
function readTransfer(t: unknown, derived: boolean): PackedEvents {
  const bad = (field: string, rule: string): never => {
    throw new ValidationError(`packed.${field}`, rule);
  };
  if (t === null || typeof t !== 'object') bad('', `must be an object, got ${show(t)}`);
  const o = t as Record<string, unknown>;
  const n = o.count;
  if (typeof n !== 'number' || !Number.isInteger(n) || n < 0 || n > MAX_PACKED_EVENTS) return bad('count', `must be an integer in [0, ${MAX_PACKED_EVENTS}], got ${show(n)}`);
  if (typeof o.grid !== 'boolean') bad('grid', `must be a boolean, got ${show(o.grid)}`);
  if (o.limits === null || typeof o.limits !== 'object') bad('limits', `must be an object, got ${show(o.limits)}`);
  const given = o.limits as Record<string, unknown>;
  const partial: Partial<Limits> = {};
  for (const k of LIMIT_KEYS) partial[k] = given[k] as number;
  const limits = resolveLimits(partial);
  const names = stringList(o.names, 'names', limits.maxNameBytes, bad);
  const tags = stringList(o.tags, 'tags', limits.maxTagBytes, bad);
  for (const k of ['words', 'points', 'ids'] as const) if (!(o[k] instanceof ArrayBuffer)) bad(k, `must be an ArrayBuffer, got ${show(o[k])}`);
  const wb = o.words as ArrayBuffer;
  if (wb.byteLength % 4 !== 0) bad('words', `must be whole 32-bit words, got ${wb.byteLength} bytes`);
  const w = new Uint32Array(wb);
  const evOff = PARAM_WORDS;
  const attrOff = evOff + n * EVENT_WORDS;
  if (w.length < attrOff + 1) return bad('words', `must hold ${attrOff + 1} words or more for ${n} events, got ${w.length}`);
  if (w[P.EVOFF] !== evOff || w[P.ATTROFF] !== attrOff) bad('words', `event and attribute offsets must be ${evOff} and ${attrOff}, got ${w[P.EVOFF]} and ${w[P.ATTROFF]}`);
  const strOff = w[P.STROFF];
  if (strOff < attrOff || (strOff - attrOff) % ATTR_WORDS !== 0 || strOff >= w.length) bad('words', `string offset ${strOff} is not after whole attributes within the words`);
  const nAttr = (strOff - attrOff) / ATTR_WORDS;
  const gridOff = w[P.GRIDOFF];
  const grid = o.grid as boolean;
  if (grid !== (gridOff !== 0) || (grid && n === 0)) bad('grid', `disagrees with the grid offset ${gridOff}`);
  const strEnd = grid ? gridOff - 1 : w.length - 1;
  if (strEnd < strOff || (grid && gridOff + gridWords(n) !== w.length)) bad('words', `the strings and grid do not fill the words (grid at ${gridOff}, ${w.length} words)`);
  const pb = o.points as ArrayBuffer;
  if (pb.byteLength !== 24 * n) bad('points', `must hold ${3 * n} numbers, got ${pb.byteLength} bytes`);
  const points = new Float64Array(pb);
  const ib = o.ids as ArrayBuffer;
  if (ib.byteLength < 4 * n) bad('ids', `must hold ${n} ends, got ${ib.byteLength} bytes`);
  const idEnds = new Uint32Array(ib, 0, n);
  const idBytes = new Uint8Array(ib, 4 * n);
  const strWords = strEnd - strOff;
  // The loops in functions of their own: V8 compiles a small loop far better than one inside this large function.
  const wrong =
    checkEvents(w, points, idEnds, idBytes, n, nAttr, limits) ??
    checkAttributes(w, attrOff, nAttr, names.length, tags.length, strWords, limits.maxStringBytes) ??
    checkEventNames(w, n, names.length, tags, limits);
  if (wrong !== null) bad(wrong[0], wrong[1]);
  if (grid) checkGrid(w, gridOff, n, bad);
  const off = derived ? checkDerived(w, points, n, grid ? gridOff : 0) : null;
  if (off !== null) bad(off[0], off[1]);
  return new PackedEvents(BUILD, n, w, points, idEnds, idBytes, names, tags, grid, limits);
}

/**
 * The words the kernels read that derive from the points (each event's unit vector, its low parts
 * and radius; the grid), which must be those the packer writes from the checked points, so the
 * GPU tests the positions and radii the CPU decodes (the reach of a filter over the grid, the
 * events of each cell); null when they are, else [field, rule].
 */
function checkDerived(w: Uint32Array, points: Float64Array, n: number, gridOff: number): [string, string] | null {
  const head = PARAM_WORDS + n * EVENT_WORDS;
  const buf = new ArrayBuffer(4 * (head + (gridOff !== 0 ? gridWords(n) : 0)));
  const s = new Uint32Array(buf);
  const sf = new Float32Array(buf);
  for (let k = 0; k < n; k++) {
    const e = PARAM_WORDS + k * EVENT_WORDS;
    unitVector(points[3 * k], points[3 * k + 1], sf, e);
    sf[e + 3] = points[3 * k + 2];
    if (s[e] !== w[e] || s[e + 1] !== w[e + 1] || s[e + 2] !== w[e + 2] || s[e + 3] !== w[e + 3] || s[e + 8] !== w[e + 8] || s[e + 9] !== w[e + 9] || s[e + 10] !== w[e + 10]) {
      return ['words', `event ${k}'s unit vector and radius (header words 0-3, 8-10) are not those of its point`];
    }
  }
  if (gridOff !== 0) {
    encodeGrid(s, sf, PARAM_WORDS, n, head);
    const words = gridWords(n);
    for (let i = 0; i < words; i++) if (s[head + i] !== w[gridOff + i]) return ['words', `the grid is not that of the events (word ${i})`];
  }
  return null;
}

/** Each event's id, point and attribute range; null when all are right, else [field, rule]. */
function checkEvents(w: Uint32Array, points: Float64Array, idEnds: Uint32Array, ids: Uint8Array, n: number, nAttr: number, limits: Limits): [string, string] | null {
  const idsWhole = isUtf8(ids);
  const maxId = limits.maxIdBytes;
  const maxR = limits.maxEventRadiusM;
  const maxAttrs = limits.maxAttributesPerEvent + limits.maxTagsPerEvent;
  const idBytes = ids.length;
  let prev = 0;
  let at = 0;
  for (let k = 0; k < n; k++) {
    const end = idEnds[k];
    if (end <= prev || end - prev > maxId || end > idBytes) return [`ids[${k}]`, `must be 1..${maxId} bytes within the ids`];
    // Within well-formed bytes (idsWhole), an id that ends on a character's boundary is well-formed (it starts where the previous one ended).
    if ((end < idBytes && isContinuation(ids[end])) || !(idsWhole || utf8Ok(ids, prev, end))) return [`ids[${k}]`, 'must be well-formed UTF-8'];
    prev = end;
    const lat = points[3 * k];
    const lon = points[3 * k + 1];
    const r = points[3 * k + 2];
    if (!(lat >= -90 && lat <= 90 && lon >= -180 && lon <= 180 && r >= 0 && r <= maxR)) return [`points[${k}]`, `must be a position and radius within the limits, got ${lat}, ${lon}, ${r}`];
    if (r === 0) points[3 * k + 2] = 0; // -0: the model's normal form is 0
    const e = PARAM_WORDS + k * EVENT_WORDS;
    const count = w[e + 6];
    if (w[e + 5] !== at || count > nAttr - at || count > maxAttrs) return ['words', `event ${k}'s attributes [${w[e + 5]}, +${count}) do not follow the previous event's within ${nAttr}`];
    at += count;
  }
  if (at !== nAttr) return ['words', `events hold ${at} attributes, the words ${nAttr}`];
  if (prev !== idBytes) return ['ids', `hold ${idBytes} bytes, the ends ${prev}`];
  return null;
}

/** Each attribute's name, type and string range; null when all are right, else [field, rule]. */
function checkAttributes(w: Uint32Array, attrOff: number, nAttr: number, names: number, tags: number, strWords: number, maxStringBytes: number): [string, string] | null {
  // Read as int32: a tag's name word (bit 31 set) is then negative, and every value a small integer.
  const v = new Int32Array(w.buffer, w.byteOffset, w.length);
  const bytes = new Uint8Array(w.buffer, w.byteOffset + 4 * w[P.STROFF], 4 * strWords);
  // One native pass over all the strings (and their zero padding); each string alone only where that fails.
  const whole = isUtf8(bytes);
  const end = attrOff + nAttr * ATTR_WORDS;
  for (let ao = attrOff; ao < end; ao += ATTR_WORDS) {
    const name = v[ao];
    const t = v[ao + 1];
    if (t === T_STR) {
      const len = v[ao + 2] + ((v[ao + 3] + 3) >>> 2);
      if (name < 0 || name >= names || v[ao + 3] < 0 || v[ao + 3] > maxStringBytes || v[ao + 2] < 0 || len > strWords) return attributeWrong(w, (ao - attrOff) / ATTR_WORDS, names, tags);
      // Within well-formed bytes (whole), a string that starts and ends on characters' boundaries is well-formed.
      const from = 4 * v[ao + 2];
      const to = from + v[ao + 3];
      if (to > from && (isContinuation(bytes[from]) || (to < bytes.length && isContinuation(bytes[to])) || !(whole || utf8Ok(bytes, from, to)))) {
        return ['words', `attribute ${(ao - attrOff) / ATTR_WORDS}'s string is not well-formed UTF-8`];
      }
    } else if (name < 0 ? (name & 0x7fffffff) >= tags || t !== T_BOOL : name >= names || (t !== T_NUM && t !== T_BOOL)) {
      return attributeWrong(w, (ao - attrOff) / ATTR_WORDS, names, tags);
    } else if (!keyOk(v[ao + 2], v[ao + 3], name < 0 ? TAG : t)) {
      // The key's words as int32 (small integers, no number boxed per attribute); shown unsigned.
      return ['words', `attribute ${(ao - attrOff) / ATTR_WORDS}'s value ${w[ao + 2]}, ${w[ao + 3]} is not ${name < 0 ? "a tag's (true)" : t === T_NUM ? 'a finite number other than -0' : 'false or true'}`];
    }
  }
  return null;
}

/** keyOk's kind for a tag's value. */
const TAG = -1;
/** numberKey's hi word of 0 (false) and of 1 (true), as int32; the lo word of both is 0. */
const KEY_0_HI = 0x80000000 | 0;
const KEY_1_HI = 0xbff00000 | 0;

/**
 * Whether (hi, lo), numberKey's words read as int32, are the key of a value of `kind`: a finite
 * number not -0 (numberKey never writes it), false or true, a tag's true.
 */
function keyOk(hi: number, lo: number, kind: number): boolean {
  if (kind === T_NUM) {
    // The float64's exponent bits (all ones: Infinity or NaN); a negative number's key is its bits flipped.
    const exp = hi < 0 ? (hi >>> 20) & 0x7ff : (~hi >>> 20) & 0x7ff;
    return exp !== 0x7ff && !(hi === 0x7fffffff && lo === -1);
  }
  return lo === 0 && (hi === KEY_1_HI || (kind === T_BOOL && hi === KEY_0_HI));
}

/**
 * Each event's names and tags as the model's check gives them: at most maxAttributesPerEvent
 * names and maxTagsPerEvent tags (each within its own limit, not their sum), no name twice, its
 * tags distinct and sorted (the tables hold each string once, so indices decide); null when all
 * are right, else [field, rule].
 */
function checkEventNames(w: Uint32Array, n: number, names: number, tags: readonly string[], limits: Limits): [string, string] | null {
  const attrOff = w[P.ATTROFF];
  // The last event (k + 1) that named each name: no clearing between events.
  const seen = new Uint32Array(names);
  for (let k = 0; k < n; k++) {
    const e = PARAM_WORDS + k * EVENT_WORDS;
    const start = w[e + 5];
    const end = start + w[e + 6];
    let nNames = 0;
    let nTags = 0;
    let lastTag: string | null = null;
    for (let a = start; a < end; a++) {
      const name = w[attrOff + a * ATTR_WORDS];
      if (name & TAG_BIT) {
        const tag = tags[name & ~TAG_BIT];
        if (lastTag !== null && !(lastTag < tag)) return ['words', `event ${k}'s tags are not distinct and sorted (${show(lastTag)} before ${show(tag)})`];
        lastTag = tag;
        nTags++;
      } else {
        if (seen[name] === k + 1) return ['words', `event ${k} holds name ${name} twice`];
        seen[name] = k + 1;
        nNames++;
      }
    }
    if (nNames > limits.maxAttributesPerEvent || nTags > limits.maxTagsPerEvent) return ['words', `event ${k} holds ${nNames} attributes and ${nTags} tags, beyond the limits' ${limits.maxAttributesPerEvent} and ${limits.maxTagsPerEvent}`];
  }
  return null;
}

/** A UTF-8 continuation byte (10xxxxxx): no character starts there. */
function isContinuation(b: number): boolean {
  return (b & 0xc0) === 0x80;
}

/** Whether bytes [from, to) of `b` are well-formed UTF-8 (no overlong form, surrogate or code point past U+10FFFF). */
function utf8Ok(b: Uint8Array, from: number, to: number): boolean {
  let i = from;
  while (i < to) {
    const c = b[i];
    if (c < 0x80) {
      i++;
      continue;
    }
    let n: number;
    let lo = 0x80;
    let hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf) n = 1;
    else if (c >= 0xe0 && c <= 0xef) {
      n = 2;
      if (c === 0xe0) lo = 0xa0;
      else if (c === 0xed) hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
      n = 3;
      if (c === 0xf0) lo = 0x90;
      else if (c === 0xf4) hi = 0x8f;
    } else return false;
    if (i + n >= to) return false;
    const c1 = b[i + 1];
    if (c1 < lo || c1 > hi) return false;
    for (let j = 2; j <= n; j++) if ((b[i + j] & 0xc0) !== 0x80) return false;
    i += n + 1;
  }
  return true;
}

/** What is wrong with attribute `a` (checkAttributes found it wrong). */
function attributeWrong(w: Uint32Array, a: number, names: number, tags: number): [string, string] {
  const ao = a * ATTR_WORDS + w[P.ATTROFF];
  const name = w[ao];
  const t = w[ao + 1];
  if (t !== T_NUM && t !== T_BOOL && t !== T_STR) return ['words', `attribute ${a} has type ${t}`];
  if (name & TAG_BIT ? (name & ~TAG_BIT) >= tags || t !== T_BOOL : name >= names) return ['words', `attribute ${a} names ${name >>> 0}, beyond the ${names} names and ${tags} tags`];
  return ['words', `attribute ${a}'s string lies outside the strings`];
}

/**
 * A pack's table of names or tags (a copy): distinct well-formed strings of 1..`maxBytes` UTF-8
 * bytes, tags in their normal form, as the packer's check let through.
 */
function stringList(v: unknown, field: string, maxBytes: number, bad: (f: string, r: string) => never): string[] {
  if (!Array.isArray(v)) return bad(field, `must be an array, got ${show(v)}`);
  const out: string[] = new Array(v.length);
  const seen = new Set<string>();
  for (let i = 0; i < v.length; i++) {
    const s: unknown = v[i];
    if (typeof s !== 'string') return bad(`${field}[${i}]`, `must be a string, got ${show(s)}`);
    if (!isWellFormed(s)) bad(`${field}[${i}]`, 'must be well-formed Unicode (no lone surrogates)');
    const n = utf8Length(s);
    if (n < 1 || n > maxBytes) bad(`${field}[${i}]`, `must be 1..${maxBytes} bytes, got ${n}`);
    if (field === 'tags') {
      let t: string | null = null;
      try {
        t = normalizeTag(`${field}[${i}]`, s, maxBytes);
      } catch {
        // refused below
      }
      if (t !== s) bad(`${field}[${i}]`, `must be a tag in its normal form, got ${show(s)}`);
    }
    if (seen.has(s)) bad(`${field}[${i}]`, `must appear once in the table, got ${show(s)} again`);
    seen.add(s);
    out[i] = s;
  }
  return out;
}

/** The grid as encodeGrid writes it: dims within 4n cells, cell starts rising to n, every index an event. */
function checkGrid(w: Uint32Array, off: number, n: number, bad: (f: string, r: string) => never): void {
  const dx = w[off + 4];
  const dy = w[off + 5];
  const dz = w[off + 6];
  const cells = dx * dy * dz;
  if (dx < 1 || dy < 1 || dz < 1 || cells > 4 * n) bad('words', `grid of ${dx}×${dy}×${dz} cells for ${n} events`);
  const startAt = off + GRID_HEADER_WORDS;
  if (w[startAt] !== 0 || w[startAt + cells] !== n) bad('words', 'grid cell starts do not span the events');
  for (let c = 0; c < cells; c++) if (w[startAt + c + 1] < w[startAt + c]) bad('words', `grid cell ${c} starts after the next`);
  const idxAt = startAt + cells + 1;
  for (let k = 0; k < n; k++) if (w[idxAt + k] >= n) bad('words', `grid index ${k} names event ${w[idxAt + k]} of ${n}`);
}

// String.prototype.isWellFormed is in Node 20 (V8 11.3); ES2024 typings are not in our lib.
const isWellFormed = (s: string): boolean => (s as unknown as { isWellFormed(): boolean }).isWellFormed();

/** `PackedEvents.pack`. */
export function packEvents(events: readonly unknown[], options: PackOptions = {}): PackedEvents {
  return PackedEvents.pack(events, options);
}

/** `PackedEvents.packAll`. */
export function packEventBatches(events: readonly unknown[], maxEvents: number, options: PackOptions = {}): PackedEvents[] {
  return PackedEvents.packAll(events, maxEvents, options);
}
