# SPDX-License-Identifier: BSD-3-Clause
"""Dist tensors from numpy: every dtype, uneven and 2-D layouts, zero-copy shards in and out,
copies where the layout does not allow sharing, reshards, Partial reductions, lifetime."""
import gc

import numpy as np
import pytest
from mpi4py import MPI

import localmap as lm
from localmap import _dlpack

COMM = MPI.COMM_WORLD
DTYPES = [np.float16, np.float32, np.float64, np.int8, np.int16, np.int32, np.int64, np.uint8,
          np.bool_, np.complex64, np.complex128]


def full_of(shape, dtype):
    a = np.arange(int(np.prod(shape))).reshape(shape)
    if dtype == np.bool_:
        return (a % 3 == 0)
    if np.issubdtype(dtype, np.complexfloating):
        return (a + 1j * a).astype(dtype)
    return (a % 100).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_roundtrip_every_dtype(mesh1, dtype):
    full = full_of((7, 3), dtype)  # 7 rows: uneven on 2, 3, 4 ranks
    with lm.from_global(full, mesh1, [lm.Shard(0)]) as t:
        assert t.dtype == np.dtype(dtype) and t.shape == (7, 3) and t.ndim == 2
        off, n = lm.chunk(7, COMM.size, COMM.rank)
        assert t.local_offset == (off, 0) and t.local_shape == (n, 3)
        np.testing.assert_array_equal(t.local(), full[off:off + n])
        np.testing.assert_array_equal(t.gather(), full)


def test_2d_mesh_layouts(mesh2):
    full = full_of((5, 6), np.float64)
    for pl in ([lm.Shard(0), lm.Shard(1)], [lm.Shard(1), lm.Replicate()],
               [lm.Shard(0, order=1), lm.Shard(0)], [lm.Replicate(), lm.Replicate()]):
        with lm.from_global(full, mesh2, pl) as t:
            assert t.placements == tuple(pl)
            o, s = t.local_offset, t.local_shape
            np.testing.assert_array_equal(t.local(), full[o[0]:o[0] + s[0], o[1]:o[1] + s[1]])
            np.testing.assert_array_equal(t.gather(), full)
            for dst in ([lm.Replicate(), lm.Shard(0)], [lm.Shard(1), lm.Shard(0)]):
                with t.reshard(dst) as r:
                    assert r.placements == tuple(dst)
                    np.testing.assert_array_equal(r.gather(), full)


def test_gather_to_root_and_scatter_from_root(mesh1):
    full = full_of((9, 2), np.int32)
    with lm.from_global(full if COMM.rank == 0 else None, mesh1, [lm.Shard(0)], root=0) as t:
        off, n = lm.chunk(9, COMM.size, COMM.rank)
        np.testing.assert_array_equal(t.local(), full[off:off + n])
        g = t.gather(root=COMM.size - 1)
        if COMM.rank == COMM.size - 1:
            np.testing.assert_array_equal(g, full)
        else:
            assert g is None


def test_from_local_shares_memory_and_keeps_it_alive(mesh1):
    gc.collect()
    before = _dlpack.live_managed_count()
    a = np.full((2, 3), float(COMM.rank))
    t = lm.from_local(a, mesh1, [lm.Shard(0)], shape_mode="even")
    assert t.shape == (2 * COMM.size, 3)
    assert _dlpack.live_managed_count() == before + 1
    a[0, 0] = 42.0                       # the tensor sees writes to the array ...
    v = t.local()
    assert v[0, 0] == 42.0 and np.shares_memory(v, a)
    v[1, 2] = -1.0                       # ... and the array sees writes through the tensor
    assert a[1, 2] == -1.0
    del a, v
    gc.collect()
    g = t.gather()                       # the array lives on inside the tensor
    assert g[2 * COMM.rank, 0] == 42.0 and g[2 * COMM.rank + 1, 2] == -1.0
    t.close()
    assert _dlpack.live_managed_count() == before   # the deleter released the array


def test_from_local_copies_when_layout_does_not_allow(mesh1):
    base = np.arange(12.0).reshape(3, 4) + 100 * COMM.rank
    a = base.T                           # not C-contiguous: copied (strided copy in C)
    with lm.from_local(a, mesh1, [lm.Shard(0)]) as t:
        assert t.shape == (4 * COMM.size, 3)
        v = t.local()
        np.testing.assert_array_equal(v, a)
        assert not np.shares_memory(v, base)
    b = np.arange(6, dtype=np.float32).reshape(2, 3)
    with lm.from_local(b, mesh1, [lm.Replicate()], copy=True) as t:
        assert not np.shares_memory(t.local(), b) and t.shape == (2, 3)
    ro = np.arange(4.0)
    ro.flags.writeable = False           # read-only memory is never shared
    with lm.from_local(ro, mesh1, [lm.Replicate()]) as t:
        assert not np.shares_memory(t.local(), ro)
    be = np.arange(4, dtype=">i4")       # non-native byte order: copied to native
    with lm.from_local(be, mesh1, [lm.Replicate()]) as t:
        assert t.dtype == np.int32 and t.local().tolist() == [0, 1, 2, 3]


