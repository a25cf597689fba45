// Collective calls as data: what a rank is running, for tags, fingerprints and errors.
//
// Contract: plain values. `CollectiveKind` numbers travel on the wire in every slice's
// Tag, so append only. `describe()` renders a call the way every error message names
// it: "allreduce #12 (float sum, count 1048576)".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/types.h"
#include "transport/pipe.h"

namespace gyre {

enum class CollectiveKind : uint8_t {
  kAllReduce = 1,
  kBarrier = 2,
  kBroadcast = 3,
  kReduce = 4,
  kAllGather = 5,
  kReduceScatter = 6,
  kSendRecv = 7,  // point to point; seq counts the calls between the two ranks only
  kAllToAll = 8,
  kAllToAllv = 9,  // a count per peer; count = the elements this rank sends in all
};

const char* collectiveName(CollectiveKind kind);

struct CollectiveCall {
  CollectiveKind kind = CollectiveKind::kAllReduce;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  // Elements per rank's share for allgather, reducescatter and alltoall (per peer),
  // otherwise elements in the buffer.
  size_t count = 0;
  int root = -1;  // reduce and broadcast: the root; send/recv: the sending rank
  // All-reduce and barrier: the AllReduceAlgo that runs it (never kAuto), in the tag so
  // that ranks that chose differently fail with a mismatch. 0: not applicable.
  uint8_t algo = 0;
  uint32_t seq = 0;

  Tag tag() const;
};

// All-to-all with a size per peer (alltoallv): sendCounts[p] elements at element offset
// sendDispls[p] of sendbuf go to rank p; recvCounts[p] elements from rank p land at
// recvDispls[p] of recvbuf. One entry per rank of the communicator.
struct PeerBlocks {
  std::vector<size_t> sendCounts, sendDispls, recvCounts, recvDispls;
};

std::string describe(const CollectiveCall& call);
std::string describe(const Tag& tag);  // the same, for a tag received from a peer

}  // namespace gyre
