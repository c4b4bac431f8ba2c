// Pattern searches on the GPU after GTrex (shared/papers/gtrex-cep-gpu-thesis.txt): the columns of
// every pattern element live in GPU memory, and a batch of releases is searched one kernel pass a
// step. Host side: src/engines/gpu/gtrex.ts, which owns the layout below; docs/semantics.md §9 is
// the definition and the CPU sequencers (cdp.ts, reference.ts) the answers these must equal.
//
// `pool` (u32 words) holds, per pattern, a position-independent config block (offsets in it are
// relative to its start `cfg`) and, per pattern element, a ring of records:
//   config: 0 steps, 1 negations, 2 aggregates, 3 record stride, 4 descriptors, 5 step table,
//           6 negation table, 7 aggregate table, 8 index table (each an offset from cfg);
//   step i (7 words): selection (0 each, 1 last, 2 first), window hi, lo, parameters' offset,
//           count (5 words each: left attribute, left step, op, right attribute, right step),
//           negations decided at i: offset, count (one word each: the negation's index);
//   negation (7 words): kind (0 between steps x and y, 1 before step x), x, y, window hi, lo,
//           element parameters' offset, count (4 words each: attribute, op, step, step attribute);
//   aggregate (7 words): function (0 count, 1 sum, 2 min, 3 max, 4 avg), attribute (NONE for
//           count), before step, window hi, lo, element parameters' offset, count;
//   index of element k (5 words): sub-rings (0: its ring is scanned whole), the element's
//           attribute, the step and its attribute whose value selects the sub-ring, the pool
//           offset of the sub-rings' descriptors (a region of their own, made anew when they are);
//   descriptor of element k (4 words at descriptors + 4k): ring offset in pool, capacity,
//           position of the first record, records; an indexed element's sub-ring b likewise at
//           its sub-rings' descriptors + 4b (a record is in its column's ring, and its seq, time
//           and logical index there, 5 words, in the sub-ring of its value's bucket; a search
//           reads only the sub-ring of the value it asks for). A ring's capacity is a power of
//           two; a record's logical index (appends to its column so far, mod 2^32) masked by it
//           is its position.
// A record: seq hi, lo, time hi, lo (u64 each), then per attribute the pattern names (3 words):
// tag (0 absent, 1 number, 2 bool, 3 string), hi, lo. A number is its float64 bits (-0 as 0), a
// bool 0/1 in lo, a string an interned id in lo (strings are only ever compared for equality).
//
// `batch`: per search (a terminator and one of its patterns) 2 words, config offset and the
// terminator's record offset in `batch` (the terminator is in no column, E13), then the records.
// `parts`: partial matches, two halves of capP entries (level i in half i & 1); an entry is the
// config offset, the search, the terminator's record offset, then the chosen record of steps
// 1..S-1 (pool offsets). `done`: complete matches, the entry then 7 words an aggregate: count,
// sum (float64 bits), min, max (float64 bits, valid when count > 0). `counts`: [i] partials of
// level i, [32] complete matches; entries past a capacity are counted, not written, and the host
// runs the batch again with room for them.

override WG: u32 = 64u;

struct Params {
  level: u32,
  steps: u32,      // S: most steps of any pattern searched
  ps: u32,         // partial entry words: S + 2
  cs: u32,         // complete entry words: S + 2 + 7 G
  aggs: u32,       // G: most aggregates of any pattern
  capP: u32,
  capC: u32,
  maxRetained: u32,
  searches: u32,   // searches this run takes, from `first`
  scatter: u32,    // staging entries
  first: u32,
}

// ---- the pool's pages ----
// A pool of one page; gtrex-passes.ts writes this block anew for a pool of several (`pagesBlock`):
// pool0..pool{N-1} at bindings 0 and 7.., and pr/pw choosing the page by a pool offset's high bits.
@group(0) @binding(0) var<storage, read_write> pool0: array<u32>;
/** Pool word i. */
fn pr(i: u32) -> u32 { return pool0[i]; }
/** Sets pool word i. */
fn pw(i: u32, v: u32) { pool0[i] = v; }
// ---- end of the pool's pages ----
@group(0) @binding(1) var<storage, read> batch: array<u32>;
@group(0) @binding(2) var<storage, read_write> parts: array<u32>;
@group(0) @binding(3) var<storage, read_write> done: array<u32>;
@group(0) @binding(4) var<storage, read_write> counts: array<atomic<u32>>;
@group(0) @binding(5) var<uniform> prm: Params;
@group(0) @binding(6) var<storage, read> staging: array<u32>;

