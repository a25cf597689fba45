#include "base/options.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <iterator>
#include <limits>

#include "base/error.h"
#include "base/secret.h"

namespace gyre {
namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return (v && *v) ? v : nullptr;
}

long long parseInteger(const char* text, const char* what, long long lo, long long hi) {
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(text, &end, 10);
  if (errno || end == text || *end != '\0' || v < lo || v > hi) {
    fail(ErrorCode::kInvalidArgument, "{}='{}' is not an integer in [{}, {}]", what, text, lo, hi);
  }
  return v;
}

// "60", "0.5": seconds, as a whole number of milliseconds in [lo, hi].
std::chrono::milliseconds parseSeconds(const char* text, const char* what, double lo, double hi) {
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(text, &end);
  if (errno || end == text || *end != '\0' || !(v >= lo && v <= hi)) {
    fail(ErrorCode::kInvalidArgument, "{}='{}' is not a number of seconds in [{}, {}]", what,
         text, lo, hi);
  }
  return std::chrono::milliseconds(static_cast<long long>(v * 1000.0 + 0.5));
}

// The GYRE_ALGO spellings as an error lists them: "auto, ring, tree, rd or hier".
std::string algoChoices() {
  std::string list;
  const size_t n = std::size(kAlgoSpellings);
  for (size_t i = 0; i < n; ++i) {
    list += i == 0 ? "" : (i + 1 == n ? " or " : ", ");
    list += kAlgoSpellings[i].name;
  }
  return list;
}

}  // namespace

size_t parseByteSize(const std::string& text, const char* what) {
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (errno || end == text.c_str() || text[0] == '-') {
    fail(ErrorCode::kInvalidArgument, "{}='{}' is not a byte size (e.g. 4096, 512K, 4M)", what,
         text);
  }
  unsigned shift = 0;
  std::string suffix(end);
  if (suffix == "K" || suffix == "k") shift = 10;
  else if (suffix == "M" || suffix == "m") shift = 20;
  else if (suffix == "G" || suffix == "g") shift = 30;
  else if (!suffix.empty()) {
    fail(ErrorCode::kInvalidArgument, "{}='{}' has an unknown suffix (use K, M or G)", what, text);
  }
  if (v > (std::numeric_limits<size_t>::max() >> shift)) {
    fail(ErrorCode::kInvalidArgument, "{}='{}' is too large", what, text);
  }
  return static_cast<size_t>(v) << shift;
}

std::string secretFromEnvironment() {
  std::string secret;
  if (const char* v = env("GYRE_TOKEN")) secret = v;
  if (const char* v = env("GYRE_TOKEN_FILE")) {
    if (!secret.empty()) {
      fail(ErrorCode::kInvalidArgument,
           "both GYRE_TOKEN and GYRE_TOKEN_FILE are set: give the job's secret one way only");
    }
    secret = readSecretFile(v);
  }
  if (secret.size() > kMaxSecretBytes) {
    fail(ErrorCode::kInvalidArgument, "GYRE_TOKEN holds {} bytes, more than the {} a secret "
         "may have", secret.size(), kMaxSecretBytes);
  }
  return secret;
}

std::string reduceIsaFromEnvironment() {
  const char* v = env("GYRE_REDUCE_ISA");
  if (!v) return "";
  std::string s(v);
  if (s != "auto" && s != "portable" && s != "avx2" && s != "avx512") {
    fail(ErrorCode::kInvalidArgument, "GYRE_REDUCE_ISA='{}': use auto, portable, avx2 or avx512",
         s);
  }
  return s;
}

