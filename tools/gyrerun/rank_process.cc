#include "tools/gyrerun/rank_process.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "base/cpu_binding.h"
#include "tools/gyrerun/forked_child.h"
#include "tools/gyrerun/torch_compat.h"

extern char** environ;

namespace gyre::tools {
namespace {

// The variables gyrerun sets; inherited ones of the same name are dropped, so a nested
// launch (a gyrerun inside a job that already has RANK) gets consistent values.
std::vector<std::string> rankVariables(const LaunchOptions& o, const RankEnvironment& env,
                                       int localRank) {
  return {
      "RANK=" + std::to_string(o.globalRank(localRank)),
      "WORLD_SIZE=" + std::to_string(o.worldSize()),
      "LOCAL_RANK=" + std::to_string(localRank),
      "LOCAL_WORLD_SIZE=" + std::to_string(o.nprocPerNode),
      "GROUP_RANK=" + std::to_string(o.nodeRank),
      "GROUP_WORLD_SIZE=" + std::to_string(o.nnodes),
      "MASTER_ADDR=" + env.masterAddr,
      "MASTER_PORT=" + std::to_string(env.masterPort),
      // torchrun's: one role, so role ranks are the ranks.
      "ROLE_RANK=" + std::to_string(o.globalRank(localRank)),
      "ROLE_WORLD_SIZE=" + std::to_string(o.worldSize()),
      "ROLE_NAME=" + o.role,
      "TORCHELASTIC_RUN_ID=" + env.runId,
      "TORCHELASTIC_RESTART_COUNT=" + std::to_string(env.restartCount),
      "TORCHELASTIC_MAX_RESTARTS=" + std::to_string(o.maxRestarts),
      // False: torch's rank 0 serves torch's TCPStore at MASTER_PORT. gyre's own store,
      // when gyrerun serves it, is GYRE_AGENT_STORE: torch's clients do not speak its
      // protocol, so True would break every torch.distributed program under gyrerun.
      "TORCHELASTIC_USE_AGENT_STORE=False",
  };
}

// Inherited variables dropped even when gyrerun sets no value for them: they belong to
// the job that started this gyrerun, not to its ranks.
bool droppedFromParent(const std::string& name) {
  return name == "GYRE_AGENT_STORE" || name == "GYRE_ELASTIC" || name == "GYRE_ELASTIC_NEWCOMER";
}

std::vector<std::string> childEnvironment(const LaunchOptions& o, const RankEnvironment& env,
                                          int localRank, bool newcomer) {
  std::vector<std::string> vars = rankVariables(o, env, localRank);
  if (!env.secret.empty()) vars.push_back("GYRE_TOKEN=" + env.secret);
  if (!env.agentStore.empty()) vars.push_back("GYRE_AGENT_STORE=" + env.agentStore);
  if (o.elastic) vars.push_back("GYRE_ELASTIC=1");
  if (newcomer) vars.push_back("GYRE_ELASTIC_NEWCOMER=1");
  std::vector<std::string> result;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry = *e;
    std::string name = entry.substr(0, entry.find('='));
    bool replaced = droppedFromParent(name);
    for (const std::string& v : vars) replaced |= v.compare(0, name.size() + 1, name + "=") == 0;
    if (!replaced) result.push_back(std::move(entry));
  }
  result.insert(result.end(), vars.begin(), vars.end());
  return result;
}

// The CPU for this local rank as a set of one (base/cpu_binding.h: the rule GYRE_BIND=core
// follows too; 4 ranks on 2 CPUs as 0 0 1 1).
bool coreFor(int localRank, int localSize, cpu_set_t& out, std::string& error) {
  int cpu = 0;
  if (!chooseCpu(localRank, localSize, cpu, error)) {
    error = "--bind core: " + error;
    return false;
  }
  CPU_ZERO(&out);
  CPU_SET(cpu, &out);
  return true;
}

// Runs in the forked child: only async-signal-safe calls until exec, since the parent's
// state (malloc locks) is whatever it was at fork.
[[noreturn]] void execChild(int outFd, int errFd, pid_t parent, char** argv, char** envp,
                            const cpu_set_t* cpus) {
  if (::dup2(outFd, STDOUT_FILENO) < 0 || ::dup2(errFd, STDERR_FILENO) < 0) ::_exit(127);
  if (cpus != nullptr && ::sched_setaffinity(0, sizeof(cpu_set_t), cpus) != 0) {
    writeString(STDERR_FILENO, "gyrerun: --bind core: sched_setaffinity failed\n");
    ::_exit(127);
  }
  dieWithParent(parent);
  resetSignalsForExec();  // signals were blocked across fork (tools/gyrerun/forked_child.h)

  ::execvpe(argv[0], argv, envp);
  int err = errno;
  writeString(STDERR_FILENO, "gyrerun: cannot execute '");
  writeString(STDERR_FILENO, argv[0]);
  writeString(STDERR_FILENO, "': ");
  writeString(STDERR_FILENO, ::strerrordesc_np(err));
  writeString(STDERR_FILENO, "\n");
  ::_exit(127);
}

}  // namespace

