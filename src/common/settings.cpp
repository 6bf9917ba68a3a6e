// SPDX-License-Identifier: BSD-3-Clause
#include "common/settings.hpp"

#include <cctype>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace lm {

namespace {

constexpr uint64_t KiB = 1024, MiB = KiB << 10, GiB = MiB << 10;
constexpr uint64_t kMax = UINT64_MAX;

// The table. Order = enum Setting.
const SettingInfo kTable[kSettingCount] = {
    {"LM_NODE_LOCAL", SettingType::Bool, "1", true, Audience::Expert, 0, 1, nullptr,
     "one-copy exchanges between ranks of one node (memory mapping, process_vm_readv)"},
    {"LM_NODE_LOCAL_MIN_BYTES", SettingType::Bytes, "32K", true, Audience::Expert, 1, kMax,
     nullptr, "smallest message that takes the node-local path"},
    {"LM_AGREE_BOARD", SettingType::Bool, "1", true, Audience::Expert, 0, 1, nullptr,
     "agreements through shared memory when every rank of a set is on one node"},
    {"LM_BOARD_EXCHANGE_BYTES", SettingType::Bytes, "32K", true, Audience::Expert, 0, MiB,
     nullptr, "per rank: small one-node plans move their data inside the agreement round (0: off)"},
    {"LM_STAGING_BYTES", SettingType::Bytes, "64M", true, Audience::User, 256, GiB, nullptr,
     "staging bound of one reshard step (memory a reshard may use beyond its target)"},
    {"LM_DATATYPE_MIN_BYTES", SettingType::Bytes, "32K", true, Audience::Expert, 0, kMax, nullptr,
     "smallest strided box sent as an MPI subarray datatype (smaller ones are packed)"},
    {"LM_DATATYPE_RECV_MIN_BYTES", SettingType::Bytes, "512K", true, Audience::Expert, 0, kMax,
     nullptr, "where no rank of a set copies another's memory directly: smallest strided box "
     "received as an MPI subarray datatype (smaller ones are received into staging and unpacked)"},
    {"LM_RESHARD_DATATYPES", SettingType::Bool, "1", true, Audience::Expert, 0, 1, nullptr,
     "MPI subarray datatypes for strided boxes (0: always pack)"},
    {"LM_TRANSPORT", SettingType::Choice, "auto", true, Audience::User, 0, 0, "auto|mpi",
     "device data: auto (NCCL where every rank has its own GPU) or mpi (staged through host)"},
    {"LM_TEST_NODES", SettingType::Int, "0", true, Audience::Test, 0, 4096, nullptr,
     "k > 1: split one machine's ranks into k simulated nodes (world rank r on node r % k)"},
    {"LM_NODE_DIRECT_MIN_RUN", SettingType::Bytes, "4K", true, Audience::Expert, 1, kMax, nullptr,
     "node-local block-cyclic pieces and grouped messages whose runs average this many bytes move "
     "straight between the two buffers (shorter ones are packed)"},
    {"LM_NCCL_COLLECTIVES", SettingType::Bool, "1", true, Audience::Expert, 0, 1, nullptr,
     "device steps whose blocks are even run as one NCCL collective (all-gather, reduce-scatter, "
     "all-reduce, all-to-all); 0: grouped ncclSend/ncclRecv always"},
    {"LM_MPI_COLLECTIVES", SettingType::Choice, "0", true, Audience::Expert, 0, 0, "auto|0|1",
     "1: host steps whose blocks are even run as one MPI collective (all-gather, reduce-scatter, "
     "all-reduce, all-to-all); auto: only where no rank of the set copies another's memory "
     "directly (ranks alone on their nodes, or LM_NODE_LOCAL=0); 0: messages (measured faster "
     "with Open MPI 4.1); never in calls with a deadline (LM_TIMEOUT)"},
    {"LM_AGREE_MESSAGES", SettingType::Int, "16", true, Audience::Expert, 0, 4096, nullptr,
     "sets of 2 to this many ranks that share no agreement board agree by one message to each "
     "peer instead of an allreduce (0: allreduce always)"},
    {"LM_MESSAGE_EXCHANGE_BYTES", SettingType::Bytes, "32K", true, Audience::Expert, 0, MiB,
     nullptr, "per rank: small plans on a set that agrees by messages move their data inside "
     "those messages (0: off)"},
    {"LM_CHECK", SettingType::Int, "1", false, Audience::User, 0, 2, nullptr,
     "argument checks: 0 local only, 1 agreed across ranks, 2 also data invariants"},
    {"LM_TIMEOUT", SettingType::Seconds, "0", false, Audience::User, 0, 0, nullptr,
     "deadline in seconds of every collective call (0: wait for ever)"},
    {"LM_NCCL_TIMEOUT", SettingType::Seconds, "300", false, Audience::User, 0, 0, nullptr,
     "deadline in seconds of NCCL communicator creation, enqueuing and teardown (LM_TIMEOUT, "
     "when earlier, bounds the first two)"},
    {"LM_POOL_BYTES", SettingType::Bytes, "1G", false, Audience::User, 0, kMax, nullptr,
     "bytes of freed buffers the buffer pool keeps for reuse (0: none)"},
    {"LM_NODE_ARENA_BYTES", SettingType::Bytes, "256G", false, Audience::Expert, 0, kMax, nullptr,
     "bound of the shared arena (default: physical memory, at most 256G; mapped as used; 0: off)"},
    {"LM_NODE_ARENA_MIN_BYTES", SettingType::Bytes, "4K", false, Audience::Expert, 1, kMax,
     nullptr, "smallest pool buffer placed in the shared arena"},
    {"LM_NODE_PEER_MAP_BYTES", SettingType::Bytes, "4G", false, Audience::Expert, 4096, kMax,
     nullptr, "address space of node peers' arena windows kept mapped (least recently used out)"},
    {"LM_PLAN_KEEP_BUFFERS", SettingType::Bool, "0", false, Audience::Expert, 0, 1, nullptr,
     "persistent plans keep staging and intermediate buffers between executions"},
    {"LM_PAD_IN_PLACE_MIN_RUN", SettingType::Bytes, "1K", false, Audience::Expert, 1, kMax,
     nullptr, "a padded target a reduce-scatter or Partial fill writes is written row by row in "
     "place where its rows are this long (shorter: through a compact copy of the shard)"},
    {"LM_DEVICE_COMPONENT", SettingType::Text, "", false, Audience::User, 0, 0, nullptr,
     "path of the device component to load (default: liblocalmap-cuda.so.<major> beside "
     "liblocalmap, else on the library search path)"},
    {"LM_FAULT", SettingType::Text, "", false, Audience::Test, 0, 0, nullptr,
     "kind:rank=R:nth=N[,...] makes the N-th alloc or transport call fail"},
    {"LM_NCCL_FAULT_INIT_RANK", SettingType::Int, "-1", false, Audience::Test, (uint64_t)-1,
     INT_MAX, nullptr, "this communicator rank reports a failed NCCL init"},
};

std::string strfmt_g(double d) {
  char b[64];
  std::snprintf(b, sizeof b, "%g", d);
  return b;
}

bool ieq(const char *a, const char *b) {
  for (; *a && *b; ++a, ++b)
    if (std::tolower((unsigned char)*a) != std::tolower((unsigned char)*b)) return false;
  return *a == *b;
}

// Index of `s` in "a|b|c", or -1.
int choice_index(const char *choices, const char *s) {
  int i = 0;
  for (const char *p = choices;; ++i) {
    const char *bar = std::strchr(p, '|');
    size_t n = bar ? (size_t)(bar - p) : std::strlen(p);
    if (std::strlen(s) == n && std::strncmp(p, s, n) == 0) return i;
    if (!bar) return -1;
    p = bar + 1;
  }
}

struct Values {
  SettingValue v[kSettingCount];
  Values() {
    for (int i = 0; i < kSettingCount; ++i) {
      const SettingInfo &info = kTable[i];
      if (!parse_setting((Setting)i, info.dflt, &v[i]))
        std::fprintf(stderr, "localmap: bad default of %s (a bug)\n", info.name);
      v[i].from_env = false;
      const char *raw = std::getenv(info.name);
      if (!raw || !*raw) continue;
      SettingValue x;
      if (parse_setting((Setting)i, raw, &x)) {
        x.from_env = true;
        v[i] = x;
        if (x.clamped)
          std::fprintf(stderr, "localmap: %s=%s is outside [%llu, %llu]; using %llu\n", info.name,
                       raw, (unsigned long long)info.lo, (unsigned long long)info.hi,
                       (unsigned long long)x.u);
      } else {
        std::fprintf(stderr, "localmap: %s=%s is not %s; using the default %s\n", info.name, raw,
                     describe_type(info).c_str(), info.dflt[0] ? info.dflt : "(empty)");
      }
    }
  }
  static std::string describe_type(const SettingInfo &i) {
    char b[128];
    switch (i.type) {
      case SettingType::Bytes: return "a byte count (a whole number, optionally K, M, G or T)";
      case SettingType::Bool: return "a boolean (0/1, true/false, yes/no, on/off)";
      case SettingType::Seconds: return "a number of seconds >= 0";
      case SettingType::Int:
        std::snprintf(b, sizeof b, "a whole number in [%lld, %lld]", (long long)(int64_t)i.lo,
                      (long long)(int64_t)i.hi);
        return b;
      case SettingType::Choice: return std::string("one of ") + i.choices;
      case SettingType::Text: return "text";
    }
    return "?";
  }
};

const Values &values() {
  static const Values v;  // thread-safe initialisation, once per process
  return v;
}

}  // namespace

