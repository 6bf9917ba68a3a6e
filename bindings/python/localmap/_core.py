# SPDX-License-Identifier: BSD-3-Clause
"""The Python API of localmap over the C ABI (see localmap/__init__.py for the overview)."""
import atexit
import builtins
import ctypes
import functools
import numbers
import sys
import threading
import warnings
import weakref
from ctypes import byref, c_char_p, c_int, c_int64, c_void_p

import numpy as np

from . import _dlpack as dl
from . import _lib as L

# =============================================================================================
# Errors
# =============================================================================================


class Error(Exception):
    """A failed localmap call. `status` is the lm_status_t code, `status_name` its name
    (e.g. "LM_ERR_INVALID_ARGUMENT"), `message` the library's message (names the function, the
    argument and the rank)."""

    def __init__(self, status, message):
        self.status = int(status)
        self.message = message
        super().__init__(message)

    @property
    def status_name(self):
        """The status code's name, e.g. "LM_ERR_INVALID_ARGUMENT"."""
        return L.lm_status_string(self.status).decode().split(":")[0]

    def __str__(self):
        return f"[{self.status_name}] {self.message}"


class InvalidArgumentError(Error, ValueError):
    """LM_ERR_INVALID_ARGUMENT: a bad argument; the call had no effect."""


class InvalidUsageError(Error):
    """LM_ERR_INVALID_USAGE: a valid argument at the wrong time (rank not in the mesh, ...)."""


class OutOfMemoryError(Error, MemoryError):
    """LM_ERR_OUT_OF_MEMORY."""


class NotSupportedError(Error):
    """LM_ERR_NOT_SUPPORTED: not in this build or version."""


class MismatchError(Error):
    """LM_ERR_MISMATCH: ranks of a collective passed different arguments."""


class MPIError(Error):
    """LM_ERR_MPI: an MPI call failed; the mesh is broken."""


class NCCLError(Error):
    """LM_ERR_NCCL."""


class CUDAError(Error):
    """LM_ERR_CUDA."""


class RemoteError(Error):
    """LM_ERR_REMOTE: another rank of an agreeing collective failed."""


class InternalError(Error):
    """LM_ERR_INTERNAL: a bug in localmap."""


class UserError(Error):
    """LM_ERR_USER: the function given to local_map failed (raised on the failing rank, chained
    to the Python exception the function raised)."""


class TimeoutError(Error, builtins.TimeoutError):  # noqa: A001 - like asyncio.TimeoutError
    """LM_ERR_TIMEOUT: a collective waited longer than the mesh's timeout (or $LM_TIMEOUT); the
    mesh is broken."""


_ERRORS = {12: TimeoutError, 1: InvalidArgumentError, 2: InvalidUsageError, 3: OutOfMemoryError,
           4: NotSupportedError, 5: MismatchError, 6: MPIError, 7: NCCLError, 8: CUDAError,
           9: RemoteError, 10: InternalError, 11: UserError}

SUCCESS, ERR_INVALID_ARGUMENT, ERR_INVALID_USAGE, ERR_OUT_OF_MEMORY, ERR_NOT_SUPPORTED = 0, 1, 2, 3, 4
ERR_MISMATCH, ERR_MPI, ERR_NCCL, ERR_CUDA, ERR_REMOTE, ERR_INTERNAL, ERR_USER = 5, 6, 7, 8, 9, 10, 11
ERR_TIMEOUT = 12


def _raise_status(status, fname, message=None):
    if message is None:
        message = L.lm_last_error_message().decode("utf-8", "replace")
        if not message:
            message = f"{fname}: {L.lm_status_string(status).decode()}"
    raise _ERRORS.get(status, Error)(status, message)


L.raise_status = _raise_status


def _bad(message):
    return InvalidArgumentError(ERR_INVALID_ARGUMENT, message)


