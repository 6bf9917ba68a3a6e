// SPDX-License-Identifier: BSD-3-Clause
// The MPI transport: host memory, point-to-point messages on the plan's communicator.
//   - contiguous byte ranges are sent/received in place (split into pieces of at most 1 GiB:
//     MPI counts are int);
//   - a non-contiguous box is moved in place as an MPI subarray datatype when datatypes are on
//     (LM_RESHARD_DATATYPES, default 1), its extents fit in int, it is at most 1 GiB and at least
//     LM_DATATYPE_MIN_BYTES (32 KiB: below, our own pack is cheaper than the datatype engine);
//     otherwise box_direct() says no and the executor stages it;
//   - node-local peers (comm/node.hpp, the provider of transport/node/): in a blocking execution, a
//     message of at least LM_NODE_LOCAL_MIN_BYTES to a rank on this node that can map or read
//     this one's memory travels as a small descriptor (pid, address, box geometry, arena); the
//     receiver copies the bytes straight from the sender's buffer into its own (memcpy through a
//     window of the sender's arena, or process_vm_readv: one copy) and acknowledges, which
//     completes the send; or it lets the sender write, or asks for the bytes over MPI (below).
//     Both sides decide from the same (peer, size, mode) that a message takes this protocol, and
//     the receiver alone decides the rest and says so; messages of one pair and tag keep their
//     order (receivers handle a peer's messages in posting order).
//   - collectives (post_collective: MPI_Iallgather, MPI_Ireduce_scatter_block, MPI_Iallreduce,
//     MPI_Ialltoall) for the steps plan/collective.hpp finds even, where LM_MPI_COLLECTIVES asks
//     (1; auto: where no rank of the set has node peers; 0, the default: never, being slower)
//     and calls have no deadline: a collective request cannot be cancelled, so one left behind
//     by a failure stays pending, and one a late rank completed after the others gave up at
//     their deadline would write into buffers they freed. Same decision on every rank (agreed
//     settings, the agreed node answer, the mesh's agreed deadline).
// complete() is the single place where the transport tests or waits for requests.
#pragma once

#include <mpi.h>

#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "localmap.h"
#include "layout/boxcopy.hpp"
#include "transport/failure.hpp"
#include "transport/node/node_local.hpp"
#include "transport/transport.hpp"

namespace lm {

class MpiTransport : public Transport {
 public:
  explicit MpiTransport(MPI_Comm comm);
  ~MpiTransport() override;
  const char *name() const override { return "mpi"; }

  Ticket post_send(const void *p, size_t bytes, int peer, int tag) override;
  Ticket post_recv(void *p, size_t bytes, int peer, int tag) override;
  bool box_direct(const BoxRef &b, bool send = true) const override;
  Ticket post_send_box(const void *buf, const BoxRef &b, int peer, int tag) override;
  Ticket post_recv_box(void *buf, const BoxRef &b, int peer, int tag) override;
  PiecesMode pieces_mode(const PiecesRef &p, int peer) override;
  Ticket post_send_pieces(const void *buf, const PiecesRef &p, int peer, int tag) override;
  Ticket post_recv_pieces(void *buf, const PiecesRef &p, int peer, int tag) override;
  bool parts_direct(size_t bytes, size_t rows, int peer) override;
  Ticket post_send_parts(const PartsRef &m, int peer, int tag, void *spill,
                         size_t spill_bytes) override;
  Ticket post_recv_parts(const PartsRef &m, int peer, int tag) override;
  bool parts_holds() const override { return caps_.mapped; }
  Ticket post_recv_parts_held(const PartsRef &m, int peer, int tag) override;
  bool parts_readable(Ticket t, bool block) override;
  const std::vector<Run> &parts_view(Ticket t) override;
  void parts_release(Ticket t) override;
  bool done(Ticket t, bool block) override;
  bool done_from(Ticket first, bool block) override;
  Ticket posted() const override { return (Ticket)tickets_.size(); }
  void reset() override;
  void begin_execution(bool blocking) override { blocking_ = blocking; }
  int coll_size() const override { return coll_size_; }
  int coll_rank(int peer) const override { return peer >= 0 && peer < coll_size_ ? peer : -1; }
  bool coll_offers(CollKind k, DType t, int op) const override;
  Ticket post_collective(const CollOp &c) override;

