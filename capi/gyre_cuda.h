/* gyre C API, device entry points: NCCL-shaped collectives on CUDA device buffers,
 * enqueued on a CUDA stream (gyre::CudaCommunicator, cuda/cuda_communicator.h, for C).
 * C99; needs no CUDA header (a cudaStream_t converts to gyreCudaStream_t as it is).
 *
 * Contract (gyre.h's, with these differences)
 * - A gyreCudaComm_t is made from a host gyreComm_t, which it takes over. The collectives
 *   are called in the same order on every rank, from one thread at a time; they check
 *   their arguments, enqueue on `stream` and return: `stream` (NULL: the legacy default
 *   stream) holds the result once it has passed the call. Buffers are device memory of
 *   the communicator's device (or managed, or pinned host memory); sendbuff must not
 *   change, and recvbuff must not be read, until `stream` has passed the call. In-place
 *   rules are gyre.h's (NCCL's). Counts may be 0.
 * - Errors: a wrong argument (NULL handle or buffer, unknown datatype or op, out-of-range
 *   root or peer, memory CUDA does not know) is gyreInvalidArgument from the call, naming
 *   the rank and the collective; nothing is enqueued and the communicator stays usable.
 *   A failure after the call returned (a peer lost, an abort, a timeout, a CUDA error)
 *   aborts the communicator and still releases every waiting stream (whose recvbuff then
 *   holds unspecified data); the next call or gyreCudaCommSynchronize returns it. The
 *   message is kept for gyreGetLastError(NULL) of the calling thread.
 * - Threads: gyreCudaCommAbort from any thread, any time; the others from one thread at a
 *   time per communicator.
 * - A library built without CUDA (no toolkit and no fake runtime) still exports these
 *   functions: each returns gyreSystemError saying so.
 * docs/api.md ("Device buffers") and docs/gpu.md describe the paths and their limits.
 */
#ifndef GYRE_CAPI_GYRE_CUDA_H_
#define GYRE_CAPI_GYRE_CUDA_H_

#include <stddef.h>

#include "capi/gyre.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility push(default)
#endif

struct CUstream_st; /* cudaStream_t is struct CUstream_st* */
typedef struct CUstream_st* gyreCudaStream_t;
typedef struct gyreCudaComm* gyreCudaComm_t;

/* Collective over hostComm's ranks. Takes over *hostComm (set to NULL on success; on
 * failure it stays the caller's). device: the CUDA device index, -1 for the calling
 * thread's current one. The path (on the device through CUDA IPC when every rank is on
 * one host, else staged through host memory) is chosen here, the same on every rank
 * (GYRE_CUDA_IPC=0 forces the staged one: docs/gpu.md). */
gyreResult_t gyreCudaCommCreate(gyreComm_t* hostComm, int device, gyreCudaComm_t* cudaComm);
/* Finishes the enqueued collectives and frees comm and the host communicator it took
 * over. Collective, as CudaCommunicator's destructor: on the device path the ranks meet
 * before freeing memory the others map. NULL is a no-op. */
gyreResult_t gyreCudaCommDestroy(gyreCudaComm_t comm);
/* Fails the pending and later collectives with gyreAborted (their streams are still
 * released). Any thread, any time, idempotent. Does not free comm. */
gyreResult_t gyreCudaCommAbort(gyreCudaComm_t comm);
/* Blocks until the collectives enqueued so far are done (the caller's streams may still
 * hold work before or after them); returns the first asynchronous error. */
gyreResult_t gyreCudaCommSynchronize(gyreCudaComm_t comm);
/* *usesIpc = 1 when the collectives run on the device through CUDA IPC, 0 when staged. */
gyreResult_t gyreCudaCommUsesDeviceIpc(gyreCudaComm_t comm, int* usesIpc);

gyreResult_t gyreCudaAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                               gyreDataType_t datatype, gyreRedOp_t op, gyreCudaComm_t comm,
                               gyreCudaStream_t stream);
/* recvbuff on every rank becomes root's data. On root with sendbuff != recvbuff, sendbuff
 * is copied to recvbuff on `stream` first; elsewhere sendbuff is ignored (it may be NULL). */
gyreResult_t gyreCudaBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                               gyreDataType_t datatype, int root, gyreCudaComm_t comm,
                               gyreCudaStream_t stream);
/* recvbuff is written only on root (it may be NULL elsewhere). */
gyreResult_t gyreCudaReduce(const void* sendbuff, void* recvbuff, size_t count,
                            gyreDataType_t datatype, gyreRedOp_t op, int root,
                            gyreCudaComm_t comm, gyreCudaStream_t stream);
gyreResult_t gyreCudaAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                               gyreDataType_t datatype, gyreCudaComm_t comm,
                               gyreCudaStream_t stream);
gyreResult_t gyreCudaReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                   gyreDataType_t datatype, gyreRedOp_t op, gyreCudaComm_t comm,
                                   gyreCudaStream_t stream);
gyreResult_t gyreCudaAllToAll(const void* sendbuff, void* recvbuff, size_t count,
                              gyreDataType_t datatype, gyreCudaComm_t comm,
                              gyreCudaStream_t stream);
/* As gyreAllToAllv (arrays in host memory, copied before the call returns). On the device
 * path the call first shares every rank's counts over the host communicator: it returns
 * once every rank has called it, and a count that differs from its peer's is gyreMismatch
 * on every rank, naming both. */
gyreResult_t gyreCudaAllToAllv(const void* sendbuff, const size_t sendcounts[],
                               const size_t sdispls[], void* recvbuff, const size_t recvcounts[],
                               const size_t rdispls[], gyreDataType_t datatype,
                               gyreCudaComm_t comm, gyreCudaStream_t stream);
/* Pair as gyreSend/gyreRecv; on the device path the receiver's count and datatype are not
 * checked against the sender's (docs/gpu.md, "Point to point"). */
gyreResult_t gyreCudaSend(const void* sendbuff, size_t count, gyreDataType_t datatype, int peer,
                          gyreCudaComm_t comm, gyreCudaStream_t stream);
gyreResult_t gyreCudaRecv(void* recvbuff, size_t count, gyreDataType_t datatype, int peer,
                          gyreCudaComm_t comm, gyreCudaStream_t stream);
gyreResult_t gyreCudaSendRecv(const void* sendbuff, size_t sendcount, int sendpeer,
                              void* recvbuff, size_t recvcount, int recvpeer,
                              gyreDataType_t datatype, gyreCudaComm_t comm,
                              gyreCudaStream_t stream);
/* `stream` goes past the barrier once every rank's stream has reached it. */
gyreResult_t gyreCudaBarrier(gyreCudaComm_t comm, gyreCudaStream_t stream);

#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* GYRE_CAPI_GYRE_CUDA_H_ */
