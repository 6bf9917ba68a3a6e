// SPDX-License-Identifier: BSD-3-Clause
#include "exec/plan_cache.hpp"

#include <map>
#include <mutex>
#include <string>
#include <unordered_map>

#include "mesh/collective.hpp"
#include "transport/select.hpp"

namespace lm {

namespace {

constexpr size_t kPlansPerMesh = 64;

struct MeshPlans {
  std::map<std::string, std::pair<std::shared_ptr<CachedPlan>, uint64_t>> plans;  // key -> (plan, use)
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

}  // namespace

std::shared_ptr<CachedPlan> cached_plan(lm_mesh_s *m, const Layout &src, const Layout &dst,
                                        DLDataType dtype, bool device) {
  static std::once_flag hook;
  std::call_once(hook, [] { mesh_on_destroy(drop_mesh); });
  std::string key = src.key() + dst.key();  // binary, each with its lengths
  key.append(reinterpret_cast<const char *>(&dtype), sizeof dtype);
  key += device ? 'd' : 'h';  // device plans keep their own transport
  Cache &c = cache();
  {
    std::lock_guard<std::mutex> lk(c.mu);
    MeshPlans &mp = c.by_mesh[m->local_id];
    auto it = mp.plans.find(key);
    if (it != mp.plans.end()) {
      it->second.second = ++mp.clock;
      return it->second.first;
    }
  }
  auto plan = std::make_shared<CachedPlan>();
  plan->plan = plan_build(src, dst, dtype, m->world, m->world_rank);
  std::shared_ptr<CachedPlan> evicted;  // destroyed outside the lock
  std::lock_guard<std::mutex> lk(c.mu);
  MeshPlans &mp = c.by_mesh[m->local_id];
  if (mp.plans.size() >= kPlansPerMesh) {
    auto lru = mp.plans.begin();
    for (auto i = mp.plans.begin(); i != mp.plans.end(); ++i)
      if (i->second.second < lru->second.second) lru = i;
    evicted = std::move(lru->second.first);
    mp.plans.erase(lru);
  }
  mp.plans.emplace(key, std::make_pair(plan, ++mp.clock));
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
