// GyreBackend: torch.distributed's backend interface (c10d::ProcessGroup on torch 1.13,
// c10d::Backend on 2.x) over one gyre communicator, through gyre's C API only, so that
// gyre's C++20 build and torch's headers and ABI never meet.
//
// Contract:
// - Made by the creator torch calls for init_process_group / new_group with the group's
//   store (a PrefixStore): gyre bootstraps through it (gyreCommInitWithStore), never
//   through MASTER_PORT; every group gets its own communicator. The group's timeout
//   becomes the communicator's (gyre's stall timeout, for every operation).
// - Every collective issues gyre's async call and returns a GyreWork at once; operations
//   run one at a time in issue order on gyre's worker thread. Tensors gyre cannot use in
//   place (non-contiguous, on another device, complex, bool, PREMUL_SUM's scaled input,
//   lists) are staged in a contiguous host copy and copied back when the Work finishes.
// - CUDA tensors, where the device path is built (GYRE_TORCH_DEVICE_PATH): the
//   collectives of gyre_backend_device.cpp run on the device, enqueued on the tensors'
//   current stream (device_work.h), through a device communicator the group makes on its
//   first CUDA collective (collective, as NCCL's lazy init), from a second gyre
//   communicator bootstrapped through the group's store under its own prefix. send/recv
//   use one per pair of ranks, made on the pair's first CUDA send/recv. CPU tensors stay
//   on the host communicator; the calls not mapped there are staged as above.
// - Reductions gyre does not have (BAND, BOR, BXOR, and dtypes without a gyre type such
//   as int16) run as an all-gather plus the same local reduction on every rank: exact
//   and identical everywhere, at world-size times the memory.
// - send/recv: one message per call, matched in order between two ranks; the tag
//   travels with it and a recv whose tag differs fails naming both (gyre does not
//   reorder by tag). recvAnysource is not supported (clear error).
// - Errors at issue (wrong arguments) throw at once; failures while running surface in
//   Work::wait(), naming this rank, the torch call and gyre's message (peer, collective).
// Thread safety: calls may come from several threads; issuing is serialized.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "device_work.h"
#include "gyre_work.h"
#include "torch_compat.h"

namespace gyre_torch {

class GyreBackend : public BackendBase {
 public:
  // Collective over the group: returns once every rank's gyre communicator is connected.
  GyreBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
              std::chrono::milliseconds timeout, const std::string& routeHost);
  // Over a communicator made already (shrink's): takes it.
  // storePrefix: where in `store` its device communicators bootstrap (the parent's plus
  // a part of its own: a shrunk backend shares its parent's store).
  GyreBackend(const c10::intrusive_ptr<c10d::Store>& store, gyreComm_t comm,
              std::chrono::milliseconds timeout, std::string storePrefix = "gyre_cuda/");
  ~GyreBackend() override;

  // The rank the first failure named as its cause, or -1 (gyreCommGetFailedRank).
  int failedRank() const;
  // The last failure gyre recorded on this group's communicator, "" when none
  // (gyreGetLastError): a failed operation, an abort, a revoke. torchft's errored().
  std::string lastError() const;
  // Ends every pending and later operation of the group at once and tells the other
  // ranks (gyreCommAbort); returns without waiting for anyone. Any thread, idempotent.
  void abortNow();
#if TORCH_VERSION_MAJOR >= 2
  // torch's ProcessGroup.abort() (torchft aborts a group this way): abortNow().
  void abort() override { abortNow(); }
#endif
#if GYRE_TORCH_HAS_SHRINK
  // torch.distributed.shrink_group: gyreCommShrink over this group's communicator; the
  // survivors' new backend (SHRINK_ABORT revokes this one first).
  bool supportsShrinking() const override { return true; }
  c10::intrusive_ptr<c10d::Backend> shrink(const std::vector<int64_t>& ranksToExclude,
                                           int shrinkFlags,
                                           const c10::intrusive_ptr<Options>& optsOverride) override;
#endif

  const std::string getBackendName() const override { return "gyre"; }

