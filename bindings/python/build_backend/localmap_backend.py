# SPDX-License-Identifier: BSD-3-Clause
"""The PEP 517 backend of the localmap package: setuptools, run on a copy of the sources in a
temporary directory, so that `pip install ./bindings/python` leaves nothing (build/,
*.egg-info) in the checkout. Editable installs (pip install -e) build in place, as they must."""
import os
import shutil
import sys
import tempfile

sys.dont_write_bytecode = True  # (for what setuptools imports from here on)

from setuptools import build_meta as _st  # noqa: E402

_SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_SKIP = shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "dist")


def _in_copy(hook, *args):
    """hook(*args) run in a temporary copy of the sources (setuptools writes build/ and
    *.egg-info into the current directory)."""
    here = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="localmap-build-") as tmp:
        src = os.path.join(tmp, "src")
        shutil.copytree(_SRC, src, ignore=_SKIP)
        os.chdir(src)
        try:
            return hook(*args)
        finally:
            os.chdir(here)


def _out_of_tree(hook, out_dir, *args):
    return _in_copy(hook, os.path.abspath(out_dir), *args)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    if metadata_directory is not None:
        metadata_directory = os.path.abspath(metadata_directory)
    return _out_of_tree(_st.build_wheel, wheel_directory, config_settings, metadata_directory)


def build_sdist(sdist_directory, config_settings=None):
    return _out_of_tree(_st.build_sdist, sdist_directory, config_settings)


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    return _out_of_tree(_st.prepare_metadata_for_build_wheel, metadata_directory, config_settings)


def get_requires_for_build_wheel(config_settings=None):
    return _in_copy(_st.get_requires_for_build_wheel, config_settings)  # (runs egg_info)


def get_requires_for_build_sdist(config_settings=None):
    return _in_copy(_st.get_requires_for_build_sdist, config_settings)

# Editable installs point into the source tree: setuptools builds them in place.
if hasattr(_st, "build_editable"):
    build_editable = _st.build_editable
    get_requires_for_build_editable = _st.get_requires_for_build_editable
    prepare_metadata_for_build_editable = _st.prepare_metadata_for_build_editable
