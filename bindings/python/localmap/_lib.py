# SPDX-License-Identifier: BSD-3-Clause
"""Loading liblocalmap and declaring its C ABI with ctypes.

Every function of include/localmap.h is declared here once, at import, with its argtypes and
restype; functions returning lm_status_t get an errcheck that raises localmap.Error on failure.
This module is private: the public API is in localmap/__init__.py.
"""
import ctypes
import os
import shutil
import subprocess
from ctypes import (CFUNCTYPE, POINTER, Structure, c_char_p, c_double, c_int, c_int32,
                    c_int64, c_size_t, c_uint, c_uint8, c_uint16, c_uint32, c_uint64, c_void_p)
from pathlib import Path

from . import _api

SONAME = "liblocalmap.so.1"
ENV_VAR = "LOCALMAP_LIBRARY"


class LibraryNotFoundError(ImportError):
    """liblocalmap.so.1 could not be loaded; the message lists every place that was tried."""


def _source_root():
    """The repository root when this package is imported from a source checkout, else None."""
    here = Path(__file__).resolve().parent  # <root>/bindings/python/localmap
    root = here.parents[2] if len(here.parents) > 2 else None
    if root is not None and (root / "include" / "localmap.h").is_file():
        return root
    return None


def _pkg_config_libdir():
    """(libdir or None, why not) from `pkg-config --variable=libdir localmap`."""
    exe = shutil.which(os.environ.get("PKG_CONFIG", "pkg-config"))
    if exe is None:
        return None, "no pkg-config program on PATH"
    try:
        r = subprocess.run([exe, "--variable=libdir", "localmap"], capture_output=True, text=True,
                           timeout=30, check=False)
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"pkg-config failed: {e}"
    if r.returncode != 0 or not r.stdout.strip():
        why = (r.stderr.strip().splitlines() or ["no localmap.pc on PKG_CONFIG_PATH"])[0]
        return None, why
    return r.stdout.strip(), None


def _load():
    """Loads the library: $LOCALMAP_LIBRARY, else the build tree of a source checkout, else
    pkg-config's libdir, else the dynamic loader's search path. Returns (CDLL, where)."""
    tried = []
    mode = ctypes.RTLD_GLOBAL  # libmpi's MCA components resolve symbols against the global scope

    def attempt(what, path):
        try:
            return ctypes.CDLL(str(path), mode=mode)
        except OSError as e:
            tried.append(f"{what}: {path} ({e})")
            return None

    env = os.environ.get(ENV_VAR)
    if env:
        p = Path(env)
        if p.is_dir():
            p = p / SONAME
        lib = attempt(f"${ENV_VAR}", p)
        if lib is not None:
            return lib, f"${ENV_VAR} ({p})"
        raise LibraryNotFoundError(f"localmap: cannot load the library named by ${ENV_VAR}: "
                                   f"{tried[0]}")
    tried.append(f"${ENV_VAR}: not set")

    root = _source_root()
    if root is not None:
        p = root / "build" / "lib" / SONAME
        if p.exists():
            lib = attempt("build tree", p)
            if lib is not None:
                return lib, f"build tree ({p})"
        else:
            tried.append(f"build tree: {p} (not built: run `make lib` in {root})")
    else:
        tried.append("build tree: not imported from a localmap source checkout")

    libdir, why = _pkg_config_libdir()
    if libdir is not None:
        lib = attempt("pkg-config localmap", Path(libdir) / SONAME)
        if lib is not None:
            return lib, f"pkg-config ({Path(libdir) / SONAME})"
    else:
        tried.append(f"pkg-config localmap: {why}")

    lib = attempt("dynamic loader search path", SONAME)
    if lib is not None:
        return lib, f"dynamic loader ({SONAME})"
    raise LibraryNotFoundError(
        "localmap: cannot find " + SONAME + ". Tried:\n  " + "\n  ".join(tried) +
        f"\nSet ${ENV_VAR} to the library (or its directory), add localmap.pc's directory to "
        "PKG_CONFIG_PATH, or add the library's directory to LD_LIBRARY_PATH.")


