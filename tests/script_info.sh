#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# lm-info (tools/lm-info.cpp): the text report names the library, MPI, CUDA, each node's paths and
# every setting with its source; --json is valid JSON with the same facts, per rank under a
# launcher; a setting from the environment says so; a switched-off path says why.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
info=$BUILD/bin/lm-info
py=$(command -v python3 || true)
[ -n "$py" ] || { echo "script_info: python3 is needed to read the JSON"; exit 1; }
fail() { echo "FAILED: $*"; exit 1; }

out=$("$info")
for want in "localmap " "MPI: built with" "CUDA" "job: 1 rank(s) on 1 node(s)" "node-local path:" \
            "agreement board:" "device data:" "LM_STAGING_BYTES" "LM_FAULT" "(default)"; do
  grep -qF -- "$want" <<<"$out" || fail "lm-info text lacks '$want'"
done

json=$(LM_STAGING_BYTES=1M bash tools/lm-mpirun 2 "$info" --json)
"$py" - "$json" <<'PY' || fail "lm-info --json at np 2"
import json, sys
d = json.loads(sys.argv[1])
assert d["ranks"] == 2 and d["nodes"] == 1, d
assert [r["rank"] for r in d["per_rank"]] == [0, 1]
assert all(r["node_ranks"] == 2 for r in d["per_rank"])
s = {x["name"]: x for x in d["settings"]}
assert s["LM_STAGING_BYTES"]["value"] == "1048576" and s["LM_STAGING_BYTES"]["source"] == "environment", s["LM_STAGING_BYTES"]
assert s["LM_CHECK"]["source"] == "default" and s["LM_NODE_LOCAL"]["must_agree"] and not s["LM_CHECK"]["must_agree"]
assert s["LM_FAULT"]["audience"] == "test"
PY

json=$(LM_AGREE_BOARD=0 bash tools/lm-mpirun 2 "$info" --json)
"$py" - "$json" <<'PY' || fail "lm-info --json with LM_AGREE_BOARD=0"
import json, sys
d = json.loads(sys.argv[1])
assert all(not r["board"] and "LM_AGREE_BOARD=0" in r["board_why"] for r in d["per_rank"]), d["per_rank"]
PY
# Kernel copies refused (a seccomp filter, tests/deny_cma): the path stays on through mapped arenas.
json=$(bash tools/lm-mpirun 2 "$BUILD/tests/deny_cma" "$info" --json)
"$py" - "$json" <<'PY' || fail "lm-info --json under deny_cma"
import json, sys
d = json.loads(sys.argv[1])
assert all(r["node_local"] and not r["node_kernel"] and r["node_mapped"] and "mapped arenas only" in r["node_local_why"]
           for r in d["per_rank"]), d["per_rank"]
PY
# Simulated nodes: the ranks are grouped as the library groups them.
json=$(LM_TEST_NODES=2 bash tools/lm-mpirun 3 "$info" --json)
"$py" - "$json" <<'PY' || fail "lm-info --json with LM_TEST_NODES=2"
import json, sys
d = json.loads(sys.argv[1])
assert d["nodes"] == 2, d
assert [r["node_ranks"] for r in d["per_rank"]] == [2, 1, 2], d["per_rank"]
assert all(not r["board"] and "spans nodes" in r["board_why"] for r in d["per_rank"]), d["per_rank"]
PY
"$info" --bogus >/dev/null 2>&1 && fail "lm-info accepted --bogus"
echo "lm-info: text and JSON OK"
