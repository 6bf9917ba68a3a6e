// SPDX-License-Identifier: BSD-3-Clause
#include "reshard/plan.hpp"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "core/error.hpp"
#include "reshard/reduce.hpp"

namespace lm {

namespace {

constexpr size_t kMaxPiece = size_t(1) << 30;  // split messages above 1 GiB (int counts)
constexpr int kTagBase = 0x4c4d;

int64_t pieces_of(size_t bytes) { return bytes == 0 ? 0 : (int64_t)((bytes + kMaxPiece - 1) / kMaxPiece); }

// Whether box (global coords) is one contiguous run inside a compact local buffer holding
// `local`; if so, sets *byte_off.
bool contiguous_in(const Box &local, const Box &box, size_t esize, size_t *byte_off) {
  int n = (int)local.len.size();
  int j = 0;
  while (j < n && box.len[j] == 1) ++j;
  for (int i = j + 1; i < n; ++i)
    if (box.off[i] != local.off[i] || box.len[i] != local.len[i]) return false;
  int64_t lin = 0;
  for (int i = 0; i < n; ++i) lin = lin * local.len[i] + (box.off[i] - local.off[i]);
  *byte_off = (size_t)lin * esize;
  return true;
}

Shape rel(const Box &box, const Box &local) {
  Shape o(box.off.size());
  for (size_t i = 0; i < o.size(); ++i) o[i] = box.off[i] - local.off[i];
  return o;
}

void post_pieces(bool send, char *p, size_t bytes, int peer, int tag, MPI_Comm comm,
                 MPI_Request *&req) {
  for (size_t done = 0; done < bytes; done += kMaxPiece) {
    int n = (int)std::min(kMaxPiece, bytes - done);
    int rc = send ? MPI_Isend(p + done, n, MPI_BYTE, peer, tag, comm, req)
                  : MPI_Irecv(p + done, n, MPI_BYTE, peer, tag, comm, req);
    mpi_check(rc, send ? "reshard: MPI_Isend" : "reshard: MPI_Irecv");
    ++req;
  }
}

// ---------------------------------------------------------------------------------------------
class ExchangeStep : public Step {
 public:
  ExchangeStep(const Layout &in, const Layout &out, bool same_mesh, MPI_Comm comm, int me,
               size_t esize, int tag);
  void start(const void *in, void *out) override;
  bool progress(bool block) override;
  bool alias_offset(size_t *byte_off) const override {
    if (!sends_.empty() || !recvs_.empty() || selfs_.size() != 1) return false;
    const Box &b = selfs_[0].box;
    if (b.off != outbox_.off || b.len != outbox_.len) return false;
    return contiguous_in(inbox_, b, esize_, byte_off);
  }
  bool input_lands_contiguously(size_t *byte_off) const override {
    if (selfs_.size() != 1 || inbox_.empty()) return false;
    const Box &b = selfs_[0].box;
    if (b.off != inbox_.off || b.len != inbox_.len) return false;
    return contiguous_in(outbox_, b, esize_, byte_off);
  }
  void fuse_input() override { skip_self_ = true; }
  std::string describe() const override {
    return strfmt("exchange %s->%s (%zu sends, %zu recvs, %zu local%s)", in_.str().c_str(),
                  out_.str().c_str(), sends_.size(), recvs_.size(), selfs_.size(),
                  skip_self_ ? ", fused" : "");
  }

 private:
  struct Msg {
    int peer;
    Box box;
    size_t bytes;
    bool direct;
    size_t off;  // byte offset in the local buffer (direct) or in the staging area
    MPI_Datatype type = MPI_DATATYPE_NULL;  // subarray of the local buffer (no staging)
    Shape rel;   // box offset inside the local buffer (computed at plan time: no allocation later)
  };
  struct SelfCopy {
    Box box;
    Shape in_rel, out_rel;
  };
  // Describes a non-contiguous box as an MPI subarray of the local buffer when the extents fit
  // in int; then MPI packs straight into its transport buffers (one memory pass fewer).
  static MPI_Datatype subarray(const Box &local, const Box &box, size_t esize);
  void finish_msg(Msg &msg, const Box &local, size_t &stage);
  Layout in_, out_;
  MPI_Comm comm_;
  size_t esize_;
  int tag_;
  Box inbox_, outbox_;
  std::vector<Msg> sends_, recvs_;
  std::vector<SelfCopy> selfs_;
  Shape zero_;  // all-zero offsets of the tensor's rank
  std::vector<char> stage_send_, stage_recv_;
  std::vector<MPI_Request> reqs_;
  void *out_ptr_ = nullptr;
  bool skip_self_ = false;  // the step before wrote the input in place inside the output

