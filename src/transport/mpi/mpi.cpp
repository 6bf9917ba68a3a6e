// SPDX-License-Identifier: BSD-3-Clause
#include "transport/mpi/mpi.hpp"

#include <algorithm>
#include <climits>
#include <cstdlib>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <unistd.h>

#include "comm/node.hpp"
#include "common/error.hpp"
#include "common/mpi.hpp"
#include "common/settings.hpp"
#include "layout/elementwise.hpp"
#include "mem/arena.hpp"

namespace lm {

namespace {
constexpr size_t kMaxPiece = size_t(1) << 30;  // split messages above 1 GiB (int counts)
// The acknowledgement of a node-local message travels on its own tag (step tags are kTagBase +
// step, below 0x5000; acks stay below kAbortTag).
constexpr int kAckOffset = 0x1000;
int ack_tag(int tag) { return tag + kAckOffset < kAbortTag ? tag + kAckOffset : kAbortTag - 2; }
int done_tag(int tag) { return tag + 2 * kAckOffset < kAbortTag ? tag + 2 * kAckOffset : kAbortTag - 1; }

bool datatypes_enabled() { return setting_on(Setting::ReshardDatatypes); }

// Non-contiguous boxes of fewer bytes are staged (packed by boxcopy) rather than described as a
// subarray datatype: below some tens of KiB, Open MPI's datatype engine costs more per message
// than our own pack (docs/PERFORMANCE.md, "Where the defaults come from"). From the node-local
// path's floor up a box stays a box, so that on one node it is copied once, strided side and all.
// LM_DATATYPE_MIN_BYTES, default 32 KiB (kNodeLocalDefaultMin); 0: datatypes at every size.
size_t datatype_min_bytes() { return (size_t)setting_u(Setting::DatatypeMinBytes); }
size_t datatype_recv_min_bytes() {
  return std::max(datatype_min_bytes(), (size_t)setting_u(Setting::DatatypeRecvMinBytes));
}
size_t node_local_min_bytes() { return (size_t)setting_u(Setting::NodeLocalMinBytes); }
}  // namespace

void MpiTransport::fail_and_notify(lm_status_t st, const std::string &msg) {
  drop_pending();
  notices_.notify(st, msg);
  throw Error(st, msg);
}

// MPI_ERR_IN_STATUS: the error of the first failed request. A truncated message means the two
// sides expected different sizes: the ranks ran different reshards (at LM_CHECK=0 nothing compared
// their arguments first), which is said as such.
int MpiTransport::in_status(int rc, size_t n) {
  int cls = MPI_SUCCESS;
  MPI_Error_class(rc, &cls);
  if (cls == MPI_ERR_IN_STATUS)
    for (size_t i = 0; i < n; ++i)
      if (statuses_[i].MPI_ERROR != MPI_SUCCESS && statuses_[i].MPI_ERROR != MPI_ERR_PENDING) {
        rc = statuses_[i].MPI_ERROR;
        MPI_Error_class(rc, &cls);
        break;
      }
  if (cls == MPI_ERR_TRUNCATE)
    fail_and_notify(LM_ERR_MISMATCH,
                    strfmt("reshard: a message to rank %d was longer than its receive (MPI_ERR_TRUNCATE): "
                           "the ranks ran different reshards (with LM_CHECK=0 no agreement compares "
                           "their arguments first)", world_rank_or_minus1()));
  return rc;
}

void MpiTransport::check(int rc, const char *what) {
  if (rc == MPI_SUCCESS) return;
  try {
    mpi_check(rc, what);
  } catch (const Error &e) {
    fail_and_notify(e.status(), e.message());
  }
}

// A notice from another rank that failed during this transfer.
void MpiTransport::probe_abort() {
  Error e(LM_SUCCESS, "");
  if (!notices_.received(&e)) return;
  drop_pending();
  throw e;
}

// Pending requests of a failed transfer: receives are cancelled (their buffers may be freed),
// sends are left to complete in the background. A collective's request can be neither cancelled
// nor freed (MPI): it is kept for the life of the process. Collectives run only without a
// deadline, so one is left pending only when some rank failed before it joined: it never
// completes, and its communicator (the broken mesh's) carries no collective again.
void MpiTransport::drop_pending() {
  if (!mpi_alive()) return;
  static std::mutex orphans_mu;
  static std::vector<MPI_Request> *orphans = new std::vector<MPI_Request>();  // never freed
  for (size_t i : coll_idx_)
    if (i < reqs_.size() && reqs_[i] != MPI_REQUEST_NULL) {
      std::lock_guard<std::mutex> g(orphans_mu);
      orphans->push_back(reqs_[i]);
      reqs_[i] = MPI_REQUEST_NULL;
    }
  coll_idx_.clear();
  for (auto &q : reqs_) {
    if (q == MPI_REQUEST_NULL) continue;
    MPI_Cancel(&q);
    MPI_Request_free(&q);
  }
}

namespace {
// Whether the host steps of a plan over `comm` may run as MPI collectives (LM_MPI_COLLECTIVES):
// the same answer on every rank (agreed settings, the agreed node answer, the mesh's deadline).
bool mpi_collectives(MPI_Comm comm) {
  const uint64_t mode = setting_u(Setting::MpiCollectives);
  if (mode == kMpiCollOff || transfer_timeout() > 0) return false;
  return mode == kMpiCollOn || node_path_nowhere(comm);
}

// localmap's dtype and op as MPI's (avg adds: the caller divides); none for half floats and bool
// (MPI has no such reduction), for complex max/min/prod, and for 8- and 16-bit integers: Open MPI
// 4.1's vectorised ops (op/avx) add them saturating (uint8 7 + 253 gives 255), where localmap's
// sums wrap like C's.
MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::F32: return MPI_FLOAT;
    case DType::F64: return MPI_DOUBLE;
    case DType::I32: return MPI_INT32_T;
    case DType::I64: return MPI_INT64_T;
    case DType::C64: return MPI_C_FLOAT_COMPLEX;
    case DType::C128: return MPI_C_DOUBLE_COMPLEX;
    default: return MPI_DATATYPE_NULL;
  }
}
MPI_Op mpi_op(DType t, int op) {
  const bool complex = t == DType::C64 || t == DType::C128;
  switch (op) {
    case ew::kSum: case ew::kAvg: return MPI_SUM;
    case ew::kProd: return complex ? MPI_OP_NULL : MPI_PROD;
    case ew::kMax: return complex ? MPI_OP_NULL : MPI_MAX;
    case ew::kMin: return complex ? MPI_OP_NULL : MPI_MIN;
    default: return MPI_OP_NULL;
  }
}
}  // namespace

