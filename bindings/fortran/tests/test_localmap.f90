! SPDX-License-Identifier: BSD-3-Clause
! Tests of the Fortran module localmap, on every rank of an MPI job (tests/script_fortran.sh runs
! them under mpirun at np 2 and 4). A failed check prints the rank and does `error stop`, which
! ends the whole job.
module checks
  use, intrinsic :: iso_c_binding
  use localmap
  implicit none
  integer :: me = -1
  logical, save :: deleted = .false.
  real(c_double), target, save :: managed_data(3) = [1d0, 2d0, 3d0]
  integer(c_int64_t), target, save :: managed_shape(1) = [3]
  type(DLManagedTensor), target, save :: managed
contains
  subroutine check(cond, what)
    logical, intent(in) :: cond
    character(len=*), intent(in) :: what
    if (.not. cond) then
      write(*, '(a,i0,a,a)') "FAIL on rank ", me, ": ", what
      flush(6)
      error stop 1
    end if
  end subroutine

  ! A refusal: status `code` and a message containing `part` (lm_last_error_message).
  subroutine expect(ierr, code, part, what)
    integer, intent(in) :: ierr, code
    character(len=*), intent(in) :: part, what
    character(len=:), allocatable :: msg
    msg = lm_last_error_message()
    call check(ierr == code .and. index(msg, part) > 0, what // ": status " // i2s(ierr) // ", message '" // &
               msg // "', expected '" // part // "'")
  end subroutine
  function i2s(i) result(s)
    integer, intent(in) :: i
    character(len=:), allocatable :: s
    character(len=16) :: buf
    write(buf, '(i0)') i
    s = trim(buf)
  end function

  subroutine note_delete(m) bind(C)
    type(c_ptr), value :: m
    call check(c_associated(m, c_loc(managed)), "deleter got its managed tensor")
    deleted = .true.
  end subroutine

  ! Whether two dist tensors' local shards have the same rank, dtype, shape and bytes.
  logical function same_local(a, b)
    type(lm_dist_tensor), intent(in) :: a, b
    type(DLTensor) :: va, vb
    integer(c_int64_t), pointer :: sa(:), sb(:)
    integer(c_int8_t), pointer :: da(:), db(:)
    integer(c_int64_t) :: nbytes
    call lm_dist_tensor_local_view(a, va)
    call lm_dist_tensor_local_view(b, vb)
    same_local = va%ndim == vb%ndim .and. va%dtype == vb%dtype
    if (.not. same_local) return
    nbytes = iand(int(va%dtype%bits), 255) / 8
    if (va%ndim > 0) then
      call c_f_pointer(va%shape, sa, [va%ndim])
      call c_f_pointer(vb%shape, sb, [vb%ndim])
      same_local = all(sa == sb)
      if (.not. same_local) return
      nbytes = nbytes * product(sa)
    end if
    if (nbytes == 0) return
    call c_f_pointer(va%data, da, [nbytes])
    call c_f_pointer(vb%data, db, [nbytes])
    same_local = all(da == db)
  end function

  ! local_map function: sum of the shard times a double, the int + 1, the doubled shard; fails
  ! on the rank given as inputs(2) when inputs(4) is 1.
  function fn(user_data, mesh, nin, inputs, nout, outputs) bind(C) result(status)
    type(c_ptr), value :: user_data, mesh
    integer(c_int), value :: nin, nout
    type(lm_arg_t), intent(in) :: inputs(nin)
    type(lm_arg_t), intent(inout) :: outputs(nout)
    integer(c_int) :: status
    real(c_double), pointer :: a(:, :)
    integer(c_int64_t), allocatable :: shp(:)
    type(lm_mesh) :: m
    integer :: ierr, nd, r, s
    call lm_arg_get(inputs(1), a, ierr)
    if (ierr /= 0) then
      status = ierr
      return
    end if
    call lm_arg_shape(inputs(1), shp)
    call check(all(shp == shape(a)), "lm_arg_shape is the Fortran shape")
    call lm_mesh_borrow(m, mesh)
    call lm_mesh_ndim(m, nd)
    call check(nd >= 1, "the mesh inside fn")
    call check(c_associated(user_data), "user_data reaches fn")
    call lm_world_rank(r, s)
    if (inputs(4)%i64 == 1 .and. r == inputs(2)%i64) then
      call lm_set_error_message("the sky fell on this rank")
      status = LM_ERR_USER
      return
    end if
    call lm_arg_set(outputs(1), [sum(a) * inputs(3)%f64])
    outputs(2) = lm_arg(inputs(2)%i64 + 1)
    call lm_arg_set(outputs(3), 2 * a)
    status = LM_SUCCESS
  end function

  ! local_map function: ones of the shape of its rank-1 input.
  function ones_fn(user_data, mesh, nin, inputs, nout, outputs) bind(C) result(status)
    type(c_ptr), value :: user_data, mesh
    integer(c_int), value :: nin, nout
    type(lm_arg_t), intent(in) :: inputs(nin)
    type(lm_arg_t), intent(inout) :: outputs(nout)
    integer(c_int) :: status
    real(c_double), pointer :: a(:)
    integer :: ierr
    call lm_arg_get(inputs(1), a, ierr)
    status = ierr
    if (ierr /= 0) return
    call lm_arg_set(outputs(1), 0 * a + 1)
  end function
end module

! lm_local_map with in_grad_placements and record=: the record says where gradients go, and
! lm_local_map_record_input_grad sums a replicated weight's Partial(sum) gradient (every rank
! contributes ones: the rank count everywhere).
subroutine local_map_records(size)
  use mpi_f08
  use localmap
  use checks
  implicit none
  integer, intent(in) :: size
  type(lm_mesh) :: mesh
  type(lm_dist_tensor) :: w, view, dw
  type(lm_local_map_record) :: rec
  type(lm_arg_t) :: outs(1)
  type(lm_placement) :: pl(1), psum(1, 1)
  real(c_double), pointer :: p(:)
  integer :: ierr
  character(len=:), allocatable :: msg
  psum(1, 1) = lm_partial(LM_REDUCE_SUM)
  call lm_mesh_create(mesh, MPI_COMM_WORLD, [size])
  call lm_from_global(w, mesh, [1d0, 1d0, 1d0, 1d0], [lm_replicate()])
  call lm_local_map(ones_fn, [lm_arg(w)], psum, outs, out_ranks=[1], in_grad_placements=psum, record=rec)
  call lm_arg_take(outs(1), view)
  call lm_destroy(view)
  call lm_local_map_record_placements(rec, LM_RECORD_INPUT, 1, pl)
  call check(pl(1)%kind == LM_KIND_REPLICATE, "record: the input's own placements")
  call lm_local_map_record_placements(rec, LM_RECORD_IN_GRAD, 1, pl)
  call check(pl(1)%kind == LM_KIND_PARTIAL .and. pl(1)%reduce_op == LM_REDUCE_SUM, "record: in_grad_placements")
  call lm_local_map_record_placements(rec, LM_RECORD_OUT_GRAD, 1, pl)
  call check(pl(1)%kind == LM_KIND_REPLICATE, "record: Partial(sum) output -> Replicate gradient")
  call lm_local_map(ones_fn, [lm_arg(w)], psum, outs, out_ranks=[1])
  call lm_arg_take(outs(1), view)
  call lm_local_map_record_input_grad(rec, 1, view, dw)
  call lm_local(dw, p)
  call check(all(p == real(size, c_double)), "record: the gradient summed to the input's layout")
  call lm_local_map_record_placements(rec, LM_RECORD_IN, 2, pl, ierr=ierr)
  msg = lm_last_error_message()
  call check(ierr == LM_ERR_INVALID_ARGUMENT .and. index(msg, "index 1") > 0, "record: an index out of range")
  call lm_local_map_record_destroy(rec)
  call lm_local_map_record_placements(rec, LM_RECORD_IN, 1, pl, ierr=ierr)
  call check(ierr == LM_ERR_INVALID_ARGUMENT, "record: destroyed")
  call lm_destroy(w); call lm_destroy(view); call lm_destroy(dw); call lm_destroy(mesh)
  deallocate(msg)
end subroutine