const NONE: u32 = 0xffffffffu;
const MAX_STEPS: u32 = 32u;

// ---- 64-bit unsigned arithmetic on vec2<u32> (x: high word, y: low word) ----

fn lt64(a: vec2<u32>, b: vec2<u32>) -> bool { return a.x < b.x || (a.x == b.x && a.y < b.y); }
fn eq64(a: vec2<u32>, b: vec2<u32>) -> bool { return a.x == b.x && a.y == b.y; }
fn add64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
  let lo = a.y + b.y;
  return vec2<u32>(a.x + b.x + select(0u, 1u, lo < a.y), lo);
}
fn sub64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
  return vec2<u32>(a.x - b.x - select(0u, 1u, a.y < b.y), a.y - b.y);
}
/** a - b, or 0 where b > a (a window reaching before time 0). */
fn subSat64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
  if (lt64(a, b)) { return vec2<u32>(0u, 0u); }
  return sub64(a, b);
}
fn shl64(a: vec2<u32>, n: u32) -> vec2<u32> {
  if (n == 0u) { return a; }
  if (n >= 64u) { return vec2<u32>(0u, 0u); }
  if (n >= 32u) { return vec2<u32>(a.y << (n - 32u), 0u); }
  return vec2<u32>((a.x << n) | (a.y >> (32u - n)), a.y << n);
}
fn shr64(a: vec2<u32>, n: u32) -> vec2<u32> {
  if (n == 0u) { return a; }
  if (n >= 64u) { return vec2<u32>(0u, 0u); }
  if (n >= 32u) { return vec2<u32>(0u, a.x >> (n - 32u)); }
  return vec2<u32>(a.x >> n, (a.y >> n) | (a.x << (32u - n)));
}
/** a >> n with every bit shifted out ORed into bit 0 (the sticky bit of rounding). */
fn shrSticky(a: vec2<u32>, n: u32) -> vec2<u32> {
  if (n >= 64u) { return vec2<u32>(0u, select(0u, 1u, a.x != 0u || a.y != 0u)); }
  let r = shr64(a, n);
  let lost = !eq64(shl64(r, n), a);
  return vec2<u32>(r.x, r.y | select(0u, 1u, lost));
}
fn clz64(a: vec2<u32>) -> u32 {
  if (a.x != 0u) { return countLeadingZeros(a.x); }
  return 32u + countLeadingZeros(a.y);
}

// ---- float64 addition, IEEE 754 round to nearest even, from the bits (WGSL has no f64) ----

fn f64add(a0: vec2<u32>, b0: vec2<u32>) -> vec2<u32> {
  var a = a0;
  var b = b0;
  var ea = (a.x >> 20u) & 0x7ffu;
  var eb = (b.x >> 20u) & 0x7ffu;
  if (ea == 0x7ffu || eb == 0x7ffu) {
    // Infinities (a sum past the largest double); the stored values are finite.
    if (ea == 0x7ffu && eb == 0x7ffu && (a.x >> 31u) != (b.x >> 31u)) { return vec2<u32>(0x7ff80000u, 0u); }
    if (ea == 0x7ffu) { return a; }
    return b;
  }
  var ma = vec2<u32>((a.x & 0xfffffu) | select(0u, 0x100000u, ea != 0u), a.y);
  var mb = vec2<u32>((b.x & 0xfffffu) | select(0u, 0x100000u, eb != 0u), b.y);
  ea = max(ea, 1u);
  eb = max(eb, 1u);
  // Three guard bits: the leading bit of a normal mantissa at bit 55.
  ma = shl64(ma, 3u);
  mb = shl64(mb, 3u);
  var sa = a.x >> 31u;
  var sb = b.x >> 31u;
  if (eb > ea || (eb == ea && lt64(ma, mb))) {
    let tm = ma; ma = mb; mb = tm;
    let te = ea; ea = eb; eb = te;
    let ts = sa; sa = sb; sb = ts;
  }
  mb = shrSticky(mb, ea - eb);
  var e = ea;
  var m: vec2<u32>;
  if (sa == sb) {
    m = add64(ma, mb);
    if ((m.x & 0x1000000u) != 0u) {
      m = shrSticky(m, 1u);
      e = e + 1u;
    }
  } else {
    m = sub64(ma, mb);
    if (m.x == 0u && m.y == 0u) { return vec2<u32>(0u, 0u); }
    let lz = clz64(m);
    if (lz > 8u) {
      let k = min(lz - 8u, e - 1u);
      m = shl64(m, k);
      e = e - k;
    }
  }
  let g = m.y & 7u;
  m = shr64(m, 3u);
  if (g > 4u || (g == 4u && (m.y & 1u) == 1u)) {
    m = add64(m, vec2<u32>(0u, 1u));
    if ((m.x & 0x200000u) != 0u) {
      m = shr64(m, 1u);
      e = e + 1u;
    }
  }
  if (e >= 0x7ffu) { return vec2<u32>((sa << 31u) | 0x7ff00000u, 0u); }
  let field = select(0u, e, (m.x & 0x100000u) != 0u);
  return vec2<u32>((sa << 31u) | (field << 20u) | (m.x & 0xfffffu), m.y);
}

