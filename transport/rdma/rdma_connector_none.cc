// RdmaConnector in a build without libibverbs: never available (see rdma_connector.h).
#include "base/error.h"
#include "transport/rdma/rdma_connector.h"

namespace gyre {

struct RdmaConnector::Impl {};

RdmaConnector::RdmaConnector(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RdmaConnector::~RdmaConnector() = default;

std::unique_ptr<RdmaConnector> RdmaConnector::open(const TransportOptions&, std::string* whyNot) {
  *whyNot = "gyre was built without libibverbs (install libibverbs-dev and rebuild)";
  return nullptr;
}

std::string RdmaConnector::description() const { return "none"; }
std::string RdmaConnector::addSend(int, size_t, size_t, int) { fail(ErrorCode::kInternal, "no rdma"); }
std::string RdmaConnector::addRecv(int, size_t, size_t, int) { fail(ErrorCode::kInternal, "no rdma"); }
std::unique_ptr<SendPipe> RdmaConnector::connectSend(int, const std::string&, Fd) {
  fail(ErrorCode::kInternal, "no rdma");
}
std::unique_ptr<RecvPipe> RdmaConnector::connectRecv(int, const std::string&, Fd) {
  fail(ErrorCode::kInternal, "no rdma");
}

}  // namespace gyre
