// The device path's pieces (GYRE_TORCH_DEVICE_PATH, torch_compat.h): a gyre device
// communicator (capi/gyre_cuda.h) and the c10d::Work of a collective enqueued on a CUDA
// stream. No CUDA header: the stream comes from c10's device-generic interface
// (c10::Stream::native_handle() is the cudaStream_t) and completion is a c10::Event.
//
// Contract (docs/pytorch.md, "CUDA tensors"):
// - A collective is enqueued on the current stream of its tensors' device, as
//   ProcessGroupNCCL's results are ordered before that stream's later work; then an event
//   is recorded on that stream.
// - DeviceWork::wait() makes the caller's current stream wait for the event and returns
//   without blocking the host (NCCL's default); with a timeout, or for a barrier, it also
//   blocks the host until the event has passed (a timeout then aborts the communicator
//   and throws). isCompleted() queries the event. getFuture() is completed at issue with
//   the outputs on the device (a CUDA-aware Future: its users' streams wait for the
//   call).
// - The tensors are record_stream()ed on the stream they were used on, so the caching
//   allocator does not hand their memory out while the stream has not passed the call,
//   whether or not the Work is kept (temporaries are allocated on that stream itself).
// - Failures after the call returned (a peer lost, a timeout) abort the device
//   communicator; the group's next CUDA call, a barrier's wait or a bounded wait throws
//   them, naming this rank and gyre's message.
#pragma once

#include "torch_compat.h"

#if GYRE_TORCH_DEVICE_PATH

#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>

#include "capi/gyre.h"
#include "capi/gyre_cuda.h"

namespace gyre_torch {

// Owns a gyre device communicator (collective destruction: every rank of it destroys).
struct DeviceComm {
  DeviceComm(gyreCudaComm_t c, int d, std::string n) : comm(c), device(d), name(std::move(n)) {}
  ~DeviceComm() { gyreCudaCommDestroy(comm); }
  DeviceComm(const DeviceComm&) = delete;
  DeviceComm& operator=(const DeviceComm&) = delete;
  const gyreCudaComm_t comm;
  const int device;        // the CUDA device index it works on
  const std::string name;  // "the group's" or "rank 0 and rank 3's", for messages
};

// The current stream of a CUDA device (torch.cuda.current_stream(device)).
c10::Stream currentStream(const c10::Device& device);
inline gyreCudaStream_t nativeStream(const c10::Stream& stream) {
  return static_cast<gyreCudaStream_t>(stream.native_handle());
}

class DeviceWork : public c10d::Work {
 public:
  // blockHost: wait() also blocks the host until the stream has passed the call (barrier).
  DeviceWork(int rank, c10d::OpType type, std::string what, const c10::Stream& stream,
             std::vector<at::Tensor> outputs, std::shared_ptr<DeviceComm> comm, bool blockHost);

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  std::vector<at::Tensor> result() override { return outputs_; }
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  void synchronize() override;
  void abort() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  [[noreturn]] void fail(const std::string& why);
  const std::string what_;
  const c10::Device device_;
  const std::vector<at::Tensor> outputs_;
  // Weak: a Work kept past its group must not hold the device communicator, whose
  // destruction is collective.
  const std::weak_ptr<DeviceComm> comm_;
  const bool blockHost_;
  c10::Event event_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  mutable std::mutex mu_;
  std::exception_ptr error_;
};

}  // namespace gyre_torch

#endif  // GYRE_TORCH_DEVICE_PATH
