// RankGroup: n forked ranks of one communicator, for the tests that kill, stop or
// confuse ranks. gyre::spawn cannot serve them: a killed rank reports nothing, and
// these tests must see every rank's error, when it came, and its log.
//
// By default the parent serves the bootstrap store on loopback (bound before fork,
// served after, so no thread exists at fork) and can read it; `makeStore` replaces
// that (the namespace tests serve it from a rank). Each child builds its Communicator
// with the group's Options (perRank adjusts them), says READY, runs the body, and
// reports through a pipe: OK, or the error's code, the steady-clock time it was caught
// (CLOCK_MONOTONIC, comparable across processes) and its message, and how long the
// communicator's destruction took. Its stderr (the library's log) goes to a file the
// parent reads back. join() reaps every rank by a deadline and SIGKILLs what is left,
// marking it hung. The destructor kills and reaps anything still running.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "base/error.h"
#include "base/options.h"
#include "ring/communicator.h"
#include "store/tcp_store.h"

namespace gyre::testing {

struct RankReport {
  int rank = -1;
  bool reported = false;  // the child got to report (it was not killed first)
  bool ok = false;        // the body returned normally
  int code = 0;           // the gyre::ErrorCode of its error (0: not a gyre::Error)
  Clock::time_point errorAt{};
  double destroySeconds = 0;  // how long destroying the communicator took
  std::string message;
  std::string log;    // the child's stderr
  int status = 0;     // from waitpid
  bool hung = false;  // still running at join()'s deadline
};

using RankBody = std::function<void(Communicator& comm, int rank)>;

class RankGroup {
 public:
  RankGroup(int n, Options options) : n_(n), options_(std::move(options)), children_(n) {}
  ~RankGroup() {
    for (Child& c : children_) {
      if (c.pid > 0 && !c.reaped) {
        ::kill(c.pid, SIGKILL);
        ::waitpid(c.pid, nullptr, 0);
      }
      if (c.pipe >= 0) ::close(c.pipe);
      if (!c.logPath.empty()) ::unlink(c.logPath.c_str());
    }
  }
  RankGroup(const RankGroup&) = delete;
  RankGroup& operator=(const RankGroup&) = delete;

  std::function<void(int rank, Options& options)> perRank;
  std::function<void(int rank)> beforeCreate;                 // in the child
  std::function<std::shared_ptr<Store>(int rank)> makeStore;  // in the child
  std::string masterAddr = "127.0.0.1";

  void start(const RankBody& body) {
    Fd listener;
    uint16_t port = 0;
    if (!makeStore) {
      listener = listenOn(SocketAddress::resolve("127.0.0.1", 0));
      port = SocketAddress::ofSocket(listener.get()).port();
    }
    std::fflush(stdout);
    std::fflush(stderr);
    static int group = 0;
    ++group;
    for (int r = 0; r < n_; ++r) {
      Child& c = children_[r];
      c.logPath = fmt::format("/tmp/gyre-test-{}-{}-{}.log", ::getpid(), group, r);
      int fds[2];
      if (::pipe2(fds, O_CLOEXEC) != 0) failSystem(errno, "pipe2");
      pid_t pid = ::fork();
      if (pid < 0) failSystem(errno, "fork");
      if (pid == 0) {
        ::close(fds[0]);
        for (int k = 0; k < r; ++k) ::close(children_[k].pipe);
        runChild(r, port, fds[1], c.logPath, body);
      }
      ::close(fds[1]);
      c.pid = pid;
      c.pipe = fds[0];
    }
    if (!makeStore) store_ = TcpStore::serveOn(std::move(listener), options_.timeout);
  }

  Store& store() { return *store_; }
  pid_t pid(int rank) const { return children_[rank].pid; }

  // True once every rank built its communicator; false at the timeout (or if a rank
  // ended first).
  bool waitReady(std::chrono::milliseconds timeout) {
    auto until = Clock::now() + timeout;
    for (Child& c : children_) {
      while (c.out.find("READY\n") == std::string::npos) {
        if (Clock::now() >= until || !readSome(c, until)) return false;
      }
    }
    return true;
  }

