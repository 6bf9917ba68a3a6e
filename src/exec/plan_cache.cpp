// SPDX-License-Identifier: BSD-3-Clause
#include "exec/plan_cache.hpp"

#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/error.hpp"
#include "transport/select.hpp"

namespace lm {

namespace {

constexpr size_t kPlansPerMesh = 64;

struct Entry {
  std::shared_ptr<CachedPlan> plan;
  uint64_t use = 0;     // the mesh's clock at its last use
  uint64_t dst_id = 0;  // the target mesh (the key's mesh for a same-mesh plan)
};

struct MeshPlans {
  std::map<std::string, Entry, std::less<>> plans;  // std::less<>: found by a stack key's view
  uint64_t clock = 0;
};

struct Cache {
  std::mutex mu;
  std::unordered_map<uint64_t, MeshPlans> by_mesh;  // source mesh local id -> its plans
};

// Never destroyed: meshes may die after static destructors ran (late finalizers).
Cache &cache() {
  static Cache *c = new Cache;
  return *c;
}

// A mesh died: its plans go, and so do other meshes' plans into it.
void drop_mesh(uint64_t id) {
  std::vector<std::shared_ptr<CachedPlan>> gone;  // destroyed outside the lock (plan destructors
  std::lock_guard<std::mutex> lk(cache().mu);      // free MPI datatypes): declared first
  auto it = cache().by_mesh.find(id);
  if (it != cache().by_mesh.end()) {
    for (auto &kv : it->second.plans) gone.push_back(std::move(kv.second.plan));
    cache().by_mesh.erase(it);
  }
  for (auto &mp : cache().by_mesh)
    for (auto e = mp.second.plans.begin(); e != mp.second.plans.end();) {
      if (e->second.dst_id != id) {
        ++e;
        continue;
      }
      gone.push_back(std::move(e->second.plan));
      e = mp.second.plans.erase(e);
    }
}

// A cache key in binary, on the stack: the target mesh, the source layout's grid, placements
// and global shape, the target placements, the dtype and host/device, each list with its length.
class Key {
 public:
  Key(uint64_t dst_id, const Layout &src, const lm_placement_t *pl, size_t mesh_ndim,
      DLDataType dtype, bool device) {
    const size_t n[4] = {src.grid->shape().size(), src.pl.size(), src.gshape.size(), mesh_ndim};
    put(&dst_id, sizeof dst_id);
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
  // (mesh id, 4 lengths, 3 lists of kMaxDims int64, 2 of kMaxDims placements, dtype, device)
  char b_[8 + 4 * sizeof(size_t) + 3 * kMaxDims * 8 + 2 * kMaxDims * sizeof(lm_placement_t) + 8];
  size_t n_ = 0;
};

void hook_mesh_destroy() {
  static std::once_flag hook;
  std::call_once(hook, [] { mesh_on_destroy(drop_mesh); });
}

}  // namespace

std::shared_ptr<CachedPlan> cached_plan_find(lm_mesh_s *sm, lm_mesh_s *dm, const Layout &src,
                                             const lm_placement_t *pl, DLDataType dtype,
                                             bool device) {
  if (!pl || src.pl.size() > (size_t)kMaxDims || dm->ndim() > kMaxDims) return nullptr;
  const Key key(dm->local_id, src, pl, (size_t)dm->ndim(), dtype, device);
  Cache &c = cache();
  std::lock_guard<std::mutex> lk(c.mu);
  auto mi = c.by_mesh.find(sm->local_id);
  if (mi == c.by_mesh.end()) return nullptr;
  MeshPlans &mp = mi->second;
  auto it = mp.plans.find(key.view());
  if (it == mp.plans.end()) return nullptr;
  it->second.use = ++mp.clock;
  return it->second.plan;
}

std::shared_ptr<CachedPlan> cached_plan_add(lm_mesh_s *sm, lm_mesh_s *dm, const Layout &src,
                                            const Layout &dst, DLDataType dtype, bool device,
                                            MPI_Comm comm) {
  hook_mesh_destroy();
  const Key key(dm->local_id, src, dst.pl.data(), dst.pl.size(), dtype, device);
  auto plan = std::make_shared<CachedPlan>();
  plan->plan = plan_build(src, dst, dtype, comm, sm->world_rank);
  plan->dst = dst;
  std::shared_ptr<CachedPlan> evicted;  // destroyed outside the lock
  Cache &c = cache();
  std::lock_guard<std::mutex> lk(c.mu);
  MeshPlans &mp = c.by_mesh[sm->local_id];
  auto it = mp.plans.find(key.view());
  if (it != mp.plans.end()) {  // (another thread's call on another mesh cannot add this key)
    it->second.use = ++mp.clock;
    return it->second.plan;
  }
  if (mp.plans.size() >= kPlansPerMesh) {
    auto lru = mp.plans.begin();
    for (auto i = mp.plans.begin(); i != mp.plans.end(); ++i)
      if (i->second.use < lru->second.use) lru = i;
    evicted = std::move(lru->second.plan);
    mp.plans.erase(lru);
  }
  mp.plans.emplace(std::string(key.view()), Entry{plan, ++mp.clock, dm->local_id});
  return plan;
}

size_t cached_plans(uint64_t mesh_id) {
  std::lock_guard<std::mutex> lk(cache().mu);
  auto it = cache().by_mesh.find(mesh_id);
  return it == cache().by_mesh.end() ? 0 : it->second.plans.size();
}

}  // namespace lm
