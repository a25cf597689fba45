// gyre-store: serves a job's bootstrap store (store/tcp_store.h) in a process of its own,
// so that the store outlives every rank. gyrerun runs one on node 0 for the whole job and
// gives the ranks its address in GYRE_AGENT_STORE (docs/launchers.md).
//
//   gyre-store --listen-fd N [--ready-fd M]        serve on an inherited listening socket
//                                                  (gyrerun binds it: no race for the port)
//   gyre-store [--host H] --port P [--ready-fd M]  bind H:P itself (H: 127.0.0.1)
//   gyre-store --version | --help                  print one of them and exit 0
//
// Contract: the secret is the job's, read as the ranks read it (GYRE_TOKEN or
// GYRE_TOKEN_FILE; none: an open store). Once serving it prints nothing; with --ready-fd
// it writes "ready\n" to M and closes it. An error before that is one line on M when
// --ready-fd is given (its launcher names the program and the port with it), else
// "gyre-store: ..." on stderr; the exit status is then 1, or 2 for a wrong command line.
// It exits 0 on SIGTERM, SIGINT or SIGHUP, and when its parent dies: PR_SET_PDEATHSIG
// sends it SIGTERM, and a parent that died before that took effect is caught by comparing
// getppid() with the parent it started under, every second. Uses only the store layer
// (gyre_store) of the library.
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>

#include "base/error.h"
#include "base/options.h"
#include "base/version.h"
#include "store/tcp_store.h"
#include "transport/socket.h"

namespace {

const char kUsage[] =
    "usage: gyre-store --listen-fd N [--ready-fd M]\n"
    "       gyre-store [--host H] --port P [--ready-fd M]\n"
    "       gyre-store --version | --help\n"
    "Serves a gyre job's bootstrap store until SIGTERM or its parent's death (gyrerun starts\n"
    "it on node 0). The secret comes from GYRE_TOKEN or GYRE_TOKEN_FILE, as the ranks'.\n"
    "--version prints gyre-store's version and commit (\"gyre-store 0.2.0 (commit 1a2b3c4)\").\n";

// The per-call bound of the store's own client connection (serve() returns one); it
// makes no calls, so the value only has to be sane.
constexpr std::chrono::seconds kClientTimeout{30};

struct Args {
  bool help = false;
  bool version = false;
  int listenFd = -1;
  std::string host = "127.0.0.1";
  int port = -1;
  int readyFd = -1;
};

std::optional<long> number(const char* text, long lo, long hi) {
  if (text == nullptr || *text == '\0') return std::nullopt;
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(text, &end, 10);
  if (errno != 0 || *end != '\0' || v < lo || v > hi) return std::nullopt;
  return v;
}

// Returns "" or what is wrong with the command line.
std::string parse(int argc, char** argv, Args& a) {
  for (int i = 1; i < argc; ++i) {
    std::string name = argv[i];
    if (name == "--help" || name == "-h" || name == "--version") {
      (name == "--version" ? a.version : a.help) = true;
      return "";
    }
    std::string value;
    const size_t eq = name.find('=');
    if (eq != std::string::npos) {
      value = name.substr(eq + 1);
      name.resize(eq);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return name + " wants a value";
    }
    if (name == "--host") {
      if (value.empty()) return "--host wants an address";
      a.host = value;
      continue;
    }
    long lo = 0, hi = 1 << 20;
    if (name == "--port") lo = 1, hi = 65535;
    std::optional<long> v = number(value.c_str(), lo, hi);
    if (!v) {
      return name + " wants an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
             "], got '" + value + "'";
    }
    if (name == "--listen-fd") {
      a.listenFd = static_cast<int>(*v);
    } else if (name == "--port") {
      a.port = static_cast<int>(*v);
    } else if (name == "--ready-fd") {
      a.readyFd = static_cast<int>(*v);
    } else {
      return "unknown option " + name;
    }
  }
  if ((a.listenFd >= 0) == (a.port > 0)) return "give either --listen-fd or --port";
  return "";
}

void writeLine(int fd, const std::string& text) {
  std::string line = text + "\n";
  size_t done = 0;
  while (done < line.size()) {
    ssize_t n = ::write(fd, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

// Why `fd` cannot be served on, or "".
std::string checkListening(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    return "--listen-fd " + std::to_string(fd) + " is not open: " + std::strerror(errno);
  }
  if (!S_ISSOCK(st.st_mode)) return "--listen-fd " + std::to_string(fd) + " is not a socket";
  int listening = 0;
  socklen_t len = sizeof(listening);
  if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || !listening) {
    return "--listen-fd " + std::to_string(fd) + " is a socket on which listen() was not called";
  }
  ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  // The signals that end it are taken synchronously (sigtimedwait below); blocked before
  // the server's thread exists, so that the thread inherits the mask and never takes them.
  sigset_t endSignals;
  sigemptyset(&endSignals);
  for (int signo : {SIGTERM, SIGINT, SIGHUP}) sigaddset(&endSignals, signo);
  ::sigprocmask(SIG_BLOCK, &endSignals, nullptr);
  const pid_t parent = ::getppid();
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);

  Args args;
  std::string error = parse(argc, argv, args);
  if (!error.empty()) {
    std::fprintf(stderr, "gyre-store: %s\n%s", error.c_str(), kUsage);
    return 2;
  }
  if (args.help) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (args.version) {
    std::printf("%s\n", gyre::versionLine("gyre-store").c_str());
    return 0;
  }
  auto failWith = [&](const std::string& why) {
    if (args.readyFd >= 0) {
      writeLine(args.readyFd, why);
    } else {
      writeLine(STDERR_FILENO, "gyre-store: " + why);
    }
    return 1;
  };
  if (args.readyFd >= 0) ::fcntl(args.readyFd, F_SETFD, FD_CLOEXEC);
  if (args.listenFd >= 0) {
    error = checkListening(args.listenFd);
    if (!error.empty()) return failWith(error);
  }

  std::shared_ptr<gyre::TcpStore> store;
  try {
    const std::string secret = gyre::secretFromEnvironment();
    store = args.listenFd >= 0
                ? gyre::TcpStore::serveOn(gyre::Fd(args.listenFd), kClientTimeout, secret)
                : gyre::TcpStore::serve(args.host, static_cast<uint16_t>(args.port), kClientTimeout,
                                        secret);
  } catch (const std::exception& e) {
    return failWith(e.what());
  }
  if (args.readyFd >= 0) {
    writeLine(args.readyFd, "ready");
    ::close(args.readyFd);
  }

  const timespec second{1, 0};
  for (;;) {
    const int signo = ::sigtimedwait(&endSignals, nullptr, &second);
    if (signo > 0) break;
    if (::getppid() != parent) break;  // the parent died before PR_SET_PDEATHSIG took effect
  }
  store.reset();  // stops the server and closes every connection at once
  return 0;
}
