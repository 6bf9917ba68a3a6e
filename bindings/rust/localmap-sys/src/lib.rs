// SPDX-License-Identifier: BSD-3-Clause
//! Raw declarations of liblocalmap's C ABI (`include/localmap.h`) and of the DLPack structs it
//! uses (`dlpack/dlpack.h`, version 0.6 layout). Hand-written, no bindgen; `tests/layout.rs`
//! checks every struct's size and field offsets against the C headers.
//!
//! Everything here is `unsafe` to call and follows the C documentation in the header. Use the
//! `localmap` crate for a safe API.
#![allow(non_camel_case_types, non_upper_case_globals, non_snake_case)]

use std::os::raw::{c_char, c_int, c_uint, c_void};

// ------------------------------------------------------------------------------------------------
// DLPack
// ------------------------------------------------------------------------------------------------
/// `DLDeviceType` (a C enum: an `int`).
pub type DLDeviceType = c_int;
pub const kDLCPU: DLDeviceType = 1;
pub const kDLCUDA: DLDeviceType = 2;
pub const kDLCUDAHost: DLDeviceType = 3;
pub const kDLOpenCL: DLDeviceType = 4;
pub const kDLVulkan: DLDeviceType = 7;
pub const kDLMetal: DLDeviceType = 8;
pub const kDLVPI: DLDeviceType = 9;
pub const kDLROCM: DLDeviceType = 10;
pub const kDLROCMHost: DLDeviceType = 11;
pub const kDLExtDev: DLDeviceType = 12;
pub const kDLCUDAManaged: DLDeviceType = 13;

/// `DLDataTypeCode` values (stored in `DLDataType::code`, a `u8`).
pub const kDLInt: u8 = 0;
pub const kDLUInt: u8 = 1;
pub const kDLFloat: u8 = 2;
pub const kDLOpaqueHandle: u8 = 3;
pub const kDLBfloat: u8 = 4;
pub const kDLComplex: u8 = 5;

