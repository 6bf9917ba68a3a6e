! SPDX-License-Identifier: BSD-3-Clause
! The masked loss of examples/demo.c (part 2) in Fortran, on the same inputs; it prints the same
! "loss = ..." line as the C demo.
!
!   make fortran && tools/lm-mpirun 4 build/fortran/masked_loss
!
! predictions(B, C) and labels(B) on a {dp, tp} mesh (tp = 2 when the world size is even and at
! least 4), batch rows split over dp: lm_shard(1) splits the first subscript, as a Fortran user
! means it. Labels of -100 are ignored. fn returns this rank's loss sum and token count as
! Partial(sum) over dp; resharding to Replicate sums them.
module masked_loss_fn
  use localmap
  implicit none
  integer, parameter :: B = 11, C = 5
  integer(c_int64_t), parameter :: IGNORE = -100
contains
  function row_loss(pred, label) result(s)
    real(c_double), intent(in) :: pred(:)
    integer(c_int64_t), intent(in) :: label
    real(c_double) :: s, d
    integer :: k
    s = 0
    do k = 1, C
      d = pred(k)
      if (k - 1 == label) d = d - 1
      s = s + d * d
    end do
  end function

  ! This rank's loss sum and token count, from its local shards.
  function masked_loss(user_data, mesh, nin, inputs, nout, outputs) bind(C) result(status)
    type(c_ptr), value :: user_data, mesh
    integer(c_int), value :: nin, nout
    type(lm_arg_t), intent(in) :: inputs(nin)
    type(lm_arg_t), intent(inout) :: outputs(nout)
    integer(c_int) :: status
    real(c_double), pointer :: pred(:, :)
    integer(c_int64_t), pointer :: labels(:)
    real(c_double) :: loss_sum, count
    integer :: i, ierr
    call lm_arg_get(inputs(1), pred, ierr)
    if (ierr == LM_SUCCESS) call lm_arg_get(inputs(2), labels, ierr)
    if (ierr /= LM_SUCCESS) then
      status = ierr
      return
    end if
    if (size(pred, 1) /= size(labels)) then
      call lm_set_error_message("predictions and labels have different local batch sizes")
      status = LM_ERR_INVALID_ARGUMENT
      return
    end if
    loss_sum = 0
    count = 0
    do i = 1, size(labels)
      if (labels(i) == IGNORE) cycle
      loss_sum = loss_sum + row_loss(pred(i, :), labels(i))
      count = count + 1
    end do
    call lm_arg_set(outputs(1), [loss_sum], ierr)
    call lm_arg_set(outputs(2), [count], ierr)
    status = LM_SUCCESS
  end function
end module

program masked_loss_example
  use mpi_f08
  use localmap
  use masked_loss_fn
  implicit none
  type(lm_mesh) :: mesh
  type(lm_dist_tensor) :: pred, labels, loss_sum, count, loss_sum_r, count_r
  type(lm_placement) :: batch(2), rep(2), partial(2)
  type(lm_arg_t) :: outs(2)
  real(c_double) :: pred_full(B, C), ref_sum, ref_n, loss, ref
  real(c_double), pointer :: v(:)
  integer(c_int64_t) :: labels_full(B)
  integer :: rank, size, tp, i, k
  logical :: ok

  call MPI_Init()                  ! or call lm_init()
  call MPI_Comm_rank(MPI_COMM_WORLD, rank)
  call MPI_Comm_size(MPI_COMM_WORLD, size)
  tp = merge(2, 1, mod(size, 2) == 0 .and. size >= 4)
  call lm_mesh_create(mesh, MPI_COMM_WORLD, [size / tp, tp], names=["dp", "tp"])

  do i = 1, B
    do k = 1, C
      pred_full(i, k) = real(mod((i - 1) * 7 + (k - 1) * 3, 11), c_double) / 4 - 1
    end do
    labels_full(i) = merge(IGNORE, int(mod((i - 1) * 3, C), c_int64_t), mod(i - 1, 4) == 3)
  end do

  batch = [lm_shard(1), lm_replicate()]     ! batch rows over dp, replicated over tp
  rep = [lm_replicate(), lm_replicate()]
  partial = [lm_partial(LM_REDUCE_SUM), lm_replicate()]
  call lm_from_global(pred, mesh, pred_full, batch)
  call lm_from_global(labels, mesh, labels_full, rep)   ! resharded to batch by lm_local_map

  call lm_local_map(masked_loss, [lm_arg(pred), lm_arg(labels)], reshape([partial, partial], [2, 2]), outs, &
                    in_placements=reshape([batch, batch], [2, 2]), flags=LM_LOCAL_MAP_RESHARD_INPUTS)
  call lm_arg_take(outs(1), loss_sum)
  call lm_arg_take(outs(2), count)
  call lm_reshard(loss_sum_r, loss_sum, rep)
  call lm_reshard(count_r, count, rep)
  call lm_local(loss_sum_r, v)
  loss = v(1)
  call lm_local(count_r, v)
  loss = loss / v(1)

  ref_sum = 0
  ref_n = 0
  do i = 1, B
    if (labels_full(i) == IGNORE) cycle
    ref_sum = ref_sum + row_loss(pred_full(i, :), labels_full(i))
    ref_n = ref_n + 1
  end do
  ref = ref_sum / ref_n
  ok = nint(v(1)) == nint(ref_n) .and. abs(loss - ref) <= 1d-12 * ref
  if (rank == 0) then
    print '(a,i0,a,i0,a,i0,a)', "masked loss (fortran), mesh ", size / tp, " x ", tp, " {dp, tp} over ", size, " ranks"
    print '(a,f0.12,a,i0,a,f0.12,a,i0,a)', "  loss = ", loss, " over ", nint(v(1)), " tokens (serial: ", ref, &
      " over ", nint(ref_n), ")"
    print '(a)', merge("PASS", "FAIL", ok)
  end if

  call lm_destroy(loss_sum_r); call lm_destroy(count_r); call lm_destroy(loss_sum); call lm_destroy(count)
  call lm_destroy(pred); call lm_destroy(labels); call lm_destroy(mesh)
  call MPI_Finalize()
  if (.not. ok) error stop 1
end program
