# SPDX-License-Identifier: BSD-3-Clause
"""The Python API of localmap over the C ABI (see localmap/__init__.py for the overview).

Every C call goes through localmap._lib.call, which allocates the call's outputs and checks its
array lengths by the rules of api/localmap.api; what is here speaks Python: it checks types,
names Python's arguments, and turns handles into objects."""
import atexit
import ctypes
import functools
import itertools
import numbers
import re
import sys
import threading
import warnings
import weakref
from ctypes import byref, c_void_p

import numpy as np

from . import _dlpack as dl
from . import _lib as L
from . import _wrappers as _w
from ._dlpack import _bad  # InvalidArgumentError(ERR_INVALID_ARGUMENT, message)
from ._lib import Error, call
from ._wrappers import *  # noqa: F403 - the public constants, exceptions, one-call functions
from ._wrappers import (BLOCK_CYCLIC, ERRORS, FROM_LOCAL_BORROW, FROM_LOCAL_COPY,
                        LOCAL_MAP_NO_AGREE, LOCAL_MAP_RESHARD_INPUTS, LOCAL_MAP_SHAPES_EVEN,
                        PARTIAL, RAGGED, REPLICATE, ROUTES, SHAPE_GIVEN, SHAPE_MODES, SHARD)

__all__ = _w.__all__ + [
    "Mesh", "DistTensor", "ReshardPlan", "ReshardGroup", "Request", "Placement", "Shard",
    "RaggedShard", "BlockCyclic", "Replicate", "Partial", "from_local", "from_scalapack",
    "from_dlpack", "reshard_many", "local_map", "LocalMapRecord", "init",
    "library_path", "Error",
]

# -- Errors ------------------------------------------------------------------------------------


_RAGGED_ID = re.compile(r"Ragged shard extents id (\d+)")


def _raise_status(status, fname, message=None):
    if message is None:
        message = L.lm_last_error_message().decode("utf-8", "replace")
        if not message:
            message = f"{fname}: {L.lm_status_string(status).decode()}"
        message = _RAGGED_ID.sub(_ragged_words, message)
    raise ERRORS.get(status, Error)(status, message)


def _ragged_words(m):
    """"RaggedShard extents [3, 4]", the lengths the user passed, for the C library's "Ragged
    shard extents id N" (while the id is registered, as it is while a placement uses it)."""
    try:
        return f"RaggedShard extents {list(_w._extents(int(m.group(1))))}"
    except Error:
        return m.group(0)


L.raise_status = _raise_status


# -- Library, MPI bootstrap --------------------------------------------------------------------
def library_path():
    """Where the library was loaded from, and how it was found."""
    return L.LOADED_FROM


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
        raise NotSupportedError(ERR_NOT_SUPPORTED, f"mpi4py is not importable ({e}); the Fortran "
                                f"handle is {handle_f} (the *_f variant returns it)") from None
    return MPI.Comm.f2py(handle_f)


def _ints(values, argname, one=True):
    """A list of ints from a sequence of them (or, with `one`, a single int)."""
    if one and isinstance(values, numbers.Integral):
        values = (values,)
    try:
        return [int(e) for e in values]
    except (TypeError, ValueError):
        raise _bad(f"{argname}: expected a sequence of ints, got {values!r}") from None


def _strings(values, argname):
    """A list of bytes (each str encoded) from a sequence of names."""
    if isinstance(values, str):
        raise _bad(f"{argname}: expected a sequence of names, got one string")
    return [str(s).encode() for s in values]


# -- Placements --------------------------------------------------------------------------------
class Placement(_w.PlacementFields):
    """How one mesh dim holds a tensor: Shard(d), Replicate(), Partial(op), RaggedShard(d, ...)
    or BlockCyclic(d, block). The fields are the C struct's, each with one meaning (0 where it
    does not apply): kind, dim, order, reduce_op, block, source (the extents id is private)."""
    __slots__ = ()

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
        """Whether this is a Shard of tensor dim `dim` (any dim if None; not RaggedShard) (bool)."""
        return self.kind == SHARD and (dim is None or self.dim == dim)

    def is_replicate(self):
        """Whether this is Replicate() (bool)."""
        return self.kind == REPLICATE

    def is_partial(self):
        """Whether this is Partial, of any reduce op (bool)."""
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
        ident = call("lm_extents_create", ext, len(ext))
        super().__init__(RAGGED, dim, order, eid=ident)
        self.extents, self._id = ext, ident

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
        src = f", src={self.source}" if self.source else ""
        return f"BlockCyclic({self.dim}, {self.block}{src})"


