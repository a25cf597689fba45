// gyre-bench: nccl-tests' all_reduce_perf for gyre, on host buffers.
//
//   gyrerun -n 4 gyre-bench [allreduce] -b 8 -e 256M -f 2 -n 20 -w 5 -c 1 -d float -o sum
//
// Per size b, b*f, b*f^2, ... <= e (K/M/G = 2^10/2^20/2^30, rounded down to whole
// elements), out-of-place then in-place: -w untimed warm-up ops, a barrier, -n timed
// back-to-back ops. time = the largest over ranks of the mean per-op time (the peers'
// rule); algbw = bytes/time; busbw = algbw * the collective's bus factor (2(n-1)/n for
// all-reduce), which makes busbw comparable with a link's speed whatever n is.
// With -c 1 a separate, untimed op per group runs on inputs whose result is exact in any
// reduction order, and #wrong counts the elements that differ, summed over ranks.
//
// Output contract (the peer harness parses it, ../shared/peers/README.md): rank 0
// alone writes stdout: `#` comment lines, one 13-column row per size
//   size count type redop root | time algbw busbw #wrong (out-of-place) | same (in-place)
// and nccl-tests' trailer `# Out of bounds values : K OK|FAILED`, `# Avg bus bandwidth : X`.
// Errors and logs go to stderr. Exit status 0 only if nothing was wrong and no error.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <getopt.h>

#include "base/error.h"
#include "base/options.h"
#include "base/types.h"
#include "bench/check_pattern.h"
#include "ring/communicator.h"

namespace gyre::bench {
namespace {

// ---- The collectives ----------------------------------------------------------------
// A new collective adds a row: its name, nccl-tests' bus factor (broadcast and reduce 1,
// all-gather and reduce-scatter (n-1)/n) and how to run it; its check then needs its
// own expected result (the one below is "op over all ranks' inputs").
struct Collective {
  const char* name;
  double (*busBwFactor)(int n);
  void (*run)(Communicator& comm, const void* send, void* recv, size_t count, DataType dtype,
              ReduceOp op);
};

const Collective kCollectives[] = {
    {"allreduce", [](int n) { return 2.0 * (n - 1) / n; },
     [](Communicator& comm, const void* send, void* recv, size_t count, DataType dtype,
        ReduceOp op) { comm.allReduce(send, recv, count, dtype, op); }},
};

// ---- Command line ---------------------------------------------------------------------
struct BenchOptions {
  const Collective* collective = &kCollectives[0];
  size_t minBytes = 8;
  size_t maxBytes = size_t{128} << 20;
  size_t stepBytes = size_t{1} << 20;  // used when stepFactor is 1, as in nccl-tests
  size_t stepFactor = 2;
  int iters = 20;
  int warmup = 5;
  bool check = true;
  std::vector<DataType> dtypes{DataType::kFloat32};
  std::vector<ReduceOp> ops{ReduceOp::kSum};
};

const char kUsage[] = R"(usage: gyre-bench [allreduce] [options]     (start it with gyrerun)
  -b, --minbytes N      smallest size (default 8; K/M/G = 2^10/2^20/2^30)
  -e, --maxbytes N      largest size (default 128M)
  -f, --stepfactor F    multiply the size by F (default 2)
  -i, --stepbytes N     with -f 1: add N instead (default 1M)
  -n, --iters N         timed ops per size and group (default 20)
  -w, --warmup_iters N  untimed ops before them (default 5)
  -c, --check 0|1       check results exactly, count #wrong (default 1)
  -d, --datatype T      int8 uint8 int32 uint32 int64 uint64 half bfloat16 float double, all
  -o, --op OP           sum prod min max avg, all (default sum)
  -h, --help
Sizes are rounded down to whole elements. Exit status 0 only if every result was right.
)";

long parseCount(const char* text, const char* what, long lo, long hi) {
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v < lo || v > hi) {
    fail(ErrorCode::kInvalidArgument, "{} wants an integer in [{}, {}], got '{}'", what, lo, hi,
         text);
  }
  return v;
}

