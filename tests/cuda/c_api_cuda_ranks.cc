// capi/gyre_cuda.h on the fake CUDA runtime: c_api_cuda_cases.c (plain C99) on 2 and 4
// forked ranks, through CUDA IPC and staged through the host (GYRE_CUDA_IPC=0), each its
// own test. The ranks' failures are in their logs. Built only where the fake runtime is
// (tests/CMakeLists.txt), against gyre_c over it.
#include <string>

#include <gtest/gtest.h>

#include "c_api_cuda_cases.h"
#include "fork_ranks.h"
#include "free_ports.h"

namespace {
gyre::testing::ForkedRanks* g_ranks = nullptr;  // the running case's group, in its ranks
int g_size = 0;
}  // namespace

extern "C" int c_api_cuda_all_ranks_here(const char* what) {
  g_ranks->say(what);
  for (int r = 0; r < g_size; ++r) {
    if (!g_ranks->tryWaitFor(r, what, g_ranks->limit())) return 0;
  }
  return 1;
}

namespace gyre {
namespace {

using namespace std::chrono_literals;
using gyre::testing::ForkedRanks;

struct Case {
  int ranks;
  bool ipc;
};

class CApiCuda : public ::testing::TestWithParam<Case> {};

TEST_P(CApiCuda, EveryRankPasses) {
  const Case c = GetParam();
  const uint16_t port = testing::freePort();
  ForkedRanks ranks(c.ranks, 200s);
  g_ranks = &ranks;
  g_size = c.ranks;
  ranks.start([&](int rank) {
    ::setenv("GYRE_TIMEOUT", "30", 1);
    ::setenv("GYRE_TRANSPORT", "tcp", 1);
    ::setenv("GYRE_CUDA_IPC", c.ipc ? "1" : "0", 1);
    ::setenv("RANK", std::to_string(rank).c_str(), 1);
    ::setenv("WORLD_SIZE", std::to_string(c.ranks).c_str(), 1);
    ::setenv("MASTER_ADDR", "127.0.0.1", 1);
    ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
    if (c_api_cuda_rank(rank, c.ranks, c.ipc ? 1 : 0) != 0) {
      fail(ErrorCode::kInternal, "rank {}: checks failed (its log says which)", rank);
    }
  });
  testing::expectAllOk(ranks.join(ranks.started() + 200s));
  g_ranks = nullptr;
}

INSTANTIATE_TEST_SUITE_P(Paths, CApiCuda,
                         ::testing::Values(Case{2, true}, Case{2, false}, Case{4, true},
                                           Case{4, false}),
                         [](const auto& info) {
                           return std::to_string(info.param.ranks) + "_ranks_" +
                                  (info.param.ipc ? "ipc" : "staged");
                         });

}  // namespace
}  // namespace gyre
