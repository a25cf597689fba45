// How failures are named, in one process: the stall inspector's chain of waits and the
// messages and abort notices of ring/failure_propagation.h.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/error.h"
#include "ring/failure_propagation.h"
#include "collectives/stall_inspector.h"

namespace gyre {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// A send pipe that only records what is published on it.
class RecordingPipe final : public SendPipe {
 public:
  std::byte* acquire(const WaitContext&) override { return nullptr; }
  void post(size_t, const Tag&) override {}
  void flush(const WaitContext&) override {}
  size_t slotBytes() const override { return 0; }
  int peer() const override { return 1; }
  void publish(const PeerStatus& s) override { published.push_back(s); }
  std::vector<PeerStatus> published;
};

CollectiveCall call(uint32_t seq) {
  CollectiveCall c;
  c.count = 1024;
  c.seq = seq;
  return c;
}

PeerStatus waitingFor(int writer, int suspect, uint8_t hops) {
  PeerStatus s;
  s.state = PeerStatus::State::kWaiting;
  s.writer = writer;
  s.suspect = suspect;
  s.hops = hops;
  return s;
}

TEST(StallInspector, AdoptsTheSuspectOfAWaitingPeerAndTellsTheNeighbours) {
  StallInspector inspector(/*rank=*/3, /*size=*/6, /*stallWarn=*/1h, /*timeout=*/4s);
  RecordingPipe right;
  inspector.attach({&right}, {});
  inspector.begin(call(5));
  const auto longAgo = Clock::now() - 2s;  // past the beacon delay (timeout / 4)
  inspector.waiting(2, "a slice", longAgo, nullptr);
  ASSERT_EQ(right.published.size(), 1u);
  EXPECT_EQ(right.published[0].suspect, 2);  // nobody else known: the peer itself
  PeerStatus peer = waitingFor(2, 0, 2);     // rank 2 waits, and its chain ends at rank 0
  inspector.waiting(2, "a slice", longAgo, &peer);
  ASSERT_EQ(right.published.size(), 2u);
  EXPECT_EQ(right.published[1].suspect, 0);
  EXPECT_EQ(right.published[1].hops, 3);
  EXPECT_EQ(right.published[1].seq, 5u);
  inspector.waiting(2, "a slice", longAgo, &peer);
  EXPECT_EQ(right.published.size(), 2u) << "unchanged: nothing new to say";
  StallInspector::Blame b = inspector.blame();
  EXPECT_EQ(b.suspect, 0);
  EXPECT_NE(b.story.find("ends at rank 0"), std::string::npos) << b.story;
  inspector.received(64);  // data moves again
  ASSERT_EQ(right.published.size(), 3u);
  EXPECT_EQ(right.published[2].state, PeerStatus::State::kResumed);
}

TEST(StallInspector, ACycleOfWaitsBlamesThePeer) {
  StallInspector inspector(1, 3, 1h, 4s);
  inspector.begin(call(0));
  PeerStatus backToUs = waitingFor(0, 1, 1);  // rank 0 waits for us
  inspector.waiting(0, "a slice", Clock::now() - 2s, &backToUs);
  EXPECT_EQ(inspector.blame().suspect, 0);
  PeerStatus tooLong = waitingFor(0, 2, 2);  // a chain as long as the ring
  inspector.waiting(0, "a slice", Clock::now() - 2s, &tooLong);
  EXPECT_EQ(inspector.blame().suspect, 0);
}

TEST(StallInspector, ShortWaitsSayNothing) {
  StallInspector inspector(0, 4, 60s, 1800s);
  RecordingPipe right;
  inspector.attach({&right}, {});
  inspector.begin(call(0));
  inspector.waiting(1, "a slice", Clock::now() - 200ms, nullptr);
  EXPECT_TRUE(right.published.empty());
}

TEST(FailureNaming, RelayedAbortKeepsTheCulpritAndNamesTheRelay) {
  StallInspector inspector(5, 8, 1h, 4s);
  inspector.begin(call(17));
  inspector.at(4);
  PeerStatus s;
  s.state = PeerStatus::State::kAborted;
  s.code = ErrorCode::kRemoteError;
  s.suspect = 0;
  s.reporter = 1;
  s.reason = "peer rank 0 closed the connection (it exited or failed)";
  PeerAbortError e("peer rank 4 aborted", s);
  Failure f = classifyFailure(e, 5, inspector, "");
  EXPECT_EQ(f.code, ErrorCode::kRemoteError);
  std::string m = failureMessage(5, call(17), 0, 0, f);
  EXPECT_EQ(m,
            "rank 5: allreduce #17 (float sum, count 1024) failed after sending 0 and receiving 0 "
            "bytes: rank 0 failed: rank 1 reported: peer rank 0 closed the connection (it exited "
            "or failed) (the abort reached this rank from peer rank 4)");
  PeerStatus relayed = abortNotice(f, 5, 17);
  EXPECT_EQ(relayed.suspect, 0);
  EXPECT_EQ(relayed.reporter, 1);
  EXPECT_EQ(relayed.reason, s.reason);
}

TEST(FailureNaming, TheDetectingRankSaysWhoAndTellsOthersInTheirTerms) {
  StallInspector inspector(2, 4, 1h, 4s);
  inspector.begin(call(3));
  inspector.at(1);
  Error e(ErrorCode::kMismatch,
          "rank 2 runs allreduce #3 (float sum, count 1024) but its peer rank 1 runs barrier #3");
  Failure f = classifyFailure(e, 2, inspector, "");
  EXPECT_EQ(failureHeadline(f), "collective mismatch");
  Error dead(ErrorCode::kRemoteError, "peer rank 1 (pid 7) exited while this rank waited");
  Failure g = classifyFailure(dead, 2, inspector, "");
  EXPECT_EQ(failureHeadline(g), "rank 1 failed");
  EXPECT_EQ(abortNotice(g, 2, 3).reason, "peer rank 1 (pid 7) exited while rank 2 waited");
  PeerStatus big =
      abortNotice(Failure{ErrorCode::kInternal, 2, 2, -1, std::string(500, 'x')}, 2, 3);
  EXPECT_EQ(big.reason.size(), PeerStatus::kMaxReasonBytes);
}

}  // namespace
}  // namespace gyre
