// Timeline: what this process did, when, as Chrome trace events (chrome://tracing,
// Perfetto), written when GYRE_TIMELINE=path is set (Horovod's timeline, per rank).
//
// Who writes spans: the communicator's executing thread (a span per collective, with its
// phases nested inside: collectives/stall_inspector.h), GradSync's worker (a span per
// bucket all-reduce) and gyre-train (forward, backward, optimizer). A span is a complete
// event ("ph": "X") on the calling thread's track, so spans of one thread nest by time.
//
// File: the path with "{rank}" replaced by the rank of the first communicator this
// process created, or, without "{rank}", ".rank<R>" inserted before a ".json" ending (else
// appended, with ".json"). Written whole by flush() (each communicator's destruction, and
// at exit): {"traceEvents": [...], "otherData": {"schema": "gyre-timeline", "version": 1,
// "rank", "clock": {"monotonic_ns", "unix_ns"}, "dropped"}}; ts and dur in microseconds
// of CLOCK_MONOTONIC (tools/gyre_timeline_merge.py puts every rank on one clock).
//
// Cost: active() is null when GYRE_TIMELINE is unset, and every caller tests it once per
// span: off costs a branch. On: a lock and a store into a buffer reserved at the first
// span (kCapacity events; later spans are counted as dropped, not stored).
// Names and categories must be string literals (or otherwise live until exit).
// Thread-safe.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace gyre {

struct TimelineArgs {
  int64_t bytes = -1;  // -1: not shown
  int64_t seq = -1;
  int64_t index = -1;  // a bucket's or a step's number
  const char* algorithm = nullptr;
};

class Timeline {
 public:
  static constexpr size_t kCapacity = size_t{1} << 18;

  // The process's timeline, or null when GYRE_TIMELINE is unset.
  static Timeline* active();

  // The rank the file is named after (the first call wins).
  void bindRank(int rank);
  void span(const char* name, const char* category, int64_t startNs, int64_t endNs,
            const TimelineArgs& args = {});
  // Shown as the calling thread's name.
  void nameThisThread(const char* name);
  // Writes the file (again, with everything so far); returns its path ("" before any
  // rank is bound). Failures are logged, not thrown.
  std::string flush();

  explicit Timeline(std::string pathPattern);

 private:
  struct Event {
    const char* name;
    const char* category;
    int64_t startNs, endNs;
    int tid;
    TimelineArgs args;
  };
  std::string path() const;

  const std::string pattern_;
  std::mutex mu_;
  int rank_ = -1;
  std::vector<Event> events_;
  std::vector<std::pair<int, std::string>> threadNames_;
  uint64_t dropped_ = 0;
};

}  // namespace gyre
