// Point to point across real processes (tcp and shm): send/recv between every pair of
// ranks, every dtype, counts around the slot boundaries and far past the pipe's
// capacity, checked byte for byte with guards; order between one pair; ranks that
// take no part keep running collectives (p2p does not move the communicator's
// sequence); async receives from two senders; sendRecv ring shifts larger than the
// pipes on 2..8 ranks; and the failures: a count mismatch fails both ranks with a
// named kMismatch and writes nothing, a bad peer is kInvalidArgument, and two ranks
// that both block in large sends end in a kTimeout naming the peer, never a hang.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "base/error.h"
#include "ring/communicator.h"
#include "ring/spawn.h"
#include "test_values.h"

namespace gyre {
namespace {

using testing::check;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr size_t kSlotBytes = 16 * 1024;  // 4 slots: 64 KiB per pipe
constexpr size_t kGuard = 16;
constexpr std::byte kGuardByte{0xa5};

SpawnOptions options(TransportKind transport) {
  SpawnOptions o;
  o.options.timeout = std::chrono::seconds(30);
  o.options.transport = transport;
  o.options.slotBytes = kSlotBytes;
  o.options.slots = 4;
  return o;
}

// Byte j of message `salt`: not periodic, so a slice delivered at the wrong offset (a
// multiple of the slot size) or from the wrong message shows.
std::byte patternByte(uint64_t salt, size_t j) {
  uint64_t x = (salt + 1) * 0x9e3779b97f4a7c15ull + j * 0xbf58476d1ce4e5b9ull;
  x ^= x >> 31;
  x *= 0x94d049bb133111ebull;
  return static_cast<std::byte>(x >> 56);
}

std::vector<std::byte> pattern(uint64_t salt, size_t bytes) {
  std::vector<std::byte> v(bytes);
  for (size_t j = 0; j < bytes; ++j) v[j] = patternByte(salt, j);
  return v;
}

uint64_t saltOf(int from, int to, size_t message) {
  return (static_cast<uint64_t>(from) << 48) ^ (static_cast<uint64_t>(to) << 40) ^ message;
}

// A receive buffer of `bytes` bytes, filled with a marker, and a guard zone past it.
struct RecvBuffer {
  explicit RecvBuffer(size_t bytes) : bytes(bytes), mem(bytes + kGuard, kGuardByte) {
    std::fill(mem.begin(), mem.begin() + static_cast<ptrdiff_t>(bytes), std::byte{0x5c});
  }
  void* data() { return mem.data(); }
  bool holds(const std::vector<std::byte>& want) const {
    return want.size() == bytes && testing::sameBytes(mem.data(), want.data(), bytes);
  }
  bool untouched() const {
    return std::all_of(mem.begin(), mem.begin() + static_cast<ptrdiff_t>(bytes),
                       [](std::byte b) { return b == std::byte{0x5c}; });
  }
  bool guardIntact() const {
    return std::all_of(mem.begin() + static_cast<ptrdiff_t>(bytes), mem.end(),
                       [](std::byte b) { return b == kGuardByte; });
  }
  size_t bytes;
  std::vector<std::byte> mem;
};

// Sends message `message` of `count` elements of `t` from `from` to `to` (the other
// ranks do nothing) and checks it on the receiver.
void transfer(Communicator& comm, int from, int to, DataType t, size_t count, size_t message) {
  const size_t bytes = count * dtypeSize(t);
  const uint64_t salt = saltOf(from, to, message);
  if (comm.rank() == from) {
    const std::vector<std::byte> out = pattern(salt, bytes);
    comm.send(out.data(), count, t, to);
    check(out == pattern(salt, bytes), "rank {}: send changed its buffer", from);
  } else if (comm.rank() == to) {
    RecvBuffer in(bytes);
    comm.recv(in.data(), count, t, from);
    check(in.holds(pattern(salt, bytes)), "rank {}: message {} ({} x {}) from rank {} differs",
          to, message, count, dtypeName(t), from);
    check(in.guardIntact(), "rank {}: recv of {} x {} wrote past the buffer", to, count,
          dtypeName(t));
  }
}

class PointToPoint : public ::testing::TestWithParam<TransportKind> {};

TEST_P(PointToPoint, EveryPairDtypeAndCountInOrder) {
  spawn(4, [](Communicator& comm) {
    // 100003 elements are 1.5 to 12 times the pipe's 64 KiB.
    const size_t counts[] = {0, 1, 7, 100003};
    for (int from = 0; from < comm.size(); ++from) {
      for (int to = 0; to < comm.size(); ++to) {
        if (from == to) continue;
        size_t message = 0;
        for (DataType t : testing::kAllTypes) {
          for (size_t count : counts) transfer(comm, from, to, t, count, message++);
        }
        // Several messages of one shape in a row arrive in the order they were sent.
        for (int i = 0; i < 5; ++i) transfer(comm, from, to, DataType::kInt32, 30011, message++);
      }
    }
  }, options(GetParam()));
}

// Ranks 2 and 3 go straight into the all-reduces while 0 and 1 exchange messages
// bigger than the pipes; point to point must not move the collective sequence, or
// the all-reduces would fail with a mismatch.
TEST_P(PointToPoint, OtherRanksKeepRunningCollectives) {
  spawn(4, [](Communicator& comm) {
    const DataType t = DataType::kInt32;
    const size_t count = 10007;
    const std::vector<std::byte> want =
        testing::expectedBuffer(t, ReduceOp::kSum, comm.size(), count);
    for (int round = 0; round < 4; ++round) {
      const int from = round % 2;  // 0 -> 1, 1 -> 0, ...
      const int to = 1 - from;
      transfer(comm, from, to, DataType::kFloat32, 200003, static_cast<size_t>(round));
      transfer(comm, from, to, DataType::kUint8, 0, 100 + static_cast<size_t>(round));
      std::vector<std::byte> in = testing::inputBuffer(t, ReduceOp::kSum, comm.rank(), count);
      std::vector<std::byte> out(in.size());
      comm.allReduce(in.data(), out.data(), count, t, ReduceOp::kSum);
      check(testing::sameBytes(out.data(), want.data(), count * dtypeSize(t)),
            "rank {}: all-reduce #{} after send/recv is wrong", comm.rank(), round);
    }
    // And the other way round: 2 and 3 exchange while 0 and 1 go on.
    transfer(comm, 3, 2, DataType::kFloat64, 50021, 7);
    comm.barrier();
  }, options(GetParam()));
}

// Rank 0 posts receives from ranks 1 and 2 before waiting for either; both senders
// send more than their pipe holds, at once. Rank 1 sends asynchronously.
TEST_P(PointToPoint, AsyncReceivesFromTwoSenders) {
  spawn(4, [](Communicator& comm) {
    const size_t count = 300007;
    const DataType t = DataType::kFloat32;
    const size_t bytes = count * dtypeSize(t);
    if (comm.rank() == 0) {
      RecvBuffer from1(bytes), from2(bytes);
      Work w1 = comm.recvAsync(from1.data(), count, t, 1);
      Work w2 = comm.recvAsync(from2.data(), count, t, 2);
      w2.wait();
      w1.wait();
      check(w1.test() && w2.test() && !w1.exception() && !w2.exception(),
            "rank 0: finished receives report a failure or are not done");
      check(from1.holds(pattern(saltOf(1, 0, 0), bytes)), "rank 0: data from rank 1 differs");
      check(from2.holds(pattern(saltOf(2, 0, 0), bytes)), "rank 0: data from rank 2 differs");
      check(from1.guardIntact() && from2.guardIntact(), "rank 0: wrote past a buffer");
    } else if (comm.rank() == 1) {
      const std::vector<std::byte> out = pattern(saltOf(1, 0, 0), bytes);
      Work w = comm.sendAsync(out.data(), count, t, 0);
      w.wait();
    } else if (comm.rank() == 2) {
      const std::vector<std::byte> out = pattern(saltOf(2, 0, 0), bytes);
      comm.send(out.data(), count, t, 0);
    }
    comm.barrier();
  }, options(GetParam()));
}

// Every rank calls a bad peer (itself, below 0, past the end): kInvalidArgument at
// once, naming the peer, and nothing is sent, so the communicator goes on working.
TEST_P(PointToPoint, RejectsInvalidPeers) {
  spawn(3, [](Communicator& comm) {
    float x[4] = {1, 2, 3, 4};
    float y[4] = {};
    const int me = comm.rank();
    for (int peer : {me, -1, comm.size(), comm.size() + 7}) {
      auto expectInvalid = [&](const char* what, auto&& call) {
        try {
          call();
        } catch (const Error& e) {
          check(e.code() == ErrorCode::kInvalidArgument, "rank {}: {} to peer {}: wrong code: {}",
                me, what, peer, e.what());
          check(std::string(e.what()).find(fmt::format("peer {}", peer)) != std::string::npos,
                "rank {}: {}: the error does not name peer {}: {}", me, what, peer, e.what());
          return;
        }
        check(false, "rank {}: {} with peer {} was accepted", me, what, peer);
      };
      const int good = (me + 1) % comm.size();
      expectInvalid("send", [&] { comm.send(x, 4, DataType::kFloat32, peer); });
      expectInvalid("recv", [&] { comm.recv(y, 4, DataType::kFloat32, peer); });
      expectInvalid("sendAsync", [&] { comm.sendAsync(x, 4, DataType::kFloat32, peer).wait(); });
      expectInvalid("recvAsync", [&] { comm.recvAsync(y, 4, DataType::kFloat32, peer).wait(); });
      expectInvalid("sendRecv (send peer)",
                    [&] { comm.sendRecv(x, 4, peer, y, 4, good, DataType::kFloat32); });
      expectInvalid("sendRecv (recv peer)",
                    [&] { comm.sendRecv(x, 4, good, y, 4, peer, DataType::kFloat32); });
    }
    // Nothing moved: a send/recv and a collective still pair up.
    transfer(comm, 0, 2, DataType::kFloat32, 4, 0);
    comm.allReduce(x, y, 4, DataType::kFloat32, ReduceOp::kSum);
    check(y[0] == 3.0f && y[3] == 12.0f, "rank {}: all-reduce after rejected calls is wrong", me);
  }, options(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(Transports, PointToPoint,
                         ::testing::Values(TransportKind::kTcp, TransportKind::kShm),
                         [](const auto& info) { return transportName(info.param); });

class SendRecvRanks : public ::testing::TestWithParam<std::tuple<TransportKind, int>> {};

// Every rank sends 1 MiB (16 times a pipe) to rank + 1 and receives from rank - 1 at
// once: a cycle that would deadlock with blocking sends. Then counts that differ per
// direction, in place, and a pairwise exchange (send and receive peer the same).
TEST_P(SendRecvRanks, RingShiftsLargerThanThePipes) {
  const auto [transport, n] = GetParam();
  spawn(n, [](Communicator& comm) {
    const int me = comm.rank();
    const int size = comm.size();
    const int right = (me + 1) % size;
    const int left = (me + size - 1) % size;
    {
      const size_t count = (1 << 20) / sizeof(float);
      const size_t bytes = count * sizeof(float);
      const std::vector<std::byte> out = pattern(saltOf(me, right, 0), bytes);
      RecvBuffer in(bytes);
      comm.sendRecv(out.data(), count, right, in.data(), count, left, DataType::kFloat32);
      check(in.holds(pattern(saltOf(left, me, 0), bytes)) && in.guardIntact(),
            "rank {}: 1 MiB shift from rank {} differs", me, left);
    }
    {
      // Rank r sends (r + 1) * 20011 + r elements: every direction a different size.
      auto countOf = [](int r) { return static_cast<size_t>(r + 1) * 20011 + r; };
      const DataType t = DataType::kFloat16;
      const size_t sendBytes = countOf(me) * dtypeSize(t);
      const size_t recvBytes = countOf(left) * dtypeSize(t);
      const std::vector<std::byte> out = pattern(saltOf(me, right, 1), sendBytes);
      RecvBuffer in(recvBytes);
      comm.sendRecv(out.data(), countOf(me), right, in.data(), countOf(left), left, t);
      check(in.holds(pattern(saltOf(left, me, 1), recvBytes)) && in.guardIntact(),
            "rank {}: shift of {} elements from rank {} differs", me, countOf(left), left);
    }
    {
      // In place, shifting the other way: sendbuf == recvbuf.
      const size_t count = 150001;
      std::vector<std::byte> buf = pattern(saltOf(me, left, 2), count * 4 + kGuard);
      const std::vector<std::byte> want = pattern(saltOf(right, me, 2), count * 4);
      comm.sendRecv(buf.data(), count, left, buf.data(), count, right, DataType::kInt32);
      check(std::memcmp(buf.data(), want.data(), count * 4) == 0,
            "rank {}: in-place shift from rank {} differs", me, right);
    }
    {
      // Overlapping: the receive lands a third of the way into the send data, on
      // slices not sent yet.
      const size_t count = 60013;
      const size_t shift = count / 3;
      std::vector<std::byte> buf(count * 2 + shift * 2 + kGuard, kGuardByte);
      const std::vector<std::byte> out = pattern(saltOf(me, right, 4), count * 2);
      std::memcpy(buf.data(), out.data(), out.size());
      std::byte* recvAt = buf.data() + shift * 2;
      comm.sendRecv(buf.data(), count, right, recvAt, count, left, DataType::kBFloat16);
      check(std::memcmp(recvAt, pattern(saltOf(left, me, 4), count * 2).data(), count * 2) == 0,
            "rank {}: overlapping shift from rank {} differs", me, left);
      check(std::memcmp(buf.data(), out.data(), shift * 2) == 0 &&
                buf[count * 2 + shift * 2] == kGuardByte,
            "rank {}: overlapping shift wrote outside its receive buffer", me);
    }
    if (size % 2 == 0) {
      // Pairs exchange: the send and the receive peer are the same rank.
      const int partner = me ^ 1;
      const size_t count = 99991;
      const std::vector<std::byte> out = pattern(saltOf(me, partner, 3), count * 8);
      RecvBuffer in(count * 8);
      comm.sendRecv(out.data(), count, partner, in.data(), count, partner, DataType::kUint64);
      check(in.holds(pattern(saltOf(partner, me, 3), count * 8)) && in.guardIntact(),
            "rank {}: exchange with rank {} differs", me, partner);
    }
    comm.barrier();
  }, options(transport));
}

INSTANTIATE_TEST_SUITE_P(
    Transports, SendRecvRanks,
    ::testing::Combine(::testing::Values(TransportKind::kTcp, TransportKind::kShm),
                       ::testing::Values(2, 3, 5, 8)),
    [](const auto& info) {
      return fmt::format("{}_{}ranks", transportName(std::get<0>(info.param)),
                         std::get<1>(info.param));
    });

// Runs `body` on every rank of a 2-rank group, expecting it to throw: checks the code
// (one of `codes`), that the message names the other rank, and that it came quickly.
struct ExpectedFailure {
  std::vector<ErrorCode> codes;
  std::chrono::milliseconds within;
};

void expectFailure(Communicator& comm, const ExpectedFailure& expected,
                   const std::function<void()>& body) {
  const int peer = 1 - comm.rank();
  const auto start = Clock::now();
  try {
    body();
  } catch (const Error& e) {
    const auto took = Clock::now() - start;
    const std::string msg = e.what();
    check(std::find(expected.codes.begin(), expected.codes.end(), e.code()) !=
              expected.codes.end(),
          "rank {}: unexpected error code {}: {}", comm.rank(), static_cast<int>(e.code()), msg);
    check(msg.find(fmt::format("rank {}", peer)) != std::string::npos,
          "rank {}: the error does not name peer rank {}: {}", comm.rank(), peer, msg);
    check(took < expected.within, "rank {}: failing took {} ms: {}", comm.rank(),
          std::chrono::duration_cast<std::chrono::milliseconds>(took).count(), msg);
    return;
  }
  check(false, "rank {}: no error", comm.rank());
}

struct MismatchCase {
  const char* name;
  TransportKind transport;
  size_t sendCount;
  DataType sendType;
  size_t recvCount;
  DataType recvType;
};

class PointToPointMismatch : public ::testing::TestWithParam<MismatchCase> {};

// Rank 0 sends, rank 1 receives a different count or dtype. The receiver fails with
// kMismatch naming the sender's call and writes nothing (no truncated message); the
// sender fails too, in its send if it is larger than the pipe, or else in its next
// call, from the receiver's abort. Both well within the 30 s timeout.
TEST_P(PointToPointMismatch, FailsBothRanksAndWritesNothing) {
  const MismatchCase c = GetParam();
  spawn(2, [c](Communicator& comm) {
    if (comm.rank() == 0) {
      const std::vector<std::byte> out(c.sendCount * dtypeSize(c.sendType), std::byte{1});
      expectFailure(comm, {{ErrorCode::kMismatch, ErrorCode::kRemoteError}, 10s}, [&] {
        comm.send(out.data(), c.sendCount, c.sendType, 1);
        comm.barrier();  // where a send that fit in the pipe learns of the failure
      });
    } else {
      RecvBuffer in(c.recvCount * dtypeSize(c.recvType));
      expectFailure(comm, {{ErrorCode::kMismatch}, 10s},
                    [&] { comm.recv(in.data(), c.recvCount, c.recvType, 0); });
      check(in.untouched() && in.guardIntact(), "rank 1: a mismatched recv wrote data");
    }
    // The communicator is aborted now: later calls fail at once.
    try {
      comm.barrier();
    } catch (const Error& e) {
      check(e.code() == ErrorCode::kAborted, "rank {}: after the failure: {}", comm.rank(),
            e.what());
      return;
    }
    check(false, "rank {}: the communicator still works after a failure", comm.rank());
  }, options(c.transport));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, PointToPointMismatch,
    ::testing::Values(
        MismatchCase{"tcp_small", TransportKind::kTcp, 1000, DataType::kFloat32, 999,
                     DataType::kFloat32},
        MismatchCase{"shm_small", TransportKind::kShm, 1000, DataType::kFloat32, 1001,
                     DataType::kFloat32},
        MismatchCase{"tcp_large", TransportKind::kTcp, 1 << 20, DataType::kFloat32,
                     (1 << 20) + 1, DataType::kFloat32},
        MismatchCase{"shm_large", TransportKind::kShm, 1 << 20, DataType::kFloat32,
                     (1 << 20) - 1, DataType::kFloat32},
        MismatchCase{"shm_dtype", TransportKind::kShm, 50000, DataType::kFloat32, 50000,
                     DataType::kInt32},
        MismatchCase{"tcp_empty", TransportKind::kTcp, 0, DataType::kUint8, 1,
                     DataType::kUint8}),
    [](const auto& info) { return std::string(info.param.name); });

// A user's deadlock: both ranks send 4 MiB (and more over tcp, whose kernel buffers
// can swallow a few MiB) to each other before receiving, over pipes of 4 x 16 KiB.
// Both must end in kTimeout naming the other rank, shortly after the 2 s timeout.
class MutualBlockingSends : public ::testing::TestWithParam<TransportKind> {};

TEST_P(MutualBlockingSends, TimeOutNamingThePeer) {
  SpawnOptions so = options(GetParam());
  so.options.timeout = 2s;
  const size_t bytes = GetParam() == TransportKind::kTcp ? (16u << 20) : (4u << 20);
  spawn(2, [bytes](Communicator& comm) {
    const int peer = 1 - comm.rank();
    std::vector<std::byte> out(bytes, std::byte{7});
    std::vector<std::byte> in(bytes);
    expectFailure(comm, {{ErrorCode::kTimeout}, 8s}, [&] {
      comm.send(out.data(), bytes, DataType::kUint8, peer);
      comm.recv(in.data(), bytes, DataType::kUint8, peer);
    });
  }, so);
}

INSTANTIATE_TEST_SUITE_P(Transports, MutualBlockingSends,
                         ::testing::Values(TransportKind::kTcp, TransportKind::kShm),
                         [](const auto& info) { return transportName(info.param); });

}  // namespace
}  // namespace gyre
