# SPDX-License-Identifier: BSD-3-Clause
"""Python's generated layer (tools/api.py): bindings/python/localmap/_api.py, the C API in ctypes.

From include/localmap.h: the integer constants (enum members, `#define LM_X <number>`), the
callback types, the public structs (each with an __init__ that sets what its `_INIT` macro sets
beyond 0, then the fields given as keywords, as ctypes' own does), and DLPack 0.6's structs (the
table DLPACK: their layout is DLPack's ABI). From api/localmap.api: every function's ctypes
prototype (PROTOTYPES) and its arguments with direction, C type, length rules and whether they
may be NULL (FUNCTIONS), which localmap._lib.call reads to allocate a call's outputs and to check
its array lengths."""
import re
import sys

api = sys.modules["api"]  # tools/api.py, which loads this module
OUTPUT = "bindings/python/localmap/_api.py"
WIDTH = 100

# C scalar types -> ctypes; a handle (typedef struct lm_X_s *lm_X_t) is a c_void_p, an enum a c_int.
SCALARS = {"int": "c_int", "unsigned": "c_uint", "int32_t": "c_int32", "int64_t": "c_int64",
           "size_t": "c_size_t", "uint8_t": "c_uint8", "uint16_t": "c_uint16",
           "uint32_t": "c_uint32", "uint64_t": "c_uint64", "double": "c_double", "char": "c_char",
           "DLDeviceType": "c_int"}
# DLPack 0.6 (dlpack.h), which localmap's header includes, and DLPack 1.0's versioned tensor:
# (struct, [(field, C type)]).
DLPACK = [("DLDevice", [("device_type", "int32_t"), ("device_id", "int32_t")]),
          ("DLDataType", [("code", "uint8_t"), ("bits", "uint8_t"), ("lanes", "uint16_t")]),
          ("DLTensor", [("data", "void*"), ("device", "DLDevice"), ("ndim", "int32_t"),
                        ("dtype", "DLDataType"), ("shape", "int64_t*"), ("strides", "int64_t*"),
                        ("byte_offset", "uint64_t")]),
          ("DLManagedTensor", [("dl_tensor", "DLTensor"), ("manager_ctx", "void*"),
                               ("deleter", "DLManagedTensorDeleter")]),
          # DLPack 1.0's, which the binding builds for consumers that take it
          ("DLPackVersion", [("major", "uint32_t"), ("minor", "uint32_t")]),
          ("DLManagedTensorVersioned", [("version", "DLPackVersion"), ("manager_ctx", "void*"),
                                        ("deleter", "DLManagedTensorDeleter"),
                                        ("flags", "uint64_t"), ("dl_tensor", "DLTensor")])]


def header_text():
    with open(api.HEADER) as fh:
        text = fh.read()
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)  # comments (the values stay)
    return re.sub(r"//[^\n]*", " ", text)


def constants(text):
    """[(name, value)] of the enum members and integer #defines, in the header's order."""
    found = []
    for m in re.finditer(r"#\s*define\s+(LM_\w+)\s+(-?(?:0x[0-9a-fA-F]+|\d+))[uU]?\s*$", text,
                         re.M):
        found.append((m.start(), m.group(1), int(m.group(2), 0)))
    for body in re.finditer(r"\benum\b[^{;]*\{([^}]*)\}", text):
        for m in re.finditer(r"(LM_\w+)\s*=\s*(-?(?:0x[0-9a-fA-F]+|\d+))", body.group(1)):
            found.append((body.start() + m.start(), m.group(1), int(m.group(2), 0)))
    return [(name, value) for _, name, value in sorted(found)]


def enums(text):
    """The names of the header's enum types (passed as C ints)."""
    return set(re.findall(r"typedef\s+enum\s+\w*\s*\{[^}]*\}\s*(\w+)\s*;", text))


def _decl(decl):
    """(name, compact C type) of a declaration `const int *ranks`."""
    decl = " ".join(decl.split())
    m = re.fullmatch(r"(.+?[\s*])(\w+)", decl)
    return m.group(2), api.compact(m.group(1))


def structs(text):
    """[(struct, [(field, C type)])] of every `typedef struct lm_X_t {...} lm_X_t;`."""
    return [(m.group(1), [_decl(d) for d in m.group(2).split(";") if d.strip()])
            for m in re.finditer(r"typedef\s+struct\s+(lm_\w+_t)\s*\{(.*?)\}\s*\1\s*;", text,
                                 re.S)]


def callbacks(text):
    """[(name, return C type, [argument C types])] of the function pointer typedefs."""
    return [(m.group(2), api.compact(m.group(1)), [_decl(a)[1] for a in m.group(3).split(",")])
            for m in re.finditer(r"typedef\s+([\w\s*]+?)\s*\(\s*\*\s*(lm_\w+_t)\s*\)\s*\(([^)]*)\)"
                                 r"\s*;", text)]


def inits(text, layouts, values):
    """{struct: [(field, value)]}: the fields its `_INIT` macro sets to something other than 0
    ('sizeof' for the struct's own size)."""
    out = {}
    for m in re.finditer(r"#\s*define\s+(LM_\w+)_INIT\s*\\?\s*\{((?:[^}\\]|\\\n)*)\}", text):
        name = "lm_%s_t" % m.group(1)[3:].lower()
        if name not in layouts:
            continue
        items = [i.strip() for i in m.group(2).replace("\\\n", " ").split(",")]
        set_ = []
        for (field, _), item in zip(layouts[name], items):
            if item.startswith("sizeof"):
                set_.append((field, "sizeof"))
            elif item in values:
                v = values[item]
                set_.append((field, hex(v) if v > 0xffff else str(v)))
            elif item not in ("NULL", "0", "0.0"):
                set_.append((field, item))
        out[name] = set_
    return out


