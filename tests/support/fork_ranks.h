// The one way the tests fork processes: ForkedRanks runs a function in n forked children
// (the ranks), orders them without sleeping, and collects how each ended; CommRanks is
// the same with a Communicator built in every rank. (gyre::spawn, ring/spawn.h, is the
// users' way and is tested as such; it cannot show a killed rank's error or its log.)
//
// A rank:
//  - runs body(rank) in a child forked from the calling thread, with its stderr (the
//    library's log) captured in memory (result.log), and exits 0 when the body returned,
//    1 when it threw: the result holds the gyre::ErrorCode, the message and the time it
//    ended (CLOCK_MONOTONIC, comparable across processes). GoogleTest assertions in a
//    child are not seen by the parent: a child reports by throwing (an assertion that
//    failed in it anyway fails its result, saying so);
//  - dies with the test process (PR_SET_PDEATHSIG), so nothing outlives a crashed test;
//  - may add named values to its report at once (note()), so they survive a later kill.
//
// Ordering (Signals; alone, it serves processes that gyre::spawn forks too), in the ranks
// and in the parent, through counters in an anonymous shared mapping (no name in
// /dev/shm; futex waits, never a sleep):
//  - post(name) / await(name, count): a counter; barrier(name): every rank posts, then
//    waits for all n;
//  - say(what) / waitFor(rank, what): "wait until rank k says X";
//  - waitEnded(rank): until that rank's process is gone, however it ended (its report
//    pipe's hang-up);
//  - stayAlive(): a rank that must be there and do nothing until the parent is done with
//    it (release(), join() or the destructor);
//  - publish(name, bytes) / read(name): a small value from one rank to the others;
//  - waitForLog(rank, text): until a rank's log says something (the library's own
//    output, which signals nothing else: this one polls).
// Every wait is bounded (the group's limit unless given) and says what it waited for.
//
// The parent: join(deadline) reaps every rank by the deadline and SIGKILLs what is left,
// marking it hung (killLast: a stopped rank killed once the others ended, not counted as
// hung); describe() names the rank, how it ended and its log. The destructor kills and
// reaps anything still running: no zombie, no leftover.
//
// Threads: the group makes none. A process that forks while it has threads is what
// ThreadSanitizer refuses; tests that need a server thread (CommRanks's store) start it
// after forking.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "base/error.h"
#include "base/options.h"
#include "base/secret.h"
#include "ring/communicator.h"
#include "store/tcp_store.h"
#include "free_ports.h"
#include "transport/socket.h"

namespace gyre::testing {

using namespace std::chrono_literals;

// How one rank ended.
struct RankResult {
  int rank = -1;
  bool reported = false;  // the body ended and said how (false: killed, or died otherwise)
  bool ok = false;        // the body returned
  bool hung = false;      // still running at join()'s deadline, and killed then
  int code = 0;           // the gyre::ErrorCode it threw (0: not a gyre::Error)
  Clock::time_point endedAt{};  // when the body ended (CommRanks: before the destruction)
  double seconds = 0;           // from start() to endedAt
  double destroySeconds = 0;    // CommRanks: how long destroying the communicator took
  std::string message;          // what it threw
  std::string log;              // its stderr
  int status = 0;               // from waitpid
  std::map<std::string, std::string> notes;

