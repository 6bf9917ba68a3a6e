// SPDX-License-Identifier: BSD-3-Clause
// The C++ wrapper's own checks and helpers (include/localmap.hpp), beside tests/test_cpp.cpp:
//  - localmap::environment (lm_init / lm_world_rank / lm_comm_world / lm_finalize), made first
//    in main here, before the harness sees MPI;
//  - every placements vector is checked against the mesh's ndim before the C call (issue 19: one
//    placement on a 2-D mesh was read past the end of the vector, and ranks reported different
//    garbage), and so are mesh names, in_placements entries and a given global shape;
//  - those refusals speak C++ (issue 40): the whole message names the C++ method, the argument,
//    its C++ type and the length wanted, and no C call ran (the C library's last error stays).
// lm-test-np: 1 2 3 4
#include "lm_test.h"

#include <localmap.hpp>

#include <cstring>
#include <string>

namespace lmx = localmap;

static const lmx::environment *g_env = nullptr;

static void test_environment(void **) {
  int inited = 0, rank = -1, size = 0, comm = 0;
  MPI_Initialized(&inited);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  LM_ASSERT_ALL(inited && g_env != nullptr);
  LM_ASSERT_ALL(g_env->rank() == rank && g_env->size() == size);
  LM_ASSERT_OK_ALL(lm_comm_world(&comm));
  LM_ASSERT_ALL(g_env->comm_world() == comm && g_env->owns_mpi());
  // A second environment in a nested scope is harmless: MPI is up, so it does not own MPI and
  // its destructor does not end it.
  {
    lmx::environment inner;
    LM_ASSERT_ALL(inner.rank() == rank && inner.size() == size && !inner.owns_mpi());
  }
  int still = 0, fin = 0;
  MPI_Initialized(&still);
  MPI_Finalized(&fin);
  LM_ASSERT_ALL(still && !fin);
  lmx::mesh m(g_env->comm_world(), {g_env->size()});
  LM_ASSERT_ALL(m.size() == size);
}

// Runs f, which must throw localmap::error LM_ERR_INVALID_ARGUMENT whose message contains want.
template <class F>
static int refuses(F f, const char *want) {
  try {
    f();
  } catch (const lmx::error &e) {
    if (e.status() == LM_ERR_INVALID_ARGUMENT && std::strstr(e.what(), want)) return 1;
    fprintf(stderr, "rank %d: unexpected error: %s (wanted \"%s\")\n", lm_test_rank(), e.what(), want);
    return 0;
  }
  fprintf(stderr, "rank %d: nothing thrown (wanted \"%s\")\n", lm_test_rank(), want);
  return 0;
}

