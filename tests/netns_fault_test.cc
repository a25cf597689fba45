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
#include "rank_harness.h"
#include "ring/communicator.h"
#include "store/tcp_store.h"

namespace gyre {
namespace {

using namespace std::chrono_literals;
using testing::RankGroup;
using testing::RankReport;

bool sh(const std::string& command) {
  return std::system((command + " >/dev/null 2>&1").c_str()) == 0;
}

// Two namespaces "a" and "b", one veth pair between them, 10.213.0.1 in a, .2 in b.
class NamespacePair {
 public:
  NamespacePair() {
    const std::string id = std::to_string(::getpid());
    a_ = "gyre-nf-" + id + "-a";
    b_ = "gyre-nf-" + id + "-b";
    va_ = "gy" + id + "a";
    vb_ = "gy" + id + "b";
    if (::geteuid() != 0) {
      why_ = "not root: network namespaces need CAP_SYS_ADMIN";
      return;
    }
    if (!sh("ip netns add " + a_) || !sh("ip netns add " + b_)) {
      why_ = "'ip netns add' failed (no iproute2, or namespaces not allowed here)";
      return;
    }
    created_ = true;
    if (!sh("ip link add " + va_ + " type veth peer name " + vb_) ||
        !sh("ip link set " + va_ + " netns " + a_) || !sh("ip link set " + vb_ + " netns " + b_) ||
        !sh("ip -n " + a_ + " addr add 10.213.0.1/24 dev " + va_) ||
        !sh("ip -n " + b_ + " addr add 10.213.0.2/24 dev " + vb_) ||
        !sh("ip -n " + a_ + " link set " + va_ + " up") ||
        !sh("ip -n " + b_ + " link set " + vb_ + " up") || !sh("ip -n " + a_ + " link set lo up") ||
        !sh("ip -n " + b_ + " link set lo up")) {
      why_ = "could not set up the veth pair";
      return;
    }
    // A slower, buffered link, as between hosts; the test stands without it.
    for (const auto& [ns, dev] : {std::pair{a_, va_}, std::pair{b_, vb_}}) {
      if (!sh("tc -n " + ns + " qdisc add dev " + dev +
              " root tbf rate 400mbit burst 64kb "
              "latency 20ms")) {
        std::printf("[netns] tbf not available; testing over the unshaped veth\n");
        break;
      }
    }
    ok_ = true;
  }
  ~NamespacePair() {
    if (created_) {
      sh("ip netns del " + a_);
      sh("ip netns del " + b_);
    }
  }

  bool ok() const { return ok_; }
  const std::string& why() const { return why_; }
  void enter(bool inA) const {
    std::string path = "/var/run/netns/" + (inA ? a_ : b_);
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || ::setns(fd, CLONE_NEWNET) != 0) failSystem(errno, "setns " + path);
    ::close(fd);
  }
  bool cut() const { return sh("ip -n " + a_ + " link set " + va_ + " down"); }

 private:
  std::string a_, b_, va_, vb_, why_;
  bool created_ = false;
  bool ok_ = false;
};

void stream(Communicator& comm, int) {
  std::vector<float> buf(256 * 1024);
  for (;;) comm.allReduce(buf.data(), buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum);
}

// `inA[r]`: whether rank r runs in namespace a (rank 0, which serves the store, must).
void linkDownMidCollective(const std::vector<bool>& inA) {
  NamespacePair net;
  if (!net.ok()) GTEST_SKIP() << net.why();
  const int n = static_cast<int>(inA.size());
  Options o;
  o.timeout = 2s;
  o.stallWarn = 1s;
  o.token = "netns-fault-" + std::to_string(::getpid()) + "-" + std::to_string(n);
  RankGroup group(n, o);
  group.masterAddr = "10.213.0.1";
  group.beforeCreate = [&](int rank) { net.enter(inA[rank]); };
  group.makeStore = [&](int rank) -> std::shared_ptr<Store> {
    if (rank == 0) return TcpStore::serve("10.213.0.1", 29511, o.timeout * 10);
    return TcpStore::connect("10.213.0.1", 29511, o.timeout * 10);
  };
  group.start(stream);
  ASSERT_TRUE(group.waitReady(30s)) << "the ranks did not connect across the namespaces";
  std::this_thread::sleep_for(300ms);
  const auto cutAt = Clock::now();
  ASSERT_TRUE(net.cut());
  auto reports = group.join(cutAt + o.timeout + 6s);
  double worst = 0;
  for (const RankReport& r : reports) {
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
    double seconds = testing::secondsBetween(cutAt, r.errorAt);
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
