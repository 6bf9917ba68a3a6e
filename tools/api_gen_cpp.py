# SPDX-License-Identifier: BSD-3-Clause
"""C++'s generated layer (tools/api.py): include/localmap_api.hpp, one checked call per C function
that returns a status (destroys aside: the RAII types call those directly and never throw), in
namespace localmap::detail, named as the C function without `lm_`. localmap.hpp includes it and
builds its classes on it.

Each call takes the C arguments, with:
  - a 1-D `in` array as a const std::vector (a std::array for a fixed length), its length
    argument dropped when the array gives it, its length rule checked before the C call (an empty
    vector for a null-ok array is passed as NULL and not checked); a 2-D one as a std::vector of
    row pointers, its outer length checked;
  - a `string` as a const std::string &;
  - the `out` arguments returned: one as itself, several as a std::tuple; an `out` array as a
    std::vector (sized by its length argument, kept as a parameter unless an array gives it), a
    std::array (a number) or a std::string (char); `inout` arguments stay pointers.
A failed length rule throws localmap::error (LM_ERR_INVALID_ARGUMENT) naming the C++ method (a
last parameter `who`, by default the one cxx_method names), the argument, its C++ type and the
length wanted; a failed C call throws its status and message. Before the calls, the ndim_of and
mesh_ndim_of overloads of the handles that the length rules use.

Then what localmap.hpp would otherwise transcribe by hand: the functions and methods of METHODS,
each one C call whose arguments and result the generator converts by their C types (the methods
of a class as a mixin `<class>_methods<D>` the class derives from), and the placement values of
PLACEMENTS, whose fields it reads from the header's lm_placement_t."""
import re
import sys

api = sys.modules["api"]  # tools/api.py, which loads this module
OUTPUT = "include/localmap_api.hpp"
WIDTH = 100
# The C++ type a binding user passes for an array of these C elements (else std::vector<C type>;
# localmap::placements for lm_placement_t).
CXX_ELEMENT = {"lm_dist_tensor_t": "localmap::dist_tensor"}
# The C++ class over each C handle type.
CLASSES = {"lm_mesh_t": "mesh", "lm_dist_tensor_t": "dist_tensor", "lm_reshard_plan_t": "reshard_plan",
           "lm_reshard_group_t": "reshard_group", "lm_local_map_record_t": "local_map_record"}
# The methods and functions of localmap.hpp that are one C call each (the rest of that file is
# written by hand), M(head, C function, args, result, doc). head: "class::name(params)" (a const
# method on the object's handle, the first C argument of the class's handle type that no
# parameter or args entry takes), "class::static name(params)", or "name(params)" (a function of
# namespace localmap). A parameter is `name` or `name = default`, its C++ type given by the C
# argument of that name (or the one args renames to it: a handle as a const reference to its
# class, a const pointer where the argument is null-ok, an array of handles as a std::vector of
# the class, an lm_placement_t array as placements, an int64_t one as shape, another array or a
# scalar as the checked call takes it), or written before the name where no C argument gives it.
# args: {C argument: C++ expression} for the arguments no parameter of the same name gives (a bare
# parameter name renames it). An argument nothing gives: a length argument of an output array
# holds one entry per dim of the object (placements: per mesh dim); an `inout` struct starts as
# its _INIT macro and is what the method returns. result: (C++ type, expression of `r`, what the
# checked call returns); by default a new handle as its class (adopted), an int answer to an
# `is_` question as a bool, else what the checked call returns. They become the mixins
# `<class>_methods<D>` that the classes derive from, and functions of namespace localmap.
def M(head, cname, args=None, result=None, doc=None):
    return head, cname, args or {}, result, doc


