// Startup mistakes, tried with real processes on one host (join_netns_test.cc has
// the two-node layouts): ranks that disagree on the world size, a rank two processes
// claim, settings or job tokens that differ, a rank whose setup fails, a rank killed while
// joining, a rank that never comes, a second job on a port, a GYRE_* typo. Every case must
// end on every rank within seconds (far below GYRE_JOIN_TIMEOUT, which is 30 s here, and
// GYRE_TIMEOUT, 60 s), with a message naming what differs and the ranks involved, and
// leave nothing in /dev/shm. Also: create/destroy cycles on 2-8 ranks, every init mode.
//
// Each failing case prints one "[join]" line: what rank 0 saw, and how long it took.
#include <csignal>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "base/error.h"
#include "fork_ranks.h"
#include "ring/communicator.h"
#include "ring/join.h"
#include "ring/join_store.h"
#include "store/tcp_store.h"

namespace gyre {
namespace {

using namespace std::chrono_literals;
using testing::expectAllFailed;
using testing::RankResult;
using testing::ForkedRanks;

Options joinOptions(const std::string& token) {
  Options o;
  o.timeout = 60s;  // GYRE_TIMEOUT: never what ends a join
  o.joinTimeout = 30s;
  o.joinProgressFirst = 500ms;
  o.joinProgressEvery = 1s;
  o.token = token;
  return o;
}

std::string uniqueToken(const char* what) {
  return fmt::format("j{}_{}", what, ::getpid());
}

// Reaches the store (rank 0 serves it), creates, and runs `rounds` checked sums.
void createAndSum(const std::string& host, uint16_t port, int rank, int size, const Options& o,
                  int rounds = 3) {
  std::shared_ptr<Store> store = joinStore(host, port, rank, o);
  auto comm = Communicator::create(store, rank, size, o, host);
  std::vector<int64_t> v(3000);
  const int64_t want = static_cast<int64_t>(size) * (size + 1) / 2;
  for (int i = 0; i < rounds; ++i) {
    std::fill(v.begin(), v.end(), rank + 1);
    comm->allReduce(v.data(), v.data(), v.size(), DataType::kInt64, ReduceOp::kSum);
    for (int64_t x : v) {
      if (x != want) fail(ErrorCode::kInternal, "rank {}: sum {} instead of {}", rank, x, want);
    }
  }
}

void printCase(const char* name, const std::vector<RankResult>& outs) {
  double worst = 0;
  for (const RankResult& o : outs) worst = std::max(worst, o.seconds);
  std::printf("[join] %s: every rank failed within %.2f s; rank 0: %s\n", name, worst,
              outs[0].message.c_str());
}

void expectNoSegments(const std::string& token) {
  EXPECT_TRUE(testing::shmSegmentsOf(token).empty())
      << testing::shmSegmentsOf(token).size() << " segments left, e.g. "
      << testing::shmSegmentsOf(token).front();
}

// Children c = 0..n-1 believe they are rank ranks[c] of sizes[c].
std::vector<RankResult> runBeliefs(const std::vector<int>& ranks, const std::vector<int>& sizes,
                                const Options& base,
                                std::function<void(int child, Options&)> adjust = nullptr) {
  const uint16_t port = testing::freePort();
  ForkedRanks group(static_cast<int>(ranks.size()));
  group.start([&](int c) {
    Options o = base;
    if (adjust) adjust(c, o);
    createAndSum("127.0.0.1", port, ranks[c], sizes[c], o);
  });
  return group.join(group.started() + 25s);
}

// node 1 started with --nnodes=3 (world 6 there, 4 here): ranks 2 and 3 say 6.
TEST(Join, WorldSizesThatDifferFailEveryRankNamingBoth) {
  const std::string token = uniqueToken("ws");
  auto outs = runBeliefs({0, 1, 2, 3}, {4, 4, 6, 6}, joinOptions(token));
  expectAllFailed(outs, 8.0, {"WORLD_SIZE=4", "WORLD_SIZE=6", "--nnodes", "disagree"});
  printCase("world sizes 4 and 6", outs);
  expectNoSegments(token);
}

TEST(Join, ARankTwoProcessesClaimFailsEveryRank) {
  const std::string token = uniqueToken("dup");
  auto outs = runBeliefs({0, 1, 2, 2}, {4, 4, 4, 4}, joinOptions(token));
  expectAllFailed(outs, 8.0, {"RANK=2", "already held by another process"});
  printCase("rank 2 claimed twice", outs);
  expectNoSegments(token);
}

// node 0 runs ranks 0-3 of 8; node 1 was given --nproc_per_node=2 (ranks 2-3 of 4): the
// same ranks twice and two world sizes; whichever is seen first is reported.
TEST(Join, ANprocPerNodeDisagreementFailsEveryRank) {
  const std::string token = uniqueToken("nproc");
  auto outs = runBeliefs({0, 1, 2, 3, 2, 3}, {8, 8, 8, 8, 4, 4}, joinOptions(token));
  for (const RankResult& o : outs) {
    SCOPED_TRACE(o.describe());
    EXPECT_TRUE(o.reported && !o.ok && !o.hung);
    EXPECT_LT(o.seconds, 8.0);
    bool named = o.message.find("already held by another process") != std::string::npos ||
                 o.message.find("WORLD_SIZE=4") != std::string::npos;
    EXPECT_TRUE(named);
    EXPECT_NE(o.message.find("--nproc_per_node"), std::string::npos);
  }
  printCase("--nproc_per_node 4 and 2", outs);
  expectNoSegments(token);
}

TEST(Join, SettingsThatDifferFailEveryRankNamingTheSetting) {
  const std::string token = uniqueToken("set");
  auto outs = runBeliefs({0, 1, 2, 3}, {4, 4, 4, 4}, joinOptions(token), [](int c, Options& o) {
    if (c == 3) o.algo = AllReduceAlgo::kTree;
  });
  expectAllFailed(outs, 8.0, {"GYRE_ALGO=", "tree", "rank 3"});
  printCase("GYRE_ALGO=tree on rank 3", outs);
}

// Rank 1 holds another secret: the store refuses it, so it fails at once saying so; the
// others learn it from the store's record of the refusal (ring/join.h, checkRefusals)
// after the grace of 3 s. Neither secret is printed anywhere.
TEST(Join, AnotherSecretFailsAtOnceAndEveryRankNamesIt) {
  const std::string token = uniqueToken("tok");
  auto outs = runBeliefs({0, 1, 2}, {3, 3, 3}, joinOptions(token), [&](int c, Options& o) {
    if (c == 1) o.token = token + "x";
  });
  expectAllFailed(outs, 8.0, {"GYRE_TOKEN", "rank 1", "secret"});
  EXPECT_LT(outs[1].seconds, 1.0) << outs[1].describe();
  EXPECT_NE(outs[1].message.find("holds another secret than this rank"), std::string::npos);
  for (const RankResult& o : outs) {
    EXPECT_EQ(o.message.find(token), std::string::npos) << o.describe();
    EXPECT_EQ(o.log.find(token), std::string::npos) << o.describe();
  }
  printCase("another secret on rank 1", outs);
}

// One rank without the secret, or rank 0 (the store) without it: the odd one or the
// others fail at once saying which side lacks it; the rest name the refused rank within
// seconds (the store records the mismatch either way).
TEST(Join, ASecretOnOneSideOnlyFailsEveryRankWithinSeconds) {
  const std::string token = uniqueToken("half");
  auto outs = runBeliefs({0, 1, 2}, {3, 3, 3}, joinOptions(token), [&](int c, Options& o) {
    if (c == 2) o.token.clear();
  });
  expectAllFailed(outs, 8.0, {"rank 2", "GYRE_TOKEN"});
  EXPECT_LT(outs[2].seconds, 1.0) << outs[2].describe();
  EXPECT_NE(outs[2].message.find("requires the job's secret and this process has none"),
            std::string::npos) << outs[2].describe();

  const std::string token2 = uniqueToken("half0");
  auto outs0 = runBeliefs({0, 1, 2}, {3, 3, 3}, joinOptions(token2), [&](int c, Options& o) {
    if (c == 0) o.token.clear();
  });
  for (const RankResult& o : outs0) {
    SCOPED_TRACE(o.describe());
    EXPECT_TRUE(o.reported && !o.ok && !o.hung);
    EXPECT_LT(o.seconds, 8.0);
    EXPECT_NE(o.message.find("GYRE_TOKEN"), std::string::npos);
  }
  EXPECT_NE(outs0[1].message.find("the store asks for no secret, but this rank has one"),
            std::string::npos) << outs0[1].describe();
  EXPECT_NE(outs0[0].message.find("could not join"), std::string::npos)
      << outs0[0].describe();
  for (const auto* set : {&outs, &outs0}) {
    for (const RankResult& o : *set) {
      EXPECT_EQ(o.message.find(token), std::string::npos);
      EXPECT_EQ(o.log.find(token), std::string::npos);
    }
  }
  printCase("no secret on rank 0 only", outs0);
}

TEST(Join, ARankWhoseSetupFailedIsNamedByEveryRank) {
  const std::string token = uniqueToken("ifn");
  auto outs = runBeliefs({0, 1, 2, 3}, {4, 4, 4, 4}, joinOptions(token), [](int c, Options& o) {
    if (c == 2) o.socketIfname = "=nosuchif0";
  });
  expectAllFailed(outs, 8.0, {"rank 2", "nosuchif0"});
  printCase("GYRE_SOCKET_IFNAME=nosuch on rank 2", outs);
}

TEST(Join, ARankKilledWhileJoiningEndsTheJoinOnEveryRank) {
  const std::string token = uniqueToken("kill");
  const uint16_t port = testing::freePort();
  ForkedRanks group(4);
  Options o = joinOptions(token);
  group.start([&](int c) { createAndSum("127.0.0.1", port, c, 5, o); });  // rank 4 never comes
  // Rank 0's progress line once the four have checked in: they wait for rank 4 now.
  group.waitForLog(0, "4 of 5 ranks have joined", 20s);
  const double killedAt = std::chrono::duration<double>(Clock::now() - group.started()).count();
  group.kill(3);
  auto outs = group.join(group.started() + 25s);
  expectAllFailed(outs, killedAt + 4.0, {"rank 3", "exited"}, /*skip=*/3);
  for (int c = 0; c < 3; ++c) EXPECT_GT(outs[c].seconds, killedAt) << outs[c].message;
  printCase("rank 3 killed while the others wait in the join", {outs[0], outs[1], outs[2]});
  expectNoSegments(token);
}

TEST(Join, AMissingRankIsReportedWhileWaitingThenAtTheJoinTimeout) {
  const std::string token = uniqueToken("miss");
  Options o = joinOptions(token);
  o.joinTimeout = 2500ms;
  o.joinProgressFirst = 400ms;
  o.joinProgressEvery = 800ms;
  auto outs = runBeliefs({0, 1}, {3, 3}, o);
  for (const RankResult& out : outs) {
    SCOPED_TRACE(out.describe());
    EXPECT_TRUE(out.reported && !out.ok && !out.hung);
    EXPECT_EQ(out.code, static_cast<int>(ErrorCode::kTimeout));
    EXPECT_GT(out.seconds, 2.4);
    EXPECT_LT(out.seconds, 6.0);
    EXPECT_NE(out.message.find("GYRE_JOIN_TIMEOUT=2.5 s"), std::string::npos);
    EXPECT_NE(out.message.find("did not complete after 2."), std::string::npos);
    EXPECT_NE(out.message.find("missing 2"), std::string::npos);
    EXPECT_EQ(out.message.find("1800"), std::string::npos);
    // Progress at 0.4 s, 1.2 s, 2.0 s: how many joined, who is missing, where.
    size_t lines = 0;
    for (size_t at = 0; (at = out.log.find("2 of 3 ranks have joined; missing 2", at)) !=
                        std::string::npos;
         ++at) {
      ++lines;
    }
    EXPECT_GE(lines, 2u);
    EXPECT_NE(out.log.find("the bootstrap store at 127.0.0.1:"), std::string::npos);
  }
  printCase("rank 2 never started (GYRE_JOIN_TIMEOUT=2.5)", outs);
}

TEST(Join, ALateRankIsWaitedForAndRankZeroSaysWhenAllJoined) {
  const std::string token = uniqueToken("late");
  const uint16_t port = testing::freePort();
  Options o = joinOptions(token);
  o.joinProgressFirst = 300ms;
  ForkedRanks group(3);
  group.start([&](int c) {
    if (c == 2) group.waitForLog(0, "missing 2", 20s);  // late: rank 0 has said so
    createAndSum("127.0.0.1", port, c, 3, o);
  });
  auto outs = group.join(group.started() + 25s);
  for (const RankResult& out : outs) EXPECT_TRUE(out.ok) << out.describe();
  EXPECT_NE(outs[0].log.find("missing 2"), std::string::npos) << outs[0].log;
  EXPECT_NE(outs[0].log.find("all 3 ranks joined in"), std::string::npos) << outs[0].log;
}

// Ranks on two (faked) hosts probe the link between them at creation, and every rank
// reads the result from the store. Rank 0 serves the store and its process ends as soon
// as creation returns: creation must end together on every rank (the join's last
// barrier comes after the probe), or the others fail with "lost the connection to the
// bootstrap store" while they read the probe's result.
TEST(Join, CreationEndsTogetherSoRankZeroMayExitAtOnce) {
  for (int round = 0; round < 5; ++round) {
    const std::string token = uniqueToken("together");
    const uint16_t port = testing::freePort();
    Options o = joinOptions(token);
    ForkedRanks group(4);
    group.start([&](int c) {
      Options mine = o;
      mine.hostId = c < 2 ? "host-a" : "host-b";
      std::shared_ptr<Store> store = joinStore("127.0.0.1", port, c, mine);
      auto comm = Communicator::create(store, c, 4, mine, "127.0.0.1");
      if (c != 0) group.waitEnded(0);  // rank 0's process, and the store, go first
    });
    auto outs = group.join(group.started() + 25s);
    for (const RankResult& out : outs) EXPECT_TRUE(out.ok) << "round " << round << ": " << out.describe();
  }
}

// SIGKILL one rank at a random point of startup (connecting to the store, joining,
// creating segments, connecting pipes, the first sums): the others end (failing, naming
// it, or done if the kill came late) without hanging, and nothing of the job is left in
// /dev/shm. A rank killed before it reached the store cannot be told from one not
// started yet: the others end at GYRE_JOIN_TIMEOUT (3 s here) naming it as missing.
TEST(Join, KilledAtRandomPointsOfStartupLeavesNothingBehind) {
  std::mt19937 rng(20261201);
  const int runs = 12;
  double worst = 0;
  for (int run = 0; run < runs; ++run) {
    const std::string token = fmt::format("jrand{}_{}", run, ::getpid());
    const uint16_t port = testing::freePort();
    const int n = 3 + run % 2;
    // Odd runs kill the whole job at once (as a scheduler does): nobody is left to
    // clean up, so nothing may ever have had a name in /dev/shm.
    const bool wholeJob = run % 2 == 1;
    const int victim = static_cast<int>(rng() % static_cast<unsigned>(n));
    // Half the kills within the first 60 ms, where creation's barriers are on this machine
    // (runs 0, 1, 4, 5, 8, 9), the others anywhere in the first 500 ms.
    const auto delay = std::chrono::milliseconds(rng() % (run % 4 < 2 ? 60u : 500u));
    Options o = joinOptions(token);
    o.timeout = 10s;
    o.joinTimeout = 3s;
    ForkedRanks group(n);
    group.start([&](int c) { createAndSum("127.0.0.1", port, c, n, o, 20); });
    std::this_thread::sleep_for(delay);  // models time passing: a random point of startup
    const double killedAt = std::chrono::duration<double>(Clock::now() - group.started()).count();
    if (wholeJob) {
      for (int c = 0; c < n; ++c) group.kill(c);
    } else {
      group.kill(victim);
    }
    auto outs = group.join(group.started() + 25s);
    for (const RankResult& out : outs) {
      if (out.rank == victim || wholeJob) continue;
      SCOPED_TRACE(fmt::format("run {}: victim {} of {} at {:.3f} s; {}", run, victim, n,
                               killedAt, out.describe()));
      EXPECT_TRUE(out.reported && !out.hung);
      if (!out.ok) {
        worst = std::max(worst, out.seconds - killedAt);
        EXPECT_LT(out.seconds - killedAt, 3.0 + 3.0);
        EXPECT_TRUE(out.message.find(fmt::format("rank {}", victim)) != std::string::npos ||
                    out.message.find(fmt::format("missing {}", victim)) != std::string::npos);
      }
    }
    EXPECT_TRUE(testing::shmSegmentsOf(token).empty())
        << "run " << run << ": " << (wholeJob ? "all" : "victim " + std::to_string(victim))
        << " killed at " << killedAt << " s left "
        << testing::shmSegmentsOf(token).size() << " segments";
  }
  std::printf("[join] SIGKILL at random points of startup: %d runs, 0 hangs, worst kill->error "
              "%.2f s, nothing left in /dev/shm\n", runs, worst);
}

// Creation's last two barriers ("done": every rank created; "left": every rank made its
// last store call, so rank 0 may exit with the store). A rank killed between them, or
// inside arrive() between counting itself and marking itself, has finished creating: the
// others must return (its death is their next collective's error), and rank 0 must not
// wait GYRE_JOIN_TIMEOUT (30 s here) for a "left" that never comes. And rank 0 killed
// there, after every rank passed "done", takes the store with it: the others have created
// and go on. Driven through Join itself, so each window is hit exactly rather than by a
// lucky kill.
TEST(Join, ARankKilledAfterCreatingDoesNotHoldRankZeroAtTheLastBarrier) {
  enum Window { kBeforeLeft, kCountedNotMarked, kStoreGoneBeforeLeft };
  for (Window window : {kBeforeLeft, kCountedNotMarked, kStoreGoneBeforeLeft}) {
    const uint16_t port = testing::freePort();
    Options o = joinOptions(uniqueToken("lastbarrier"));
    const int n = 3;
    const int victim = window == kStoreGoneBeforeLeft ? 0 : 1;
    ForkedRanks group(n);
    group.start([&](int c) {
      std::shared_ptr<Store> store = joinStore("127.0.0.1", port, c, o);
      Join join(*store, c, n, o);
      join.claimPrefix();
      Claim mine;
      mine.rank = c;
      mine.size = n;
      mine.pid = ::getpid();
      mine.hostId = mine.hostName = "test-host";
      mine.address = "127.0.0.1:1";
      mine.process = processIdentity();
      mine.token = "-";
      try {
        join.checkIn(mine);
        if (c == victim && window == kCountedNotMarked) {
          // Once the others have arrived, the first of arrive("done")'s two calls only.
          for (int r : {0, 2}) {
            store->wait({fmt::format("{}/join/done/{}", join.prefix(), r)});
          }
          store->add(join.prefix() + "/join/done", 1);
          ::raise(SIGKILL);
        }
        join.arrive("done", "finishing creation");
        join.waitAll("done", "finishing creation");
        if (window == kStoreGoneBeforeLeft && c != 0) {
          store->setString(fmt::format("test/passed/{}", c), "1");
          group.waitEnded(0, 5s);  // rank 0's process, and the store with it, is gone
          try {
            store->check({"test/none"});
          } catch (const Error& e) {
            if (e.cause() != ErrorCause::kStoreLost) throw;
          }
        }
        if (c == victim) {
          if (window == kStoreGoneBeforeLeft) store->wait({"test/passed/1", "test/passed/2"});
          ::raise(SIGKILL);
        }
        join.leave();
      } catch (const Error& e) {
        join.publishFailure(e);  // as creation does: rank 0 keeps the store while others read it
        throw;
      }
    });
    auto outs = group.join(group.started() + 25s);
    for (const RankResult& out : outs) {
      if (out.rank == victim) continue;
      SCOPED_TRACE(fmt::format("window {}: {}", static_cast<int>(window), out.describe()));
      EXPECT_TRUE(out.reported && !out.hung);
      EXPECT_LT(out.seconds, 5.0);
      if (window != kCountedNotMarked) {
        EXPECT_TRUE(out.ok);  // the victim had passed "done" on every rank
      } else if (!out.ok) {
        // A poll that read the count just before the victim's add may see its drop first:
        // then the rank fails, naming it, as for any rank that dies while creating.
        EXPECT_NE(out.message.find(fmt::format("rank {}", victim)), std::string::npos);
      }
    }
  }
}

TEST(Join, ASecondJobOnTheSamePortFailsAtOnceAndTheFirstRunsOn) {
  const uint16_t port = testing::freePort();
  Options a = joinOptions(uniqueToken("joba"));
  ForkedRanks first(2);
  first.start([&](int c) {
    std::shared_ptr<Store> store = joinStore("127.0.0.1", port, c, a);
    auto comm = Communicator::create(store, c, 2, a, "127.0.0.1");
    first.say("created");
    const Clock::time_point until = Clock::now() + 4s;
    std::vector<int64_t> v(1000);
    for (;;) {
      int64_t stop = c == 0 && Clock::now() >= until;  // rank 0 decides, for both
      comm->allReduce(&stop, &stop, 1, DataType::kInt64, ReduceOp::kMax);
      if (stop) break;
      std::fill(v.begin(), v.end(), c + 1);
      comm->allReduce(v.data(), v.data(), v.size(), DataType::kInt64, ReduceOp::kSum);
      for (int64_t x : v) {
        if (x != 3) fail(ErrorCode::kInternal, "job A: wrong sum {}", x);
      }
    }
  });
  // Job A runs (its rank 0 serves the store on the port) until 4 s after it formed.
  first.waitFor(0, "created", 20s);
  first.waitFor(1, "created", 20s);
  Options b = joinOptions(uniqueToken("jobb"));
  ForkedRanks second(2);
  second.start([&](int c) { createAndSum("127.0.0.1", port, c, 2, b); });
  auto outs = second.join(second.started() + 20s);
  EXPECT_NE(outs[0].message.find("already in use: another gyre job"), std::string::npos)
      << outs[0].describe();
  // Job B's rank 1 reaches job A's store, which holds another secret.
  EXPECT_NE(outs[1].message.find("the store holds another secret"), std::string::npos)
      << outs[1].describe();
  for (const RankResult& o : outs) {
    EXPECT_TRUE(o.reported && !o.ok && !o.hung) << o.describe();
    EXPECT_LT(o.seconds, 4.0) << o.describe();
  }
  for (const RankResult& o : first.join(first.started() + 30s)) EXPECT_TRUE(o.ok) << o.describe();
  std::printf("[join] second job on a port: its rank 0: %s\n[join] its rank 1: %s\n",
              outs[0].message.c_str(), outs[1].message.c_str());
}

// From the environment, as under a launcher: a typo in one rank's GYRE_* value.
TEST(Join, AGyreVariableTypoOnOneRankFailsEveryRankAtCreation) {
  const uint16_t port = testing::freePort();
  ForkedRanks group(3);
  group.start([&](int c) {
    ::setenv("RANK", std::to_string(c).c_str(), 1);
    ::setenv("WORLD_SIZE", "3", 1);
    ::setenv("MASTER_ADDR", "127.0.0.1", 1);
    ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
    ::setenv("GYRE_JOIN_TIMEOUT", "30", 1);
    if (c == 1) ::setenv("GYRE_REDUCE_ISA", "avx1024", 1);
    auto comm = Communicator::fromEnvironment();
  });
  auto outs = group.join(group.started() + 25s);
  expectAllFailed(outs, 8.0,
                  {"rank 1", "GYRE_REDUCE_ISA='avx1024'", "auto, portable, avx2 or avx512"});
  printCase("GYRE_REDUCE_ISA=avx1024 on rank 1", outs);
}

// Creating again after destroying, as the header advises after a failure: a new store
// per cycle (rank 0 serves it, as gyreCommInitRank's id does), several communicators one
// after another on one store, and from the environment on one port.
class CreateDestroyCycles : public ::testing::TestWithParam<int> {};

TEST_P(CreateDestroyCycles, EveryInitModeCreatesAgain) {
  const int n = GetParam();
  const std::vector<uint16_t> ports = testing::freePorts(5);  // 3 cycles, 1 store, env
  Options o = joinOptions("");
  o.token.clear();  // rank 0 makes one per communicator
  ForkedRanks group(n);
  group.start([&](int c) {
    for (int cycle = 0; cycle < 3; ++cycle) {
      createAndSum("127.0.0.1", ports[cycle], c, n, o, 1);
    }
    std::shared_ptr<Store> store = joinStore("127.0.0.1", ports[3], c, o);
    for (int cycle = 0; cycle < 3; ++cycle) {
      auto comm = Communicator::create(store, c, n, o, "127.0.0.1");
      int64_t x = c + 1;
      comm->allReduce(&x, &x, 1, DataType::kInt64, ReduceOp::kSum);
      if (x != static_cast<int64_t>(n) * (n + 1) / 2) fail(ErrorCode::kInternal, "sum {}", x);
      comm->barrier();
    }
    ::setenv("RANK", std::to_string(c).c_str(), 1);
    ::setenv("WORLD_SIZE", std::to_string(n).c_str(), 1);
    ::setenv("MASTER_ADDR", "127.0.0.1", 1);
    ::setenv("MASTER_PORT", std::to_string(ports[4]).c_str(), 1);
    for (int cycle = 0; cycle < 2; ++cycle) {
      auto comm = Communicator::fromEnvironment();
      int64_t x = c + 1;
      comm->allReduce(&x, &x, 1, DataType::kInt64, ReduceOp::kSum);
      if (x != static_cast<int64_t>(n) * (n + 1) / 2) fail(ErrorCode::kInternal, "sum {}", x);
    }
  });
  for (const RankResult& out : group.join(group.started() + 120s)) EXPECT_TRUE(out.ok) << out.describe();
}

INSTANTIATE_TEST_SUITE_P(Ranks, CreateDestroyCycles, ::testing::Values(2, 3, 5, 8));

}  // namespace
}  // namespace gyre
