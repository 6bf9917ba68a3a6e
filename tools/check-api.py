#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Checks include/localmap.h against the API conventions of docs/API.md, the rules a script can see:

  R1 name      every exported function is lm_<object>_<verb> in lower case (LM_API, `lm_` prefix)
  R2 status    every exported function returns lm_status_t, except the few of docs/API.md
               ("Status"): lm_get_version, lm_status_string, lm_last_error_message,
               lm_set_error_message
  R3 nodiscard every function returning lm_status_t is LM_NODISCARD, except destroy functions
               (NULL-safe and local: ignoring their status is never a mistake), which are not
  R4 output    a call that makes a handle (create, from_*, alloc*, zeros, reshard*, transpose,
               adjoint, start ...) takes it first: its `lm_X_t *` argument of a handle type
               (typedef struct lm_X_s *lm_X_t) is argument 1. Accessors take their object first.
  R5 struct    a versioned struct starts with `size_t size; uint32_t magic; uint32_t version;`
               and has an `<NAME>_INIT` macro
  R6 docs      every exported function has a Doxygen comment (/** ... */) right before it

A departure the header still has is listed in tools/api-departures.txt (one line: rule, name, why);
the check fails on a departure that is not listed (a new function must follow the conventions) and
on a listed one that is gone (the list only shrinks, so it stays true). docs/API.md's migration
table says what each listed name becomes in 1.0.

Usage: tools/check-api.py [--header include/localmap.h] [--departures tools/api-departures.txt]
       tools/check-api.py --self-test   (the checker catches one violation of each rule)
"""
import argparse
import os
import re
import sys
import tempfile

# The library's own life: lm_<verb> (like MPI_Init), the one exception to R1's shape.
LIBRARY_VERBS = {"lm_init", "lm_finalize"}
# R4 applies to calls that make a handle (the caller owns it): these verbs in the name.
MAKERS = re.compile(r"_(create|from_\w+|alloc\w*|zeros|reshard\w*|transpose|adjoint|start|"
                    r"input_grad|copy|clone)$")
STATUS_EXEMPT = {"lm_get_version", "lm_status_string", "lm_last_error_message",
                 "lm_set_error_message"}


def strip_comments_keep_doc(text):
    """The header with // comments and non-Doxygen /* */ comments blanked; /** */ kept."""
    out, i, n = [], 0, len(text)
    while i < n:
        if text.startswith("/**", i) and not text.startswith("/**/", i):
            j = text.find("*/", i + 3)
            j = n if j < 0 else j + 2
            out.append(text[i:j])
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(" " * (j - i))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


DECL = re.compile(r"((?:LM_NODISCARD\s+)?LM_API\s+)([^;{}()]*?)\b(\w+)\s*\(([^;{}]*?)\)\s*;", re.S)


def parse(text):
    """(functions, handles, structs, macros) of a header's text."""
    src = strip_comments_keep_doc(text)
    macros = set(re.findall(r"#\s*define\s+(LM_\w+)", src))
    src = re.sub(r"(?m)^\s*#.*(?:\\\n.*)*$", "", src)  # preprocessor lines (LM_API's own #define)
    funcs = []
    for m in DECL.finditer(src):
        before = src[:m.start()].rstrip()
        args = [a.strip() for a in re.sub(r"\s+", " ", m.group(4)).split(",") if a.strip()]
        funcs.append({
            "name": m.group(3),
            "ret": re.sub(r"\s+", " ", m.group(2)).strip(),
            "nodiscard": "LM_NODISCARD" in m.group(1),
            "args": [] if args == ["void"] else args,
            "doc": before.endswith("*/") and before.rfind("/**") > before.rfind("*/", 0, len(before) - 2),
        })
    handles = set(re.findall(r"typedef\s+struct\s+lm_\w+_s\s*\*\s*(lm_\w+_t)\s*;", src))
    structs = {}
    for m in re.finditer(r"typedef\s+struct\s+(lm_\w+_t)\s*\{(.*?)\}\s*\1\s*;", src, re.S):
        body = re.sub(r"/\*\*.*?\*/", " ", m.group(2), flags=re.S)
        fields = [re.sub(r"\s+", " ", f).strip() for f in body.split(";") if f.strip()]
        structs[m.group(1)] = fields
    return funcs, handles, structs, macros


