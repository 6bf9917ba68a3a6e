// SPDX-License-Identifier: BSD-3-Clause
// The interface between localmap's core and its device component (docs/DESIGN.md, "The
// component"). The core (liblocalmap.so) never links CUDA or NCCL: everything it does on a device
// goes through one table of function pointers that the component (liblocalmap-cuda.so.<major>,
// built from src/device/ against the CUDA runtime and NCCL, or against tests/sim's simulator)
// returns from its one exported symbol, LM_DEVICE_COMPONENT_ENTRY. mem/component.hpp loads it.
//
// Rules of the table:
//   - plain C types only (no CUDA or NCCL type crosses: streams, events, communicators are void*),
//     except lm::BoxCopy (layout/boxcopy.hpp), a plain struct both sides compile from one header;
//   - every call returns an LMD_* status; on a failure, error() gives this thread's text of it
//     ("out of memory (cudaErrorMemoryAllocation)", "unhandled system error: <NCCL's last error>")
//     and the component has cleared the runtime's non-sticky error state; the core adds what it
//     was doing ("cudaMallocAsync failed: ...") and the status a caller sees;
//   - the core accepts a table only with its magic, this LM_DEVICE_API_VERSION, a size at least
//     its own, and the LM_VERSION_CODE of its own build: the interface is internal, so a component
//     of another release is refused (with both versions in the message), never half-used;
//   - dtypes are lm::DType values (common/dtype.hpp), reduce ops lm::ew op codes
//     (layout/elementwise.hpp).
// No function of the table throws or aborts; none synchronizes unless its name says so.
#pragma once

#include <stddef.h>
#include <stdint.h>

namespace lm {
struct BoxCopy;
}

#define LM_DEVICE_API_MAGIC 0x4c4d4443u /* "LMDC" */
#define LM_DEVICE_API_VERSION 1u
#define LM_DEVICE_COMPONENT_ENTRY "lm_device_component_entry"

// Statuses of the table's calls.
enum : int {
  LMD_OK = 0,
  LMD_NOT_READY = 1,    // event not reached / NCCL work still being enqueued (ncclInProgress)
  LMD_NO_MEMORY = 2,    // an allocation failed for lack of memory
  LMD_FAILED = 3,       // any other failure: error() says what
  LMD_UNSUPPORTED = 4,  // not offered (a dtype/op NCCL cannot reduce, no ncclAlltoAll)
};
// What a pointer is (pointer_kind).
enum : int { LMD_MEM_UNREGISTERED = 0, LMD_MEM_PINNED = 1, LMD_MEM_DEVICE = 2, LMD_MEM_MANAGED = 3 };
// Copy directions (memcpy_async).
enum : int { LMD_H2D = 1, LMD_D2H = 2, LMD_D2D = 3 };