MpiTransport::MpiTransport(MPI_Comm comm)
    : comm_(comm), notices_(comm), recv_staged_(node_path_nowhere(comm)) {
  int n = 0;
  if (mpi_collectives(comm) && MPI_Comm_size(comm, &n) == MPI_SUCCESS) coll_size_ = n;
}

bool MpiTransport::coll_offers(CollKind k, DType t, int op) const {
  if (!coll_size_) return false;
  switch (k) {
    case CollKind::kAllGather:
    case CollKind::kAllToAll: return true;
    case CollKind::kReduceScatter:
    case CollKind::kAllReduce: return mpi_type(t) != MPI_DATATYPE_NULL && mpi_op(t, op) != MPI_OP_NULL;
    default: return false;
  }
}

// The input MPI is given: MPI_IN_PLACE where an all-reduce or all-to-all has one buffer; a copy
// (kept until reset()) where the input overlaps the output otherwise, as NCCL's in-place forms do
// (MPI forbids aliased buffers and means another thing by in place for the other two).
const void *MpiTransport::coll_input(const CollOp &c) {
  const size_t es = dtype_size(c.dt), n = (size_t)coll_size_;
  size_t in_b = 0, out_b = 0;
  switch (c.kind) {
    case CollKind::kAllGather: in_b = c.bytes, out_b = c.bytes * n; break;
    case CollKind::kAllToAll: in_b = out_b = c.bytes * n; break;
    case CollKind::kReduceScatter: in_b = c.count * es * n, out_b = c.count * es; break;
    default: in_b = out_b = c.count * es; break;
  }
  if (c.in == c.out && (c.kind == CollKind::kAllReduce || c.kind == CollKind::kAllToAll))
    return MPI_IN_PLACE;
  const char *i = static_cast<const char *>(c.in), *o = static_cast<const char *>(c.out);
  if (!(i < o + out_b && o < i + in_b)) return c.in;
  coll_copies_.emplace_back(i, i + in_b);
  return coll_copies_.back().data();
}

// Byte blocks go as MPI_BYTE while they fit an int count, else as contiguous types of 1 MiB (a
// block of a collective the form found even is a multiple of its element size; bytes of a
// collective past 2 GiB per block are rare enough to run as messages: refused here, before MPI).
Transport::Ticket MpiTransport::post_collective(const CollOp &c) {
  if (!coll_offers(c.kind, c.dt, c.op))
    fail(LM_ERR_INTERNAL, "MPI transport: %s of dtype %d op %d is not offered", coll_name(c.kind),
         (int)c.dt, c.op);
  if (transport_fault_here())
    fail_and_notify(LM_ERR_MPI, injected_fault_message("MPI collective"));
  const size_t count = c.kind == CollKind::kAllGather || c.kind == CollKind::kAllToAll ? c.bytes
                                                                                       : c.count;
  if (count > (size_t)INT_MAX)
    fail(LM_ERR_INTERNAL, "MPI transport: a collective block of %zu elements exceeds an int",
         count);
  const int n = (int)count;
  void *out = c.out;
  const void *in = coll_input(c);
  reqs_.push_back(MPI_REQUEST_NULL);
  peers_.push_back(-1);
  coll_idx_.push_back(reqs_.size() - 1);
  MPI_Request *q = &reqs_.back();
  int rc = MPI_SUCCESS;
  const char *what = "";
  switch (c.kind) {
    case CollKind::kAllGather:
      what = "reshard: MPI_Iallgather";
      rc = MPI_Iallgather(in, n, MPI_BYTE, out, n, MPI_BYTE, comm_, q);
      break;
    case CollKind::kAllToAll:
      what = "reshard: MPI_Ialltoall";
      rc = MPI_Ialltoall(in, n, MPI_BYTE, out, n, MPI_BYTE, comm_, q);
      break;
    case CollKind::kReduceScatter:
      what = "reshard: MPI_Ireduce_scatter_block";
      rc = MPI_Ireduce_scatter_block(in, out, n, mpi_type(c.dt), mpi_op(c.dt, c.op), comm_, q);
      break;
    case CollKind::kAllReduce:
      what = "reshard: MPI_Iallreduce";
      rc = MPI_Iallreduce(in, out, n, mpi_type(c.dt), mpi_op(c.dt, c.op), comm_, q);
      break;
    default: break;
  }
  check(rc, what);
  return add_ticket(reqs_.size() - 1, 1);
}