#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DLDevice {
    pub device_type: DLDeviceType,
    pub device_id: c_int,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DLDataType {
    pub code: u8,
    pub bits: u8,
    pub lanes: u16,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct DLTensor {
    pub data: *mut c_void,
    pub device: DLDevice,
    pub ndim: c_int,
    pub dtype: DLDataType,
    pub shape: *mut i64,
    pub strides: *mut i64,
    pub byte_offset: u64,
}

#[repr(C)]
#[derive(Debug)]
pub struct DLManagedTensor {
    pub dl_tensor: DLTensor,
    pub manager_ctx: *mut c_void,
    pub deleter: Option<unsafe extern "C" fn(self_: *mut DLManagedTensor)>,
}

// ------------------------------------------------------------------------------------------------
// Versions, status
// ------------------------------------------------------------------------------------------------
pub const LM_VERSION_MAJOR: c_int = 0;
pub const LM_VERSION_MINOR: c_int = 1;
pub const LM_VERSION_PATCH: c_int = 0;
pub const LM_VERSION_CODE: c_int = LM_VERSION_MAJOR * 10000 + LM_VERSION_MINOR * 100 + LM_VERSION_PATCH;

/// `lm_status_t` (a C enum: an `int`).
pub type lm_status_t = c_int;
pub const LM_SUCCESS: lm_status_t = 0;
pub const LM_ERR_INVALID_ARGUMENT: lm_status_t = 1;
pub const LM_ERR_INVALID_USAGE: lm_status_t = 2;
pub const LM_ERR_OUT_OF_MEMORY: lm_status_t = 3;
pub const LM_ERR_NOT_SUPPORTED: lm_status_t = 4;
pub const LM_ERR_MISMATCH: lm_status_t = 5;
pub const LM_ERR_MPI: lm_status_t = 6;
pub const LM_ERR_NCCL: lm_status_t = 7;
pub const LM_ERR_CUDA: lm_status_t = 8;
pub const LM_ERR_REMOTE: lm_status_t = 9;
pub const LM_ERR_INTERNAL: lm_status_t = 10;
pub const LM_ERR_USER: lm_status_t = 11;
pub const LM_ERR_TIMEOUT: lm_status_t = 12;

// ------------------------------------------------------------------------------------------------
// Data types, devices
// ------------------------------------------------------------------------------------------------
pub const LM_DL_BOOL: u8 = 6;
pub const fn lm_dtype(code: u8, bits: u8) -> DLDataType {
    DLDataType { code, bits, lanes: 1 }
}
pub const LM_FLOAT16: DLDataType = lm_dtype(kDLFloat, 16);
pub const LM_BFLOAT16: DLDataType = lm_dtype(kDLBfloat, 16);
pub const LM_FLOAT32: DLDataType = lm_dtype(kDLFloat, 32);
pub const LM_FLOAT64: DLDataType = lm_dtype(kDLFloat, 64);
pub const LM_INT8: DLDataType = lm_dtype(kDLInt, 8);
pub const LM_INT16: DLDataType = lm_dtype(kDLInt, 16);
pub const LM_INT32: DLDataType = lm_dtype(kDLInt, 32);
pub const LM_INT64: DLDataType = lm_dtype(kDLInt, 64);
pub const LM_UINT8: DLDataType = lm_dtype(kDLUInt, 8);
pub const LM_BOOL: DLDataType = lm_dtype(LM_DL_BOOL, 8);
pub const LM_COMPLEX64: DLDataType = lm_dtype(kDLComplex, 64);
pub const LM_COMPLEX128: DLDataType = lm_dtype(kDLComplex, 128);
pub const LM_CPU: DLDevice = DLDevice { device_type: kDLCPU, device_id: 0 };

// ------------------------------------------------------------------------------------------------
// Placements
// ------------------------------------------------------------------------------------------------
pub type lm_placement_kind_t = c_int;
pub const LM_REPLICATE: lm_placement_kind_t = 0;
pub const LM_SHARD: lm_placement_kind_t = 1;
pub const LM_PARTIAL: lm_placement_kind_t = 2;
pub const LM_RAGGED: lm_placement_kind_t = 3;
pub const LM_BLOCK_CYCLIC: lm_placement_kind_t = 4;
/// The extents id of a ragged placement whose extents the local shapes give.
pub const LM_EXTENTS_AGREED: i32 = 0;

pub type lm_reduce_op_t = c_int;
pub const LM_REDUCE_SUM: lm_reduce_op_t = 0;
pub const LM_REDUCE_AVG: lm_reduce_op_t = 1;
pub const LM_REDUCE_MAX: lm_reduce_op_t = 2;
pub const LM_REDUCE_MIN: lm_reduce_op_t = 3;
pub const LM_REDUCE_PROD: lm_reduce_op_t = 4;

#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct lm_placement_t {
    pub kind: i32,
    pub dim: i32,
    pub op: i32,
    pub order: i32,
}
pub const LM_PLACEMENT_REPLICATE: lm_placement_t = lm_placement_t { kind: LM_REPLICATE, dim: 0, op: 0, order: 0 };
pub const fn LM_PLACEMENT_SHARD(d: i32) -> lm_placement_t {
    lm_placement_t { kind: LM_SHARD, dim: d, op: 0, order: 0 }
}
pub const fn LM_PLACEMENT_PARTIAL(o: lm_reduce_op_t) -> lm_placement_t {
    lm_placement_t { kind: LM_PARTIAL, dim: 0, op: o, order: 0 }
}

// ------------------------------------------------------------------------------------------------
// Mesh
// ------------------------------------------------------------------------------------------------
#[repr(C)]
pub struct lm_mesh_s {
    _private: [u8; 0],
}
pub type lm_mesh_t = *mut lm_mesh_s;

pub const LM_MESH_CONFIG_MAGIC: u32 = 0x4c4d4d43;
pub const LM_MESH_CONFIG_VERSION: u32 = 2;

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct lm_mesh_config_t {
    pub size: usize,
    pub magic: u32,
    pub version: u32,
    pub ranks: *const c_int,
    pub nranks: c_int,
    pub dim_names: *const *const c_char,
    /// (version 2) argument checks of collective calls: -1 = LM_CHECK environment, 0, 1, 2.
    pub check_level: c_int,
    /// (version 2) deadline in seconds of blocking waits: < 0 = LM_TIMEOUT environment, 0 = none.
    pub timeout: f64,
}

