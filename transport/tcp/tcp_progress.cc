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
  {
    std::lock_guard<std::mutex> lock(mu_);
    pipes_.push_back(pipe);
  }
  wake();  // the thread sizes its poll set now, at setup, not on the data path
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
  std::vector<TcpSendPipe*> polled;  // polled[i] owns fds[i + 1]
  fds.reserve(16);
  polled.reserve(16);
  while (!stop_.load()) {
    fds.clear();
    polled.clear();
    fds.push_back({event_.get(), POLLIN, 0});
    {
      // Pipes are removed under mu_, so they stay alive while we use them here.
      std::lock_guard<std::mutex> lock(mu_);
      // Room for every pipe now, so that the data path never allocates later (pipes are
      // added at setup).
      fds.reserve(pipes_.size() + 1);
      polled.reserve(pipes_.size());
      for (TcpSendPipe* p : pipes_) {
        short events = 0;
        if (p->hasPending() && p->writePending()) events |= POLLOUT;
        if (p->watchesReplies()) events |= POLLIN;
        if (events) {
          fds.push_back({p->fd(), events, 0});
          polled.push_back(p);
        }
      }
    }
    // With nothing pending this sleeps until wake() or a reply; otherwise until a socket
    // drains. The 1 s cap only bounds how long a missed wake-up could delay a send.
    ::poll(fds.data(), fds.size(), 1000);
    if (fds[0].revents & POLLIN) {
      uint64_t v;
      ssize_t ignored = ::read(event_.get(), &v, sizeof(v));
      (void)ignored;
    }
    bool replies = false;
    for (size_t i = 1; i < fds.size(); ++i) {
      replies |= (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) != 0;
    }
    if (!replies) continue;
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 1; i < fds.size(); ++i) {
      if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      TcpSendPipe* p = polled[i - 1];
      // Still registered (a pipe removed since the poll is gone, and must not be touched).
      if (std::find(pipes_.begin(), pipes_.end(), p) != pipes_.end()) p->readReplies();
    }
  }
}

}  // namespace gyre
