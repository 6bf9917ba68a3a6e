# SPDX-License-Identifier: BSD-3-Clause
"""Fortran's generated layers (tools/api.py), included by bindings/fortran/localmap.f90:

  localmap_c.inc        the `lmc_*` bind(C) interfaces of every C function, one for one, and their
                        `public` statement (in the module's specification part, where its bind(C)
                        derived types are in scope through `import`)
  localmap_wrap.inc     the mechanical part of the Fortran API (after `contains`): the wrappers of
                        C functions that need nothing but a uniform mapping (WRAPPERS), each C
                        function's length rules from api/localmap.api in Fortran's names (rules_*_,
                        called before C by every wrapper that passes such an array), the destroy,
                        final, assignment and take_ procedures of the handle types, and the twin of
                        a hand-written specific that differs in one argument's type (VARIANTS, read
                        from localmap.f90)
  localmap_typed.inc    the procedures of every type and rank (TYPES, RANKS) behind lm_from_local,
                        lm_from_global, lm_gather, lm_arg_set, lm_local, lm_arg_get, lm_from_scalapack
  localmap_generic.inc  their generic interfaces, documented (GENERIC_DOCS), and the generics of
                        the generated wrappers' communicator twins and of the handle types
                        (lm_destroy, assignment(=))
  localmap_types.inc    what include/localmap.h declares besides functions, read from the header:
                        its constants (enum members, `#define LM_X 1`) as named constants, its
                        structs as bind(C) derived types with the header's field comments, the
                        data type values and LM_CPU, and the Fortran handle types (lm_mesh, ...)

The bind(C) interfaces map each argument from its direction, C type, length rule and null-ok:
  in scalar             integer(c_int) / integer(c_int64_t) / ... / type(DLDataType), value
  in handle, void*, T*  type(c_ptr), value           (lm_mesh_t, DLManagedTensor*, ...)
  in const T*           type(T), intent(in)           (by reference: `const DLTensor* view`)
  in string             character(kind=c_char), intent(in) :: name(*)
  in callback           type(c_funptr), value         (lm_local_fn_t)
  out/inout T           T's kind, intent(out/inout)   (a handle or a pointer: type(c_ptr))
  array T[rule]         T's kind, intent(in/out) :: name(*)   (assumed size)
  array T[rule][rule]   type(c_ptr), intent(in/out) :: name(*)  (the C array of row pointers)
  null-ok (any)         type(c_ptr), value            (pass c_null_ptr or c_loc(x))
OVERRIDES lists the arguments whose interface departs from that mapping (what the module's
wrappers pass), each with its reason.
"""
import os
import re
import sys

api = sys.modules["api"]  # tools/api.py, which loads this module
OUTPUT = "bindings/fortran/localmap_c.inc"

HANDLES = {"lm_mesh_t", "lm_dist_tensor_t", "lm_reshard_plan_t", "lm_reshard_group_t",
           "lm_request_t", "lm_local_map_record_t"}
# C scalar types (enums are C ints) -> iso_c_binding kinds
SCALARS = {"int": "integer(c_int)", "unsigned": "integer(c_int)", "lm_status_t": "integer(c_int)",
           "DLDeviceType": "integer(c_int)", "lm_shape_mode_t": "integer(c_int)",
           "int32_t": "integer(c_int32_t)", "int64_t": "integer(c_int64_t)",
           "size_t": "integer(c_size_t)", "char": "character(kind=c_char)"}
# C structs the module declares as bind(C) derived types of the same name: DLPack's, written in
# localmap.f90, and every struct of the header (localmap_types.inc, structs())
DLPACK_STRUCTS = {"DLDataType", "DLDevice", "DLTensor", "DLManagedTensor"}
CALLBACKS = {"lm_local_fn_t"}
RETURNS = {"lm_status_t": "integer(c_int)", "int": "integer(c_int)", "const char *": "type(c_ptr)"}

# (function, argument) -> (declaration without the name, "(*)" for an array or ""): the module's
# wrappers pass these as Fortran objects, not as the c_ptr the uniform mapping would give.
OVERRIDES = {
    # null-ok, but the wrapper always passes a NUL-terminated string
    ("lm_set_error_message", "message"): ("character(kind=c_char), intent(in)", "(*)"),
    # not null-ok, but the wrapper passes c_loc of its config (the C side keeps no reference)
    ("lm_mesh_set_device_config", "config"): ("type(c_ptr), value", ""),
    # null-ok, but the wrapper always wants both numbers
    ("lm_pool_stats", "in_use"): ("integer(c_int64_t), intent(inout)", ""),
    ("lm_pool_stats", "peak"): ("integer(c_int64_t), intent(inout)", ""),
    # null-ok (when nin/nout is 0), but the wrapper passes its (possibly empty) lm_arg_t arrays;
    # outputs are read as well: kind LM_ARG_NONE/LM_ARG_DIST_TENSOR says what to return
    ("lm_local_map", "inputs"): ("type(lm_arg_t), intent(in)", "(*)"),
    ("lm_local_map", "outputs"): ("type(lm_arg_t), intent(inout)", "(*)"),
    ("lm_local_map_ex", "inputs"): ("type(lm_arg_t), intent(in)", "(*)"),
    ("lm_local_map_ex", "options"): ("type(lm_local_map_options_t), intent(in)", ""),
    ("lm_local_map_ex", "outputs"): ("type(lm_arg_t), intent(inout)", "(*)"),
    # null-ok (capacity 0 asks for n only), but the wrapper passes its array
    ("lm_local_map_record_placements", "placements"): ("type(lm_placement_t), intent(out)", "(*)"),
}

MAXLINE = 110  # gfortran's free-form limit is 132


def kind_of(base, where):
    """The Fortran type of a C value type (not a pointer to read)."""
    if base in HANDLES or base.endswith("*"):
        return "type(c_ptr)"
    if base in SCALARS:
        return SCALARS[base]
    if base in structs():
        return "type(%s)" % base
    if base in CALLBACKS:
        return "type(c_funptr)"
    raise SystemExit("%s: api_gen_fortran.py has no Fortran type for %r: add it to HANDLES, "
                     "SCALARS, DLPACK_STRUCTS or CALLBACKS" % (where, base))


def declaration(f, a):
    """(declaration without the name, "(*)" or "") of argument a of function f."""
    return OVERRIDES.get((f.name, a.name)) or uniform(a)


def uniform(a):
    """The mapping of the module docstring, without OVERRIDES."""
    intent = "intent(%s)" % a.direction
    if a.null_ok:
        return "type(c_ptr), value", ""
    if a.base == "string":
        return "character(kind=c_char), intent(in)", "(*)"
    if len(a.dims) == 2:
        return "type(c_ptr), " + intent, "(*)"
    if a.dims:
        return kind_of(a.base, a.where) + ", " + intent, "(*)"
    if a.direction != "in":
        # inout, even for an output: C may leave it unwritten when it fails, so the wrappers set
        # it first, and with intent(out) the compiler may drop that store as dead (gfortran does).
        return kind_of(a.base, a.where) + ", intent(inout)", ""
    if a.base.startswith("const ") and a.base.endswith("*"):
        return kind_of(a.base[len("const "):-1].strip(), a.where) + ", intent(in)", ""
    return kind_of(a.base, a.where) + ", value", ""


def wrap(head, words, tail, indent):
    """`head(w1, w2, ...)tail`, continued with `&` before MAXLINE."""
    lines, cur = [], head + "("
    for i, w in enumerate(words):
        piece = w + (", " if i < len(words) - 1 else ")")
        if len(cur) + len(piece.rstrip()) > MAXLINE - 2 and cur.strip():
            lines.append(cur.rstrip() + " &")
            cur = indent + "    "
        cur += piece
    if not words:
        cur += ")"
    if len(cur) + len(tail) > MAXLINE - 2:
        lines.append(cur + " &")
        cur = indent + "    " + tail.lstrip()
    else:
        cur += tail
    return lines + [cur]


def interface(f):
    fname = "lmc_" + f.name[len("lm_"):]
    sub = f.ret == "void"
    what = "subroutine" if sub else "function"
    ret = api.norm(f.ret)
    if not sub and ret not in RETURNS:
        raise SystemExit("%s: api_gen_fortran.py has no Fortran type for the return type %r"
                         % (f.where, f.ret))
    out = wrap("    %s %s" % (what, fname), [a.name for a in f.args],
               ' bind(C, name="%s")' % f.name, "    ")
    out.append("      import")
    for a in f.args:
        decl, arr = declaration(f, a)
        out.append("      %s :: %s%s" % (decl, a.name, arr))
    if not sub:
        out.append("      %s :: %s" % (RETURNS[ret], fname))
    out.append("    end %s" % what)
    return out


def check_overrides(funcs):
    """Every override names an argument of the description and departs from the mapping."""
    args = {(f.name, a.name): a for f in funcs for a in f.args}
    for key, decl in OVERRIDES.items():
        if key not in args:
            raise SystemExit("tools/api_gen_fortran.py: OVERRIDES names %s(%s), which "
                             "api/localmap.api does not describe" % key)
        if uniform(args[key]) == decl:
            raise SystemExit("tools/api_gen_fortran.py: OVERRIDES of %s(%s) is the uniform "
                             "mapping: remove it" % key)


def generate(funcs):
    check_overrides(funcs)
    out = ["! SPDX-License-Identifier: BSD-3-Clause",
           "! Generated by tools/api.py (tools/api_gen_fortran.py) from api/localmap.api: do not edit",
           "! (make api-generate). Included by localmap.f90 in the module's specification part.",
           "!",
           "! bind(C) interfaces of the whole C API, one for one (lmc_mesh_create is lm_mesh_create):",
           "! C numbering, row-major shapes; handles are type(c_ptr), NULL-able arguments type(c_ptr), value.",
           "  interface"]
    for f in funcs:
        out.extend(interface(f))
    out.append("  end interface")
    out.extend(public_lines(funcs))
    return "\n".join(out) + "\n"


