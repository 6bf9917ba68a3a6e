#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Layers only point down: checks the include graph of src/ (docs/DESIGN.md, "Layers").

Every source file belongs to a layer (its folder; the files of src/transport/ are the transport
base, except select.*, which sits above the three transports). A file may include headers of its
own layer and of layers below it, never of a layer above it or of a sibling at the same level.
Also checked:
  - src/device/ is the device component, a library of its own (liblocalmap-cuda.so): nothing else
    includes its files, it includes only its own, layout/, common/dtype.hpp and the interface
    mem/device_api.hpp (it links no core code), and no file outside it reaches a CUDA or NCCL
    header, directly or through the project's headers (the core never links CUDA or NCCL);
  - the planner and the layout math (src/plan, src/layout) and common/ reach no <mpi.h>, CUDA or
    NCCL header, directly or through the project's headers (common/mpi.hpp is the one exception
    in common/, and nothing in layout/ or plan/ may include it);
  - no transport type (MpiTransport, NcclTransport, BoardExchange, NcclComm), no node-local
    internal (takes_node_local, the Region copies, cma/mapped copies, the board exchange's
    factory), no dynamic_cast to a transport and no include of a transport's own folder
    (transport/mpi/, transport/nccl/, transport/node/) appears outside src/transport/: the rest
    of the library reaches them through transport/select.hpp only.
An include is resolved as the compiler (-Isrc) finds it: "x.hpp" first beside the including file
("./x.hpp", "../mesh/mesh.hpp", "layout.hpp"), then under src/ ("mesh/mesh.hpp"); <x.hpp> under
src/ only (<mesh/mesh.hpp>), and only when that file exists there, so <mpi.h>, <vector> stay
system headers. Every spelling of an include of src/ is checked the same way.
Prints each violation as "file:line: message" and exits 1 when there is one.
Usage: tools/check-layers.py [--graph] [SRC_DIR]   (default: src next to this script)
       tools/check-layers.py --self-test
  --graph: print, top layer first, the layers each layer's files include (the picture of
           docs/DESIGN.md, "Layers"), then check as usual.
  --self-test: check a small tree written to a temporary folder, with a violation written in each
           spelling of an include (quoted from src/, quoted relative, angle brackets), and fail
           unless exactly its violations are found (tests/script_layers.sh runs it first).
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
    ["device"],                          # the device component (its own library; see below)
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
# What the device component may include of src/ besides its own files.
DEVICE_MAY_INCLUDE = re.compile(r"^(layout/[^/]+|common/dtype\.hpp|mem/device_api\.hpp)$")
CUDA_HEADER = re.compile(r"^(cuda[a-z_]*\.h|nccl\.h|driver_types\.h)$")
TRANSPORT_TYPES = re.compile(
    r"\b(MpiTransport|NcclTransport|BoardExchange|NcclComm|takes_node_local|board_exchange_for|"
    r"cma_copy|mapped_copy|receiver_copy|sender_push|region_describe|region_runs|region_in_arena)\b"
    r"|dynamic_cast\s*<[^>]*Transport")


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


def resolve(rel, kind, target, files):
    """The file of src/ (a key of files) that `#include <target>` or "target" in src/rel reaches,
    or None for a header outside src/ (<mpi.h>, <vector>, "localmap.h" of include/)."""
    candidates = [target]
    if kind == '"':
        candidates.insert(0, os.path.join(os.path.dirname(rel), target))
    for c in candidates:
        c = os.path.normpath(c).replace(os.sep, "/")
        if not c.startswith("../") and c in files:
            return c
    return None


def read_tree(src):
    """{path relative to src: lines} of the C, C++ and CUDA files under src."""
    files = {}
    for root, _, names in os.walk(src):
        for n in sorted(names):
            if n.endswith((".hpp", ".h", ".cpp", ".cu")):
                rel = os.path.relpath(os.path.join(root, n), src)
                with open(os.path.join(root, n), errors="replace") as f:
                    files[rel] = f.read().splitlines()
    return files


