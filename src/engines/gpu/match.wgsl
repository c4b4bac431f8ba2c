// CLCB on WebGPU: the Loc, Cont and Zip stages (CLCB §4, Algorithm 1; CCM §4, Algorithm 1).
// Layout is owned by src/engines/gpu/layout.ts; every array has 4-byte elements so no binding passes 2 GiB.
// Bindings, operator and type codes, fMeta bits and the parameter words (P_*) are declared in
// src/engines/gpu/bindings.ts, which prepends them to this file: declare no @binding here.
//
// Loc  (x: filters): Bloom inclusion of constraint names (S1a), then the distance test on unit
//      vectors (S1b) in float32, per (filter, event) pair; survivors are appended to the event's
//      candidate list, those within float32's uncertainty of the boundary (the band) marked BAND.
//      Two entry points: `locFew` for batches without a grid (a lone event, a few events): no
//      workgroup memory and no barrier, so a filter the batch-wide Bloom OR rules out costs one
//      4-byte read and its thread is done; `loc` for batches with a grid: a filter scans only the
//      cells within its reach, or (no area, a reach over many cells) every event, staged in
//      workgroup memory.
// Cont (x: workgroups striding over candidates, y: event): evaluates each candidate's constraints
//      exactly (numbers as order-preserving 64-bit keys, strings on UTF-8 bytes, like / regex by
//      the pattern's automaton over code points) against the
//      event's attributes, staged in workgroup memory, and overwrites the candidate with its
//      subscription index (a band candidate: its filter index, still marked BAND), or NO_MATCH.
//      A filter of names only (META_NAMES: tags, at most one `exists`) has its name ids as words of cStr
//      (the first in fPos when it has no area).
// Zip  (same grid as Cont): compacts the marked candidates into (event, mark) pairs with one
//      global atomic per workgroup round. A subscription whose several filters match one event
//      appears once per filter here; the host keeps the first (CLCB's per-event bit vector would
//      cost subscriptions / 8 bytes per event of the batch, and its clearing pass as much
//      traffic, where duplicates are rare and cost the host one array read each), and decides
//      each band pair with the reference's float64 distance before it counts.

override WG: u32 = 128;

// The batch input, one buffer written with one writeBuffer per batch (u32 words):
//   [0, 16)   parameters (below)
//   [evOff)   EVENT_WORDS (12) per event: x, y, z (unit vector, f32), radius m (f32), Bloom,
//             attrStart, attrCount, 0, then the unit vector's low parts x, y, z (f32), 0
//   [attrOff) 4 words per attribute: name, type (0 number, 1 string, 2 bool), value a, value b
//             (number/bool: order-preserving key hi/lo; string: word offset from strOff / byte length)
//   [strOff)  UTF-8 of string attributes, 4 bytes a word, each string word-aligned
//   [gridOff) optional: min x y z (f32), 1/cell (f32), nx, ny, nz, max event radius m (f32),
//             the grid's frame (3 orthonormal rows u, v, w, f32: a batch within a city lies in
//             the u-v plane, one cell deep in w), then nx*ny*nz + 1 cell start offsets (x
//             fastest), then event indices sorted by cell. Cell coordinates are (u.p, v.p, w.p);
//             a rotation keeps distances, so the reach box is exact up to rounding (margin below).
//           The parameter words are P_* (input.ts).

struct EventHdr {
  p: vec3<f32>,
  radiusM: f32,
  bloom: u32,
  attrStart: u32,
  attrCount: u32,
};

struct Attr {
  name: u32,
  kind: u32,
  a: u32,
  b: u32,
};

fn eventHdr(e: u32) -> EventHdr {
  let o = inp[P_EVOFF] + e * EVENT_WORDS;
  return EventHdr(
    vec3<f32>(bitcast<f32>(inp[o]), bitcast<f32>(inp[o + 1u]), bitcast<f32>(inp[o + 2u])),
    bitcast<f32>(inp[o + 3u]), inp[o + 4u], inp[o + 5u], inp[o + 6u]);
}

fn attr(j: u32) -> Attr {
  let o = inp[P_ATTROFF] + j * 4u;
  return Attr(inp[o], inp[o + 1u], inp[o + 2u], inp[o + 3u]);
}