lib, LOADED_FROM = _load()

# ---------------------------------------------------------------------------------------------
# Types of the header (DLPack 0.6 and localmap's own PODs)
# ---------------------------------------------------------------------------------------------


class DLDevice(Structure):
    _fields_ = [("device_type", c_int32), ("device_id", c_int32)]


class DLDataType(Structure):
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16)]


class DLTensor(Structure):
    _fields_ = [("data", c_void_p), ("device", DLDevice), ("ndim", c_int32),
                ("dtype", DLDataType), ("shape", POINTER(c_int64)),
                ("strides", POINTER(c_int64)), ("byte_offset", c_uint64)]


class DLManagedTensor(Structure):
    pass


DLManagedTensorDeleter = CFUNCTYPE(None, c_void_p)  # void (*)(DLManagedTensor *)
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", c_void_p),
                            ("deleter", DLManagedTensorDeleter)]


class lm_placement_t(Structure):  # noqa: N801 (the C name)
    _fields_ = [(name, c_int32) for name in ("kind", "dim", "order", "reduce_op", "extents",
                                             "block", "source", "reserved")]


LM_MESH_CONFIG_MAGIC = 0x4C4D4D43
LM_MESH_CONFIG_VERSION = 2


class lm_mesh_config_t(Structure):  # noqa: N801
    """The fields this binding knows. The library reads min(size, its sizeof) bytes and defaults
    newer fields, so a shorter struct stays valid when the header grows."""
    _fields_ = [("size", c_size_t), ("magic", c_uint32), ("version", c_uint32),
                ("ranks", POINTER(c_int)), ("nranks", c_int), ("dim_names", POINTER(c_char_p)),
                # version 2
                ("check_level", c_int), ("timeout", c_double)]

    def __init__(self):
        super().__init__()
        self.size = ctypes.sizeof(lm_mesh_config_t)
        self.magic = LM_MESH_CONFIG_MAGIC
        self.version = LM_MESH_CONFIG_VERSION
        self.check_level = -1   # LM_MESH_CONFIG_INIT's defaults: $LM_CHECK, $LM_TIMEOUT
        self.timeout = -1.0


# void *(*lm_device_alloc_fn_t)(void *ctx, size_t bytes, int device_id, void *stream)
lm_device_alloc_fn_t = CFUNCTYPE(c_void_p, c_void_p, c_size_t, c_int, c_void_p)
# void (*lm_device_free_fn_t)(void *ctx, void *ptr, size_t bytes, int device_id, void *stream)
lm_device_free_fn_t = CFUNCTYPE(None, c_void_p, c_void_p, c_size_t, c_int, c_void_p)
LM_DEVICE_CONFIG_MAGIC = 0x4C4D4443
LM_DEVICE_CONFIG_VERSION = 1


class lm_device_config_t(Structure):  # noqa: N801
    _fields_ = [("size", c_size_t), ("magic", c_uint32), ("version", c_uint32),
                ("stream", c_void_p), ("alloc", lm_device_alloc_fn_t),
                ("free", lm_device_free_fn_t), ("alloc_ctx", c_void_p)]

    def __init__(self):
        super().__init__()
        self.size = ctypes.sizeof(lm_device_config_t)
        self.magic = LM_DEVICE_CONFIG_MAGIC
        self.version = LM_DEVICE_CONFIG_VERSION


LM_RESHARD_PLAN_INFO_MAGIC = 0x4C4D5049  # "LMPI"
LM_RESHARD_PLAN_INFO_VERSION = 1
LM_PLAN_INFO_ALL_RANKS = 1


