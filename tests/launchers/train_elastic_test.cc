// gyre-train under gyrerun --elastic, as a user runs it: 4 ranks on Fashion-MNIST, one of
// them SIGKILLed while epoch 1 runs (a middle rank; rank 0, whose process printed the
// header; the last), chosen by the progress line rank 0 prints on stderr. The survivors
// shrink and go on, gyrerun restarts the killed rank, it grows back in, the run finishes
// with 4 ranks whose parameters and momentum are bitwise equal (gyre-train checks it and
// prints the hash), and its test accuracy stays near a run without a failure. Without a
// restart left, the 3 survivors finish alone and gyrerun's status says a rank was lost.
#include <unistd.h>

#include <regex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "free_ports.h"
#include "run_shell.h"

namespace gyre::testing {
namespace {

const std::string kData = "/usr/share/datasets/fashion-mnist";

double finalAccuracy(const std::string& out) {
  std::smatch m;
  if (!std::regex_search(out, m, std::regex("# final test_acc ([0-9.]+)"))) return -1;
  return std::stod(m[1].str());
}

class TrainElastic : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::access(binary("gyre-train").c_str(), X_OK) != 0 || ::access(kData.c_str(), R_OK) != 0) {
      GTEST_SKIP() << "gyre-train or " << kData << " missing";
    }
  }

  std::string trainCommand(const std::string& gyrerunArgs) {
    return "env OMP_NUM_THREADS=1 " + binary("gyrerun") + " " + gyrerunArgs + " -n 4 " +
           binary("gyre-train") +
           " --epochs 2 --max-samples 30000 --progress lines --progress-every 0.02";
  }

  // Runs the job and SIGKILLs the `victim`-th (0-based, in start order: the local rank)
  // of gyrerun's gyre-train children (not its gyre-store) once rank 0 reports epoch 1
  // under way. Every wait is bounded; the job's own (inside the script's) still prints
  // its log when it hangs.
  RunResult runAndKill(const std::string& gyrerunArgs, int victim) {
    const std::string dir = ::testing::TempDir();
    const std::string err = dir + "train_elastic_" + std::to_string(::getpid()) + ".err";
    const std::string script =
        "rm -f " + err + "; timeout -k 5 150 " + trainCommand(gyrerunArgs) + " 2>" + err +
        " & job=$!; " +
        // epoch 1 under way: a progress line of epoch 1 past its first steps
        "for i in $(seq 1 600); do grep -q \"epoch 1/2 [1-9][0-9]*%\" " + err +
        " 2>/dev/null && break; sleep 0.05; done; "
        "victim=$(pgrep -P $(pgrep -P $job -x gyrerun) -x gyre-train | sed -n " + std::to_string(victim + 1) + "p); "
        "echo \"killing $victim\" >&2; kill -KILL $victim; wait $job; rc=$?; cat " + err +
        " >&2; rm -f " + err + "; exit $rc";
    return runShell("timeout -k 5 180 bash -c '" + script + "'");
  }

  void expectRejoined(const RunResult& r) {
    ASSERT_EQ(r.exitCode, 0) << r.out << r.err;
    EXPECT_EQ(countOf(r.err, "failed: signal SIGKILL (9); the others go on without it, and it "
                             "restarts as a newcomer"),
              1u)
        << r.err;
    EXPECT_EQ(countOf(r.err, "3 ranks go on (shrink"), 1u) << r.err;
    EXPECT_EQ(countOf(r.err, "1 restarted rank(s) joined: 4 ranks go on (grow"), 1u) << r.err;
    // The kill fell in epoch 1: the survivors' shrink is reported before epoch 2 starts.
    const size_t shrink = r.err.find("3 ranks go on (shrink");
    const size_t epoch2 = r.err.find("epoch 2/2");
    ASSERT_NE(epoch2, std::string::npos) << r.err;
    EXPECT_LT(shrink, epoch2) << r.err;
    EXPECT_EQ(countOf(r.out, "epoch 1 loss"), 1u) << r.out;
    EXPECT_EQ(countOf(r.out, "epoch 2 loss"), 1u) << r.out;
    EXPECT_TRUE(std::regex_search(
        r.out, std::regex("# elastic: 1 shrink\\(s\\), 1 grow\\(s\\); 4 ranks at the end, their "
                          "parameters and momentum identical \\(hash [0-9a-f]{16}\\)")))
        << r.out;
  }
};