std::unique_ptr<RankProcess> startRank(const LaunchOptions& options, const RankEnvironment& env,
                                       int localRank, OutputSink* out, OutputSink* err,
                                       std::string& error, bool newcomer) {
  std::vector<std::string> args = rankCommand(options, localRank);
  std::vector<std::string> vars = childEnvironment(options, env, localRank, newcomer);
  std::vector<char*> argv = pointers(args);
  std::vector<char*> envp = pointers(vars);

  int outPipe[2], errPipe[2];
  if (::pipe2(outPipe, O_CLOEXEC) != 0) {
    error = std::string("pipe: ") + std::strerror(errno);
    return nullptr;
  }
  if (::pipe2(errPipe, O_CLOEXEC) != 0) {
    error = std::string("pipe: ") + std::strerror(errno);
    ::close(outPipe[0]);
    ::close(outPipe[1]);
    return nullptr;
  }
  // --bind core: the CPU for this local rank, chosen before fork (the child only applies it).
  cpu_set_t cpus;
  const bool bind = options.bind == BindMode::kCore && coreFor(localRank, options.nprocPerNode, cpus, error);
  if (options.bind == BindMode::kCore && !bind) {
    ::close(outPipe[0]);
    ::close(outPipe[1]);
    ::close(errPipe[0]);
    ::close(errPipe[1]);
    return nullptr;
  }
  // Block every signal across fork, so none reaches the child while it still runs
  // gyrerun's handlers (as posix_spawn does); the child resets them, then unblocks.
  sigset_t all, saved;
  sigfillset(&all);
  ::sigprocmask(SIG_SETMASK, &all, &saved);
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid == 0) {
    execChild(outPipe[1], errPipe[1], parent, argv.data(), envp.data(), bind ? &cpus : nullptr);
  }
  int forkErrno = errno;
  ::sigprocmask(SIG_SETMASK, &saved, nullptr);
  ::close(outPipe[1]);
  ::close(errPipe[1]);
  if (pid < 0) {
    error = std::string("fork: ") + std::strerror(forkErrno);
    ::close(outPipe[0]);
    ::close(errPipe[0]);
    return nullptr;
  }
  // Non-blocking reads let one poll loop serve every rank, and let drain() stop at
  // "nothing more for now" instead of blocking on a pipe a grandchild keeps open.
  ::fcntl(outPipe[0], F_SETFL, ::fcntl(outPipe[0], F_GETFL) | O_NONBLOCK);
  ::fcntl(errPipe[0], F_SETFL, ::fcntl(errPipe[0], F_GETFL) | O_NONBLOCK);

  auto rank = std::make_unique<RankProcess>();
  rank->rank = options.globalRank(localRank);
  rank->localRank = localRank;
  rank->pid = pid;
  rank->running = true;
  std::string prefix = "[rank " + std::to_string(rank->rank) + "] ";
  bool prefixOut = options.prefix == PrefixMode::kAll;
  bool prefixErr = options.prefix != PrefixMode::kNone;
  rank->out = std::make_unique<LineRelay>(outPipe[0], out, prefixOut ? prefix : "");
  rank->err = std::make_unique<LineRelay>(errPipe[0], err, prefixErr ? prefix : "");
  return rank;
}

std::string describeWaitStatus(int waitStatus) {
  if (WIFEXITED(waitStatus)) return "exit code " + std::to_string(WEXITSTATUS(waitStatus));
  if (WIFSIGNALED(waitStatus)) {
    int sig = WTERMSIG(waitStatus);
    std::string text = "signal " + signalName(sig) + " (" + std::to_string(sig) + ")";
    if (WCOREDUMP(waitStatus)) text += ", core dumped";
    return text;
  }
  return "wait status " + std::to_string(waitStatus);
}

bool exitedCleanly(int waitStatus) { return WIFEXITED(waitStatus) && WEXITSTATUS(waitStatus) == 0; }

std::string signalName(int signo) {
  const char* abbrev = ::sigabbrev_np(signo);
  if (abbrev == nullptr) return "SIG" + std::to_string(signo);  // e.g. a real-time signal
  return std::string("SIG") + abbrev;
}

}  // namespace gyre::tools
