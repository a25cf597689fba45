#include "base/options.h"

#include <cerrno>
#include <cstdlib>
#include <limits>

#include "base/error.h"

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
  if (const char* v = env("GYRE_SLOT_BYTES")) {
    o.slotBytes = parseByteSize(v, "GYRE_SLOT_BYTES");
    if (o.slotBytes < 4096 || o.slotBytes > (size_t{1} << 30) || o.slotBytes % 64 != 0) {
      fail(ErrorCode::kInvalidArgument,
           "GYRE_SLOT_BYTES={} must be a multiple of 64 between 4K and 1G", o.slotBytes);
    }
  }
  if (const char* v = env("GYRE_SLOTS")) o.slots = parseInteger(v, "GYRE_SLOTS", 2, 64);
  if (const char* v = env("GYRE_TRANSPORT")) {
    std::string s(v);
    if (s == "auto") o.transport = TransportKind::kAuto;
    else if (s == "tcp") o.transport = TransportKind::kTcp;
    else if (s == "shm") o.transport = TransportKind::kShm;
    else if (s == "rdma") o.transport = TransportKind::kRdma;
    else fail(ErrorCode::kInvalidArgument, "GYRE_TRANSPORT='{}': use auto, tcp, shm or rdma", s);
  }
  if (const char* v = env("GYRE_IB_HCA")) o.ibHca = v;
  if (const char* v = env("GYRE_REQUIRE_RDMA")) o.requireRdma = std::string(v) == "1";
  if (const char* v = env("GYRE_IB_GID_INDEX")) {
    o.ibGidIndex = static_cast<int>(parseInteger(v, "GYRE_IB_GID_INDEX", 0, 255));
  }
  if (const char* v = env("GYRE_ALGO")) {
    if (!parseAlgoKind(v, o.algo)) {
      fail(ErrorCode::kInvalidArgument, "GYRE_ALGO='{}': use auto, ring, tree or rd", v);
    }
  }
  if (const char* v = env("GYRE_SYNC_PRIORITY")) {
    std::string s(v);
    if (s == "auto") o.syncPriority = ThreadPriority::kAuto;
    else if (s == "realtime") o.syncPriority = ThreadPriority::kRealtime;
    else if (s == "nice") o.syncPriority = ThreadPriority::kNice;
    else if (s == "normal") o.syncPriority = ThreadPriority::kNormal;
    else fail(ErrorCode::kInvalidArgument, "GYRE_SYNC_PRIORITY='{}': use auto, realtime, nice or normal", s);
  }
  if (const char* v = env("GYRE_SOCKET_IFNAME")) o.socketIfname = v;
  if (const char* v = env("GYRE_TOKEN")) o.token = v;
  if (const char* v = env("GYRE_HOST_ID")) o.hostId = v;
  if (const char* v = env("GYRE_REDUCE_ISA")) o.reduceIsa = v;
  if (const char* v = env("GYRE_SPIN_US")) {
    o.spin = std::chrono::microseconds(parseInteger(v, "GYRE_SPIN_US", 0, 1000000));
  }
  return o;
}

bool parseAlgoKind(const std::string& text, AlgoKind& algo) {
  for (AlgoKind k : {AlgoKind::kAuto, AlgoKind::kRing, AlgoKind::kTree,
                     AlgoKind::kRecursiveDoubling}) {
    if (text == algoKindName(k)) {
      algo = k;
      return true;
    }
  }
  return false;
}

const char* algoKindName(AlgoKind algo) {
  switch (algo) {
    case AlgoKind::kAuto: return "auto";
    case AlgoKind::kRing: return "ring";
    case AlgoKind::kTree: return "tree";
    case AlgoKind::kRecursiveDoubling: return "rd";
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
