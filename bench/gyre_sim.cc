// gyre-sim: gyre-bench's table, predicted for a cluster that is not there.
//
//   gyre-sim --hosts 128 --ranks-per-host 8 --link 100gbit [--oversub 2] allreduce -b 8 -e 1G -f 2
//   GYRE_ALGO=tree gyre-sim --hosts 4 --ranks-per-host 8 --link 25gbit -b 1M -e 64M
//   gyre-sim --hosts 32 --ranks-per-host 8 --compare-algos -b 8 -e 256M -f 4
//
// Every rank of the cluster runs gyre's own schedules (collectives/, unchanged) over
// simulated pipes on a virtual clock (sim/sim_world.h), without payload; the time of a
// row is when the last rank finished. The cluster flags: bench/sim_options.h; what runs:
// gyre-bench's flags. Output: gyre-bench's header comments and table (bench/results_table.h),
// in place = out of place (the model charges nothing for the local copy an out-of-place
// call makes), #wrong N/A; all-reduce adds `# auto: ...` with auto's pick per size.
// --compare-algos prints `compare:` lines instead. Exit 0; 2 for a wrong command line,
// 1 for an error (a deadlock names the waiting ranks).
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "base/error.h"
#include "base/version.h"
#include "bench/bench_collectives.h"
#include "bench/bench_options.h"
#include "bench/compare_sequence.h"
#include "bench/results_table.h"
#include "bench/sim_options.h"
#include "collectives/collective_table.h"
#include "collectives/topology_choice.h"
#include "ring/options.h"
#include "sim/sim_world.h"

