// libFuzzer target: a TcpRecvPipe reading an arbitrary byte stream (what a hostile or
// broken sender can put on a data connection): frames of any size, control frames,
// truncation. The harness and its properties: fuzz/recv_pipe_harness.h.
#include <cstddef>
#include <cstdint>

#include "fuzz/recv_pipe_harness.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return gyre::fuzz::driveRecvPipe(data, size, nullptr);
}