/** The float64's bits as an unsigned key in the same order (no NaN, no -0 stored). */
fn key64(v: vec2<u32>) -> vec2<u32> {
  if ((v.x >> 31u) != 0u) { return vec2<u32>(~v.x, ~v.y); }
  return vec2<u32>(v.x | 0x80000000u, v.y);
}

// ---- records ----

/** Word w of a record: the terminator's (in batch) for step 0, else the pool's. */
fn rw(term: bool, off: u32, w: u32) -> u32 {
  if (term) { return batch[off + w]; }
  return pr(off + w);
}
fn recSeq(term: bool, off: u32) -> vec2<u32> { return vec2<u32>(rw(term, off, 0u), rw(term, off, 1u)); }
fn recTime(term: bool, off: u32) -> vec2<u32> { return vec2<u32>(rw(term, off, 2u), rw(term, off, 3u)); }
fn recAttr(term: bool, off: u32, a: u32) -> vec3<u32> {
  let w = 4u + 3u * a;
  return vec3<u32>(rw(term, off, w), rw(term, off, w + 1u), rw(term, off, w + 2u));
}

/** `x op y` (E6): false unless both exist with the same type; lt..ge never between strings. */
fn compareAttr(op: u32, x: vec3<u32>, y: vec3<u32>) -> bool {
  if (x.x == 0u || x.x != y.x) { return false; }
  let same = x.y == y.y && x.z == y.z;
  if (op == 0u) { return same; }
  if (op == 1u) { return !same; }
  if (x.x == 3u) { return false; }
  var less: bool;
  if (x.x == 1u) { less = lt64(key64(x.yz), key64(y.yz)); } else { less = x.z < y.z; }
  if (op == 2u) { return less; }
  if (op == 3u) { return less || same; }
  if (op == 4u) { return !less && !same; }
  return !less;
}

// ---- columns ----

struct Col {
  ring: u32,
  cap: u32,
  head: u32,
  n: u32,
  stride: u32,
}

fn column(cfg: u32, k: u32) -> Col {
  let d = cfg + pr(cfg + 4u) + 4u * k;
  return Col(pr(d), pr(d + 1u), pr(d + 2u), pr(d + 3u), pr(cfg + 3u));
}
/** The pool offset of the column's record r (0 = the first it holds). */
fn at(c: Col, r: u32) -> u32 {
  var p = c.head + r;
  if (p >= c.cap) { p = p - c.cap; }
  return c.ring + p * c.stride;
}
/** First r in [lo, n) whose record's u64 at word w (0: seq, 2: time) is >= v. */
fn lowerAt(c: Col, v: vec2<u32>, lo0: u32, w: u32) -> u32 {
  var lo = lo0;
  var hi = c.n;
  while (lo < hi) {
    let mid = (lo + hi) >> 1u;
    let o = at(c, mid) + w;
    if (lt64(vec2<u32>(pr(o), pr(o + 1u)), v)) { lo = mid + 1u; } else { hi = mid; }
  }
  return lo;
}
fn lowerSeq(c: Col, s: vec2<u32>, lo0: u32) -> u32 { return lowerAt(c, s, lo0, 0u); }
fn lowerTime(c: Col, t: vec2<u32>, lo0: u32) -> u32 { return lowerAt(c, t, lo0, 2u); }

