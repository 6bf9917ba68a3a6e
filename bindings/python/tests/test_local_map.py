# SPDX-License-Identifier: BSD-3-Clause
"""local_map on Python callables: decorator and call forms, several outputs, plain-value outputs,
resharded inputs, zero-copy outputs, and failures: an exception in fn becomes a failed status on
its rank and an agreed error on every rank, never a crash or a hang."""
import gc

import numpy as np
import pytest
from mpi4py import MPI

import localmap as lm
from localmap import _dlpack

COMM = MPI.COMM_WORLD
TOTAL = sum(range(30))


def test_decorator_and_call_forms(mesh1):
    x = lm.from_global(np.arange(30.0).reshape(10, 3), mesh1, [lm.Shard(0)])

    @lm.local_map(out_placements=[lm.Partial("sum")])
    def local_sum(shard):
        assert isinstance(shard, np.ndarray) and not shard.flags.writeable
        return np.array([shard.sum()])

    assert local_sum.__name__ == "local_sum"
    y = local_sum(x)
    assert isinstance(y, lm.DistTensor) and y.placements == (lm.Partial("sum"),)
    assert y.gather().tolist() == [TOTAL]

    @lm.local_map([lm.Partial("sum")])   # placements as the only decorator argument
    def local_sum2(shard):
        return np.array([shard.sum()])
    assert local_sum2(x).gather().tolist() == [TOTAL]

    doubled = lm.local_map(lambda s: 2 * s, [lm.Shard(0)])(x)   # the call form
    assert doubled.shape == (10, 3)
    np.testing.assert_array_equal(doubled.gather(), 2 * np.arange(30.0).reshape(10, 3))


def test_several_outputs_and_plain_values(mesh1):
    x = lm.from_global(np.arange(12, dtype=np.int64), mesh1, [lm.Shard(0)])
    marker = object()

    @lm.local_map(out_placements=([lm.Partial("sum")], None, None, None, [lm.Shard(0)]))
    def fn(shard, k, f, obj, *, scale=1):
        assert obj is marker and isinstance(k, int) and isinstance(f, float)
        return (np.array([shard.sum() * scale]), k + 1, f * 2, ("py", shard.size),
                shard * k)

    s, k1, f2, obj, sk = fn(x, 3, 0.25, marker, scale=2)
    assert s.gather().tolist() == [2 * 66]
    assert (k1, f2) == (4, 0.5) and obj == ("py", x.local_shape[0])
    np.testing.assert_array_equal(sk.gather(), 3 * np.arange(12))

    @lm.local_map(out_placements=())
    def nothing(shard):
        return None
    assert nothing(x) == ()


def test_reshard_inputs_and_mesh(mesh2):
    full = np.arange(24.0).reshape(6, 4)
    x = lm.from_global(full, mesh2, [lm.Replicate(), lm.Replicate()])
    batch = [lm.Shard(0), lm.Replicate()]

    @lm.local_map(out_placements=[lm.Shard(0), lm.Replicate()], in_placements=[batch],
                  reshard_inputs=True, with_mesh=True)
    def rows_plus_rank(mesh, shard):
        assert isinstance(mesh, lm.Mesh) and mesh.shape == mesh2.shape
        return shard + 1

    y = rows_plus_rank(x)
    assert y.placements == tuple(batch)
    np.testing.assert_array_equal(y.gather(), full + 1)
    # without reshard_inputs a placement mismatch is an agreed error
    strict = lm.local_map(lambda s: s, [lm.Replicate(), lm.Replicate()], in_placements=[batch])
    with pytest.raises(lm.Error) as ei:
        strict(x)
    # every rank fails the same local check, so each reports its own error (none is REMOTE)
    assert ei.value.status == lm.ERR_INVALID_ARGUMENT, ei.value
    assert "in_placements[0] requires" in ei.value.message
    # out_shapes and shapes_even
    ev = lm.local_map(lambda s: s.copy(), [lm.Shard(0), lm.Replicate()],
                      out_shapes=[(6, 4)])(y)
    assert ev.shape == (6, 4)


def test_outputs_share_or_copy_safely(mesh1):
    x = lm.from_global(np.arange(8.0), mesh1, [lm.Replicate()])
    gc.collect()
    before = _dlpack.live_managed_count()
    made = {}

    @lm.local_map(out_placements=([lm.Replicate()], [lm.Replicate()]))
    def fn(shard):
        fresh = np.arange(3.0) * COMM.rank
        made["fresh"] = fresh
        return fresh, shard[2:5]       # the second is a view of the input: must be copied

    fresh_t, view_t = fn(x)
    assert np.shares_memory(fresh_t.local(), made["fresh"])       # zero-copy output
    assert not np.shares_memory(view_t.local(), x.local())        # the view was copied
    assert _dlpack.live_managed_count() >= before + 1
    x.close()
    gc.collect()
    assert view_t.local().tolist() == [2.0, 3.0, 4.0]            # outlives the input
    fresh_t.close()
    view_t.close()
    del made["fresh"]
    gc.collect()
    assert _dlpack.live_managed_count() == before                 # deleters ran


