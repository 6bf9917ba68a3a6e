/* SPDX-License-Identifier: BSD-3-Clause */
/**
 * @file localmap.h
 * @brief localmap — distributed tensors over a process mesh, and local_map.
 *
 * The stable C ABI of liblocalmap. This header does not include mpi.h nor any CUDA header:
 * communicators cross it as Fortran handles (MPI_Fint, an int in every MPI we know; see
 * localmap_mpi.h for MPI_Comm-typed helpers), CUDA streams cross it as void* (lm_device_config_t).
 *
 * Conventions (docs/DESIGN.md has the long form):
 *
 *  - Every function returns lm_status_t. Outputs go through pointers, output first on create.
 *  - On failure lm_last_error_message() gives a thread-local message naming the argument and the
 *    rank. LM_ERR_INVALID_ARGUMENT means the call had no effect and every handle still works.
 *  - Handles are typed opaque values, not object addresses: each is checked on entry against a
 *    table of live handles, so a NULL, destroyed or foreign handle gives LM_ERR_INVALID_ARGUMENT
 *    without any memory behind it being read. A handle is the caller's: destroying it kills it (it
 *    stays dead even while other holders keep the object: a tensor its mesh, an export its
 *    tensor, a plan its meshes), and destroying a dead handle again is refused, so no sequence of
 *    destroys can drop a reference the caller does not own.
 *  - Destroy functions are local (never collective), NULL-safe, and set the handle to NULL (a
 *    refused destroy leaves it as it was).
 *  - "Collective over X" means every rank of X must make the call with the same arguments; a
 *    collective that fails on one rank fails on all (the others with LM_ERR_REMOTE, naming the
 *    failing rank, its status and the start of its message) where the function says "agrees".
 *    Every collective call (mesh_create, reshard, plan execute/start, gather, from_global with a
 *    root, from_local with LM_SHAPE_ALLGATHER, local_map) also checks, before any data moves, that
 *    the ranks were asked the same thing: otherwise every rank returns LM_ERR_MISMATCH naming the
 *    field and the ranks. docs/DESIGN.md, "Failure model", has the rules.
 *  - Settings come from the environment, read once per process (README, "Settings"): LM_CHECK
 *    (0|1|2, default 1; see lm_mesh_config_t), LM_TIMEOUT (seconds, deadline of blocking waits:
 *    LM_ERR_TIMEOUT), LM_STAGING_BYTES, LM_POOL_BYTES, LM_TRANSPORT, LM_NCCL_TIMEOUT, and expert
 *    switches of the one-node paths. Sizes take K/M/G/T suffixes, booleans 0/1/true/false/yes/no/
 *    on/off; an unreadable value is named on stderr and the default applies. Settings that change
 *    which collectives run or how bytes travel must be equal on every rank: lm_mesh_create
 *    returns LM_ERR_MISMATCH on every rank, naming the variable, when one differs. Tensors the
 *    library allocated are not accessible in a fork() child.
 *  - Thread safety: distinct handles may be used from distinct threads when MPI was initialised
 *    with MPI_THREAD_MULTIPLE; one mesh (and everything on it) must not be used by two threads at
 *    once, because its collectives would interleave.
 *
 * The DLPack header comes from the DLPack the library was built with (versions 0.6 to 1.x: only
 * DLTensor, DLManagedTensor, DLDataType and DLDevice are used, whose layouts those versions share).
 */
#ifndef LOCALMAP_H_
#define LOCALMAP_H_

#include <stddef.h>
#include <stdint.h>

#include <dlpack/dlpack.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------------
 * Export and attributes
 * ------------------------------------------------------------------------------------------- */
/**
 * @def LM_API
 * @brief Marks a function exported by liblocalmap (default visibility; the library builds with
 * -fvisibility=hidden, so only LM_API functions are exported).
 */
/**
 * @def LM_NODISCARD
 * @brief warn_unused_result on functions whose status must be checked (define LM_NO_WARN_UNUSED
 * before including the header to turn it off). Destroy functions do not carry it.
 */
#if defined(_WIN32)
#define LM_API __declspec(dllimport)
#elif defined(__GNUC__)
#define LM_API __attribute__((visibility("default")))
#else
#define LM_API
#endif

#if defined(__GNUC__) && !defined(LM_NO_WARN_UNUSED)
#define LM_NODISCARD __attribute__((warn_unused_result))
#else
#define LM_NODISCARD
#endif

/* ---------------------------------------------------------------------------------------------
 * Versions
 * ------------------------------------------------------------------------------------------- */
/** Major version: a change means an incompatible ABI (and a new SONAME, liblocalmap.so.MAJOR). */
#define LM_VERSION_MAJOR 1
/** Minor version: compatible additions. */
#define LM_VERSION_MINOR 0
/** Patch version: fixes only. */
#define LM_VERSION_PATCH 0
/** The header's version as one number, MAJOR * 10000 + MINOR * 100 + PATCH (1.0.0 is 10000). */
#define LM_VERSION_CODE (LM_VERSION_MAJOR * 10000 + LM_VERSION_MINOR * 100 + LM_VERSION_PATCH)

/** The version of the library actually loaded, as LM_VERSION_CODE. Never fails.
 * @return MAJOR * 10000 + MINOR * 100 + PATCH of the loaded liblocalmap. */
LM_API int lm_get_version(void);

/* ---------------------------------------------------------------------------------------------
 * Status codes. Values are explicit and never reused; new codes are appended.
 * ------------------------------------------------------------------------------------------- */
/** What every localmap function returns. On anything but LM_SUCCESS, lm_last_error_message()
 * explains it. */
typedef enum lm_status_t {
  LM_SUCCESS = 0,              /**< the call did what it says */
  LM_ERR_INVALID_ARGUMENT = 1, /**< a bad argument; the call had no effect */
  LM_ERR_INVALID_USAGE = 2,    /**< a valid argument at the wrong time (e.g. rank not in mesh) */
  LM_ERR_OUT_OF_MEMORY = 3,    /**< an allocation failed; the call had no effect */
  LM_ERR_NOT_SUPPORTED = 4,    /**< a feature this build or this version does not have */
  LM_ERR_MISMATCH = 5,         /**< ranks of a collective call passed different arguments */
  LM_ERR_MPI = 6,              /**< an MPI call failed; the mesh is marked broken */
  LM_ERR_NCCL = 7,             /**< a NCCL call failed; the mesh is marked broken */
  LM_ERR_CUDA = 8,             /**< a CUDA call failed */
  LM_ERR_REMOTE = 9,           /**< another rank of the collective call failed */
  LM_ERR_INTERNAL = 10,        /**< a bug in localmap: please report it */
  LM_ERR_USER = 11,            /**< a user callback (lm_local_map's fn) returned a failure */
  /** A collective call waited longer than LM_TIMEOUT (or the mesh's config->timeout) for other
   *  ranks; the message names the ranks that did not arrive where that is knowable. The mesh is
   *  marked broken (later collective calls on it fail with LM_ERR_INVALID_USAGE). */
  LM_ERR_TIMEOUT = 12
} lm_status_t;

/** A static string naming the code ("LM_ERR_INVALID_ARGUMENT: invalid argument"). Never NULL. */
LM_API const char *lm_status_string(lm_status_t status);

/** The message of the last failed call on this thread ("" if none). Never NULL. The pointer stays
 * valid until the next localmap call on this thread. */
LM_API const char *lm_last_error_message(void);

/** Lets a user callback (lm_local_map's fn) explain its failure; the text becomes part of the
 * message lm_local_map reports. NULL clears it. */
LM_API void lm_set_error_message(const char *message);

/* ---------------------------------------------------------------------------------------------
 * MPI bootstrap, for programs (or bindings) that do not call MPI themselves.
 * ------------------------------------------------------------------------------------------- */
/** Initialises MPI (MPI_THREAD_FUNNELED) unless it is already initialised; argc/argv may be NULL.
 * A singleton run without mpirun works. */
LM_NODISCARD LM_API lm_status_t lm_init(int *argc, char ***argv);
/** Finalises MPI if lm_init initialised it, and does nothing otherwise. */
LM_NODISCARD LM_API lm_status_t lm_finalize(void);
/** MPI_COMM_WORLD as a Fortran handle (MPI_Comm_c2f) in *comm_f. MPI must be initialised. */
LM_NODISCARD LM_API lm_status_t lm_comm_world(int *comm_f);
/** This process's rank in MPI_COMM_WORLD (*rank) and the world size (*size). */
LM_NODISCARD LM_API lm_status_t lm_world_rank(int *rank, int *size);

/* ---------------------------------------------------------------------------------------------
 * Data types and devices: DLPack's DLDataType and DLDevice.
 * Supported: float16, bfloat16, float32, float64, int8/16/32/64, uint8, bool, complex64,
 * complex128, all with lanes == 1.
 * bool: Debian's DLPack 0.6 has no bool code; localmap uses the code DLPack 0.8 introduced
 * (kDLBool = 6) with bits = 8, one byte per value holding 0 or 1 — what PyTorch and NumPy export.
 * ------------------------------------------------------------------------------------------- */
/** The DLPack type code of bool (DLPack 0.8's kDLBool; DLPack 0.6 has no such code). */
#define LM_DL_BOOL 6
/* The value macros below (LM_DTYPE, LM_FLOAT32 ..., LM_CPU, LM_PLACEMENT_*) are C compound
 * literals in C and braced temporaries in C++, so they compile in both, also with -pedantic. */
#ifdef __cplusplus
#define LM_DTYPE(code_, bits_) (DLDataType{(uint8_t)(code_), (uint8_t)(bits_), 1})
#else
/** A DLDataType of `code_` (kDLFloat, kDLInt, ...) and `bits_`, one lane. */
#define LM_DTYPE(code_, bits_) ((DLDataType){(uint8_t)(code_), (uint8_t)(bits_), 1})
#endif
/** IEEE half precision. */
#define LM_FLOAT16 LM_DTYPE(kDLFloat, 16)
/** bfloat16 (reductions compute in float and round to nearest even). */
#define LM_BFLOAT16 LM_DTYPE(kDLBfloat, 16)
/** IEEE single precision. */
#define LM_FLOAT32 LM_DTYPE(kDLFloat, 32)
/** IEEE double precision. */
#define LM_FLOAT64 LM_DTYPE(kDLFloat, 64)
/** Signed 8-bit integer. */
#define LM_INT8 LM_DTYPE(kDLInt, 8)
/** Signed 16-bit integer. */
#define LM_INT16 LM_DTYPE(kDLInt, 16)
/** Signed 32-bit integer. */
#define LM_INT32 LM_DTYPE(kDLInt, 32)
/** Signed 64-bit integer. */
#define LM_INT64 LM_DTYPE(kDLInt, 64)
/** Unsigned 8-bit integer. */
#define LM_UINT8 LM_DTYPE(kDLUInt, 8)
/** bool: code LM_DL_BOOL, 8 bits, one byte per value holding 0 or 1. */
#define LM_BOOL LM_DTYPE(LM_DL_BOOL, 8)
/** Complex of two float32. */
#define LM_COMPLEX64 LM_DTYPE(kDLComplex, 64)
/** Complex of two float64. */
#define LM_COMPLEX128 LM_DTYPE(kDLComplex, 128)
#ifdef __cplusplus
#define LM_CPU (DLDevice{kDLCPU, 0})
#else
/** The host device (kDLCPU, id 0). */
#define LM_CPU ((DLDevice){kDLCPU, 0})
#endif

