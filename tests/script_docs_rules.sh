#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The two long documents keep their shape (tools/check-docs.sh): docs/DESIGN.md design only (no
# issue numbers, dates or timings; at most 700 lines), docs/PERFORMANCE.md a current report (at
# most 550 lines, opening with its known gaps), and every reference to one of their sections by
# name resolves. The tree's documents must pass; then copies with one fault each must fail,
# naming it, so that a checker which stops seeing one of them fails here.
set -euo pipefail
cd "$(dirname "$0")/.."
. tests/lm_test.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

bash tools/check-docs.sh

# expect_fail WHAT PATTERN DESIGN PERFORMANCE: the checker fails on these copies and says PATTERN.
expect_fail() {
  local what=$1 pattern=$2 out
  if out=$(bash tools/check-docs.sh "$3" "$4" 2>&1); then
    echo "$out"; echo "check-docs passed a copy with $what"; exit 1
  fi
  printf '%s\n' "$out" | grep -qF -- "$pattern" || { echo "$out"; echo "check-docs did not name $what"; exit 1; }
  echo "mutation: $what -> $(printf '%s\n' "$out" | grep -F -- "$pattern" | head -1)"
}
D=$tmp/DESIGN.md P=$tmp/PERFORMANCE.md
fresh() { cp -t "$tmp" docs/DESIGN.md docs/PERFORMANCE.md; }

fresh; echo 'Decided in issue 42, section 3.' >> "$D"
expect_fail "an issue number" "cites issue numbers" "$D" "$P"
fresh; echo 'First run on 2026-12-04.' >> "$D"
expect_fail "a date" "carries dates" "$D" "$P"
fresh; echo 'A call takes about 2 us.' >> "$D"
expect_fail "a timing in us" "carries timings" "$D" "$P"
fresh; echo 'Node-local copies run at 6.5 GB/s.' >> "$D"
expect_fail "a bandwidth" "carries timings" "$D" "$P"
fresh; while [ "$(wc -l < "$D")" -le 700 ]; do echo >> "$D"; done
expect_fail "701 lines of design" "has 701 lines" "$D" "$P"
fresh; sed -i '0,/^## Layers$/s//## Strata/' "$D"
expect_fail "a renamed section others point to" "points to \"Layers\"" "$D" "$P"
fresh; sed -i '0,/^## Known gaps$/s//## Before and after\n\nAn old A\/B.\n\n&/' "$P"
expect_fail "a report that opens with history" "does not open with its known gaps" "$D" "$P"
fresh; while [ "$(wc -l < "$P")" -le 550 ]; do echo >> "$P"; done
expect_fail "551 lines of report" "has 551 lines" "$D" "$P"

# No merge-conflict markers committed anywhere (one was, in bindings/README.md, for a day).
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  markers=$(git grep -nE '^(<<<<<<< |>>>>>>> )' -- . ':!tests/script_docs_rules.sh' || true)
  [ -z "$markers" ] || { echo "merge-conflict markers in the tree:"; echo "$markers"; exit 1; }
  echo "no merge-conflict markers in the tracked files"
fi

lm_finish "docs: DESIGN.md design only, PERFORMANCE.md opens with its known gaps, references resolve; 8 mutations caught"
