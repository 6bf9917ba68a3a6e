# SPDX-License-Identifier: BSD-3-Clause
"""Persistent reshard plans and nonblocking requests, and the library-level helpers."""
import os

import numpy as np
import pytest
from mpi4py import MPI

import localmap as lm

COMM = MPI.COMM_WORLD


def test_plan_execute_start_wait(mesh2):
    full = np.arange(35, dtype=np.int32).reshape(7, 5)
    src_pl, dst_pl = [lm.Shard(0), lm.Shard(1)], [lm.Replicate(), lm.Shard(0)]
    with lm.from_global(full, mesh2, src_pl) as src, \
            lm.ReshardPlan(mesh2, src_pl, mesh2, dst_pl, full.shape, np.int32) as plan:
        assert isinstance(plan.describe(), str) and plan.describe()
        assert plan.bytes_sent >= 0
        mine, total = plan.info(), plan.info(all_ranks=True)
        assert mine["bytes_sent"] == plan.bytes_sent and mine["steps"] >= 1
        # every element of the target's replicas (along mesh dim 0) is received or copied once
        replicas = 2 if COMM.size % 2 == 0 else COMM.size
        assert total["bytes_sent"] == total["bytes_received"]
        assert total["bytes_received"] + total["bytes_copied"] == full.nbytes * replicas
        assert total["routes"] <= {"mpi", "node_local", "board"}
        dst = plan.alloc_target()
        assert dst.placements == tuple(dst_pl) and dst.gather().sum() == 0
        plan.execute(src, dst)
        np.testing.assert_array_equal(dst.gather(), full)
        with plan.adjoint() as back:            # the gradient's way back: [R, S(0)] -> [S(0), S(1)]
            grad = back.execute(dst)
            assert grad.placements == tuple(src_pl)
            np.testing.assert_array_equal(grad.gather(), full)
        assert lm.placements_adjoint([lm.Partial("sum"), lm.Shard(1)]) == (lm.Replicate(), lm.Shard(1))
        with pytest.raises(lm.NotSupportedError):
            lm.placements_adjoint([lm.Partial("max")])
        req = plan.start(src)                   # a fresh target
        with pytest.raises(lm.InvalidUsageError):
            plan.close()                        # refused while the request is in flight
        while not req.test():
            pass
        assert req.done and req.test()
        np.testing.assert_array_equal(req.wait().gather(), full)
        with plan.start(src, dst) as r2:         # `with` waits
            pass
        assert r2.done
        np.testing.assert_array_equal(dst.gather(), full)


def test_plan_bad_arguments(mesh1):
    with pytest.raises(lm.InvalidArgumentError) as ei:
        lm.ReshardPlan(mesh1, [lm.Shard(2)], mesh1, [lm.Replicate()], (4,), np.float64)
    assert "lm_reshard_plan_create" in ei.value.message
    with lm.ReshardPlan(mesh1, [lm.Shard(0)], mesh1, [lm.Replicate()], (4,), np.float64) as p, \
            lm.from_global(np.arange(5.0), mesh1, [lm.Shard(0)]) as wrong:
        with pytest.raises(lm.Error) as ei:
            p.execute(wrong)                    # another global shape than the plan's
        # a local check, the same verdict on every rank: no agreement is needed to refuse it
        assert ei.value.status == lm.ERR_INVALID_ARGUMENT, ei.value
        assert "the plan expects" in ei.value.message


def test_cross_mesh_reshard():
    if COMM.size < 2:
        pytest.skip("needs 2 ranks")
    with lm.Mesh([COMM.size]) as a, lm.Mesh([1], ranks=[0]) as b:
        full = np.arange(6.0)
        with lm.from_global(full, a, [lm.Shard(0)]) as t, t.reshard([lm.Replicate()], b) as r:
            if COMM.rank == 0:
                np.testing.assert_array_equal(r.local(), full)
            else:
                assert r.local().size == 0 and r.shape == (6,)


def test_library_helpers():
    major, minor, patch = lm.library_version()
    assert major == 1 and (major, minor, patch) >= (1, 0, 0)
    assert "liblocalmap.so.1" in lm.library_path()
    assert lm.status_string(lm.ERR_USER).startswith("LM_ERR_USER")
    assert lm.chunk(5, 4, 3) == (5, 0) and lm.chunk(10, 4, 3) == (9, 1)
    with pytest.raises(lm.InvalidArgumentError):
        lm.chunk(5, 0, 0)
    assert lm.device_supported("cpu") is True
    # pinned to what the build and machine call for, decided outside the library
    # (LM_EXPECT_GPU, set by tests/run-tests.sh); unset: only the type is known
    expect = os.environ.get("LM_EXPECT_GPU")
    if expect in ("0", "1"):
        assert lm.device_supported("cuda") is (expect == "1")
    else:
        assert lm.device_supported("cuda") in (True, False)
    with pytest.raises(lm.InvalidArgumentError):
        lm.device_supported("abacus")
    lm.init()       # MPI already initialised (by mpi4py): a no-op
    lm.finalize()   # localmap did not initialise MPI: a no-op, MPI still works
    assert COMM.allreduce(1) == COMM.size
    assert issubclass(lm.UserError, lm.Error) and issubclass(lm.OutOfMemoryError, MemoryError)


