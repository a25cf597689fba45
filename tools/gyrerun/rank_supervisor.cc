#include "tools/gyrerun/rank_supervisor.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace gyre::tools {
namespace {

using Clock = std::chrono::steady_clock;

// After SIGTERM, how long a rank may clean up before SIGKILL (torchrun waits similarly).
constexpr std::chrono::seconds kTermToKill{1};
// After the last rank is reaped, how long to wait for its pipes to reach EOF: only a
// grandchild that inherited them can keep them open, and it must not hold gyrerun.
constexpr std::chrono::seconds kDrainAfterExit{1};
// The longest poll() sleeps without an event: a safety net if a wake-up were lost, long
// enough that an idle gyrerun costs nothing.
constexpr std::chrono::milliseconds kMaxPollSleep{1000};

Clock::duration graceDuration(double seconds) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

std::string formatSeconds(double seconds) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", seconds);
  return text;
}

}  // namespace

void reportLine(const std::string& message) {
  std::string line = "gyrerun: " + message + "\n";
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

RankSupervisor::RankSupervisor(LaunchOptions options, RankEnvironment env, int signalFd,
                               AgentStore* store)
    : options_(std::move(options)), env_(std::move(env)), signalFd_(signalFd), store_(store) {}

int RankSupervisor::run() {
  startAll();
  while (runningCount() > 0 || anyRelayOpen()) {
    if (runningCount() == 0) {
      if (!draining_) {
        draining_ = true;
        drainDeadline_ = Clock::now() + kDrainAfterExit;
      } else if (Clock::now() >= drainDeadline_) {
        for (auto& r : ranks_) {
          r->out->close();
          r->err->close();
        }
        break;
      }
    }
    pollOnce();
  }
  return exitStatus_;
}

void RankSupervisor::startAll() {
  for (int local = 0; local < options_.nprocPerNode; ++local) {
    std::string error;
    std::unique_ptr<RankProcess> rank = startRank(options_, env_, local, &stdout_, &stderr_, error);
    if (!rank) {
      reportLine("cannot start rank " + std::to_string(options_.globalRank(local)) + ": " + error);
      failJob(1);
      // No grace: the job cannot run without this rank, and the others have not failed.
      signalRunning(SIGTERM);
      phase_ = Phase::kTerminating;
      hasDeadline_ = true;
      deadline_ = Clock::now() + kTermToKill;
      return;
    }
    ranks_.push_back(std::move(rank));
  }
}

void RankSupervisor::pollOnce() {
  std::vector<pollfd> fds;
  std::vector<LineRelay*> relays;
  fds.push_back({signalFd_, POLLIN, 0});
  for (auto& r : ranks_) {
    for (LineRelay* relay : {r->out.get(), r->err.get()}) {
      if (!relay->open()) continue;
      fds.push_back({relay->fd(), POLLIN, 0});
      relays.push_back(relay);
    }
  }
  auto sleep = kMaxPollSleep;
  auto now = Clock::now();
  if (hasDeadline_) {
    sleep = std::min(sleep, std::chrono::ceil<std::chrono::milliseconds>(deadline_ - now));
  }
  if (draining_) {
    sleep = std::min(sleep, std::chrono::ceil<std::chrono::milliseconds>(drainDeadline_ - now));
  }
  int timeoutMs = static_cast<int>(std::max<long long>(0, sleep.count()));
  int ready = ::poll(fds.data(), fds.size(), timeoutMs);
  if (ready < 0 && errno != EINTR) {
    reportLine(std::string("poll failed: ") + std::strerror(errno));
    ::usleep(100 * 1000);  // whatever it is, do not spin on it
  }
  if (ready > 0) {
    for (size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents != 0) relays[i - 1]->onReadable();
    }
  }
  // Signals and exits are checked on every wake-up, whatever woke us: cheap, and robust
  // against a SIGCHLD whose byte the full self-pipe dropped.
  handleSignals();
  watchStore();  // first: a rank that failed because the store died is not restarted
  reapExited();
  restartQueued();
  if (hasDeadline_ && Clock::now() >= deadline_) onDeadline();
}

void RankSupervisor::handleSignals() {
  unsigned char signals[64];
  ssize_t n;
  while ((n = ::read(signalFd_, signals, sizeof(signals))) > 0) {
    for (ssize_t i = 0; i < n; ++i) {
      int signo = signals[i];
      if (signo == SIGCHLD) continue;  // reapExited() runs next anyway
      if (phase_ == Phase::kTerminating || phase_ == Phase::kKilled) {
        if (runningCount() > 0) {
          reportLine("got " + signalName(signo) + " again: sending SIGKILL to ranks " +
                     runningRankList());
        }
        failJob(128 + signo);
        signalRunning(SIGKILL);
        phase_ = Phase::kKilled;
        hasDeadline_ = false;
        continue;
      }
      failJob(128 + signo);
      if (runningCount() > 0) {
        reportLine("got " + signalName(signo) + ": forwarding it to ranks " + runningRankList());
      }
      signalRunning(signo);
      phase_ = Phase::kTerminating;
      hasDeadline_ = true;
      deadline_ = Clock::now() + graceDuration(options_.graceSeconds) + kTermToKill;
    }
  }
}

