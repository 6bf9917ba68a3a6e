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

mod calls;
pub use calls::*;

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
// Status and errors. The enums of C values (Status, ReduceOp, Transport, RecordWhich, ShapeMode,
// DType), the handles' Drop and raw conversions, LocalMap's flag methods and the wrappers of one C
// call come from src/calls.rs (make api-generate).
// ================================================================================================

/// A failed call: its status and the library's message (`lm_last_error_message`), in this
/// crate's terms: the Rust method, argument, type and field names, not the C ones.
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
    /// The status and the message: "InvalidArgument: DistTensor::reshard: placements: ...".
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}: {}", self.status, self.message)
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

/// The status of a C call that Rust `method` (`"DistTensor::reshard"`) made, as a `Result`
/// whose error speaks Rust ([`rust_words`]).
fn call(method: &str, code: sys::lm_status_t) -> Result<()> {
    if code == sys::LM_SUCCESS {
        return Ok(());
    }
    Err(Error::new(Status::from_raw(code), rust_words(method, &last_error_message())))
}

fn arg_error<T>(message: String) -> Result<T> {
    Err(Error::new(Status::InvalidArgument, message))
}

fn to_int(n: usize, what: &str) -> Result<c_int> {
    c_int::try_from(n).or_else(|_| arg_error(format!("{what}: {n} entries is too many")))
}

/// A C string of `s` (an error naming `what` where it holds a NUL byte).
fn c_string(method: &str, what: &str, s: &str) -> Result<CString> {
    CString::new(s).or_else(|_| arg_error(format!("{method}: {what} contains a NUL byte")))
}

/// C names in the library's messages and the Rust names a caller of this crate knows, replaced in
/// this order (no replacement holds a name replaced after it).
const RUST_WORDS: &[(&str, &str)] = &[
    ("Ragged shard extents 0 (LM_EXTENTS_AGREED: agreed from the local shapes)", "Placement::ragged_agreed"),
    ("lm_dist_tensor_from_local with LM_SHAPE_ALLGATHER", "DistTensor::from_local with ShapeMode::Allgather"),
    ("an lm_local_map output without out_shapes and LM_LOCAL_MAP_SHAPES_EVEN",
     "a LocalMap output neither output_shaped nor shapes_even"),
    ("is not a registered extents id", "is the id of no live Extents"),
    ("Ragged shard extents id", "Placement::Ragged extents id"),
    ("Ragged shard", "Placement::Ragged"),
    ("BlockCyclic block", "Placement::BlockCyclic block"),
    ("BlockCyclic source coordinate", "Placement::BlockCyclic src"),
    ("BlockCyclic source", "Placement::BlockCyclic src"),
    ("BlockCyclic dim", "Placement::BlockCyclic dim"),
    ("a BlockCyclic", "a Placement::BlockCyclic"),
    ("Shard order", "Placement::ShardOrdered order"),
    ("Shard dim", "Placement::Shard dim"),
    ("lm_extents_create", "Extents::new"),
    ("config->dim_names", "names"),
    ("config->ranks", "ranks"),
    ("in_grad_placements", "grad_placements"),
    ("in_placements", "input_as placements"),
    ("out_placements", "output placements"),
];

/// The library's `message` in Rust's terms: the C function it names first (`lm_x: `, again after
/// "rank R failed: ") becomes `method`, the C names of [`RUST_WORDS`] and of statuses the Rust
/// ones, and the extents id of a ragged placement the lengths it stands for.
fn rust_words(method: &str, message: &str) -> String {
    let word_end = |s: &str, at: usize| {
        s[at..].find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).map_or(s.len(), |n| at + n)
    };
    let mut s = message.to_string();
    if let Some(at) = s.find("lm_").filter(|&at| s[word_end(&s, at)..].starts_with(':')) {
        s = s.replace(&s[at..=word_end(&s, at)], &format!("{method}:"));
    }
    for (c, rust) in RUST_WORDS {
        s = s.replace(c, rust);
    }
    for status in (0..64).map(Status::from_raw).filter(|st| !matches!(st, Status::Other(_))) {
        s = s.replace(status.as_str().split(':').next().unwrap_or("?"), &format!("{status:?}"));
    }
    while let Some(at) = s.find("extents id ") {
        let end = word_end(&s, at + 11);
        let id = &s[at + 11..end];
        let lengths = id.parse().ok().and_then(|id| Extents::lengths(id).ok());
        let lengths = lengths.map_or(id.to_string(), |v| format!("{v:?}"));
        s.replace_range(at..end, &format!("extents {lengths}"));
    }
    s
}

// ================================================================================================
// Array lengths: checked against the rules of api/localmap.api before C reads the slices
// ================================================================================================