_CPU = "{kDLCPU, 0}"
METHODS = [
    M("mesh::ndim()", "lm_mesh_ndim", doc="lm_mesh_ndim."),
    M("mesh::extents()", "lm_mesh_shape", doc="lm_mesh_shape."),
    M("mesh::size()", "lm_mesh_size", doc="lm_mesh_size."),
    M("mesh::is_member()", "lm_mesh_is_member", doc="lm_mesh_is_member."),
    M("mesh::coord()", "lm_mesh_coord", doc="lm_mesh_coord (throws on a non-member)."),
    M("mesh::rank()", "lm_mesh_rank", doc="lm_mesh_rank (throws on a non-member)."),
    M("mesh::dim(name)", "lm_mesh_dim_index",
      doc="lm_mesh_dim_index: the index of the dim called name."),
    M("mesh::dim_comm(dim)", "lm_mesh_dim_comm",
      doc="lm_mesh_dim_comm: the per-dim communicator as a Fortran handle (MPI_Comm_f2c to use it "
          "from C/C++)."),
    M("mesh::static grid(parent_comm_f, myrow, mycol)", "lm_mesh_create_grid",
      {"parent_comm": "parent_comm_f", "config": "nullptr"},
      doc="lm_mesh_create_grid: the 2-D mesh of a process grid (BLACS's, say) from this rank's "
          "grid coordinate (-1, -1 outside the grid). Collective over the parent."),
    M("dist_tensor::ndim()", "lm_dist_tensor_ndim", doc="lm_dist_tensor_ndim."),
    M("dist_tensor::dtype()", "lm_dist_tensor_dtype", doc="lm_dist_tensor_dtype."),
    M("dist_tensor::global_shape()", "lm_dist_tensor_global_shape",
      doc="lm_dist_tensor_global_shape."),
    M("dist_tensor::local_shape()", "lm_dist_tensor_local_shape",
      doc="lm_dist_tensor_local_shape."),
    M("dist_tensor::local_offset()", "lm_dist_tensor_local_offset",
      doc="lm_dist_tensor_local_offset."),
    M("dist_tensor::placement()", "lm_dist_tensor_placements",
      doc="lm_dist_tensor_placements: one per mesh dim."),
    M("dist_tensor::local()", "lm_dist_tensor_local",
      doc="lm_dist_tensor_local: a view of the local shard (valid while this tensor lives)."),
    M("dist_tensor::to_scalapack(ctxt)", "lm_dist_tensor_to_scalapack",
      doc="lm_dist_tensor_to_scalapack: this tensor's layout as a descriptor with context ctxt."),
    M("dist_tensor::static zeros(m, global_shape, dtype, p, device = %s)" % _CPU,
      "lm_dist_tensor_zeros", {"mesh": "m", "placements": "p"},
      doc="lm_dist_tensor_zeros (local)."),
    M("dist_tensor::static from_global(m, global, p, root = -1)", "lm_dist_tensor_from_global",
      {"mesh": "m", "placements": "p"},
      doc="lm_dist_tensor_from_global. root < 0: every rank passes the full tensor; root >= 0: "
          "only that mesh rank (others nullptr)."),
    M("dist_tensor::static from_local(m, const DLTensor &local, p, mode = LM_SHAPE_ALLGATHER, "
      "global_shape = {}, flags = LM_FROM_LOCAL_COPY)", "lm_dist_tensor_from_local",
      {"mesh": "m", "local": "&local", "placements": "p", "shape_mode": "mode",
       "global_shape": "mode == LM_SHAPE_GIVEN ? global_shape : shape{}"},  # else not read
      doc="lm_dist_tensor_from_local; global_shape is read only with LM_SHAPE_GIVEN."),
    M("dist_tensor::static from_scalapack(m, desc, data, dtype, device = %s, "
      "flags = LM_FROM_LOCAL_BORROW)" % _CPU, "lm_dist_tensor_from_scalapack", {"mesh": "m"},
      doc="lm_dist_tensor_from_scalapack: the tensor [N, M] over the local array `data` of the "
          "matrix that `desc` (a scalapack_desc_t) describes (borrowed by default: `data` must "
          "outlive the tensor)."),
    M("dist_tensor::reshard(p, dst_mesh = nullptr)", "lm_dist_tensor_reshard",
      {"placements": "p"},
      doc="lm_dist_tensor_reshard. Collective; dst_mesh nullptr: the same mesh."),
    M("dist_tensor::transpose(perm, p, dst_mesh = nullptr)", "lm_dist_tensor_transpose",
      {"placements": "p"},
      doc="lm_dist_tensor_transpose: the dims permuted (numpy.transpose's perm, ndim entries), "
          "laid out with p (in the result's dims). Collective; dst_mesh nullptr: the same mesh. "
          "Host or device."),
    M("dist_tensor::transpose_into(dist_tensor &dst, perm)", "lm_dist_tensor_transpose_into",
      doc="lm_dist_tensor_transpose_into: the dims permuted into dst (global shape this one's "
          "permuted, the same dtype; its mesh and placements, its shard overwritten; a padded "
          "borrow keeps its padding). Collective over both meshes. dst on this tensor's device."),
    M("dist_tensor::gather(dst, root = -1)", "lm_dist_tensor_gather",
      doc="lm_dist_tensor_gather. Collective; dst may be nullptr on ranks other than root "
          "(root >= 0)."),
    M("reshard_plan::alloc_target(device = %s)" % _CPU, "lm_reshard_plan_alloc_target",
      doc="lm_reshard_plan_alloc_target (local)."),
    M("reshard_plan::execute(src, dst)", "lm_reshard_plan_execute",
      doc="lm_reshard_plan_execute (collective over both meshes)."),
    M("reshard_plan::adjoint()", "lm_reshard_plan_adjoint",
      doc="lm_reshard_plan_adjoint: the backward plan (gradients, target mesh -> source mesh)."),
    M("reshard_plan::info(bool all_ranks = false)", "lm_reshard_plan_info",
      {"flags": "all_ranks ? LM_PLAN_INFO_ALL_RANKS : 0"},
      doc="lm_reshard_plan_info: this rank's counts (local), or every rank's summed (all_ranks: "
          "collective over both meshes)."),
    M("reshard_plan::describe()", "lm_reshard_plan_describe", {"size": "2048"},
      doc="lm_reshard_plan_describe."),
    M("reshard_group::size()", "lm_reshard_group_size", result=("size_t", "std::get<0>(r)"),
      doc="The number of entries (lm_reshard_group_size)."),
    M("reshard_group::buckets()", "lm_reshard_group_size", result=("int", "std::get<1>(r)"),
      doc="The number of buckets of an execution (lm_reshard_group_size)."),
    M("reshard_group::alloc_targets(device = %s)" % _CPU, "lm_reshard_group_alloc_targets",
      {"n": "static_cast<int>(size())"}, doc="lm_reshard_group_alloc_targets (local)."),
    M("reshard_group::execute(src, dst)", "lm_reshard_group_execute",
      doc="lm_reshard_group_execute (collective over both meshes)."),
    M("local_map_record::input_grad(index, grad)", "lm_local_map_record_input_grad",
      doc="lm_local_map_record_input_grad: grad moved to inputs[index]'s own layout "
          "(collective)."),
    M("placements_adjoint(p)", "lm_placements_adjoint", {"placements": "p"},
      doc="The placements of a gradient (lm_placements_adjoint): Partial(sum) -> Replicate, the "
          "others kept; Partial(avg/max/min/prod) throws."),
    M("to_string(p)", "lm_placements_format", {"placements": "p", "size": "512"},
      doc='The placements as text, e.g. "[S(0), R, P(sum)]" (lm_placements_format).'),
]
# The placement values of localmap.hpp, P(head, kind, fields, doc): a function of namespace
# localmap returning the lm_placement_t of that kind whose fields (the header's struct, in its
# order) take the parameters of their names, or the expressions of fields (a bare parameter name
# renames one); the others are 0. (ragged, which takes a localmap::extents, is written by hand
# after that class.)
def P(head, kind, fields=None, doc=None):
    return head, kind, fields or {}, doc


