// ProcessRanks: n forked processes that each run a body (typically: reach the store,
// create a communicator, run a few checked collectives), for the startup tests that give
// ranks different beliefs (world sizes, ranks, settings, namespaces) or kill them while
// they join. Each child reports through a pipe: OK, or its gyre::Error's code and message,
// with the steady-clock time (CLOCK_MONOTONIC, comparable across processes) it ended; its
// stderr (the library's progress lines and log) goes to a file the parent reads back.
// join() reaps every child by a deadline and SIGKILLs what is left, marking it hung; the
// destructor kills and reaps anything still running.
//
// Also: a free loopback port, the /dev/shm segments of a token, and the checks that the
// tests share (every rank failed within a bound, with these words in its message).
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "base/error.h"
#include "transport/socket.h"

namespace gyre::testing {

struct Outcome {
  int child = -1;
  bool reported = false;
  bool ok = false;
  bool hung = false;
  int code = 0;
  double seconds = 0;  // from start() to the end of its body
  std::string message;
  std::string log;
};

class ProcessRanks {
 public:
  using Body = std::function<void(int child)>;  // throws on failure

  explicit ProcessRanks(int n) : n_(n), kids_(static_cast<size_t>(n)) {}
  ~ProcessRanks() {
    for (Kid& k : kids_) {
      if (k.pid > 0 && !k.reaped) {
        ::kill(k.pid, SIGKILL);
        ::waitpid(k.pid, nullptr, 0);
      }
      if (k.pipe >= 0) ::close(k.pipe);
      if (!k.logPath.empty()) ::unlink(k.logPath.c_str());
    }
  }
  ProcessRanks(const ProcessRanks&) = delete;
  ProcessRanks& operator=(const ProcessRanks&) = delete;

  void start(const Body& body) {
    std::fflush(stdout);
    std::fflush(stderr);
    static int group = 0;
    ++group;
    start_ = Clock::now();
    for (int c = 0; c < n_; ++c) {
      Kid& k = kids_[static_cast<size_t>(c)];
      k.logPath = fmt::format("/tmp/gyre-join-test-{}-{}-{}.log", ::getpid(), group, c);
      int fds[2];
      if (::pipe2(fds, O_CLOEXEC) != 0) failSystem(errno, "pipe2");
      pid_t pid = ::fork();
      if (pid < 0) failSystem(errno, "fork");
      if (pid == 0) {
        ::close(fds[0]);
        runChild(c, fds[1], k.logPath, body);
      }
      ::close(fds[1]);
      k.pid = pid;
      k.pipe = fds[0];
    }
  }

  Clock::time_point started() const { return start_; }
  void kill(int child) { ::kill(kids_[static_cast<size_t>(child)].pid, SIGKILL); }

