// RankGroup: n forked ranks of one communicator, for the tests that kill, stop or
// confuse ranks. gyre::spawn cannot serve them: a killed rank reports nothing, and
// these tests must see every rank's error, when it came, and its log.
//
// By default the parent serves the bootstrap store on loopback (bound before fork,
// served after, so no thread exists at fork; with the group's secret, Options::token)
// and can read it; `makeStore` replaces
// that (the namespace tests serve it from a rank). Each child builds its Communicator
// with the group's Options (perRank adjusts them), says READY, runs the body, and
// reports through a pipe: OK, or the error's code, the steady-clock time it was caught
// (CLOCK_MONOTONIC, comparable across processes) and its message, and how long the
// communicator's destruction took. Its stderr (the library's log) goes to a file the
// parent reads back. join() reaps every rank by a deadline and SIGKILLs what is left,
// marking it hung. The destructor kills and reaps anything still running.
// The forking, pipes, logs and reaping are tests/forked_children.h's.
#pragma once

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "base/error.h"
#include "forked_children.h"
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
  RankGroup(int n, Options options) : n_(n), options_(std::move(options)), children_(n, "test") {}
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
    for (int r = 0; r < n_; ++r) {
      children_.fork(r, [&](int out) { runChild(r, port, out, body); });
    }
    if (!makeStore) {
      store_ = TcpStore::serveOn(std::move(listener), options_.timeout, options_.token);
    }
  }

  Store& store() { return *store_; }
  pid_t pid(int rank) const { return children_.pid(rank); }

  // True once every rank built its communicator; false at the timeout (or if a rank
  // ended first).
  bool waitReady(std::chrono::milliseconds timeout) {
    auto until = Clock::now() + timeout;
    for (int r = 0; r < n_; ++r) {
      while (children_[r].out.find("READY\n") == std::string::npos) {
        if (Clock::now() >= until || !children_.readSome(r, until)) return false;
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
      if (r == killLast) ::kill(children_.pid(r), SIGKILL);
      RankReport& rep = reports[r];
      rep.rank = r;
      rep.hung = children_.finish(r, deadline);
      rep.status = children_[r].status;
      parseReport(children_[r].out, rep);
      rep.log = children_.log(r);
    }
    return reports;
  }

 private:
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

  void runChild(int rank, uint16_t port, int out, const RankBody& body) {
    int ok = 0, code = 0;
    Clock::time_point errorAt{};
    Clock::duration destroy{};
    std::string message;
    try {
      if (beforeCreate) beforeCreate(rank);
      ::setenv("MASTER_ADDR", masterAddr.c_str(), 1);
      Options o = options_;
      if (perRank) perRank(rank, o);
      // The rank's own secret (perRank may give one rank another) reaches the store too.
      std::shared_ptr<Store> store =
          makeStore ? makeStore(rank)
                    : TcpStore::connect("127.0.0.1", port, options_.timeout, o.token, rank);
      std::unique_ptr<Communicator> comm = Communicator::create(store, rank, n_, o);
      ForkedChildren::writeAll(out, "READY\n");
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
    ForkedChildren::writeAll(out,
             fmt::format("REPORT {} {} {} {}\n{}", ok, code, errorAt.time_since_epoch().count(),
                         std::chrono::nanoseconds(destroy).count(), message));
  }

  const int n_;
  const Options options_;
  ForkedChildren children_;
  std::shared_ptr<TcpStore> store_;
};

inline double secondsBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace gyre::testing