MpiTransport::~MpiTransport() {
  if (!mpi_alive()) return;  // after MPI_Finalize the types are gone with MPI
  drop_pending();
  for (auto &t : types_) MPI_Type_free(&t);
  for (auto &kv : cached_) MPI_Type_free(&kv.second);
}

Transport::Ticket MpiTransport::add_pieces(bool send, char *p, size_t bytes, int peer, int tag) {
  size_t first = reqs_.size();
  for (size_t done = 0; done < bytes || (bytes == 0 && done == 0); done += kMaxPiece) {
    int n = (int)std::min(kMaxPiece, bytes - done);
    if (transport_fault_here())
      fail_and_notify(LM_ERR_MPI, injected_fault_message(send ? "MPI_Isend" : "MPI_Irecv"));
    reqs_.push_back(MPI_REQUEST_NULL);
    peers_.push_back(peer);
    int rc = send ? MPI_Isend(p + done, n, MPI_BYTE, peer, tag, comm_, &reqs_.back())
                  : MPI_Irecv(p + done, n, MPI_BYTE, peer, tag, comm_, &reqs_.back());
    check(rc, send ? "reshard: MPI_Isend" : "reshard: MPI_Irecv");
    if (bytes == 0) break;
  }
  return add_ticket(first, reqs_.size() - first);
}

Transport::Ticket MpiTransport::add_ticket(size_t first, size_t n, int64_t cma) {
  tickets_.emplace_back(first, n);
  ticket_cma_.push_back(cma);
  return (Ticket)tickets_.size() - 1;
}

Transport::Ticket MpiTransport::post_send(const void *p, size_t bytes, int peer, int tag) {
  if (cma_peer(peer, bytes)) return cma_send(p, nullptr, bytes, peer, tag);
  return add_pieces(true, const_cast<char *>(static_cast<const char *>(p)), bytes, peer, tag);
}

Transport::Ticket MpiTransport::post_recv(void *p, size_t bytes, int peer, int tag) {
  if (cma_peer(peer, bytes)) return cma_recv(p, nullptr, bytes, peer, tag);
  return add_pieces(false, static_cast<char *>(p), bytes, peer, tag);
}

namespace {
size_t box_bytes(const BoxRef &b) {
  size_t n = b.esize;
  for (int i = 0; i < b.ndim; ++i) n *= (size_t)b.len[i];
  return n;
}
}  // namespace

// ---- The node-local path (comm/node.hpp finds the peers; transport/node/ copies)
bool MpiTransport::cma_peer(int peer, size_t bytes) {
  if (!blocking_ || bytes < node_local_min_bytes()) return false;  // (before the node lookup)
  if (!node_known_) {
    node_ = node_peers(comm_);
    caps_ = node_caps(comm_);
    node_known_ = true;
  }
  return takes_node_local(node_, peer, bytes);
}

Transport::Ticket MpiTransport::cma_send(const void *buf, const BoxRef *b, size_t bytes, int peer,
                                         int tag) {
  if (transport_fault_here()) fail_and_notify(LM_ERR_MPI, injected_fault_message("MPI_Isend"));
  descs_.emplace_back();
  CmaDesc &d = descs_.back();
  region_describe(d.r, buf, b, bytes);
  return send_desc(d, CmaBuf{const_cast<void *>(buf), b ? b->id : -1, b != nullptr}, peer, tag);
}

// Sends descriptor d (in descs_) and posts the receive of its reply: a node-local send's ticket.
Transport::Ticket MpiTransport::send_desc(const CmaDesc &d, CmaBuf cb, int peer, int tag) {
  descs_.emplace_back();
  CmaDesc &reply = descs_.back();
  size_t first = reqs_.size();
  reqs_.push_back(MPI_REQUEST_NULL);
  peers_.push_back(peer);
  check(MPI_Isend(&d, (int)sizeof d, MPI_BYTE, peer, tag, comm_, &reqs_.back()),
        "reshard: MPI_Isend (node-local descriptor)");
  reqs_.push_back(MPI_REQUEST_NULL);
  peers_.push_back(peer);
  check(MPI_Irecv(&reply, (int)sizeof reply, MPI_BYTE, peer, ack_tag(tag), comm_, &reqs_.back()),
        "reshard: MPI_Irecv (node-local reply)");
  csend_.push_back(CmaSend{first + 1, peer, tag, &d, &reply, cb, 0});
  ++cma_open_;
  return add_ticket(first, 1, -2 - (int64_t)(csend_.size() - 1));
}

Transport::Ticket MpiTransport::cma_recv(void *buf, const BoxRef *b, size_t bytes, int peer,
                                         int tag) {
  descs_.emplace_back();
  CmaDesc &mine = descs_.back();
  region_describe(mine.r, buf, b, bytes);
  mine.kind = kPush;
  std::vector<Run> local;
  region_runs(mine.r, &local);
  return recv_desc(std::move(local), bytes, peer, tag, &mine,
                   CmaBuf{buf, b ? b->id : -1, b != nullptr});
}

