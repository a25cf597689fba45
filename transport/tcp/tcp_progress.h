// TcpProgress: the thread that finishes sends the sender could not complete inline, and
// reads what receivers send back (control frames: a status, an abort, or EOF).
//
// A TcpSendPipe writes on post(); when the kernel's socket buffer is full, the rest is
// left here. The thread sleeps in poll() on an eventfd, on the sockets of pipes with
// pending bytes (POLLOUT) and on every send socket's return path (POLLIN, which only
// wakes it when a receiver reports something or goes away), so it costs nothing while
// no send is pending (no spinning: the machines run more ranks than cores). One per
// communicator transport.
//
// Threads: wake() from any thread; add() before start of traffic; the destructor joins.
#pragma once

#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

#include "transport/socket.h"

namespace gyre {

class TcpSendPipe;

class TcpProgress {
 public:
  TcpProgress();
  ~TcpProgress();
  TcpProgress(const TcpProgress&) = delete;
  TcpProgress& operator=(const TcpProgress&) = delete;

  void add(TcpSendPipe* pipe);
  void remove(TcpSendPipe* pipe);
  void wake();

 private:
  void run();

  Fd event_;
  std::mutex mu_;
  std::vector<TcpSendPipe*> pipes_;  // under mu_
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace gyre