class lm_reshard_plan_info_t(Structure):  # noqa: N801
    """What executing a plan moves (lm_reshard_plan_info). The library writes min(size, its
    sizeof) bytes, so a shorter struct stays valid when the header grows."""
    _fields_ = [("size", c_size_t), ("magic", c_uint32), ("version", c_uint32),
                ("routes", c_uint32), ("reserved", c_uint32), ("steps", c_int64), ("peers", c_int64), ("flows_sent", c_int64),
                ("flows_received", c_int64), ("bytes_sent", c_int64), ("bytes_received", c_int64),
                ("bytes_copied", c_int64), ("bytes_reduced", c_int64),
                ("bytes_node_local", c_int64), ("work_bytes", c_int64),
                ("staging_bytes_max", c_int64)]

    def __init__(self):
        super().__init__()
        self.size = ctypes.sizeof(lm_reshard_plan_info_t)
        self.magic = LM_RESHARD_PLAN_INFO_MAGIC
        self.version = LM_RESHARD_PLAN_INFO_VERSION


class lm_reshard_entry_t(Structure):  # noqa: N801
    """One entry of a grouped reshard: what lm_reshard_plan_create takes, for one tensor."""
    _fields_ = [("ndim", c_int), ("global_shape", POINTER(c_int64)), ("dtype", DLDataType),
                ("src_placements", POINTER(lm_placement_t)),
                ("dst_placements", POINTER(lm_placement_t))]


LM_RESHARD_GROUP_CONFIG_MAGIC = 0x4C4D4743  # "LMGC"
LM_RESHARD_GROUP_CONFIG_VERSION = 1


class lm_reshard_group_config_t(Structure):  # noqa: N801
    """Options of lm_reshard_group_create (LM_RESHARD_GROUP_CONFIG_INIT's defaults). The library
    reads min(size, its sizeof) bytes and defaults newer fields."""
    _fields_ = [("size", c_size_t), ("magic", c_uint32), ("version", c_uint32),
                ("bucket_bytes", c_size_t), ("alone_bytes", c_size_t)]

    def __init__(self):
        super().__init__()
        self.size = ctypes.sizeof(lm_reshard_group_config_t)
        self.magic = LM_RESHARD_GROUP_CONFIG_MAGIC
        self.version = LM_RESHARD_GROUP_CONFIG_VERSION
        self.bucket_bytes = 0  # the library's defaults (64 MiB, 1 MiB)
        self.alone_bytes = 0


LM_LOCAL_MAP_OPTIONS_MAGIC = 0x4C4D4C4F  # "LMLO"
LM_LOCAL_MAP_OPTIONS_VERSION = 1


class lm_local_map_options_t(Structure):  # noqa: N801
    """Options of lm_local_map_ex (LM_LOCAL_MAP_OPTIONS_INIT: no gradient placements, no
    record). The library reads min(size, its sizeof) bytes."""
    _fields_ = [("size", c_size_t), ("magic", c_uint32), ("version", c_uint32),
                ("in_grad_placements", c_void_p), ("record", c_void_p)]

    def __init__(self):
        super().__init__()
        self.size = ctypes.sizeof(lm_local_map_options_t)
        self.magic = LM_LOCAL_MAP_OPTIONS_MAGIC
        self.version = LM_LOCAL_MAP_OPTIONS_VERSION


class lm_arg_t(Structure):  # noqa: N801
    _fields_ = [("kind", c_int32), ("reserved", c_int32), ("i64", c_int64), ("f64", c_double),
                ("ptr", c_void_p)]


# lm_status_t (*)(void *user_data, lm_mesh_t mesh, int nin, const lm_arg_t *inputs, int nout,
#                 lm_arg_t *outputs)
lm_local_fn_t = CFUNCTYPE(c_int, c_void_p, c_void_p, c_int, POINTER(lm_arg_t), c_int,
                          POINTER(lm_arg_t))

