# SPDX-License-Identifier: BSD-3-Clause
"""pytest under mpirun: every rank runs the same tests. A test that fails on one rank would leave
the others waiting in the next collective, so a failure prints its report and aborts the whole
MPI job (like the C suites' CMOCKA_TEST_ABORT). mpi4py is imported first here, so these suites
also check that localmap works when mpi4py initialised MPI."""
import os
import sys

import pytest

from mpi4py import MPI  # noqa: E402  (initialises MPI before localmap does)

import localmap as lm  # noqa: E402

COMM = MPI.COMM_WORLD


def pytest_report_header(config):
    return (f"localmap {lm.__version__} from {lm.library_path()}, rank {COMM.rank} of "
            f"{COMM.size}, {MPI.Get_library_version().splitlines()[0]}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.failed and COMM.size > 1:
        sys.stdout.flush()
        sys.stderr.write(f"\n=== rank {COMM.rank}: {item.nodeid} FAILED ({rep.when}) ===\n"
                         f"{rep.longreprtext}\n=== aborting the MPI job ===\n")
        sys.stderr.flush()
        COMM.Abort(1)


@pytest.fixture
def comm():
    return COMM


@pytest.fixture
def mesh1():
    """A 1-D mesh of all ranks."""
    with lm.Mesh([COMM.size], dim_names=["x"]) as m:
        yield m


@pytest.fixture
def mesh2():
    """A 2-D mesh: 2 x size/2 when the size is even, else size x 1."""
    n = COMM.size
    shape = [2, n // 2] if n % 2 == 0 else [n, 1]
    with lm.Mesh(shape, dim_names=["dp", "tp"]) as m:
        yield m


def rank_lines():
    return os.environ.get("LM_TEST_VERBOSE") == "1"
