#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Packaging check: `make install` into a temporary prefix gives lib/liblocalmap.so.0,
# include/localmap.h, lib/pkgconfig/localmap.pc, the CMake package in lib/cmake/localmap, the
# man page, and README, LICENSE and the examples under share/doc/localmap; the shared library
# exports lm_* symbols only and has SONAME liblocalmap.so.0. Consumers of the installed tree, each
# run under mpirun: a C program built with nothing but `pkg-config --cflags --libs localmap`
# (np 4); a CMake project using find_package(localmap 0.1 CONFIG REQUIRED) with
# localmap::localmap (np 4) and localmap::localmap_static (np 2), and one asking for 1.0, which
# must fail (SameMajorVersion); the installed examples Makefile (hello at np 3). DLPack's
# include dir (found, or DLPACK_INCLUDE_DIR) is in the .pc file and the CMake package. Then
# `make uninstall` removes every file it installed. LM_MPI (set by make check) picks the MPI.
set -euo pipefail
cd "$(dirname "$0")/.."
. tests/lm_test.sh
BUILD=${BUILD:-build}
MPI=${LM_MPI:-}
lib=$BUILD/lib/liblocalmap.so
deps=$(ldd "$lib")
if [[ $deps == *libasan* ]]; then
  lm_skip "sanitizer build: the packaging check runs in the plain build"
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
unset MAKEFLAGS MFLAGS
make -s install PREFIX="$prefix" BUILD="$BUILD" MPI="$MPI" >/dev/null
for f in lib/liblocalmap.so.0 lib/liblocalmap.so lib/liblocalmap.a include/localmap.h \
         include/localmap_mpi.h include/localmap.hpp lib/pkgconfig/localmap.pc \
         lib/cmake/localmap/localmapConfig.cmake lib/cmake/localmap/localmapConfigVersion.cmake \
         share/man/man3/localmap.3 share/doc/localmap/README.md share/doc/localmap/LICENSE \
         share/doc/localmap/examples/Makefile share/doc/localmap/examples/hello.c; do
  [ -e "$prefix/$f" ] || { echo "missing after install: $f"; exit 1; }