  // Reaps every rank by `deadline`; `killLast` (a stopped rank, say) is SIGKILLed once
  // the others are done, and not counted as hung.
  std::vector<RankReport> join(Clock::time_point deadline, int killLast = -1) {
    std::vector<RankReport> reports(n_);
    std::vector<int> order;
    for (int r = 0; r < n_; ++r) {
      if (r != killLast) order.push_back(r);
    }
    if (killLast >= 0) order.push_back(killLast);
    for (int r : order) {
      if (r == killLast) ::kill(children_[r].pid, SIGKILL);
      Child& c = children_[r];
      RankReport& rep = reports[r];
      rep.rank = r;
      while (readSome(c, deadline)) {
      }
      if (!c.reaped) {
        for (;;) {
          pid_t got = ::waitpid(c.pid, &c.status, WNOHANG);
          if (got == c.pid) break;
          if (Clock::now() >= deadline) {
            rep.hung = true;
            ::kill(c.pid, SIGKILL);
            ::waitpid(c.pid, &c.status, 0);
            break;
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        c.reaped = true;
      }
      rep.status = c.status;
      parseReport(c.out, rep);
      std::ifstream in(c.logPath);
      std::stringstream text;
      text << in.rdbuf();
      rep.log = text.str();
    }
    return reports;
  }

 private:
  struct Child {
    pid_t pid = -1;
    int pipe = -1;
    bool reaped = false;
    int status = 0;
    bool eof = false;
    std::string out;
    std::string logPath;
  };

  // Reads what the child wrote; false at EOF or at the deadline.
  static bool readSome(Child& c, Clock::time_point until) {
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

  static void parseReport(const std::string& out, RankReport& rep) {
    size_t at = out.find("REPORT ");
    if (at == std::string::npos) return;
    std::istringstream in(out.substr(at + 7));
    long long errorNs = 0, destroyNs = 0;
    int ok = 0;
    in >> ok >> rep.code >> errorNs >> destroyNs;
    rep.reported = true;
    rep.ok = ok != 0;
    rep.errorAt = Clock::time_point(std::chrono::nanoseconds(errorNs));
    rep.destroySeconds = static_cast<double>(destroyNs) * 1e-9;
    std::getline(in, rep.message);  // the rest of the line
    std::string rest((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    rep.message = rest;
  }

  static void writeAll(int fd, const std::string& s) {
    size_t done = 0;
    while (done < s.size()) {
      ssize_t w = ::write(fd, s.data() + done, s.size() - done);
      if (w <= 0) return;
      done += static_cast<size_t>(w);
    }
  }

  [[noreturn]] void runChild(int rank, uint16_t port, int out, const std::string& logPath,
                             const RankBody& body) {
    int logFd = ::open(logPath.c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0600);
    if (logFd >= 0) ::dup2(logFd, STDERR_FILENO);
    int ok = 0, code = 0;
    Clock::time_point errorAt{};
    Clock::duration destroy{};
    std::string message;
    try {
      if (beforeCreate) beforeCreate(rank);
      ::setenv("MASTER_ADDR", masterAddr.c_str(), 1);
      std::shared_ptr<Store> store =
          makeStore ? makeStore(rank) : TcpStore::connect("127.0.0.1", port, options_.timeout);
      Options o = options_;
      if (perRank) perRank(rank, o);
      std::unique_ptr<Communicator> comm = Communicator::create(store, rank, n_, o);
      writeAll(out, "READY\n");
      try {
        body(*comm, rank);
        ok = 1;
      } catch (const Error& e) {
        errorAt = Clock::now();
        code = static_cast<int>(e.code());
        message = e.what();
      } catch (const std::exception& e) {
        errorAt = Clock::now();
        message = e.what();
      }
      auto t0 = Clock::now();
      comm.reset();
      destroy = Clock::now() - t0;
    } catch (const Error& e) {
      errorAt = Clock::now();
      code = static_cast<int>(e.code());
      message = std::string("setup: ") + e.what();
    } catch (const std::exception& e) {
      errorAt = Clock::now();
      message = std::string("setup: ") + e.what();
    }
    writeAll(out,
             fmt::format("REPORT {} {} {} {}\n{}", ok, code, errorAt.time_since_epoch().count(),
                         std::chrono::nanoseconds(destroy).count(), message));
    std::fflush(stderr);
    ::_exit(0);
  }

  const int n_;
  const Options options_;
  std::vector<Child> children_;
  std::shared_ptr<TcpStore> store_;
};

inline double secondsBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace gyre::testing
