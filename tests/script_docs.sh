#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The API references and the man pages:
#  - localmap(3) lists every function the library exports and every static inline helper of the C
#    headers (localmap_mpi.h's MPI_Comm helpers and the like), each with its summary (no
#    "(undocumented)");
#  - each of them has its own page, <function>(3), with NAME, SYNOPSIS, DESCRIPTION, RETURN
#    VALUE, ERRORS, EXAMPLE (a real one: docs/man-examples.txt has a block naming it) and SEE
#    ALSO, and man formats every page without warnings;
#  - `make docs` (doxygen, warnings as errors) passes on the headers and the Fortran module as they
#    are, and fails on copies with one undocumented C function, or one undocumented public
#    Fortran subroutine, added, naming it.
# Without doxygen the last part says SKIP, unless LM_REQUIRE_TOOLS is set (CI).
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
listed=$(sed -n '/^\.SH FUNCTIONS/,/^\.SH /{/^\.BR lm_/s/^\.BR \(lm_[a-z0-9_]*\) (3)$/\1/p}' "$page" | sort)
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

# One page per function, complete.
man3=$BUILD/docs/man3
for f in $listed; do
  p=$man3/$f.3
  [ -f "$p" ] || { echo "no man page $f(3) ($p)"; exit 1; }
  for sec in NAME SYNOPSIS DESCRIPTION 'RETURN VALUE' ERRORS EXAMPLE 'SEE ALSO'; do
    grep -q "^\.SH $sec\$" "$p" || { echo "$f(3) has no $sec section"; exit 1; }
  done
  grep -q "^\.B.* $f\|$f(" "$p" || { echo "$f(3): the synopsis does not declare $f"; exit 1; }
  if grep -q 'no example yet' "$p"; then echo "$f(3) has no example: add a block to docs/man-examples.txt"; exit 1; fi
  if command -v man >/dev/null 2>&1; then
    warn=$(MANWIDTH=100 man --warnings -l "$p" 2>&1 >/dev/null || true)
    [ -z "$warn" ] || { echo "man warns about $f(3):"; echo "$warn"; exit 1; }
  fi
done
extra=$(ls "$man3" | sed -n 's/\.3$//p' | grep -vxF -f <(printf '%s\n' $listed) || true)
[ -z "$extra" ] || { echo "man pages of functions the headers do not declare: $extra"; exit 1; }
echo "man3: $n pages ($man3), each with synopsis, description, errors and an example"

if ! command -v doxygen >/dev/null 2>&1; then
  lm_defer_skip "make docs: no doxygen (apt-get install doxygen)"
  lm_finish "localmap(3) checked"
fi
make -s docs BUILD="$BUILD" MPI="$MPI" >"$tmp/docs.log" 2>&1 || { cat "$tmp/docs.log"; echo "make docs failed"; exit 1; }
[ -s "$BUILD/docs/html/index.html" ] || { echo "make docs wrote no index.html"; exit 1; }
grep -q 'lm_local_map' "$BUILD/docs/html/localmap_8h.html" || { echo "the reference lacks lm_local_map"; exit 1; }
grep -q 'environment' "$BUILD/docs/html/classlocalmap_1_1environment.html" || { echo "the reference lacks localmap::environment"; exit 1; }
fref=$BUILD/docs/fortran/html/namespacelocalmap.html
[ -s "$fref" ] || { echo "make docs wrote no Fortran reference ($fref)"; exit 1; }
for w in lm_local_map lm_mesh_create lm_reshard lm_arg_take; do
  grep -q "$w" "$fref" || { echo "the Fortran reference lacks $w"; exit 1; }
done
grep -q 'lm_from_global' "$BUILD/docs/fortran/html/interfacelm__from__global.html" ||
  { echo "the Fortran reference lacks the generic lm_from_global"; exit 1; }

# The gates: an undocumented public C function, or Fortran subroutine, fails make docs.
mkdir -p "$tmp/t" "$tmp/f"
cp -a Makefile include docs tools fuzz "$tmp/t/"
mkdir -p "$tmp/t/bindings" && cp -a bindings/fortran "$tmp/t/bindings/"
cp -a "$tmp/t/." "$tmp/f/"
# (after the first "#ifdef __cplusplus", the one that opens extern "C")
sed -i '0,/^#ifdef __cplusplus$/s//LM_API lm_status_t lm_docs_test_undocumented(int x);\n&/' "$tmp/t/include/localmap.h"
grep -q lm_docs_test_undocumented "$tmp/t/include/localmap.h" || { echo "could not edit the copy"; exit 1; }
if make -s -C "$tmp/t" docs BUILD=b >"$tmp/t.log" 2>&1; then
  cat "$tmp/t.log"; echo "make docs passed with an undocumented function"; exit 1
fi
grep -q 'lm_docs_test_undocumented.*not documented' "$tmp/t.log" || { cat "$tmp/t.log"; exit 1; }
sed -i '0,/^  !> Replicate: every rank along the mesh dim holds the full value\.$/s//  subroutine lm_docs_test_undoc(x)\n    integer :: x\n    x = 0\n  end subroutine\n&/' \
  "$tmp/f/bindings/fortran/localmap.f90"
sed -i 's/^  public :: lm_init, /  public :: lm_docs_test_undoc, lm_init, /' "$tmp/f/bindings/fortran/localmap.f90"
grep -q 'public :: lm_docs_test_undoc' "$tmp/f/bindings/fortran/localmap.f90" || { echo "could not edit the Fortran copy"; exit 1; }
if make -s -C "$tmp/f" docs BUILD=b >"$tmp/f.log" 2>&1; then
  cat "$tmp/f.log"; echo "make docs passed with an undocumented Fortran subroutine"; exit 1
fi
grep -q 'lm_docs_test_undoc.*not documented' "$tmp/f.log" || { cat "$tmp/f.log"; exit 1; }
lm_finish "make docs: builds $BUILD/docs/html and $BUILD/docs/fortran/html; an undocumented C function or Fortran subroutine fails it: OK"
