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
  at::Tensor input = hostContiguous(single(inputs, "all_gather"));
  if (outputs.size() != 1) throw std::invalid_argument("gyre: all_gather takes one output list");
  std::vector<at::Tensor> outs = outputs.front();
  checkCount(outs, size_, "all_gather");
  for (int r = 0; r < size_; ++r) checkSameBytes(input, outs[r], "all_gather", r);
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
  std::vector<at::Tensor> flats;
  for (int r = 0; r < size_; ++r) {
    checkSameBytes(output, inputs.front()[r], "reduce_scatter", r);
    flats.push_back(inputs.front()[r].to(at::kCPU).reshape({-1}));
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

int64_t GyreBackend::maxOverRanks(int64_t value, const char* what) {
  if (gyreAllReduce(&value, &value, 1, gyreInt64, gyreMax, comm_->comm) != gyreSuccess) {
    throw std::runtime_error("gyre backend, rank " + std::to_string(rank_) + ": " + what +
                             ": agreeing on the largest part failed: " + gyreGetLastError(nullptr));
  }
  return value;
}

// Uneven parts: every part is padded to the largest over all ranks (one small all-reduce
// agrees on it), so that gyre's equal-block all-to-all carries them.
c10::intrusive_ptr<GyreWork> GyreBackend::paddedAllToAll(const std::string& what,
                                                         std::vector<at::Tensor> sendParts,
                                                         std::vector<at::Tensor> recvParts,
                                                         std::function<void()> afterCopy) {
  int64_t largest = 0;
  for (const at::Tensor& t : sendParts) largest = std::max<int64_t>(largest, bytesOf(t));
  for (const at::Tensor& t : recvParts) largest = std::max<int64_t>(largest, bytesOf(t));
  const int64_t block = maxOverRanks(largest, what.c_str());
  at::Tensor sendBuf = at::empty({size_, block}, at::TensorOptions().dtype(at::kByte));
  at::Tensor recvBuf = at::empty({size_, block}, at::TensorOptions().dtype(at::kByte));
  for (int p = 0; p < size_; ++p) {
    at::Tensor part = hostContiguous(sendParts[p]);
    sendBuf[p].narrow(0, 0, bytesOf(part)).copy_(bytesView(part));
  }
  auto work = newWork(c10d::OpType::ALLTOALL, what);
  issue(*work, what, [&](gyreComm_t comm, gyreRequest_t* request) {
    return gyreAllToAllAsync(sendBuf.data_ptr(), recvBuf.data_ptr(), block, gyreUint8, comm,
                             request);
  });
  work->keepAlive(sendBuf);
  work->keepAlive(recvBuf);
  work->addFinisher([recvParts, recvBuf, afterCopy]() mutable {
    for (size_t p = 0; p < recvParts.size(); ++p) {
      at::Tensor& dst = recvParts[p];  // contiguous host tensors (see the callers)
      bytesView(dst).copy_(recvBuf[p].narrow(0, 0, bytesOf(dst)));
    }
    if (afterCopy) afterCopy();
  });
  return work;
}

c10::intrusive_ptr<c10d::Work> GyreBackend::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                          std::vector<int64_t>& outputSplits,
                                                          std::vector<int64_t>& inputSplits,
                                                          const c10d::AllToAllOptions&) {
  std::lock_guard<std::mutex> lock(issue_);
  const std::string what = describe("all_to_all_single", input);
  at::Tensor in = hostContiguous(input);
  at::Tensor out = hostContiguous(output);
  if (sameStorage(in, out)) out = at::empty_like(out);  // gyre's buffers must not overlap
  auto copyBack = [output, out]() mutable {
    if (!sameStorage(out, output)) output.copy_(out);
  };
  // Explicit equal splits are the same call to torch as none: take the same path, or a
  // rank that spells them out would run the padded path's agreement all-reduce while a
  // rank that passes None runs the all-to-all (a mismatch). (Ranks whose parts really
  // differ in size all take the padded path, which agrees on the block first.)
  auto evenSplits = [&](const std::vector<int64_t>& splits, const at::Tensor& t) {
    if (splits.empty()) return true;
    const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
    return static_cast<int>(splits.size()) == size_ && rows % size_ == 0 &&
           std::all_of(splits.begin(), splits.end(),
                       [&](int64_t n) { return n == rows / size_; });
  };
  const bool even = evenSplits(inputSplits, in) && evenSplits(outputSplits, out);
  if (even) {
    if (in.numel() % size_ != 0 || out.numel() != in.numel()) {
      throw std::invalid_argument("gyre: all_to_all_single: input and output must have the "
                                  "same numel, divisible by the world size " +
                                  std::to_string(size_));
    }
    auto work = newWork(c10d::OpType::ALLTOALL_BASE, what);
    issue(*work, what, [&](gyreComm_t comm, gyreRequest_t* request) {
      return gyreAllToAllAsync(in.data_ptr(), out.data_ptr(), bytesOf(in) / size_, gyreUint8,
                               comm, request);
    });
    work->keepAlive(in);
    work->keepAlive(out);
    work->addFinisher(copyBack);
    work->setOutputs({output});
    return work;
  }
  // Uneven: parts are rows of dim 0; an empty split list means equal rows.
  auto parts = [&](const at::Tensor& t, const std::vector<int64_t>& splits) {
    std::vector<at::Tensor> out;
    const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
    int64_t at = 0;
    for (int p = 0; p < size_; ++p) {
      int64_t n = splits.empty() ? rows / size_ : splits[p];
      out.push_back(t.narrow(0, at, n));
      at += n;
    }
    if (at > rows) throw std::invalid_argument("gyre: all_to_all_single: splits exceed dim 0");
    return out;
  };
  if ((!inputSplits.empty() && static_cast<int>(inputSplits.size()) != size_) ||
      (!outputSplits.empty() && static_cast<int>(outputSplits.size()) != size_)) {
    throw std::invalid_argument("gyre: all_to_all_single: split lists need one entry per rank");
  }
  auto work = paddedAllToAll(what, parts(in, inputSplits), parts(out, outputSplits), copyBack);
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
  std::vector<at::Tensor> staged;
  for (const at::Tensor& t : outputs) staged.push_back(t.to(at::kCPU).contiguous().clone());
  std::vector<at::Tensor> users = outputs;
  auto work = paddedAllToAll(what, inputs, staged, [users, staged]() mutable {
    for (size_t p = 0; p < users.size(); ++p) users[p].copy_(staged[p]);
  });
  work->setOutputs(outputs);
  return work;
}

}  // namespace gyre_torch
