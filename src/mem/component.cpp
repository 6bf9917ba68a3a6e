// SPDX-License-Identifier: BSD-3-Clause
#include "mem/component.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/error.hpp"
#include "common/settings.hpp"
#include "localmap.h"

namespace lm {

namespace {

#define LM_STR2(x) #x
#define LM_STR(x) LM_STR2(x)
constexpr const char *kName = "liblocalmap-cuda.so." LM_STR(LM_VERSION_MAJOR);

std::string dl_error() {
  const char *e = dlerror();
  return e ? e : "(no dlerror text)";
}

// The file that holds this library's code (liblocalmap.so, or the program linking it statically).
std::string core_file() {
  Dl_info info{};
  void *self = reinterpret_cast<void *>(&device_component_name);
  if (!dladdr(self, &info) || !info.dli_fname || !*info.dli_fname) return "";
  return info.dli_fname;
}

// The directories the object holding the core searches for its own libraries, in order (its
// RUNPATH or RPATH with $ORIGIN expanded, LD_LIBRARY_PATH, the system's: glibc's dlinfo). dlopen of
// a bare name searches its *caller's* RUNPATH, and the caller is not always this code (ASan's
// dlopen interceptor calls it from libasan): so they are tried by name first.
std::vector<std::string> core_search_dirs(const std::string &core) {
  std::vector<std::string> dirs;
  void *h = core.empty() ? nullptr : dlopen(core.c_str(), RTLD_LAZY | RTLD_NOLOAD);
  if (!h) h = dlopen(nullptr, RTLD_LAZY);  // the core is the program's (liblocalmap.a)
  Dl_serinfo size{};
  if (!h || dlinfo(h, RTLD_DI_SERINFOSIZE, &size) != 0 || size.dls_size < sizeof(Dl_serinfo)) {
    if (h) dlclose(h);
    return dirs;
  }
  std::vector<char> buf(size.dls_size);
  Dl_serinfo *info = reinterpret_cast<Dl_serinfo *>(buf.data());
  *info = size;  // dls_size and dls_cnt, as dlinfo asks
  if (dlinfo(h, RTLD_DI_SERINFOSIZE, info) == 0 && dlinfo(h, RTLD_DI_SERINFO, info) == 0)
    for (unsigned i = 0; i < info->dls_cnt; ++i) dirs.emplace_back(info->dls_serpath[i].dls_name);
  dlclose(h);
  return dirs;
}

// Accepts the table of the library at `handle` (loaded from `path`), or says why not.
bool accept(ComponentInfo &c, void *handle) {
  dlerror();
  void *sym = dlsym(handle, LM_DEVICE_COMPONENT_ENTRY);
  if (!sym) {
    c.why = c.path + " is no localmap device component (" + dl_error() + ")";
    return false;
  }
  Dl_info info{};
  if (dladdr(sym, &info) && info.dli_fname && *info.dli_fname) {  // the file the loader found
    char *real = realpath(info.dli_fname, nullptr);
    c.path = real ? real : info.dli_fname;
    std::free(real);
  }
  lm_device_component_entry_fn entry;
  std::memcpy(&entry, &sym, sizeof entry);
  const lm_device_api_t *api = entry(LM_DEVICE_API_VERSION);
  if (!api || api->magic != LM_DEVICE_API_MAGIC || api->version != LM_DEVICE_API_VERSION ||
      api->size < sizeof(lm_device_api_t)) {
    c.why = strfmt("%s does not offer version %u of the device interface this library speaks",
                   c.path.c_str(), LM_DEVICE_API_VERSION);
    return false;
  }
  if (api->lm_version_code != LM_VERSION_CODE) {
    c.why = strfmt("%s is the device component of localmap %lld.%lld.%lld, this library is "
                   "%d.%d.%d (install both of one build)", c.path.c_str(),
                   (long long)api->lm_version_code / 10000, (long long)api->lm_version_code / 100 % 100,
                   (long long)api->lm_version_code % 100, LM_VERSION_MAJOR, LM_VERSION_MINOR,
                   LM_VERSION_PATCH);
    return false;
  }
  c.api = api;
  return true;
}

// dlopen of `path` and the check of its table; false with c.why set.
bool open_at(ComponentInfo &c, const std::string &path) {
  c.path = path;
  void *h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {  // dlerror names what is missing: the file, or a library it needs (CUDA, NCCL)
    c.why = "dlopen of " + path + " failed: " + dl_error();
    return false;
  }
  if (accept(c, h)) return true;
  dlclose(h);
  return false;
}

ComponentInfo load() {
  ComponentInfo c;
  const std::string &env = setting(Setting::DeviceComponent).text;
  if (!env.empty()) {
    if (!open_at(c, env)) c.why = "LM_DEVICE_COMPONENT=" + env + ": " + c.why;
    return c;
  }
  const std::string core = core_file();
  const size_t slash = core.rfind('/');
  std::string beside = slash == std::string::npos ? "" : core.substr(0, slash + 1) + kName;
  // Where it is found first, it is the answer, loaded or not (its CUDA or NCCL missing).
  if (!beside.empty() && access(beside.c_str(), F_OK) == 0) {
    open_at(c, beside);
    return c;
  }
  for (const std::string &dir : core_search_dirs(core)) {
    const std::string f = dir + "/" + kName;
    if (access(f.c_str(), F_OK) != 0) continue;
    open_at(c, f);
    return c;
  }
  if (open_at(c, kName)) return c;  // ld.so.cache
  c.why = strfmt("the device component %s was not found: not beside %s (no %s), nor on the "
                 "library search path (%s); a build with CUDA=0 makes none, and "
                 "LM_DEVICE_COMPONENT names one elsewhere", kName,
                 core.empty() ? "this library (its path is unknown)" : core.c_str(),
                 beside.empty() ? kName : beside.c_str(), c.why.c_str());
  c.path = beside;
  return c;
}

}  // namespace

const char *device_component_name() { return kName; }

const ComponentInfo &device_component() {
  static const ComponentInfo c = load();  // once per process, thread-safe
  return c;
}

const lm_device_api_t &device_api(const char *what) {
  const ComponentInfo &c = device_component();
  if (!c.api)
    fail(LM_ERR_NOT_SUPPORTED, "%s: kDLCUDA is not supported here: device support is not "
         "available: %s", what, c.why.c_str());
  return *c.api;
}

}  // namespace lm