namespace gyre::bench {
namespace {

std::optional<CollectiveKind> kindOf(CollectiveId id) {
  switch (id) {
    case CollectiveId::kAllReduce:
      return CollectiveKind::kAllReduce;
    case CollectiveId::kAllGather:
      return CollectiveKind::kAllGather;
    case CollectiveId::kBroadcast:
      return CollectiveKind::kBroadcast;
    case CollectiveId::kReduce:
      return CollectiveKind::kReduce;
    case CollectiveId::kReduceScatter:
      return CollectiveKind::kReduceScatter;
    case CollectiveId::kAllToAll:
      return CollectiveKind::kAllToAll;
    case CollectiveId::kSendRecv:
      return std::nullopt;
  }
  return std::nullopt;
}

// Runs one sweep point without payload; seconds per op as predicted.
struct Point {
  double seconds;
  uint8_t algo;
};

Point simulate(sim::SimWorld& world, const CollectiveInfo& c, const Layout& l, DataType t,
               ReduceOp op, int root, bool timing) {
  CollectiveCall call;
  call.kind = *kindOf(c.id);
  call.dtype = t;
  call.op = op;
  call.count = l.count;
  call.root = c.rooted ? root : -1;
  sim::NoPayloadBuffers none(std::max(l.sendElems, l.recvElems) * dtypeSize(t));
  const auto start = std::chrono::steady_clock::now();
  sim::SimResult r = world.run(call, [&](int) -> std::pair<const void*, void*> {
    return {none.send(), none.recv()};
  });
  if (timing) {
    const std::chrono::duration<double> wall = std::chrono::steady_clock::now() - start;
    std::fprintf(stderr, "gyre-sim: %s %zu B on %d ranks (algo %d): simulated in %.2f s\n", c.name,
                 l.bytes, world.size(), r.algo, wall.count());
  }
  return {r.micros / 1e6, r.algo};
}

// Which gyre's schedules made the prediction, under every header.
void printVersion() {
  std::printf("# gyre-sim: version %s, commit %s\n", version(), versionCommit());
}

const char* algoLabel(uint8_t algo) {
  return algo ? algoName(static_cast<AllReduceAlgo>(algo)) : "flat";
}

void printHeader(const sim::SimWorld& w, const BenchOptions& o, const CollectiveInfo& c) {
  std::printf("# Collective test starting: gyre-sim %s\n", c.name);
  std::printf(
      "# nThread 1 nGpus 1 minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: 0 iters: 1 "
      "agg iters: 1 validation: 0 graph: 0\n",
      o.minBytes, o.maxBytes, o.stepFactor > 1 ? o.stepFactor : o.stepBytes,
      o.stepFactor > 1 ? "factor" : "bytes");
  const CollectiveOptions& g = w.options().gyre;
  std::printf("# gyre-sim: predicted, not measured: %d ranks, algo %s, slots %zu x %zu B\n",
              w.size(), algoName(g.algo), g.slots, w.slotBytes());
  std::printf("# gyre-sim: %s\n", w.options().network.describe().c_str());
  printVersion();
  std::printf(
      "# gyre-sim: the model's inter-host cost as the link probe would measure it: "
      "alpha %.1f us, %.0f MB/s; %d NIC%s a host (GYRE_NICS_PER_HOST)\n",
      w.cost().inter.alphaUs, w.cost().inter.bytesPerUs, w.cost().nicsPerHost,
      w.cost().nicsPerHost == 1 ? "" : "s");
  std::printf("#\n");
  printColumnHeads();
}

void runTable(sim::SimWorld& w, const BenchOptions& o, const CollectiveInfo& c, bool timing) {
  printHeader(w, o, c);
  const int n = w.size();
  const std::vector<ReduceOp> ops = c.reduces ? o.ops : std::vector<ReduceOp>{ReduceOp::kSum};
  BusBwSum busBw;
  std::string picks;
  for (DataType t : o.dtypes) {
    for (ReduceOp op : ops) {
      for (size_t size : sweepSizes(o)) {
        const Layout l = layoutFor(c, size, dtypeSize(t), n);
        const Point p = simulate(w, c, l, t, op, o.root, timing);
        RowGroup groups[2];
        groups[0] = {c.outOfPlace, p.seconds, std::nullopt};
        groups[1] = {c.inPlace, p.seconds, std::nullopt};
        printRow(tableRow(c, l, t, op, o.root, n, groups, busBw));
        picks += std::string(picks.empty() ? "" : ", ") + std::to_string(l.bytes) + " " +
                 algoLabel(p.algo);
      }
    }
  }
  printTrailer(std::nullopt, busBw);
  std::printf("# %s ran (by size in bytes): %s\n#\n", c.name, picks.c_str());
}

// --picks: what auto chooses per size on this cluster (the cost model only).
int runPicks(sim::SimWorld& w, const BenchOptions& o) {
  const DataType t = o.dtypes.front();
  w.setAlgo(AllReduceAlgo::kAuto);
  for (size_t size : sweepSizes(o)) {
    const Layout l = layoutFor(allCollectives()[0], size, dtypeSize(t), w.size());
    CollectiveCall call;
    call.count = l.count;
    call.dtype = t;
    // The model's own predictions beside the pick, to set against --compare-algos'
    // simulated times: every algorithm of the table that fits (rd a slot, hier the hosts).
    const AllReducePlace place{l.bytes, w.size(), w.options().gyre.smallestSlotBytes(),
                               &w.topology()};
    std::string model;
    for (const AllReduceRow* a : kAllReduceAlgorithms) {
      if (!a->fits(place)) continue;
      model += fmt::format(" model_{}_us={:.1f}", algoName(a->algo),
                           a->predict(l.bytes, w.topology(), w.cost()));
    }
    std::printf("pick: bytes=%zu ranks=%d algo=%s%s\n", l.bytes, w.size(),
                algoLabel(w.algorithmFor(call)), model.c_str());
  }
  return 0;
}

int runCompare(sim::SimWorld& w, const BenchOptions& o, bool timing) {
  const CollectiveInfo& c = allCollectives()[0];  // all_reduce
  const DataType t = o.dtypes.front();
  const ReduceOp op = o.ops.front();
  const int n = w.size();
  std::printf("# gyre-sim --compare-algos: %d ranks, %s\n", n,
              w.options().network.describe().c_str());
  printVersion();
  double worst = 0;
  size_t worstBytes = 0;
  for (size_t size : sweepSizes(o)) {
    const Layout l = layoutFor(c, size, dtypeSize(t), n);
    std::string line = "compare: bytes=" + std::to_string(l.bytes) + " ranks=" + std::to_string(n);
    double best = 0;
    std::vector<std::pair<uint8_t, double>> times;
    for (const AllReduceRow* row : kAllReduceAlgorithms) {
      const AllReduceAlgo a = row->algo;
      w.setAlgo(a);
      CollectiveCall call;
      call.count = l.count;
      call.dtype = t;
      if (w.algorithmFor(call) != static_cast<uint8_t>(a)) continue;  // rd too large, one host
      const Point p = simulate(w, c, l, t, op, o.root, timing);
      times.emplace_back(static_cast<uint8_t>(a), p.seconds * 1e6);
      line += std::string(" ") + algoName(a) + "_us=" + fmt::format("{:.2f}", p.seconds * 1e6);
      best = best == 0 ? p.seconds * 1e6 : std::min(best, p.seconds * 1e6);
    }
    w.setAlgo(AllReduceAlgo::kAuto);
    CollectiveCall call;
    call.count = l.count;
    call.dtype = t;
    const uint8_t pick = w.algorithmFor(call);
    double autoUs = 0;
    for (auto& [a, us] : times) {
      if (a == pick) autoUs = us;
    }
    const double ratio = best > 0 ? autoUs / best : 1;
    if (ratio > worst) {
      worst = ratio;
      worstBytes = l.bytes;
    }
    line += fmt::format(" auto_us={:.2f} auto_algo={} auto/best={:.3f}", autoUs, algoLabel(pick),
                        ratio);
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  }
  std::printf("compare: worst auto/best=%.3f at bytes=%zu\n", worst, worstBytes);
  return 0;
}

// --as-bench R: gyre-bench --compare-algos' own sequence (bench/compare_algos.cc) on the
// simulated cluster, the links' token buckets carried from call to call: per size, -w
// warm-up ops per contender (ring, tree, hier, auto: each a communicator with that
// GYRE_ALGO), then R rounds in which each contender, in turn from a start that rotates
// by round, runs a barrier and a burst of -n/R ops; a contender's time is the median over
// rounds of its burst's time per op. On shaped links that is what decides how much of a
// bucket a burst finds (docs/simulator.md, "Validation").
int runBenchSequence(sim::SimWorld& w, const BenchOptions& o, int rounds) {
  const CollectiveInfo& c = allCollectives()[0];  // all_reduce
  const DataType t = o.dtypes.front();
  const int n = w.size();
  const int burst = compareBurst(o.iters, rounds);
  std::printf("# gyre-sim --compare-algos --as-bench %d: %d ranks, %s; -w %d, %d rounds of %d "
              "ops, as gyre-bench --compare-algos\n",
              rounds, n, w.options().network.describe().c_str(), o.warmup, rounds, burst);
  printVersion();
  bool fresh = true;
  for (size_t size : sweepSizes(o)) {
    const Layout l = layoutFor(c, size, dtypeSize(t), n);
    sim::NoPayloadBuffers none(std::max(l.sendElems, l.recvElems) * dtypeSize(t));
    auto buffers = [&](int) -> std::pair<const void*, void*> {
      return {none.send(), none.recv()};
    };
    CollectiveCall op;
    op.count = l.count;
    op.dtype = t;
    CollectiveCall barrier;
    barrier.kind = CollectiveKind::kBarrier;
    auto runOne = [&](const CollectiveCall& call) {
      const double us = w.runNext(call, buffers, fresh).micros;
      fresh = false;
      return us;
    };
    for (AllReduceAlgo a : kCompareKinds) {
      w.setAlgo(a);
      for (int i = 0; i < o.warmup; ++i) runOne(op);
    }
    std::array<std::vector<double>, kCompareAlgos> perRound;
    for (int r = 0; r < rounds; ++r) {
      for (size_t k = 0; k < kCompareAlgos; ++k) {
        const size_t a = compareTurn(static_cast<size_t>(r), k);
        w.setAlgo(kCompareKinds[a]);
        runOne(barrier);
        double total = 0;
        for (int i = 0; i < burst; ++i) total += runOne(op);
        perRound[a].push_back(total / burst);
      }
    }
    std::string line = fmt::format("compare: bytes={} ranks={}", l.bytes, n);
    std::array<double, kCompareAlgos> us{};
    for (size_t a = 0; a < kCompareAlgos; ++a) {
      us[a] = median(perRound[a]);
      line += fmt::format(" {}_us={:.2f}", kCompareLabels[a], us[a]);
    }
    w.setAlgo(AllReduceAlgo::kAuto);
    const double best = *std::min_element(us.begin(), us.begin() + kCompareAuto);
    line += fmt::format(" auto_algo={} auto/best={:.3f}", algoLabel(w.algorithmFor(op)),
                        best > 0 ? us[kCompareAuto] / best : 1.0);
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace gyre::bench

int main(int argc, char** argv) {
  using namespace gyre;
  bench::SimCommandLine cl;
  bench::BenchOptions options;
  try {
    cl = bench::parseSimCommandLine(argc, argv);
    std::vector<char*> rest;
    for (std::string& a : cl.benchArgs) rest.push_back(a.data());
    if (cl.help || cl.version ||
        !bench::parseOptions(static_cast<int>(rest.size()), rest.data(), options)) {
      if (cl.version || options.version) {
        std::printf("%s\n", versionLine("gyre-sim").c_str());
      } else {
        std::fputs(bench::kSimUsage, stdout);
      }
      return 0;
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "gyre-sim: %s\n\n%s", e.what(), bench::kSimUsage);
    return 2;
  }
  try {
    sim::SimOptions so;
    so.network = cl.network;
    so.gyre = Options::fromEnvironment();
    if (options.algo) so.gyre.algo = *options.algo;
    // The cost model is told the cluster's NIC layout, as a user sets GYRE_NICS_PER_HOST
    // on it; an explicit GYRE_NICS_PER_HOST (what auto does when told otherwise) wins.
    if (std::getenv("GYRE_NICS_PER_HOST") == nullptr) {
      so.gyre.nicsPerHost = cl.network.nicPerRank
                                ? *std::max_element(cl.network.hostSizes.begin(),
                                                    cl.network.hostSizes.end())
                                : 1;
    }
    so.payload = false;
    so.callsBefore = cl.callsBefore;
    sim::SimWorld world(so);
    if (cl.picksOnly) return bench::runPicks(world, options);
    if (cl.compareAlgos && cl.asBenchRounds > 0) {
      return bench::runBenchSequence(world, options, cl.asBenchRounds);
    }
    if (cl.compareAlgos) return bench::runCompare(world, options, cl.timing);
    for (const bench::CollectiveInfo* c : options.collectives) {
      if (!bench::kindOf(c->id)) {
        std::printf("# %s: not simulated (point to point)\n#\n", c->name);
        continue;
      }
      if (c->id == bench::CollectiveId::kAllToAll && world.size() > so.allPairsMaxRanks) {
        std::printf("# %s: not simulated above %d ranks (every pair needs a pipe)\n#\n", c->name,
                    so.allPairsMaxRanks);
        continue;
      }
      bench::runTable(world, options, *c, cl.timing);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gyre-sim: %s\n", e.what());
    return 1;
  }
}
