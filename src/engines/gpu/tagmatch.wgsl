// TagMatch's subset match (TagMatch §3.3, Algorithms 2-4) on WebGPU. Host side:
// src/engines/gpu/tag-index.ts, which owns the layout below.
//
// The tagset table holds one 192-bit Bloom signature per distinct tag set, as six u32 words in six
// buffers (sig0..sig5: word k of set s is sigk[s]; six bindings keep each under the 2 GiB binding
// limit at 500M sets), in partition order. A partition's sets share the bits of its mask; each
// block of WG consecutive sets of a partition has a mask too: the AND of its sets' signatures.
//
// A batch is two dispatches:
// 1. `visit` (Algorithm 2, the pre-process, on the GPU): one workgroup a partition sends each
//    query of the batch whose signature holds the partition's mask to that partition's query
//    list, and a partition that got any to the work list, whose length is the y size of the
//    second dispatch (dispatched indirectly).
// 2. `subset` (Algorithms 3 and 4): one workgroup takes one block of one partition of the work
//    list (workgroup_id.x: the block, .y: the work item). Per tile of up to QT of the partition's
//    queries, the workgroup keeps in workgroup memory those that hold the block's mask (Algorithm
//    4's pre-filter, with the block's common bits instead of its common prefix), then each thread
//    tests its set against each kept query: s ⊆ q bitwise. A hit appends (query, set position)
//    to `out` (out[0] counts them all; those past the capacity are counted, not written, and the
//    host runs the batch again with room for them).
// The host then decides each hit exactly on the tags (a Bloom hit may be a false positive), so
// the answers have none.
//
// `ptab`: 10 words a partition (first set, sets, first block, 0, mask words 0..5), then the block
// masks from word `inp[3]` (6 words a block). `inp`: 0 queries in the batch, 1 query signatures'
// offset (6 words a query), 2 partitions, 3 block masks' offset in ptab, 4 capacity in hits.
// `vis`: the partitions' query counts [0, P), the work list [P, 2P), then each partition's query
// list of up to inp[0] entries from 2P + p * inp[0]. `args`: the indirect dispatch of `subset`
// (blocks of the largest partition, work items, 1). `out`: 0 hits, 1 visits, then hits as
// (query, set position) pairs from word 2.

override WG: u32 = 256u;

@group(0) @binding(0) var<storage, read> sig0: array<u32>;
@group(0) @binding(1) var<storage, read> sig1: array<u32>;
@group(0) @binding(2) var<storage, read> sig2: array<u32>;
@group(0) @binding(3) var<storage, read> sig3: array<u32>;
@group(0) @binding(4) var<storage, read> sig4: array<u32>;
@group(0) @binding(5) var<storage, read> sig5: array<u32>;
@group(0) @binding(6) var<storage, read> ptab: array<u32>;
@group(0) @binding(7) var<storage, read> inp: array<u32>;
@group(0) @binding(8) var<storage, read_write> vis: array<u32>;
@group(0) @binding(9) var<storage, read_write> args: array<atomic<u32>>;
@group(0) @binding(10) var<storage, read_write> out: array<atomic<u32>>;

var<workgroup> nVisit: atomic<u32>;

@compute @workgroup_size(WG)
fn visit(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let p = wid.x;
  let nq = inp[0];
  let np = inp[2];
  if (lid == 0u) { atomicStore(&nVisit, 0u); }
  workgroupBarrier();
  let a = 10u * p;
  let m0 = ptab[a + 4u]; let m1 = ptab[a + 5u]; let m2 = ptab[a + 6u];
  let m3 = ptab[a + 7u]; let m4 = ptab[a + 8u]; let m5 = ptab[a + 9u];
  let qsigOff = inp[1];
  let list = 2u * np + p * nq;
  for (var q = lid; q < nq; q += WG) {
    let o = qsigOff + 6u * q;
    if (((m0 & ~inp[o]) | (m1 & ~inp[o + 1u]) | (m2 & ~inp[o + 2u]) | (m3 & ~inp[o + 3u]) | (m4 & ~inp[o + 4u]) | (m5 & ~inp[o + 5u])) == 0u) {
      vis[list + atomicAdd(&nVisit, 1u)] = q;
    }
  }
  workgroupBarrier();
  if (lid == 0u) {
    let n = atomicLoad(&nVisit);
    vis[p] = n;
    if (n > 0u) {
      vis[np + atomicAdd(&args[1], 1u)] = p;
      atomicAdd(&out[1], n);
    }
  }
}

