// SPDX-License-Identifier: BSD-3-Clause
// Grouped reshard plans (the object behind lm_reshard_group_t): one plan per entry, all between
// one pair of meshes, run together by exec/group.hpp (one message per peer and step for a bucket
// of entries); one agreement per execution fingerprints the whole group.
#pragma once

#include <memory>
#include <vector>

#include "exec/group.hpp"
#include "tensor/persistent.hpp"

namespace lm {
constexpr uint32_t kGroupMagic = 0x47524d4cu;  // "LMRG"
constexpr size_t kDefaultBucketBytes = size_t(64) << 20;
constexpr size_t kDefaultAloneBytes = size_t(1) << 20;
}  // namespace lm

struct lm_reshard_group_s {
  uint32_t magic = lm::kGroupMagic;
  std::vector<std::unique_ptr<lm_reshard_plan_s>> entries;  // each retains both meshes
  lm_mesh_s *src_mesh = nullptr, *dst_mesh = nullptr;        // (held through the entries)
  std::unique_ptr<lm::GroupExec> exec;  // the entries' own plans (host, or device over NCCL)
  // Padded shards read in place: the last executor of the entries' plan variants, and its plans'
  // serials (Plan::serial: a variant rebuilt at a freed one's address is another plan).
  std::unique_ptr<lm::GroupExec> padded_exec;
  std::vector<uint64_t> padded_plans;
  lm::GroupExec *cur = nullptr;  // the executor of the last execution started
  size_t bucket_bytes = lm::kDefaultBucketBytes;
  size_t alone_bytes = lm::kDefaultAloneBytes;
  uint64_t hash = 0;                     // of every entry's layouts, shape and dtype
  lm_request_s *in_flight = nullptr;
  lm::AgreeComm *agree = nullptr;
  ~lm_reshard_group_s();
};

namespace lm {
lm_reshard_group_s *group_create(lm_mesh_t src_mesh, lm_mesh_t dst_mesh, int n,
                                 const lm_reshard_entry_t *entries,
                                 const lm_reshard_group_config_t *config);
lm_reshard_group_s *group_check(lm_reshard_group_t h, const char *what);
lm_reshard_group_t group_wrap(lm_reshard_group_s *g);  // deletes g on failure
void group_destroy_handle(lm_reshard_group_t *h, const char *what);
// n targets, laid out as the entries' (new references; none left on failure).
std::vector<lm_dist_tensor_s *> group_alloc_targets(lm_reshard_group_s *g, DLDevice device,
                                                    int n);
void group_execute(lm_reshard_group_s *g, int n, const lm_dist_tensor_t *src,
                   const lm_dist_tensor_t *dst);
// A request (NULL when this rank takes no part).
lm_request_s *group_start(lm_reshard_group_s *g, int n, const lm_dist_tensor_t *src,
                          const lm_dist_tensor_t *dst);
// Buckets of the group's host executions (builds the executor: local).
size_t group_bucket_count(lm_reshard_group_s *g);
// request_progress for a group's request; true when complete.
bool group_request_progress(lm_request_s *r, bool block);
}  // namespace lm
