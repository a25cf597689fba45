// FlightRecorder: the last N operations of one communicator, kept in a fixed ring so that
// a job that fails or hangs can say what every rank was doing (torch's flight recorder).
//
// What an entry holds: the record number (its place in this rank's issue order), the
// collective's sequence number (null until it starts; send/recv count per peer), the
// call (collective, dtype, op, count, root, peer), the caller's own name for it where one
// was given (Communicator::nameNextCall: gyre_torch gives torch's, "all_gather_into_tensor"
// for an all-gather of bytes; at most kNameBytes kept), the algorithm that ran it, its state
// (queued, started, completed, failed), its queued/start/end times (CLOCK_MONOTONIC ns,
// comparable between processes of one host; a dump carries a monotonic/realtime pair to
// put hosts on one clock) and the bytes it had sent and received.
//
// Cost (docs/observability.md, "Measured cost"): capacity 0 (GYRE_TRACE_BUFFER=0) turns
// every call into one branch. Otherwise issued(), started() and finished() are a
// time-stamp counter read (rdtsc, cheaper than clock_gettime, which a VM's clock source
// can make several times slower; converted to CLOCK_MONOTONIC ns at dump time from two
// (counter, clock) pairs, the construction's and the dump's; other CPUs read the clock)
// and a few atomic stores (plain moves on x86) into a slot allocated at construction (no
// allocation, no lock per operation); the bytes moved are published by the stall
// inspector per slice through live(). A dump (toJson(), dumpTo()) allocates and may run
// on any thread at any time: every field it reads is atomic, and an entry is re-read if
// its record number changed while it was read, so a dump never shows a mix of two
// operations (it may show one a moment old).
//
// With more than N operations queued at once (async calls), the oldest queued ones lose
// their entries before they start (their started()/finished() find the slot taken).
//
// Threads: issued() from the issuing thread (one at a time, the communicator's rule);
// started(), live() and finished() from the executing thread (the operation queue's),
// in issue order; toJson() and dumpTo() from any thread.
// The dump format is docs/observability.md's "gyre-flight-recorder" schema, version 1; each
// dump also names the gyre that wrote it ("gyre_version", "gyre_commit").
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "collectives/collective.h"

namespace gyre {

class FlightRecorder {
 public:
  enum class State : uint8_t { kEmpty = 0, kQueued = 1, kStarted = 2, kCompleted = 3, kFailed = 4 };

  // The bytes the running operation has moved, written per slice by the stall inspector.
  struct Live {
    std::atomic<uint64_t> record{~uint64_t{0}};
    std::atomic<uint64_t> sent{0};
    std::atomic<uint64_t> received{0};
  };

  // capacity 0: off. Otherwise rounded up to a power of two. `comm` names the
  // communicator the same way on every rank (its store prefix).
  FlightRecorder(size_t capacity, int rank, int size, std::string comm);
  ~FlightRecorder();
  FlightRecorder(const FlightRecorder&) = delete;
  FlightRecorder& operator=(const FlightRecorder&) = delete;

  bool enabled() const { return mask_ != kOff; }
  size_t capacity() const { return enabled() ? mask_ + 1 : 0; }

  // Issuing thread. A new entry (queued); returns its record number (kNone when off).
  // `name`: the caller's name for the call (empty: none), cut to kNameBytes.
  static constexpr uint64_t kNone = ~uint64_t{0};
  static constexpr size_t kNameBytes = 24;
  uint64_t issued(const CollectiveCall& call, int peer, std::string_view name = {}) {
    if (!enabled()) return kNone;
    return issue(call, peer, name);
  }
  // Executing thread: the operation starts (call.seq and call.algo are now set), or ends.
  void started(uint64_t record, const CollectiveCall& call) {
    if (record != kNone) start(record, call);
  }
  void finished(uint64_t record, bool ok, size_t sent, size_t received) {
    if (record != kNone) finish(record, ok, sent, received);
  }
  // An operation that ends before it starts (the communicator was already aborted).
  void refused(uint64_t record, uint32_t seq) {
    if (record != kNone) refuse(record, seq);
  }
  Live* live() { return enabled() ? &live_ : nullptr; }

  // Any thread. The dump: `reason` says why ("failure", "SIGUSR1", "dumpTrace()", ...),
  // `detail` the failure message if any.
  std::string toJson(const std::string& reason, const std::string& detail) const;
  // Writes toJson() to dir/gyre-trace-<comm>-rank<R>.json (through a temporary file and a
  // rename, so a reader never sees half a dump) and returns the path. Throws
  // kInvalidArgument naming the path when it cannot be written.
  std::string dumpTo(const std::string& dir, const std::string& reason,
                     const std::string& detail) const;

  int rank() const { return rank_; }

 private:
  struct alignas(64) Entry {
    std::atomic<uint64_t> record{kNone};
    std::atomic<uint32_t> seq{0};
    std::atomic<uint8_t> kind{0}, dtype{0}, op{0}, algo{0};
    std::atomic<uint8_t> state{0};
    std::atomic<bool> hasSeq{false};
    std::atomic<int32_t> root{-1}, peer{-1};
    std::atomic<uint64_t> count{0};
    std::atomic<uint64_t> queued{0}, start{0}, end{0};  // ticks(); 0: not yet
    std::atomic<uint64_t> sent{0}, received{0};
    std::atomic<uint64_t> name[FlightRecorder::kNameBytes / 8] = {};  // NUL-padded bytes
  };
  static constexpr size_t kOff = ~size_t{0};

  uint64_t issue(const CollectiveCall& call, int peer, std::string_view name);
  void start(uint64_t record, const CollectiveCall& call);
  void finish(uint64_t record, bool ok, size_t sent, size_t received);
  void refuse(uint64_t record, uint32_t seq);
  Entry* slotOf(uint64_t record) const;  // null if the ring has moved past it
  // ticks() -> CLOCK_MONOTONIC ns: t * scale + offset.
  struct TickClock {
    double scale = 1;
    double offset = 0;
    int64_t ns(uint64_t t) const {
      return static_cast<int64_t>(static_cast<double>(t) * scale + offset);
    }
  };
  TickClock tickClock() const;
  std::string entryJson(const Entry& e, uint64_t record, const TickClock& clock) const;

  const size_t mask_;
  const int rank_;
  const int size_;
  const std::string comm_;
  std::unique_ptr<Entry[]> entries_;
  std::atomic<uint64_t> next_{0};  // record numbers issued so far
  Live live_;
  const uint64_t tick0_;  // ticks() and monotonicNs() at construction
  const int64_t ns0_;
};

// CLOCK_MONOTONIC in ns, the dumps' and the timeline's clock.
int64_t monotonicNs();
// The recorder's cheap clock: the time-stamp counter on x86, else monotonicNs().
uint64_t ticks();

}  // namespace gyre
