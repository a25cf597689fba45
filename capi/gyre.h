/* gyre C API: NCCL-shaped bindings of gyre::Communicator (ring/communicator.h) for C,
 * C99 and later, and for anything with a C FFI (ctypes, cffi, Rust, Go).
 *
 * Contract
 * - Every function returns a gyreResult_t; none throws, aborts the process or prints to
 *   stdout. On failure the full message (naming the rank, the peer and the collective
 *   where there is one) is kept for gyreGetLastError(comm) and, for every failure,
 *   gyreGetLastError(NULL) of the calling thread. Handles returned through
 *   out-parameters (comm, newcomm, request) are NULL after a failure.
 * - NULL pointers where an object is required, a NULL buffer with count > 0, unknown
 *   datatypes or ops, and out-of-range ranks, roots and peers are gyreInvalidArgument;
 *   nothing is sent and the communicator stays usable.
 * - Any other failure of an operation (timeout, a dead or aborted peer, a mismatched
 *   call) aborts the communicator on every rank, as in C++: later calls on it fail with
 *   gyreAborted. Destroy it and make a new one.
 * - Buffers are host memory owned by the caller. Collectives are called in the same order
 *   on every rank of a communicator; send/recv only by the two ranks involved, in the same
 *   order between them. Blocking calls return when the operation is complete; *Async
 *   calls return at once with a request, and the operation's buffers must stay valid until
 *   gyreTest reports it done or gyreWait returns. Operations of one communicator run one
 *   at a time in issue order. Counts may be 0.
 * - Threads: calls on one communicator come from one thread at a time, except
 *   gyreCommAbort and gyreCommRevoke (any thread, any time) and gyreTest/gyreWait/
 *   gyreRequestFree on its requests (any thread). Different communicators are independent.
 *
 * Differences from NCCL
 * - Host memory and blocking calls instead of CUDA streams; *Async + gyreRequest_t take
 *   the place of stream asynchrony.
 * - gyreCommAbort only aborts (it may run while another thread is blocked in a call on
 *   the same communicator); gyreCommDestroy must still be called to free it, and then
 *   does not wait for the peers.
 * - A gyreUniqueId serves one communicator: every rank passes it to gyreCommInitRank once.
 *   The bootstrap store it names runs in the process that called gyreGetUniqueId until
 *   that process exits (not only until init, as NCCL's root does: gyre's
 *   gyreCommSplit goes through the store, also for sub-communicators that do not include
 *   the creating process). Only the process that created it stops it; a child forked
 *   after gyreGetUniqueId inherits the id, never the server.
 * - Environment: gyreCommInitRank and gyreCommInitFromEnv read the GYRE_* variables
 *   (see docs/configuration.md) when called; MASTER_ADDR also picks the address the id's
 *   store listens on, and gyreCommInitRank's ranks listen on the interface routed to the
 *   id's host (unless GYRE_SOCKET_IFNAME names one).
 */
#ifndef GYRE_CAPI_GYRE_H_
#define GYRE_CAPI_GYRE_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Everything declared below is what libgyre_c.so exports: the library is compiled with
 * -fvisibility=hidden, so the C++ code inside it stays private. */
#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility push(default)
#endif

/* Values of gyreSuccess..gyreInternalError equal gyre::ErrorCode (base/error.h). */
typedef enum {
  gyreSuccess = 0,
  gyreInvalidArgument = 1, /* the caller passed something wrong; nothing was sent */
  gyreTimeout = 2,         /* a bounded wait expired (a stalled or absent peer) */
  gyreRemoteError = 3,     /* a peer closed, reset or reported a failure */
  gyreMismatch = 4,        /* ranks issued different collectives */
  gyreAborted = 5,         /* the communicator was aborted (gyreCommAbort or a failure) */
  gyreSystemError = 6,     /* an OS call or an allocation failed */
  gyreInternalError = 7,   /* a broken invariant inside gyre: a bug, please report it */
  gyreInProgress = 8,      /* gyreTest: the operation is still running */
  gyreNumResults = 9
} gyreResult_t;

