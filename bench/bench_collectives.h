// The collectives gyre-bench measures: nccl-tests' size and bus-bandwidth conventions for
// each, how one op is called out of place and in place, and its exact check.
//
// Sizes (nccl-tests): a row's size is the largest buffer an op touches, so that algbw =
// size / time: all-reduce, broadcast, reduce, send/recv: the buffer; all-gather: the
// gathered (receive) buffer; reduce-scatter: the send buffer; all-to-all: either buffer.
// Those three split it into `size` shares of `count` elements, so the size is rounded
// down to a multiple of ranks x element size. busbw = algbw x busBwFactor(n).
//
// In place (NCCL's rules): all-reduce and reduce sendbuf == recvbuf; all-gather sendbuf =
// recvbuf + rank * count; reduce-scatter recvbuf = sendbuf + rank * count; broadcast has
// one buffer (gyre's API is ncclBcast's), so it has no out-of-place group; all-to-all and
// send/recv have no in-place form. A group a collective lacks prints N/A.
//
// Checks count, on this rank, the elements that differ from an exact expectation
// (check_pattern.h): the result, a guard of elements past the written region (an
// overrun), the send buffer of out-of-place ops (it is const), and the receive buffer of
// a reduce's non-roots (it must stay untouched). Summing over ranks gives #wrong.
//
// A CollectiveRunner is one (collective, dtype, op, root) setting on one rank's two
// buffers; its calls are collective: every rank makes the same calls in the same order.
// Not thread-safe (it issues on its communicator).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "base/types.h"
#include "bench/check_pattern.h"
#include "ring/communicator.h"

namespace gyre::bench {

enum class CollectiveId {
  kAllReduce,
  kAllGather,
  kBroadcast,
  kReduce,
  kReduceScatter,
  kAllToAll,
  kSendRecv
};

struct CollectiveInfo {
  CollectiveId id;
  const char* name;          // nccl-tests' binary without _perf: all_reduce, all_gather, ...
  const char* alias;         // gyre's API spelling: allreduce, allgather, ...
  bool reduces;              // takes a reduction (else one pass per dtype, redop "none")
  bool rooted;               // the root column shows -r (else -1)
  bool outOfPlace, inPlace;  // which timing groups exist
  double (*busBwFactor)(int n);
};

// Every collective, in the order `all` runs them.
const std::vector<CollectiveInfo>& allCollectives();
// By name or alias; null if none.
const CollectiveInfo* findCollective(std::string_view name);

enum class Group { kOutOfPlace = 0, kInPlace = 1 };

// One sweep point: `bytes` requested, laid out for `n` ranks.
struct Layout {
  size_t count = 0;      // the API's count argument
  size_t elements = 0;   // the row's count column: bytes / element size
  size_t bytes = 0;      // the row's size column
  size_t sendElems = 0;  // buffer sizes of this rank, in elements
  size_t recvElems = 0;
};
Layout layoutFor(const CollectiveInfo& c, size_t bytes, size_t elemSize, int n);

// Elements past the written region that a check also expects untouched.
inline constexpr size_t kGuardElements = 64;

class CollectiveRunner {
 public:
  // `send` and `recv` hold `capacity` bytes each plus kGuardElements * 8 (the largest
  // element); every layout run on them has sendElems and recvElems within capacity.
  // Fills `send` with this rank's inputs, which out-of-place timing then reads.
  CollectiveRunner(Communicator& comm, const CollectiveInfo& c, DataType dtype, ReduceOp op,
                   int root, std::byte* send, std::byte* recv, size_t capacity);

  // Sets the buffers up for back-to-back timed ops of group g (in place: values that
  // op after op on its own output neither overflow nor turn into inf/NaN).
  void prepareTimed(const Layout& l, Group g);
  // One op of group g on the buffers as they are.
  void run(const Layout& l, Group g);
  // Lays out the inputs, runs one op of group g and returns this rank's wrong elements.
  uint64_t check(const Layout& l, Group g);

 private:
  // Where the op of group g reads and writes.
  struct Args {
    const std::byte* send;
    std::byte* recv;
  };
  Args args(const Layout& l, Group g) const;
  uint64_t checkReduction(const Layout& l, Group g);
  uint64_t checkMovement(const Layout& l, Group g);
  // Poisons the guard after `elems` elements at `base`; countGuard counts its changes.
  void poisonGuard(std::byte* base, size_t elems) const;
  uint64_t countGuard(const std::byte* base, size_t elems) const;

  Communicator& comm_;
  const CollectiveInfo& c_;
  const DataType dtype_;
  const ReduceOp op_;
  const int root_, rank_, n_;
  std::byte* const send_;
  std::byte* const recv_;
  const size_t elemSize_;
  const size_t capacityElems_;
  // Reductions: this rank's inputs and the result. Movement: every rank's data.
  CheckPattern pattern_;
  std::vector<std::vector<std::byte>> moved_, movedPoison_;  // per rank; poison = complement
  std::vector<std::byte> guard_;  // one period written past the region, must stay
};

}  // namespace gyre::bench
