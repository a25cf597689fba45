// gyre-bench: nccl-tests' *_perf benchmarks for gyre, on host buffers.
//
//   gyrerun -n 4 gyre-bench [all_reduce] -b 8 -e 256M -f 2 -n 20 -w 5 -c 1 -d float -o sum
//   gyrerun -n 4 gyre-bench all -b 8 -e 1M        (every collective, one table each)
//   gyrerun -n 4 gyre-bench --calibrate           (collectives/algorithm_choice.h's cost model)
//   gyrerun -n 4 gyre-bench --compare-algos -b 8 -e 32M -f 4   (ring, tree, auto interleaved)
//
// The command line: bench/bench_options.h. Per collective (bench/bench_collectives.h:
// names, sizes, bus factors, in-place forms, checks), per size b, b*f, b*f^2, ... <= e (K/M/G =
// 2^10/2^20/2^30, rounded down to whole elements), out-of-place then in-place: -w untimed warm-up
// ops, a barrier, -n timed back-to-back ops. time = the largest over ranks of the mean per-op time
// (the peers' rule); algbw = size/time; busbw = algbw * the collective's bus factor, which makes
// busbw comparable with a link's speed whatever n is. With -c 1 a separate, untimed op per group
// runs on inputs whose result is exact in any reduction order, and #wrong counts the elements that
// differ, summed over ranks.
//
// Output contract (scripts that parse nccl-tests' output parse it, and tests/gyre_bench_test
// checks it): rank 0
// alone writes stdout: per collective, `#` comment lines, one 13-column row per size
//   size count type redop root | time algbw busbw #wrong (out-of-place) | same (in-place)
// (redop "none" for collectives without one, root -1 for unrooted ones, a group the
// collective lacks is four N/A) and nccl-tests' trailer `# Out of bounds values : K
// OK|FAILED`, `# Avg bus bandwidth : X`; `all` prints one such block per collective.
// --calibrate prints `calibration: ...` lines instead (bench/calibrate.h), and
// --compare-algos `#` comments and `compare: ...` lines (bench/compare_algos.h). Errors
// and logs go to stderr. --csv FILE and --json FILE write the same rows, as the same
// strings, to files on rank 0 (bench/result_files.h).
// Exit status 0 only if nothing was wrong and no error; 2 for a wrong command line.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/launch_env.h"
#include "base/types.h"
#include "base/version.h"
#include "bench/bench_collectives.h"
#include "bench/bench_options.h"
#include "bench/calibrate.h"
#include "bench/compare_algos.h"
#include "bench/mpi_bootstrap.h"
#include "bench/result_files.h"
#include "bench/results_table.h"
#include "ring/communicator.h"
#include "ring/options.h"

