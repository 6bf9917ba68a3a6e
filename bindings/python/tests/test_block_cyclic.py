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


def test_from_scalapack():
    """A ScaLAPACK local array on a 1 x P grid (blocks of 2 columns from the last process
    column): shared without a copy, the [N, M] view checked, the descriptor read back; a padded
    leading dimension copied, or shared (its rows padded) and written back by a plan."""
    P = COMM.size
    m, n, nb, src = 3, 9, 2, P - 1
    full = np.arange(m * n, dtype=np.float64).reshape(m, n)  # the matrix, M x N
    cols = my_rows(n, nb, src)  # this process column's matrix columns (the same INDXL2G)
    with lm.Mesh.grid(0, COMM.rank) as grid:  # a 1 x P process grid, BLACS-style
        assert grid.shape == (1, P) and grid.coord == (0, COMM.rank)
        desc = [1, 0, m, n, 3, nb, 0, src, 3]
        a = np.asfortranarray(full[:, cols])  # ScaLAPACK's column-major local array, LLD 3
        with lm.from_scalapack(a, desc, grid) as t:
            assert t.shape == (n, m) and t.local_shape == (len(cols), m)
            assert a.size == 0 or np.shares_memory(t.local(), a)
            np.testing.assert_array_equal(t.gather(), full.T)
            assert t.to_scalapack(5) == [1, 5, m, n, 3, nb, 0, src, 3]
        with lm.from_scalapack(a.ravel(order="F"), desc, grid) as t:  # the flat buffer
            np.testing.assert_array_equal(t.gather(), full.T)
        padded = np.zeros((5, len(cols)), order="F")
        padded[:m] = a
        pdesc = desc[:8] + [5]
        with lm.from_scalapack(padded, pdesc, grid, copy=True) as t:
            np.testing.assert_array_equal(t.gather(), full.T)
            assert a.size == 0 or not np.shares_memory(t.local(), padded)
        # Shared with its padding (LLD 5 > LOCr 3): the view is a strided slice of the array, the
        # descriptor keeps LLD 5, and a reshard back into it writes the matrix, not the padding.
        padded[m:] = -7
        with lm.from_scalapack(padded, pdesc, grid) as t:
            loc = t.local()
            assert a.size == 0 or np.shares_memory(loc, padded)
            assert len(cols) < 2 or loc.strides == (40, 8)  # one column: nothing to pad
            assert t.local_extents == ((len(cols), 5) if len(cols) > 1 else (len(cols), m))
            np.testing.assert_array_equal(loc, a.T)
            np.testing.assert_array_equal(t.gather(), full.T)
            assert t.to_scalapack(5) == [1, 5, m, n, 3, nb, 0, src, 5 if len(cols) > 1 else 3]
            rows = t.reshard([lm.Replicate(), lm.Shard(0)])
            padded[:m] = 0
            with lm.ReshardPlan(grid, rows.placements, grid, t.placements, t.shape,
                                np.float64) as plan:
                plan.execute(rows, t)
            np.testing.assert_array_equal(padded[:m], a)
            assert (padded[m:] == -7).all()
            rows.close()
        with pytest.raises(lm.InvalidArgumentError, match="RSRC_"):
            lm.from_scalapack(a, desc[:6] + [1] + desc[7:], grid)
        with pytest.raises(lm.InvalidArgumentError, match="not 9"):
            lm.from_scalapack(a, desc[:8], grid)


def test_transpose(mesh1):
    """DistTensor.transpose: a block-cyclic matrix into the row shards of its transpose (a
    ScaLAPACK transpose without the arithmetic), and a 3-D permutation, against numpy."""
    n, m = 7, 5
    full = np.arange(n * m, dtype=np.float64).reshape(n, m)
    with lm.from_global(full, mesh1, [lm.BlockCyclic(0, 2, src=COMM.size - 1)]) as t:
        with t.transpose((1, 0), [lm.Shard(0)]) as tt:
            assert tt.shape == (m, n)
            np.testing.assert_array_equal(tt.gather(), full.T)
    cube = np.arange(2 * 3 * 4, dtype=np.int32).reshape(2, 3, 4)
    with lm.from_global(cube, mesh1, [lm.Shard(1)]) as t:
        with t.transpose([2, 0, 1], [lm.Partial("sum")]) as tt:
            np.testing.assert_array_equal(tt.gather(), np.transpose(cube, (2, 0, 1)))
        with pytest.raises(lm.InvalidArgumentError, match="repeats"):
            t.transpose((0, 0, 1), [lm.Replicate()])
        with pytest.raises(lm.InvalidArgumentError, match="perm has 2 entries"):
            t.transpose((1, 0), [lm.Replicate()])


def test_transpose_into(mesh1):
    """DistTensor.transpose_into: a block-cyclic matrix written transposed into an existing
    tensor in row shards, then into a replicated one; a wrong shape is refused, naming it."""
    n, m = 9, 4
    full = np.arange(n * m, dtype=np.float64).reshape(n, m)
    with lm.from_global(full, mesh1, [lm.BlockCyclic(0, 2)]) as t, \
            lm.from_global(np.zeros((m, n)), mesh1, [lm.Shard(0)]) as rows, \
            lm.from_global(np.zeros((m, n)), mesh1, [lm.Replicate()]) as rep:
        t.transpose_into(rows, (1, 0))
        np.testing.assert_array_equal(rows.gather(), full.T)
        t.transpose_into(rep, [1, 0])
        np.testing.assert_array_equal(rep.local(), full.T)
        with pytest.raises(lm.InvalidArgumentError, match="global shape"):
            t.transpose_into(t, (1, 0))
        with pytest.raises(lm.InvalidArgumentError, match="perm has 3 entries"):
            t.transpose_into(rows, (1, 0, 2))
