// gyrerun, tested as users run it: the real binary (from GYRE_BIN_DIR) starting small
// shell programs. Every command runs under `timeout`, so a launcher that hangs fails the
// test instead of stalling the suite; tests that stop ranks also check the elapsed time.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <sched.h>

#include "run_shell.h"

namespace {

using gyre::testing::binary;
using gyre::testing::RunResult;
using gyre::testing::runShell;

std::string gyrerunPath() { return binary("gyrerun"); }

// Runs `gyrerun <args>` under a hard timeout. OMP_NUM_THREADS is set so that torchrun's
// notice about it (gyrerun_torch_compat_test.cc) stays out of the stderr checked here.
RunResult runGyrerun(const std::string& args, int timeoutSeconds = 60) {
  return runShell("OMP_NUM_THREADS=1 timeout -k 5 " + std::to_string(timeoutSeconds) + " " +
                  gyrerunPath() + " " + args);
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> result;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) result.push_back(line);
  return result;
}

std::multiset<std::string> lineSet(const std::string& text) {
  std::vector<std::string> v = lines(text);
  return {v.begin(), v.end()};
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

class GyrerunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::access(gyrerunPath().c_str(), X_OK) != 0) {
      FAIL() << gyrerunPath() << " is missing: build the gyrerun target first";
    }
  }
};

TEST_F(GyrerunTest, SetsTorchrunEnvironmentForEachRank) {
  RunResult r = runGyrerun(
      "-n 3 sh -c 'echo RANK=$RANK WORLD_SIZE=$WORLD_SIZE LOCAL_RANK=$LOCAL_RANK "
      "LOCAL_WORLD_SIZE=$LOCAL_WORLD_SIZE GROUP_RANK=$GROUP_RANK MASTER_ADDR=$MASTER_ADDR'");
  EXPECT_EQ(r.exitCode, 0) << r.err;
  std::multiset<std::string> expected;
  for (int rank = 0; rank < 3; ++rank) {
    expected.insert("RANK=" + std::to_string(rank) +
                    " WORLD_SIZE=3 LOCAL_RANK=" + std::to_string(rank) +
                    " LOCAL_WORLD_SIZE=3 GROUP_RANK=0 MASTER_ADDR=127.0.0.1");
  }
  EXPECT_EQ(lineSet(r.out), expected);
}

TEST_F(GyrerunTest, EveryRankGetsTheSameFreePort) {
  RunResult r = runGyrerun("-n 3 sh -c 'echo $MASTER_PORT'");
  EXPECT_EQ(r.exitCode, 0) << r.err;
  std::vector<std::string> ports = lines(r.out);
  ASSERT_EQ(ports.size(), 3u) << r.out;
  EXPECT_EQ(ports[0], ports[1]);
  EXPECT_EQ(ports[0], ports[2]);
  int port = std::atoi(ports[0].c_str());
  EXPECT_GT(port, 0);
  EXPECT_LT(port, 65536);
  EXPECT_NE(port, 29500) << "a single node picks a free port, not torchrun's fixed default";
}

TEST_F(GyrerunTest, BackToBackRunsCanBindTheirPort) {
  if (std::system("python3 -c pass >/dev/null 2>&1") != 0) GTEST_SKIP() << "no python3";
  for (int run = 0; run < 3; ++run) {
    // Rank 0 binds MASTER_PORT the way a store server would.
    RunResult r = runGyrerun(
        "-n 2 python3 -c \"import os, socket; s = socket.socket(); "
        "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
        "os.environ['RANK'] == '0' and s.bind(('127.0.0.1', int(os.environ['MASTER_PORT']))); "
        "s.listen()\"");
    EXPECT_EQ(r.exitCode, 0) << "run " << run << ": " << r.err;
  }
}

TEST_F(GyrerunTest, MultiNodeFlagsGiveGlobalRanks) {
  RunResult r = runGyrerun(
      "--nnodes 3 --node-rank=2 --nproc-per-node 2 --master-addr 10.0.0.1 --master-port=29555 "
      "sh -c 'echo $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $GROUP_RANK $MASTER_ADDR "
      "$MASTER_PORT'");
  EXPECT_EQ(r.exitCode, 0) << r.err;
  EXPECT_EQ(lineSet(r.out),
            (std::multiset<std::string>{"4 6 0 2 2 10.0.0.1 29555", "5 6 1 2 2 10.0.0.1 29555"}));
}

