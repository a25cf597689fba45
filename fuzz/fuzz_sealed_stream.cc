// libFuzzer target: a TcpRecvPipe with GYRE_ENCRYPT's keys reading an arbitrary byte
// stream (what a hostile sender or a tamperer on the path can put on a sealed data
// connection): frames of any size, control frames, truncation, tags that do not check.
// Beyond fuzz_tcp_stream's properties: no slice is ever delivered (a delivered slice
// aborts). The harness: fuzz/recv_pipe_harness.h.
#include <cstddef>
#include <cstdint>

#include "fuzz/recv_pipe_harness.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const gyre::ConnectionKeys keys = [] {
    gyre::ConnectionKeys k;
    k.connectorToAcceptor.fill(7);
    k.acceptorToConnector.fill(9);
    return k;
  }();
  return gyre::fuzz::driveRecvPipe(data, size, &keys);
}