const EARTH_RADIUS_M: f32 = 6371008.8;

// sin() of WGSL promises only ~2^-11 absolute error (NVIDIA's is that coarse), metres at these
// angles; half-angles here are at most (2 x 2000 km) / (2 R) = 0.314 rad, where four Taylor terms
// are exact to float32 rounding (the next term is < 1e-10).
fn sinSmall(x: f32) -> f32 {
  let x2 = x * x;
  return x * (1.0 - x2 / 6.0 * (1.0 - x2 / 20.0 * (1.0 - x2 / 42.0)));
}

var<workgroup> wgCount: atomic<u32>;
var<workgroup> wgBase: u32;

// Events staged in workgroup memory per tile: each thread reads its filter once per batch and
// tests it against every event of the batch (the batch shares the filter reads).
const EV_TILE: u32 = 64u;
var<workgroup> tileP: array<vec4<f32>, EV_TILE>; // unit vector, radius
var<workgroup> tileBloom: array<u32, EV_TILE>;
var<workgroup> wgEvents: u32;
var<workgroup> wgAll: atomic<u32>;

// A filter's way through the batch: no event can match, scan the grid cells within its reach, or
// test every event (no area, no grid, or a reach spanning too many cells).
const MODE_NONE: u32 = 0u;
const MODE_CELLS: u32 = 1u;
const MODE_ALL: u32 = 2u;
// Beyond this many rows of cells, the tiled scan of every event is cheaper.
const MAX_ROWS: u32 = 48u;

// The grid's frame as a matrix whose rows are u, v, w: frame * p = (u.p, v.p, w.p).
fn gridFrame(g: u32) -> mat3x3<f32> {
  let f = array<f32, 9>(
    bitcast<f32>(inp[g + 8u]), bitcast<f32>(inp[g + 9u]), bitcast<f32>(inp[g + 10u]),
    bitcast<f32>(inp[g + 11u]), bitcast<f32>(inp[g + 12u]), bitcast<f32>(inp[g + 13u]),
    bitcast<f32>(inp[g + 14u]), bitcast<f32>(inp[g + 15u]), bitcast<f32>(inp[g + 16u]));
  // mat3x3 is column-major: column j holds the j-th components of u, v, w.
  return mat3x3<f32>(
    vec3<f32>(f[0], f[3], f[6]),
    vec3<f32>(f[1], f[4], f[7]),
    vec3<f32>(f[2], f[5], f[8]));
}

// S1b in float32, decided only where float32 is certain. The chord between unit vectors is
// compared with the chords of r - b and r + b (r = r_f + r_e, b = bandM(r)): beyond r + b the
// pair cannot match, within r - b it matches, and in between (the band, where float32 rounding of
// the unit vectors, about a metre, could decide it either way) the pair goes to the host marked
// BAND, which decides it with the float64 haversine of the reference (docs/gpu.md, exactness).
const BAND_MIN_M: f32 = 4.0;
const BAND_REL: f32 = 0.002;
const BAND: u32 = 0x80000000u;

fn bandM(r: f32) -> f32 {
  return max(BAND_MIN_M, BAND_REL * r);
}

fn chordOf(m: f32) -> f32 {
  return 2.0 * sinSmall(m / (2.0 * EARTH_RADIUS_M));
}

// A squared chord `dd` against reach r with band b: 0 beyond the chord of r + b, 1 within that of
// r - b, BAND between. Sure only where the whole band lies inside the circle (two positions one
// float32 vector apart may still be metres apart, and a circle of b or less is all band).
fn bandClass(dd: f32, r: f32, b: f32) -> u32 {
  let hi = chordOf(r + b);
  if (dd > hi * hi) { return 0u; }
  let inner = r - b;
  if (inner > 0.0) {
    let lo = chordOf(inner);
    if (dd <= lo * lo) { return 1u; }
  }
  return BAND;
}

// 0: out of reach; 1: within it; BAND: for fineClass (then the host) to decide.
fn nearClass(p: vec3<f32>, rad: f32, q: vec3<f32>, qr: f32) -> u32 {
  let d = p - q;
  let r = rad + qr;
  return bandClass(dot(d, d), r, bandM(r));
}

