#include "tools/train/elastic.h"

#include <chrono>
#include <cstdio>
#include <string>

#include <fmt/format.h>

namespace gyre::train {

namespace {

using Clock = std::chrono::steady_clock;

double millisSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// One line on stderr from the new communicator's rank 0.
void say(const Communicator& comm, const std::string& text) {
  if (comm.rank() != 0) return;
  std::fprintf(stderr, "gyre-train: %s\n", text.c_str());
  std::fflush(stderr);
}

}  // namespace

ElasticWorld::ElasticWorld(std::unique_ptr<Communicator> comm) : comm_(std::move(comm)) {}

std::unique_ptr<Communicator> ElasticWorld::shrinkAfter(const Error& failure) {
  const int failed = comm_->failedRank();
  if (failed < 0) throw failure;  // this rank's own error: no peer to go on without
  const Clock::time_point t0 = Clock::now();
  const int before = comm_->size();
  std::unique_ptr<Communicator> next =
      comm_->shrink({failed}, Communicator::ShrinkMode::kAbort);
  ++shrinks_;
  say(*next, fmt::format("rank {} of {} failed ({}): {} ranks go on (shrink {:.0f} ms)", failed,
                         before, failure.what(), next->size(), millisSince(t0)));
  return next;
}

std::unique_ptr<Communicator> ElasticWorld::growIfWaiting() {
  const int waiting = comm_->waitingNewcomers();
  if (waiting == 0) return nullptr;
  const Clock::time_point t0 = Clock::now();
  std::unique_ptr<Communicator> next = comm_->grow(comm_->size() + waiting);
  ++grows_;
  say(*next, fmt::format("{} restarted rank(s) joined: {} ranks go on (grow {:.0f} ms)", waiting,
                         next->size(), millisSince(t0)));
  return next;
}

Communicator& ElasticWorld::adopt(std::unique_ptr<Communicator> next) {
  comm_ = std::move(next);
  return *comm_;
}

}  // namespace gyre::train
