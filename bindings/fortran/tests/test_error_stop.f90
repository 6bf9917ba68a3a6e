! SPDX-License-Identifier: BSD-3-Clause
! Without ierr, a failing call ends the program with `error stop` and the library's message.
! tests/script_fortran.sh runs it and expects a nonzero exit status and the message on stderr.
program test_error_stop
  use localmap
  implicit none
  type(lm_mesh) :: mesh
  integer :: comm, size, rank, dim
  call lm_init()
  call lm_world_rank(rank, size)
  call lm_comm_world(comm)
  call lm_mesh_create(mesh, comm, [size], names=["dp"])
  call lm_mesh_dim_index(mesh, "no_such_dim", dim)   ! fails: error stop
  print '(a)', "not reached"
end program
