# SPDX-License-Identifier: BSD-3-Clause
"""Ragged shards (RaggedShard): PETSc-style ownership borrowed from numpy, reshards to and from
torch.chunk shards, Partial reduced into ragged blocks, placements read back, bad extents."""
import numpy as np
import pytest
from mpi4py import MPI

import localmap as lm

COMM = MPI.COMM_WORLD


def rows_of(r):
    return 0 if r == 1 else 2 * r + 1


def ownership():
    rows = [rows_of(r) for r in range(COMM.size)]
    return rows, sum(rows[:COMM.rank]), sum(rows)


def test_borrow_gather_reshard(mesh1):
    rows, r0, total = ownership()
    full = np.arange(total * 3, dtype=np.float64).reshape(total, 3)
    mine = full[r0:r0 + rows[COMM.rank]].copy()
    rs = lm.RaggedShard(0, rows)
    with lm.from_local(mine, mesh1, [rs], shape_mode="even") as t:
        assert t.shape == (total, 3)
        assert t.local_offset == (r0, 0)
        assert mine.size == 0 or np.shares_memory(t.local(), mine)  # borrowed, not copied
        assert t.placements == (rs,)
        assert t.placements[0].extents == tuple(rows)
        np.testing.assert_array_equal(t.gather(), full)
        with t.reshard([lm.Shard(0)]) as s, s.reshard([lm.RaggedShard(0, rows)]) as back:
            np.testing.assert_array_equal(s.gather(), full)
            np.testing.assert_array_equal(back.local(), mine)


def test_partial_into_ragged(mesh1):
    rows, r0, total = ownership()
    part = np.full((total, 2), float(COMM.rank + 1))
    with lm.from_local(part, mesh1, [lm.Partial("sum")], shape_mode="even") as p, \
            p.reshard([lm.RaggedShard(0, rows)]) as r:
        assert r.local_shape == (rows[COMM.rank], 2)
        np.testing.assert_array_equal(r.local(), COMM.size * (COMM.size + 1) / 2)


def test_agreed_extents(mesh1):
    """RaggedShard(d) without extents: the ranks' local shapes give them (from_local with
    "allgather", local_map outputs); the tensors read back with the agreed extents."""
    rows, r0, total = ownership()
    full = np.arange(total * 3, dtype=np.float64).reshape(total, 3)
    mine = full[r0:r0 + rows[COMM.rank]].copy()
    with lm.from_local(mine, mesh1, [lm.RaggedShard(0)]) as t:
        assert t.shape == (total, 3) and t.local_offset == (r0, 0)
        assert t.placements == (lm.RaggedShard(0, rows),)
        np.testing.assert_array_equal(t.gather(), full)
        with lm.local_map(lambda x: x * 2, [lm.RaggedShard(0)])(t) as y:
            assert y.placements[0].extents == tuple(rows)
            np.testing.assert_array_equal(y.gather(), 2 * full)
    with pytest.raises(lm.InvalidArgumentError, match="LM_SHAPE_ALLGATHER"):
        lm.from_local(mine, mesh1, [lm.RaggedShard(0)], shape_mode="even")
    assert repr(lm.RaggedShard(0)) == "RaggedShard(0)"


def test_bad_extents(mesh1):
    with pytest.raises(lm.InvalidArgumentError, match=r"extents\[0\]"):
        lm.RaggedShard(0, [-1] * COMM.size)
    with pytest.raises(lm.InvalidArgumentError, match="add up to"):
        lm.zeros(mesh1, (5,), np.float32, [lm.RaggedShard(0, [6] + [0] * (COMM.size - 1))])
    assert repr(lm.RaggedShard(1, [2, 0])) == "RaggedShard(1, [2, 0])"
