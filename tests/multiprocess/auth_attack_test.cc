// An outsider on the same machine who knows where the job is (the store's port, every
// rank's listening port, the communicator id) but not its secret: an attacker process,
// forked while the job forms, reads and writes the store, replays a store exchange and a
// pipe handshake recorded from genuine ones, and follows the replayed handshake with a
// frame of a correct-looking tag. The job must complete with exact results, the attacker
// must get nothing but challenges (no value from the store, no accepted connection), no
// key may change, and each refusal must be logged once. The last rank checks in only
// once the attacker has sent everything (auth_attacker.h, waitForTheAttacks), so every
// listener still expects it when the attacks arrive.
//
// The recording: the test, which holds the secret, makes a genuine exchange for the same
// ranks and communicator (byte for byte what a rank sends, with its own fresh nonces) and
// hands only the bytes to the attacker, which holds no key. Replaying them is what a
// recorder on the path could do; the fresh nonce of the other side must defeat it.
#include <sys/socket.h>
#include <unistd.h>

#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "auth_attacker.h"
#include "base/crypto.h"
#include "base/error.h"
#include "base/secret.h"
#include "fork_ranks.h"
#include "ring/communicator.h"
#include "store/store_auth.h"
#include "store/store_protocol.h"
#include "transport/handshake.h"