TEST_F(GyrerunTest, MultiNodeWithoutPortUsesTorchrunDefault) {
  RunResult r = runGyrerun("--nnodes 2 --node-rank 1 -n 1 sh -c 'echo $RANK $MASTER_PORT'");
  EXPECT_EQ(r.exitCode, 0) << r.err;
  EXPECT_EQ(r.out, "1 29500\n");
  // 127.0.0.1 across nodes is said, not silent (it works only when the nodes are one machine).
  EXPECT_TRUE(contains(r.err, "--nnodes=2 without --master-addr")) << r.err;
  EXPECT_TRUE(contains(r.err, "--master-addr=<node 0's address>")) << r.err;
  r = runGyrerun("--nnodes 2 --node-rank 1 --master-addr 10.1.2.3 -n 1 true");
  EXPECT_EQ(r.exitCode, 0) << r.err;
  EXPECT_FALSE(contains(r.err, "without --master-addr")) << r.err;
}

TEST_F(GyrerunTest, ExitsZeroWhenEveryRankSucceeds) {
  RunResult r = runGyrerun("-n 4 true");
  EXPECT_EQ(r.exitCode, 0);
  EXPECT_EQ(r.err, "");
}

TEST_F(GyrerunTest, NamesTheRankThatExitsNonZero) {
  RunResult r = runGyrerun(
      "-n 3 sh -c 'if [ $RANK = 1 ]; then echo rank-one-says-why >&2; exit 3; fi; exit 0'");
  EXPECT_NE(r.exitCode, 0);
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_TRUE(contains(r.err, "rank 1 (")) << r.err;
  EXPECT_TRUE(contains(r.err, "exit code 3")) << r.err;
  // The rank's own last words come before gyrerun's verdict on it.
  size_t words = r.err.find("[rank 1] rank-one-says-why");
  size_t verdict = r.err.find("gyrerun: rank 1");
  ASSERT_NE(words, std::string::npos) << r.err;
  ASSERT_NE(verdict, std::string::npos) << r.err;
  EXPECT_LT(words, verdict);
}

TEST_F(GyrerunTest, NamesTheSignalAndStopsTheOtherRanks) {
  // Rank 1 dies by SIGKILL; the others sleep and must be stopped once the grace ends.
  RunResult r =
      runGyrerun("-n 3 --grace 1 sh -c 'if [ $RANK = 1 ]; then kill -KILL $$; fi; exec sleep 60'");
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_TRUE(contains(r.err, "rank 1 (")) << r.err;
  EXPECT_TRUE(contains(r.err, "SIGKILL")) << r.err;
  EXPECT_TRUE(contains(r.err, "rank 0 (local rank 0")) << r.err;
  EXPECT_TRUE(contains(r.err, "rank 2 (local rank 2")) << r.err;
  EXPECT_TRUE(contains(r.err, "SIGTERM")) << r.err;
  // 1 s grace, SIGTERM works at once; far below the 60 s the ranks would sleep.
  EXPECT_LT(r.seconds, 10) << r.err;
}

TEST_F(GyrerunTest, KillsRanksThatIgnoreSigterm) {
  RunResult r = runGyrerun(
      "-n 2 --grace=1 sh -c 'if [ $RANK = 0 ]; then exit 2; fi; trap \"\" TERM; exec sleep 60'");
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_TRUE(contains(r.err, "rank 0 (local rank 0")) << r.err;
  EXPECT_TRUE(contains(r.err, "exit code 2")) << r.err;
  EXPECT_TRUE(contains(r.err, "rank 1 (local rank 1")) << r.err;
  EXPECT_TRUE(contains(r.err, "signal SIGKILL")) << r.err;
  // 1 s grace + 1 s from SIGTERM to SIGKILL.
  EXPECT_GE(r.seconds, 1.5);
  EXPECT_LT(r.seconds, 10) << r.err;
}

TEST_F(GyrerunTest, ReportsAProgramThatCannotStart) {
  RunResult r = runGyrerun("-n 2 /nonexistent/program");
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_TRUE(contains(r.err, "cannot execute '/nonexistent/program'")) << r.err;
  EXPECT_TRUE(contains(r.err, "exit code 127")) << r.err;
}