/**
 * The first record the column held at the terminator's release (E15): of the records released
 * before it, the last maxRetained (those the retention bound dropped before the batch are gone
 * from the ring already; E16's are outside every window).
 */
fn retainedFrom(c: Col, termSeq: vec2<u32>) -> u32 {
  let before = lowerSeq(c, termSeq, 0u);
  if (before > prm.maxRetained) { return before - prm.maxRetained; }
  return 0u;
}

/** gtrex-layout.ts's bucketHash: a string by its content hash (hi), not its id. */
fn bucketOf(v: vec3<u32>) -> u32 {
  let lo = select(v.z, 0u, v.x == 3u);
  var h = (v.x * 0x9e3779b1u) ^ (v.y * 0x85ebca77u) ^ (lo * 0xc2b2ae3du);
  h = h ^ (h >> 15u);
  h = h * 0x2c1b3c6du;
  return h ^ (h >> 12u);
}

// ---- one partial match ----

var<private> ch: array<u32, MAX_STEPS>;
var<private> cfgP: u32;
var<private> termSeqP: vec2<u32>;

fn chosenSeq(i: u32) -> vec2<u32> { return recSeq(i == 0u, ch[i]); }
fn chosenTime(i: u32) -> vec2<u32> { return recTime(i == 0u, ch[i]); }
fn chosenAttr(i: u32, a: u32) -> vec3<u32> { return recAttr(i == 0u, ch[i], a); }

struct Run {
  c: Col,
  lo: u32,
  /** An indexed element: `c` is a sub-ring of `main`'s. */
  indexed: bool,
  main: Col,
}

/** The pool offset of the run's record r: for a sub-ring, the column's record it links to. */
fn cand(run: Run, r: u32) -> u32 {
  let o = at(run.c, r);
  if (!run.indexed) { return o; }
  return run.main.ring + (pr(o + 4u) & (run.main.cap - 1u)) * run.main.stride;
}

/**
 * Where element k's candidates are read, and the first the column held at the terminator's
 * release (E15): its ring, or for an indexed element the sub-ring of the chosen step's value
 * (empty where that step's event has no such attribute: an equality cannot hold).
 */
fn runOf(k: u32) -> Run {
  let main = column(cfgP, k);
  let ix = cfgP + pr(cfgP + 8u) + 5u * k;
  let buckets = pr(ix);
  if (buckets == 0u || main.n == 0u) { return Run(main, select(0u, retainedFrom(main, termSeqP), main.n > 0u), false, main); }
  let key = chosenAttr(pr(ix + 2u), pr(ix + 3u));
  let none = Run(Col(0u, 1u, 0u, 0u, 5u), 0u, true, main);
  if (key.x == 0u) { return none; }
  let d = pr(ix + 4u) + 4u * (bucketOf(key) & (buckets - 1u));
  let sub = Col(pr(d), pr(d + 1u), pr(d + 2u), pr(d + 3u), 5u);
  if (sub.n == 0u) { return none; }
  // A sub-ring may hold records its column dropped (its descriptor is written when it grows): the
  // column's first record held at the release bounds it, by seq.
  return Run(sub, lowerSeq(sub, recSeq(false, at(main, retainedFrom(main, termSeqP))), 0u), true, main);
}

/** E11: whether record x meets the element parameters at `ep` (count `n`) against the chosen steps. */
fn holds(ep: u32, n: u32, x: u32) -> bool {
  for (var q = 0u; q < n; q++) {
    let p = cfgP + ep + 4u * q;
    if (!compareAttr(pr(p + 1u), recAttr(false, x, pr(p)), chosenAttr(pr(p + 2u), pr(p + 3u)))) { return false; }
  }
  return true;
}

