# SPDX-License-Identifier: BSD-3-Clause
"""Python's generated idiomatic parts (tools/api.py): bindings/python/localmap/_wrappers.py.

From include/localmap.h: the public constants (enum members and integer #defines without their
LM_ prefix), the names of the enums Python spells as strings (REDUCE_OPS, TRANSPORTS, ROUTES,
SHAPE_MODES), and one exception class per LM_ERR_* status, documented by the header's comment.

From api/localmap.api and the table WRAPPERS below: each Python method or function that is one
C call. The table names it in Python (its signature) and the C function; the generator writes
the call, converting every argument by its C type (a Mesh checked by _core._mesh_h, placements
by _core._placements, shapes by _core._ints, dtypes and devices by _dlpack, an enum as an int,
a count as the length of the array it counts, the capacity of an output array as the count a
first call with capacity 0 asks) and the result by its C type (a new tensor or plan wrapped as
its class; what a function that returns no status returns, as it is). Names starting with _
are private (not in __all__).
localmap/_core.py builds the classes on the generated ones."""
import re
import sys

api = sys.modules["api"]  # tools/api.py, which loads this module
gen = sys.modules["api_gen_python"]  # the header readers
OUTPUT = "bindings/python/localmap/_wrappers.py"
WIDTH = 100

# Python's classes of the C handles (a method's first C argument of that type is `self`).
CLASSES = {"lm_mesh_t": "Mesh", "lm_dist_tensor_t": "DistTensor",
           "lm_reshard_plan_t": "ReshardPlan", "lm_reshard_group_t": "ReshardGroup",
           "lm_local_map_record_t": "LocalMapRecord"}

# The statuses' exceptions: Python's own base classes beside Error, and the docstrings where
# Python says more than the header's comment.
ERROR_BASES = {"INVALID_ARGUMENT": "ValueError", "OUT_OF_MEMORY": "MemoryError",
               "TIMEOUT": "builtins.TimeoutError"}
ERROR_DOCS = {
    "USER": "the function given to local_map failed (raised on the failing rank, chained to the "
            "Python exception the function raised)",
    "TIMEOUT": "a collective waited longer than the mesh's timeout (or $LM_TIMEOUT); the mesh "
               "is broken",
}
ACRONYMS = {"MPI", "NCCL", "CUDA"}
# The constants that are public (in __all__), by prefix once LM_ is gone.
PUBLIC = ("SUCCESS", "ERR_", "ARG_", "RECORD_", "REDUCE_OPS")

# localmap.Placement's base holds lm_placement_t's fields, each an int, but for the reserved
# ones; the fields named here are private to Python (_eid, its constructor's last argument eid:
# RaggedShard registers its extents itself).
PLACEMENT_PRIVATE = {"extents": "eid"}

# The options structs a wrapper makes from its keyword parameters (see _options).
OPTIONS = ("lm_mesh_config_t",)

# Enums whose members Python names by strings: (Python name, prefix of the members, form).
NAMED = [("REDUCE_OPS", "LM_REDUCE_", "tuple"), ("TRANSPORTS", "LM_TRANSPORT_", "by value"),
         ("ROUTES", "LM_ROUTE_", "by value"), ("SHAPE_MODES", "LM_SHAPE_", "by name")]

# The methods and functions that are one C call, W(name, C function, ...): the name is
# "Class.attr" for a property, else a def's head ("Class.name(self, ...)", "Class.name(cls, ...)"
# for a classmethod, "name(...)"). args: {C argument: Python expression} for the arguments no
# parameter of the same name gives (a bare parameter name renames one). result: an expression of
# `r`, what the call writes (default: by its C type). before: a statement run first.


def W(name, cname, args=None, result=None, doc=None, before=None):
    return name, cname, args or {}, result, doc, before


_DEVICE_TYPE = {"device_type": "dl.dl_device(device).device_type"}
_PLACEMENTS = "tuple(_c._placement_from_c(p) for p in r[0][:r[1]])"  # a record's
_TARGET = "dst = self.alloc_target(src.device) if dst is None else dst"