TEST_F(GyrerunTest, ForwardsSigtermAndExitsWith128PlusSignal) {
  // gyrerun in the background of a shell that sends SIGTERM to gyrerun's pid alone, so
  // the ranks can only get it by forwarding.
  RunResult r = runShell("timeout -k 5 60 sh -c '" + gyrerunPath() +
                         " -n 2 sh -c \"exec sleep 60\" & pid=$!; sleep 0.5; kill -TERM $pid; "
                         "wait $pid; echo status=$?'");
  EXPECT_EQ(r.out, "status=143\n") << r.err;
  EXPECT_TRUE(contains(r.err, "got SIGTERM")) << r.err;
  EXPECT_TRUE(contains(r.err, "rank 0 (local rank 0")) << r.err;
  EXPECT_TRUE(contains(r.err, "rank 1 (local rank 1")) << r.err;
  EXPECT_TRUE(contains(r.err, "signal SIGTERM (15)")) << r.err;
  EXPECT_LT(r.seconds, 10) << r.err;
}

TEST_F(GyrerunTest, StdoutPassesThroughAndStderrIsPrefixed) {
  // The default keeps stdout byte for byte, so gyre-bench's table stays parseable.
  RunResult r = runGyrerun("-n 2 sh -c 'echo out-$RANK; echo err-$RANK >&2'");
  EXPECT_EQ(r.exitCode, 0);
  EXPECT_EQ(lineSet(r.out), (std::multiset<std::string>{"out-0", "out-1"}));
  EXPECT_EQ(lineSet(r.err), (std::multiset<std::string>{"[rank 0] err-0", "[rank 1] err-1"}));
}

TEST_F(GyrerunTest, PrefixModes) {
  RunResult all = runGyrerun("-n 2 --prefix all sh -c 'echo out-$RANK; echo err-$RANK >&2'");
  EXPECT_EQ(lineSet(all.out), (std::multiset<std::string>{"[rank 0] out-0", "[rank 1] out-1"}));
  EXPECT_EQ(lineSet(all.err), (std::multiset<std::string>{"[rank 0] err-0", "[rank 1] err-1"}));
  RunResult none = runGyrerun("-n 2 --no-prefix sh -c 'echo out-$RANK; echo err-$RANK >&2'");
  EXPECT_EQ(lineSet(none.out), (std::multiset<std::string>{"out-0", "out-1"}));
  EXPECT_EQ(lineSet(none.err), (std::multiset<std::string>{"err-0", "err-1"}));
}

TEST_F(GyrerunTest, CompletesALastLineWithoutNewline) {
  RunResult r = runGyrerun("-n 1 --prefix=all sh -c 'printf abc; printf xyz >&2'");
  EXPECT_EQ(r.exitCode, 0);
  EXPECT_EQ(r.out, "[rank 0] abc\n");
  EXPECT_EQ(r.err, "[rank 0] xyz\n");
}

TEST_F(GyrerunTest, KeepsLinesLongerThanItsBufferIntact) {
  // 200000 bytes: three times the relay's piece size, on a single rank.
  RunResult r = runGyrerun("-n 1 sh -c 'head -c 200000 /dev/zero | tr \"\\\\0\" a; echo'");
  EXPECT_EQ(r.exitCode, 0) << r.err;
  EXPECT_EQ(r.out, std::string(200000, 'a') + "\n");
}

TEST_F(GyrerunTest, LongLinesDoNotMixWithOtherRanksLines) {
  // Rank 0 writes a 100000-byte line in two halves with a pause between them; rank 1
  // writes short lines meanwhile. Every output line must still belong to one rank.
  RunResult r = runGyrerun(
      "-n 2 --prefix all sh -c 'if [ $RANK = 0 ]; then head -c 100000 /dev/zero | tr \"\\\\0\" a; "
      "sleep 0.4; echo; else sleep 0.2; echo short-line; fi'");
  EXPECT_EQ(r.exitCode, 0) << r.err;
  size_t as = 0;
  for (const std::string& line : lines(r.out)) {
    EXPECT_EQ(line.rfind("[rank ", 0), 0u) << line.substr(0, 40);
    const size_t body = line.find("] ") + 2;  // "[rank R] " has an 'a' of its own
    as += static_cast<size_t>(std::count(line.begin() + static_cast<long>(body), line.end(), 'a'));
  }
  EXPECT_EQ(as, 100000u);
  EXPECT_TRUE(contains(r.out, "[rank 1] short-line\n")) << r.out.substr(0, 200);
}

