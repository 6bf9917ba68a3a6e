# SPDX-License-Identifier: BSD-3-Clause
"""Block-cyclic placements (BlockCyclic): a ScaLAPACK-style local array borrowed from numpy,
gathered, resharded to row shards and back, placements read back, bad arguments."""
import numpy as np
import pytest
from mpi4py import MPI

import localmap as lm

COMM = MPI.COMM_WORLD


def my_rows(n, block, src):
    """The global rows this rank holds under BlockCyclic(0, block, src), in local order
    (ScaLAPACK's INDXL2G, written from the definition: block k goes to (k + src) mod P)."""
    return [i for k in range(-(-n // block)) if (k + src) % COMM.size == COMM.rank
            for i in range(k * block, min((k + 1) * block, n))]


def test_borrow_gather_reshard(mesh1):
    n, block, src = 11, 2, COMM.size - 1
    full = np.arange(n * 3, dtype=np.float64).reshape(n, 3)
    rows = my_rows(n, block, src)
    mine = full[rows].copy()
    bc = lm.BlockCyclic(0, block, src=src)
    for kw in ({"global_shape": (n, 3)}, {"shape_mode": "allgather"}):
        with lm.from_local(mine, mesh1, [bc], **kw) as t:
            assert t.shape == (n, 3)
            assert t.local_shape == (len(rows), 3)
            assert mine.size == 0 or np.shares_memory(t.local(), mine)  # borrowed, not copied
            assert t.placements == (bc,)
            np.testing.assert_array_equal(t.gather(), full)
            with t.reshard([lm.Shard(0)]) as s, s.reshard([bc]) as back:
                np.testing.assert_array_equal(s.gather(), full)
                np.testing.assert_array_equal(back.local(), mine)


def test_repr_and_refusals(mesh1):
    assert repr(lm.BlockCyclic(0, 3)) == "BlockCyclic(0, 3)"
    assert repr(lm.BlockCyclic(1, 2, src=1)) == "BlockCyclic(1, 2, src=1)"
    with pytest.raises(lm.InvalidArgumentError, match="block size"):
        lm.zeros(mesh1, (5,), np.float32, [lm.BlockCyclic(0, 0)])
    with pytest.raises(lm.InvalidArgumentError, match="source coordinate"):
        lm.zeros(mesh1, (5,), np.float32, [lm.BlockCyclic(0, 2, src=COMM.size)])
