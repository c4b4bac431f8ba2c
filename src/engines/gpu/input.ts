/**
 * The batch input of match.wgsl: one u32 buffer per batch holding the parameters, the events'
 * headers and attributes, their strings, and optionally the grid of cells the events are binned
 * into (the word layout is documented at the top of match.wgsl). Numbers and names are encoded here
 * exactly as the constraints they meet (numberKey, bloomBit), so the state mirror (layout.ts)
 * imports these encoders.
 */
import type { NEvent } from '../../model/limits.js';
import { T_BOOL, T_NUM, T_STR } from '../operators.js';

/**
 * Words per event header (EventHdr: unit vector, radius, Bloom, attributes; words 8-10 the unit
 * vector's low parts, what float32 leaves of the float64 vector) and per attribute (Attr) in match.wgsl.
 */
export const EVENT_WORDS = 12;
export const ATTR_WORDS = 4;
/** Parameter words at the head of the batch input. */
export const PARAM_WORDS = 16;
/**
 * Parameter word indices (the kernels read them as P_<NAME>). Words 3 and 7 are unused; 13-15 pad
 * the parameters to PARAM_WORDS. The host fills 0-7 per batch, encode() fills 8-12.
 */
export const P = Object.freeze({
  FILTERS: 0,
  EVENTS: 1,
  CANDCAP: 2,
  OUTCAP: 4,
  CONTGROUPS: 5,
  /** Workgroups per row when Loc's x is split over x and z. */
  LOCSTRIDE: 6,
  EVOFF: 8,
  ATTROFF: 9,
  STROFF: 10,
  /** 0: no grid (Loc tests every event). */
  GRIDOFF: 11,
  /** OR of the batch's event Bloom words. */
  BLOOMOR: 12,
});
/**
 * Grid header in the batch input: min x y z (f32), 1/cell size (f32), nx ny nz, max event radius
 * (f32), then the grid's frame: rows u, v, w (9 f32).
 */
export const GRID_HEADER_WORDS = 17;

export const RAD = Math.PI / 180;

/** In a packed batch (packed.ts), the high bit of an attribute's name word: a tag (an index into the pack's tags), not an attribute name. */
export const TAG_BIT = 0x80000000;
/** The name word of an attribute whose name no filter uses: no constraint's name equals it. */
const NO_NAME = 0xffffffff;

/** A packed batch as the encoder reads it (packed.ts). */
export interface PackedInput {
  readonly count: number;
  readonly words: Uint32Array;
  readonly names: readonly string[];
  readonly tags: readonly string[];
}

// Order-preserving 64-bit keys: the IEEE-754 bits with the sign flipped for positives and all
// bits flipped for negatives compare as unsigned integers exactly as the doubles compare.
const f64 = new Float64Array(1);
const w32 = new Uint32Array(f64.buffer);
export function numberKey(v: number, out: Uint32Array, o: number): void {
  f64[0] = v === 0 ? 0 : v; // -0 == 0
  let lo = w32[0];
  let hi = w32[1];
  if (hi & 0x80000000) {
    hi = ~hi >>> 0;
    lo = ~lo >>> 0;
  } else {
    hi = (hi | 0x80000000) >>> 0;
  }
  out[o] = hi;
  out[o + 1] = lo;
}

/**
 * The unit vector of (lat, lon) at `o` of `out` as float32 (words o..o+2) and what float32 leaves of
 * the float64 vector at o+8..o+10 (an event header's low parts): hi + lo is the float64 vector to
 * about 1e-15, so a kernel can test a pair near a circle's boundary to millimetres (match.wgsl,
 * fineClass). The position slots' vectors are split the same way (layout.ts, takeMoved).
 */
export function unitVector(lat: number, lon: number, out: Float32Array, o: number): void {
  const phi = lat * RAD;
  const lam = lon * RAD;
  const c = Math.cos(phi);
  const x = c * Math.cos(lam);
  const y = c * Math.sin(lam);
  const z = Math.sin(phi);
  out[o] = x;
  out[o + 1] = y;
  out[o + 2] = z;
  out[o + 8] = x - out[o];
  out[o + 9] = y - out[o + 1];
  out[o + 10] = z - out[o + 2];
}