TEST_F(GyrerunTest, LeavesTheProgramsArgumentsAlone) {
  RunResult r = runGyrerun("-n 1 echo -n 5 --nnodes 3 --help");
  EXPECT_EQ(r.exitCode, 0) << r.err;
  EXPECT_EQ(r.out, "5 --nnodes 3 --help\n");  // echo -n: gyrerun ends the line
}

// --bind core: local rank r may run only on one CPU gyrerun may use: the r-th where the k
// CPUs are enough, else the (r * k / n)-th (neighbours share one); without it every rank
// keeps gyrerun's whole set.
TEST_F(GyrerunTest, BindCorePinsEachLocalRankToOneCpu) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  ASSERT_EQ(::sched_getaffinity(0, sizeof(allowed), &allowed), 0);
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
  }
  ASSERT_FALSE(cpus.empty());
  const std::string show = "sh -c 'echo $LOCAL_RANK $(grep Cpus_allowed_list /proc/self/status | cut -f2)'";
  const int k = static_cast<int>(cpus.size());
  // One rank per CPU while they last; then as many ranks as CPUs times 1.5 and 2.
  for (int n : {std::min(k, 3), k + (k + 1) / 2, 2 * k}) {
    RunResult bound = runGyrerun("-n " + std::to_string(n) + " --bind core " + show);
    ASSERT_EQ(bound.exitCode, 0) << bound.err;
    std::multiset<std::string> want;
    std::vector<int> perCpu(static_cast<size_t>(k), 0);
    for (int r = 0; r < n; ++r) {
      const int index = n <= k ? r : r * k / n;
      ++perCpu[static_cast<size_t>(index)];
      want.insert(std::to_string(r) + " " + std::to_string(cpus[static_cast<size_t>(index)]));
    }
    EXPECT_EQ(lineSet(bound.out), want) << "-n " << n;
    if (n >= k) {  // every CPU used, none with two ranks more than another
      EXPECT_EQ(*std::min_element(perCpu.begin(), perCpu.end()) + (n % k != 0),
                *std::max_element(perCpu.begin(), perCpu.end()))
          << "-n " << n;
    }
  }
  if (k == 2) {  // this machine's case, spelled out: 4 ranks on 2 CPUs as 0 0 1 1
    RunResult four = runGyrerun("-n 4 --bind core " + show);
    ASSERT_EQ(four.exitCode, 0) << four.err;
    const std::string a = std::to_string(cpus[0]), b = std::to_string(cpus[1]);
    EXPECT_EQ(lineSet(four.out), (std::multiset<std::string>{"0 " + a, "1 " + a, "2 " + b, "3 " + b}));
  }
  RunResult free = runGyrerun("-n 2 " + show);
  ASSERT_EQ(free.exitCode, 0) << free.err;
  if (cpus.size() > 1) {
    for (const std::string& line : lines(free.out)) {
      EXPECT_TRUE(contains(line, "-") || contains(line, ",")) << "unbound rank pinned: " << line;
    }
  }
}

// --elastic: the failed rank is restarted alone with GYRE_ELASTIC_NEWCOMER=1 and the
// others keep running (they see GYRE_ELASTIC=1 and no newcomer flag); the job ends 0
// when every rank's last process did.
TEST_F(GyrerunTest, ElasticRestartsOnlyTheFailedRankAsANewcomer) {
  RunResult r = runGyrerun(
      "--elastic --max-restarts 1 -n 3 sh -c '"
      "if [ \"$GYRE_ELASTIC_NEWCOMER\" = 1 ]; then echo newcomer $RANK elastic=$GYRE_ELASTIC; exit 0; fi; "
      "if [ $RANK = 1 ]; then exit 3; fi; sleep 1; echo survivor $RANK pid $$ elastic=$GYRE_ELASTIC'");
  EXPECT_EQ(r.exitCode, 0) << r.err;
  std::multiset<std::string> out = lineSet(r.out);
  EXPECT_EQ(out.count("newcomer 1 elastic=1"), 1u) << r.out;
  size_t survivors = 0;
  for (const std::string& line : out) survivors += line.rfind("survivor ", 0) == 0;
  EXPECT_EQ(survivors, 2u) << r.out;  // started once each: never restarted
  EXPECT_TRUE(contains(r.err, "rank 1 (local rank 1, pid ")) << r.err;
  EXPECT_TRUE(contains(r.err, "exit code 3; the others go on without it, and it restarts as a "
                              "newcomer they grow back in (restart 1 of at most 1 on this node)"))
      << r.err;
  EXPECT_FALSE(contains(r.err, "SIGTERM")) << r.err;
}

