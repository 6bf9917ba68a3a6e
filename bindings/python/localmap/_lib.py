# SPDX-License-Identifier: BSD-3-Clause
"""Loading liblocalmap and declaring its C ABI with ctypes.

Every function of include/localmap.h is declared here once, at import, from the generated
localmap/_api.py (its ctypes types and prototypes): functions returning lm_status_t get an
errcheck that raises localmap.Error on failure. call() is the one wrapper the Python API calls C
through: it allocates the outputs and checks array lengths by api/localmap.api's rules. This
module is private: the public API is in localmap/__init__.py.
"""
import ctypes
import os
import shutil
import subprocess
from pathlib import Path

from . import _api
from ._api import *  # noqa: F401,F403 - the C types (DLTensor, lm_placement_t, ...)

SONAME = "liblocalmap.so.1"
ENV_VAR = "LOCALMAP_LIBRARY"


class LibraryNotFoundError(ImportError):
    """liblocalmap.so.1 could not be loaded; the message lists every place that was tried."""


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


def _places(tried):
    """(what, short name, path) of each place to look after $LOCALMAP_LIBRARY, in order; the
    places that cannot be tried say why in `tried`."""
    here = Path(__file__).resolve().parent  # <root>/bindings/python/localmap
    root = here.parents[2] if len(here.parents) > 2 else None
    if root is not None and (root / "include" / "localmap.h").is_file():
        if (root / "build" / "lib" / SONAME).exists():
            yield "build tree", "build tree", root / "build" / "lib" / SONAME
        else:
            tried.append(f"build tree: {root / 'build' / 'lib' / SONAME} (not built: run "
                         f"`make lib` in {root})")
    else:
        tried.append("build tree: not imported from a localmap source checkout")
    libdir, why = _pkg_config_libdir()
    if libdir is not None:
        yield "pkg-config localmap", "pkg-config", Path(libdir) / SONAME
    else:
        tried.append(f"pkg-config localmap: {why}")
    yield "dynamic loader search path", "dynamic loader", SONAME


def _load():
    """Loads the library: $LOCALMAP_LIBRARY, else the build tree of a source checkout, else
    pkg-config's libdir, else the dynamic loader's search path. Returns (CDLL, where)."""
    tried = []

    def attempt(what, path):
        try:  # RTLD_GLOBAL: libmpi's MCA components resolve symbols against the global scope
            return ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
        except OSError as e:
            tried.append(f"{what}: {path} ({e})")
            return None

    env = os.environ.get(ENV_VAR)
    if env:
        p = Path(env) / SONAME if Path(env).is_dir() else Path(env)
        lib = attempt(f"${ENV_VAR}", p)
        if lib is None:
            raise LibraryNotFoundError(f"localmap: cannot load the library named by ${ENV_VAR}: "
                                       f"{tried[0]}")
        return lib, f"${ENV_VAR} ({p})"
    tried.append(f"${ENV_VAR}: not set")
    for what, short, path in _places(tried):
        lib = attempt(what, path)
        if lib is not None:
            return lib, f"{short} ({path})"
    raise LibraryNotFoundError(
        "localmap: cannot find " + SONAME + ". Tried:\n  " + "\n  ".join(tried) +
        f"\nSet ${ENV_VAR} to the library (or its directory), add localmap.pc's directory to "
        "PKG_CONFIG_PATH, or add the library's directory to LD_LIBRARY_PATH.")


lib, LOADED_FROM = _load()

# ---------------------------------------------------------------------------------------------
# Prototypes, errors
# ---------------------------------------------------------------------------------------------


class Error(Exception):
    """A failed localmap call. `status` is the lm_status_t code, `status_name` its name
    (e.g. "LM_ERR_INVALID_ARGUMENT"), `message` the library's message (names the function, the
    argument and the rank). Each status has its subclass (localmap.InvalidArgumentError, ...)."""

    def __init__(self, status, message):
        self.status = int(status)
        self.message = message
        super().__init__(message)

    @property
    def status_name(self):
        """The name of `status`, e.g. "LM_ERR_INVALID_ARGUMENT" (str)."""
        return lm_status_string(self.status).decode().split(":")[0]

    def __str__(self):
        return f"[{self.status_name}] {self.message}"


# Set by localmap/_core.py: raise_status(status, function_name, message=None) raises the Error
# subclass of the status, with the library's last error message unless one is given.
raise_status = None


def _errcheck(result, func, args):
    if result != 0:
        raise_status(result, func.__name__)
    return result