def check(src, files):
    """(errors, graph) of the tree: errors as "file:line: message", graph the include edges."""
    errors = []
    graph = {}  # project header closure
    for rel, lines in files.items():
        u = unit_of(rel)
        graph[rel] = []
        for no, line in enumerate(lines, 1):
            m = INCLUDE.match(line)
            if m:
                kind, spelled = m.groups()
                target = resolve(rel, kind, spelled, files)
                if target is not None:
                    graph[rel].append((no, target, "project"))
                    if (u is not None and not u.startswith("transport")
                            and unit_of(target) in ("transport/mpi", "transport/nccl",
                                                    "transport/node")):
                        errors.append(f"{src}/{rel}:{no}: includes {target} of a transport's own "
                                      f"folder outside src/transport/ (reach it through "
                                      f"transport/select.hpp)")
                    tu = unit_of(target)
                    if u != "device" and tu == "device":
                        errors.append(f"{src}/{rel}:{no}: includes {target} of the device component "
                                      f"(its own library: the core reaches it through "
                                      f"mem/device_api.hpp)")
                        continue
                    if u == "device" and tu != "device" and not DEVICE_MAY_INCLUDE.match(target):
                        errors.append(f"{src}/{rel}:{no}: the device component includes {target} "
                                      f"(it links no core code: only layout/, common/dtype.hpp, "
                                      f"mem/device_api.hpp)")
                        continue
                    if u is None or tu is None or u == tu:
                        continue
                    if u not in LEVEL or tu not in LEVEL:
                        errors.append(f"{src}/{rel}:{no}: unknown layer of {rel} or {target} "
                                      f"(add the folder to tools/check-layers.py and DESIGN.md)")
                    elif LEVEL[tu] > LEVEL[u]:
                        errors.append(f"{src}/{rel}:{no}: {u} includes {target} of the higher layer {tu}")
                    elif LEVEL[tu] == LEVEL[u]:
                        errors.append(f"{src}/{rel}:{no}: {u} includes {target} of its sibling {tu}")
                elif SYSTEM_FORBIDDEN.match(os.path.basename(spelled)):
                    graph[rel].append((no, spelled, "system"))
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
        if u is not None and u != "device":
            for path, sysh in reach(rel):
                if CUDA_HEADER.match(os.path.basename(sysh)):
                    errors.append(f"{src}/{rel}: reaches <{sysh}> through " + " -> ".join(path) +
                                  " (only the device component, src/device/, sees CUDA or NCCL)")
        pure = u in PURE or (u == "common" and rel != "common/mpi.hpp" and rel != "common/mpi.cpp"
                             and not rel.endswith(".cpp"))
        if not pure:
            continue
        for path, sysh in reach(rel):
            errors.append(f"{src}/{rel}: reaches <{sysh}> through " + " -> ".join(path) +
                          f" ({u} code must not see MPI, CUDA or NCCL)")
    return errors, graph


def print_graph(graph):
    """Top layer first, the layers each layer's files include."""
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