TEST_F(TrainElastic, AKilledMiddleRankRejoinsAndTheRunFinishes) {
  RunResult r = runAndKill("--elastic --max-restarts 1", 2);
  expectRejoined(r);
  // Near a run without a failure (these small runs move by a percent or two between
  // worlds).
  RunResult base = runShell("timeout -k 5 180 " + trainCommand("--elastic") + " 2>/dev/null");
  ASSERT_EQ(base.exitCode, 0) << base.out;
  EXPECT_TRUE(std::regex_search(base.out, std::regex("# elastic: 0 shrink\\(s\\), 0 grow\\(s\\)")))
      << base.out;
  const double killed = finalAccuracy(r.out), clean = finalAccuracy(base.out);
  EXPECT_GT(clean, 0.75) << base.out;
  EXPECT_NEAR(killed, clean, 0.02) << r.out << base.out;
}

TEST_F(TrainElastic, KillingRankZeroLeavesTheRunToTheOthers) {
  expectRejoined(runAndKill("--elastic --max-restarts 1", 0));
}

TEST_F(TrainElastic, KillingTheLastRankRejoinsItAsTheLast) {
  expectRejoined(runAndKill("--elastic --max-restarts 1", 3));
}

// Two nodes (two gyreruns on loopback, 2 ranks each): a rank of node 1 dies, node 1's
// gyrerun restarts it, and it meets the others at node 0's store.
TEST_F(TrainElastic, TheNodeThatLostARankRestartsIt) {
  const std::string dir = ::testing::TempDir() + "train_elastic_nodes_" +
                          std::to_string(::getpid());
  const std::string train = binary("gyre-train") +
                            " --epochs 2 --max-samples 30000 --progress lines --progress-every 0.02";
  // Each node under its own timeout, inside the script's: a hang still prints both
  // nodes' logs (gyrerun names what its ranks were doing when it stops them).
  const std::vector<uint16_t> ports = freePorts(2);  // the master's and the store's
  const std::string node = "timeout -k 5 150 env OMP_NUM_THREADS=1 " + binary("gyrerun") +
                           " --elastic --max-restarts 1 --nnodes 2 --master-addr 127.0.0.1"
                           " --master-port $port --store-port $store -n 2 --node-rank ";
  const std::string script =
      "mkdir -p " + dir + "; port=" + std::to_string(ports[0]) + "; store=" +
      std::to_string(ports[1]) + "; " + node +
      "0 " + train + " >" + dir + "/out0 2>" + dir + "/err0 & n0=$!; " + node + "1 " + train +
      " >" + dir + "/out1 2>" + dir + "/err1 & n1=$!; "
      "for i in $(seq 1 600); do grep -q \"epoch 1/2 [1-9][0-9]*%\" " + dir +
      "/err0 2>/dev/null && break; sleep 0.05; done; "
      "kill -KILL $(pgrep -P $(pgrep -P $n1 -x gyrerun) -x gyre-train | head -1); "
      "wait $n0; rc0=$?; wait $n1; rc1=$?; echo rc $rc0 $rc1; cat " + dir + "/out0; cat " + dir +
      "/err0 " + dir + "/err1 >&2; rm -rf " + dir;
  RunResult r = runShell("timeout -k 5 180 bash -c '" + script + "'");
  EXPECT_NE(r.out.find("rc 0 0"), std::string::npos) << r.out << r.err;
  EXPECT_EQ(countOf(r.err, "rank 2 (local rank 0, pid "), 1u) << r.err;
  EXPECT_EQ(countOf(r.err, "the others go on without it, and it restarts as a newcomer"), 1u)
      << r.err;
  EXPECT_EQ(countOf(r.err, "1 restarted rank(s) joined: 4 ranks go on (grow"), 1u) << r.err;
  EXPECT_TRUE(std::regex_search(
      r.out, std::regex("# elastic: 1 shrink\\(s\\), 1 grow\\(s\\); 4 ranks at the end, "
                        "their parameters and momentum identical")))
      << r.out;
}

TEST_F(TrainElastic, WithoutARestartTheSurvivorsFinishAlone) {
  RunResult r = runAndKill("--elastic", 1);
  EXPECT_EQ(r.exitCode, 1) << r.out << r.err;  // a rank was lost for good
  EXPECT_EQ(countOf(r.err, "not restarted (--max-restarts 0 used on this node): the others go "
                           "on without it"),
            1u)
      << r.err;
  EXPECT_EQ(countOf(r.out, "epoch 2 loss"), 1u) << r.out;
  EXPECT_TRUE(std::regex_search(
      r.out, std::regex("# elastic: 1 shrink\\(s\\), 0 grow\\(s\\); 3 ranks at the end, their "
                        "parameters and momentum identical")))
      << r.out;
  EXPECT_GT(finalAccuracy(r.out), 0.7) << r.out;
}

}  // namespace
}  // namespace gyre::testing
