// The body of the two stream fuzzers (fuzz_tcp_stream, fuzz_sealed_stream): a
// TcpRecvPipe reading an arbitrary byte stream through a socketpair, driven with wait(),
// release() and waitInto() until it throws, as the primitives would. The input's first
// byte steers the reader (which calls, which lengths); the rest is the stream, then EOF.
//
// Properties checked (abort on violation; with ASan, also no access outside the slots or
// the destination): every slice fits its slot, a direct receive is placed only when it
// has exactly the expected length, nothing is written past the destination. With keys
// (GYRE_ENCRYPT's sealed frames): no slice is ever delivered, since the input cannot
// carry a tag under a key it does not hold.
#pragma once

#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "base/error.h"
#include "transport/tcp/tcp_pipe.h"

namespace gyre::fuzz {

inline int driveRecvPipe(const uint8_t* data, size_t size, const ConnectionKeys* keys) {
  constexpr size_t kSlot = 256;
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) return 0;
  int bufBytes = 1 << 20;
  ::setsockopt(fds[1], SOL_SOCKET, SO_SNDBUF, &bufBytes, sizeof(bufBytes));
  const uint8_t steer = size > 0 ? data[0] : 0;
  const uint8_t* stream = size > 0 ? data + 1 : data;
  const size_t streamBytes = size > 0 ? size - 1 : 0;
  if (streamBytes && ::write(fds[1], stream, streamBytes) != static_cast<ssize_t>(streamBytes)) {
    ::close(fds[0]);
    ::close(fds[1]);
    return 0;
  }
  ::close(fds[1]);  // EOF after the input
  TcpRecvPipe rx(Fd(fds[0]), 1, 2, kSlot, 4, keys);
  WaitContext ctx;
  ctx.deadline = Clock::now() + std::chrono::seconds(2);
  ctx.spin = std::chrono::microseconds(0);
  std::vector<std::byte> dst(kSlot + 16, std::byte{0x5a});
  try {
    for (unsigned i = 0; i < 1000; ++i) {
      if ((steer >> (i % 8)) & 1) {
        const size_t want = (steer * 31u + i * 7u) % (kSlot + 1);
        Slice s = rx.waitInto(dst.data(), want, Tag{}, ctx);
        if (keys != nullptr) std::abort();  // a slice got through without a valid tag
        if (s.bytes > kSlot) std::abort();
        if (s.data == dst.data() && s.bytes != want) std::abort();
        for (size_t k = kSlot; k < dst.size(); ++k) {
          if (dst[k] != std::byte{0x5a}) std::abort();  // wrote past the destination
        }
        if (s.data != dst.data()) rx.release();
      } else {
        Slice s = rx.wait(ctx);
        if (keys != nullptr) std::abort();  // a slice got through without a valid tag
        if (s.bytes > kSlot) std::abort();
        volatile std::byte sink{};
        for (size_t k = 0; k < s.bytes; ++k) sink = s.data[k];  // every byte is readable
        (void)sink;
        rx.release();
      }
    }
  } catch (const Error&) {
    // Refusing the stream is the expected outcome for most inputs.
  }
  return 0;
}

}  // namespace gyre::fuzz
