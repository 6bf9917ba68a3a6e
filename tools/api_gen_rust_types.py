# SPDX-License-Identifier: BSD-3-Clause
"""Rust's generated types (tools/api.py): what localmap-sys declares of include/localmap.h besides
its functions, read from the header itself: every constant (`#define LM_X 1`, enum members), the
enums' integer types, the structs with their field docs, the opaque handles, the callback types,
the `_INIT` initialisers and the value macros (`LM_PLACEMENT_SHARD(d)`, `LM_FLOAT32`). DLPack's
types, `lm_dtype` and `LM_CPU` stay hand-written in localmap-sys/src/lib.rs; its layout test checks
every struct's size and offsets and every constant against the C compiler.

A declaration this reader does not know (a new kind of macro, a field type without a Rust type)
stops the generator: add it here, in one of the tables below."""
import os
import re
import sys

api = sys.modules["api"]  # tools/api.py, which loads this module
import api_gen_rust  # noqa: E402  (tools/, loaded by api.py before this module)

OUTPUT = "bindings/rust/localmap-sys/src/types.rs"
HEADER = os.path.join(api.TOP, "include", "localmap.h")
WIDTH = api_gen_rust.WIDTH

# Macros that are not values, or whose Rust form lib.rs writes by hand (DLPack's structs).
SKIP = {"LOCALMAP_H_", "LM_API", "LM_NODISCARD", "LM_CPU"}
# Function-like macros whose Rust form is a hand-written const fn of another name.
RENAMES = {"LM_DTYPE": ("lm_dtype", "DLDataType")}
# Integer types other than c_int (u32 for a `u` literal), kept as the sys crate always had them.
CONST_TYPES = {"LM_SCALAPACK_DLEN": "usize", "LM_DL_BOOL": "u8"}
ENUM_TYPES = {"lm_route_t": "u32"}  # bits of the u32 lm_reshard_plan_info_t::routes
INTEGERS = {"c_int", "c_uint", "i32", "u32", "i64", "u64", "usize", "u8", "u16"}

TOKEN = re.compile(r"""
    (?P<doc>/\*\*(?!<)(?P<dtext>.*?)\*/)
  | ^[ \t]*\#[ \t]*define[ \t]+(?P<dname>\w+)(?P<params>\([^)]*\))?(?P<body>(?:\\\n|[^\n])*)
  | typedef\s+enum\s+\w*\s*\{(?P<ebody>[^}]*)\}\s*(?P<ename>\w+)\s*;
  | (?<!typedef\ )\benum\s*\{(?P<abody>[^}]*)\}\s*;
  | typedef\s+struct\s+\w+_s\s*\*\s*(?P<handle>\w+)\s*;
  | typedef\s+struct\s+(?P<sname>\w+)\s*\{(?P<sbody>[^}]*)\}\s*(?P=sname)\s*;
  | typedef\s+(?P<fret>[\w\s\*]+?)\s*\(\s*\*\s*(?P<fname>\w+)\s*\)\s*\((?P<fparams>[^)]*)\)\s*;
""", re.S | re.M | re.X)


def fail(what):
    raise SystemExit("include/localmap.h: api_gen_rust_types: %s" % what)


def doc_lines(text, indent=""):
    """A Doxygen comment's text as Rust doc lines (brackets escaped: C's `a[i]` is no Rust link)."""
    lines = [re.sub(r"^\s*\*?\s*", "", ln).rstrip().replace("[", "\\[").replace("]", "\\]")
             for ln in text.strip().strip("<").split("\n")]
    return [indent + ("/// " + ln).rstrip() for ln in lines if ln.strip() or len(lines) == 1]


def declarations():
    """(kind, name, doc, match) of the header's declarations in order; a macro the C++ branch of
    an #ifdef defines again keeps its last (the C) definition."""
    text = re.sub(r"/\*(?!\*).*?\*/|//[^\n]*", lambda m: re.sub(r"[^\n]", " ", m.group(0)),
                  open(HEADER).read(), flags=re.S)
    out, doc, doc_end = [], None, -1
    for m in TOKEN.finditer(text):
        if m.group("doc"):
            doc, doc_end = m.group("dtext"), m.end()
            continue
        mine = doc if text[doc_end:m.start()].strip() == "" else None
        kind = next(k for k in ("dname", "ename", "abody", "handle", "sname", "fname") if m.group(k))
        name = m.group(kind) if kind != "abody" else None
        if kind == "dname":
            out = [d for d in out if d[1] != name]
        out.append((kind, name, mine, m))
    return out