WRAPPERS = [
    W("library_version()", "lm_get_version", result="(r // 10000, r // 100 % 100, r % 100)",
      doc="(major, minor, patch) of the liblocalmap actually loaded."),
    W("status_string(status)", "lm_status_string", result="r.decode()",
      doc='The library\'s name for a status code ("LM_ERR_USER: ...").'),
    W("finalize()", "lm_finalize",
      doc="Finalises MPI if init() initialised it (a no-op otherwise, e.g. under mpi4py)."),
    W("comm_world()", "lm_comm_world", before="_c.init()",
      doc="MPI_COMM_WORLD as a Fortran handle (int)."),
    W("world_rank()", "lm_world_rank", before="_c.init()",
      doc="(rank, size) in MPI_COMM_WORLD."),
    W("device_supported(device)", "lm_device_supported", _DEVICE_TYPE, "bool(r)",
      'Whether this build can hold tensors on a device type ("cpu", "cuda", or a code).'),
    W("chunk(n, parts, index)", "lm_layout_chunk",
      doc="torch.chunk layout: (offset, length) of block `index` of `parts` over an extent n."),
    W('tensor_alloc(shape, dtype, device="cpu")', "lm_tensor_alloc", {},
      'dl.array_from_managed(r, "tensor_alloc")',
      "A zero-filled, 64-byte aligned local array from localmap's buffer pool (lm_tensor_alloc): "
      "a numpy array whose memory the library frees when the array dies. Handy for local_map "
      "outputs (returned without a copy). Local; needs no MPI."),
    W("pool_stats(reset_peak=False)", "lm_pool_stats", {"reset_peak": "1 if reset_peak else 0"},
      doc="(bytes in use, high-water mark) of the library's host buffer pool on this process "
      "(tensor storage, reshard staging); reset_peak=True then sets the mark to the bytes in "
      "use. Local."),
    W("placements_adjoint(placements)", "lm_placements_adjoint",
      doc="The placements of a gradient, PyTorch DTensor's convention: Partial('sum') becomes "
      "Replicate(), Shard and Replicate are kept; Partial avg/max/min/prod raise "
      "NotSupportedError."),
    W("format_placements(placements)", "lm_placements_format",
      {"size": "64 + 32 * len(placements)"},
      doc='The library\'s short form, e.g. "[S(0), R, P(sum)]".'),
    W('zeros(mesh, shape, dtype, placements, device="cpu")', "lm_dist_tensor_zeros",
      {"global_shape": "shape"},
      doc="A zero-filled tensor; each member rank allocates its shard. Local."),
    W("from_global(full, mesh, placements, root=-1)", "lm_dist_tensor_from_global",
      {"global": 'None if full is None else dl.borrow(full, "global")'},
      doc="A tensor from the full tensor. root < 0: every rank passes `full` and members keep "
      "their slice (local; a copy). root >= 0: only mesh rank `root` passes it (others None) "
      "and it is scattered (collective over the mesh)."),
    W("_extents(ident)", "lm_extents_get", {"id": "ident"}, "r[0]",
      "The lengths of a registered extents id."),
    W("reshard_estimate(src_mesh, src_placements, dst_placements, shape, dtype, dst_mesh=None, "
      "all_ranks=False)", "lm_reshard_estimate",
      {"global_shape": "shape", "flags": "PLAN_INFO_ALL_RANKS if all_ranks else 0",
       "info": "info"}, "_c._plan_info_dict(info)",
      "What a reshard would move, without building a plan (lm_reshard_estimate): the dict "
      "ReshardPlan(src_mesh, src_placements, dst_mesh or src_mesh, dst_placements, shape, "
      "dtype).info(all_ranks) would give. Local, unless all_ranks=True (then collective over "
      "both meshes). For layout searches: no handle, no buffer.",
      "info = _lib.lm_reshard_plan_info_t()"),
    W("Mesh.__init__(self, shape, comm=None, *, ranks=None, dim_names=None, check_level=None, "
      "timeout=None)", "lm_mesh_create", {"parent_comm": "_c._comm_f(comm)"}),
    W("Mesh.grid(cls, myrow, mycol, comm=None)", "lm_mesh_create_grid",
      {"parent_comm": "_c._comm_f(comm)", "config": "None"}, "cls._wrap(r)",
      "The 2-D mesh of a process grid (lm_mesh_create_grid): its coordinate (r, c) is the rank "
      "of `comm` that passes (myrow, mycol) = (r, c), e.g. what BLACS's gridinfo returns; a rank "
      "outside the grid passes -1, -1. Collective over comm (None: MPI_COMM_WORLD)."),
    W("Mesh.ndim", "lm_mesh_ndim", doc="The number of mesh dims (int)."),
    W("Mesh.shape", "lm_mesh_shape", {"n": "self.ndim"},
      doc="The number of ranks along each mesh dim (a tuple of ints)."),
    W("Mesh.size", "lm_mesh_size", doc="Number of ranks in the mesh."),
    W("Mesh.is_member", "lm_mesh_is_member", result="bool(r)",
      doc="Whether this rank is one of the mesh's ranks (bool)."),
    W("Mesh.coord", "lm_mesh_coord", {"n": "self.ndim"},
      doc="This rank's coordinate (InvalidUsageError on a non-member)."),
    W("Mesh.rank", "lm_mesh_rank",
      doc="This rank's row-major index in the mesh (InvalidUsageError on a non-member)."),
    W("Mesh.dim_index(self, name)", "lm_mesh_dim_index",
      doc="The index of the mesh dim called `name` (InvalidArgumentError if none)."),
    W("Mesh.dim_name(self, dim)", "lm_mesh_dim_name", {"size": "128"},
      doc='The name of mesh dim `dim` ("" when unnamed).'),
    W("Mesh.dim_comm_f(self, dim)", "lm_mesh_dim_comm", {"dim": "self._dim(dim)"},
      doc="The communicator along mesh dim `dim` (index or name) as a Fortran handle; owned by "
      "the mesh. InvalidUsageError on a non-member."),
    W("Mesh.dim_comm(self, dim)", "lm_mesh_dim_comm", {"dim": "self._dim(dim)"},
      "_c._mpi4py_comm(r)",
      "The communicator along mesh dim `dim` as an mpi4py Comm (imports mpi4py); owned by the "
      "mesh: do not Free() it."),
    W("Mesh.comm_f", "lm_mesh_comm",
      doc="The communicator of all mesh ranks as a Fortran handle (owned by the mesh)."),
    W("Mesh.comm", "lm_mesh_comm", result="_c._mpi4py_comm(r)",
      doc="The communicator of all mesh ranks as an mpi4py Comm (owned by the mesh)."),
    W('Mesh.transport(self, device="cuda")', "lm_mesh_transport", _DEVICE_TYPE,
      "TRANSPORTS.get(r, r)",
      'How tensors of a device type move on this mesh: "mpi", "nccl", "mpi_staged", or '
      '"undecided" (device data has not moved yet). Local.'),
    W("DistTensor.mesh", "lm_dist_tensor_mesh", result="_c.Mesh._borrow(r, self.retain())",
      doc="The tensor's mesh (borrowed: valid as long as this Mesh object lives, which keeps a "
      "reference on the tensor)."),
    W("DistTensor._mesh_ndim(self)", "lm_mesh_ndim",
      {"mesh": 'call("lm_dist_tensor_mesh", self)'}),
    W("DistTensor.ndim", "lm_dist_tensor_ndim", doc="The number of tensor dims (int)."),
    W("DistTensor._dl_dtype(self)", "lm_dist_tensor_dtype"),
    W("DistTensor.dtype", "lm_dist_tensor_dtype", result="dl.np_dtype(r)",
      doc='The numpy dtype (the string "bfloat16" when numpy has none).'),
    W("DistTensor.device", "lm_dist_tensor_device", result="dl.device_tuple(r)",
      doc="(DLDeviceType, device id), e.g. (1, 0) for the CPU."),
    W("DistTensor.__dlpack_device__(self)", "lm_dist_tensor_device", result="dl.device_tuple(r)"),
    W("DistTensor.placements", "lm_dist_tensor_placements", {"n": "self._mesh_ndim()"},
      doc="One Placement per mesh dim."),
    W("DistTensor.shape", "lm_dist_tensor_global_shape", {"n": "self.ndim"},
      doc="The global shape."),
    W("DistTensor.local_shape", "lm_dist_tensor_local_shape", {"n": "self.ndim"},
      doc="The shape of this rank's local shard (a tuple of ints, one per tensor dim)."),
    W("DistTensor.local_offset", "lm_dist_tensor_local_offset", {"n": "self.ndim"},
      doc="Global index of the local shard's first element per dim (0 on non-members)."),
    W("DistTensor.to_scalapack(self, ctxt=0)", "lm_dist_tensor_to_scalapack", result="list(r)",
      doc="This tensor's layout as a ScaLAPACK descriptor (9 ints; lm_dist_tensor_to_scalapack): "
      "the [N, M] tensor read as the column-major M x N matrix; its local shard is the array."),
    W("DistTensor.local_extents", "lm_padded_extents", {"view": "v", "n": "v.ndim"},
      doc="Extents of the row-major array the local shard lies in (lm_padded_extents): the "
      "local shape, except for a shard borrowed with padded rows (a ScaLAPACK array with LLD_ > "
      "LOCr gives (LOCc, LLD_)).", before='v = call("lm_dist_tensor_local", self)'),
    W("DistTensor.local_view(self)", "lm_dist_tensor_local",
      result="(r.data or 0, tuple(r.shape[i] for i in range(r.ndim)), dl.np_dtype(r.dtype))",
      doc="(data address, shape, dtype) of the local shard as lm_dist_tensor_local gives it; "
      "valid while this tensor lives (prefer local(), which keeps it alive)."),
    W("DistTensor._export(self)", "lm_dist_tensor_to_dlpack"),
    W("DistTensor.local(self)", "lm_dist_tensor_to_dlpack",
      result='dl.array_from_managed(r, "DistTensor.local")',
      doc="The local shard as a writable numpy array sharing the tensor's memory; the array "
      "keeps the tensor alive (even after close())."),
    W("DistTensor.retain(self)", "lm_dist_tensor_retain",
      result="_c.DistTensor._wrap(self._handle().value)",
      doc="A new DistTensor object holding its own reference on the same tensor."),
    W("DistTensor.reshard(self, placements, mesh=None)", "lm_dist_tensor_reshard",
      {"dst_mesh": "mesh"},
      doc="A tensor with this value and `placements` on `mesh` (default: this tensor's mesh). "
      "Collective over both meshes. A Replicate -> Shard reshard may return a view sharing "
      "memory with this tensor."),
    W("DistTensor.transpose(self, perm, placements, mesh=None)", "lm_dist_tensor_transpose",
      {"dst_mesh": "mesh"},
      doc="This tensor with its dims permuted as numpy.transpose(x, perm) (a matrix: (1, 0)), "
      "laid out with `placements` (in the result's dims) on `mesh` (default: this tensor's "
      "mesh); lm_dist_tensor_transpose. Host or device tensors. Collective over both meshes."),
    W("DistTensor.transpose_into(self, dst, perm)", "lm_dist_tensor_transpose_into",
      {"src": "self"},
      doc="Writes this tensor with its dims permuted as numpy.transpose(x, perm) into `dst` (a "
      "DistTensor whose global shape is this one's permuted, of the same dtype, with its own "
      "mesh and placements; a padded borrow keeps its padding); lm_dist_tensor_transpose_into. "
      "dst on this tensor's device (host or CUDA). Collective over both meshes."),
    W("ReshardPlan.__init__(self, src_mesh, src_placements, dst_mesh, dst_placements, shape, "
      "dtype)", "lm_reshard_plan_create",
      {"global_shape": "shape", "dst_mesh": '_c._mesh_h(dst_mesh, "dst_mesh")'}),
    W('ReshardPlan.alloc_target(self, device="cpu")', "lm_reshard_plan_alloc_target",
      doc="A zero-filled tensor laid out as the plan's target. Local."),
    W("ReshardPlan.execute(self, src, dst=None)", "lm_reshard_plan_execute", result="dst",
      doc="Runs the plan from src into dst (allocated with alloc_target() when None); returns "
      "dst. Collective over the ranks of both meshes.", before=_TARGET),
    W("ReshardPlan.start(self, src, dst=None)", "lm_reshard_plan_start",
      result="self._started(_c.Request(r, self, src, dst))",
      doc="Starts the plan without waiting; returns a Request (its .dst is the target). Do not "
      "touch src or dst until the request completes.", before=_TARGET),
    W("ReshardPlan.adjoint(self)", "lm_reshard_plan_adjoint",
      doc="The backward plan: a gradient in placements_adjoint(target placements) on the "
      "target mesh to placements_adjoint(source placements) on the source mesh. Local."),
    W("ReshardPlan.info(self, all_ranks=False)", "lm_reshard_plan_info",
      {"flags": "PLAN_INFO_ALL_RANKS if all_ranks else 0", "info": "info"},
      "_c._plan_info_dict(info)",
      "What an execution moves, as a dict (lm_reshard_plan_info): this rank's counts (local), "
      "or every rank's summed with all_ranks=True (collective over both meshes). 'routes' is a "
      "set of 'mpi', 'node_local', 'board'.", "info = _lib.lm_reshard_plan_info_t()"),
    W("ReshardPlan.bytes_sent", "lm_reshard_plan_info", {"flags": "0", "info": "info"},
      "info.bytes_sent",
      'Bytes this rank sends to other ranks per execution (info()["bytes_sent"]: local).',
      "info = _lib.lm_reshard_plan_info_t()"),
    W("ReshardPlan.describe(self)", "lm_reshard_plan_describe", {"size": "4096"},
      doc="A one-line description of the plan's steps."),
    W("ReshardGroup.size(self)", "lm_reshard_group_size", result="r[0]",
      doc="The number of entries (len(group))."),
    W("ReshardGroup.__len__(self)", "lm_reshard_group_size", result="r[0]"),
    W("ReshardGroup.buckets", "lm_reshard_group_size", result="r[1]",
      doc="The number of buckets the entries were dealt into (0 for no entries)."),
    W('ReshardGroup.alloc_targets(self, device="cpu")', "lm_reshard_group_alloc_targets",
      {"n": "self.size()"}, "[_c.DistTensor._wrap(h) for h in r]",
      "A list of zero-filled tensors laid out as the entries' targets. Local."),
    W("LocalMapRecord.placements(self, which, index)", "lm_local_map_record_placements",
      {"capacity": "32"}, _PLACEMENTS,
      "The recorded placements `which` (RECORD_INPUT ... RECORD_OUT_GRAD) of index."),
] + [W("LocalMapRecord.%s(self, %s)" % (name, i), "lm_local_map_record_placements",
       {"which": which, "index": i, "capacity": "32"}, _PLACEMENTS, doc)
     for name, i, which, doc in [
         ("input", "i", "RECORD_INPUT", "The placements DistTensor input i had."),
         ("seen", "i", "RECORD_IN", "The placements of the view of input i that fn saw."),
         ("in_grad", "i", "RECORD_IN_GRAD", "The placements of the gradient of fn's view of "
          "input i (in_grad_placements[i], else seen(i))."),
         ("out", "j", "RECORD_OUT", "The placements of dist output j."),
         ("out_grad", "j", "RECORD_OUT_GRAD", "The placements of output j's gradient "
          "(placements_adjoint(out(j)): Partial(sum) -> Replicate)."),
     ]] + [
    W("LocalMapRecord.input_grad(self, index, grad)", "lm_local_map_record_input_grad",
      doc="grad (a DistTensor with input `index`'s global shape, normally placed in_grad(index) "
      "on the call's mesh) resharded to that input's own mesh and the adjoint of its own "
      "placements: a new DistTensor. Collective."),
]