/* Values equal gyre::DataType (base/types.h); they are part of the wire protocol. */
typedef enum {
  gyreInt8 = 0,
  gyreChar = 0,
  gyreUint8 = 1,
  gyreInt32 = 2,
  gyreInt = 2,
  gyreUint32 = 3,
  gyreInt64 = 4,
  gyreUint64 = 5,
  gyreFloat16 = 6,
  gyreHalf = 6,
  gyreBfloat16 = 7,
  gyreFloat32 = 8,
  gyreFloat = 8,
  gyreFloat64 = 9,
  gyreDouble = 9,
  gyreNumTypes = 10
} gyreDataType_t;

/* Values equal gyre::ReduceOp. gyreAvg: the sum scaled by 1/n (floating types) or
 * divided by n (integer types). */
typedef enum {
  gyreSum = 0,
  gyreProd = 1,
  gyreMin = 2,
  gyreMax = 3,
  gyreAvg = 4,
  gyreNumOps = 5
} gyreRedOp_t;

typedef struct gyreComm* gyreComm_t;
typedef struct gyreRequest* gyreRequest_t;

/* Opaque bootstrap handle: copy its bytes to every rank (a file, MPI_Bcast, fork). */
#define GYRE_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[GYRE_UNIQUE_ID_BYTES];
} gyreUniqueId;

#define GYRE_SPLIT_NOCOLOR (-1)

/* ---- Errors ------------------------------------------------------------------------ */

/* A static description of a result code ("invalid argument", ...). */
const char* gyreGetErrorString(gyreResult_t result);
/* The full message of the last failure on `comm` (NULL: of the calling thread, which
 * includes failures before a communicator exists, e.g. in init). "" if none. Successful
 * calls do not clear it. The string stays valid until this thread calls
 * gyreGetLastError again. */
const char* gyreGetLastError(gyreComm_t comm);

/* ---- Communicators ------------------------------------------------------------------ */

/* Starts a bootstrap store in this process on a free port of MASTER_ADDR (default
 * 127.0.0.1) and writes its address and a random job token into *uniqueId. */
gyreResult_t gyreGetUniqueId(gyreUniqueId* uniqueId);
/* Collective over the nranks processes sharing commId: returns once all are connected. */
gyreResult_t gyreCommInitRank(gyreComm_t* comm, int nranks, gyreUniqueId commId, int rank);
/* torchrun's RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (rank 0 serves the store there). */
gyreResult_t gyreCommInitFromEnv(gyreComm_t* comm);
/* Finishes the operations issued on comm and frees it. NULL is a no-op (as free()). */
gyreResult_t gyreCommDestroy(gyreComm_t comm);
/* Ends pending and later operations with gyreAborted and tells the other ranks. Any
 * thread, any time, idempotent. Does not free comm: call gyreCommDestroy. */
gyreResult_t gyreCommAbort(gyreComm_t comm);
/* Names the next operation this thread issues on comm in the flight recorder's dumps
 * (GYRE_TRACE_DIR; the entry's "call"): the caller's own name for the call, such as a
 * framework's ("all_gather_into_tensor"). At most 24 bytes are kept, bytes outside
 * printable ASCII become '?'; applies to the next operation issued (a call its checks
 * refuse issues none). */
gyreResult_t gyreCommNameNextCall(gyreComm_t comm, const char* name);
gyreResult_t gyreCommCount(const gyreComm_t comm, int* count);
gyreResult_t gyreCommUserRank(const gyreComm_t comm, int* rank);
/* Collective over comm: ranks with the same color form *newcomm, ordered by key (ties by
 * rank). A negative color (GYRE_SPLIT_NOCOLOR) joins none and gets *newcomm = NULL. */
gyreResult_t gyreCommSplit(gyreComm_t comm, int color, int key, gyreComm_t* newcomm);

