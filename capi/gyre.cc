// The C API's errors, communicators and requests (capi/gyre.h); the collectives are in
// capi/collectives.cc, the handles and the exception guard in capi/handles.h.
#include "capi/gyre.h"

#include <chrono>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/version.h"
#include "capi/handles.h"
#include "capi/unique_id.h"
#include "ring/communicator.h"
#include "ring/join.h"
#include "ring/join_store.h"
#include "ring/options.h"
#include "store/tcp_store.h"

using gyre::ErrorCode;
using gyre::fail;
using gyre::capi::ErrorSlot;
using gyre::capi::guarded;
using gyre::capi::need;
using gyre::capi::needOut;
using gyre::capi::slotOf;
using gyre::capi::wrap;

static_assert(sizeof(gyreUniqueId) == gyre::capi::kUniqueIdBytes);

namespace {

// gyreTest and gyreWaitTimeout: whether the request finished within `timeout` (zero:
// never blocks), *done set, gyreInProgress while it runs, else its result.
gyreResult_t finishedWithin(gyreRequest_t request, std::chrono::milliseconds timeout,
                            int* done, const char* what) {
  if (done) *done = 0;
  ErrorSlot* slot = request ? request->errors.get() : nullptr;
  gyreResult_t result = guarded(slot, what, [&] {
    if (request == nullptr) fail(ErrorCode::kInvalidArgument, "request is NULL");
    needOut(done, "done");
    if (timeout.count() < 0) fail(ErrorCode::kInvalidArgument, "timeoutMs {} < 0", timeout.count());
    const bool finished = timeout.count() == 0 ? request->work.test() : request->work.wait(timeout);
    if (!finished) return;
    *done = 1;
    request->work.wait();  // finished: throws its failure, if any
  });
  return result == gyreSuccess && done && !*done ? gyreInProgress : result;
}

}  // namespace

