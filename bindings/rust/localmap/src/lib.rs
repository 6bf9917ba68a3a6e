// SPDX-License-Identifier: BSD-3-Clause
//! Safe Rust API of localmap: distributed tensors over an N-D MPI process mesh, resharding, and
//! `local_map`, over the C ABI in `include/localmap.h` (raw declarations: [`sys`]).
//!
//! - Every call returns [`Result`]; an [`Error`] carries the [`Status`] and the library's message.
//! - Handles ([`Mesh`], [`DistTensor`], [`ReshardPlan`], [`ReshardGroup`], [`Request`]) free
//!   themselves on `Drop` (local, never collective). [`DistTensor`] clones share one tensor by
//!   reference count.
//! - Reshards: [`DistTensor::reshard`] one at a time; a [`ReshardPlan`] is created once for one
//!   layout pair and executed many times, blocking or through [`start`](ReshardPlan::start) and
//!   a [`Request`]. A [`ReshardGroup`] does the same for N tensors at once
//!   (`ReshardGroup::new(&src_mesh, None, &[ReshardEntry::new(&shape, DType::F64, &from, &to), ...])`,
//!   then `alloc_targets`, `execute(&srcs, &mut dsts)` or `start`): each step sends one message
//!   per peer for all entries (buckets of at most `ReshardGroupOptions::bucket_bytes`; entries
//!   above `alone_bytes` run alone), with the same bits as one plan per entry. [`reshard_many`]
//!   is the one-shot form.
//! - Communicators cross as the `MPI_Fint` integer of the C ABI ([`Comm`]): [`comm_world`], or
//!   `MPI_Comm_c2f(comm)` from any MPI binding. No MPI crate is needed.
//! - Local shards are slices (`&[T]`, compact row-major), for every `T: Element`.
//! - [`LocalMap`] runs a closure on the local shards through an `extern "C"` trampoline that
//!   catches panics: a panic or an `Err` becomes a failed status on that rank, with its text as
//!   the message, and every rank of the mesh fails alike (never an abort across C frames).
//!
//! ```no_run
//! use localmap::{DistTensor, Mesh, Placement};
//! localmap::init()?;
//! let (rank, size) = localmap::world_rank()?;
//! let mesh = Mesh::new(localmap::comm_world()?, &[size as i64])?;
//! let full: Vec<f64> = (0..10).map(f64::from).collect();
//! let x = DistTensor::from_global(&mesh, Some(&full[..]), &[10], &[Placement::Shard(0)], -1)?;
//! println!("rank {rank} holds {:?} at {:?}", x.local::<f64>()?, x.local_offset()?);
//! assert_eq!(x.gather_all::<f64>()?, full);
//! drop(x);
//! drop(mesh);
//! localmap::finalize()?;
//! # Ok::<(), localmap::Error>(())
//! ```
pub use localmap_sys as sys;

use std::any::Any;
use std::borrow::{Borrow, BorrowMut};
use std::ffi::{c_void, CStr, CString};
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::ops::Deref;
use std::os::raw::{c_char, c_int};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;

// ================================================================================================
// Status and errors
// ================================================================================================

/// The status codes of `lm_status_t`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    Success,
    InvalidArgument,
    InvalidUsage,
    OutOfMemory,
    NotSupported,
    Mismatch,
    Mpi,
    Nccl,
    Cuda,
    Remote,
    Internal,
    User,
    /// A blocking wait of a collective passed the mesh's deadline (`LM_ERR_TIMEOUT`).
    Timeout,
    /// A code this binding does not know yet (the C enum is append-only).
    Other(i32),
}

impl Status {
    pub fn from_raw(code: sys::lm_status_t) -> Status {
        match code {
            sys::LM_SUCCESS => Status::Success,
            sys::LM_ERR_INVALID_ARGUMENT => Status::InvalidArgument,
            sys::LM_ERR_INVALID_USAGE => Status::InvalidUsage,
            sys::LM_ERR_OUT_OF_MEMORY => Status::OutOfMemory,
            sys::LM_ERR_NOT_SUPPORTED => Status::NotSupported,
            sys::LM_ERR_MISMATCH => Status::Mismatch,
            sys::LM_ERR_MPI => Status::Mpi,
            sys::LM_ERR_NCCL => Status::Nccl,
            sys::LM_ERR_CUDA => Status::Cuda,
            sys::LM_ERR_REMOTE => Status::Remote,
            sys::LM_ERR_INTERNAL => Status::Internal,
            sys::LM_ERR_USER => Status::User,
            sys::LM_ERR_TIMEOUT => Status::Timeout,
            c => Status::Other(c),
        }
    }
    pub fn raw(self) -> sys::lm_status_t {
        match self {
            Status::Success => sys::LM_SUCCESS,
            Status::InvalidArgument => sys::LM_ERR_INVALID_ARGUMENT,
            Status::InvalidUsage => sys::LM_ERR_INVALID_USAGE,
            Status::OutOfMemory => sys::LM_ERR_OUT_OF_MEMORY,
            Status::NotSupported => sys::LM_ERR_NOT_SUPPORTED,
            Status::Mismatch => sys::LM_ERR_MISMATCH,
            Status::Mpi => sys::LM_ERR_MPI,
            Status::Nccl => sys::LM_ERR_NCCL,
            Status::Cuda => sys::LM_ERR_CUDA,
            Status::Remote => sys::LM_ERR_REMOTE,
            Status::Internal => sys::LM_ERR_INTERNAL,
            Status::User => sys::LM_ERR_USER,
            Status::Timeout => sys::LM_ERR_TIMEOUT,
            Status::Other(c) => c,
        }
    }
    /// `lm_status_string`: e.g. "LM_ERR_INVALID_ARGUMENT: invalid argument".
    pub fn as_str(self) -> &'static str {
        // SAFETY: the library returns a static NUL-terminated string, never NULL.
        unsafe { CStr::from_ptr(sys::lm_status_string(self.raw())) }.to_str().unwrap_or("?")
    }
}

/// A failed call: its status and the library's message (`lm_last_error_message`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub status: Status,
    pub message: String,
}

impl Error {
    pub fn new(status: Status, message: impl Into<String>) -> Error {
        Error { status, message: message.into() }
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.status.as_str(), self.message)
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

fn check(code: sys::lm_status_t) -> Result<()> {
    if code == sys::LM_SUCCESS {
        Ok(())
    } else {
        Err(Error { status: Status::from_raw(code), message: last_error_message() })
    }
}

fn arg_error<T>(message: String) -> Result<T> {
    Err(Error { status: Status::InvalidArgument, message })
}

fn to_int(n: usize, what: &str) -> Result<c_int> {
    c_int::try_from(n).or_else(|_| arg_error(format!("{what}: {n} entries is too many")))
}

/// `lm_last_error_message`: the message of the last failed call on this thread ("" if none).
pub fn last_error_message() -> String {
    // SAFETY: never NULL, valid until the next localmap call on this thread; copied at once.
    unsafe { CStr::from_ptr(sys::lm_last_error_message()) }.to_string_lossy().into_owned()
}

/// `lm_set_error_message`: explains a failure of a [`LocalMap`] function (the closure's `Err`
/// text is passed this way already). Interior NUL bytes are replaced.
pub fn set_error_message(message: &str) {
    let c = CString::new(message.replace('\0', "\\0")).unwrap_or_default();
    // SAFETY: a valid C string; the library copies it.
    unsafe { sys::lm_set_error_message(c.as_ptr()) }
}

/// `lm_get_version`: the loaded library's version as `LM_VERSION_CODE` (major*10000+minor*100+patch).
pub fn version() -> i32 {
    unsafe { sys::lm_get_version() }
}

// ================================================================================================
// Bootstrap
// ================================================================================================

/// An MPI communicator as a Fortran handle (`MPI_Fint`), what the C ABI takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Comm(pub i32);

/// `lm_init`: initialises MPI unless something else did. Works without mpirun (a singleton).
pub fn init() -> Result<()> {
    check(unsafe { sys::lm_init(ptr::null_mut(), ptr::null_mut()) })
}

/// `lm_finalize`: finalises MPI if [`init`] initialised it. Handles dropped later stay safe.
pub fn finalize() -> Result<()> {
    check(unsafe { sys::lm_finalize() })
}

/// `lm_comm_world`: `MPI_COMM_WORLD` as a Fortran handle.
pub fn comm_world() -> Result<Comm> {
    let mut c = 0;
    check(unsafe { sys::lm_comm_world(&mut c) })?;
    Ok(Comm(c))
}

/// `lm_world_rank`: (rank in `MPI_COMM_WORLD`, world size).
pub fn world_rank() -> Result<(i32, i32)> {
    let (mut r, mut s) = (0, 0);
    check(unsafe { sys::lm_world_rank(&mut r, &mut s) })?;
    Ok((r, s))
}

// ================================================================================================
// Devices, data types
// ================================================================================================

/// A DLPack device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Device {
    Cpu,
    Cuda(i32),
    /// Any other DLPack device (type, id).
    Other(i32, i32),
}

impl Device {
    pub fn raw(self) -> sys::DLDevice {
        match self {
            Device::Cpu => sys::LM_CPU,
            Device::Cuda(id) => sys::DLDevice { device_type: sys::kDLCUDA, device_id: id },
            Device::Other(t, id) => sys::DLDevice { device_type: t, device_id: id },
        }
    }
    pub fn from_raw(d: sys::DLDevice) -> Device {
        match d.device_type {
            sys::kDLCPU => Device::Cpu,
            sys::kDLCUDA => Device::Cuda(d.device_id),
            t => Device::Other(t, d.device_id),
        }
    }
}

/// `lm_device_supported`: whether this build holds tensors on the device type (`sys::kDLCPU`, ...).
pub fn device_supported(device_type: sys::DLDeviceType) -> Result<bool> {
    let mut s = 0;
    check(unsafe { sys::lm_device_supported(device_type, &mut s) })?;
    Ok(s != 0)
}

/// The element types localmap supports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    F16,
    BF16,
    F32,
    F64,
    I8,
    I16,
    I32,
    I64,
    U8,
    Bool,
    C64,
    C128,
}

impl DType {
    pub fn raw(self) -> sys::DLDataType {
        match self {
            DType::F16 => sys::LM_FLOAT16,
            DType::BF16 => sys::LM_BFLOAT16,
            DType::F32 => sys::LM_FLOAT32,
            DType::F64 => sys::LM_FLOAT64,
            DType::I8 => sys::LM_INT8,
            DType::I16 => sys::LM_INT16,
            DType::I32 => sys::LM_INT32,
            DType::I64 => sys::LM_INT64,
            DType::U8 => sys::LM_UINT8,
            DType::Bool => sys::LM_BOOL,
            DType::C64 => sys::LM_COMPLEX64,
            DType::C128 => sys::LM_COMPLEX128,
        }
    }
    pub fn from_raw(d: sys::DLDataType) -> Option<DType> {
        use DType::*;
        [F16, BF16, F32, F64, I8, I16, I32, I64, U8, Bool, C64, C128].into_iter().find(|t| t.raw() == d)
    }
}

/// A complex number as DLPack lays it out (real, imaginary).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Complex<T> {
    pub re: T,
    pub im: T,
}

/// Rust types that are localmap elements.
///
/// # Safety
/// `DTYPE` must describe exactly the in-memory representation of `Self`.
pub unsafe trait Element: Copy + 'static {
    const DTYPE: DType;
}
unsafe impl Element for f32 { const DTYPE: DType = DType::F32; }
unsafe impl Element for f64 { const DTYPE: DType = DType::F64; }
unsafe impl Element for i8 { const DTYPE: DType = DType::I8; }
unsafe impl Element for i16 { const DTYPE: DType = DType::I16; }
unsafe impl Element for i32 { const DTYPE: DType = DType::I32; }
unsafe impl Element for i64 { const DTYPE: DType = DType::I64; }
unsafe impl Element for u8 { const DTYPE: DType = DType::U8; }
unsafe impl Element for bool { const DTYPE: DType = DType::Bool; }
unsafe impl Element for Complex<f32> { const DTYPE: DType = DType::C64; }
unsafe impl Element for Complex<f64> { const DTYPE: DType = DType::C128; }