// The band test again where nearClass left a pair in its band, each unit vector now the sum of
// its float32 vector and its low part (pos + posLo for the filter's slot, words 8-10 of the event
// header: the host's float64 vector to about 1e-15). The difference of two nearby float32 vectors
// is exact (Sterbenz) or off by a rounding of a value the size of the chord, the low parts add a
// term of about 1e-8, so the chord is known to a few parts in 1e7 of itself plus a millimetre;
// the radii are float32 roundings of their float64 values (6e-8 of r) and chordOf is within a
// few ulps. Beyond chordOf(r + b2) the pair cannot match, within chordOf(r - b2) it does, with
// b2 = max(1 cm, 2e-6 r), about four times those errors; between them (a centimetre of a 76 m
// circle's edge, where the band had 4 m) the host decides (readback.ts, bandSub).
const BAND2_MIN_M: f32 = 0.01;
const BAND2_REL: f32 = 0.000002;

fn fineClass(e: u32, f: u32, p: vec3<f32>, rad: f32, q: vec3<f32>, qr: f32) -> u32 {
  let pl = posLo[fPos[f]].xyz;
  let o = inp[P_EVOFF] + e * EVENT_WORDS;
  let ql = vec3<f32>(bitcast<f32>(inp[o + 8u]), bitcast<f32>(inp[o + 9u]), bitcast<f32>(inp[o + 10u]));
  let d = (p - q) + (pl - ql);
  let r = rad + qr;
  return bandClass(dot(d, d), r, max(BAND2_MIN_M, BAND2_REL * r));
}

// `c`: the filter, with BAND set when the host must decide its distance.
fn hit(e: u32, c: u32, candCap: u32) {
  // Hits are sparse (Bloom and area prune almost everything): one atomic per hit.
  let i = atomicAdd(&counts[e], 1u);
  if (i < candCap) { cand[e * candCap + i] = c; }
}

// A filter with an area against one event: a candidate (with its band mark) or not.
fn hitNear(e: u32, f: u32, p: vec3<f32>, rad: f32, q: vec3<f32>, qr: f32, candCap: u32) {
  var k = nearClass(p, rad, q, qr);
  if (k == BAND) { k = fineClass(e, f, p, rad, q, qr); }
  if (k == 1u) { hit(e, f, candCap); } else if (k == BAND) { hit(e, f | BAND, candCap); }
}