/** 32-bit Bloom bit of an interned name (CLCB §4.2: 32 bits suffice for a pre-filter). */
export function bloomBit(id: number): number {
  return Math.imul(id + 1, 0x9e3779b1) >>> 27;
}

/**
 * An orthonormal frame (rows u, v, w; 9 numbers) with w along (x, y, z), the sum of a batch's unit
 * vectors; the identity when the sum is too short to point anywhere (a batch spread over the globe).
 */
export function gridFrame(x: number, y: number, z: number): number[] {
  const len = Math.hypot(x, y, z);
  if (!(len > 1e-9)) return [1, 0, 0, 0, 1, 0, 0, 0, 1];
  const w = [x / len, y / len, z / len];
  // u: perpendicular to w and to the axis w is least aligned with.
  const axis = Math.abs(w[2]) < 0.9 ? [0, 0, 1] : [1, 0, 0];
  let u = [axis[1] * w[2] - axis[2] * w[1], axis[2] * w[0] - axis[0] * w[2], axis[0] * w[1] - axis[1] * w[0]];
  const ul = Math.hypot(u[0], u[1], u[2]);
  u = [u[0] / ul, u[1] / ul, u[2] / ul];
  const v = [w[1] * u[2] - w[2] * u[1], w[2] * u[0] - w[0] * u[2], w[0] * u[1] - w[1] * u[0]];
  return [...u, ...v, ...w];
}

/**
 * Writes the UTF-8 of `v` into `bytes` from `at`; returns the end. Strings reaching here were
 * validated well-formed; a lone surrogate would become U+FFFD, as Buffer.write does.
 */
export function utf8Into(bytes: Uint8Array, at: number, v: string): number {
  const n = v.length;
  for (let c = 0; c < n; c++) {
    let code = v.charCodeAt(c);
    if (code < 0x80) {
      bytes[at++] = code;
    } else if (code < 0x800) {
      bytes[at++] = 0xc0 | (code >> 6);
      bytes[at++] = 0x80 | (code & 0x3f);
    } else if (code >= 0xd800 && code <= 0xdfff) {
      const lo = c + 1 < n ? v.charCodeAt(c + 1) : 0;
      if (code <= 0xdbff && lo >= 0xdc00 && lo <= 0xdfff) {
        code = 0x10000 + ((code - 0xd800) << 10) + (lo - 0xdc00);
        c++;
        bytes[at++] = 0xf0 | (code >> 18);
        bytes[at++] = 0x80 | ((code >> 12) & 0x3f);
        bytes[at++] = 0x80 | ((code >> 6) & 0x3f);
        bytes[at++] = 0x80 | (code & 0x3f);
      } else {
        bytes[at++] = 0xef;
        bytes[at++] = 0xbf;
        bytes[at++] = 0xbd;
      }
    } else {
      bytes[at++] = 0xe0 | (code >> 12);
      bytes[at++] = 0x80 | ((code >> 6) & 0x3f);
      bytes[at++] = 0x80 | (code & 0x3f);
    }
  }
  return at;
}

/**
 * Writes an attribute's type and value at word `ao` (a string's UTF-8 at string word `sw` of
 * `strBytes`, word-aligned); returns the next free string word.
 */
export function attributeValue(inp: Uint32Array, ao: number, strBytes: Uint8Array, sw: number, v: string | number | boolean): number {
  if (typeof v === 'string') {
    // UTF-8 straight into the buffer, in JS: a native encode per short string costs more than the
    // string (no view or result object per string either).
    const at = sw * 4;
    const written = utf8Into(strBytes, at, v) - at;
    inp[ao + 1] = T_STR;
    inp[ao + 2] = sw;
    inp[ao + 3] = written;
    return sw + Math.ceil(written / 4);
  }
  inp[ao + 1] = typeof v === 'number' ? T_NUM : T_BOOL;
  numberKey(typeof v === 'number' ? v : v ? 1 : 0, inp, ao + 2);
  return sw;
}

