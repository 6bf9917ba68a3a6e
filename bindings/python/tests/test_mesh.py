# SPDX-License-Identifier: BSD-3-Clause
"""Meshes: creation over mpi4py / Fortran-handle / default communicators, queries, dim
communicators, non-members, handle lifetime, and errors carrying status and message."""
import os

import numpy as np
import pytest
from mpi4py import MPI

import localmap as lm

COMM = MPI.COMM_WORLD


def test_one_mpi_library_in_the_process():
    # mpi4py and liblocalmap must share one MPI: two libmpi in one process would be two MPIs.
    try:
        with open("/proc/self/maps") as f:
            libs = {line.split()[-1] for line in f if "/libmpi." in line or "/libmpich." in line}
    except OSError:
        pytest.skip("no /proc/self/maps")
    assert len({os.path.realpath(p) for p in libs}) == 1, libs


def test_world_and_defaults():
    assert lm.world_rank() == (COMM.rank, COMM.size)
    assert lm.comm_world() == COMM.py2f()
    with lm.Mesh(COMM.size) as m:  # an int shape, the default communicator
        assert m.shape == (COMM.size,)
        assert m.ndim == 1 and m.size == COMM.size and m.is_member
        assert m.rank == COMM.rank and m.coord == (COMM.rank,)
        assert m.dim_names == ("",)


def test_queries_2d(mesh2):
    dp, tp = mesh2.shape
    assert mesh2.dim_names == ("dp", "tp")
    assert mesh2.dim_index("tp") == 1 and mesh2.dim_name(0) == "dp"
    c = mesh2.coord
    assert c == (COMM.rank // tp, COMM.rank % tp)
    assert mesh2.rank_at(c) == COMM.rank
    assert mesh2.rank_at((dp - 1, tp - 1)) == COMM.size - 1
    assert "dp" in repr(mesh2)


def test_mpi4py_communicators(mesh2):
    dp, tp = mesh2.shape
    row = mesh2.dim_comm("tp")  # ranks that share my dp coordinate
    assert row.size == tp and row.rank == mesh2.coord[1]
    assert row.allreduce(1) == tp
    col = mesh2.dim_comm(0)
    assert col.size == dp and col.allreduce(COMM.rank) == sum(
        mesh2.rank_at((i, mesh2.coord[1])) for i in range(dp))
    assert mesh2.dim_comm_f(1) == row.py2f()
    assert mesh2.comm.size == COMM.size
    assert isinstance(mesh2.comm_f, int)


def test_mesh_on_split_comm():
    sub = COMM.Split(COMM.rank % 2, COMM.rank)
    try:
        with lm.Mesh([sub.size], sub) as m:          # an mpi4py communicator
            assert m.size == sub.size and m.rank == sub.rank
        with lm.Mesh([sub.size], sub.py2f()) as m:   # the same as a Fortran handle
            assert m.size == sub.size
    finally:
        sub.Free()


def test_non_member():
    if COMM.size < 2:
        pytest.skip("needs 2 ranks")
    with lm.Mesh([1], ranks=[COMM.size - 1]) as m:
        member = COMM.rank == COMM.size - 1
        assert m.is_member == member and m.size == 1
        if member:
            assert m.coord == (0,)
        else:
            with pytest.raises(lm.InvalidUsageError) as ei:
                m.coord
            assert ei.value.status == lm.ERR_INVALID_USAGE
            with pytest.raises(lm.InvalidUsageError):
                m.dim_comm_f(0)
        # a placeholder on non-members: it knows the global shape, its shard is empty
        a = np.arange(3.0) if member else np.empty((0,))
        for copy in (None, True):
            with lm.from_local(a, m, [lm.Shard(0)], global_shape=(3,), copy=copy) as t:
                assert t.shape == (3,) and t.local().size == (3 if member else 0)
                if member:
                    assert t.gather().tolist() == [0, 1, 2]
                else:
                    with pytest.raises(lm.InvalidUsageError) as ei:
                        t.gather()
                    assert "not in the mesh" in ei.value.message


def test_errors_carry_status_and_message(mesh1):
    with pytest.raises(lm.InvalidArgumentError) as ei:
        mesh1.dim_index("nope")
    e = ei.value
    assert isinstance(e, lm.Error) and isinstance(e, ValueError)
    assert e.status == lm.ERR_INVALID_ARGUMENT == 1
    assert e.status_name == "LM_ERR_INVALID_ARGUMENT"
    assert "nope" in e.message and "lm_mesh_dim_index" in e.message
    assert "LM_ERR_INVALID_ARGUMENT" in str(e)
    with pytest.raises(lm.InvalidArgumentError) as ei:
        mesh1.dim_name(5)
    assert "dim" in ei.value.message


def test_bad_create_arguments_agree():
    # Every rank passes the same bad arguments: every rank gets the same error, none hangs.
    with pytest.raises(lm.InvalidArgumentError) as ei:
        lm.Mesh([COMM.size + 1])
    assert ei.value.status == lm.ERR_INVALID_ARGUMENT and ei.value.message
    with pytest.raises(lm.InvalidArgumentError) as ei:
        lm.Mesh([COMM.size], ranks=list(range(COMM.size)) + [0])
    assert "ranks" in ei.value.message
    with pytest.raises(lm.InvalidArgumentError) as ei:
        lm.Mesh([COMM.size], dim_names=[""])
    assert "dim_names" in ei.value.message
    with pytest.raises(lm.InvalidArgumentError) as ei:
        lm.Mesh([COMM.size], comm="world")
    assert "comm" in ei.value.message
    with pytest.raises(lm.InvalidArgumentError) as ei:
        lm.Mesh(["x"])
    assert "shape" in ei.value.message
    with pytest.raises(lm.InvalidArgumentError):
        lm.Mesh([COMM.size], dim_names="x")


def test_lifetime():
    m = lm.Mesh([COMM.size])
    t = lm.zeros(m, [4], np.float32, [lm.Replicate()])
    m.close()
    m.close()  # twice is fine
    assert m.closed
    with pytest.raises(lm.InvalidArgumentError) as ei:
        m.ndim
    assert "after close" in ei.value.message
    # the tensor keeps the C mesh alive
    assert t.mesh.size == COMM.size and t.gather().tolist() == [0, 0, 0, 0]
    mm = t.mesh
    del t
    assert mm.size == COMM.size  # the borrowed mesh holds a reference on the tensor
    mm.close()
    with lm.Mesh([COMM.size]) as m3:
        t3 = lm.zeros(m3, [2], np.int8, [lm.Replicate()])
        mesh_of_t3 = t3.mesh     # taken while the creator's Mesh is open ...
    assert mesh_of_t3.size == COMM.size   # ... and still usable after it was closed
    assert mesh_of_t3 == t3.mesh
    mesh_of_t3.close()
    with lm.Mesh([COMM.size]) as m2:
        pass
    assert m2.closed
