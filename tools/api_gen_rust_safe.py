# SPDX-License-Identifier: BSD-3-Clause
"""Rust's generated safe parts (tools/api.py): in the safe crate (bindings/rust/localmap), what
follows from the C API by rule, so that localmap/src/lib.rs is written only where Rust needs
thought:
  - the Rust enums of the C enums and dtypes (ENUMS, DTYPE_PREFIX): variants and docs read from
    include/localmap.h, with `raw()` and `from_raw()`;
  - `Drop` (the handle's destroy), `Clone` (a refcounted one's retain), `as_raw`, `from_raw` and
    `into_raw` of every handle type (HANDLES), and the `Drop` of the ids a Rust type owns (IDS);
  - a builder method per flag of a call (FLAG_METHODS: `LocalMap::no_agree`), from the header's
    flag macros and their docs;
  - the wrappers of WRAPPERS: one C call each, made from the function's description in
    api/localmap.api: the argument of the owner's handle type is `self` (`&mut self` when the
    call writes the handle), or of the owner's enum; the other inputs are parameters (Rust types
    by IN_TYPES, or by the entry's own `types`), an integer that is the length of an array
    argument is that slice's length, the outputs are the result (OUT_TYPES; a tuple for several),
    array arguments are checked against their length rules through `lengths` (lib.rs) before the
    call, and a failure names the Rust method (`call`, lib.rs). A function that returns no
    status returns its value (an int, a copy of a string the library keeps). An output array the
    caller cannot size is sized by a first call that asks for its count (`query`).
"""
import re
import sys
import textwrap

api = sys.modules["api"]  # tools/api.py, which loads this module
import api_gen_rust_types as types  # noqa: E402  (tools/, loaded by api.py before this module)

OUTPUT = "bindings/rust/localmap/src/calls.rs"
WIDTH = types.WIDTH

# C handle type -> its Rust type, which owns one (a reference of a refcounted one: `Clone` retains).
# Each gets `Drop` (its `destroy` call, default `lm_x_destroy`, which must be NULL-safe: it sets the
# handle to NULL; a managed tensor's `Drop`, DLPack's deleter, is lib.rs's) and `as_raw`,
# `from_raw`, `into_raw`; options: retain (`Clone` through `lm_x_retain`), generics (the Rust
# type's lifetime), raw (False: no raw conversions; "in-out": from_raw and into_raw only).
HANDLES = {"lm_mesh_t": {"rust": "Mesh"}, "lm_dist_tensor_t": {"rust": "DistTensor", "retain": True},
           "lm_reshard_plan_t": {"rust": "ReshardPlan"}, "lm_reshard_group_t": {"rust": "ReshardGroup"},
           "lm_local_map_record_t": {"rust": "LocalMapRecord"},
           "lm_request_t": {"rust": "Request", "generics": "<'_>", "destroy": "lm_request_wait",
                            "raw": False},
           "DLManagedTensor*": {"rust": "ManagedTensor", "destroy": None, "raw": "in-out"}}
# Rust types that own an id of the library (a field of a C integer type): `Drop` gives it back
# (its destroy call), a getter named as the field reads it (as `as_raw` a handle; its doc).
IDS = {"Extents": ("id", "lm_extents_destroy", "The id a ragged placement carries.")}
# C enum -> (Rust enum, member prefix, doc, the doc of an Other(code) variant for unknown codes).
ENUMS = {"lm_status_t": ("Status", "LM_(ERR_)?", "The status codes of `lm_status_t`.",
                         "A code this binding does not know yet (the C enum is append-only)."),
         "lm_reduce_op_t": ("ReduceOp", "LM_REDUCE_", "A reduction of [`Placement::Partial`].", None),
         "lm_transport_t": ("Transport", "LM_TRANSPORT_",
                            "How a mesh moves tensor data (`lm_transport_t`).",
                            "A transport this binding does not know yet."),
         "lm_record_which_t": ("RecordWhich", "LM_RECORD_", "Which placements "
                               "[`LocalMapRecord::placements`] reports (`lm_record_which_t`).", None),
         "lm_shape_mode_t": ("ShapeMode", "LM_SHAPE_", None, None)}
# C enums whose value travels with an array argument that one member reads (NULL for the others):
# C enum -> (that member, the array's element type). Its Rust enum's variant carries the array
# (a Vec); `raw()` gives the C value and the array's pointer.
PAYLOADS = {"lm_shape_mode_t": ("LM_SHAPE_GIVEN", "i64")}
# Variant docs in Rust's terms where the header's speak of C arguments.
VARIANT_DOCS = {
    "RecordWhich::Input": "An input's own placements, before any move (on its own mesh).",
    "RecordWhich::In": "The placements of the view `f` got.",
    "RecordWhich::InGrad": "Those of its gradient: [`LocalMap::grad_placements`], else `In`.",
    "RecordWhich::Out": "An output's placements.",
    "RecordWhich::OutGrad": "Its gradient's: [`placements_adjoint`] of `Out`.",
    "ShapeMode::Allgather": "One small allgather of local extents, collective over the mesh (right for\n"
                            "uneven shards; ragged dims with `LM_EXTENTS_AGREED` take their extents\n"
                            "from it).",
}
# Flag macros whose doc says "<function> flag: ..." -> builder methods of the Rust type that makes
# that call, one per flag: `LM_LOCAL_MAP_NO_AGREE` -> `LocalMap::no_agree`, which ors it into the
# builder's `flags` (lib.rs). The docs are the header's, in Rust's words (FLAG_WORDS), with what
# Rust adds (FLAG_NOTES).
FLAG_METHODS = {"lm_local_map": ("LocalMap<'_>", "LM_LOCAL_MAP_")}
FLAG_WORDS = {"in_placements": "their `input_as` placements"}
FLAG_NOTES = {"LM_LOCAL_MAP_NO_AGREE": "a failure stays local (every rank must then fail alike)"}
# The dtype macros (LM_FLOAT32 = LM_DTYPE(kDLFloat, 32)) -> DType variants: prefix + bits.
DTYPE_PREFIX = {"kDLFloat": "F", "kDLBfloat": "BF", "kDLInt": "I", "kDLUInt": "U", "kDLComplex": "C"}