// ================================================================================================
// Placements, layout math
// ================================================================================================

/// A reduction of [`Placement::Partial`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    Sum,
    Avg,
    Max,
    Min,
    Prod,
}

impl ReduceOp {
    pub fn raw(self) -> sys::lm_reduce_op_t {
        match self {
            ReduceOp::Sum => sys::LM_REDUCE_SUM,
            ReduceOp::Avg => sys::LM_REDUCE_AVG,
            ReduceOp::Max => sys::LM_REDUCE_MAX,
            ReduceOp::Min => sys::LM_REDUCE_MIN,
            ReduceOp::Prod => sys::LM_REDUCE_PROD,
        }
    }
    fn from_raw(op: i32) -> Option<ReduceOp> {
        use ReduceOp::*;
        [Sum, Avg, Max, Min, Prod].into_iter().find(|o| o.raw() == op)
    }
}

/// How one mesh dim holds a tensor (one per mesh dim).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Placement {
    /// Every rank along the mesh dim holds the full value.
    Replicate,
    /// Tensor dim `d` is chunked along the mesh dim like `torch.chunk`.
    Shard(i32),
    /// Co-sharding: several mesh dims shard tensor dim `dim`, lowest `order` splits first.
    ShardOrdered { dim: i32, order: i32 },
    /// Each rank holds a partial value; the value is the reduction.
    Partial(ReduceOp),
    /// Tensor dim `dim` is split into the extents of id `extents` (see [`Extents`]); it must
    /// split its dim first (lowest `order`). Id `sys::LM_EXTENTS_AGREED` (0): the ranks' local
    /// shapes give the extents (see [`Placement::ragged_agreed`]).
    Ragged { dim: i32, extents: i32, order: i32 },
    /// Blocks of `block` elements of tensor dim `dim` dealt round-robin over the mesh dim from
    /// coordinate `src` (ScaLAPACK's MB/NB and RSRC/CSRC); the only mesh dim splitting `dim`.
    BlockCyclic { dim: i32, block: i32, src: i32 },
}

impl Placement {
    /// A ragged shard of tensor dim `dim` whose extents the ranks' local shapes give
    /// (`LM_EXTENTS_AGREED`): for `from_local` with `ShapeMode::Allgather` and `local_map`
    /// outputs without a given shape. The tensor's placements then name the agreed extents.
    pub fn ragged_agreed(dim: i32) -> Placement {
        Placement::Ragged { dim, extents: sys::LM_EXTENTS_AGREED, order: 0 }
    }
    pub fn raw(self) -> sys::lm_placement_t {
        match self {
            Placement::Replicate => sys::LM_PLACEMENT_REPLICATE,
            Placement::Shard(d) => sys::LM_PLACEMENT_SHARD(d),
            Placement::ShardOrdered { dim, order } => sys::lm_placement_t { order, ..sys::LM_PLACEMENT_SHARD(dim) },
            Placement::Partial(op) => sys::LM_PLACEMENT_PARTIAL(op.raw()),
            Placement::Ragged { dim, extents, order } => sys::lm_placement_t { order, ..sys::LM_PLACEMENT_RAGGED(dim, extents) },
            Placement::BlockCyclic { dim, block, src } => sys::LM_PLACEMENT_BLOCK_CYCLIC(dim, block, src),
        }
    }
    /// `None` for a struct this binding cannot express (an unknown kind or op).
    pub fn from_raw(p: sys::lm_placement_t) -> Option<Placement> {
        match p.kind {
            sys::LM_REPLICATE => Some(Placement::Replicate),
            sys::LM_SHARD if p.order == 0 => Some(Placement::Shard(p.dim)),
            sys::LM_SHARD => Some(Placement::ShardOrdered { dim: p.dim, order: p.order }),
            sys::LM_PARTIAL => ReduceOp::from_raw(p.reduce_op).map(Placement::Partial),
            sys::LM_RAGGED => Some(Placement::Ragged { dim: p.dim, extents: p.extents, order: p.order }),
            sys::LM_BLOCK_CYCLIC => Some(Placement::BlockCyclic { dim: p.dim, block: p.block, src: p.source }),
            _ => None,
        }
    }
}

fn raw_placements(p: &[Placement]) -> Vec<sys::lm_placement_t> {
    p.iter().map(|x| x.raw()).collect()
}

/// The C API reads one placement per mesh dim: a shorter slice would be read past its end (an
/// empty one is a dangling pointer), a longer one silently cut. Refused here, naming the argument.
fn mesh_placements(mesh: &Mesh, p: &[Placement], what: &str) -> Result<Vec<sys::lm_placement_t>> {
    mesh_placements_n(mesh.ndim()?, p, what)
}

fn mesh_placements_n(ndim: usize, p: &[Placement], what: &str) -> Result<Vec<sys::lm_placement_t>> {
    if p.len() != ndim {
        return arg_error(format!("{what}: {} placements for a mesh of {ndim} dims (one per mesh dim)", p.len()));
    }
    Ok(raw_placements(p))
}

/// A `ShapeMode::Given` global shape must have one extent per tensor dim (the C API reads that
/// many).
fn check_given(mode: &ShapeMode, ndim: usize, what: &str) -> Result<()> {
    match mode {
        ShapeMode::Given(s) if s.len() != ndim => arg_error(format!(
            "{what}: ShapeMode::Given has {} extents for a tensor of {ndim} dims", s.len())),
        _ => Ok(()),
    }
}

fn read_buf(f: impl FnOnce(*mut c_char, usize) -> sys::lm_status_t) -> Result<String> {
    let mut buf = vec![0 as c_char; 4096];
    check(f(buf.as_mut_ptr(), buf.len()))?;
    // SAFETY: the library NUL-terminates within size.
    Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned())
}

/// `lm_placements_format`: e.g. `"[S(0), R, P(sum)]"`.
pub fn format_placements(placements: &[Placement]) -> Result<String> {
    let raw = raw_placements(placements);
    let n = to_int(raw.len(), "placements")?;
    read_buf(|b, s| unsafe { sys::lm_placements_format(raw.as_ptr(), n, b, s) })
}

/// `lm_placements_adjoint`: the placements of a gradient (PyTorch DTensor's convention):
/// `Partial(Sum)` becomes `Replicate`, Shard and Replicate are kept; avg/max/min/prod are refused.
pub fn placements_adjoint(placements: &[Placement]) -> Result<Vec<Placement>> {
    let raw = raw_placements(placements);
    let n = to_int(raw.len(), "placements")?;
    let mut out = raw.clone();
    check(unsafe { sys::lm_placements_adjoint(raw.as_ptr(), n, out.as_mut_ptr()) })?;
    out.into_iter()
        .map(|p| Placement::from_raw(p).ok_or_else(|| Error::new(Status::Internal, format!("placement {p:?}"))))
        .collect()
}

/// The extents of a ragged shard (`lm_extents_create`): one length per coordinate of the mesh
/// dim that uses them. Dropping it releases this reference; tensors and plans keep their own.
#[derive(Debug)]
pub struct Extents {
    id: i32,
}

impl Extents {
    /// Registers `lengths` (each >= 0).
    pub fn new(lengths: &[i64]) -> Result<Extents> {
        let mut id = 0;
        check(unsafe { sys::lm_extents_create(&mut id, lengths.as_ptr(), lengths.len() as i64) })?;
        Ok(Extents { id })
    }
    /// The id a ragged placement carries.
    pub fn id(&self) -> i32 {
        self.id
    }
    /// `Placement::Ragged` of tensor dim `dim` with these extents.
    pub fn placement(&self, dim: i32) -> Placement {
        Placement::Ragged { dim, extents: self.id, order: 0 }
    }
    /// The lengths of any live extents id (e.g. from `DistTensor::placements`).
    pub fn lengths(id: i32) -> Result<Vec<i64>> {
        let mut n = 0;
        check(unsafe { sys::lm_extents_get(id, std::ptr::null_mut(), 0, &mut n) })?;
        let mut v = vec![0i64; n as usize];
        check(unsafe { sys::lm_extents_get(id, v.as_mut_ptr(), n, &mut n) })?;
        Ok(v)
    }
}

impl Drop for Extents {
    fn drop(&mut self) {
        unsafe {
            let _ = sys::lm_extents_destroy(self.id);
        }
    }
}

/// `lm_layout_chunk`: the `(offset, length)` block `index` of `parts` gets of an extent `n`.
pub fn chunk(n: i64, parts: i64, index: i64) -> Result<(i64, i64)> {
    let (mut o, mut l) = (0, 0);
    check(unsafe { sys::lm_layout_chunk(n, parts, index, &mut o, &mut l) })?;
    Ok((o, l))
}

// ================================================================================================
// Mesh
// ================================================================================================

/// An N-D grid of MPI ranks (`lm_mesh_t`). Dropping it is local; tensors keep it alive.
#[derive(Debug)]
pub struct Mesh {
    raw: sys::lm_mesh_t,
}

/// A mesh borrowed from a tensor or a [`LocalMap`] call: it is not destroyed when dropped.
pub struct MeshRef<'a> {
    mesh: ManuallyDrop<Mesh>,
    _life: PhantomData<&'a ()>,
}

impl Deref for MeshRef<'_> {
    type Target = Mesh;
    fn deref(&self) -> &Mesh {
        &self.mesh
    }
}

impl Drop for Mesh {
    fn drop(&mut self) {
        unsafe { sys::lm_mesh_destroy(&mut self.raw) };
    }
}

impl Mesh {
    /// `lm_mesh_create` over all ranks of `parent`, in order. Collective over `parent`.
    pub fn new(parent: Comm, shape: &[i64]) -> Result<Mesh> {
        Mesh::with_config(parent, shape, None, None)
    }

    /// `lm_mesh_create_grid`: the 2-D mesh of a process grid (a BLACS grid, say) from this rank's
    /// grid coordinate (`-1, -1` outside the grid). Collective over `parent`.
    pub fn grid(parent: Comm, myrow: i32, mycol: i32) -> Result<Mesh> {
        let mut raw = ptr::null_mut();
        check(unsafe { sys::lm_mesh_create_grid(&mut raw, parent.0, myrow, mycol, ptr::null()) })?;
        Ok(Mesh { raw })
    }

    /// `lm_mesh_create` with dim names (distinct, non-empty, at most 63 chars).
    pub fn with_names(parent: Comm, shape: &[i64], names: &[&str]) -> Result<Mesh> {
        Mesh::with_config(parent, shape, None, Some(names))
    }

    /// `lm_mesh_create` with an `lm_mesh_config_t`: `ranks` of the parent forming the mesh
    /// (row-major over `shape`; `None`: all), and dim names.
    pub fn with_config(parent: Comm, shape: &[i64], ranks: Option<&[i32]>, names: Option<&[&str]>)
        -> Result<Mesh> {
        Mesh::with_options(parent, shape, &MeshOptions { ranks, names, ..MeshOptions::default() })
    }

    /// `lm_mesh_create` with every option of `lm_mesh_config_t` ([`MeshOptions`]).
    pub fn with_options(parent: Comm, shape: &[i64], options: &MeshOptions<'_>) -> Result<Mesh> {
        let (ranks, names) = (options.ranks, options.names);
        let mut cfg = sys::LM_MESH_CONFIG_INIT;
        if let Some(c) = options.check_level {
            cfg.check_level = c;
        }
        if let Some(t) = options.timeout {
            cfg.timeout = t;
        }
        if let Some(r) = ranks {
            cfg.ranks = r.as_ptr();
            cfg.nranks = to_int(r.len(), "ranks")?;
        }
        let cnames: Vec<CString> = match names {
            Some(n) => n.iter().enumerate()
                .map(|(i, s)| CString::new(*s).or_else(|_| arg_error(format!("Mesh: names[{i}] contains a NUL byte"))))
                .collect::<Result<_>>()?,
            None => Vec::new(),
        };
        let ptrs: Vec<*const c_char> = cnames.iter().map(|c| c.as_ptr()).collect();
        if names.is_some() {
            if ptrs.len() != shape.len() {
                return arg_error(format!("Mesh: {} names for {} mesh dims", ptrs.len(), shape.len()));
            }
            cfg.dim_names = ptrs.as_ptr();
        }
        let mut raw = ptr::null_mut();
        check(unsafe {
            sys::lm_mesh_create(&mut raw, parent.0, to_int(shape.len(), "shape")?, shape.as_ptr(), &cfg)
        })?;
        Ok(Mesh { raw })
    }

