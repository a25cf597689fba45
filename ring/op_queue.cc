#include "ring/op_queue.h"

#include "base/error.h"

namespace gyre {

struct Work::State {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;

  void finish(std::exception_ptr e) {
    {
      std::lock_guard<std::mutex> lock(mu);
      done = true;
      error = std::move(e);
    }
    cv.notify_all();
  }
};

Work::Work() = default;  // no state: finished, successfully
Work::Work(std::shared_ptr<State> state) : state_(std::move(state)) {}

bool Work::test() const {
  if (!state_) return true;
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->done;
}

void Work::wait() const {
  if (!state_) return;
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

namespace {

std::exception_ptr runCaught(const OpQueue::Op& op) {
  try {
    op();
    return nullptr;
  } catch (...) {
    return std::current_exception();
  }
}

}  // namespace

OpQueue::~OpQueue() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (worker_.joinable()) worker_.join();
}

Work OpQueue::submit(Op op) {
  auto state = std::make_shared<Work::State>();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) fail(ErrorCode::kInternal, "operation issued on a communicator being destroyed");
    queue_.push_back(Entry{std::move(op), state});
    if (!worker_.joinable()) worker_ = std::thread([this] { workerLoop(); });
  }
  wake_.notify_one();
  return Work(state);
}

bool OpQueue::enterInline() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!queue_.empty() || running_) return false;
  running_ = true;
  return true;
}

void OpQueue::leaveInline() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    running_ = false;
  }
  // Should another thread have queued an op meanwhile, the worker takes it now.
  wake_.notify_one();
}

void OpQueue::workerLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    wake_.wait(lock, [&] { return (!queue_.empty() && !running_) || (stop_ && queue_.empty()); });
    if (queue_.empty()) return;  // stop_, and nothing left to run
    Entry entry = std::move(queue_.front());
    queue_.pop_front();
    running_ = true;
    lock.unlock();
    entry.state->finish(runCaught(entry.op));
    lock.lock();
    running_ = false;
  }
}

}  // namespace gyre
