# SPDX-License-Identifier: BSD-3-Clause
"""localmap: distributed tensors over an MPI process mesh, and local_map, in Python.

A pure-Python binding of liblocalmap's C ABI (ctypes; no compiled extension). The library is
found through $LOCALMAP_LIBRARY (the .so or its directory), the build tree of a source checkout,
`pkg-config --variable=libdir localmap`, or the dynamic loader, in that order.

    import numpy as np
    import localmap as lm

    mesh = lm.Mesh([lm.world_rank()[1]])             # 1-D mesh over MPI_COMM_WORLD
    x = lm.from_global(np.arange(30.).reshape(10, 3), mesh, [lm.Shard(0)])

    @lm.local_map(out_placements=[lm.Partial("sum")])
    def local_sum(shard):                           # a numpy view of this rank's rows
        return np.array([shard.sum()])

    print(local_sum(x).gather())                    # [435.] on every rank

MPI: the first Mesh initialises MPI unless mpi4py (or anyone) already did, and then finalises
it at exit. localmap never imports mpi4py itself; communicators are accepted as mpi4py objects
(anything with py2f()) or Fortran handle ints, and Mesh.comm / dim_comm() import mpi4py only
when called. mpi4py must use the same MPI library as liblocalmap.
"""
from . import _core
from ._core import *  # noqa: F401,F403 - the public API: _core.__all__
from ._lib import LibraryNotFoundError

__version__ = "1.0.0"

__all__ = _core.__all__ + ["LibraryNotFoundError"]