    /// The raw handle (still owned by `self`).
    pub fn as_raw(&self) -> sys::lm_mesh_t {
        self.raw
    }

    /// Takes ownership of a raw handle (it will be destroyed on drop).
    ///
    /// # Safety
    /// `raw` must be a live mesh handle nobody else destroys.
    pub unsafe fn from_raw(raw: sys::lm_mesh_t) -> Mesh {
        Mesh { raw }
    }

    fn borrowed<'a>(raw: sys::lm_mesh_t) -> MeshRef<'a> {
        MeshRef { mesh: ManuallyDrop::new(Mesh { raw }), _life: PhantomData }
    }

    pub fn ndim(&self) -> Result<usize> {
        let mut n = 0;
        check(unsafe { sys::lm_mesh_ndim(self.raw, &mut n) })?;
        Ok(n as usize)
    }
    pub fn shape(&self) -> Result<Vec<i64>> {
        let mut v = vec![0; self.ndim()?];
        check(unsafe { sys::lm_mesh_shape(self.raw, v.as_mut_ptr(), v.len() as c_int) })?;
        Ok(v)
    }
    /// Number of ranks in the mesh.
    pub fn size(&self) -> Result<i32> {
        let mut n = 0;
        check(unsafe { sys::lm_mesh_size(self.raw, &mut n) })?;
        Ok(n)
    }
    pub fn is_member(&self) -> Result<bool> {
        let mut m = 0;
        check(unsafe { sys::lm_mesh_is_member(self.raw, &mut m) })?;
        Ok(m != 0)
    }
    /// This rank's coordinate (an error on a non-member).
    pub fn coord(&self) -> Result<Vec<i64>> {
        let mut v = vec![0; self.ndim()?];
        check(unsafe { sys::lm_mesh_coord(self.raw, v.as_mut_ptr(), v.len() as c_int) })?;
        Ok(v)
    }
    /// This rank's row-major index in the mesh (an error on a non-member).
    pub fn rank(&self) -> Result<i32> {
        let mut r = 0;
        check(unsafe { sys::lm_mesh_rank(self.raw, &mut r) })?;
        Ok(r)
    }
    /// The parent-communicator rank at a coordinate.
    pub fn rank_at(&self, coord: &[i64]) -> Result<i32> {
        let ndim = self.ndim()?;
        if coord.len() != ndim {
            return arg_error(format!("Mesh::rank_at: coord: {} entries for a mesh of {ndim} dims", coord.len()));
        }
        let mut r = 0;
        check(unsafe { sys::lm_mesh_rank_at(self.raw, coord.as_ptr(), to_int(coord.len(), "coord")?, &mut r) })?;
        Ok(r)
    }
    /// Index of the dim called `name`.
    pub fn dim_index(&self, name: &str) -> Result<usize> {
        let c = CString::new(name).or_else(|_| arg_error("Mesh::dim_index: name contains a NUL byte".into()))?;
        let mut d = 0;
        check(unsafe { sys::lm_mesh_dim_index(self.raw, c.as_ptr(), &mut d) })?;
        Ok(d as usize)
    }
    /// The dim's name ("" when unnamed).
    pub fn dim_name(&self, dim: usize) -> Result<String> {
        let d = to_int(dim, "dim")?;
        read_buf(|b, s| unsafe { sys::lm_mesh_dim_name(self.raw, d, b, s) })
    }
    /// The communicator along `dim` (owned by the mesh; do not free it).
    pub fn dim_comm(&self, dim: usize) -> Result<Comm> {
        let mut c = 0;
        check(unsafe { sys::lm_mesh_dim_comm(self.raw, to_int(dim, "dim")?, &mut c) })?;
        Ok(Comm(c))
    }
    /// The communicator of all mesh ranks (owned by the mesh).
    pub fn comm(&self) -> Result<Comm> {
        let mut c = 0;
        check(unsafe { sys::lm_mesh_comm(self.raw, &mut c) })?;
        Ok(Comm(c))
    }
    /// `lm_mesh_set_device_config`: this rank's stream and allocator for the mesh (`None`: the
    /// defaults). Local.
    ///
    /// # Safety
    /// The stream and the allocator callbacks must be valid for as long as the mesh uses them.
    pub unsafe fn set_device_config(&self, config: Option<&sys::lm_device_config_t>) -> Result<()> {
        check(sys::lm_mesh_set_device_config(self.raw, config.map_or(ptr::null(), |c| c as *const _)))
    }
    /// `lm_mesh_device_config`: this rank's device options of the mesh.
    pub fn device_config(&self) -> Result<sys::lm_device_config_t> {
        let mut c = sys::LM_DEVICE_CONFIG_INIT;
        check(unsafe { sys::lm_mesh_device_config(self.raw, &mut c) })?;
        Ok(c)
    }
    /// `lm_mesh_transport`: how the mesh moves tensors of a device type (`sys::kDLCPU`, ...).
    pub fn transport(&self, device_type: sys::DLDeviceType) -> Result<Transport> {
        let mut t = 0;
        check(unsafe { sys::lm_mesh_transport(self.raw, device_type, &mut t) })?;
        Ok(match t {
            sys::LM_TRANSPORT_UNDECIDED => Transport::Undecided,
            sys::LM_TRANSPORT_MPI => Transport::Mpi,
            sys::LM_TRANSPORT_NCCL => Transport::Nccl,
            sys::LM_TRANSPORT_MPI_STAGED => Transport::MpiStaged,
            other => Transport::Other(other),
        })
    }
}

/// Options of [`Mesh::with_options`] (`lm_mesh_config_t`); `None`: the library's default.
#[derive(Debug, Clone, Copy, Default)]
pub struct MeshOptions<'a> {
    /// Parent ranks forming the mesh, row-major over the shape.
    pub ranks: Option<&'a [i32]>,
    /// One name per mesh dim.
    pub names: Option<&'a [&'a str]>,
    /// Argument checks of collective calls: 0, 1 or 2 (default: the LM_CHECK environment variable).
    pub check_level: Option<i32>,
    /// Deadline in seconds of blocking waits, 0 = none (default: the LM_TIMEOUT environment variable).
    pub timeout: Option<f64>,
}

/// How a mesh moves tensor data (`lm_transport_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Undecided,
    Mpi,
    Nccl,
    MpiStaged,
    Other(i32),
}

/// `lm_pool_stats`: (bytes of the library's host buffer pool in use, their high-water mark);
/// `reset_peak` then sets the mark to the bytes in use.
pub fn pool_stats(reset_peak: bool) -> Result<(i64, i64)> {
    let (mut in_use, mut peak) = (0, 0);
    check(unsafe { sys::lm_pool_stats(&mut in_use, &mut peak, reset_peak as c_int) })?;
    Ok((in_use, peak))
}

// ================================================================================================
// Managed tensors (DLPack ownership hand-over)
// ================================================================================================

struct VecOwner<T> {
    _data: Vec<T>,
    shape: Vec<i64>,
}

unsafe extern "C" fn vec_deleter<T>(m: *mut sys::DLManagedTensor) {
    if m.is_null() {
        return;
    }
    // SAFETY: m and manager_ctx were made by managed_from_vec::<T> with Box::into_raw.
    let m = Box::from_raw(m);
    drop(Box::from_raw(m.manager_ctx as *mut VecOwner<T>));
}

/// LOCc of a ScaLAPACK descriptor at this rank's grid column (NUMROC); 0 where the descriptor or
/// the mesh is not one the C call accepts (it then names the problem).
fn scalapack_cols(mesh: &Mesh, desc: &[i32; sys::LM_SCALAPACK_DLEN]) -> Result<usize> {
    let (shape, coord) = (mesh.shape()?, mesh.coord()?);
    let (n, nb, src) = (desc[3] as i64, desc[5] as i64, desc[7] as i64);
    if shape.len() != 2 || n < 0 || nb < 1 || src < 0 || src >= shape[1] {
        return Ok(0);
    }
    let p = shape[1];
    let dist = (coord[1] - src + p) % p;
    let blocks = (n + nb - 1) / nb;
    let mine = if dist < blocks { (blocks - dist + p - 1) / p } else { 0 };
    let mut cols = mine * nb;
    if mine > 0 && (dist + (mine - 1) * p) == blocks - 1 {
        cols -= blocks * nb - n; // this rank holds the last, short block
    }
    Ok(cols as usize)
}

fn check_shape(len: usize, shape: &[i64], what: &str) -> Result<()> {
    let mut n: i64 = 1;
    for (i, &e) in shape.iter().enumerate() {
        if e < 0 {
            return arg_error(format!("{what}: shape[{i}] = {e} is negative"));
        }
        n = n.checked_mul(e).ok_or_else(|| Error::new(Status::InvalidArgument, format!("{what}: shape overflows")))?;
    }
    if n as u128 != len as u128 {
        return arg_error(format!("{what}: {len} elements for shape {shape:?} ({n} elements)"));
    }
    Ok(())
}

/// A `DLManagedTensor` owning a `Vec<T>`; its deleter drops the vector.
fn managed_from_vec<T: Element>(data: Vec<T>, shape: &[i64]) -> *mut sys::DLManagedTensor {
    let mut data = data;
    let dptr = data.as_mut_ptr() as *mut c_void; // moving the Vec below keeps its heap buffer
    let owner = Box::into_raw(Box::new(VecOwner { _data: data, shape: shape.to_vec() }));
    // SAFETY: owner is a live box; its shape vector does not move.
    let shape_ptr = unsafe { (*owner).shape.as_mut_ptr() };
    Box::into_raw(Box::new(sys::DLManagedTensor {
        dl_tensor: sys::DLTensor {
            data: dptr,
            device: sys::LM_CPU,
            ndim: shape.len() as c_int,
            dtype: T::DTYPE.raw(),
            shape: shape_ptr,
            strides: ptr::null_mut(),
            byte_offset: 0,
        },
        manager_ctx: owner as *mut c_void,
        deleter: Some(vec_deleter::<T>),
    }))
}

/// A `DLManagedTensor` (e.g. from [`DistTensor::to_dlpack`]): dropping it calls its deleter once.
#[derive(Debug)]
pub struct ManagedTensor {
    raw: *mut sys::DLManagedTensor,
}

impl ManagedTensor {
    /// Wraps a Rust vector (host memory, compact row-major `shape`).
    pub fn from_vec<T: Element>(data: Vec<T>, shape: &[i64]) -> Result<ManagedTensor> {
        check_shape(data.len(), shape, "ManagedTensor::from_vec")?;
        Ok(ManagedTensor { raw: managed_from_vec(data, shape) })
    }
    /// `lm_tensor_alloc`: a zero-filled compact tensor from localmap's pool (`shape` row-major).
    pub fn alloc(shape: &[i64], dtype: DType, device: Device) -> Result<ManagedTensor> {
        let mut m = ptr::null_mut();
        check(unsafe { sys::lm_tensor_alloc(&mut m, to_int(shape.len(), "shape")?, shape.as_ptr(), dtype.raw(), device.raw()) })?;
        Ok(ManagedTensor { raw: m })
    }
    /// The elements, writable (the tensor owns its memory: nothing else sees it until handed over).
    pub fn data_mut<T: Element>(&mut self) -> Result<&mut [T]> {
        let s = self.data::<T>()?;
        // SAFETY: &mut self: no other borrow of this tensor's memory is alive.
        Ok(unsafe { std::slice::from_raw_parts_mut(s.as_ptr() as *mut T, s.len()) })
    }
    /// # Safety
    /// `raw` must be a valid managed tensor whose deleter the caller hands over.
    pub unsafe fn from_raw(raw: *mut sys::DLManagedTensor) -> ManagedTensor {
        ManagedTensor { raw }
    }
    /// Gives up ownership: the caller must call the deleter once.
    pub fn into_raw(self) -> *mut sys::DLManagedTensor {
        let r = self.raw;
        std::mem::forget(self);
        r
    }
    pub fn dl_tensor(&self) -> &sys::DLTensor {
        unsafe { &(*self.raw).dl_tensor }
    }
    pub fn shape(&self) -> Vec<i64> {
        tensor_shape(self.dl_tensor())
    }
    /// The elements, when the tensor is a compact host tensor of type `T`.
    pub fn data<T: Element>(&self) -> Result<&[T]> {
        // SAFETY: the slice lives as long as self, which owns the memory.
        unsafe { tensor_slice(self.dl_tensor(), "ManagedTensor::data") }
    }
}