# Rust types of inputs: by (C type, argument name), then by C type; `[]` marks an array.
IN_TYPES = {("int", "dim"): "usize", ("int", "index"): "usize", ("int", "parent_comm"): "Comm",
            ("int", "reset_peak"): "bool", "int": "i32", "int32_t": "i32", "int64_t": "i64",
            "unsigned": "u32",
            "DLDataType": "DType", "DLDevice": "Device", "DLDeviceType": "sys::DLDeviceType",
            "void*": "*mut c_void", "string": "&str", ("int", "which"): "RecordWhich",
            "lm_mesh_t": "&Mesh", "lm_dist_tensor_t": "&DistTensor",
            "lm_placement_t[]": "&[Placement]", "int64_t[]": "&[i64]", "int[]": "&[i32]",
            "int[9]": "&[i32; sys::LM_SCALAPACK_DLEN]"}
# Rust type -> how the C call takes a parameter `x` of it (`?`: converted first, in a let).
IN_CONV = {"usize": "to_int(x, \"x\")?", "&str": "c_string(M, \"x\", x)?", "RecordWhich": "x.raw()",
           "Comm": "x.0", "bool": "x as c_int", "DType": "x.raw()", "Device": "x.raw()", "&Mesh": "x.raw",
           "Option<&Mesh>": "x.map_or(ptr::null_mut(), |m| m.raw)",
           "&DistTensor": "x.raw", "&mut DistTensor": "x.raw", "&[Placement]": "raw_placements(x)",
           "&[i64]": "x.as_ptr()", "&[i32]": "x.as_ptr()", "&[i32; sys::LM_SCALAPACK_DLEN]": "x.as_ptr()"}
# Outputs: C type (and name) -> (Rust type, initial value, the result from the value `x`).
OUT_TYPES = {("int", "ndim"): ("usize", "0", "x as usize"), ("int", "n"): ("usize", "0", "x as usize"),
             ("int", "buckets"): ("usize", "0", "x as usize"),
             ("int", "is_member"): ("bool", "0", "x != 0"), ("int", "supported"): ("bool", "0", "x != 0"),
             ("int", "done"): ("bool", "0", "x != 0"),
             ("int", "comm_f"): ("Comm", "0", "Comm(x)"),
             ("int", "transport"): ("Transport", "0", "Transport::from_raw(x)"),
             "int": ("i32", "0", "x"), "int64_t": ("i64", "0", "x"), "int32_t": ("i32", "0", "x"),
             "DLDataType": ("DType", "sys::LM_FLOAT64", "dtype_of(x)?"),
             "DLDevice": ("Device", "sys::LM_CPU", "Device::from_raw(x)"),
             "int64_t[]": ("Vec<i64>", "vec![0; {len}]", "x"),
             "lm_placement_t[]": ("Vec<Placement>", "vec![sys::lm_placement_t::default(); {len}]",
                                  "placements_of(x)?"),
             "int[9]": ("[i32; sys::LM_SCALAPACK_DLEN]", "[0; sys::LM_SCALAPACK_DLEN]", "x"),
             "lm_dist_tensor_t[]": ("Vec<DistTensor>", "vec![ptr::null_mut(); {len}]",
                                    "x.into_iter().map(|raw| DistTensor { raw }).collect()"),
             "DLTensor": ("sys::DLTensor", "host_view::<u8>(ptr::null(), &[])", "x")}
OUT_TYPES.update({s: ("sys::" + s, "sys::" + s.upper()[:-2] + "_INIT", "x")  # versioned structs
                  for s in ("lm_device_config_t", "lm_reshard_plan_info_t")})
OUT_TYPES.update({h: (r["rust"] + r.get("generics", ""), "ptr::null_mut()",
                      "%s { raw: x%s }" % (r["rust"], ", _life: PhantomData" if "generics" in r else ""))
                  for h, r in HANDLES.items()})

# `flags` of lm_reshard_plan_info and lm_reshard_estimate: whether to sum every rank's counts.
ALL_RANKS = {"types": {"flags": "bool"}, "names": {"flags": "all_ranks"},
             "conv": {"flags": "if all_ranks { sys::LM_PLAN_INFO_ALL_RANKS } else { 0 }"}}