def _convert(a, param, owner):
    """The Python expression that gives C argument `a` (an _api arg tuple) from parameter
    `param`, by its C type."""
    name, _, ctype, dims, null_ok = a
    base = ctype.replace("const", "").replace("*", "").strip()
    if dims:
        if base == "lm_placement_t":
            return '_c._placements(%s, "%s")' % (param, param)
        if base in ("int64_t", "int"):
            one = "" if base == "int64_t" else ", one=False"  # a shape may be one int
            return '_c._ints(%s, "%s"%s)' % (param, param, one)
        raise SystemExit("api_gen_python_wrappers: no Python form of the array %s" % name)
    if base in CLASSES and base != "lm_mesh_t":
        return "self" if CLASSES[base] == owner and param == "self" else \
            '_c._object(%s, "%s", _c.%s)' % (param, param, CLASSES[base])
    form = {"lm_mesh_t": '_c._mesh_h({p}, "{p}")', "DLDataType": 'dl.dl_dtype({p}, "{p}")',
            "DLDevice": 'dl.dl_device({p}, "{p}")', "char": "str({p}).encode()",
            "int": "int({p})", "int64_t": "int({p})", "int32_t": "int({p})"}.get(base)
    if form is None and base in gen.enums(gen.header_text()):  # an enum: a C int
        form = "int({p})"
    if form is None:
        raise SystemExit("api_gen_python_wrappers: no Python form of %s %s" % (ctype, name))
    conv = form.format(p=param)
    return "None if %s is None else %s" % (param, conv) if null_ok else conv


