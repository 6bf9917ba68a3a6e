// SPDX-License-Identifier: BSD-3-Clause
//! Raw declarations of liblocalmap's C ABI (`include/localmap.h`) and of the DLPack structs it
//! uses (`dlpack/dlpack.h`, version 0.6 layout). No bindgen: the types, structs and constants
//! here are hand-written, and `tests/layout.rs` checks every struct's size and field offsets
//! against the C headers; the function declarations and their array length rules ([`lengths`])
//! are generated from `api/localmap.api` into `src/api.rs` (`make api-generate`).
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
pub const LM_VERSION_MAJOR: c_int = 1;
pub const LM_VERSION_MINOR: c_int = 0;
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
    pub order: i32,
    pub reduce_op: i32,
    pub extents: i32,
    pub block: i32,
    pub source: i32,
    pub reserved: i32,
}
const P0: lm_placement_t =
    lm_placement_t { kind: 0, dim: 0, order: 0, reduce_op: 0, extents: 0, block: 0, source: 0, reserved: 0 };
pub const LM_PLACEMENT_REPLICATE: lm_placement_t = P0;
pub const fn LM_PLACEMENT_SHARD(d: i32) -> lm_placement_t {
    lm_placement_t { kind: LM_SHARD, dim: d, ..P0 }
}
pub const fn LM_PLACEMENT_PARTIAL(o: lm_reduce_op_t) -> lm_placement_t {
    lm_placement_t { kind: LM_PARTIAL, reduce_op: o, ..P0 }
}
pub const fn LM_PLACEMENT_RAGGED(d: i32, id: i32) -> lm_placement_t {
    lm_placement_t { kind: LM_RAGGED, dim: d, extents: id, ..P0 }
}
pub const fn LM_PLACEMENT_BLOCK_CYCLIC(d: i32, b: i32, s: i32) -> lm_placement_t {
    lm_placement_t { kind: LM_BLOCK_CYCLIC, dim: d, block: b, source: s, ..P0 }
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
    /// [`LM_RESHARD_PLAN_INFO_MAGIC`].
    pub magic: u32,
    pub version: u32,
    /// `LM_ROUTE_*` bits.
    pub routes: u32,
    /// 0.
    pub reserved: u32,
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
/// `lm_reshard_plan_info_t::magic` ("LMPI").
pub const LM_RESHARD_PLAN_INFO_MAGIC: u32 = 0x4c4d5049;
pub const LM_RESHARD_PLAN_INFO_VERSION: u32 = 1;
pub const LM_PLAN_INFO_ALL_RANKS: c_int = 1;
pub const LM_ROUTE_MPI: u32 = 1;
pub const LM_ROUTE_NODE_LOCAL: u32 = 2;
pub const LM_ROUTE_BOARD: u32 = 4;
/// `LM_RESHARD_PLAN_INFO_INIT`.
pub const LM_RESHARD_PLAN_INFO_INIT: lm_reshard_plan_info_t = lm_reshard_plan_info_t {
    size: std::mem::size_of::<lm_reshard_plan_info_t>(),
    magic: LM_RESHARD_PLAN_INFO_MAGIC,
    version: LM_RESHARD_PLAN_INFO_VERSION,
    routes: 0,
    reserved: 0,
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

/// `lm_reshard_group_config_t::magic` ("LMGC").
pub const LM_RESHARD_GROUP_CONFIG_MAGIC: u32 = 0x4c4d4743;
pub const LM_RESHARD_GROUP_CONFIG_VERSION: u32 = 1;

/// Options of `lm_reshard_group_create`; initialise with [`LM_RESHARD_GROUP_CONFIG_INIT`].
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct lm_reshard_group_config_t {
    pub size: usize,
    /// [`LM_RESHARD_GROUP_CONFIG_MAGIC`].
    pub magic: u32,
    pub version: u32,
    /// Bound of a bucket in global bytes; 0: the default (64 MiB).
    pub bucket_bytes: usize,
    /// Entries larger than this (global bytes) run alone, through their own plan; 0: the
    /// default (1 MiB).
    pub alone_bytes: usize,
}

/// `LM_RESHARD_GROUP_CONFIG_INIT`.
pub const LM_RESHARD_GROUP_CONFIG_INIT: lm_reshard_group_config_t = lm_reshard_group_config_t {
    size: std::mem::size_of::<lm_reshard_group_config_t>(),
    magic: LM_RESHARD_GROUP_CONFIG_MAGIC,
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

/// `lm_local_map_options_t::magic` ("LMLO").
pub const LM_LOCAL_MAP_OPTIONS_MAGIC: u32 = 0x4c4d4c4f;
pub const LM_LOCAL_MAP_OPTIONS_VERSION: u32 = 1;

/// Options of `lm_local_map_ex`; initialise with [`LM_LOCAL_MAP_OPTIONS_INIT`].
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct lm_local_map_options_t {
    pub size: usize,
    /// [`LM_LOCAL_MAP_OPTIONS_MAGIC`].
    pub magic: u32,
    pub version: u32,
    /// NULL, or one entry per input: the placements of the gradient of a dist input's view.
    pub in_grad_placements: *const *const lm_placement_t,
    /// NULL, or where the call puts a new record.
    pub record: *mut lm_local_map_record_t,
}

/// `LM_LOCAL_MAP_OPTIONS_INIT`.
pub const LM_LOCAL_MAP_OPTIONS_INIT: lm_local_map_options_t = lm_local_map_options_t {
    size: std::mem::size_of::<lm_local_map_options_t>(),
    magic: LM_LOCAL_MAP_OPTIONS_MAGIC,
    version: LM_LOCAL_MAP_OPTIONS_VERSION,
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
// Functions: generated from api/localmap.api (src/api.rs, tools/api_gen_rust.py), with each
// function's array length rules (`lengths`), which the types below describe.
// ------------------------------------------------------------------------------------------------
mod api;
pub use api::*;

/// The length rule of one level of an array argument (`api/localmap.api`: `T[rule]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Len {
    /// `n`: the value of the integer argument so named.
    Arg(&'static str),
    /// `9`: a fixed count.
    Count(usize),
    /// `X.ndim`: the ndim of mesh or tensor argument X.
    Ndim(&'static str),
    /// `X.mesh.ndim`: the ndim of tensor argument X's mesh.
    MeshNdim(&'static str),
    /// `A|B`: A, or B where A's handle is NULL.
    Either(&'static Len, &'static Len),
    /// `*`: each element's own (documented with the function).
    Each,
}

/// What a length rule reads from a call's argument ([`Len::eval`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Of {
    /// The value of an integer argument.
    Value,
    /// The ndim of a mesh or tensor argument.
    Ndim,
    /// The ndim of a tensor argument's mesh.
    MeshNdim,
}

impl Len {
    /// The length this rule asks for, reading the call's arguments through `arg(name, what)`,
    /// which answers None for a NULL handle (or an argument it does not know). None: no length
    /// (`*`, or the handle it needs is NULL).
    pub fn eval(&self, arg: &dyn Fn(&str, Of) -> Option<i64>) -> Option<i64> {
        match *self {
            Len::Arg(a) => arg(a, Of::Value),
            Len::Count(n) => Some(n as i64),
            Len::Ndim(a) => arg(a, Of::Ndim),
            Len::MeshNdim(a) => arg(a, Of::MeshNdim),
            Len::Either(a, b) => a.eval(arg).or_else(|| b.eval(arg)),
            Len::Each => None,
        }
    }
}

impl std::fmt::Display for Len {
    /// The rule as `api/localmap.api` spells it (`dst_mesh.ndim|src.mesh.ndim`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Len::Arg(a) => write!(f, "{a}"),
            Len::Count(n) => write!(f, "{n}"),
            Len::Ndim(a) => write!(f, "{a}.ndim"),
            Len::MeshNdim(a) => write!(f, "{a}.mesh.ndim"),
            Len::Either(a, b) => write!(f, "{a}|{b}"),
            Len::Each => write!(f, "*"),
        }
    }
}

/// One array argument of a C function ([`lengths`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArrayArg {
    /// The argument's name in the header.
    pub name: &'static str,
    /// Its position among the function's arguments (0-based).
    pub index: usize,
    /// Its length rules, outermost first (two for an array of arrays).
    pub dims: &'static [Len],
    /// The argument may be NULL (an array of length 0 always may).
    pub null_ok: bool,
}

/// Checks, before calling C `function`, the length of each of its array arguments against its
/// rule: `arg` reads the call's arguments as for [`Len::eval`]; `len(name, None)` is the length of
/// array argument `name` and `len(name, Some(i))` that of its element `i` (an array of arrays),
/// None where the caller passes none (NULL) or does not check it. The first mismatch comes back
/// as a message naming the function, the argument, both lengths and the rule.
pub fn check_lengths(function: &str, arg: &dyn Fn(&str, Of) -> Option<i64>,
                     len: &dyn Fn(&str, Option<usize>) -> Option<usize>) -> Result<(), String> {
    let bad = |what: String, got: usize, rule: &Len, want: i64| {
        Err(format!("{function}: {what} has {got} entries, but {rule} = {want}"))
    };
    for a in lengths::of(function) {
        let outer = match len(a.name, None) {
            Some(n) => n,
            None => continue,
        };
        if let Some(want) = a.dims[0].eval(arg) {
            if outer as i64 != want {
                return bad(a.name.to_string(), outer, &a.dims[0], want);
            }
        }
        if let (Some(rule), Some(want)) = (a.dims.get(1), a.dims.get(1).and_then(|r| r.eval(arg))) {
            for i in 0..outer {
                match len(a.name, Some(i)) {
                    Some(got) if got as i64 != want => return bad(format!("{}[{i}]", a.name), got, rule, want),
                    _ => {}
                }
            }
        }
    }
    Ok(())
}
