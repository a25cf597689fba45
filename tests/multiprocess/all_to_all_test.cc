// All-to-all across real processes (tcp and shm) on 1, 2, 3, 5 and 8 ranks: every
// dtype, counts 0, 1, odd and blocks larger than a pipe, each block's bytes encoding
// its source rank, destination rank and index, checked exactly with a guard past the
// receive buffer; the send buffer is left as it was. Overlapping buffers are
// kInvalidArgument before anything moves, and ranks that disagree on the count fail
// with a named mismatch instead of exchanging wrong blocks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "base/error.h"
#include "ring/communicator.h"
#include "ring/spawn.h"
#include "collective_test_support.h"
#include "test_values.h"

namespace gyre {
namespace {

using testing::blockByte;
using testing::check;
using testing::collectiveOptions;

constexpr size_t kGuard = 16;
constexpr std::byte kGuardByte{0xa5};

// This rank's send buffer for `call`: block p (blockBytes each) goes to rank p.
std::vector<std::byte> sendBuffer(int rank, int size, size_t call, size_t blockBytes) {
  std::vector<std::byte> v(blockBytes * static_cast<size_t>(size));
  for (int p = 0; p < size; ++p) {
    for (size_t j = 0; j < blockBytes; ++j) v[p * blockBytes + j] = blockByte(rank, p, call, j);
  }
  return v;
}

// Runs one all-to-all and checks every received block and byte.
void allToAllChecked(Communicator& comm, DataType t, size_t count, size_t call) {
  const int me = comm.rank();
  const int size = comm.size();
  const size_t blockBytes = count * dtypeSize(t);
  const std::vector<std::byte> in = sendBuffer(me, size, call, blockBytes);
  const std::vector<std::byte> inCopy = in;
  std::vector<std::byte> out(blockBytes * static_cast<size_t>(size) + kGuard, kGuardByte);
  comm.allToAll(in.data(), out.data(), count, t);
  for (int p = 0; p < size; ++p) {
    for (size_t j = 0; j < blockBytes; ++j) {
      check(out[p * blockBytes + j] == blockByte(p, me, call, j),
            "rank {}: alltoall of {} x {}: byte {} of the block from rank {} differs", me, count,
            dtypeName(t), j, p);
    }
  }
  check(std::all_of(out.end() - kGuard, out.end(), [](std::byte b) { return b == kGuardByte; }),
        "rank {}: alltoall of {} x {} wrote past recvbuf", me, count, dtypeName(t));
  check(in == inCopy, "rank {}: alltoall of {} x {} changed sendbuf", me, count, dtypeName(t));
}

class AllToAllRanks : public ::testing::TestWithParam<testing::TransportRanks> {};

TEST_P(AllToAllRanks, EveryDtypeAndCount) {
  const auto [transport, n] = GetParam();
  spawn(n, [](Communicator& comm) {
    // 20011 elements: blocks of 20 to 160 KB, up to 2.5 pipes. Eight ranks on two
    // cores get a lighter load: the large count for a few dtypes only.
    const bool light = comm.size() > 5;
    size_t call = 0;
    for (DataType t : testing::kAllTypes) {
      for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{20011}}) {
        if (light && count > 7 && t != DataType::kInt8 && t != DataType::kBFloat16 &&
            t != DataType::kFloat64) {
          continue;
        }
        allToAllChecked(comm, t, count, call++);
      }
    }
  }, collectiveOptions(transport));
}

INSTANTIATE_TEST_SUITE_P(Transports, AllToAllRanks, testing::everyTransportAndRankCount(),
                         testing::transportRanksName);

// Mixed with other collectives and async calls: the all-to-all takes its place in the
// communicator's sequence like any collective.
TEST(AllToAll, AsyncBetweenOtherCollectives) {
  spawn(4, [](Communicator& comm) {
    const size_t count = 30011;
    const int me = comm.rank();
    const std::vector<std::byte> in = sendBuffer(me, comm.size(), 1, count * 4);
    std::vector<std::byte> out(in.size());
    float x = 1, sum = 0;
    Work a = comm.allReduceAsync(&x, &sum, 1, DataType::kFloat32, ReduceOp::kSum);
    Work b = comm.allToAllAsync(in.data(), out.data(), count, DataType::kUint32);
    comm.barrier();
    a.wait();
    b.wait();
    check(sum == 4.0f, "rank {}: all-reduce before the all-to-all is wrong", me);
    for (int p = 0; p < comm.size(); ++p) {
      for (size_t j = 0; j < count * 4; ++j) {
        check(out[p * count * 4 + j] == blockByte(p, me, 1, j),
              "rank {}: async alltoall: byte {} from rank {} differs", me, j, p);
      }
    }
  }, collectiveOptions(TransportKind::kShm));
}