impl Drop for ManagedTensor {
    fn drop(&mut self) {
        unsafe {
            if !self.raw.is_null() {
                if let Some(d) = (*self.raw).deleter {
                    d(self.raw);
                }
            }
        }
    }
}

fn tensor_shape(t: &sys::DLTensor) -> Vec<i64> {
    if t.ndim <= 0 || t.shape.is_null() {
        return Vec::new();
    }
    unsafe { std::slice::from_raw_parts(t.shape, t.ndim as usize) }.to_vec()
}

/// The elements of a compact host DLTensor of type `T`.
///
/// # Safety
/// `t` must describe live memory for the returned lifetime, not written meanwhile.
unsafe fn tensor_slice<'a, T: Element>(t: &sys::DLTensor, what: &str) -> Result<&'a [T]> {
    if t.dtype != T::DTYPE.raw() {
        return arg_error(format!("{what}: the tensor's dtype is {:?}, not {:?}",
                                 DType::from_raw(t.dtype), T::DTYPE));
    }
    if t.device.device_type != sys::kDLCPU {
        return arg_error(format!("{what}: the tensor is not on the host"));
    }
    let shape = tensor_shape(t);
    let n: i64 = shape.iter().product();
    if !t.strides.is_null() {
        let strides = std::slice::from_raw_parts(t.strides, t.ndim as usize);
        let mut expect = 1;
        for i in (0..shape.len()).rev() {
            if shape[i] > 1 && strides[i] != expect {
                return arg_error(format!("{what}: the tensor is not compact row-major"));
            }
            expect *= shape[i];
        }
    }
    if n == 0 {
        return Ok(&[]);
    }
    let p = (t.data as *const u8).add(t.byte_offset as usize) as *const T;
    Ok(std::slice::from_raw_parts(p, n as usize))
}

// ================================================================================================
// Dist tensors
// ================================================================================================

/// How a tensor made from local shards learns its global shape (`lm_shape_mode_t`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShapeMode {
    /// The caller gives it (checked against the local shape).
    Given(Vec<i64>),
    /// Local extent * mesh extent along sharded dims (no communication).
    Even,
    /// One small allgather of local extents (collective over the mesh; right for uneven shards).
    Allgather,
}

impl ShapeMode {
    fn raw(&self) -> (sys::lm_shape_mode_t, *const i64) {
        match self {
            ShapeMode::Given(s) => (sys::LM_SHAPE_GIVEN, s.as_ptr()),
            ShapeMode::Even => (sys::LM_SHAPE_EVEN, ptr::null()),
            ShapeMode::Allgather => (sys::LM_SHAPE_ALLGATHER, ptr::null()),
        }
    }
}

/// A distributed tensor (`lm_dist_tensor_t`). `Clone` adds a reference (`lm_dist_tensor_retain`):
/// both handles share one tensor and its storage. `Drop` releases one reference (local).
#[derive(Debug)]
pub struct DistTensor {
    raw: sys::lm_dist_tensor_t,
}

impl Clone for DistTensor {
    fn clone(&self) -> DistTensor {
        let st = unsafe { sys::lm_dist_tensor_retain(self.raw) };
        assert_eq!(st, sys::LM_SUCCESS, "lm_dist_tensor_retain: {}", last_error_message());
        DistTensor { raw: self.raw }
    }
}

impl Drop for DistTensor {
    fn drop(&mut self) {
        unsafe { sys::lm_dist_tensor_destroy(&mut self.raw) };
    }
}

fn host_view<T: Element>(data: *const T, shape: &[i64]) -> sys::DLTensor {
    sys::DLTensor {
        data: data as *mut c_void,
        device: sys::LM_CPU,
        ndim: shape.len() as c_int,
        dtype: T::DTYPE.raw(),
        shape: shape.as_ptr() as *mut i64,
        strides: ptr::null_mut(),
        byte_offset: 0,
    }
}

impl DistTensor {
    /// The raw handle (still owned by `self`).
    pub fn as_raw(&self) -> sys::lm_dist_tensor_t {
        self.raw
    }
    /// Takes ownership of one reference of a raw handle.
    ///
    /// # Safety
    /// `raw` must be a live tensor handle whose reference the caller hands over.
    pub unsafe fn from_raw(raw: sys::lm_dist_tensor_t) -> DistTensor {
        DistTensor { raw }
    }
    /// Gives up the reference to the caller.
    pub fn into_raw(self) -> sys::lm_dist_tensor_t {
        let r = self.raw;
        std::mem::forget(self);
        r
    }

    /// `lm_dist_tensor_zeros` (local).
    pub fn zeros(mesh: &Mesh, global_shape: &[i64], dtype: DType, device: Device, placements: &[Placement])
        -> Result<DistTensor> {
        let pl = mesh_placements(mesh, placements, "DistTensor::zeros: placements")?;
        let mut raw = ptr::null_mut();
        check(unsafe {
            sys::lm_dist_tensor_zeros(&mut raw, mesh.raw, to_int(global_shape.len(), "global_shape")?,
                                      global_shape.as_ptr(), dtype.raw(), device.raw(), pl.as_ptr())
        })?;
        Ok(DistTensor { raw })
    }

    /// `lm_dist_tensor_from_local` with `LM_FROM_LOCAL_COPY`: copies this rank's shard `data`
    /// (compact row-major, `local_shape`). A rank outside the mesh passes an empty slice, its
    /// tensor rank in `local_shape` and `ShapeMode::Given`.
    pub fn from_local<T: Element>(mesh: &Mesh, data: &[T], local_shape: &[i64], placements: &[Placement],
                                  mode: ShapeMode) -> Result<DistTensor> {
        if mesh.is_member()? {
            check_shape(data.len(), local_shape, "DistTensor::from_local")?;
        }
        let view = host_view(data.as_ptr(), local_shape);
        // SAFETY: view describes `data` (read and copied during the call).
        unsafe { DistTensor::from_dltensor(mesh, &view, placements, mode, sys::LM_FROM_LOCAL_COPY) }
    }

    /// `lm_dist_tensor_from_local` on any DLTensor, with `flags` (`sys::LM_FROM_LOCAL_COPY` or
    /// `sys::LM_FROM_LOCAL_BORROW`).
    ///
    /// # Safety
    /// `local` must describe valid memory; with BORROW it must outlive the tensor and every view.
    pub unsafe fn from_dltensor(mesh: &Mesh, local: &sys::DLTensor, placements: &[Placement], mode: ShapeMode,
                                flags: u32) -> Result<DistTensor> {
        let pl = mesh_placements(mesh, placements, "DistTensor::from_local: placements")?;
        check_given(&mode, usize::try_from(local.ndim).unwrap_or(0), "DistTensor::from_local")?;
        let (m, gs) = mode.raw();
        let mut raw = ptr::null_mut();
        check(sys::lm_dist_tensor_from_local(&mut raw, mesh.raw, local, pl.as_ptr(), m, gs, flags))?;
        Ok(DistTensor { raw })
    }

    /// `lm_dist_tensor_from_scalapack` with `LM_FROM_LOCAL_COPY`: the tensor `[N, M]` (the row-major
    /// view of the column-major M x N matrix) from this rank's ScaLAPACK local array `data`
    /// (`LLD_ x LOCc`, column-major) and its descriptor; any `LLD_ >= max(1, LOCr)`.
    pub fn from_scalapack<T: Element>(mesh: &Mesh, desc: &[i32; sys::LM_SCALAPACK_DLEN], data: &[T])
        -> Result<DistTensor> {
        let need = desc[8].max(1) as usize * if mesh.is_member()? { scalapack_cols(mesh, desc)? } else { 0 };
        if data.len() < need {
            return arg_error(format!(
                "DistTensor::from_scalapack: data has {} elements, the local array LLD_ x LOCc needs {need}",
                data.len()));
        }
        // SAFETY: `data` covers the array the descriptor describes (checked above); copied here.
        unsafe {
            DistTensor::from_scalapack_raw(mesh, desc, data.as_ptr() as *mut c_void, T::DTYPE, Device::Cpu,
                                           sys::LM_FROM_LOCAL_COPY)
        }
    }

    /// `lm_dist_tensor_from_scalapack` on raw memory, with `flags` (`sys::LM_FROM_LOCAL_BORROW`
    /// wraps the array without a copy; with `LLD_ > LOCr` host rows are padded, and
    /// [`local`](Self::local) refuses the strided view: read the array itself).
    ///
    /// # Safety
    /// `data` must hold the local array the descriptor describes; with BORROW it must outlive the
    /// tensor and every view of it.
    pub unsafe fn from_scalapack_raw(mesh: &Mesh, desc: &[i32; sys::LM_SCALAPACK_DLEN], data: *mut c_void,
                                     dtype: DType, device: Device, flags: u32) -> Result<DistTensor> {
        let mut raw = ptr::null_mut();
        check(sys::lm_dist_tensor_from_scalapack(&mut raw, mesh.raw, desc.as_ptr(), data, dtype.raw(),
                                                 device.raw(), flags))?;
        Ok(DistTensor { raw })
    }

    /// `lm_dist_tensor_from_dlpack`: the tensor takes over `data` without a copy (its storage is
    /// freed when the tensor dies).
    pub fn from_vec<T: Element>(mesh: &Mesh, data: Vec<T>, local_shape: &[i64], placements: &[Placement],
                                mode: ShapeMode) -> Result<DistTensor> {
        DistTensor::from_dlpack(mesh, ManagedTensor::from_vec(data, local_shape)?, placements, mode)
    }

    /// `lm_dist_tensor_from_dlpack`: takes ownership of `local` (on failure it is dropped here).
    pub fn from_dlpack(mesh: &Mesh, local: ManagedTensor, placements: &[Placement], mode: ShapeMode)
        -> Result<DistTensor> {
        let pl = mesh_placements(mesh, placements, "DistTensor::from_dlpack: placements")?;
        check_given(&mode, usize::try_from(local.dl_tensor().ndim).unwrap_or(0), "DistTensor::from_dlpack")?;
        let (m, gs) = mode.raw();
        let mut raw = ptr::null_mut();
        let st = unsafe { sys::lm_dist_tensor_from_dlpack(&mut raw, mesh.raw, local.raw, pl.as_ptr(), m, gs) };
        check(st)?; // on failure `local` still owns the data and drops it
        local.into_raw();
        Ok(DistTensor { raw })
    }

    /// `lm_dist_tensor_from_global`. `root < 0`: every rank passes the full tensor (a rank
    /// outside the mesh may pass `None`). `root >= 0`: only mesh rank `root` passes `Some` and it
    /// is scattered (collective over the mesh); `shape` is the global shape on every rank.
    pub fn from_global<T: Element>(mesh: &Mesh, data: Option<&[T]>, shape: &[i64], placements: &[Placement],
                                   root: i32) -> Result<DistTensor> {
        if let Some(d) = data {
            check_shape(d.len(), shape, "DistTensor::from_global")?;
        }
        let view = host_view(data.map_or(ptr::null(), |d| d.as_ptr()), shape);
        let vp: *const sys::DLTensor = if root >= 0 && data.is_none() { ptr::null() } else { &view };
        let pl = mesh_placements(mesh, placements, "DistTensor::from_global: placements")?;
        let mut raw = ptr::null_mut();
        check(unsafe { sys::lm_dist_tensor_from_global(&mut raw, mesh.raw, vp, pl.as_ptr(), root) })?;
        Ok(DistTensor { raw })
    }

