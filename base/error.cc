#include "base/error.h"

#include <cstring>

namespace gyre {

const char* errorCodeName(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument: return "invalid argument";
    case ErrorCode::kTimeout: return "timeout";
    case ErrorCode::kRemoteError: return "remote error";
    case ErrorCode::kMismatch: return "collective mismatch";
    case ErrorCode::kAborted: return "aborted";
    case ErrorCode::kSystemError: return "system error";
    case ErrorCode::kInternal: return "internal error";
  }
  return "unknown error";
}

ErrorCode errorCodeFromInt(int value, ErrorCode fallback) {
  switch (static_cast<ErrorCode>(value)) {
    case ErrorCode::kInvalidArgument:
    case ErrorCode::kTimeout:
    case ErrorCode::kRemoteError:
    case ErrorCode::kMismatch:
    case ErrorCode::kAborted:
    case ErrorCode::kSystemError:
    case ErrorCode::kInternal:
      return static_cast<ErrorCode>(value);
  }
  return fallback;
}

const char* errorCauseName(ErrorCause cause) {
  switch (cause) {
    case ErrorCause::kUnspecified: return "unspecified";
    case ErrorCause::kStoreLost: return "store lost";
    case ErrorCause::kFailedElsewhere: return "failed on another rank";
    case ErrorCause::kRankLeft: return "a rank left";
    case ErrorCause::kRevoked: return "revoked";
  }
  return "unknown cause";
}

Error::Error(ErrorCode code, const std::string& message, ErrorCause cause)
    : std::runtime_error(message), code_(code), cause_(cause) {}

void failSystem(int err, const std::string& what) {
  throw Error(ErrorCode::kSystemError, fmt::format("{}: {}", what, std::strerror(err)));
}

}  // namespace gyre
