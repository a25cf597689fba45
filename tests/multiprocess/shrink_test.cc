// Revoke and shrink (ring/communicator.h) with real processes: 8 ranks run a stream of
// checked all-reduces, one of them is SIGKILLed (rank 0, a middle rank, a host's leader,
// or one at random) or SIGSTOPped, and the survivors shrink and go on with exact results.
// The bootstrap store is served by a process of its own (TestStore), as gyrerun serves
// it, so that rank 0's death does not take it away.
//
// Each survivor logs when its first all-reduce on the shrunk communicator completed
// (CLOCK_MONOTONIC, comparable across processes); "[shrink]" lines give the time from
// the kill to the last survivor's first completion.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
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
using testing::RankResult;
using testing::ForkedRanks;

constexpr int kRanks = 8;

// The gyre::Error f throws; kInternal (failing the child) when it throws none.
template <typename F>
Error caught(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  fail(ErrorCode::kInternal, "expected a gyre::Error, none was thrown");
}

Options shrinkOptions(const std::string& token) {
  Options o;
  o.timeout = 3s;  // GYRE_TIMEOUT: how long a stopped rank takes to be named
  o.joinTimeout = 20s;
  o.joinProgressFirst = 10s;
  o.joinProgressEvery = 10s;
  o.token = token;
  return o;
}

// Sums of (rank + 1 + round) over `comm`, checked exactly; throws on a wrong value.
void checkedSum(Communicator& comm, std::vector<int64_t>& v, int round) {
  const int64_t n = comm.size();
  std::fill(v.begin(), v.end(), comm.rank() + 1 + round);
  comm.allReduce(v.data(), v.data(), v.size(), DataType::kInt64, ReduceOp::kSum);
  const int64_t want = n * (n + 1) / 2 + n * round;
  for (int64_t x : v) {
    if (x != want) {
      fail(ErrorCode::kInternal, "rank {} of {}: sum {} instead of {} (round {})", comm.rank(), n,
           x, want, round);
    }
  }
}

// One rank of `group`: create, post "ready", sum until a failure, shrink without the rank
// it names, sum again, post "shrunk". Logs "[survivor] dead=<r> size=<n> rank=<r'>
// first_ns=<t>".
void survivor(ForkedRanks& group, int rank, const std::string& host, uint16_t port,
              const Options& options, bool abortFirst, bool growBack = false) {
  std::shared_ptr<Store> store = connectStore(host, port, rank, options);
  auto comm = Communicator::create(store, rank, kRanks, options, host);
  group.post("ready");
  std::vector<int64_t> v(4096);
  const auto deadline = Clock::now() + 20s;
  int round = 0;
  try {
    while (Clock::now() < deadline) checkedSum(*comm, v, round++);
    fail(ErrorCode::kInternal, "rank {}: no failure in 20 s of all-reduces", rank);
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kInternal) throw;
    const int dead = comm->failedRank();
    if (dead < 0) throw;
    auto small = comm->shrink({dead}, abortFirst ? Communicator::ShrinkMode::kAbort
                                                 : Communicator::ShrinkMode::kDefault);
    checkedSum(*small, v, 0);
    const long long firstNs = Clock::now().time_since_epoch().count();
    for (int r = 1; r < 20; ++r) checkedSum(*small, v, r);
    std::fprintf(stderr, "[survivor] dead=%d size=%d rank=%d first_ns=%lld\n", dead, small->size(),
                 small->rank(), firstNs);
    group.post("shrunk");
    if (growBack) {
      // As an elastic loop does: go on training until the replacement waits, then grow.
      int waiting = 0;
      for (int r = 20; (waiting = small->waitingNewcomers()) == 0; ++r) {
        if (Clock::now() > deadline) fail(ErrorCode::kInternal, "rank {}: no newcomer came", rank);
        checkedSum(*small, v, r);
      }
      if (waiting != 1) fail(ErrorCode::kInternal, "rank {}: {} newcomers, expected 1", rank, waiting);
      auto full = small->grow(small->size() + waiting);
      for (int r = 0; r < 20; ++r) checkedSum(*full, v, r);
      std::fprintf(stderr, "[grown] size=%d rank=%d\n", full->size(), full->rank());
    }
  }
}

