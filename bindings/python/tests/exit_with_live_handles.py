# SPDX-License-Identifier: BSD-3-Clause
"""Run by tests/script_python.sh under mpirun: leaves meshes, tensors, shard views, capsules, a
plan, a group and finished requests alive in globals at interpreter exit, so that their
finalisers run after MPI_Finalize (localmap's atexit when it initialised MPI, mpi4py's with
--mpi4py). Must exit 0 without a crash, a hang or an error message."""
import sys

if "--mpi4py" in sys.argv:
    from mpi4py import MPI  # noqa: F401  (initialises MPI first, finalises it at exit)

import numpy as np

import localmap as lm

rank, size = lm.world_rank()
mesh = lm.Mesh([size], dim_names=["x"])
sub = lm.Mesh([1], ranks=[0])
t = lm.from_local(np.arange(4.0) + rank, mesh, [lm.Shard(0)])
view = t.local()
capsule = t.__dlpack__()
capsule_v1 = t.__dlpack__(max_version=(1, 0))
r = t.reshard([lm.Replicate()])
plan = lm.ReshardPlan(mesh, [lm.Shard(0)], mesh, [lm.Replicate()], t.shape, np.float64)
req = plan.start(t)
req.wait()
group = lm.ReshardGroup(mesh, [(t.shape, np.float64, [lm.Shard(0)], [lm.Replicate()])])
group_req = group.start([t])
group_req.wait()
y = lm.local_map(lambda s: s * 2, [lm.Shard(0)])(t)
cycle = [t, mesh]
cycle.append(cycle)  # only the cycle collector (or nothing) frees these
assert r.gather().shape == (4 * size,)
print(f"rank {rank}: leaving {len([mesh, sub, t, r, plan, group, y])} handles alive at exit")