/** Whether tensors can live on `device_type` here and now: kDLCPU always; kDLCUDA when the
 * library's device component (liblocalmap-cuda.so.N, which CUDA=1 or CUDA=auto with the toolkit
 * and NCCL build; loaded at this call: beside the library, or LM_DEVICE_COMPONENT) loads AND at
 * least one CUDA device is visible to this process (a machine without the component, a GPU or a
 * driver answers 0, so callers and tests can skip device work). Every other type: 0. Local; never
 * initialises a CUDA context beyond what cudaGetDeviceCount does.
 * @param device_type a DLPack device type
 * @param supported   out: 1 or 0
 * @return LM_SUCCESS, or LM_ERR_INVALID_ARGUMENT when `supported` is NULL */
LM_NODISCARD LM_API lm_status_t lm_device_supported(DLDeviceType device_type, int *supported);

/**
 * @brief Allocates a compact row-major tensor as a DLManagedTensor with localmap's own deleter.
 *
 * The storage (zero-filled, 64-byte aligned) comes from localmap's buffer pool, and the
 * DLManagedTensor, its shape and its storage are freed together by `(*out)->deleter(*out)`, which
 * the owner calls once. This is how a lm_local_map fn builds an output in one line:
 * `lm_tensor_alloc(&t, 2, shape, LM_FLOAT32, LM_CPU)`, fill `t->dl_tensor.data`, hand `t` over as
 * lm_arg_managed(t). Local; needs no MPI (also usable before lm_init or after MPI_Finalize).
 * Once a mesh with other ranks on this node exists, storage of LM_NODE_ARENA_MIN_BYTES or more
 * lies in the node's shared arena, which those ranks read and write with memcpy instead of kernel
 * copies: host arrays that will be resharded and borrowed (a ScaLAPACK local array handed to
 * lm_dist_tensor_from_scalapack, a lm_dist_tensor_from_local borrow) move fastest from here.
 *
 * @param out     receives the tensor; set to NULL on failure.
 * @param ndim    0 .. 32; a 0-d tensor (a scalar, shape may be NULL) holds one element.
 * @param shape   ndim extents, each >= 0 (copied; the tensor's shape is its own).
 * @param dtype   a supported dtype (LM_FLOAT16 ... LM_COMPLEX128, LM_BOOL).
 * @param device  kDLCPU (other devices: LM_ERR_NOT_SUPPORTED; a device output comes from the
 *                framework's allocator, handed over as a DLManagedTensor).
 * @return LM_SUCCESS; LM_ERR_INVALID_ARGUMENT naming the argument; LM_ERR_OUT_OF_MEMORY.
 */
LM_NODISCARD LM_API lm_status_t lm_tensor_alloc(DLManagedTensor **out, int ndim,
                                                const int64_t *shape, DLDataType dtype,
                                                DLDevice device);

/* ---------------------------------------------------------------------------------------------
 * Placements: one small POD per mesh dimension.
 * ------------------------------------------------------------------------------------------- */
/** How a tensor lies along one mesh dim (lm_placement_t::kind). */
typedef enum lm_placement_kind_t {
  LM_REPLICATE = 0, /**< every rank along the mesh dim holds the same full value */
  LM_SHARD = 1,     /**< tensor dim `dim` is chunked along the mesh dim like torch.chunk */
  LM_PARTIAL = 2,   /**< each rank holds a partial value; the value is the `reduce_op`
                         reduction */
  LM_RAGGED = 3,    /**< tensor dim `dim` is split along the mesh dim into given extents (a
                         ragged shard: PETSc ownership ranges, numpy.array_split, load balance);
                         `extents` holds their id from lm_extents_create */
  LM_BLOCK_CYCLIC = 4 /**< tensor dim `dim` is dealt in blocks of `block` elements round-robin
                           over the mesh dim, starting at coordinate `source` (ScaLAPACK's MB/NB
                           and RSRC/CSRC); each rank keeps its blocks in order, as ScaLAPACK does */
} lm_placement_kind_t;

/** The reduction of a Partial placement (lm_placement_t::reduce_op). */
typedef enum lm_reduce_op_t {
  LM_REDUCE_SUM = 0, /**< sum (bool: logical or) */
  LM_REDUCE_AVG = 1, /**< average (integers truncate toward zero; bool: not supported) */
  LM_REDUCE_MAX = 2, /**< maximum (bool: logical or; complex: not supported) */
  LM_REDUCE_MIN = 3, /**< minimum (bool: logical and; complex: not supported) */
  LM_REDUCE_PROD = 4 /**< product (bool: logical and) */
} lm_reduce_op_t;

/** The placement of a tensor along one mesh dim. Each field has one meaning, and applies to the
 * kinds named beside it; fields that do not apply to the kind must be 0 (LM_ERR_INVALID_ARGUMENT
 * names the field otherwise). A zero-filled struct is Replicate.
 * kind: lm_placement_kind_t. dim: the tensor dim (Shard, Ragged, BlockCyclic). order: co-shard
 * order (Shard, Ragged), when several mesh dims split one tensor dim: the tensor dim is split
 * first by the mesh dim with the lowest order (ties: lowest mesh dim), then each block again by
 * the next. With all orders 0, mesh dim 0 splits first (as DTensor does). reduce_op:
 * lm_reduce_op_t (Partial).
 * Ragged shards (LM_RAGGED): `dim` as for Shard, `extents` an extents id (lm_extents_create) whose
 * count is the mesh dim's extent: coordinate i holds [e_0 + ... + e_{i-1}, ... + e_i) of the
 * tensor dim (empty extents allowed). A ragged dim must split its tensor dim first (the lowest
 * `order` among the mesh dims sharding it; at most one ragged mesh dim per tensor dim) and its
 * extents must add up to the global extent; Shard dims of higher order split each ragged block
 * like torch.chunk. Ids are local to the process: ranks may hold different ids for the same
 * extents (agreement and plan caches compare the extents, never the ids). Everything that takes
 * placements takes ragged ones (tensors, from_local, gather, reshards, plans, groups, local_map).
 * Id 0 (LM_EXTENTS_AGREED) asks for the extents the ranks' local shapes imply, where a call
 * gathers them: lm_dist_tensor_from_local / _from_managed with LM_SHAPE_ALLGATHER, and
 * lm_local_map outputs without out_shapes or LM_LOCAL_MAP_SHAPES_EVEN (elsewhere
 * LM_ERR_INVALID_ARGUMENT). The tensor made then names a registered id (lm_dist_tensor_placements;
 * readable with lm_extents_get while the tensor lives, no reference to destroy). Extents are an
 * id, not a handle: a placement stays a plain value of eight int32 fields (copied, compared and
 * passed through Fortran, ctypes and Rust as is), equal extents share one id, and the id of
 * agreed extents (0) is a constant.
 * Block-cyclic (LM_BLOCK_CYCLIC): `dim` the tensor dim, `block` the block size b >= 1, `source`
 * the source coordinate s (0 <= s < the mesh dim's extent). Block k = [k b, min((k + 1) b, n)) of the
 * tensor dim belongs to coordinate (k + s) mod P of the P along the mesh dim, which keeps its
 * blocks one after the other in increasing k: its local extent is ScaLAPACK's NUMROC(n, b, c, s,
 * P), global index i sits at local (i / (b P)) b + i mod b (INDXG2L). Two block-cyclic dims on a
 * 2-D mesh give ScaLAPACK's 2-D block-cyclic layout (local arrays row-major here; a Fortran
 * column-major local array is the transposed tensor). A block-cyclic dim is the only mesh dim
 * splitting its tensor dim; Partial dims may sit beside it. Reshards to and from every other
 * placement (same mesh or not, Partial sources and targets included) are supported, device
 * tensors and grouped reshards (where each such entry runs its own plan) too.
 * All Partial dims of one tensor must use the same op (LM_ERR_NOT_SUPPORTED otherwise: with
 * mixed ops the value would depend on the order of the reductions).
 * Integer reductions: sum and prod wrap like two's complement; avg sums in 128 bits (no overflow)
 * and, over several mesh dims, averages dim by dim in mesh-dim order, each division truncating
 * toward zero. Floating avg divides once by the product of the reduced extents. */
typedef struct lm_placement_t {
  int32_t kind;      /**< an lm_placement_kind_t */
  int32_t dim;       /**< the tensor dim (LM_SHARD, LM_RAGGED, LM_BLOCK_CYCLIC), else 0 */
  int32_t order;     /**< co-shard order (LM_SHARD, LM_RAGGED), else 0 */
  int32_t reduce_op; /**< an lm_reduce_op_t (LM_PARTIAL), else 0 */
  int32_t extents;   /**< an extents id, or LM_EXTENTS_AGREED (LM_RAGGED), else 0 */
  int32_t block;     /**< the block size, >= 1 (LM_BLOCK_CYCLIC), else 0 */
  int32_t source;    /**< the source coordinate (LM_BLOCK_CYCLIC), else 0 */
  int32_t reserved;  /**< 0 */
} lm_placement_t;

#ifdef __cplusplus
#define LM_PLACEMENT_(k, d, r, e, b, s) \
  (lm_placement_t{(int32_t)(k), (int32_t)(d), 0, (int32_t)(r), (int32_t)(e), (int32_t)(b), \
                  (int32_t)(s), 0})
#else
/** A placement value from its fields (order 0); use the named forms below. */
#define LM_PLACEMENT_(k, d, r, e, b, s) \
  ((lm_placement_t){(int32_t)(k), (int32_t)(d), 0, (int32_t)(r), (int32_t)(e), (int32_t)(b), \
                    (int32_t)(s), 0})
#endif
/** Replicate, as an lm_placement_t value. */
#define LM_PLACEMENT_REPLICATE LM_PLACEMENT_(LM_REPLICATE, 0, 0, 0, 0, 0)
/** Shard(tensor dim d), as an lm_placement_t value. */
#define LM_PLACEMENT_SHARD(d) LM_PLACEMENT_(LM_SHARD, d, 0, 0, 0, 0)
/** Partial(reduce op o), as an lm_placement_t value. */
#define LM_PLACEMENT_PARTIAL(o) LM_PLACEMENT_(LM_PARTIAL, 0, o, 0, 0, 0)
/** RaggedShard(tensor dim d) with the extents of id `id` (lm_extents_create), as a value. */
#define LM_PLACEMENT_RAGGED(d, id) LM_PLACEMENT_(LM_RAGGED, d, 0, id, 0, 0)
/** BlockCyclic(tensor dim d, block b, source coordinate s), as an lm_placement_t value. */
#define LM_PLACEMENT_BLOCK_CYCLIC(d, b, s) LM_PLACEMENT_(LM_BLOCK_CYCLIC, d, 0, 0, b, s)

