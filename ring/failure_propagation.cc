#include "ring/failure_propagation.h"

#include <fmt/format.h>

#include "collectives/stall_inspector.h"

namespace gyre {
namespace {

// A reason travels to other ranks, where "this rank" would name the wrong one.
std::string withRank(std::string text, int rank) {
  const std::string from = "this rank";
  const std::string to = fmt::format("rank {}", rank);
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
  return text;
}

}  // namespace

Failure classifyFailure(const Error& error, int self, const StallInspector& inspector,
                        const std::string& localAbort) {
  Failure f;
  f.code = error.code();
  f.reporter = self;
  f.detail = error.what();
  if (const auto* remote = dynamic_cast<const PeerAbortError*>(&error)) {
    // Another rank's failure, relayed: keep its culprit, code and words.
    const PeerStatus& s = remote->status();
    f.code = s.code;
    f.culprit = s.suspect;
    f.reporter = s.reporter;
    f.via = inspector.peer();
    f.detail = s.reason;
    return f;
  }
  switch (error.code()) {
    case ErrorCode::kTimeout: {
      StallInspector::Blame b = inspector.blame();
      f.culprit = b.suspect;
      f.detail = fmt::format("{}; {}", error.what(), b.story);
      break;
    }
    case ErrorCode::kAborted:
      f.culprit = self;
      if (!localAbort.empty()) f.detail = localAbort;
      break;
    case ErrorCode::kMismatch:
    case ErrorCode::kRemoteError:
    case ErrorCode::kSystemError:
      f.culprit = inspector.peer();
      break;
    default:
      f.culprit = self;
      break;
  }
  return f;
}

std::string failureHeadline(const Failure& f) {
  switch (f.code) {
    case ErrorCode::kTimeout:
      return f.culprit >= 0 ? fmt::format("rank {} stalled", f.culprit) : "a rank stalled";
    case ErrorCode::kMismatch:
      return "collective mismatch";
    case ErrorCode::kAborted:
      return "aborted";
    default:
      return f.culprit >= 0 ? fmt::format("rank {} failed", f.culprit) : "a rank failed";
  }
}

std::string failureMessage(int self, const CollectiveCall& call, size_t sent, size_t received,
                           const Failure& f) {
  std::string head = fmt::format("rank {}: {} failed after sending {} and receiving {} bytes: {}",
                                 self, describe(call), sent, received, failureHeadline(f));
  if (f.reporter == self || f.reporter < 0) return fmt::format("{}: {}", head, f.detail);
  return fmt::format("{}: rank {} reported: {} (the abort reached this rank from peer rank {})",
                     head, f.reporter, f.detail, f.via);
}

PeerStatus abortNotice(const Failure& f, int self, uint32_t seq) {
  PeerStatus s;
  s.state = PeerStatus::State::kAborted;
  s.code = f.code;
  s.writer = self;
  s.suspect = f.culprit;
  s.reporter = f.reporter;
  s.seq = seq;
  s.reason = f.reporter == self ? withRank(f.detail, self) : f.detail;
  if (s.reason.size() > PeerStatus::kMaxReasonBytes) {
    s.reason.resize(PeerStatus::kMaxReasonBytes - 3);
    s.reason += "...";
  }
  return s;
}

}  // namespace gyre
