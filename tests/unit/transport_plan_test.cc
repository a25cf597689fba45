// The transport of every pipe as a pure function of the claims (ring/transport_plan.h):
// both ends of a pipe compute it on their own and must agree, the reason names what was
// really chosen (a full /dev/shm says tcp, not shm), and the registered transports are
// asked in their order (transport/transport_setup.h).
#include "ring/transport_plan.h"

#include <gtest/gtest.h>

#include "expect_error.h"

namespace gyre {
namespace {

Claim claim(int rank, const std::string& host, bool shm, const std::string& rdma = "") {
  Claim c;
  c.rank = rank;
  c.size = 4;
  c.hostId = host;
  c.hostName = host;
  c.address = "10.0.0." + std::to_string(rank + 1) + ":1234";
  c.shm = shm;
  c.rdma = rdma;
  c.rdmaWhyNot = rdma.empty() ? "no RDMA devices" : "";
  return c;
}

// Ranks 0-1 on host a, 2-3 on host b; every rank has room in /dev/shm and a device.
std::vector<Claim> twoHosts() {
  return {claim(0, "a", true, "rxe0 A"), claim(1, "a", true, "rxe0 A"),
          claim(2, "b", true, "rxe0 B"), claim(3, "b", true, "rxe0 B")};
}

std::vector<int> othersOf(int rank) {
  std::vector<int> out;
  for (int r = 0; r < 4; ++r) {
    if (r != rank) out.push_back(r);
  }
  return out;
}

// Every pipe's two ends chose the same transport.
void expectBothEndsAgree(const std::vector<Claim>& claims, TransportKind kind) {
  for (int a = 0; a < 4; ++a) {
    TransportPlan pa = planTransports(claims, a, othersOf(a), kind);
    for (int b = 0; b < 4; ++b) {
      if (a == b) continue;
      TransportPlan pb = planTransports(claims, b, othersOf(b), kind);
      EXPECT_EQ(pa.peers.at(b).transport, pb.peers.at(a).transport) << a << " - " << b;
    }
  }
}

TEST(TransportPlan, AutoGivesShmOnTheHostAndRdmaAcrossWhenBothEndsHaveADevice) {
  const auto claims = twoHosts();
  TransportPlan p = planTransports(claims, 0, othersOf(0), TransportKind::kAuto);
  EXPECT_EQ(p.peers.at(1).transport, "shm");
  EXPECT_EQ(p.peers.at(1).reason, "same host");
  EXPECT_EQ(p.peers.at(2).transport, "rdma");
  EXPECT_EQ(p.peers.at(2).reason, "another host, rxe0 A -> rxe0 B on rank 2");
  EXPECT_EQ(p.count("rdma"), 2u);
  EXPECT_FALSE(p.allShm);
  expectBothEndsAgree(claims, TransportKind::kAuto);
}

TEST(TransportPlan, AutoFallsBackToTcpNamingTheEndWithoutADevice) {
  auto claims = twoHosts();
  claims[3].rdma = "";
  claims[3].rdmaWhyNot = "no RDMA devices";
  TransportPlan p = planTransports(claims, 0, othersOf(0), TransportKind::kAuto);
  EXPECT_EQ(p.peers.at(2).transport, "rdma");
  EXPECT_EQ(p.peers.at(3).transport, "tcp");
  EXPECT_EQ(p.peers.at(3).reason, "peer rank 3 has no RDMA device");
  TransportPlan q = planTransports(claims, 3, othersOf(3), TransportKind::kAuto);
  EXPECT_EQ(q.peers.at(0).transport, "tcp");
  EXPECT_EQ(q.peers.at(0).reason, "this rank has no RDMA device: no RDMA devices");
  expectBothEndsAgree(claims, TransportKind::kAuto);
}

TEST(TransportPlan, AFullDevShmOnEitherEndGivesTcpAndSaysSo) {
  auto claims = twoHosts();
  claims[1].shm = false;
  TransportPlan p = planTransports(claims, 0, othersOf(0), TransportKind::kAuto);
  EXPECT_EQ(p.peers.at(1).transport, "tcp");
  EXPECT_EQ(p.peers.at(1).reason, "same host, but /dev/shm has no room on rank 1");
  TransportPlan q = planTransports(claims, 1, othersOf(1), TransportKind::kAuto);
  EXPECT_EQ(q.peers.at(0).transport, "tcp");
  EXPECT_EQ(q.peers.at(0).reason, "same host, but /dev/shm has no room on rank 1");
  expectBothEndsAgree(claims, TransportKind::kAuto);
}

TEST(TransportPlan, AllShmOnlyWhenEveryRankIsOnOneHostWithRoom) {
  std::vector<Claim> one = {claim(0, "a", true), claim(1, "a", true), claim(2, "a", true),
                            claim(3, "a", true)};
  EXPECT_TRUE(planTransports(one, 2, othersOf(2), TransportKind::kAuto).allShm);
  EXPECT_TRUE(planTransports(one, 2, othersOf(2), TransportKind::kShm).allShm);
  EXPECT_FALSE(planTransports(one, 2, othersOf(2), TransportKind::kTcp).allShm);
  one[0].shm = false;  // rank 0's /dev/shm is full: its pipes are tcp, so not all shm
  for (int r = 0; r < 4; ++r) {
    EXPECT_FALSE(planTransports(one, r, othersOf(r), TransportKind::kAuto).allShm) << r;
  }
  EXPECT_FALSE(planTransports(twoHosts(), 0, othersOf(0), TransportKind::kAuto).allShm);
}

TEST(TransportPlan, TcpEverywhereWhenAsked) {
  TransportPlan p = planTransports(twoHosts(), 1, othersOf(1), TransportKind::kTcp);
  for (const auto& [peer, choice] : p.peers) {
    EXPECT_EQ(choice.transport, "tcp") << peer;
    EXPECT_EQ(choice.reason, "GYRE_TRANSPORT=tcp");
  }
}

TEST(TransportPlan, ForcedRdmaCoversTheHostTooAndFailsNamingTheRankWithoutADevice) {
  auto claims = twoHosts();
  TransportPlan p = planTransports(claims, 0, othersOf(0), TransportKind::kRdma);
  EXPECT_EQ(p.peers.at(1).transport, "rdma");
  EXPECT_EQ(p.peers.at(3).transport, "rdma");
  claims[2].rdma = "";
  claims[2].rdmaWhyNot = "GYRE_IB_HCA=mlx5 matches no device";
  Error e = expectError([&] { planTransports(claims, 0, othersOf(0), TransportKind::kRdma); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(std::string(e.what()).find("peer rank 2"), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("GYRE_IB_HCA=mlx5 matches no device"), std::string::npos)
      << e.what();
  Error own = expectError([&] { planTransports(claims, 2, othersOf(2), TransportKind::kRdma); });
  EXPECT_NE(std::string(own.what()).find("rank 2: GYRE_TRANSPORT=rdma, but this rank has no"),
            std::string::npos)
      << own.what();
}

TEST(TransportPlan, ShmAcrossHostsFailsNamingBothHosts) {
  Error e = expectError([&] { planTransports(twoHosts(), 1, othersOf(1), TransportKind::kShm); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(std::string(e.what()).find("peer rank 2 is on another host (b vs a)"),
            std::string::npos)
      << e.what();
}

TEST(TransportPlan, TheClaimCarriesTheDeviceAndWhyNotOnOneLineEach) {
  Claim c = claim(1, "a", true, "rxe0 port 1 GID 1 (RoCE)");
  c.rdmaWhyNot = "two\nlines";
  Claim back;
  ASSERT_TRUE(Claim::decode(c.encode(), &back));
  EXPECT_EQ(back.rdma, "rxe0 port 1 GID 1 (RoCE)");
  EXPECT_EQ(back.rdmaWhyNot, "two lines");
  EXPECT_EQ(back.hostId, "a");
  EXPECT_TRUE(back.shm);
}

// A transport the plan has never heard of, for the test below: it carries every pair on
// host "a" and leaves the rest to the transports after it.
class HostATransport final : public TransportSetup {
 public:
  const char* name() const override { return "host-a"; }
  TransportOffer offer(const SetupEnv&) override { return {}; }
  PeerFit canConnect(const PeerClaim& mine, const PeerClaim& peer, bool) const override {
    if (mine.hostId == "a" && peer.hostId == "a") return {PeerFit::kYes, "both on a"};
    return {PeerFit::kPass, ""};
  }
  int linksPerPipe(const TransportOptions&) const override { return 0; }
  void prepare(SetupEnv&, const std::vector<int>&, const std::vector<int>&) override {}
  PipePair connect(SetupEnv&, int, PeerLinks) override { return {}; }
};

TEST(TransportPlan, ARegisteredTransportIsAskedInItsPlaceInThePreferenceOrder) {
  TransportList first = registeredTransports();
  first.insert(first.begin(), std::make_unique<HostATransport>());
  TransportPlan p = planTransports(first, twoHosts(), 0, othersOf(0), TransportKind::kAuto);
  EXPECT_EQ(p.peers.at(1).transport, "host-a");
  EXPECT_EQ(p.peers.at(1).reason, "both on a");
  EXPECT_EQ(p.peers.at(2).transport, "rdma");  // passed on to the others
  EXPECT_FALSE(p.allShm);
  EXPECT_FALSE(p.allTcp);

  TransportList after = registeredTransports();
  after.insert(after.end() - 1, std::make_unique<HostATransport>());  // before tcp only
  TransportPlan q = planTransports(after, twoHosts(), 0, othersOf(0), TransportKind::kAuto);
  EXPECT_EQ(q.peers.at(1).transport, "shm");  // shm, earlier, said yes
  // GYRE_TRANSPORT=tcp asks only the last.
  TransportPlan t = planTransports(first, twoHosts(), 0, othersOf(0), TransportKind::kTcp);
  EXPECT_EQ(t.count("tcp"), 3u);
}

TEST(TransportPlan, OneRankAloneIsAllShmWhenItCouldBe) {
  EXPECT_TRUE(planTransports({claim(0, "a", true)}, 0, {}, TransportKind::kAuto).allShm);
  EXPECT_FALSE(planTransports({claim(0, "a", false)}, 0, {}, TransportKind::kAuto).allShm);
  EXPECT_FALSE(planTransports({claim(0, "a", true)}, 0, {}, TransportKind::kTcp).allShm);
}

// allTcp against the pairs themselves: for every way of placing 4 ranks on up to 3 hosts,
// with or without room in /dev/shm and an RDMA device each, and every GYRE_TRANSPORT,
// each rank's allTcp is true exactly when every pipe of every rank is tcp.
TEST(TransportPlan, AllTcpIsTrueExactlyWhenEveryPairMeetsOverTcp) {
  const TransportKind kinds[] = {TransportKind::kAuto, TransportKind::kTcp, TransportKind::kShm,
                                 TransportKind::kRdma};
  int sawTrue = 0, sawFalse = 0;
  for (int hosts = 0; hosts < 81; ++hosts) {        // base 3: rank r on host (hosts / 3^r) % 3
    for (int flags = 0; flags < 256; flags += 5) {  // bit r: shm room, bit 4 + r: a device
      std::vector<Claim> claims;
      for (int r = 0, h = hosts; r < 4; ++r, h /= 3) {
        claims.push_back(claim(r, std::string(1, static_cast<char>('a' + h % 3)),
                               (flags >> r & 1) != 0, (flags >> (4 + r) & 1) ? "rxe0" : ""));
      }
      for (TransportKind kind : kinds) {
        std::vector<TransportPlan> plans;
        try {
          for (int r = 0; r < 4; ++r) plans.push_back(planTransports(claims, r, othersOf(r), kind));
        } catch (const Error&) {
          continue;  // a setting these claims refuse (rdma without a device, shm across hosts)
        }
        bool everyPipeTcp = true;
        for (const TransportPlan& p : plans) {
          everyPipeTcp = everyPipeTcp && p.count("tcp") == 3;
        }
        for (int r = 0; r < 4; ++r) {
          EXPECT_EQ(plans[static_cast<size_t>(r)].allTcp, everyPipeTcp)
              << "hosts " << hosts << " flags " << flags << " kind " << static_cast<int>(kind)
              << " rank " << r;
        }
        (everyPipeTcp ? sawTrue : sawFalse)++;
      }
    }
  }
  // One rank has no pipes: not all tcp, whatever the setting.
  for (TransportKind kind : kinds) {
    if (kind == TransportKind::kRdma) continue;  // refused without a device
    EXPECT_FALSE(planTransports({claim(0, "a", true, "")}, 0, {}, kind).allTcp);
  }
  // Both answers were exercised, many times.
  EXPECT_GT(sawTrue, 100);
  EXPECT_GT(sawFalse, 100);
}

}  // namespace
}  // namespace gyre