 private:
  // Tests (block = false) or waits for requests [first, first + n), and for node-local message
  // `cma` (ticket_cma_) to finish (held_ok: or to be held); true when all complete. Every
  // completion goes through here.
  bool complete(size_t first, size_t n, bool block, int64_t cma = -1, bool held_ok = false);
  // Failure handling (transport/failure.hpp): a failing rank tells every other rank of the
  // communicator before it throws, so that none waits for it; waits poll for such a notice and
  // for the deadline of the call.
  [[noreturn]] void fail_and_notify(lm_status_t st, const std::string &msg);
  void check(int rc, const char *what);
  int in_status(int rc, size_t n);
  void probe_abort();
  void drop_pending();
  Ticket add_pieces(bool send, char *p, size_t bytes, int peer, int tag);
  Ticket add_ticket(size_t first, size_t n, int64_t cma = -1);
  MPI_Datatype subarray(const BoxRef &b);
  const void *coll_input(const CollOp &c);

  // ---- The node-local path
  // One message: the sender posts a kData descriptor (where its bytes are) and a receive of the
  // reply. The receiver, holding both sides' geometry, decides (transport/node/node_local.hpp,
  // receiver_copy): it copies itself and replies kDone; or it replies kPush with its own geometry
  // (the sender writes into its buffer, through a window of its arena or the kernel) or kWire, and
  // posts a receive of its buffer from the sender on the notice tag. After a push the sender sends
  // an empty notice there; when it cannot push, and on kWire, it sends the bytes themselves. So
  // the receiver picks the form and tells the sender: the two never disagree, whatever each side
  // can map.
  // A direct pieces message (post_*_pieces) sends kPieces instead of kData: its Region holds the
  // sender's buffer (address and extents), whose runs the receiver finds in its own copy of the
  // message (pieces_runs); the receiver always copies them (kernel copies: pieces_mode). A placed
  // one is an ordinary kData message whose receiver copies into its pieces' runs.
  // A message of several buffers (post_*_parts) sends kParts: its Region's addr is the sender's
  // list of byte runs (a PartRun array of shape[0] entries, kept in parts_runs_ until reset()),
  // which the receiver reads first, then the runs themselves into its own: memcpy through windows
  // of the sender's arena (Region::arena) for the runs in it, one kernel copy for the rest. The
  // sender also copies the list into its spill buffer when that lies in its arena (Region's
  // arena_off: the copy's offset), so the receiver reads it through a window; else with one
  // kernel copy.
  enum : uint32_t { kData = 0, kDone = 1, kPush = 2, kWire = 3, kPieces = 4, kParts = 5 };
  struct CmaDesc {
    uint32_t kind = kData;
    Region r;  // transport/node/node_local.hpp
  };
  // This side's buffer, for the bytes over MPI when nobody copies them (a box's geometry is
  // its Region's).
  struct CmaBuf {
    void *p;
    int64_t box_id;    // BoxRef::id
    bool is_box;
  };
  struct CmaRecv {
    size_t req;        // the descriptor's receive in reqs_; then the notice's (or the bytes')
    int peer, tag;
    uint64_t bytes;    // what this rank expects
    const CmaDesc *desc;
    CmaDesc *mine;     // this side's geometry (sent back with kPush)
    std::vector<Run> local;
    CmaBuf buf;
    int state;         // 0 waiting for the descriptor, 1 for the notice or the bytes, 2 done,
                       // 3 held: readable in view, not yet answered (post_recv_parts_held)
    const PieceMsg *pieces = nullptr;  // a pieces message (local: this side's runs)
    size_t esize = 0;
    bool parts = false;                // a message of several buffers (local: their runs)
    bool hold = false;                 // held (parts): read where the sender keeps it
    std::vector<PeerView> pins{};      // held: the sender's windows, pinned until released
    std::vector<Run> view{};           // held: the message's bytes, readable here, in order
  };
  struct CmaSend {
    size_t req;        // the reply's receive in reqs_; then the bytes' send
    int peer, tag;
    const CmaDesc *sent;
    CmaDesc *reply;
    CmaBuf buf;
    int state;         // 0 waiting for the reply, 1 sending the bytes, 2 done
  };
  bool cma_peer(int peer, size_t bytes);
  Ticket cma_send(const void *buf, const BoxRef *b, size_t bytes, int peer, int tag);
  Ticket cma_recv(void *buf, const BoxRef *b, size_t bytes, int peer, int tag);
  Ticket send_desc(const CmaDesc &d, CmaBuf cb, int peer, int tag);
  // Moves every node-local message whose next message arrived (a peer's in posting order, per
  // direction) and answers it; runs in every test and wait, so that no rank waits on a peer that
  // is itself waiting.
  void pump_cma();
  // One receive (one send) of pump_cma: false when it must wait (its peer's later ones wait too).
  bool pump_recv(CmaRecv &r);
  bool pump_send(CmaSend &s);
  Ticket recv_desc(std::vector<Run> local, size_t bytes, int peer, int tag, CmaDesc *mine,
                   CmaBuf cb);
  void pieces_copy(CmaRecv &r);
  void parts_copy(CmaRecv &r);
  CmaRecv &held(Ticket t);  // a held message's receive (post_recv_parts_held)
  void reply_done(CmaRecv &r);  // the receiver copied: tells the sender, finishes r
  [[noreturn]] void not_expected(const CmaRecv &r, const char *what);
  void pushed_or_wire(CmaSend &s);
  // Posts the bytes of buffer b (region r) over MPI on `tag` (a send or a receive) into *q.
  void wire_post(bool send, const CmaBuf &b, const Region &r, int peer, int tag, MPI_Request *q);
  [[noreturn]] void failed_copy(const char *how, uint64_t bytes, int peer, const std::string &why);

