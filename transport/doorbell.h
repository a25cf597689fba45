// Doorbell: how a waiter sleeps until a poster changes some state, without spinning
// forever on a machine with more ranks than cores.
//
// The waiter spins on its predicate for a short bound, then sleeps on a futex in
// slices of at most 10 ms, checking its deadline and the abort flag between slices.
// The poster changes the state, then calls ring(), which costs one atomic add and,
// only when someone is asleep, one futex wake. The struct is plain data (two 32-bit
// words), so it can live in shared memory between processes (`shared = true` uses
// non-private futexes). Thread-safe: any number of waiters and posters.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

#include "transport/pipe.h"
#include "transport/spin_pause.h"

namespace gyre {

struct Doorbell {
  std::atomic<uint32_t> seq{0};
  std::atomic<uint32_t> sleepers{0};

  void ring(bool shared);

  enum class WaitResult { kReady, kTimeout, kAborted };

  // Waits until pred() returns true. Returns kTimeout or kAborted without throwing so
  // that the caller can name what it was waiting for.
  template <typename Pred>
  WaitResult wait(Pred&& pred, const WaitContext& ctx, bool shared);

 private:
  // Sleeps while seq == expected, at most until ctx.deadline and at most 10 ms.
  void sleep(uint32_t expected, const WaitContext& ctx, bool shared);
};

template <typename Pred>
Doorbell::WaitResult Doorbell::wait(Pred&& pred, const WaitContext& ctx, bool shared) {
  if (pred()) return WaitResult::kReady;
  const auto spinUntil = std::chrono::steady_clock::now() + ctx.spin;
  while (spinPause(spinUntil)) {
    if (pred()) return WaitResult::kReady;
  }
  for (;;) {
    if (ctx.aborted && ctx.aborted->load(std::memory_order_relaxed)) return WaitResult::kAborted;
    if (std::chrono::steady_clock::now() >= ctx.deadline) return WaitResult::kTimeout;
    sleepers.fetch_add(1, std::memory_order_seq_cst);
    uint32_t expected = seq.load(std::memory_order_seq_cst);
    if (pred()) {
      sleepers.fetch_sub(1, std::memory_order_relaxed);
      return WaitResult::kReady;
    }
    sleep(expected, ctx, shared);
    sleepers.fetch_sub(1, std::memory_order_relaxed);
    if (pred()) return WaitResult::kReady;
  }
}

}  // namespace gyre