def public_lines(funcs):
    names = ["lmc_" + f.name[len("lm_"):] for f in funcs]
    lines, cur = [], "  public :: "
    for i, n in enumerate(names):
        piece = n + (", " if i < len(names) - 1 else "")
        if len(cur) + len(piece) > MAXLINE - 2:
            lines.append(cur.rstrip() + " &")
            cur = "    "
        cur += piece
    return lines + [cur]


# =================================================================================================
# The Fortran API's mechanical parts (localmap_wrap.inc, included after the module's `contains`):
# wrappers of C functions that need nothing but the mapping below, each C function's length rules
# in Fortran's names, the procedures of the handle types, and the second specific of a generic
# whose specifics differ in one argument's type.
# =================================================================================================
HEAD = ("! SPDX-License-Identifier: BSD-3-Clause\n"
        "! Generated by tools/api.py (tools/api_gen_fortran.py) from api/localmap.api and\n"
        "! bindings/fortran/localmap.f90: do not edit (make api-generate).\n")
MODULE = os.path.join(api.TOP, "bindings", "fortran", "localmap.f90")

# Fortran derived type of each C handle type.
FTYPES = {"lm_mesh_t": "lm_mesh", "lm_dist_tensor_t": "lm_dist_tensor", "lm_reshard_plan_t": "lm_reshard_plan",
          "lm_reshard_group_t": "lm_reshard_group", "lm_request_t": "lm_request",
          "lm_local_map_record_t": "lm_local_map_record"}
# Element types of arrays, as the Fortran caller knows them (in error messages).
ELEMS = {"lm_placement_t": "lm_placement", "int": "integer", "int64_t": "integer", "lm_dist_tensor_t": "lm_dist_tensor"}
# inout structs the wrapper initialises (their size, magic and version), by C type.
STRUCT_INIT = {"lm_device_config_t": "LM_DEVICE_CONFIG", "lm_reshard_plan_info_t": "LM_RESHARD_PLAN_INFO"}

# C function -> (Fortran name, Fortran dummies in order, the !> comment). ierr comes last, always.
# A dummy is the C argument of that name, or `fname=cname` (renamed), with these marks:
#   :1        a 1-based dim or index (C's is 0-based)
#   :logical  an int flag as a logical
#   :rev      a shape in Fortran order (C's reversed)
#   :comm     a communicator: integer here, and a second specific `<name>_f08_` takes type(MPI_Comm)
#   :inout    a handle the call writes through (intent(inout), where C takes the handle by value)
#   :borrow   an output mesh borrowed from its tensor (lm_mesh_borrow)
#   :N        a character buffer of N characters (for a `char[size]` output)
#   ?         optional: an absent DLDevice is the host, an absent output is not asked for, an
#             absent struct pointer is NULL; `?flag=X`: an optional logical, the int flag X if true
# C arguments the Fortran call leaves out: array lengths (the array's size) and NULL-able ones
# (NULL). A generic's specific is named after the generic (comm_world_int_ for lm_comm_world).
WRAPPERS = {
    "lm_init": ("lm_init", "", "Initialises MPI unless it is already initialised (by MPI_Init or mpi_f08's MPI_Init)."),
    "lm_finalize": ("lm_finalize", "", "Finalises MPI if lm_init initialised it."),
    "lm_comm_world": ("lm_comm_world", "comm=comm_f:comm",
                      "MPI_COMM_WORLD as an integer handle or a type(MPI_Comm)."),
    "lm_world_rank": ("lm_world_rank", "rank, size", "This process's rank in MPI_COMM_WORLD and the world size."),
    "lm_device_supported": ("lm_device_supported", "device_type, supported:logical",
                            "Whether this build holds tensors on a device type (kDLCPU, kDLCUDA)."),
    "lm_tensor_alloc": ("lm_tensor_alloc", "managed=out, shape:rev, dtype, device?",
                        "A zero-filled tensor from localmap's pool as a DLManagedTensor (type(c_ptr); shape in "
                        "Fortran order, the C tensor has it reversed). Hand it to lm_from_dlpack, or as a local_map "
                        "output (outputs(j) = lm_arg_t(LM_ARG_MANAGED_TENSOR, 0, 0, 0d0, managed))."),
    "lm_extents_create": ("lm_extents_create", "extents, id",
                          "Registers the extents of a ragged shard (one length per mesh coordinate) and returns "
                          "their id for lm_ragged; every lm_extents_create is matched by one lm_extents_destroy."),
    "lm_extents_destroy": ("lm_extents_destroy", "id", "Drops one reference to the extents of `id` (0: nothing)."),
    "lm_layout_chunk": ("lm_layout_chunk", "n, parts, index, offset, length",
                        "torch.chunk layout math: block `index` (0-based) of `parts` of an extent n starts at "
                        "offset (0-based) and has `length` elements."),
    "lm_mesh_create_grid": ("lm_mesh_create_grid", "mesh, comm=parent_comm, myrow, mycol",
                            "The 2-D mesh (NPROW, NPCOL) of a process grid over communicator comm: its coordinate "
                            "(r, c) is the rank that passes (myrow, mycol) = (r, c), e.g. what blacs_gridinfo "
                            "returns (-1, -1 outside the grid); lm_from_scalapack's mesh. Collective over comm "
                            "(lm_mesh_create_grid)."),
    "lm_mesh_ndim": ("lm_mesh_ndim", "mesh, ndim", "The number of mesh dims (lm_mesh_ndim)."),
    "lm_mesh_shape": ("lm_mesh_shape", "mesh, shape", "Extents of the mesh dims (in mesh-dim order)."),
    "lm_mesh_size": ("lm_mesh_size", "mesh, size", "The number of ranks in the mesh (lm_mesh_size)."),
    "lm_mesh_is_member": ("lm_mesh_is_member", "mesh, is_member:logical",
                          "Whether this rank belongs to the mesh (lm_mesh_is_member)."),
    "lm_mesh_coord": ("lm_mesh_coord", "mesh, coord", "This rank's coordinate (0-based, one per mesh dim)."),
    "lm_mesh_rank": ("lm_mesh_rank", "mesh, rank=mesh_rank", "This rank's row-major index in the mesh (0-based)."),
    "lm_mesh_rank_at": ("lm_mesh_rank_at", "mesh, coord, parent_rank",
                        "The parent-communicator rank at a (0-based) coordinate."),
    "lm_mesh_dim_index": ("lm_mesh_dim_index", "mesh, name, dim:1", "The mesh dim (1-based) called `name`."),
    "lm_mesh_dim_name": ("lm_mesh_dim_name", "mesh, dim:1, name=buf:128",
                         "The name of mesh dim `dim` (1-based; \"\" when unnamed)."),
    "lm_mesh_dim_comm": ("lm_mesh_dim_comm", "mesh, dim:1, comm=comm_f:comm",
                         "The communicator along mesh dim `dim` (1-based), owned by the mesh: do not free it."),
    "lm_mesh_comm": ("lm_mesh_comm", "mesh, comm=comm_f:comm", "The communicator of all mesh ranks, owned by the mesh."),
    "lm_mesh_set_device_config": ("lm_mesh_set_device_config", "mesh, config?",
                                  "This rank's device options of the mesh (a stream, allocator callbacks); absent: "
                                  "the defaults."),
    "lm_mesh_device_config": ("lm_mesh_device_config", "mesh, config", "This rank's device options of the mesh."),
    "lm_mesh_transport": ("lm_mesh_transport", "mesh, device_type, transport",
                          "How the mesh moves tensors of device_type (kDLCPU, kDLCUDA): an LM_TRANSPORT_* value."),
    "lm_dist_tensor_to_scalapack": ("lm_to_scalapack", "x=tensor, ctxt, desc",
                                    "The ScaLAPACK descriptor of x (a 2-D block-cyclic or sharded matrix on a 2-D "
                                    "mesh; see lm_dist_tensor_to_scalapack) with BLACS context ctxt; lm_local gives "
                                    "its local array."),
    "lm_dist_tensor_mesh": ("lm_dist_tensor_mesh", "x=tensor, mesh:borrow",
                            "The tensor's mesh, borrowed (it lives as long as the tensor)."),
    "lm_dist_tensor_ndim": ("lm_dist_tensor_ndim", "x=tensor, ndim", "The tensor's number of dims (local)."),
    "lm_dist_tensor_dtype": ("lm_dist_tensor_dtype", "x=tensor, dtype",
                             "The tensor's dtype (compare with LM_FLOAT64, ... using ==)."),
    "lm_dist_tensor_device": ("lm_dist_tensor_device", "x=tensor, device", "The device of the tensor's local shard (local)."),
    "lm_dist_tensor_global_shape": ("lm_dist_tensor_global_shape", "x=tensor, shape:rev",
                                    "The global shape (Fortran order; size(shape) must equal the tensor's rank)."),
    "lm_dist_tensor_local_shape": ("lm_dist_tensor_local_shape", "x=tensor, shape:rev",
                                   "The local shard's extents (Fortran order)."),
    "lm_dist_tensor_local_offset": ("lm_dist_tensor_local_offset", "x=tensor, offset:rev",
                                    "Elements before the shard along each dim (Fortran order): the shard is "
                                    "global(offset(1)+1 : offset(1)+local(1), ...)."),
    "lm_dist_tensor_local": ("lm_dist_tensor_local_view", "x=tensor, view",
                             "The raw DLTensor view of the shard (C order shape; lm_local with a Fortran pointer "
                             "is the usual way).", "lm_local"),
    "lm_dist_tensor_to_dlpack": ("lm_dist_tensor_to_dlpack", "x=tensor, managed",
                                 "Exports the shard as a DLManagedTensor (C order) holding a reference on x; whoever "
                                 "consumes it calls its deleter once (lm_from_dlpack takes it over)."),
    "lm_dist_tensor_retain": ("lm_dist_tensor_retain", "x=tensor",
                              "Adds a reference to x's tensor (the assignment y = x does this for you); each "
                              "reference is dropped by one lm_dist_tensor_destroy of a handle holding it."),
    "lm_reshard_plan_alloc_target": ("lm_reshard_plan_alloc_target", "plan, y=out, device?",
                                     "A zero-filled tensor y laid out as the plan's target, on `device` (default: "
                                     "the host). Local."),
    "lm_reshard_plan_execute": ("lm_reshard_plan_execute", "plan, x=src, y=dst:inout",
                                "Runs the plan from x into y. Collective over both meshes."),
    "lm_reshard_plan_start": ("lm_reshard_plan_start", "plan, x=src, y=dst:inout, request",
                              "Starts the plan without waiting; x and y must not be touched until the request "
                              "completes."),
    "lm_request_test": ("lm_request_test", "request, done:logical", "done = .true. once complete (the request is then "
                        "finished)."),
    "lm_request_wait": ("lm_request_wait", "request",
                        "Completes a nonblocking reshard (lm_reshard_plan_start, lm_reshard_group_start) and frees the "
                        "request (one already complete, or never started, is a no-op)."),
    "lm_reshard_plan_describe": ("lm_reshard_plan_describe", "plan, text=buf:4096",
                                 "A one-line description of the plan's steps."),
    "lm_reshard_plan_adjoint": ("lm_reshard_plan_adjoint", "plan, adjoint",
                                "The backward plan of `plan` (local): gradients from the target mesh, in the adjoint "
                                "of the target placements, to the source mesh, in the adjoint of the source "
                                "placements."),
    "lm_reshard_plan_info": ("lm_reshard_plan_info", "plan, info, all_ranks=flags?flag=LM_PLAN_INFO_ALL_RANKS",
                             "What executing the plan moves: this rank's counts (local), or with all_ranks = .true. "
                             "every rank's summed (collective over both meshes). See lm_reshard_plan_info_t."),
    "lm_pool_stats": ("lm_pool_stats", "in_use, peak, reset_peak?flag=1",
                      "Bytes of the library's host buffer pool in use and their high-water mark; reset_peak "
                      "(default .false.) then sets the mark to the bytes in use."),
    "lm_reshard_group_alloc_targets": ("lm_reshard_group_alloc_targets", "group, y=out, device?",
                                       "Zero-filled tensors y(:) laid out as the group's targets, on `device` "
                                       "(default: the host); size(y) must be the group's number of entries. On "
                                       "failure y is left as it was. Local."),
    "lm_reshard_group_size": ("lm_reshard_group_size", "group, n?, buckets?",
                              "The group's number of entries and of buckets (either may be absent). Local."),
    "lm_local_map_record_input_grad": ("lm_local_map_record_input_grad", "record, index:1, grad, grad_out=out",
                                       "grad_out = grad (a gradient of input `index`'s local view, normally placed "
                                       "LM_RECORD_IN_GRAD on the call's mesh) moved to that input's own mesh, with "
                                       "the adjoint of its own placements (lm_partial(LM_REDUCE_SUM) -> "
                                       "lm_replicate()). Collective, like lm_reshard."),
}