// Posts the receive of a node-local message's descriptor; `local`: this side's runs of it, mine:
// its region (NULL where this side always copies), cb: its buffer for bytes over MPI.
Transport::Ticket MpiTransport::recv_desc(std::vector<Run> local, size_t bytes, int peer, int tag,
                                          CmaDesc *mine, CmaBuf cb) {
  if (transport_fault_here()) fail_and_notify(LM_ERR_MPI, injected_fault_message("MPI_Irecv"));
  descs_.emplace_back();
  CmaDesc &in = descs_.back();
  size_t first = reqs_.size();
  reqs_.push_back(MPI_REQUEST_NULL);
  peers_.push_back(peer);
  check(MPI_Irecv(&in, (int)sizeof in, MPI_BYTE, peer, tag, comm_, &reqs_.back()),
        "reshard: MPI_Irecv (node-local descriptor)");
  crecv_.push_back(CmaRecv{first, peer, tag, bytes, &in, mine, std::move(local), cb, 0});
  ++cma_open_;
  return add_ticket(first, 1, (int64_t)crecv_.size() - 1);
}

// Pieces between processes of a node with kernel copies (agreed per node, so both sides answer
// alike): straight between the two buffers (the receiver reads the sender's runs with
// process_vm_readv) when the pieces' rows average at least LM_NODE_DIRECT_MIN_RUN (a page by
// default; the kernel pins the remote side run by run: with shorter runs, 512 bytes for blocks
// of 64 f64, it costs more than packing); else packed by the sender and copied by the receiver straight into its pieces (memcpy from the
// sender's arena, or one kernel copy of a contiguous remote run) when its rows average at least
// 512 bytes; shorter ones are packed and unpacked (thousands of 8-byte iovecs cost more than an
// unpack). bench_scalapack measures them.
constexpr size_t kPiecesMinPlacedRun = 512;
size_t direct_min_run() { return (size_t)setting_u(Setting::NodeDirectMinRun); }

Transport::PiecesMode MpiTransport::pieces_mode(const PiecesRef &p, int peer) {
  const PieceMsg &m = *p.msg;
  if (m.dims.empty() || !cma_peer(peer, m.bytes) || !caps_.kernel) return kPiecesPacked;
  int64_t elems = 0, runs = 0;  // the innermost dim's runs (a strided run: count of them)
  for (const PieceRun &r : m.dims.back()) {
    elems += r.total();
    runs += r.count;
  }
  const size_t bytes = (size_t)elems * p.esize;
  if (bytes >= direct_min_run() * (size_t)runs) return kPiecesDirect;
  return bytes >= kPiecesMinPlacedRun * (size_t)runs ? kPiecesPlaced : kPiecesPacked;
}

Transport::Ticket MpiTransport::post_send_pieces(const void *buf, const PiecesRef &p, int peer,
                                                 int tag) {
  if (transport_fault_here()) fail_and_notify(LM_ERR_MPI, injected_fault_message("MPI_Isend"));
  descs_.emplace_back();
  CmaDesc &d = descs_.back();
  d.kind = kPieces;
  d.r.pid = (int32_t)getpid();
  d.r.addr = (uint64_t)(uintptr_t)buf;
  d.r.bytes = p.msg->bytes;
  d.r.esize = p.esize;
  d.r.ndim = (int32_t)p.msg->dims.size();
  size_t span = p.esize;
  for (int i = 0; i < d.r.ndim; ++i) {
    d.r.shape[i] = p.shape[i];
    span *= (size_t)p.shape[i];
  }
  // In the arena, the receiver reads the runs with memcpy through windows of it (parts_read).
  d.r.arena_off = caps_.mapped ? arena_offset(buf, span) : UINT64_MAX;
  if (d.r.arena_off != UINT64_MAX) d.r.arena = arena_self();
  return send_desc(d, CmaBuf{nullptr, -1, false}, peer, tag);
}

Transport::Ticket MpiTransport::post_recv_pieces(void *buf, const PiecesRef &p, int peer,
                                                 int tag) {
  std::vector<Run> local;
  pieces_runs((uint64_t)(uintptr_t)buf, p.shape, p.esize, *p.msg, false, &local);
  const bool direct = pieces_mode(p, peer) == kPiecesDirect;
  CmaDesc *mine = nullptr;
  if (!direct) {
    // Placed: an ordinary message whose receiver copies into its pieces' runs; never pushed into
    // (the region is not described as in an arena), never wired (copied is the only answer).
    descs_.emplace_back();
    mine = &descs_.back();
    region_describe(mine->r, buf, nullptr, p.msg->bytes);
    mine->r.arena_off = UINT64_MAX;
    mine->r.arena = ArenaId{};
  }
  const Ticket t =
      recv_desc(std::move(local), p.msg->bytes, peer, tag, mine, CmaBuf{buf, -1, false});
  crecv_.back().pieces = direct ? p.msg : nullptr;
  crecv_.back().esize = p.esize;
  return t;
}

void MpiTransport::not_expected(const CmaRecv &r, const char *what) {
  fail_and_notify(LM_ERR_MISMATCH,
                  strfmt("reshard: a node-local message from rank %d is not the %s of %llu bytes "
                         "rank %d's plan expects: the ranks ran different reshards (with "
                         "LM_CHECK=0 no agreement compares their arguments first)",
                         r.peer, what, (unsigned long long)r.bytes, world_rank_or_minus1()));
}

void MpiTransport::reply_done(CmaRecv &r) {
  static const uint32_t done = kDone;
  MPI_Request q;
  check(MPI_Isend(&done, (int)sizeof done, MPI_BYTE, r.peer, ack_tag(r.tag), comm_, &q),
        "reshard: MPI_Isend (node-local reply)");
  MPI_Request_free(&q);  // a static word: nothing to keep alive
  r.state = 2;
  --cma_open_;
}

