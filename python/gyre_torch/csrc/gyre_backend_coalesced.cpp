// GyreBackend on torch 2: the coalesced all-gather and reduce-scatter (several tensors,
// one gyre operation), gather into one tensor, split, the backend's options, and the
// clear refusal of sparse all-reduce. torch 1.13 has none of these methods.
#include <algorithm>
#include <stdexcept>

#include "gyre_backend.h"
#include "staging.h"

namespace gyre_torch {

#if TORCH_VERSION_MAJOR >= 2

namespace {

// The bytes of a contiguous host tensor as a flat uint8 tensor over the same memory.
at::Tensor byteView(const at::Tensor& t) {
  return at::from_blob(t.data_ptr(), {static_cast<int64_t>(bytesOf(t))},
                       at::TensorOptions().dtype(at::kByte));
}

void checkPairs(const std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& inputs,
                const char* call) {
  if (inputs.empty() || outputs.size() != inputs.size()) {
    throw std::invalid_argument(std::string("gyre: ") + call + " needs as many outputs as " +
                                "inputs (at least one); got " + std::to_string(outputs.size()) +
                                " and " + std::to_string(inputs.size()));
  }
}

}  // namespace

c10::intrusive_ptr<c10d::Backend::Options> GyreBackend::getBackendOptions() {
  return c10::make_intrusive<Options>("gyre", timeout_);
}

// One all-gather of every input's bytes back to back; the finisher cuts each rank's
// block into the outputs (output i holds world size x input i, rank by rank).
c10::intrusive_ptr<c10d::Work> GyreBackend::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions&) {
  std::lock_guard<std::mutex> lock(issue_);
  const char* call = "all_gather_into_tensor_coalesced";
  checkPairs(outputs, inputs, call);
  std::vector<int64_t> sizes;
  int64_t total = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const at::Tensor& in = inputs[i];
    const at::Tensor& out = outputs[i];
    if (out.numel() != in.numel() * size_ || out.scalar_type() != in.scalar_type()) {
      throw std::invalid_argument(std::string("gyre: ") + call + ": output " +
                                  std::to_string(i) + " must hold world size (" +
                                  std::to_string(size_) + ") x input " + std::to_string(i) +
                                  "'s " + std::to_string(in.numel()) + " " +
                                  c10::toString(in.scalar_type()) + "; it has " +
                                  std::to_string(out.numel()) + " " +
                                  c10::toString(out.scalar_type()));
    }
    if (out.layout() != at::kStrided) throwNotDense(out);
    total += sizes.emplace_back(static_cast<int64_t>(bytesOf(in)));
  }
  at::Tensor flat = at::empty({total}, at::TensorOptions().dtype(at::kByte));
  int64_t at = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (sizes[i] > 0) flat.narrow(0, at, sizes[i]).copy_(byteView(hostContiguous(inputs[i])));
    at += sizes[i];
  }
  at::Tensor gathered = at::empty({size_, total}, flat.options());
  const std::string what = std::string(call) + " of " + std::to_string(inputs.size()) +
                           " tensors (" + std::to_string(total) + " bytes per rank)";
  auto work = newWork(c10d::OpType::ALLGATHER_INTO_TENSOR_COALESCED, what);
  issue(*work, what, [&](gyreComm_t comm, gyreRequest_t* request) {
    return gyreAllGatherAsync(flat.data_ptr(), gathered.data_ptr(), total, gyreUint8, comm,
                              request);
  });
  work->keepAlive(flat);
  work->keepAlive(gathered);
  std::vector<at::Tensor> users = outputs;
  const int world = size_;
  work->addFinisher([users, gathered, sizes, world]() mutable {
    int64_t at = 0;
    for (size_t i = 0; i < users.size(); ++i) {
      at::Tensor& dst = users[i];
      at::Tensor host = dst.is_cpu() && dst.is_contiguous()
                            ? dst
                            : at::empty(dst.sizes(), dst.options().device(at::kCPU));
      if (sizes[i] > 0) {
        byteView(host).view({world, sizes[i]}).copy_(gathered.narrow(1, at, sizes[i]));
      }
      if (!sameStorage(host, dst)) dst.copy_(host);
      at += sizes[i];
    }
  });
  work->setOutputs(outputs);
  return work;
}

