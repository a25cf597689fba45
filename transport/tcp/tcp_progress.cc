#include "transport/tcp/tcp_progress.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>

#include "base/error.h"
#include "transport/tcp/tcp_pipe.h"

namespace gyre {

TcpProgress::TcpProgress() : event_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  if (!event_) failSystem(errno, "eventfd");
  thread_ = std::thread([this] { run(); });
}

TcpProgress::~TcpProgress() {
  stop_.store(true);
  wake();
  thread_.join();
}

void TcpProgress::add(TcpSendPipe* pipe) {
  std::lock_guard<std::mutex> lock(mu_);
  pipes_.push_back(pipe);
}

void TcpProgress::remove(TcpSendPipe* pipe) {
  std::lock_guard<std::mutex> lock(mu_);
  pipes_.erase(std::remove(pipes_.begin(), pipes_.end(), pipe), pipes_.end());
}

void TcpProgress::wake() {
  uint64_t one = 1;
  ssize_t ignored = ::write(event_.get(), &one, sizeof(one));
  (void)ignored;
}

void TcpProgress::run() {
  std::vector<pollfd> fds;
  while (!stop_.load()) {
    fds.clear();
    fds.push_back({event_.get(), POLLIN, 0});
    {
      // Pipes are removed under mu_, so they stay alive while we use them here.
      std::lock_guard<std::mutex> lock(mu_);
      for (TcpSendPipe* p : pipes_) {
        if (p->hasPending() && p->writePending()) fds.push_back({p->fd(), POLLOUT, 0});
      }
    }
    // With nothing pending this sleeps until wake(); otherwise until a socket drains.
    // The 1 s cap only bounds how long a missed wake-up could delay a send.
    ::poll(fds.data(), fds.size(), 1000);
    if (fds[0].revents & POLLIN) {
      uint64_t v;
      ssize_t ignored = ::read(event_.get(), &v, sizeof(v));
      (void)ignored;
    }
  }
}

}  // namespace gyre