// A pieces message's descriptor arrived: read the sender's runs into ours, then say so.
void MpiTransport::pieces_copy(CmaRecv &r) {
  const CmaDesc &d = *r.desc;
  if (d.kind != kPieces || d.r.bytes != r.bytes || d.r.esize != r.esize ||
      d.r.ndim != (int32_t)r.pieces->dims.size())
    not_expected(r, "pieces message");
  std::vector<Run> remote;
  pieces_runs(d.r.addr, d.r.shape, (size_t)d.r.esize, *r.pieces, true, &remote);
  std::string why;
  if (d.r.arena_off == UINT64_MAX || !caps_.mapped) {
    why = cma_copy((pid_t)d.r.pid, r.local, remote, false);
  } else {  // the sender's buffer lies in its arena: its runs at their offsets there
    std::vector<PartRun> in_arena(remote.size());
    for (size_t i = 0; i < remote.size(); ++i)
      in_arena[i] = {remote[i].addr, remote[i].bytes, d.r.arena_off + (remote[i].addr - d.r.addr)};
    why = parts_read((pid_t)d.r.pid, d.r.arena, in_arena, r.local, true);
  }
  if (!why.empty()) failed_copy("process_vm_readv", r.bytes, r.peer, why);
  reply_done(r);
}

// ---- Messages of several buffers (grouped rounds)
// Straight between the buffers where kernel copies are allowed (agreed per node) and the runs
// average at least LM_NODE_DIRECT_MIN_RUN, as for pieces: the receiver reads the sender's run
// list, then its runs into its own (memcpy from the sender's arena, one kernel copy for the rest).
bool MpiTransport::parts_direct(size_t bytes, size_t rows, int peer) {
  if (rows == 0 || !cma_peer(peer, bytes) || !caps_.kernel) return false;
  return bytes >= direct_min_run() * rows;
}

// Runs below this outside the arena are copied into the spill buffer when that is in the arena:
// the receiver then reads them with memcpy through a window; the kernel would pin their pages one
// run at a time, which costs more than the extra copy of a short run (bench_group, small mix).
constexpr uint64_t kSpillBelow = 64 << 10;

Transport::Ticket MpiTransport::post_send_parts(const PartsRef &m, int peer, int tag, void *spill,
                                                size_t spill_bytes) {
  if (transport_fault_here()) fail_and_notify(LM_ERR_MPI, injected_fault_message("MPI_Isend"));
  parts_runs_.emplace_back();
  std::vector<PartRun> &runs = parts_runs_.back();
  parts_arena_runs(m.runs, m.n, &runs);
  const uint64_t soff = spill && caps_.mapped ? arena_offset(spill, spill_bytes) : UINT64_MAX;
  uint64_t used = 0;
  for (PartRun &x : runs) {  // each at a 16-byte offset: a receiver may read it as its dtype
    const uint64_t at = (used + 15) / 16 * 16;
    if (soff == UINT64_MAX || x.arena_off != UINT64_MAX || x.bytes >= kSpillBelow ||
        at + x.bytes > spill_bytes)
      continue;
    char *to = static_cast<char *>(spill) + at;
    std::memcpy(to, (const void *)(uintptr_t)x.addr, (size_t)x.bytes);
    x = PartRun{(uint64_t)(uintptr_t)to, x.bytes, soff + at};
    used = at + x.bytes;
  }
  descs_.emplace_back();
  CmaDesc &d = descs_.back();
  d.kind = kParts;
  d.r.pid = (int32_t)getpid();
  for (const PartRun &x : runs)
    if (x.arena_off != UINT64_MAX) d.r.arena = arena_self();
  // The run list after the spilled runs where it fits: the receiver then reads it through its
  // window of this arena (arena_off) instead of with one more process_vm_readv.
  const uint64_t list = runs.size() * sizeof(PartRun), at = (used + 15) / 16 * 16;
  if (soff != UINT64_MAX && at + list <= spill_bytes) {
    std::memcpy(static_cast<char *>(spill) + at, runs.data(), (size_t)list);
    d.r.arena = arena_self();
    d.r.arena_off = soff + at;
  }
  d.r.addr = (uint64_t)(uintptr_t)runs.data();
  d.r.bytes = m.bytes;
  d.r.shape[0] = (int64_t)runs.size();
  return send_desc(d, CmaBuf{nullptr, -1, false}, peer, tag);
}

Transport::Ticket MpiTransport::post_recv_parts(const PartsRef &m, int peer, int tag) {
  const Ticket t = recv_desc(std::vector<Run>(m.runs, m.runs + m.n), m.bytes, peer, tag, nullptr,
                             CmaBuf{nullptr, -1, false});
  crecv_.back().parts = true;
  return t;
}

// A parts message's descriptor arrived: read the sender's run list, then its runs into ours.
void MpiTransport::parts_copy(CmaRecv &r) {
  const CmaDesc &d = *r.desc;
  const int64_t count = d.r.shape[0];
  if (d.kind != kParts || d.r.bytes != r.bytes || count < 0 || (uint64_t)count > r.bytes)
    not_expected(r, "message of several buffers");
  std::vector<PartRun> remote((size_t)count);
  const uint64_t list = (uint64_t)count * sizeof(PartRun);
  const std::vector<Run> into{{(uint64_t)(uintptr_t)remote.data(), list}};
  Region in_arena = d.r;  // the sender's copy of its list in its arena, if it made one
  in_arena.ndim = -1;
  in_arena.bytes = list;
  std::string why;
  if (!caps_.mapped || !mapped_copy(in_arena, into, false))
    why = cma_copy((pid_t)d.r.pid, into, {{d.r.addr, list}}, false);
  if (!why.empty()) failed_copy("process_vm_readv", r.bytes, r.peer, why);
  if (r.hold && caps_.mapped && parts_map(d.r.arena, remote, &r.pins, &r.view)) {
    r.state = 3;  // read where the sender keeps it; answered at parts_release
    return;
  }
  why = parts_read((pid_t)d.r.pid, d.r.arena, remote, r.local, caps_.mapped);
  if (!why.empty()) failed_copy("process_vm_readv", r.bytes, r.peer, why);
  if (r.hold) r.view = r.local;
  reply_done(r);
}