def test_from_local_shape_modes(mesh1):
    total = 2 * COMM.size + 1            # uneven: the last rank holds one row less
    off, n = lm.chunk(total, COMM.size, COMM.rank)
    local = np.arange(off * 2, (off + n) * 2, dtype=np.float64).reshape(n, 2)
    with lm.from_local(local, mesh1, [lm.Shard(0)]) as t:  # shape_mode "allgather" (default)
        assert t.shape == (total, 2) and t.local_offset == (off, 0)
        np.testing.assert_array_equal(t.gather(), np.arange(total * 2.0).reshape(total, 2))
    with lm.from_local(local, mesh1, [lm.Shard(0)], global_shape=(total, 2)) as t:
        assert t.shape == (total, 2)
    with lm.from_local(np.ones((2, 2)), mesh1, [lm.Shard(1)], shape_mode="even") as t:
        assert t.shape == (2, 2 * COMM.size)
    with pytest.raises(lm.InvalidArgumentError) as ei:
        lm.from_local(local, mesh1, [lm.Shard(0)], global_shape=(total + 5, 2))
    assert "lm_dist_tensor_from_dlpack" in ei.value.message and "global" in ei.value.message
    with pytest.raises(lm.InvalidArgumentError) as ei:
        lm.from_local(local, mesh1, [lm.Shard(0)], shape_mode="sideways")
    assert "shape_mode" in ei.value.message


def test_zeros_partial_and_views(mesh1):
    with lm.zeros(mesh1, [4, 2], "float32", [lm.Partial("sum")]) as z:
        assert z.device == (1, 0) and z.placements == (lm.Partial("sum"),)
        z.local()[:] = COMM.rank + 1     # local() is a writable view
        np.testing.assert_array_equal(z.gather(), np.full((4, 2), sum(range(1, COMM.size + 1))))
        with z.reshard([lm.Replicate()]) as r:
            assert r.local()[0, 0] == sum(range(1, COMM.size + 1))
    with lm.zeros(mesh1, [4], np.int64, [lm.Partial("max")]) as z:
        z.local()[:] = COMM.rank
        assert z.gather().tolist() == [COMM.size - 1] * 4


def test_local_view_outlives_close(mesh1):
    t = lm.from_global(np.arange(8.0), mesh1, [lm.Replicate()])
    v = t.local()
    addr, shape, dt = t.local_view()
    assert shape == (8,) and dt == np.float64 and addr == v.ctypes.data
    t.close()
    gc.collect()
    assert v.tolist() == list(range(8))  # the view holds its own reference
    with pytest.raises(lm.InvalidArgumentError):
        t.shape


def test_retain(mesh1):
    t = lm.from_global(np.arange(3), mesh1, [lm.Replicate()])
    u = t.retain()
    t.close()
    assert u.gather().tolist() == [0, 1, 2]
    u.close()


def test_bad_inputs(mesh1):
    with pytest.raises(lm.InvalidArgumentError) as ei:
        lm.from_global(np.arange(3.0), mesh1, "S(0)")
    assert "placements" in ei.value.message
    with pytest.raises(lm.InvalidArgumentError) as ei:
        lm.from_global(np.arange(3.0), mesh1, [lm.Shard(3)])
    assert ei.value.status == lm.ERR_INVALID_ARGUMENT and "placements" in ei.value.message
    with pytest.raises(lm.Error) as ei:
        lm.zeros(mesh1, [2], np.uint16, [lm.Replicate()])
    assert "dtype" in ei.value.message
    with pytest.raises(lm.InvalidArgumentError) as ei:
        lm.zeros(mesh1, [2], "not-a-dtype", [lm.Replicate()])
    assert "dtype" in ei.value.message
    with pytest.raises(lm.InvalidArgumentError):
        lm.zeros("mesh", [2], np.float64, [lm.Replicate()])
    with pytest.raises(lm.InvalidArgumentError):
        lm.Partial("mean")
    with pytest.raises(lm.NotSupportedError):
        lm.zeros(mesh1, [2], np.float64, [lm.Replicate()], device="cuda")


def test_placements_objects():
    assert lm.Shard(1) == lm.Shard(1) and lm.Shard(1) != lm.Shard(0)
    assert repr(lm.Partial("avg")) == "Partial('avg')" and repr(lm.Replicate()) == "Replicate()"
    assert lm.format_placements([lm.Shard(0), lm.Replicate(), lm.Partial("sum")]) == \
        "[S(0), R, P(sum)]"
    assert len({lm.Shard(0), lm.Shard(0), lm.Replicate()}) == 2


def test_pool_stats(mesh1):
    gc.collect()
    used0, _ = lm.pool_stats(reset_peak=True)
    with lm.zeros(mesh1, [1 << 16], np.float64, [lm.Replicate()]) as t:
        used, peak = lm.pool_stats()
        assert used >= used0 + 8 * (1 << 16) and peak >= used
        del t
    gc.collect()
    used2, peak2 = lm.pool_stats()
    assert used2 <= used and peak2 >= peak
