// The transport per peer under GYRE_TRANSPORT=auto, on a real verbs device (soft-RoCE in
// the VM: tools/rdma_vm.sh): 4 ranks on two fake hosts (GYRE_HOST_ID, ranks 0-1 on one
// with RDMA_DEV_A, ranks 2-3 on the other with RDMA_DEV_B). Peers on the same host get
// shm, peers on the other host rdma, and the GYRE_DEBUG=INFO line of every pipe's peer
// says which and why; then the same with the second host's ranks given no usable device
// (GYRE_IB_HCA naming none): tcp between the hosts, the line saying which rank lacks
// one. The all-reduce is exact either way. Without a device every case skips saying why.
#include <gtest/gtest.h>

#include <regex>
#include <string>
#include <vector>

#include "fork_ranks.h"
#include "rdma_test_support.h"
#include "ring/communicator.h"
#include "test_values.h"

namespace gyre {
namespace {

using testing::check;

constexpr int kRanks = 4;

int hostOf(int rank) { return rank < kRanks / 2 ? 0 : 1; }

void exactAllReduce(Communicator& comm, int) {
  for (size_t count : {size_t{7}, size_t{70001}}) {
    std::vector<int32_t> buf(count);
    for (size_t i = 0; i < count; ++i) buf[i] = (comm.rank() + 1) * static_cast<int32_t>(i % 997 + 1);
    comm.allReduce(buf.data(), buf.data(), count, DataType::kInt32, ReduceOp::kSum);
    const int n = comm.size();
    for (size_t i = 0; i < count; ++i) {
      check(buf[i] == n * (n + 1) / 2 * static_cast<int32_t>(i % 997 + 1), "rank {}: [{}] = {}",
            comm.rank(), i, buf[i]);
    }
  }
}

struct PeerLine {
  int peer;
  std::string transport;
  std::string reason;
};

// "peer rank P: T (reason)" lines of one rank's INFO log.
std::vector<PeerLine> peerLines(const std::string& log) {
  static const std::regex line(R"(peer rank (\d+): (shm|tcp|rdma) \(([^\n]*)\))");
  std::vector<PeerLine> out;
  for (auto it = std::sregex_iterator(log.begin(), log.end(), line); it != std::sregex_iterator(); ++it) {
    out.push_back({std::stoi((*it)[1]), (*it)[2], (*it)[3]});
  }
  return out;
}

std::vector<testing::RankResult> runTwoHosts(bool secondHostHasDevice) {
  Options o = Options::fromEnvironment();
  o.transport = TransportKind::kAuto;
  o.timeout = std::chrono::seconds(120);
  o.slotBytes = 16 * 1024;
  o.logLevel = LogLevel::kInfo;
  o.token = fmt::format("rdmachoice{}{}", ::getpid(), secondHostHasDevice);
  ::setenv("GYRE_DEBUG", "INFO", 1);  // the log level is read once, in each rank
  testing::CommRanks group(kRanks, o);
  group.perRank = [secondHostHasDevice](int rank, Options& opts) {
    opts.hostId = fmt::format("rdma-choice-host-{}", hostOf(rank));
    opts.ibHca = hostOf(rank) == 1 && !secondHostHasDevice ? "=no_such_hca"
                                                            : testing::rdmaHcaFor(hostOf(rank));
  };
  group.start(exactAllReduce);
  return group.join(Clock::now() + std::chrono::seconds(300));
}

TEST(RdmaChoice, AutoPicksRdmaAcrossHostsAndShmWithinOne) {
  GYRE_SKIP_WITHOUT_RDMA();
  for (const testing::RankResult& r : runTwoHosts(true)) {
    ASSERT_TRUE(r.reported && r.ok) << r.rank << ": " << r.message << "\n" << r.log;
    auto lines = peerLines(r.log);
    ASSERT_FALSE(lines.empty()) << r.log;
    bool crossHost = false;
    for (const PeerLine& l : lines) {
      if (hostOf(l.peer) == hostOf(r.rank)) {
        EXPECT_EQ(l.transport, "shm") << r.rank << " -> " << l.peer << ": " << l.reason;
        EXPECT_EQ(l.reason, "same host");
      } else {
        crossHost = true;
        EXPECT_EQ(l.transport, "rdma") << r.rank << " -> " << l.peer << ": " << l.reason;
        // "another host, <this rank's device> -> <the peer's device> on rank P"
        EXPECT_NE(l.reason.find("another host, "), std::string::npos) << l.reason;
        EXPECT_NE(l.reason.find(fmt::format("on rank {}", l.peer)), std::string::npos) << l.reason;
      }
    }
    EXPECT_TRUE(crossHost) << "rank " << r.rank << " has no pipe to the other host:\n" << r.log;
    EXPECT_NE(r.log.find("pipes: "), std::string::npos) << r.log;
    EXPECT_EQ(r.log.find("0 rdma"), std::string::npos) << r.log;
  }
}

TEST(RdmaChoice, AutoFallsBackToTcpWhereAHostHasNoDevice) {
  GYRE_SKIP_WITHOUT_RDMA();
  for (const testing::RankResult& r : runTwoHosts(false)) {
    ASSERT_TRUE(r.reported && r.ok) << r.rank << ": " << r.message << "\n" << r.log;
    for (const PeerLine& l : peerLines(r.log)) {
      if (hostOf(l.peer) == hostOf(r.rank)) {
        EXPECT_EQ(l.transport, "shm") << r.rank << " -> " << l.peer;
        continue;
      }
      EXPECT_EQ(l.transport, "tcp") << r.rank << " -> " << l.peer << ": " << l.reason;
      const std::string why = hostOf(r.rank) == 1 ? "this rank has no RDMA device"
                                                   : fmt::format("peer rank {} has no RDMA device", l.peer);
      EXPECT_NE(l.reason.find(why), std::string::npos) << l.reason;
    }
  }
}

}  // namespace
}  // namespace gyre