def _result(f, owner, pyname):
    """The default expression of what C function `f` writes, `r`."""
    outs = [a for a in f.args if a.direction == "out"]
    if len(outs) == 1:
        base = outs[0].base.replace("const", "").strip()
        if base in CLASSES and not outs[0].dims:
            if pyname == "__init__":
                return None
            return "_c.%s._wrap(r)" % CLASSES[base]
        if base == "lm_placement_t":
            return "tuple(_c._placement_from_c(p) for p in r)"
    return "r"


def wrapper(row, funcs):
    """The lines of one WRAPPERS row, indented for its class or not."""
    name, cname, given, result, doc, before = row
    f = funcs[cname]
    owner, _, head = name.rpartition(".")
    prop = "(" not in head
    head = "%s(self)" % head if prop else head
    pyname, params = re.fullmatch(r"(\w+)\((.*)\)", head).groups()
    params = [p.split("=")[0].strip() for p in params.split(",") if p.strip()]
    ind = "    " if owner else ""
    out = [""] if owner else ["", ""]
    if prop or params[:1] == ["cls"]:
        out.append(ind + ("@property" if prop else "@classmethod"))
    out += _fill("def %s(" % pyname, [p.strip() for p in _params(head)], "):", ind, 8)
    if doc:
        out += _docstring(doc, ind + "    ")
    body, args = _arguments(name, f, given, params, owner)
    res = result or _result(f, owner, pyname)
    items = ['"%s"' % cname] + args
    if pyname == "__init__":
        call = ("_c._Handle.__init__(self, call(", "))")
    else:
        keep = re.search(r"\br\b", res) and res != "r"  # the result reads what the call wrote
        call = ("return call(" if res == "r" else "r = call(" if keep else "call(", ")")
    out += [line for b in ([before] if before else []) + body for line in _wrap(b, ind + "    ")]
    out += _fill(call[0], items, call[1], ind + "    ")
    if res != "r" and pyname != "__init__":
        out.append(ind + "    return " + res)
    return out


