#include "transport/rdma/rdma_connector.h"

#include "base/error.h"
#include "transport/rdma/rdma_pipe.h"

namespace gyre {

struct RdmaConnector::Impl {
  std::shared_ptr<RdmaDevice> device;
  std::map<int, std::unique_ptr<RdmaSendPipe>> sends;
  std::map<int, std::unique_ptr<RdmaRecvPipe>> recvs;
};

RdmaConnector::RdmaConnector(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RdmaConnector::~RdmaConnector() = default;

std::unique_ptr<RdmaConnector> RdmaConnector::open(const TransportOptions& options,
                                                   std::string* whyNot) {
  auto device = RdmaDevice::open(options, whyNot);
  if (!device) return nullptr;
  auto impl = std::make_unique<Impl>();
  impl->device = std::move(device);
  return std::unique_ptr<RdmaConnector>(new RdmaConnector(std::move(impl)));
}

std::string RdmaConnector::description() const { return impl_->device->description(); }

std::string RdmaConnector::addSend(int peer, size_t slots, size_t slotBytes, int worldSize) {
  auto pipe = std::make_unique<RdmaSendPipe>(impl_->device, peer, slots, slotBytes, worldSize);
  std::string e = pipe->endpoint().encode();
  impl_->sends[peer] = std::move(pipe);
  return e;
}

std::string RdmaConnector::addRecv(int peer, size_t slots, size_t slotBytes, int worldSize) {
  auto pipe = std::make_unique<RdmaRecvPipe>(impl_->device, peer, slots, slotBytes, worldSize);
  std::string e = pipe->endpoint().encode();
  impl_->recvs[peer] = std::move(pipe);
  return e;
}

std::unique_ptr<SendPipe> RdmaConnector::connectSend(int peer, const std::string& remote, Fd control) {
  auto it = impl_->sends.find(peer);
  if (it == impl_->sends.end()) fail(ErrorCode::kInternal, "no rdma send pipe to rank {}", peer);
  it->second->connect(remote, std::move(control));
  std::unique_ptr<SendPipe> pipe = std::move(it->second);
  impl_->sends.erase(it);
  return pipe;
}

std::unique_ptr<RecvPipe> RdmaConnector::connectRecv(int peer, const std::string& remote, Fd control) {
  auto it = impl_->recvs.find(peer);
  if (it == impl_->recvs.end()) fail(ErrorCode::kInternal, "no rdma receive pipe from rank {}", peer);
  it->second->connect(remote, std::move(control));
  std::unique_ptr<RecvPipe> pipe = std::move(it->second);
  impl_->recvs.erase(it);
  return pipe;
}

}  // namespace gyre