# Length rules the Fortran layer adds where C takes the length as an argument (`n`) and checks it
# itself: the Fortran array's size is that argument, so a short array is refused here, in
# Fortran's names, before C says "n". Rules as in api/localmap.api; a trailing + is "at least".
FORTRAN_RULES = {
    ("lm_mesh_coord", "coord"): "mesh.ndim+",
    ("lm_mesh_rank_at", "coord"): "mesh.ndim",
    ("lm_dist_tensor_placements", "placements"): "tensor.mesh.ndim",
    ("lm_dist_tensor_global_shape", "shape"): "tensor.ndim",
    ("lm_dist_tensor_local_shape", "shape"): "tensor.ndim",
    ("lm_dist_tensor_local_offset", "offset"): "tensor.ndim",
}
# The Fortran names of C arguments in the hand-written wrappers' messages (the generated ones take
# theirs from WRAPPERS): C function -> {C argument: Fortran name}.
RENAMES = {
    "lm_dist_tensor_from_local": {"local": "a"},
    "lm_dist_tensor_from_dlpack": {"local": "managed"},
    "lm_dist_tensor_placements": {"tensor": "x"},
    "lm_dist_tensor_reshard": {"src": "x"},
    "lm_dist_tensor_transpose": {"src": "x"},
    "lm_dist_tensor_transpose_into": {"src": "x"},
    "lm_local_map": {"nin": "inputs", "nout": "outputs"},
}

# Hand-written specifics whose twin differs in one argument's type: the twin is generated from
# the hand-written one's declarations (in localmap.f90), converting that argument in the call.
VARIANTS = {
    "mesh_create_int_": [("mesh_create_f08_", ["comm"]), ("mesh_create_int_i4_", ["shape"]),
                         ("mesh_create_f08_i4_", ["comm", "shape"])],
    "zeros_i8_": [("zeros_i4_", ["shape"])],
    "plan_create_i8_": [("plan_create_i4_", ["shape"])],
    "estimate_i8_": [("estimate_i4_", ["shape"])],
    "entry_i8_": [("entry_i4_", ["shape"])],
}
VARIANT_ARGS = {"comm": ("type(MPI_Comm), intent(in) :: comm", "comm%MPI_VAL"),
                "shape": ("integer(c_int32_t), intent(in) :: shape(:)", "int(shape, c_int64_t)")}


def wrap_stmt(text, indent):
    """A long statement continued with `&` after a comma (outside string literals), within MAXLINE."""
    if len(text) <= MAXLINE:
        return [text]
    cut, quote = -1, ""
    for i, ch in enumerate(text[:MAXLINE - 2]):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif text.startswith(", ", i) and i > len(indent) + 8:
            cut = i
    if cut < 0:
        raise SystemExit("api_gen_fortran.py: cannot wrap %r" % text)
    return [text[:cut + 1] + " &"] + wrap_stmt(indent + "    " + text[cut + 2:], indent)


def doc(text, indent):
    """A !> comment of `text`, wrapped."""
    import textwrap
    return [indent + "!> " + ln for ln in textwrap.wrap(text, 93 - len(indent))]


# The module's procedures a generated wrapper calls: no local variable may take their names.
CALLED = {"c_", "done_", "flag_", "dev_", "reversed_", "to_c_str_", "c_chars_"}


def c_var(name):
    """The local variable that carries dummy `name` to C: name_, or name_c where that is a
    procedure the wrapper calls (done_ for a dummy `done`)."""
    return name + ("_c" if name + "_" in CALLED else "_")


class Dummy:
    """One Fortran dummy argument of a generated wrapper, parsed from its WRAPPERS spec."""
    def __init__(self, spec):
        self.optional = "?" in spec
        spec, _, self.flag = spec.partition("?")
        self.flag = self.flag.partition("=")[2]
        spec, *marks = spec.split(":")
        self.name, _, cname = spec.partition("=")
        self.cname = cname or self.name
        self.marks = set(marks)
        self.buf = next((int(m) for m in marks if m.isdigit()), 0)


