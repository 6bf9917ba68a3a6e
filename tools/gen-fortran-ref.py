#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Writes docs/fortran-reference.md, the reference of the Fortran module `localmap` as plain
markdown (readable with less, man-free, no browser), from bindings/fortran/localmap.f90 and the
files it includes: every public procedure (generic interfaces merged into one signature per
argument list, the kinds they take as alternatives), with its dummy arguments (type, attributes,
intent, optional) and its `!>` comment, the C functions it ends up calling; every public type with
its components; every public named constant with its value; the callback interface; the bind(C)
layer `lmc_*`. Procedures are grouped as the C functions they wrap are in include/localmap.h's
sections.

Usage: tools/gen-fortran-ref.py [--check] [--source F90] [--output MD]
  (default)  writes the output (docs/fortran-reference.md) when its content changes.
  --check    writes nothing; exits 1 with a diff when the output is stale (tests/script_man.sh).
`make fortran-ref` (also run by `make docs` and `make api-generate`) is the first form.
Needs python3 only. It reads the module as a Fortran compiler would (includes, continuations,
`;`), but only what a module's specification part and procedure headers use."""
import argparse
import difflib
import os
import re
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
SOURCE = 'bindings/fortran/localmap.f90'
OUTPUT = 'docs/fortran-reference.md'
HEADER_C = 'include/localmap.h'  # its sections title the reference's


# ---------------------------------------------------------------------------------- statements
class Stmt:
    def __init__(self, text, doc, banner, origin, line, trail):
        self.text, self.doc, self.banner, self.origin, self.line, self.trail = \
            text, doc, banner, origin, line, trail

    def __repr__(self):
        return f'{self.origin}:{self.line}: {self.text}'


def split_code_comment(line):
    """(code, comment) of a free-form line: '!' outside strings starts the comment."""
    q = None
    for i, c in enumerate(line):
        if q:
            if c == q:
                q = None
        elif c in '\'"':
            q = c
        elif c == '!':
            return line[:i], line[i:]
    return line, ''


def split_top(s, sep):
    """s split at `sep` characters outside parentheses and strings."""
    out, depth, q, cur = [], 0, None, ''
    for c in s:
        if q:
            if c == q:
                q = None
        elif c in '\'"':
            q = c
        elif c in '([':
            depth += 1
        elif c in ')]':
            depth -= 1
        elif c == sep and depth == 0:
            out.append(cur)
            cur = ''
            continue
        cur += c
    out.append(cur)
    return [x.strip() for x in out]


def read_lines(path, rel):
    """(origin, line number, text) of a file with its `include "x"` lines replaced by x."""
    out = []
    with open(path, encoding='utf-8') as fh:
        for no, ln in enumerate(fh.read().split('\n'), 1):
            m = re.match(r'^\s*include\s+["\']([^"\']+)["\']\s*$', ln, re.I)
            if m:
                inc = os.path.join(os.path.dirname(path), m.group(1))
                out += read_lines(inc, os.path.join(os.path.dirname(rel), m.group(1)))
            else:
                out.append((rel, no, ln))
    return out