/** The extents id of a ragged placement whose extents are agreed from the local shapes (see
 * lm_placement_t): LM_PLACEMENT_RAGGED(d, LM_EXTENTS_AGREED). */
#define LM_EXTENTS_AGREED 0

/** Registers the extents of a ragged placement (local, thread-safe): `count` lengths >= 0, one
 * per coordinate of the mesh dim that will use them, and returns their id (>= 1) for
 * lm_placement_t::extents. Equal extents get the same id (and one more reference): every
 * lm_extents_create is matched by one lm_extents_destroy. Tensors and plans keep the extents they
 * were made with.
 * @param id      out: the id
 * @param extents count lengths (their sum must fit in int64)
 * @param count   1 .. 2^31 - 1
 * @return LM_SUCCESS; LM_ERR_INVALID_ARGUMENT naming the argument (a negative length, an
 *         overflowing sum, NULL, count out of range); LM_ERR_OUT_OF_MEMORY */
LM_NODISCARD LM_API lm_status_t lm_extents_create(int32_t *id, const int64_t *extents,
                                                  int64_t count);

/** Reads extents back: their count into *count and, when `extents` is not NULL, up to `capacity`
 * lengths into it (call with extents NULL to learn the count). Ids from lm_dist_tensor_placements
 * name extents the library registered for the tensor (they stay readable while it lives).
 * @return LM_SUCCESS; LM_ERR_INVALID_ARGUMENT for an unknown id, NULL count, or a capacity
 *         below the count with extents not NULL */
LM_NODISCARD LM_API lm_status_t lm_extents_get(int32_t id, int64_t *extents, int64_t capacity,
                                               int64_t *count);

/** Drops one reference to the extents of `id` (local). 0 is a no-op. The id stays valid while a
 * reference or a tensor or plan made with it lives; placements naming it are refused after that
 * (LM_ERR_INVALID_ARGUMENT: unknown extents id).
 * @return LM_SUCCESS; LM_ERR_INVALID_ARGUMENT for an id that is not registered */
LM_API lm_status_t lm_extents_destroy(int32_t id);

/** Writes e.g. "[S(0), R, P(sum)]" for the n placements into buf of `size` bytes (always
 * NUL-terminated when size > 0). */
LM_NODISCARD LM_API lm_status_t lm_placements_format(const lm_placement_t *placements, int n,
                                                     char *buf, size_t size);

/** The placements of the gradient of a value placed as `placements` (local), PyTorch DTensor's
 * convention (its redistribute backward): gradients of replicated values are replicated.
 * Shard(d) -> Shard(d), Replicate -> Replicate, Partial(sum) -> Replicate (the gradient of each
 * rank's partial is the whole gradient). lm_reshard_plan_adjoint uses it on both ends of a plan.
 * @param placements n placements (kinds and ops are checked)
 * @param n          0 .. 32 (a mesh's dims)
 * @param out        n placements written (may be placements itself)
 * @return LM_SUCCESS; LM_ERR_INVALID_ARGUMENT for a bad placement or n;
 *         LM_ERR_NOT_SUPPORTED for Partial(avg) (the gradient is scaled by 1/k: no placement says
 *         that) and Partial(max/min/prod) (no linear adjoint), naming placements[i] */
LM_NODISCARD LM_API lm_status_t lm_placements_adjoint(const lm_placement_t *placements, int n,
                                                      lm_placement_t *out);

/** Torch.chunk layout math: the [offset, offset+length) range that block `index` of `parts` gets
 * of an extent `n` (block = ceil(n/parts); trailing blocks may be short or empty). Exact for every
 * n >= 0, parts >= 1 and 0 <= index < parts, up to INT64_MAX (nothing overflows). */
LM_NODISCARD LM_API lm_status_t lm_layout_chunk(int64_t n, int64_t parts, int64_t index,
                                                int64_t *offset, int64_t *length);

/** The extents of the compact row-major array that a view lies in at its first element: the
 * view's own shape when it is compact (strides NULL or row-major), else the padded rows it is a
 * block of (strides each a multiple of the next, the innermost 1: a ScaLAPACK array with
 * LLD_ > LOCr gives {LOCc, LLD_}), which is what lm_dist_tensor_local and lm_local_map's fn show of
 * a padded borrow. A view with an empty extent is compact. Local; reads shape and strides only.
 * @param view    ndim 0 .. 32; shape not NULL when ndim > 0
 * @param extents out: view->ndim extents
 * @param n       capacity of extents; must be view->ndim
 * @return LM_SUCCESS; LM_ERR_INVALID_ARGUMENT naming view, extents or n, also for strides that
 *         are neither compact nor padded (transposed, overlapping, negative) */
LM_NODISCARD LM_API lm_status_t lm_padded_extents(const DLTensor *view, int64_t *extents, int n);

/* ---------------------------------------------------------------------------------------------
 * Mesh: an N-D grid of MPI ranks.
 * ------------------------------------------------------------------------------------------- */
/** A mesh handle (typed opaque pointer). */
typedef struct lm_mesh_s *lm_mesh_t;

/** lm_mesh_config_t::magic ("LMMC"). */
#define LM_MESH_CONFIG_MAGIC 0x4c4d4d43u /* "LMMC" */
/** lm_mesh_config_t::version of this header. */
#define LM_MESH_CONFIG_VERSION 2u

/** Options of lm_mesh_create. Initialise with LM_MESH_CONFIG_INIT, then set fields. The library
 * reads min(size, its own sizeof) bytes, so an older caller keeps working. */
typedef struct lm_mesh_config_t {
  size_t size;      /**< sizeof(lm_mesh_config_t) of the caller */
  uint32_t magic;   /**< LM_MESH_CONFIG_MAGIC */
  uint32_t version; /**< LM_MESH_CONFIG_VERSION of the caller */
  /** Ranks of the parent communicator forming the mesh, row-major over the mesh shape (nranks must
   * equal the product of the shape). NULL: all ranks of the parent, in order. */
  const int *ranks;
  int nranks; /**< number of entries in ranks (0 when ranks is NULL) */
  /** NULL, or one name per mesh dim ("dp", "tp", ...): distinct, non-empty, at most 63 chars. */
  const char *const *dim_names;
  /** (version 2) Argument checks of the collective calls on this mesh: -1 (the default) takes
   *  the LM_CHECK environment variable (itself 1 when unset). 0: no argument agreement (ranks that
   *  pass different arguments get undefined results, hangs included); 1: every collective call
   *  agrees on a fingerprint of its arguments before data moves (LM_ERR_MISMATCH on every rank
   *  otherwise; one small allreduce); 2: also checks data invariants at the cost of a pass over
   *  the data (Replicate shards equal across ranks; from_local's extents checked against the
   *  layout, which makes LM_SHAPE_GIVEN/EVEN collective over the members). The ranks use the highest level any of them
   *  asked for. */
  int check_level;
  /** (version 2) Deadline in seconds of the blocking waits of collective calls on this mesh:
   *  < 0 (the default) takes the LM_TIMEOUT environment variable (off when unset); 0: wait for
   *  ever; > 0: a call that waits longer returns LM_ERR_TIMEOUT and marks the mesh broken. */
  double timeout;
} lm_mesh_config_t;

/** Initialiser of lm_mesh_config_t: this header's size, magic and version, every option at its
 * default. */
#define LM_MESH_CONFIG_INIT \
  {sizeof(lm_mesh_config_t), LM_MESH_CONFIG_MAGIC, LM_MESH_CONFIG_VERSION, NULL, 0, NULL, -1, -1.0}

/** Creates a mesh of `ndim` dims with extents shape[0..ndim) over ranks of `parent_comm`
 * (a Fortran handle: MPI_Comm_c2f(comm), mpi4py's comm.py2f(), mpi_f08's comm%MPI_VAL).
 * Collective over the parent (every parent rank calls, members or not, with the same arguments;
 * agrees). Ranks outside the mesh get a handle whose membership query says 0; they may create
 * placeholder tensors on it and take part in cross-mesh reshards. config may be NULL.
 * LM_ERR_MISMATCH on every rank when the ranks passed different arguments, or when a setting that
 * must agree (README, "Settings") differs between the parent's processes: the message names the
 * variable and each world rank's value. */
LM_NODISCARD LM_API lm_status_t lm_mesh_create(lm_mesh_t *mesh, int parent_comm, int ndim,
                                               const int64_t *shape,
                                               const lm_mesh_config_t *config);
/** The 2-D mesh [NPROW, NPCOL] of a process grid: its coordinate (r, c) is the rank of
 * `parent_comm` that passes (myrow, mycol) = (r, c), such as a BLACS grid (pass what
 * blacs_gridinfo returns), so that lm_dist_tensor_from_scalapack's mesh is the grid. A rank
 * outside the grid passes -1, -1. NPROW and NPCOL are the largest coordinates passed, plus one.
 * config as for lm_mesh_create (its ranks are replaced by the grid's). Collective over
 * parent_comm (one allgather of the coordinates, then lm_mesh_create); a coordinate claimed twice
 * or by no rank is LM_ERR_INVALID_ARGUMENT on every rank, naming it. */
LM_NODISCARD LM_API lm_status_t lm_mesh_create_grid(lm_mesh_t *mesh, int parent_comm, int myrow,
                                                    int mycol, const lm_mesh_config_t *config);
/** Destroys a mesh handle. Local, NULL-safe; the mesh lives on while tensors or plans reference
 * it. Sets *mesh = NULL. The handle is dead afterwards (LM_ERR_INVALID_ARGUMENT), even while the
 * mesh lives on. A borrowed handle (see lm_dist_tensor_mesh) is refused with
 * LM_ERR_INVALID_ARGUMENT. */
LM_API lm_status_t lm_mesh_destroy(lm_mesh_t *mesh);

/** The number of mesh dims. */
LM_NODISCARD LM_API lm_status_t lm_mesh_ndim(lm_mesh_t mesh, int *ndim);
/** The mesh extents: writes min(n, ndim) of them into shape. */
LM_NODISCARD LM_API lm_status_t lm_mesh_shape(lm_mesh_t mesh, int64_t *shape, int n);
/** Number of ranks in the mesh. */
LM_NODISCARD LM_API lm_status_t lm_mesh_size(lm_mesh_t mesh, int *size);
/** Whether this rank belongs to the mesh (*is_member 1 or 0). */
LM_NODISCARD LM_API lm_status_t lm_mesh_is_member(lm_mesh_t mesh, int *is_member);
/** This rank's coordinate (n >= ndim); LM_ERR_INVALID_USAGE on a non-member. */
LM_NODISCARD LM_API lm_status_t lm_mesh_coord(lm_mesh_t mesh, int64_t *coord, int n);
/** This rank's row-major index in the mesh (0 .. size-1); LM_ERR_INVALID_USAGE on a non-member. */
LM_NODISCARD LM_API lm_status_t lm_mesh_rank(lm_mesh_t mesh, int *mesh_rank);
/** The parent-communicator rank at a coordinate (n == ndim). */
LM_NODISCARD LM_API lm_status_t lm_mesh_rank_at(lm_mesh_t mesh, const int64_t *coord, int n,
                                                int *parent_rank);
