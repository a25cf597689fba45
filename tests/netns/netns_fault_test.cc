// Network faults between hosts, simulated with two network namespaces joined by a veth
// pair shaped by tbf: the link is taken down in the middle of a stream of all-reduces,
// and every rank must fail within its timeout (plus slack), naming a rank across the
// cut, instead of hanging. Only addresses inside the namespaces this test creates are
// used (10.213.0.0/24). Needs root and iproute2: skipped, saying why, otherwise.
#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "base/error.h"
#include "fork_ranks.h"
#include "netns_hosts.h"
#include "ring/communicator.h"
#include "store/tcp_store.h"

namespace gyre {
namespace {

using namespace std::chrono_literals;
using testing::NamespaceHosts;
using testing::CommRanks;
using testing::RankResult;

// A slower, buffered link, as between hosts; the test stands without it.
const testing::LinkShape kLink{"400mbit", "64kb", "20ms", /*required=*/false};

// All-reduces until one fails; each rank posts "streaming" on `group` after its first.
testing::RankBody stream(CommRanks& group) {
  return [&group](Communicator& comm, int) {
    std::vector<float> buf(256 * 1024);
    for (int i = 0;; ++i) {
      if (i == 1) group.post("streaming");
      comm.allReduce(buf.data(), buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum);
    }
  };
}

// `inA[r]`: whether rank r runs in namespace a (rank 0, which serves the store, must).
void linkDownMidCollective(const std::vector<bool>& inA) {
  NamespaceHosts net("nf", "10.213.0", kLink);
  if (!net.ok()) GTEST_SKIP() << net.why();
  const int n = static_cast<int>(inA.size());
  Options o;
  o.timeout = 2s;
  o.stallWarn = 1s;
  o.token = "netns-fault-" + std::to_string(::getpid()) + "-" + std::to_string(n);
  CommRanks group(n, o);
  group.masterAddr = "10.213.0.1";
  group.beforeCreate = [&](int rank) { net.enter(inA[rank]); };
  group.makeStore = [&](int rank) -> std::shared_ptr<Store> {
    if (rank == 0) return TcpStore::serve("10.213.0.1", 29511, o.timeout * 10);
    return TcpStore::connect("10.213.0.1", 29511, o.timeout * 10);
  };
  group.start(stream(group));
  ASSERT_TRUE(group.waitReady(30s)) << "the ranks did not connect across the namespaces";
  ASSERT_TRUE(group.tryAwait("streaming", n, 30s));
  const auto cutAt = Clock::now();
  ASSERT_TRUE(net.cut());
  auto reports = group.join(cutAt + o.timeout + 6s);
  double worst = 0;
  for (const RankResult& r : reports) {
    SCOPED_TRACE(fmt::format("rank {} of {}", r.rank, n));
    ASSERT_TRUE(r.reported && !r.ok && !r.hung) << r.message << "\n" << r.log;
    EXPECT_TRUE(r.code == static_cast<int>(ErrorCode::kTimeout) ||
                r.code == static_cast<int>(ErrorCode::kRemoteError) ||
                r.code == static_cast<int>(ErrorCode::kSystemError))
        << r.message;
    // It names a rank on the other side of the cut.
    bool named = false;
    for (int other = 0; other < n; ++other) {
      if (inA[other] != inA[r.rank]) {
        named |= r.message.find(fmt::format("rank {} stalled", other)) != std::string::npos ||
                 r.message.find(fmt::format("rank {} failed", other)) != std::string::npos;
      }
    }
    EXPECT_TRUE(named) << r.message;
    double seconds = testing::secondsBetween(cutAt, r.endedAt);
    worst = std::max(worst, seconds);
    EXPECT_LT(seconds, 2.0 + 2.0) << r.message;
  }
  std::printf(
      "[fault] link down (netns, %d ranks): 1 run, 0 hangs, worst fault->error %.2f s "
      "(timeout 2 s)\n[fault] example error: %s\n",
      n, worst, reports[n - 1].message.c_str());
}

TEST(NetnsFault, LinkDownBetweenTwoRanks) { linkDownMidCollective({true, false}); }

TEST(NetnsFault, LinkDownBetweenTwoHostsOfThreeRanks) {
  linkDownMidCollective({true, true, false});  // ranks 0 and 1 share a host: shm between them
}

}  // namespace
}  // namespace gyre
