! SPDX-License-Identifier: BSD-3-Clause
! Without ierr, a failure the binding itself detects (here: two placements on a 1-D mesh) ends the
! program with `error stop`, naming the wrapper once: "localmap: lm_from_global: placements: an
! array of 2 ...", not "localmap: lm_from_global: lm_from_global: ..." (issue 19). tests/script_fortran.sh
! runs it and checks the text.
program test_error_prefix
  use localmap
  implicit none
  type(lm_mesh) :: mesh
  type(lm_dist_tensor) :: x
  real(c_double) :: full(4, 2)
  integer :: comm, size, rank
  call lm_init()
  call lm_world_rank(rank, size)
  call lm_comm_world(comm)
  call lm_mesh_create(mesh, comm, [size])
  full = 1
  call lm_from_global(x, mesh, full, [lm_shard(1), lm_replicate()])   ! fails: error stop
  print '(a)', "not reached"
end program