/** Index of the dim called `name`; LM_ERR_INVALID_ARGUMENT if none. */
LM_NODISCARD LM_API lm_status_t lm_mesh_dim_index(lm_mesh_t mesh, const char *name, int *dim);
/** Writes the dim's name (or "" when unnamed) into buf. */
LM_NODISCARD LM_API lm_status_t lm_mesh_dim_name(lm_mesh_t mesh, int dim, char *buf, size_t size);
/** The communicator of the ranks that share this rank's coordinate except along `dim`, ordered by
 * their coordinate along `dim`, as a Fortran handle. Owned by the mesh: do not free it.
 * LM_ERR_INVALID_USAGE on a non-member. */
LM_NODISCARD LM_API lm_status_t lm_mesh_dim_comm(lm_mesh_t mesh, int dim, int *comm_f);
/** The communicator of all mesh ranks (row-major order), owned by the mesh. */
LM_NODISCARD LM_API lm_status_t lm_mesh_comm(lm_mesh_t mesh, int *comm_f);

/* ---------------------------------------------------------------------------------------------
 * Devices: CUDA streams, allocators and transports of a mesh.
 *
 * Device tensors (DLDevice {kDLCUDA, id}) hold their shard in CUDA memory of device `id`. They are
 * created by the library (lm_dist_tensor_zeros, lm_reshard_plan_alloc_target, reshard outputs:
 * stream-ordered cudaMallocAsync on the mesh's stream, or the mesh's alloc/free callbacks) or wrap
 * the caller's device memory without a copy (lm_dist_tensor_from_local with
 * LM_FROM_LOCAL_BORROW, lm_dist_tensor_from_dlpack).
 *
 * Streams. All device work of a call on a mesh (copies, kernels, NCCL) is enqueued on the mesh's
 * stream, and the library never synchronizes the device: a call that moves device data returns
 * once the work is ENQUEUED, as NCCL's calls do. Order your own work on the same stream (or wait
 * for it with events). Device memory the caller passes must be ready in the stream's order.
 * The one exception is the host-staged transport (LM_TRANSPORT_MPI_STAGED): MPI moves host
 * memory, so such a call waits for the mesh's stream (cudaStreamSynchronize, never the device)
 * before the data leave, and returns with the copy back to the device enqueued.
 * Host-only functions (lm_dist_tensor_from_global, lm_dist_tensor_gather: their global buffers are
 * host memory) accept device tensors and stage them through host memory in the same way.
 * ------------------------------------------------------------------------------------------- */

/** A device allocator a framework provides (e.g. its caching allocator): returns `bytes` bytes of
 * memory on CUDA device `device_id`, usable in the order of `stream` (a cudaStream_t), or NULL on
 * failure (the call then fails with LM_ERR_OUT_OF_MEMORY). Called with bytes > 0. */
typedef void *(*lm_device_alloc_fn_t)(void *ctx, size_t bytes, int device_id, void *stream);
/** Gives back memory of lm_device_alloc_fn_t (same bytes, device and stream as allocated). May be
 * called from any localmap call or destroy, never from a CUDA callback. */
typedef void (*lm_device_free_fn_t)(void *ctx, void *ptr, size_t bytes, int device_id,
                                    void *stream);

/** Magic word of lm_device_config_t ("LMDC"). */
#define LM_DEVICE_CONFIG_MAGIC 0x4c4d4443u
/** Version of lm_device_config_t this header describes. */
#define LM_DEVICE_CONFIG_VERSION 1u

/** Device options of one mesh on this rank (lm_mesh_set_device_config). Initialise with
 * LM_DEVICE_CONFIG_INIT, then set fields; the library reads min(size, its sizeof) bytes. */
typedef struct lm_device_config_t {
  size_t size;      /**< sizeof(lm_device_config_t) */
  uint32_t magic;   /**< LM_DEVICE_CONFIG_MAGIC */
  uint32_t version; /**< LM_DEVICE_CONFIG_VERSION */
  /** The cudaStream_t all device work of the mesh is ordered on; NULL: the legacy default
   * stream. */
  void *stream;
  /** Both NULL: stream-ordered cudaMallocAsync/cudaFreeAsync. Both set: these callbacks. */
  lm_device_alloc_fn_t alloc;
  lm_device_free_fn_t free; /**< see alloc */
  void *alloc_ctx;          /**< passed to alloc and free as ctx */
} lm_device_config_t;

/** Initialiser of lm_device_config_t: the default stream and allocator. */
#define LM_DEVICE_CONFIG_INIT \
  {sizeof(lm_device_config_t), LM_DEVICE_CONFIG_MAGIC, LM_DEVICE_CONFIG_VERSION, NULL, NULL, NULL, NULL}

/** Sets this rank's device options of `mesh` (local: each rank sets its own stream). Takes effect
 * for the calls that follow; memory allocated before keeps the allocator (and stream) it came
 * from. config NULL restores the defaults. Works in builds without CUDA too (nothing uses it).
 * @return LM_SUCCESS; LM_ERR_INVALID_ARGUMENT for a bad mesh, a config whose magic/size/version
 *         is wrong, or alloc/free not both set or both NULL (the call had no effect) */
LM_NODISCARD LM_API lm_status_t lm_mesh_set_device_config(lm_mesh_t mesh,
                                                          const lm_device_config_t *config);
/** Writes this rank's device options of `mesh` into *config (config->size bytes at most; set size
 * first, e.g. with LM_DEVICE_CONFIG_INIT). The way for lm_local_map's fn to learn the stream:
 * `lm_mesh_device_config(mesh, &c)` then enqueue on c.stream. */
LM_NODISCARD LM_API lm_status_t lm_mesh_device_config(lm_mesh_t mesh, lm_device_config_t *config);

/** How a mesh moves tensor data. Append-only. */
typedef enum lm_transport_t {
  LM_TRANSPORT_UNDECIDED = 0, /**< device data has not moved on this mesh yet */
  LM_TRANSPORT_MPI = 1,       /**< MPI on host memory (every host tensor) */
  LM_TRANSPORT_NCCL = 2,      /**< NCCL on device memory, bootstrapped over the mesh's MPI comm */
  LM_TRANSPORT_MPI_STAGED = 3 /**< device data staged through pinned host memory, moved by MPI */
} lm_transport_t;

/** Which transport moves tensors of `device_type` on `mesh` (local, no communication).
 * kDLCPU: always LM_TRANSPORT_MPI. kDLCUDA: chosen per mesh at the first device data movement
 * (collective then anyway): LM_TRANSPORT_NCCL when the build has NCCL, no two ranks of the mesh
 * share one GPU (checked by one allgather of host name + PCI bus id: NCCL refuses "Duplicate GPU")
 * and the environment does not say LM_TRANSPORT=mpi; LM_TRANSPORT_MPI_STAGED otherwise. Until
 * then LM_TRANSPORT_UNDECIDED. A cross-mesh device reshard makes the same choice over the union
 * of both meshes' ranks (at its first device reshard between them, collective over that union):
 * NCCL on a communicator of that union, created once per pair of meshes and kept as long as the
 * older of the two meshes lives (it is freed with it); its work goes on the target mesh's stream (ordered after the source mesh's stream
 * by an event where a rank's two streams differ), else host-staged.
 * @param mesh        the mesh
 * @param device_type kDLCPU or kDLCUDA (or any DLPack device type)
 * @param transport   out: an lm_transport_t value */
LM_NODISCARD LM_API lm_status_t lm_mesh_transport(lm_mesh_t mesh, DLDeviceType device_type,
                                                  int *transport);

/* ---------------------------------------------------------------------------------------------
 * Dist tensors: refcounted handles. A tensor holds a reference on its mesh.
 * Local shards are compact row-major buffers, except a host array borrowed with padded rows
 * (LM_FROM_LOCAL_BORROW or lm_dist_tensor_from_dlpack with strides each a multiple of the next
 * and the innermost 1, e.g. a ScaLAPACK array with LLD_ > LOCr): its views (lm_dist_tensor_local,
 * _to_dlpack, lm_local_map's fn) give those strides. Reshards, plans and groups (blocking and
 * nonblocking) and gather read and write it in place; a padded target of a reshard that ends in
 * a reduction or a new Partial placement (P -> S, R -> P) is written in place too where its rows
 * are at least LM_PAD_IN_PLACE_MIN_RUN bytes long, and through a compact stand-in where they are
 * shorter (one more local copy, no more traffic between ranks). On a rank outside the mesh a
 * tensor is a placeholder
 * with an empty local shard (it still knows its global shape, dtype and placements).
 * Scalars: a tensor of ndim 0 (global_shape may be NULL) is first-class. It holds one element on
 * every member and takes Replicate and Partial placements everywhere: zeros, from_local (every
 * shape mode), from_global, gather, reshard (P -> R, R -> P, P -> P of the same op, across
 * meshes), plans and requests, the accessors and export, lm_local_map inputs and outputs, every
 * dtype and op. Shard cannot exist for it: the call that asks for it fails with
 * LM_ERR_INVALID_ARGUMENT naming the placement. A non-member's 0-d placeholder has data NULL.
 * ------------------------------------------------------------------------------------------- */
/** A dist tensor handle (typed opaque pointer, refcounted): a tensor laid out over a mesh with
 * one placement per mesh dim. Local shards are compact row-major buffers; on a rank outside the
 * mesh a tensor is a placeholder with an empty local shard (it still knows its global shape, dtype
 * and placements). A tensor holds a reference on its mesh. */
typedef struct lm_dist_tensor_s *lm_dist_tensor_t;

/** How a tensor made from local shards learns its global shape. */
typedef enum lm_shape_mode_t {
  LM_SHAPE_GIVEN = 0,     /**< the caller passes it; checked against the local shape */
  LM_SHAPE_EVEN = 1,      /**< local extent * mesh extent along sharded dims (along a ragged dim
                               with registered extents: their sum); no communication */
  LM_SHAPE_ALLGATHER = 2  /**< one small allgather of local extents (right for uneven shards;
                               ragged dims with LM_EXTENTS_AGREED take their extents from it) */
} lm_shape_mode_t;

/** A zero-filled tensor: each member rank allocates its shard on `device` (kDLCUDA: from the
 * mesh's device allocator, zeroed on the mesh's stream; see lm_device_config_t).
 * Local; placements has one entry per mesh dim. Shapes of more than 2^58 elements are refused
 * (LM_ERR_INVALID_ARGUMENT), so that no byte count can overflow. */
LM_NODISCARD LM_API lm_status_t lm_dist_tensor_zeros(lm_dist_tensor_t *out, lm_mesh_t mesh,
                                                     int ndim, const int64_t *global_shape,
                                                     DLDataType dtype, DLDevice device,
                                                     const lm_placement_t *placements);

/* Flags of lm_dist_tensor_from_local. */
/** lm_dist_tensor_from_local flag: copy the shard (any strides) into a buffer the tensor owns. */
#define LM_FROM_LOCAL_COPY 0u
/** lm_dist_tensor_from_local flag: wrap the caller's buffer (compact, or padded rows of host
 * memory: strides each a multiple of the next, the innermost 1); it must outlive the tensor. */
