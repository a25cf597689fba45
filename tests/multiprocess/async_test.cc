// Async operations across real processes: many in flight at once complete in issue
// order with exact results, Work's test/wait(timeout)/exception behave as documented, a
// failure lands in the Work of the operation that failed (and later ones are aborted),
// abort() from another thread ends a pending Work, and destroying a communicator with
// operations still queued finishes them first.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "base/error.h"
#include "fork_ranks.h"
#include "ring/communicator.h"
#include "ring/spawn.h"
#include "test_values.h"

namespace gyre {
namespace {

using namespace std::chrono_literals;
using testing::check;

SpawnOptions options(TransportKind transport) {
  SpawnOptions o;
  o.options.timeout = std::chrono::seconds(30);
  o.options.transport = transport;
  o.options.slotBytes = 16 * 1024;  // large counts cross many slots
  return o;
}

// Integers: exact in any order. Rank r contributes r + i % 5 at index i.
std::vector<float> input(int rank, size_t count) {
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = static_cast<float>(rank + static_cast<int>(i % 5));
  return v;
}

float expectedSum(int n, size_t i) {
  return static_cast<float>(n * (n - 1) / 2 + n * static_cast<int>(i % 5));
}

class AsyncRanks : public ::testing::TestWithParam<TransportKind> {};

TEST_P(AsyncRanks, ManyInFlightCompleteInIssueOrderWithExactResults) {
  spawn(4, [](Communicator& comm) {
    const int n = comm.size();
    const size_t counts[] = {1, 1000, 40000, 7, 100003, 0, 5};
    std::vector<std::vector<float>> bufs;
    std::vector<Work> works;
    for (size_t c : counts) bufs.push_back(input(comm.rank(), c));
    std::vector<float> bcast(3000, comm.rank() == 2 ? 42.0f : -1.0f);
    for (size_t k = 0; k < bufs.size(); ++k) {
      works.push_back(comm.allReduceAsync(bufs[k].data(), bufs[k].data(), bufs[k].size(),
                                          DataType::kFloat32, ReduceOp::kSum));
      if (k == 2) works.push_back(comm.broadcastAsync(bcast.data(), bcast.size(), DataType::kFloat32, 2));
      if (k == 4) works.push_back(comm.barrierAsync());
    }
    // A blocking call issued now runs after all of them.
    std::vector<float> last = input(comm.rank(), 10);
    comm.allReduce(last.data(), last.data(), last.size(), DataType::kFloat32, ReduceOp::kSum);
    for (auto& w : works) check(w.test(), "rank {}: an earlier Work is unfinished after a later blocking call", comm.rank());
    for (auto it = works.rbegin(); it != works.rend(); ++it) it->wait();
    for (size_t k = 0; k < bufs.size(); ++k) {
      for (size_t i = 0; i < bufs[k].size(); ++i) {
        check(bufs[k][i] == expectedSum(n, i), "rank {}: buffer {} [{}] = {}, want {}",
              comm.rank(), k, i, bufs[k][i], expectedSum(n, i));
      }
    }
    for (float v : bcast) check(v == 42.0f, "rank {}: broadcast got {}", comm.rank(), v);
    for (size_t i = 0; i < last.size(); ++i) check(last[i] == expectedSum(n, i), "rank {}: last", comm.rank());
  }, options(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(Transports, AsyncRanks,
                         ::testing::Values(TransportKind::kTcp, TransportKind::kShm),
                         [](const auto& info) {
                           return info.param == TransportKind::kTcp ? "tcp" : "shm";
                         });

TEST(Async, WaitWithTimeoutAndTestWhileAPeerIsLate) {
  testing::Signals signals;
  spawn(3, [&signals](Communicator& comm) {
    std::vector<float> buf = input(comm.rank(), 100);
    if (comm.rank() == 1) signals.waitFor(0, "tested");  // late: after rank 0's checks
    Work w = comm.allReduceAsync(buf.data(), buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum);
    if (comm.rank() == 0) {
      check(!w.wait(50ms), "rank 0: the all-reduce finished although rank 1 had not joined");
      check(!w.test(), "rank 0: test() is true although rank 1 had not joined");
      check(w.exception() == nullptr, "rank 0: exception() set while running");
      signals.say(0, "tested");
    }
    check(w.wait(20000ms), "rank {}: not finished after 20 s", comm.rank());
    check(w.test() && w.exception() == nullptr, "rank {}: finished badly", comm.rank());
    for (size_t i = 0; i < buf.size(); ++i) check(buf[i] == expectedSum(3, i), "rank {}: wrong sum", comm.rank());
  }, options(TransportKind::kAuto));
}

TEST(Async, FailureLandsInItsWorkAndLaterOnesAreAborted) {
  spawn(4, [](Communicator& comm) {
    std::vector<float> a = input(comm.rank(), 64), b(200), c(64);
    Work first = comm.allReduceAsync(a.data(), a.data(), a.size(), DataType::kFloat32, ReduceOp::kSum);
    // Rank 3 disagrees on the count of the second call.
    const size_t count = comm.rank() == 3 ? 199 : 200;
    Work second = comm.allReduceAsync(b.data(), b.data(), count, DataType::kFloat32, ReduceOp::kSum);
    Work third = comm.allReduceAsync(c.data(), c.data(), c.size(), DataType::kFloat32, ReduceOp::kSum);
    first.wait();
    // Polled: test() is what is checked.
    for (int i = 0; i < 2000 && !second.test(); ++i) std::this_thread::sleep_for(10ms);
    check(second.test() && second.exception() != nullptr, "rank {}: the mismatched call did not fail", comm.rank());
    try {
      second.wait();  // throws: a finished Work with an error
      check(false, "rank {}: wait() on the failed Work did not throw", comm.rank());
    } catch (const Error& e) {
      check(e.code() == ErrorCode::kMismatch || e.code() == ErrorCode::kRemoteError ||
                e.code() == ErrorCode::kAborted,
            "rank {}: unexpected code: {}", comm.rank(), e.what());
      check(std::string(e.what()).find("allreduce #1") != std::string::npos,
            "rank {}: the error does not name call #1: {}", comm.rank(), e.what());
    }
    try {
      third.wait();
      check(false, "rank {}: the call after the failure succeeded", comm.rank());
    } catch (const Error& e) {
      check(e.code() == ErrorCode::kAborted, "rank {}: later call: {}", comm.rank(), e.what());
    }
  }, options(TransportKind::kAuto));
}

TEST(Async, AbortFromAnotherThreadEndsThePendingWork) {
  testing::Signals signals;
  spawn(2, [&signals](Communicator& comm) {
    // Larger than the pipes hold (16 KiB slots): rank 0 cannot finish its part alone.
    std::vector<float> buf(1 << 20, 1.0f);
    if (comm.rank() == 1) {
      // Joins late, after rank 0 aborted: its call must fail, naming the abort.
      signals.waitFor(0, "aborted");
      try {
        comm.allReduce(buf.data(), buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum);
        check(false, "rank 1: the all-reduce succeeded although rank 0 aborted");
      } catch (const Error& e) {
        check(std::string(e.what()).find("abort") != std::string::npos, "rank 1: {}", e.what());
      }
      return;
    }
    Work w = comm.allReduceAsync(buf.data(), buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum);
    std::thread aborter([&comm, &signals] {
      std::this_thread::sleep_for(50ms);  // time for the Work to be under way: nothing signals it
      comm.abort();
      signals.say(0, "aborted");
    });
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < 1000 && !w.test(); ++i) std::this_thread::sleep_for(10ms);  // polls test()
    check(w.test(), "rank 0: abort() did not end the pending Work");
    aborter.join();
    check(std::chrono::steady_clock::now() - start < 5s, "rank 0: the abort took too long");
    try {
      w.wait();
      check(false, "rank 0: the aborted Work succeeded");
    } catch (const Error& e) {
      check(e.code() == ErrorCode::kAborted, "rank 0: {}", e.what());
    }
  }, options(TransportKind::kAuto));
}

TEST(Async, DestroyingACommunicatorFinishesWhatWasIssued) {
  spawn(3, [](Communicator& comm) {
    std::vector<std::vector<float>> bufs;
    for (int k = 0; k < 4; ++k) bufs.push_back(input(comm.rank(), 30000));
    std::vector<Work> works;
    {
      auto child = comm.split(0, comm.rank());
      for (auto& b : bufs) {
        works.push_back(child->allReduceAsync(b.data(), b.data(), b.size(), DataType::kFloat32, ReduceOp::kSum));
      }
    }  // destroyed with the operations perhaps still queued
    for (auto& w : works) check(w.test(), "rank {}: a Work is unfinished after destruction", comm.rank());
    for (auto& w : works) w.wait();
    for (auto& b : bufs) {
      for (size_t i = 0; i < b.size(); ++i) check(b[i] == expectedSum(3, i), "rank {}: wrong sum", comm.rank());
    }
  }, options(TransportKind::kAuto));
}

}  // namespace
}  // namespace gyre