# The wrappers: (Rust name, C function, options, doc). Options: types (argument -> Rust type),
# names (argument -> Rust parameter name), conv (argument -> how C takes it), len (output array ->
# its length, an expression), null (arguments passed as NULL), self (the argument that is self),
# receiver (`mut self`: the method consumes it), life (a lifetime the result borrows self and the
# reference arguments for), query ((output array, its count): a first call learns the count),
# rules (array argument -> the rule `X.ndim` of handle X that Rust checks before the call where C
# takes the length as an argument and checks it itself, to name the slice as the caller wrote it:
# the Fortran layer's FORTRAN_RULES), ret and out (the result's type and value, an expression of
# the outputs), unsafe.
WRAPPERS = [
    ("version", "lm_get_version", {},
     "`lm_get_version`: the loaded library's version as `LM_VERSION_CODE` (major*10000+minor*100+patch)."),
    ("last_error_message", "lm_last_error_message", {},
     "`lm_last_error_message`: the message of the last failed call on this thread (\"\" if none), as\n"
     "the C library wrote it."),
    ("Status::as_str", "lm_status_string", {"ret": "&'static str"},
     "`lm_status_string`: e.g. \"LM_ERR_INVALID_ARGUMENT: invalid argument\"."),
    ("set_error_message", "lm_set_error_message", {},
     "`lm_set_error_message`: explains a failure of a [`LocalMap`] function (the closure's `Err`\n"
     "text is passed this way already). Interior NUL bytes are replaced."),
    ("init", "lm_init", {"null": ("argc", "argv")},
     "`lm_init`: initialises MPI unless something else did. Works without mpirun (a singleton)."),
    ("finalize", "lm_finalize", {},
     "`lm_finalize`: finalises MPI if [`init`] initialised it. Handles dropped later stay safe."),
    ("comm_world", "lm_comm_world", {}, "`lm_comm_world`: `MPI_COMM_WORLD` as a Fortran handle."),
    ("world_rank", "lm_world_rank", {}, "`lm_world_rank`: (rank in `MPI_COMM_WORLD`, world size)."),
    ("device_supported", "lm_device_supported", {},
     "`lm_device_supported`: whether this build holds tensors on the device type (`sys::kDLCPU`, ...)."),
    ("pool_stats", "lm_pool_stats", {},
     "`lm_pool_stats`: (bytes of the library's host buffer pool in use, their high-water mark);\n"
     "`reset_peak` then sets the mark to the bytes in use."),
    ("chunk", "lm_layout_chunk", {},
     "`lm_layout_chunk`: the `(offset, length)` block `index` of `parts` gets of an extent `n`."),
    ("format_placements", "lm_placements_format", {}, "`lm_placements_format`: e.g. `\"[S(0), R, P(sum)]\"`."),
    ("Extents::new", "lm_extents_create",
     {"names": {"extents": "lengths"}, "ret": "Extents", "out": "Extents { id }"},
     "Registers `lengths` (each >= 0)."),
    ("Extents::lengths", "lm_extents_get",
     {"query": ("extents", "count"), "ret": "Vec<i64>", "out": "extents"},
     "The lengths of any live extents id (e.g. from `DistTensor::placements`)."),
    ("Mesh::grid", "lm_mesh_create_grid", {"names": {"parent_comm": "parent"}, "null": ("config",)},
     "`lm_mesh_create_grid`: the 2-D mesh of a process grid (a BLACS grid, say) from this rank's\n"
     "grid coordinate (`-1, -1` outside the grid). Collective over `parent`."),
    ("Mesh::ndim", "lm_mesh_ndim", {}, "The number of mesh dims."),
    ("Mesh::shape", "lm_mesh_shape", {"len": {"shape": "self.ndim()?"}}, "The mesh's extents."),
    ("Mesh::size", "lm_mesh_size", {}, "Number of ranks in the mesh."),
    ("Mesh::is_member", "lm_mesh_is_member", {}, "Whether this rank belongs to the mesh."),
    ("Mesh::coord", "lm_mesh_coord", {"len": {"coord": "self.ndim()?"}},
     "This rank's coordinate (an error on a non-member)."),
    ("Mesh::rank", "lm_mesh_rank", {}, "This rank's row-major index in the mesh (an error on a non-member)."),
    ("Mesh::rank_at", "lm_mesh_rank_at", {"rules": {"coord": "mesh.ndim"}},
     "The parent-communicator rank at a coordinate."),
    ("Mesh::dim_name", "lm_mesh_dim_name", {}, "The dim's name (\"\" when unnamed)."),
    ("Mesh::dim_comm", "lm_mesh_dim_comm", {},
     "The communicator along `dim` (owned by the mesh; do not free it)."),
    ("Mesh::comm", "lm_mesh_comm", {}, "The communicator of all mesh ranks (owned by the mesh)."),
    ("Mesh::dim_index", "lm_mesh_dim_index", {"ret": "usize", "out": "dim as usize"},
     "Index of the dim called `name`."),
    ("Mesh::set_device_config", "lm_mesh_set_device_config",
     {"unsafe": True, "types": {"config": "Option<&sys::lm_device_config_t>"},
      "conv": {"config": "config.map_or(ptr::null(), |c| c as *const _)"}},
     "`lm_mesh_set_device_config`: this rank's stream and allocator for the mesh (`None`: the\n"
     "defaults). Local.\n\n# Safety\nThe stream and the allocator callbacks must be valid for as long as the mesh "
     "uses them."),
    ("Mesh::device_config", "lm_mesh_device_config", {},
     "`lm_mesh_device_config`: this rank's device options of the mesh."),
    ("Mesh::transport", "lm_mesh_transport", {},
     "`lm_mesh_transport`: how the mesh moves tensors of a device type (`sys::kDLCPU`, ...)."),
    ("ManagedTensor::alloc", "lm_tensor_alloc", {},
     "`lm_tensor_alloc`: a zero-filled compact tensor from localmap's pool (`shape` row-major)."),
    ("DistTensor::zeros", "lm_dist_tensor_zeros", {}, "`lm_dist_tensor_zeros` (local)."),
    ("DistTensor::from_scalapack_raw", "lm_dist_tensor_from_scalapack", {"unsafe": True},
     "`lm_dist_tensor_from_scalapack` on raw memory, with `flags` (`sys::LM_FROM_LOCAL_BORROW`\n"
     "wraps the array without a copy; with `LLD_ > LOCr` host rows are padded, and\n"
     "[`local`](Self::local) refuses the strided view: read the array itself).\n\n# Safety\n"
     "`data` must hold the local array the descriptor describes; with BORROW it must outlive the\n"
     "tensor and every view of it."),
    ("DistTensor::to_scalapack", "lm_dist_tensor_to_scalapack", {},
     "`lm_dist_tensor_to_scalapack`: this tensor's layout as a ScaLAPACK descriptor with\n"
     "context `ctxt` (the `[N, M]` tensor read as the column-major M x N matrix)."),
    ("DistTensor::mesh", "lm_dist_tensor_mesh", {"ret": "MeshRef<'_>", "out": "Mesh::borrowed(mesh)"},
     "The tensor's mesh (borrowed: it lives as long as the tensor)."),
    ("DistTensor::ndim", "lm_dist_tensor_ndim", {}, "The tensor's number of dims."),
    ("DistTensor::dtype", "lm_dist_tensor_dtype", {}, "The element type."),
    ("DistTensor::device", "lm_dist_tensor_device", {}, "The device the shards live on."),
    ("DistTensor::placements", "lm_dist_tensor_placements", {"len": {"placements": "self.mesh()?.ndim()?"}},
     "One placement per mesh dim."),
    ("DistTensor::global_shape", "lm_dist_tensor_global_shape", {"len": {"shape": "self.ndim()?"}},
     "The tensor's global shape."),
    ("DistTensor::local_shape", "lm_dist_tensor_local_shape", {"len": {"shape": "self.ndim()?"}},
     "The shape of this rank's shard."),
    ("DistTensor::local_offset", "lm_dist_tensor_local_offset", {"len": {"offset": "self.ndim()?"}},
     "Global index of the shard's first element, per dim."),
    ("DistTensor::local_view", "lm_dist_tensor_local", {},
     "`lm_dist_tensor_local`: the raw DLTensor view of the local shard (valid while `self` lives)."),
    ("DistTensor::to_dlpack", "lm_dist_tensor_to_dlpack", {},
     "`lm_dist_tensor_to_dlpack`: the local shard as a managed tensor holding a reference on `self`."),
    ("DistTensor::reshard", "lm_dist_tensor_reshard", {"self": "src"},
     "`lm_dist_tensor_reshard` onto `dst_mesh` (`None`: this tensor's mesh). Collective over both."),
    ("DistTensor::transpose", "lm_dist_tensor_transpose", {"self": "src"},
     "`lm_dist_tensor_transpose`: the dims permuted as `numpy.transpose(x, perm)` (a matrix:\n"
     "`&[1, 0]`), laid out with `placements` (in the result's dims) on `dst_mesh` (`None`: this\n"
     "tensor's mesh). Host or device tensors. Collective over both meshes."),
    ("DistTensor::transpose_into", "lm_dist_tensor_transpose_into",
     {"self": "src", "types": {"dst": "&mut DistTensor"}},
     "`lm_dist_tensor_transpose_into`: the dims permuted as `numpy.transpose(x, perm)`, written\n"
     "into `dst` (global shape this tensor's permuted, the same dtype; its own mesh and\n"
     "placements; a padded borrow keeps its padding), on self's device. Collective over both\n"
     "meshes."),
    ("ReshardPlan::new", "lm_reshard_plan_create", {"types": {"dst_mesh": "&Mesh"}},
     "`lm_reshard_plan_create` (local)."),
    ("ReshardPlan::alloc_target", "lm_reshard_plan_alloc_target", {},
     "`lm_reshard_plan_alloc_target`: a zero tensor laid out as the target."),
    ("ReshardPlan::execute", "lm_reshard_plan_execute", {"types": {"dst": "&mut DistTensor"}},
     "`lm_reshard_plan_execute`: src -> dst (overwritten). Collective over both meshes."),
    ("ReshardPlan::adjoint", "lm_reshard_plan_adjoint", {},
     "The backward plan (`lm_reshard_plan_adjoint`): gradients from the target mesh, in\n"
     "`placements_adjoint(target)`, to the source mesh, in `placements_adjoint(source)`. Local."),
    ("ReshardPlan::describe", "lm_reshard_plan_describe", {}, "A one-line description of the plan's steps."),
    ("ReshardPlan::info", "lm_reshard_plan_info", ALL_RANKS,
     "What an execution moves (`lm_reshard_plan_info`): this rank's counts (local), or with\n"
     "`all_ranks` every rank's summed (collective over both meshes)."),
    ("ReshardPlan::start", "lm_reshard_plan_start", {"life": "'a", "types": {"dst": "&mut DistTensor"}},
     "`lm_reshard_plan_start`: nonblocking; `src` and `dst` stay borrowed until the request ends."),
    ("Request::test", "lm_request_test", {}, "`lm_request_test`: true once complete."),
    ("Request::wait", "lm_request_wait", {"receiver": "mut self"}, "`lm_request_wait`."),
    ("reshard_estimate", "lm_reshard_estimate", ALL_RANKS,
     "What a reshard would move, without building a plan (`lm_reshard_estimate`): what\n"
     "[`ReshardPlan::info`] gives for `ReshardPlan::new(src_mesh, src_placements, dst_mesh\n"
     "(None: src_mesh), dst_placements, global_shape, dtype)`. Local, or with `all_ranks` every\n"
     "rank's summed (collective over both meshes). For layout searches: no handle, no buffer."),
    ("placements_adjoint", "lm_placements_adjoint",
     {"len": {"out": "placements.len()"}, "out": "placements_of(out)?"},
     "`lm_placements_adjoint`: the placements of a gradient (PyTorch DTensor's convention):\n"
     "`Partial(Sum)` becomes `Replicate`, Shard and Replicate are kept; avg/max/min/prod are refused."),
    ("ReshardGroup::len", "lm_reshard_group_size", {"null": ("buckets",)},
     "The number of entries (`lm_reshard_group_size`)."),
    ("ReshardGroup::buckets", "lm_reshard_group_size", {"null": ("n",)},
     "The number of buckets the entries were dealt into (0 for no entries)."),
    ("ReshardGroup::alloc_targets", "lm_reshard_group_alloc_targets", {"len": {"out": "self.len()?"}},
     "`lm_reshard_group_alloc_targets`: zero tensors laid out as the entries' targets (local)."),
    ("LocalMapRecord::placements", "lm_local_map_record_placements",
     {"len": {"placements": "32"}, "ret": "Vec<Placement>",
      "out": "placements_of(placements[..n as usize].to_vec())?"},
     "`lm_local_map_record_placements`: the recorded placements `which` of input or output `index`."),
    ("LocalMapRecord::input_grad", "lm_local_map_record_input_grad", {},
     "`lm_local_map_record_input_grad`: `grad` moved to input `index`'s own mesh and the adjoint\n"
     "of its own placements (collective)."),
]


