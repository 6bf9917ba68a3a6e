#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Builds COSTA (github.com/eth-cscs/COSTA, BSD-3-Clause) from a source tree you already have, for
# bench_scalapack's comparison: its ScaLAPACK-compatible costa_pdgemr2d over Debian's ScaLAPACK.
# Nothing is downloaded (COSTA's own FetchContent is only for its tests and apps, off here).
#   bench/build-costa.sh SRC [PREFIX]     (PREFIX default: build/costa)
#   make bench COSTA_DIR=build/costa
# Tested with COSTA v2.3.2: cmake >= 3.22, OpenMP, ~20 s on 2 cores. COSTA's install step leaves
# out its C headers; bench_scalapack declares costa_pdgemr2d itself.
set -euo pipefail
src=${1:?usage: bench/build-costa.sh COSTA-SOURCE-DIR [PREFIX]}
prefix=$(realpath -m "${2:-build/costa}")
lib=$(pkg-config --variable=libdir scalapack-openmpi)/libscalapack-openmpi.so
[ -f "$lib" ] || { echo "build-costa: no $lib (apt-get install libscalapack-openmpi-dev)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake -S "$src" -B "$work" -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$prefix" \
  -DCMAKE_CXX_COMPILER=mpicxx -DCOSTA_SCALAPACK=CUSTOM -DCOSTA_SCALAPACK_LINK_LIBRARIES="$lib" \
  -DBUILD_SHARED_LIBS=ON -DCOSTA_WITH_TESTS=OFF -DCOSTA_WITH_APPS=OFF -DCOSTA_WITH_BENCHMARKS=OFF >/dev/null
cmake --build "$work" -j"$(nproc)" >/dev/null
cmake --install "$work" >/dev/null
echo "COSTA installed in $prefix: make bench COSTA_DIR=$prefix"