static void test_placement_counts(void **) {
  const int n = lm_test_size();
  lmx::mesh m1 = lmx::mesh::world({n});
  lmx::mesh m2 = lmx::mesh::world({1, n});
  std::vector<double> full(48);
  for (size_t i = 0; i < full.size(); ++i) full[i] = static_cast<double>(i);
  int64_t g[2] = {8, 6};
  DLTensor gt = {full.data(), {kDLCPU, 0}, 2, {kDLFloat, 64, 1}, g, nullptr, 0};
  const lmx::placements none, one = {lmx::shard(0)}, two = {lmx::replicate(), lmx::replicate()},
                              three = {lmx::shard(0), lmx::replicate(), lmx::replicate()};
  int ok = 1;
  ok &= refuses([&] { lmx::dist_tensor::from_global(m2, &gt, one); },
                "from_global: placements (localmap::placements) has 1 element, want 2: one per "
                "mesh dim");
  ok &= refuses([&] { lmx::dist_tensor::from_global(m1, &gt, none); },
                "from_global: placements (localmap::placements) has 0 elements, want 1");
  ok &= refuses([&] { lmx::dist_tensor::from_global(m1, &gt, three); },
                "has 3 elements, want 1: one per mesh dim");
  ok &= refuses([&] { lmx::dist_tensor::zeros(m2, {8, 6}, LM_DTYPE(kDLFloat, 64), one); },
                "zeros: placements (localmap::placements) has 1 element");
  DLTensor lt = gt;
  ok &= refuses([&] { lmx::dist_tensor::from_local(m2, lt, one, LM_SHAPE_EVEN); },
                "from_local: placements (localmap::placements) has 1 element");
  ok &= refuses([&] { lmx::dist_tensor::from_local(m1, lt, one, LM_SHAPE_GIVEN, {8}); },
                "from_local: global_shape (std::vector<int64_t>) has 1 element, want 2: one per "
                "dim of the local tensor");
  lmx::dist_tensor x = lmx::dist_tensor::from_global(m1, &gt, one);
  ok &= refuses([&] { x.reshard(two); },
                "dist_tensor::reshard: placements (localmap::placements) has 2 elements, want 1");
  ok &= refuses([&] { x.reshard(one, &m2); },
                "dist_tensor::reshard: placements (localmap::placements) has 1 element, want 2");
  ok &= refuses([&] { x.transpose({1, 0}, one, &m2); },
                "transpose: placements (localmap::placements) has 1 element, want 2");
  ok &= refuses([&] { x.transpose({0}, one); },
                "transpose: perm (std::vector<int>) has 1 element, want 2: one per tensor dim");
  ok &= refuses([&] { lmx::reshard_many({x}, {one}, &m2); },
                "reshard_many: dst[0] (localmap::placements) has 1 element, want 2");
  ok &= refuses([&] { lmx::reshard_group(m1, {{{8, 6}, LM_DTYPE(kDLFloat, 64), one, one}}, &m2); },
                "reshard_group: entries[0].dst (localmap::placements) has 1 element, want 2");
  ok &= refuses([&] { lmx::reshard_estimate(m1, one, one, {8, 6}, LM_DTYPE(kDLFloat, 64), &m2); },
                "reshard_estimate: dst_placements (localmap::placements) has 1 element, want 2");
  ok &= refuses([&] { lmx::reshard_plan(m1, one, &m2, one, {8, 6}, LM_DTYPE(kDLFloat, 64)); },
                "reshard_plan: dst_placements (localmap::placements) has 1 element, want 2");
  ok &= refuses([&] { lmx::reshard_plan(m2, one, nullptr, two, {8, 6}, LM_DTYPE(kDLFloat, 64)); },
                "reshard_plan: src_placements (localmap::placements) has 1 element, want 2");
  auto fn = [](lm_mesh_t, const std::vector<lm_arg_t> &, std::vector<lm_arg_t> &) {};
  ok &= refuses([&] { lmx::local_map(fn, {lmx::arg(x)}, {two}); },
                "local_map: out_placements[0] (localmap::placements) has 2 elements, want 1");
  ok &= refuses([&] { lmx::local_map(fn, {lmx::arg(x)}, {{}}, {three}); },
                "local_map: in_placements[0] (localmap::placements) has 3 elements");
  ok &= refuses([&] { lmx::local_map(fn, {lmx::arg(x), lmx::arg_i64(1)}, {{}}, {one}); },
                "local_map: in_placements (std::vector<localmap::placements>) has 1 element, want "
                "2: one per element of inputs");
  ok &= refuses([&] { lmx::local_map(fn, {lmx::arg_i64(1)}, {one}, {}, &m2); },
                "local_map: out_placements[0] (localmap::placements) has 1 element, want 2");
  ok &= refuses([&] { lmx::mesh(g_env->comm_world(), {1, n}, {}, {"dp"}); },
                "localmap::mesh: names (std::vector<std::string>) has 1 element, want 2: one per "
                "mesh dim");
  LM_ASSERT_ALL(ok);
  // The right counts work, and every handle still does after the refusals.
  lmx::dist_tensor r = x.reshard(two, &m2);
  int same = 1;
  for (int i = 0; i < 48; ++i) same &= r.local_data<double>()[i] == static_cast<double>(i);
  LM_ASSERT_ALL(same && lmx::to_string(r.placement()) == "[R, R]");
}


// Runs f, which must throw LM_ERR_INVALID_ARGUMENT with exactly "<status>: localmap::" + want,
// before any C call failed: lm_last_error_message() is still `last`.
template <class F>
static int says(F f, const std::string &want, const std::string &last) {
  const std::string whole =
      std::string(lm_status_string(LM_ERR_INVALID_ARGUMENT)) + ": localmap::" + want;
  try {
    f();
  } catch (const lmx::error &e) {
    const bool no_c_call = lm_last_error_message() == last;
    if (e.status() == LM_ERR_INVALID_ARGUMENT && e.what() == whole && no_c_call) return 1;
    fprintf(stderr, "rank %d: got \"%s\" (C: \"%s\"), wanted \"%s\"\n", lm_test_rank(), e.what(),
            lm_last_error_message(), whole.c_str());
    return 0;
  }
  fprintf(stderr, "rank %d: nothing thrown (wanted \"%s\")\n", lm_test_rank(), whole.c_str());
  return 0;
}