def _placement_from_c(p):
    if p.kind == BLOCK_CYCLIC:
        return BlockCyclic(p.dim, p.block, p.source)
    if p.kind == RAGGED:
        return RaggedShard(p.dim, _w._extents(p.extents), p.order)
    if p.kind == SHARD:
        return Shard(p.dim, p.order)
    if p.kind == REPLICATE:
        return Replicate()
    if p.kind == PARTIAL and 0 <= p.reduce_op < len(REDUCE_OPS):
        return Partial(REDUCE_OPS[p.reduce_op])
    return Placement(p.kind, p.dim, p.order, p.reduce_op, p.block, p.source, p.extents)


def _placements(placements, argname):
    """A list of Placement from one or a sequence of them, each checked here in Python's terms
    (the count against the mesh is checked by the rules, in call())."""
    if isinstance(placements, Placement):
        return [placements]
    try:
        items = list(placements)
    except TypeError:
        raise _bad(f"{argname}: expected a sequence of placements (Shard(d), Replicate(), "
                   f"Partial(op)), got {type(placements).__name__}") from None
    for i, p in enumerate(items):
        if not isinstance(p, Placement):
            raise _bad(f"{argname}[{i}]: {p!r} is not a placement (Shard(d), Replicate(), "
                       "Partial(op))")
        if p.kind == BLOCK_CYCLIC and (p.block < 1 or p.source < 0):
            raise _bad(f"{argname}[{i}]: {p!r}: block must be >= 1 (the block size, in "
                       "elements) and src >= 0 (the mesh coordinate of the first block)")
    return items


# -- Handles -----------------------------------------------------------------------------------
class _Handle:
    """A C handle owned by this object: close() (or leaving a `with` block, or garbage
    collection) calls the local, non-collective destroy. ctypes passes the object as its handle
    (_as_parameter_), checked open."""
    _destroy = None  # the lm_*_destroy function
    _byref = staticmethod(byref)  # still reachable from __del__ at interpreter exit

    def __init__(self, handle):
        self._h = c_void_p(handle)

    @classmethod
    def _wrap(cls, handle):
        """An object of this class over `handle` (which it owns), made without __init__."""
        obj = cls.__new__(cls)
        _Handle.__init__(obj, handle)
        return obj

    def _handle(self):
        h = self._h
        if h is None or not h.value:
            raise _bad(f"localmap.{type(self).__name__}: used after close()")
        return h

    @property
    def _as_parameter_(self):
        return self._handle()

    @property
    def closed(self):
        """Whether close() has released this object's handle (bool)."""
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


class _Starter(_Handle):
    """A plan or group: start() makes a Request, and close() is refused while it is in flight."""
    _request = None  # a weak reference to the last Request

    def _started(self, request):
        self._request = weakref.ref(request)
        return request

    def close(self):
        """Releases the object (local). Refused while a request started from it is in flight."""
        req = self._request() if self._request is not None else None
        if req is not None and not req.done:
            raise InvalidUsageError(ERR_INVALID_USAGE, f"{type(self).__name__}.close: a request "
                                    f"started from this {self._what} is in flight; wait() for "
                                    "it first")
        _Handle.close(self)

    destroy = close