namespace gyre::bench {
namespace {

// ---- Running --------------------------------------------------------------------------
struct Buffer {
  std::unique_ptr<std::byte, decltype(&std::free)> bytes{nullptr, &std::free};
};

// Page-aligned like device memory, allocated once for the largest size (and the checks'
// guard) and touched up front, so no size pays for page faults inside its timed loop.
Buffer allocate(size_t bytes) {
  constexpr size_t kPage = 4096;
  bytes += kGuardElements * sizeof(uint64_t);
  size_t rounded = (bytes + kPage - 1) / kPage * kPage;
  Buffer b;
  b.bytes.reset(static_cast<std::byte*>(std::aligned_alloc(kPage, rounded)));
  if (!b.bytes) fail(ErrorCode::kSystemError, "cannot allocate {} bytes", rounded);
  std::memset(b.bytes.get(), 0, rounded);
  return b;
}

// Mean seconds per op of `iters` back-to-back ops after `warmup` untimed ones.
double timeOps(Communicator& comm, CollectiveRunner& runner, const Layout& l, Group g,
               const BenchOptions& o) {
  for (int i = 0; i < o.warmup; ++i) runner.run(l, g);
  comm.barrier();
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < o.iters; ++i) runner.run(l, g);
  std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
  return elapsed.count() / o.iters;
}

// Every rank's "pid host", in rank order: each rank writes its own record into a zeroed
// table and a uint8 sum over ranks gathers them (all-reduce is gyre's oldest collective).
std::vector<std::string> gatherRankRecords(Communicator& comm) {
  constexpr size_t kRecord = 128;
  const int n = comm.size();
  std::vector<uint8_t> table(static_cast<size_t>(n) * kRecord, 0);
  char host[64] = "?";
  ::gethostname(host, sizeof(host) - 1);
  std::snprintf(reinterpret_cast<char*>(&table[static_cast<size_t>(comm.rank()) * kRecord]),
                kRecord, "%d %s", static_cast<int>(::getpid()), host);
  comm.allReduce(table.data(), table.data(), table.size(), DataType::kUint8, ReduceOp::kSum);
  std::vector<std::string> records;
  for (int r = 0; r < n; ++r) {
    const char* rec = reinterpret_cast<const char*>(&table[static_cast<size_t>(r) * kRecord]);
    records.emplace_back(rec, strnlen(rec, kRecord));
  }
  return records;
}

// How the ranks found each other, for the header: "MPI_Bcast" or the launcher's variables.
const char* gBootstrap = "environment";

// The congestion control of the tcp pipes, for the header: GYRE_TCP_CONGESTION, or the
// host's (this network namespace's) default, which new connections take.
std::string tcpCongestionInUse(const Options& opt) {
  if (!opt.tcpCongestion.empty()) return opt.tcpCongestion + " (GYRE_TCP_CONGESTION)";
  std::ifstream in("/proc/sys/net/ipv4/tcp_congestion_control");
  std::string name;
  return in >> name ? name + " (the host's)" : std::string("unknown");
}

// nccl-tests' header.
void printHeader(Communicator& comm, const BenchOptions& o, const CollectiveInfo& c,
                 const std::vector<std::string>& records) {
  std::printf("# Collective test starting: gyre-bench %s\n", c.name);
  std::printf(
      "# nThread 1 nGpus 1 minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d "
      "agg iters: 1 validation: %d graph: 0\n",
      o.minBytes, o.maxBytes, o.stepFactor > 1 ? o.stepFactor : o.stepBytes,
      o.stepFactor > 1 ? "factor" : "bytes", o.warmup, o.iters, o.check ? 1 : 0);
  const Options& opt = comm.options();
  std::printf("# gyre: %d ranks, transport %s, algo %s, slots %zu x %zu B, nsocks %d\n",
              comm.size(), transportName(opt.transport), algoName(opt.algo), opt.slots,
              comm.slotBytes(), opt.nsocks);
  std::printf("# gyre: launcher %s, bootstrap %s, tcp congestion control %s\n",
              launcherName(launchEnvFromProcess().launcher), gBootstrap,
              tcpCongestionInUse(opt).c_str());
  std::printf("# gyre: version %s, commit %s\n", version(), versionCommit());
  std::printf("#\n");
  for (size_t r = 0; r < records.size(); ++r) {
    int pid = 0;
    char rankHost[128] = "";
    std::sscanf(records[r].c_str(), "%d %127s", &pid, rankHost);
    std::printf("#  Rank %2zu Group  0 Pid %6d on %10s\n", r, pid, rankHost);
  }
  std::printf("#\n");
  printColumnHeads();
}

// One collective's block: header, a row per (type, op, size), trailer; rows also go to
// `files` (rank 0, --csv/--json; else null). Returns the wrong elements over all ranks.
uint64_t runCollective(Communicator& comm, const BenchOptions& o, const CollectiveInfo& c,
                       const std::vector<std::string>& records, std::byte* send, std::byte* recv,
                       ResultFiles* files) {
  const int n = comm.size();
  const bool print = comm.rank() == 0;
  if (print) printHeader(comm, o, c, records);
  const std::vector<size_t> sizes = sweepSizes(o);
  // Collectives without a reduction run once per type.
  const std::vector<ReduceOp> ops = c.reduces ? o.ops : std::vector<ReduceOp>{ReduceOp::kSum};
  uint64_t totalWrong = 0;
  BusBwSum busBw;
  for (DataType t : o.dtypes) {
    for (ReduceOp op : ops) {
      CollectiveRunner runner(comm, c, t, op, o.root, send, recv, o.maxBytes);
      for (size_t size : sizes) {
        const Layout l = layoutFor(c, size, dtypeSize(t), n);
        const bool has[2] = {c.outOfPlace, c.inPlace};
        double times[2] = {0, 0};
        uint64_t wrong[2] = {0, 0};
        for (Group g : {Group::kOutOfPlace, Group::kInPlace}) {
          if (!has[static_cast<int>(g)]) continue;
          runner.prepareTimed(l, g);
          times[static_cast<int>(g)] = timeOps(comm, runner, l, g, o);
        }
        if (o.check) {
          for (Group g : {Group::kOutOfPlace, Group::kInPlace}) {
            if (has[static_cast<int>(g)]) wrong[static_cast<int>(g)] = runner.check(l, g);
          }
          comm.allReduce(wrong, wrong, 2, DataType::kUint64, ReduceOp::kSum);
          totalWrong += wrong[0] + wrong[1];
        }
        comm.allReduce(times, times, 2, DataType::kFloat64, ReduceOp::kMax);
        if (!print) continue;
        RowGroup groups[2];
        for (int g = 0; g < 2; ++g) {
          groups[g].has = has[g];
          groups[g].seconds = times[g];
          if (o.check) groups[g].wrong = wrong[g];
        }
        ResultRow row = tableRow(c, l, t, op, o.root, n, groups, busBw);
        if (c.id == CollectiveId::kAllReduce) row.algorithm = comm.allReduceAlgorithm(l.bytes);
        printRow(row);
        if (files != nullptr) files->add(row);
      }
    }
  }
  if (print) printTrailer(totalWrong, busBw);
  return totalWrong;
}

// The command line, for the JSON header.
std::string gCommand;

// Rank 0 opens --csv and --json; every rank learns whether it could (a one-byte max
// all-reduce), so that a path rank 0 cannot write stops every rank, not only rank 0.
// Returns null where nothing is to be written, or on ranks other than 0.
std::unique_ptr<ResultFiles> openResultFiles(Communicator& comm, const BenchOptions& o,
                                             const std::vector<std::string>& records) {
  if (o.csvPath.empty() && o.jsonPath.empty()) return nullptr;
  std::unique_ptr<ResultFiles> files;
  uint8_t failed = 0;
  if (comm.rank() == 0) {
    try {
      files = std::make_unique<ResultFiles>(o.csvPath, o.jsonPath);
    } catch (const Error& e) {
      std::fprintf(stderr, "gyre-bench: %s\n", e.what());
      failed = 1;
    }
  }
  comm.allReduce(&failed, &failed, 1, DataType::kUint8, ReduceOp::kMax);
  if (failed) {
    fail(ErrorCode::kInvalidArgument, "rank 0 cannot write the result files (--csv/--json)");
  }
  if (!files) return nullptr;
  RunHeader h;
  h.command = gCommand;
  h.date = utcNow();
  for (const std::string& record : records) {
    char host[128] = "";
    std::sscanf(record.c_str(), "%*d %127s", host);
    h.rankHosts.push_back(host);
  }
  h.host = h.rankHosts.empty() ? "" : h.rankHosts[0];
  h.ranks = comm.size();
  const Options& opt = comm.options();
  h.transport = transportName(opt.transport);
  h.algorithm = algoName(opt.algo);
  h.launcher = launcherName(launchEnvFromProcess().launcher);
  h.bootstrap = gBootstrap;
  h.slots = opt.slots;
  h.slotBytes = comm.slotBytes();
  h.nsocks = opt.nsocks;
  h.tcpCongestion = tcpCongestionInUse(opt);
  for (const CollectiveInfo* c : o.collectives) h.collectives.push_back(c->name);
  h.iters = o.iters;
  h.warmup = o.warmup;
  h.check = o.check;
  files->setHeader(std::move(h));
  return files;
}

int runBench(Communicator& comm, const BenchOptions& o) {
  const std::vector<std::string> records = gatherRankRecords(comm);
  std::unique_ptr<ResultFiles> files;
  try {
    files = openResultFiles(comm, o, records);
  } catch (const Error& e) {
    if (comm.rank() != 0) std::fprintf(stderr, "gyre-bench: rank %d: %s\n", comm.rank(), e.what());
    return 2;
  }
  Buffer send = allocate(o.maxBytes);
  Buffer recv = allocate(o.maxBytes);
  uint64_t totalWrong = 0;
  for (const CollectiveInfo* c : o.collectives) {
    if (c->id == CollectiveId::kSendRecv && comm.size() < 2) {
      if (comm.rank() == 0) std::printf("# %s skipped: it needs at least 2 ranks\n#\n", c->name);
      continue;
    }
    totalWrong +=
        runCollective(comm, o, *c, records, send.bytes.get(), recv.bytes.get(), files.get());
  }
  if (files) files->finish();
  return totalWrong == 0 ? 0 : 1;
}

int runCompareAlgos(Communicator& comm, const Options& commOptions, const BenchOptions& o) {
  CompareConfig config;
  config.sizes = sweepSizes(o);
  config.dtype = o.dtypes.front();
  config.op = o.ops.front();
  config.iters = o.iters;
  config.warmup = o.warmup;
  config.rounds = o.rounds.value_or(5);
  config.check = o.check;
  Buffer send = allocate(o.maxBytes);
  Buffer recv = allocate(o.maxBytes);
  return compareAlgos(comm, commOptions, config, send.bytes.get(), recv.bytes.get(), o.maxBytes);
}

}  // namespace
}  // namespace gyre::bench

