#include <algorithm>
#include <cstdio>
#include <map>
#include <thread>
#include <vector>

#include "base/error.h"
#include "base/log.h"
#include "ring/communicator_impl.h"
#include "ring/join.h"
#include "ring/signed_store.h"

// Communicator::Impl's membership changes: split (ncclCommSplit), shrink (the survivors
// of a failure, ncclCommShrink) and grow (newcomers join, ncclCommGrow). Each makes a new
// Impl through the store alone, under keys of its own below this communicator's prefix
// (a grow's newcomers meet the ranks under "gyre/grow/").
namespace gyre {

// Every rank publishes (color, key) under this communicator's keys, reads everyone's, and
// joins the ranks of its color (ordered by key, then rank) under a key prefix of its own.
std::unique_ptr<Communicator::Impl> Communicator::Impl::split(int color, int key) {
  if (aborted_.load()) {
    std::lock_guard<std::mutex> lock(abortMu_);
    fail(ErrorCode::kAborted, "rank {}: split called on an aborted communicator{}", rank_,
         firstError_.empty() ? "" : " (after: " + firstError_ + ")");
  }
  const int n = splits_++;
  // Signed with a secret, as creation's entries are: a forged color would regroup ranks.
  std::shared_ptr<Store> split =
      prefixedStore(store_, fmt::format("{}/split{}", prefix_, n), options_.token);
  Store& store = *split;
  store.setTimeout(options_.timeout);
  store.setString(fmt::format("{}", rank_), fmt::format("{} {}", color, key));
  struct Member {
    int key, rank;
    bool operator<(const Member& o) const { return key != o.key ? key < o.key : rank < o.rank; }
  };
  std::vector<Member> members;
  for (int r = 0; r < size_; ++r) {
    int c = 0;
    int k = 0;
    std::string entry = store.getString(fmt::format("{}", r));
    if (std::sscanf(entry.c_str(), "%d %d", &c, &k) != 2) {
      fail(ErrorCode::kInternal, "rank {}: split: malformed entry '{}' of rank {}", rank_,
           entry, r);
    }
    if (c == color && color >= 0) members.push_back(Member{k, r});
  }
  // Everyone has read every entry before any rank leaves (so a rank that goes on to
  // destroy this communicator cannot take the store with it too early).
  if (store.add("read", 1) == size_) store.setString("all-read", "1");
  store.wait({"all-read"});
  if (color < 0) return nullptr;
  std::sort(members.begin(), members.end());
  int newRank = 0;
  while (members[newRank].rank != rank_) ++newRank;
  log(LogLevel::kInfo, rank_, "split {}: color {} key {} -> rank {} of {}", n, color, key,
      newRank, members.size());
  return std::make_unique<Impl>(store_, newRank, static_cast<int>(members.size()), options_,
                                listenHost_, fmt::format("{}/split{}/color{}", prefix_, n, color));
}


// Shrink: the survivors agree on who is excluded through the store, then create the new
// communicator among themselves.
//
// Agreement. Survivor s proposes its excluded set E(s): seq = add("proposals", 1), then
// "proposal/<seq>" = "<s> <E(s)>". The decision D is proposal 1: the first proposal to
// reach the store. s goes on only if E(s) == D; otherwise it fails with kMismatch
// naming both sets. Safety: "proposals" is an atomic counter, so exactly one rank gets
// seq 1 and writes proposal 1, once (with a secret, entries are signed: nobody else
// can write it). Every survivor that goes on has E(s) == D, so any two that go on saw
// the same set. They then create the communicator of the ranks not in D, whose join
// needs every one of them: either all of them go on, or creation fails on every one
// (a member that is gone, or that disagreed and failed, fails it naming that rank).
// Liveness: a rank between its add and its write of proposal 1 that dies there leaves
// the others waiting until GYRE_JOIN_TIMEOUT (then a timeout naming the key).
// Nothing here reads this communicator's pipes, so its state does not matter.
std::unique_ptr<Communicator::Impl> Communicator::Impl::shrink(const std::vector<int>& excludedIn,
                                                               bool abortFirst) {
  std::vector<int> excluded = excludedIn;
  std::sort(excluded.begin(), excluded.end());
  excluded.erase(std::unique(excluded.begin(), excluded.end()), excluded.end());
  for (int r : excluded) {
    if (r < 0 || r >= size_) {
      fail(ErrorCode::kInvalidArgument, "rank {}: shrink: excluded rank {} is outside [0, {})",
           rank_, r, size_);
    }
    if (r == rank_) {
      fail(ErrorCode::kInvalidArgument,
           "rank {}: shrink: this rank is in its own excluded list ({}); only the survivors "
           "call shrink", rank_, rankRanges(excluded));
    }
  }
  if (abortFirst) abortFromUser(true);
  const int n = shrinks_++;
  const std::string base = fmt::format("{}/shrink{}", prefix_, n);
  std::shared_ptr<Store> agreed = prefixedStore(store_, base, options_.token);
  agreed->setTimeout(std::min(options_.timeout, options_.joinTimeout));
  const std::string mine = rankRanges(excluded);
  const int64_t seq = agreed->add("proposals", 1);
  agreed->setString(fmt::format("proposal/{}", seq), fmt::format("{} {}", rank_, mine));
  const std::string first = seq == 1 ? fmt::format("{} {}", rank_, mine)
                                     : agreed->getString("proposal/1");
  const size_t space = first.find(' ');
  const std::string proposer = first.substr(0, space);
  const std::string decided = space == std::string::npos ? "" : first.substr(space + 1);
  if (decided != mine) {
    fail(ErrorCode::kMismatch,
             "rank {}: shrink {}: the survivors disagree on who is excluded: this rank excludes "
             "{}, rank {} (the first to propose, whose set is the decision) excludes {}. This "
             "rank does not join the shrunk communicator; survivors must pass the same ranks "
             "(Communicator::failedRank() names the same rank on every survivor of one failure)",
             rank_, n, mine, proposer, decided);
  }
  std::vector<int> survivors;
  for (int r = 0; r < size_; ++r) {
    if (!std::binary_search(excluded.begin(), excluded.end(), r)) survivors.push_back(r);
  }
  const int newRank = static_cast<int>(
      std::lower_bound(survivors.begin(), survivors.end(), rank_) - survivors.begin());
  // A survivor whose process ended meanwhile closed its store connection: the store
  // set its drop key in this communicator's join (ring/join.h), which the new join watches.
  std::map<int, std::string> gone;
  for (size_t i = 0; i < survivors.size(); ++i) {
    gone[static_cast<int>(i)] = fmt::format("{}/join/dropped/{}", prefix_, survivors[i]);
  }
  log(LogLevel::kInfo, rank_, "shrink {}: without rank(s) {} -> rank {} of {}", n, mine, newRank,
      survivors.size());
  return std::make_unique<Impl>(store_, newRank, static_cast<int>(survivors.size()), options_,
                                listenHost_, base + "/comm", gone);
}


// Grow: the existing ranks and the newcomers meet under the store's "gyre/grow/" keys
// (signed with a secret, so nobody else can steer a newcomer):
//   generation      how many grows have completed (add: the counter)
//   <g>/ticket      "<old size> <new size> <prefix>", set by rank 0 for grow number g
//   <g>/arrivals    add: the newcomers' order, so newcomer i gets rank <old size> + i
//   <g>/waiting     add: newcomers waiting for grow g (waitingNewcomers() reads it)
// A newcomer reads g and waits for ticket g, then takes an arrival number; a grow that is
// full (it came one too many) or already complete (it came after it, before the
// generation moved on) is not its own, and it waits for the next, up to
// GYRE_JOIN_TIMEOUT. Rank 0 moves the generation on once the grown communicator exists.
namespace {

std::shared_ptr<Store> growStore(const std::shared_ptr<Store>& store, const Options& options) {
  std::shared_ptr<Store> s = prefixedStore(store, "gyre/grow", options.token);
  s->setTimeout(std::min(options.timeout, options.joinTimeout));
  return s;
}

}  // namespace

std::unique_ptr<Communicator::Impl> Communicator::Impl::grow(int newSize) {
  if (newSize <= size_) {
    fail(ErrorCode::kInvalidArgument, "rank {}: grow: the new size {} must exceed the size {}",
         rank_, newSize, size_);
  }
  if (aborted_.load()) {
    std::lock_guard<std::mutex> lock(abortMu_);
    fail(ErrorCode::kAborted, "rank {}: grow called on an aborted communicator{} (shrink it first)",
         rank_, firstError_.empty() ? "" : " (after: " + firstError_ + ")");
  }
  const std::string prefix = fmt::format("{}/grow{}/comm", prefix_, grows_++);
  std::shared_ptr<Store> meet = growStore(store_, options_);
  if (rank_ == 0) {
    const int64_t g = meet->add("generation", 0);
    meet->setString(fmt::format("{}/ticket", g), fmt::format("{} {} {}", size_, newSize, prefix));
  }
  log(LogLevel::kInfo, rank_, "grow: {} -> {} ranks", size_, newSize);
  auto grown = std::make_unique<Impl>(store_, rank_, newSize, options_, listenHost_, prefix);
  if (rank_ == 0) meet->add("generation", 1);
  return grown;
}

int64_t Communicator::Impl::newcomersSeen() {
  std::shared_ptr<Store> meet = growStore(store_, options_);
  const int64_t g = meet->add("generation", 0);
  return meet->add(fmt::format("{}/waiting", g), 0);
}

std::unique_ptr<Communicator::Impl> Communicator::Impl::joinGrow(std::shared_ptr<Store> store,
                                                                 const Options& options,
                                                                 const std::string& listenHost) {
  std::shared_ptr<Store> meet = growStore(store, options);
  const Clock::time_point deadline = Clock::now() + options.joinTimeout;
  int64_t registered = -1;  // the generation this newcomer is counted in as waiting
  int64_t passed = -1;      // a grow that took others: wait for the next one
  for (;;) {
    const int64_t g = meet->add("generation", 0);
    if (g != registered) {
      meet->add(fmt::format("{}/waiting", g), 1);  // what waitingNewcomers() reads
      registered = g;
    }
    const std::string ticketKey = fmt::format("{}/ticket", g);
    if (g != passed && meet->check({ticketKey})) {
      int oldSize = 0, newSize = 0;
      char prefix[512] = {0};
      const std::string ticket = meet->getString(ticketKey);
      if (std::sscanf(ticket.c_str(), "%d %d %511s", &oldSize, &newSize, prefix) != 3) {
        fail(ErrorCode::kInternal, "joinGrow: malformed ticket '{}' in the store at {}", ticket,
             describeStore(*store));
      }
      // Complete: it was over before this newcomer looked (the generation moves on next).
      const bool complete = store->check({std::string(prefix) + "/join/complete"});
      const int64_t i = complete ? -1 : meet->add(fmt::format("{}/arrivals", g), 1) - 1;
      if (i >= 0 && i < newSize - oldSize) {
        const int rank = oldSize + static_cast<int>(i);
        log(LogLevel::kInfo, rank, "joining by grow {}: rank {} of {}", g, rank, newSize);
        return std::make_unique<Impl>(store, rank, newSize, options, listenHost, prefix);
      }
      passed = g;  // full, or over: the next grow
    }
    if (Clock::now() >= deadline) {
      fail(ErrorCode::kTimeout,
           "joinGrow: no grow through the store at {} took this process within {:.0f} s "
           "(GYRE_JOIN_TIMEOUT; {} grow(s) done meanwhile): the existing ranks must call grow(), "
           "by as many ranks as waitingNewcomers() says; if every one of them has exited (the "
           "launcher's output names each rank that failed), none is left to grow this one in",
           describeStore(*store), options.joinTimeout.count() / 1000.0, meet->add("generation", 0));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace gyre
