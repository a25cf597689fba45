// The test harness itself (fork_ranks.h): results name the rank and how it
// ended, the waits order ranks and the parent without sleeping, the deadline kills what is
// left, and nothing outlives the group.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "base/error.h"
#include "fork_ranks.h"

namespace gyre {
namespace {

using namespace std::chrono_literals;
using testing::ForkedRanks;
using testing::RankResult;

// No child of this process is left, zombie or running.
void expectNoChildren() {
  errno = 0;
  EXPECT_EQ(::waitpid(-1, nullptr, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);
}

TEST(ForkRanks, ResultsNameTheRankHowItEndedAndWhatItSaid) {
  {
    ForkedRanks ranks(4);
    ranks.start([&](int rank) {
      std::fprintf(stderr, "rank %d logs\n", rank);
      ranks.note("pid", std::to_string(::getpid()));
      if (rank == 1) fail(ErrorCode::kMismatch, "rank 1 disagrees");
      if (rank == 2) throw std::runtime_error("not a gyre error");
      if (rank == 3) ::raise(SIGKILL);
    });
    const std::vector<RankResult> rs = ranks.join(Clock::now() + 30s);
    ASSERT_EQ(rs.size(), 4u);
    EXPECT_TRUE(rs[0].ok && rs[0].reported && !rs[0].hung) << rs[0].describe();
    EXPECT_EQ(rs[0].status, 0);
    EXPECT_EQ(rs[0].log, "rank 0 logs\n");
    EXPECT_EQ(rs[0].note("pid"), std::to_string(ranks.pid(0)));
    EXPECT_TRUE(rs[1].reported && !rs[1].ok);
    EXPECT_EQ(rs[1].code, static_cast<int>(ErrorCode::kMismatch));
    EXPECT_NE(rs[1].message.find("rank 1 disagrees"), std::string::npos);
    EXPECT_EQ(WEXITSTATUS(rs[1].status), 1);
    EXPECT_NE(rs[1].describe().find("rank 1: exit status 1"), std::string::npos) << rs[1].describe();
    EXPECT_EQ(rs[2].code, 0);
    EXPECT_EQ(rs[2].message, "not a gyre error");
    EXPECT_FALSE(rs[3].reported);
    EXPECT_TRUE(rs[3].killedBy(SIGKILL));
    EXPECT_EQ(rs[3].note("pid"), std::to_string(ranks.pid(3)));  // noted before the kill
    EXPECT_NE(rs[3].describe().find("rank 3: killed by signal 9"), std::string::npos);
    for (const RankResult& r : rs) {
      EXPECT_GE(r.seconds, 0.0);
      EXPECT_LT(r.seconds, 30.0);
    }
  }
  expectNoChildren();
}

TEST(ForkRanks, TheDeadlineKillsAHungRankAndMarksIt) {
  ForkedRanks ranks(2);
  ranks.start([&](int rank) {
    if (rank == 1) ranks.await("never", 1, 60s);
  });
  const auto start = Clock::now();
  const std::vector<RankResult> rs = ranks.join(start + 500ms);
  EXPECT_TRUE(rs[0].ok && !rs[0].hung);
  EXPECT_TRUE(rs[1].hung && !rs[1].reported) << rs[1].describe();
  EXPECT_TRUE(rs[1].killedBy(SIGKILL));
  EXPECT_LT(Clock::now() - start, 5s);
  expectNoChildren();
}

TEST(ForkRanks, KillLastEndsAStoppedRankOnceTheOthersEnded) {
  ForkedRanks ranks(3);
  ranks.start([&](int rank) {
    if (rank == 2) ::raise(SIGSTOP);
    ranks.waitFor(-1, "go");
  });
  ranks.say("go");
  const std::vector<RankResult> rs = ranks.join(Clock::now() + 30s, /*killLast=*/2);
  EXPECT_TRUE(rs[0].ok && rs[1].ok);
  EXPECT_FALSE(rs[2].hung);
  EXPECT_TRUE(rs[2].killedBy(SIGKILL));
}

TEST(ForkRanks, BarriersAndSaysOrderTheRanks) {
  ForkedRanks ranks(5);
  ranks.start([&](int rank) {
    // Rank r goes only once rank r-1 said so: the order of "turn" posts is the ranks'.
    if (rank > 0) ranks.waitFor(rank - 1, "done");
    const uint32_t before = ranks.count("turn");
    if (before != static_cast<uint32_t>(rank)) {
      fail(ErrorCode::kInternal, "rank {} went after {} others", rank, before);
    }
    ranks.post("turn");
    ranks.say("done");
    ranks.barrier("all");
    if (ranks.count("turn") != 5) fail(ErrorCode::kInternal, "past the barrier early");
  });
  testing::expectAllOk(ranks.join(Clock::now() + 30s));
  EXPECT_EQ(ranks.count("turn"), 5u);
}

TEST(ForkRanks, AWaitThatTimesOutSaysWhatItWaitedFor) {
  ForkedRanks ranks(1);
  ranks.start([&](int) { ranks.await("nobody posts this", 2, 100ms); });
  const RankResult r = ranks.join(Clock::now() + 30s)[0];
  EXPECT_EQ(r.code, static_cast<int>(ErrorCode::kTimeout));
  EXPECT_NE(r.message.find("rank 0: 'nobody posts this' was posted 0 of 2 times in 100 ms"),
            std::string::npos)
      << r.message;
  EXPECT_FALSE(ranks.tryAwait("nobody posts this", 1, 10ms));
}

TEST(ForkRanks, WaitEndedSeesAKilledRankInTheOthersAndTheParent) {
  ForkedRanks ranks(3);
  ranks.start([&](int rank) {
    if (rank == 0) ranks.stayAlive();  // until the parent kills it
    if (rank == 1) {
      ranks.waitEnded(0);
      ranks.say("saw 0 end");
    }
    if (rank == 2) ranks.waitFor(1, "saw 0 end");
  });
  EXPECT_FALSE(ranks.tryWaitEnded(0, 50ms));
  ranks.kill(0);
  EXPECT_TRUE(ranks.tryWaitEnded(0, 10s));
  const std::vector<RankResult> rs = ranks.join(Clock::now() + 30s);
  EXPECT_TRUE(rs[0].killedBy(SIGKILL));
  EXPECT_TRUE(rs[1].ok) << rs[1].describe();
  EXPECT_TRUE(rs[2].ok) << rs[2].describe();
}

TEST(ForkRanks, StayAliveEndsWhenTheParentJoins) {
  ForkedRanks ranks(2);
  ranks.start([&](int) { ranks.stayAlive(); });
  EXPECT_FALSE(ranks.tryWaitEnded(1, 50ms));
  testing::expectAllOk(ranks.join(Clock::now() + 30s));
}

TEST(ForkRanks, RanksKnowEachOthersPidsAndReadWhatOnePublished) {
  ForkedRanks ranks(3);
  ranks.start([&](int rank) {
    if (rank == 0) ranks.publish("greeting", std::string("hello\0world", 11));
    if (ranks.read("greeting") != std::string("hello\0world", 11)) fail(ErrorCode::kInternal, "read");
    for (int r = 0; r < 3; ++r) ranks.note(fmt::format("pid{}", r), std::to_string(ranks.pidOf(r)));
  });
  const std::vector<RankResult> rs = ranks.join(Clock::now() + 30s);
  for (const RankResult& r : rs) {
    ASSERT_TRUE(r.ok) << r.describe();
    for (int other = 0; other < 3; ++other) {
      EXPECT_EQ(r.note(fmt::format("pid{}", other)), std::to_string(ranks.pid(other)));
    }
  }
}

TEST(ForkRanks, ARankWaitsForAnothersLog) {
  ForkedRanks ranks(2);
  ranks.start([&](int rank) {
    if (rank == 0) {
      std::fprintf(stderr, "the line rank 1 waits for\n");
      ranks.waitFor(1, "read it");
    } else {
      ranks.waitForLog(0, "rank 1 waits for");
      ranks.say("read it");
    }
  });
  testing::expectAllOk(ranks.join(Clock::now() + 30s));
}

TEST(ForkRanks, AGoogleTestAssertionInARankFailsItsResult) {
  ForkedRanks ranks(1);
  ranks.start([&](int) { ADD_FAILURE() << "seen only by the rank"; });
  const RankResult r = ranks.join(Clock::now() + 30s)[0];
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.message.find("a GoogleTest assertion failed in this rank"), std::string::npos)
      << r.message;
}

TEST(ForkRanks, TheDestructorKillsAndReapsWhatIsLeft) {
  pid_t pid = -1;
  {
    ForkedRanks ranks(1);
    ranks.start([&](int) { ranks.await("never", 1, 60s); });
    pid = ranks.pid(0);
    EXPECT_EQ(::kill(pid, 0), 0);
  }
  EXPECT_NE(::kill(pid, 0), 0);
  expectNoChildren();
}

TEST(ForkRanks, ARankStartedAloneRunsWithTheGroupsOrdering) {
  ForkedRanks ranks(2);
  ranks.startRank(0, [&](int) { ranks.waitFor(1, "here"); });
  ranks.startRank(1, [&](int) {
    ranks.say("here");
    ranks.waitEnded(0);  // started before it: its pipe is known here
  });
  testing::expectAllOk(ranks.join(Clock::now() + 30s));
}

}  // namespace
}  // namespace gyre