/* ---- Recovery (ring/communicator.h: revoke, failedRank, shrink) ----------------------- */

/* gyreCommShrink's flags, as NCCL's NCCL_SHRINK_DEFAULT and NCCL_SHRINK_ABORT. */
#define GYRE_SHRINK_DEFAULT 0
#define GYRE_SHRINK_ABORT 1
/* ncclCommRevoke: as gyreCommAbort, and the errors say the communicator was revoked:
 * every pending and later operation on comm ends at once with gyreAborted on this rank,
 * without waiting for anyone. revokeFlags must be 0. Any thread, any time, idempotent. */
gyreResult_t gyreCommRevoke(gyreComm_t comm, int revokeFlags);
/* The rank the first failure on comm named as its cause (a peer that died, closed,
 * stalled or aborted), or -1: none yet, or this rank's own. */
gyreResult_t gyreCommGetFailedRank(const gyreComm_t comm, int* rank);
/* ncclCommShrink: the ranks not in excludeRanksList make *newcomm among themselves,
 * numbered in the order of their ranks in comm, with no help from the excluded ranks and
 * from comm in any state (GYRE_SHRINK_ABORT revokes it first). Collective over the
 * survivors, who pass the same set: a survivor whose set differs from the first one
 * proposed fails with gyreMismatch and never joins. The bootstrap store must outlive the
 * excluded ranks (the process that called gyreGetUniqueId, or gyrerun's store). */
gyreResult_t gyreCommShrink(gyreComm_t comm, int* excludeRanksList, int excludeRanksCount,
                            gyreComm_t* newcomm, int shrinkFlags);
/* ncclCommGrow: comm's ranks and nRanks - size(comm) newcomers make *newcomm of nRanks
 * ranks. A rank of comm passes comm (uniqueId is not read and may be NULL) and keeps its
 * number; a newcomer passes comm = NULL and the job's id (the one the ranks were created
 * with) and gets the next free number in the order of arrival (NCCL's newcomers pass
 * theirs). Collective over comm's ranks and the newcomers; one grow at a time per store. */
gyreResult_t gyreCommGrow(gyreComm_t comm, int nRanks, const gyreUniqueId* uniqueId,
                          gyreComm_t* newcomm);

/* ---- Collectives (blocking) --------------------------------------------------------- */
/* In-place rules are NCCL's: sendbuff == recvbuff for all-reduce, broadcast and reduce;
 * sendbuff == recvbuff + rank * sendcount for all-gather; recvbuff == sendbuff + rank *
 * recvcount for reduce-scatter; all-to-all buffers must not overlap. */

gyreResult_t gyreAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           gyreDataType_t datatype, gyreRedOp_t op, gyreComm_t comm);
/* recvbuff on every rank becomes root's data. On root, sendbuff is copied to recvbuff
 * first when they differ; elsewhere sendbuff is ignored (it may be NULL). */
gyreResult_t gyreBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                           gyreDataType_t datatype, int root, gyreComm_t comm);
/* recvbuff is written only on root (it may be NULL elsewhere). */
gyreResult_t gyreReduce(const void* sendbuff, void* recvbuff, size_t count, gyreDataType_t datatype,
                        gyreRedOp_t op, int root, gyreComm_t comm);
/* recvbuff holds nranks * sendcount elements: rank r's sendbuff at r * sendcount. */
gyreResult_t gyreAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                           gyreDataType_t datatype, gyreComm_t comm);
/* sendbuff holds nranks * recvcount elements; rank r gets the reduction of block r. */
gyreResult_t gyreReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               gyreDataType_t datatype, gyreRedOp_t op, gyreComm_t comm);
/* Block p (count elements) of sendbuff goes to rank p; block p of recvbuff comes from p. */
gyreResult_t gyreAllToAll(const void* sendbuff, void* recvbuff, size_t count,
                          gyreDataType_t datatype, gyreComm_t comm);
