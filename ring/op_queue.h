// OpQueue: runs a communicator's operations one at a time, in the order they were
// issued, on the caller's thread or on one worker thread.
//
// Contract:
//   submit(op)  queues op and returns its Work at once; a worker thread (started at the
//               first submit) runs queued ops in order. An exception thrown by op ends
//               up in the Work. A thread that calls the Work's untimed wait() while op
//               is next in line and nothing runs takes op and runs it itself (the worker
//               finds it gone): issue-then-wait, which is every torch.distributed call
//               without async_op, then costs no hand-off to the worker and back.
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

namespace op_queue_detail {
struct Core;
}  // namespace op_queue_detail

class OpQueue {
 public:
  using Op = std::function<void()>;

  OpQueue();
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

  void workerLoop();

  // The queue proper, shared with the Works waiting in it (op_queue.cc): a waiter may
  // claim its own op, so the state outlives neither; the worker exits only once nothing
  // is queued or running.
  std::shared_ptr<op_queue_detail::Core> core_;
  std::thread worker_;
};

}  // namespace gyre
