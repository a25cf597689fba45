// gyrerun: starts the local ranks of a gyre job, torchrun-style (see launcherUsage()).
//
// Parses the command line, picks MASTER_ADDR/MASTER_PORT, routes SIGCHLD, SIGINT,
// SIGTERM and SIGHUP into a self-pipe, and hands over to RankSupervisor, whose return
// value is the exit status. On node 0 (unless --no-agent-store) it first starts gyre's
// store for the job (tools/gyrerun/agent_store.h), which lives until gyrerun ends, and every
// node's ranks get its address in GYRE_AGENT_STORE. With --max-restarts K, a group that
// failed (status 1) is started again, whole, up to K times (torchrun's behaviour), on the
// same store; a signal to gyrerun ends it. It uses nothing from the gyre library, so it
// builds and works while the library does not (the store is a program of its own).
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/random.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "base/version.h"
#include "tools/gyrerun/agent_store.h"
#include "tools/gyrerun/launcher_options.h"
#include "tools/gyrerun/rank_process.h"
#include "tools/gyrerun/rank_supervisor.h"
#include "tools/gyrerun/torch_compat.h"

namespace {

int gSignalPipeWrite = -1;

// Async-signal-safe: one byte per signal into a non-blocking pipe; if the pipe is full
// the byte is dropped, which is fine because the supervisor re-checks its children on
// every wake-up and a full pipe already guarantees one.
void onSignal(int signo) {
  int saved = errno;
  unsigned char byte = static_cast<unsigned char>(signo);
  ssize_t ignored = ::write(gSignalPipeWrite, &byte, 1);
  (void)ignored;
  errno = saved;
}

// Returns the read end of the self-pipe, or -1.
int installSignalHandlers() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) return -1;
  gSignalPipeWrite = fds[1];
  struct sigaction sa {};
  sa.sa_handler = onSignal;
  sigemptyset(&sa.sa_mask);
  // SA_RESTART keeps stray EINTRs out of plain writes; poll() still wakes (it is never
  // restarted), and SA_NOCLDSTOP ignores ranks merely stopped (SIGSTOP, a debugger).
  sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  for (int signo : {SIGCHLD, SIGINT, SIGTERM, SIGHUP}) ::sigaction(signo, &sa, nullptr);
  // A closed stdout must not kill the launcher while ranks still run.
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ignore, nullptr);
  return fds[0];
}

bool nonEmptyEnv(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0';
}

// 32 random bytes as 64 hex digits, or "" when the kernel gives none.
std::string randomSecret() {
  unsigned char bytes[32];
  size_t got = 0;
  for (int attempt = 0; got < sizeof(bytes) && attempt < 100; ++attempt) {
    ssize_t n = ::getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
    else if (n < 0 && errno != EINTR) return "";
  }
  if (got < sizeof(bytes)) return "";
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char b : bytes) {
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

}  // namespace

// Two pipes per child (its stdout and stderr), and the children inherit the limit: the
// default soft limit (1,024) stops a launch near 500 ranks, and each rank holds a socket
// per peer it connects. Raised to the hard limit; below what the ranks' pipes need, the
// launch stops here naming the limit.
static bool raiseFdLimit(int children) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return true;
  if (limit.rlim_cur < limit.rlim_max) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  }
  const rlim_t need = 2 * static_cast<rlim_t>(children) + 64;
  if (limit.rlim_cur == RLIM_INFINITY || limit.rlim_cur >= need) return true;
  std::fprintf(stderr,
               "gyrerun: %d ranks on this node need about %llu file descriptors here (two "
               "pipes each), but this process may open only %llu (its hard limit, "
               "RLIMIT_NOFILE): raise it with `ulimit -n %llu` (or LimitNOFILE= under systemd, "
               "nofile in /etc/security/limits.conf), or start fewer ranks per node\n",
               children, static_cast<unsigned long long>(need),
               static_cast<unsigned long long>(limit.rlim_cur),
               static_cast<unsigned long long>(need));
  return false;
}