// The replacement of a dead rank: joins the survivors' next grow, then sums with them.
// Logs "[newcomer] rank=<r> size=<n> grown_ns=<t>".
void newcomer(const std::string& host, uint16_t port, const Options& options) {
  std::shared_ptr<Store> store = connectStore(host, port, kRanks, options);
  auto full = Communicator::joinGrow(store, options, host);
  const long long grownNs = Clock::now().time_since_epoch().count();
  std::vector<int64_t> v(4096);
  for (int r = 0; r < 20; ++r) checkedSum(*full, v, r);
  std::fprintf(stderr, "[newcomer] rank=%d size=%d grown_ns=%lld\n", full->rank(), full->size(),
               grownNs);
}

struct SurvivorReport {
  bool found = false;
  int dead = -1, size = 0, rank = -1;
  long long firstNs = 0;
};

SurvivorReport reportOf(const RankResult& o) {
  SurvivorReport r;
  const size_t at = o.log.find("[survivor] ");
  if (at == std::string::npos) return r;
  r.found = std::sscanf(o.log.c_str() + at, "[survivor] dead=%d size=%d rank=%d first_ns=%lld",
                        &r.dead, &r.size, &r.rank, &r.firstNs) == 4;
  return r;
}

// The job's store, served by a process of its own that the test forks (as gyrerun runs
// gyre-store), with a secret of its own: it outlives every rank, and the test process
// holds no thread when it forks the ranks (ThreadSanitizer does not allow a fork from a
// multi-threaded process). `net`: serve inside host a of these namespaces.
class TestStore {
 public:
  explicit TestStore(const std::string& name, const testing::NamespaceHosts* net = nullptr)
      : token(fmt::format("{}{}", name, ::getpid())),
        host(net ? net->address(true) : "127.0.0.1") {
    server_.start([&](int) {
      std::string bound = "0";
      try {
        if (net) net->enter(true);
        auto server = TcpStore::serve(host, 0, 30s, token);
        bound = std::to_string(server->port());
        server_.publish("port", bound);
        server_.stayAlive();  // until the test is done with it
      } catch (...) {
        if (bound == "0") server_.publish("port", bound);
        throw;
      }
    });
    port = static_cast<uint16_t>(std::stoi(server_.read("port", 30s)));
    if (port == 0) {
      fail(ErrorCode::kInternal, "the test store did not start: {}",
           server_.join(Clock::now() + 10s)[0].describe());
    }
  }
  TestStore(const TestStore&) = delete;
  TestStore& operator=(const TestStore&) = delete;

  const std::string token;
  const std::string host;
  uint16_t port = 0;

 private:
  ForkedRanks server_{1, 600s};  // ends the store's process with the test store
};

// Rank `rank` of `size` on the store the test process serves at `port` on loopback (the
// communicator keeps the store).
std::unique_ptr<Communicator> createOnTestStore(uint16_t port, int rank, int size,
                                                const Options& o) {
  std::shared_ptr<Store> store = connectStore("127.0.0.1", port, rank, o);
  return Communicator::create(store, rank, size, o, "127.0.0.1");
}

// Where the ranks run: on loopback, or in two network namespaces (ranks on host a when
// inA(rank)) with the store served in host a, as gyrerun serves it on node 0.
struct Layout {
  const testing::NamespaceHosts* net = nullptr;
  std::function<bool(int rank)> inA;
  std::function<void(int rank, Options&)> adjust;  // loopback: fake hosts, say
  std::string host() const { return net ? net->address(true) : "127.0.0.1"; }
};