// Queries kept for a tile: 6 signature words and the query's index in the batch.
const QT: u32 = 256u;
var<workgroup> kept: array<u32, 1792>;
var<workgroup> nKept: atomic<u32>;
var<workgroup> hPart: u32;
var<workgroup> hCnt: u32;

@compute @workgroup_size(WG)
fn subset(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  if (lid == 0u) {
    hPart = vis[inp[2] + wid.y];
    hCnt = vis[hPart];
  }
  let p = workgroupUniformLoad(&hPart);
  let qCnt = workgroupUniformLoad(&hCnt);
  let count = ptab[10u * p + 1u];
  if (wid.x * WG >= count) { return; }
  let nq = inp[0];
  let list = 2u * inp[2] + p * nq;
  let i = wid.x * WG + lid;
  let live = i < count;
  let s = ptab[10u * p] + i;
  var s0 = 0u; var s1 = 0u; var s2 = 0u; var s3 = 0u; var s4 = 0u; var s5 = 0u;
  if (live) {
    s0 = sig0[s]; s1 = sig1[s]; s2 = sig2[s]; s3 = sig3[s]; s4 = sig4[s]; s5 = sig5[s];
  }
  let b = inp[3] + 6u * (ptab[10u * p + 2u] + wid.x);
  let m0 = ptab[b]; let m1 = ptab[b + 1u]; let m2 = ptab[b + 2u];
  let m3 = ptab[b + 3u]; let m4 = ptab[b + 4u]; let m5 = ptab[b + 5u];
  let qsigOff = inp[1];
  let cap = inp[4];
  for (var t = 0u; t < qCnt; t += QT) {
    if (lid == 0u) { atomicStore(&nKept, 0u); }
    workgroupBarrier();
    for (var k = lid; k < QT && t + k < qCnt; k += WG) {
      let qi = vis[list + t + k];
      let o = qsigOff + 6u * qi;
      let q0 = inp[o]; let q1 = inp[o + 1u]; let q2 = inp[o + 2u];
      let q3 = inp[o + 3u]; let q4 = inp[o + 4u]; let q5 = inp[o + 5u];
      if (((m0 & ~q0) | (m1 & ~q1) | (m2 & ~q2) | (m3 & ~q3) | (m4 & ~q4) | (m5 & ~q5)) == 0u) {
        let at = 7u * atomicAdd(&nKept, 1u);
        kept[at] = q0; kept[at + 1u] = q1; kept[at + 2u] = q2;
        kept[at + 3u] = q3; kept[at + 4u] = q4; kept[at + 5u] = q5;
        kept[at + 6u] = qi;
      }
    }
    workgroupBarrier();
    let n = atomicLoad(&nKept);
    if (live) {
      for (var k = 0u; k < n; k++) {
        let o = 7u * k;
        if (((s0 & ~kept[o]) | (s1 & ~kept[o + 1u]) | (s2 & ~kept[o + 2u]) | (s3 & ~kept[o + 3u]) | (s4 & ~kept[o + 4u]) | (s5 & ~kept[o + 5u])) == 0u) {
          let at = atomicAdd(&out[0], 1u);
          if (at < cap) {
            atomicStore(&out[2u + 2u * at], kept[o + 6u]);
            atomicStore(&out[3u + 2u * at], s);
          }
        }
      }
    }
    workgroupBarrier();
  }
}