/** Bytes utf8Into writes for `v` (a lone surrogate: the 3 of U+FFFD). */
export function utf8Length(v: string): number {
  const n = v.length;
  let b = n;
  for (let c = 0; c < n; c++) {
    const code = v.charCodeAt(c);
    if (code < 0x80) continue;
    if (code < 0x800) b += 1;
    else if (code >= 0xd800 && code <= 0xdfff) {
      const lo = c + 1 < n ? v.charCodeAt(c + 1) : 0;
      if (code <= 0xdbff && lo >= 0xdc00 && lo <= 0xdfff) {
        b += 2; // 4 bytes for the pair's 2 units
        c++;
      } else b += 2; // U+FFFD
    } else b += 2;
  }
  return b;
}

/** Encodes batches into scratch memory reused across batches. */
export class EventEncoder {
  /** The batch input's memory (the result of encode() is valid until the next call). */
  private scratchInput = new ArrayBuffer(4096);
  /** Name ids of a batch's attributes. */
  private scratchIds = new Int32Array(1024);

  private scratchNames = new Uint32Array(64);

  /**
   * The batch input of a packed batch (packed.ts): its words with each attribute's name index
   * turned into the name's id here (NO_NAME where no filter uses it: no constraint can test it) and
   * the events' Bloom words, the only per-event work left for the engine's thread. Valid until
   * the next call.
   */
  encodePacked(p: PackedInput, nameIds: ReadonlyMap<string, number>, tagIds: ReadonlyMap<string, number>): Uint32Array {
    const src = p.words;
    const words = src.length;
    if (this.scratchInput.byteLength < 4 * words) this.scratchInput = new ArrayBuffer(Math.max(4 * words, 2 * this.scratchInput.byteLength));
    const inp = new Uint32Array(this.scratchInput, 0, words);
    inp.set(src);
    const nn = p.names.length;
    const nt = p.tags.length;
    if (this.scratchNames.length < nn + nt) this.scratchNames = new Uint32Array(Math.max(nn + nt, 2 * this.scratchNames.length));
    const ids = this.scratchNames;
    for (let i = 0; i < nn; i++) ids[i] = nameIds.get(p.names[i]) ?? NO_NAME;
    for (let i = 0; i < nt; i++) ids[nn + i] = tagIds.get(p.tags[i]) ?? NO_NAME;
    const evOff = inp[P.EVOFF];
    const attrOff = inp[P.ATTROFF];
    let or = 0;
    for (let k = 0; k < p.count; k++) {
      const o = evOff + k * EVENT_WORDS;
      const end = inp[o + 5] + inp[o + 6];
      let bloom = 0;
      for (let a = inp[o + 5]; a < end; a++) {
        const ao = attrOff + a * ATTR_WORDS;
        const w = inp[ao];
        const id = w & TAG_BIT ? ids[nn + (w & ~TAG_BIT)] : ids[w];
        inp[ao] = id;
        if (id !== NO_NAME) bloom |= 1 << bloomBit(id);
      }
      inp[o + 4] = bloom >>> 0;
      or |= bloom;
    }
    inp[P.BLOOMOR] = or >>> 0;
    return inp;
  }