// Kills `victim` (SIGKILL, SIGSTOP: a hung rank, or 0: cuts host a's link, the victim
// being alone on host b) `delay` after every rank is ready; checks that every other rank
// shrank to the same 7 ranks with exact sums, and returns the time from the kill to the
// last survivor's first completed all-reduce, in ms.
double killAndShrink(int victim, int sig, std::chrono::milliseconds delay,
                     const Layout& layout = {}, bool abortFirst = false) {
  static int cases = 0;
  const TestStore ts(fmt::format("shrink{}_", ++cases), layout.net);
  const std::string& token = ts.token;
  const uint16_t port = ts.port;
  const std::string host = layout.host();
  ForkedRanks group(kRanks);
  group.start([&](int c) {
    Options o = shrinkOptions(token);
    if (layout.net) layout.net->enter(layout.inA(c));
    if (layout.adjust) layout.adjust(c, o);
    survivor(group, c, host, port, o, abortFirst);
  });
  EXPECT_TRUE(group.tryAwait("ready", kRanks, 30s)) << "the ranks did not start";
  std::this_thread::sleep_for(delay);  // models time passing: a point of the stream
  const Clock::time_point killedAt = Clock::now();
  if (sig == 0) {
    EXPECT_TRUE(layout.net && layout.net->cut());
  } else {
    group.kill(victim, sig);
  }
  if (sig != SIGKILL) {
    // A stopped or cut-off rank would hold join() to its deadline: end it once the
    // others are done.
    EXPECT_TRUE(group.tryAwait("shrunk", kRanks - 1, 30s)) << "the survivors did not shrink";
    group.kill(victim);
  }
  auto outs = group.join(group.started() + 40s);
  double worstMs = 0;
  for (const RankResult& o : outs) {
    if (o.rank == victim) continue;
    SCOPED_TRACE(o.describe());
    EXPECT_TRUE(o.ok && !o.hung);
    SurvivorReport r = reportOf(o);
    EXPECT_TRUE(r.found);
    if (!r.found) continue;
    EXPECT_EQ(r.dead, victim);
    EXPECT_EQ(r.size, kRanks - 1);
    EXPECT_EQ(r.rank, o.rank < victim ? o.rank : o.rank - 1);
    const double ms =
        std::chrono::duration<double, std::milli>(Clock::time_point(std::chrono::nanoseconds(r.firstNs)) -
                                                  killedAt)
            .count();
    worstMs = std::max(worstMs, ms);
  }
  return worstMs;
}

void printTimes(const char* what, std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  std::printf("[shrink] %s: kill -> first all-reduce on the shrunk communicator: median %.0f ms, "
              "worst %.0f ms (%zu runs)\n",
              what, ms[ms.size() / 2], ms.back(), ms.size());
}

TEST(Shrink, SurvivorsOfAKilledRankZeroGoOnWithExactResults) {
  printTimes("rank 0 SIGKILLed, 8 ranks, one host", {killAndShrink(0, SIGKILL, 50ms)});
}

TEST(Shrink, SurvivorsOfAKilledMiddleRankGoOnWithExactResults) {
  printTimes("rank 3 SIGKILLed, 8 ranks, one host", {killAndShrink(3, SIGKILL, 50ms)});
}

// Ranks 0-3 and 4-7 on two (faked) hosts: tcp between them, shm within; rank 4 leads
// the second host.
TEST(Shrink, SurvivorsOfAKilledHostLeaderGoOnWithExactResults) {
  Layout twoHosts;
  twoHosts.adjust = [](int c, Options& o) { o.hostId = c < 4 ? "host-a" : "host-b"; };
  printTimes("rank 4 (host leader) SIGKILLed, 2 faked hosts x 4",
             {killAndShrink(4, SIGKILL, 50ms, twoHosts)});
}

// A stopped rank is named after GYRE_TIMEOUT (3 s here) without progress; the survivors
// revoke their communicator (ShrinkMode::kAbort) and shrink without it.
TEST(Shrink, SurvivorsOfAStoppedRankShrinkAfterTheTimeout) {
  const double ms = killAndShrink(5, SIGSTOP, 50ms, {}, /*abortFirst=*/true);
  EXPECT_LT(ms, 3000 + 5000);
  printTimes("rank 5 SIGSTOPped (GYRE_TIMEOUT=3 s), 8 ranks", {ms});
}