# -- grouped reshards ------------------------------------------------------------------------
S0, S1, R, PSUM = lm.Shard(0), lm.Shard(1), lm.Replicate(), lm.Partial("sum")


def _group_case(mesh):
    """Mixed entries on a 1-D mesh (all-gather of uneven rows, reduce-scatter, all-to-all, a
    slice) and their sources; Partial sources differ per rank."""
    entries = [((7, 5), np.float64, [S0], [R]),
               ((9, 4), np.float64, [PSUM], [S0]),
               ((8, 6), np.float32, [S0], [S1]),
               ((11,), np.int32, [R], [S0])]
    srcs = []
    for i, (shape, dtype, src_pl, _) in enumerate(entries):
        base = (np.arange(int(np.prod(shape))).reshape(shape) * 7 + i * 131) % 97 - 40
        if src_pl[0].is_partial():
            srcs.append(lm.from_local((base + COMM.rank * 17).astype(dtype), mesh, src_pl,
                                      global_shape=shape))
        else:
            srcs.append(lm.from_global(base.astype(dtype), mesh, src_pl))
    return entries, srcs


def _assert_same(outs, refs):
    assert len(outs) == len(refs)
    for i, (o, r) in enumerate(zip(outs, refs)):
        assert o.placements == r.placements and o.shape == r.shape, i
        assert o.local().dtype == r.local().dtype, i
        np.testing.assert_array_equal(o.local(), r.local(), err_msg=f"entry {i}")


# the defaults (one bucket), every entry alone (by either bound), a few buckets
@pytest.mark.parametrize("bounds", [(0, 0), (1, 0), (0, 1), (700, 0)])
def test_group_matches_per_tensor_reshards(mesh1, bounds):
    bucket_bytes, alone_bytes = bounds
    entries, srcs = _group_case(mesh1)
    refs = [x.reshard(e[3]) for x, e in zip(srcs, entries)]
    with lm.ReshardGroup(mesh1, entries, bucket_bytes=bucket_bytes, alone_bytes=alone_bytes) as g:
        assert len(g) == g.size() == 4 and 1 <= g.buckets <= 4 and "entries=4" in repr(g)
        if 1 in bounds:
            assert g.buckets == 4
        dsts = g.alloc_targets()
        assert [d.placements for d in dsts] == [tuple(e[3]) for e in entries]
        assert all(d.gather().sum() == 0 for d in dsts)
        for _ in range(2):                      # the group runs again with its state reused
            assert g.execute(srcs, dsts) is dsts
            _assert_same(dsts, refs)
        req = g.start(srcs)                     # nonblocking, into fresh targets
        if req.done:                            # (one rank: already complete)
            assert COMM.size == 1
        else:
            with pytest.raises(lm.InvalidUsageError, match="in flight"):
                g.close()                       # refused while the request is in flight
        while not req.test():
            pass
        _assert_same(req.wait(), refs)
        with g.start(srcs, dsts) as r2:         # `with` waits
            pass
        assert r2.done and r2.wait() is dsts
        _assert_same(dsts, refs)
    assert g.closed and repr(g) == "ReshardGroup(<closed>)"


def test_group_across_meshes(mesh1):
    """To a mesh of the same ranks in reverse order: every row moves to another rank."""
    with lm.Mesh([COMM.size], ranks=list(range(COMM.size))[::-1]) as rev:
        entries, srcs = _group_case(mesh1)
        refs = [x.reshard(e[3], mesh=rev) for x, e in zip(srcs, entries)]
        with lm.ReshardGroup(mesh1, entries, dst_mesh=rev) as g:
            _assert_same(g.execute(srcs), refs)
        with lm.ReshardGroup(mesh1, []) as empty:  # no entries: nothing to do
            assert len(empty) == 0 and empty.buckets == 0 and bool(empty)
            assert empty.execute([], []) == [] and empty.start([]).wait() == []


def test_reshard_many(mesh1):
    entries, srcs = _group_case(mesh1)
    outs = lm.reshard_many(srcs, [e[3] for e in entries])
    _assert_same(outs, [x.reshard(e[3]) for x, e in zip(srcs, entries)])
    assert lm.reshard_many([], []) == []
    one = lm.reshard_many(srcs[:1], [R])        # a single placement per tensor on a 1-D mesh
    np.testing.assert_array_equal(one[0].local(), srcs[0].gather())


