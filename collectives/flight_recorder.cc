#include "collectives/flight_recorder.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

#include <fmt/format.h>

#include "base/error.h"
#include "base/version.h"
#include "collectives/allreduce_algo.h"

namespace gyre {

namespace {

constexpr std::memory_order kRelaxed = std::memory_order_relaxed;
// An entry's fields are written with release and read with acquire (plain moves on
// x86, like relaxed): what the seqlock below needs, with no fence (which TSan cannot
// follow).
constexpr std::memory_order kFieldStore = std::memory_order_release;
constexpr std::memory_order kFieldLoad = std::memory_order_acquire;

size_t roundUpPowerOfTwo(size_t n) {
  size_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

const char* stateName(FlightRecorder::State s) {
  switch (s) {
    case FlightRecorder::State::kQueued:
      return "queued";
    case FlightRecorder::State::kStarted:
      return "started";
    case FlightRecorder::State::kCompleted:
      return "completed";
    case FlightRecorder::State::kFailed:
      return "failed";
    case FlightRecorder::State::kEmpty:
      break;
  }
  return "empty";
}

std::string jsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// A file name part from the communicator's store prefix: letters, digits, '-' and '.'.
std::string fileTag(const std::string& comm) {
  std::string tag;
  for (char c : comm) {
    const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (plain) {
      tag += c;
    } else if (!tag.empty() && tag.back() != '.') {
      tag += '.';
    }
  }
  while (!tag.empty() && tag.back() == '.') tag.pop_back();
  return tag.empty() ? "comm" : tag;
}

}  // namespace

int64_t monotonicNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

uint64_t ticks() {
#if defined(__x86_64__) || defined(__i386__)
  return __rdtsc();
#else
  return static_cast<uint64_t>(monotonicNs());
#endif
}

FlightRecorder::TickClock FlightRecorder::tickClock() const {
#if defined(__x86_64__) || defined(__i386__)
  // The counter's rate from the construction's pair and one taken now, at least 2 ms
  // apart (a dump right after creation waits that long; bounded).
  int64_t ns1 = monotonicNs();
  while (ns1 - ns0_ < 2'000'000) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    ns1 = monotonicNs();
  }
  const uint64_t t1 = ticks();
  TickClock c;
  c.scale = t1 > tick0_ ? static_cast<double>(ns1 - ns0_) / static_cast<double>(t1 - tick0_) : 1;
  c.offset = static_cast<double>(ns0_) - static_cast<double>(tick0_) * c.scale;
  return c;
#else
  return TickClock{};
#endif
}

FlightRecorder::FlightRecorder(size_t capacity, int rank, int size, std::string comm)
    : mask_(capacity == 0 ? kOff : roundUpPowerOfTwo(capacity) - 1),
      rank_(rank),
      size_(size),
      comm_(std::move(comm)),
      tick0_(ticks()),
      ns0_(monotonicNs()) {
  if (enabled()) entries_.reset(new Entry[mask_ + 1]);
}

FlightRecorder::~FlightRecorder() = default;

// Seqlock-style: the slot's record number is cleared before its fields change and set
// after, so a dump that reads the same number before and after its reads saw one entry.
// Why without fences: a dump whose field load sees a value of a later issue() (a release
// store after the clearing) acquires it, so its second read of the number sees the
// clearing or later and it reads again.
uint64_t FlightRecorder::issue(const CollectiveCall& call, int peer, std::string_view name) {
  const uint64_t record = next_.load(kRelaxed);
  next_.store(record + 1, kRelaxed);
  Entry& e = entries_[record & mask_];
  e.record.store(kNone, kFieldStore);
  e.kind.store(static_cast<uint8_t>(call.kind), kFieldStore);
  e.dtype.store(static_cast<uint8_t>(call.dtype), kFieldStore);
  e.op.store(static_cast<uint8_t>(call.op), kFieldStore);
  e.algo.store(0, kFieldStore);
  e.hasSeq.store(false, kFieldStore);
  e.root.store(call.root, kFieldStore);
  e.peer.store(peer, kFieldStore);
  e.count.store(call.count, kFieldStore);
  e.queued.store(ticks(), kFieldStore);
  e.start.store(0, kFieldStore);
  e.end.store(0, kFieldStore);
  e.sent.store(0, kFieldStore);
  e.received.store(0, kFieldStore);
  char bytes[kNameBytes] = {};
  std::memcpy(bytes, name.data(), std::min(name.size(), kNameBytes));
  for (size_t i = 0; i < kNameBytes / 8; ++i) {
    uint64_t word;
    std::memcpy(&word, bytes + 8 * i, 8);
    e.name[i].store(word, kFieldStore);
  }
  e.state.store(static_cast<uint8_t>(State::kQueued), kFieldStore);
  e.record.store(record, std::memory_order_release);
  return record;
}

FlightRecorder::Entry* FlightRecorder::slotOf(uint64_t record) const {
  Entry& e = entries_[record & mask_];
  return e.record.load(kRelaxed) == record ? &e : nullptr;
}

void FlightRecorder::start(uint64_t record, const CollectiveCall& call) {
  live_.sent.store(0, kRelaxed);
  live_.received.store(0, kRelaxed);
  live_.record.store(record, kRelaxed);
  Entry* e = slotOf(record);
  if (e == nullptr) return;  // more than N operations were queued behind it
  e->seq.store(call.seq, kRelaxed);
  e->hasSeq.store(true, kRelaxed);
  e->algo.store(call.algo, kRelaxed);
  e->root.store(call.root, kRelaxed);  // send/recv: set when it runs
  e->start.store(ticks(), kRelaxed);
  e->state.store(static_cast<uint8_t>(State::kStarted), std::memory_order_release);
}

void FlightRecorder::finish(uint64_t record, bool ok, size_t sent, size_t received) {
  live_.record.store(kNone, kRelaxed);
  Entry* e = slotOf(record);
  if (e == nullptr) return;
  e->sent.store(sent, kRelaxed);
  e->received.store(received, kRelaxed);
  e->end.store(ticks(), kRelaxed);
  e->state.store(static_cast<uint8_t>(ok ? State::kCompleted : State::kFailed),
                 std::memory_order_release);
}

void FlightRecorder::refuse(uint64_t record, uint32_t seq) {
  Entry* e = slotOf(record);
  if (e == nullptr) return;
  e->seq.store(seq, kRelaxed);
  e->hasSeq.store(true, kRelaxed);
  e->end.store(ticks(), kRelaxed);
  e->state.store(static_cast<uint8_t>(State::kFailed), std::memory_order_release);
}

std::string FlightRecorder::entryJson(const Entry& e, uint64_t record,
                                      const TickClock& clock) const {
  const auto state = static_cast<State>(e.state.load(std::memory_order_acquire));
  const auto kind = static_cast<CollectiveKind>(e.kind.load(kFieldLoad));
  const uint8_t algo = e.algo.load(kFieldLoad);
  const uint64_t start = e.start.load(kFieldLoad);
  const uint64_t end = e.end.load(kFieldLoad);
  uint64_t sent = e.sent.load(kFieldLoad);
  uint64_t received = e.received.load(kFieldLoad);
  if (state == State::kStarted && live_.record.load(kRelaxed) == record) {
    sent = live_.sent.load(kRelaxed);
    received = live_.received.load(kRelaxed);
  }
  const auto nsOrNull = [&clock](uint64_t t) {
    return t == 0 ? std::string("null") : std::to_string(clock.ns(t));
  };
  char bytes[kNameBytes];
  for (size_t i = 0; i < kNameBytes / 8; ++i) {
    const uint64_t word = e.name[i].load(kFieldLoad);
    std::memcpy(bytes + 8 * i, &word, 8);
  }
  const std::string_view name(bytes, ::strnlen(bytes, kNameBytes));
  return fmt::format(
      "{{\"record\": {}, \"seq\": {}, \"collective\": \"{}\", \"call\": {}, \"dtype\": \"{}\", "
      "\"op\": \"{}\", \"count\": {}, \"root\": {}, \"peer\": {}, \"algorithm\": {}, \"state\": \"{}\", "
      "\"queued_ns\": {}, \"start_ns\": {}, \"end_ns\": {}, \"bytes_sent\": {}, "
      "\"bytes_received\": {}}}",
      record, e.hasSeq.load(kFieldLoad) ? std::to_string(e.seq.load(kFieldLoad)) : "null",
      collectiveName(kind), name.empty() ? std::string("null") : jsonString(std::string(name)),
      dtypeName(static_cast<DataType>(e.dtype.load(kFieldLoad))),
      opName(static_cast<ReduceOp>(e.op.load(kFieldLoad))), e.count.load(kFieldLoad),
      e.root.load(kFieldLoad), e.peer.load(kFieldLoad),
      algo == 0 ? std::string("null") : jsonString(algoName(static_cast<AllReduceAlgo>(algo))),
      stateName(state), nsOrNull(e.queued.load(kFieldLoad)), nsOrNull(start), nsOrNull(end), sent,
      received);
}

std::string FlightRecorder::toJson(const std::string& reason, const std::string& detail) const {
  const TickClock clock = tickClock();
  const int64_t mono = monotonicNs();
  const int64_t unixNs = std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  char host[256] = "?";
  ::gethostname(host, sizeof(host) - 1);
  const uint64_t issued = next_.load(kRelaxed);
  std::string out = "{\n";
  out += "  \"schema\": \"gyre-flight-recorder\",\n  \"version\": 1,\n";
  // The gyre that wrote it: dumps of one job from different builds are told apart.
  out += fmt::format("  \"gyre_version\": {},\n  \"gyre_commit\": {},\n", jsonString(version()),
                     jsonString(versionCommit()));
  out += fmt::format("  \"rank\": {},\n  \"size\": {},\n  \"comm\": {},\n", rank_, size_,
                     jsonString(comm_));
  out += fmt::format("  \"host\": {},\n  \"pid\": {},\n", jsonString(host),
                     static_cast<int>(::getpid()));
  out += fmt::format("  \"reason\": {},\n  \"detail\": {},\n", jsonString(reason),
                     detail.empty() ? "null" : jsonString(detail));
  out += fmt::format("  \"clock\": {{\"monotonic_ns\": {}, \"unix_ns\": {}}},\n", mono, unixNs);
  out += fmt::format("  \"capacity\": {},\n  \"recorded\": {},\n", capacity(), issued);
  out += "  \"entries\": [";
  bool first = true;
  if (enabled()) {
    const uint64_t oldest = issued > capacity() ? issued - capacity() : 0;
    for (uint64_t record = oldest; record < issued; ++record) {
      const Entry& e = entries_[record & mask_];
      // A few tries: the issuing thread may be rewriting this very slot.
      for (int attempt = 0; attempt < 3; ++attempt) {
        if (e.record.load(std::memory_order_acquire) != record) break;
        std::string text = entryJson(e, record, clock);  // acquire loads (issue())
        if (e.record.load(kRelaxed) != record) continue;
        out += first ? "\n    " : ",\n    ";
        out += text;
        first = false;
        break;
      }
    }
  }
  out += first ? "]\n}\n" : "\n  ]\n}\n";
  return out;
}

std::string FlightRecorder::dumpTo(const std::string& dir, const std::string& reason,
                                   const std::string& detail) const {
  const std::string path = fmt::format("{}/gyre-trace-{}-rank{}.json", dir, fileTag(comm_), rank_);
  // A name of its own per dump: a failure's dump and a SIGUSR1 or dumpTrace() one may
  // be written at once.
  static std::atomic<uint64_t> dumps{0};
  const std::string tmp =
      fmt::format("{}.tmp{}.{}", path, static_cast<int>(::getpid()), dumps.fetch_add(1, kRelaxed));
  const std::string text = toJson(reason, detail);
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) {
    fail(ErrorCode::kInvalidArgument,
         "rank {}: flight recorder: cannot write {}: {} (GYRE_TRACE_DIR)", rank_, tmp,
         std::strerror(errno));
  }
  const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const bool closed = std::fclose(f) == 0;
  if (!written || !closed || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    fail(ErrorCode::kSystemError, "rank {}: flight recorder: writing {} failed: {}", rank_, path,
         std::strerror(err));
  }
  return path;
}

}  // namespace gyre