 public:
  ~ExchangeStep() override {
    if (!mpi_alive()) return;  // after MPI_Finalize the types are gone with MPI
    for (auto *v : {&sends_, &recvs_})
      for (auto &m : *v)
        if (m.type != MPI_DATATYPE_NULL) MPI_Type_free(&m.type);
  }
};

MPI_Datatype ExchangeStep::subarray(const Box &local, const Box &box, size_t esize) {
  static const bool enabled = [] {
    const char *e = std::getenv("LM_RESHARD_DATATYPES");
    return !(e && e[0] == '0');
  }();
  int init = 0;
  MPI_Initialized(&init);
  if (!enabled || !init || (size_t)box.numel() * esize > kMaxPiece) return MPI_DATATYPE_NULL;
  int n = (int)local.len.size();
  int sizes[kMaxDims], subs[kMaxDims], starts[kMaxDims];
  for (int i = 0; i < n; ++i) {
    if (local.len[i] > INT_MAX) return MPI_DATATYPE_NULL;
    sizes[i] = (int)local.len[i];
    subs[i] = (int)box.len[i];
    starts[i] = (int)(box.off[i] - local.off[i]);
  }
  MPI_Datatype elem, t;
  if (MPI_Type_contiguous((int)esize, MPI_BYTE, &elem) != MPI_SUCCESS) return MPI_DATATYPE_NULL;
  int rc = MPI_Type_create_subarray(n, sizes, subs, starts, MPI_ORDER_C, elem, &t);
  MPI_Type_free(&elem);
  if (rc != MPI_SUCCESS) return MPI_DATATYPE_NULL;
  if (MPI_Type_commit(&t) != MPI_SUCCESS) {
    MPI_Type_free(&t);
    return MPI_DATATYPE_NULL;
  }
  return t;
}

void ExchangeStep::finish_msg(Msg &msg, const Box &local, size_t &stage) {
  msg.rel = rel(msg.box, local);
  msg.direct = contiguous_in(local, msg.box, esize_, &msg.off);
  if (msg.direct) return;
  msg.type = subarray(local, msg.box, esize_);
  if (msg.type != MPI_DATATYPE_NULL) return;
  msg.off = stage;
  stage += msg.bytes;
}

// The source coordinate a receiver takes replicated data from, per replicated source mesh dim.
struct SourceChooser {
  const Layout &in;
  const Layout &out;
  bool same_mesh;
  std::vector<int> rep;  // source mesh dims that are Replicate
  int64_t rep_span = 1;

