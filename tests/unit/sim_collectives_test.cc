// The simulator with payload (sim/sim_world.h): gyre's real schedules on 2-256 simulated
// ranks in several host shapes, every rank's result checked bit for bit against inputs
// whose reduction is exact in any order (test_values.h: small integers).
//
// Small slots (64-256 bytes) make every call many slices, so the pipelining, the
// credits and the tree's and hier's interleavings run as they do on large buffers.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "sim/sim_world.h"
#include "test_values.h"

namespace gyre::sim {
namespace {

using gyre::testing::expectedBuffer;
using gyre::testing::inputBuffer;
using gyre::testing::sameBytes;

SimOptions optionsFor(std::vector<int> hostSizes, size_t slotBytes) {
  SimOptions o;
  o.network.hostSizes = std::move(hostSizes);
  o.network.linkBytesPerUs = 12500;
  o.gyre.slotBytes = slotBytes;
  o.gyre.slots = 4;
  return o;
}

std::string shapeName(const std::vector<int>& hosts) {
  return fmt::format("{}", fmt::join(hosts, "+"));
}

// One all-reduce on every rank; returns the algo it ran. Checks result, sendbuf, guard.
uint8_t checkAllReduce(SimWorld& w, size_t count, DataType t, ReduceOp op, bool inPlace) {
  const int n = w.size();
  const size_t bytes = count * dtypeSize(t);
  std::vector<std::vector<std::byte>> in(static_cast<size_t>(n)), out(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    in[static_cast<size_t>(r)] = inputBuffer(t, op, r, count);
    out[static_cast<size_t>(r)].assign(bytes + 1, std::byte{0x5a});
  }
  CollectiveCall call;
  call.kind = CollectiveKind::kAllReduce;
  call.dtype = t;
  call.op = op;
  call.count = count;
  SimResult res = w.run(call, [&](int r) -> std::pair<const void*, void*> {
    auto& i = in[static_cast<size_t>(r)];
    return {i.data(), inPlace ? i.data() : out[static_cast<size_t>(r)].data()};
  });
  const std::vector<std::byte> expected = expectedBuffer(t, op, n, count);
  for (int r = 0; r < n; ++r) {
    const std::string what =
        fmt::format("rank {} of {} ({}), algo {}, count {}, {}", r, n, w.topology().describe(),
                    res.algo, count, inPlace ? "in place" : "out of place");
    const auto& i = in[static_cast<size_t>(r)];
    const auto& o = out[static_cast<size_t>(r)];
    EXPECT_TRUE(sameBytes(inPlace ? i.data() : o.data(), expected.data(), bytes)) << what;
    if (!inPlace) {
      EXPECT_EQ(o[bytes], std::byte{0x5a}) << what << ": wrote past recvbuf";
      EXPECT_TRUE(sameBytes(i.data(), inputBuffer(t, op, r, count).data(), bytes))
          << what << ": sendbuf modified";
    }
  }
  EXPECT_GT(res.micros, 0.0);
  return res.algo;
}

struct Shape {
  std::vector<int> hosts;
  size_t slotBytes;
};

// Every all-reduce algorithm, forced as GYRE_ALGO does, and auto, on every shape.
TEST(SimCollectives, EveryAllReduceAlgorithmExact) {
  const Shape shapes[] = {{{2}, 64},
                          {{7}, 64},
                          {{4, 4}, 64},
                          {{1, 1, 1, 1, 1}, 64},
                          {{3, 5, 8}, 64},
                          {{8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8,
                            8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8},
                           256},
                          {{256}, 256}};
  for (const Shape& s : shapes) {
    SimWorld w(optionsFor(s.hosts, s.slotBytes));
    const int n = w.size();
    SCOPED_TRACE(shapeName(s.hosts));
    for (AllReduceAlgo a :
         {AllReduceAlgo::kRing, AllReduceAlgo::kTree, AllReduceAlgo::kRecursiveDoubling,
          AllReduceAlgo::kHierarchical, AllReduceAlgo::kAuto}) {
      w.setAlgo(a);
      // Several slices per rank's chunk where the world is small; one where it is large.
      const size_t big = n <= 16 ? 40 * static_cast<size_t>(n) + 3 : 2 * static_cast<size_t>(n) + 3;
      // rd only fits one slot: a count that fits runs it, a larger one falls back to the ring.
      const size_t fits = s.slotBytes / sizeof(float) - 3;
      for (size_t count : {size_t{0}, size_t{1}, fits, big}) {
        const uint8_t ran = checkAllReduce(w, count, DataType::kFloat32, ReduceOp::kSum, false);
        if (a == AllReduceAlgo::kRing || a == AllReduceAlgo::kTree) {
          EXPECT_EQ(ran, static_cast<uint8_t>(a));
        }
        if (a == AllReduceAlgo::kHierarchical) {
          EXPECT_EQ(ran,
                    static_cast<uint8_t>(w.topology().hierarchical() ? a : AllReduceAlgo::kRing));
        }
        if (a == AllReduceAlgo::kRecursiveDoubling) {
          EXPECT_EQ(ran, static_cast<uint8_t>(count <= fits + 3 ? a : AllReduceAlgo::kRing));
        }
      }
      if (n <= 16) {
        checkAllReduce(w, big, DataType::kInt32, ReduceOp::kMax, true);
        checkAllReduce(w, big, DataType::kFloat64, ReduceOp::kAvg, false);
      }
    }
  }
}

// Broadcast, reduce, all-gather, reduce-scatter and all-to-all, flat and two-level.
struct Buffers {
  std::vector<std::vector<std::byte>> send, recv;
};

Buffers makeBuffers(int n, size_t sendElems, size_t recvElems, DataType t) {
  Buffers b;
  for (int r = 0; r < n; ++r) {
    b.send.push_back(inputBuffer(t, ReduceOp::kSum, r, sendElems));
    b.recv.emplace_back(recvElems * dtypeSize(t) + 1, std::byte{0x5a});
  }
  return b;
}

SimResult runOn(SimWorld& w, CollectiveKind kind, size_t count, int root, Buffers& b) {
  CollectiveCall call;
  call.kind = kind;
  call.dtype = DataType::kInt32;
  call.op = ReduceOp::kSum;
  call.count = count;
  call.root = root;
  return w.run(call, [&](int r) -> std::pair<const void*, void*> {
    return {b.send[static_cast<size_t>(r)].data(), b.recv[static_cast<size_t>(r)].data()};
  });
}

void checkEveryCollective(SimWorld& w, size_t count, bool allToAll) {
  const int n = w.size();
  const auto un = static_cast<size_t>(n);
  const DataType t = DataType::kInt32;
  const size_t e = sizeof(int32_t);
  auto rankOf = [](size_t r) { return static_cast<int>(r); };
  {  // broadcast: one buffer; the root's holds the data
    const int root = n > 3 ? 3 : n - 1;
    Buffers b = makeBuffers(n, 0, count, t);
    b.recv[static_cast<size_t>(root)] = inputBuffer(t, ReduceOp::kSum, root, count);
    runOn(w, CollectiveKind::kBroadcast, count, root, b);
    const auto want = inputBuffer(t, ReduceOp::kSum, root, count);
    for (size_t r = 0; r < un; ++r)
      EXPECT_TRUE(sameBytes(b.recv[r].data(), want.data(), count * e)) << "broadcast rank " << r;
  }
  {  // reduce to a root
    const int root = n > 5 ? 5 : 0;
    Buffers b = makeBuffers(n, count, count, t);
    runOn(w, CollectiveKind::kReduce, count, root, b);
    const auto want = expectedBuffer(t, ReduceOp::kSum, n, count);
    EXPECT_TRUE(sameBytes(b.recv[static_cast<size_t>(root)].data(), want.data(), count * e))
        << "reduce";
  }
  {  // all-gather: share r of every recvbuf is rank r's input
    Buffers b = makeBuffers(n, count, un * count, t);
    runOn(w, CollectiveKind::kAllGather, count, -1, b);
    for (size_t r = 0; r < un; ++r) {
      for (size_t q = 0; q < un; ++q) {
        const auto want = inputBuffer(t, ReduceOp::kSum, rankOf(q), count);
        EXPECT_TRUE(sameBytes(b.recv[r].data() + q * count * e, want.data(), count * e))
            << "allgather rank " << r << " share " << q;
      }
      EXPECT_EQ(b.recv[r][un * count * e], std::byte{0x5a});
    }
  }
  {  // reduce-scatter: rank r holds share r of the sum of every sendbuf
    Buffers b = makeBuffers(n, un * count, count, t);
    runOn(w, CollectiveKind::kReduceScatter, count, -1, b);
    const auto sum = expectedBuffer(t, ReduceOp::kSum, n, un * count);
    for (size_t r = 0; r < un; ++r) {
      EXPECT_TRUE(sameBytes(b.recv[r].data(), sum.data() + r * count * e, count * e))
          << "reducescatter rank " << r;
    }
  }
  if (allToAll) {  // block q of rank r's recvbuf is block r of rank q's sendbuf
    Buffers b = makeBuffers(n, un * count, un * count, t);
    runOn(w, CollectiveKind::kAllToAll, count, -1, b);
    for (size_t r = 0; r < un; ++r) {
      for (size_t q = 0; q < un; ++q) {
        const auto src = inputBuffer(t, ReduceOp::kSum, rankOf(q), un * count);
        EXPECT_TRUE(
            sameBytes(b.recv[r].data() + q * count * e, src.data() + r * count * e, count * e))
            << "alltoall rank " << r << " from " << q;
      }
    }
  }
}

TEST(SimCollectives, EveryCollectiveExactFlatAndTwoLevel) {
  const Shape shapes[] = {
      {{2}, 64}, {{6}, 64}, {{2, 2, 2}, 64}, {{3, 5, 8}, 64}, {{8, 8, 8, 8}, 128}};
  for (const Shape& s : shapes) {
    SimWorld w(optionsFor(s.hosts, s.slotBytes));
    SCOPED_TRACE(shapeName(s.hosts));
    for (AllReduceAlgo a :
         {AllReduceAlgo::kAuto, AllReduceAlgo::kRing, AllReduceAlgo::kHierarchical}) {
      w.setAlgo(a);
      checkEveryCollective(w, 37, w.size() <= 16);
      checkEveryCollective(w, 1, false);
    }
  }
}

TEST(SimCollectives, LargeCollectivesAt256Ranks) {
  SimWorld w(optionsFor(std::vector<int>(32, 8), 256));
  w.setAlgo(AllReduceAlgo::kHierarchical);
  checkEveryCollective(w, 5, false);
  w.setAlgo(AllReduceAlgo::kRing);
  checkEveryCollective(w, 5, false);
}

}  // namespace
}  // namespace gyre::sim
