// Startup mistakes between two "nodes": two network namespaces joined by a veth pair
// (netns_hosts.h), node 0 = namespace a (10.213.0.1) runs ranks 0-1 and serves the
// store, node 1 = namespace b (10.213.0.2) runs ranks 2-3, as
// `--nproc_per_node=2 --nnodes=2 --master_addr=10.213.0.1` would. Each case must end on
// every rank within seconds, or at GYRE_JOIN_TIMEOUT (3 s here, never GYRE_TIMEOUT) with
// progress lines meanwhile, naming what is wrong. Skipped, saying why, without root.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "base/error.h"
#include "fork_ranks.h"
#include "netns_hosts.h"
#include "ring/communicator.h"
#include "ring/join_store.h"
#include "store/tcp_store.h"

namespace gyre {
namespace {

using namespace std::chrono_literals;
using testing::NamespaceHosts;
using testing::RankResult;
using testing::ForkedRanks;

// A slower, buffered link, as between hosts; the test stands without it.
const testing::LinkShape kLink{"400mbit", "64kb", "20ms", /*required=*/false};

constexpr uint16_t kPort = 29531;  // inside the test's own namespaces

Options nodeOptions() {
  Options o;
  o.timeout = 60s;
  o.joinTimeout = 3s;
  o.joinProgressFirst = 500ms;
  o.joinProgressEvery = 1s;
  o.token = fmt::format("jnet_{}", ::getpid());
  return o;
}

struct Rank {
  bool nodeA;
  int rank;
  int size;
  std::string masterAddr;
};

std::vector<RankResult> runNodes(const NamespaceHosts& net, const std::vector<Rank>& ranks,
                              double deadline = 20) {
  const Options o = nodeOptions();
  ForkedRanks group(static_cast<int>(ranks.size()));
  group.start([&](int c) {
    const Rank& r = ranks[c];
    net.enter(r.nodeA);
    std::shared_ptr<Store> store = joinStore(r.masterAddr, kPort, r.rank, o);
    auto comm = Communicator::create(store, r.rank, r.size, o, r.masterAddr);
    int64_t x = 1;
    comm->allReduce(&x, &x, 1, DataType::kInt64, ReduceOp::kSum);
    if (x != r.size) fail(ErrorCode::kInternal, "sum {} instead of {}", x, r.size);
  });
  return group.join(group.started() + std::chrono::milliseconds(static_cast<long long>(deadline * 1000)));
}

void printCase(const char* name, const std::vector<RankResult>& outs) {
  for (const RankResult& o : outs) {
    std::printf("[join netns] %s: rank %d after %.2f s: %s\n", name, o.rank, o.seconds,
                o.message.c_str());
  }
}

TEST(JoinNetns, Node1StartedWithAnotherNnodesFailsBothNodesAtOnce) {
  NamespaceHosts net("join", "10.213.0", kLink);
  if (!net.ok()) GTEST_SKIP() << net.why();
  const std::string a = "10.213.0.1";
  // node 1 given --nnodes=3: world 6 there, its ranks still 2-3.
  auto outs = runNodes(net, {{true, 0, 4, a}, {true, 1, 4, a}, {false, 2, 6, a}, {false, 3, 6, a}});
  testing::expectAllFailed(outs, 6.0, {"WORLD_SIZE=4", "WORLD_SIZE=6", "--nnodes"});
  // Each side names the other's host address.
  EXPECT_NE(outs[0].message.find("10.213.0.2"), std::string::npos) << outs[0].message;
  EXPECT_NE(outs[3].message.find("10.213.0.1"), std::string::npos) << outs[3].message;
  printCase("--nnodes 2 vs 3", outs);
}

TEST(JoinNetns, AnUnreachableMasterAddrIsReportedWithTheVariableAtTheJoinTimeout) {
  NamespaceHosts net("join", "10.213.0", kLink);
  if (!net.ok()) GTEST_SKIP() << net.why();
  const std::string a = "10.213.0.1";
  const std::string nobody = "10.213.0.99";  // on node 1's subnet, no such host
  auto outs =
      runNodes(net, {{true, 0, 4, a}, {true, 1, 4, a}, {false, 2, 4, nobody}, {false, 3, 4, nobody}});
  for (const RankResult& o : outs) {
    SCOPED_TRACE(o.describe());
    EXPECT_TRUE(o.reported && !o.ok && !o.hung);
    EXPECT_EQ(o.code, static_cast<int>(ErrorCode::kTimeout));
    EXPECT_GT(o.seconds, 2.9);
    EXPECT_LT(o.seconds, 8.0);
    EXPECT_NE(o.message.find("GYRE_JOIN_TIMEOUT=3 s"), std::string::npos);
    EXPECT_EQ(o.message.find("1800"), std::string::npos);
  }
  for (int c : {2, 3}) {
    EXPECT_NE(outs[c].message.find("10.213.0.99"), std::string::npos) << outs[c].message;
    EXPECT_NE(outs[c].message.find("MASTER_ADDR"), std::string::npos) << outs[c].message;
    EXPECT_NE(outs[c].log.find("waiting for the bootstrap store at 10.213.0.99"),
              std::string::npos)
        << outs[c].log;
  }
  for (int c : {0, 1}) {
    EXPECT_NE(outs[c].message.find("missing 2-3"), std::string::npos) << outs[c].message;
    EXPECT_NE(outs[c].log.find("2 of 4 ranks have joined; missing 2-3"), std::string::npos)
        << outs[c].log;
  }
  printCase("node 1 given --master_addr=10.213.0.99", outs);
}

TEST(JoinNetns, BothNodesGivenNode1sAddressFailRankZeroAtOnce) {
  NamespaceHosts net("join", "10.213.0", kLink);
  if (!net.ok()) GTEST_SKIP() << net.why();
  const std::string b = "10.213.0.2";
  auto outs = runNodes(net, {{true, 0, 4, b}, {true, 1, 4, b}, {false, 2, 4, b}, {false, 3, 4, b}});
  SCOPED_TRACE(outs[0].describe());
  EXPECT_TRUE(outs[0].reported && !outs[0].ok);
  EXPECT_LT(outs[0].seconds, 2.0);
  EXPECT_NE(outs[0].message.find("not an address of this host"), std::string::npos);
  EXPECT_NE(outs[0].message.find("MASTER_ADDR=10.213.0.2"), std::string::npos);
  for (int c : {1, 2, 3}) {
    SCOPED_TRACE(outs[c].describe());
    EXPECT_TRUE(outs[c].reported && !outs[c].ok && !outs[c].hung);
    EXPECT_LT(outs[c].seconds, 8.0);
    EXPECT_NE(outs[c].message.find("10.213.0.2"), std::string::npos);
    EXPECT_NE(outs[c].message.find("GYRE_JOIN_TIMEOUT"), std::string::npos);
  }
  printCase("both nodes given --master_addr=10.213.0.2", outs);
}

TEST(JoinNetns, ARankKilledOnNode1WhileJoiningEndsNode0Too) {
  NamespaceHosts net("join", "10.213.0", kLink);
  if (!net.ok()) GTEST_SKIP() << net.why();
  const std::string a = "10.213.0.1";
  Options o = nodeOptions();
  o.joinTimeout = 30s;
  ForkedRanks group(4);
  group.start([&](int c) {
    net.enter(c < 2);
    std::shared_ptr<Store> store = joinStore(a, kPort, c, o);
    Communicator::create(store, c, 5, o, a);  // rank 4 never comes
  });
  // Rank 0's progress line once the four have checked in: they wait for rank 4 now.
  group.waitForLog(0, "4 of 5 ranks have joined", 20s);
  const double killedAt = std::chrono::duration<double>(Clock::now() - group.started()).count();
  group.kill(3);
  auto outs = group.join(group.started() + 25s);
  testing::expectAllFailed(outs, killedAt + 4.0, {"rank 3", "10.213.0.2", "exited"}, /*skip=*/3);
  printCase("rank 3 on node 1 killed while joining", {outs[0], outs[1], outs[2]});
}

}  // namespace
}  // namespace gyre