def _params(head):
    """The parameters of a def's head "name(a, b=1)" as written."""
    inside = head[head.index("(") + 1:-1]
    return [p for p in re.split(r",\s*(?![^()]*\))", inside) if p.strip()]


def _arguments(name, f, given, params, owner):
    """(statements converting the arrays first, the C call's in arguments as expressions). The
    capacity of an out array that may be NULL, given by no parameter, is its count: a first
    call with capacity 0 asks it (the function's other output)."""
    counts = {a.dims[0]: a.name for a in f.args if a.dims and a.direction == "in"}
    outs = [a for a in f.args if a.direction == "out"]
    sized = {a.dims[0] for a in outs if a.dims and a.null_ok}
    body, args = [], []
    first = next((a for a in f.args if a.direction != "out"), None)
    for a in f.args:
        if a.direction == "out":
            continue
        g = given.get(a.name)
        param = g if g in params else a.name if a.name in params and g is None else None
        if a is first and CLASSES.get(a.base) == owner and "self" not in given.values():
            args.append("self")
        elif g is not None and param is None:
            args.append(g)  # an expression
        elif a.name in counts:  # the length of the array it counts
            arr = counts[a.name]
            args.append("len(%s)" % (given.get(arr) if given.get(arr) in params else arr))
        elif a.name in sized and param is None and len(outs) == 2:  # asked first
            args.append("count")
        elif param is None and a.base.replace("const", "").strip(" *") in OPTIONS:
            body += _options(a, params)  # options made from the parameters named as its fields
            args.append(a.name)
        elif param is None:
            raise SystemExit("api_gen_python_wrappers: %s gives no %s of %s" % (name, a.name,
                                                                                  f.name))
        elif a.dims:  # converted first, for its count
            body.append("%s = %s" % (param, _convert(_tuple(a), param, owner)))
            args.append(param)
        else:
            args.append(_convert(_tuple(a), param, owner))
    if "count" in args:
        query = ['"%s"' % f.name] + ["0" if x == "count" else x for x in args]
        body.append("count = call(%s)[%d]" % (", ".join(query),
                                               [not o.dims for o in outs].index(True)))
    return body, args


