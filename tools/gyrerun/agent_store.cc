#include "tools/gyrerun/agent_store.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "tools/gyrerun/forked_child.h"
#include "tools/gyrerun/rank_process.h"  // describeWaitStatus

extern char** environ;

namespace gyre::tools {
namespace {

using Clock = std::chrono::steady_clock;

// The fds the program is given: the listening socket and the pipe it says "ready" on.
constexpr int kListenFd = 3;
constexpr int kReadyFd = 4;

// A listening socket bound to `addr`; -1 and errno on failure. The backlog is the
// kernel's cap: every rank of the job connects at once (a drop costs a 1 s retransmit).
int listenOn(const sockaddr* addr, socklen_t length) {
  const int fd = ::socket(addr->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd, addr, length) != 0 || ::listen(fd, SOMAXCONN) != 0) {
    const int err = errno;
    ::close(fd);
    errno = err;
    return -1;
  }
  return fd;
}

// A listening socket for host:port. `host` resolves as the library resolves MASTER_ADDR
// (IPv4 first: loopback and the test namespaces are IPv4) and is bound when it is an
// address of this host; when it is not (a name the other nodes reach node 0 by: a
// service, a NAT) or does not resolve here, every address of this host is bound instead,
// as torch's store does, and `note` says so. Returns -1 and sets `error`.
int bindListening(const std::string& host, int port, std::string& error, std::string& note) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found);
  sockaddr_storage any{};
  socklen_t anyLength = sizeof(sockaddr_in);
  auto* any4 = reinterpret_cast<sockaddr_in*>(&any);
  any4->sin_family = AF_INET;
  any4->sin_port = htons(static_cast<uint16_t>(port));
  any4->sin_addr.s_addr = htonl(INADDR_ANY);
  int fd = -1;
  if (rc != 0 || found == nullptr) {
    note = "cannot resolve '" + host + "' here (" + ::gai_strerror(rc) + ")";
  } else {
    addrinfo* pick = found;
    for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
      if (a->ai_family == AF_INET) {
        pick = a;
        break;
      }
    }
    fd = listenOn(pick->ai_addr, pick->ai_addrlen);
    if (fd < 0 && errno == EADDRNOTAVAIL) {
      note = host + " is not an address of this host";
      if (pick->ai_family == AF_INET6) {
        auto* any6 = reinterpret_cast<sockaddr_in6*>(&any);
        *any6 = sockaddr_in6{};
        any6->sin6_family = AF_INET6;
        any6->sin6_port = htons(static_cast<uint16_t>(port));
        any6->sin6_addr = in6addr_any;
        anyLength = sizeof(sockaddr_in6);
      }
    } else if (fd < 0) {
      note.clear();
      error = errno == EADDRINUSE ? "the port is already in use (another job or program holds it)"
                                  : std::string("bind: ") + std::strerror(errno);
    }
    ::freeaddrinfo(found);
  }
  if (fd < 0 && !note.empty()) {
    fd = listenOn(reinterpret_cast<sockaddr*>(&any), anyLength);
    if (fd < 0) {
      error = note + ", and every address of it cannot be bound either: " +
              (errno == EADDRINUSE ? "the port is already in use (another job or program holds it)"
                                   : std::string(std::strerror(errno)));
      note.clear();
    }
  }
  return fd;
}

int boundPort(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return -1;
  if (addr.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
}

std::vector<std::string> storeEnvironment(const std::string& secret) {
  std::vector<std::string> vars;
  for (char** e = environ; *e != nullptr; ++e) {
    if (!secret.empty() && std::strncmp(*e, "GYRE_TOKEN=", 11) == 0) continue;
    vars.emplace_back(*e);
  }
  if (!secret.empty()) vars.push_back("GYRE_TOKEN=" + secret);
  return vars;
}

// In the forked child: only async-signal-safe calls until exec.
[[noreturn]] void execStore(int listenFd, int readyFd, pid_t parent, char** argv, char** envp) {
  ::setpgid(0, 0);
  // Above every fd the child might hold, then onto 3 and 4 (which clears close-on-exec).
  const int listenHigh = ::fcntl(listenFd, F_DUPFD_CLOEXEC, 10);
  const int readyHigh = ::fcntl(readyFd, F_DUPFD_CLOEXEC, 10);
  if (listenHigh < 0 || readyHigh < 0 || ::dup2(listenHigh, kListenFd) < 0 ||
      ::dup2(readyHigh, kReadyFd) < 0) {
    writeString(readyFd, "cannot pass it its sockets (dup2 failed)\n");
    ::_exit(127);
  }
  const int devNull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (devNull >= 0) ::dup2(devNull, STDIN_FILENO);
  dieWithParent(parent);
  resetSignalsForExec();  // signals were blocked across fork (tools/gyrerun/forked_child.h)
  ::execvpe(argv[0], argv, envp);
  const int err = errno;
  writeString(kReadyFd, "cannot execute it: ");
  writeString(kReadyFd, ::strerrordesc_np(err));
  writeString(kReadyFd, "\n");
  ::_exit(127);
}

// The first line the store writes on its ready pipe, read until `deadline`. `closed`:
// the pipe ended (the program exited or closed it) before a whole line came.
std::string readReadyLine(int fd, Clock::time_point deadline, bool& closed, bool& timedOut) {
  std::string text;
  closed = timedOut = false;
  for (;;) {
    const size_t newline = text.find('\n');
    if (newline != std::string::npos) return text.substr(0, newline);
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      timedOut = true;
      return text;
    }
    pollfd p{fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(std::min<long long>(left.count(), INT_MAX)));
    if (ready < 0 && errno == EINTR) continue;  // a SIGCHLD; the deadline still holds
    if (ready <= 0) continue;
    char buffer[512];
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      closed = true;
      return text;
    }
    text.append(buffer, static_cast<size_t>(n));
  }
}

