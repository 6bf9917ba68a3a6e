// SPDX-License-Identifier: BSD-3-Clause
// libFuzzer target: the reshard planner (pure, no MPI). Random source and target layouts (same or
// different grids over one parent, any placements, co-shard orders, uneven and empty shards, any
// dtype); plans for every parent rank through the planner's public functions (check_reshard,
// plan_build) and checks: verdicts agree across ranks (reshard does not agree at run time, so
// every rank must refuse or accept alike), the step chain ends in the target layout, ranks in
// neither layout send nothing, an identity reshard sends nothing, and the source boxes that meet
// a rank's target box tile it exactly (what it receives covers what it must hold, once). On the
// schedule (plan/schedule.hpp): every exchange send has the matching receive (same step, same
// box) on its peer, and each rank's receives and local copies tile its output box exactly; and the
// plan's schedule (compressed by the planner, then expanded) is the one-peer-at-a-time one.
#include <map>
#include <tuple>

#include "fuzz_common.hpp"
#include "common/dtype.hpp"
#include "exec/plan.hpp"

using namespace lm;

static const DLDataType kTypes[] = {{kDLFloat, 16, 1}, {kDLBfloat, 16, 1}, {kDLFloat, 32, 1},
                                    {kDLFloat, 64, 1}, {kDLInt, 8, 1},     {kDLInt, 64, 1},
                                    {kDLUInt, 8, 1},   {LM_DL_BOOL, 8, 1}, {kDLComplex, 64, 1},
                                    {kDLComplex, 128, 1}};