Transport::Ticket MpiTransport::post_recv_parts_held(const PartsRef &m, int peer, int tag) {
  const Ticket t = post_recv_parts(m, peer, tag);
  crecv_.back().hold = true;
  return t;
}

bool MpiTransport::parts_readable(Ticket t, bool block) {
  const auto &r = tickets_[(size_t)t];
  return complete(r.first, r.second, block, ticket_cma_[(size_t)t], true);
}

MpiTransport::CmaRecv &MpiTransport::held(Ticket t) {
  const int64_t c = (size_t)t < ticket_cma_.size() ? ticket_cma_[(size_t)t] : -1;
  if (c < 0 || !crecv_[(size_t)c].hold)
    fail(LM_ERR_INTERNAL, "reshard: ticket %lld is not a held message", (long long)t);
  return crecv_[(size_t)c];
}

const std::vector<Run> &MpiTransport::parts_view(Ticket t) {
  CmaRecv &r = held(t);
  if (r.state < 2) fail(LM_ERR_INTERNAL, "reshard: a held message read before it is readable");
  return r.view;
}

void MpiTransport::parts_release(Ticket t) {
  CmaRecv &r = held(t);
  if (r.state != 3) return;
  r.pins.clear();
  r.view.clear();
  reply_done(r);
}

// The bytes of one side's buffer as one MPI message: a box as its subarray datatype (box_direct
// said it fits), a range as bytes, or above 1 GiB as blocks of 1 GiB and the rest (int counts).
void MpiTransport::wire_post(bool send, const CmaBuf &b, const Region &r, int peer, int tag,
                             MPI_Request *q) {
  MPI_Datatype t = MPI_BYTE;
  int count = (int)r.bytes;
  if (b.is_box) {
    BoxRef box;
    box.ndim = r.ndim;
    box.shape = r.shape;
    box.off = r.off;
    box.len = r.len;
    box.esize = (size_t)r.esize;
    box.id = b.box_id;
    t = subarray(box);
    count = 1;
  } else if (r.bytes > kMaxPiece) {
    MPI_Datatype block;
    mpi_check(MPI_Type_contiguous((int)kMaxPiece, MPI_BYTE, &block), "reshard: MPI_Type_contiguous");
    int lens[2] = {(int)(r.bytes / kMaxPiece), (int)(r.bytes % kMaxPiece)};
    MPI_Aint disp[2] = {0, (MPI_Aint)(r.bytes / kMaxPiece * kMaxPiece)};
    MPI_Datatype types[2] = {block, MPI_BYTE};
    int rc = MPI_Type_create_struct(2, lens, disp, types, &t);
    MPI_Type_free(&block);
    mpi_check(rc, "reshard: MPI_Type_create_struct");
    rc = MPI_Type_commit(&t);
    types_.push_back(t);  // freed by reset()
    mpi_check(rc, "reshard: MPI_Type_commit");
    count = 1;
  }
  check(send ? MPI_Isend(b.p, count, t, peer, tag, comm_, q)
             : MPI_Irecv(b.p, count, t, peer, tag, comm_, q),
        send ? "reshard: MPI_Isend (node-local bytes)" : "reshard: MPI_Irecv (node-local bytes)");
}

void MpiTransport::failed_copy(const char *how, uint64_t bytes, int peer,
                               const std::string &why) {
  fail_and_notify(LM_ERR_MPI, strfmt("reshard: node-local copy (%s) of %llu bytes with rank %d "
                                     "failed on rank %d: %s", how, (unsigned long long)bytes, peer,
                                     world_rank_or_minus1(), why.c_str()));
}

void MpiTransport::pump_cma() {
  // A peer whose earlier message (in this direction) is still waiting: its later ones wait too.
  // One mark per (node peer, direction), valid for this pass (generation counter).
  if (blocked_.size() != 2 * node_.size()) blocked_.assign(2 * node_.size(), 0);
  const uint32_t gen = ++gen_;
  auto slot = [&](int peer, int dir) -> uint32_t & {
    size_t k = (size_t)(std::lower_bound(node_.begin(), node_.end(), peer) - node_.begin());
    return blocked_[2 * k + (size_t)dir];
  };
  for (CmaRecv &r : crecv_)  // (a held one waits for parts_release, not for its peer)
    if (r.state < 2 && slot(r.peer, 0) != gen && !pump_recv(r)) slot(r.peer, 0) = gen;
  for (CmaSend &s : csend_)
    if (s.state != 2 && slot(s.peer, 1) != gen && !pump_send(s)) slot(s.peer, 1) = gen;
}