PLACEMENTS = [
    P("shard(int dim, int order = 0)", "LM_SHARD",
      doc="Shard(dim), with a co-shard order (see lm_placement_t)."),
    P("replicate()", "LM_REPLICATE", doc="Replicate."),
    P("partial(lm_reduce_op_t op = LM_REDUCE_SUM)", "LM_PARTIAL", {"reduce_op": "op"},
      doc="Partial(op)."),
    P("ragged_agreed(int dim, int order = 0)", "LM_RAGGED", {"extents": "LM_EXTENTS_AGREED"},
      doc="RaggedShard(dim) whose extents the ranks' local shapes give (LM_EXTENTS_AGREED): for "
          "dist_tensor::from_local with LM_SHAPE_ALLGATHER and local_map outputs without a given "
          "shape."),
    P("block_cyclic(int dim, int block, int src = 0)", "LM_BLOCK_CYCLIC", {"source": "src"},
      doc="BlockCyclic(dim, block, src): blocks of `block` elements of tensor dim `dim` dealt "
          "round-robin over the mesh dim from coordinate `src` (ScaLAPACK's MB/NB and RSRC/CSRC; "
          "see lm_placement_t)."),
]
# The C++ spelling of these types in the methods' signatures (the same types).
CXX_SPELLING = {"std::vector<lm_placement_t>": "placements", "std::vector<int64_t>": "shape"}
# What `X.ndim` counts, by X's C type (a `X.mesh.ndim` rule counts mesh dims).
NDIM_UNIT = {"lm_mesh_t": "mesh dim", "lm_dist_tensor_t": "tensor dim",
             "const DLTensor*": "dim of the local tensor", "DLManagedTensor*": "dim of the local tensor"}