  MPI_Comm comm_;
  AbortNotices notices_;
  bool recv_staged_ = false;      // no rank of comm_'s set has node peers: box_direct's receive floor
  int coll_size_ = 0;             // ranks of comm_ when collectives are on, else 0
  std::vector<size_t> coll_idx_;  // requests (in reqs_) of collectives: never cancelled
  std::deque<std::vector<char>> coll_copies_;  // inputs copied apart from their outputs
  std::vector<MPI_Request> reqs_;
  std::vector<MPI_Status> statuses_;  // of the last MPI_Testall (reused)
  std::vector<int> peers_;  // peer of each request (for deadline messages)
  unsigned polls_ = 0;
  std::vector<std::pair<size_t, size_t>> tickets_;  // first request, count
  std::vector<MPI_Datatype> types_;                 // committed by this step, freed by reset()
  std::unordered_map<int64_t, MPI_Datatype> cached_;  // by BoxRef::id, freed with the transport
  // Per ticket: >= 0 its node-local receive, <= -2 its node-local send (-2 - index), -1 none.
  std::vector<int64_t> ticket_cma_;

  bool blocking_ = false;              // this execution (begin_execution)
  bool node_known_ = false;
  std::vector<int> node_;              // ranks of comm_ read directly (sorted)
  NodeCaps caps_;                      // what they can do (agreed per node)
  std::deque<CmaDesc> descs_;          // every descriptor of this step (stable addresses)
  std::deque<std::vector<PartRun>> parts_runs_;  // the runs of this step's kParts sends
  std::vector<CmaRecv> crecv_;
  std::vector<CmaSend> csend_;
  size_t cma_open_ = 0;                // node-local messages not finished yet
  std::vector<uint32_t> blocked_;      // pump_cma's marks per (node peer, direction)
  uint32_t gen_ = 0;
};

}  // namespace lm