static void for_each_coord(const Grid &g, const Shape &fixed,
                           const std::function<void(const int64_t *)> &fn) {
  Shape c(static_cast<size_t>(g.ndim()), 0);
  for (int m = 0; m < g.ndim(); ++m)
    if (fixed[m] >= 0) c[m] = fixed[m];
  for (;;) {
    fn(c.data());
    int m = g.ndim() - 1;
    for (; m >= 0; --m) {
      if (fixed[m] >= 0) continue;
      if (++c[m] < g.shape()[m]) break;
      c[m] = 0;
    }
    if (m < 0) break;
  }
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz::Bytes b{data, size};
  auto gs = fz::random_grid(b);
  auto gd = (b.u8() & 3) ? gs : fz::random_grid(b);
  int ndim = b.range(0, 3);
  int op = b.range(0, 4), op2 = (b.u8() & 7) ? op : b.range(0, 4);
  auto ps = fz::random_placements(b, gs->ndim(), ndim, false, op);
  auto pd = fz::random_placements(b, gd->ndim(), ndim, false, op2);
  Shape g = fz::random_shape(b, ndim);
  DLDataType dtype = kTypes[b.u8() % (sizeof kTypes / sizeof *kTypes)];
  DType dt = dtype_from_dl(dtype, "fuzz");
  Layout S(gs, ps, g), D(gd, pd, g);
  if (b.u8() & 1) {  // identity reshards too
    D = S;
    gd = gs;
    pd = ps;
  }
  try {
    check_reshard(S, D, dt);
  } catch (const Error &e) {
    FZ_CHECK(e.status() == LM_ERR_INVALID_ARGUMENT || e.status() == LM_ERR_NOT_SUPPORTED);
    return 0;
  }
  // A 0-d layout pair is planned as its [1] form (plan_build's as_one_element): the steps, boxes
  // and bytes below are checked against that form.
  const Layout Dn = D.ndim() == 0 ? as_one_element(D) : D;
  const Shape gn = Dn.gshape;
  int parent = 0;
  for (auto *gr : {gs.get(), gd.get()})
    for (int64_t i = 0; i < gr->size(); ++i) parent = std::max(parent, gr->rank_at_index(i) + 1);
  int verdict = -1;
  int64_t total_sent = 0;
  // Every exchange message, keyed by (step tag, sender, receiver): what the sender sends and
  // what the receiver expects must be the same box (sends match receives).
  std::map<std::tuple<int, int, int>, std::pair<std::vector<Box>, std::vector<Box>>> msgs;
  for (int me = 0; me < parent; ++me) {
    int st = LM_SUCCESS;
    std::unique_ptr<Plan> plan;
    try {
      plan = plan_build(S, D, dtype, MPI_COMM_NULL, me);
    } catch (const Error &e) {
      st = e.status();
      FZ_CHECK(st == LM_ERR_INVALID_ARGUMENT || st == LM_ERR_NOT_SUPPORTED);
    }
    if (verdict < 0) verdict = st;
    FZ_CHECK(verdict == st);  // every rank accepts or refuses alike
    if (!plan) continue;
    FZ_CHECK(plan->bytes_sent >= 0);
    {  // the plan's schedule (built compressed, expanded) is the one-peer-at-a-time enumeration's
      Schedule ref;
      build_schedule(ref, S, D, dtype, me, ScheduleForm::kReference);
      FZ_CHECK(ref.bytes_sent == plan->bytes_sent && ref.steps.size() == plan->steps.size());
      for (size_t i = 0; i < ref.steps.size() && i < plan->steps.size(); ++i) {
        const SchedStep &x = *ref.steps[i], &y = *plan->steps[i];
        FZ_CHECK(x.sends.size() == y.sends.size() && x.recvs.size() == y.recvs.size());
        FZ_CHECK(x.peers == y.peers && x.order == y.order && x.chunks.size() == y.chunks.size());
        for (size_t j = 0; j < x.sends.size() && j < y.sends.size(); ++j)
          FZ_CHECK(x.sends[j].peer == y.sends[j].peer && x.sends[j].box.off == y.sends[j].box.off &&
                   x.sends[j].rel == y.sends[j].rel && x.sends[j].off == y.sends[j].off);
        for (size_t j = 0; j < x.recvs.size() && j < y.recvs.size(); ++j)
          FZ_CHECK(x.recvs[j].peer == y.recvs[j].peer && x.recvs[j].box.off == y.recvs[j].box.off &&
                   x.recvs[j].rel == y.recvs[j].rel && x.recvs[j].off == y.recvs[j].off);
      }
    }
    bool in_s = gs->index_of(me) >= 0, in_d = gd->index_of(me) >= 0;
    if (!in_s && !in_d) FZ_CHECK(plan->bytes_sent == 0);
    if (!plan->steps.empty()) FZ_CHECK(plan->steps.back()->out_layout.equals(Dn));
    for (auto &s : plan->steps) FZ_CHECK(s->out_layout.gshape == gn && s->bytes_sent >= 0);
    FZ_CHECK(!plan->describe().empty() || plan->steps.empty());
    total_sent += plan->bytes_sent;
    for (auto &st : plan->steps) {
      if (st->kind != StepKind::kExchange) continue;
      int64_t covered = 0;
      std::vector<Box> parts;
      for (auto &m : st->sends) {
        FZ_CHECK(m.peer != me && m.peer >= 0 && m.peer < parent);
        FZ_CHECK(m.bytes == static_cast<size_t>(fz::volume(m.box)) * st->esize);
        msgs[{st->tag, me, m.peer}].first.push_back(m.box);
      }
      for (auto &m : st->recvs) {
        FZ_CHECK(m.peer != me && m.peer >= 0 && m.peer < parent);
        msgs[{st->tag, m.peer, me}].second.push_back(m.box);
        parts.push_back(m.box);
      }
      for (auto &c : st->selfs) parts.push_back(c.box);
      // What a rank receives and copies locally tiles its output box exactly (once each).
      for (auto &x : parts) {
        FZ_CHECK(fz::volume(intersect(x, st->outbox)) == fz::volume(x));
        covered += fz::volume(x);
      }
      if (!st->out_layout.has_partial() && !st->skip_self) {
        FZ_CHECK(covered == fz::volume(st->outbox) || (ndim == 0 && covered <= 1));
        for (size_t i = 0; i < parts.size() && i < 48; ++i)
          for (size_t j = i + 1; j < parts.size() && j < 48; ++j)
            FZ_CHECK(fz::volume(intersect(parts[i], parts[j])) == 0 || ndim == 0);
      }
    }
  }
  if (verdict == LM_SUCCESS && S.equals(D)) FZ_CHECK(total_sent == 0);
  for (auto &kv : msgs) {
    auto &sent = kv.second.first, &recv = kv.second.second;
    FZ_CHECK(sent.size() == recv.size());
    for (size_t i = 0; i < sent.size(); ++i)
      FZ_CHECK(sent[i].off == recv[i].off && sent[i].len == recv[i].len);
  }
  // Sends match receives: without Partial placements every rank receives each element of its
  // target box at most once, and at least what its own source shard lacks, so the bytes all
  // ranks send lie between those two sums.
  if (verdict == LM_SUCCESS && !S.has_partial() && !D.has_partial()) {
    int64_t lo = 0, hi = 0, esize = static_cast<int64_t>(dtype_size(dt));
    Shape c(static_cast<size_t>(gd->ndim())), cs(static_cast<size_t>(gs->ndim()));
    for (int64_t i = 0; i < gd->size(); ++i) {
      gd->coord_of(i, c.data());
      Box t = D.box_at(c.data());
      int64_t have = 0, si = gs->index_of(gd->rank_at_index(i));
      if (si >= 0) {
        gs->coord_of(si, cs.data());
        Box x = intersect(t, S.box_at(cs.data()));
        have = ndim == 0 ? 1 : (x.len.empty() ? 0 : fz::volume(x));
      }
      hi += fz::volume(t) * esize;
      lo += (fz::volume(t) - have) * esize;
    }
    if (!(lo <= total_sent && total_sent <= hi))
      std::fprintf(stderr, "S %s D %s sent %lld bounds [%lld, %lld]\n", S.str().c_str(),
                   D.str().c_str(), (long long)total_sent, (long long)lo, (long long)hi);
    FZ_CHECK(lo <= total_sent && total_sent <= hi);
  }
  // The source boxes meeting each target box tile it exactly (Partial dims pinned like Replicate).
  Shape pin(static_cast<size_t>(gs->ndim()), -1);
  for (int m = 0; m < gs->ndim(); ++m)
    if (ps[m].kind != LM_SHARD) pin[m] = 0;
  Shape none(static_cast<size_t>(gd->ndim()), -1);
  for_each_coord(*gd, none, [&](const int64_t *c) {
    Box target = D.box_at(c);
    int64_t want = fz::volume(target), got = 0;
    if (ndim == 0) return;
    enumerate_intersecting(S, pin, target, [&](const int64_t *, const Box &x) {
      for (int d = 0; d < ndim; ++d)
        FZ_CHECK(x.off[d] >= target.off[d] && x.off[d] + x.len[d] <= target.off[d] + target.len[d]);
      got += fz::volume(x);
    });
    FZ_CHECK(got == want);
  });
  return 0;
}
