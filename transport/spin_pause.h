// The pause of every bounded spin in the pipes (the doorbell, the tcp pipes' polls, the
// rdma completion poll): yield the core, and stop spinning while another process holds
// it.
//
// Yield rather than pause: with more ranks than cores the rank we wait for is often
// runnable on our core, and yielding lets it run now instead of after a futex sleep and
// wake-up; on an idle core sched_yield returns at once, like a spin.
//
// But a yield hands the core to whatever else is runnable on it, and a CPU-bound process
// (a build, a data loader, at any nice level) then runs out its time slice, a millisecond
// or more, before this thread runs again, while the data it waited for sits in the
// socket. Sleeping instead lets the kernel wake this thread the moment the data comes (a
// woken thread preempts a CPU hog). So:
// - a yield that comes back late (after YieldWatch::kLate) ends the spin it was part of:
//   the caller goes to sleep on its data;
// - kLatesToBackOff late yields within kWindow mean the core is contended: the thread
//   stops spinning altogether, and sleeps at once on every wait, for kBackoff;
// - a late yield within kRearm of a backoff's end means the contender is still there: the
//   next backoff starts at once (so a CPU hog that stays costs one late yield a backoff,
//   not kLatesToBackOff).
// A single late yield is not enough: system daemons and a hypervisor take a core for a
// few milliseconds several times a second on an idle host (a burst of three within
// kWindow is rare), while a CPU-bound process beside makes every few yields late, hundreds
// a second. Backing off at the first late yield keeps a quiet job asleep: 4 ranks' 8 B shm
// all-reduce 34-38 us instead of 5-8 us (bench/results/spin_backoff/host_summary.txt).
//
// The state is per thread (each progress or caller thread watches its own core).
#pragma once

#include <array>
#include <chrono>

namespace gyre {

// One pause of a bounded spin: yields the core once. Returns whether to go on spinning:
// false once spinUntil has passed, false when this yield came back late, and false without
// yielding while this thread is backing off (above).
bool spinPause(std::chrono::steady_clock::time_point spinUntil);

// Whether the calling thread is backing off now (its spinPause says stop without
// yielding). For tests and diagnostics.
bool spinBackingOff();

// spinPause's policy over one thread's yields, apart from the clock so that tests can
// drive it with made-up times. Not thread-safe (one per thread).
class YieldWatch {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::microseconds kLate{500};
  static constexpr int kLatesToBackOff = 3;
  static constexpr std::chrono::milliseconds kWindow{50};
  static constexpr std::chrono::milliseconds kBackoff{1000};
  static constexpr std::chrono::milliseconds kRearm{20};

  // Whether the thread may yield (spin) at `now`: false while backing off.
  bool maySpin(Clock::time_point now) const { return now >= spinAgainAt_; }

  // Records a yield that started at `before` and came back at `after`. Returns whether
  // it came back in time; a late one that completes kLatesToBackOff within kWindow, or
  // comes within kRearm of the last backoff's end, starts the backoff.
  bool record(Clock::time_point before, Clock::time_point after);

 private:
  // The times the last kLatesToBackOff late yields came back, oldest at next_.
  std::array<Clock::time_point, kLatesToBackOff> lates_{};
  int next_ = 0;
  int count_ = 0;  // how many of lates_ hold a time (up to kLatesToBackOff)
  Clock::time_point spinAgainAt_{};  // the end of the last backoff; none yet: epoch
  bool backedOff_ = false;           // whether there was a backoff at all
};

}  // namespace gyre
