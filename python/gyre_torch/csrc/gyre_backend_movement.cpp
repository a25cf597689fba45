// GyreBackend: the collectives that move data (all-gather, gather, scatter,
// reduce-scatter, all-to-all) and point-to-point send/recv. Data moves as bytes, so every
// dtype works; reduce-scatter reduces with gyre's dtype (or locally, as all_reduce).
#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "gyre_backend.h"
#include "staging.h"

namespace gyre_torch {

namespace {

void checkSameBytes(const at::Tensor& a, const at::Tensor& b, const char* call, int index) {
  if (a.numel() != b.numel() || a.scalar_type() != b.scalar_type()) {
    throw std::invalid_argument(std::string("gyre: ") + call + ": tensor " +
                                std::to_string(index) + " has " + std::to_string(b.numel()) +
                                " " + c10::toString(b.scalar_type()) + ", the input " +
                                std::to_string(a.numel()) + " " +
                                c10::toString(a.scalar_type()) + " (they must match)");
  }
}

void checkCount(const std::vector<at::Tensor>& list, int world, const char* call) {
  if (static_cast<int>(list.size()) != world) {
    throw std::invalid_argument(std::string("gyre: ") + call + " needs one tensor per rank (" +
                                std::to_string(world) + "), got " + std::to_string(list.size()));
  }
}

// The byte view of a contiguous host tensor's part p of n equal parts.
at::Tensor bytesView(const at::Tensor& t) {
  return at::from_blob(t.data_ptr(), {static_cast<int64_t>(bytesOf(t))},
                       at::TensorOptions().dtype(at::kByte));
}

}  // namespace

// ---- All-gather, gather, scatter -------------------------------------------------------

c10::intrusive_ptr<c10d::Work> GyreBackend::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions&) {
  std::lock_guard<std::mutex> lock(issue_);
  at::Tensor input = single(inputs, "all_gather");
  if (outputs.size() != 1) throw std::invalid_argument("gyre: all_gather takes one output list");
  std::vector<at::Tensor> outs = outputs.front();
  checkCount(outs, size_, "all_gather");
  for (int r = 0; r < size_; ++r) checkSameBytes(input, outs[r], "all_gather", r);
#if GYRE_TORCH_DEVICE_PATH
  if (onDevice(input) &&
      std::all_of(outs.begin(), outs.end(), [](const at::Tensor& t) { return t.is_cuda(); })) {
    return deviceAllgather(outs, input);
  }
#endif
  input = hostContiguous(input);
  const std::string what = describe("all_gather", input);
  at::Tensor gathered = at::empty({size_, input.numel()}, input.options());
  auto work = newWork(c10d::OpType::ALLGATHER, what);
  issue(*work, what, [&](gyreComm_t comm, gyreRequest_t* request) {
    return gyreAllGatherAsync(input.data_ptr(), gathered.data_ptr(), bytesOf(input), gyreUint8,
                              comm, request);
  });
  work->keepAlive(input);
  work->keepAlive(gathered);
  work->addFinisher([outs, gathered]() mutable {
    for (size_t r = 0; r < outs.size(); ++r) outs[r].copy_(gathered[r].view(outs[r].sizes()));
  });
  work->setOutputs(outs);
  return work;
}

