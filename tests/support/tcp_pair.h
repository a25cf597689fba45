// tcpPair(): a connected pair of loopback TCP sockets (connecting end, accepted end), for
// the tests that drive tcp pipes over a real connection; each side bounded to 5 s.
#pragma once

#include <chrono>
#include <utility>

#include "transport/socket.h"

namespace gyre::testing {

inline std::pair<Fd, Fd> tcpPair() {
  using namespace std::chrono_literals;
  Fd listener = listenOn(SocketAddress::resolve("127.0.0.1", 0));
  Fd a = connectWithRetry(SocketAddress::ofSocket(listener.get()), Clock::now() + 5s);
  Fd b = acceptUntil(listener.get(), Clock::now() + 5s);
  return {std::move(a), std::move(b)};
}

}  // namespace gyre::testing
