# SPDX-License-Identifier: BSD-3-Clause
"""How the package finds liblocalmap.so.1: $LOCALMAP_LIBRARY (file or directory), the build tree
of a source checkout, pkg-config, the dynamic loader, and the message naming each place tried
when none works. Serial (no mpirun): importing localmap does not start MPI."""
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PKG = Path(importlib.util.find_spec("localmap").submodule_search_locations[0])
LIB = Path(os.environ["LOCALMAP_LIBRARY"]).resolve()
SOURCE_ROOT = os.environ.get("LM_TEST_SOURCE_ROOT")
PROBE = "import localmap; print(localmap.library_path()); print(localmap.library_version())"


def run(env_changes, pkg_parent, tmp_path, code=PROBE):
    env = {k: v for k, v in os.environ.items()
           if k not in ("LOCALMAP_LIBRARY", "PKG_CONFIG_PATH", "LD_LIBRARY_PATH", "PYTHONPATH")}
    empty = tmp_path / "no-pc"
    empty.mkdir(exist_ok=True)
    env["PKG_CONFIG_LIBDIR"] = str(empty)  # no system localmap.pc either
    env["PYTHONPATH"] = str(pkg_parent)
    env.update(env_changes)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          cwd=tmp_path, timeout=120)


@pytest.fixture
def outside(tmp_path):
    """A copy of the package outside any source checkout."""
    d = tmp_path / "site"
    shutil.copytree(PKG, d / "localmap")
    return d


def test_env_var_file_and_directory(outside, tmp_path):
    for value in (str(LIB), str(LIB.parent)):
        r = run({"LOCALMAP_LIBRARY": value}, outside, tmp_path)
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith("$LOCALMAP_LIBRARY") and "(1, " in r.stdout


def test_env_var_that_does_not_load(outside, tmp_path):
    r = run({"LOCALMAP_LIBRARY": str(tmp_path / "nowhere.so")}, outside, tmp_path)
    assert r.returncode != 0
    assert "LibraryNotFoundError" in r.stderr and "$LOCALMAP_LIBRARY" in r.stderr
    assert "nowhere.so" in r.stderr


def test_pkg_config(outside, tmp_path):
    if shutil.which("pkg-config") is None:
        pytest.skip("no pkg-config program")
    pc = tmp_path / "pc"
    pc.mkdir()
    (pc / "localmap.pc").write_text(f"libdir={LIB.parent}\nincludedir=/nonexistent\n"
                                    "Name: localmap\nDescription: test\nVersion: 1.0.0\n"
                                    "Libs: -L${libdir} -llocalmap\n")
    r = run({"PKG_CONFIG_PATH": str(pc)}, outside, tmp_path)
    if r.returncode == 0 and r.stdout.startswith("dynamic loader"):
        pytest.fail("pkg-config was not consulted before the dynamic loader")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("pkg-config") and str(LIB.parent) in r.stdout


def test_message_lists_everything_tried(outside, tmp_path):
    r = run({}, outside, tmp_path)
    if r.returncode == 0:
        assert r.stdout.startswith("dynamic loader")  # installed system-wide: found there
        pytest.skip("liblocalmap.so.1 is on the loader's search path here")
    err = r.stderr
    for text in ("cannot find liblocalmap.so.1", "$LOCALMAP_LIBRARY: not set",
                 "build tree: not imported from a localmap source checkout",
                 "pkg-config localmap:", "dynamic loader search path", "PKG_CONFIG_PATH"):
        assert text in err, err


def test_build_tree_of_a_checkout(tmp_path):
    if not SOURCE_ROOT:
        pytest.skip("LM_TEST_SOURCE_ROOT not set")
    built = Path(SOURCE_ROOT) / "build" / "lib" / "liblocalmap.so.1"
    if not built.exists():
        pytest.skip(f"{built} not built (sanitizer-only tree?)")
    r = run({}, Path(SOURCE_ROOT) / "bindings" / "python", tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("build tree") and str(built) in r.stdout


def test_import_does_not_start_mpi(outside, tmp_path):
    code = ("import sys, localmap; assert 'mpi4py' not in sys.modules; "
            "print(localmap.chunk(10, 4, 3))")
    r = run({"LOCALMAP_LIBRARY": str(LIB)}, outside, tmp_path, code)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "(9, 1)"