def statements(lines):
    """The statements, each with the `!>` comment just before it and the banner it is under.
    A banner is a plain comment line between two lines of '=' or '-' rules."""
    out, doc, banner = [], [], ''
    i = 0
    while i < len(lines):
        origin, no, ln = lines[i]
        s = ln.strip()
        if re.match(r'^!\s*[=-]{10,}\s*$', s) and i + 2 < len(lines) and \
                re.match(r'^!\s*[=-]{10,}\s*$', lines[i + 2][2].strip()):
            t = lines[i + 1][2].strip()
            banner = re.sub(r'^!\s*', '', t)
            banner = re.sub(r'\s*\(.*$', '', banner)
            i += 3
            continue
        if s.startswith('!>'):
            doc.append(re.sub(r'^!>\s?', '', s))
            i += 1
            continue
        if not s or s.startswith('!'):
            i += 1
            continue
        code, comment = split_code_comment(ln)
        text, trail = code.strip(), comment
        while text.endswith('&'):
            text = text[:-1].rstrip()
            i += 1
            while i < len(lines) and (not lines[i][2].strip() or lines[i][2].strip().startswith('!')):
                i += 1
            if i >= len(lines):
                break
            c2, com2 = split_code_comment(lines[i][2])
            c2 = c2.strip()
            if c2.startswith('&'):
                c2 = c2[1:]
            else:
                c2 = ' ' + c2
            text += c2
            trail = com2 or trail
        parts = split_top(text, ';')
        for k, p in enumerate(p for p in parts if p):
            out.append(Stmt(p, doc if k == 0 else [], banner, origin, no,
                            trail.lstrip('!').strip() if k == len(parts) - 1 else ''))
        doc = []
        i += 1
    return out


# ------------------------------------------------------------------------------ declarations
TYPESPEC = r'(?:integer|real|complex|logical|character|double\s+precision|doubleprecision|type|class|procedure)' \
           r'\s*(?:\((?:[^()]|\([^()]*\))*\)|\*\d+)?'


class Decl:
    """One entity of a type declaration statement: typespec, attributes, name, dims, init."""
    def __init__(self, typespec, attrs, name, dims, init, trail):
        self.typespec, self.attrs, self.name, self.dims, self.init, self.trail = \
            typespec, attrs, name, dims, init, trail

    def key(self):
        return (self.typespec, tuple(self.attrs), self.dims)

    def render(self, name=None):
        a = ''.join(', ' + x for x in self.attrs)
        return f'{self.typespec}{a} :: {name or self.name}{self.dims}'


def norm_typespec(t):
    t = re.sub(r'\s+', '', t)
    t = re.sub(r'^(integer|real|complex|logical|character|type|class|procedure)', r'\1', t, flags=re.I)
    return t


def parse_decl(st):
    m = re.match(r'^(' + TYPESPEC + r')\s*((?:,[^:]*?)?)\s*::\s*(.*)$', st.text, re.I)
    if not m:
        return None
    typespec = norm_typespec(m.group(1))
    attrs = [re.sub(r'\s+', '', a) if a.lower().startswith(('intent', 'dimension')) else a
             for a in split_top(m.group(2).lstrip(','), ',') if a]
    out = []
    for ent in split_top(m.group(3), ','):
        em = re.match(r'^(\w+)\s*(\((?:[^()]|\([^()]*\))*\))?\s*(?:(=>?)\s*(.*))?$', ent, re.S)
        if not em:
            continue
        dims = re.sub(r'\s+', '', em.group(2) or '')
        dims = dims.replace(',', ', ') if dims else ''
        init = re.sub(r'\s+', ' ', em.group(4)).strip() if em.group(4) is not None else None
        out.append(Decl(typespec, attrs, em.group(1), dims, init, st.trail))
    return out


def has_attr(d, name):
    return any(a.lower() == name or a.lower().startswith(name + '(') for a in d.attrs)


# -------------------------------------------------------------------------------- procedures
HEADER = re.compile(r'^((?:(?:pure|elemental|impure|recursive|module|non_recursive)\s+|'
                    + TYPESPEC + r'\s+)*)(subroutine|function)\s+(\w+)\s*(?:\(([^)]*)\))?\s*(.*)$', re.I)