# The self-test's tree: {path under src: text}, and the violations it must give, each as
# (file, line, words of the message). Every spelling of an include of src/ has a violation of its
# own, and the includes that must stay system headers (<mpi.h> in exec/, <vector>) have none.
SELF_TEST_TREE = {
    "common/mpi.hpp": "#include <mpi.h>\n",
    "common/error.hpp": "#include <vector>\n#include <string>\n",
    "common/dot.hpp": "#include \"./mpi.hpp\"\n",            # "./": reaches <mpi.h>
    "layout/layout.hpp": "#include \"common/error.hpp\"\n#include <common/error.hpp>\n"
                         "#include \"../common/error.hpp\"\n#include \"extents.hpp\"\n",
    "layout/extents.hpp": "#include <vector>\n",
    "layout/angle.cpp": "#include <vector>\n#include <mesh/mesh.hpp>\n",     # angle: up
    "layout/relative.cpp": "#include \"layout.hpp\"\n#include \"../mesh/mesh.hpp\"\n",  # ../: up
    "layout/quoted.cpp": "#include \"mesh/mesh.hpp\"\n",                 # from src/: up
    "plan/through.hpp": "#include \"./../common/dot.hpp\"\n",         # down, but reaches <mpi.h>
    "transport/mpi/mpi.hpp": "#include <mpi.h>\n#include \"../transport.hpp\"\n",
    "transport/transport.hpp": "#include <common/error.hpp>\n",
    "mesh/mesh.hpp": "#include <mpi.h>\n#include \"../transport/transport.hpp\"\n",
    "mesh/sibling.cpp": "#include <exec/plan.hpp>\n",                   # angle: up
    "exec/plan.hpp": "#include <mpi.h>\n#include <vector>\n#include <mesh/mesh.hpp>\n",
    "exec/run.cpp": "#include \"../transport/mpi/mpi.hpp\"\n",          # a transport's folder
    "exec/angle_run.cpp": "#include <transport/mpi/mpi.hpp>\n",          # the same, angle
    "mem/device_api.hpp": "#include <stdint.h>\n",
    "device/kernels.cu": "#include <cuda_runtime.h>\n#include \"mem/device_api.hpp\"\n"
                         "#include \"../exec/plan.hpp\"\n",            # core code in the component
    "mem/gpu.cpp": "#include \"../device/kernels.cu\"\n",           # the component from the core
    "mem/nccl_use.cpp": "#include <nccl.h>\n",                        # NCCL in the core
}
SELF_TEST_EXPECT = [
    ("common/dot.hpp", None, "reaches <mpi.h> through common/dot.hpp:1 -> common/mpi.hpp:1"),
    ("layout/angle.cpp", 2, "layout includes mesh/mesh.hpp of the higher layer mesh"),
    ("layout/relative.cpp", 2, "layout includes mesh/mesh.hpp of the higher layer mesh"),
    ("layout/quoted.cpp", 1, "layout includes mesh/mesh.hpp of the higher layer mesh"),
    ("layout/angle.cpp", None, "reaches <mpi.h> through layout/angle.cpp:2 -> mesh/mesh.hpp:1"),
    ("layout/relative.cpp", None, "reaches <mpi.h> through layout/relative.cpp:2 -> mesh/mesh.hpp:1"),
    ("layout/quoted.cpp", None, "reaches <mpi.h> through layout/quoted.cpp:1 -> mesh/mesh.hpp:1"),
    ("plan/through.hpp", None, "reaches <mpi.h> through plan/through.hpp:1 -> common/dot.hpp:1 -> "
                               "common/mpi.hpp:1"),
    ("mesh/sibling.cpp", 1, "mesh includes exec/plan.hpp of the higher layer exec"),
    ("exec/run.cpp", 1, "includes transport/mpi/mpi.hpp of a transport's own folder"),
    ("exec/angle_run.cpp", 1, "includes transport/mpi/mpi.hpp of a transport's own folder"),
    ("device/kernels.cu", 3, "the device component includes exec/plan.hpp"),
    ("mem/gpu.cpp", 1, "includes device/kernels.cu of the device component"),
    ("mem/gpu.cpp", None, "reaches <cuda_runtime.h> through mem/gpu.cpp:1 -> device/kernels.cu:1"),
    ("mem/nccl_use.cpp", None, "reaches <nccl.h> through mem/nccl_use.cpp:1"),
]


def self_test():
    """Checks SELF_TEST_TREE in a temporary folder: exactly SELF_TEST_EXPECT, nothing else."""
    import tempfile
    with tempfile.TemporaryDirectory(prefix="check-layers.") as tmp:
        src = os.path.join(tmp, "src")
        for rel, text in SELF_TEST_TREE.items():
            os.makedirs(os.path.dirname(os.path.join(src, rel)), exist_ok=True)
            with open(os.path.join(src, rel), "w") as f:
                f.write(text)
        errors, _ = check(src, read_tree(src))
        errors = [e[len(src) + 1:] for e in errors]
    missed, found = [], list(errors)
    for rel, line, words in SELF_TEST_EXPECT:
        where = f"{rel}:{line}: " if line else f"{rel}: "
        hit = next((e for e in found if e.startswith(where) and words in e), None)
        if hit is None:
            missed.append(f"{where}... {words}")
        else:
            found.remove(hit)
    for m in missed:
        print(f"check-layers --self-test: not found: {m}")
    for e in found:
        print(f"check-layers --self-test: not expected: {e}")
    if missed or found:
        print(f"check-layers --self-test: FAILED ({len(missed)} violation(s) missed, "
              f"{len(found)} unexpected; {len(errors)} found)")
        return 1
    print(f"check-layers --self-test: the {len(SELF_TEST_EXPECT)} violations of "
          f"{len(SELF_TEST_TREE)} files found (quoted, relative and angle-bracket includes)")
    return 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    args = [a for a in sys.argv[1:] if a != "--graph"]
    show_graph = len(args) != len(sys.argv) - 1
    src = args[0] if args else os.path.join(os.path.dirname(__file__), "..", "src")
    src = os.path.normpath(src)
    files = read_tree(src)
    errors, graph = check(src, files)
    if show_graph:
        print_graph(graph)
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