#define LM_FROM_LOCAL_BORROW 1u

/** Builds a tensor from this rank's shard `local`. With strides, the span that shape x strides
 * covers must fit in int64 bytes; borrowed data (BORROW, lm_dist_tensor_from_dlpack, lm_local_map
 * outputs) must be aligned at data + byte_offset to the dtype's element size (its component size
 * for complex; at most 8 bytes): LM_ERR_INVALID_ARGUMENT otherwise. Placements whose Partial op has
 * no meaning for the dtype (bool avg, complex max/min) are refused here with LM_ERR_NOT_SUPPORTED,
 * as by every function that makes a tensor. A rank outside the mesh passes a DLTensor that
 * gives ndim, dtype and device (data and shape are not read) with LM_SHAPE_GIVEN, and gets a
 * placeholder. global_shape is read only with LM_SHAPE_GIVEN (ndim = local->ndim entries). LM_SHAPE_ALLGATHER is collective over
 * the mesh (agrees); the other modes are local. */
LM_NODISCARD LM_API lm_status_t lm_dist_tensor_from_local(lm_dist_tensor_t *out, lm_mesh_t mesh,
                                                          const DLTensor *local,
                                                          const lm_placement_t *placements,
                                                          lm_shape_mode_t shape_mode,
                                                          const int64_t *global_shape,
                                                          unsigned flags);

/** Like lm_dist_tensor_from_local with LM_FROM_LOCAL_BORROW, but takes ownership of `local` on
 * success: its deleter is called when the tensor dies. On failure ownership stays with the caller.
 * The managed tensor must be compact row-major, or padded rows of host memory (see above). */
LM_NODISCARD LM_API lm_status_t lm_dist_tensor_from_dlpack(lm_dist_tensor_t *out, lm_mesh_t mesh,
                                                            DLManagedTensor *local,
                                                            const lm_placement_t *placements,
                                                            lm_shape_mode_t shape_mode,
                                                            const int64_t *global_shape);

/** Builds a tensor from a full (global) tensor. root < 0: every rank passes the full tensor and
 * members slice their shard (local); a rank outside the mesh may pass data NULL (only shape and
 * dtype are read). root >= 0: only mesh rank `root` passes it (others pass NULL) and
 * it is scattered (collective over the mesh). Partial placements: the root's values become the
 * value, as in a reshard from Replicate. */
LM_NODISCARD LM_API lm_status_t lm_dist_tensor_from_global(lm_dist_tensor_t *out, lm_mesh_t mesh,
                                                           const DLTensor *global,
                                                           const lm_placement_t *placements,
                                                           int root);

/** Gathers the full value (Partial reduced) into `dst`, a compact host tensor of the global shape and
 * dtype. root < 0: on every member rank. root >= 0: only on mesh rank `root` (others pass NULL).
 * Collective over the mesh. */
LM_NODISCARD LM_API lm_status_t lm_dist_tensor_gather(lm_dist_tensor_t tensor, int root,
                                                      DLTensor *dst);

/* ScaLAPACK interop. */
/** Entries of a ScaLAPACK array descriptor (DLEN_): DTYPE_, CTXT_, M_, N_, MB_, NB_, RSRC_,
 * CSRC_, LLD_. */
#define LM_SCALAPACK_DLEN 9

/** A dist tensor over this rank's ScaLAPACK local array `data` of the M x N matrix that `desc`
 * (LM_SCALAPACK_DLEN ints; DTYPE_ 1, dense block-cyclic) describes. ScaLAPACK arrays are
 * column-major, so the tensor is the matrix's row-major view: global shape [N, M], placements
 * [BC(1, MB_, RSRC_), BC(0, NB_, CSRC_)] (lm_placement_kind_t LM_BLOCK_CYCLIC) over `mesh`, which
 * must be the 2-D process grid [NPROW, NPCOL] with the BLACS grid's ranks in its order (mesh
 * coordinate (r, c) = grid process (r, c); see localmap_scalapack.h). Its local shard is
 * [LOCc(N), LOCr(M)]. flags: LM_FROM_LOCAL_BORROW wraps `data` without a copy (it must outlive
 * the tensor; with LLD_ > LOCr the shard's rows are padded, strides {LLD_, 1}: see the tensor
 * section; device arrays need LLD_ = max(1, LOCr), else LM_ERR_NOT_SUPPORTED), LM_FROM_LOCAL_COPY
 * copies it (any LLD_ >= max(1, LOCr)). CTXT_ is not read. Errors name the descriptor entry:
 * LM_ERR_INVALID_ARGUMENT for a negative M_/N_, blocks < 1, a source outside the grid, LLD_ too
 * small or a mesh that is not 2-D; LM_ERR_NOT_SUPPORTED for another DTYPE_. A rank outside the
 * mesh gets a placeholder (data is not read). An array allocated with lm_tensor_alloc (after the
 * mesh is made) lies in the node's shared arena: reshards between the ranks of a node then copy
 * it with memcpy, not kernel copies (docs/PERFORMANCE.md: 64 MiB to rows 1.4x faster). Local. */
LM_NODISCARD LM_API lm_status_t lm_dist_tensor_from_scalapack(lm_dist_tensor_t *out,
                                                              lm_mesh_t mesh, const int *desc,
                                                              void *data, DLDataType dtype,
                                                              DLDevice device, unsigned flags);

/** Writes the ScaLAPACK descriptor (LM_SCALAPACK_DLEN ints) of a 2-D tensor [N, M] on a 2-D mesh
 * read as the column-major M x N matrix, the converse of lm_dist_tensor_from_scalapack: CTXT_ =
 * ctxt, LLD_ = max(1, local extent of dim 1) (a padded borrow's own LLD_); its local shard
 * (lm_dist_tensor_local) is the local array. Mesh dim 0 must split tensor dim 1 and mesh dim 1 tensor dim 0, each as BlockCyclic (its
 * block and source) or a lone Shard (block ceil(extent / mesh extent), source 0), or have mesh
 * extent 1; anything else (Partial, ragged, co-shards, the other dim) is LM_ERR_NOT_SUPPORTED
 * naming the placement. Local. */
LM_NODISCARD LM_API lm_status_t lm_dist_tensor_to_scalapack(lm_dist_tensor_t tensor, int ctxt,
                                                              int *desc);

/* Accessors (local). */
/** The tensor's mesh (local). It is a borrowed handle: the mesh creator's handle while
 * that is alive, else a borrowed handle that works for every mesh function (also to create tensors)
 * while the tensor (or anything else holding the mesh) lives, and that lm_mesh_destroy refuses.
 * Do not destroy it. */
LM_NODISCARD LM_API lm_status_t lm_dist_tensor_mesh(lm_dist_tensor_t tensor, lm_mesh_t *mesh);
/** The tensor's number of dims (local). */
LM_NODISCARD LM_API lm_status_t lm_dist_tensor_ndim(lm_dist_tensor_t tensor, int *ndim);
/** The tensor's dtype (local). */
LM_NODISCARD LM_API lm_status_t lm_dist_tensor_dtype(lm_dist_tensor_t tensor, DLDataType *dtype);
/** The device of the tensor's local shard (local). */
LM_NODISCARD LM_API lm_status_t lm_dist_tensor_device(lm_dist_tensor_t tensor, DLDevice *device);
/** The tensor's placements (local): writes n entries; n must equal the mesh ndim. */
LM_NODISCARD LM_API lm_status_t lm_dist_tensor_placements(lm_dist_tensor_t tensor,
                                                          lm_placement_t *placements, int n);
/** The tensor's global shape (local): writes n entries; n must equal the tensor ndim. */
LM_NODISCARD LM_API lm_status_t lm_dist_tensor_global_shape(lm_dist_tensor_t tensor,
                                                            int64_t *shape, int n);
/** The shape of this rank's shard (local): writes n entries; n must equal the tensor ndim. */
LM_NODISCARD LM_API lm_status_t lm_dist_tensor_local_shape(lm_dist_tensor_t tensor, int64_t *shape,
                                                           int n);
/** Global index of the shard's first element, per dim (0 for non-members; along a block-cyclic
 * dim the start of its first block, or the extent when it holds none). */
LM_NODISCARD LM_API lm_status_t lm_dist_tensor_local_offset(lm_dist_tensor_t tensor,
                                                            int64_t *offset, int n);
/** A view of the local shard; its shape points into the tensor, valid while the tensor lives.
 * strides is NULL (compact row-major), or the element strides of a padded borrow (above). Writing
 * through the view changes the tensor. */
LM_NODISCARD LM_API lm_status_t lm_dist_tensor_local(lm_dist_tensor_t tensor, DLTensor *view);
/** Exports the local shard as a DLManagedTensor that holds a reference on the tensor; the consumer
 * calls its deleter once. */
LM_NODISCARD LM_API lm_status_t lm_dist_tensor_to_dlpack(lm_dist_tensor_t tensor,
                                                      DLManagedTensor **managed);

/** Adds one reference (local); each reference is dropped by one lm_dist_tensor_destroy. */
LM_NODISCARD LM_API lm_status_t lm_dist_tensor_retain(lm_dist_tensor_t tensor);
/** Drops one reference (local, NULL-safe) and sets *tensor = NULL. */
LM_API lm_status_t lm_dist_tensor_destroy(lm_dist_tensor_t *tensor);

/* ---------------------------------------------------------------------------------------------
 * Reshard
 * ------------------------------------------------------------------------------------------- */
/** A new tensor holding src's value with `placements` (one per mesh dim of dst_mesh) on dst_mesh
 * (NULL: src's mesh). When nothing moves on this rank and its shard is a contiguous slice of the
 * source's (Replicate -> Shard) in host memory, the result is a view that shares the source's
 * memory, as DTensor's views do: writing one changes the other (device tensors get a copy on the
 * device: their reshards run the mesh's device collectives on every rank). Collective over the ranks of both meshes; ranks in neither return at once
 * with a placeholder. Both meshes must come from the same parent communicator. Uses an internal
 * plan cache (up to 64 plans per source mesh, same-mesh and cross-mesh alike, dropped with either
 * mesh), so repeated reshards of one layout pair plan once. */
LM_NODISCARD LM_API lm_status_t lm_dist_tensor_reshard(lm_dist_tensor_t *out, lm_dist_tensor_t src,
                                                       lm_mesh_t dst_mesh,
                                                       const lm_placement_t *placements);

/** A new tensor holding src with its dims permuted, as numpy.transpose(src, perm) (a matrix
 * transpose: perm {1, 0}), laid out with `placements` (one per mesh dim of dst_mesh; tensor dims
 * counted in the result's order) on dst_mesh (NULL: src's mesh): global shape shape[perm[0]], ...,
 * shape[perm[ndim - 1]] and out[i_0, ..., i_{ndim-1}] = src[j] where j[perm[d]] = i_d. Any
 * placements on either side, uneven, ragged, block-cyclic (a ScaLAPACK transpose, p?tran without
 * the arithmetic) and Partial (a transpose is linear: the result stays Partial). It moves the
 * bytes of one reshard (to the target's placements in src's dim order) and writes each box it
 * copies or receives transposed, straight into the result; where that reshard ends in a
 * reduction or a Partial fill (a Partial target), it transposes each shard in one more local
 * pass. Device tensors too: there the reshard runs on the device path and one kernel writes each
 * shard transposed (the result on src's device, in the stream order of dst_mesh).
 * perm: ndim entries, a permutation of 0 .. ndim - 1 (else LM_ERR_INVALID_ARGUMENT naming the
 * entry); the ranks agree on it as on the placements. Collective over the ranks of both meshes,
 * as lm_dist_tensor_reshard. */