# =============================================================================================
# Library, MPI bootstrap
# =============================================================================================
def library_version():
    """(major, minor, patch) of the liblocalmap actually loaded."""
    v = L.lm_get_version()
    return (v // 10000, v // 100 % 100, v % 100)


def library_path():
    """Where the library was loaded from, and how it was found."""
    return L.LOADED_FROM


def status_string(status):
    """The library's name for a status code ("LM_ERR_USER: ...")."""
    return L.lm_status_string(int(status)).decode()


_init_lock = threading.Lock()
_we_registered_finalize = False


def init():
    """Initialises MPI unless it already is (by mpi4py, say); called for you by the first Mesh.
    If this call initialised MPI, finalize() runs at interpreter exit."""
    global _we_registered_finalize
    with _init_lock:
        L.lm_init(None, None)
        if not _we_registered_finalize:
            _we_registered_finalize = True
            atexit.register(_finalize_at_exit)


def _finalize_at_exit():
    try:
        L.lm_finalize()
    except Error as e:  # pragma: no cover - nothing to do at exit but say it
        print(f"localmap: finalize at exit: {e}", file=sys.stderr)


def finalize():
    """Finalises MPI if init() initialised it (a no-op otherwise, e.g. under mpi4py)."""
    L.lm_finalize()


def comm_world():
    """MPI_COMM_WORLD as a Fortran handle (int)."""
    init()
    c = c_int()
    L.lm_comm_world(byref(c))
    return c.value


def world_rank():
    """(rank, size) in MPI_COMM_WORLD."""
    init()
    r, n = c_int(), c_int()
    L.lm_world_rank(byref(r), byref(n))
    return r.value, n.value


def device_supported(device):
    """Whether this build can hold tensors on a device type ("cpu", "cuda", or a code)."""
    d = dl.dl_device(device)
    s = c_int()
    L.lm_device_supported(d.device_type, byref(s))
    return bool(s.value)


def chunk(n, parts, index):
    """torch.chunk layout: (offset, length) of block `index` of `parts` over an extent n."""
    off, ln = c_int64(), c_int64()
    L.lm_layout_chunk(int(n), int(parts), int(index), byref(off), byref(ln))
    return off.value, ln.value


def tensor_alloc(shape, dtype, device="cpu"):
    """A zero-filled, 64-byte aligned local array from localmap's buffer pool (lm_tensor_alloc):
    a numpy array whose memory the library frees when the array dies. Handy for local_map
    outputs (returned without a copy). Local; needs no MPI."""
    shp, n = _shape_c(shape, "shape")
    p = c_void_p()
    L.lm_tensor_alloc(byref(p), n, shp, dl.dl_dtype(dtype), dl.dl_device(device))
    m = L.DLManagedTensor.from_address(p.value)
    return dl.array_from_dltensor(m.dl_tensor, "tensor_alloc", readonly=False,
                                  release=functools.partial(dl.release_managed, p.value))


def pool_stats(reset_peak=False):
    """(bytes in use, high-water mark) of the library's host buffer pool on this process (tensor
    storage, reshard staging); reset_peak=True then sets the mark to the bytes in use. Local."""
    used, peak = c_int64(), c_int64()
    L.lm_pool_stats(byref(used), byref(peak), 1 if reset_peak else 0)
    return used.value, peak.value


def _comm_f(comm, argname="comm"):
    """A Fortran communicator handle from None (COMM_WORLD), an int, or an mpi4py Comm."""
    if comm is None:
        return comm_world()
    init()
    if isinstance(comm, numbers.Integral) and not isinstance(comm, bool):
        return int(comm)
    py2f = getattr(comm, "py2f", None)
    if py2f is None:
        raise _bad(f"{argname}: {type(comm).__name__} is not a communicator (pass an mpi4py "
                   "Comm, a Fortran handle int, or None for MPI_COMM_WORLD)")
    return int(py2f())


def _mpi4py_comm(handle_f):
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise NotSupportedError(ERR_NOT_SUPPORTED, f"mpi4py is not importable ({e}); the "
                                f"Fortran handle is {handle_f} (the *_f variant returns it)") from None
    return MPI.Comm.f2py(handle_f)


# =============================================================================================
# Placements
# =============================================================================================
REPLICATE, SHARD, PARTIAL, RAGGED, BLOCK_CYCLIC = 0, 1, 2, 3, 4
REDUCE_OPS = ("sum", "avg", "max", "min", "prod")


class Placement:
    """How one mesh dim holds a tensor: Shard(d), Replicate(), Partial(op), RaggedShard(d, ...)
    or BlockCyclic(d, block). The fields are the C struct's, each with one meaning (0 where it
    does not apply): kind, dim, order, reduce_op, block, source (the extents id is private)."""
    __slots__ = ("kind", "dim", "order", "reduce_op", "block", "source", "_eid")

    def __init__(self, kind, dim=0, order=0, reduce_op=0, block=0, source=0, eid=0):
        self.kind, self.dim, self.order = int(kind), int(dim), int(order)
        self.reduce_op, self.block, self.source, self._eid = \
            int(reduce_op), int(block), int(source), int(eid)

    def _key(self):
        return (self.kind, self.dim, self.order, self.reduce_op, self._eid, self.block,
                self.source)

    def _c(self):
        return L.lm_placement_t(*self._key(), 0)

    def __eq__(self, other):
        return isinstance(other, Placement) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    def __repr__(self):
        if self.kind == SHARD:
            return f"Shard({self.dim}" + (f", order={self.order})" if self.order else ")")
        if self.kind == REPLICATE:
            return "Replicate()"
        if self.kind == PARTIAL:
            op = self.reduce_op
            return f"Partial({REDUCE_OPS[op] if 0 <= op < len(REDUCE_OPS) else op!r})"
        return "Placement(" + ", ".join(f"{k}={v}" for k, v in zip(
            ("kind", "dim", "order", "reduce_op", "extents", "block", "source"), self._key())) + ")"

    def is_shard(self, dim=None):
        """Whether this is a Shard (of tensor dim `dim` when given)."""
        return self.kind == SHARD and (dim is None or self.dim == dim)

    def is_replicate(self):
        """Whether this is Replicate()."""
        return self.kind == REPLICATE

    def is_partial(self):
        """Whether this is a Partial (of any reduce op)."""
        return self.kind == PARTIAL


class Shard(Placement):
    """Tensor dim `dim` is split along the mesh dim like torch.chunk. `order`: co-shard order
    when several mesh dims shard the same tensor dim (lowest splits first)."""
    __slots__ = ()

    def __init__(self, dim, order=0):
        super().__init__(SHARD, dim, order)


class Replicate(Placement):
    """Every rank along the mesh dim holds the full value."""
    __slots__ = ()

    def __init__(self):
        super().__init__(REPLICATE)


class Partial(Placement):
    """Each rank holds a partial value; the value is their reduction by `op`:
    "sum", "avg", "max", "min" or "prod"."""
    __slots__ = ()

    def __init__(self, op="sum"):
        if isinstance(op, str):
            if op not in REDUCE_OPS:
                raise _bad(f"Partial: op {op!r} is not one of {', '.join(REDUCE_OPS)}")
            op = REDUCE_OPS.index(op)
        super().__init__(PARTIAL, reduce_op=op)


class RaggedShard(Placement):
    """Tensor dim `dim` is split along the mesh dim into the given `extents`, one length per
    coordinate (empty ones allowed): PETSc ownership ranges, numpy.array_split, load-balanced
    partitions. It must split its tensor dim first (Shard dims of higher `order` split each
    block like torch.chunk). The extents are registered with the library (lm_extents_create)
    while this object lives; tensors made from it keep their own.

    extents=None (LM_EXTENTS_AGREED): the ranks' local shapes give the extents, in from_local
    with shape_mode "allgather" and in local_map outputs without a given shape; the tensor's
    placements then read back with the agreed extents."""
    __slots__ = ("extents", "_id")  # the lengths; the reference this object holds

    def __init__(self, dim, extents=None, order=0):
        self._id = 0
        if extents is None:
            super().__init__(RAGGED, dim, order)
            self.extents = None
            return
        try:
            ext = tuple(int(e) for e in extents)
        except TypeError:
            raise _bad(f"RaggedShard: extents must be a sequence of lengths or None, got "
                       f"{type(extents).__name__}") from None
        ident = ctypes.c_int32()
        L.lm_extents_create(byref(ident), (c_int64 * max(len(ext), 1))(*ext), len(ext))
        super().__init__(RAGGED, dim, order, eid=ident.value)
        self.extents, self._id = ext, ident.value

    def __del__(self):
        try:
            if self._id:
                L.lm_extents_destroy(self._id)
        except Exception:  # interpreter shutdown: the library may be gone
            pass

    def __eq__(self, other):
        return isinstance(other, RaggedShard) and (self.dim, self.order, self.extents) == \
            (other.dim, other.order, other.extents)

    def __hash__(self):
        return hash((RAGGED, self.dim, self.order, self.extents))

    def __repr__(self):
        ext = "" if self.extents is None else f", {list(self.extents)}"
        return f"RaggedShard({self.dim}{ext}" + (f", order={self.order})" if self.order else ")")


class BlockCyclic(Placement):
    """Blocks of `block` elements of tensor dim `dim` dealt round-robin over the mesh dim,
    starting at coordinate `src` (ScaLAPACK's MB/NB and RSRC/CSRC); each rank keeps its blocks
    in order. Two of them on a 2-D mesh give ScaLAPACK's 2-D block-cyclic layout. It must be the
    only mesh dim splitting its tensor dim; Partial dims may sit beside it."""
    __slots__ = ()

    def __init__(self, dim, block, src=0):
        super().__init__(BLOCK_CYCLIC, dim, block=block, source=src)

    def __repr__(self):
        return f"BlockCyclic({self.dim}, {self.block}" + (f", src={self.source})" if self.source else ")")


def _placement_from_c(p):
    if p.kind == BLOCK_CYCLIC:
        return BlockCyclic(p.dim, p.block, p.source)
    if p.kind == RAGGED:
        n = c_int64()
        L.lm_extents_get(p.extents, None, 0, byref(n))
        ext = (c_int64 * max(n.value, 1))()
        L.lm_extents_get(p.extents, ext, n.value, byref(n))
        return RaggedShard(p.dim, ext[:n.value], p.order)
    if p.kind == SHARD:
        return Shard(p.dim, p.order)
    if p.kind == REPLICATE:
        return Replicate()
    if p.kind == PARTIAL and 0 <= p.reduce_op < len(REDUCE_OPS):
        return Partial(REDUCE_OPS[p.reduce_op])
    return Placement(p.kind, p.dim, p.order, p.reduce_op, p.block, p.source, p.extents)


def _placements_c(placements, argname, ndim=None):
    """A ctypes array of lm_placement_t from a sequence of Placement objects. With `ndim` (the
    mesh's), there must be exactly one placement per mesh dim: the C library reads that many, so a
    shorter list would be read past its end and a longer one silently cut."""
    if isinstance(placements, Placement):
        placements = [placements]
    try:
        items = list(placements)
    except TypeError:
        raise _bad(f"{argname}: expected a sequence of placements (Shard(d), Replicate(), "
                   f"Partial(op)), got {type(placements).__name__}") from None
    for i, p in enumerate(items):
        if not isinstance(p, Placement):
            raise _bad(f"{argname}[{i}]: {p!r} is not a placement (Shard(d), Replicate(), "
                       "Partial(op))")
    if ndim is not None and len(items) != ndim:
        raise _bad(f"{argname}: {len(items)} placements for a mesh of {ndim} dims (one per "
                   "mesh dim)")
    return (L.lm_placement_t * max(len(items), 1))(*(p._c() for p in items)), len(items)


def placements_adjoint(placements):
    """The placements of a gradient, PyTorch DTensor's convention: Partial('sum') becomes
    Replicate(), Shard and Replicate are kept; Partial avg/max/min/prod raise NotSupportedError."""
    arr, n = _placements_c(placements, "placements")
    out = (L.lm_placement_t * max(n, 1))()
    L.lm_placements_adjoint(arr, n, out)
    return tuple(_placement_from_c(out[i]) for i in range(n))


def format_placements(placements):
    """The library's short form, e.g. "[S(0), R, P(sum)]"."""
    arr, n = _placements_c(placements, "placements")
    buf = ctypes.create_string_buffer(64 + 32 * n)
    L.lm_placements_format(arr, n, buf, len(buf))
    return buf.value.decode()


def _shape_c(shape, argname):
    if isinstance(shape, numbers.Integral):
        shape = (shape,)
    try:
        items = [int(e) for e in shape]
    except (TypeError, ValueError):
        raise _bad(f"{argname}: expected a sequence of ints, got {shape!r}") from None
    return (c_int64 * max(len(items), 1))(*items), len(items)


# =============================================================================================
# Handles
# =============================================================================================
class _Handle:
    """A C handle owned by this object: close() (or leaving a `with` block, or garbage
    collection) calls the local, non-collective destroy."""
    _destroy = None  # the lm_*_destroy function
    _what = "handle"
    _byref = staticmethod(byref)  # still reachable from __del__ at interpreter exit

    def __init__(self, handle):
        self._h = c_void_p(handle)

    def _handle(self):
        h = self._h
        if h is None or not h.value:
            raise _bad(f"localmap.{type(self).__name__}: used after close()")
        return h

    @property
    def closed(self):
        """Whether close() released this object's handle (any use then raises)."""
        return self._h is None or not self._h.value

    def close(self):
        """Releases this object's reference (local, never collective; safe to call twice)."""
        h, self._h = getattr(self, "_h", None), None
        if h is not None and h.value:
            type(self)._destroy(_Handle._byref(h))

    destroy = close

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - nothing can be raised from a finaliser
            pass

    def __eq__(self, other):
        """Same C handle (open objects only)."""
        if type(other) is not type(self) or self.closed or other.closed:
            return False
        try:
            return self._handle().value == other._handle().value
        except Error:
            return False

    def __hash__(self):
        return hash(type(self))  # handles of borrowed meshes may change: keep eq-consistent


class Mesh(_Handle):
    """An N-D grid of MPI ranks.

    Mesh(shape, comm=None, *, ranks=None, dim_names=None, check_level=None, timeout=None):
    collective over `comm` (an mpi4py communicator, a Fortran handle int, or None for
    MPI_COMM_WORLD; agrees). `ranks`: the ranks of comm forming the mesh, row-major (default all,
    in order). Ranks of comm outside the mesh get a handle whose is_member is False.
    check_level: argument agreement of its collectives (0 off, 1 fingerprints, 2 also data
    invariants; None: $LM_CHECK). timeout: seconds a collective may wait for the other ranks
    before TimeoutError (0: for ever; None: $LM_TIMEOUT).
    """
    _what = "mesh"

    def __init__(self, shape, comm=None, *, ranks=None, dim_names=None, check_level=None,
                 timeout=None):
        comm_f = _comm_f(comm)
        shp, n = _shape_c(shape, "shape")
        cfg = L.lm_mesh_config_t()
        keep = []
        if ranks is not None:
            try:
                rk = [int(r) for r in ranks]
            except (TypeError, ValueError):
                raise _bad(f"ranks: expected a sequence of ints, got {ranks!r}") from None
            arr = (c_int * max(len(rk), 1))(*rk)
            keep.append(arr)
            cfg.ranks = ctypes.cast(arr, ctypes.POINTER(c_int))
            cfg.nranks = len(rk)
        if dim_names is not None:
            if isinstance(dim_names, str):
                raise _bad("dim_names: expected a sequence of names, got one string")
            names = [str(s).encode() for s in dim_names]
            arr = (c_char_p * max(len(names), 1))(*names)
            keep.append(arr)
            cfg.dim_names = ctypes.cast(arr, ctypes.POINTER(c_char_p))
        if check_level is not None:
            cfg.check_level = int(check_level)
        if timeout is not None:
            cfg.timeout = float(timeout)
        h = c_void_p()
        L.lm_mesh_create(byref(h), comm_f, n, shp, byref(cfg))
        super().__init__(h.value)
        self._owner = None
        self._device_callbacks = None

    @classmethod
    def grid(cls, myrow, mycol, comm=None):
        """The 2-D mesh of a process grid (lm_mesh_create_grid): its coordinate (r, c) is the rank
        of `comm` that passes (myrow, mycol) = (r, c), e.g. what BLACS's gridinfo returns; a rank
        outside the grid passes -1, -1. Collective over comm (None: MPI_COMM_WORLD)."""
        h = c_void_p()
        L.lm_mesh_create_grid(byref(h), _comm_f(comm), int(myrow), int(mycol), None)
        m = cls.__new__(cls)
        _Handle.__init__(m, h.value)
        m._owner = None
        m._device_callbacks = None
        return m

    @classmethod
    def _borrow(cls, handle, owner):
        """A Mesh over a handle this object does not own; `owner` keeps it alive. When `owner`
        is a DistTensor, the handle is asked of the tensor at each use (a tensor's mesh handle
        may be its creator's, which dies when the creator's Mesh is closed)."""
        m = cls.__new__(cls)
        _Handle.__init__(m, handle)
        m._owner = owner
        return m

    def _handle(self):
        owner = getattr(self, "_owner", None)
        if isinstance(owner, DistTensor) and not self.closed:
            h = c_void_p()
            L.lm_dist_tensor_mesh(owner._handle(), byref(h))
            return h
        return _Handle._handle(self)

    def close(self):
        """Releases this Mesh's reference (local, never collective). Tensors and plans on the
        mesh keep it alive. A Mesh obtained from DistTensor.mesh only forgets its handle."""
        if getattr(self, "_owner", None) is not None:
            self._h, self._owner = None, None  # borrowed: nothing to destroy
            return
        super().close()

    destroy = close

    def _int(self, fn):
        v = c_int()
        fn(self._handle(), byref(v))
        return v.value

    @property
    def ndim(self):
        """The number of mesh dims."""
        return self._int(L.lm_mesh_ndim)

    @property
    def shape(self):
        """The mesh extents, one per mesh dim."""
        n = self.ndim
        a = (c_int64 * max(n, 1))()
        L.lm_mesh_shape(self._handle(), a, n)
        return tuple(a[:n])

    @property
    def size(self):
        """Number of ranks in the mesh."""
        return self._int(L.lm_mesh_size)

    @property
    def is_member(self):
        """Whether this rank belongs to the mesh."""
        return bool(self._int(L.lm_mesh_is_member))

    @property
    def coord(self):
        """This rank's coordinate (InvalidUsageError on a non-member)."""
        n = self.ndim
        a = (c_int64 * max(n, 1))()
        L.lm_mesh_coord(self._handle(), a, n)
        return tuple(a[:n])

    @property
    def rank(self):
        """This rank's row-major index in the mesh (InvalidUsageError on a non-member)."""
        return self._int(L.lm_mesh_rank)

    def rank_at(self, coord):
        """The parent-communicator rank at a coordinate."""
        a, n = _shape_c(coord, "coord")
        if n != self.ndim:
            raise _bad(f"rank_at: coord: {n} entries for a mesh of {self.ndim} dims")
        r = c_int()
        L.lm_mesh_rank_at(self._handle(), a, n, byref(r))
        return r.value

    def dim_index(self, name):
        """The index of the mesh dim called `name` (InvalidArgumentError if none)."""
        d = c_int()
        L.lm_mesh_dim_index(self._handle(), str(name).encode(), byref(d))
        return d.value

    def dim_name(self, dim):
        """The name of mesh dim `dim` ("" when unnamed)."""
        buf = ctypes.create_string_buffer(128)
        L.lm_mesh_dim_name(self._handle(), int(dim), buf, len(buf))
        return buf.value.decode()

    @property
    def dim_names(self):
        """The names of the mesh dims ("" for an unnamed one)."""
        return tuple(self.dim_name(d) for d in range(self.ndim))

    def _dim(self, dim):
        return self.dim_index(dim) if isinstance(dim, str) else int(dim)

    def dim_comm_f(self, dim):
        """The communicator along mesh dim `dim` (index or name) as a Fortran handle; owned by
        the mesh. InvalidUsageError on a non-member."""
        c = c_int()
        L.lm_mesh_dim_comm(self._handle(), self._dim(dim), byref(c))
        return c.value

    def dim_comm(self, dim):
        """The communicator along mesh dim `dim` as an mpi4py Comm (imports mpi4py); owned by
        the mesh: do not Free() it."""
        return _mpi4py_comm(self.dim_comm_f(dim))

    @property
    def comm_f(self):
        """The communicator of all mesh ranks as a Fortran handle (owned by the mesh)."""
        return self._int(L.lm_mesh_comm)

    @property
    def comm(self):
        """The communicator of all mesh ranks as an mpi4py Comm (owned by the mesh)."""
        return _mpi4py_comm(self.comm_f)

    # -- devices (CUDA streams and allocators; accepted in builds without CUDA) ----------------
    def set_device_config(self, stream=None, alloc=None, free=None):
        """This rank's device options of the mesh (local). stream: a cudaStream_t as an int
        (e.g. torch.cuda.current_stream().cuda_stream), None for the default stream. alloc and
        free: both None (stream-ordered cudaMallocAsync) or both Python callables,
        alloc(bytes, device_id, stream) -> address (0 on failure) and
        free(address, bytes, device_id, stream), e.g. a framework's caching allocator. The
        callables are kept alive by this Mesh object."""
        cfg = L.lm_device_config_t()
        cfg.stream = stream or None
        callbacks = None
        if alloc is not None or free is not None:
            if not (callable(alloc) and callable(free)):
                raise _bad("set_device_config: alloc and free must both be callables, or both "
                           "None")

            def c_alloc(ctx, nbytes, device_id, strm):
                try:
                    return int(alloc(int(nbytes), int(device_id), strm or 0) or 0) or None
                except BaseException:  # noqa: BLE001 - an allocator failure is a NULL
                    return None

            def c_free(ctx, ptr, nbytes, device_id, strm):
                try:
                    free(ptr or 0, int(nbytes), int(device_id), strm or 0)
                except BaseException:  # noqa: BLE001 - nothing may unwind into C
                    pass
            callbacks = (L.lm_device_alloc_fn_t(c_alloc), L.lm_device_free_fn_t(c_free),
                         alloc, free)
            cfg.alloc, cfg.free = callbacks[0], callbacks[1]
        L.lm_mesh_set_device_config(self._handle(), byref(cfg))
        if self._owner is None:
            self._device_callbacks = callbacks
        elif callbacks is not None:
            _kept_callbacks.append(callbacks)  # a borrowed Mesh: keep them for ever

    def device_config(self):
        """{"stream": int or None, "alloc": ..., "free": ...}: this rank's device options
        (alloc/free: the Python callables set here, else C function addresses or None)."""
        cfg = L.lm_device_config_t()
        L.lm_mesh_device_config(self._handle(), byref(cfg))
        cb = getattr(self, "_device_callbacks", None)

        def addr(f):
            v = ctypes.cast(f, c_void_p).value
            return v or None
        return {"stream": cfg.stream or None,
                "alloc": cb[2] if cb else addr(cfg.alloc),
                "free": cb[3] if cb else addr(cfg.free)}

    def transport(self, device="cuda"):
        """How tensors of a device type move on this mesh: "mpi", "nccl", "mpi_staged", or
        "undecided" (device data has not moved yet). Local."""
        t = c_int()
        L.lm_mesh_transport(self._handle(), dl.dl_device(device).device_type, byref(t))
        return _TRANSPORTS.get(t.value, t.value)

    def __repr__(self):
        if self.closed:
            return "Mesh(<closed>)"
        names = self.dim_names
        nm = f", dim_names={names}" if any(names) else ""
        return f"Mesh(shape={self.shape}{nm}, member={self.is_member})"


Mesh._destroy = staticmethod(L.lm_mesh_destroy)
_TRANSPORTS = {0: "undecided", 1: "mpi", 2: "nccl", 3: "mpi_staged"}
_kept_callbacks = []



# =============================================================================================
# Dist tensors
# =============================================================================================
SHAPE_GIVEN, SHAPE_EVEN, SHAPE_ALLGATHER = 0, 1, 2
_SHAPE_MODES = {"given": SHAPE_GIVEN, "even": SHAPE_EVEN, "allgather": SHAPE_ALLGATHER}
FROM_LOCAL_COPY, FROM_LOCAL_BORROW = 0, 1


def _mesh_h(mesh, argname="mesh"):
    if not isinstance(mesh, Mesh):
        raise _bad(f"{argname}: expected a localmap.Mesh, got {type(mesh).__name__}")
    return mesh._handle()


def _ndim_of(mesh_handle):
    """The ndim of a mesh given by its C handle."""
    v = c_int()
    L.lm_mesh_ndim(mesh_handle, byref(v))
    return v.value


def _tensor_mesh_ndim(tensor_handle):
    """The ndim of a dist tensor's mesh (by C handles: no borrowed Mesh object)."""
    m = c_void_p()
    L.lm_dist_tensor_mesh(tensor_handle, byref(m))
    return _ndim_of(m)


class DistTensor(_Handle):
    """A distributed tensor: a refcounted handle on a tensor laid out over a Mesh.

    Make one with zeros(), from_local(), from_global() or from_dlpack(), or get one from
    reshard() and local_map. The local shard is local() (a numpy view that keeps the tensor
    alive) or any DLPack consumer: np.from_dlpack(t), torch.from_dlpack(t).
    """
    _what = "dist tensor"

    @classmethod
    def _wrap(cls, handle):
        t = cls.__new__(cls)
        _Handle.__init__(t, handle)
        return t

    def __init__(self, *args, **kwargs):
        raise TypeError("make a DistTensor with localmap.zeros/from_local/from_global/"
                        "from_dlpack, DistTensor.reshard or localmap.local_map")

    # -- accessors ------------------------------------------------------------------------
    @property
    def mesh(self):
        """The tensor's mesh (borrowed: valid as long as this Mesh object lives, which keeps a
        reference on the tensor)."""
        m = c_void_p()
        L.lm_dist_tensor_mesh(self._handle(), byref(m))
        return Mesh._borrow(m.value, self.retain())

    @property
    def ndim(self):
        """The number of tensor dims."""
        v = c_int()
        L.lm_dist_tensor_ndim(self._handle(), byref(v))
        return v.value

    def _dl_dtype(self):
        d = L.DLDataType()
        L.lm_dist_tensor_dtype(self._handle(), byref(d))
        return d

    @property
    def dtype(self):
        """The numpy dtype (the string "bfloat16" when numpy has none)."""
        return dl.np_dtype(self._dl_dtype())

    @property
    def device(self):
        """(DLDeviceType, device id), e.g. (1, 0) for the CPU."""
        d = L.DLDevice()
        L.lm_dist_tensor_device(self._handle(), byref(d))
        return dl.device_tuple(d)

    @property
    def placements(self):
        """One Placement per mesh dim."""
        h = self._handle()
        m = c_void_p()
        L.lm_dist_tensor_mesh(h, byref(m))
        n = c_int()
        L.lm_mesh_ndim(m, byref(n))
        arr = (L.lm_placement_t * max(n.value, 1))()
        L.lm_dist_tensor_placements(h, arr, n.value)
        return tuple(_placement_from_c(arr[i]) for i in range(n.value))

    def _shape(self, fn):
        n = self.ndim
        a = (c_int64 * max(n, 1))()
        fn(self._handle(), a, n)
        return tuple(a[:n])

    @property
    def shape(self):
        """The global shape."""
        return self._shape(L.lm_dist_tensor_global_shape)

    global_shape = shape

    @property
    def local_shape(self):
        """The shape of this rank's shard."""
        return self._shape(L.lm_dist_tensor_local_shape)

    def to_scalapack(self, ctxt=0):
        """This tensor's layout as a ScaLAPACK descriptor (9 ints; lm_dist_tensor_to_scalapack):
        the [N, M] tensor read as the column-major M x N matrix; its local shard is the array."""
        d = (c_int * 9)()
        L.lm_dist_tensor_to_scalapack(self._handle(), int(ctxt), d)
        return list(d)

    @property
    def local_offset(self):
        """Global index of the local shard's first element per dim (0 on non-members)."""
        return self._shape(L.lm_dist_tensor_local_offset)

    @property
    def local_extents(self):
        """Extents of the row-major array the local shard lies in (lm_padded_extents): the local
        shape, except for a shard borrowed with padded rows (a ScaLAPACK array with
        LLD_ > LOCr gives (LOCc, LLD_))."""
        v = L.DLTensor()
        L.lm_dist_tensor_local(self._handle(), byref(v))
        ext = (c_int64 * max(v.ndim, 1))()
        L.lm_padded_extents(byref(v), ext, v.ndim)
        return tuple(ext[i] for i in range(v.ndim))

    def local_view(self):
        """(data address, shape, dtype) of the local shard as lm_dist_tensor_local gives it;
        valid while this tensor lives (prefer local(), which keeps it alive)."""
        v = L.DLTensor()
        L.lm_dist_tensor_local(self._handle(), byref(v))
        return v.data or 0, tuple(v.shape[i] for i in range(v.ndim)), dl.np_dtype(v.dtype)

    def local(self):
        """The local shard as a writable numpy array sharing the tensor's memory; the array
        keeps the tensor alive (even after close())."""
        addr = self._export()
        m = L.DLManagedTensor.from_address(addr)
        return dl.array_from_dltensor(m.dl_tensor, "DistTensor.local", readonly=False,
                                      release=functools.partial(dl.release_managed, addr))

    numpy = local

    def _export(self):
        p = c_void_p()
        L.lm_dist_tensor_to_dlpack(self._handle(), byref(p))
        return p.value

    # -- DLPack producer --------------------------------------------------------------------
    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """The local shard as a DLPack capsule holding a reference on the tensor: DLPack 1.0
        ("dltensor_versioned", writable) when the consumer's max_version allows, else the legacy
        "dltensor". copy=True exports a copy of the shard."""
        if dl_device is not None and tuple(dl_device) != self.device:
            raise BufferError(f"DistTensor.__dlpack__: the shard is on {self.device}, not "
                              f"{tuple(dl_device)}")
        if copy:
            c = np.array(self.local(), copy=True)
            return c.__dlpack__() if max_version is None else \
                c.__dlpack__(max_version=max_version)
        addr = self._export()
        if max_version is not None and tuple(max_version)[0] >= 1:
            return dl.versioned_capsule_from_managed(addr)
        return dl.capsule_from_managed(addr)

    def __dlpack_device__(self):
        return self.device

    # -- references -----------------------------------------------------------------------
    def retain(self):
        """A new DistTensor object holding its own reference on the same tensor."""
        h = self._handle()
        L.lm_dist_tensor_retain(h)
        return DistTensor._wrap(h.value)

    # -- collectives ----------------------------------------------------------------------
    def gather(self, root=-1):
        """The full value (Partial reduced) as a numpy array: on every member rank (root < 0)
        or only on mesh rank `root` (None elsewhere). Collective over the mesh."""
        h = self._handle()
        dt = dl.require_np_dtype(self._dl_dtype(), "DistTensor.gather")
        m = self.mesh
        member = m.is_member
        receive = member and (root < 0 or m.rank == root)
        m.close()
        if not receive:
            L.lm_dist_tensor_gather(h, int(root), None)
            return None
        out = np.empty(self.shape, dtype=dt)
        b = dl.Borrowed(out, "dst")
        L.lm_dist_tensor_gather(h, int(root), byref(b.tensor))
        return out

    def reshard(self, placements, mesh=None):
        """A tensor with this value and `placements` on `mesh` (default: this tensor's mesh).
        Collective over both meshes. A Replicate -> Shard reshard may return a view sharing
        memory with this tensor."""
        mh = None if mesh is None else _mesh_h(mesh)
        nd = _tensor_mesh_ndim(self._handle()) if mh is None else _ndim_of(mh)
        pl, _ = _placements_c(placements, "placements", nd)
        out = c_void_p()
        L.lm_dist_tensor_reshard(byref(out), self._handle(), mh, pl)
        return DistTensor._wrap(out.value)

    redistribute = reshard

    def transpose(self, perm, placements, mesh=None):
        """This tensor with its dims permuted as numpy.transpose(x, perm) (a matrix: (1, 0)),
        laid out with `placements` (in the result's dims) on `mesh` (default: this tensor's
        mesh); lm_dist_tensor_transpose. Host or device tensors. Collective over both meshes."""
        mh = None if mesh is None else _mesh_h(mesh)
        nd = _tensor_mesh_ndim(self._handle()) if mh is None else _ndim_of(mh)
        pl, _ = _placements_c(placements, "placements", nd)
        p = [int(d) for d in perm]
        if len(p) != len(self.shape):
            raise InvalidArgumentError(1, f"transpose: perm has {len(p)} entries, the tensor "
                                       f"{len(self.shape)} dims")
        cp = (c_int * max(len(p), 1))(*p)
        out = c_void_p()
        L.lm_dist_tensor_transpose(byref(out), self._handle(), cp, mh, pl)
        return DistTensor._wrap(out.value)

    def transpose_into(self, dst, perm):
        """Writes this tensor with its dims permuted as numpy.transpose(x, perm) into `dst` (a
        DistTensor whose global shape is this one's permuted, of the same dtype, with its own
        mesh and placements; a padded borrow keeps its padding); lm_dist_tensor_transpose_into.
        dst on this tensor's device (host or CUDA). Collective over both meshes."""
        if not isinstance(dst, DistTensor):
            raise InvalidArgumentError(1, "transpose_into: dst is not a DistTensor")
        p = [int(d) for d in perm]
        if len(p) != len(self.shape):
            raise InvalidArgumentError(1, f"transpose_into: perm has {len(p)} entries, the tensor "
                                       f"{len(self.shape)} dims")
        cp = (c_int * max(len(p), 1))(*p)
        L.lm_dist_tensor_transpose_into(dst._handle(), self._handle(), cp)

    def __repr__(self):
        if self.closed:
            return "DistTensor(<closed>)"
        pl = format_placements(self.placements)
        return (f"DistTensor(shape={self.shape}, dtype={self.dtype}, placements={pl}, "
                f"local_shape={self.local_shape})")


DistTensor._destroy = staticmethod(L.lm_dist_tensor_destroy)


def zeros(mesh, shape, dtype, placements, device="cpu"):
    """A zero-filled tensor; each member rank allocates its shard. Local."""
    mh = _mesh_h(mesh)
    shp, n = _shape_c(shape, "shape")
    pl, _ = _placements_c(placements, "placements", _ndim_of(mh))
    out = c_void_p()
    L.lm_dist_tensor_zeros(byref(out), mh, n, shp, dl.dl_dtype(dtype), dl.dl_device(device), pl)
    return DistTensor._wrap(out.value)


def _shape_mode(global_shape, shape_mode):
    if global_shape is not None:
        if shape_mode not in (None, "given"):
            raise _bad(f"shape_mode: {shape_mode!r} with a global_shape (which means \"given\")")
        return (SHAPE_GIVEN,) + _shape_c(global_shape, "global_shape")
    mode = _SHAPE_MODES.get(shape_mode or "allgather")
    if mode is None or mode == SHAPE_GIVEN:
        raise _bad(f"shape_mode: {shape_mode!r} is not \"allgather\" or \"even\" (or pass "
                   "global_shape)")
    return mode, None, None


def _check_given(n_given, ndim):
    """The C library reads one global extent per dim of the local tensor."""
    if n_given is not None and n_given != ndim:
        raise _bad(f"global_shape: {n_given} extents for a local tensor of {ndim} dims")


def from_local(local, mesh, placements, *, global_shape=None, shape_mode=None, copy=None):
    """A tensor from this rank's shard `local` (a numpy array, anything np.asarray takes, or a
    DLPack producer such as a torch tensor).

    The global shape: `global_shape` if given (local), else shape_mode "allgather" (default:
    one small collective over the mesh, right for uneven shards) or "even" (local extent times
    mesh extent; no communication).

    copy=None (default) shares the shard's memory when its layout allows (C-contiguous, aligned,
    writable, native byte order; DLPack: compact row-major): the tensor then keeps `local`
    alive and writes through either show in both. copy=True always copies.
    """
    mh = _mesh_h(mesh)
    pl, _ = _placements_c(placements, "placements", _ndim_of(mh))
    mode, gs, n_given = _shape_mode(global_shape, shape_mode)
    out = c_void_p()
    if not isinstance(local, np.ndarray) and hasattr(local, "__dlpack__"):
        cap = local.__dlpack__()
        addr = dl.managed_from_capsule(cap)
        m = L.DLManagedTensor.from_address(addr)
        _check_given(n_given, m.dl_tensor.ndim)  # (the capsule still owns the tensor)
        if not copy and dl.dltensor_is_compact(m.dl_tensor):
            L.lm_dist_tensor_from_dlpack(byref(out), mh, addr, pl, mode, gs)
            dl.mark_consumed(cap)  # the tensor owns it now; on failure the capsule still does
        else:
            L.lm_dist_tensor_from_local(byref(out), mh, byref(m.dl_tensor), pl, mode, gs,
                                        FROM_LOCAL_COPY)
        return DistTensor._wrap(out.value)
    a = np.asarray(local)
    _check_given(n_given, a.ndim)
    if not copy and dl.zero_copy_ok(a):
        addr = dl.managed_from_array(a)
        try:
            L.lm_dist_tensor_from_dlpack(byref(out), mh, addr, pl, mode, gs)
        except BaseException:
            dl.release_managed(addr)  # on failure ownership stays with us
            raise
    else:
        b = dl.Borrowed(a, "local")
        L.lm_dist_tensor_from_local(byref(out), mh, byref(b.tensor), pl, mode, gs,
                                    FROM_LOCAL_COPY)
    return DistTensor._wrap(out.value)


def from_scalapack(a, desc, mesh, copy=None):
    """A tensor over a ScaLAPACK local array (lm_dist_tensor_from_scalapack).

    `a` is this rank's local array of the M x N matrix that `desc` (the 9-int descriptor)
    describes, as ScaLAPACK keeps it: column-major with leading dimension LLD_ = desc[8] (a numpy
    array of shape (LLD_, LOCc), or its flat buffer). The tensor is the matrix's row-major view:
    global shape [N, M], placements [BlockCyclic(1, MB_, RSRC_), BlockCyclic(0, NB_, CSRC_)] over
    `mesh`, the 2-D process grid [NPROW, NPCOL]. copy=None shares a's memory (the tensor keeps `a`
    alive; with LLD_ > LOCr its local view is a strided slice of `a`); copy=True copies.
    """
    mh = _mesh_h(mesh)
    d = [int(x) for x in desc]
    if len(d) != 9:
        raise InvalidArgumentError(1, f"from_scalapack: desc has {len(d)} entries, not 9")
    a = np.asarray(a)
    if a.ndim == 1:
        if a.size % max(d[8], 1):
            raise InvalidArgumentError(1, f"from_scalapack: a has {a.size} elements, not a "
                                       f"multiple of desc[8] (LLD_) = {d[8]}")
        a = a.reshape((max(d[8], 1), a.size // max(d[8], 1)), order="F")
    if a.ndim != 2:
        raise InvalidArgumentError(1, f"from_scalapack: a has {a.ndim} dims; a ScaLAPACK local "
                                   "array has 2 (LLD_, LOCc)")
    if a.shape[0] != max(d[8], 1) and a.size:
        raise InvalidArgumentError(1, f"from_scalapack: a has {a.shape[0]} rows, desc[8] (LLD_) "
                                   f"says {d[8]}")
    at = np.asfortranarray(a).T  # the row-major [LOCc, LLD_] view of the same bytes
    cd = (c_int * 9)(*d)
    b = dl.Borrowed(at, "a")
    out = c_void_p()
    share = not copy and dl.zero_copy_ok(at)
    flags = FROM_LOCAL_BORROW if share else FROM_LOCAL_COPY
    L.lm_dist_tensor_from_scalapack(byref(out), mh, cd, b.tensor.data, b.tensor.dtype,
                                    b.tensor.device, flags)
    t = DistTensor._wrap(out.value)
    if not share:
        return t
    # The checked borrow gives the layout; the tensor that keeps `a` alive adopts it.
    pl, shape, local = t.placements, t.shape, t.local_shape
    t.close()
    addr = dl.managed_from_array(at[:local[0], :local[1]] if local else at[:0, :0])
    plc, _ = _placements_c(pl, "placements", _ndim_of(mh))
    gs = (c_int64 * 2)(*shape)
    try:
        L.lm_dist_tensor_from_dlpack(byref(out), mh, addr, plc, SHAPE_GIVEN, gs)
    except BaseException:
        dl.release_managed(addr)
        raise
    return DistTensor._wrap(out.value)


def from_dlpack(x, mesh, placements, **kwargs):
    """from_local for any DLPack producer (numpy, torch, ...): zero-copy when compact."""
    return from_local(x, mesh, placements, **kwargs)


def from_global(full, mesh, placements, root=-1):
    """A tensor from the full tensor. root < 0: every rank passes `full` and members keep their
    slice (local; a copy). root >= 0: only mesh rank `root` passes it (others None) and it is
    scattered (collective over the mesh)."""
    mh = _mesh_h(mesh)
    pl, _ = _placements_c(placements, "placements", _ndim_of(mh))
    out = c_void_p()
    if full is None:
        L.lm_dist_tensor_from_global(byref(out), mh, None, pl, int(root))
    else:
        if not isinstance(full, np.ndarray) and hasattr(full, "__dlpack__"):
            full = np.from_dlpack(full)
        b = dl.Borrowed(np.asarray(full), "global")
        L.lm_dist_tensor_from_global(byref(out), mh, byref(b.tensor), pl, int(root))
    return DistTensor._wrap(out.value)


# =============================================================================================
# Persistent reshard plans and requests
# =============================================================================================
_unfinished = []  # requests dropped in flight: kept (with their tensors) so nothing is freed


class ReshardPlan(_Handle):
    """A persistent plan for one (source layout, target layout, dtype, global shape). Local.

    ReshardPlan(src_mesh, src_placements, dst_mesh, dst_placements, shape, dtype)
    """
    _what = "reshard plan"

    def __init__(self, src_mesh, src_placements, dst_mesh, dst_placements, shape, dtype):
        sm = _mesh_h(src_mesh, "src_mesh")
        dm = _mesh_h(dst_mesh, "dst_mesh")
        sp, _ = _placements_c(src_placements, "src_placements", _ndim_of(sm))
        dp, _ = _placements_c(dst_placements, "dst_placements", _ndim_of(dm))
        shp, n = _shape_c(shape, "shape")
        h = c_void_p()
        L.lm_reshard_plan_create(byref(h), sm, sp, dm, dp, n, shp, dl.dl_dtype(dtype))
        super().__init__(h.value)
        self._request = None

    def alloc_target(self, device="cpu"):
        """A zero-filled tensor laid out as the plan's target. Local."""
        out = c_void_p()
        L.lm_reshard_plan_alloc_target(byref(out), self._handle(), dl.dl_device(device))
        return DistTensor._wrap(out.value)

    def execute(self, src, dst=None):
        """Runs the plan from src into dst (allocated with alloc_target() when None); returns
        dst. Collective over the ranks of both meshes."""
        if dst is None:
            dst = self.alloc_target(src.device)
        L.lm_reshard_plan_execute(self._handle(), src._handle(), dst._handle())
        return dst

    def start(self, src, dst=None):
        """Starts the plan without waiting; returns a Request (its .dst is the target). Do not
        touch src or dst until the request completes."""
        if dst is None:
            dst = self.alloc_target(src.device)
        r = c_void_p()
        L.lm_reshard_plan_start(byref(r), self._handle(), src._handle(), dst._handle())
        req = Request(r.value, self, src, dst)
        self._request = weakref.ref(req)
        return req

    @property
    def bytes_sent(self):
        """Bytes this rank sends to other ranks per execution (info()["bytes_sent"]: local)."""
        i = L.lm_reshard_plan_info_t()
        L.lm_reshard_plan_info(self._handle(), 0, byref(i))
        return i.bytes_sent

    def adjoint(self):
        """The backward plan: a gradient in placements_adjoint(target placements) on the target
        mesh to placements_adjoint(source placements) on the source mesh. Local."""
        h = c_void_p()
        L.lm_reshard_plan_adjoint(byref(h), self._handle())
        plan = ReshardPlan.__new__(ReshardPlan)
        _Handle.__init__(plan, h.value)
        plan._request = None
        return plan

    def info(self, all_ranks=False):
        """What an execution moves, as a dict (lm_reshard_plan_info): this rank's counts (local),
        or every rank's summed with all_ranks=True (collective over both meshes). 'routes' is a
        set of 'mpi', 'node_local', 'board'."""
        i = L.lm_reshard_plan_info_t()
        L.lm_reshard_plan_info(self._handle(), L.LM_PLAN_INFO_ALL_RANKS if all_ranks else 0,
                               byref(i))
        return _plan_info_dict(i)

    def describe(self):
        """A one-line description of the plan's steps."""
        buf = ctypes.create_string_buffer(4096)
        L.lm_reshard_plan_describe(self._handle(), buf, len(buf))
        return buf.value.decode()

    def close(self):
        """Releases the plan (local). Refused while a request started from it is in flight."""
        req = self._request() if getattr(self, "_request", None) is not None else None
        if req is not None and not req.done:
            raise InvalidUsageError(ERR_INVALID_USAGE, "ReshardPlan.close: a request started "
                                    "from this plan is in flight; wait() for it first")
        _Handle.close(self)

    destroy = close

    def __repr__(self):
        return "ReshardPlan(<closed>)" if self.closed else f"ReshardPlan({self.describe()})"


ReshardPlan._destroy = staticmethod(L.lm_reshard_plan_destroy)


def _plan_info_dict(i):
    """The dict of ReshardPlan.info() and reshard_estimate() from an lm_reshard_plan_info_t."""
    out = {name: getattr(i, name) for name, _ in i._fields_[3:]}
    out["routes"] = {n for bit, n in ((1, "mpi"), (2, "node_local"), (4, "board"))
                     if i.routes & bit}
    return out


def reshard_estimate(src_mesh, src_placements, dst_placements, shape, dtype, dst_mesh=None,
                     all_ranks=False):
    """What a reshard would move, without building a plan (lm_reshard_estimate): the dict
    ReshardPlan(src_mesh, src_placements, dst_mesh or src_mesh, dst_placements, shape,
    dtype).info(all_ranks) would give. Local, unless all_ranks=True (then collective over both
    meshes). For layout searches: no handle, no buffer."""
    sm = _mesh_h(src_mesh, "src_mesh")
    dm = None if dst_mesh is None else _mesh_h(dst_mesh, "dst_mesh")
    sp, _ = _placements_c(src_placements, "src_placements", _ndim_of(sm))
    dp, _ = _placements_c(dst_placements, "dst_placements", _ndim_of(sm if dm is None else dm))
    shp, n = _shape_c(shape, "shape")
    i = L.lm_reshard_plan_info_t()
    L.lm_reshard_estimate(sm, sp, dm, dp, n, shp, dl.dl_dtype(dtype),
                          L.LM_PLAN_INFO_ALL_RANKS if all_ranks else 0, byref(i))
    return _plan_info_dict(i)


def _tensor_array(tensors, argname):
    """(ctypes array of lm_dist_tensor_t, list of DistTensor) from a sequence of DistTensor."""
    if isinstance(tensors, DistTensor):
        tensors = None  # one tensor is not a sequence of them
    try:
        items = list(tensors)
    except TypeError:
        raise _bad(f"{argname}: expected a sequence of localmap.DistTensor") from None
    for i, t in enumerate(items):
        if not isinstance(t, DistTensor):
            raise _bad(f"{argname}[{i}]: expected a localmap.DistTensor, got {type(t).__name__}")
    return (c_void_p * max(len(items), 1))(*(t._handle().value for t in items)), items


class ReshardGroup(_Handle):
    """A persistent grouped reshard (lm_reshard_group_t): N reshards between one pair of meshes
    that run as one. Each step sends one message per peer carrying every entry's bytes (per
    bucket), not one round per tensor; the results are the same bits as one ReshardPlan per
    entry. Local.

    ReshardGroup(src_mesh, entries, dst_mesh=None, bucket_bytes=0, alone_bytes=0): `entries` is
    a sequence of (shape, dtype, src_placements, dst_placements), src_placements one per src_mesh
    dim and dst_placements one per dst_mesh dim (dst_mesh None: src_mesh). bucket_bytes bounds a
    bucket in global bytes (0: the library's default, 64 MiB); an entry above it, or above
    alone_bytes (0: the default, 1 MiB), runs alone through its own plan. len(group) is the
    number of entries.
    """
    _what = "reshard group"

    def __init__(self, src_mesh, entries, dst_mesh=None, bucket_bytes=0, alone_bytes=0):
        sm = _mesh_h(src_mesh, "src_mesh")
        dm = None if dst_mesh is None else _mesh_h(dst_mesh, "dst_mesh")
        snd = _ndim_of(sm)
        dnd = snd if dm is None else _ndim_of(dm)
        try:
            items = list(entries)
        except TypeError:
            raise _bad("entries: expected a sequence of (shape, dtype, src_placements, "
                       f"dst_placements), got {type(entries).__name__}") from None
        arr = (L.lm_reshard_entry_t * max(len(items), 1))()
        keep = []  # the arrays the entries point to, alive during the call (the C copies them)
        for i, e in enumerate(items):
            try:
                shape, dtype, src_pl, dst_pl = e
            except (TypeError, ValueError):
                raise _bad(f"entries[{i}]: expected (shape, dtype, src_placements, "
                           f"dst_placements), got {e!r}") from None
            shp, n = _shape_c(shape, f"entries[{i}].shape")
            sp, _ = _placements_c(src_pl, f"entries[{i}].src_placements", snd)
            dp, _ = _placements_c(dst_pl, f"entries[{i}].dst_placements", dnd)
            keep.append((shp, sp, dp))
            arr[i].ndim = n
            arr[i].global_shape = ctypes.cast(shp, L.P_i64)
            arr[i].dtype = dl.dl_dtype(dtype, f"entries[{i}].dtype")
            arr[i].src_placements = ctypes.cast(sp, L.P_placement)
            arr[i].dst_placements = ctypes.cast(dp, L.P_placement)
        for name, v in (("bucket_bytes", bucket_bytes), ("alone_bytes", alone_bytes)):
            if not isinstance(v, numbers.Integral) or isinstance(v, bool) or v < 0:
                raise _bad(f"{name}: {v!r} is not a byte count >= 0 (0: the default)")
        cfg = None  # NULL: the library's defaults
        if bucket_bytes or alone_bytes:
            cfg = L.lm_reshard_group_config_t()
            cfg.bucket_bytes, cfg.alone_bytes = int(bucket_bytes), int(alone_bytes)
        h = c_void_p()
        L.lm_reshard_group_create(byref(h), sm, dm, len(items), arr,
                                  None if cfg is None else byref(cfg))
        super().__init__(h.value)
        self._request = None

    def _counts(self):
        n, b = c_int(), c_int()
        L.lm_reshard_group_size(self._handle(), byref(n), byref(b))
        return n.value, b.value

    def size(self):
        """The number of entries (len(group))."""
        return self._counts()[0]

    def __len__(self):
        return self.size()

    def __bool__(self):
        return True  # a handle, even of no entries (len() would make an empty group false)

    @property
    def buckets(self):
        """The number of buckets the entries were dealt into (0 for no entries)."""
        return self._counts()[1]

    def alloc_targets(self, device="cpu"):
        """A list of zero-filled tensors laid out as the entries' targets. Local."""
        n = self.size()
        out = (c_void_p * max(n, 1))()
        L.lm_reshard_group_alloc_targets(out, self._handle(), dl.dl_device(device), n)
        return [DistTensor._wrap(out[i]) for i in range(n)]

    def _arrays(self, what, srcs, dsts):
        """The handle arrays, the sources, and the targets (the caller's list when it gave one)."""
        src, srcs = _tensor_array(srcs, "srcs")
        if dsts is None:
            dsts = self.alloc_targets(srcs[0].device if srcs else "cpu")
        dst, items = _tensor_array(dsts, "dsts")
        if len(items) != len(srcs):  # the C call reads one count for both arrays
            raise _bad(f"ReshardGroup.{what}: dsts: {len(items)} tensors for {len(srcs)} srcs")
        return src, srcs, dst, dsts if isinstance(dsts, list) else items

    def execute(self, srcs, dsts=None):
        """Runs every entry, srcs[i] into dsts[i] (allocated with alloc_targets() when None);
        returns the list of targets. Collective over the ranks of both meshes (one agreement for
        the whole group). No target may overlap another target or any source."""
        src, srcs, dst, dsts = self._arrays("execute", srcs, dsts)
        L.lm_reshard_group_execute(self._handle(), len(srcs), src, dst)
        return dsts

    def start(self, srcs, dsts=None):
        """Starts the group without waiting; returns a Request whose wait() returns the list of
        targets. Do not touch the tensors until it completes; one request per group at a time."""
        src, srcs, dst, dsts = self._arrays("start", srcs, dsts)
        r = c_void_p()
        L.lm_reshard_group_start(byref(r), self._handle(), len(srcs), src, dst)
        req = Request(r.value, self, srcs, dsts)
        self._request = weakref.ref(req)
        return req

    def close(self):
        """Releases the group (local). Refused while a request started from it is in flight."""
        req = self._request() if getattr(self, "_request", None) is not None else None
        if req is not None and not req.done:
            raise InvalidUsageError(ERR_INVALID_USAGE, "ReshardGroup.close: a request started "
                                    "from this group is in flight; wait() for it first")
        _Handle.close(self)

    destroy = close

    def __repr__(self):
        if self.closed:
            return "ReshardGroup(<closed>)"
        n, b = self._counts()
        return f"ReshardGroup(entries={n}, buckets={b})"


ReshardGroup._destroy = staticmethod(L.lm_reshard_group_destroy)


def reshard_many(tensors, placements_list, mesh=None):
    """DistTensor.reshard for many tensors of one mesh at once: tensors[i] gets
    placements_list[i] on `mesh` (default: theirs), through one grouped reshard (one message per
    peer and step for all of them): a group made from the tensors' entries, its targets
    allocated on tensors[0]'s device, executed and destroyed. Returns a list of new tensors (on
    failure none is left). Collective over both meshes."""
    src, items = _tensor_array(tensors, "tensors")
    try:
        pls = list(placements_list)
    except TypeError:
        raise _bad("placements_list: expected one list of placements per tensor") from None
    if len(pls) != len(items):
        raise _bad(f"placements_list: {len(pls)} entries for {len(items)} tensors")
    mh = None if mesh is None else _mesh_h(mesh)
    n = len(items)
    if n == 0:
        return []
    sm = c_void_p()
    L.lm_dist_tensor_mesh(items[0]._handle(), byref(sm))
    snd = _ndim_of(sm)
    nd = _ndim_of(mh) if mh is not None else snd
    arrs = [_placements_c(p, f"placements_list[{i}]", nd)[0] for i, p in enumerate(pls)]
    arr = (L.lm_reshard_entry_t * n)()
    keep = []  # the arrays the entries point to, alive during the call (the C copies them)
    for i, t in enumerate(items):
        h = t._handle()
        m = c_void_p()
        L.lm_dist_tensor_mesh(h, byref(m))
        if m.value != sm.value:
            raise _bad(f"reshard_many: tensors[{i}] lives on another mesh than tensors[0] (one "
                       "call moves tensors of one mesh)")
        tnd = t.ndim
        shp = (c_int64 * max(tnd, 1))()
        L.lm_dist_tensor_global_shape(h, shp, tnd)
        sp = (L.lm_placement_t * max(snd, 1))()
        L.lm_dist_tensor_placements(h, sp, snd)
        keep.append((shp, sp))
        arr[i].ndim = tnd
        arr[i].global_shape = ctypes.cast(shp, L.P_i64)
        arr[i].dtype = t._dl_dtype()
        arr[i].src_placements = ctypes.cast(sp, L.P_placement)
        arr[i].dst_placements = ctypes.cast(arrs[i], L.P_placement)
    g = c_void_p()
    L.lm_reshard_group_create(byref(g), sm, mh, n, arr, None)
    out = []
    try:
        dev = L.DLDevice()
        L.lm_dist_tensor_device(items[0]._handle(), byref(dev))
        dst = (c_void_p * n)()
        L.lm_reshard_group_alloc_targets(dst, g, dev, n)
        out = [DistTensor._wrap(dst[i]) for i in range(n)]
        L.lm_reshard_group_execute(g, n, src, dst)
        return out
    except BaseException:
        for t in out:
            t.close()
        raise
    finally:
        L.lm_reshard_group_destroy(byref(g))


class Request:
    """A nonblocking reshard in flight (ReshardPlan.start, ReshardGroup.start): test() makes
    progress, wait() completes it. It keeps its plan or group, sources and targets alive. A
    request dropped unfinished is never completed by the garbage collector (that would be
    collective): it and its tensors are kept, with a ResourceWarning."""

    def __init__(self, handle, plan, src, dst):
        self._h = c_void_p(handle)
        self.plan, self.src, self.dst = plan, src, dst

    @property
    def done(self):
        """Whether the request is complete (wait() or test() finished it)."""
        return not self._h.value

    def test(self):
        """Makes progress; True once complete (the request is then finished)."""
        if self.done:
            return True
        d = c_int()
        L.lm_request_test(byref(self._h), byref(d))
        return bool(d.value)

    def wait(self):
        """Completes the request; returns the target tensor (a ReshardGroup's: the list of
        targets)."""
        if not self.done:
            L.lm_request_wait(byref(self._h))
        return self.dst

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.wait()

    def __del__(self):
        h = getattr(self, "_h", None)
        if h is not None and h.value:
            try:
                _unfinished.append((h, self.plan, self.src, self.dst))
                warnings.warn("localmap.Request dropped before wait(): its tensors are kept "
                              "alive and the plan cannot run again", ResourceWarning)
            except Exception:  # noqa: BLE001
                pass


# =============================================================================================
# local_map
# =============================================================================================
ARG_NONE, ARG_DIST_TENSOR, ARG_TENSOR, ARG_INT64, ARG_DOUBLE, ARG_POINTER, ARG_MANAGED_TENSOR = \
    range(7)
LOCAL_MAP_RESHARD_INPUTS, LOCAL_MAP_NO_AGREE, LOCAL_MAP_SHAPES_EVEN = 1, 2, 4
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1

_calls = {}  # user_data key -> _Call (one per lm_local_map in progress; calls may nest)
_call_lock = threading.Lock()
_next_call = [1]


class _Call:
    __slots__ = ("fn", "args", "kwargs", "with_mesh", "nout", "tensor_out", "views", "exc",
                 "out_objects", "keep", "out_ndims")

    def __init__(self, fn, args, kwargs, with_mesh, tensor_out):
        self.fn, self.args, self.kwargs, self.with_mesh = fn, args, kwargs, with_mesh
        self.nout = len(tensor_out)
        self.tensor_out = tensor_out
        self.views = []
        self.exc = None
        self.out_objects = {}
        self.keep = []
        self.out_ndims = [None] * self.nout  # per output: len(out_shapes[j]), or None


def _output_managed(r, j, views):
    """A DLManagedTensor* for a tensor output of fn. numpy memory is shared unless it aliases an
    input view (whose memory the output must not outlive) or is not compact."""
    if not isinstance(r, (np.ndarray, np.generic)) and hasattr(r, "__dlpack__") and \
            not isinstance(r, DistTensor):
        cap = r.__dlpack__()
        addr = dl.managed_from_capsule(cap)
        t = L.DLManagedTensor.from_address(addr).dl_tensor
        if dl.dltensor_is_compact(t):
            dl.mark_consumed(cap)
            return addr
        r = np.from_dlpack(r)
    if isinstance(r, DistTensor):
        raise TypeError(f"output {j} is a DistTensor; fn works on local shards and returns "
                        "local tensors (numpy arrays or DLPack producers)")
    a = np.asarray(r)
    if a.dtype == object:
        raise TypeError(f"output {j} ({type(r).__name__}) is not a tensor")
    if not a.dtype.isnative:
        a = a.astype(a.dtype.newbyteorder("="))
    if not dl.zero_copy_ok(a) or any(np.may_share_memory(a, v) for v in views):
        a = np.array(a, copy=True, order="C")
    return dl.managed_from_array(a)


def _trampoline(user_data, mesh, nin, inputs, nout, outputs):
    # Runs on every rank inside lm_local_map. Never lets an exception reach C.
    call = _calls.get(user_data)
    if call is None:
        return ERR_INTERNAL
    try:
        args = []
        for i in range(nin):
            a = inputs[i]
            orig = call.args[i]
            if isinstance(orig, DistTensor):
                if a.kind != ARG_TENSOR:
                    raise RuntimeError(f"localmap: input {i} reached fn as kind {a.kind}")
                v = dl.array_from_dltensor(L.DLTensor.from_address(a.ptr), f"input {i}",
                                           readonly=True)
                call.views.append(v)
                args.append(v)
            elif a.kind == ARG_INT64 and isinstance(orig, numbers.Integral):
                args.append(type(orig)(a.i64) if type(orig) is not bool else orig)
            elif a.kind == ARG_DOUBLE:
                args.append(float(a.f64))
            else:
                args.append(orig)
        if call.with_mesh:
            args.insert(0, Mesh._borrow(mesh, True))
        res = call.fn(*args, **call.kwargs)
        if call.nout == 1 and call.tensor_out.single:
            res = (res,)
        elif res is None and call.nout == 0:
            res = ()
        else:
            if not isinstance(res, (tuple, list)):
                raise TypeError(f"fn returned {type(res).__name__}; expected a tuple of "
                                f"{call.nout} outputs")
            if len(res) != call.nout:
                raise TypeError(f"fn returned {len(res)} outputs; expected {call.nout}")
        for j, r in enumerate(res):
            if call.tensor_out[j]:
                want = call.out_ndims[j]
                if want is not None and np.ndim(r) != want:
                    # (the library reads one out_shapes[j] extent per dim of the output)
                    raise ValueError(f"output {j} has {np.ndim(r)} dims but out_shapes[{j}] "
                                     f"has {want} extents")
                try:
                    outputs[j].ptr = _output_managed(r, j, call.views)
                except Error as e:
                    raise TypeError(f"output {j}: {e.message}") from e
                outputs[j].kind = ARG_MANAGED_TENSOR  # ownership passes, even if fn fails later
            elif r is None:
                outputs[j].kind = ARG_NONE
            elif isinstance(r, numbers.Integral) and not isinstance(r, bool) and \
                    _INT64_MIN <= r <= _INT64_MAX:
                outputs[j].i64 = int(r)
                outputs[j].kind = ARG_INT64
            elif isinstance(r, float):
                outputs[j].f64 = r
                outputs[j].kind = ARG_DOUBLE
            else:
                call.out_objects[j] = r
                outputs[j].ptr = id(r)
                outputs[j].kind = ARG_POINTER
        return SUCCESS
    except BaseException as e:  # noqa: BLE001 - everything becomes a status
        call.exc = e
        try:
            msg = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
            L.lm_set_error_message(msg.encode("utf-8", "replace"))
        except BaseException:  # noqa: BLE001
            pass
        return ERR_USER


_trampoline_c = L.lm_local_fn_t(_trampoline)


class _OutSpec(list):
    """Per output: True for a tensor; .single when fn returns one value, not a tuple."""
    single = False


def _out_spec(out_placements, ndim=None):
    """(list of placement arrays or None per output, _OutSpec). ndim: the call's mesh's."""
    if isinstance(out_placements, Placement):
        out_placements = [out_placements]
    try:
        items = list(out_placements)
    except TypeError:
        raise _bad("out_placements: expected placements for one output, or a sequence with one "
                   "entry (placements or None) per output") from None
    single = bool(items) and all(isinstance(p, Placement) for p in items)
    if single:
        items = [items]
    spec = _OutSpec(p is not None for p in items)
    spec.single = single
    arrs = [None if p is None else _placements_c(p, f"out_placements[{j}]", ndim)[0]
            for j, p in enumerate(items)]
    return arrs, spec


def _ptr_array(items, elem_type):
    arr = (ctypes.POINTER(elem_type) * max(len(items), 1))()
    for i, a in enumerate(items):
        if a is not None:
            arr[i] = ctypes.cast(a, ctypes.POINTER(elem_type))
    return arr


def _call_mesh_ndim(args, mesh):
    """The ndim of the call's mesh: `mesh`, else the first dist input's; None for a local call
    (no mesh, no dist input: the library refuses placements itself)."""
    if mesh is not None:
        return _ndim_of(_mesh_h(mesh))
    for a in args:
        if isinstance(a, DistTensor):
            return _tensor_mesh_ndim(a._handle())
    return None


def _placement_table(items, nin, name, ndim, keep):
    """One entry per input (None: NULL) as the C call reads it, or None for no table."""
    if items is None:
        return None
    items = list(items)
    if len(items) != nin:
        raise _bad(f"{name}: {len(items)} entries for {nin} inputs")
    pls = [None if p is None else _placements_c(p, f"{name}[{i}]", ndim)[0]
           for i, p in enumerate(items)]
    keep.append(pls)
    return _ptr_array(pls, L.lm_placement_t)


def _run_local_map(fn, args, kwargs, out_placements, in_placements, out_shapes, mesh, flags,
                   with_mesh, in_grad_placements=None, record=False):
    ndim = _call_mesh_ndim(args, mesh)
    out_arrs, spec = _out_spec(out_placements, ndim)
    nout = len(out_arrs)
    nin = len(args)
    inputs = (L.lm_arg_t * max(nin, 1))()
    keep = []
    for i, a in enumerate(args):
        if isinstance(a, DistTensor):
            inputs[i].kind, inputs[i].ptr = ARG_DIST_TENSOR, a._handle().value
        elif isinstance(a, numbers.Integral) and not isinstance(a, bool) and \
                _INT64_MIN <= a <= _INT64_MAX:
            inputs[i].kind, inputs[i].i64 = ARG_INT64, int(a)
        elif isinstance(a, float):
            inputs[i].kind, inputs[i].f64 = ARG_DOUBLE, a
        elif isinstance(a, np.ndarray):
            try:
                b = dl.Borrowed(a, f"input {i}")
                keep.append(b)
                inputs[i].kind, inputs[i].ptr = ARG_TENSOR, ctypes.addressof(b.tensor)
            except Error:  # no DLPack dtype: it still reaches fn as the Python object
                inputs[i].kind, inputs[i].ptr = ARG_POINTER, id(a)
        elif a is None:
            inputs[i].kind = ARG_NONE
        else:
            inputs[i].kind, inputs[i].ptr = ARG_POINTER, id(a)
    in_pl = _placement_table(in_placements, nin, "in_placements", ndim, keep)
    grad_pl = _placement_table(in_grad_placements, nin, "in_grad_placements", ndim, keep)
    opt, rec = None, c_void_p()
    if grad_pl is not None or record:
        opt = L.lm_local_map_options_t()
        opt.in_grad_placements = None if grad_pl is None else ctypes.cast(grad_pl, c_void_p)
        opt.record = ctypes.addressof(rec) if record else None
    out_pl = _ptr_array(out_arrs, L.lm_placement_t)
    shapes = None
    if out_shapes is not None:
        items = list(out_shapes)
        if len(items) != nout:
            raise _bad(f"out_shapes: {len(items)} entries for {nout} outputs")
        shp = [None if s is None else _shape_c(s, f"out_shapes[{j}]") for j, s in enumerate(items)]
        arrs = [None if s is None else s[0] for s in shp]
        out_ndims = [None if s is None else s[1] for s in shp]
        keep.append(arrs)
        shapes = _ptr_array(arrs, c_int64)
    else:
        out_ndims = [None] * nout
    mh = None if mesh is None else _mesh_h(mesh)
    outputs = (L.lm_arg_t * max(nout, 1))()
    call = _Call(fn, args, kwargs, with_mesh, spec)
    call.out_ndims = out_ndims
    with _call_lock:
        key = _next_call[0]
        _next_call[0] += 1
    _calls[key] = call
    try:
        if opt is None:
            L.lm_local_map(_trampoline_c, key, nin, inputs, in_pl, nout, out_pl, shapes, mh,
                           flags, outputs)
        else:
            L.lm_local_map_ex(_trampoline_c, key, nin, inputs, in_pl, nout, out_pl, shapes, mh,
                              flags, byref(opt), outputs)
    except Error as e:
        if call.exc is not None:
            raise e from call.exc
        raise
    finally:
        del _calls[key]
        call.views.clear()
    res = []
    for j in range(nout):
        o = outputs[j]
        if o.kind == ARG_DIST_TENSOR:
            res.append(DistTensor._wrap(o.ptr))
        elif o.kind == ARG_INT64:
            res.append(int(o.i64))
        elif o.kind == ARG_DOUBLE:
            res.append(float(o.f64))
        elif o.kind == ARG_POINTER:
            res.append(call.out_objects.get(j))
        else:
            res.append(None)
    out = res[0] if spec.single else tuple(res)
    return (out, LocalMapRecord(rec.value)) if record else out


RECORD_INPUT, RECORD_IN, RECORD_IN_GRAD, RECORD_OUT, RECORD_OUT_GRAD = range(5)


class LocalMapRecord(_Handle):
    """The record of one local_map call (lm_local_map_record_t), for a hand-written backward
    pass: local_map(..., record=True) returns (outputs, record). For each DistTensor input i:
    input(i), the placements it had; seen(i), those fn saw; in_grad(i), those of the gradient of
    fn's view (in_grad_placements[i], else seen(i)). For each dist output j: out(j) and
    out_grad(j) (placements_adjoint(out(j)): Partial(sum) -> Replicate). input_grad(i, grad)
    moves a gradient to input i's own mesh and layout (collective). Local otherwise."""
    _what = "local_map record"

    def placements(self, which, index):
        """The recorded placements `which` (RECORD_INPUT ... RECORD_OUT_GRAD) of index."""
        n = c_int()
        arr = (L.lm_placement_t * 32)()
        L.lm_local_map_record_placements(self._handle(), which, index, 32, arr, byref(n))
        return tuple(_placement_from_c(arr[i]) for i in range(n.value))

    def input(self, i):
        """The placements input `i` had (RECORD_INPUT)."""
        return self.placements(RECORD_INPUT, i)

    def seen(self, i):
        """The placements fn saw input `i` in (RECORD_IN)."""
        return self.placements(RECORD_IN, i)

    def in_grad(self, i):
        """The placements of the gradient of fn's view of input `i` (RECORD_IN_GRAD)."""
        return self.placements(RECORD_IN_GRAD, i)

    def out(self, j):
        """The placements of output `j` (RECORD_OUT)."""
        return self.placements(RECORD_OUT, j)

    def out_grad(self, j):
        """The placements of output `j`'s gradient (RECORD_OUT_GRAD)."""
        return self.placements(RECORD_OUT_GRAD, j)

    def input_grad(self, index, grad):
        """grad (a DistTensor with input `index`'s global shape, normally placed in_grad(index)
        on the call's mesh) resharded to that input's own mesh and the adjoint of its own
        placements: a new DistTensor. Collective."""
        if not isinstance(grad, DistTensor):
            raise _bad(f"LocalMapRecord.input_grad: grad: expected a DistTensor, got "
                       f"{type(grad).__name__}")
        out = c_void_p()
        L.lm_local_map_record_input_grad(byref(out), self._handle(), index, grad._handle())
        return DistTensor._wrap(out.value)

    def __repr__(self):
        return "LocalMapRecord(<closed>)" if self.closed else "LocalMapRecord()"


LocalMapRecord._destroy = staticmethod(L.lm_local_map_record_destroy)


_MISSING = object()


def local_map(fn=None, out_placements=_MISSING, in_placements=None, mesh=None, *,
              out_shapes=None, reshard_inputs=False, agree=True, shapes_even=False,
              with_mesh=False, in_grad_placements=None, record=False):
    """Runs a function written for local arrays on the local shards of dist tensors, and wraps
    its outputs as dist tensors with the placements you declare (lm_local_map).

    Use it as a decorator, @local_map(out_placements=...), or call local_map(fn, out_placements)
    to get the wrapped function. The wrapped function takes positional arguments: each DistTensor
    reaches fn as a read-only numpy view of its local shard (valid during the call); ints and
    floats cross as LM_ARG_INT64 / LM_ARG_DOUBLE; anything else reaches fn unchanged. Keyword
    arguments go to fn unchanged.

    out_placements: the placements of one tensor output (fn returns one value), or a sequence
    with one entry per output (fn returns a tuple): placements for a tensor, None for a plain
    value (int, float or any object, returned as is). fn returns numpy arrays (shared without a
    copy when compact and not a view of an input) or DLPack producers.
    in_placements: None, or one entry per positional argument: the placements a DistTensor must
    have (reshard_inputs=True moves it there) or None. mesh: None to take the inputs' mesh.
    out_shapes: None, or one global shape (or None) per output. agree=False skips the failure
    agreement (then every rank must fail alike). shapes_even: derive Shard outputs' global shapes
    assuming even chunks. with_mesh: fn receives the Mesh as its first argument.
    in_grad_placements: None, or one entry per positional argument: the placements of the
    gradient of a DistTensor's local view as a backward pass computes it (None: those fn saw).
    record=True: the wrapped function returns (outputs, LocalMapRecord) for that backward pass
    (lm_local_map_ex).

    Collective over the mesh. If fn raises on a rank, that rank gets UserError (chained to the
    exception, whose text is in the message) and the other ranks RemoteError; no rank hangs.
    """
    if fn is not None and not callable(fn) and out_placements is _MISSING:
        fn, out_placements = None, fn  # @local_map([Shard(0)])
    if out_placements is _MISSING:
        raise TypeError("local_map: out_placements is required")
    flags = (LOCAL_MAP_RESHARD_INPUTS if reshard_inputs else 0) | \
        (0 if agree else LOCAL_MAP_NO_AGREE) | (LOCAL_MAP_SHAPES_EVEN if shapes_even else 0)

    def decorate(f):
        @functools.wraps(f)
        def wrapped(*args, **kwargs):
            return _run_local_map(f, args, kwargs, out_placements, in_placements, out_shapes,
                                  mesh, flags, with_mesh, in_grad_placements, record)
        return wrapped

    return decorate if fn is None else decorate(fn)