class Proc:
    def __init__(self, st, m):
        self.doc, self.banner, self.origin, self.line = st.doc, st.banner, st.origin, st.line
        prefix = m.group(1) or ''
        self.kind = m.group(2).lower()
        self.name = m.group(3)
        self.args = [a.strip() for a in (m.group(4) or '').split(',') if a.strip()]
        rest = m.group(5) or ''
        rm = re.search(r'\bresult\s*\(\s*(\w+)\s*\)', rest, re.I)
        self.result = rm.group(1) if rm else (self.name if self.kind == 'function' else None)
        bm = re.search(r'\bbind\s*\(\s*c\s*(?:,\s*name\s*=\s*["\']([^"\']*)["\'])?\s*\)', rest, re.I)
        self.bind = (bm.group(1) or self.name) if bm else None
        tm = re.search(TYPESPEC, prefix, re.I)
        self.rtype = norm_typespec(tm.group(0)) if tm else None
        self.decls = {}
        self.calls = set()

    def add_body(self, st):
        ds = parse_decl(st)
        if ds:
            for d in ds:
                self.decls.setdefault(d.name.lower(), d)
            return
        for c in re.findall(r'\b(\w+)\s*\(', st.text):
            self.calls.add(c.lower())
        for c in re.findall(r'\bcall\s+(\w+)', st.text, re.I):
            self.calls.add(c.lower())

    def result_parts(self):
        """(type prefix of the header, result clause, declaration line of the result) of a
        function: `integer function f(x)`, or `function f(x) result(r)` with `r`'s declaration."""
        if self.kind != 'function':
            return None, '', None
        d = self.decls.get((self.result or '').lower())
        clause = f' result({self.result})' if self.result and self.result.lower() != self.name.lower() else ''
        if d is None:
            return self.rtype, clause, None
        if clause or d.attrs or d.dims:
            return None, clause, d.render()
        return d.typespec, '', None

    def result_type(self):
        return self.result_parts()

    def arg_decls(self):
        return [self.decls.get(a.lower()) for a in self.args]


def read_proc(stmts, i):
    """The procedure whose header is stmts[i]: (Proc, index after its end)."""
    m = HEADER.match(stmts[i].text)
    p = Proc(stmts[i], m)
    depth = 1
    i += 1
    while i < len(stmts):
        t = stmts[i].text
        if re.match(r'^end\s*(subroutine|function)\b', t, re.I) or (re.match(r'^end$', t, re.I) and depth == 1):
            depth -= 1
            if depth == 0:
                return p, i + 1
        elif HEADER.match(t) and not re.match(r'^end\b', t, re.I):
            depth += 1
        elif depth == 1:
            p.add_body(stmts[i])
        i += 1
    raise SystemExit(f'gen-fortran-ref: {p.origin}:{p.line}: no end of {p.name}')


# ---------------------------------------------------------------------------------- module
class Module:
    def __init__(self):
        self.doc = []
        self.public = []          # [[names of one public statement], ...], in order
        self.public_at = []       # origin of each public statement
        self.constants = []       # (doc, banner, [Decl])
        self.types = []           # (name, doc, banner, attrs, [Decl], finals)
        self.generics = {}        # name -> {'doc': [...], 'specifics': [...], 'order': n}
        self.interfaces = []      # Procs of interface bodies (bind(C) and others)
        self.abstract = []        # Procs of abstract interfaces
        self.procs = {}           # name (lower) -> Proc of the contains part


def parse_module(stmts):
    mod = Module()
    i, part = 0, 'before'
    while i < len(stmts):
        st = stmts[i]
        t = st.text
        tl = t.lower()
        if part == 'before':
            if re.match(r'^module\s+\w+$', t, re.I):
                mod.doc = st.doc
                part = 'spec'
            i += 1
            continue
        if re.match(r'^end\s+module\b', tl) or tl == 'end module':
            break
        if part == 'spec':
            if tl == 'contains':
                part = 'procs'
                i += 1
                continue
            m = re.match(r'^(abstract\s+)?interface\b\s*(.*)$', t, re.I)
            if m:
                i = read_interface(mod, stmts, i, bool(m.group(1)), m.group(2).strip())
                continue
            if re.match(r'^type\b(?!\s*\()', t, re.I):
                i = read_type(mod, stmts, i)
                continue
            m = re.match(r'^public\s*(?:::)?\s*(.*)$', t, re.I)
            if m and m.group(1):
                mod.public.append(split_top(m.group(1), ','))
                mod.public_at.append(st.origin)
                i += 1
                continue
            ds = parse_decl(st)
            if ds and any(has_attr(d, 'parameter') for d in ds):
                mod.constants.append((st.doc, st.banner, ds))
            i += 1
            continue
        # the procedures
        if HEADER.match(t):
            p, i = read_proc(stmts, i)
            mod.procs[p.name.lower()] = p
            continue
        i += 1
    return mod


