#include "bench/compare_algos.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "base/error.h"
#include "bench/bench_collectives.h"
#include "bench/calibrate.h"
#include "bench/compare_sequence.h"
#include "collectives/algorithm_choice.h"

namespace gyre::bench {
namespace {

constexpr size_t kAlgos = kCompareAlgos;
constexpr size_t kAuto = kCompareAuto;

// One algorithm's communicator and its runner (all share the two buffers: their inputs
// are the same pattern, and each op finishes before the next starts).
struct Contender {
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<CollectiveRunner> runner;
};

// Mean seconds per op of `iters` back-to-back out-of-place ops, after a barrier.
double timeBurst(Contender& c, const Layout& l, int iters) {
  c.comm->barrier();
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) c.runner->run(l, Group::kOutOfPlace);
  std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
  return elapsed.count() / iters;
}


}  // namespace

int compareAlgos(Communicator& comm, const Options& options, const CompareConfig& config,
                 std::byte* send, std::byte* recv, size_t capacity) {
  const int n = comm.size();
  if (n < 2) {
    fail(ErrorCode::kInvalidArgument, "rank {}: --compare-algos needs at least 2 ranks, not {}",
         comm.rank(), n);
  }
  if (config.rounds < 1 || config.iters < 1) {
    fail(ErrorCode::kInvalidArgument,
         "rank {}: --compare-algos: rounds {} and iters {} must be >= 1", comm.rank(),
         config.rounds, config.iters);
  }
  const std::string transport = resolvedTransport(comm, options);
  const CollectiveInfo& allReduce = *findCollective("all_reduce");
  std::shared_ptr<Store> store = algoStore(comm, options);
  std::array<Contender, kAlgos> contenders;
  for (size_t a = 0; a < kAlgos; ++a) {
    contenders[a].comm = algoCommunicator(comm, store, options, kCompareKinds[a]);
    contenders[a].runner = std::make_unique<CollectiveRunner>(
        *contenders[a].comm, allReduce, config.dtype, config.op, 0, send, recv, capacity);
  }
  const int burst = compareBurst(config.iters, config.rounds);
  const auto rounds = static_cast<size_t>(config.rounds);

  const bool print = comm.rank() == 0;
  if (print) {
    std::printf(
        "# compare-algos: all_reduce %s %s out of place, %d ranks, transport %s; per size -w %d "
        "untimed ops per algorithm, then %d rounds of ring, tree, hier, auto in turn, %d timed ops "
        "each\n",
        dtypeName(config.dtype), opName(config.op), n, transport.c_str(), config.warmup,
        config.rounds, burst);
    std::printf(
        "# time (us) = median over rounds of the largest over ranks of the mean per op; "
        "auto_algo = the auto communicator's pick; best = min(ring, tree, hier); hier = the "
        "flat ring where the hosts do not allow it\n");
    std::fflush(stdout);
  }

  uint64_t totalWrong = 0;
  double worstRatio = 0;
  size_t worstBytes = 0;
  bool anyRatio = false;
  for (size_t size : config.sizes) {
    const Layout l = layoutFor(allReduce, size, dtypeSize(config.dtype), n);
    for (Contender& c : contenders) {
      c.runner->prepareTimed(l, Group::kOutOfPlace);
      for (int i = 0; i < config.warmup; ++i) c.runner->run(l, Group::kOutOfPlace);
    }
    // times[round * kAlgos + algo]: this rank's mean, then the largest over ranks.
    std::vector<double> times(rounds * kAlgos, 0.0);
    for (size_t r = 0; r < rounds; ++r) {
      for (size_t k = 0; k < kAlgos; ++k) {
        const size_t a = compareTurn(r, k);
        times[r * kAlgos + a] = timeBurst(contenders[a], l, burst);
      }
    }
    comm.allReduce(times.data(), times.data(), times.size(), DataType::kFloat64, ReduceOp::kMax);
    uint64_t wrong = 0;
    if (config.check) {
      for (Contender& c : contenders) {
        wrong += c.runner->check(l, Group::kOutOfPlace);
        wrong += c.runner->check(l, Group::kInPlace);
      }
      comm.allReduce(&wrong, &wrong, 1, DataType::kUint64, ReduceOp::kSum);
      totalWrong += wrong;
    }
    std::array<double, kAlgos> us{};
    for (size_t a = 0; a < kAlgos; ++a) {
      std::vector<double> perRound;
      for (size_t r = 0; r < rounds; ++r) perRound.push_back(times[r * kAlgos + a] * 1e6);
      us[a] = median(perRound);
    }
    const double best = *std::min_element(us.begin(), us.begin() + kAuto);
    const double ratio = best > 0 ? us[kAuto] / best : 0;
    if (!anyRatio || ratio > worstRatio) {
      anyRatio = true;
      worstRatio = ratio;
      worstBytes = l.bytes;
    }
    if (!print) continue;
    std::printf("compare: bytes=%zu ranks=%d transport=%s", l.bytes, n, transport.c_str());
    for (size_t a = 0; a < kAlgos; ++a) std::printf(" %s_us=%.2f", kCompareLabels[a], us[a]);
    const std::string w = config.check ? std::to_string(wrong) : "N/A";
    std::printf(" auto_algo=%s auto/best=%.2f wrong=%s\n",
                contenders[kAuto].comm->allReduceAlgorithm(l.bytes), ratio, w.c_str());
    std::fflush(stdout);
  }
  if (print) {
    const std::string w = config.check ? std::to_string(totalWrong) : "N/A";
    std::printf("compare: worst auto/best=%.2f at bytes=%zu wrong=%s\n", worstRatio, worstBytes,
                w.c_str());
    std::fflush(stdout);
  }
  return totalWrong == 0 ? 0 : 1;
}

}  // namespace gyre::bench
