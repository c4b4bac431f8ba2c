// Device probe: y[i] = x[i] * 2 + 1 over n u32, and one atomic count per element written.
// Proves a device computes (storage buffers, uniforms, atomics, override constants, 2-D grids).

override WG: u32 = 64;

struct Params {
  n: u32,
}

@group(0) @binding(0) var<storage, read> x: array<u32>;
@group(0) @binding(1) var<storage, read_write> y: array<u32>;
@group(0) @binding(2) var<storage, read_write> counter: atomic<u32>;
@group(0) @binding(3) var<uniform> params: Params;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) groups: vec3u) {
  // Past maxComputeWorkgroupsPerDimension the host dispatches a 2-D grid; rebuild the linear index.
  let i = gid.x + gid.y * groups.x * WG;
  if (i >= params.n) {
    return;
  }
  y[i] = x[i] * 2u + 1u;
  atomicAdd(&counter, 1u);
}
