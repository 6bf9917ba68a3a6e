# SPDX-License-Identifier: BSD-3-Clause
"""Mesh options (check level, timeout), device options (streams, allocators, transports) and
lm_tensor_alloc arrays, including as local_map outputs."""
import gc
import os

import numpy as np
import pytest
from mpi4py import MPI

import localmap as lm
from localmap import _lib

COMM = MPI.COMM_WORLD


def needs(*names):
    """Skips (with the reason) while the loaded library predates these functions; once the
    library has them the test runs."""
    missing = [n for n in names if n in _lib.MISSING]
    return pytest.mark.skipif(bool(missing), reason=f"the loaded liblocalmap lacks "
                              f"{', '.join(missing)} (older than this binding)")


has_timeout = lm.status_string(lm.ERR_TIMEOUT).startswith("LM_ERR_TIMEOUT")


@pytest.mark.skipif(not has_timeout, reason="the loaded liblocalmap has no mesh config v2 "
                    "(check_level, timeout) yet")
def test_check_level_and_timeout():
    for level in (0, 1, 2):
        with lm.Mesh([COMM.size], check_level=level, timeout=30.0) as m:
            with lm.from_global(np.arange(5.0), m, [lm.Shard(0)]) as t:
                assert t.gather().tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(lm.InvalidArgumentError) as ei:
        lm.Mesh([COMM.size], check_level=7)
    assert "check_level" in ei.value.message
    assert issubclass(lm.TimeoutError, lm.Error) and issubclass(lm.TimeoutError, TimeoutError)
    assert lm.status_string(lm.ERR_TIMEOUT).startswith("LM_ERR_TIMEOUT")


@needs("lm_mesh_set_device_config", "lm_mesh_device_config", "lm_mesh_transport")
def test_device_config(mesh1):
    assert mesh1.device_config() == {"stream": None, "alloc": None, "free": None}
    calls = []

    def alloc(nbytes, device_id, stream):
        calls.append(("alloc", nbytes))
        return 0

    def free(ptr, nbytes, device_id, stream):
        calls.append(("free", nbytes))

    mesh1.set_device_config(stream=0x1234, alloc=alloc, free=free)
    cfg = mesh1.device_config()
    assert cfg["stream"] == 0x1234 and cfg["alloc"] is alloc and cfg["free"] is free
    mesh1.set_device_config()                       # back to the defaults
    assert mesh1.device_config()["stream"] is None
    with pytest.raises(lm.InvalidArgumentError):
        mesh1.set_device_config(alloc=alloc)        # alloc without free
    assert mesh1.transport("cpu") == "mpi"
    assert not calls                                # host tensors never use a device allocator


# Whether the library was built with CUDA, decided outside it from the build's switch
# (tests/run-tests.sh and tests/script_python.sh export it); unset: the test says so and skips.
CUDA_BUILD = os.environ.get("LM_CUDA_BUILD")


@needs("lm_mesh_transport")
@pytest.mark.skipif(CUDA_BUILD not in ("0", "1"), reason="LM_CUDA_BUILD is not 0 or 1 (set by "
                    "tests/script_python.sh from the build's CUDA switch): no answer to pin")
def test_cuda_transport(mesh1):
    if CUDA_BUILD == "0":                           # CUDA=0: refused, naming the build
        with pytest.raises(lm.NotSupportedError) as ei:
            mesh1.transport("cuda")
        assert "CUDA=0" in ei.value.message
    else:                                           # a fresh mesh: no device data moved yet
        assert mesh1.transport("cuda") == "undecided"


@needs("lm_tensor_alloc")
def test_tensor_alloc():
    a = lm.tensor_alloc((3, 4), np.float32)
    assert a.shape == (3, 4) and a.dtype == np.float32 and a.flags.writeable
    assert not a.any() and a.ctypes.data % 64 == 0
    a[:] = 7
    s = lm.tensor_alloc((), np.int64)                # 0-d
    assert s.shape == () and s == 0
    with pytest.raises(lm.InvalidArgumentError) as ei:
        lm.tensor_alloc((-1,), np.float64)
    assert "shape" in ei.value.message
    with pytest.raises(lm.NotSupportedError):
        lm.tensor_alloc((2,), np.float64, device="cuda:0")


@needs("lm_tensor_alloc")
def test_tensor_alloc_outputs_and_scalars(mesh1):
    x = lm.from_global(np.arange(12.0), mesh1, [lm.Shard(0)])
    kept = {}

    @lm.local_map(out_placements=([lm.Partial("sum")], [lm.Shard(0)]))
    def fn(shard):
        total = lm.tensor_alloc((), np.float64)      # a true scalar
        total[()] = shard.sum()
        doubled = lm.tensor_alloc(shard.shape, shard.dtype)
        np.multiply(shard, 2, out=doubled)
        kept["doubled"] = doubled
        return total, doubled

    total, doubled = fn(x)
    assert total.shape == () and total.gather() == 66.0
    assert np.shares_memory(doubled.local(), kept.pop("doubled"))   # no copy
    np.testing.assert_array_equal(doubled.gather(), 2 * np.arange(12.0))
    gc.collect()
    np.testing.assert_array_equal(doubled.gather(), 2 * np.arange(12.0))
