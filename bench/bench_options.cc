#include "bench/bench_options.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>
#include <getopt.h>

namespace gyre::bench {

const char kUsage[] = R"(usage: gyre-bench [COLLECTIVE] [options]     (start it with gyrerun)
  COLLECTIVE            nccl-tests' name (its binary less _perf) or gyre's spelling:
                        all_reduce|allreduce (default), all_gather|allgather, broadcast,
                        reduce, reduce_scatter|reducescatter, alltoall, sendrecv, or all
                        (each in turn, one table each; sendrecv needs 2 ranks)
      --collective C    the same, as an option (-c is nccl-tests' --check)
  -b, --minbytes N      smallest size (default 8; K/M/G = 2^10/2^20/2^30)
  -e, --maxbytes N      largest size (default 128M)
  -f, --stepfactor F    multiply the size by F (default 2)
  -i, --stepbytes N     with -f 1: add N instead (default 1M)
  -n, --iters N         timed ops per size and group (default 20)
  -w, --warmup_iters N  untimed ops before them (default 5)
  -c, --check 0|1       check results exactly, count #wrong (default 1)
  -d, --datatype T      int8 uint8 int32 uint32 int64 uint64 half bfloat16 float double, all
  -o, --op OP           sum prod min max avg, all (default sum; reductions only)
  -r, --root N          root of broadcast and reduce (default 0)
  -A, --algo A          all-reduce algorithm: auto ring tree rd hier (default: GYRE_ALGO, else auto)
      --calibrate       all-reduce only: time ring at 8 B, 4M and 16M on this transport
                        (GYRE_TRANSPORT), fit collectives/algorithm_choice.h's alpha_us and gbps,
                        and time 8 B with ring, tree and rd (-n, -w apply; 8 B runs 10x -n)
      --compare-algos   all-reduce only, >= 2 ranks: ring, tree and auto (each on its own
                        communicator) timed in turn within one job, per size of the sweep:
                        -w warm-up ops each, then R rounds of a burst of -n/R ops per
                        algorithm (the turn's start rotating by round); prints per size
                        `compare: bytes=.. ring_us tree_us auto_us auto_algo auto/best
                        wrong` (time: median over rounds of the largest over ranks of the
                        mean per op, out of place; auto_algo: what auto picks; best:
                        min(ring, tree)) and the worst auto/best; one -d and -o; -c
                        checks each algorithm exactly
      --rounds R        --compare-algos' rounds (default 5)
      --csv FILE        also write the table's rows to FILE as CSV (rank 0's file system)
      --json FILE       also write them to FILE as JSON, with the run's header (date,
                        host, ranks, transport, algorithm); tools/plot_bench.py plots
                        either, or the table itself (docs/observability.md)
  -h, --help
      --version         print gyre-bench's version and commit (as: gyre-bench 0.2.0
                        (commit 1a2b3c4)); the table's header has them too
Size is the largest buffer of an op, as in nccl-tests: all_gather's gathered buffer,
reduce_scatter's send buffer, alltoall's either, the buffer otherwise; all_gather,
reduce_scatter and alltoall round it down to whole shares (ranks x elements).
busbw = algbw x 2(n-1)/n (all_reduce), (n-1)/n (all_gather, reduce_scatter, alltoall),
1 (broadcast, reduce, sendrecv: rank r sends to r+1 and receives from r-1). A group the
collective lacks prints N/A: broadcast has one buffer (in place only), alltoall and
sendrecv have no in-place form. GYRE_TRANSPORT, GYRE_SLOT_BYTES, GYRE_SLOTS... apply.
Exit status 0 only if every result was right; 2 for a wrong command line.
)";

namespace {

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

AllReduceAlgo parseAlgoFlag(const std::string& text) {
  AllReduceAlgo algo;
  if (parseAlgo(text, algo)) return algo;
  fail(ErrorCode::kInvalidArgument, "-A: unknown algorithm '{}': use {}", text, algoChoices());
}

void selectCollective(const std::string& name, BenchOptions& o) {
  o.all = name == "all";
  if (o.all) {
    o.collectives.clear();
    for (const CollectiveInfo& c : allCollectives()) o.collectives.push_back(&c);
    return;
  }
  const CollectiveInfo* c = findCollective(name);
  if (c == nullptr) fail(ErrorCode::kInvalidArgument, "unknown collective '{}'", name);
  o.collectives = {c};
}

}  // namespace

