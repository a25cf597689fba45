// PeerProcess: whether the process at the other end of an shm pipe still runs.
//
// pidfd_open(2) (Linux 5.3) names the process itself, so pid reuse cannot fool it, and
// poll() says POLLIN once it has exited (zombie or reaped). Without pidfds: kill(pid, 0),
// which succeeds on a zombie, so /proc/<pid>/stat's state field is read as well. Once
// gone, always gone. Any thread (a pair's two pipes share one); owns its pidfd.
#pragma once

#include <sys/types.h>

#include <atomic>

namespace gyre {

class PeerProcess {
 public:
  explicit PeerProcess(pid_t pid);
  ~PeerProcess();
  PeerProcess(const PeerProcess&) = delete;
  PeerProcess& operator=(const PeerProcess&) = delete;

  bool gone();

 private:
  bool pidfdSaysGone() const;
  bool fallbackSaysGone() const;

  pid_t pid_;
  int pidfd_ = -1;
  std::atomic<bool> gone_{false};
};

}  // namespace gyre
