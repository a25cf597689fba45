// An outsider on the same machine who knows where the job is but not its secret, against
// a job on tcp pipes (tests/auth_attack_scenario.h says what the attacker does and what
// must hold); and, with the store open to anyone as torch's TCPStore is, a rewritten
// check-in that must fail creation on every rank with nobody connecting to it.
#include <sys/socket.h>
#include <unistd.h>

#include <map>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "auth_attack_scenario.h"
#include "rank_harness.h"
#include "ring/join.h"

namespace gyre {
namespace {

using namespace std::chrono_literals;
using attack::kLate;
using attack::kRanks;
using testing::RankGroup;

TEST(AuthAttack, AnOutsiderWithoutTheSecretGetsNothingAndTheJobIsExact) {
  Options o;
  o.timeout = 30s;
  o.transport = TransportKind::kTcp;
  attack::outsiderGetsNothing(o, nullptr, nullptr);
}

// The store open to anyone (as torch's TCPStore is, under gyre_torch), the ranks with
// the secret: an outsider rewrites rank 1's check-in to point at its own listener.
// Every rank must fail creation naming the unsigned check-in, and no rank may connect
// to the outsider.
TEST(AuthAttack, ARewrittenCheckInInAnOpenStoreFailsCreationAndNobodyConnects) {
  const std::string secret = fmt::format("open-store-secret-{}", ::getpid());
  Options o;
  o.timeout = 30s;
  o.joinTimeout = 20s;
  o.transport = TransportKind::kTcp;
  o.token = secret;
  Fd listener = listenOn(SocketAddress::resolve("127.0.0.1", 0));
  const uint16_t port = SocketAddress::ofSocket(listener.get()).port();
  Fd outsider = listenOn(SocketAddress::resolve("127.0.0.1", 0));
  const std::string outsiderAddress = SocketAddress::ofSocket(outsider.get()).toString();
  RankGroup group(kRanks, o);
  group.makeStore = [port](int) -> std::shared_ptr<Store> {
    return TcpStore::connect("127.0.0.1", port, 30s);  // no secret: an open store
  };
  group.beforeCreate = [](int rank) {
    if (rank == kLate) std::this_thread::sleep_for(2000ms);
  };
  group.start([](Communicator&, int) {});
  auto store = TcpStore::serveOn(std::move(listener), 30s);  // after the fork, as the harness

  // The outsider finds rank 1's check-in and puts its own address there.
  std::string rewritten;
  const auto until = Clock::now() + 10s;
  while (rewritten.empty() && Clock::now() < until) {
    for (int seq = 1; seq <= kRanks - 1 && rewritten.empty(); ++seq) {
      const std::string key = fmt::format("gyre/comm0/join/claim/{}", seq);
      Claim c;
      if (store->check({key}) && Claim::decode(store->getString(key), &c) && c.rank == 1) {
        c.address = outsiderAddress;
        store->setString(key, c.encode());  // unsigned: the outsider has no key
        rewritten = key;
      }
    }
    std::this_thread::sleep_for(5ms);
  }
  ASSERT_FALSE(rewritten.empty());

  auto reports = group.join(Clock::now() + 40s);
  int named = 0;
  for (const auto& r : reports) {
    EXPECT_FALSE(r.ok) << "rank " << r.rank;
    EXPECT_FALSE(r.hung) << "rank " << r.rank;
    // A rank that read the rewritten check-in names it; the others name that failure.
    if (r.message.find("is not signed with the job's secret") != std::string::npos) ++named;
    EXPECT_EQ(r.message.find(secret), std::string::npos);
  }
  EXPECT_GE(named, 1);
  // Nobody connected to the outsider's listener.
  setNonBlocking(outsider.get(), true);
  EXPECT_LT(::accept(outsider.get(), nullptr, nullptr), 0);
  std::printf("[auth] rewritten check-in: rank 0: %s\n", reports[0].message.c_str());
}

}  // namespace
}  // namespace gyre
