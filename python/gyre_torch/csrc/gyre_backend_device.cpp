// GyreBackend's collectives on CUDA tensors through gyre's device path (capi/gyre_cuda.h),
// enqueued on the current stream of the tensors' device: the contract is device_work.h's
// and docs/pytorch.md's ("CUDA tensors"). Every temporary (a contiguous copy,
// PREMUL_SUM's scaled input, the all-gather of a reduction gyre lacks) is made and copied
// back on that same stream, so the caller's later work on it sees the result.
#include "gyre_backend.h"

#if GYRE_TORCH_DEVICE_PATH

#include <c10/core/DeviceGuard.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <stdexcept>

#include "staging.h"
#include "store_bridge.h"

namespace gyre_torch {

namespace {

// `t` when gyre can take it as it is, else a contiguous copy on the current stream.
at::Tensor deviceContiguous(const at::Tensor& t) {
  if (t.layout() != at::kStrided) throwNotDense(t);
  return t.is_contiguous() ? t : t.contiguous();
}

// A destination gyre can write: `t`, or a new contiguous tensor the caller copies back.
at::Tensor deviceDestination(const at::Tensor& t) {
  if (t.layout() != at::kStrided) throwNotDense(t);
  return t.is_contiguous() ? t : at::empty(t.sizes(), t.options());
}

// PREMUL_SUM's input * factor, on the device, in the input's dtype.
at::Tensor devicePreMultiplied(const at::Tensor& t, const c10d::ReduceOp& op) {
  PreMulFactor factor = preMulFactor(op);
  at::Tensor scaled = factor.tensor.defined() ? at::mul(t, factor.tensor.to(t.device()))
                                              : at::mul(t, factor.scalar);
  return scaled.to(t.scalar_type()).contiguous();
}

at::Tensor reductionSource(const at::Tensor& t, const c10d::ReduceOp& op) {
  return op.op_ == c10d::ReduceOp::PREMUL_SUM ? devicePreMultiplied(t, op) : deviceContiguous(t);
}

// Keeps the caching allocator from reusing a caller's tensor's memory before `stream`
// has passed the call (a no-op for memory allocated on that stream).
void recordOn(const at::Tensor& t, const c10::Stream& stream) {
  if (t.defined() && t.is_cuda() && t.numel() > 0) t.record_stream(stream);
}

std::string onDeviceText(const std::string& what, const at::Tensor& t) {
  return what + " on " + t.device().str();
}

// A call's input and outputs must be on one device (the group's communicator is on one).
void requireOneDevice(const at::Tensor& input, const at::Tensor& output,
                      const std::string& what) {
  if (input.device() == output.device()) return;
  throw std::invalid_argument("gyre: " + what + ": the input is on " + input.device().str() +
                              ", an output on " + output.device().str() +
                              " (they must share a device)");
}

}  // namespace

void GyreBackend::checkDevice(gyreResult_t result, const std::string& what,
                              const DeviceComm& comm) const {
  if (result == gyreSuccess) return;
  throw std::runtime_error("gyre backend, rank " + std::to_string(rank_) + ": " + what + " (" +
                           comm.name + " CUDA communicator): " + gyreGetLastError(nullptr));
}

std::shared_ptr<DeviceComm> GyreBackend::makeDevice(const std::string& part, int size, int rank,
                                                    const at::Tensor& t, const std::string& name,
                                                    const std::string& what) {
  const std::string fail = "gyre backend, rank " + std::to_string(rank_) + ": " + what +
                           ": making " + name + " CUDA communicator on " + t.device().str();
  auto store = c10::make_intrusive<c10d::PrefixStore>(storePrefix_ + part, store_);
  gyreStore_t callbacks = makeStoreCallbacks(store);
  gyreComm_t host = nullptr;
  gyreResult_t result = gyreCommInitWithStore(&host, &callbacks, size, rank, timeout_.count(),
                                              routeHost_.empty() ? nullptr : routeHost_.c_str());
  if (result != gyreSuccess) {
    throw std::runtime_error(fail + " (its host communicator) failed: " +
                             gyreGetLastError(nullptr));
  }
  gyreCudaComm_t device = nullptr;
  const int index = t.device().index();
  result = gyreCudaCommCreate(&host, index, &device);
  if (result != gyreSuccess) {
    std::string why = gyreGetLastError(nullptr);
    if (host != nullptr) gyreCommDestroy(host);
    throw std::runtime_error(fail + " failed: " + why);
  }
  return std::make_shared<DeviceComm>(device, index, name);
}

std::shared_ptr<DeviceComm> GyreBackend::groupDevice(const at::Tensor& t,
                                                     const std::string& what) {
  if (!device_) {
    auto made = makeDevice("group/", size_, rank_, t, "the group's", what);
    std::lock_guard<std::mutex> lock(deviceMu_);
    device_ = made;
  }
  if (device_->device != t.device().index()) {
    throw std::invalid_argument(
        "gyre backend, rank " + std::to_string(rank_) + ": " + what + ": this group's CUDA "
        "collectives run on cuda:" + std::to_string(device_->device) +
        " (the device of its first CUDA call); a group takes one device per rank, as NCCL's "
        "(torch.cuda.set_device before the first call, or a group per device)");
  }
  return device_;
}

std::shared_ptr<DeviceComm> GyreBackend::pairDevice(const at::Tensor& t, int peer,
                                                    const std::string& what) {
  if (peer < 0 || peer >= size_ || peer == rank_) {
    throw std::invalid_argument("gyre backend, rank " + std::to_string(rank_) + ": " + what +
                                ": the peer must be another rank of the group's " +
                                std::to_string(size_));
  }
  auto found = pairs_.find(peer);
  if (found == pairs_.end()) {
    const int lo = std::min(rank_, peer), hi = std::max(rank_, peer);
    auto made = makeDevice("pair/" + std::to_string(lo) + "-" + std::to_string(hi) + "/", 2,
                           rank_ == lo ? 0 : 1, t,
                           "rank " + std::to_string(lo) + " and rank " + std::to_string(hi) +
                               "'s",
                           what);
    std::lock_guard<std::mutex> lock(deviceMu_);
    found = pairs_.emplace(peer, made).first;
  }
  if (found->second->device != t.device().index()) {
    throw std::invalid_argument("gyre backend, rank " + std::to_string(rank_) + ": " + what +
                                ": send/recv with rank " + std::to_string(peer) +
                                " run on cuda:" + std::to_string(found->second->device) +
                                " (the device of their first CUDA send/recv)");
  }
  return found->second;
}

// ---- Reductions ------------------------------------------------------------------------------

// Every rank's `source` stacked (world x its shape) on the device, for the reductions
// gyre lacks (reduced after by reduceLocally: identical bits on every rank).
static at::Tensor gatherStacked(const at::Tensor& source, int world, const DeviceComm& comm,
                                const c10::Stream& stream, gyreResult_t* result) {
  std::vector<int64_t> shape{world};
  for (int64_t d : source.sizes()) shape.push_back(d);
  at::Tensor stacked = at::empty(shape, source.options());
  *result = gyreCudaAllGather(source.data_ptr(), stacked.data_ptr(), bytesOf(source), gyreUint8,
                              comm.comm, nativeStream(stream));
  return stacked;
}

// all_reduce (root < 0) and reduce: the same steps but the call and who keeps the result.
c10::intrusive_ptr<c10d::Work> GyreBackend::deviceReduce(at::Tensor& tensor,
                                                         const c10d::ReduceOp& op, int root) {
  const bool all = root < 0;
  std::string what = onDeviceText(describe(all ? "all_reduce" : "reduce", tensor), tensor);
  if (!all) what += " to root " + std::to_string(root);
  auto comm = groupDevice(tensor, what);
  c10::DeviceGuard guard(tensor.device());
  const c10::Stream stream = currentStream(tensor.device());
  std::optional<NativeReduction> native = nativeReduction(tensor.scalar_type(), op.op_);
  at::Tensor source = reductionSource(tensor, op);
  const bool keeps = all || root == rank_;
  ++sequence_;
  if (!native) {
    gyreResult_t result;
    at::Tensor stacked = gatherStacked(source, size_, *comm, stream, &result);
    checkDevice(result, what, *comm);
    if (keeps) tensor.copy_(reduceLocally(stacked, op.op_, size_));
    what += " (" + std::string(opName(op.op_)) + ", all-gather + local reduction)";
  } else {
    at::Tensor flat =
        at::isComplexType(source.scalar_type()) ? at::view_as_real(source) : source;
    const size_t count = source.numel() * native->countFactor;
    checkDevice(all ? gyreCudaAllReduce(flat.data_ptr(), flat.data_ptr(), count, native->dtype,
                                        native->op, comm->comm, nativeStream(stream))
                    : gyreCudaReduce(flat.data_ptr(), flat.data_ptr(), count, native->dtype,
                                     native->op, root, comm->comm, nativeStream(stream)),
                what, *comm);
    if (keeps && !sameStorage(source, tensor)) tensor.copy_(source);
    what += " (" + std::string(opName(op.op_)) + ")";
  }
  recordOn(tensor, stream);
  return c10::make_intrusive<DeviceWork>(
      rank_, all ? c10d::OpType::ALLREDUCE : c10d::OpType::REDUCE, what, stream,
      std::vector<at::Tensor>{tensor}, comm, false);
}

c10::intrusive_ptr<c10d::Work> GyreBackend::deviceReduceScatter(at::Tensor& output,
                                                                const at::Tensor& input,
                                                                const c10d::ReduceOp& op,
                                                                c10d::OpType type) {
  std::string what = onDeviceText(describe("reduce_scatter", output), output);
  auto comm = groupDevice(output, what);
  requireOneDevice(input, output, what);
  c10::DeviceGuard guard(output.device());
  const c10::Stream stream = currentStream(output.device());
  std::optional<NativeReduction> native = nativeReduction(output.scalar_type(), op.op_);
  at::Tensor in = reductionSource(input, op);
  const int64_t count = output.numel();
  ++sequence_;
  if (!native) {
    gyreResult_t result;
    at::Tensor stacked = gatherStacked(in, size_, *comm, stream, &result);
    checkDevice(result, what, *comm);
    at::Tensor reduced = reduceLocally(stacked, op.op_, size_);
    output.copy_(reduced.reshape({-1}).narrow(0, count * rank_, count).view(output.sizes()));
  } else {
    at::Tensor out = deviceDestination(output);
    at::Tensor inFlat = at::isComplexType(in.scalar_type()) ? at::view_as_real(in) : in;
    at::Tensor outFlat = at::isComplexType(out.scalar_type()) ? at::view_as_real(out) : out;
    checkDevice(gyreCudaReduceScatter(inFlat.data_ptr(), outFlat.data_ptr(),
                                      count * native->countFactor, native->dtype, native->op,
                                      comm->comm, nativeStream(stream)),
                what, *comm);
    if (!sameStorage(out, output)) output.copy_(out);
  }
  recordOn(input, stream);
  recordOn(output, stream);
  return c10::make_intrusive<DeviceWork>(rank_, type, what + " (" + opName(op.op_) + ")", stream,
                                         std::vector<at::Tensor>{output}, comm, false);
}

// ---- Data movement ---------------------------------------------------------------------------

c10::intrusive_ptr<c10d::Work> GyreBackend::deviceBroadcast(at::Tensor& tensor, int root) {
  const std::string what =
      onDeviceText(describe("broadcast", tensor), tensor) + " from root " + std::to_string(root);
  auto comm = groupDevice(tensor, what);
  c10::DeviceGuard guard(tensor.device());
  const c10::Stream stream = currentStream(tensor.device());
  at::Tensor buffer = root == rank_ ? deviceContiguous(tensor) : deviceDestination(tensor);
  ++sequence_;
  // Bytes: every dtype moves.
  checkDevice(gyreCudaBroadcast(buffer.data_ptr(), buffer.data_ptr(), bytesOf(buffer), gyreUint8,
                                root, comm->comm, nativeStream(stream)),
              what, *comm);
  if (root != rank_ && !sameStorage(buffer, tensor)) tensor.copy_(buffer);
  recordOn(tensor, stream);
  return c10::make_intrusive<DeviceWork>(rank_, c10d::OpType::BROADCAST, what, stream,
                                         std::vector<at::Tensor>{tensor}, comm, false);
}

c10::intrusive_ptr<c10d::Work> GyreBackend::deviceAllgather(std::vector<at::Tensor>& outputs,
                                                            const at::Tensor& input) {
  const std::string what = onDeviceText(describe("all_gather", input), input);
  auto comm = groupDevice(input, what);
  for (const at::Tensor& out : outputs) requireOneDevice(input, out, what);
  c10::DeviceGuard guard(input.device());
  const c10::Stream stream = currentStream(input.device());
  at::Tensor in = deviceContiguous(input);
  at::Tensor gathered = at::empty({size_, in.numel()}, in.options());
  ++sequence_;
  checkDevice(gyreCudaAllGather(in.data_ptr(), gathered.data_ptr(), bytesOf(in), gyreUint8,
                                comm->comm, nativeStream(stream)),
              what, *comm);
  for (size_t r = 0; r < outputs.size(); ++r) {
    outputs[r].copy_(gathered[r].view(outputs[r].sizes()));
  }
  recordOn(input, stream);
  return c10::make_intrusive<DeviceWork>(rank_, c10d::OpType::ALLGATHER, what, stream, outputs,
                                         comm, false);
}

c10::intrusive_ptr<c10d::Work> GyreBackend::deviceAllgatherBase(at::Tensor& output,
                                                                const at::Tensor& input) {
  const std::string what = onDeviceText(describe("all_gather_into_tensor", input), input);
  auto comm = groupDevice(input, what);
  requireOneDevice(input, output, what);
  c10::DeviceGuard guard(input.device());
  const c10::Stream stream = currentStream(input.device());
  at::Tensor in = deviceContiguous(input);
  at::Tensor out = deviceDestination(output);
  ++sequence_;
  checkDevice(gyreCudaAllGather(in.data_ptr(), out.data_ptr(), bytesOf(in), gyreUint8,
                                comm->comm, nativeStream(stream)),
              what, *comm);
  if (!sameStorage(out, output)) output.copy_(out);
  recordOn(input, stream);
  recordOn(output, stream);
  return c10::make_intrusive<DeviceWork>(rank_, c10d::OpType::_ALLGATHER_BASE, what, stream,
                                         std::vector<at::Tensor>{output}, comm, false);
}

c10::intrusive_ptr<c10d::Work> GyreBackend::deviceAlltoall(at::Tensor& output,
                                                           const at::Tensor& input,
                                                           const std::vector<size_t>& sendCounts,
                                                           const std::vector<size_t>& recvCounts) {
  const std::string what = onDeviceText(describe("all_to_all_single", input), input);
  auto comm = groupDevice(input, what);
  requireOneDevice(input, output, what);
  c10::DeviceGuard guard(input.device());
  const c10::Stream stream = currentStream(input.device());
  at::Tensor in = deviceContiguous(input);
  at::Tensor out = deviceDestination(output);
  if (out.numel() > 0 && sameStorage(in, out)) out = at::empty_like(out);  // must not overlap
  ++sequence_;
  // Always the v form, in bytes, as on the host (gyre_backend_movement.cpp): ranks whose
  // own parts happen to be equal still run the same collective as the others.
  checkDevice(gyreCudaAllToAllv(in.data_ptr(), sendCounts.data(), nullptr, out.data_ptr(),
                                recvCounts.data(), nullptr, gyreUint8, comm->comm,
                                nativeStream(stream)),
              what, *comm);
  if (!sameStorage(out, output)) output.copy_(out);
  recordOn(input, stream);
  recordOn(output, stream);
  return c10::make_intrusive<DeviceWork>(rank_, c10d::OpType::ALLTOALL_BASE, what, stream,
                                         std::vector<at::Tensor>{output}, comm, false);
}

c10::intrusive_ptr<c10d::Work> GyreBackend::deviceSendRecv(at::Tensor& tensor, int peer,
                                                           bool send, int tag) {
  const std::string what = onDeviceText(describe(send ? "send" : "recv", tensor), tensor) +
                           (send ? " to rank " : " from rank ") + std::to_string(peer) +
                           " (tag " + std::to_string(tag) + ")";
  auto comm = pairDevice(tensor, peer, what);
  c10::DeviceGuard guard(tensor.device());
  const c10::Stream stream = currentStream(tensor.device());
  const int other = rank_ < peer ? 1 : 0;  // the peer's rank in the pair's communicator
  if (send) {
    at::Tensor buffer = deviceContiguous(tensor);
    checkDevice(gyreCudaSend(buffer.data_ptr(), bytesOf(buffer), gyreUint8, other, comm->comm,
                             nativeStream(stream)),
                what, *comm);
  } else {
    at::Tensor buffer = deviceDestination(tensor);
    checkDevice(gyreCudaRecv(buffer.data_ptr(), bytesOf(buffer), gyreUint8, other, comm->comm,
                             nativeStream(stream)),
                what, *comm);
    if (!sameStorage(buffer, tensor)) tensor.copy_(buffer);
  }
  recordOn(tensor, stream);
  return c10::make_intrusive<DeviceWork>(rank_, send ? c10d::OpType::SEND : c10d::OpType::RECV,
                                         what, stream, std::vector<at::Tensor>{tensor}, comm,
                                         false);
}

c10::intrusive_ptr<c10d::Work> GyreBackend::deviceBarrier() {
  const c10::Device device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device_->device));
  c10::DeviceGuard guard(device);
  const c10::Stream stream = currentStream(device);
  ++sequence_;
  checkDevice(gyreCudaBarrier(device_->comm, nativeStream(stream)), "barrier", *device_);
  // wait() blocks the host until the stream has passed it, as ProcessGroupNCCL's barrier.
  return c10::make_intrusive<DeviceWork>(rank_, c10d::OpType::BARRIER,
                                         "barrier on " + device.str(), stream,
                                         std::vector<at::Tensor>{}, device_, true);
}

}  // namespace gyre_torch

#endif  // GYRE_TORCH_DEVICE_PATH
