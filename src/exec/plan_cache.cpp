// SPDX-License-Identifier: BSD-3-Clause
#include "exec/plan_cache.hpp"

#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "common/error.hpp"
#include "mesh/collective.hpp"
#include "transport/select.hpp"

namespace lm {

namespace {

constexpr size_t kPlansPerMesh = 64;

struct MeshPlans {
  // key -> (plan, last use); std::less<> finds by a string_view of a stack key
  std::map<std::string, std::pair<std::shared_ptr<CachedPlan>, uint64_t>, std::less<>> plans;
  uint64_t clock = 0;
};

struct Cache {
  std::mutex mu;
  std::unordered_map<uint64_t, MeshPlans> by_mesh;  // mesh local id -> its plans
};

// Never destroyed: meshes may die after static destructors ran (late finalizers).
Cache &cache() {
  static Cache *c = new Cache;
  return *c;
}

void drop_mesh(uint64_t id) {
  MeshPlans gone;  // destroyed outside the lock (plan destructors free MPI datatypes)
  {
    std::lock_guard<std::mutex> lk(cache().mu);
    auto it = cache().by_mesh.find(id);
    if (it == cache().by_mesh.end()) return;
    gone = std::move(it->second);
    cache().by_mesh.erase(it);
  }
}

// A cache key in binary, on the stack: the source layout's grid, placements and global shape,
// the target placements, the dtype and host/device, each list with its length.
class Key {
 public:
  Key(const Layout &src, const lm_placement_t *pl, size_t mesh_ndim, DLDataType dtype,
      bool device) {
    const size_t n[4] = {src.grid->shape().size(), src.pl.size(), src.gshape.size(), mesh_ndim};
    put(n, sizeof n);
    put(src.grid->shape().data(), n[0] * sizeof(int64_t));
    put(src.pl.data(), n[1] * sizeof(lm_placement_t));
    put(src.gshape.data(), n[2] * sizeof(int64_t));
    put(pl, n[3] * sizeof(lm_placement_t));
    put(&dtype, sizeof dtype);
    put(device ? "d" : "h", 1);  // device plans keep their own transport
  }
  std::string_view view() const { return std::string_view(b_, n_); }

 private:
  void put(const void *p, size_t k) {
    if (k == 0) return;  // (an empty list's data() may be NULL)
    if (n_ + k > sizeof b_) fail(LM_ERR_INTERNAL, "plan cache: a key over %zu bytes", sizeof b_);
    std::memcpy(b_ + n_, p, k);
    n_ += k;
  }
  // (4 lengths, 3 lists of kMaxDims int64, 2 of kMaxDims placements, dtype, device)
  char b_[4 * sizeof(size_t) + 3 * kMaxDims * 8 + 2 * kMaxDims * sizeof(lm_placement_t) + 8];
  size_t n_ = 0;
};

void hook_mesh_destroy() {
  static std::once_flag hook;
  std::call_once(hook, [] { mesh_on_destroy(drop_mesh); });
}

}  // namespace

std::shared_ptr<CachedPlan> cached_plan_find(lm_mesh_s *m, const Layout &src,
                                             const lm_placement_t *pl, DLDataType dtype,
                                             bool device) {
  if (!pl || src.pl.size() > (size_t)kMaxDims || m->ndim() > kMaxDims) return nullptr;
  const Key key(src, pl, (size_t)m->ndim(), dtype, device);
  Cache &c = cache();
  std::lock_guard<std::mutex> lk(c.mu);
  auto mi = c.by_mesh.find(m->local_id);
  if (mi == c.by_mesh.end()) return nullptr;
  MeshPlans &mp = mi->second;
  auto it = mp.plans.find(key.view());
  if (it == mp.plans.end()) return nullptr;
  it->second.second = ++mp.clock;
  return it->second.first;
}

std::shared_ptr<CachedPlan> cached_plan_add(lm_mesh_s *m, const Layout &src, const Layout &dst,
                                            DLDataType dtype, bool device) {
  hook_mesh_destroy();
  const Key key(src, dst.pl.data(), dst.pl.size(), dtype, device);
  auto plan = std::make_shared<CachedPlan>();
  plan->plan = plan_build(src, dst, dtype, m->world, m->world_rank);
  plan->dst = dst;
  std::shared_ptr<CachedPlan> evicted;  // destroyed outside the lock
  Cache &c = cache();
  std::lock_guard<std::mutex> lk(c.mu);
  MeshPlans &mp = c.by_mesh[m->local_id];
  auto it = mp.plans.find(key.view());
  if (it != mp.plans.end()) {  // (another thread's call on another mesh cannot add this key)
    it->second.second = ++mp.clock;
    return it->second.first;
  }
  if (mp.plans.size() >= kPlansPerMesh) {
    auto lru = mp.plans.begin();
    for (auto i = mp.plans.begin(); i != mp.plans.end(); ++i)
      if (i->second.second < lru->second.second) lru = i;
    evicted = std::move(lru->second.first);
    mp.plans.erase(lru);
  }
  mp.plans.emplace(std::string(key.view()), std::make_pair(plan, ++mp.clock));
  return plan;
}

FusedExchange *cached_fused_exchange(CachedPlan &c, lm_mesh_s *m) {
  if (!c.fused_decided) {
    c.fused_decided = true;
    c.fused = select_fused_exchange(*c.plan, c.plan->comm, collective_comm(m, m));
  }
  return c.fused.get();
}

}  // namespace lm
