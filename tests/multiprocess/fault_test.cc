// Faults in real processes: a rank SIGKILLed at a random point of a stream of
// collectives (2..8 ranks, tcp and shm), a rank SIGSTOPped, abort() from another
// thread. Every surviving rank must fail with an error naming the rank at fault, within
// a bound far below its timeout (so a rank that waited for the timeout fails the
// test); none may hang; no shm segment or process may be left behind.
//
// Each test prints one "[fault]" line per configuration: runs, and the worst time from
// fault to error over every surviving rank.
#include <signal.h>

#include <algorithm>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "base/error.h"
#include "fork_ranks.h"
#include "ring/communicator.h"

namespace gyre {
namespace {

using testing::CommRanks;
using testing::RankResult;
using testing::secondsBetween;
using testing::shmSegmentsOf;

// Runs per (transport, ranks) configuration, and the seed of the victims and delays:
// FAULT_TEST_RUNS and FAULT_TEST_SEED override them for longer campaigns.
int killRuns() {
  const char* v = std::getenv("FAULT_TEST_RUNS");
  return v ? std::max(1, std::atoi(v)) : 3;
}
unsigned seedBase() {
  const char* v = std::getenv("FAULT_TEST_SEED");
  return v ? static_cast<unsigned>(std::strtoul(v, nullptr, 10)) : 1234u;
}

// A stream of collectives of mixed sizes, each checked (sum of ranks + 1), until one
// fails; each rank posts "streaming" on `group` after its first. Sizes cross the slot
// size so kills land inside multi-slice collectives.
testing::RankBody collectiveStream(CommRanks& group) {
  return [&group](Communicator& comm, int) {
    const size_t counts[] = {1, 7, 1000, 40000, 300000};
    std::vector<float> buf(300000);
    const float want = static_cast<float>(comm.size() * (comm.size() + 1) / 2);
    for (uint64_t i = 0;; ++i) {
      if (i == 1) group.post("streaming");
      if (i % 7 == 3) {
        comm.barrier();
        continue;
      }
      size_t count = counts[i % 5];
      std::fill(buf.begin(), buf.begin() + count, static_cast<float>(comm.rank() + 1));
      comm.allReduce(buf.data(), buf.data(), count, DataType::kFloat32, ReduceOp::kSum);
      for (size_t k = 0; k < count; k += 997) {
        if (buf[k] != want) throw std::runtime_error(fmt::format("wrong result at {}", k));
      }
    }
  };
}

struct KillCase {
  TransportKind transport;
  int ranks;
};

class KillOneRank : public ::testing::TestWithParam<KillCase> {};

TEST_P(KillOneRank, EverySurvivorNamesTheDeadRankPromptly) {
  const KillCase kc = GetParam();
  const char* transport = kc.transport == TransportKind::kTcp ? "tcp" : "shm";
  const unsigned seed = seedBase() + kc.ranks * 10 + static_cast<unsigned>(kc.transport);
  std::mt19937 rng(seed);
  const int runs = killRuns();
  double worst = 0;
  for (int run = 0; run < runs; ++run) {
    Options o;
    o.transport = kc.transport;
    o.timeout = std::chrono::seconds(30);  // far above the bound below: no waiting it out
    o.slotBytes = 64 * 1024;
    o.token = fmt::format("ft{}r{}n{}{}", ::getpid(), run, kc.ranks, transport);
    const int victim = static_cast<int>(rng() % kc.ranks);
    const auto delay = std::chrono::milliseconds(rng() % 250);
    CommRanks group(kc.ranks, o);
    group.start(collectiveStream(group));
    ASSERT_TRUE(group.waitReady(std::chrono::seconds(30))) << "ranks did not start";
    std::this_thread::sleep_for(delay);  // models time passing: a random point of the stream
    const auto killedAt = Clock::now();
    ::kill(group.pid(victim), SIGKILL);
    auto reports = group.join(killedAt + std::chrono::seconds(10));
    for (const RankResult& r : reports) {
      SCOPED_TRACE(fmt::format("{} ranks over {}, run {}, rank {} killed after {} ms", kc.ranks,
                               transport, run, victim, delay.count()));
      EXPECT_FALSE(r.hung) << r.describe();
      if (r.rank == victim) continue;
      ASSERT_TRUE(r.reported && !r.ok) << r.describe();
      EXPECT_NE(r.message.find(fmt::format("rank {} failed", victim)), std::string::npos)
          << r.describe();
      EXPECT_NE(r.message.find(fmt::format("rank {}: ", r.rank)), std::string::npos) << r.message;
      double seconds = secondsBetween(killedAt, r.endedAt);
      worst = std::max(worst, seconds);
      EXPECT_LT(seconds, 3.0) << r.describe();
      EXPECT_LT(r.destroySeconds, 1.0) << r.describe();
    }
    EXPECT_EQ(shmSegmentsOf(o.token), std::vector<std::string>{});
  }
  std::printf("[fault] SIGKILL %s %d ranks: %d runs (seed %u), worst fault->error %.1f ms\n",
              transport, kc.ranks, runs, seed, worst * 1e3);
}

std::vector<KillCase> killCases() {
  std::vector<KillCase> cases;
  for (TransportKind t : {TransportKind::kTcp, TransportKind::kShm}) {
    for (int n = 2; n <= 8; ++n) cases.push_back({t, n});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Faults, KillOneRank, ::testing::ValuesIn(killCases()),
                         [](const auto& info) {
                           return fmt::format(
                               "{}_{}ranks",
                               info.param.transport == TransportKind::kTcp ? "tcp" : "shm",
                               info.param.ranks);
                         });

struct StopCase {
  TransportKind transport;
  int ranks;
  int victim;
};

class StopOneRank : public ::testing::TestWithParam<StopCase> {};

TEST_P(StopOneRank, OthersTimeOutNamingIt) {
  const StopCase sc = GetParam();
  const char* transport = sc.transport == TransportKind::kTcp ? "tcp" : "shm";
  Options o;
  o.transport = sc.transport;
  o.timeout = std::chrono::seconds(2);
  o.stallWarn = std::chrono::milliseconds(1000);
  o.slotBytes = 64 * 1024;
  o.token = fmt::format("fs{}n{}{}", ::getpid(), sc.ranks, transport);
  CommRanks group(sc.ranks, o);
  group.start(collectiveStream(group));
  ASSERT_TRUE(group.tryAwait("streaming", sc.ranks, std::chrono::seconds(30)));
  const auto stoppedAt = Clock::now();
  ::kill(group.pid(sc.victim), SIGSTOP);
  // Survivors fail by themselves; the stopped rank is killed once they have.
  auto reports = group.join(stoppedAt + std::chrono::seconds(8), sc.victim);
  double worst = 0;
  for (const RankResult& r : reports) {
    if (r.rank == sc.victim) continue;
    SCOPED_TRACE(fmt::format("{} ranks over {}, rank {} stopped", sc.ranks, transport, sc.victim));
    ASSERT_TRUE(r.reported && !r.ok && !r.hung) << r.describe();
    EXPECT_EQ(r.code, static_cast<int>(ErrorCode::kTimeout)) << r.describe();
    EXPECT_NE(r.message.find(fmt::format("rank {} stalled", sc.victim)), std::string::npos)
        << r.describe();
    double seconds = secondsBetween(stoppedAt, r.endedAt);
    worst = std::max(worst, seconds);
    EXPECT_LT(seconds, 2.0 + 2.0) << r.describe();  // the timeout, plus slack
    // The stall report came first, once, naming the stopped rank.
    EXPECT_NE(r.log.find(fmt::format("rank {} has not arrived", sc.victim)), std::string::npos)
        << r.describe();
  }
  EXPECT_EQ(shmSegmentsOf(o.token), std::vector<std::string>{});
  const RankResult& last = reports[(sc.victim + sc.ranks - 1) % sc.ranks];
  std::printf("[fault] example error: %s\n", last.message.c_str());
  const size_t stall = last.log.find("stall:");
  if (stall != std::string::npos) {
    std::printf("[fault] example stall report: %s\n",
                last.log.substr(stall, last.log.find('\n', stall) - stall).c_str());
  }
  std::printf(
      "[fault] SIGSTOP %s %d ranks (rank %d): 1 run, 0 hangs, worst fault->error %.2f s "
      "(timeout 2 s)\n",
      transport, sc.ranks, sc.victim, worst);
}

INSTANTIATE_TEST_SUITE_P(
    Faults, StopOneRank,
    ::testing::Values(StopCase{TransportKind::kTcp, 2, 1}, StopCase{TransportKind::kTcp, 4, 0},
                      StopCase{TransportKind::kShm, 3, 1}, StopCase{TransportKind::kShm, 5, 2}),
    [](const auto& info) {
      return fmt::format("{}_{}ranks_rank{}",
                         info.param.transport == TransportKind::kTcp ? "tcp" : "shm",
                         info.param.ranks, info.param.victim);
    });

class AbortFromAnotherThread : public ::testing::TestWithParam<TransportKind> {};

// Rank 0 blocks in an all-reduce the others join only once it was aborted; a second
// thread aborts it. The blocked call must end at once with kAborted, destruction must be
// prompt, and the others must fail naming rank 0's abort as soon as they call.
TEST_P(AbortFromAnotherThread, EndsThePendingCallAndTellsThePeers) {
  Options o;
  o.transport = GetParam();
  o.timeout = std::chrono::seconds(30);
  o.token = fmt::format("fa{}t{}", ::getpid(), static_cast<int>(GetParam()));
  CommRanks group(3, o);
  group.start([&group](Communicator& comm, int rank) {
    std::vector<float> buf(100000, 1.0f);
    if (rank != 0) group.waitFor(0, "aborted");
    std::thread aborter;
    if (rank == 0) {
      aborter = std::thread([&comm, &group] {
        // Time for rank 0 to be blocked in the call: nothing signals from inside it.
        std::this_thread::sleep_for(std::chrono::milliseconds(200));  // see above
        comm.abort();
        group.say("aborted");
      });
    }
    auto start = Clock::now();
    try {
      comm.allReduce(buf.data(), buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum);
    } catch (const Error& e) {
      if (aborter.joinable()) aborter.join();
      double waited = secondsBetween(start, Clock::now());
      if (rank == 0 && waited > 0.5) throw std::runtime_error("abort took too long");
      if (rank != 0 && waited > 0.5) throw std::runtime_error("the abort reached us too late");
      throw;
    }
    if (aborter.joinable()) aborter.join();
  });
  ASSERT_TRUE(group.waitReady(std::chrono::seconds(30)));
  auto reports = group.join(Clock::now() + std::chrono::seconds(10));
  for (const RankResult& r : reports) {
    ASSERT_TRUE(r.reported && !r.ok && !r.hung) << r.describe();
    EXPECT_EQ(r.code, static_cast<int>(ErrorCode::kAborted)) << r.describe();
    EXPECT_NE(r.message.find("abort() was called on rank 0"), std::string::npos)
        << r.describe();
    EXPECT_LT(r.destroySeconds, 0.5) << r.describe();
  }
}

INSTANTIATE_TEST_SUITE_P(Faults, AbortFromAnotherThread,
                         ::testing::Values(TransportKind::kTcp, TransportKind::kShm),
                         [](const auto& info) {
                           return info.param == TransportKind::kTcp ? "tcp" : "shm";
                         });

// An aborted communicator: later calls fail at once naming the first error, and
// destroying it is prompt even though a peer is still there.
TEST(AbortedCommunicator, LaterCallsFailAtOnceAndDestructionIsPrompt) {
  Options o;
  o.timeout = std::chrono::seconds(30);
  CommRanks group(2, o);
  group.start([&group](Communicator& comm, int rank) {
    if (rank == 1) {
      group.waitEnded(0);  // there until rank 0 has destroyed its communicator and exited
      return;
    }
    comm.abort();
    comm.abort();  // idempotent
    float x = 1;
    auto start = Clock::now();
    try {
      comm.allReduce(&x, &x, 1, DataType::kFloat32, ReduceOp::kSum);
    } catch (const Error& e) {
      if (secondsBetween(start, Clock::now()) > 0.1) throw std::runtime_error("not at once");
      throw;
    }
  });
  auto reports = group.join(Clock::now() + std::chrono::seconds(10));
  ASSERT_TRUE(reports[0].reported && !reports[0].ok) << reports[0].describe();
  EXPECT_EQ(reports[0].code, static_cast<int>(ErrorCode::kAborted));
  EXPECT_NE(reports[0].message.find("called on an aborted communicator"), std::string::npos)
      << reports[0].message;
  EXPECT_LT(reports[0].destroySeconds, 0.5);
  EXPECT_TRUE(reports[1].ok) << reports[1].describe();
}

}  // namespace
}  // namespace gyre
