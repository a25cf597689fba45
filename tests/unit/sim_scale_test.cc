// The simulator's clock and its failure reports (sim/): the network model's time for one
// slice in closed form, the same prediction with and without payload, determinism,
// payload-free runs at 1,024 ranks with the bytes counted exactly, and a deliberately
// wrong phase order caught as a deadlock that names the waiting ranks.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "collectives/primitives.h"
#include "sim/sim_world.h"

namespace gyre::sim {
namespace {

SimOptions optionsFor(std::vector<int> hostSizes, bool payload) {
  SimOptions o;
  o.network.hostSizes = std::move(hostSizes);
  o.payload = payload;
  return o;
}

CollectiveCall allReduceCall(size_t count) {
  CollectiveCall call;
  call.kind = CollectiveKind::kAllReduce;
  call.count = count;
  return call;
}

SimResult payloadFree(SimWorld& w, const CollectiveCall& call, size_t bytes) {
  NoPayloadBuffers none(bytes);
  return w.run(call, [&](int) -> std::pair<const void*, void*> {
    return {none.send(), none.recv()};
  });
}

// One slice across hosts: sender overhead, the wire time of the payload and its frame at
// the link rate (with a full token bucket: at the peak rate), alpha, then the receiver's
// cost (overhead + bytes at the cpu rate).
void checkOneSlice(double burstBytes) {
  SimOptions o = optionsFor({1, 1}, true);
  o.network.linkBurstBytes = burstBytes;
  SimWorld w(o);
  const size_t bytes = 1000;
  std::vector<std::byte> buf(bytes, std::byte{7});
  CollectiveCall call;
  call.kind = CollectiveKind::kSendRecv;
  call.dtype = DataType::kUint8;
  call.count = bytes;
  SimResult res = w.runBodies([&](int rank, const PrimitiveContext& ctx, const PeerPipes& pipes) {
    if (rank == 0) {
      Primitives p(linked(ctx, pipes, -1, 1), call, 1);
      p.send(buf.data(), bytes);
    } else {
      std::vector<std::byte> got(bytes);
      Primitives p(linked(ctx, pipes, 0, -1), call, 1);
      p.recv(got.data(), bytes);
      EXPECT_EQ(std::memcmp(got.data(), buf.data(), bytes), 0);
    }
  });
  const NetworkModel& m = o.network;
  const double wire = (bytes + NetworkModel::kFrameOverhead) / m.tcpPayloadShare;
  const double rate = burstBytes > 0 ? m.linkPeakBytesPerUs : m.linkBytesPerUs;
  const double want =
      m.sliceOverheadUs + wire / rate + m.linkAlphaUs + m.sliceOverheadUs + bytes / m.cpuBytesPerUs;
  EXPECT_NEAR(res.micros, want, 1e-9) << "burst " << burstBytes;
  EXPECT_EQ(res.counters.slices, 1u);
  EXPECT_EQ(res.counters.bytes, bytes);
}

TEST(SimClock, OneSliceInClosedForm) {
  checkOneSlice(0);
  checkOneSlice(1e6);  // a tbf bucket that holds the slice: it passes at the peak rate
}

TEST(SimClock, SamePredictionWithAndWithoutPayloadAndDeterministic) {
  const size_t count = 300000;  // 1.2 MB: several slices of 128 KiB per chunk
  for (AllReduceAlgo a :
       {AllReduceAlgo::kRing, AllReduceAlgo::kTree, AllReduceAlgo::kHierarchical}) {
    SimWorld data(optionsFor({4, 4}, true));
    SimWorld none(optionsFor({4, 4}, false));
    data.setAlgo(a);
    none.setAlgo(a);
    std::vector<std::vector<float>> in(8, std::vector<float>(count, 1.0f));
    std::vector<std::vector<float>> out(8, std::vector<float>(count, 0.0f));
    SimResult d = data.run(allReduceCall(count), [&](int r) -> std::pair<const void*, void*> {
      return {in[static_cast<size_t>(r)].data(), out[static_cast<size_t>(r)].data()};
    });
    for (const auto& o : out) EXPECT_EQ(o[count - 1], 8.0f);
    SimResult p = payloadFree(none, allReduceCall(count), count * 4);
    SimResult again = payloadFree(none, allReduceCall(count), count * 4);
    EXPECT_EQ(d.micros, p.micros) << algoName(a);
    EXPECT_EQ(p.micros, again.micros) << algoName(a);
    EXPECT_EQ(d.counters.bytes, p.counters.bytes) << algoName(a);
    EXPECT_EQ(d.counters.slices, p.counters.slices) << algoName(a);
  }
}

// 128 hosts x 8 ranks without payload: every algorithm finishes, the ring moves exactly
// 2(n-1) chunks per rank, and nothing beats the link-bound time of the ring's bytes.
TEST(SimScale, PayloadFreeAt1024Ranks) {
  SimWorld w(optionsFor(std::vector<int>(128, 8), false));
  const int n = w.size();
  const size_t count = size_t{1} << 20;  // 4 MiB of floats; chunk = 1024 floats = 4 KiB
  w.setAlgo(AllReduceAlgo::kRing);
  SimResult ring = payloadFree(w, allReduceCall(count), count * 4);
  const size_t chunk = count * 4 / static_cast<size_t>(n);
  EXPECT_EQ(ring.counters.bytes, static_cast<size_t>(n) * 2 * static_cast<size_t>(n - 1) * chunk);
  EXPECT_EQ(ring.counters.slices, static_cast<size_t>(n) * 2 * static_cast<size_t>(n - 1));
  const NetworkModel& m = w.options().network;
  const double linkBound = 2.0 * (n - 1) / n * static_cast<double>(count * 4) / m.linkBytesPerUs;
  EXPECT_GT(ring.micros, linkBound);
  for (AllReduceAlgo a :
       {AllReduceAlgo::kTree, AllReduceAlgo::kHierarchical, AllReduceAlgo::kAuto}) {
    w.setAlgo(a);
    SimResult r = payloadFree(w, allReduceCall(count), count * 4);
    EXPECT_GT(r.micros, 0.0) << algoName(a);
    EXPECT_GT(r.counters.bytes, 0u) << algoName(a);
  }
}

// Every rank receives from its left before it sends right: nobody ever sends.
TEST(SimDeadlock, ReceiveBeforeSendIsNamed) {
  SimWorld w(optionsFor({2, 2}, true));
  CollectiveCall call = allReduceCall(4);
  try {
    w.runBodies([&](int, const PrimitiveContext& ctx, const PeerPipes&) {
      float buf[4] = {1, 2, 3, 4};
      Primitives p(ctx, call, 4);
      p.recv(buf, 4);
      p.send(buf, 4);
    });
    FAIL() << "no deadlock reported";
  } catch (const SimDeadlock& e) {
    EXPECT_EQ(e.waiting(), (std::vector<int>{0, 1, 2, 3}));
    EXPECT_NE(std::string(e.what()).find("rank 0 waits for a slice from rank 3"), std::string::npos)
        << e.what();
  }
}

// A ring whose ranks each send three slices before receiving any, on pipes of 2 slots:
// the third send waits for a credit that only the (also sending) neighbour could return.
TEST(SimDeadlock, SendAheadOfCreditsIsNamed) {
  SimOptions o = optionsFor({3}, true);
  o.gyre.slots = 2;
  o.gyre.slotBytes = 64;
  SimWorld w(o);
  CollectiveCall call = allReduceCall(16);
  try {
    w.runBodies([&](int, const PrimitiveContext& ctx, const PeerPipes&) {
      float buf[16] = {};
      Primitives p(ctx, call, 3);
      for (int i = 0; i < 3; ++i) p.send(buf, 16);
      for (int i = 0; i < 3; ++i) p.recv(buf, 16);
    });
    FAIL() << "no deadlock reported";
  } catch (const SimDeadlock& e) {
    EXPECT_EQ(e.waiting(), (std::vector<int>{0, 1, 2}));
    EXPECT_NE(std::string(e.what()).find("rank 1 waits for a free slot (credit) from rank 2"),
              std::string::npos)
        << e.what();
  }
  // The world stays usable after a deadlock: the next call runs on fresh fibers.
  o.payload = false;
  SimWorld fresh(o);
  EXPECT_GT(payloadFree(fresh, allReduceCall(16), 64).micros, 0.0);
}

// A failure inside a schedule (here a peer that runs another call) is the error run()
// throws, not the deadlock that follows it.
TEST(SimDeadlock, MismatchIsReportedAsMismatch) {
  SimWorld w(optionsFor({3}, true));
  try {
    w.runBodies([&](int rank, const PrimitiveContext& ctx, const PeerPipes&) {
      float buf[8] = {};
      CollectiveCall call = allReduceCall(rank == 1 ? 4 : 8);
      Primitives p(ctx, call, 3);
      p.send(buf, call.count);
      p.recv(buf, call.count);
    });
    FAIL() << "no error";
  } catch (const SimDeadlock& e) {
    FAIL() << "reported a deadlock: " << e.what();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kMismatch) << e.what();
  }
}

// A token bucket as a stream of ops leaves it: the first call after a full bucket passes
// at the peak rate; each further one finds less left, until a call of several buckets'
// worth runs at the plain rate. 2 x 1, one 512 KiB all-reduce (the ring sends 2(n-1)/n S
// = 512 KiB each way), a 128 KiB bucket at 500 Mbit/s.
TEST(SimNetwork, CallsBeforeDrainTheBucket) {
  const size_t count = size_t{1} << 17;  // 512 KiB
  double times[3];
  const int before[3] = {1, 4, 8};
  for (int i = 0; i < 3; ++i) {
    SimOptions o = optionsFor({1, 1}, false);
    o.network.linkBytesPerUs = 62.5;
    o.network.linkBurstBytes = 131072;
    // 128 KiB slices, a burst each: with the default 512 KiB slots of an all-tcp world
    // (two 256 KiB slices a call here) one call already leaves the bucket as every later
    // one does, and there is no carry-over left to see.
    o.gyre.slotBytes = 128 * 1024;
    o.callsBefore = before[i];
    SimWorld w(o);
    w.setAlgo(AllReduceAlgo::kRing);
    times[i] = payloadFree(w, allReduceCall(count), count * 4).micros;
  }
  const double plain = 524288.0 / (62.5 * NetworkModel{}.tcpPayloadShare);
  EXPECT_LT(times[0], times[1]) << "a drained bucket must cost";
  EXPECT_NEAR(times[1], times[2], 0.01 * times[2]) << "steady by the 4th call";
  EXPECT_GT(times[1], 0.95 * plain) << times[1] << " against the plain rate's " << plain;
  // runNext: the same stream, one call at a time, the bucket carried along: the first
  // (fresh) call is run()'s bucket-full one, the fifth equals run() after 4 before.
  SimOptions o = optionsFor({1, 1}, false);
  o.network.linkBytesPerUs = 62.5;
  o.network.linkBurstBytes = 131072;
  o.gyre.slotBytes = 128 * 1024;
  SimWorld w(o);
  w.setAlgo(AllReduceAlgo::kRing);
  NoPayloadBuffers none(count * 4);
  auto buffers = [&](int) -> std::pair<const void*, void*> { return {none.send(), none.recv()}; };
  const double first = w.runNext(allReduceCall(count), buffers, /*fresh=*/true).micros;
  double fifth = 0;
  for (int i = 0; i < 4; ++i) fifth = w.runNext(allReduceCall(count), buffers).micros;
  EXPECT_LT(first, times[0]) << "a full bucket is quicker than one a call has drained";
  EXPECT_NEAR(fifth, times[1], 1e-6 * times[1]);
}

// The simulated pipes take a communicator's slot: 512 KiB where every pipe is tcp (one rank
// a host: the model's hosts meet over tcp), 128 KiB where a host has several ranks (shm
// inside), GYRE_SLOT_BYTES where set.
TEST(SimWorld, SlotFollowsThePipesAsACommunicatorsDoes) {
  struct Case {
    std::vector<int> hosts;
    size_t set, want;
  };
  for (const Case& c : {Case{{1, 1, 1, 1}, 0, 512 * 1024}, Case{{2, 2}, 0, 128 * 1024},
                        Case{{1, 3}, 0, 128 * 1024}, Case{{1, 1, 1, 1}, 64 * 1024, 64 * 1024}}) {
    SimOptions o = optionsFor(c.hosts, true);
    o.gyre.slotBytes = c.set;
    SimWorld w(o);
    EXPECT_EQ(w.slotBytes(), c.want) << c.hosts.size() << " hosts, set " << c.set;
    // A call of several slots stays exact (the tree's slices capped at 128 KiB).
    const size_t count = (3 << 18) + 5;  // 3 MiB of float32
    for (AllReduceAlgo algo : {AllReduceAlgo::kRing, AllReduceAlgo::kTree}) {
      w.setAlgo(algo);
      std::vector<std::vector<float>> bufs(static_cast<size_t>(w.size()));
      for (int r = 0; r < w.size(); ++r)
        bufs[static_cast<size_t>(r)].assign(count, static_cast<float>(r + 1));
      auto buffers = [&](int r) -> std::pair<const void*, void*> {
        return {bufs[static_cast<size_t>(r)].data(), bufs[static_cast<size_t>(r)].data()};
      };
      w.runNext(allReduceCall(count), buffers, /*fresh=*/true);
      const float want = static_cast<float>(w.size() * (w.size() + 1) / 2);
      for (int r = 0; r < w.size(); ++r) {
        for (size_t i = 0; i < count; ++i) {
          ASSERT_EQ(bufs[static_cast<size_t>(r)][i], want) << "rank " << r << " element " << i;
        }
      }
    }
  }
}

// An oversubscribed switch tier slows the ring across leaves; a full-bisection one does not.
TEST(SimNetwork, OversubscribedUplinksCost) {
  const size_t count = size_t{1} << 22;  // 16 MiB
  double times[2];
  for (int i = 0; i < 2; ++i) {
    SimOptions o = optionsFor({1, 1, 1, 1, 1, 1, 1, 1}, false);
    o.network.linkBytesPerUs = 1250;  // 10 Gbit/s and a fast CPU: the link bounds the ring
    o.network.cpuBytesPerUs = 20000;
    o.network.hostsPerLeaf = 2;
    o.network.oversub = i == 0 ? 1 : 4;
    SimWorld w(o);
    w.setAlgo(AllReduceAlgo::kRing);
    times[i] = payloadFree(w, allReduceCall(count), count * 4).micros;
  }
  EXPECT_GT(times[1], times[0] * 1.5) << times[0] << " " << times[1];
}

}  // namespace
}  // namespace gyre::sim