bool parse_bytes(const char *s, uint64_t *out) {
  if (!s || !*s || !std::isdigit((unsigned char)s[0])) return false;
  char *end = nullptr;
  errno = 0;
  unsigned long long x = std::strtoull(s, &end, 10);
  if (errno == ERANGE) return false;
  uint64_t mul = 1;
  if (*end) {
    const char *u = end;
    switch (std::tolower((unsigned char)*u)) {
      case 'k': mul = KiB; break;
      case 'm': mul = MiB; break;
      case 'g': mul = GiB; break;
      case 't': mul = GiB << 10; break;
      default: return false;
    }
    ++u;
    if (*u == 'i' || *u == 'I') {
      ++u;
      if (*u != 'b' && *u != 'B') return false;
    }
    if (*u == 'b' || *u == 'B') ++u;
    if (*u) return false;
  }
  if (x > UINT64_MAX / mul) return false;
  *out = (uint64_t)x * mul;
  return true;
}

bool parse_bool(const char *s, bool *out) {
  if (!s) return false;
  static const char *on[] = {"1", "true", "yes", "on"}, *off[] = {"0", "false", "no", "off"};
  for (const char *w : on)
    if (ieq(s, w)) return *out = true, true;
  for (const char *w : off)
    if (ieq(s, w)) return *out = false, true;
  return false;
}