def camel(s):
    return "".join(w.capitalize() for w in s.lower().split("_"))


def doc(text, indent):
    return [(indent + "/// " + ln).rstrip() for ln in text.split("\n")]


def enum(name, variants, raw, other, other_doc, doc_text):
    """A Rust enum over C values: variants (Rust name, sys value, doc lines); `raw` its C type."""
    out = doc(doc_text, "") + ["#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]", "pub enum %s {" % name]
    for v, _, d in variants:
        out += ["    " + ln for ln in d] + ["    %s," % v]
    if other:
        out += doc(other_doc, "    ") + ["    Other(%s)," % raw]
    fr = name if other else "Option<%s>" % name
    out += ["}", "", "impl %s {" % name, "    /// The C value.",
            "    pub fn raw(self) -> %s {" % raw, "        match self {"]
    out += ["            %s::%s => %s," % (name, v, c) for v, c, _ in variants]
    out += ["            %s::Other(c) => c," % name] if other else []
    out += ["        }", "    }",
            "    /// The variant of a C value%s." % ("" if other else " (None: one it has no variant for)"),
            "    pub fn from_raw(c: %s) -> %s {" % (raw, fr)]
    if other:
        out += ["        match c {"] + ["            sys::%s => %s::%s," % (c.split("::")[-1], name, v)
                                       for v, c, _ in variants]
        out += ["            c => %s::Other(c)," % name, "        }"]
    else:
        out += ["        use %s::*;" % name,
                "        [%s].into_iter().find(|v| v.raw() == c)" % ", ".join(v for v, _, _ in variants)]
    return out + ["    }", "}"]