class Wrapper:
    """The Fortran text of one generated wrapper: declarations, locals, statements."""
    def __init__(self, f, fname, spec, docline, errname):
        self.f, self.fname, self.errname = f, fname, errname or fname
        self.dummies = [Dummy(s.strip()) for s in spec.split(",") if s.strip()]
        self.docline = docline
        self.decls, self.locals, self.pre, self.post, self.ok_post = [], [], [], [], []
        self.actual = {}
        self.args = {a.name: a for a in f.args}
        for d in self.dummies:
            if d.cname not in self.args:
                raise SystemExit("api_gen_fortran.py: WRAPPERS[%s] names %s, not an argument" % (f.name, d.cname))
            self.dummy(d, self.args[d.cname])
        for a in f.args:
            if a.name not in self.actual:
                self.actual[a.name] = self.left_out(a)

    def dummy(self, d, a):
        n, base = d.name, a.base
        if base in FTYPES and not a.dims:
            self.handle(d, a, FTYPES[base])
        elif base == "string":
            self.decls.append("character(len=*), intent(in) :: " + n)
            self.actual[a.name] = "to_c_str_(%s)" % n
        elif base == "char":
            self.decls.append("character(len=:), allocatable, intent(out) :: " + n)
            self.locals.append("character(kind=c_char) :: %s_(%d)" % (n, d.buf))
            self.pre.append("%s_ = c_null_char" % n)
            self.actual[a.name] = n + "_"
            self.actual[a.dims[0]] = "int(size(%s_), c_size_t)" % n
            self.post.append("%s = c_chars_(%s_)" % (n, n))
        elif a.dims:
            self.array(d, a)
        elif base in ("DLDataType", "DLDevice", "DLTensor") or base in STRUCT_INIT or base.startswith("const "):
            self.struct(d, a)
        elif base == "DLManagedTensor*":
            self.decls.append("type(c_ptr), intent(out) :: " + n)
            self.pre.append(n + " = c_null_ptr")
            self.actual[a.name] = n
        else:
            self.scalar(d, a)

    def handle(self, d, a, ftype):
        n = d.name
        if a.direction != "out":  # C writes an inout handle through the pointer (lm_request_wait)
            inout = "inout" in d.marks or a.direction == "inout"
            self.decls.append("type(%s), intent(%s) :: %s" % (ftype, "inout" if inout else "in", n))
            self.actual[a.name] = n + "%ptr"
            return
        self.decls.append("type(%s), intent(inout) :: %s" % (ftype, n))
        self.locals.append("type(c_ptr) :: %s_" % n)
        self.pre.append("%s_ = c_null_ptr" % n)
        self.actual[a.name] = n + "_"
        take = "call lm_mesh_borrow(%s, %s_)" if "borrow" in d.marks else "call take_%s_(%%s, %%s_)" % STEMS[ftype]
        self.ok_post.append(take % (n, n))

    def array(self, d, a):
        n, rule = d.name, a.dims[0]
        if a.base in FTYPES:  # out handles, as many as the array
            self.decls.append("type(%s), intent(inout) :: %s(:)" % (FTYPES[a.base], n))
            self.locals += ["type(c_ptr) :: %s_(size(%s))" % (n, n), "integer :: i_"]
            self.pre.append("%s_ = c_null_ptr" % n)
            self.actual[a.name] = n + "_"
            self.ok_post.append("do i_ = 1, size(%s)\n  call take_%s_(%s(i_), %s_(i_))\nend do"
                                % (n, STEMS[FTYPES[a.base]], n, n))
        elif rule.isdigit():  # a fixed count of C ints: an explicit-shape array
            self.decls.append("integer, intent(%s) :: %s(%s)" % (a.direction, n, rule))
            self.locals.append("integer(c_int) :: %s_(%s)" % (n, rule))
            self.actual[a.name] = n + "_"
            self.ok_post.append("%s = int(%s_)" % (n, n))
        else:
            kind = "integer(c_int64_t)" if a.base == "int64_t" else kind_of(a.base, a.where)
            self.decls.append("%s, intent(%s) :: %s(:)" % (kind, "in" if a.direction == "in" else "out", n))
            self.actual[a.name] = n
            if "rev" in d.marks and a.direction == "in":
                self.actual[a.name] = "reversed_(%s)" % n
            elif "rev" in d.marks:
                self.locals.append("%s :: %s_(size(%s))" % (kind, n, n))
                self.actual[a.name] = n + "_"
                self.ok_post.append("%s = reversed_(%s_)" % (n, n))
        if rule in self.args:
            self.actual[rule] = "int(size(%s), %s)" % (n, kind_suffix(self.args[rule].base))

    def struct(self, d, a):
        n, base = d.name, a.base
        if base.startswith("const "):  # a struct pointer C may be given NULL for
            self.decls.append("type(%s), intent(in), target, optional :: %s" % (base[6:-1].strip(), n))
            self.locals.append("type(c_ptr) :: %s_" % n)
            self.pre += ["%s_ = c_null_ptr" % n, "if (present(%s)) %s_ = c_loc(%s)" % (n, n, n)]
            self.actual[a.name] = n + "_"
        elif a.direction == "in" and base == "DLDevice":
            self.decls.append("type(DLDevice), intent(in), optional :: " + n)
            self.actual[a.name] = "dev_(%s)" % n
        elif a.direction == "in":
            self.decls.append("type(%s), intent(in) :: %s" % (base, n))
            self.actual[a.name] = n
        else:
            self.decls.append("type(%s), intent(out) :: %s" % (base, n))
            self.actual[a.name] = n
            if base in STRUCT_INIT:
                p = STRUCT_INIT[base]
                self.pre.append("%s = %s(size=c_sizeof(%s), magic=%s_MAGIC, version=%s_VERSION)" % (n, base, n, p, p))

    def scalar(self, d, a):
        n = d.name
        fkind = "integer" if a.base in ("int", "unsigned", "DLDeviceType") else kind_of(a.base, a.where)
        if a.direction == "in":
            if d.flag:
                self.decls.append("logical, intent(in), optional :: " + n)
                self.actual[a.name] = "flag_(%s, %s)" % (n, d.flag)
                return
            self.decls.append("%s, intent(in) :: %s" % (fkind, n))
            shift = " - 1" if "1" in d.marks else ""
            self.actual[a.name] = ("int(%s%s, c_int)" % (n, shift)) if fkind == "integer" else n
            return
        # an output: through a C variable unless the kinds agree
        ftype = "logical" if "logical" in d.marks else fkind
        self.decls.append("%s, intent(out)%s :: %s" % (ftype, ", optional" if d.optional else "", n))
        if ftype == fkind and fkind != "integer" and not d.optional:
            self.actual[a.name] = n
            return
        v = c_var(n)
        self.locals.append("%s%s :: %s" % (kind_of(a.base, a.where), ", target" if d.optional else "", v))
        self.pre.append("%s = %s" % (v, "0" if ftype == "logical" or d.optional else "-1"))
        if ftype == "logical":
            value = "%s /= 0" % v
        else:
            value = "int(%s)%s" % (v, " + 1" if "1" in d.marks else "")
        self.post.append(("if (present(%s)) " % n if d.optional else "") + "%s = %s" % (n, value))
        by_value = declaration(self.f, a)[0] == "type(c_ptr), value"
        self.actual[a.name] = ("c_loc(%s)" if by_value else "%s") % v

    def left_out(self, a):
        if uniform(a)[0] == "type(c_ptr), value" and declaration(self.f, a)[0] == "type(c_ptr), value":
            return "c_null_ptr"
        raise SystemExit("api_gen_fortran.py: WRAPPERS[%s] gives no value for %s" % (self.f.name, a.name))

    def text(self, specific, comm_f08=False):
        names = [d.name for d in self.dummies] + ["ierr"]
        out = ["subroutine %s(%s)" % (specific, ", ".join(names))]
        decls = list(self.decls)
        if comm_f08:
            d = next(d for d in self.dummies if "comm" in d.marks)
            decl = "type(MPI_Comm), intent(%s) :: %s" % (self.args[d.cname].direction, d.name)
            decls = [decl if x.endswith(":: " + d.name) else x for x in decls]
            out += ["  " + x for x in decls + ["integer, intent(out), optional :: ierr"]]
            out.append("  call %s(%s)" % (specific.replace("_f08_", "_int_"),
                                          ", ".join(n + ("%MPI_VAL" if n == d.name else "") for n in names)))
            return out + ["end subroutine"]
        out += ["  " + x for x in decls + ["integer, intent(out), optional :: ierr"]]
        out += ["  " + x for x in ["integer(c_int) :: st"] + self.locals + self.pre]
        call = "lmc_%s(%s)" % (self.f.name[3:], ", ".join(self.actual[a.name] for a in self.f.args))
        checker = self.checker_call()
        if checker:
            out += ["  st = LM_SUCCESS", "  " + checker]
            out += wrap_stmt("  if (st == LM_SUCCESS) st = c_(%s)" % call, "  ")
        else:
            out += wrap_stmt("  st = c_(%s)" % call, "  ")
        out += ["  " + x for x in self.post]
        for stmt in self.ok_post:
            lines = stmt.split("\n")
            if len(lines) == 1:
                out.append("  if (st == LM_SUCCESS) " + stmt)
            else:
                out += ["  if (st == LM_SUCCESS) then"] + ["    " + x for x in lines] + ["  end if"]
        out.append('  call done_(st, ierr, "%s")' % self.errname)
        return out + ["end subroutine"]

    def checker_call(self):
        r = Rules(self.f, {d.cname: d.name for d in self.dummies})
        if not r.checked:
            return ""
        actual = []
        for a in r.involved:
            d = next(d for d in self.dummies if d.cname == a.name)
            actual.append(d.name + ("%ptr" if a.base in FTYPES else ""))
        return 'call rules_%s_(st, "%s: ", %s)' % (self.f.name[3:], self.fname, ", ".join(actual))

    def lines(self):
        comm = any("comm" in d.marks for d in self.dummies)
        base = self.fname[3:] + ("_int_" if comm else "")
        name = base if comm else self.fname
        out = doc(self.docline, "") + self.text(name)
        if comm:
            out += self.text(base.replace("_int_", "_f08_"), comm_f08=True)
        return out


def concat(parts):
    """Fortran `a // b // ...` of string expressions, adjacent literals joined."""
    out = [parts[0]]
    for p in parts[1:]:
        if out[-1].endswith('"') and p.startswith('"'):
            out[-1] = out[-1][:-1] + p[1:]
        else:
            out.append(p)
    return " // ".join(out)


def kind_suffix(base):
    return {"int": "c_int", "int64_t": "c_int64_t", "size_t": "c_size_t"}.get(base, "c_int")