c10::intrusive_ptr<c10d::Work> GyreBackend::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputLists, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions&) {
  std::lock_guard<std::mutex> lock(issue_);
  if (static_cast<int>(outputLists.size()) != size_) {
    throw std::invalid_argument("gyre: all_gather_coalesced needs one output list per rank (" +
                                std::to_string(size_) + "), got " +
                                std::to_string(outputLists.size()));
  }
  std::vector<at::Tensor> parts;  // every input's bytes, in order
  for (const at::Tensor& t : inputs) parts.push_back(bytesView(hostContiguous(t)).clone());
  for (int r = 0; r < size_; ++r) {
    if (outputLists[r].size() != inputs.size()) {
      throw std::invalid_argument("gyre: all_gather_coalesced: output list " +
                                  std::to_string(r) + " has " +
                                  std::to_string(outputLists[r].size()) + " tensors, the input " +
                                  std::to_string(inputs.size()));
    }
    for (size_t i = 0; i < inputs.size(); ++i) {
      checkSameBytes(inputs[i], outputLists[r][i], "all_gather_coalesced", static_cast<int>(i));
    }
  }
  at::Tensor flat = parts.empty() ? at::empty({0}, at::kByte) : at::cat(parts);
  at::Tensor gathered = at::empty({size_, flat.numel()}, flat.options());
  const std::string what = describe("all_gather_coalesced", flat);
  auto work = newWork(c10d::OpType::ALLGATHER_COALESCED, what);
  issue(*work, what, [&](gyreComm_t comm, gyreRequest_t* request) {
    return gyreAllGatherAsync(flat.data_ptr(), gathered.data_ptr(), flat.numel(), gyreUint8,
                              comm, request);
  });
  work->keepAlive(flat);
  work->keepAlive(gathered);
  std::vector<at::Tensor> outs;
  for (auto& list : outputLists) outs.insert(outs.end(), list.begin(), list.end());
  work->addFinisher([outputLists, gathered]() mutable {
    for (size_t r = 0; r < outputLists.size(); ++r) {
      int64_t offset = 0;
      for (at::Tensor& out : outputLists[r]) {
        const int64_t n = static_cast<int64_t>(bytesOf(out));
        at::Tensor bytes = gathered[r].narrow(0, offset, n);
        out.copy_(at::from_blob(bytes.data_ptr(), out.sizes(), out.options().device(at::kCPU)));
        offset += n;
      }
    }
  });
  work->setOutputs(outs);
  return work;
}

c10::intrusive_ptr<c10d::Work> GyreBackend::_allgather_base(at::Tensor& output,
                                                            at::Tensor& input,
                                                            const c10d::AllgatherOptions&) {
  std::lock_guard<std::mutex> lock(issue_);
  if (output.numel() != input.numel() * size_ || output.scalar_type() != input.scalar_type()) {
    throw std::invalid_argument("gyre: all_gather_into_tensor: the output must hold world size (" +
                                std::to_string(size_) + ") x the input's " +
                                std::to_string(input.numel()) + " elements of its dtype");
  }
#if GYRE_TORCH_DEVICE_PATH
  if (onDevice(input) && output.is_cuda()) return deviceAllgatherBase(output, input);
#endif
  at::Tensor in = hostContiguous(input);
  at::Tensor out = hostContiguous(output);
  const std::string what = describe("all_gather_into_tensor", in);
  auto work = newWork(c10d::OpType::_ALLGATHER_BASE, what);
  issue(*work, what, [&](gyreComm_t comm, gyreRequest_t* request) {
    return gyreAllGatherAsync(in.data_ptr(), out.data_ptr(), bytesOf(in), gyreUint8, comm,
                              request);
  });
  work->keepAlive(in);
  work->keepAlive(out);
  if (!sameStorage(out, output)) {
    at::Tensor user = output;
    work->addFinisher([user, out]() mutable { user.copy_(out); });
  }
  work->setOutputs({output});
  return work;
}

c10::intrusive_ptr<c10d::Work> GyreBackend::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                   std::vector<at::Tensor>& inputs,
                                                   const c10d::GatherOptions& opts) {
  std::lock_guard<std::mutex> lock(issue_);
  at::Tensor input = hostContiguous(single(inputs, "gather"));
  const int root = static_cast<int>(opts.rootRank);
  const std::string what = describe("gather", input) + " to root " + std::to_string(root);
  auto work = newWork(c10d::OpType::GATHER, what);
  work->keepAlive(input);
  if (rank_ != root) {
    issue(*work, what, [&](gyreComm_t comm, gyreRequest_t* request) {
      return gyreSendAsync(input.data_ptr(), bytesOf(input), gyreUint8, root, comm, request);
    });
    return work;
  }
  if (outputs.size() != 1) throw std::invalid_argument("gyre: gather takes one output list");
  std::vector<at::Tensor> outs = outputs.front();
  checkCount(outs, size_, "gather");
  // The root receives from each rank in rank order; each sender has one message for it.
  for (int r = 0; r < size_; ++r) {
    checkSameBytes(input, outs[r], "gather", r);
    at::Tensor buffer = r == rank_ ? input : hostContiguous(outs[r]);
    if (r != rank_) {
      issue(*work, what, [&](gyreComm_t comm, gyreRequest_t* request) {
        return gyreRecvAsync(buffer.data_ptr(), bytesOf(buffer), gyreUint8, r, comm, request);
      });
      work->keepAlive(buffer);
    }
    if (!sameStorage(buffer, outs[r])) {
      at::Tensor user = outs[r];
      work->addFinisher([user, buffer]() mutable { user.copy_(buffer.view(user.sizes())); });
    }
  }
  work->setOutputs(outs);
  return work;
}