def members(body, where):
    """(name, value, doc) of an enum body, docs before (/**) or after (/**<) a member."""
    out, pending = [], None
    for m in re.finditer(r"/\*\*(<?)(.*?)\*/|(\w+)\s*=\s*([^,/]+)", body, re.S):
        if m.group(3):
            out.append([m.group(3), m.group(4).strip(), pending])
            pending = None
        elif m.group(1) and out:
            out[-1][2] = m.group(2)
        else:
            pending = m.group(2)
    if not out:
        fail("%s: no members" % where)
    return out


def fields(body, where):
    """(name, Rust type, doc) of a struct body."""
    out, pending = [], None
    for m in re.finditer(r"/\*\*(<?)(.*?)\*/|([^;/]+?)\s*\b(\w+)\s*;", body, re.S):
        if m.group(4):
            ty = api_gen_rust.rust_type(re.sub(r"\s+", " ", m.group(3)), where)
            out.append([m.group(4), ty, pending])
            pending = None
        elif m.group(1) and out:
            out[-1][2] = m.group(2)
        else:
            pending = m.group(2)
    return out


def literal(v):
    """A C integer constant expression -> Rust (no `u` suffix, no outer parentheses)."""
    v = re.sub(r"\b(0x[0-9a-fA-F]+|\d+)[uU]\b", r"\1", v.strip())
    return v[1:-1] if v.startswith("(") and v.endswith(")") else v


def zero(ty):
    if ty.startswith("*const"):
        return "std::ptr::null()"
    if ty.startswith("*mut"):
        return "std::ptr::null_mut()"
    return {"f64": "0.0"}.get(ty, "0" if ty in INTEGERS else "None")


def initialiser(name, body, structs):
    """`#define X_INIT {sizeof(T), ...}` -> a const T with every field (C zero-fills the rest)."""
    vals = [v.strip() for v in body.strip().strip("{}").split(",")]
    m = re.fullmatch(r"sizeof\((\w+)\)", vals[0])
    if not m or m.group(1) not in structs:
        fail("%s: an initialiser that does not start with sizeof(struct)" % name)
    t = m.group(1)
    out = ["pub const %s: %s = %s {" % (name, t, t)]
    for i, (f, ty, _) in enumerate(structs[t]):
        v = vals[i] if i < len(vals) else "0"
        if i == 0:
            v = "std::mem::size_of::<%s>()" % t
        elif v in ("NULL", "0") and ty not in INTEGERS | {"f64"}:
            v = zero(ty)
        elif ty == "f64" and re.fullmatch(r"-?\d+", v):
            v += ".0"
        out.append("    %s: %s," % (f, literal(v)))
    return out + ["};"]


def strip_casts(s):
    return re.sub(r"\((?:u?int\d+_t|int|unsigned)\)\s*\((\w+)\)", r"\1", s)


def value_macro(name, params, body, structs, fns):
    """A value macro -> a const fn (with parameters) or a const; fns: those seen, by name."""
    body = strip_casts(" ".join(body.replace("\\\n", " ").split()))
    lit = re.fullmatch(r"\(\s*\((\w+)\)\s*\{(.*)\}\s*\)", body)
    call = re.fullmatch(r"(\w+)\((.*)\)", body)
    if lit and lit.group(1) in structs:  # ((T){a, b, ...}): a struct literal
        t, vals = lit.group(1), [v.strip() for v in lit.group(2).split(",")]
        types = {v: ty for (f, ty, _), v in zip(structs[t], vals)}
        expr = "%s { %s }" % (t, ", ".join("%s: %s" % (f, v) for (f, _, _), v in zip(structs[t], vals)))
    elif call and call.group(1) in fns:  # another value macro's call
        callee, args = fns[call.group(1)], [a.strip() for a in call.group(2).split(",")]
        t, types = callee[1], {a: ty for a, ty in zip(args, callee[2])}
        expr = "%s(%s)" % (callee[0], ", ".join(args))
    else:
        fail("%s: a value macro this generator cannot read: %s" % (name, body))
    if params is None:
        return ["pub const %s: %s = %s;" % (name, t, expr)]
    ps = [p.strip() for p in params.strip("()").split(",")]
    fns[name] = (name, t, [types.get(p, "i32") for p in ps])
    sig = ", ".join("%s: %s" % (p, types.get(p, "i32")) for p in ps)
    return ["pub const fn %s(%s) -> %s {" % (name, sig, t), "    %s" % expr, "}"]