class Rules:
    """The length rules of one C function that the Fortran layer checks: arrays whose length C
    reads from a handle, a tensor, a number or (the outer dim of a table) another argument, and
    FORTRAN_RULES; not an output of a fixed count (the wrapper declares that shape). Checked by a
    generated rules_<function>_(st, where, <the arguments the rules involve, in C's order>), whose
    refusal names the Fortran array (RENAMES, or the wrapper's names) and says what its length
    comes from."""
    def __init__(self, f, names=None):
        self.f = f
        self.names = dict(RENAMES.get(f.name, {}))
        self.names.update(names or {})
        self.args = {a.name: a for a in f.args}
        self.checked = []  # (argument, rules outermost first, at least)
        for a in f.args:
            extra = FORTRAN_RULES.get((f.name, a.name))
            rules = [extra.rstrip("+")] if extra else list(a.dims)
            if a.direction == "out" and rules and rules[0].isdigit():
                continue
            if extra or len(rules) == 2 or any("." in r or r.isdigit() for r in rules):
                self.checked.append((a, rules, bool(extra and extra.endswith("+"))))
        heads = {a.name for a, _, _ in self.checked}
        for _, rules, _ in self.checked:
            heads |= {alt.split(".")[0] for r in rules for alt in r.split("|") if alt != "*" and not alt.isdigit()}
        self.involved = [a for a in f.args if a.name in heads]

    def fname(self, cname):
        return self.names.get(cname, cname)

    def dummy_decl(self, a):
        n = a.name + "_"
        if any(a is c for c, _, _ in self.checked):
            return "class(*), intent(in)%s :: %s(..)" % (", optional" if a.null_ok else "", n)
        if a.base in FTYPES:
            return "type(c_ptr), intent(in) :: " + n
        return "integer, intent(in) :: " + n  # a DLTensor's rank, or a count

    def length(self, rule, var):
        """(statements setting var to the length `rule` asks for, the phrase saying why)."""
        if "|" in rule:  # A, or B where A's handle is NULL
            first, second = rule.split("|")
            s1, why = self.length(first, var)
            s2, _ = self.length(second, var)
            return ["if (c_associated(%s_)) then" % first.split(".")[0]] + ["  " + x for x in s1] + \
                ["else"] + ["  " + x for x in s2] + ["end if"], why
        head, _, of = rule.partition(".")
        if not of:  # another argument: the count the caller passes
            return ["%s = %s_" % (var, head)], 'str_(%s) // " %s"' % (var, self.fname(head))
        base = self.args[head].base
        mesh_why = '"a mesh of " // str_(%s) // " dims"' % var
        if base == "lm_mesh_t":
            return ['%s = ndim_(%s_, "mesh", st)' % (var, head)], mesh_why
        if base == "lm_dist_tensor_t" and of == "mesh.ndim":
            return ['%s = ndim_(%s_, "tensor.mesh", st)' % (var, head)], mesh_why
        tensor_why = '"%s of rank " // str_(%s)' % (self.fname(head), var)
        if base == "lm_dist_tensor_t":
            return ['%s = ndim_(%s_, "tensor", st)' % (var, head)], tensor_why
        return ["%s = %s_" % (var, head)], tensor_why  # a DLTensor: the caller passes its rank

    def check(self, a, rules, at_least):
        """The statements checking array a against its rules."""
        n = a.name + "_"
        out, wants, whys = [], [], []
        for k, rule in enumerate(reversed(rules)):  # in Fortran's order: innermost first
            var = "w%d_" % (k + 1)
            wants.append(var)
            if rule == "*":  # each element's own: any
                out.append("%s = -1" % var)
                whys.append('"(any)"')
            elif rule.isdigit():
                out.append("%s = %s" % (var, rule))
                whys.append(None)
            else:
                stmts, why = self.length(rule, var)
                out += stmts
                whys.append(why)
        why = '", not %s"' % rules[0] if rules[0].isdigit() else concat(['" for "'] + sum(
            [['" x "', w] for w in whys[1:]], whys[:1]))
        call = ('call want_(st, where, "%s", shape(%s), "%s", [%s], %s, %s)'
                % (self.fname(a.name), n, ELEMS.get(a.base, a.base), ", ".join(wants), why,
                   ".true." if at_least else ".false."))
        body = out + wrap_stmt(call, "")
        if a.null_ok:
            body = ["if (present(%s)) then" % n] + ["  " + x for x in body] + ["end if"]
        return body

    def lines(self):
        nvars = max(len(r) for _, r, _ in self.checked)
        out = ["!> The length rules of %s (api/localmap.api), in Fortran's names." % self.f.name,
               "subroutine rules_%s_(st, where, %s)" % (self.f.name[3:], ", ".join(a.name + "_" for a in self.involved)),
               "  integer(c_int), intent(inout) :: st",
               "  character(len=*), intent(in) :: where"]
        out += ["  " + self.dummy_decl(a) for a in self.involved]
        out.append("  integer :: " + ", ".join("w%d_" % (k + 1) for k in range(nvars)))
        for a, rules, at_least in self.checked:
            out += ["  " + x for x in self.check(a, rules, at_least)]
        return out + ["end subroutine"]


def used_rules(text):
    """The C functions whose rules_<name>_ the module's hand-written part calls."""
    return set("lm_" + m for m in re.findall(r"\brules_(\w+?)_\(", text))


HANDLE_PROCS = [  # Fortran type, its procedures' stem, C destroy, the public destroy and its comment
    ("lm_mesh", "mesh", "lmc_mesh_destroy", "lm_mesh_destroy",
     "Local; a borrowed mesh is only forgotten. Tensors keep their mesh alive."),
    ("lm_dist_tensor", "tensor", "lmc_dist_tensor_destroy", "lm_dist_tensor_destroy",
     "Drops one reference (local) and nulls the handle."),
    ("lm_reshard_plan", "plan", "lmc_reshard_plan_destroy", "lm_reshard_plan_destroy",
     "Local; a plan with a request in flight must not be destroyed before it completes."),
    ("lm_reshard_group", "group", "lmc_reshard_group_destroy", "lm_reshard_group_destroy",
     "Local; a group with a request in flight must not be destroyed before it completes."),
    ("lm_local_map_record", "record", "lmc_local_map_record_destroy", "lm_local_map_record_destroy",
     "Local (never collective); safe on an empty record."),
    ("lm_request", "request", "lmc_request_wait", "", ""),
]


STEMS = {h[0]: h[1] for h in HANDLE_PROCS}  # lm_dist_tensor: tensor (tensor_final_, take_tensor_)


# The public destroys' dummy argument (a keyword of the module's API).
DESTROY_ARG = {"lm_mesh": "mesh", "lm_dist_tensor": "x", "lm_reshard_plan": "plan", "lm_reshard_group": "group",
               "lm_local_map_record": "record", "lm_request": "h"}


def handle_lines(ftype, stem, cdestroy, destroy, comment):
    """destroy (local, NULL-safe), final, assignment (a copy shares a tensor, is refused otherwise)
    and take_<stem>_ (adopt a new C handle, dropping the old) of one handle type."""
    out = []
    dname = destroy or stem + "_destroy_"
    if destroy:
        out += ["!> " + comment]
    h = DESTROY_ARG[ftype]
    owned = " .and. %s%%owned" % h if ftype == "lm_mesh" else ""
    out += ["subroutine %s(%s)" % (dname, h), "  type(%s), intent(inout) :: %s" % (ftype, h), "  integer(c_int) :: st",
            "  if (c_associated(%s%%ptr)%s) st = %s(%s%%ptr)" % (h, owned, cdestroy, h), "  %s%%ptr = c_null_ptr" % h]
    if ftype == "lm_mesh":
        out.append("  mesh%owned = .true.")
    out += ["end subroutine",
            "subroutine %s_final_(h)" % stem, "  type(%s), intent(inout) :: h" % ftype,
            "  call %s(h)" % dname, "end subroutine",
            "subroutine take_%s_(h, p)" % stem, "  type(%s), intent(inout) :: h" % ftype,
            "  type(c_ptr), intent(in) :: p", "  call %s(h)" % dname, "  h%ptr = p", "end subroutine",
            "!> y = x: y shares x's tensor (one more reference)." if ftype == "lm_dist_tensor" else "",
            "impure elemental subroutine %s_assign_(lhs, rhs)" % stem,
            "  type(%s), intent(inout) :: lhs" % ftype, "  type(%s), intent(in) :: rhs" % ftype]
    if ftype == "lm_dist_tensor":
        out += ["  integer(c_int) :: st",
                "  if (c_associated(rhs%ptr)) then",
                "    st = lmc_dist_tensor_retain(rhs%ptr)",
                '    if (st /= LM_SUCCESS) error stop "localmap: assignment of a bad type(lm_dist_tensor)"',
                "  end if",
                "  call take_tensor_(lhs, rhs%ptr)"]
    else:
        why = " (pass it as an argument; lm_mesh_borrow)" if ftype == "lm_mesh" else ""
        out += ["  if (c_associated(rhs%ptr) .or. c_associated(lhs%ptr)) &",
                '    error stop "localmap: a type(%s) cannot be copied%s"' % (ftype, why)]
    return [x for x in out if x] + ["end subroutine"]


def variant_lines(text, base, name, changed):
    """The twin `name` of the hand-written specific `base`, with the arguments `changed` of another
    type, converted in a call of `base`."""
    m = re.search(r"^( *)((?:[\w()]+ )?)(subroutine|function) %s\(([^)]*(?:&\s*\n[^)]*)*)\)(.*)$" % base,
                  text, re.M)
    if not m:
        raise SystemExit("api_gen_fortran.py: VARIANTS: no %s in localmap.f90" % base)
    prefix, what = m.group(2), m.group(3)
    dummies = [d.strip() for d in re.sub(r"&\s*\n\s*", "", m.group(4)).split(",")]
    decls = []
    for line in text[m.end():].split("\n")[1:]:
        if "::" not in line:
            break
        names = [re.sub(r"\(.*", "", x).strip() for x in re.split(r",(?![^(]*\))", line.split("::")[1])]
        hit = [n for n in names if n in changed]
        if hit:
            if names != hit:
                raise SystemExit("api_gen_fortran.py: VARIANTS: %s declares %s with other names" % (base, hit))
            decls += [VARIANT_ARGS[n][0] for n in hit]
        elif all(n in dummies for n in names):
            decls.append(line.strip())
    actual = ", ".join(VARIANT_ARGS[d][1] if d in changed else d for d in dummies)
    head = "%s%s %s(%s)%s" % (prefix, what, name, ", ".join(dummies), m.group(5))
    body = ("call %s(%s)" % (base, actual)) if what == "subroutine" else \
        ("%s = %s(%s)" % (re.search(r"result\((\w+)\)", m.group(5)).group(1), base, actual))
    out = ["! The twin of %s taking %s" % (base, " and ".join(
        "%s as %s" % (c, VARIANT_ARGS[c][0].split(",")[0]) for c in changed))]
    return out + wrap_stmt(head, "") + ["  " + x for x in decls] + wrap_stmt("  " + body, "  ") + \
        ["end %s" % what]


def generate_wrap(funcs):
    by_name = {f.name: f for f in funcs}
    text = open(MODULE).read()
    out = []
    for cname, spec in WRAPPERS.items():
        if cname not in by_name:
            raise SystemExit("api_gen_fortran.py: WRAPPERS names %s, which api/localmap.api does not describe" % cname)
        out += [""] + Wrapper(by_name[cname], *spec[:3], spec[3] if len(spec) > 3 else None).lines()
    used = used_rules(text) | {c for c in WRAPPERS if Rules(by_name[c]).checked}
    for f in funcs:
        if f.name not in used:
            continue
        names = {}
        if f.name in WRAPPERS:
            names = {d.cname: d.name for d in Wrapper(by_name[f.name], *WRAPPERS[f.name][:3], None).dummies}
        r = Rules(f, names)
        if not r.checked:
            raise SystemExit("api_gen_fortran.py: localmap.f90 calls rules_%s_, which has no rules" % f.name[3:])
        out += [""] + r.lines()
    for h in HANDLE_PROCS:
        out += [""] + handle_lines(*h)
    for base, twins in VARIANTS.items():
        for name, changed in twins:
            out += [""] + variant_lines(text, base, name, changed)
    head = HEAD + ("! Included by localmap.f90 after `contains`: the wrappers of C functions that need nothing but\n"
                   "! the uniform mapping (WRAPPERS), each C function's length rules in Fortran's names (rules_*_),\n"
                   "! the procedures of the handle types, and the twins of specifics (VARIANTS).\n")
    return head + "\n".join("  " + ln if ln else ln for ln in "\n".join(out).split("\n")) + "\n"