def read_interface(mod, stmts, i, abstract, name):
    doc, banner = stmts[i].doc, stmts[i].banner
    i += 1
    specifics = []
    while i < len(stmts):
        t = stmts[i].text
        if re.match(r'^end\s*interface\b', t, re.I):
            i += 1
            break
        m = re.match(r'^(?:module\s+)?procedure\s*(?:::)?\s*(.*)$', t, re.I)
        if m and name:
            specifics += split_top(m.group(1), ',')
            i += 1
            continue
        if HEADER.match(t):
            p, i = read_proc(stmts, i)
            if abstract and not p.doc:
                p.doc = doc
            (mod.abstract if abstract else mod.interfaces).append(p)
            continue
        i += 1
    if name:
        g = mod.generics.setdefault(re.sub(r'\s+', '', name), {'doc': [], 'specifics': [],
                                                            'order': len(mod.generics), 'banner': banner})
        if doc:
            g['doc'] += ([''] if g['doc'] else []) + doc
        g['specifics'] += specifics
    return i


def read_type(mod, stmts, i):
    st = stmts[i]
    m = re.match(r'^type\s*((?:,[^:]*?)?)\s*(?:::)?\s*(\w+)$', st.text, re.I)
    attrs = split_top(m.group(1).lstrip(','), ',') if m and m.group(1) else []
    name = m.group(2) if m else st.text
    comps, finals, in_contains = [], [], False
    i += 1
    while i < len(stmts):
        t = stmts[i].text
        if re.match(r'^end\s*type\b', t, re.I):
            i += 1
            break
        if t.lower() == 'contains':
            in_contains = True
        elif in_contains:
            fm = re.match(r'^final\s*::\s*(.*)$', t, re.I)
            if fm:
                finals += split_top(fm.group(1), ',')
        else:
            comps += parse_decl(stmts[i]) or []
        i += 1
    mod.types.append((name, st.doc, st.banner, [a for a in attrs if a], comps, finals))
    return i


# ---------------------------------------------------------------------------------- render
def sig_lines(p, name, args_opt, decl_lines):
    """The header, the argument declarations and a function's result declaration; an operator
    or assignment as the expression it defines. Optional arguments in brackets:
    "lm_x(a, b [, c] [, ierr])"."""
    parts, first = [], True
    for a, opt in args_opt:
        parts.append((f' [{"" if first else ", "}{a}]') if opt else (('' if first else ', ') + a))
        first = False
    args = ''.join(parts).strip()
    prefix, clause, rdecl = p.result_parts()
    m = re.match(r'^(assignment|operator)\((.*)\)$', name)
    if m and len(args_opt) == 2:
        op = m.group(2) if m.group(1) == 'operator' else '='
        head = f'{args_opt[0][0]} {op} {args_opt[1][0]}'
        if prefix:
            head += f'   ! {prefix}'
    elif p.kind == 'function':
        head = f'{prefix + " " if prefix else ""}function {name}({args}){clause}'
    else:
        head = f'subroutine {name}({args})'
    return [head] + decl_lines + (['  ' + rdecl] if rdecl else [])


def factored(decls, argname):
    """The declaration lines of one dummy argument that varies between specifics."""
    keys = []
    for d in decls:
        if d.key() not in keys:
            keys.append(d.key())
    if len(keys) == 1:
        return [decls[0].render(argname)]
    attrs = {k[1] for k in keys}
    types = list(dict.fromkeys(k[0] for k in keys))
    dims = list(dict.fromkeys(k[2] for k in keys))
    if len(attrs) == 1 and len(keys) == len(types) * len(dims):
        a = ''.join(', ' + x for x in keys[0][1])
        names = ' | '.join(f'{argname}{d}' for d in dims)
        return [f'{" | ".join(types)}{a} :: {names}']
    return [Decl(k[0], list(k[1]), argname, k[2], None, '').render() + ('' if j == 0 else '  ! or')
            for j, k in enumerate(keys)]


