#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Checks that the Python package's public API has docstrings, which are its reference
(`python3 -m pydoc localmap`, `help(localmap.Mesh)`): every class and function that
`localmap.__all__` exports, and every public method and property of those classes, including
those they inherit from the package's own private base classes. Names bound to values
(constants such as ERR_MPI) carry no docstring and are not checked.

Reads the source with `ast`: needs neither numpy nor the library. Exits 1 naming each item
without a docstring, 0 with a one-line summary. Run by tests/script_man.sh.
Usage: tools/check-py-docstrings.py [PACKAGE_DIR]   (default bindings/python/localmap)"""
import ast
import os
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))


def parse(path):
    with open(path, encoding='utf-8') as fh:
        return ast.parse(fh.read(), path)


def main():
    pkg = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, 'bindings/python/localmap')
    init = parse(os.path.join(pkg, '__init__.py'))
    exported, origin = None, {}
    for node in init.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == '__all__'
                                                for t in node.targets):
            exported = [ast.literal_eval(e) for e in node.value.elts]
        elif isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            for a in node.names:
                origin[a.asname or a.name] = (node.module, a.name)
    if not exported:
        print(f'check-py-docstrings: no __all__ list in {pkg}/__init__.py')
        return 1
    modules = {}

    def module(name):
        if name not in modules:
            tree = parse(os.path.join(pkg, name.replace('.', '/') + '.py'))
            modules[name] = {n.name: n for n in tree.body
                             if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))}
            for n in tree.body:  # X = Y, Y a class or function of the module: X is Y
                if isinstance(n, ast.Assign) and isinstance(n.value, ast.Name) and \
                        n.value.id in modules[name]:
                    for t in n.targets:
                        if isinstance(t, ast.Name):
                            modules[name].setdefault(t.id, modules[name][n.value.id])
        return modules[name]

    missing, checked, values = [], 0, 0
    for name in exported:
        if name in origin:
            defs = module(origin[name][0])
            node = defs.get(origin[name][1])
        else:
            defs = {n.name: n for n in init.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
            node = defs.get(name)
        if node is None:
            values += 1
            continue
        checked += 1
        if not ast.get_docstring(node):
            missing.append(name)
        if not isinstance(node, ast.ClassDef):
            continue
        # Its public methods and properties, and those of its bases defined in the same module.
        seen, todo = set(), [node]
        while todo:
            c = todo.pop(0)
            for item in c.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                        not item.name.startswith('_') and item.name not in seen:
                    seen.add(item.name)
                    checked += 1
                    if not ast.get_docstring(item):
                        missing.append(f'{name}.{item.name}' + ('' if c is node else f' (from {c.name})'))
            for b in c.bases:  # (an exported base is checked under its own name)
                if isinstance(b, ast.Name) and isinstance(defs.get(b.id), ast.ClassDef) and \
                        b.id not in exported:
                    todo.append(defs[b.id])
    if missing:
        print('The Python API has no docstring for:')
        print('\n'.join('  localmap.' + m for m in missing))
        print(f'check-py-docstrings: {len(missing)} of {checked} without a docstring')
        return 1
    print(f'check-py-docstrings: {checked} public classes, functions, methods and properties of '
          f'localmap.__all__ have docstrings ({values} names are values)')
    return 0


if __name__ == '__main__':
    sys.exit(main())