def test_exception_becomes_agreed_failure(mesh1):
    x = lm.from_global(np.arange(6.0), mesh1, [lm.Shard(0)])
    bad_rank = COMM.size - 1

    @lm.local_map(out_placements=[lm.Shard(0)])
    def fails_on_one_rank(shard):
        if COMM.rank == bad_rank:
            raise ValueError(f"label out of range on rank {COMM.rank}")
        return shard * 2

    with pytest.raises(lm.Error) as ei:
        fails_on_one_rank(x)
    e = ei.value
    if COMM.rank == bad_rank:
        assert isinstance(e, lm.UserError) and e.status == lm.ERR_USER
        assert isinstance(e.__cause__, ValueError)
        assert f"ValueError: label out of range on rank {bad_rank}" in e.message
    else:
        assert isinstance(e, lm.RemoteError) and e.status == lm.ERR_REMOTE
        assert f"rank {bad_rank}" in e.message
    # every rank sees the exception's text (the failing rank's message travels in the agreement)
    assert f"ValueError: label out of range on rank {bad_rank}" in e.message
    # every rank is still usable afterwards: the next collective works
    assert fails_on_one_rank.__name__ == "fails_on_one_rank"
    ok = lm.local_map(lambda s: s + 1, [lm.Shard(0)])(x)
    np.testing.assert_array_equal(ok.gather(), np.arange(6.0) + 1)


def test_exception_on_every_rank_and_no_agree(mesh1):
    x = lm.from_global(np.arange(4.0), mesh1, [lm.Replicate()])

    def boom(shard):
        raise KeyError("no such column")

    for agree in (True, False):
        with pytest.raises(lm.Error) as ei:
            lm.local_map(boom, [lm.Replicate()], agree=agree)(x)
        # fn raises on every rank: each reports its own failure, agreed or not
        assert ei.value.status == lm.ERR_USER, ei.value
        assert "KeyError" in ei.value.message and "no such column" in ei.value.message


def test_bad_outputs_are_user_errors(mesh1):
    x = lm.from_global(np.arange(4.0), mesh1, [lm.Replicate()])
    two = ([lm.Replicate()], [lm.Replicate()])
    cases = [(lambda s: s, "expected a tuple"), (lambda s: (s,), "returned 1 outputs"),
             (lambda s: (s, "text"), "output 1: dtype: numpy dtype <U4 has no DLPack"), (lambda s: (s, x), "DistTensor")]
    for fn, text in cases:
        with pytest.raises(lm.UserError) as ei:
            lm.local_map(fn, two)(x)
        assert text in ei.value.message
    with pytest.raises(lm.InvalidArgumentError) as ei:
        lm.local_map(lambda s: s, [lm.Replicate()], in_placements=[None, None])(x)
    assert "in_placements" in ei.value.message
    with pytest.raises(TypeError):
        lm.local_map(lambda s: s)


def test_gradient_placements_and_record(mesh1):
    """A backward pass built from the record: loss = sum (x_r . w)^2 with x [N, 3] given
    Replicate (fn sees it Shard(0)) and w replicated, w's gradient declared Partial(sum). The
    gradients come back in the inputs' own layouts and equal a serial numpy reference."""
    n = 2 * COMM.size + 1
    xg = (np.arange(n * 3.0).reshape(n, 3) % 7) - 3.0
    wg = np.array([0.5, -1.0, 2.0])
    x = lm.from_global(xg, mesh1, [lm.Replicate()])
    w = lm.from_global(wg, mesh1, [lm.Replicate()])

    @lm.local_map([lm.Partial("sum")], in_placements=[[lm.Shard(0)], None], reshard_inputs=True,
                  in_grad_placements=[None, [lm.Partial("sum")]], record=True)
    def loss(xs, ws):
        return np.array((xs @ ws) ** 2).sum(keepdims=False).reshape(())

    y, rec = loss(x, w)
    assert isinstance(rec, lm.LocalMapRecord)
    assert rec.input(0) == (lm.Replicate(),) and rec.seen(0) == (lm.Shard(0),)
    assert rec.in_grad(0) == (lm.Shard(0),) and rec.in_grad(1) == (lm.Partial("sum"),)
    assert rec.out(0) == (lm.Partial("sum"),) and rec.out_grad(0) == (lm.Replicate(),)
    assert rec.placements(lm.RECORD_IN, 1) == (lm.Replicate(),)
    np.testing.assert_allclose(y.gather(), ((xg @ wg) ** 2).sum())

    g = 1.5
    dloss = lm.from_global(np.array(g), mesh1, list(rec.out_grad(0)))

    @lm.local_map([list(rec.in_grad(0)), list(rec.in_grad(1))],
                  in_placements=[list(rec.out_grad(0)), list(rec.seen(0)), list(rec.seen(1))],
                  reshard_inputs=True)
    def loss_backward(gs, xs, ws):
        d = 2.0 * float(gs) * (xs @ ws)
        return np.outer(d, ws), xs.T @ d

    dx_view, dw_view = loss_backward(dloss, x, w)
    dx, dw = rec.input_grad(0, dx_view), rec.input_grad(1, dw_view)
    assert dx.placements == (lm.Replicate(),) and dw.placements == (lm.Replicate(),)
    d = 2.0 * g * (xg @ wg)
    np.testing.assert_allclose(dx.local(), np.outer(d, wg))   # replicated: whole on every rank
    np.testing.assert_allclose(dw.local(), xg.T @ d)
    with pytest.raises(lm.InvalidArgumentError, match="inputs\\[0\\]"):
        rec.input_grad(0, dw_view)                           # the wrong global shape
    with pytest.raises(lm.InvalidArgumentError, match="in_grad_placements: 1 entries for 2"):
        lm.local_map(lambda a, b: None, (), in_grad_placements=[None])(x, w)
    rec.close()
    with pytest.raises(lm.InvalidArgumentError, match="used after close"):
        rec.in_grad(0)
