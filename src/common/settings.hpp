// SPDX-License-Identifier: BSD-3-Clause
// Every setting the library reads from the environment, in one table (settings.cpp): name, type,
// default, bounds, audience, and whether every rank must agree on it. Each is read and parsed
// once per process, on first use, by one parser per type:
//   bytes    a whole number with an optional binary suffix, case-insensitive: K KB KiB, M MB MiB,
//            G GB GiB, T TB TiB (all powers of 1024), e.g. 64M, 512KiB; then clamped to bounds
//            (one warning on stderr names the variable, its value and the value used);
//   bool     0/1, true/false, yes/no, on/off (case-insensitive);
//   seconds  a number >= 0 (0 = off);  int  a whole number within bounds;  choice  one of a list;
//   text     anything (the test hooks parse their own syntax).
// A value that cannot be read is refused: one warning on stderr names the variable and the
// default used instead (no call is failing, so there is no status to return).
//
// "Must agree": a setting that changes which collectives run or how bytes travel (the node-local
// path, the agreement board, staging and datatype floors, the device transport) must have the same
// value on every rank of a process set. Ranks read their own environment (Open MPI forwards a
// shell's variables to remote nodes only when asked), so the library checks: the first agreement
// of every process set compares them (comm/agree.cpp, settings_agree) and every rank's
// lm_mesh_create fails with LM_ERR_MISMATCH naming the variable and the ranks' values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace lm {

enum class Setting : int {
  // must agree (the order is the order of the agreement's words)
  NodeLocal,           // LM_NODE_LOCAL
  NodeLocalMinBytes,   // LM_NODE_LOCAL_MIN_BYTES
  AgreeBoard,          // LM_AGREE_BOARD
  BoardExchangeBytes,  // LM_BOARD_EXCHANGE_BYTES
  StagingBytes,        // LM_STAGING_BYTES
  DatatypeMinBytes,    // LM_DATATYPE_MIN_BYTES
  DatatypeRecvMinBytes,  // LM_DATATYPE_RECV_MIN_BYTES
  ReshardDatatypes,    // LM_RESHARD_DATATYPES
  Transport,           // LM_TRANSPORT
  TestNodes,           // LM_TEST_NODES (a test hook, but how ranks group into nodes must agree)
  NodeDirectMinRun,    // LM_NODE_DIRECT_MIN_RUN
  NcclCollectives,     // LM_NCCL_COLLECTIVES
  MpiCollectives,      // LM_MPI_COLLECTIVES
  AgreeMessages,       // LM_AGREE_MESSAGES
  MessageExchangeBytes,  // LM_MESSAGE_EXCHANGE_BYTES
  // per process
  Check,               // LM_CHECK (agreed by mesh creation: the highest wins)
  Timeout,             // LM_TIMEOUT (agreed likewise)
  NcclTimeout,         // LM_NCCL_TIMEOUT
  PoolBytes,           // LM_POOL_BYTES
  NodeArenaBytes,      // LM_NODE_ARENA_BYTES
  NodeArenaMinBytes,   // LM_NODE_ARENA_MIN_BYTES
  NodePeerMapBytes,    // LM_NODE_PEER_MAP_BYTES
  PlanKeepBuffers,     // LM_PLAN_KEEP_BUFFERS
  PadInPlaceMinRun,    // LM_PAD_IN_PLACE_MIN_RUN
  DeviceComponent,     // LM_DEVICE_COMPONENT
  // test hooks
  Fault,               // LM_FAULT
  NcclFaultInitRank,   // LM_NCCL_FAULT_INIT_RANK
  Count
};
constexpr int kSettingCount = (int)Setting::Count;
constexpr int kMustAgreeCount = (int)Setting::Check;  // the settings before Check

enum class SettingType { Bytes, Bool, Seconds, Int, Choice, Text };
enum class Audience { User, Expert, Test };

// LM_TRANSPORT's choices (the device transport).
enum : uint64_t { kTransportAuto = 0, kTransportMpi = 1 };
// LM_MPI_COLLECTIVES' choices (host steps as MPI collectives: transport/mpi/mpi.hpp).
enum : uint64_t { kMpiCollAuto = 0, kMpiCollOff = 1, kMpiCollOn = 2 };

// The default of the size floors of one-node exchanges (LM_NODE_LOCAL_MIN_BYTES,
// LM_DATATYPE_MIN_BYTES) and of LM_BOARD_EXCHANGE_BYTES: the measured
// crossover between 8 and 32 KiB per message (docs/PERFORMANCE.md, "Where the defaults come from").
constexpr uint64_t kNodeLocalDefaultMin = uint64_t(32) << 10;

struct SettingInfo {
  const char *name;
  SettingType type;
  const char *dflt;      // the default as text (parsed by the type's parser)
  bool must_agree;
  Audience audience;
  uint64_t lo, hi;       // bounds (Bytes: clamped; Int: refused outside)
  const char *choices;   // Choice: "auto|nccl|mpi" (the value is the index)
  const char *doc;       // one line
};

struct SettingValue {
  uint64_t u = 0;        // Bytes, Bool (0/1), Int (as two's complement), Choice (index)
  double d = 0;          // Seconds
  std::string text;      // Text; the raw value for every type when from_env
  bool from_env = false; // set (and valid) in the environment; false: the default
  bool clamped = false;  // Bytes: the value read lay outside the bounds (u is the bound)
};

const SettingInfo &setting_info(Setting s);
// The value in force (parsed on first use of any setting, warnings printed then). Thread-safe.
const SettingValue &setting(Setting s);
inline uint64_t setting_u(Setting s) { return setting(s).u; }
inline bool setting_on(Setting s) { return setting(s).u != 0; }
inline double setting_seconds(Setting s) { return setting(s).d; }
inline int64_t setting_int(Setting s) { return (int64_t)setting(s).u; }
// "1 (environment)" / "32768 (default)" for messages and lm-info.
std::string setting_text(Setting s);
// A value `u` of setting s (not Seconds or Text) as text: "1", "32768", "mpi".
std::string setting_format(Setting s, uint64_t u);

// The parsers (false: refused, *out untouched).
bool parse_bytes(const char *s, uint64_t *out);
bool parse_bool(const char *s, bool *out);
bool parse_seconds(const char *s, double *out);
bool parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out);
// Parses `raw` as setting s would (bounds and clamping included); false when refused.
bool parse_setting(Setting s, const char *raw, SettingValue *out);

}  // namespace lm
