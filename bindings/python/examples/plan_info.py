# SPDX-License-Identifier: BSD-3-Clause
"""Reshard plans: what one moves (ReshardPlan.info) and its adjoint, the backward plan
(ReshardPlan.adjoint), for a 10 x 3 float64 tensor on a 1-D mesh of all ranks:

    all-gather      S(0) -> R        adjoint: R -> S(0), a slice (nothing moves)
    reduce-scatter  P(sum) -> S(0)   adjoint: S(0) -> R, an all-gather

    tools/lm-mpirun 4 python3 bindings/python/examples/plan_info.py   (np 2 and 4 in make check)

For each plan every rank prints its own bytes, steps and routes (info()); rank 0 prints every
rank's sum (info(all_ranks=True), collective). Checked: the sum equals the per-rank counts summed
with mpi4py, and both equal the bytes computed here from torch.chunk's blocks (rank r holds c_r
rows of 24 bytes; an all-gather sends them to each of the np - 1 others and receives the N - c_r
rows it lacks, a reduce-scatter the converse; summed over the ranks both are (np - 1) N rows).
The adjoint must go the other way (its target placements are the adjoint of the forward
source's), and both plans run, every element checked against the formulas that filled the data.
Prints PASS or FAIL per rank and exits nonzero on a mismatch.
"""
import sys

from mpi4py import MPI  # first: mpi4py initialises MPI, localmap uses it

import numpy as np

import localmap as lm

N, M = 10, 3
ROW_BYTES = M * 8  # float64


def chunk(n, parts, i):
    """Rows [lo, hi) of block i of `parts` of n rows, as torch.chunk splits them."""
    b = -(-n // parts)
    return min(n, i * b), min(n, (i + 1) * b)


def show(comm, what, plan, sent, received, total):
    """Prints the plan's info and returns the number of failed checks."""
    me, every = plan.info(), plan.info(all_ranks=True)
    summed = comm.allreduce(np.array([me["bytes_sent"], me["bytes_received"]]))
    print(f"rank {comm.rank}: {what}: sends {me['bytes_sent']} B, receives {me['bytes_received']} B,"
          f" {me['steps']} step(s), routes {'+'.join(sorted(me['routes'])) or 'none'}", flush=True)
    if comm.rank == 0:
        print(f"  all ranks: {every['bytes_sent']} B sent, {every['bytes_received']} B received",
              flush=True)
    checks = [me["bytes_sent"] == sent, me["bytes_received"] == received,
              every["bytes_sent"] == summed[0] == total, every["bytes_received"] == summed[1] == total]
    if not all(checks):
        print(f"rank {comm.rank}: {what}: expected {sent} B sent, {received} B received, "
              f"{total} B over all ranks (summed: {summed.tolist()})", flush=True)
    return checks.count(False)


def wrong(t, rows, full):
    """Failed checks of t's shard: it must hold rows [lo, hi) of full."""
    lo, hi = rows
    a = t.local()
    return int(t.local_offset[0] != lo or a.shape != (hi - lo, M) or not np.array_equal(a, full[lo:hi]))


def main():
    comm = MPI.COMM_WORLD
    rank, p = comm.rank, comm.size
    mesh = lm.Mesh([p], comm=comm)
    i, j = np.arange(N)[:, None], np.arange(M)[None, :]
    x = (10.0 * i + j) * np.ones((N, M))  # the forward value
    g = (i - 2.0 * j + 0.5) * np.ones((N, M))  # the gradient
    mine = chunk(N, p, rank)
    c = mine[1] - mine[0]  # this rank's rows under S(0)
    total = (p - 1) * N * ROW_BYTES
    cases = [("all-gather", lm.Shard(0), lm.Replicate(), (p - 1) * c, N - c),
             ("reduce-scatter", lm.Partial("sum"), lm.Shard(0), N - c, (p - 1) * c)]
    bad = 0
    for what, src, dst, sent_rows, recv_rows in cases:
        plan = lm.ReshardPlan(mesh, [src], mesh, [dst], (N, M), np.float64)
        name = f"{what} {lm.format_placements([src])} -> {lm.format_placements([dst])}"
        bad += show(comm, name, plan, sent_rows * ROW_BYTES, recv_rows * ROW_BYTES, total)
        # Forward: from_global puts the full value in the source layout (a Partial source: rank 0
        # holds it, the others zeros), so the target holds rows of x.
        y = plan.execute(lm.from_global(x, mesh, [src]))
        bad += wrong(y, (0, N) if dst == lm.Replicate() else mine, x)

        # Backward: gradients laid out as the adjoint of dst, to the adjoint of src.
        adj = plan.adjoint()
        gsrc, gdst = lm.placements_adjoint([dst]), lm.placements_adjoint([src])
        dx = adj.alloc_target()
        if list(dx.placements) != list(gdst):
            print(f"rank {rank}: adjoint of {what}: target {dx.placements}, expected {gdst}")
            bad += 1
        gathers = gdst[0] == lm.Replicate()  # else a slice: each rank keeps its rows
        name = f"  adjoint {lm.format_placements(gsrc)} -> {lm.format_placements(gdst)}"
        bad += show(comm, name, adj, (p - 1) * c * ROW_BYTES if gathers else 0,
                    (N - c) * ROW_BYTES if gathers else 0, total if gathers else 0)
        adj.execute(lm.from_global(g, mesh, gsrc), dx)
        bad += wrong(dx, (0, N) if gathers else mine, g)
        for h in (dx, adj, y, plan):
            h.close()
    print(f"rank {rank}: plan info and adjoints: {'FAIL' if bad else 'PASS'}", flush=True)
    mesh.close()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
