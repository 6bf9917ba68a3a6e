#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Checks built man pages (tools/gen-manpage.sh writes them: `make man`) for what a reader
follows out of a page:
  - every page has a SEE ALSO section that names at least one other page (a function page one
    besides the overview localmap(3));
  - every page SEE ALSO names is one of the pages given (their .TH names), or another package's
    page listed in EXTERNAL below;
  - every header file a page names (`#include <x.h>`, "see localmap_scalapack.h", ...) exists
    under include/, unless it is another package's header (SYSTEM_HEADERS below);
  - every path of the source tree a page names (docs/DESIGN.md, examples/..., ...) exists.
Usage: tools/check-man.py [--root DIR] PAGE_OR_DIR...   (a directory: its *.3 files)
Exits 1 naming each problem, 0 with a one-line summary. Run by tests/script_man.sh."""
import argparse
import os
import re
import sys

# Pages of other packages that localmap's pages may name.
EXTERNAL = {('mpirun', '1'), ('mpiexec', '1')}
# Headers of other packages that pages may name.
SYSTEM_HEADERS = {'mpi.h', 'dlpack.h', 'dlpack/dlpack.h', 'stdio.h', 'stdlib.h', 'stdint.h',
                  'stddef.h', 'string.h', 'cuda_runtime.h', 'cuda.h', 'nccl.h', 'complex.h'}
TREE_DIRS = ('docs', 'examples', 'bindings', 'tests', 'tools', 'include', 'api', 'src')


def plain(roff):
    """The text of roff source: no requests' names, no font escapes, roff escapes undone."""
    out = []
    for ln in roff.split('\n'):
        if ln.startswith('.\\"'):
            continue
        ln = re.sub(r'^\.(?:B|I|BR|RB|IR|RI|BI|IB|SM|SB|TP|IP|PP|P|LP|RS|RE|nf|fi|SS)\b\s*', '', ln)
        if ln.startswith('.'):
            continue
        ln = re.sub(r'\\f(?:\(..|\[[^]]*\]|.)', '', ln)
        ln = ln.replace('\\-', '-').replace('\\e', '\\').replace('\\(dq', '"').replace('\\&', '')
        ln = ln.replace('\\(bu', '*')
        ln = re.sub(r'"', '', ln) if ln.count('"') % 2 == 0 else ln
        out.append(ln)
    return '\n'.join(out)


def sections(roff):
    """{section title: roff source of its body}."""
    secs, cur = {}, None
    for ln in roff.split('\n'):
        m = re.match(r'^\.SH\s+"?([^"]*?)"?\s*$', ln)
        if m:
            cur = m.group(1)
            secs[cur] = []
            continue
        if cur is not None:
            secs[cur].append(ln)
    return {k: '\n'.join(v) for k, v in secs.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--root', default=os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
    ap.add_argument('pages', nargs='+')
    a = ap.parse_args()
    root = os.path.abspath(a.root)
    files = []
    for p in a.pages:
        if os.path.isdir(p):
            files += sorted(os.path.join(p, f) for f in os.listdir(p) if f.endswith('.3'))
        else:
            files.append(p)
    if not files:
        print('check-man: no pages given')
        return 1
    pages = {}
    for f in files:
        with open(f, encoding='utf-8') as fh:
            src = fh.read()
        m = re.search(r'^\.TH\s+(\S+)\s+(\S+)', src, re.M)
        if not m:
            print(f'{f}: no .TH line')
            return 1
        pages[(m.group(1).lower(), m.group(2))] = (f, src)
    problems = []
    nrefs = nheaders = 0
    for (name, sec), (f, src) in sorted(pages.items()):
        me = f'{name}({sec})'
        secs = sections(src)
        if 'SEE ALSO' not in secs:
            problems.append(f'{me}: no SEE ALSO section ({f})')
            continue
        refs = re.findall(r'([A-Za-z_][\w.:+-]*)\s?\((\d[a-z]*)\)', plain(secs['SEE ALSO']))
        others = [r for r in refs if r != (name, sec)]
        if not others:
            problems.append(f'{me}: SEE ALSO names no other page ({f})')
        elif name != 'localmap' and all(r == ('localmap', '3') for r in others):
            problems.append(f'{me}: SEE ALSO names only the overview localmap(3) ({f})')
        for r in refs:
            nrefs += 1
            if r not in pages and (r[0].lower(), r[1]) not in pages and r not in EXTERNAL:
                problems.append(f'{me}: SEE ALSO names {r[0]}({r[1]}), which is not a page '
                                f'(not among the {len(pages)} pages given, nor in check-man.py\'s '
                                f'EXTERNAL)')
        text = plain(src)
        for h in sorted(set(re.findall(r'(?<![\w/.-])((?:[\w-]+/)*[\w-]+\.(?:h|hpp|hh))\b', text))):
            nheaders += 1
            rel = h[len('include/'):] if h.startswith('include/') else h
            if rel in SYSTEM_HEADERS or os.path.isfile(os.path.join(root, 'include', rel)):
                continue
            problems.append(f'{me}: names the header {h}, which is not under include/ '
                            f'(nor another package\'s header listed in check-man.py)')
        for p in sorted(set(re.findall(r'(?<![\w/.-])((?:%s)/[\w./-]*[\w/])' % '|'.join(TREE_DIRS), text))):
            if not os.path.exists(os.path.join(root, p)):
                problems.append(f'{me}: names {p}, which the source tree does not have')
    if problems:
        print('\n'.join(problems))
        print(f'check-man: {len(problems)} problem(s) in {len(pages)} pages')
        return 1
    print(f'check-man: {len(pages)} pages: every SEE ALSO names pages that exist ({nrefs} references), '
          f'every header named exists ({nheaders} names)')
    return 0


if __name__ == '__main__':
    sys.exit(main())
