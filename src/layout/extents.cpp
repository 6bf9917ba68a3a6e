// SPDX-License-Identifier: BSD-3-Clause
#include "layout/extents.hpp"

#include <algorithm>
#include <map>
#include <mutex>

#include "common/error.hpp"

namespace lm {

bool Extents::span(int64_t lo, int64_t hi, int64_t *first, int64_t *last) const {
  if (hi <= lo || count() <= 0) return false;
  // first: the first block ending after lo; last: the last block starting before hi.
  auto f = std::upper_bound(off.begin() + 1, off.end(), lo) - (off.begin() + 1);
  auto l = std::lower_bound(off.begin(), off.end() - 1, hi) - off.begin() - 1;
  if (f >= count() || l < 0 || f > l) return false;
  *first = f;
  *last = l;
  return true;
}

std::vector<int64_t> Extents::lengths() const {
  std::vector<int64_t> v((size_t)count());
  for (int64_t i = 0; i < count(); ++i) v[(size_t)i] = len(i);
  return v;
}

namespace {

struct Entry {
  std::weak_ptr<const Extents> weak;
  std::shared_ptr<const Extents> strong;  // held while user references remain
  int64_t refs = 0;
};

struct Registry {
  std::mutex mu;
  std::map<int32_t, Entry> by_id;
  std::map<std::vector<int64_t>, int32_t> by_offsets;
  int32_t next = 1;

  // Drops entries nothing holds any more (called under mu, on every registration).
  void prune() {
    for (auto it = by_id.begin(); it != by_id.end();) {
      if (it->second.refs == 0 && it->second.weak.expired())
        it = by_id.erase(it);
      else
        ++it;
    }
    for (auto it = by_offsets.begin(); it != by_offsets.end();)
      it = by_id.count(it->second) ? std::next(it) : by_offsets.erase(it);
  }

  // The entry for these offsets (made when missing), its extents alive on return.
  std::shared_ptr<const Extents> get(std::vector<int64_t> off, bool user_ref) {
    std::lock_guard<std::mutex> lock(mu);
    auto found = by_offsets.find(off);
    if (found != by_offsets.end()) {
      Entry &e = by_id[found->second];
      if (auto p = e.weak.lock()) {
        if (user_ref && e.refs++ == 0) e.strong = p;
        return p;
      }
    }
    prune();
    if (next == INT32_MAX) fail(LM_ERR_OUT_OF_MEMORY, "lm_extents_create: no extents id left");
    auto x = std::make_shared<Extents>();
    x->id = next++;
    x->off = off;
    Entry e;
    e.weak = x;
    if (user_ref) {
      e.strong = x;
      e.refs = 1;
    }
    by_id[x->id] = e;
    by_offsets[std::move(off)] = x->id;
    return x;
  }
};

Registry &registry() {
  static Registry *r = new Registry;  // never destroyed: ids stay valid during static teardown
  return *r;
}

std::vector<int64_t> offsets_of(const int64_t *lengths, int64_t count, const char *what) {
  LM_CHECK_ARG(count >= 1 && count <= INT32_MAX, "%s: count %lld must be in [1, 2^31 - 1]", what,
               (long long)count);
  LM_CHECK_ARG(lengths != nullptr, "%s: extents is NULL", what);
  std::vector<int64_t> off((size_t)count + 1, 0);
  for (int64_t i = 0; i < count; ++i) {
    LM_CHECK_ARG(lengths[i] >= 0, "%s: extents[%lld] = %lld must be >= 0", what, (long long)i,
                 (long long)lengths[i]);
    if (__builtin_add_overflow(off[(size_t)i], lengths[i], &off[(size_t)i + 1]))
      fail(LM_ERR_INVALID_ARGUMENT, "%s: the extents' sum overflows int64 at extents[%lld]", what,
           (long long)i);
  }
  return off;
}

}  // namespace

int32_t extents_register(const int64_t *lengths, int64_t count, const char *what) {
  return registry().get(offsets_of(lengths, count, what), true)->id;
}

std::shared_ptr<const Extents> extents_adopt(const std::vector<int64_t> &lengths) {
  return registry().get(offsets_of(lengths.data(), (int64_t)lengths.size(), "extents"), false);
}

std::shared_ptr<const Extents> extents_find(int32_t id) {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.by_id.find(id);
  return it == r.by_id.end() ? nullptr : it->second.weak.lock();
}

bool extents_release(int32_t id) {
  Registry &r = registry();
  std::shared_ptr<const Extents> last;  // released outside the lock
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.by_id.find(id);
  if (it == r.by_id.end() || it->second.refs == 0) return false;
  if (--it->second.refs == 0) last = std::move(it->second.strong);
  return true;
}

}  // namespace lm
