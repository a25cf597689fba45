// Collectives on device buffers between the ranks of one host, through CUDA IPC
// (cuda/ipc_peers.h), enqueued on the caller's stream: all-reduce, all-gather,
// reduce-scatter and broadcast. The reduction kernels (cuda_kernels/device_reduce.h) do
// the arithmetic, no byte crosses the host link, and the calling thread never waits on
// the device.
//
// Rounds: a collective moves its buffer in rounds of at most one staging slot
// (slotBytes), alternating between each rank's two slots. Every round of every
// collective starts the same way on every rank: copy this round's input (if any) into
// the own slot, signal kReady(round) to every peer, wait for every peer's kReady(round).
// A peer signals kReady(round) only after its stream finished the previous round, so a
// rank that waited for every kReady(round - 1) knows that no peer still reads the slot
// that round - 2 filled: two slots need no other signal between collectives, whatever
// their kinds.
//   all-reduce (two-shot): after the start, my chunk (1/N of the round, 16-byte aligned)
//     = stage_0 op stage_1 op ... op stage_{N-1}, into recvbuf, in that fixed rank order
//     (so the bits do not depend on arrival), avg finalised in the last step; copied into
//     my slot's chunk; signal kReduced; then for each peer, wait for its kReduced and
//     copy its chunk from its slot into recvbuf. 2(N-1) flag writes and waits per round.
//   all-gather: after the start, copy every rank's slot into its block of recvbuf.
//   reduce-scatter: each round stages N pieces (one per destination block); after the
//     start, my block's piece = stage_0 op ... op stage_{N-1}, into recvbuf.
//   broadcast: the root stages, the others copy from the root's slot.
//   all-to-all(v): each round stages N pieces (piece b: the next part of the block for
//     rank b); after the start, every rank copies its piece out of every rank's slot.
//     All-to-allv's rounds are as many as its largest block needs on any rank: the call
//     first shares every rank's counts over the host communicator (so it returns only
//     once every rank has called it; it never waits for the device).
//   barrier: one round with no data.
// Point to point (send, recv, sendRecv) does not take part in the rounds: a chunk (one
// slot) goes through the sender's p2p slot, with kSent / kTaken between the two ranks
// only (cuda/ipc_peers.h). sendRecv interleaves its send and receive chunk by chunk, so
// any pattern every rank follows (rings, exchanges) runs without deadlock.
// Each reduced element is computed by one rank and copied by the others: identical bits
// on every rank, the host reduceCopy's arithmetic element by element (exact where the
// reduction is exact). In place as the host collectives define it (the input is staged
// before the output is written).
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

// recvbuf holds size * count elements; rank r's sendbuf lands at r * count.
void ipcAllGather(IpcPeers& peers, const void* sendbuf, void* recvbuf, size_t count,
                  DataType dtype, CUstream_st* stream, const std::string& what);

// sendbuf holds size * count elements; recvbuf (count) = op over ranks of block `rank`.
void ipcReduceScatter(IpcPeers& peers, const void* sendbuf, void* recvbuf, size_t count,
                      DataType dtype, ReduceOp op, CUstream_st* stream, const std::string& what);

void ipcBroadcast(IpcPeers& peers, void* buffer, size_t count, DataType dtype, int root,
                  CUstream_st* stream, const std::string& what);

// Block p of sendbuf (count elements each) goes to rank p; block p of recvbuf comes from p.
void ipcAllToAll(IpcPeers& peers, const void* sendbuf, void* recvbuf, size_t count,
                 DataType dtype, CUstream_st* stream, const std::string& what);

// Counts and displacements in elements, size() entries each (displacements explicit);
// rounds: how many rounds the largest block of any rank needs (allToAllvRounds).
void ipcAllToAllv(IpcPeers& peers, const void* sendbuf, const size_t* sendCounts,
                  const size_t* sendDispls, void* recvbuf, const size_t* recvCounts,
                  const size_t* recvDispls, DataType dtype, size_t rounds, CUstream_st* stream,
                  const std::string& what);
// The elements of one block that one all-to-allv round moves.
size_t ipcAllToAllvPerRound(const IpcPeers& peers, DataType dtype);

// sendPeer / recvPeer -1: that half is absent (send or recv alone).
void ipcSendRecv(IpcPeers& peers, const void* sendbuf, size_t sendCount, int sendPeer,
                 void* recvbuf, size_t recvCount, int recvPeer, DataType dtype,
                 CUstream_st* stream, const std::string& what);

void ipcBarrier(IpcPeers& peers, CUstream_st* stream, const std::string& what);

}  // namespace gyre