extern "C" {

gyreResult_t gyreGetVersion(int* version) {
  return guarded(nullptr, "gyreGetVersion", [&] {
    needOut(version, "version");
    // The library's own, compiled here: not the caller's header.
    *version = GYRE_VERSION_CODE;
  });
}

const char* gyreGetErrorString(gyreResult_t result) {
  switch (gyre::capi::raw(result)) {  // any int may come from C
    case gyreSuccess:
      return "no error";
    case gyreInvalidArgument:
      return "invalid argument";
    case gyreTimeout:
      return "timeout (a stalled or absent peer)";
    case gyreRemoteError:
      return "remote error (a peer closed, reset or failed)";
    case gyreMismatch:
      return "mismatch (ranks issued different calls)";
    case gyreAborted:
      return "communicator aborted";
    case gyreSystemError:
      return "system error";
    case gyreInternalError:
      return "internal error (a bug in gyre)";
    case gyreInProgress:
      return "operation in progress";
  }
  return "unknown result code";
}

const char* gyreGetLastError(gyreComm_t comm) {
  thread_local std::string copy;  // valid until this thread's next call
  try {
    copy = gyre::capi::lastError(gyre::capi::slotOf(comm));
  } catch (...) {
    return "out of memory while reading the last error";
  }
  return copy.c_str();
}

gyreResult_t gyreGetUniqueId(gyreUniqueId* uniqueId) {
  return guarded(nullptr, "gyreGetUniqueId", [&] {
    needOut(uniqueId, "uniqueId");
    gyre::capi::UniqueId id = gyre::capi::serveUniqueId(gyre::Options::fromEnvironment());
    gyre::capi::encode(id, uniqueId->internal);
  });
}

gyreResult_t gyreCommInitRank(gyreComm_t* comm, int nranks, gyreUniqueId commId, int rank) {
  if (comm) *comm = nullptr;
  return guarded(nullptr, "gyreCommInitRank", [&] {
    needOut(comm, "comm");
    if (nranks < 1) fail(ErrorCode::kInvalidArgument, "nranks {} must be >= 1", nranks);
    if (rank < 0 || rank >= nranks) {
      fail(ErrorCode::kInvalidArgument, "rank {} is outside [0, {})", rank, nranks);
    }
    gyre::capi::UniqueId id = gyre::capi::decode(commId.internal);
    gyre::Options options;
    try {
      options = gyre::Options::fromEnvironment();
    } catch (const gyre::Error& e) {
      // A typo on one rank: the others, joining through the id's store, print it too.
      gyre::Error named(e.code(), fmt::format("rank {}: {}", rank, e.what()));
      try {
        gyre::Options quick;
        quick.joinTimeout = std::chrono::seconds(10);
        quick.joinProgressFirst = quick.joinTimeout;
        auto store = gyre::connectStore(id.host, id.port, rank, quick);
        gyre::Join::failBeforeCheckIn(*store, rank, nranks, quick, named);
      } catch (const gyre::Error&) {
      }
      throw named;
    }
    options.token = id.token;
    auto store = gyre::connectStore(id.host, id.port, rank, options);
    // Listen where the route to the id's store leads, as the peers will reach us that way.
    *comm = wrap(gyre::Communicator::create(std::move(store), rank, nranks, options, id.host));
  });
}

gyreResult_t gyreCommInitFromEnv(gyreComm_t* comm) {
  if (comm) *comm = nullptr;
  return guarded(nullptr, "gyreCommInitFromEnv", [&] {
    needOut(comm, "comm");
    *comm = wrap(gyre::Communicator::fromEnvironment());
  });
}

gyreResult_t gyreCommDestroy(gyreComm_t comm) {
  return guarded(nullptr, "gyreCommDestroy", [&] { delete comm; });
}

gyreResult_t gyreCommAbort(gyreComm_t comm) {
  return guarded(slotOf(comm), "gyreCommAbort", [&] { need(comm).abort(); });
}

gyreResult_t gyreCommNameNextCall(gyreComm_t comm, const char* name) {
  return guarded(slotOf(comm), "gyreCommNameNextCall", [&] {
    needOut(name, "name");
    need(comm).nameNextCall(name);
  });
}

gyreResult_t gyreCommCount(const gyreComm_t comm, int* count) {
  return guarded(slotOf(comm), "gyreCommCount", [&] {
    needOut(count, "count");
    *count = need(comm).size();
  });
}

gyreResult_t gyreCommUserRank(const gyreComm_t comm, int* rank) {
  return guarded(slotOf(comm), "gyreCommUserRank", [&] {
    needOut(rank, "rank");
    *rank = need(comm).rank();
  });
}

gyreResult_t gyreCommSplit(gyreComm_t comm, int color, int key, gyreComm_t* newcomm) {
  if (newcomm) *newcomm = nullptr;
  return guarded(slotOf(comm), "gyreCommSplit", [&] {
    needOut(newcomm, "newcomm");
    std::unique_ptr<gyre::Communicator> child = need(comm).split(color, key);
    if (child) *newcomm = wrap(std::move(child));
  });
}

// ---- Recovery --------------------------------------------------------------------------

gyreResult_t gyreCommRevoke(gyreComm_t comm, int revokeFlags) {
  return guarded(slotOf(comm), "gyreCommRevoke", [&] {
    if (revokeFlags != 0) {
      fail(ErrorCode::kInvalidArgument, "gyreCommRevoke: revokeFlags {} (only 0 is defined)",
           revokeFlags);
    }
    need(comm).revoke();
  });
}

gyreResult_t gyreCommGetFailedRank(const gyreComm_t comm, int* rank) {
  return guarded(slotOf(comm), "gyreCommGetFailedRank", [&] {
    needOut(rank, "rank");
    *rank = need(comm).failedRank();
  });
}

gyreResult_t gyreCommShrink(gyreComm_t comm, int* excludeRanksList, int excludeRanksCount,
                            gyreComm_t* newcomm, int shrinkFlags) {
  if (newcomm) *newcomm = nullptr;
  return guarded(slotOf(comm), "gyreCommShrink", [&] {
    needOut(newcomm, "newcomm");
    if (excludeRanksCount < 0 || (excludeRanksCount > 0 && excludeRanksList == nullptr)) {
      fail(ErrorCode::kInvalidArgument,
           "gyreCommShrink: excludeRanksList is NULL or excludeRanksCount {} is negative",
           excludeRanksCount);
    }
    if (shrinkFlags != GYRE_SHRINK_DEFAULT && shrinkFlags != GYRE_SHRINK_ABORT) {
      fail(ErrorCode::kInvalidArgument,
           "gyreCommShrink: shrinkFlags {} (GYRE_SHRINK_DEFAULT or GYRE_SHRINK_ABORT)",
           shrinkFlags);
    }
    std::vector<int> excluded(excludeRanksList, excludeRanksList + excludeRanksCount);
    *newcomm = wrap(need(comm).shrink(excluded, shrinkFlags == GYRE_SHRINK_ABORT
                                                    ? gyre::Communicator::ShrinkMode::kAbort
                                                    : gyre::Communicator::ShrinkMode::kDefault));
  });
}

gyreResult_t gyreCommGrow(gyreComm_t comm, int nRanks, const gyreUniqueId* uniqueId,
                          gyreComm_t* newcomm) {
  if (newcomm) *newcomm = nullptr;
  return guarded(comm ? slotOf(comm) : nullptr, "gyreCommGrow", [&] {
    needOut(newcomm, "newcomm");
    if (comm != nullptr) {
      *newcomm = wrap(need(comm).grow(nRanks));
      return;
    }
    if (uniqueId == nullptr) {
      fail(ErrorCode::kInvalidArgument,
           "gyreCommGrow: a newcomer (comm NULL) needs the job's gyreUniqueId");
    }
    gyre::capi::UniqueId id = gyre::capi::decode(uniqueId->internal);
    gyre::Options options = gyre::Options::fromEnvironment();
    options.token = id.token;
    auto store = gyre::connectStore(id.host, id.port, -1, options);
    *newcomm = wrap(gyre::Communicator::joinGrow(std::move(store), options, id.host));
    int size = 0;
    gyreCommCount(*newcomm, &size);
    if (size != nRanks) {
      gyreCommDestroy(*newcomm);
      *newcomm = nullptr;
      fail(ErrorCode::kInvalidArgument, "gyreCommGrow: the grow this newcomer joined makes {} "
           "ranks, not nRanks {}", size, nRanks);
    }
  });
}

// ---- Requests -------------------------------------------------------------------------

gyreResult_t gyreTest(gyreRequest_t request, int* done) {
  return finishedWithin(request, std::chrono::milliseconds(0), done, "gyreTest");
}

gyreResult_t gyreWait(gyreRequest_t request) {
  ErrorSlot* slot = request ? request->errors.get() : nullptr;
  return guarded(slot, "gyreWait", [&] {
    if (request == nullptr) fail(ErrorCode::kInvalidArgument, "request is NULL");
    request->work.wait();
  });
}

gyreResult_t gyreWaitTimeout(gyreRequest_t request, long long timeoutMs, int* done) {
  return finishedWithin(request, std::chrono::milliseconds(timeoutMs), done, "gyreWaitTimeout");
}

gyreResult_t gyreRequestFree(gyreRequest_t request) {
  return guarded(nullptr, "gyreRequestFree", [&] { delete request; });
}

}  // extern "C"
