// For the rdma tests: whether this machine has a usable RDMA device (else the test skips
// with the reason, or fails under GYRE_REQUIRE_RDMA=1), and which device each side uses.
// Inside the soft-RoCE VM (tools/rdma_vm.sh) RDMA_DEV_A/RDMA_DEV_B name two rxe devices on
// the two ends of a veth pair, so traffic between "a" and "b" ranks crosses a link.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "base/error.h"
#include "fork_ranks.h"
#include "ring/communicator.h"
#include "ring/options.h"
#include "test_values.h"
#include "transport/rdma/rdma_connector.h"

namespace gyre::testing {

// GYRE_IB_HCA for side 0 ("a") or 1 ("b"): exact device names in the VM, else any device.
inline std::string rdmaHcaFor(int side) {
  const char* dev = std::getenv(side == 0 ? "RDMA_DEV_A" : "RDMA_DEV_B");
  return dev && *dev ? std::string("=") + dev : std::string();
}

// Empty when a device is usable; else why not.
inline std::string rdmaUnavailable() {
  Options o = Options::fromEnvironment();
  o.ibHca = rdmaHcaFor(0);
  std::string why;
  auto c = RdmaConnector::open(o, &why);
  return c ? std::string() : why;
}

// GYRE_REQUIRE_RDMA=1: a missing device fails the rdma tests instead of skipping them (CI
// sets it inside the soft-RoCE VM, so a broken VM cannot pass as "skipped"). A switch of
// the tests (docs/testing.md), not a setting of the library.
inline bool rdmaRequired() {
  const char* v = std::getenv("GYRE_REQUIRE_RDMA");
  return v && std::string(v) == "1";
}

// A rank's body for the fault tests: exact all-reduces of 7 and 100000 floats in turn,
// until the communicator fails (the fault under test ends it). Each rank posts
// "streaming" on `group` once both sizes went through.
inline RankBody allReduceStream(CommRanks& group) {
  return [&group](Communicator& comm, int) {
    std::vector<float> buf(100000);
    const float want = static_cast<float>(comm.size() * (comm.size() + 1) / 2);
    for (uint64_t i = 0;; ++i) {
      if (i == 2) group.post("streaming");
      const size_t count = i % 2 ? 100000 : 7;
      std::fill(buf.begin(), buf.begin() + count, static_cast<float>(comm.rank() + 1));
      comm.allReduce(buf.data(), buf.data(), count, DataType::kFloat32, ReduceOp::kSum);
      check(buf[0] == want && buf[count - 1] == want, "wrong sum");
    }
  };
}

}  // namespace gyre::testing

#define GYRE_SKIP_WITHOUT_RDMA()                                                        \
  do {                                                                                  \
    std::string why_ = ::gyre::testing::rdmaUnavailable();                              \
    if (!why_.empty()) {                                                                \
      if (::gyre::testing::rdmaRequired()) {                                            \
        FAIL() << "GYRE_REQUIRE_RDMA=1 but no RDMA device is usable: " << why_;         \
      }                                                                                 \
      std::printf("rdma test skipped: %s\n", why_.c_str());                             \
      GTEST_SKIP() << "no usable RDMA device: " << why_;                                \
    }                                                                                   \
  } while (0)