// Returns false if help or the version was asked for. Throws kInvalidArgument for a wrong
// command line.
bool parseOptions(int argc, char** argv, BenchOptions& o) {
  enum {
    kCollectiveOption = 256,
    kCalibrateOption,
    kCompareAlgosOption,
    kRoundsOption,
    kCsvOption,
    kJsonOption,
    kVersionOption
  };
  static const option kLong[] = {{"minbytes", required_argument, nullptr, 'b'},
                                 {"maxbytes", required_argument, nullptr, 'e'},
                                 {"stepfactor", required_argument, nullptr, 'f'},
                                 {"stepbytes", required_argument, nullptr, 'i'},
                                 {"iters", required_argument, nullptr, 'n'},
                                 {"warmup_iters", required_argument, nullptr, 'w'},
                                 {"check", required_argument, nullptr, 'c'},
                                 {"datatype", required_argument, nullptr, 'd'},
                                 {"op", required_argument, nullptr, 'o'},
                                 {"root", required_argument, nullptr, 'r'},
                                 {"algo", required_argument, nullptr, 'A'},
                                 {"collective", required_argument, nullptr, kCollectiveOption},
                                 {"calibrate", no_argument, nullptr, kCalibrateOption},
                                 {"compare-algos", no_argument, nullptr, kCompareAlgosOption},
                                 {"rounds", required_argument, nullptr, kRoundsOption},
                                 {"csv", required_argument, nullptr, kCsvOption},
                                 {"json", required_argument, nullptr, kJsonOption},
                                 {"help", no_argument, nullptr, 'h'},
                                 {"version", no_argument, nullptr, kVersionOption},
                                 {nullptr, 0, nullptr, 0}};
  opterr = 0;  // we report errors ourselves, through gyre::Error
  bool collectiveGiven = false;
  int c;
  while ((c = getopt_long(argc, argv, "b:e:f:i:n:w:c:d:o:r:A:h", kLong, nullptr)) != -1) {
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
      case 'r':
        o.root = static_cast<int>(parseCount(optarg, "-r", 0, 1 << 20));
        break;
      case 'A':
        o.algo = parseAlgoFlag(optarg);
        break;
      case kCollectiveOption:
        selectCollective(optarg, o);
        collectiveGiven = true;
        break;
      case kCalibrateOption:
        o.calibrate = true;
        break;
      case kCompareAlgosOption:
        o.compareAlgos = true;
        break;
      case kRoundsOption:
        o.rounds = static_cast<int>(parseCount(optarg, "--rounds", 1, 1 << 20));
        break;
      case kCsvOption:
      case kJsonOption:
        if (*optarg == '\0') {
          fail(ErrorCode::kInvalidArgument, "{} wants a file name",
               c == kCsvOption ? "--csv" : "--json");
        }
        (c == kCsvOption ? o.csvPath : o.jsonPath) = optarg;
        break;
      case 'h':
        return false;
      case kVersionOption:
        o.version = true;
        return false;
      default:
        fail(ErrorCode::kInvalidArgument, "unknown option or missing value: '{}'",
             argv[optind - 1]);
    }
  }
  if (optind < argc) {
    if (collectiveGiven) {
      fail(ErrorCode::kInvalidArgument, "two collectives: --collective and '{}'", argv[optind]);
    }
    selectCollective(argv[optind], o);
    if (optind + 1 < argc) fail(ErrorCode::kInvalidArgument, "unexpected '{}'", argv[optind + 1]);
  }
  if (o.minBytes > o.maxBytes) {
    fail(ErrorCode::kInvalidArgument, "-b {} is larger than -e {}", o.minBytes, o.maxBytes);
  }
  if (o.calibrate) {
    if (o.collectives.size() != 1 || o.collectives[0]->id != CollectiveId::kAllReduce) {
      fail(ErrorCode::kInvalidArgument, "--calibrate measures all_reduce only");
    }
    if (o.algo) {
      fail(ErrorCode::kInvalidArgument, "--calibrate chooses the algorithms itself: drop -A");
    }
  }
  if (o.compareAlgos) {
    if (o.calibrate) {
      fail(ErrorCode::kInvalidArgument, "--compare-algos and --calibrate are separate runs");
    }
    if (o.collectives.size() != 1 || o.collectives[0]->id != CollectiveId::kAllReduce) {
      fail(ErrorCode::kInvalidArgument, "--compare-algos measures all_reduce only");
    }
    if (o.algo) {
      fail(ErrorCode::kInvalidArgument, "--compare-algos runs ring, tree and auto: drop -A");
    }
    if (o.dtypes.size() != 1 || o.ops.size() != 1) {
      fail(ErrorCode::kInvalidArgument, "--compare-algos takes one -d and one -o, not 'all'");
    }
  } else if (o.rounds) {
    fail(ErrorCode::kInvalidArgument, "--rounds applies to --compare-algos only");
  }
  if ((o.calibrate || o.compareAlgos) && (!o.csvPath.empty() || !o.jsonPath.empty())) {
    fail(ErrorCode::kInvalidArgument, "--csv and --json write the sweep's table; {} prints none",
         o.calibrate ? "--calibrate" : "--compare-algos");
  }
  if (!o.csvPath.empty() && o.csvPath == o.jsonPath) {
    fail(ErrorCode::kInvalidArgument, "--csv and --json name the same file '{}'", o.csvPath);
  }
  return true;
}

// What the command line asks that these ranks cannot do; empty if nothing.
std::string rankCountProblem(const BenchOptions& o, int n) {
  if (o.calibrate && n < 2) return "--calibrate needs at least 2 ranks";
  if (o.compareAlgos && n < 2) return "--compare-algos needs at least 2 ranks";
  bool rooted = false;
  for (const CollectiveInfo* c : o.collectives) {
    rooted |= c->rooted;
    if (c->id == CollectiveId::kSendRecv && n < 2 && !o.all) {
      return "sendrecv needs at least 2 ranks (rank r sends to r+1, which must be another)";
    }
  }
  if (rooted && o.root >= n) return fmt::format("-r {} is not a rank of {}", o.root, n);
  return "";
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

}  // namespace gyre::bench
