// OpQueue: runs a communicator's operations one at a time, in the order they were
// issued, on the caller's thread or on one worker thread.
//
// Contract:
//   submit(op)  queues op and returns its Work at once; a worker thread (started at the
//               first submit) runs queued ops in order. An exception thrown by op ends
//               up in the Work. A thread that calls the Work's wait() (the untimed one)
//               while op is first in the queue and nothing runs takes op out and runs it
//               itself: an op issued and then waited on at once (torch's blocking calls,
//               which are async plus wait) costs no hand-off to the worker and back.
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

#include <functional>
#include <memory>
#include <thread>

#include "ring/work.h"

namespace gyre {

class OpQueue {
 public:
  using Op = std::function<void()>;

  OpQueue();
  ~OpQueue();
  OpQueue(const OpQueue&) = delete;
  OpQueue& operator=(const OpQueue&) = delete;

  Work submit(Op op);

  // The queue's state, shared with the Works it made so that wait() can run its own op
  // (defined in op_queue.cc).
  struct Core;

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

  void workerLoop();

  std::shared_ptr<Core> core_;
  std::thread worker_;
};

}  // namespace gyre