LM_NODISCARD LM_API lm_status_t lm_dist_tensor_transpose(lm_dist_tensor_t *out, lm_dist_tensor_t src,
                                                         const int *perm, lm_mesh_t dst_mesh,
                                                         const lm_placement_t *placements);
/** src with its dims permuted (as lm_dist_tensor_transpose) written into dst, an existing tensor
 * on src's device (host or CUDA) whose global shape is src's permuted by perm, of src's dtype,
 * on any mesh of src's parent with any placements: COSTA's transform with a transpose, or p?tran
 * into a ScaLAPACK array borrowed with lm_dist_tensor_from_scalapack (padded rows included: the
 * padding is never written). dst's shard is overwritten on every rank of its mesh, with the values a reshard to
 * dst's placements would give (a Partial placement of dst included).
 * LM_ERR_INVALID_ARGUMENT, naming the argument, for a global shape or dtype that does not match
 * and, agreed on every rank, for a dst shard that shares memory with src's (no transpose in
 * place) and for a dst on another device than src's (a host dst of a device src included).
 * Collective over the ranks of both meshes, as lm_dist_tensor_reshard. */
LM_NODISCARD LM_API lm_status_t lm_dist_tensor_transpose_into(lm_dist_tensor_t dst,
                                                              lm_dist_tensor_t src,
                                                              const int *perm);

/** A persistent reshard plan handle (typed opaque pointer). */
typedef struct lm_reshard_plan_s *lm_reshard_plan_t;
/** A nonblocking reshard in flight (typed opaque pointer), from lm_reshard_plan_start. */
typedef struct lm_request_s *lm_request_t;

/** A persistent plan for one (source layout, target layout, dtype, global shape). Local: planning
 * needs no communication. dst_mesh NULL means src_mesh (as in lm_dist_tensor_reshard). The plan
 * holds both meshes: destroying their handles does not end it. */
LM_NODISCARD LM_API lm_status_t lm_reshard_plan_create(lm_reshard_plan_t *plan, lm_mesh_t src_mesh,
                                                       const lm_placement_t *src_placements,
                                                       lm_mesh_t dst_mesh,
                                                       const lm_placement_t *dst_placements,
                                                       int ndim, const int64_t *global_shape,
                                                       DLDataType dtype);
/** A zero-filled tensor laid out as the plan's target, on `device`. Local. */
LM_NODISCARD LM_API lm_status_t lm_reshard_plan_alloc_target(lm_dist_tensor_t *out,
                                                             lm_reshard_plan_t plan,
                                                             DLDevice device);
/** Runs the plan from src into dst (dst laid out as the plan's target; overwritten). Collective
 * over the ranks of both meshes. No allocation in steady state. */
LM_NODISCARD LM_API lm_status_t lm_reshard_plan_execute(lm_reshard_plan_t plan,
                                                        lm_dist_tensor_t src,
                                                        lm_dist_tensor_t dst);
/** Starts the plan without waiting. src and dst must not be touched until the request completes.
 * At most one request per plan is in flight. */
LM_NODISCARD LM_API lm_status_t lm_reshard_plan_start(lm_request_t *request, lm_reshard_plan_t plan,
                                                      lm_dist_tensor_t src, lm_dist_tensor_t dst);
/** Makes progress; *done = 1 once complete (then the request is finished and freed: *request NULL). */
LM_NODISCARD LM_API lm_status_t lm_request_test(lm_request_t *request, int *done);
/** Completes the request and frees it (*request = NULL). */
LM_NODISCARD LM_API lm_status_t lm_request_wait(lm_request_t *request);
/** Writes a one-line human description of the plan's steps into buf. */
LM_NODISCARD LM_API lm_status_t lm_reshard_plan_describe(lm_reshard_plan_t plan, char *buf,
                                                         size_t size);
/** The backward plan of `plan` (local, like lm_reshard_plan_create): it moves a gradient laid
 * out as lm_placements_adjoint(target placements) on the target mesh to
 * lm_placements_adjoint(source placements) on the source mesh, same global shape and dtype. So the
 * adjoint of an all-gather S(d) -> R is a slice R -> S(d) (nothing moves), of a reduce-scatter
 * P(sum) -> S(d) an all-gather S(d) -> R, of R -> P(sum) nothing (R -> R). Destroy it with
 * lm_reshard_plan_destroy.
 * @return LM_SUCCESS; LM_ERR_INVALID_ARGUMENT for a NULL or dead plan, a NULL adjoint;
 *         LM_ERR_NOT_SUPPORTED when either end has Partial(avg/max/min/prod) (see
 *         lm_placements_adjoint) */
LM_NODISCARD LM_API lm_status_t lm_reshard_plan_adjoint(lm_reshard_plan_t *adjoint,
                                                        lm_reshard_plan_t plan);

/** Routes of a plan's data (lm_reshard_plan_info_t::routes), bits. */
typedef enum lm_route_t {
  LM_ROUTE_MPI = 1,        /**< MPI messages between ranks */
  LM_ROUTE_NODE_LOCAL = 2, /**< copies between ranks of one node (process_vm_readv/writev, arena) */
  LM_ROUTE_BOARD = 4       /**< the board exchange: small plans moved inside their agreement round */
} lm_route_t;

/** What executing a plan moves, from the plan's own schedule (lm_reshard_plan_info). Counts are
 * this rank's, or every rank's summed with LM_PLAN_INFO_ALL_RANKS. A flow is one peer's share of
 * one step in one direction: the transport may carry it as several messages (staged pieces of
 * LM_STAGING_BYTES, 1 GiB pieces, reduce-scatter segments), never as more bytes. Initialise with
 * LM_RESHARD_PLAN_INFO_INIT; the library writes min(size, its own sizeof) bytes, so an older
 * caller keeps working. */
