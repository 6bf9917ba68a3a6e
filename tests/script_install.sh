#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Packaging check: `make install` into a temporary prefix gives lib/liblocalmap.so.1 (and
# lib/liblocalmap-cuda.so.1, the device component, where the build made it),
# include/localmap.h (and localmap_mpi.h, localmap_scalapack.h, localmap.hpp, localmap_api.hpp), lib/pkgconfig/localmap.pc, the CMake package in lib/cmake/localmap, the
# man page, and README, LICENSE, the guides and references (docs/) and the examples under share/doc/localmap; the shared library
# exports lm_* symbols only and has SONAME liblocalmap.so.1. Consumers of the installed tree, each
# run under mpirun: a C program built with nothing but `pkg-config --cflags --libs localmap`
# (np 4); a CMake project using find_package(localmap 1.0 CONFIG REQUIRED) with
# localmap::localmap (np 4) and localmap::localmap_static (np 2), and one asking for 1.0, which
# must fail (SameMajorVersion); the installed C++-only CMake project examples/cmake-cxx
# (LANGUAGES CXX: localmap.hpp's typed local_map, localmap::environment; np 2); the installed
# examples Makefile (hello at np 3, the C++ masked_loss at np 2; the ScaLAPACK example
# scalapack/center_rows at np 4 where pkg-config finds scalapack-openmpi, else that
# Makefile's note, and a deferred skip outside the MPICH build), and the commands
# of examples/README.md's installed-commands block run as written (as root, on this machine's
# cores, with the installed bin/lm-mpirun); that Makefile's own one-line error when pkg-config
# finds no localmap. The man pages: one per exported function, and `man lm_dist_tensor_reshard`
# finds the installed page through PATH. The Fortran module and examples (with the Fortran
# bindings) and the HTML references (with doxygen) are installed. DLPack's include dir (found, or
# DLPACK_INCLUDE_DIR) is in the .pc file and the CMake package. Then `make uninstall` removes
# every file it installed. LM_MPI (set by make check) picks the MPI. A check whose tool is missing
# (cmake, man, doxygen, the Fortran bindings) is a deferred skip (lm_defer_skip): the script then
# skips naming it, never passes.
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
for f in lib/liblocalmap.so.1 lib/liblocalmap.so lib/liblocalmap.a include/localmap.h \
         include/localmap_mpi.h include/localmap_scalapack.h include/localmap.hpp include/localmap_api.hpp \
         lib/pkgconfig/localmap.pc \
         lib/liblocalmap_scalapack.so.1 lib/liblocalmap_scalapack.so lib/pkgconfig/localmap-scalapack.pc \
         share/doc/localmap/docs/SCALAPACK.md share/doc/localmap/examples/scalapack/redistribute.c \
         share/man/man3/localmap_scalapack_gemr2d.3 share/man/man3/localmap_scalapack_trmr2d.3 \
         share/man/man3/localmap_scalapack_tran.3 share/man/man3/localmap_scalapack_geadd.3 \
         share/man/man3/localmap_scalapack_tradd.3 \
         lib/cmake/localmap/localmapConfig.cmake lib/cmake/localmap/localmapConfigVersion.cmake \
         share/man/man3/localmap.3 share/doc/localmap/README.md share/doc/localmap/LICENSE \
         share/doc/localmap/docs/guide-c.md share/doc/localmap/docs/guide-python.md \
         share/doc/localmap/docs/troubleshooting.md share/doc/localmap/docs/fortran-reference.md \
         share/doc/localmap/examples/Makefile share/doc/localmap/examples/hello.c \
         share/doc/localmap/examples/scalapack/center_rows.c \
         share/man/man3/lm_dist_tensor_reshard.3 share/man/man3/lm_mesh_create_mpi.3 bin/lm-mpirun bin/lm-info; do
  [ -e "$prefix/$f" ] || { echo "missing after install: $f"; exit 1; }
done
for f in examples/*.c examples/*.cpp examples/scalapack/*.c examples/scalapack/*.f90 \
         examples/cmake-cxx/CMakeLists.txt examples/cmake-cxx/*.cpp; do
  [ -e "$f" ] || continue
  cmp -s "$f" "$prefix/share/doc/localmap/$f" || { echo "not installed: $f"; exit 1; }
done
grep -q '^\.TH LOCALMAP 3' "$prefix/share/man/man3/localmap.3" || { echo "man page: no .TH"; exit 1; }
# One page per function the library exports (and per inline helper of the headers).
for f in $(nm -D --defined-only "$prefix/lib/liblocalmap.so.1" | awk '$2 == "T" && $3 ~ /^lm_/ {sub(/@.*/, "", $3); print $3}') \
         $(sh tools/gen-manpage.sh --list); do
  [ -f "$prefix/share/man/man3/$f.3" ] || { echo "no man page $f(3) installed"; exit 1; }
