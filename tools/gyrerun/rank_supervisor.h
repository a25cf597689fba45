// RankSupervisor: starts gyrerun's local ranks, relays their output, and decides when the
// job is over and with which exit status.
//
// Contract: run() starts every local rank, then loops on poll() over the ranks' output
// pipes and `signalFd` (a self-pipe the SIGCHLD/SIGINT/SIGTERM/SIGHUP handlers write the
// signal number to) with a timeout, so it sleeps between events and never spins. It
// returns once every rank has been reaped:
//   * every rank exited 0                          -> 0
//   * a rank exited non-zero or died by a signal   -> 1. The first failure is reported
//     at once on stderr ("gyrerun: rank R (local rank L, pid P) failed: exit code N" or
//     "...: signal SIGKILL (9)"); the other ranks get `graceSeconds` to report their own
//     errors (a peer's death usually makes them fail too), then SIGTERM, and 1 s later
//     SIGKILL;
//   * with --elastic (options.elastic) a rank that fails does not stop the others: it
//     is started again alone, as a newcomer (GYRE_ELASTIC_NEWCOMER=1), up to
//     --max-restarts times on this node ("gyrerun: rank R ... failed: ...; the others go
//     on without it, and it restarts as a newcomer ..."); past that it stays down and
//     the status is 1 when the run ends. The survivors shrink and grow by themselves
//     (the communicator's, not gyrerun's, doing);
//   * gyrerun got SIGINT/SIGTERM/SIGHUP            -> 128 + signal. The signal is
//     forwarded to every running rank, which then has `graceSeconds` + 1 s before SIGKILL;
//     a second such signal sends SIGKILL at once.
// The first of these events decides the status. Only the pids it started are signalled
// or waited for. When gyrerun serves gyre's store (`store`, owned by the caller), a store
// that exits during the run is reported at once ("gyrerun: the job's store ... exited:
// ...") and reaped; the ranks go on (they fail by themselves if they need it). The store
// is not stopped here: it outlives the group, across restarts. Single-threaded.
#pragma once

#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "tools/gyrerun/agent_store.h"
#include "tools/gyrerun/launcher_options.h"
#include "tools/gyrerun/rank_process.h"

namespace gyre::tools {

class RankSupervisor {
 public:
  RankSupervisor(LaunchOptions options, RankEnvironment env, int signalFd,
                 AgentStore* store = nullptr);

  int run();

 private:
  using Clock = std::chrono::steady_clock;
  enum class Phase {
    kRunning,      // no failure yet
    kGrace,        // a rank failed; the others may still report theirs until deadline_
    kTerminating,  // SIGTERM (or a forwarded signal) sent; SIGKILL at deadline_
    kKilled,       // SIGKILL sent; waiting for the reaping
  };

  void startAll();
  void pollOnce();
  void handleSignals();
  void reapExited();
  void watchStore();
  void onRankExit(RankProcess& rank);
  void onElasticFailure(const RankProcess& rank, const std::string& who, const std::string& how);
  void restartQueued();
  void onDeadline();
  void failJob(int exitStatus);
  void signalRunning(int signo);
  size_t runningCount() const;
  bool anyRelayOpen() const;
  std::string runningRankList() const;

  LaunchOptions options_;
  RankEnvironment env_;
  int signalFd_;
  AgentStore* store_;
  // Declared before ranks_ so that they outlive the relays that point to them.
  OutputSink stdout_{STDOUT_FILENO};
  OutputSink stderr_{STDERR_FILENO};
  std::vector<std::unique_ptr<RankProcess>> ranks_;
  Phase phase_ = Phase::kRunning;
  bool hasDeadline_ = false;
  Clock::time_point deadline_;
  bool draining_ = false;  // all ranks reaped; pipes kept open by grandchildren
  Clock::time_point drainDeadline_;
  int exitStatus_ = 0;
  int elasticRestarts_ = 0;       // --elastic restarts made on this node
  std::vector<int> restartQueue_;  // local ranks to restart after this round of reaping
};

// Writes "gyrerun: <message>\n" to stderr with one write(2).
void reportLine(const std::string& message);

}  // namespace gyre::tools
