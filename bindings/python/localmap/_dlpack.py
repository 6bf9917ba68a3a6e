# SPDX-License-Identifier: BSD-3-Clause
"""DLPack in pure Python: dtype maps, numpy <-> DLTensor, DLManagedTensor from numpy arrays, and
PyCapsules ("dltensor", "dltensor_versioned") in both directions, through ctypes and the CPython
capsule API."""
import ctypes
from ctypes import CFUNCTYPE, PYFUNCTYPE, c_char_p, c_int, c_int64, c_void_p, py_object

import numpy as np

from ._lib import (DLDataType, DLDevice, DLManagedTensor, DLManagedTensorDeleter,
                   DLManagedTensorVersioned, DLPackVersion, DLTensor)
from ._wrappers import (ERR_INVALID_ARGUMENT, ERR_NOT_SUPPORTED, InvalidArgumentError,
                        NotSupportedError)

# DLPack codes (dlpack.h; bool is DLPack 0.8's kDLBool, which localmap uses with DLPack 0.6).
kDLInt, kDLUInt, kDLFloat, kDLBfloat, kDLComplex, kDLBool = 0, 1, 2, 4, 5, 6
kDLCPU, kDLCUDA, kDLCUDAHost = 1, 2, 3
DEVICE_NAMES = {kDLCPU: "cpu", kDLCUDA: "cuda", kDLCUDAHost: "cuda_host", 4: "opencl",
                7: "vulkan", 8: "metal", 9: "vpi", 10: "rocm", 11: "rocm_host", 13: "cuda_managed",
                14: "oneapi"}
_DEVICE_CODES = {v: k for k, v in DEVICE_NAMES.items()}