    /// `lm_dist_tensor_gather` into `dst` (the global shape, compact). `root < 0`: on every member
    /// rank; `root >= 0`: only mesh rank `root` passes `Some`. Collective over the mesh.
    pub fn gather<T: Element>(&self, root: i32, dst: Option<&mut [T]>) -> Result<()> {
        let shape = self.global_shape()?;
        let mut view;
        let vp: *mut sys::DLTensor = match dst {
            Some(d) => {
                check_shape(d.len(), &shape, "DistTensor::gather")?;
                view = host_view(d.as_ptr(), &shape);
                &mut view
            }
            None => ptr::null_mut(),
        };
        check(unsafe { sys::lm_dist_tensor_gather(self.raw, root, vp) })
    }

    /// The full value on every member rank.
    pub fn gather_all<T: Element + Default>(&self) -> Result<Vec<T>> {
        let n: i64 = self.global_shape()?.iter().product();
        let mut v = vec![T::default(); n as usize];
        self.gather(-1, Some(&mut v[..]))?;
        Ok(v)
    }
    /// `lm_dist_tensor_to_scalapack`: this tensor's layout as a ScaLAPACK descriptor with
    /// context `ctxt` (the `[N, M]` tensor read as the column-major M x N matrix).
    pub fn to_scalapack(&self, ctxt: i32) -> Result<[i32; sys::LM_SCALAPACK_DLEN]> {
        let mut d = [0i32; sys::LM_SCALAPACK_DLEN];
        check(unsafe { sys::lm_dist_tensor_to_scalapack(self.raw, ctxt, d.as_mut_ptr()) })?;
        Ok(d)
    }


    /// The tensor's mesh (borrowed: it lives as long as the tensor).
    pub fn mesh(&self) -> Result<MeshRef<'_>> {
        let mut m = ptr::null_mut();
        check(unsafe { sys::lm_dist_tensor_mesh(self.raw, &mut m) })?;
        Ok(Mesh::borrowed(m))
    }
    pub fn ndim(&self) -> Result<usize> {
        let mut n = 0;
        check(unsafe { sys::lm_dist_tensor_ndim(self.raw, &mut n) })?;
        Ok(n as usize)
    }
    pub fn dtype(&self) -> Result<DType> {
        let mut d = sys::LM_FLOAT64;
        check(unsafe { sys::lm_dist_tensor_dtype(self.raw, &mut d) })?;
        DType::from_raw(d).ok_or_else(|| Error::new(Status::NotSupported, format!("unknown dtype {d:?}")))
    }
    pub fn device(&self) -> Result<Device> {
        let mut d = sys::LM_CPU;
        check(unsafe { sys::lm_dist_tensor_device(self.raw, &mut d) })?;
        Ok(Device::from_raw(d))
    }
    /// One placement per mesh dim.
    pub fn placements(&self) -> Result<Vec<Placement>> {
        let n = self.mesh()?.ndim()?;
        let mut v = vec![sys::lm_placement_t::default(); n];
        check(unsafe { sys::lm_dist_tensor_placements(self.raw, v.as_mut_ptr(), n as c_int) })?;
        v.into_iter()
            .map(|p| Placement::from_raw(p).ok_or_else(|| Error::new(Status::NotSupported, format!("placement {p:?}"))))
            .collect()
    }
    fn shape_query(&self, f: unsafe extern "C" fn(sys::lm_dist_tensor_t, *mut i64, c_int) -> sys::lm_status_t)
        -> Result<Vec<i64>> {
        let mut v = vec![0; self.ndim()?];
        check(unsafe { f(self.raw, v.as_mut_ptr(), v.len() as c_int) })?;
        Ok(v)
    }
    pub fn global_shape(&self) -> Result<Vec<i64>> {
        self.shape_query(sys::lm_dist_tensor_global_shape)
    }
    pub fn local_shape(&self) -> Result<Vec<i64>> {
        self.shape_query(sys::lm_dist_tensor_local_shape)
    }
    /// Global index of the shard's first element, per dim.
    pub fn local_offset(&self) -> Result<Vec<i64>> {
        self.shape_query(sys::lm_dist_tensor_local_offset)
    }
    /// `lm_padded_extents` of the local shard: the extents of the row-major array it lies in (the
    /// local shape, except for a host array borrowed with padded rows: a ScaLAPACK array with
    /// `LLD_ > LOCr` gives `[LOCc, LLD_]`).
    pub fn local_extents(&self) -> Result<Vec<i64>> {
        let v = self.local_view()?;
        let mut ext = vec![0; v.ndim as usize];
        check(unsafe { sys::lm_padded_extents(&v, ext.as_mut_ptr(), v.ndim) })?;
        Ok(ext)
    }
    /// `lm_dist_tensor_local`: the raw DLTensor view of the local shard (valid while `self` lives).
    pub fn local_view(&self) -> Result<sys::DLTensor> {
        let mut v = host_view::<u8>(ptr::null(), &[]);
        check(unsafe { sys::lm_dist_tensor_local(self.raw, &mut v) })?;
        Ok(v)
    }
    /// The local shard as a slice (compact row-major over [`local_shape`](Self::local_shape)).
    pub fn local<T: Element>(&self) -> Result<&[T]> {
        let v = self.local_view()?;
        // SAFETY: the storage lives as long as self; safe code cannot write it while borrowed
        // (writes need `&mut` or `unsafe`).
        unsafe { tensor_slice(&v, "DistTensor::local") }
    }
    /// The local shard, writable.
    ///
    /// # Safety
    /// Clones of this tensor, and views made by a Replicate -> Shard reshard, share its storage:
    /// no slice of those may be alive while the returned one is.
    pub unsafe fn local_mut<T: Element>(&mut self) -> Result<&mut [T]> {
        let v = self.local_view()?;
        let s = tensor_slice::<T>(&v, "DistTensor::local_mut")?;
        Ok(std::slice::from_raw_parts_mut(s.as_ptr() as *mut T, s.len()))
    }
    /// `lm_dist_tensor_to_dlpack`: the local shard as a managed tensor holding a reference on `self`.
    pub fn to_dlpack(&self) -> Result<ManagedTensor> {
        let mut m = ptr::null_mut();
        check(unsafe { sys::lm_dist_tensor_to_dlpack(self.raw, &mut m) })?;
        Ok(ManagedTensor { raw: m })
    }
    /// `lm_dist_tensor_reshard` onto `dst_mesh` (`None`: this tensor's mesh). Collective over both.
    pub fn reshard(&self, dst_mesh: Option<&Mesh>, placements: &[Placement]) -> Result<DistTensor> {
        let ndim = self.dst_ndim(dst_mesh)?;
        let pl = mesh_placements_n(ndim, placements, "DistTensor::reshard: placements")?;
        let mut raw = ptr::null_mut();
        check(unsafe {
            sys::lm_dist_tensor_reshard(&mut raw, self.raw, dst_mesh.map_or(ptr::null_mut(), |m| m.raw), pl.as_ptr())
        })?;
        Ok(DistTensor { raw })
    }
    /// The mesh dims of a call's target: `dst_mesh`'s, or (`None`) this tensor's mesh's.
    fn dst_ndim(&self, dst_mesh: Option<&Mesh>) -> Result<usize> {
        match dst_mesh {
            Some(m) => m.ndim(),
            None => self.mesh()?.ndim(),
        }
    }
    /// `lm_dist_tensor_transpose`: the dims permuted as `numpy.transpose(x, perm)` (a matrix:
    /// `&[1, 0]`), laid out with `placements` (in the result's dims) on `dst_mesh` (`None`: this
    /// tensor's mesh). Host or device tensors. Collective over both meshes.
    pub fn transpose(&self, perm: &[i32], dst_mesh: Option<&Mesh>, placements: &[Placement]) -> Result<DistTensor> {
        if perm.len() != self.ndim()? {
            return arg_error(format!("DistTensor::transpose: perm has {} entries, the tensor {} dims",
                                     perm.len(), self.ndim()?));
        }
        let ndim = self.dst_ndim(dst_mesh)?;
        let pl = mesh_placements_n(ndim, placements, "DistTensor::transpose: placements")?;
        let mut raw = ptr::null_mut();
        check(unsafe {
            sys::lm_dist_tensor_transpose(&mut raw, self.raw, perm.as_ptr(),
                                          dst_mesh.map_or(ptr::null_mut(), |m| m.raw), pl.as_ptr())
        })?;
        Ok(DistTensor { raw })
    }
    /// `lm_dist_tensor_transpose_into`: the dims permuted as `numpy.transpose(x, perm)`, written
    /// into `dst` (global shape this tensor's permuted, the same dtype; its own mesh and
    /// placements; a padded borrow keeps its padding), on self's device. Collective over both
    /// meshes.
    pub fn transpose_into(&self, dst: &mut DistTensor, perm: &[i32]) -> Result<()> {
        if perm.len() != self.ndim()? {
            return arg_error(format!("DistTensor::transpose_into: perm has {} entries, the tensor {} dims",
                                     perm.len(), self.ndim()?));
        }
        check(unsafe { sys::lm_dist_tensor_transpose_into(dst.raw, self.raw, perm.as_ptr()) })
    }
}

// ================================================================================================
// Persistent reshard plans, requests
// ================================================================================================

/// A persistent reshard plan (`lm_reshard_plan_t`).
#[derive(Debug)]
pub struct ReshardPlan {
    raw: sys::lm_reshard_plan_t,
}

impl Drop for ReshardPlan {
    fn drop(&mut self) {
        unsafe { sys::lm_reshard_plan_destroy(&mut self.raw) };
    }
}

impl ReshardPlan {
    /// `lm_reshard_plan_create` (local).
    pub fn new(src_mesh: &Mesh, src_placements: &[Placement], dst_mesh: &Mesh, dst_placements: &[Placement],
               global_shape: &[i64], dtype: DType) -> Result<ReshardPlan> {
        let sp = mesh_placements(src_mesh, src_placements, "ReshardPlan::new: src_placements")?;
        let dp = mesh_placements(dst_mesh, dst_placements, "ReshardPlan::new: dst_placements")?;
        let mut raw = ptr::null_mut();
        check(unsafe {
            sys::lm_reshard_plan_create(&mut raw, src_mesh.raw, sp.as_ptr(), dst_mesh.raw, dp.as_ptr(),
                                        to_int(global_shape.len(), "global_shape")?, global_shape.as_ptr(),
                                        dtype.raw())
        })?;
        Ok(ReshardPlan { raw })
    }
    pub fn as_raw(&self) -> sys::lm_reshard_plan_t {
        self.raw
    }
    /// `lm_reshard_plan_alloc_target`: a zero tensor laid out as the target.
    pub fn alloc_target(&self, device: Device) -> Result<DistTensor> {
        let mut raw = ptr::null_mut();
        check(unsafe { sys::lm_reshard_plan_alloc_target(&mut raw, self.raw, device.raw()) })?;
        Ok(DistTensor { raw })
    }
    /// `lm_reshard_plan_execute`: src -> dst (overwritten). Collective over both meshes.
    pub fn execute(&self, src: &DistTensor, dst: &mut DistTensor) -> Result<()> {
        check(unsafe { sys::lm_reshard_plan_execute(self.raw, src.raw, dst.raw) })
    }
    /// `lm_reshard_plan_start`: nonblocking; `src` and `dst` stay borrowed until the request ends.
    pub fn start<'a>(&'a self, src: &'a DistTensor, dst: &'a mut DistTensor) -> Result<Request<'a>> {
        let mut raw = ptr::null_mut();
        check(unsafe { sys::lm_reshard_plan_start(&mut raw, self.raw, src.raw, dst.raw) })?;
        Ok(Request { raw, _life: PhantomData })
    }
    /// Bytes this rank sends to other ranks per execution: `info(false)?.bytes_sent`
    /// (`lm_reshard_plan_info`, flags 0: local).
    pub fn bytes_sent(&self) -> Result<i64> {
        Ok(self.info(false)?.bytes_sent)
    }
    /// The backward plan (`lm_reshard_plan_adjoint`): gradients from the target mesh, in
    /// `placements_adjoint(target)`, to the source mesh, in `placements_adjoint(source)`. Local.
    pub fn adjoint(&self) -> Result<ReshardPlan> {
        let mut raw = std::ptr::null_mut();
        check(unsafe { sys::lm_reshard_plan_adjoint(&mut raw, self.raw) })?;
        Ok(ReshardPlan { raw })
    }
    /// What an execution moves (`lm_reshard_plan_info`): this rank's counts (local), or with
    /// `all_ranks` every rank's summed (collective over both meshes).
    pub fn info(&self, all_ranks: bool) -> Result<sys::lm_reshard_plan_info_t> {
        let mut i = sys::LM_RESHARD_PLAN_INFO_INIT;
        let flags = if all_ranks { sys::LM_PLAN_INFO_ALL_RANKS } else { 0 };
        check(unsafe { sys::lm_reshard_plan_info(self.raw, flags, &mut i) })?;
        Ok(i)
    }
    /// A one-line description of the plan's steps.
    pub fn describe(&self) -> Result<String> {
        read_buf(|b, s| unsafe { sys::lm_reshard_plan_describe(self.raw, b, s) })
    }
}