def payload_enum(name, variants, raw, payload, doc_text):
    """A Rust enum over C values of which one variant carries an array (PAYLOADS)."""
    member, elem = payload
    out = doc(doc_text, "") + ["#[derive(Debug, Clone, PartialEq, Eq)]", "pub enum %s {" % name]
    for v, c, d in variants:
        carries = c == "sys::" + member
        out += ["    " + ln for ln in d] + ["    %s%s," % (v, "(Vec<%s>)" % elem if carries else "")]
    out += ["}", "", "impl %s {" % name,
            "    /// The C value, and the array that travels with it (NULL but for one variant).",
            "    pub(crate) fn raw(&self) -> (%s, *const %s) {" % (raw, elem), "        match self {"]
    for v, c, _ in variants:
        carries = c == "sys::" + member
        out.append("            %s::%s => (%s, %s)," % (name, v + "(x)" if carries else v, c,
                                                      "x.as_ptr()" if carries else "ptr::null()"))
    return out + ["        }", "    }", "}"]


def enums():
    out, decls = [], types.declarations()
    for kind, name, hdoc, m in decls:
        if kind == "ename" and name in ENUMS:
            rust, prefix, doc_text, other_doc = ENUMS[name]
            doc_text = doc_text or "%s (`%s`)." % (" ".join(hdoc.split()).rstrip("."), name)
            vs = [(camel(re.sub("^" + prefix, "", n)), "sys::" + n, types.doc_lines(d) if d else [])
                  for n, _, d in types.members(m.group("ebody"), name)]
            vs = [(v, c, doc(VARIANT_DOCS[rust + "::" + v], "") if rust + "::" + v in VARIANT_DOCS else d)
                  for v, c, d in vs]
            if name in PAYLOADS:
                out += [""] + payload_enum(rust, vs, "sys::" + name, PAYLOADS[name], doc_text)
                continue
            out += [""] + enum(rust, vs, "sys::" + name, other_doc is not None, other_doc, doc_text)
    vs = []
    for kind, name, d, m in decls:
        call = re.fullmatch(r"LM_DTYPE\((\w+),\s*(\d+)\)", m.group("body").strip()) if kind == "dname" else None
        if call:
            v = DTYPE_PREFIX[call.group(1)] + call.group(2) if call.group(1) in DTYPE_PREFIX else "Bool"
            vs.append((v, "sys::" + name, types.doc_lines(d) if d else []))
    return out + [""] + enum("DType", vs, "sys::DLDataType", False, None, "The element types localmap supports.")


