#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Medians of an interleaved before/after run (bench/ab.sh): per case and np, the library's time
and its ratio to the MPI baseline of the same run, before and after (bench_reshard's lm_ms and
ratio; bench_group's group_ms and group_over_mpi)."""
import json
import statistics
import sys


def main(path):
    rows = {}
    for line in open(path):
        try:
            d = json.loads(line)
        except ValueError:
            continue
        if "lm_ms" in d:  # bench_reshard and the like: the library's time, its ratio to MPI
            t, ratio, case = d["lm_ms"], d.get("ratio", 0.0), d["case"]
        elif "group_ms" in d:  # bench_group: the grouped execution against one MPI collective
            t, ratio, case = d["group_ms"], d["group_over_mpi"], f'{d["mix"]} {d["case"]}'
        else:
            continue
        key = (case, d["np"])
        rows.setdefault(key, {}).setdefault(d["lib"], []).append((t, ratio))
    print(f"{'case':34} {'np':>2} {'before ms':>10} {'after ms':>10} {'after/before':>12} "
          f"{'ratio before':>12} {'ratio after':>11}")
    for (case, np), libs in sorted(rows.items()):
        if "before" not in libs or "after" not in libs:
            continue
        b = statistics.median(x[0] for x in libs["before"])
        a = statistics.median(x[0] for x in libs["after"])
        rb = statistics.median(x[1] for x in libs["before"])
        ra = statistics.median(x[1] for x in libs["after"])
        print(f"{case:34} {np:>2} {b:10.4f} {a:10.4f} {a / b if b else 0:12.2f} {rb:12.2f} {ra:11.2f}")


if __name__ == "__main__":
    main(sys.argv[1])