def skipped(f):
    return api.compact(f.ret) != "lm_status_t" or f.name.endswith("_destroy")


def plain(rule):
    """The length argument a rule names (`n`), or None (`mesh.ndim`, `9`, `*`)."""
    return rule if re.fullmatch(r"[A-Za-z_]\w*", rule) else None


def definers(f):
    """length argument -> the first `in` array whose outer length it is (that array gives it)."""
    out = {}
    for a in f.args:
        if a.direction == "in" and a.dims and plain(a.dims[0]) and a.dims[0] not in out:
            out[a.dims[0]] = a
    return out


def expected(rule, f):
    """(C++ expression of the length a rule wants, what one element stands for)."""
    types = {a.name: api.compact(a.c_type()) for a in f.args}
    if "|" in rule:
        a, b = rule.split("|", 1)
        head = a.split(".")[0]
        ea, unit = expected(a, f)
        return "(%s ? %s : %s)" % (head, ea, expected(b, f)[0]), unit
    if re.fullmatch(r"\d+", rule):
        return rule, "entry"
    m = re.fullmatch(r"(\w+)\.mesh\.ndim", rule)
    if m:
        return "mesh_ndim_of(%s)" % m.group(1), "mesh dim"
    m = re.fullmatch(r"(\w+)\.ndim", rule)
    if m and types.get(m.group(1)) in NDIM_UNIT:
        return "ndim_of(%s)" % m.group(1), NDIM_UNIT[types[m.group(1)]]
    raise SystemExit("%s: api_gen_cpp cannot read the length rule %r" % (f.where, rule))


def in_array_type(a):
    """The C++ type of an `in` array parameter: std::array<T, N> for a number N, a std::vector of
    T, of row pointers for a 2-D one."""
    if len(a.dims) == 2:
        return "std::vector<const %s *>" % a.base
    if re.fullmatch(r"\d+", a.dims[0]):
        return "std::array<%s, %s>" % (a.base, a.dims[0])
    return "std::vector<%s>" % a.base


def decl(ctype, name):
    """`T *name` for a C type as one token (`DLManagedTensor*`) and a name."""
    m = re.fullmatch(r"(.*?)(\**)", api.compact(ctype))
    return "%s %s%s" % (m.group(1), m.group(2), name)


def cxx_array_type(a):
    """The C++ type a binding user passes for array a (a std::vector, of vectors for 2-D)."""
    t = CXX_ELEMENT.get(a.base, a.base)
    for _ in a.dims:
        t = "localmap::placements" if t == "lm_placement_t" else "std::vector<%s>" % t
    return t


def signature(f, defs):
    """The C++ parameters, the statements before the call and the C call's arguments."""
    params, pre, call, outs, checked = [], [], [], [], False
    for a in f.args:
        if a.direction == "in" and plain(a.name) in defs and not a.dims:
            d = defs[a.name]
            call.append("static_cast<%s>(%s.size())" % (a.base, d.name))
        elif a.base == "string" and a.direction == "in":
            params.append("const std::string &%s" % a.name)
            call.append("%s.c_str()" % a.name)
        elif a.direction == "in" and a.dims:
            params.append("const %s &%s" % (in_array_type(a), a.name))
            call.append("(%s.empty() ? nullptr : %s.data())" % (a.name, a.name) if a.null_ok
                        else "%s.data()" % a.name)
            pre.append(check_length(a, f, defs))
            checked = checked or bool(pre[-1])
        elif a.direction == "in" or a.direction == "inout":
            params.append(decl(a.c_type(), a.name))
            call.append(a.name)
        else:
            pre.append(["  " + declare_out(a, defs)])
            call.append("%s%s" % ("" if a.dims else "&", out_data(a)))
            outs.append(a)
    if checked:  # the C++ method that the refusals name (a caller may name another)
        params.append('const char *who = "%s"' % cxx_method(f.name))
    return params, pre, call, outs


def cxx_method(c_name):
    """The C++ method over a C function: lm_<class>_<verb> -> <class>::<verb> (`create`: the
    constructor <class>), lm_<name> -> <name> for a C++ class of localmap.hpp."""
    name = c_name[3:]
    for cls in sorted(CLASSES.values(), key=len, reverse=True):
        if name.startswith(cls + "_"):
            verb = name[len(cls) + 1:]
            return cls if verb == "create" else "%s::%s" % (cls, verb)
    return name