typedef struct lm_reshard_plan_info_t {
  size_t size;                 /**< sizeof(lm_reshard_plan_info_t) of the caller */
  uint32_t magic;              /**< LM_RESHARD_PLAN_INFO_MAGIC */
  uint32_t version;            /**< LM_RESHARD_PLAN_INFO_VERSION of the caller */
  uint32_t routes;             /**< lm_route_t bits a blocking host execution uses */
  uint32_t reserved;           /**< 0 (written 0 by the library) */
  int64_t steps;               /**< steps of the schedule (exchange, reduce-scatter, fill) */
  int64_t peers;               /**< distinct other ranks this rank exchanges bytes with */
  int64_t flows_sent;          /**< (peer, step) pairs this rank sends to */
  int64_t flows_received;      /**< (peer, step) pairs this rank receives from */
  int64_t bytes_sent;          /**< bytes this rank sends to other ranks */
  int64_t bytes_received;      /**< bytes from other ranks */
  int64_t bytes_copied;        /**< bytes copied locally from this rank's input to its output */
  int64_t bytes_reduced;       /**< other ranks' contributions reduced into this rank's output */
  int64_t bytes_node_local;    /**< of bytes_sent + bytes_received: to or from ranks of this
                                    node at or above LM_NODE_LOCAL_MIN_BYTES (blocking host
                                    executions copy them between the processes) */
  int64_t work_bytes;          /**< intermediate step outputs an execution holds */
  int64_t staging_bytes_max;   /**< bound on the staging an execution holds: the most one step
                                    sends and receives (plus an integer average's 128-bit
                                    accumulator), at most LM_STAGING_BYTES */
} lm_reshard_plan_info_t;
/** lm_reshard_plan_info_t::magic ("LMPI"). */
#define LM_RESHARD_PLAN_INFO_MAGIC 0x4c4d5049u /* "LMPI" */
/** The version of lm_reshard_plan_info_t this header describes. */
#define LM_RESHARD_PLAN_INFO_VERSION 1u
/** An lm_reshard_plan_info_t ready for lm_reshard_plan_info. */
#define LM_RESHARD_PLAN_INFO_INIT                                                                \
  {sizeof(lm_reshard_plan_info_t), LM_RESHARD_PLAN_INFO_MAGIC, LM_RESHARD_PLAN_INFO_VERSION, 0, 0, \
   0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
/** lm_reshard_plan_info flags. */
enum {
  LM_PLAN_INFO_ALL_RANKS = 1 /**< sum over every rank of the plan's meshes (routes: OR); collective */
};

/** Fills `info` with what executing the plan moves (see lm_reshard_plan_info_t). Local, no
 * communication, unless flags has LM_PLAN_INFO_ALL_RANKS: then collective over the ranks of both
 * meshes (one small reduction) and every rank gets the sums.
 * @param plan  a live plan
 * @param flags 0 or LM_PLAN_INFO_ALL_RANKS
 * @param info  initialised with LM_RESHARD_PLAN_INFO_INIT (magic, size and version are checked)
 * @return LM_SUCCESS; LM_ERR_INVALID_ARGUMENT for a NULL or dead plan, a NULL info, a magic that is
 *         not LM_RESHARD_PLAN_INFO_MAGIC, a size below the first version's or a version this
 *         library does not know, unknown flags */
LM_NODISCARD LM_API lm_status_t lm_reshard_plan_info(lm_reshard_plan_t plan, int flags,
                                                     lm_reshard_plan_info_t *info);
/** What a reshard would move, without building a plan: the numbers lm_reshard_plan_info gives
 * for the plan lm_reshard_plan_create would build from the same arguments (this rank's schedule,
 * the transports' route rules). For layout searches (auto-sharding): local and pure unless flags
 * has LM_PLAN_INFO_ALL_RANKS (then collective over both meshes, as lm_reshard_plan_info), no
 * handle, no buffer that depends on the tensor, O(peers) time (bench/bench_estimate.c).
 * @param src_mesh        the source layout's mesh
 * @param src_placements  its placements (one per dimension of src_mesh)
 * @param dst_mesh        the target layout's mesh; NULL means src_mesh
 * @param dst_placements  the target placements (one per dimension of dst_mesh)
 * @param ndim            the tensor's number of dimensions (0 for a scalar)
 * @param global_shape    its global shape (ndim entries; may be NULL when ndim is 0)
 * @param dtype           its element type
 * @param flags           0 or LM_PLAN_INFO_ALL_RANKS
 * @param info  initialised with LM_RESHARD_PLAN_INFO_INIT
 * @return LM_SUCCESS; LM_ERR_INVALID_ARGUMENT / LM_ERR_NOT_SUPPORTED as lm_reshard_plan_create
 *         for the arguments, and as lm_reshard_plan_info for info and flags */
LM_NODISCARD LM_API lm_status_t lm_reshard_estimate(lm_mesh_t src_mesh,
                                                    const lm_placement_t *src_placements,
                                                    lm_mesh_t dst_mesh,
                                                    const lm_placement_t *dst_placements,
                                                    int ndim, const int64_t *global_shape,
                                                    DLDataType dtype, int flags,
                                                    lm_reshard_plan_info_t *info);

/** Host memory handed out by the library's buffer pool on this process (tensor storage, reshard
 * staging and intermediate buffers): the bytes in use now and their high-water mark, counted as
 * requested sizes rounded up to 64 bytes. Local and thread-safe. A reshard's peak extra memory is
 * the rise of the mark over the bytes in use before it (docs/DESIGN.md states the bound).
 * @param in_use     bytes in use now (may be NULL)
 * @param peak       the high-water mark since the last reset (may be NULL)
 * @param reset_peak non-zero: after reading, set the mark to the bytes in use now
 * @return LM_SUCCESS */
LM_NODISCARD LM_API lm_status_t lm_pool_stats(int64_t *in_use, int64_t *peak, int reset_peak);
/** Destroys a plan (local, NULL-safe; sets *plan = NULL). A plan with a request in flight must not
 * be destroyed before it completes. */
LM_API lm_status_t lm_reshard_plan_destroy(lm_reshard_plan_t *plan);

/* ---------------------------------------------------------------------------------------------
 * Grouped reshards: many tensors in one communication round.
 * ------------------------------------------------------------------------------------------- */
/** A grouped reshard plan handle (typed opaque pointer): N reshards between one pair of meshes.
 * Empty groups: every grouped call (lm_reshard_group_create, _alloc_targets, _execute and _start)
 * takes n = 0 with NULL arrays (entries, src, dst, out) and does nothing with them; with n > 0 a
 * NULL array is LM_ERR_INVALID_ARGUMENT naming it. To reshard a list of tensors once, create a
 * group from their entries, alloc its targets, execute it and destroy it (what the bindings'
 * reshard_many do). */
typedef struct lm_reshard_group_s *lm_reshard_group_t;
/** One entry of a group: what lm_reshard_plan_create takes, for one tensor. */
typedef struct lm_reshard_entry_t {
  int ndim;                               /**< tensor rank (0..LM_MAX_NDIM) */
  const int64_t *global_shape;            /**< ndim extents */
  DLDataType dtype;                       /**< element type */
  const lm_placement_t *src_placements;   /**< one per source mesh dim */
  const lm_placement_t *dst_placements;   /**< one per target mesh dim */
} lm_reshard_entry_t;
/** lm_reshard_group_config_t::magic ("LMGC"). */
#define LM_RESHARD_GROUP_CONFIG_MAGIC 0x4c4d4743u /* "LMGC" */
/** The version of lm_reshard_group_config_t this header describes. */
#define LM_RESHARD_GROUP_CONFIG_VERSION 1u
/** Options of lm_reshard_group_create. Initialise with LM_RESHARD_GROUP_CONFIG_INIT, then set
 * fields; the library reads the fields the caller's size covers. */
typedef struct lm_reshard_group_config_t {
  size_t size;          /**< sizeof(lm_reshard_group_config_t) of the caller */
  uint32_t magic;       /**< LM_RESHARD_GROUP_CONFIG_MAGIC */
  uint32_t version;     /**< LM_RESHARD_GROUP_CONFIG_VERSION */
  /** Bound of a bucket, in global bytes (shape x dtype size summed over its entries); 0: the
   * default, 64 MiB. Entries are dealt in order into buckets; each bucket moves all its entries'
   * bytes for a peer in one message per step, so one execution stages at most about twice a
   * bucket's bytes at a time. An entry larger than the bound runs alone, through its own plan. */
  size_t bucket_bytes;
  /** Entries larger than this (global bytes) run alone, through their own plan; 0: the default,
   * 1 MiB. Coalescing saves a message per peer and step but packs and unpacks the bytes: it pays
   * for small tensors, whose cost is latency, not for large ones, whose plans move their bytes
   * in place (node-local single copies). */
  size_t alone_bytes;
} lm_reshard_group_config_t;
/** An lm_reshard_group_config_t with the defaults. */
#define LM_RESHARD_GROUP_CONFIG_INIT \
  {sizeof(lm_reshard_group_config_t), LM_RESHARD_GROUP_CONFIG_MAGIC,             \
   LM_RESHARD_GROUP_CONFIG_VERSION, 0, 0}
/** A grouped plan for n reshards from src_mesh to dst_mesh (NULL: src_mesh), created once and
 * executed many times. Each step of an execution sends one message per peer carrying every
 * entry's bytes for it (per bucket, see lm_reshard_group_config_t), not one round per tensor; the
 * results are bit-identical to n lm_reshard_plan_execute calls. Local, like
 * lm_reshard_plan_create; entries (n >= 0 of them) are copied. config may be NULL (defaults). */
LM_NODISCARD LM_API lm_status_t lm_reshard_group_create(lm_reshard_group_t *group,
                                                        lm_mesh_t src_mesh, lm_mesh_t dst_mesh,
                                                        int n, const lm_reshard_entry_t *entries,
                                                        const lm_reshard_group_config_t *config);
/** Zero-filled tensors laid out as the n entries' targets, on `device` (out: n handles; on failure
 * none is left). Local. n must be the group's size; an empty group takes n = 0 and out NULL. */
LM_NODISCARD LM_API lm_status_t lm_reshard_group_alloc_targets(lm_dist_tensor_t *out,
                                                               lm_reshard_group_t group,
                                                               DLDevice device, int n);
/** Runs the group: src[i] into dst[i] for every entry (n must be the group's size). Collective over
 * the ranks of both meshes; one agreement covers the whole group. No target may overlap another
 * target or any source. Device tensors run entry by entry on the device path. */
LM_NODISCARD LM_API lm_status_t lm_reshard_group_execute(lm_reshard_group_t group, int n,
                                                         const lm_dist_tensor_t *src,
                                                         const lm_dist_tensor_t *dst);
/** Starts the group without waiting (complete it with lm_request_wait / lm_request_test). The
 * tensors must not be touched until then; at most one request per group is in flight. *request
 * may come back NULL where nothing is left to wait for (an empty group, for one); lm_request_wait
 * and lm_request_test take it. */
LM_NODISCARD LM_API lm_status_t lm_reshard_group_start(lm_request_t *request,
                                                       lm_reshard_group_t group, int n,
                                                       const lm_dist_tensor_t *src,
                                                       const lm_dist_tensor_t *dst);
/** The group's number of entries and of buckets (either may be NULL). Local. */
LM_NODISCARD LM_API lm_status_t lm_reshard_group_size(lm_reshard_group_t group, int *n,
                                                      int *buckets);
/** Destroys a group (local, NULL-safe; sets *group = NULL); not while a request is in flight. */
LM_API lm_status_t lm_reshard_group_destroy(lm_reshard_group_t *group);

/* ---------------------------------------------------------------------------------------------
 * lm_local_map: run a function written for local tensors on dist tensors.
 * ------------------------------------------------------------------------------------------- */
/** What an lm_arg_t holds, and in which field. */
typedef enum lm_arg_kind_t {
  LM_ARG_NONE = 0,           /**< nothing (an output fn did not set) */
  LM_ARG_DIST_TENSOR = 1,    /**< ptr: lm_dist_tensor_t */
  LM_ARG_TENSOR = 2,         /**< ptr: DLTensor* (borrowed) */
  LM_ARG_INT64 = 3,          /**< i64 */
  LM_ARG_DOUBLE = 4,         /**< f64 */
  LM_ARG_POINTER = 5,        /**< ptr: anything */
  LM_ARG_MANAGED_TENSOR = 6  /**< ptr: DLManagedTensor* (fn outputs only; ownership passes) */
} lm_arg_kind_t;

/** One argument or result. A plain struct (no union) so every FFI can build it. */
typedef struct lm_arg_t {
  int32_t kind;     /**< an lm_arg_kind_t */
  int32_t reserved; /**< 0 */
  int64_t i64;      /**< the value of an LM_ARG_INT64 */
  double f64;       /**< the value of an LM_ARG_DOUBLE */
  void *ptr;        /**< the handle or pointer of the other kinds */
} lm_arg_t;

/* Argument builders: one lm_arg_t value each, usable from C and (as plain inline functions, no
 * compound literals) from C++. They do not retain or copy what they point to. */
/** An lm_arg_t of kind LM_ARG_NONE. */
static inline lm_arg_t lm_arg_none(void) {
  lm_arg_t a = {LM_ARG_NONE, 0, 0, 0.0, NULL};
  return a;
}
/** An input dist tensor (LM_ARG_DIST_TENSOR); the caller keeps its reference. */
static inline lm_arg_t lm_arg_dist(lm_dist_tensor_t tensor) {
  lm_arg_t a = {LM_ARG_DIST_TENSOR, 0, 0, 0.0, (void *)tensor};
  return a;
}
/** A borrowed local tensor (LM_ARG_TENSOR), passed to fn as it is. */
static inline lm_arg_t lm_arg_tensor(DLTensor *tensor) {
  lm_arg_t a = {LM_ARG_TENSOR, 0, 0, 0.0, (void *)tensor};
  return a;
}
/** An owned local tensor (LM_ARG_MANAGED_TENSOR): what fn sets an output tensor to (ownership
 * passes to localmap), and what lm_local_map returns for an output with NULL placements. */
static inline lm_arg_t lm_arg_managed(DLManagedTensor *tensor) {
  lm_arg_t a = {LM_ARG_MANAGED_TENSOR, 0, 0, 0.0, (void *)tensor};
  return a;
}
/** A 64-bit integer (LM_ARG_INT64). */
static inline lm_arg_t lm_arg_i64(int64_t value) {
  lm_arg_t a = {LM_ARG_INT64, 0, value, 0.0, NULL};
  return a;
}
/** A double (LM_ARG_DOUBLE). */
static inline lm_arg_t lm_arg_f64(double value) {
  lm_arg_t a = {LM_ARG_DOUBLE, 0, 0, value, NULL};
  return a;
}
/** An opaque pointer (LM_ARG_POINTER), passed through untouched. */
static inline lm_arg_t lm_arg_ptr(void *pointer) {
  lm_arg_t a = {LM_ARG_POINTER, 0, 0, 0.0, pointer};
  return a;
}

/** The user function. inputs: as given to lm_local_map, except that each LM_ARG_DIST_TENSOR became
 * LM_ARG_TENSOR pointing to this rank's local shard (a view valid during the call; treat it as
 * read-only: it may share memory with the caller's tensor, e.g. a Replicate input resharded to
 * Shard is a slice of it). outputs: nout
 * entries set to LM_ARG_NONE; fn sets each one (tensors as LM_ARG_MANAGED_TENSOR, whose ownership
 * passes to localmap even when fn then fails). Return LM_SUCCESS or any error code; fn may call
 * lm_set_error_message() and may communicate on the mesh's communicators. fn must not throw or
 * longjmp across this call. */
typedef lm_status_t (*lm_local_fn_t)(void *user_data, lm_mesh_t mesh, int nin,
                                     const lm_arg_t *inputs, int nout, lm_arg_t *outputs);

/* Flags of lm_local_map. */
/** lm_local_map flag: reshard dist inputs whose placements/mesh differ from in_placements. */
#define LM_LOCAL_MAP_RESHARD_INPUTS 1u
/** lm_local_map flag: skip the failure agreement (one small allreduce). */
#define LM_LOCAL_MAP_NO_AGREE 2u
/** lm_local_map flag: derive Shard outputs' global shapes assuming even chunks. */
#define LM_LOCAL_MAP_SHAPES_EVEN 4u

/** The most inputs, and the most outputs, one lm_local_map call takes. */
#define LM_LOCAL_MAP_MAX_ARGS 65536

/** Calls fn on the local shards of the dist inputs and wraps its tensor outputs as dist tensors.
 *  nin, nout: 0 .. LM_LOCAL_MAP_MAX_ARGS.
 *  in_placements: NULL, or nin entries, each NULL ("as it is") or mesh-ndim placements a dist
 *    input must have (non-dist inputs take NULL).
 *  out_placements: nout entries, mesh-ndim placements for a tensor output that becomes a dist
 *    tensor; NULL for a non-tensor output, or for a tensor output that comes back as a plain
 *    local tensor: outputs[i] is then this rank's LM_ARG_MANAGED_TENSOR as fn made it, and the
 *    caller owns it (call its deleter once). Its shape and dtype may differ between ranks.
 *  out_shapes: NULL, or nout entries, each NULL or a global shape (ndim of that output).
 *    A Shard or block-cyclic output without a given shape gets its global shape from one small
 *    allgather of local extents (right for uneven shards), or with LM_LOCAL_MAP_SHAPES_EVEN from
 *    local extent * mesh extent. Outputs with no Shard placement take their local shape. A ragged output with
 *    extents id LM_EXTENTS_AGREED takes its extents from that allgather (ragged outputs with a
 *    registered id need none: their extents give the global extent).
 *  mesh: NULL to infer from the dist inputs (all must share it unless RESHARD_INPUTS moves them to
 *    the first one's mesh). With no dist input and mesh NULL, the call is local: fn runs on this
 *    rank with mesh NULL, nothing is agreed, and only non-tensor outputs are allowed (an output
 *    with placements gives LM_ERR_INVALID_ARGUMENT). fn's mesh argument is the caller's mesh
 *    handle, or the inputs' mesh as lm_dist_tensor_mesh gives it (borrowed: do not destroy it).
 *  Sibling meshes: when `mesh` is given, a dist input whose in_placements entry is NULL (kept as
 *    it is) may live on another mesh of the same parent communicator, provided every rank of
 *    `mesh` is a member of the input's mesh (same ranks in any order and shape, or more): fn gets
 *    this rank's shard of it, unmoved. If some rank of `mesh` is not in the input's mesh it
 *    holds no shard, and the call fails with LM_ERR_INVALID_ARGUMENT naming inputs[i] and that
 *    rank (unless LM_LOCAL_MAP_RESHARD_INPUTS and in_placements[i] move it). With `mesh` NULL,
 *    dist inputs on different meshes are refused the same way (unless RESHARD_INPUTS moves
 *    them). The rule reads only the meshes' rank lists, so every rank decides alike.
 *  fn must hand each DLManagedTensor over once: the same one in two outputs is refused
 *    (LM_ERR_INVALID_ARGUMENT; its deleter runs once).
 *  outputs: nout entries: tensors with placements come back as LM_ARG_DIST_TENSOR (new
 *    references the caller destroys), tensors without as LM_ARG_MANAGED_TENSOR (see
 *    out_placements), others as fn set them.
 * Collective over the mesh and agrees: if fn or any step fails on one rank, every rank returns an
 * error (the failing ranks their own, the others LM_ERR_REMOTE naming the rank), outputs are NONE
 * and nothing leaks. LM_LOCAL_MAP_NO_AGREE skips that one allreduce, and with it the argument
 * check: then a failure stays local, the caller must make sure every rank fails alike, and every
 * rank must pass the flag or none (a rank without it waits in the agreement for the others, until
 * LM_TIMEOUT if one is set). Input reshards (LM_LOCAL_MAP_RESHARD_INPUTS) still agree. */
LM_NODISCARD LM_API lm_status_t lm_local_map(lm_local_fn_t fn, void *user_data, int nin,
                                             const lm_arg_t *inputs,
                                             const lm_placement_t *const *in_placements, int nout,
                                             const lm_placement_t *const *out_placements,
                                             const int64_t *const *out_shapes, lm_mesh_t mesh,
                                             unsigned flags, lm_arg_t *outputs);

/* ---------------------------------------------------------------------------------------------
 * Gradient placements: what a hand-written backward pass of an lm_local_map call needs.
 * ------------------------------------------------------------------------------------------- */
/** What the backward pass of one lm_local_map_ex call needs (typed opaque pointer): for each dist
 * input its mesh, global shape and placements (its own, the ones fn saw, its gradient's), for
 * each dist output its placements and its gradient's. Local object; see lm_local_map_ex. */
typedef struct lm_local_map_record_s *lm_local_map_record_t;

/** lm_local_map_options_t::magic ("LMLO"). */
#define LM_LOCAL_MAP_OPTIONS_MAGIC 0x4c4d4c4fu /* "LMLO" */
/** The version of lm_local_map_options_t this header describes. */
#define LM_LOCAL_MAP_OPTIONS_VERSION 1u
/** Options of lm_local_map_ex. Initialise with LM_LOCAL_MAP_OPTIONS_INIT, then set fields; the
 * library reads the fields the caller's size covers. */
typedef struct lm_local_map_options_t {
  size_t size;        /**< sizeof(lm_local_map_options_t) of the caller */
  uint32_t magic;     /**< LM_LOCAL_MAP_OPTIONS_MAGIC */
  uint32_t version;   /**< LM_LOCAL_MAP_OPTIONS_VERSION */
  /** NULL, or nin entries (PyTorch's in_grad_placements): for a dist input, NULL or mesh-ndim
   * placements of the gradient of the local view fn gets, as the backward pass computes it
   * (e.g. Partial(sum) for a replicated weight whose gradient each rank sums over its own batch
   * rows); NULL means the placements fn saw. Non-dist inputs take NULL. */
  const lm_placement_t *const *in_grad_placements;
  /** NULL, or where the call puts a new lm_local_map_record_t (NULL when the call fails). */
  lm_local_map_record_t *record;
} lm_local_map_options_t;
/** An lm_local_map_options_t with no gradient placements and no record. */
#define LM_LOCAL_MAP_OPTIONS_INIT \
  {sizeof(lm_local_map_options_t), LM_LOCAL_MAP_OPTIONS_MAGIC, LM_LOCAL_MAP_OPTIONS_VERSION, NULL, \
   NULL}

/** lm_local_map with options: the same call, arguments and agreement, plus gradient placements for
 * the inputs and a record of the call for its backward pass (docs/DESIGN.md, "Gradients across
 * lm_local_map"). A backward pass is then one more lm_local_map whose inputs are the outputs'
 * gradients resharded to LM_RECORD_OUT_GRAD placements (and any saved inputs, as LM_RECORD_IN),
 * whose outputs take LM_RECORD_IN_GRAD placements, followed by lm_local_map_record_input_grad for
 * each input, which moves a gradient to its input's own mesh and layout. options NULL is
 * lm_local_map. in_grad_placements are checked like in_placements (errors name
 * in_grad_placements[i]) and, like the record, are local: nothing about them is agreed here (the
 * reshards of the backward pass agree as usual).
 * @return as lm_local_map; LM_ERR_INVALID_ARGUMENT also for a magic that is not
 *         LM_LOCAL_MAP_OPTIONS_MAGIC, a size below the first version's, a version this library does
 *         not know, or a bad in_grad_placements entry */
LM_NODISCARD LM_API lm_status_t lm_local_map_ex(lm_local_fn_t fn, void *user_data, int nin,
                                                const lm_arg_t *inputs,
                                                const lm_placement_t *const *in_placements,
                                                int nout,
                                                const lm_placement_t *const *out_placements,
                                                const int64_t *const *out_shapes, lm_mesh_t mesh,
                                                unsigned flags,
                                                const lm_local_map_options_t *options,
                                                lm_arg_t *outputs);

/** Which placements lm_local_map_record_placements reports. */
typedef enum lm_record_which_t {
  LM_RECORD_INPUT = 0,    /**< inputs[index]'s own placements, before any move (on its own mesh) */
  LM_RECORD_IN = 1,       /**< the placements of the view fn got (the call's mesh) */
  LM_RECORD_IN_GRAD = 2,  /**< the gradient of that view: in_grad_placements[index] or LM_RECORD_IN */
  LM_RECORD_OUT = 3,      /**< outputs[index]'s placements (out_placements[index]) */
  LM_RECORD_OUT_GRAD = 4  /**< its gradient's: lm_placements_adjoint of LM_RECORD_OUT */
} lm_record_which_t;

/** Copies the recorded placements `which` (an lm_record_which_t) of input or output `index` into
 * placements (capacity entries) and their number (the mesh's ndim) into *n. Local.
 * @return LM_SUCCESS; LM_ERR_INVALID_ARGUMENT for a NULL or dead record, a bad which or index, an
 *         index that was not a dist tensor (input) or has no placements (output), NULL n, a
 *         capacity below *n (*n is still set) or placements NULL with capacity > 0;
 *         LM_ERR_NOT_SUPPORTED for LM_RECORD_OUT_GRAD of an output with no linear adjoint
 *         (Partial(avg/max/min/prod), as lm_placements_adjoint) */
LM_NODISCARD LM_API lm_status_t lm_local_map_record_placements(lm_local_map_record_t record,
                                                               int which, int index, int capacity,
                                                               lm_placement_t *placements, int *n);

/** The gradient of inputs[index] in its own layout: grad (a dist tensor with that input's global
 * shape, normally placed LM_RECORD_IN_GRAD on the call's mesh) resharded to the input's own mesh,
 * with the adjoint of its own placements (lm_placements_adjoint: Partial(sum) becomes Replicate).
 * *out is a new tensor. Collective over the meshes of grad and of the input, like
 * lm_dist_tensor_reshard.
 * @return LM_SUCCESS; LM_ERR_INVALID_ARGUMENT for a NULL or dead record or grad, NULL out, an index
 *         out of range or not a dist tensor, a grad whose global shape differs from the input's;
 *         LM_ERR_NOT_SUPPORTED when the input's placements have no linear adjoint; the errors of
 *         lm_dist_tensor_reshard */
LM_NODISCARD LM_API lm_status_t lm_local_map_record_input_grad(lm_dist_tensor_t *out,
                                                               lm_local_map_record_t record,
                                                               int index, lm_dist_tensor_t grad);

/** Destroys a record (local, NULL-safe; sets *record = NULL). It holds references to the meshes it
 * names, released here. */
LM_API lm_status_t lm_local_map_record_destroy(lm_local_map_record_t *record);

#ifdef __cplusplus
}
#endif

#endif /* LOCALMAP_H_ */