// A receive: its descriptor arrived -> copy, or ask the sender to write or to send the bytes
// (then receive them, or its empty "pushed" notice, on the notice tag); that arrived -> finished.
bool MpiTransport::pump_recv(CmaRecv &r) {
  int flag = 0;
  check(MPI_Test(&reqs_[r.req], &flag, MPI_STATUS_IGNORE), "reshard: MPI_Test");
  if (!flag) return r.state != 0;  // notices may come in any order
  if (r.state == 1) {  // pushed, or the bytes came
    r.state = 2;
    --cma_open_;
    return true;
  }
  if (r.pieces) {
    pieces_copy(r);
    return true;
  }
  if (r.parts) {
    parts_copy(r);
    return true;
  }
  const CmaDesc &d = *r.desc;
  if (d.kind != kData || d.r.bytes != r.bytes || d.r.ndim > kBoxMaxDims)
    fail_and_notify(LM_ERR_MISMATCH,
                    strfmt("reshard: a node-local message from rank %d has %llu bytes where rank "
                           "%d's plan expects %llu: the ranks ran different reshards (with "
                           "LM_CHECK=0 no agreement compares their arguments first)",
                           r.peer, (unsigned long long)d.r.bytes, world_rank_or_minus1(),
                           (unsigned long long)r.bytes));
  MPI_Request q;
  bool push = false;
  std::string why;
  if (receiver_copy(d.r, r.mine->r, r.local, caps_, &push, &why)) {
    if (!why.empty()) failed_copy("process_vm_readv", r.bytes, r.peer, why);
    reply_done(r);
    return true;
  }
  // The sender writes into our region (mine) and says so, or sends the bytes: either comes on
  // the notice tag, into the buffer (an empty notice writes nothing).
  wire_post(false, r.buf, r.mine->r, r.peer, done_tag(r.tag), &reqs_[r.req]);
  r.mine->kind = push ? kPush : kWire;
  check(MPI_Isend(r.mine, (int)sizeof(CmaDesc), MPI_BYTE, r.peer, ack_tag(r.tag), comm_, &q),
        "reshard: MPI_Isend (node-local reply)");
  MPI_Request_free(&q);  // r.mine lives until reset(), after the sender has read it
  r.state = 1;
  return true;
}

// A send: its reply arrived -> finished, or write into the receiver's region (or send the bytes)
// first; the bytes sent -> finished.
bool MpiTransport::pump_send(CmaSend &s) {
  int flag = 0;
  check(MPI_Test(&reqs_[s.req], &flag, MPI_STATUS_IGNORE), "reshard: MPI_Test");
  if (!flag) return s.state != 0;  // a later message's reply may be read meanwhile
  if (s.state == 0 && s.reply->kind != kDone) {
    pushed_or_wire(s);
    if (s.state == 1) return true;
  }
  s.state = 2;
  --cma_open_;
  return true;
}

// After a kPush or kWire reply: the empty "pushed" notice once written, else the bytes.
void MpiTransport::pushed_or_wire(CmaSend &s) {
  std::string why;
  if (s.reply->kind == kPush) {
    std::vector<Run> mine;
    region_runs(s.sent->r, &mine);
    if (sender_push(mine, s.reply->r, caps_, &why)) {
      if (!why.empty()) failed_copy("process_vm_writev", s.sent->r.bytes, s.peer, why);
      MPI_Request q;
      check(MPI_Isend(nullptr, 0, MPI_BYTE, s.peer, done_tag(s.tag), comm_, &q),
            "reshard: MPI_Isend (node-local notice)");
      MPI_Request_free(&q);
      return;
    }
  }
  wire_post(true, s.buf, s.sent->r, s.peer, done_tag(s.tag), &reqs_[s.req]);
  s.state = 1;
}

// A strided box smaller than LM_DATATYPE_MIN_BYTES is packed. Received where every message of
// the set is an MPI message (no rank has node peers: agreed), a box below
// LM_DATATYPE_RECV_MIN_BYTES is received into staging and unpacked: Open MPI's shared-memory
// transport unpacks a subarray receive in fragments instead of its single copy (S1->S0 at
// 128-512 KiB, np 2: 1.4-1.5x of pack + MPI_Alltoall + unpack through a datatype, 0.8-1.0x
// staged). The answer is the same on every rank for the same box and direction.
bool MpiTransport::box_direct(const BoxRef &b, bool send) const {
  if (!datatypes_enabled()) return false;
  int init = 0;
  MPI_Initialized(&init);
  if (!init) return false;
  size_t n = b.esize;
  for (int i = 0; i < b.ndim; ++i) {
    if (b.shape[i] > INT_MAX) return false;
    n *= (size_t)b.len[i];
  }
  const size_t floor = send || !recv_staged_ ? datatype_min_bytes() : datatype_recv_min_bytes();
  return n >= floor && n <= kMaxPiece && b.esize <= (size_t)INT_MAX;
}

// Describes a non-contiguous box as an MPI subarray of the local buffer; then MPI packs straight
// into its transport buffers (one memory pass fewer than our own staging).
MPI_Datatype MpiTransport::subarray(const BoxRef &b) {
  if (b.id >= 0) {
    auto it = cached_.find(b.id);
    if (it != cached_.end()) return it->second;
  }
  int n = b.ndim;
  int sizes[kBoxMaxDims], subs[kBoxMaxDims], starts[kBoxMaxDims];
  for (int i = 0; i < n; ++i) {
    sizes[i] = (int)b.shape[i];
    subs[i] = (int)b.len[i];
    starts[i] = (int)b.off[i];
  }
  MPI_Datatype elem, t;
  mpi_check(MPI_Type_contiguous((int)b.esize, MPI_BYTE, &elem), "reshard: MPI_Type_contiguous");
  int rc = MPI_Type_create_subarray(n, sizes, subs, starts, MPI_ORDER_C, elem, &t);
  MPI_Type_free(&elem);
  mpi_check(rc, "reshard: MPI_Type_create_subarray");
  rc = MPI_Type_commit(&t);
  if (rc != MPI_SUCCESS) MPI_Type_free(&t);
  mpi_check(rc, "reshard: MPI_Type_commit");
  if (b.id >= 0)
    cached_.emplace(b.id, t);
  else
    types_.push_back(t);
  return t;
}

