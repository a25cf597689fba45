// What the gyre-bench tests share (gyre_bench_test.cc, gyre_bench_algo_test.cc):
// running `gyrerun -n N gyre-bench ...` bounded in time, parsing rank 0's output as the
// peer harness does (13-column rows, `#` comments, nccl-tests' trailer), the checks of a
// clean block, and the fixture that fails at once when the programs are not built.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "collectives/algorithm_choice.h"
#include "ring/options.h"
#include "run_shell.h"

namespace gyre_bench_test {

using gyre::testing::binary;
using gyre::testing::RunResult;
using gyre::testing::runShell;

// `gyrerun -n ranks gyre-bench benchArgs`, bounded in time.
inline RunResult runBench(int ranks, const std::string& benchArgs, int timeoutSeconds = 180) {
  return runShell("timeout -k 5 " + std::to_string(timeoutSeconds) + " " + binary("gyrerun") +
                  " -n " + std::to_string(ranks) + " " + binary("gyre-bench") + " " + benchArgs);
}

inline std::vector<std::string> fields(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> f;
  for (std::string w; in >> w;) f.push_back(w);
  return f;
}

// What a collective's block must look like (nccl-tests' conventions, written out here
// independently of bench/bench_collectives.cc).
struct Spec {
  const char* name;
  bool reduces;     // redop column is the op, else "none" and one pass per type
  bool rooted;      // root column is -r, else -1
  bool shares;      // size rounds down to whole ranks x elements
  bool outOfPlace;  // groups present; a missing one is four N/A
  bool inPlace;
  double (*busFactor)(int n);
};

inline const Spec kAllReduce{
    "all_reduce", true, false, false, true, true, [](int n) { return 2.0 * (n - 1) / n; }};
inline const Spec kSpecs[] = {
    kAllReduce,
    {"all_gather", false, false, true, true, true, [](int n) { return (n - 1.0) / n; }},
    {"broadcast", false, true, false, false, true, [](int) { return 1.0; }},
    {"reduce", true, true, false, true, true, [](int) { return 1.0; }},
    {"reduce_scatter", true, false, true, true, true, [](int n) { return (n - 1.0) / n; }},
    {"alltoall", false, false, true, true, false, [](int n) { return (n - 1.0) / n; }},
    {"sendrecv", false, false, false, true, false, [](int) { return 1.0; }},
};

struct Row {
  size_t size = 0, count = 0;
  std::string type, redop;
  int root = 0;
  std::string time[2], algbw[2], busbw[2], wrong[2];
};

// Parses stdout the way nccl-tests' summarising scripts do: lines starting with '#' are
// comments; everything else must be a 13-column data row.
inline std::vector<Row> parseRows(const std::string& out) {
  std::vector<Row> rows;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> f = fields(line);
    EXPECT_EQ(f.size(), 13u) << "not a 13-column row: '" << line << "'";
    if (f.size() != 13) continue;
    Row r;
    r.size = std::stoull(f[0]);
    r.count = std::stoull(f[1]);
    r.type = f[2];
    r.redop = f[3];
    r.root = std::stoi(f[4]);
    for (int g = 0; g < 2; ++g) {
      r.time[g] = f[5 + 4 * g];
      r.algbw[g] = f[6 + 4 * g];
      r.busbw[g] = f[7 + 4 * g];
      r.wrong[g] = f[8 + 4 * g];
    }
    rows.push_back(r);
  }
  return rows;
}

// Splits `all`'s output into its blocks, each from its "# Collective test starting".
inline std::vector<std::pair<std::string, std::string>> splitBlocks(const std::string& out) {
  const std::string start = "# Collective test starting: gyre-bench ";
  std::vector<std::pair<std::string, std::string>> blocks;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(start, 0) == 0) blocks.push_back({line.substr(start.size()), ""});
    if (!blocks.empty()) blocks.back().second += line + "\n";
  }
  return blocks;
}

inline size_t countLinesStartingWith(const std::string& text, const std::string& start) {
  size_t count = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) count += line.rfind(start, 0) == 0;
  return count;
}

inline size_t elementSize(const std::string& type) {
  if (type == "int8" || type == "uint8") return 1;
  if (type == "half" || type == "bfloat16") return 2;
  if (type == "int32" || type == "uint32" || type == "float") return 4;
  return 8;
}