/* A size per peer (MPI_Alltoallv): sendcounts[p] elements at element offset sdispls[p] of
 * sendbuff go to rank p; recvcounts[p] elements from rank p land at rdispls[p] of
 * recvbuff. Arrays of nranks entries, copied before the call returns; NULL displacements:
 * packed in rank order. recvcounts[p] must equal what p sends here (gyreMismatch naming
 * both otherwise); the receive blocks must not overlap each other or the send blocks. */
gyreResult_t gyreAllToAllv(const void* sendbuff, const size_t sendcounts[], const size_t sdispls[],
                           void* recvbuff, const size_t recvcounts[], const size_t rdispls[],
                           gyreDataType_t datatype, gyreComm_t comm);
/* The receiver's count and datatype must match the sender's (gyreMismatch otherwise). A
 * send larger than the pipe (GYRE_SLOTS x the slot, docs/configuration.md) finishes only
 * once the peer receives. Operations run one at a time in issue order, async ones too, so
 * ranks that send to each other at the same time (a ring shift, an exchange) use
 * gyreSendRecv. */
gyreResult_t gyreSend(const void* sendbuff, size_t count, gyreDataType_t datatype, int peer,
                      gyreComm_t comm);
gyreResult_t gyreRecv(void* recvbuff, size_t count, gyreDataType_t datatype, int peer,
                      gyreComm_t comm);
/* Sends to sendpeer and receives from recvpeer at once (MPI_Sendrecv; NCCL needs a
 * group for this): deadlock-free for any pattern in which every rank does the same
 * (shifts, exchanges), whatever the sizes. Blocking only. */
gyreResult_t gyreSendRecv(const void* sendbuff, size_t sendcount, int sendpeer, void* recvbuff,
                          size_t recvcount, int recvpeer, gyreDataType_t datatype, gyreComm_t comm);
gyreResult_t gyreBarrier(gyreComm_t comm);

/* ---- Asynchronous operations -------------------------------------------------------- */
/* The same operations, returning at once with *request (NULL on failure to issue). A
 * failure while running is reported by gyreTest/gyreWait of the request. Each request
 * must be freed with gyreRequestFree; freeing one that is still running is allowed (the
 * operation still completes, and its buffers stay in use until it has: a later blocking
 * call on the communicator, or gyreCommDestroy, returns after it). */

gyreResult_t gyreAllReduceAsync(const void* sendbuff, void* recvbuff, size_t count,
                                gyreDataType_t datatype, gyreRedOp_t op, gyreComm_t comm,
                                gyreRequest_t* request);
/* On root with sendbuff != recvbuff, the copy is made before returning, after the
 * operations issued before it have finished (they may use either buffer). */
gyreResult_t gyreBroadcastAsync(const void* sendbuff, void* recvbuff, size_t count,
                                gyreDataType_t datatype, int root, gyreComm_t comm,
                                gyreRequest_t* request);
gyreResult_t gyreReduceAsync(const void* sendbuff, void* recvbuff, size_t count,
                             gyreDataType_t datatype, gyreRedOp_t op, int root, gyreComm_t comm,
                             gyreRequest_t* request);
gyreResult_t gyreAllGatherAsync(const void* sendbuff, void* recvbuff, size_t sendcount,
                                gyreDataType_t datatype, gyreComm_t comm, gyreRequest_t* request);
gyreResult_t gyreReduceScatterAsync(const void* sendbuff, void* recvbuff, size_t recvcount,
                                    gyreDataType_t datatype, gyreRedOp_t op, gyreComm_t comm,
                                    gyreRequest_t* request);
gyreResult_t gyreAllToAllAsync(const void* sendbuff, void* recvbuff, size_t count,
                               gyreDataType_t datatype, gyreComm_t comm, gyreRequest_t* request);
gyreResult_t gyreAllToAllvAsync(const void* sendbuff, const size_t sendcounts[],
                                const size_t sdispls[], void* recvbuff, const size_t recvcounts[],
                                const size_t rdispls[], gyreDataType_t datatype, gyreComm_t comm,
                                gyreRequest_t* request);
