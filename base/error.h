// gyre::Error: the one exception type the library throws.
//
// Contract: every failure a user can cause or observe surfaces as a gyre::Error whose
// message names what went wrong: this rank, the peer involved (if any) and the
// collective with its sequence number (if any). `code()` lets programs branch without
// parsing text; the C API maps it to a result code. `cause()` says more where code that
// recovers must tell apart errors of one code (the store went away, or another rank
// published a failure): no code in gyre matches message text. Immutable after
// construction, so safe to share between threads (as std::exception_ptr).
#pragma once

#include <stdexcept>
#include <string>

#include <fmt/format.h>

#include "base/export.h"

namespace gyre {

enum class ErrorCode : int {
  kInvalidArgument = 1,  // the caller passed something wrong; nothing was sent
  kTimeout = 2,          // a bounded wait expired (a stalled or absent peer)
  kRemoteError = 3,      // a peer closed, reset or reported a failure
  kMismatch = 4,         // ranks issued different collectives
  kAborted = 5,          // abort() was called, or an earlier failure aborted the communicator
  kSystemError = 6,      // an OS call failed (socket, mmap, ...)
  kInternal = 7,         // a broken invariant inside gyre: a bug, please report it
};

GYRE_API const char* errorCodeName(ErrorCode code);
// The code whose number is `value` (as published between ranks), or `fallback`.
GYRE_API ErrorCode errorCodeFromInt(int value, ErrorCode fallback);

// Finer than the code, for the places that must branch on what happened.
enum class ErrorCause : int {
  kUnspecified = 0,
  kStoreLost = 1,          // the connection to the bootstrap store closed or failed
  kFailedElsewhere = 2,    // another rank published why creation failed (the join)
  kRankLeft = 3,           // a rank's process ended while the communicator was created
  kRevoked = 4,            // revoke() was called on this communicator
};

GYRE_API const char* errorCauseName(ErrorCause cause);

class GYRE_API Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message,
        ErrorCause cause = ErrorCause::kUnspecified);
  ErrorCode code() const { return code_; }
  ErrorCause cause() const { return cause_; }

 private:
  ErrorCode code_;
  ErrorCause cause_;
};

// Throws Error(code, formatted message).
template <typename... Args>
[[noreturn]] void fail(ErrorCode code, fmt::format_string<Args...> f, Args&&... args) {
  throw Error(code, fmt::format(f, std::forward<Args>(args)...));
}

// Throws Error(code, formatted message, cause).
template <typename... Args>
[[noreturn]] void failWith(ErrorCode code, ErrorCause cause, fmt::format_string<Args...> f,
                           Args&&... args) {
  throw Error(code, fmt::format(f, std::forward<Args>(args)...), cause);
}

// Throws kSystemError with `what` and strerror(err) appended.
[[noreturn]] GYRE_API void failSystem(int err, const std::string& what);

}  // namespace gyre
