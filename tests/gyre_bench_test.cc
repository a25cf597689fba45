// gyre-bench under gyrerun, as the peer harness runs it: several real ranks over
// loopback, checked results, and the output contract the harness parses (rank 0's
// stdout: `#` comments, 13-column rows, nccl-tests' trailer), for every collective
// (nccl-tests' sizes, bus factors, in-place forms, roots), -A, --calibrate and
// --compare-algos. Needs a working Communicator. Every run is under `timeout`, so a hang
// fails instead of stalling.
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

#include "base/options.h"
#include "collectives/algorithm_choice.h"
#include "run_shell.h"

namespace {

using gyre::testing::binary;
using gyre::testing::RunResult;
using gyre::testing::runShell;

// `gyrerun -n ranks gyre-bench benchArgs`, bounded in time.
RunResult runBench(int ranks, const std::string& benchArgs, int timeoutSeconds = 180) {
  return runShell("timeout -k 5 " + std::to_string(timeoutSeconds) + " " + binary("gyrerun") +
                  " -n " + std::to_string(ranks) + " " + binary("gyre-bench") + " " + benchArgs);
}

std::vector<std::string> fields(const std::string& line) {
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

const Spec kAllReduce{
    "all_reduce", true, false, false, true, true, [](int n) { return 2.0 * (n - 1) / n; }};
const Spec kSpecs[] = {
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
std::vector<Row> parseRows(const std::string& out) {
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
std::vector<std::pair<std::string, std::string>> splitBlocks(const std::string& out) {
  const std::string start = "# Collective test starting: gyre-bench ";
  std::vector<std::pair<std::string, std::string>> blocks;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(start, 0) == 0) blocks.push_back({line.substr(start.size()), ""});
    if (!blocks.empty()) blocks.back().second += line + "\n";
  }
  return blocks;
}

size_t countLinesStartingWith(const std::string& text, const std::string& start) {
  size_t count = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) count += line.rfind(start, 0) == 0;
  return count;
}

size_t elementSize(const std::string& type) {
  if (type == "int8" || type == "uint8") return 1;
  if (type == "half" || type == "bfloat16") return 2;
  if (type == "int32" || type == "uint32" || type == "float") return 4;
  return 8;
}

// One collective's block: one header (rank 0 only), the expected sizes in order for each
// type and op, nothing wrong, sane numbers, N/A where the collective has no such group,
// the trailer.
void expectCleanBlock(const std::string& out, const Spec& spec, int ranks,
                      const std::vector<size_t>& sizes, const std::vector<std::string>& types,
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

void expectCleanRun(const RunResult& r, int ranks, const std::vector<size_t>& sizes,
                    const std::vector<std::string>& types, const std::vector<std::string>& ops) {
  EXPECT_EQ(r.exitCode, 0) << r.out << r.err;
  expectCleanBlock(r.out, kAllReduce, ranks, sizes, types, ops);
}

std::vector<size_t> geometric(size_t from, size_t to, size_t factor) {
  std::vector<size_t> v;
  for (size_t s = from; s <= to; s *= factor) v.push_back(s);
  return v;
}

const std::vector<std::string> kAllTypes{"int8",   "uint8", "int32",    "uint32", "int64",
                                         "uint64", "half",  "bfloat16", "float",  "double"};
const std::vector<std::string> kAllOps{"sum", "prod", "min", "max", "avg"};

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

TEST_F(GyreBenchTest, HarnessSweepOnTwoRanks) {
  RunResult r = runBench(2, "-b 8 -e 1M -f 4 -c 1");
  expectCleanRun(r, 2, geometric(8, 1 << 20, 4), {"float"}, {"sum"});
}

TEST_F(GyreBenchTest, HarnessSweepOnFourRanks) {
  RunResult r = runBench(4, "-b 8 -e 1M -f 4 -c 1");
  expectCleanRun(r, 4, geometric(8, 1 << 20, 4), {"float"}, {"sum"});
}

TEST_F(GyreBenchTest, EveryTypeAndOpOnThreeRanks) {
  // Odd sizes (3 * 2^k) leave partial elements and uneven ring chunks.
  RunResult r = runBench(3, "allreduce -b 3 -e 200K -f 16 -n 2 -w 1 -d all -o all");
  expectCleanRun(r, 3, geometric(3, 200 << 10, 16), kAllTypes, kAllOps);
}

TEST_F(GyreBenchTest, SelectedTypesAndOps) {
  struct Case {
    int ranks;
    const char* type;
    const char* op;
  };
  for (const Case& c : {Case{2, "half", "avg"}, Case{4, "bfloat16", "sum"}, Case{4, "int8", "prod"},
                        Case{3, "uint64", "min"}, Case{2, "double", "max"}}) {
    SCOPED_TRACE(std::string(c.type) + " " + c.op + " on " + std::to_string(c.ranks));
    RunResult r =
        runBench(c.ranks, std::string("-b 1K -e 1M -f 32 -n 3 -w 1 -d ") + c.type + " -o " + c.op);
    expectCleanRun(r, c.ranks, geometric(1 << 10, 1 << 20, 32), {c.type}, {c.op});
  }
}

// Each collective alone on 2, 3 and 4 ranks (3 over tcp, the others over shared
// memory): every type (and every op where it reduces), odd sizes that leave partial
// elements and shares, and 16 KiB slots so that the largest sizes pipeline.
class CollectiveBenchTest : public GyreBenchTest,
                            public ::testing::WithParamInterface<std::tuple<size_t, int>> {};

TEST_P(CollectiveBenchTest, EveryTypeIsExact) {
  const Spec& spec = kSpecs[std::get<0>(GetParam())];
  const int ranks = std::get<1>(GetParam());
  const std::string env =
      std::string("GYRE_SLOT_BYTES=16K GYRE_TRANSPORT=") + (ranks == 3 ? "tcp" : "shm") + " ";
  RunResult r = runShell("timeout -k 5 120 env " + env + binary("gyrerun") + " -n " +
                         std::to_string(ranks) + " " + binary("gyre-bench") + " " + spec.name +
                         " -b 5 -e 100K -f 9 -n 2 -w 1 -d all -o all");
  EXPECT_EQ(r.exitCode, 0) << r.out << r.err;
  expectCleanBlock(r.out, spec, ranks, geometric(5, 100 << 10, 9), kAllTypes, kAllOps);
}

INSTANTIATE_TEST_SUITE_P(Collectives, CollectiveBenchTest,
                         ::testing::Combine(::testing::Range(size_t{0}, std::size(kSpecs)),
                                            ::testing::Values(2, 3, 4)),
                         [](const ::testing::TestParamInfo<std::tuple<size_t, int>>& info) {
                           return std::string(kSpecs[std::get<0>(info.param)].name) + "_" +
                                  std::to_string(std::get<1>(info.param)) + "ranks";
                         });

TEST_F(GyreBenchTest, AllRunsEveryCollectiveInTurn) {
  RunResult r = runBench(4, "all -b 8 -e 64K -f 8 -n 2 -w 1 -d int32");
  EXPECT_EQ(r.exitCode, 0) << r.out << r.err;
  auto blocks = splitBlocks(r.out);
  ASSERT_EQ(blocks.size(), std::size(kSpecs)) << r.out;
  for (size_t i = 0; i < blocks.size(); ++i) {
    EXPECT_EQ(blocks[i].first, kSpecs[i].name);
    expectCleanBlock(blocks[i].second, kSpecs[i], 4, geometric(8, 64 << 10, 8), {"int32"}, {"sum"});
  }
}

TEST_F(GyreBenchTest, OneRankSkipsOnlySendRecv) {
  RunResult r = runBench(1, "all -b 8 -e 4K -f 8 -n 1 -w 0");
  EXPECT_EQ(r.exitCode, 0) << r.out << r.err;
  auto blocks = splitBlocks(r.out);
  ASSERT_EQ(blocks.size(), std::size(kSpecs) - 1) << r.out;
  for (size_t i = 0; i < blocks.size(); ++i) {
    EXPECT_EQ(blocks[i].first, kSpecs[i].name);
    expectCleanBlock(blocks[i].second, kSpecs[i], 1, geometric(8, 4 << 10, 8), {"float"}, {"sum"});
  }
  EXPECT_EQ(countLinesStartingWith(r.out, "# sendrecv skipped: it needs at least 2 ranks"), 1u);
  // Asked for by name, it is a command-line error (gyrerun exits 1 for any failed rank).
  r = runBench(1, "sendrecv -b 8 -e 8");
  EXPECT_EQ(r.exitCode, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("failed: exit code 2"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("sendrecv needs at least 2 ranks"), std::string::npos) << r.err;
  EXPECT_EQ(parseRows(r.out).size(), 0u) << r.out;
}

TEST_F(GyreBenchTest, RootedCollectivesUseTheRoot) {
  for (const Spec& spec : kSpecs) {
    if (!spec.rooted) continue;
    RunResult r =
        runBench(3, std::string(spec.name) + " -r 2 -b 7 -e 40K -f 13 -n 2 -w 1 -d all -o all");
    EXPECT_EQ(r.exitCode, 0) << r.out << r.err;
    expectCleanBlock(r.out, spec, 3, geometric(7, 40 << 10, 13), kAllTypes, kAllOps, 2);
    // A root that is no rank stops every rank before any collective.
    r = runBench(3, std::string(spec.name) + " -r 3 -b 8 -e 8");
    EXPECT_EQ(r.exitCode, 1) << r.out << r.err;
    EXPECT_NE(r.err.find("failed: exit code 2"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("-r 3 is not a rank of 3"), std::string::npos) << r.err;
    EXPECT_EQ(parseRows(r.out).size(), 0u) << r.out;
  }
}

TEST_F(GyreBenchTest, AliasesAndTheCollectiveOption) {
  for (const char* args : {"allgather", "--collective all_gather", "--collective=allgather"}) {
    RunResult r = runBench(2, std::string(args) + " -b 64 -e 64 -n 1 -w 0");
    EXPECT_EQ(r.exitCode, 0) << args << "\n" << r.out << r.err;
    expectCleanBlock(r.out, kSpecs[1], 2, {64}, {"float"}, {"sum"});
  }
}

// -A overrides GYRE_ALGO for the all-reduce, as the header says; each one is exact.
class AlgoBenchTest : public GyreBenchTest, public ::testing::WithParamInterface<const char*> {};

TEST_P(AlgoBenchTest, ForcedAlgorithmIsExact) {
  const std::string algo = GetParam();
  RunResult r =
      runShell("timeout -k 5 120 env GYRE_ALGO=ring " + binary("gyrerun") + " -n 3 " +
               binary("gyre-bench") + " -A " + algo + " -b 4 -e 64K -f 4 -n 2 -w 1 -d all -o all");
  EXPECT_EQ(r.exitCode, 0) << r.out << r.err;
  EXPECT_NE(r.out.find(", algo " + algo + ","), std::string::npos) << r.out;
  expectCleanBlock(r.out, kAllReduce, 3, geometric(4, 64 << 10, 4), kAllTypes, kAllOps);
}

INSTANTIATE_TEST_SUITE_P(Algorithms, AlgoBenchTest, ::testing::Values("ring", "rd", "tree"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           return std::string(info.param);
                         });

// `key=value` fields of the first line starting with `prefix`: those before its
// parenthesis, or (inParens) those inside it.
std::map<std::string, std::string> keyValues(const std::string& text, const std::string& prefix,
                                             bool inParens = false) {
  std::map<std::string, std::string> kv;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(prefix, 0) != 0) continue;
    const size_t paren = line.find('(');
    std::string part = inParens ? (paren == std::string::npos ? "" : line.substr(paren + 1))
                                : line.substr(prefix.size(), paren - prefix.size());
    for (std::string f : fields(part)) {
      if (!f.empty() && f.back() == ')') f.pop_back();
      size_t eq = f.find('=');
      if (eq != std::string::npos) kv[f.substr(0, eq)] = f.substr(eq + 1);
    }
    break;
  }
  return kv;
}

TEST_F(GyreBenchTest, CalibrateFitsTheRingModel) {
  for (const char* transport : {"shm", "tcp"}) {
    const int ranks = transport == std::string("shm") ? 2 : 3;
    SCOPED_TRACE(std::string(transport) + " on " + std::to_string(ranks));
    RunResult r = runShell(std::string("timeout -k 5 120 env GYRE_TRANSPORT=") + transport + " " +
                           binary("gyrerun") + " -n " + std::to_string(ranks) + " " +
                           binary("gyre-bench") + " --calibrate -n 3 -w 1");
    EXPECT_EQ(r.exitCode, 0) << r.out << r.err;
    auto fit = keyValues(r.out, "calibration: transport=");
    EXPECT_EQ(countLinesStartingWith(r.out, "calibration: transport=" + std::string(transport) +
                                                " ranks=" + std::to_string(ranks) + " "),
              1u)
        << r.out;
    ASSERT_EQ(fit.count("alpha_us"), 1u) << r.out;
    ASSERT_EQ(fit.count("gbps"), 1u) << r.out;
    EXPECT_GT(std::stod(fit["alpha_us"]), 0) << r.out;
    EXPECT_GT(std::stod(fit["gbps"]), 0) << r.out;
    // alpha is the 8-byte ring time over its 2(n-1) steps.
    auto ring = keyValues(r.out, "calibration: ring_us ");
    ASSERT_EQ(ring.count("8B"), 1u) << r.out;
    EXPECT_NEAR(std::stod(fit["alpha_us"]), std::stod(ring["8B"]) / (2.0 * (ranks - 1)), 0.01)
        << r.out;
    EXPECT_EQ(ring.count("4M"), 1u) << r.out;
    EXPECT_EQ(ring.count("16M"), 1u) << r.out;
    auto latency = keyValues(r.out, "calibration: 8B_us ");
    for (const char* algo : {"ring", "tree", "rd"}) {
      EXPECT_EQ(latency.count(algo), 1u) << r.out;
    }
    EXPECT_EQ(latency["ring"], ring["8B"]) << r.out;
    // The fitted model reproduces the 8-byte ring time (its byte term is tiny there).
    auto model = keyValues(r.out, "calibration: 8B_us ", true);
    ASSERT_EQ(model.count("ring"), 1u) << r.out;
    EXPECT_NEAR(std::stod(model["ring"]), std::stod(ring["8B"]), 0.05 * std::stod(ring["8B"]))
        << r.out;
    // And the 16 MiB one: gbps is fitted there.
    const double steps = 2.0 * (ranks - 1);
    const double predicted16M = steps * std::stod(fit["alpha_us"]) +
                                steps / ranks * (16 << 20) / (std::stod(fit["gbps"]) * 1000);
    EXPECT_NEAR(predicted16M, std::stod(ring["16M"]), 0.01 * std::stod(ring["16M"])) << r.out;
    EXPECT_EQ(countLinesStartingWith(r.out, "calibration: for collectives/algorithm_choice.cc's table"),
              1u)
        << r.out;
  }
}

// --compare-algos: one `compare:` line per size, in order, each naming the ranks, the
// transport, three positive times, the algorithm auto picks (collectives/algorithm_choice.h's
// choice for this size and transport, with the environment's options) and auto/best
// consistent with the printed times; then the worst ratio, nothing wrong.
TEST_F(GyreBenchTest, CompareAlgosInterleavesRingTreeAndAuto) {
  struct Case {
    int ranks;
    const char* transport;
  };
  const std::vector<size_t> sizes = geometric(8, 64 << 10, 8);
  for (const Case& c : {Case{2, "shm"}, Case{3, "tcp"}}) {
    SCOPED_TRACE(std::string(c.transport) + " on " + std::to_string(c.ranks));
    RunResult r =
        runShell(std::string("timeout -k 5 120 env GYRE_TRANSPORT=") + c.transport + " " +
                 binary("gyrerun") + " -n " + std::to_string(c.ranks) + " " + binary("gyre-bench") +
                 " --compare-algos -b 8 -e 64K -f 8 -n 6 -w 1 " + "--rounds 3");
    EXPECT_EQ(r.exitCode, 0) << r.out << r.err;
    std::vector<std::map<std::string, std::string>> lines;
    std::istringstream in(r.out);
    for (std::string line; std::getline(in, line);) {
      if (line.empty() || line[0] == '#') continue;
      ASSERT_EQ(line.rfind("compare: ", 0), 0u) << "not a compare line: '" << line << "'";
      std::map<std::string, std::string> kv;
      for (const std::string& f : fields(line.substr(9))) {
        const size_t eq = f.find('=');
        if (eq != std::string::npos) kv[f.substr(0, eq)] = f.substr(eq + 1);
      }
      lines.push_back(kv);
    }
    ASSERT_EQ(lines.size(), sizes.size() + 1) << r.out;
    gyre::Options autoOptions = gyre::Options::fromEnvironment();
    autoOptions.algo = gyre::AllReduceAlgo::kAuto;
    double worst = 0;
    size_t worstBytes = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      auto& kv = lines[i];
      SCOPED_TRACE("bytes " + std::to_string(sizes[i]));
      for (const char* key : {"bytes", "ranks", "transport", "ring_us", "tree_us", "hier_us",
                              "auto_us",
                              "auto_algo", "auto/best", "wrong"}) {
        ASSERT_EQ(kv.count(key), 1u) << key << " missing\n" << r.out;
      }
      EXPECT_EQ(std::stoull(kv["bytes"]), sizes[i]) << r.out;
      EXPECT_EQ(kv["ranks"], std::to_string(c.ranks));
      EXPECT_EQ(kv["transport"], c.transport);
      EXPECT_EQ(kv["wrong"], "0") << r.out;
      const double ring = std::stod(kv["ring_us"]), tree = std::stod(kv["tree_us"]);
      const double hier = std::stod(kv["hier_us"]);
      const double autoUs = std::stod(kv["auto_us"]), ratio = std::stod(kv["auto/best"]);
      EXPECT_GT(ring, 0);
      EXPECT_GT(tree, 0);
      EXPECT_GT(hier, 0);
      EXPECT_GT(autoUs, 0);
      const std::string& picked = kv["auto_algo"];
      EXPECT_TRUE(picked == "ring" || picked == "tree" || picked == "rd") << picked;
      EXPECT_EQ(picked, gyre::algoName(gyre::chooseAllReduce(autoOptions, sizes[i], c.ranks,
                                                             c.transport == std::string("shm"))));
      // Times print to 0.01 us and the ratio to 0.01, from the unrounded times.
      const double best = std::min({ring, tree, hier});
      const double slack = 0.005 + 0.005 * (1 / best + autoUs / (best * best)) + 1e-9;
      EXPECT_NEAR(ratio, autoUs / best, slack) << r.out;
      if (i == 0 || ratio > worst) {
        worst = ratio;
        worstBytes = sizes[i];
      }
    }
    auto& last = lines.back();
    EXPECT_EQ(r.out.find("compare: worst auto/best="), r.out.rfind("compare: ")) << r.out;
    ASSERT_EQ(last.count("auto/best"), 1u) << r.out;
    ASSERT_EQ(last.count("bytes"), 1u) << r.out;
    EXPECT_EQ(last["wrong"], "0") << r.out;
    // The worst line names the largest printed ratio (ties: the first such size).
    EXPECT_EQ(std::stod(last["auto/best"]), worst) << r.out;
    EXPECT_EQ(std::stoull(last["bytes"]), worstBytes) << r.out;
  }
  // One rank has nothing to compare: a usage error before any collective.
  RunResult r = runBench(1, "--compare-algos -b 8 -e 8");
  EXPECT_EQ(r.exitCode, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("failed: exit code 2"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--compare-algos needs at least 2 ranks"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
}

TEST_F(GyreBenchTest, WithoutCheckWrongIsNotAvailable) {
  RunResult r = runBench(2, "-b 64 -e 64 -c 0");
  EXPECT_EQ(r.exitCode, 0) << r.err;
  std::vector<Row> rows = parseRows(r.out);
  ASSERT_EQ(rows.size(), 1u) << r.out;
  EXPECT_EQ(rows[0].wrong[0], "N/A");
  EXPECT_EQ(rows[0].wrong[1], "N/A");
}

TEST_F(GyreBenchTest, HelpNamesEveryCollective) {
  RunResult r = runShell("timeout -k 5 30 " + binary("gyre-bench") + " --help");
  EXPECT_EQ(r.exitCode, 0) << r.err;
  for (const Spec& spec : kSpecs) {
    EXPECT_NE(r.out.find(spec.name), std::string::npos) << spec.name;
  }
  for (const char* flag :
       {"--root", "--algo", "--calibrate", "--collective", "--compare-algos", "--rounds"}) {
    EXPECT_NE(r.out.find(flag), std::string::npos) << flag;
  }
}

TEST_F(GyreBenchTest, RejectsBadArgumentsBeforeStarting) {
  // Argument errors come before the communicator, so no ranks need to meet.
  for (const char* args :
       {"-d nosuch", "-o nosuch", "-b 2M -e 1M", "-n 0", "nosuch", "-x", "-r -1", "-A nosuch",
        "all_reduce broadcast", "--collective reduce broadcast", "--calibrate broadcast",
        "--calibrate -A ring", "--compare-algos broadcast", "--compare-algos -A tree",
        "--compare-algos --calibrate", "--compare-algos -d all", "--compare-algos --rounds 0",
        "--rounds 3"}) {
    RunResult r = runShell("timeout -k 5 30 " + binary("gyre-bench") + " " + args);
    EXPECT_EQ(r.exitCode, 2) << args << "\n" << r.err;
    EXPECT_NE(r.err.find("usage: gyre-bench"), std::string::npos) << args;
    EXPECT_EQ(r.out, "") << args;
  }
}

}  // namespace
