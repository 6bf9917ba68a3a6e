#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Plots bench/results/scalapack*.jsonl (bench_scalapack): per (np, size) a panel of grouped bars,
the median time of each implementation for each case (the median over the runs in the file of
the per-run medians), with pdgemr2d's time over localmap's written above localmap's bar. Uses
matplotlib (from PyPI); the library and its tests never do.
Usage: bench/plot_scalapack.py RESULTS.jsonl OUT.png"""
import json
import statistics
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

IMPLS = ["localmap", "localmap_oneshot", "pdgemr2d", "costa"]
CASES = ["bc_to_rows", "rows_to_bc", "bc64_to_bc48"]


def main(src, out):
    t = defaultdict(list)
    for line in open(src):
        if line.strip().startswith("{"):
            r = json.loads(line)
            if r.get("block", 64) == 64:  # the blocks of 64 (the small-block runs are a table)
                t[(r["np"], r["size"], r["case"], r["impl"])].append(r["median_ms"])
    panels = sorted({(k[0], k[1]) for k in t}, key=lambda p: (p[0], p[1] != "1MiB"))
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 4), squeeze=False)
    for ax, (np_, size) in zip(axes[0], panels):
        width = 0.2
        for i, impl in enumerate(IMPLS):
            xs, ys = [], []
            for j, case in enumerate(CASES):
                v = t.get((np_, size, case, impl))
                if v:
                    xs.append(j + (i - 1.5) * width)
                    ys.append(statistics.median(v))
            if xs:
                ax.bar(xs, ys, width, label=impl)
        for j, case in enumerate(CASES):
            lm, pd = t.get((np_, size, case, "localmap")), t.get((np_, size, case, "pdgemr2d"))
            if lm and pd:
                y = statistics.median(lm)
                ax.text(j - 1.5 * width, y, f"{statistics.median(pd) / y:.1f}x", ha="center",
                        va="bottom", fontsize=7)
        ax.set_xticks(range(len(CASES)))
        ax.set_xticklabels(CASES, fontsize=7)
        ax.set_ylabel("ms (median, max over ranks)")
        ax.set_title(f"{size} f64, np {np_}")
        ax.legend(fontsize=7)
    fig.suptitle("block-cyclic redistribution: localmap vs ScaLAPACK pdgemr2d vs COSTA "
                 "(labels: pdgemr2d / localmap)", fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print("wrote", out, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
