// ForkedChildren: the process plumbing under the multi-process test harnesses
// (rank_harness.h's RankGroup, join_harness.h's ProcessRanks). Child i is forked with a
// pipe to the parent for its report and its stderr (the library's log) redirected to a
// file the parent reads back. The parent reads what each child wrote until EOF or a
// deadline, then reaps it, SIGKILLing a child still running at the deadline (hung).
// The destructor kills and reaps anything still running and removes the log files.
//
// What a child reports, and how it is parsed, is the harness's business: the child's
// function writes its report with writeAll() and returns; the child then exits.
// Not thread-safe; one object per group of children.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "base/error.h"
#include "transport/socket.h"  // Clock

namespace gyre::testing {

class ForkedChildren {
 public:
  struct Child {
    pid_t pid = -1;
    int pipe = -1;  // the parent's read end
    bool reaped = false;
    bool eof = false;
    int status = 0;   // from waitpid
    std::string out;  // what the child wrote to its pipe so far
    std::string logPath;
  };

  // logTag names the log files: /tmp/gyre-<logTag>-<pid>-<group>-<i>.log.
  ForkedChildren(int n, std::string logTag) : tag_(std::move(logTag)), children_(n) {
    static int groups = 0;
    group_ = ++groups;
  }
  ~ForkedChildren() {
    for (Child& c : children_) {
      if (c.pid > 0 && !c.reaped) {
        ::kill(c.pid, SIGKILL);
        ::waitpid(c.pid, nullptr, 0);
      }
      if (c.pipe >= 0) ::close(c.pipe);
      if (!c.logPath.empty()) ::unlink(c.logPath.c_str());
    }
  }
  ForkedChildren(const ForkedChildren&) = delete;
  ForkedChildren& operator=(const ForkedChildren&) = delete;

  int size() const { return static_cast<int>(children_.size()); }
  Child& operator[](int i) { return children_[static_cast<size_t>(i)]; }
  pid_t pid(int i) const { return children_[static_cast<size_t>(i)].pid; }

  // Forks child i. In the child: the other children's pipes are closed, stderr goes to
  // the log, `body(out)` runs with the pipe's write end, then the child exits (status 0:
  // what happened is in its report).
  void fork(int i, const std::function<void(int out)>& body) {
    Child& c = (*this)[i];
    c.logPath = fmt::format("/tmp/gyre-{}-{}-{}-{}.log", tag_, ::getpid(), group_, i);
    std::fflush(stdout);
    std::fflush(stderr);
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) failSystem(errno, "pipe2");
    pid_t pid = ::fork();
    if (pid < 0) failSystem(errno, "fork");
    if (pid == 0) {
      ::close(fds[0]);
      for (const Child& other : children_) {
        if (other.pipe >= 0) ::close(other.pipe);
      }
      int logFd = ::open(c.logPath.c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0600);
      if (logFd >= 0) ::dup2(logFd, STDERR_FILENO);
      body(fds[1]);
      std::fflush(stderr);
      ::_exit(0);
    }
    ::close(fds[1]);
    c.pid = pid;
    c.pipe = fds[0];
  }

  // Reads what child i wrote; false at EOF or at the deadline.
  bool readSome(int i, Clock::time_point until) {
    Child& c = (*this)[i];
    if (c.eof) return false;
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
    if (ms <= 0) return false;
    pollfd p{c.pipe, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(std::min<long long>(ms, 100))) <= 0) return true;
    char buf[4096];
    ssize_t n = ::read(c.pipe, buf, sizeof(buf));
    if (n <= 0) {
      c.eof = true;
      return false;
    }
    c.out.append(buf, static_cast<size_t>(n));
    return true;
  }

  // Reads child i to EOF and reaps it, both by `deadline`; a child still running then is
  // SIGKILLed and the result is true (it hung).
  bool finish(int i, Clock::time_point deadline) {
    Child& c = (*this)[i];
    while (readSome(i, deadline)) {
    }
    bool hung = false;
    while (!c.reaped) {
      if (::waitpid(c.pid, &c.status, WNOHANG) == c.pid) break;
      if (Clock::now() >= deadline) {
        hung = true;
        ::kill(c.pid, SIGKILL);
        ::waitpid(c.pid, &c.status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    c.reaped = true;
    return hung;
  }

  // Child i's stderr so far.
  std::string log(int i) {
    std::ifstream in((*this)[i].logPath);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

  static void writeAll(int fd, const std::string& s) {
    size_t done = 0;
    while (done < s.size()) {
      ssize_t w = ::write(fd, s.data() + done, s.size() - done);
      if (w <= 0) return;
      done += static_cast<size_t>(w);
    }
  }

 private:
  std::string tag_;
  int group_ = 0;
  std::vector<Child> children_;
};

}  // namespace gyre::testing