def violations(text):
    """(rule, name, what) for every departure from the conventions in a header's text."""
    funcs, handles, structs, macros = parse(text)
    out = []
    for f in funcs:
        n = f["name"]
        if not re.fullmatch(r"lm_[a-z0-9]+(_[a-z0-9]+)+", n) and n not in LIBRARY_VERBS:
            out.append(("R1", n, "not lm_<object>_<verb>"))
        is_status = f["ret"] == "lm_status_t"
        if not is_status and n not in STATUS_EXEMPT:
            out.append(("R2", n, "returns %s, not lm_status_t" % f["ret"]))
        destroy = n.endswith("_destroy")
        if is_status and not destroy and not f["nodiscard"]:
            out.append(("R3", n, "returns lm_status_t without LM_NODISCARD"))
        if destroy and f["nodiscard"]:
            out.append(("R3", n, "a destroy function marked LM_NODISCARD"))
        for i, a in enumerate(f["args"]):
            m = re.match(r"(?:const\s+)?(lm_\w+_t)\s*\*\s*\w*$", a)
            if m and m.group(1) in handles and not a.startswith("const") and i > 0 \
                    and MAKERS.search(n):
                out.append(("R4", n, "makes a %s but takes it as argument %d, not 1" % (m.group(1), i + 1)))
        if n.endswith("_create") and f["args"] and not re.match(r"[\w ]*\*\s*\w*$", f["args"][0]) \
                or n.endswith("_create") and f["args"] and f["args"][0].startswith("const"):
            out.append(("R4", n, "a create whose argument 1 is not its output (%s)" % f["args"][0]))
        if not f["doc"]:
            out.append(("R6", n, "no Doxygen comment before it"))
    for s, fields in structs.items():
        if not fields or not fields[0].startswith("size_t size"):
            continue  # not a versioned struct (placements, arguments)
        want = ["size_t size", "uint32_t magic", "uint32_t version"]
        if [re.sub(r"\s+", " ", f) for f in fields[:3]] != want:
            out.append(("R5", s, "starts with %s, not size_t size; uint32_t magic; uint32_t version"
                        % "; ".join(fields[:3])))
        init = re.sub(r"^lm_", "LM_", s[:-2]).upper() + "_INIT"
        if init not in macros:
            out.append(("R5", s, "no %s macro" % init))
    return out


def read_departures(path):
    keep = {}
    with open(path) as fh:
        for ln, line in enumerate(fh, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split(None, 2)
            if len(parts) < 3:
                sys.exit("%s:%d: want `RULE NAME why`" % (path, ln))
            keep[(parts[0], parts[1])] = parts[2]
    return keep


def check(header, departures):
    with open(header) as fh:
        found = violations(fh.read())
    listed = read_departures(departures)
    bad = 0
    seen = set()
    for rule, name, what in found:
        seen.add((rule, name))
        if (rule, name) not in listed:
            print("check-api: %s %s: %s (docs/API.md; not in %s)" % (rule, name, what, departures))
            bad += 1
    for rule, name in sorted(set(listed) - seen):
        print("check-api: %s %s is listed in %s but the header follows the rule now: remove "
              "the line" % (rule, name, departures))
        bad += 1
    funcs = parse(open(header).read())[0]
    if not funcs:
        print("check-api: no LM_API function found in %s" % header)
        return 1
    if bad:
        print("check-api: %d problem(s)" % bad)
        return 1
    if listed:
        print("check-api: %d functions checked: no departure beyond the %d listed ones "
              "(tools/api-departures.txt)" % (len(funcs), len(listed)))
    else:
        print("check-api: %d functions checked: every rule holds (no departure listed)" % len(funcs))
    return 0


SELF_TEST_HEADER = """
typedef struct lm_thing_s *lm_thing_t;
typedef struct lm_good_config_t {
  size_t size; uint32_t magic; uint32_t version; int x;
} lm_good_config_t;
#define LM_GOOD_CONFIG_INIT {0}
typedef struct lm_bad_config_t {
  size_t size; int version;
} lm_bad_config_t;
/** ok */
LM_NODISCARD LM_API lm_status_t lm_thing_create(lm_thing_t *out, int n);
/** ok */
LM_API lm_status_t lm_thing_destroy(lm_thing_t *thing);
/** R1 */
LM_NODISCARD LM_API lm_status_t lm_Thing(int n);
/** R2 */
LM_API int lm_thing_count(lm_thing_t thing);
/** R3 */
LM_API lm_status_t lm_thing_size(lm_thing_t thing, int *n);
/** R4 */
LM_NODISCARD LM_API lm_status_t lm_thing_copy(lm_thing_t src, lm_thing_t *out);
LM_NODISCARD LM_API lm_status_t lm_thing_undocumented(lm_thing_t thing);
"""


def self_test():
    got = {(r, n) for r, n, _ in violations(SELF_TEST_HEADER)}
    want = {("R1", "lm_Thing"), ("R2", "lm_thing_count"), ("R3", "lm_thing_size"),
            ("R4", "lm_thing_copy"), ("R5", "lm_bad_config_t"), ("R6", "lm_thing_undocumented")}
    if got != want:
        print("check-api self-test: found %s, want %s" % (sorted(got), sorted(want)))
        return 1
    with tempfile.TemporaryDirectory() as d:  # an unlisted and a stale departure both fail
        h, dep = os.path.join(d, "h.h"), os.path.join(d, "dep.txt")
        open(h, "w").write(SELF_TEST_HEADER)
        open(dep, "w").write("".join("%s %s test\n" % w for w in sorted(want - {("R1", "lm_Thing")}))
                             + "R2 lm_gone stale\n")
        saved = sys.stdout
        sys.stdout = open(os.devnull, "w")
        try:
            rc = check(h, dep)
        finally:
            sys.stdout.close()
            sys.stdout = saved
        if rc != 1:
            print("check-api self-test: an unlisted and a stale departure passed")
            return 1
    print("check-api self-test: each rule caught")
    return 0


def main():
    top = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--header", default=os.path.join(top, "include", "localmap.h"))
    ap.add_argument("--departures", default=os.path.join(top, "tools", "api-departures.txt"))
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args()
    if a.self_test:
        return self_test()
    return check(a.header, a.departures)


if __name__ == "__main__":
    sys.exit(main())
