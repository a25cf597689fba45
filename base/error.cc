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

Error::Error(ErrorCode code, const std::string& message)
    : std::runtime_error(message), code_(code) {}

void failSystem(int err, const std::string& what) {
  throw Error(ErrorCode::kSystemError, fmt::format("{}: {}", what, std::strerror(err)));
}

}  // namespace gyre