@compute @workgroup_size(WG)
fn loc(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let f = (wid.x + wid.z * inp[P_LOCSTRIDE]) * WG + lid;
  let candCap = inp[P_CANDCAP];
  if (lid == 0u) {
    wgEvents = inp[P_EVENTS];
    atomicStore(&wgAll, 0u);
  }
  let nEvents = workgroupUniformLoad(&wgEvents);
  let gridOff = inp[P_GRIDOFF];
  var mode = MODE_NONE;
  var bf = 0xffffffffu;
  var p = vec3<f32>(0.0);
  var rad = 0.0;
  var hasArea = false;
  var lo = vec3<i32>(0);
  var hi = vec3<i32>(-1);
  // S1a for the whole batch first: names no event of the batch has rule the filter out (a removed
  // filter's Bloom word is all ones, so it stops here too, before any other read).
  if (f < inp[P_FILTERS]) {
    bf = fBloom[f];
    if ((bf & ~inp[P_BLOOMOR]) == 0u) {
      let fm = fMeta[f];
      let live = (fm & META_LIVE) != 0u;
      let area = (fm & META_AREA) != 0u;
      hasArea = area;
      if (live && !area) {
        mode = MODE_ALL;
      } else if (live) {
        let q = pos[fPos[f]];
        p = q.xyz;
        rad = fRad[f];
        // Anchored to a device with no known position: matches nothing.
        if (q.w != 0.0) { mode = MODE_ALL; }
      }
      if (mode == MODE_ALL && area && gridOff != 0u) {
        // The cells within reach: the chord of r_f plus the batch's largest event radius and its
        // band, with a margin well above float32 rounding of unit vectors (~1e-7), so no event
        // within reach is missed; the test below decides.
        let gmin = vec3<f32>(bitcast<f32>(inp[gridOff]), bitcast<f32>(inp[gridOff + 1u]), bitcast<f32>(inp[gridOff + 2u]));
        let inv = bitcast<f32>(inp[gridOff + 3u]);
        let dims = vec3<i32>(i32(inp[gridOff + 4u]), i32(inp[gridOff + 5u]), i32(inp[gridOff + 6u]));
        let rMost = rad + bitcast<f32>(inp[gridOff + 7u]);
        let reach = chordOf(rMost + bandM(rMost)) * 1.00001 + 2e-6;
        let r = gridFrame(gridOff) * p;
        let a = floor((r - reach - gmin) * inv);
        let b = floor((r + reach - gmin) * inv);
        if (any(b < vec3<f32>(0.0)) || any(a > vec3<f32>(dims - 1))) {
          mode = MODE_NONE;
        } else {
          lo = clamp(vec3<i32>(a), vec3<i32>(0), dims - 1);
          hi = clamp(vec3<i32>(b), vec3<i32>(0), dims - 1);
          let rows = u32(hi.y - lo.y + 1) * u32(hi.z - lo.z + 1);
          if (rows <= MAX_ROWS) { mode = MODE_CELLS; }
        }
      }
    }
  }
  if (mode == MODE_ALL) { atomicStore(&wgAll, 1u); }
  // Uniform: the whole workgroup runs the tiled scan when any of its filters needs every event.
  if (workgroupUniformLoad(&wgAll) != 0u) {
    for (var base = 0u; base < nEvents; base += EV_TILE) {
      workgroupBarrier();
      for (var k = lid; k < EV_TILE && base + k < nEvents; k += WG) {
        let ev = eventHdr(base + k);
        tileP[k] = vec4<f32>(ev.p, ev.radiusM);
        tileBloom[k] = ev.bloom;
      }
      workgroupBarrier();
      // No early continue: the barriers above must stay in uniform control flow.
      if (mode == MODE_ALL) {
        let n = min(EV_TILE, nEvents - base);
        for (var k = 0u; k < n; k++) {
          // S1a: the filter's constraint names must all be among the event's (Bloom inclusion).
          if ((bf & ~tileBloom[k]) != 0u) { continue; }
          let t = tileP[k];
          // No area: content decides.
          if (!hasArea) { hit(base + k, f, candCap); } else { hitNear(base + k, f, p, rad, t.xyz, t.w, candCap); }
        }
      }
    }
  }
  if (mode == MODE_CELLS) {
    let dims = vec3<i32>(i32(inp[gridOff + 4u]), i32(inp[gridOff + 5u]), i32(inp[gridOff + 6u]));
    let starts = gridOff + GRID_HEADER;
    let idx = starts + u32(dims.x * dims.y * dims.z) + 1u;
    let evOff = inp[P_EVOFF];
    for (var z = lo.z; z <= hi.z; z++) {
      for (var y = lo.y; y <= hi.y; y++) {
        let row = u32((z * dims.y + y) * dims.x);
        let end = inp[starts + row + u32(hi.x) + 1u];
        for (var i = inp[starts + row + u32(lo.x)]; i < end; i++) {
          let e = inp[idx + i];
          let o = evOff + e * EVENT_WORDS;
          if ((bf & ~inp[o + 4u]) != 0u) { continue; }
          let q = vec3<f32>(bitcast<f32>(inp[o]), bitcast<f32>(inp[o + 1u]), bitcast<f32>(inp[o + 2u]));
          hitNear(e, f, p, rad, q, bitcast<f32>(inp[o + 3u]), candCap);
        }
      }
    }
  }
}