/** E10: whether negation j has an event in its interval that meets its parameters. */
fn violated(j: u32) -> bool {
  let cfg = cfgP;
  let nSteps = pr(cfg);
  let e = cfg + pr(cfg + 6u) + 7u * j;
  let run = runOf(nSteps + j);
  let c = run.c;
  if (c.n == 0u) { return false; }
  var lo = run.lo;
  var hi: u32;
  if (pr(e) == 0u) {
    lo = lowerSeq(c, add64(chosenSeq(pr(e + 2u)), vec2<u32>(0u, 1u)), lo);
    hi = lowerSeq(c, chosenSeq(pr(e + 1u)), lo);
  } else {
    let s = pr(e + 1u);
    lo = lowerTime(c, subSat64(chosenTime(s), vec2<u32>(pr(e + 3u), pr(e + 4u))), lo);
    hi = lowerSeq(c, chosenSeq(s), lo);
  }
  let ep = pr(e + 5u);
  let n = pr(e + 6u);
  for (var r = lo; r < hi; r++) {
    if (holds(ep, n, cand(run, r))) { return true; }
  }
  return false;
}

/** Whether candidate x (placed in ch[i]) meets the parameters and negations decided at step i. */
fn valid(i: u32, x: u32) -> bool {
  let cfg = cfgP;
  let st = cfg + pr(cfg + 5u) + 7u * i;
  ch[i] = x;
  let po = pr(st + 3u);
  let pn = pr(st + 4u);
  for (var q = 0u; q < pn; q++) {
    let p = cfg + po + 5u * q;
    if (!compareAttr(pr(p + 2u), chosenAttr(pr(p + 1u), pr(p)), chosenAttr(pr(p + 4u), pr(p + 3u)))) { return false; }
  }
  let no = pr(st + 5u);
  let nn = pr(st + 6u);
  for (var q = 0u; q < nn; q++) {
    if (violated(pr(cfg + no + q))) { return false; }
  }
  return true;
}

fn half(level: u32) -> u32 { return (level & 1u) * prm.capP * prm.ps; }

/** Writes the partial match in ch (steps 0..i) to level i + 1, or to the complete list after the last step. */
fn emit(i: u32, search: u32) {
  let nSteps = pr(cfgP);
  if (i + 1u == nSteps) {
    let k = atomicAdd(&counts[32], 1u);
    if (k >= prm.capC) { return; }
    let o = k * prm.cs;
    done[o] = cfgP;
    done[o + 1u] = search;
    for (var s = 0u; s < nSteps; s++) { done[o + 2u + s] = ch[s]; }
    return;
  }
  let k = atomicAdd(&counts[i + 1u], 1u);
  if (k >= prm.capP) { return; }
  let o = half(i + 1u) + k * prm.ps;
  parts[o] = cfgP;
  parts[o + 1u] = search;
  for (var s = 0u; s <= i; s++) { parts[o + 2u + s] = ch[s]; }
}

fn linear(gid: vec3<u32>, nwg: vec3<u32>) -> u32 { return gid.x + gid.y * nwg.x * WG; }

/** Copies the staged words into the pool: new records, moved rings, descriptors. */
@compute @workgroup_size(WG)
fn scatter(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let t = linear(gid, nwg);
  if (t >= prm.scatter) { return; }
  let o = staging[t];
  let dst = staging[o];
  let n = staging[o + 1u];
  for (var w = 0u; w < n; w++) { pw(dst + w, staging[o + 2u + w]); }
}

/** Level 1 from the searches: a terminator alone, its negations decided at step 0 (E10). */
@compute @workgroup_size(WG)
fn start(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let u = linear(gid, nwg);
  if (u >= prm.searches) { return; }
  let t = prm.first + u;
  cfgP = batch[2u * t];
  ch[0] = batch[2u * t + 1u];
  termSeqP = recSeq(true, ch[0]);
  let st = cfgP + pr(cfgP + 5u);
  let no = pr(st + 5u);
  let nn = pr(st + 6u);
  for (var q = 0u; q < nn; q++) {
    if (violated(pr(cfgP + no + q))) { return; }
  }
  emit(0u, t);
}

