#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Checks that a language binding covers the whole C API: every function that include/localmap.h
# exports (declared with LM_API) must be named somewhere in the binding's sources.
# Usage: tools/check-binding-coverage.sh LANG-DIR [FILE-GLOB ...]
#   e.g. tools/check-binding-coverage.sh bindings/python '*.py'
# Prints the functions the binding lacks and exits 1, or prints a one-line summary and exits 0.
set -eu
cd "$(dirname "$0")/.."
dir=$1; shift
[ $# -gt 0 ] || set -- '*'
api=$(tr '\n' ' ' < include/localmap.h | grep -oE 'LM_API[^;(]*\blm_[a-z0-9_]+[[:space:]]*\(' |
      grep -oE 'lm_[a-z0-9_]+[[:space:]]*\($' | tr -d ' (' | sort -u)
[ -n "$api" ] || { echo "check-binding-coverage: found no LM_API function in include/localmap.h"; exit 1; }
files=""
for g in "$@"; do files="$files $(find "$dir" -type f -name "$g" ! -path '*/target/*' ! -path '*/build/*')"; done
[ -n "${files# }" ] || { echo "check-binding-coverage: no source files in $dir matching $*"; exit 1; }
missing=0
for f in $api; do
  # shellcheck disable=SC2086
  if ! grep -qw "$f" $files; then echo "$dir: no binding of $f"; missing=$((missing + 1)); fi
done
total=$(echo "$api" | wc -l)
if [ $missing -gt 0 ]; then echo "$dir: $missing of $total C API functions are not bound"; exit 1; fi
echo "$dir: all $total C API functions are bound"
