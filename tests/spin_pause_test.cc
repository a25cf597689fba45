// spinPause (transport/doorbell.h), the pause of every bounded spin in the pipes: it
// yields the core, and stops spinning when a yield comes back late (another process ran
// out a time slice on this core), so that the waiter sleeps and is woken by its data
// instead of queueing behind a CPU hog. Real processes: a busy child pinned to this
// thread's core.
#include <gtest/gtest.h>

#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "transport/doorbell.h"

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
  explicit Hog(int cpu) {
    pid_ = ::fork();
    if (pid_ == 0) {
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(cpu, &set);
      sched_setaffinity(0, sizeof(set), &set);
      const auto end = Clock::now() + 30s;  // bounded even if the parent dies
      while (Clock::now() < end) {
      }
      ::_exit(0);
    }
  }
  ~Hog() { stop(); }
  void stop() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }
  Hog(const Hog&) = delete;
  Hog& operator=(const Hog&) = delete;

 private:
  pid_t pid_ = -1;
};

TEST(SpinPause, StopsSpinningWhileAnotherProcessHoldsTheCore) {
  Hog hog(0);
  // In a thread of its own: the state is per thread, and the pinning must not leak into
  // the rest of the test program.
  std::thread([&hog] {
    pinToCpu(0);
    // With a busy process on the core, some yield gives it a whole time slice, and
    // spinPause says to stop. Bounded: 5 s of tries.
    bool stopped = false;
    const auto giveUp = Clock::now() + 5s;
    while (!stopped && Clock::now() < giveUp) stopped = !spinPause(Clock::now() + 10s);
    ASSERT_TRUE(stopped) << "no yield came back late with a busy process on the core";
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
      std::this_thread::sleep_for(50ms);
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
    bool stopped = false;
    while (!stopped && Clock::now() < giveUp) stopped = !spinPause(Clock::now() + 10s);
    ASSERT_TRUE(stopped);
    hog.stop();
    // This thread is backing off (it says stop at once); a fresh one is not.
    EXPECT_FALSE(spinPause(Clock::now() + 10s));
    std::thread([] {
      bool spinning = false;  // tried a few times: the machine may be busy
      for (int i = 0; i < 40 && !spinning; ++i) {
        spinning = spinPause(Clock::now() + 10s);
        if (!spinning) std::this_thread::sleep_for(100ms);
      }
      EXPECT_TRUE(spinning);
    }).join();
  }).join();
}

}  // namespace
}  // namespace gyre