  /**
   * Encodes a batch of events into the one input buffer of match.wgsl: 16 parameter words (the
   * caller fills words 0-7), event headers, attributes and the UTF-8 of string attributes.
   * Attributes whose name no constraint uses are left out.
   */
  /**
   * The batch input (layout in match.wgsl). With `grid`, the events are also binned into a grid of
   * cubic cells over their unit vectors' bounding box (cell start offsets + event indices, a
   * counting sort), so Loc scans only the cells within a filter's reach instead of every event.
   * Unit vectors need no antimeridian or pole cases.
   */
  encode(events: readonly NEvent[], nameIds: ReadonlyMap<string, number>, tagIds: ReadonlyMap<string, number>, grid = false): Uint32Array {
    // The result is a view of scratch memory: valid until the next call.
    // One name lookup per attribute: the first pass keeps the ids (-1: a name no filter uses,
    // so no constraint can test it and it is left out).
    // An event's tags follow its attributes, each an attribute of the tag's name (tagName, whose
    // id tagIds holds) that any value satisfies: the filters' tags are `exists` constraints.
    const tags = tagIds.size > 0;
    let total = 0;
    for (let k = 0; k < events.length; k++) total += events[k].names.length + (tags ? events[k].tags.length : 0);
    if (this.scratchIds.length < total) this.scratchIds = new Int32Array(Math.max(total, 2 * this.scratchIds.length));
    const ids = this.scratchIds;
    let nAttr = 0;
    let strWords = 0;
    let j = 0;
    for (let k = 0; k < events.length; k++) {
      const e = events[k];
      for (let i = 0; i < e.names.length; i++, j++) {
        const id = nameIds.get(e.names[i]);
        if (id === undefined) {
          ids[j] = -1;
          continue;
        }
        ids[j] = id;
        nAttr++;
        const v = e.values[i];
        if (typeof v === 'string') strWords += Math.ceil((v.length * 3) / 4) + 1;
      }
      if (!tags) continue;
      for (let i = 0; i < e.tags.length; i++, j++) {
        const id = tagIds.get(e.tags[i]);
        ids[j] = id === undefined ? -1 : id;
        if (id !== undefined) nAttr++;
      }
    }
    const evOff = PARAM_WORDS;
    const attrOff = evOff + events.length * EVENT_WORDS;
    const strOff = attrOff + nAttr * ATTR_WORDS;
    const gridOff = strOff + strWords + 1;
    const words = gridOff + (grid ? gridWords(events.length) : 0);
    if (this.scratchInput.byteLength < 4 * words) this.scratchInput = new ArrayBuffer(Math.max(4 * words, 2 * this.scratchInput.byteLength));
    const inp = new Uint32Array(this.scratchInput, 0, words);
    inp.fill(0);
    const inpF = new Float32Array(this.scratchInput, 0, words);
    const strBytes = new Uint8Array(this.scratchInput, strOff * 4, strWords * 4);
    inp[P.EVOFF] = evOff;
    inp[P.ATTROFF] = attrOff;
    inp[P.STROFF] = strOff;
    let a = 0;
    let sw = 0;
    j = 0;
    for (let k = 0; k < events.length; k++) {
      const e = events[k];
      const o = evOff + k * EVENT_WORDS;
      unitVector(e.lat, e.lon, inpF, o);
      inpF[o + 3] = e.radiusM;
      let bloom = 0;
      const start = a;
      for (let i = 0; i < e.names.length; i++, j++) {
        const id = ids[j];
        if (id < 0) continue;
        bloom |= 1 << bloomBit(id);
        const ao = attrOff + a * ATTR_WORDS;
        inp[ao] = id;
        sw = attributeValue(inp, ao, strBytes, sw, e.values[i]);
        a++;
      }
      if (tags) {
        for (let i = 0; i < e.tags.length; i++, j++) {
          const id = ids[j];
          if (id < 0) continue;
          bloom |= 1 << bloomBit(id);
          const ao = attrOff + a * ATTR_WORDS;
          inp[ao] = id;
          inp[ao + 1] = T_BOOL;
          numberKey(1, inp, ao + 2);
          a++;
        }
      }
      inp[o + 4] = bloom >>> 0;
      inp[o + 5] = start;
      inp[o + 6] = a - start;
      inp[P.BLOOMOR] |= bloom;
    }
    inp[P.BLOOMOR] >>>= 0;
    if (grid && events.length > 0) encodeGrid(inp, inpF, evOff, events.length, gridOff);
    return inp;
  }
}

/**
 * Words the grid of a batch of `n` events takes (encodeGrid): its header, at most 4n cells plus
 * one, and an index per event.
 */
export function gridWords(n: number): number {
  return GRID_HEADER_WORDS + 4 * n + 2 + n;
}

