! SPDX-License-Identifier: BSD-3-Clause
! The Fortran guide's lm_local_map example (docs/guide-fortran.md): a local function (the sum of each rank's shard) whose
! one-element output is declared Partial(sum); gathering it gives the sum of the whole array.
!
!   make fortran && tools/lm-mpirun 3 build/fortran/local_sum       # total 435.0 on every rank
module sum_fn
  use localmap
  implicit none
contains
  ! fn: the sum of this rank's shard, as a one-element output.
  function local_sum(user_data, mesh, nin, inputs, nout, outputs) bind(C) result(status)
    type(c_ptr), value :: user_data, mesh   ! (unused here)
    integer(c_int), value :: nin, nout
    type(lm_arg_t), intent(in) :: inputs(nin)
    type(lm_arg_t), intent(inout) :: outputs(nout)
    integer(c_int) :: status
    real(c_double), pointer :: a(:, :)
    integer :: ierr
    call lm_arg_get(inputs(1), a, ierr)                ! this rank's shard of x
    if (ierr == LM_SUCCESS) call lm_arg_set(outputs(1), [sum(a)], ierr)
    status = ierr
  end function
end module

program local_sum_example
  use localmap
  use sum_fn
  implicit none
  type(lm_mesh) :: mesh
  type(lm_dist_tensor) :: x, total
  type(lm_arg_t) :: outs(1)
  real(c_double) :: full(10, 3), s(1)
  integer :: rank, nranks, comm, i
  call lm_init()
  call lm_world_rank(rank, nranks)
  call lm_comm_world(comm)
  call lm_mesh_create(mesh, comm, [nranks])
  full = reshape([(real(i, c_double), i = 0, 29)], [10, 3])
  call lm_from_global(x, mesh, full, [lm_shard(1)])
  ! placements: one column per output, one row per mesh dim
  call lm_local_map(local_sum, [lm_arg(x)], reshape([lm_partial(LM_REDUCE_SUM)], [1, 1]), outs)
  call lm_arg_take(outs(1), total)                     ! Partial(sum) of the shard sums
  call lm_gather(total, s)                             ! 435 on every rank
  print '(a,i0,a,f0.1)', "rank ", rank, ": total ", s(1)
  if (s(1) /= 435) error stop "local_sum: wrong total"
  call lm_destroy(total); call lm_destroy(x); call lm_destroy(mesh)
  call lm_finalize()
end program