def check_length(a, f, defs):
    """The statement that checks a's length rule (its outer one for a 2-D array), if any."""
    rule = a.dims[0]
    if plain(rule):
        d = defs[rule]
        if d is a:
            return []
        want, unit = "%s.size()" % d.name, "element of %s" % d.name
    elif rule == "*" or re.fullmatch(r"\d+", rule):  # a std::array has its length
        return []
    else:
        want, unit = expected(rule, f)
    items = ["who", '"%s"' % a.name, '"%s"' % cxx_array_type(a), "%s.size()" % a.name, want,
             '"%s"' % unit]
    guard = "if (!%s.empty()) " % a.name if a.null_ok else ""
    return wrap("  " + guard + "expect_len(", items, ");")


def declare_out(a, defs):
    if not a.dims:
        return decl(a.base, a.name) + "{};"
    rule = a.dims[0]
    if len(a.dims) > 1:
        raise SystemExit("%s: api_gen_cpp: a 2-D out array" % a.where)
    if re.fullmatch(r"\d+", rule):
        return "std::array<%s, %s> %s{};" % (a.base, rule, a.name)
    if not plain(rule):
        raise SystemExit("%s: api_gen_cpp cannot size the out array by %r" % (a.where, rule))
    n = ("%s.size()" % defs[rule].name if rule in defs else
         "%s > 0 ? static_cast<size_t>(%s) : 0" % (rule, rule))
    if a.base == "char":
        return "std::string %s(%s, '\\0');" % (a.name, n)
    return "std::vector<%s> %s(%s);" % (a.base, a.name, n)


def out_data(a):
    if a.dims and a.null_ok:
        return "(%s.empty() ? nullptr : %s.data())" % (a.name, a.name)
    return "%s.data()" % a.name if a.dims else a.name


def out_type(a):
    if not a.dims:
        return decl(a.base, "").rstrip()
    if re.fullmatch(r"\d+", a.dims[0]):
        return "std::array<%s, %s>" % (a.base, a.dims[0])
    return "std::string" if a.base == "char" else "std::vector<%s>" % a.base


def result(outs):
    """(return type, return statement) of the outputs."""
    if not outs:
        return "void", []
    if len(outs) == 1:
        a = outs[0]
        fix = ["%s.resize(std::strlen(%s.c_str()));" % (a.name, a.name)] if a.base == "char" and a.dims else []
        return out_type(a), fix + ["return %s;" % a.name]
    types = ", ".join(out_type(a) for a in outs)
    return "std::tuple<%s>" % types, ["return {%s};" % ", ".join("std::move(%s)" % a.name if a.dims else a.name
                                                               for a in outs)]


def wrap(head, items, tail):
    """`head item, item, ...tail`, broken after commas at WIDTH (continuations under the first)."""
    one = head + ", ".join(items) + tail
    if len(one) <= WIDTH:
        return [one]
    lines, cur, pad = [], head, " " * len(head)
    if len(head) > WIDTH // 2:  # a long head: the items on lines of their own, indented by 4
        lines, cur = [head.rstrip()], " " * (len(head) - len(head.lstrip()) + 4)
        pad = cur
    for i, it in enumerate(items):
        piece = it + (", " if i + 1 < len(items) else tail)
        if cur.strip() and len(cur) + len(piece.rstrip()) > WIDTH and cur != head:
            lines.append(cur.rstrip())
            cur = pad
        cur += piece
    lines.append(cur)
    return lines


def function(f):
    defs = definers(f)
    params, pre, call, outs = signature(f, defs)
    ret, tail = result(outs)
    body = [line for s in pre for line in s]
    body += wrap("  check(%s(" % f.name, call, "));")
    body += ["  " + s for s in tail]
    return ["// %s" % f.name] + wrap("inline %s %s(" % (ret, f.name[3:]), params, ") {") + body + ["}"]


def split_params(text):
    """The parameters of a head, split at its top-level commas (not those of `{kDLCPU, 0}`)."""
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch in "({<":
            depth += 1
        elif ch in ")}>":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return [p for p in out + [cur.strip()] if p]


def param(text):
    """(C++ type or "", name, default or None) of one parameter of a head."""
    decl, _, default = text.partition("=")
    m = re.fullmatch(r"(.*?)(\w+)", decl.strip())
    return m.group(1).strip(), m.group(2), default.strip() or None


