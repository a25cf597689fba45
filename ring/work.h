// gyre::Work: the handle of an operation started with one of a Communicator's *Async
// calls (as torch.distributed's Work, or an MPI request).
//
// Contract: a Work is a cheap, copyable handle; copies share the state. The operation
// runs whether or not anyone keeps or waits on its Work, and the buffers it was given
// belong to it until it finishes: until test() is true or wait() returned. A
// default-constructed Work is already finished successfully.
//   test()        true once the operation finished, well or not; never blocks or throws.
//   wait()        blocks until it finished; throws the operation's gyre::Error if it
//                 failed (every wait throws it again).
//   wait(timeout) as wait(), but returns false if it is still running after `timeout`
//                 (it keeps running; call again or abort() the communicator).
//   exception()   the failure once finished with one; null while running or after success.
// Thread-safe: any thread may test or wait on a Work.
#pragma once

#include <chrono>
#include <exception>
#include <memory>

#include "base/export.h"

namespace gyre {

class GYRE_API Work {
 public:
  Work();

  bool test() const;
  void wait() const;
  bool wait(std::chrono::milliseconds timeout) const;
  std::exception_ptr exception() const;

  struct State;
  explicit Work(std::shared_ptr<State> state);

 private:
  std::shared_ptr<State> state_;
};

}  // namespace gyre
