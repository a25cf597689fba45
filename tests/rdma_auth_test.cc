// The outsider of tests/auth_attack_scenario.h against a job whose pipes are rdma: every
// rdma pipe keeps one of the rank's authenticated tcp connections as its control link
// (ring/bootstrap.cc), so the listener an outsider can reach is the same, and it must
// refuse the replayed handshake and the made-up tag the same way while the job runs exact
// over the queue pairs. On a real verbs device (soft-RoCE in the VM: tools/rdma_vm.sh),
// ranks 0-1 on RDMA_DEV_A and 2-3 on RDMA_DEV_B; without a device it skips saying why.
#include <cstdlib>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "auth_attack_scenario.h"
#include "rdma_test_support.h"

namespace gyre {
namespace {

using namespace std::chrono_literals;

TEST(RdmaAuth, AnOutsiderOnTheControlLinksGetsNothingAndTheJobIsExact) {
  GYRE_SKIP_WITHOUT_RDMA();
  Options o = Options::fromEnvironment();
  o.transport = TransportKind::kRdma;  // forced: creation fails rather than fall back to tcp
  o.timeout = 120s;                    // emulated verbs: far above what a call takes
  o.slotBytes = 16 * 1024;
  o.slots = 4;
  o.logLevel = LogLevel::kInfo;
  ::setenv("GYRE_DEBUG", "INFO", 1);  // the log level is read once, in each rank
  std::vector<testing::RankReport> reports;
  attack::outsiderGetsNothing(
      o, [](int rank, Options& opts) { opts.ibHca = testing::rdmaHcaFor(rank < 2 ? 0 : 1); },
      &reports);
  ASSERT_EQ(reports.size(), size_t{attack::kRanks});
  for (const testing::RankReport& r : reports) {
    // Every pipe of the job was rdma: 3 peers, a send and a receive pipe each.
    EXPECT_NE(r.log.find("pipes: 0 shm, 6 rdma, 0 tcp"), std::string::npos)
        << "rank " << r.rank << "'s log:\n" << r.log;
  }
}

}  // namespace
}  // namespace gyre