int main(int argc, char** argv) {
  using namespace gyre::tools;
  ParseResult parsed = parseLaunchOptions(argc, argv);
  if (parsed.helpRequested) {
    std::fputs(launcherUsage(), stdout);
    return 0;
  }
  if (parsed.versionRequested) {
    std::printf("%s\n", gyre::versionLine("gyrerun").c_str());
    return 0;
  }
  if (!parsed.error.empty()) {
    std::fprintf(stderr, "gyrerun: %s\n\n%s", parsed.error.c_str(), launcherUsage());
    return 2;
  }
  const LaunchOptions& options = parsed.options;
  if (!raiseFdLimit(options.nprocPerNode)) return 1;

  RankEnvironment env;
  env.masterAddr = options.masterAddr.empty() ? "127.0.0.1" : options.masterAddr;
  if (options.nnodes > 1 && options.masterAddr.empty()) {
    // As torchrun, 127.0.0.1 stays the default (nodes may be namespaces of one machine),
    // but never silently: on real nodes the others cannot reach it.
    std::fprintf(stderr,
                 "gyrerun: --nnodes=%d without --master-addr: the ranks look for rank 0's store "
                 "at 127.0.0.1, which only works when every node is this machine; give every "
                 "node --master-addr=<node 0's address>\n",
                 options.nnodes);
  }
  env.runId = options.standalone && options.rdzvId == "none" ? randomRunId() : options.rdzvId;
  const bool secretGiven = nonEmptyEnv("GYRE_TOKEN") || nonEmptyEnv("GYRE_TOKEN_FILE");
  if (!secretGiven && options.nnodes == 1) {
    // One node: this gyrerun starts every rank, so it can make the job's secret alone.
    env.secret = randomSecret();
    if (env.secret.empty()) {
      reportLine("cannot read random bytes for the job's secret (getrandom failed)");
      return 1;
    }
  } else if (!secretGiven) {
    std::fprintf(stderr,
                 "gyrerun: --nnodes=%d without GYRE_TOKEN_FILE: each node's gyrerun cannot make "
                 "the same secret, so the job runs without one (anyone who reaches the store's "
                 "port can join it); give every node one file, mode 0600, with the same "
                 "random secret (docs/security.md)\n",
                 options.nnodes);
  }
  std::string error;
  env.masterPort = resolveMasterPort(options, error);
  if (env.masterPort < 0) {
    reportLine(error);
    return 1;
  }

  int signalFd = installSignalHandlers();
  if (signalFd < 0) {
    reportLine(std::string("cannot create the signal pipe: ") + std::strerror(errno));
    return 1;
  }
  // gyre's store, served here on node 0 for the whole run; the other nodes' ranks reach it
  // at node 0's address and the port every node derives alike.
  std::unique_ptr<AgentStore> store;
  if (options.agentStore) {
    const int storePort = resolveStorePort(options, env.masterPort, error);
    if (storePort < 0) {
      reportLine(error);
      return 1;
    }
    if (options.nodeRank == 0) {
      std::fflush(nullptr);
      const std::string program = storeProgram(error);
      if (!program.empty()) {
        store = AgentStore::start(program, env.masterAddr, storePort, env.secret, error);
      }
      if (!store) {
        reportLine(error);
        return 1;
      }
      env.agentStore = joinHostPort(env.masterAddr, store->port());
    } else {
      env.agentStore = joinHostPort(env.masterAddr, storePort);
    }
  }
  applyOmpDefault(options);
  for (;;) {
    // Anything buffered now would be copied into every forked child.
    std::fflush(nullptr);
    RankSupervisor supervisor(options, env, signalFd, store.get());
    const int status = supervisor.run();
    // --elastic spends --max-restarts on single ranks (the supervisor), never the group.
    if (status != 1 || options.elastic || env.restartCount >= options.maxRestarts) return status;
    if (store && !store->running()) {
      reportLine("not restarting the local group: the job's store is gone");
      return status;
    }
    ++env.restartCount;
    // One node picked its port alone, so the new group may take a fresh one (the old
    // store's port may still be in TIME_WAIT); several nodes keep the agreed one.
    if (options.masterPort < 0 && options.nnodes == 1) {
      const int port = resolveMasterPort(options, error);
      if (port > 0) env.masterPort = port;
    }
    reportLine("restarting the local group (restart " + std::to_string(env.restartCount) +
               " of at most " + std::to_string(options.maxRestarts) + ")");
  }
}
