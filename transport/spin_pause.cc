#include "transport/spin_pause.h"

#include <sched.h>

namespace gyre {

bool YieldWatch::record(Clock::time_point before, Clock::time_point after) {
  if (after - before <= kLate) return true;
  if (backedOff_ && after - spinAgainAt_ <= kRearm) {
    spinAgainAt_ = after + kBackoff;  // still contended right after the last backoff
    count_ = 0;
    return false;
  }
  lates_[next_] = after;
  next_ = (next_ + 1) % kLatesToBackOff;
  if (count_ < kLatesToBackOff) ++count_;
  // lates_[next_] is now the oldest of the last kLatesToBackOff.
  if (count_ == kLatesToBackOff && after - lates_[next_] <= kWindow) {
    spinAgainAt_ = after + kBackoff;
    backedOff_ = true;
    count_ = 0;  // the next backoff needs kLatesToBackOff new late yields (or kRearm)
  }
  return false;
}

namespace {
YieldWatch& threadWatch() {
  thread_local YieldWatch watch;
  return watch;
}
}  // namespace

bool spinPause(std::chrono::steady_clock::time_point spinUntil) {
  using Clock = std::chrono::steady_clock;
  YieldWatch& watch = threadWatch();
  const auto before = Clock::now();
  if (!watch.maySpin(before)) return false;
  sched_yield();
  const auto after = Clock::now();
  return watch.record(before, after) && after < spinUntil;
}

bool spinBackingOff() { return !threadWatch().maySpin(std::chrono::steady_clock::now()); }

}  // namespace gyre