// Waits for `pid` at most `limit`, then SIGKILLs it; returns its wait status.
int reapWithin(pid_t pid, Clock::duration limit) {
  const Clock::time_point until = Clock::now() + limit;
  int status = 0;
  for (;;) {
    const pid_t got = ::waitpid(pid, &status, WNOHANG);
    if (got == pid) return status;
    if (got < 0 && errno != EINTR) return status;
    if (Clock::now() >= until) break;
    ::usleep(10 * 1000);
  }
  ::kill(pid, SIGKILL);
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

}  // namespace

std::string joinHostPort(const std::string& host, int port) {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

std::unique_ptr<AgentStore> AgentStore::start(const std::string& program, const std::string& host,
                                              int port, const std::string& secret,
                                              std::string& error) {
  const std::string advice =
      " (--no-agent-store lets rank 0 serve gyre's store instead, as before)";
  std::string why, note;
  const int listenFd = bindListening(host, port, why, note);
  if (listenFd < 0) {
    error = "cannot serve the job's store at " + joinHostPort(host, port) +
            (port > 0 ? " (--store-port)" : "") + ": " + why + advice;
    return nullptr;
  }
  const int bound = boundPort(listenFd);
  const std::string address = joinHostPort(host, bound);
  if (!note.empty()) {
    const std::string line = "gyrerun: " + note + ": the job's store listens on port " +
                             std::to_string(bound) + " of every address of this host, and the " +
                             "ranks look for it at " + address + "\n";
    ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
    (void)ignored;
  }
  const std::string failure =
      "the job's store program " + program + " did not start at " + address + ": ";
  int ready[2];
  if (::pipe2(ready, O_CLOEXEC) != 0) {
    error = failure + "pipe: " + std::strerror(errno);
    ::close(listenFd);
    return nullptr;
  }
  std::vector<std::string> args = {program, "--listen-fd", std::to_string(kListenFd), "--ready-fd",
                                   std::to_string(kReadyFd)};
  std::vector<std::string> vars = storeEnvironment(secret);
  std::vector<char*> argv = pointers(args);
  std::vector<char*> envp = pointers(vars);
  // As for the ranks (rank_process.cc): no signal reaches the child while it still runs
  // gyrerun's handlers.
  sigset_t all, saved;
  sigfillset(&all);
  ::sigprocmask(SIG_SETMASK, &all, &saved);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) execStore(listenFd, ready[1], parent, argv.data(), envp.data());
  const int forkErrno = errno;
  ::sigprocmask(SIG_SETMASK, &saved, nullptr);
  // The store owns the socket now: gyrerun keeps no copy, so the port closes with it.
  ::close(listenFd);
  ::close(ready[1]);
  if (pid < 0) {
    ::close(ready[0]);
    error = failure + "fork: " + std::strerror(forkErrno);
    return nullptr;
  }
  bool closed = false, timedOut = false;
  const std::string line = readReadyLine(ready[0], Clock::now() + kReadyTimeout, closed, timedOut);
  ::close(ready[0]);
  if (line == "ready" && !closed && !timedOut) {
    return std::unique_ptr<AgentStore>(new AgentStore(program, address, bound, pid));
  }
  if (timedOut) {
    reapWithin(pid, std::chrono::seconds(0));
    error = failure + "it did not say it was serving within " +
            std::to_string(kReadyTimeout.count()) + " s" + advice;
    return nullptr;
  }
  const int status = reapWithin(pid, kStopGrace);
  error = failure +
          (line.empty() ? "it exited (" + describeWaitStatus(status) + ") before serving" : line) +
          advice;
  return nullptr;
}

AgentStore::~AgentStore() {
  if (!running_) return;
  ::kill(pid_, SIGTERM);
  reapWithin(pid_, kStopGrace);
  running_ = false;
}

std::string AgentStore::describe() const {
  return program_.substr(program_.rfind('/') + 1) + " (pid " + std::to_string(pid_) + ") at " +
         address_;
}

bool AgentStore::reapIfExited(std::string& how) {
  if (!running_) return false;
  int status = 0;
  pid_t got;
  do {
    got = ::waitpid(pid_, &status, WNOHANG);
  } while (got < 0 && errno == EINTR);
  if (got != pid_) return false;
  running_ = false;
  how = describeWaitStatus(status);
  return true;
}

std::string storeProgram(std::string& error) {
  const char* given = std::getenv("GYRE_STORE_PROGRAM");
  if (given != nullptr && *given != '\0') return given;
  char self[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) {
    error = std::string("cannot find gyre-store: reading /proc/self/exe failed: ") +
            std::strerror(errno) + " (set GYRE_STORE_PROGRAM to its path)";
    return "";
  }
  std::string path(self, static_cast<size_t>(n));
  return path.substr(0, path.rfind('/') + 1) + "gyre-store";
}

}  // namespace gyre::tools