def test_group_bad_arguments(mesh1):
    x = [lm.from_global(np.arange(12.0), mesh1, [S0]) for _ in range(2)]
    ok = ((12,), np.float64, [S0], [R])
    # Placements are checked against the meshes before C, naming the entry and the argument.
    with pytest.raises(lm.InvalidArgumentError,
                       match=r"entries\[1\]\.dst_placements: 2 placements for a mesh of 1 dims"):
        lm.ReshardGroup(mesh1, [ok, ((12,), np.float64, [S0], [R, R])])
    with pytest.raises(lm.InvalidArgumentError, match=r"entries\[0\]: expected \(shape"):
        lm.ReshardGroup(mesh1, [((12,), np.float64)])
    with pytest.raises(lm.InvalidArgumentError, match="bucket_bytes"):
        lm.ReshardGroup(mesh1, [ok], bucket_bytes=-1)
    with pytest.raises(lm.InvalidArgumentError, match="alone_bytes"):
        lm.ReshardGroup(mesh1, [ok], alone_bytes=1.5)
    with pytest.raises(lm.InvalidArgumentError) as ei:  # the library's own check
        lm.ReshardGroup(mesh1, [ok, ((12,), np.float64, [S0], [lm.Shard(3)])])
    assert "lm_reshard_group_create" in ei.value.message and "entries[1]" in ei.value.message
    with lm.ReshardGroup(mesh1, [ok, ok]) as g:
        y = g.alloc_targets()
        with pytest.raises(lm.InvalidArgumentError) as ei:
            g.execute(x[:1], y[:1])                 # n: one tensor for a group of 2
        assert "lm_reshard_group_execute: n is 1" in ei.value.message, ei.value
        with pytest.raises(lm.InvalidArgumentError, match="dsts: 1 tensors for 2 srcs"):
            g.start(x, y[:1])
        with pytest.raises(lm.InvalidArgumentError, match=r"srcs\[1\]: expected a localmap"):
            g.execute([x[0], np.zeros(12)], y)
        with pytest.raises(lm.InvalidArgumentError, match="srcs: expected a sequence"):
            g.execute(x[0], y)
        with pytest.raises(lm.InvalidArgumentError) as ei:
            g.execute(x, [y[0], y[0]])              # one target twice
        assert "dst[1]" in ei.value.message, ei.value
        g.execute(x, y)                             # the group still works after refusals
        for t in y:
            np.testing.assert_array_equal(t.local(), np.arange(12.0))
    with pytest.raises(lm.InvalidArgumentError, match=r"placements_list: 1 entries for 2"):
        lm.reshard_many(x, [[R]])
    with pytest.raises(lm.InvalidArgumentError,
                       match=r"placements_list\[1\]: 0 placements for a mesh of 1 dims"):
        lm.reshard_many(x, [[R], []])


# -- estimates -------------------------------------------------------------------------------
def test_reshard_estimate_matches_plan_info(mesh1):
    """lm_reshard_estimate gives what the plan built from the same arguments reports, this
    rank's and every rank's, without building it."""
    for shape, dtype, src_pl, dst_pl in [((7, 5), np.float64, [S0], [R]),
                                         ((9, 4), np.float32, [PSUM], [S0]),
                                         ((8, 6), np.int32, [S0], [S1])]:
        with lm.ReshardPlan(mesh1, src_pl, mesh1, dst_pl, shape, dtype) as plan:
            mine, total = plan.info(), plan.info(all_ranks=True)
        est = lm.reshard_estimate(mesh1, src_pl, dst_pl, shape, dtype)
        assert est == mine, (src_pl, dst_pl, est, mine)
        assert lm.reshard_estimate(mesh1, src_pl, dst_pl, shape, dtype, dst_mesh=mesh1,
                                   all_ranks=True) == total, (src_pl, dst_pl)


def test_reshard_estimate_bad_arguments(mesh1):
    with pytest.raises(lm.InvalidArgumentError) as ei:      # the library's own check
        lm.reshard_estimate(mesh1, [lm.Shard(2)], [R], (4,), np.float64)
    assert "lm_reshard_estimate" in ei.value.message and "src_placements" in ei.value.message, \
        ei.value
    with pytest.raises(lm.InvalidArgumentError,
                       match="dst_placements: 2 placements for a mesh of 1 dims"):
        lm.reshard_estimate(mesh1, [S0], [R, R], (4,), np.float64)
    with pytest.raises(lm.InvalidArgumentError, match="dst_mesh: expected a localmap.Mesh"):
        lm.reshard_estimate(mesh1, [S0], [R], (4,), np.float64, dst_mesh="world")