Transport::Ticket MpiTransport::post_send_box(const void *buf, const BoxRef &b, int peer,
                                              int tag) {
  if (cma_peer(peer, box_bytes(b))) return cma_send(buf, &b, box_bytes(b), peer, tag);
  MPI_Datatype t = subarray(b);
  if (transport_fault_here()) fail_and_notify(LM_ERR_MPI, injected_fault_message("MPI_Isend"));
  reqs_.push_back(MPI_REQUEST_NULL);
  peers_.push_back(peer);
  check(MPI_Isend(buf, 1, t, peer, tag, comm_, &reqs_.back()), "reshard: MPI_Isend");
  return add_ticket(reqs_.size() - 1, 1);
}

Transport::Ticket MpiTransport::post_recv_box(void *buf, const BoxRef &b, int peer, int tag) {
  if (cma_peer(peer, box_bytes(b))) return cma_recv(buf, &b, box_bytes(b), peer, tag);
  MPI_Datatype t = subarray(b);
  if (transport_fault_here()) fail_and_notify(LM_ERR_MPI, injected_fault_message("MPI_Irecv"));
  reqs_.push_back(MPI_REQUEST_NULL);
  peers_.push_back(peer);
  check(MPI_Irecv(buf, 1, t, peer, tag, comm_, &reqs_.back()), "reshard: MPI_Irecv");
  return add_ticket(reqs_.size() - 1, 1);
}

bool MpiTransport::complete(size_t first, size_t n, bool block, int64_t cma, bool held_ok) {
  if (n == 0) return true;
  if (block && transport_fault_here())
    fail_and_notify(LM_ERR_MPI, injected_fault_message("MPI_Waitall"));
  auto ready = [&] {
    if (cma_open_) pump_cma();
    int flag = 0;
    if (statuses_.size() < n) statuses_.resize(n);
    const int rc = MPI_Testall((int)n, reqs_.data() + first, &flag, statuses_.data());
    if (rc != MPI_SUCCESS) check(in_status(rc, n), "reshard: MPI_Testall");
    if (!flag) return false;
    if (cma >= 0) {
      const int st = crecv_[(size_t)cma].state;
      return st == 2 || (held_ok && st == 3);
    }
    if (cma <= -2) return csend_[(size_t)(-2 - cma)].state == 2;
    return true;
  };
  if (!block) {
    bool ok = ready();
    if (!ok && (++polls_ & 15) == 0) probe_abort();
    return ok;
  }
  // Blocking: poll, so that a peer's failure notice or the deadline can end the wait.
  const Deadline deadline;
  const double tmo = deadline.seconds();
  for (unsigned spins = 1;; ++spins) {
    if (ready()) return true;
    if ((spins & 63) != 0) continue;
    probe_abort();
    if (deadline.passed()) {
      std::string who;
      int listed = 0;
      // MPI_Testall frees no request until all are complete: ask each (without freeing it)
      // whether it is, so that only the ranks still awaited are named.
      auto pending = [&](size_t i) {
        int flag = 0;
        return reqs_[i] != MPI_REQUEST_NULL &&
               (MPI_Request_get_status(reqs_[i], &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS || !flag);
      };
      for (size_t i = first; i < first + n; ++i)
        if (listed < 8 && pending(i) && who.find(strfmt(" %d,", peers_[i])) == std::string::npos) {
          who += strfmt(" %d,", peers_[i]);
          ++listed;
        }
      if (!who.empty()) who.pop_back();
      fail_and_notify(LM_ERR_TIMEOUT,
                      strfmt("reshard: no answer within LM_TIMEOUT = %g s on rank %d; waiting for "
                             "rank%s%s of the parent communicator",
                             tmo, world_rank_or_minus1(), listed > 1 ? "s" : "", who.c_str()));
    }
  }
}

bool MpiTransport::done(Ticket t, bool block) {
  const auto &r = tickets_[(size_t)t];
  return complete(r.first, r.second, block, ticket_cma_[(size_t)t]);
}

// Without node-local messages in flight the tickets from `first` on are one range of requests:
// one test (or one wait loop) covers them all.
bool MpiTransport::done_from(Ticket first, bool block) {
  if ((size_t)first >= tickets_.size()) return true;
  if (cma_open_) return Transport::done_from(first, block);
  const size_t r0 = tickets_[(size_t)first].first;
  return complete(r0, reqs_.size() - r0, block);
}

void MpiTransport::reset() {
  drop_pending();  // none after a completed step; those of a failed execution
  coll_idx_.clear();
  coll_copies_.clear();
  reqs_.clear();
  peers_.clear();
  tickets_.clear();
  ticket_cma_.clear();
  descs_.clear();
  parts_runs_.clear();
  crecv_.clear();
  csend_.clear();
  cma_open_ = 0;
  if (!types_.empty() && mpi_alive())
    for (auto &t : types_) MPI_Type_free(&t);
  types_.clear();
}

}  // namespace lm