// Same dtype and a reduction gyre has: one reduce-scatter of the inputs interleaved so
// that rank r's block holds every input's part r (input i's part r is its r-th slice of
// output i's size). Otherwise one _reduce_scatter_base each, under one Work.
c10::intrusive_ptr<c10d::Work> GyreBackend::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  const char* call = "reduce_scatter_tensor_coalesced";
  checkPairs(outputs, inputs, call);
  const at::ScalarType dtype = inputs.front().scalar_type();
  bool fuse = true;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const at::Tensor& in = inputs[i];
    const at::Tensor& out = outputs[i];
    if (in.numel() != out.numel() * size_ || out.scalar_type() != in.scalar_type()) {
      throw std::invalid_argument(std::string("gyre: ") + call + ": input " +
                                  std::to_string(i) + " must hold world size (" +
                                  std::to_string(size_) + ") x output " + std::to_string(i) +
                                  "'s " + std::to_string(out.numel()) + " " +
                                  c10::toString(out.scalar_type()) + "; it has " +
                                  std::to_string(in.numel()) + " " +
                                  c10::toString(in.scalar_type()));
    }
    if (in.scalar_type() != dtype) fuse = false;
  }
  std::optional<NativeReduction> native = nativeReduction(dtype, opts.reduceOp.op_);
  if (!native) fuse = false;
  if (!fuse) {
    std::vector<c10::intrusive_ptr<GyreWork>> members;
    for (size_t i = 0; i < inputs.size(); ++i) {
      members.push_back(c10::static_intrusive_pointer_cast<GyreWork>(
          _reduce_scatter_base(outputs[i], inputs[i], opts)));
    }
    auto group = c10::make_intrusive<GyreWork>(
        rank_, c10d::OpType::REDUCE_SCATTER_TENSOR_COALESCED,
        std::string(call) + " of " + std::to_string(inputs.size()) + " tensors", comm_,
        completer_);
    for (auto& m : members) group->addChild(m);
    group->setOutputs(outputs);
    return group;
  }
  std::lock_guard<std::mutex> lock(issue_);
  std::vector<int64_t> counts;
  int64_t total = 0;
  for (const at::Tensor& out : outputs) total += counts.emplace_back(out.numel());
  at::Tensor packed = at::empty({size_, total}, inputs.front().options().device(at::kCPU));
  int64_t at = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (counts[i] > 0) {
      // PREMUL_SUM's factor applied here, as _reduce_scatter_base does.
      at::Tensor in = reductionBuffer(inputs[i], opts.reduceOp);
      packed.narrow(1, at, counts[i]).copy_(in.reshape({size_, counts[i]}));
    }
    at += counts[i];
  }
  at::Tensor out = at::empty({total}, packed.options());
  at::Tensor inFlat = at::isComplexType(dtype) ? at::view_as_real(packed) : packed;
  at::Tensor outFlat = at::isComplexType(dtype) ? at::view_as_real(out) : out;
  const std::string what = std::string(call) + " of " + std::to_string(inputs.size()) +
                           " tensors (" + std::to_string(total) + " " + c10::toString(dtype) +
                           " per rank, " + opName(opts.reduceOp.op_) + ")";
  auto work = newWork(c10d::OpType::REDUCE_SCATTER_TENSOR_COALESCED, what);
  issue(*work, what, [&](gyreComm_t comm, gyreRequest_t* request) {
    return gyreReduceScatterAsync(inFlat.data_ptr(), outFlat.data_ptr(),
                                  total * native->countFactor, native->dtype, native->op, comm,
                                  request);
  });
  work->keepAlive(packed);
  work->keepAlive(out);
  std::vector<at::Tensor> users = outputs;
  work->addFinisher([users, out, counts]() mutable {
    int64_t at = 0;
    for (size_t i = 0; i < users.size(); ++i) {
      if (counts[i] > 0) users[i].copy_(out.narrow(0, at, counts[i]).view(users[i].sizes()));
      at += counts[i];
    }
  });
  work->setOutputs(outputs);
  return work;
}