! Refusals made by the binding before the C library is called, one per kind of message, each in
! Fortran's terms: the Fortran array and its element type, 1-based entries and dims, the
! constructor that made a placement, the lengths of a ragged placement (not C's "placements[0]",
! "n" or "extents id"). x is a 4 x 3 matrix in row shards on a 1-D mesh.
subroutine binding_messages(size)
  use mpi_f08, only: MPI_COMM_WORLD
  use localmap
  use checks
  implicit none
  integer, intent(in) :: size
  type(lm_mesh) :: m1, m2, m3
  type(lm_dist_tensor) :: x, y
  type(lm_arg_t) :: outs(3)
  real(c_double) :: a(4, 3)
  integer(c_int32_t) :: rid, rid2
  integer(c_int64_t) :: ext(size), ext2(size + 1), cnt, got(1)
  integer :: ierr, k, desc(8)
  character(len=:), allocatable :: msg
  a = 1
  desc = 0
  call lm_mesh_create(m1, MPI_COMM_WORLD, [size])
  call lm_mesh_create(m2, MPI_COMM_WORLD, [size, 1])
  call lm_from_global(x, m1, a, [lm_shard(1)])
  ! An array shorter than the mesh's dims (the target mesh's: dst_mesh, not x's).
  call lm_reshard(y, x, [lm_replicate()], dst_mesh=m2, ierr=ierr)
  call expect(ierr, LM_ERR_INVALID_ARGUMENT, "lm_reshard: placements: an array of 1 lm_placement for a mesh of 2 dims", &
              "placements for dst_mesh")
  call check(.not. c_associated(y%ptr), "a refused lm_reshard leaves y unset")
  ! One entry per tensor dim, and fixed counts.
  call lm_transpose(y, x, [2, 1, 3], [lm_replicate()], ierr=ierr)
  call expect(ierr, LM_ERR_INVALID_ARGUMENT, "lm_transpose: perm: an array of 3 integer for x of rank 2", "perm")
  call lm_from_local(y, m1, a, [lm_replicate()], global_shape=[4_c_int64_t, 3_c_int64_t, 1_c_int64_t], ierr=ierr)
  call expect(ierr, LM_ERR_INVALID_ARGUMENT, "lm_from_local: global_shape: an array of 3 integer for a of rank 2", &
              "global_shape")
  call lm_from_scalapack(y, m2, desc, a, ierr=ierr)
  call expect(ierr, LM_ERR_INVALID_ARGUMENT, "lm_from_scalapack: desc: an array of 8 integer, not 9", "desc")
  call lm_mesh_create(m3, MPI_COMM_WORLD, [size, 1], names=["a"], ierr=ierr)
  call expect(ierr, LM_ERR_INVALID_ARGUMENT, "lm_mesh_create: names: an array of 1 character for a mesh of 2 dims", &
              "names")
  ! A table of lm_local_map: (mesh dims) x (outputs).
  call lm_local_map(ones_fn, [lm_arg(x)], reshape([(lm_replicate(), k = 1, 6)], [2, 3]), outs, ierr=ierr)
  call expect(ierr, LM_ERR_INVALID_ARGUMENT, &
              "lm_local_map: out_placements: an array of 2x3 lm_placement for a mesh of 1 dims x 3 outputs", &
              "out_placements")
  ! A placement's own fields, named as its constructor names them.
  call lm_from_global(y, m1, a, [lm_block_cyclic(1, 0)], ierr=ierr)
  call expect(ierr, LM_ERR_INVALID_ARGUMENT, &
              "lm_from_global: placements(1): lm_block_cyclic(1, 0): block 0 must be >= 1 (the block size)", "block 0")
  call lm_from_global(y, m1, a, [lm_block_cyclic(2, 2, -1)], ierr=ierr)
  call expect(ierr, LM_ERR_INVALID_ARGUMENT, "placements(1): lm_block_cyclic(2, 2, -1): src -1 must be >= 0", "src -1")
  call lm_zeros(y, m2, [4, 3], LM_FLOAT64, [lm_replicate(), lm_shard(2, -1)], ierr=ierr)
  call expect(ierr, LM_ERR_INVALID_ARGUMENT, "lm_zeros: placements(2): lm_shard(2, -1): order -1 must be >= 0", &
              "order -1")
  call lm_from_global(y, m1, a, [lm_partial(9)], ierr=ierr)
  call expect(ierr, LM_ERR_INVALID_ARGUMENT, "placements(1): lm_partial(9): op 9 is not an LM_REDUCE_* value", "op 9")
  ! Ragged: the lengths, against the mesh dim and the array's dim.
  ext = 1
  ext2 = 1
  call lm_extents_create(ext, rid)
  call lm_extents_create(ext2, rid2)
  call lm_from_global(y, m1, a, [lm_ragged(2, rid)], ierr=ierr)
  call expect(ierr, LM_ERR_INVALID_ARGUMENT, "lm_from_global: placements(1): lm_ragged(2, " // i2s(int(rid)) // &
              "): the lengths [1, 1", "ragged lengths against the dim")
  call expect(ierr, LM_ERR_INVALID_ARGUMENT, "] add up to " // i2s(size) // ", dim 2 of the tensor is 3", &
              "ragged lengths against the dim")
  call lm_zeros(y, m1, [4, size + 1], LM_FLOAT64, [lm_ragged(2, rid2)], ierr=ierr)
  call expect(ierr, LM_ERR_INVALID_ARGUMENT, "lm_zeros: placements(1): lm_ragged(2, " // i2s(int(rid2)) // "): " // &
              i2s(size + 1) // " lengths [1, 1", "ragged lengths against the mesh")
  call expect(ierr, LM_ERR_INVALID_ARGUMENT, "] for mesh dim 1 of " // i2s(size) // " ranks", &
              "ragged lengths against the mesh")
  msg = lm_last_error_message()
  call check(index(msg, "extents id") == 0, "a ragged refusal names the lengths, not the extents id: " // msg)
  call lm_from_global(y, m1, a, [lm_ragged(2, 99999_c_int32_t)], ierr=ierr)
  call expect(ierr, LM_ERR_INVALID_ARGUMENT, "lm_ragged(2, 99999): 99999 is not an id of lm_extents_create", &
              "an unknown extents id")
  call lm_extents_get(rid, cnt, got, ierr)
  call expect(ierr, LM_ERR_INVALID_ARGUMENT, "lm_extents_get: extents: an array of 1 integer for " // i2s(size) // &
              " lengths", "extents too short")
  call lm_extents_destroy(rid)
  call lm_extents_destroy(rid2)
  ! Arguments of local_map functions.
  outs(1) = lm_arg(5_c_int64_t)
  call lm_arg_take(outs(1), y, ierr)
  call expect(ierr, LM_ERR_INVALID_ARGUMENT, "lm_arg_take: the argument is of kind 3, not a dist tensor", "arg_take")
  ! The right arguments still work.
  call lm_reshard(y, x, [lm_replicate(), lm_replicate()], dst_mesh=m2, ierr=ierr)
  call check(ierr == LM_SUCCESS, "lm_reshard onto m2 after the refusals")
  call lm_destroy(y)
  call lm_destroy(x)
end subroutine

subroutine mesh_with_mpi_integer_comm(size)
  use mpi
  use localmap
  use checks
  implicit none
  integer, intent(in) :: size
  type(lm_mesh) :: mesh
  integer :: comm, n, dim, res, ierr
  character(len=:), allocatable :: name
  call lm_mesh_create(mesh, MPI_COMM_WORLD, [size], names=["x"])
  call lm_mesh_dim_comm(mesh, 1, comm)
  call MPI_Comm_compare(comm, MPI_COMM_WORLD, res, ierr)
  call check(res == MPI_CONGRUENT, "dim comm of a 1-D mesh is congruent to the world")
  call lm_mesh_comm(mesh, comm)
  call MPI_Comm_size(comm, n, ierr)
  call check(n == size, "mesh comm size (integer comm)")
  call lm_mesh_dim_index(mesh, "x", dim)
  call lm_mesh_dim_name(mesh, 1, name)
  call check(dim == 1 .and. name == "x", "dim index and name are 1-based")
  call lm_comm_world(comm)
  call MPI_Comm_compare(comm, MPI_COMM_WORLD, res, ierr)
  call check(res == MPI_IDENT, "lm_comm_world (integer)")
end subroutine

subroutine mesh_with_mpi_f08_comm(rank, size)
  use mpi_f08
  use localmap
  use checks
  implicit none
  integer, intent(in) :: rank, size
  type(lm_mesh) :: mesh, sub
  type(MPI_Comm) :: comm
  integer(c_int64_t) :: shp(2), coord(2)
  integer :: n, r, p, dp, tp, ierr
  logical :: member
  character(len=:), allocatable :: name, msg
  type(lm_dist_tensor) :: x, y
  real(c_double) :: vals(6), empty(0)
  real(c_double), pointer :: p1(:)
  integer(c_int64_t) :: gs(1)
  tp = merge(2, 1, mod(size, 2) == 0)
  dp = size / tp
  call lm_mesh_create(mesh, MPI_COMM_WORLD, [dp, tp], names=["dp", "tp"])
  call lm_mesh_ndim(mesh, n)
  call check(n == 2, "mesh ndim")
  call lm_mesh_shape(mesh, shp)
  call check(all(shp == [dp, tp]), "mesh shape keeps mesh-dim order")
  call lm_mesh_size(mesh, n)
  call check(n == size, "mesh size")
  call lm_mesh_is_member(mesh, member)
  call check(member, "member")
  call lm_mesh_rank(mesh, r)
  call check(r == rank, "mesh rank")
  call lm_mesh_coord(mesh, coord)
  call check(all(coord == [rank / tp, mod(rank, tp)]), "coord is 0-based, row-major")
  call lm_mesh_rank_at(mesh, coord, p)
  call check(p == rank, "rank_at")
  call lm_mesh_dim_index(mesh, "tp", n)
  call check(n == 2, "dim_index(tp) = 2")
  call lm_mesh_dim_name(mesh, 1, name)
  call check(name == "dp", "dim_name(1) = dp")
  call lm_mesh_dim_comm(mesh, 2, comm)
  call MPI_Comm_size(comm, n)
  call check(n == tp, "dim comm (mpi_f08) along tp")
  call lm_mesh_comm(mesh, comm)
  call MPI_Comm_size(comm, n)
  call check(n == size, "mesh comm (mpi_f08)")
  call lm_comm_world(comm)
  call check(comm == MPI_COMM_WORLD, "lm_comm_world (mpi_f08)")
  ! Errors: a status and the library's message naming the argument.
  call lm_mesh_dim_index(mesh, "nope", n, ierr)
  msg = lm_last_error_message()
  call check(ierr == LM_ERR_INVALID_ARGUMENT .and. index(msg, "nope") > 0, "dim_index(nope): " // msg)
  call lm_mesh_create(sub, MPI_COMM_WORLD, [2, 2], names=["a"], ierr=ierr)
  call check(ierr == LM_ERR_INVALID_ARGUMENT, "one name for two dims")
  ! A mesh of rank 0 only.
  call lm_mesh_create(sub, MPI_COMM_WORLD, [1], ranks=[0])
  call lm_mesh_is_member(sub, member)
  call check(member .eqv. (rank == 0), "sub-mesh membership")
  if (rank /= 0) then
    call lm_mesh_rank(sub, r, ierr)
    call check(ierr == LM_ERR_INVALID_USAGE, "mesh rank on a non-member")
  end if
  ! Cross-mesh reshard onto the rank-0 mesh: rank 0 gets the data, the others a placeholder.
  vals = [(real(n, c_double), n = 1, 6)]
  call lm_from_global(x, mesh, vals, [lm_replicate(), lm_replicate()])
  call lm_reshard(y, x, [lm_replicate()], dst_mesh=sub)
  call lm_dist_tensor_global_shape(y, gs)
  call lm_local(y, p1)
  call check(gs(1) == 6, "cross-mesh: global shape")
  if (rank == 0) then
    call check(all(p1 == vals), "cross-mesh: rank 0 holds the data")
  else
    call check(all(shape(p1) == 0), "cross-mesh: a placeholder elsewhere")
    call lm_from_local(y, sub, empty, [lm_shard(1)], global_shape=[6_c_int64_t])
    call lm_dist_tensor_global_shape(y, gs)
    call check(gs(1) == 6, "placeholder from_local on a non-member")
  end if
end subroutine

! Grouped reshards: a group of mixed entries (an uneven all-gather, a reduce-scatter, an
! all-to-all, a rank-3 int32 tensor) gives what one lm_reshard per entry gives, blocking and
! nonblocking, on one mesh and across meshes, one bucket and one per entry; lm_reshard_many;
! argument errors.
subroutine reshard_groups(rank, size)
  use mpi_f08
  use localmap
  use checks
  implicit none
  integer, intent(in) :: rank, size
  integer, parameter :: n = 4
  type(lm_mesh) :: mesh, rev
  type(lm_reshard_entry) :: e(n), bad(2)
  type(lm_reshard_group) :: g, g2
  type(lm_dist_tensor) :: x(n), y(n), ref(n), y2(n), ref2(n), many(n)
  type(lm_request) :: req, req2
  type(lm_placement) :: dst(1, n)
  real(c_double) :: a1(7, 5), b2(9, 4), want2(9, 4)
  real(c_float) :: a3(6, 10), b3(6, 10)
  integer(c_int32_t) :: a4(4, 3, 5), b4(4, 3, 5)
  real(c_double), pointer :: p(:, :)
  integer :: i, j, r, ierr, entries, buckets
  character(len=:), allocatable :: msg

  call lm_mesh_create(mesh, MPI_COMM_WORLD, [size])
  call lm_mesh_create(rev, MPI_COMM_WORLD, [size], ranks=[(size - 1 - i, i = 0, size - 1)])
  a1 = reshape([(real(i, c_double), i = 1, 35)], [7, 5])
  a3 = reshape([(real(i, c_float) / 4, i = 1, 60)], [6, 10])
  a4 = reshape([(int(i - 30, c_int32_t), i = 1, 60)], [4, 3, 5])
  e(1) = lm_reshard_entry([7_c_int64_t, 5_c_int64_t], LM_FLOAT64, [lm_shard(1)], [lm_replicate()])
  e(2) = lm_reshard_entry([9_c_int64_t, 4_c_int64_t], LM_FLOAT64, [lm_partial(LM_REDUCE_SUM)], [lm_shard(1)])
  e(3) = lm_reshard_entry([6, 10], LM_FLOAT32, [lm_shard(1)], [lm_shard(2)])
  e(4) = lm_reshard_entry([4, 3, 5], LM_INT32, [lm_shard(3)], [lm_shard(1)])
  call check(all(e(3)%shape == [6, 10]) .and. e(4)%dst_placements(1) == lm_shard(1), "lm_reshard_entry")
  call lm_from_global(x(1), mesh, a1, e(1)%src_placements)
  ! A Partial(sum) source: rank-dependent values; the sum over the ranks is want2.
  call lm_zeros(x(2), mesh, e(2)%shape, LM_FLOAT64, e(2)%src_placements)
  call lm_local(x(2), p)
  want2 = 0
  do j = 1, 4
    do i = 1, 9
      p(i, j) = val(i, j, rank)
      do r = 0, size - 1
        want2(i, j) = want2(i, j) + val(i, j, r)
      end do
    end do
  end do
  call lm_from_global(x(3), mesh, a3, e(3)%src_placements)
  call lm_from_global(x(4), mesh, a4, e(4)%src_placements)
  do i = 1, n
    call lm_reshard(ref(i), x(i), e(i)%dst_placements)
    call lm_reshard(ref2(i), x(i), e(i)%dst_placements, dst_mesh=rev)
    dst(:, i) = e(i)%dst_placements
  end do

  ! Blocking, one bucket (the default bound), executed twice.
  call lm_reshard_group_create(g, mesh, e)
  call lm_reshard_group_size(g, entries, buckets)
  call check(entries == n .and. buckets == 1, "group size: 4 entries in one bucket")
  call lm_reshard_group_alloc_targets(g, y)
  do r = 1, 2
    call lm_reshard_group_execute(g, x, y)
    do i = 1, n
      call check(same_local(y(i), ref(i)), "group execute: an entry differs from its lm_reshard")
    end do
  end do
  call lm_local(y(1), p)
  call check(all(p == a1), "group: S(1) -> R")
  b2 = 0
  call lm_gather(y(2), b2)
  call check(all(b2 == want2), "group: P(sum) -> S(1)")
  b3 = 0
  call lm_gather(y(3), b3)
  call check(all(b3 == a3), "group: S(1) -> S(2)")
  b4 = 0
  call lm_gather(y(4), b4)
  call check(all(b4 == a4), "group: rank 3, S(3) -> S(1)")

  ! Nonblocking, to another mesh, every entry in its own bucket.
  call lm_reshard_group_create(g2, mesh, e, dst_mesh=rev, bucket_bytes=1_c_size_t)
  call lm_reshard_group_size(g2, buckets=buckets)
  call check(buckets == n, "bucket_bytes = 1: one bucket per entry")
  call lm_reshard_group_alloc_targets(g2, y2)
  call lm_reshard_group_start(g2, x, y2, req)
  call lm_request_wait(req)
  call check(.not. c_associated(req%ptr), "the request is freed")
  do i = 1, n
    call check(same_local(y2(i), ref2(i)), "group start + wait across meshes: an entry differs")
  end do

  ! lm_reshard_many: one column of placements per tensor.
  call lm_reshard_many(many, x, dst)
  do i = 1, n
    call check(same_local(many(i), ref(i)), "lm_reshard_many: a tensor differs from its lm_reshard")
  end do

  ! Errors: a status and a message; nothing changes.
  call lm_reshard_group_execute(g, x(1:2), y(1:2), ierr)
  msg = lm_last_error_message()
  call check(ierr == LM_ERR_INVALID_ARGUMENT .and. &
             index(msg, "lm_reshard_group_execute: x: an array of 2 lm_dist_tensor for a group of 4 entries") > 0, &
             "2 tensors for a group of 4: " // msg)
  call lm_reshard_group_execute(g, x, y(1:3), ierr)
  msg = lm_last_error_message()
  call check(ierr == LM_ERR_INVALID_ARGUMENT .and. index(msg, "x has 4 tensors, y 3") > 0, "x and y differ: " // msg)
  call lm_reshard_group_alloc_targets(g, y(1:3), ierr=ierr)
  call check(ierr == LM_ERR_INVALID_ARGUMENT, "alloc_targets of 3 for a group of 4")
  call check(same_local(y(1), ref(1)), "a failed alloc_targets keeps y")
  bad(1) = e(1)
  bad(2) = lm_reshard_entry([9, 4], LM_FLOAT64, [lm_shard(3)], [lm_replicate()])
  call lm_reshard_group_create(g2, mesh, bad, ierr=ierr)
  msg = lm_last_error_message()
  call check(ierr == LM_ERR_INVALID_ARGUMENT .and. index(msg, "entries(2)%src_placements(1): lm_shard(3)") > 0 &
             .and. .not. c_associated(g2%ptr), "a bad entry: " // msg)
  call lm_reshard_many(many(1:3), x, dst, ierr=ierr)
  call check(ierr == LM_ERR_INVALID_ARGUMENT, "reshard_many: 3 outputs for 4 tensors")
  call check(same_local(many(1), ref(1)), "a failed reshard_many keeps its outputs")
  call lm_reshard_group_start(g, x, y, req)
  if (c_associated(req%ptr)) then
    call lm_reshard_group_start(g, x, y, req2, ierr)
    msg = lm_last_error_message()
    call check(ierr == LM_ERR_INVALID_ARGUMENT .and. index(msg, "in flight") > 0, "a second start: " // msg)
  end if
  call lm_request_wait(req)
  ! A group of no entries; destroy is local, NULL-safe, and a destroyed group is refused.
  call lm_reshard_group_create(g2, mesh, e(1:0))
  call lm_reshard_group_execute(g2, x(1:0), y(1:0))
  call lm_reshard_group_size(g2, entries)
  call check(entries == 0, "a group of no entries")
  call lm_destroy(g)
  call check(.not. c_associated(g%ptr), "destroy nulls the group")
  call lm_destroy(g)
  call lm_reshard_group_execute(g, x, y, ierr)
  call check(ierr == LM_ERR_INVALID_ARGUMENT, "a destroyed group")
  deallocate(msg)
  ! Everything explicitly: gfortran 12 does not finalize a subroutine's locals on return.
  call lm_destroy(g2)
  do i = 1, n
    call lm_destroy(x(i))
    call lm_destroy(y(i))
    call lm_destroy(ref(i))
    call lm_destroy(y2(i))
    call lm_destroy(ref2(i))
    call lm_destroy(many(i))
  end do
  call lm_destroy(rev)
  call lm_destroy(mesh)
contains
  real(c_double) function val(i, j, r)
    integer, intent(in) :: i, j, r
    val = real(mod(i * 7 + j * 13 + r * 17, 97) - 40, c_double) / 8
  end function
end subroutine

! lm_reshard_estimate: for several transitions (an uneven all-gather, a reduce-scatter, an
! all-to-all, one across meshes, one on a 2-D mesh) the estimate equals lm_reshard_plan_info of
! the plan lm_reshard_plan_create builds from the same arguments, field by field, this rank's and
! all ranks'; bad arguments give their status.
subroutine reshard_estimates(rank, size)
  use mpi_f08
  use localmap
  use checks
  implicit none
  integer, intent(in) :: rank, size
  type(lm_mesh) :: mesh, rev, mesh2
  type(lm_reshard_plan_info_t) :: est, got, first
  integer(c_int64_t) :: o, l
  integer :: i, ierr
  character(len=:), allocatable :: msg

  call lm_mesh_create(mesh, MPI_COMM_WORLD, [size])
  call lm_mesh_create(rev, MPI_COMM_WORLD, [size], ranks=[(size - 1 - i, i = 0, size - 1)])
  call lm_mesh_create(mesh2, MPI_COMM_WORLD, [size, 1])
  call same_as_plan("S(1) -> R", mesh, [lm_shard(1)], mesh, [lm_replicate()], [7_c_int64_t, 5_c_int64_t], &
                    LM_FLOAT64)
  call same_as_plan("P(sum) -> S(1)", mesh, [lm_partial(LM_REDUCE_SUM)], mesh, [lm_shard(1)], &
                    [9_c_int64_t, 4_c_int64_t], LM_FLOAT64)
  call same_as_plan("S(1) -> S(2)", mesh, [lm_shard(1)], mesh, [lm_shard(2)], [6_c_int64_t, 11_c_int64_t], &
                    LM_FLOAT32)
  call same_as_plan("S(3) -> S(1) across meshes", mesh, [lm_shard(3)], rev, [lm_shard(1)], &
                    [4_c_int64_t, 3_c_int64_t, 5_c_int64_t], LM_INT32)
  call same_as_plan("2-D mesh [S(1), S(2)] -> [R, S(1)]", mesh2, [lm_shard(1), lm_shard(2)], mesh2, &
                    [lm_replicate(), lm_shard(1)], [8_c_int64_t, 6_c_int64_t], LM_FLOAT64)
  ! The shape in Fortran order: S(1) of a 7 x 5 tensor splits the 7 rows. Every byte of the
  ! replicated target, on every rank, arrives or is copied once; the own rows are copied.
  call lm_reshard_estimate(est, mesh, [lm_shard(1)], [lm_replicate()], [7, 5], LM_FLOAT64, all_ranks=.true.)
  call check(est%bytes_received + est%bytes_copied == 7 * 5 * 8 * size, "estimate: every target byte once")
  call lm_reshard_estimate(first, mesh, [lm_shard(1)], [lm_replicate()], [7, 5], LM_FLOAT64)
  call lm_layout_chunk(7_c_int64_t, int(size, c_int64_t), int(rank, c_int64_t), o, l)
  call check(first%bytes_copied == 5 * 8 * l, "estimate: the shard's rows are copied (the shape is reversed)")
  ! Bad arguments: nothing estimated, the named status.
  call lm_reshard_estimate(est, mesh, [lm_partial(LM_REDUCE_MAX)], [lm_partial(LM_REDUCE_SUM)], [7, 5], &
                           LM_FLOAT64, ierr=ierr)
  msg = lm_last_error_message()
  call check(ierr == LM_ERR_INVALID_ARGUMENT .and. index(msg, "[P(max)] -> [P(sum)]") > 0, &
             "estimate P(max) -> P(sum): " // msg)
  call lm_reshard_estimate(est, mesh, [lm_shard(3)], [lm_replicate()], [7, 5], LM_FLOAT64, all_ranks=.true., &
                           ierr=ierr)
  msg = lm_last_error_message()
  call check(ierr == LM_ERR_INVALID_ARGUMENT .and. index(msg, "src_placements(1): lm_shard(3)") > 0, &
             "estimate with lm_shard(3) of a rank-2 tensor: " // msg)
  call lm_reshard_estimate(est, mesh, [lm_shard(1)], [lm_replicate(), lm_replicate()], [7, 5], LM_FLOAT64, &
                           dst_mesh=rev, ierr=ierr)
  msg = lm_last_error_message()
  call check(ierr == LM_ERR_INVALID_ARGUMENT .and. &
             index(msg, "dst_placements: an array of 2 lm_placement for a mesh of 1 dims") > 0, &
             "estimate with 2 placements for a 1-D dst_mesh: " // msg)
  call lm_reshard_estimate(est, mesh, [lm_shard(1)], [lm_replicate()], [7, 5], LM_FLOAT64)
  call check(same(est, first), "estimates work after failures")
  call lm_destroy(mesh); call lm_destroy(rev); call lm_destroy(mesh2)
  deallocate(msg)
contains
  ! The estimate, with dst_mesh given and (on one mesh) left out, equals the plan's info; this
  ! rank's and all ranks'.
  subroutine same_as_plan(what, sm, sp, dm, dp, shape, dtype)
    character(len=*), intent(in) :: what
    type(lm_mesh), intent(in) :: sm, dm
    type(lm_placement), intent(in) :: sp(:), dp(:)
    integer(c_int64_t), intent(in) :: shape(:)
    type(DLDataType), intent(in) :: dtype
    type(lm_reshard_plan) :: plan
    logical :: all
    integer :: k
    call lm_reshard_plan_create(plan, sm, sp, dm, dp, shape, dtype)
    do k = 0, 1
      all = k == 1
      call lm_reshard_plan_info(plan, got, all_ranks=all)
      call lm_reshard_estimate(est, sm, sp, dp, shape, dtype, dst_mesh=dm, all_ranks=all)
      call check(same(est, got), "estimate " // what // merge(" all ranks", " this rank", all) // ": " // &
                 str(est) // " vs plan info " // str(got))
      if (.not. c_associated(sm%ptr, dm%ptr)) cycle
      call lm_reshard_estimate(est, sm, sp, dp, int(shape, c_int32_t), dtype, all_ranks=all)
      call check(same(est, got), "estimate without dst_mesh, int32 shape " // what // &
                 merge(" all ranks", " this rank", all) // ": " // str(est) // " vs plan info " // str(got))
    end do
    call lm_destroy(plan)
  end subroutine
  logical function same(a, b)
    type(lm_reshard_plan_info_t), intent(in) :: a, b
    same = a%size == b%size .and. a%magic == b%magic .and. a%version == b%version .and. &
           a%routes == b%routes .and. &
           a%steps == b%steps .and. a%peers == b%peers .and. a%flows_sent == b%flows_sent .and. &
           a%flows_received == b%flows_received .and. a%bytes_sent == b%bytes_sent .and. &
           a%bytes_received == b%bytes_received .and. a%bytes_copied == b%bytes_copied .and. &
           a%bytes_reduced == b%bytes_reduced .and. a%bytes_node_local == b%bytes_node_local .and. &
           a%work_bytes == b%work_bytes .and. a%staging_bytes_max == b%staging_bytes_max
  end function
  function str(a) result(s)
    type(lm_reshard_plan_info_t), intent(in) :: a
    character(len=:), allocatable :: s
    character(len=400) :: buf
    write(buf, '("routes ",i0," steps ",i0," peers ",i0," flows ",i0,"/",i0," bytes sent ",i0," received ",i0, &
               &" copied ",i0," reduced ",i0," node-local ",i0," work ",i0," staging ",i0)') &
      a%routes, a%steps, a%peers, a%flows_sent, a%flows_received, a%bytes_sent, a%bytes_received, &
      a%bytes_copied, a%bytes_reduced, a%bytes_node_local, a%work_bytes, a%staging_bytes_max
    s = trim(buf)
  end function
end subroutine

program test_localmap
  use, intrinsic :: iso_c_binding
  use localmap
  use checks
  implicit none
  type(lm_mesh) :: mesh, m2
  type(lm_dist_tensor) :: x, y, z, w
  type(lm_dist_tensor), allocatable :: t
  type(lm_reshard_plan) :: plan, bplan
  type(lm_request) :: req
  type(lm_placement) :: rows(2), cols(2), rep(2), psum(2), pl(2), rep1(2)
  type(lm_arg_t) :: outs(3)
  type(DLTensor) :: view
  type(DLDataType) :: dt
  type(DLDevice) :: dev
  real(c_double) :: a(7, 3), b(7, 3), big(7, 6)
  real(c_double), pointer :: p(:, :), q(:)
  real(c_float), pointer :: pf(:, :)
  integer(c_int32_t), allocatable :: mine(:, :)
  integer(c_int32_t) :: back(7, 2)
  integer(c_int32_t), pointer :: pi(:, :)
  complex(c_double_complex) :: zc(3)
  complex(c_double_complex), pointer :: pz(:)
  logical(c_bool) :: flags(3)
  logical(c_bool), pointer :: pb(:)
  integer(c_int64_t) :: gs(2), ls(2), off(2), o, l, bytes
  integer(c_int64_t), pointer :: vshape(:)
  integer :: rank, size, dp, tp, i, j, ierr, nd
  logical :: supported, done
  character(len=:), allocatable :: s, msg
  type(c_ptr) :: mt
  type(lm_reshard_plan_info_t) :: info, info_all

  call lm_init()
  call lm_world_rank(rank, size)
  me = rank

  ! ---- statics
  call check(lm_get_version() == LM_VERSION_CODE, "version")
  call check(index(lm_status_string(LM_ERR_INVALID_ARGUMENT), "INVALID_ARGUMENT") > 0, "status string")
  call lm_layout_chunk(5_c_int64_t, 4_c_int64_t, 0_c_int64_t, o, l)
  call check(o == 0 .and. l == 2, "chunk")
  call lm_layout_chunk(5_c_int64_t, 0_c_int64_t, 0_c_int64_t, o, l, ierr)
  call check(ierr == LM_ERR_INVALID_ARGUMENT, "chunk with 0 parts")
  call lm_placements_format([lm_shard(1), lm_replicate(), lm_partial(LM_REDUCE_SUM)], s)
  call check(s == "[S(1), R, P(sum)]", "format: " // s)
  call lm_device_supported(kDLCPU, supported)
  call check(supported, "cpu supported")
  call check(lm_shard(2, 1) == lm_placement(kind=LM_KIND_SHARD, dim=2, order=1), "lm_shard(dim, order)")
  call check(iand(int(LM_COMPLEX128%bits), 255) == 128, "complex128 bits")
  call lm_tensor_alloc(mt, [2_c_int64_t, 3_c_int64_t], LM_FLOAT32, ierr=ierr)
  call check(ierr == 0 .and. c_associated(mt), "lm_tensor_alloc")
  block
    type(DLManagedTensor), pointer :: mm
    integer(c_int64_t), pointer :: shp(:)
    call c_f_pointer(mt, mm)
    call c_f_pointer(mm%dl_tensor%shape, shp, [2])
    call check(all(shp == [3, 2]), "lm_tensor_alloc: the C shape is reversed")
  end block
  call lm_pool_stats(bytes, o)
  call check(bytes >= 0 .and. o >= bytes, "pool stats")

  call mesh_with_mpi_integer_comm(size)
  call mesh_with_mpi_f08_comm(rank, size)

  ! ---- the column-major rule: Fortran dim 1 is what lm_shard(1) splits.
  tp = merge(2, 1, mod(size, 2) == 0 .and. size >= 4)
  dp = size / tp
  call lm_mesh_create(mesh, MPI_COMM_WORLD_F(), [dp, tp], names=["dp", "tp"])
  do j = 1, 3
    do i = 1, 7
      a(i, j) = 100 * i + j
    end do
  end do
  rows = [lm_shard(1), lm_replicate()]
  cols = [lm_shard(2), lm_replicate()]
  rep = [lm_replicate(), lm_replicate()]
  psum = [lm_partial(LM_REDUCE_SUM), lm_replicate()]
  call lm_from_global(x, mesh, a, rows)
  call lm_dist_tensor_global_shape(x, gs)
  call lm_dist_tensor_local_shape(x, ls)
  call lm_dist_tensor_local_offset(x, off)
  call lm_layout_chunk(7_c_int64_t, int(dp, c_int64_t), int(rank / tp, c_int64_t), o, l)
  call check(all(gs == [7, 3]), "global shape in Fortran order")
  call check(all(ls == [l, 3_c_int64_t]) .and. all(off == [o, 0_c_int64_t]), "rows: local shape and offset")
  call lm_local(x, p)
  call check(all(shape(p) == [l, 3_c_int64_t]), "the shard is a Fortran array of the local extents")
  call check(all(p == a(o + 1:o + l, :)), "lm_shard(1) splits the rows")
  call lm_dist_tensor_placements(x, pl)
  call check(pl(1) == lm_shard(1) .and. pl(2) == lm_replicate(), "placements come back in Fortran dims")
  call placement_counts(mesh, x, a)
  call lm_dist_tensor_ndim(x, nd)
  call lm_dist_tensor_dtype(x, dt)
  call lm_dist_tensor_device(x, dev)
  call check(nd == 2 .and. dt == LM_FLOAT64 .and. dev%device_type == kDLCPU, "ndim, dtype, device")
  ! Underneath: the same memory is the C row-major tensor of the reversed shape.
  call lm_dist_tensor_local_view(x, view)
  call c_f_pointer(view%shape, vshape, [2])
  call check(all(vshape == [3_c_int64_t, l]), "the C view has the reversed shape")
  b = 0
  call lm_gather(x, b)
  call check(all(b == a), "gather on every rank")
  b = 0
  call lm_gather(x, b, root=0)
  call check(rank /= 0 .or. all(b == a), "gather at root 0")
  big = -1
  call lm_gather(x, big(:, 1:6:2))
  call check(all(big(:, 1:6:2) == a) .and. all(big(:, 2:6:2) == -1), "gather into a strided section")
  ! Columns.
  call lm_from_global(y, mesh, a, cols)
  call lm_layout_chunk(3_c_int64_t, int(dp, c_int64_t), int(rank / tp, c_int64_t), o, l)
  call lm_local(y, p)
  call check(all(shape(p) == [7_c_int64_t, l]), "cols: local shape")
  call check(all(p == a(:, o + 1:o + l)), "lm_shard(2) splits the columns")
  ! Scatter from root 0 (other ranks' data is not read).
  b = a
  if (rank /= 0) b = -5
  call lm_from_global(z, mesh, b, rows, root=0)
  b = 0
  call lm_gather(z, b)
  call check(all(b == a), "scatter from root 0")
  ! Reshard rows -> replicate.
  call lm_reshard(w, x, rep)
  call lm_local(w, p)
  call check(all(p == a), "reshard to replicate")
  ! from_local, uneven rows, allgathered global shape; int32.
  call lm_layout_chunk(7_c_int64_t, int(dp, c_int64_t), int(rank / tp, c_int64_t), o, l)
  allocate(mine(l, 2))
  do j = 1, 2
    do i = 1, int(l)
      mine(i, j) = int(10 * (o + i) + j)
    end do
  end do
  call lm_from_local(z, mesh, mine, rows)
  call lm_dist_tensor_global_shape(z, gs)
  call check(all(gs == [7, 2]), "from_local: allgathered global shape")
  call lm_gather(z, back)
  call check(all(back == reshape([((10 * i + j, i = 1, 7), j = 1, 2)], [7, 2])), "from_local: values")
  call lm_from_local(z, mesh, mine, rows, global_shape=[7_c_int64_t, 2_c_int64_t])
  call lm_local(z, pi)
  call check(all(pi == mine), "from_local with the global shape given")
  call lm_local(z, pf, ierr)
  call check(ierr == LM_ERR_INVALID_ARGUMENT, "a pointer of the wrong type is refused")
  ! complex and logical.
  zc = [(cmplx(i, -i, c_double_complex), i = 1, 3)]
  call lm_from_global(z, mesh, zc, [lm_replicate(), lm_replicate()])
  call lm_local(z, pz)
  call check(all(pz == zc), "complex128")
  flags = [.true._c_bool, .false._c_bool, .true._c_bool]
  call lm_from_global(z, mesh, flags, [lm_replicate(), lm_replicate()])
  call lm_local(z, pb)
  call check(all(logical(pb .eqv. flags)), "logical(c_bool)")
  ! zeros.
  call lm_zeros(z, mesh, [4, 5], LM_FLOAT32, cols)
  call lm_local(z, pf)
  call lm_layout_chunk(5_c_int64_t, int(dp, c_int64_t), int(rank / tp, c_int64_t), o, l)
  call check(all(shape(pf) == [4_c_int64_t, l]) .and. all(pf == 0), "zeros")
  ! Bad inputs: binding-side and library-side, with messages.
  call lm_from_global(z, mesh, a, [lm_shard(3), lm_replicate()], ierr=ierr)
  msg = lm_last_error_message()
  call check(ierr == LM_ERR_INVALID_ARGUMENT .and. index(msg, "lm_shard(3)") > 0, "shard dim 3: " // msg)
  call lm_from_global(z, mesh, a, [lm_shard(1)], ierr=ierr)
  call check(ierr == LM_ERR_INVALID_ARGUMENT, "one placement for a 2-D mesh")
  call lm_from_global(z, mesh, a, [lm_partial(LM_REDUCE_SUM), lm_partial(LM_REDUCE_MAX)], ierr=ierr)
  msg = lm_last_error_message()
  call check(ierr == LM_ERR_NOT_SUPPORTED, "mixed partial ops: " // msg)
  call check(len(msg) > 0, "the library's message is kept")

  ! lm_tensor_alloc'd storage taken over by a dist tensor (the 2x3 tensor made above).
  call lm_from_dlpack(z, mesh, mt, rep, global_shape=[2_c_int64_t, 3_c_int64_t])
  call lm_local(z, pf)
  call check(all(shape(pf) == [2, 3]) .and. all(pf == 0), "lm_tensor_alloc + lm_from_dlpack")
  ! device config, transport.
  call lm_mesh_create(m2, MPI_COMM_WORLD_F(), [size], check_level=1, timeout=60.0_c_double)
  call lm_mesh_transport(m2, kDLCPU, i)
  call check(i == LM_TRANSPORT_MPI, "transport of host tensors")
  block
    type(lm_device_config_t) :: dc
    call lm_mesh_device_config(m2, dc)
    call check(.not. c_associated(dc%stream), "default stream")
    call lm_mesh_set_device_config(m2, dc)
    call lm_mesh_set_device_config(m2)
    dc%magic = 0
    call lm_mesh_set_device_config(m2, dc, ierr)
    call check(ierr == LM_ERR_INVALID_ARGUMENT, "a device config with a bad magic")
  end block
  call lm_destroy(m2)

  ! ---- assignment shares, final destroys.
  z = x
  call lm_destroy(x)
  call lm_local(z, p)
  call check(all(p == a(int(off(1)) + 1:int(off(1)) + size_of_rows(z), :)), "y = x keeps the tensor alive")
  managed%dl_tensor = DLTensor(c_loc(managed_data), LM_CPU, 1, LM_FLOAT64, c_loc(managed_shape), c_null_ptr, 0)
  managed%manager_ctx = c_null_ptr
  managed%deleter = c_funloc(note_delete)
  rep1 = [lm_replicate(), lm_replicate()]
  block
    type(lm_dist_tensor) :: scoped
    call lm_from_dlpack(scoped, mesh, c_loc(managed), rep1, global_shape=[3_c_int64_t])
    call lm_local(scoped, q)
    call check(all(q == managed_data), "from_managed")
    call check(.not. deleted, "not deleted while alive")
  end block
  call check(deleted, "final: a tensor going out of scope is destroyed (deleter called)")
  deleted = .false.
  allocate(t)
  call lm_from_dlpack(t, mesh, c_loc(managed), rep1, global_shape=[3_c_int64_t])
  deallocate(t)
  call check(deleted, "final: deallocate destroys")
  ! export -> from_managed shares the storage.
  call lm_dist_tensor_to_dlpack(w, mt)
  call lm_from_dlpack(z, mesh, mt, rep)
  call lm_local(z, p)
  call check(all(p == a), "export then from_managed")
  ! retain: one more reference, dropped through the raw handle.
  mt = z%ptr
  call lm_dist_tensor_retain(z)
  call lm_dist_tensor_destroy(z)
  call check(.not. c_associated(z%ptr), "destroy nulls the handle")
  call check(lmc_dist_tensor_local(mt, view) == LM_SUCCESS, "the retained reference keeps the tensor")
  call check(lmc_dist_tensor_destroy(mt) == LM_SUCCESS, "drop the retained reference")

  ! ---- plans
  call lm_from_global(x, mesh, a, rows)
  call lm_reshard_plan_create(plan, mesh, rows, mesh, rep, [7, 3], LM_FLOAT64)
  call lm_reshard_plan_describe(plan, s)
  call check(len(s) > 0, "describe")
  call lm_reshard_plan_bytes_sent(plan, bytes)
  call check(bytes >= 0, "bytes sent")
  call lm_reshard_plan_info(plan, info)
  call lm_reshard_plan_info(plan, info_all, all_ranks=.true.)
  call check(info%bytes_sent == bytes .and. info_all%bytes_sent == info_all%bytes_received, &
             "plan info: bytes")
  ! every element of the replicated 7 x 3 target, on every rank, is received or copied once
  call check(info_all%bytes_received + info_all%bytes_copied == 7 * 3 * 8 * size, &
             "plan info: every target byte once")
  call lm_placements_adjoint([lm_partial(LM_REDUCE_SUM), lm_shard(1)], pl)
  call check(pl(1)%kind == LM_KIND_REPLICATE .and. pl(2)%kind == LM_KIND_SHARD .and. pl(2)%dim == 1, &
             "placements adjoint: Partial(sum) -> Replicate, Shard kept")
  call lm_reshard_plan_adjoint(plan, bplan)
  call lm_reshard_plan_info(bplan, info_all, all_ranks=.true.)
  call check(info_all%bytes_sent == 0, "the adjoint of rows -> replicated is a slice")
  call lm_reshard_plan_destroy(bplan)
  call lm_reshard_plan_alloc_target(plan, y)
  call lm_reshard_plan_execute(plan, x, y)
  call lm_local(y, p)
  call check(all(p == a), "plan execute")
  call lm_reshard_plan_alloc_target(plan, w)
  call lm_reshard_plan_start(plan, x, w, req)
  done = .false.
  do while (.not. done)
    call lm_request_test(req, done)
  end do
  call lm_request_wait(req)
  call lm_local(w, p)
  call check(all(p == a), "plan start/test/wait")
  call lm_reshard_plan_create(plan, mesh, rows, mesh, rep, [7, 3], LM_INT32)
  call lm_reshard_plan_execute(plan, x, y, ierr)
  call check(ierr == LM_ERR_INVALID_ARGUMENT, "plan of another dtype")
  call lm_destroy(plan)
  call reshard_groups(rank, size)
  call reshard_estimates(rank, size)
  call local_map_records(size)
  call binding_messages(size)

  ! ---- local_map
  call lm_local_map(fn, [lm_arg(x), lm_arg(int(size - 1, c_int64_t)), lm_arg(0.5_c_double), lm_arg(0_c_int64_t)], &
                    reshape([psum, [LM_NO_PLACEMENT, LM_NO_PLACEMENT], rows], [2, 3]), outs, &
                    in_placements=reshape([rows, [LM_NO_PLACEMENT, LM_NO_PLACEMENT], [LM_NO_PLACEMENT, LM_NO_PLACEMENT], &
                                           [LM_NO_PLACEMENT, LM_NO_PLACEMENT]], [2, 4]), &
                    out_ranks=[1, 0, 2], flags=LM_LOCAL_MAP_RESHARD_INPUTS, user_data=c_loc(managed))
  call check(outs(1)%kind == LM_ARG_DIST_TENSOR .and. outs(2)%kind == LM_ARG_INT64 .and. outs(2)%i64 == size, &
             "local_map outputs")
  call lm_arg_take(outs(1), y)
  call lm_reshard(z, y, rep)
  call lm_local(z, q)
  call check(abs(q(1) - 0.5d0 * sum(a)) < 1d-9, "local_map: Partial(sum) of the shard sums")
  call lm_arg_take(outs(3), w)
  b = 0
  call lm_gather(w, b)
  call check(all(b == 2 * a), "local_map: a Shard output of Fortran rank 2")
  ! fn fails on the last rank: it gets LM_ERR_USER with the text, the others LM_ERR_REMOTE.
  call lm_local_map(fn, [lm_arg(x), lm_arg(int(size - 1, c_int64_t)), lm_arg(0.5_c_double), lm_arg(1_c_int64_t)], &
                    reshape([psum, [LM_NO_PLACEMENT, LM_NO_PLACEMENT], rows], [2, 3]), outs, out_ranks=[1, 0, 2], &
                    user_data=c_loc(managed), ierr=ierr)
  msg = lm_last_error_message()
  if (rank == size - 1) then
    call check(ierr == LM_ERR_USER .and. index(msg, "the sky fell") > 0, "failing rank: " // msg)
  else
    call check(ierr == LM_ERR_REMOTE, "other ranks: " // msg)
  end if
  ! A Shard output without its rank: refused on every rank before anything runs.
  call lm_local_map(fn, [lm_arg(x), lm_arg(0_c_int64_t), lm_arg(0.5_c_double), lm_arg(0_c_int64_t)], &
                    reshape([psum, [LM_NO_PLACEMENT, LM_NO_PLACEMENT], rows], [2, 3]), outs, ierr=ierr)
  msg = lm_last_error_message()
  call check(ierr == LM_ERR_INVALID_ARGUMENT .and. index(msg, "out_ranks") > 0, "missing out_ranks: " // msg)
  ! The mesh still works.
  call lm_reshard(z, x, rep)
  call lm_local(z, p)
  call check(all(p == a), "the mesh works after failures")
  ! A borrowed mesh is not destroyed by its handle.
  call lm_dist_tensor_mesh(z, m2)
  call lm_destroy(m2)
  call lm_mesh_ndim(mesh, nd)
  call check(nd == 2, "borrowed mesh")
  call lm_destroy(x); call lm_destroy(y); call lm_destroy(z); call lm_destroy(w); call lm_destroy(mesh)

  ! ---- ragged shards: rank r owns mod(r, 3) columns of a 2 x total matrix (Fortran dim 2)
  block
    type(lm_mesh) :: rm
    type(lm_dist_tensor) :: rx
    type(lm_placement) :: rp(1)
    integer(c_int32_t) :: rid
    integer(c_int64_t) :: ext(size), got(size), cnt, total, first
    real(c_double), allocatable :: full(:, :), whole(:, :)
    real(c_double), pointer :: rloc(:, :)
    do i = 1, size
      ext(i) = mod(i - 1, 3)
    end do
    total = sum(ext)
    first = sum(ext(1:rank))
    allocate(full(2, total), whole(2, total))
    do j = 1, int(total)
      full(:, j) = [real(j, c_double), -real(j, c_double)]
    end do
    call lm_extents_create(ext, rid)
    call lm_extents_get(rid, cnt, got)
    call check(cnt == size .and. all(got == ext), "lm_extents_get")
    call lm_mesh_create(rm, MPI_COMM_WORLD_F(), [size])
    rp(1) = lm_ragged(2, rid)
    call lm_from_global(rx, rm, full, rp)
    call lm_extents_destroy(rid)
    call lm_local(rx, rloc)
    call check(all(shape(rloc) == [2, int(ext(rank + 1))]), "ragged local shape")
    if (ext(rank + 1) > 0) &
      call check(all(rloc == full(:, first + 1:first + ext(rank + 1))), "ragged local values")
    call lm_gather(rx, whole)
    call check(all(whole == full), "ragged gather")
    ! The same columns, each rank's own, with the extents agreed from the local shapes.
    block
      type(lm_dist_tensor) :: ra
      type(lm_placement) :: ap(1)
      real(c_double), allocatable :: own(:, :)
      allocate(own(2, ext(rank + 1)))
      own = full(:, first + 1:first + ext(rank + 1))
      call lm_from_local(ra, rm, own, [lm_ragged(2, LM_EXTENTS_AGREED)])
      call lm_dist_tensor_placements(ra, ap)
      call lm_extents_get(ap(1)%extents, cnt, got)
      call check(ap(1)%kind == LM_KIND_RAGGED .and. ap(1)%dim == 2 .and. cnt == size .and. &
                 all(got == ext), "agreed ragged extents")
      whole = 0
      call lm_gather(ra, whole)
      call check(all(whole == full), "agreed ragged gather")
      call lm_destroy(ra)
      call lm_from_local(ra, rm, own, [lm_ragged(2, LM_EXTENTS_AGREED)], shape_mode=LM_SHAPE_EVEN, &
                         ierr=ierr)
      call check(ierr == LM_ERR_INVALID_ARGUMENT, "agreed extents need LM_SHAPE_ALLGATHER")
      deallocate(own)
    end block
    call lm_destroy(rx); call lm_destroy(rm)
    call lm_extents_destroy(rid, ierr)
    call check(ierr == LM_ERR_INVALID_ARGUMENT, "extents destroyed once too often")
    deallocate(full, whole)
  end block
  ! Block-cyclic rows of a column-major matrix (ScaLAPACK's MB = 2, RSRC = the last rank): each
  ! rank's local array holds its blocks of rows in order, LLD = its local rows.
  block
    type(lm_mesh) :: bm
    type(lm_dist_tensor) :: bt
    type(lm_placement) :: bp(1)
    real(c_double) :: bfull(7, 3), bwhole(7, 3)
    real(c_double), allocatable :: bown(:, :)
    integer :: nloc, k
    do j = 1, 3
      do i = 1, 7
        bfull(i, j) = real(100 * i + j, c_double)
      end do
    end do
    nloc = 0
    do i = 0, 6   ! row i (0-based) is in block i/2, dealt to (i/2 + size-1) mod size
      if (mod(i / 2 + size - 1, size) == rank) nloc = nloc + 1
    end do
    allocate(bown(nloc, 3))
    k = 0
    do i = 0, 6
      if (mod(i / 2 + size - 1, size) == rank) then
        k = k + 1
        bown(k, :) = bfull(i + 1, :)
      end if
    end do
    call lm_mesh_create(bm, MPI_COMM_WORLD_F(), [size])
    call lm_from_local(bt, bm, bown, [lm_block_cyclic(1, 2, size - 1)])
    call lm_dist_tensor_placements(bt, bp)
    call check(bp(1)%kind == LM_KIND_BLOCK_CYCLIC .and. bp(1)%dim == 1 .and. bp(1)%block == 2 .and. &
               bp(1)%source == size - 1, "block-cyclic placements read back")
    bwhole = 0
    call lm_gather(bt, bwhole)
    call check(all(bwhole == bfull), "block-cyclic gather")
    call lm_destroy(bt)
    call lm_from_local(bt, bm, bown, [lm_block_cyclic(1, 0)], ierr=ierr)
    call check(ierr == LM_ERR_INVALID_ARGUMENT, "block-cyclic block size 0 refused")
    call lm_destroy(bm)
    deallocate(bown)
  end block
  ! ScaLAPACK interop without ScaLAPACK: a 1 x size grid from each rank's coordinate, the 3 x size
  ! matrix A(i, j) = 10 i + j with one column per process (NB 1), borrowed, read back, refused as
  ! a section, copied from one.
  block
    type(lm_mesh) :: grid
    type(lm_dist_tensor) :: sx
    real(c_double), target :: col(3, 1), wide(6, 1)
    real(c_double) :: whole(3, size)
    real(c_double), pointer :: sp(:, :)
    integer :: desc(9), back(9), ierr2, j
    call lm_mesh_create_grid(grid, MPI_COMM_WORLD_F(), 0, rank)
    col(:, 1) = [(10d0 * i + rank, i = 1, 3)]
    desc = [1, 0, 3, size, 3, 1, 0, 0, 3]
    call lm_from_scalapack(sx, grid, desc, col)
    call lm_local(sx, sp)
    call check(c_associated(c_loc(sp(1, 1)), c_loc(col(1, 1))), "lm_from_scalapack borrows")
    call lm_gather(sx, whole)
    call check(all(whole == reshape([((10d0 * i + j, i = 1, 3), j = 0, size - 1)], [3, size])), &
               "lm_from_scalapack: the matrix (M, N)")
    call lm_to_scalapack(sx, 7, back)
    call check(all(back == [1, 7, 3, size, 3, 1, 0, 0, 3]), "lm_to_scalapack")
    call lm_destroy(sx)
    wide(1:6:2, 1) = col(:, 1)
    call lm_from_scalapack(sx, grid, desc, wide(1:6:2, :), ierr=ierr2)
    call check(ierr2 == LM_ERR_INVALID_ARGUMENT, "lm_from_scalapack refuses to borrow a section")
    call lm_from_scalapack(sx, grid, desc, wide(1:6:2, :), copy=.true.)
    call lm_gather(sx, whole)
    call check(whole(2, rank + 1) == 10d0 * 2 + rank, "lm_from_scalapack copies a section")
    call lm_destroy(sx)
    call lm_destroy(grid)
  end block
  ! A padded ScaLAPACK array (LLD 5 > LOCr 3; two columns per process, NB 2): borrowed, lm_local a
  ! section of it, gathered, its descriptor keeps LLD 5, and a plan writes the matrix back into it
  ! without touching the padding rows.
  block
    type(lm_mesh) :: grid
    type(lm_dist_tensor) :: px, py
    type(lm_reshard_plan) :: pplan
    type(lm_placement) :: ppl(2)
    real(c_double), target :: pa(5, 2)
    real(c_double) :: pwant(3, 2), pwhole(3, 2 * size)
    real(c_double), pointer :: pp(:, :)
    integer :: pdesc(9), pback(9), ii, jj
    call lm_mesh_create_grid(grid, MPI_COMM_WORLD_F(), 0, rank)
    do jj = 1, 2
      do ii = 1, 3
        pwant(ii, jj) = 10d0 * ii + (2 * rank + jj - 1)
      end do
    end do
    pa = -7
    pa(1:3, :) = pwant
    pdesc = [1, 0, 3, 2 * size, 3, 2, 0, 0, 5]
    call lm_from_scalapack(px, grid, pdesc, pa)
    call lm_local(px, pp)
    call check(all(shape(pp) == [3, 2]), "padded borrow: lm_local has the local shape")
    call check(c_associated(c_loc(pp(1, 1)), c_loc(pa(1, 1))) .and. all(pp == pwant), &
               "padded borrow: lm_local is a section of the array")
    call lm_gather(px, pwhole)
    call check(all(pwhole == reshape([((10d0 * ii + jj, ii = 1, 3), jj = 0, 2 * size - 1)], &
                                     [3, 2 * size])), "padded borrow: gathered")
    call lm_to_scalapack(px, 7, pback)
    call check(pback(9) == 5, "padded borrow: the descriptor keeps LLD")
    call lm_dist_tensor_placements(px, ppl)
    call lm_reshard(py, px, [lm_replicate(), lm_replicate()])
    pa(1:3, :) = 0
    call lm_reshard_plan_create(pplan, grid, [lm_replicate(), lm_replicate()], grid, ppl, &
                                [3, 2 * size], LM_FLOAT64)
    call lm_reshard_plan_execute(pplan, py, px)
    call check(all(pa(1:3, :) == pwant) .and. all(pa(4:5, :) == -7), &
               "padded borrow: a plan writes the matrix, not the padding")
    call lm_destroy(pplan)
    call lm_destroy(py)
    call lm_destroy(px)
    call lm_destroy(grid)
  end block
  ! lm_transpose: a 4 x 5 matrix in column shards into its 5 x 4 transpose in column shards.
  block
    type(lm_mesh) :: tm
    type(lm_dist_tensor) :: ta, tt
    real(c_double) :: am(4, 5), at(5, 4)
    integer :: terr
    am = reshape([(real(i, c_double), i = 1, 20)], [4, 5])
    call lm_mesh_create(tm, MPI_COMM_WORLD_F(), [size])
    call lm_from_global(ta, tm, am, [lm_shard(2)])
    call lm_transpose(tt, ta, [2, 1], [lm_shard(2)])
    at = 0
    call lm_gather(tt, at)
    call check(all(at == transpose(am)), "lm_transpose: the matrix transposed")
    call lm_transpose(tt, ta, [1, 1], [lm_replicate()], ierr=terr)
    call check(terr == LM_ERR_INVALID_ARGUMENT, "lm_transpose refuses a perm that repeats a dim")
    ! lm_transpose_into: into an existing replicated 5 x 4 tensor.
    block
      type(lm_dist_tensor) :: tr
      real(c_double) :: atr(5, 4)
      atr = 0
      call lm_from_global(tr, tm, atr, [lm_replicate()])
      call lm_transpose_into(tr, ta, [2, 1])
      atr = 0
      call lm_gather(tr, atr)
      call check(all(atr == transpose(am)), "lm_transpose_into: the matrix transposed")
      call lm_transpose_into(tr, ta, [2, 2], ierr=terr)
      call check(terr == LM_ERR_INVALID_ARGUMENT, "lm_transpose_into refuses a perm that repeats")
      call lm_destroy(tr)
    end block
    call lm_destroy(tt)
    call lm_destroy(ta)
    call lm_destroy(tm)
  end block
  call lm_finalize()
  deallocate(mine, s, msg)   ! main-program allocatables are never freed (LeakSanitizer)
  if (rank == 0) write(*, '(a,i0)') "fortran tests: all passed at np ", size

contains
  ! One placement per mesh dim, checked by the binding before C is called: a shorter array was
  ! read past its end by the C library (lm_reshard, lm_transpose; the message depended on the
  ! memory after it, or a zero there passed as Replicate). mesh is 2-D (dp x tp), x is rows of a.
  subroutine placement_counts(mesh, x, a)
    type(lm_mesh), intent(in) :: mesh
    type(lm_dist_tensor), intent(in) :: x
    real(c_double), intent(in) :: a(:, :)
    type(lm_dist_tensor) :: y
    type(lm_placement) :: one(1)
    character(len=:), allocatable :: msg
    integer(c_int64_t) :: c1(1)
    integer :: ierr, r
    one = [lm_replicate()]
    call lm_reshard(y, x, one, ierr=ierr)
    msg = lm_last_error_message()
    call check(ierr == LM_ERR_INVALID_ARGUMENT .and. &
               index(msg, "lm_reshard: placements: an array of 1 lm_placement for a mesh of 2 dims") > 0, &
               "lm_reshard with 1 placement on a 2-D mesh: " // msg)
    call check(.not. c_associated(y%ptr), "lm_reshard refused: y stays unset")
    call lm_reshard(y, x, one, dst_mesh=mesh, ierr=ierr)
    msg = lm_last_error_message()
    call check(ierr == LM_ERR_INVALID_ARGUMENT .and. &
               index(msg, "lm_reshard: placements: an array of 1 lm_placement for a mesh of 2 dims") > 0, &
               "lm_reshard onto dst_mesh with 1 placement: " // msg)
    call lm_transpose(y, x, [2, 1], one, ierr=ierr)
    msg = lm_last_error_message()
    call check(ierr == LM_ERR_INVALID_ARGUMENT .and. &
               index(msg, "lm_transpose: placements: an array of 1 lm_placement for a mesh of 2 dims") > 0, &
               "lm_transpose with 1 placement: " // msg)
    call lm_zeros(y, mesh, [7_c_int64_t, 3_c_int64_t], LM_FLOAT64, one, ierr=ierr)
    msg = lm_last_error_message()
    call check(ierr == LM_ERR_INVALID_ARGUMENT .and. &
               index(msg, "lm_zeros: placements: an array of 1 lm_placement for a mesh of 2 dims") > 0, &
               "lm_zeros with 1 placement: " // msg)
    call lm_from_global(y, mesh, a, one, ierr=ierr)
    msg = lm_last_error_message()
    call check(ierr == LM_ERR_INVALID_ARGUMENT .and. &
               index(msg, "lm_from_global: placements: an array of 1 lm_placement for a mesh of 2 dims") > 0, &
               "lm_from_global with 1 placement: " // msg)
    ! Other arrays of one entry per mesh dim, or per tensor dim.
    call lm_mesh_rank_at(mesh, [0_c_int64_t], r, ierr)
    msg = lm_last_error_message()
    call check(ierr == LM_ERR_INVALID_ARGUMENT .and. &
               index(msg, "lm_mesh_rank_at: coord: an array of 1 integer for a mesh of 2 dims") > 0, &
               "lm_mesh_rank_at with 1 coordinate: " // msg)
    call lm_mesh_coord(mesh, c1, ierr)
    msg = lm_last_error_message()
    call check(ierr == LM_ERR_INVALID_ARGUMENT .and. &
               index(msg, "lm_mesh_coord: coord: an array of 1 integer for a mesh of 2 dims") > 0, &
               "lm_mesh_coord into 1 element: " // msg)
    call lm_dist_tensor_placements(x, one, ierr)
    msg = lm_last_error_message()
    call check(ierr == LM_ERR_INVALID_ARGUMENT .and. &
               index(msg, "lm_dist_tensor_placements: placements: an array of 1 lm_placement for a mesh of 2 dims") > 0, &
               "lm_dist_tensor_placements into 1 element: " // msg)
    call lm_dist_tensor_global_shape(x, c1, ierr)
    msg = lm_last_error_message()
    call check(ierr == LM_ERR_INVALID_ARGUMENT .and. &
               index(msg, "lm_dist_tensor_global_shape: shape: an array of 1 integer for x of rank 2") > 0, &
               "lm_dist_tensor_global_shape into 1 element: " // msg)
    ! The right count still works after the refusals.
    call lm_reshard(y, x, [lm_replicate(), lm_replicate()], ierr=ierr)
    call check(ierr == LM_SUCCESS, "lm_reshard with 2 placements after the refusals")
    call lm_destroy(y)
  end subroutine
  integer function MPI_COMM_WORLD_F()
    call lm_comm_world(MPI_COMM_WORLD_F)
  end function
  integer function size_of_rows(t)
    type(lm_dist_tensor), intent(in) :: t
    integer(c_int64_t) :: s2(2)
    call lm_dist_tensor_local_shape(t, s2)
    size_of_rows = int(s2(1))
  end function
end program