  // Coalescing (torch.distributed._coalescing_manager with a device, batch_isend_irecv):
  // collectives issued between startCoalescing and endCoalescing run as issued; their
  // Works become members of the one Work endCoalescing returns (it finishes when they
  // all have, and fails with the first failure). send/recv in between are held back and
  // run when the batch ends, each send paired with a receive in one gyreSendRecv, so
  // that the order of sends and receives in the batch cannot deadlock (docs/pytorch.md,
  // "Backend methods").
#if TORCH_VERSION_MAJOR >= 2
  bool supportsCoalescing() const override { return true; }
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;
  c10::intrusive_ptr<Options> getBackendOptions() override;
  // dist.split_group: gyreCommSplit over this group's communicator (collective over every
  // rank of this group; the ranks outside `ranks` get nullptr).
  bool supportsSplitting() const override { return true; }
  c10::intrusive_ptr<c10d::Backend> split(const c10::intrusive_ptr<c10d::Store>& store,
                                          const std::vector<int>& ranks,
                                          const c10::intrusive_ptr<Options>& opts) override;
  // ProcessGroup.merge_remote_group: not supported (a clear error).
  c10::intrusive_ptr<c10d::Backend> merge(const c10::intrusive_ptr<c10d::Store>& store,
                                          const c10::intrusive_ptr<Options>& opts,
                                          const int& rank, const int& size) override;
  // Several all_gather_into_tensor / reduce_scatter_tensor as one gyre operation when
  // they share a dtype (and reduction), else one gyre operation each under one Work.
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  // dist.gather_single / gather_into_tensor: the root receives every rank's tensor into
  // its part of one output.
  c10::intrusive_ptr<c10d::Work> gather_into_tensor(at::Tensor& output, at::Tensor& input,
                                                    const c10d::GatherOptions& opts) override;
  // Sparse all_reduce: not supported (a clear error naming the dense alternative).
  c10::intrusive_ptr<c10d::Work> allreduce_sparse(std::vector<at::Tensor>& tensors,
                                                  const c10d::AllreduceOptions& opts) override;
#else
  void startCoalescing() override;
  void endCoalescing(std::vector<c10::intrusive_ptr<c10d::Work>>& reqs) override;
#endif

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  // Deprecated in torch, but distributed_test.py and dist.all_gather_coalesced use it:
  // one all-gather of every input's bytes back to back, split into the output lists.
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputLists, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& outputSplits,
                                               std::vector<int64_t>& inputSplits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dstRank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int srcRank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors,
                                               int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) override;
  void setSequenceNumberForGroup() override {}
  uint64_t getSequenceNumberForGroup() override { return sequence_; }

 private:
  friend struct Issuer;
  c10::intrusive_ptr<GyreWork> newWork(c10d::OpType type, const std::string& what);
  // Issues one gyre call (a lambda returning its result) into work, named in the flight
  // recorder by `what`'s first word (torch's name for the call); throws on failure.
  void issue(GyreWork& work, const std::string& what,
             const std::function<gyreResult_t(gyreComm_t, gyreRequest_t*)>& call);
  // The all-gather plus local reduction for reductions gyre lacks; returns the Work
  // whose finisher writes the reduced tensor through `deliver`.
  c10::intrusive_ptr<GyreWork> reduceByAllGather(
      c10d::OpType type, const std::string& what, const at::Tensor& input,
      const c10d::ReduceOp& op, std::function<void(const at::Tensor&)> deliver);
  // gyre's alltoallv of two contiguous host byte buffers (counts in bytes, packed in
  // rank order), kept alive by the Work.
  c10::intrusive_ptr<GyreWork> allToAllBytes(c10d::OpType type, const std::string& what,
                                             const at::Tensor& send, std::vector<size_t> sendCounts,
                                             const at::Tensor& recv,
                                             std::vector<size_t> recvCounts);

