// ProcessRanks: n forked processes that each run a body (typically: reach the store,
// create a communicator, run a few checked collectives), for the startup tests that give
// ranks different beliefs (world sizes, ranks, settings, namespaces) or kill them while
// they join. Each child reports through a pipe: OK, or its gyre::Error's code and message,
// with the steady-clock time (CLOCK_MONOTONIC, comparable across processes) it ended; its
// stderr (the library's progress lines and log) goes to a file the parent reads back.
// join() reaps every child by a deadline and SIGKILLs what is left, marking it hung; the
// destructor kills and reaps anything still running.
// The forking, pipes, logs and reaping are tests/forked_children.h's.
//
// Also: a free loopback port, the /dev/shm segments of a token, and the checks that the
// tests share (every rank failed within a bound, with these words in its message).
#pragma once

#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "base/error.h"
#include "base/secret.h"
#include "forked_children.h"
#include "transport/socket.h"

namespace gyre::testing {

struct Outcome {
  int child = -1;
  bool reported = false;
  bool ok = false;
  bool hung = false;
  int code = 0;
  double seconds = 0;  // from start() to the end of its body
  int status = 0;      // from waitpid: how the process ended
  std::string message;
  std::string log;
};

class ProcessRanks {
 public:
  using Body = std::function<void(int child)>;  // throws on failure

  explicit ProcessRanks(int n) : n_(n), children_(n, "join-test") {}
  ProcessRanks(const ProcessRanks&) = delete;
  ProcessRanks& operator=(const ProcessRanks&) = delete;

  void start(const Body& body) {
    start_ = Clock::now();
    for (int c = 0; c < n_; ++c) {
      children_.fork(c, [&](int out) { runChild(c, out, body); });
    }
  }

  Clock::time_point started() const { return start_; }
  void kill(int child) { ::kill(children_.pid(child), SIGKILL); }
  pid_t pid(int child) const { return children_.pid(child); }

  std::vector<Outcome> join(double deadlineSeconds) {
    const Clock::time_point deadline =
        start_ + std::chrono::milliseconds(static_cast<long long>(deadlineSeconds * 1000));
    std::vector<Outcome> out(static_cast<size_t>(n_));
    for (int c = 0; c < n_; ++c) {
      Outcome& o = out[static_cast<size_t>(c)];
      o.child = c;
      o.hung = children_.finish(c, deadline);
      o.status = children_[c].status;
      parse(children_[c].out, o);
      o.log = children_.log(c);
    }
    return out;
  }

 private:
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

  static void runChild(int child, int out, const Body& body) {
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
    ForkedChildren::writeAll(out, fmt::format("{} {} {} {}", ok, code,
                                              Clock::now().time_since_epoch().count(), message));
  }

  const int n_;
  ForkedChildren children_;
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
      // Names carry the secret's tag, never the secret (base/secret.h).
      if (std::string(e->d_name).rfind("gyre-" + nameTag(token), 0) == 0) found.push_back(e->d_name);
    }
    ::closedir(d);
  }
  return found;
}

inline std::string describe(const Outcome& o) {
  const std::string ended = WIFSIGNALED(o.status) ? fmt::format("killed by signal {}", WTERMSIG(o.status))
                           : fmt::format("exit status {}", WEXITSTATUS(o.status));
  return fmt::format("child {}: reported={} ok={} hung={} code={} ({}) after {:.2f} s: '{}'\nlog:\n{}",
                     o.child, o.reported, o.ok, o.hung, o.code, ended, o.seconds, o.message, o.log);
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
