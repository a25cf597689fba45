#include "ring/spawn.h"

#include <poll.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "base/error.h"
#include "ring/communicator.h"
#include "store/tcp_store.h"

namespace gyre {
namespace {

struct Child {
  pid_t pid = -1;
  int errorPipe = -1;  // read end: the child's failure message
  bool done = false;
  int status = 0;
  std::string message;
};

[[noreturn]] void runChild(int rank, int nranks, Fd listener, uint16_t port, int errorFd,
                           const std::function<void(Communicator&)>& fn,
                           const SpawnOptions& options) {
  std::string failure;
  try {
    std::shared_ptr<TcpStore> store =
        rank == 0 ? TcpStore::serveOn(std::move(listener), options.options.timeout,
                                      options.options.token)
                  : TcpStore::connect("127.0.0.1", port, options.options.timeout,
                                      options.options.token, rank);
    listener.reset();
    Options rankOptions = options.options;
    if (options.perRank) options.perRank(rank, rankOptions);
    auto comm = Communicator::create(store, rank, nranks, rankOptions);
    fn(*comm);
  } catch (const std::exception& e) {
    failure = e.what();
  } catch (...) {
    failure = "unknown exception";
  }
  if (!failure.empty()) {
    ssize_t ignored = ::write(errorFd, failure.data(), std::min<size_t>(failure.size(), 4000));
    (void)ignored;
  }
  std::fflush(stdout);
  std::fflush(stderr);
  ::_exit(failure.empty() ? 0 : 1);
}

std::string howItEnded(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with code {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return fmt::format("was killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  }
  return "ended";
}

void drain(Child& c) {
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(c.errorPipe, buf, sizeof(buf));
    if (n <= 0) break;
    c.message.append(buf, static_cast<size_t>(n));
  }
}

}  // namespace

void spawn(int nranks, const std::function<void(Communicator&)>& fn) {
  spawn(nranks, fn, SpawnOptions{});
}

void spawn(int nranks, const std::function<void(Communicator&)>& fn, const SpawnOptions& options) {
  if (nranks < 1) fail(ErrorCode::kInvalidArgument, "spawn: nranks {} must be >= 1", nranks);
  Fd listener = listenOn(SocketAddress::resolve("127.0.0.1", 0));
  const uint16_t port = SocketAddress::ofSocket(listener.get()).port();
  std::fflush(stdout);
  std::fflush(stderr);

  std::vector<Child> children(nranks);
  for (int r = 0; r < nranks; ++r) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) failSystem(errno, "pipe2");
    pid_t pid = ::fork();
    if (pid < 0) failSystem(errno, "fork");
    if (pid == 0) {
      ::close(fds[0]);
      for (int k = 0; k < r; ++k) ::close(children[k].errorPipe);
      runChild(r, nranks, r == 0 ? std::move(listener) : Fd(), port, fds[1], fn, options);
    }
    ::close(fds[1]);
    children[r].pid = pid;
    children[r].errorPipe = fds[0];
  }
  listener.reset();

  // Reap the children. Polling with a short sleep keeps this simple and bounded.
  int firstFailed = -1;
  auto killAt = std::chrono::steady_clock::time_point::max();
  int remaining = nranks;
  while (remaining > 0) {
    bool progressed = false;
    for (int r = 0; r < nranks; ++r) {
      Child& c = children[r];
      if (c.done) continue;
      pid_t got = ::waitpid(c.pid, &c.status, WNOHANG);
      if (got != c.pid) continue;
      c.done = true;
      progressed = true;
      --remaining;
      drain(c);
      ::close(c.errorPipe);
      bool ok = WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0;
      if (!ok && firstFailed < 0) {
        firstFailed = r;
        killAt = std::chrono::steady_clock::now() + options.grace;
      }
    }
    if (remaining > 0 && std::chrono::steady_clock::now() >= killAt) {
      for (Child& c : children) {
        if (!c.done) ::kill(c.pid, SIGKILL);
      }
      killAt = std::chrono::steady_clock::time_point::max();
    }
    if (!progressed) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (firstFailed < 0) return;

  const Child& first = children[firstFailed];
  std::string text = fmt::format("spawn: rank {} {}{}{}", firstFailed, howItEnded(first.status),
                                 first.message.empty() ? "" : ": ", first.message);
  for (int r = 0; r < nranks; ++r) {
    const Child& c = children[r];
    if (r == firstFailed || (WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0)) continue;
    text += fmt::format("\n  rank {} {}{}{}", r, howItEnded(c.status),
                        c.message.empty() ? "" : ": ", c.message);
  }
  throw Error(ErrorCode::kRemoteError, text);
}

}  // namespace gyre