def doc_lines(text, indent):
    """A /// comment of text, wrapped at WIDTH."""
    lines = [indent + "///"]
    for w in text.split(" "):
        if len(lines[-1]) + 1 + len(w) > WIDTH:
            lines.append(indent + "///")
        lines[-1] += " " + w
    return lines


def spell(t):
    return CXX_SPELLING.get(t, t)


class Method:
    """One entry of METHODS: its C++ declaration and body, made from its C function."""

    def __init__(self, entry, by_name):
        head, cname, self.args, self.result, self.doc = entry
        m = re.fullmatch(r"(?:(\w+)::)?(static )?(\w+)\((.*)\)", head)
        if not m or cname not in by_name:
            raise SystemExit("api_gen_cpp: cannot read the method %r (%s)" % (head, cname))
        self.cls, self.static, self.name = m.group(1), bool(m.group(2)), m.group(3)
        self.f = by_name[cname]
        self.params = [param(p) for p in split_params(m.group(4))]
        self.uses = set()  # the classes other than its own it names
        c_args = {a.name: a for a in self.f.args}
        # the C argument each parameter stands for (its own name, or the one args renames to it)
        renamed = {v: k for k, v in self.args.items() if re.fullmatch(r"\w+", v)}
        self.c_of = {}
        for t, n, _ in self.params:
            c = c_args.get(renamed.get(n, n))
            if c is None and not t:
                raise SystemExit("%s: api_gen_cpp: %s: no C argument gives the type of %s"
                                 % (self.f.where, head, n))
            self.c_of[n] = c
        taken = set(self.args) | {c.name for c in self.c_of.values() if c}
        self.self_arg = None
        if self.cls and not self.static:
            handle = [h for h, c in CLASSES.items() if c == self.cls][0]
            self.self_arg = next(a.name for a in self.f.args
                                 if a.base == handle and a.direction == "in" and not a.dims
                                 and a.name not in taken)

    def cxx_class(self, c_type):
        """The wrapper class of a C handle type, as the mixin names it (D for its own)."""
        cls = CLASSES[c_type]
        if cls == self.cls:
            return "D"
        self.uses.add(cls)
        return cls

    def param_type(self, t, a):
        """The C++ type of a parameter: t as written (its own class as D), or from C argument a."""
        if t:
            t = t if t.endswith(("&", "*")) else t + " "
            return re.sub(r"\b%s\b" % self.cls, "D", t) if self.cls else t
        if a.base in CLASSES:
            cls = self.cxx_class(a.base)
            if a.dims:
                return "const std::vector<%s> &" % cls
            return "const %s *" % cls if a.null_ok else "const %s &" % cls
        if a.base == "string":
            return "const std::string &"
        if a.dims:
            return "const %s &" % spell(in_array_type(a))
        return decl(a.c_type(), "x")[:-1]

    def value(self, n):
        """The C++ expression of parameter n as its C argument takes it."""
        t, a = [(t, self.c_of[n]) for t, name, _ in self.params if name == n][0]
        if a is not None and a.base in CLASSES:
            if a.dims:
                return "detail::handles(%s)" % n
            pointer = "*" in (t or self.param_type("", a))
            return "(%s ? %s->get() : nullptr)" % (n, n) if pointer else "%s.get()" % n
        return n

    def ndim_arg(self, out):
        """The length of an output array of one entry per dim of the object."""
        if out.base == "lm_placement_t":
            return "static_cast<int>(detail::mesh_ndim_of(self()))"
        return "ndim()"

    def call(self):
        """(statements before the call, the checked call, its arguments, the struct it fills and
        the method returns or None, the C function's outputs)."""
        defs = definers(self.f)
        dparams, _, _, outs = signature(self.f, defs)
        length_of = {o.dims[0]: o for o in outs if o.dims and plain(o.dims[0])}
        names = [n for _, n, _ in self.params]
        before, values, filled = [], [], None
        for p in dparams:
            n = re.sub(r".*[ *&]", "", p.split("=")[0].strip())
            a = next((x for x in self.f.args if x.name == n), None)
            if n in self.args:
                v = self.args[n]
                values.append(self.value(v) if v in names else v)
            elif n in names:
                values.append(self.value(n))
            elif n == self.self_arg:
                values.append("self()")
            elif n == "who":
                who = "%s::%s" % (self.cls, self.name) if self.cls else self.name
                if who != cxx_method(self.f.name):
                    values.append('"%s"' % who)
            elif a is not None and a.direction == "inout" and a.base.startswith("lm_"):
                init = "LM_%s_INIT" % a.base[3:-2].upper()
                if not re.search(r"#\s*define\s+%s\b" % init, HEADER_TEXT[0]):
                    raise SystemExit("%s: api_gen_cpp: no %s for %s" % (a.where, init, a.name))
                before.append("%s result = %s;" % (a.base, init))
                values.append("&result")
                filled = a.base
            elif n in length_of:
                values.append(self.ndim_arg(length_of[n]))
            else:
                raise SystemExit("%s: api_gen_cpp: %s::%s: nothing gives the C argument %s"
                                 % (self.f.where, self.cls, self.name, n))
        return before, "detail::%s(%s)" % (self.f.name[3:], ", ".join(values)), values, filled, outs

    def lines(self, indent):
        before, call, values, filled, outs = self.call()
        fn = "detail::%s(" % self.f.name[3:]
        if self.result:
            ret, expr = self.result
            body = ["return %s;" % re.sub(r"\br\b", lambda _: call, expr)]
        elif filled:
            ret, body = filled, before + [call + ";", "return result;"]
        elif not outs:
            ret, body = "void", [call + ";"]
        elif len(outs) == 1 and outs[0].base in CLASSES:
            cls = self.cxx_class(outs[0].base)
            if outs[0].dims:  # each adopts its handle
                ret = "std::vector<%s>" % cls
                body = ["const auto h = %s;" % call, "return %s(h.begin(), h.end());" % ret]
            else:
                ret, body = cls, ["return %s(%s);" % (cls, call)]
        elif len(outs) == 1 and outs[0].name.startswith("is_"):
            ret, body = "bool", ["return %s != 0;" % call]
        else:
            ret, body = result(outs)[0], ["return %s;" % call]
        ret = spell(ret)
        params = ["%s%s%s" % (self.param_type(t, self.c_of[n]), n, " = " + d if d else "")
                  for t, n, d in self.params]
        head = ("static " if self.static else "" if self.cls else "inline ") + "%s %s(" % (
            ret, self.name)
        tail = ") const {" if self.cls and not self.static else ") {"
        out = doc_lines(self.doc, indent)
        one = "%s%s%s%s %s }" % (indent, head, ", ".join(params), tail, " ".join(body))
        if len(body) == 1 and len(one) <= WIDTH:
            return out + [one]
        out += wrap(indent + head, params, tail)
        for s in body:
            if len(indent + "  " + s) <= WIDTH or fn not in s:
                out.append(indent + "  " + s)
            else:  # the checked call broken at its arguments
                pre, post = s.split(fn, 1)
                out += wrap(indent + "  " + pre + fn, values, post[len(", ".join(values)):])
        return out + [indent + "}"]


