#include "bench/calibrate.h"

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/launch_env.h"
#include "ring/host_identity.h"
#include "base/types.h"
#include "collectives/algorithm_choice.h"
#include "collectives/collective_table.h"
#include "store/tcp_store.h"

namespace gyre::bench {
namespace {

constexpr size_t kLatencyBytes = 8;
// Two sizes in the bandwidth range (the larger one is fitted, both are printed).
constexpr size_t kBandwidthBytes[] = {size_t{4} << 20, size_t{16} << 20};
constexpr int kLatencyItersFactor = 10;

// Mean microseconds per float-sum all-reduce of `bytes` on this rank.
double timeAllReduce(Communicator& comm, std::vector<float>& buffer, size_t bytes, int iters,
                     int warmup) {
  const size_t count = bytes / sizeof(float);
  for (int i = 0; i < warmup; ++i) {
    comm.allReduce(buffer.data(), buffer.data(), count, DataType::kFloat32, ReduceOp::kSum);
  }
  comm.barrier();
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) {
    comm.allReduce(buffer.data(), buffer.data(), count, DataType::kFloat32, ReduceOp::kSum);
  }
  std::chrono::duration<double, std::micro> elapsed = std::chrono::steady_clock::now() - start;
  return elapsed.count() / iters;
}

struct AlgoRun {
  AllReduceAlgo algo;  // forced on the run's own communicator
  std::vector<size_t> sizes;
  std::vector<double> us;  // per size, the largest over ranks
  bool failed = false;
};

// Times `run.sizes` on a communicator of its own with the algorithm forced. A failure
// (on any rank) marks the run failed; rank 0 says why on stderr.
void measure(Communicator& comm, const std::shared_ptr<Store>& store, const Options& options,
             int iters, int warmup, AlgoRun& run) {
  std::vector<float> buffer(kBandwidthBytes[1] / sizeof(float), 1.0f);
  // One more slot for the failure flag, agreed on with the times in one all-reduce.
  std::vector<double> local(run.sizes.size() + 1, 0.0);
  std::string error;
  {
    std::unique_ptr<Communicator> algoComm = algoCommunicator(comm, store, options, run.algo);
    try {
      for (size_t i = 0; i < run.sizes.size(); ++i) {
        const bool latency = run.sizes[i] == kLatencyBytes;
        local[i] = timeAllReduce(*algoComm, buffer, run.sizes[i],
                                 latency ? iters * kLatencyItersFactor : iters, warmup);
      }
    } catch (const Error& e) {
      local.back() = 1;
      error = e.what();
    }
  }
  comm.allReduce(local.data(), local.data(), local.size(), DataType::kFloat64, ReduceOp::kMax);
  run.failed = local.back() != 0;
  run.us.assign(local.begin(), local.end() - 1);
  if (run.failed && !error.empty() && comm.rank() == 0) {
    std::fprintf(stderr, "gyre-bench: calibration: %s all-reduce failed: %s\n", algoName(run.algo),
                 error.c_str());
  }
}

}  // namespace

std::shared_ptr<Store> algoStore(Communicator& comm, const Options& options) {
  const std::string host = masterAddressFromEnvironment();
  std::shared_ptr<TcpStore> served;
  uint64_t port = 0;
  if (comm.rank() == 0) {
    served = TcpStore::serve(host, 0, options.timeout, options.token);
    port = served->port();
  }
  comm.broadcast(&port, 1, DataType::kUint64, 0);
  if (served) return served;
  return TcpStore::connect(host, static_cast<uint16_t>(port), options.timeout, options.token,
                           comm.rank());
}

std::unique_ptr<Communicator> algoCommunicator(Communicator& comm,
                                               const std::shared_ptr<Store>& store,
                                               const Options& options, AllReduceAlgo algo) {
  Options forced = options;
  forced.algo = algo;
  return Communicator::create(store, comm.rank(), comm.size(), forced);
}

std::string resolvedTransport(Communicator& comm, const Options& options) {
  if (options.transport != TransportKind::kAuto) return transportName(options.transport);
  // The bootstrap's own identity (hostname, boot id and network namespace), so that
  // namespaced hosts on one machine count as separate hosts, as the pipes do.
  const std::string host = hostIdentity(options.hostId);
  uint64_t hash = 14695981039346656037ull;  // FNV-1a
  for (const char* p = host.c_str(); *p != '\0'; ++p) {
    hash = (hash ^ static_cast<unsigned char>(*p)) * 1099511628211ull;
  }
  uint64_t lo = hash, hi = hash;
  comm.allReduce(&lo, &lo, 1, DataType::kUint64, ReduceOp::kMin);
  comm.allReduce(&hi, &hi, 1, DataType::kUint64, ReduceOp::kMax);
  return lo == hi ? "shm" : "tcp";
}