def ctype(c, known, array=False):
    """The ctypes expression of a C type as api/localmap.api or the header spells it; `array`:
    an array argument (a char* buffer is then POINTER(c_char), not c_char_p)."""
    base = c.replace("const", "").replace(" ", "")
    stars = base.count("*")
    base = base.rstrip("*")
    if base == "void" and not stars:
        return "None"
    if stars and (base in ("void", "DLManagedTensor") or (base == "char" and not array)):
        t, stars = {"void": "c_void_p", "char": "c_char_p"}.get(base, "c_void_p"), stars - 1
    elif base in SCALARS or base in known:
        t = SCALARS.get(base) or known[base]
    else:
        raise SystemExit("api_gen_python: no ctypes type for the C type %r" % c)
    for _ in range(stars):
        t = "POINTER(%s)" % t
    return t


def _class(name, fields, known, init=()):
    out = ["", "", "class %s(Structure):" % name, "    _fields_ = ["]
    out += ['        ("%s", %s),' % (f, ctype(t, known)) for f, t in fields]
    out.append("    ]")
    if init:
        out += ["", "    def __init__(self, **fields):", "        super().__init__()"]
        out += ["        self.%s = %s" % (f, "ctypes.sizeof(self)" if v == "sizeof" else v)
                for f, v in init]
        out += ["        for name, value in fields.items():",
                "            setattr(self, name, value)"]
    return [w for line in out for w in _wrap(line)]


def _wrap(line, ind=8):
    """A line broken after commas to stay under WIDTH, continued `ind` spaces in."""
    out = []
    while len(line) > WIDTH and line.rfind(", ", 0, WIDTH - 1) > 0:
        cut = line.rfind(", ", 0, WIDTH - 1)
        out.append(line[:cut + 1])
        line = " " * ind + line[cut + 2:]
    return out + [line]


def types(text, values):
    """The ctypes types: DLPack's, the callbacks (each once the types it names are), the
    header's structs. Returns (lines, {C type: ctypes name})."""
    known = {t: "c_int" for t in enums(text)}
    handles = re.findall(r"typedef\s+struct\s+\w+\s*\*\s*(lm_\w+_t)\s*;", text)  # lm_X_s *
    known.update({h: "c_void_p" for h in handles})
    known["DLManagedTensorDeleter"] = "DLManagedTensorDeleter"
    out = ["", "# DLPack (dlpack.h)", "DLManagedTensorDeleter = CFUNCTYPE(None, c_void_p)"]
    for name, fields in DLPACK:
        known[name] = name
        out += _class(name, fields, known)
    layouts = structs(text)
    init = inits(text, dict(layouts), dict(values))
    pending = callbacks(text)
    out += ["", "", "# The header's callbacks and structs (handles are c_void_p, enums c_int)."]
    for name, fields in layouts + [(None, None)]:
        for cb in [c for c in pending if all(_base(t) in known or _base(t) in SCALARS or
                                             _base(t) == "void" for t in [c[1]] + c[2])]:
            if out[-1].startswith(" "):  # after a class
                out += ["", ""]
            head = "%s = CFUNCTYPE(" % cb[0]
            out += _wrap(head + ", ".join(ctype(t, known) for t in [cb[1]] + cb[2]) + ")",
                         len(head))
            known[cb[0]] = cb[0]
            pending.remove(cb)
        if name is not None:
            known[name] = name
            out += _class(name, fields, known, init.get(name, ()))
    return out, known


def _base(c):
    return c.replace("const", "").replace("*", "").strip()


def generate(funcs):
    text = header_text()
    values = constants(text)
    out = ["# SPDX-License-Identifier: BSD-3-Clause",
           "# Generated by tools/api.py (tools/api_gen_python.py) from api/localmap.api and",
           "# include/localmap.h: do not edit (make api-generate).",
           '"""The C API in ctypes for localmap/_lib.py: constants, types, prototypes, and each',
           'function\'s arguments with their length rules."""',
           "import ctypes",
           "from ctypes import (CFUNCTYPE, POINTER, Structure, c_char, c_char_p, c_double, c_int,",
           "                    c_int32, c_int64, c_size_t, c_uint, c_uint8, c_uint16, c_uint32,",
           "                    c_uint64, c_void_p)",
           "",
           "# The header's integer constants: enum members and `#define LM_X <number>`."]
    out += ["%s = %s" % (n, hex(v) if v > 0xffff else v) for n, v in values]
    typed, known = types(text, values)
    out += typed
    out += ["", "", "# function -> (restype, argtypes)", "PROTOTYPES = {"]
    for f in funcs:
        args = [ctype(a.c_type(), known, bool(a.dims)) for a in f.args]
        out += _wrap('    "%s": (%s, [%s]),' % (f.name, ctype(f.ret, known), ", ".join(args)))
    out += ["}", "", "# function -> (return type, ((argument, direction, C type, length rules "
            "outermost first,", "#   may be NULL), ...)), in the header's order", "FUNCTIONS = {"]
    for f in funcs:
        if not f.args:
            out.append("    %r: (%r, ())," % (f.name, api.compact(f.ret)))
            continue
        out.append("    %r: (%r, (" % (f.name, api.compact(f.ret)))
        out += ["        %r," % ((a.name, a.direction, api.compact(a.c_type()), tuple(a.dims),
                                  a.null_ok),) for a in f.args]
        out.append("    )),")
    out.append("}")
    return "\n".join(out) + "\n"