extern "C" {

struct lm_device_api {
  uint32_t magic;            // LM_DEVICE_API_MAGIC
  uint32_t version;          // LM_DEVICE_API_VERSION
  uint64_t size;             // sizeof(lm_device_api) as the component was built
  int64_t lm_version_code;   // LM_VERSION_CODE of the tree it was built from
  const char *built_with;    // "CUDA 13.0, NCCL 2.28.9" (the headers it was compiled against)

  // ---- this thread's text of the last failure (never NULL)
  const char *(*error)(void);

  // ---- what is there. device_count: *n devices (0 with *why saying why: "no GPU on this
  // machine", "no GPU on this machine: no NVIDIA driver", or the runtime's own words). versions:
  // the loaded runtime, driver (0: none) and NCCL as CUDA and NCCL encode them.
  int (*device_count)(int *n, char *why, size_t why_len);
  int (*versions)(int *runtime, int *driver, int *nccl);

  // ---- the CUDA runtime
  int (*get_device)(int *dev);
  int (*set_device)(int dev);
  int (*pci_bus_id)(int dev, char *buf, int len);
  int (*pointer_kind)(const void *p, int *kind, int *device);  // LMD_MEM_*
  int (*malloc_async)(void **p, size_t bytes, void *stream);
  int (*free_async)(void *p, void *stream);
  int (*malloc_host)(void **p, size_t bytes);  // pinned
  int (*free_host)(void *p);
  int (*memcpy_async)(void *dst, const void *src, size_t bytes, int dir, void *stream);
  int (*memset_async)(void *p, int value, size_t bytes, void *stream);
  int (*stream_synchronize)(void *stream);
  int (*event_create)(void **ev);  // without timing
  int (*event_record)(void *ev, void *stream);
  int (*event_query)(void *ev);  // LMD_OK (reached), LMD_NOT_READY, or a failure
  int (*event_synchronize)(void *ev);
  int (*event_destroy)(void *ev);
  int (*stream_wait_event)(void *stream, void *ev);

  // ---- kernels on `stream` (mem/ops.hpp's device MemOps): box copy of elements [e0, e1),
  // acc = op(acc, in), avg's division, identity fill, integer avg through 128 bits
  int (*box_copy)(const lm::BoxCopy *c, void *dst, const void *src, int64_t e0, int64_t e1,
                  void *stream);
  int (*reduce)(int dtype, int op, void *acc, const void *in, int64_t n, void *stream);
  int (*scale_avg)(int dtype, void *acc, int64_t n, int64_t k, void *stream);
  int (*fill_identity)(int dtype, int op, void *buf, int64_t n, void *stream);
  int (*wide_accumulate)(int dtype, void *acc, const void *in, int64_t n, int assign,
                         void *stream);
  int (*wide_finish_avg)(int dtype, void *out, const void *acc, int64_t n, int64_t k,
                         void *stream);

  // ---- NCCL. Communicators are non-blocking (calls may answer LMD_NOT_READY: poll
  // nccl_async_error). nccl_unique_id fills 128 bytes; nccl_async_error: LMD_OK, LMD_NOT_READY
  // (still enqueuing), or the error with NCCL's last message in error().
  int (*nccl_unique_id)(void *id, size_t len);
  int (*nccl_init)(void **comm, int nranks, const void *id, int rank);
  int (*nccl_async_error)(void *comm);
  int (*nccl_finalize)(void *comm);
  int (*nccl_destroy)(void *comm);
  int (*nccl_abort)(void *comm);
  int (*nccl_group_start)(void);
  int (*nccl_group_end)(void);
  int (*nccl_send)(const void *p, size_t bytes, int peer, void *comm, void *stream);
  int (*nccl_recv)(void *p, size_t bytes, int peer, void *comm, void *stream);
  // Collectives over every rank of comm: bytes per rank (all-gather, all-to-all: per pair) or
  // elements of dtype (the reductions: count per rank for reduce-scatter, in all for all-reduce).
  int (*nccl_all_gather)(const void *in, void *out, size_t bytes, void *comm, void *stream);
  int (*nccl_reduce_scatter)(const void *in, void *out, size_t count, int dtype, int op,
                             void *comm, void *stream);
  int (*nccl_all_reduce)(const void *in, void *out, size_t count, int dtype, int op, void *comm,
                         void *stream);
  int (*nccl_all_to_all)(const void *in, void *out, size_t bytes, void *comm, void *stream);
  // 1 where NCCL reduces `dtype` with `op` as localmap defines it (op order aside), else 0.
  int (*nccl_reduces)(int dtype, int op);
  // 1 where the loaded NCCL has ncclAlltoAll (nccl_all_to_all answers LMD_UNSUPPORTED otherwise).
  int (*nccl_has_all_to_all)(void);
};
typedef struct lm_device_api lm_device_api_t;

// The component's one export: its table, for the interface version the core speaks.
typedef const lm_device_api_t *(*lm_device_component_entry_fn)(uint32_t version);

}  // extern "C"