try:  # numpy has no bfloat16; ml_dtypes (JAX's) provides one when installed
    import ml_dtypes as _ml_dtypes
    _BFLOAT16 = np.dtype(_ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - depends on the environment
    _BFLOAT16 = None

_KIND_CODE = {"f": kDLFloat, "i": kDLInt, "u": kDLUInt, "c": kDLComplex, "b": kDLBool}
_CODE_KIND = {code: kind for kind, code in _KIND_CODE.items()}  # (bool: "b1")


def _bad(message):
    return InvalidArgumentError(ERR_INVALID_ARGUMENT, message)


def dl_dtype(dtype, argname="dtype"):
    """A DLDataType for a numpy dtype (or anything np.dtype accepts, "bfloat16", a DLDataType)."""
    if isinstance(dtype, DLDataType):
        return dtype
    if isinstance(dtype, str) and dtype == "bfloat16":
        return DLDataType(kDLBfloat, 16, 1)
    try:
        dt = np.dtype(dtype)
    except TypeError as e:
        raise _bad(f"{argname}: {dtype!r} is not a dtype ({e})") from None
    if _BFLOAT16 is not None and dt == _BFLOAT16:
        return DLDataType(kDLBfloat, 16, 1)
    if dt.kind not in _KIND_CODE or dt.fields is not None or dt.subdtype is not None:
        raise _bad(f"{argname}: numpy dtype {dt} has no DLPack equivalent")
    if not dt.isnative:
        raise _bad(f"{argname}: numpy dtype {dt} is not in native byte order")
    return DLDataType(_KIND_CODE[dt.kind], dt.itemsize * 8, 1)


def np_dtype(dl):
    """The numpy dtype of a DLDataType, or the string "bfloat16" when numpy cannot hold it."""
    code, bits, lanes = dl.code, dl.bits, dl.lanes
    if lanes == 1:
        if code == kDLBfloat and bits == 16:
            return _BFLOAT16 if _BFLOAT16 is not None else "bfloat16"
        kind = _CODE_KIND.get(code)
        if kind is not None and bits % 8 == 0:
            try:
                return np.dtype(f"{kind}{bits // 8}")
            except TypeError:
                pass
    return f"dlpack(code={code}, bits={bits}, lanes={lanes})"


def require_np_dtype(dl, what):
    dt = np_dtype(dl)
    if isinstance(dt, str):
        hint = " (install ml_dtypes for a numpy bfloat16)" if dt == "bfloat16" else ""
        raise NotSupportedError(ERR_NOT_SUPPORTED, f"{what}: numpy has no dtype for {dt}{hint}; "
                                "use DLPack (__dlpack__) with a framework that has it")
    return dt


def dl_device(device, argname="device"):
    """A DLDevice from "cpu", "cuda", "cuda:1", a (type, id) pair or a DLDeviceType code."""
    if isinstance(device, DLDevice):
        return device
    if isinstance(device, str):
        name, _, idx = device.partition(":")
        if name in _DEVICE_CODES and (idx == "" or idx.isdigit()):
            return DLDevice(_DEVICE_CODES[name], int(idx or 0))
    elif isinstance(device, (tuple, list)) and len(device) == 2:
        return DLDevice(int(device[0]), int(device[1]))
    elif isinstance(device, int):
        return DLDevice(device, 0)
    raise _bad(f"{argname}: {device!r} is not a device (\"cpu\", \"cuda:0\", or a (DLDeviceType, "
               "id) pair)")


def device_tuple(dev):
    return (int(dev.device_type), int(dev.device_id))


def _describe(t, a, argname):
    """Fills DLTensor t over host numpy array a: compact, or with a's strides in elements when
    it is not C-contiguous (the arrays t points to are kept by t itself)."""
    isz = a.dtype.itemsize
    t.data = a.ctypes.data or None
    t.device = DLDevice(kDLCPU, 0)
    t.ndim = a.ndim
    t.dtype = dl_dtype(a.dtype, argname)
    t.shape = (c_int64 * max(a.ndim, 1))(*a.shape)
    if not a.flags.c_contiguous and a.size:
        t.strides = (c_int64 * max(a.ndim, 1))(*(s // isz for s in a.strides))
    t.byte_offset = 0
    return t


def _whole_strides(a):
    """Whether numpy array a's strides are whole, non-negative elements (DLPack's strides)."""
    isz = a.dtype.itemsize
    return a.flags.c_contiguous or (isz > 0 and all(s % isz == 0 and s >= 0 for s in a.strides))


# ---------------------------------------------------------------------------------------------
# numpy -> DLTensor (borrowed for the duration of one call)
# ---------------------------------------------------------------------------------------------
def borrow(array, argname):
    """A DLTensor describing a host array (numpy, anything np.asarray takes, or a DLPack
    producer), which it keeps alive (as its `array`): keep the tensor while C reads it. Strides
    are given in elements when the array is not C-contiguous (numpy's byte strides must be whole
    elements; otherwise the array is copied)."""
    if not isinstance(array, np.ndarray) and hasattr(array, "__dlpack__"):
        array = np.from_dlpack(array)
    a = np.asarray(array)
    if not a.dtype.isnative:
        a = a.astype(a.dtype.newbyteorder("="))
    if not _whole_strides(a):
        a = np.ascontiguousarray(a)
    t = _describe(DLTensor(), a, f"{argname}.dtype")
    t.array = a
    return t


# ---------------------------------------------------------------------------------------------
# numpy -> DLManagedTensor (ownership passes to the C library; its deleter drops the array)
# ---------------------------------------------------------------------------------------------
_live = {}  # address of a DLManagedTensor we made -> (struct, numpy array)


def _release(addr, _live=_live):
    # Called by the C library (with the GIL taken by ctypes). Only drops Python references.
    _live.pop(addr, None)


_deleter = DLManagedTensorDeleter(_release)


def managed_from_array(array):
    """A DLManagedTensor* (as an int) over an aligned, native-order numpy array, without
    copying: C-contiguous, or with strides in whole elements (the C side says which it takes: a
    padded host shard, e.g. a ScaLAPACK array with LLD_ > LOCr). The array stays alive until the
    C side calls the deleter."""
    if array.size and not _whole_strides(array):
        raise _bad("the array's strides are not whole elements")
    m = DLManagedTensor()
    _describe(m.dl_tensor, array, "dtype")
    m.manager_ctx = None
    m.deleter = _deleter
    addr = ctypes.addressof(m)
    _live[addr] = (m, array)
    return addr


def release_managed(addr):
    """Calls the deleter of a DLManagedTensor that C did not take."""
    if addr:
        m = DLManagedTensor.from_address(addr)
        if m.deleter:
            m.deleter(addr)


def live_managed_count():
    """How many DLManagedTensors made from numpy arrays the C library still holds (for tests)."""
    return len(_live)


def zero_copy_ok(a):
    return (isinstance(a, np.ndarray) and a.flags.c_contiguous and a.flags.aligned and
            a.flags.writeable and a.dtype.isnative)


# ---------------------------------------------------------------------------------------------
# PyCapsules
# ---------------------------------------------------------------------------------------------
_api = ctypes.pythonapi
_PyCapsule_New = PYFUNCTYPE(py_object, c_void_p, c_void_p, c_void_p)(("PyCapsule_New", _api))
_PyCapsule_GetPointer = PYFUNCTYPE(c_void_p, py_object, c_char_p)(("PyCapsule_GetPointer", _api))
_PyCapsule_SetName = PYFUNCTYPE(c_int, py_object, c_void_p)(("PyCapsule_SetName", _api))
_PyCapsule_IsValid = PYFUNCTYPE(c_int, py_object, c_char_p)(("PyCapsule_IsValid", _api))
# Raw-pointer variants for the destructor, which must not make new references to a dying capsule.
_PyCapsule_IsValid_raw = PYFUNCTYPE(c_int, c_void_p, c_char_p)(("PyCapsule_IsValid", _api))
_PyCapsule_GetPointer_raw = PYFUNCTYPE(c_void_p, c_void_p, c_char_p)(("PyCapsule_GetPointer",
                                                                      _api))

# Capsule names must outlive every capsule: C strings that are never freed.
_strdup = ctypes.CDLL(None).strdup
_strdup.restype = c_void_p
_strdup.argtypes = [c_char_p]
_NAMES = {n: _strdup(n) for n in (b"dltensor", b"used_dltensor", b"dltensor_versioned")}


def _destructor(name, release):
    """The destructor of capsules `name`: an unconsumed (not renamed) one still owns its struct,
    which release(address) frees. (Kept alive by the module, as every capsule may call it.)"""
    def destructor(cap):
        if _PyCapsule_IsValid_raw(cap, name):
            ptr = _PyCapsule_GetPointer_raw(cap, name)
            if ptr:
                release(ptr)
    return CFUNCTYPE(None, c_void_p)(destructor)


def _capsule(addr, name, destructor):
    return _PyCapsule_New(addr, _NAMES[name], ctypes.cast(destructor, c_void_p).value)


_legacy_destructor = _destructor(b"dltensor", release_managed)


def capsule_from_managed(addr):
    """A "dltensor" PyCapsule owning the DLManagedTensor at addr (the consumer renames it)."""
    return _capsule(addr, b"dltensor", _legacy_destructor)


# DLPack 1.0: DLManagedTensorVersioned, which can say "writable" (numpy imports legacy
# capsules read-only). Built here around a legacy DLManagedTensor, whose deleter it calls.
DLPACK_FLAG_BITMASK_READ_ONLY = 1
_versioned = {}  # address -> (struct, legacy address)


def _release_versioned(addr, _versioned=_versioned):
    entry = _versioned.pop(addr, None)
    if entry is not None:
        release_managed(entry[1])


_versioned_deleter = CFUNCTYPE(None, c_void_p)(_release_versioned)
_versioned_destructor = _destructor(b"dltensor_versioned", _release_versioned)


def versioned_capsule_from_managed(addr, readonly=False):
    """A "dltensor_versioned" (DLPack 1.0) capsule owning the legacy DLManagedTensor at addr."""
    v = DLManagedTensorVersioned()
    v.version = DLPackVersion(1, 0)
    v.manager_ctx = None
    v.deleter = _versioned_deleter
    v.flags = DLPACK_FLAG_BITMASK_READ_ONLY if readonly else 0
    ctypes.pointer(v.dl_tensor)[0] = DLManagedTensor.from_address(addr).dl_tensor
    vaddr = ctypes.addressof(v)
    _versioned[vaddr] = (v, addr)
    return _capsule(vaddr, b"dltensor_versioned", _versioned_destructor)


def managed_from_capsule(capsule):
    """The DLManagedTensor* (int) inside an unconsumed "dltensor" capsule."""
    if not _PyCapsule_IsValid(capsule, b"dltensor"):
        raise _bad("__dlpack__() did not return an unconsumed \"dltensor\" capsule")
    return _PyCapsule_GetPointer(capsule, b"dltensor")


def mark_consumed(capsule):
    """Renames the capsule to "used_dltensor": its DLManagedTensor now belongs to someone else."""
    _PyCapsule_SetName(capsule, _NAMES[b"used_dltensor"])


def dltensor_is_compact(t):
    if not t.strides:
        return True
    expect = 1
    for i in range(t.ndim - 1, -1, -1):
        if t.shape[i] != 1 and t.strides[i] != expect:
            return False
        expect *= t.shape[i]
    return True


# ---------------------------------------------------------------------------------------------
# DLTensor -> numpy views
# ---------------------------------------------------------------------------------------------
class _View:
    """Exposes memory described by a DLTensor through __array_interface__; `release` (if any)
    runs when the view dies."""
    __slots__ = ("__array_interface__", "_release", "__weakref__")

    def __init__(self, data, shape, strides, dtype, readonly, release=None):
        self.__array_interface__ = {"data": (data, readonly), "shape": shape,
                                    "strides": strides, "typestr": dtype.str,
                                    "descr": dtype.descr, "version": 3}
        self._release = release

    def __del__(self):
        r, self._release = self._release, None
        if r is not None:
            r()


def array_from_managed(addr, what):
    """A writable numpy array over a DLManagedTensor the caller owns (addr): its deleter runs
    when the last array over it dies."""
    t = DLManagedTensor.from_address(addr).dl_tensor
    return array_from_dltensor(t, what, readonly=False, release=lambda: release_managed(addr))


def array_from_dltensor(t, what, readonly, release=None):
    """A numpy array over the memory of DLTensor t (CPU only). release() runs when the last
    array over it dies; for empty tensors it runs at once and the array owns nothing."""
    try:
        if t.device.device_type not in (kDLCPU, kDLCUDAHost):
            device = DEVICE_NAMES.get(t.device.device_type, "?")
            raise NotSupportedError(ERR_NOT_SUPPORTED, f"{what}: a {device} tensor has no numpy "
                                    "view; use __dlpack__ with a framework for that device")
        dt = require_np_dtype(t.dtype, what)
    except BaseException:
        if release is not None:
            release()
        raise
    shape = tuple(int(t.shape[i]) for i in range(t.ndim))
    strides = None
    if t.strides and not dltensor_is_compact(t):
        strides = tuple(int(t.strides[i]) * dt.itemsize for i in range(t.ndim))
    if 0 in shape or not t.data:
        if release is not None:
            release()
        a = np.empty(shape, dt)
        a.flags.writeable = not readonly
        return a
    return np.asarray(_View(t.data + t.byte_offset, shape, strides, dt, readonly, release))
