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
length wanted; a failed C call throws its status and message. Then QUERIES: the one-call query
methods of the C++ classes, as mixins `<class>_queries<D>` that the classes derive from."""
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
# The methods of the C++ classes that are one C query each (the rest of localmap.hpp is written
# by hand), in a mixin `<class>_queries` the class derives from: (method, C function, the doc's
# words after the C name). The handle is the C function's first argument; its other inputs are the
# method's parameters; an output array of length `n` holds one entry per dim of the object
# (placements: per mesh dim); an int answer to an `is_` question is a bool.
QUERIES = {
    "mesh": [
        ("ndim", "lm_mesh_ndim", ""),
        ("extents", "lm_mesh_shape", ""),
        ("size", "lm_mesh_size", ""),
        ("is_member", "lm_mesh_is_member", ""),
        ("coord", "lm_mesh_coord", " (throws on a non-member)"),
        ("rank", "lm_mesh_rank", " (throws on a non-member)"),
        ("dim", "lm_mesh_dim_index", ": the index of the dim called name"),
        ("dim_comm", "lm_mesh_dim_comm", ": the per-dim communicator as a Fortran handle "
                                         "(MPI_Comm_f2c to use it from C/C++)"),
    ],
    "dist_tensor": [
        ("ndim", "lm_dist_tensor_ndim", ""),
        ("dtype", "lm_dist_tensor_dtype", ""),
        ("global_shape", "lm_dist_tensor_global_shape", ""),
        ("local_shape", "lm_dist_tensor_local_shape", ""),
        ("local_offset", "lm_dist_tensor_local_offset", ""),
        ("placement", "lm_dist_tensor_placements", ": one per mesh dim"),
        ("local", "lm_dist_tensor_local", ": a view of the local shard (valid while this tensor "
                                          "lives)"),
        ("to_scalapack", "lm_dist_tensor_to_scalapack", ": this tensor's layout as a descriptor "
                                                        "with context ctxt"),
    ],
}
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


def query(cls, method, cf, note):
    """One method of a `<cls>_queries` mixin: the C function cf on the object's handle."""
    params, pre, call, outs = signature(cf, definers(cf))
    if len(outs) != 1 or pre[0] != ["  " + declare_out(outs[0], {})] or len(pre) != 1:
        raise SystemExit("%s: api_gen_cpp: %s is not a query of one answer" % (cf.where, cf.name))
    out = outs[0]
    length = "static_cast<int>(detail::mesh_ndim_of(self()))" if out.base == "lm_placement_t" else "ndim()"
    args, kept = ["self()"], []
    for p in params[1:]:  # after the handle: self()
        name = re.sub(r".*[ *&]", "", p)
        if out.dims and name == out.dims[0]:
            args.append(length)  # the answer's length
        else:
            args.append(name)
            kept.append(p)
    params = kept
    ret = out_type(out)
    body = "detail::%s(%s)" % (cf.name[3:], ", ".join(args))
    if out.name.startswith("is_"):
        ret, body = "bool", body + " != 0"
    doc = ["  /// %s%s." % (cf.name, note)]
    if len(doc[0]) > WIDTH:
        words, doc = doc[0][6:].split(" "), ["  ///"]
        for w in words:
            if len(doc[-1]) + 1 + len(w) > WIDTH:
                doc.append("  ///")
            doc[-1] += " " + w
    one = "  %s %s(%s) const { return %s; }" % (ret, method, ", ".join(params), body)
    if len(one) <= WIDTH:
        return doc + [one]
    return doc + ["  %s %s(%s) const {" % (ret, method, ", ".join(params)),
                  "    return %s;" % body, "  }"]


def mixin(cls, funcs):
    handle = [h for h, c in CLASSES.items() if c == cls][0]
    by_name = {f.name: f for f in funcs}
    out = ["/// The queries of localmap::%s, one C call each (a mixin of that class, generated from" % cls,
           "/// api/localmap.api).",
           "template <class D>",
           "class %s_queries {" % cls,
           " public:"]
    for method, cf, note in QUERIES[cls]:
        out += query(cls, method, by_name[cf], note)
    out += ["", " private:",
            "  %s self() const { return static_cast<const D *>(this)->get(); }" % handle,
            "};"]
    return out


def generate(funcs):
    out = ["// Generated by tools/api.py (tools/api_gen_cpp.py) from api/localmap.api: do not edit.",
           "// SPDX-License-Identifier: BSD-3-Clause",
           "// Regenerate with `make api-generate`; tools/api.py check (tests/script_api.sh) fails when",
           "// this file is stale. Part of localmap.hpp, which includes it after what it uses (check,",
           "// expect_len, ndim_of, mesh_ndim_of): the C API as checked C++ calls in",
           "// localmap::detail (not a public API), one per C function that returns a status (destroys",
           "// aside), named without `lm_`: arrays as std::vector whose length rules are checked before",
           "// call, outputs returned (several as a std::tuple), a failed status thrown as",
           "// localmap::error. Then the query methods of mesh and dist_tensor, as mixins.",
           "#ifndef LOCALMAP_API_HPP_",
           "#define LOCALMAP_API_HPP_",
           "#ifndef LOCALMAP_HPP_",
           "#error \"localmap_api.hpp is part of localmap.hpp: include <localmap.hpp>\"",
           "#endif",
           "",
           "namespace localmap {",
           "namespace detail {",
           ""]
    for f in funcs:
        if not skipped(f):
            out.extend(function(f))
    out += ["}  // namespace detail"]
    for cls in QUERIES:
        out += [""] + mixin(cls, funcs)
    out += ["}  // namespace localmap", "", "#endif  // LOCALMAP_API_HPP_"]
    return "\n".join(out) + "\n"
