#include "sim/virtual_scheduler.h"

#include <algorithm>
#include <exception>

#include <fmt/format.h>
#include <boost/context/fiber.hpp>
#include <boost/context/protected_fixedsize_stack.hpp>

namespace gyre::sim {

namespace ctx = boost::context;

struct VirtualScheduler::Fibers {
  explicit Fibers(size_t stackBytes) : stack(stackBytes) {}
  ctx::protected_fixedsize_stack stack;
  std::vector<ctx::fiber> rank;  // a suspended rank, or empty
  ctx::fiber scheduler;          // inside a rank: the scheduler to return to
  std::exception_ptr firstError;
};

namespace {

bool later(double at, uint64_t seq, double otherAt, uint64_t otherSeq) {
  return at > otherAt || (at == otherAt && seq > otherSeq);
}

}  // namespace

VirtualScheduler::VirtualScheduler(int ranks, size_t stackBytes)
    : clock_(static_cast<size_t>(ranks), 0.0),
      state_(static_cast<size_t>(ranks), State::kDone),
      waitWhat_(static_cast<size_t>(ranks), ""),
      waitPeer_(static_cast<size_t>(ranks), -1),
      fibers_(std::make_unique<Fibers>(stackBytes)) {
  fibers_->rank.resize(static_cast<size_t>(ranks));
}

VirtualScheduler::~VirtualScheduler() = default;

void VirtualScheduler::resetClocks(double micros) {
  std::fill(clock_.begin(), clock_.end(), micros);
}

double VirtualScheduler::latest() const { return *std::max_element(clock_.begin(), clock_.end()); }

void VirtualScheduler::push(int rank) {
  state_[static_cast<size_t>(rank)] = State::kReady;
  heap_.push_back({clock_[static_cast<size_t>(rank)], seq_++, rank});
  std::push_heap(heap_.begin(), heap_.end(),
                 [](const Ready& a, const Ready& b) { return later(a.at, a.seq, b.at, b.seq); });
}

void VirtualScheduler::run(const std::function<void(int)>& body) {
  Fibers& f = *fibers_;
  f.firstError = nullptr;
  heap_.clear();
  for (int r = 0; r < ranks(); ++r) {
    f.rank[static_cast<size_t>(r)] =
        ctx::fiber(std::allocator_arg, f.stack, [this, r, &body](ctx::fiber&& scheduler) {
          fibers_->scheduler = std::move(scheduler);
          try {
            body(r);
          } catch (const std::exception&) {
            // Not forced_unwind (no std::exception): a deadlock's unwinding passes.
            if (!fibers_->firstError) fibers_->firstError = std::current_exception();
          }
          state_[static_cast<size_t>(r)] = State::kDone;
          return std::move(fibers_->scheduler);
        });
    push(r);
  }
  while (!heap_.empty()) {
    std::pop_heap(heap_.begin(), heap_.end(),
                  [](const Ready& a, const Ready& b) { return later(a.at, a.seq, b.at, b.seq); });
    const int r = heap_.back().rank;
    heap_.pop_back();
    current_ = r;
    auto& fiber = f.rank[static_cast<size_t>(r)];
    fiber = std::move(fiber).resume();
  }
  current_ = -1;
  bool blocked =
      std::any_of(state_.begin(), state_.end(), [](State s) { return s == State::kBlocked; });
  if (blocked && !f.firstError) throwDeadlockAndUnwind();
  if (blocked) unwindBlocked();
  if (f.firstError) std::rethrow_exception(f.firstError);
}

void VirtualScheduler::unwindBlocked() {
  // Destroying a suspended fiber unwinds its stack (Boost.Context's forced_unwind).
  for (size_t r = 0; r < state_.size(); ++r) {
    if (state_[r] != State::kBlocked) continue;
    current_ = static_cast<int>(r);
    fibers_->rank[r] = ctx::fiber();
    state_[r] = State::kDone;
  }
  current_ = -1;
}

void VirtualScheduler::throwDeadlockAndUnwind() {
  std::vector<int> waiting;
  std::string message = fmt::format("deadlock at virtual time {:.3f} us:", latest());
  for (size_t r = 0; r < state_.size(); ++r) {
    if (state_[r] != State::kBlocked) continue;
    waiting.push_back(static_cast<int>(r));
    if (waiting.size() <= 16) {
      message += fmt::format(" rank {} waits for {} rank {};", r, waitWhat_[r], waitPeer_[r]);
    }
  }
  if (waiting.size() > 16) message += fmt::format(" ... {} ranks wait in all", waiting.size());
  unwindBlocked();
  throw SimDeadlock(message, std::move(waiting));
}

void VirtualScheduler::yieldToScheduler() {
  fibers_->scheduler = std::move(fibers_->scheduler).resume();
}

void VirtualScheduler::advanceTo(double micros) {
  double& c = clock_[static_cast<size_t>(current_)];
  c = std::max(c, micros);
}

void VirtualScheduler::syncPoint() {
  if (heap_.empty()) return;
  // Strictly earlier only: ranks at the same time claim in any order alike (a tie is
  // symmetric), and a symmetric schedule (the ring) would otherwise switch on every post.
  if (heap_.front().at >= now()) return;
  push(current_);
  yieldToScheduler();
}

void VirtualScheduler::block(const char* what, int peer) {
  const auto r = static_cast<size_t>(current_);
  state_[r] = State::kBlocked;
  waitWhat_[r] = what;
  waitPeer_[r] = peer;
  yieldToScheduler();
}

void VirtualScheduler::wake(int rank, double micros) {
  const auto r = static_cast<size_t>(rank);
  if (state_[r] != State::kBlocked) return;
  clock_[r] = std::max(clock_[r], micros);
  push(rank);
}

}  // namespace gyre::sim
