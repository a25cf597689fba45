// GyreBackend: send/recv. Each message is [int64 tag][payload bytes] in one gyre send,
// so a receiver checks the tag it asked for: gyre delivers the messages between two ranks
// in the order they were sent and cannot pick one by tag, so a different tag is an error
// naming both instead of silently wrong data.
#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "gyre_backend.h"
#include "staging.h"

namespace gyre_torch {

namespace {
constexpr size_t kHeaderBytes = sizeof(int64_t);
}  // namespace

c10::intrusive_ptr<c10d::Work> GyreBackend::send(std::vector<at::Tensor>& tensors, int dstRank,
                                                 int tag) {
  std::lock_guard<std::mutex> lock(issue_);
#if GYRE_TORCH_DEVICE_PATH
  if (onDevice(single(tensors, "send"))) {
    return deviceSendRecv(tensors.front(), dstRank, /*send=*/true, tag);
  }
#endif
  at::Tensor payload = hostContiguous(single(tensors, "send"));
  const std::string what = describe("send", payload) + " to rank " + std::to_string(dstRank) +
                           " (tag " + std::to_string(tag) + ")";
  at::Tensor message = at::empty({static_cast<int64_t>(kHeaderBytes + bytesOf(payload))},
                                 at::TensorOptions().dtype(at::kByte));
  int64_t header = tag;
  std::memcpy(message.data_ptr(), &header, kHeaderBytes);
  if (bytesOf(payload) > 0) {
    std::memcpy(static_cast<char*>(message.data_ptr()) + kHeaderBytes, payload.data_ptr(),
                bytesOf(payload));
  }
  auto work = newWork(c10d::OpType::SEND, what);
  work->setOutputs(tensors);
  sendOrHold(work, what, /*send=*/true, dstRank, message);
  return work;
}

c10::intrusive_ptr<c10d::Work> GyreBackend::recv(std::vector<at::Tensor>& tensors, int srcRank,
                                                 int tag) {
  std::lock_guard<std::mutex> lock(issue_);
  at::Tensor tensor = single(tensors, "recv");
#if GYRE_TORCH_DEVICE_PATH
  if (onDevice(tensor)) return deviceSendRecv(tensor, srcRank, /*send=*/false, tag);
#endif
  const std::string what = describe("recv", tensor) + " from rank " + std::to_string(srcRank) +
                           " (tag " + std::to_string(tag) + ")";
  at::Tensor message = at::empty({static_cast<int64_t>(kHeaderBytes + bytesOf(tensor))},
                                 at::TensorOptions().dtype(at::kByte));
  auto work = newWork(c10d::OpType::RECV, what);
  work->addFinisher([tensor, message, tag, srcRank]() mutable {
    int64_t sent = 0;
    std::memcpy(&sent, message.data_ptr(), kHeaderBytes);
    if (sent != tag) {
      throw std::runtime_error(
          "the next message from rank " + std::to_string(srcRank) + " was sent with tag " +
          std::to_string(sent) + ", not " + std::to_string(tag) +
          " (gyre delivers messages between two ranks in the order they were sent; "
          "receive them in that order)");
    }
    at::Tensor staged = hostContiguous(tensor);
    if (staged.numel() > 0) {
      std::memcpy(staged.data_ptr(), static_cast<char*>(message.data_ptr()) + kHeaderBytes,
                  bytesOf(staged));
    }
    if (!sameStorage(staged, tensor)) tensor.copy_(staged);
  });
  work->setOutputs({tensor});
  sendOrHold(work, what, /*send=*/false, srcRank, message);
  return work;
}

void GyreBackend::sendOrHold(const c10::intrusive_ptr<GyreWork>& work, const std::string& what,
                             bool send, int peer, const at::Tensor& message) {
  work->keepAlive(message);
  if (coalescing_) {
    work->defer();
    held_.push_back(HeldMessage{send, peer, message, work});
    return;
  }
  issue(*work, what, [&](gyreComm_t comm, gyreRequest_t* request) {
    return send ? gyreSendAsync(message.data_ptr(), message.numel(), gyreUint8, peer, comm,
                                request)
                : gyreRecvAsync(message.data_ptr(), message.numel(), gyreUint8, peer, comm,
                                request);
  });
}

// The batch's i-th send and i-th receive run together in one gyreSendRecv (gyre runs one
// operation at a time, so a receive issued before a send would wait for a peer that is
// itself waiting to receive); the sends or receives left over run one by one after.
// Between two ranks, messages keep their order in each direction.
void GyreBackend::runHeldPointToPoint() {
  std::vector<HeldMessage> held = std::move(held_);
  held_.clear();
  std::vector<HeldMessage*> sends, recvs;
  for (HeldMessage& m : held) (m.send ? sends : recvs).push_back(&m);
  gyreResult_t failed = gyreSuccess;
  std::string why;
  auto fail = [&](gyreResult_t result, const std::string& message) {
    if (failed == gyreSuccess) {
      failed = result;
      why = message;
    }
  };
  const size_t pairs = std::min(sends.size(), recvs.size());
  for (size_t i = 0; i < pairs; ++i) {
    HeldMessage& s = *sends[i];
    HeldMessage& r = *recvs[i];
    if (failed == gyreSuccess) {
      gyreResult_t result = gyreCommNameNextCall(comm_->comm, "batch_isend_irecv");
      if (result == gyreSuccess) {
        result = gyreSendRecv(s.message.data_ptr(), s.message.numel(), s.peer,
                              r.message.data_ptr(), r.message.numel(), r.peer, gyreUint8,
                              comm_->comm);
      }
      if (result != gyreSuccess) {
        fail(result, "batch_isend_irecv: the send to rank " + std::to_string(s.peer) +
                         " with the receive from rank " + std::to_string(r.peer) + ": " +
                         gyreGetLastError(nullptr));
        s.work->finishDeferred(failed, why);
        r.work->finishDeferred(failed, why);
        continue;
      }
    }
    s.work->finishDeferred(failed, failed == gyreSuccess ? "" : "not run: " + why);
    r.work->finishDeferred(failed, failed == gyreSuccess ? "" : "not run: " + why);
  }
  auto rest = [&](std::vector<HeldMessage*>& list) {
    for (size_t i = pairs; i < list.size(); ++i) {
      HeldMessage& m = *list[i];
      if (failed != gyreSuccess) {
        m.work->finishDeferred(failed, "not run: " + why);
        continue;
      }
      try {
        issue(*m.work, m.send ? "send" : "recv", [&](gyreComm_t comm, gyreRequest_t* request) {
          return m.send ? gyreSendAsync(m.message.data_ptr(), m.message.numel(), gyreUint8,
                                        m.peer, comm, request)
                        : gyreRecvAsync(m.message.data_ptr(), m.message.numel(), gyreUint8,
                                        m.peer, comm, request);
        });
        m.work->release();
      } catch (const std::exception& e) {
        fail(gyreInternalError, e.what());
        m.work->finishDeferred(failed, why);
      }
    }
  };
  rest(sends);
  rest(recvs);
}

void GyreBackend::startCoalescing() {
  std::lock_guard<std::mutex> lock(issue_);
  // A batch whose end never came (torch raised inside _coalescing_manager): its held
  // send/recv run now, as every rank's do, and a new batch begins.
  if (coalescing_) runHeldPointToPoint();
  coalesced_.clear();
  coalescing_ = true;
}

#if TORCH_VERSION_MAJOR >= 2
c10::intrusive_ptr<c10d::Work> GyreBackend::endCoalescing() {
  std::lock_guard<std::mutex> lock(issue_);
  if (!coalescing_) {
    throw std::invalid_argument("gyre: endCoalescing without startCoalescing");
  }
  runHeldPointToPoint();
  coalescing_ = false;
  std::vector<c10::intrusive_ptr<GyreWork>> members = std::move(coalesced_);
  coalesced_.clear();
  auto group = c10::make_intrusive<GyreWork>(
      rank_, c10d::OpType::COALESCED,
      "coalesced group of " + std::to_string(members.size()) + " operations", comm_, completer_);
  std::vector<at::Tensor> outputs;
  for (auto& member : members) {
    for (const at::Tensor& t : member->result()) outputs.push_back(t);
    group->addChild(member);
  }
  group->setOutputs(outputs);
  return group;
}
#else
void GyreBackend::endCoalescing(std::vector<c10::intrusive_ptr<c10d::Work>>& /*reqs: ours*/) {
  std::lock_guard<std::mutex> lock(issue_);
  if (!coalescing_) return;
  runHeldPointToPoint();
  coalescing_ = false;
  coalesced_.clear();
}
#endif

c10::intrusive_ptr<c10d::Work> GyreBackend::recvAnysource(std::vector<at::Tensor>&, int) {
  throw std::invalid_argument(
      "gyre: recv without a source rank (recvAnysource) is not supported: pass src=");
}

}  // namespace gyre_torch