done
echo "man pages: $(ls "$prefix/share/man/man3" | grep -c '^lm_') function pages, localmap(3)"
if command -v man >/dev/null 2>&1; then
  # man finds <prefix>/share/man from <prefix>/bin on PATH (man-db's manpath).
  where=$(env -u MANPATH PATH="$prefix/bin:$PATH" man -w lm_dist_tensor_reshard)
  [ "$where" = "$prefix/share/man/man3/lm_dist_tensor_reshard.3" ] ||
    { echo "man -w lm_dist_tensor_reshard: '$where', not the installed page"; exit 1; }
  page=$(env -u MANPATH PATH="$prefix/bin:$PATH" MANWIDTH=100 man lm_dist_tensor_reshard 2>/dev/null)
  for sec in NAME SYNOPSIS DESCRIPTION ERRORS EXAMPLE 'SEE ALSO'; do
    [[ $page == *"$sec"* ]] || { echo "man lm_dist_tensor_reshard lacks $sec"; exit 1; }
  done
  echo "man lm_dist_tensor_reshard: the installed page, found through PATH=\$prefix/bin"
else
  lm_defer_skip "man lm_dist_tensor_reshard from the prefix: no man (apt-get install man-db)"
fi
# The launcher, with this build's MPI launcher as its default.
want="launcher=\${LM_MPIRUN:-${LM_MPIRUN:-mpirun}}"
grep -qxF "$want" "$prefix/bin/lm-mpirun" ||
  { grep -n '^launcher=' "$prefix/bin/lm-mpirun"; echo "bin/lm-mpirun: expected $want"; exit 1; }
# The device component, where the build made one, is installed beside the library, and the
# installed lm-info loads it from there (bin/../lib: its RUNPATH); the core needs no CUDA.
comp=$(ls "$BUILD"/lib/liblocalmap-cuda.so.* 2>/dev/null | head -n 1 || true)
if [ -n "$comp" ]; then
  [ -f "$prefix/lib/$(basename "$comp")" ] || { echo "missing after install: lib/$(basename "$comp")"; exit 1; }
  info=$("$prefix/bin/lm-info" 2>&1) || { echo "$info"; echo "bin/lm-info failed"; exit 1; }
  [[ $info == *"device component: loaded from $prefix/lib/$(basename "$comp")"* ]] ||
    { echo "$info" | head -n 3; echo "bin/lm-info did not load the installed component"; exit 1; }
  echo "device component: lib/$(basename "$comp"), loaded by the installed lm-info"
fi
dyn_core=$(readelf -d "$prefix/lib/liblocalmap.so.1")
if grep -qE 'lib(cudart|nccl|cudasim)' <<<"$dyn_core"; then
  echo "the installed liblocalmap.so.1 NEEDs CUDA or NCCL"; exit 1
fi
# The diagnostic tool runs from the prefix, under the installed launcher.
# (the whole output first: grep -q would close the pipe early, and under pipefail the launcher's
# SIGPIPE on its next line failed the check, under MPICH's mpiexec)
info=$("$prefix/bin/lm-mpirun" 2 "$prefix/bin/lm-info" 2>&1) ||
  { echo "$info"; echo "bin/lm-info under bin/lm-mpirun 2 failed"; exit 1; }
[[ $info == *"job: 2 rank(s)"* ]] ||
  { echo "$info"; echo "bin/lm-info under bin/lm-mpirun 2 did not report the job"; exit 1; }
