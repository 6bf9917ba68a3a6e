#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Checks that the Python package's public API has docstrings, which are its reference
(`python3 -m pydoc localmap`, `help(localmap.Mesh)`): every class and function that
`localmap.__all__` exports, and every public method and property of those classes, including
those they inherit from the package's own classes (private bases such as _Handle, the generated
*Calls classes of _wrappers.py); an exported base is checked under its own name. What Python's
own classes define (Exception.with_traceback, ...) is not checked, nor names bound to values
(constants such as ERR_MPI, __slots__ fields): they carry no docstring.

Imports the package and reads it with `inspect`, so it sees what the package builds at import
(`__all__` made of other lists, methods generated into _wrappers.py): localmap needs numpy and
the library (LOCALMAP_LIBRARY); tests/script_man.sh runs it with the Python of
build/python-venv. Exits 1 naming each item without a docstring, 2 when the package does not
import, 0 with a one-line summary.
Usage: tools/check-py-docstrings.py [PACKAGE_DIR]   (default bindings/python/localmap; the
package is imported from PACKAGE_DIR's parent under PACKAGE_DIR's name)"""
import importlib
import inspect
import os
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))


def own_doc(obj):
    """obj's own docstring (not one inherited from a base class), stripped."""
    if inspect.isclass(obj):
        doc = obj.__dict__.get('__doc__')
    elif isinstance(obj, (classmethod, staticmethod)):
        doc = obj.__func__.__doc__
    else:
        doc = getattr(obj, '__doc__', None)
    return doc.strip() if isinstance(doc, str) else ''


def members(cls, pkg, exported):
    """(name, defining class, attribute) of cls's public methods and properties, as attribute
    lookup finds them (the first class of the MRO defining the name), defined by the package's
    own classes other than exported bases (those are checked under their own names)."""
    out, seen = [], set()
    for c in cls.__mro__:
        for name, attr in c.__dict__.items():
            if name.startswith('_') or name in seen:
                continue
            seen.add(name)
            if not isinstance(attr, (property, classmethod, staticmethod)) and \
                    not inspect.isfunction(attr):
                continue  # a value, a __slots__ field
            module = c.__module__ or ''
            if module != pkg and not module.startswith(pkg + '.'):
                continue  # Python's own (Exception's, ...)
            if c is not cls and c in exported:
                continue
            out.append((name, c, attr))
    return out


def main():
    pkgdir = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                             os.path.join(ROOT, 'bindings/python/localmap'))
    pkg = os.path.basename(os.path.normpath(pkgdir))
    sys.path.insert(0, os.path.dirname(os.path.normpath(pkgdir)))
    try:
        mod = importlib.import_module(pkg)
    except Exception as e:  # noqa: BLE001 - reported, whatever it is
        print(f'check-py-docstrings: cannot import {pkg} from {pkgdir}: '
              f'{type(e).__name__}: {e}')
        print('  (localmap needs numpy and the library: run it with the Python of '
              'build/python-venv and LOCALMAP_LIBRARY=build/lib)')
        return 2
    if os.path.dirname(os.path.abspath(mod.__file__)) != pkgdir:
        print(f'check-py-docstrings: imported {pkg} from {mod.__file__}, not from {pkgdir}')
        return 2
    exported = getattr(mod, '__all__', None)
    if not exported:
        print(f'check-py-docstrings: {pkg} has no __all__')
        return 2
    absent = [n for n in exported if not hasattr(mod, n)]
    if absent:
        print(f'check-py-docstrings: {pkg}.__all__ names what the package does not define: '
              + ', '.join(absent))
        return 1
    objs = {n: getattr(mod, n) for n in exported}
    classes = [o for o in objs.values() if inspect.isclass(o)]
    missing, checked, values = [], 0, 0
    for name, obj in objs.items():
        if not (inspect.isclass(obj) or inspect.isroutine(obj)):
            values += 1
            continue
        checked += 1
        if not own_doc(obj):
            missing.append(name)
        if not inspect.isclass(obj):
            continue
        for attr_name, c, attr in members(obj, pkg, classes):
            checked += 1
            if not own_doc(attr):
                via = '' if c is obj else f' (from {c.__name__})'
                missing.append(f'{name}.{attr_name}{via}')
    if missing:
        print('The Python API has no docstring for:')
        print('\n'.join(f'  {pkg}.{m}' for m in missing))
        print(f'check-py-docstrings: {len(missing)} of {checked} without a docstring')
        return 1
    print(f'check-py-docstrings: {checked} public classes, functions, methods and properties of '
          f'{pkg}.__all__ have docstrings ({values} names are values)')
    return 0


if __name__ == '__main__':
    sys.exit(main())
