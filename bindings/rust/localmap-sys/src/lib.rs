// SPDX-License-Identifier: BSD-3-Clause
//! Raw declarations of liblocalmap's C ABI (`include/localmap.h`) and of the DLPack structs it
//! uses (`dlpack/dlpack.h`, version 0.6 layout). No bindgen. This file, written by hand, holds
//! DLPack's structs and the types of the length rules; `src/types.rs` (localmap's constants,
//! enums and structs, made from `include/localmap.h`) and `src/api.rs` (its function declarations
//! and their array length rules, [`lengths`], made from `api/localmap.api`) come from
//! `make api-generate`. `tests/layout.rs` checks every struct's size and field offsets and every
//! constant against the C headers.
//!
//! Everything here is `unsafe` to call and follows the C documentation in the header. Use the
//! `localmap` crate for a safe API.
#![allow(non_camel_case_types, non_upper_case_globals, non_snake_case)]

use std::os::raw::{c_int, c_void};

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

/// `LM_DTYPE`: a DLDataType of `code` (`kDLFloat`, ...) and `bits`, one lane.
pub const fn lm_dtype(code: u8, bits: u8) -> DLDataType {
    DLDataType { code, bits, lanes: 1 }
}
/// The host device (`kDLCPU`, id 0).
pub const LM_CPU: DLDevice = DLDevice { device_type: kDLCPU, device_id: 0 };

// ------------------------------------------------------------------------------------------------
// Constants, enums, structs, handles, callbacks: generated from include/localmap.h (src/types.rs,
// tools/api_gen_rust_types.py).
// ------------------------------------------------------------------------------------------------
mod types;
pub use types::*;

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

/// The first array argument of a call whose length breaks its rule ([`length_mismatch`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mismatch {
    /// The argument.
    pub arg: &'static ArrayArg,
    /// The element of an array of arrays whose length breaks the inner rule (None: the array).
    pub element: Option<usize>,
    /// Its length.
    pub got: usize,
    /// The rule it breaks, and the length the rule asks for.
    pub rule: &'static Len,
    pub want: i64,
}

/// The first array argument of a call of C `function` whose length breaks its rule, if any:
/// `arg` reads the call's arguments as for [`Len::eval`]; `len(name, None)` is the length of
/// array argument `name` and `len(name, Some(i))` that of its element `i` (an array of arrays),
/// None where the caller passes none (NULL) or does not check it.
pub fn length_mismatch(function: &str, arg: &dyn Fn(&str, Of) -> Option<i64>,
                       len: &dyn Fn(&str, Option<usize>) -> Option<usize>) -> Option<Mismatch> {
    for a in lengths::of(function) {
        let outer = match len(a.name, None) {
            Some(n) => n,
            None => continue,
        };
        let mismatch = |element, got: usize, rule: &'static Len| match rule.eval(arg) {
            Some(want) if got as i64 != want => Some(Mismatch { arg: a, element, got, rule, want }),
            _ => None,
        };
        if let Some(m) = mismatch(None, outer, &a.dims[0]) {
            return Some(m);
        }
        if let Some(rule) = a.dims.get(1) {
            let element = |i| len(a.name, Some(i)).and_then(|got| mismatch(Some(i), got, rule));
            if let Some(m) = (0..outer).find_map(element) {
                return Some(m);
            }
        }
    }
    None
}

/// Checks, before calling C `function`, the length of each of its array arguments against its
/// rule ([`length_mismatch`]). The first mismatch comes back as a message naming the function,
/// the argument, both lengths and the rule.
pub fn check_lengths(function: &str, arg: &dyn Fn(&str, Of) -> Option<i64>,
                     len: &dyn Fn(&str, Option<usize>) -> Option<usize>) -> Result<(), String> {
    match length_mismatch(function, arg, len) {
        Some(m) => {
            let at = m.element.map_or(String::new(), |i| format!("[{i}]"));
            Err(format!("{function}: {}{at} has {} entries, but {} = {}", m.arg.name, m.got, m.rule, m.want))
        }
        None => Ok(()),
    }
}