  SourceChooser(const Layout &i, const Layout &o, bool s) : in(i), out(o), same_mesh(s) {
    for (int m = 0; m < in.mesh_ndim(); ++m)
      if (in.pl[m].kind == LM_REPLICATE) {
        rep.push_back(m);
        rep_span *= in.grid->shape()[m];
      }
  }
  // Writes the chosen coordinate along each replicated dim into `fixed` (source mesh dims).
  void choose(const int64_t *recv_coord, int recv_rank, Shape &fixed) const {
    if (rep.empty()) return;
    if (same_mesh) {
      for (int m : rep) fixed[m] = recv_coord[m];
      return;
    }
    int64_t idx = in.grid->index_of(recv_rank);
    if (idx >= 0) {  // the receiver holds a replica itself: take it from there
      Shape c(in.grid->shape().size());
      in.grid->coord_of(idx, c.data());
      for (int m : rep) fixed[m] = c[m];
      return;
    }
    int64_t k = out.grid->index_at(recv_coord) % rep_span;  // spread receivers over replicas
    for (auto it = rep.rbegin(); it != rep.rend(); ++it) {
      int64_t ext = in.grid->shape()[*it];
      fixed[*it] = k % ext;
      k /= ext;
    }
  }
};

ExchangeStep::ExchangeStep(const Layout &in, const Layout &out, bool same_mesh, MPI_Comm comm,
                           int me, size_t esize, int tag)
    : in_(in), out_(out), comm_(comm), esize_(esize), tag_(tag) {
  out_layout = out;
  SourceChooser chooser(in, out, same_mesh);
  int64_t in_idx = in.grid->index_of(me), out_idx = out.grid->index_of(me);
  Shape cs(in.mesh_ndim()), cd(out.mesh_ndim());
  if (in_idx >= 0) {
    in.grid->coord_of(in_idx, cs.data());
    inbox_ = in.box_at(cs.data());
  } else {
    inbox_.off.assign(in.gshape.size(), 0);
    inbox_.len.assign(in.gshape.size(), 0);
  }
  if (out_idx >= 0) {
    out.grid->coord_of(out_idx, cd.data());
    outbox_ = out.box_at(cd.data());
  } else {
    outbox_.off.assign(out.gshape.size(), 0);
    outbox_.len.assign(out.gshape.size(), 0);
  }
  size_t stage = 0;
  // Receives: who holds each part of my target box.
  if (out_idx >= 0 && !outbox_.empty()) {
    Shape fixed(in.mesh_ndim(), -1);
    chooser.choose(cd.data(), me, fixed);
    for (int m = 0; m < in.mesh_ndim(); ++m)
      if (in.pl[m].kind == LM_PARTIAL) fixed[m] = cd[m];  // kept Partial: same coordinate
    enumerate_intersecting(in, fixed, outbox_, [&](const int64_t *c, const Box &b) {
      int peer = in.grid->rank_at_index(in.grid->index_at(c));
      if (peer == me) {
        selfs_.push_back(SelfCopy{b, rel(b, inbox_), rel(b, outbox_)});
        return;
      }
      Msg msg{peer, b, (size_t)b.numel() * esize, false, 0, MPI_DATATYPE_NULL, {}};
      finish_msg(msg, outbox_, stage);
      recvs_.push_back(std::move(msg));
    });
  }
  stage_recv_.resize(stage);
  stage = 0;
  // Sends: who needs parts of my source box and takes them from me.
  if (in_idx >= 0 && !inbox_.empty()) {
    Shape fixed(out.mesh_ndim(), -1);
    if (same_mesh)
      for (int m = 0; m < in.mesh_ndim(); ++m)
        if (in.pl[m].kind != LM_SHARD) fixed[m] = cs[m];
    Shape choice(in.mesh_ndim(), -1);
    enumerate_intersecting(out, fixed, inbox_, [&](const int64_t *c, const Box &b) {
      int peer = out.grid->rank_at_index(out.grid->index_at(c));
      if (peer == me) return;  // counted as a local copy on the receive side
      if (!same_mesh) {
        chooser.choose(c, peer, choice);
        for (int m : chooser.rep)
          if (choice[m] != cs[m]) return;  // the receiver takes it from another replica
      }
      Msg msg{peer, b, (size_t)b.numel() * esize, false, 0, MPI_DATATYPE_NULL, {}};
      finish_msg(msg, inbox_, stage);
      bytes_sent += (int64_t)msg.bytes;
      sends_.push_back(std::move(msg));
    });
  }
  stage_send_.resize(stage);
  zero_.assign(in.gshape.size(), 0);
  int64_t np = 0;
  for (auto &m : sends_) np += m.type != MPI_DATATYPE_NULL ? 1 : pieces_of(m.bytes);
  for (auto &m : recvs_) np += m.type != MPI_DATATYPE_NULL ? 1 : pieces_of(m.bytes);
  reqs_.resize((size_t)np);
}

void ExchangeStep::start(const void *in, void *out) {
  out_ptr_ = out;
  MPI_Request *req = reqs_.data();
  for (auto &m : recvs_) {
    if (m.type != MPI_DATATYPE_NULL) {
      mpi_check(MPI_Irecv(out, 1, m.type, m.peer, tag_, comm_, req++), "reshard: MPI_Irecv");
      continue;
    }
    char *p = m.direct ? static_cast<char *>(out) + m.off : stage_recv_.data() + m.off;
    post_pieces(false, p, m.bytes, m.peer, tag_, comm_, req);
  }
  const Shape &ils = inbox_.len;
  for (auto &m : sends_) {
    char *p;
    if (m.type != MPI_DATATYPE_NULL) {
      mpi_check(MPI_Isend(in, 1, m.type, m.peer, tag_, comm_, req++), "reshard: MPI_Isend");
      continue;
    }
    if (m.direct) {
      p = const_cast<char *>(static_cast<const char *>(in)) + m.off;
    } else {
      p = stage_send_.data() + m.off;
      copy_box(p, m.box.len, zero_, in, ils, m.rel, m.box.len,
               esize_);
    }
    post_pieces(true, p, m.bytes, m.peer, tag_, comm_, req);
  }
  if (!skip_self_)
    for (auto &b : selfs_)
      copy_box(out, outbox_.len, b.out_rel, in, ils, b.in_rel, b.box.len, esize_);
}

bool ExchangeStep::progress(bool block) {
  if (!reqs_.empty()) {
    if (block) {
      mpi_check(MPI_Waitall((int)reqs_.size(), reqs_.data(), MPI_STATUSES_IGNORE),
                "reshard: MPI_Waitall");
    } else {
      int flag = 0;
      mpi_check(MPI_Testall((int)reqs_.size(), reqs_.data(), &flag, MPI_STATUSES_IGNORE),
                "reshard: MPI_Testall");
      if (!flag) return false;
    }
  }
  for (auto &m : recvs_)
    if (!m.direct && m.type == MPI_DATATYPE_NULL)
      copy_box(out_ptr_, outbox_.len, m.rel, stage_recv_.data() + m.off, m.box.len, zero_,
               m.box.len, esize_);
  return true;
}

// ---------------------------------------------------------------------------------------------
class ReduceScatterStep : public Step {
 public:
  // op: the reduction; avg arrives as sum plus `divide_by` (> 0 on the last of a chain of
  // reductions: the product of all reduced extents, so avg over several dims divides once).
  ReduceScatterStep(const Layout &in, const Layout &out, int m, int d, int op, int64_t divide_by,
                    DType dt, MPI_Comm comm, int me, int tag);
  void start(const void *in, void *out) override;
  bool progress(bool block) override;
  std::string describe() const override {
    return strfmt("reduce-scatter %s->%s over mesh dim %d (%lld ranks)", in_.str().c_str(),
                  out_.str().c_str(), m_, (long long)k_);
  }

