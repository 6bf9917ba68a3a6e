// SPDX-License-Identifier: BSD-3-Clause
// The device component (docs/DESIGN.md, "The component"): liblocalmap-cuda.so.<major>,
// which links the CUDA runtime and NCCL so that this library never does. Loaded with dlopen at the
// first use of a device (a kDLCUDA tensor, lm_device_supported, lm_mesh_transport, lm-info), once
// per process, from:
//   1. LM_DEVICE_COMPONENT, when set: that path and nothing else;
//   2. else the directory of the object that holds this library's code (liblocalmap.so's, or the
//      program's when it links liblocalmap.a);
//   3. else the library search path of that object (its RUNPATH or RPATH, LD_LIBRARY_PATH, the
//      system's folders: dlinfo), then ld.so.cache.
// Its table (mem/device_api.hpp) is accepted only with the right magic, interface version, size
// and LM_VERSION_CODE. Never unloaded. Where it is missing or refused, every device call fails with
// LM_ERR_NOT_SUPPORTED saying what is missing and where it was looked for; host calls never
// load it.
#pragma once

#include <string>

#include "mem/device_api.hpp"

namespace lm {

struct ComponentInfo {
  const lm_device_api_t *api = nullptr;  // NULL: not loaded (why says why)
  std::string path;                      // the file loaded, or the last one tried
  std::string why;                       // one line: why it is not loaded ("" when it is)
};

// The component's file name: liblocalmap-cuda.so.<major>.
const char *device_component_name();
// Loads the component on the first call (thread-safe) and tells how that went.
const ComponentInfo &device_component();
// Its table, loading it first; throws LM_ERR_NOT_SUPPORTED "<what>: kDLCUDA is not supported
// here: <why>" where it cannot be loaded.
const lm_device_api_t &device_api(const char *what);

}  // namespace lm
