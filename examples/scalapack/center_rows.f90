! SPDX-License-Identifier: BSD-3-Clause
! The Fortran twin of center_rows.c: a ScaLAPACK program hands its block-cyclic matrix to localmap
! without a copy (lm_from_scalapack takes the descriptor), reshards it to row shards, centres every
! row with lm_local_map, and gets the result back as a descriptor + local array for pdlange.
!
!   mpirun -np 4 center_rows_f [M N MB NB]      (built by tests/script_scalapack.sh)
!
! A(i, j) = (i - 1) + 1000 (j - 1). After centring, B(i, j) = 1000 (j - 1 - (N - 1) / 2).
module center_fn
  use localmap
  implicit none
contains
  ! fn: this rank's whole rows (a(m_local, N)) minus their means.
  function center(user_data, mesh, nin, inputs, nout, outputs) bind(C) result(status)
    type(c_ptr), value :: user_data, mesh   ! (unused here)
    integer(c_int), value :: nin, nout
    type(lm_arg_t), intent(in) :: inputs(nin)
    type(lm_arg_t), intent(inout) :: outputs(nout)
    integer(c_int) :: status
    real(c_double), pointer :: a(:, :)
    integer :: ierr
    call lm_arg_get(inputs(1), a, ierr)
    if (ierr == LM_SUCCESS) &
      call lm_arg_set(outputs(1), a - spread(sum(a, 2) / max(size(a, 2), 1), 2, size(a, 2)), ierr)
    status = ierr
  end function
end module

program center_rows_f
  use, intrinsic :: iso_c_binding, only: c_loc, c_associated
  use localmap
  use center_fn
  implicit none
  integer, external :: numroc, indxl2g
  double precision, external :: pdlange
  type(lm_mesh) :: grid
  type(lm_dist_tensor) :: x, rows, y, yb
  type(lm_arg_t) :: outs(1)
  integer :: m = 37, n = 23, mb = 4, nb = 3, ctxt, nprow, npcol, myrow, mycol, rank, nranks
  integer :: comm, locr, locc, lld, info, il, jl, gi, gj, f, bad, desc(9), descb(9), args(4), k
  character(len=16) :: arg
  real(c_double), allocatable, target :: a(:, :)
  real(c_double), pointer :: b(:, :), pa(:, :)
  real(c_double) :: fro, want, work(1)
  logical :: ok
  if (command_argument_count() >= 4) then
    do k = 1, 4
      call get_command_argument(k, arg)
      read(arg, *) args(k)
    end do
    m = args(1); n = args(2); mb = args(3); nb = args(4)
  end if
  call lm_init()
  call lm_world_rank(rank, nranks)
  nprow = 1
  do f = 1, nranks
    if (f * f > nranks) exit
    if (mod(nranks, f) == 0) nprow = f
  end do
  npcol = nranks / nprow
  call blacs_get(-1, 0, ctxt)                     ! the BLACS grid, as a ScaLAPACK program makes it
  call blacs_gridinit(ctxt, 'R', nprow, npcol)
  call blacs_gridinfo(ctxt, nprow, npcol, myrow, mycol)
  locr = numroc(m, mb, myrow, 0, nprow)
  locc = numroc(n, nb, mycol, 0, npcol)
  lld = max(1, locr)
  call descinit(desc, m, n, mb, nb, 0, 0, ctxt, lld, info)
  allocate(a(lld, max(1, locc)))
  do jl = 1, locc
    do il = 1, locr
      gi = indxl2g(il, mb, myrow, 0, nprow) - 1
      gj = indxl2g(jl, nb, mycol, 0, npcol) - 1
      a(il, jl) = gi + 1000d0 * gj
    end do
  end do

  ! 1. The mesh is the BLACS grid; x is the matrix (M, N), borrowing a.
  call lm_comm_world(comm)
  call lm_mesh_create_grid(grid, comm, myrow, mycol)
  call lm_from_scalapack(x, grid, desc, a)
  call lm_local(x, pa)                            ! the shard is a itself: no copy was made
  bad = 0
  if (locr > 0 .and. locc > 0) then
    if (.not. c_associated(c_loc(pa(1, 1)), c_loc(a(1, 1)))) bad = 1
  end if
  ! 2. Whole rows: the matrix rows split over the process rows, replicated over the columns.
  call lm_reshard(rows, x, [lm_shard(1), lm_replicate()])
  ! 3. Centre each row; the output keeps the row layout.
  call lm_local_map(center, [lm_arg(rows)], reshape([lm_shard(1), lm_replicate()], [2, 1]), outs, &
                    out_ranks=[2])
  call lm_arg_take(outs(1), y)
  ! 4. Back to ScaLAPACK's layout (rows dealt over process rows, columns over process columns).
  call lm_reshard(yb, y, [lm_block_cyclic(1, mb), lm_block_cyclic(2, nb)])
  call lm_to_scalapack(yb, ctxt, descb)
  call lm_local(yb, b)
  if (locr > 0 .and. locc > 0) then
    fro = pdlange('F', m, n, b, 1, 1, descb, work)
  else
    fro = pdlange('F', m, n, a, 1, 1, descb, work)   ! (no local elements: any array)
  end if
  want = 0
  do gj = 0, n - 1
    want = want + m * (1000d0 * (gj - (n - 1) / 2d0))**2
  end do
  want = sqrt(want)
  do jl = 1, locc
    do il = 1, locr
      gi = indxl2g(il, mb, myrow, 0, nprow) - 1
      gj = indxl2g(jl, nb, mycol, 0, npcol) - 1
      if (abs(b(il, jl) - 1000d0 * (gj - (n - 1) / 2d0)) > 1d-6) bad = bad + 1
      if (a(il, jl) /= gi + 1000d0 * gj) bad = bad + 1
    end do
  end do
  do k = 1, 8
    if (descb(k) /= desc(k)) bad = bad + 1
  end do
  call reduce_sum(bad)
  ok = bad == 0 .and. abs(fro - want) <= 1d-9 * want
  if (rank == 0) print '(a,i0,a,i0,a,i0,a,i0,a,es13.6,a,es13.6,a,i0,a,a)', &
    "center_rows_f: ", m, " x ", n, " on a ", nprow, " x ", npcol, " BLACS grid: ||B||_F = ", &
    fro, " (expected ", want, "), ", bad, " wrong elements: ", merge("OK    ", "FAILED", ok)
  call lm_destroy(yb); call lm_destroy(y); call lm_destroy(rows); call lm_destroy(x)
  call lm_destroy(grid)
  call blacs_gridexit(ctxt)
  call lm_finalize()
  if (.not. ok) error stop 1
contains
  subroutine reduce_sum(v)
    use mpi
    integer, intent(inout) :: v
    integer :: total, ierr
    call MPI_Allreduce(v, total, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
    v = total
  end subroutine
end program