gyreResult_t gyreSendAsync(const void* sendbuff, size_t count, gyreDataType_t datatype, int peer,
                           gyreComm_t comm, gyreRequest_t* request);
gyreResult_t gyreRecvAsync(void* recvbuff, size_t count, gyreDataType_t datatype, int peer,
                           gyreComm_t comm, gyreRequest_t* request);
gyreResult_t gyreBarrierAsync(gyreComm_t comm, gyreRequest_t* request);

/* Never blocks. Running: *done = 0, returns gyreInProgress. Finished: *done = 1, returns
 * gyreSuccess or the operation's error (again on every later test or wait). */
gyreResult_t gyreTest(gyreRequest_t request, int* done);
/* Blocks until the operation finished; returns gyreSuccess or its error. */
gyreResult_t gyreWait(gyreRequest_t request);
/* gyreWait bounded by timeoutMs (>= 0): blocks (sleeping, not polling) until the operation
 * finished or the time is up. Finished: *done = 1 and gyreSuccess or its error, as
 * gyreTest; still running: *done = 0, returns gyreInProgress (the operation goes on: wait
 * again or gyreCommAbort the communicator). */
gyreResult_t gyreWaitTimeout(gyreRequest_t request, long long timeoutMs, int* done);
/* Frees the handle (not the operation: see above). NULL is a no-op. */
gyreResult_t gyreRequestFree(gyreRequest_t request);


/* ---- Communicators over a caller's key-value store ------------------------------------ */
/* A bootstrap store given as callbacks, for hosts that already run one (torch's c10d
 * Store, a job scheduler's KV service): gyre then opens no store port of its own.
 * Every callback returns gyreSuccess or an error code (gyreTimeout when a wait expired,
 * gyreRemoteError when the store is unreachable, ...) and may then write a message of at
 * most errorSize bytes, NUL included, into error. Callbacks may be called from several
 * threads at once, for as long as a communicator made from them exists (splits included);
 * release(context) is called once after the last of them is gone (NULL: not called).
 * Blocking callbacks (get, wait) bound their wait by the store's own timeout. */
typedef struct {
  void* context;
  /* Stores value (size bytes) at key, overwriting. */
  gyreResult_t (*set)(void* context, const char* key, const void* value, size_t size,
                      char* error, size_t errorSize);
  /* Waits until key exists and returns a copy of its value in *value, allocated with
   * malloc (gyre frees it; NULL allowed when *size is 0). */
  gyreResult_t (*get)(void* context, const char* key, void** value, size_t* size, char* error,
                      size_t errorSize);
  /* Adds delta to the integer at key (0 when absent), returns the new value in *result. */
  gyreResult_t (*add)(void* context, const char* key, long long delta, long long* result,
                      char* error, size_t errorSize);
  /* Waits until every one of the count keys exists. */
  gyreResult_t (*wait)(void* context, const char* const* keys, size_t count, char* error,
                       size_t errorSize);
  /* *ready = 1 when every key exists, else 0; never waits for a key. */
  gyreResult_t (*check)(void* context, const char* const* keys, size_t count, int* ready,
                        char* error, size_t errorSize);
  void (*release)(void* context);
} gyreStore_t;

/* Collective over the nranks processes sharing the store (the same keys: give each
 * communicator its own key prefix). timeoutMs > 0 replaces GYRE_TIMEOUT for this
 * communicator and its splits (0: GYRE_TIMEOUT). routeHost (NULL: MASTER_ADDR's) picks
 * the interface this rank listens on: the one whose route leads there. On failure
 * release is still called (once). */
gyreResult_t gyreCommInitWithStore(gyreComm_t* comm, const gyreStore_t* store, int nranks,
                                   int rank, long long timeoutMs, const char* routeHost);

#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* GYRE_CAPI_GYRE_H_ */