/// What a reshard would move, without building a plan (`lm_reshard_estimate`): what
/// [`ReshardPlan::info`] gives for `ReshardPlan::new(src_mesh, src_placements, dst_mesh
/// (None: src_mesh), dst_placements, global_shape, dtype)`. Local, or with `all_ranks` every
/// rank's summed (collective over both meshes). For layout searches: no handle, no buffer.
pub fn reshard_estimate(src_mesh: &Mesh, src_placements: &[Placement], dst_mesh: Option<&Mesh>,
                        dst_placements: &[Placement], global_shape: &[i64], dtype: DType, all_ranks: bool)
                        -> Result<sys::lm_reshard_plan_info_t> {
    let sp = mesh_placements(src_mesh, src_placements, "reshard_estimate: src_placements")?;
    let dp = mesh_placements(dst_mesh.unwrap_or(src_mesh), dst_placements, "reshard_estimate: dst_placements")?;
    let mut i = sys::LM_RESHARD_PLAN_INFO_INIT;
    let flags = if all_ranks { sys::LM_PLAN_INFO_ALL_RANKS } else { 0 };
    check(unsafe {
        sys::lm_reshard_estimate(src_mesh.raw, sp.as_ptr(), dst_mesh.map_or(ptr::null_mut(), |m| m.raw), dp.as_ptr(),
                                 to_int(global_shape.len(), "global_shape")?, global_shape.as_ptr(), dtype.raw(),
                                 flags, &mut i)
    })?;
    Ok(i)
}

// ================================================================================================
// Grouped reshards
// ================================================================================================

/// One entry of a [`ReshardGroup`] (`lm_reshard_entry_t`): what [`ReshardPlan::new`] takes, for
/// one tensor. `src_placements` has one placement per source mesh dim, `dst_placements` one per
/// target mesh dim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReshardEntry<'a> {
    pub global_shape: &'a [i64],
    pub dtype: DType,
    pub src_placements: &'a [Placement],
    pub dst_placements: &'a [Placement],
}

impl<'a> ReshardEntry<'a> {
    pub fn new(global_shape: &'a [i64], dtype: DType, src_placements: &'a [Placement],
               dst_placements: &'a [Placement]) -> ReshardEntry<'a> {
        ReshardEntry { global_shape, dtype, src_placements, dst_placements }
    }
}

/// Options of [`ReshardGroup::with_options`] (`lm_reshard_group_config_t`); `None`: the library's
/// default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReshardGroupOptions {
    /// Bound of a bucket in global bytes (default 64 MiB). Entries are dealt in order into
    /// buckets; an entry above the bound runs alone, through its own plan.
    pub bucket_bytes: Option<usize>,
    /// Entries larger than this (global bytes, default 1 MiB) run alone, through their own plan:
    /// coalescing pays for small, latency-bound tensors.
    pub alone_bytes: Option<usize>,
}

/// A grouped reshard plan (`lm_reshard_group_t`): N reshards between one pair of meshes that
/// run as one. Each step sends one message per peer carrying every entry's bytes (per bucket),
/// not one round per tensor; the results are the same bits as one [`ReshardPlan`] per entry.
#[derive(Debug)]
pub struct ReshardGroup {
    raw: sys::lm_reshard_group_t,
}

impl Drop for ReshardGroup {
    fn drop(&mut self) {
        unsafe { sys::lm_reshard_group_destroy(&mut self.raw) };
    }
}

/// The handles of a slice of tensors, for the C arrays.
fn raw_tensors<S: Borrow<DistTensor>>(t: &[S]) -> Vec<sys::lm_dist_tensor_t> {
    t.iter().map(|x| x.borrow().raw).collect()
}

impl ReshardGroup {
    /// `lm_reshard_group_create` from `src_mesh` to `dst_mesh` (`None`: `src_mesh`), with the
    /// default options (local).
    pub fn new(src_mesh: &Mesh, dst_mesh: Option<&Mesh>, entries: &[ReshardEntry<'_>]) -> Result<ReshardGroup> {
        ReshardGroup::with_options(src_mesh, dst_mesh, entries, &ReshardGroupOptions::default())
    }

    /// `lm_reshard_group_create` with [`ReshardGroupOptions`] (local).
    pub fn with_options(src_mesh: &Mesh, dst_mesh: Option<&Mesh>, entries: &[ReshardEntry<'_>],
                        options: &ReshardGroupOptions) -> Result<ReshardGroup> {
        let snd = src_mesh.ndim()?;
        let dnd = match dst_mesh {
            Some(m) => m.ndim()?,
            None => snd,
        };
        let mut pls = Vec::with_capacity(entries.len());
        for (i, e) in entries.iter().enumerate() {
            let what = |arg: &str| format!("ReshardGroup::new: entries[{i}].{arg}");
            let sp = mesh_placements_n(snd, e.src_placements, &what("src_placements"))?;
            let dp = mesh_placements_n(dnd, e.dst_placements, &what("dst_placements"))?;
            pls.push((sp, dp));
        }
        let mut raw_entries = Vec::with_capacity(entries.len());
        for (i, (e, (sp, dp))) in entries.iter().zip(&pls).enumerate() {
            raw_entries.push(sys::lm_reshard_entry_t {
                ndim: to_int(e.global_shape.len(), &format!("entries[{i}].global_shape"))?,
                global_shape: e.global_shape.as_ptr(),
                dtype: e.dtype.raw(),
                src_placements: sp.as_ptr(),
                dst_placements: dp.as_ptr(),
            });
        }
        let mut cfg = sys::LM_RESHARD_GROUP_CONFIG_INIT;
        if let Some(b) = options.bucket_bytes {
            cfg.bucket_bytes = b;
        }
        if let Some(a) = options.alone_bytes {
            cfg.alone_bytes = a;
        }
        // Default options: NULL, the library's defaults.
        let cfg_ptr: *const sys::lm_reshard_group_config_t =
            if *options == ReshardGroupOptions::default() { ptr::null() } else { &cfg };
        let mut raw = ptr::null_mut();
        check(unsafe {
            sys::lm_reshard_group_create(&mut raw, src_mesh.raw, dst_mesh.map_or(ptr::null_mut(), |m| m.raw),
                                         to_int(raw_entries.len(), "entries")?, raw_entries.as_ptr(), cfg_ptr)
        })?;
        Ok(ReshardGroup { raw })
    }
    pub fn as_raw(&self) -> sys::lm_reshard_group_t {
        self.raw
    }
    fn counts(&self) -> Result<(usize, usize)> {
        let (mut n, mut b) = (0, 0);
        check(unsafe { sys::lm_reshard_group_size(self.raw, &mut n, &mut b) })?;
        Ok((n as usize, b as usize))
    }
    /// The number of entries (`lm_reshard_group_size`).
    pub fn len(&self) -> Result<usize> {
        Ok(self.counts()?.0)
    }
    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }
    /// The number of buckets the entries were dealt into (0 for no entries).
    pub fn buckets(&self) -> Result<usize> {
        Ok(self.counts()?.1)
    }
    /// `lm_reshard_group_alloc_targets`: zero tensors laid out as the entries' targets (local).
    pub fn alloc_targets(&self, device: Device) -> Result<Vec<DistTensor>> {
        let n = self.len()?;
        let mut raw = vec![ptr::null_mut(); n];
        check(unsafe { sys::lm_reshard_group_alloc_targets(raw.as_mut_ptr(), self.raw, device.raw(), n as c_int) })?;
        Ok(raw.into_iter().map(|raw| DistTensor { raw }).collect())
    }
    /// `src` and `dst` as C arrays of one length (the C calls read one count for both).
    fn arrays<S: Borrow<DistTensor>, D: BorrowMut<DistTensor>>(what: &str, src: &[S], dst: &[D])
        -> Result<(c_int, Vec<sys::lm_dist_tensor_t>, Vec<sys::lm_dist_tensor_t>)> {
        if src.len() != dst.len() {
            return arg_error(format!("ReshardGroup::{what}: dst: {} tensors for {} src tensors", dst.len(), src.len()));
        }
        let d: Vec<sys::lm_dist_tensor_t> = dst.iter().map(|x| x.borrow().raw).collect();
        Ok((to_int(src.len(), "src")?, raw_tensors(src), d))
    }
    /// `lm_reshard_group_execute`: `src[i]` -> `dst[i]` (overwritten) for every entry. Collective
    /// over both meshes; one agreement covers the whole group. No target may overlap another
    /// target or any source (clones share storage: the library refuses them).
    pub fn execute<S: Borrow<DistTensor>, D: BorrowMut<DistTensor>>(&self, src: &[S], dst: &mut [D]) -> Result<()> {
        let (n, s, d) = ReshardGroup::arrays("execute", src, dst)?;
        check(unsafe { sys::lm_reshard_group_execute(self.raw, n, s.as_ptr(), d.as_ptr()) })
    }
    /// `lm_reshard_group_start`: nonblocking; the tensors stay borrowed until the request ends
    /// (at most one request per group at a time).
    pub fn start<'a, S: Borrow<DistTensor>, D: BorrowMut<DistTensor>>(&'a self, src: &'a [S], dst: &'a mut [D])
        -> Result<Request<'a>> {
        let (n, s, d) = ReshardGroup::arrays("start", src, dst)?;
        let mut raw = ptr::null_mut();
        check(unsafe { sys::lm_reshard_group_start(&mut raw, self.raw, n, s.as_ptr(), d.as_ptr()) })?;
        Ok(Request { raw, _life: PhantomData })
    }
}