// Past --max-restarts the failed rank stays down, the others still finish, and the
// status says the job lost a rank.
TEST_F(GyrerunTest, ElasticPastMaxRestartsLeavesTheRankDownAndExitsOne) {
  RunResult r = runGyrerun(
      "--elastic --max-restarts 1 -n 2 sh -c '"
      "if [ $RANK = 1 ]; then exit 4; fi; sleep 1; echo survivor $RANK'");
  EXPECT_EQ(r.exitCode, 1) << r.err;
  EXPECT_EQ(lineSet(r.out).count("survivor 0"), 1u) << r.out;
  EXPECT_TRUE(contains(r.err, "(restart 1 of at most 1 on this node)")) << r.err;
  EXPECT_TRUE(contains(r.err, "exit code 4; not restarted (--max-restarts 1 used on this node): "
                              "the others go on without it"))
      << r.err;
  // A nested job does not inherit the outer job's elastic flags.
  RunResult nested = runGyrerun(
      "-n 1 sh -c 'echo flags=${GYRE_ELASTIC:-none}/${GYRE_ELASTIC_NEWCOMER:-none}'",
      30);
  EXPECT_EQ(nested.out, "flags=none/none\n");
  RunResult inherited = runShell("GYRE_ELASTIC=1 GYRE_ELASTIC_NEWCOMER=1 timeout 30 " +
                                 gyrerunPath() +
                                 " -n 1 sh -c 'echo flags=${GYRE_ELASTIC:-none}/"
                                 "${GYRE_ELASTIC_NEWCOMER:-none}'");
  EXPECT_EQ(inherited.out, "flags=none/none\n") << inherited.err;
}

// A restarted rank meets the others at gyrerun's store: with the store gone, a failed
// rank is not restarted (it would wait there for nothing), whatever restarts are left.
TEST_F(GyrerunTest, ElasticDoesNotRestartARankOnceTheStoreIsGone) {
  RunResult r = runGyrerun(
      "--elastic --max-restarts 3 -n 2 sh -c '"
      "if [ $RANK = 0 ]; then pkill -KILL -P $PPID -x gyre-store; sleep 0.5; exit 1; fi; "
      "sleep 2; echo survivor $RANK'");
  EXPECT_EQ(r.exitCode, 1) << r.err;
  EXPECT_EQ(lineSet(r.out).count("survivor 1"), 1u) << r.out;
  EXPECT_TRUE(contains(r.err, "the job's store, gyre-store (pid ")) << r.err;
  EXPECT_TRUE(contains(r.err, "rank 0 (local rank 0, pid ")) << r.err;
  EXPECT_TRUE(contains(r.err, "exit code 1; not restarted: the job's store is gone")) << r.err;
  EXPECT_FALSE(contains(r.err, "restarts as a newcomer")) << r.err;
}

TEST_F(GyrerunTest, ElasticNeedsTheAgentStore) {
  RunResult r = runGyrerun("--elastic --no-agent-store -n 2 true");
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_TRUE(contains(r.err, "--elastic needs gyrerun's store")) << r.err;
}

TEST_F(GyrerunTest, RejectsBadCommandLines) {
  for (const char* args : {"", "--nproc-per-node 0 true", "-n 2", "--bogus 1 -n 1 true",
                           "--nnodes 2 --node-rank 2 -n 1 true", "-n 1 --grace -1 true",
                           "-n 1 --bind socket true"}) {
    RunResult r = runGyrerun(args);
    EXPECT_EQ(r.exitCode, 2) << "args: " << args << "\n" << r.err;
    EXPECT_TRUE(contains(r.err, "usage: gyrerun")) << args;
  }
  RunResult help = runGyrerun("--help");
  EXPECT_EQ(help.exitCode, 0);
  EXPECT_TRUE(contains(help.out, "--nproc-per-node"));
}

}  // namespace
