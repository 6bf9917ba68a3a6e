# SPDX-License-Identifier: BSD-3-Clause
# Shell helpers of the script tests (tests/script_*.sh source this file): the skip protocol of
# tests/run-tests.sh (tests/README.md, "Honest results").
#
#   lm_skip REASON...        this script could not run its checks here: prints the marker line
#                            "LM-SKIP: REASON" and exits 77 (run-tests.sh reports SKIP (REASON)).
#   lm_missing_tool REASON   a tool a check needs is missing: lm_skip, or a failure (exit 1) when
#                            LM_REQUIRE_TOOLS is set and not 0 (CI installs every tool).
#   lm_missing_binding REASON   the same for a binding's toolchain, under LM_REQUIRE_BINDINGS=1.
#   lm_defer_missing_binding REASON   a binding's toolchain is missing for one check, while the
#                            script's other checks go on: a failure (exit 1) under
#                            LM_REQUIRE_BINDINGS=1, else deferred like lm_defer_skip.
#   lm_defer_skip REASON     a check that could not run, while the script's other checks go on:
#                            lm_finish then skips (naming every deferred check) instead of passing.
#   lm_defer_skip_build REASON   the same for a check this build cannot run (a sanitizer build
#                            leaves install and consumer checks to the plain build): deferred like
#                            lm_defer_skip, but no tool is missing, so never a failure under
#                            LM_REQUIRE_TOOLS (CI's sanitizer run reports it as a SKIP).
#   lm_lib_links ERE         liblocalmap.so of $BUILD links a library matching ERE (libasan...):
#                            ldd's output is read whole, never piped into `grep -q`, which under
#                            pipefail fails the pipeline when grep exits before ldd is done.
#   lm_finish MESSAGE        the script's last line: "MESSAGE" and exit 0 when every check ran,
#                            else the deferred skips.
# Every skip says why; a script that did not run all its checks never exits 0.
_lm_name=$(basename "${BASH_SOURCE[1]:-$0}" .sh)
_lm_deferred=()
lm_skip() { echo "LM-SKIP: $*"; exit 77; }
lm_lib_links() {
  local deps
  deps=$(ldd "${BUILD:-build}/lib/liblocalmap.so") || return 2
  grep -qE -- "$1" <<<"$deps"
}
lm_missing_tool() {
  if [ -n "${LM_REQUIRE_TOOLS:-}" ] && [ "${LM_REQUIRE_TOOLS}" != 0 ]; then
    echo "$_lm_name: FAIL (LM_REQUIRE_TOOLS=$LM_REQUIRE_TOOLS): $*"; exit 1
  fi
  lm_skip "$*"
}
lm_missing_binding() {
  if [ "${LM_REQUIRE_BINDINGS:-0}" = 1 ]; then echo "$_lm_name: FAIL (LM_REQUIRE_BINDINGS=1): $*"; exit 1; fi
  lm_skip "$*"
}
lm_defer_skip() {
  if [ -n "${LM_REQUIRE_TOOLS:-}" ] && [ "${LM_REQUIRE_TOOLS}" != 0 ]; then
    echo "$_lm_name: FAIL (LM_REQUIRE_TOOLS=$LM_REQUIRE_TOOLS): $*"; exit 1
  fi
  echo "$_lm_name: not checked: $*"
  _lm_deferred+=("$*")
}
lm_defer_missing_binding() {
  if [ "${LM_REQUIRE_BINDINGS:-0}" = 1 ]; then echo "$_lm_name: FAIL (LM_REQUIRE_BINDINGS=1): $*"; exit 1; fi
  echo "$_lm_name: not checked: $*"
  _lm_deferred+=("$*")
}
lm_defer_skip_build() {
  echo "$_lm_name: not checked: $*"
  _lm_deferred+=("$*")
}
lm_finish() {
  if [ ${#_lm_deferred[@]} -gt 0 ]; then
    local IFS=';'
    echo "$_lm_name: the other checks passed: $*"
    lm_skip "${_lm_deferred[*]}"
  fi
  echo "$*"
  exit 0
}