void RankSupervisor::reapExited() {
  for (auto& r : ranks_) {
    if (!r->running) continue;
    int status = 0;
    pid_t got;
    do {
      got = ::waitpid(r->pid, &status, WNOHANG);
    } while (got < 0 && errno == EINTR);
    if (got != r->pid) continue;
    r->running = false;
    r->waitStatus = status;
    // Its last output first, then gyrerun's verdict on it.
    r->out->drain();
    r->err->drain();
    onRankExit(*r);
  }
}

void RankSupervisor::watchStore() {
  std::string how;
  if (store_ == nullptr || !store_->reapIfExited(how)) return;
  reportLine("the job's store, " + store_->describe() + ", exited: " + how +
             "; ranks that need it (to create a communicator) will fail");
}

void RankSupervisor::onRankExit(RankProcess& rank) {
  if (exitedCleanly(rank.waitStatus)) return;
  std::string who = "rank " + std::to_string(rank.rank) + " (local rank " +
                    std::to_string(rank.localRank) + ", pid " + std::to_string(rank.pid) + ")";
  std::string how = describeWaitStatus(rank.waitStatus);
  switch (phase_) {
    case Phase::kRunning: {
      if (options_.elastic) {
        onElasticFailure(rank, who, how);
        return;
      }
      reportLine(who + " failed: " + how);
      failJob(1);
      size_t others = runningCount();
      if (others == 0) return;
      reportLine("stopping the other " + std::to_string(others) + " rank(s) (" + runningRankList() +
                 "): SIGTERM in " + formatSeconds(options_.graceSeconds) +
                 " s unless they exit first, SIGKILL 1 s later");
      phase_ = Phase::kGrace;
      hasDeadline_ = true;
      deadline_ = Clock::now() + graceDuration(options_.graceSeconds);
      return;
    }
    case Phase::kGrace:
      reportLine(who + " failed too: " + how);
      return;
    case Phase::kTerminating:
    case Phase::kKilled:
      reportLine(who + " stopped: " + how);
      return;
  }
}

void RankSupervisor::onElasticFailure(const RankProcess& rank, const std::string& who,
                                      const std::string& how) {
  if (store_ != nullptr && !store_->running()) {
    reportLine(who + " failed: " + how + "; not restarted: the job's store is gone, and a "
               "restarted rank meets the others there");
    failJob(1);
    return;
  }
  if (elasticRestarts_ < options_.maxRestarts) {
    ++elasticRestarts_;
    reportLine(who + " failed: " + how + "; the others go on without it, and it restarts as a "
               "newcomer they grow back in (restart " + std::to_string(elasticRestarts_) +
               " of at most " + std::to_string(options_.maxRestarts) + " on this node)");
    restartQueue_.push_back(rank.localRank);
    return;
  }
  reportLine(who + " failed: " + how + "; not restarted (--max-restarts " +
             std::to_string(options_.maxRestarts) +
             " used on this node): the others go on without it");
  failJob(1);
}

void RankSupervisor::restartQueued() {
  std::vector<int> queue;
  queue.swap(restartQueue_);
  for (int local : queue) {
    if (phase_ != Phase::kRunning) return;  // a signal to gyrerun ends the job instead
    std::string error;
    std::unique_ptr<RankProcess> rank =
        startRank(options_, env_, local, &stdout_, &stderr_, error, /*newcomer=*/true);
    if (!rank) {
      reportLine("cannot restart rank " + std::to_string(options_.globalRank(local)) + ": " +
                 error + "; the others go on without it");
      failJob(1);
      continue;
    }
    // The failed process's entry stays (its relays may still drain); the new one is added.
    ranks_.push_back(std::move(rank));
  }
}

void RankSupervisor::onDeadline() {
  if (runningCount() == 0) {
    hasDeadline_ = false;
    return;
  }
  if (phase_ == Phase::kGrace) {
    reportLine("grace period over: sending SIGTERM to ranks " + runningRankList());
    signalRunning(SIGTERM);
    phase_ = Phase::kTerminating;
    deadline_ = Clock::now() + kTermToKill;
  } else if (phase_ == Phase::kTerminating) {
    reportLine("sending SIGKILL to ranks " + runningRankList());
    signalRunning(SIGKILL);
    phase_ = Phase::kKilled;
    hasDeadline_ = false;
  }
}

void RankSupervisor::failJob(int exitStatus) {
  if (exitStatus_ == 0) exitStatus_ = exitStatus;
}

void RankSupervisor::signalRunning(int signo) {
  for (auto& r : ranks_) {
    // The pid is still ours: a child that exited stays a zombie until we reap it.
    if (r->running) ::kill(r->pid, signo);
  }
}

size_t RankSupervisor::runningCount() const {
  return static_cast<size_t>(
      std::count_if(ranks_.begin(), ranks_.end(), [](const auto& r) { return r->running; }));
}

bool RankSupervisor::anyRelayOpen() const {
  return std::any_of(ranks_.begin(), ranks_.end(),
                     [](const auto& r) { return r->out->open() || r->err->open(); });
}

std::string RankSupervisor::runningRankList() const {
  std::string list;
  for (auto& r : ranks_) {
    if (!r->running) continue;
    if (!list.empty()) list += ", ";
    list += std::to_string(r->rank);
  }
  return list;
}

}  // namespace gyre::tools
