// All-to-all by pairwise exchange: in step k (1 <= k < n) every rank sends its block
// for rank + k and receives the block from rank - k, slice by slice (sendRecv), so each
// step is a cycle that cannot deadlock and every pipe is used by one step only. The
// rank's own block is copied locally. Every block carries the collective's Tag (kind
// alltoall, the communicator's sequence, count, dtype): the pipe fixes the step, so a
// rank with a different call fails its receivers with kMismatch. Each rank moves the
// minimum, (n-1)/n of its buffers, but in n-1 steps: latency grows linearly with n.
#pragma once

#include "collectives/primitives.h"

namespace gyre {

// call.count elements per peer: sendbuf holds size blocks of call.count (block p goes
// to rank p), recvbuf receives size blocks (block p came from rank p). sendbuf and
// recvbuf must not overlap (kInvalidArgument from the communicator).
void pairwiseAllToAll(const PrimitiveContext& base, const PeerPipes& pipes, int rank, int size,
                      const CollectiveCall& call, const void* sendbuf, void* recvbuf);

// The same with a size per peer (blocks: alltoallv's layout, in elements): sendRecv of
// blocks.sendCounts[to] to rank + k and blocks.recvCounts[from] from rank - k in step k.
// Each direction's Tag carries its own count, so a receiver that expects another size
// than its peer sends fails with kMismatch before a byte is written. The own block is
// copied (the communicator checked that its send and receive counts agree).
void pairwiseAllToAllv(const PrimitiveContext& base, const PeerPipes& pipes, int rank, int size,
                       const CollectiveCall& call, const PeerBlocks& blocks, const void* sendbuf,
                       void* recvbuf);

}  // namespace gyre
