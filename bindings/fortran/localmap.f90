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
  integer, parameter, public :: LM_VERSION_MAJOR = 1, LM_VERSION_MINOR = 0, LM_VERSION_PATCH = 0
  integer, parameter, public :: LM_VERSION_CODE = LM_VERSION_MAJOR * 10000 + LM_VERSION_MINOR * 100 &
                                                  + LM_VERSION_PATCH
  !> Status codes (lm_status_t).
  integer, parameter, public :: LM_SUCCESS = 0, LM_ERR_INVALID_ARGUMENT = 1, LM_ERR_INVALID_USAGE = 2, &
    LM_ERR_OUT_OF_MEMORY = 3, LM_ERR_NOT_SUPPORTED = 4, LM_ERR_MISMATCH = 5, LM_ERR_MPI = 6, &
    LM_ERR_NCCL = 7, LM_ERR_CUDA = 8, LM_ERR_REMOTE = 9, LM_ERR_INTERNAL = 10, LM_ERR_USER = 11, LM_ERR_TIMEOUT = 12
  !> DLPack device types and type codes.
  integer, parameter, public :: kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3, kDLROCM = 10, kDLCUDAManaged = 13
  integer, parameter, public :: kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLBfloat = 4, kDLComplex = 5, &
    LM_DL_BOOL = 6
  !> Placement kinds and reduce ops.
  ! (C's LM_REPLICATE, LM_SHARD, LM_PARTIAL: Fortran names are case-blind, lm_shard() is the
  ! constructor.)
  integer, parameter, public :: LM_KIND_REPLICATE = 0, LM_KIND_SHARD = 1, LM_KIND_PARTIAL = 2, &
    LM_KIND_RAGGED = 3, &
    LM_KIND_BLOCK_CYCLIC = 4
  !> lm_ragged(dim, LM_EXTENTS_AGREED): the ranks' local shapes give the extents (lm_from_local
  !> with LM_SHAPE_ALLGATHER, its default; lm_local_map outputs without a given shape).
  integer(c_int32_t), parameter, public :: LM_EXTENTS_AGREED = 0
  integer, parameter, public :: LM_REDUCE_SUM = 0, LM_REDUCE_AVG = 1, LM_REDUCE_MAX = 2, &
    LM_REDUCE_MIN = 3, LM_REDUCE_PROD = 4
  !> Shape modes of lm_from_local, flags of lmc_dist_tensor_from_local.
  integer, parameter, public :: LM_SHAPE_GIVEN = 0, LM_SHAPE_EVEN = 1, LM_SHAPE_ALLGATHER = 2
  integer, parameter, public :: LM_FROM_LOCAL_COPY = 0, LM_FROM_LOCAL_BORROW = 1
  !> local_map argument kinds and flags.
  integer, parameter, public :: LM_ARG_NONE = 0, LM_ARG_DIST_TENSOR = 1, LM_ARG_TENSOR = 2, &
    LM_ARG_INT64 = 3, LM_ARG_DOUBLE = 4, LM_ARG_POINTER = 5, LM_ARG_MANAGED_TENSOR = 6
  integer, parameter, public :: LM_LOCAL_MAP_RESHARD_INPUTS = 1, LM_LOCAL_MAP_NO_AGREE = 2, &
    LM_LOCAL_MAP_SHAPES_EVEN = 4
  integer(c_int32_t), parameter, public :: LM_MESH_CONFIG_MAGIC = int(z'4c4d4d43', c_int32_t)
  integer(c_int32_t), parameter, public :: LM_RESHARD_PLAN_INFO_MAGIC = int(z'4c4d5049', c_int32_t)
  integer(c_int32_t), parameter, public :: LM_RESHARD_PLAN_INFO_VERSION = 1
  !> Flags of lmc_reshard_plan_info and lmc_reshard_estimate (all_ranks = .true. in Fortran).
  integer(c_int), parameter, public :: LM_PLAN_INFO_ALL_RANKS = 1
  !> The version of lm_reshard_group_config_t this module describes.
  integer(c_int32_t), parameter, public :: LM_RESHARD_GROUP_CONFIG_MAGIC = int(z'4c4d4743', c_int32_t)
  integer(c_int32_t), parameter, public :: LM_RESHARD_GROUP_CONFIG_VERSION = 1
  !> lm_local_map_record_placements: which placements (lm_record_which_t).
  integer, parameter, public :: LM_RECORD_INPUT = 0, LM_RECORD_IN = 1, LM_RECORD_IN_GRAD = 2, &
    LM_RECORD_OUT = 3, LM_RECORD_OUT_GRAD = 4
  integer(c_int32_t), parameter, public :: LM_LOCAL_MAP_OPTIONS_MAGIC = int(z'4c4d4c4f', c_int32_t)
  integer(c_int32_t), parameter, public :: LM_LOCAL_MAP_OPTIONS_VERSION = 1
  integer(c_int32_t), parameter, public :: LM_ROUTE_MPI = 1, LM_ROUTE_NODE_LOCAL = 2, LM_ROUTE_BOARD = 4
  integer(c_int32_t), parameter, public :: LM_MESH_CONFIG_VERSION = 2
  integer(c_int32_t), parameter, public :: LM_DEVICE_CONFIG_MAGIC = int(z'4c4d4443', c_int32_t)
  integer(c_int32_t), parameter, public :: LM_DEVICE_CONFIG_VERSION = 1
  !> How a mesh moves tensor data (lm_mesh_transport).
  integer, parameter, public :: LM_TRANSPORT_UNDECIDED = 0, LM_TRANSPORT_MPI = 1, LM_TRANSPORT_NCCL = 2, &
    LM_TRANSPORT_MPI_STAGED = 3

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
  !> The C placement struct (C dim numbering). Fortran code uses type(lm_placement).
  type, bind(C), public :: lm_placement_t
    integer(c_int32_t) :: kind, dim, order, reduce_op, extents, block, source, reserved
  end type
  !> The C options of lm_mesh_create (lmc_mesh_create); lm_mesh_create takes them as arguments.
  type, bind(C), public :: lm_mesh_config_t
    integer(c_size_t) :: size = 0
    integer(c_int32_t) :: magic = 0       ! uint32_t in C
    integer(c_int32_t) :: version = 0     ! uint32_t in C
    type(c_ptr) :: ranks = c_null_ptr
    integer(c_int) :: nranks = 0
    type(c_ptr) :: dim_names = c_null_ptr
    integer(c_int) :: check_level = -1     ! version 2
    real(c_double) :: timeout = -1         ! version 2
  end type
  !> This rank's device options of a mesh (lm_mesh_set_device_config): a CUDA stream and
  !> allocator callbacks (bind(C) functions, c_funloc).
  type, bind(C), public :: lm_device_config_t
    integer(c_size_t) :: size = 0
    integer(c_int32_t) :: magic = 0       ! uint32_t in C
    integer(c_int32_t) :: version = 0     ! uint32_t in C
    type(c_ptr) :: stream = c_null_ptr
    type(c_funptr) :: alloc = c_null_funptr
    type(c_funptr) :: free = c_null_funptr
    type(c_ptr) :: alloc_ctx = c_null_ptr
  end type
  !> What executing a plan moves (lm_reshard_plan_info; C's lm_reshard_plan_info_t, with the
  !> same fields and meaning; routes: LM_ROUTE_* bits).
  type, bind(C), public :: lm_reshard_plan_info_t
    integer(c_size_t) :: size = 0
    integer(c_int32_t) :: magic = 0       ! uint32_t in C: LM_RESHARD_PLAN_INFO_MAGIC
    integer(c_int32_t) :: version = 0     ! uint32_t in C
    integer(c_int32_t) :: routes = 0      ! uint32_t in C
    integer(c_int32_t) :: reserved = 0    ! uint32_t in C
    integer(c_int64_t) :: steps = 0, peers = 0, flows_sent = 0, flows_received = 0
    integer(c_int64_t) :: bytes_sent = 0, bytes_received = 0, bytes_copied = 0, bytes_reduced = 0
    integer(c_int64_t) :: bytes_node_local = 0, work_bytes = 0, staging_bytes_max = 0
  end type
  !> One entry of a group (lmc_reshard_group_create; C's lm_reshard_entry_t: C numbering, the
  !> row-major global shape). Fortran code uses type(lm_reshard_entry).
  type, bind(C), public :: lm_reshard_entry_t
    integer(c_int) :: ndim = 0
    type(c_ptr) :: global_shape = c_null_ptr      ! const int64_t *
    type(DLDataType) :: dtype
    type(c_ptr) :: src_placements = c_null_ptr    ! const lm_placement_t *
    type(c_ptr) :: dst_placements = c_null_ptr    ! const lm_placement_t *
  end type
  !> The C options of lm_reshard_group_create (lmc_reshard_group_create); lm_reshard_group_create
  !> takes them as arguments.
  type, bind(C), public :: lm_reshard_group_config_t
    integer(c_size_t) :: size = 0
    integer(c_int32_t) :: magic = 0       ! uint32_t in C: LM_RESHARD_GROUP_CONFIG_MAGIC
    integer(c_int32_t) :: version = 0     ! uint32_t in C
    integer(c_size_t) :: bucket_bytes = 0
    integer(c_size_t) :: alone_bytes = 0
  end type
  !> The C options of lm_local_map_ex (lmc_local_map_ex); lm_local_map takes them as arguments.
  type, bind(C), public :: lm_local_map_options_t
    integer(c_size_t) :: size = 0
    integer(c_int32_t) :: magic = 0       ! uint32_t in C: LM_LOCAL_MAP_OPTIONS_MAGIC
    integer(c_int32_t) :: version = 0     ! uint32_t in C
    type(c_ptr) :: in_grad_placements = c_null_ptr
    type(c_ptr) :: record = c_null_ptr
  end type
  !> One argument or result of lm_local_map (kind: LM_ARG_*).
  type, bind(C), public :: lm_arg_t
    integer(c_int32_t) :: kind = LM_ARG_NONE
    integer(c_int32_t) :: reserved = 0
    integer(c_int64_t) :: i64 = 0
    real(c_double) :: f64 = 0
    type(c_ptr) :: ptr = c_null_ptr
  end type

  !> Data types (DLDataType values) and the host device.
  type(DLDataType), parameter, public :: &
    LM_FLOAT16 = DLDataType(int(kDLFloat, c_int8_t), 16_c_int8_t, 1_c_int16_t), &
    LM_BFLOAT16 = DLDataType(int(kDLBfloat, c_int8_t), 16_c_int8_t, 1_c_int16_t), &
    LM_FLOAT32 = DLDataType(int(kDLFloat, c_int8_t), 32_c_int8_t, 1_c_int16_t), &
    LM_FLOAT64 = DLDataType(int(kDLFloat, c_int8_t), 64_c_int8_t, 1_c_int16_t), &
    LM_INT8 = DLDataType(int(kDLInt, c_int8_t), 8_c_int8_t, 1_c_int16_t), &
    LM_INT16 = DLDataType(int(kDLInt, c_int8_t), 16_c_int8_t, 1_c_int16_t), &
    LM_INT32 = DLDataType(int(kDLInt, c_int8_t), 32_c_int8_t, 1_c_int16_t), &
    LM_INT64 = DLDataType(int(kDLInt, c_int8_t), 64_c_int8_t, 1_c_int16_t), &
    LM_UINT8 = DLDataType(int(kDLUInt, c_int8_t), 8_c_int8_t, 1_c_int16_t), &
    LM_BOOL = DLDataType(int(LM_DL_BOOL, c_int8_t), 8_c_int8_t, 1_c_int16_t), &
    LM_COMPLEX64 = DLDataType(int(kDLComplex, c_int8_t), 64_c_int8_t, 1_c_int16_t), &
    LM_COMPLEX128 = DLDataType(int(kDLComplex, c_int8_t), -127_c_int8_t - 1_c_int8_t, 1_c_int16_t)
  type(DLDevice), parameter, public :: LM_CPU = DLDevice(kDLCPU, 0)

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

  !> A mesh handle. Destroyed (locally) by lm_destroy or when it goes out of scope; it cannot be
  !> copied (meshes have no reference count: pass it as an argument). A mesh obtained from
  !> lm_dist_tensor_mesh or inside a local_map function is borrowed and never destroyed here.
  type, public :: lm_mesh
    type(c_ptr) :: ptr = c_null_ptr
    logical :: owned = .true.
  contains
    final :: mesh_final_
  end type
  !> A dist tensor handle. Assignment y = x shares the tensor (a reference, lm_dist_tensor_retain);
  !> lm_destroy or going out of scope drops one reference (local).
  type, public :: lm_dist_tensor
    type(c_ptr) :: ptr = c_null_ptr
  contains
    final :: tensor_final_
  end type
  !> A persistent reshard plan (not copyable).
  type, public :: lm_reshard_plan
    type(c_ptr) :: ptr = c_null_ptr
  contains
    final :: plan_final_
  end type
  !> A grouped reshard plan: N reshards between one pair of meshes run as one (not copyable).
  type, public :: lm_reshard_group
    type(c_ptr) :: ptr = c_null_ptr
  contains
    final :: group_final_
  end type
  !> The record of one lm_local_map call made with record= (not copyable): what its backward pass
  !> needs (lm_local_map_record_placements, lm_local_map_record_input_grad).
  type, public :: lm_local_map_record
    type(c_ptr) :: ptr = c_null_ptr
  contains
    final :: record_final_
  end type
  !> One reshard of a group (lm_reshard_group_create), in Fortran terms: the global shape in
  !> Fortran order, the dtype, and one placement per mesh dim on the source and on the target mesh
  !> (Fortran dims). Make it with lm_reshard_entry(shape, dtype, src_placements, dst_placements)
  !> (shape: integer(c_int64_t) or integer(c_int32_t); a scalar: shape=[integer(c_int64_t) ::]).
  type, public :: lm_reshard_entry
    integer(c_int64_t), allocatable :: shape(:)
    type(DLDataType) :: dtype
    type(lm_placement), allocatable :: src_placements(:), dst_placements(:)
  end type
  !> A nonblocking reshard in flight; finalizing it waits for completion.
  type, public :: lm_request
    type(c_ptr) :: ptr = c_null_ptr
  contains
    final :: request_final_
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

  interface lm_comm_world
    module procedure comm_world_int_, comm_world_f08_
  end interface
  interface lm_mesh_create
    module procedure mesh_create_int_, mesh_create_f08_, mesh_create_int_i4_, mesh_create_f08_i4_
  end interface
  interface lm_mesh_dim_comm
    module procedure mesh_dim_comm_int_, mesh_dim_comm_f08_
  end interface
  interface lm_mesh_comm
    module procedure mesh_comm_int_, mesh_comm_f08_
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
  interface lm_destroy
    module procedure lm_mesh_destroy, lm_dist_tensor_destroy, lm_reshard_plan_destroy, lm_reshard_group_destroy, &
      lm_local_map_record_destroy
  end interface
  interface assignment(=)
    module procedure mesh_assign_, tensor_assign_, plan_assign_, group_assign_, request_assign_, record_assign_
  end interface
  interface operator(==)
    module procedure dtype_eq_, placement_eq_
  end interface
  include "localmap_generic.inc"

  !> Message of the last failure seen by this module (binding-side checks or the library's).
  character(len=:), allocatable, save :: errmsg_
  integer(c_int64_t), target, save :: empty_(2) = 0

contains

  ! =============================================================================================
  ! Errors
  ! =============================================================================================
  function c_string_(p) result(s)
    type(c_ptr), intent(in) :: p
    character(len=:), allocatable :: s
    character(kind=c_char), pointer :: chars(:)
    integer(c_size_t) :: n, i
    if (.not. c_associated(p)) then
      s = ""
      return
    end if
    n = c_strlen_(p)
    call c_f_pointer(p, chars, [n])
    allocate(character(len=n) :: s)
    do i = 1, n
      s(i:i) = chars(i)
    end do
  end function

  function c_chars_(buf) result(s)
    character(kind=c_char), intent(in) :: buf(:)
    character(len=:), allocatable :: s
    integer :: i, n
    n = size(buf)
    do i = 1, size(buf)
      if (buf(i) == c_null_char) then
        n = i - 1
        exit
      end if
    end do
    allocate(character(len=n) :: s)
    do i = 1, n
      s(i:i) = buf(i)
    end do
  end function

  function to_c_str_(s) result(c)
    character(len=*), intent(in) :: s
    character(kind=c_char) :: c(len(s) + 1)
    integer :: i
    do i = 1, len(s)
      c(i) = s(i:i)
    end do
    c(len(s) + 1) = c_null_char
  end function

  !> A binding-side argument error: sets the message, returns LM_ERR_INVALID_ARGUMENT.
  subroutine bad_(st, msg)
    integer(c_int), intent(out) :: st
    character(len=*), intent(in) :: msg
    st = LM_ERR_INVALID_ARGUMENT
    errmsg_ = msg
  end subroutine

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

  !> After a C call: remember the library's message on failure.
  subroutine c_(st)
    integer(c_int), intent(in) :: st
    if (st /= LM_SUCCESS) errmsg_ = c_string_(lmc_last_error_message())
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
  ! Bootstrap
  ! =============================================================================================
  !> Initialises MPI unless it is already initialised (by MPI_Init or mpi_f08's MPI_Init).
  subroutine lm_init(ierr)
    integer, intent(out), optional :: ierr
    integer(c_int) :: st
    st = lmc_init(c_null_ptr, c_null_ptr); call c_(st); call done_(st, ierr, "lm_init")
  end subroutine

  !> Finalises MPI if lm_init initialised it.
  subroutine lm_finalize(ierr)
    integer, intent(out), optional :: ierr
    integer(c_int) :: st
    st = lmc_finalize(); call c_(st); call done_(st, ierr, "lm_finalize")
  end subroutine

  subroutine comm_world_int_(comm, ierr)
    integer, intent(out) :: comm
    integer, intent(out), optional :: ierr
    integer(c_int) :: st, c
    st = lmc_comm_world(c); call c_(st); comm = int(c); call done_(st, ierr, "lm_comm_world")
  end subroutine
  subroutine comm_world_f08_(comm, ierr)
    type(MPI_Comm), intent(out) :: comm
    integer, intent(out), optional :: ierr
    call comm_world_int_(comm%MPI_VAL, ierr)
  end subroutine

  !> This process's rank in MPI_COMM_WORLD and the world size.
  subroutine lm_world_rank(rank, size, ierr)
    integer, intent(out) :: rank, size
    integer, intent(out), optional :: ierr
    integer(c_int) :: st, r, s
    st = lmc_world_rank(r, s); call c_(st); rank = int(r); size = int(s)
    call done_(st, ierr, "lm_world_rank")
  end subroutine

  !> Whether this build holds tensors on a device type (kDLCPU, kDLCUDA).
  subroutine lm_device_supported(device_type, supported, ierr)
    integer, intent(in) :: device_type
    logical, intent(out) :: supported
    integer, intent(out), optional :: ierr
    integer(c_int) :: st, s
    st = lmc_device_supported(int(device_type, c_int), s); call c_(st); supported = s /= 0
    call done_(st, ierr, "lm_device_supported")
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
    placement_eq_ = all(c_fields_(a) == c_fields_(b))
  end function
  !> A placement's fields, in the C struct's order.
  pure function c_fields_(p) result(v)
    type(lm_placement), intent(in) :: p
    integer(c_int32_t) :: v(8)
    v = [p%kind, p%dim, p%order, p%reduce_op, p%extents, p%block, p%source, p%reserved]
  end function
  !> The C struct with the same fields (dims as given: to_c_pl_ maps Fortran dims).
  pure type(lm_placement_t) function to_c_(p)
    type(lm_placement), intent(in) :: p
    to_c_ = lm_placement_t(p%kind, p%dim, p%order, p%reduce_op, p%extents, p%block, p%source, &
                           p%reserved)
  end function
  pure type(lm_placement) function from_c_(c)
    type(lm_placement_t), intent(in) :: c
    from_c_ = lm_placement(c%kind, c%dim, c%order, c%reduce_op, c%extents, c%block, c%source, &
                           c%reserved)
  end function
  logical function dtype_eq_(a, b)
    type(DLDataType), intent(in) :: a, b
    dtype_eq_ = a%code == b%code .and. a%bits == b%bits .and. a%lanes == b%lanes
  end function

  !> Fortran placements of a tensor of rank ndim -> the C structs (Shard dim d -> C dim ndim-d).
  subroutine to_c_pl_(pl, ndim, cpl, st, what)
    type(lm_placement), intent(in) :: pl(:)
    integer, intent(in) :: ndim
    type(lm_placement_t), intent(out) :: cpl(:)
    integer(c_int), intent(out) :: st
    character(len=*), intent(in) :: what
    integer :: i
    character(len=160) :: msg
    st = LM_SUCCESS
    do i = 1, size(pl)
      cpl(i) = to_c_(pl(i))
      if (pl(i)%kind == LM_KIND_SHARD .or. pl(i)%kind == LM_KIND_RAGGED .or. &
          pl(i)%kind == LM_KIND_BLOCK_CYCLIC) then
        if (pl(i)%dim < 1 .or. pl(i)%dim > ndim) then
          write(msg, '(a,"(",i0,"): lm_shard(",i0,") of a rank-",i0," tensor (Fortran dims are 1..",i0,")")') &
            what, i, pl(i)%dim, ndim, ndim
          call bad_(st, trim(msg))
          return
        end if
        cpl(i)%dim = int(ndim - pl(i)%dim, c_int32_t)
      end if
    end do
  end subroutine

  !> The C structs of a rank-ndim tensor -> Fortran placements.
  subroutine from_c_pl_(cpl, ndim, pl)
    type(lm_placement_t), intent(in) :: cpl(:)
    integer, intent(in) :: ndim
    type(lm_placement), intent(out) :: pl(:)
    integer :: i
    do i = 1, size(cpl)
      pl(i) = from_c_(cpl(i))
      if (cpl(i)%kind == LM_KIND_SHARD .or. cpl(i)%kind == LM_KIND_RAGGED .or. &
          cpl(i)%kind == LM_KIND_BLOCK_CYCLIC) &
        pl(i)%dim = int(ndim - cpl(i)%dim, c_int32_t)
    end do
  end subroutine

  !> The mesh ndim of a mesh handle (0 if the handle is bad; the C call then reports it).
  integer function mesh_ndim_(mesh)
    type(c_ptr), intent(in) :: mesh
    integer(c_int) :: n
    n = 0
    if (lmc_mesh_ndim(mesh, n) /= LM_SUCCESS) n = 0
    mesh_ndim_ = int(n)
  end function

  !> Checks that there is one placement per mesh dim.
  subroutine check_npl_(mesh, n, st, what)
    type(c_ptr), intent(in) :: mesh
    integer, intent(in) :: n
    integer(c_int), intent(inout) :: st
    character(len=*), intent(in) :: what
    call check_mesh_len_(mesh, n, .false., st, what // ":", " placements for a mesh of ", &
                         " dims (one per mesh dim)")
  end subroutine

  !> Checks an array of one entry per mesh dim (at_least: or more), naming it in the message.
  subroutine check_len_(mesh, n, at_least, st, what)
    type(c_ptr), intent(in) :: mesh
    integer, intent(in) :: n
    logical, intent(in) :: at_least
    integer(c_int), intent(inout) :: st
    character(len=*), intent(in) :: what
    call check_mesh_len_(mesh, n, at_least, st, what // " has", " elements for a mesh of ", " dims")
  end subroutine

  !> The two checks above: n against the mesh's ndim; the message "<head> n<mid>ndim<tail>".
  subroutine check_mesh_len_(mesh, n, at_least, st, head, mid, tail)
    type(c_ptr), intent(in) :: mesh
    integer, intent(in) :: n
    logical, intent(in) :: at_least
    integer(c_int), intent(inout) :: st
    character(len=*), intent(in) :: head, mid, tail
    integer(c_int) :: nd
    character(len=160) :: msg
    if (st /= LM_SUCCESS) return
    st = lmc_mesh_ndim(mesh, nd)
    if (st /= LM_SUCCESS) then
      call c_(st)
      return
    end if
    if (n == nd .or. (at_least .and. n > nd)) return
    write(msg, '(a,1x,i0,a,i0,a)') head, n, mid, nd, tail
    call bad_(st, trim(msg))
  end subroutine

  !> Checks one placement per dim of the mesh a call on x targets: dm, or x's own mesh when dm
  !> is null (lm_reshard, lm_transpose: the C library reads that many).
  subroutine check_target_npl_(x, dm, n, st, what)
    type(lm_dist_tensor), intent(in) :: x
    type(c_ptr), intent(in) :: dm
    integer, intent(in) :: n
    integer(c_int), intent(inout) :: st
    character(len=*), intent(in) :: what
    type(c_ptr) :: m
    if (st /= LM_SUCCESS) return
    m = dm
    if (.not. c_associated(m)) then
      st = lmc_dist_tensor_mesh(x%ptr, m)
      if (st /= LM_SUCCESS) then
        call c_(st)
        return
      end if
    end if
    call check_npl_(m, n, st, what)
  end subroutine

  !> Formats placements, e.g. "[S(1), R, P(sum)]" (Fortran dims, as given).
  subroutine lm_placements_format(placements, str, ierr)
    type(lm_placement), intent(in) :: placements(:)
    character(len=:), allocatable, intent(out) :: str
    integer, intent(out), optional :: ierr
    type(lm_placement_t) :: cpl(size(placements))
    character(kind=c_char) :: buf(1024)
    integer(c_int) :: st
    integer :: i
    do i = 1, size(placements)
      cpl(i) = to_c_(placements(i))
    end do
    st = lmc_placements_format(cpl, int(size(cpl), c_int), buf, int(size(buf), c_size_t)); call c_(st)
    str = c_chars_(buf)
    call done_(st, ierr, "lm_placements_format")
  end subroutine

  !> The placements of a gradient (PyTorch DTensor's convention): lm_partial(LM_REDUCE_SUM) becomes
  !> lm_replicate(), Shard and Replicate are kept; Partial avg/max/min/prod fail (LM_ERR_NOT_SUPPORTED).
  subroutine lm_placements_adjoint(placements, adjoint, ierr)
    type(lm_placement), intent(in) :: placements(:)
    type(lm_placement), intent(out) :: adjoint(size(placements))
    integer, intent(out), optional :: ierr
    type(lm_placement_t) :: cpl(size(placements)), cout(size(placements))
    integer(c_int) :: st
    integer :: i
    do i = 1, size(placements)
      cpl(i) = to_c_(placements(i))
    end do
    st = lmc_placements_adjoint(cpl, int(size(cpl), c_int), cout); call c_(st)
    if (st == LM_SUCCESS) then
      do i = 1, size(placements)
        adjoint(i) = from_c_(cout(i))
      end do
    end if
    call done_(st, ierr, "lm_placements_adjoint")
  end subroutine

  !> torch.chunk layout math: block `index` (0-based) of `parts` of an extent n starts at offset
  !> (0-based) and has `length` elements.
  subroutine lm_layout_chunk(n, parts, index, offset, length, ierr)
    integer(c_int64_t), intent(in) :: n, parts, index
    integer(c_int64_t), intent(out) :: offset, length
    integer, intent(out), optional :: ierr
    integer(c_int) :: st
    st = lmc_layout_chunk(n, parts, index, offset, length); call c_(st); call done_(st, ierr, "lm_layout_chunk")
  end subroutine

  !> Registers the extents of a ragged shard (one length per mesh coordinate) and returns their
  !> id for lm_ragged; every lm_extents_create is matched by one lm_extents_destroy.
  subroutine lm_extents_create(extents, id, ierr)
    integer(c_int64_t), intent(in) :: extents(:)
    integer(c_int32_t), intent(out) :: id
    integer, intent(out), optional :: ierr
    integer(c_int64_t) :: e(max(size(extents), 1))
    integer(c_int) :: st
    e(1:size(extents)) = extents
    st = lmc_extents_create(id, e, int(size(extents), c_int64_t)); call c_(st)
    call done_(st, ierr, "lm_extents_create")
  end subroutine

  !> The number of extents of `id` in count and, when `extents` is present, the lengths (its size
  !> must be at least count).
  subroutine lm_extents_get(id, count, extents, ierr)
    integer(c_int32_t), intent(in) :: id
    integer(c_int64_t), intent(out) :: count
    integer(c_int64_t), intent(inout), optional, target :: extents(:)
    integer, intent(out), optional :: ierr
    integer(c_int) :: st
    if (present(extents)) then
      if (size(extents) > 0) then
        st = lmc_extents_get(id, c_loc(extents), int(size(extents), c_int64_t), count)
      else
        st = lmc_extents_get(id, c_null_ptr, 0_c_int64_t, count)
      end if
    else
      st = lmc_extents_get(id, c_null_ptr, 0_c_int64_t, count)
    end if
    call c_(st); call done_(st, ierr, "lm_extents_get")
  end subroutine

  !> Drops one reference to the extents of `id` (0: nothing).
  subroutine lm_extents_destroy(id, ierr)
    integer(c_int32_t), intent(in) :: id
    integer, intent(out), optional :: ierr
    integer(c_int) :: st
    st = lmc_extents_destroy(id); call c_(st); call done_(st, ierr, "lm_extents_destroy")
  end subroutine

  ! =============================================================================================
  ! Mesh
  ! =============================================================================================
  subroutine mesh_create_(mesh, comm, shape, names, ranks, check_level, timeout, ierr)
    type(lm_mesh), intent(inout) :: mesh
    integer, intent(in) :: comm
    integer(c_int64_t), intent(in) :: shape(:)
    character(len=*), intent(in), optional :: names(:)
    integer, intent(in), optional :: ranks(:)
    integer, intent(in), optional :: check_level
    real(c_double), intent(in), optional :: timeout
    integer, intent(out), optional :: ierr
    type(lm_mesh_config_t), target :: cfg
    character(kind=c_char), allocatable, target :: chars(:)
    type(c_ptr), allocatable, target :: ptrs(:)
    integer(c_int), allocatable, target :: cranks(:)
    integer(c_int) :: st
    integer :: i, j, w
    character(len=160) :: msg
    call lm_mesh_destroy(mesh)
    cfg = lm_mesh_config_t(c_sizeof(cfg), LM_MESH_CONFIG_MAGIC, LM_MESH_CONFIG_VERSION, c_null_ptr, 0, c_null_ptr, &
                           -1, -1.0_c_double)
    if (present(check_level)) cfg%check_level = int(check_level, c_int)
    if (present(timeout)) cfg%timeout = timeout
    st = LM_SUCCESS
    if (present(ranks)) then
      cranks = int(ranks, c_int)
      cfg%ranks = c_loc(cranks)
      cfg%nranks = int(size(ranks), c_int)
    end if
    if (present(names)) then
      if (size(names) /= size(shape)) then
        write(msg, '("lm_mesh_create: ",i0," names for ",i0," mesh dims")') size(names), size(shape)
        call bad_(st, trim(msg))
      else
        w = len(names) + 1
        allocate(chars(w * max(size(names), 1)), ptrs(max(size(names), 1)))
        do i = 1, size(names)
          do j = 1, len_trim(names(i))
            chars((i - 1) * w + j) = names(i)(j:j)
          end do
          chars((i - 1) * w + len_trim(names(i)) + 1) = c_null_char
          ptrs(i) = c_loc(chars((i - 1) * w + 1))
        end do
        cfg%dim_names = c_loc(ptrs)
      end if
    end if
    if (st == LM_SUCCESS) then
      st = lmc_mesh_create(mesh%ptr, int(comm, c_int), int(size(shape), c_int), shape, c_loc(cfg))
      call c_(st)
      mesh%owned = .true.
    end if
    call done_(st, ierr, "lm_mesh_create")
  end subroutine

  !> Creates a mesh of extents shape(:) over ranks of `comm` (collective over comm; agrees).
  !> names: one per mesh dim; ranks: parent ranks forming the mesh, row-major over the shape;
  !> check_level: argument checks of collectives (0, 1, 2; default: LM_CHECK environment);
  !> timeout: deadline in seconds of blocking waits (0: none; default: LM_TIMEOUT environment).
  subroutine mesh_create_int_(mesh, comm, shape, names, ranks, check_level, timeout, ierr)
    type(lm_mesh), intent(inout) :: mesh
    integer, intent(in) :: comm
    integer(c_int64_t), intent(in) :: shape(:)
    character(len=*), intent(in), optional :: names(:)
    integer, intent(in), optional :: ranks(:)
    integer, intent(in), optional :: check_level
    real(c_double), intent(in), optional :: timeout
    integer, intent(out), optional :: ierr
    call mesh_create_(mesh, comm, shape, names, ranks, check_level, timeout, ierr)
  end subroutine
  !> The 2-D mesh (NPROW, NPCOL) of a process grid over communicator comm: its coordinate (r, c)
  !> is the rank that passes (myrow, mycol) = (r, c), e.g. what blacs_gridinfo returns (-1, -1
  !> outside the grid); lm_from_scalapack's mesh. Collective over comm (lm_mesh_create_grid).
  subroutine lm_mesh_create_grid(mesh, comm, myrow, mycol, ierr)
    type(lm_mesh), intent(inout) :: mesh
    integer, intent(in) :: comm, myrow, mycol
    integer, intent(out), optional :: ierr
    integer(c_int) :: st
    st = lmc_mesh_create_grid(mesh%ptr, int(comm, c_int), int(myrow, c_int), int(mycol, c_int), &
                              c_null_ptr)
    call c_(st)
    if (st == LM_SUCCESS) mesh%owned = .true.
    call done_(st, ierr, "lm_mesh_create_grid")
  end subroutine
  subroutine mesh_create_f08_(mesh, comm, shape, names, ranks, check_level, timeout, ierr)
    type(lm_mesh), intent(inout) :: mesh
    type(MPI_Comm), intent(in) :: comm
    integer(c_int64_t), intent(in) :: shape(:)
    character(len=*), intent(in), optional :: names(:)
    integer, intent(in), optional :: ranks(:)
    integer, intent(in), optional :: check_level
    real(c_double), intent(in), optional :: timeout
    integer, intent(out), optional :: ierr
    call mesh_create_(mesh, comm%MPI_VAL, shape, names, ranks, check_level, timeout, ierr)
  end subroutine
  subroutine mesh_create_int_i4_(mesh, comm, shape, names, ranks, check_level, timeout, ierr)
    type(lm_mesh), intent(inout) :: mesh
    integer, intent(in) :: comm
    integer(c_int32_t), intent(in) :: shape(:)
    character(len=*), intent(in), optional :: names(:)
    integer, intent(in), optional :: ranks(:)
    integer, intent(in), optional :: check_level
    real(c_double), intent(in), optional :: timeout
    integer, intent(out), optional :: ierr
    call mesh_create_(mesh, comm, int(shape, c_int64_t), names, ranks, check_level, timeout, ierr)
  end subroutine
  subroutine mesh_create_f08_i4_(mesh, comm, shape, names, ranks, check_level, timeout, ierr)
    type(lm_mesh), intent(inout) :: mesh
    type(MPI_Comm), intent(in) :: comm
    integer(c_int32_t), intent(in) :: shape(:)
    character(len=*), intent(in), optional :: names(:)
    integer, intent(in), optional :: ranks(:)
    integer, intent(in), optional :: check_level
    real(c_double), intent(in), optional :: timeout
    integer, intent(out), optional :: ierr
    call mesh_create_(mesh, comm%MPI_VAL, int(shape, c_int64_t), names, ranks, check_level, timeout, ierr)
  end subroutine

  !> Local; a borrowed mesh is only forgotten. Tensors keep their mesh alive.
  subroutine lm_mesh_destroy(mesh)
    type(lm_mesh), intent(inout) :: mesh
    integer(c_int) :: st
    if (mesh%owned .and. c_associated(mesh%ptr)) st = lmc_mesh_destroy(mesh%ptr)
    mesh%ptr = c_null_ptr
    mesh%owned = .true.
  end subroutine

  subroutine mesh_final_(mesh)
    type(lm_mesh), intent(inout) :: mesh
    call lm_mesh_destroy(mesh)
  end subroutine

  subroutine mesh_assign_(lhs, rhs)
    type(lm_mesh), intent(inout) :: lhs
    type(lm_mesh), intent(in) :: rhs
    if (c_associated(rhs%ptr) .or. c_associated(lhs%ptr)) &
      error stop "localmap: a type(lm_mesh) cannot be copied (pass it as an argument; lm_mesh_borrow)"
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

  !> The number of mesh dims (lm_mesh_ndim).
  subroutine lm_mesh_ndim(mesh, ndim, ierr)
    type(lm_mesh), intent(in) :: mesh
    integer, intent(out) :: ndim
    integer, intent(out), optional :: ierr
    integer(c_int) :: st, n
    n = 0; st = lmc_mesh_ndim(mesh%ptr, n); call c_(st); ndim = int(n)
    call done_(st, ierr, "lm_mesh_ndim")
  end subroutine

  !> Extents of the mesh dims (in mesh-dim order).
  subroutine lm_mesh_shape(mesh, shape, ierr)
    type(lm_mesh), intent(in) :: mesh
    integer(c_int64_t), intent(out) :: shape(:)
    integer, intent(out), optional :: ierr
    integer(c_int) :: st
    st = lmc_mesh_shape(mesh%ptr, shape, int(size(shape), c_int)); call c_(st)
    call done_(st, ierr, "lm_mesh_shape")
  end subroutine

  !> The number of ranks in the mesh (lm_mesh_size).
  subroutine lm_mesh_size(mesh, size, ierr)
    type(lm_mesh), intent(in) :: mesh
    integer, intent(out) :: size
    integer, intent(out), optional :: ierr
    integer(c_int) :: st, n
    n = 0; st = lmc_mesh_size(mesh%ptr, n); call c_(st); size = int(n)
    call done_(st, ierr, "lm_mesh_size")
  end subroutine

  !> Whether this rank belongs to the mesh (lm_mesh_is_member).
  subroutine lm_mesh_is_member(mesh, is_member, ierr)
    type(lm_mesh), intent(in) :: mesh
    logical, intent(out) :: is_member
    integer, intent(out), optional :: ierr
    integer(c_int) :: st, m
    m = 0; st = lmc_mesh_is_member(mesh%ptr, m); call c_(st); is_member = m /= 0
    call done_(st, ierr, "lm_mesh_is_member")
  end subroutine

  !> This rank's coordinate (0-based, one per mesh dim).
  subroutine lm_mesh_coord(mesh, coord, ierr)
    type(lm_mesh), intent(in) :: mesh
    integer(c_int64_t), intent(out) :: coord(:)
    integer, intent(out), optional :: ierr
    integer(c_int) :: st
    st = LM_SUCCESS
    call check_len_(mesh%ptr, size(coord), .true., st, "lm_mesh_coord: coord")
    if (st == LM_SUCCESS) then
      st = lmc_mesh_coord(mesh%ptr, coord, int(size(coord), c_int)); call c_(st)
    end if
    call done_(st, ierr, "lm_mesh_coord")
  end subroutine

  !> This rank's row-major index in the mesh (0-based).
  subroutine lm_mesh_rank(mesh, rank, ierr)
    type(lm_mesh), intent(in) :: mesh
    integer, intent(out) :: rank
    integer, intent(out), optional :: ierr
    integer(c_int) :: st, r
    r = -1; st = lmc_mesh_rank(mesh%ptr, r); call c_(st); rank = int(r)
    call done_(st, ierr, "lm_mesh_rank")
  end subroutine

  !> The parent-communicator rank at a (0-based) coordinate.
  subroutine lm_mesh_rank_at(mesh, coord, parent_rank, ierr)
    type(lm_mesh), intent(in) :: mesh
    integer(c_int64_t), intent(in) :: coord(:)
    integer, intent(out) :: parent_rank
    integer, intent(out), optional :: ierr
    integer(c_int) :: st, r
    r = -1
    st = LM_SUCCESS
    call check_len_(mesh%ptr, size(coord), .false., st, "lm_mesh_rank_at: coord")
    if (st == LM_SUCCESS) then
      st = lmc_mesh_rank_at(mesh%ptr, coord, int(size(coord), c_int), r); call c_(st)
    end if
    parent_rank = int(r)
    call done_(st, ierr, "lm_mesh_rank_at")
  end subroutine

  !> The mesh dim (1-based) called `name`.
  subroutine lm_mesh_dim_index(mesh, name, dim, ierr)
    type(lm_mesh), intent(in) :: mesh
    character(len=*), intent(in) :: name
    integer, intent(out) :: dim
    integer, intent(out), optional :: ierr
    integer(c_int) :: st, d
    d = -1; st = lmc_mesh_dim_index(mesh%ptr, to_c_str_(name), d); call c_(st); dim = int(d) + 1
    call done_(st, ierr, "lm_mesh_dim_index")
  end subroutine

  !> The name of mesh dim `dim` (1-based; "" when unnamed).
  subroutine lm_mesh_dim_name(mesh, dim, name, ierr)
    type(lm_mesh), intent(in) :: mesh
    integer, intent(in) :: dim
    character(len=:), allocatable, intent(out) :: name
    integer, intent(out), optional :: ierr
    character(kind=c_char) :: buf(128)
    integer(c_int) :: st
    buf = c_null_char
    st = lmc_mesh_dim_name(mesh%ptr, int(dim - 1, c_int), buf, int(size(buf), c_size_t)); call c_(st)
    name = c_chars_(buf)
    call done_(st, ierr, "lm_mesh_dim_name")
  end subroutine

  !> The communicator along mesh dim `dim` (1-based), owned by the mesh: do not free it.
  subroutine mesh_dim_comm_int_(mesh, dim, comm, ierr)
    type(lm_mesh), intent(in) :: mesh
    integer, intent(in) :: dim
    integer, intent(out) :: comm
    integer, intent(out), optional :: ierr
    integer(c_int) :: st, c
    c = 0; st = lmc_mesh_dim_comm(mesh%ptr, int(dim - 1, c_int), c); call c_(st); comm = int(c)
    call done_(st, ierr, "lm_mesh_dim_comm")
  end subroutine
  subroutine mesh_dim_comm_f08_(mesh, dim, comm, ierr)
    type(lm_mesh), intent(in) :: mesh
    integer, intent(in) :: dim
    type(MPI_Comm), intent(out) :: comm
    integer, intent(out), optional :: ierr
    call mesh_dim_comm_int_(mesh, dim, comm%MPI_VAL, ierr)
  end subroutine

  !> The communicator of all mesh ranks, owned by the mesh.
  subroutine mesh_comm_int_(mesh, comm, ierr)
    type(lm_mesh), intent(in) :: mesh
    integer, intent(out) :: comm
    integer, intent(out), optional :: ierr
    integer(c_int) :: st, c
    c = 0; st = lmc_mesh_comm(mesh%ptr, c); call c_(st); comm = int(c)
    call done_(st, ierr, "lm_mesh_comm")
  end subroutine
  subroutine mesh_comm_f08_(mesh, comm, ierr)
    type(lm_mesh), intent(in) :: mesh
    type(MPI_Comm), intent(out) :: comm
    integer, intent(out), optional :: ierr
    call mesh_comm_int_(mesh, comm%MPI_VAL, ierr)
  end subroutine

  !> This rank's device options of the mesh (a stream, allocator callbacks); absent: the defaults.
  subroutine lm_mesh_set_device_config(mesh, config, ierr)
    type(lm_mesh), intent(in) :: mesh
    type(lm_device_config_t), intent(in), target, optional :: config
    integer, intent(out), optional :: ierr
    type(c_ptr) :: p
    integer(c_int) :: st
    p = c_null_ptr
    if (present(config)) p = c_loc(config)
    st = lmc_mesh_set_device_config(mesh%ptr, p); call c_(st); call done_(st, ierr, "lm_mesh_set_device_config")
  end subroutine

  !> This rank's device options of the mesh.
  subroutine lm_mesh_device_config(mesh, config, ierr)
    type(lm_mesh), intent(in) :: mesh
    type(lm_device_config_t), intent(out) :: config
    integer, intent(out), optional :: ierr
    integer(c_int) :: st
    config = lm_device_config_t(c_sizeof(config), LM_DEVICE_CONFIG_MAGIC, LM_DEVICE_CONFIG_VERSION, c_null_ptr, &
                                c_null_funptr, c_null_funptr, c_null_ptr)
    st = lmc_mesh_device_config(mesh%ptr, config); call c_(st); call done_(st, ierr, "lm_mesh_device_config")
  end subroutine

  !> How the mesh moves tensors of device_type (kDLCPU, kDLCUDA): an LM_TRANSPORT_* value.
  subroutine lm_mesh_transport(mesh, device_type, transport, ierr)
    type(lm_mesh), intent(in) :: mesh
    integer, intent(in) :: device_type
    integer, intent(out) :: transport
    integer, intent(out), optional :: ierr
    integer(c_int) :: st, t
    t = -1; st = lmc_mesh_transport(mesh%ptr, int(device_type, c_int), t); call c_(st); transport = int(t)
    call done_(st, ierr, "lm_mesh_transport")
  end subroutine

  !> Bytes of the library's host buffer pool in use and their high-water mark; reset_peak
  !> (default .false.) then sets the mark to the bytes in use.
  subroutine lm_pool_stats(in_use, peak, reset_peak, ierr)
    integer(c_int64_t), intent(out) :: in_use, peak
    logical, intent(in), optional :: reset_peak
    integer, intent(out), optional :: ierr
    integer(c_int) :: st, r
    r = 0
    if (present(reset_peak)) r = merge(1, 0, reset_peak)
    st = lmc_pool_stats(in_use, peak, r); call c_(st); call done_(st, ierr, "lm_pool_stats")
  end subroutine

  !> A zero-filled tensor from localmap's pool as a DLManagedTensor (type(c_ptr); shape in Fortran
  !> order, the C tensor has it reversed). Hand it to lm_from_dlpack, or as a local_map output
  !> (outputs(j) = lm_arg_t(LM_ARG_MANAGED_TENSOR, 0, 0, 0d0, managed)).
  subroutine lm_tensor_alloc(managed, shape, dtype, device, ierr)
    type(c_ptr), intent(out) :: managed
    integer(c_int64_t), intent(in) :: shape(:)
    type(DLDataType), intent(in) :: dtype
    type(DLDevice), intent(in), optional :: device
    integer, intent(out), optional :: ierr
    type(DLDevice) :: dev
    integer(c_int64_t) :: cshape(max(size(shape), 1))
    integer(c_int) :: st
    dev = LM_CPU
    if (present(device)) dev = device
    cshape = 0
    if (size(shape) > 0) cshape(1:size(shape)) = reversed_(shape)
    managed = c_null_ptr
    st = lmc_tensor_alloc(managed, int(size(shape), c_int), cshape, dtype, dev); call c_(st)
    call done_(st, ierr, "lm_tensor_alloc")
  end subroutine

  ! =============================================================================================
  ! Dist tensors
  ! =============================================================================================
  function reversed_(a) result(r)
    integer(c_int64_t), intent(in) :: a(:)
    integer(c_int64_t) :: r(size(a))
    r = a(size(a):1:-1)
  end function

  !> Drops one reference (local) and nulls the handle.
  subroutine lm_dist_tensor_destroy(x)
    type(lm_dist_tensor), intent(inout) :: x
    integer(c_int) :: st
    if (c_associated(x%ptr)) st = lmc_dist_tensor_destroy(x%ptr)
    x%ptr = c_null_ptr
  end subroutine

  subroutine tensor_final_(x)
    type(lm_dist_tensor), intent(inout) :: x
    call lm_dist_tensor_destroy(x)
  end subroutine

  !> y = x: y shares x's tensor (one more reference).
  subroutine tensor_assign_(lhs, rhs)
    type(lm_dist_tensor), intent(inout) :: lhs
    type(lm_dist_tensor), intent(in) :: rhs
    type(c_ptr) :: p
    integer(c_int) :: st
    p = rhs%ptr
    if (c_associated(p)) then
      st = lmc_dist_tensor_retain(p)
      if (st /= LM_SUCCESS) error stop "localmap: assignment of a bad type(lm_dist_tensor)"
    end if
    call lm_dist_tensor_destroy(lhs)
    lhs%ptr = p
  end subroutine

  !> Adds a reference to x's tensor (the assignment y = x does this for you); each reference is
  !> dropped by one lm_dist_tensor_destroy of a handle holding it.
  subroutine lm_dist_tensor_retain(x, ierr)
    type(lm_dist_tensor), intent(in) :: x
    integer, intent(out), optional :: ierr
    integer(c_int) :: st
    st = lmc_dist_tensor_retain(x%ptr); call c_(st); call done_(st, ierr, "lm_dist_tensor_retain")
  end subroutine

  !> Builds x from a new C handle (x's old tensor is dropped first).
  subroutine set_(x, p)
    type(lm_dist_tensor), intent(inout) :: x
    type(c_ptr), intent(in) :: p
    call lm_dist_tensor_destroy(x)
    x%ptr = p
  end subroutine

  function host_tensor_(data, cshape, dtype) result(t)
    type(c_ptr), intent(in) :: data
    integer(c_int64_t), intent(in), target :: cshape(:)
    type(DLDataType), intent(in) :: dtype
    type(DLTensor) :: t
    t%data = data
    t%device = LM_CPU
    t%ndim = int(size(cshape), c_int)
    t%dtype = dtype
    t%shape = c_null_ptr
    if (size(cshape) > 0) t%shape = c_loc(cshape)
    t%strides = c_null_ptr
    t%byte_offset = 0
  end function

  !> A zero tensor of global shape `shape` (Fortran order) and dtype (LM_FLOAT64, ...). Local.
  subroutine zeros_i8_(x, mesh, shape, dtype, placements, device, ierr)
    type(lm_dist_tensor), intent(inout) :: x
    type(lm_mesh), intent(in) :: mesh
    integer(c_int64_t), intent(in) :: shape(:)
    type(DLDataType), intent(in) :: dtype
    type(lm_placement), intent(in) :: placements(:)
    type(DLDevice), intent(in), optional :: device
    integer, intent(out), optional :: ierr
    type(lm_placement_t) :: cpl(size(placements))
    type(DLDevice) :: dev
    type(c_ptr) :: p
    integer(c_int) :: st
    dev = LM_CPU
    if (present(device)) dev = device
    call to_c_pl_(placements, size(shape), cpl, st, "lm_zeros: placements")
    call check_npl_(mesh%ptr, size(placements), st, "lm_zeros: placements")
    if (st == LM_SUCCESS) then
      st = lmc_dist_tensor_zeros(p, mesh%ptr, int(size(shape), c_int), reversed_(shape), dtype, dev, cpl)
      call c_(st)
      if (st == LM_SUCCESS) call set_(x, p)
    end if
    call done_(st, ierr, "lm_zeros")
  end subroutine
  subroutine zeros_i4_(x, mesh, shape, dtype, placements, device, ierr)
    type(lm_dist_tensor), intent(inout) :: x
    type(lm_mesh), intent(in) :: mesh
    integer(c_int32_t), intent(in) :: shape(:)
    type(DLDataType), intent(in) :: dtype
    type(lm_placement), intent(in) :: placements(:)
    type(DLDevice), intent(in), optional :: device
    integer, intent(out), optional :: ierr
    call zeros_i8_(x, mesh, int(shape, c_int64_t), dtype, placements, device, ierr)
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
    integer(c_int) :: st, flags, cdesc(9)
    type(c_ptr) :: p
    character(len=80) :: msg
    flags = int(LM_FROM_LOCAL_BORROW, c_int)
    if (present(copy)) then
      if (copy) flags = int(LM_FROM_LOCAL_COPY, c_int)
    end if
    if (size(desc) /= 9) then
      write(msg, '("lm_from_scalapack: desc has ",i0," entries, not 9")') size(desc)
      call bad_(st, trim(msg))
    else if (.not. contiguous .and. flags == int(LM_FROM_LOCAL_BORROW, c_int)) then
      call bad_(st, "lm_from_scalapack: a is not contiguous, so it cannot be borrowed: pass the " // &
                "whole array (a(:, 1:LOCc) of an assumed-size one) or copy=.true.")
    else
      cdesc = int(desc, c_int)
      st = lmc_dist_tensor_from_scalapack(p, mesh%ptr, cdesc, data, dtype, LM_CPU, flags)
      call c_(st)
      if (st == LM_SUCCESS) call set_(x, p)
    end if
    call done_(st, ierr, "lm_from_scalapack")
  end subroutine

  !> The ScaLAPACK descriptor of x (a 2-D block-cyclic or sharded matrix on a 2-D mesh; see
  !> lm_dist_tensor_to_scalapack) with BLACS context ctxt; lm_local gives its local array.
  subroutine lm_to_scalapack(x, ctxt, desc, ierr)
    type(lm_dist_tensor), intent(in) :: x
    integer, intent(in) :: ctxt
    integer, intent(out) :: desc(9)
    integer, intent(out), optional :: ierr
    integer(c_int) :: st, cdesc(9)
    st = lmc_dist_tensor_to_scalapack(x%ptr, int(ctxt, c_int), cdesc); call c_(st)
    desc = int(cdesc)
    call done_(st, ierr, "lm_to_scalapack")
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
    character(len=160) :: msg
    cshape = reversed_(fshape)
    t = host_tensor_(data, cshape, dtype)
    mode = LM_SHAPE_ALLGATHER
    if (present(global_shape)) mode = LM_SHAPE_GIVEN
    if (present(shape_mode)) mode = int(shape_mode, c_int)
    gp = c_null_ptr
    call to_c_pl_(placements, size(fshape), cpl, st, "lm_from_local: placements")
    call check_npl_(mesh%ptr, size(placements), st, "lm_from_local: placements")
    if (st == LM_SUCCESS .and. mode == LM_SHAPE_GIVEN) then
      if (.not. present(global_shape)) then
        call bad_(st, "lm_from_local: shape_mode = LM_SHAPE_GIVEN needs global_shape")
      else if (size(global_shape) /= size(fshape)) then
        write(msg, '("lm_from_local: global_shape has ",i0," entries for a rank-",i0," array")') &
          size(global_shape), size(fshape)
        call bad_(st, trim(msg))
      else
        gshape(1:size(fshape)) = reversed_(global_shape)
        gp = c_loc(gshape)
      end if
    end if
    if (st == LM_SUCCESS) then
      st = lmc_dist_tensor_from_local(p, mesh%ptr, t, cpl, mode, gp, int(LM_FROM_LOCAL_COPY, c_int))
      call c_(st)
      if (st == LM_SUCCESS) call set_(x, p)
    end if
    call done_(st, ierr, "lm_from_local")
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
    integer(c_int) :: st, r, me
    cshape = reversed_(fshape)
    t = host_tensor_(data, cshape, dtype)
    tp = c_loc(t)
    r = -1
    if (present(root)) r = int(root, c_int)
    if (r >= 0) then
      ! Only mesh rank `root` passes the data; the others pass NULL.
      if (lmc_mesh_rank(mesh%ptr, me) /= LM_SUCCESS) me = -1
      if (me /= r) tp = c_null_ptr
    end if
    call to_c_pl_(placements, size(fshape), cpl, st, "lm_from_global: placements")
    call check_npl_(mesh%ptr, size(placements), st, "lm_from_global: placements")
    if (st == LM_SUCCESS) then
      st = lmc_dist_tensor_from_global(p, mesh%ptr, tp, cpl, r)
      call c_(st)
      if (st == LM_SUCCESS) call set_(x, p)
    end if
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
    type(c_ptr) :: tp, m
    integer(c_int) :: st, r, me
    cshape = reversed_(fshape)
    t = host_tensor_(data, cshape, dtype)
    tp = c_loc(t)
    r = -1
    if (present(root)) r = int(root, c_int)
    if (r >= 0) then
      me = -1
      if (lmc_dist_tensor_mesh(x%ptr, m) == LM_SUCCESS) then
        if (lmc_mesh_rank(m, me) /= LM_SUCCESS) me = -1
      end if
      if (me /= r) tp = c_null_ptr
    end if
    st = lmc_dist_tensor_gather(x%ptr, r, tp); call c_(st)
    call done_(st, ierr, "lm_gather")
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
    if (.not. c_associated(managed)) then
      call bad_(st, "lm_from_dlpack: managed is NULL")
      call done_(st, ierr, "lm_from_dlpack")
      return
    end if
    call c_f_pointer(managed, m)
    nd = int(m%dl_tensor%ndim)
    mode = LM_SHAPE_ALLGATHER
    if (present(global_shape)) mode = LM_SHAPE_GIVEN
    if (present(shape_mode)) mode = int(shape_mode, c_int)
    gp = c_null_ptr
    call to_c_pl_(placements, nd, cpl, st, "lm_from_dlpack: placements")
    call check_npl_(mesh%ptr, size(placements), st, "lm_from_dlpack: placements")
    if (st == LM_SUCCESS .and. present(global_shape)) then
      if (size(global_shape) /= nd) then
        call bad_(st, "lm_from_dlpack: global_shape needs one entry per dim of the tensor")
      else
        gshape = reversed_(global_shape)
        gp = c_loc(gshape)
      end if
    end if
    if (st == LM_SUCCESS) then
      st = lmc_dist_tensor_from_dlpack(p, mesh%ptr, managed, cpl, mode, gp)
      call c_(st)
      if (st == LM_SUCCESS) call set_(x, p)
    end if
    call done_(st, ierr, "lm_from_dlpack")
  end subroutine

  !> The tensor's mesh, borrowed (it lives as long as the tensor).
  subroutine lm_dist_tensor_mesh(x, mesh, ierr)
    type(lm_dist_tensor), intent(in) :: x
    type(lm_mesh), intent(inout) :: mesh
    integer, intent(out), optional :: ierr
    type(c_ptr) :: m
    integer(c_int) :: st
    st = lmc_dist_tensor_mesh(x%ptr, m); call c_(st)
    if (st == LM_SUCCESS) call lm_mesh_borrow(mesh, m)
    call done_(st, ierr, "lm_dist_tensor_mesh")
  end subroutine

  !> The tensor's number of dims (local).
  subroutine lm_dist_tensor_ndim(x, ndim, ierr)
    type(lm_dist_tensor), intent(in) :: x
    integer, intent(out) :: ndim
    integer, intent(out), optional :: ierr
    integer(c_int) :: st, n
    n = 0; st = lmc_dist_tensor_ndim(x%ptr, n); call c_(st); ndim = int(n)
    call done_(st, ierr, "lm_dist_tensor_ndim")
  end subroutine

  !> The tensor's dtype (compare with LM_FLOAT64, ... using ==).
  subroutine lm_dist_tensor_dtype(x, dtype, ierr)
    type(lm_dist_tensor), intent(in) :: x
    type(DLDataType), intent(out) :: dtype
    integer, intent(out), optional :: ierr
    integer(c_int) :: st
    st = lmc_dist_tensor_dtype(x%ptr, dtype); call c_(st); call done_(st, ierr, "lm_dist_tensor_dtype")
  end subroutine

  !> The device of the tensor's local shard (local).
  subroutine lm_dist_tensor_device(x, device, ierr)
    type(lm_dist_tensor), intent(in) :: x
    type(DLDevice), intent(out) :: device
    integer, intent(out), optional :: ierr
    integer(c_int) :: st
    st = lmc_dist_tensor_device(x%ptr, device); call c_(st); call done_(st, ierr, "lm_dist_tensor_device")
  end subroutine

  !> One placement per mesh dim, in Fortran dim numbering.
  subroutine lm_dist_tensor_placements(x, placements, ierr)
    type(lm_dist_tensor), intent(in) :: x
    type(lm_placement), intent(out) :: placements(:)
    integer, intent(out), optional :: ierr
    type(lm_placement_t) :: cpl(size(placements))
    integer(c_int) :: st, nd
    type(c_ptr) :: m
    m = c_null_ptr
    st = lmc_dist_tensor_ndim(x%ptr, nd)
    if (st == LM_SUCCESS) st = lmc_dist_tensor_mesh(x%ptr, m)
    call c_(st)
    call check_len_(m, size(placements), .false., st, "lm_dist_tensor_placements: placements")
    if (st == LM_SUCCESS) then
      st = lmc_dist_tensor_placements(x%ptr, cpl, int(size(cpl), c_int)); call c_(st)
    end if
    if (st == LM_SUCCESS) call from_c_pl_(cpl, int(nd), placements)
    call done_(st, ierr, "lm_dist_tensor_placements")
  end subroutine

  subroutine shape_query_(x, which, shape, st, what)
    type(lm_dist_tensor), intent(in) :: x
    integer, intent(in) :: which
    integer(c_int64_t), intent(out) :: shape(:)
    integer(c_int), intent(out) :: st
    character(len=*), intent(in) :: what
    integer(c_int64_t) :: c(size(shape))
    integer(c_int) :: n, nd
    character(len=160) :: msg
    n = int(size(shape), c_int)
    st = lmc_dist_tensor_ndim(x%ptr, nd); call c_(st)
    if (st /= LM_SUCCESS) return
    if (n /= nd) then
      write(msg, '(a," has ",i0," elements for a rank-",i0," tensor")') what, n, nd
      call bad_(st, trim(msg))
      return
    end if
    select case (which)
    case (1); st = lmc_dist_tensor_global_shape(x%ptr, c, n)
    case (2); st = lmc_dist_tensor_local_shape(x%ptr, c, n)
    case default; st = lmc_dist_tensor_local_offset(x%ptr, c, n)
    end select
    call c_(st)
    if (st == LM_SUCCESS) shape = reversed_(c)
  end subroutine

  !> The global shape (Fortran order; size(shape) must equal the tensor's rank).
  subroutine lm_dist_tensor_global_shape(x, shape, ierr)
    type(lm_dist_tensor), intent(in) :: x
    integer(c_int64_t), intent(out) :: shape(:)
    integer, intent(out), optional :: ierr
    integer(c_int) :: st
    call shape_query_(x, 1, shape, st, "lm_dist_tensor_global_shape: shape")
    call done_(st, ierr, "lm_dist_tensor_global_shape")
  end subroutine
  !> The local shard's extents (Fortran order).
  subroutine lm_dist_tensor_local_shape(x, shape, ierr)
    type(lm_dist_tensor), intent(in) :: x
    integer(c_int64_t), intent(out) :: shape(:)
    integer, intent(out), optional :: ierr
    integer(c_int) :: st
    call shape_query_(x, 2, shape, st, "lm_dist_tensor_local_shape: shape")
    call done_(st, ierr, "lm_dist_tensor_local_shape")
  end subroutine
  !> Elements before the shard along each dim (Fortran order): the shard is
  !> global(offset(1)+1 : offset(1)+local(1), ...).
  subroutine lm_dist_tensor_local_offset(x, offset, ierr)
    type(lm_dist_tensor), intent(in) :: x
    integer(c_int64_t), intent(out) :: offset(:)
    integer, intent(out), optional :: ierr
    integer(c_int) :: st
    call shape_query_(x, 3, offset, st, "lm_dist_tensor_local_offset: offset")
    call done_(st, ierr, "lm_dist_tensor_local_offset")
  end subroutine

  !> The raw DLTensor view of the shard (C order shape; lm_local with a Fortran pointer is the
  !> usual way).
  subroutine lm_dist_tensor_local_view(x, view, ierr)
    type(lm_dist_tensor), intent(in) :: x
    type(DLTensor), intent(out) :: view
    integer, intent(out), optional :: ierr
    integer(c_int) :: st
    st = lmc_dist_tensor_local(x%ptr, view); call c_(st); call done_(st, ierr, "lm_local")
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
    integer(c_int), intent(out) :: st
    character(len=*), intent(in) :: what
    integer(c_int64_t), pointer :: shp(:)
    integer(c_int64_t) :: ext(max(rank, 1))
    integer(c_intptr_t) :: addr
    character(len=160) :: msg
    st = LM_SUCCESS
    data = c_loc(empty_)
    fshape = 0
    fpad = 0
    if (.not. (t%dtype == dtype)) then
      write(msg, '(a,": the tensor''s dtype is (code ",i0,", bits ",i0,"), not the pointer''s (code ",i0,", bits ",i0,")")') &
        what, t%dtype%code, iand(int(t%dtype%bits), 255), dtype%code, iand(int(dtype%bits), 255)
      call bad_(st, trim(msg))
      return
    end if
    if (t%ndim /= rank) then
      write(msg, '(a,": the tensor has rank ",i0,", the pointer ",i0)') what, t%ndim, rank
      call bad_(st, trim(msg))
      return
    end if
    if (t%device%device_type /= kDLCPU) then
      call bad_(st, what // ": the tensor is not in host memory")
      return
    end if
    if (rank > 0) then
      call c_f_pointer(t%shape, shp, [rank])
      fshape = reversed_(shp)
      ! The array the shard lies in (its padded rows, or its own shape): the library's rule.
      if (lmc_padded_extents(t, ext, int(rank, c_int)) /= LM_SUCCESS) then
        call bad_(st, what // ": the tensor's strides are neither compact nor padded")
        return
      end if
      fpad = reversed_(ext(1:rank))
    end if
    if (c_associated(t%data)) then
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
    data = c_null_ptr
    st = lmc_dist_tensor_local(x%ptr, v); call c_(st)
    if (st == LM_SUCCESS) call dl_data_(v, dtype, rank, data, fshape, fpad, st, "lm_local")
  end subroutine

  subroutine arg_data_(arg, dtype, rank, data, fshape, fpad, st)
    type(lm_arg_t), intent(in) :: arg
    type(DLDataType), intent(in) :: dtype
    integer, intent(in) :: rank
    type(c_ptr), intent(out) :: data
    integer(c_int64_t), intent(out) :: fshape(:), fpad(:)
    integer(c_int), intent(out) :: st
    type(DLTensor), pointer :: t
    character(len=80) :: msg
    data = c_null_ptr
    fshape = 0
    fpad = 0
    if ((arg%kind /= LM_ARG_TENSOR .and. arg%kind /= LM_ARG_MANAGED_TENSOR) .or. .not. c_associated(arg%ptr)) then
      write(msg, '("lm_arg_get: the argument is of kind ",i0,", not a tensor")') arg%kind
      call bad_(st, trim(msg))
      return
    end if
    call c_f_pointer(arg%ptr, t)   ! a DLManagedTensor starts with its DLTensor
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
    st = LM_SUCCESS
    allocate(shape(0))
    if ((arg%kind /= LM_ARG_TENSOR .and. arg%kind /= LM_ARG_MANAGED_TENSOR) .or. .not. c_associated(arg%ptr)) then
      call bad_(st, "lm_arg_shape: the argument is not a tensor")
    else
      call c_f_pointer(arg%ptr, t)
      if (t%ndim > 0) then
        call c_f_pointer(t%shape, shp, [t%ndim])
        shape = reversed_(shp)
      end if
    end if
    call done_(st, ierr, "lm_arg_shape")
  end subroutine

  !> Exports the shard as a DLManagedTensor (C order) holding a reference on x; whoever consumes
  !> it calls its deleter once (lm_from_dlpack takes it over).
  subroutine lm_dist_tensor_to_dlpack(x, managed, ierr)
    type(lm_dist_tensor), intent(in) :: x
    type(c_ptr), intent(out) :: managed
    integer, intent(out), optional :: ierr
    integer(c_int) :: st
    managed = c_null_ptr
    st = lmc_dist_tensor_to_dlpack(x%ptr, managed); call c_(st); call done_(st, ierr, "lm_dist_tensor_to_dlpack")
  end subroutine

  !> y = x resharded to `placements` on dst_mesh (absent: x's mesh). Collective over both meshes.
  subroutine lm_reshard(y, x, placements, dst_mesh, ierr)
    type(lm_dist_tensor), intent(inout) :: y
    type(lm_dist_tensor), intent(in) :: x
    type(lm_placement), intent(in) :: placements(:)
    type(lm_mesh), intent(in), optional :: dst_mesh
    integer, intent(out), optional :: ierr
    type(lm_placement_t) :: cpl(size(placements))
    type(c_ptr) :: p, dm
    integer(c_int) :: st, nd
    dm = c_null_ptr
    if (present(dst_mesh)) dm = dst_mesh%ptr
    st = LM_SUCCESS
    call check_target_npl_(x, dm, size(placements), st, "lm_reshard: placements")
    if (st == LM_SUCCESS) then
      st = lmc_dist_tensor_ndim(x%ptr, nd); call c_(st)
    end if
    if (st == LM_SUCCESS) call to_c_pl_(placements, int(nd), cpl, st, "lm_reshard: placements")
    if (st == LM_SUCCESS) then
      st = lmc_dist_tensor_reshard(p, x%ptr, dm, cpl); call c_(st)
      if (st == LM_SUCCESS) call set_(y, p)
    end if
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
    integer(c_int) :: cperm(max(size(perm), 1))
    type(c_ptr) :: p, dm
    integer(c_int) :: st, nd
    dm = c_null_ptr
    if (present(dst_mesh)) dm = dst_mesh%ptr
    call c_perm_(x, perm, cperm, nd, st, "lm_transpose")
    call check_target_npl_(x, dm, size(placements), st, "lm_transpose: placements")
    if (st == LM_SUCCESS) call to_c_pl_(placements, int(nd), cpl, st, "lm_transpose: placements")
    if (st == LM_SUCCESS) then
      st = lmc_dist_tensor_transpose(p, x%ptr, cperm, dm, cpl); call c_(st)
      if (st == LM_SUCCESS) call set_(y, p)
    end if
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
    integer(c_int) :: cperm(max(size(perm), 1))
    integer(c_int) :: st, nd
    call c_perm_(x, perm, cperm, nd, st, "lm_transpose_into")
    if (st == LM_SUCCESS) then
      st = lmc_dist_tensor_transpose_into(y%ptr, x%ptr, cperm); call c_(st)
    end if
    call done_(st, ierr, "lm_transpose_into")
  end subroutine

  ! A Fortran perm of x's dims (1-based: dim k of the result is dim perm(k) of x) in C's dims
  ! (reversed, 0-based); st: LM_SUCCESS or the refusal, naming the entry.
  subroutine c_perm_(x, perm, cperm, nd, st, what)
    type(lm_dist_tensor), intent(in) :: x
    integer, intent(in) :: perm(:)
    integer(c_int), intent(out) :: cperm(:), nd, st
    character(len=*), intent(in) :: what
    integer :: k
    character(len=96) :: msg
    st = lmc_dist_tensor_ndim(x%ptr, nd); call c_(st)
    if (st == LM_SUCCESS .and. size(perm) /= nd) then
      write(msg, '(a,": perm has ",i0," entries, x has ",i0," dims")') what, size(perm), nd
      call bad_(st, trim(msg))
    end if
    do k = 1, size(perm)
      if (st /= LM_SUCCESS) exit
      if (perm(k) < 1 .or. perm(k) > nd .or. count(perm == perm(k)) /= 1) then
        write(msg, '(a,": perm(",i0,") = ",i0," is not one of the dims 1 .. ",i0, &
                    & " once")') what, k, perm(k), nd
        call bad_(st, trim(msg))
      end if
    end do
    if (st /= LM_SUCCESS) return
    do k = 1, nd   ! Fortran dim k is C dim nd - k (dims reversed)
      cperm(nd - k + 1) = int(nd - perm(k), c_int)
    end do
  end subroutine

  ! =============================================================================================
  ! Persistent plans, requests
  ! =============================================================================================
  !> A plan for (src layout, dst layout, dtype, global shape in Fortran order). Local.
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
    call to_c_pl_(src_placements, size(shape), sp, st, "lm_reshard_plan_create: src_placements")
    call check_npl_(src_mesh%ptr, size(src_placements), st, "lm_reshard_plan_create: src_placements")
    if (st == LM_SUCCESS) call to_c_pl_(dst_placements, size(shape), dp, st, "lm_reshard_plan_create: dst_placements")
    call check_npl_(dst_mesh%ptr, size(dst_placements), st, "lm_reshard_plan_create: dst_placements")
    if (st == LM_SUCCESS) then
      st = lmc_reshard_plan_create(p, src_mesh%ptr, sp, dst_mesh%ptr, dp, int(size(shape), c_int), &
                                   reversed_(shape), dtype)
      call c_(st)
      if (st == LM_SUCCESS) plan%ptr = p
    end if
    call done_(st, ierr, "lm_reshard_plan_create")
  end subroutine
  subroutine plan_create_i4_(plan, src_mesh, src_placements, dst_mesh, dst_placements, shape, dtype, ierr)
    type(lm_reshard_plan), intent(inout) :: plan
    type(lm_mesh), intent(in) :: src_mesh, dst_mesh
    type(lm_placement), intent(in) :: src_placements(:), dst_placements(:)
    integer(c_int32_t), intent(in) :: shape(:)
    type(DLDataType), intent(in) :: dtype
    integer, intent(out), optional :: ierr
    call plan_create_i8_(plan, src_mesh, src_placements, dst_mesh, dst_placements, int(shape, c_int64_t), &
                         dtype, ierr)
  end subroutine

  !> A zero-filled tensor y laid out as the plan's target, on `device` (default: the host). Local.
  subroutine lm_reshard_plan_alloc_target(plan, y, device, ierr)
    type(lm_reshard_plan), intent(in) :: plan
    type(lm_dist_tensor), intent(inout) :: y
    type(DLDevice), intent(in), optional :: device
    integer, intent(out), optional :: ierr
    type(DLDevice) :: dev
    type(c_ptr) :: p
    integer(c_int) :: st
    dev = LM_CPU
    if (present(device)) dev = device
    st = lmc_reshard_plan_alloc_target(p, plan%ptr, dev); call c_(st)
    if (st == LM_SUCCESS) call set_(y, p)
    call done_(st, ierr, "lm_reshard_plan_alloc_target")
  end subroutine

  !> Runs the plan from x into y. Collective over both meshes.
  subroutine lm_reshard_plan_execute(plan, x, y, ierr)
    type(lm_reshard_plan), intent(in) :: plan
    type(lm_dist_tensor), intent(in) :: x
    type(lm_dist_tensor), intent(inout) :: y
    integer, intent(out), optional :: ierr
    integer(c_int) :: st
    st = lmc_reshard_plan_execute(plan%ptr, x%ptr, y%ptr); call c_(st)
    call done_(st, ierr, "lm_reshard_plan_execute")
  end subroutine

  !> Starts the plan without waiting; x and y must not be touched until the request completes.
  subroutine lm_reshard_plan_start(plan, x, y, request, ierr)
    type(lm_reshard_plan), intent(in) :: plan
    type(lm_dist_tensor), intent(in) :: x
    type(lm_dist_tensor), intent(inout) :: y
    type(lm_request), intent(inout) :: request
    integer, intent(out), optional :: ierr
    integer(c_int) :: st
    type(c_ptr) :: r
    st = lmc_reshard_plan_start(r, plan%ptr, x%ptr, y%ptr); call c_(st)
    if (st == LM_SUCCESS) request%ptr = r
    call done_(st, ierr, "lm_reshard_plan_start")
  end subroutine

  !> done = .true. once complete (the request is then finished).
  subroutine lm_request_test(request, done, ierr)
    type(lm_request), intent(inout) :: request
    logical, intent(out) :: done
    integer, intent(out), optional :: ierr
    integer(c_int) :: st, d
    d = 1
    st = LM_SUCCESS
    if (c_associated(request%ptr)) then
      st = lmc_request_test(request%ptr, d); call c_(st)
    end if
    done = d /= 0
    call done_(st, ierr, "lm_request_test")
  end subroutine

  !> Completes a nonblocking reshard (lm_reshard_plan_start, lm_reshard_group_start) and frees the
  !> request (one already complete, or never started, is a no-op).
  subroutine lm_request_wait(request, ierr)
    type(lm_request), intent(inout) :: request
    integer, intent(out), optional :: ierr
    integer(c_int) :: st
    st = LM_SUCCESS
    if (c_associated(request%ptr)) then
      st = lmc_request_wait(request%ptr); call c_(st)
    end if
    call done_(st, ierr, "lm_request_wait")
  end subroutine

  subroutine request_final_(request)
    type(lm_request), intent(inout) :: request
    integer(c_int) :: st
    if (c_associated(request%ptr)) st = lmc_request_wait(request%ptr)
  end subroutine

  subroutine request_assign_(lhs, rhs)
    type(lm_request), intent(inout) :: lhs
    type(lm_request), intent(in) :: rhs
    if (c_associated(rhs%ptr) .or. c_associated(lhs%ptr)) error stop "localmap: a type(lm_request) cannot be copied"
  end subroutine

  !> The bytes this rank sends to other ranks when executing the plan: info%bytes_sent of
  !> lm_reshard_plan_info (this rank's counts, local).
  subroutine lm_reshard_plan_bytes_sent(plan, bytes, ierr)
    type(lm_reshard_plan), intent(in) :: plan
    integer(c_int64_t), intent(out) :: bytes
    integer, intent(out), optional :: ierr
    type(lm_reshard_plan_info_t) :: info
    integer(c_int) :: st
    bytes = 0
    info%size = c_sizeof(info)
    info%magic = LM_RESHARD_PLAN_INFO_MAGIC
    info%version = LM_RESHARD_PLAN_INFO_VERSION
    st = lmc_reshard_plan_info(plan%ptr, 0_c_int, info); call c_(st)
    if (st == LM_SUCCESS) bytes = info%bytes_sent
    call done_(st, ierr, "lm_reshard_plan_bytes_sent")
  end subroutine

  !> The backward plan of `plan` (local): gradients from the target mesh, in the adjoint of the
  !> target placements, to the source mesh, in the adjoint of the source placements.
  subroutine lm_reshard_plan_adjoint(plan, adjoint, ierr)
    type(lm_reshard_plan), intent(in) :: plan
    type(lm_reshard_plan), intent(inout) :: adjoint
    integer, intent(out), optional :: ierr
    integer(c_int) :: st
    type(c_ptr) :: h
    h = c_null_ptr
    st = lmc_reshard_plan_adjoint(h, plan%ptr); call c_(st)
    if (st == LM_SUCCESS) then
      call lm_reshard_plan_destroy(adjoint)
      adjoint%ptr = h
    end if
    call done_(st, ierr, "lm_reshard_plan_adjoint")
  end subroutine

  !> What executing the plan moves: this rank's counts (local), or with all_ranks = .true. every
  !> rank's summed (collective over both meshes). See lm_reshard_plan_info_t.
  subroutine lm_reshard_plan_info(plan, info, all_ranks, ierr)
    type(lm_reshard_plan), intent(in) :: plan
    type(lm_reshard_plan_info_t), intent(out) :: info
    logical, intent(in), optional :: all_ranks
    integer, intent(out), optional :: ierr
    integer(c_int) :: st, flags
    flags = 0
    if (present(all_ranks)) then
      if (all_ranks) flags = LM_PLAN_INFO_ALL_RANKS
    end if
    info%size = c_sizeof(info)
    info%magic = LM_RESHARD_PLAN_INFO_MAGIC
    info%version = LM_RESHARD_PLAN_INFO_VERSION
    st = lmc_reshard_plan_info(plan%ptr, flags, info); call c_(st)
    call done_(st, ierr, "lm_reshard_plan_info")
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
    type(c_ptr) :: dm
    integer(c_int) :: st, flags
    dm = src_mesh%ptr
    if (present(dst_mesh)) dm = dst_mesh%ptr
    flags = 0
    if (present(all_ranks)) then
      if (all_ranks) flags = LM_PLAN_INFO_ALL_RANKS
    end if
    info%size = c_sizeof(info)
    info%magic = LM_RESHARD_PLAN_INFO_MAGIC
    info%version = LM_RESHARD_PLAN_INFO_VERSION
    call to_c_pl_(src_placements, size(shape), sp, st, "lm_reshard_estimate: src_placements")
    call check_npl_(src_mesh%ptr, size(src_placements), st, "lm_reshard_estimate: src_placements")
    if (st == LM_SUCCESS) call to_c_pl_(dst_placements, size(shape), dp, st, "lm_reshard_estimate: dst_placements")
    call check_npl_(dm, size(dst_placements), st, "lm_reshard_estimate: dst_placements")
    if (st == LM_SUCCESS) then
      st = lmc_reshard_estimate(src_mesh%ptr, sp, dm, dp, int(size(shape), c_int), reversed_(shape), &
                                dtype, flags, info)
      call c_(st)
    end if
    call done_(st, ierr, "lm_reshard_estimate")
  end subroutine
  subroutine estimate_i4_(info, src_mesh, src_placements, dst_placements, shape, dtype, dst_mesh, &
                          all_ranks, ierr)
    type(lm_reshard_plan_info_t), intent(out) :: info
    type(lm_mesh), intent(in) :: src_mesh
    type(lm_placement), intent(in) :: src_placements(:), dst_placements(:)
    integer(c_int32_t), intent(in) :: shape(:)
    type(DLDataType), intent(in) :: dtype
    type(lm_mesh), intent(in), optional :: dst_mesh
    logical, intent(in), optional :: all_ranks
    integer, intent(out), optional :: ierr
    call estimate_i8_(info, src_mesh, src_placements, dst_placements, int(shape, c_int64_t), dtype, &
                      dst_mesh, all_ranks, ierr)
  end subroutine

  !> A one-line description of the plan's steps.
  subroutine lm_reshard_plan_describe(plan, text, ierr)
    type(lm_reshard_plan), intent(in) :: plan
    character(len=:), allocatable, intent(out) :: text
    integer, intent(out), optional :: ierr
    character(kind=c_char) :: buf(4096)
    integer(c_int) :: st
    buf = c_null_char
    st = lmc_reshard_plan_describe(plan%ptr, buf, int(size(buf), c_size_t)); call c_(st)
    text = c_chars_(buf)
    call done_(st, ierr, "lm_reshard_plan_describe")
  end subroutine

  !> Local; a plan with a request in flight must not be destroyed before it completes.
  subroutine lm_reshard_plan_destroy(plan)
    type(lm_reshard_plan), intent(inout) :: plan
    integer(c_int) :: st
    if (c_associated(plan%ptr)) st = lmc_reshard_plan_destroy(plan%ptr)
    plan%ptr = c_null_ptr
  end subroutine

  subroutine plan_final_(plan)
    type(lm_reshard_plan), intent(inout) :: plan
    call lm_reshard_plan_destroy(plan)
  end subroutine

  subroutine plan_assign_(lhs, rhs)
    type(lm_reshard_plan), intent(inout) :: lhs
    type(lm_reshard_plan), intent(in) :: rhs
    if (c_associated(rhs%ptr) .or. c_associated(lhs%ptr)) &
      error stop "localmap: a type(lm_reshard_plan) cannot be copied"
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
  type(lm_reshard_entry) function entry_i4_(shape, dtype, src_placements, dst_placements) result(e)
    integer(c_int32_t), intent(in) :: shape(:)
    type(DLDataType), intent(in) :: dtype
    type(lm_placement), intent(in) :: src_placements(:), dst_placements(:)
    e = entry_i8_(int(shape, c_int64_t), dtype, src_placements, dst_placements)
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
    type(lm_reshard_entry_t), allocatable, target :: cent(:)
    integer(c_int64_t), allocatable, target :: cshape(:, :)
    type(lm_placement_t), allocatable, target :: csrc(:, :), cdst(:, :)
    type(lm_reshard_group_config_t), target :: cfg
    type(c_ptr) :: p, dm, dcheck
    integer(c_int) :: st
    integer :: n, i, nd, mnd, mns, mdd
    character(len=200) :: what
    call lm_reshard_group_destroy(group)
    n = size(entries)
    st = LM_SUCCESS
    dm = c_null_ptr
    if (present(dst_mesh)) dm = dst_mesh%ptr
    dcheck = src_mesh%ptr
    if (present(dst_mesh)) dcheck = dm
    cfg = lm_reshard_group_config_t(c_sizeof(cfg), LM_RESHARD_GROUP_CONFIG_MAGIC, &
                                    LM_RESHARD_GROUP_CONFIG_VERSION, 0_c_size_t, 0_c_size_t)
    if (present(bucket_bytes)) then
      if (bucket_bytes < 0) call bad_(st, "lm_reshard_group_create: bucket_bytes is negative")
      cfg%bucket_bytes = bucket_bytes
    end if
    mnd = 1; mns = 1; mdd = 1
    do i = 1, n
      if (st /= LM_SUCCESS) exit
      if (.not. (allocated(entries(i)%shape) .and. allocated(entries(i)%src_placements) .and. &
                 allocated(entries(i)%dst_placements))) then
        write(what, '(a,i0,a)') "lm_reshard_group_create: entries(", i, &
          ") lacks its shape or placements (make it with lm_reshard_entry)"
        call bad_(st, trim(what))
        exit
      end if
      mnd = max(mnd, size(entries(i)%shape))
      mns = max(mns, size(entries(i)%src_placements))
      mdd = max(mdd, size(entries(i)%dst_placements))
    end do
    allocate(cent(max(n, 1)), cshape(mnd, max(n, 1)), csrc(mns, max(n, 1)), cdst(mdd, max(n, 1)))
    ! Per entry: the C shape is the reversed Fortran shape, Shard dims count from the other end.
    do i = 1, n
      if (st /= LM_SUCCESS) exit
      nd = size(entries(i)%shape)
      write(what, '("lm_reshard_group_create: entries(",i0,")%src_placements")') i
      call to_c_pl_(entries(i)%src_placements, nd, csrc(:, i), st, trim(what))
      call check_npl_(src_mesh%ptr, size(entries(i)%src_placements), st, trim(what))
      write(what, '("lm_reshard_group_create: entries(",i0,")%dst_placements")') i
      if (st == LM_SUCCESS) call to_c_pl_(entries(i)%dst_placements, nd, cdst(:, i), st, trim(what))
      call check_npl_(dcheck, size(entries(i)%dst_placements), st, trim(what))
      if (nd > 0) cshape(1:nd, i) = reversed_(entries(i)%shape)
      cent(i) = lm_reshard_entry_t(int(nd, c_int), c_loc(cshape(1, i)), entries(i)%dtype, c_loc(csrc(1, i)), &
                                   c_loc(cdst(1, i)))
    end do
    if (st == LM_SUCCESS) then
      st = lmc_reshard_group_create(p, src_mesh%ptr, dm, int(n, c_int), cent, c_loc(cfg))
      call c_(st)
      if (st == LM_SUCCESS) group%ptr = p
    end if
    call done_(st, ierr, "lm_reshard_group_create")
  end subroutine

  !> The C handles of x(:) and y(:), which must be as many.
  subroutine pair_handles_(x, y, xs, ys, st, where)
    type(lm_dist_tensor), intent(in) :: x(:), y(:)
    type(c_ptr), allocatable, intent(out) :: xs(:), ys(:)
    integer(c_int), intent(out) :: st
    character(len=*), intent(in) :: where
    character(len=160) :: msg
    integer :: i
    st = LM_SUCCESS
    allocate(xs(max(size(x), 1)), ys(max(size(x), 1)))
    xs = c_null_ptr
    ys = c_null_ptr
    if (size(x) /= size(y)) then
      write(msg, '(a,": x has ",i0," tensors, y ",i0)') where, size(x), size(y)
      call bad_(st, trim(msg))
      return
    end if
    do i = 1, size(x)
      xs(i) = x(i)%ptr
      ys(i) = y(i)%ptr
    end do
  end subroutine

  !> Zero-filled tensors y(:) laid out as the group's targets, on `device` (default: the host);
  !> size(y) must be the group's number of entries. On failure y is left as it was. Local.
  subroutine lm_reshard_group_alloc_targets(group, y, device, ierr)
    type(lm_reshard_group), intent(in) :: group
    type(lm_dist_tensor), intent(inout) :: y(:)
    type(DLDevice), intent(in), optional :: device
    integer, intent(out), optional :: ierr
    type(DLDevice) :: dev
    type(c_ptr) :: p(max(size(y), 1))
    integer(c_int) :: st
    integer :: i
    dev = LM_CPU
    if (present(device)) dev = device
    p = c_null_ptr
    st = lmc_reshard_group_alloc_targets(p, group%ptr, dev, int(size(y), c_int)); call c_(st)
    if (st == LM_SUCCESS) then
      do i = 1, size(y)
        call set_(y(i), p(i))
      end do
    end if
    call done_(st, ierr, "lm_reshard_group_alloc_targets")
  end subroutine

  !> Runs the group: x(i) into y(i) for every entry (size(x) = size(y) = the group's number of
  !> entries). Collective over the ranks of both meshes; one agreement covers the whole group. No
  !> target may overlap another target or any source.
  subroutine lm_reshard_group_execute(group, x, y, ierr)
    type(lm_reshard_group), intent(in) :: group
    type(lm_dist_tensor), intent(in) :: x(:)
    type(lm_dist_tensor), intent(inout) :: y(:)
    integer, intent(out), optional :: ierr
    type(c_ptr), allocatable :: xs(:), ys(:)
    integer(c_int) :: st
    call pair_handles_(x, y, xs, ys, st, "lm_reshard_group_execute")
    if (st == LM_SUCCESS) then
      st = lmc_reshard_group_execute(group%ptr, int(size(x), c_int), xs, ys); call c_(st)
    end if
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
    type(c_ptr), allocatable :: xs(:), ys(:)
    type(c_ptr) :: r
    integer(c_int) :: st
    call pair_handles_(x, y, xs, ys, st, "lm_reshard_group_start")
    if (st == LM_SUCCESS) then
      st = lmc_reshard_group_start(r, group%ptr, int(size(x), c_int), xs, ys); call c_(st)
      if (st == LM_SUCCESS) request%ptr = r
    end if
    call done_(st, ierr, "lm_reshard_group_start")
  end subroutine

  !> The group's number of entries and of buckets (either may be absent). Local.
  subroutine lm_reshard_group_size(group, n, buckets, ierr)
    type(lm_reshard_group), intent(in) :: group
    integer, intent(out), optional :: n, buckets
    integer, intent(out), optional :: ierr
    integer(c_int), target :: cn, cb
    integer(c_int) :: st
    cn = 0
    cb = 0
    st = lmc_reshard_group_size(group%ptr, c_loc(cn), c_loc(cb)); call c_(st)
    if (present(n)) n = int(cn)
    if (present(buckets)) buckets = int(cb)
    call done_(st, ierr, "lm_reshard_group_size")
  end subroutine

  !> Local; a group with a request in flight must not be destroyed before it completes.
  subroutine lm_reshard_group_destroy(group)
    type(lm_reshard_group), intent(inout) :: group
    integer(c_int) :: st
    if (c_associated(group%ptr)) st = lmc_reshard_group_destroy(group%ptr)
    group%ptr = c_null_ptr
  end subroutine

  subroutine group_final_(group)
    type(lm_reshard_group), intent(inout) :: group
    call lm_reshard_group_destroy(group)
  end subroutine

  subroutine group_assign_(lhs, rhs)
    type(lm_reshard_group), intent(inout) :: lhs
    type(lm_reshard_group), intent(in) :: rhs
    if (c_associated(rhs%ptr) .or. c_associated(lhs%ptr)) &
      error stop "localmap: a type(lm_reshard_group) cannot be copied"
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
    type(lm_placement_t), allocatable, target :: cpl(:, :), csrc(:, :)
    integer(c_int64_t), allocatable, target :: cshape(:, :)
    type(lm_reshard_entry_t), allocatable :: cent(:)
    type(c_ptr), allocatable :: xs(:), out(:)
    type(c_ptr) :: dm, m, sm, g
    type(DLDataType) :: dt
    type(DLDevice) :: dev
    integer(c_int) :: st, st2, nd, snd
    integer :: n, j, mnd
    character(len=160) :: msg
    n = size(x)
    st = LM_SUCCESS
    dm = c_null_ptr
    sm = c_null_ptr
    g = c_null_ptr
    snd = 1
    if (present(dst_mesh)) dm = dst_mesh%ptr
    if (size(y) /= n .or. size(placements, 2) /= n) then
      write(msg, '("lm_reshard_many: ",i0," tensors x, ",i0," y and ",i0," columns of placements")') &
        n, size(y), size(placements, 2)
      call bad_(st, trim(msg))
    end if
    if (st == LM_SUCCESS .and. n > 0) then
      st = lmc_dist_tensor_mesh(x(1)%ptr, sm); call c_(st)
      if (st == LM_SUCCESS) then
        st = lmc_mesh_ndim(sm, snd); call c_(st)
      end if
    end if
    mnd = 1
    do j = 1, n
      if (st /= LM_SUCCESS) exit
      st = lmc_dist_tensor_ndim(x(j)%ptr, nd); call c_(st)
      mnd = max(mnd, int(nd))
    end do
    allocate(cpl(max(size(placements, 1), 1), max(n, 1)), csrc(max(snd, 1), max(n, 1)), &
             cshape(mnd, max(n, 1)), cent(max(n, 1)), xs(max(n, 1)), out(max(n, 1)))
    xs = c_null_ptr
    out = c_null_ptr
    do j = 1, n
      if (st /= LM_SUCCESS) exit
      xs(j) = x(j)%ptr
      st = lmc_dist_tensor_mesh(x(j)%ptr, m); call c_(st)
      if (st == LM_SUCCESS .and. .not. c_associated(m, sm)) then
        write(msg, '("lm_reshard_many: x(",i0,") lives on another mesh than x(1) (one call moves ' // &
          'tensors of one mesh)")') j
        call bad_(st, trim(msg))
      end if
      if (st == LM_SUCCESS) then
        st = lmc_dist_tensor_ndim(x(j)%ptr, nd); call c_(st)
      end if
      write(msg, '("lm_reshard_many: placements(:,",i0,")")') j
      if (st == LM_SUCCESS) call to_c_pl_(placements(:, j), int(nd), cpl(:, j), st, trim(msg))
      if (st == LM_SUCCESS) then
        st = lmc_dist_tensor_global_shape(x(j)%ptr, cshape(:, j), nd); call c_(st)
      end if
      if (st == LM_SUCCESS) then
        st = lmc_dist_tensor_placements(x(j)%ptr, csrc(:, j), snd); call c_(st)
      end if
      if (st == LM_SUCCESS) then
        st = lmc_dist_tensor_dtype(x(j)%ptr, dt); call c_(st)
      end if
      if (st == LM_SUCCESS) cent(j) = lm_reshard_entry_t(nd, c_loc(cshape(1, j)), dt, &
                                                         c_loc(csrc(1, j)), c_loc(cpl(1, j)))
    end do
    ! One placement per dim of the target mesh (C reads that many).
    if (st == LM_SUCCESS .and. n > 0) then
      m = sm
      if (present(dst_mesh)) m = dm
      call check_npl_(m, size(placements, 1), st, "lm_reshard_many: placements")
    end if
    if (st == LM_SUCCESS .and. n > 0) then
      st = lmc_reshard_group_create(g, sm, dm, int(n, c_int), cent, c_null_ptr); call c_(st)
      if (st == LM_SUCCESS) then
        st = lmc_dist_tensor_device(x(1)%ptr, dev); call c_(st)
      end if
      if (st == LM_SUCCESS) then
        st = lmc_reshard_group_alloc_targets(out, g, dev, int(n, c_int)); call c_(st)
        if (st == LM_SUCCESS) then
          st = lmc_reshard_group_execute(g, int(n, c_int), xs, out); call c_(st)
          if (st /= LM_SUCCESS) then
            do j = 1, n  ! no y(j) changes: the targets go
              st2 = lmc_dist_tensor_destroy(out(j))
            end do
          end if
        end if
      end if
      if (c_associated(g)) st2 = lmc_reshard_group_destroy(g)
      if (st == LM_SUCCESS) then
        do j = 1, n
          call set_(y(j), out(j))
        end do
      end if
    end if
    call done_(st, ierr, "lm_reshard_many")
  end subroutine

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
      call bad_(st, "lm_arg_take: the argument is not a dist tensor")
    else
      call set_(y, arg%ptr)
      arg = lm_arg_t(LM_ARG_NONE, 0, 0_c_int64_t, 0d0, c_null_ptr)
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
      call c_f_pointer(blk, m)
      m%dl_tensor%device = LM_CPU
      m%dl_tensor%ndim = int(size(fshape), c_int)
      m%dl_tensor%dtype = dtype
      m%dl_tensor%strides = c_null_ptr
      m%dl_tensor%byte_offset = 0
      m%dl_tensor%shape = transfer(base + int(off_shape, c_intptr_t), blk)
      if (size(fshape) > 0) then
        call c_f_pointer(m%dl_tensor%shape, shp, [size(fshape)])
        shp = reversed_(fshape)
      end if
      dst = transfer(base + int(head, c_intptr_t), blk)
      m%dl_tensor%data = dst
      if (nbytes > 0) dst = c_memcpy_(dst, data, nbytes)
      m%manager_ctx = c_null_ptr
      m%deleter = c_funloc(free_managed_)
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
    integer :: nin, nout, mnd, i, j, r
    type(lm_placement_t), allocatable, target :: cin(:, :), cout(:, :), cgrad(:, :)
    integer(c_int64_t), allocatable, target :: cshapes(:, :)
    type(c_ptr), allocatable, target :: pin(:), pout(:), pshape(:), pgrad(:)
    type(lm_local_map_options_t) :: opt
    type(c_ptr), target :: rec
    type(lm_arg_t), allocatable, target :: cinputs(:), coutputs(:)
    type(c_ptr) :: m, mp, ud, inp, shp
    integer(c_int) :: st, nd, fl
    character(len=200) :: msg
    nin = size(inputs)
    nout = size(outputs)
    st = LM_SUCCESS
    m = c_null_ptr
    mp = c_null_ptr
    if (present(mesh)) mp = mesh%ptr
    m = mp
    if (.not. c_associated(m)) then
      do i = 1, nin
        if (inputs(i)%kind == LM_ARG_DIST_TENSOR) then
          if (lmc_dist_tensor_mesh(inputs(i)%ptr, m) == LM_SUCCESS) exit
        end if
      end do
    end if
    mnd = size(out_placements, 1)
    if (c_associated(m)) mnd = mesh_ndim_(m)
    if (size(out_placements, 2) /= nout) then
      write(msg, '("lm_local_map: out_placements has ",i0," columns for ",i0," outputs")') &
        size(out_placements, 2), nout
      call bad_(st, trim(msg))
    else if (nout > 0 .and. size(out_placements, 1) /= mnd) then
      write(msg, '("lm_local_map: out_placements has ",i0," rows for a mesh of ",i0," dims")') &
        size(out_placements, 1), mnd
      call bad_(st, trim(msg))
    end if
    if (st == LM_SUCCESS .and. present(in_placements)) then
      if (size(in_placements, 2) /= nin .or. (nin > 0 .and. size(in_placements, 1) /= mnd)) then
        write(msg, '("lm_local_map: in_placements is ",i0,"x",i0,", not ",i0,"x",i0," (mesh dims x inputs)")') &
          size(in_placements, 1), size(in_placements, 2), mnd, nin
        call bad_(st, trim(msg))
      end if
    end if
    if (st == LM_SUCCESS .and. present(out_ranks)) then
      if (size(out_ranks) /= nout) call bad_(st, "lm_local_map: out_ranks needs one entry per output")
    end if
    allocate(cgrad(max(mnd, 1), max(nin, 1)), pgrad(max(nin, 1)))
    pgrad = c_null_ptr
    if (st == LM_SUCCESS .and. present(in_grad_placements)) &
      call local_map_grad_pl_(inputs, in_grad_placements, mnd, cgrad, pgrad, st)
    allocate(cin(max(mnd, 1), max(nin, 1)), cout(max(mnd, 1), max(nout, 1)), pin(max(nin, 1)), &
             pout(max(nout, 1)), pshape(max(nout, 1)), cinputs(max(nin, 1)), coutputs(max(nout, 1)))
    pin = c_null_ptr
    pout = c_null_ptr
    pshape = c_null_ptr
    inp = c_null_ptr
    shp = c_null_ptr
    ! Input placements: Fortran dims of each dist input's rank.
    if (st == LM_SUCCESS .and. present(in_placements)) then
      inp = c_loc(pin)
      do i = 1, nin
        if (in_placements(1, i)%kind == LM_NO_PLACEMENT%kind) cycle
        nd = 0
        if (inputs(i)%kind == LM_ARG_DIST_TENSOR) then
          if (lmc_dist_tensor_ndim(inputs(i)%ptr, nd) /= LM_SUCCESS) nd = 0
        end if
        write(msg, '("lm_local_map: in_placements(:,",i0,")")') i
        call to_c_pl_(in_placements(:, i), int(nd), cin(:, i), st, trim(msg))
        if (st /= LM_SUCCESS) exit
        pin(i) = c_loc(cin(1, i))
      end do
    end if
    ! Output placements and shapes: Fortran dims of each output's rank.
    if (st == LM_SUCCESS .and. present(out_shapes)) then
      if (.not. present(out_ranks)) then
        call bad_(st, "lm_local_map: out_shapes needs out_ranks")
      else if (size(out_shapes, 2) /= nout .or. any(out_ranks > size(out_shapes, 1))) then
        call bad_(st, "lm_local_map: out_shapes must be (at least max(out_ranks)) x nout")
      else
        allocate(cshapes(max(size(out_shapes, 1), 1), max(nout, 1)))
        shp = c_loc(pshape)
        do j = 1, nout
          if (out_shapes(1, j) < 0) cycle
          r = out_ranks(j)
          cshapes(1:r, j) = reversed_(out_shapes(1:r, j))
          pshape(j) = c_loc(cshapes(1, j))
        end do
      end if
    end if
    if (st == LM_SUCCESS) then
      do j = 1, nout
        if (out_placements(1, j)%kind == LM_NO_PLACEMENT%kind) cycle
        r = 0
        if (present(out_ranks)) then
          r = out_ranks(j)
        else if (any(out_placements(:, j)%kind == LM_KIND_SHARD)) then
          write(msg, '("lm_local_map: out_placements(:,",i0,") has lm_shard: give out_ranks")') j
          call bad_(st, trim(msg))
          exit
        end if
        write(msg, '("lm_local_map: out_placements(:,",i0,")")') j
        call to_c_pl_(out_placements(:, j), r, cout(:, j), st, trim(msg))
        if (st /= LM_SUCCESS) exit
        pout(j) = c_loc(cout(1, j))
      end do
    end if
    if (st == LM_SUCCESS) then
      ud = c_null_ptr
      if (present(user_data)) ud = user_data
      fl = 0
      if (present(flags)) fl = int(flags, c_int)
      if (nin > 0) cinputs(1:nin) = inputs
      coutputs = lm_arg_t(LM_ARG_NONE, 0, 0_c_int64_t, 0d0, c_null_ptr)
      if (present(in_grad_placements) .or. present(record)) then
        opt = lm_local_map_options_t(c_sizeof(opt), LM_LOCAL_MAP_OPTIONS_MAGIC, LM_LOCAL_MAP_OPTIONS_VERSION, &
                                     c_null_ptr, c_null_ptr)
        if (present(in_grad_placements)) opt%in_grad_placements = c_loc(pgrad)
        rec = c_null_ptr
        if (present(record)) opt%record = c_loc(rec)
        st = lmc_local_map_ex(c_funloc(fn), ud, int(nin, c_int), cinputs, inp, int(nout, c_int), c_loc(pout), &
                              shp, mp, fl, opt, coutputs)
        if (st == LM_SUCCESS .and. present(record)) then
          call lm_local_map_record_destroy(record)
          record%ptr = rec
        end if
      else
        st = lmc_local_map(c_funloc(fn), ud, int(nin, c_int), cinputs, inp, int(nout, c_int), c_loc(pout), &
                           shp, mp, fl, coutputs)
      end if
      call c_(st)
      if (nout > 0) outputs = coutputs(1:nout)
    end if
    call done_(st, ierr, "lm_local_map")
  end subroutine

  !> in_grad_placements of lm_local_map as the C table: column i in Fortran dims of input i's rank.
  subroutine local_map_grad_pl_(inputs, pl, mnd, cgrad, pgrad, st)
    type(lm_arg_t), intent(in) :: inputs(:)
    type(lm_placement), intent(in) :: pl(:, :)
    integer, intent(in) :: mnd
    type(lm_placement_t), intent(inout), target :: cgrad(:, :)
    type(c_ptr), intent(inout) :: pgrad(:)
    integer(c_int), intent(inout) :: st
    integer :: i
    integer(c_int) :: nd
    character(len=200) :: msg
    if (size(pl, 2) /= size(inputs) .or. (size(inputs) > 0 .and. size(pl, 1) /= mnd)) then
      write(msg, '("lm_local_map: in_grad_placements is ",i0,"x",i0,", not ",i0,"x",i0," (mesh dims x inputs)")') &
        size(pl, 1), size(pl, 2), mnd, size(inputs)
      call bad_(st, trim(msg))
      return
    end if
    do i = 1, size(inputs)
      if (pl(1, i)%kind == LM_NO_PLACEMENT%kind) cycle
      nd = 0
      if (inputs(i)%kind == LM_ARG_DIST_TENSOR) then
        if (lmc_dist_tensor_ndim(inputs(i)%ptr, nd) /= LM_SUCCESS) nd = 0
      end if
      write(msg, '("lm_local_map: in_grad_placements(:,",i0,")")') i
      call to_c_pl_(pl(:, i), int(nd), cgrad(:, i), st, trim(msg))
      if (st /= LM_SUCCESS) return
      pgrad(i) = c_loc(cgrad(1, i))
    end do
  end subroutine

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
    character(len=200) :: msg
    n = 0
    st = lmc_local_map_record_placements(record%ptr, int(which, c_int), int(index - 1, c_int), &
                                         int(size(placements), c_int), cpl, n)
    call c_(st)
    ! Fortran's .and. does not short-circuit: n is only read once the call succeeded.
    if (st == LM_SUCCESS) then
      if (n /= size(placements)) then
        write(msg, '("lm_local_map_record_placements: placements has ",i0," entries for ",i0)') &
          size(placements), n
        call bad_(st, trim(msg))
      else if (.not. present(rank)) then
        if (any(cpl(1:n)%kind == LM_KIND_SHARD)) &
          call bad_(st, "lm_local_map_record_placements: they hold a Shard: give rank (the tensor's rank)")
      end if
    end if
    if (st == LM_SUCCESS) then
      if (present(rank)) then
        call from_c_pl_(cpl(1:n), rank, placements)
      else
        call from_c_pl_(cpl(1:n), 0, placements)
      end if
    end if
    call done_(st, ierr, "lm_local_map_record_placements")
  end subroutine

  !> grad_out = grad (a gradient of input `index`'s local view, normally placed LM_RECORD_IN_GRAD
  !> on the call's mesh) moved to that input's own mesh, with the adjoint of its own placements
  !> (lm_partial(LM_REDUCE_SUM) -> lm_replicate()). Collective, like lm_reshard.
  subroutine lm_local_map_record_input_grad(record, index, grad, grad_out, ierr)
    type(lm_local_map_record), intent(in) :: record
    integer, intent(in) :: index
    type(lm_dist_tensor), intent(in) :: grad
    type(lm_dist_tensor), intent(inout) :: grad_out
    integer, intent(out), optional :: ierr
    type(c_ptr) :: p
    integer(c_int) :: st
    st = lmc_local_map_record_input_grad(p, record%ptr, int(index - 1, c_int), grad%ptr); call c_(st)
    if (st == LM_SUCCESS) call set_(grad_out, p)
    call done_(st, ierr, "lm_local_map_record_input_grad")
  end subroutine

  !> Local (never collective); safe on an empty record.
  subroutine lm_local_map_record_destroy(record)
    type(lm_local_map_record), intent(inout) :: record
    integer(c_int) :: st
    if (c_associated(record%ptr)) st = lmc_local_map_record_destroy(record%ptr)
    record%ptr = c_null_ptr
  end subroutine

  subroutine record_final_(record)
    type(lm_local_map_record), intent(inout) :: record
    call lm_local_map_record_destroy(record)
  end subroutine

  subroutine record_assign_(lhs, rhs)
    type(lm_local_map_record), intent(inout) :: lhs
    type(lm_local_map_record), intent(in) :: rhs
    if (c_associated(rhs%ptr) .or. c_associated(lhs%ptr)) &
      error stop "localmap: a type(lm_local_map_record) cannot be copied"
  end subroutine

  include "localmap_typed.inc"

end module localmap