def _options(a, params):
    """Statements making options struct argument `a` (an lm_X_config_t) from the parameters
    named as its fields: each one not None sets its field, an array also its count field
    (n<field>: ranks, nranks), converted by its C type; the others keep the _INIT values."""
    struct = a.base.replace("const", "").strip(" *")
    fields = dict(gen.structs(gen.header_text()))[struct]
    arrays = {f for f, t in fields if "*" in t}
    out = ["%s = _lib.%s()" % (a.name, struct)]
    for f, t in fields:
        if f in ("size", "magic", "version") or (f[:1] == "n" and f[1:] in arrays):
            continue
        if f not in params:
            raise SystemExit("api_gen_python_wrappers: no parameter gives %s.%s" % (struct, f))
        base, v = t.replace("const", "").replace(" ", ""), "%s.%s" % (a.name, f)
        out.append("if %s is not None:" % f)
        if base == "int*":
            out += ['    %s = _c._ints(%s, "%s", one=False)' % (f, f, f),
                    "    %s, %s.n%s = (ctypes.c_int * max(len(%s), 1))(*%s), len(%s)"
                    % (v, a.name, f, f, f, f)]
        elif base == "char**":
            out += ['    %s = _c._strings(%s, "%s")' % (f, f, f),
                    "    %s = (ctypes.c_char_p * max(len(%s), 1))(*%s)" % (v, f, f)]
        elif base in ("int", "double"):
            out.append("    %s = %s(%s)" % (v, "float" if base == "double" else "int", f))
        else:
            raise SystemExit("api_gen_python_wrappers: no Python form of %s.%s" % (struct, f))
    return out