# The Fortran bindings are built (and installed) where make finds $MPIFC (bindings/fortran/rules.mk).
MPIFC=${MPIFC:-mpif90}
no_fortran="the Fortran bindings are not built (no $MPIFC or gfortran: apt-get install gfortran; or FORTRAN=0)"
if [ -f "$BUILD/fortran/lib/liblocalmap_fortran.a" ]; then
  for f in bindings/fortran/examples/*.f90; do
    cmp -s "$f" "$prefix/share/doc/localmap/examples/fortran/$(basename "$f")" || { echo "not installed: $f"; exit 1; }
  done
  [ -f "$prefix/include/localmap.mod" ] || { echo "missing after install: include/localmap.mod"; exit 1; }
else
  lm_defer_skip "the installed Fortran module and examples: $no_fortran"
fi
if command -v doxygen >/dev/null 2>&1; then
  for f in html/index.html fortran/index.html; do
    [ -f "$prefix/share/doc/localmap/$f" ] || { echo "HTML reference not installed: share/doc/localmap/$f"; exit 1; }
  done
  grep -q 'lm_local_map' "$prefix/share/doc/localmap/fortran/namespacelocalmap.html" ||
    { echo "the Fortran reference lacks lm_local_map"; exit 1; }
  echo "HTML references installed: share/doc/localmap/html, share/doc/localmap/fortran (with lm_local_map)"
else
  lm_defer_skip "the installed HTML references (C/C++ and Fortran): no doxygen (apt-get install doxygen)"
fi
bad=$(nm -D --defined-only "$prefix/lib/liblocalmap.so.1" | awk '{print $3}' | grep -v '^lm_' | grep -v '^LOCALMAP_' || true)
[ -z "$bad" ] || { echo "symbols exported outside lm_*:"; echo "$bad"; exit 1; }
dyn=$(readelf -d "$prefix/lib/liblocalmap.so.1")
[[ $dyn == *'(SONAME)'*'[liblocalmap.so.1]'* ]] || { echo "SONAME is not liblocalmap.so.1"; exit 1; }
echo "exports: $(nm -D --defined-only "$prefix/lib/liblocalmap.so.1" | grep -c ' lm_') lm_* symbols, nothing else"
# The ScaLAPACK drop-in exports exactly its routines (docs/SCALAPACK.md), and finds liblocalmap.
dropin_syms=$(nm -D --defined-only "$prefix/lib/liblocalmap_scalapack.so.1" | awk '{sub(/@.*/, "", $3); print $3}' |
  grep -v '^LOCALMAP_SCALAPACK_' | LC_ALL=C sort | tr '\n' ' ')
want_syms="pcgeadd_ pcgemr2d_ pctradd_ pctranc_ pctranu_ pctrmr2d_ pdgeadd_ pdgemr2d_ pdtradd_ pdtran_ pdtrmr2d_ pigemr2d_ pitrmr2d_ psgeadd_ psgemr2d_ pstradd_ pstran_ pstrmr2d_ pzgeadd_ pzgemr2d_ pztradd_ pztranc_ pztranu_ pztrmr2d_ "
[ "$dropin_syms" = "$want_syms" ] ||
  { echo "liblocalmap_scalapack exports '$dropin_syms', expected '$want_syms'"; exit 1; }
deps=$(ldd "$prefix/lib/liblocalmap_scalapack.so.1")
[[ $deps == *"$prefix/lib/liblocalmap.so.1"* ]] ||
  { echo "liblocalmap_scalapack does not find the installed liblocalmap.so.1"; exit 1; }
echo "liblocalmap_scalapack exports: $dropin_syms"

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
lib_mpi=$(mpi_libs "$prefix/lib/liblocalmap.so.1")
same_mpi() {
  [ "$(mpi_libs "$1")" = "$lib_mpi" ] || { echo "$1 loads MPI '$(mpi_libs "$1")', liblocalmap '$lib_mpi'"; exit 1; }
}
# shellcheck disable=SC2046
cc "$tmp/consumer.c" $(pkg-config --cflags --libs localmap) -Wl,-rpath,"$prefix/lib" -o "$tmp/consumer"
same_mpi "$tmp/consumer"
PKG_CONFIG_PATH=$prefix/lib/pkgconfig pkg-config --libs localmap-scalapack | grep -q -- '-llocalmap_scalapack' ||
  { echo "pkg-config localmap-scalapack does not give -llocalmap_scalapack"; exit 1; }
bash tools/lm-mpirun 4 "$tmp/consumer"

# The CMake package: shared and static targets, MPI and DLPack carried, version checked.
if command -v cmake >/dev/null 2>&1; then
  mkdir -p "$tmp/cm"
  cp "$tmp/consumer.c" "$tmp/cm/consumer.c"
  cat > "$tmp/cm/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.16)
project(localmap_consumer C)
find_package(localmap 1.0 CONFIG REQUIRED)
add_executable(consumer_shared consumer.c)
target_link_libraries(consumer_shared PRIVATE localmap::localmap)
add_executable(consumer_static consumer.c)
target_link_libraries(consumer_static PRIVATE localmap::localmap_static)
if(NOT TARGET localmap::scalapack)
  message(FATAL_ERROR "no localmap::scalapack target")
