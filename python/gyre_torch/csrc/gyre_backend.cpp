// GyreBackend: construction, the reductions, broadcast and the barriers. The data
// movement collectives and point-to-point are in gyre_backend_movement.cpp.
#include "gyre_backend.h"

#include <chrono>
#include <stdexcept>
#include <thread>

#include "staging.h"
#include "store_bridge.h"

namespace gyre_torch {

GyreBackend::GyreBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                         std::chrono::milliseconds timeout, const std::string& routeHost)
    : BackendBase(rank, size), store_(store), timeout_(timeout), routeHost_(routeHost) {
  gyreStore_t callbacks = makeStoreCallbacks(store);
  gyreComm_t comm = nullptr;
  gyreResult_t result = gyreCommInitWithStore(&comm, &callbacks, size, rank, timeout.count(),
                                              routeHost.empty() ? nullptr : routeHost.c_str());
  if (result != gyreSuccess) {
    throw std::runtime_error("gyre backend, rank " + std::to_string(rank) + " of " +
                             std::to_string(size) + ": creating the communicator failed: " +
                             gyreGetLastError(nullptr));
  }
  comm_ = std::make_shared<CommHandle>(comm);
  completer_ = std::make_shared<Completer>(comm_);
}

namespace {
int rankOf(gyreComm_t comm) {
  int r = -1;
  gyreCommUserRank(comm, &r);
  return r;
}
int sizeOf(gyreComm_t comm) {
  int n = 0;
  gyreCommCount(comm, &n);
  return n;
}
}  // namespace

GyreBackend::GyreBackend(const c10::intrusive_ptr<c10d::Store>& store, gyreComm_t comm,
                         std::chrono::milliseconds timeout, std::string storePrefix)
    : BackendBase(rankOf(comm), sizeOf(comm)),
      store_(store),
      timeout_(timeout),
      storePrefix_(std::move(storePrefix)) {
  comm_ = std::make_shared<CommHandle>(comm);
  completer_ = std::make_shared<Completer>(comm_);
}

int GyreBackend::failedRank() const {
  int r = -1;
  gyreCommGetFailedRank(comm_->comm, &r);
  return r;
}

std::string GyreBackend::lastError() const { return gyreGetLastError(comm_->comm); }

void GyreBackend::abortNow() {
  gyreCommAbort(comm_->comm);
#if GYRE_TORCH_DEVICE_PATH
  // Without issue_: abort must not wait behind a call that is stuck issuing. The device
  // communicators are only ever added, and live as long as the backend.
  std::lock_guard<std::mutex> lock(deviceMu_);
  if (device_) gyreCudaCommAbort(device_->comm);
  for (auto& [peer, pair] : pairs_) gyreCudaCommAbort(pair->comm);
#endif
}

#if GYRE_TORCH_HAS_SHRINK
c10::intrusive_ptr<c10d::Backend> GyreBackend::shrink(
    const std::vector<int64_t>& ranksToExclude, int shrinkFlags,
    const c10::intrusive_ptr<Options>& /*optsOverride: gyre's options come from GYRE_* */) {
  std::vector<int> excluded(ranksToExclude.begin(), ranksToExclude.end());
  gyreComm_t small = nullptr;
  gyreResult_t result;
  {
    // Issuing is serialized; a pending operation of this group may still hold the queue
    // (SHRINK_ABORT ends it: gyreCommShrink revokes first).
    std::lock_guard<std::mutex> lock(issue_);
    result = gyreCommShrink(comm_->comm, excluded.data(), static_cast<int>(excluded.size()),
                            &small, shrinkFlags == 0 ? GYRE_SHRINK_DEFAULT : GYRE_SHRINK_ABORT);
  }
  if (result != gyreSuccess) {
    throw std::runtime_error("gyre backend, rank " + std::to_string(rank_) +
                             ": shrink_group failed: " + gyreGetLastError(nullptr));
  }
  // Its device communicators bootstrap through the same store under a prefix of their own.
  return c10::make_intrusive<GyreBackend>(
      store_, small, timeout_, storePrefix_ + "shrink" + std::to_string(shrinks_++) + "/");
}
#endif

