#!/usr/bin/env bash
# Builds the side-by-side driver against TagMatch's sources (carzaniga/TagMatch, not part of this
# repository) without its autotools: build.sh TAGMATCH_SOURCE_DIR OUTPUT_BINARY [SM_VERSION, default 90]
# TAGMATCH_DEFS: its compile-time options (default -DNDEBUG; e.g. -DCPU_BACKEND=N matches partitions
# of up to N sets on the CPU).
set -euo pipefail
src=$(cd "$1" && pwd)
out=$2
sm=${3:-90}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
work=$(mktemp -d)
cuda=${CUDA_HOME:-/usr/local/cuda}
defs="${TAGMATCH_DEFS--DNDEBUG} -DHAVE_BUILTIN_CLZL=1 -DHAVE_BUILTIN_CTZL=1 -DHAVE_BUILTIN_POPCOUNT=1 -DHAVE_BUILTIN_CAS=1"
cd "$work"
pids=()
# cudaThreadSynchronize is gone from CUDA 12 on; cudaDeviceSynchronize is its successor.
for f in gpu.cu partitioner_gpu.cu; do "$cuda/bin/nvcc" -O3 -std=c++14 -arch=sm_$sm $defs -DcudaThreadSynchronize=cudaDeviceSynchronize -I"$src" -c "$src/$f" -o "${f%.cu}.o" & pids+=($!); done
for f in fib.cc query.cc front_end.cc back_end.cc partitioning.cc tagmatch.cc; do g++ -O3 -g -std=c++14 -pthread $defs -I"$src" -I"$cuda/include" -c "$src/$f" -o "${f%.cc}.o" & pids+=($!); done
for p in "${pids[@]}"; do wait "$p"; done
g++ -O3 -g -rdynamic -std=c++14 -pthread $defs -I"$src" "$here/driver.cc" ./*.o -L"$cuda/lib64" -lcudart -o "$out"
echo "built $out"
