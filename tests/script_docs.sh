#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The API reference and the man page:
#  - localmap(3) lists every function the library exports and every static inline helper of the C
#    headers (localmap_mpi.h's MPI_Comm helpers and the like), each
#    with its summary (no "(undocumented)"), and man formats it without warnings;
#  - `make docs` (doxygen, warnings as errors) passes on the headers as they are, and fails on a
#    copy of them with one undocumented function added, naming it.
# Without doxygen the second part says SKIP, unless LM_REQUIRE_TOOLS is set (CI).
set -euo pipefail
cd "$(dirname "$0")/.."
. tests/lm_test.sh
BUILD=${BUILD:-build}
MPI=${LM_MPI:-}
unset MAKEFLAGS MFLAGS
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

make -s man BUILD="$BUILD" MPI="$MPI" >/dev/null
page=$BUILD/docs/localmap.3
listed=$(sed -n '/^\.SH FUNCTIONS/,/^\.SH /{/^\.B lm_/s/^\.B //p}' "$page" | sort)
exported=$(nm -D --defined-only "$BUILD/lib/liblocalmap.so" | awk '$2 == "T" && $3 ~ /^lm_/ {sub(/@.*/, "", $3); print $3}' | sort)
helpers=$(sed -n 's/^static inline [a-z_]* \(lm_[a-z0-9_]*\)(.*/\1/p' include/localmap.h include/localmap_mpi.h | sort)
missing=$(comm -23 <(printf '%s\n' $exported $helpers | sort -u) <(printf '%s\n' "$listed"))
[ -z "$missing" ] || { echo "localmap(3) lacks:"; echo "$missing"; exit 1; }
extra=$(comm -13 <(printf '%s\n' $exported $helpers | sort -u) <(printf '%s\n' "$listed"))
[ -z "$extra" ] || { echo "localmap(3) lists functions the library does not have:"; echo "$extra"; exit 1; }
if grep -q '(undocumented)' "$page"; then
  echo "localmap(3): functions without a Doxygen comment:"; grep -B1 '(undocumented)' "$page" | grep '^\.B'; exit 1
fi
n=$(printf '%s\n' "$listed" | grep -c .)
if command -v man >/dev/null 2>&1; then
  warn=$(MANWIDTH=100 man --warnings -l "$page" 2>&1 >/dev/null || true)
  [ -z "$warn" ] || { echo "man warns about localmap(3):"; echo "$warn"; exit 1; }
else
  lm_defer_skip "localmap(3) formatting: no man (apt-get install man-db)"
fi
echo "localmap(3): $n functions, the same as exported + inline helpers"

if ! command -v doxygen >/dev/null 2>&1; then
  lm_defer_skip "make docs: no doxygen (apt-get install doxygen)"
  lm_finish "localmap(3) checked"
fi
make -s docs BUILD="$BUILD" MPI="$MPI" >"$tmp/docs.log" 2>&1 || { cat "$tmp/docs.log"; echo "make docs failed"; exit 1; }
[ -s "$BUILD/docs/html/index.html" ] || { echo "make docs wrote no index.html"; exit 1; }
grep -q 'lm_local_map' "$BUILD/docs/html/localmap_8h.html" || { echo "the reference lacks lm_local_map"; exit 1; }

# The gate: an undocumented public function fails make docs.
mkdir -p "$tmp/t"
cp -a Makefile include docs tools fuzz "$tmp/t/"
# (after the first "#ifdef __cplusplus", the one that opens extern "C")
sed -i '0,/^#ifdef __cplusplus$/s//LM_API lm_status_t lm_docs_test_undocumented(int x);\n&/' "$tmp/t/include/localmap.h"
grep -q lm_docs_test_undocumented "$tmp/t/include/localmap.h" || { echo "could not edit the copy"; exit 1; }
if make -s -C "$tmp/t" docs BUILD=b >"$tmp/t.log" 2>&1; then
  cat "$tmp/t.log"; echo "make docs passed with an undocumented function"; exit 1
fi
grep -q 'lm_docs_test_undocumented.*not documented' "$tmp/t.log" || { cat "$tmp/t.log"; exit 1; }
lm_finish "make docs: builds $BUILD/docs/html; an undocumented function fails it: OK"