// One collective's block: one header (rank 0 only), the expected sizes in order for each
// type and op, nothing wrong, sane numbers, N/A where the collective has no such group,
// the trailer.
inline void expectCleanBlock(const std::string& out, const Spec& spec, int ranks,
                             const std::vector<size_t>& sizes,
                             const std::vector<std::string>& types,
                             const std::vector<std::string>& ops, int root = 0) {
  SCOPED_TRACE(std::string(spec.name) + " on " + std::to_string(ranks) + " ranks");
  EXPECT_EQ(countLinesStartingWith(
                out, "# Collective test starting: gyre-bench " + std::string(spec.name)),
            1u)
      << out;
  EXPECT_EQ(countLinesStartingWith(out, "#  Rank "), static_cast<size_t>(ranks)) << out;
  EXPECT_EQ(countLinesStartingWith(out, "# Out of bounds values : 0 OK"), 1u) << out;
  EXPECT_EQ(countLinesStartingWith(out, "# Avg bus bandwidth    : "), 1u) << out;
  const std::vector<std::string> opsRun = spec.reduces ? ops : std::vector<std::string>{"none"};
  std::vector<Row> rows = parseRows(out);
  ASSERT_EQ(rows.size(), sizes.size() * types.size() * opsRun.size()) << out;
  const bool has[2] = {spec.outOfPlace, spec.inPlace};
  size_t i = 0;
  for (const std::string& type : types) {
    for (const std::string& op : opsRun) {
      for (size_t size : sizes) {
        const Row& row = rows[i++];
        const size_t elem = elementSize(type);
        const size_t unit = spec.shares ? elem * static_cast<size_t>(ranks) : elem;
        EXPECT_EQ(row.type, type);
        EXPECT_EQ(row.redop, op);
        EXPECT_EQ(row.root, spec.rooted ? root : -1);
        EXPECT_EQ(row.size, size / unit * unit) << "sizes round down to whole elements/shares";
        EXPECT_EQ(row.count, row.size / elem);
        for (int g = 0; g < 2; ++g) {
          SCOPED_TRACE(type + " " + op + " " + std::to_string(size) + " group " +
                       std::to_string(g));
          if (!has[g]) {
            EXPECT_EQ(row.time[g] + row.algbw[g] + row.busbw[g] + row.wrong[g], "N/AN/AN/AN/A");
            continue;
          }
          EXPECT_EQ(row.wrong[g], "0");
          const double time = std::stod(row.time[g]);
          const double algbw = std::stod(row.algbw[g]);
          const double busbw = std::stod(row.busbw[g]);
          // An op on 0 elements may return in well under the 0.01 us printed.
          if (row.count > 0) {
            EXPECT_GT(time, 0);
          }
          EXPECT_GE(algbw, 0);
          if (ranks > 1 && algbw > 0.1) {
            EXPECT_NEAR(busbw / algbw, spec.busFactor(ranks), 0.02);  // up to the rounding
          }
        }
      }
    }
  }
}

inline void expectCleanRun(const RunResult& r, int ranks, const std::vector<size_t>& sizes,
                           const std::vector<std::string>& types,
                           const std::vector<std::string>& ops) {
  EXPECT_EQ(r.exitCode, 0) << r.out << r.err;
  expectCleanBlock(r.out, kAllReduce, ranks, sizes, types, ops);
}

inline std::vector<size_t> geometric(size_t from, size_t to, size_t factor) {
  std::vector<size_t> v;
  for (size_t s = from; s <= to; s *= factor) v.push_back(s);
  return v;
}

inline const std::vector<std::string> kAllTypes{"int8",   "uint8", "int32",    "uint32", "int64",
                                                "uint64", "half",  "bfloat16", "float",  "double"};
inline const std::vector<std::string> kAllOps{"sum", "prod", "min", "max", "avg"};

class GyreBenchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : {"gyrerun", "gyre-bench"}) {
      if (::access(binary(name).c_str(), X_OK) != 0) {
        FAIL() << binary(name) << " is missing: build it first";
      }
    }
  }
};

}  // namespace gyre_bench_test
