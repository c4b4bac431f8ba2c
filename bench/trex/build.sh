#!/usr/bin/env bash
# Builds T-Rex's CPU engine (TRex2-lib without its GPU, marshalling and server code) as a static
# library and links the r2 driver against it, for `npm run bench:patterns -- --trex <out>/r2`.
#
# Usage: bench/trex/build.sh TREX2_LIB_DIR [OUT_DIR]
#   TREX2_LIB_DIR  a TRex2-lib source tree (github.com/deib-polimi/TRex, folder TRex2-lib)
#   OUT_DIR        output folder (default: bench/trex/out, not committed)
#
# Needs g++ (C++11 for the library, C++17 for the driver), ar and pthreads; no autotools, no Boost,
# no network. Everything is rebuilt from scratch. CXX, OPTFLAGS (default -O3) and JOBS override.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ $# -lt 1 ]; then
  echo "usage: $0 TREX2_LIB_DIR [OUT_DIR]" >&2
  exit 2
fi
SRC="$1"
OUT="${2:-$HERE/out}"
CXX="${CXX:-g++}"
OPTFLAGS="${OPTFLAGS:--O3}"
JOBS="${JOBS:-$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)}"

LIBSRC="$SRC/src"
if [ ! -f "$LIBSRC/Engine/TRexEngine.cc" ]; then
  echo "error: $LIBSRC/Engine/TRexEngine.cc not found (pass the TRex2-lib folder)" >&2
  exit 1
fi

# The CPU engine and what it depends on; Marshalling/, Communication/ and Engine/GPU/ are left out.
FILES=(
  Common/CompositeEventTemplate.cc Common/Funs.cc Common/OpTree.cc
  Common/TimeMs.cc Common/Timer.cc
  Engine/AbstractConstraintIndex.cc Engine/BoolConstraintIndex.cc
  Engine/CompositeEventGenerator.cc Engine/FloatConstraintIndex.cc
  Engine/IndexingTable.cc Engine/IntConstraintIndex.cc
  Engine/NoConstraintIndex.cc Engine/Stack.cc Engine/StacksRule.cc
  Engine/StringConstraintIndex.cc Engine/TRexEngine.cc
  Packets/AdvPkt.cc Packets/JoinPkt.cc Packets/PubPkt.cc Packets/RulePkt.cc
  Packets/RulePktValueReference.cc Packets/SubPkt.cc
  Packets/StaticValueReference.cc
)

rm -rf "$OUT/obj" "$OUT/libtrex2cpu.a" "$OUT/r2"
mkdir -p "$OUT/obj"
echo "[build] compiling ${#FILES[@]} TRex2-lib files from $LIBSRC with $CXX $OPTFLAGS (-j$JOBS)"
export CXX OPTFLAGS LIBSRC OUT
printf '%s\n' "${FILES[@]}" | xargs -P "$JOBS" -I{} sh -c '
  f="{}"; o="$OUT/obj/$(echo "$f" | tr / _ | sed "s/\.cc$/.o/")"
  $CXX -std=c++11 $OPTFLAGS -DNDEBUG -w -pthread -c "$LIBSRC/$f" -o "$o" || exit 255
'
ar rcs "$OUT/libtrex2cpu.a" "$OUT"/obj/*.o
echo "[build] linking $OUT/r2"
"$CXX" -std=c++17 $OPTFLAGS -DNDEBUG -Wall -Wextra -pthread -I"$LIBSRC" "$HERE/r2.cc" "$OUT/libtrex2cpu.a" -o "$OUT/r2"
echo "[build] done: $OUT/r2"
