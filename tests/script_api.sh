#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The API conventions (docs/API.md) that a script can see: tools/check-api.py catches one violation
# of each rule in its self-test, then checks include/localmap.h against them, every departure
# listed in tools/api-departures.txt (a new one, or a listed one that is gone, fails). Then the
# one description of the API (api/localmap.api): the header matches it declaration by
# declaration, and the binding files generated from it are current (tools/api.py check).
set -euo pipefail
cd "$(dirname "$0")/.."
py=$(command -v python3 || true)
[ -n "$py" ] || { echo "script_api: python3 is needed"; exit 1; }
"$py" tools/check-api.py --self-test
"$py" tools/check-api.py
"$py" tools/api.py check