def mixin(cls, methods):
    handle = [h for h, c in CLASSES.items() if c == cls][0]
    body = [line for m in methods for line in m.lines("  ")]
    out = ["/// The methods of localmap::%s that are one C call each (a mixin of that class," % cls,
           "/// generated from api/localmap.api).",
           "template <class D>",
           "class %s_methods {" % cls]
    uses = sorted({u for m in methods for u in m.uses})
    if uses:  # declared before the methods name them
        out += [" protected:"]
        for u in uses:
            out += ["  /// localmap::%s (complete where the methods are used)." % u,
                    "  using %s = typename detail::complete<D, localmap::%s>::type;" % (u, u)]
        out += [""]
    out += [" public:"] + body
    out += ["", " private:",
            "  %s self() const { return static_cast<const D *>(this)->get(); }" % handle,
            "};"]
    if cls in ("mesh", "dist_tensor"):
        out += ["/// The former name of %s_methods." % cls,
                "template <class D>",
                "using %s_queries = %s_methods<D>;" % (cls, cls)]
    return out


def ndim_helpers(funcs):
    """The ndim_of and mesh_ndim_of overloads of the handles' length rules: lm_X_ndim, and the
    ndim of lm_X_mesh's answer, without throwing (-1 when the handle cannot answer)."""
    out = ["// The ndim that a length rule counts; -1 when the handle cannot answer (the C call "
           "refuses it)."]
    for f in funcs:
        ins = [a for a in f.args if a.direction == "in"]
        outs = [a for a in f.args if a.direction == "out"]
        if len(ins) != 1 or len(outs) != 1 or ins[0].base not in NDIM_UNIT:
            continue
        if f.name.endswith("_ndim") and outs[0].base == "int":
            out += ["inline int64_t ndim_of(%s h) {" % ins[0].base,
                    "  int n = 0;",
                    "  return %s(h, &n) == LM_SUCCESS ? n : -1;" % f.name, "}"]
        elif f.name.endswith("_mesh") and outs[0].base == "lm_mesh_t":
            out += ["inline int64_t mesh_ndim_of(%s h) {" % ins[0].base,
                    "  lm_mesh_t m = nullptr;",
                    "  return %s(h, &m) == LM_SUCCESS ? ndim_of(m) : -1;" % f.name, "}"]
    return out


