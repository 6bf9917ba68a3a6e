#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Plots bench/results/reshard.jsonl: time per byte against size for the sweep cases
(localmap plan execution with and without the node-local path, the MPI collective moving the
same bytes, and the memcpy floor of the target bytes), one panel per rank count. Uses matplotlib (from PyPI); the library and its tests never do.
Usage: bench/plot.py RESULTS.jsonl OUT.png"""
import json
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(src, out):
    rows = [json.loads(l) for l in open(src) if l.strip().startswith("{")]
    sweep = [r for r in rows if r.get("case", "").startswith("sweep:")]
    nps = sorted({r["np"] for r in sweep})
    if not nps:
        print("plot: no sweep cases in", src, file=sys.stderr)
        return 1
    fig, axes = plt.subplots(1, len(nps), figsize=(6 * len(nps), 4.5), squeeze=False)
    for ax, np_ in zip(axes[0], nps):
        series = defaultdict(list)
        for r in sweep:
            if r["np"] != np_:
                continue
            kind = r["case"].split(":")[1]
            b = r["bytes"]
            if not r.get("node_local", True):  # the same sweep with LM_NODE_LOCAL=0
                series[(kind, "localmap, node-local off")].append((b, r["lm_ms"] * 1e6 / b))
                continue
            series[(kind, "localmap")].append((b, r["lm_ms"] * 1e6 / b))
            series[(kind, r["baseline"])].append((b, r["baseline_ms"] * 1e6 / b))
            if r.get("target_floor_ms", 0) > 0:
                series[(kind, "memcpy floor (target bytes)")].append((b, r["target_floor_ms"] * 1e6 / b))
        style = {"localmap": "-o", "localmap, node-local off": "-.x",
                 "memcpy floor (target bytes)": ":", "MPI_Alltoall": "--s", "MPI_Allgather": "--s"}
        for (kind, who), pts in sorted(series.items()):
            if kind == "S1->S0" and who != "localmap":
                continue  # same baseline/floor bytes as S0->S1
            pts.sort()
            ax.plot([p[0] for p in pts], [p[1] for p in pts], style.get(who, "-"),
                    label=f"{kind} {who}", markersize=3)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("tensor bytes (float64, n x n)")
        ax.set_ylabel("ns per tensor byte")
        ax.set_title(f"reshard time per byte, np {np_} (max over ranks, median)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print("wrote", out, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