namespace gyre {
namespace {

using namespace std::chrono_literals;
using namespace testing::attack;
using testing::CommRanks;

constexpr int kRanks = 4;
constexpr int kLate = 3;  // the rank that comes late: every listener still expects it

TEST(AuthAttack, AnOutsiderWithoutTheSecretGetsNothingAndTheJobIsExact) {
  const std::string secret = fmt::format("attack-test-secret-{}", ::getpid());
  Options o;
  o.timeout = 30s;
  o.transport = TransportKind::kTcp;
  o.token = secret;
  CommRanks group(kRanks, o);
  // Rank 3 checks in once the attacker has sent everything.
  group.beforeCreate = [&group](int rank) {
    if (rank == kLate) waitForTheAttacks(group, 20s);
  };
  ::testing::internal::CaptureStderr();  // the store's log (this process serves it)
  group.start([](Communicator& comm, int) { exactAllReduces(comm, {1, 1000, 300000}); });

  // Ranks 0-2 check in at once; their claims carry their listening addresses.
  std::map<int, Claim> claims = readClaims(group.store(), kRanks - 1, 10s);
  ASSERT_EQ(claims.size(), size_t{kRanks - 1});
  ASSERT_EQ(claims.count(kLate), 0u);
  const std::string claim1Before = group.store().getString("gyre/comm0/join/claim/1");

  // The recordings (made with the secret; the attacker gets only their bytes).
  const Key key = authKey(secret);
  const uint64_t commId = jobCommId(secret, claims.at(0));
  std::vector<Attack> attacks;
  const auto* storeAddr = dynamic_cast<TcpStore*>(&group.store());
  ASSERT_NE(storeAddr, nullptr);
  const SocketAddress store = SocketAddress::resolve("127.0.0.1", storeAddr->port());
  StoreRequest set;
  set.command = StoreCommand::kSet;
  set.keys = {"gyre/comm0/join/claim/2"};
  set.value = {'r', 'e', 'w', 'r', 'i', 't', 't', 'e', 'n'};
  StoreRequest get;
  get.command = StoreCommand::kGet;
  get.keys = {"gyre/comm0/join/claim/1"};
  {
    // Reads without any proof: the request where the proof should be.
    Attack a{"store-read", store, encodeStoreHello()};
    StoreAuthHello h;
    h.rank = -1;
    append(a.bytes, h);
    append(a.bytes, encodeStoreRequest(get));
    attacks.push_back(a);
  }
  {
    // Writes another rank's entry behind a made-up proof.
    Attack a{"store-write", store, encodeStoreHello()};
    StoreAuthHello h;
    h.rank = 1;
    append(a.bytes, h);
    append(a.bytes, StoreAuthProof{});
    append(a.bytes, encodeStoreRequest(set));
    attacks.push_back(a);
  }
  {
    // A genuine exchange, recorded, replayed: the store's nonce is new this time.
    StoreAuthHello h;
    h.rank = 1;
    h.nonce = randomNonce();
    StoreAuthProof recorded;
    recorded.mac = storeClientMac(key, h, randomNonce());
    Attack a{"store-replay", store, encodeStoreHello()};
    append(a.bytes, h);
    append(a.bytes, recorded);
    append(a.bytes, encodeStoreRequest(set));
    attacks.push_back(a);
  }
  for (const auto& [rank, claim] : claims) {
    // rank 3's connection to `rank`, recorded with an acceptor nonce of that time, then
    // a data frame with a tag of the first collective.
    Attack a{fmt::format("pipe-replay-{}", rank), parse(claim.address),
             recordedPipeHandshake(key, commId, kLate, rank)};
    append(a.bytes, tagFrame());
    attacks.push_back(a);
  }
  AttackerOptions how;
  how.gate = &group;
  std::map<std::string, Result> results = runAttacker(attacks, how);

  auto reports = group.join(Clock::now() + 60s);
  const std::string storeLog = ::testing::internal::GetCapturedStderr();
  for (const auto& r : reports) {
    ASSERT_TRUE(r.ok && !r.hung) << "rank " << r.rank << ": " << r.message << "\n" << r.log;
  }

  // The attacker learned nothing: from the store, its hello and a challenge (a nonce and
  // a MAC over the attacker's own bytes), then the door; from each rank, a challenge.
  for (const char* name : {"store-read", "store-write", "store-replay"}) {
    ASSERT_EQ(results.count(name), 1u) << name;
    const Result& r = results[name];
    EXPECT_TRUE(r.closed) << name;
    EXPECT_EQ(r.bytes, kStoreHelloBytes + sizeof(StoreAuthChallenge)) << name;
  }
  for (const auto& [rank, claim] : claims) {
    expectOnlyAChallenge(results, fmt::format("pipe-replay-{}", rank));
    // Rank `rank` logged this refusal once, naming what was claimed and why.
    expectRefusalsLogged(reports[static_cast<size_t>(rank)], kLate, 1);
  }
  // No key changed: the attacker's set never ran.
  EXPECT_EQ(group.store().getString("gyre/comm0/join/claim/1"), claim1Before);
  EXPECT_NE(group.store().getString("gyre/comm0/join/claim/2"), "rewritten");
  // The store logged each refusal once.
  EXPECT_EQ(count(storeLog, "refused client"), 3u) << storeLog;
  EXPECT_EQ(count(storeLog, "claimed rank 1, but its proof is not signed"), 2u) << storeLog;
  // Nothing printed the secret.
  EXPECT_EQ(storeLog.find(secret), std::string::npos);
  expectNoSecretPrinted(reports, secret);
  std::printf("[auth] store log:\n%s", storeLog.c_str());
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
  CommRanks group(kRanks, o);
  group.makeStore = [port](int) -> std::shared_ptr<Store> {
    return TcpStore::connect("127.0.0.1", port, 30s);  // no secret: an open store
  };
  // Rank 0, which gathers the check-ins for the others (ring/join.h), and the last rank
  // check in once the outsider has rewritten rank 1's: a check-in rewritten after rank 0
  // read it is never read again, so the attack has to come first.
  group.beforeCreate = [&group](int rank) {
    if (rank == 0 || rank == kLate) group.waitFor(-1, "rewritten");
  };
  group.start([](Communicator&, int) {});
  auto store = TcpStore::serveOn(std::move(listener), 30s);  // after the fork, as the harness

  // The outsider finds rank 1's check-in among the first two (ranks 1 and 2) and puts its
  // own address there.
  std::vector<std::string> keys;
  for (int seq = 1; seq <= kRanks - 2; ++seq) keys.push_back(fmt::format("gyre/comm0/join/claim/{}", seq));
  store->setTimeout(10s);
  store->wait(keys);
  std::string rewritten;
  for (const std::string& key : keys) {
    Claim c;
    if (Claim::decode(store->getString(key), &c) && c.rank == 1) {
      c.address = outsiderAddress;
      store->setString(key, c.encode());  // unsigned: the outsider has no key
      rewritten = key;
    }
  }
  ASSERT_FALSE(rewritten.empty());
  group.say("rewritten");

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