done
for f in examples/*.c examples/*.cpp; do
  [ -e "$f" ] || continue
  cmp -s "$f" "$prefix/share/doc/localmap/$f" || { echo "not installed: $f"; exit 1; }
done
grep -q '^\.TH LOCALMAP 3' "$prefix/share/man/man3/localmap.3" || { echo "man page: no .TH"; exit 1; }
bad=$(nm -D --defined-only "$prefix/lib/liblocalmap.so.0" | awk '{print $3}' | grep -v '^lm_' | grep -v '^LOCALMAP_' || true)
[ -z "$bad" ] || { echo "symbols exported outside lm_*:"; echo "$bad"; exit 1; }
dyn=$(readelf -d "$prefix/lib/liblocalmap.so.0")
[[ $dyn == *'(SONAME)'*'[liblocalmap.so.0]'* ]] || { echo "SONAME is not liblocalmap.so.0"; exit 1; }
echo "exports: $(nm -D --defined-only "$prefix/lib/liblocalmap.so.0" | grep -c ' lm_') lm_* symbols, nothing else"

cat > "$tmp/consumer.c" <<'C'
#include <localmap.h>
#include <stdio.h>
int main(int argc, char **argv) {
  int r, n, wf, bad = 0;
  if (lm_init(&argc, &argv) || lm_world_rank(&r, &n) || lm_comm_world(&wf)) return 1;
  lm_mesh_t mesh;
  int64_t shape[2] = {n % 2 ? 1 : 2, n % 2 ? n : n / 2}, g[2] = {5, 3};
  if (lm_mesh_create(&mesh, wf, 2, shape, NULL)) return 2;
  double full[15], back[15];
  for (int i = 0; i < 15; ++i) full[i] = i;
  DLTensor gt = {full, {kDLCPU, 0}, 2, LM_FLOAT64, g, NULL, 0};
  DLTensor bt = {back, {kDLCPU, 0}, 2, LM_FLOAT64, g, NULL, 0};
  lm_placement_t pl[2] = {LM_PLACEMENT_SHARD(0), LM_PLACEMENT_SHARD(1)};
  lm_dist_tensor_t t;
  if (lm_dist_tensor_from_global(&t, mesh, &gt, pl, -1) || lm_dist_tensor_gather(t, -1, &bt)) {
    printf("rank %d: %s\n", r, lm_last_error_message());
    return 3;
  }
  for (int i = 0; i < 15; ++i) bad += back[i] != i;
  if (lm_dist_tensor_destroy(&t) || lm_mesh_destroy(&mesh) || lm_finalize()) return 4;
  if (r == 0) printf("consumer: %s (np %d, localmap %d)\n", bad ? "FAIL" : "OK", n, lm_get_version());
  return bad != 0;
}
C
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
# A consumer must load the MPI library liblocalmap was built with, and no other.
mpi_libs() { ldd "$1" | grep -o 'libmpi[a-z_]*\.so[.0-9]*' | sort -u | tr '\n' ' '; }
lib_mpi=$(mpi_libs "$prefix/lib/liblocalmap.so.0")
same_mpi() {
  [ "$(mpi_libs "$1")" = "$lib_mpi" ] || { echo "$1 loads MPI '$(mpi_libs "$1")', liblocalmap '$lib_mpi'"; exit 1; }
}
# shellcheck disable=SC2046
cc "$tmp/consumer.c" $(pkg-config --cflags --libs localmap) -Wl,-rpath,"$prefix/lib" -o "$tmp/consumer"
same_mpi "$tmp/consumer"
bash tools/lm-mpirun 4 "$tmp/consumer"

# The CMake package: shared and static targets, MPI and DLPack carried, version checked.
if command -v cmake >/dev/null 2>&1; then
  mkdir -p "$tmp/cm"
  cp "$tmp/consumer.c" "$tmp/cm/consumer.c"
  cat > "$tmp/cm/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.16)
project(localmap_consumer C)
find_package(localmap 0.1 CONFIG REQUIRED)
add_executable(consumer_shared consumer.c)
target_link_libraries(consumer_shared PRIVATE localmap::localmap)
add_executable(consumer_static consumer.c)
target_link_libraries(consumer_static PRIVATE localmap::localmap_static)
message(STATUS "localmap ${localmap_VERSION} with ${MPI_C_COMPILER}")
CMAKE
  cmake -S "$tmp/cm" -B "$tmp/cm/build" -DCMAKE_PREFIX_PATH="$prefix" >"$tmp/cm.log" 2>&1 ||
    { cat "$tmp/cm.log"; echo "cmake configure of the consumer failed"; exit 1; }
  grep 'localmap 0\.' "$tmp/cm.log"
  cmake --build "$tmp/cm/build" >>"$tmp/cm.log" 2>&1 || { cat "$tmp/cm.log"; echo "cmake build failed"; exit 1; }
  # (ldd's output in a variable: `ldd | grep -q` fails under pipefail when grep exits first.)
  deps=$(ldd "$tmp/cm/build/consumer_shared")
  [[ $deps == *"$prefix/lib/liblocalmap.so.0"* ]] ||
    { echo "consumer_shared does not load the installed liblocalmap.so.0"; exit 1; }
  deps=$(ldd "$tmp/cm/build/consumer_static")
  if [[ $deps == *liblocalmap* ]]; then
    echo "consumer_static links liblocalmap.so"; exit 1
  fi
  same_mpi "$tmp/cm/build/consumer_shared"
  same_mpi "$tmp/cm/build/consumer_static"
  bash tools/lm-mpirun 4 "$tmp/cm/build/consumer_shared"
  bash tools/lm-mpirun 2 "$tmp/cm/build/consumer_static"
  # SameMajorVersion: a request for 1.0 must not be satisfied by 0.x.
  sed -i 's/find_package(localmap 0.1 CONFIG REQUIRED)/find_package(localmap 1.0 CONFIG REQUIRED)/' "$tmp/cm/CMakeLists.txt"
  if cmake -S "$tmp/cm" -B "$tmp/cm/build1" -DCMAKE_PREFIX_PATH="$prefix" >"$tmp/cm1.log" 2>&1; then
    echo "find_package(localmap 1.0) accepted version 0.x"; exit 1
  fi
  grep -q 'compatible with requested version' "$tmp/cm1.log" || { cat "$tmp/cm1.log"; exit 1; }
  cmake_ok="CMake consumers (shared np 4, static np 2, version check)"
else
  lm_defer_skip "the CMake consumers: no cmake (apt-get install cmake)"
  cmake_ok="(no CMake consumer)"
fi

# The installed examples build against the installed tree through their Makefile.
mkdir -p "$tmp/ex"
make -s -C "$tmp/ex" -f "$prefix/share/doc/localmap/examples/Makefile" >"$tmp/ex.log" 2>&1 ||
  { cat "$tmp/ex.log"; echo "installed examples Makefile failed"; exit 1; }
for f in examples/*.c examples/*.cpp; do
  [ -e "$f" ] || continue
  b=$(basename "$f"); b=${b%.*}
  [ -x "$tmp/ex/$b" ] || { echo "installed examples Makefile did not build $b"; exit 1; }
done
same_mpi "$tmp/ex/hello"
bash tools/lm-mpirun 3 "$tmp/ex/hello"

# DLPACK_INCLUDE_DIR reaches the .pc file and the CMake package (generated only: no rebuild).
mkdir -p "$tmp/dl/dlpack" "$tmp/gen"
make -s BUILD="$tmp/gen" MPI="$MPI" DLPACK_INCLUDE_DIR="$tmp/dl" \
  "$tmp/gen/localmap.pc" "$tmp/gen/cmake/localmapConfig.cmake" >/dev/null
grep -qx "dlpack_includedir=$tmp/dl" "$tmp/gen/localmap.pc" || { echo "DLPACK_INCLUDE_DIR not in localmap.pc"; exit 1; }
grep -q "set(localmap_DLPACK_INCLUDE_DIR \"$tmp/dl\")" "$tmp/gen/cmake/localmapConfig.cmake" ||
  { echo "DLPACK_INCLUDE_DIR not in localmapConfig.cmake"; exit 1; }
# and by default, the directory where the compiler finds dlpack/dlpack.h.
dl=$(pkg-config --variable=dlpack_includedir localmap)
[ -f "$dl/dlpack/dlpack.h" ] || { echo "localmap.pc: dlpack_includedir=$dl has no dlpack/dlpack.h"; exit 1; }

make -s uninstall PREFIX="$prefix" BUILD="$BUILD" MPI="$MPI" >/dev/null
left=$(find "$prefix" -type f -o -type l | head -5)
[ -z "$left" ] || { echo "left after uninstall: $left"; exit 1; }
for d in lib/cmake/localmap share/doc/localmap; do
  [ ! -e "$prefix/$d" ] || { echo "left after uninstall: $d"; exit 1; }
done
lm_finish "install, pkg-config consumer at np 4, $cmake_ok, installed examples, uninstall: OK"
