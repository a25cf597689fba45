// gyre-bench's algorithm options under gyrerun: every forced GYRE_ALGO exact, --calibrate
// fitting the ring model, and --compare-algos interleaving ring, tree and auto with the
// pick and its ratio printed. Every run is under `timeout`.
#include <gtest/gtest.h>

#include <algorithm>

#include "gyre_bench_harness.h"

namespace {

using namespace gyre_bench_test;

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
    EXPECT_EQ(
        countLinesStartingWith(r.out, "calibration: for collectives/tuning.h's table"),
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
    std::vector<size_t> worstSizes;  // every size whose printed ratio is the largest
    for (size_t i = 0; i < sizes.size(); ++i) {
      auto& kv = lines[i];
      SCOPED_TRACE("bytes " + std::to_string(sizes[i]));
      for (const char* key : {"bytes", "ranks", "transport", "ring_us", "tree_us", "hier_us",
                              "auto_us", "auto_algo", "auto/best", "wrong"}) {
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
        worstSizes.clear();
      }
      if (ratio == worst) worstSizes.push_back(sizes[i]);
    }
    auto& last = lines.back();
    EXPECT_EQ(r.out.find("compare: worst auto/best="), r.out.rfind("compare: ")) << r.out;
    ASSERT_EQ(last.count("auto/best"), 1u) << r.out;
    ASSERT_EQ(last.count("bytes"), 1u) << r.out;
    EXPECT_EQ(last["wrong"], "0") << r.out;
    // The worst line names the largest ratio. The bench compares unrounded ratios, so
    // where two print the same (1.069 and 1.071 both print 1.07) either size may be named.
    EXPECT_EQ(std::stod(last["auto/best"]), worst) << r.out;
    EXPECT_NE(std::find(worstSizes.begin(), worstSizes.end(), std::stoull(last["bytes"])),
              worstSizes.end())
        << r.out;
  }
  // One rank has nothing to compare: a usage error before any collective.
  RunResult r = runBench(1, "--compare-algos -b 8 -e 8");
  EXPECT_EQ(r.exitCode, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("failed: exit code 2"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--compare-algos needs at least 2 ranks"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
}

}  // namespace