  bool killedBy(int sig) const { return WIFSIGNALED(status) && WTERMSIG(status) == sig; }
  std::string note(const std::string& key) const {
    auto it = notes.find(key);
    return it == notes.end() ? std::string() : it->second;
  }
  std::string ended() const {
    if (hung) return "hung (killed at the deadline)";
    if (WIFSIGNALED(status)) return fmt::format("killed by signal {}", WTERMSIG(status));
    return fmt::format("exit status {}", WEXITSTATUS(status));
  }
  std::string describe() const {
    return fmt::format("rank {}: {}, reported={} ok={} code={} after {:.2f} s: '{}'\nlog:\n{}",
                       rank, ended(), reported, ok, code, seconds, message, log);
  }
};

inline double secondsBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

namespace fork_ranks_detail {

constexpr int kMaxRanks = 64;
constexpr int kCounters = 256;
constexpr int kBlobs = 32;
constexpr size_t kNameBytes = 64;
constexpr size_t kBlobBytes = 1024;

static_assert(sizeof(std::atomic<uint32_t>) == 4 && std::atomic<uint32_t>::is_always_lock_free,
              "a futex word");

struct Counter {
  std::atomic<uint64_t> key;    // hash of the name; 0: free
  std::atomic<uint32_t> value;  // the futex word
  char name[kNameBytes];        // for messages
};
struct Blob {
  std::atomic<uint64_t> key;
  std::atomic<uint32_t> size;  // the futex word: 0 until published, then bytes + 1
  char data[kBlobBytes];
};
// The mapping every rank of a group shares with the parent (MAP_SHARED | MAP_ANONYMOUS).
struct Shared {
  std::atomic<uint32_t> pids[kMaxRanks];  // written by the parent after each fork
  Counter counters[kCounters];
  Blob blobs[kBlobs];
};

inline uint64_t hashOf(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h | 1;  // never 0 (free)
}

// FUTEX_WAIT (not _PRIVATE: the word is shared between processes) for at most `limit`.
inline void futexWait(std::atomic<uint32_t>* word, uint32_t expected, Clock::duration limit) {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(limit).count();
  timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}
inline void futexWakeAll(std::atomic<uint32_t>* word) {
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

// Waits until ready() or `until`, waking when `word` changes (and every 100 ms regardless).
template <typename Ready>
bool waitOn(std::atomic<uint32_t>* word, Clock::time_point until, Ready ready) {
  for (;;) {
    const uint32_t seen = word->load();
    if (ready(seen)) return true;
    const auto now = Clock::now();
    if (now >= until) return false;
    futexWait(word, seen, std::min<Clock::duration>(until - now, 100ms));
  }
}

// The write ends a forking process holds for its groups (the parent's side of each
// group's "alive" pipe, report pipes not yet handed to their child): a child closes them
// all but its own, so that each pipe's hang-up means what it says.
inline std::set<int>& parentOnlyFds() {
  static std::set<int> fds;
  return fds;
}

inline void writeAll(int fd, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    ssize_t w = ::write(fd, s.data() + done, s.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    done += static_cast<size_t>(w);
  }
}

inline std::string readWhole(int fd) {
  std::string text;
  char buf[8192];
  for (off_t at = 0;;) {
    ssize_t r = ::pread(fd, buf, sizeof(buf), at);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    text.append(buf, static_cast<size_t>(r));
    at += r;
  }
  return text;
}

}  // namespace fork_ranks_detail

// Signals: the ordering alone, for processes that something else forks (gyre::spawn's
// ranks, a launcher's): made before the fork, used in every process forked after it.
class Signals {
 public:
  explicit Signals(Clock::duration limit = 120s) : limit_(limit), creator_(::getpid()) {
    void* p = ::mmap(nullptr, sizeof(fork_ranks_detail::Shared), PROT_READ | PROT_WRITE,
                     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) failSystem(errno, "mmap");
    shared_ = new (p) fork_ranks_detail::Shared();
  }
  ~Signals() {
    if (::getpid() == creator_) ::munmap(shared_, sizeof(fork_ranks_detail::Shared));
  }
  Signals(const Signals&) = delete;
  Signals& operator=(const Signals&) = delete;

  Clock::duration limit() const { return limit_; }