/**
 * Bins the events into cells (see EventEncoder.encode); writes the grid at `off` and its offset to word
 * P.GRIDOFF. Cells are cubes in a frame turned so that w points at the batch's centre: a batch within a
 * city is a flat patch of the sphere, so it lies in the u-v plane one cell deep and a filter's
 * reach spans a few rows of cells instead of a box of them. A rotation keeps distances, so the
 * kernel's reach box in that frame misses no event.
 */
export function encodeGrid(inp: Uint32Array, inpF: Float32Array, evOff: number, n: number, off: number): void {
  let sx = 0;
  let sy = 0;
  let sz = 0;
  let maxR = 0;
  for (let k = 0; k < n; k++) {
    const o = evOff + k * EVENT_WORDS;
    sx += inpF[o];
    sy += inpF[o + 1];
    sz += inpF[o + 2];
    if (inpF[o + 3] > maxR) maxR = inpF[o + 3];
  }
  const frame = gridFrame(sx, sy, sz);
  const gf = new Float32Array(inp.buffer, off * 4, GRID_HEADER_WORDS);
  for (let i = 0; i < 9; i++) gf[8 + i] = frame[i];
  const f = gf.subarray(8, 17); // as the kernel reads it (float32)
  const rot = new Float64Array(3 * n);
  const lo = [Infinity, Infinity, Infinity];
  const hi = [-Infinity, -Infinity, -Infinity];
  for (let k = 0; k < n; k++) {
    const o = evOff + k * EVENT_WORDS;
    const x = inpF[o];
    const y = inpF[o + 1];
    const z = inpF[o + 2];
    for (let a = 0; a < 3; a++) {
      const v = f[3 * a] * x + f[3 * a + 1] * y + f[3 * a + 2] * z;
      rot[3 * k + a] = v;
      if (v < lo[a]) lo[a] = v;
      if (v > hi[a]) hi[a] = v;
    }
  }
  // About 2 cells per event (at most 4n): cubic cells sized on the largest extent, so a city's
  // batch gets a 2-D grid and a world-wide batch a coarse 3-D one.
  const ext = [hi[0] - lo[0], hi[1] - lo[1], hi[2] - lo[2]];
  const target = 2 * n;
  let size = Math.max(ext[0], ext[1], ext[2]) / Math.max(1, Math.ceil(Math.sqrt(target)));
  if (!(size > 0)) size = 1; // every event at one point: one cell
  let dims = [1, 1, 1];
  for (;;) {
    dims = ext.map((e) => Math.max(1, Math.ceil(e / size)));
    if (dims[0] * dims[1] * dims[2] <= 4 * n) break;
    size *= 1.5;
  }
  const inv = Math.fround(1 / size);
  const cells = dims[0] * dims[1] * dims[2];
  gf[0] = lo[0];
  gf[1] = lo[1];
  gf[2] = lo[2];
  gf[3] = inv;
  inp[off + 4] = dims[0];
  inp[off + 5] = dims[1];
  inp[off + 6] = dims[2];
  gf[7] = maxR;
  // Counting sort of events by cell (x fastest, so a row of cells is one index range).
  const startAt = off + GRID_HEADER_WORDS;
  const idxAt = startAt + cells + 1;
  const cellOf = new Uint32Array(n);
  const cell = (v: number, a: number) => Math.min(dims[a] - 1, Math.max(0, Math.floor((v - Math.fround(lo[a])) * inv)));
  for (let k = 0; k < n; k++) {
    const c = cell(rot[3 * k], 0) + dims[0] * (cell(rot[3 * k + 1], 1) + dims[1] * cell(rot[3 * k + 2], 2));
    cellOf[k] = c;
    inp[startAt + c + 1]++;
  }
  for (let c = 0; c < cells; c++) inp[startAt + c + 1] += inp[startAt + c];
  const fill = inp.slice(startAt, startAt + cells);
  for (let k = 0; k < n; k++) inp[idxAt + fill[cellOf[k]]++] = k;
  inp[P.GRIDOFF] = off;
}