c10::intrusive_ptr<c10d::Work> GyreBackend::scatter(std::vector<at::Tensor>& outputs,
                                                    std::vector<std::vector<at::Tensor>>& inputs,
                                                    const c10d::ScatterOptions& opts) {
  std::lock_guard<std::mutex> lock(issue_);
  at::Tensor output = single(outputs, "scatter");
  const int root = static_cast<int>(opts.rootRank);
  const std::string what = describe("scatter", output) + " from root " + std::to_string(root);
  auto work = newWork(c10d::OpType::SCATTER, what);
  at::Tensor out = hostContiguous(output);
  work->keepAlive(out);
  if (rank_ != root) {
    issue(*work, what, [&](gyreComm_t comm, gyreRequest_t* request) {
      return gyreRecvAsync(out.data_ptr(), bytesOf(out), gyreUint8, root, comm, request);
    });
  } else {
    if (inputs.size() != 1) throw std::invalid_argument("gyre: scatter takes one input list");
    std::vector<at::Tensor> ins = inputs.front();
    checkCount(ins, size_, "scatter");
    for (int r = 0; r < size_; ++r) {
      checkSameBytes(output, ins[r], "scatter", r);
      at::Tensor part = hostContiguous(ins[r]);
      if (r == rank_) {
        out.copy_(part.view(out.sizes()));
        continue;
      }
      issue(*work, what, [&](gyreComm_t comm, gyreRequest_t* request) {
        return gyreSendAsync(part.data_ptr(), bytesOf(part), gyreUint8, r, comm, request);
      });
      work->keepAlive(part);
    }
  }
  if (!sameStorage(out, output)) {
    work->addFinisher([output, out]() mutable { output.copy_(out); });
  }
  work->setOutputs({output});
  return work;
}

// ---- Reduce-scatter ---------------------------------------------------------------------

c10::intrusive_ptr<c10d::Work> GyreBackend::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  at::Tensor output = single(outputs, "reduce_scatter");
  if (inputs.size() != 1) throw std::invalid_argument("gyre: reduce_scatter takes one input list");
  checkCount(inputs.front(), size_, "reduce_scatter");
  // All on one CUDA device: packed there (and reduced on the device where it runs);
  // otherwise on the host.
  bool device = output.is_cuda();
  for (const at::Tensor& t : inputs.front()) device = device && t.device() == output.device();
  std::vector<at::Tensor> flats;
  for (int r = 0; r < size_; ++r) {
    checkSameBytes(output, inputs.front()[r], "reduce_scatter", r);
    const at::Tensor& in = inputs.front()[r];
    flats.push_back(device ? in.reshape({-1}) : in.to(at::kCPU).reshape({-1}));
  }
  at::Tensor packed = at::cat(flats);
  return _reduce_scatter_base(output, packed, opts);
}

c10::intrusive_ptr<c10d::Work> GyreBackend::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  std::lock_guard<std::mutex> lock(issue_);
  if (input.numel() != output.numel() * size_ || output.scalar_type() != input.scalar_type()) {
    throw std::invalid_argument("gyre: reduce_scatter_tensor: the input must hold world size (" +
                                std::to_string(size_) + ") x the output's " +
                                std::to_string(output.numel()) + " elements of its dtype");
  }