/// What executing a plan moves (`lm_reshard_plan_info`); initialise with
/// [`LM_RESHARD_PLAN_INFO_INIT`].
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct lm_reshard_plan_info_t {
    pub size: usize,
    pub version: u32,
    /// `LM_ROUTE_*` bits.
    pub routes: u32,
    pub steps: i64,
    pub peers: i64,
    pub flows_sent: i64,
    pub flows_received: i64,
    pub bytes_sent: i64,
    pub bytes_received: i64,
    pub bytes_copied: i64,
    pub bytes_reduced: i64,
    pub bytes_node_local: i64,
    pub work_bytes: i64,
    pub staging_bytes_max: i64,
}
pub const LM_RESHARD_PLAN_INFO_VERSION: u32 = 1;
pub const LM_PLAN_INFO_ALL_RANKS: c_int = 1;
pub const LM_ROUTE_MPI: u32 = 1;
pub const LM_ROUTE_NODE_LOCAL: u32 = 2;
pub const LM_ROUTE_BOARD: u32 = 4;
/// `LM_RESHARD_PLAN_INFO_INIT`.
pub const LM_RESHARD_PLAN_INFO_INIT: lm_reshard_plan_info_t = lm_reshard_plan_info_t {
    size: std::mem::size_of::<lm_reshard_plan_info_t>(),
    version: LM_RESHARD_PLAN_INFO_VERSION,
    routes: 0,
    steps: 0,
    peers: 0,
    flows_sent: 0,
    flows_received: 0,
    bytes_sent: 0,
    bytes_received: 0,
    bytes_copied: 0,
    bytes_reduced: 0,
    bytes_node_local: 0,
    work_bytes: 0,
    staging_bytes_max: 0,
};

/// `LM_MESH_CONFIG_INIT`.
pub const LM_MESH_CONFIG_INIT: lm_mesh_config_t = lm_mesh_config_t {
    size: std::mem::size_of::<lm_mesh_config_t>(),
    magic: LM_MESH_CONFIG_MAGIC,
    version: LM_MESH_CONFIG_VERSION,
    ranks: std::ptr::null(),
    nranks: 0,
    dim_names: std::ptr::null(),
    check_level: -1,
    timeout: -1.0,
};

/// Device allocator callbacks of `lm_device_config_t`.
pub type lm_device_alloc_fn_t =
    Option<unsafe extern "C" fn(ctx: *mut c_void, bytes: usize, device_id: c_int, stream: *mut c_void) -> *mut c_void>;
pub type lm_device_free_fn_t =
    Option<unsafe extern "C" fn(ctx: *mut c_void, ptr: *mut c_void, bytes: usize, device_id: c_int, stream: *mut c_void)>;

pub const LM_DEVICE_CONFIG_MAGIC: u32 = 0x4c4d4443;
pub const LM_DEVICE_CONFIG_VERSION: u32 = 1;

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct lm_device_config_t {
    pub size: usize,
    pub magic: u32,
    pub version: u32,
    pub stream: *mut c_void,
    pub alloc: lm_device_alloc_fn_t,
    pub free: lm_device_free_fn_t,
    pub alloc_ctx: *mut c_void,
}

/// `LM_DEVICE_CONFIG_INIT`.
pub const LM_DEVICE_CONFIG_INIT: lm_device_config_t = lm_device_config_t {
    size: std::mem::size_of::<lm_device_config_t>(),
    magic: LM_DEVICE_CONFIG_MAGIC,
    version: LM_DEVICE_CONFIG_VERSION,
    stream: std::ptr::null_mut(),
    alloc: None,
    free: None,
    alloc_ctx: std::ptr::null_mut(),
};