Options Options::fromEnvironment() {
  Options o;
  if (const char* v = env("GYRE_DEBUG")) {
    std::string s(v);
    if (s == "WARN") o.logLevel = LogLevel::kWarn;
    else if (s == "INFO") o.logLevel = LogLevel::kInfo;
    else if (s == "TRACE") o.logLevel = LogLevel::kTrace;
    else if (s == "ERROR") o.logLevel = LogLevel::kError;
    else fail(ErrorCode::kInvalidArgument, "GYRE_DEBUG='{}': use ERROR, WARN, INFO or TRACE", s);
  }
  if (const char* v = env("GYRE_TIMEOUT")) {
    o.timeout = std::chrono::seconds(parseInteger(v, "GYRE_TIMEOUT", 1, 365LL * 24 * 3600));
  }
  if (const char* v = env("GYRE_STALL_WARN")) {
    o.stallWarn = parseSeconds(v, "GYRE_STALL_WARN", 0.001, 365.0 * 24 * 3600);
  }
  if (const char* v = env("GYRE_SLOT_BYTES"); v && std::string(v) != "auto") {
    o.slotBytes = parseByteSize(v, "GYRE_SLOT_BYTES");
    if (o.slotBytes < 4096 || o.slotBytes > (size_t{1} << 30) || o.slotBytes % 64 != 0) {
      fail(ErrorCode::kInvalidArgument,
           "GYRE_SLOT_BYTES={} must be a multiple of 64 between 4K and 1G", o.slotBytes);
    }
  }
  if (const char* v = env("GYRE_SLOTS")) o.slots = parseInteger(v, "GYRE_SLOTS", 2, 64);
  if (const char* v = env("GYRE_NSOCKS")) {
    o.nsocks = static_cast<int>(parseInteger(v, "GYRE_NSOCKS", 1, 16));
  }
  if (const char* v = env("GYRE_TCP_CONGESTION")) {
    // The kernel's names: at most 15 characters (TCP_CA_NAME_MAX) of [a-z0-9_].
    const std::string s(v);
    const bool wellFormed = !s.empty() && s.size() <= 15 &&
                            std::all_of(s.begin(), s.end(), [](char c) {
                              return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
                            });
    if (!wellFormed) {
      fail(ErrorCode::kInvalidArgument,
           "GYRE_TCP_CONGESTION='{}': want a congestion control's name as the kernel lists it "
           "(cubic, bbr, reno: /proc/sys/net/ipv4/tcp_available_congestion_control)",
           s);
    }
    o.tcpCongestion = s;
  }
  if (const char* v = env("GYRE_TRANSPORT")) {
    std::string s(v);
    bool known = false;
    for (TransportKind k :
         {TransportKind::kAuto, TransportKind::kTcp, TransportKind::kShm, TransportKind::kRdma}) {
      if (s == transportName(k)) {
        o.transport = k;
        known = true;
      }
    }
    if (!known) {
      fail(ErrorCode::kInvalidArgument, "GYRE_TRANSPORT='{}': use auto, tcp, shm or rdma", s);
    }
  }
  if (const char* v = env("GYRE_IB_HCA")) o.ibHca = v;
  if (const char* v = env("GYRE_IB_GID_INDEX")) {
    o.ibGidIndex = static_cast<int>(parseInteger(v, "GYRE_IB_GID_INDEX", 0, 255));
  }
  if (const char* v = env("GYRE_ALGO")) {
    if (!parseAlgo(v, o.algo)) {
      fail(ErrorCode::kInvalidArgument, "GYRE_ALGO='{}': use {}", v, algoChoices());
    }
  }
  if (const char* v = env("GYRE_TRACE_BUFFER")) {
    o.traceBuffer = parseInteger(v, "GYRE_TRACE_BUFFER", 0, 1 << 20);
  }
  if (const char* v = env("GYRE_TRACE_DIR")) o.traceDir = v;
  if (const char* v = env("GYRE_TIMELINE")) o.timeline = v;
  if (const char* v = env("GYRE_SYNC_PRIORITY")) {
    std::string s(v);
    if (s == "auto") o.syncPriority = ThreadPriority::kAuto;
    else if (s == "realtime") o.syncPriority = ThreadPriority::kRealtime;
    else if (s == "nice") o.syncPriority = ThreadPriority::kNice;
    else if (s == "normal") o.syncPriority = ThreadPriority::kNormal;
    else fail(ErrorCode::kInvalidArgument, "GYRE_SYNC_PRIORITY='{}': use auto, realtime, nice or normal", s);
  }
  if (const char* v = env("GYRE_BIND")) {
    std::string s(v);
    if (s == "none") o.bind = CpuBinding::kNone;
    else if (s == "core") o.bind = CpuBinding::kCore;
    else fail(ErrorCode::kInvalidArgument, "GYRE_BIND='{}': use none or core", s);
  }
  if (const char* v = env("GYRE_SOCKET_IFNAME")) o.socketIfname = v;
  o.token = secretFromEnvironment();
  if (const char* v = env("GYRE_ENCRYPT")) {
    o.encrypt = parseInteger(v, "GYRE_ENCRYPT", 0, 1) == 1;
    if (o.encrypt && o.token.empty()) {
      fail(ErrorCode::kInvalidArgument,
           "GYRE_ENCRYPT=1 needs the job's secret to derive its keys: set GYRE_TOKEN_FILE (or "
           "GYRE_TOKEN), or start the job with gyrerun, which makes one");
    }
  }
  if (const char* v = env("GYRE_HOST_ID")) o.hostId = v;
  if (const char* v = env("GYRE_NICS_PER_HOST")) {
    o.nicsPerHost = static_cast<int>(parseInteger(v, "GYRE_NICS_PER_HOST", 1, 1024));
  }
  if (const char* v = env("GYRE_LINK_PROBE")) {
    o.linkProbe = parseInteger(v, "GYRE_LINK_PROBE", 0, 1) == 1;
  }
  o.reduceIsa = reduceIsaFromEnvironment();
  if (const char* v = env("GYRE_JOIN_TIMEOUT")) {
    o.joinTimeout = parseSeconds(v, "GYRE_JOIN_TIMEOUT", 0.1, 365.0 * 24 * 3600);
  }
  if (const char* v = env("GYRE_JOIN_PROGRESS")) {
    std::string s(v);
    size_t comma = s.find(',');
    o.joinProgressFirst = parseSeconds(s.substr(0, comma).c_str(), "GYRE_JOIN_PROGRESS", 0.01,
                                       365.0 * 24 * 3600);
    o.joinProgressEvery = comma == std::string::npos
                              ? o.joinProgressFirst * 6
                              : parseSeconds(s.substr(comma + 1).c_str(), "GYRE_JOIN_PROGRESS",
                                             0.01, 365.0 * 24 * 3600);
  }
  if (const char* v = env("GYRE_SPIN_US")) {
    o.spin = std::chrono::microseconds(parseInteger(v, "GYRE_SPIN_US", 0, 1000000));
  }
  return o;
}

bool parseAlgo(const std::string& text, AllReduceAlgo& algo) {
  for (const AlgoSpelling& k : kAlgoSpellings) {
    if (text == k.name) {
      algo = k.algo;
      return true;
    }
  }
  return false;
}

const char* algoName(AllReduceAlgo algo) {
  for (const AlgoSpelling& k : kAlgoSpellings) {
    if (k.algo == algo) return k.name;
  }
  return "unknown";
}

const char* transportName(TransportKind kind) {
  switch (kind) {
    case TransportKind::kAuto: return "auto";
    case TransportKind::kTcp: return "tcp";
    case TransportKind::kShm: return "shm";
    case TransportKind::kRdma: return "rdma";
  }
  return "unknown";
}

const Options& globalOptions() {
  static const Options options = [] {
    try {
      return Options::fromEnvironment();
    } catch (const Error&) {
      // The communicator reports the bad variable with a proper error; the logger
      // must not throw, so it falls back to defaults.
      return Options{};
    }
  }();
  return options;
}

}  // namespace gyre