/** Level i → i + 1: step i's candidates for each partial match of level i (E7–E10). */
@compute @workgroup_size(WG)
fn extend(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let t = linear(gid, nwg);
  let i = prm.level;
  if (t >= min(atomicLoad(&counts[i]), prm.capP)) { return; }
  let o = half(i) + t * prm.ps;
  cfgP = parts[o];
  let search = parts[o + 1u];
  for (var s = 0u; s < i; s++) { ch[s] = parts[o + 2u + s]; }
  termSeqP = recSeq(true, ch[0]);
  let cfg = cfgP;
  let st = cfg + pr(cfg + 5u) + 7u * i;
  let run = runOf(i);
  let c = run.c;
  if (c.n == 0u) { return; }
  let refSeq = chosenSeq(i - 1u);
  var lo = run.lo;
  lo = lowerTime(c, subSat64(chosenTime(i - 1u), vec2<u32>(pr(st + 1u), pr(st + 2u))), lo);
  let hi = lowerSeq(c, refSeq, lo);
  let sel = pr(st);
  if (sel == 1u) {
    for (var r = hi; r > lo; r--) {
      if (valid(i, cand(run, r - 1u))) { emit(i, search); return; }
    }
  } else if (sel == 2u) {
    for (var r = lo; r < hi; r++) {
      if (valid(i, cand(run, r))) { emit(i, search); return; }
    }
  } else {
    for (var r = lo; r < hi; r++) {
      if (valid(i, cand(run, r))) { emit(i, search); }
    }
  }
}

/** E12: each complete match's aggregates, over the events in release order from the earliest. */
@compute @workgroup_size(WG)
fn aggregate(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let t = linear(gid, nwg);
  if (t >= min(atomicLoad(&counts[32]), prm.capC)) { return; }
  let o = t * prm.cs;
  cfgP = done[o];
  let cfg = cfgP;
  let nSteps = pr(cfg);
  let nNeg = pr(cfg + 1u);
  let nAgg = pr(cfg + 2u);
  if (nAgg == 0u) { return; }
  for (var s = 0u; s < nSteps; s++) { ch[s] = done[o + 2u + s]; }
  termSeqP = recSeq(true, ch[0]);
  for (var g = 0u; g < nAgg; g++) {
    let e = cfg + pr(cfg + 7u) + 7u * g;
    let attr = pr(e + 1u);
    let before = pr(e + 2u);
    let run = runOf(nSteps + nNeg + g);
    let c = run.c;
    var count = 0u;
    var sum = vec2<u32>(0u, 0u);
    var mn = vec2<u32>(0u, 0u);
    var mx = vec2<u32>(0u, 0u);
    if (c.n > 0u) {
      var lo = run.lo;
      lo = lowerTime(c, subSat64(chosenTime(before), vec2<u32>(pr(e + 3u), pr(e + 4u))), lo);
      let hi = lowerSeq(c, chosenSeq(before), lo);
      let ep = pr(e + 5u);
      let n = pr(e + 6u);
      for (var r = lo; r < hi; r++) {
        let x = cand(run, r);
        if (!holds(ep, n, x)) { continue; }
        if (attr == NONE) { count++; continue; }
        let v = recAttr(false, x, attr);
        if (v.x != 1u) { continue; }
        if (count == 0u) {
          mn = v.yz;
          mx = v.yz;
        } else {
          if (lt64(key64(v.yz), key64(mn))) { mn = v.yz; }
          if (lt64(key64(mx), key64(v.yz))) { mx = v.yz; }
        }
        count++;
        sum = f64add(sum, v.yz);
      }
    }
    let w = o + prm.steps + 2u + 7u * g;
    done[w] = count;
    done[w + 1u] = sum.x;
    done[w + 2u] = sum.y;
    done[w + 3u] = mn.x;
    done[w + 4u] = mn.y;
    done[w + 5u] = mx.x;
    done[w + 6u] = mx.y;
  }
}

/** A test of f64add: staging holds pairs of doubles (4 words each pair); done gets the sums. */
@compute @workgroup_size(WG)
fn addTest(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let t = linear(gid, nwg);
  if (t >= prm.scatter) { return; }
  let s = f64add(vec2<u32>(staging[4u * t], staging[4u * t + 1u]), vec2<u32>(staging[4u * t + 2u], staging[4u * t + 3u]));
  done[2u * t] = s.x;
  done[2u * t + 1u] = s.y;
}
