#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Compiles and runs every code sample of the documentation against a build tree, so that no page
can drift from the API (tests/script_samples.sh runs it in `make check`).

Documents: README.md, docs/guide-*.md and docs/man-examples.txt (the man pages' EXAMPLE blocks),
or the files given. One line per document: "PASS <doc>: ..." or "FAIL <doc>: ...", then the
failures with the compiler's or the program's output.

Markdown samples are fenced blocks whose info string starts with a language: c, cpp (c++),
fortran (f90), rust, python (py); sh only with the word `run`. Words after the language, or an
HTML comment `<!-- sample: WORDS -->` on the line before the fence, say more:
  fragment   not a whole program: compiled only, inside a function (C, C++, Rust), a BLOCK
             (Fortran) or as a module (Python), next to the declarations of tools/samples/context.*
             (the names fragments use without declaring them: mesh, x, rank, ...). Definitions
             that start in column 0 (functions, structs, modules) stay at file scope; a line
             `...` is dropped.
  np=N       run under tools/lm-mpirun at N ranks (default 2).
  norun      a whole program, compiled (and linked) but not run (a build.rs, say).
A whole program (no `fragment`) must be one: C and C++ with main, Fortran with `program`, Rust
with `fn main`. It must exit 0, and print what it says it prints:
  - a block fenced as `output` after it (before the next sample; a block of shell commands may
    stand between): each of its lines must appear in the output, as often as it is listed (any
    order: ranks print concurrently); `...` in a line matches any text;
  - a comment `prints: TEXT` in the code (// /* # !): TEXT must appear at least once.
docs/man-examples.txt: each "@@ names" block is a C fragment with the CHECK macro of
localmap(3); a block with `int main(` is also linked and run at np 2.

Usage: tools/check-samples.py [--build DIR] [--work DIR] [--langs c,cpp,...] [--list] [-v] [DOC...]
Environment: MPICC, MPICXX, MPIFC (else from LM_MPI: mpicc.mpich for mpich), CARGO, LM_PYTHON
(else $BUILD/python-venv), LM_MPIRUN (tools/lm-mpirun's launcher), LM_SAMPLE_TIMEOUT (s, 120).
A language whose toolchain is missing is not checked: a line "LM-SAMPLES-MISSING: <reason>"
says so (tests/script_samples.sh turns it into a skip, or a failure under LM_REQUIRE_BINDINGS=1).
Exit status: 0 when every sample checked passed, 1 otherwise, 2 on a malformed document.
"""
import argparse
import concurrent.futures
import glob
import os
import re
import shlex
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CTX = os.path.join(ROOT, 'tools', 'samples')
LANGS = {'c': 'c', 'cpp': 'cpp', 'c++': 'cpp', 'fortran': 'fortran', 'f90': 'fortran',
         'rust': 'rust', 'python': 'python', 'py': 'python', 'sh': 'sh', 'bash': 'sh'}
LANG_NAMES = {'c': 'C', 'cpp': 'C++', 'fortran': 'Fortran', 'rust': 'Rust', 'python': 'Python',
              'sh': 'shell'}
WORDS = {'fragment', 'norun', 'run'}
TIMEOUT = int(os.environ.get('LM_SAMPLE_TIMEOUT', '120'))


class DocError(Exception):
    pass


class Sample:
    def __init__(self, doc, line, lang, code, words, np=2):
        self.doc, self.line, self.lang, self.code = doc, line, lang, code
        self.fragment = 'fragment' in words
        self.norun = 'norun' in words
        self.np = np
        self.output = None        # the lines of an `output` block after it
        self.man_names = None     # the functions of a man-examples.txt block
        self.errors = []          # what went wrong (text)
        self.ran = False
        self.binary = None

    @property
    def ident(self):
        base = re.sub(r'[^a-z0-9]+', '_', os.path.basename(self.doc).lower()).strip('_')
        return '%s_l%d' % (base, self.line)

    @property
    def where(self):
        return '%s:%d' % (self.doc, self.line)

    def runs(self):
        return not self.fragment and not self.norun

    def fail(self, what, text=''):
        self.errors.append((what, text))


# ------------------------------------------------------------------------------------ parsing
def parse_words(text, where):
    words, np = set(), 2
    for w in text.split():
        if w.startswith('np='):
            try:
                np = int(w[3:])
            except ValueError:
                raise DocError('%s: bad %s' % (where, w))
        elif w in WORDS:
            words.add(w)
        else:
            raise DocError('%s: unknown sample word %r (known: fragment, norun, np=N; sh: run)' % (where, w))
    return words, np


def parse_markdown(path, rel):
    lines = open(path, encoding='utf-8').read().split('\n')
    samples, pending, last_fence_sample, i = [], '', None, 0
    while i < len(lines):
        line = lines[i]
        m = re.match(r'^\s*<!--\s*sample:\s*(.*?)\s*-->\s*$', line)
        if m:
            pending = m.group(1)
            i += 1
            continue
        m = re.match(r'^( {0,3})(`{3,}|~{3,})\s*(.*)$', line)
        if not m:
            if line.strip():
                pending = ''
            i += 1
            continue
        indent, fence, info = len(m.group(1)), m.group(2), m.group(3).strip()
        start = i + 1
        j = start
        while j < len(lines) and not re.match(r'^ {0,3}%s%s*\s*$' % (re.escape(fence[0]) * len(fence),
                                                                   re.escape(fence[0])), lines[j]):
            j += 1
        if j == len(lines):
            raise DocError('%s:%d: unclosed code fence' % (rel, i + 1))
        body = [l[indent:] if l[:indent].strip() == '' else l for l in lines[start:j]]
        parts = info.split(None, 1)
        lang = parts[0].lower() if parts else ''
        rest = (parts[1] if len(parts) > 1 else '') + ' ' + pending
        pending = ''
        where = '%s:%d' % (rel, i + 1)
        if lang == 'output':
            if last_fence_sample is None:
                raise DocError('%s: an output block that follows no sample' % where)
            last_fence_sample.output = [l for l in body if l.strip()]
            last_fence_sample = None
        elif lang in LANGS and (LANGS[lang] != 'sh' or 'run' in rest.split()):
            words, np = parse_words(rest, where)
            s = Sample(rel, i + 1, LANGS[lang], '\n'.join(body) + '\n', words, np)
            samples.append(s)
            last_fence_sample = s
        i = j + 1
    return samples


def parse_man_examples(path, rel):
    samples, cur = [], None
    for n, line in enumerate(open(path, encoding='utf-8').read().split('\n'), 1):
        if line.startswith('@@'):
            cur = Sample(rel, n, 'c', '', {'fragment'})
            cur.man_names = line[2:].split()
            samples.append(cur)
        elif cur is not None:
            cur.code += line + '\n'
    for s in samples:
        s.code = s.code.rstrip('\n') + '\n'
        if re.search(r'\bint\s+main\s*\(', s.code):
            s.fragment = False   # a whole program (with localmap(3)'s CHECK): linked and run
    return samples


# ------------------------------------------------------------------------------- fragments
FUNC_HEAD = re.compile(
    r'^(?!(?:if|for|while|switch|return|else|do|case|goto|sizeof)\b)'
    r'(?:(?:static|inline|extern|const|unsigned|signed|struct|constexpr|template\s*<[^>]*>)\s+)*'
    r'[A-Za-z_][\w:<>,]*(?:\s*[*&]+\s*|\s+)(?:[A-Za-z_][\w:<>]*(?:\s*[*&]+\s*|\s+))*'
    r'[A-Za-z_][\w:]*\s*\([^;=]*$')
TYPE_HEAD = re.compile(r'^(?:typedef\s+)?(?:struct|class|union|enum|namespace|template)\b[^;=]*$')


def strip_strings(line):
    line = re.sub(r'"(?:\\.|[^"\\])*"', '""', line)
    line = re.sub(r"'(?:\\.|[^'\\])'", "''", line)
    return re.sub(r'//.*$', '', line)


def is_definition(lines, i):
    """Whether the function head at lines[i] opens a body: after its parameter list closes, the
    next text (past const, noexcept, a trailing return type) is `{`."""
    text = ' '.join(strip_strings(l) for l in lines[i:i + 20])
    k = text.find('(')
    depth = 0
    while k < len(text):
        depth += {'(': 1, ')': -1}.get(text[k], 0)
        k += 1
        if depth == 0:
            break
    rest = text[k:].lstrip()
    return bool(re.match(r'(?:(?:const|noexcept|override|final)\s*|->[^;{]*)*\{', rest))


def split_c(code):
    """(file-scope lines, body lines), each as (index in the code, line): column-0 function and
    type definitions, #include and #define lines go to file scope; the rest is the body. Lines
    `...` are dropped."""
    top, body = [], []
    lines = code.split('\n')
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.strip() in ('...', '// ...', '/* ... */'):
            i += 1
            continue
        if line.startswith('#'):
            top.append((i, line))
            i += 1
            continue
        if FUNC_HEAD.match(line) and not is_definition(lines, i):
            body.append((i, line))   # a statement after all: `T v(args, {...});`
            i += 1
            continue
        if FUNC_HEAD.match(line) or TYPE_HEAD.match(line):
            depth, seen, j = 0, False, i
            while j < len(lines):
                t = strip_strings(lines[j])
                depth += t.count('{') - t.count('}')
                seen = seen or '{' in t
                if seen and depth <= 0:
                    break
                if not seen and t.rstrip().endswith(';'):
                    break   # a statement after all (a declaration, `T v(args);`)
                j += 1
            if seen:   # a definition: file scope
                top.extend((k, lines[k]) for k in range(i, min(j + 1, len(lines))))
            else:
                body.extend((k, lines[k]) for k in range(i, min(j + 1, len(lines))))
            i = j + 1
            continue
        body.append((i, line))
        i += 1
    return top, body


def c_source(s, lang):
    """The translation unit of a C or C++ sample, with #line so that messages name the document."""
    ctx = os.path.join(CTX, 'context.h' if lang == 'c' else 'context.hpp')
    doc = s.doc.replace('\\', '/')
    first = s.line + 1   # the code starts on the line after the fence (or the @@ line)
    if not s.fragment and not s.man_names:
        return '#line %d "%s"\n%s' % (first, doc, s.code)
    if not s.fragment:   # a man-page program: localmap(3)'s CHECK, then the code as it is
        return '#include "%s"\n#line %d "%s"\n%s' % (ctx, first, doc, s.code)
    top, body = split_c(s.code)
    # Keep the document's line numbers: file-scope lines first (each under its own #line), then
    # the body inside a function of the lm_local_fn_t signature (a fragment may `return st;` as
    # inside an lm_local_map fn, and use in, out, nin, nout).
    out = ['#include "%s"' % ctx]
    for n, l in top:
        out.append('#line %d "%s"' % (first + n, doc))
        out.append(l)
    sig = ('lm_status_t lm_sample_fragment(void *ud, lm_mesh_t mesh, int nin, const lm_arg_t *in, '
           'int nout, lm_arg_t *out)')
    out.append(('extern "C" ' if lang == 'cpp' else '') + sig + ';')
    out.append(sig + ' {')
    out.append('(void)ud; (void)mesh; (void)nin; (void)in; (void)nout; (void)out;')
    out.append('{')
    for n, l in body:
        out.append('#line %d "%s"' % (first + n, doc))
        out.append(l)
    out.append('}')
    out.append('return LM_SUCCESS;')
    out.append('}')
    return '\n'.join(out) + '\n'


F_UNIT = re.compile(r'^\s*(?:(?:recursive|pure|elemental|impure|module)\s+)*'
                    r'(?:(?:integer|real|logical|complex|character|type\s*\([^)]*\))(?:\s*\([^)]*\))?\s+)?'
                    r'(?:function|subroutine)\s+\w+', re.I)
F_END = re.compile(r'^\s*end\s*(?:function|subroutine)\b', re.I)
def fortran_source(s):
    """The source of a Fortran sample, with line markers (compiled with -cpp) so that messages
    name the document's lines."""
    first, doc = s.line + 1, s.doc
    mark = lambda n: '# %d "%s"' % (first + n, doc)
    if not s.fragment:
        return mark(0) + '\n' + s.code
    units, body, lines, i = [], [], s.code.split('\n'), 0
    while i < len(lines):
        if lines[i].strip() == '...':
            i += 1
            continue
        if F_UNIT.match(lines[i]):
            j = i
            while j < len(lines) and not F_END.match(lines[j]):
                j += 1
            for k in range(i, min(j + 1, len(lines))):
                units += [mark(k), lines[k]]
            i = j + 1
            continue
        body += [mark(i), lines[i]]
        i += 1
    ctx = open(os.path.join(CTX, 'context.f90'), encoding='utf-8').read()
    return ('program lm_sample_fragment\n%s\nblock\n%s\nend block\n%s\nend program\n'
            % (ctx, '\n'.join(body), ('contains\n' + '\n'.join(units)) if units else ''))


RUST_ITEM = re.compile(r'^(?:(?:pub\s+)?(?:fn|struct|enum|impl|use|mod|const|static|trait|type)\b|#\[)')


def rust_source(s):
    if not s.fragment:   # (after s.line blank lines: rustc's line numbers are the page's)
        return '\n' * s.line + s.code
    top, body = [], []
    lines, i = s.code.split('\n'), 0
    while i < len(lines):
        l = lines[i]
        if l.strip() == '...':
            i += 1
            continue
        if RUST_ITEM.match(l):
            depth, seen, j = 0, False, i
            while j < len(lines):
                t = strip_strings(lines[j])
                depth += t.count('{') - t.count('}')
                seen = seen or '{' in t
                if (seen and depth <= 0) or (not seen and t.rstrip().endswith(';')):
                    break
                j += 1
            top.extend(lines[i:j + 1])
            i = j + 1
            continue
        body.append(l)
        i += 1
    ctx = open(os.path.join(CTX, 'context.rs'), encoding='utf-8').read()
    return ctx.replace('/*@ITEMS@*/', '\n'.join(top)).replace('/*@BODY@*/', '\n'.join(body))


# --------------------------------------------------------------------------------- running
def sh(cmd, env=None, cwd=ROOT, timeout=None):
    try:
        p = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=timeout)
        return p.returncode, p.stdout.decode('utf-8', 'replace')
    except subprocess.TimeoutExpired as e:
        return 124, (e.stdout or b'').decode('utf-8', 'replace') + '\n(timed out after %ss)' % timeout


def pattern(text):
    return re.compile(r'\s*'.join(re.escape(part) if part != '...' else '.*?'
                                  for part in re.split(r'(\.\.\.)|\s+', text.strip()) if part))


def check_output(s, out):
    """The sample's stated output against what it printed (any order, counted)."""
    wanted = []
    for l in s.output or []:
        wanted.append(l)
    for m in re.finditer(r'(?://|/\*|#|!)\s*prints:\s*(.*?)\s*(?:\*/)?\s*$', s.code, re.M):
        wanted.append(m.group(1))
    need = {}
    for w in wanted:
        need[w] = need.get(w, 0) + 1
    for w, n in need.items():
        got = len(pattern(w).findall(out))
        if got < n:
            s.fail('output', 'expected %s%r, found it %d time(s) in:\n%s'
                   % ('%d x ' % n if n > 1 else '', w, got, out))
            return


class Checker:
    def __init__(self, args):
        self.args = args
        self.build = os.path.abspath(os.path.join(ROOT, args.build))
        self.work = os.path.abspath(args.work or os.path.join(self.build, 'samples'))
        self.langs = set(args.langs.split(',')) if args.langs else set(LANG_NAMES)
        self.missing = {}     # lang -> reason
        self.env = dict(os.environ)
        self.lib = os.path.join(self.build, 'lib')
        sfx = {'mpich': '.mpich', 'openmpi': '.openmpi'}.get(os.environ.get('LM_MPI', ''), '')
        self.mpicc = os.environ.get('MPICC') or 'mpicc' + sfx
        self.mpicxx = os.environ.get('MPICXX') or 'mpicxx' + sfx
        self.mpifc = os.environ.get('MPIFC') or 'mpif90' + sfx
        self.jobs = max(1, args.jobs)
        # A sanitizer build: programs link the sanitizer runtimes; Python and Rust preload them.
        deps = sh(['ldd', os.path.join(self.lib, 'liblocalmap.so')])[1]
        self.san_flags, preload = [], []
        for rt, flag in (('asan', 'address'), ('ubsan', 'undefined')):
            m = re.search(r'lib%s\S* => (\S+)' % rt, deps)
            if m:
                self.san_flags.append('-fsanitize=' + flag)
                preload.append(m.group(1))
        self.preload = (['env', 'LD_PRELOAD=' + ':'.join(preload),
                         'ASAN_OPTIONS=%sdetect_leaks=0' % (os.environ.get('ASAN_OPTIONS', '') + ':'
                                                            if os.environ.get('ASAN_OPTIONS') else '')]
                        if preload else [])
        self.link = ['-L' + self.lib, '-llocalmap', '-Wl,-rpath,' + self.lib]

    def log(self, *a):
        if self.args.verbose:
            print(*a, flush=True)

    def tool(self, lang, prog, why):
        if lang not in self.langs:
            return None
        path = shutil.which(prog) if prog else None
        if not path:
            self.missing[lang] = why
        return path

    # -- C and C++ -------------------------------------------------------------------------
    def cc(self, lang):
        return self.mpicc if lang == 'c' else self.mpicxx

    def flags(self, lang):
        std = ['-std=gnu11'] if lang == 'c' else ['-std=c++17', '-DOMPI_SKIP_MPICXX=1',
                                                  '-DMPICH_SKIP_MPICXX=1']
        return std + ['-I' + os.path.join(ROOT, 'include')] + shlex.split(os.environ.get('LM_SAMPLE_CPPFLAGS', ''))

    def build_c(self, samples, lang):
        if not self.tool(lang, self.cc(lang), '%s not found (apt-get install libopenmpi-dev)' % self.cc(lang)):
            return
        d = os.path.join(self.work, lang)
        os.makedirs(d, exist_ok=True)
        ext = '.c' if lang == 'c' else '.cpp'
        frags = [s for s in samples if s.fragment]
        progs = [s for s in samples if not s.fragment]
        # Fragments: one compiler run per document, syntax only; a message names the document's
        # line, which says which fragment.
        extra = (['-Werror=implicit-function-declaration', '-Werror=incompatible-pointer-types',
                  '-Werror=int-conversion'] if lang == 'c' else [])
        by_doc = {}
        for s in frags:
            src = os.path.join(d, s.ident + ext)
            with open(src, 'w') as f:
                f.write(c_source(s, lang))
            by_doc.setdefault(s.doc, []).append((s, src))
        jobs = []
        for doc, items in by_doc.items():   # (in self.jobs parts, compiled side by side)
            for k in range(self.jobs):
                part = items[k::self.jobs]
                if part:
                    cmd = [self.cc(lang), '-fsyntax-only'] + self.flags(lang) + extra + [src for _, src in part]
                    jobs.append((part, cmd))
        for s in progs:
            src = os.path.join(d, s.ident + ext)
            with open(src, 'w') as f:
                f.write(c_source(s, lang))
            s.binary = os.path.join(d, s.ident)
            cmd = ([self.cc(lang)] + self.flags(lang) + ['-Wall', '-Werror'] + self.san_flags +
                   ['-o', s.binary, src] + self.link + self.san_flags + ['-lm'])
            jobs.append(([(s, src)], cmd))
        self.run_jobs(jobs)

    def run_jobs(self, jobs):
        def one(job):
            items, cmd = job
            self.log('+', ' '.join(cmd))
            return items, cmd, sh(cmd)
        with concurrent.futures.ThreadPoolExecutor(self.jobs) as ex:
            for items, cmd, (rc, out) in ex.map(one, jobs):
                if rc == 0:
                    continue
                if len(items) == 1:
                    items[0][0].fail('compile', '$ %s\n%s' % (' '.join(cmd), out))
                    continue
                blamed = False
                for s, src in items:
                    end = s.line + s.code.count('\n') + 1
                    mine = [l for l in out.split('\n')
                            if any(l.startswith('%s:%d:' % (s.doc, n)) for n in range(s.line, end + 1))
                            or l.startswith(src)]
                    if mine:
                        blamed = True
                        s.fail('compile', '\n'.join(mine))
                if not blamed:
                    items[0][0].fail('compile', '$ %s\n%s' % (' '.join(cmd), out))

    # -- Fortran ----------------------------------------------------------------------------
    def build_fortran(self, samples):
        fc = self.tool('fortran', self.mpifc, '%s not found (apt-get install gfortran)' % self.mpifc)
        if not fc:
            return
        mod = os.path.join(self.build, 'fortran', 'include')
        flib = os.path.join(self.build, 'fortran', 'lib', 'liblocalmap_fortran.a')
        if not os.path.exists(os.path.join(mod, 'localmap.mod')) or not os.path.exists(flib):
            self.missing['fortran'] = 'no Fortran module in %s/fortran (make fortran BUILD=%s)' % (
                self.args.build, self.args.build)
            return
        d = os.path.join(self.work, 'fortran')
        jobs = []
        for s in samples:
            sd = os.path.join(d, s.ident)
            os.makedirs(sd, exist_ok=True)
            src = os.path.join(sd, s.ident + '.f90')
            with open(src, 'w') as f:
                f.write(fortran_source(s))
            base = [fc, '-std=f2018', '-cpp', '-ffree-line-length-none', '-I' + mod, '-J' + sd] + self.san_flags
            if s.fragment:
                cmd = base + ['-fsyntax-only', src]
            else:
                s.binary = os.path.join(sd, s.ident)
                cmd = base + ['-o', s.binary, src, flib] + self.link
            jobs.append(([(s, src)], cmd))
        self.run_jobs(jobs)

    # -- Rust: one crate, every sample an example, built once ----------------------------
    def build_rust(self, samples):
        if 'rust' not in self.langs:
            return
        cargo = shutil.which(os.environ.get('CARGO') or 'cargo')
        for c in (os.path.expanduser('~/.cargo/bin/cargo'), '/root/.cargo/bin/cargo'):
            if not cargo and os.access(c, os.X_OK):
                cargo = c
        if not cargo:
            self.missing['rust'] = 'cargo not found (PATH, ~/.cargo/bin; apt-get install cargo)'
            return
        crate = os.path.join(self.work, 'rust')
        ex = os.path.join(crate, 'examples')
        shutil.rmtree(ex, ignore_errors=True)
        os.makedirs(os.path.join(crate, 'src'), exist_ok=True)
        os.makedirs(ex)
        with open(os.path.join(crate, 'Cargo.toml'), 'w') as f:
            f.write('[package]\nname = "localmap-doc-samples"\nversion = "0.0.0"\nedition = "2021"\n'
                    'publish = false\n\n[dependencies]\nlocalmap = { path = "%s" }\n\n[workspace]\n'
                    % os.path.join(ROOT, 'bindings', 'rust', 'localmap'))
        with open(os.path.join(crate, 'src', 'lib.rs'), 'w') as f:
            f.write('// The documentation\'s Rust samples are the examples of this crate.\n')
        for s in samples:
            with open(os.path.join(ex, s.ident + '.rs'), 'w') as f:
                f.write(rust_source(s))
        env = dict(self.env)
        env.update(CARGO_TARGET_DIR=os.path.join(self.work, 'rust-target'), CARGO_NET_OFFLINE='true',
                   LOCALMAP_LIB_DIR=self.lib, LOCALMAP_INCLUDE_DIR=os.path.join(ROOT, 'include'))
        env.pop('PKG_CONFIG_PATH', None)
        if self.san_flags:
            env['LOCALMAP_LINK'] = 'dynamic'
        env['PATH'] = os.path.dirname(cargo) + os.pathsep + env.get('PATH', '')
        cmd = [cargo, 'build', '--offline', '--examples', '--quiet', '--message-format=short']
        self.log('+', ' '.join(cmd))
        rc, out = sh(cmd, env=env, cwd=crate)
        if rc != 0:
            blamed = False
            for s in samples:
                mine = [l for l in out.split('\n') if 'examples/%s.rs:' % s.ident in l]
                if mine:
                    blamed = True
                    s.fail('compile', '\n'.join(
                        '%s (the sample of %s%s)' % (l, s.where, '' if s.fragment else "; its lines are the page's")
                        for l in mine))
            if not blamed:
                samples[0].fail('compile', '$ %s\n%s' % (' '.join(cmd), out))
        for s in samples:
            if not s.errors and not s.fragment:
                s.binary = os.path.join(self.work, 'rust-target', 'debug', 'examples', s.ident)

    # -- Python -----------------------------------------------------------------------------
    def python(self):
        py = os.environ.get('LM_PYTHON')
        for v in (os.path.join(self.build, 'python-venv'), os.path.join(ROOT, 'build', 'python-venv')):
            if not py and os.access(os.path.join(v, 'bin', 'python'), os.X_OK):
                py = os.path.join(v, 'bin', 'python')
        py = py or shutil.which('python3')
        if not py:
            return None, 'no python3 (make python-venv)'
        rc, out = sh([py, '-c', 'import numpy'])
        if rc != 0:
            return None, '%s lacks numpy (make python-venv)' % py
        return py, None

    def build_python(self, samples):
        if 'python' not in self.langs:
            return
        progs = [s for s in samples if not s.fragment]
        for s in samples:   # every sample compiles (syntax) with this interpreter
            try:
                compile(s.code, s.where, 'exec')
            except SyntaxError as e:
                s.fail('compile', 'SyntaxError: %s (%s line %s)' % (e.msg, s.doc, s.line + (e.lineno or 0)))
        if not progs:
            return
        py, why = self.python()
        if not py:
            self.missing['python'] = why
            return
        d = os.path.join(self.work, 'python')
        os.makedirs(d, exist_ok=True)
        for s in progs:   # (after s.line blank lines: a traceback's line numbers are the page's)
            src = os.path.join(d, s.ident + '.py')
            with open(src, 'w') as f:
                f.write('\n' * s.line + s.code)
            s.binary = [py, src]

    # -- shell ------------------------------------------------------------------------------
    def build_sh(self, samples):
        d = os.path.join(self.work, 'sh')
        os.makedirs(d, exist_ok=True)
        for s in samples:
            src = os.path.join(d, s.ident + '.sh')
            with open(src, 'w') as f:
                f.write(s.code)
            s.binary = ['bash', '-euo', 'pipefail', src]

    # -- runs -------------------------------------------------------------------------------
    def run(self, s):
        env = dict(self.env)
        env.setdefault('BUILD', self.args.build)
        if s.lang == 'sh':
            cmd = s.binary
        else:
            prog = s.binary if isinstance(s.binary, list) else [s.binary]
            if s.lang == 'python':
                env['LOCALMAP_LIBRARY'] = os.path.join(self.lib, 'liblocalmap.so.1')
                env['PYTHONPATH'] = os.path.join(ROOT, 'bindings', 'python') + (
                    os.pathsep + env['PYTHONPATH'] if env.get('PYTHONPATH') else '')
                env['PYTHONDONTWRITEBYTECODE'] = '1'
            if s.lang in ('python', 'rust'):
                prog = self.preload + prog
            if s.lang == 'rust' and self.preload:   # (linked to liblocalmap.so, no rpath)
                prog = prog[:1] + ['LD_LIBRARY_PATH=' + self.lib + os.pathsep + env.get('LD_LIBRARY_PATH', '')] + prog[1:]
            cmd = ['bash', os.path.join(ROOT, 'tools', 'lm-mpirun'), str(s.np)] + prog
        self.log('+', ' '.join(cmd))
        t0 = time.time()
        rc, out = sh(cmd, env=env, timeout=TIMEOUT)
        s.ran = True
        s.seconds = time.time() - t0
        if rc != 0:
            s.fail('run', '$ %s\nexit status %d\n%s' % (' '.join(cmd), rc, out))
            return
        check_output(s, out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--build', default=os.environ.get('BUILD', 'build'))
    ap.add_argument('--work', help='scratch directory (default BUILD/samples)')
    ap.add_argument('--langs', help='comma-separated: c,cpp,fortran,rust,python,sh (default all)')
    ap.add_argument('--list', action='store_true', help='list the samples found, build nothing')
    ap.add_argument('-j', '--jobs', type=int, default=2)
    ap.add_argument('-v', '--verbose', action='store_true')
    ap.add_argument('docs', nargs='*')
    args = ap.parse_args()
    os.chdir(ROOT)
    docs = args.docs or (['README.md'] + sorted(glob.glob('docs/guide-*.md')) + ['docs/man-examples.txt'])
    t0 = time.time()
    samples, per_doc = [], {}
    try:
        for doc in docs:
            rel = os.path.relpath(os.path.abspath(doc), ROOT)
            found = (parse_man_examples if rel.endswith('.txt') else parse_markdown)(doc, rel)
            per_doc[rel] = found
            samples.extend(found)
    except (DocError, OSError) as e:
        print('FAIL (documents) %s' % e)
        return 2
    bad = []
    for s in samples:
        if s.fragment and s.output is not None:
            bad.append('%s: a fragment with an output block (fragments are not run)' % s.where)
        if not s.fragment and not s.man_names and s.lang != 'sh':
            whole = {'c': r'\bint\s+main\s*\(', 'cpp': r'\bint\s+main\s*\(',
                     'fortran': r'(?im)^\s*program\s+\w+', 'rust': r'\bfn\s+main\s*\(',
                     'python': r''}[s.lang]
            if not re.search(whole, s.code):
                bad.append('%s: a %s sample that is not a whole program: mark it `fragment`'
                           % (s.where, LANG_NAMES[s.lang]))
    if bad:
        for b in bad:
            print('FAIL (documents) %s' % b)
        return 2
    if args.list:
        for s in samples:
            print('%-32s %-8s %s%s' % (s.where, s.lang, 'fragment' if s.fragment else
                                        'norun' if s.norun else 'run np=%d' % s.np,
                                        ' (output: %d lines)' % len(s.output) if s.output else ''))
        return 0
    ck = Checker(args)
    for d in ('c', 'cpp', 'fortran', 'python', 'sh'):   # (rust-target stays: cargo's cache)
        shutil.rmtree(os.path.join(ck.work, d), ignore_errors=True)
    os.makedirs(ck.work, exist_ok=True)
    by_lang = {}
    for s in samples:
        by_lang.setdefault(s.lang, []).append(s)
    for lang in ('c', 'cpp'):
        if by_lang.get(lang):
            ck.build_c(by_lang[lang], lang)
    if by_lang.get('fortran'):
        ck.build_fortran(by_lang['fortran'])
    if by_lang.get('rust'):
        ck.build_rust(by_lang['rust'])
    if by_lang.get('python'):
        ck.build_python(by_lang['python'])
    if by_lang.get('sh') and 'sh' in ck.langs:
        ck.build_sh(by_lang['sh'])
    t_build = time.time() - t0
    for s in samples:
        if s.runs() and not s.errors and s.lang in ck.langs and s.lang not in ck.missing and s.binary:
            ck.run(s)
    failed = 0
    for doc, found in per_doc.items():
        checked = [s for s in found if s.lang in ck.langs and s.lang not in ck.missing]
        bad = [s for s in checked if s.errors]
        ran = [s for s in checked if s.ran]
        langs = sorted({LANG_NAMES[s.lang] for s in checked})
        nps = sorted({s.np for s in ran})
        what = '%d sample(s) (%s): %d run%s, %d compiled only' % (
            len(checked), ', '.join(langs) or 'none', len(ran),
            ' at np %s' % '/'.join(map(str, nps)) if nps else '', len(checked) - len(ran))
        if len(checked) < len(found):
            what += '; %d not checked (%s)' % (len(found) - len(checked), ', '.join(sorted(
                {LANG_NAMES[s.lang] for s in found if s not in checked})))
        if not checked and found:
            print('SKIP %s: %d sample(s), not checked (%s: toolchain missing)' % (doc, len(found), ', '.join(
                sorted({LANG_NAMES[s.lang] for s in found}))))
            continue
        if bad:
            failed += 1
            print('FAIL %s: %s; %d failed: %s' % (doc, what, len(bad), ', '.join(
                '%s (%s)' % (s.where, s.errors[0][0]) for s in bad)))
        else:
            print('PASS %s: %s' % (doc, what))
    for s in samples:
        for what, text in s.errors:
            print('\n---- %s sample at %s: %s failed' % (LANG_NAMES[s.lang], s.where, what))
            print(text.rstrip())
    for lang, why in sorted(ck.missing.items()):
        n = sum(1 for s in samples if s.lang == lang)
        print('LM-SAMPLES-MISSING: %d %s sample(s) not checked: %s' % (n, LANG_NAMES[lang], why))
    print('samples: %d in %d document(s), %.1f s (build %.1f s, runs %.1f s)' % (
        len(samples), len(per_doc), time.time() - t0, t_build, time.time() - t0 - t_build))
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