def merged_signatures(name, procs):
    """Signature blocks (list of lines) of a generic's specifics: one per argument list, the
    declarations that differ shown as alternatives where they vary independently."""
    groups = {}
    for p in procs:
        groups.setdefault((p.kind, tuple(a.lower() for a in p.args)), []).append(p)
    blocks = []
    for (_, args), ps in groups.items():
        decls = [p.arg_decls() for p in ps]
        varying = [j for j in range(len(args))
                   if len({(d[j].key() if d[j] else None) for d in decls}) > 1]
        combos = {tuple(d[j].key() for j in varying) for d in decls}
        per = 1
        for j in varying:
            per *= len({d[j].key() for d in decls})
        rt = {p.result_type() for p in ps}
        if len(ps) > 1 and (len(combos) != per or len(rt) > 1):
            for p in ps:  # they vary together: each specific on its own
                blocks.append(([p], signature(p, name)))
            continue
        p = ps[0]
        opt = [(a, bool(decls[0][j] and has_attr(decls[0][j], 'optional'))) for j, a in enumerate(p.args)]
        dl = []
        for j, a in enumerate(p.args):
            if decls[0][j] is None:
                dl.append(f'  ! {a}: (no declaration found)')
                continue
            dl += ['  ' + ln for ln in factored([d[j] for d in decls], a)]
        blocks.append((ps, sig_lines(p, name, opt, dl)))
    return blocks


def signature(p, name=None):
    name = name or p.name
    decls = p.arg_decls()
    opt = [(a, bool(d and has_attr(d, 'optional'))) for a, d in zip(p.args, decls)]
    dl = ['  ' + (d.render(a) if d else f'! {a}: (no declaration found)') for a, d in zip(p.args, decls)]
    return sig_lines(p, name, opt, dl)


def c_calls(mod, procs, c_names):
    """The C functions (lm_*) the procedures call, through the module's own procedures."""
    seen, out, todo = set(), [], list(procs)
    helpers = {'c_', 'done_', 'bad_', 'c_string_'}
    while todo:
        p = todo.pop(0)
        if p.name.lower() in seen:
            continue
        seen.add(p.name.lower())
        for c in sorted(p.calls):
            if c in c_names and c_names[c] not in out:
                out.append(c_names[c])
            elif c in mod.procs and c not in helpers:
                todo.append(mod.procs[c])
            elif c in mod.generics:
                todo += [mod.procs[s.lower()] for s in mod.generics[c]['specifics'] if s.lower() in mod.procs]
    return [c for c in out if c not in ('lm_last_error_message', 'lm_status_string')] or out


def label(lines):
    """How a doc comment names the signature it belongs to: `lm_destroy(mesh)`, `lhs = rhs`
    (`type(lm_mesh)`)."""
    head = lines[0].split('   !')[0]
    head = re.sub(r'^(?:.*\bfunction|subroutine)\s+', '', head)
    head = re.sub(r'\s+result\(\w+\)$', '', head)
    if not re.match(r'^[\w]+\(', head) and len(lines) > 1:
        return f'`{head}` (`{lines[1].strip().split(",")[0].split(" ::")[0]}`)'
    return f'`{head}`'


def doc_text(lines):
    """A `!>` comment as markdown: its lines as they are (they read as plain text), with blank
    lines kept, and lines that start a list item or a table-like item left alone."""
    return '\n'.join(lines).strip('\n')


def anchor(title):
    return re.sub(r'[^a-z0-9 _-]', '', title.lower()).replace(' ', '-')


