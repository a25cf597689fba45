#include "ring/op_queue.h"

#include <condition_variable>
#include <deque>
#include <mutex>

#include "base/error.h"

namespace gyre {
namespace op_queue_detail {

struct Entry {
  OpQueue::Op op;
  std::shared_ptr<Work::State> state;
};

std::exception_ptr runCaught(const OpQueue::Op& op) {
  try {
    op();
    return nullptr;
  } catch (...) {
    return std::current_exception();
  }
}

struct Core {
  std::mutex mu;
  std::condition_variable wake;  // the worker: an entry was queued, one finished, or stop
  std::deque<Entry> queue;
  bool running = false;  // an op is executing (inline, on the worker or on a waiter)
  bool stop = false;

  // Runs the next entry on the calling thread if it is state's and nothing runs.
  void runIfNext(const Work::State* state);
};

}  // namespace op_queue_detail

using op_queue_detail::Core;
using op_queue_detail::Entry;
using op_queue_detail::runCaught;

struct Work::State {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;
  std::weak_ptr<Core> queue;  // where the op waits to run (a waiter may claim it)

  void finish(std::exception_ptr e) {
    {
      std::lock_guard<std::mutex> lock(mu);
      done = true;
      error = std::move(e);
    }
    cv.notify_all();
  }
};

void Core::runIfNext(const Work::State* state) {
  std::unique_lock<std::mutex> lock(mu);
  if (running || queue.empty() || queue.front().state.get() != state) return;
  Entry entry = std::move(queue.front());
  queue.pop_front();
  running = true;
  lock.unlock();
  entry.state->finish(runCaught(entry.op));
  lock.lock();
  running = false;
  lock.unlock();
  wake.notify_one();  // the worker takes what was queued meanwhile (or sees stop)
}

Work::Work() = default;  // no state: finished, successfully
Work::Work(std::shared_ptr<State> state) : state_(std::move(state)) {}

bool Work::test() const {
  if (!state_) return true;
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->done;
}

void Work::wait() const {
  if (!state_) return;
  if (!test()) {
    if (std::shared_ptr<Core> queue = state_->queue.lock()) queue->runIfNext(state_.get());
  }
  std::unique_lock<std::mutex> lock(state_->mu);
  state_->cv.wait(lock, [&] { return state_->done; });
  if (state_->error) std::rethrow_exception(state_->error);
}

bool Work::wait(std::chrono::milliseconds timeout) const {
  if (!state_) return true;
  std::unique_lock<std::mutex> lock(state_->mu);
  if (!state_->cv.wait_for(lock, timeout, [&] { return state_->done; })) return false;
  if (state_->error) std::rethrow_exception(state_->error);
  return true;
}

std::exception_ptr Work::exception() const {
  if (!state_) return nullptr;
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->error;
}

OpQueue::OpQueue() : core_(std::make_shared<Core>()) {}

OpQueue::~OpQueue() {
  {
    std::lock_guard<std::mutex> lock(core_->mu);
    core_->stop = true;
  }
  core_->wake.notify_all();
  if (worker_.joinable()) worker_.join();
}

Work OpQueue::submit(Op op) {
  auto state = std::make_shared<Work::State>();
  state->queue = core_;
  {
    std::lock_guard<std::mutex> lock(core_->mu);
    if (core_->stop) {
      fail(ErrorCode::kInternal, "operation issued on a communicator being destroyed");
    }
    core_->queue.push_back(Entry{std::move(op), state});
    if (!worker_.joinable()) worker_ = std::thread([this] { workerLoop(); });
  }
  core_->wake.notify_one();
  return Work(state);
}

bool OpQueue::enterInline() {
  std::lock_guard<std::mutex> lock(core_->mu);
  if (!core_->queue.empty() || core_->running) return false;
  core_->running = true;
  return true;
}

void OpQueue::leaveInline() {
  {
    std::lock_guard<std::mutex> lock(core_->mu);
    core_->running = false;
  }
  // Should another thread have queued an op meanwhile, the worker takes it now.
  core_->wake.notify_one();
}

void OpQueue::workerLoop() {
  Core& core = *core_;
  std::unique_lock<std::mutex> lock(core.mu);
  for (;;) {
    // Stop only once nothing is queued and nothing runs: an op a waiter claimed uses
    // what the communicator owns, so its destruction must wait for that op too.
    core.wake.wait(lock, [&] { return !core.running && (!core.queue.empty() || core.stop); });
    if (core.queue.empty()) return;  // stop, and nothing left to run
    Entry entry = std::move(core.queue.front());
    core.queue.pop_front();
    core.running = true;
    lock.unlock();
    entry.state->finish(runCaught(entry.op));
    lock.lock();
    core.running = false;
  }
}

}  // namespace gyre
