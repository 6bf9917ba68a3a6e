// SPDX-License-Identifier: BSD-3-Clause
// Caller handles, kept apart from the shared objects behind them.
//
// What the C API gives out (meshes, tensors, plans, requests, groups, local_map records) is a
// tagged value, never an object's address: bit 63 set, then the kind, a 24-bit generation and a
// 32-bit slot index of a process-wide table. Looking a handle up reads only that table, so a
// destroyed (stale) handle is refused without touching freed memory, and a slot's generation
// changes each time it is reused. An owned handle holds one reference on its object plus a count
// of caller references (lm_dist_tensor_retain adds one); destroy drops one caller reference and,
// at zero, kills the handle and releases its object reference. A borrowed handle (a mesh handed
// out by lm_dist_tensor_mesh after its creator's handle died) owns nothing: destroy refuses it.
// Lookups are lock-free; creating and killing handles takes a mutex.
#pragma once

#include <cstdint>

#include "common/error.hpp"

namespace lm {

enum class HandleKind : uint32_t { Mesh = 1, Tensor = 2, Plan = 3, Request = 4, Group = 5, Record = 6 };

// True when `p` is a tagged handle value (as opposed to an object address).
inline bool is_handle_value(const void *p) {
  return (reinterpret_cast<uintptr_t>(p) >> 63) != 0;
}

// Registers `obj`: returns a new handle value. owned: one caller reference (kill/drop it with
// handle_drop); borrowed: none (handle_drop refuses it; handle_kill frees it). Throws bad_alloc.
uintptr_t handle_new(HandleKind kind, void *obj, bool owned);
// The object behind a live handle of `kind`, or nullptr (dead, foreign, other kind, NULL).
void *handle_get(const void *h, HandleKind kind);
// Adds a caller reference to a live owned handle; false if it is not one.
bool handle_retain(const void *h, HandleKind kind);
enum class DropResult { Dead, Borrowed, Alive, Died };
// Drops one caller reference of a live owned handle. Died: it was the last; the handle is dead and
// *obj receives the object, whose reference the caller must now release. Alive: references remain.
// Dead (not a live handle of kind) and Borrowed: nothing changed.
DropResult handle_drop(const void *h, HandleKind kind, void **obj);
// Kills a live handle whatever its count (borrowed handles when their object dies).
void handle_kill(uintptr_t h);
// Whether `h` is live, and owned (caller references > 0).
bool handle_is_owned(uintptr_t h);

template <class T>
inline T *handle_as(uintptr_t h) {
  return reinterpret_cast<T *>(h);
}

// The object behind a caller's handle `h` of `kind`, or LM_ERR_INVALID_ARGUMENT naming it:
// "<what>: <arg> is NULL" / "<what>: <arg> is not a live <type>".
template <class T>
T *handle_object(const void *h, HandleKind kind, const char *what, const char *arg,
                 const char *type) {
  LM_CHECK_ARG(h != nullptr, "%s: %s is NULL", what, arg);
  void *p = handle_get(h, kind);
  LM_CHECK_ARG(p != nullptr, "%s: %s is not a live %s", what, arg, type);
  return static_cast<T *>(p);
}

// A new owned handle of `kind` for obj (its one caller reference); obj is deleted on failure.
template <class T>
T *handle_wrap_owned(T *obj, HandleKind kind) {
  try {
    return handle_as<T>(handle_new(kind, obj, true));
  } catch (...) {
    delete obj;
    throw;
  }
}

}  // namespace lm
