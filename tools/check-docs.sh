#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Keeps the two long documents what they are for, and the references to them working:
#  - docs/DESIGN.md is design only: no issue number ("issue 42", "issue #42"), no date
#    (YYYY-MM-DD), no timing figure (a number with ns, us, ms, GB/s, MB/s, GiB/s, MiB/s, TB/s), and
#    at most 700 lines (600 was the aim; the device component, the ScaLAPACK drop-in and the
#    generated layers are design, not history). History goes to CHANGELOG.md, figures to docs/PERFORMANCE.md.
#  - docs/PERFORMANCE.md is a report of today's numbers: at most 550 lines, and its body opens with
#    the known gaps (its first section is "## Known gaps", within its first 15 lines). Older runs
#    go to bench/results/ (HISTORY.md and the raw files, indexed by bench/results/README.md).
#  - Every reference to a section of either by name (the file name, a comma, the name in double
#    quotes) in the tree outside bench/results/ names the first words of a heading or a bold label
#    of that document (backquotes ignored).
# Usage: tools/check-docs.sh [DESIGN PERFORMANCE]   (default docs/DESIGN.md docs/PERFORMANCE.md;
# tests/script_docs_rules.sh also runs it on mutated copies). Prints each failure; exits 1 if any.
set -euo pipefail
cd "$(dirname "$0")/.."
design=${1:-docs/DESIGN.md}
perf=${2:-docs/PERFORMANCE.md}
export LC_ALL=C
bad=0
fail() { echo "check-docs: $*"; bad=1; }

# 1. DESIGN: no history, no figures, not too long.
n=$(wc -l < "$design")
[ "$n" -le 700 ] || fail "$design has $n lines (at most 700: keep it to the design)"
hits() { grep -nE "$1" "$design" | head -5 || true; }
h=$(hits '[Ii]ssues? #?[0-9]')
[ -z "$h" ] || fail "$design cites issue numbers (history belongs in CHANGELOG.md):"$'\n'"$h"
h=$(hits '(^|[^0-9])[0-9]{4}-[0-9]{2}-[0-9]{2}([^0-9]|$)')
[ -z "$h" ] || fail "$design carries dates (history belongs in CHANGELOG.md):"$'\n'"$h"
h=$(hits '(^|[^0-9A-Za-z_.])[0-9]+(\.[0-9]+)? ?(ns|us|µs|ms|[GMKT]i?B/s)([^0-9A-Za-z_]|$)')
[ -z "$h" ] || fail "$design carries timings (figures belong in docs/PERFORMANCE.md):"$'\n'"$h"

# 2. PERFORMANCE: a report, known gaps first.
n=$(wc -l < "$perf")
[ "$n" -le 550 ] || fail "$perf has $n lines (at most 550: older runs go to bench/results/)"
first=$(grep -n '^## ' "$perf" | head -1 || true)
case "$first" in
  [0-9]:'## Known gaps'|1[0-5]:'## Known gaps') ;;
  *) fail "$perf does not open with its known gaps (its first section: ${first:-none})" ;;
esac

# 3. References to sections by name resolve.
sections() {  # the headings and bold labels of a markdown file, one per line, backquotes removed
  { sed -n 's/^#\{1,6\} *//p' "$1"; grep -o '\*\*[^*]*\*\*' "$1" | sed 's/^\*\*//; s/\*\*$//'; } |
    tr -d '`'
}
design_sections=$(sections "$design")
perf_sections=$(sections "$perf")
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  files=$({ git ls-files; git ls-files --others --exclude-standard; } | sort -u)
else
  files=$(find . -type f ! -path './.git/*' ! -path './build*' | sed 's|^\./||')
fi
refs=$(printf '%s\n' "$files" | grep -v '^bench/results/' | grep -vE '\.(png|jsonl|abi)$' |
  while read -r f; do [ -f "$f" ] && printf '%s\n' "$f"; done |
  xargs -r -d '\n' grep -HnoE '(DESIGN|PERFORMANCE)\.md,? *\(?"[^"]+"' || true)
while IFS= read -r ref; do
  [ -n "$ref" ] || continue
  name=$(printf '%s' "$ref" | sed 's/.*"\([^"]*\)"$/\1/' | tr -d '`')
  case "$ref" in
    *PERFORMANCE.md*) list=$perf_sections; doc=$perf ;;
    *) list=$design_sections; doc=$design ;;
  esac
  printf '%s\n' "$list" | awk -v n="$name" 'index($0, n) == 1 { f = 1 } END { exit !f }' ||
    fail "${ref%%:[A-Z]*} points to \"$name\", which $doc has no heading or bold label for"
done <<< "$refs"

[ "$bad" = 0 ] || exit 1
echo "check-docs: $design ($(wc -l < "$design") lines) design only; $perf ($(wc -l < "$perf") lines) opens with its known gaps; section references resolve"
