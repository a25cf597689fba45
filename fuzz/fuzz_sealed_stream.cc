// libFuzzer target: a TcpRecvPipe with GYRE_ENCRYPT's keys reading an arbitrary byte
// stream (what a hostile sender or a tamperer on the path can put on a sealed data
// connection): frames of any size, control frames, truncation, tags that do not check.
// Beyond fuzz_tcp_stream's properties: no slice is ever delivered, since the fuzzer
// cannot make a tag under a key it does not hold (a delivered slice aborts). The input goes through a socketpair; the pipe is driven with wait(),
// release() and waitInto() until it throws, as the primitives would. Properties (with
// ASan): no access outside the slots or the destination, every slice fits its slot, a
// direct receive is placed only when it has exactly the expected length.
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "base/error.h"
#include "transport/tcp/tcp_pipe.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  constexpr size_t kSlot = 256;
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) return 0;
  int bufBytes = 1 << 20;
  ::setsockopt(fds[1], SOL_SOCKET, SO_SNDBUF, &bufBytes, sizeof(bufBytes));
  // The first byte steers the reader (which calls, which lengths); the rest is the stream.
  const uint8_t steer = size > 0 ? data[0] : 0;
  const uint8_t* stream = size > 0 ? data + 1 : data;
  const size_t streamBytes = size > 0 ? size - 1 : 0;
  if (streamBytes && ::write(fds[1], stream, streamBytes) != static_cast<ssize_t>(streamBytes)) {
    ::close(fds[0]);
    ::close(fds[1]);
    return 0;
  }
  ::close(fds[1]);  // EOF after the input
  static const gyre::ConnectionKeys keys = [] {
    gyre::ConnectionKeys k;
    k.connectorToAcceptor.fill(7);
    k.acceptorToConnector.fill(9);
    return k;
  }();
  gyre::TcpRecvPipe rx(gyre::Fd(fds[0]), 1, 2, kSlot, 4, &keys);
  gyre::WaitContext ctx;
  ctx.deadline = gyre::Clock::now() + std::chrono::seconds(2);
  ctx.spin = std::chrono::microseconds(0);
  std::vector<std::byte> dst(kSlot + 16, std::byte{0x5a});
  try {
    for (unsigned i = 0; i < 1000; ++i) {
      if ((steer >> (i % 8)) & 1) {
        const size_t want = (steer * 31u + i * 7u) % (kSlot + 1);
        gyre::Slice s = rx.waitInto(dst.data(), want, gyre::Tag{}, ctx);
        std::abort();  // a slice got through without a valid tag
        if (s.bytes > kSlot) std::abort();
        if (s.data == dst.data() && s.bytes != want) std::abort();
        for (size_t k = kSlot; k < dst.size(); ++k) {
          if (dst[k] != std::byte{0x5a}) std::abort();  // wrote past the destination
        }
        if (s.data != dst.data()) rx.release();
      } else {
        gyre::Slice s = rx.wait(ctx);
        std::abort();  // a slice got through without a valid tag
        if (s.bytes > kSlot) std::abort();
        volatile std::byte sink{};
        for (size_t k = 0; k < s.bytes; ++k) sink = s.data[k];  // every byte is readable
        (void)sink;
        rx.release();
      }
    }
  } catch (const gyre::Error&) {
    // Refusing the stream is the expected outcome for most inputs.
  }
  return 0;
}