# =================================================================================================
# The procedures of every type and rank (localmap_typed.inc) and their generic interfaces with the
# module's other generated generics (localmap_generic.inc).
# =================================================================================================
TYPES = [  # suffix, Fortran type, dtype constant
    ("r4", "real(c_float)", "LM_FLOAT32"),
    ("r8", "real(c_double)", "LM_FLOAT64"),
    ("i1", "integer(c_int8_t)", "LM_INT8"),
    ("i2", "integer(c_int16_t)", "LM_INT16"),
    ("i4", "integer(c_int32_t)", "LM_INT32"),
    ("i8", "integer(c_int64_t)", "LM_INT64"),
    ("c4", "complex(c_float_complex)", "LM_COMPLEX64"),
    ("c8", "complex(c_double_complex)", "LM_COMPLEX128"),
    ("l1", "logical(c_bool)", "LM_BOOL"),
]
RANKS = [1, 2, 3, 4]
# lm_from_scalapack: ScaLAPACK's four types, the local array (rank 2) or its flat buffer (rank 1).
SCALAPACK_TYPES = ["r4", "r8", "c4", "c8"]
TYPED_HEAD = ("! SPDX-License-Identifier: BSD-3-Clause\n"
              "! Generated by tools/api.py (tools/api_gen_fortran.py, TYPES and RANKS): do not edit\n"
              "! (make api-generate).\n")

# The API reference (make docs, Doxygen) documents each generic interface with these comments.
GENERIC_DOCS = {
    "lm_from_local": """call lm_from_local(x, mesh, a, placements [, global_shape] [, shape_mode] [, ierr]):
a dist tensor x from this rank's shard `a` (any kind below, any rank; copied). The global shape
is `global_shape`, else from shape_mode: LM_SHAPE_ALLGATHER (default; collective over the mesh)
or LM_SHAPE_EVEN. placements: one lm_placement per mesh dim.""",
    "lm_from_global": """call lm_from_global(x, mesh, a, placements [, root] [, ierr]): a dist tensor x
from the full array `a`. root absent or < 0: every rank passes `a` and keeps its shard (local);
root >= 0: only mesh rank root's `a` is read, and scattered (collective over the mesh).""",
    "lm_gather": """call lm_gather(x, a [, root] [, ierr]): the full value of x (Partial reduced)
into `a`, an array of the global shape: on every member rank (root absent or < 0) or on mesh
rank root only. Collective over the mesh.""",
    "lm_arg_set": """call lm_arg_set(outputs(j), a [, ierr]) inside an lm_local_fn: output j becomes
a copy of the array `a` (any kind below, any rank).""",
    "lm_local": """call lm_local(x, p [, ierr]): p points at this rank's shard of x, a Fortran array
of the local shape (ranks 1 to 4; the kind must match x's dtype), a section of the borrowed array
when its columns are padded (lm_from_scalapack with LLD > LOCr). Writing through p changes x.""",
    "lm_arg_get": """call lm_arg_get(inputs(i), p [, ierr]) inside an lm_local_fn: p points at input
i's shard (ranks 1 to 4; the kind must match its dtype); treat it as read-only.""",
    "lm_from_scalapack": """call lm_from_scalapack(x, mesh, desc, a [, copy] [, ierr]): the dist tensor over this
rank's ScaLAPACK local array `a` of the M x N matrix that `desc` (the 9-integer descriptor)
describes, without a copy (any LLD >= max(1, LOCr): the padding rows are never touched; `a`
must be contiguous: the whole array a(LLD, LOCc), a(:, 1:LOCc) of an assumed-size one, or its
flat rank-1 buffer) unless copy = .true. (any section). x is the matrix (M, N), laid out block-cyclic over `mesh`, the 2-D
process grid (NPROW, NPCOL) in the BLACS grid's order; `a` must outlive x when borrowed. Local
(lm_dist_tensor_from_scalapack).""",
}
KINDS_DOC = "Kinds: " + ", ".join(t for _, t, _ in TYPES) + "."


def dims(r):
    return "(" + ",".join([":"] * r) + ")"


def sections(r):
    """The shard inside the array it lies in (a padded borrow's rows are longer than the shard)."""
    return ", ".join("1:shp(%d)" % k for k in range(1, r + 1))


def doc_lines(name, kinds=None):
    import textwrap
    kinds_doc = KINDS_DOC if kinds is None else "Kinds: " + ", ".join(
        t for s, t, _ in TYPES if s in kinds) + "."
    text = GENERIC_DOCS[name] + "\n" + "\n".join(textwrap.wrap(kinds_doc, 96))
    return "".join("!> %s\n" % ln for ln in text.split("\n"))


def comm_generics():
    """{generic: (its comment, [its specifics])} of the wrappers with a communicator dummy
    (Wrapper.lines names the integer and the type(MPI_Comm) specifics)."""
    out = {}
    for fname, spec, docline, *_ in WRAPPERS.values():
        if any("comm" in Dummy(x.strip()).marks for x in spec.split(",") if x.strip()):
            out[fname] = (docline, [fname[3:] + "_int_", fname[3:] + "_f08_"])
    return out


def generic_tail():
    """The generics of the generated wrappers' communicator twins and of the handle procedures
    (their names are public in localmap.f90's list of the module's API)."""
    out = ["! The generics of the wrappers' communicator twins and of the handle types' procedures\n",
           "! (localmap_wrap.inc).\n"]
    blocks = dict(comm_generics())
    destroys = [h[3] for h in HANDLE_PROCS if h[3]]
    blocks["lm_destroy"] = ("call lm_destroy(h): the destroy of h's type (%s)." % ", ".join(destroys), destroys)
    blocks["assignment(=)"] = ("lhs = rhs of two handles of one type: a dist tensor is shared (one more "
                               "reference, lm_dist_tensor_retain); other handles cannot be copied (error stop, "
                               "unless both are empty).", ["%s_assign_" % h[1] for h in HANDLE_PROCS])
    for name, (comment, specifics) in blocks.items():
        out += [x + "\n" for x in doc(comment, "")]
        out.append("interface %s\n" % name)
        out += [x + "\n" for x in wrap_stmt("  module procedure " + ", ".join(specifics), "")]
        out.append("end interface\n")
    return out


def generate_generic(funcs):
    out = [TYPED_HEAD]
    for name in ["lm_from_local", "lm_from_global", "lm_gather", "lm_arg_set"]:
        out.append(doc_lines(name))
        out.append("interface %s\n" % name)
        out += ["  module procedure %s_%s\n" % (name, s) for s, _, _ in TYPES]
        out.append("end interface %s\n" % name)
    for name in ["lm_local", "lm_arg_get"]:
        out.append(doc_lines(name))
        out.append("interface %s\n" % name)
        out += ["  module procedure %s_%s_%d\n" % (name, s, r) for s, _, _ in TYPES for r in RANKS]
        out.append("end interface %s\n" % name)
    out.append(doc_lines("lm_from_scalapack", SCALAPACK_TYPES))
    out.append("interface lm_from_scalapack\n")
    out += ["  module procedure lm_from_scalapack_%s_%d\n" % (s, r) for s in SCALAPACK_TYPES for r in (2, 1)]
    out.append("end interface lm_from_scalapack\n")
    return "".join(out + generic_tail())


def generate_typed(funcs):
    out = [TYPED_HEAD]
    for s, t, dt in TYPES:
        out.append(f"""
subroutine lm_from_local_{s}(x, mesh, a, placements, global_shape, shape_mode, ierr)
  type(lm_dist_tensor), intent(inout) :: x
  type(lm_mesh), intent(in) :: mesh
  {t}, intent(in), target, contiguous :: a(..)
  type(lm_placement), intent(in) :: placements(:)
  integer(c_int64_t), intent(in), optional :: global_shape(:)
  integer, intent(in), optional :: shape_mode
  integer, intent(out), optional :: ierr
  call from_local_(x, mesh, c_loc(a), int(shape(a), c_int64_t), {dt}, placements, global_shape, &
                   shape_mode, ierr)
end subroutine

subroutine lm_from_global_{s}(x, mesh, a, placements, root, ierr)
  type(lm_dist_tensor), intent(inout) :: x
  type(lm_mesh), intent(in) :: mesh
  {t}, intent(in), target, contiguous :: a(..)
  type(lm_placement), intent(in) :: placements(:)
  integer, intent(in), optional :: root
  integer, intent(out), optional :: ierr
  call from_global_(x, mesh, c_loc(a), int(shape(a), c_int64_t), {dt}, placements, root, ierr)
end subroutine

subroutine lm_gather_{s}(x, a, root, ierr)
  type(lm_dist_tensor), intent(in) :: x
  {t}, intent(inout), target, contiguous :: a(..)
  integer, intent(in), optional :: root
  integer, intent(out), optional :: ierr
  call gather_(x, c_loc(a), int(shape(a), c_int64_t), {dt}, root, ierr)
end subroutine

subroutine lm_arg_set_{s}(arg, a, ierr)
  type(lm_arg_t), intent(inout) :: arg
  {t}, intent(in), target, contiguous :: a(..)
  integer, intent(out), optional :: ierr
  call arg_set_(arg, c_loc(a), int(shape(a), c_int64_t), {dt}, &
                int(storage_size(a) / 8, c_size_t) * int(size(a), c_size_t), ierr)
end subroutine
""")
        for r in RANKS:
            out.append(f"""
subroutine lm_local_{s}_{r}(x, p, ierr)
  type(lm_dist_tensor), intent(in) :: x
  {t}, pointer, intent(inout) :: p{dims(r)}
  integer, intent(out), optional :: ierr
  {t}, pointer :: full{dims(r)}
  type(c_ptr) :: d
  integer(c_int64_t) :: shp({r}), pad({r})
  integer(c_int) :: st
  call local_data_(x, {dt}, {r}, d, shp, pad, st)
  if (st == LM_SUCCESS) then
    call c_f_pointer(d, full, pad)
    p => full({sections(r)})
  end if
  call done_(st, ierr, "lm_local")
end subroutine

subroutine lm_arg_get_{s}_{r}(arg, p, ierr)
  type(lm_arg_t), intent(in) :: arg
  {t}, pointer, intent(inout) :: p{dims(r)}
  integer, intent(out), optional :: ierr
  {t}, pointer :: full{dims(r)}
  type(c_ptr) :: d
  integer(c_int64_t) :: shp({r}), pad({r})
  integer(c_int) :: st
  call arg_data_(arg, {dt}, {r}, d, shp, pad, st)
  if (st == LM_SUCCESS) then
    call c_f_pointer(d, full, pad)
    p => full({sections(r)})
  end if
  call done_(st, ierr, "lm_arg_get")
end subroutine
""")
    for s, t, dt in TYPES:
        if s not in SCALAPACK_TYPES:
            continue
        for r in (2, 1):
            out.append(f"""
subroutine lm_from_scalapack_{s}_{r}(x, mesh, desc, a, copy, ierr)
  type(lm_dist_tensor), intent(inout) :: x
  type(lm_mesh), intent(in) :: mesh
  integer, intent(in) :: desc(:)
  {t}, intent(inout), target :: a{dims(r)}
  logical, intent(in), optional :: copy
  integer, intent(out), optional :: ierr
  {t}, allocatable, target :: tmp{dims(r)}
  if (size(a) == 0) then
    call from_scalapack_(x, mesh, desc, c_null_ptr, {dt}, copy, .true., ierr)
  else if (is_contiguous(a)) then
    call from_scalapack_(x, mesh, desc, c_loc(a), {dt}, copy, .true., ierr)
  else  ! a section: borrowing it is refused; a copy reads this contiguous one
    tmp = a
    call from_scalapack_(x, mesh, desc, c_loc(tmp), {dt}, copy, .false., ierr)
  end if
end subroutine
""")
    return "".join(out)


