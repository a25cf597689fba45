// RankProcess: one local rank started by gyrerun (fork + execvp), with the pipes that
// carry its stdout and stderr back to gyrerun.
//
// Contract: startRank() forks a child whose environment is gyrerun's plus the torchrun
// variables of this rank (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK,
// GROUP_WORLD_SIZE, ROLE_RANK, ROLE_WORLD_SIZE, ROLE_NAME, MASTER_ADDR, MASTER_PORT,
// TORCHELASTIC_RUN_ID, TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_MAX_RESTARTS,
// TORCHELASTIC_USE_AGENT_STORE, and GYRE_AGENT_STORE when gyrerun's store serves the job;
// any inherited values are replaced, and an inherited GYRE_AGENT_STORE is dropped when
// there is none: a nested job must not join an outer job's store). The argv is
// rankCommand()'s (python3 for scripts, --local_rank in torch-launch mode). The
// child's stdout/stderr are pipes whose read ends the returned object's relays own; the
// child gets SIGKILL if gyrerun dies without stopping it (PR_SET_PDEATHSIG), so a killed
// launcher leaves no ranks behind. If exec fails the child says why on its stderr and
// exits 127, as a shell does. With --bind core the child is pinned to one CPU before exec
// (chosen in the parent among the k CPUs gyrerun may use: the localRank-th where there are
// enough, else consecutive local ranks share one, local rank r on the (r * k / n)-th). gyrerun signals
// and reaps only these pids.
// Single-threaded use (fork from a multi-threaded process would not be safe here).
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>

#include "tools/gyrerun/launcher_options.h"
#include "tools/gyrerun/line_relay.h"

namespace gyre::tools {

struct RankProcess {
  int rank = -1;
  int localRank = -1;
  pid_t pid = -1;
  bool running = false;
  int waitStatus = 0;  // from waitpid, valid once !running
  std::unique_ptr<LineRelay> out;
  std::unique_ptr<LineRelay> err;
};

struct RankEnvironment {
  std::string masterAddr;
  int masterPort = 0;
  std::string runId = "none";  // TORCHELASTIC_RUN_ID
  int restartCount = 0;        // TORCHELASTIC_RESTART_COUNT: restarts of the group so far
  // GYRE_TOKEN for the ranks: the job's secret gyrerun made (empty: the ranks inherit
  // GYRE_TOKEN or GYRE_TOKEN_FILE from gyrerun's environment, or have none). Passed in the
  // environment, never on a command line: /proc/<pid>/environ is readable only by the
  // process's user (and root), /proc/<pid>/cmdline by everyone.
  std::string secret;
  // GYRE_AGENT_STORE for the ranks: "host:port" of gyre's store served by node 0's gyrerun
  // (tools/gyrerun/agent_store.h); empty with --no-agent-store (rank 0 serves it).
  std::string agentStore;
};

// Starts local rank `localRank`, relaying its output to `out` and `err` (which must
// outlive the RankProcess). Returns nullptr and sets `error` if a pipe or the fork fails
// (nothing is left running then). With --elastic every rank gets GYRE_ELASTIC=1, and a
// `newcomer` (a rank restarted alone after it failed) GYRE_ELASTIC_NEWCOMER=1 as well;
// inherited values of both are dropped otherwise.
std::unique_ptr<RankProcess> startRank(const LaunchOptions& options, const RankEnvironment& env,
                                       int localRank, OutputSink* out, OutputSink* err,
                                       std::string& error, bool newcomer = false);

// "exit code 3", "signal SIGKILL (9)", "signal SIGSEGV (11), core dumped".
std::string describeWaitStatus(int waitStatus);

bool exitedCleanly(int waitStatus);

// "SIGTERM"; "SIG42" for one without a name.
std::string signalName(int signo);

}  // namespace gyre::tools