# Handles: typed opaque pointers in C, plain addresses here.
lm_mesh_t = c_void_p
lm_dist_tensor_t = c_void_p
lm_reshard_plan_t = c_void_p
lm_request_t = c_void_p
lm_reshard_group_t = c_void_p
P_tensor = POINTER(lm_dist_tensor_t)
P_placement = POINTER(lm_placement_t)
PP_placement = POINTER(P_placement)
P_i64 = POINTER(c_int64)
PP_i64 = POINTER(P_i64)
P_int = POINTER(c_int)
STATUS = "lm_status_t"  # marks functions returning lm_status_t (a C int)
status_t = STATUS

# ---------------------------------------------------------------------------------------------
# Prototypes: generated from api/localmap.api (localmap/_api.py) as C types, turned into ctypes
# here. status_t results are checked by _errcheck.
# ---------------------------------------------------------------------------------------------
lm_local_map_record_t = c_void_p
_C_TYPES = {
    "int": c_int, "unsigned": c_uint, "int32_t": c_int32, "int64_t": c_int64, "size_t": c_size_t,
    "lm_status_t": c_int, "DLDeviceType": c_int, "lm_shape_mode_t": c_int,
    "DLDataType": DLDataType, "DLDevice": DLDevice, "DLTensor": DLTensor,
    "lm_mesh_t": lm_mesh_t, "lm_dist_tensor_t": lm_dist_tensor_t,
    "lm_reshard_plan_t": lm_reshard_plan_t, "lm_request_t": lm_request_t,
    "lm_reshard_group_t": lm_reshard_group_t, "lm_local_map_record_t": lm_local_map_record_t,
    "lm_placement_t": lm_placement_t, "lm_arg_t": lm_arg_t, "lm_local_fn_t": lm_local_fn_t,
    "lm_mesh_config_t": lm_mesh_config_t, "lm_device_config_t": lm_device_config_t,
    "lm_reshard_plan_info_t": lm_reshard_plan_info_t, "lm_reshard_entry_t": lm_reshard_entry_t,
    "lm_reshard_group_config_t": lm_reshard_group_config_t,
    "lm_local_map_options_t": lm_local_map_options_t,
}
# Types ctypes passes as opaque addresses (DLPack capsules' pointers, argv).
_OPAQUE = {"void*": c_void_p, "char*": c_char_p, "const char*": c_char_p, "char***": c_void_p,
           "DLManagedTensor*": c_void_p, "DLManagedTensor**": POINTER(c_void_p)}


def _ctype(c):
    """The ctypes type of a C type as api/localmap.api renders it ("const int64_t*")."""
    if c in _OPAQUE:
        return _OPAQUE[c]
    if c == "void":
        return None
    base = c.replace("const", "").replace(" ", "")
    stars = base.count("*")
    t = _C_TYPES[base.rstrip("*")]
    for _ in range(stars):
        t = POINTER(t)
    return t


_PROTOTYPES = [(name, STATUS if ret == "lm_status_t" else _ctype(ret), [_ctype(a) for a in args])
               for name, ret, args in _api.PROTOTYPES]

# Set by localmap/_core.py: raise_status(status, function_name, message=None) raises the Error
# subclass of the status, with the library's last error message unless one is given.
raise_status = None


def _errcheck(result, func, args):
    if result != 0:
        raise_status(result, func.__name__)
    return result


MISSING = []  # functions of this binding that the loaded (older) library lacks


def _missing(name):
    def call(*args):
        raise_status(4, name, f"{name}: not in the liblocalmap loaded from {LOADED_FROM} "
                     f"(version {lib.lm_get_version()}); it is older than this binding")
    call.__name__ = name
    return call


def _declare():
    for name, restype, argtypes in _PROTOTYPES:
        try:
            f = getattr(lib, name)
        except AttributeError:
            MISSING.append(name)
            globals()[name] = _missing(name)
            continue
        f.restype = c_int if restype == STATUS else restype
        f.argtypes = argtypes
        if restype == STATUS:
            f.errcheck = _errcheck
        globals()[name] = f


_declare()