# =================================================================================================
# What include/localmap.h declares besides its functions (localmap_types.inc, in the module's
# specification part after DLPack's hand-written types): every constant (`#define LM_X 1`, enum
# members) as a named constant, every struct as a bind(C) derived type of the same name and fields,
# the data type and device values (LM_FLOAT32, LM_CPU), and a derived type with a `final`
# procedure for every handle. Read from the header by the reader of the Rust types
# (tools/api_gen_rust_types.py), so that both bindings see the same declarations; a declaration
# this generator does not know stops it: add it to one of the tables below.
# =================================================================================================
TYPES_OUTPUT = "bindings/fortran/localmap_types.inc"
# Declarations the module leaves out: C's own syntax (the export macros, the include guard, the
# placement value macros, whose Fortran counterparts are lm_replicate(), lm_shard(), ... of
# type(lm_placement)) and constants the Fortran API has no use for (lm_from_scalapack takes desc(:)
# of any size; lm_local_map checks its argument counts in C).
NOT_IN_FORTRAN = {"LOCALMAP_H_", "LM_API", "LM_NODISCARD", "LM_PLACEMENT_REPLICATE", "LM_SCALAPACK_DLEN",
                  "LM_LOCAL_MAP_MAX_ARGS"}
# Enums whose members take another name in Fortran, by prefix: Fortran names are case-blind, and
# lm_replicate(), lm_shard(), ... are the constructors of type(lm_placement).
ENUM_PREFIX = {"lm_placement_kind_t": "LM_KIND_"}
# The kind of an integer constant: default integer, except where the value fills a field of an
# int32 or uint32 kind (the options' magic and version, lm_placement_t::extents, the route bits of
# lm_reshard_plan_info_t::routes), and integer(c_int) for the int flags of the anonymous enum (None).
CONST_KINDS = {"LM_EXTENTS_AGREED": "integer(c_int32_t)", "lm_route_t": "integer(c_int32_t)",
               None: "integer(c_int)"}
# C field types -> Fortran kinds (an unsigned C type takes the signed kind of its size, and its
# field says so in a comment).
FIELD_KINDS = {"size_t": "integer(c_size_t)", "int": "integer(c_int)", "int32_t": "integer(c_int32_t)",
               "int64_t": "integer(c_int64_t)", "uint32_t": "integer(c_int32_t)",
               "uint64_t": "integer(c_int64_t)", "double": "real(c_double)"}
# Structs without default initialisation: lm_placement_t is a plain value of eight int32 fields,
# as in C (type(lm_placement), its Fortran form, has the defaults).
PLAIN_STRUCTS = {"lm_placement_t"}
# DLPack's structs are hand-written in localmap.f90 (they come from dlpack.h, not from this
# header): their fields' kinds, for the value macros LM_FLOAT32, ..., LM_CPU.
DLPACK_KINDS = {"DLDataType": ["c_int8_t", "c_int8_t", "c_int16_t"], "DLDevice": ["c_int", "c_int"]}
# What the Fortran module says of a declaration (an enum: its name, or its first member's), before
# the header's comment.
FORTRAN_NOTES = {
    "lm_placement_kind_t": "Placement kinds (C's LM_REPLICATE, LM_SHARD, ...: Fortran names are case-blind, "
                           "and lm_replicate(), lm_shard(), ... are the constructors).",
    "LM_EXTENTS_AGREED": "lm_ragged(dim, LM_EXTENTS_AGREED): the ranks' local shapes give the extents "
                         "(lm_from_local with LM_SHAPE_ALLGATHER, its default; lm_local_map outputs without a "
                         "given shape).",
    "LM_PLAN_INFO_ALL_RANKS": "Flags of lmc_reshard_plan_info and lmc_reshard_estimate (all_ranks = .true. "
                                   "in Fortran).",
    "lm_placement_t": "The C placement struct (C dim numbering). Fortran code uses type(lm_placement).",
    "lm_mesh_config_t": "The C options of lm_mesh_create (lmc_mesh_create); lm_mesh_create takes them as "
                        "arguments.",
    "lm_device_config_t": "This rank's device options of a mesh (lm_mesh_set_device_config): a CUDA stream "
                          "and allocator callbacks (bind(C) functions, c_funloc).",
    "lm_reshard_plan_info_t": "What executing a plan moves (lm_reshard_plan_info; C's lm_reshard_plan_info_t, "
                              "with the same fields and meaning; routes: LM_ROUTE_* bits).",
    "lm_reshard_entry_t": "One entry of a group (lmc_reshard_group_create; C's lm_reshard_entry_t: C "
                          "numbering, the row-major global shape). Fortran code uses type(lm_reshard_entry).",
    "lm_reshard_group_config_t": "The C options of lm_reshard_group_create (lmc_reshard_group_create); "
                                 "lm_reshard_group_create takes them as arguments.",
    "lm_local_map_options_t": "The C options of lm_local_map_ex (lmc_local_map_ex); lm_local_map takes them "
                              "as arguments.",
    "lm_arg_t": "One argument or result of lm_local_map (kind: LM_ARG_*).",
}
# The Fortran handle types (one per C handle, FTYPES): their comment, and fields besides `ptr`.
HANDLE_DOCS = {
    "lm_mesh": "A mesh handle. Destroyed (locally) by lm_destroy or when it goes out of scope; it cannot "
               "be copied (meshes have no reference count: pass it as an argument). A mesh obtained from "
               "lm_dist_tensor_mesh or inside a local_map function is borrowed and never destroyed here.",
    "lm_dist_tensor": "A dist tensor handle. Assignment y = x shares the tensor (a reference, "
                      "lm_dist_tensor_retain); lm_destroy or going out of scope drops one reference (local).",
    "lm_reshard_plan": "A persistent reshard plan (not copyable).",
    "lm_reshard_group": "A grouped reshard plan: N reshards between one pair of meshes run as one (not "
                        "copyable).",
    "lm_local_map_record": "The record of one lm_local_map call made with record= (not copyable): what its "
                           "backward pass needs (lm_local_map_record_placements, lm_local_map_record_input_grad).",
    "lm_request": "A nonblocking reshard in flight; finalizing it waits for completion.",
}
HANDLE_FIELDS = {"lm_mesh": ["logical :: owned = .true."]}


def header():
    """tools/api_gen_rust_types.py, the header's reader (tools/ is on the path: api.py runs from it)."""
    import api_gen_rust_types
    return api_gen_rust_types


_structs = []


def structs():
    """The names of the bind(C) derived types: DLPack's and the header's structs."""
    if not _structs:
        _structs.append(DLPACK_STRUCTS | {n for k, n, _, _ in header().declarations() if k == "sname"})
    return _structs[0]


def doc_text(text):
    """A header comment's text as one paragraph."""
    lines = [re.sub(r"^\s*\*?\s?", "", ln) for ln in text.strip().lstrip("<").split("\n")]
    return " ".join(" ".join(lines).split())


def fdoc(parts, indent):
    """!> lines of the paragraphs `parts` (None and "" left out); a paragraph "- x" is a list item,
    its further lines indented."""
    import textwrap
    out = []
    for p in parts:
        if p:
            more = "  " if p.startswith("- ") else ""
            out += [indent + "!> " + ln for ln in textwrap.wrap(p, 96 - len(indent), subsequent_indent=more,
                                                                 break_on_hyphens=False)]
    return out


def fconst(value, kind):
    """A C integer literal (`0x4c4d4d43u`, `2u`, `-1`) as a Fortran constant of `kind`."""
    v = re.sub(r"[uU]$", "", value.strip())
    if v.lower().startswith("0x"):
        k = re.fullmatch(r"integer\((\w+)\)", kind)
        return "int(z'%s'%s)" % (v[2:], ", " + k.group(1) if k else "")
    if not re.fullmatch(r"-?\d+", v):
        raise SystemExit("include/localmap.h: api_gen_fortran: %r is no integer literal" % value)
    return v


