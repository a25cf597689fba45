// What the shared-memory pipe tests share (shm_pipe_test.cc, shm_pipe_failure_test.cc,
// shm_segment_test.cc): bounded waits, numbered slices with a checked byte pattern
// (sendStream/recvStream), and the fixture that names each test's segments after it and
// fails a test that leaves anything in /dev/shm (removing it, so one failure does not
// spill into the next run). The peer processes are fork_ranks.h's.
#pragma once

#include <dirent.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "base/error.h"
#include "expect_error.h"
#include "fork_ranks.h"
#include "transport/shm/shm_pipe.h"
#include "transport/shm/shm_segment.h"

namespace gyre::shm_test {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
using testing::ForkedRanks;
using testing::RankResult;

inline WaitContext within(Clock::duration d, const std::atomic<bool>* aborted = nullptr,
                          std::chrono::microseconds spin = 50us) {
  WaitContext ctx;
  ctx.deadline = Clock::now() + d;
  ctx.aborted = aborted;
  ctx.spin = spin;
  return ctx;
}

inline double msSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

inline void require(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

// The stream both directions check: slice i has a size that varies over [0, B] (both
// ends included), a tag that numbers it, and bytes that depend on i and the offset.
inline size_t sliceSize(size_t i, size_t slotBytes) {
  if (i % 7 == 0) return slotBytes;
  return (i * 7919) % (slotBytes + 1);
}
inline std::byte pattern(size_t i, size_t j, uint32_t seed) {
  return static_cast<std::byte>((i * 131 + j * 7 + seed * 29 + (j >> 8)) & 0xff);
}
inline Tag tagOf(size_t i, size_t bytes) {
  Tag t;
  t.seq = static_cast<uint32_t>(i);
  t.count = bytes;
  t.coll = 3;
  t.root = static_cast<int32_t>(i % 5);
  return t;
}

inline void sendStream(SendPipe& tx, size_t n, uint32_t seed) {
  for (size_t i = 0; i < n; ++i) {
    std::byte* slot = tx.acquire(within(20s));
    size_t bytes = sliceSize(i, tx.slotBytes());
    for (size_t j = 0; j < bytes; ++j) slot[j] = pattern(i, j, seed);
    tx.post(bytes, tagOf(i, bytes));
  }
  tx.flush(within(20s));
}

// "" when the n slices arrive in order with the right sizes, tags and bytes.
inline std::string recvStream(RecvPipe& rx, size_t n, uint32_t seed) {
  for (size_t i = 0; i < n; ++i) {
    Slice s = rx.wait(within(20s));
    size_t bytes = sliceSize(i, rx.slotBytes());
    if (s.bytes != bytes) return fmt::format("slice {}: {} bytes, expected {}", i, s.bytes, bytes);
    if (!(s.tag == tagOf(i, bytes)))
      return fmt::format("slice {}: wrong tag (seq {})", i, s.tag.seq);
    for (size_t j = 0; j < bytes; ++j) {
      if (s.data[j] != pattern(i, j, seed)) return fmt::format("slice {}: byte {} differs", i, j);
    }
    rx.release();
  }
  return "";
}

class ShmPipeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    token_ = fmt::format("t{}{}", ::getpid(), info->name());
  }

  // Every test must leave nothing in /dev/shm; remove leftovers so one failure does
  // not spill into the next run.
  void TearDown() override {
    std::vector<std::string> left = leftovers();
    EXPECT_TRUE(left.empty()) << "left in /dev/shm: " << left.front();
    for (const auto& f : left) ShmSegment::unlink("/" + f);
  }

  std::vector<std::string> leftovers() const {
    std::vector<std::string> found;
    std::string prefix = shmSegmentName(token_, 0, 0, 0).substr(1);
    prefix = prefix.substr(0, prefix.find('-', 5) + 1);  // "gyre-<token>-"
    if (DIR* d = ::opendir("/dev/shm")) {
      while (dirent* e = ::readdir(d)) {
        if (std::string(e->d_name).rfind(prefix, 0) == 0) found.push_back(e->d_name);
      }
      ::closedir(d);
    }
    return found;
  }

  std::string name(int sender, int receiver, uint64_t comm = 7) const {
    return shmSegmentName(token_, comm, sender, receiver);
  }

  std::string token_;
};

}  // namespace gyre::shm_test