// Each kind of refusal once, in full: the length rules of api/localmap.api that the generated
// calls check (one per mesh dim of the mesh, of dst_mesh or else of the tensor's mesh; one per
// tensor dim; one per dim of a local DLTensor; as many as another argument; a table's rows), and
// the C++ layer's own (a table entry, a group entry, reshard_many's lists, mesh names, a typed
// fn's inputs).
static void test_refusals_in_cpp_terms(void **) {
  const int n = lm_test_size();
  lmx::mesh m1 = lmx::mesh::world({n}), m2 = lmx::mesh::world({1, n});
  std::vector<double> full(48, 1.0);
  int64_t g[2] = {8, 6};
  DLTensor gt = {full.data(), {kDLCPU, 0}, 2, {kDLFloat, 64, 1}, g, nullptr, 0};
  const lmx::placements s0 = {lmx::shard(0)}, rr = {lmx::replicate(), lmx::replicate()};
  lmx::dist_tensor x = lmx::dist_tensor::from_global(m1, &gt, s0);
  lmx::reshard_group grp(m1, {{{8, 6}, LM_FLOAT64, s0, s0}, {{8, 6}, LM_FLOAT64, s0, s0}});
  std::vector<lmx::dist_tensor> y = grp.alloc_targets();
  int nd = 0;
  LM_ASSERT_ALL(lm_mesh_ndim(nullptr, &nd) == LM_ERR_INVALID_ARGUMENT);
  const std::string last = lm_last_error_message();  // the C library's, from here on
  const std::string P = " (localmap::placements) has ";
  auto fn = [](lm_mesh_t, const std::vector<lm_arg_t> &, std::vector<lm_arg_t> &) {};
  auto one_view = [](const lmx::local_view &v) { return v.size(); };
  int ok = 1;
  ok &= says([&] { lmx::dist_tensor::zeros(m2, {8, 6}, LM_FLOAT64, s0); },
             "dist_tensor::zeros: placements" + P + "1 element, want 2: one per mesh dim", last);
  ok &= says([&] { x.reshard(s0, &m2); },
             "dist_tensor::reshard: placements" + P + "1 element, want 2: one per mesh dim", last);
  ok &= says([&] { x.reshard(rr); },
             "dist_tensor::reshard: placements" + P + "2 elements, want 1: one per mesh dim", last);
  ok &= says([&] { x.transpose({1, 0, 2}, s0); },
             "dist_tensor::transpose: perm (std::vector<int>) has 3 elements, want 2: one per "
             "tensor dim", last);
  ok &= says([&] { lmx::dist_tensor::from_local(m1, gt, s0, LM_SHAPE_GIVEN, {48}); },
             "dist_tensor::from_local: global_shape (std::vector<int64_t>) has 1 element, want 2: "
             "one per dim of the local tensor", last);
  ok &= says([&] { grp.execute(y, {x}); },
             "reshard_group::execute: dst (std::vector<localmap::dist_tensor>) has 1 element, "
             "want 2: one per element of src", last);
  ok &= says([&] { lmx::local_map(fn, {lmx::arg(x), lmx::arg_i64(1)}, {{}}, {s0}); },
             "local_map: in_placements (std::vector<localmap::placements>) has 1 element, want 2: "
             "one per element of inputs", last);
  ok &= says([&] { lmx::local_map(fn, {lmx::arg(x)}, {{}, rr}); },
             "local_map: out_placements[1]" + P + "2 elements, want 1: one per mesh dim", last);
  const std::vector<lmx::reshard_entry> bad = {{{8, 6}, LM_FLOAT64, s0, s0},
                                               {{8}, LM_FLOAT64, rr, s0}};
  ok &= says([&] { lmx::reshard_group(m1, bad); },
             "reshard_group: entries[1].src" + P + "2 elements, want 1: one per mesh dim", last);
  ok &= says([&] { lmx::reshard_many({x, x}, {s0}); },
             "reshard_many: dst (std::vector<localmap::placements>) has 1 element, want 2: one per "
             "tensor of src", last);
  ok &= says([&] { lmx::reshard_many({x}, {s0}, &m2); },
             "reshard_many: dst[0]" + P + "1 element, want 2: one per mesh dim", last);
  ok &= says([&] { lmx::mesh(g_env->comm_world(), {1, n}, {}, {"a", "b", "c"}); },
             "mesh: names (std::vector<std::string>) has 3 elements, want 2: one per mesh dim",
             last);
  ok &= says([&] { lmx::local_map(one_view, {x, 2}, {{}}); },
             "local_map: fn takes 1 inputs, 2 given (std::vector<localmap::input>)", last);
  LM_ASSERT_ALL(ok);
}