def render(mod, src_files, c_sections):
    pub = [n for grp in mod.public for n in grp]
    pub_l = {n.lower() for n in pub}
    c_names = {p.name.lower(): p.bind for p in mod.interfaces if p.bind and p.bind.startswith('lm_')}
    is_c_layer = {n.lower() for n in pub if n.lower() in c_names}
    type_names = {t[0].lower() for t in mod.types}
    const_names = {d.name.lower() for _, _, ds in mod.constants for d in ds}
    abstract_names = {p.name.lower() for p in mod.abstract}

    def public_type(t):
        return any(a.lower() == 'public' for a in t[3]) or t[0].lower() in pub_l

    def public_const(d):
        return has_attr(d, 'public') or d.name.lower() in pub_l

    # Where each public procedure name is defined: its specifics (a generic) or itself.
    def specifics_of(n):
        g = mod.generics.get(re.sub(r'\s+', '', n))
        if g is None:
            g = next((v for k, v in mod.generics.items() if k.lower() == n.lower()), None)
        if g:
            return [mod.procs[s.lower()] for s in g['specifics'] if s.lower() in mod.procs], g
        p = mod.procs.get(n.lower())
        return ([p] if p else []), None

    proc_names = [n for n in pub if n.lower() not in is_c_layer and n.lower() not in type_names
                  and n.lower() not in const_names and n.lower() not in abstract_names
                  and (specifics_of(n)[0] or specifics_of(n)[1])]
    reexported = [n for n in pub if n.lower() not in is_c_layer and n.lower() not in type_names
                  and n.lower() not in const_names and n.lower() not in abstract_names
                  and n not in proc_names]
    main_file = src_files[0]

    def home(n):
        """The section of include/localmap.h that holds the C function each specific of n wraps:
        of the C functions it calls, one whose name contains n's (lm_from_local:
        lm_dist_tensor_from_local), the likest if several. None when none does."""
        ps, _ = specifics_of(n)
        homes = []
        for p in ps:
            calls = [c for c in c_calls(mod, [p], c_names) if c in c_sections and n[3:] in c]
            if calls:
                best = max(calls, key=lambda c: difflib.SequenceMatcher(None, n, c).ratio())
                homes.append(c_sections[best])
        if len(set(homes)) >= 3:
            return 'Over several kinds of handle'
        return max(dict.fromkeys(homes), key=homes.count) if homes else None

    # Sections, in the order of the public statements: a statement whose names are mostly
    # defined under one banner goes there whole; otherwise each name goes under its own banner,
    # and one defined only in an included file (a typed generic) with the nearest name of its
    # statement that has one.
    sections, last = {}, 'Other procedures'
    for grp in mod.public:
        names = [n for n in grp if n in proc_names]
        homes = [home(n) for n in names]
        known = [h for h in homes if h]
        top = max(dict.fromkeys(known), key=known.count) if known else None
        for k, n in enumerate(names):
            if top and 2 * known.count(top) >= len(known):
                title = top
            else:
                near = [homes[j] for j in sorted(range(len(names)), key=lambda j: (abs(j - k), j)) if homes[j]]
                title = near[0] if near else last
            last = title
            sections.setdefault(title, [])
            if n not in sections[title]:
                sections[title].append(n)

    out = []
    w = out.append
    w('<!-- Generated by tools/gen-fortran-ref.py from ' + ', '.join(src_files)
      + f' (sections: {HEADER_C}): do not edit. Regenerate: make fortran-ref -->')
    w('# Fortran reference: module `localmap`')
    w('')
    w('The public interface of the Fortran module `localmap` (`use localmap`), generated from '
      f'`{main_file}` and the files it includes. Every procedure shows its dummy arguments as '
      'declared (type, attributes, intent); `[, x]` marks an optional argument. A generic name '
      'shows one signature per argument list, with `a | b` where its specific procedures take '
      'different types or ranks. "C:" names the functions of `include/localmap.h` a procedure '
      'ends up calling (their man pages: `man lm_mesh_create`); the sections are that '
      'header\'s.')
    w('')
    w('## The module')
    w('')
    w(doc_text(mod.doc))
    w('')
    w('## Contents')
    w('')
    for title, names in sections.items():
        w(f'- [{title}](#{anchor(title)}): ' + ', '.join(f'`{n}`' for n in names))
    w('- [Types](#types): ' + ', '.join(f'`{t[0]}`' for t in mod.types if public_type(t)))
    w('- [Named constants](#named-constants)')
    if mod.abstract:
        w('- [Callback interface](#callback-interface): ' + ', '.join(f'`{p.name}`' for p in mod.abstract))
    if is_c_layer:
        w('- [The C layer: `lmc_*`](#the-c-layer-lmc_)')
    w('')

    for title, names in sections.items():
        w(f'## {title}')
        w('')
        for n in names:
            ps, g = specifics_of(n)
            w(f'### `{n}`')
            w('')
            blocks = (merged_signatures(n, ps) if g else [([ps[0]], signature(ps[0], n))]) if ps else []
            docs = []
            if g and g['doc']:
                docs.append(doc_text(g['doc']))
            for ps_b, lines in blocks:
                for p in ps_b:
                    d = doc_text(p.doc)
                    if d and d not in docs:
                        docs.append(f'{label(lines)}: {d}' if len(blocks) > 1 and g else d)
            if blocks:
                w('```fortran')
                w('\n\n'.join('\n'.join(lines) for _, lines in blocks))
                w('```')
                w('')
            for d in docs:
                w(d)
                w('')
            calls = c_calls(mod, ps, c_names)
            if calls:
                w('C: ' + ', '.join(f'`{c}`' for c in calls))
                w('')

    w('## Types')
    w('')
    cur = None
    for name, doc, banner, attrs, comps, finals in mod.types:
        if not public_type((name, doc, banner, attrs, comps, finals)):
            continue
        if banner != cur:
            cur = banner
            w(f'### {banner}')
            w('')
        w(f'#### `{name}`')
        w('')
        w('```fortran')
        a = ''.join(', ' + x for x in attrs if x.lower() != 'public')
        w(f'type{a} :: {name}')
        for d in comps:
            init = f' = {d.init}' if d.init is not None else ''
            tr = f'   ! {d.trail}' if d.trail else ''
            w(f'  {d.render()}{init}{tr}')
        if finals:
            w('contains')
            w('  final :: ' + ', '.join(finals))
        w('end type')
        w('```')
        w('')
        if doc:
            w(doc_text(doc))
            w('')
        ps, g = specifics_of(name)
        if g and ps:  # a generic of the type's name: its constructor
            w('Constructor:')
            w('')
            w('```fortran')
            w('\n\n'.join('\n'.join(lines) for _, lines in merged_signatures(name, ps)))
            w('```')
            w('')

    w('## Named constants')
    w('')
    for doc, banner, ds in mod.constants:
        ds = [d for d in ds if public_const(d)]
        if not ds:
            continue
        if doc:
            w(doc_text(doc))
            w('')
        w('```fortran')
        for d in ds:
            attrs = [x for x in d.attrs if x.lower() != 'public']
            a = ''.join(', ' + x for x in attrs)
            w(f'{d.typespec}{a} :: {d.name}{d.dims} = {d.init}')
        w('```')
        w('')

    if mod.abstract:
        w('## Callback interface')
        w('')
        for p in mod.abstract:
            w(f'### `{p.name}`')
            w('')
            w('```fortran')
            w('abstract interface')
            lines = signature(p)
            if p.bind:
                lines[0] = re.sub(r'(\))( result\(|$)', r'\1 bind(C)\2', lines[0], count=1)
            w('\n'.join('  ' + x for x in lines))
            w('end interface')
            w('```')
            w('')
            if p.doc:
                w(doc_text(p.doc))
                w('')

    if is_c_layer:
        w('## The C layer: `lmc_*`')
        w('')
        w('`bind(C)` interfaces of the C functions, one for one (`lmc_mesh_create` is '
          '`lm_mesh_create`, documented by its man page): C numbering, row-major shapes, handles '
          'as `type(c_ptr)`. For talking to C code; Fortran programs use the procedures above.')
        w('')
        w('```fortran')
        blocks = []
        for p in mod.interfaces:
            if p.name.lower() not in is_c_layer:
                continue
            decls = p.arg_decls()
            lines = signature(p)
            lines[0] = re.sub(r'\)( result\(|$)', f') bind(C, name="{p.bind}")\\1', lines[0], count=1)
            blocks.append('\n'.join(lines))
        w('\n\n'.join(blocks))
        w('```')
        w('')
    covered = ({n.lower() for ns in sections.values() for n in ns} | is_c_layer | abstract_names
               | {t[0].lower() for t in mod.types if public_type(t)}
               | {d.name.lower() for _, _, ds in mod.constants for d in ds if public_const(d)}
               | {n.lower() for n in reexported})
    missing = [n for n in pub if n.lower() not in covered]
    if missing:
        raise SystemExit('gen-fortran-ref: public names this script could not place: ' + ', '.join(missing))
    if reexported:
        w('## Re-exported from `iso_c_binding`')
        w('')
        w(', '.join(f'`{n}`' for n in reexported))
        w('')
    return '\n'.join(out).rstrip('\n') + '\n'


