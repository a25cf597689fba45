// Failures of the rdma transport that come from the machine, not from a peer process,
// on a real verbs device (soft-RoCE in the VM: tools/rdma_vm.sh):
//  - the link under the devices goes down mid-collective (`ip link set vb down`, one end
//    of the veth pair the two rxe devices sit on): each device raises IBV_EVENT_PORT_ERR
//    on its async fd, and every rank fails naming the collective and a peer, within
//    seconds, instead of hanging or waiting out the RC retries (the event, or a send
//    that failed before it was read: at least one rank names the port); the link is
//    then brought back for the tests after this one;
//  - a registration that the locked-memory limit refuses (ranks run as an unprivileged
//    user with RLIMIT_MEMLOCK at 64 KiB): creation fails on every rank naming the limit
//    and how to raise it.
// Without a device every case skips saying why (fails under GYRE_REQUIRE_RDMA=1); the
// link case needs the VM's topology (RDMA_VM_RELINK, RDMA_NETDEV_B) and skips elsewhere
// (it would take down a real interface).
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdlib>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "base/error.h"
#include "fork_ranks.h"
#include "rdma_test_support.h"
#include "ring/communicator.h"
#include "test_values.h"

namespace gyre {
namespace {

using testing::allReduceStream;
using testing::check;

Options rdmaOptions(const char* token) {
  Options o = Options::fromEnvironment();
  o.transport = TransportKind::kRdma;
  o.timeout = std::chrono::seconds(60);
  o.slotBytes = 16 * 1024;
  o.slots = 4;
  o.token = fmt::format("{}{}", token, ::getpid());
  return o;
}

int shell(const std::string& command) {
  std::fflush(stdout);
  return std::system(command.c_str());
}

// Brings the VM's link back however the test ends: the tests after it need it.
struct Relink {
  std::string script;
  ~Relink() {
    if (shell(script) != 0) ADD_FAILURE() << script << " failed: later rdma tests will fail";
  }
};

TEST(RdmaFaults, LinkDownMidCollectiveFailsEveryRankNamingIt) {
  GYRE_SKIP_WITHOUT_RDMA();
  const char* relink = std::getenv("RDMA_VM_RELINK");
  const char* netdev = std::getenv("RDMA_NETDEV_B");
  if (!relink || !netdev || testing::rdmaHcaFor(1).empty()) {
    GTEST_SKIP() << "needs the soft-RoCE VM (tools/rdma_vm.sh sets RDMA_VM_RELINK, "
                    "RDMA_NETDEV_B and RDMA_DEV_B): it takes a network link down";
  }
  constexpr int kRanks = 4;
  testing::CommRanks group(kRanks, rdmaOptions("rdmalinkdown"));
  group.perRank = [](int rank, Options& o) { o.ibHca = testing::rdmaHcaFor(rank < 2 ? 0 : 1); };
  group.start(allReduceStream(group));
  ASSERT_TRUE(group.waitReady(std::chrono::seconds(120))) << "ranks did not start";
  ASSERT_TRUE(group.tryAwait("streaming", kRanks, std::chrono::seconds(120)));
  Relink restore{relink};
  const auto downAt = Clock::now();
  ASSERT_EQ(shell(fmt::format("ip link set {} down", netdev)), 0);
  auto reports = group.join(downAt + std::chrono::seconds(30));
  // The device whose link went down (rank 2 and 3's), followed by its port.
  const std::regex downPort(testing::rdmaHcaFor(1).substr(1) + R"( port \d+)");
  int namingThePort = 0;
  for (const testing::RankResult& r : reports) {
    EXPECT_FALSE(r.hung) << r.rank << ": " << r.message << "\n" << r.log;
    ASSERT_TRUE(r.reported && !r.ok) << r.rank << ": " << r.message << "\n" << r.log;
    EXPECT_NE(r.message.find("allreduce"), std::string::npos) << r.message;
    EXPECT_NE(r.message.find("peer rank"), std::string::npos) << r.message;
    // Its own port's event, or a peer's abort that carries it; or, where a send failed
    // before the event was read, the failed completion, which names the device and port
    // it failed on (the others may name only the closed control link of that rank).
    // Which comes first is a race of the kernel's, so either counts.
    namingThePort += r.message.find("port went down") != std::string::npos ||
                     std::regex_search(r.message, downPort);
    const double seconds = std::chrono::duration<double>(r.endedAt - downAt).count();
    EXPECT_LT(seconds, 10.0) << r.message;  // emulated; the RC retries alone take longer
    std::printf("[rdma link down] rank %d: %.0f ms: %s\n", r.rank, seconds * 1e3, r.message.c_str());
  }
  EXPECT_GE(namingThePort, 1) << "no rank named the port that went down";
}

TEST(RdmaFaults, MemlockLimitIsNamedWhenRegistrationFails) {
  GYRE_SKIP_WITHOUT_RDMA();
  constexpr int kRanks = 2;
  constexpr rlim_t kLimit = 64 * 1024;
  Options o = rdmaOptions("rdmamemlock");
  o.timeout = std::chrono::seconds(30);
  o.slotBytes = 512 * 1024;  // 2 MiB of slots per pipe, far above the limit
  testing::CommRanks group(kRanks, o);
  group.perRank = [](int rank, Options& opts) { opts.ibHca = testing::rdmaHcaFor(rank); };
  group.beforeCreate = [](int) {
    rlimit lim{kLimit, kLimit};
    if (::setrlimit(RLIMIT_MEMLOCK, &lim) != 0) failSystem(errno, "setrlimit(RLIMIT_MEMLOCK)");
    // Root (the VM runs the tests as root) has CAP_IPC_LOCK, which the limit does not bind.
    if (::geteuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0)) {
      failSystem(errno, "dropping to uid 65534");
    }
  };
  group.start([](Communicator&, int) {});
  auto reports = group.join(Clock::now() + std::chrono::seconds(60));
  for (const testing::RankResult& r : reports) {
    EXPECT_FALSE(r.hung) << r.rank << ": " << r.message << "\n" << r.log;
    ASSERT_TRUE(r.reported && !r.ok) << r.rank << ": a communicator was made: " << r.log;
    // Each rank registers its own slots first, so each names its own limit.
    EXPECT_NE(r.message.find("ibv_reg_mr"), std::string::npos) << r.message;
    EXPECT_NE(r.message.find(fmt::format("RLIMIT_MEMLOCK is {} bytes", kLimit)), std::string::npos)
        << r.message;
    EXPECT_NE(r.message.find("ulimit -l"), std::string::npos) << r.message;
    EXPECT_NE(r.message.find("LimitMEMLOCK"), std::string::npos) << r.message;
    std::printf("[rdma memlock] rank %d: %s\n", r.rank, r.message.c_str());
  }
}

}  // namespace
}  // namespace gyre