// reshard_group and reshard_many give what one reshard per tensor gives; counts are refused.
static void test_reshard_group(void **) {
  const int n = lm_test_size();
  lmx::mesh m = lmx::mesh::world({n});
  std::vector<double> full(48);
  for (size_t i = 0; i < full.size(); ++i) full[i] = static_cast<double>(i) * 0.5;
  int64_t g[2] = {8, 6};
  DLTensor gt = {full.data(), {kDLCPU, 0}, 2, {kDLFloat, 64, 1}, g, nullptr, 0};
  const lmx::placements s0 = {lmx::shard(0)}, s1 = {lmx::shard(1)}, r = {lmx::replicate()};
  std::vector<lmx::dist_tensor> x;
  x.push_back(lmx::dist_tensor::from_global(m, &gt, s0));
  x.push_back(lmx::dist_tensor::from_global(m, &gt, s1));
  x.push_back(lmx::dist_tensor::from_global(m, &gt, r));
  const std::vector<lmx::placements> to = {r, s0, s1};
  std::vector<lmx::reshard_entry> e;
  for (size_t i = 0; i < x.size(); ++i)
    e.push_back({{8, 6}, LM_DTYPE(kDLFloat, 64), i == 0 ? s0 : i == 1 ? s1 : r, to[i]});
  lmx::reshard_group grp(m, e, nullptr, 1);  // every entry in a bucket of its own
  std::vector<lmx::dist_tensor> y = grp.alloc_targets();
  grp.execute(x, y);
  std::vector<lmx::dist_tensor> z = lmx::reshard_many(x, to);
  int ok = grp.size() == 3 && grp.buckets() == 3 && y.size() == 3 && z.size() == 3;
  for (size_t i = 0; ok && i < 3; ++i) {
    lmx::dist_tensor ref = x[i].reshard(to[i]);
    size_t k = 1;
    for (int64_t d : ref.local_shape()) k *= static_cast<size_t>(d);
    for (size_t j = 0; j < k; ++j)
      ok &= y[i].local_data<double>()[j] == ref.local_data<double>()[j] &&
            z[i].local_data<double>()[j] == ref.local_data<double>()[j];
  }
  ok &= refuses([&] { grp.execute(z, y); }, "src[0]");  // z[0] is not laid out as entry 0's source
  ok &= refuses([&] { lmx::reshard_many(x, {r}); },
                "reshard_many: dst (std::vector<localmap::placements>) has 1 element, want 3: one "
                "per tensor of src");
  ok &= refuses([&] { lmx::reshard_many(x, {r, {}, r}); },
                "reshard_many: dst[1] (localmap::placements) has 0 elements, want 1: one per mesh "
                "dim");
  ok &= refuses([&] { lmx::reshard_group(m, {{{8, 6}, LM_DTYPE(kDLFloat, 64), {}, r}}); },
                "reshard_group: entries[0].src (localmap::placements) has 0 elements");
  // reshard_estimate gives what the plan of the same arguments says it moves.
  lmx::reshard_plan pl(m, s0, nullptr, r, {8, 6}, LM_DTYPE(kDLFloat, 64));
  const lm_reshard_plan_info_t a = pl.info(), b = lmx::reshard_estimate(m, s0, r, {8, 6}, LM_DTYPE(kDLFloat, 64));
  ok &= a.bytes_sent == b.bytes_sent && a.bytes_received == b.bytes_received &&
        a.flows_sent == b.flows_sent && a.steps == b.steps && a.routes == b.routes;
  ok &= refuses([&] { lmx::reshard_estimate(m, {}, r, {8, 6}, LM_DTYPE(kDLFloat, 64)); },
                "reshard_estimate: src_placements (localmap::placements) has 0 elements");
  LM_ASSERT_ALL(ok);
}

