// spinPause (transport/spin_pause.h), the pause of every bounded spin in the pipes: it
// yields the core, ends the spin when a yield comes back late, and stops spinning for a
// while when late yields repeat (another process runs out time slices on this core), so
// that the waiter sleeps and is woken by its data instead of queueing behind a CPU hog.
// Its policy (YieldWatch) with made-up times; spinPause itself with real processes: a
// busy child pinned to this thread's core.
#include <gtest/gtest.h>

#include <sched.h>

#include <chrono>
#include <thread>

#include "fork_ranks.h"
#include "transport/spin_pause.h"

namespace gyre {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

void pinToCpu(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  ASSERT_EQ(sched_setaffinity(0, sizeof(set), &set), 0);
}

// A busy child on `cpu`, killed and reaped by stop() or when this goes out of scope.
// Forked before any thread starts (ThreadSanitizer refuses a fork with threads).
class Hog {
 public:
  explicit Hog(int cpu) : hog_(1) {
    hog_.start([cpu](int) {
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(cpu, &set);
      sched_setaffinity(0, sizeof(set), &set);
      const auto end = Clock::now() + 30s;  // bounded, whatever the test does
      while (Clock::now() < end) {
      }
    });
  }
  void stop() {
    if (!stopped_) {
      hog_.kill(0);
      hog_.join(0, Clock::now() + 10s);
      stopped_ = true;
    }
  }

 private:
  testing::ForkedRanks hog_;
  bool stopped_ = false;
};

// A yield that took `took`, recorded at `at`.
bool yieldAt(YieldWatch& w, Clock::time_point at, Clock::duration took) {
  return w.record(at - took, at);
}

TEST(YieldWatch, APromptYieldGoesOnSpinning) {
  YieldWatch w;
  const auto t0 = Clock::now();
  EXPECT_TRUE(w.maySpin(t0));
  for (int i = 0; i < 1000; ++i) {
    ASSERT_TRUE(yieldAt(w, t0 + i * 10us, 2us));
  }
  EXPECT_TRUE(yieldAt(w, t0 + 20ms, YieldWatch::kLate)) << "exactly kLate is in time";
  EXPECT_TRUE(w.maySpin(t0 + 20ms));
}

TEST(YieldWatch, LateYieldsApartEndTheirSpinButDoNotBackOff) {
  // A daemon or the hypervisor takes the core now and then: each late yield ends the
  // spin it was part of, but the next wait spins again.
  YieldWatch w;
  const auto t0 = Clock::now();
  const auto late = YieldWatch::kLate + 1us;
  for (int i = 0; i < 100; ++i) {
    // Two late yields close together, then a quiet stretch longer than the window.
    const auto at = t0 + i * (YieldWatch::kWindow + 10ms);
    ASSERT_FALSE(yieldAt(w, at, 5ms)) << i;
    ASSERT_FALSE(yieldAt(w, at + 1ms, late)) << i;
    ASSERT_TRUE(yieldAt(w, at + 2ms, 2us)) << i;
    ASSERT_TRUE(w.maySpin(at + 2ms)) << "backing off after two late yields, round " << i;
  }
}

TEST(YieldWatch, RepeatedLateYieldsBackOffForAWhile) {
  YieldWatch w;
  const auto t0 = Clock::now();
  ASSERT_EQ(YieldWatch::kLatesToBackOff, 3);
  EXPECT_FALSE(yieldAt(w, t0, 3ms));
  EXPECT_FALSE(yieldAt(w, t0 + 20ms, 3ms));
  EXPECT_TRUE(w.maySpin(t0 + 20ms));
  // The third within the window (measured between the times they came back).
  const auto third = t0 + YieldWatch::kWindow;
  EXPECT_FALSE(yieldAt(w, third, 3ms));
  EXPECT_FALSE(w.maySpin(third));
  EXPECT_FALSE(w.maySpin(third + YieldWatch::kBackoff - 1us));
  EXPECT_TRUE(w.maySpin(third + YieldWatch::kBackoff));
  // Later than kRearm after the backoff, it takes three new late yields to back off again.
  const auto t1 = third + YieldWatch::kBackoff + YieldWatch::kRearm + 1ms;
  EXPECT_FALSE(yieldAt(w, t1, 3ms));
  EXPECT_TRUE(w.maySpin(t1)) << "the late yields before the backoff counted again";
  EXPECT_FALSE(yieldAt(w, t1 + 1ms, 3ms));
  EXPECT_TRUE(w.maySpin(t1 + 1ms));
  EXPECT_FALSE(yieldAt(w, t1 + 2ms, 3ms));
  EXPECT_FALSE(w.maySpin(t1 + 2ms));
}

TEST(YieldWatch, ALateYieldRightAfterABackoffStartsTheNext) {
  // A CPU hog that stays: the first late yield after the backoff is enough.
  YieldWatch w;
  const auto t0 = Clock::now();
  EXPECT_FALSE(yieldAt(w, t0, 3ms));
  EXPECT_FALSE(yieldAt(w, t0 + 1ms, 3ms));
  EXPECT_FALSE(yieldAt(w, t0 + 2ms, 3ms));
  auto end = t0 + 2ms + YieldWatch::kBackoff;
  ASSERT_FALSE(w.maySpin(end - 1us));
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(w.maySpin(end));
    EXPECT_TRUE(yieldAt(w, end + 1us, 2us)) << "a prompt yield is no sign";
    const auto late = end + YieldWatch::kRearm;  // the limit is in
    EXPECT_FALSE(yieldAt(w, late, 3ms));
    EXPECT_FALSE(w.maySpin(late)) << "backoff " << i;
    end = late + YieldWatch::kBackoff;
  }
  // A late yield past kRearm after the end is counted as a fresh one.
  EXPECT_FALSE(yieldAt(w, end + YieldWatch::kRearm + 1us, 3ms));
  EXPECT_TRUE(w.maySpin(end + YieldWatch::kRearm + 1us));
}