class Mesh(_w.MeshCalls, _Handle):
    """An N-D grid of MPI ranks.

    Mesh(shape, comm=None, *, ranks=None, dim_names=None, check_level=None, timeout=None):
    collective over `comm` (an mpi4py communicator, a Fortran handle int, or None for
    MPI_COMM_WORLD; agrees). `ranks`: the ranks of comm forming the mesh, row-major (default all,
    in order). Ranks of comm outside the mesh get a handle whose is_member is False.
    check_level: argument agreement of its collectives (0 off, 1 fingerprints, 2 also data
    invariants; None: $LM_CHECK). timeout: seconds a collective may wait for the other ranks
    before TimeoutError (0: for ever; None: $LM_TIMEOUT).
    """
    _owner = None  # what keeps a borrowed handle alive (None: this object owns it)
    _device_callbacks = None

    @classmethod
    def _borrow(cls, handle, owner):
        """A Mesh over a handle this object does not own; `owner` keeps it alive. When `owner`
        is a DistTensor, the handle is asked of the tensor at each use (a tensor's mesh handle
        may be its creator's, which dies when the creator's Mesh is closed)."""
        m = cls._wrap(handle)
        m._owner = owner
        return m

    def _handle(self):
        if isinstance(self._owner, DistTensor) and not self.closed:
            return c_void_p(call("lm_dist_tensor_mesh", self._owner))
        return _Handle._handle(self)

    def close(self):
        """Releases this Mesh's reference (local, never collective). Tensors and plans on the
        mesh keep it alive. A Mesh obtained from DistTensor.mesh only forgets its handle."""
        if self._owner is not None:
            self._h, self._owner = None, None  # borrowed: nothing to destroy
            return
        super().close()

    destroy = close

    def rank_at(self, coord):
        """The parent-communicator rank at a coordinate."""
        c = _ints(coord, "coord")
        if len(c) != self.ndim:  # (the C call takes any count and refuses it in its own terms)
            raise _bad(f"rank_at: coord: {len(c)} entries for a mesh of {self.ndim} dims")
        return call("lm_mesh_rank_at", self, c, len(c))

    @property
    def dim_names(self):
        """The names of the mesh dims (a tuple of str, "" for an unnamed dim)."""
        return tuple(self.dim_name(d) for d in range(self.ndim))

    def _dim(self, dim):
        return self.dim_index(dim) if isinstance(dim, str) else int(dim)

    # -- devices (CUDA streams and allocators; accepted in builds without CUDA) ----------------
    def set_device_config(self, stream=None, alloc=None, free=None):
        """This rank's device options of the mesh (local). stream: a cudaStream_t as an int
        (e.g. torch.cuda.current_stream().cuda_stream), None for the default stream. alloc and
        free: both None (stream-ordered cudaMallocAsync) or both Python callables,
        alloc(bytes, device_id, stream) -> address (0 on failure) and
        free(address, bytes, device_id, stream), e.g. a framework's caching allocator. The
        callables are kept alive by this Mesh object."""
        cfg = L.lm_device_config_t(stream=stream or None)
        callbacks = None
        if alloc is not None or free is not None:
            if not (callable(alloc) and callable(free)):
                raise _bad("set_device_config: alloc and free must both be callables, or both "
                           "None")
            callbacks = _device_callbacks(alloc, free)
            cfg.alloc, cfg.free = callbacks[0], callbacks[1]
        call("lm_mesh_set_device_config", self, cfg)
        if self._owner is None:
            self._device_callbacks = callbacks
        elif callbacks is not None:
            _kept_callbacks.append(callbacks)  # a borrowed Mesh: keep them for ever

    def device_config(self):
        """{"stream": int or None, "alloc": ..., "free": ...}: this rank's device options
        (alloc/free: the Python callables set here, else C function addresses or None)."""
        cfg = L.lm_device_config_t()
        call("lm_mesh_device_config", self, cfg)
        cb = self._device_callbacks

        def addr(f):
            return ctypes.cast(f, c_void_p).value or None
        return {"stream": cfg.stream or None,
                "alloc": cb[2] if cb else addr(cfg.alloc),
                "free": cb[3] if cb else addr(cfg.free)}

    def __repr__(self):
        if self.closed:
            return "Mesh(<closed>)"
        names = self.dim_names
        nm = f", dim_names={names}" if any(names) else ""
        return f"Mesh(shape={self.shape}{nm}, member={self.is_member})"


_kept_callbacks = []


def _device_callbacks(alloc, free):
    """(C alloc, C free, alloc, free): the allocator callables wrapped for lm_device_config_t;
    nothing they raise reaches C (a failed allocation is NULL)."""
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
    return L.lm_device_alloc_fn_t(c_alloc), L.lm_device_free_fn_t(c_free), alloc, free


# -- Dist tensors ------------------------------------------------------------------------------
def _object(obj, argname, cls):
    """obj, checked to be a `cls` (a localmap class)."""
    if not isinstance(obj, cls):
        raise _bad(f"{argname}: expected a localmap.{cls.__name__}, got {type(obj).__name__}")
    return obj


def _mesh_h(mesh, argname="mesh"):
    return _object(mesh, argname, Mesh)._handle()


class DistTensor(_w.DistTensorCalls, _Handle):
    """A distributed tensor: a refcounted handle on a tensor laid out over a Mesh.

    Make one with zeros(), from_local(), from_global() or from_dlpack(), or get one from
    reshard() and local_map. The local shard is local() (a numpy view that keeps the tensor
    alive) or any DLPack consumer: np.from_dlpack(t), torch.from_dlpack(t).
    """

    def __init__(self, *args, **kwargs):
        raise TypeError("make a DistTensor with localmap.zeros/from_local/from_global/"
                        "from_dlpack, DistTensor.reshard or localmap.local_map")

    global_shape = _w.DistTensorCalls.shape
    numpy = _w.DistTensorCalls.local

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

    # -- collectives ----------------------------------------------------------------------
    def gather(self, root=-1):
        """The full value (Partial reduced) as a numpy array: on every member rank (root < 0)
        or only on mesh rank `root` (None elsewhere). Collective over the mesh."""
        dt = dl.require_np_dtype(self._dl_dtype(), "DistTensor.gather")
        m = self.mesh
        receive = m.is_member and (root < 0 or m.rank == root)
        m.close()
        out = np.empty(self.shape, dtype=dt) if receive else None
        call("lm_dist_tensor_gather", self, int(root),
             None if out is None else dl.borrow(out, "dst"))
        return out

    redistribute = _w.DistTensorCalls.reshard

    def __repr__(self):
        if self.closed:
            return "DistTensor(<closed>)"
        pl = format_placements(self.placements)
        return (f"DistTensor(shape={self.shape}, dtype={self.dtype}, placements={pl}, "
                f"local_shape={self.local_shape})")


