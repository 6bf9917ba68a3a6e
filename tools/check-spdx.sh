#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Checks that every source, header, script and build file carries the SPDX line within its first
# five lines. Lists the files that lack it and exits 1; exits 0 when all have it.
# Usage: tools/check-spdx.sh [--fix]   (--fix inserts the line, after a #! line if there is one)
set -eu
cd "$(dirname "$0")/.."
TAG='SPDX-License-Identifier: BSD-3-Clause'
fix=0
[ "${1:-}" = --fix ] && fix=1

files() {
  if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    { git ls-files; git ls-files --others --exclude-standard; } | sort -u
  else
    find . -type f ! -path './.git/*' ! -path './build*' | sed 's|^\./||' | sort
  fi
}

# Which files need the line: by name.
wanted() {
  case "$1" in
    */Cargo.lock|*.lock|*.jsonl|*.json|*.md|*.png|*.abi|*.txt) return 1 ;;
    *.c|*.h|*.cpp|*.hpp|*.cu|*.cuh|*.sh|*.py|*.rs|*.f90|*.F90|*.mk|*.map|*.in|*.cmake|*.toml) return 0 ;;
    Makefile|*/Makefile|CMakeLists.txt|*/CMakeLists.txt|Doxyfile|*/Doxyfile|.ci/run|tools/*) return 0 ;;
  esac
  return 1
}

comment_for() {
  case "$1" in
    *.c|*.h|*.cu|*.cuh|*.map) echo "/* $TAG */" ;;
    *.cpp|*.hpp|*.rs) echo "// $TAG" ;;
    *.f90|*.F90) echo "! $TAG" ;;
    *) echo "# $TAG" ;;
  esac
}

missing=0
for f in $(files); do
  [ -f "$f" ] || continue
  wanted "$f" || continue
  if head -n 5 "$f" | grep -q "$TAG"; then continue; fi
  if [ $fix = 1 ]; then
    line=$(comment_for "$f")
    if head -n 1 "$f" | grep -q '^#!'; then
      { head -n 1 "$f"; echo "$line"; tail -n +2 "$f"; } > "$f.spdx"
    else
      { echo "$line"; cat "$f"; } > "$f.spdx"
    fi
    cat "$f.spdx" > "$f" && rm -f "$f.spdx"
    echo "added: $f"
  else
    echo "missing SPDX line: $f"
    missing=$((missing + 1))
  fi
done
if [ $fix = 0 ] && [ $missing -gt 0 ]; then
  echo "$missing file(s) lack '$TAG' in their first 5 lines (tools/check-spdx.sh --fix adds it)"
  exit 1
fi
exit 0