GyreBackend::~GyreBackend() {
  completer_.reset();  // ends its thread first: it may hold the last Works
}

c10::intrusive_ptr<GyreWork> GyreBackend::newWork(c10d::OpType type, const std::string& what) {
  // Collectives only: send/recv differ between ranks, and torch's sequence number is
  // compared across the group (gloo counts the same way).
  if (type != c10d::OpType::SEND && type != c10d::OpType::RECV) ++sequence_;
  auto work = c10::make_intrusive<GyreWork>(rank_, type, what, comm_, completer_);
  if (coalescing_) coalesced_.push_back(work);  // a member of endCoalescing's Work
  return work;
}

void GyreBackend::issue(GyreWork& work, const std::string& what,
                        const std::function<gyreResult_t(gyreComm_t, gyreRequest_t*)>& call) {
  gyreRequest_t request = nullptr;
  // torch's name for the call ("all_reduce", "all_gather_into_tensor"...: `what` starts
  // with it) goes into the flight recorder's entry beside gyre's own.
  const std::string name = what.substr(0, what.find(' '));
  gyreResult_t result = gyreCommNameNextCall(comm_->comm, name.c_str());
  if (result == gyreSuccess) result = call(comm_->comm, &request);
  if (result != gyreSuccess) {
    throw std::runtime_error("gyre backend, rank " + std::to_string(rank_) + ": " + what +
                             ": " + gyreGetLastError(nullptr));
  }
  work.addRequest(request);
}

// ---- Reductions --------------------------------------------------------------------------

c10::intrusive_ptr<GyreWork> GyreBackend::reduceByAllGather(
    c10d::OpType type, const std::string& what, const at::Tensor& input,
    const c10d::ReduceOp& op, std::function<void(const at::Tensor&)> deliver) {
  at::Tensor source = reductionBuffer(input, op);
  std::vector<int64_t> shape{size_};
  for (int64_t d : source.sizes()) shape.push_back(d);
  at::Tensor stacked = at::empty(shape, source.options());
  auto work = newWork(type, what + " (" + opName(op.op_) + ", all-gather + local reduction)");
  issue(*work, what, [&](gyreComm_t comm, gyreRequest_t* request) {
    return gyreAllGatherAsync(source.data_ptr(), stacked.data_ptr(), bytesOf(source), gyreUint8,
                              comm, request);
  });
  work->keepAlive(source);
  work->keepAlive(stacked);
  // The same local reduction in rank order on every rank: identical bits everywhere.
  c10d::ReduceOp::RedOpType kind = op.op_;
  int world = size_;
  work->addFinisher([stacked, kind, world, deliver] {
    // Bitwise checks come first: reduceLocally throws for floating types.
    deliver(reduceLocally(stacked, kind, world));
  });
  return work;
}

c10::intrusive_ptr<c10d::Work> GyreBackend::allreduce(std::vector<at::Tensor>& tensors,
                                                      const c10d::AllreduceOptions& opts) {
  std::lock_guard<std::mutex> lock(issue_);
  at::Tensor tensor = single(tensors, "all_reduce");
#if GYRE_TORCH_DEVICE_PATH
  if (onDevice(tensor)) return deviceReduce(tensor, opts.reduceOp, -1);
#endif
  const std::string what = describe("all_reduce", tensor);
  std::optional<NativeReduction> native =
      nativeReduction(tensor.scalar_type(), opts.reduceOp.op_);
  if (!native) {
    auto work = reduceByAllGather(c10d::OpType::ALLREDUCE, what, tensor, opts.reduceOp,
                                  [tensor](const at::Tensor& r) mutable { tensor.copy_(r); });
    work->setOutputs({tensor});
    return work;
  }
  at::Tensor buffer = reductionBuffer(tensor, opts.reduceOp);
  at::Tensor flat = at::isComplexType(buffer.scalar_type()) ? at::view_as_real(buffer) : buffer;
  auto work = newWork(c10d::OpType::ALLREDUCE, what + " (" + opName(opts.reduceOp.op_) + ")");
  issue(*work, what, [&](gyreComm_t comm, gyreRequest_t* request) {
    return gyreAllReduceAsync(flat.data_ptr(), flat.data_ptr(),
                              buffer.numel() * native->countFactor, native->dtype, native->op,
                              comm, request);
  });
  work->keepAlive(buffer);
  if (!sameStorage(buffer, tensor)) {
    work->addFinisher([tensor, buffer]() mutable { tensor.copy_(buffer); });
  }
  work->setOutputs({tensor});
  return work;
}

