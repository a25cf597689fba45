#include "device_work.h"

#if GYRE_TORCH_DEVICE_PATH

#include <chrono>
#include <stdexcept>
#include <thread>

#include <c10/core/impl/VirtualGuardImpl.h>

namespace gyre_torch {

c10::Stream currentStream(const c10::Device& device) {
  c10::impl::VirtualGuardImpl impl(c10::DeviceType::CUDA);
  return impl.getStream(device);
}

DeviceWork::DeviceWork(int rank, c10d::OpType type, std::string what, const c10::Stream& stream,
                       std::vector<at::Tensor> outputs, std::shared_ptr<DeviceComm> comm,
                       bool blockHost)
    : c10d::Work(rank, type),
      what_(std::move(what)),
      device_(stream.device()),
      outputs_(std::move(outputs)),
      comm_(comm),
      blockHost_(blockHost),
      event_(c10::DeviceType::CUDA) {
  event_.record(stream);
  // Completed now, as ProcessGroupNCCL's: a CUDA-aware Future records its own events on
  // the current streams (the one the call is on), and its users' streams wait for them.
  future_ = c10::make_intrusive<c10::ivalue::Future>(
      c10::ListType::create(c10::TensorType::get()), std::vector<c10::Device>{device_});
  future_->markCompleted(c10::IValue(outputs_));
}

void DeviceWork::fail(const std::string& why) {
  auto error = std::make_exception_ptr(std::runtime_error(
      "gyre backend, rank " + std::to_string(rank_) + ": " + what_ + " failed: " + why));
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_) error_ = error;
    error = error_;
  }
  std::rethrow_exception(error);
}

bool DeviceWork::isCompleted() { return event_.query(); }

bool DeviceWork::isSuccess() const {
  std::lock_guard<std::mutex> lock(mu_);
  return !error_ && event_.query();
}

std::exception_ptr DeviceWork::exception() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

void DeviceWork::synchronize() { event_.block(currentStream(device_)); }

bool DeviceWork::wait(std::chrono::milliseconds timeout) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (error_) std::rethrow_exception(error_);
  }
  synchronize();
  if (timeout.count() > 0) {
    // Bounded: the host waits for the stream to pass the call (as ProcessGroupNCCL's wait
    // with a timeout), polling the event every millisecond.
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!event_.query()) {
      if (std::chrono::steady_clock::now() >= deadline) {
        if (auto comm = comm_.lock()) gyreCudaCommAbort(comm->comm);
        fail("Work.wait timed out after " + std::to_string(timeout.count()) +
             " ms; the group's CUDA communicator is aborted (destroy the group and make a "
             "new one)");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  } else if (blockHost_) {
    event_.synchronize();
  } else {
    return true;
  }
  // The host has seen the stream pass the call: report a failure it ended with.
  if (auto comm = comm_.lock()) {
    if (gyreCudaCommSynchronize(comm->comm) != gyreSuccess) {
      fail(gyreGetLastError(nullptr));
    }
  }
  return true;
}

void DeviceWork::abort() {
  if (auto comm = comm_.lock()) gyreCudaCommAbort(comm->comm);
}

}  // namespace gyre_torch

#endif  // GYRE_TORCH_DEVICE_PATH