TEST(Shrink, FiftyRandomKillsNoHangNoWrongResultTheSetAgreedEveryTime) {
  std::mt19937 rng(20261203);
  std::vector<double> times;
  for (int i = 0; i < 50; ++i) {
    const int victim = static_cast<int>(rng() % kRanks);
    const auto delay = std::chrono::milliseconds(rng() % 100);
    SCOPED_TRACE(fmt::format("run {}: rank {} killed {} ms after creation", i, victim, delay.count()));
    times.push_back(killAndShrink(victim, SIGKILL, delay));
    if (::testing::Test::HasFailure()) break;
  }
  printTimes("50 random SIGKILLs, 8 ranks, one host", times);
}

// Across two network namespaces joined by a shaped veth (1 Gbit/s), 4 ranks each, the
// store in host a: rank 0, a middle rank and host b's leader SIGKILLed, one SIGSTOPped,
// 50 random kills; and a rank alone on host b cut off by taking the link down.
class NetnsShrink : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!net_.ok()) GTEST_SKIP() << net_.why();
    layout_.net = &net_;
    layout_.inA = [](int rank) { return rank < 4; };
  }
  testing::NamespaceHosts net_{"shr", "10.216.0", {"1gbit", "128kb", "20ms", false}};
  Layout layout_;
};

TEST_F(NetnsShrink, KilledRankZeroMiddleRankAndHostLeader) {
  for (int victim : {0, 2, 4}) {
    SCOPED_TRACE(fmt::format("rank {} killed", victim));
    printTimes(fmt::format("rank {} SIGKILLed, 2 namespaced hosts x 4", victim).c_str(),
               {killAndShrink(victim, SIGKILL, 50ms, layout_)});
  }
}

TEST_F(NetnsShrink, StoppedRank) {
  const double ms = killAndShrink(6, SIGSTOP, 50ms, layout_, /*abortFirst=*/true);
  EXPECT_LT(ms, 3000 + 5000);
  printTimes("rank 6 SIGSTOPped (GYRE_TIMEOUT=3 s), 2 namespaced hosts x 4", {ms});
}

TEST_F(NetnsShrink, RankCutOffByALinkDown) {
  Layout alone = layout_;
  alone.inA = [](int rank) { return rank != 7; };
  const double ms = killAndShrink(7, 0, 50ms, alone, /*abortFirst=*/true);
  printTimes("rank 7 (alone on host b) cut off by link down, GYRE_TIMEOUT=3 s", {ms});
}

TEST_F(NetnsShrink, FiftyRandomKills) {
  std::mt19937 rng(20261204);
  std::vector<double> times;
  for (int i = 0; i < 50; ++i) {
    const int victim = static_cast<int>(rng() % kRanks);
    const auto delay = std::chrono::milliseconds(rng() % 100);
    SCOPED_TRACE(fmt::format("run {}: rank {} killed {} ms after creation", i, victim, delay.count()));
    times.push_back(killAndShrink(victim, SIGKILL, delay, layout_));
    if (::testing::Test::HasFailure()) break;
  }
  printTimes("50 random SIGKILLs, 2 namespaced hosts x 4", times);
}

