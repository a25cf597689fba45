#include "ring/options.h"

#include <algorithm>
#include <string>

#include "base/error.h"

namespace gyre {

// Every variable in one pass, in a fixed order (where two are malformed, the first here
// is the one reported).
Options Options::fromEnvironment() {
  Options o;
  static_cast<BaseOptions&>(o) = baseOptionsFromEnvironment();  // GYRE_DEBUG, GYRE_TIMELINE
  if (const char* v = settingText("GYRE_TIMEOUT")) {
    o.timeout = std::chrono::seconds(parseIntegerSetting(v, "GYRE_TIMEOUT", 1, 365LL * 24 * 3600));
  }
  if (const char* v = settingText("GYRE_STALL_WARN")) {
    o.stallWarn = parseSecondsSetting(v, "GYRE_STALL_WARN", 0.001, 365.0 * 24 * 3600);
  }
  if (const char* v = settingText("GYRE_SLOT_BYTES"); v && std::string(v) != "auto") {
    o.slotBytes = parseByteSize(v, "GYRE_SLOT_BYTES");
    if (o.slotBytes < 4096 || o.slotBytes > (size_t{1} << 30) || o.slotBytes % 64 != 0) {
      fail(ErrorCode::kInvalidArgument,
           "GYRE_SLOT_BYTES={} must be a multiple of 64 between 4K and 1G", o.slotBytes);
    }
  }
  if (const char* v = settingText("GYRE_SLOTS")) {
    o.slots = parseIntegerSetting(v, "GYRE_SLOTS", 2, 64);
  }
  if (const char* v = settingText("GYRE_NSOCKS")) {
    o.nsocks = static_cast<int>(parseIntegerSetting(v, "GYRE_NSOCKS", 1, 16));
  }
  if (const char* v = settingText("GYRE_TCP_CONGESTION")) {
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
  if (const char* v = settingText("GYRE_TRANSPORT")) {
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
  if (const char* v = settingText("GYRE_IB_HCA")) o.ibHca = v;
  if (const char* v = settingText("GYRE_IB_GID_INDEX")) {
    o.ibGidIndex = static_cast<int>(parseIntegerSetting(v, "GYRE_IB_GID_INDEX", 0, 255));
  }
  if (const char* v = settingText("GYRE_ALGO")) {
    if (!parseAlgo(v, o.algo)) {
      fail(ErrorCode::kInvalidArgument, "GYRE_ALGO='{}': use {}", v, algoChoices());
    }
  }
  if (const char* v = settingText("GYRE_TRACE_BUFFER")) {
    o.traceBuffer = parseIntegerSetting(v, "GYRE_TRACE_BUFFER", 0, 1 << 20);
  }
  if (const char* v = settingText("GYRE_TRACE_DIR")) o.traceDir = v;
  if (const char* v = settingText("GYRE_SYNC_PRIORITY")) {
    std::string s(v);
    if (s == "auto") o.syncPriority = ThreadPriority::kAuto;
    else if (s == "realtime") o.syncPriority = ThreadPriority::kRealtime;
    else if (s == "nice") o.syncPriority = ThreadPriority::kNice;
    else if (s == "normal") o.syncPriority = ThreadPriority::kNormal;
    else fail(ErrorCode::kInvalidArgument,
              "GYRE_SYNC_PRIORITY='{}': use auto, realtime, nice or normal", s);
  }
  if (const char* v = settingText("GYRE_CUDA_IPC")) {
    o.cudaIpc = parseIntegerSetting(v, "GYRE_CUDA_IPC", 0, 1) == 1;
  }
  if (const char* v = settingText("GYRE_CONNECT")) {
    const std::string s(v);
    if (s == "lazy") o.connect = ConnectMode::kLazy;
    else if (s == "eager") o.connect = ConnectMode::kEager;
    else fail(ErrorCode::kInvalidArgument, "GYRE_CONNECT='{}': use lazy or eager", s);
  }
  if (const char* v = settingText("GYRE_BIND")) {
    std::string s(v);
    if (s == "none") o.bind = CpuBinding::kNone;
    else if (s == "core") o.bind = CpuBinding::kCore;
    else fail(ErrorCode::kInvalidArgument, "GYRE_BIND='{}': use none or core", s);
  }
  if (const char* v = settingText("GYRE_SOCKET_IFNAME")) o.socketIfname = v;
  o.token = secretFromEnvironment();
  if (const char* v = settingText("GYRE_ENCRYPT")) {
    o.encrypt = parseIntegerSetting(v, "GYRE_ENCRYPT", 0, 1) == 1;
    if (o.encrypt && o.token.empty()) {
      fail(ErrorCode::kInvalidArgument,
           "GYRE_ENCRYPT=1 needs the job's secret to derive its keys: set GYRE_TOKEN_FILE (or "
           "GYRE_TOKEN), or start the job with gyrerun, which makes one");
    }
  }
  if (const char* v = settingText("GYRE_HOST_ID")) o.hostId = v;
  if (const char* v = settingText("GYRE_NICS_PER_HOST")) {
    o.nicsPerHost = static_cast<int>(parseIntegerSetting(v, "GYRE_NICS_PER_HOST", 1, 1024));
  }
  if (const char* v = settingText("GYRE_LINK_PROBE")) {
    o.linkProbe = parseIntegerSetting(v, "GYRE_LINK_PROBE", 0, 1) == 1;
  }
  o.reduceIsa = reduceIsaFromEnvironment();
  if (const char* v = settingText("GYRE_JOIN_TIMEOUT")) {
    o.joinTimeout = parseSecondsSetting(v, "GYRE_JOIN_TIMEOUT", 0.1, 365.0 * 24 * 3600);
  }
  if (const char* v = settingText("GYRE_JOIN_PROGRESS")) {
    std::string s(v);
    size_t comma = s.find(',');
    o.joinProgressFirst = parseSecondsSetting(s.substr(0, comma).c_str(), "GYRE_JOIN_PROGRESS",
                                              0.01, 365.0 * 24 * 3600);
    o.joinProgressEvery =
        comma == std::string::npos
            ? o.joinProgressFirst * 6
            : parseSecondsSetting(s.substr(comma + 1).c_str(), "GYRE_JOIN_PROGRESS", 0.01,
                                  365.0 * 24 * 3600);
  }
  if (const char* v = settingText("GYRE_SPIN_US")) {
    o.spin = std::chrono::microseconds(parseIntegerSetting(v, "GYRE_SPIN_US", 0, 1000000));
  }
  return o;
}

}  // namespace gyre