std::vector<DataType> parseDataTypes(const std::string& text) {
  std::vector<DataType> all;
  for (int t = 0; t < kNumDataTypes; ++t) all.push_back(static_cast<DataType>(t));
  if (text == "all") return all;
  for (DataType t : all) {
    if (text == dtypeName(t)) return {t};
  }
  // nccl-tests' aliases.
  if (text == "char") return {DataType::kInt8};
  if (text == "int") return {DataType::kInt32};
  if (text == "float16" || text == "fp16") return {DataType::kFloat16};
  if (text == "bf16") return {DataType::kBFloat16};
  if (text == "float32") return {DataType::kFloat32};
  if (text == "float64") return {DataType::kFloat64};
  fail(ErrorCode::kInvalidArgument, "-d: unknown data type '{}'", text);
}

std::vector<ReduceOp> parseOps(const std::string& text) {
  std::vector<ReduceOp> all;
  for (int o = 0; o < kNumReduceOps; ++o) all.push_back(static_cast<ReduceOp>(o));
  if (text == "all") return all;
  for (ReduceOp op : all) {
    if (text == opName(op)) return {op};
  }
  fail(ErrorCode::kInvalidArgument, "-o: unknown reduction '{}'", text);
}

// Returns false if help was asked for. Throws kInvalidArgument for a wrong command line.
bool parseOptions(int argc, char** argv, BenchOptions& o) {
  static const option kLong[] = {{"minbytes", required_argument, nullptr, 'b'},
                                 {"maxbytes", required_argument, nullptr, 'e'},
                                 {"stepfactor", required_argument, nullptr, 'f'},
                                 {"stepbytes", required_argument, nullptr, 'i'},
                                 {"iters", required_argument, nullptr, 'n'},
                                 {"warmup_iters", required_argument, nullptr, 'w'},
                                 {"check", required_argument, nullptr, 'c'},
                                 {"datatype", required_argument, nullptr, 'd'},
                                 {"op", required_argument, nullptr, 'o'},
                                 {"help", no_argument, nullptr, 'h'},
                                 {nullptr, 0, nullptr, 0}};
  opterr = 0;  // we report errors ourselves, through gyre::Error
  int c;
  while ((c = getopt_long(argc, argv, "b:e:f:i:n:w:c:d:o:h", kLong, nullptr)) != -1) {
    switch (c) {
      case 'b':
        o.minBytes = parseByteSize(optarg, "-b");
        break;
      case 'e':
        o.maxBytes = parseByteSize(optarg, "-e");
        break;
      case 'f':
        o.stepFactor = static_cast<size_t>(parseCount(optarg, "-f", 1, 1 << 20));
        break;
      case 'i':
        o.stepBytes = parseByteSize(optarg, "-i");
        break;
      case 'n':
        o.iters = static_cast<int>(parseCount(optarg, "-n", 1, 1 << 30));
        break;
      case 'w':
        o.warmup = static_cast<int>(parseCount(optarg, "-w", 0, 1 << 30));
        break;
      case 'c':
        o.check = parseCount(optarg, "-c", 0, 1) == 1;
        break;
      case 'd':
        o.dtypes = parseDataTypes(optarg);
        break;
      case 'o':
        o.ops = parseOps(optarg);
        break;
      case 'h':
        return false;
      default:
        fail(ErrorCode::kInvalidArgument, "unknown option or missing value: '{}'",
             argv[optind - 1]);
    }
  }
  if (optind < argc) {
    const Collective* found = nullptr;
    for (const Collective& coll : kCollectives) {
      if (argv[optind] == std::string(coll.name)) found = &coll;
    }
    if (found == nullptr)
      fail(ErrorCode::kInvalidArgument, "unknown collective '{}'", argv[optind]);
    o.collective = found;
    if (optind + 1 < argc) fail(ErrorCode::kInvalidArgument, "unexpected '{}'", argv[optind + 1]);
  }
  if (o.minBytes > o.maxBytes) {
    fail(ErrorCode::kInvalidArgument, "-b {} is larger than -e {}", o.minBytes, o.maxBytes);
  }
  return true;
}

// b, b*f, b*f^2, ... <= e (or b, b+i, ... with f = 1), as nccl-tests.
std::vector<size_t> sweepSizes(const BenchOptions& o) {
  std::vector<size_t> sizes;
  for (size_t size = o.minBytes; size <= o.maxBytes;) {
    sizes.push_back(size);
    size_t next;
    if (o.stepFactor > 1) {
      if (size > o.maxBytes / o.stepFactor) break;
      next = size * o.stepFactor;
    } else {
      if (o.stepBytes > o.maxBytes - size) break;
      next = size + o.stepBytes;
    }
    if (next <= size) break;  // b = 0 with a factor, or a step of 0
    size = next;
  }
  return sizes;
}