#if GYRE_TORCH_DEVICE_PATH
  // With issue_ held: whether `t` runs on the device path (a CUDA tensor outside a
  // coalescing batch, which stages its members through the host).
  bool onDevice(const at::Tensor& t) const { return t.is_cuda() && !coalescing_; }
  // With issue_ held: the group's device communicator, made on first use (collective)
  // on t's device; throws when t is on another device than the one it was made on.
  std::shared_ptr<DeviceComm> groupDevice(const at::Tensor& t, const std::string& what);
  // The device communicator of this rank and `peer` (send/recv), made on first use.
  std::shared_ptr<DeviceComm> pairDevice(const at::Tensor& t, int peer, const std::string& what);
  // A device communicator over a new host communicator of `size` ranks bootstrapped
  // through the store under storePrefix_ + part.
  std::shared_ptr<DeviceComm> makeDevice(const std::string& part, int size, int rank,
                                         const at::Tensor& t, const std::string& name,
                                         const std::string& what);
  // The collectives on the device (gyre_backend_device.cpp), with issue_ held.
  // root < 0: all_reduce.
  c10::intrusive_ptr<c10d::Work> deviceReduce(at::Tensor& tensor, const c10d::ReduceOp& op,
                                              int root);
  c10::intrusive_ptr<c10d::Work> deviceBroadcast(at::Tensor& tensor, int root);
  c10::intrusive_ptr<c10d::Work> deviceAllgather(std::vector<at::Tensor>& outputs,
                                                 const at::Tensor& input);
  c10::intrusive_ptr<c10d::Work> deviceAllgatherBase(at::Tensor& output, const at::Tensor& input);
  c10::intrusive_ptr<c10d::Work> deviceReduceScatter(at::Tensor& output, const at::Tensor& input,
                                                     const c10d::ReduceOp& op,
                                                     c10d::OpType type);
  c10::intrusive_ptr<c10d::Work> deviceAlltoall(at::Tensor& output, const at::Tensor& input,
                                                const std::vector<size_t>& sendCounts,
                                                const std::vector<size_t>& recvCounts);
  c10::intrusive_ptr<c10d::Work> deviceSendRecv(at::Tensor& tensor, int peer, bool send, int tag);
  c10::intrusive_ptr<c10d::Work> deviceBarrier();
  // Throws naming the call when a gyre device call failed at issue.
  void checkDevice(gyreResult_t result, const std::string& what, const DeviceComm& comm) const;

#endif

  // With issue_ held: runs the send/recv held back since startCoalescing.
  void runHeldPointToPoint();
  // A send or recv held back in a batch: its message buffer (the int64 tag, then the
  // payload) and its Work, finished when the batch ends.
  struct HeldMessage {
    bool send;
    int peer;
    at::Tensor message;
    c10::intrusive_ptr<GyreWork> work;
  };
  // With issue_ held: send's / recv's Work, its message issued now or held (coalescing).
  void sendOrHold(const c10::intrusive_ptr<GyreWork>& work, const std::string& what,
                  bool send, int peer, const at::Tensor& message);

  const c10::intrusive_ptr<c10d::Store> store_;
  const std::chrono::milliseconds timeout_;
  std::shared_ptr<CommHandle> comm_;
  std::shared_ptr<Completer> completer_;
  std::mutex issue_;
  uint64_t sequence_ = 0;  // operations issued (torch's sequence number)
  uint64_t monitoredBarriers_ = 0;
  // Between startCoalescing and endCoalescing: the Works issued (in order) and the
  // send/recv held back.
  bool coalescing_ = false;
  std::vector<c10::intrusive_ptr<GyreWork>> coalesced_;
  std::vector<HeldMessage> held_;
#if TORCH_VERSION_MAJOR >= 2
  // torch's splitGroup calls split once per device type the group serves (gyre's: cpu
  // and cuda) with the same store until one returns a backend: a rank outside the new
  // group would call gyreCommSplit again, alone. The store of its last such call.
  c10::intrusive_ptr<c10d::Store> outsideSplitStore_;
#endif
  // Last, after the members above: torch's shrink_group registers a shrunk backend as
  // GLOO, and DDP's logger then reads it as a ProcessGroupGloo (its thread count), so the
  // layout of the members above is left as it was.
  std::string routeHost_;  // the host communicators' route host ("": none)
  std::string storePrefix_ = "gyre_cuda/";
  uint64_t shrinks_ = 0;  // backends shrunk from this one (their store prefixes)
#if GYRE_TORCH_DEVICE_PATH
  std::shared_ptr<DeviceComm> device_;  // the group's, once a CUDA collective ran
  std::map<int, std::shared_ptr<DeviceComm>> pairs_;  // by peer
  // Held while device_ or pairs_ change (with issue_) and by abortNow (without it).
  std::mutex deviceMu_;
#endif
};

}  // namespace gyre_torch