def handles(funcs):
    """Each handle type's `Drop` (local), `Clone` (a refcounted one's), raw handle in and out; the
    `Drop` of each owned id."""
    out, by_name = [], {f.name: f for f in funcs}
    for h, spec in HANDLES.items():
        rust, c = spec["rust"], h[:-2]  # lm_mesh
        raw_t = "*mut sys::" + h[:-1] if h.endswith("*") else "sys::" + h
        destroy = spec.get("destroy", c + "_destroy")
        if destroy and by_name[destroy].args[0].direction != "inout":
            raise SystemExit("api_gen_rust_safe: %s must take its handle inout (it sets it NULL)" % destroy)
        if destroy:
            out += ["", "impl Drop for %s%s {" % (rust, spec.get("generics", "")), "    fn drop(&mut self) {",
                    "        unsafe { sys::%s(&mut self.raw) };" % destroy, "    }", "}"]
        if spec.get("retain"):
            out += ["", "impl Clone for %s {" % rust,
                    "    /// Another handle of the same object (`%s_retain`)." % c,
                    "    fn clone(&self) -> %s {" % rust,
                    "        let st = unsafe { sys::%s_retain(self.raw) };" % c,
                    '        assert_eq!(st, sys::LM_SUCCESS, "%s_retain: {}", last_error_message());' % c,
                    "        %s { raw: self.raw }" % rust, "    }", "}"]
        if spec.get("raw", True) is True:
            out += ["", "impl %s {" % rust, "    /// The raw handle (still owned by `self`).",
                    "    pub fn as_raw(&self) -> %s {" % raw_t, "        self.raw", "    }"]
        elif spec.get("raw") == "in-out":
            out += ["", "impl %s {" % rust]
        if spec.get("raw", True):
            out += ["    /// Takes ownership of a raw handle (of one reference, for a refcounted one): `Drop`",
                    "    /// %s." % ("destroys it" if destroy else "calls its deleter"), "    ///",
                    "    /// # Safety", "    /// `raw` must be a live handle whose ownership the caller hands over.",
                    "    pub unsafe fn from_raw(raw: %s) -> %s {" % (raw_t, rust),
                    "        %s { raw }" % rust,
                    "    }",
                    "    /// Gives up ownership: the caller %s (or hands it to C, which does)."
                    % ("destroys the handle" if destroy else "calls its deleter once"),
                    "    pub fn into_raw(self) -> %s {" % raw_t, "        let raw = self.raw;",
                    "        std::mem::forget(self);", "        raw", "    }", "}"]
    for rust, (field, destroy, doc_text) in IDS.items():
        if [a.direction for a in by_name[destroy].args] != ["in"]:
            raise SystemExit("api_gen_rust_safe: %s must take the id alone, by value" % destroy)
        out += ["", "impl Drop for %s {" % rust, "    fn drop(&mut self) {",
                "        unsafe { sys::%s(self.%s) };" % (destroy, field), "    }", "}",
                "", "impl %s {" % rust] + doc(doc_text, "    ") + [
                "    pub fn %s(&self) -> %s {" % (field, in_type(by_name[destroy].args[0], {})),
                "        self.%s" % field, "    }", "}"]
    return out


def flag_methods():
    out = []
    for fn, (rust, prefix) in FLAG_METHODS.items():
        out += ["", "impl %s {" % rust]
        for kind, name, d, _ in types.declarations():
            head = "%s flag: " % fn
            text = " ".join((d or "").split())
            if kind != "dname" or not name.startswith(prefix) or not text.startswith(head):
                continue
            text = text[len(head):].rstrip(".")
            for c, r in FLAG_WORDS.items():
                text = re.sub(r"\b%s\b" % c, r, text)
            text = "`%s`: %s%s." % (name, text, ": " + FLAG_NOTES[name] if name in FLAG_NOTES else "")
            out += (["    /// " + ln for ln in textwrap.wrap(text, WIDTH - 10, break_on_hyphens=False)] +
                    ["    pub fn %s(self) -> Self {" % name[len(prefix):].lower(),
                     "        self.flags(sys::%s)" % name, "    }"])
        out.append("}")
    return out


def in_type(a, opts):
    key = a.base + ("[]" if a.dims and not a.dims[0].isdigit() else "[%s]" % a.dims[0] if a.dims else "")
    if a.name in opts.get("types", {}):
        return opts["types"][a.name]
    t = IN_TYPES.get((a.base, a.name)) or IN_TYPES.get(key)
    if t is None:
        raise SystemExit("%s: api_gen_rust_safe: no Rust type for input %s %s" % (a.where, a.base, a.name))
    return "Option<%s>" % t if a.null_ok and a.base in HANDLES else t


