#include "gyre_work.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <utility>

namespace gyre_torch {

using Clock = std::chrono::steady_clock;

GyreWork::GyreWork(int rank, c10d::OpType type, std::string what,
                   std::shared_ptr<CommHandle> comm, std::shared_ptr<Completer> completer)
    : c10d::Work(rank, type),
      what_(std::move(what)),
      comm_(std::move(comm)),
      completer_(completer) {}

GyreWork::~GyreWork() {
  // Unfinished: gyre still reads or writes buffers_; wait (bounded by GYRE_TIMEOUT or the
  // group's timeout) before they are freed.
  for (gyreRequest_t request : requests_) {
    if (!finished_) gyreWait(request);
    gyreRequestFree(request);
  }
}

std::runtime_error GyreWork::failure(const std::string& why) const {
  return std::runtime_error("gyre backend, rank " + std::to_string(rank_) + ": " + what_ +
                            " failed: " + why);
}

void GyreWork::failNow(std::exception_ptr error) {
  std::lock_guard<std::mutex> lock(state_);
  finished_ = true;
  error_ = std::move(error);
}

void GyreWork::finishDeferred(gyreResult_t result, const std::string& gyreMessage) {
  c10::intrusive_ptr<c10::ivalue::Future> future;
  {
    std::lock_guard<std::mutex> lock(state_);
    deferred_ = false;
    if (finished_) return;
    finishLocked(result, gyreMessage);
    future = future_;
  }
  if (future) completeFutureLocked();
}

bool GyreWork::finishWaiting(long long timeoutMs, bool completeHere) {
  {
    std::lock_guard<std::mutex> lock(state_);
    if (finished_) return false;
  }
  if (deferred_) {
    throw failure(
        "waited on before its batch ended: a send/recv issued between startCoalescing and "
        "endCoalescing (batch_isend_irecv, _coalescing_manager) runs when the batch ends; "
        "wait on the Work the batch returns");
  }
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(timeoutMs);
  // A group's members first, each within what is left of the timeout.
  std::exception_ptr childError;
  for (auto& child : children_) {
    long long left = -1;
    if (timeoutMs >= 0) {
      left = std::max<long long>(0, std::chrono::duration_cast<std::chrono::milliseconds>(
                                        deadline - Clock::now()).count());
    }
    child->finishWaiting(left);
    if (!childError) childError = child->exception();
  }
  gyreResult_t first = gyreSuccess;
  std::string message;
  bool timedOut = false;
  for (gyreRequest_t request : requests_) {
    gyreResult_t result;
    if (timeoutMs < 0 || timedOut) {
      result = gyreWait(request);
    } else {
      int done = 0;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          std::max(deadline - Clock::now(), Clock::duration::zero()));
      result = gyreWaitTimeout(request, left.count(), &done);  // sleeps, no polling
      if (result == gyreInProgress) {
        timedOut = true;
        gyreCommAbort(comm_->comm);  // the others learn it; our requests end at once
        result = gyreWait(request);
      }
    }
    if (result != gyreSuccess && first == gyreSuccess) {
      first = result;
      message = gyreGetLastError(nullptr);  // this thread's: exactly this request's failure
    }
  }
  if (timedOut) {
    first = gyreTimeout;
    message = "Work.wait timed out after " + std::to_string(timeoutMs) +
              " ms; the group is aborted (destroy it and make a new one)";
  }
  c10::intrusive_ptr<c10::ivalue::Future> future;
  {
    std::lock_guard<std::mutex> lock(state_);
    if (finished_) return false;
    if (childError && first == gyreSuccess) {
      error_ = childError;  // the group failed with its member: no results to copy
      finished_ = true;
      buffers_.clear();
      finishers_.clear();
    } else {
      finishLocked(first, message);
    }
    future = future_;
  }
  if (future && completeHere) completeFutureLocked();
  return true;
}

void GyreWork::finishLocked(gyreResult_t result, const std::string& gyreMessage) {
  if (result == gyreSuccess) {
    try {
      for (auto& finisher : finishers_) finisher();
    } catch (const std::exception& e) {
      error_ = std::make_exception_ptr(failure(std::string("copying the result: ") + e.what()));
    }
  } else {
    error_ = std::make_exception_ptr(failure(gyreMessage.empty() ? gyreGetErrorString(result)
                                                                 : gyreMessage));
  }
  finished_ = true;
  buffers_.clear();  // the requests are done with them
  finishers_.clear();
}