 private:
  Layout in_, out_;
  int m_, op_;
  int64_t divide_by_;
  DType dt_;
  size_t esize_;
  MPI_Comm comm_;
  int tag_;
  bool member_ = false;
  int64_t k_ = 1, mine_ = 0;
  std::vector<int> peers_;  // parent rank per group index
  Box inbox_;
  std::vector<Box> chunks_;        // per group index, global coords
  std::vector<Shape> chunk_rel_;   // per group index, offset inside the input box
  Shape zero_;
  std::vector<char> own_stage_;    // my chunk when not contiguous in the input
  std::vector<char> recv_stage_;   // one slot per peer
  std::vector<char> send_stage_;
  std::vector<size_t> send_off_;   // per group index: byte offset (input or send stage)
  std::vector<bool> send_direct_;
  std::vector<MPI_Request> recv_req_, send_req_;  // per group index (pieces concatenated)
  std::vector<int64_t> recv_first_;               // first request index per group index
  size_t chunk_bytes_ = 0;
  const void *in_ptr_ = nullptr;
  void *out_ptr_ = nullptr;
  int64_t next_ = 0;  // next group index to reduce
  const char *own_ = nullptr;
  bool wide_ = false;             // integer avg: accumulate in 128 bits, divide, narrow
  std::vector<__int128> acc_;
};

ReduceScatterStep::ReduceScatterStep(const Layout &in, const Layout &out, int m, int d, int op,
                                     int64_t divide_by, DType dt, MPI_Comm comm, int me, int tag)
    : in_(in), out_(out), m_(m), op_(op), divide_by_(divide_by), dt_(dt), esize_(dtype_size(dt)), comm_(comm), tag_(tag) {
  out_layout = out;
  int64_t idx = in.grid->index_of(me);
  if (idx < 0) return;
  Shape c(in.mesh_ndim());
  in.grid->coord_of(idx, c.data());
  inbox_ = in.box_at(c.data());
  member_ = true;
  k_ = in.grid->shape()[m];
  mine_ = c[m];
  for (int64_t j = 0; j < k_; ++j) {
    c[m] = j;
    peers_.push_back(in.grid->rank_at_index(in.grid->index_at(c.data())));
    Box b = inbox_;
    Range r = chunk(inbox_.len[d], k_, j);
    b.off[d] += r.off;
    b.len[d] = r.len;
    chunks_.push_back(b);
  }
  chunk_bytes_ = (size_t)chunks_[mine_].numel() * esize_;
  for (auto &b : chunks_) chunk_rel_.push_back(rel(b, inbox_));
  zero_.assign(inbox_.len.size(), 0);
  size_t stage = 0;
  send_off_.assign(k_, 0);
  send_direct_.assign(k_, false);
  for (int64_t j = 0; j < k_; ++j) {
    size_t off;
    if (contiguous_in(inbox_, chunks_[j], esize_, &off)) {
      send_direct_[j] = true;
      send_off_[j] = off;
    } else if (j != mine_) {
      send_off_[j] = stage;
      stage += (size_t)chunks_[j].numel() * esize_;
    }
    if (j != mine_) bytes_sent += chunks_[j].numel() * (int64_t)esize_;
  }
  send_stage_.resize(stage);
  if (!send_direct_[mine_]) own_stage_.resize(chunk_bytes_);
  recv_stage_.resize(chunk_bytes_ * (size_t)(k_ - 1));
  int64_t nrecv = 0, nsend = 0;
  recv_first_.assign(k_ + 1, 0);
  for (int64_t j = 0; j < k_; ++j) {
    recv_first_[j] = nrecv;
    if (j != mine_) {
      nrecv += pieces_of(chunk_bytes_);
      nsend += pieces_of((size_t)chunks_[j].numel() * esize_);
    }
  }
  recv_first_[k_] = nrecv;
  recv_req_.resize(nrecv);
  send_req_.resize(nsend);
  wide_ = divide_by_ > 1 && dtype_is_integer(dt_);
  if (wide_) acc_.resize((size_t)chunks_[mine_].numel());
}

void ReduceScatterStep::start(const void *in, void *out) {
  in_ptr_ = in;
  out_ptr_ = out;
  next_ = 0;
  if (!member_) return;
  // Receive peer j's contribution; group index 0's goes straight into the output when remote.
  for (int64_t j = 0; j < k_; ++j) {
    if (j == mine_) continue;
    MPI_Request *req = recv_req_.data() + recv_first_[j];
    char *slot = (j == 0) ? static_cast<char *>(out)
                          : recv_stage_.data() + chunk_bytes_ * (size_t)(j < mine_ ? j : j - 1);
    post_pieces(false, slot, chunk_bytes_, peers_[j], tag_, comm_, req);
  }
  MPI_Request *sreq = send_req_.data();
  const char *inb = static_cast<const char *>(in);
  for (int64_t j = 0; j < k_; ++j) {
    if (j == mine_) continue;
    size_t bytes = (size_t)chunks_[j].numel() * esize_;
    char *p;
    if (send_direct_[j]) {
      p = const_cast<char *>(inb) + send_off_[j];
    } else {
      p = send_stage_.data() + send_off_[j];
      copy_box(p, chunks_[j].len, zero_, in, inbox_.len, chunk_rel_[j], chunks_[j].len, esize_);
    }
    post_pieces(true, p, bytes, peers_[j], tag_, comm_, sreq);
  }
  if (send_direct_[mine_]) {
    own_ = inb + send_off_[mine_];
  } else {
    copy_box(own_stage_.data(), chunks_[mine_].len, zero_, in, inbox_.len, chunk_rel_[mine_],
             chunks_[mine_].len, esize_);
    own_ = own_stage_.data();
  }
}

bool ReduceScatterStep::progress(bool block) {
  if (!member_) return true;
  int64_t n = chunks_[mine_].numel();
  // Reduce contributions in group order, so results are deterministic (x0 + x1 + ...).
  while (next_ < k_) {
    int64_t j = next_;
    if (j != mine_) {
      int cnt = (int)(recv_first_[j + 1] - recv_first_[j]);
      MPI_Request *r = recv_req_.data() + recv_first_[j];
      if (block) {
        mpi_check(MPI_Waitall(cnt, r, MPI_STATUSES_IGNORE), "reshard: MPI_Waitall");
      } else {
        int flag = 0;
        mpi_check(MPI_Testall(cnt, r, &flag, MPI_STATUSES_IGNORE), "reshard: MPI_Testall");
        if (!flag) return false;
      }
    }
    const void *src = (j == mine_) ? own_
                      : j == 0     ? out_ptr_  // group index 0's part arrived in the output
                                   : recv_stage_.data() +
                                         chunk_bytes_ * (size_t)(j < mine_ ? j : j - 1);
    if (wide_) {
      wide_accumulate(dt_, acc_.data(), src, n, j == 0);
    } else if (j == 0) {
      if (mine_ == 0 && chunk_bytes_) std::memcpy(out_ptr_, own_, chunk_bytes_);
    } else {
      reduce_into(dt_, op_, out_ptr_, src, n);
    }
    ++next_;
  }
  if (!send_req_.empty()) {
    if (block) {
      mpi_check(MPI_Waitall((int)send_req_.size(), send_req_.data(), MPI_STATUSES_IGNORE),
                "reshard: MPI_Waitall");
    } else {
      int flag = 0;
      mpi_check(MPI_Testall((int)send_req_.size(), send_req_.data(), &flag, MPI_STATUSES_IGNORE),
                "reshard: MPI_Testall");
      if (!flag) return false;
    }
  }
  if (wide_)
    wide_finish_avg(dt_, out_ptr_, acc_.data(), n, divide_by_);
  else if (divide_by_ > 1)
    scale_avg(dt_, out_ptr_, n, divide_by_);
  next_ = k_ + 1;  // done; a further progress() call is a no-op
  return true;
}

// ---------------------------------------------------------------------------------------------
class PartialInitStep : public Step {
 public:
  PartialInitStep(const Layout &in, const Layout &out, DType dt, int me) : out_(out), dt_(dt) {
    out_layout = out;
    int64_t idx = out.grid->index_of(me);
    if (idx < 0) return;
    Shape c(out.mesh_ndim());
    out.grid->coord_of(idx, c.data());
    n_ = out.box_at(c.data()).numel();
    for (int m = 0; m < out.mesh_ndim(); ++m)
      if (out.pl[m].kind == LM_PARTIAL && in.pl[m].kind != LM_PARTIAL) {
        op_ = out.pl[m].op;
        if (c[m] != 0 && (op_ == LM_REDUCE_SUM || op_ == LM_REDUCE_PROD)) fill_ = true;
      }
  }
  void start(const void *, void *out) override {
    if (fill_) fill_identity(dt_, op_, out, n_);
  }
  bool progress(bool) override { return true; }
  bool in_place() const override { return true; }
  std::string describe() const override {
    return strfmt("partial-init ->%s (local)", out_.str().c_str());
  }

