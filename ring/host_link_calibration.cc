#include "ring/host_link_calibration.h"

#include <chrono>
#include <cstdlib>
#include <string>

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
                         end ? "+" : "-" + human(b / 2), algoName(current));
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
                                bool allShm, bool intraShm) {
  const TwoLevelCost fixed = twoLevelCost(intraShm);
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
      value = fmt::format("{:.3f}", rank == initiator ? r.alphaUs : r.bytesPerUs);
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
  const double alpha = parsed(store.getString("probe/alpha"));
  const double rate = parsed(store.getString("probe/rate"));
  const TwoLevelCost cost = twoLevelCost(intraShm, alpha, rate);
  if (rank == 0) {
    log(LogLevel::kInfo, rank,
        "host links ({}) {} between ranks {} and {}: alpha {:.1f} us, {:.0f} MB/s{}; auto's "
        "all-reduce: {}",
        topology.describe(), cost.measured ? "measured" : "NOT measured", initiator, responder,
        cost.inter.alphaUs, cost.inter.bytesPerUs, cost.measured ? "" : " (fixed constants)",
        bands(options, topology, allShm, cost));
  }
  return cost;
}

}  // namespace gyre