// local_map_ex: the record says where gradients go; input_grad sums a Partial(sum) gradient of
// a replicated input (each rank contributes ones: the result is the rank count everywhere).
static void test_local_map_record(void **) {
  const int n = lm_test_size();
  lmx::mesh m = lmx::mesh::world({n});
  std::vector<double> full(4, 1.0);
  int64_t g[1] = {4};
  DLTensor gt = {full.data(), {kDLCPU, 0}, 1, {kDLFloat, 64, 1}, g, nullptr, 0};
  const lmx::placements r = {lmx::replicate()}, psum = {lmx::partial(LM_REDUCE_SUM)};
  lmx::dist_tensor w = lmx::dist_tensor::from_global(m, &gt, r);
  auto ones = [](lm_mesh_t, const std::vector<lm_arg_t> &in, std::vector<lm_arg_t> &out) {
    const DLTensor *t = static_cast<const DLTensor *>(in[0].ptr);
    DLManagedTensor *o = nullptr;
    lmx::check(lm_tensor_alloc(&o, t->ndim, t->shape, t->dtype, t->device));
    for (int64_t i = 0; i < t->shape[0]; ++i) static_cast<double *>(o->dl_tensor.data)[i] = 1.0;
    out[0] = lm_arg_managed(o);
  };
  lmx::local_map_result fwd = lmx::local_map_ex(ones, {lmx::arg(w)}, {psum}, {}, {psum}, true);
  int ok = static_cast<bool>(fwd.record);
  ok &= lmx::to_string(fwd.record.get_placements(LM_RECORD_IN_GRAD, 0)) == "[P(sum)]" &&
        lmx::to_string(fwd.record.get_placements(LM_RECORD_OUT_GRAD, 0)) == "[R]" &&
        lmx::to_string(fwd.record.get_placements(LM_RECORD_INPUT, 0)) == "[R]";
  lmx::local_map_result bwd =
      lmx::local_map(ones, {lmx::arg(w)}, {fwd.record.get_placements(LM_RECORD_IN_GRAD, 0)});
  lmx::dist_tensor dw = fwd.record.input_grad(0, bwd.tensors[0]);
  for (int i = 0; i < 4; ++i) ok &= dw.local_data<double>()[i] == static_cast<double>(n);
  ok &= lmx::to_string(dw.placement()) == "[R]";
  ok &= refuses([&] { fwd.record.get_placements(LM_RECORD_IN, 1); }, "index 1 is out of range");
  ok &= refuses([&] { lmx::local_map_ex(ones, {lmx::arg(w)}, {psum}, {}, {psum, psum}, true); },
                "local_map: in_grad_placements (std::vector<localmap::placements>) has 2 "
                "elements, want 1: one per element of inputs");
  ok &= !lmx::local_map(ones, {lmx::arg(w)}, {psum}).record;  // none unless asked
  LM_ASSERT_ALL(ok);
}

