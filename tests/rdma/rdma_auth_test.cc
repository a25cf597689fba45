// Authentication over the rdma transport. Every rdma pipe keeps a tcp connection beside
// its queue pair as its control link (status, abort, liveness: transport/rdma/
// control_link.h); that connection is made on the rank's published listening port and
// passes the same challenge/response as a tcp pipe (transport/handshake.h). This file
// checks, on a real verbs device (soft-RoCE in the VM: tools/rdma_vm.sh; ranks 0-1 on
// RDMA_DEV_A, 2-3 on RDMA_DEV_B), with GYRE_TRANSPORT=rdma forced so that nothing can
// fall back to tcp:
//  - An outsider of auth_attacker.h that knows every rank's listening address
//    (from the claims in the store) but not the secret connects to each rank's port as
//    the last rank (whose control links every rank still awaits) with (a) a handshake
//    recorded from a genuine one, replayed, and (b) a proof of the right form made with
//    another secret; each followed by a control frame that says the job aborted and a
//    data frame of a first collective's tag. The job completes exact, over rdma pipes
//    only (each rank's "pipes:" line), the outsider gets one challenge per connection
//    and then the door, and each refusal is logged once. Nothing prints the secret.
//  - A rank given another secret fails at once saying so (the store refuses it before
//    any pipe exists), the others name it within seconds; neither secret is printed.
// Without a device every case skips saying why (GYRE_REQUIRE_RDMA=1: fails).
#include <stdlib.h>

#include <map>
#include <regex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "auth_attacker.h"
#include "base/secret.h"
#include "fork_ranks.h"
#include "rdma_test_support.h"
#include "ring/communicator.h"
#include "transport/handshake.h"
#include "transport/tcp/tcp_control.h"