// In place or overlapping buffers are refused before anything is sent; the
// communicator then still works.
TEST(AllToAll, RejectsOverlappingBuffers) {
  spawn(3, [](Communicator& comm) {
    const size_t count = 100;
    std::vector<float> buf(count * 3 * 2);
    auto expectInvalid = [&](const char* what, const void* send, void* recv) {
      try {
        comm.allToAll(send, recv, count, DataType::kFloat32);
      } catch (const Error& e) {
        check(e.code() == ErrorCode::kInvalidArgument, "rank {}: {}: wrong code: {}",
              comm.rank(), what, e.what());
        check(std::string(e.what()).find("overlap") != std::string::npos,
              "rank {}: {}: the error does not say why: {}", comm.rank(), what, e.what());
        return;
      }
      check(false, "rank {}: alltoall with {} was accepted", comm.rank(), what);
    };
    expectInvalid("sendbuf == recvbuf", buf.data(), buf.data());
    expectInvalid("recvbuf inside sendbuf", buf.data(), buf.data() + 1);
    expectInvalid("sendbuf inside recvbuf", buf.data() + count * 3 - 1, buf.data());
    expectInvalid("async, in place", buf.data(), buf.data());  // sync and async share checks
    try {
      comm.allToAllAsync(buf.data(), buf.data() + 5, count, DataType::kFloat32).wait();
      check(false, "rank {}: async alltoall with overlapping buffers was accepted", comm.rank());
    } catch (const Error& e) {
      check(e.code() == ErrorCode::kInvalidArgument, "rank {}: async: wrong code: {}",
            comm.rank(), e.what());
    }
    // Adjacent halves of one allocation do not overlap.
    allToAllChecked(comm, DataType::kFloat32, 0, 0);
    const std::vector<std::byte> in = sendBuffer(comm.rank(), 3, 2, count * 4);
    std::memcpy(buf.data(), in.data(), in.size());
    comm.allToAll(buf.data(), buf.data() + count * 3, count, DataType::kFloat32);
    const auto* out = reinterpret_cast<const std::byte*>(buf.data() + count * 3);
    for (int p = 0; p < 3; ++p) {
      for (size_t j = 0; j < count * 4; ++j) {
        check(out[p * count * 4 + j] == blockByte(p, comm.rank(), 2, j),
              "rank {}: alltoall in adjacent halves: byte {} from rank {} differs", comm.rank(),
              j, p);
      }
    }
  }, collectiveOptions(TransportKind::kTcp));
}

// Rank 2 passes one more element per block than the others: every rank fails with
// kMismatch (directly or relayed) naming the all-to-all, within seconds, instead of
// exchanging blocks of the wrong size.
TEST(AllToAll, MismatchedCountsFailEveryRank) {
  spawn(3, [](Communicator& comm) {
    const size_t count = comm.rank() == 2 ? 1001 : 1000;
    std::vector<int32_t> in(count * 3, 1), out(count * 3, 0);
    const auto start = std::chrono::steady_clock::now();
    try {
      comm.allToAll(in.data(), out.data(), count, DataType::kInt32);
    } catch (const Error& e) {
      const std::string msg = e.what();
      check(e.code() == ErrorCode::kMismatch || e.code() == ErrorCode::kRemoteError,
            "rank {}: unexpected code: {}", comm.rank(), msg);
      check(msg.find("alltoall #0") != std::string::npos,
            "rank {}: the error does not name the call: {}", comm.rank(), msg);
      check(std::chrono::steady_clock::now() - start < std::chrono::seconds(10),
            "rank {}: the mismatch took too long to fail: {}", comm.rank(), msg);
      return;
    }
    check(false, "rank {}: a mismatched alltoall succeeded", comm.rank());
  }, collectiveOptions(TransportKind::kShm));
}

}  // namespace
}  // namespace gyre