  std::vector<Outcome> join(double deadlineSeconds) {
    const Clock::time_point deadline =
        start_ + std::chrono::milliseconds(static_cast<long long>(deadlineSeconds * 1000));
    std::vector<Outcome> out(static_cast<size_t>(n_));
    for (int c = 0; c < n_; ++c) {
      Kid& k = kids_[static_cast<size_t>(c)];
      Outcome& o = out[static_cast<size_t>(c)];
      o.child = c;
      while (readSome(k, deadline)) {
      }
      if (!k.reaped) {
        for (;;) {
          if (::waitpid(k.pid, nullptr, WNOHANG) == k.pid) break;
          if (Clock::now() >= deadline) {
            o.hung = true;
            ::kill(k.pid, SIGKILL);
            ::waitpid(k.pid, nullptr, 0);
            break;
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        k.reaped = true;
      }
      parse(k.out, o);
      std::ifstream in(k.logPath);
      std::stringstream text;
      text << in.rdbuf();
      o.log = text.str();
    }
    return out;
  }

 private:
  struct Kid {
    pid_t pid = -1;
    int pipe = -1;
    bool reaped = false;
    bool eof = false;
    std::string out;
    std::string logPath;
  };

  static bool readSome(Kid& k, Clock::time_point until) {
    if (k.eof) return false;
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
    if (ms <= 0) return false;
    pollfd p{k.pipe, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(std::min<long long>(ms, 100))) <= 0) return true;
    char buf[4096];
    ssize_t n = ::read(k.pipe, buf, sizeof(buf));
    if (n <= 0) {
      k.eof = true;
      return false;
    }
    k.out.append(buf, static_cast<size_t>(n));
    return true;
  }

  void parse(const std::string& text, Outcome& o) const {
    std::istringstream in(text);
    int ok = 0;
    long long endNs = 0;
    if (!(in >> ok >> o.code >> endNs)) return;
    o.reported = true;
    o.ok = ok != 0;
    o.seconds = std::chrono::duration<double>(Clock::time_point(std::chrono::nanoseconds(endNs)) -
                                              start_)
                    .count();
    std::string rest((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    o.message = rest.empty() ? rest : rest.substr(1);
  }

  [[noreturn]] static void runChild(int child, int out, const std::string& logPath,
                                    const Body& body) {
    int logFd = ::open(logPath.c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0600);
    if (logFd >= 0) ::dup2(logFd, STDERR_FILENO);
    int ok = 0, code = 0;
    std::string message;
    try {
      body(child);
      ok = 1;
    } catch (const Error& e) {
      code = static_cast<int>(e.code());
      message = e.what();
    } catch (const std::exception& e) {
      message = e.what();
    }
    std::string text = fmt::format("{} {} {} {}", ok, code,
                                   Clock::now().time_since_epoch().count(), message);
    size_t done = 0;
    while (done < text.size()) {
      ssize_t w = ::write(out, text.data() + done, text.size() - done);
      if (w <= 0) break;
      done += static_cast<size_t>(w);
    }
    std::fflush(stderr);
    ::_exit(0);
  }

  const int n_;
  std::vector<Kid> kids_;
  Clock::time_point start_{};
};

// `count` distinct loopback ports that were free a moment ago.
inline std::vector<uint16_t> freePorts(int count) {
  std::vector<Fd> held;
  std::vector<uint16_t> ports;
  for (int i = 0; i < count; ++i) {
    held.push_back(listenOn(SocketAddress::resolve("127.0.0.1", 0)));
    ports.push_back(SocketAddress::ofSocket(held.back().get()).port());
  }
  return ports;
}
inline uint16_t freePort() { return freePorts(1)[0]; }

// The segments in /dev/shm whose names start with gyre-<token> (a token of [A-Za-z0-9_],
// at most 32 characters, is used as it is in the names).
inline std::vector<std::string> shmSegmentsOf(const std::string& token) {
  std::vector<std::string> found;
  if (DIR* d = ::opendir("/dev/shm")) {
    while (dirent* e = ::readdir(d)) {
      if (std::string(e->d_name).rfind("gyre-" + token, 0) == 0) found.push_back(e->d_name);
    }
    ::closedir(d);
  }
  return found;
}

inline std::string describe(const Outcome& o) {
  return fmt::format("child {}: reported={} ok={} hung={} code={} after {:.2f} s: '{}'\nlog:\n{}",
                     o.child, o.reported, o.ok, o.hung, o.code, o.seconds, o.message, o.log);
}

// Every outcome (except `skip`) failed, not hung, by `bound` seconds, naming every needle.
inline void expectAllFailed(const std::vector<Outcome>& outcomes, double bound,
                            const std::vector<std::string>& needles, int skip = -1) {
  for (const Outcome& o : outcomes) {
    if (o.child == skip) continue;
    SCOPED_TRACE(describe(o));
    EXPECT_TRUE(o.reported && !o.ok && !o.hung);
    EXPECT_LT(o.seconds, bound);
    for (const std::string& needle : needles) {
      EXPECT_NE(o.message.find(needle), std::string::npos) << "missing '" << needle << "'";
    }
  }
}

}  // namespace gyre::testing
