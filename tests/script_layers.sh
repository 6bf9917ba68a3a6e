#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Layers only point down (docs/DESIGN.md, "Layers"): tools/check-layers.py fails on an include of
# src/ that points up or across, on MPI/CUDA/NCCL headers reached by the planner or the layout
# math, and on a transport type, a node-local internal or an include of transport/mpi/, nccl/ or
# node/ outside src/transport/ (the rest of the library goes through transport/select.hpp).
# Includes count however they are spelled ("mesh/mesh.hpp", "../mesh/mesh.hpp", "./x.hpp",
# <mesh/mesh.hpp>): first the checker's self-test, a small tree with a violation written each way,
# must find exactly its violations, so that a checker which stops resolving one spelling fails here.
set -euo pipefail
cd "$(dirname "$0")/.."
py=$(command -v python3 || true)
[ -n "$py" ] || { echo "script_layers: python3 is needed"; exit 1; }
"$py" tools/check-layers.py --self-test
"$py" tools/check-layers.py src
