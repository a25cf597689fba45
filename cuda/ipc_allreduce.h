// All-reduce on device buffers between the ranks of one host, through CUDA IPC
// (cuda/ipc_peers.h), enqueued on the caller's stream: the reduction kernels
// (cuda_kernels/device_reduce.h) do the arithmetic, no byte crosses the host link, and the
// calling thread never waits on the device.
//
// Schedule (two-shot, per round of at most slotBytes of the buffer, rounds alternating
// between the two staging slots):
//   copy this round of the input into my staging slot; signal kReady to every peer
//   reduce-scatter: wait for every peer's kReady; my chunk (1/N of the round, 16-byte
//     aligned) = stage_0 op stage_1 op ... op stage_{N-1}, into recvbuf, in that fixed
//     rank order (so the bits do not depend on arrival), avg finalised in the last step;
//     then copied into my slot's chunk; signal kReduced
//   all-gather: for each peer, wait for its kReduced and copy its chunk from its slot
//     into recvbuf
// A slot is refilled two rounds later, after this rank waited for every peer's kReduced
// of the round between, which each peer signals after finishing its reads of the slot:
// two slots need no third signal. 2(N-1) flag writes and waits per round.
// Each chunk is reduced by one rank and copied by the others: identical bits on every
// rank, the host reduceCopy's arithmetic element by element (exact where the reduction
// is exact). In place when sendbuf == recvbuf (the input is staged first).
// Errors: a CUDA or driver failure while enqueueing throws gyre::Error(kSystemError)
// naming the rank, the collective and the call; the collective's stream state is then
// unspecified and the communicator must be aborted (CudaCommunicator does).
#pragma once

#include <cstddef>
#include <string>

#include "base/types.h"

struct CUstream_st;

namespace gyre {

class IpcPeers;

void ipcAllReduce(IpcPeers& peers, const void* sendbuf, void* recvbuf, size_t count,
                  DataType dtype, ReduceOp op, CUstream_st* stream, const std::string& what);

}  // namespace gyre