TEST(YieldWatch, NoBackoffYetMeansNoRearm) {
  // Before any backoff, a late yield soon after the clock's epoch-like start is one of
  // three, not a re-arm.
  YieldWatch w;
  const auto t0 = Clock::time_point{} + 1ms;
  EXPECT_FALSE(yieldAt(w, t0, 600us));
  EXPECT_TRUE(w.maySpin(t0));
}

TEST(YieldWatch, ThreeLateYieldsSpreadWiderThanTheWindowDoNotBackOff) {
  YieldWatch w;
  const auto t0 = Clock::now();
  const auto step = YieldWatch::kWindow / 2 + 1ms;  // any three span more than the window
  for (int i = 0; i < 50; ++i) {
    ASSERT_FALSE(yieldAt(w, t0 + i * step, 2ms));
    ASSERT_TRUE(w.maySpin(t0 + i * step)) << "late yield " << i;
  }
}

TEST(SpinPause, StopsSpinningWhileAnotherProcessHoldsTheCore) {
  Hog hog(0);
  // In a thread of its own: the state is per thread, and the pinning must not leak into
  // the rest of the test program.
  std::thread([&hog] {
    pinToCpu(0);
    // With a busy process on the core, yields give it whole time slices, each ends its
    // spin, and soon the thread backs off. Bounded: 5 s of tries.
    const auto giveUp = Clock::now() + 5s;
    int lateOrDone = 0;
    while (!spinBackingOff() && Clock::now() < giveUp) {
      if (!spinPause(Clock::now() + 10s)) ++lateOrDone;
    }
    ASSERT_TRUE(spinBackingOff()) << "not backing off after 5 s with a busy process on the "
                                  << "core (" << lateOrDone << " yields came back late)";
    EXPECT_GE(lateOrDone, YieldWatch::kLatesToBackOff);
    // From then on it says stop at once, without yielding, even with time left to spin.
    for (int i = 0; i < 100; ++i) {
      ASSERT_FALSE(spinPause(Clock::now() + 10s)) << "call " << i;
    }
    hog.stop();
    // The hog is gone: after the backoff (1 s) this thread spins again. Bounded: other
    // load can make a yield late, which restarts the backoff, so try for up to 8 s.
    bool spinning = false;
    const auto again = Clock::now() + 8s;
    while (!spinning && Clock::now() < again) {
      std::this_thread::sleep_for(50ms);  // time passes: the backoff is a time
      spinning = spinPause(Clock::now() + 10s);
    }
    EXPECT_TRUE(spinning) << "still not spinning 8 s after the busy process ended";
  }).join();
}

TEST(SpinPause, EndsWithTheWindowAndIsPerThread) {
  std::thread([] {
    // A window that has passed: one yield, then stop.
    EXPECT_FALSE(spinPause(Clock::now() - 1ms));
  }).join();
  // A thread whose yields were stolen does not stop another thread's spin.
  Hog hog(0);
  std::thread([&hog] {
    pinToCpu(0);
    const auto giveUp = Clock::now() + 5s;
    while (!spinBackingOff() && Clock::now() < giveUp) spinPause(Clock::now() + 10s);
    ASSERT_TRUE(spinBackingOff());
    hog.stop();
    // This thread is backing off (it says stop at once); a fresh one is not.
    EXPECT_FALSE(spinPause(Clock::now() + 10s));
    std::thread([] {
      bool spinning = false;  // tried a few times: the machine may be busy
      for (int i = 0; i < 40 && !spinning; ++i) {
        spinning = spinPause(Clock::now() + 10s);
        if (!spinning) std::this_thread::sleep_for(100ms);  // time passes: a busy machine calms
      }
      EXPECT_TRUE(spinning);
    }).join();
  }).join();
}

}  // namespace
}  // namespace gyre
