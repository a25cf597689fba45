// The objects behind the C API's handles (gyreComm_t, gyreRequest_t) and the guard that
// every entry point runs its body in: C++ exceptions become result codes, and their
// messages are kept for gyreGetLastError. Internal to capi/.
//
// Contract: guarded() never throws. A failure's message is "<function>: <what>" and is
// stored in the calling thread's last error and, when the call concerns a communicator,
// in that communicator's ErrorSlot (shared with its requests, which may outlive it and be
// waited on from other threads; hence the mutex).
#pragma once

#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <string>

#include "base/error.h"
#include "base/types.h"
#include "capi/gyre.h"
#include "ring/communicator.h"
#include "ring/work.h"

namespace gyre::capi {

struct ErrorSlot {
  std::mutex mu;
  std::string message;
};

}  // namespace gyre::capi

struct gyreComm {
  std::unique_ptr<gyre::Communicator> comm;
  std::shared_ptr<gyre::capi::ErrorSlot> errors = std::make_shared<gyre::capi::ErrorSlot>();
  // The last operation issued async: an out-of-place broadcast root copies only once it
  // (and so everything issued before it) has finished. Touched by the issuing thread only.
  gyre::Work lastAsync;
};

struct gyreRequest {
  gyre::Work work;
  std::shared_ptr<gyre::capi::ErrorSlot> errors;
};

namespace gyre::capi {

// Stores "<fn>: <what>" as the thread's (and slot's, if any) last error; returns code.
gyreResult_t record(ErrorSlot* slot, gyreResult_t code, const char* fn, const char* what);
// A copy of the last error of the thread (slot == nullptr) or of slot.
std::string lastError(ErrorSlot* slot);

gyreResult_t toResult(ErrorCode code);

// Runs body(); any exception becomes a result code and a recorded message.
template <typename Body>
gyreResult_t guarded(ErrorSlot* slot, const char* fn, Body&& body) noexcept {
  try {
    body();
    return gyreSuccess;
  } catch (const Error& e) {
    return record(slot, toResult(e.code()), fn, e.what());
  } catch (const std::bad_alloc&) {
    return record(slot, gyreSystemError, fn, "out of memory");
  } catch (const std::exception& e) {
    return record(slot, gyreInternalError, fn, e.what());
  } catch (...) {
    return record(slot, gyreInternalError, fn, "unknown exception");
  }
}

inline ErrorSlot* slotOf(const gyreComm* comm) { return comm ? comm->errors.get() : nullptr; }

// Throw kInvalidArgument for a NULL handle or out-parameter.
Communicator& need(gyreComm* comm);
inline void needOut(const void* out, const char* name) {
  if (out == nullptr) fail(ErrorCode::kInvalidArgument, "{} is NULL", name);
}

// A C enum argument as the int the caller passed. C lets an enum hold any int, but in C++
// loading an enum object whose value lies outside its enumerators' range (0..15 for
// gyreDataType_t) is undefined, so entry points read their enum parameters' bytes
// instead, and check the range before narrowing to gyre's enums.
template <typename Enum>
int raw(const Enum& value) {
  static_assert(sizeof(Enum) == sizeof(int), "C enums are int-sized on this ABI");
  int out;
  std::memcpy(&out, &value, sizeof(out));
  return out;
}
// The C enum values, checked; the messages name `comm`'s rank, as every message does.
DataType toDataType(int datatype, int rank);
ReduceOp toReduceOp(int op, int rank);
inline DataType toDataType(int datatype, const Communicator& comm) {
  return toDataType(datatype, comm.rank());
}
inline ReduceOp toReduceOp(int op, const Communicator& comm) { return toReduceOp(op, comm.rank()); }

gyreComm* wrap(std::unique_ptr<Communicator> comm);

// Issues one operation: blocking (request == nullptr) or async into *request (NULL on
// failure). `op(comm, async)` validates its arguments and returns the Work (a finished
// one when blocking).
template <typename Issue>
gyreResult_t issue(gyreComm* comm, gyreRequest_t* request, const char* fn, Issue&& op) {
  if (request) *request = nullptr;
  return guarded(slotOf(comm), fn, [&] {
    Communicator& c = need(comm);
    if (!request) {
      op(c, false);
      return;
    }
    auto handle = std::make_unique<gyreRequest>();
    handle->errors = comm->errors;
    handle->work = op(c, true);
    comm->lastAsync = handle->work;
    *request = handle.release();
  });
}

// The *Async entry points check this first: a NULL request is an argument error (not a
// request for the blocking form). True (and recorded) when it is missing.
bool requestMissing(gyreComm* comm, gyreRequest_t* request, const char* fn);

}  // namespace gyre::capi