def placement(entry, fields):
    """A placement value: its kind, the parameters in the fields of their names (or those given
    renames them to), the others 0."""
    head, kind, given, doc = entry
    m = re.fullmatch(r"(\w+)\((.*)\)", head)
    types = {n: t for t, n, _ in (param(p) for p in split_params(m.group(2)))}
    into = {v: k for k, v in given.items() if v in types}  # parameter -> its field
    into.update({n: n for n in types if n not in into})
    unknown = sorted(set(into.values()) - {f for f, _ in fields})
    if unknown:
        raise SystemExit("api_gen_cpp: %s: lm_placement_t has no field %s" % (head, unknown))
    values = []
    for field, ctype in fields:
        n = next((p for p, f in into.items() if f == field), None)
        if field == "kind":
            values.append(kind)
        elif n is not None:
            values.append(n if types[n] in ("int", ctype) else "static_cast<%s>(%s)" % (ctype, n))
        else:
            values.append(given.get(field, "0"))
    one = "inline lm_placement_t %s { return {%s}; }" % (head, ", ".join(values))
    if len(one) <= WIDTH:
        return doc_lines(doc, "") + [one]
    return (doc_lines(doc, "") + ["inline lm_placement_t %s {" % head] +
            wrap("  return {", values, "};") + ["}"])


HEADER_TEXT = [""]  # include/localmap.h without its comments, read by generate()


def generate(funcs):
    by_name = {f.name: f for f in funcs}
    gen = sys.modules["api_gen_python"]  # its header readers
    HEADER_TEXT[0] = gen.header_text()
    fields = dict(gen.structs(HEADER_TEXT[0]))["lm_placement_t"]
    methods = [Method(e, by_name) for e in METHODS]
    out = ["// Generated by tools/api.py (tools/api_gen_cpp.py) from api/localmap.api: do not edit.",
           "// SPDX-License-Identifier: BSD-3-Clause",
           "// Regenerate with `make api-generate`; tools/api.py check (tests/script_api.sh) fails when",
           "// this file is stale. Part of localmap.hpp, which includes it after what it uses (check,",
           "// expect_len, ndim_of of DLPack tensors, handles, the placements and shape types): the",
           "// C API as checked C++ calls in localmap::detail (not a public API), one per C function",
           "// that returns a status (destroys aside), named without `lm_`: arrays as std::vector",
           "// whose length rules are checked before the call, outputs returned (several as a",
           "// std::tuple), a failed status thrown as localmap::error. Then the functions of",
           "// localmap.hpp that are one C call, its placement values, and the methods of its classes",
           "// that are one C call, as mixins.",
           "#ifndef LOCALMAP_API_HPP_",
           "#define LOCALMAP_API_HPP_",
           "#ifndef LOCALMAP_HPP_",
           "#error \"localmap_api.hpp is part of localmap.hpp: include <localmap.hpp>\"",
           "#endif",
           "",
           "namespace localmap {",
           ""]
    out += ["class %s;" % c for c in CLASSES.values()]
    out += ["",
            "namespace detail {",
            "// T, named through D: a type the mixin of D's class uses, complete where D's is.",
            "template <class D, class T>",
            "struct complete {",
            "  using type = T;",
            "};",
            ""]
    out += ndim_helpers(funcs) + [""]
    for f in funcs:
        if not skipped(f):
            out.extend(function(f))
    out += ["}  // namespace detail", ""]
    for m in methods:
        if m.cls is None:
            out += m.lines("")
    for p in PLACEMENTS:
        out += placement(p, fields)
    for cls in CLASSES.values():
        mine = [m for m in methods if m.cls == cls]
        if mine:
            out += [""] + mixin(cls, mine)
    out += ["}  // namespace localmap", "", "#endif  // LOCALMAP_API_HPP_"]
    return "\n".join(out) + "\n"