// Loc for batches without a grid: each thread tests its filter against every event of the batch,
// read straight from the input (the same words for every thread: broadcast loads). No workgroup
// memory and no barrier, so a thread whose filter the batch's Bloom OR rules out is done at once.
@compute @workgroup_size(WG)
fn locFew(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let f = (wid.x + wid.z * inp[P_LOCSTRIDE]) * WG + lid;
  if (f >= inp[P_FILTERS]) { return; }
  let bf = fBloom[f];
  // A removed filter's Bloom word is all ones: it stops here.
  if ((bf & ~inp[P_BLOOMOR]) != 0u) { return; }
  let fm = fMeta[f];
  if ((fm & META_LIVE) == 0u) { return; }
  let area = (fm & META_AREA) != 0u;
  var p = vec3<f32>(0.0);
  var rad = 0.0;
  if (area) {
    let q = pos[fPos[f]];
    // Anchored to a device with no known position: matches nothing.
    if (q.w == 0.0) { return; }
    p = q.xyz;
    rad = fRad[f];
  }
  let candCap = inp[P_CANDCAP];
  let n = inp[P_EVENTS];
  let evOff = inp[P_EVOFF];
  for (var e = 0u; e < n; e++) {
    let o = evOff + e * EVENT_WORDS;
    if ((bf & ~inp[o + 4u]) != 0u) { continue; }
    if (area) {
      let q = vec3<f32>(bitcast<f32>(inp[o]), bitcast<f32>(inp[o + 1u]), bitcast<f32>(inp[o + 2u]));
      hitNear(e, f, p, rad, q, bitcast<f32>(inp[o + 3u]), candCap);
    } else {
      hit(e, f, candCap);
    }
  }
}

fn eWord(off: u32, w: u32) -> u32 {
  return inp[inp[P_STROFF] + off + w];
}

fn eByte(off: u32, i: u32) -> u32 {
  return (eWord(off, i >> 2u) >> ((i & 3u) * 8u)) & 0xffu;
}

fn cByte(off: u32, i: u32) -> u32 {
  return (cStr[off + (i >> 2u)] >> ((i & 3u) * 8u)) & 0xffu;
}

// The first n bytes of both strings are equal; both start on a word boundary, so whole words
// compare at once and only the tail is masked.
fn headEqual(aOff: u32, cOff: u32, n: u32) -> bool {
  let words = n >> 2u;
  for (var w = 0u; w < words; w++) {
    if (eWord(aOff, w) != cStr[cOff + w]) { return false; }
  }
  let rem = n & 3u;
  if (rem != 0u) {
    let mask = (1u << (rem * 8u)) - 1u;
    if ((eWord(aOff, words) & mask) != (cStr[cOff + words] & mask)) { return false; }
  }
  return true;
}

// Bytes of the attribute from byte `at` equal the constraint's bytes.
fn equalAt(aOff: u32, at: u32, cOff: u32, n: u32) -> bool {
  for (var i = 0u; i < n; i++) {
    if (eByte(aOff, at + i) != cByte(cOff, i)) { return false; }
  }
  return true;
}

// like / regex: the pattern's automaton (layout.ts dfaWords, in cStr at `d`) run over the
// attribute's code points, decoded from its UTF-8 (well-formed: validation admits no other).
// Each code point's class is found by binary search in the automaton's class bounds.
fn dfaMatch(aOff: u32, la: u32, d: u32) -> bool {
  let h = cStr[d];
  let nStates = h & 0xffu;
  let nClasses = (h >> 8u) & 0xffu;
  var st = (h >> 16u) & 0xffu;
  let dead = h >> 24u; // dead state + 1, or 0
  let nb = nClasses - 1u;
  let boundsAt = d + 1u;
  let acceptAt = boundsAt + nb;
  let nextAt = acceptAt + (nStates + 31u) / 32u;
  var i = 0u;
  loop {
    if (i >= la) { break; }
    let b0 = eByte(aOff, i);
    var cp = b0;
    var n = 1u;
    if (b0 >= 0xf0u) {
      cp = ((b0 & 0x07u) << 18u) | ((eByte(aOff, i + 1u) & 0x3fu) << 12u) | ((eByte(aOff, i + 2u) & 0x3fu) << 6u) | (eByte(aOff, i + 3u) & 0x3fu);
      n = 4u;
    } else if (b0 >= 0xe0u) {
      cp = ((b0 & 0x0fu) << 12u) | ((eByte(aOff, i + 1u) & 0x3fu) << 6u) | (eByte(aOff, i + 2u) & 0x3fu);
      n = 3u;
    } else if (b0 >= 0xc0u) {
      cp = ((b0 & 0x1fu) << 6u) | (eByte(aOff, i + 1u) & 0x3fu);
      n = 2u;
    }
    i += n;
    // The class: how many bounds are <= cp.
    var lo = 0u;
    var hi = nb;
    loop {
      if (lo >= hi) { break; }
      let mid = (lo + hi) / 2u;
      if (cStr[boundsAt + mid] <= cp) { lo = mid + 1u; } else { hi = mid; }
    }
    let k = st * nClasses + lo;
    st = (cStr[nextAt + (k >> 2u)] >> ((k & 3u) * 8u)) & 0xffu;
    if (st + 1u == dead) { return false; }
  }
  return ((cStr[acceptAt + (st >> 5u)] >> (st & 31u)) & 1u) != 0u;
}