// Ragged shards: localmap::extents registers and releases; the tensor keeps its extents after
// the object is gone, and a reshard from them to Replicate reassembles the rows in order.
static void test_ragged(void **) {
  const int n = lm_test_size();
  lmx::mesh m = lmx::mesh::world({n});
  lmx::shape rows(static_cast<size_t>(n));
  int64_t total = 0;
  for (int r = 0; r < n; ++r) total += rows[static_cast<size_t>(r)] = (r * 3) % 4;
  std::vector<double> full(static_cast<size_t>(total * 2 + 1));
  for (size_t i = 0; i < full.size(); ++i) full[i] = static_cast<double>(i);
  int64_t g[2] = {total, 2};
  DLTensor gt = {full.data(), {kDLCPU, 0}, 2, {kDLFloat, 64, 1}, g, nullptr, 0};
  lmx::dist_tensor x = [&] {
    lmx::extents e(rows);
    return lmx::dist_tensor::from_global(m, &gt, {lmx::ragged(0, e)});
  }();  // e released here
  int64_t off = 0;
  for (int r = 0; r < lm_test_rank(); ++r) off += rows[static_cast<size_t>(r)];
  int ok = x.local_offset()[0] == off && x.local_shape()[0] == rows[static_cast<size_t>(lm_test_rank())];
  lmx::dist_tensor y = x.reshard({lmx::replicate()});
  for (int64_t i = 0; ok && i < total * 2; ++i) ok &= y.local_data<double>()[i] == full[static_cast<size_t>(i)];
  ok &= refuses([&] { lmx::extents bad({1, -1}); }, "extents[1]");
  // The same rows, each rank's own, with extents agreed from the local shapes.
  const int64_t me = rows[static_cast<size_t>(lm_test_rank())];
  int64_t ls[2] = {me, 2};
  DLTensor lt = {full.data() + off * 2, {kDLCPU, 0}, 2, {kDLFloat, 64, 1}, ls, nullptr, 0};
  lmx::dist_tensor z = lmx::dist_tensor::from_local(m, lt, {lmx::ragged_agreed(0)});
  ok &= z.global_shape()[0] == total && z.local_offset()[0] == off;
  ok &= lmx::extents::lengths(z.placement()[0].extents) == rows;
  // Block-cyclic rows (blocks of 2 from the last rank) through the wrapper: dealt, reassembled.
  lmx::dist_tensor c = lmx::dist_tensor::from_global(m, &gt, {lmx::block_cyclic(0, 2, n - 1)});
  const lm_placement_t cp = c.placement()[0];
  ok &= cp.kind == LM_BLOCK_CYCLIC && cp.dim == 0 && cp.block == 2 && cp.source == n - 1;
  int64_t mine = 0;  // rows of the blocks dealt to this rank: block k goes to (k + n - 1) mod n
  for (int64_t i = 0; i < total; ++i) mine += ((i / 2 + n - 1) % n) == lm_test_rank();
  ok &= c.local_shape()[0] == mine;
  lmx::dist_tensor cr = c.reshard({lmx::replicate()});
  for (int64_t i = 0; ok && i < total * 2; ++i) ok &= cr.local_data<double>()[i] == full[static_cast<size_t>(i)];
  // A ScaLAPACK array of the 2 x total matrix (the transpose of `full`) on a 1 x n grid: blocks of 3
  // columns dealt from process column 0; column j of the matrix is row j of `full`.
  lmx::mesh grid = lmx::mesh::grid(g_env->comm_world(), 0, lm_test_rank());  // a 1 x n grid
  const int cols = static_cast<int>(total);
  std::vector<double> arr;
  for (int j = 0; j < cols; ++j)
    if ((j / 3) % n == lm_test_rank()) arr.insert(arr.end(), {full[2 * j], full[2 * j + 1]});
  const lmx::dist_tensor::scalapack_desc_t desc{1, 0, 2, cols, 2, 3, 0, 0, 2};
  lmx::dist_tensor s = lmx::dist_tensor::from_scalapack(grid, desc, arr.data(), {kDLFloat, 64, 1});
  ok &= s.global_shape() == lmx::shape{total, 2} && s.to_scalapack(0) == desc;
  lmx::dist_tensor sr = s.reshard({lmx::replicate(), lmx::replicate()});
  for (int64_t i = 0; ok && i < total * 2; ++i) ok &= sr.local_data<double>()[i] == full[static_cast<size_t>(i)];
  // transpose_into: the [total, 2] matrix transposed into the replicated [2, total] one.
  lmx::dist_tensor tr = lmx::dist_tensor::zeros(m, {2, total}, {kDLFloat, 64, 1}, {lmx::replicate()});
  c.transpose_into(tr, {1, 0});
  for (int64_t i = 0; ok && i < total * 2; ++i)
    ok &= tr.local_data<double>()[i] == full[static_cast<size_t>((i % total) * 2 + i / total)];
  ok &= refuses([&] { c.transpose_into(tr, {1}); }, "perm");
  ok &= refuses([&] { lmx::dist_tensor::from_scalapack(m, desc, arr.data(), {kDLFloat, 64, 1}); },
                "2-D");
  LM_ASSERT_ALL(ok);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_ragged),
    cmocka_unit_test(test_environment),
    cmocka_unit_test(test_placement_counts),
    cmocka_unit_test(test_refusals_in_cpp_terms),
    cmocka_unit_test(test_reshard_group),
    cmocka_unit_test(test_local_map_record),
};

int main(int argc, char **argv) {
  lmx::environment env(argc, argv);  // first: lm_init starts MPI here, not the harness
  g_env = &env;
  lm_test_init(&argc, &argv);
  return lm_test_run(tests, sizeof(tests) / sizeof(tests[0]), lm_test_basename(argv[0]));
}  // the harness finalised MPI; env's lm_finalize then does nothing
