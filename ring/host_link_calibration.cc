#include "ring/host_link_calibration.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "base/error.h"
#include "base/log.h"
#include "collectives/link_probe.h"

namespace gyre {
namespace {

// "8 B-32 KiB rd, 64 KiB-1 MiB tree, 2 MiB+ hier": auto's all-reduce pick at each power
// of two from 8 B to 1 GiB, runs of one pick merged.
std::string bands(const Options& options, const HostTopology& t, bool allShm,
                  const TwoLevelCost& cost) {
  auto human = [](size_t b) {
    if (b >= (1u << 30)) return fmt::format("{} GiB", b >> 30);
    if (b >= (1u << 20)) return fmt::format("{} MiB", b >> 20);
    if (b >= (1u << 10)) return fmt::format("{} KiB", b >> 10);
    return fmt::format("{} B", b);
  };
  std::string out;
  size_t start = 8;
  AllReduceAlgo current = chooseForTopology(options, start, t, allShm, cost);
  for (size_t b = 16;; b *= 2) {
    const bool end = b > (size_t{1} << 30);
    const AllReduceAlgo a = end ? current : chooseForTopology(options, b, t, allShm, cost);
    if (end || a != current) {
      out += fmt::format("{}{}{} {}", out.empty() ? "" : ", ", human(start),
                         end ? std::string("+") : fmt::format("-{}", human(b / 2)),
                         algoName(current));
      if (end) break;
      start = b;
      current = a;
    }
  }
  return out;
}

double parsed(const std::string& s) { return s == "none" ? 0 : std::strtod(s.c_str(), nullptr); }

}  // namespace

TwoLevelCost calibrateHostLinks(Store& store, const PrimitiveContext& base, const PeerPipes& pipes,
                                const HostTopology& topology, int rank, const Options& options,
                                bool allShm, bool intraShm,
                                const std::function<void()>& checkOthers) {
  const TwoLevelCost fixed = twoLevelCost(intraShm, options.nicsPerHost);
  if (topology.hostCount() < 2) return fixed;
  if (options.algo != AllReduceAlgo::kAuto || !options.linkProbe) {
    if (rank == 0) {
      log(LogLevel::kInfo, rank, "host links not probed ({}): fixed inter-host constants",
          options.linkProbe ? "GYRE_ALGO is forced" : "GYRE_LINK_PROBE=0");
    }
    return fixed;
  }
  const int initiator = topology.hosts[0].front();
  const int responder = topology.hosts[1].front();
  const char* key = nullptr;
  if (rank == initiator || rank == responder) {
    std::string value = "none";
    const auto start = std::chrono::steady_clock::now();
    try {
      const LinkProbeResult r = probeLink(base, pipes, rank, initiator, responder);
      value = rank == initiator ? fmt::format("{:.3f} {:.3f}", r.alphaUs, r.streamBytesPerUs)
                                : fmt::format("{:.3f}", r.bytesPerUs);
    } catch (const Error& e) {
      log(LogLevel::kWarn, rank,
          "host link probe with rank {} failed, using the fixed "
          "constants: {}",
          rank == initiator ? responder : initiator, e.what());
    }
    key = rank == initiator ? "probe/alpha" : "probe/rate";
    store.setString(key, value);
    log(LogLevel::kTrace, rank, "host link probe: {} = {} ({:.1f} ms)", key, value,
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count());
  }
  // Bounded well below GYRE_TIMEOUT: a leader that died mid-probe must not hold the
  // others for half an hour. A rank that gives up uses the fixed constants; should that
  // make it choose differently, the algorithm in every tag turns it into a kMismatch.
  const auto deadline =
      std::chrono::steady_clock::now() +
      std::min<std::chrono::milliseconds>(options.timeout, std::chrono::seconds(30));
  while (!store.check({"probe/alpha", "probe/rate"})) {
    checkOthers();
    if (std::chrono::steady_clock::now() > deadline) {
      log(LogLevel::kWarn, rank,
          "host link probe of ranks {} and {} not published in time; "
          "using the fixed constants",
          initiator, responder);
      return fixed;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  // "alpha streamRate" from the initiator, the slope from the responder; the smaller
  // rate (link_probe.h says why).
  const std::string init = store.getString("probe/alpha");
  double alpha = 0;
  double streamRate = 0;
  if (init == "none" || std::sscanf(init.c_str(), "%lf %lf", &alpha, &streamRate) != 2) {
    alpha = streamRate = 0;
  }
  const double slope = parsed(store.getString("probe/rate"));
  const double rate = slope > 0 && streamRate > 0 ? std::min(slope, streamRate) : 0;
  const TwoLevelCost cost = twoLevelCost(intraShm, alpha, rate, options.nicsPerHost);
  if (rank == 0) {
    log(LogLevel::kInfo, rank,
        "host links ({}) {} between ranks {} and {}: alpha {:.1f} us, {:.0f} MB/s{}, {} NIC{} "
        "a host (GYRE_NICS_PER_HOST); auto's all-reduce: {}",
        topology.describe(), cost.measured ? "measured" : "NOT measured", initiator, responder,
        cost.inter.alphaUs, cost.inter.bytesPerUs, cost.measured ? "" : " (fixed constants)",
        cost.nicsPerHost, cost.nicsPerHost == 1 ? "" : "s", bands(options, topology, allShm, cost));
  }
  return cost;
}

}  // namespace gyre