  void post(const std::string& name, uint32_t times = 1) {
    fork_ranks_detail::Counter& c = counter(name);
    c.value.fetch_add(times);
    fork_ranks_detail::futexWakeAll(&c.value);
  }
  uint32_t count(const std::string& name) { return counter(name).value.load(); }
  // True once `name` was posted `times` times; false when `limit` passed first.
  bool tryAwait(const std::string& name, uint32_t times, Clock::duration limit) {
    fork_ranks_detail::Counter& c = counter(name);
    return fork_ranks_detail::waitOn(&c.value, Clock::now() + limit,
                                     [&](uint32_t v) { return v >= times; });
  }
  // As tryAwait, throwing gyre::Error(kTimeout) naming the wait when the limit passes.
  void await(const std::string& name, uint32_t times) { await(name, times, limit_); }
  void await(const std::string& name, uint32_t times, Clock::duration limit) {
    if (!tryAwait(name, times, limit)) {
      fail(ErrorCode::kTimeout, "{}: '{}' was posted {} of {} times in {} ms", who(), name,
           count(name), times, std::chrono::duration_cast<std::chrono::milliseconds>(limit).count());
    }
  }
  // Each of `parties` processes posts `name`, then waits for all of them.
  void barrier(const std::string& name, uint32_t parties) {
    post(name);
    await(name, parties);
  }
  // Rank `r` says `what` (-1: the parent); waitFor(r, what) waits until it has.
  void say(int r, const std::string& what) { post(saidKey(r, what)); }
  void waitFor(int r, const std::string& what) { waitFor(r, what, limit_); }
  void waitFor(int r, const std::string& what, Clock::duration limit) {
    await(saidKey(r, what), 1, limit);
  }
  bool tryWaitFor(int r, const std::string& what, Clock::duration limit) {
    return tryAwait(saidKey(r, what), 1, limit);
  }
  bool said(int r, const std::string& what) { return count(saidKey(r, what)) > 0; }

  // A value of at most 1 KiB under `name`, for the others to read (read() waits for it).
  void publish(const std::string& name, const std::string& bytes) {
    if (bytes.size() > fork_ranks_detail::kBlobBytes) {
      fail(ErrorCode::kInvalidArgument, "publish('{}'): {} bytes", name, bytes.size());
    }
    fork_ranks_detail::Blob& b = blob(name);
    if (b.size.load() != 0) fail(ErrorCode::kInvalidArgument, "publish('{}'): published twice", name);
    std::memcpy(b.data, bytes.data(), bytes.size());
    b.size.store(static_cast<uint32_t>(bytes.size() + 1));
    fork_ranks_detail::futexWakeAll(&b.size);
  }
  std::string read(const std::string& name) { return read(name, limit_); }
  std::string read(const std::string& name, Clock::duration limit) {
    fork_ranks_detail::Blob& b = blob(name);
    if (!fork_ranks_detail::waitOn(&b.size, Clock::now() + limit, [](uint32_t v) { return v != 0; })) {
      fail(ErrorCode::kTimeout, "{}: '{}' was not published in {} ms", who(), name,
           std::chrono::duration_cast<std::chrono::milliseconds>(limit).count());
    }
    return std::string(b.data, b.size.load() - 1);
  }

 protected:
  std::string who() const {
    if (self_ >= 0) return fmt::format("rank {}", self_);
    return ::getpid() == creator_ ? std::string("the parent") : fmt::format("process {}", ::getpid());
  }
  static std::string saidKey(int r, const std::string& what) {
    return r < 0 ? "said:parent:" + what : fmt::format("said:{}:{}", r, what);
  }

  fork_ranks_detail::Counter& counter(const std::string& name) {
    const uint64_t key = fork_ranks_detail::hashOf(name);
    for (int i = 0; i < fork_ranks_detail::kCounters; ++i) {
      fork_ranks_detail::Counter& c =
          shared_->counters[(key + static_cast<uint64_t>(i)) % fork_ranks_detail::kCounters];
      uint64_t seen = c.key.load();
      if (seen == 0 && c.key.compare_exchange_strong(seen, key)) {
        std::snprintf(c.name, sizeof(c.name), "%s", name.c_str());
        return c;
      }
      if (seen == key) return c;
    }
    throw std::length_error("Signals: more than 256 counters");
  }
  fork_ranks_detail::Blob& blob(const std::string& name) {
    const uint64_t key = fork_ranks_detail::hashOf(name);
    for (int i = 0; i < fork_ranks_detail::kBlobs; ++i) {
      fork_ranks_detail::Blob& b =
          shared_->blobs[(key + static_cast<uint64_t>(i)) % fork_ranks_detail::kBlobs];
      uint64_t seen = b.key.load();
      if (seen == 0 && b.key.compare_exchange_strong(seen, key)) return b;
      if (seen == key) return b;
    }
    throw std::length_error("Signals: more than 32 published values");
  }

