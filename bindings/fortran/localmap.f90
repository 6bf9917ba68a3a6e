! SPDX-License-Identifier: BSD-3-Clause
!> The Fortran 2008 module `localmap`: distributed tensors over an N-D MPI process mesh,
!> resharding, and local_map, over the C ABI of liblocalmap (include/localmap.h).
!>
!> Two layers:
!>  - `lmc_*`: bind(C) interfaces of every C function, one for one (`lmc_mesh_create` is
!>    `lm_mesh_create`), with the C structs as bind(C) types (DLTensor, lm_placement_t, lm_arg_t,
!>    ...). C numbering and row-major shapes: use them only to talk to C code.
!>  - `lm_*`: the Fortran API. Derived types `lm_mesh`, `lm_dist_tensor`, `lm_reshard_plan`,
!>    `lm_reshard_group` and `lm_request` with `final` procedures that call the local destroy
!>    (and `lm_reshard_entry`, one reshard of a group, a plain value); Fortran arrays in and out
!>    as shards; optional `ierr` arguments (absent: a failure does `error stop` with the library's
!>    message); communicators as `type(MPI_Comm)` (mpi_f08) or plain `integer` (`use mpi`).
!>
!> COLUMN-MAJOR RULE (the one rule of this module): tensor dims are Fortran dims. A Fortran array
!> a(n1, n2, ..., nk) is the tensor of shape (n1, n2, ..., nk); `lm_shard(1)` splits its first
!> subscript (the rows of a(:,:)) the way torch.chunk splits, `lm_shard(2)` the columns. Every
!> shape, offset and placement this module takes or returns is in that order, and every shard is a
!> plain Fortran array (pointer) of the local extents: nothing is ever reversed or transposed by
!> hand. Underneath, the binding hands the C library the same memory as the row-major tensor of
!> the reversed shape (nk, ..., n1), with Fortran dim d as C dim k-d: no data is copied for that.
!> Offsets (lm_dist_tensor_local_offset) count the elements before the shard along each dim, so
!> the shard is global(off(1)+1 : off(1)+n(1), ...). Mesh dims are not array dims: they keep their
!> order (mesh dim i pairs with placements(i)) and are numbered from 1 (lm_mesh_dim_index,
!> lm_mesh_dim_name, lm_mesh_dim_comm); ranks, mesh coordinates, `root` and lm_layout_chunk's block index
!> are 0-based as in MPI.
!>
!> The module file localmap.mod is compiler-specific (it is gfortran's format, and it records the
!> mpi_f08 module of the MPI it was built with): build it with the mpif90 you compile with.
!> Link: mpif90 prog.f90 -I$PREFIX/include -L$PREFIX/lib -llocalmap_fortran -llocalmap
module localmap
  use, intrinsic :: iso_c_binding
  use, intrinsic :: iso_fortran_env, only: error_unit
  use mpi_f08, only: MPI_Comm
  implicit none
  private

  ! ---------------------------------------------------------------------------------------------
  ! Named constants
  ! ---------------------------------------------------------------------------------------------
  !> DLPack device types and type codes.
  integer, parameter, public :: kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3, kDLROCM = 10, kDLCUDAManaged = 13
  integer, parameter, public :: kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLBfloat = 4, kDLComplex = 5

  ! ---------------------------------------------------------------------------------------------
  ! The C structs (bind(C); layouts checked against the header by tests/test_layout.f90)
  ! ---------------------------------------------------------------------------------------------
  !> DLPack's DLDevice: a device type (kDLCPU, kDLCUDA, ...) and id.
  type, bind(C), public :: DLDevice
    integer(c_int) :: device_type = kDLCPU
    integer(c_int) :: device_id = 0
  end type
  !> DLPack's DLDataType (LM_FLOAT64, LM_INT32, ...; compare with ==).
  type, bind(C), public :: DLDataType
    integer(c_int8_t) :: code = 0      ! uint8_t in C
    integer(c_int8_t) :: bits = 0      ! uint8_t in C (128 is stored as -128)
    integer(c_int16_t) :: lanes = 1
  end type
  !> DLPack's DLTensor (C layout: row-major shape, as the C library sees a shard).
  type, bind(C), public :: DLTensor
    type(c_ptr) :: data = c_null_ptr
    type(DLDevice) :: device
    integer(c_int) :: ndim = 0
    type(DLDataType) :: dtype
    type(c_ptr) :: shape = c_null_ptr
    type(c_ptr) :: strides = c_null_ptr
    integer(c_int64_t) :: byte_offset = 0   ! uint64_t in C
  end type
  !> DLPack's DLManagedTensor: a DLTensor with an owner and its deleter.
  type, bind(C), public :: DLManagedTensor
    type(DLTensor) :: dl_tensor
    type(c_ptr) :: manager_ctx = c_null_ptr
    type(c_funptr) :: deleter = c_null_funptr
  end type
  ! The constants, structs, data types and host device of include/localmap.h, then the handle
  ! types (under the banner Fortran types): generated from the header by tools/api.py
  ! (tools/api_gen_fortran.py).
  include "localmap_types.inc"

  ! ---------------------------------------------------------------------------------------------
  ! Fortran types
  ! ---------------------------------------------------------------------------------------------
  !> A placement in Fortran numbering: for LM_KIND_SHARD, `dim` is the Fortran dim (1 = first
  !> subscript). Make them with lm_replicate(), lm_shard(dim [, order]), lm_partial(op),
  !> lm_ragged(dim, id [, order]), lm_block_cyclic(dim, block [, src]). The fields are those of
  !> the C lm_placement_t, each with one meaning (0 where it does not apply to the kind).
  type, public :: lm_placement
    integer(c_int32_t) :: kind = LM_KIND_REPLICATE
    integer(c_int32_t) :: dim = 0        ! Shard, Ragged, BlockCyclic: the Fortran dim
    integer(c_int32_t) :: order = 0      ! Shard, Ragged: co-shard order
    integer(c_int32_t) :: reduce_op = 0  ! Partial: LM_REDUCE_*
    integer(c_int32_t) :: extents = 0    ! Ragged: the extents id
    integer(c_int32_t) :: block = 0      ! BlockCyclic: the block size
    integer(c_int32_t) :: source = 0     ! BlockCyclic: the source coordinate
    integer(c_int32_t) :: reserved = 0
  end type
  !> In lm_local_map's placement tables: "as it is" (an input) or "not a tensor" (an output).
  type(lm_placement), parameter, public :: LM_NO_PLACEMENT = lm_placement(kind=-1)

  !> One reshard of a group (lm_reshard_group_create), in Fortran terms: the global shape in
  !> Fortran order, the dtype, and one placement per mesh dim on the source and on the target mesh
  !> (Fortran dims). Make it with lm_reshard_entry(shape, dtype, src_placements, dst_placements)
  !> (shape: integer(c_int64_t) or integer(c_int32_t); a scalar: shape=[integer(c_int64_t) ::]).
  type, public :: lm_reshard_entry
    integer(c_int64_t), allocatable :: shape(:)
    type(DLDataType) :: dtype
    type(lm_placement), allocatable :: src_placements(:), dst_placements(:)
  end type

  !> The function lm_local_map calls on every rank: a bind(C) function with exactly this
  !> interface. inputs: dist inputs arrive as LM_ARG_TENSOR local shards (read them with
  !> lm_arg_get); set each output with lm_arg_set (tensors) or lm_arg (values); return LM_SUCCESS
  !> or an error code (explain it with lm_set_error_message).
  abstract interface
    function lm_local_fn(user_data, mesh, nin, inputs, nout, outputs) bind(C) result(status)
      import :: c_ptr, c_int, lm_arg_t
      type(c_ptr), value :: user_data, mesh
      integer(c_int), value :: nin, nout
      type(lm_arg_t), intent(in) :: inputs(nin)
      type(lm_arg_t), intent(inout) :: outputs(nout)
      integer(c_int) :: status
    end function
  end interface
  public :: lm_local_fn

  ! ---------------------------------------------------------------------------------------------
  ! bind(C) interfaces of the whole C API (C numbering, row-major shapes), and their public list:
  ! generated from api/localmap.api by tools/api.py (tools/api_gen_fortran.py)
  ! ---------------------------------------------------------------------------------------------
  include "localmap_c.inc"

  ! libc, for output tensors made by lm_arg_set.
  interface
    function c_malloc_(size) bind(C, name="malloc")
      import; integer(c_size_t), value :: size; type(c_ptr) :: c_malloc_
    end function
    subroutine c_free_(p) bind(C, name="free")
      import; type(c_ptr), value :: p
    end subroutine
    function c_memcpy_(dst, src, n) bind(C, name="memcpy")
      import; type(c_ptr), value :: dst, src; integer(c_size_t), value :: n; type(c_ptr) :: c_memcpy_
    end function
    function c_strlen_(s) bind(C, name="strlen")
      import; type(c_ptr), value :: s; integer(c_size_t) :: c_strlen_
    end function
  end interface

  ! ---------------------------------------------------------------------------------------------
  ! The Fortran API
  ! ---------------------------------------------------------------------------------------------
  public :: lm_get_version, lm_status_string, lm_last_error_message, lm_set_error_message
  public :: lm_init, lm_finalize, lm_comm_world, lm_world_rank, lm_device_supported
  public :: lm_replicate, lm_shard, lm_partial, lm_ragged, lm_block_cyclic, lm_placements_format, &
    lm_placements_adjoint, lm_layout_chunk, lm_extents_create, lm_extents_get, lm_extents_destroy
  public :: lm_mesh_create, lm_mesh_create_grid, lm_mesh_destroy, lm_mesh_ndim, lm_mesh_shape, lm_mesh_size, &
    lm_mesh_is_member, lm_mesh_coord, lm_mesh_rank, lm_mesh_rank_at, lm_mesh_dim_index, &
    lm_mesh_dim_name, lm_mesh_dim_comm, lm_mesh_comm
  public :: lm_zeros, lm_from_local, lm_from_dlpack, lm_from_global, lm_gather, lm_local
  public :: lm_from_scalapack, lm_to_scalapack
  public :: lm_dist_tensor_mesh, lm_dist_tensor_ndim, lm_dist_tensor_dtype, lm_dist_tensor_device, &
    lm_dist_tensor_placements, lm_dist_tensor_global_shape, lm_dist_tensor_local_shape, &
    lm_dist_tensor_local_offset, lm_dist_tensor_local_view, lm_dist_tensor_to_dlpack, &
    lm_dist_tensor_retain, lm_dist_tensor_destroy, lm_reshard, lm_transpose, lm_transpose_into
  public :: lm_reshard_plan_create, lm_reshard_plan_alloc_target, lm_reshard_plan_execute, &
    lm_reshard_plan_start, lm_request_test, lm_request_wait, lm_reshard_plan_bytes_sent, &
    lm_reshard_plan_info, lm_reshard_estimate, lm_reshard_plan_adjoint, lm_reshard_plan_describe, &
    lm_reshard_plan_destroy
  public :: lm_reshard_group_create, lm_reshard_group_alloc_targets, &
    lm_reshard_group_execute, lm_reshard_group_start, lm_reshard_group_size, &
    lm_reshard_group_destroy, lm_reshard_many
  public :: lm_local_map_record_placements, lm_local_map_record_input_grad, lm_local_map_record_destroy
  public :: lm_local_map, lm_arg, lm_arg_get, lm_arg_set, lm_arg_take, lm_arg_shape, lm_mesh_borrow
  public :: lm_tensor_alloc, lm_pool_stats, lm_mesh_set_device_config, lm_mesh_device_config, lm_mesh_transport
  public :: lm_destroy, assignment(=), operator(==)
  ! The iso_c_binding kinds and types a user of this module needs, re-exported for convenience.
  ! (Not its procedures: gfortran 12 fails on a re-exported c_loc/c_associated. A program that
  ! calls c_loc, c_f_pointer, ... adds `use, intrinsic :: iso_c_binding`.)
  public :: c_int, c_int8_t, c_int16_t, c_int32_t, c_int64_t, c_float, c_double, c_float_complex, &
    c_double_complex, c_bool, c_char, c_size_t, c_ptr, c_null_ptr, c_funptr, c_null_funptr

  ! Generic names whose specific procedures differ in a communicator's type (integer or
  ! type(MPI_Comm)) or a shape's kind (integer(c_int64_t) or integer(c_int32_t)); the second
  ! specific of each pair is generated from the first (localmap_wrap.inc). The generics of the
  ! generated procedures are in localmap_generic.inc.
  interface lm_mesh_create
    module procedure mesh_create_int_, mesh_create_f08_, mesh_create_int_i4_, mesh_create_f08_i4_
  end interface
  interface lm_zeros
    module procedure zeros_i8_, zeros_i4_
  end interface
  interface lm_reshard_plan_create
    module procedure plan_create_i8_, plan_create_i4_
  end interface
  !> lm_reshard_estimate(info, src_mesh, src_placements, dst_placements, shape, dtype [, dst_mesh]
  !> [, all_ranks] [, ierr]): what lm_reshard_plan_info would give for the plan
  !> lm_reshard_plan_create would build, without building it (shape: integer(c_int64_t) or
  !> integer(c_int32_t), Fortran order).
  interface lm_reshard_estimate
    module procedure estimate_i8_, estimate_i4_
  end interface
  !> lm_reshard_entry(shape, dtype, src_placements, dst_placements): one reshard of a group
  !> (shape: integer(c_int64_t) or integer(c_int32_t), Fortran order).
  interface lm_reshard_entry
    module procedure entry_i8_, entry_i4_
  end interface
  interface lm_local
    module procedure lm_dist_tensor_local_view
  end interface
  interface lm_arg
    module procedure arg_dist_, arg_i8_, arg_i4_, arg_r8_, arg_ptr_, arg_dl_
  end interface
  interface operator(==)
    module procedure dtype_eq_, placement_eq_
  end interface
  interface str_
    module procedure str4_, str8_
  end interface
  include "localmap_generic.inc"

  !> Message of the last failure seen by this module (binding-side checks or the library's).
  character(len=:), allocatable, save :: errmsg_
  integer(c_int64_t), target, save :: empty_(2) = 0

contains

  ! =============================================================================================
  ! Errors and small conversions
  ! =============================================================================================
  !> A C string as a Fortran string ("" for NULL).
  function c_string_(p) result(s)
    type(c_ptr), intent(in) :: p
    character(len=:), allocatable :: s
    character(kind=c_char), pointer :: chars(:)
    s = ""
    if (.not. c_associated(p)) return
    call c_f_pointer(p, chars, [c_strlen_(p)])
    s = c_chars_(chars)
  end function

  !> The characters of buf before its first NUL (all of them if none).
  pure function c_chars_(buf) result(s)
    character(kind=c_char), intent(in) :: buf(:)
    character(len=:), allocatable :: s
    integer :: n
    n = findloc(buf, c_null_char, 1) - 1
    if (n < 0) n = size(buf)
    allocate(character(len=n) :: s)
    s = transfer(buf(1:n), s)
  end function

  !> s as a NUL-terminated C string.
  pure function to_c_str_(s) result(c)
    character(len=*), intent(in) :: s
    character(kind=c_char) :: c(len(s) + 1)
    c = transfer(s // c_null_char, c_null_char, len(s) + 1)
  end function

  pure function str8_(i) result(s)
    integer(c_int64_t), intent(in) :: i
    character(len=:), allocatable :: s
    character(len=24) :: buf
    write(buf, '(i0)') i
    s = trim(buf)
  end function
  pure function str4_(i) result(s)
    integer, intent(in) :: i
    character(len=:), allocatable :: s
    s = str8_(int(i, c_int64_t))
  end function

  !> The integers v as "[1, 2, 3]" (the first ten of more).
  function list_(v) result(s)
    integer(c_int64_t), intent(in) :: v(:)
    character(len=:), allocatable :: s
    integer :: i
    s = "["
    do i = 1, min(size(v), 10)
      if (i > 1) s = s // ", "
      s = s // str_(v(i))
    end do
    if (size(v) > 10) s = s // ", ..."
    s = s // "]"
  end function

  !> A binding-side argument error: sets the message, returns LM_ERR_INVALID_ARGUMENT.
  subroutine bad_(st, msg)
    integer(c_int), intent(out) :: st
    character(len=*), intent(in) :: msg
    st = LM_ERR_INVALID_ARGUMENT
    errmsg_ = msg
  end subroutine

  !> The status of a C call, its message remembered on failure: st = c_(lmc_...(...)).
  integer(c_int) function c_(st)
    integer(c_int), intent(in) :: st
    c_ = st
    if (st /= LM_SUCCESS) errmsg_ = c_string_(lmc_last_error_message())
  end function

  !> Ends a wrapper: ierr = st when present; otherwise a failure is `error stop` with the message.
  subroutine done_(st, ierr, where)
    integer(c_int), intent(in) :: st
    integer, intent(out), optional :: ierr
    character(len=*), intent(in) :: where
    character(len=:), allocatable :: msg
    if (present(ierr)) ierr = int(st)
    if (st == LM_SUCCESS) return
    if (.not. allocated(errmsg_)) errmsg_ = ""
    if (present(ierr)) return
    ! The binding's own messages start with the wrapper's name already: say it once.
    msg = errmsg_
    if (index(msg, where // ": ") == 1) msg = msg(len(where) + 3:)
    write(error_unit, '(5a)') "localmap: ", where, " failed: ", lm_status_string(int(st)), &
      ": " // msg
    flush(error_unit)
    error stop "localmap: " // where // ": " // msg
  end subroutine

  !> value when the optional flag x is present and .true., else 0 (a C flags argument).
  integer(c_int) function flag_(x, value)
    logical, intent(in), optional :: x
    integer, intent(in) :: value
    flag_ = 0
    if (present(x)) flag_ = merge(int(value, c_int), 0_c_int, x)
  end function

  !> The device given, else the host.
  type(DLDevice) function dev_(device)
    type(DLDevice), intent(in), optional :: device
    dev_ = LM_CPU
    if (present(device)) dev_ = device
  end function

  !> The handle of an optional mesh (NULL when absent: the C library's default).
  type(c_ptr) function mesh_ptr_(mesh)
    type(lm_mesh), intent(in), optional :: mesh
    mesh_ptr_ = c_null_ptr
    if (present(mesh)) mesh_ptr_ = mesh%ptr
  end function

  pure function reversed_(a) result(r)
    integer(c_int64_t), intent(in) :: a(:)
    integer(c_int64_t) :: r(size(a))
    r = a(size(a):1:-1)
  end function

  ! =============================================================================================
  ! Length rules (api/localmap.api): the generated rules_*_ procedures call these two
  ! =============================================================================================
  !> The ndim a length rule reads: of mesh h (of = "mesh"), of tensor h ("tensor") or of tensor
  !> h's mesh ("tensor.mesh"); -1 for a NULL h (the C call then says what it lacks), or with st
  !> set to the C library's refusal of h.
  integer function ndim_(h, of, st)
    type(c_ptr), intent(in) :: h
    character(len=*), intent(in) :: of
    integer(c_int), intent(inout) :: st
    type(c_ptr) :: m
    integer(c_int) :: n
    n = -1
    m = h
    if (st == LM_SUCCESS .and. c_associated(h)) then
      if (of == "tensor") then
        st = c_(lmc_dist_tensor_ndim(h, n))
      else
        if (of == "tensor.mesh") st = c_(lmc_dist_tensor_mesh(h, m))
        if (st == LM_SUCCESS) st = c_(lmc_mesh_ndim(m, n))
      end if
    end if
    ndim_ = int(n)
  end function

  !> Refuses the array `arg` of shape n unless it is `want` (at_least: or larger), naming it and
  !> its element type `elem` in Fortran's terms; why: what the length comes from (" for a mesh of
  !> 2 dims"). A negative want(k) asks nothing of dim k (any length, or one not known here: the C
  !> call checks it). An empty array passes for an empty table.
  subroutine want_(st, where, arg, n, elem, want, why, at_least)
    integer(c_int), intent(inout) :: st
    character(len=*), intent(in) :: where, arg, elem, why
    integer, intent(in) :: n(:), want(:)
    logical, intent(in) :: at_least
    character(len=:), allocatable :: got
    integer :: i
    if (st /= LM_SUCCESS .or. all(n == want .or. want < 0)) return
    if (at_least .and. all(n >= want)) return
    if (any(want == 0) .and. product(n) == 0) return
    got = str_(n(1))
    do i = 2, size(n)
      got = got // "x" // str_(n(i))
    end do
    call bad_(st, where // arg // ": an array of " // got // " " // elem // why)
  end subroutine

  !> The version of the loaded library (LM_VERSION_CODE).
  integer function lm_get_version()
    lm_get_version = int(lmc_get_version())
  end function

  !> The name of a status code, e.g. "LM_ERR_INVALID_ARGUMENT: invalid argument".
  function lm_status_string(status) result(s)
    integer, intent(in) :: status
    character(len=:), allocatable :: s
    s = c_string_(lmc_status_string(int(status, c_int)))
  end function

  !> The message of the last failure of a call of this module (the library's message, or the
  !> binding's own when it refused an argument before calling C).
  function lm_last_error_message() result(s)
    character(len=:), allocatable :: s
    if (allocated(errmsg_)) then
      s = errmsg_
    else
      s = c_string_(lmc_last_error_message())
    end if
  end function

  !> From a local_map function: explain its failure (the text reaches every rank's message).
  subroutine lm_set_error_message(message)
    character(len=*), intent(in) :: message
    call lmc_set_error_message(to_c_str_(message))
  end subroutine

  ! =============================================================================================
  ! Placements
  ! =============================================================================================
  !> Replicate: every rank along the mesh dim holds the full value.
  type(lm_placement) function lm_replicate()
    lm_replicate = lm_placement(kind=LM_KIND_REPLICATE)
  end function
  !> Shard of Fortran dim `dim` (1 = the first subscript); `order`: co-shard order.
  type(lm_placement) function lm_shard(dim, order)
    integer, intent(in) :: dim
    integer, intent(in), optional :: order
    lm_shard = lm_placement(kind=LM_KIND_SHARD, dim=int(dim, c_int32_t))
    if (present(order)) lm_shard%order = int(order, c_int32_t)
  end function
  !> Ragged shard of Fortran dim `dim` into the extents of `id` (lm_extents_create): coordinate i
  !> of the mesh dim holds extents(i+1) elements; it must split its dim first (lowest order).
  type(lm_placement) function lm_ragged(dim, id, order)
    integer, intent(in) :: dim
    integer(c_int32_t), intent(in) :: id
    integer, intent(in), optional :: order
    lm_ragged = lm_placement(kind=LM_KIND_RAGGED, dim=int(dim, c_int32_t), extents=id)
    if (present(order)) lm_ragged%order = int(order, c_int32_t)
  end function
  !> Block-cyclic on Fortran dim `dim`: blocks of `block` elements dealt over the mesh dim from
  !> coordinate `src` (ScaLAPACK's MB/NB and RSRC/CSRC; default 0). A ScaLAPACK local array
  !> (column-major, LLD = its local rows) with lm_block_cyclic(1, MB, RSRC) and
  !> lm_block_cyclic(2, NB, CSRC) on the BLACS grid's mesh is the distributed matrix.
  type(lm_placement) function lm_block_cyclic(dim, block, src)
    integer, intent(in) :: dim, block
    integer, intent(in), optional :: src
    lm_block_cyclic = lm_placement(kind=LM_KIND_BLOCK_CYCLIC, dim=int(dim, c_int32_t), &
                                   block=int(block, c_int32_t))
    if (present(src)) lm_block_cyclic%source = int(src, c_int32_t)
  end function
  !> Partial with a reduce op (LM_REDUCE_SUM, ...).
  type(lm_placement) function lm_partial(op)
    integer, intent(in) :: op
    lm_partial = lm_placement(kind=LM_KIND_PARTIAL, reduce_op=int(op, c_int32_t))
  end function

  logical function placement_eq_(a, b)
    type(lm_placement), intent(in) :: a, b
    placement_eq_ = all(transfer(to_c_(a), [0_c_int32_t], 8) == transfer(to_c_(b), [0_c_int32_t], 8))
  end function
  logical function dtype_eq_(a, b)
    type(DLDataType), intent(in) :: a, b
    dtype_eq_ = a%code == b%code .and. a%bits == b%bits .and. a%lanes == b%lanes
  end function
  !> The C struct with the same fields (dims as given: to_c_pl_ maps Fortran dims).
  elemental type(lm_placement_t) function to_c_(p)
    type(lm_placement), intent(in) :: p
    to_c_ = lm_placement_t(p%kind, p%dim, p%order, p%reduce_op, p%extents, p%block, p%source, &
                           p%reserved)
  end function
  !> A placement of a C struct, whose dim (of a tensor of rank ndim, if given) becomes the Fortran dim.
  elemental type(lm_placement) function from_c_(c, ndim)
    type(lm_placement_t), intent(in) :: c
    integer, intent(in), optional :: ndim
    from_c_ = lm_placement(c%kind, c%dim, c%order, c%reduce_op, c%extents, c%block, c%source, &
                           c%reserved)
    if (present(ndim) .and. splits_(c%kind)) from_c_%dim = int(ndim - c%dim, c_int32_t)
  end function
  !> Whether placements of this kind split a tensor dim (their `dim` is one).
  elemental logical function splits_(kind)
    integer(c_int32_t), intent(in) :: kind
    splits_ = kind == LM_KIND_SHARD .or. kind == LM_KIND_RAGGED .or. kind == LM_KIND_BLOCK_CYCLIC
  end function

  !> Fortran placements of a tensor of rank ndim -> the C structs (Shard dim d -> C dim ndim-d),
  !> each checked in Fortran's terms first (what: the array's name). mesh, the mesh they are for,
  !> and gshape, the global shape (Fortran order), when known, let ragged lengths be checked.
  subroutine to_c_pl_(pl, ndim, cpl, st, what, mesh, gshape)
    type(lm_placement), intent(in) :: pl(:)
    integer, intent(in) :: ndim
    type(lm_placement_t), intent(inout) :: cpl(:)
    integer(c_int), intent(inout) :: st
    character(len=*), intent(in) :: what
    type(c_ptr), intent(in), optional :: mesh
    integer(c_int64_t), intent(in), optional :: gshape(:)
    character(len=:), allocatable :: msg
    integer :: i
    do i = 1, size(pl)
      if (st /= LM_SUCCESS) return
      cpl(i) = to_c_(pl(i))
      msg = pl_problem_(pl(i), ndim)
      if (len(msg) == 0 .and. pl(i)%kind == LM_KIND_RAGGED .and. pl(i)%extents /= 0) &
        msg = ragged_problem_(pl(i), i, mesh, gshape)
      if (len(msg) > 0) call bad_(st, what // "(" // str_(i) // "): " // msg)
      if (splits_(pl(i)%kind)) cpl(i)%dim = int(ndim - pl(i)%dim, c_int32_t)
    end do
  end subroutine

  !> How p would be written with its constructor, e.g. "lm_block_cyclic(1, 0)".
  function ctor_(p) result(s)
    type(lm_placement), intent(in) :: p
    character(len=:), allocatable :: s
    select case (p%kind)
    case (LM_KIND_SHARD); s = "lm_shard(" // str_(p%dim) // opt_(p%order)
    case (LM_KIND_RAGGED); s = "lm_ragged(" // str_(p%dim) // ", " // str_(p%extents) // opt_(p%order)
    case (LM_KIND_BLOCK_CYCLIC); s = "lm_block_cyclic(" // str_(p%dim) // ", " // str_(p%block) // opt_(p%source)
    case (LM_KIND_PARTIAL); s = "lm_partial(" // str_(p%reduce_op) // ")"
    case default; s = "lm_placement(kind=" // str_(p%kind) // ")"
    end select
  contains
    function opt_(v) result(t)   ! an optional last argument, shown when not 0
      integer(c_int32_t), intent(in) :: v
      character(len=:), allocatable :: t
      t = ")"
      if (v /= 0) t = ", " // str_(v) // ")"
    end function
  end function

  !> What is wrong with placement p of a rank-ndim tensor that the binding can see ("" if nothing).
  function pl_problem_(p, ndim) result(msg)
    type(lm_placement), intent(in) :: p
    integer, intent(in) :: ndim
    character(len=:), allocatable :: msg
    msg = ""
    if (splits_(p%kind) .and. (p%dim < 1 .or. p%dim > ndim)) then
      msg = ctor_(p) // " of a rank-" // str_(ndim) // " tensor (Fortran dims are 1.." // str_(ndim) // ")"
    else if (p%kind == LM_KIND_PARTIAL .and. (p%reduce_op < LM_REDUCE_SUM .or. p%reduce_op > LM_REDUCE_PROD)) then
      msg = ctor_(p) // ": op " // str_(p%reduce_op) // " is not an LM_REDUCE_* value"
    else if (.not. splits_(p%kind)) then
      return
    else if (p%order < 0) then
      msg = ctor_(p) // ": order " // str_(p%order) // " must be >= 0"
    else if (p%kind == LM_KIND_BLOCK_CYCLIC .and. p%block < 1) then
      msg = ctor_(p) // ": block " // str_(p%block) // " must be >= 1 (the block size)"
    else if (p%kind == LM_KIND_BLOCK_CYCLIC .and. p%source < 0) then
      msg = ctor_(p) // ": src " // str_(p%source) // " must be >= 0 (the source coordinate)"
    end if
  end function

  !> What is wrong with the lengths of ragged placement p, placement i of the mesh (when given) of
  !> a tensor of global shape gshape (when given); "" if nothing.
  function ragged_problem_(p, i, mesh, gshape) result(msg)
    type(lm_placement), intent(in) :: p
    integer, intent(in) :: i
    type(c_ptr), intent(in), optional :: mesh
    integer(c_int64_t), intent(in), optional :: gshape(:)
    character(len=:), allocatable :: msg
    integer(c_int64_t), allocatable, target :: ext(:)
    integer(c_int64_t) :: n, mshape(max(i, 1))
    msg = ""
    n = 0
    if (lmc_extents_get(p%extents, c_null_ptr, 0_c_int64_t, n) /= LM_SUCCESS) then
      msg = ctor_(p) // ": " // str_(p%extents) // " is not an id of lm_extents_create, or it was destroyed"
      return
    end if
    allocate(ext(max(n, 1_c_int64_t)))
    if (lmc_extents_get(p%extents, c_loc(ext), int(size(ext), c_int64_t), n) /= LM_SUCCESS) return
    mshape = -1
    if (present(mesh)) then
      if (lmc_mesh_shape(mesh, mshape, int(i, c_int)) /= LM_SUCCESS) mshape = -1
    end if
    if (mshape(i) >= 0 .and. n /= mshape(i)) then
      msg = ctor_(p) // ": " // str_(n) // " lengths " // list_(ext(1:n)) // " for mesh dim " // str_(i) // &
            " of " // str_(mshape(i)) // " ranks"
    else if (present(gshape)) then
      if (sum(ext(1:n)) /= gshape(p%dim)) &
        msg = ctor_(p) // ": the lengths " // list_(ext(1:n)) // " add up to " // str_(sum(ext(1:n))) // &
              ", dim " // str_(p%dim) // " of the tensor is " // str_(gshape(p%dim))
    end if
  end function

  !> Formats placements, e.g. "[S(1), R, P(sum)]" (Fortran dims, as given).
  subroutine lm_placements_format(placements, str, ierr)
    type(lm_placement), intent(in) :: placements(:)
    character(len=:), allocatable, intent(out) :: str
    integer, intent(out), optional :: ierr
    character(kind=c_char) :: buf(1024)
    integer(c_int) :: st
    buf = c_null_char
    st = c_(lmc_placements_format(to_c_(placements), int(size(placements), c_int), buf, int(size(buf), c_size_t)))
    str = c_chars_(buf)
    call done_(st, ierr, "lm_placements_format")
  end subroutine

  !> The placements of a gradient (PyTorch DTensor's convention): lm_partial(LM_REDUCE_SUM) becomes
  !> lm_replicate(), Shard and Replicate are kept; Partial avg/max/min/prod fail (LM_ERR_NOT_SUPPORTED).
  subroutine lm_placements_adjoint(placements, adjoint, ierr)
    type(lm_placement), intent(in) :: placements(:)
    type(lm_placement), intent(out) :: adjoint(size(placements))
    integer, intent(out), optional :: ierr
    type(lm_placement_t) :: cout(size(placements))
    integer(c_int) :: st
    st = c_(lmc_placements_adjoint(to_c_(placements), int(size(placements), c_int), cout))
    if (st == LM_SUCCESS) adjoint = from_c_(cout)
    call done_(st, ierr, "lm_placements_adjoint")
  end subroutine

  !> The number of extents of `id` in count and, when `extents` is present, the lengths (its size
  !> must be at least count).
  subroutine lm_extents_get(id, count, extents, ierr)
    integer(c_int32_t), intent(in) :: id
    integer(c_int64_t), intent(out) :: count
    integer(c_int64_t), intent(inout), optional, target :: extents(:)
    integer, intent(out), optional :: ierr
    integer(c_int) :: st
    st = c_(lmc_extents_get(id, c_null_ptr, 0_c_int64_t, count))
    if (present(extents)) then
      call want_(st, "lm_extents_get: ", "extents", shape(extents), "integer", [int(count)], &
                 " for " // str_(count) // " lengths", .true.)
      if (st == LM_SUCCESS .and. count > 0) &
        st = c_(lmc_extents_get(id, c_loc(extents), int(size(extents), c_int64_t), count))
    end if
    call done_(st, ierr, "lm_extents_get")
  end subroutine

  ! =============================================================================================
  ! Mesh
  ! =============================================================================================
  !> Creates a mesh of extents shape(:) over ranks of `comm` (collective over comm; agrees).
  !> names: one per mesh dim; ranks: parent ranks forming the mesh, row-major over the shape;
  !> check_level: argument checks of collectives (0, 1, 2; default: LM_CHECK environment);
  !> timeout: deadline in seconds of blocking waits (0: none; default: LM_TIMEOUT environment).
  !> comm: integer or type(MPI_Comm); shape: integer(c_int64_t) or integer(c_int32_t).
  subroutine mesh_create_int_(mesh, comm, shape, names, ranks, check_level, timeout, ierr)
    type(lm_mesh), intent(inout) :: mesh
    integer, intent(in) :: comm
    integer(c_int64_t), intent(in) :: shape(:)
    character(len=*), intent(in), optional :: names(:)
    integer, intent(in), optional :: ranks(:)
    integer, intent(in), optional :: check_level
    real(c_double), intent(in), optional :: timeout
    integer, intent(out), optional :: ierr
    type(lm_mesh_config_t), target :: cfg
    character(kind=c_char), allocatable, target :: chars(:, :)
    type(c_ptr), allocatable, target :: ptrs(:)
    integer(c_int), allocatable, target :: cranks(:)
    integer(c_int) :: st
    integer :: i
    type(c_ptr) :: p
    call lm_mesh_destroy(mesh)
    cfg = lm_mesh_config_t(size=c_sizeof(cfg), magic=LM_MESH_CONFIG_MAGIC, version=LM_MESH_CONFIG_VERSION)
    if (present(check_level)) cfg%check_level = int(check_level, c_int)
    if (present(timeout)) cfg%timeout = timeout
    st = LM_SUCCESS
    if (present(ranks)) then
      cranks = int(ranks, c_int)
      cfg%ranks = c_loc(cranks)
      cfg%nranks = int(size(ranks), c_int)
    end if
    if (present(names)) then
      call want_(st, "lm_mesh_create: ", "names", [size(names)], "character", [size(shape)], &
                 " for a mesh of " // str_(size(shape)) // " dims", .false.)
      allocate(chars(len(names) + 1, max(size(names), 1)), ptrs(max(size(names), 1)))
      do i = 1, size(names)   ! each name NUL-terminated, in a column of its own
        chars(:, i) = to_c_str_(names(i))
        chars(len_trim(names(i)) + 1, i) = c_null_char
        ptrs(i) = c_loc(chars(1, i))
      end do
      cfg%dim_names = c_loc(ptrs)
    end if
    if (st == LM_SUCCESS) st = c_(lmc_mesh_create(p, int(comm, c_int), int(size(shape), c_int), shape, c_loc(cfg)))
    if (st == LM_SUCCESS) call take_mesh_(mesh, p)
    call done_(st, ierr, "lm_mesh_create")
  end subroutine

  !> A borrowed (never destroyed here) mesh from a raw handle, e.g. the `mesh` argument of a
  !> local_map function.
  subroutine lm_mesh_borrow(mesh, ptr)
    type(lm_mesh), intent(inout) :: mesh
    type(c_ptr), intent(in) :: ptr
    call lm_mesh_destroy(mesh)
    mesh%ptr = ptr
    mesh%owned = .false.
  end subroutine

  ! =============================================================================================
  ! Dist tensors
  ! =============================================================================================
  function host_tensor_(data, cshape, dtype) result(t)
    type(c_ptr), intent(in) :: data
    integer(c_int64_t), intent(in), target :: cshape(:)
    type(DLDataType), intent(in) :: dtype
    type(DLTensor) :: t
    t = DLTensor(data, LM_CPU, int(size(cshape), c_int), dtype, c_null_ptr, c_null_ptr, 0)
    if (size(cshape) > 0) t%shape = c_loc(cshape)
  end function

  !> gs = the global shape of x in Fortran order (empty, with st set, when x is refused).
  subroutine global_shape_(x, gs, st)
    type(c_ptr), intent(in) :: x
    integer(c_int64_t), allocatable, intent(out) :: gs(:)
    integer(c_int), intent(inout) :: st
    integer(c_int) :: nd
    nd = 0
    if (st == LM_SUCCESS) st = c_(lmc_dist_tensor_ndim(x, nd))
    allocate(gs(nd))
    if (st == LM_SUCCESS) st = c_(lmc_dist_tensor_global_shape(x, gs, nd))
    gs = reversed_(gs)
  end subroutine

  !> The mesh of tensor x (NULL when x is no tensor: the C call then says so).
  type(c_ptr) function mesh_of_(x)
    type(c_ptr), intent(in) :: x
    if (lmc_dist_tensor_mesh(x, mesh_of_) /= LM_SUCCESS) mesh_of_ = c_null_ptr
  end function

  !> Whether this rank passes its data to a call rooted at root on mesh (every rank when root < 0).
  logical function is_root_(mesh, root)
    type(c_ptr), intent(in) :: mesh
    integer(c_int), intent(in) :: root
    integer(c_int) :: me
    me = -1
    if (root >= 0) then
      if (lmc_mesh_rank(mesh, me) /= LM_SUCCESS) me = -1
    end if
    is_root_ = root < 0 .or. me == root
  end function

  !> A zero tensor of global shape `shape` (Fortran order) and dtype (LM_FLOAT64, ...). Local.
  !> shape: integer(c_int64_t) or integer(c_int32_t).
  subroutine zeros_i8_(x, mesh, shape, dtype, placements, device, ierr)
    type(lm_dist_tensor), intent(inout) :: x
    type(lm_mesh), intent(in) :: mesh
    integer(c_int64_t), intent(in) :: shape(:)
    type(DLDataType), intent(in) :: dtype
    type(lm_placement), intent(in) :: placements(:)
    type(DLDevice), intent(in), optional :: device
    integer, intent(out), optional :: ierr
    type(lm_placement_t) :: cpl(size(placements))
    type(c_ptr) :: p
    integer(c_int) :: st
    st = LM_SUCCESS
    call rules_dist_tensor_zeros_(st, "lm_zeros: ", mesh%ptr, placements)
    call to_c_pl_(placements, size(shape), cpl, st, "lm_zeros: placements", mesh%ptr, shape)
    if (st == LM_SUCCESS) &
      st = c_(lmc_dist_tensor_zeros(p, mesh%ptr, int(size(shape), c_int), reversed_(shape), dtype, dev_(device), cpl))
    if (st == LM_SUCCESS) call take_tensor_(x, p)
    call done_(st, ierr, "lm_zeros")
  end subroutine

  subroutine from_scalapack_(x, mesh, desc, data, dtype, copy, contiguous, ierr)
    type(lm_dist_tensor), intent(inout) :: x
    type(lm_mesh), intent(in) :: mesh
    integer, intent(in) :: desc(:)
    type(c_ptr), intent(in) :: data
    type(DLDataType), intent(in) :: dtype
    logical, intent(in), optional :: copy
    logical, intent(in) :: contiguous
    integer, intent(out), optional :: ierr
    integer(c_int) :: st, flags
    type(c_ptr) :: p
    flags = LM_FROM_LOCAL_BORROW
    if (flag_(copy, 1) == 1) flags = LM_FROM_LOCAL_COPY
    st = LM_SUCCESS
    call rules_dist_tensor_from_scalapack_(st, "lm_from_scalapack: ", desc)
    if (st == LM_SUCCESS .and. .not. contiguous .and. flags == LM_FROM_LOCAL_BORROW) &
      call bad_(st, "lm_from_scalapack: a is not contiguous, so it cannot be borrowed: pass the " // &
                "whole array (a(:, 1:LOCc) of an assumed-size one) or copy=.true.")
    if (st == LM_SUCCESS) &
      st = c_(lmc_dist_tensor_from_scalapack(p, mesh%ptr, int(desc, c_int), data, dtype, LM_CPU, flags))
    if (st == LM_SUCCESS) call take_tensor_(x, p)
    call done_(st, ierr, "lm_from_scalapack")
  end subroutine

  !> What lm_from_local and lm_from_dlpack share, after their length rules: the placements of a
  !> rank-nd tensor in C's terms, the shape mode, and the given global shape in C order.
  subroutine from_args_(where, mesh, nd, placements, global_shape, shape_mode, cpl, mode, gshape, st)
    character(len=*), intent(in) :: where
    type(c_ptr), intent(in) :: mesh
    integer, intent(in) :: nd
    type(lm_placement), intent(in) :: placements(:)
    integer(c_int64_t), intent(in), optional :: global_shape(:)
    integer, intent(in), optional :: shape_mode
    type(lm_placement_t), intent(inout) :: cpl(:)
    integer(c_int), intent(out) :: mode
    integer(c_int64_t), intent(out) :: gshape(:)
    integer(c_int), intent(inout) :: st
    mode = LM_SHAPE_ALLGATHER
    if (present(global_shape)) mode = LM_SHAPE_GIVEN
    if (present(shape_mode)) mode = int(shape_mode, c_int)
    call to_c_pl_(placements, nd, cpl, st, where // "placements", mesh, global_shape)
    if (st == LM_SUCCESS .and. mode == LM_SHAPE_GIVEN .and. .not. present(global_shape)) &
      call bad_(st, where // "shape_mode = LM_SHAPE_GIVEN needs global_shape")
    gshape = 0
    if (st == LM_SUCCESS .and. present(global_shape)) gshape(1:nd) = reversed_(global_shape)
  end subroutine

  subroutine from_local_(x, mesh, data, fshape, dtype, placements, global_shape, shape_mode, ierr)
    type(lm_dist_tensor), intent(inout) :: x
    type(lm_mesh), intent(in) :: mesh
    type(c_ptr), intent(in) :: data
    integer(c_int64_t), intent(in) :: fshape(:)
    type(DLDataType), intent(in) :: dtype
    type(lm_placement), intent(in) :: placements(:)
    integer(c_int64_t), intent(in), optional :: global_shape(:)
    integer, intent(in), optional :: shape_mode
    integer, intent(out), optional :: ierr
    type(lm_placement_t) :: cpl(size(placements))
    integer(c_int64_t), target :: cshape(size(fshape)), gshape(max(size(fshape), 1))
    type(DLTensor), target :: t
    type(c_ptr) :: p, gp
    integer(c_int) :: st, mode
    cshape = reversed_(fshape)
    t = host_tensor_(data, cshape, dtype)
    st = LM_SUCCESS
    call rules_dist_tensor_from_local_(st, "lm_from_local: ", mesh%ptr, size(fshape), placements, global_shape)
    call from_args_("lm_from_local: ", mesh%ptr, size(fshape), placements, global_shape, shape_mode, cpl, mode, &
                    gshape, st)
    gp = c_null_ptr
    if (present(global_shape)) gp = c_loc(gshape)
    if (st == LM_SUCCESS) &
      st = c_(lmc_dist_tensor_from_local(p, mesh%ptr, t, cpl, mode, gp, int(LM_FROM_LOCAL_COPY, c_int)))
    if (st == LM_SUCCESS) call take_tensor_(x, p)
    call done_(st, ierr, "lm_from_local")
  end subroutine

  !> Takes ownership of a DLManagedTensor (type(c_ptr) to it; its shape is row-major C order, e.g.
  !> one made by lmc_dist_tensor_to_dlpack or by C code) on success.
  subroutine lm_from_dlpack(x, mesh, managed, placements, global_shape, shape_mode, ierr)
    type(lm_dist_tensor), intent(inout) :: x
    type(lm_mesh), intent(in) :: mesh
    type(c_ptr), intent(in) :: managed
    type(lm_placement), intent(in) :: placements(:)
    integer(c_int64_t), intent(in), optional :: global_shape(:)
    integer, intent(in), optional :: shape_mode
    integer, intent(out), optional :: ierr
    type(DLManagedTensor), pointer :: m
    type(lm_placement_t) :: cpl(size(placements))
    integer(c_int64_t), allocatable, target :: gshape(:)
    type(c_ptr) :: p, gp
    integer(c_int) :: st, mode
    integer :: nd
    st = LM_SUCCESS
    nd = 0
    if (.not. c_associated(managed)) then
      call bad_(st, "lm_from_dlpack: managed is c_null_ptr")
    else
      call c_f_pointer(managed, m)
      nd = int(m%dl_tensor%ndim)
    end if
    allocate(gshape(max(nd, 1)))
    call rules_dist_tensor_from_dlpack_(st, "lm_from_dlpack: ", mesh%ptr, nd, placements, global_shape)
    call from_args_("lm_from_dlpack: ", mesh%ptr, nd, placements, global_shape, shape_mode, cpl, mode, gshape, st)
    gp = c_null_ptr
    if (present(global_shape)) gp = c_loc(gshape)
    if (st == LM_SUCCESS) st = c_(lmc_dist_tensor_from_dlpack(p, mesh%ptr, managed, cpl, mode, gp))
    if (st == LM_SUCCESS) call take_tensor_(x, p)
    call done_(st, ierr, "lm_from_dlpack")
  end subroutine

  subroutine from_global_(x, mesh, data, fshape, dtype, placements, root, ierr)
    type(lm_dist_tensor), intent(inout) :: x
    type(lm_mesh), intent(in) :: mesh
    type(c_ptr), intent(in) :: data
    integer(c_int64_t), intent(in) :: fshape(:)
    type(DLDataType), intent(in) :: dtype
    type(lm_placement), intent(in) :: placements(:)
    integer, intent(in), optional :: root
    integer, intent(out), optional :: ierr
    type(lm_placement_t) :: cpl(size(placements))
    integer(c_int64_t), target :: cshape(size(fshape))
    type(DLTensor), target :: t
    type(c_ptr) :: p, tp
    integer(c_int) :: st, r
    cshape = reversed_(fshape)
    t = host_tensor_(data, cshape, dtype)
    r = -1
    if (present(root)) r = int(root, c_int)
    tp = c_null_ptr   ! only mesh rank `root` passes the data when root >= 0
    if (is_root_(mesh%ptr, r)) tp = c_loc(t)
    st = LM_SUCCESS
    call rules_dist_tensor_from_global_(st, "lm_from_global: ", mesh%ptr, placements)
    call to_c_pl_(placements, size(fshape), cpl, st, "lm_from_global: placements", mesh%ptr, fshape)
    if (st == LM_SUCCESS) st = c_(lmc_dist_tensor_from_global(p, mesh%ptr, tp, cpl, r))
    if (st == LM_SUCCESS) call take_tensor_(x, p)
    call done_(st, ierr, "lm_from_global")
  end subroutine

  subroutine gather_(x, data, fshape, dtype, root, ierr)
    type(lm_dist_tensor), intent(in) :: x
    type(c_ptr), intent(in) :: data
    integer(c_int64_t), intent(in) :: fshape(:)
    type(DLDataType), intent(in) :: dtype
    integer, intent(in), optional :: root
    integer, intent(out), optional :: ierr
    integer(c_int64_t), target :: cshape(size(fshape))
    type(DLTensor), target :: t
    type(c_ptr) :: tp
    integer(c_int) :: st, r
    cshape = reversed_(fshape)
    t = host_tensor_(data, cshape, dtype)
    r = -1
    if (present(root)) r = int(root, c_int)
    tp = c_null_ptr
    if (is_root_(mesh_of_(x%ptr), r)) tp = c_loc(t)
    st = c_(lmc_dist_tensor_gather(x%ptr, r, tp))
    call done_(st, ierr, "lm_gather")
  end subroutine

  !> One placement per mesh dim, in Fortran dim numbering.
  subroutine lm_dist_tensor_placements(x, placements, ierr)
    type(lm_dist_tensor), intent(in) :: x
    type(lm_placement), intent(out) :: placements(:)
    integer, intent(out), optional :: ierr
    type(lm_placement_t) :: cpl(size(placements))
    integer(c_int) :: st
    integer :: nd
    st = LM_SUCCESS
    call rules_dist_tensor_placements_(st, "lm_dist_tensor_placements: ", x%ptr, placements)
    nd = ndim_(x%ptr, "tensor", st)
    if (st == LM_SUCCESS) st = c_(lmc_dist_tensor_placements(x%ptr, cpl, int(size(cpl), c_int)))
    if (st == LM_SUCCESS) placements = from_c_(cpl, nd)
    call done_(st, ierr, "lm_dist_tensor_placements")
  end subroutine

  !> Checks a DLTensor for a Fortran pointer of dtype and rank; gives its data address, the
  !> Fortran shape, and the Fortran extents of the array it lies in (fpad: the shape, except for a
  !> padded borrow, whose C strides nest: each a multiple of the next, the innermost 1).
  subroutine dl_data_(t, dtype, rank, data, fshape, fpad, st, what)
    type(DLTensor), intent(in) :: t
    type(DLDataType), intent(in) :: dtype
    integer, intent(in) :: rank
    type(c_ptr), intent(out) :: data
    integer(c_int64_t), intent(out) :: fshape(:), fpad(:)
    integer(c_int), intent(inout) :: st
    character(len=*), intent(in) :: what
    integer(c_int64_t), pointer :: shp(:)
    integer(c_int64_t) :: ext(max(rank, 1))
    integer(c_intptr_t) :: addr
    data = c_loc(empty_)
    fshape = 0
    fpad = 0
    if (st /= LM_SUCCESS) return
    if (.not. (t%dtype == dtype)) then
      call bad_(st, what // ": the tensor's dtype is (code " // str_(int(t%dtype%code)) // ", bits " // &
                str_(iand(int(t%dtype%bits), 255)) // "), not the pointer's (code " // str_(int(dtype%code)) // &
                ", bits " // str_(iand(int(dtype%bits), 255)) // ")")
    else if (t%ndim /= rank) then
      call bad_(st, what // ": the tensor has rank " // str_(int(t%ndim)) // ", the pointer " // str_(rank))
    else if (t%device%device_type /= kDLCPU) then
      call bad_(st, what // ": the tensor is not in host memory")
    else if (rank > 0) then
      call c_f_pointer(t%shape, shp, [rank])
      fshape = reversed_(shp)
      ! The array the shard lies in (its padded rows, or its own shape): the library's rule.
      if (lmc_padded_extents(t, ext, int(rank, c_int)) /= LM_SUCCESS) &
        call bad_(st, what // ": the tensor's strides are neither compact nor padded")
      fpad = reversed_(ext(1:rank))
    end if
    if (st == LM_SUCCESS .and. c_associated(t%data)) then
      addr = transfer(t%data, addr) + int(t%byte_offset, c_intptr_t)
      data = transfer(addr, data)
    end if
  end subroutine

  subroutine local_data_(x, dtype, rank, data, fshape, fpad, st)
    type(lm_dist_tensor), intent(in) :: x
    type(DLDataType), intent(in) :: dtype
    integer, intent(in) :: rank
    type(c_ptr), intent(out) :: data
    integer(c_int64_t), intent(out) :: fshape(:), fpad(:)
    integer(c_int), intent(out) :: st
    type(DLTensor) :: v
    st = c_(lmc_dist_tensor_local(x%ptr, v))
    call dl_data_(v, dtype, rank, data, fshape, fpad, st, "lm_local")
  end subroutine

  !> The DLTensor of a tensor argument of a local_map function (st: refused if it is none).
  subroutine arg_tensor_(arg, t, st, what)
    type(lm_arg_t), intent(in) :: arg
    type(DLTensor), pointer, intent(out) :: t
    integer(c_int), intent(out) :: st
    character(len=*), intent(in) :: what
    st = LM_SUCCESS
    t => null()
    if ((arg%kind /= LM_ARG_TENSOR .and. arg%kind /= LM_ARG_MANAGED_TENSOR) .or. .not. c_associated(arg%ptr)) then
      call bad_(st, what // ": the argument is of kind " // str_(int(arg%kind)) // ", not a tensor")
    else
      call c_f_pointer(arg%ptr, t)   ! a DLManagedTensor starts with its DLTensor
    end if
  end subroutine

  subroutine arg_data_(arg, dtype, rank, data, fshape, fpad, st)
    type(lm_arg_t), intent(in) :: arg
    type(DLDataType), intent(in) :: dtype
    integer, intent(in) :: rank
    type(c_ptr), intent(out) :: data
    integer(c_int64_t), intent(out) :: fshape(:), fpad(:)
    integer(c_int), intent(out) :: st
    type(DLTensor), pointer :: t
    type(DLTensor), target :: none
    call arg_tensor_(arg, t, st, "lm_arg_get")
    if (.not. associated(t)) t => none
    call dl_data_(t, dtype, rank, data, fshape, fpad, st, "lm_arg_get")
  end subroutine

  !> The Fortran shape of a tensor argument inside a local_map function.
  subroutine lm_arg_shape(arg, shape, ierr)
    type(lm_arg_t), intent(in) :: arg
    integer(c_int64_t), allocatable, intent(out) :: shape(:)
    integer, intent(out), optional :: ierr
    type(DLTensor), pointer :: t
    integer(c_int64_t), pointer :: shp(:)
    integer(c_int) :: st
    allocate(shape(0))
    call arg_tensor_(arg, t, st, "lm_arg_shape")
    if (st == LM_SUCCESS .and. associated(t)) then
      if (t%ndim > 0) then
        call c_f_pointer(t%shape, shp, [t%ndim])
        shape = reversed_(shp)
      end if
    end if
    call done_(st, ierr, "lm_arg_shape")
  end subroutine

  !> y = x resharded to `placements` on dst_mesh (absent: x's mesh). Collective over both meshes.
  subroutine lm_reshard(y, x, placements, dst_mesh, ierr)
    type(lm_dist_tensor), intent(inout) :: y
    type(lm_dist_tensor), intent(in) :: x
    type(lm_placement), intent(in) :: placements(:)
    type(lm_mesh), intent(in), optional :: dst_mesh
    integer, intent(out), optional :: ierr
    type(lm_placement_t) :: cpl(size(placements))
    integer(c_int64_t), allocatable :: gs(:)
    type(c_ptr) :: p, dm
    integer(c_int) :: st
    dm = mesh_ptr_(dst_mesh)
    st = LM_SUCCESS
    call rules_dist_tensor_reshard_(st, "lm_reshard: ", x%ptr, dm, placements)
    call global_shape_(x%ptr, gs, st)
    if (.not. c_associated(dm)) dm = mesh_of_(x%ptr)
    call to_c_pl_(placements, size(gs), cpl, st, "lm_reshard: placements", dm, gs)
    if (st == LM_SUCCESS) st = c_(lmc_dist_tensor_reshard(p, x%ptr, mesh_ptr_(dst_mesh), cpl))
    if (st == LM_SUCCESS) call take_tensor_(y, p)
    call done_(st, ierr, "lm_reshard")
  end subroutine

  !> call lm_transpose(y, x, perm, placements [, dst_mesh] [, ierr]): y is x with its dims
  !> permuted, dim k of y being dim perm(k) of x (Fortran's RESHAPE ORDER / a matrix transpose:
  !> perm = [2, 1]), laid out with placements (in y's dims) on dst_mesh (default: x's mesh).
  !> Host or device tensors. Collective over both meshes (lm_dist_tensor_transpose).
  subroutine lm_transpose(y, x, perm, placements, dst_mesh, ierr)
    type(lm_dist_tensor), intent(inout) :: y
    type(lm_dist_tensor), intent(in) :: x
    integer, intent(in) :: perm(:)
    type(lm_placement), intent(in) :: placements(:)
    type(lm_mesh), intent(in), optional :: dst_mesh
    integer, intent(out), optional :: ierr
    type(lm_placement_t) :: cpl(size(placements))
    integer(c_int) :: cperm(size(perm))
    integer(c_int64_t), allocatable :: gs(:)
    type(c_ptr) :: p, dm
    integer(c_int) :: st
    dm = mesh_ptr_(dst_mesh)
    st = LM_SUCCESS
    call rules_dist_tensor_transpose_(st, "lm_transpose: ", x%ptr, perm, dm, placements)
    call global_shape_(x%ptr, gs, st)
    call c_perm_(perm, cperm, st, "lm_transpose")
    if (.not. c_associated(dm)) dm = mesh_of_(x%ptr)
    if (st == LM_SUCCESS) call to_c_pl_(placements, size(gs), cpl, st, "lm_transpose: placements", dm, gs(perm))
    if (st == LM_SUCCESS) st = c_(lmc_dist_tensor_transpose(p, x%ptr, cperm, mesh_ptr_(dst_mesh), cpl))
    if (st == LM_SUCCESS) call take_tensor_(y, p)
    call done_(st, ierr, "lm_transpose")
  end subroutine

  !> call lm_transpose_into(y, x, perm [, ierr]): writes x with its dims permuted (as lm_transpose)
  !> into the existing tensor y (its mesh and placements; its shape x's permuted), e.g. C = A^T
  !> into a ScaLAPACK array borrowed with lm_from_scalapack, as pdtran does. y on x's device.
  !> Collective over both meshes (lm_dist_tensor_transpose_into).
  subroutine lm_transpose_into(y, x, perm, ierr)
    type(lm_dist_tensor), intent(in) :: y, x
    integer, intent(in) :: perm(:)
    integer, intent(out), optional :: ierr
    integer(c_int) :: cperm(size(perm))
    integer(c_int) :: st
    st = LM_SUCCESS
    call rules_dist_tensor_transpose_into_(st, "lm_transpose_into: ", x%ptr, perm)
    call c_perm_(perm, cperm, st, "lm_transpose_into")
    if (st == LM_SUCCESS) st = c_(lmc_dist_tensor_transpose_into(y%ptr, x%ptr, cperm))
    call done_(st, ierr, "lm_transpose_into")
  end subroutine

  ! A Fortran perm of a tensor's dims (1-based: dim k of the result is dim perm(k) of x) in C's
  ! dims (reversed, 0-based); st: the refusal naming the entry that is not a dim once.
  subroutine c_perm_(perm, cperm, st, what)
    integer, intent(in) :: perm(:)
    integer(c_int), intent(out) :: cperm(:)
    integer(c_int), intent(inout) :: st
    character(len=*), intent(in) :: what
    integer :: k, nd
    nd = size(perm)
    do k = 1, nd
      if (st /= LM_SUCCESS) return
      if (perm(k) < 1 .or. perm(k) > nd .or. count(perm == perm(k)) /= 1) &
        call bad_(st, what // ": perm(" // str_(k) // ") = " // str_(perm(k)) // " is not one of the dims 1 .. " // &
                  str_(nd) // " once")
      cperm(nd - k + 1) = int(nd - perm(k), c_int)   ! Fortran dim k is C dim nd - k
    end do
  end subroutine

  ! =============================================================================================
  ! Persistent plans, requests
  ! =============================================================================================
  !> Both sides' placements of a reshard of a tensor of `shape` (Fortran order) from src_mesh to
  !> dst_mesh (NULL: src_mesh), checked by lm_reshard_plan_create's length rules and in C's terms.
  subroutine pair_pl_(where, src_mesh, dst_mesh, src_placements, dst_placements, shape, sp, dp, st)
    character(len=*), intent(in) :: where
    type(c_ptr), intent(in) :: src_mesh, dst_mesh
    type(lm_placement), intent(in) :: src_placements(:), dst_placements(:)
    integer(c_int64_t), intent(in) :: shape(:)
    type(lm_placement_t), intent(inout) :: sp(:), dp(:)
    integer(c_int), intent(inout) :: st
    type(c_ptr) :: dm
    dm = dst_mesh
    if (.not. c_associated(dm)) dm = src_mesh
    call rules_reshard_plan_create_(st, where, src_mesh, src_placements, dst_mesh, dst_placements)
    call to_c_pl_(src_placements, size(shape), sp, st, where // "src_placements", src_mesh, shape)
    call to_c_pl_(dst_placements, size(shape), dp, st, where // "dst_placements", dm, shape)
  end subroutine

  !> A plan for (src layout, dst layout, dtype, global shape in Fortran order). Local.
  !> shape: integer(c_int64_t) or integer(c_int32_t).
  subroutine plan_create_i8_(plan, src_mesh, src_placements, dst_mesh, dst_placements, shape, dtype, ierr)
    type(lm_reshard_plan), intent(inout) :: plan
    type(lm_mesh), intent(in) :: src_mesh, dst_mesh
    type(lm_placement), intent(in) :: src_placements(:), dst_placements(:)
    integer(c_int64_t), intent(in) :: shape(:)
    type(DLDataType), intent(in) :: dtype
    integer, intent(out), optional :: ierr
    type(lm_placement_t) :: sp(size(src_placements)), dp(size(dst_placements))
    type(c_ptr) :: p
    integer(c_int) :: st
    call lm_reshard_plan_destroy(plan)
    st = LM_SUCCESS
    call pair_pl_("lm_reshard_plan_create: ", src_mesh%ptr, dst_mesh%ptr, src_placements, dst_placements, shape, &
                  sp, dp, st)
    if (st == LM_SUCCESS) st = c_(lmc_reshard_plan_create(p, src_mesh%ptr, sp, dst_mesh%ptr, dp, &
                                                          int(size(shape), c_int), reversed_(shape), dtype))
    if (st == LM_SUCCESS) call take_plan_(plan, p)
    call done_(st, ierr, "lm_reshard_plan_create")
  end subroutine

  !> The bytes this rank sends to other ranks when executing the plan: info%bytes_sent of
  !> lm_reshard_plan_info (this rank's counts, local).
  subroutine lm_reshard_plan_bytes_sent(plan, bytes, ierr)
    type(lm_reshard_plan), intent(in) :: plan
    integer(c_int64_t), intent(out) :: bytes
    integer, intent(out), optional :: ierr
    type(lm_reshard_plan_info_t) :: info
    integer :: st
    call lm_reshard_plan_info(plan, info, ierr=st)
    bytes = info%bytes_sent
    call done_(int(st, c_int), ierr, "lm_reshard_plan_bytes_sent")
  end subroutine

  !> What a reshard from (src_mesh, src_placements) to (dst_mesh, default src_mesh; dst_placements)
  !> of a tensor of `shape` (Fortran order) and `dtype` would move: the `info` that
  !> lm_reshard_plan_info gives for the plan lm_reshard_plan_create builds from the same arguments,
  !> without building a plan. This rank's counts (local, no communication), or with all_ranks =
  !> .true. every rank's summed (collective over both meshes). For layout searches (auto-sharding).
  subroutine estimate_i8_(info, src_mesh, src_placements, dst_placements, shape, dtype, dst_mesh, &
                          all_ranks, ierr)
    type(lm_reshard_plan_info_t), intent(out) :: info
    type(lm_mesh), intent(in) :: src_mesh
    type(lm_placement), intent(in) :: src_placements(:), dst_placements(:)
    integer(c_int64_t), intent(in) :: shape(:)
    type(DLDataType), intent(in) :: dtype
    type(lm_mesh), intent(in), optional :: dst_mesh
    logical, intent(in), optional :: all_ranks
    integer, intent(out), optional :: ierr
    type(lm_placement_t) :: sp(size(src_placements)), dp(size(dst_placements))
    integer(c_int) :: st
    info = lm_reshard_plan_info_t(size=c_sizeof(info), magic=LM_RESHARD_PLAN_INFO_MAGIC, &
                                  version=LM_RESHARD_PLAN_INFO_VERSION)
    st = LM_SUCCESS
    call pair_pl_("lm_reshard_estimate: ", src_mesh%ptr, mesh_ptr_(dst_mesh), src_placements, dst_placements, &
                  shape, sp, dp, st)
    if (st == LM_SUCCESS) &
      st = c_(lmc_reshard_estimate(src_mesh%ptr, sp, mesh_ptr_(dst_mesh), dp, int(size(shape), c_int), &
                                   reversed_(shape), dtype, flag_(all_ranks, LM_PLAN_INFO_ALL_RANKS), info))
    call done_(st, ierr, "lm_reshard_estimate")
  end subroutine

  ! =============================================================================================
  ! Grouped reshards
  ! =============================================================================================
  type(lm_reshard_entry) function entry_i8_(shape, dtype, src_placements, dst_placements) result(e)
    integer(c_int64_t), intent(in) :: shape(:)
    type(DLDataType), intent(in) :: dtype
    type(lm_placement), intent(in) :: src_placements(:), dst_placements(:)
    allocate(e%shape, source=shape)
    allocate(e%src_placements, source=src_placements)
    allocate(e%dst_placements, source=dst_placements)
    e%dtype = dtype
  end function

  !> A grouped plan for the reshards entries(:) (lm_reshard_entry) from src_mesh to dst_mesh
  !> (absent: src_mesh), created once and executed many times (lm_reshard_group_execute,
  !> lm_reshard_group_start). Each step of an execution sends one message per peer carrying every
  !> entry's bytes, not one round per tensor; the results are bit-identical to one
  !> lm_reshard_plan per entry. bucket_bytes: the bound of a bucket in global bytes (absent or 0:
  !> 64 MiB); entries are dealt in order into buckets, and one larger than the bound runs alone.
  !> Local, like lm_reshard_plan_create; the entries are copied.
  subroutine lm_reshard_group_create(group, src_mesh, entries, dst_mesh, bucket_bytes, ierr)
    type(lm_reshard_group), intent(inout) :: group
    type(lm_mesh), intent(in) :: src_mesh
    type(lm_reshard_entry), intent(in) :: entries(:)
    type(lm_mesh), intent(in), optional :: dst_mesh
    integer(c_size_t), intent(in), optional :: bucket_bytes
    integer, intent(out), optional :: ierr
    type(lm_reshard_group_config_t), target :: cfg
    integer(c_int) :: st
    call lm_reshard_group_destroy(group)
    cfg = lm_reshard_group_config_t(size=c_sizeof(cfg), magic=LM_RESHARD_GROUP_CONFIG_MAGIC, &
                                    version=LM_RESHARD_GROUP_CONFIG_VERSION)
    st = LM_SUCCESS
    if (present(bucket_bytes)) then
      if (bucket_bytes < 0) call bad_(st, "lm_reshard_group_create: bucket_bytes is negative")
      cfg%bucket_bytes = bucket_bytes
    end if
    call group_create_(group, src_mesh%ptr, mesh_ptr_(dst_mesh), entries, c_loc(cfg), st, "lm_reshard_group_create: ")
    call done_(st, ierr, "lm_reshard_group_create")
  end subroutine

  !> The group of entries from src_mesh to dst_mesh (NULL: src_mesh) with the C config cfg, each
  !> entry checked first (its shape reversed, its placements in C's dims).
  subroutine group_create_(group, src_mesh, dst_mesh, entries, cfg, st, where)
    type(lm_reshard_group), intent(inout) :: group
    type(c_ptr), intent(in) :: src_mesh, dst_mesh, cfg
    type(lm_reshard_entry), intent(in) :: entries(:)
    integer(c_int), intent(inout) :: st
    character(len=*), intent(in) :: where
    type(lm_reshard_entry_t), allocatable :: cent(:)
    integer(c_int64_t), allocatable, target :: cshape(:, :)
    type(lm_placement_t), allocatable, target :: csrc(:, :), cdst(:, :)
    type(c_ptr) :: p
    integer :: i, n, nd
    n = size(entries)
    do i = 1, n
      if (.not. (allocated(entries(i)%shape) .and. allocated(entries(i)%src_placements) .and. &
                 allocated(entries(i)%dst_placements)) .and. st == LM_SUCCESS) &
        call bad_(st, where // "entries(" // str_(i) // ") lacks its shape or placements (make it with lm_reshard_entry)")
    end do
    if (st /= LM_SUCCESS) return
    allocate(cent(max(n, 1)), cshape(maxval([1, (size(entries(i)%shape), i = 1, n)]), max(n, 1)), &
             csrc(maxval([1, (size(entries(i)%src_placements), i = 1, n)]), max(n, 1)), &
             cdst(maxval([1, (size(entries(i)%dst_placements), i = 1, n)]), max(n, 1)))
    do i = 1, n
      nd = size(entries(i)%shape)
      call pair_pl_(where // "entries(" // str_(i) // ")%", src_mesh, dst_mesh, entries(i)%src_placements, &
                    entries(i)%dst_placements, entries(i)%shape, csrc(:, i), cdst(:, i), st)
      cshape(1:nd, i) = reversed_(entries(i)%shape)
      cent(i) = lm_reshard_entry_t(int(nd, c_int), c_loc(cshape(1, i)), entries(i)%dtype, c_loc(csrc(1, i)), &
                                   c_loc(cdst(1, i)))
    end do
    if (st == LM_SUCCESS) st = c_(lmc_reshard_group_create(p, src_mesh, dst_mesh, int(n, c_int), cent, cfg))
    if (st == LM_SUCCESS) call take_group_(group, p)
  end subroutine

  !> The C handles of x(:) and y(:), which must be as many as the group has entries.
  subroutine pair_handles_(group, x, y, xs, ys, st, where)
    type(lm_reshard_group), intent(in) :: group
    type(lm_dist_tensor), intent(in) :: x(:), y(:)
    type(c_ptr), intent(out) :: xs(:), ys(:)
    integer(c_int), intent(out) :: st
    character(len=*), intent(in) :: where
    integer(c_int), target :: n
    n = -1
    st = c_(lmc_reshard_group_size(group%ptr, c_loc(n), c_null_ptr))
    call want_(st, where, "x", shape(x), "lm_dist_tensor", [int(n)], " for a group of " // str_(n) // " entries", &
               .false.)
    if (st == LM_SUCCESS .and. size(y) /= size(x)) &
      call bad_(st, where // "x has " // str_(size(x)) // " tensors, y " // str_(size(y)))
    xs = x%ptr
    ys = y%ptr
  end subroutine

  !> Runs the group: x(i) into y(i) for every entry (size(x) = size(y) = the group's number of
  !> entries). Collective over the ranks of both meshes; one agreement covers the whole group. No
  !> target may overlap another target or any source.
  subroutine lm_reshard_group_execute(group, x, y, ierr)
    type(lm_reshard_group), intent(in) :: group
    type(lm_dist_tensor), intent(in) :: x(:)
    type(lm_dist_tensor), intent(inout) :: y(:)
    integer, intent(out), optional :: ierr
    type(c_ptr) :: xs(size(x)), ys(size(y))
    integer(c_int) :: st
    call pair_handles_(group, x, y, xs, ys, st, "lm_reshard_group_execute: ")
    if (st == LM_SUCCESS) st = c_(lmc_reshard_group_execute(group%ptr, int(size(x), c_int), xs, ys))
    call done_(st, ierr, "lm_reshard_group_execute")
  end subroutine

  !> Starts the group without waiting (complete it with lm_request_wait or lm_request_test); x and
  !> y must not be touched until then, and a group has at most one request in flight.
  subroutine lm_reshard_group_start(group, x, y, request, ierr)
    type(lm_reshard_group), intent(in) :: group
    type(lm_dist_tensor), intent(in) :: x(:)
    type(lm_dist_tensor), intent(inout) :: y(:)
    type(lm_request), intent(inout) :: request
    integer, intent(out), optional :: ierr
    type(c_ptr) :: xs(size(x)), ys(size(y)), r
    integer(c_int) :: st
    call pair_handles_(group, x, y, xs, ys, st, "lm_reshard_group_start: ")
    if (st == LM_SUCCESS) st = c_(lmc_reshard_group_start(r, group%ptr, int(size(x), c_int), xs, ys))
    if (st == LM_SUCCESS) call take_request_(request, r)
    call done_(st, ierr, "lm_reshard_group_start")
  end subroutine

  !> y(j) = x(j) resharded to placements(:, j) on dst_mesh (absent: the tensors' mesh, which they
  !> all share), for every j, as one group: made from the tensors' entries
  !> (lmc_reshard_group_create), its targets allocated on x(1)'s device, executed once and
  !> destroyed. placements: (mesh ndim, size(x)), column j in Fortran dims of x(j). Collective,
  !> like lm_reshard; on failure no y(j) changes.
  subroutine lm_reshard_many(y, x, placements, dst_mesh, ierr)
    type(lm_dist_tensor), intent(inout) :: y(:)
    type(lm_dist_tensor), intent(in) :: x(:)
    type(lm_placement), intent(in) :: placements(:, :)
    type(lm_mesh), intent(in), optional :: dst_mesh
    integer, intent(out), optional :: ierr
    type(lm_reshard_entry), allocatable :: e(:)
    type(lm_dist_tensor), allocatable :: out(:)
    type(lm_reshard_group) :: g
    type(lm_placement_t) :: cpl(size(placements, 1))
    type(c_ptr) :: sm, dm, m, xs(size(x)), ys(size(x))
    integer(c_int) :: st
    integer :: j
    st = LM_SUCCESS
    if (size(y) /= size(x) .or. size(placements, 2) /= size(x)) &
      call bad_(st, "lm_reshard_many: " // str_(size(x)) // " tensors x, " // str_(size(y)) // " y and " // &
                str_(size(placements, 2)) // " columns of placements")
    if (size(x) == 0 .or. st /= LM_SUCCESS) then
      call done_(st, ierr, "lm_reshard_many")
      return
    end if
    sm = mesh_of_(x(1)%ptr)
    dm = merge(mesh_ptr_(dst_mesh), sm, present(dst_mesh))
    allocate(e(size(x)), out(size(x)))
    do j = 1, size(x)
      m = mesh_of_(x(j)%ptr)
      if (st == LM_SUCCESS .and. .not. c_associated(m, sm)) &
        call bad_(st, "lm_reshard_many: x(" // str_(j) // ") lives on another mesh than x(1) (one call moves " // &
                  "tensors of one mesh)")
      call rules_dist_tensor_reshard_(st, "lm_reshard_many: ", x(j)%ptr, dm, placements(:, j))
      call global_shape_(x(j)%ptr, e(j)%shape, st)
      call to_c_pl_(placements(:, j), size(e(j)%shape), cpl, st, "lm_reshard_many: placements(:," // str_(j) // ")", &
                    dm, e(j)%shape)
      allocate(e(j)%src_placements(size(placements, 1)))
      if (st == LM_SUCCESS) call lm_dist_tensor_placements(x(j), e(j)%src_placements, st)
      if (st == LM_SUCCESS) st = c_(lmc_dist_tensor_dtype(x(j)%ptr, e(j)%dtype))
      e(j)%dst_placements = placements(:, j)
    end do
    call group_create_(g, sm, mesh_ptr_(dst_mesh), e, c_null_ptr, st, "lm_reshard_many: ")
    if (st == LM_SUCCESS) call lm_reshard_group_alloc_targets(g, out, dev_of_(x(1)), st)
    if (st == LM_SUCCESS) call pair_handles_(g, x, out, xs, ys, st, "lm_reshard_many: ")
    if (st == LM_SUCCESS) st = c_(lmc_reshard_group_execute(g%ptr, int(size(x), c_int), xs, ys))
    do j = 1, size(x)   ! y(j) takes out(j)'s tensor, or on failure it goes (gfortran 12 does not
      if (st == LM_SUCCESS) call take_tensor_(y(j), out(j)%ptr)   ! finalize local allocatable arrays)
      if (st == LM_SUCCESS) out(j)%ptr = c_null_ptr
      call lm_dist_tensor_destroy(out(j))
    end do
    call lm_reshard_group_destroy(g)
    call done_(st, ierr, "lm_reshard_many")
  end subroutine

  !> The device of x's shard (the host when x is refused: the calls after it say why).
  type(DLDevice) function dev_of_(x)
    type(lm_dist_tensor), intent(in) :: x
    if (lmc_dist_tensor_device(x%ptr, dev_of_) /= LM_SUCCESS) dev_of_ = LM_CPU
  end function

  ! =============================================================================================
  ! local_map
  ! =============================================================================================
  !> lm_arg(x): a dist tensor input; lm_arg(5_int64), lm_arg(0.5d0): values; lm_arg(c_ptr):
  !> a pointer; lm_arg(DLTensor): a borrowed local tensor.
  type(lm_arg_t) function arg_dist_(x)
    type(lm_dist_tensor), intent(in) :: x
    arg_dist_ = lm_arg_t(LM_ARG_DIST_TENSOR, 0, 0, 0d0, x%ptr)
  end function
  type(lm_arg_t) function arg_i8_(i)
    integer(c_int64_t), intent(in) :: i
    arg_i8_ = lm_arg_t(LM_ARG_INT64, 0, i, 0d0, c_null_ptr)
  end function
  type(lm_arg_t) function arg_i4_(i)
    integer(c_int32_t), intent(in) :: i
    arg_i4_ = lm_arg_t(LM_ARG_INT64, 0, int(i, c_int64_t), 0d0, c_null_ptr)
  end function
  type(lm_arg_t) function arg_r8_(d)
    real(c_double), intent(in) :: d
    arg_r8_ = lm_arg_t(LM_ARG_DOUBLE, 0, 0_c_int64_t, d, c_null_ptr)
  end function
  type(lm_arg_t) function arg_ptr_(p)
    type(c_ptr), intent(in) :: p
    arg_ptr_ = lm_arg_t(LM_ARG_POINTER, 0, 0_c_int64_t, 0d0, p)
  end function
  type(lm_arg_t) function arg_dl_(t)
    type(DLTensor), intent(in), target :: t
    arg_dl_ = lm_arg_t(LM_ARG_TENSOR, 0, 0_c_int64_t, 0d0, c_loc(t))
  end function

  !> An output of lm_local_map that is a dist tensor: y takes over its reference.
  subroutine lm_arg_take(arg, y, ierr)
    type(lm_arg_t), intent(inout) :: arg
    type(lm_dist_tensor), intent(inout) :: y
    integer, intent(out), optional :: ierr
    integer(c_int) :: st
    st = LM_SUCCESS
    if (arg%kind /= LM_ARG_DIST_TENSOR) then
      call bad_(st, "lm_arg_take: the argument is of kind " // str_(int(arg%kind)) // ", not a dist tensor")
    else
      call take_tensor_(y, arg%ptr)
      arg = lm_arg_t()
    end if
    call done_(st, ierr, "lm_arg_take")
  end subroutine

  !> The deleter of tensors made by lm_arg_set: one malloc block.
  subroutine free_managed_(m) bind(C)
    type(c_ptr), value :: m
    call c_free_(m)
  end subroutine

  !> Makes a local_map output tensor: a copy of `a` (any rank, Fortran order) in one malloc'd
  !> DLManagedTensor whose ownership passes to localmap.
  subroutine arg_set_(arg, data, fshape, dtype, nbytes, ierr)
    type(lm_arg_t), intent(inout) :: arg
    type(c_ptr), intent(in) :: data
    integer(c_int64_t), intent(in) :: fshape(:)
    type(DLDataType), intent(in) :: dtype
    integer(c_size_t), intent(in) :: nbytes
    integer, intent(out), optional :: ierr
    type(DLManagedTensor), pointer :: m
    integer(c_int64_t), pointer :: shp(:)
    type(DLManagedTensor), target :: probe
    integer(c_size_t) :: head, off_shape
    integer(c_intptr_t) :: base
    type(c_ptr) :: blk, dst
    integer(c_int) :: st
    st = LM_SUCCESS
    off_shape = c_sizeof(probe)
    head = ((off_shape + 8 * size(fshape) + 63) / 64) * 64
    blk = c_malloc_(head + max(nbytes, 1_c_size_t))
    if (.not. c_associated(blk)) then
      st = LM_ERR_OUT_OF_MEMORY
      errmsg_ = "lm_arg_set: out of memory"
    else
      base = transfer(blk, base)
      dst = transfer(base + int(head, c_intptr_t), blk)
      call c_f_pointer(blk, m)
      m = DLManagedTensor(DLTensor(dst, LM_CPU, int(size(fshape), c_int), dtype, &
                                   transfer(base + int(off_shape, c_intptr_t), blk), c_null_ptr, 0), &
                          c_null_ptr, c_funloc(free_managed_))
      call c_f_pointer(m%dl_tensor%shape, shp, [size(fshape)])
      shp = reversed_(fshape)
      if (nbytes > 0) dst = c_memcpy_(dst, data, nbytes)
      arg = lm_arg_t(LM_ARG_MANAGED_TENSOR, 0, 0_c_int64_t, 0d0, blk)
    end if
    call done_(st, ierr, "lm_arg_set")
  end subroutine

  !> Calls fn on every rank's local shards and wraps its tensor outputs as dist tensors.
  !>  inputs(nin): lm_arg(x), lm_arg(5_int64), ...
  !>  out_placements(mesh ndim, nout): column j = placements of output j (Fortran dims), or a
  !>    column starting with LM_NO_PLACEMENT for a non-tensor output.
  !>  outputs(nout): results (lm_arg_take for tensors; i64/f64 components for values).
  !>  in_placements(mesh ndim, nin): placements a dist input must have; a column starting with
  !>    LM_NO_PLACEMENT: as it is.
  !>  out_ranks(nout): the rank of each output tensor; needed when a column of out_placements has
  !>    lm_shard (its Fortran dim depends on the rank) or out_shapes is given.
  !>  out_shapes(max rank, nout): column j's first out_ranks(j) entries = output j's global shape
  !>    (Fortran order); a column starting with -1: derived.
  !>  mesh: default the dist inputs'; flags: LM_LOCAL_MAP_*; user_data: fn's first argument.
  !>  in_grad_placements(mesh ndim, nin): the placements of the gradient of a dist input's local
  !>    view as a backward pass computes it (e.g. lm_partial(LM_REDUCE_SUM) for a replicated
  !>    weight); a column starting with LM_NO_PLACEMENT: those fn saw.
  !>  record: receives the call's record for a hand-written backward pass (lm_local_map_ex).
  !> Collective over the mesh and agrees: a failure of fn on one rank fails the call everywhere.
  subroutine lm_local_map(fn, inputs, out_placements, outputs, in_placements, out_ranks, out_shapes, mesh, &
                          flags, user_data, ierr, in_grad_placements, record)
    procedure(lm_local_fn) :: fn
    type(lm_arg_t), intent(in) :: inputs(:)
    type(lm_placement), intent(in) :: out_placements(:, :)
    type(lm_arg_t), intent(inout) :: outputs(:)
    type(lm_placement), intent(in), optional :: in_placements(:, :)
    integer, intent(in), optional :: out_ranks(:)
    integer(c_int64_t), intent(in), optional :: out_shapes(:, :)
    type(lm_mesh), intent(in), optional :: mesh
    integer, intent(in), optional :: flags
    type(c_ptr), intent(in), optional :: user_data
    integer, intent(out), optional :: ierr
    type(lm_placement), intent(in), optional :: in_grad_placements(:, :)
    type(lm_local_map_record), intent(inout), optional :: record
    type(lm_placement_t), allocatable, target :: cin(:, :), cout(:, :), cgrad(:, :)
    integer(c_int64_t), allocatable, target :: cshapes(:, :)
    type(c_ptr), allocatable, target :: pin(:), pout(:), pshape(:), pgrad(:)
    type(lm_local_map_options_t) :: opt
    type(c_ptr), target :: rec
    type(lm_arg_t) :: cin_args(size(inputs)), cout_args(size(outputs))
    type(c_ptr) :: m, ud, inp, shp
    integer(c_int) :: st, fl
    integer :: i, nin, nout
    nin = size(inputs)
    nout = size(outputs)
    m = mesh_ptr_(mesh)
    do i = 1, nin   ! the mesh the tables are for: the call's, else the dist inputs'
      if (c_associated(m)) exit
      if (inputs(i)%kind == LM_ARG_DIST_TENSOR) m = mesh_of_(inputs(i)%ptr)
    end do
    st = LM_SUCCESS
    call rules_local_map_(st, "lm_local_map: ", nin, in_placements, nout, out_placements, out_shapes, m)
    if (present(in_grad_placements)) &
      call want_(st, "lm_local_map: ", "in_grad_placements", shape(in_grad_placements), "lm_placement", &
                 [ndim_(m, "mesh", st), nin], " for a mesh of " // str_(ndim_(m, "mesh", st)) // " dims x " // &
                 str_(nin) // " inputs", .false.)
    if (present(out_ranks)) call want_(st, "lm_local_map: ", "out_ranks", shape(out_ranks), "integer", [nout], &
                                       " for " // str_(nout) // " outputs", .false.)
    inp = in_table_(inputs, in_placements, "in_placements", cin, pin, st)
    opt = lm_local_map_options_t(size=c_sizeof(opt), magic=LM_LOCAL_MAP_OPTIONS_MAGIC, &
                                 version=LM_LOCAL_MAP_OPTIONS_VERSION)
    opt%in_grad_placements = in_table_(inputs, in_grad_placements, "in_grad_placements", cgrad, pgrad, st)
    call out_table_(out_placements, out_ranks, cout, pout, st)
    shp = out_shapes_(out_shapes, out_ranks, nout, cshapes, pshape, st)
    if (st == LM_SUCCESS) then
      ud = c_null_ptr
      if (present(user_data)) ud = user_data
      fl = 0
      if (present(flags)) fl = int(flags, c_int)
      cin_args = inputs
      rec = c_null_ptr
      if (present(record)) opt%record = c_loc(rec)
      if (present(record) .or. present(in_grad_placements)) then
        st = c_(lmc_local_map_ex(c_funloc(fn), ud, int(nin, c_int), cin_args, inp, int(nout, c_int), c_loc(pout), &
                                 shp, mesh_ptr_(mesh), fl, opt, cout_args))
      else
        st = c_(lmc_local_map(c_funloc(fn), ud, int(nin, c_int), cin_args, inp, int(nout, c_int), c_loc(pout), &
                              shp, mesh_ptr_(mesh), fl, cout_args))
      end if
      if (st == LM_SUCCESS .and. present(record)) call take_record_(record, rec)
      outputs = cout_args
    end if
    call done_(st, ierr, "lm_local_map")
  end subroutine

  !> An input table of lm_local_map (in_placements, in_grad_placements; absent: NULL) as the C
  !> table: column i in the Fortran dims of input i's rank, or NULL where it starts with
  !> LM_NO_PLACEMENT.
  type(c_ptr) function in_table_(inputs, pl, what, cpl, ptrs, st)
    type(lm_arg_t), intent(in) :: inputs(:)
    type(lm_placement), intent(in), optional :: pl(:, :)
    character(len=*), intent(in) :: what
    type(lm_placement_t), allocatable, target, intent(out) :: cpl(:, :)
    type(c_ptr), allocatable, target, intent(out) :: ptrs(:)
    integer(c_int), intent(inout) :: st
    integer(c_int) :: nd
    integer :: i
    allocate(ptrs(max(size(inputs), 1)))
    ptrs = c_null_ptr
    in_table_ = c_null_ptr
    if (.not. present(pl) .or. st /= LM_SUCCESS) return
    in_table_ = c_loc(ptrs)
    allocate(cpl(max(size(pl, 1), 1), max(size(inputs), 1)))
    do i = 1, size(inputs)
      if (pl(1, i)%kind == LM_NO_PLACEMENT%kind) cycle
      nd = 0
      if (inputs(i)%kind == LM_ARG_DIST_TENSOR) then
        if (lmc_dist_tensor_ndim(inputs(i)%ptr, nd) /= LM_SUCCESS) nd = 0
      end if
      call to_c_pl_(pl(:, i), int(nd), cpl(:, i), st, "lm_local_map: " // what // "(:," // str_(i) // ")")
      ptrs(i) = c_loc(cpl(1, i))
    end do
  end function

  !> lm_local_map's out_placements as the C table: column j in the Fortran dims of output j's rank
  !> (out_ranks(j); needed for lm_shard), NULL where it starts with LM_NO_PLACEMENT.
  subroutine out_table_(pl, out_ranks, cpl, ptrs, st)
    type(lm_placement), intent(in) :: pl(:, :)
    integer, intent(in), optional :: out_ranks(:)
    type(lm_placement_t), allocatable, target, intent(out) :: cpl(:, :)
    type(c_ptr), allocatable, target, intent(out) :: ptrs(:)
    integer(c_int), intent(inout) :: st
    integer :: j, r
    allocate(cpl(max(size(pl, 1), 1), max(size(pl, 2), 1)), ptrs(max(size(pl, 2), 1)))
    ptrs = c_null_ptr
    do j = 1, size(pl, 2)
      if (st /= LM_SUCCESS) return
      if (pl(1, j)%kind == LM_NO_PLACEMENT%kind) cycle
      r = 0
      if (present(out_ranks)) then
        r = out_ranks(j)
      else if (any(pl(:, j)%kind == LM_KIND_SHARD)) then
        call bad_(st, "lm_local_map: out_placements(:," // str_(j) // ") has lm_shard: give out_ranks")
      end if
      call to_c_pl_(pl(:, j), r, cpl(:, j), st, "lm_local_map: out_placements(:," // str_(j) // ")")
      ptrs(j) = c_loc(cpl(1, j))
    end do
  end subroutine

  !> lm_local_map's out_shapes as the C table (NULL when absent): column j's first out_ranks(j)
  !> entries reversed, NULL where it starts with -1.
  type(c_ptr) function out_shapes_(out_shapes, out_ranks, nout, cshapes, ptrs, st)
    integer(c_int64_t), intent(in), optional :: out_shapes(:, :)
    integer, intent(in), optional :: out_ranks(:)
    integer, intent(in) :: nout
    integer(c_int64_t), allocatable, target, intent(out) :: cshapes(:, :)
    type(c_ptr), allocatable, target, intent(out) :: ptrs(:)
    integer(c_int), intent(inout) :: st
    integer :: j, r
    allocate(ptrs(max(nout, 1)))
    ptrs = c_null_ptr
    out_shapes_ = c_null_ptr
    if (.not. present(out_shapes) .or. st /= LM_SUCCESS) return
    if (.not. present(out_ranks)) then
      call bad_(st, "lm_local_map: out_shapes needs out_ranks")
    else if (any(out_ranks > size(out_shapes, 1))) then
      call bad_(st, "lm_local_map: out_shapes has " // str_(size(out_shapes, 1)) // " rows for an output of rank " // &
                str_(maxval(out_ranks)))
    end if
    if (st /= LM_SUCCESS) return
    out_shapes_ = c_loc(ptrs)
    allocate(cshapes(max(size(out_shapes, 1), 1), max(nout, 1)))
    do j = 1, nout
      if (out_shapes(1, j) < 0) cycle
      r = out_ranks(j)
      cshapes(1:r, j) = reversed_(out_shapes(1:r, j))
      ptrs(j) = c_loc(cshapes(1, j))
    end do
  end function

  !> The recorded placements `which` (LM_RECORD_INPUT, LM_RECORD_IN, LM_RECORD_IN_GRAD,
  !> LM_RECORD_OUT, LM_RECORD_OUT_GRAD) of input or output `index` (1-based), one per mesh dim, in
  !> Fortran dims of a tensor of rank `rank` (needed when they hold an lm_shard). Local.
  subroutine lm_local_map_record_placements(record, which, index, placements, rank, ierr)
    type(lm_local_map_record), intent(in) :: record
    integer, intent(in) :: which, index
    type(lm_placement), intent(out) :: placements(:)
    integer, intent(in), optional :: rank
    integer, intent(out), optional :: ierr
    type(lm_placement_t) :: cpl(max(size(placements), 1))
    integer(c_int) :: st, n
    n = 0
    st = c_(lmc_local_map_record_placements(record%ptr, int(which, c_int), int(index - 1, c_int), &
                                            int(size(placements), c_int), cpl, n))
    call want_(st, "lm_local_map_record_placements: ", "placements", shape(placements), "lm_placement", [int(n)], &
               " for " // str_(n) // " recorded", .false.)
    if (st == LM_SUCCESS) then  ! (n and cpl are defined only then: Fortran does not short-circuit)
      if (.not. present(rank) .and. any(splits_(cpl(1:n)%kind))) &
        call bad_(st, "lm_local_map_record_placements: they split a tensor dim: give rank (the tensor's rank)")
    end if
    if (st == LM_SUCCESS) placements = from_c_(cpl(1:n), rank)
    call done_(st, ierr, "lm_local_map_record_placements")
  end subroutine

  ! The generated wrappers, length rules, handle procedures and kind variants, then the
  ! procedures of every type and rank (tools/api_gen_fortran.py).
  include "localmap_wrap.inc"
  include "localmap_typed.inc"

end module localmap