/// `lm_transport_t`.
pub type lm_transport_t = c_int;
pub const LM_TRANSPORT_UNDECIDED: lm_transport_t = 0;
pub const LM_TRANSPORT_MPI: lm_transport_t = 1;
pub const LM_TRANSPORT_NCCL: lm_transport_t = 2;
pub const LM_TRANSPORT_MPI_STAGED: lm_transport_t = 3;

// ------------------------------------------------------------------------------------------------
// Dist tensors, plans, requests
// ------------------------------------------------------------------------------------------------
#[repr(C)]
pub struct lm_dist_tensor_s {
    _private: [u8; 0],
}
pub type lm_dist_tensor_t = *mut lm_dist_tensor_s;
#[repr(C)]
pub struct lm_reshard_plan_s {
    _private: [u8; 0],
}
pub type lm_reshard_plan_t = *mut lm_reshard_plan_s;
#[repr(C)]
pub struct lm_request_s {
    _private: [u8; 0],
}
pub type lm_request_t = *mut lm_request_s;

#[repr(C)]
pub struct lm_reshard_group_s {
    _private: [u8; 0],
}
/// A grouped reshard plan: N reshards between one pair of meshes.
pub type lm_reshard_group_t = *mut lm_reshard_group_s;

/// One entry of a group: what `lm_reshard_plan_create` takes, for one tensor.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct lm_reshard_entry_t {
    pub ndim: c_int,
    pub global_shape: *const i64,
    pub dtype: DLDataType,
    pub src_placements: *const lm_placement_t,
    pub dst_placements: *const lm_placement_t,
}

pub const LM_RESHARD_GROUP_CONFIG_VERSION: c_int = 1;

/// Options of `lm_reshard_group_create`; initialise with [`LM_RESHARD_GROUP_CONFIG_INIT`].
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct lm_reshard_group_config_t {
    pub size: usize,
    pub version: c_int,
    /// Bound of a bucket in global bytes; 0: the default (64 MiB).
    pub bucket_bytes: usize,
    /// Entries larger than this (global bytes) run alone, through their own plan; 0: the
    /// default (1 MiB).
    pub alone_bytes: usize,
}

/// `LM_RESHARD_GROUP_CONFIG_INIT`.
pub const LM_RESHARD_GROUP_CONFIG_INIT: lm_reshard_group_config_t = lm_reshard_group_config_t {
    size: std::mem::size_of::<lm_reshard_group_config_t>(),
    version: LM_RESHARD_GROUP_CONFIG_VERSION,
    bucket_bytes: 0,
    alone_bytes: 0,
};

pub type lm_shape_mode_t = c_int;
pub const LM_SHAPE_GIVEN: lm_shape_mode_t = 0;
pub const LM_SHAPE_EVEN: lm_shape_mode_t = 1;
pub const LM_SHAPE_ALLGATHER: lm_shape_mode_t = 2;

pub const LM_FROM_LOCAL_COPY: c_uint = 0;
pub const LM_FROM_LOCAL_BORROW: c_uint = 1;
/// Entries of a ScaLAPACK array descriptor.
pub const LM_SCALAPACK_DLEN: usize = 9;

// ------------------------------------------------------------------------------------------------
// local_map
// ------------------------------------------------------------------------------------------------
pub type lm_arg_kind_t = c_int;
pub const LM_ARG_NONE: lm_arg_kind_t = 0;
pub const LM_ARG_DIST_TENSOR: lm_arg_kind_t = 1;
pub const LM_ARG_TENSOR: lm_arg_kind_t = 2;
pub const LM_ARG_INT64: lm_arg_kind_t = 3;
pub const LM_ARG_DOUBLE: lm_arg_kind_t = 4;
pub const LM_ARG_POINTER: lm_arg_kind_t = 5;
pub const LM_ARG_MANAGED_TENSOR: lm_arg_kind_t = 6;

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct lm_arg_t {
    pub kind: i32,
    pub reserved: i32,
    pub i64: i64,
    pub f64: f64,
    pub ptr: *mut c_void,
}
impl Default for lm_arg_t {
    fn default() -> Self {
        lm_arg_t { kind: LM_ARG_NONE, reserved: 0, i64: 0, f64: 0.0, ptr: std::ptr::null_mut() }
    }
}