// Rank 5 is killed; the 7 survivors shrink, then grow back to 8 with a replacement
// process started right after the kill (it waits for their grow), and all 8 sum exactly.
TEST(Grow, AReplacementJoinsAndTheCommunicatorIsBackToEight) {
  std::vector<double> ms;
  for (int run = 0; run < 5; ++run) {
    const TestStore ts(fmt::format("grow{}_", run));
    const std::string& token = ts.token;
    const uint16_t port = ts.port;
    ForkedRanks group(kRanks);
    group.start([&](int c) {
      survivor(group, c, "127.0.0.1", port, shrinkOptions(token), false, true);
    });
    ASSERT_TRUE(group.tryAwait("ready", kRanks, 30s)) << "the ranks did not start";
    std::this_thread::sleep_for(30ms);  // models time passing: a point of the stream
    group.kill(5);
    ForkedRanks replacement(1);
    replacement.start([&](int) { newcomer("127.0.0.1", port, shrinkOptions(token)); });
    const Clock::time_point startedAt = replacement.started();
    auto outs = group.join(group.started() + 40s);
    auto late = replacement.join(replacement.started() + 40s);
    for (const RankResult& o : outs) {
      if (o.rank == 5) continue;
      SCOPED_TRACE(o.describe());
      EXPECT_TRUE(o.ok && !o.hung);
      int size = 0, rank = -1;
      const size_t at = o.log.find("[grown] ");
      ASSERT_NE(at, std::string::npos);
      ASSERT_EQ(std::sscanf(o.log.c_str() + at, "[grown] size=%d rank=%d", &size, &rank), 2);
      EXPECT_EQ(size, kRanks);
      EXPECT_EQ(rank, o.rank < 5 ? o.rank : o.rank - 1);  // numbers from the shrink
    }
    SCOPED_TRACE(late[0].describe());
    ASSERT_TRUE(late[0].ok);
    int rank = -1, size = 0;
    long long grownNs = 0;
    const size_t at = late[0].log.find("[newcomer] ");
    ASSERT_NE(at, std::string::npos);
    ASSERT_EQ(std::sscanf(late[0].log.c_str() + at, "[newcomer] rank=%d size=%d grown_ns=%lld",
                          &rank, &size, &grownNs),
              3);
    EXPECT_EQ(rank, kRanks - 1);
    EXPECT_EQ(size, kRanks);
    ms.push_back(std::chrono::duration<double, std::milli>(
                     Clock::time_point(std::chrono::nanoseconds(grownNs)) - startedAt)
                     .count());
  }
  std::sort(ms.begin(), ms.end());
  std::printf("[grow] replacement started -> full-size communicator: median %.0f ms, worst %.0f "
              "ms (%zu runs, 8 ranks, one host; it waits for the survivors' shrink first)\n",
              ms[ms.size() / 2], ms.back(), ms.size());
  EXPECT_LT(ms.back(), 2000);
}

// Two processes come to a grow that takes one: the first to arrive joins it, the other
// waits for the next grow, which the three ranks make when waitingNewcomers() says so.
TEST(Grow, ANewcomerNotTakenWaitsForTheNextGrow) {
  const TestStore ts("grownext");
  const std::string& token = ts.token;
  const uint16_t port = ts.port;
  // A member of the 3-rank communicator: sum, wait for the second newcomer, grow to 4.
  auto onThree = [](Communicator& three) {
    std::vector<int64_t> v(64);
    checkedSum(three, v, 0);
    const auto until = Clock::now() + 20s;
    int waiting = 0;
    for (int r = 1; (waiting = three.waitingNewcomers()) == 0; ++r) {
      if (Clock::now() > until) fail(ErrorCode::kInternal, "the second newcomer never waited");
      checkedSum(three, v, r);
    }
    auto four = three.grow(three.size() + waiting);
    checkedSum(*four, v, 0);
    if (four->size() != 4 || four->rank() != three.rank()) {
      fail(ErrorCode::kInternal, "rank {} of {} after the second grow", four->rank(), four->size());
    }
  };
  ForkedRanks group(2);
  group.start([&](int c) {
    Options o = shrinkOptions(token);
    auto comm = createOnTestStore(port, c, 2, o);
    // Both newcomers wait for the grow (waitingNewcomers() is agreed: every rank loops
    // as often).
    group.await("newcomer", 2, 20s);
    const auto until = Clock::now() + 20s;
    while (comm->waitingNewcomers() < 2) {
      if (Clock::now() > until) fail(ErrorCode::kInternal, "the newcomers never both waited");
    }
    onThree(*comm->grow(3));
  });
  ForkedRanks newcomers(2);
  newcomers.start([&](int c) {
    Options o = shrinkOptions(token);
    std::shared_ptr<Store> store = connectStore("127.0.0.1", port, 2 + c, o);
    group.post("newcomer");  // on the first group's counters, which the ranks there wait on
    auto grown = Communicator::joinGrow(store, o, "127.0.0.1");
    if (grown->size() == 3) {
      if (grown->rank() != 2) fail(ErrorCode::kInternal, "first newcomer is rank {}", grown->rank());
      onThree(*grown);
    } else {
      std::vector<int64_t> v(64);
      checkedSum(*grown, v, 0);
      if (grown->size() != 4 || grown->rank() != 3) {
        fail(ErrorCode::kInternal, "second newcomer is rank {} of {}", grown->rank(), grown->size());
      }
    }
  });
  for (const RankResult& o : group.join(group.started() + 30s)) EXPECT_TRUE(o.ok) << o.describe();
  for (const RankResult& o : newcomers.join(newcomers.started() + 30s)) EXPECT_TRUE(o.ok) << o.describe();
}