  const Clock::duration limit_;
  const pid_t creator_;
  fork_ranks_detail::Shared* shared_ = nullptr;
  int self_ = -1;  // a rank of ForkedRanks: its number
};

class ForkedRanks : public Signals {
 public:
  using Body = std::function<void(int rank)>;  // throws on failure

  // `limit` bounds every wait that is not given one, and join() without a deadline.
  explicit ForkedRanks(int n, Clock::duration limit = 120s) : Signals(limit), n_(n), children_(n) {
    if (n < 1 || n > fork_ranks_detail::kMaxRanks) {
      throw std::invalid_argument(fmt::format("ForkedRanks: {} ranks", n));
    }
    if (::pipe2(alive_, O_CLOEXEC) != 0) failSystem(errno, "pipe2");
    fork_ranks_detail::parentOnlyFds().insert(alive_[1]);
  }
  ~ForkedRanks() {
    if (self_ >= 0) return;  // a child's copy: its process ends with _exit
    release();
    for (Child& c : children_) {
      if (c.pid > 0 && !c.reaped) {
        ::kill(c.pid, SIGKILL);
        ::waitpid(c.pid, nullptr, 0);
      }
      closeFd(c.report);
      fork_ranks_detail::parentOnlyFds().erase(c.writeEnd);
      closeFd(c.writeEnd);
      closeFd(c.log);
    }
    closeFd(alive_[0]);
  }
  ForkedRanks(const ForkedRanks&) = delete;
  ForkedRanks& operator=(const ForkedRanks&) = delete;

  int size() const { return n_; }
  // This process's rank: -1 in the parent.
  int rank() const { return self_; }

  // ---- The parent: starting and ending ranks ---------------------------------------------

  // Forks every rank (their pipes made first, so that each can watch the others end).
  void start(const Body& body) {
    started_ = Clock::now();
    for (int r = 0; r < n_; ++r) prepare(r);
    for (int r = 0; r < n_; ++r) forkRank(r, body);
  }
  // Forks rank `r` alone (a rank started later, a process of its own); waitEnded(r) works
  // only in ranks forked after it.
  void startRank(int r, const Body& body) {
    if (started_ == Clock::time_point{}) started_ = Clock::now();
    prepare(r);
    forkRank(r, body);
  }

  Clock::time_point started() const { return started_; }
  pid_t pid(int r) const { return child(r).pid; }
  void kill(int r, int sig = SIGKILL) const { ::kill(child(r).pid, sig); }

  // Lets every rank in stayAlive() go on (they return from it).
  void release() {
    if (self_ < 0 && alive_[1] >= 0) {
      fork_ranks_detail::parentOnlyFds().erase(alive_[1]);
      closeFd(alive_[1]);
    }
  }

  // Reaps every rank by `deadline`; a rank still running then is SIGKILLed and marked
  // hung. `killLast` (a stopped rank, say) is SIGKILLed once the others have ended, and is
  // not counted as hung. Releases the ranks in stayAlive() first.
  std::vector<RankResult> join(Clock::time_point deadline, int killLast = -1) {
    std::vector<int> all;
    for (int r = 0; r < n_; ++r) {
      if (child(r).pid > 0) all.push_back(r);
    }
    return reap(all, deadline, killLast);
  }
  std::vector<RankResult> join() { return join(started_ + limit_); }
  // Rank r alone (the others go on).
  RankResult join(int r, Clock::time_point deadline) { return reap({r}, deadline, -1)[0]; }

  // Rank r's stderr so far (in the parent or a rank started with it).
  std::string log(int r) const { return fork_ranks_detail::readWhole(child(r).log); }

  // ---- Ordering: in the ranks and in the parent (Signals), with this group's ranks ----------

  using Signals::barrier;
  using Signals::say;
  // This rank (or the parent) says `what`.
  void say(const std::string& what) { Signals::say(self_, what); }
  // Every rank posts `name`, then waits for all of them (ranks only).
  void barrier(const std::string& name) { Signals::barrier(name, static_cast<uint32_t>(n_)); }