#if GYRE_TORCH_DEVICE_PATH
  if (onDevice(output) && input.is_cuda()) {
    return deviceReduceScatter(output, input, opts.reduceOp, c10d::OpType::_REDUCE_SCATTER_BASE);
  }
#endif
  const std::string what = describe("reduce_scatter", output);
  const int64_t count = output.numel();
  const int64_t offset = count * rank_;
  std::optional<NativeReduction> native = nativeReduction(output.scalar_type(), opts.reduceOp.op_);
  if (!native) {
    auto work = reduceByAllGather(c10d::OpType::_REDUCE_SCATTER_BASE, what, input, opts.reduceOp,
                                  [output, count, offset](const at::Tensor& r) mutable {
                                    output.copy_(r.reshape({-1}).narrow(0, offset, count)
                                                     .view(output.sizes()));
                                  });
    work->setOutputs({output});
    return work;
  }
  at::Tensor in = opts.reduceOp.op_ == c10d::ReduceOp::PREMUL_SUM
                      ? preMultiplied(input, opts.reduceOp)
                      : hostContiguous(input);
  at::Tensor out = hostContiguous(output);
  at::Tensor inFlat = at::isComplexType(in.scalar_type()) ? at::view_as_real(in) : in;
  at::Tensor outFlat = at::isComplexType(out.scalar_type()) ? at::view_as_real(out) : out;
  auto work = newWork(c10d::OpType::_REDUCE_SCATTER_BASE,
                      what + " (" + opName(opts.reduceOp.op_) + ")");
  issue(*work, what, [&](gyreComm_t comm, gyreRequest_t* request) {
    return gyreReduceScatterAsync(inFlat.data_ptr(), outFlat.data_ptr(),
                                  count * native->countFactor, native->dtype, native->op, comm,
                                  request);
  });
  work->keepAlive(in);
  work->keepAlive(out);
  if (!sameStorage(out, output)) {
    work->addFinisher([output, out]() mutable { output.copy_(out); });
  }
  work->setOutputs({output});
  return work;
}

// ---- All-to-all ---------------------------------------------------------------------------

// Every all-to-all is gyre's alltoallv, in bytes: the sizes are this rank's own (the
// split lists, or the tensors of the list form), nothing is agreed or padded first, and
// a block whose size differs from what its receiver expects fails both with a mismatch
// naming them. (One kind for every call, even or not: ranks whose own parts happen to be
// even and ranks whose parts are not still run the same collective.)
c10::intrusive_ptr<GyreWork> GyreBackend::allToAllBytes(c10d::OpType type, const std::string& what,
                                                        const at::Tensor& send,
                                                        std::vector<size_t> sendCounts,
                                                        const at::Tensor& recv,
                                                        std::vector<size_t> recvCounts) {
  auto work = newWork(type, what);
  issue(*work, what, [&](gyreComm_t comm, gyreRequest_t* request) {
    return gyreAllToAllvAsync(send.data_ptr(), sendCounts.data(), nullptr, recv.data_ptr(),
                              recvCounts.data(), nullptr, gyreUint8, comm, request);
  });
  work->keepAlive(send);
  work->keepAlive(recv);
  return work;
}