int calibrate(Communicator& comm, const Options& options, int iters, int warmup) {
  const int n = comm.size();
  const std::string transport = resolvedTransport(comm, options);
  std::shared_ptr<Store> store = algoStore(comm, options);

  // Every algorithm of the table that fits one host at 8 bytes, timed there; the ring
  // (the fit) and the tree (its bytes ratio) also at the bandwidth sizes.
  std::vector<AlgoRun> runs;
  const AllReducePlace latencyPlace{kLatencyBytes, n, options.smallestSlotBytes()};
  for (const AllReduceRow* row : kAllReduceAlgorithms) {
    if (!row->fits(latencyPlace)) continue;
    AlgoRun run{row->algo, {kLatencyBytes}, {}};
    if (row->algo == AllReduceAlgo::kRing || row->algo == AllReduceAlgo::kTree) {
      for (size_t s : kBandwidthBytes) run.sizes.push_back(s);
    }
    runs.push_back(run);
  }
  for (AlgoRun& run : runs) measure(comm, store, options, iters, warmup, run);
  const AlgoRun& ring = runs.front();  // the table's first row fits everywhere
  const AlgoRun* tree = nullptr;
  for (const AlgoRun& run : runs) {
    if (run.algo == AllReduceAlgo::kTree) tree = &run;
  }
  if (ring.failed) {
    fail(ErrorCode::kInternal, "rank {}: calibration: the ring all-reduce failed", comm.rank());
  }

  // The fit (the ring's one-host cost, solved for alpha and gbps).
  const double steps = 2.0 * (n - 1);
  const double busFactor = 2.0 * (n - 1) / n;
  LinkCost cost;
  cost.alphaUs = ring.us[0] / steps;
  std::vector<double> gbps;
  for (size_t i = 1; i < ring.sizes.size(); ++i) {
    const double transferUs = ring.us[i] - steps * cost.alphaUs;
    if (transferUs <= 0) {
      fail(ErrorCode::kInternal,
           "rank {}: calibration: {} B took {:.2f} us, no longer than 8 B ({:.2f} us)", comm.rank(),
           ring.sizes[i], ring.us[i], ring.us[0]);
    }
    gbps.push_back(busFactor * static_cast<double>(ring.sizes[i]) / (transferUs * 1000.0));
  }
  cost.bytesPerUs = gbps.back() * 1000.0;
  // The tree's large-buffer time relative to the ring's, at this rank count.
  double treeRatio = 0;
  if (tree && !tree->failed) {
    for (size_t i = 1; i < ring.sizes.size(); ++i) treeRatio += tree->us[i] / ring.us[i];
    treeRatio /= static_cast<double>(ring.sizes.size() - 1);
    cost.treeBytesRatio[std::min(n, 8)] = treeRatio;
  }

  if (comm.rank() == 0) {
    std::printf("calibration: transport=%s ranks=%d alpha_us=%.3f gbps=%.3f%s\n", transport.c_str(),
                n, cost.alphaUs, cost.bytesPerUs / 1000.0,
                options.transport == TransportKind::kAuto
                    ? "  (GYRE_TRANSPORT=auto: shm when every rank is on one host)"
                    : "");
    std::printf("calibration: ring_us 8B=%.2f", ring.us[0]);
    for (size_t i = 1; i < ring.sizes.size(); ++i) {
      std::printf(" %zuM=%.2f", ring.sizes[i] >> 20, ring.us[i]);
    }
    std::printf("  (gbps");
    for (size_t i = 1; i < ring.sizes.size(); ++i) {
      std::printf(" %zuM=%.3f", ring.sizes[i] >> 20, gbps[i - 1]);
    }
    std::printf(")\n");
    std::printf("calibration: 8B_us");
    for (const AlgoRun& run : runs) {
      if (run.failed) {
        std::printf(" %s=failed", algoName(run.algo));
      } else {
        std::printf(" %s=%.2f", algoName(run.algo), run.us[0]);
      }
    }
    std::printf("  (model:");
    for (const AlgoRun& run : runs) {
      std::printf(" %s=%.2f", algoName(run.algo), predictMicros(run.algo, kLatencyBytes, n, cost));
    }
    std::printf(")\n");
    std::printf(
        "calibration: for collectives/tuning.h's table (%s): alphaUs %.1f, bytesPerUs "
        "%.0f, treeBytesRatio[%d] %.2f\n",
        transport.c_str(), cost.alphaUs, cost.bytesPerUs, std::min(n, 8), treeRatio);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace gyre::bench
