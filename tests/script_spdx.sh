#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# make check: LICENSE is there and every source, header, script and build file has its SPDX line.
set -eu
cd "$(dirname "$0")/.."
grep -q 'BSD 3-Clause License' LICENSE
grep -q 'The localmap authors' LICENSE
sh tools/check-spdx.sh
echo "spdx: every file carries SPDX-License-Identifier: BSD-3-Clause"