c10::intrusive_ptr<c10d::Work> GyreBackend::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                          std::vector<int64_t>& outputSplits,
                                                          std::vector<int64_t>& inputSplits,
                                                          const c10d::AllToAllOptions&) {
  std::lock_guard<std::mutex> lock(issue_);
  const std::string what = describe("all_to_all_single", input);
  // Parts are rows of dim 0 (torch's rule): an empty split list means equal parts.
  auto byteCounts = [&](const at::Tensor& t, const std::vector<int64_t>& splits, const char* side) {
    const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
    const size_t rowBytes = rows == 0 ? 0 : bytesOf(t) / rows;
    std::vector<size_t> counts;
    if (splits.empty()) {
      if (rows % size_ != 0) {
        throw std::invalid_argument("gyre: all_to_all_single: the " + std::string(side) + " has " +
                                    std::to_string(rows) +
                                    " rows, not divisible by the world size " +
                                    std::to_string(size_) + " (pass split sizes)");
      }
      counts.assign(size_, rows / size_ * rowBytes);
      return counts;
    }
    int64_t sum = 0;
    for (int64_t n : splits) {
      if (n < 0) throw std::invalid_argument("gyre: all_to_all_single: negative split size");
      sum += n;
      counts.push_back(n * rowBytes);
    }
    if (static_cast<int>(splits.size()) != size_ || sum != rows) {
      throw std::invalid_argument(
          "gyre: all_to_all_single: " + std::string(side) + " split sizes must be one per rank (" +
          std::to_string(size_) + ") summing to dim 0 (" + std::to_string(rows) + "); got " +
          std::to_string(splits.size()) + " summing to " + std::to_string(sum));
    }
    return counts;
  };
  // The counts from the caller's tensors (a contiguous copy has the same rows and bytes).
  if (input.layout() != at::kStrided) throwNotDense(input);
  if (output.layout() != at::kStrided) throwNotDense(output);
  auto sendCounts = byteCounts(input, inputSplits, "input");
  auto recvCounts = byteCounts(output, outputSplits, "output");
#if GYRE_TORCH_DEVICE_PATH
  if (onDevice(input) && output.is_cuda()) {
    return deviceAlltoall(output, input, sendCounts, recvCounts);
  }
#endif
  at::Tensor in = hostContiguous(input);
  at::Tensor out = hostContiguous(output);
  if (sameStorage(in, out)) out = at::empty_like(out);  // gyre's buffers must not overlap
  auto work = allToAllBytes(c10d::OpType::ALLTOALL_BASE, what, in, sendCounts, out, recvCounts);
  work->addFinisher([output, out]() mutable {
    if (!sameStorage(out, output)) output.copy_(out);
  });
  work->setOutputs({output});
  return work;
}

c10::intrusive_ptr<c10d::Work> GyreBackend::alltoall(std::vector<at::Tensor>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllToAllOptions&) {
  std::lock_guard<std::mutex> lock(issue_);
  checkCount(inputs, size_, "all_to_all");
  checkCount(outputs, size_, "all_to_all");
  const std::string what = describe("all_to_all", inputs.front()) + " (list)";
  // Both sides staged as one byte buffer each, the parts packed in rank order.
  std::vector<size_t> sendCounts, recvCounts;
  size_t sendTotal = 0, recvTotal = 0;
  for (const at::Tensor& t : inputs) sendTotal += sendCounts.emplace_back(bytesOf(t));
  for (const at::Tensor& t : outputs) {
    if (t.layout() != at::kStrided) throwNotDense(t);
    recvTotal += recvCounts.emplace_back(bytesOf(t));
  }
  auto bytes = [](size_t n) {
    return at::empty({static_cast<int64_t>(n)}, at::TensorOptions().dtype(at::kByte));
  };
  at::Tensor send = bytes(sendTotal), recv = bytes(recvTotal);
  int64_t at = 0;
  for (size_t p = 0; p < inputs.size(); ++p) {
    const auto n = static_cast<int64_t>(sendCounts[p]);
    send.narrow(0, at, n).copy_(bytesView(hostContiguous(inputs[p])));
    at += n;
  }
  auto work = allToAllBytes(c10d::OpType::ALLTOALL, what, send, sendCounts, recv, recvCounts);
  std::vector<at::Tensor> users = outputs;
  work->addFinisher([users, recv, recvCounts]() mutable {
    int64_t at = 0;
    for (size_t p = 0; p < users.size(); ++p) {
      at::Tensor& dst = users[p];
      const auto n = static_cast<int64_t>(recvCounts[p]);
      // A contiguous host tensor takes its bytes directly; any other through a host copy.
      at::Tensor host = dst.is_cpu() && dst.is_contiguous()
                            ? dst
                            : at::empty(dst.sizes(), dst.options().device(at::kCPU));
      bytesView(host).copy_(recv.narrow(0, at, n));
      if (!sameStorage(host, dst)) dst.copy_(host);
      at += n;
    }
  });
  work->setOutputs(outputs);
  return work;
}

}  // namespace gyre_torch
