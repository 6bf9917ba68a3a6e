/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file localmap_mpi.h
 * @brief MPI_Comm-typed helpers over localmap.h for C and C++ programs that use MPI directly.
 * The core header takes communicators as Fortran handles (MPI_Fint) so that bindings need no
 * mpi.h; these inline helpers convert.
 */
#ifndef LOCALMAP_MPI_H_
#define LOCALMAP_MPI_H_

#include <mpi.h>

#include "localmap.h"

#ifdef __cplusplus
extern "C" {
#endif

/** lm_mesh_create over an MPI_Comm. */
static inline lm_status_t lm_mesh_create_mpi(lm_mesh_t *mesh, MPI_Comm parent, int ndim,
                                             const int64_t *shape,
                                             const lm_mesh_config_t *config) {
  return lm_mesh_create(mesh, (int)MPI_Comm_c2f(parent), ndim, shape, config);
}

/** lm_mesh_dim_comm: the per-dim communicator as an MPI_Comm (owned by the mesh: do not free it). */
static inline lm_status_t lm_mesh_dim_comm_mpi(lm_mesh_t mesh, int dim, MPI_Comm *comm) {
  int f = 0;
  lm_status_t s = lm_mesh_dim_comm(mesh, dim, &f);
  if (s == LM_SUCCESS) *comm = MPI_Comm_f2c((MPI_Fint)f);
  return s;
}

/** lm_mesh_comm: the communicator of all mesh ranks as an MPI_Comm (owned by the mesh). */
static inline lm_status_t lm_mesh_comm_mpi(lm_mesh_t mesh, MPI_Comm *comm) {
  int f = 0;
  lm_status_t s = lm_mesh_comm(mesh, &f);
  if (s == LM_SUCCESS) *comm = MPI_Comm_f2c((MPI_Fint)f);
  return s;
}

/** lm_mesh_create_grid over an MPI_Comm. */
static inline lm_status_t lm_mesh_create_grid_mpi(lm_mesh_t *mesh, MPI_Comm parent, int myrow,
                                                  int mycol, const lm_mesh_config_t *config) {
  return lm_mesh_create_grid(mesh, (int)MPI_Comm_c2f(parent), myrow, mycol, config);
}

#ifdef __cplusplus
}
#endif

#endif /* LOCALMAP_MPI_H_ */