pub type lm_local_fn_t = Option<
    unsafe extern "C" fn(
        user_data: *mut c_void,
        mesh: lm_mesh_t,
        nin: c_int,
        inputs: *const lm_arg_t,
        nout: c_int,
        outputs: *mut lm_arg_t,
    ) -> lm_status_t,
>;

pub const LM_LOCAL_MAP_RESHARD_INPUTS: c_uint = 1;
pub const LM_LOCAL_MAP_NO_AGREE: c_uint = 2;
pub const LM_LOCAL_MAP_SHAPES_EVEN: c_uint = 4;

#[repr(C)]
pub struct lm_local_map_record_s {
    _private: [u8; 0],
}
/// The record of one `lm_local_map_ex` call: what its backward pass needs.
pub type lm_local_map_record_t = *mut lm_local_map_record_s;

pub const LM_LOCAL_MAP_OPTIONS_VERSION: u32 = 1;

/// Options of `lm_local_map_ex`; initialise with [`LM_LOCAL_MAP_OPTIONS_INIT`].
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct lm_local_map_options_t {
    pub size: usize,
    pub version: u32,
    pub reserved: u32,
    /// NULL, or one entry per input: the placements of the gradient of a dist input's view.
    pub in_grad_placements: *const *const lm_placement_t,
    /// NULL, or where the call puts a new record.
    pub record: *mut lm_local_map_record_t,
}

/// `LM_LOCAL_MAP_OPTIONS_INIT`.
pub const LM_LOCAL_MAP_OPTIONS_INIT: lm_local_map_options_t = lm_local_map_options_t {
    size: std::mem::size_of::<lm_local_map_options_t>(),
    version: LM_LOCAL_MAP_OPTIONS_VERSION,
    reserved: 0,
    in_grad_placements: std::ptr::null(),
    record: std::ptr::null_mut(),
};

/// `lm_record_which_t`: which placements `lm_local_map_record_placements` reports.
pub const LM_RECORD_INPUT: c_int = 0;
pub const LM_RECORD_IN: c_int = 1;
pub const LM_RECORD_IN_GRAD: c_int = 2;
pub const LM_RECORD_OUT: c_int = 3;
pub const LM_RECORD_OUT_GRAD: c_int = 4;

