# SPDX-License-Identifier: BSD-3-Clause
"""DLPack both ways: dist tensor shards to numpy / torch without copies, and numpy / torch
tensors (or any __dlpack__ producer) in as shards without copies; capsule ownership rules."""
import gc

import numpy as np
import pytest
from mpi4py import MPI

import localmap as lm
from localmap import _dlpack

COMM = MPI.COMM_WORLD

try:
    import torch
except ImportError as e:  # pragma: no cover - depends on the environment
    torch = None
    TORCH_WHY = f"import torch failed ({e}); the PyTorch DLPack tests need PyTorch"


class Producer:
    """A minimal DLPack producer (not numpy) wrapping an array, to exercise the capsule path."""

    def __init__(self, a):
        self.a = a

    def __dlpack__(self, stream=None):
        return self.a.__dlpack__()

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


def test_shard_to_numpy_without_copy(mesh1):
    t = lm.from_global(np.arange(10.0), mesh1, [lm.Shard(0)])
    assert t.__dlpack_device__() == (1, 0)
    a = np.from_dlpack(t)
    off, n = lm.chunk(10, COMM.size, COMM.rank)
    assert a.tolist() == list(range(off, off + n))
    v = t.local()
    if n:
        assert np.shares_memory(a, v)
    t.close()
    gc.collect()
    assert a.tolist() == list(range(off, off + n))  # the capsule's reference keeps the shard
    c = lm.from_global(np.arange(4.0), mesh1, [lm.Replicate()])
    cp = np.from_dlpack(c, copy=True) if np.lib.NumpyVersion(np.__version__) >= "2.1.0" \
        else np.array(c.local())
    assert not np.shares_memory(cp, c.local()) and cp.tolist() == [0, 1, 2, 3]


def test_unconsumed_capsule_releases_its_reference(mesh1):
    t = lm.from_global(np.arange(4.0), mesh1, [lm.Replicate()])
    caps = [t.__dlpack__() for _ in range(3)]   # three references on the tensor
    del caps                                     # the capsule destructor calls each deleter
    gc.collect()
    t.close()                                    # a leak would keep the storage: not visible,
    #  but a double release would crash here or at exit (ASan runs catch it)


def test_producer_in_without_copy(mesh1):
    gc.collect()
    base = np.arange(6.0).reshape(2, 3) + 10 * COMM.rank
    p = Producer(base)
    t = lm.from_dlpack(p, mesh1, [lm.Shard(0)])
    assert t.shape == (2 * COMM.size, 3)
    assert np.shares_memory(t.local(), base)
    base[0, 0] = -7.0
    assert t.gather()[2 * COMM.rank, 0] == -7.0
    t.close()
    # non-compact producers are copied
    q = Producer(np.arange(12.0).reshape(3, 4)[:, ::2])
    with lm.from_dlpack(q, mesh1, [lm.Replicate()]) as u:
        np.testing.assert_array_equal(u.local(), np.arange(12.0).reshape(3, 4)[:, ::2])
        assert not np.shares_memory(u.local(), q.a)


class Capsule:
    """Hands one given capsule to a consumer."""

    def __init__(self, cap, device):
        self.cap, self.device = cap, device

    def __dlpack__(self, stream=None, **kwargs):
        return self.cap

    def __dlpack_device__(self):
        return self.device


def test_versions_and_copy(mesh1):
    t = lm.from_global(np.arange(3.0), mesh1, [lm.Replicate()])
    legacy = np.from_dlpack(Capsule(t.__dlpack__(), t.__dlpack_device__()))
    assert legacy.tolist() == [0, 1, 2] and np.shares_memory(legacy, t.local())
    versioned = np.from_dlpack(Capsule(t.__dlpack__(max_version=(1, 0)), (1, 0)))
    assert np.shares_memory(versioned, t.local())
    if np.lib.NumpyVersion(np.__version__) >= "2.1.0":   # numpy reads DLPack 1.0 flags
        assert versioned.flags.writeable
        versioned[0] = 9.0
        assert t.gather()[0] == 9.0
    a = np.from_dlpack(Capsule(t.__dlpack__(copy=True), (1, 0)))
    assert a.tolist() == t.local().tolist() and not np.shares_memory(a, t.local())
    held = len(_dlpack._versioned)          # `versioned` holds one
    unused = [t.__dlpack__(max_version=(1, 0)) for _ in range(2)]
    assert len(_dlpack._versioned) == held + 2
    del unused                   # unconsumed versioned capsules release their references
    gc.collect()
    assert len(_dlpack._versioned) == held
    del versioned
    gc.collect()
    assert len(_dlpack._versioned) == held - 1
    with pytest.raises(BufferError):
        t.__dlpack__(dl_device=(2, 0))


@pytest.mark.skipif(torch is None, reason=TORCH_WHY if torch is None else "")
def test_torch_both_ways(mesh1):
    x = torch.arange(12, dtype=torch.float32).reshape(4, 3) + 100 * COMM.rank
    t = lm.from_dlpack(x, mesh1, [lm.Shard(0)])        # torch -> localmap, shared
    assert t.shape == (4 * COMM.size, 3) and t.dtype == np.float32
    x[0, 0] = -1
    assert t.gather()[4 * COMM.rank, 0] == -1
    y = torch.from_dlpack(t)                            # localmap -> torch, shared
    assert y.shape == (4, 3) and y[0, 0].item() == -1
    y[1, 1] = 5
    assert x[1, 1].item() == 5
    b = torch.ones(2, 2, dtype=torch.bfloat16)
    with lm.from_dlpack(b, mesh1, [lm.Replicate()]) as tb:
        assert torch.from_dlpack(tb).dtype == torch.bfloat16

    @lm.local_map(out_placements=[lm.Partial("sum")])
    def torch_sum(shard):
        return torch.tensor([float(shard.sum())], dtype=torch.float64)  # a torch output
    assert torch_sum(t).gather()[0] == float(t.gather().sum())


def test_bfloat16_without_numpy_dtype(mesh1):
    if _dlpack._BFLOAT16 is not None:
        pytest.skip("ml_dtypes is installed: numpy has a bfloat16 here")
    with lm.zeros(mesh1, [2], "bfloat16", [lm.Replicate()]) as t:
        assert t.dtype == "bfloat16"
        with pytest.raises(lm.NotSupportedError) as ei:
            t.local()
        assert "bfloat16" in ei.value.message
        with pytest.raises(lm.NotSupportedError):
            t.gather()