c10::intrusive_ptr<c10d::Work> GyreBackend::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  // One all-reduce of the tensors flattened together (they share a dtype, as torch checks).
  if (tensors.empty()) throw std::invalid_argument("gyre: allreduce_coalesced of no tensors");
  std::vector<at::Tensor> flats;
  for (const at::Tensor& t : tensors) {
    if (t.scalar_type() != tensors.front().scalar_type()) {
      throw std::invalid_argument(std::string("gyre: allreduce_coalesced: the tensors must share "
                                              "a dtype; got ") +
                                  c10::toString(tensors.front().scalar_type()) + " and " +
                                  c10::toString(t.scalar_type()));
    }
    if (t.layout() != at::kStrided) throwNotDense(t);
    flats.push_back(t.to(at::kCPU).reshape({-1}));
  }
  std::vector<at::Tensor> packed{at::cat(flats)};
  c10d::AllreduceOptions single;
  single.reduceOp = opts.reduceOp;
  single.timeout = opts.timeout;
  auto work = c10::static_intrusive_pointer_cast<GyreWork>(allreduce(packed, single));
  std::vector<at::Tensor> outputs = tensors;
  at::Tensor result = packed.front();
  // Runs after allreduce's own finisher has filled `result` (it is the buffer itself).
  work->addFinisher([outputs, result]() mutable {
    int64_t offset = 0;
    for (at::Tensor& t : outputs) {
      t.copy_(result.narrow(0, offset, t.numel()).view(t.sizes()));
      offset += t.numel();
    }
  });
  work->setOutputs(tensors);
  return work;
}

c10::intrusive_ptr<c10d::Work> GyreBackend::reduce(std::vector<at::Tensor>& tensors,
                                                   const c10d::ReduceOptions& opts) {
  std::lock_guard<std::mutex> lock(issue_);
  at::Tensor tensor = single(tensors, "reduce");
#if GYRE_TORCH_DEVICE_PATH
  if (onDevice(tensor)) return deviceReduce(tensor, opts.reduceOp, static_cast<int>(opts.rootRank));
#endif
  const std::string what = describe("reduce", tensor) + " to root " +
                           std::to_string(opts.rootRank);
  const bool root = opts.rootRank == rank_;
  std::optional<NativeReduction> native =
      nativeReduction(tensor.scalar_type(), opts.reduceOp.op_);
  if (!native) {
    auto work = reduceByAllGather(c10d::OpType::REDUCE, what, tensor, opts.reduceOp,
                                  [tensor, root](const at::Tensor& r) mutable {
                                    if (root) tensor.copy_(r);
                                  });
    work->setOutputs({tensor});
    return work;
  }
  at::Tensor buffer = reductionBuffer(tensor, opts.reduceOp);
  at::Tensor flat = at::isComplexType(buffer.scalar_type()) ? at::view_as_real(buffer) : buffer;
  auto work = newWork(c10d::OpType::REDUCE, what + " (" + opName(opts.reduceOp.op_) + ")");
  issue(*work, what, [&](gyreComm_t comm, gyreRequest_t* request) {
    return gyreReduceAsync(flat.data_ptr(), flat.data_ptr(),
                           buffer.numel() * native->countFactor, native->dtype, native->op,
                           static_cast<int>(opts.rootRank), comm, request);
  });
  work->keepAlive(buffer);
  if (root && !sameStorage(buffer, tensor)) {
    work->addFinisher([tensor, buffer]() mutable { tensor.copy_(buffer); });
  }
  work->setOutputs({tensor});
  return work;
}