def _fill(head, items, tail, ind, cont=4):
    """head + the items joined by ", " + tail, broken between items to stay under WIDTH (the
    continuation lines `cont` spaces deeper)."""
    lines, line = [], ind + head
    for i, item in enumerate(items):
        piece = item + (", " if i + 1 < len(items) else tail)
        if len(line) + len(piece.rstrip()) > WIDTH and line.strip() != head.strip():
            lines.append(line.rstrip())
            line = ind + " " * cont
        line += piece
    return lines + [line if items else line + tail]


def _tuple(a):
    return (a.name, a.direction, api.compact(a.c_type()), tuple(a.dims), a.null_ok)


def _docstring(doc, ind):
    words, lines, line = doc.split(), [], ind + '"""'
    for w in words:
        if len(line) + len(w) + 1 > WIDTH - 3 and line.strip() != '"""':
            lines.append(line)
            line = ind + w
        else:
            line += ("" if line.endswith('"""') else " ") + w
    return lines + [line + '"""']


def _wrap(line, ind):
    """A statement broken after commas to stay under WIDTH, continued 4 spaces deeper."""
    out, line = [], ind + line
    while len(line) > WIDTH:
        cut = line.rfind(", ", 0, WIDTH - 1)
        if cut < 0:
            break
        out.append(line[:cut + 1])
        line = ind + "    " + line[cut + 2:]
    return out + [line]


def errors(text):
    """The exception classes of the LM_ERR_* statuses, and ERRORS (status -> class)."""
    body = re.search(r"typedef\s+enum\s+lm_status_t\s*\{(.*?)\}\s*lm_status_t;", text, re.S)
    out, table = [], []
    for m in re.finditer(r"(?:/\*\*((?:(?!\*/).)*)\*/\s*)?LM_ERR_(\w+)\s*=\s*(\d+),?\s*"
                         r"(?:/\*\*<((?:(?!\*/).)*)\*/)?", body.group(1), re.S):
        doc = " ".join((m.group(4) or m.group(1) or "").replace("*", " ").split())
        code = m.group(2)
        cls = "".join(w if w in ACRONYMS else w.capitalize() for w in code.split("_")) + "Error"
        bases = ", ".join(["Error"] + ([ERROR_BASES[code]] if code in ERROR_BASES else []))
        note = "  # noqa: A001 - like asyncio.TimeoutError" if cls == "TimeoutError" else ""
        out += ["", "", "class %s(%s):%s" % (cls, bases, note)]
        out += _docstring("LM_ERR_%s: %s." % (code, ERROR_DOCS.get(code, doc)), "    ")
        table.append("%s: %s" % (m.group(3), cls))
    out += ["", "", "ERRORS = {%s}" % ", ".join(table)]
    return _wrap_list(out)


def _wrap_list(lines):
    return [w for line in lines for w in _wrap(line, "")]