def _shape_mode(global_shape, shape_mode):
    """(lm_shape_mode_t, the global shape as a list or None)."""
    if global_shape is not None:
        if shape_mode not in (None, "given"):
            raise _bad(f"shape_mode: {shape_mode!r} with a global_shape (which means \"given\")")
        return SHAPE_GIVEN, _ints(global_shape, "global_shape")
    mode = SHAPE_MODES.get(shape_mode or "allgather")
    if mode is None or mode == SHAPE_GIVEN:
        raise _bad(f"shape_mode: {shape_mode!r} is not \"allgather\" or \"even\" (or pass "
                   "global_shape)")
    return mode, None


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
    pl = _placements(placements, "placements")
    mode, gs = _shape_mode(global_shape, shape_mode)
    if not isinstance(local, np.ndarray) and hasattr(local, "__dlpack__"):
        cap = local.__dlpack__()
        addr = dl.managed_from_capsule(cap)  # (the capsule owns it until marked consumed)
        m = L.DLManagedTensor.from_address(addr)
        if not copy and dl.dltensor_is_compact(m.dl_tensor):
            out = call("lm_dist_tensor_from_dlpack", mh, addr, pl, mode, gs)
            dl.mark_consumed(cap)  # the tensor owns it now; on failure the capsule still does
            return DistTensor._wrap(out)
        return DistTensor._wrap(call("lm_dist_tensor_from_local", mh, m.dl_tensor, pl, mode, gs,
                                     FROM_LOCAL_COPY))
    a = np.asarray(local)
    if not copy and dl.zero_copy_ok(a):
        return DistTensor._wrap(_adopt(a, mh, pl, mode, gs))
    return DistTensor._wrap(call("lm_dist_tensor_from_local", mh, dl.borrow(a, "local"), pl,
                                 mode, gs, FROM_LOCAL_COPY))


def _adopt(a, mh, pl, mode, gs):
    """A tensor handle over numpy array `a` without a copy (lm_dist_tensor_from_dlpack): the
    tensor keeps `a` alive; on failure ownership stays here."""
    addr = dl.managed_from_array(a)
    try:
        return call("lm_dist_tensor_from_dlpack", mh, addr, pl, mode, gs)
    except BaseException:
        dl.release_managed(addr)
        raise


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
    d = _ints(desc, "desc", one=False)
    L.check("lm_dist_tensor_from_scalapack", {"desc": d})
    at = _scalapack_array(a, d)  # the row-major [LOCc, LLD_] view of a's bytes
    b = dl.borrow(at, "a")
    # A borrow reads nothing: the library checks desc and lays the tensor out, its local shape
    # [LOCc, LOCr] (ScaLAPACK's NUMROC), which `a` must hold before a copy reads it.
    t = DistTensor._wrap(call("lm_dist_tensor_from_scalapack", mh, d, b.data, b.dtype, b.device,
                              FROM_LOCAL_BORROW))
    pl, shape, local = t.placements, t.shape, t.local_shape
    t.close()
    if local and local[1] > 0 and at.shape[0] < local[0]:
        raise _bad(f"from_scalapack: a has {at.shape[0]} columns, but desc places {local[0]} "
                   f"columns (LOCc) of the matrix on this rank")
    if copy or not dl.zero_copy_ok(at):
        return DistTensor._wrap(call("lm_dist_tensor_from_scalapack", mh, d, b.data, b.dtype,
                                     b.device, FROM_LOCAL_COPY))
    # The tensor that keeps `a` alive adopts the checked borrow's layout.
    view = at[:local[0], :local[1]] if local else at[:0, :0]
    return DistTensor._wrap(_adopt(view, mh, pl, SHAPE_GIVEN, list(shape)))


