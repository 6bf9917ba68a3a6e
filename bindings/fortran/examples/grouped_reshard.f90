! SPDX-License-Identifier: BSD-3-Clause
! A grouped reshard in Fortran: three arrays of different kinds and layouts moved by one group
! (lm_reshard_group_create), whose executions send one message per peer carrying all three, not
! one round per array. Made once, a group is run as often as needed (here twice).
!
!   a(7, 5)  real(c_double)       columns split -> rows split     [lm_shard(2)] -> [lm_shard(1)]
!   b(9)     integer(c_int64_t)   split         -> on every rank  [lm_shard(1)] -> [lm_replicate()]
!   c(4, 6)  integer(c_int32_t)   on every rank -> columns split  [lm_replicate()] -> [lm_shard(2)]
!
! Every element of every result is checked against the formula that filled it, at the position
! this program computes itself (torch.chunk's blocks of ceil(n / nranks), the last ones short or
! empty; lm_shard(1) splits the first subscript).
!
!   make fortran && tools/lm-mpirun 4 build/fortran/grouped_reshard     # np 2 and 4 in make check
program grouped_reshard
  use localmap
  implicit none
  integer, parameter :: NA1 = 7, NA2 = 5, NB = 9, NC1 = 4, NC2 = 6
  type(lm_mesh) :: mesh
  type(lm_dist_tensor) :: x(3), y(3)
  type(lm_reshard_group) :: group
  type(lm_reshard_entry) :: entries(3)   ! a named array (gfortran leaks the components of an
                                         ! array constructor of function results)
  real(c_double) :: a(NA1, NA2)
  integer(c_int64_t) :: b(NB)
  integer(c_int32_t) :: c(NC1, NC2)
  integer :: rank, nranks, comm, i, j, run, buckets, wrong
  call lm_init()
  call lm_world_rank(rank, nranks)
  call lm_comm_world(comm)
  call lm_mesh_create(mesh, comm, [nranks])             ! 1-D: mesh coordinate = world rank

  a = reshape([((real(100 * i + j, c_double), i = 1, NA1), j = 1, NA2)], [NA1, NA2])
  b = [(int(10 * i, c_int64_t), i = 1, NB)]
  c = reshape([((int(100 * i + j, c_int32_t), i = 1, NC1), j = 1, NC2)], [NC1, NC2])

  ! The group: one entry per array (global shape, kind, placements before and after).
  entries(1) = lm_reshard_entry(shape(a), LM_FLOAT64, [lm_shard(2)], [lm_shard(1)])
  entries(2) = lm_reshard_entry(shape(b), LM_INT64, [lm_shard(1)], [lm_replicate()])
  entries(3) = lm_reshard_entry(shape(c), LM_INT32, [lm_replicate()], [lm_shard(2)])
  call lm_reshard_group_create(group, mesh, entries)
  call lm_reshard_group_size(group, buckets=buckets)
  call lm_reshard_group_alloc_targets(group, y)        ! zero-filled, laid out as the targets

  wrong = 0
  do run = 1, 2
    ! The sources: each rank keeps its part of the full arrays (run 2: other values).
    call lm_from_global(x(1), mesh, a * run, [lm_shard(2)])
    call lm_from_global(x(2), mesh, b * run, [lm_shard(1)])
    call lm_from_global(x(3), mesh, c * run, [lm_replicate()])
    call lm_reshard_group_execute(group, x, y)         ! collective: all three in one round
    wrong = wrong + check_a(y(1), run) + check_b(y(2), run) + check_c(y(3), run)
  end do
  print '(a,i0,a,i0,a,a)', "rank ", rank, ": 3 arrays resharded by one group (", buckets, &
    " bucket), run twice: ", merge("PASS", "FAIL", wrong == 0)

  do i = 1, 3
    call lm_destroy(y(i)); call lm_destroy(x(i))
  end do
  call lm_destroy(group); call lm_destroy(mesh)
  call lm_finalize()
  if (wrong /= 0) error stop "grouped_reshard: wrong elements"

contains
  ! Rank `rank`'s block [lo, hi) (0-based, hi excluded) of n split over nranks like torch.chunk.
  subroutine chunk(n, lo, hi)
    integer, intent(in) :: n
    integer, intent(out) :: lo, hi
    integer :: blk
    blk = (n + nranks - 1) / nranks
    lo = min(n, rank * blk)
    hi = min(n, (rank + 1) * blk)
  end subroutine

  ! a's rows lo+1..hi, all columns: 100 i + j (times run).
  integer function check_a(t, run) result(bad)
    type(lm_dist_tensor), intent(in) :: t
    integer, intent(in) :: run
    real(c_double), pointer :: p(:, :)
    integer(c_int64_t) :: off(2)
    integer :: lo, hi, i, j
    call chunk(NA1, lo, hi)
    call lm_local(t, p)
    call lm_dist_tensor_local_offset(t, off)
    bad = merge(0, 1, all(shape(p) == [hi - lo, NA2]) .and. all(off == [lo, 0]))
    do j = 1, size(p, 2)
      do i = 1, size(p, 1)
        if (p(i, j) /= run * (100 * (lo + i) + j)) bad = bad + 1
      end do
    end do
  end function

  ! All of b on every rank: 10 i (times run).
  integer function check_b(t, run) result(bad)
    type(lm_dist_tensor), intent(in) :: t
    integer, intent(in) :: run
    integer(c_int64_t), pointer :: p(:)
    integer :: i
    call lm_local(t, p)
    bad = merge(0, 1, size(p) == NB)
    do i = 1, size(p)
      if (p(i) /= run * 10 * i) bad = bad + 1
    end do
  end function

  ! c's columns lo+1..hi, all rows: 100 i + j (times run).
  integer function check_c(t, run) result(bad)
    type(lm_dist_tensor), intent(in) :: t
    integer, intent(in) :: run
    integer(c_int32_t), pointer :: p(:, :)
    integer(c_int64_t) :: off(2)
    integer :: lo, hi, i, j
    call chunk(NC2, lo, hi)
    call lm_local(t, p)
    call lm_dist_tensor_local_offset(t, off)
    bad = merge(0, 1, all(shape(p) == [NC1, hi - lo]) .and. all(off == [0, lo]))
    do j = 1, size(p, 2)
      do i = 1, size(p, 1)
        if (p(i, j) /= run * (100 * i + lo + j)) bad = bad + 1
      end do
    end do
  end function
end program