// ------------------------------------------------------------------------------------------------
// Functions
// ------------------------------------------------------------------------------------------------
extern "C" {
    pub fn lm_get_version() -> c_int;
    pub fn lm_status_string(status: lm_status_t) -> *const c_char;
    pub fn lm_last_error_message() -> *const c_char;
    pub fn lm_set_error_message(message: *const c_char);

    pub fn lm_init(argc: *mut c_int, argv: *mut *mut *mut c_char) -> lm_status_t;
    pub fn lm_finalize() -> lm_status_t;
    pub fn lm_comm_world(comm_f: *mut c_int) -> lm_status_t;
    pub fn lm_world_rank(rank: *mut c_int, size: *mut c_int) -> lm_status_t;

    pub fn lm_device_supported(device_type: DLDeviceType, supported: *mut c_int) -> lm_status_t;
    pub fn lm_tensor_alloc(out: *mut *mut DLManagedTensor, ndim: c_int, shape: *const i64, dtype: DLDataType,
                           device: DLDevice) -> lm_status_t;
    pub fn lm_pool_stats(in_use: *mut i64, peak: *mut i64, reset_peak: c_int) -> lm_status_t;

    pub fn lm_placements_adjoint(placements: *const lm_placement_t, n: c_int, out: *mut lm_placement_t) -> lm_status_t;
    pub fn lm_placements_format(placements: *const lm_placement_t, n: c_int, buf: *mut c_char,
                                size: usize) -> lm_status_t;
    pub fn lm_chunk(n: i64, parts: i64, index: i64, offset: *mut i64, length: *mut i64) -> lm_status_t;
    pub fn lm_padded_extents(view: *const DLTensor, extents: *mut i64, n: c_int) -> lm_status_t;
    pub fn lm_extents_create(extents: *const i64, count: i64, id: *mut i32) -> lm_status_t;
    pub fn lm_extents_get(id: i32, extents: *mut i64, capacity: i64, count: *mut i64) -> lm_status_t;
    pub fn lm_extents_destroy(id: i32) -> lm_status_t;

    pub fn lm_mesh_create(mesh: *mut lm_mesh_t, parent_comm: c_int, ndim: c_int, shape: *const i64,
                          config: *const lm_mesh_config_t) -> lm_status_t;
    pub fn lm_mesh_create_grid(mesh: *mut lm_mesh_t, parent_comm: c_int, myrow: c_int, mycol: c_int,
                               config: *const lm_mesh_config_t) -> lm_status_t;
    pub fn lm_mesh_destroy(mesh: *mut lm_mesh_t) -> lm_status_t;
    pub fn lm_mesh_ndim(mesh: lm_mesh_t, ndim: *mut c_int) -> lm_status_t;
    pub fn lm_mesh_shape(mesh: lm_mesh_t, shape: *mut i64, n: c_int) -> lm_status_t;
    pub fn lm_mesh_size(mesh: lm_mesh_t, size: *mut c_int) -> lm_status_t;
    pub fn lm_mesh_is_member(mesh: lm_mesh_t, is_member: *mut c_int) -> lm_status_t;
    pub fn lm_mesh_coord(mesh: lm_mesh_t, coord: *mut i64, n: c_int) -> lm_status_t;
    pub fn lm_mesh_rank(mesh: lm_mesh_t, mesh_rank: *mut c_int) -> lm_status_t;
    pub fn lm_mesh_rank_at(mesh: lm_mesh_t, coord: *const i64, n: c_int, parent_rank: *mut c_int)
        -> lm_status_t;
    pub fn lm_mesh_dim_index(mesh: lm_mesh_t, name: *const c_char, dim: *mut c_int) -> lm_status_t;
    pub fn lm_mesh_dim_name(mesh: lm_mesh_t, dim: c_int, buf: *mut c_char, size: usize) -> lm_status_t;
    pub fn lm_mesh_dim_comm(mesh: lm_mesh_t, dim: c_int, comm_f: *mut c_int) -> lm_status_t;
    pub fn lm_mesh_comm(mesh: lm_mesh_t, comm_f: *mut c_int) -> lm_status_t;
    pub fn lm_mesh_set_device_config(mesh: lm_mesh_t, config: *const lm_device_config_t) -> lm_status_t;
    pub fn lm_mesh_device_config(mesh: lm_mesh_t, config: *mut lm_device_config_t) -> lm_status_t;
    pub fn lm_mesh_transport(mesh: lm_mesh_t, device_type: DLDeviceType, transport: *mut c_int) -> lm_status_t;

    pub fn lm_dist_tensor_zeros(out: *mut lm_dist_tensor_t, mesh: lm_mesh_t, ndim: c_int,
                                global_shape: *const i64, dtype: DLDataType, device: DLDevice,
                                placements: *const lm_placement_t) -> lm_status_t;
    pub fn lm_dist_tensor_from_local(out: *mut lm_dist_tensor_t, mesh: lm_mesh_t, local: *const DLTensor,
                                     placements: *const lm_placement_t, shape_mode: lm_shape_mode_t,
                                     global_shape: *const i64, flags: c_uint) -> lm_status_t;
    pub fn lm_dist_tensor_from_managed(out: *mut lm_dist_tensor_t, mesh: lm_mesh_t,
                                       local: *mut DLManagedTensor, placements: *const lm_placement_t,
                                       shape_mode: lm_shape_mode_t, global_shape: *const i64)
        -> lm_status_t;
    pub fn lm_dist_tensor_from_global(out: *mut lm_dist_tensor_t, mesh: lm_mesh_t, global: *const DLTensor,
                                      placements: *const lm_placement_t, root: c_int) -> lm_status_t;
    pub fn lm_dist_tensor_gather(tensor: lm_dist_tensor_t, root: c_int, dst: *mut DLTensor) -> lm_status_t;
    pub fn lm_dist_tensor_from_scalapack(out: *mut lm_dist_tensor_t, mesh: lm_mesh_t, desc: *const c_int,
                                         data: *mut c_void, dtype: DLDataType, device: DLDevice,
                                         flags: c_uint) -> lm_status_t;
    pub fn lm_dist_tensor_scalapack_desc(tensor: lm_dist_tensor_t, ctxt: c_int, desc: *mut c_int) -> lm_status_t;
    pub fn lm_dist_tensor_mesh(tensor: lm_dist_tensor_t, mesh: *mut lm_mesh_t) -> lm_status_t;
    pub fn lm_dist_tensor_ndim(tensor: lm_dist_tensor_t, ndim: *mut c_int) -> lm_status_t;
    pub fn lm_dist_tensor_dtype(tensor: lm_dist_tensor_t, dtype: *mut DLDataType) -> lm_status_t;
    pub fn lm_dist_tensor_device(tensor: lm_dist_tensor_t, device: *mut DLDevice) -> lm_status_t;
    pub fn lm_dist_tensor_placements(tensor: lm_dist_tensor_t, placements: *mut lm_placement_t, n: c_int)
        -> lm_status_t;
    pub fn lm_dist_tensor_global_shape(tensor: lm_dist_tensor_t, shape: *mut i64, n: c_int) -> lm_status_t;
    pub fn lm_dist_tensor_local_shape(tensor: lm_dist_tensor_t, shape: *mut i64, n: c_int) -> lm_status_t;
    pub fn lm_dist_tensor_local_offset(tensor: lm_dist_tensor_t, offset: *mut i64, n: c_int) -> lm_status_t;
    pub fn lm_dist_tensor_local(tensor: lm_dist_tensor_t, view: *mut DLTensor) -> lm_status_t;
    pub fn lm_dist_tensor_export(tensor: lm_dist_tensor_t, managed: *mut *mut DLManagedTensor) -> lm_status_t;
    pub fn lm_dist_tensor_retain(tensor: lm_dist_tensor_t) -> lm_status_t;
    pub fn lm_dist_tensor_destroy(tensor: *mut lm_dist_tensor_t) -> lm_status_t;

    pub fn lm_dist_tensor_reshard(out: *mut lm_dist_tensor_t, src: lm_dist_tensor_t, dst_mesh: lm_mesh_t,
                                  placements: *const lm_placement_t) -> lm_status_t;
    pub fn lm_dist_tensor_transpose(out: *mut lm_dist_tensor_t, src: lm_dist_tensor_t, perm: *const c_int,
                                    dst_mesh: lm_mesh_t, placements: *const lm_placement_t) -> lm_status_t;
    pub fn lm_dist_tensor_transpose_into(dst: lm_dist_tensor_t, src: lm_dist_tensor_t,
                                         perm: *const c_int) -> lm_status_t;
    pub fn lm_reshard_plan_create(plan: *mut lm_reshard_plan_t, src_mesh: lm_mesh_t,
                                  src_placements: *const lm_placement_t, dst_mesh: lm_mesh_t,
                                  dst_placements: *const lm_placement_t, ndim: c_int,
                                  global_shape: *const i64, dtype: DLDataType) -> lm_status_t;
    pub fn lm_reshard_plan_alloc_target(plan: lm_reshard_plan_t, device: DLDevice,
                                        out: *mut lm_dist_tensor_t) -> lm_status_t;
    pub fn lm_reshard_plan_execute(plan: lm_reshard_plan_t, src: lm_dist_tensor_t, dst: lm_dist_tensor_t)
        -> lm_status_t;
    pub fn lm_reshard_plan_start(plan: lm_reshard_plan_t, src: lm_dist_tensor_t, dst: lm_dist_tensor_t,
                                 request: *mut lm_request_t) -> lm_status_t;
    pub fn lm_request_test(request: *mut lm_request_t, done: *mut c_int) -> lm_status_t;
    pub fn lm_request_wait(request: *mut lm_request_t) -> lm_status_t;
    pub fn lm_reshard_plan_bytes_sent(plan: lm_reshard_plan_t, bytes: *mut i64) -> lm_status_t;
    pub fn lm_reshard_plan_describe(plan: lm_reshard_plan_t, buf: *mut c_char, size: usize) -> lm_status_t;
    pub fn lm_reshard_plan_adjoint(plan: lm_reshard_plan_t, adjoint: *mut lm_reshard_plan_t) -> lm_status_t;
    pub fn lm_reshard_plan_info(plan: lm_reshard_plan_t, flags: c_int, info: *mut lm_reshard_plan_info_t) -> lm_status_t;
    pub fn lm_reshard_estimate(src_mesh: lm_mesh_t, src_placements: *const lm_placement_t, dst_mesh: lm_mesh_t,
                               dst_placements: *const lm_placement_t, ndim: c_int, global_shape: *const i64,
                               dtype: DLDataType, flags: c_int, info: *mut lm_reshard_plan_info_t) -> lm_status_t;
    pub fn lm_reshard_plan_destroy(plan: *mut lm_reshard_plan_t) -> lm_status_t;

    pub fn lm_reshard_group_create(group: *mut lm_reshard_group_t, src_mesh: lm_mesh_t, dst_mesh: lm_mesh_t,
                                   n: c_int, entries: *const lm_reshard_entry_t,
                                   config: *const lm_reshard_group_config_t) -> lm_status_t;
    pub fn lm_reshard_group_alloc_targets(group: lm_reshard_group_t, device: DLDevice, n: c_int,
                                          out: *mut lm_dist_tensor_t) -> lm_status_t;
    pub fn lm_reshard_group_execute(group: lm_reshard_group_t, n: c_int, src: *const lm_dist_tensor_t,
                                    dst: *const lm_dist_tensor_t) -> lm_status_t;
    pub fn lm_reshard_group_start(group: lm_reshard_group_t, n: c_int, src: *const lm_dist_tensor_t,
                                  dst: *const lm_dist_tensor_t, request: *mut lm_request_t) -> lm_status_t;
    pub fn lm_reshard_group_size(group: lm_reshard_group_t, n: *mut c_int, buckets: *mut c_int) -> lm_status_t;
    pub fn lm_reshard_group_destroy(group: *mut lm_reshard_group_t) -> lm_status_t;
    pub fn lm_dist_tensor_reshard_many(n: c_int, src: *const lm_dist_tensor_t, dst_mesh: lm_mesh_t,
                                       dst_placements: *const *const lm_placement_t,
                                       out: *mut lm_dist_tensor_t) -> lm_status_t;

    pub fn lm_local_map(fn_: lm_local_fn_t, user_data: *mut c_void, nin: c_int, inputs: *const lm_arg_t,
                        in_placements: *const *const lm_placement_t, nout: c_int,
                        out_placements: *const *const lm_placement_t, out_shapes: *const *const i64,
                        mesh: lm_mesh_t, flags: c_uint, outputs: *mut lm_arg_t) -> lm_status_t;
    pub fn lm_local_map_ex(fn_: lm_local_fn_t, user_data: *mut c_void, nin: c_int, inputs: *const lm_arg_t,
                           in_placements: *const *const lm_placement_t, nout: c_int,
                           out_placements: *const *const lm_placement_t, out_shapes: *const *const i64,
                           mesh: lm_mesh_t, flags: c_uint, options: *const lm_local_map_options_t,
                           outputs: *mut lm_arg_t) -> lm_status_t;
    pub fn lm_local_map_record_placements(record: lm_local_map_record_t, which: c_int, index: c_int,
                                          capacity: c_int, placements: *mut lm_placement_t,
                                          n: *mut c_int) -> lm_status_t;
    pub fn lm_local_map_record_input_grad(record: lm_local_map_record_t, index: c_int,
                                          grad: lm_dist_tensor_t, out: *mut lm_dist_tensor_t) -> lm_status_t;
    pub fn lm_local_map_record_destroy(record: *mut lm_local_map_record_t) -> lm_status_t;
}