/// What a call passes for an argument that a length rule reads ([`lengths`]).
enum Of<'a> {
    /// A mesh (None: NULL, which rules read as "the other one").
    Mesh(Option<&'a Mesh>),
    /// A dist tensor: its ndim, and its mesh's.
    Tensor(&'a DistTensor),
    /// A slice, as the Rust caller names it, of so many entries.
    Slice(&'a str, usize),
    /// A slice of slices, as the Rust caller names it: each one's length (None: not passed).
    Slices(&'a str, Vec<Option<usize>>),
}

/// Checks the slices that Rust `method` passes to C `function` against the function's length
/// rules (`sys::lengths`, from `api/localmap.api`), before C reads them; `args` are the
/// arguments the rules read. A mismatch names the method and the slice in Rust's terms.
fn lengths(method: &str, function: &str, args: &[(&str, Of<'_>)]) -> Result<()> {
    let find = |name: &str| args.iter().find(|a| a.0 == name).map(|a| &a.1);
    let read = |name: &str, of: sys::Of| -> Option<i64> {
        let n = match (find(name)?, of) {
            (Of::Mesh(m), sys::Of::Ndim) => m.as_ref()?.ndim().ok()?,
            (Of::Tensor(t), sys::Of::Ndim) => t.ndim().ok()?,
            (Of::Tensor(t), sys::Of::MeshNdim) => t.mesh().ok()?.ndim().ok()?,
            _ => return None,
        };
        Some(n as i64)
    };
    let len = |name: &str, i: Option<usize>| match (find(name)?, i) {
        (Of::Slice(_, n), None) => Some(*n),
        (Of::Slices(_, v), None) => Some(v.len()),
        (Of::Slices(_, v), Some(i)) => v[i],
        _ => None,
    };
    let m = match sys::length_mismatch(function, &read, &len) {
        Some(m) => m,
        None => return Ok(()),
    };
    let what = match (find(m.arg.name), m.element) {
        (Some(Of::Slice(n, _)), _) => n.to_string(),
        (Some(Of::Slices(n, _)), Some(i)) => format!("{n}[{i}]"),
        _ => m.arg.name.to_string(),
    };
    let of = match *m.rule {
        sys::Len::Ndim(a) if matches!(find(a), Some(Of::Tensor(_))) => Some("tensor"),
        sys::Len::Ndim(_) | sys::Len::MeshNdim(_) | sys::Len::Either(..) => Some("mesh"), // (A|B: two meshes)
        _ => None,
    };
    arg_error(wrong_length(method, &what, m.arg.name, m.got, of, m.want))
}

/// "`method`: `what`: 1 placements for a mesh of 2 dims (one Placement per mesh dim)": a slice
/// of `got` entries where `want` are needed (`of`: whose dims they count; `c_name`: the C
/// argument, which says what the entries are).
fn wrong_length(method: &str, what: &str, c_name: &str, got: usize, of: Option<&str>, want: i64) -> String {
    let (entries, per) = match c_name {
        n if n.ends_with("placements") => ("placements", " (one Placement per mesh dim)"),
        n if n.contains("shape") => ("extents", ""),
        _ => ("entries", ""),
    };
    match of {
        Some(of) => format!("{method}: {what}: {got} {entries} for a {of} of {want} dims{per}"),
        None => format!("{method}: {what}: {got} {entries} where {want} are needed"),
    }
}

/// The placements a call of C `function` takes for `mesh`, checked by the function's rule.
fn mesh_placements(method: &str, function: &str, mesh: &Mesh, p: &[Placement]) -> Result<Vec<sys::lm_placement_t>> {
    lengths(method, function, &[("placements", Of::Slice("placements", p.len())), ("mesh", Of::Mesh(Some(mesh)))])?;
    Ok(raw_placements(p))
}

/// A slice of placements that no rule covers (a field of a struct the call takes), checked for a
/// mesh of `ndim` dims and converted.
fn placements_for(method: &str, what: &str, p: &[Placement], ndim: usize) -> Result<Vec<sys::lm_placement_t>> {
    if p.len() != ndim {
        return arg_error(wrong_length(method, what, "placements", p.len(), Some("mesh"), ndim as i64));
    }
    Ok(raw_placements(p))
}

// ================================================================================================
// Bootstrap, devices, data types
// ================================================================================================

/// An MPI communicator as a Fortran handle (`MPI_Fint`), what the C ABI takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Comm(pub i32);

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

/// The [`DType`] of a C dtype (an error for one this crate has no variant for).
fn dtype_of(d: sys::DLDataType) -> Result<DType> {
    DType::from_raw(d).ok_or_else(|| Error::new(Status::NotSupported, format!("unknown dtype {d:?}")))
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
macro_rules! elements {
    ($($t:ty: $d:ident),*) => {$(unsafe impl Element for $t { const DTYPE: DType = DType::$d; })*};
}
elements!(f32: F32, f64: F64, i8: I8, i16: I16, i32: I32, i64: I64, u8: U8, bool: Bool, Complex<f32>: C64,
          Complex<f64>: C128);

// ================================================================================================
// Placements, extents
// ================================================================================================

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

/// The placements the library wrote (an error for one this crate cannot express).
fn placements_of(raw: Vec<sys::lm_placement_t>) -> Result<Vec<Placement>> {
    raw.into_iter()
        .map(|p| Placement::from_raw(p).ok_or_else(|| Error::new(Status::NotSupported, format!("placement {p:?}"))))
        .collect()
}

/// A string the library writes into a buffer (`lm_*_describe`, `_format`, `_dim_name`).
fn read_buf(method: &str, f: impl FnOnce(*mut c_char, usize) -> sys::lm_status_t) -> Result<String> {
    let mut buf = vec![0 as c_char; 4096];
    call(method, f(buf.as_mut_ptr(), buf.len()))?;
    // SAFETY: the library NUL-terminates within size.
    Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned())
}

/// The extents of a ragged shard (`lm_extents_create`): one length per coordinate of the mesh
/// dim that uses them. Dropping it releases this reference; tensors and plans keep their own.
#[derive(Debug)]
pub struct Extents {
    id: i32,
}

impl Extents {
    /// `Placement::Ragged` of tensor dim `dim` with these extents.
    pub fn placement(&self, dim: i32) -> Placement {
        Placement::Ragged { dim, extents: self.id, order: 0 }
    }
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

impl Mesh {
    /// `lm_mesh_create` over all ranks of `parent`, in order. Collective over `parent`.
    pub fn new(parent: Comm, shape: &[i64]) -> Result<Mesh> {
        Mesh::with_options(parent, shape, &MeshOptions::default())
    }

    /// `lm_mesh_create` with dim names (distinct, non-empty, at most 63 chars).
    pub fn with_names(parent: Comm, shape: &[i64], names: &[&str]) -> Result<Mesh> {
        Mesh::with_options(parent, shape, &MeshOptions { names: Some(names), ..MeshOptions::default() })
    }

    /// `lm_mesh_create` with an `lm_mesh_config_t`: `ranks` of the parent forming the mesh
    /// (row-major over `shape`; `None`: all), and dim names.
    pub fn with_config(parent: Comm, shape: &[i64], ranks: Option<&[i32]>, names: Option<&[&str]>)
        -> Result<Mesh> {
        Mesh::with_options(parent, shape, &MeshOptions { ranks, names, ..MeshOptions::default() })
    }

    /// `lm_mesh_create` with every option of `lm_mesh_config_t` ([`MeshOptions`]).
    pub fn with_options(parent: Comm, shape: &[i64], options: &MeshOptions<'_>) -> Result<Mesh> {
        const M: &str = "Mesh::with_options";
        let names = options.names.unwrap_or(&[]);
        if options.names.is_some() && names.len() != shape.len() {
            return arg_error(wrong_length(M, "names", "names", names.len(), Some("mesh"), shape.len() as i64));
        }
        let cnames = names.iter().enumerate()
            .map(|(i, s)| c_string(M, &format!("names[{i}]"), s))
            .collect::<Result<Vec<_>>>()?;
        let ptrs: Vec<*const c_char> = cnames.iter().map(|c| c.as_ptr()).collect();
        let mut cfg = sys::LM_MESH_CONFIG_INIT;
        cfg.check_level = options.check_level.unwrap_or(cfg.check_level);
        cfg.timeout = options.timeout.unwrap_or(cfg.timeout);
        if let Some(r) = options.ranks {
            cfg.ranks = r.as_ptr();
            cfg.nranks = to_int(r.len(), "ranks")?;
        }
        if options.names.is_some() {
            cfg.dim_names = ptrs.as_ptr();
        }
        let mut raw = ptr::null_mut();
        let ndim = to_int(shape.len(), "shape")?;
        call(M, unsafe { sys::lm_mesh_create(&mut raw, parent.0, ndim, shape.as_ptr(), &cfg) })?;
        Ok(Mesh { raw })
    }

    fn borrowed<'a>(raw: sys::lm_mesh_t) -> MeshRef<'a> {
        MeshRef { mesh: ManuallyDrop::new(Mesh { raw }), _life: PhantomData }
    }
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
    // SAFETY: m and manager_ctx were made by ManagedTensor::from_vec::<T> with Box::into_raw.
    let m = Box::from_raw(m);
    drop(Box::from_raw(m.manager_ctx as *mut VecOwner<T>));
}

fn check_shape(len: usize, shape: &[i64], what: &str) -> Result<()> {
    if let Some(i) = shape.iter().position(|&e| e < 0) {
        return arg_error(format!("{what}: shape[{i}] = {} is negative", shape[i]));
    }
    match shape.iter().try_fold(1i64, |n, &e| n.checked_mul(e)) {
        None => arg_error(format!("{what}: shape {shape:?} overflows")),
        Some(n) if n as u128 != len as u128 => {
            arg_error(format!("{what}: {len} elements for shape {shape:?} ({n} elements)"))
        }
        Some(_) => Ok(()),
    }
}

/// A `DLManagedTensor` (e.g. from [`DistTensor::to_dlpack`]): dropping it calls its deleter once.
#[derive(Debug)]
pub struct ManagedTensor {
    raw: *mut sys::DLManagedTensor,
}

impl ManagedTensor {
    /// Wraps a Rust vector (host memory, compact row-major `shape`); its deleter drops the vector.
    pub fn from_vec<T: Element>(data: Vec<T>, shape: &[i64]) -> Result<ManagedTensor> {
        check_shape(data.len(), shape, "ManagedTensor::from_vec")?;
        let mut data = data;
        let dptr = data.as_mut_ptr() as *mut c_void; // moving the Vec below keeps its heap buffer
        let owner = Box::into_raw(Box::new(VecOwner { _data: data, shape: shape.to_vec() }));
        let dl_tensor = sys::DLTensor {
            data: dptr,
            // SAFETY: owner is a live box; its shape vector does not move.
            shape: unsafe { (*owner).shape.as_mut_ptr() },
            ..host_view::<T>(ptr::null(), shape)
        };
        let m = sys::DLManagedTensor { dl_tensor, manager_ctx: owner as *mut c_void, deleter: Some(vec_deleter::<T>) };
        Ok(ManagedTensor { raw: Box::into_raw(Box::new(m)) })
    }
    /// The elements, writable (the tensor owns its memory: nothing else sees it until handed over).
    pub fn data_mut<T: Element>(&mut self) -> Result<&mut [T]> {
        let s = self.data::<T>()?;
        // SAFETY: &mut self: no other borrow of this tensor's memory is alive.
        Ok(unsafe { std::slice::from_raw_parts_mut(s.as_ptr() as *mut T, s.len()) })
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
            if let Some(d) = self.raw.as_ref().and_then(|m| m.deleter) {
                d(self.raw);
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

impl ShapeMode {
    /// A `Given` shape must have one extent per tensor dim (the C API reads that many).
    fn check(&self, method: &str, ndim: usize) -> Result<()> {
        match self {
            ShapeMode::Given(s) if s.len() != ndim => arg_error(format!(
                "{method}: ShapeMode::Given has {} extents for a tensor of {ndim} dims", s.len())),
            _ => Ok(()),
        }
    }
}

/// A distributed tensor (`lm_dist_tensor_t`). `Clone` adds a reference (`lm_dist_tensor_retain`):
/// both handles share one tensor and its storage. `Drop` releases one reference (local).
#[derive(Debug)]
pub struct DistTensor {
    raw: sys::lm_dist_tensor_t,
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

impl DistTensor {
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
        const M: &str = "DistTensor::from_local";
        mode.check(M, usize::try_from(local.ndim).unwrap_or(0))?;
        let pl = mesh_placements(M, "lm_dist_tensor_from_local", mesh, placements)?;
        let (m, gs) = mode.raw();
        let mut raw = ptr::null_mut();
        call(M, sys::lm_dist_tensor_from_local(&mut raw, mesh.raw, local, pl.as_ptr(), m, gs, flags))?;
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

    /// `lm_dist_tensor_from_dlpack`: the tensor takes over `data` without a copy (its storage is
    /// freed when the tensor dies).
    pub fn from_vec<T: Element>(mesh: &Mesh, data: Vec<T>, local_shape: &[i64], placements: &[Placement],
                                mode: ShapeMode) -> Result<DistTensor> {
        DistTensor::from_dlpack(mesh, ManagedTensor::from_vec(data, local_shape)?, placements, mode)
    }

    /// `lm_dist_tensor_from_dlpack`: takes ownership of `local` (on failure it is dropped here).
    pub fn from_dlpack(mesh: &Mesh, local: ManagedTensor, placements: &[Placement], mode: ShapeMode)
        -> Result<DistTensor> {
        const M: &str = "DistTensor::from_dlpack";
        mode.check(M, usize::try_from(local.dl_tensor().ndim).unwrap_or(0))?;
        let pl = mesh_placements(M, "lm_dist_tensor_from_dlpack", mesh, placements)?;
        let (m, gs) = mode.raw();
        let mut raw = ptr::null_mut();
        call(M, unsafe { sys::lm_dist_tensor_from_dlpack(&mut raw, mesh.raw, local.raw, pl.as_ptr(), m, gs) })?;
        local.into_raw(); // the tensor owns it now (on failure `local` still did, and drops it)
        Ok(DistTensor { raw })
    }

    /// `lm_dist_tensor_from_global`. `root < 0`: every rank passes the full tensor (a rank
    /// outside the mesh may pass `None`). `root >= 0`: only mesh rank `root` passes `Some` and it
    /// is scattered (collective over the mesh); `shape` is the global shape on every rank.
    pub fn from_global<T: Element>(mesh: &Mesh, data: Option<&[T]>, shape: &[i64], placements: &[Placement],
                                   root: i32) -> Result<DistTensor> {
        const M: &str = "DistTensor::from_global";
        if let Some(d) = data {
            check_shape(d.len(), shape, M)?;
        }
        let pl = mesh_placements(M, "lm_dist_tensor_from_global", mesh, placements)?;
        let view = host_view(data.map_or(ptr::null(), |d| d.as_ptr()), shape);
        let vp: *const sys::DLTensor = if root >= 0 && data.is_none() { ptr::null() } else { &view };
        let mut raw = ptr::null_mut();
        call(M, unsafe { sys::lm_dist_tensor_from_global(&mut raw, mesh.raw, vp, pl.as_ptr(), root) })?;
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
        call("DistTensor::gather", unsafe { sys::lm_dist_tensor_gather(self.raw, root, vp) })
    }

    /// The full value on every member rank.
    pub fn gather_all<T: Element + Default>(&self) -> Result<Vec<T>> {
        let n: i64 = self.global_shape()?.iter().product();
        let mut v = vec![T::default(); n as usize];
        self.gather(-1, Some(&mut v[..]))?;
        Ok(v)
    }

    /// `lm_padded_extents` of the local shard: the extents of the row-major array it lies in (the
    /// local shape, except for a host array borrowed with padded rows: a ScaLAPACK array with
    /// `LLD_ > LOCr` gives `[LOCc, LLD_]`).
    pub fn local_extents(&self) -> Result<Vec<i64>> {
        let v = self.local_view()?;
        let mut ext = vec![0; v.ndim as usize];
        call("DistTensor::local_extents", unsafe { sys::lm_padded_extents(&v, ext.as_mut_ptr(), v.ndim) })?;
        Ok(ext)
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
}

// ================================================================================================
// Persistent reshard plans, requests
// ================================================================================================

/// A persistent reshard plan (`lm_reshard_plan_t`).
#[derive(Debug)]
pub struct ReshardPlan {
    raw: sys::lm_reshard_plan_t,
}

impl ReshardPlan {
    /// Bytes this rank sends to other ranks per execution: `info(false)?.bytes_sent`
    /// (`lm_reshard_plan_info`, flags 0: local).
    pub fn bytes_sent(&self) -> Result<i64> {
        Ok(self.info(false)?.bytes_sent)
    }
}

/// A nonblocking reshard in flight ([`ReshardPlan::start`], [`ReshardGroup::start`]). Dropping it
/// waits for completion (errors are then lost: call [`wait`](Request::wait) to see them).
pub struct Request<'a> {
    raw: sys::lm_request_t,
    _life: PhantomData<&'a mut DistTensor>,
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

impl ReshardGroup {
    /// `lm_reshard_group_create` from `src_mesh` to `dst_mesh` (`None`: `src_mesh`), with the
    /// default options (local).
    pub fn new(src_mesh: &Mesh, dst_mesh: Option<&Mesh>, entries: &[ReshardEntry<'_>]) -> Result<ReshardGroup> {
        ReshardGroup::with_options(src_mesh, dst_mesh, entries, &ReshardGroupOptions::default())
    }

    /// `lm_reshard_group_create` with [`ReshardGroupOptions`] (local).
    pub fn with_options(src_mesh: &Mesh, dst_mesh: Option<&Mesh>, entries: &[ReshardEntry<'_>],
                        options: &ReshardGroupOptions) -> Result<ReshardGroup> {
        const M: &str = "ReshardGroup::new";
        let (snd, dnd) = (src_mesh.ndim()?, dst_mesh.unwrap_or(src_mesh).ndim()?);
        let pls = entries.iter().enumerate().map(|(i, e)| {
            let sp = placements_for(M, &format!("entries[{i}].src_placements"), e.src_placements, snd)?;
            Ok((sp, placements_for(M, &format!("entries[{i}].dst_placements"), e.dst_placements, dnd)?))
        }).collect::<Result<Vec<_>>>()?;
        let raw_entries = entries.iter().zip(&pls).enumerate().map(|(i, (e, (sp, dp)))| Ok(sys::lm_reshard_entry_t {
            ndim: to_int(e.global_shape.len(), &format!("entries[{i}].global_shape"))?,
            global_shape: e.global_shape.as_ptr(),
            dtype: e.dtype.raw(),
            src_placements: sp.as_ptr(),
            dst_placements: dp.as_ptr(),
        })).collect::<Result<Vec<_>>>()?;
        let cfg = sys::lm_reshard_group_config_t {
            bucket_bytes: options.bucket_bytes.unwrap_or(0),
            alone_bytes: options.alone_bytes.unwrap_or(0),
            ..sys::LM_RESHARD_GROUP_CONFIG_INIT
        };
        let (mut raw, n) = (ptr::null_mut(), to_int(raw_entries.len(), "entries")?);
        let dst = dst_mesh.map_or(ptr::null_mut(), |m| m.raw);
        call(M, unsafe { sys::lm_reshard_group_create(&mut raw, src_mesh.raw, dst, n, raw_entries.as_ptr(), &cfg) })?;
        Ok(ReshardGroup { raw })
    }
    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }
    /// `src` and `dst` as C arrays of the group's length (the C calls read one count for all).
    fn arrays<S: Borrow<DistTensor>, D: BorrowMut<DistTensor>>(&self, method: &str, src: &[S], dst: &[D])
        -> Result<(c_int, Vec<sys::lm_dist_tensor_t>, Vec<sys::lm_dist_tensor_t>)> {
        let n = self.len()?;
        if src.len() != n {
            return arg_error(format!("{method}: src: {} tensors for a group of {n} entries", src.len()));
        }
        if dst.len() != n {
            return arg_error(format!("{method}: dst: {} tensors for {n} src tensors", dst.len()));
        }
        let raw = |t: &DistTensor| t.raw;
        let (s, d) = (src.iter().map(|t| raw(t.borrow())).collect(), dst.iter().map(|t| raw(t.borrow())).collect());
        Ok((to_int(n, "src")?, s, d))
    }
    /// `lm_reshard_group_execute`: `src[i]` -> `dst[i]` (overwritten) for every entry. Collective
    /// over both meshes; one agreement covers the whole group. No target may overlap another
    /// target or any source (clones share storage: the library refuses them).
    pub fn execute<S: Borrow<DistTensor>, D: BorrowMut<DistTensor>>(&self, src: &[S], dst: &mut [D]) -> Result<()> {
        const M: &str = "ReshardGroup::execute";
        let (n, s, d) = self.arrays(M, src, dst)?;
        call(M, unsafe { sys::lm_reshard_group_execute(self.raw, n, s.as_ptr(), d.as_ptr()) })
    }
    /// `lm_reshard_group_start`: nonblocking; the tensors stay borrowed until the request ends
    /// (at most one request per group at a time).
    pub fn start<'a, S: Borrow<DistTensor>, D: BorrowMut<DistTensor>>(&'a self, src: &'a [S], dst: &'a mut [D])
        -> Result<Request<'a>> {
        const M: &str = "ReshardGroup::start";
        let (n, s, d) = self.arrays(M, src, dst)?;
        let mut raw = ptr::null_mut();
        call(M, unsafe { sys::lm_reshard_group_start(&mut raw, self.raw, n, s.as_ptr(), d.as_ptr()) })?;
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
    const M: &str = "reshard_many";
    if placements.len() != tensors.len() {
        return arg_error(format!("{M}: placements: {} entries for {} tensors", placements.len(), tensors.len()));
    }
    let first = match tensors.first() {
        Some(t) => t.borrow(),
        None => return Ok(Vec::new()),
    };
    let src_mesh = first.mesh()?;
    let dnd = dst_mesh.unwrap_or(&src_mesh).ndim()?;
    let mut from = Vec::with_capacity(tensors.len()); // what the entries point to
    for (i, (t, p)) in tensors.iter().map(Borrow::borrow).zip(placements).enumerate() {
        if t.mesh()?.raw != src_mesh.raw {
            return arg_error(format!("{M}: tensors[{i}] lives on another mesh than tensors[0] (one call moves \
                                      tensors of one mesh)"));
        }
        placements_for(M, &format!("placements[{i}]"), p.as_ref(), dnd)?;
        from.push((t.global_shape()?, t.dtype()?, t.placements()?));
    }
    let entries: Vec<ReshardEntry<'_>> = from.iter().zip(placements)
        .map(|((shape, dtype, sp), dp)| ReshardEntry::new(shape, *dtype, sp, dp.as_ref()))
        .collect();
    let group = ReshardGroup::new(&src_mesh, dst_mesh, &entries)?;
    let mut out = group.alloc_targets(first.device()?)?; // dropped if execute fails
    group.execute(tensors, &mut out[..])?;
    Ok(out)
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
    /// What the function sees of an input the library passes it.
    fn of(a: &'a sys::lm_arg_t) -> Local<'a> {
        match a.kind {
            // SAFETY: the library passes a valid view, or NULL.
            sys::LM_ARG_TENSOR => match unsafe { (a.ptr as *const sys::DLTensor).as_ref() } {
                Some(t) => Local::Tensor(LocalTensor { raw: t }),
                None => Local::None,
            },
            sys::LM_ARG_INT64 => Local::Int(a.i64),
            sys::LM_ARG_DOUBLE => Local::Double(a.f64),
            sys::LM_ARG_POINTER => Local::Pointer(a.ptr),
            _ => Local::None,
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

/// An `lm_arg_t` of `kind` holding `i64`, `f64` or `ptr`.
fn c_arg(kind: sys::lm_arg_kind_t, i64: i64, f64: f64, ptr: *mut c_void) -> sys::lm_arg_t {
    sys::lm_arg_t { kind, reserved: 0, i64, f64, ptr }
}

impl Out {
    /// A tensor output from a vector and its local shape.
    pub fn tensor<T: Element>(data: Vec<T>, shape: &[i64]) -> Result<Out> {
        Ok(Out::Tensor(ManagedTensor::from_vec(data, shape)?))
    }
    /// The `lm_arg_t` the library takes (a tensor's ownership passes with it).
    fn into_arg(self) -> sys::lm_arg_t {
        match self {
            Out::None => sys::lm_arg_t::default(),
            Out::Tensor(m) => c_arg(sys::LM_ARG_MANAGED_TENSOR, 0, 0.0, m.into_raw() as *mut c_void),
            Out::Int(i) => c_arg(sys::LM_ARG_INT64, i, 0.0, ptr::null_mut()),
            Out::Double(d) => c_arg(sys::LM_ARG_DOUBLE, 0, d, ptr::null_mut()),
            Out::Pointer(p) => c_arg(sys::LM_ARG_POINTER, 0, 0.0, p),
        }
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
    /// A result the library returns (a dist tensor's reference passes with it).
    fn of(o: sys::lm_arg_t) -> Output {
        match o.kind {
            sys::LM_ARG_DIST_TENSOR => Output::Dist(DistTensor { raw: o.ptr as sys::lm_dist_tensor_t }),
            sys::LM_ARG_INT64 => Output::Int(o.i64),
            sys::LM_ARG_DOUBLE => Output::Double(o.f64),
            sys::LM_ARG_POINTER => Output::Pointer(o.ptr),
            _ => Output::None,
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
    first_dist: Option<&'a DistTensor>,
    flags: u32,
}

impl<'a> LocalMap<'a> {
    pub fn new() -> LocalMap<'a> {
        LocalMap::default()
    }
    fn push_input(mut self, a: Arg<'a>, pl: Option<&[Placement]>) -> Self {
        self.inputs.push(match a {
            Arg::None => sys::lm_arg_t::default(),
            Arg::Dist(t) => {
                self.first_dist = self.first_dist.or(Some(t));
                c_arg(sys::LM_ARG_DIST_TENSOR, 0, 0.0, t.raw as *mut c_void)
            }
            Arg::Tensor(t) => c_arg(sys::LM_ARG_TENSOR, 0, 0.0, t as *const sys::DLTensor as *mut c_void),
            Arg::Int(i) => c_arg(sys::LM_ARG_INT64, i, 0.0, ptr::null_mut()),
            Arg::Double(d) => c_arg(sys::LM_ARG_DOUBLE, 0, d, ptr::null_mut()),
            Arg::Pointer(p) => c_arg(sys::LM_ARG_POINTER, 0, 0.0, p),
        });
        self.in_pl.push(pl.map(raw_placements));
        self.in_grad.push(None);
        self
    }
    fn push_output(mut self, pl: Option<&[Placement]>, global_shape: Option<&[i64]>) -> Self {
        self.out_pl.push(pl.map(raw_placements));
        self.out_shapes.push(global_shape.map(<[i64]>::to_vec));
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
    pub fn output(self, placements: &[Placement]) -> Self {
        self.push_output(Some(placements), None)
    }
    /// A tensor output with these placements and this global shape.
    pub fn output_shaped(self, placements: &[Placement], global_shape: &[i64]) -> Self {
        self.push_output(Some(placements), Some(global_shape))
    }
    /// A non-tensor output (int, double, pointer or none).
    pub fn output_value(self) -> Self {
        self.push_output(None, None)
    }
    /// The mesh (default: the dist inputs').
    pub fn mesh(mut self, mesh: &'a Mesh) -> Self {
        self.mesh = Some(mesh);
        self
    }
    /// Raw `LM_LOCAL_MAP_*` flags, or-ed in (one method each: [`no_agree`](Self::no_agree), ...).
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
        self.run_impl("LocalMap::run", f, false).map(|(o, _)| o)
    }

    /// [`run`](Self::run) through `lm_local_map_ex`, with the [`grad_placements`](Self::grad_placements)
    /// given, returning also the call's [`LocalMapRecord`] for a hand-written backward pass.
    pub fn run_recorded<F>(self, f: F) -> Result<(Vec<Output>, LocalMapRecord)>
    where
        F: FnMut(&Ctx<'_>, &[Local<'_>]) -> std::result::Result<Vec<Out>, FnError>,
    {
        let (o, r) = self.run_impl("LocalMap::run_recorded", f, true)?;
        Ok((o, r.expect("lm_local_map_ex succeeded without a record")))
    }

    fn run_impl<F>(self, method: &str, f: F, want_record: bool) -> Result<(Vec<Output>, Option<LocalMapRecord>)>
    where
        F: FnMut(&Ctx<'_>, &[Local<'_>]) -> std::result::Result<Vec<Out>, FnError>,
    {
        self.check_lengths(method)?;
        let mut call_data = Call { f, out_ndims: self.out_shapes.iter().map(|s| s.as_ref().map(Vec::len)).collect() };
        let ptrs = |v: &[Option<Vec<sys::lm_placement_t>>]| -> Vec<*const sys::lm_placement_t> {
            v.iter().map(|p| p.as_ref().map_or(ptr::null(), |v| v.as_ptr())).collect()
        };
        let (in_pl, out_pl, in_grad) = (ptrs(&self.in_pl), ptrs(&self.out_pl), ptrs(&self.in_grad));
        let shapes: Vec<*const i64> =
            self.out_shapes.iter().map(|s| s.as_ref().map_or(ptr::null(), |v| v.as_ptr())).collect();
        let given = |v: &[*const sys::lm_placement_t]| {
            if v.iter().any(|p| !p.is_null()) { v.as_ptr() } else { ptr::null() }
        };
        let mut record: sys::lm_local_map_record_t = ptr::null_mut();
        let mut opt = sys::LM_LOCAL_MAP_OPTIONS_INIT;
        opt.in_grad_placements = given(&in_grad);
        if want_record {
            opt.record = &mut record;
        }
        let mut outputs = vec![sys::lm_arg_t::default(); self.out_pl.len()];
        let (nin, nout) = (to_int(self.inputs.len(), "inputs")?, to_int(outputs.len(), "outputs")?);
        let shapes_ptr = if self.out_shapes.iter().any(Option::is_some) { shapes.as_ptr() } else { ptr::null() };
        call(method, unsafe {
            sys::lm_local_map_ex(Some(trampoline::<F>), &mut call_data as *mut Call<F> as *mut c_void, nin,
                                 self.inputs.as_ptr(), given(&in_pl), nout, out_pl.as_ptr(), shapes_ptr,
                                 self.mesh.map_or(ptr::null_mut(), |m| m.raw), self.flags, &opt, outputs.as_mut_ptr())
        })?;
        let record = if record.is_null() { None } else { Some(LocalMapRecord { raw: record }) };
        Ok((outputs.into_iter().map(Output::of).collect(), record))
    }

    /// `lm_local_map` reads one placement per dim of the call's mesh (the one given, else the
    /// first dist input's) from each entry of `input_as`, `output` and `grad_placements`.
    fn check_lengths(&self, method: &str) -> Result<()> {
        let theirs = match (self.mesh, self.first_dist) {
            (None, Some(t)) => Some(t.mesh()?),
            _ => None,
        };
        let mesh = match self.mesh.or(theirs.as_deref()) {
            Some(m) => m,
            None => return Ok(()), // a local call: the library refuses placements itself
        };
        let lens = |v: &[Option<Vec<sys::lm_placement_t>>]| v.iter().map(|p| p.as_ref().map(Vec::len)).collect();
        lengths(method, "lm_local_map_ex", &[
            ("mesh", Of::Mesh(Some(mesh))),
            ("in_placements", Of::Slices("input_as placements of inputs", lens(&self.in_pl))),
            ("out_placements", Of::Slices("placements of outputs", lens(&self.out_pl))),
        ])?;
        // The options' in_grad_placements follow in_placements' rule (the header says so).
        let grad = Of::Slices("grad_placements of inputs", lens(&self.in_grad));
        lengths(method, "lm_local_map_ex", &[("mesh", Of::Mesh(Some(mesh))), ("in_placements", grad)])
    }
}

/// The record of one [`LocalMap::run_recorded`] call (`lm_local_map_record_t`): what its backward
/// pass needs. Dropping it destroys it (local).
#[derive(Debug)]
pub struct LocalMapRecord {
    raw: sys::lm_local_map_record_t,
}

/// What the trampoline gets: the closure, and the length of each `output_shaped` global shape
/// (the library reads as many extents as the tensor the closure returns has dims).
struct Call<F> {
    f: F,
    out_ndims: Vec<Option<usize>>,
}

/// The status and text a failure of the function gives the library.
type Failure = (sys::lm_status_t, String);

impl<F> Call<F> {
    /// `outs` if they are what the call declared: one per output, and a tensor of as many dims
    /// as its `output_shaped` global shape has extents.
    fn check(&self, outs: Vec<Out>, nout: c_int) -> std::result::Result<Vec<Out>, Failure> {
        if outs.len() != nout as usize {
            return Err((sys::LM_ERR_USER, format!("the function returned {} outputs, {nout} declared", outs.len())));
        }
        for (j, (o, n)) in outs.iter().zip(&self.out_ndims).enumerate() {
            match (o, n) {
                (Out::Tensor(m), Some(n)) if usize::try_from(m.dl_tensor().ndim).ok() != Some(*n) => {
                    return Err((sys::LM_ERR_INVALID_ARGUMENT, format!(
                        "LocalMap: outputs[{j}] is a {}-d tensor but output_shaped gave a global shape of {n} extents",
                        m.dl_tensor().ndim)));
                }
                _ => {}
            }
        }
        Ok(outs)
    }
}

/// A function's `Err`: a [`localmap::Error`](Error) keeps its status, others become `LM_ERR_USER`.
fn failure(e: FnError) -> Failure {
    match e.downcast_ref::<Error>() {
        Some(le) if le.status != Status::Success => (le.status.raw(), e.to_string()),
        _ => (sys::LM_ERR_USER, e.to_string()),
    }
}

fn panic_text(p: &(dyn Any + Send)) -> String {
    let text = p.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| p.downcast_ref::<String>().cloned());
    text.unwrap_or_else(|| "(a panic without a message)".to_string())
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
        let ins = if nin > 0 { unsafe { std::slice::from_raw_parts(inputs, nin as usize) } } else { &[] };
        let locals: Vec<Local<'_>> = ins.iter().map(Local::of).collect();
        let outs = (call.f)(&Ctx { mesh: Mesh::borrowed(mesh) }, &locals).map_err(failure);
        match outs.and_then(|outs| call.check(outs, nout)) {
            Ok(outs) => {
                let slots = unsafe { std::slice::from_raw_parts_mut(outputs, nout as usize) };
                for (slot, o) in slots.iter_mut().zip(outs) {
                    *slot = o.into_arg();
                }
                sys::LM_SUCCESS
            }
            Err((status, text)) => {
                set_error_message(&text);
                status
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