// ---- Running --------------------------------------------------------------------------
struct Buffer {
  std::unique_ptr<std::byte, decltype(&std::free)> bytes{nullptr, &std::free};
};

// Page-aligned like device memory, allocated once for the largest size and touched
// up front, so no size pays for page faults inside its timed loop.
Buffer allocate(size_t bytes) {
  constexpr size_t kPage = 4096;
  size_t rounded = std::max(kPage, (bytes + kPage - 1) / kPage * kPage);
  Buffer b;
  b.bytes.reset(static_cast<std::byte*>(std::aligned_alloc(kPage, rounded)));
  if (!b.bytes) fail(ErrorCode::kSystemError, "cannot allocate {} bytes", rounded);
  std::memset(b.bytes.get(), 0, rounded);
  return b;
}

// Mean seconds per op of `iters` back-to-back ops after `warmup` untimed ones.
double timeOps(Communicator& comm, const Collective& coll, const void* send, void* recv,
               size_t count, DataType t, ReduceOp op, const BenchOptions& o) {
  for (int i = 0; i < o.warmup; ++i) coll.run(comm, send, recv, count, t, op);
  comm.barrier();
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < o.iters; ++i) coll.run(comm, send, recv, count, t, op);
  std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
  return elapsed.count() / o.iters;
}

const char* transportName(TransportKind k) {
  return k == TransportKind::kTcp ? "tcp" : k == TransportKind::kShm ? "shm" : "auto";
}
const char* algoName(AlgoKind k) {
  return k == AlgoKind::kRing ? "ring" : k == AlgoKind::kRecursiveDoubling ? "rd" : "auto";
}

// nccl-tests' header. The "Rank" lines need every rank's pid and host: each rank writes
// its own record into a zeroed table and a uint8 sum over ranks gathers them, since the
// Communicator has no all-gather yet.
void printHeader(Communicator& comm, const BenchOptions& o, bool print) {
  constexpr size_t kRecord = 128;
  const int n = comm.size();
  std::vector<uint8_t> table(static_cast<size_t>(n) * kRecord, 0);
  char host[64] = "?";
  ::gethostname(host, sizeof(host) - 1);
  std::snprintf(reinterpret_cast<char*>(&table[static_cast<size_t>(comm.rank()) * kRecord]),
                kRecord, "%d %s", static_cast<int>(::getpid()), host);
  comm.allReduce(table.data(), table.data(), table.size(), DataType::kUint8, ReduceOp::kSum);
  if (!print) return;
  std::printf("# Collective test starting: gyre-bench %s\n", o.collective->name);
  std::printf(
      "# nThread 1 nGpus 1 minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d "
      "agg iters: 1 validation: %d graph: 0\n",
      o.minBytes, o.maxBytes, o.stepFactor > 1 ? o.stepFactor : o.stepBytes,
      o.stepFactor > 1 ? "factor" : "bytes", o.warmup, o.iters, o.check ? 1 : 0);
  const Options& opt = comm.options();
  std::printf("# gyre: %d ranks, transport %s, algo %s, slots %zu x %zu B\n", n,
              transportName(opt.transport), algoName(opt.algo), opt.slots, opt.slotBytes);
  std::printf("#\n");
  for (int r = 0; r < n; ++r) {
    int pid = 0;
    char rankHost[kRecord] = "";
    std::sscanf(reinterpret_cast<const char*>(&table[static_cast<size_t>(r) * kRecord]), "%d %127s",
                &pid, rankHost);
    std::printf("#  Rank %2d Group  0 Pid %6d on %10s\n", r, pid, rankHost);
  }
  std::printf("#\n");
  // Group labels centred over their four columns (rows: 52 + 2 x 37 characters).
  std::printf("#%76s%35s\n", "out-of-place", "in-place");
  std::printf("#%11s  %12s  %8s  %6s  %6s  %9s  %7s  %7s  %6s  %9s  %7s  %7s  %6s\n", "size",
              "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw",
              "busbw", "#wrong");
  std::printf("#%11s  %12s  %8s  %6s  %6s  %9s  %7s  %7s  %6s  %9s  %7s  %7s  %6s\n", "(B)",
              "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)",
              "");
  std::fflush(stdout);
}

