#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Checks that the relative links of markdown files resolve to files or directories of the tree.

Links: inline `[text](target)` and images, reference definitions `[id]: target`, and HTML
`href="..."` / `src="..."`; not inside fenced code blocks or `code spans`. A target with a
scheme (https:, mailto:, ...) or only an #anchor is not checked; the #anchor and ?query of a
relative target are dropped (anchors are not checked); a target starting with / is read from the
repository root, as GitHub does.

Usage: tools/check-md-links.py [--root DIR] [FILE...]
Without FILEs: every markdown file of the tree that git tracks (or, outside a git checkout, every
*.md below DIR that is not in a build or hidden directory). Exits 1 naming each broken link with
its file and line, 0 with a one-line summary. Run by tests/script_man.sh."""
import argparse
import os
import re
import subprocess
import sys
from urllib.parse import unquote

INLINE = re.compile(r'!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+(?:"[^"]*"|\'[^\']*\'|\([^)]*\)))?\s*\)')
REFDEF = re.compile(r'^\s{0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)')
HTML = re.compile(r'\b(?:href|src)\s*=\s*"([^"]*)"', re.I)
SCHEME = re.compile(r'^[A-Za-z][A-Za-z0-9+.-]*:')


def md_files(root):
    try:
        out = subprocess.run(['git', '-C', root, 'ls-files', '-z', '--', '*.md'], capture_output=True,
                             check=True).stdout.decode()
        files = [f for f in out.split('\0') if f]
        if files:
            return sorted(f for f in files if os.path.isfile(os.path.join(root, f)))
    except (OSError, subprocess.CalledProcessError):
        pass
    files = []
    for d, subdirs, names in os.walk(root):
        subdirs[:] = [s for s in subdirs if not s.startswith('.') and not s.startswith('build')]
        files += [os.path.relpath(os.path.join(d, n), root) for n in names if n.endswith('.md')]
    return sorted(files)


def links(text):
    """(line number, target) of each link outside code."""
    fence = None
    for no, ln in enumerate(text.split('\n'), 1):
        m = re.match(r'^\s{0,3}(`{3,}|~{3,})', ln)
        if m:
            if fence is None:
                fence = m.group(1)[0] * len(m.group(1))
            elif m.group(1).startswith(fence):
                fence = None
            continue
        if fence is not None:
            continue
        ln = re.sub(r'(`+)(?:(?!\1).)+?\1', '', ln)  # code spans
        for rx in (INLINE, REFDEF, HTML):
            for t in rx.findall(ln):
                yield no, t.strip('<>')


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--root', default=os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
    ap.add_argument('files', nargs='*')
    a = ap.parse_args()
    root = os.path.abspath(a.root)
    files = a.files or md_files(root)
    bad, n = [], 0
    for f in files:
        path = f if os.path.isabs(f) else os.path.join(root, f)
        with open(path, encoding='utf-8') as fh:
            text = fh.read()
        for no, t in links(text):
            if not t or t.startswith('#') or SCHEME.match(t):
                continue
            n += 1
            target = unquote(re.split(r'[#?]', t, maxsplit=1)[0])
            if not target:
                continue
            if target.startswith('/'):
                dest = os.path.join(root, target.lstrip('/'))
            else:
                dest = os.path.join(os.path.dirname(path), target)
            if not os.path.exists(dest):
                bad.append(f'{os.path.relpath(path, root)}:{no}: link to {t}: no such file '
                           f'({os.path.relpath(os.path.normpath(dest), root)})')
    if bad:
        print('\n'.join(bad))
        print(f'check-md-links: {len(bad)} broken link(s) of {n} in {len(files)} files')
        return 1
    print(f'check-md-links: {n} relative links in {len(files)} markdown files resolve')
    return 0


if __name__ == '__main__':
    sys.exit(main())