int main(int argc, char** argv) {
  using namespace gyre;
  bench::BenchOptions options;
  for (int i = 0; i < argc; ++i) bench::gCommand += (i ? " " : "") + std::string(argv[i]);
  try {
    if (!bench::parseOptions(argc, argv, options)) {
      if (options.version) {
        std::printf("%s\n", versionLine("gyre-bench").c_str());
      } else {
        std::fputs(bench::kUsage, stdout);
      }
      return 0;
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "gyre-bench: %s\n\n%s", e.what(), bench::kUsage);
    return 2;
  }
  int rank = -1;
  try {
    Options commOptions = Communicator::optionsFromEnvironment();  // a typo fails every rank
    if (options.algo) commOptions.algo = *options.algo;
    // Under mpirun (gyre-bench built with MPI): rank 0's store address through MPI_Bcast.
    std::unique_ptr<Communicator> comm = bench::communicatorFromMpi(commOptions);
    if (comm) bench::gBootstrap = "MPI_Bcast";
    if (!comm) comm = Communicator::fromEnvironment(commOptions);
    rank = comm->rank();
    // Same on every rank, so every rank stops here without a collective.
    if (std::string problem = bench::rankCountProblem(options, comm->size()); !problem.empty()) {
      if (rank == 0) std::fprintf(stderr, "gyre-bench: %s\n\n%s", problem.c_str(), bench::kUsage);
      return 2;
    }
    if (options.calibrate) {
      return bench::calibrate(*comm, commOptions, options.iters, options.warmup);
    }
    if (options.compareAlgos) return bench::runCompareAlgos(*comm, commOptions, options);
    return bench::runBench(*comm, options);
  } catch (const std::exception& e) {
    // gyre::Error names the peer and the collective; say which rank saw it.
    // Before the communicator exists, the launcher's rank (mpirun's, srun's, torchrun's).
    // Errors from creation name it already ("rank 3: ..."): not twice.
    if (rank < 0) rank = launcherRank();
    if (namesItsRank(e.what())) {
      std::fprintf(stderr, "gyre-bench: %s\n", e.what());
    } else {
      std::fprintf(stderr, "gyre-bench: rank %s: %s\n",
                   rank >= 0 ? std::to_string(rank).c_str() : "?", e.what());
    }
    return 1;
  }
}
