// The C API (capi/gyre.h) from C99 (c_api_cases.c, compiled with -Wpedantic): each
// case on 4 forked ranks in both init modes, each its own test, so that a failure names
// the case, the mode and the rank. The ranks' failures are in their logs.
#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "c_api_cases.h"
#include "fork_ranks.h"

namespace {

using namespace std::chrono_literals;
using gyre::testing::ForkedRanks;

ForkedRanks* g_ranks = nullptr;  // the group of the running case, in its ranks

}  // namespace

extern "C" void fork_ranks_say(const char* what) { g_ranks->say(what); }
extern "C" int fork_ranks_wait_for(int rank, const char* what) {
  return g_ranks->tryWaitFor(rank, what, g_ranks->limit()) ? 1 : 0;
}
extern "C" void fork_ranks_publish(const char* name, const void* data, size_t bytes) {
  g_ranks->publish(name, std::string(static_cast<const char*>(data), bytes));
}
extern "C" size_t fork_ranks_read(const char* name, void* data, size_t bytes) {
  try {
    const std::string value = g_ranks->read(name);
    std::memcpy(data, value.data(), std::min(bytes, value.size()));
    return value.size();
  } catch (const std::exception&) {
    return 0;
  }
}

namespace gyre {
namespace {

TEST(CApi, ResultCodesAndInitErrorsWithoutRanks) { EXPECT_EQ(c_api_parent_checks(), 0); }

struct Case {
  bool env;
  int which;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << (c.env ? "env " : "id ") << c_api_case_name(c.which);
}

class CApiCase : public ::testing::TestWithParam<Case> {};

// id: transport auto (shared memory on one host); env: tcp on a free port.
TEST_P(CApiCase, EveryRankPasses) {
  const Case c = GetParam();
  const uint16_t port = c.env ? testing::freePort() : 0;
  ForkedRanks ranks(C_API_RANKS, 100s);
  g_ranks = &ranks;
  ranks.start([&](int rank) {
    // Small slots, so that the larger counts span many; a stall fails within 20 s.
    ::setenv("GYRE_SLOT_BYTES", "16K", 1);
    ::setenv("GYRE_TIMEOUT", "20", 1);
    ::setenv("GYRE_TRANSPORT", c.env ? "tcp" : "auto", 1);
    if (c.env) {
      ::setenv("RANK", std::to_string(rank).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(C_API_RANKS).c_str(), 1);
      ::setenv("MASTER_ADDR", "127.0.0.1", 1);
      ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
    }
    if (c_api_rank(c.env, c.which, rank) != 0) {
      fail(ErrorCode::kInternal, "rank {}: checks failed (its log says which)", rank);
    }
  });
  testing::expectAllOk(ranks.join(ranks.started() + 100s));
  g_ranks = nullptr;
}

std::vector<Case> everyCase() {
  std::vector<Case> cases;
  for (bool env : {false, true}) {
    for (int i = 0; i < c_api_case_count(); ++i) cases.push_back({env, i});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Modes, CApiCase, ::testing::ValuesIn(everyCase()), [](const auto& info) {
  return std::string(info.param.env ? "env_" : "id_") + c_api_case_name(info.param.which);
});

}  // namespace
}  // namespace gyre
