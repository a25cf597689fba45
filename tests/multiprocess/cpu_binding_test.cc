// GYRE_BIND=core (Options::bind): a communicator's creation moves its process, every
// thread of it, onto the CPU its local rank gets by base/cpu_binding.h's rule; without it
// nothing moves; a second communicator (a split, where local ranks count differently)
// leaves the process where the first put it. Real forked ranks on one host (shm).
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "base/cpu_binding.h"
#include "fork_ranks.h"
#include "ring/communicator.h"

namespace gyre {
namespace {

using testing::CommRanks;
using testing::RankResult;

TEST(CpuIndexFor, OneCpuEachWhereThereAreEnough) {
  for (int r = 0; r < 2; ++r) EXPECT_EQ(cpuIndexFor(r, 2, 4), r);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(cpuIndexFor(r, 4, 4), r);
}

TEST(CpuIndexFor, ConsecutiveRanksShareWhereThereAreFewer) {
  const std::vector<int> fourOnTwo = {0, 0, 1, 1};  // not 0 1 0 1: ring neighbours together
  const std::vector<int> threeOnTwo = {0, 0, 1};
  const std::vector<int> eightOnThree = {0, 0, 0, 1, 1, 1, 2, 2};
  for (int r = 0; r < 4; ++r) EXPECT_EQ(cpuIndexFor(r, 4, 2), fourOnTwo[r]) << r;
  for (int r = 0; r < 3; ++r) EXPECT_EQ(cpuIndexFor(r, 3, 2), threeOnTwo[r]) << r;
  for (int r = 0; r < 8; ++r) EXPECT_EQ(cpuIndexFor(r, 8, 3), eightOnThree[r]) << r;
  for (int r = 0; r < 5; ++r) EXPECT_EQ(cpuIndexFor(r, 5, 1), 0) << r;
}

std::vector<int> cpusOf(pid_t tid) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(tid, sizeof(set), &set) != 0) {
    throw std::runtime_error(fmt::format("sched_getaffinity({}) failed", tid));
  }
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  return cpus;
}

// A thread started before the communicator, parked until the rank ends: binding must
// move it too (torch's threads exist before init_process_group).
struct ParkedThread {
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  pid_t tid = 0;
  std::thread thread;

  void start() {
    thread = std::thread([this] {
      std::unique_lock<std::mutex> lock(mu);
      tid = static_cast<pid_t>(::syscall(SYS_gettid));
      cv.notify_all();
      cv.wait(lock, [&] { return stop; });
    });
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return tid != 0; });
  }
  void finish() {
    {
      std::lock_guard<std::mutex> lock(mu);
      stop = true;
    }
    cv.notify_all();
    thread.join();
  }
};
ParkedThread parked;  // one per forked rank (each child has its own copy)

void require(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

std::string show(const std::vector<int>& cpus) {
  return fmt::format("{{{}}}", fmt::join(cpus, ","));
}

// The body every rank runs: its CPUs (main thread and the parked one) must be `want[rank]`,
// still after a split whose local ranks are reversed, and the communicator must work.
void runAndCheck(bool bind) {
  const std::vector<int> allowed = cpusOf(0);
  ASSERT_FALSE(allowed.empty());
  constexpr int kRanks = 4;
  std::vector<std::vector<int>> want(kRanks, allowed);
  if (bind) {
    for (int r = 0; r < kRanks; ++r) {
      want[r] = {
          allowed[static_cast<size_t>(cpuIndexFor(r, kRanks, static_cast<int>(allowed.size())))]};
    }
  }
  Options o;
  o.timeout = std::chrono::seconds(30);
  o.bind = bind ? CpuBinding::kCore : CpuBinding::kNone;
  CommRanks group(kRanks, o);
  group.beforeCreate = [](int) { parked.start(); };
  group.start([&](Communicator& comm, int rank) {
    try {
      const std::vector<int> main = cpusOf(0), other = cpusOf(parked.tid);
      require(main == want[rank],
              fmt::format("main thread on {}, want {}", show(main), show(want[rank])));
      require(other == want[rank],
              fmt::format("earlier thread on {}, want {}", show(other), show(want[rank])));
      // Reversed order inside the split: its local rank 0 is rank 3. Nothing moves.
      std::unique_ptr<Communicator> sub = comm.split(0, kRanks - rank);
      require(cpusOf(0) == want[rank], fmt::format("moved by the split to {}", show(cpusOf(0))));
      float x = static_cast<float>(rank + 1), sum = 0;
      sub->allReduce(&x, &sum, 1, DataType::kFloat32, ReduceOp::kSum);
      require(sum == 10.0f, fmt::format("all-reduce gave {}", sum));
    } catch (...) {
      parked.finish();
      throw;
    }
    parked.finish();
  });
  ASSERT_TRUE(group.waitReady(std::chrono::seconds(60))) << "ranks did not start";
  for (const RankResult& r : group.join(Clock::now() + std::chrono::seconds(60))) {
    EXPECT_TRUE(r.ok) << "rank " << r.rank << ": " << r.message << "\n" << r.log;
    EXPECT_FALSE(r.hung) << "rank " << r.rank;
  }
}

TEST(GyreBind, CoreMovesEveryThreadOfEachRankOntoItsCpu) { runAndCheck(true); }

TEST(GyreBind, NoneMovesNothing) { runAndCheck(false); }

}  // namespace
}  // namespace gyre