namespace gyre {
namespace {

using namespace std::chrono_literals;
using namespace testing::attack;
using testing::CommRanks;
using testing::RankResult;

constexpr int kRanks = 4;
constexpr int kLate = 3;  // checks in once the outsider has sent: every rank awaits it

// The rdma suite's settings (rdma_collectives_test.cc): the emulated device is far
// slower than a real one, so the waits are long; 16 KiB slots, which the counts cross.
Options rdmaAuthOptions(const std::string& secret) {
  Options o = Options::fromEnvironment();
  o.transport = TransportKind::kRdma;  // forced: no device or no rdma peer fails creation
  o.timeout = 120s;
  o.joinTimeout = 120s;
  o.slotBytes = 16 * 1024;
  o.slots = 4;
  o.token = secret;
  o.logLevel = LogLevel::kInfo;
  ::setenv("GYRE_DEBUG", "INFO", 1);  // the log level is read once, in each rank
  return o;
}

void onTwoDevices(int rank, Options& o) { o.ibHca = testing::rdmaHcaFor(rank < 2 ? 0 : 1); }

// The rdma and tcp pipe counts of a rank's "pipes: S shm, R rdma, T tcp" line; -1 when
// the line is missing.
std::pair<int, int> pipeCounts(const std::string& log) {
  static const std::regex line("pipes: ([0-9]+) shm, ([0-9]+) rdma, ([0-9]+) tcp");
  std::smatch m;
  if (!std::regex_search(log, m, line)) return {-1, -1};
  return {std::stoi(m[2]), std::stoi(m[3]) + std::stoi(m[1])};
}

TEST(RdmaAuth, AnOutsiderOnTheControlLinkGetsNothingAndTheJobIsExact) {
  GYRE_SKIP_WITHOUT_RDMA();
  const std::string secret = fmt::format("rdma-attack-secret-{}", ::getpid());
  CommRanks group(kRanks, rdmaAuthOptions(secret));
  group.perRank = onTwoDevices;
  group.beforeCreate = [&group](int rank) {
    if (rank == kLate) waitForTheAttacks(group, 120s);
  };
  // int64 sums stay exact; 8195 and 60001 elements cross the 16 KiB slots.
  group.start([](Communicator& comm, int) { exactAllReduces(comm, {1, 1000, 8195, 60001}); });

  std::map<int, Claim> claims = readClaims(group.store(), kRanks - 1, 120s);
  ASSERT_EQ(claims.size(), size_t{kRanks - 1});
  ASSERT_EQ(claims.count(kLate), 0u);

  const Key key = authKey(secret);
  const uint64_t commId = jobCommId(secret, claims.at(0));
  // What follows each handshake: kAborted from the late rank on its control link (what
  // would end the job, were it read), then a data frame with a first collective's tag.
  PeerStatus abort;
  abort.state = PeerStatus::State::kAborted;
  abort.writer = kLate;
  abort.suspect = kLate;
  abort.reporter = kLate;
  abort.reason = "outsider: the job is over";
  const ControlFrame control = makeControlFrame(abort);
  std::vector<Attack> attacks;
  for (const auto& [rank, claim] : claims) {
    // (a) The late rank's control link to `rank`, recorded, replayed.
    Attack replay{fmt::format("ctl-replay-{}", rank), parse(claim.address),
                  recordedPipeHandshake(key, commId, kLate, rank)};
    // (b) Well-formed, but its proof is signed with another secret.
    Attack forged{fmt::format("ctl-forged-{}", rank), parse(claim.address),
                  recordedPipeHandshake(authKey(secret + "-guess"), commId, kLate, rank)};
    for (Attack* a : {&replay, &forged}) {
      append(a->bytes, control);
      append(a->bytes, tagFrame());
      attacks.push_back(*a);
    }
  }
  AttackerOptions how;
  how.window = 180s;  // a close ends each read; the VM's creation takes seconds
  how.gate = &group;
  const auto attackedAt = Clock::now();
  std::map<std::string, Result> results = runAttacker(attacks, how);
  std::printf("[rdma auth] the outsider was answered within %.1f s\n",
              testing::secondsBetween(attackedAt, Clock::now()));

  std::vector<RankResult> reports = group.join(Clock::now() + 300s);
  ASSERT_EQ(reports.size(), size_t{kRanks});
  for (const RankResult& r : reports) {
    ASSERT_TRUE(r.ok && !r.hung) << "rank " << r.rank << ": " << r.message << "\n" << r.log;
    // Every pipe was rdma, none tcp or shm: a job that fell back would fail here.
    const auto [rdma, other] = pipeCounts(r.log);
    EXPECT_GT(rdma, 0) << "rank " << r.rank << "'s log:\n" << r.log;
    EXPECT_EQ(other, 0) << "rank " << r.rank << "'s log:\n" << r.log;
    EXPECT_NE(r.log.find("rdma (GYRE_TRANSPORT=rdma"), std::string::npos) << r.log;
  }
  for (const auto& [rank, claim] : claims) {
    expectOnlyAChallenge(results, fmt::format("ctl-replay-{}", rank));
    expectOnlyAChallenge(results, fmt::format("ctl-forged-{}", rank));
    // Both refusals logged, once each, and nothing else refused: no flood.
    const RankResult& r = reports[static_cast<size_t>(rank)];
    expectRefusalsLogged(r, kLate, 2);
    EXPECT_EQ(count(r.log, "refused a connection from"), 2u) << r.log;
    EXPECT_EQ(r.log.find("outsider: the job is over"), std::string::npos) << r.log;
  }
  expectNoSecretPrinted(reports, secret);
  std::printf("[rdma auth] rank 0's log:\n%s", reports[0].log.c_str());
}

TEST(RdmaAuth, ARankWithAnotherSecretFailsAtOnceSayingSo) {
  GYRE_SKIP_WITHOUT_RDMA();
  constexpr int kOdd = 2;
  const std::string secret = fmt::format("rdma-secret-{}", ::getpid());
  const std::string other = fmt::format("another-{}-key", ::getpid());
  CommRanks group(kRanks, rdmaAuthOptions(secret));
  group.perRank = [&other](int rank, Options& o) {
    onTwoDevices(rank, o);
    if (rank == kOdd) o.token = other;
  };
  const auto startedAt = Clock::now();
  group.start([](Communicator& comm, int) { exactAllReduces(comm, {1}); });
  std::vector<RankResult> reports = group.join(Clock::now() + 180s);
  ASSERT_EQ(reports.size(), size_t{kRanks});
  for (const RankResult& r : reports) {
    ASSERT_TRUE(r.reported && !r.ok && !r.hung) << "rank " << r.rank << ": " << r.message;
    const double seconds = testing::secondsBetween(startedAt, r.endedAt);
    std::printf("[rdma auth] rank %d after %.1f s: %s\n", r.rank, seconds, r.message.c_str());
    if (r.rank == kOdd) {
      // The store refuses it at its first request: no wait at all.
      EXPECT_NE(r.message.find("another secret"), std::string::npos) << r.message;
      EXPECT_LT(seconds, 10.0) << r.message;
    } else {
      // The others learn it from the store's record of the refusal (ring/join.h).
      EXPECT_NE(r.message.find(fmt::format("rank {}", kOdd)), std::string::npos) << r.message;
      EXPECT_NE(r.message.find("secret"), std::string::npos) << r.message;
      EXPECT_LT(seconds, 30.0) << r.message;  // the timeouts are 120 s
    }
  }
  expectNoSecretPrinted(reports, secret);
  expectNoSecretPrinted(reports, other);
}

}  // namespace
}  // namespace gyre