 private:
  Layout out_;
  DType dt_;
  int64_t n_ = 0;
  int op_ = 0;
  bool fill_ = false;
};

int max_order(const Layout &L, int d) {
  int mx = -1;
  for (int m = 0; m < L.mesh_ndim(); ++m)
    if (L.pl[m].kind == LM_SHARD && L.pl[m].dim == d) mx = std::max(mx, (int)L.pl[m].order);
  return mx;
}

// Makes mesh dim m shard tensor dim d innermost (after every mesh dim already sharding d).
void shard_innermost(Layout &L, int m, int d) {
  int mx = max_order(L, d);  // m itself does not shard anything yet
  L.pl[m] = lm_placement_t{LM_SHARD, d, 0, mx >= 0 ? mx + 1 : 0};
  L.derive();
}

int largest_dim(const Shape &g) {
  int best = 0;
  for (int d = 1; d < (int)g.size(); ++d)
    if (g[d] > g[best]) best = d;
  return best;
}

}  // namespace

void check_reshard(const Layout &src, const Layout &dst, DType dt) {
  const char *fn = "reshard";
  LM_CHECK_ARG(src.gshape == dst.gshape, "%s: source and target global shapes differ", fn);
  int src_op = -1, dst_op = -1;
  for (auto &p : src.pl)
    if (p.kind == LM_PARTIAL) src_op = p.op;
  for (auto &p : dst.pl)
    if (p.kind == LM_PARTIAL) dst_op = p.op;
  if (src_op >= 0) check_reduce(dt, src_op, "reshard: source placements");
  if (dst_op >= 0) check_reduce(dt, dst_op, "reshard: target placements");
  if (src_op >= 0 && dst_op >= 0 && src_op != dst_op)
    fail(LM_ERR_INVALID_ARGUMENT,
         "%s: Partial -> Partial with another reduce op (%s -> %s) is not a reshard; reduce to "
         "Replicate or Shard first",
         fn, src.str().c_str(), dst.str().c_str());

}

// ---------------------------------------------------------------------------------------------
std::unique_ptr<Plan> plan_build(const Layout &src, const Layout &dst, DLDataType dtype,
                                 MPI_Comm comm, int me) {
  // A 0-d tensor holds one element on every member, as a [1] tensor with no Shard does: plan it
  // as that (the steps never see a 0-d layout); the plan still reports the caller's layouts.
  if (src.gshape.empty() && dst.gshape.empty()) {
    auto plan = plan_build(as_one_element(src), as_one_element(dst), dtype, comm, me);
    plan->src = src;
    plan->dst = dst;
    return plan;
  }
  auto plan = std::make_unique<Plan>();
  plan->comm = comm;
  plan->me = me;
  plan->src = src;
  plan->dst = dst;
  plan->dtype = dtype;
  plan->dt = dtype_from_dl(dtype, "reshard: dtype");
  plan->esize = dtype_size(plan->dt);
  const bool same_mesh = src.grid->same_as(*dst.grid);
  int64_t si = src.grid->index_of(me), di = dst.grid->index_of(me);
  plan->involved = si >= 0 || di >= 0;

  check_reshard(src, dst, plan->dt);

  int tag = kTagBase;
  Layout cur = src;
  // 1. Reduce the Partial dims that the target does not keep. Avg reduces as a sum and divides
  // once, by the product of the reduced extents, on the last reduction (exact for integers).
  int last_reduced = -1;
  int64_t reduced_extent = 1;
  for (int m = 0; m < src.mesh_ndim(); ++m)
    if (src.pl[m].kind == LM_PARTIAL && !(same_mesh && dst.pl[m].kind == LM_PARTIAL)) {
      last_reduced = m;
      reduced_extent *= src.grid->shape()[m];
    }
  for (int m = 0; m < src.mesh_ndim(); ++m) {
    if (src.pl[m].kind != LM_PARTIAL) continue;
    if (same_mesh && dst.pl[m].kind == LM_PARTIAL) continue;  // kept (same op checked above)
    int d = (same_mesh && dst.pl[m].kind == LM_SHARD) ? dst.pl[m].dim : largest_dim(src.gshape);
    Layout next = cur;
    shard_innermost(next, m, d);
    // Floats divide once, by all reduced extents, on the last reduction (one rounding);
    // integers average dim by dim in a 128-bit accumulator (no overflow, exact whenever each
    // partial mean is).
    bool avg = src.pl[m].op == LM_REDUCE_AVG;
    int64_t divide_by = 0;
    if (avg) divide_by = dtype_is_integer(plan->dt) ? src.grid->shape()[m]
                         : m == last_reduced      ? reduced_extent
                                                  : 0;
    plan->steps.push_back(std::make_unique<ReduceScatterStep>(
        cur, next, m, d, avg ? LM_REDUCE_SUM : src.pl[m].op, divide_by, plan->dt, comm, me,
        tag++));
    cur = next;
  }
  // 2. Move data to the target without its new Partial dims (they start as Replicate).
  Layout d0 = dst;
  for (int m = 0; m < dst.mesh_ndim(); ++m)
    if (dst.pl[m].kind == LM_PARTIAL && !(same_mesh && src.pl[m].kind == LM_PARTIAL))
      d0.pl[m] = lm_placement_t{LM_REPLICATE, 0, 0, 0};
  d0.derive();
  if (!same_mesh) {
    // Cross-mesh: every byte crosses once; replication happens inside the target mesh.
    Layout d1 = d0;
    bool changed = false;
    if (!d1.gshape.empty()) {
      int ds = largest_dim(d1.gshape);
      for (int m = 0; m < d1.mesh_ndim(); ++m)
        if (d1.pl[m].kind == LM_REPLICATE && d1.grid->shape()[m] > 1) {
          shard_innermost(d1, m, ds);
          changed = true;
        }
    }
    plan->steps.push_back(std::make_unique<ExchangeStep>(cur, d1, false, comm, me,
                                                         plan->esize, tag++));
    if (changed)
      plan->steps.push_back(std::make_unique<ExchangeStep>(d1, d0, true, comm, me, plan->esize,
                                                           tag++));
  } else if (!cur.equals(d0) || plan->steps.empty()) {
    plan->steps.push_back(std::make_unique<ExchangeStep>(cur, d0, true, comm, me, plan->esize,
                                                         tag++));
  }
  // 3. New Partial dims: identity fill where needed.
  if (!d0.equals(dst))
    plan->steps.push_back(std::make_unique<PartialInitStep>(d0, dst, plan->dt, me));

  // Intermediate buffers, sized now so that executions allocate nothing.
  plan->last_moving = 0;
  for (size_t i = 0; i < plan->steps.size(); ++i) {
    plan->bytes_sent += plan->steps[i]->bytes_sent;
    if (!plan->steps[i]->in_place()) plan->last_moving = i;
  }
  // Fuse: when step i+1 only copies its whole input into a contiguous part of its output (the
  // allgather after a reduce-scatter), step i writes there directly.
  plan->fused.assign(plan->steps.size(), -1);
  for (size_t i = 0; i + 1 <= plan->last_moving; ++i) {
    size_t off = 0;
    if (!plan->steps[i]->in_place() && !plan->steps[i + 1]->in_place() &&
        plan->steps[i + 1]->input_lands_contiguously(&off)) {
      plan->fused[i] = (int64_t)off;
      plan->steps[i + 1]->fuse_input();
    }
  }
  plan->work.resize(plan->steps.size());
  for (size_t i = 0; i < plan->steps.size(); ++i) {
    if (plan->steps[i]->in_place() || i == plan->last_moving || plan->fused[i] >= 0) continue;
    const Layout &L = plan->steps[i]->out_layout;
    int64_t idx = L.grid->index_of(me);
    int64_t n = 0;
    if (idx >= 0) {
      Shape c(L.mesh_ndim());
      L.grid->coord_of(idx, c.data());
      n = L.box_at(c.data()).numel();
    }
    plan->work[i] = storage_alloc((size_t)n * plan->esize);
  }
  return plan;
}

void Plan::start(const void *in, void *out) {
  in0 = in;
  out_final = out;
  cur = 0;
  active = !steps.empty();
  if (active) steps[0]->start(in_of(0), out_of(0));
}

void *Plan::out_of(size_t i) const {
  if (steps[i]->in_place() || i == last_moving) return out_final;
  if (fused[i] >= 0) return static_cast<char *>(out_of(i + 1)) + fused[i];
  return work[i]->data;
}

const void *Plan::in_of(size_t i) const {
  if (steps[i]->in_place()) return out_final;
  return i == 0 ? in0 : out_of(i - 1);
}

bool Plan::progress(bool block) {
  while (active) {
    if (!steps[cur]->progress(block)) return false;
    if (++cur == steps.size()) {
      active = false;
      break;
    }
    steps[cur]->start(in_of(cur), out_of(cur));
  }
  return true;
}

std::string Plan::describe() const {
  std::string s;
  for (auto &st : steps) {
    if (!s.empty()) s += "; ";
    s += st->describe();
  }
  return s.empty() ? "nothing to do on this rank" : s;
}

}  // namespace lm