def _scalapack_array(a, d):
    """The row-major [LOCc, LLD_] view of ScaLAPACK local array `a`, its rows checked against
    desc `d` in Python's terms (from_scalapack checks its columns against LOCc)."""
    if a is None:
        raise _bad("from_scalapack: a is None: pass this rank's local array (LLD_ x LOCc, "
                   "column-major, or its flat buffer)")
    a, lld = np.asarray(a), max(d[8], 1)
    if a.ndim == 1:
        if a.size % lld:
            raise _bad(f"from_scalapack: a has {a.size} elements, not a multiple of desc[8] "
                       f"(LLD_) = {d[8]}")
        a = a.reshape((lld, a.size // lld), order="F")
    if a.ndim != 2:
        raise _bad(f"from_scalapack: a has {a.ndim} dims; a ScaLAPACK local array has 2 "
                   "(LLD_, LOCc)")
    if a.shape[0] != lld and a.size:
        raise _bad(f"from_scalapack: a has {a.shape[0]} rows, desc[8] (LLD_) says {d[8]}")
    return np.asfortranarray(a).T


def from_dlpack(x, mesh, placements, **kwargs):
    """from_local for any DLPack producer (numpy, torch, ...): zero-copy when compact."""
    return from_local(x, mesh, placements, **kwargs)


# -- Persistent reshard plans and requests -----------------------------------------------------
_unfinished = []  # requests dropped in flight: kept (with their tensors) so nothing is freed


class ReshardPlan(_w.ReshardPlanCalls, _Starter):
    """A persistent plan for one (source layout, target layout, dtype, global shape). Local.

    ReshardPlan(src_mesh, src_placements, dst_mesh, dst_placements, shape, dtype)
    """
    _what = "plan"

    def __repr__(self):
        return "ReshardPlan(<closed>)" if self.closed else f"ReshardPlan({self.describe()})"


def _plan_info_dict(i):
    """The dict of ReshardPlan.info() and reshard_estimate() from an lm_reshard_plan_info_t."""
    out = {name: getattr(i, name) for name, _ in i._fields_[3:]}
    out["routes"] = {name for bit, name in ROUTES.items() if i.routes & bit}
    return out


def _tensors(tensors, argname):
    """A list of DistTensor from a sequence of them."""
    if isinstance(tensors, DistTensor):
        tensors = None  # one tensor is not a sequence of them
    try:
        items = list(tensors)
    except TypeError:
        raise _bad(f"{argname}: expected a sequence of localmap.DistTensor") from None
    for i, t in enumerate(items):
        if not isinstance(t, DistTensor):
            raise _bad(f"{argname}[{i}]: expected a localmap.DistTensor, got {type(t).__name__}")
    return items


def _entry(sm, dm, shape, dtype, sp, dp, keep, names):
    """An lm_reshard_entry_t: what lm_reshard_plan_create takes for one tensor, its placements
    checked by that function's rules (named by `names`) and its arrays appended to `keep`."""
    values = {"src_mesh": sm, "src_placements": sp, "dst_mesh": dm, "dst_placements": dp,
              "global_shape": shape}
    L.check("lm_reshard_plan_create", values, names)
    arrays = [L.to_c("lm_reshard_plan_create", a, values[a], keep)
              for a in ("global_shape", "src_placements", "dst_placements")]
    return L.lm_reshard_entry_t(len(shape), arrays[0], dtype, arrays[1], arrays[2])


class ReshardGroup(_w.ReshardGroupCalls, _Starter):
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
    _what = "group"

    def __init__(self, src_mesh, entries, dst_mesh=None, bucket_bytes=0, alone_bytes=0):
        sm = _mesh_h(src_mesh, "src_mesh")
        dm = None if dst_mesh is None else _mesh_h(dst_mesh, "dst_mesh")
        try:
            items = list(entries)
        except TypeError:
            raise _bad("entries: expected a sequence of (shape, dtype, src_placements, "
                       f"dst_placements), got {type(entries).__name__}") from None
        arr, keep = (L.lm_reshard_entry_t * max(len(items), 1))(), []
        for i, e in enumerate(items):
            try:
                shape, dtype, src_pl, dst_pl = e
            except (TypeError, ValueError):
                raise _bad(f"entries[{i}]: expected (shape, dtype, src_placements, "
                           f"dst_placements), got {e!r}") from None
            names = {a: f"entries[{i}].{a}" for a in ("src_placements", "dst_placements")}
            arr[i] = _entry(sm, dm, _ints(shape, f"entries[{i}].shape"),
                            dl.dl_dtype(dtype, f"entries[{i}].dtype"),
                            _placements(src_pl, names["src_placements"]),
                            _placements(dst_pl, names["dst_placements"]), keep, names)
        for name, v in (("bucket_bytes", bucket_bytes), ("alone_bytes", alone_bytes)):
            if not isinstance(v, numbers.Integral) or isinstance(v, bool) or v < 0:
                raise _bad(f"{name}: {v!r} is not a byte count >= 0 (0: the default)")
        cfg = L.lm_reshard_group_config_t(bucket_bytes=int(bucket_bytes),  # 0: the default
                                          alone_bytes=int(alone_bytes))
        super().__init__(call("lm_reshard_group_create", sm, dm, len(items), arr, cfg))

    def __bool__(self):
        return True  # a handle, even of no entries (len() would make an empty group false)

    def _run(self, fname, srcs, dsts):
        """lm_reshard_group_execute or _start from srcs into dsts (allocated when None): what
        it writes, the sources and the targets (the caller's list when it gave one)."""
        srcs = _tensors(srcs, "srcs")
        if dsts is None:
            dsts = self.alloc_targets(srcs[0].device if srcs else "cpu")
        items = _tensors(dsts, "dsts")
        out = call(fname, self, len(srcs), srcs, items, names={"n": "srcs", "dst": "dsts"})
        return out, srcs, dsts if isinstance(dsts, list) else items

    def execute(self, srcs, dsts=None):
        """Runs every entry, srcs[i] into dsts[i] (allocated with alloc_targets() when None);
        returns the list of targets. Collective over the ranks of both meshes (one agreement for
        the whole group). No target may overlap another target or any source."""
        return self._run("lm_reshard_group_execute", srcs, dsts)[2]

    def start(self, srcs, dsts=None):
        """Starts the group without waiting; returns a Request whose wait() returns the list of
        targets. Do not touch the tensors until it completes; one request per group at a time."""
        r, srcs, dsts = self._run("lm_reshard_group_start", srcs, dsts)
        return self._started(Request(r, self, srcs, dsts))

    def __repr__(self):
        if self.closed:
            return "ReshardGroup(<closed>)"
        return f"ReshardGroup(entries={self.size()}, buckets={self.buckets})"


def reshard_many(tensors, placements_list, mesh=None):
    """DistTensor.reshard for many tensors of one mesh at once: tensors[i] gets
    placements_list[i] on `mesh` (default: theirs), through one grouped reshard (one message per
    peer and step for all of them): a group made from the tensors' entries, its targets
    allocated on tensors[0]'s device, executed and destroyed. Returns a list of new tensors (on
    failure none is left). Collective over both meshes."""
    items = _tensors(tensors, "tensors")
    try:
        pls = list(placements_list)
    except TypeError:
        raise _bad("placements_list: expected one list of placements per tensor") from None
    if len(pls) != len(items):
        raise _bad(f"placements_list: {len(pls)} entries for {len(items)} tensors")
    if not items:
        return []
    for i, (t, pl) in enumerate(zip(items, pls)):
        if call("lm_dist_tensor_mesh", t) != call("lm_dist_tensor_mesh", items[0]):
            raise _bad(f"reshard_many: tensors[{i}] lives on another mesh than tensors[0] (one "
                       "call moves tensors of one mesh)")
        pls[i] = _placements(pl, f"placements_list[{i}]")
        L.check("lm_dist_tensor_reshard", {"src": t, "dst_mesh": mesh and _mesh_h(mesh),
                                           "placements": pls[i]},
                {"placements": f"placements_list[{i}]"})
    entries = [(t.shape, t._dl_dtype(), t.placements, pl) for t, pl in zip(items, pls)]
    with ReshardGroup(items[0].mesh, entries, mesh) as g:
        out = g.alloc_targets(items[0].device)
        try:
            return g.execute(items, out)
        except BaseException:
            for t in out:
                t.close()
            raise


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
        """Whether the request has completed (bool): wait() returned, or test() returned True."""
        return not self._h.value

    def test(self):
        """Makes progress; True once complete (the request is then finished)."""
        return self.done or bool(call("lm_request_test", byref(self._h)))

    def wait(self):
        """Completes the request; returns the target tensor (a ReshardGroup's: the list of
        targets)."""
        if not self.done:
            call("lm_request_wait", byref(self._h))
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


# -- local_map ---------------------------------------------------------------------------------
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1

_calls = {}  # user_data key -> _Call (one per lm_local_map in progress; calls may nest)
_keys = itertools.count(1)  # (next() is atomic)


def _is_int64(v):
    return isinstance(v, numbers.Integral) and not isinstance(v, bool) and \
        _INT64_MIN <= v <= _INT64_MAX


class _Call:
    """One local_map call: fn and its arguments, and what its outputs are to become; the
    trampoline runs it on every rank (calls may nest: each has its key, the C call's
    user_data)."""

    def __init__(self, fn, args, kwargs, with_mesh, out_placements, out_shapes):
        self.fn, self.args, self.kwargs, self.with_mesh = fn, args, kwargs, with_mesh
        self.out_pl, self.single = _out_spec(out_placements)
        self.nout = len(self.out_pl)
        self.shapes = None if out_shapes is None else \
            [None if s is None else _ints(s, f"out_shapes[{j}]") for j, s in enumerate(out_shapes)]
        self.views, self.exc, self.out_objects = [], None, {}

    def fn_args(self, nin, inputs, mesh):
        """The arguments fn gets: read-only views of the dist inputs' shards, the ints and
        floats as they crossed, everything else as given (and the mesh first, with with_mesh)."""
        args = []
        for i in range(nin):
            a, orig = inputs[i], self.args[i]
            if isinstance(orig, DistTensor):
                if a.kind != ARG_TENSOR:
                    raise RuntimeError(f"localmap: input {i} reached fn as kind {a.kind}")
                v = dl.array_from_dltensor(L.DLTensor.from_address(a.ptr), f"input {i}",
                                           readonly=True)
                self.views.append(v)
                args.append(v)
            elif a.kind == ARG_INT64 and isinstance(orig, numbers.Integral):
                args.append(type(orig)(a.i64) if type(orig) is not bool else orig)
            elif a.kind == ARG_DOUBLE:
                args.append(float(a.f64))
            else:
                args.append(orig)
        return [Mesh._borrow(mesh, True)] + args if self.with_mesh else args

    def outputs_of(self, res):
        """fn's return value as a sequence of nout outputs."""
        if self.nout == 1 and self.single:
            return (res,)
        if res is None and self.nout == 0:
            return ()
        if not isinstance(res, (tuple, list)):
            raise TypeError(f"fn returned {type(res).__name__}; expected a tuple of "
                            f"{self.nout} outputs")
        if len(res) != self.nout:
            raise TypeError(f"fn returned {len(res)} outputs; expected {self.nout}")
        return res

    def set_output(self, out, r, j):
        """lm_arg_t `out` for fn's output j: a tensor (ownership passes to C), or a value."""
        if self.out_pl[j] is not None:
            want = None if self.shapes is None or self.shapes[j] is None else len(self.shapes[j])
            if want is not None and np.ndim(r) != want:
                # (the library reads one out_shapes[j] extent per dim of the output)
                raise ValueError(f"output {j} has {np.ndim(r)} dims but out_shapes[{j}] "
                                 f"has {want} extents")
            try:
                out.ptr = _output_managed(r, j, self.views)
            except Error as e:
                raise TypeError(f"output {j}: {e.message}") from e
            out.kind = ARG_MANAGED_TENSOR  # ownership passes, even if fn fails later
        elif r is None:
            out.kind = ARG_NONE
        elif _is_int64(r):
            out.i64, out.kind = int(r), ARG_INT64
        elif isinstance(r, float):
            out.f64, out.kind = r, ARG_DOUBLE
        else:
            self.out_objects[j] = r
            out.ptr, out.kind = id(r), ARG_POINTER

    def results(self, outputs):
        """local_map's outputs as Python values (dist outputs as DistTensor)."""
        res = [DistTensor._wrap(o.ptr) if o.kind == ARG_DIST_TENSOR else
               int(o.i64) if o.kind == ARG_INT64 else
               float(o.f64) if o.kind == ARG_DOUBLE else
               self.out_objects.get(j) if o.kind == ARG_POINTER else None
               for j, o in enumerate(outputs)]
        return res[0] if self.single else tuple(res)


def _output_managed(r, j, views):
    """A DLManagedTensor* for a tensor output of fn. numpy memory is shared unless it aliases an
    input view (whose memory the output must not outlive) or is not compact."""
    if not isinstance(r, (np.ndarray, np.generic)) and hasattr(r, "__dlpack__") and \
            not isinstance(r, DistTensor):
        cap = r.__dlpack__()
        addr = dl.managed_from_capsule(cap)
        if dl.dltensor_is_compact(L.DLManagedTensor.from_address(addr).dl_tensor):
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
    call_ = _calls.get(user_data)
    if call_ is None:
        return ERR_INTERNAL
    try:
        res = call_.fn(*call_.fn_args(nin, inputs, mesh), **call_.kwargs)
        for j, r in enumerate(call_.outputs_of(res)):
            call_.set_output(outputs[j], r, j)
        return SUCCESS
    except BaseException as e:  # noqa: BLE001 - everything becomes a status
        call_.exc = e
        try:
            msg = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
            L.lm_set_error_message(msg.encode("utf-8", "replace"))
        except BaseException:  # noqa: BLE001
            pass
        return ERR_USER


_trampoline_c = L.lm_local_fn_t(_trampoline)


def _out_spec(out_placements):
    """(one list of placements, or None for a plain value, per output; whether fn returns one
    value rather than a tuple)."""
    if isinstance(out_placements, Placement):
        out_placements = [out_placements]
    try:
        items = list(out_placements)
    except TypeError:
        raise _bad("out_placements: expected placements for one output, or a sequence with one "
                   "entry (placements or None) per output") from None
    single = bool(items) and all(isinstance(p, Placement) for p in items)
    items = [items] if single else items
    return [None if p is None else _placements(p, f"out_placements[{j}]")
            for j, p in enumerate(items)], single


def _call_mesh_ndim(args, mesh):
    """The ndim of the call's mesh: `mesh`, else the first dist input's; None for a local call
    (no mesh, no dist input: the library refuses placements itself)."""
    if mesh is not None:
        return call("lm_mesh_ndim", _mesh_h(mesh))
    return next((a._mesh_ndim() for a in args if isinstance(a, DistTensor)), None)


def _table(items, name):
    """One list of placements or None per input, from a sequence of placements or None."""
    return None if items is None else \
        [None if p is None else _placements(p, f"{name}[{i}]") for i, p in enumerate(items)]


def _input_args(args, keep):
    """The lm_arg_t array of local_map's positional arguments (borrowed arrays in `keep`)."""
    inputs = (L.lm_arg_t * max(len(args), 1))()
    for i, a in enumerate(args):
        if isinstance(a, DistTensor):
            inputs[i].kind, inputs[i].ptr = ARG_DIST_TENSOR, a._handle().value
        elif _is_int64(a):
            inputs[i].kind, inputs[i].i64 = ARG_INT64, int(a)
        elif isinstance(a, float):
            inputs[i].kind, inputs[i].f64 = ARG_DOUBLE, a
        elif isinstance(a, np.ndarray):
            try:
                keep.append(dl.borrow(a, f"input {i}"))
                inputs[i].kind, inputs[i].ptr = ARG_TENSOR, ctypes.addressof(keep[-1])
            except Error:  # no DLPack dtype: it still reaches fn as the Python object
                inputs[i].kind, inputs[i].ptr = ARG_POINTER, id(a)
        elif a is None:
            inputs[i].kind = ARG_NONE
        else:
            inputs[i].kind, inputs[i].ptr = ARG_POINTER, id(a)
    return inputs


def _run_local_map(fn, args, kwargs, out_placements, in_placements, out_shapes, mesh, flags,
                   with_mesh, in_grad_placements=None, record=False):
    call_ = _Call(fn, args, kwargs, with_mesh, out_placements, out_shapes)
    in_pl = _table(in_placements, "in_placements")
    grad_pl = _table(in_grad_placements, "in_grad_placements")
    mh, nin, keep = None if mesh is None else _mesh_h(mesh), len(args), []
    names, ndims = {"nin": "inputs", "nout": "outputs"}, {"mesh": _call_mesh_ndim(args, mesh)}
    L.check("lm_local_map", {"nin": nin, "in_placements": grad_pl, "mesh": mh}, names=dict(
        names, in_placements="in_grad_placements"), ndims=ndims)
    opt, rec = None, c_void_p()
    if grad_pl is not None or record:
        opt = L.lm_local_map_options_t(record=ctypes.pointer(rec) if record else None)
        if grad_pl is not None:
            opt.in_grad_placements = L.to_c("lm_local_map", "in_placements", grad_pl, keep)
    key = next(_keys)
    _calls[key] = call_
    try:
        c_args = (_trampoline_c, key, nin, _input_args(args, keep), in_pl, call_.nout,
                  call_.out_pl, call_.shapes, mh, flags) + (() if opt is None else (opt,))
        outputs = call("lm_local_map" if opt is None else "lm_local_map_ex", *c_args,
                       names=names, ndims=ndims)
    except Error as e:
        if call_.exc is not None:
            raise e from call_.exc
        raise
    finally:
        del _calls[key]
        call_.views.clear()
    out = call_.results(outputs)
    return (out, LocalMapRecord(rec.value)) if record else out


class LocalMapRecord(_w.LocalMapRecordCalls, _Handle):
    """The record of one local_map call (lm_local_map_record_t), for a hand-written backward
    pass: local_map(..., record=True) returns (outputs, record). For each DistTensor input i:
    input(i), the placements it had; seen(i), those fn saw; in_grad(i), those of the gradient of
    fn's view (in_grad_placements[i], else seen(i)). For each dist output j: out(j) and
    out_grad(j) (placements_adjoint(out(j)): Partial(sum) -> Replicate). input_grad(i, grad)
    moves a gradient to input i's own mesh and layout (collective). Local otherwise."""

    def __repr__(self):
        return "LocalMapRecord(<closed>)" if self.closed else "LocalMapRecord()"


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
