#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Lines of hand-written binding code (issue "localmap 1.0": the idiomatic layers over the C API
# must shrink as the generated layers take over). Counts, per language, the library files a
# person writes (not tests, examples or files generated from api/localmap.api), as all lines
# and as code lines (neither blank nor a whole-line comment).
#   tools/count-binding-code.sh [COMMIT]   (default: the work tree)
set -euo pipefail
cd "$(dirname "$0")/.."
rev=${1:-}
files=(
  "C++    include/localmap.hpp"
  "Fortran bindings/fortran/localmap.f90"
  "Fortran bindings/fortran/localmap_generic.inc"
  "Fortran bindings/fortran/gen_typed.py"
  "Fortran bindings/fortran/localmap_c.inc"
  "Fortran bindings/fortran/localmap_wrap.inc"
  "Fortran bindings/fortran/localmap_typed.inc"
  "Fortran bindings/fortran/localmap_types.inc"
  "Rust   bindings/rust/localmap/src/lib.rs"
  "Rust   bindings/rust/localmap-sys/src/lib.rs"
  "Rust   bindings/rust/localmap-sys/build.rs"
  "Python bindings/python/localmap/__init__.py"
  "Python bindings/python/localmap/_core.py"
  "Python bindings/python/localmap/_lib.py"
  "Python bindings/python/localmap/_dlpack.py"
  "Python bindings/python/localmap/_api.py"
  "Python bindings/python/localmap/_wrappers.py"
)
text() { if [ -n "$rev" ]; then git show "$rev:$1" 2>/dev/null || true; else cat "$1" 2>/dev/null || true; fi; }
# Extra hand-written library files a later layout adds (listed by the binding's own manifest).
declare -A all code
for entry in "${files[@]}"; do
  lang=${entry%% *}; f=${entry##* }
  t=$(text "$f")
  [ -n "$t" ] || continue
  # A generated file says so in its first lines: not hand-written.
  if head -5 <<<"$t" | grep -qiE 'generated (by|from)|do not edit'; then continue; fi
  a=$(grep -c '' <<<"$t" || true)
  c=$(grep -vcE '^\s*$|^\s*(//|#|!|/\*|\*)' <<<"$t" || true)
  all[$lang]=$(( ${all[$lang]:-0} + a )); code[$lang]=$(( ${code[$lang]:-0} + c ))
done
ta=0; tc=0
for lang in C++ Fortran Rust Python; do
  printf '%-8s %6d lines %6d code\n' "$lang" "${all[$lang]:-0}" "${code[$lang]:-0}"
  ta=$(( ta + ${all[$lang]:-0} )); tc=$(( tc + ${code[$lang]:-0} ))
done
printf '%-8s %6d lines %6d code\n' total "$ta" "$tc"