endif()
message(STATUS "localmap ${localmap_VERSION} with ${MPI_C_COMPILER}")
CMAKE
  cmake -S "$tmp/cm" -B "$tmp/cm/build" -DCMAKE_PREFIX_PATH="$prefix" >"$tmp/cm.log" 2>&1 ||
    { cat "$tmp/cm.log"; echo "cmake configure of the consumer failed"; exit 1; }
  grep 'localmap 1\.' "$tmp/cm.log"
  cmake --build "$tmp/cm/build" >>"$tmp/cm.log" 2>&1 || { cat "$tmp/cm.log"; echo "cmake build failed"; exit 1; }
  # (ldd's output in a variable: `ldd | grep -q` fails under pipefail when grep exits first.)
  deps=$(ldd "$tmp/cm/build/consumer_shared")
  [[ $deps == *"$prefix/lib/liblocalmap.so.1"* ]] ||
    { echo "consumer_shared does not load the installed liblocalmap.so.1"; exit 1; }
  deps=$(ldd "$tmp/cm/build/consumer_static")
  if [[ $deps == *liblocalmap* ]]; then
    echo "consumer_static links liblocalmap.so"; exit 1
  fi
  same_mpi "$tmp/cm/build/consumer_shared"
  same_mpi "$tmp/cm/build/consumer_static"
  bash tools/lm-mpirun 4 "$tmp/cm/build/consumer_shared"
  bash tools/lm-mpirun 2 "$tmp/cm/build/consumer_static"
  # SameMajorVersion: a request for 2.0 (or for 0.1) must not be satisfied by 1.x.
  for want in 2.0 0.1; do
    sed -i "s/find_package(localmap [0-9.]* CONFIG REQUIRED)/find_package(localmap $want CONFIG REQUIRED)/" "$tmp/cm/CMakeLists.txt"
    if cmake -S "$tmp/cm" -B "$tmp/cm/build1" -DCMAKE_PREFIX_PATH="$prefix" >"$tmp/cm1.log" 2>&1; then
      echo "find_package(localmap $want) accepted version 1.x"; exit 1
    fi
  done
  grep -q 'compatible with requested version' "$tmp/cm1.log" || { cat "$tmp/cm1.log"; exit 1; }

  # The installed C++-only example project (examples/cmake-cxx: LANGUAGES CXX, no C enabled, so
  # FindMPI cannot look for MPI_C there): localmap.hpp's typed local_map, localmap::environment
  # owning MPI (it must finalise it: the job fails otherwise), localmap::localmap.
  cxx_src=$prefix/share/doc/localmap/examples/cmake-cxx
  cmake -S "$cxx_src" -B "$tmp/cxx/build" -DCMAKE_PREFIX_PATH="$prefix" >"$tmp/cxx.log" 2>&1 ||
    { cat "$tmp/cxx.log"; echo "cmake configure of the installed examples/cmake-cxx failed"; exit 1; }
  cmake --build "$tmp/cxx/build" >>"$tmp/cxx.log" 2>&1 || { cat "$tmp/cxx.log"; echo "examples/cmake-cxx: build failed"; exit 1; }
  same_mpi "$tmp/cxx/build/row_norms"
  res=$(bash tools/lm-mpirun 2 "$tmp/cxx/build/row_norms")
  echo "$res"
  [[ $res == *"row_norms: OK (np 2)"* ]] || { echo "examples/cmake-cxx: row_norms did not say OK"; exit 1; }
  cmake_ok="CMake consumers (shared np 4, static np 2, version check, examples/cmake-cxx np 2)"
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
# The C++ example (typed local_map), built by the installed Makefile's *.cpp rule.
res=$(bash tools/lm-mpirun 2 "$tmp/ex/masked_loss")
echo "installed masked_loss, np 2: $res"
[[ $res == *PASS* ]] || { echo "the installed C++ example masked_loss failed"; exit 1; }
# The ScaLAPACK examples: built (C; Fortran with the module) where the ScaLAPACK of this MPI is,
# else left out with the Makefile's note. Debian's ScaLAPACK for OpenMPI is the one tested
# (tests/script_scalapack.sh): the MPICH build only checks the note.
sp_pc=scalapack-$([ "$MPI" = mpich ] && echo mpich || echo openmpi)
if pkg-config --exists "$sp_pc" 2>/dev/null; then
  for f in examples/scalapack/*.c; do
    b=scalapack/$(basename "$f" .c)
    [ -x "$tmp/ex/$b" ] || { cat "$tmp/ex.log"; echo "installed examples Makefile did not build $b"; exit 1; }
  done
  if [ -f "$prefix/include/localmap.mod" ]; then
    for f in examples/scalapack/*.f90; do
      b=scalapack/$(basename "$f" .f90)_f
      [ -x "$tmp/ex/$b" ] || { cat "$tmp/ex.log"; echo "installed examples Makefile did not build $b"; exit 1; }
    done
  fi
  same_mpi "$tmp/ex/scalapack/center_rows"
  res=$("$prefix/bin/lm-mpirun" 4 "$tmp/ex/scalapack/center_rows")
  echo "installed scalapack/center_rows, np 4: $res"
  grep -q ': OK' <<<"$res" || { echo "the installed ScaLAPACK example failed"; exit 1; }
else
  grep -q "scalapack/ not built: pkg-config finds no $sp_pc" "$tmp/ex.log" ||
    { cat "$tmp/ex.log"; echo "installed examples Makefile: no note on the ScaLAPACK examples left out"; exit 1; }
  [ ! -e "$tmp/ex/scalapack" ] || { echo "installed examples Makefile: scalapack/ built without $sp_pc"; exit 1; }
  if [ "$MPI" = mpich ]; then
    echo "installed ScaLAPACK examples: left out with a note (MPICH build, no $sp_pc)"
  else
    lm_defer_skip "the installed ScaLAPACK example built and run: no $sp_pc (apt-get install lib$sp_pc-dev)"
  fi
fi
if [ -f "$prefix/include/localmap.mod" ]; then
  for f in bindings/fortran/examples/*.f90; do
    b=$(basename "$f" .f90)
    [ -x "$tmp/ex/fortran/$b" ] || { echo "installed examples Makefile did not build fortran/$b"; exit 1; }
  done
  "$prefix/bin/lm-mpirun" 2 "$tmp/ex/fortran/hello" | grep -c 'gathered all: T' | grep -qx 2 ||
    { echo "the installed Fortran hello failed"; exit 1; }
  echo "installed Fortran examples: built and run"
else
  lm_defer_skip "the installed Fortran examples built and run: $no_fortran"
fi

# examples/README.md's block for an installed tree, run as written: nothing but PREFIX set (no
# LM_MPIRUN, no OMPI_* from this script's environment; root and 2 cores are fine).
block=$(sed -n '/^<!-- installed-commands/,/^```$/p' examples/README.md | sed '1,2d;$d')
[ -n "$block" ] || { echo "examples/README.md has no installed-commands block"; exit 1; }
mkdir -p "$tmp/readme"
(cd "$tmp/readme" && env -i HOME="$HOME" PATH=/usr/local/bin:/usr/bin:/bin PREFIX="$prefix" bash -euc "$block") \
  >"$tmp/readme.log" 2>&1 || { cat "$tmp/readme.log"; echo "examples/README.md's installed commands failed"; exit 1; }
grep -q 'PASS' "$tmp/readme.log" || { cat "$tmp/readme.log"; echo "the README's demo printed no PASS"; exit 1; }
echo "examples/README.md's installed commands: OK ($(grep -c PASS "$tmp/readme.log") PASS lines)"

# Without PKG_CONFIG_PATH the installed Makefile says what to do, first and alone.
set +e
out=$(PKG_CONFIG_LIBDIR="$tmp/empty" PKG_CONFIG_PATH= make --no-print-directory -C "$tmp/ex" \
      -f "$prefix/share/doc/localmap/examples/Makefile" 2>&1)
rc=$?
set -e
first=$(echo "$out" | head -n 1)
if [ $rc -eq 0 ] || [[ $first != *"pkg-config finds no localmap"*"PKG_CONFIG_PATH"* ]] || [[ $out == *"was not found in the pkg-config search path"* ]]; then
  echo "installed Makefile without PKG_CONFIG_PATH: expected only its own error first (exit $rc):"; echo "$out"; exit 1
fi
echo "installed Makefile without pkg-config's localmap: '$first'"

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
for d in lib/cmake/localmap share/doc/localmap bin/lm-mpirun; do
  [ ! -e "$prefix/$d" ] || { echo "left after uninstall: $d"; exit 1; }
done
lm_finish "install, pkg-config consumer at np 4, $cmake_ok, installed examples, uninstall: OK"
