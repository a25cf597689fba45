#include "ring/op_queue.h"

#include <condition_variable>
#include <deque>
#include <mutex>

#include "base/error.h"

namespace gyre {

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

struct OpQueue::Core {
  struct Entry {
    Op op;
    std::shared_ptr<Work::State> state;
  };

  std::mutex mu;
  std::condition_variable wake;  // the worker: an entry was queued, one finished, or stop
  std::deque<Entry> queue;
  bool running = false;  // an op is executing (inline, on a waiter or on the worker)
  bool stop = false;

  // Takes the first entry to run on this thread if it is `state`'s and nothing runs.
  bool claim(const Work::State* state, Entry& out) {
    std::lock_guard<std::mutex> lock(mu);
    if (running || queue.empty() || queue.front().state.get() != state) return false;
    out = std::move(queue.front());
    queue.pop_front();
    running = true;
    return true;
  }
  // After an op run off the worker: the worker may start the next one (or stop). It is
  // woken only then: an idle worker woken for nothing costs a thread switch per call.
  void release() {
    bool workerHasWork;
    {
      std::lock_guard<std::mutex> lock(mu);
      running = false;
      workerHasWork = !queue.empty() || stop;
    }
    if (workerHasWork) wake.notify_one();
  }
};

struct Work::State {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;
  std::weak_ptr<OpQueue::Core> queue;  // where the op waits to run; empty for none

  void finish(std::exception_ptr e) {
    {
      std::lock_guard<std::mutex> lock(mu);
      done = true;
      error = std::move(e);
    }
    cv.notify_all();
  }
  // wait()'s fast path: if the op is next and nothing runs, run it on this thread.
  void runHereIfNext() {
    std::shared_ptr<OpQueue::Core> core = queue.lock();
    if (!core) return;
    OpQueue::Core::Entry entry;
    if (!core->claim(this, entry)) return;
    finish(runCaught(entry.op));
    core->release();
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
  state_->runHereIfNext();
  std::unique_lock<std::mutex> lock(state_->mu);
  state_->cv.wait(lock, [&] { return state_->done; });
  if (state_->error) std::rethrow_exception(state_->error);
}

bool Work::wait(std::chrono::milliseconds timeout) const {
  // Never runs the op here: it could not return when `timeout` is up.
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
    if (core_->stop)
      fail(ErrorCode::kInternal, "operation issued on a communicator being destroyed");
    core_->queue.push_back(Core::Entry{std::move(op), state});
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

// Should another thread have queued an op meanwhile, the worker takes it now.
void OpQueue::leaveInline() { core_->release(); }

void OpQueue::workerLoop() {
  Core& core = *core_;
  std::unique_lock<std::mutex> lock(core.mu);
  for (;;) {
    // An op run by a waiter ends before the worker starts the next or stops.
    core.wake.wait(lock, [&] { return !core.running && (!core.queue.empty() || core.stop); });
    if (core.queue.empty()) return;  // stop, and nothing left to run
    Core::Entry entry = std::move(core.queue.front());
    core.queue.pop_front();
    core.running = true;
    lock.unlock();
    entry.state->finish(runCaught(entry.op));
    lock.lock();
    core.running = false;
  }
}

}  // namespace gyre
