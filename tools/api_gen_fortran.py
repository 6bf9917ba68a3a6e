# SPDX-License-Identifier: BSD-3-Clause
"""Fortran's generated layer (tools/api.py): the `lmc_*` bind(C) interfaces of every C function,
one for one, and their `public` statement, included by bindings/fortran/localmap.f90 inside the
module's specification part (where its bind(C) derived types are in scope through `import`).

The mapping, from each argument's direction, C type, length rule and null-ok:
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
# C structs that localmap.f90 declares as bind(C) derived types of the same name
STRUCTS = {"DLDataType", "DLDevice", "DLTensor", "DLManagedTensor", "lm_placement_t",
           "lm_mesh_config_t", "lm_device_config_t", "lm_reshard_plan_info_t", "lm_reshard_entry_t",
           "lm_reshard_group_config_t", "lm_local_map_options_t", "lm_arg_t"}
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
    ("lm_pool_stats", "in_use"): ("integer(c_int64_t), intent(out)", ""),
    ("lm_pool_stats", "peak"): ("integer(c_int64_t), intent(out)", ""),
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
    if base in STRUCTS:
        return "type(%s)" % base
    if base in CALLBACKS:
        return "type(c_funptr)"
    raise SystemExit("%s: api_gen_fortran.py has no Fortran type for %r: add it to HANDLES, "
                     "SCALARS, STRUCTS or CALLBACKS" % (where, base))


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
        return kind_of(a.base, a.where) + ", " + intent, ""
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
