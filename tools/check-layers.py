#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Layers only point down: checks the include graph of src/ (docs/DESIGN.md, "Layers").

Every source file belongs to a layer (its folder; the files of src/transport/ are the transport
base, except select.*, which sits above the three transports). A file may include headers of its
own layer and of layers below it, never of a layer above it or of a sibling at the same level.
Also checked:
  - the planner and the layout math (src/plan, src/layout) and common/ reach no <mpi.h>, CUDA or
    NCCL header, directly or through the project's headers (common/mpi.hpp is the one exception
    in common/, and nothing in layout/ or plan/ may include it);
  - no transport type (MpiTransport, NcclTransport, BoardExchange, NcclComm), no node-local
    internal (takes_node_local, the Region copies, cma/mapped copies, the board exchange's
    factory), no dynamic_cast to a transport and no include of a transport's own folder
    (transport/mpi/, transport/nccl/, transport/node/) appears outside src/transport/: the rest
    of the library reaches them through transport/select.hpp only.
Prints each violation as "file:line: message" and exits 1 when there is one.
Usage: tools/check-layers.py [--graph] [SRC_DIR]   (default: src next to this script)
  --graph: print, top layer first, the layers each layer's files include (the picture of
           docs/DESIGN.md, "Layers"), then check as usual.
"""
import os
import re
import sys

# Bottom to top. Units on one level are siblings: they may not include each other.
LEVELS = [
    ["common"],
    ["layout"],
    ["plan"],
    ["mem"],
    ["comm"],
    ["transport"],                       # the seam: transport.hpp, failure.*
    ["transport/node"],                  # the node-local provider
    ["transport/mpi", "transport/nccl"],  # the transports (siblings)
    ["transport/select"],                # the one place that chooses
    ["mesh"],
    ["exec"],
    ["tensor"],
    ["localmap"],
    ["capi"],
]
LEVEL = {u: i for i, units in enumerate(LEVELS) for u in units}
PURE = ("layout", "plan")                # no MPI, no CUDA, no NCCL, even transitively
SYSTEM_FORBIDDEN = re.compile(r"^(mpi\.h|cuda[a-z_]*\.h|nccl\.h|driver_types\.h)$")
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')
TRANSPORT_TYPES = re.compile(
    r"\b(MpiTransport|NcclTransport|BoardExchange|NcclComm|takes_node_local|board_exchange_for|"
    r"cma_copy|mapped_copy|receiver_copy|sender_push|region_describe|region_runs|region_in_arena)\b"
    r"|dynamic_cast\s*<[^>]*Transport"
    r"|^\s*#\s*include\s*[<\"]transport/(mpi|nccl|node)/")


def unit_of(rel):
    """The layer unit of a path relative to src/ (None for files at the top, e.g. localmap.map)."""
    parts = rel.split("/")
    if len(parts) < 2:
        return None
    if parts[0] == "transport":
        if len(parts) == 2:
            return "transport/select" if parts[1].startswith("select.") else "transport"
        return "transport/" + parts[1]
    return parts[0]


def main():
    args = [a for a in sys.argv[1:] if a != "--graph"]
    show_graph = len(args) != len(sys.argv) - 1
    src = args[0] if args else os.path.join(os.path.dirname(__file__), "..", "src")
    src = os.path.normpath(src)
    files = {}
    for root, _, names in os.walk(src):
        for n in sorted(names):
            if n.endswith((".hpp", ".h", ".cpp", ".cu")):
                rel = os.path.relpath(os.path.join(root, n), src)
                with open(os.path.join(root, n), errors="replace") as f:
                    files[rel] = f.read().splitlines()
    errors = []
    graph = {}  # project header closure
    for rel, lines in files.items():
        u = unit_of(rel)
        graph[rel] = []
        for no, line in enumerate(lines, 1):
            m = INCLUDE.match(line)
            if m:
                kind, target = m.groups()
                if kind == '"' and target in files:
                    graph[rel].append((no, target, "project"))
                    tu = unit_of(target)
                    if u is None or tu is None or u == tu:
                        continue
                    if u not in LEVEL or tu not in LEVEL:
                        errors.append(f"{src}/{rel}:{no}: unknown layer of {rel} or {target} "
                                      f"(add the folder to tools/check-layers.py and DESIGN.md)")
                    elif LEVEL[tu] > LEVEL[u]:
                        errors.append(f"{src}/{rel}:{no}: {u} includes {target} of the higher layer {tu}")
                    elif LEVEL[tu] == LEVEL[u]:
                        errors.append(f"{src}/{rel}:{no}: {u} includes {target} of its sibling {tu}")
                elif SYSTEM_FORBIDDEN.match(os.path.basename(target)):
                    graph[rel].append((no, target, "system"))
            if u is not None and not u.startswith("transport") and TRANSPORT_TYPES.search(line):
                errors.append(f"{src}/{rel}:{no}: a transport type or internal outside "
                              f"src/transport/ (reach it through transport/select.hpp): "
                              f"{line.strip()}")
    # Transitive: what system headers a file reaches through project headers.
    memo = {}

    def reach(f, stack=()):
        if f in memo:
            return memo[f]
        out = []
        for no, t, kind in graph.get(f, ()):
            if kind == "system":
                out.append(([f"{f}:{no}"], t))
            elif t not in stack:
                for path, sysh in reach(t, stack + (f,)):
                    out.append(([f"{f}:{no}"] + path, sysh))
        memo[f] = out
        return out

    for rel in files:
        u = unit_of(rel)
        pure = u in PURE or (u == "common" and rel != "common/mpi.hpp" and rel != "common/mpi.cpp"
                             and not rel.endswith(".cpp"))
        if not pure:
            continue
        for path, sysh in reach(rel):
            errors.append(f"{src}/{rel}: reaches <{sysh}> through " + " -> ".join(path) +
                          f" ({u} code must not see MPI, CUDA or NCCL)")
    if show_graph:
        uses = {}
        for rel, edges in graph.items():
            for _, t, kind in edges:
                u, tu = unit_of(rel), unit_of(t)
                if kind == "project" and u and tu and u != tu:
                    uses.setdefault(u, set()).add(tu)
        for units in reversed(LEVELS):
            for u in units:
                below = sorted(uses.get(u, ()), key=lambda x: (-LEVEL.get(x, -1), x))
                print(f"  {u:18} -> {', '.join(below) if below else '(nothing)'}")
    for e in errors:
        print(e)
    if errors:
        print(f"check-layers: {len(errors)} violation(s); the layer order is in tools/check-layers.py "
              f"and docs/DESIGN.md")
        return 1
    print(f"check-layers: {len(files)} files, layers only point down")
    return 0


if __name__ == "__main__":
    sys.exit(main())
