#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# `make abi-check` tested both ways, on modified copies of the tree built in a temporary directory
# against a baseline dumped from this build:
#  - compatible: a field added to a private C++ class (the struct behind lm_mesh_t, defined in
#    src/) and a field appended to a versioned config struct (lm_mesh_config_t) must pass;
#  - incompatible: a changed public struct (lm_arg_t's reserved field widened) must fail.
# Needs abidw/abidiff (abigail-tools): without them it says SKIP, unless LM_REQUIRE_TOOLS is set
# (CI). Runs in the plain default-MPI build only (the sanitizer and MPICH builds have the same
# public ABI).
set -euo pipefail
cd "$(dirname "$0")/.."
. tests/lm_test.sh
BUILD=${BUILD:-build}
MPI=${LM_MPI:-}
deps=$(ldd "$BUILD/lib/liblocalmap.so")
if [[ $deps == *libasan* ]]; then
  lm_skip "sanitizer build: the ABI check (the same public types) runs in the plain build"
fi
if [ "$MPI" = mpich ]; then
  lm_skip "MPICH build: the ABI check (the same public types) runs in the default build"
fi
if ! command -v abidw >/dev/null 2>&1 || ! command -v abidiff >/dev/null 2>&1; then
  lm_missing_tool "no abidw/abidiff (apt-get install abigail-tools)"
fi
unset MAKEFLAGS MFLAGS
# The two rebuilds below are most of this script's time: use every core (tests run one at a time).
JOBS=$(nproc 2>/dev/null || echo 2)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The baseline: this build's library, dumped the way make abi-dump does (abidw directly: a make
# call without the build's flags would rebuild it).
shlib=$(ls "$BUILD"/lib/liblocalmap.so.*.*.* | head -n 1)
abidw --no-corpus-path --headers-dir include --drop-private-types --out-file "$tmp/base.abi" "$shlib"

# copy_tree DIR: the sources and build files, and this build's objects, flag stamps and
# dependency files under the same build folder name (so that make rebuilds only what the change
# touches).
copy_tree() {
  mkdir -p "$1/$BUILD"
  cp -a Makefile include src pkgconfig cmake abi docs tools fuzz scalapack "$1/"
  cp -a "$BUILD/obj" "$BUILD/lib" "$BUILD"/.stamp-* "$1/$BUILD/"
}
# check DIR: build the copy's library and run its abi-check against the baseline; the output goes
# to DIR/abi.log; returns abi-check's status. CUDA=0: the public ABI is the same with and without
# the CUDA backend, and nvcc would make the two rebuilds much slower.
check() {
  make -s -j"$JOBS" -C "$1" lib BUILD="$BUILD" MPI="$MPI" CUDA=0 >"$1/build.log" 2>&1 || { cat "$1/build.log"; exit 1; }
  make -s -C "$1" abi-check BUILD="$BUILD" MPI="$MPI" CUDA=0 ABI_BASELINE="$tmp/base.abi" >"$1/abi.log" 2>&1
}

# 1. Compatible changes.
copy_tree "$tmp/ok"
mesh_h=$(grep -rlE '^struct lm_mesh_s( |\{)' "$tmp/ok/src" | head -n 1)
[ -n "$mesh_h" ] || { echo "script_abi: no 'struct lm_mesh_s {' in src/"; exit 1; }
sed -i -E '0,/^struct lm_mesh_s( |\{).*\{/s//&\n  long abi_test_private_field_ = 0;/' "$mesh_h"
grep -q abi_test_private_field_ "$mesh_h" || { echo "script_abi: could not edit $mesh_h"; exit 1; }
sed -i -e 's|^} lm_mesh_config_t;|  int abi_test_appended_field;\n&|' \
  -e '/^#define LM_MESH_CONFIG_INIT/{n;s/}[[:space:]]*$/, 0}/}' "$tmp/ok/include/localmap.h"
grep -q abi_test_appended_field "$tmp/ok/include/localmap.h" || { echo "script_abi: could not edit lm_mesh_config_t"; exit 1; }
if ! check "$tmp/ok"; then
  cat "$tmp/ok/abi.log"
  echo "script_abi: FAIL: a private class change or a config struct growing at the end was reported as an ABI break"
  exit 1
fi
echo "compatible: $(tail -n 1 "$tmp/ok/abi.log")"

# 2. An incompatible change of a public struct: lm_arg_t's `reserved` widens to 64 bits (the
# offsets of i64, f64 and ptr, and the struct's size, change).
copy_tree "$tmp/bad"
sed -i '/^typedef struct lm_arg_t/,/} lm_arg_t;/s|^  int32_t reserved;|  int64_t reserved;|' "$tmp/bad/include/localmap.h"
grep -q '^  int64_t reserved;' "$tmp/bad/include/localmap.h" || { echo "script_abi: could not edit lm_arg_t"; exit 1; }
if check "$tmp/bad"; then
  cat "$tmp/bad/abi.log"
  echo "script_abi: FAIL: a changed public lm_arg_t passed abi-check"
  exit 1
fi
grep -q 'abi-check: INCOMPATIBLE' "$tmp/bad/abi.log" || { cat "$tmp/bad/abi.log"; exit 1; }
grep -q 'lm_arg_t' "$tmp/bad/abi.log" || { cat "$tmp/bad/abi.log"; echo "script_abi: the report does not name lm_arg_t"; exit 1; }
echo "incompatible: $(grep -m1 'lm_arg_t' "$tmp/bad/abi.log" | sed 's/^ *//')"
echo "abi-check: private class and appended config field pass, public struct change fails: OK"
