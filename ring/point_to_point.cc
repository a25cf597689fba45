#include "ring/point_to_point.h"

#include "base/error.h"

namespace gyre {

void sendTo(const PrimitiveContext&, const PeerPipes&, const CollectiveCall&, int, const void*) {
  fail(ErrorCode::kInternal, "send is not implemented yet");
}

void recvFrom(const PrimitiveContext&, const PeerPipes&, const CollectiveCall&, int, void*) {
  fail(ErrorCode::kInternal, "recv is not implemented yet");
}

void sendRecv(const PrimitiveContext&, const PeerPipes&, const CollectiveCall&, int, const void*,
              const CollectiveCall&, int, void*) {
  fail(ErrorCode::kInternal, "sendRecv is not implemented yet");
}

}  // namespace gyre