def const_stmt(kind, pairs, indent="  "):
    """`kind, parameter, public :: A = 1, B = 2`, continued within MAXLINE."""
    text = "%s%s, parameter, public :: %s" % (indent, kind, ", ".join("%s = %s" % p for p in pairs))
    cut = text.rfind(" + ", 0, MAXLINE - 2)
    if len(text) > MAXLINE and len(pairs) == 1 and cut > 0:  # an expression (LM_VERSION_CODE)
        return [text[:cut] + " &", indent + "    " + text[cut + 1:]]
    return wrap_stmt(text, indent)


def const_kind(name):
    """The kind of the constant of a `#define` (CONST_KINDS; an option struct's magic and version:
    its uint32_t fields)."""
    if re.fullmatch(r"LM_\w+_(MAGIC|VERSION)", name):
        return "integer(c_int32_t)"
    return CONST_KINDS.get(name, "integer")


def enum_lines(name, doc_, members):
    """One statement of an enum's members, its comment the enum's and a list of the members'."""
    prefix = ENUM_PREFIX.get(name)
    fname = (lambda n: prefix + n[len("LM_"):]) if prefix else (lambda n: n)
    kind = CONST_KINDS.get(name, "integer")
    head = (name + ": " if name else "") + doc_text(doc_ or "")
    out = fdoc([FORTRAN_NOTES.get(name or members[0][0]), head], "  ")
    for n, _, d in members:
        out += fdoc(["- %s: %s" % (fname(n), doc_text(d)) if d else "- " + fname(n)], "  ")
    return out + const_stmt(kind, [(fname(n), fconst(v, kind)) for n, v, _ in members])


def init_values(body, fields):
    """The defaults an `_INIT` macro gives a struct's fields, by field: the literals; sizeof and
    the magic and version macros give 0 (the wrappers set them, e.g. lm_mesh_config_t(size=
    c_sizeof(cfg), magic=LM_MESH_CONFIG_MAGIC, version=LM_MESH_CONFIG_VERSION))."""
    vals = [v.strip() for v in " ".join(body.replace("\\\n", " ").split()).strip("{}").split(",")]
    out = {}
    for (f, _, _), v in zip(fields, vals):
        out[f] = "0" if re.fullmatch(r"sizeof\(\w+\)|[A-Z_]+", v) else v
    return out


def struct_fields(body):
    """(name, C type, comment) of a struct body."""
    out, pending = [], None
    for m in re.finditer(r"/\*\*(<?)(.*?)\*/|([^;/]+?)\s*\b(\w+)\s*;", body, re.S):
        if m.group(4):
            out.append([m.group(4), " ".join(m.group(3).split()), pending])
            pending = None
        elif m.group(1) and out:
            out[-1][2] = m.group(2)
        else:
            pending = m.group(2)
    return out


def field_line(sname, fname, ctype, init, callbacks):
    """The declaration of one field: its kind, its default, and the C type where the kind does
    not say it (unsigned, a pointer, a callback)."""
    note = ""
    if "*" in ctype:
        kind, default = "type(c_ptr)", "c_null_ptr"
        note = "" if ctype == "void *" else ctype
    elif ctype in callbacks:
        kind, default, note = "type(c_funptr)", "c_null_funptr", ctype
    elif ctype in FIELD_KINDS:
        kind, default = FIELD_KINDS[ctype], "0"
        note = ctype + " in C" if ctype.startswith("u") else ""
        if init is not None and init != "NULL":
            default = init + "_c_double" if kind == "real(c_double)" and "." in init else init
    elif ctype in structs():
        kind, default = "type(%s)" % ctype, None
    else:
        raise SystemExit("include/localmap.h: api_gen_fortran: %s::%s has the type %r, which FIELD_KINDS "
                         "does not map" % (sname, fname, ctype))
    if sname in PLAIN_STRUCTS:
        default = None
    line = "    %s :: %s%s" % (kind, fname, "" if default is None else " = " + default)
    return line + ("   ! " + note if note else "")


def struct_lines(name, doc_, fields, inits, callbacks):
    out = fdoc([FORTRAN_NOTES.get(name), doc_text(doc_ or "")], "  ")
    out.append("  type, bind(C), public :: " + name)
    for f, ctype, d in fields:
        out += fdoc([doc_text(d or "")], "    ")
        out.append(field_line(name, f, ctype, inits.get(f), callbacks))
    return out + ["  end type"]


def value_lines(name, doc_, body, fns):
    """A value macro (`LM_DTYPE(kDLFloat, 16)`, `((DLDevice){kDLCPU, 0})`) as a named constant of a
    DLPack type."""
    call = re.fullmatch(r"(\w+)\((.*)\)", body)
    if call and call.group(1) in fns:
        params, fbody = fns[call.group(1)]
        for p_, a in zip(params, [a.strip() for a in call.group(2).split(",")]):
            fbody = re.sub(r"\b%s\b" % p_, a, fbody)
        body = fbody
    lit = re.fullmatch(r"\(\s*\((\w+)\)\s*\{(.*)\}\s*\)", body)
    if not lit or lit.group(1) not in DLPACK_KINDS:
        raise SystemExit("include/localmap.h: api_gen_fortran: %s: a value macro this generator cannot "
                         "read: %s" % (name, body))
    t = lit.group(1)
    vals = [re.sub(r"^\(\w+\)\s*\((.*)\)$", r"\1", v.strip()) for v in lit.group(2).split(",")]
    args = []
    for v, k in zip(vals, DLPACK_KINDS[t]):
        if k == "c_int":
            args.append(v)
        elif re.fullmatch(r"\d+", v):  # 128 in a uint8_t is -128 in a c_int8_t
            n = int(v)
            args.append("%d_%s - 1_%s" % (n - 255, k, k) if k == "c_int8_t" and n > 127 else "%d_%s" % (n, k))
        else:
            args.append("int(%s, %s)" % (v, k))
    return fdoc([doc_text(doc_ or "")], "  ") + \
        wrap_stmt("  type(%s), parameter, public :: %s = %s(%s)" % (t, name, t, ", ".join(args)), "  ")


def handle_type_lines(ftype):
    return (fdoc([HANDLE_DOCS[ftype]], "  ") + ["  type, public :: " + ftype, "    type(c_ptr) :: ptr = c_null_ptr"] +
            ["    " + x for x in HANDLE_FIELDS.get(ftype, [])] +
            ["  contains", "    final :: %s_final_" % STEMS[ftype], "  end type"])


def generate_types(funcs):
    hdr = header()
    decls = hdr.declarations()
    callbacks = {name for kind, name, _, _ in decls if kind == "fname"}
    inits, fields = {}, {}
    for kind, name, _, m in decls:
        if kind == "sname":
            fields[name] = struct_fields(m.group("sbody"))
        elif kind == "dname" and name.endswith("_INIT") and m.group("body").strip():
            t = re.search(r"sizeof\((\w+)\)", m.group("body"))
            if not t or t.group(1) not in fields:
                raise SystemExit("include/localmap.h: api_gen_fortran: %s initialises no struct" % name)
            inits[t.group(1)] = init_values(m.group("body"), fields[t.group(1)])
    handles = [name for kind, name, _, _ in decls if kind == "handle"]
    if sorted(FTYPES) != sorted(handles) or sorted(STEMS) != sorted(HANDLE_DOCS):
        raise SystemExit("api_gen_fortran.py: FTYPES, HANDLE_PROCS and HANDLE_DOCS must name every handle "
                         "of include/localmap.h (%s)" % ", ".join(handles))
    out, fns = [], {}
    for kind, name, doc_, m in decls:
        lines = []
        if kind in ("ename", "abody"):
            lines = enum_lines(name, doc_, hdr.members(m.group("ebody") or m.group("abody"), name or "enum"))
        elif kind == "sname":
            lines = struct_lines(name, doc_, fields[name], inits.get(name, {}), callbacks)
        elif kind == "dname" and name not in NOT_IN_FORTRAN and m.group("body").strip():
            body = " ".join(m.group("body").replace("\\\n", " ").split())
            if m.group("params") is not None:  # LM_DTYPE, LM_PLACEMENT_*: expanded where used
                fns[name] = ([p.strip() for p in m.group("params").strip("()").split(",")], body)
            elif name.endswith("_INIT"):  # the defaults of its struct's fields
                continue
            elif re.fullmatch(r"-?(0x[0-9a-fA-F]+|\d+)[uU]?", body):
                k = const_kind(name)
                lines = fdoc([FORTRAN_NOTES.get(name), doc_text(doc_ or "")], "  ") + \
                    const_stmt(k, [(name, fconst(body, k))])
            elif re.fullmatch(r"\(([\w\s*+]+)\)", body):  # LM_VERSION_CODE
                lines = fdoc([doc_text(doc_ or "")], "  ") + const_stmt("integer", [(name, body[1:-1])])
            else:
                lines = value_lines(name, doc_, body, fns)
        if lines:
            out += lines
    out += ["", "  ! " + "-" * 93, "  ! Fortran types", "  ! " + "-" * 93]
    for ftype, *_ in HANDLE_PROCS:
        out += handle_type_lines(ftype)
    head = ("! SPDX-License-Identifier: BSD-3-Clause\n"
            "! Generated by tools/api.py (tools/api_gen_fortran.py) from include/localmap.h: do not edit\n"
            "! (make api-generate). Included by localmap.f90 in the module's specification part, after\n"
            "! DLPack's types: the header's constants, structs (bind(C), with its fields' comments), data\n"
            "! types and host device, then the handle types (their procedures: localmap_wrap.inc).\n")
    return head + "\n".join(out) + "\n"


OUTPUTS = {OUTPUT: generate, "bindings/fortran/localmap_generic.inc": generate_generic,
           "bindings/fortran/localmap_wrap.inc": generate_wrap,
           "bindings/fortran/localmap_typed.inc": generate_typed, TYPES_OUTPUT: generate_types}
