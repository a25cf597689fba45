// dataSockets(): this process's connected IPv4 TCP sockets other than its connection to
// the bootstrap store (whose own or peer port is `storePort`): a rank's pipe connections,
// for the tests that inspect or break them.
#pragma once

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <vector>

namespace gyre::testing {

inline std::vector<int> dataSockets(uint16_t storePort) {
  std::vector<int> fds;
  DIR* d = ::opendir("/proc/self/fd");
  if (!d) return fds;
  while (dirent* e = ::readdir(d)) {
    const int fd = std::atoi(e->d_name);
    struct stat st;
    if (e->d_name[0] == '.' || ::fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    int type = 0;
    socklen_t len = sizeof(type);
    if (::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM) continue;
    sockaddr_in self{}, peer{};
    socklen_t ls = sizeof(self), lp = sizeof(peer);
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&self), &ls) != 0 ||
        self.sin_family != AF_INET ||
        ::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &lp) != 0) {
      continue;
    }
    if (ntohs(self.sin_port) == storePort || ntohs(peer.sin_port) == storePort) continue;
    fds.push_back(fd);
  }
  ::closedir(d);
  std::sort(fds.begin(), fds.end());
  return fds;
}

}  // namespace gyre::testing
