# SPDX-License-Identifier: BSD-3-Clause
"""Errors speak Python (issue 40): they name Python's arguments and types, not the C ones. A
wrong-length list is refused by the length rules of api/localmap.api before the C function is
called; a RaggedShard is named by the lengths the user passed, not by its extents id; a
BlockCyclic's block by BlockCyclic(dim, block); from_scalapack's array as `a`."""
import numpy as np
import pytest
from mpi4py import MPI

import localmap as lm
from localmap import _lib

COMM = MPI.COMM_WORLD
S0, R = lm.Shard(0), lm.Replicate()


@pytest.fixture
def no_c_call(monkeypatch):
    """Makes the named C functions fail the test if they are called."""
    def forbid(*names):
        for name in names:
            def called(*args, name=name):
                raise AssertionError(f"{name} was called")
            monkeypatch.setattr(_lib, name, called)
    return forbid


def test_placements_count_before_c(mesh2, no_c_call):
    no_c_call("lm_dist_tensor_zeros", "lm_dist_tensor_reshard")
    with pytest.raises(lm.InvalidArgumentError) as ei:
        lm.zeros(mesh2, (4, 4), np.float32, [R])
    assert ei.value.message == ("placements: 1 placements for a mesh of 2 dims (a list with one "
                                "Placement per mesh dim)")
    with lm.from_global(np.zeros((4, 4)), mesh2, [S0, R]) as t:
        with pytest.raises(lm.InvalidArgumentError, match=r"] placements: 3 placements for a "
                                                          r"mesh of 2 dims \(a list"):
            t.reshard([R, R, R])


def test_other_lengths_in_python_terms(mesh1, no_c_call):
    no_c_call("lm_dist_tensor_transpose", "lm_local_map", "lm_dist_tensor_from_scalapack")
    with lm.from_global(np.zeros((2, 3, 4)), mesh1, [S0]) as t:
        with pytest.raises(lm.InvalidArgumentError) as ei:
            t.transpose((1, 0), [R])
        assert ei.value.message == "perm has 2 entries, not 3 (one per dim of a tensor of 3 dims)"
        with pytest.raises(lm.InvalidArgumentError) as ei:
            lm.local_map(lambda x: x, [S0], in_placements=[[S0], [S0]])(t)
        assert ei.value.message == "in_placements: 2 entries for 1 inputs"
        with pytest.raises(lm.InvalidArgumentError) as ei:
            lm.local_map(lambda x: x, [S0], out_shapes=[(2, 3, 4), None])(t)
        assert ei.value.message == "out_shapes: 2 entries for 1 outputs"
    with lm.Mesh.grid(0, 0) if COMM.size == 1 else lm.Mesh([1, COMM.size]) as grid:
        with pytest.raises(lm.InvalidArgumentError) as ei:
            lm.from_scalapack(np.zeros((2, 2)), [1, 0, 2, 2, 1, 1, 0, 0], grid)
        assert ei.value.message == "desc has 8 entries, not 9"


def test_ragged_named_by_its_lengths(mesh1):
    lengths = [6] + [0] * (COMM.size - 1)
    with pytest.raises(lm.InvalidArgumentError) as ei:
        lm.zeros(mesh1, (5,), np.float32, [lm.RaggedShard(0, lengths)])
    assert f"RaggedShard extents {lengths} add up to 6" in ei.value.message, ei.value
    assert "extents id" not in ei.value.message
    with pytest.raises(lm.InvalidArgumentError) as ei:
        lm.zeros(mesh1, (5,), np.float32, [lm.RaggedShard(0, [5] * (COMM.size + 1))])
    assert f"RaggedShard extents {[5] * (COMM.size + 1)} has {COMM.size + 1} extents" in \
        ei.value.message, ei.value


def test_block_cyclic_block_in_python_terms(mesh1, no_c_call):
    no_c_call("lm_dist_tensor_zeros")
    with pytest.raises(lm.InvalidArgumentError) as ei:
        lm.zeros(mesh1, (5,), np.float32, [lm.BlockCyclic(0, 0)])
    assert ei.value.message == ("placements[0]: BlockCyclic(0, 0): block must be >= 1 (the "
                                "block size, in elements) and src >= 0 (the mesh coordinate of "
                                "the first block)")
    with pytest.raises(lm.InvalidArgumentError, match=r"] placements\[0\]: BlockCyclic\(0, 2, "
                                                      r"src=-1\): block must be >= 1"):
        lm.zeros(mesh1, (5,), np.float32, [lm.BlockCyclic(0, 2, src=-1)])


def test_from_scalapack_names_its_array(no_c_call, monkeypatch):
    """a=None and an array too small for the descriptor's local part are refused naming `a`,
    before C reads fewer elements than the descriptor says this rank holds: the local part
    comes from a borrow (LM_FROM_LOCAL_BORROW reads nothing), and no copy is made."""
    with lm.Mesh([1, COMM.size]) as grid:
        mb = nb = 2
        desc = [1, 0, 4, nb * COMM.size, mb, nb, 0, 0, 4]  # 4 rows, 2 columns per rank
        no_c_call("lm_dist_tensor_from_scalapack")
        with pytest.raises(lm.InvalidArgumentError) as ei:
            lm.from_scalapack(None, desc, grid)
        assert ei.value.message.startswith("from_scalapack: a is None")
        monkeypatch.undo()
        real, flags = _lib.lm_dist_tensor_from_scalapack, []
        monkeypatch.setattr(_lib, "lm_dist_tensor_from_scalapack",
                            lambda *args: flags.append(args[-1]) or real(*args))
        for copy in (None, True):
            with pytest.raises(lm.InvalidArgumentError) as ei:
                lm.from_scalapack(np.zeros((4, 1), order="F"), desc, grid, copy=copy)
            assert ei.value.message == ("from_scalapack: a has 1 columns, but desc places 2 "
                                        "columns (LOCc) of the matrix on this rank")
        assert flags == [_lib.LM_FROM_LOCAL_BORROW] * 2