bool parse_seconds(const char *s, double *out) {
  if (!s || !*s) return false;
  char *end = nullptr;
  double v = std::strtod(s, &end);
  if (end == s || *end != '\0' || !(v >= 0) || v > 1e9) return false;  // !(v >= 0): NaN too
  *out = v;
  return true;
}

bool parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out) {
  if (!s || !*s) return false;
  const char *p = s[0] == '-' ? s + 1 : s;
  if (!*p || (p[0] == '0' && p[1])) return false;  // no leading zeros ("01")
  for (const char *q = p; *q; ++q)
    if (!std::isdigit((unsigned char)*q)) return false;
  errno = 0;
  long long v = std::strtoll(s, nullptr, 10);
  if (errno == ERANGE || v < lo || v > hi) return false;
  *out = v;
  return true;
}

bool parse_setting(Setting s, const char *raw, SettingValue *out) {
  const SettingInfo &i = kTable[(int)s];
  SettingValue v;
  v.text = raw ? raw : "";
  switch (i.type) {
    case SettingType::Bytes:
      if (!parse_bytes(raw, &v.u)) return false;
      v.clamped = v.u < i.lo || v.u > i.hi;
      v.u = v.u < i.lo ? i.lo : v.u > i.hi ? i.hi : v.u;
      break;
    case SettingType::Bool: {
      bool b = false;
      if (!parse_bool(raw, &b)) return false;
      v.u = b;
      break;
    }
    case SettingType::Seconds:
      if (!parse_seconds(raw, &v.d)) return false;
      break;
    case SettingType::Int: {
      int64_t x = 0;
      if (!parse_int(raw, (int64_t)i.lo, (int64_t)i.hi, &x)) return false;
      v.u = (uint64_t)x;
      break;
    }
    case SettingType::Choice: {
      int k = choice_index(i.choices, raw ? raw : "");
      if (k < 0) return false;
      v.u = (uint64_t)k;
      break;
    }
    case SettingType::Text:
      break;
  }
  *out = v;
  return true;
}

const SettingInfo &setting_info(Setting s) { return kTable[(int)s]; }

const SettingValue &setting(Setting s) { return values().v[(int)s]; }

std::string setting_format(Setting s, uint64_t u) {
  const SettingInfo &i = kTable[(int)s];
  char b[96];
  if (i.type == SettingType::Choice) {
    const char *p = i.choices;
    for (uint64_t k = 0; k < u && std::strchr(p, '|'); ++k) p = std::strchr(p, '|') + 1;
    const char *bar = std::strchr(p, '|');
    std::snprintf(b, sizeof b, "%.*s", bar ? (int)(bar - p) : (int)std::strlen(p), p);
  } else if (i.type == SettingType::Int) {
    std::snprintf(b, sizeof b, "%lld", (long long)(int64_t)u);
  } else {
    std::snprintf(b, sizeof b, "%llu", (unsigned long long)u);
  }
  return b;
}

std::string setting_text(Setting s) {
  const SettingInfo &i = kTable[(int)s];
  const SettingValue &v = setting(s);
  std::string t;
  if (i.type == SettingType::Seconds)
    t = strfmt_g(v.d);
  else if (i.type == SettingType::Text)
    t = "\"" + v.text + "\"";
  else
    t = setting_format(s, v.u);
  return t + (v.from_env ? " (environment)" : " (default)");
}

}  // namespace lm
