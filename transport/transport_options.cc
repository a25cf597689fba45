#include "transport/transport_options.h"

namespace gyre {

const char* transportName(TransportKind kind) {
  switch (kind) {
    case TransportKind::kAuto: return "auto";
    case TransportKind::kTcp: return "tcp";
    case TransportKind::kShm: return "shm";
    case TransportKind::kRdma: return "rdma";
  }
  return "unknown";
}

}  // namespace gyre