def out_type(a):
    key = a.base + ("[]" if a.dims and not a.dims[0].isdigit() else "[%s]" % a.dims[0] if a.dims else "")
    t = OUT_TYPES.get((a.base, a.name)) or OUT_TYPES.get(key)
    if t is None:
        raise SystemExit("%s: api_gen_rust_safe: no Rust type for output %s %s" % (a.where, a.base, a.name))
    return t


def receiver(f, owner, opts):
    """(the argument that is `self`, the receiver, how C takes it) of a method of `owner`: its
    handle (`&self`, `&mut self` for an inout one) or its enum (`self`)."""
    for a in f.args:
        if a.name == opts.get("self") or (a.direction != "out" and not opts.get("self") and owner and
                                          HANDLES.get(a.base, {}).get("rust") == owner):
            rcv, c = ("&mut self", "&mut self.raw") if a.direction == "inout" else ("&self", "self.raw")
            return a.name, opts.get("receiver", rcv), c
        if owner and ENUMS.get(a.base, ("",))[0] == owner:
            return a.name, "self", "self.raw()"
    return None, None, None


def infallible(f, name, opts, params, lets, cargs, ind):
    """The signature and body of a wrapper of a function that returns no status: its value (an
    int, a string the library keeps: copied, or `&'static str` where `ret` says so, or nothing)."""
    ret = {"int": "i32", "const char *": "String", "void": None}[f.ret]
    ret = opts.get("ret", ret)
    sig = wrap("pub fn %s(" % name, params, ")%s {" % (" -> " + ret if ret else ""), ind)
    c = "sys::%s(%s)" % (f.name, ", ".join(cargs))
    if f.ret != "const char *":
        return sig, lets + ["unsafe { %s }" % c]
    text = ".to_str().unwrap_or(\"?\")" if ret == "&'static str" else ".to_string_lossy().into_owned()"
    return sig, lets + ["// SAFETY: the library returns a NUL-terminated string, never NULL; read at once.",
                        "unsafe { CStr::from_ptr(%s) }%s" % (c, text)]


