#include "transport/shm/peer_process.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fstream>
#include <string>

namespace gyre {

PeerProcess::PeerProcess(pid_t pid) : pid_(pid) {
#ifdef SYS_pidfd_open
  pidfd_ = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (pidfd_ < 0 && errno == ESRCH) gone_ = true;
#endif
}

PeerProcess::~PeerProcess() {
  if (pidfd_ >= 0) ::close(pidfd_);
}

bool PeerProcess::gone() {
  if (!gone_.load(std::memory_order_relaxed) &&
      (pidfd_ >= 0 ? pidfdSaysGone() : fallbackSaysGone())) {
    gone_.store(true, std::memory_order_relaxed);
  }
  return gone_.load(std::memory_order_relaxed);
}

bool PeerProcess::pidfdSaysGone() const {
  struct pollfd p = {pidfd_, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR)) != 0;
}

bool PeerProcess::fallbackSaysGone() const {
  if (::kill(pid_, 0) != 0 && errno == ESRCH) return true;
  std::ifstream stat("/proc/" + std::to_string(pid_) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;  // no /proc: trust kill()
  // "pid (comm) S ...": comm may hold spaces and parentheses, so use the last ')'.
  size_t close = line.rfind(')');
  if (close == std::string::npos || close + 2 >= line.size()) return false;
  char state = line[close + 2];
  return state == 'Z' || state == 'X' || state == 'x';
}

}  // namespace gyre