/// [`DistTensor::reshard`] for many tensors of one mesh at once, `tensors[i]` to `placements[i]`
/// on `dst_mesh` (`None`: theirs), through one grouped reshard (one message per peer and step for
/// all of them): a [`ReshardGroup`] made from the tensors' entries, its targets allocated on
/// `tensors[0]`'s device, executed and dropped. On failure no tensor is left. Collective over both
/// meshes.
pub fn reshard_many<S: Borrow<DistTensor>, P: AsRef<[Placement]>>(tensors: &[S], dst_mesh: Option<&Mesh>,
                                                                   placements: &[P]) -> Result<Vec<DistTensor>> {
    if placements.len() != tensors.len() {
        return arg_error(format!("reshard_many: placements: {} entries for {} tensors", placements.len(),
                                 tensors.len()));
    }
    let first = match tensors.first() {
        Some(t) => t.borrow(),
        None => return Ok(Vec::new()),
    };
    let src_mesh = first.mesh()?;
    let snd = src_mesh.ndim()?;
    let ndim = match dst_mesh {
        Some(m) => m.ndim()?,
        None => snd,
    };
    let pls = placements.iter().enumerate()
        .map(|(i, p)| mesh_placements_n(ndim, p.as_ref(), &format!("reshard_many: placements[{i}]")))
        .collect::<Result<Vec<_>>>()?;
    // Each tensor's global shape and placements as the C gives them (what an entry points to).
    let mut from = Vec::with_capacity(tensors.len());
    for (i, t) in tensors.iter().enumerate() {
        let t = t.borrow();
        if t.mesh()?.raw != src_mesh.raw {
            return arg_error(format!("reshard_many: tensors[{i}] lives on another mesh than tensors[0] (one \
                                      call moves tensors of one mesh)"));
        }
        let mut sp = vec![sys::lm_placement_t::default(); snd];
        check(unsafe { sys::lm_dist_tensor_placements(t.raw, sp.as_mut_ptr(), snd as c_int) })?;
        let mut dtype = sys::LM_FLOAT64;
        check(unsafe { sys::lm_dist_tensor_dtype(t.raw, &mut dtype) })?;
        from.push((t.global_shape()?, dtype, sp));
    }
    let mut entries = Vec::with_capacity(tensors.len());
    for (i, ((shape, dtype, sp), dp)) in from.iter().zip(&pls).enumerate() {
        entries.push(sys::lm_reshard_entry_t {
            ndim: to_int(shape.len(), &format!("tensors[{i}] ndim"))?,
            global_shape: shape.as_ptr(),
            dtype: *dtype,
            src_placements: sp.as_ptr(),
            dst_placements: dp.as_ptr(),
        });
    }
    let mut raw = ptr::null_mut();
    check(unsafe {
        sys::lm_reshard_group_create(&mut raw, src_mesh.raw, dst_mesh.map_or(ptr::null_mut(), |m| m.raw),
                                     to_int(entries.len(), "tensors")?, entries.as_ptr(), ptr::null())
    })?;
    let group = ReshardGroup { raw };  // destroyed on every return
    let mut out = group.alloc_targets(first.device()?)?;  // dropped if execute fails
    group.execute(tensors, &mut out[..])?;
    Ok(out)
}

/// A nonblocking reshard in flight ([`ReshardPlan::start`], [`ReshardGroup::start`]). Dropping it
/// waits for completion (errors are then lost: call [`wait`](Request::wait) to see them).
pub struct Request<'a> {
    raw: sys::lm_request_t,
    _life: PhantomData<&'a mut DistTensor>,
}

impl Request<'_> {
    /// `lm_request_test`: true once complete.
    pub fn test(&mut self) -> Result<bool> {
        if self.raw.is_null() {
            return Ok(true);
        }
        let mut done = 0;
        check(unsafe { sys::lm_request_test(&mut self.raw, &mut done) })?;
        Ok(done != 0)
    }
    /// `lm_request_wait`.
    pub fn wait(mut self) -> Result<()> {
        if self.raw.is_null() {
            return Ok(());
        }
        check(unsafe { sys::lm_request_wait(&mut self.raw) })
    }
}

impl Drop for Request<'_> {
    fn drop(&mut self) {
        if !self.raw.is_null() {
            unsafe { sys::lm_request_wait(&mut self.raw) };
        }
    }
}

// ================================================================================================
// local_map
// ================================================================================================

/// An input of [`LocalMap`].
#[derive(Debug, Clone, Copy)]
pub enum Arg<'a> {
    None,
    /// Becomes the local shard inside the function.
    Dist(&'a DistTensor),
    /// A borrowed DLTensor passed through as is.
    Tensor(&'a sys::DLTensor),
    Int(i64),
    Double(f64),
    Pointer(*mut c_void),
}

/// What the function sees of one input.
#[derive(Debug, Clone, Copy)]
pub enum Local<'a> {
    None,
    Tensor(LocalTensor<'a>),
    Int(i64),
    Double(f64),
    Pointer(*mut c_void),
}

impl<'a> Local<'a> {
    pub fn tensor(&self) -> Result<LocalTensor<'a>> {
        match self {
            Local::Tensor(t) => Ok(*t),
            other => arg_error(format!("expected a tensor input, got {other:?}")),
        }
    }
    pub fn int(&self) -> Result<i64> {
        match self {
            Local::Int(i) => Ok(*i),
            other => arg_error(format!("expected an int input, got {other:?}")),
        }
    }
    pub fn double(&self) -> Result<f64> {
        match self {
            Local::Double(d) => Ok(*d),
            other => arg_error(format!("expected a double input, got {other:?}")),
        }
    }
}

/// A local tensor inside the function (read-only: it may share memory with the caller's tensor).
#[derive(Debug, Clone, Copy)]
pub struct LocalTensor<'a> {
    raw: &'a sys::DLTensor,
}

impl<'a> LocalTensor<'a> {
    pub fn raw(&self) -> &'a sys::DLTensor {
        self.raw
    }
    pub fn shape(&self) -> Vec<i64> {
        tensor_shape(self.raw)
    }
    pub fn dtype(&self) -> Option<DType> {
        DType::from_raw(self.raw.dtype)
    }
    pub fn data<T: Element>(&self) -> Result<&'a [T]> {
        // SAFETY: the view is valid during the call, which 'a does not outlive.
        unsafe { tensor_slice(self.raw, "LocalTensor::data") }
    }
}

/// An output the function returns.
pub enum Out {
    None,
    /// A host tensor (wrapped as a dist tensor with the declared placements).
    Tensor(ManagedTensor),
    Int(i64),
    Double(f64),
    Pointer(*mut c_void),
}

impl Out {
    /// A tensor output from a vector and its local shape.
    pub fn tensor<T: Element>(data: Vec<T>, shape: &[i64]) -> Result<Out> {
        Ok(Out::Tensor(ManagedTensor::from_vec(data, shape)?))
    }
}

/// A result of [`LocalMap::run`].
#[derive(Debug)]
pub enum Output {
    None,
    Dist(DistTensor),
    Int(i64),
    Double(f64),
    Pointer(*mut c_void),
}

impl Output {
    pub fn into_dist(self) -> Result<DistTensor> {
        match self {
            Output::Dist(t) => Ok(t),
            other => arg_error(format!("expected a dist tensor output, got {other:?}")),
        }
    }
}

/// What the function gets besides its inputs.
pub struct Ctx<'a> {
    mesh: MeshRef<'a>,
}

impl Ctx<'_> {
    /// The mesh of the call (its communicators may be used inside the function).
    pub fn mesh(&self) -> &Mesh {
        &self.mesh
    }
}

/// The error type a [`LocalMap`] function returns: any error (a `String` or `&str` converts with
/// `?`/`.into()`). A [`localmap::Error`](Error) keeps its status; others become `Status::User`.
pub type FnError = Box<dyn std::error::Error + Send + Sync>;

/// `lm_local_map` as a builder: inputs, placements, outputs, then [`run`](LocalMap::run).
///
/// ```no_run
/// # use localmap::*;
/// # fn f(x: &DistTensor) -> Result<()> {
/// let sum = LocalMap::new()
///     .input(Arg::Dist(x))
///     .output(&[Placement::Partial(ReduceOp::Sum)])
///     .run(|_ctx, inp| {
///         let s: f64 = inp[0].tensor()?.data::<f64>()?.iter().sum();
///         Ok(vec![Out::tensor(vec![s], &[1])?])
///     })?;
/// # Ok(()) }
/// ```
#[derive(Default)]
pub struct LocalMap<'a> {
    inputs: Vec<sys::lm_arg_t>,
    in_pl: Vec<Option<Vec<sys::lm_placement_t>>>,
    in_grad: Vec<Option<Vec<sys::lm_placement_t>>>,
    out_pl: Vec<Option<Vec<sys::lm_placement_t>>>,
    out_shapes: Vec<Option<Vec<i64>>>,
    mesh: Option<&'a Mesh>,
    flags: u32,
    _life: PhantomData<&'a DistTensor>,
}

impl<'a> LocalMap<'a> {
    pub fn new() -> LocalMap<'a> {
        LocalMap::default()
    }
    fn push_input(mut self, a: Arg<'a>, pl: Option<&[Placement]>) -> Self {
        let mut r = sys::lm_arg_t::default();
        match a {
            Arg::None => {}
            Arg::Dist(t) => { r.kind = sys::LM_ARG_DIST_TENSOR; r.ptr = t.raw as *mut c_void; }
            Arg::Tensor(t) => { r.kind = sys::LM_ARG_TENSOR; r.ptr = t as *const sys::DLTensor as *mut c_void; }
            Arg::Int(i) => { r.kind = sys::LM_ARG_INT64; r.i64 = i; }
            Arg::Double(d) => { r.kind = sys::LM_ARG_DOUBLE; r.f64 = d; }
            Arg::Pointer(p) => { r.kind = sys::LM_ARG_POINTER; r.ptr = p; }
        }
        self.inputs.push(r);
        self.in_pl.push(pl.map(raw_placements));
        self.in_grad.push(None);
        self
    }
    /// The placements of the gradient of the input just added, as a backward pass computes it
    /// (PyTorch's `in_grad_placements`; default: the placements `f` sees). Read by
    /// [`run_recorded`](Self::run_recorded).
    pub fn grad_placements(mut self, placements: &[Placement]) -> Self {
        if let Some(g) = self.in_grad.last_mut() {
            *g = Some(raw_placements(placements));
        }
        self
    }
    /// An input as it is.
    pub fn input(self, a: Arg<'a>) -> Self {
        self.push_input(a, None)
    }
    /// A dist input that must have `placements` (resharded with [`reshard_inputs`](Self::reshard_inputs)).
    pub fn input_as(self, a: Arg<'a>, placements: &[Placement]) -> Self {
        self.push_input(a, Some(placements))
    }
    /// A tensor output with these placements (its global shape from the local extents).
    pub fn output(mut self, placements: &[Placement]) -> Self {
        self.out_pl.push(Some(raw_placements(placements)));
        self.out_shapes.push(None);
        self
    }
    /// A tensor output with these placements and this global shape.
    pub fn output_shaped(mut self, placements: &[Placement], global_shape: &[i64]) -> Self {
        self.out_pl.push(Some(raw_placements(placements)));
        self.out_shapes.push(Some(global_shape.to_vec()));
        self
    }
    /// A non-tensor output (int, double, pointer or none).
    pub fn output_value(mut self) -> Self {
        self.out_pl.push(None);
        self.out_shapes.push(None);
        self
    }
    /// The mesh (default: the dist inputs').
    pub fn mesh(mut self, mesh: &'a Mesh) -> Self {
        self.mesh = Some(mesh);
        self
    }
    /// `LM_LOCAL_MAP_RESHARD_INPUTS`.
    pub fn reshard_inputs(mut self) -> Self {
        self.flags |= sys::LM_LOCAL_MAP_RESHARD_INPUTS;
        self
    }
    /// `LM_LOCAL_MAP_NO_AGREE`: a failure stays local (every rank must then fail alike).
    pub fn no_agree(mut self) -> Self {
        self.flags |= sys::LM_LOCAL_MAP_NO_AGREE;
        self
    }
    /// `LM_LOCAL_MAP_SHAPES_EVEN`.
    pub fn shapes_even(mut self) -> Self {
        self.flags |= sys::LM_LOCAL_MAP_SHAPES_EVEN;
        self
    }
    /// Raw `LM_LOCAL_MAP_*` flags, or-ed in.
    pub fn flags(mut self, flags: u32) -> Self {
        self.flags |= flags;
        self
    }

    /// Runs `f` on every rank's local shards (collective over the mesh; agrees). `f` returns one
    /// [`Out`] per declared output. An `Err` or a panic in `f` fails the call on every rank: on
    /// this rank with the error's text (a panic's message) in [`Error::message`], on the others
    /// with `Status::Remote` naming this rank.
    pub fn run<F>(self, f: F) -> Result<Vec<Output>>
    where
        F: FnMut(&Ctx<'_>, &[Local<'_>]) -> std::result::Result<Vec<Out>, FnError>,
    {
        self.run_impl(f, false).map(|(o, _)| o)
    }

    /// [`run`](Self::run) through `lm_local_map_ex`, with the [`grad_placements`](Self::grad_placements)
    /// given, returning also the call's [`LocalMapRecord`] for a hand-written backward pass.
    pub fn run_recorded<F>(self, f: F) -> Result<(Vec<Output>, LocalMapRecord)>
    where
        F: FnMut(&Ctx<'_>, &[Local<'_>]) -> std::result::Result<Vec<Out>, FnError>,
    {
        let (o, r) = self.run_impl(f, true)?;
        Ok((o, r.expect("lm_local_map_ex succeeded without a record")))
    }

    fn run_impl<F>(self, f: F, want_record: bool) -> Result<(Vec<Output>, Option<LocalMapRecord>)>
    where
        F: FnMut(&Ctx<'_>, &[Local<'_>]) -> std::result::Result<Vec<Out>, FnError>,
    {
        self.check_placements()?;
        let mut call = Call {
            f,
            out_ndims: self.out_shapes.iter().map(|s| s.as_ref().map(|v| v.len())).collect(),
        };
        let nin = to_int(self.inputs.len(), "inputs")?;
        let nout = to_int(self.out_pl.len(), "outputs")?;
        let in_pl: Vec<*const sys::lm_placement_t> =
            self.in_pl.iter().map(|p| p.as_ref().map_or(ptr::null(), |v| v.as_ptr())).collect();
        let out_pl: Vec<*const sys::lm_placement_t> =
            self.out_pl.iter().map(|p| p.as_ref().map_or(ptr::null(), |v| v.as_ptr())).collect();
        let out_shapes: Vec<*const i64> =
            self.out_shapes.iter().map(|s| s.as_ref().map_or(ptr::null(), |v| v.as_ptr())).collect();
        let any_shape = self.out_shapes.iter().any(|s| s.is_some());
        let any_in_pl = self.in_pl.iter().any(|p| p.is_some());
        let in_grad: Vec<*const sys::lm_placement_t> =
            self.in_grad.iter().map(|p| p.as_ref().map_or(ptr::null(), |v| v.as_ptr())).collect();
        let mut record: sys::lm_local_map_record_t = ptr::null_mut();
        let mut opt = sys::LM_LOCAL_MAP_OPTIONS_INIT;
        if self.in_grad.iter().any(|p| p.is_some()) {
            opt.in_grad_placements = in_grad.as_ptr();
        }
        if want_record {
            opt.record = &mut record;
        }
        let mut outputs = vec![sys::lm_arg_t::default(); self.out_pl.len()];
        let st = unsafe {
            sys::lm_local_map_ex(
                Some(trampoline::<F>),
                &mut call as *mut Call<F> as *mut c_void,
                nin,
                self.inputs.as_ptr(),
                if any_in_pl { in_pl.as_ptr() } else { ptr::null() },
                nout,
                out_pl.as_ptr(),
                if any_shape { out_shapes.as_ptr() } else { ptr::null() },
                self.mesh.map_or(ptr::null_mut(), |m| m.raw),
                self.flags,
                &opt,
                outputs.as_mut_ptr(),
            )
        };
        check(st)?;
        let record = if record.is_null() { None } else { Some(LocalMapRecord { raw: record }) };
        let outputs = outputs
            .into_iter()
            .map(|o| match o.kind {
                sys::LM_ARG_DIST_TENSOR => Output::Dist(DistTensor { raw: o.ptr as sys::lm_dist_tensor_t }),
                sys::LM_ARG_INT64 => Output::Int(o.i64),
                sys::LM_ARG_DOUBLE => Output::Double(o.f64),
                sys::LM_ARG_POINTER => Output::Pointer(o.ptr),
                _ => Output::None,
            })
            .collect();
        Ok((outputs, record))
    }
}