  // Until rank r's process is gone, however it ended (a rank waits for one forked with
  // it by start(), or before it). In the parent it also reads what r reported.
  bool tryWaitEnded(int r, Clock::duration limit) {
    const Child& c = child(r);
    if (self_ < 0) {
      Child& mine = children_[static_cast<size_t>(r)];
      const auto until = Clock::now() + limit;
      while (!mine.eof && drainOrWait(mine, until)) {
      }
      return mine.eof;
    }
    if (c.report < 0) {
      fail(ErrorCode::kInvalidArgument, "{}: rank {} was started after this rank", who(), r);
    }
    pollfd p{c.report, 0, 0};  // hang-up only: the parent reads the data
    const auto until = Clock::now() + limit;
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
      if (left.count() <= 0) return false;
      int got = ::poll(&p, 1, static_cast<int>(left.count()));
      if (got > 0 && (p.revents & (POLLHUP | POLLERR))) return true;
      if (got < 0 && errno != EINTR) failSystem(errno, "poll");
    }
  }
  void waitEnded(int r) { waitEnded(r, limit_); }
  void waitEnded(int r, Clock::duration limit) {
    if (!tryWaitEnded(r, limit)) {
      fail(ErrorCode::kTimeout, "{}: rank {} still running after {} ms", who(), r,
           std::chrono::duration_cast<std::chrono::milliseconds>(limit).count());
    }
  }

  // A rank: blocks until the parent releases the group (release(), join(), the
  // destructor) or the group's limit passes.
  void stayAlive() {
    pollfd p{alive_[0], POLLIN, 0};
    const auto until = Clock::now() + limit_;
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
      if (left.count() <= 0) return;
      int got = ::poll(&p, 1, static_cast<int>(left.count()));
      if (got > 0) return;
      if (got < 0 && errno != EINTR) failSystem(errno, "poll");
    }
  }

  // Rank r's pid, in a rank too (waits until the parent has forked it).
  pid_t pidOf(int r) {
    if (self_ < 0) return pid(r);
    std::atomic<uint32_t>* word = &shared_->pids[r];
    if (!fork_ranks_detail::waitOn(word, Clock::now() + limit_, [](uint32_t v) { return v != 0; })) {
      fail(ErrorCode::kTimeout, "{}: rank {} was never forked", who(), r);
    }
    return static_cast<pid_t>(word->load());
  }

  // Until rank r's log holds `text` (polled: the library's output signals nothing else).
  void waitForLog(int r, const std::string& text) { waitForLog(r, text, limit_); }
  void waitForLog(int r, const std::string& text, Clock::duration limit) {
    const auto until = Clock::now() + limit;
    while (log(r).find(text) == std::string::npos) {
      if (Clock::now() >= until) {
        fail(ErrorCode::kTimeout, "{}: rank {}'s log did not say '{}' in {} ms", who(), r, text,
             std::chrono::duration_cast<std::chrono::milliseconds>(limit).count());
      }
      std::this_thread::sleep_for(5ms);  // poll interval: nothing notifies a write to a log
    }
  }

  // ---- In a rank: its report -----------------------------------------------------------------

  // Adds `key` = `value` to this rank's result at once (kept if the rank is killed later).
  void note(const std::string& key, const std::string& value) {
    if (self_ < 0) throw std::logic_error("note() is for a rank");
    fork_ranks_detail::writeAll(out_, fmt::format("N {} {}\n{}{}", key.size(), value.size(), key, value));
  }
  // The body's end is now, not when it returns (CommRanks: before destroying).
  void markEnd() { endedAt_ = Clock::now(); }

 protected:
  void setDestroyTime(Clock::duration d) { destroy_ = d; }

 private:
  struct Child {
    pid_t pid = -1;
    int report = -1;    // the read end of its report pipe
    int writeEnd = -1;  // the parent's copy of the write end, until the child is forked
    int log = -1;       // a memfd: its stderr
    bool reaped = false;
    bool eof = false;
    bool hung = false;
    int status = 0;
    std::string out;  // what it reported so far
  };