def constants(values):
    """The header's constants without their LM_ prefix, and the enums Python names by strings."""
    out = ["%s = %s" % (n[3:], hex(v) if v > 0xffff else v) for n, v in values
           if not re.search(r"_(MAGIC|VERSION)$", n)]
    for pyname, prefix, form in NAMED:
        members = [(n[len(prefix):].lower(), v) for n, v in values if n.startswith(prefix)]
        if form == "tuple":
            out.append("%s = %r" % (pyname, tuple(n for n, _ in members)))
        elif form == "by value":
            out.append("%s = {%s}" % (pyname, ", ".join("%d: %r" % (v, n) for n, v in members)))
        else:
            out.append("%s = {%s}" % (pyname, ", ".join("%r: %d" % (n, v) for n, v in members)))
    return _wrap_list(out)


def placement_fields(text):
    """PlacementFields, localmap.Placement's base, from the fields of lm_placement_t."""
    fields = [f for f, _ in dict(gen.structs(text))["lm_placement_t"] if f != "reserved"]
    attrs = ["_" + PLACEMENT_PRIVATE[f] if f in PLACEMENT_PRIVATE else f for f in fields]
    params = [f for f in fields if f not in PLACEMENT_PRIVATE] + list(PLACEMENT_PRIVATE.values())
    out = ["", "", "class PlacementFields:"]
    out += _docstring("The fields of lm_placement_t as localmap.Placement holds them (its base): "
                      "each an int, 0 where it does not apply.", "    ")
    out += _fill("__slots__ = (", ['"%s"' % a for a in attrs], ")", "    ")
    out += ["", "    def __init__(self, %s):" % ", ".join(
        [params[0]] + ["%s=0" % p for p in params[1:]])]
    out += ["        self.%s = int(%s)" % (a, PLACEMENT_PRIVATE.get(f, f))
            for f, a in zip(fields, attrs)]
    out += ["", "    def _key(self):", "        \"\"\"The fields in lm_placement_t's order.\"\"\""]
    out += _fill("return (", ["self.%s" % a for a in attrs], ")", "        ")
    out += ["", "    @property", "    def _as_parameter_(self):",
            '        """The lm_placement_t (what ctypes passes for this object)."""',
            "        return _lib.lm_placement_t(*self._key())",
            "", "    def __eq__(self, other):",
            "        return isinstance(other, PlacementFields) and self._key() == other._key()",
            "", "    def __hash__(self):", "        return hash(self._key())"]
    return out


def generate(funcs):
    text = gen.header_text()
    with open(api.HEADER) as fh:
        raw = fh.read()
    by_name = {f.name: f for f in funcs}
    out = ["# SPDX-License-Identifier: BSD-3-Clause",
           "# Generated by tools/api.py (tools/api_gen_python_wrappers.py) from api/localmap.api"
           " and",
           "# include/localmap.h: do not edit (make api-generate).",
           '"""What localmap/_core.py builds the Python API on: the header\'s constants, the',
           "statuses' exceptions, the methods and functions that are one C call, and the fields",
           'of a placement (the classes here are the bases of _core\'s)."""',
           "import builtins  # noqa: F401 - a base of TimeoutError",
           "import ctypes",
           "",
           "from . import _core as _c  # (its helpers, read at call time)",
           "from . import _dlpack as dl",
           "from . import _lib",
           "from ._lib import Error, call",
           ""]
    out += constants(gen.constants(text))
    out += errors(raw)
    classes = {}
    for row in WRAPPERS:
        owner = row[0].rpartition(".")[0]
        if not owner:
            out += wrapper(row, by_name)
        else:
            classes.setdefault(owner, []).append(row)
    public = [n for n in re.findall(r"^(\w+) = ", "\n".join(out), re.M) if n.startswith(PUBLIC)]
    public += re.findall(r"^(?:class|def) ([^_]\w*)", "\n".join(out), re.M)
    out += placement_fields(text)
    destroys = {cls: "lm_%s_destroy" % h[3:-2] for h, cls in CLASSES.items()}
    for cls, rows in classes.items():
        out += ["", "", "class %sCalls:" % cls]
        out += _docstring("localmap.%s's properties and methods that are one C call." % cls,
                          "    ")
        if destroys[cls] in by_name:
            out += ["    _destroy = _lib.%s  # what close() calls" % destroys[cls]]
        for row in rows:
            out += wrapper(row, by_name)
    out += ["", "", "# The public names of the module (the *Calls classes are _core's bases)."]
    out += _fill("__all__ = [", ['"%s"' % n for n in public], "]", "")
    return "\n".join(out) + "\n"