/// Which placements [`LocalMapRecord::placements`] reports (`lm_record_which_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordWhich {
    /// An input's own placements, before any move (on its own mesh).
    Input,
    /// The placements of the view `f` got.
    In,
    /// Those of its gradient: [`LocalMap::grad_placements`], else `In`.
    InGrad,
    /// An output's placements.
    Out,
    /// Its gradient's: [`placements_adjoint`] of `Out`.
    OutGrad,
}

/// The record of one [`LocalMap::run_recorded`] call (`lm_local_map_record_t`): what its backward
/// pass needs. Dropping it destroys it (local).
#[derive(Debug)]
pub struct LocalMapRecord {
    raw: sys::lm_local_map_record_t,
}

impl LocalMapRecord {
    /// `lm_local_map_record_placements`: the recorded placements `which` of input or output `index`.
    pub fn placements(&self, which: RecordWhich, index: usize) -> Result<Vec<Placement>> {
        let w = match which {
            RecordWhich::Input => sys::LM_RECORD_INPUT,
            RecordWhich::In => sys::LM_RECORD_IN,
            RecordWhich::InGrad => sys::LM_RECORD_IN_GRAD,
            RecordWhich::Out => sys::LM_RECORD_OUT,
            RecordWhich::OutGrad => sys::LM_RECORD_OUT_GRAD,
        };
        let i = to_int(index, "index")?;
        let mut v = vec![sys::lm_placement_t::default(); 32];
        let mut n: c_int = 0;
        check(unsafe { sys::lm_local_map_record_placements(self.raw, w, i, 32, v.as_mut_ptr(), &mut n) })?;
        v.truncate(n as usize);
        v.into_iter()
            .map(|p| Placement::from_raw(p).ok_or_else(|| Error::new(Status::NotSupported, format!("placement {p:?}"))))
            .collect()
    }
    /// `lm_local_map_record_input_grad`: `grad` moved to input `index`'s own mesh and the adjoint
    /// of its own placements (collective).
    pub fn input_grad(&self, index: usize, grad: &DistTensor) -> Result<DistTensor> {
        let i = to_int(index, "index")?;
        let mut out = ptr::null_mut();
        check(unsafe { sys::lm_local_map_record_input_grad(&mut out, self.raw, i, grad.raw) })?;
        Ok(DistTensor { raw: out })
    }
}

impl Drop for LocalMapRecord {
    fn drop(&mut self) {
        unsafe { sys::lm_local_map_record_destroy(&mut self.raw) };
    }
}

impl LocalMap<'_> {
    /// The mesh of the call: the one given, else the first dist input's (None: a local call).
    fn call_mesh_ndim(&self) -> Result<Option<usize>> {
        if let Some(m) = self.mesh {
            return Ok(Some(m.ndim()?));
        }
        match self.inputs.iter().find(|a| a.kind == sys::LM_ARG_DIST_TENSOR) {
            Some(a) => {
                let (mut m, mut n) = (ptr::null_mut(), 0);
                check(unsafe { sys::lm_dist_tensor_mesh(a.ptr as sys::lm_dist_tensor_t, &mut m) })?;
                check(unsafe { sys::lm_mesh_ndim(m, &mut n) })?;
                Ok(Some(n as usize))
            }
            None => Ok(None),
        }
    }
    /// `lm_local_map` reads one placement per dim of the call's mesh from each entry.
    fn check_placements(&self) -> Result<()> {
        let n = match self.call_mesh_ndim()? {
            Some(n) => n,
            None => return Ok(()), // a local call: the library refuses placements itself
        };
        for (i, p) in self.in_pl.iter().enumerate() {
            if let Some(v) = p {
                if v.len() != n {
                    return arg_error(format!("LocalMap: input_as placements of inputs[{i}]: {} placements for a mesh \
                                              of {n} dims (one per mesh dim)", v.len()));
                }
            }
        }
        for (i, p) in self.in_grad.iter().enumerate() {
            if let Some(v) = p {
                if v.len() != n {
                    return arg_error(format!("LocalMap: grad_placements of inputs[{i}]: {} placements for a \
                                              mesh of {n} dims (one per mesh dim)", v.len()));
                }
            }
        }
        for (j, p) in self.out_pl.iter().enumerate() {
            if let Some(v) = p {
                if v.len() != n {
                    return arg_error(format!("LocalMap: placements of outputs[{j}]: {} placements for a mesh \
                                              of {n} dims (one per mesh dim)", v.len()));
                }
            }
        }
        Ok(())
    }
}

/// What the trampoline gets: the closure, and the length of each `output_shaped` global shape
/// (the library reads as many extents as the tensor the closure returns has dims).
struct Call<F> {
    f: F,
    out_ndims: Vec<Option<usize>>,
}

fn panic_text(p: &(dyn Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "(a panic without a message)".to_string()
    }
}

/// The `lm_local_fn_t` that calls the closure. Nothing unwinds out of it: panics are caught and
/// become `LM_ERR_USER` with the panic text.
#[allow(unused_unsafe)] // explicit blocks for Rust 2024; older rustc calls them unnecessary here
unsafe extern "C" fn trampoline<F>(user_data: *mut c_void, mesh: sys::lm_mesh_t, nin: c_int,
                                   inputs: *const sys::lm_arg_t, nout: c_int, outputs: *mut sys::lm_arg_t)
    -> sys::lm_status_t
where
    F: FnMut(&Ctx<'_>, &[Local<'_>]) -> std::result::Result<Vec<Out>, FnError>,
{
    let run = || -> sys::lm_status_t {
        // SAFETY: user_data is the &mut Call<F> of LocalMap::run, alive for the whole call.
        let call = unsafe { &mut *(user_data as *mut Call<F>) };
        let f = &mut call.f;
        let ins = if nin > 0 { unsafe { std::slice::from_raw_parts(inputs, nin as usize) } } else { &[] };
        let locals: Vec<Local<'_>> = ins
            .iter()
            .map(|a| match a.kind {
                sys::LM_ARG_TENSOR => match unsafe { (a.ptr as *const sys::DLTensor).as_ref() } {
                    Some(t) => Local::Tensor(LocalTensor { raw: t }),
                    None => Local::None,
                },
                sys::LM_ARG_INT64 => Local::Int(a.i64),
                sys::LM_ARG_DOUBLE => Local::Double(a.f64),
                sys::LM_ARG_POINTER => Local::Pointer(a.ptr),
                _ => Local::None,
            })
            .collect();
        let ctx = Ctx { mesh: Mesh::borrowed(mesh) };
        match f(&ctx, &locals) {
            Ok(outs) => {
                if outs.len() != nout as usize {
                    set_error_message(&format!("the function returned {} outputs, {} declared", outs.len(), nout));
                    return sys::LM_ERR_USER;
                }
                for (j, o) in outs.iter().enumerate() {
                    if let (Out::Tensor(m), Some(Some(n))) = (o, call.out_ndims.get(j)) {
                        let nd = m.dl_tensor().ndim;
                        if usize::try_from(nd).ok() != Some(*n) {
                            set_error_message(&format!("LocalMap: outputs[{j}] is a {nd}-d tensor but output_shaped \
                                                        gave a global shape of {n} extents"));
                            return sys::LM_ERR_INVALID_ARGUMENT;
                        }
                    }
                }
                let slots = unsafe { std::slice::from_raw_parts_mut(outputs, nout as usize) };
                for (slot, o) in slots.iter_mut().zip(outs) {
                    *slot = sys::lm_arg_t::default();
                    match o {
                        Out::None => {}
                        Out::Tensor(m) => { slot.kind = sys::LM_ARG_MANAGED_TENSOR; slot.ptr = m.into_raw() as *mut c_void; }
                        Out::Int(i) => { slot.kind = sys::LM_ARG_INT64; slot.i64 = i; }
                        Out::Double(d) => { slot.kind = sys::LM_ARG_DOUBLE; slot.f64 = d; }
                        Out::Pointer(p) => { slot.kind = sys::LM_ARG_POINTER; slot.ptr = p; }
                    }
                }
                sys::LM_SUCCESS
            }
            Err(e) => {
                set_error_message(&e.to_string());
                match e.downcast_ref::<Error>() {
                    Some(le) if le.status != Status::Success => le.status.raw(),
                    _ => sys::LM_ERR_USER,
                }
            }
        }
    };
    match catch_unwind(AssertUnwindSafe(run)) {
        Ok(st) => st,
        Err(payload) => {
            // Dropping the payload could itself panic; keep it from unwinding out.
            let text = panic_text(&*payload);
            let _ = catch_unwind(AssertUnwindSafe(move || drop(payload)));
            let _ = catch_unwind(|| set_error_message(&format!("panicked: {text}")));
            sys::LM_ERR_USER
        }
    }
}