// ---- Broadcast and barriers -----------------------------------------------------------

c10::intrusive_ptr<c10d::Work> GyreBackend::broadcast(std::vector<at::Tensor>& tensors,
                                                      const c10d::BroadcastOptions& opts) {
  std::lock_guard<std::mutex> lock(issue_);
  at::Tensor tensor = single(tensors, "broadcast");
#if GYRE_TORCH_DEVICE_PATH
  if (onDevice(tensor)) return deviceBroadcast(tensor, static_cast<int>(opts.rootRank));
#endif
  const std::string what =
      describe("broadcast", tensor) + " from root " + std::to_string(opts.rootRank);
  at::Tensor buffer = hostContiguous(tensor);
  auto work = newWork(c10d::OpType::BROADCAST, what);
  issue(*work, what, [&](gyreComm_t comm, gyreRequest_t* request) {
    // Bytes: every dtype moves, and the receivers' check compares the byte count.
    return gyreBroadcastAsync(buffer.data_ptr(), buffer.data_ptr(), bytesOf(buffer), gyreUint8,
                              static_cast<int>(opts.rootRank), comm, request);
  });
  work->keepAlive(buffer);
  if (opts.rootRank != rank_ && !sameStorage(buffer, tensor)) {
    work->addFinisher([tensor, buffer]() mutable { tensor.copy_(buffer); });
  }
  work->setOutputs({tensor});
  return work;
}

c10::intrusive_ptr<c10d::Work> GyreBackend::barrier(const c10d::BarrierOptions&) {
  std::lock_guard<std::mutex> lock(issue_);
#if GYRE_TORCH_DEVICE_PATH
  // A group that has run CUDA collectives: the device barrier on the current stream (as
  // ProcessGroupNCCL's, whose barrier is a device all-reduce); its wait blocks the host.
  if (device_ && !coalescing_) return deviceBarrier();
#endif
  auto work = newWork(c10d::OpType::BARRIER, "barrier");
  issue(*work, "barrier",
        [&](gyreComm_t comm, gyreRequest_t* request) { return gyreBarrierAsync(comm, request); });
  return work;
}

// Through the store, as gloo's: rank 0 waits for every rank's arrival key up to the
// timeout and names the ranks that did not come; then it releases them.
void GyreBackend::monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) {
  std::chrono::milliseconds timeout = opts.timeout.count() > 0 ? opts.timeout : timeout_;
  const std::string prefix = "gyre_monitored_barrier/" + std::to_string(monitoredBarriers_++);
  const std::string released = prefix + "/released";
  if (rank_ != 0) {
    store_->set(prefix + "/arrived/" + std::to_string(rank_), std::vector<uint8_t>{1});
    try {
      store_->wait({released}, timeout);
    } catch (const std::exception& e) {
      throw std::runtime_error("gyre backend, rank " + std::to_string(rank_) +
                               ": monitored_barrier: rank 0 did not release it within " +
                               std::to_string(timeout.count()) + " ms: " + e.what());
    }
    return;
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<int> missing;
  for (int r = 1; r < size_; ++r) {
    const std::string key = prefix + "/arrived/" + std::to_string(r);
    bool arrived = store_->check({key});
    while (!arrived && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      arrived = store_->check({key});
    }
    if (!arrived) {
      missing.push_back(r);
      if (!waitAllRanks) break;
    }
  }
  if (!missing.empty()) {
    std::string ranks;
    for (int r : missing) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    throw std::runtime_error("gyre backend, rank 0: monitored_barrier: " +
                             std::string(missing.size() > 1 ? "Ranks " : "Rank ") + ranks +
                             " failed to pass monitoredBarrier in " +
                             std::to_string(timeout.count()) + " ms");
  }
  store_->set(released, std::vector<uint8_t>{1});
}

}  // namespace gyre_torch