fn stringOp(op: u32, aOff: u32, la: u32, cOff: u32, lc: u32) -> bool {
  switch op {
    case OP_LIKE, OP_REGEX: { return dfaMatch(aOff, la, cOff); }
    case OP_EQ: { return la == lc && headEqual(aOff, cOff, lc); }
    case OP_NE: { return !(la == lc && headEqual(aOff, cOff, lc)); }
    case OP_PREFIX: { return lc <= la && headEqual(aOff, cOff, lc); }
    case OP_SUFFIX: { return lc <= la && equalAt(aOff, la - lc, cOff, lc); }
    case OP_CONTAINS: {
      if (lc > la) { return false; }
      for (var s = 0u; s <= la - lc; s++) {
        if (equalAt(aOff, s, cOff, lc)) { return true; }
      }
      return false;
    }
    default: { return false; }
  }
}

// Numbers and bools compare as order-preserving 64-bit keys (hi, lo): exact float64 order.
fn numberOp(op: u32, ah: u32, al: u32, ch: u32, cl: u32) -> bool {
  var c = 0;
  if (ah < ch) { c = -1; } else if (ah > ch) { c = 1; } else if (al < cl) { c = -1; } else if (al > cl) { c = 1; }
  switch op {
    case OP_EQ: { return c == 0; }
    case OP_NE: { return c != 0; }
    case OP_LT: { return c < 0; }
    case OP_LE: { return c <= 0; }
    case OP_GT: { return c > 0; }
    case OP_GE: { return c >= 0; }
    default: { return false; }
  }
}

// Cont's event attributes in workgroup memory (one workgroup serves one event), when they fit.
const ATTR_TILE: u32 = 64u;
var<workgroup> wgAttr: array<vec4<u32>, ATTR_TILE>;

fn eventAttr(ev: EventHdr, j: u32, staged: bool) -> Attr {
  if (staged) {
    let a = wgAttr[j];
    return Attr(a.x, a.y, a.z, a.w);
  }
  return attr(ev.attrStart + j);
}

// The index of the event's attribute named `name`, or ev.attrCount when it has none.
fn attrIndex(ev: EventHdr, name: u32, staged: bool) -> u32 {
  var j = 0u;
  loop {
    if (j >= ev.attrCount || eventAttr(ev, j, staged).name == name) { break; }
    j++;
  }
  return j;
}

fn filterOk(f: u32, ev: EventHdr, staged: bool) -> bool {
  let fm = fMeta[f];
  let n = fm & META_COUNT;
  let c0 = fCon[f];
  if ((fm & META_NAMES) != 0u) {
    // Names only (tags, `exists`): the event must have them all. Their ids are words of cStr from
    // c0, but without an area the first is fPos and the run holds the rest.
    let first = select(0u, 1u, (fm & META_AREA) == 0u);
    for (var k = 0u; k < n; k++) {
      var name = 0u;
      if (k < first) { name = fPos[f]; } else { name = cStr[c0 + k - first]; }
      if (attrIndex(ev, name, staged) >= ev.attrCount) { return false; }
    }
    return true;
  }
  for (var k = 0u; k < n; k++) {
    let h = cHead[c0 + k];
    let name = h & ((1u << NAME_BITS) - 1u);
    let op = (h >> NAME_BITS) & 0xfu;
    let ty = h >> (NAME_BITS + 4u);
    let j = attrIndex(ev, name, staged);
    if (j >= ev.attrCount) { return false; }
    if (ty == T_ANY) { continue; }
    let a = eventAttr(ev, j, staged);
    if (a.kind != ty) { return false; }
    if (ty == T_STR) {
      if (!stringOp(op, a.a, a.b, cValA[c0 + k], cValB[c0 + k])) { return false; }
    } else if (!numberOp(op, a.a, a.b, cValA[c0 + k], cValB[c0 + k])) {
      return false;
    }
  }
  return true;
}

