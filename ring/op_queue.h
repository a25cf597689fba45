// OpQueue: runs a communicator's operations one at a time, in the order they were
// issued, on the caller's thread or on one worker thread.
//
// Contract:
//   submit(op)  queues op and returns its Work at once; a worker thread (started at the
//               first submit) runs queued ops in order. An exception thrown by op ends
//               up in the Work.
//   run(op)     the blocking form: when nothing is queued or running, op runs on the
//               caller's thread (no hand-off, so a blocking call costs no thread
//               switch); otherwise it is queued behind the others and the caller waits
//               for it. Either way, op's exception is rethrown to the caller.
// Issue order is kept across both: an op starts only after every op issued before it
// finished. Operations are issued from one thread at a time (the communicator's rule);
// Works may be tested and waited on from any thread.
// Destruction runs whatever is still queued (each op is bounded by its own timeouts),
// then joins the worker.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "ring/work.h"

namespace gyre {

class OpQueue {
 public:
  using Op = std::function<void()>;

  OpQueue() = default;
  ~OpQueue();
  OpQueue(const OpQueue&) = delete;
  OpQueue& operator=(const OpQueue&) = delete;

  Work submit(Op op);

  // Callable with no arguments. Inline, it is called as is (no std::function, no
  // allocation: the steady-state blocking path allocates nothing).
  template <typename F>
  void run(F&& op) {
    if (!enterInline()) {
      submit(Op(std::forward<F>(op))).wait();
      return;
    }
    try {
      op();
    } catch (...) {
      leaveInline();
      throw;
    }
    leaveInline();
  }

 private:
  bool enterInline();  // true: nothing queued or running, and this caller now runs
  void leaveInline();

  struct Entry {
    Op op;
    std::shared_ptr<Work::State> state;
  };
  void workerLoop();

  std::mutex mu_;
  std::condition_variable wake_;  // the worker: an entry was queued, one finished, or stop
  std::deque<Entry> queue_;
  bool running_ = false;  // an op is executing (inline or on the worker)
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace gyre