// A newcomer that no grow takes (no communicator on the store, as when every rank of
// the job's world died while it started) fails at GYRE_JOIN_TIMEOUT, with kTimeout and a
// message that names the setting and says what may have happened.
TEST(Grow, ANewcomerNoGrowTakesFailsAtTheJoinTimeout) {
  const TestStore ts("growalone");
  Options o = shrinkOptions(ts.token);
  o.joinTimeout = 1s;
  std::shared_ptr<Store> store = connectStore("127.0.0.1", ts.port, 5, o);
  const auto start = Clock::now();
  try {
    Communicator::joinGrow(store, o, "127.0.0.1");
    ADD_FAILURE() << "joinGrow returned with no grow on the store";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTimeout) << e.what();
    const std::string what = e.what();
    EXPECT_NE(what.find("took this process within 1 s (GYRE_JOIN_TIMEOUT; 0 grow(s)"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("if every one of them has exited"), std::string::npos) << what;
  }
  const double s = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_GE(s, 0.9);
  EXPECT_LT(s, 10.0);
}

// Survivors that pass different sets never both go on: ranks 0 and 1 exclude rank 3,
// rank 2 excludes rank 1 and proposes first, so its set is the decision. Ranks 0 and 1
// fail naming both sets; rank 2 starts the communicator of ranks 0, 2 and 3, which fails
// once rank 0 (failed) is gone. Rank 3 is alive and calls nothing.
TEST(Shrink, SurvivorsThatDisagreeNeverBothGoOn) {
  const TestStore ts("disagree");
  const std::string& token = ts.token;
  const uint16_t port = ts.port;
  ForkedRanks group(4);
  group.start([&](int c) {
    Options o = shrinkOptions(token);
    std::shared_ptr<Store> store = connectStore("127.0.0.1", port, c, o);
    auto comm = Communicator::create(store, c, 4, o, "127.0.0.1");
    if (c == 3) {  // alive, calling nothing, until the others have ended
      for (int r : {0, 1, 2}) group.waitEnded(r, 30s);
      return;
    }
    // Rank 2's proposal is the first: the others propose once it is in the store (the
    // first proposal decides: ring/communicator_membership.cc).
    if (c != 2) store->wait({"gyre/comm0/shrink0/proposal/1"});
    auto small = comm->shrink(c == 2 ? std::vector<int>{1} : std::vector<int>{3});
    fail(ErrorCode::kInternal, "rank {}: shrink returned a communicator of {}", c, small->size());
  });
  auto outs = group.join(group.started() + 20s);
  for (int c = 0; c < 3; ++c) {
    const RankResult& o = outs[static_cast<size_t>(c)];
    SCOPED_TRACE(o.describe());
    EXPECT_TRUE(o.reported && !o.ok && !o.hung);
    EXPECT_LT(o.seconds, 10.0);
    if (c < 2) {
      EXPECT_EQ(o.code, static_cast<int>(ErrorCode::kMismatch));
      EXPECT_NE(o.message.find("disagree on who is excluded: this rank excludes 3, rank 2 (the "
                               "first to propose, whose set is the decision) excludes 1"),
                std::string::npos);
    } else {
      EXPECT_NE(o.message.find("rank 0 of the new communicator is gone"), std::string::npos);
      EXPECT_NE(o.message.find("exclude it too"), std::string::npos);
    }
  }
}

