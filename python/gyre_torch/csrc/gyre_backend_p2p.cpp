// GyreBackend: send/recv. Each message is [int64 tag][payload bytes] in one gyre send,
// so a receiver checks the tag it asked for: gyre delivers the messages between two ranks
// in the order they were sent and cannot pick one by tag, so a different tag is an error
// naming both instead of silently wrong data.
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
  issue(*work, what, [&](gyreComm_t comm, gyreRequest_t* request) {
    return gyreSendAsync(message.data_ptr(), message.numel(), gyreUint8, dstRank, comm, request);
  });
  work->keepAlive(message);
  work->setOutputs(tensors);
  return work;
}

c10::intrusive_ptr<c10d::Work> GyreBackend::recv(std::vector<at::Tensor>& tensors, int srcRank,
                                                 int tag) {
  std::lock_guard<std::mutex> lock(issue_);
  at::Tensor tensor = single(tensors, "recv");
  const std::string what = describe("recv", tensor) + " from rank " + std::to_string(srcRank) +
                           " (tag " + std::to_string(tag) + ")";
  at::Tensor message = at::empty({static_cast<int64_t>(kHeaderBytes + bytesOf(tensor))},
                                 at::TensorOptions().dtype(at::kByte));
  auto work = newWork(c10d::OpType::RECV, what);
  issue(*work, what, [&](gyreComm_t comm, gyreRequest_t* request) {
    return gyreRecvAsync(message.data_ptr(), message.numel(), gyreUint8, srcRank, comm, request);
  });
  work->keepAlive(message);
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
  return work;
}

c10::intrusive_ptr<c10d::Work> GyreBackend::recvAnysource(std::vector<at::Tensor>&, int) {
  throw std::invalid_argument(
      "gyre: recv without a source rank (recvAnysource) is not supported: pass src=");
}

}  // namespace gyre_torch