  const Child& child(int r) const {
    if (r < 0 || r >= n_) throw std::out_of_range(fmt::format("rank {} of {}", r, n_));
    return children_[static_cast<size_t>(r)];
  }

  static void closeFd(int& fd) {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }

  void prepare(int r) {
    (void)child(r);  // in range
    Child& c = children_[static_cast<size_t>(r)];
    if (c.pid > 0) throw std::logic_error(fmt::format("rank {} started twice", r));
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) failSystem(errno, "pipe2");
    c.report = fds[0];
    c.writeEnd = fds[1];
    fork_ranks_detail::parentOnlyFds().insert(c.writeEnd);
    c.log = ::memfd_create(fmt::format("gyre-rank-{}", r).c_str(), MFD_CLOEXEC);
    if (c.log < 0) failSystem(errno, "memfd_create");
  }

  void forkRank(int r, const Body& body) {
    Child& c = children_[static_cast<size_t>(r)];
    std::fflush(nullptr);
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) failSystem(errno, "fork");
    if (pid == 0) runChild(r, parent, body);  // never returns
    fork_ranks_detail::parentOnlyFds().erase(c.writeEnd);
    closeFd(c.writeEnd);
    ::fcntl(c.report, F_SETFL, ::fcntl(c.report, F_GETFL) | O_NONBLOCK);
    c.pid = pid;
    shared_->pids[r].store(static_cast<uint32_t>(pid));
    fork_ranks_detail::futexWakeAll(&shared_->pids[r]);
  }

  [[noreturn]] void runChild(int r, pid_t parent, const Body& body) {
    Child& mine = children_[static_cast<size_t>(r)];
    self_ = r;
    out_ = mine.writeEnd;
    // Dies with the test process; a parent already gone before the prctl is seen here.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(3);
    for (int fd : fork_ranks_detail::parentOnlyFds()) {
      if (fd != out_) ::close(fd);
    }
    fork_ranks_detail::parentOnlyFds().clear();
    alive_[1] = -1;
    for (Child& c : children_) c.writeEnd = -1;
    ::dup2(mine.log, STDERR_FILENO);

    const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
    const int partsBefore = test ? test->result()->total_part_count() : 0;
    int ok = 0, code = 0;
    std::string message;
    try {
      body(r);
      ok = 1;
    } catch (const Error& e) {
      code = static_cast<int>(e.code());
      message = e.what();
    } catch (const std::exception& e) {
      message = e.what();
    } catch (...) {
      message = "an exception that is not a std::exception";
    }
    if (endedAt_ == Clock::time_point{}) endedAt_ = Clock::now();
    if (test && test->result()->total_part_count() > partsBefore && test->result()->Failed()) {
      ok = 0;
      message += " (a GoogleTest assertion failed in this rank: a rank must throw instead)";
    }
    fork_ranks_detail::writeAll(
        out_, fmt::format("E {} {} {} {} {}\n{}", ok, code, endedAt_.time_since_epoch().count(),
                          std::chrono::nanoseconds(destroy_).count(), message.size(), message));
    std::fflush(nullptr);
    ::_exit(ok ? 0 : 1);  // no atexit handlers, no GoogleTest teardown in a rank
  }

  // Reads what c reported so far, waiting until `until` for more; false at EOF or then.
  bool drainOrWait(Child& c, Clock::time_point until) {
    for (;;) {
      char buf[8192];
      ssize_t n = ::read(c.report, buf, sizeof(buf));
      if (n > 0) {
        c.out.append(buf, static_cast<size_t>(n));
        continue;
      }
      if (n == 0) {
        c.eof = true;
        return false;
      }
      if (errno == EINTR) continue;
      if (errno != EAGAIN) failSystem(errno, "read");
      break;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
    if (left.count() <= 0) return false;
    pollfd p{c.report, POLLIN, 0};
    ::poll(&p, 1, static_cast<int>(left.count()));
    return true;
  }

  std::vector<RankResult> reap(const std::vector<int>& ranks, Clock::time_point deadline,
                               int killLast) {
    release();
    bool lastKilled = false;
    for (;;) {
      std::vector<pollfd> watch;
      bool othersDone = true;
      for (int r : ranks) {
        Child& c = children_[static_cast<size_t>(r)];
        if (c.reaped) continue;
        if (!c.eof) drainOrWait(c, Clock::now());  // what is there, no waiting
        if (::waitpid(c.pid, &c.status, WNOHANG) == c.pid) {
          c.reaped = true;
          while (!c.eof && drainOrWait(c, Clock::now())) {
          }
          continue;
        }
        if (r != killLast) othersDone = false;
        if (!c.eof) watch.push_back({c.report, POLLIN, 0});
      }
      bool anyLeft = false;
      for (int r : ranks) anyLeft |= !children_[static_cast<size_t>(r)].reaped;
      if (!anyLeft) break;
      if (killLast >= 0 && othersDone && !lastKilled) {
        ::kill(children_[static_cast<size_t>(killLast)].pid, SIGKILL);
        lastKilled = true;
        continue;
      }
      if (Clock::now() >= deadline) {
        for (int r : ranks) {
          Child& c = children_[static_cast<size_t>(r)];
          if (c.reaped) continue;
          ::kill(c.pid, SIGKILL);
          ::waitpid(c.pid, &c.status, 0);
          c.reaped = true;
          c.hung = r != killLast || !lastKilled;
          while (!c.eof && drainOrWait(c, Clock::now())) {
          }
        }
        break;
      }
      // Woken by a report; a process that ended with its pipe already closed (or held by
      // a process of its own) is seen by the next waitpid, within 20 ms.
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      ::poll(watch.data(), watch.size(), static_cast<int>(std::clamp<long long>(left.count(), 0, 20)));
    }
    std::vector<RankResult> results;
    for (int r : ranks) results.push_back(resultOf(r));
    return results;
  }

  RankResult resultOf(int r) const {
    const Child& c = children_[static_cast<size_t>(r)];
    RankResult res;
    res.rank = r;
    res.hung = c.hung;
    res.status = c.status;
    res.log = log(r);
    size_t at = 0;
    const std::string& s = c.out;
    while (at < s.size()) {
      const size_t eol = s.find('\n', at);
      if (eol == std::string::npos) break;
      const std::string head = s.substr(at, eol - at);
      at = eol + 1;
      if (head.rfind("N ", 0) == 0) {
        size_t keyBytes = 0, valueBytes = 0;
        if (std::sscanf(head.c_str(), "N %zu %zu", &keyBytes, &valueBytes) != 2 ||
            at + keyBytes + valueBytes > s.size()) {
          break;
        }
        res.notes[s.substr(at, keyBytes)] = s.substr(at + keyBytes, valueBytes);
        at += keyBytes + valueBytes;
      } else if (head.rfind("E ", 0) == 0) {
        int ok = 0;
        long long endNs = 0, destroyNs = 0;
        size_t bytes = 0;
        if (std::sscanf(head.c_str(), "E %d %d %lld %lld %zu", &ok, &res.code, &endNs, &destroyNs,
                        &bytes) != 5 ||
            at + bytes > s.size()) {
          break;
        }
        res.reported = true;
        res.ok = ok != 0;
        res.endedAt = Clock::time_point(std::chrono::nanoseconds(endNs));
        res.seconds = secondsBetween(started_, res.endedAt);
        res.destroySeconds = static_cast<double>(destroyNs) * 1e-9;
        res.message = s.substr(at, bytes);
        at += bytes;
      } else {
        break;
      }
    }
    return res;
  }

  const int n_;
  std::vector<Child> children_;
  int alive_[2] = {-1, -1};  // the parent holds the write end until release()
  Clock::time_point started_{};
  // In a rank's copy (and self_, its number):
  int out_ = -1;
  Clock::time_point endedAt_{};
  Clock::duration destroy_{};
};

