! SPDX-License-Identifier: BSD-3-Clause
! The first program of README.md's Fortran section: split the rows of a 10x2 array over all
! ranks, gather it back.   tools/lm-mpirun 3 build/fortran/hello
program hello
  use localmap
  implicit none
  type(lm_mesh) :: mesh
  type(lm_dist_tensor) :: x
  real(c_double) :: full(10, 2), back(10, 2)
  real(c_double), pointer :: mine(:, :)
  integer(c_int64_t) :: off(2)
  integer :: rank, nranks, comm, i
  call lm_init()
  call lm_world_rank(rank, nranks)
  call lm_comm_world(comm)                           ! or a type(MPI_Comm) from mpi_f08
  call lm_mesh_create(mesh, comm, [nranks])          ! a 1-D mesh of all ranks
  full = reshape([(real(i, c_double), i = 1, 20)], [10, 2])
  call lm_from_global(x, mesh, full, [lm_shard(1)])  ! the rows are split over the ranks
  call lm_local(x, mine)                             ! this rank's rows, a plain (:,:) array
  call lm_dist_tensor_local_offset(x, off)           ! mine is full(off(1)+1 : off(1)+size(mine,1), :)
  call lm_gather(x, back)                            ! the full array on every rank
  print '(a,i0,a,i0,a,i0,a,l1)', "rank ", rank, " holds rows ", off(1) + 1, " to ", off(1) + size(mine, 1), &
    ", gathered all: ", all(back == full) .and. all(mine == full(off(1) + 1:off(1) + size(mine, 1), :))
  call lm_destroy(x)
  call lm_destroy(mesh)
  call lm_finalize()
end program
