// GradSync on real ranks: DDP's bucket assignment, exact averages (integer-valued inputs
// whose averages are exact in any reduction order), launch order independent of the order
// gradients are marked, no_sync accumulation, broadcast of parameters, and the errors for
// a gradient marked twice or never.
//
// Every check inside a rank throws (spawn() reports the failing rank), so the tests hold
// whether spawn() runs ranks as threads or as processes.
#include "ddp/grad_sync.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>

#include "base/error.h"
#include "ring/spawn.h"

namespace gyre {
namespace {

void require(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

std::string messageOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Sizes chosen so that, with 64-byte buckets, some parameters share a bucket, one is larger
// than a bucket, and one is empty.
const std::vector<size_t> kCounts = {5, 40, 3, 3, 0, 17, 1, 9, 30, 2};
const GradSyncOptions kSmallBuckets{/*bucketCapBytes=*/64, /*firstBucketCapBytes=*/16};

// Rank r's contribution to element e of parameter i; over n ranks it sums to n * base, so
// the average is exactly base (an integer) whatever the reduction order.
float contribution(size_t i, size_t e, int rank, int n) {
  const float base = static_cast<float>((i * 7 + e * 3) % 11) - 5.0f;
  return base + static_cast<float>(2 * rank - (n - 1));
}
float average(size_t i, size_t e) { return static_cast<float>((i * 7 + e * 3) % 11) - 5.0f; }

TEST(GradSyncTest, BucketsAreFormedInReverseOrderWithDdpCaps) {
  // DDP closes a bucket once its size reaches the cap: 16-byte tensors, caps 20 then 32.
  EXPECT_EQ(assignBuckets({4, 4, 4, 4, 4}, 20, 32),
            (std::vector<std::vector<size_t>>{{4, 3}, {2, 1}, {0}}));
  // The trainer's MLP (784-512-256-10) in DDP's defaults: everything fits in the first
  // bucket until W0 pushes it past 1 MiB, so a single bucket.
  const std::vector<size_t> mlp = {784 * 512, 512, 512 * 256, 256, 256 * 10, 10};
  EXPECT_EQ(assignBuckets(mlp, 1 << 20, 25 << 20),
            (std::vector<std::vector<size_t>>{{5, 4, 3, 2, 1, 0}}));
  EXPECT_EQ(assignBuckets(mlp, 256 << 10, 25 << 20),
            (std::vector<std::vector<size_t>>{{5, 4, 3, 2}, {1, 0}}));
  EXPECT_TRUE(assignBuckets({}, 1, 1).empty());
}

TEST(GradSyncTest, AveragesAreExactAndLeftInPlace) {
  for (int n : {1, 2, 3, 4}) {
    SCOPED_TRACE(n);
    EXPECT_NO_THROW(spawn(n, [n](Communicator& comm) {
      // Odd parameters keep their gradient in a caller buffer (copied), even ones in the
      // bucket arena (views).
      std::vector<std::vector<float>> own(kCounts.size());
      std::vector<GradSyncParam> params;
      for (size_t i = 0; i < kCounts.size(); ++i) {
        own[i].resize(kCounts[i]);
        params.push_back({nullptr, i % 2 ? own[i].data() : nullptr, kCounts[i]});
      }
      GradSync sync(comm, params, kSmallBuckets);
      require(sync.numBuckets() > 3, "expected several buckets");
      for (int step = 0; step < 3; ++step) {
        for (size_t i = kCounts.size(); i-- > 0;) {
          std::span<float> g = sync.gradient(i);
          for (size_t e = 0; e < g.size(); ++e) {
            g[e] = contribution(i, e, comm.rank(), n) * static_cast<float>(step + 1);
          }
          sync.markReady(i);
        }
        sync.finish();
        for (size_t i = 0; i < kCounts.size(); ++i) {
          std::span<float> g = sync.gradient(i);
          require(g.data() == (i % 2 ? own[i].data() : g.data()), "gradient moved");
          for (size_t e = 0; e < g.size(); ++e) {
            const float want = average(i, e) * static_cast<float>(step + 1);
            require(g[e] == want, fmt::format("rank {} step {} param {} element {}: {} != {}",
                                              comm.rank(), step, i, e, g[e], want));
          }
        }
      }
      const GradSyncStats s = sync.stats();
      require(s.steps == 3, "steps");
      require(s.allReduces == 3 * sync.numBuckets(), "one all-reduce per bucket and step");
      size_t total = 0;
      for (size_t c : kCounts) total += c;
      require(s.bytes == 3 * total * sizeof(float), "bytes");
      require(s.hiddenSeconds <= s.allReduceSeconds + 1e-9, "hidden <= total");
      require(s.fractionHidden() >= 0 && s.fractionHidden() <= 1, "fraction");
    }));
  }
}

// The worker's scheduling follows GYRE_SYNC_PRIORITY (Options.syncPriority); averages are
// exact whatever it got. Where the process may use SCHED_FIFO (root here), auto takes it.
TEST(GradSyncTest, WorkerPriorityFollowsTheOption) {
  for (ThreadPriority p : {ThreadPriority::kNormal, ThreadPriority::kNice, ThreadPriority::kAuto,
                           ThreadPriority::kRealtime}) {
    SpawnOptions so;
    so.options.syncPriority = p;
    so.options.timeout = std::chrono::seconds(30);
    EXPECT_NO_THROW(spawn(2, [p](Communicator& comm) {
      std::vector<GradSyncParam> params;
      for (size_t c : kCounts) params.push_back({nullptr, nullptr, c});
      GradSync sync(comm, params, kSmallBuckets);
      const std::string got = sync.workerPriority();
      const bool root = ::geteuid() == 0;
      if (p == ThreadPriority::kNormal) require(got == "normal", "normal gave " + got);
      if (p == ThreadPriority::kNice) require(got == "nice" || !root, "nice gave " + got);
      if (p == ThreadPriority::kAuto || p == ThreadPriority::kRealtime) {
        require(got == "realtime" || !root, "auto/realtime as root gave " + got);
        require(got != "unknown", "the worker never reported its priority");
      }
      for (size_t i = kCounts.size(); i-- > 0;) {
        std::span<float> g = sync.gradient(i);
        for (size_t e = 0; e < g.size(); ++e) g[e] = contribution(i, e, comm.rank(), 2);
        sync.markReady(i);
      }
      sync.finish();
      for (size_t i = 0; i < kCounts.size(); ++i) {
        std::span<float> g = sync.gradient(i);
        for (size_t e = 0; e < g.size(); ++e) {
          require(g[e] == average(i, e), fmt::format("{}: param {} element {}", got, i, e));
        }
      }
    }, so));
  }
}

TEST(GradSyncTest, ViewsOfConsecutiveParametersAreContiguous) {
  EXPECT_NO_THROW(spawn(1, [](Communicator& comm) {
    std::vector<GradSyncParam> params;
    for (size_t c : kCounts) params.push_back({nullptr, nullptr, c});
    GradSync sync(comm, params, kSmallBuckets);
    for (size_t i = 0; i + 1 < kCounts.size(); ++i) {
      require(sync.gradient(i).data() + kCounts[i] == sync.gradient(i + 1).data(),
              "arena not in parameter order");
    }
  }));
}

TEST(GradSyncTest, BucketsLaunchInTheSameOrderWhateverTheMarkingOrder) {
  const int n = 3;
  EXPECT_NO_THROW(spawn(n, [](Communicator& comm) {
    std::vector<GradSyncParam> params;
    for (size_t c : kCounts) params.push_back({nullptr, nullptr, c});
    GradSync sync(comm, params, kSmallBuckets);
    std::vector<size_t> order(kCounts.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    // Rank 0 marks in parameter order (the worst case: the last bucket is ready first),
    // rank 1 in reverse, rank 2 shuffled.
    if (comm.rank() == 1) std::reverse(order.begin(), order.end());
    if (comm.rank() == 2) std::shuffle(order.begin(), order.end(), std::mt19937(7));
    for (int step = 0; step < 2; ++step) {
      for (size_t i : order) {
        std::span<float> g = sync.gradient(i);
        for (size_t e = 0; e < g.size(); ++e) g[e] = contribution(i, e, comm.rank(), n);
        sync.markReady(i);
      }
      sync.finish();
      std::vector<size_t> expected(sync.numBuckets());
      for (size_t b = 0; b < expected.size(); ++b) expected[b] = b;
      require(sync.lastLaunchOrder() == expected, "buckets launched out of order");
      for (size_t i = 0; i < kCounts.size(); ++i) {
        for (size_t e = 0; e < kCounts[i]; ++e) {
          require(sync.gradient(i)[e] == average(i, e), "wrong average");
        }
      }
    }
  }));
}

TEST(GradSyncTest, GradientMarkedTwiceIsAnErrorNamingIt) {
  EXPECT_NO_THROW(spawn(2, [](Communicator& comm) {
    std::vector<GradSyncParam> params;
    for (size_t c : kCounts) params.push_back({nullptr, nullptr, c});
    GradSync sync(comm, params, kSmallBuckets);
    sync.markReady(3);
    const std::string msg = messageOf([&] { sync.markReady(3); });
    require(msg.find("parameter 3") != std::string::npos && msg.find("twice") != std::string::npos,
            "message: " + msg);
    require(messageOf([&] { sync.markReady(99); }).find("99") != std::string::npos, "range");
    // The rejected call changed nothing: the step completes normally.
    for (size_t i = 0; i < kCounts.size(); ++i) {
      if (i != 3) sync.markReady(i);
    }
    sync.finish();
  }));
}

TEST(GradSyncTest, GradientNeverMarkedIsAnErrorNamingIt) {
  const int n = 2;
  EXPECT_NO_THROW(spawn(n, [](Communicator& comm) {
    std::vector<GradSyncParam> params;
    for (size_t c : kCounts) params.push_back({nullptr, nullptr, c});
    GradSync sync(comm, params, kSmallBuckets);
    // Every rank forgets parameter 1: the buckets before its bucket are launched and
    // completed on all ranks, then finish() reports it.
    for (size_t i = 0; i < kCounts.size(); ++i) {
      if (i != 1) sync.markReady(i);
    }
    const std::string msg = messageOf([&] { sync.finish(); });
    require(msg.find("parameter 1 ") != std::string::npos && msg.find("never") != std::string::npos,
            "message: " + msg);
    // The next step starts clean.
    for (size_t i = 0; i < kCounts.size(); ++i) {
      std::span<float> g = sync.gradient(i);
      for (size_t e = 0; e < g.size(); ++e) g[e] = contribution(i, e, comm.rank(), n);
      sync.markReady(i);
    }
    sync.finish();
    require(sync.gradient(8)[4] == average(8, 4), "step after the error");
  }));
}

TEST(GradSyncTest, NoSyncAccumulatesLocallyThenAveragesTheSum) {
  const int n = 4;
  EXPECT_NO_THROW(spawn(n, [](Communicator& comm) {
    std::vector<std::vector<float>> own(kCounts.size());
    std::vector<GradSyncParam> params;
    for (size_t i = 0; i < kCounts.size(); ++i) {
      own[i].assign(kCounts[i], 0.0f);
      params.push_back({nullptr, i % 3 == 0 ? own[i].data() : nullptr, kCounts[i]});
    }
    GradSync sync(comm, params, kSmallBuckets);
    auto microStep = [&](int k) {
      for (size_t i = kCounts.size(); i-- > 0;) {
        std::span<float> g = sync.gradient(i);
        // The caller accumulates (as backward with accumulate = true does).
        for (size_t e = 0; e < g.size(); ++e) {
          g[e] = (k == 0 ? 0.0f : g[e]) + contribution(i, e, comm.rank(), n);
        }
        sync.markReady(i);
      }
      sync.finish();
    };
    {
      GradSync::NoSync guard(sync);
      microStep(0);
      microStep(1);
      require(sync.stats().allReduces == 0, "no_sync communicated");
      // Still local: rank-dependent values.
      require(sync.gradient(8)[0] == 2 * contribution(8, 0, comm.rank(), n), "not local");
    }
    require(sync.syncEnabled(), "guard restores sync");
    microStep(2);
    for (size_t i = 0; i < kCounts.size(); ++i) {
      for (size_t e = 0; e < kCounts[i]; ++e) {
        require(sync.gradient(i)[e] == 3 * average(i, e), "accumulated average");
      }
    }
    require(sync.stats().steps == 1, "one synchronised step");
  }));
}

TEST(GradSyncTest, ParametersAreBroadcastFromRankZeroBitForBit) {
  EXPECT_NO_THROW(spawn(3, [](Communicator& comm) {
    const float r = static_cast<float>(comm.rank());
    std::vector<float> a = {1.5f + r, -0.0f, 0.0f, 1e-38f, -3.25e7f + r, 0.1f};
    std::vector<float> b(100);
    for (size_t k = 0; k < b.size(); ++k) b[k] = std::sin(static_cast<float>(k) + 10 * r);
    if (comm.rank() != 0) a[1] = 0.0f, a[2] = -0.0f;  // zeros of the other sign elsewhere
    std::vector<float> gradA(a.size()), gradB(b.size());
    GradSync sync(comm, {{a.data(), gradA.data(), a.size()}, {b.data(), nullptr, b.size()}});
    const std::vector<float> wantA = {1.5f, -0.0f, 0.0f, 1e-38f, -3.25e7f, 0.1f};
    require(std::memcmp(a.data(), wantA.data(), a.size() * sizeof(float)) == 0, "a bits");
    for (size_t k = 0; k < b.size(); ++k) {
      const float want = std::sin(static_cast<float>(k));
      require(std::memcmp(&b[k], &want, sizeof(float)) == 0, "b bits");
    }
  }));
}

}  // namespace
}  // namespace gyre