// Every result ok, not hung; a failure names the rank, how it ended and its log.
inline void expectAllOk(const std::vector<RankResult>& results) {
  for (const RankResult& r : results) EXPECT_TRUE(r.ok && !r.hung) << r.describe();
}

// Every result (except `skip`) failed, not hung, by `bound` seconds after start(), naming
// every needle.
inline void expectAllFailed(const std::vector<RankResult>& results, double bound,
                            const std::vector<std::string>& needles, int skip = -1) {
  for (const RankResult& r : results) {
    if (r.rank == skip) continue;
    SCOPED_TRACE(r.describe());
    EXPECT_TRUE(r.reported && !r.ok && !r.hung);
    EXPECT_LT(r.seconds, bound);
    for (const std::string& needle : needles) {
      EXPECT_NE(r.message.find(needle), std::string::npos) << "missing '" << needle << "'";
    }
  }
}

// ---- CommRanks: n ranks of one communicator ----------------------------------------------------

// The tests that kill, stop or confuse ranks: each rank builds its Communicator with the
// group's Options (perRank adjusts them), posts "ready", runs the body and destroys the
// communicator, timing that (result.destroySeconds); an error's time is when the body
// threw. By default the parent serves the bootstrap store on loopback (bound before the
// fork, served after it, with the group's secret, Options::token) and can read it
// (store()); makeStore replaces that (the namespace tests serve it from a rank).
using RankBody = std::function<void(Communicator& comm, int rank)>;

