// GyreWork: the c10d::Work of one torch.distributed call on the gyre backend: the gyre
// requests it issued (gyre*Async), the tensors they read and write (kept alive until
// they finish), and a finisher that copies staged results back into the caller's
// tensors (non-contiguous, other dtypes, other devices, lists).
//
// Contract:
// - Finishing happens once, on whichever thread first sees every request done (wait(),
//   isCompleted(), the Completer's thread): a request's failure becomes the Work's
//   exception, which wait() rethrows (and every later wait), with a message naming this
//   rank, the torch call and gyre's own message (which names the peer and collective).
// - getFuture() returns a Future completed with the output tensors (or the error) once
//   the Work finishes, without anyone calling wait(): the Completer (threads per
//   backend, started on first use) waits for the Works whose future was asked for.
//   DDP's communication hooks chain on it, and their callbacks may wait on other Works.
// - wait(timeout > 0): bounded; on expiry the communicator is aborted (its operations can
//   no longer be trusted to match across ranks) and wait throws naming the timeout.
// - Destroying an unfinished Work waits for its requests first (its tensors are in use).
// Thread safety: every public method may be called from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>

#include "capi/gyre.h"
#include "torch_compat.h"

namespace gyre_torch {

// Owns a gyre communicator; Works share it so that one outliving its backend stays valid.
struct CommHandle {
  explicit CommHandle(gyreComm_t c) : comm(c) {}
  ~CommHandle() { gyreCommDestroy(comm); }
  CommHandle(const CommHandle&) = delete;
  CommHandle& operator=(const CommHandle&) = delete;
  const gyreComm_t comm;
};

class Completer;

class GyreWork : public c10d::Work {
 public:
  GyreWork(int rank, c10d::OpType type, std::string what, std::shared_ptr<CommHandle> comm,
           std::shared_ptr<Completer> completer);
  ~GyreWork() override;

  // Filled by the backend before the Work is returned.
  void addRequest(gyreRequest_t request) { requests_.push_back(request); }
  // Tensors the requests read or write: kept alive until they finish.
  void keepAlive(const at::Tensor& tensor) { buffers_.push_back(tensor); }
  // What result() and the future hold.
  void setOutputs(std::vector<at::Tensor> outputs) { outputs_ = std::move(outputs); }
  // Run once, in the order added, after every request succeeded (they copy staged
  // results into the caller's tensors).
  void addFinisher(std::function<void()> finisher) { finishers_.push_back(std::move(finisher)); }
  // A Work that failed before issuing anything (its wait() rethrows error).
  void failNow(std::exception_ptr error);
  // Works this one finishes with: it waits for each in order, its outputs are theirs,
  // and the first one's failure is its own (a coalesced group's Work, endCoalescing).
  void addChild(c10::intrusive_ptr<GyreWork> child) { children_.push_back(std::move(child)); }
  // A Work whose operation is held back until its batch ends (send/recv between
  // startCoalescing and endCoalescing): waiting on it before then throws. release()
  // ends that once its request is added (or finishes it with result, for an
  // operation the batch ran itself).
  void defer() { deferred_ = true; }
  void release() { deferred_ = false; }
  void finishDeferred(gyreResult_t result, const std::string& gyreMessage);

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  std::vector<at::Tensor> result() override;
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  void synchronize() override {}
  void abort() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

  // For the Completer: blocks until finished; true when this call finished the Work, so
  // that the caller must completeFuture() (which runs the future's callbacks).
  bool finishForCompleter();
  void completeFuture() { completeFutureLocked(); }

 private:
  // Waits (timeoutMs < 0: without bound) for the requests, then finishes once; the
  // thread that finished completes the future too unless completeHere is false (then
  // the result says whether it finished).
  bool finishWaiting(long long timeoutMs, bool completeHere = true);
  void finishLocked(gyreResult_t result, const std::string& gyreMessage);
  void completeFutureLocked();
  std::runtime_error failure(const std::string& why) const;

  const std::string what_;  // "all_reduce of 256 float32", for messages
  const std::shared_ptr<CommHandle> comm_;
  // Weak: the backend owns the Completer, and a Work that outlives it finishes its
  // future on the caller's thread instead.
  const std::weak_ptr<Completer> completer_;
  std::vector<gyreRequest_t> requests_;
  std::vector<at::Tensor> buffers_;
  std::vector<at::Tensor> outputs_;
  std::vector<std::function<void()>> finishers_;
  std::vector<c10::intrusive_ptr<GyreWork>> children_;
  std::atomic<bool> deferred_{false};

  mutable std::mutex state_;  // guards everything below
  bool finished_ = false;
  std::exception_ptr error_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// Per backend: a pool of threads that finish, in order, the Works whose future was asked
// for, and complete those futures, which runs their callbacks. One thread at a time
// leads: it waits on gyre for the next pending Work (never running torch code while it
// does). Once that Work is finished, the same thread completes its future (as
// ProcessGroupGloo's worker does: no hand-off to another thread between the operation's
// end and its callbacks), after passing the lead to an idle thread, or starting one, if
// other Works are pending. A callback may block on another Work's future (PowerSGD's
// hooks wait on a second all_reduce inside `then`): watch() then finds no leader and no
// idle thread and starts one (at most kMaxThreads; beyond that, Works wait for a thread
// to come back). Threads start on first use.
class Completer {
 public:
  explicit Completer(std::shared_ptr<CommHandle> comm) : comm_(std::move(comm)) {}
  // Aborts the communicator if Works are still pending (their peers are gone or never
  // came), so that the threads can end, and joins them.
  ~Completer();
  void watch(c10::intrusive_ptr<GyreWork> work);

 private:
  static constexpr size_t kMaxThreads = 32;
  void loop();
  // With mu_ held: wakes an idle thread to take the lead, or starts one.
  void callLeaderLocked();
  const std::shared_ptr<CommHandle> comm_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<c10::intrusive_ptr<GyreWork>> pending_;  // to finish, in order
  bool stop_ = false;
  bool leading_ = false;  // a thread is finishing the front Work
  size_t idle_ = 0;       // threads waiting to lead
  std::vector<std::thread> threads_;
};

}  // namespace gyre_torch
