// OpQueue and Work, in one process: issue order across async and blocking operations,
// inline execution of a blocking call when idle, errors delivered to the right Work,
// bounded waits, and destruction that finishes what was queued.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>
#include <vector>

#include "base/error.h"
#include "ring/op_queue.h"

namespace gyre {
namespace {

using namespace std::chrono_literals;

TEST(Work, DefaultIsFinishedSuccessfully) {
  Work w;
  EXPECT_TRUE(w.test());
  EXPECT_TRUE(w.wait(0ms));
  EXPECT_NO_THROW(w.wait());
  EXPECT_EQ(w.exception(), nullptr);
}

TEST(OpQueue, AsyncAndBlockingRunInIssueOrder) {
  OpQueue q;
  std::vector<int> order;  // written only by the op being run: ops never overlap
  std::vector<Work> works;
  for (int i = 0; i < 50; ++i) {
    works.push_back(q.submit([&order, i] {
      if (i % 7 == 0) std::this_thread::sleep_for(1ms);  // time passes: the queue fills behind it
      order.push_back(i);
    }));
  }
  q.run([&order] { order.push_back(50); });  // queued behind the 50: waits for them
  for (auto& w : works) EXPECT_TRUE(w.test());
  ASSERT_EQ(order.size(), 51u);
  for (int i = 0; i <= 50; ++i) EXPECT_EQ(order[i], i);
}

TEST(OpQueue, BlockingCallRunsOnTheCallerThreadWhenIdle) {
  OpQueue q;
  std::thread::id ran;
  q.run([&ran] { ran = std::this_thread::get_id(); });
  EXPECT_EQ(ran, std::this_thread::get_id());
  // An async op nobody waits on runs on the worker.
  Work w = q.submit([&ran] { ran = std::this_thread::get_id(); });
  for (int i = 0; i < 5000 && !w.test(); ++i) std::this_thread::sleep_for(1ms);  // polls test()
  ASSERT_TRUE(w.test());
  EXPECT_NE(ran, std::this_thread::get_id());
}

TEST(OpQueue, WaitRunsTheNextOpOnTheWaiterBeforeTheWorkerTakesIt) {
  // Issue then wait at once, as torch's blocking calls do: the waiter usually finds its
  // op still first in the queue (the worker not yet awake) and runs it itself. Which
  // thread wins is a race, so try until the waiter has won once (it never could before).
  OpQueue q;
  const std::thread::id me = std::this_thread::get_id();
  int onWaiter = 0;
  int tries = 0;
  for (; tries < 2000 && onWaiter == 0; ++tries) {
    std::thread::id ran;
    q.submit([&ran] { ran = std::this_thread::get_id(); }).wait();
    if (ran == me) ++onWaiter;
  }
  EXPECT_GT(onWaiter, 0) << "the waiter never ran its own op in " << tries << " tries";
}

TEST(OpQueue, WaitersRunOpsOnlyInIssueOrder) {
  // Works waited out of order, from several threads, while more are issued: an op runs
  // only once every op before it has finished, wherever it runs.
  OpQueue q;
  std::vector<int> order;  // written only by the op being run: ops never overlap
  std::vector<Work> works;
  for (int i = 0; i < 200; ++i) {
    works.push_back(q.submit([&order, i] { order.push_back(i); }));
  }
  std::vector<std::thread> waiters;
  for (int t = 0; t < 4; ++t) {
    waiters.emplace_back([&works, t] {
      for (int i = 199 - t; i >= 0; i -= 4) works[i].wait();  // last first
    });
  }
  for (int i = 200; i < 300; ++i) q.submit([&order, i] { order.push_back(i); }).wait();
  for (auto& t : waiters) t.join();
  ASSERT_EQ(order.size(), 300u);
  for (int i = 0; i < 300; ++i) EXPECT_EQ(order[i], i);
}

TEST(OpQueue, ErrorsReachTheirOwnWorkAndLaterOpsStillRun) {
  OpQueue q;
  Work bad = q.submit([] { fail(ErrorCode::kMismatch, "op 1 failed"); });
  std::atomic<bool> ran{false};
  Work good = q.submit([&ran] { ran = true; });
  EXPECT_NO_THROW(good.wait());
  EXPECT_TRUE(ran.load());
  ASSERT_TRUE(bad.test());
  ASSERT_NE(bad.exception(), nullptr);
  for (int i = 0; i < 2; ++i) {  // every wait throws it again
    try {
      bad.wait();
      FAIL() << "wait() did not throw";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kMismatch);
      EXPECT_STREQ(e.what(), "op 1 failed");
    }
  }
  EXPECT_THROW(q.run([] { fail(ErrorCode::kTimeout, "inline"); }), Error);
}

TEST(OpQueue, WaitWithTimeoutReturnsFalseWhileRunning) {
  OpQueue q;
  std::promise<void> release;
  Work w = q.submit([held = release.get_future().share()] { held.wait_for(5s); });
  EXPECT_FALSE(w.wait(20ms));
  EXPECT_FALSE(w.test());
  EXPECT_EQ(w.exception(), nullptr);
  release.set_value();
  EXPECT_TRUE(w.wait(5000ms));
  EXPECT_TRUE(w.test());
}

TEST(OpQueue, DestructionFinishesQueuedOperations) {
  std::atomic<int> done{0};
  std::vector<Work> works;
  {
    OpQueue q;
    for (int i = 0; i < 10; ++i) {
      works.push_back(q.submit([&done] {
        std::this_thread::sleep_for(1ms);  // time passes: ops still queued at the destruction
        ++done;
      }));
    }
  }
  EXPECT_EQ(done.load(), 10);
  for (auto& w : works) EXPECT_TRUE(w.test());
}

TEST(OpQueue, WorksMayBeWaitedOnFromOtherThreads) {
  OpQueue q;
  std::promise<void> go;
  Work w = q.submit([held = go.get_future().share()] { held.wait_for(5s); });
  std::atomic<int> woke{0};
  std::vector<std::thread> waiters;
  for (int i = 0; i < 4; ++i) waiters.emplace_back([w, &woke] {
    w.wait();
    ++woke;
  });
  go.set_value();
  for (auto& t : waiters) t.join();
  EXPECT_EQ(woke.load(), 4);
}

}  // namespace
}  // namespace gyre