def callback(m):
    params = []
    for p in m.group("fparams").split(","):
        pm = re.fullmatch(r"(.*?)\s*\b(\w+)", p.strip())
        params.append("%s: %s" % (pm.group(2), api_gen_rust.rust_type(pm.group(1), m.group("fname"))))
    ret = " ".join(m.group("fret").split())
    ret = "" if ret == "void" else " -> " + api_gen_rust.rust_type(ret, m.group("fname"))
    one = 'pub type %s = Option<unsafe extern "C" fn(%s)%s>;' % (m.group("fname"), ", ".join(params), ret)
    if len(one) <= WIDTH:
        return [one]
    return (["pub type %s = Option<" % m.group("fname"), '    unsafe extern "C" fn('] +
            ["        %s," % p for p in params] + ["    )%s," % ret, ">;"])


def struct(name, flds):
    ints = all(ty in INTEGERS for _, ty, _ in flds)
    derive = "Debug, Clone, Copy" + (", PartialEq, Eq, Default" if ints else "")
    out = ["#[repr(C)]", "#[derive(%s)]" % derive, "pub struct %s {" % name]
    for f, ty, doc in flds:
        out += (doc_lines(doc, "    ") if doc else []) + ["    pub %s: %s," % (f, ty)]
    out.append("}")
    if not ints:  # raw pointers, callbacks, doubles: all zero is NULL, None and 0.0
        out += ["impl Default for %s {" % name, "    fn default() -> Self {",
                "        // SAFETY: every field is an integer, a float, a raw pointer or an Option<fn>.",
                "        unsafe { std::mem::zeroed() }", "    }", "}"]
    return out


def item(kind, name, m, structs, fns):
    """The Rust lines of one declaration (None: not one localmap-sys declares)."""
    if kind == "ename" or kind == "abody":
        ty = ENUM_TYPES.get(name, "c_int")
        head = ["pub type %s = %s;" % (name, ty)] if name else []
        body = members(m.group("ebody") or m.group("abody"), name or "enum")
        return head + sum([(doc_lines(d) if d else []) + ["pub const %s: %s = %s;" % (n, name or ty, v)]
                           for n, v, d in body], [])
    if kind == "handle":
        s = name[:-2] + "_s"
        return ["#[repr(C)]", "pub struct %s {" % s, "    _private: [u8; 0],", "}",
                "pub type %s = *mut %s;" % (name, s)]
    if kind == "sname":
        structs[name] = fields(m.group("sbody"), name)
        return struct(name, structs[name])
    if kind == "fname":
        return callback(m)
    body, params = m.group("body").strip(), m.group("params")
    if name in SKIP or not body:
        return None
    if name in RENAMES:
        fns[name] = (RENAMES[name][0], RENAMES[name][1], [])
        return None
    if name.endswith("_INIT"):
        return initialiser(name, body.replace("\\\n", " "), structs)
    if params is None and re.fullmatch(r"-?(0x[0-9a-fA-F]+|\d+)[uU]?", body):
        ty = CONST_TYPES.get(name, "u32" if body[-1] in "uU" else "c_int")
        return ["pub const %s: %s = %s;" % (name, ty, literal(body))]
    if params is None and re.fullmatch(r"\([\w\s*+]+\)", body):  # LM_VERSION_CODE
        return ["pub const %s: c_int = %s;" % (name, literal(body))]
    return value_macro(name, params, body, structs, fns)


def generate(funcs):
    out, structs, fns = [], {}, {}
    for kind, name, doc, m in declarations():
        lines = item(kind, name, m, structs, fns)
        if lines is None:
            continue
        out += [""] if kind != "dname" or not out or not out[-1].startswith("pub const") else []
        out += (doc_lines(doc) if doc else []) + lines
    text = "\n".join(out)
    used = [t for t in ("c_char", "c_int", "c_uint", "c_void") if re.search(r"\b%s\b" % t, text)]
    head = ["// SPDX-License-Identifier: BSD-3-Clause",
            "// Generated by tools/api.py (tools/api_gen_rust_types.py) from include/localmap.h: do not",
            "// edit (make api-generate). DLPack's types, lm_dtype and LM_CPU are hand-written in lib.rs.",
            "//! The constants, enums, structs, handles and callback types of liblocalmap's C ABI, in",
            "//! the header's order, with its documentation.",
            "",
            "use crate::*;",
            "use std::os::raw::{%s};" % ", ".join(used)]
    return "\n".join(head) + "\n" + text + "\n"