// Called without state_ held, after finished_ became true (so error_ and outputs_ no
// longer change); the future is completed exactly once, by the thread that finished.
void GyreWork::completeFutureLocked() {
  if (error_) {
    future_->setError(error_);
  } else {
    future_->markCompleted(c10::IValue(outputs_));
  }
}

bool GyreWork::isCompleted() {
  {
    std::lock_guard<std::mutex> lock(state_);
    if (finished_) return true;
  }
  if (deferred_) return false;
  for (auto& child : children_) {
    if (!child->isCompleted()) return false;
  }
  for (gyreRequest_t request : requests_) {
    int done = 0;
    if (gyreTest(request, &done) == gyreInProgress || !done) return false;
  }
  finishWaiting(-1);  // all done: finishing does not wait
  return true;
}

bool GyreWork::isSuccess() const {
  std::lock_guard<std::mutex> lock(state_);
  return finished_ && !error_;
}

std::exception_ptr GyreWork::exception() const {
  std::lock_guard<std::mutex> lock(state_);
  return error_;
}

std::vector<at::Tensor> GyreWork::result() { return outputs_; }

bool GyreWork::wait(std::chrono::milliseconds timeout) {
  finishWaiting(timeout.count() > 0 ? timeout.count() : -1);
  std::lock_guard<std::mutex> lock(state_);
  if (error_) std::rethrow_exception(error_);
  return true;
}

void GyreWork::abort() { gyreCommAbort(comm_->comm); }

c10::intrusive_ptr<c10::ivalue::Future> GyreWork::getFuture() {
  bool completeNow = false;
  bool waitHere = false;
  {
    std::lock_guard<std::mutex> lock(state_);
    if (future_) return future_;
    if (deferred_) {
      throw failure("its future was asked for before its batch ended (a send/recv between "
                    "startCoalescing and endCoalescing): use the Work the batch returns");
    }
    std::vector<c10::Device> devices;
    for (const at::Tensor& t : outputs_) {
      if (!t.is_cpu()) devices.push_back(t.device());
    }
    future_ = c10::make_intrusive<c10::ivalue::Future>(
        c10::ListType::create(c10::TensorType::get()), devices);
    if (finished_) {
      completeNow = true;
    } else if (auto completer = completer_.lock()) {
      completer->watch(c10::intrusive_ptr<GyreWork>::unsafe_reclaim_from_nonowning(this));
    } else {
      waitHere = true;  // the backend is gone: nobody else will finish it
    }
  }
  if (completeNow) completeFutureLocked();
  if (waitHere) finishWaiting(-1);
  return future_;
}

bool GyreWork::finishForCompleter() { return finishWaiting(-1, /*completeHere=*/false); }

Completer::~Completer() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    // Works still pending at destruction wait for peers that may never come: abort them
    // so that their futures fail now instead of after the group's timeout.
    if (leading_ || !pending_.empty()) gyreCommAbort(comm_->comm);
  }
  cv_.notify_all();
  // The last reference may be dropped by one of our own threads (a callback that
  // destroys the group): that one cannot join itself.
  for (std::thread& t : threads_) {
    if (!t.joinable()) continue;
    if (t.get_id() == std::this_thread::get_id()) {
      t.detach();
    } else {
      t.join();
    }
  }
}

void Completer::watch(c10::intrusive_ptr<GyreWork> work) {
  std::lock_guard<std::mutex> lock(mu_);
  pending_.push_back(std::move(work));
  if (!leading_) callLeaderLocked();
}

void Completer::callLeaderLocked() {
  if (idle_ > 0) {
    cv_.notify_one();
  } else if (threads_.size() < kMaxThreads) {
    threads_.emplace_back([this] { loop(); });
  }
}

void Completer::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    ++idle_;
    cv_.wait(lock, [&] { return stop_ || (!leading_ && !pending_.empty()); });
    --idle_;
    if (leading_ || pending_.empty()) return;  // stopping, nothing left for this thread
    leading_ = true;
    c10::intrusive_ptr<GyreWork> work = std::move(pending_.front());
    pending_.pop_front();
    lock.unlock();
    const bool mine = work->finishForCompleter();
    lock.lock();
    leading_ = false;
    if (!mine) continue;  // wait() or isCompleted() finished it and completed its future
    // The callbacks may block on a Work still pending: someone else leads meanwhile.
    if (!pending_.empty()) callLeaderLocked();
    lock.unlock();
    work->completeFuture();  // runs the callbacks
    work.reset();            // may destroy the Work: outside the lock
    lock.lock();
  }
}

}  // namespace gyre_torch
