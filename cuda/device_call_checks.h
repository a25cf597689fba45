// The argument checks that CudaCommunicator's calls share on both paths (staged and CUDA
// IPC), in the caller's thread, before anything is enqueued.
//
// Contract: each check throws gyre::Error(kInvalidArgument) naming `rank` and the call
// (`what`, e.g. "device alltoall #3 (float32, count 8)"), except checkCudaCall, which
// throws kSystemError naming the CUDA call and its error, and checkSharedCounts, which
// throws kMismatch. Nothing here touches a communicator's state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "base/types.h"

namespace gyre {

// Names an all-reduce in errors: "device allreduce #seq (dtype op, count n)".
std::string allReduceText(size_t count, DataType dtype, ReduceOp op, uint32_t seq);

// err is a cudaError_t; cudaSuccess returns.
void checkCudaCall(int err, const char* call, const std::string& what, int rank);

// Valid dtype and op, non-null buffers when count > 0, count * element size far from overflow.
void checkAllReduceArgs(const void* sendbuf, const void* recvbuf, size_t count, DataType dtype,
                        ReduceOp op, uint32_t seq, int rank);

// Valid dtype, no null buffer when count > 0, and `blocks` * count elements far from overflow.
void checkBuffers(const std::string& what, DataType dtype, size_t count, size_t blocks,
                  std::initializer_list<const void*> buffers, int rank);

// `p` is memory CUDA knows (not a plain host pointer) and, if device memory, on `device`.
void checkDevicePointer(const void* p, const char* name, const std::string& what, int rank,
                        int device);

// `peer` is a rank of `size` other than `rank`.
void checkPeer(int peer, const std::string& what, int rank, int size);

bool overlap(const void* a, size_t an, const void* b, size_t bn);

// All-to-allv's counts and displacements (elements; null displacements: packed in rank
// order), copied and checked: sizes far from overflow, the own block's counts equal,
// receive blocks apart, send blocks apart from receive blocks, buffers non-null and CUDA's
// where they hold a block.
struct AllToAllvArgs {
  std::vector<size_t> sendCounts, sendDispls, recvCounts, recvDispls;
  size_t local = 0;  // the largest block this rank sends or receives
  bool sends = false, receives = false;
};
AllToAllvArgs checkAllToAllvArgs(const void* sendbuf, const size_t* sendCounts,
                                 const size_t* sendDispls, const void* recvbuf,
                                 const size_t* recvCounts, const size_t* recvDispls,
                                 DataType dtype, const std::string& what, int rank, int size,
                                 int device);

// Every rank's all-to-allv counts (rank s's 2n entries: its sendCounts, then its
// recvCounts), as all-gathered: throws kMismatch naming both ranks where what one sends
// differs from what its peer expects; returns the largest block.
uint64_t checkSharedCounts(const std::vector<uint64_t>& all, size_t n, const std::string& what,
                           int rank);

}  // namespace gyre