TEST(Shrink, ExcludingItselfOrARankOutsideTheGroupIsRefusedAtOnce) {
  const TestStore ts("badshrink");
  const std::string& token = ts.token;
  const uint16_t port = ts.port;
  ForkedRanks group(2);
  group.start([&](int c) {
    Options o = shrinkOptions(token);
    auto comm = createOnTestStore(port, c, 2, o);
    Error self = caught([&] { comm->shrink({c}); });
    Error outside = caught([&] { comm->shrink({2}); });
    if (self.code() != ErrorCode::kInvalidArgument ||
        std::string(self.what()).find("this rank is in its own excluded list") == std::string::npos ||
        outside.code() != ErrorCode::kInvalidArgument ||
        std::string(outside.what()).find("excluded rank 2 is outside [0, 2)") == std::string::npos) {
      fail(ErrorCode::kInternal, "unexpected: '{}' / '{}'", self.what(), outside.what());
    }
    // Refused before anything was proposed: the communicator still works.
    std::vector<int64_t> v(16, 1);
    comm->allReduce(v.data(), v.data(), v.size(), DataType::kInt64, ReduceOp::kSum);
    if (v[0] != 2) fail(ErrorCode::kInternal, "sum {}", v[0]);
  });
  for (const RankResult& o : group.join(group.started() + 20s)) EXPECT_TRUE(o.ok) << o.describe();
}

// revoke() ends this rank's pending operation at once (long before GYRE_TIMEOUT, 3 s
// here) and every later one, with kAborted and the cause kRevoked. The peers' pending
// operations wait on other pipes (rank 3 never joins), so they end when rank 3 exits;
// their later ones fail.
TEST(Revoke, EndsPendingAndLaterOperationsAtOnceOnThisRankAndTellsThePeers) {
  const TestStore ts("revoke");
  const std::string& token = ts.token;
  const uint16_t port = ts.port;
  ForkedRanks group(4);
  group.start([&](int c) {
    Options o = shrinkOptions(token);
    auto comm = createOnTestStore(port, c, 4, o);
    if (c == 3) {  // never joins the all-reduce: the others' stays pending until it exits
      group.waitFor(0, "revoked", 20s);
      return;
    }
    std::vector<int64_t> v(1 << 16, 1);
    const auto start = Clock::now();
    Work w = comm->allReduceAsync(v.data(), v.data(), v.size(), DataType::kInt64, ReduceOp::kSum);
    if (c == 0) {
      // Time for the operation to be under way in the queue's thread: nothing signals it.
      std::this_thread::sleep_for(200ms);  // see above
      comm->revoke();
      group.say("revoked");
    }
    Error pending = caught([&] { w.wait(); });
    const double took = std::chrono::duration<double>(Clock::now() - start).count();
    if (c == 0 && (pending.code() != ErrorCode::kAborted || took > 1.0 ||
                   pending.cause() != ErrorCause::kRevoked ||
                   std::string(pending.what()).find("revoke() was called on rank 0") ==
                       std::string::npos)) {
      fail(ErrorCode::kInternal, "rank 0: pending op ended after {:.2f} s with {} ({}) '{}'",
           took, errorCodeName(pending.code()), errorCauseName(pending.cause()), pending.what());
    }
    Error later = caught(
        [&] { comm->allReduce(v.data(), v.data(), 1, DataType::kInt64, ReduceOp::kSum); });
    if (later.code() != ErrorCode::kAborted ||
        (c == 0 && (later.cause() != ErrorCause::kRevoked ||
                    std::string(later.what()).find("revoked communicator") == std::string::npos))) {
      fail(ErrorCode::kInternal, "rank {}: later op: {} '{}'", c, errorCauseName(later.cause()),
           later.what());
    }
  });
  for (const RankResult& o : group.join(group.started() + 20s)) EXPECT_TRUE(o.ok) << o.describe();
}

}  // namespace
}  // namespace gyre