int runBench(Communicator& comm, const BenchOptions& o) {
  const int n = comm.size();
  const bool print = comm.rank() == 0;
  const Collective& coll = *o.collective;
  printHeader(comm, o, print);

  Buffer send = allocate(o.maxBytes);
  Buffer recv = allocate(o.maxBytes);
  const std::vector<size_t> sizes = sweepSizes(o);
  uint64_t totalWrong = 0;
  double busBwSum = 0;
  int busBwCount = 0;
  for (DataType t : o.dtypes) {
    for (ReduceOp op : o.ops) {
      const CheckPattern p = makePattern(t, op, comm.rank(), n);
      // Timed out-of-place ops read the check inputs too (send is never written).
      tile(send.bytes.get(), o.maxBytes / p.elemSize, p.input, p.elemSize);
      for (size_t size : sizes) {
        const size_t count = size / p.elemSize;
        const size_t bytes = count * p.elemSize;
        std::byte* s = send.bytes.get();
        std::byte* r = recv.bytes.get();
        double times[2];
        times[0] = timeOps(comm, coll, s, r, count, t, op, o);
        // In place, op after op on its own output: start from a fixed point of the op
        // (0, or 1 for prod) so that values neither overflow nor turn into inf/NaN.
        tile(r, count, p.neutral, p.elemSize);
        times[1] = timeOps(comm, coll, r, r, count, t, op, o);
        uint64_t wrong[2] = {0, 0};
        if (o.check) {
          tile(r, count, p.poison, p.elemSize);
          coll.run(comm, s, r, count, t, op);
          wrong[0] = countWrong(r, count, p);
          std::memcpy(r, s, bytes);
          coll.run(comm, r, r, count, t, op);
          wrong[1] = countWrong(r, count, p);
          comm.allReduce(wrong, wrong, 2, DataType::kUint64, ReduceOp::kSum);
          totalWrong += wrong[0] + wrong[1];
        }
        comm.allReduce(times, times, 2, DataType::kFloat64, ReduceOp::kMax);
        if (!print) continue;
        std::printf("%12zu  %12zu  %8s  %6s  %6d", bytes, count, dtypeName(t), opName(op), -1);
        for (int g = 0; g < 2; ++g) {
          const double algBw = times[g] > 0 ? static_cast<double>(bytes) / times[g] / 1e9 : 0;
          const double busBw = algBw * coll.busBwFactor(n);
          busBwSum += busBw;
          ++busBwCount;
          std::string w = o.check ? std::to_string(wrong[g]) : "N/A";
          std::printf("  %9.2f  %7.3f  %7.3f  %6s", times[g] * 1e6, algBw, busBw, w.c_str());
        }
        std::printf("\n");
        std::fflush(stdout);
      }
    }
  }
  if (print) {
    std::printf("# Out of bounds values : %llu %s\n", static_cast<unsigned long long>(totalWrong),
                totalWrong == 0 ? "OK" : "FAILED");
    std::printf("# Avg bus bandwidth    : %g\n", busBwCount > 0 ? busBwSum / busBwCount : 0.0);
    std::printf("#\n");
    std::fflush(stdout);
  }
  return totalWrong == 0 ? 0 : 1;
}

}  // namespace
}  // namespace gyre::bench

int main(int argc, char** argv) {
  using namespace gyre;
  bench::BenchOptions options;
  try {
    if (!bench::parseOptions(argc, argv, options)) {
      std::fputs(bench::kUsage, stdout);
      return 0;
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "gyre-bench: %s\n\n%s", e.what(), bench::kUsage);
    return 2;
  }
  int rank = -1;
  try {
    std::unique_ptr<Communicator> comm = Communicator::fromEnvironment();
    rank = comm->rank();
    return bench::runBench(*comm, options);
  } catch (const std::exception& e) {
    // gyre::Error names the peer and the collective; say which rank saw it.
    std::fprintf(stderr, "gyre-bench: rank %s: %s\n",
                 rank >= 0 ? std::to_string(rank).c_str() : "?", e.what());
    return 1;
  }
}
