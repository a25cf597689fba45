// gyre-bench's command line: nccl-tests' flags (-b -e -f -i -n -w -c -d -o -r) plus
// gyre's (-A, --calibrate, --compare-algos, --rounds, --csv, --json), parsed into BenchOptions, and
// the sweep of sizes they describe. The usage text (kUsage in bench_options.cc) is the reference
// for every flag. Pure functions; no communicator needed.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "base/types.h"
#include "bench/bench_collectives.h"
#include "collectives/allreduce_algo.h"

namespace gyre::bench {

struct BenchOptions {
  std::vector<const CollectiveInfo*> collectives{&allCollectives()[0]};
  bool all = false;  // `all`: sendrecv is skipped on one rank
  size_t minBytes = 8;
  size_t maxBytes = size_t{128} << 20;
  size_t stepBytes = size_t{1} << 20;  // used when stepFactor is 1, as in nccl-tests
  size_t stepFactor = 2;
  int iters = 20;
  int warmup = 5;
  bool check = true;
  std::vector<DataType> dtypes{DataType::kFloat32};
  std::vector<ReduceOp> ops{ReduceOp::kSum};
  int root = 0;
  std::optional<AllReduceAlgo> algo;  // -A, else GYRE_ALGO
  bool calibrate = false;
  bool compareAlgos = false;
  std::optional<int> rounds;  // --rounds, --compare-algos only
  std::string csvPath;        // --csv: the table's rows as CSV (bench/result_files.h)
  std::string jsonPath;       // --json: the same with the run's header, as JSON
  bool version = false;       // --version: print the version line instead of running
};

// The usage text: every flag, what it means, its default.
extern const char kUsage[];

// Parses argv into o. Returns false if help or the version (o.version) was asked for;
// throws kInvalidArgument, naming the flag, for a wrong command line.
bool parseOptions(int argc, char** argv, BenchOptions& o);

// What the command line asks that n ranks cannot do; empty if nothing.
std::string rankCountProblem(const BenchOptions& o, int n);

// b, b*f, b*f^2, ... <= e (or b, b+i, ... with f = 1), as nccl-tests.
std::vector<size_t> sweepSizes(const BenchOptions& o);

}  // namespace gyre::bench
