// All-to-all with a size per peer (allToAllv) across real processes (tcp and shm) on 1,
// 2, 3, 5 and 8 ranks: sizes that differ per pair (zero for some, larger than a pipe for
// others), packed and scattered layouts (receive blocks in reverse rank order with gaps
// that must stay untouched), every byte checked exactly and the send buffer unchanged.
// Also: the arrays are copied at issue (an async call whose arrays are gone by then
// still moves the right blocks); bad layouts are kInvalidArgument before anything moves;
// a receiver that expects another size than its sender sends fails with a mismatch
// naming both sizes, never a truncated block, and its peers learn of it.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "base/error.h"
#include "collective_test_support.h"
#include "ring/communicator.h"
#include "ring/spawn.h"

namespace gyre {
namespace {

using testing::blockByte;
using testing::check;
using testing::collectiveOptions;

constexpr std::byte kGap{0xa5};

// Elements rank `from` sends rank `to` in call `call`: 0 for about one pair in four,
// else up to `scale` times a small factor (scale 7001 x 8 bytes crosses the 64 KiB pipe).
size_t countOf(int from, int to, size_t call, size_t scale) {
  const size_t k = (static_cast<size_t>(from) * 3 + static_cast<size_t>(to) * 5 + call) % 4;
  return k * scale;
}

// One allToAllv of dtype t; `scattered`: the receive blocks in reverse rank order with a
// gap of 3 elements before each (and send blocks likewise), else packed (null displs).
void allToAllvChecked(Communicator& comm, DataType t, size_t call, size_t scale,
                      bool scattered) {
  const int me = comm.rank(), n = comm.size();
  const size_t elem = dtypeSize(t);
  std::vector<size_t> sc(n), sd(n), rc(n), rd(n);
  size_t sAt = 0, rAt = 0;
  for (int p = 0; p < n; ++p) {
    sc[p] = countOf(me, p, call, scale);
    rc[p] = countOf(p, me, call, scale);
    sd[p] = sAt + (scattered ? 3 : 0);
    sAt = sd[p] + sc[p];
  }
  for (int i = 0; i < n; ++i) {
    const int p = scattered ? n - 1 - i : i;
    rd[p] = rAt + (scattered ? 3 : 0);
    rAt = rd[p] + rc[p];
  }
  std::vector<std::byte> in(sAt * elem, kGap), out(rAt * elem + 16, kGap);
  for (int p = 0; p < n; ++p) {
    for (size_t j = 0; j < sc[p] * elem; ++j) in[sd[p] * elem + j] = blockByte(me, p, call, j);
  }
  const std::vector<std::byte> inCopy = in;
  if (scattered) {
    comm.allToAllv(in.data(), sc.data(), sd.data(), out.data(), rc.data(), rd.data(), t);
  } else {
    comm.allToAllv(in.data(), sc.data(), nullptr, out.data(), rc.data(), nullptr, t);
  }
  std::vector<bool> ours(out.size(), false);
  for (int p = 0; p < n; ++p) {
    for (size_t j = 0; j < rc[p] * elem; ++j) {
      ours[rd[p] * elem + j] = true;
      check(out[rd[p] * elem + j] == blockByte(p, me, call, j),
            "rank {}: alltoallv call {} ({}): byte {} of the block from rank {} differs", me,
            call, dtypeName(t), j, p);
    }
  }
  for (size_t b = 0; b < out.size(); ++b) {
    check(ours[b] || out[b] == kGap, "rank {}: alltoallv call {} wrote byte {} outside a block",
          me, call, b);
  }
  check(in == inCopy, "rank {}: alltoallv call {} changed sendbuf", me, call);
}

class AllToAllvRanks : public ::testing::TestWithParam<testing::TransportRanks> {};

TEST_P(AllToAllvRanks, UnevenBlocksPackedAndScattered) {
  const auto [transport, n] = GetParam();
  spawn(n, [](Communicator& comm) {
    size_t call = 0;
    for (DataType t : {DataType::kInt8, DataType::kFloat32, DataType::kFloat64}) {
      for (size_t scale : {size_t{1}, size_t{7001}}) {
        if (comm.size() > 5 && scale > 1 && t != DataType::kFloat64) continue;  // 2 cores
        allToAllvChecked(comm, t, call++, scale, false);
        allToAllvChecked(comm, t, call++, scale, true);
      }
    }
  }, collectiveOptions(transport));
}

INSTANTIATE_TEST_SUITE_P(Transports, AllToAllvRanks, testing::everyTransportAndRankCount(),
                         testing::transportRanksName);

// Async, between other collectives, with its arrays freed before it runs: the blocks
// still follow the arrays as they were at the call.
TEST(AllToAllv, AsyncCopiesItsArraysAndKeepsItsPlace) {
  spawn(4, [](Communicator& comm) {
    const int me = comm.rank(), n = comm.size();
    std::vector<std::byte> in(64 * 1024), out(64 * 1024, kGap);
    std::vector<size_t> want(n);
    float x = 1, sum = 0;
    Work a = comm.allReduceAsync(&x, &sum, 1, DataType::kFloat32, ReduceOp::kSum);
    Work b;
    {
      std::vector<size_t> sc(n), rc(n);
      for (int p = 0; p < n; ++p) {
        sc[p] = 1000 * (1 + (me + p) % 3);
        rc[p] = want[p] = 1000 * (1 + (p + me) % 3);
      }
      size_t at = 0;
      for (int p = 0; p < n; ++p) {
        for (size_t j = 0; j < sc[p]; ++j) in[at + j] = blockByte(me, p, 9, j);
        at += sc[p];
      }
      b = comm.allToAllvAsync(in.data(), sc.data(), nullptr, out.data(), rc.data(), nullptr,
                              DataType::kUint8);
      std::fill(sc.begin(), sc.end(), 0);  // changed, then gone, before the call runs
      std::fill(rc.begin(), rc.end(), 0);
    }
    comm.barrier();
    a.wait();
    b.wait();
    check(sum == 4.0f, "rank {}: the all-reduce before the alltoallv is wrong", me);
    size_t at = 0;
    for (int p = 0; p < n; ++p) {
      for (size_t j = 0; j < want[p]; ++j) {
        check(out[at + j] == blockByte(p, me, 9, j),
              "rank {}: async alltoallv: byte {} from rank {} differs", me, j, p);
      }
      at += want[p];
    }
    check(out[at] == kGap, "rank {}: async alltoallv wrote past its blocks", me);
  }, collectiveOptions(TransportKind::kShm));
}

// Layouts that cannot work are refused on the calling rank before anything moves; the
// communicator then still works.
TEST(AllToAllv, RejectsBadLayoutsBeforeSending) {
  spawn(3, [](Communicator& comm) {
    const int me = comm.rank();
    std::vector<float> buf(64);
    auto expectInvalid = [&](const char* what, const char* needle, auto&& call) {
      try {
        call();
      } catch (const Error& e) {
        check(e.code() == ErrorCode::kInvalidArgument, "rank {}: {}: wrong code: {}", me, what,
              e.what());
        check(std::string(e.what()).find(needle) != std::string::npos,
              "rank {}: {}: the error does not say '{}': {}", me, what, needle, e.what());
        check(std::string(e.what()).find("alltoallv") != std::string::npos,
              "rank {}: {}: the error does not name the call: {}", me, what, e.what());
        return;
      }
      check(false, "rank {}: alltoallv with {} was accepted", me, what);
    };
    std::vector<size_t> ones(3, 2), zeros(3, 0);
    std::vector<size_t> self = zeros;
    self[me] = 2;
    expectInvalid("own counts differ", "from itself", [&] {
      comm.allToAllv(buf.data(), self.data(), nullptr, buf.data() + 32, zeros.data(), nullptr,
                     DataType::kFloat32);
    });
    expectInvalid("null counts", "null recvCounts", [&] {
      comm.allToAllv(buf.data(), ones.data(), nullptr, buf.data() + 32, nullptr, nullptr,
                     DataType::kFloat32);
    });
    expectInvalid("null recvbuf", "null recvbuf", [&] {
      comm.allToAllv(buf.data(), ones.data(), nullptr, nullptr, ones.data(), nullptr,
                     DataType::kFloat32);
    });
    const std::vector<size_t> same{0, 1, 1};  // blocks from ranks 1 and 2 share element 1
    expectInvalid("overlapping receive blocks", "overlap", [&] {
      comm.allToAllv(buf.data(), ones.data(), nullptr, buf.data() + 32, ones.data(),
                     same.data(), DataType::kFloat32);
    });
    expectInvalid("send and receive overlap", "overlap", [&] {
      comm.allToAllvAsync(buf.data(), ones.data(), nullptr, buf.data() + 5, ones.data(), nullptr,
                          DataType::kFloat32)
          .wait();
    });
    const std::vector<size_t> huge{0, 0, static_cast<size_t>(-1) / 4};
    expectInvalid("displacement past size_t", "too large", [&] {
      comm.allToAllv(buf.data(), ones.data(), huge.data(), buf.data() + 32, ones.data(), nullptr,
                     DataType::kFloat32);
    });
    // Sending the same elements to several ranks is allowed (send blocks may overlap).
    const std::vector<float> src{1, 2};
    std::vector<float> got(6, 0);
    const std::vector<size_t> at0(3, 0);
    comm.allToAllv(src.data(), ones.data(), at0.data(), got.data(), ones.data(), nullptr,
                   DataType::kFloat32);
    check(got == std::vector<float>{1, 2, 1, 2, 1, 2}, "rank {}: shared send block: wrong", me);
  }, collectiveOptions(TransportKind::kTcp));
}

// Rank 2 expects one element more from rank 0 than rank 0 sends: rank 2 fails in the call
// with kMismatch naming rank 0 and both counts, before its block from rank 0 is written.
// Ranks 0 and 1, whose own blocks all arrived, learn of rank 2's abort in the call or at
// the latest in their next one (point to point's rule: a send that fits in the pipe
// completes), within seconds.
TEST(AllToAllv, ReceiveCountThatDiffersFromTheSendIsNamed) {
  for (TransportKind transport : {TransportKind::kTcp, TransportKind::kShm}) {
    SCOPED_TRACE(transportName(transport));
    spawn(3, [](Communicator& comm) {
      const int me = comm.rank();
      std::vector<size_t> sc(3, 100), rc(3, 100);
      if (me == 2) rc[0] = 101;
      std::vector<int32_t> in(300, 7), out(301, -1);
      const auto start = std::chrono::steady_clock::now();
      std::string failure;
      try {
        comm.allToAllv(in.data(), sc.data(), nullptr, out.data(), rc.data(), nullptr,
                       DataType::kInt32);
        check(me != 2, "rank 2: the mismatched alltoallv succeeded");
        comm.barrier();
      } catch (const Error& e) {
        failure = e.what();
        if (me == 2) {
          check(e.code() == ErrorCode::kMismatch, "rank 2: wrong code: {}", failure);
          check(failure.find("alltoallv #0 (int32, count 101) but its peer rank 0 runs "
                             "alltoallv #0 (int32, count 100)") != std::string::npos,
                "rank 2: the error does not name both sizes: {}", failure);
          check(out[0] == -1, "rank 2: the mismatched block was written: {}", out[0]);
        } else {
          check(e.code() == ErrorCode::kMismatch || e.code() == ErrorCode::kRemoteError ||
                    e.code() == ErrorCode::kAborted,
                "rank {}: wrong code: {}", me, failure);
          check(failure.find("rank 2") != std::string::npos,
                "rank {}: the error does not name rank 2: {}", me, failure);
        }
      }
      check(!failure.empty(), "rank {}: a mismatched alltoallv went unnoticed", me);
      const double took =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      check(took < 10.0, "rank {}: failed only after {} s: {}", me, took, failure);
    }, collectiveOptions(transport));
  }
}

}  // namespace
}  // namespace gyre