class CommRanks : public ForkedRanks {
 public:
  CommRanks(int n, Options options, Clock::duration limit = 120s)
      : ForkedRanks(n, limit), options_(std::move(options)) {}

  std::function<void(int rank, Options& options)> perRank;
  std::function<void(int rank)> beforeCreate;                 // in the rank
  std::function<std::shared_ptr<Store>(int rank)> makeStore;  // in the rank
  std::string masterAddr = "127.0.0.1";

  void start(const RankBody& body) {
    Fd listener;
    uint16_t port = 0;
    if (!makeStore) {
      listener = listenOn(SocketAddress::resolve("127.0.0.1", 0));
      port = SocketAddress::ofSocket(listener.get()).port();
    }
    ForkedRanks::start([&](int rank) { runRank(rank, port, body); });
    if (!makeStore) store_ = TcpStore::serveOn(std::move(listener), options_.timeout, options_.token);
  }

  Store& store() { return *store_; }

  // True once every rank built its communicator; false at the timeout.
  bool waitReady(Clock::duration timeout) {
    return tryAwait("ready", static_cast<uint32_t>(size()), timeout);
  }

 private:
  void runRank(int rank, uint16_t port, const RankBody& body) {
    if (beforeCreate) beforeCreate(rank);
    ::setenv("MASTER_ADDR", masterAddr.c_str(), 1);
    Options o = options_;
    if (perRank) perRank(rank, o);
    // The rank's own secret (perRank may give one rank another) reaches the store too.
    std::shared_ptr<Store> store =
        makeStore ? makeStore(rank) : TcpStore::connect("127.0.0.1", port, options_.timeout, o.token, rank);
    std::unique_ptr<Communicator> comm = Communicator::create(store, rank, size(), o);
    post("ready");
    std::exception_ptr failed;
    try {
      body(*comm, rank);
    } catch (...) {
      failed = std::current_exception();
    }
    markEnd();
    const auto t0 = Clock::now();
    comm.reset();
    setDestroyTime(Clock::now() - t0);
    if (failed) std::rethrow_exception(failed);
  }

  const Options options_;
  std::shared_ptr<TcpStore> store_;
};

// ---- What the multi-process tests share --------------------------------------------------------

// The segments in /dev/shm of the job with secret `token` (names carry the secret's tag,
// never the secret: base/secret.h).
inline std::vector<std::string> shmSegmentsOf(const std::string& token) {
  std::vector<std::string> found;
  if (DIR* d = ::opendir("/dev/shm")) {
    while (dirent* e = ::readdir(d)) {
      if (std::string(e->d_name).rfind("gyre-" + nameTag(token), 0) == 0) found.push_back(e->d_name);
    }
    ::closedir(d);
  }
  return found;
}

}  // namespace gyre::testing
