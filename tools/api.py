#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""The one description of localmap's C API (api/localmap.api) and what is made from it.

  tools/api.py check     the description matches include/localmap.h declaration by declaration
                         (every function, in order, each argument's C type rendered from the
                         description), and every generated file is current
  tools/api.py write     (re)writes the generated files, one per tools/api_gen_*.py:
                           api_gen_python.py: bindings/python/localmap/_api.py (the functions'
                           arguments with their length rules, the header's constants and structs,
                           as data for the ctypes layer)
                           api_gen_python_wrappers.py: bindings/python/localmap/_wrappers.py (the
                           Python constants, status exceptions, and the methods that are one C call)
                           api_gen_rust.py: bindings/rust/localmap-sys/src/api.rs (extern "C"
                           declarations and length rules as data)
                           api_gen_rust_types.py: bindings/rust/localmap-sys/src/types.rs
                           (constants, enums, structs, handles, callbacks, read from the header)
                           api_gen_fortran.py: bindings/fortran/localmap_c.inc (the lmc_* bind(C)
                           interfaces and their public list) and the generated parts of the
                           Fortran module (localmap_generic.inc, localmap_wrap.inc,
                           localmap_typed.inc, and localmap_types.inc: the header's constants,
                           structs and handle types; see that file)
                           api_gen_cpp.py: include/localmap_api.hpp (checked C++ calls and the
                           query methods of localmap.hpp's classes)

The description (grammar at the top of api/localmap.api) says, for every argument, its direction
and, for every array, its length rule (`lm_placement_t[mesh.ndim]`), which the bindings check
before the C call.
"""
import os
import re
import sys

sys.modules.setdefault("api", sys.modules[__name__])  # for the tools/api_gen_*.py modules
TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
API = os.path.join(TOP, "api", "localmap.api")
HEADER = os.path.join(TOP, "include", "localmap.h")


class Arg:
    def __init__(self, direction, ctype, name, null_ok, where):
        self.direction, self.name, self.null_ok, self.where = direction, name, null_ok, where
        m = re.fullmatch(r"([\w ]+?\**)((?:\[[^\]]+\])*)", ctype.replace(" *", "*"))
        if not m:
            raise SystemExit("%s: cannot read the type %r" % (where, ctype))
        self.base = m.group(1).strip()
        self.dims = re.findall(r"\[([^\]]+)\]", m.group(2))  # length rules, outermost first
        if direction not in ("in", "out", "inout"):
            raise SystemExit("%s: direction %r is not in, out or inout" % (where, direction))
        if len(self.dims) > 2:
            raise SystemExit("%s: at most two array levels" % where)

    def c_type(self):
        """The C type this argument has in the header."""
        if self.base == "string":
            return "const char *"
        if self.dims:
            const = "const " if self.direction == "in" else ""
            return const + self.base + " *" + ("const *" if len(self.dims) == 2 else "")
        if self.direction == "in":
            return self.base
        return self.base + " *"


class Function:
    def __init__(self, name, ret, where):
        self.name, self.ret, self.where, self.args = name, ret, where, []


def read_api(path=API):
    funcs, cur = [], None
    with open(path) as fh:
        for ln, raw in enumerate(fh, 1):
            line = raw.split("#", 1)[0].rstrip()
            where = "%s:%d" % (os.path.relpath(path, TOP), ln)
            if not line.strip():
                continue
            if not line.startswith(" "):
                m = re.fullmatch(r"(lm_\w+) -> (.+)", line.strip())
                if not m:
                    raise SystemExit("%s: want `lm_name -> return type`" % where)
                cur = Function(m.group(1), m.group(2).strip(), where)
                funcs.append(cur)
                continue
            if cur is None:
                raise SystemExit("%s: an argument before any function" % where)
            words = line.split()
            null_ok = words[-1] == "null-ok"
            if null_ok:
                words = words[:-1]
            if len(words) < 3:
                raise SystemExit("%s: want `direction type name [null-ok]`" % where)
            cur.args.append(Arg(words[0], " ".join(words[1:-1]), words[-1], null_ok, where))
    return funcs


def norm(c):
    c = re.sub(r"\s*\*\s*", " * ", c)
    return re.sub(r"\s+", " ", c).strip()


def compact(c):
    """`const int64_t*`, `char***`: a C type as one token for the generated tables."""
    return re.sub(r"\s*\*", "*", norm(c))


def header_functions():
    import importlib.util
    spec = importlib.util.spec_from_file_location("check_api", os.path.join(TOP, "tools", "check-api.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with open(HEADER) as fh:
        return mod.parse(fh.read())[0]


def check_rules(funcs):
    """Length rules that name no argument of their function, as lines."""
    bad = []
    for f in funcs:
        names = {a.name for a in f.args}
        for a in f.args:
            for rule in a.dims:
                for alt in rule.split("|"):
                    head = alt.split(".")[0]
                    if alt != "*" and not head.isdigit() and head not in names:
                        bad.append("%s: %s: the length rule %r of %s names no argument"
                                   % (a.where, f.name, rule, a.name))
    return bad


def check_header(funcs):
    """Problems between the description and the header, as lines."""
    hdr = header_functions()
    bad = check_rules(funcs)
    names_d = [f.name for f in funcs]
    names_h = [f["name"] for f in hdr]
    for n in sorted(set(names_h) - set(names_d)):
        bad.append("%s is in include/localmap.h but not in api/localmap.api" % n)
    for n in sorted(set(names_d) - set(names_h)):
        bad.append("%s is in api/localmap.api but not in include/localmap.h" % n)
    by_name = {f["name"]: f for f in hdr}
    for f in funcs:
        h = by_name.get(f.name)
        if h is None:
            continue
        if norm(h["ret"]) != norm(f.ret):
            bad.append("%s: %s returns %s, the header %s" % (f.where, f.name, f.ret, h["ret"]))
        want = [norm(a.c_type() + " " + a.name) for a in f.args]
        got = [norm(a) for a in h["args"]]
        if want != got:
            bad.append("%s: %s(%s) in the description, (%s) in the header"
                       % (f.where, f.name, ", ".join(want), ", ".join(got)))
    if not bad and names_d != names_h:
        bad.append("api/localmap.api lists the functions in another order than the header")
    return bad


def generators():
    """(output path, generate(funcs) -> text) of every tools/api_gen_*.py: one per binding layer,
    each module naming its OUTPUT (relative to the top) and a generate(funcs) function, or its
    OUTPUTS, a dict of several such paths and functions."""
    import importlib.util
    out = []
    here = os.path.join(TOP, "tools")
    for fname in sorted(os.listdir(here)):
        if re.fullmatch(r"api_gen_\w+\.py", fname):
            spec = importlib.util.spec_from_file_location(fname[:-3], os.path.join(here, fname))
            mod = importlib.util.module_from_spec(spec)
            sys.modules[fname[:-3]] = mod
            spec.loader.exec_module(mod)
            outputs = getattr(mod, "OUTPUTS", None) or {mod.OUTPUT: mod.generate}
            out.extend((os.path.join(TOP, path), make) for path, make in outputs.items())
    return out





def main(argv):
    cmd = argv[1] if len(argv) > 1 else "check"
    funcs = read_api()
    if cmd == "write":
        for path, make in generators():
            with open(path, "w") as fh:
                fh.write(make(funcs))
            print("api: wrote %s" % os.path.relpath(path, TOP))
        return 0
    if cmd != "check":
        print(__doc__)
        return 2
    bad = check_header(funcs)
    for path, make in generators():
        cur = open(path).read() if os.path.exists(path) else ""
        if cur != make(funcs):
            bad.append("%s is stale or edited by hand: run `make api-generate` (tools/api.py write)"
                       % os.path.relpath(path, TOP))
    for b in bad:
        print("api: " + b)
    if bad:
        return 1
    narr = sum(1 for f in funcs for a in f.args if a.dims)
    print("api: %d functions described, the header matches, %d array arguments with length "
          "rules, generated files current" % (len(funcs), narr))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