const NO_MATCH: u32 = 0xffffffffu;

@compute @workgroup_size(WG)
fn cont(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let e = wid.y;
  let ev = eventHdr(e);
  let staged = ev.attrCount <= ATTR_TILE;
  if (staged) {
    for (var j = lid; j < ev.attrCount; j += WG) {
      let a = attr(ev.attrStart + j);
      wgAttr[j] = vec4<u32>(a.name, a.kind, a.a, a.b);
    }
  }
  workgroupBarrier();
  let candCap = inp[P_CANDCAP];
  let n = min(atomicLoad(&counts[e]), candCap);
  for (var i = wid.x * WG + lid; i < n; i += inp[P_CONTGROUPS] * WG) {
    let at = e * candCap + i;
    let c = cand[at];
    let f = c & ~BAND;
    var mark = NO_MATCH;
    // A sure candidate becomes its subscription; one in the band stays its filter, marked, for
    // the host's float64 test (filter and subscription indices stay below 2^31).
    if (filterOk(f, ev, staged)) { mark = select(fSub[f], c, (c & BAND) != 0u); }
    cand[at] = mark;
  }
}

// ---------------------------------------------------------------- Zip
var<workgroup> wgCand: u32;

@compute @workgroup_size(WG)
fn zip(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let e = wid.y;
  let candCap = inp[P_CANDCAP];
  if (lid == 0u) { wgCand = min(atomicLoad(&counts[e]), candCap); }
  let n = workgroupUniformLoad(&wgCand);
  let outCap = inp[P_OUTCAP];
  let pairsAt = inp[P_EVENTS];
  let stride = inp[P_CONTGROUPS] * WG;
  // Rounds of WG marks with uniform bounds (the barriers stay in uniform control flow); each
  // round appends its matches with one global atomic (CLCB Zip).
  for (var base = wid.x * WG; base < n; base += stride) {
    let i = base + lid;
    var s = NO_MATCH;
    if (i < n) { s = cand[e * candCap + i]; }
    let matched = s != NO_MATCH;
    if (lid == 0u) { atomicStore(&wgCount, 0u); }
    workgroupBarrier();
    var slot = 0u;
    if (matched) { slot = atomicAdd(&wgCount, 1u); }
    workgroupBarrier();
    if (lid == 0u) {
      let k = atomicLoad(&wgCount);
      if (k > 0u) { wgBase = atomicAdd(&counts[pairsAt], k); }
    }
    workgroupBarrier();
    if (matched) {
      let k = wgBase + slot;
      if (k < outCap) { outPairs[k] = vec2<u32>(e, s); }
    }
  }
}

// ---------------------------------------------------------------- position scatter
// A batch of moved position slots: (slot, x, y, z) records written into `pos` in one dispatch.
// moves[0].x holds the number of records (as u32 bits); records follow from moves[1].

@compute @workgroup_size(WG)
fn scatter(@builtin(global_invocation_id) gid: vec3<u32>) {
  let i = gid.x;
  if (i >= bitcast<u32>(moves[0].x)) { return; }
  let m = moves[1u + 2u * i];
  let slot = bitcast<u32>(m.w);
  // w of a move holds the slot; a slot whose position is forgotten gets w = 0 (NaN-free zero vector).
  let known = select(1.0, 0.0, m.x == 0.0 && m.y == 0.0 && m.z == 0.0);
  posOut[slot] = vec4<f32>(m.xyz, known);
  posLoOut[slot] = vec4<f32>(moves[2u + 2u * i].xyz, 0.0);
}