MISSING = []  # functions of this binding that the loaded (older) library lacks


def _missing(name):
    def absent(*args):
        raise_status(_api.LM_ERR_NOT_SUPPORTED, name, f"{name}: not in the liblocalmap loaded "
                     f"from {LOADED_FROM} (version {lib.lm_get_version()}); it is older than "
                     "this binding")
    absent.__name__ = name
    return absent


def _declare():
    for name, (restype, argtypes) in _api.PROTOTYPES.items():
        try:
            f = getattr(lib, name)
        except AttributeError:
            MISSING.append(name)
            globals()[name] = _missing(name)
            continue
        f.restype, f.argtypes = restype, argtypes
        if _api.FUNCTIONS[name][0] == "lm_status_t":
            f.errcheck = _errcheck
        globals()[name] = f


_declare()

# ---------------------------------------------------------------------------------------------
# call(): the outputs allocated, the array lengths checked by api/localmap.api's rules
# ---------------------------------------------------------------------------------------------


def call(fname, *args, names=None, ndims=None):
    """Calls the C function `fname` with `args`, its in and inout arguments in order (its out
    arguments left out), and returns what it writes: None, the one value, or a tuple of them. An
    integer or a handle comes back as an int (None for NULL), a struct as itself, an integer
    array as a tuple, a char buffer as a str, another array as the ctypes array. A function that
    returns no status (lm_get_version, lm_status_string) writes nothing: it returns its value.

    An array argument given as a Python list or tuple is first checked against its length rule
    (check(), which says what `names` and `ndims` do), then converted: an element with
    `_as_parameter_` (Placement, DistTensor) gives that; a two-level array takes None or a list
    per entry."""
    spec = _api.FUNCTIONS[fname][1]
    ins = [a for a in spec if a[1] != "out"]
    if len(args) != len(ins):
        raise TypeError(f"{fname} takes {len(ins)} in and inout arguments, got {len(args)}")
    values = {a[0]: v for a, v in zip(ins, args)}
    check(fname, values, names, ndims)
    cargs, outs, keep = [], [], []
    for (name, direction, _, dims, null_ok), t in zip(spec, _api.PROTOTYPES[fname][1]):
        if direction == "out":
            v = _alloc(t._type_, dims, values, null_ok)
            outs.append((v, dims))
            cargs.append(ctypes.byref(v) if not dims else v)
        else:
            cargs.append(_to_c(t, dims, values[name], keep))
    ret = globals()[fname](*cargs)
    if _api.FUNCTIONS[fname][0] != "lm_status_t":
        return ret
    got = tuple(_from_c(v, dims, values) for v, dims in outs)
    return None if not got else got[0] if len(got) == 1 else got


def _out_length(rule, values):
    return int(rule) if rule.isdigit() else int(values[rule])


def _alloc(elem, dims, values, null_ok):
    """An out argument: a scalar, or an array of its rule's length (NULL for length 0 where the
    argument may be NULL)."""
    if not dims:
        return elem()
    n = _out_length(dims[0], values)
    return None if n == 0 and null_ok else (elem * max(n, 1))()


def _to_c(argtype, dims, value, keep):
    """An in argument as ctypes takes it: an object with `_as_parameter_` gives that (here, so
    that its own exception is raised), a Python list or tuple of an array argument becomes a
    ctypes array (kept alive in `keep` until the call returns), anything else goes as it is."""
    if not dims or not isinstance(value, (list, tuple)):
        return getattr(value, "_as_parameter_", value)
    return _array(argtype._type_, value, len(dims) == 2, keep)


def to_c(fname, argname, value, keep):
    """`value` as the ctypes argument `argname` of C function `fname` takes it (a list as its
    array, kept alive in `keep`): for the structs whose arrays are those of a function
    (lm_reshard_entry_t's are lm_reshard_plan_create's)."""
    for (name, _, _, dims, _), t in zip(_api.FUNCTIONS[fname][1], _api.PROTOTYPES[fname][1]):
        if name == argname:
            return _to_c(t, dims, value, keep)
    raise KeyError(f"{fname} has no argument {argname}")


def _array(elem, items, rows, keep):
    if rows:  # a pointer per entry: NULL, or the entry's own array
        items = [None if r is None else ctypes.cast(_array(elem._type_, r, False, keep), elem)
                 for r in items]
    arr = (elem * max(len(items), 1))(*(getattr(x, "_as_parameter_", x) for x in items))
    keep.append(arr)
    return arr


