/* SPDX-License-Identifier: BSD-3-Clause
 * What the documentation's C fragments use without declaring it (tools/check-samples.py compiles
 * each fragment after this file, inside a function of the lm_local_fn_t signature: ud, mesh, nin,
 * in, nout and out are its parameters). A fragment's own declarations hide these. A name a new
 * fragment needs goes here; CHECK is the macro of localmap(3). */
#include <localmap.h>
#include <localmap_mpi.h>
#include <localmap_scalapack.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(call)                                                                    \
  do {                                                                                 \
    lm_status_t check_s_ = (call);                                                     \
    if (check_s_ != LM_SUCCESS) {                                                      \
      fprintf(stderr, "%s: %s\n", lm_status_string(check_s_), lm_last_error_message()); \
      exit(1);                                                                         \
    }                                                                                  \
  } while (0)

/* The program around a fragment. */
extern int rank, size, nranks, nsteps, comm;
extern lm_mesh_t grid, mesh2;
extern lm_dist_tensor_t x, y, w, a, tensor, src, dst, dw, db, dx, dy, dw_view;
extern lm_reshard_plan_t plan;
extern lm_placement_t placements[8], psum[1], rep[1], shard0[1];
extern DLTensor mine;
extern int64_t rows[64], my_rows, shape[8];
extern double *my_data;
/* Devices: a stream and an allocator of the user's (void *, as in lm_device_config_t). */
extern void *my_stream, *my_cuda_stream, *my_pool;
void *my_alloc(void *ctx, size_t bytes, int device_id, void *stream);
void my_free(void *ctx, void *ptr, size_t bytes, int device_id, void *stream);
/* ScaLAPACK: a BLACS context, descriptors and local arrays. */
extern int ctxt, desc[LM_SCALAPACK_DLEN], desca[LM_SCALAPACK_DLEN], descc[LM_SCALAPACK_DLEN];
extern double *A, *a_local, *c_local;
/* Work of the program's own. */
int have_other_work(void);
void do_other_work(void);
/* lm_local_map functions (lm_local_fn_t) defined elsewhere in the program. */
lm_status_t local_sum(void *ud, lm_mesh_t mesh, int nin, const lm_arg_t *in, int nout, lm_arg_t *out);
lm_status_t loss_fn(void *ud, lm_mesh_t mesh, int nin, const lm_arg_t *in, int nout, lm_arg_t *out);
