// Loopback ports for the tests that hand a port to a program or a store on its command
// line or in its environment.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

namespace gyre::testing {

// `count` distinct loopback ports the kernel reported free a moment ago (all bound at
// once, then closed): for programs given a port on their command line. Never a random
// pick: another test's listener on it makes a launch wait for a store that is not there.
inline std::vector<uint16_t> freePorts(int count) {
  std::vector<int> fds;
  std::vector<uint16_t> ports;
  for (int i = 0; i < count; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
    fds.push_back(fd);
    ports.push_back(ntohs(addr.sin_port));
  }
  for (int fd : fds) ::close(fd);
  return ports;
}
inline uint16_t freePort() { return freePorts(1)[0]; }

}  // namespace gyre::testing