def c_header_sections(header):
    """{C function: the title of its section of the header}: a section starts with a banner
    comment (a line of dashes) whose first line is its title, up to a ':', '.' or ','."""
    out, title = {}, 'Other procedures'
    with open(os.path.join(ROOT, header), encoding='utf-8') as fh:
        lines = fh.read().split('\n')
    for k, ln in enumerate(lines):
        if re.match(r'^/\* -{10,}', ln) and k + 1 < len(lines):
            title = re.split(r'[:.,]', re.sub(r'^\s*\*\s?', '', lines[k + 1]), maxsplit=1)[0].strip()
        m = re.search(r'\bLM_API\b.*?\b(lm_\w+)\s*\(', ln) or re.match(r'^static inline .*?\b(lm_\w+)\s*\(', ln)
        if m:
            out.setdefault(m.group(1), title)
    return out


def generate(source):
    path = os.path.join(ROOT, source)
    lines = read_lines(path, source)
    files = list(dict.fromkeys(o for o, _, _ in lines))
    mod = parse_module(statements(lines))
    if not mod.procs or not mod.public:
        raise SystemExit(f'gen-fortran-ref: found no module procedures or public names in {source}')
    return render(mod, files, c_header_sections(HEADER_C))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--check', action='store_true')
    ap.add_argument('--source', default=SOURCE)
    ap.add_argument('--output', default=OUTPUT)
    a = ap.parse_args()
    text = generate(a.source)
    out = os.path.join(ROOT, a.output)
    old = open(out, encoding='utf-8').read() if os.path.exists(out) else ''
    if a.check:
        if old == text:
            print(f'gen-fortran-ref: {a.output} is current ({len(text.splitlines())} lines)')
            return 0
        diff = list(difflib.unified_diff(old.splitlines(), text.splitlines(), a.output,
                                         a.output + ' (from ' + a.source + ')', lineterm='', n=1))
        print('\n'.join(diff[:40]) + ('\n...' if len(diff) > 40 else ''))
        print(f'gen-fortran-ref: {a.output} is stale: run `make fortran-ref` and commit it')
        return 1
    if old != text:
        with open(out + '.tmp', 'w', encoding='utf-8') as fh:
            fh.write(text)
        os.replace(out + '.tmp', out)
        print(f'gen-fortran-ref: wrote {a.output} ({len(text.splitlines())} lines)')
    else:
        print(f'gen-fortran-ref: {a.output} unchanged')
    return 0


if __name__ == '__main__':
    sys.exit(main())