def wrapper(rust, f, opts, doc_text):
    """The lines of one wrapper (a method when `rust` is Type::name)."""
    owner, name = rust.split("::") if "::" in rust else (None, rust)
    names = opts.get("names", {})
    self_arg, rcv, self_c = receiver(f, owner, opts)
    status = f.ret == "lm_status_t"
    # query: (array, count): a first call with the array NULL learns its length.
    qarr, qcount = opts.get("query", (None, None))
    lens = {}  # length argument -> the array it counts (an input array where two share it)
    for a in f.args:
        if a.dims and re.fullmatch(r"[a-z_]+", a.dims[0]) and (a.dims[0] not in lens or a.direction == "in"):
            lens[a.dims[0]] = a
    params, inits, lets, cargs, qargs, outs, checks, is_buf = [], [], [], [], [], [], [], False
    after = []  # what follows the query call: the array's allocation and its length
    for a in f.args:
        x = names.get(a.name, a.name)
        if a.name == self_arg:
            cargs.append(self_c)
        elif a.name in opts.get("null", ()) or (a.null_ok and a.base.endswith("_t*")):
            cargs.append("ptr::null_mut()" if a.direction != "in" else "ptr::null()")
        elif a.name in lens and lens[a.name].base == "char":
            cargs.append(a.name)  # the buffer's size, passed by read_buf
        elif a.name in lens:  # the length of an array argument: the slice's
            arr = names.get(lens[a.name].name, lens[a.name].name)
            n = "%s.len() as i64" % arr if a.base == "int64_t" else 'to_int(%s.len(), "%s")?' % (arr, arr)
            (after if arr == qarr else lets).append("let %s = %s;" % (a.name, n))
            cargs.append(a.name)
            qargs.append("0" if arr == qarr else a.name)
            continue
        elif a.direction == "in":
            t = in_type(a, opts)
            params.append("%s: %s" % (x, t))
            conv = re.sub(r"\bx\b", x, opts.get("conv", {}).get(a.name) or IN_CONV.get(t, "x"))
            if t == "&str" and not status:  # no error to return: a NUL byte is escaped
                conv = "CString::new(%s.replace('\\0', \"\\\\0\")).unwrap_or_default()" % x
            if conv.endswith("?") or t in ("&[Placement]", "&str"):
                lets.append("let %s = %s;" % (x, conv))
                conv = x + ".as_ptr()" if t in ("&[Placement]", "&str") else x
            cargs.append(conv)
            if a.dims and "." in a.dims[0]:  # a rule that reads a handle: checked by lengths()
                checks.append((a.name, 'Of::Slice("%s", %s.len())' % (x, x)))
        elif a.base == "char":
            is_buf = True
            cargs.append(a.name)
        else:
            t, init, res = out_type(a)
            n = "%s as usize" % qcount if a.name == qarr else opts.get("len", {}).get(a.name, "")
            init = "let mut %s = %s;" % (a.name, init.replace("{len}", n))
            (after if a.name == qarr else inits).append(init)
            cargs.append("%s.as_mut_ptr()" % a.name if a.dims else "&mut %s" % a.name)
            qargs.append("ptr::null_mut()" if a.name == qarr else cargs[-1])
            outs.append((t, re.sub(r"\bx\b", a.name, res)))
            continue
        qargs.append(cargs[-1])
    heads = {alt.split(".")[0] for a in f.args if a.dims for alt in a.dims[0].split("|") if "." in alt}
    for a in f.args if checks else []:  # the handles those rules read
        x = "self" if a.name == self_arg else names.get(a.name, a.name)
        if a.name in heads and a.base == "lm_dist_tensor_t":
            checks.append((a.name, "Of::Tensor(%s)" % x))
        elif a.name in heads and a.base == "lm_mesh_t":
            opt = a.name != self_arg and in_type(a, opts).startswith("Option<")
            checks.append((a.name, "Of::Mesh(%s)" % (x if opt else "Some(%s)" % x)))
    first = []  # the checks of `rules`, before any conversion
    for arr, rule in opts.get("rules", {}).items():  # `X.ndim` of handle argument X
        a = next(a for a in f.args
                 if a.name == rule.split(".")[0] and a.base in ("lm_mesh_t", "lm_dist_tensor_t"))
        if not rule.endswith(".ndim") or rule.count(".") != 1:
            raise SystemExit("%s: api_gen_rust_safe: a rule it cannot check: %s" % (f.where, rule))
        x, of = "self" if a.name == self_arg else names.get(a.name, a.name), a.base[3:-2].split("_")[-1]
        first += ["let ndim = %s.ndim()?;" % x, "if %s.len() != ndim {" % arr,
                  '    return arg_error(wrong_length(M, "%s", "%s", %s.len(), Some("%s"), ndim as i64));'
                  % (names.get(arr, arr), arr, names.get(arr, arr), of), "}"]
    ind = "    " if owner else ""
    lets = inits + first + lets
    if checks:
        lets[:0] = wrap('lengths(M, "%s", &[' % f.name, ['("%s", %s)' % c for c in checks], "])?;", ind + "    ")
    life = opts.get("life")  # a lifetime the result borrows self and the references for
    if life:
        name += "<%s>" % life
        rcv = rcv.replace("&", "&%s " % life)
        params = [re.sub(r": (Option<)?&", r": \1&%s " % life, p) for p in params]
    params = ([rcv] if rcv else []) + params
    if not status:
        sig, body = infallible(f, name, opts, params, lets, cargs, ind)
        return [""] + doc(doc_text, ind) + [ind + ln for ln in sig] + [ind + "    " + ln for ln in body] + [ind + "}"]
    if is_buf:
        ret = "String"
    else:
        ret = opts.get("ret") or (outs[0][0] if len(outs) == 1 else "(%s)" % ", ".join(t for t, _ in outs))
    ret = ret.replace("'_", life) if life else ret
    value = opts.get("out") or (outs[0][1] if len(outs) == 1 else "(%s)" % ", ".join(v for _, v in outs))
    head = "pub " + ("unsafe " if opts.get("unsafe") else "")
    sig = wrap("%sfn %s(" % (head, name), params, ") -> Result<%s> {" % ret, ind)
    body = ['const M: &str = "%s";' % rust] + lets
    c = "sys::%s(" % f.name

    def call(args):
        return wrap("call(M, %s" % (c if opts.get("unsafe") else "unsafe { " + c), args,
                    ")" + ("" if opts.get("unsafe") else " }") + ")?;", ind + "    ")
    if is_buf:
        body += wrap("read_buf(M, |buf, size| unsafe { " + c, cargs, ") })", ind + "    ")
    else:
        body += (call(qargs) + after if qarr else []) + call(cargs)
        body.append(value[:-1] if value.endswith("?") else "Ok(%s)" % value)
    return [""] + doc(doc_text, ind) + [ind + ln for ln in sig] + [ind + "    " + ln for ln in body] + [ind + "}"]


def wrap(head, items, tail, ind):
    """head + items joined + tail, as one line, or one item a line where that is too long."""
    one = head + ", ".join(items) + tail
    if len(ind + one) <= WIDTH or not items:
        return [one]
    return [head] + ["    %s," % it for it in items] + [tail.lstrip()]


def wrappers(funcs):
    by_name = {f.name: f for f in funcs}
    out, owner = [], None
    for rust, cfn, opts, doc_text in WRAPPERS:
        o = rust.split("::")[0] if "::" in rust else None
        if o != owner:
            out += ["}"] if owner else []
            generics = next((h.get("generics", "") for h in HANDLES.values() if h["rust"] == o), "")
            out += ["", "impl %s%s {" % (o, generics)] if o else []
            owner = o
        lines = wrapper(rust, by_name[cfn], opts, doc_text)
        out += lines[1:] if out and out[-1].endswith("{") else lines
    return out + (["}"] if owner else [])


def generate(funcs):
    head = ["// SPDX-License-Identifier: BSD-3-Clause",
            "// Generated by tools/api.py (tools/api_gen_rust_safe.py) from include/localmap.h and",
            "// api/localmap.api: do not edit (make api-generate). The rest of the crate is lib.rs.",
            "//! The safe API's enums of C values, handle destructors and raw conversions, one-call",
            "//! wrappers and builder methods of flags.",
            "",
            "use crate::*;",
            "use std::os::raw::{c_int, c_void};",
            "use std::ptr;"]
    return "\n".join(head + enums() + handles(funcs) + wrappers(funcs) + flag_methods()) + "\n"
