# SPDX-License-Identifier: BSD-3-Clause
"""The binding checks every list of placements against the mesh's ndim before calling C (issue
19): `[]` on a 1-D mesh silently became Replicate, three placements were cut to one, and one
placement on a 2-D mesh was read past the end of its ctypes array. Global shapes given to
from_local and out_shapes of local_map are checked against the tensors' ndim likewise."""
import numpy as np
import pytest
from mpi4py import MPI

import localmap as lm

COMM = MPI.COMM_WORLD
S0, R = lm.Shard(0), lm.Replicate()


def refused(what, n, ndim):
    return pytest.raises(lm.InvalidArgumentError,
                         match=rf"{what}: {n} placements for a mesh of {ndim} dims")


def test_from_global_counts(mesh1, mesh2):
    full = np.arange(48.0).reshape(8, 6)
    with refused("placements", 0, 1):
        lm.from_global(full, mesh1, [])
    with refused("placements", 3, 1):
        lm.from_global(full, mesh1, [S0, R, R])
    with refused("placements", 1, 2):
        lm.from_global(full, mesh2, [S0])
    with refused("placements", 1, 2):
        lm.from_global(full, mesh2, S0)  # a single placement is a list of one
    with lm.from_global(full, mesh1, S0) as t:  # ... which is right on a 1-D mesh
        np.testing.assert_array_equal(t.gather(), full)


def test_zeros_from_local_counts(mesh1, mesh2):
    with refused("placements", 1, 2):
        lm.zeros(mesh2, (4, 4), np.float32, [R])
    with refused("placements", 2, 1):
        lm.from_local(np.zeros((2, 3)), mesh1, [S0, R])
    with refused("placements", 0, 1):
        lm.from_local(np.zeros((2, 3)), mesh1, [], copy=True)
    with pytest.raises(lm.InvalidArgumentError, match=r"global_shape: 1 extents for a local "
                                                      r"tensor of 2 dims"):
        lm.from_local(np.zeros((2, 3)), mesh1, [R], global_shape=[2])


def test_reshard_and_plan_counts(mesh1, mesh2):
    full = np.arange(12.0).reshape(4, 3)
    with lm.from_global(full, mesh1, [S0]) as t:
        with refused("placements", 0, 1):
            t.reshard([])
        with refused("placements", 1, 2):
            t.reshard([R], mesh=mesh2)
        with t.reshard([R, R], mesh=mesh2) as r:  # the right count works
            np.testing.assert_array_equal(r.local(), full)
    with lm.from_global(full, mesh2, [S0, R]) as t2:  # on the 2-D mesh, one placement too few
        with refused("placements", 1, 2):
            t2.reshard([R])
        with refused("placements", 1, 2):
            t2.reshard((R,))  # a tuple is checked the same way
        with refused("placements", 1, 2):
            t2.transpose((1, 0), [R])
        with refused("placements_list\\[1\\]", 1, 2):
            lm.reshard_many([t2, t2], [[R, R], [R]])
        with refused("entries\\[0\\]\\.dst_placements", 1, 2):
            lm.ReshardGroup(mesh2, [((4, 3), np.float64, [S0, R], [R])])
        with refused("dst_placements", 1, 2):
            lm.reshard_estimate(mesh2, [S0, R], [R], (4, 3), np.float64)
    with pytest.raises(lm.InvalidArgumentError, match=r"rank_at: coord: 1 entries for a mesh of 2 dims"):
        mesh2.rank_at([0])
    with refused("dst_placements", 3, 2):
        lm.ReshardPlan(mesh1, [S0], mesh2, [R, R, R], (4, 3), np.float64)
    with refused("src_placements", 2, 1):
        lm.ReshardPlan(mesh1, [S0, R], mesh1, [R], (4, 3), np.float64)


def test_local_map_counts(mesh1, mesh2):
    full = np.arange(12.0).reshape(4, 3)
    with lm.from_global(full, mesh1, [S0]) as t:
        with refused("out_placements\\[0\\]", 2, 1):
            lm.local_map(lambda x: x, out_placements=[S0, R])(t)
        with refused("in_placements\\[0\\]", 0, 1):
            lm.local_map(lambda x: x, out_placements=[S0], in_placements=[[]])(t)
        with refused("out_placements\\[0\\]", 1, 2):
            lm.local_map(lambda v: np.zeros(1), out_placements=[R], mesh=mesh2)(1)
        # out_shapes: one extent per dim of the output fn returns.
        with pytest.raises(lm.UserError, match=r"output 0 has 2 dims but out_shapes\[0\] has 1"):
            lm.local_map(lambda x: x.copy(), out_placements=[S0], out_shapes=[[4]])(t)
        y = lm.local_map(lambda x: x.copy(), out_placements=[S0], out_shapes=[[4, 3]])(t)
        with y:
            np.testing.assert_array_equal(y.gather(), full)