def _from_c(v, dims, values):
    if not dims:
        return v.value if isinstance(v, ctypes._SimpleCData) else v
    if v is None:
        return ()
    if v._type_ is ctypes.c_char:
        return v.value.decode()
    n = _out_length(dims[0], values)
    return tuple(v[:n]) if issubclass(v._type_, ctypes._SimpleCData) else v[:n]


def check(fname, values, names=None, ndims=None):
    """Checks the arrays among `values` ({C argument of `fname`: value}) that are Python lists
    or tuples against their length rules in api/localmap.api, and raises InvalidArgumentError
    in Python's terms before any C call ("placements: 1 placements for a mesh of 2 dims (...)").
    `names` ({argument: Python name}) names an array, or a length argument, as the caller's user
    knows it; `ndims` ({argument: ndim}) gives the ndim a rule reads of an argument where the
    caller knows it better (local_map's mesh, the inputs' when it is None)."""
    spec = {a[0]: a for a in _api.FUNCTIONS[fname][1]}
    names, ndims = names or {}, ndims or {}
    for name, _, ctype, dims, _ in spec.values():
        v = values.get(name)
        if not dims or not isinstance(v, (list, tuple)):
            continue
        pyname = names.get(name, name)
        want, of = _rule(dims[0], spec, values, names, ndims)
        if want is not None and len(v) != want:
            raise_status(_api.LM_ERR_INVALID_ARGUMENT, fname,
                         _wrong_length(pyname, ctype, len(v), want, of, len(dims) == 2))
        want, of = _rule(dims[-1], spec, values, names, ndims) if len(dims) == 2 else (None, "")
        for i, row in enumerate(v if want is not None else ()):
            if isinstance(row, (list, tuple)) and len(row) != want:
                raise_status(_api.LM_ERR_INVALID_ARGUMENT, fname,
                             _wrong_length(f"{pyname}[{i}]", ctype, len(row), want, of, False))


def _rule(rule, spec, values, names, ndims):
    """(length, what it is in words) of a length rule, or (None, None) where it cannot be told
    (`*`, a NULL handle without an alternative)."""
    for alt in rule.split("|"):
        if alt.isdigit() or alt == "*":
            return (int(alt), alt) if alt != "*" else (None, None)
        head, _, path = alt.partition(".")
        v, ctype = values.get(head), spec[head][2]
        if not path:  # another argument: a count
            if v is None:
                continue
            return int(v), f"{int(v)} {names[head]}" if head in names else f"{head} = {int(v)}"
        n = ndims.get(head) if head in ndims else None if v is None else _ndim(ctype, path, v)
        if n is None:
            continue
        what = "mesh" if "mesh" in path or ctype == "lm_mesh_t" else \
            "tensor" if ctype == "lm_dist_tensor_t" else "local tensor"
        return n, f"a {what} of {n} dims"
    return None, None


def _ndim(ctype, path, v):
    """The ndim a rule's `X.ndim` or `X.mesh.ndim` reads of argument X (of C type `ctype`)."""
    h = getattr(v, "_as_parameter_", v)
    if ctype == "lm_dist_tensor_t" and path == "mesh.ndim":
        return call("lm_mesh_ndim", call("lm_dist_tensor_mesh", h))
    if ctype in ("lm_dist_tensor_t", "lm_mesh_t"):
        return call(ctype[:-2] + "_ndim", h)  # lm_dist_tensor_ndim, lm_mesh_ndim
    if ctype == "DLManagedTensor*":
        return DLManagedTensor.from_address(h).dl_tensor.ndim
    return v.ndim  # a DLTensor


# How the length messages name the elements of an array, by C element type.
_NOUNS = {"lm_placement_t": "placements", "int64_t": "extents", "lm_dist_tensor_t": "tensors"}


def _wrong_length(name, ctype, got, want, of, outer):
    """The message of an array `name` of `got` elements where its rule (`of`, in words) says
    `want`; `outer`: the entries of a two-level array."""
    elem = ctype.replace("const", "").replace("*", "").strip()
    if outer:
        return f"{name}: {got} entries for {of}"
    if elem == "lm_placement_t":
        return f"{name}: {got} placements for {of} (a list with one Placement per mesh dim)"
    if elem == "int":
        return f"{name} has {got} entries, not {want}" + \
            ("" if of == str(want) else f" (one per dim of {of})")
    return f"{name}: {got} {_NOUNS.get(elem, 'entries')} for {of}"
