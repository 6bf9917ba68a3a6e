#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# ScaLAPACK interop against Debian's ScaLAPACK (libscalapack-openmpi-dev): the C and Fortran
# examples (examples/scalapack/center_rows.{c,f90}) make a BLACS grid and a block-cyclic matrix,
# hand it to localmap without a copy (lm_mesh_create_grid, lm_dist_tensor_from_scalapack), reshard
# it to row shards, centre the rows with lm_local_map and hand the result back as a descriptor to
# pdlange; each checks every element and that the borrow made no copy. C at np 1, 2, 3, 4 (grids
# 1x1, 1x2, 1x3, 2x2) and shapes with empty and one-block coordinates; Fortran at np 2 and 4.
# Exits 77 (SKIP with the reason) without ScaLAPACK (LM_REQUIRE_TOOLS=1, CI: a failure), in the
# MPICH build (Debian's ScaLAPACK for OpenMPI is the one tested) and in sanitizer builds (the
# plain build runs them; test_cyclic covers the same calls under ASan).
set -euo pipefail
cd "$(dirname "$0")/.."
. tests/lm_test.sh
BUILD=${BUILD:-build}
MPIFC=${MPIFC:-mpif90}
[ "${LM_MPI:-}" != mpich ] || lm_skip "MPICH build: the ScaLAPACK examples run in the OpenMPI build"
deps=$(ldd "$BUILD/lib/liblocalmap.so")
[[ $deps != *libasan* ]] || lm_skip "sanitizer build: the ScaLAPACK examples run in the plain build"
pkg-config --exists scalapack-openmpi 2>/dev/null ||
  lm_missing_tool "no ScaLAPACK for OpenMPI (apt-get install libscalapack-openmpi-dev)"
SCALAPACK=$(pkg-config --libs scalapack-openmpi)
out=$BUILD/scalapack
mkdir -p "$out"
# shellcheck disable=SC2086
mpicc -O2 -Wall -Wextra -Werror -Iinclude examples/scalapack/center_rows.c -L"$BUILD/lib" \
  -Wl,-rpath,"$PWD/$BUILD/lib" -llocalmap $SCALAPACK -lm -o "$out/center_rows"
ok() { grep -q ': OK' <<<"$1"; }  # printed only when every check held
for np in 1 2 3 4; do
  for shape in "" "1 5 1 1" "0 3 2 2" "9 2 5 1"; do
    # shellcheck disable=SC2086
    res=$(bash tools/lm-mpirun "$np" "$out/center_rows" $shape)
    echo "np $np: $res"
    ok "$res" || { echo "script_scalapack: the C example failed at np $np (${shape:-default shape})"; exit 1; }
  done
done
if ! command -v "$MPIFC" >/dev/null; then
  lm_defer_skip "the Fortran example: no $MPIFC (apt-get install gfortran)"
else
  [ -f "$BUILD/fortran/lib/liblocalmap_fortran.a" ] || { unset MAKEFLAGS MFLAGS; make -s fortran BUILD="$BUILD" >/dev/null; }
  # shellcheck disable=SC2086
  "$MPIFC" -O2 -J"$out" -I"$BUILD/fortran/include" examples/scalapack/center_rows.f90 \
    -L"$BUILD/fortran/lib" -llocalmap_fortran -L"$BUILD/lib" -Wl,-rpath,"$PWD/$BUILD/lib" -llocalmap \
    $SCALAPACK -o "$out/center_rows_f"
  for np in 2 4; do
    res=$(bash tools/lm-mpirun "$np" "$out/center_rows_f")
    echo "np $np: $res"
    ok "$res" || { echo "script_scalapack: the Fortran example failed at np $np"; exit 1; }
  done
fi
lm_finish "scalapack: the C and Fortran examples hand a ScaLAPACK matrix over and back: OK"
