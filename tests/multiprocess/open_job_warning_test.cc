// A job whose ranks span hosts without a secret (GYRE_TOKEN / GYRE_TOKEN_FILE) is open to
// anyone on the network between them: rank 0 says so once, at WARN, at creation, naming
// the variables and docs/security.md. A job on one host, or with a secret, says nothing;
// a split of a job that has said it does not say it again. Real forked ranks; hosts are
// faked with Options::hostId (GYRE_HOST_ID), which is what tells creation the hosts apart.
#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "fork_ranks.h"
#include "ring/communicator.h"

namespace gyre {
namespace {

using testing::CommRanks;
using testing::RankResult;

constexpr int kRanks = 4;

size_t warnings(const std::string& log) {
  size_t n = 0;
  for (size_t at = log.find("no secret is set"); at != std::string::npos;
       at = log.find("no secret is set", at + 1)) {
    ++n;
  }
  return n;
}

// The ranks' logs after creating a communicator of kRanks (ranks 0-1 on one host, 2-3 on
// another when twoHosts) and a split of it that spans the same hosts, in reverse order,
// so that its rank 0 is another process than the world's.
std::vector<RankResult> run(bool twoHosts, const std::string& secret) {
  Options o;
  o.timeout = std::chrono::seconds(30);
  o.token = secret;
  CommRanks group(kRanks, o);
  group.perRank = [&](int rank, Options& options) {
    options.hostId = twoHosts && rank >= kRanks / 2 ? "fake-host-b" : "fake-host-a";
  };
  group.start([](Communicator& comm, int rank) {
    std::unique_ptr<Communicator> sub = comm.split(0, kRanks - rank);
    float x = 1, sum = 0;
    sub->allReduce(&x, &sum, 1, DataType::kFloat32, ReduceOp::kSum);
    if (sum != kRanks) throw std::runtime_error(fmt::format("all-reduce gave {}", sum));
  });
  EXPECT_TRUE(group.waitReady(std::chrono::seconds(60))) << "ranks did not start";
  std::vector<RankResult> reports = group.join(Clock::now() + std::chrono::seconds(60));
  for (const RankResult& r : reports) {
    EXPECT_TRUE(r.ok) << r.describe();
  }
  return reports;
}

TEST(OpenJobWarning, TwoHostsWithoutASecretWarnOnceOnRankZero) {
  const std::vector<RankResult> reports = run(true, "");
  ASSERT_EQ(reports.size(), size_t{kRanks});
  const std::string& log = reports[0].log;
  ASSERT_EQ(warnings(log), 1u) << log;
  const size_t begin = log.rfind('\n', log.find("no secret is set")) + 1;
  const std::string line = log.substr(begin, log.find('\n', begin) - begin);
  EXPECT_EQ(line.rfind("[gyre rank 0] WARN ", 0), 0u) << line;
  for (const char* want : {"span 2 hosts", "GYRE_TOKEN", "GYRE_TOKEN_FILE", "docs/security.md"}) {
    EXPECT_NE(line.find(want), std::string::npos) << want << " not in: " << line;
  }
  // Not the other ranks, nor the split's rank 0 (world rank 3).
  for (int r = 1; r < kRanks; ++r) EXPECT_EQ(warnings(reports[r].log), 0u) << reports[r].log;
}

TEST(OpenJobWarning, OneHostWithoutASecretIsQuiet) {
  for (const RankResult& r : run(false, "")) EXPECT_EQ(warnings(r.log), 0u) << r.log;
}

TEST(OpenJobWarning, TwoHostsWithASecretAreQuiet) {
  for (const RankResult& r : run(true, "open-job-warning-test-secret")) {
    EXPECT_EQ(warnings(r.log), 0u) << r.log;
  }
}

}  // namespace
}  // namespace gyre