// The root receives each rank's bytes into that rank's part of the output, in rank
// order (as gather); the others send theirs.
c10::intrusive_ptr<c10d::Work> GyreBackend::gather_into_tensor(at::Tensor& output,
                                                               at::Tensor& input,
                                                               const c10d::GatherOptions& opts) {
  std::lock_guard<std::mutex> lock(issue_);
  at::Tensor in = hostContiguous(input);
  const int root = static_cast<int>(opts.rootRank);
  const std::string what = describe("gather_single", in) + " to root " + std::to_string(root);
  auto work = newWork(c10d::OpType::GATHER, what);
  work->keepAlive(in);
  if (rank_ != root) {
    issue(*work, what, [&](gyreComm_t comm, gyreRequest_t* request) {
      return gyreSendAsync(in.data_ptr(), bytesOf(in), gyreUint8, root, comm, request);
    });
    work->setOutputs({output});
    return work;
  }
  if (output.numel() != in.numel() * size_ || output.scalar_type() != in.scalar_type()) {
    throw std::invalid_argument("gyre: gather_single: the root's output must hold world size (" +
                                std::to_string(size_) + ") x the input's " +
                                std::to_string(in.numel()) + " " +
                                c10::toString(in.scalar_type()) + "; it has " +
                                std::to_string(output.numel()) + " " +
                                c10::toString(output.scalar_type()));
  }
  at::Tensor out = hostContiguous(output);
  work->keepAlive(out);
  const int64_t part = static_cast<int64_t>(bytesOf(in));
  at::Tensor parts = byteView(out).view({size_, part});
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) {
      if (part > 0) parts[r].copy_(byteView(in));
      continue;
    }
    void* dst = parts[r].data_ptr();
    issue(*work, what, [&](gyreComm_t comm, gyreRequest_t* request) {
      return gyreRecvAsync(dst, part, gyreUint8, r, comm, request);
    });
  }
  if (!sameStorage(out, output)) {
    at::Tensor user = output;
    work->addFinisher([user, out]() mutable { user.copy_(out); });
  }
  work->setOutputs({output});
  return work;
}

// gyreCommSplit: every rank of this group calls it (torch's split_group does); the
// members of `ranks` (sorted group ranks) share its smallest as their color, the others
// pass GYRE_SPLIT_NOCOLOR and get no backend.
c10::intrusive_ptr<c10d::Backend> GyreBackend::split(const c10::intrusive_ptr<c10d::Store>& store,
                                                     const std::vector<int>& ranks,
                                                     const c10::intrusive_ptr<Options>& opts) {
  if (store && store == outsideSplitStore_) return nullptr;  // this split, asked again
  auto me = std::find(ranks.begin(), ranks.end(), rank_);
  const bool member = me != ranks.end();
  const int color = member ? *std::min_element(ranks.begin(), ranks.end()) : GYRE_SPLIT_NOCOLOR;
  gyreComm_t sub = nullptr;
  gyreResult_t result;
  {
    std::lock_guard<std::mutex> lock(issue_);
    result = gyreCommSplit(comm_->comm, color, rank_, &sub);
  }
  if (result != gyreSuccess) {
    throw std::runtime_error("gyre backend, rank " + std::to_string(rank_) +
                             ": split_group failed: " + gyreGetLastError(nullptr));
  }
  if (!member) {
    outsideSplitStore_ = store;
    if (sub != nullptr) gyreCommDestroy(sub);
    return nullptr;
  }
  int subRank = -1, subSize = 0;
  gyreCommUserRank(sub, &subRank);
  gyreCommCount(sub, &subSize);
  const auto want = static_cast<int>(me - ranks.begin());
  if (subSize != static_cast<int>(ranks.size()) || subRank != want) {
    gyreCommDestroy(sub);
    throw std::runtime_error(
        "gyre backend, rank " + std::to_string(rank_) + ": split_group: the new group has " +
        std::to_string(subSize) + " ranks with this one as " + std::to_string(subRank) +
        ", not " + std::to_string(ranks.size()) + " with this one as " + std::to_string(want) +
        " (every rank must pass the same split_ranks, disjoint lists of group ranks)");
  }
  // gyre's stall timeout comes with the communicator; opts->timeout bounds the new
  // group's monitored_barrier.
  const std::chrono::milliseconds timeout = opts ? opts->timeout : timeout_;
  return c10::make_intrusive<GyreBackend>(store, sub, timeout);
}

c10::intrusive_ptr<c10d::Backend> GyreBackend::merge(const c10::intrusive_ptr<c10d::Store>&,
                                                     const c10::intrusive_ptr<Options>&,
                                                     const int&, const int&) {
  throw std::invalid_argument(
      "gyre: merging groups (Backend::merge, ProcessGroup.merge_remote_group) is not "
      "supported: create the group over all its ranks with init_process_group or "
      "new_group instead");
}

c10::intrusive_ptr<c10d::Work> GyreBackend::allreduce_sparse(std::vector<at::Tensor>&,
                                                             const c10d::AllreduceOptions&) {
  throw std::invalid_argument(
      "gyre: all_reduce of a sparse tensor (Backend::allreduce_sparse) is not supported: "
      "all-reduce its dense form (tensor.to_dense()), or run sparse all-reduces on a gloo "
      "group (dist.new_group(backend=\"gloo\"))");
}

#endif  // TORCH_VERSION_MAJOR >= 2

}  // namespace gyre_torch
